//! Seeds: tickets (and a little protocol data) as text one process hands another to start
//! talking, through a file, an environment variable or a command line (the format:
//! docs/spec/wire.md §3).
//!
//! ```
//! # use hamlyn::{NodeId, SlotId, Ticket, TicketFlags};
//! # let ticket = Ticket { node: NodeId(1), incarnation: 7, slot: SlotId(2), key: 42,
//! #     meta_first: 0, meta_count: 1, offset: 0, len: 64, share: 1 << 32,
//! #     flags: TicketFlags::WRITE };
//! let text = hamlyn::seed::ticket_to_text(&ticket)?;
//! assert!(text.starts_with("hmseed1-"));
//! assert_eq!(hamlyn::seed::ticket_from_text(&text)?, ticket);
//! # Ok::<(), hamlyn::Error>(())
//! ```

use hamlyn_wire::{Seed, Ticket};

use crate::error::Error;

/// The text form of a seed carrying just `ticket`.
pub fn ticket_to_text(ticket: &Ticket) -> Result<String, Error> {
    Seed::single(*ticket).to_text().map_err(Error::Seed)
}

/// The first ticket of a seed's text form (surrounding white space is ignored; typos and
/// cut strings are refused by the seed's checksum).
pub fn ticket_from_text(text: &str) -> Result<Ticket, Error> {
    let seed = Seed::from_text(text).map_err(Error::Seed)?;
    seed.tickets
        .first()
        .copied()
        .ok_or(Error::InvalidArgument("the seed carries no ticket"))
}

/// The text form of a seed.
pub fn to_text(seed: &Seed) -> Result<String, Error> {
    seed.to_text().map_err(Error::Seed)
}

/// Parses a seed's text form.
pub fn from_text(text: &str) -> Result<Seed, Error> {
    Seed::from_text(text).map_err(Error::Seed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hamlyn_wire::{NodeId, SlotId, TicketFlags, FULL_SHARE};

    fn ticket() -> Ticket {
        Ticket {
            node: NodeId(3),
            incarnation: 11,
            slot: SlotId(9),
            key: 0x0123_4567_89AB_CDEF,
            meta_first: 2,
            meta_count: 4,
            offset: 128,
            len: 4096,
            share: FULL_SHARE,
            flags: TicketFlags::WRITE | TicketFlags::FAST,
        }
    }

    #[test]
    fn tickets_round_trip_through_text() {
        let text = ticket_to_text(&ticket()).unwrap();
        assert_eq!(ticket_from_text(&text).unwrap(), ticket());
        assert_eq!(
            ticket_from_text(&format!("\n  {text}  \n")).unwrap(),
            ticket()
        );
        let seed = Seed {
            protocol: 5,
            tickets: vec![ticket(), ticket()],
            data: b"reply-to".to_vec(),
        };
        assert_eq!(from_text(&to_text(&seed).unwrap()).unwrap(), seed);
    }

    #[test]
    fn damaged_text_is_refused() {
        let text = ticket_to_text(&ticket()).unwrap();
        assert!(matches!(ticket_from_text("hello"), Err(Error::Seed(_))));
        assert!(ticket_from_text(&text[..text.len() - 1]).is_err());
        let mut typo = text.into_bytes();
        let i = typo.len() / 2;
        typo[i] = if typo[i] == b'a' { b'b' } else { b'a' };
        assert!(ticket_from_text(std::str::from_utf8(&typo).unwrap()).is_err());
    }
}
