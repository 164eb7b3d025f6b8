//! One-sided operations executed by the target engine (seed 004 §2): remote read,
//! compare-and-swap and fetch-add. The request is checked by the core
//! (`Interface::check_access`), executed here, and answered with READ_RESP / ATOMIC_RESP
//! packets to the requester's reply ticket. Answers are *reply jobs* ([`Replies`]), served
//! one packet per turn alongside the termini (`EngineState::serve_replies`), so a large
//! read cannot monopolise the engine.

use std::collections::VecDeque;

use hamlyn_core::{Access, AreaId, Areas, Memory, RejectReason, Segment, Segmenter, SendSpec};
use hamlyn_wire::request::{Gather, GatherList};
use hamlyn_wire::rma::{AtomicBody, AtomicOp, ReadBody};
use hamlyn_wire::{Header, NodeId, Op, RequestId, Ticket};

use crate::counters::EngineCounters;
use crate::deliver::Delivery;
use crate::source::Source;

/// Where an answer's bytes come from.
#[derive(Clone, Copy, Debug)]
enum Answer {
    /// A checked range of the target slot's area (a read).
    Area { area: AreaId, offset: u64, len: u64 },
    /// The old value of an atomic.
    Word([u8; 8]),
}

/// An answer being sent, one packet per turn.
#[derive(Debug)]
pub(crate) struct ReplyJob {
    seg: Segmenter,
    /// A packet the fabric could not take yet: sent before the next.
    pending: Option<Segment>,
    answer: Answer,
    /// Who asked, and which of its requests this answers.
    pub(crate) requester: NodeId,
    pub(crate) request: RequestId,
}

impl ReplyJob {
    /// The next packet to send and where its payload comes from; `None` when the answer
    /// is all sent.
    pub(crate) fn next_packet(&mut self) -> Option<Segment> {
        self.pending.take().or_else(|| self.seg.next())
    }

    /// The fabric was full: `seg` goes first next time.
    pub(crate) fn hold(&mut self, seg: Segment) {
        self.pending = Some(seg);
    }

    /// Where the answer's bytes come from (`list` is scratch for the area range).
    pub(crate) fn source<'a>(&'a self, list: &'a mut [Gather; 1]) -> Source<'a> {
        match &self.answer {
            Answer::Area { area, offset, len } => {
                list[0] = Gather {
                    area: area.0,
                    offset: *offset,
                    len: *len,
                };
                Source::Areas {
                    owner: None,
                    list: GatherList::Decoded(&list[..]),
                }
            }
            Answer::Word(w) => Source::Bytes(w),
        }
    }
}

/// Answers being sent at once, at most (each holds its request's reply ticket and
/// packets; requests past this wait where they are).
const MAX_REPLY_JOBS: usize = 1024;

/// Answers being sent, served round robin one packet per turn.
#[derive(Debug, Default)]
pub(crate) struct Replies {
    jobs: VecDeque<ReplyJob>,
}

impl Replies {
    /// Whether as many answers are being sent as the engine keeps: requests from other
    /// nodes are not taken (the fabric is not polled) and this node's wait in their
    /// termini until one is done.
    pub(crate) fn is_full(&self) -> bool {
        self.jobs.len() >= MAX_REPLY_JOBS
    }

    /// Whether no answer is being sent.
    pub(crate) fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// The oldest job, taken to send one packet of it.
    pub(crate) fn take(&mut self) -> Option<ReplyJob> {
        self.jobs.pop_front()
    }

    /// A job that sent a packet goes to the back: jobs share the engine fairly.
    pub(crate) fn requeue(&mut self, job: ReplyJob) {
        self.jobs.push_back(job);
    }

    /// A job that could not send goes first again.
    pub(crate) fn retry_first(&mut self, job: ReplyJob) {
        self.jobs.push_front(job);
    }

    /// Executes a READ_REQ or ATOMIC_REQ addressed to this node and queues its answer.
    pub(crate) fn execute(
        &mut self,
        h: &Header,
        body: &[u8],
        delivery: &mut Delivery,
        mtu: impl Fn(NodeId) -> u64,
        counters: &mut EngineCounters,
    ) -> Result<(), RejectReason> {
        let local = delivery.node();
        let job = match h.op {
            Op::ReadReq => {
                let b = ReadBody::decode(body).map_err(|_| RejectReason::Malformed)?;
                let p = delivery
                    .iface
                    .check_access(h, Access::Read { len: h.word }, &mut delivery.areas)
                    .map_err(|r| r.reason)?;
                let answer = Answer::Area {
                    area: p.area,
                    offset: p.offset,
                    len: h.word,
                };
                let reply = Reply {
                    ticket: &b.reply,
                    offset: b.reply_offset,
                    len: h.word,
                };
                reply.job(local, h, Op::ReadResp, h.request.to_u64(), answer, &mtu)?
            }
            Op::AtomicReq => {
                let b = AtomicBody::decode(body).map_err(|_| RejectReason::Malformed)?;
                let p = delivery
                    .iface
                    .check_access(h, Access::Atomic, &mut delivery.areas)
                    .map_err(|r| r.reason)?;
                let reply = Reply {
                    ticket: &b.reply,
                    offset: b.reply_offset,
                    len: 8,
                };
                // Check where the answer goes before touching the word: a request whose
                // answer cannot be delivered must not change anything.
                reply.fits()?;
                let mem = delivery.areas.area(p.area).ok_or(RejectReason::AreaGone)?;
                let old = match b.op {
                    AtomicOp::CompareSwap => mem.compare_swap_u64(p.offset, b.compare, b.operand),
                    AtomicOp::FetchAdd => mem.fetch_add_u64(p.offset, b.operand),
                    _ => return Err(RejectReason::Unsupported),
                }
                .map_err(|_| RejectReason::AreaGone)?;
                counters.atomics += 1;
                let answer = Answer::Word(old.to_le_bytes());
                reply.job(local, h, Op::AtomicResp, old, answer, &mtu)?
            }
            _ => return Err(RejectReason::Unsupported),
        };
        self.jobs.push_back(job);
        Ok(())
    }
}

/// Where an answer goes: a range of the requester's reply ticket.
struct Reply<'a> {
    ticket: &'a Ticket,
    offset: u64,
    len: u64,
}

impl Reply<'_> {
    fn fits(&self) -> Result<(), RejectReason> {
        match self.offset.checked_add(self.len) {
            Some(end) if end <= self.ticket.len => Ok(()),
            _ => Err(RejectReason::OutOfBounds),
        }
    }

    /// The answer's packets, to the requester only.
    fn job(
        &self,
        local: NodeId,
        h: &Header,
        op: Op,
        word: u64,
        answer: Answer,
        mtu: &impl Fn(NodeId) -> u64,
    ) -> Result<ReplyJob, RejectReason> {
        self.fits()?;
        let reply = self.ticket;
        if reply.node != h.src {
            // Answers go back to the requester only: a read cannot be aimed at a third node.
            return Err(RejectReason::NotPermitted);
        }
        let spec = SendSpec {
            src: local,
            dst: reply.node,
            slot: reply.slot,
            key: reply.key,
            meta_index: reply.meta_first,
            offset: reply.offset + self.offset,
            len: self.len,
            meta: &[],
            y: reply.y(),
            max_packets: None,
            notify: true,
            wake: true,
            word,
            request: h.request,
        };
        let seg = spec
            .segment(mtu(reply.node))
            .map_err(|_| RejectReason::Malformed)?
            .with_op(op);
        Ok(ReplyJob {
            seg,
            pending: None,
            answer,
            requester: h.src,
            request: h.request,
        })
    }
}

/// The answer a READ_REQ or ATOMIC_REQ with body `body` awaits from the node it goes to:
/// the operation, the reply slot, and the range of it the answer lands in.
pub(crate) fn awaited_answer(h: &Header, body: &[u8]) -> Result<hamlyn_core::Answer, RejectReason> {
    let (op, reply, reply_offset, len) = match h.op {
        Op::ReadReq => {
            let b = ReadBody::decode(body).map_err(|_| RejectReason::Malformed)?;
            (Op::ReadResp, b.reply, b.reply_offset, h.word)
        }
        Op::AtomicReq => {
            let b = AtomicBody::decode(body).map_err(|_| RejectReason::Malformed)?;
            (Op::AtomicResp, b.reply, b.reply_offset, 8)
        }
        _ => return Err(RejectReason::Unsupported),
    };
    let start = reply
        .offset
        .checked_add(reply_offset)
        .ok_or(RejectReason::OutOfBounds)?;
    Ok(hamlyn_core::Answer {
        op,
        slot: reply.slot,
        start,
        len,
    })
}
