//! The server: a door for connections, call frames per client, procedures by name.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use hamlyn::{
    Area, Data, MetaArea, Node, Notification, NotificationKind, NotifyQueue, ReadArgs, Seed,
    SendHandle, SendOptions, Slot, SlotId, Status as SendStatus, Terminus, Ticket,
};

use crate::frame::{self, Status, FRAMES, FRAME_BYTES, REPLY_BYTES};
use crate::RpcError;

/// A procedure: arguments in, result (or an error's message) out; through its
/// [`Ctx`] it may read and write the caller's segment (call by reference).
pub type Procedure = Box<dyn FnMut(&[u8], &mut Ctx<'_>) -> Result<Vec<u8>, String> + Send>;

/// Bytes moved per remote read or write of a caller's segment.
const SCRATCH: usize = 64 * 1024;
/// How long one remote read or write of a segment may take.
const SEGMENT_WAIT: Duration = Duration::from_secs(30);

/// The server's own sending and receiving: its terminus, its queue (with what arrived
/// while a procedure waited for a segment), and a scratch slot for segment reads.
struct Io {
    terminus: Terminus,
    queue: NotifyQueue,
    backlog: VecDeque<Notification>,
    scratch: Area,
    scratch_slot: Slot,
    scratch_ticket: Ticket,
    _scratch_meta: MetaArea,
}

/// What a running procedure may use besides its arguments.
pub struct Ctx<'a> {
    io: &'a mut Io,
    segment: Option<Ticket>,
    /// The call (tag of every segment write, so the caller can count them).
    call: u64,
    /// Segment writes made.
    writes: u16,
}

impl std::fmt::Debug for Ctx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("segment", &self.segment.map(|t| t.len))
            .finish_non_exhaustive()
    }
}

impl Ctx<'_> {
    /// Bytes of the caller's segment, if the call named one (call by reference).
    pub fn segment_len(&self) -> Option<u64> {
        self.segment.map(|t| t.len)
    }

    fn segment(&self) -> Result<Ticket, String> {
        self.segment
            .ok_or_else(|| "the call named no segment".to_owned())
    }

    /// Reads `len` bytes at `offset` of the caller's segment (remote reads; the engine
    /// checks the caller's ticket: a forged or too short one is an error here).
    pub fn read(&mut self, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        let seg = self.segment()?;
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            let n = (len - out.len()).min(SCRATCH);
            let at = offset + out.len() as u64;
            let io = &mut *self.io;
            let h = io
                .terminus
                .read(&ReadArgs {
                    source: &seg,
                    offset: at,
                    len: n as u64,
                    reply: &io.scratch_ticket,
                    reply_offset: 0,
                })
                .map_err(|e| format!("segment read: {e}"))?;
            let want = h.request();
            let deadline = std::time::Instant::now() + SEGMENT_WAIT;
            loop {
                let s = h.status();
                if s.is_failed() {
                    return Err(format!("segment read: {s:?}"));
                }
                let now = std::time::Instant::now();
                if now >= deadline {
                    return Err("segment read: no answer".to_owned());
                }
                match io
                    .queue
                    .wait(Some((deadline - now).min(Duration::from_millis(20))))
                {
                    Ok(Some(note))
                        if note.kind == NotificationKind::ReadDone
                            && note.request == Some(want)
                            && note.slot == io.scratch_slot.id() =>
                    {
                        break
                    }
                    Ok(Some(other)) => io.backlog.push_back(other),
                    Ok(None) => {}
                    Err(e) => return Err(format!("segment read: {e}")),
                }
            }
            out.extend(
                io.scratch
                    .read_vec(0, n)
                    .map_err(|e| format!("segment read: {e}"))?,
            );
        }
        Ok(out)
    }

    /// Writes `bytes` at `offset` of the caller's segment (remote writes, no
    /// notification to the caller; the engine checks the ticket).
    pub fn write(&mut self, offset: u64, bytes: &[u8]) -> Result<(), String> {
        let seg = self.segment()?;
        for (i, chunk) in bytes.chunks(SCRATCH).enumerate() {
            let io = &mut *self.io;
            io.scratch
                .write(0, chunk)
                .map_err(|e| format!("segment write: {e}"))?;
            let span = [io.scratch.span(0, chunk.len() as u64)];
            // Each write notifies the caller, tagged with the call: the reply says how
            // many to count before the segment is whole (a reply may overtake them).
            // Only writes that went out count: one refused never notifies the caller,
            // which would otherwise wait for it until its timeout.
            let more = self
                .writes
                .checked_add(1)
                .ok_or_else(|| "more than 65,535 segment writes in one call".to_owned())?;
            let opts = SendOptions::new()
                .offset(offset + (i * SCRATCH) as u64)
                .tag(self.call);
            let h = io
                .terminus
                .send(&seg, &opts, Data::Gather(&span))
                .map_err(|e| format!("segment write: {e}"))?;
            match h.wait(Some(SEGMENT_WAIT)) {
                SendStatus::Sent => self.writes = more,
                s => return Err(format!("segment write: {s:?}")),
            }
        }
        Ok(())
    }
}

/// What a server has done and refused, for tests and statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerCounters {
    /// Clients connected.
    pub connected: u64,
    /// Calls whose procedure ran (successfully or not).
    pub calls: u64,
    /// Calls whose procedure returned an error.
    pub failed: u64,
    /// Calls naming no procedure.
    pub unknown_procedure: u64,
    /// Frames whose lengths did not fit.
    pub bad_frames: u64,
    /// Frames rewritten between their notification and the server's read.
    pub mismatched: u64,
    /// Clients whose replies could not be delivered: their frames were freed.
    pub clients_freed: u64,
    /// Reply tickets refused: too small for the replies or not granting writes (the
    /// knock is ignored), or refused by the node they name — a wrong key, a slot that is
    /// not theirs or not there (the client is forgotten). A forged reply ticket costs
    /// the server one reply, never a procedure's result sent somewhere else twice.
    pub bad_reply_tickets: u64,
}

/// One connected client: its frames and where its replies go.
struct Client {
    frames: Vec<Slot>,
    area: Area,
    _meta: MetaArea,
    reply: Ticket,
    /// The last reply sent, to learn whether the client is still there.
    last: Option<SendHandle>,
    /// The frames' seed is still published (until the first call).
    published: Option<String>,
}

/// An RPC server (see the crate docs).
pub struct RpcServer {
    node: Node,
    service: String,
    procedures: Vec<Procedure>,
    /// Cluster-wide procedure number (its active-message handler id) → index.
    numbers: HashMap<u32, usize>,
    io: Io,
    door: Slot,
    _door_mem: (Area, MetaArea),
    clients: HashMap<u64, Client>,
    /// Frame slot → (client, frame index).
    frames: HashMap<SlotId, (u64, usize)>,
    protect: bool,
    counters: ServerCounters,
    /// When clients were last looked for in the registry.
    probed: std::time::Instant,
}

/// How often the server looks whether its clients are still there: a client keeps its
/// name published while it is connected, and the registry drops it when it disconnects.
const PROBE_EVERY: Duration = Duration::from_millis(500);

impl std::fmt::Debug for RpcServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcServer")
            .field("service", &self.service)
            .field("clients", &self.clients.len())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

/// The registry name of a service.
pub(crate) fn service_name(service: &str) -> String {
    format!("rpc/{service}")
}

/// The active-message handler name under which a procedure is numbered cluster-wide.
pub(crate) fn procedure_name(service: &str, procedure: &str) -> String {
    format!("rpc/{service}/{procedure}")
}

/// The argument-layout fingerprint procedures are registered with: bytes in, bytes out
/// (`hamlyn_am::fingerprint("rpc: bytes -> bytes")`, checked by a test).
pub const PROCEDURE_FINGERPRINT: u64 = 0x5d4f_b0eb_73fa_97f3;

/// The registry name under which a connecting client names its reply slot.
pub(crate) fn client_name(service: &str, key: u64) -> String {
    format!("rpc/{service}/client/{key:016x}")
}

/// The registry name under which the server gives a client its frames.
pub(crate) fn frames_name(service: &str, key: u64) -> String {
    format!("rpc/{service}/frames/{key:016x}")
}

impl RpcServer {
    /// Serves `procedures` (name, procedure) as `service` through `node` (a connection
    /// the server keeps for itself: its first queue and terminus are the server's).
    ///
    /// Each procedure is registered in the cluster's active-message handler table as
    /// `rpc/SERVICE/NAME` (seed 003's registry), whose dense cluster-wide id is the number
    /// calls carry; the registrations leave with `node`'s connection. A name already
    /// live with another layout, or too long for the table, is an error here.
    pub fn publish(
        node: Node,
        service: &str,
        procedures: Vec<(String, Procedure)>,
    ) -> Result<RpcServer, RpcError> {
        let area = node.area(4096)?;
        let meta = node.meta_area(4)?;
        let door = node
            .slot(&area)
            .range(0..64)
            .meta(&meta)
            .queue(0)
            .create()?;
        let (names, procedures): (Vec<String>, Vec<Procedure>) = procedures.into_iter().unzip();
        let registered: Vec<(String, u64)> = names
            .iter()
            .map(|n| (procedure_name(service, n), PROCEDURE_FINGERPRINT))
            .collect();
        for batch in registered.chunks(hamlyn::MAX_AM_HANDLERS_PER_REQUEST) {
            node.am_register(batch)?;
        }
        let numbers = procedure_numbers(&node, service, &names)?
            .into_iter()
            .enumerate()
            .map(|(i, id)| (id, i))
            .collect();
        let scratch = node.area(SCRATCH as u64)?;
        let scratch_meta = node.meta_area(1)?;
        let scratch_slot = node.slot(&scratch).meta(&scratch_meta).queue(0).create()?;
        let io = Io {
            terminus: node.terminus(0)?,
            queue: node.queue(0)?,
            backlog: VecDeque::new(),
            scratch_ticket: scratch_slot.ticket_all()?,
            scratch,
            scratch_slot,
            _scratch_meta: scratch_meta,
        };
        // The service's name is published last: a client that finds it must find its
        // procedures in the handler table too (published first, a client could look
        // between the two and be told the service has no such procedure).
        let mut seed = Seed::single(door.ticket_all()?);
        seed.data = names.join("\n").into_bytes();
        node.publish(&service_name(service), &seed)?;
        Ok(RpcServer {
            io,
            node,
            service: service.to_owned(),
            procedures,
            numbers,
            door,
            _door_mem: (area, meta),
            clients: HashMap::new(),
            frames: HashMap::new(),
            protect: true,
            counters: ServerCounters::default(),
            probed: std::time::Instant::now(),
        })
    }

    /// Whether frames are write-inhibited while their procedure runs (the paper's
    /// protection of the server; on by default). Off saves two control calls per call.
    pub fn set_protect_frames(&mut self, on: bool) {
        self.protect = on;
    }

    /// What the server has done so far.
    pub fn counters(&self) -> ServerCounters {
        self.counters
    }

    /// Clients connected now.
    pub fn clients(&self) -> usize {
        self.clients.len()
    }

    /// Handles what arrives within `timeout`: a connection, or a call. Returns whether
    /// anything was handled.
    pub fn serve_once(&mut self, timeout: Option<Duration>) -> Result<bool, RpcError> {
        self.free_lost_clients();
        let n = match self.io.backlog.pop_front() {
            Some(n) => n,
            None => match self.io.queue.wait(timeout)? {
                Some(n) => n,
                None => return Ok(false),
            },
        };
        if n.slot == self.door.id() {
            self.connect(n.word)?;
            return Ok(true);
        }
        if let Some(&(client, index)) = self.frames.get(&n.slot) {
            self.call(client, index, n.word)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Serves until `stop` returns true (checked between arrivals, at least every
    /// tenth of a second). Clients that disconnect are noticed within a second.
    pub fn serve_until(&mut self, mut stop: impl FnMut() -> bool) -> Result<(), RpcError> {
        while !stop() {
            self.serve_once(Some(Duration::from_millis(100)))?;
        }
        Ok(())
    }

    /// A client knocked with its key: its reply slot is published under that key; give
    /// it its frames.
    fn connect(&mut self, key: u64) -> Result<(), RpcError> {
        if self.clients.contains_key(&key) {
            return Ok(());
        }
        let Ok(seed) = self.node.lookup(&client_name(&self.service, key)) else {
            // A knock without a published reply slot: ignored (and harmless).
            return Ok(());
        };
        let Some(&reply) = seed.tickets.first() else {
            return Ok(());
        };
        if reply.len < (FRAMES * REPLY_BYTES) as u64
            || !reply.flags.contains(hamlyn::TicketFlags::WRITE)
        {
            self.counters.bad_reply_tickets += 1;
            return Ok(());
        }
        // Frames, then a staging copy of each reply, in one area.
        let area = self
            .node
            .area((FRAMES * (FRAME_BYTES + REPLY_BYTES)) as u64)?;
        let meta = self.node.meta_area(FRAMES as u32)?;
        let mut frames = Vec::with_capacity(FRAMES);
        let mut tickets = Vec::with_capacity(FRAMES);
        for i in 0..FRAMES {
            let at = (i * FRAME_BYTES) as u64;
            let slot = self
                .node
                .slot(&area)
                .range(at..at + FRAME_BYTES as u64)
                .meta(&meta)
                .queue(0)
                .create()?;
            tickets.push(slot.ticket(0..FRAME_BYTES as u64, i as u32..i as u32 + 1)?);
            self.frames.insert(slot.id(), (key, i));
            frames.push(slot);
        }
        let name = frames_name(&self.service, key);
        self.node.publish(
            &name,
            &Seed {
                protocol: 0,
                tickets,
                data: Vec::new(),
            },
        )?;
        self.clients.insert(
            key,
            Client {
                frames,
                area,
                _meta: meta,
                reply,
                last: None,
                published: Some(name),
            },
        );
        self.counters.connected += 1;
        Ok(())
    }

    /// A call arrived in frame `index` of `client`, announced with id `call`.
    fn call(&mut self, client: u64, index: usize, call: u64) -> Result<(), RpcError> {
        let Some(c) = self.clients.get_mut(&client) else {
            return Ok(());
        };
        if let Some(name) = c.published.take() {
            // The client has its frames: the name can go.
            let _ = self.node.unpublish(&name);
        }
        let frame = &c.frames[index];
        if self.protect {
            frame.inhibit(true)?;
        }
        let bytes = c.area.read_vec((index * FRAME_BYTES) as u64, FRAME_BYTES)?;
        let mut writes = 0;
        let (status, body) = match frame::decode_call(&bytes) {
            Err(s) => {
                self.counters.bad_frames += 1;
                (s, Vec::new())
            }
            Ok(f) if f.call != call => {
                self.counters.mismatched += 1;
                (Status::Mismatch, Vec::new())
            }
            Ok(f) => match self
                .numbers
                .get(&f.procedure)
                .and_then(|&i| self.procedures.get_mut(i))
            {
                None => {
                    self.counters.unknown_procedure += 1;
                    (Status::UnknownProcedure, Vec::new())
                }
                Some(p) => {
                    self.counters.calls += 1;
                    let mut ctx = Ctx {
                        io: &mut self.io,
                        segment: f.segment.and_then(|b| Ticket::from_bytes(b).ok()),
                        call,
                        writes: 0,
                    };
                    let result = p(f.args, &mut ctx);
                    writes = ctx.writes;
                    match result {
                        Ok(r) => (Status::Ok, r),
                        Err(msg) => {
                            self.counters.failed += 1;
                            (Status::Failed, msg.into_bytes())
                        }
                    }
                }
            },
        };
        // The procedure is done with the frame: lift the inhibition before the reply
        // goes, so the client's next call on this frame (which may follow the reply at
        // once) is never refused.
        if self.protect {
            c.frames[index].inhibit(false)?;
        }
        let reply = frame::encode_reply_after_writes(status, call, &body, writes);
        let at = (FRAMES * FRAME_BYTES + index * REPLY_BYTES) as u64;
        c.area.write(at, &reply)?;
        let span = [c.area.span(at, reply.len() as u64)];
        let opts = SendOptions::new()
            .tag(call)
            .offset((index * REPLY_BYTES) as u64);
        let sent = self.io.terminus.send(&c.reply, &opts, Data::Gather(&span));
        match sent {
            Ok(h) => c.last = Some(h),
            // A reply ticket that no longer works: the client is gone.
            Err(_) => {
                self.forget(client);
            }
        }
        Ok(())
    }

    /// Frees the frames of clients that are gone: their last reply failed, or (looked
    /// for every [`PROBE_EVERY`]) their name left the registry with them.
    fn free_lost_clients(&mut self) {
        let mut lost = Vec::new();
        for (k, c) in &self.clients {
            match c.last.as_ref().map(SendHandle::status) {
                // The client's node is gone, or the client with it.
                Some(SendStatus::Failed(hamlyn::RejectReason::PeerDown)) => lost.push(*k),
                // Its node refused the reply: the ticket was never good (forged), or
                // the client destroyed its slot.
                Some(SendStatus::Failed(_)) => {
                    self.counters.bad_reply_tickets += 1;
                    lost.push(*k);
                }
                _ => {}
            }
        }
        if self.probed.elapsed() >= PROBE_EVERY {
            self.probed = std::time::Instant::now();
            for &k in self.clients.keys() {
                if let Err(hamlyn::Error::Refused {
                    code: Some(hamlyn::ControlErrorCode::NotFound),
                    ..
                }) = self.node.lookup(&client_name(&self.service, k))
                {
                    lost.push(k);
                }
            }
        }
        for k in lost {
            self.forget(k);
        }
    }

    fn forget(&mut self, client: u64) {
        if let Some(c) = self.clients.remove(&client) {
            for f in &c.frames {
                self.frames.remove(&f.id());
            }
            if let Some(name) = &c.published {
                let _ = self.node.unpublish(name);
            }
            self.counters.clients_freed += 1;
        }
    }
}

impl Drop for RpcServer {
    /// Withdraws the service's name before anything else goes. The fields drop in
    /// declaration order, the door and the frames before the connection whose Detach
    /// takes the name with it: in between, a client connecting found the name, knocked
    /// on a dead door and waited its whole timeout. With the name gone first, it is told
    /// there is no such service.
    fn drop(&mut self) {
        // Best effort: an engine that cannot answer has lost the connection, and the
        // name goes with it anyway.
        let _ = self.node.unpublish(&service_name(&self.service));
    }
}

/// The cluster-wide numbers of `service`'s procedures `names`, in that order, from the
/// active-message handler table (each must be there, live, with the procedures' layout).
pub(crate) fn procedure_numbers(
    node: &Node,
    service: &str,
    names: &[String],
) -> Result<Vec<u32>, RpcError> {
    let (_, table) = node.am_table()?;
    let by_name: HashMap<&str, &hamlyn::AmHandlerEntry> =
        table.iter().map(|e| (e.name.as_str(), e)).collect();
    names
        .iter()
        .map(|n| match by_name.get(procedure_name(service, n).as_str()) {
            Some(e) if e.live && e.fingerprint == PROCEDURE_FINGERPRINT => Ok(e.id),
            _ => Err(RpcError::NoProcedure(n.clone())),
        })
        .collect()
}
