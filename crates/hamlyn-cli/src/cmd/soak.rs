//! `hamlyn soak recv NAME` / `hamlyn soak send NAME`: the two ends of a long-running,
//! checksummed stream used by `bench/soak.sh` (issue 16: "one hour of mixed traffic
//! between two network-namespace nodes with random link cuts and client kills, reporting
//! bytes sent, delivered, failed and lost").
//!
//! The receiver publishes two tickets under NAME: an inbox of [`ENTRIES`] rooms of
//! [`ROOM`] bytes (message `seq` lands in room `seq % ENTRIES`, metadata entry the same),
//! and a read-only array of [`ENTRIES`] words, `checked[room]` = the last `seq` whose
//! bytes it verified there. The content of message `seq` is a function of `seq` alone, so
//! the receiver verifies every byte of what arrived, and a message in the wrong room, or
//! torn, is counted as corrupt, not delivered.
//!
//! The sender never reuses a room until the message it put there is *resolved*: either the
//! receiver verified it (it reads `checked` with a remote read — **delivered**), or its
//! handle ended `Failed` (**failed**). A message whose handle said `Sent` and that is
//! neither verified nor failed after [`RESOLVE_BOUND`] is **lost**: reported sent and
//! missing, what must never happen. Both ends write their counts, once a second, to a
//! file as one JSON object per line (`--out`), which the script adds up.
//!
//! A sender may be killed at any time and started again with a new `--instance`: its
//! sequence numbers start at `instance << 40`, and messages it had not resolved when it
//! died are neither counted sent nor lost (nobody is left to tell), only what the
//! receiver makes of them.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use hamlyn::{
    Area, Data, Node, NodeOptions, NotificationKind, NotifyQueue, ReadArgs, SendError, SendHandle,
    SendOptions, SlotPerms, Status, Terminus, Ticket,
};
use hamlyn_wire::Seed;

use crate::socket::{DEFAULT_SOCKET, SOCKET_ENV};

/// Rooms in the inbox (and metadata entries: one message per room at a time).
pub const ENTRIES: u64 = 64;
/// Bytes of a room: the largest message.
pub const ROOM: u64 = 16 << 10;
/// How long a message reported sent may stay neither verified nor failed before it is
/// counted lost: longer than any link cut the script makes plus the peer timeout.
pub const RESOLVE_BOUND: Duration = Duration::from_secs(60);

/// `hamlyn soak` arguments.
#[derive(Debug, Args)]
pub struct SoakArgs {
    /// Which end.
    #[command(subcommand)]
    pub end: SoakEnd,
    /// The local engine's control socket.
    #[arg(long, global = true, value_name = "PATH", env = SOCKET_ENV, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Where the counts go, one JSON object per line, once a second.
    #[arg(long, global = true, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Stop after this many seconds.
    #[arg(long, global = true, value_name = "S", default_value_t = 60)]
    pub seconds: u64,
}

/// An end of the stream.
#[derive(Debug, Subcommand)]
pub enum SoakEnd {
    /// Receive on NAME (publish its tickets), verify every message.
    Recv {
        /// The stream's name in the registry.
        name: String,
    },
    /// Send to the receiver published as NAME.
    Send {
        /// The stream's name in the registry.
        name: String,
        /// This sender's instance (a restarted sender takes the next): sequence numbers
        /// start at `instance << 40`.
        #[arg(long, default_value_t = 0)]
        instance: u64,
    },
}

/// Why the soak stopped early.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SoakError {
    /// The engine refused something, or went away.
    #[error(transparent)]
    Node(#[from] hamlyn::Error),
    /// A seed could not be made or read.
    #[error("seed: {0}")]
    Seed(#[from] hamlyn_wire::WireError),
    /// The counts file could not be written.
    #[error("counts file: {0}")]
    Out(#[from] std::io::Error),
    /// The receiver's names never appeared in the registry.
    #[error("no receiver published as {0}")]
    NoReceiver(String),
}

/// Length of message `seq` (1..=ROOM bytes).
fn len(seq: u64) -> u64 {
    1 + (seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) % ROOM
}

/// Byte `j` of message `seq`.
fn byte(seq: u64, j: u64) -> u8 {
    let x = seq.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ j.wrapping_mul(0x9E37_79B9);
    (x >> 29) as u8
}

fn fill(seq: u64, buf: &mut Vec<u8>) {
    buf.clear();
    buf.extend((0..len(seq)).map(|j| byte(seq, j)));
}

/// Runs one end.
pub fn run(args: SoakArgs) -> Result<(), SoakError> {
    let node = Node::connect_with(
        &args.socket,
        NodeOptions {
            termini: 1,
            queues: 1,
            queue_cap: 256,
            ..NodeOptions::default()
        },
    )?;
    let until = Instant::now() + Duration::from_secs(args.seconds);
    let mut out = match &args.out {
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)?,
        ),
        None => None,
    };
    let mut report = |line: String| -> Result<(), SoakError> {
        if let Some(f) = out.as_mut() {
            writeln!(f, "{line}")?;
        } else {
            println!("{line}");
        }
        Ok(())
    };
    match args.end {
        SoakEnd::Recv { name } => receive(&node, &name, until, &mut report),
        SoakEnd::Send { name, instance } => send(&node, &name, instance, until, &mut report),
    }
}

fn receive(
    node: &Node,
    name: &str,
    until: Instant,
    report: &mut dyn FnMut(String) -> Result<(), SoakError>,
) -> Result<(), SoakError> {
    let inbox = node.area(ENTRIES * ROOM)?;
    let meta = node.meta_area(ENTRIES as u32)?;
    let slot = node.slot(&inbox).meta(&meta).queue(0).create()?;
    let checked = node.area(ENTRIES * 8)?;
    let checked_meta = node.meta_area(1)?;
    let checked_slot = node
        .slot(&checked)
        .meta(&checked_meta)
        .perms(SlotPerms {
            write: false,
            read: true,
            atomic: false,
        })
        .create()?;
    node.publish(
        &format!("{name}.inbox"),
        &Seed::single(slot.ticket(0..ENTRIES * ROOM, 0..ENTRIES as u32)?),
    )?;
    node.publish(
        &format!("{name}.checked"),
        &Seed::single(checked_slot.ticket_all()?),
    )?;
    let mut q = node.queue(0)?;
    let (mut delivered, mut bytes, mut corrupt, mut broken, mut other) = (0u64, 0u64, 0u64, 0, 0);
    let mut got = Vec::new();
    let mut want = Vec::new();
    let mut last_report = Instant::now();
    let line = |delivered, bytes, corrupt, broken, other, fin: bool| {
        format!(
            "{{\"end\":\"recv\",\"delivered\":{delivered},\"bytes\":{bytes},\"corrupt\":{corrupt},\"broken\":{broken},\"other\":{other}{}}}",
            if fin { ",\"final\":true" } else { "" }
        )
    };
    while Instant::now() < until {
        if let Some(n) = q.wait(Some(Duration::from_millis(100)))? {
            match n.kind {
                NotificationKind::Message => {
                    let seq = n.word;
                    let room = seq % ENTRIES;
                    fill(seq, &mut want);
                    got.resize(want.len(), 0);
                    let right_place = n.meta_index == Some(room as u32);
                    let read = inbox.read(room * ROOM, &mut got).is_ok();
                    if right_place && read && got == want && u64::from(n.len) == len(seq) {
                        delivered += 1;
                        bytes += len(seq);
                        checked.write(room * 8, &seq.to_le_bytes())?;
                    } else {
                        corrupt += 1;
                    }
                }
                NotificationKind::PeerDown => broken += 1,
                _ => other += 1,
            }
        }
        if last_report.elapsed() >= Duration::from_secs(1) {
            last_report = Instant::now();
            report(line(delivered, bytes, corrupt, broken, other, false))?;
        }
    }
    report(line(delivered, bytes, corrupt, broken, other, true))
}

/// What the sender knows of the receiver.
struct Far {
    inbox: Ticket,
    checked: Ticket,
}

fn lookup(node: &Node, name: &str, until: Instant) -> Result<Far, SoakError> {
    loop {
        let found = node
            .lookup(&format!("{name}.inbox"))
            .and_then(|i| Ok((i, node.lookup(&format!("{name}.checked"))?)));
        match found {
            Ok((inbox, checked)) => {
                let first = |s: Seed| s.tickets.first().copied();
                if let (Some(inbox), Some(checked)) = (first(inbox), first(checked)) {
                    return Ok(Far { inbox, checked });
                }
            }
            Err(_) if Instant::now() < until => {}
            Err(_) => return Err(SoakError::NoReceiver(name.to_owned())),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The sender's view of the receiver's `checked` array, refreshed by remote reads.
struct Checked {
    area: Area,
    reply: Ticket,
    _slot: hamlyn::Slot,
    last: Instant,
    words: [u64; ENTRIES as usize],
}

impl Checked {
    fn new(node: &Node) -> Result<Checked, SoakError> {
        let area = node.area(ENTRIES * 8)?;
        let meta = node.meta_area(1)?;
        let slot = node.slot(&area).meta(&meta).queue(0).create()?;
        let reply = slot.ticket_all()?;
        Ok(Checked {
            area,
            reply,
            _slot: slot,
            last: Instant::now() - Duration::from_secs(1),
            words: [u64::MAX; ENTRIES as usize],
        })
    }

    /// Reads the receiver's array again (at most every millisecond); a read that fails or
    /// is not answered within a second leaves the old view.
    fn refresh(&mut self, t: &mut Terminus, q: &mut NotifyQueue, far: &Far) {
        if self.last.elapsed() < Duration::from_millis(1) {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.last = Instant::now();
        let Ok(h) = t.read(&ReadArgs {
            source: &far.checked,
            offset: 0,
            len: ENTRIES * 8,
            reply: &self.reply,
            reply_offset: 0,
        }) else {
            return;
        };
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            match q.wait(Some(Duration::from_millis(50))) {
                Ok(Some(n)) if n.request == Some(h.request()) => {
                    let mut bytes = [0u8; (ENTRIES * 8) as usize];
                    if self.area.read(0, &mut bytes).is_ok() {
                        for (w, b) in self.words.iter_mut().zip(bytes.chunks_exact(8)) {
                            *w = u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
                        }
                    }
                    return;
                }
                Ok(_) => {}
                Err(_) => return,
            }
            if matches!(h.status(), Status::Failed(_)) {
                return;
            }
        }
    }
}

/// A message sent and not resolved yet.
struct Pending {
    seq: u64,
    handle: SendHandle,
    since: Instant,
}

/// A sender's counts. Of the messages `sent` (their handles said `Sent`), each ends
/// `delivered`, `failed` or `lost`, or is still unresolved when the sender stops (or is
/// killed). `failed_at_once`: sends whose handle ended `Failed` without saying `Sent`
/// (the peer was known down); `refused`: sends the library refused (stale tickets).
#[derive(Default)]
struct SendCounts {
    sent: u64,
    bytes: u64,
    delivered: u64,
    failed: u64,
    lost: u64,
    failed_at_once: u64,
    refused: u64,
}

fn send(
    node: &Node,
    name: &str,
    instance: u64,
    until: Instant,
    report: &mut dyn FnMut(String) -> Result<(), SoakError>,
) -> Result<(), SoakError> {
    let mut far = lookup(node, name, until)?;
    let src = node.area(ENTRIES * ROOM)?;
    let mut t = node.terminus(0)?;
    let mut q = node.queue(0)?;
    let mut checked = Checked::new(node)?;
    let mut pending: Vec<Option<Pending>> = (0..ENTRIES).map(|_| None).collect();
    let mut c = SendCounts::default();
    let mut buf = Vec::new();
    let mut seq = instance << 40;
    let mut last_report = Instant::now();
    let line = |c: &SendCounts, fin: bool| {
        format!(
            "{{\"end\":\"send\",\"instance\":{instance},\"sent\":{},\"bytes\":{},\"delivered\":{},\"failed\":{},\"lost\":{},\"failed_at_once\":{},\"refused\":{}{}}}",
            c.sent,
            c.bytes,
            c.delivered,
            c.failed,
            c.lost,
            c.failed_at_once,
            c.refused,
            if fin { ",\"final\":true" } else { "" }
        )
    };
    while Instant::now() < until {
        let room = seq % ENTRIES;
        // Resolve what the room held.
        while let Some(p) = pending[room as usize].take() {
            pending[room as usize] = resolve(p, checked.words[room as usize], &mut c);
            if pending[room as usize].is_some() {
                checked.refresh(&mut t, &mut q, &far);
            }
        }
        fill(seq, &mut buf);
        src.write(room * ROOM, &buf)?;
        let opts = SendOptions::new()
            .offset(room * ROOM)
            .entry(room as u32)
            .tag(seq);
        match t.send(
            &far.inbox,
            &opts,
            Data::Gather(&[src.span(room * ROOM, len(seq))]),
        ) {
            Ok(handle) => {
                // A send the engine took is counted once it says so; one refused at once
                // (the peer is down) is counted failed.
                match handle.wait(Some(RESOLVE_BOUND)) {
                    Status::Failed(_) => c.failed_at_once += 1,
                    _ => {
                        c.sent += 1;
                        c.bytes += len(seq);
                        pending[room as usize] = Some(Pending {
                            seq,
                            handle,
                            since: Instant::now(),
                        });
                    }
                }
                seq += 1;
            }
            Err(SendError::Full | SendError::EntriesBusy) => {
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(SendError::EngineGone) => return Err(SoakError::Node(hamlyn::Error::EngineGone)),
            Err(_) => {
                // The receiver's tickets may be stale (it restarted): look them up again.
                c.refused += 1;
                std::thread::sleep(Duration::from_millis(100));
                far = lookup(node, name, until)?;
            }
        }
        if last_report.elapsed() >= Duration::from_secs(1) {
            last_report = Instant::now();
            report(line(&c, false))?;
        }
    }
    // Resolve what is left.
    for (slot, word) in pending.iter_mut().zip(0..ENTRIES as usize) {
        while let Some(p) = slot.take() {
            *slot = resolve(p, checked.words[word], &mut c);
            if slot.is_some() {
                checked.refresh(&mut t, &mut q, &far);
            }
        }
    }
    report(line(&c, true))
}

/// Counts `p` delivered (the receiver's word for its room names it), failed (its handle
/// says so) or lost (neither, past [`RESOLVE_BOUND`]); gives it back if none holds yet.
fn resolve(p: Pending, checked: u64, c: &mut SendCounts) -> Option<Pending> {
    match p.handle.status() {
        Status::Failed(_) => c.failed += 1,
        _ if checked == p.seq => c.delivered += 1,
        _ if p.since.elapsed() > RESOLVE_BOUND => {
            c.lost += 1;
            eprintln!("soak: message {} reported sent and missing", p.seq);
        }
        _ => return Some(p),
    }
    None
}
