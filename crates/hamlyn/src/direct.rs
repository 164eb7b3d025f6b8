//! Direct slots, the sender's side (docs/ARCHITECTURE.md, "Direct slots"): a holder of a ticket to a
//! slot created with [`crate::SlotBuilder::danger_direct`], on the slot's own node, maps
//! the slot and its receiver's notification queue ([`crate::Node::open_direct`]) and then
//! does what the engine does for each packet, in its own process: deposit, count,
//! notify. One hop.
//!
//! Nothing here is a copy of the engine's logic: the checks a sender can make are the
//! library's usual ones (`request::plan`, as for [`crate::Terminus::send`]), segmentation
//! and packet-counting deltas are the core's (`SendSpec::segment`), and the metadata
//! deposit and accumulator update are the core's [`hamlyn_core::count_packet`], the very
//! function the engine's commit calls. So packet counting, metadata and fast mode behave
//! exactly as on mediated slots, and a group may mix direct and mediated members.

use hamlyn_core::SlotMode;
use hamlyn_core::{count_packet, endpoint, notification_entry, RejectReason};
use hamlyn_shm::area_mem::AreaMem;
use hamlyn_shm::entry_mem::EntryMem;
use hamlyn_shm::notifq::{self, NotifLayout};
use hamlyn_shm::region::ShmRegion;
use hamlyn_shm::wake::EventFd;
use hamlyn_wire::control::{mode, Reply};
use hamlyn_wire::endpoint::EndpointLayout;
use hamlyn_wire::{Flags, Header, NodeId, Ticket, FAST_META_INDEX, META_ENTRY_LEN};
use std::os::fd::OwnedFd;

use crate::error::{Error, SendError};
use crate::one_packet::OnePacket;
use crate::request::{check_span, plan, Data, SendOptions};

/// Payload bytes counted as one packet by a direct send: the engine's default intra-node
/// packet size, so that a direct message adds the same deltas to its accumulator as a
/// mediated one does through an engine with default settings. (Any size gives the same
/// sum; only the number of atomic adds differs.)
pub const DIRECT_PACKET_BYTES: u64 = 256 * 1024;

// A message `plan` passed in packets of `BUDGET_PACKET_BYTES` passes the same checks in
// packets of this size (fewer packets against the same budget): the one-packet path
// deposits before it builds its header on that ground.
const _: () = assert!(crate::request::BUDGET_PACKET_BYTES <= DIRECT_PACKET_BYTES);

/// A direct slot mapped for one ticket: send to it with [`DirectTarget::send`], which
/// deposits, counts and notifies in this process, without the engine.
///
/// What is mapped is the ticket's bytes of the slot, its metadata entries and the
/// receiver's notification queue (each rounded out to whole pages), and nothing else of
/// those files; what the engine handed over to map them opens the whole files, which is
/// why the receiver had to opt in ([`crate::SlotBuilder::danger_direct`]).
///
/// The mapping was granted after the engine checked the ticket's key, once. It keeps
/// working until this handle is dropped, whatever the receiver does later (revoke,
/// rekey, destroy the slot, exit): a direct slot gives up revocation of mappings already
/// given. It does not depend on the [`crate::Node`] it came from, which may be dropped.
///
/// `DirectTarget` is `Send` and `Sync`: [`DirectTarget::send`] takes `&self`, so threads
/// may share one; every shared word is updated atomically, and concurrent sends to
/// overlapping bytes are the senders' own business, as with any ticket.
#[must_use = "dropping a DirectTarget unmaps the slot: it is mapped again only if the \
              engine still grants it"]
pub struct DirectTarget {
    ticket: Ticket,
    /// The node the messages come from (this node: the ticket's).
    node: NodeId,
    /// The `Node` handle whose areas gather spans may name.
    instance: u64,
    /// The slot is a fast one (no metadata entries).
    fast: bool,
    /// The ticket's bytes of the slot: byte 0 is slot offset `ticket.offset`. None for an
    /// empty range.
    data: Option<ShmRegion>,
    /// The ticket's metadata entries: byte 0 is entry `ticket.meta_first`. None for fast
    /// slots and tickets without entries.
    entries: Option<ShmRegion>,
    /// The receiver's notification queue, if the slot has one.
    queue: Option<notifq::Producer<ShmRegion>>,
    /// A receive endpoint's layout: then `data` maps the whole endpoint (ring and
    /// buffers), and a send claims the next posted buffer as the engine would.
    endpoint: Option<EndpointLayout>,
    /// The small message's way (`one_packet`): what the ticket decides for every
    /// one-packet send, decided once. None for endpoints, and for tickets the general
    /// way must decide every send of.
    one_packet: Option<OnePacket>,
}

/// The descriptors of a `Direct` reply, in the order the engine sends them.
struct DirectFds {
    area: OwnedFd,
    meta: Option<OwnedFd>,
    queue: Option<(OwnedFd, OwnedFd)>,
}

impl DirectFds {
    /// Splits `fds` as a reply for a slot of `fast` mode with (`queue`) or without a queue
    /// says it must be; `None` if the count is wrong.
    fn split(fds: Vec<OwnedFd>, fast: bool, queue: bool) -> Option<DirectFds> {
        let want = 1 + usize::from(!fast) + 2 * usize::from(queue);
        if fds.len() != want {
            return None;
        }
        let mut it = fds.into_iter();
        let area = it.next()?;
        let meta = if fast { None } else { Some(it.next()?) };
        let queue = if queue {
            Some((it.next()?, it.next()?))
        } else {
            None
        };
        Some(DirectFds { area, meta, queue })
    }
}

impl std::fmt::Debug for DirectTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the ticket's key: debug output ends up in logs.
        f.debug_struct("DirectTarget")
            .field("node", &self.node)
            .field("slot", &self.ticket.slot)
            .field("offset", &self.ticket.offset)
            .field("len", &self.ticket.len)
            .field("fast", &self.fast)
            .field("queue", &self.queue.is_some())
            .finish_non_exhaustive()
    }
}

impl DirectTarget {
    /// Maps what a `Direct` reply describes for `ticket` (checked against the slot's
    /// geometry the engine sent: nothing from the engine is trusted without a check).
    pub(crate) fn new(
        ticket: &Ticket,
        instance: u64,
        reply: Reply,
        fds: Vec<OwnedFd>,
    ) -> Result<DirectTarget, Error> {
        let Reply::Direct {
            mode: mode_code,
            base,
            len,
            meta_base,
            meta_count,
            queue_offset,
            queue_cap,
        } = reply
        else {
            return Err(Error::Protocol("expected Direct"));
        };
        let (fast, endpoint) = match mode_code {
            mode::NORMAL => (false, None),
            mode::FAST => (true, None),
            mode::ENDPOINT => {
                // An endpoint's shape travels where a slot's entries would.
                let buf_size = u32::try_from(meta_base)
                    .map_err(|_| Error::Protocol("endpoint buffer size"))?;
                let layout = EndpointLayout::new(buf_size, meta_count)
                    .map_err(|_| Error::Protocol("endpoint layout"))?;
                if layout.len() != len {
                    return Err(Error::Protocol("endpoint length"));
                }
                (true, Some(layout))
            }
            _ => return Err(Error::Protocol("a direct slot of an unknown mode")),
        };
        let fds = DirectFds::split(fds, fast, queue_cap != 0).ok_or(Error::Protocol(
            "Direct carried the wrong number of descriptors",
        ))?;
        // The ticket's range must lie in the slot, as the engine's bounds check demands.
        let end = ticket.offset.checked_add(ticket.len);
        if end.is_none_or(|e| e > len) {
            return Err(Error::OutOfRange {
                what: "slot",
                start: ticket.offset,
                end: u128::from(ticket.offset) + u128::from(ticket.len),
                len,
            });
        }
        let data = if endpoint.is_some() {
            // The whole endpoint: a send picks the buffer.
            let n = usize::try_from(len).map_err(|_| Error::Protocol("endpoint length"))?;
            Some(ShmRegion::from_fd_range(fds.area, base, n)?)
        } else if ticket.len == 0 {
            None
        } else {
            let at = base
                .checked_add(ticket.offset)
                .ok_or(Error::Protocol("slot base"))?;
            let n = usize::try_from(ticket.len)
                .map_err(|_| Error::InvalidArgument("ticket range too large to map"))?;
            Some(ShmRegion::from_fd_range(fds.area, at, n)?)
        };
        // As `Ticket::from_bytes` refuses: entries that run past u32::MAX (a ticket the
        // holder built by hand) name none there.
        if ticket.meta_first.checked_add(ticket.meta_count).is_none() {
            return Err(Error::MetaOutOfRange {
                start: u64::from(ticket.meta_first),
                end: u64::from(ticket.meta_first) + u64::from(ticket.meta_count),
                count: meta_count,
            });
        }
        let entries = match fds.meta {
            Some(fd) if ticket.meta_count > 0 => {
                let end = u64::from(ticket.meta_first) + u64::from(ticket.meta_count);
                if end > u64::from(meta_count) {
                    return Err(Error::MetaOutOfRange {
                        start: u64::from(ticket.meta_first),
                        end,
                        count: meta_count,
                    });
                }
                let entry = META_ENTRY_LEN as u64;
                let at = meta_base
                    .checked_add(u64::from(ticket.meta_first) * entry)
                    .ok_or(Error::Protocol("metadata base"))?;
                let n = usize::try_from(u64::from(ticket.meta_count) * entry)
                    .map_err(|_| Error::InvalidArgument("too many entries to map"))?;
                let entries = ShmRegion::from_fd_range(fd, at, n)?;
                // Faulted in now, not on the way.
                entries.fault_in();
                Some(entries)
            }
            _ => None,
        };
        let queue = match fds.queue {
            Some((qfd, efd)) => {
                let layout = NotifLayout::new(0, queue_cap)?;
                let region = ShmRegion::from_fd_range(qfd, queue_offset, layout.bytes())?;
                // Each post reaches a new part of it: faulted in now, not one page per 128
                // posts.
                region.fault_in();
                Some(notifq::Producer::attach(region, layout)?.with_eventfd(EventFd::from_fd(efd)))
            }
            None => None,
        };
        let one_packet = match endpoint {
            Some(_) => None,
            None => OnePacket::for_ticket(ticket.node, ticket, fast),
        };
        Ok(DirectTarget {
            ticket: *ticket,
            node: ticket.node,
            instance,
            fast,
            data,
            entries,
            queue,
            endpoint,
            one_packet,
        })
    }

    /// The ticket this target was opened for.
    pub fn ticket(&self) -> &Ticket {
        &self.ticket
    }

    /// Whether the slot is a fast-mode one.
    pub fn is_fast(&self) -> bool {
        self.fast
    }

    /// Whether the slot reports arrivals to a notification queue.
    pub fn has_queue(&self) -> bool {
        self.queue.is_some()
    }

    /// Sends one message to the slot, in this process: copies `data` into the slot,
    /// writes the metadata into its entry, adds the packet-counting deltas to the entry's
    /// accumulator and, when the message (or its group) is complete, posts the
    /// notification to the receiver's queue, waking the receiver if it sleeps.
    ///
    /// Every check [`crate::Terminus::send`] makes comes first, with the same
    /// [`SendError`]s (range, entry, packet budget, metadata length, fast-mode shape),
    /// and a fast-mode message to a slot that is not fast is refused as the engine would
    /// ([`SendError::Rejected`] with `BadMode`); nothing is written then. `Data::Inline`
    /// may be of any length here (nothing goes through a terminus entry); gather spans
    /// must be areas of the node this target was opened through.
    ///
    /// When it returns `Ok`, the message is in place and counted: there is no handle to
    /// wait on. A full notification queue loses the notification exactly as with the
    /// engine: counted in the queue's overflow counter, which its owner sees
    /// ([`crate::NotifyQueue::overflows`]), and the send still succeeds.
    ///
    /// No allocation, lock or system call, except the wake-up of a sleeping receiver (a
    /// futex wake, or a write to its eventfd in event-loop mode).
    pub fn send(&self, opts: &SendOptions<'_>, data: Data<'_>) -> Result<(), SendError> {
        self.send_message(opts, data)
    }

    /// [`DirectTarget::send`], answered with a [`SendHandle`] that is already done
    /// ([`crate::Status::Sent`], on terminus [`SendHandle::DIRECT`]), for code written
    /// against [`crate::Terminus::send`] (the protocol level sends either way).
    pub fn send_for_handle(
        &self,
        opts: &SendOptions<'_>,
        data: Data<'_>,
    ) -> Result<crate::SendHandle, SendError> {
        self.send_message(opts, data)?;
        Ok(crate::SendHandle::delivered())
    }

    fn send_message(&self, opts: &SendOptions<'_>, data: Data<'_>) -> Result<(), SendError> {
        // The small message's way: one packet, decided from what was worked out when
        // the target was opened (`one_packet`); its bytes go in before the header's
        // count, as on the general way below.
        if let (Some(quick), Data::Inline(bytes)) = (&self.one_packet, data) {
            if let Some(h) = quick.header(opts, bytes.len() as u64) {
                self.deposit_inline(opts.offset, bytes)?;
                return self.count(opts, &h);
            }
        }
        let len = self.data_len(&data)?;
        let spec = plan(self.node, &self.ticket, opts, len)?;
        if (spec.meta_index == FAST_META_INDEX) != self.fast {
            return Err(rejected(RejectReason::BadMode));
        }
        if let Some(layout) = self.endpoint {
            return self.send_to_endpoint(&layout, &spec, &data);
        }
        if len <= DIRECT_PACKET_BYTES {
            // One packet (every small message): its bytes go in first, before its header
            // is built, so that a receiver polling the data sees them as soon as the
            // checks allow. `plan` checked the message in 4 KiB packets; in one larger
            // packet it passes the same checks, so `only_packet` cannot refuse it now.
            self.deposit(&data, 0, spec.offset, len)?;
            return match spec.only_packet(DIRECT_PACKET_BYTES)? {
                Some(seg) => self.count(opts, &seg.header),
                // Not reached: one packet of at most `DIRECT_PACKET_BYTES` by the test
                // above, and `plan`'s checks hold for it (the assertion by the constant).
                None => Err(rejected(RejectReason::TooLarge)),
            };
        }
        for seg in spec.segment(DIRECT_PACKET_BYTES)? {
            let h = &seg.header;
            self.deposit(&data, seg.start, h.offset, u64::from(seg.len))?;
            self.count(opts, h)?;
        }
        Ok(())
    }

    /// What the engine does with a packet of a message to this slot once its bytes are
    /// in, done here: the packet counted in the metadata entry, the notification posted
    /// when that completes the message. Always inlined: out of line, its first reads of
    /// the header its caller had just built on the stack waited for those stores to reach
    /// the cache (`path8`: a direct message 34.6 -> 28.4 ns inlined).
    #[inline(always)]
    fn count(&self, opts: &SendOptions<'_>, h: &Header) -> Result<(), SendError> {
        let meta = if h.flags.contains(Flags::FIRST) {
            opts.meta
        } else {
            &[]
        };
        let mode = if self.fast {
            SlotMode::Fast
        } else {
            SlotMode::Normal
        };
        let kind = match (&self.entries, self.fast) {
            (_, true) => count_packet::<EntryMem<'_>>(mode, None, h, meta),
            (Some(entries), false) => {
                // `plan` kept the index inside the ticket's entries, all mapped. The
                // entry is checked once here; the count's dozen accesses then only
                // against its constant length (`EntryMem`).
                let rel = h.meta_index.wrapping_sub(self.ticket.meta_first);
                let off = u64::from(rel) * META_ENTRY_LEN as u64;
                match EntryMem::new(entries, off) {
                    Ok(mut entry) => count_packet(mode, Some((&mut entry, 0)), h, meta),
                    Err(_) => Err(RejectReason::AreaGone),
                }
            }
            (None, false) => Err(RejectReason::BadMetaIndex),
        }
        .map_err(rejected)?;
        if let (Some(done), Some(q)) = (kind, &self.queue) {
            if h.flags.contains(Flags::NOTIFY) {
                // A full queue counted the loss itself (its overflow counter), as it does
                // for the engine; the message stands.
                let _ = q.post(&notification_entry(done, h));
            }
        }
        Ok(())
    }

    /// A send to a direct receive endpoint: what the engine does for an endpoint packet,
    /// with the core's own functions — claim the next posted buffer
    /// ([`hamlyn_core::endpoint::claim`]), copy the message into it, complete the ring
    /// entry, notify. A message that finds no buffer is counted in the endpoint's discard
    /// word and refused here as `NoBuffer` (a direct sender has no completion to defer
    /// that to; ignoring the error is FLIPC's optimistic style); an impossible ring is
    /// `RingCorrupt`, and nothing is written then.
    fn send_to_endpoint(
        &self,
        layout: &EndpointLayout,
        spec: &hamlyn_core::SendSpec<'_>,
        data: &Data<'_>,
    ) -> Result<(), SendError> {
        let region = self.data.as_ref().ok_or(rejected(RejectReason::AreaGone))?;
        let mut mem = AreaMem(region);
        let mut segs = spec.segment(DIRECT_PACKET_BYTES)?;
        let seg = segs.next().ok_or(rejected(RejectReason::BadMode))?;
        let h = &seg.header;
        if segs.next().is_some() {
            return Err(rejected(RejectReason::TooLarge));
        }
        let fits = h
            .offset
            .checked_add(u64::from(h.payload_len))
            .is_some_and(|end| end <= u64::from(layout.buf_size()));
        if !fits {
            return Err(rejected(RejectReason::TooLarge));
        }
        let claim = match endpoint::claim(&mut mem, 0, layout) {
            Ok(c) => c,
            Err(e) => {
                if e == endpoint::ClaimError::NoBuffer {
                    let _ = endpoint::count_discard(&mut mem, 0);
                }
                return Err(rejected(e.into()));
            }
        };
        let at = claim.offset + h.offset;
        if let Err(e) = self.deposit_at(data, at, u64::from(h.payload_len)) {
            let _ = endpoint::abort(&mut mem, 0, layout, &claim);
            return Err(e);
        }
        let arrival = endpoint::Arrival {
            len: h.payload_len,
            src_node: h.src.0,
            word: h.word,
            aborted: false,
        };
        endpoint::complete(&mut mem, 0, layout, &claim, &arrival)
            .map_err(|e| rejected(e.into()))?;
        if let Some(q) = &self.queue {
            if h.flags.contains(Flags::NOTIFY) {
                // A full queue counted the loss itself; the message stands in its buffer.
                let _ = q.post(&endpoint::notification(h, claim.buf));
            }
        }
        Ok(())
    }

    /// Copies the whole message to byte `at` of the mapped data.
    fn deposit_at(&self, data: &Data<'_>, at: u64, len: u64) -> Result<(), SendError> {
        // `deposit` counts from the ticket's offset; an endpoint's ticket starts at 0 and
        // its mapping at the endpoint's base.
        self.deposit(data, 0, at + self.ticket.offset, len)
    }

    /// The message length, after checking gather spans name this node's areas and lie
    /// inside them.
    fn data_len(&self, data: &Data<'_>) -> Result<u64, SendError> {
        match *data {
            Data::Inline(bytes) => Ok(bytes.len() as u64),
            Data::Gather(spans) => {
                let mut total: u64 = 0;
                for s in spans {
                    check_span(self.instance, s)?;
                    total = total.checked_add(s.len).ok_or(SendError::Ticket(
                        hamlyn_core::SegmentError::OutsideTicket {
                            offset: 0,
                            end: u128::MAX,
                        },
                    ))?;
                }
                Ok(total)
            }
        }
    }

    /// Copies `bytes` to byte `rel` of the ticket's range (which the caller checked they
    /// fit in): [`DirectTarget::deposit`] for a whole inline message.
    #[inline]
    fn deposit_inline(&self, rel: u64, bytes: &[u8]) -> Result<(), SendError> {
        if bytes.is_empty() {
            return Ok(());
        }
        let gone = || rejected(RejectReason::AreaGone);
        let dst = self.data.as_ref().ok_or_else(gone)?;
        let at = usize::try_from(rel).map_err(|_| gone())?;
        dst.write(at, bytes).map_err(|_| gone())
    }

    /// Copies bytes `start..start + len` of the message to slot offset `slot_off` (which
    /// `plan` kept inside the ticket's range).
    fn deposit(
        &self,
        data: &Data<'_>,
        start: u64,
        slot_off: u64,
        len: u64,
    ) -> Result<(), SendError> {
        if len == 0 {
            return Ok(());
        }
        let gone = || rejected(RejectReason::AreaGone);
        let rel = slot_off - self.ticket.offset;
        match *data {
            Data::Inline(bytes) => {
                let from = usize::try_from(start).map_err(|_| gone())?;
                let to = usize::try_from(start + len).map_err(|_| gone())?;
                let src = bytes.get(from..to).ok_or_else(gone)?;
                self.deposit_inline(rel, src)
            }
            Data::Gather(spans) => {
                let dst = self.data.as_ref().ok_or_else(gone)?;
                let mut at = usize::try_from(rel).map_err(|_| gone())?;
                // Walk the spans to the piece holding byte `start`, then copy on.
                let (mut skip, mut left) = (start, len);
                for s in spans {
                    if left == 0 {
                        break;
                    }
                    if skip >= s.len {
                        skip -= s.len;
                        continue;
                    }
                    let n = (s.len - skip).min(left);
                    let src_off = usize::try_from(s.offset + skip).map_err(|_| gone())?;
                    let n_usize = usize::try_from(n).map_err(|_| gone())?;
                    s.area
                        .inner
                        .region
                        .copy_to(src_off, dst, at, n_usize)
                        .map_err(|_| gone())?;
                    at += n_usize;
                    left -= n;
                    skip = 0;
                }
                if left == 0 {
                    Ok(())
                } else {
                    Err(gone())
                }
            }
        }
    }
}

#[cold]
fn rejected(reason: RejectReason) -> SendError {
    SendError::Rejected(reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::MetaIndex;
    use hamlyn_shm::notifq::Consumer;
    use hamlyn_wire::{NotifKind, SlotId, TicketFlags, FULL_SHARE};
    use proptest::prelude::*;

    const SLOT_BASE: u64 = 4096 + 100;
    const SLOT_LEN: u64 = 8192;

    struct Receiver {
        area: ShmRegion,
        meta: ShmRegion,
        queues: ShmRegion,
    }

    fn receiver() -> Receiver {
        Receiver {
            area: ShmRegion::create("test-direct-area", 4 * 4096).unwrap(),
            meta: ShmRegion::create("test-direct-meta", 8 * META_ENTRY_LEN).unwrap(),
            queues: ShmRegion::create("test-direct-queues", 3 * 4096).unwrap(),
        }
    }

    fn dup(r: &ShmRegion) -> OwnedFd {
        r.fd().try_clone_to_owned().unwrap()
    }

    fn reply(mode: u8, queue_cap: u32) -> Reply {
        Reply::Direct {
            mode,
            base: SLOT_BASE,
            len: SLOT_LEN,
            meta_base: 2 * META_ENTRY_LEN as u64,
            meta_count: 4,
            queue_offset: 4096,
            queue_cap,
        }
    }

    fn fds(r: &Receiver) -> Vec<OwnedFd> {
        let (efd, _waiter) = EventFd::pair().unwrap();
        vec![
            dup(&r.area),
            dup(&r.meta),
            dup(&r.queues),
            efd.as_fd().try_clone_to_owned().unwrap(),
        ]
    }

    fn ticket() -> Ticket {
        Ticket {
            node: NodeId(7),
            incarnation: 1,
            slot: SlotId(3),
            key: 0x5EC2E7,
            meta_first: 1,
            meta_count: 2,
            offset: 100,
            len: 1000,
            share: FULL_SHARE,
            flags: TicketFlags::WRITE,
        }
    }

    #[test]
    fn a_send_lands_counts_and_notifies_in_the_receivers_memory() {
        let r = receiver();
        let t = ticket();
        let target = DirectTarget::new(&t, 1, reply(mode::NORMAL, 64), fds(&r)).unwrap();
        let layout = NotifLayout::new(4096, 64).unwrap();
        let mut q = Consumer::attach(&r.queues, layout).unwrap();
        let opts = SendOptions::new().offset(10).meta(b"md").tag(42).entry(1);
        target.send(&opts, Data::Inline(b"direct!")).unwrap();
        let mut got = [0u8; 7];
        r.area
            .read((SLOT_BASE + 100 + 10) as usize, &mut got)
            .unwrap();
        assert_eq!(&got, b"direct!");
        let n = q.poll().expect("notified");
        assert_eq!(n.kind.get(), NotifKind::Message as u16);
        assert_eq!((n.slot.get(), n.meta_index.get(), n.word.get()), (3, 2, 42));
        assert_eq!((n.src_node.get(), n.len.get()), (7, 7));
        // Slot entry 2 is entry 1 of the ticket's range, at meta_base + 2 * 128.
        let mut e = [0u8; META_ENTRY_LEN];
        r.meta.read(4 * META_ENTRY_LEN, &mut e).unwrap();
        let e = hamlyn_wire::MetaEntry::read(&e).unwrap();
        assert_eq!(e.metadata(), b"md");
        assert_eq!(
            (e.src_node.get(), e.accumulator.get(), e.completed.get()),
            (7, 0, 1)
        );
        // The library's checks come first; nothing is written then.
        assert!(matches!(
            target.send(&SendOptions::new().offset(995), Data::Inline(b"too long")),
            Err(SendError::Ticket(
                hamlyn_core::SegmentError::OutsideTicket { .. }
            ))
        ));
        assert!(matches!(
            target.send(&SendOptions::new().entry(2), Data::Inline(b"x")),
            Err(SendError::Ticket(
                hamlyn_core::SegmentError::MetaIndexOutsideTicket(2)
            ))
        ));
        let fast = SendOptions {
            meta_index: MetaIndex::Fast,
            ..SendOptions::new()
        };
        assert_eq!(
            target.send(&fast, Data::Inline(b"x")),
            Err(SendError::Rejected(RejectReason::BadMode))
        );
        assert!(q.poll().is_none());
        // No notification when none is asked for; the message still counts.
        target
            .send(&SendOptions::new().notify(false), Data::Inline(b"quiet"))
            .unwrap();
        assert!(q.poll().is_none());
    }

    #[test]
    fn replies_are_checked_before_anything_is_mapped() {
        let r = receiver();
        let t = ticket();
        let protocol = |res: Result<DirectTarget, Error>| matches!(res, Err(Error::Protocol(_)));
        assert!(protocol(DirectTarget::new(&t, 1, Reply::Ok, fds(&r))));
        assert!(protocol(DirectTarget::new(&t, 1, reply(7, 64), fds(&r))));
        let mut three = fds(&r);
        three.pop();
        assert!(protocol(DirectTarget::new(
            &t,
            1,
            reply(mode::NORMAL, 64),
            three
        )));
        assert!(
            protocol(DirectTarget::new(&t, 1, reply(mode::FAST, 64), fds(&r))),
            "fast: no metadata fd"
        );
        let beyond = Ticket {
            offset: SLOT_LEN - 10,
            len: 11,
            ..t
        };
        assert!(matches!(
            DirectTarget::new(&beyond, 1, reply(mode::NORMAL, 64), fds(&r)),
            Err(Error::OutOfRange { what: "slot", .. })
        ));
        let entries = Ticket {
            meta_first: 3,
            meta_count: 2,
            ..t
        };
        assert!(matches!(
            DirectTarget::new(&entries, 1, reply(mode::NORMAL, 64), fds(&r)),
            Err(Error::MetaOutOfRange { .. })
        ));
        // A queue that does not fit the queue file.
        let bad_queue = Reply::Direct {
            mode: mode::NORMAL,
            base: SLOT_BASE,
            len: SLOT_LEN,
            meta_base: 2 * META_ENTRY_LEN as u64,
            meta_count: 4,
            queue_offset: 3 * 4096,
            queue_cap: 64,
        };
        assert!(matches!(
            DirectTarget::new(&t, 1, bad_queue, fds(&r)),
            Err(Error::Region(_))
        ));
        // Without a queue: two descriptors, and sends succeed without notifying anyone.
        let quiet = DirectTarget::new(
            &t,
            1,
            reply(mode::NORMAL, 0),
            vec![dup(&r.area), dup(&r.meta)],
        )
        .unwrap();
        assert!(!quiet.has_queue());
        quiet
            .send(&SendOptions::new(), Data::Inline(b"hi"))
            .unwrap();
    }

    /// The whole contents of `r`.
    fn contents(r: &ShmRegion) -> Vec<u8> {
        let mut v = vec![0u8; r.len()];
        r.read(0, &mut v).unwrap();
        v
    }

    /// A target opened for `t` on a fresh receiver of a normal or fast slot.
    fn open(t: &Ticket, fast: bool) -> (Receiver, Result<DirectTarget, Error>) {
        let r = receiver();
        let mut fds = fds(&r);
        let reply = if fast {
            // A fast slot's reply carries no metadata area.
            fds.remove(1);
            reply(mode::FAST, 64)
        } else {
            reply(mode::NORMAL, 64)
        };
        let target = DirectTarget::new(t, 1, reply, fds);
        (r, target)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// The small message's way (`one_packet`) and the general way leave the same
        /// bytes in the receiver's slot, entries and queue, and give the same results,
        /// send by send: two targets opened alike on two receivers, one without its
        /// quick way, take the same sends (weighted towards accepted ones, with the
        /// edges: the ticket's end, offsets near u64::MAX, 4 KiB and one more, 60 and 61
        /// bytes of metadata, budgets of 0, 1 and 2).
        #[test]
        fn the_quick_way_leaves_the_memory_as_the_general_one(
            fast_slot: bool,
            flags in prop_oneof![3 => Just(1u16), 2 => Just(9u16), 1 => 0u16..16],
            t_off in prop_oneof![Just(0u64), 0u64..8192],
            t_len_frac in 0u64..=1000,
            meta_first in 0u32..4,
            meta_count in 0u32..=4,
            share in prop_oneof![
                Just(FULL_SHARE), Just(255u64), Just(256), Just(511), Just(512),
                1u64..=FULL_SHARE,
            ],
            sends in proptest::collection::vec((
                prop_oneof![4 => Just(0u64), 2 => 0u64..9000, 1 => Just(u64::MAX - 7)],
                prop_oneof![Just(0usize), Just(8), 0usize..4200, Just(4096), Just(4097)],
                prop_oneof![Just(0usize), 0usize..=62, Just(60), Just(61)],
                prop_oneof![4 => Just(0u8), 1 => 0u8..5],
                0u32..6,
                (any::<bool>(), any::<bool>()),
                any::<u64>(),
                any::<bool>(),
            ), 1..6),
        ) {
            let t = Ticket {
                meta_first,
                meta_count: meta_count.min(4 - meta_first),
                offset: t_off,
                len: (SLOT_LEN - t_off) * t_len_frac / 1000,
                share,
                flags: TicketFlags(flags),
                ..ticket()
            };
            let (r1, quick) = open(&t, fast_slot);
            let (r2, general) = open(&t, fast_slot);
            let (Ok(quick), Ok(mut general)) = (quick, general) else {
                return Ok(());
            };
            general.one_packet = None;
            let payload: Vec<u8> = (0..4200u32).map(|i| (i * 7 + 3) as u8).collect();
            let meta: Vec<u8> = (0..62u8).collect();
            for (off, len, meta_len, index, entry, (notify, wake), word, at_end) in sends {
                let offset = if at_end { t.len.saturating_sub(len as u64) } else { off };
                let mut opts = SendOptions::new()
                    .tag(word)
                    .notify(notify)
                    .wake(wake)
                    .offset(offset)
                    .meta(&meta[..meta_len]);
                opts.meta_index = match index {
                    0 => MetaIndex::Auto,
                    1 => MetaIndex::Fast,
                    _ => MetaIndex::Entry(entry),
                };
                let data = Data::Inline(&payload[..len]);
                prop_assert_eq!(quick.send(&opts, data), general.send(&opts, data));
            }
            prop_assert!(contents(&r1.area) == contents(&r2.area), "the slots differ");
            prop_assert!(contents(&r1.meta) == contents(&r2.meta), "the entries differ");
            prop_assert!(contents(&r1.queues) == contents(&r2.queues), "the queues differ");
        }
    }
}
