//! One-sided operations executed by the target engine (seed 004 §2): remote read,
//! compare-and-swap and fetch-add. The request is checked by the core
//! (`Interface::check_access`), executed here, and answered with READ_RESP / ATOMIC_RESP
//! packets to the requester's reply ticket. Answers are *reply jobs*, served one packet
//! per turn alongside the termini, so a large read cannot monopolise the engine.

use hamlyn_core::{Access, AreaId, Areas, Memory, RejectReason, Segment, Segmenter, SendSpec};
use hamlyn_wire::request::{Completion, Gather};
use hamlyn_wire::rma::{AtomicBody, AtomicOp, ReadBody};
use hamlyn_wire::{Header, NodeId, Op, RequestId, Ticket};

use crate::engine::{port_mut, EngineState};
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
pub struct ReplyJob {
    seg: Segmenter,
    pending: Option<Segment>,
    answer: Answer,
    requester: NodeId,
    request: RequestId,
}

impl EngineState {
    /// Executes a READ_REQ or ATOMIC_REQ addressed to this node; the answer is queued.
    pub(crate) fn serve_rma(&mut self, h: &Header, body: &[u8]) -> Result<(), RejectReason> {
        let job = match h.op {
            Op::ReadReq => {
                let b = ReadBody::decode(body).map_err(|_| RejectReason::Malformed)?;
                let p = self
                    .iface
                    .check_access(h, Access::Read { len: h.word }, &mut self.areas)
                    .map_err(|r| r.reason)?;
                let answer = Answer::Area {
                    area: p.area,
                    offset: p.offset,
                    len: h.word,
                };
                self.reply_job(
                    h,
                    &b.reply,
                    b.reply_offset,
                    h.word,
                    Op::ReadResp,
                    h.request.to_u64(),
                    answer,
                )?
            }
            Op::AtomicReq => {
                let b = AtomicBody::decode(body).map_err(|_| RejectReason::Malformed)?;
                let p = self
                    .iface
                    .check_access(h, Access::Atomic, &mut self.areas)
                    .map_err(|r| r.reason)?;
                // Check where the answer goes before touching the word: a request whose
                // answer cannot be delivered must not change anything.
                self.reply_fits(&b.reply, b.reply_offset, 8)?;
                let mem = self.areas.area(p.area).ok_or(RejectReason::AreaGone)?;
                let old = match b.op {
                    AtomicOp::CompareSwap => mem.compare_swap_u64(p.offset, b.compare, b.operand),
                    AtomicOp::FetchAdd => mem.fetch_add_u64(p.offset, b.operand),
                    _ => return Err(RejectReason::Unsupported),
                }
                .map_err(|_| RejectReason::AreaGone)?;
                self.counters.atomics += 1;
                let answer = Answer::Word(old.to_le_bytes());
                self.reply_job(h, &b.reply, b.reply_offset, 8, Op::AtomicResp, old, answer)?
            }
            _ => return Err(RejectReason::Unsupported),
        };
        self.replies.push_back(job);
        Ok(())
    }

    fn reply_fits(&self, reply: &Ticket, reply_offset: u64, len: u64) -> Result<(), RejectReason> {
        match reply_offset.checked_add(len) {
            Some(end) if end <= reply.len => Ok(()),
            _ => Err(RejectReason::OutOfBounds),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn reply_job(
        &self,
        h: &Header,
        reply: &Ticket,
        reply_offset: u64,
        len: u64,
        op: Op,
        word: u64,
        answer: Answer,
    ) -> Result<ReplyJob, RejectReason> {
        self.reply_fits(reply, reply_offset, len)?;
        if reply.node != h.src {
            // Answers go back to the requester only: a read cannot be aimed at a third node.
            return Err(RejectReason::NotPermitted);
        }
        let local = self.iface.node();
        let spec = SendSpec {
            src: local,
            dst: reply.node,
            slot: reply.slot,
            key: reply.key,
            meta_index: reply.meta_first,
            offset: reply.offset + reply_offset,
            len,
            meta: &[],
            y: reply.y(),
            max_packets: None,
            notify: true,
            wake: true,
            word,
            request: h.request,
        };
        let mtu = if reply.node == local {
            self.cfg.intra_mtu
        } else {
            self.cfg.remote_mtu
        };
        let seg = spec
            .segment(mtu)
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

    /// Sends one packet of the oldest reply job (then it goes to the back: jobs share the
    /// engine fairly). Whether there was progress.
    pub(crate) fn serve_replies(&mut self) -> bool {
        let Some(mut job) = self.replies.pop_front() else {
            return false;
        };
        let Some(seg) = job.pending.take().or_else(|| job.seg.next()) else {
            return true;
        };
        let list;
        let source = match &job.answer {
            Answer::Area { area, offset, len } => {
                list = [Gather {
                    area: area.0,
                    offset: *offset,
                    len: *len,
                }];
                Source::Areas {
                    owner: None,
                    list: &list,
                }
            }
            Answer::Word(w) => Source::Bytes(w),
        };
        match self.deliver_packet(&seg, &[], source) {
            Ok(true) => {
                self.replies.push_back(job);
                true
            }
            Ok(false) => {
                job.pending = Some(seg);
                self.replies.push_front(job);
                false
            }
            Err(reason) => {
                self.fail_request(job.requester, job.request, reason, &seg.header);
                true
            }
        }
    }

    /// Tells a requester its request failed: an error completion on its terminus if it is
    /// local, a NACK if it is on another node.
    #[cold]
    pub(crate) fn fail_request(
        &mut self,
        requester: NodeId,
        request: RequestId,
        reason: RejectReason,
        about: &Header,
    ) {
        if requester == self.iface.node() {
            let cid = request.terminus >> 8;
            let c = Completion {
                seq: request.seq,
                status: u16::from(reason.code()),
                terminus: (request.terminus & 0xFF) as u16,
                value: 0,
            };
            self.complete_with_error(cid, c);
        } else if let Some(remote) = self.remote.as_mut() {
            let mut asked = *about;
            asked.src = requester;
            asked.request = request;
            if let Some(n) = hamlyn_core::nack::nack_for(self.iface.node(), &asked, reason) {
                remote.queue_nack(n);
            }
        }
    }

    /// Hands an error completion to client `cid` (kept for later if its error ring is full:
    /// never dropped).
    pub(crate) fn complete_with_error(&mut self, cid: u32, c: Completion) {
        let Some(port) = port_mut(&mut self.clients, cid) else {
            return;
        };
        if port.errors.try_push(&c.encode()).is_ok() {
            self.counters.error_completions += 1;
        } else {
            self.late_errors.push_back((cid, c));
        }
    }

    /// Retries error completions that found a full ring.
    pub(crate) fn flush_late_errors(&mut self) {
        for _ in 0..self.late_errors.len() {
            let Some((cid, c)) = self.late_errors.pop_front() else {
                break;
            };
            self.complete_with_error(cid, c);
        }
    }
}
