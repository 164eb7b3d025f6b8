//! NACKs: how a sender learns why its packet was refused.

use hamlyn_wire::{Header, NodeId, Op};

use crate::reject::RejectReason;

/// The NACK for a refused packet: sent from `node` back to the packet's source, with the
/// same slot, offset and request id, and the reason code in `word`.
///
/// NACKs, heartbeats and hellos are never answered (no NACK storms between engines), and
/// neither are answers to reads and atomics (`READ_RESP`, `ATOMIC_RESP`): the node that
/// sent one has nobody to tell, and the request id it carries is the *requester's*, which
/// means nothing there. The requester fails its own request instead.
pub fn nack_for(node: NodeId, h: &Header, reason: RejectReason) -> Option<Header> {
    if matches!(
        h.op,
        Op::Nack | Op::Hello | Op::Heartbeat | Op::ReadResp | Op::AtomicResp
    ) {
        return None;
    }
    let mut n = Header::new(Op::Nack);
    n.src = node;
    n.dst = h.src;
    n.slot = h.slot;
    n.offset = h.offset;
    n.word = u64::from(reason.code());
    n.request = h.request;
    Some(n)
}

/// The reason a received NACK carries, if its code is defined.
pub fn nack_reason(h: &Header) -> Option<RejectReason> {
    (h.op == Op::Nack)
        .then(|| RejectReason::from_code(h.word))
        .flatten()
}
