//! One process's side of the benchmark: a node, an inbox slot others write to, an outbox
//! area to send from, a notification queue and a terminus.

use std::path::Path;
use std::time::{Duration, Instant};

use hamlyn::{
    Area, Data, MetaArea, Node, NodeOptions, Notification, NotificationKind, NotifyQueue,
    SendError, SendHandle, SendOptions, Slot, Terminus, Ticket, MAX_INLINE,
};

use super::error::BenchError;

/// Bytes of the inbox and the outbox: the largest message measured.
pub const AREA_LEN: u64 = 4 << 20;
/// Metadata entries of the inbox slot (streamed messages use them in turn).
pub const META_ENTRIES: u32 = 64;
/// Longest wait for one notification before the run is declared stuck.
pub const WAIT: Duration = Duration::from_secs(10);

/// One process's side of the benchmark.
#[derive(Debug)]
pub struct Endpoint {
    /// Where this side's messages arrive.
    pub queue: NotifyQueue,
    /// This side's send queue.
    terminus: Terminus,
    /// The slot peers write into (kept alive for as long as the endpoint).
    slot: Slot,
    /// Its metadata entries.
    _meta: MetaArea,
    /// Its memory.
    _inbox: Area,
    /// Where gather sends read from.
    outbox: Area,
    /// The connection (kept last: everything above holds it too).
    _node: Node,
}

impl Endpoint {
    /// Connects to the engine at `socket` and sets everything up. `spin` overrides how
    /// many polls a waiting receiver spins through before it sleeps.
    pub fn connect(socket: &Path, spin: Option<u32>) -> Result<Endpoint, BenchError> {
        let defaults = NodeOptions::default();
        let options = NodeOptions {
            termini: 1,
            queues: 1,
            // Large enough that a receiver descheduled for a while (two cores, three busy
            // threads) does not overflow it during a message-rate stream.
            queue_cap: 65536,
            spin: spin.unwrap_or(defaults.spin),
            ..defaults
        };
        let node = Node::connect_with(socket, options)?;
        let inbox = node.area(AREA_LEN)?;
        let meta = node.meta_area(META_ENTRIES)?;
        let slot = node.slot(&inbox).meta(&meta).queue(0).create()?;
        let outbox = node.area(AREA_LEN)?;
        // Touch every page of the outbox so that no send pays for a page fault.
        let pattern: Vec<u8> = (0..AREA_LEN).map(|i| (i % 251) as u8).collect();
        outbox.write(0, &pattern)?;
        let queue = node.queue(0)?;
        let terminus = node.terminus(0)?;
        Ok(Endpoint {
            queue,
            terminus,
            slot,
            _meta: meta,
            _inbox: inbox,
            outbox,
            _node: node,
        })
    }

    /// The seed text of a ticket for the whole inbox, for the peer.
    pub fn ticket_text(&self) -> Result<String, BenchError> {
        Ok(hamlyn::seed::ticket_to_text(&self.own_ticket()?)?)
    }

    /// A ticket for this side's own inbox (for loopback sends).
    pub fn own_ticket(&self) -> Result<Ticket, BenchError> {
        Ok(self.slot.ticket_all()?)
    }

    /// Sends a `size`-byte tagged message with notification to offset 0 of `to`, using
    /// metadata entry `entry`: inline up to [`MAX_INLINE`] bytes, else gathered from the
    /// outbox. A full terminus is retried ([`send_when_full`]).
    pub fn send(
        &mut self,
        to: &Ticket,
        size: usize,
        tag: u64,
        entry: u32,
    ) -> Result<SendHandle, BenchError> {
        let opts = SendOptions::new().tag(tag).entry(entry);
        let inline = [0x5Au8; MAX_INLINE];
        let spans;
        let data = if size <= MAX_INLINE {
            Data::Inline(&inline[..size])
        } else {
            spans = [self.outbox.span(0, size as u64)];
            Data::Gather(&spans)
        };
        match self.terminus.send(to, &opts, data) {
            Err(SendError::Full) => send_when_full(&mut self.terminus, to, &opts, data),
            r => Ok(r?),
        }
    }

    /// The next notification, waiting at most [`WAIT`].
    pub fn next(&mut self) -> Result<Notification, BenchError> {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Some(n) = self.queue.wait(Some(left))? {
                return Ok(n);
            }
            if left.is_zero() {
                return Err(BenchError::Timeout(WAIT, "a notification"));
            }
        }
    }

    /// The next notification, which must report a complete message.
    pub fn next_message(&mut self) -> Result<Notification, BenchError> {
        let n = self.next()?;
        match n.kind {
            NotificationKind::Message => Ok(n),
            _ => Err(BenchError::Unexpected(format!("{n:?}"))),
        }
    }
}

/// Retries a send refused for a full terminus: spins, and now and then yields the core (on a
/// small machine the engine may need it to drain the ring), for at most [`WAIT`].
#[cold]
fn send_when_full(
    terminus: &mut Terminus,
    to: &Ticket,
    opts: &SendOptions<'_>,
    data: Data<'_>,
) -> Result<SendHandle, BenchError> {
    let deadline = Instant::now() + WAIT;
    let mut tries: u32 = 0;
    loop {
        match terminus.send(to, opts, data) {
            Err(SendError::Full) => {}
            r => return Ok(r?),
        }
        tries = tries.wrapping_add(1);
        if tries % 16 == 0 {
            std::thread::yield_now();
            if Instant::now() > deadline {
                return Err(BenchError::Timeout(WAIT, "room in the terminus"));
            }
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Waits for `handle`'s request to be finished and checks that it was sent.
pub fn check_sent(handle: &SendHandle) -> Result<(), BenchError> {
    match handle.wait(Some(WAIT)) {
        hamlyn::Status::Sent => Ok(()),
        other => Err(BenchError::SendFailed(other)),
    }
}
