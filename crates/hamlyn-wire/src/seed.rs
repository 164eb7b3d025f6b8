//! Seeds: one or more tickets plus protocol data, with an ASCII form.
//!
//! A seed is what one process hands another to start talking (seed 001 §3.2): the
//! tickets it needs and a little protocol-specific data (a reply slot, a record size, a
//! name). Its text form is `hmseed1-` followed by Crockford base32 of the binary form,
//! whose last four bytes are a CRC-32 of the rest. It survives a shell, an environment
//! variable and a file (surrounding white space is ignored); a mistyped, cut or foreign
//! string is rejected with a [`WireError`] that says which.
//!
//! Binary form: `version u8 = 1 | protocol u16 | ticket count u8 | data length u16 |
//! tickets (64 bytes each) | data | crc32 u32`, all little-endian.

use crate::base32;
use crate::crc::crc32;
use crate::error::WireError;
use crate::ticket::{Ticket, TICKET_LEN};

/// The text prefix of a version-1 seed.
pub const SEED_PREFIX: &str = "hmseed1-";
/// Seed layout version.
pub const SEED_VERSION: u8 = 1;
/// Most tickets one seed carries.
pub const MAX_SEED_TICKETS: usize = 16;
/// Most protocol data bytes one seed carries.
pub const MAX_SEED_DATA: usize = 1024;

/// Tickets plus protocol data.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Seed {
    /// Which library protocol the seed starts (0 = plain ticket exchange).
    pub protocol: u16,
    /// The tickets (1 to 16).
    pub tickets: Vec<Ticket>,
    /// Protocol-specific bytes (at most 1024).
    pub data: Vec<u8>,
}

impl Seed {
    /// A seed carrying one ticket and nothing else.
    pub fn single(ticket: Ticket) -> Seed {
        Seed {
            protocol: 0,
            tickets: vec![ticket],
            data: Vec::new(),
        }
    }

    /// The binary form, checksum included.
    pub fn to_bytes(&self) -> Result<Vec<u8>, WireError> {
        if self.tickets.is_empty() || self.tickets.len() > MAX_SEED_TICKETS {
            return Err(WireError::InvalidField {
                field: "tickets",
                why: "a seed holds 1 to 16",
            });
        }
        if self.data.len() > MAX_SEED_DATA {
            return Err(WireError::InvalidField {
                field: "data",
                why: "at most 1024 bytes",
            });
        }
        let mut out = Vec::with_capacity(6 + self.tickets.len() * TICKET_LEN + self.data.len());
        out.push(SEED_VERSION);
        out.extend_from_slice(&self.protocol.to_le_bytes());
        out.push(self.tickets.len() as u8);
        out.extend_from_slice(&(self.data.len() as u16).to_le_bytes());
        for t in &self.tickets {
            out.extend_from_slice(&t.to_bytes());
        }
        out.extend_from_slice(&self.data);
        let sum = crc32(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        Ok(out)
    }

    /// Parses the binary form: the checksum first, then every length and ticket.
    pub fn from_bytes(bytes: &[u8]) -> Result<Seed, WireError> {
        const FIXED: usize = 6;
        if bytes.len() < FIXED + 4 {
            return Err(WireError::Truncated {
                need: FIXED + 4,
                have: bytes.len(),
            });
        }
        let (body, sum) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_le_bytes([sum[0], sum[1], sum[2], sum[3]]);
        if crc32(body) != stored {
            return Err(WireError::BadChecksum);
        }
        if body[0] != SEED_VERSION {
            return Err(WireError::UnsupportedVersion(body[0]));
        }
        let protocol = u16::from_le_bytes([body[1], body[2]]);
        let count = usize::from(body[3]);
        let data_len = usize::from(u16::from_le_bytes([body[4], body[5]]));
        if count == 0 || count > MAX_SEED_TICKETS {
            return Err(WireError::InvalidField {
                field: "tickets",
                why: "a seed holds 1 to 16",
            });
        }
        if data_len > MAX_SEED_DATA {
            return Err(WireError::InvalidField {
                field: "data",
                why: "at most 1024 bytes",
            });
        }
        let need = FIXED + count * TICKET_LEN + data_len;
        if body.len() != need {
            return Err(WireError::LengthMismatch {
                stated: need as u64,
                actual: body.len(),
            });
        }
        let mut tickets = Vec::with_capacity(count);
        for i in 0..count {
            let at = FIXED + i * TICKET_LEN;
            tickets.push(Ticket::from_bytes(&body[at..at + TICKET_LEN])?);
        }
        let data = body[FIXED + count * TICKET_LEN..].to_vec();
        Ok(Seed {
            protocol,
            tickets,
            data,
        })
    }

    /// The ASCII form: `hmseed1-` and lower-case Crockford base32.
    pub fn to_text(&self) -> Result<String, WireError> {
        Ok(format!(
            "{SEED_PREFIX}{}",
            base32::encode(&self.to_bytes()?)
        ))
    }

    /// Parses the ASCII form. Surrounding white space is ignored, as are hyphens inside
    /// the base32 part; the prefix is case-insensitive.
    pub fn from_text(text: &str) -> Result<Seed, WireError> {
        let t = text.trim();
        let prefix_ok = t
            .get(..SEED_PREFIX.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(SEED_PREFIX));
        if !prefix_ok {
            return Err(WireError::BadSeedPrefix);
        }
        let bytes = base32::decode(&t[SEED_PREFIX.len()..], SEED_PREFIX.len())?;
        Seed::from_bytes(&bytes)
    }
}

impl core::str::FromStr for Seed {
    type Err = WireError;
    fn from_str(s: &str) -> Result<Seed, WireError> {
        Seed::from_text(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{NodeId, SlotId};
    use crate::ticket::{TicketFlags, FULL_SHARE};
    use proptest::prelude::*;

    fn sample() -> Seed {
        let t = Ticket {
            node: NodeId(1),
            incarnation: 2,
            slot: SlotId(3),
            key: 0x0123_4567_89AB_CDEF,
            meta_first: 0,
            meta_count: 8,
            offset: 0,
            len: 4096,
            share: FULL_SHARE,
            flags: TicketFlags::WRITE | TicketFlags::READ,
        };
        Seed {
            protocol: 7,
            tickets: vec![t, t],
            data: b"reply".to_vec(),
        }
    }

    #[test]
    fn text_round_trip_survives_whitespace_and_case() {
        let s = sample();
        let text = s.to_text().unwrap();
        assert!(text.starts_with("hmseed1-"));
        assert!(text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
        assert_eq!(Seed::from_text(&text).unwrap(), s);
        assert_eq!(Seed::from_text(&format!("  {text}\n")).unwrap(), s);
        assert_eq!(Seed::from_text(&text.to_uppercase()).unwrap(), s);
    }

    #[test]
    fn foreign_strings_are_rejected_clearly() {
        assert_eq!(Seed::from_text("hello"), Err(WireError::BadSeedPrefix));
        assert_eq!(Seed::from_text(""), Err(WireError::BadSeedPrefix));
        let text = sample().to_text().unwrap();
        let mut bad = text.clone();
        bad.insert(12, '!');
        assert_eq!(
            Seed::from_text(&bad),
            Err(WireError::BadSeedChar { ch: '!', pos: 12 })
        );
        assert!(Seed::from_text(&text[..text.len() - 3]).is_err());
    }

    proptest! {
        /// Any single substituted character is caught (CRC-32 detects every burst error of
        /// up to 32 bits, and one base32 character covers 5).
        #[test]
        fn any_single_typo_is_rejected(pos in 8usize..200, sub in 0usize..32) {
            let text = sample().to_text().unwrap();
            let pos = 8 + (pos - 8) % (text.len() - 8);
            let alphabet = b"0123456789abcdefghjkmnpqrstvwxyz";
            let orig = text.as_bytes()[pos];
            let new = alphabet[sub];
            prop_assume!(new != orig);
            let mut typo = text.into_bytes();
            typo[pos] = new;
            let typo = String::from_utf8(typo).unwrap();
            prop_assert!(Seed::from_text(&typo).is_err());
        }

        /// Dropping any one character is caught.
        #[test]
        fn any_dropped_character_is_rejected(pos in 8usize..200) {
            let text = sample().to_text().unwrap();
            let pos = 8 + (pos - 8) % (text.len() - 8);
            let mut cut = text.clone();
            cut.remove(pos);
            prop_assert!(Seed::from_text(&cut).is_err());
        }
    }
}
