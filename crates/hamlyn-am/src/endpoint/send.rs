//! Sending: logical channels, short and bulk messages, calls and their outcomes.

use std::time::{Duration, Instant};

use hamlyn::{NodeId, SendHandle};
use hamlyn_rats::RatsError;

use super::{Addr, AmEndpoint, CallId, Failure, Outcome, Pending, Want, MAX_FAILURES, PROBE_EVERY};
use crate::header::{Header, Kind, Refusal, HEADER_LEN, WANT_ACK, WANT_REPLY};
use crate::link::Links;
use crate::table::HandlerId;
use crate::AmError;

impl AmEndpoint {
    /// Opens a logical channel (seed 003 §4.2): a terminus of this endpoint's own,
    /// served at `priority` (0 first; the engine schedules termini round robin within a
    /// priority), and returns its number, which travels with every message sent on it.
    /// Channel 0 is always open (priority 0). A port has as many termini as its
    /// `NodeOptions::termini` (4 by default, at most 256), one of them channel 0's.
    pub fn open_channel(&mut self, priority: u8) -> Result<u16, AmError> {
        let t = self.mgr.open_terminus(priority)?;
        let c = u16::try_from(t).map_err(|_| AmError::NoChannel(u16::MAX))?;
        self.channels = c + 1;
        Ok(c)
    }

    /// Sends through `channel`'s terminus.
    pub(super) fn on_channel<T>(
        &mut self,
        channel: u16,
        send: impl FnOnce(&mut Links) -> Result<T, AmError>,
    ) -> Result<T, AmError> {
        if channel >= self.channels {
            return Err(AmError::NoChannel(channel));
        }
        let before = self.mgr.select_terminus(usize::from(channel))?;
        let r = send(&mut self.links);
        self.mgr.select_terminus(before)?;
        r
    }

    /// Links with `peer` (done by the first send too), waiting up to `timeout`; this
    /// endpoint keeps serving its own arrivals meanwhile.
    pub fn connect(&mut self, peer: Addr, timeout: Duration) -> Result<(), AmError> {
        let deadline = Instant::now() + timeout;
        self.links
            .grant(peer, &mut self.short_rx, &mut self.bulk_rx)?;
        if self.links.try_link(peer)? {
            return Ok(());
        }
        self.links.hello(peer)?;
        loop {
            self.poll(Some(Duration::from_millis(2)))?;
            if self.links.try_link(peer)? {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(AmError::Timeout);
            }
        }
    }

    pub(super) fn header(
        &mut self,
        kind: Kind,
        h: HandlerId,
        channel: u16,
        args: [u64; 4],
        want: Want,
    ) -> Header {
        let mut hd = Header::new(kind);
        hd.handler = h.id;
        hd.epoch = h.epoch;
        hd.channel = channel;
        hd.args = args;
        hd.flags = match want {
            Want::Nothing => 0,
            Want::Ack => WANT_ACK,
            Want::Reply => WANT_REPLY,
        };
        hd.call = self.next_call;
        self.next_call += 1;
        hd
    }

    /// Sends a short message (handler, logical channel, four arguments; one packet) to
    /// `to`. [`AmError::Full`] when the link has no credit (nothing sent).
    pub fn send_short(
        &mut self,
        to: Addr,
        handler: HandlerId,
        channel: u16,
        args: [u64; 4],
        want: Want,
    ) -> Result<CallId, AmError> {
        if to.client == Addr::ENGINE {
            return self.engine_call(to.node, handler, channel, args, want);
        }
        if channel >= self.channels {
            return Err(AmError::NoChannel(channel));
        }
        self.ensure_link(to)?;
        let hd = self.header(Kind::Short, handler, channel, args, want);
        let sent = match self.on_channel(channel, |links| {
            let link = links.get(to).ok_or(AmError::Timeout)?;
            Ok(link.short.send(&hd.encode(), &[]))
        })? {
            Err(RatsError::Full) => {
                self.counters.full += 1;
                return Err(AmError::Full);
            }
            other => other?,
        };
        Ok(self.track(hd, to, sent, want))
    }

    /// Sends a bulk message: arguments and `payload` (up to [`AmOptions::bulk_max`] of
    /// the receiver) into a receive buffer the receiver granted. [`AmError::Full`] when
    /// the link has no bulk credit.
    pub fn send_bulk(
        &mut self,
        to: Addr,
        handler: HandlerId,
        channel: u16,
        args: [u64; 4],
        payload: &[u8],
        want: Want,
    ) -> Result<CallId, AmError> {
        if channel >= self.channels {
            return Err(AmError::NoChannel(channel));
        }
        self.ensure_link(to)?;
        let max = self.links.get(to).map_or(0, |l| l.bulk_max);
        let len = payload.len() as u64;
        if len + HEADER_LEN as u64 > max || len > u64::from(u32::MAX) {
            return Err(AmError::TooLong {
                len,
                max: max.saturating_sub(HEADER_LEN as u64),
            });
        }
        let mut hd = self.header(Kind::Bulk, handler, channel, args, want);
        hd.payload_len = len as u32;
        let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len());
        bytes.extend_from_slice(&hd.encode());
        bytes.extend_from_slice(payload);
        let sent = match self.on_channel(channel, |links| {
            let link = links.get(to).ok_or(AmError::Timeout)?;
            Ok(link.bulk.send(&bytes, &[]))
        })? {
            Err(RatsError::Full) => {
                self.counters.full += 1;
                return Err(AmError::Full);
            }
            other => other?,
        };
        Ok(self.track(hd, to, sent, want))
    }

    /// A short message to a node's engine: its engine-resident handler runs at once
    /// (through this endpoint's engine, forwarded over the fabric), and the outcome waits
    /// for [`AmEndpoint::wait`].
    pub(super) fn engine_call(
        &mut self,
        node: NodeId,
        handler: HandlerId,
        channel: u16,
        args: [u64; 4],
        want: Want,
    ) -> Result<CallId, AmError> {
        let hd = self.header(Kind::Short, handler, channel, args, want);
        let outcome = match self.node.am_engine_call(node, handler.id, args) {
            Ok(r) if want == Want::Reply => Ok(Outcome::Reply(r)),
            Ok(_) => Ok(Outcome::Done),
            Err(hamlyn::Error::Refused {
                code: Some(hamlyn::ControlErrorCode::NotFound),
                ..
            }) => Err(AmError::Refused {
                handler: self.handlers.name_of(handler.id),
                id: handler.id,
                why: Refusal::NoHandler,
            }),
            Err(e) => Err(e.into()),
        };
        match (want, outcome) {
            (Want::Nothing, Ok(_)) => {}
            (Want::Nothing, Err(error)) => {
                if self.failures.len() >= MAX_FAILURES {
                    self.counters.failures_dropped += 1;
                } else {
                    self.failures.push_back(Failure {
                        call: CallId(hd.call),
                        error,
                    });
                }
            }
            (_, outcome) => {
                self.engine_done.insert(hd.call, outcome);
            }
        }
        Ok(CallId(hd.call))
    }

    pub(super) fn ensure_link(&mut self, to: Addr) -> Result<(), AmError> {
        if self.links.get(to).is_some() {
            return Ok(());
        }
        self.connect(to, Duration::from_secs(30))
    }

    pub(super) fn track(&mut self, hd: Header, to: Addr, sent: SendHandle, want: Want) -> CallId {
        if want != Want::Nothing {
            self.pending.insert(
                hd.call,
                Pending {
                    to,
                    handler: hd.handler,
                    sent,
                    outcome: None,
                },
            );
        }
        CallId(hd.call)
    }

    /// Waits up to `timeout` for a call sent with [`Want::Ack`] or [`Want::Reply`],
    /// running arriving handlers meanwhile.
    pub fn wait(&mut self, call: CallId, timeout: Duration) -> Result<Outcome, AmError> {
        let deadline = Instant::now() + timeout;
        if let Some(out) = self.engine_done.remove(&call.0) {
            return out;
        }
        let mut probed = Instant::now();
        loop {
            let p = self
                .pending
                .get_mut(&call.0)
                .ok_or(AmError::NoCall(call.0))?;
            if let Some(out) = p.outcome.take() {
                self.pending.remove(&call.0);
                return out;
            }
            let s = p.sent.status();
            if s.is_failed() {
                self.pending.remove(&call.0);
                return Err(AmError::SendFailed(s));
            }
            let to = p.to;
            let now = Instant::now();
            if now >= deadline {
                return Err(AmError::Timeout);
            }
            if now.duration_since(probed) >= PROBE_EVERY {
                probed = now;
                if self.links.is_gone(to) {
                    self.pending.remove(&call.0);
                    return Err(AmError::PeerGone(to));
                }
            }
            self.poll(Some((deadline - now).min(Duration::from_millis(20))))?;
        }
    }

    /// The state of an outstanding call's send (`None`: not outstanding): `Sent` to a
    /// peer on this node means it landed in the peer's receive buffer.
    pub fn send_status(&self, call: CallId) -> Option<hamlyn::Status> {
        self.pending.get(&call.0).map(|p| p.sent.status())
    }

    /// A short message with [`Want::Reply`], waited for (up to `timeout`); sends again
    /// while the link is full.
    pub fn call(
        &mut self,
        to: Addr,
        handler: HandlerId,
        channel: u16,
        args: [u64; 4],
        timeout: Duration,
    ) -> Result<[u64; 4], AmError> {
        let deadline = Instant::now() + timeout;
        let c = loop {
            match self.send_short(to, handler, channel, args, Want::Reply) {
                Err(AmError::Full) if Instant::now() < deadline => {
                    self.poll(Some(Duration::from_millis(1)))?;
                }
                other => break other?,
            }
        };
        match self.wait(c, deadline.saturating_duration_since(Instant::now()))? {
            Outcome::Reply(a) => Ok(a),
            Outcome::Done => Ok([0; 4]),
        }
    }

    /// Sends `bytes` as they are on the link to `to` (short channel, or bulk): a test
    /// of what a receiver refuses (forged headers, lying lengths); a sender never needs
    /// it.
    pub fn send_raw(&mut self, to: Addr, bytes: &[u8], bulk: bool) -> Result<(), AmError> {
        self.ensure_link(to)?;
        let link = self.links.get(to).ok_or(AmError::Timeout)?;
        let tx = if bulk {
            &mut link.bulk
        } else {
            &mut link.short
        };
        tx.send(bytes, &[])?;
        Ok(())
    }

    /// Failures of messages nobody waits for, oldest first (taken).
    pub fn failures(&mut self) -> Vec<Failure> {
        self.failures.drain(..).collect()
    }
}
