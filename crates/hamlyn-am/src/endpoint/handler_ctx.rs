//! What a handler sees ([`Ctx`]: the message, its payload view and its reply token),
//! and the two ends of memory messages ([`MemoryRegion`], [`MemoryTarget`]).

use hamlyn::SendHandle;
use hamlyn_rats::datagram::{Datagram, DatagramReceiver};
use hamlyn_rats::remote_write::{RemoteWriteClient, RemoteWriteServer};

use super::{Addr, AmEndpoint};
use crate::header::{Header, HEADER_LEN};
use crate::AmError;

/// The context a handler runs with: the message and its reply token.
pub struct Ctx<'a> {
    pub(super) header: &'a Header,
    pub(super) src: Addr,
    /// The bulk payload (a view of the receive buffer), if any.
    pub(super) payload: Option<(&'a DatagramReceiver, &'a Datagram)>,
    pub(super) reply: Option<[u64; 4]>,
    pub(super) replied_twice: bool,
}

impl std::fmt::Debug for Ctx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("header", self.header)
            .field("src", &self.src)
            .finish_non_exhaustive()
    }
}

impl Ctx<'_> {
    /// The four arguments.
    pub fn args(&self) -> [u64; 4] {
        self.header.args
    }

    /// The sender's logical channel.
    pub fn channel(&self) -> u16 {
        self.header.channel
    }

    /// The sending endpoint.
    pub fn src(&self) -> Addr {
        self.src
    }

    /// Bytes of the bulk payload (0 for a short message).
    pub fn payload_len(&self) -> u64 {
        u64::from(self.header.payload_len)
    }

    /// Copies payload bytes from `off` into `buf` (the payload stays in the receive
    /// buffer it landed in; nothing is copied until asked).
    pub fn read_payload(&self, off: u64, buf: &mut [u8]) -> Result<(), AmError> {
        let end = off.checked_add(buf.len() as u64);
        let fits = matches!(end, Some(e) if e <= self.payload_len());
        let Some((rx, d)) = self.payload.filter(|_| fits) else {
            return Err(AmError::TooLong {
                len: end.unwrap_or(u64::MAX),
                max: self.payload_len(),
            });
        };
        // A view of the part wanted: the same receive buffer, further in.
        let mut part = *d;
        part.offset += HEADER_LEN as u64 + off;
        part.len = buf.len() as u64;
        rx.read(&part, buf)?;
        Ok(())
    }

    /// The address of the bulk payload's first byte in the receive buffer it landed in
    /// ([`Ctx::payload_len`] bytes; `None` for a short message): the zero-copy view a
    /// foreign-language handler reads (the C API's `hamlyn_am_ctx_payload`). Valid only
    /// while the handler runs: the buffer goes back to its sender after. Other processes
    /// may write that memory, so never form a Rust reference to it
    /// ([`Ctx::read_payload`] is the safe accessor).
    pub fn payload_ptr(&self) -> Result<Option<*const u8>, AmError> {
        let Some((rx, d)) = self.payload else {
            return Ok(None);
        };
        let mut part = *d;
        part.offset += HEADER_LEN as u64;
        part.len = self.payload_len();
        Ok(Some(rx.view(&part)?))
    }

    /// The whole payload, copied out.
    pub fn payload(&self) -> Result<Vec<u8>, AmError> {
        let mut v = vec![0u8; self.payload_len() as usize];
        self.read_payload(0, &mut v)?;
        Ok(v)
    }

    /// Replies once (the token): a second reply is [`AmError::ReplyTwice`] and is not
    /// sent.
    pub fn reply(&mut self, args: [u64; 4]) -> Result<(), AmError> {
        if self.reply.is_some() {
            self.replied_twice = true;
            return Err(AmError::ReplyTwice);
        }
        self.reply = Some(args);
        Ok(())
    }
}

/// A region of this endpoint's memory that memory messages copy into (seed 003 §5.1:
/// a block copy, no handler): [`MemoryRegion::seed`] gives the capability to write it.
#[derive(Debug)]
pub struct MemoryRegion {
    pub(super) server: RemoteWriteServer,
}

impl MemoryRegion {
    /// The seed a sender writes it through ([`AmEndpoint::memory_target`]).
    pub fn seed(&self) -> Result<hamlyn::Seed, AmError> {
        Ok(self.server.make_seed()?)
    }

    /// Copies bytes out.
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), AmError> {
        Ok(self.server.read(off, buf)?)
    }
}

/// The sending side of memory messages to one region.
#[derive(Debug)]
pub struct MemoryTarget {
    pub(super) client: RemoteWriteClient,
}

impl MemoryTarget {
    /// Copies `bytes` to `offset` of the region; the handle turns `Sent` when they left
    /// this engine, or failed (out of the ticket's range, peer gone...).
    pub fn write(&self, offset: u64, bytes: &[u8]) -> Result<SendHandle, AmError> {
        Ok(self.client.write(offset, bytes)?)
    }
}

impl AmEndpoint {
    /// A region of this endpoint's memory for memory messages.
    pub fn memory_region(&self, len: u64) -> Result<MemoryRegion, AmError> {
        Ok(MemoryRegion {
            server: RemoteWriteServer::new(&self.mgr, len)?,
        })
    }

    /// The sending side of memory messages to the region `seed` names.
    pub fn memory_target(&self, seed: &hamlyn::Seed) -> Result<MemoryTarget, AmError> {
        Ok(MemoryTarget {
            client: RemoteWriteClient::from_seed(&self.mgr, seed)?,
        })
    }
}
