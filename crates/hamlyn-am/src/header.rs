//! The active-message header: the first [`HEADER_LEN`] bytes of every message (seed 003
//! §5.1: logical channel, handler id, four integer arguments), little-endian:
//!
//! | off | size | field |
//! |---|---|---|
//! | 0 | 1 | version ([`VERSION`]) |
//! | 1 | 1 | kind ([`Kind`]) |
//! | 2 | 2 | logical channel |
//! | 4 | 4 | handler id (cluster-wide) |
//! | 8 | 4 | handler epoch |
//! | 12 | 4 | flags ([`WANT_REPLY`], [`WANT_ACK`]) |
//! | 16 | 8 | call id (the sender's; replies, acks and errors name it) |
//! | 24 | 32 | four u64 arguments |
//! | 56 | 4 | payload bytes after the header (bulk only) |
//! | 60 | 4 | error code ([`Refusal`], error kind only) |
//!
//! [`parse`] is the only way a peer's bytes become a header: it checks every field and
//! the payload length against the bytes that arrived, and never panics (fuzzed).

/// Bytes of the header.
pub const HEADER_LEN: usize = 64;
/// The header version this library speaks.
pub const VERSION: u8 = 1;
/// Flag: the sender waits for a reply.
pub const WANT_REPLY: u32 = 1;
/// Flag: the sender wants to know the handler ran (remote completion).
pub const WANT_ACK: u32 = 2;
const KNOWN_FLAGS: u32 = WANT_REPLY | WANT_ACK;

/// What a message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A short message: header only, one packet.
    Short = 1,
    /// A bulk message: header and payload.
    Bulk = 2,
    /// A handler's reply (arguments only).
    Reply = 3,
    /// The handler ran (remote completion).
    Ack = 4,
    /// The receiver refused the message or its handler failed ([`Refusal`]).
    Error = 5,
}

/// Why a receiver refused a message (carried by an error message).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No handler with that id is registered in the receiving process.
    NoHandler = 1,
    /// The handler was unregistered and registered again since the sender looked it up
    /// (another epoch).
    StaleEpoch = 2,
    /// The handler returned an error.
    HandlerFailed = 3,
    /// A reply was asked for and the handler did not give one.
    NoReply = 4,
    /// The receiver could not parse the message.
    Malformed = 5,
}

impl Refusal {
    fn from_u32(v: u32) -> Option<Refusal> {
        [
            Refusal::NoHandler,
            Refusal::StaleEpoch,
            Refusal::HandlerFailed,
            Refusal::NoReply,
            Refusal::Malformed,
        ]
        .into_iter()
        .find(|r| *r as u32 == v)
    }
}

/// A parsed header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What it is.
    pub kind: Kind,
    /// The sender's logical channel.
    pub channel: u16,
    /// The handler's cluster-wide id.
    pub handler: u32,
    /// The handler's epoch as the sender knew it.
    pub epoch: u32,
    /// [`WANT_REPLY`], [`WANT_ACK`].
    pub flags: u32,
    /// The sender's call id.
    pub call: u64,
    /// The four arguments.
    pub args: [u64; 4],
    /// Payload bytes after the header.
    pub payload_len: u32,
    /// The refusal, for an error message.
    pub refusal: Option<Refusal>,
}

/// Why bytes are not a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// Fewer bytes than a header.
    #[error("{0} bytes are shorter than an active-message header")]
    Short(usize),
    /// Another header version.
    #[error("header version {0} is not spoken here")]
    Version(u8),
    /// An unknown kind.
    #[error("unknown message kind {0}")]
    Kind(u8),
    /// Flags this version does not define.
    #[error("unknown flags {0:#x}")]
    Flags(u32),
    /// The payload length is not what arrived after the header.
    #[error("the header claims {claimed} payload bytes, {arrived} arrived")]
    PayloadLength {
        /// What the header says.
        claimed: u32,
        /// What came.
        arrived: u64,
    },
    /// An error message with an unknown or missing code, or a code on another kind.
    #[error("bad error code {0}")]
    Code(u32),
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Parses the header at the start of `bytes`; `arrived` is the message's whole length
/// (header and payload) as the engine reported it.
pub fn parse(bytes: &[u8], arrived: u64) -> Result<Header, HeaderError> {
    if bytes.len() < HEADER_LEN {
        return Err(HeaderError::Short(bytes.len()));
    }
    let b = &bytes[..HEADER_LEN];
    if b[0] != VERSION {
        return Err(HeaderError::Version(b[0]));
    }
    let kind = match b[1] {
        1 => Kind::Short,
        2 => Kind::Bulk,
        3 => Kind::Reply,
        4 => Kind::Ack,
        5 => Kind::Error,
        k => return Err(HeaderError::Kind(k)),
    };
    let flags = u32_at(b, 12);
    if flags & !KNOWN_FLAGS != 0 {
        return Err(HeaderError::Flags(flags));
    }
    let payload_len = u32_at(b, 56);
    let after = arrived.saturating_sub(HEADER_LEN as u64);
    let lies = match kind {
        Kind::Bulk => u64::from(payload_len) != after,
        _ => payload_len != 0 || after != 0,
    };
    if lies || arrived < HEADER_LEN as u64 {
        return Err(HeaderError::PayloadLength {
            claimed: payload_len,
            arrived: after,
        });
    }
    let code = u32_at(b, 60);
    let refusal = match (kind, code) {
        (Kind::Error, c) => Some(Refusal::from_u32(c).ok_or(HeaderError::Code(c))?),
        (_, 0) => None,
        (_, c) => return Err(HeaderError::Code(c)),
    };
    Ok(Header {
        kind,
        channel: u16::from_le_bytes([b[2], b[3]]),
        handler: u32_at(b, 4),
        epoch: u32_at(b, 8),
        flags,
        call: u64_at(b, 16),
        args: [u64_at(b, 24), u64_at(b, 32), u64_at(b, 40), u64_at(b, 48)],
        payload_len,
        refusal,
    })
}

impl Header {
    /// A header of `kind` with everything else zero.
    pub fn new(kind: Kind) -> Header {
        Header {
            kind,
            channel: 0,
            handler: 0,
            epoch: 0,
            flags: 0,
            call: 0,
            args: [0; 4],
            payload_len: 0,
            refusal: None,
        }
    }

    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = VERSION;
        b[1] = self.kind as u8;
        b[2..4].copy_from_slice(&self.channel.to_le_bytes());
        b[4..8].copy_from_slice(&self.handler.to_le_bytes());
        b[8..12].copy_from_slice(&self.epoch.to_le_bytes());
        b[12..16].copy_from_slice(&self.flags.to_le_bytes());
        b[16..24].copy_from_slice(&self.call.to_le_bytes());
        for (i, a) in self.args.iter().enumerate() {
            b[24 + 8 * i..32 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        b[56..60].copy_from_slice(&self.payload_len.to_le_bytes());
        let code = self.refusal.map_or(0, |r| r as u32);
        b[60..64].copy_from_slice(&code.to_le_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_header_round_trips_and_lies_are_refused() {
        let mut h = Header::new(Kind::Bulk);
        h.channel = 3;
        h.handler = 9;
        h.epoch = 2;
        h.flags = WANT_ACK;
        h.call = 77;
        h.args = [1, 2, 3, u64::MAX];
        h.payload_len = 100;
        let b = h.encode();
        assert_eq!(parse(&b, 164), Ok(h));
        assert!(matches!(
            parse(&b, 163),
            Err(HeaderError::PayloadLength { .. })
        ));
        assert!(matches!(
            parse(&b, 10),
            Err(HeaderError::PayloadLength { .. })
        ));
        assert_eq!(parse(&b[..63], 164), Err(HeaderError::Short(63)));
        let mut s = Header::new(Kind::Short);
        s.payload_len = 4;
        assert!(
            parse(&s.encode(), 68).is_err(),
            "a short message has no payload"
        );
        let mut e = Header::new(Kind::Error);
        assert_eq!(parse(&e.encode(), 64), Err(HeaderError::Code(0)));
        e.refusal = Some(Refusal::NoHandler);
        assert_eq!(parse(&e.encode(), 64), Ok(e));
        let mut bad = b;
        bad[1] = 9;
        assert_eq!(parse(&bad, 164), Err(HeaderError::Kind(9)));
        let mut bad = b;
        bad[12] = 0x80;
        assert!(matches!(parse(&bad, 164), Err(HeaderError::Flags(_))));
    }

    proptest! {
        #[test]
        fn any_bytes_parse_or_are_refused_and_what_parses_re_encodes(
            bytes in proptest::collection::vec(any::<u8>(), 0..80),
            arrived in 0u64..200,
        ) {
            if let Ok(h) = parse(&bytes, arrived) {
                prop_assert_eq!(parse(&h.encode(), arrived), Ok(h));
                prop_assert_eq!(&h.encode()[..], &bytes[..HEADER_LEN]);
            }
        }
    }
}
