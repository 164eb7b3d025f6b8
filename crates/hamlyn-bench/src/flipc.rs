//! The FLIPC endpoint rows (issue 11), between two connections of their own to one
//! engine (the calling thread and a thread it starts), each with a receive endpoint of
//! posted buffers and a notification queue:
//!
//! - one-way latency: a ping-pong of `size`-byte messages between the two endpoints,
//!   through the engine (mediated) or deposited by the sender into the other's posted
//!   buffers (direct); every round timed, halved;
//! - message rate: one side streams into the other's endpoint with credit (it may have
//!   as many messages unanswered as the receiver posted buffers; the receiver returns
//!   credit every [`CREDIT_BATCH`] reposted buffers), so nothing is discarded and the
//!   figure is what the receiver took;
//! - the priority figure (mediated): the p99 of a 64 B ping-pong whose termini are at
//!   priority 0, first alone, then while a third connection at the lowest priority floods
//!   an endpoint of its own as fast as the engine takes it;
//! - the token bucket: a terminus limited to a rate streams as fast as the limit lets
//!   it, and the receiver counts what arrives over a window (2 s in the full run) after
//!   the initial burst has passed.
//!
//! A receiver waits as [`hamlyn::EndpointGroup::receive_wait`] does: take what is in the
//! endpoint, and sleep on the queue only when it is empty (a notification only says
//! "look again").

use hamlyn_shm::sync::{AtomicBool, Ordering};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use hamlyn::{
    Area, Data, DirectTarget, Endpoint, Node, NodeOptions, NotifyQueue, RateLimit, SendError,
    SendOptions, Terminus, Ticket,
};

use super::error::BenchError;
use super::latency::{timed_rounds, Latency};
use super::layers::{Layer, LayerOp, LayerRow};
use super::plan::{median, Plan};
use super::progress::Progress;
use super::report::{size_name, Mode};

/// Medium message sizes (FLIPC's range).
pub const SIZES: [usize; 4] = [64, 128, 256, 512];
/// Buffers each endpoint posts.
const BUFFERS: u32 = 256;
/// The receiver of a rate stream returns credit every this many reposted buffers.
const CREDIT_BATCH: u64 = 64;
/// Size of the priority figure's messages.
const PRIORITY_SIZE: usize = 64;
/// The lowest priority level (the engine clamps anything above to it).
const LOW_PRIORITY: u8 = 3;
/// Longest wait for one message.
const WAIT: Duration = Duration::from_secs(30);

/// One side: a connection with its endpoint (buffers of the largest size), queue 0, a
/// terminus and a source area for messages beyond the inline limit.
struct Side {
    node: Node,
    ep: Endpoint,
    queue: NotifyQueue,
    src: Area,
}

impl Side {
    fn new(socket: &Path, direct: bool) -> Result<Side, BenchError> {
        let node = Node::connect_with(
            socket,
            NodeOptions {
                queue_cap: 4096,
                ..NodeOptions::default()
            },
        )?;
        let mut b = node.endpoint(max_size() as u32, BUFFERS).queue(0);
        if direct {
            b = b.danger_direct();
        }
        let mut ep = b.create()?;
        ep.post_all()?;
        let queue = node.queue(0)?;
        let src = node.area(max_size() as u64)?;
        src.write(0, &vec![0x5a; max_size()])?;
        Ok(Side {
            node,
            ep,
            queue,
            src,
        })
    }

    /// The next message's word, sleeping on the queue while the endpoint is empty; its
    /// buffer is posted again at once.
    fn receive(&mut self) -> Result<Arrival, BenchError> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(m) = self.ep.receive() {
                let word = m.word;
                self.ep.post(m.buffer)?;
                return Ok(Arrival { word });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(BenchError::Timeout(WAIT, "a message in an endpoint"));
            }
            if self.queue.wait(Some(left))?.is_some() {
                while self.queue.poll().is_some() {}
            }
        }
    }
}

/// What a receiver learns of a message it took.
struct Arrival {
    /// The message's word (its round, or the credit it returns).
    word: u64,
}

fn max_size() -> usize {
    SIZES[SIZES.len() - 1]
}

/// How a side sends to the other's endpoint.
enum Sender {
    /// Through the engine.
    Mediated(Terminus, Ticket),
    /// Deposited into the other's posted buffers.
    Direct(DirectTarget),
}

impl Sender {
    fn new(side: &Side, to: &Ticket, direct: bool, priority: u8) -> Result<Sender, BenchError> {
        Ok(if direct {
            Sender::Direct(side.node.open_direct(to)?)
        } else {
            Sender::Mediated(side.node.terminus(priority)?, *to)
        })
    }

    /// Sends `size` bytes tagged `word`, retrying while the terminus is full.
    fn send(&mut self, src: &Area, size: usize, word: u64) -> Result<(), BenchError> {
        let bytes = [0x5au8; hamlyn::MAX_INLINE];
        let span = [src.span(0, size as u64)];
        let data = if size <= bytes.len() {
            Data::Inline(&bytes[..size])
        } else {
            Data::Gather(&span)
        };
        let opts = SendOptions::new().tag(word);
        let deadline = Instant::now() + WAIT;
        loop {
            let r = match self {
                Sender::Mediated(t, ticket) => t.send(ticket, &opts, data).map(drop),
                Sender::Direct(d) => d.send(&opts, data),
            };
            match r {
                Ok(()) => return Ok(()),
                Err(SendError::Full) if Instant::now() < deadline => std::thread::yield_now(),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// What the other thread is told to do.
enum Job {
    /// Answer `rounds` messages of `size` bytes (priority 0 terminus).
    Pong { size: usize, rounds: u64 },
    /// Take `count` messages, returning credit every [`CREDIT_BATCH`].
    Sink { count: u64 },
    /// Take messages until told to stop (`stop`); count those arriving from `settle`
    /// after the first for `window`: the count, and the seconds it took.
    Window {
        settle: Duration,
        window: Duration,
        stop: Arc<AtomicBool>,
    },
}

/// The other side's thread: obeys jobs until the channel closes.
struct Remote {
    jobs: mpsc::Sender<Job>,
    done: mpsc::Receiver<Result<f64, BenchError>>,
    thread: std::thread::JoinHandle<()>,
    ticket: Ticket,
}

impl Remote {
    fn start(socket: PathBuf, direct: bool, back: Ticket) -> Result<Remote, BenchError> {
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (done_tx, done) = mpsc::channel();
        let (ticket_tx, ticket_rx) = mpsc::channel::<Result<Ticket, BenchError>>();
        let thread = std::thread::spawn(move || {
            let setup = (|| {
                let side = Side::new(&socket, direct)?;
                let tx = Sender::new(&side, &back, direct, 0)?;
                Ok((side, tx))
            })();
            let (mut side, mut tx) = match setup {
                Ok(s) => s,
                Err(e) => {
                    let _ = ticket_tx.send(Err(e));
                    return;
                }
            };
            if ticket_tx.send(Ok(side.ep.ticket())).is_err() {
                return;
            }
            for job in job_rx {
                let r = run_job(&mut side, &mut tx, job);
                if done_tx.send(r).is_err() {
                    return;
                }
            }
        });
        let ticket = ticket_rx
            .recv_timeout(WAIT)
            .map_err(|_| BenchError::Timeout(WAIT, "the endpoint thread"))??;
        Ok(Remote {
            jobs,
            done,
            thread,
            ticket,
        })
    }

    fn send(&self, job: Job) -> Result<(), BenchError> {
        self.jobs
            .send(job)
            .map_err(|_| BenchError::Panicked("the endpoint thread"))
    }

    fn wait(&self) -> Result<f64, BenchError> {
        self.done
            .recv_timeout(WAIT * 4)
            .map_err(|_| BenchError::Timeout(WAIT * 4, "the endpoint thread's job"))?
    }

    fn stop(self) -> Result<(), BenchError> {
        drop(self.jobs);
        self.thread
            .join()
            .map_err(|_| BenchError::Panicked("the endpoint thread"))
    }
}

fn run_job(side: &mut Side, tx: &mut Sender, job: Job) -> Result<f64, BenchError> {
    match job {
        Job::Pong { size, rounds } => {
            for r in 0..rounds {
                let m = side.receive()?;
                if m.word != r {
                    return Err(BenchError::Unexpected(format!(
                        "message {} during round {r}",
                        m.word
                    )));
                }
                tx.send(&side.src, size, r)?;
            }
            Ok(0.0)
        }
        Job::Sink { count } => {
            for i in 1..=count {
                side.receive()?;
                if i % CREDIT_BATCH == 0 {
                    tx.send(&side.src, 64, CREDIT_BATCH)?;
                }
            }
            let lost = side.ep.take_discards();
            if lost > 0 {
                return Err(BenchError::Unexpected(format!(
                    "{lost} messages found no buffer despite the credit"
                )));
            }
            Ok(0.0)
        }
        Job::Window {
            settle,
            window,
            stop,
        } => {
            side.receive()?;
            let start = Instant::now() + settle;
            let end = start + window;
            let mut counted = 0u64;
            loop {
                side.receive()?;
                let now = Instant::now();
                if now >= end {
                    break;
                }
                if now >= start {
                    counted += 1;
                }
            }
            // Release: nothing to publish but the flag (its load in the sender's loop).
            stop.store(true, Ordering::Release);
            // Take what is still coming so the sender is never held by a full endpoint.
            let drain = Instant::now() + Duration::from_millis(50);
            while Instant::now() < drain {
                if side.ep.receive().is_none() {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            side.ep.post_all()?;
            side.ep.take_discards();
            Ok(counted as f64 / window.as_secs_f64())
        }
    }
}

/// Every endpoint row of `mode` (direct or mediated) on the engine at `socket`.
pub fn measure(
    mode: Mode,
    socket: &Path,
    plan: &Plan,
    progress: &Progress,
) -> Result<Vec<LayerRow>, BenchError> {
    let direct = mode == Mode::Direct;
    let mut me = Side::new(socket, direct)?;
    let remote = Remote::start(socket.to_path_buf(), direct, me.ep.ticket())?;
    let result = measure_with(mode, &mut me, &remote, plan, progress);
    let stopped = remote.stop();
    let rows = result?;
    stopped?;
    Ok(rows)
}

/// One ping-pong of `size` bytes from `tx`: the peer answers; percentiles of RTT / 2.
fn ping(
    me: &mut Side,
    tx: &mut Sender,
    remote: &Remote,
    size: usize,
    warmup: u64,
    iters: u64,
) -> Result<Latency, BenchError> {
    remote.send(Job::Pong {
        size,
        rounds: warmup + iters,
    })?;
    let lat = timed_rounds(warmup, iters, 2, |r| {
        tx.send(&me.src, size, r)?;
        let m = me.receive()?;
        if m.word != r {
            return Err(BenchError::Unexpected(format!(
                "answer {} during round {r}",
                m.word
            )));
        }
        Ok(())
    })?;
    remote.wait()?;
    Ok(lat)
}

/// `count` messages of `size` bytes into the remote's endpoint with credit: msg/s. The
/// remote returns [`CREDIT_BATCH`] credits per message, `count / CREDIT_BATCH` of them in
/// all, and every one is taken before this returns (one left on its way would be credit
/// the next stream does not have).
fn rate(
    me: &mut Side,
    tx: &mut Sender,
    remote: &Remote,
    size: usize,
    count: u64,
) -> Result<f64, BenchError> {
    remote.send(Job::Sink { count })?;
    let mut credit = u64::from(BUFFERS);
    let mut returned = 0u64;
    let t = Instant::now();
    for i in 0..count {
        while credit == 0 {
            credit += me.receive()?.word;
            returned += 1;
        }
        while let Some(m) = me.ep.receive() {
            credit += m.word;
            returned += 1;
            me.ep.post(m.buffer)?;
        }
        tx.send(&me.src, size, i)?;
        credit -= 1;
    }
    remote.wait()?;
    let secs = t.elapsed().as_secs_f64().max(1e-9);
    while returned < count / CREDIT_BATCH {
        me.receive()?;
        returned += 1;
    }
    Ok(count as f64 / secs)
}

fn measure_with(
    mode: Mode,
    me: &mut Side,
    remote: &Remote,
    plan: &Plan,
    progress: &Progress,
) -> Result<Vec<LayerRow>, BenchError> {
    let direct = mode == Mode::Direct;
    let name = mode.name();
    let row = |op, size| LayerRow::new(Layer::Endpoints, mode, op, size);
    let mut rows = Vec::new();
    let mut tx = Sender::new(me, &remote.ticket, direct, 0)?;
    for size in SIZES {
        let step = format!("{name}: endpoint one-way {}", size_name(size));
        progress.start(step.clone());
        let lat = ping(me, &mut tx, remote, size, plan.warmup, plan.latency_iters)
            .map_err(|e| BenchError::during(step, e))?;
        rows.push(row(LayerOp::EndpointOneWay, size).latency(lat.p50_us, lat.p99_us));
        progress.done();
    }
    for size in SIZES {
        let step = format!("{name}: endpoint message rate {}", size_name(size));
        progress.start(step.clone());
        let count = (plan.rate_msgs / 4).max(1000);
        let r = (|| {
            rate(me, &mut tx, remote, size, count / 10)?;
            let mut rates = Vec::with_capacity(plan.reps);
            for _ in 0..plan.reps {
                rates.push(rate(me, &mut tx, remote, size, count)?);
            }
            Ok(median(&rates).unwrap_or(0.0))
        })()
        .map_err(|e| BenchError::during(step, e))?;
        rows.push(row(LayerOp::EndpointRate, size).rate(r));
        progress.done();
    }
    if !direct {
        let step = format!("{name}: endpoint priority");
        progress.start(step.clone());
        let (alone, loaded) =
            priority(me, &mut tx, remote, plan).map_err(|e| BenchError::during(step, e))?;
        rows.push(row(LayerOp::PriorityAlone, PRIORITY_SIZE).latency(alone.p50_us, alone.p99_us));
        rows.push(
            row(LayerOp::PriorityLoaded, PRIORITY_SIZE).latency(loaded.p50_us, loaded.p99_us),
        );
        progress.done();
        let step = format!("{name}: token bucket");
        progress.start(step.clone());
        let (msgs, bytes) =
            token_bucket(me, remote, plan).map_err(|e| BenchError::during(step, e))?;
        rows.extend([msgs, bytes]);
        progress.done();
    }
    Ok(rows)
}

/// The 64 B ping-pong at priority 0 alone, then beside a flood at the lowest priority.
fn priority(
    me: &mut Side,
    tx: &mut Sender,
    remote: &Remote,
    plan: &Plan,
) -> Result<(Latency, Latency), BenchError> {
    let (warmup, iters) = (plan.warmup, plan.latency_iters);
    let alone = ping(me, tx, remote, PRIORITY_SIZE, warmup, iters)?;
    let socket = me.node.socket_path().to_path_buf();
    let stop = Arc::new(AtomicBool::new(false));
    let flooding = stop.clone();
    let (ready_tx, ready) = mpsc::channel();
    let flood = std::thread::spawn(move || -> Result<u64, BenchError> {
        let mut side = Side::new(&socket, false)?;
        let mut tx = Sender::Mediated(side.node.terminus(LOW_PRIORITY)?, side.ep.ticket());
        let _ = ready_tx.send(());
        let mut sent = 0u64;
        // Acquire: pairs with the Release store below; nothing else is published.
        while !flooding.load(Ordering::Acquire) {
            tx.send(&side.src, max_size(), sent)?;
            sent += 1;
            while let Some(m) = side.ep.receive() {
                side.ep.post(m.buffer)?;
            }
        }
        Ok(sent)
    });
    let started = ready.recv_timeout(WAIT).is_ok();
    let loaded = if started {
        // Let the flood fill the engine's rings first.
        std::thread::sleep(Duration::from_millis(20));
        ping(me, tx, remote, PRIORITY_SIZE, warmup, iters)
    } else {
        Err(BenchError::Timeout(WAIT, "the flood's connection"))
    };
    // Release: pairs with the flood loop's Acquire load.
    stop.store(true, Ordering::Release);
    let sent = flood
        .join()
        .map_err(|_| BenchError::Panicked("the low-priority flood"))??;
    tracing::debug!(sent, "low-priority flood");
    Ok((alone, loaded?))
}

/// The token bucket: a terminus limited in messages per second, then one limited in
/// bytes per second, each streaming 512 B messages into the remote's endpoint.
fn token_bucket(
    me: &mut Side,
    remote: &Remote,
    plan: &Plan,
) -> Result<(LayerRow, LayerRow), BenchError> {
    let window = match plan.name {
        "full" => Duration::from_secs(2),
        "quick" => Duration::from_millis(500),
        _ => Duration::from_millis(100),
    };
    let size = max_size();
    let msgs_limit = 20_000u64;
    let bytes_limit = 8_000_000u64;
    let run = |limit: RateLimit| -> Result<f64, BenchError> {
        let mut t = me.node.terminus_with_rate(0, limit)?;
        let stop = Arc::new(AtomicBool::new(false));
        remote.send(Job::Window {
            settle: window / 4,
            window,
            stop: stop.clone(),
        })?;
        let span = [me.src.span(0, size as u64)];
        let deadline = Instant::now() + window * 4 + WAIT;
        let mut i = 0u64;
        // Acquire: pairs with the receiver's Release store when its window closed.
        while !stop.load(Ordering::Acquire) {
            if Instant::now() > deadline {
                return Err(BenchError::Timeout(WAIT, "the token bucket's window"));
            }
            match t.send(
                &remote.ticket,
                &SendOptions::new().tag(i),
                Data::Gather(&span),
            ) {
                Ok(_) => i += 1,
                Err(SendError::Full) => std::thread::sleep(Duration::from_micros(100)),
                Err(e) => return Err(e.into()),
            }
        }
        let got = remote.wait()?;
        Ok(got)
    };
    let msgs = run(RateLimit {
        bytes_per_sec: 0,
        msgs_per_sec: msgs_limit,
    })?;
    let bytes = run(RateLimit {
        bytes_per_sec: bytes_limit,
        msgs_per_sec: 0,
    })?;
    let row = |op| LayerRow::new(Layer::Endpoints, Mode::Mediated, op, size);
    Ok((
        row(LayerOp::TokenBucketMsgs).rate(msgs).count(msgs_limit),
        row(LayerOp::TokenBucketBytes)
            .rate(bytes)
            .count(bytes_limit),
    ))
}

/// Progress steps of one mode.
pub fn steps(mode: Mode) -> usize {
    2 * SIZES.len() + if mode == Mode::Direct { 0 } else { 2 }
}
