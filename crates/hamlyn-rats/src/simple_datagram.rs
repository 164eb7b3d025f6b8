//! Simple datagram (seed 001 §3.2, seed 000 §3.3): one receive buffer per instance,
//! "ready" or "not ready", no queue. Each message may carry a reply seed — a compact
//! ticket (36 bytes) in its metadata beside up to [`MAX_OOB_WITH_REPLY`] user bytes —
//! so two instances ping-pong with
//! `srv.reply_seed()?.send(&mgr, bytes, Some(&srv.metadata_for_self()?), oob)`.
//! Seeds can be split ([`split_seed`]) for group receive: the receiver is told once,
//! after every member's part arrived.
//!
//! Metadata: version, flags (bit 0: a reply ticket follows), the reply ticket if any,
//! then the user's bytes.

use std::time::{Duration, Instant};

use hamlyn::{NodeId, Notification, NotificationKind, Seed, SendHandle, SendOptions, Ticket};

use crate::error::RatsError;
use crate::manager::{Endpoint, EndpointSpec, InstanceId, Manager};
use crate::protocol::{
    check_seed, decode_compact, encode_compact, make_seed, MetaWriter, ProtocolId, Reader,
    COMPACT_TICKET_LEN, VERSION,
};

/// User bytes a message with a reply seed carries.
pub const MAX_OOB_WITH_REPLY: usize = hamlyn::MAX_META_LEN - 2 - COMPACT_TICKET_LEN;
/// User bytes a message without one carries.
pub const MAX_OOB: usize = hamlyn::MAX_META_LEN - 2;
const HAS_REPLY: u8 = 1;

/// A reply seed: where to send an answer (a compact ticket).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplySeed {
    ticket: Ticket,
}

impl ReplySeed {
    /// Sends `bytes` to the instance this seed names, with `reply` (this side's own
    /// reply seed, [`SimpleDatagram::metadata_for_self`]) and user bytes `oob`: no client
    /// instance is built for it.
    pub fn send(
        &self,
        mgr: &Manager,
        bytes: &[u8],
        reply: Option<&ReplySeed>,
        oob: &[u8],
    ) -> Result<SendHandle, RatsError> {
        send(mgr, &self.ticket, bytes, reply, oob)
    }

    /// The ticket.
    pub fn ticket(&self) -> &Ticket {
        &self.ticket
    }
}

/// One message received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimpleMessage {
    /// Its first byte (slot-relative).
    pub offset: u64,
    /// Its bytes (a group's: all members').
    pub len: u64,
    /// The node that completed it.
    pub src: NodeId,
    /// The reply seed it carried.
    pub reply: Option<ReplySeed>,
    oob: [u8; MAX_OOB],
    oob_len: u8,
}

impl SimpleMessage {
    /// The sender's out-of-band bytes.
    pub fn oob(&self) -> &[u8] {
        &self.oob[..usize::from(self.oob_len)]
    }
}

/// The receiving side: one buffer.
#[derive(Debug)]
pub struct SimpleDatagram {
    mgr: Manager,
    id: InstanceId,
    ep: Endpoint,
    last: Option<SimpleMessage>,
    forged: u64,
}

impl SimpleDatagram {
    /// A receiver whose buffer is `len` bytes of the manager's message space.
    pub fn new(mgr: &Manager, len: u64) -> Result<SimpleDatagram, RatsError> {
        let id = mgr.register();
        match mgr.endpoint(id, len, 1, EndpointSpec::default()) {
            Ok(ep) => Ok(SimpleDatagram {
                mgr: mgr.clone(),
                id,
                ep,
                last: None,
                forged: 0,
            }),
            Err(e) => {
                mgr.unregister(id);
                Err(e)
            }
        }
    }

    /// The instance's number.
    pub fn id(&self) -> InstanceId {
        self.id
    }

    /// Arrivals refused as forged.
    pub fn forged(&self) -> u64 {
        self.forged
    }

    /// A seed for senders: a ticket for the whole buffer.
    pub fn make_seed(&self) -> Result<Seed, RatsError> {
        let t = self.ep.ticket(0..self.ep.len(), 0..1)?;
        Ok(make_seed(ProtocolId::SimpleDatagram, vec![t], &[]))
    }

    /// A seed for senders of bytes `range` of the buffer only (the receiver chooses
    /// where data lies).
    pub fn make_seed_for(&self, range: std::ops::Range<u64>) -> Result<Seed, RatsError> {
        let t = self.ep.ticket(range, 0..1)?;
        Ok(make_seed(ProtocolId::SimpleDatagram, vec![t], &[]))
    }

    /// This instance's reply seed, to send along ([`ReplySeed::send`]).
    pub fn metadata_for_self(&self) -> Result<ReplySeed, RatsError> {
        Ok(ReplySeed {
            ticket: self.ep.ticket(0..self.ep.len(), 0..1)?,
        })
    }

    /// The reply seed of the last message received.
    pub fn reply_seed(&self) -> Result<ReplySeed, RatsError> {
        self.last
            .and_then(|m| m.reply)
            .ok_or(RatsError::State("the last message carried no reply seed"))
    }

    /// Whether a message is ready (never blocks).
    pub fn ready(&mut self) -> Result<Option<SimpleMessage>, RatsError> {
        while let Some(n) = self.mgr.take(self.id) {
            if let Some(m) = self.accept(&n) {
                return Ok(Some(m));
            }
        }
        Ok(None)
    }

    /// Waits up to `timeout` (`None`: forever) for the next message.
    pub fn recv(&mut self, timeout: Option<Duration>) -> Result<Option<SimpleMessage>, RatsError> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let Some(n) = self.mgr.wait(self.id, deadline)? else {
                return Ok(None);
            };
            if let Some(m) = self.accept(&n) {
                return Ok(Some(m));
            }
        }
    }

    /// A message's bytes, copied out.
    pub fn to_vec(&self, m: &SimpleMessage) -> Result<Vec<u8>, RatsError> {
        let mut v = vec![0u8; m.len as usize];
        self.ep.read(m.offset, &mut v)?;
        Ok(v)
    }

    /// Copies bytes of the buffer out.
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), RatsError> {
        self.ep.read(off, buf)
    }

    fn accept(&mut self, n: &Notification) -> Option<SimpleMessage> {
        if n.kind != NotificationKind::Message {
            return None;
        }
        match self.parse(n) {
            Ok(m) => {
                self.last = Some(m);
                Some(m)
            }
            Err(_) => {
                self.forged += 1;
                self.mgr.count_forged();
                None
            }
        }
    }

    fn parse(&self, n: &Notification) -> Result<SimpleMessage, RatsError> {
        let offset = n.offset.ok_or(RatsError::Forged("no offset"))?;
        let len = u64::from(n.len);
        self.ep.check(offset, len)?;
        let entry = self
            .ep
            .meta()
            .ok_or(RatsError::Forged("entry"))?
            .entry(n.meta_index.ok_or(RatsError::Forged("entry"))?)?;
        let (reply, oob) = parse_meta(entry.metadata())?;
        let mut m = SimpleMessage {
            offset,
            len,
            src: n.src_node,
            reply,
            oob: [0; MAX_OOB],
            oob_len: oob.len() as u8,
        };
        m.oob[..oob.len()].copy_from_slice(oob);
        Ok(m)
    }
}

impl Drop for SimpleDatagram {
    fn drop(&mut self) {
        self.mgr.unregister(self.id);
    }
}

/// Parses a simple datagram's metadata: the reply seed, if any, and the user's bytes.
/// Whatever a peer wrote, this returns a value or [`RatsError::Forged`] (fuzzed).
pub fn parse_meta(meta: &[u8]) -> Result<(Option<ReplySeed>, &[u8]), RatsError> {
    let mut r = Reader::new(meta);
    if r.u8()? != VERSION {
        return Err(RatsError::Forged("version"));
    }
    let flags = r.u8()?;
    if flags & !HAS_REPLY != 0 {
        return Err(RatsError::Forged("unknown flags"));
    }
    let reply = if flags & HAS_REPLY != 0 {
        Some(ReplySeed {
            ticket: decode_compact(&mut r)?,
        })
    } else {
        None
    };
    let oob = r.rest();
    if oob.len() > MAX_OOB {
        return Err(RatsError::Forged("metadata too long"));
    }
    Ok((reply, oob))
}

fn send(
    mgr: &Manager,
    ticket: &Ticket,
    bytes: &[u8],
    reply: Option<&ReplySeed>,
    oob: &[u8],
) -> Result<SendHandle, RatsError> {
    let mut meta = MetaWriter::new();
    match reply {
        Some(r) => {
            meta.put(&[VERSION, HAS_REPLY])?
                .put(&encode_compact(&r.ticket)?)?;
        }
        None => {
            meta.put(&[VERSION, 0])?;
        }
    }
    meta.put(oob)?;
    let opts = SendOptions::new().meta(meta.bytes()).entry(0);
    mgr.send_bytes(ticket, &opts, bytes)
}

/// Splits a simple-datagram seed into `parts` seeds over consecutive parts of its range
/// (group receive): the receiver is told once, when all of them have sent.
pub fn split_seed(seed: &Seed, parts: usize) -> Result<Vec<Seed>, RatsError> {
    check_seed(seed, ProtocolId::SimpleDatagram, 1)?;
    let tickets = seed.tickets[0]
        .split(parts)
        .map_err(|e| RatsError::Hamlyn(e.into()))?;
    Ok(tickets
        .into_iter()
        .map(|t| make_seed(ProtocolId::SimpleDatagram, vec![t], &[]))
        .collect())
}

/// The sending side.
#[derive(Debug, Clone)]
pub struct SimpleClient {
    mgr: Manager,
    ticket: Ticket,
}

impl SimpleClient {
    /// A client of the receiver (or group part) `seed` names.
    pub fn from_seed(mgr: &Manager, seed: &Seed) -> Result<SimpleClient, RatsError> {
        check_seed(seed, ProtocolId::SimpleDatagram, 1)?;
        Ok(SimpleClient {
            mgr: mgr.clone(),
            ticket: seed.tickets[0],
        })
    }

    /// Bytes this client may send (its part of the buffer).
    pub fn len(&self) -> u64 {
        self.ticket.len
    }

    /// Whether its range is empty.
    pub fn is_empty(&self) -> bool {
        self.ticket.len == 0
    }

    /// Sends `bytes` to the start of its range with an optional reply seed and user
    /// bytes.
    pub fn send(
        &self,
        bytes: &[u8],
        reply: Option<&ReplySeed>,
        oob: &[u8],
    ) -> Result<SendHandle, RatsError> {
        send(&self.mgr, &self.ticket, bytes, reply, oob)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn metadata_parser_refuses_what_it_cannot_read() {
        assert!(parse_meta(&[]).is_err());
        assert!(parse_meta(&[2, 0]).is_err(), "version");
        assert!(parse_meta(&[VERSION, 0x80]).is_err(), "flags");
        assert!(
            parse_meta(&[VERSION, HAS_REPLY, 1, 2]).is_err(),
            "short ticket"
        );
        let (r, oob) = parse_meta(&[VERSION, 0, 7, 8]).unwrap();
        assert_eq!((r, oob), (None, &[7u8, 8][..]));
    }
}
