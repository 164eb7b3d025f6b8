//! Control requests: attach, areas, slots, termini, stats. Every argument a client sends
//! is checked here; a bad one is an error reply, never a crash.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use hamlyn_core::endpoint::EndpointSpec;
use hamlyn_core::{
    AreaId, MetaRange, OwnerId, RateLimit, RejectReason, SlotConfig, SlotError, SlotMode,
    SlotPerms, TokenBucket,
};
use hamlyn_shm::memory::RingMemory;
use hamlyn_shm::notifq;
use hamlyn_shm::port::{PortGeometry, PortLayout};
use hamlyn_shm::region::ShmRegion;
use hamlyn_shm::spsc;
use hamlyn_shm::wake::EventFd;
use hamlyn_wire::control::{
    endpoint_flag, mode, perm, ControlErrorCode, Reply, Request, CONTROL_VERSION, NO_QUEUE,
};
use hamlyn_wire::endpoint::EndpointLayout;
use hamlyn_wire::entry::META_ENTRY_LEN;
use hamlyn_wire::SlotId;

use crate::clients::{queue_id, queue_parts};
use crate::engine::EngineState;
use crate::port::{Port, TerminusState};
use crate::stats::stats_page;

/// Entries per terminus ring (≥ 63 usable, seed 000 §2.3).
pub(crate) const RING_CAP: u32 = 64;
/// Entries in a port's error ring.
pub(crate) const ERR_CAP: u32 = 1024;
/// Largest area the engine will map.
pub(crate) const MAX_AREA: u64 = 1 << 40;

/// A reply and the descriptors that go with it.
pub(crate) type Answer = (Reply, Vec<OwnedFd>);

fn err(code: ControlErrorCode, message: impl Into<String>) -> Answer {
    (
        Reply::Error {
            code: code as u16,
            message: message.into(),
        },
        Vec::new(),
    )
}

fn ok(reply: Reply) -> Answer {
    (reply, Vec::new())
}

fn slot_err(e: SlotError) -> Answer {
    match e {
        SlotError::NotOwner => err(ControlErrorCode::NotOwner, "slot belongs to another client"),
        SlotError::NoSuchSlot => err(ControlErrorCode::NotFound, "no such slot"),
        other => err(ControlErrorCode::InvalidArgument, other.to_string()),
    }
}

/// The typed refusal of an `OpenDirect` request for each reason `check_direct` gives. A
/// slot whose owner died is "not found", as it is gone.
#[cold]
fn direct_refusal(reason: RejectReason, tombstone: bool) -> Answer {
    match reason {
        RejectReason::WrongNode => err(
            ControlErrorCode::WrongNode,
            "the ticket names another node: direct slots are for this node's clients",
        ),
        RejectReason::UnknownSlot if tombstone => {
            err(ControlErrorCode::NotFound, "the slot's owner is gone")
        }
        RejectReason::UnknownSlot => err(ControlErrorCode::NotFound, "no such slot"),
        RejectReason::Revoked => err(ControlErrorCode::Revoked, "the slot is revoked"),
        RejectReason::BadKey => err(ControlErrorCode::BadKey, "wrong key for the slot"),
        RejectReason::BadMode => err(
            ControlErrorCode::NotDirect,
            "the slot was not created with danger_direct",
        ),
        RejectReason::NotPermitted => err(
            ControlErrorCode::NotDirect,
            "the slot does not accept writes",
        ),
        RejectReason::Inhibited => err(ControlErrorCode::Inhibited, "the slot is write-inhibited"),
        other => err(ControlErrorCode::InvalidArgument, other.to_string()),
    }
}

/// A fresh random key (never 0): keys are sparse 64-bit capabilities. No randomness is
/// the client's refusal (`Exhausted`), never a loop in the engine.
fn random_key() -> Result<u64, Answer> {
    hamlyn_shm::keys::random_key().map_err(|e| err(ControlErrorCode::Exhausted, e.to_string()))
}

/// Descriptors the engine may spend on areas: its open-file limit, less room for its
/// own (sockets, ports, the fabric).
fn fd_budget() -> u64 {
    let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    lim.current.unwrap_or(u64::MAX).saturating_sub(256)
}

fn dup(fd: impl AsFd) -> Result<OwnedFd, rustix::io::Errno> {
    rustix::io::fcntl_dupfd_cloexec(fd, 0)
}

impl EngineState {
    /// Handles one control request from client `cid`.
    pub(crate) fn handle(&mut self, cid: u32, req: Request, fds: Vec<OwnedFd>) -> Answer {
        let attached = self.clients.get_mut(cid).is_some_and(|c| c.port.is_some());
        match req {
            Request::Stats { section, start } => {
                let (page, next) = stats_page(self, section, start);
                ok(Reply::StatsPage { page, next })
            }
            Request::Attach {
                version,
                pid,
                termini,
                queues,
                queue_cap,
            } => {
                if attached {
                    return err(ControlErrorCode::NotAttached, "already attached");
                }
                if version != CONTROL_VERSION {
                    return err(
                        ControlErrorCode::Version,
                        format!("engine speaks version {CONTROL_VERSION}"),
                    );
                }
                self.attach(cid, pid, termini, queues, queue_cap)
            }
            _ if !attached => err(ControlErrorCode::NotAttached, "attach first"),
            Request::Detach => {
                self.drain_client(cid);
                if let Some(c) = self.clients.get_mut(cid) {
                    c.detached = true;
                }
                ok(Reply::Ok)
            }
            Request::RegisterArea { len } => self.register_area(cid, len, fds),
            Request::UnregisterArea { area } => {
                if self.delivery.iface.slots().iter().any(|(_, s)| {
                    s.config.area.0 == area || s.config.meta.is_some_and(|m| m.area.0 == area)
                }) {
                    return err(ControlErrorCode::Busy, "a slot still uses the area");
                }
                let len = self
                    .delivery
                    .areas
                    .owned(cid, AreaId(area))
                    .map_or(0, |r| r.len() as u64);
                if self.delivery.areas.unregister(cid, AreaId(area)) {
                    if let Some(c) = self.clients.get_mut(cid) {
                        c.usage.areas = c.usage.areas.saturating_sub(1);
                        c.usage.area_bytes = c.usage.area_bytes.saturating_sub(len);
                    }
                    ok(Reply::Ok)
                } else {
                    err(ControlErrorCode::NotFound, "no such area of this client")
                }
            }
            Request::CreateSlot {
                area,
                base,
                len,
                mode,
                perms,
                meta_area,
                meta_base,
                meta_count,
                queue,
            } => self.create_slot(
                cid, area, base, len, mode, perms, meta_area, meta_base, meta_count, queue,
            ),
            Request::Rekey { slot } => {
                let key = match random_key() {
                    Ok(k) => k,
                    Err(refusal) => return refusal,
                };
                match self
                    .delivery
                    .iface
                    .slots_mut()
                    .rekey(OwnerId(cid), SlotId(slot), key)
                {
                    Ok(()) => ok(Reply::Slot { slot, key }),
                    Err(e) => slot_err(e),
                }
            }
            Request::Revoke { slot } => {
                match self
                    .delivery
                    .iface
                    .slots_mut()
                    .revoke(OwnerId(cid), SlotId(slot))
                {
                    Ok(()) => ok(Reply::Ok),
                    Err(e) => slot_err(e),
                }
            }
            Request::Inhibit { slot, on } => {
                match self
                    .delivery
                    .iface
                    .slots_mut()
                    .inhibit(OwnerId(cid), SlotId(slot), on)
                {
                    Ok(()) => ok(Reply::Ok),
                    Err(e) => slot_err(e),
                }
            }
            Request::DestroySlot { slot } => {
                match self
                    .delivery
                    .iface
                    .slots_mut()
                    .destroy(OwnerId(cid), SlotId(slot))
                {
                    Ok(_) => {
                        if let Some(c) = self.clients.get_mut(cid) {
                            c.usage.slots = c.usage.slots.saturating_sub(1);
                        }
                        ok(Reply::Ok)
                    }
                    Err(e) => slot_err(e),
                }
            }
            Request::OpenTerminus { index, priority } => self.open_terminus(cid, index, priority),
            Request::SetRate {
                terminus,
                bytes_per_sec,
                msgs_per_sec,
            } => {
                let now = self.now();
                let Some(port) = self.clients.port_mut(cid) else {
                    return err(ControlErrorCode::NotAttached, "attach first");
                };
                let Some(term) = port.termini.get_mut(usize::from(terminus)) else {
                    return err(
                        ControlErrorCode::InvalidArgument,
                        "no such terminus in the port",
                    );
                };
                let limit = RateLimit {
                    bytes_per_sec,
                    msgs_per_sec,
                };
                match term.rate.as_mut() {
                    Some(bucket) => bucket.set_limit(limit, now),
                    None => term.rate = Some(TokenBucket::new(limit, now)),
                }
                term.throttled_until = None;
                self.look_at_all = true;
                ok(Reply::Ok)
            }
            Request::CreateEndpoint {
                area,
                base,
                buf_size,
                buffers,
                queue,
                flags,
            } => self.create_endpoint(cid, area, base, buf_size, buffers, queue, flags),
            Request::OpenDirect {
                node,
                incarnation,
                slot,
                key,
            } => {
                let answer = self.open_direct(node, incarnation, slot, key);
                if matches!(answer.0, Reply::Direct { .. }) {
                    self.counters.direct_opens += 1;
                    tracing::info!(client = cid, slot, "direct slot mapped for a ticket holder");
                } else {
                    self.counters.direct_refusals += 1;
                }
                answer
            }
            _ => err(
                ControlErrorCode::BadRequest,
                "request not supported by this engine",
            ),
        }
    }

    /// A refusal for going past a quota, counted.
    #[cold]
    fn over_quota(&mut self, what: String) -> Answer {
        self.counters.quota_refusals += 1;
        err(ControlErrorCode::Quota, what)
    }

    fn attach(&mut self, cid: u32, pid: u32, termini: u16, queues: u16, queue_cap: u32) -> Answer {
        let q = self.cfg.quotas;
        if termini > q.termini || queues > q.queues {
            return self.over_quota(format!(
                "{termini} termini and {queues} queues asked; a port may have {} and {}",
                q.termini, q.queues
            ));
        }
        if !(64..=65536).contains(&queue_cap) || !queue_cap.is_power_of_two() {
            return err(
                ControlErrorCode::InvalidArgument,
                "queue_cap must be a power of two in 64..=65536",
            );
        }
        let geometry = PortGeometry {
            termini,
            queues,
            ring_cap: RING_CAP,
            queue_cap,
            err_cap: ERR_CAP,
        };
        let layout = match PortLayout::new(geometry) {
            Ok(l) => l,
            Err(e) => {
                return err(
                    ControlErrorCode::InvalidArgument,
                    format!("port geometry: {e}"),
                )
            }
        };
        match self.build_port(layout) {
            Ok((port, fds)) => {
                let port_len = port.region.len() as u64;
                let (node, incarnation) = (self.delivery.iface.node().0, self.incarnation);
                let (region, n) = (port.region.clone(), port.termini.len());
                if let Some(c) = self.clients.get_mut(cid) {
                    c.pid = pid;
                    c.port = Some(port);
                    self.hint_ports
                        .add(cid, region, n, crate::sched::PRIORITY_LEVELS);
                }
                self.counters.attaches += 1;
                tracing::info!(client = cid, pid, termini, queues, "client attached");
                (
                    Reply::Attached {
                        client: cid,
                        node,
                        incarnation,
                        port_len,
                    },
                    fds,
                )
            }
            Err(e) => err(ControlErrorCode::Exhausted, e),
        }
    }

    fn build_port(&self, layout: PortLayout) -> Result<(Port, Vec<OwnedFd>), String> {
        let region =
            Arc::new(ShmRegion::create("hamlyn-port", layout.total).map_err(|e| e.to_string())?);
        if !layout.write_header(&*region) {
            return Err("port header does not fit".into());
        }
        // The notification queues have a file of their own: direct senders are given its
        // descriptor, never the port's.
        let queue_region = Arc::new(
            ShmRegion::create("hamlyn-queues", layout.queue_total).map_err(|e| e.to_string())?,
        );
        // The engine takes requests from the one and posts to the other, each time a new
        // part: faulted in now.
        region.fault_in();
        queue_region.fault_in();
        // The engine (and direct senders) poke; the client waits on the other end.
        let (eventfd, client_end) = EventFd::pair().map_err(|e| e.to_string())?;
        let mut queues = Vec::with_capacity(layout.queues.len());
        for q in &layout.queues {
            let efd = EventFd::from_fd(dup(eventfd.as_fd()).map_err(|e| e.to_string())?);
            let p =
                notifq::Producer::attach(queue_region.clone(), *q).map_err(|e| e.to_string())?;
            queues.push(p.with_eventfd(efd));
        }
        let errors =
            spsc::Producer::attach(region.clone(), layout.errors).map_err(|e| e.to_string())?;
        let mut termini = Vec::with_capacity(layout.termini.len());
        for t in 0..layout.geometry.termini {
            let completion_off = layout.completion_word(t).ok_or("terminus out of range")?;
            let wake_off = layout
                .completion_wake_word(t)
                .ok_or("terminus out of range")?;
            termini.push(TerminusState {
                ring: None,
                current: None,
                finished: 0,
                completion_off,
                wake_off,
                broken: false,
                rate: None,
                throttled_until: None,
                level: 0,
                queued: false,
            });
        }
        let fds = vec![
            dup(region.fd()).map_err(|e| e.to_string())?,
            dup(queue_region.fd()).map_err(|e| e.to_string())?,
            client_end.into_fd(),
            dup(self.doorbell_poker.as_fd()).map_err(|e| e.to_string())?,
        ];
        let lost = vec![0; queues.len()];
        Ok((
            Port {
                region,
                queue_region,
                layout,
                termini,
                errors,
                queues,
                eventfd,
                late: Default::default(),
                lost,
            },
            fds,
        ))
    }

    fn register_area(&mut self, cid: u32, len: u64, mut fds: Vec<OwnedFd>) -> Answer {
        if fds.len() != 1 {
            return err(
                ControlErrorCode::BadArea,
                format!("expected one area fd, got {}", fds.len()),
            );
        }
        if len == 0 || len > MAX_AREA {
            return err(
                ControlErrorCode::InvalidArgument,
                "area length out of range",
            );
        }
        let Some(fd) = fds.pop() else {
            return err(ControlErrorCode::BadArea, "no fd");
        };
        let usage = self
            .clients
            .get_mut(cid)
            .map(|c| c.usage)
            .unwrap_or_default();
        let q = self.cfg.quotas;
        if usage.areas >= q.areas {
            return self.over_quota(format!("a client may register {} areas", q.areas));
        }
        if usage.area_bytes.saturating_add(len) > q.area_bytes {
            return self.over_quota(format!(
                "a client may register {} bytes of areas; it has {}",
                q.area_bytes, usage.area_bytes
            ));
        }
        // Each area holds a descriptor: the engine's are shared out among the clients
        // connected (at least 64 each), and never all spent on areas.
        let budget = fd_budget();
        let live = self.clients.live().max(1) as u64;
        let share = (budget / live).max(64);
        let total_areas: u64 = self.clients.iter().map(|c| u64::from(c.usage.areas)).sum();
        if u64::from(usage.areas) >= share || total_areas >= budget {
            return self.over_quota(format!(
                "the engine's descriptors: {share} areas per client while {live} are connected"
            ));
        }
        if self.clients.mapped().saturating_add(len) > self.cfg.max_mapped {
            return self.over_quota(format!(
                "the engine maps at most {} bytes of areas in all",
                self.cfg.max_mapped
            ));
        }
        // A failure to map is this client's error (BadArea), never the engine's.
        match ShmRegion::from_fd(fd, len as usize) {
            Ok(region) => {
                let id = self.delivery.areas.register(cid, region);
                if let Some(c) = self.clients.get_mut(cid) {
                    c.usage.areas += 1;
                    c.usage.area_bytes += len;
                }
                ok(Reply::Area { area: id.0 })
            }
            Err(e) => err(ControlErrorCode::BadArea, e.to_string()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn create_slot(
        &mut self,
        cid: u32,
        area: u32,
        base: u64,
        len: u64,
        mode_code: u8,
        perms: u8,
        meta_area: u32,
        meta_base: u64,
        meta_count: u32,
        queue: u32,
    ) -> Answer {
        let slots = self.clients.get_mut(cid).map_or(0, |c| c.usage.slots);
        if slots >= self.cfg.quotas.slots {
            let n = self.cfg.quotas.slots;
            return self.over_quota(format!("a client may hold {n} slots"));
        }
        let Some(region) = self.delivery.areas.owned(cid, AreaId(area)) else {
            return err(ControlErrorCode::NotFound, "no such area of this client");
        };
        if base
            .checked_add(len)
            .is_none_or(|end| end > region.len() as u64)
        {
            return err(
                ControlErrorCode::InvalidArgument,
                "slot range outside its area",
            );
        }
        let mode = match mode_code {
            mode::NORMAL => SlotMode::Normal,
            mode::PARANOID => SlotMode::Paranoid,
            mode::PARANOID_ONE_SHOT => SlotMode::ParanoidOneShot,
            mode::FAST => SlotMode::Fast,
            _ => return err(ControlErrorCode::InvalidArgument, "unknown slot mode"),
        };
        if perms & !(perm::WRITE | perm::READ | perm::ATOMIC | perm::DANGER_DIRECT) != 0 {
            return err(ControlErrorCode::InvalidArgument, "unknown permission bits");
        }
        let direct = perms & perm::DANGER_DIRECT != 0;
        let meta = if mode == SlotMode::Fast {
            None
        } else {
            let Some(meta_region) = self.delivery.areas.owned(cid, AreaId(meta_area)) else {
                return err(
                    ControlErrorCode::NotFound,
                    "no such metadata area of this client",
                );
            };
            let bytes = u64::from(meta_count) * META_ENTRY_LEN as u64;
            if meta_count == 0 || meta_base % META_ENTRY_LEN as u64 != 0 {
                return err(
                    ControlErrorCode::InvalidArgument,
                    "metadata entries: count ≥ 1, base a multiple of 128",
                );
            }
            if meta_base
                .checked_add(bytes)
                .is_none_or(|end| end > meta_region.len() as u64)
            {
                return err(
                    ControlErrorCode::InvalidArgument,
                    "metadata entries outside their area",
                );
            }
            Some(MetaRange {
                area: AreaId(meta_area),
                base: meta_base,
                count: meta_count,
            })
        };
        let queues = self
            .clients
            .get_mut(cid)
            .and_then(|c| c.port.as_ref())
            .map_or(0, |p| p.queues.len());
        let queue = if queue == NO_QUEUE {
            None
        } else if (queue as usize) < queues {
            Some(queue_id(cid, queue as u16))
        } else {
            return err(
                ControlErrorCode::InvalidArgument,
                "no such notification queue in the port",
            );
        };
        let config = SlotConfig {
            owner: OwnerId(cid),
            area: AreaId(area),
            base,
            len,
            mode,
            meta,
            queue,
            perms: SlotPerms {
                write: perms & perm::WRITE != 0,
                read: perms & perm::READ != 0,
                atomic: perms & perm::ATOMIC != 0,
            },
        };
        let key = match random_key() {
            Ok(k) => k,
            Err(refusal) => return refusal,
        };
        let created = if direct {
            self.delivery.iface.slots_mut().create_direct(config, key)
        } else {
            self.delivery.iface.slots_mut().create(config, key)
        };
        match created {
            Ok(id) => {
                self.delivery.reborn(id);
                if let Some(c) = self.clients.get_mut(cid) {
                    c.usage.slots += 1;
                }
                ok(Reply::Slot { slot: id.0, key })
            }
            Err(e) => slot_err(e),
        }
    }

    /// `CreateEndpoint`: a receive endpoint (seed 002) over `base..base + layout.len()` of
    /// one of the client's areas, writes only, reporting to one of its queues or none.
    #[allow(clippy::too_many_arguments)]
    fn create_endpoint(
        &mut self,
        cid: u32,
        area: u32,
        base: u64,
        buf_size: u32,
        buffers: u32,
        queue: u32,
        flags: u8,
    ) -> Answer {
        let slots = self.clients.get_mut(cid).map_or(0, |c| c.usage.slots);
        if slots >= self.cfg.quotas.slots {
            let n = self.cfg.quotas.slots;
            return self.over_quota(format!("a client may hold {n} slots"));
        }
        if flags & !(endpoint_flag::REPORT_DISCARDS | endpoint_flag::DANGER_DIRECT) != 0 {
            return err(ControlErrorCode::InvalidArgument, "unknown endpoint flags");
        }
        let layout = match EndpointLayout::new(buf_size, buffers) {
            Ok(l) => l,
            Err(e) => return err(ControlErrorCode::InvalidArgument, e.to_string()),
        };
        let Some(region) = self.delivery.areas.owned(cid, AreaId(area)) else {
            return err(ControlErrorCode::NotFound, "no such area of this client");
        };
        if base % 64 != 0
            || base
                .checked_add(layout.len())
                .is_none_or(|end| end > region.len() as u64)
        {
            return err(
                ControlErrorCode::InvalidArgument,
                "endpoint outside its area (or its base not a multiple of 64)",
            );
        }
        let queues = self
            .clients
            .get_mut(cid)
            .and_then(|c| c.port.as_ref())
            .map_or(0, |p| p.queues.len());
        let queue = if queue == NO_QUEUE {
            None
        } else if (queue as usize) < queues {
            Some(queue_id(cid, queue as u16))
        } else {
            return err(
                ControlErrorCode::InvalidArgument,
                "no such notification queue in the port",
            );
        };
        let config = SlotConfig {
            owner: OwnerId(cid),
            area: AreaId(area),
            base,
            len: layout.len(),
            mode: SlotMode::Endpoint,
            meta: None,
            queue,
            perms: SlotPerms::default(),
        };
        let spec = EndpointSpec {
            layout,
            report_discards: flags & endpoint_flag::REPORT_DISCARDS != 0,
        };
        let key = match random_key() {
            Ok(k) => k,
            Err(refusal) => return refusal,
        };
        let direct = flags & endpoint_flag::DANGER_DIRECT != 0;
        match self
            .delivery
            .iface
            .slots_mut()
            .create_endpoint(config, spec, key, direct)
        {
            Ok(id) => {
                self.delivery.reborn(id);
                if let Some(c) = self.clients.get_mut(cid) {
                    c.usage.slots += 1;
                }
                ok(Reply::Slot { slot: id.0, key })
            }
            Err(e) => slot_err(e),
        }
    }

    /// `OpenDirect`: after the checks of `Interface::check_direct` (and the ticket's
    /// incarnation), the slot's geometry and the descriptors a direct sender maps: the
    /// message area, the metadata area (not for fast slots), and the queue file and
    /// eventfd of the port the slot reports to (if it has a queue).
    ///
    /// The descriptors open whole files: the message and metadata areas the slot lies in
    /// (with any other slots or data the owner keeps there) and every notification queue
    /// of the owner's port, never the rest of the port. Any client of this engine may ask,
    /// the slot's owner included; being on this engine is what "same node" means.
    fn open_direct(&mut self, node: u32, incarnation: u32, slot: u32, key: u64) -> Answer {
        let me = self.delivery.iface.node();
        if node == me.0 && incarnation != 0 && incarnation != self.incarnation {
            return err(
                ControlErrorCode::WrongNode,
                "the ticket names an earlier incarnation of this node",
            );
        }
        let s = match self
            .delivery
            .iface
            .check_direct(hamlyn_wire::NodeId(node), SlotId(slot), key)
        {
            Ok(s) => s,
            Err(reason) => return direct_refusal(reason, self.delivery.is_tombstone(slot)),
        };
        let cfg = s.config;
        let endpoint = s.endpoint.map(|(spec, _)| spec.layout);
        let mode_code = match cfg.mode {
            SlotMode::Normal => mode::NORMAL,
            SlotMode::Fast => mode::FAST,
            SlotMode::Endpoint => mode::ENDPOINT,
            _ => {
                return err(
                    ControlErrorCode::NotDirect,
                    "paranoid slots are never direct",
                )
            }
        };
        let mut fds = Vec::with_capacity(4);
        let Some(area) = self.delivery.areas.get(cfg.area) else {
            return err(ControlErrorCode::NotFound, "the slot's area is gone");
        };
        match dup(area.mem.0.fd()) {
            Ok(fd) => fds.push(fd),
            Err(e) => return err(ControlErrorCode::Exhausted, e.to_string()),
        }
        let (meta_base, meta_count) = match cfg.meta {
            Some(m) => {
                let Some(meta) = self.delivery.areas.get(m.area) else {
                    return err(
                        ControlErrorCode::NotFound,
                        "the slot's metadata area is gone",
                    );
                };
                match dup(meta.mem.0.fd()) {
                    Ok(fd) => fds.push(fd),
                    Err(e) => return err(ControlErrorCode::Exhausted, e.to_string()),
                }
                (m.base, m.count)
            }
            // An endpoint's shape travels where a slot's entries would.
            None => endpoint.map_or((0, 0), |l| (u64::from(l.buf_size()), l.buffers())),
        };
        let (queue_offset, queue_cap) = match cfg.queue {
            Some(q) => {
                let (owner, index) = queue_parts(q);
                let Some(port) = self.clients.get_mut(owner).and_then(|c| c.port.as_ref()) else {
                    return err(ControlErrorCode::NotFound, "the slot's owner is gone");
                };
                let Some(layout) = port.layout.queues.get(index).copied() else {
                    return err(
                        ControlErrorCode::NotFound,
                        "no such queue in the owner's port",
                    );
                };
                for fd in [port.queue_region.fd(), port.eventfd.as_fd()] {
                    match dup(fd) {
                        Ok(fd) => fds.push(fd),
                        Err(e) => return err(ControlErrorCode::Exhausted, e.to_string()),
                    }
                }
                (layout.offset() as u64, layout.capacity())
            }
            None => (0, 0),
        };
        (
            Reply::Direct {
                mode: mode_code,
                base: cfg.base,
                len: cfg.len,
                meta_base,
                meta_count,
                queue_offset,
                queue_cap,
            },
            fds,
        )
    }

    fn open_terminus(&mut self, cid: u32, index: u16, priority: u8) -> Answer {
        let Some(port) = self.clients.get_mut(cid).and_then(|c| c.port.as_mut()) else {
            return err(ControlErrorCode::NotAttached, "attach first");
        };
        let Some(layout) = port.layout.termini.get(usize::from(index)).copied() else {
            return err(
                ControlErrorCode::InvalidArgument,
                "no such terminus in the port",
            );
        };
        let Some(term) = port.termini.get_mut(usize::from(index)) else {
            return err(
                ControlErrorCode::InvalidArgument,
                "no such terminus in the port",
            );
        };
        if term.ring.is_some() {
            return err(ControlErrorCode::Busy, "terminus already open");
        }
        match spsc::Consumer::attach(port.region.clone(), layout) {
            Ok(c) => term.ring = Some(c),
            Err(e) => return err(ControlErrorCode::Exhausted, e.to_string()),
        }
        term.level = crate::sched::level_of(priority);
        let level = term.level;
        self.hint_ports.opened(cid, level);
        self.sched.add((cid, index), priority);
        ok(Reply::Ok)
    }
}
