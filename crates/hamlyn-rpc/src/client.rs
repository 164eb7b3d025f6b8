//! The client stub: connect by service name, call by procedure name.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use hamlyn::{
    Area, Data, MetaArea, Node, NotifyQueue, Seed, SendHandle, SendOptions, Slot, Terminus, Ticket,
};

use crate::frame::{self, Status, FRAMES, FRAME_BYTES, REPLY_BYTES};
use crate::server::{client_name, frames_name, procedure_numbers, service_name};
use crate::RpcError;

/// A call started with [`RpcClient::start`], to [`RpcClient::finish`].
#[derive(Debug)]
#[must_use = "a started call holds a frame until it is finished"]
pub struct Call {
    id: u64,
    frame: usize,
    sent: SendHandle,
}

/// A part of the client's memory a call by reference names: the server reads and writes
/// it while the procedure runs ([`RpcClient::segment`], [`RpcClient::call_by_ref`]).
pub struct Segment {
    /// The slot the ticket names (kept as long as the segment).
    _slot: Slot,
    ticket: Ticket,
    _meta: MetaArea,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("len", &self.ticket.len)
            .finish_non_exhaustive()
    }
}

/// A connection to one RPC service (see the crate docs).
pub struct RpcClient {
    node: Node,
    names: Vec<String>,
    /// Each name's cluster-wide number (its active-message handler id), in order.
    numbers: Vec<u32>,
    frames: Vec<Ticket>,
    busy: [bool; FRAMES],
    next: u64,
    queue: NotifyQueue,
    terminus: Terminus,
    reply: Slot,
    replies: Area,
    _meta: MetaArea,
    /// Frames' staging copies for arguments too long to send inline.
    staging: Area,
    /// Replies that arrived for calls not yet finished.
    arrived: HashSet<u64>,
    /// Segment writes that arrived, by call (counted for outstanding calls only, so a
    /// server cannot grow it).
    written: HashMap<u64, u32>,
    /// Calls started and not finished.
    outstanding: HashSet<u64>,
    /// Calls that timed out, by id, with their frame: the server may still be running
    /// the procedure (its frame write-inhibited, its reply on the way), so the frame
    /// stays busy until the late reply arrives (bounded: at most [`FRAMES`] entries).
    late: HashMap<u64, usize>,
    timeout: Duration,
    /// The service's registry name: while it is there, the server is.
    service: String,
}

/// How often a waiting call looks whether the server's name is still published.
const PROBE_EVERY: Duration = Duration::from_millis(500);

impl std::fmt::Debug for RpcClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcClient")
            .field("procedures", &self.names)
            .finish_non_exhaustive()
    }
}

impl RpcClient {
    /// Connects to `service` through `node` (a connection the client keeps for itself),
    /// waiting at most `timeout` for the server to give it frames. A service that is not
    /// published, or whose door refuses the client's knock (its server is gone), is
    /// [`RpcError::NoService`].
    pub fn connect(node: Node, service: &str, timeout: Duration) -> Result<RpcClient, RpcError> {
        let deadline = Instant::now() + timeout;
        let door = node
            .lookup(&service_name(service))
            .map_err(|_| RpcError::NoService(service.to_owned()))?;
        let names: Vec<String> = String::from_utf8(door.data.clone())
            .map_err(|_| RpcError::NoService(service.to_owned()))?
            .split('\n')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let numbers = procedure_numbers(&node, service, &names)?;
        let door = *door
            .tickets
            .first()
            .ok_or_else(|| RpcError::NoService(service.to_owned()))?;
        let replies = node.area((FRAMES * REPLY_BYTES) as u64)?;
        let meta = node.meta_area(4)?;
        let reply = node.slot(&replies).meta(&meta).queue(0).create()?;
        let staging = node.area((FRAMES * FRAME_BYTES) as u64)?;
        let key = reply.key() ^ (u64::from(node.id().0) << 48) ^ u64::from(node.client_id());
        let mine = client_name(service, key);
        node.publish(&mine, &Seed::single(reply.ticket_all()?))?;
        let mut terminus = node.terminus(0)?;
        let knock = terminus.send(&door, &SendOptions::new().tag(key), Data::Inline(b"!"))?;
        let frames = loop {
            // A refused knock (the door is gone: the server went away after we found its
            // name) never brings frames: say so now rather than at the deadline.
            if knock.status().is_failed() {
                return Err(RpcError::NoService(service.to_owned()));
            }
            match node.lookup(&frames_name(service, key)) {
                Ok(seed) if seed.tickets.len() == FRAMES => break seed.tickets,
                Ok(_) => return Err(RpcError::Malformed("frames seed")),
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
                Err(_) => return Err(RpcError::Timeout(timeout)),
            }
        };
        // The name stays published while the client is connected: the server looks for
        // it to learn that the client is gone (the registry drops it then).
        Ok(RpcClient {
            queue: node.queue(0)?,
            node,
            names,
            numbers,
            frames,
            busy: [false; FRAMES],
            next: 1,
            terminus,
            reply,
            replies,
            _meta: meta,
            staging,
            arrived: HashSet::new(),
            written: HashMap::new(),
            outstanding: HashSet::new(),
            late: HashMap::new(),
            timeout: Duration::from_secs(30),
            service: service_name(service),
        })
    }

    /// How long a call waits for its reply (30 s unless set).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The procedures the service offers.
    pub fn procedures(&self) -> &[String] {
        &self.names
    }

    /// The client's connection.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// Calls `procedure` with `args` and waits for its result.
    pub fn call(&mut self, procedure: &str, args: &[u8]) -> Result<Vec<u8>, RpcError> {
        let c = self.start(procedure, args)?;
        self.finish(c)
    }

    /// Starts a call: writes its frame and activates the server. At most [`FRAMES`]
    /// calls are outstanding ([`RpcError::Busy`]).
    pub fn start(&mut self, procedure: &str, args: &[u8]) -> Result<Call, RpcError> {
        let p = self.number(procedure)?;
        self.start_number(p, args)
    }

    /// A procedure's cluster-wide number (its id in the active-message handler table,
    /// where the server registered it as `rpc/SERVICE/NAME`).
    pub fn number(&self, procedure: &str) -> Result<u32, RpcError> {
        self.names
            .iter()
            .position(|n| n == procedure)
            .map(|i| self.numbers[i])
            .ok_or_else(|| RpcError::NoProcedure(procedure.to_owned()))
    }

    /// [`RpcClient::start`] by procedure number ([`RpcClient::number`]); a number the
    /// server does not know is refused there.
    pub fn start_number(&mut self, procedure: u32, args: &[u8]) -> Result<Call, RpcError> {
        self.start_with(procedure, args, None)
    }

    /// Calls `procedure` by reference: besides `args`, the server may read and write
    /// `segment`'s range of this client's memory (its ticket travels in the frame; give
    /// it read and write permission) while the procedure runs.
    pub fn call_by_ref(
        &mut self,
        procedure: &str,
        args: &[u8],
        segment: &Segment,
    ) -> Result<Vec<u8>, RpcError> {
        let p = self.number(procedure)?;
        let c = self.start_with(p, args, Some(&segment.ticket))?;
        self.finish(c)
    }

    /// Makes `area` (an area of this client's connection, [`RpcClient::node`]) a segment
    /// calls by reference can name: the server may read and write all of it while such a
    /// call runs, and the call returns only once every write has landed.
    pub fn segment(&self, area: &Area) -> Result<Segment, RpcError> {
        let meta = self.node.meta_area(1)?;
        let slot = self
            .node
            .slot(area)
            .meta(&meta)
            .queue(0)
            .perms(hamlyn::SlotPerms {
                write: true,
                read: true,
                atomic: false,
            })
            .create()?;
        Ok(Segment {
            ticket: slot.ticket_all()?,
            _slot: slot,
            _meta: meta,
        })
    }

    /// A call by reference with a segment ticket of the caller's choosing (a test of what
    /// the server refuses: a stub never needs it). The call does not wait for segment
    /// writes to land.
    pub fn call_by_ticket(
        &mut self,
        procedure: &str,
        args: &[u8],
        segment: &Ticket,
    ) -> Result<Vec<u8>, RpcError> {
        let p = self.number(procedure)?;
        let c = self.start_with(p, args, Some(segment))?;
        self.finish(c)
    }

    fn start_with(
        &mut self,
        procedure: u32,
        args: &[u8],
        segment: Option<&Ticket>,
    ) -> Result<Call, RpcError> {
        let frame = self.busy.iter().position(|b| !b).ok_or(RpcError::Busy)?;
        let id = self.next;
        self.next += 1;
        let ticket = segment.map(Ticket::to_bytes);
        let bytes = frame::encode_call_by_ref(procedure, id, args, ticket.as_ref()).ok_or(
            RpcError::TooLong {
                what: "arguments",
                len: args.len(),
                max: frame::MAX_ARGS,
            },
        )?;
        let opts = SendOptions::new().tag(id);
        let sent = if bytes.len() <= hamlyn::MAX_INLINE {
            self.terminus
                .send(&self.frames[frame], &opts, Data::Inline(&bytes))?
        } else {
            // The staging copy of this frame is free: its previous call has finished.
            let at = (frame * FRAME_BYTES) as u64;
            self.staging.write(at, &bytes)?;
            let span = [self.staging.span(at, bytes.len() as u64)];
            self.terminus
                .send(&self.frames[frame], &opts, Data::Gather(&span))?
        };
        self.busy[frame] = true;
        self.outstanding.insert(id);
        Ok(Call { id, frame, sent })
    }

    /// Waits for a started call's result. A call that timed out keeps its frame until
    /// its late reply arrives (noticed while later calls wait): the server may still be
    /// running it.
    pub fn finish(&mut self, call: Call) -> Result<Vec<u8>, RpcError> {
        let result = self.wait_reply(&call);
        if matches!(result, Err(RpcError::Timeout(_))) {
            // Not reused until its reply comes in (`note_reply`): a call written into it
            // meanwhile would find it write-inhibited, or get this call's reply.
            self.late.insert(call.id, call.frame);
        } else {
            self.busy[call.frame] = false;
        }
        self.outstanding.remove(&call.id);
        self.written.remove(&call.id);
        self.arrived.remove(&call.id);
        result
    }

    fn wait_reply(&mut self, call: &Call) -> Result<Vec<u8>, RpcError> {
        let deadline = Instant::now() + self.timeout;
        let mut probed = Instant::now();
        while !self.arrived.remove(&call.id) {
            let now = Instant::now();
            if now >= deadline {
                return Err(RpcError::Timeout(self.timeout));
            }
            let slice = (deadline - now).min(Duration::from_millis(20));
            match self.queue.wait(Some(slice))? {
                Some(n) if n.slot == self.reply.id() => self.note_reply(&n),
                Some(n) => self.note_segment_write(&n),
                None => {
                    let s = call.sent.status();
                    if s.is_failed() {
                        return Err(RpcError::ServerGone(s));
                    }
                    if probed.elapsed() >= PROBE_EVERY {
                        probed = Instant::now();
                        if let Err(hamlyn::Error::Refused {
                            code: Some(hamlyn::ControlErrorCode::NotFound),
                            ..
                        }) = self.node.lookup(&self.service)
                        {
                            return Err(RpcError::ServerGone(s));
                        }
                    }
                }
            }
        }
        let bytes = self
            .replies
            .read_vec((call.frame * REPLY_BYTES) as u64, REPLY_BYTES)?;
        let r = frame::decode_reply(&bytes).ok_or(RpcError::Malformed("reply"))?;
        if r.call != call.id {
            return Err(RpcError::Malformed("reply for another call"));
        }
        // The procedure's writes into our segment may still be on their way (over TCP a
        // reply can overtake them): count them in before the caller looks.
        let writes = u32::from(r.writes);
        while self.written.get(&call.id).copied().unwrap_or(0) < writes {
            let now = Instant::now();
            if now >= deadline {
                return Err(RpcError::Timeout(self.timeout));
            }
            if let Some(n) = self.queue.wait(Some(deadline - now))? {
                if n.slot == self.reply.id() {
                    self.note_reply(&n);
                } else {
                    self.note_segment_write(&n);
                }
            }
        }
        self.written.remove(&call.id);
        match r.status {
            Status::Ok => Ok(r.body.to_vec()),
            Status::Failed => Err(RpcError::Procedure(
                String::from_utf8_lossy(r.body).into_owned(),
            )),
            other => Err(RpcError::Refused(other)),
        }
    }

    /// A reply arrived: kept only for a call still outstanding, so a server cannot grow
    /// the set with made-up call ids.
    fn note_reply(&mut self, n: &hamlyn::Notification) {
        if let Some(frame) = self.late.remove(&n.word) {
            self.busy[frame] = false;
        }
        if self.outstanding.contains(&n.word) {
            self.arrived.insert(n.word);
        }
    }

    /// A write into one of our segments arrived (tagged with its call).
    fn note_segment_write(&mut self, n: &hamlyn::Notification) {
        if n.kind == hamlyn::NotificationKind::Message && self.outstanding.contains(&n.word) {
            *self.written.entry(n.word).or_insert(0) += 1;
        }
    }

    /// The ticket of call frame `i` (to show what the server refuses while a call runs;
    /// a stub never needs it).
    pub fn frame_ticket(&self, i: usize) -> Option<Ticket> {
        self.frames.get(i).copied()
    }

    /// The terminus calls are sent on.
    pub fn terminus(&mut self) -> &mut Terminus {
        &mut self.terminus
    }
}
