//! What every protocol shares: its id and version in a seed (`Seed::protocol` and the
//! first byte of `Seed::data`), the compact reply ticket that fits in metadata, and a
//! reader for bytes a peer wrote (every read checked, none panics).

use hamlyn::{NodeId, Seed, SlotId, Ticket, TicketFlags};

use crate::error::RatsError;

/// The protocols of this crate, as `Seed::protocol` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
#[non_exhaustive]
pub enum ProtocolId {
    /// Tagged remote write ([`crate::tagged`]).
    Tagged = 0x5201,
    /// Remote write ([`crate::remote_write`]).
    RemoteWrite = 0x5202,
    /// Datagram ([`crate::datagram`]).
    Datagram = 0x5203,
    /// Simple datagram ([`crate::simple_datagram`]).
    SimpleDatagram = 0x5204,
    /// Remote read ([`crate::remote_read`]).
    RemoteRead = 0x5205,
    /// Stream ([`crate::stream`]).
    Stream = 0x5206,
    /// Initial request/response ([`crate::request_response`]).
    RequestResponse = 0x5207,
}

/// The version of every protocol's seed and metadata this library speaks.
pub const VERSION: u8 = 1;

/// A seed for `protocol`: its tickets and parameters (after the version byte).
pub fn make_seed(protocol: ProtocolId, tickets: Vec<Ticket>, params: &[u8]) -> Seed {
    let mut data = Vec::with_capacity(1 + params.len());
    data.push(VERSION);
    data.extend_from_slice(params);
    Seed {
        protocol: protocol as u16,
        tickets,
        data,
    }
}

/// Checks that `seed` starts `protocol` at [`VERSION`] and carries at least `tickets`
/// tickets; returns its parameters (the data after the version byte).
pub fn check_seed(seed: &Seed, protocol: ProtocolId, tickets: usize) -> Result<&[u8], RatsError> {
    if seed.protocol != protocol as u16 {
        return Err(RatsError::WrongProtocol {
            expected: protocol as u16,
            found: seed.protocol,
        });
    }
    let (&version, params) = seed
        .data
        .split_first()
        .ok_or(RatsError::BadSeed("no version byte"))?;
    if version != VERSION {
        return Err(RatsError::WrongVersion {
            protocol: protocol as u16,
            found: version,
            supported: VERSION,
        });
    }
    if seed.tickets.len() < tickets {
        return Err(RatsError::BadSeed("too few tickets"));
    }
    Ok(params)
}

/// Bytes of a compact ticket ([`encode_compact`]).
pub const COMPACT_TICKET_LEN: usize = 36;

/// A write ticket for one metadata entry, unsplit, in 36 bytes (the paper's reply
/// ticket needed 44): node, incarnation, slot, key, entry, offset and length (at most
/// 4 GiB). What a reply seed carries in metadata.
pub fn encode_compact(t: &Ticket) -> Result<[u8; COMPACT_TICKET_LEN], RatsError> {
    let len = u32::try_from(t.len).map_err(|_| RatsError::InvalidArgument("ticket over 4 GiB"))?;
    let mut b = [0u8; COMPACT_TICKET_LEN];
    b[0..4].copy_from_slice(&t.node.0.to_le_bytes());
    b[4..8].copy_from_slice(&t.incarnation.to_le_bytes());
    b[8..12].copy_from_slice(&t.slot.0.to_le_bytes());
    b[12..20].copy_from_slice(&t.key.to_le_bytes());
    b[20..24].copy_from_slice(&t.meta_first.to_le_bytes());
    b[24..32].copy_from_slice(&t.offset.to_le_bytes());
    b[32..36].copy_from_slice(&len.to_le_bytes());
    Ok(b)
}

/// The ticket a compact ticket names (write, one entry, full share). Any 36 bytes
/// decode; whether the ticket works is for its target engine to say.
pub fn decode_compact(r: &mut Reader<'_>) -> Result<Ticket, RatsError> {
    Ok(Ticket {
        node: NodeId(r.u32()?),
        incarnation: r.u32()?,
        slot: SlotId(r.u32()?),
        key: r.u64()?,
        meta_first: r.u32()?,
        meta_count: 1,
        offset: r.u64()?,
        len: u64::from(r.u32()?),
        share: hamlyn_full_share(),
        flags: TicketFlags::WRITE,
    })
}

/// The share of an unsplit ticket (2^32).
pub(crate) const fn hamlyn_full_share() -> u64 {
    1 << 32
}

/// Reads little-endian fields from bytes a peer wrote; a short buffer is
/// [`RatsError::Forged`], never a panic.
#[derive(Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes }
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], RatsError> {
        if self.bytes.len() < n {
            return Err(RatsError::Forged("metadata too short"));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    /// What is left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.bytes)
    }

    /// One byte.
    pub fn u8(&mut self) -> Result<u8, RatsError> {
        Ok(self.take(1)?[0])
    }

    /// A little-endian u16.
    pub fn u16(&mut self) -> Result<u16, RatsError> {
        let mut b = [0u8; 2];
        b.copy_from_slice(self.take(2)?);
        Ok(u16::from_le_bytes(b))
    }

    /// A little-endian u32.
    pub fn u32(&mut self) -> Result<u32, RatsError> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }

    /// A little-endian u64.
    pub fn u64(&mut self) -> Result<u64, RatsError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
}

/// Builds metadata (at most 60 bytes) on the stack.
#[derive(Clone, Copy, Debug)]
pub struct MetaWriter {
    buf: [u8; hamlyn::MAX_META_LEN],
    len: usize,
}

impl Default for MetaWriter {
    fn default() -> Self {
        MetaWriter::new()
    }
}

impl MetaWriter {
    /// Empty metadata.
    pub fn new() -> MetaWriter {
        MetaWriter {
            buf: [0; hamlyn::MAX_META_LEN],
            len: 0,
        }
    }

    /// Appends `bytes`; more than 60 in all is [`RatsError::TooLong`].
    pub fn put(&mut self, bytes: &[u8]) -> Result<&mut Self, RatsError> {
        let end = self.len + bytes.len();
        let dst = self.buf.get_mut(self.len..end).ok_or(RatsError::TooLong {
            len: end as u64,
            max: hamlyn::MAX_META_LEN as u64,
        })?;
        dst.copy_from_slice(bytes);
        self.len = end;
        Ok(self)
    }

    /// The bytes written.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ticket() -> Ticket {
        Ticket {
            node: NodeId(3),
            incarnation: 9,
            slot: SlotId(77),
            key: 0xDEAD_BEEF_0123_4567,
            meta_first: 5,
            meta_count: 1,
            offset: 4096,
            len: 1 << 20,
            share: 1 << 32,
            flags: TicketFlags::WRITE,
        }
    }

    #[test]
    fn compact_tickets_round_trip_and_short_input_is_an_error() {
        let b = encode_compact(&ticket()).unwrap();
        assert_eq!(decode_compact(&mut Reader::new(&b)).unwrap(), ticket());
        for n in 0..COMPACT_TICKET_LEN {
            assert!(matches!(
                decode_compact(&mut Reader::new(&b[..n])),
                Err(RatsError::Forged(_))
            ));
        }
    }

    #[test]
    fn seeds_name_protocol_and_version() {
        let s = make_seed(ProtocolId::Tagged, vec![ticket()], b"p");
        assert_eq!(check_seed(&s, ProtocolId::Tagged, 1).unwrap(), b"p");
        assert!(matches!(
            check_seed(&s, ProtocolId::Stream, 1),
            Err(RatsError::WrongProtocol {
                expected: 0x5206,
                found: 0x5201
            })
        ));
        let mut old = s.clone();
        old.data[0] = 7;
        assert!(matches!(
            check_seed(&old, ProtocolId::Tagged, 1),
            Err(RatsError::WrongVersion { found: 7, .. })
        ));
        assert!(matches!(
            check_seed(&s, ProtocolId::Tagged, 2),
            Err(RatsError::BadSeed(_))
        ));
        let mut empty = s;
        empty.data.clear();
        assert!(check_seed(&empty, ProtocolId::Tagged, 1).is_err());
    }
}
