//! Remote read (seed 001 §3.2, seed 004): the client reads bytes of the server's slot;
//! the server's engine answers, the server's process is not involved. Blocking
//! ([`RemoteReadClient::remote_read`]) or asynchronous
//! ([`RemoteReadClient::async_remote_read`], then [`RemoteReadClient::ready`] and
//! [`RemoteReadClient::take`]); one read in flight per instance.

use std::time::{Duration, Instant};

use hamlyn::{NotificationKind, ReadArgs, Seed, SendHandle, SlotPerms, Ticket};

use crate::error::RatsError;
use crate::manager::{Endpoint, EndpointSpec, InstanceId, Manager};
use crate::protocol::{check_seed, make_seed, ProtocolId};

/// The side that is read: a slot others may read.
#[derive(Debug)]
pub struct RemoteReadServer {
    mgr: Manager,
    id: InstanceId,
    ep: Endpoint,
}

impl RemoteReadServer {
    /// `len` bytes of message space that clients may read.
    pub fn new(mgr: &Manager, len: u64) -> Result<RemoteReadServer, RatsError> {
        let id = mgr.register_quiet();
        let spec = EndpointSpec {
            perms: SlotPerms {
                write: false,
                read: true,
                atomic: false,
            },
            notify: false,
            ..EndpointSpec::default()
        };
        match mgr.endpoint(id, len, 1, spec) {
            Ok(ep) => Ok(RemoteReadServer {
                mgr: mgr.clone(),
                id,
                ep,
            }),
            Err(e) => {
                mgr.unregister(id);
                Err(e)
            }
        }
    }

    /// A seed for readers: a read ticket for the whole slot.
    pub fn make_seed(&self) -> Result<Seed, RatsError> {
        let t = self.ep.ticket(0..self.ep.len(), 0..1)?;
        Ok(make_seed(ProtocolId::RemoteRead, vec![t], &[]))
    }

    /// Writes the bytes readers will see.
    pub fn write(&self, off: u64, bytes: &[u8]) -> Result<(), RatsError> {
        self.ep.write(off, bytes)
    }
}

impl Drop for RemoteReadServer {
    fn drop(&mut self) {
        self.mgr.unregister(self.id);
    }
}

/// The reading side, with a reply buffer of its own.
#[derive(Debug)]
pub struct RemoteReadClient {
    mgr: Manager,
    id: InstanceId,
    source: Ticket,
    reply_ep: Endpoint,
    reply: Ticket,
    in_flight: Option<(SendHandle, u64)>,
    done: Option<u64>,
}

impl RemoteReadClient {
    /// A reader of the slot `seed` names, reading at most `max_len` bytes at a time.
    pub fn from_seed(
        mgr: &Manager,
        seed: &Seed,
        max_len: u64,
    ) -> Result<RemoteReadClient, RatsError> {
        check_seed(seed, ProtocolId::RemoteRead, 1)?;
        let id = mgr.register();
        let reply_ep = match mgr.endpoint(id, max_len.max(1), 1, EndpointSpec::default()) {
            Ok(ep) => ep,
            Err(e) => {
                mgr.unregister(id);
                return Err(e);
            }
        };
        let reply = reply_ep.ticket(0..max_len.max(1), 0..1)?;
        Ok(RemoteReadClient {
            mgr: mgr.clone(),
            id,
            source: seed.tickets[0],
            reply_ep,
            reply,
            in_flight: None,
            done: None,
        })
    }

    /// Starts reading `len` bytes at `offset` of the server's slot; one read at a time.
    pub fn async_remote_read(&mut self, offset: u64, len: u64) -> Result<(), RatsError> {
        if self.in_flight.is_some() || self.done.is_some() {
            return Err(RatsError::State("a read is already in flight or not taken"));
        }
        if len > self.reply.len {
            return Err(RatsError::TooLong {
                len,
                max: self.reply.len,
            });
        }
        let h = self.mgr.read(&ReadArgs {
            source: &self.source,
            offset,
            len,
            reply: &self.reply,
            reply_offset: 0,
        })?;
        self.in_flight = Some((h, len));
        Ok(())
    }

    /// Whether the read started by [`RemoteReadClient::async_remote_read`] has its answer
    /// (never blocks); a refused read is its error.
    pub fn ready(&mut self) -> Result<bool, RatsError> {
        self.poll_answer(Some(Instant::now()))
    }

    /// The answer of the read, once [`RemoteReadClient::ready`]; the read is over.
    pub fn take(&mut self) -> Result<Vec<u8>, RatsError> {
        let len = self.done.take().ok_or(RatsError::State("no answer yet"))?;
        let mut v = vec![0u8; len as usize];
        self.reply_ep.read(0, &mut v)?;
        Ok(v)
    }

    /// Reads `len` bytes at `offset`, waiting up to `timeout` for the answer.
    pub fn remote_read(
        &mut self,
        offset: u64,
        len: u64,
        timeout: Option<Duration>,
    ) -> Result<Vec<u8>, RatsError> {
        self.async_remote_read(offset, len)?;
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        if !self.poll_answer(deadline)? {
            return Err(RatsError::Timeout);
        }
        self.take()
    }

    /// Waits until `deadline` for the answer; whether it is there.
    fn poll_answer(&mut self, deadline: Option<Instant>) -> Result<bool, RatsError> {
        if self.done.is_some() {
            return Ok(true);
        }
        let Some((h, len)) = self.in_flight.clone() else {
            return Err(RatsError::State("no read in flight"));
        };
        let want = h.request();
        loop {
            let status = h.status();
            if status.is_failed() {
                self.in_flight = None;
                return Err(RatsError::SendFailed(status));
            }
            // Slices, so a refusal (a failed handle, no answer) is seen while waiting.
            let slice = Instant::now() + Duration::from_millis(20);
            let until = deadline.map_or(slice, |d| d.min(slice));
            let got = self.mgr.wait_where(self.id, Some(until), |n| {
                n.kind == NotificationKind::ReadDone && n.request == Some(want)
            })?;
            if got.is_some() {
                self.in_flight = None;
                self.done = Some(len);
                return Ok(true);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
        }
    }
}

impl Drop for RemoteReadClient {
    fn drop(&mut self) {
        self.mgr.unregister(self.id);
    }
}
