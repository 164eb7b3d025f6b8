//! The bytes of a call frame and of a reply, sans-IO.
//!
//! A call frame (in the server's memory, written by the client):
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 4 | procedure number; bit 31: a segment ticket follows the arguments |
//! | 4 | 4 | argument length |
//! | 8 | 8 | call id (also the write's tag) |
//! | 16 | `len` | arguments |
//! | 16 + `len` | 64 | with bit 31: the ticket of the client's segment (call by reference) |
//!
//! A reply (in the client's memory, written by the server), one slot of [`REPLY_BYTES`]
//! per frame:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 2 | [`Status`] |
//! | 2 | 2 | writes the procedure made into the caller's segment (each notifies it) |
//! | 4 | 4 | result length |
//! | 8 | 8 | call id |
//! | 16 | `len` | result (or the error's message) |

/// Call frames a server exports to each client: calls one client may have outstanding.
pub const FRAMES: usize = 8;
/// Bytes of one call frame.
pub const FRAME_BYTES: usize = 4096;
/// Bytes of one reply.
pub const REPLY_BYTES: usize = 4096;
/// Header bytes of a frame or a reply.
pub const HEADER: usize = 16;
/// The most argument bytes a call carries.
pub const MAX_ARGS: usize = FRAME_BYTES - HEADER;
/// The most result bytes a reply carries.
pub const MAX_RESULT: usize = REPLY_BYTES - HEADER;

/// How a call ended, as the server says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Status {
    /// The procedure ran; the result follows.
    Ok,
    /// The procedure ran and failed; its message follows.
    Failed,
    /// No procedure has that number.
    UnknownProcedure,
    /// The frame's lengths do not fit the frame.
    BadFrame,
    /// The call id in the frame is not the one its notification named (the frame was
    /// rewritten meanwhile).
    Mismatch,
}

impl Status {
    fn code(self) -> u32 {
        match self {
            Status::Ok => 0,
            Status::Failed => 1,
            Status::UnknownProcedure => 2,
            Status::BadFrame => 3,
            Status::Mismatch => 4,
        }
    }

    fn from_code(c: u32) -> Option<Status> {
        Some(match c {
            0 => Status::Ok,
            1 => Status::Failed,
            2 => Status::UnknownProcedure,
            3 => Status::BadFrame,
            4 => Status::Mismatch,
            _ => return None,
        })
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Bit of the procedure field saying a segment ticket follows the arguments.
const BY_REF: u32 = 1 << 31;
/// Bytes of a segment ticket.
pub const SEGMENT: usize = 64;

/// A call frame's bytes (header and arguments); `None` if the arguments do not fit.
pub fn encode_call(procedure: u32, call: u64, args: &[u8]) -> Option<Vec<u8>> {
    encode_call_by_ref(procedure, call, args, None)
}

/// A call frame naming a segment of the client (its ticket's bytes) besides the
/// arguments; `None` if they do not fit or the procedure number uses bit 31.
pub fn encode_call_by_ref(
    procedure: u32,
    call: u64,
    args: &[u8],
    segment: Option<&[u8; SEGMENT]>,
) -> Option<Vec<u8>> {
    let extra = if segment.is_some() { SEGMENT } else { 0 };
    if args.len() + extra > MAX_ARGS || procedure & BY_REF != 0 {
        return None;
    }
    let mut b = Vec::with_capacity(HEADER + args.len() + extra);
    let field = procedure | if segment.is_some() { BY_REF } else { 0 };
    b.extend_from_slice(&field.to_le_bytes());
    b.extend_from_slice(&(args.len() as u32).to_le_bytes());
    b.extend_from_slice(&call.to_le_bytes());
    b.extend_from_slice(args);
    if let Some(t) = segment {
        b.extend_from_slice(t);
    }
    Some(b)
}

/// A decoded call frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallFrame<'a> {
    /// The procedure's number.
    pub procedure: u32,
    /// The call's id.
    pub call: u64,
    /// The arguments.
    pub args: &'a [u8],
    /// The client's segment ticket, for a call by reference (not checked here: the
    /// engine checks it when the server uses it).
    pub segment: Option<&'a [u8]>,
}

/// Decodes a frame as the server finds it (any bytes: the client wrote them).
pub fn decode_call(frame: &[u8]) -> Result<CallFrame<'_>, Status> {
    let field = u32_at(frame, 0).ok_or(Status::BadFrame)?;
    let len = u32_at(frame, 4).ok_or(Status::BadFrame)? as usize;
    let call = u64_at(frame, 8).ok_or(Status::BadFrame)?;
    let extra = if field & BY_REF != 0 { SEGMENT } else { 0 };
    if len + extra > MAX_ARGS {
        return Err(Status::BadFrame);
    }
    let args = frame.get(HEADER..HEADER + len).ok_or(Status::BadFrame)?;
    let segment = match extra {
        0 => None,
        _ => Some(
            frame
                .get(HEADER + len..HEADER + len + SEGMENT)
                .ok_or(Status::BadFrame)?,
        ),
    };
    Ok(CallFrame {
        procedure: field & !BY_REF,
        call,
        args,
        segment,
    })
}

/// A reply's bytes; a result that does not fit is cut to a `Failed` reply saying so.
pub fn encode_reply(status: Status, call: u64, body: &[u8]) -> Vec<u8> {
    encode_reply_after_writes(status, call, body, 0)
}

/// A reply that also says how many writes the procedure made into the caller's segment:
/// the caller counts their arrivals before it trusts the segment (over TCP a reply can
/// overtake the writes before it).
pub fn encode_reply_after_writes(status: Status, call: u64, body: &[u8], writes: u16) -> Vec<u8> {
    let (status, body): (Status, &[u8]) = if body.len() > MAX_RESULT {
        (Status::Failed, b"result longer than a reply")
    } else {
        (status, body)
    };
    let mut b = Vec::with_capacity(HEADER + body.len());
    b.extend_from_slice(&(status.code() as u16).to_le_bytes());
    b.extend_from_slice(&writes.to_le_bytes());
    b.extend_from_slice(&(body.len() as u32).to_le_bytes());
    b.extend_from_slice(&call.to_le_bytes());
    b.extend_from_slice(body);
    b
}

/// A decoded reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply<'a> {
    /// How the call ended.
    pub status: Status,
    /// Which call it answers.
    pub call: u64,
    /// The result, or the error's message.
    pub body: &'a [u8],
    /// Writes made into the caller's segment before the reply.
    pub writes: u16,
}

/// Decodes a reply as the client finds it (the server wrote it).
pub fn decode_reply(reply: &[u8]) -> Option<Reply<'_>> {
    let word = u32_at(reply, 0)?;
    let status = Status::from_code(word & 0xFFFF)?;
    let writes = (word >> 16) as u16;
    let len = u32_at(reply, 4)? as usize;
    let call = u64_at(reply, 8)?;
    if len > MAX_RESULT {
        return None;
    }
    Some(Reply {
        status,
        call,
        body: reply.get(HEADER..HEADER + len)?,
        writes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_replies_round_trip() {
        let f = encode_call(3, 99, b"args").expect("fits");
        assert_eq!(
            decode_call(&f),
            Ok(CallFrame {
                procedure: 3,
                call: 99,
                args: b"args",
                segment: None,
            })
        );
        let t = [7u8; SEGMENT];
        let f = encode_call_by_ref(3, 100, b"a", Some(&t)).expect("fits");
        let d = decode_call(&f).expect("decodes");
        assert_eq!(
            (d.procedure, d.args, d.segment),
            (3, &b"a"[..], Some(&t[..]))
        );
        assert!(encode_call_by_ref(BY_REF, 1, b"", None).is_none());
        let r = encode_reply(Status::Ok, 99, b"result");
        let d = decode_reply(&r).expect("decodes");
        assert_eq!((d.status, d.call, d.body), (Status::Ok, 99, &b"result"[..]));
        assert!(encode_call(0, 0, &vec![0; MAX_ARGS + 1]).is_none());
    }

    #[test]
    fn lying_lengths_are_refused() {
        let mut f = encode_call(1, 2, &[7; 10]).expect("fits");
        f[4..8].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(
            decode_call(&f),
            Err(Status::BadFrame),
            "longer than what is there"
        );
        f[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode_call(&f), Err(Status::BadFrame));
        assert_eq!(decode_call(&f[..5]), Err(Status::BadFrame));
        let mut r = encode_reply(Status::Ok, 1, b"x");
        r[4..8].copy_from_slice(&(MAX_RESULT as u32 + 1).to_le_bytes());
        assert!(decode_reply(&r).is_none());
        r[0..4].copy_from_slice(&77u32.to_le_bytes());
        assert!(decode_reply(&r).is_none(), "unknown status");
        let w = encode_reply_after_writes(Status::Ok, 3, b"", 513);
        assert_eq!(decode_reply(&w).map(|r| r.writes), Some(513));
        let big = encode_reply(Status::Ok, 5, &vec![1; MAX_RESULT + 1]);
        assert_eq!(decode_reply(&big).map(|r| r.status), Some(Status::Failed));
    }
}
