//! Receiving: `poll` runs the handlers of what arrived, answers (replies, acks,
//! refusals) go back, and completions of this endpoint's own calls are matched.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use hamlyn_rats::datagram::Datagram;
use hamlyn_rats::RatsError;

use super::{
    Addr, AmEndpoint, CallId, Ctx, Failure, Outcome, ANSWER_TRIES, MAX_FAILURES, MAX_OUTBOX,
    POLL_BUDGET, REPORT_EVERY,
};
use crate::header::{self, Header, Kind, Refusal, HEADER_LEN, WANT_ACK, WANT_REPLY};
use crate::AmError;

impl AmEndpoint {
    /// Runs the handlers of what arrived (GRIM's `grim_poll`), waiting up to `timeout`
    /// (`None`: until something arrives) when nothing has; the thread sleeps on the
    /// port's event descriptor meanwhile. Returns the messages handled (a bounded
    /// number: call it again while it returns work).
    pub fn poll(&mut self, timeout: Option<Duration>) -> Result<usize, AmError> {
        if self.unreported && self.reported.is_none_or(|t| t.elapsed() >= REPORT_EVERY) {
            // Counters are for people: a report that fails is tried again next time.
            let _ = self.report_counters();
            self.reported = Some(Instant::now());
        }
        self.flush_outbox();
        let mut handled = 0;
        let mut wait = timeout;
        // Bounded, so a caller waiting for something else (a reply, a deadline) gets
        // control back under a steady stream of arrivals.
        for _ in 0..POLL_BUDGET {
            let ready = self.mgr.poll(wait)?;
            wait = Some(Duration::ZERO);
            let Some(id) = ready else {
                return Ok(handled);
            };
            if id == self.short_rx.id() {
                while let Some(d) = self.short_rx.try_recv()? {
                    handled += self.arrived(d, false)?;
                }
            } else if id == self.bulk_rx.id() {
                while let Some(d) = self.bulk_rx.try_recv()? {
                    handled += self.arrived(d, true)?;
                }
            } else if id == self.links.door_id() {
                let (bad, failed) = self.links.hellos(&mut self.short_rx, &mut self.bulk_rx)?;
                self.counters.bad_hellos += bad;
                self.counters.link_failures += failed;
            }
            // Anything else is a credit for one of our senders: taken when it sends.
            self.flush_outbox();
        }
        Ok(handled)
    }

    pub(super) fn arrived(&mut self, d: Datagram, bulk: bool) -> Result<usize, AmError> {
        let rx = if bulk { &self.bulk_rx } else { &self.short_rx };
        let mut hb = [0u8; HEADER_LEN];
        let parsed = if d.len >= HEADER_LEN as u64 {
            rx.read(&d, &mut hb)
                .map_err(AmError::from)
                .and_then(|()| header::parse(&hb, d.len).map_err(AmError::from))
        } else {
            Err(AmError::Malformed(header::HeaderError::Short(
                d.len as usize,
            )))
        };
        let src = if bulk {
            self.links.bulk_peer(d.sender)
        } else {
            self.links.short_peer(d.sender)
        };
        let (hd, src) = match (parsed, src) {
            (Ok(hd), Some(src)) if src.node == d.src && (bulk == (hd.kind == Kind::Bulk)) => {
                (hd, src)
            }
            _ => {
                self.counters.malformed += 1;
                self.release(d, bulk)?;
                return Ok(0);
            }
        };
        match hd.kind {
            Kind::Short | Kind::Bulk => {
                let r = self.run(&hd, src, if bulk { Some(&d) } else { None });
                self.release(d, bulk)?;
                r?;
                Ok(1)
            }
            Kind::Reply | Kind::Ack | Kind::Error => {
                self.release(d, bulk)?;
                self.completion(&hd, src);
                Ok(0)
            }
        }
    }

    pub(super) fn release(&mut self, d: Datagram, bulk: bool) -> Result<(), AmError> {
        if bulk {
            self.bulk_rx.release(d)?;
        } else {
            self.short_rx.release(d)?;
        }
        Ok(())
    }

    /// Runs the handler a message names, and answers as its flags ask.
    pub(super) fn run(
        &mut self,
        hd: &Header,
        src: Addr,
        d: Option<&Datagram>,
    ) -> Result<(), AmError> {
        self.unreported = true;
        let mut answer = Header::new(Kind::Ack);
        answer.handler = hd.handler;
        answer.epoch = hd.epoch;
        answer.channel = hd.channel;
        answer.call = hd.call;
        match self.handlers.local_by_id(hd.handler) {
            None => {
                self.counters.unknown_handler += 1;
                self.handlers.refused(hd.handler);
                answer.kind = Kind::Error;
                answer.refusal = Some(Refusal::NoHandler);
            }
            Some((id, _, _)) if id.epoch != hd.epoch => {
                self.counters.stale_epoch += 1;
                self.handlers.refused(hd.handler);
                answer.kind = Kind::Error;
                answer.refusal = Some(Refusal::StaleEpoch);
            }
            Some((_, handler, counters)) => {
                let mut ctx = Ctx {
                    header: hd,
                    src,
                    payload: d.map(|d| (&self.bulk_rx, d)),
                    reply: None,
                    replied_twice: false,
                };
                counters.calls += 1;
                self.counters.handled += 1;
                let r = handler(&mut ctx);
                if r.is_err() || ctx.replied_twice {
                    counters.errors += 1;
                    answer.kind = Kind::Error;
                    answer.refusal = Some(Refusal::HandlerFailed);
                } else if let Some(args) = ctx.reply {
                    counters.replies += 1;
                    answer.kind = Kind::Reply;
                    answer.args = args;
                } else if hd.flags & WANT_REPLY != 0 {
                    counters.errors += 1;
                    answer.kind = Kind::Error;
                    answer.refusal = Some(Refusal::NoReply);
                } else if hd.flags & WANT_ACK == 0 {
                    return Ok(());
                }
            }
        }
        if self.outbox.len() >= MAX_OUTBOX {
            // Bounded: the peer sends faster than it takes our answers.
            self.counters.answers_dropped += 1;
            return Ok(());
        }
        self.outbox.push_back((src, answer.encode(), 0));
        Ok(())
    }

    /// Sends queued answers while their links have credit; an answer to a peer without
    /// credit waits (behind it, only that peer's); one to a peer that never links back
    /// is given up after [`ANSWER_TRIES`] polls (counted).
    pub(super) fn flush_outbox(&mut self) {
        let mut kept = VecDeque::new();
        let mut blocked: Vec<Addr> = Vec::new();
        while let Some((to, bytes, tries)) = self.outbox.pop_front() {
            if blocked.contains(&to) {
                kept.push_back((to, bytes, tries));
                continue;
            }
            let linked =
                self.links.get(to).is_some() || matches!(self.links.try_link(to), Ok(true));
            let sent = match self.links.get(to) {
                Some(link) if linked => link.short.send(&bytes, &[]),
                _ => Err(RatsError::Full),
            };
            match sent {
                Ok(_) => {}
                Err(RatsError::Full) if tries < ANSWER_TRIES => {
                    blocked.push(to);
                    kept.push_back((to, bytes, tries + 1));
                }
                Err(_) => self.counters.answers_dropped += 1,
            }
        }
        self.outbox = kept;
    }

    /// A reply, ack or error for one of our calls.
    pub(super) fn completion(&mut self, hd: &Header, src: Addr) {
        let outcome = match (hd.kind, hd.refusal) {
            (Kind::Reply, _) => Ok(Outcome::Reply(hd.args)),
            (Kind::Ack, _) => Ok(Outcome::Done),
            (_, Some(why)) => Err(AmError::Refused {
                handler: self.handlers.name_of(hd.handler),
                id: hd.handler,
                why,
            }),
            _ => return,
        };
        match self.pending.get_mut(&hd.call) {
            Some(p) if p.to == src && p.outcome.is_none() && p.handler == hd.handler => {
                p.outcome = Some(outcome);
            }
            None if hd.kind == Kind::Error && hd.call < self.next_call => {
                if self.failures.len() >= MAX_FAILURES {
                    self.counters.failures_dropped += 1;
                } else if let Err(error) = outcome {
                    self.failures.push_back(Failure {
                        call: CallId(hd.call),
                        error,
                    });
                }
            }
            _ => self.counters.reply_refused += 1,
        }
    }
}
