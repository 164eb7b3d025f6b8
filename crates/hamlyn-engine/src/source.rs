//! Where a packet's payload bytes come from: bytes in hand (a request's inline data, an
//! atomic's old value) or ranges of registered areas (a sender's gather list, the source
//! of a remote read). One place computes which pieces a packet covers, for the local copy
//! and the fabric's vectored send alike.

use hamlyn_core::{AreaId, RejectReason};
use hamlyn_wire::request::{GatherList, RequestView, MAX_GATHER};

use crate::areas::AreaTable;

/// A message's payload.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Source<'a> {
    /// Bytes in hand, indexed by message offset.
    Bytes(&'a [u8]),
    /// Area ranges in message order. `owner`: the client that must own them (a sender may
    /// only send from its own areas); `None` when the engine reads a slot it has checked.
    Areas {
        /// Who must own the areas.
        owner: Option<u32>,
        /// The ranges (read from the request's entry where it lies).
        list: GatherList<'a>,
    },
}

/// One contiguous piece of a packet's payload.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Piece<'a> {
    /// Bytes in hand.
    Bytes(&'a [u8]),
    /// A range of an area.
    Area {
        /// The area.
        area: AreaId,
        /// Offset in it.
        offset: u64,
        /// Bytes.
        len: usize,
    },
}

impl<'a> Source<'a> {
    /// The payload of a client's request: its inline bytes or its gather list, both
    /// borrowed from its entry.
    #[inline]
    pub(crate) fn of_request(owner: u32, req: RequestView<'a>) -> Source<'a> {
        if req.is_gather() {
            Source::Areas {
                owner: Some(owner),
                list: req.gathers(),
            }
        } else {
            Source::Bytes(req.inline_data())
        }
    }

    /// The pieces covering message bytes `start..start + len`, checked against the area
    /// table (ownership and bounds). Returns how many of `out` it filled.
    pub(crate) fn pieces(
        &self,
        areas: &AreaTable,
        start: u64,
        len: u64,
        out: &mut [Piece<'a>; MAX_GATHER],
    ) -> Result<usize, RejectReason> {
        let end = start.checked_add(len).ok_or(RejectReason::OutOfBounds)?;
        match *self {
            Source::Bytes(b) => {
                let s = usize::try_from(start).map_err(|_| RejectReason::Malformed)?;
                let e = usize::try_from(end).map_err(|_| RejectReason::Malformed)?;
                out[0] = Piece::Bytes(b.get(s..e).ok_or(RejectReason::Malformed)?);
                Ok(1)
            }
            Source::Areas { owner, list } => {
                let mut n = 0;
                let mut at = 0u64; // message offset where this range starts
                for g in list.iter() {
                    let (g_start, g_end) =
                        (at, at.checked_add(g.len).ok_or(RejectReason::OutOfBounds)?);
                    at = g_end;
                    let (from, to) = (start.max(g_start), end.min(g_end));
                    if from >= to {
                        continue;
                    }
                    let area = AreaId(g.area);
                    let entry = areas.get(area).ok_or(RejectReason::AreaGone)?;
                    if owner.is_some_and(|o| o != entry.owner) {
                        return Err(RejectReason::NotPermitted);
                    }
                    let offset = g
                        .offset
                        .checked_add(from - g_start)
                        .ok_or(RejectReason::OutOfBounds)?;
                    if offset
                        .checked_add(to - from)
                        .is_none_or(|e| e > entry.mem.0.len() as u64)
                    {
                        return Err(RejectReason::OutOfBounds);
                    }
                    let slot = out.get_mut(n).ok_or(RejectReason::Malformed)?;
                    *slot = Piece::Area {
                        area,
                        offset,
                        len: (to - from) as usize,
                    };
                    n += 1;
                }
                Ok(n)
            }
        }
    }
}
