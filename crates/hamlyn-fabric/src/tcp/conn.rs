//! One TCP connection (one rail): its handshake phase, its receive state machine and its
//! send queue.
//!
//! The receive side ([`Rx::pump`]) reads into a small staging buffer, runs it through the
//! [`FrameDecoder`], and hands packets to the sink in two phases. Whenever the staging
//! buffer is used up in the middle of an accepted packet's payload, the next read goes
//! straight into the sink's payload buffer (with one vectored read that also fetches the
//! following headers into the staging buffer), so large payloads are never copied; only
//! payload bytes that happened to arrive in the same read as their header are copied out
//! of the staging buffer. A read that returns less than it asked for drained the socket:
//! the pump stops there instead of paying a system call to hear `WouldBlock`, and the
//! poller's next (edge-triggered) readiness event says when more bytes arrive; once the
//! poller reported the peer's end of stream or an error, reads go on until they say so.
//! On an authenticated connection the link reads the ciphertext, opens each record where
//! it lies, and the decoder runs on that plaintext (no staging buffer is allocated).
//! It is generic over [`Read`] and tested with scripted readers.

use std::collections::VecDeque;
use std::io::{self, IoSliceMut, Read};
use std::net::SocketAddr;

use hamlyn_core::Instant;
use hamlyn_wire::{Header, NodeId, Op, WireError, HEADER_LEN, MAX_META_LEN};

use super::ack::{Received, Unacked};
use super::frame::{FrameDecoder, FrameError, Token};
use super::secure::{Link, LinkError, Opened, ReplayGuard};
use super::stats::CloseReason;
use super::tx::TxQueue;
use crate::fabric::{Landing, PacketSink, PeerEvent};

/// Bytes of the per-connection staging buffer headers are read into.
pub(crate) const STAGING_LEN: usize = 64 << 10;

/// Who opened the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// We dialed (our node id is the lower one).
    Dialer,
    /// Our listener accepted it.
    Acceptor,
}

/// Where the connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Non-blocking connect in progress (dialer).
    Connecting,
    /// Connected, our HELLO sent, waiting for the acceptor's (dialer).
    AwaitReply,
    /// Accepted, waiting for the dialer's HELLO (acceptor).
    AwaitHello,
    /// Handshake done: the connection is a rail of its peer's session.
    Open,
    /// A membership query was answered; nothing more is read, and the connection is
    /// closed once the reply is flushed (acceptor).
    Answered,
}

/// The packet whose payload is being received.
#[derive(Clone, Copy, Debug)]
enum RxLanding {
    /// Between packets, or inside a control packet.
    Idle,
    /// Accepted: payload goes to the sink's buffer.
    Accept {
        header: Header,
        meta: [u8; MAX_META_LEN],
    },
    /// Discarded by the sink: payload is read and dropped.
    Discard,
}

/// Why [`Rx::pump`] returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RxStop {
    /// The socket has nothing more for now.
    Idle,
    /// The poll's packet budget is used up.
    Budget,
    /// The next packet waits until the connection's session is up.
    Stalled,
    /// A HELLO arrived during the handshake; the fabric must handle it before more
    /// bytes of this connection are looked at.
    Hello(Header),
    /// The acceptor read the first handshake message ([`Opened::Reply`]): it must send
    /// the second.
    Reply,
    /// The connection's Noise handshake completed ([`Opened::Secured`]): the dialer
    /// must check the acceptor's static key, then send the third handshake message and
    /// its HELLO.
    Secured,
    /// The connection must be closed.
    Close(CloseReason, String),
    /// The sink gave a payload buffer of the wrong length; the packet's payload is being
    /// discarded.
    SinkBuffer {
        /// The packet's payload length.
        expected: u64,
        /// The buffer's length.
        got: u64,
    },
}

/// What one pump of one connection counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RxCounts {
    /// Packets delivered to the sink (accepted or discarded).
    pub(crate) packets: u64,
    /// Their bytes.
    pub(crate) bytes: u64,
    /// Heartbeats consumed.
    pub(crate) heartbeats: u64,
    /// Packets whose payload was placed or discarded whole (what the rail acknowledges).
    pub(crate) whole: u64,
    /// The highest acknowledgement a heartbeat carried (packets of ours the peer has).
    pub(crate) acked: Option<u64>,
    /// Reads of the socket that found nothing (`WouldBlock`).
    pub(crate) empty_reads: u64,
}

/// What [`Rx::pump`] needs to know about the connection and the fabric.
pub(crate) struct RxCtx<'a> {
    /// This node.
    pub(crate) me: NodeId,
    /// The connection's peer, once its handshake named it.
    pub(crate) peer: Option<NodeId>,
    /// The connection is still in its handshake: the next frame must be a HELLO.
    pub(crate) handshake: bool,
    /// The connection's session is up: packets may be delivered.
    pub(crate) deliver: bool,
    /// Peer events to hand to the sink before the next packet.
    pub(crate) events: &'a mut VecDeque<PeerEvent>,
    /// Packets the poll may still deliver.
    pub(crate) budget: &'a mut usize,
    /// Counters to add to.
    pub(crate) counts: &'a mut RxCounts,
    /// The listener's memory of first handshake messages (acceptors of a secure
    /// fabric).
    pub(crate) replay: Option<&'a mut ReplayGuard>,
}

/// The receive half of a connection.
pub(crate) struct Rx {
    decoder: FrameDecoder,
    /// Bytes read from a connection in clear ([`STAGING_LEN`], allocated at its first
    /// read: a secured connection decodes in its link's buffer and never needs it).
    staging: Box<[u8]>,
    start: usize,
    end: usize,
    landing: RxLanding,
    /// The socket may have bytes (set by readiness events, cleared on `WouldBlock` or a
    /// short read).
    pub(crate) ready: bool,
    /// The poller reported the read side closed or an error: read until a read says so
    /// (a short read no longer means "drained, wait for the next event").
    pub(crate) closing: bool,
    /// Set whenever bytes arrive.
    pub(crate) got_bytes: bool,
}

impl Rx {
    pub(crate) fn new(max_payload: u32) -> Rx {
        Rx {
            decoder: FrameDecoder::new(max_payload),
            staging: Box::default(),
            start: 0,
            end: 0,
            landing: RxLanding::Idle,
            ready: true,
            closing: false,
            got_bytes: false,
        }
    }

    /// Whether a pump could make progress (readiness, or staged bytes).
    pub(crate) fn has_work(&self) -> bool {
        self.ready || self.start < self.end
    }

    /// Delivers what has arrived, reading from `r` until it would block, the budget is
    /// used up, the connection must stall or be closed, or a HELLO needs the fabric.
    ///
    /// With a `link` (an authenticated connection), bytes from `r` are the link's
    /// handshake messages and records, and the frame decoder sees only what records
    /// opened, where the link opened them: nothing reaches the sink before it
    /// authenticated (so payloads are copied from the link's buffer, never read
    /// straight into the sink's buffer).
    pub(crate) fn pump<R: Read>(
        &mut self,
        r: &mut R,
        link: Option<&mut Link>,
        sink: &mut dyn PacketSink,
        ctx: &mut RxCtx<'_>,
    ) -> RxStop {
        if let Some(link) = link {
            return self.pump_link(r, link, sink, ctx);
        }
        loop {
            if let Some(stop) = self.decode_staged(sink, ctx) {
                return stop;
            }
            // Everything staged is consumed: read more, if the socket may have any.
            self.start = 0;
            self.end = 0;
            if !self.ready {
                return RxStop::Idle;
            }
            if self.staging.is_empty() {
                self.staging = vec![0; STAGING_LEN].into_boxed_slice();
            }
            let mut asked = self.staging.len();
            let read = match (self.decoder.payload_remaining(), &self.landing) {
                (Some((at, left)), RxLanding::Accept { header, .. }) if left > 0 => {
                    let header = *header;
                    let mut buf = sink.payload_buf(&header);
                    if buf.len() != header.payload_len as usize {
                        return self.sink_error(&header, buf.len());
                    }
                    let mut direct = buf.tail(at as usize);
                    asked += direct.len();
                    let mut iov = [
                        direct.io_slice_mut(),
                        IoSliceMut::new(&mut self.staging[..]),
                    ];
                    r.read_vectored(&mut iov).inspect(|&n| {
                        let d = n.min(left as usize);
                        self.decoder.payload_read_direct(d);
                        self.end = n - d;
                    })
                }
                _ => r.read(&mut self.staging[..]).inspect(|&n| self.end = n),
            };
            match read {
                Ok(0) => {
                    self.ready = false;
                    return match self.decoder.finish() {
                        Ok(()) => RxStop::Close(CloseReason::PeerClosed, "end of stream".into()),
                        Err(e) => frame_close(e),
                    };
                }
                Ok(n) => {
                    self.got_bytes = true;
                    if n < asked && !self.closing {
                        self.ready = false;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.ready = false;
                    ctx.counts.empty_reads += 1;
                    return RxStop::Idle;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.ready = false;
                    let reason = if self.decoder.at_boundary() {
                        CloseReason::Io
                    } else {
                        CloseReason::Truncated
                    };
                    return RxStop::Close(reason, format!("read failed: {e}"));
                }
            }
        }
    }

    /// [`Rx::pump`] on an authenticated connection: opens the link's records one by
    /// one and decodes each one's plaintext where it lies, reading more ciphertext
    /// when none is whole.
    fn pump_link<R: Read>(
        &mut self,
        r: &mut R,
        link: &mut Link,
        sink: &mut dyn PacketSink,
        ctx: &mut RxCtx<'_>,
    ) -> RxStop {
        loop {
            match link.open_next(ctx.replay.as_deref_mut()) {
                Ok(Opened::Plain(_)) => {
                    let mut used = 0;
                    let stop = self.decode(link.plain(), &mut used, sink, ctx);
                    link.consume_plain(used);
                    if let Some(stop) = stop {
                        return stop;
                    }
                    continue;
                }
                Ok(Opened::Reply) => return RxStop::Reply,
                Ok(Opened::Secured) => return RxStop::Secured,
                Ok(Opened::NeedMore) => {}
                Err(e) => return link_close(e, ctx.handshake),
            }
            if let Some(stop) = self.read_link(r, link, ctx.counts) {
                return stop;
            }
        }
    }

    /// Reads ciphertext into the link's buffer; `None` to go on opening.
    fn read_link<R: Read>(
        &mut self,
        r: &mut R,
        link: &mut Link,
        counts: &mut RxCounts,
    ) -> Option<RxStop> {
        if !self.ready {
            return Some(RxStop::Idle);
        }
        let buf = link.read_buf();
        let asked = buf.len();
        match r.read(buf) {
            Ok(0) => {
                self.ready = false;
                if link.partial() {
                    return Some(RxStop::Close(
                        CloseReason::Truncated,
                        "end of stream inside a record".into(),
                    ));
                }
                Some(match self.decoder.finish() {
                    Ok(()) => RxStop::Close(CloseReason::PeerClosed, "end of stream".into()),
                    Err(e) => frame_close(e),
                })
            }
            Ok(n) => {
                link.filled(n);
                self.got_bytes = true;
                if n < asked && !self.closing {
                    self.ready = false;
                }
                None
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.ready = false;
                counts.empty_reads += 1;
                Some(RxStop::Idle)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => None,
            Err(e) => {
                self.ready = false;
                let reason = if self.decoder.at_boundary() && !link.partial() {
                    CloseReason::Io
                } else {
                    CloseReason::Truncated
                };
                Some(RxStop::Close(reason, format!("read failed: {e}")))
            }
        }
    }

    #[cold]
    fn sink_error(&mut self, header: &Header, got: usize) -> RxStop {
        self.landing = RxLanding::Discard;
        RxStop::SinkBuffer {
            expected: u64::from(header.payload_len),
            got: got as u64,
        }
    }

    /// Runs the staged bytes through the decoder; `None` when they are all consumed and
    /// more must be read.
    fn decode_staged(&mut self, sink: &mut dyn PacketSink, ctx: &mut RxCtx<'_>) -> Option<RxStop> {
        // Taken for the call (an empty box in its place allocates nothing).
        let staging = std::mem::take(&mut self.staging);
        let mut start = self.start;
        let stop = self.decode(&staging[..self.end], &mut start, sink, ctx);
        self.staging = staging;
        self.start = start;
        stop
    }

    /// Runs `bytes` from `*start` on through the decoder, advancing `*start` past what
    /// it consumed; `None` when it consumed them all and needs more, else why it
    /// stopped. A frame that lies whole in `bytes` at a frame boundary is taken in one
    /// step ([`FrameDecoder::whole`]: the common case of small packets); any other goes
    /// token by token.
    fn decode(
        &mut self,
        bytes: &[u8],
        start: &mut usize,
        sink: &mut dyn PacketSink,
        ctx: &mut RxCtx<'_>,
    ) -> Option<RxStop> {
        loop {
            if self.decoder.at_boundary() && !ctx.handshake {
                if !ctx.deliver {
                    return Some(RxStop::Stalled);
                }
                if *ctx.budget == 0 {
                    return Some(RxStop::Budget);
                }
                if let Some((n, h)) = self.decoder.whole(&bytes[*start..]) {
                    let frame = &bytes[*start..*start + n];
                    *start += n;
                    let (meta, payload) = frame[HEADER_LEN..].split_at(usize::from(h.meta_len));
                    if let Some(stop) = Self::on_frame(&mut self.landing, h, meta, sink, ctx) {
                        return Some(stop);
                    }
                    if !payload.is_empty() {
                        if let Some(stop) = self.place(0, payload, sink) {
                            // The frame is consumed: skipped whole now, as its end would
                            // have been on the token-by-token way's next call.
                            let _ = self.end_frame(sink, ctx);
                            return Some(stop);
                        }
                    }
                    if let Some(stop) = self.end_frame(sink, ctx) {
                        return Some(stop);
                    }
                    continue;
                }
            }
            let (n, token) = match self.decoder.next(&bytes[*start..]) {
                Ok(x) => x,
                Err(e) => return Some(frame_close(e)),
            };
            *start += n;
            match token {
                Token::NeedMore => return None,
                Token::Frame(h) => {
                    let meta = self.decoder.meta();
                    if let Some(stop) = Self::on_frame(&mut self.landing, h, meta, sink, ctx) {
                        return Some(stop);
                    }
                }
                Token::Payload { at, bytes } => {
                    if let Some(stop) = self.place(at, bytes, sink) {
                        return Some(stop);
                    }
                }
                Token::End => {
                    if let Some(stop) = self.end_frame(sink, ctx) {
                        return Some(stop);
                    }
                }
            }
        }
    }

    /// Payload bytes of the current frame, at offset `at` of its payload: into the
    /// sink's buffer if the frame was accepted, else dropped.
    fn place(&mut self, at: u32, bytes: &[u8], sink: &mut dyn PacketSink) -> Option<RxStop> {
        if let RxLanding::Accept { header, .. } = &self.landing {
            let header = *header;
            let mut buf = sink.payload_buf(&header);
            if buf.len() != header.payload_len as usize {
                return Some(self.sink_error(&header, buf.len()));
            }
            buf.copy_from(at as usize, bytes);
        }
        None
    }

    /// The current frame's end: an accepted one is handed to the sink, and either counts
    /// as had.
    fn end_frame(&mut self, sink: &mut dyn PacketSink, ctx: &mut RxCtx<'_>) -> Option<RxStop> {
        let landing = std::mem::replace(&mut self.landing, RxLanding::Idle);
        // A packet counts as had (and is acknowledged) once its payload is placed (after
        // `on_payload`) or skipped whole.
        if matches!(landing, RxLanding::Discard) {
            ctx.counts.whole += 1;
        }
        if let (RxLanding::Accept { header, meta }, Some(peer)) = (landing, ctx.peer) {
            if header.payload_len == 0 {
                let got = sink.payload_buf(&header).len();
                if got != 0 {
                    ctx.counts.whole += 1; // skipped whole
                    return Some(RxStop::SinkBuffer {
                        expected: 0,
                        got: got as u64,
                    });
                }
            }
            sink.on_payload(peer, &header, &meta[..usize::from(header.meta_len)]);
            ctx.counts.whole += 1;
        }
        None
    }

    /// A frame's header and metadata `meta`: checked against the rail, counted, and shown
    /// to the sink, which decides where its payload lands (`landing`).
    fn on_frame(
        landing: &mut RxLanding,
        h: Header,
        meta: &[u8],
        sink: &mut dyn PacketSink,
        ctx: &mut RxCtx<'_>,
    ) -> Option<RxStop> {
        if ctx.handshake {
            if h.op == Op::Hello {
                return Some(RxStop::Hello(h));
            }
            return Some(RxStop::Close(
                CloseReason::NoHello,
                format!("first packet is {:?}, not HELLO", h.op),
            ));
        }
        let Some(peer) = ctx.peer else {
            return Some(RxStop::Close(CloseReason::NoHello, "no peer".into()));
        };
        if h.src != peer || h.dst != ctx.me {
            return Some(RxStop::Close(
                CloseReason::Misaddressed,
                format!("packet {} -> {} on a rail from {peer}", h.src, h.dst),
            ));
        }
        match h.op {
            Op::Hello => Some(RxStop::Close(
                CloseReason::UnexpectedHello,
                "HELLO after the handshake".into(),
            )),
            Op::Heartbeat => {
                if h.meta_len != 0 || h.payload_len != 0 {
                    return Some(RxStop::Close(
                        CloseReason::ControlBody,
                        "heartbeat with a body".into(),
                    ));
                }
                ctx.counts.heartbeats += 1;
                // A heartbeat's `offset` acknowledges the packets of this rail the peer
                // has whole (`ack.rs`).
                ctx.counts.acked = Some(ctx.counts.acked.unwrap_or(0).max(h.offset));
                None
            }
            _ => {
                while let Some(ev) = ctx.events.pop_front() {
                    sink.on_peer(ev);
                }
                *ctx.budget = ctx.budget.saturating_sub(1);
                ctx.counts.packets += 1;
                ctx.counts.bytes += h.packet_len();
                match sink.on_header(peer, &h, meta) {
                    Landing::Accept => {
                        let mut m = [0u8; MAX_META_LEN];
                        m[..meta.len()].copy_from_slice(meta);
                        *landing = RxLanding::Accept { header: h, meta: m };
                    }
                    Landing::Discard => *landing = RxLanding::Discard,
                }
                None
            }
        }
    }
}

/// The close a decoding error calls for.
#[cold]
fn frame_close(e: FrameError) -> RxStop {
    let reason = match &e {
        FrameError::Header(WireError::BadMagic(_)) => CloseReason::BadMagic,
        FrameError::Header(WireError::UnsupportedVersion(_)) => CloseReason::BadVersion,
        FrameError::Header(_) => CloseReason::BadHeader,
        FrameError::PayloadTooLong { .. } => CloseReason::PayloadTooLong,
        FrameError::Truncated { .. } => CloseReason::Truncated,
    };
    RxStop::Close(reason, e.to_string())
}

/// The close a link error calls for: before the handshake's HELLO was accepted the
/// other end has not proven it holds the secret (`AuthFailed`); after, a record that
/// does not open is a refused frame (`BadRecord`).
#[cold]
fn link_close(e: LinkError, handshake: bool) -> RxStop {
    let reason = if handshake {
        CloseReason::AuthFailed
    } else {
        CloseReason::BadRecord
    };
    RxStop::Close(reason, e.to_string())
}

/// One TCP connection and everything the fabric keeps about it.
pub(crate) struct Conn {
    pub(crate) stream: mio::net::TcpStream,
    pub(crate) role: Role,
    pub(crate) phase: Phase,
    /// The peer (known from the start for a dialer, from the HELLO for an acceptor).
    pub(crate) peer: Option<NodeId>,
    /// The rail index within its session.
    pub(crate) rail: usize,
    /// The remote address (for logs).
    pub(crate) addr: SocketAddr,
    pub(crate) rx: Rx,
    pub(crate) tx: TxQueue,
    /// The Noise link (`None` on a `danger_insecure` fabric; on a dialer, until its
    /// connect completes).
    pub(crate) link: Option<Link>,
    /// The socket may take bytes (set by readiness events, cleared when a write stops
    /// short).
    pub(crate) writable: bool,
    /// When the connection was opened (handshake deadline).
    pub(crate) opened: Instant,
    /// When bytes last arrived.
    pub(crate) last_rx: Instant,
    /// When bytes were last handed to the socket or the queue.
    pub(crate) last_tx: Instant,
    /// Packets sent on this rail that the peer has not acknowledged (`ack.rs`).
    pub(crate) unacked: Unacked,
    /// Packets received whole on this rail, and how many were acknowledged.
    pub(crate) received: Received,
}

impl Conn {
    /// Whether a pump could make progress: readiness, staged plaintext, or a whole
    /// message the link has buffered.
    pub(crate) fn rx_work(&self) -> bool {
        self.rx.has_work() || self.link.as_ref().is_some_and(Link::has_message)
    }

    /// Since when small packets are held back to share a write: in the send queue, or
    /// (on a secure link) as plaintext to share a record too.
    pub(crate) fn held_since(&self) -> Option<Instant> {
        let link = self.link.as_ref().and_then(Link::held_since);
        match (self.tx.held_since(), link) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::fabric::SharedBytesMut;
    use crate::tcp::frame::{heartbeat, Hello};
    use hamlyn_wire::{Flags, RequestId};

    /// A reader that returns the scripted chunks one per call, then `WouldBlock`
    /// (or end of stream if `eof`). Each chunk stands for bytes that arrived at once,
    /// so a read that takes a whole chunk drains the socket, as a short read does.
    struct Script {
        chunks: VecDeque<Vec<u8>>,
        eof: bool,
        reads: usize,
    }

    impl Script {
        /// What the edge-triggered poller would report to `rx` next: readiness when
        /// a chunk is waiting, readiness and the read side closed when only the end of
        /// stream is; false when nothing would be reported.
        fn event(&self, rx: &mut Rx) -> bool {
            if !self.chunks.is_empty() || self.eof {
                rx.ready = true;
                rx.closing |= self.chunks.is_empty() && self.eof;
                return true;
            }
            false
        }
    }

    /// Pumps like the fabric: after an `Idle` pump, the poller's next event (if the
    /// script has more) makes the connection ready again.
    fn pump_events(
        rx: &mut Rx,
        s: &mut Script,
        sink: &mut dyn PacketSink,
        ctx: &mut RxCtx<'_>,
    ) -> RxStop {
        loop {
            let stop = rx.pump(s, None, sink, ctx);
            if stop != RxStop::Idle || rx.ready || !s.event(rx) {
                return stop;
            }
        }
    }

    impl Read for Script {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.read_vectored(&mut [IoSliceMut::new(buf)])
        }
        fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
            self.reads += 1;
            let Some(mut chunk) = self.chunks.pop_front() else {
                return if self.eof {
                    Ok(0)
                } else {
                    Err(io::ErrorKind::WouldBlock.into())
                };
            };
            let mut n = 0;
            for b in bufs.iter_mut() {
                let take = b.len().min(chunk.len() - n);
                b[..take].copy_from_slice(&chunk[n..n + take]);
                n += take;
            }
            if n < chunk.len() {
                self.chunks.push_front(chunk.split_off(n));
            }
            Ok(n)
        }
    }

    #[derive(Default)]
    struct Sink {
        bufs: std::collections::BTreeMap<u32, Vec<u8>>,
        done: Vec<(Header, Vec<u8>, Vec<u8>)>,
        discard_odd: bool,
        events: Vec<PeerEvent>,
        buf_calls: usize,
    }

    impl PacketSink for Sink {
        fn on_header(&mut self, _: NodeId, h: &Header, _: &[u8]) -> Landing {
            if self.discard_odd && h.request.seq % 2 == 1 {
                return Landing::Discard;
            }
            self.bufs
                .insert(h.request.seq, vec![0; h.payload_len as usize]);
            Landing::Accept
        }
        fn payload_buf(&mut self, h: &Header) -> SharedBytesMut<'_> {
            self.buf_calls += 1;
            SharedBytesMut::from(&mut self.bufs.get_mut(&h.request.seq).unwrap()[..])
        }
        fn on_payload(&mut self, _: NodeId, h: &Header, meta: &[u8]) {
            let p = self.bufs.remove(&h.request.seq).unwrap();
            self.done.push((*h, meta.to_vec(), p));
        }
        fn on_peer(&mut self, e: PeerEvent) {
            self.events.push(e);
        }
        fn on_unconfirmed(&mut self, _: NodeId, _: &Header) {}
    }

    fn pkt(seq: u32, meta: usize, len: usize) -> (Header, Vec<u8>, Vec<u8>) {
        let mut h = Header::new(Op::Write);
        h.flags = Flags::FIRST | Flags::LAST;
        h.src = NodeId(1);
        h.dst = NodeId(2);
        h.request = RequestId { terminus: 0, seq };
        h.meta_len = meta as u16;
        h.payload_len = len as u32;
        let m: Vec<u8> = (0..meta).map(|i| (i as u32 + seq) as u8).collect();
        let p: Vec<u8> = (0..len).map(|i| (i as u32 * 7 + seq) as u8).collect();
        (h, m, p)
    }

    fn run(
        rx: &mut Rx,
        s: &mut Script,
        sink: &mut Sink,
        deliver: bool,
        budget: usize,
    ) -> (RxStop, RxCounts) {
        let mut events = VecDeque::from([PeerEvent::Up {
            node: NodeId(1),
            incarnation: 1,
        }]);
        let mut budget = budget;
        let mut counts = RxCounts::default();
        let mut ctx = RxCtx {
            me: NodeId(2),
            peer: Some(NodeId(1)),
            handshake: false,
            deliver,
            events: &mut events,
            budget: &mut budget,
            counts: &mut counts,
            replay: None,
        };
        let stop = pump_events(rx, s, sink, &mut ctx);
        (stop, counts)
    }

    #[test]
    fn large_payload_is_read_straight_into_the_sink() {
        let pkts = [pkt(0, 4, 1 << 20), pkt(1, 0, 10), pkt(2, 60, 0)];
        let mut bytes = Vec::new();
        for (h, m, p) in &pkts {
            bytes.extend(h.to_packet(m, p).unwrap());
        }
        // The kernel hands out at most 100 KiB per read.
        let chunks: VecDeque<Vec<u8>> = bytes.chunks(100 << 10).map(<[u8]>::to_vec).collect();
        let n_chunks = chunks.len();
        let mut s = Script {
            chunks,
            eof: false,
            reads: 0,
        };
        let mut rx = Rx::new(16 << 20);
        let mut sink = Sink::default();
        let (stop, counts) = run(&mut rx, &mut s, &mut sink, true, 100);
        assert_eq!(stop, RxStop::Idle);
        assert_eq!(counts.packets, 3);
        assert_eq!(sink.done, pkts.to_vec());
        assert_eq!(
            sink.events.len(),
            1,
            "events go out before the first packet"
        );
        // Direct reads: about one read per chunk (a chunk that straddles the payload's
        // end and overfills the staging buffer takes two) plus the final WouldBlock; a
        // decoder that went through the staging buffer would need 16 reads per chunk.
        assert!(
            s.reads <= n_chunks + 2,
            "{} reads for {n_chunks} chunks",
            s.reads
        );
    }

    /// Through a secure link: packets arrive whole and in order however the records are
    /// cut into reads, one packet per pump (the budget), and after every stop the
    /// fabric's test for more work (`Conn::rx_work`: staged plaintext, readiness, or a
    /// whole record the link holds) or the poller's next event finds what is left.
    #[test]
    fn a_secure_link_delivers_whatever_the_cuts_and_budget() {
        use crate::tcp::secret::ClusterSecret;
        use crate::tcp::secure::MAX_PLAIN;
        let secret = ClusterSecret::from_bytes([3; 32]);
        let dk = crate::tcp::NodeKey::from_private([1; 32]).unwrap();
        let ak = crate::tcp::NodeKey::from_private([2; 32]).unwrap();
        let mut scratch = vec![0; MAX_PLAIN];
        let mixed: Vec<_> = [(4, 300_000), (0, 10), (60, 0), (1, 5), (0, 70_000)]
            .iter()
            .enumerate()
            .map(|(i, &(m, len))| pkt(i as u32, m, len))
            .collect();
        // A packet that fills one record exactly (64 + 65,455 = 65,519 bytes), then a
        // small one, in one short read: the pump that delivers the first ends on a
        // boundary with its staging buffer empty, the socket drained, and the second
        // record whole in the link, where only `rx_work` can see it.
        let exact = vec![pkt(0, 0, 65_455), pkt(1, 0, 10)];
        let cases = [
            (&mixed, 7000),
            (&mixed, 65_537),
            (&mixed, 200_000),
            (&mixed, 1 << 20),
            (&exact, 1 << 20),
        ];
        for (pkts, cut) in cases {
            let (mut d, first) = Link::dialer(&secret, &dk).unwrap();
            let mut acc = Link::acceptor(&secret, &ak).unwrap();
            acc.push(&first);
            assert_eq!(acc.open(&mut scratch).unwrap(), Opened::Reply);
            d.push(&acc.take_handshake_out());
            assert_eq!(d.open(&mut scratch).unwrap(), Opened::Secured);
            acc.push(&d.take_handshake_out());
            assert_eq!(acc.open(&mut scratch).unwrap(), Opened::Secured);
            let mut wire = Vec::new();
            for (h, m, p) in pkts {
                wire.extend_from_slice(d.seal_bytes(&h.to_packet(m, p).unwrap()).unwrap());
            }
            let mut s = Script {
                chunks: wire.chunks(cut).map(<[u8]>::to_vec).collect(),
                eof: false,
                reads: 0,
            };
            let mut link = Some(acc);
            let mut rx = Rx::new(16 << 20);
            let mut sink = Sink::default();
            for _ in 0..10_000 {
                if sink.done.len() == pkts.len() {
                    break;
                }
                let mut events = VecDeque::new();
                let (mut budget, mut counts) = (1, RxCounts::default());
                let mut ctx = RxCtx {
                    me: NodeId(2),
                    peer: Some(NodeId(1)),
                    handshake: false,
                    deliver: true,
                    events: &mut events,
                    budget: &mut budget,
                    counts: &mut counts,
                    replay: None,
                };
                match rx.pump(&mut s, link.as_mut(), &mut sink, &mut ctx) {
                    RxStop::Budget | RxStop::Idle => {}
                    other => panic!("{other:?}"),
                }
                if sink.done.len() < pkts.len() {
                    let more = rx.has_work() || link.as_ref().is_some_and(Link::has_message);
                    assert!(
                        more || s.event(&mut rx),
                        "cut {cut}: stalled with bytes unread"
                    );
                }
            }
            assert_eq!(&sink.done, pkts, "cut {cut}");
            assert!(
                rx.staging.is_empty(),
                "a secured connection decodes in its link's buffer: no staging buffer"
            );
        }
    }

    #[test]
    fn a_short_read_ends_the_pump_without_asking_again() {
        let pkts: Vec<_> = (0..40).map(|i| pkt(i, 2, 8)).collect();
        let mut bytes = Vec::new();
        for (h, m, p) in &pkts {
            bytes.extend(h.to_packet(m, p).unwrap());
        }
        let (first, second) = bytes.split_at(bytes.len() / 2 + 7);
        let mut s = Script {
            chunks: VecDeque::from([first.to_vec(), second.to_vec()]),
            eof: true,
            reads: 0,
        };
        let mut rx = Rx::new(1000);
        let mut sink = Sink::default();
        let mut events = VecDeque::new();
        let (mut budget, mut counts) = (100, RxCounts::default());
        let mut ctx = RxCtx {
            me: NodeId(2),
            peer: Some(NodeId(1)),
            handshake: false,
            deliver: true,
            events: &mut events,
            budget: &mut budget,
            counts: &mut counts,
            replay: None,
        };
        // One read, short: the socket is drained until the poller says otherwise.
        assert_eq!(rx.pump(&mut s, None, &mut sink, &mut ctx), RxStop::Idle);
        assert_eq!(s.reads, 1);
        assert!(!rx.has_work());
        assert_eq!(sink.done.len(), 20, "every whole packet of the first read");
        // The next event: the rest, read once.
        assert!(s.event(&mut rx));
        assert_eq!(rx.pump(&mut s, None, &mut sink, &mut ctx), RxStop::Idle);
        assert_eq!((s.reads, sink.done.len()), (2, 40));
        // The poller reports the end of stream: reads go on until one says so.
        assert!(s.event(&mut rx) && rx.closing);
        assert!(matches!(
            rx.pump(&mut s, None, &mut sink, &mut ctx),
            RxStop::Close(CloseReason::PeerClosed, _)
        ));
        assert_eq!(sink.done, pkts);
    }

    /// Frames read as they came, in one chunk (each taken whole at once,
    /// `FrameDecoder::whole`), cut at random places (both ways), and a byte at a time
    /// (token by token only) reach the sink alike: the same packets, metadata and
    /// payloads, the same discards, the same counts.
    mod whole_and_token_by_token {
        use super::*;
        use proptest::prelude::*;

        /// What the sink got (packets, metadata, payloads) and the packets, whole
        /// packets and bytes counted.
        type Seen = (Vec<(Header, Vec<u8>, Vec<u8>)>, u64, u64, u64);

        fn feed(chunks: Vec<Vec<u8>>, discard_odd: bool) -> Seen {
            let mut s = Script {
                chunks: chunks.into(),
                eof: true,
                reads: 0,
            };
            let mut rx = Rx::new(100_000);
            let mut sink = Sink {
                discard_odd,
                ..Sink::default()
            };
            let (stop, counts) = run(&mut rx, &mut s, &mut sink, true, usize::MAX);
            assert!(
                matches!(stop, RxStop::Close(CloseReason::PeerClosed, _)),
                "{stop:?}"
            );
            (sink.done, counts.packets, counts.whole, counts.bytes)
        }

        proptest! {
            #[test]
            fn alike(
                shapes in proptest::collection::vec((0usize..=60, 0usize..400), 0..10),
                beats in proptest::collection::vec(any::<bool>(), 0..10),
                mut cuts in proptest::collection::vec(0usize..8_000, 0..12),
                discard_odd in any::<bool>(),
            ) {
                let mut bytes = Vec::new();
                for (i, &(meta, len)) in shapes.iter().enumerate() {
                    if beats.get(i).copied().unwrap_or(false) {
                        bytes.extend(heartbeat(NodeId(1), NodeId(2), 1, i as u64).to_bytes());
                    }
                    let (h, m, p) = pkt(i as u32, meta, len);
                    bytes.extend(h.to_packet(&m, &p).unwrap());
                }
                let whole = feed(vec![bytes.clone()], discard_odd);
                cuts.retain(|&c| c < bytes.len());
                cuts.sort_unstable();
                cuts.dedup();
                let mut pieces = Vec::new();
                let mut at = 0;
                for c in cuts.into_iter().chain([bytes.len()]) {
                    if c > at {
                        pieces.push(bytes[at..c].to_vec());
                        at = c;
                    }
                }
                let cut = feed(pieces, discard_odd);
                let bytewise = feed(bytes.iter().map(|&b| vec![b]).collect(), discard_odd);
                prop_assert_eq!(&whole, &bytewise);
                prop_assert_eq!(&cut, &bytewise);
                let kept = shapes.len() - if discard_odd { shapes.len() / 2 } else { 0 };
                prop_assert_eq!(whole.0.len(), kept);
            }
        }
    }

    #[test]
    fn closing_reads_past_short_reads_to_the_end() {
        let (h, m, p) = pkt(0, 0, 5);
        let bytes = h.to_packet(&m, &p).unwrap();
        let mut s = Script {
            chunks: VecDeque::from([bytes[..30].to_vec(), bytes[30..].to_vec()]),
            eof: true,
            reads: 0,
        };
        let mut rx = Rx::new(1000);
        rx.closing = true;
        let mut sink = Sink::default();
        let mut events = VecDeque::new();
        let (mut budget, mut counts) = (100, RxCounts::default());
        let mut ctx = RxCtx {
            me: NodeId(2),
            peer: Some(NodeId(1)),
            handshake: false,
            deliver: true,
            events: &mut events,
            budget: &mut budget,
            counts: &mut counts,
            replay: None,
        };
        assert!(matches!(
            rx.pump(&mut s, None, &mut sink, &mut ctx),
            RxStop::Close(CloseReason::PeerClosed, _)
        ));
        assert_eq!((s.reads, sink.done.len()), (3, 1));
    }

    #[test]
    fn budget_and_stall_keep_bytes_for_later() {
        let pkts: Vec<_> = (0..5).map(|i| pkt(i, 1, 100)).collect();
        let mut bytes = Vec::new();
        for (h, m, p) in &pkts {
            bytes.extend(h.to_packet(m, p).unwrap());
        }
        let mut s = Script {
            chunks: VecDeque::from([bytes]),
            eof: true,
            reads: 0,
        };
        let mut rx = Rx::new(1000);
        let mut sink = Sink {
            discard_odd: true,
            ..Sink::default()
        };
        assert_eq!(
            run(&mut rx, &mut s, &mut sink, false, 100).0,
            RxStop::Stalled
        );
        assert!(sink.done.is_empty());
        assert_eq!(run(&mut rx, &mut s, &mut sink, true, 2).0, RxStop::Budget);
        assert!(rx.has_work());
        let (stop, counts) = run(&mut rx, &mut s, &mut sink, true, 100);
        assert!(matches!(stop, RxStop::Close(CloseReason::PeerClosed, _)));
        assert_eq!(counts.packets, 3);
        let seqs: Vec<u32> = sink.done.iter().map(|d| d.0.request.seq).collect();
        assert_eq!(seqs, [0, 2, 4], "odd ones discarded");
    }

    #[test]
    fn heartbeats_are_consumed_and_misaddressed_packets_close() {
        let mut bytes = heartbeat(NodeId(1), NodeId(2), 1, 0).to_bytes().to_vec();
        let (mut h, m, p) = pkt(0, 0, 3);
        h.src = NodeId(9);
        bytes.extend(h.to_packet(&m, &p).unwrap());
        let mut s = Script {
            chunks: VecDeque::from([bytes]),
            eof: false,
            reads: 0,
        };
        let mut rx = Rx::new(1000);
        let mut sink = Sink::default();
        let (stop, counts) = run(&mut rx, &mut s, &mut sink, true, 100);
        assert!(matches!(stop, RxStop::Close(CloseReason::Misaddressed, _)));
        assert_eq!(counts.heartbeats, 1);
        assert!(sink.done.is_empty());
    }

    #[test]
    fn handshake_wants_hello_first() {
        let hello = Hello {
            from: NodeId(1),
            to: NodeId(2),
            incarnation: 1,
            session: 1,
            rail: 0,
            rails: 1,
        };
        let mut bytes = hello.to_header().to_bytes().to_vec();
        let (h, m, p) = pkt(0, 0, 3);
        bytes.extend(h.to_packet(&m, &p).unwrap());
        let mut s = Script {
            chunks: VecDeque::from([bytes]),
            eof: false,
            reads: 0,
        };
        let mut rx = Rx::new(1000);
        let mut sink = Sink::default();
        let mut events = VecDeque::new();
        let (mut budget, mut counts) = (10, RxCounts::default());
        let mut ctx = RxCtx {
            me: NodeId(2),
            peer: None,
            handshake: true,
            deliver: false,
            events: &mut events,
            budget: &mut budget,
            counts: &mut counts,
            replay: None,
        };
        assert_eq!(
            rx.pump(&mut s, None, &mut sink, &mut ctx),
            RxStop::Hello(hello.to_header())
        );
        // Still in the handshake: a data packet is refused.
        assert!(matches!(
            rx.pump(&mut s, None, &mut sink, &mut ctx),
            RxStop::Close(CloseReason::NoHello, _)
        ));
    }

    #[test]
    fn truncated_stream_and_wrong_buffer() {
        let (h, m, p) = pkt(0, 0, 50);
        let bytes = h.to_packet(&m, &p).unwrap();
        let mut s = Script {
            chunks: VecDeque::from([bytes[..80].to_vec()]),
            eof: true,
            reads: 0,
        };
        let mut rx = Rx::new(1000);
        let mut sink = Sink::default();
        assert!(matches!(
            run(&mut rx, &mut s, &mut sink, true, 10).0,
            RxStop::Close(CloseReason::Truncated, _)
        ));

        struct Short(Vec<u8>);
        impl PacketSink for Short {
            fn on_header(&mut self, _: NodeId, _: &Header, _: &[u8]) -> Landing {
                Landing::Accept
            }
            fn payload_buf(&mut self, _: &Header) -> SharedBytesMut<'_> {
                SharedBytesMut::from(&mut self.0[..])
            }
            fn on_payload(&mut self, _: NodeId, _: &Header, _: &[u8]) {}
            fn on_peer(&mut self, _: PeerEvent) {}
            fn on_unconfirmed(&mut self, _: NodeId, _: &Header) {}
        }
        let mut s = Script {
            chunks: VecDeque::from([bytes.clone()]),
            eof: false,
            reads: 0,
        };
        let mut rx = Rx::new(1000);
        let mut events = VecDeque::new();
        let (mut budget, mut counts) = (10, RxCounts::default());
        let mut ctx = RxCtx {
            me: NodeId(2),
            peer: Some(NodeId(1)),
            handshake: false,
            deliver: true,
            events: &mut events,
            budget: &mut budget,
            counts: &mut counts,
            replay: None,
        };
        let mut short = Short(vec![0; 3]);
        assert_eq!(
            rx.pump(&mut s, None, &mut short, &mut ctx),
            RxStop::SinkBuffer {
                expected: 50,
                got: 3
            }
        );
        // The rest of that payload is skipped; the stream stays in sync.
        assert_eq!(rx.pump(&mut s, None, &mut short, &mut ctx), RxStop::Idle);
        assert!(rx.decoder.at_boundary());
    }
}
