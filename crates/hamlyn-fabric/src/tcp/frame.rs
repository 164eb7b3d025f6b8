//! Framing on a TCP byte stream, as pure state machines with no I/O (DESIGN §7).
//!
//! A TCP rail carries packets back to back: `header (64) ‖ metadata (meta_len) ‖ payload
//! (payload_len)`, exactly the v1 wire format (DESIGN §4); there is no extra framing.
//! [`FrameDecoder`] turns arbitrary chunks of that stream into [`Token`]s: a frame's
//! header (validated by [`Header::parse`] plus a payload bound), then its payload in as
//! many pieces as the chunks make, then its end. It never panics and never allocates;
//! whatever the chunking, the tokens describe the same frames (a property test checks it).
//!
//! The decoder does not own the payload: a caller that knows the payload's destination
//! may read payload bytes from the socket itself, straight into that destination, and
//! report them with [`FrameDecoder::payload_read_direct`]. This is how the TCP fabric
//! lands payloads in the sink's buffer without a copy.
//!
//! The connection handshake is also here ([`Hello`]), since it is pure encoding, and so
//! is the membership query a joining node sends ([`JoinQuery`], [`join_reply`],
//! [`decode_members`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use hamlyn_wire::{Header, NodeId, Op, SlotId, WireError, HEADER_LEN, MAX_META_LEN};

/// Why the bytes on a connection are not a valid packet stream.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The 64-byte header does not parse (bad magic, version, op, flags, metadata length).
    #[error("bad header: {0}")]
    Header(#[from] WireError),
    /// The header states a payload longer than this fabric accepts.
    #[error("payload length {len} exceeds the limit of {max} bytes")]
    PayloadTooLong {
        /// The stated payload length.
        len: u32,
        /// The configured limit.
        max: u32,
    },
    /// The stream ended inside a frame.
    #[error("stream ended inside a frame ({have} of {need} bytes of its {part})")]
    Truncated {
        /// `"header"`, `"metadata"` or `"payload"`.
        part: &'static str,
        /// Bytes of that part that arrived.
        have: u64,
        /// Bytes of that part the frame needs.
        need: u64,
    },
}

/// What [`FrameDecoder::next`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Token<'a> {
    /// Every byte given was consumed and more are needed.
    NeedMore,
    /// A frame's header and metadata ([`FrameDecoder::meta`]) are complete; its payload
    /// (`header.payload_len` bytes) follows.
    Frame(Header),
    /// Payload bytes of the current frame, which belong at offset `at` of its payload.
    Payload {
        /// Offset of `bytes` within the frame's payload.
        at: u32,
        /// The bytes (borrowed from the input).
        bytes: &'a [u8],
    },
    /// The current frame's payload is complete; the next bytes start a new frame.
    End,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Collecting the header (and then the metadata) into `head`.
    Head,
    /// Inside a frame's payload.
    Payload { len: u32, done: u32 },
}

/// Splits a byte stream into frames; see the module documentation.
#[derive(Clone, Debug)]
pub struct FrameDecoder {
    max_payload: u32,
    state: State,
    /// Header then metadata bytes of the frame being collected.
    head: [u8; HEADER_LEN + MAX_META_LEN],
    have: usize,
    /// The parsed header, once its 64 bytes are in (metadata may still be missing).
    header: Option<Header>,
    /// The error the decoder stopped at, returned again by every later call.
    failed: Option<FrameError>,
}

impl FrameDecoder {
    /// A decoder between frames that refuses payloads longer than `max_payload` bytes.
    pub fn new(max_payload: u32) -> FrameDecoder {
        FrameDecoder {
            max_payload,
            state: State::Head,
            head: [0; HEADER_LEN + MAX_META_LEN],
            have: 0,
            header: None,
            failed: None,
        }
    }

    /// Whether the decoder is between frames (no byte of a next frame seen yet).
    pub fn at_boundary(&self) -> bool {
        self.state == State::Head && self.have == 0 && self.failed.is_none()
    }

    /// The metadata of the frame last returned by [`Token::Frame`] (valid until the next
    /// frame's header starts arriving).
    pub fn meta(&self) -> &[u8] {
        let len = self.header.map_or(0, |h| usize::from(h.meta_len));
        &self.head[HEADER_LEN..HEADER_LEN + len]
    }

    /// `(at, left)` when inside a payload: the offset of the next payload byte and how
    /// many remain.
    pub fn payload_remaining(&self) -> Option<(u32, u32)> {
        match self.state {
            State::Payload { len, done } if self.failed.is_none() => Some((done, len - done)),
            _ => None,
        }
    }

    /// Records `n` payload bytes that the caller read itself, straight to their
    /// destination, instead of passing them through [`FrameDecoder::next`]. `n` is capped
    /// at the bytes the payload still needs (the caller never asks for more).
    pub fn payload_read_direct(&mut self, n: usize) {
        if let State::Payload { len, done } = &mut self.state {
            let left = (*len - *done) as usize;
            *done += n.min(left) as u32;
        }
    }

    /// A whole frame at the start of `input`, seen without consuming it: its length
    /// (header, metadata and payload) and its header, if the decoder is between frames
    /// and `input` holds all of it with a header that parses and a payload it accepts.
    /// `None` otherwise, also for a bad header: [`FrameDecoder::next`] then takes the
    /// bytes (and reports the error) as it would have. What a reader does with a small
    /// frame that came in one read, without copying its header and metadata in and
    /// walking it token by token; the decoder stays between frames.
    #[inline]
    pub fn whole(&self, input: &[u8]) -> Option<(usize, Header)> {
        if !self.at_boundary() {
            return None;
        }
        let header = Header::parse(input.get(..HEADER_LEN)?).ok()?;
        if !self.payload_fits(&header) {
            return None;
        }
        let len = HEADER_LEN + usize::from(header.meta_len) + header.payload_len as usize;
        (input.len() >= len).then_some((len, header))
    }

    /// Consumes a prefix of `input` and says what it found; returns the number of bytes
    /// consumed with the token. Call again with the rest of the input until
    /// [`Token::NeedMore`] (which consumes everything). After an error the decoder is
    /// stuck: the stream cannot be resynchronised, and the connection must be closed.
    pub fn next<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Token<'a>), FrameError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match self.state {
            State::Payload { len, done } => {
                if done == len {
                    self.state = State::Head;
                    return Ok((0, Token::End));
                }
                if input.is_empty() {
                    return Ok((0, Token::NeedMore));
                }
                let take = input.len().min((len - done) as usize);
                self.state = State::Payload {
                    len,
                    done: done + take as u32,
                };
                Ok((
                    take,
                    Token::Payload {
                        at: done,
                        bytes: &input[..take],
                    },
                ))
            }
            State::Head => self.next_head(input),
        }
    }

    fn next_head<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Token<'a>), FrameError> {
        let mut used = 0;
        if self.have < HEADER_LEN {
            let take = input.len().min(HEADER_LEN - self.have);
            self.head[self.have..self.have + take].copy_from_slice(&input[..take]);
            self.have += take;
            used = take;
            if self.have < HEADER_LEN {
                return Ok((used, Token::NeedMore));
            }
            let header = match self.check_head(&self.head[..HEADER_LEN]) {
                Ok(h) => h,
                Err(e) => return Err(self.fail(e)),
            };
            self.header = Some(header);
        }
        let Some(header) = self.header else {
            // Unreachable: the header is parsed as soon as its 64 bytes are in.
            return Ok((used, Token::NeedMore));
        };
        let need = HEADER_LEN + usize::from(header.meta_len);
        let take = (input.len() - used).min(need - self.have);
        self.head[self.have..self.have + take].copy_from_slice(&input[used..used + take]);
        self.have += take;
        used += take;
        if self.have < need {
            return Ok((used, Token::NeedMore));
        }
        self.have = 0;
        self.state = State::Payload {
            len: header.payload_len,
            done: 0,
        };
        Ok((used, Token::Frame(header)))
    }

    /// Whether a parsed header's payload is one this decoder takes: the one check beyond
    /// [`Header::parse`] that both [`FrameDecoder::next`] and [`FrameDecoder::whole`]
    /// make, so that the two ways take the same frames.
    #[inline]
    fn payload_fits(&self, header: &Header) -> bool {
        header.payload_len <= self.max_payload
    }

    /// A frame's 64 header bytes parsed and checked, with the reason if refused.
    fn check_head(&self, head: &[u8]) -> Result<Header, FrameError> {
        let header = Header::parse(head).map_err(FrameError::Header)?;
        if !self.payload_fits(&header) {
            return Err(FrameError::PayloadTooLong {
                len: header.payload_len,
                max: self.max_payload,
            });
        }
        Ok(header)
    }

    #[cold]
    fn fail(&mut self, e: FrameError) -> FrameError {
        self.failed = Some(e.clone());
        e
    }

    /// The stream ended: `Ok` if it ended between frames, else why it is truncated.
    pub fn finish(&self) -> Result<(), FrameError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match self.state {
            State::Payload { len, done } if done < len => Err(FrameError::Truncated {
                part: "payload",
                have: u64::from(done),
                need: u64::from(len),
            }),
            State::Payload { .. } => Ok(()),
            State::Head if self.have == 0 => Ok(()),
            State::Head if self.have < HEADER_LEN => Err(FrameError::Truncated {
                part: "header",
                have: self.have as u64,
                need: HEADER_LEN as u64,
            }),
            State::Head => Err(FrameError::Truncated {
                part: "metadata",
                have: (self.have - HEADER_LEN) as u64,
                need: self.header.map_or(0, |h| u64::from(h.meta_len)),
            }),
        }
    }
}

/// Most rails a connection handshake may announce.
pub const MAX_RAILS: usize = 16;

/// The handshake packet that opens every rail (an [`Op::Hello`] header, nothing after it).
///
/// The dialer sends one on each rail it opens; the acceptor checks it and answers on the
/// same rail with its own, echoing `session`, `rail` and `rails`. Field mapping:
/// `src`/`dst` the two nodes, `word` the sender's incarnation, `key` the dialer's session
/// number, `slot` the rail index, `offset` the number of rails in the session.
/// A rail count of 0 is never a rail HELLO ([`Hello::from_header`] refuses it): it
/// marks a membership query or reply ([`JoinQuery`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The sending node.
    pub from: NodeId,
    /// The node the sender believes it is talking to.
    pub to: NodeId,
    /// The sender's incarnation.
    pub incarnation: u32,
    /// The dialer's session number (grows with every attempt of one incarnation).
    pub session: u64,
    /// This rail's index, below `rails`.
    pub rail: u32,
    /// Rails in the session (chosen by the dialer).
    pub rails: u32,
}

/// Why a HELLO header is not a well-formed handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HelloError {
    /// The header is not an [`Op::Hello`].
    #[error("expected HELLO, got {0:?}")]
    NotHello(Op),
    /// The HELLO carries metadata or payload.
    #[error("HELLO with metadata or payload")]
    HasBody,
    /// The rail index or count is out of range.
    #[error("rail {rail} of {rails} is out of range (1..={MAX_RAILS} rails)")]
    BadRail {
        /// The announced rail index.
        rail: u64,
        /// The announced rail count.
        rails: u64,
    },
    /// The incarnation does not fit 32 bits.
    #[error("incarnation {0:#x} does not fit 32 bits")]
    BadIncarnation(u64),
    /// A join query's listen port does not fit 16 bits.
    #[error("listen port {0} does not fit 16 bits")]
    BadPort(u32),
}

impl Hello {
    /// The header that carries this HELLO.
    pub fn to_header(&self) -> Header {
        let mut h = Header::new(Op::Hello);
        h.src = self.from;
        h.dst = self.to;
        h.word = u64::from(self.incarnation);
        h.key = self.session;
        h.slot = SlotId(self.rail);
        h.offset = u64::from(self.rails);
        h
    }

    /// Reads a HELLO out of a parsed header, checking its shape (not whether the nodes
    /// are the expected ones: that is the caller's business).
    pub fn from_header(h: &Header) -> Result<Hello, HelloError> {
        if h.op != Op::Hello {
            return Err(HelloError::NotHello(h.op));
        }
        if h.meta_len != 0 || h.payload_len != 0 {
            return Err(HelloError::HasBody);
        }
        let rails = h.offset;
        let rail = u64::from(h.slot.0);
        if rails == 0 || rails > MAX_RAILS as u64 || rail >= rails {
            return Err(HelloError::BadRail { rail, rails });
        }
        let incarnation = u32::try_from(h.word).map_err(|_| HelloError::BadIncarnation(h.word))?;
        Ok(Hello {
            from: h.src,
            to: h.dst,
            incarnation,
            session: h.key,
            rail: h.slot.0,
            rails: rails as u32,
        })
    }
}

/// Most members one join reply may list (its payload is at most
/// `MAX_JOIN_MEMBERS * JOIN_ENTRY_LEN` bytes).
pub const MAX_JOIN_MEMBERS: usize = 1024;

/// Bytes of one member in a join reply: node id (`u32` LE), port (`u16` LE), address
/// family (`4` or `6`), one zero byte, then the IP address in 16 bytes (an IPv4 address
/// in the first 4, the rest zero).
pub const JOIN_ENTRY_LEN: usize = 24;

/// The membership query a joining node sends on a fresh connection to a member's
/// listener, instead of a rail HELLO.
///
/// It is an [`Op::Hello`] header with no body whose rail count (`offset`) is **0**, which
/// no rail HELLO may have ([`Hello::from_header`] refuses it as [`HelloError::BadRail`]):
/// `src` the joining node, `dst` 0 (ignored: the joiner does not know whom it dialed),
/// `slot` the port the joiner listens on (0: do not add me, just answer), every other
/// field 0. The member answers with one [`join_reply`] frame and closes the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JoinQuery {
    /// The joining node.
    pub from: NodeId,
    /// The port it listens on (its address is the connection's source address).
    pub listen_port: u16,
}

impl JoinQuery {
    /// Whether a header is a membership query or reply rather than a rail HELLO
    /// (an `Op::Hello` with a rail count of 0).
    pub fn is_join(h: &Header) -> bool {
        h.op == Op::Hello && h.offset == 0
    }

    /// The header that carries this query.
    pub fn to_header(&self) -> Header {
        let mut h = Header::new(Op::Hello);
        h.src = self.from;
        h.slot = SlotId(u32::from(self.listen_port));
        h
    }

    /// Reads a query out of a parsed header, checking its shape.
    pub fn from_header(h: &Header) -> Result<JoinQuery, HelloError> {
        if h.op != Op::Hello {
            return Err(HelloError::NotHello(h.op));
        }
        if h.offset != 0 {
            return Err(HelloError::BadRail {
                rail: u64::from(h.slot.0),
                rails: h.offset,
            });
        }
        if h.meta_len != 0 || h.payload_len != 0 {
            return Err(HelloError::HasBody);
        }
        let listen_port = u16::try_from(h.slot.0).map_err(|_| HelloError::BadPort(h.slot.0))?;
        Ok(JoinQuery {
            from: h.src,
            listen_port,
        })
    }
}

/// The header and payload of a member's answer to a [`JoinQuery`]: an [`Op::Hello`] with
/// a rail count of 0, `src` the member, `dst` the joiner, `word` the member's
/// incarnation, `key` the number of members listed, and a payload of that many
/// [`JOIN_ENTRY_LEN`]-byte entries, the answering member first. At most
/// [`MAX_JOIN_MEMBERS`] are listed (the rest are dropped).
pub fn join_reply(
    from: NodeId,
    to: NodeId,
    incarnation: u32,
    members: &[(NodeId, SocketAddr)],
) -> (Header, Vec<u8>) {
    let members = &members[..members.len().min(MAX_JOIN_MEMBERS)];
    let mut payload = Vec::with_capacity(members.len() * JOIN_ENTRY_LEN);
    for (node, addr) in members {
        let mut e = [0u8; JOIN_ENTRY_LEN];
        e[0..4].copy_from_slice(&node.0.to_le_bytes());
        e[4..6].copy_from_slice(&addr.port().to_le_bytes());
        match addr.ip() {
            IpAddr::V4(ip) => {
                e[6] = 4;
                e[8..12].copy_from_slice(&ip.octets());
            }
            IpAddr::V6(ip) => {
                e[6] = 6;
                e[8..24].copy_from_slice(&ip.octets());
            }
        }
        payload.extend_from_slice(&e);
    }
    let mut h = Header::new(Op::Hello);
    h.src = from;
    h.dst = to;
    h.word = u64::from(incarnation);
    h.key = members.len() as u64;
    h.payload_len = payload.len() as u32;
    (h, payload)
}

/// Why a join reply is not well formed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad join reply: {0}")]
pub struct JoinReplyError(pub String);

/// Checks a join reply's header (before its payload is read): its shape and that the
/// payload length matches the member count, within [`MAX_JOIN_MEMBERS`].
pub fn check_join_reply(h: &Header, me: NodeId) -> Result<usize, JoinReplyError> {
    let bad = |s: String| Err(JoinReplyError(s));
    if !JoinQuery::is_join(h) {
        return bad(format!(
            "{:?} with {} rails is not a join reply",
            h.op, h.offset
        ));
    }
    if h.dst != me {
        return bad(format!("meant for {}, not {me}", h.dst));
    }
    if h.meta_len != 0 {
        return bad("metadata".into());
    }
    let count = h.key;
    if count == 0 || count > MAX_JOIN_MEMBERS as u64 {
        return bad(format!("{count} members (1..={MAX_JOIN_MEMBERS})"));
    }
    if u64::from(h.payload_len) != count * JOIN_ENTRY_LEN as u64 {
        return bad(format!(
            "{} payload bytes for {count} members",
            h.payload_len
        ));
    }
    Ok(count as usize)
}

/// Decodes a join reply's payload (see [`join_reply`]).
pub fn decode_members(payload: &[u8]) -> Result<Vec<(NodeId, SocketAddr)>, JoinReplyError> {
    if payload.len() % JOIN_ENTRY_LEN != 0 || payload.len() > MAX_JOIN_MEMBERS * JOIN_ENTRY_LEN {
        return Err(JoinReplyError(format!(
            "{} payload bytes is not a member list",
            payload.len()
        )));
    }
    let mut out = Vec::with_capacity(payload.len() / JOIN_ENTRY_LEN);
    for e in payload.chunks_exact(JOIN_ENTRY_LEN) {
        let node = NodeId(u32::from_le_bytes([e[0], e[1], e[2], e[3]]));
        let port = u16::from_le_bytes([e[4], e[5]]);
        let ip = match e[6] {
            4 => IpAddr::V4(Ipv4Addr::new(e[8], e[9], e[10], e[11])),
            6 => {
                let mut o = [0u8; 16];
                o.copy_from_slice(&e[8..24]);
                IpAddr::V6(Ipv6Addr::from(o))
            }
            f => return Err(JoinReplyError(format!("address family {f}"))),
        };
        if port == 0 || ip.is_unspecified() {
            return Err(JoinReplyError(format!("member {node} at {ip}:{port}")));
        }
        out.push((node, SocketAddr::new(ip, port)));
    }
    Ok(out)
}

/// The liveness beacon a fabric sends on an idle rail (an [`Op::Heartbeat`] header),
/// which also acknowledges the first `acked` packets the rail carried to this node
/// (`offset`; see `ack.rs`).
pub fn heartbeat(from: NodeId, to: NodeId, incarnation: u32, acked: u64) -> Header {
    let mut h = Header::new(Op::Heartbeat);
    h.src = from;
    h.dst = to;
    h.word = u64::from(incarnation);
    h.offset = acked;
    h
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::rng::SimRng;
    use hamlyn_wire::{Flags, RequestId};
    use proptest::prelude::*;

    /// A decoded frame: header, metadata, payload.
    type Decoded = (Header, Vec<u8>, Vec<u8>);

    /// Feeds `chunks` to a decoder and returns the complete frames and how the stream
    /// ended (`Ok` between frames, or the error).
    fn decode(chunks: &[&[u8]], max: u32) -> (Vec<Decoded>, Result<(), FrameError>) {
        let mut d = FrameDecoder::new(max);
        let mut out = Vec::new();
        let mut cur: Option<Decoded> = None;
        for chunk in chunks {
            let mut input = *chunk;
            loop {
                let (n, tok) = match d.next(input) {
                    Ok(x) => x,
                    Err(e) => return (out, Err(e)),
                };
                input = &input[n..];
                match tok {
                    Token::NeedMore => {
                        assert!(input.is_empty(), "NeedMore consumes everything");
                        break;
                    }
                    Token::Frame(h) => {
                        assert!(cur.is_none());
                        cur = Some((h, d.meta().to_vec(), Vec::new()));
                    }
                    Token::Payload { at, bytes } => {
                        let c = cur.as_mut().unwrap();
                        assert_eq!(at as usize, c.2.len());
                        c.2.extend_from_slice(bytes);
                    }
                    Token::End => {
                        let c = cur.take().unwrap();
                        assert_eq!(c.2.len(), c.0.payload_len as usize);
                        out.push(c);
                    }
                }
            }
        }
        (out, d.finish())
    }

    fn frame(seq: u32, meta_len: usize, payload_len: usize) -> (Header, Vec<u8>, Vec<u8>) {
        let mut rng = SimRng::new(u64::from(seq) + 1);
        let mut h = Header::new(Op::Write);
        h.flags = Flags::FIRST | Flags::LAST;
        h.src = NodeId(3);
        h.dst = NodeId(4);
        h.key = rng.next_u64();
        h.request = RequestId { terminus: 1, seq };
        h.meta_len = meta_len as u16;
        h.payload_len = payload_len as u32;
        let mut meta = vec![0; meta_len];
        rng.fill(&mut meta);
        let mut payload = vec![0; payload_len];
        rng.fill(&mut payload);
        (h, meta, payload)
    }

    fn stream(frames: &[Decoded]) -> Vec<u8> {
        let mut s = Vec::new();
        for (h, m, p) in frames {
            s.extend_from_slice(&h.to_packet(m, p).unwrap());
        }
        s
    }

    #[test]
    fn whole_frames_in_one_chunk() {
        let frames = vec![frame(0, 0, 0), frame(1, 60, 5), frame(2, 3, 1000)];
        let s = stream(&frames);
        assert_eq!(decode(&[&s], 1 << 20), (frames, Ok(())));
    }

    #[test]
    fn byte_by_byte() {
        let frames = vec![frame(0, 7, 0), frame(1, 0, 100), frame(2, 60, 64)];
        let s = stream(&frames);
        let chunks: Vec<&[u8]> = s.chunks(1).collect();
        assert_eq!(decode(&chunks, 1 << 20), (frames, Ok(())));
    }

    #[test]
    fn truncation_is_reported_per_part() {
        let f = frame(0, 10, 20);
        let s = stream(&[f]);
        let cut = |n: usize| decode(&[&s[..n]], 1 << 20).1;
        assert!(matches!(
            cut(10),
            Err(FrameError::Truncated {
                part: "header",
                have: 10,
                need: 64
            })
        ));
        assert!(matches!(
            cut(70),
            Err(FrameError::Truncated {
                part: "metadata",
                have: 6,
                need: 10
            })
        ));
        assert!(matches!(
            cut(80),
            Err(FrameError::Truncated {
                part: "payload",
                have: 6,
                need: 20
            })
        ));
        assert_eq!(cut(0), Ok(()));
        assert_eq!(cut(s.len()).map(|_| ()), Ok(()));
    }

    #[test]
    fn bad_magic_and_oversize_stop_the_decoder() {
        let mut s = stream(&[frame(0, 0, 4)]);
        s[0] ^= 0xFF;
        let (got, end) = decode(&[&s], 1 << 20);
        assert!(got.is_empty());
        assert!(matches!(
            end,
            Err(FrameError::Header(WireError::BadMagic(_)))
        ));
        let (h, m, _) = frame(1, 0, 0);
        let mut big = h;
        big.payload_len = 1 << 30;
        let s = big.to_bytes();
        assert_eq!(
            decode(&[&s], 16 << 20).1,
            Err(FrameError::PayloadTooLong {
                len: 1 << 30,
                max: 16 << 20
            })
        );
        let _ = m;
        // A stuck decoder keeps failing.
        let mut d = FrameDecoder::new(8);
        assert!(d.next(&s).is_err());
        assert!(d.next(&[]).is_err());
        assert!(d.finish().is_err());
        assert!(!d.at_boundary());
    }

    #[test]
    fn direct_payload_reads_are_accounted() {
        let f = frame(0, 2, 100);
        let s = stream(std::slice::from_ref(&f));
        let mut d = FrameDecoder::new(1000);
        let (n, tok) = d.next(&s[..70]).unwrap();
        assert_eq!(n, 66);
        assert_eq!(tok, Token::Frame(f.0));
        assert_eq!(d.meta(), &f.1[..]);
        assert_eq!(d.payload_remaining(), Some((0, 100)));
        d.payload_read_direct(30);
        assert_eq!(d.payload_remaining(), Some((30, 70)));
        d.payload_read_direct(1000); // capped
        assert_eq!(d.payload_remaining(), Some((100, 0)));
        assert_eq!(d.next(&[]).unwrap(), (0, Token::End));
        assert!(d.at_boundary());
        assert_eq!(d.finish(), Ok(()));
    }

    #[test]
    fn hello_round_trips_and_rejects_bad_shapes() {
        let hello = Hello {
            from: NodeId(1),
            to: NodeId(2),
            incarnation: 7,
            session: 99,
            rail: 2,
            rails: 3,
        };
        let h = hello.to_header();
        assert_eq!(Header::parse(&h.to_bytes()), Ok(h));
        assert_eq!(Hello::from_header(&h), Ok(hello));
        let mut bad = h;
        bad.slot = SlotId(3);
        assert!(matches!(
            Hello::from_header(&bad),
            Err(HelloError::BadRail { .. })
        ));
        bad = h;
        bad.offset = MAX_RAILS as u64 + 1;
        assert!(matches!(
            Hello::from_header(&bad),
            Err(HelloError::BadRail { .. })
        ));
        bad = h;
        bad.payload_len = 1;
        assert_eq!(Hello::from_header(&bad), Err(HelloError::HasBody));
        bad = h;
        bad.word = 1 << 40;
        assert!(matches!(
            Hello::from_header(&bad),
            Err(HelloError::BadIncarnation(_))
        ));
        let hb = heartbeat(NodeId(1), NodeId(2), 7, 0);
        assert_eq!(
            Hello::from_header(&hb),
            Err(HelloError::NotHello(Op::Heartbeat))
        );
    }

    #[test]
    fn join_query_and_reply_round_trip() {
        let q = JoinQuery {
            from: NodeId(7),
            listen_port: 7000,
        };
        let h = q.to_header();
        assert!(JoinQuery::is_join(&h));
        assert_eq!(JoinQuery::from_header(&h), Ok(q));
        // A rail HELLO refuses it, as before.
        assert!(matches!(
            Hello::from_header(&h),
            Err(HelloError::BadRail { rails: 0, .. })
        ));
        let mut bad = h;
        bad.slot = SlotId(70_000);
        assert_eq!(
            JoinQuery::from_header(&bad),
            Err(HelloError::BadPort(70_000))
        );
        bad = h;
        bad.payload_len = 3;
        assert_eq!(JoinQuery::from_header(&bad), Err(HelloError::HasBody));

        let members = vec![
            (NodeId(2), "10.0.0.2:7000".parse().unwrap()),
            (NodeId(1), "[fe80::1]:9".parse().unwrap()),
        ];
        let (rh, payload) = join_reply(NodeId(2), NodeId(7), 5, &members);
        let rh = Header::parse(&rh.to_bytes()).unwrap();
        assert_eq!(check_join_reply(&rh, NodeId(7)), Ok(2));
        assert!(check_join_reply(&rh, NodeId(8)).is_err());
        assert_eq!(decode_members(&payload), Ok(members));
        let mut lying = rh;
        lying.key = 3;
        assert!(check_join_reply(&lying, NodeId(7)).is_err());
        lying.key = MAX_JOIN_MEMBERS as u64 + 1;
        lying.payload_len = (MAX_JOIN_MEMBERS + 1) as u32 * JOIN_ENTRY_LEN as u32;
        assert!(check_join_reply(&lying, NodeId(7)).is_err());
        let mut p = payload.clone();
        p[6] = 5;
        assert!(decode_members(&p).is_err());
        assert!(decode_members(&payload[..30]).is_err());
    }

    /// Cuts `s` at the given (sorted, deduplicated) points.
    fn chunk_at<'a>(s: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
        let mut out = Vec::new();
        let mut at = 0;
        for &c in cuts {
            let c = c.min(s.len());
            if c >= at {
                out.push(&s[at..c]);
                at = c;
            }
        }
        out.push(&s[at..]);
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Valid streams decode to exactly their frames, however they are chunked.
        #[test]
        fn valid_streams_survive_any_chunking(
            shapes in proptest::collection::vec((0usize..=60, 0usize..3000), 0..12),
            mut cuts in proptest::collection::vec(0usize..40_000, 0..40),
        ) {
            let frames: Vec<Decoded> = shapes
                .iter()
                .enumerate()
                .map(|(i, &(m, p))| frame(i as u32, m, p))
                .collect();
            let s = stream(&frames);
            cuts.sort_unstable();
            let chunks = chunk_at(&s, &cuts);
            prop_assert_eq!(decode(&chunks, 4096), (frames, Ok(())));
        }

        /// Damaged or random streams never panic, and the outcome (frames, then how the
        /// stream ends) does not depend on the chunking.
        #[test]
        fn damaged_streams_decode_the_same_however_chunked(
            shapes in proptest::collection::vec((0usize..=60, 0usize..600), 0..6),
            damage in proptest::collection::vec((0usize..5000, any::<u8>()), 0..4),
            cut_end in 0usize..5000,
            garbage in proptest::collection::vec(any::<u8>(), 0..300),
            mut cuts in proptest::collection::vec(0usize..6000, 0..30),
        ) {
            let frames: Vec<Decoded> = shapes
                .iter()
                .enumerate()
                .map(|(i, &(m, p))| frame(i as u32, m, p))
                .collect();
            let mut s = stream(&frames);
            s.extend_from_slice(&garbage);
            for (at, x) in damage {
                if !s.is_empty() {
                    let i = at % s.len();
                    s[i] ^= x;
                }
            }
            s.truncate(cut_end.min(s.len()));
            let whole = decode(&[&s], 1000);
            cuts.sort_unstable();
            let chunked = decode(&chunk_at(&s, &cuts), 1000);
            prop_assert_eq!(&whole, &chunked);
            let bytes: Vec<&[u8]> = s.chunks(1).collect();
            prop_assert_eq!(whole, decode(&bytes, 1000));
        }
    }
}
