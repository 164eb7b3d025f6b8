//! Remote write (seed 001 §3.2): the client writes bytes at offsets of the server's slot,
//! scatter-gather; the server is told nothing (no notification) and reads its memory
//! when it likes. In-order delivery is not promised.

use hamlyn::{Data, Seed, SendHandle, SendOptions, Ticket, MAX_GATHER};

use crate::error::RatsError;
use crate::manager::{Buffer, Endpoint, EndpointSpec, InstanceId, Manager};
use crate::protocol::{check_seed, make_seed, ProtocolId};

/// The receiving side: a slot others write without notifying it.
#[derive(Debug)]
pub struct RemoteWriteServer {
    mgr: Manager,
    id: InstanceId,
    ep: Endpoint,
}

impl RemoteWriteServer {
    /// A server over `len` bytes of message space.
    pub fn new(mgr: &Manager, len: u64) -> Result<RemoteWriteServer, RatsError> {
        let id = mgr.register_quiet();
        let spec = EndpointSpec {
            notify: false,
            ..EndpointSpec::default()
        };
        match mgr.endpoint(id, len, 1, spec) {
            Ok(ep) => Ok(RemoteWriteServer {
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

    /// A seed for clients: a ticket for the whole slot.
    pub fn make_seed(&self) -> Result<Seed, RatsError> {
        let t = self.ep.ticket(0..self.ep.len(), 0..1)?;
        Ok(make_seed(ProtocolId::RemoteWrite, vec![t], &[]))
    }

    /// Copies bytes of the slot out.
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), RatsError> {
        self.ep.read(off, buf)
    }

    /// Bytes of the slot.
    pub fn len(&self) -> u64 {
        self.ep.len()
    }

    /// Whether the slot has no bytes.
    pub fn is_empty(&self) -> bool {
        self.ep.is_empty()
    }
}

impl Drop for RemoteWriteServer {
    fn drop(&mut self) {
        self.mgr.unregister(self.id);
    }
}

/// The writing side.
#[derive(Debug, Clone)]
pub struct RemoteWriteClient {
    mgr: Manager,
    ticket: Ticket,
}

impl RemoteWriteClient {
    /// A client of the slot `seed` names.
    pub fn from_seed(mgr: &Manager, seed: &Seed) -> Result<RemoteWriteClient, RatsError> {
        check_seed(seed, ProtocolId::RemoteWrite, 1)?;
        Ok(RemoteWriteClient {
            mgr: mgr.clone(),
            ticket: seed.tickets[0],
        })
    }

    /// Bytes the client may write (its ticket's range).
    pub fn len(&self) -> u64 {
        self.ticket.len
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.ticket.len == 0
    }

    fn opts(offset: u64) -> SendOptions<'static> {
        SendOptions::new().offset(offset).notify(false).entry(0)
    }

    /// Writes `bytes` at `offset` (copied into message space if longer than a terminus
    /// entry holds).
    pub fn write(&self, offset: u64, bytes: &[u8]) -> Result<SendHandle, RatsError> {
        self.mgr
            .send_bytes(&self.ticket, &Self::opts(offset), bytes)
    }

    /// Gather: the pieces `(buffer, from, len)`, in order, land contiguously at `offset`,
    /// without a copy (at most [`MAX_GATHER`] pieces).
    pub fn write_gather(
        &self,
        offset: u64,
        pieces: &[(&Buffer, u64, u64)],
    ) -> Result<SendHandle, RatsError> {
        if pieces.len() > MAX_GATHER {
            return Err(RatsError::InvalidArgument("too many gather pieces"));
        }
        let mut spans = Vec::with_capacity(pieces.len());
        for &(b, from, len) in pieces {
            spans.push(b.span(from, len)?);
        }
        self.mgr
            .send(&self.ticket, &Self::opts(offset), Data::Gather(&spans))
    }

    /// Scatter: each `(offset, bytes)` lands at its own offset; one handle per piece.
    pub fn write_scatter(&self, pieces: &[(u64, &[u8])]) -> Result<Vec<SendHandle>, RatsError> {
        pieces
            .iter()
            .map(|&(offset, bytes)| self.write(offset, bytes))
            .collect()
    }
}
