//! The sending half of a rail: gather writes straight from the caller's slices, a
//! bounded queue for what the kernel did not take, and small packets held back to share
//! one write.
//!
//! [`write_gather`] hands as many pieces as fit in one `writev` to the socket and keeps
//! going until everything is written or the socket would block; it never copies.
//! [`TxQueue`] keeps the unwritten tail of packets (copied once) until the socket is
//! writable again, a secure link's records (sealed into it where they lie,
//! [`TxQueue::append`], then written from it, [`TxQueue::send_queued`]), and the small
//! packets the fabric chose to *hold*: while its caller
//! streams packets (one per engine turn), a `writev` per packet would cost a system
//! call, and a wake-up of the receiver, per few dozen bytes; held packets go out
//! together in one write ([`TxQueue::send`], [`TxQueue::flush`]). Both are generic over
//! [`Write`] so they are tested with scripted writers.

use std::io::{self, IoSlice, Write};

use hamlyn_core::Instant;

use crate::fabric::SharedBytes;

/// Most slices handed to one `writev` (well below every IOV_MAX).
const MAX_IOV: usize = 64;

/// Slices of the short gather list most packets need (three fixed pieces, a payload).
const FEW_IOV: usize = 8;

/// Packets (header, metadata and payload) up to this many bytes may be held to share a
/// write; longer ones are written straight from the caller's memory.
pub(crate) const HOLD_PACKET: usize = 8 << 10;

/// Held bytes at which a rail writes them at once, however the caller goes on.
pub(crate) const HOLD_BYTES: usize = 64 << 10;

/// The bytes of one packet (or queued bytes followed by a packet) as gather pieces:
/// up to three fixed pieces (the fabric's own bytes), then the payload pieces (maybe a
/// client's shared memory, held by raw parts).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pieces<'a> {
    head: [&'a [u8]; 3],
    tail: &'a [SharedBytes<'a>],
}

impl<'a> Pieces<'a> {
    /// `head` pieces (empty ones are skipped), then `tail`.
    pub(crate) fn new(head: [&'a [u8]; 3], tail: &'a [SharedBytes<'a>]) -> Pieces<'a> {
        Pieces { head, tail }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = SharedBytes<'a>> + '_ {
        self.head
            .iter()
            .map(|&h| SharedBytes::from(h))
            .chain(self.tail.iter().copied())
    }

    /// Total bytes.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        packet_len(self)
    }

    /// Appends every byte from offset `skip` on to `out`.
    pub(crate) fn copy_from(&self, mut skip: usize, out: &mut Vec<u8>) {
        for p in self.iter() {
            if skip >= p.len() {
                skip -= p.len();
                continue;
            }
            p.tail(skip).append_to(out);
            skip = 0;
        }
    }
}

/// Writes `pieces` from byte `skip` on, with vectored writes, until all is written or
/// the writer would block; returns how many bytes (counted from `skip`) were written.
///
/// `WouldBlock` and `Interrupted` are not errors here; any other error (a broken
/// connection) is returned, and so is a writer that takes zero bytes.
pub(crate) fn write_gather<W: Write>(
    w: &mut W,
    pieces: &Pieces<'_>,
    skip: usize,
) -> io::Result<usize> {
    let mut written = 0;
    // Stops when everything is out, without building an empty gather list to learn so;
    // a packet is a few pieces, and a short list to set up for it, not 64 slices.
    let (total, count) = pieces.iter().fold((0, 0), |(l, n), p| (l + p.len(), n + 1));
    let left = total.saturating_sub(skip);
    let few = count <= FEW_IOV;
    while written < left {
        let wrote = if few {
            write_once::<W, FEW_IOV>(w, pieces, skip + written)
        } else {
            write_once::<W, MAX_IOV>(w, pieces, skip + written)
        };
        match wrote {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(written),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}

/// One vectored write of `pieces` from byte `skip` on, at most `N` slices of them.
fn write_once<W: Write, const N: usize>(
    w: &mut W,
    pieces: &Pieces<'_>,
    skip: usize,
) -> io::Result<usize> {
    let mut iov = [IoSlice::new(&[]); N];
    let mut n_iov = 0;
    let mut skip_left = skip;
    for p in pieces.iter() {
        if skip_left >= p.len() {
            skip_left -= p.len();
            continue;
        }
        if n_iov == N {
            break;
        }
        iov[n_iov] = p.tail(skip_left).io_slice();
        skip_left = 0;
        n_iov += 1;
    }
    w.write_vectored(&iov[..n_iov])
}

/// Bytes accepted for sending that the socket has not taken yet: held by choice (small
/// packets waiting to share a write, [`TxQueue::held_since`]) or left over by a write
/// the socket did not take whole.
#[derive(Debug, Default)]
pub(crate) struct TxQueue {
    buf: Vec<u8>,
    head: usize,
    /// When the first held packet was queued; `None` if nothing is held (the queue is
    /// empty, or waits for the socket).
    held: Option<Instant>,
}

/// What [`TxQueue::send`] did with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sent {
    /// The socket may take more bytes (false: it would block; wait for writability).
    pub(crate) writable: bool,
    /// Bytes of the packet copied into the queue because the socket did not take them.
    pub(crate) queued: usize,
    /// The packet is held, to go out with the next ones.
    pub(crate) held: bool,
}

impl TxQueue {
    /// Bytes waiting.
    pub(crate) fn len(&self) -> usize {
        self.buf.len() - self.head
    }

    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The waiting bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf[self.head..]
    }

    /// Since when packets are held (`None`: nothing held).
    pub(crate) fn held_since(&self) -> Option<Instant> {
        self.held
    }

    /// Queues the bytes of `pieces` from offset `skip` on (a copy).
    pub(crate) fn push(&mut self, pieces: &Pieces<'_>, skip: usize) {
        pieces.copy_from(skip, &mut self.buf);
    }

    /// Hands one packet (`head` pieces, then `payload`) to the rail, behind whatever
    /// waits in the queue.
    ///
    /// - `writable` false (the socket would block): the packet is queued (a copy).
    /// - `hold` is `Some(now)` and the packet is at most [`HOLD_PACKET`] bytes: it is
    ///   queued and held, unless that makes [`HOLD_BYTES`], when everything is written.
    /// - Otherwise the queued bytes and the packet go out in one gather write, the
    ///   payload straight from the caller's slices; what the socket does not take is
    ///   queued.
    pub(crate) fn send<W: Write>(
        &mut self,
        w: &mut W,
        head: [&[u8]; 2],
        payload: &[SharedBytes<'_>],
        writable: bool,
        hold: Option<Instant>,
    ) -> io::Result<Sent> {
        let packet = Pieces::new([head[0], head[1], &[]], payload);
        if !writable {
            let before = self.len();
            self.push(&packet, 0);
            return Ok(Sent {
                writable: false,
                queued: self.len() - before,
                held: false,
            });
        }
        let before = self.len();
        if let Some(now) = hold {
            self.push(&packet, 0);
            let len = self.len() - before;
            if len <= HOLD_PACKET {
                if self.len() < HOLD_BYTES {
                    self.held.get_or_insert(now);
                    return Ok(Sent {
                        writable: true,
                        queued: 0,
                        held: true,
                    });
                }
                self.flush(w)?;
                return Ok(Sent {
                    writable: self.is_empty(),
                    queued: 0,
                    held: false,
                });
            }
            // Too long to hold: take it back and write it from the caller's memory.
            self.buf.truncate(self.buf.len() - len);
        }
        self.held = None;
        let queued = self.len();
        let all = Pieces::new([self.bytes(), head[0], head[1]], payload);
        let n = write_gather(w, &all, 0)?;
        let len = queued + packet_len(&packet);
        if n >= queued {
            self.consume(queued);
            if n < len {
                self.push(&packet, n - queued);
            }
        } else {
            self.consume(n);
            self.push(&packet, 0);
        }
        Ok(Sent {
            writable: n == len,
            queued: len - n.max(queued),
            held: false,
        })
    }

    /// Appends bytes by `fill` (which only appends: a link sealing records into the
    /// queue, [`super::secure::Link::seal_onto`]), behind what waits.
    pub(crate) fn append<R>(&mut self, fill: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        fill(&mut self.buf)
    }

    /// Writes what waits, after `packet` bytes were appended to it for one packet:
    /// [`TxQueue::send`]'s answer for that packet (`writable`: the socket may take
    /// more; false, the queue only waits).
    pub(crate) fn send_queued<W: Write>(
        &mut self,
        w: &mut W,
        packet: usize,
        writable: bool,
    ) -> io::Result<Sent> {
        if writable {
            self.flush(w)?;
        }
        Ok(Sent {
            writable: writable && self.is_empty(),
            queued: self.len().min(packet),
            held: false,
        })
    }

    /// Gives back the memory a very large packet made the queue take, if it is empty
    /// (rails call it when idle, not per packet, so a stream of large packets reuses
    /// it).
    pub(crate) fn trim(&mut self) {
        if self.is_empty() && self.buf.capacity() > 1 << 20 {
            self.buf = Vec::new();
            self.head = 0;
        }
    }

    /// Marks `n` waiting bytes as written.
    pub(crate) fn consume(&mut self, n: usize) {
        self.head = (self.head + n).min(self.buf.len());
        if self.head == self.buf.len() {
            self.buf.clear();
            self.head = 0;
        } else if self.head >= (64 << 10) && self.head * 2 >= self.buf.len() {
            self.buf.drain(..self.head);
            self.head = 0;
        }
    }

    /// Writes waiting bytes (held ones too) until none are left or the writer would
    /// block; returns the bytes written. Nothing is held afterwards.
    pub(crate) fn flush<W: Write>(&mut self, w: &mut W) -> io::Result<usize> {
        self.held = None;
        if self.is_empty() {
            return Ok(0);
        }
        let n = write_gather(w, &Pieces::new([self.bytes(), &[], &[]], &[]), 0)?;
        self.consume(n);
        Ok(n)
    }

    /// Forgets everything waiting (the connection is gone).
    pub(crate) fn clear(&mut self) {
        self.buf = Vec::new();
        self.head = 0;
        self.held = None;
    }
}

fn packet_len(p: &Pieces<'_>) -> usize {
    p.iter().map(|b| b.len()).sum()
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use proptest::prelude::*;

    /// A writer that takes at most `per_call` bytes per call, then would block once its
    /// `room` is used up.
    pub(crate) struct Scripted {
        pub(crate) got: Vec<u8>,
        pub(crate) per_call: usize,
        pub(crate) room: usize,
        pub(crate) calls: usize,
        pub(crate) broken: bool,
    }

    impl Scripted {
        pub(crate) fn new(per_call: usize, room: usize) -> Scripted {
            Scripted {
                got: Vec::new(),
                per_call,
                room,
                calls: 0,
                broken: false,
            }
        }
    }

    impl Write for Scripted {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.write_vectored(&[IoSlice::new(buf)])
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            self.calls += 1;
            if self.broken {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            if self.calls % 3 == 0 {
                return Err(io::ErrorKind::Interrupted.into());
            }
            let mut budget = self.per_call.min(self.room);
            if budget == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(budget);
                self.got.extend_from_slice(&b[..take]);
                budget -= take;
                n += take;
            }
            self.room -= n;
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn gather_writes_everything_when_there_is_room() {
        let tail: Vec<SharedBytes<'_>> = vec![b"cd".into(), b"".into(), b"efg".into()];
        let p = Pieces::new([b"a", b"", b"b"], &tail);
        assert_eq!(p.len(), 7);
        let mut w = Scripted::new(2, 100);
        assert_eq!(write_gather(&mut w, &p, 0).unwrap(), 7);
        assert_eq!(w.got, b"abcdefg");
        let mut w = Scripted::new(100, 100);
        assert_eq!(write_gather(&mut w, &p, 3).unwrap(), 4);
        assert_eq!(w.got, b"defg");
    }

    #[test]
    fn more_pieces_than_one_writev_takes() {
        let bytes: Vec<u8> = (0..=255).collect();
        let tail: Vec<SharedBytes<'_>> = bytes.chunks(1).map(SharedBytes::from).collect();
        let p = Pieces::new([&[], &[], &[]], &tail);
        let mut w = Scripted::new(usize::MAX, usize::MAX);
        assert_eq!(write_gather(&mut w, &p, 0).unwrap(), 256);
        assert_eq!(w.got, bytes);
    }

    #[test]
    fn broken_writer_is_an_error() {
        let p = Pieces::new([b"abc", &[], &[]], &[]);
        let mut w = Scripted::new(10, 10);
        w.broken = true;
        assert!(write_gather(&mut w, &p, 0).is_err());
    }

    #[test]
    fn held_packets_share_one_write() {
        let mut w = Scripted::new(usize::MAX, usize::MAX);
        let mut q = TxQueue::default();
        let now = Instant(5);
        for i in 0..10u8 {
            let s = q.send(
                &mut w,
                [b"HDR", &[i]],
                &[b"payload".into()],
                true,
                Some(now),
            );
            assert_eq!(
                s.unwrap(),
                Sent {
                    writable: true,
                    queued: 0,
                    held: true
                }
            );
        }
        assert_eq!((w.calls, q.held_since()), (0, Some(now)));
        // A packet written at once takes the held ones with it: one write.
        let big = vec![7u8; HOLD_PACKET];
        let s = q.send(&mut w, [b"HDR", b""], &[(&big).into()], true, Some(now));
        assert_eq!((s.unwrap().held, w.calls, q.len()), (false, 1, 0));
        assert_eq!(q.held_since(), None);
        assert_eq!(w.got.len(), 10 * 11 + 3 + HOLD_PACKET);
    }

    #[test]
    fn holding_stops_at_hold_bytes() {
        let mut w = Scripted::new(usize::MAX, usize::MAX);
        let mut q = TxQueue::default();
        let p = vec![1u8; 1000];
        let mut sends = 0;
        while w.calls == 0 {
            q.send(&mut w, [b"", b""], &[(&p).into()], true, Some(Instant(0)))
                .unwrap();
            sends += 1;
        }
        assert_eq!(sends, HOLD_BYTES.div_ceil(1000));
        assert!(q.is_empty() && q.held_since().is_none());
    }

    #[test]
    fn trim_gives_back_a_large_empty_queue_only() {
        let mut q = TxQueue::default();
        q.append(|b| b.resize(2 << 20, 9));
        q.trim();
        assert_eq!(q.len(), 2 << 20, "bytes that wait are never dropped");
        let mut w = Scripted::new(usize::MAX, usize::MAX);
        let s = q.send_queued(&mut w, 2 << 20, true).unwrap();
        assert!(s.writable && s.queued == 0 && q.is_empty());
        assert!(q.buf.capacity() >= 2 << 20);
        q.trim();
        assert_eq!(q.buf.capacity(), 0);
        assert_eq!(w.got.len(), 2 << 20);
    }

    /// One step of [`sends_and_flushes_keep_the_stream`].
    #[derive(Clone, Debug)]
    enum Step {
        /// A packet of this many payload bytes, held or not.
        Send(usize, bool),
        /// A packet of this many bytes appended to the queue (as a link seals one
        /// there), then written from it.
        Append(usize),
        /// The socket takes this many more bytes (then would block).
        Room(usize),
        /// A poll's flush.
        Flush,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0usize..3 * HOLD_PACKET / 2, any::<bool>()).prop_map(|(l, h)| Step::Send(l, h)),
            2 => (0usize..3 * HOLD_PACKET).prop_map(Step::Append),
            1 => (0usize..200_000).prop_map(Step::Room),
            1 => Just(Step::Flush),
        ]
    }

    proptest! {
        /// Whatever is held, written at once, queued or flushed, and however much the
        /// socket takes, the bytes it gets are the packets in order, nothing held is
        /// written before a flush or a write-through, and a flush with room leaves
        /// nothing behind.
        #[test]
        fn sends_and_flushes_keep_the_stream(
            steps in proptest::collection::vec(step(), 1..60),
        ) {
            let mut w = Scripted::new(usize::MAX, 0);
            let mut q = TxQueue::default();
            let mut writable = true;
            let mut whole = Vec::new();
            for (k, st) in steps.iter().enumerate() {
                match *st {
                    Step::Send(len, hold) => {
                        let hdr = [k as u8; 3];
                        let payload: Vec<u8> = (0..len).map(|j| (j + k) as u8).collect();
                        whole.extend_from_slice(&hdr);
                        whole.extend_from_slice(&payload);
                        let before = w.got.len();
                        let hold = hold.then_some(Instant(k as u64));
                        let s = q
                            .send(&mut w, [&hdr, b""], &[(&payload).into()], writable, hold)
                            .unwrap();
                        if s.held {
                            prop_assert!(writable && len + 3 <= HOLD_PACKET);
                            prop_assert_eq!(w.got.len(), before, "held: nothing written");
                            prop_assert!(q.held_since().is_some());
                        }
                        writable = s.writable;
                    }
                    Step::Append(len) => {
                        let packet: Vec<u8> = (0..len).map(|j| (j * 3 + k) as u8).collect();
                        whole.extend_from_slice(&packet);
                        q.append(|b| b.extend_from_slice(&packet));
                        let s = q.send_queued(&mut w, len, writable).unwrap();
                        prop_assert!(!s.held && s.queued <= len);
                        prop_assert_eq!(s.writable, writable && q.is_empty());
                        prop_assert!(q.held_since().is_none() || !writable);
                        writable = s.writable;
                    }
                    Step::Room(n) => {
                        w.room = w.room.saturating_add(n);
                        writable = true;
                    }
                    Step::Flush => {
                        if writable {
                            q.flush(&mut w).unwrap();
                            writable = q.is_empty();
                            prop_assert!(q.held_since().is_none());
                        }
                    }
                }
                let mut seen = w.got.clone();
                seen.extend_from_slice(q.bytes());
                prop_assert_eq!(&seen, &whole, "written + queued is the stream");
            }
            w.room = usize::MAX;
            q.flush(&mut w).unwrap();
            prop_assert!(q.is_empty());
            prop_assert_eq!(w.got, whole);
        }

        /// Whatever the writer takes, what it got plus what was queued is the packet, in
        /// order, and flushing the queue later completes it.
        #[test]
        fn written_then_queued_is_the_whole_packet(
            lens in proptest::collection::vec(0usize..200, 0..10),
            per_call in 1usize..300,
            room in 0usize..1500,
        ) {
            let data: Vec<Vec<u8>> = lens
                .iter()
                .enumerate()
                .map(|(i, &l)| (0..l).map(|j| (i * 31 + j) as u8).collect())
                .collect();
            let tail: Vec<SharedBytes<'_>> = data.iter().map(SharedBytes::from).collect();
            let p = Pieces::new([b"HEADER", b"", b"m"], &tail);
            let mut whole = Vec::new();
            p.copy_from(0, &mut whole);
            let mut w = Scripted::new(per_call, room);
            let n = write_gather(&mut w, &p, 0).unwrap();
            prop_assert_eq!(&w.got[..], &whole[..n]);
            let mut q = TxQueue::default();
            q.push(&p, n);
            prop_assert_eq!(q.len(), whole.len() - n);
            w.room = usize::MAX;
            q.flush(&mut w).unwrap();
            prop_assert!(q.is_empty());
            prop_assert_eq!(w.got, whole);
        }
    }
}
