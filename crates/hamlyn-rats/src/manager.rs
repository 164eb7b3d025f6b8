//! The Hamlyn interface manager (seed 001 §3.2, seed 000 §3.3): one per node handle and
//! thread. It owns message space in one area (handed out by [`Allocator`], malloc/free),
//! metadata entries (handed out and recycled by a second allocator), one notification
//! queue and one terminus, and the table of protocol instances. It dispatches the queue
//! to the instances: every metadata entry it hands out carries its instance's id as the
//! entry's cookie, which comes back in the notification, so an arrival finds its instance
//! by one table index (O(1)), never by a search.
//!
//! Like the paper's upper level it is not thread-safe (`!Send`): use one manager per
//! thread (each with its own queue index, [`ManagerOptions::queue`]).

use std::cell::{RefCell, RefMut};
use std::collections::{HashMap, VecDeque};
use std::os::fd::BorrowedFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use hamlyn::{
    Area, Data, DirectTarget, MetaArea, Node, Notification, NotificationKind, NotifyQueue,
    SendError, SendHandle, SendOptions, Slot, SlotMode, SlotPerms, Status, Terminus, Ticket,
    MAX_INLINE,
};

use crate::alloc::{Allocator, Block};
use crate::error::RatsError;

/// Bytes of one metadata entry.
const ENTRY_BYTES: u64 = 128;
/// Alignment (and rounding) of message space: a cache line.
pub const SPACE_GRANULE: u64 = 64;

/// A protocol instance's number in its manager.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceId(pub u32);

/// How a [`Manager`] is set up.
#[derive(Clone, Debug)]
pub struct ManagerOptions {
    /// Bytes of message space (one area) the manager hands out.
    pub space: u64,
    /// Metadata entries the manager hands out.
    pub entries: u32,
    /// The notification queue of the node's port it consumes.
    pub queue: u16,
    /// The priority of its terminus.
    pub priority: u8,
    /// Direct slots and direct sends on this node ([`hamlyn::SlotBuilder::danger_direct`],
    /// with everything that gives up): the normal and fast slots this manager makes take
    /// direct senders, and its sends to such slots of this node go direct
    /// ([`hamlyn::DirectTarget`]: deposited, counted and notified by this process, no
    /// engine hop; a handle that is done at once). Paranoid and one-shot slots (the
    /// datagram's and request/response's) and other nodes' slots stay mediated. Only
    /// between processes that trust each other: a direct sender can write anywhere in
    /// the receiver's message space, and keeps writing into a slot's old bytes after the
    /// receiver dropped it.
    pub danger_direct: bool,
}

impl Default for ManagerOptions {
    fn default() -> Self {
        ManagerOptions {
            space: 32 << 20,
            entries: 512,
            queue: 0,
            priority: 0,
            danger_direct: false,
        }
    }
}

/// What the manager counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RatsStats {
    /// Notifications dispatched to an instance.
    pub arrivals: u64,
    /// Arrivals whose metadata or shape broke their protocol (dropped, counted; the
    /// instance kept working).
    pub forged: u64,
    /// Notifications that named no live instance (a cookie or slot not ours any more).
    pub unroutable: u64,
    /// Notifications the engine reported lost to a full queue.
    pub lost: u64,
    /// Bytes copied into message space because the caller's bytes were not there.
    pub copied_bytes: u64,
    /// Messages sent direct ([`ManagerOptions::danger_direct`]).
    pub direct_sends: u64,
}

#[derive(Debug, Default)]
struct InstanceState {
    inbox: VecDeque<Notification>,
    in_ready_list: bool,
    /// It never reads arrivals (a slot without notifications): PeerDown news is not
    /// kept for it.
    quiet: bool,
    /// Its first slot routed by slot id (in [`Inner::slot_owner`] too): what the fast
    /// path of [`Inner::take_where`] compares a notification without a cookie with.
    home_slot: Option<u32>,
}

#[derive(Debug)]
struct Inner {
    space: Allocator,
    entries: Allocator,
    queue: NotifyQueue,
    terminus: Terminus,
    /// Termini opened later ([`Manager::open_terminus`]), numbered from 1.
    more_termini: Vec<Terminus>,
    /// The terminus sends go through now (0: `terminus`).
    current: usize,
    instances: Vec<Option<InstanceState>>,
    free_ids: Vec<u32>,
    ready: VecDeque<u32>,
    /// Owners of the slots routed by slot id, not by cookie: fast slots (no entries,
    /// so no cookie) and endpoints made with [`EndpointSpec::by_slot`].
    slot_owner: HashMap<u32, u32, BuildSlotHasher>,
    /// Copies of callers' bytes until their sends are done.
    staged: VecDeque<(SendHandle, Block)>,
    lost_unreported: u64,
    stats: RatsStats,
    /// Direct targets by ticket (`None`: the slot takes no direct senders, so sends to
    /// it go through the engine), if [`ManagerOptions::danger_direct`]; at most
    /// [`MAX_DIRECT_TARGETS`].
    direct: Option<HashMap<Ticket, Option<DirectTarget>>>,
}

/// Hashes slot ids for [`Inner::slot_owner`], on the receive fast path: one multiply
/// (Fibonacci hashing) instead of SipHash's hundred-odd instructions. The keys are this
/// manager's own slots; a notification's slot id only looks one up.
#[derive(Clone, Copy, Debug, Default)]
struct SlotHasher(u64);

impl std::hash::Hasher for SlotHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type BuildSlotHasher = std::hash::BuildHasherDefault<SlotHasher>;

/// Most tickets a manager keeps a direct mapping (or the knowledge that there is none)
/// for; past it, the cache starts again.
const MAX_DIRECT_TARGETS: usize = 256;

#[derive(Debug)]
struct Shared {
    node: Node,
    area: Area,
    meta: MetaArea,
    inner: RefCell<Inner>,
}

/// The manager: cheap to clone (every instance holds one); see the module docs.
#[derive(Clone, Debug)]
pub struct Manager {
    shared: Rc<Shared>,
}

impl Manager {
    /// A manager with default options on `node`.
    pub fn new(node: &Node) -> Result<Manager, RatsError> {
        Manager::with_options(node, ManagerOptions::default())
    }

    /// A manager on `node`: registers its area and metadata area, takes queue
    /// `options.queue` and a terminus.
    pub fn with_options(node: &Node, options: ManagerOptions) -> Result<Manager, RatsError> {
        let area = node.area(options.space)?;
        let meta = node.meta_area(options.entries)?;
        let queue = node.queue(options.queue)?;
        let terminus = node.terminus(options.priority)?;
        let inner = Inner {
            space: Allocator::new(options.space, SPACE_GRANULE)?,
            entries: Allocator::new(u64::from(options.entries), 1)?,
            queue,
            terminus,
            more_termini: Vec::new(),
            current: 0,
            instances: Vec::new(),
            free_ids: Vec::new(),
            ready: VecDeque::new(),
            slot_owner: HashMap::default(),
            staged: VecDeque::new(),
            lost_unreported: 0,
            stats: RatsStats::default(),
            direct: options.danger_direct.then(HashMap::new),
        };
        Ok(Manager {
            shared: Rc::new(Shared {
                node: node.clone(),
                area,
                meta,
                inner: RefCell::new(inner),
            }),
        })
    }

    #[inline]
    fn inner(&self) -> RefMut<'_, Inner> {
        self.shared.inner.borrow_mut()
    }

    /// The node handle.
    pub fn node(&self) -> &Node {
        &self.shared.node
    }

    /// The area message space is handed out of.
    pub fn area(&self) -> &Area {
        &self.shared.area
    }

    /// The port's event descriptor, for epoll or tokio: readable when a notification
    /// waits, after [`Manager::arm`] returned `false`.
    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.shared.node.event_fd()
    }

    /// Asks for [`Manager::event_fd`] to become readable on the next arrival; `true` if
    /// one already waits (call [`Manager::next_ready`] before going back to the loop).
    pub fn arm(&self) -> bool {
        self.inner().queue.arm()
    }

    /// What the manager counted.
    pub fn stats(&self) -> RatsStats {
        self.inner().stats
    }

    // ----- instances -----

    /// A new instance number (protocols call this when they are created).
    pub fn register(&self) -> InstanceId {
        self.register_as(false)
    }

    /// A new instance that never reads arrivals (its slots do not notify): news for
    /// every instance (PeerDown) is not kept for it.
    pub fn register_quiet(&self) -> InstanceId {
        self.register_as(true)
    }

    fn register_as(&self, quiet: bool) -> InstanceId {
        let mut inner = self.inner();
        let state = Some(InstanceState {
            quiet,
            ..InstanceState::default()
        });
        if let Some(id) = inner.free_ids.pop() {
            inner.instances[id as usize] = state;
            return InstanceId(id);
        }
        inner.instances.push(state);
        InstanceId((inner.instances.len() - 1) as u32)
    }

    /// Forgets an instance and what waits for it.
    pub fn unregister(&self, id: InstanceId) {
        let mut inner = self.inner();
        if let Some(s) = inner.instances.get_mut(id.0 as usize) {
            if s.take().is_some() {
                inner.free_ids.push(id.0);
            }
        }
        inner.slot_owner.retain(|_, owner| *owner != id.0);
    }

    /// Counts an arrival that broke its protocol (the caller dropped it).
    pub fn count_forged(&self) {
        self.inner().stats.forged += 1;
    }

    // ----- message space -----

    /// A block of message space of at least `len` bytes (malloc).
    pub fn alloc(&self, len: u64) -> Result<Buffer, RatsError> {
        let block = self.alloc_block(len)?;
        Ok(Buffer {
            mgr: self.clone(),
            block,
            len,
            handed_over: false,
        })
    }

    fn alloc_block(&self, len: u64) -> Result<Block, RatsError> {
        let mut inner = self.inner();
        match inner.space.alloc(len) {
            Ok(b) => Ok(b),
            Err(RatsError::NoSpace { .. }) => {
                inner.reclaim();
                inner.space.alloc(len)
            }
            Err(e) => Err(e),
        }
    }

    pub(crate) fn free_block(&self, block: Block) {
        // Our own blocks: a failure would be a bug of this crate, and freeing twice is
        // refused without harm.
        let _ = self.inner().space.free(block);
    }

    /// Bytes of message space free now.
    pub fn space_free(&self) -> u64 {
        self.inner().space.free_units()
    }

    // ----- endpoints -----

    /// A slot of instance `owner` over `len` bytes of message space with `entries`
    /// metadata entries of its own (none: a fast slot), reporting to the manager's queue
    /// if `notify`. Every entry's cookie names `owner`.
    pub fn endpoint(
        &self,
        owner: InstanceId,
        len: u64,
        entries: u32,
        spec: EndpointSpec,
    ) -> Result<Endpoint, RatsError> {
        let block = self.alloc_block(len.max(1))?;
        let result = self.endpoint_in(owner, block, entries, spec);
        if result.is_err() {
            self.free_block(block);
        }
        result
    }

    fn endpoint_in(
        &self,
        owner: InstanceId,
        block: Block,
        entries: u32,
        spec: EndpointSpec,
    ) -> Result<Endpoint, RatsError> {
        let cookie = u64::from(owner.0) + 1;
        let (meta, entry_block) = if entries == 0 {
            (None, None)
        } else {
            let eb = self.inner().entries.alloc(u64::from(entries))?;
            let m = MetaArea::new(
                self.shared.meta.area(),
                self.shared.meta.base() + eb.offset * ENTRY_BYTES,
                entries,
            );
            let m = match m {
                Ok(m) => m,
                Err(e) => {
                    let _ = self.inner().entries.free(eb);
                    return Err(e.into());
                }
            };
            for i in 0..entries {
                m.reset_accumulator(i)?;
                m.set_cookie(i, cookie)?;
            }
            (Some(m), Some(eb))
        };
        let range = block.offset..block.offset + block.len;
        let mut b = self
            .shared
            .node
            .slot(&self.shared.area)
            .range(range)
            .perms(spec.perms);
        b = match (&meta, spec.mode) {
            (None, _) => b.fast(),
            (Some(m), mode) => b.meta(m).mode(mode),
        };
        if spec.notify {
            b = b.queue(self.inner().queue.index());
        }
        let direct_mode = meta.is_none() || spec.mode == SlotMode::Normal;
        if direct_mode && self.inner().direct.is_some() {
            b = b.danger_direct();
        }
        let slot = match b.create() {
            Ok(s) => s,
            Err(e) => {
                if let Some(eb) = entry_block {
                    let _ = self.inner().entries.free(eb);
                }
                return Err(e.into());
            }
        };
        {
            let mut inner = self.inner();
            if meta.is_some() && !spec.by_slot {
                inner.queue.read_entries_of(&slot)?;
            } else {
                inner.slot_owner.insert(slot.id().0, owner.0);
                if let Some(Some(s)) = inner.instances.get_mut(owner.0 as usize) {
                    s.home_slot.get_or_insert(slot.id().0);
                }
            }
        }
        Ok(Endpoint {
            slot: Some(slot),
            meta,
            block,
            entries: entry_block,
            mgr: self.clone(),
        })
    }

    // ----- dispatch -----

    /// Hands one notification to its instance (the paper's `process_arrival`, called by
    /// [`Manager::poll`] and [`Manager::next_ready`]); the instance it went to.
    pub fn process_arrival(&self, n: Notification) -> Option<InstanceId> {
        self.inner().dispatch(n)
    }

    /// Takes every notification waiting (without blocking), dispatches them, and names an
    /// instance that has arrivals waiting, if any (the paper's `next_ready`).
    pub fn next_ready(&self) -> Option<InstanceId> {
        let mut inner = self.inner();
        inner.pump();
        inner.pop_ready()
    }

    /// Waits up to `timeout` (`None`: forever) until some instance has an arrival, and
    /// names it (the paper's `poll`); `Ok(None)` on timeout.
    pub fn poll(&self, timeout: Option<Duration>) -> Result<Option<InstanceId>, RatsError> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut inner = self.inner();
        inner.report_lost()?;
        loop {
            inner.pump();
            if let Some(id) = inner.pop_ready() {
                return Ok(Some(id));
            }
            if !inner.wait_one(deadline)? {
                return Ok(None);
            }
        }
    }

    /// The next arrival of instance `id`, if one waits: the oldest in its inbox, else the
    /// first of its own the queue holds ([`Inner::take_where`]).
    #[inline]
    pub(crate) fn take(&self, id: InstanceId) -> Option<Notification> {
        self.inner().take_where(id, |_| true)
    }

    /// The next arrival of instance `id`, as [`Manager::take`], handed to `f` where it
    /// lies (not copied out first): what `f` makes of it. `f` runs while the manager
    /// is borrowed, so it must not call the manager.
    #[inline]
    pub(crate) fn take_map<R>(
        &self,
        id: InstanceId,
        f: impl FnOnce(&Notification) -> R,
    ) -> Option<R> {
        self.inner().take_map(id, f)
    }

    /// Waits until `id` has an arrival `want` accepts, up to `deadline`; takes it.
    pub(crate) fn wait_where(
        &self,
        id: InstanceId,
        deadline: Option<Instant>,
        mut want: impl FnMut(&Notification) -> bool,
    ) -> Result<Option<Notification>, RatsError> {
        let mut inner = self.inner();
        inner.report_lost()?;
        loop {
            if inner.inbox(id).is_none() {
                return Err(RatsError::State("instance is gone"));
            }
            if let Some(n) = inner.take_where(id, &mut want) {
                return Ok(Some(n));
            }
            if !inner.wait_one(deadline)? {
                return Ok(None);
            }
        }
    }

    /// Waits for any arrival of `id` up to `deadline`.
    pub(crate) fn wait(
        &self,
        id: InstanceId,
        deadline: Option<Instant>,
    ) -> Result<Option<Notification>, RatsError> {
        self.wait_where(id, deadline, |_| true)
    }

    // ----- sending -----

    /// Opens one more terminus of the node's port at `priority` (0 = served first) and
    /// returns its number (the manager's own is 0). Sends go through it while it is
    /// selected ([`Manager::select_terminus`]).
    pub fn open_terminus(&self, priority: u8) -> Result<usize, RatsError> {
        let t = self.shared.node.terminus(priority)?;
        let mut inner = self.inner();
        inner.more_termini.push(t);
        Ok(inner.more_termini.len())
    }

    /// Makes every send of the manager's instances go through terminus `t` (0: the
    /// manager's own; others from [`Manager::open_terminus`]) until another is selected;
    /// returns the one selected before.
    pub fn select_terminus(&self, t: usize) -> Result<usize, RatsError> {
        let mut inner = self.inner();
        if t > inner.more_termini.len() {
            return Err(RatsError::InvalidArgument("no such terminus"));
        }
        Ok(std::mem::replace(&mut inner.current, t))
    }

    /// Queues one message; a full terminus is waited out (bounded), never dropped.
    #[inline]
    pub(crate) fn send(
        &self,
        ticket: &Ticket,
        opts: &SendOptions<'_>,
        data: Data<'_>,
    ) -> Result<SendHandle, RatsError> {
        let mut inner = self.inner();
        inner.send(&self.shared.node, ticket, opts, data)
    }

    /// Queues `bytes` as one message: inline if they fit a terminus entry, else copied
    /// into message space that is freed when the send is done.
    #[inline]
    pub(crate) fn send_bytes(
        &self,
        ticket: &Ticket,
        opts: &SendOptions<'_>,
        bytes: &[u8],
    ) -> Result<SendHandle, RatsError> {
        if bytes.len() <= MAX_INLINE {
            return self.send(ticket, opts, Data::Inline(bytes));
        }
        self.send_copied(ticket, opts, bytes)
    }

    /// [`Manager::send_bytes`] of bytes too long to go inline: copied into message space.
    #[inline(never)]
    fn send_copied(
        &self,
        ticket: &Ticket,
        opts: &SendOptions<'_>,
        bytes: &[u8],
    ) -> Result<SendHandle, RatsError> {
        let block = self.alloc_block(bytes.len() as u64)?;
        if let Err(e) = self.shared.area.write(block.offset, bytes) {
            self.free_block(block);
            return Err(e.into());
        }
        self.send_staged(ticket, opts, block, bytes.len() as u64)
    }

    /// Sends `len` bytes of `block` (ours) and frees the block when the send is done.
    pub(crate) fn send_staged(
        &self,
        ticket: &Ticket,
        opts: &SendOptions<'_>,
        block: Block,
        len: u64,
    ) -> Result<SendHandle, RatsError> {
        let mut inner = self.inner();
        let spans = [self.shared.area.span(block.offset, len)];
        match inner.send(&self.shared.node, ticket, opts, Data::Gather(&spans)) {
            Ok(h) => {
                inner.stats.copied_bytes += len;
                inner.staged.push_back((h.clone(), block));
                Ok(h)
            }
            Err(e) => {
                let _ = inner.space.free(block);
                Err(e)
            }
        }
    }

    /// A remote read through the manager's terminus.
    pub(crate) fn read(&self, args: &hamlyn::ReadArgs<'_>) -> Result<SendHandle, RatsError> {
        Ok(self.inner().terminus.read(args)?)
    }

    /// Frees the copies of finished sends.
    pub fn reclaim(&self) {
        self.inner().reclaim();
    }
}

impl Inner {
    fn inbox(&mut self, id: InstanceId) -> Option<&mut VecDeque<Notification>> {
        self.instances
            .get_mut(id.0 as usize)?
            .as_mut()
            .map(|s| &mut s.inbox)
    }

    /// The instance a notification for one slot belongs to: its entry's cookie (ours:
    /// instance id + 1; the engine never writes it), or a fast slot's owner.
    #[inline]
    fn owner(&self, n: &Notification) -> Option<u32> {
        match n.cookie {
            Some(c) if c > 0 && c <= u64::from(u32::MAX) => Some((c - 1) as u32),
            _ => self.slot_owner.get(&n.slot.0).copied(),
        }
    }

    /// The oldest arrival of `id` that `want` accepts: from its inbox, or else from the
    /// queue, polled until one of `id`'s that `want` accepts comes up. That one is
    /// handed over at once, without passing through the inbox and the ready list; every
    /// other notification polled on the way is dispatched as [`Inner::dispatch`] does,
    /// and what is behind ours stays queued for later. O(1) per notification, as
    /// dispatch; `id`'s order is kept (its inbox holds only what came before the
    /// queue's head, and is looked at first).
    ///
    /// The fast path — an empty inbox and `id`'s own notification at the head of the
    /// queue — is one poll and one compare (the cookie with `id`, or the slot with its
    /// home slot): what a protocol taking its next arrival costs beyond the library's
    /// poll.
    #[inline]
    fn take_where(
        &mut self,
        id: InstanceId,
        mut want: impl FnMut(&Notification) -> bool,
    ) -> Option<Notification> {
        let state = self.instances.get(id.0 as usize)?.as_ref()?;
        if !state.inbox.is_empty() {
            return self.take_slow(id, None, want);
        }
        let home = state.home_slot;
        let n = self.queue.poll()?;
        let mine = match n.cookie {
            Some(c) => c == u64::from(id.0) + 1,
            None => home == Some(n.slot.0),
        };
        let for_one = !matches!(
            n.kind,
            NotificationKind::Overflow | NotificationKind::PeerDown
        );
        if mine && for_one && want(&n) {
            self.stats.arrivals += 1;
            return Some(n);
        }
        self.take_slow(id, Some(n), want)
    }

    /// [`Inner::take_where`] with any arrival wanted, handed to `f` where it lies.
    #[inline]
    fn take_map<R>(&mut self, id: InstanceId, f: impl FnOnce(&Notification) -> R) -> Option<R> {
        let state = self.instances.get(id.0 as usize)?.as_ref()?;
        if !state.inbox.is_empty() {
            return self.take_slow(id, None, |_| true).map(|n| f(&n));
        }
        let home = state.home_slot;
        // Looked at where the poll left it, not moved out first.
        let polled = self.queue.poll();
        let n = polled.as_ref()?;
        let mine = match n.cookie {
            Some(c) => c == u64::from(id.0) + 1,
            None => home == Some(n.slot.0),
        };
        if mine
            && !matches!(
                n.kind,
                NotificationKind::Overflow | NotificationKind::PeerDown
            )
        {
            self.stats.arrivals += 1;
            return Some(f(n));
        }
        self.take_slow(id, polled, |_| true).map(|n| f(&n))
    }

    /// [`Inner::take_where`] past its fast path: `id`'s inbox first (if `first` is
    /// `None`), then `first` (polled already) and the rest of the queue, each
    /// notification dispatched until one of `id`'s that `want` accepts comes up.
    #[cold]
    #[inline(never)]
    fn take_slow(
        &mut self,
        id: InstanceId,
        mut first: Option<Notification>,
        mut want: impl FnMut(&Notification) -> bool,
    ) -> Option<Notification> {
        if first.is_none() {
            let inbox = &mut self.instances.get_mut(id.0 as usize)?.as_mut()?.inbox;
            if let Some(i) = inbox.iter().position(&mut want) {
                return inbox.remove(i);
            }
        }
        while let Some(n) = first.take().or_else(|| self.queue.poll()) {
            let for_one = !matches!(
                n.kind,
                NotificationKind::Overflow | NotificationKind::PeerDown
            );
            if for_one && self.owner(&n) == Some(id.0) && want(&n) {
                self.stats.arrivals += 1;
                return Some(n);
            }
            if self.dispatch(n).is_some_and(|to| to == id) || !for_one {
                // Now in `id`'s inbox (the only thing there it wants, if anything).
                let inbox = &mut self.instances.get_mut(id.0 as usize)?.as_mut()?.inbox;
                if let Some(i) = inbox.iter().position(&mut want) {
                    return inbox.remove(i);
                }
            }
        }
        None
    }

    fn deliver(&mut self, id: u32, n: Notification) -> Option<InstanceId> {
        match self.instances.get_mut(id as usize).and_then(Option::as_mut) {
            Some(s) => {
                s.inbox.push_back(n);
                if !s.in_ready_list {
                    s.in_ready_list = true;
                    self.ready.push_back(id);
                }
                self.stats.arrivals += 1;
                Some(InstanceId(id))
            }
            None => {
                self.stats.unroutable += 1;
                None
            }
        }
    }

    fn dispatch(&mut self, n: Notification) -> Option<InstanceId> {
        match n.kind {
            NotificationKind::Overflow => {
                self.stats.lost += n.word;
                self.lost_unreported += n.word;
                None
            }
            NotificationKind::PeerDown => {
                // Every instance learns of it; each decides whether it cares.
                let ids: Vec<u32> = (0..self.instances.len() as u32)
                    .filter(|&i| {
                        self.instances[i as usize]
                            .as_ref()
                            .is_some_and(|s| !s.quiet)
                    })
                    .collect();
                let mut first = None;
                for id in ids {
                    first = first.or(self.deliver(id, n));
                }
                first
            }
            _ => {
                // The cookie is ours (the engine never writes it): instance id + 1.
                match self.owner(&n) {
                    Some(id) => self.deliver(id, n),
                    None => {
                        self.stats.unroutable += 1;
                        None
                    }
                }
            }
        }
    }

    /// Dispatches what the queue holds now.
    fn pump(&mut self) {
        while let Some(n) = self.queue.poll() {
            self.dispatch(n);
        }
    }

    fn pop_ready(&mut self) -> Option<InstanceId> {
        while let Some(id) = self.ready.pop_front() {
            if let Some(s) = self.instances.get_mut(id as usize).and_then(Option::as_mut) {
                s.in_ready_list = false;
                if !s.inbox.is_empty() {
                    return Some(InstanceId(id));
                }
            }
        }
        None
    }

    /// Waits for one notification until `deadline` and dispatches it; `false` on timeout.
    fn wait_one(&mut self, deadline: Option<Instant>) -> Result<bool, RatsError> {
        let timeout = match deadline {
            None => None,
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return Ok(false);
                }
                Some(d - now)
            }
        };
        match self.queue.wait(timeout)? {
            Some(n) => {
                self.dispatch(n);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn report_lost(&mut self) -> Result<(), RatsError> {
        if self.lost_unreported > 0 {
            let n = std::mem::take(&mut self.lost_unreported);
            return Err(RatsError::NotificationsLost(n));
        }
        Ok(())
    }

    /// The direct mapping for `ticket` (a slot of this node), opened on first use; `None`
    /// if direct sends are off or the slot takes none.
    fn direct_target(&mut self, node: &Node, ticket: &Ticket) -> Option<&DirectTarget> {
        let cache = self.direct.as_mut()?;
        if !cache.contains_key(ticket) {
            if cache.len() >= MAX_DIRECT_TARGETS {
                cache.clear();
            }
            // A slot that is not direct (or is gone) is refused by the engine: remembered,
            // so its sends go through the engine without asking again.
            cache.insert(*ticket, node.open_direct(ticket).ok());
        }
        cache.get(ticket).and_then(Option::as_ref)
    }

    fn reclaim(&mut self) {
        while let Some((h, _)) = self.staged.front() {
            if !h.is_done() {
                break;
            }
            if let Some((_, b)) = self.staged.pop_front() {
                let _ = self.space.free(b);
            }
        }
    }

    /// Queues one message through the selected terminus (or direct). The common case —
    /// nothing staged to free, no direct mapping, the terminus takes it — is a few
    /// compares around [`Terminus::send`]; the rest is [`Inner::send_slow`].
    #[inline]
    fn send(
        &mut self,
        node: &Node,
        ticket: &Ticket,
        opts: &SendOptions<'_>,
        data: Data<'_>,
    ) -> Result<SendHandle, RatsError> {
        if self.current == 0 && self.direct.is_none() && self.staged.is_empty() {
            match self.terminus.send(ticket, opts, data) {
                Err(SendError::Full) | Err(SendError::EntriesBusy) => {}
                other => return Ok(other?),
            }
        }
        self.send_slow(node, ticket, opts, data)
    }

    #[cold]
    #[inline(never)]
    fn send_slow(
        &mut self,
        node: &Node,
        ticket: &Ticket,
        opts: &SendOptions<'_>,
        data: Data<'_>,
    ) -> Result<SendHandle, RatsError> {
        self.reclaim();
        if ticket.node == node.id() {
            if let Some(target) = self.direct_target(node, ticket) {
                let h = target.send_for_handle(opts, data)?;
                self.stats.direct_sends += 1;
                return Ok(h);
            }
        }
        // Bounded: a full terminus drains as the engine works; waiting for it to go idle
        // ends within the engine's own progress or its death.
        let terminus = match self.current {
            0 => &mut self.terminus,
            i => self
                .more_termini
                .get_mut(i - 1)
                .ok_or(RatsError::InvalidArgument("no such terminus"))?,
        };
        for _ in 0..1000 {
            match terminus.send(ticket, opts, data) {
                // Room in the queue comes back as the engine takes requests in: wait for
                // that, keeping the queue full (a stream's throughput), not for all of it.
                Err(SendError::Full) => {
                    if !terminus.wait_room(Some(Duration::from_millis(100))) && node.engine_gone() {
                        return Err(RatsError::Send(SendError::EngineGone));
                    }
                }
                // An entry comes back only when a message on it finishes.
                Err(SendError::EntriesBusy) => {
                    if !terminus.wait_idle(Some(Duration::from_millis(100)))
                        && terminus.in_flight() == 0
                    {
                        return Err(RatsError::Send(SendError::EngineGone));
                    }
                }
                other => return Ok(other?),
            }
        }
        Err(RatsError::Send(SendError::Full))
    }
}

/// How an [`Endpoint`]'s slot is made.
#[derive(Clone, Copy, Debug)]
pub struct EndpointSpec {
    /// Its mode (ignored for a fast slot, i.e. one without entries).
    pub mode: SlotMode,
    /// What ticket holders may do.
    pub perms: SlotPerms,
    /// Whether its messages are reported on the manager's queue.
    pub notify: bool,
    /// Its arrivals are routed to its instance by slot id, and the queue does not read
    /// its entries (a notification then carries no cookie and no first offset): for a
    /// protocol that needs neither, this saves the entry reads on every poll (the
    /// tagged write's one-packet messages carry their offset in the tag).
    pub by_slot: bool,
}

impl Default for EndpointSpec {
    fn default() -> Self {
        EndpointSpec {
            mode: SlotMode::Normal,
            perms: SlotPerms::default(),
            notify: true,
            by_slot: false,
        }
    }
}

/// A slot over message space of one instance, with its own metadata entries (whose
/// cookies name the instance). Dropping it destroys the slot and frees both.
#[derive(Debug)]
pub struct Endpoint {
    slot: Option<Slot>,
    meta: Option<MetaArea>,
    block: Block,
    entries: Option<Block>,
    mgr: Manager,
}

impl Endpoint {
    /// The slot.
    pub fn slot(&self) -> Option<&Slot> {
        self.slot.as_ref()
    }

    fn the_slot(&self) -> Result<&Slot, RatsError> {
        self.slot
            .as_ref()
            .ok_or(RatsError::State("endpoint closed"))
    }

    /// Its metadata entries.
    pub fn meta(&self) -> Option<&MetaArea> {
        self.meta.as_ref()
    }

    /// Bytes of the slot (the block may be a little larger).
    pub fn len(&self) -> u64 {
        self.slot.as_ref().map_or(0, Slot::len)
    }

    /// Whether the slot has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A ticket for `bytes` (slot-relative) and entries `meta`.
    pub fn ticket(
        &self,
        bytes: std::ops::Range<u64>,
        meta: std::ops::Range<u32>,
    ) -> Result<Ticket, RatsError> {
        Ok(self.the_slot()?.ticket(bytes, meta)?)
    }

    /// Copies `buf.len()` bytes at slot offset `off` out.
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), RatsError> {
        self.check(off, buf.len() as u64)?;
        Ok(self.mgr.shared.area.read(self.block.offset + off, buf)?)
    }

    /// Writes `bytes` at slot offset `off` (the owner's own memory).
    pub fn write(&self, off: u64, bytes: &[u8]) -> Result<(), RatsError> {
        self.check(off, bytes.len() as u64)?;
        Ok(self.mgr.shared.area.write(self.block.offset + off, bytes)?)
    }

    /// The address of slot byte `off`, with `len` bytes from it inside the slot: for
    /// foreign-language bindings that hand received bytes to their callers without a
    /// copy (the C API's view of an active message's payload). The bytes stay mapped
    /// while this endpoint lives; the engine and senders may write them concurrently, so
    /// never form a Rust reference to them ([`Endpoint::read`] is the safe accessor).
    pub fn as_ptr_at(&self, off: u64, len: u64) -> Result<*const u8, RatsError> {
        self.check(off, len)?;
        let at = usize::try_from(self.block.offset + off)
            .map_err(|_| RatsError::InvalidArgument("offset beyond the address space"))?;
        Ok(self.mgr.shared.area.as_ptr().wrapping_add(at).cast_const())
    }

    /// A gather span of slot bytes `off..off + len` (to send them on).
    pub fn span(&self, off: u64, len: u64) -> Result<hamlyn::Span<'_>, RatsError> {
        self.check(off, len)?;
        Ok(self.mgr.shared.area.span(self.block.offset + off, len))
    }

    /// Checks that `off..off + len` lies in the slot (offsets from a peer included).
    pub fn check(&self, off: u64, len: u64) -> Result<(), RatsError> {
        match off.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(RatsError::Forged("range outside the slot")),
        }
    }

    /// User metadata of entry `index`.
    pub fn metadata(&self, index: u32) -> Result<Vec<u8>, RatsError> {
        let m = self.meta.as_ref().ok_or(RatsError::State("no entries"))?;
        Ok(m.metadata(index)?)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            let id = slot.id();
            // Destroyed first: no arrival for it is notified after this.
            drop(slot);
            let mut inner = self.mgr.inner();
            // What is queued for it is dispatched while its entries still name its
            // instance (already unregistered: counted unroutable). Later, its slot id and
            // entries may be another instance's, and a notification read then would be
            // taken for that one's.
            inner.pump();
            inner.queue.forget_entries_of(id);
            if let Some(owner) = inner.slot_owner.remove(&id.0) {
                if let Some(Some(s)) = inner.instances.get_mut(owner as usize) {
                    if s.home_slot == Some(id.0) {
                        s.home_slot = None;
                    }
                }
            }
        }
        let mut inner = self.mgr.inner();
        let _ = inner.space.free(self.block);
        if let Some(eb) = self.entries {
            let _ = inner.entries.free(eb);
        }
    }
}

/// Message space from [`Manager::alloc`]: write into it, send it without a copy, read
/// what lands in it. Freed when dropped.
#[derive(Debug)]
pub struct Buffer {
    mgr: Manager,
    block: Block,
    len: u64,
    /// The block went to the manager's list of blocks freed after their sends.
    handed_over: bool,
}

impl Buffer {
    /// Bytes asked for.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes `bytes` at `off`.
    pub fn write(&self, off: u64, bytes: &[u8]) -> Result<(), RatsError> {
        self.check(off, bytes.len() as u64)?;
        Ok(self.mgr.shared.area.write(self.block.offset + off, bytes)?)
    }

    /// Copies bytes at `off` out.
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), RatsError> {
        self.check(off, buf.len() as u64)?;
        Ok(self.mgr.shared.area.read(self.block.offset + off, buf)?)
    }

    /// A gather span of `off..off + len`.
    pub fn span(&self, off: u64, len: u64) -> Result<hamlyn::Span<'_>, RatsError> {
        self.check(off, len)?;
        Ok(self.mgr.shared.area.span(self.block.offset + off, len))
    }

    fn check(&self, off: u64, len: u64) -> Result<(), RatsError> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(RatsError::InvalidArgument("outside the buffer")),
        }
    }

    /// Gives the block to the manager to free once `handle`'s send is done (the send
    /// reads it until then).
    pub(crate) fn free_after(mut self, handle: &SendHandle) {
        self.handed_over = true;
        self.mgr
            .inner()
            .staged
            .push_back((handle.clone(), self.block));
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if !self.handed_over {
            self.mgr.free_block(self.block);
        }
    }
}

/// What a send handle says, as a protocol reports it: error (with its code), pending,
/// copied (coalesced into a buffer not sent yet) or sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendStatus {
    /// Queued, not done.
    Pending,
    /// Copied into a coalescing buffer; sent on a later flush.
    Copied,
    /// Sent.
    Sent,
    /// Failed, with the engine's status.
    Error(Status),
}

impl From<Status> for SendStatus {
    fn from(s: Status) -> SendStatus {
        match s {
            Status::Pending => SendStatus::Pending,
            Status::Sent => SendStatus::Sent,
            other => SendStatus::Error(other),
        }
    }
}
