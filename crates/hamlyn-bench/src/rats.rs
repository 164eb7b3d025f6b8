//! The Rats rows (issue 10), mediated on one engine, between two connections of their
//! own (the calling thread and a thread it starts), each figure beside the same through
//! the library alone where the goals hold it against one:
//!
//! - 16-byte tagged write, one way: a ping-pong of `TaggedClient::write` / `wait_tag`
//!   (halved), beside the same with a terminus send to a fast slot and a notification
//!   wait;
//! - 16-byte simple datagram answered through its reply seed: a whole round trip;
//! - request/response, 16 bytes each way: a whole round trip;
//! - stream bandwidth in records of 64 B, 1 KiB and 64 KiB, and in 64 KiB byte writes,
//!   beside the library's raw send bandwidth of 64 KiB messages (32 in flight), measured
//!   in turns with the 64 KiB records (the goal's ratio); every bandwidth timed from the
//!   sender's go, after its set-up. The 64 KiB records go from message space without a
//!   copy (`write_buffer`, a large write "sent as it is"), as the raw sends do; the
//!   smaller records and the bytes are copied in (`write_record`, `write_bytes`: the
//!   64 KiB bytes row is the copying path beside the goal's). The stream's ring is the
//!   raw slot's receive space and window ([`WINDOW_BYTES`], [`RAW_IN_FLIGHT`] entries),
//!   and both senders' source memory is written before the go: each side first-touches
//!   the same receive memory while timed (docs/PERFORMANCE.md, "Rats (issue 10)").
//!
//! Every round of a latency is timed; bandwidths are medians of the plan's repetitions.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hamlyn::{Data, Node, NodeOptions, SendError, SendOptions, SlotMode};
use hamlyn_rats::request_response::{RequestClient, RequestServer};
use hamlyn_rats::simple_datagram::{SimpleClient, SimpleDatagram};
use hamlyn_rats::stream::{StreamReceiver, StreamSender};
use hamlyn_rats::tagged::{TaggedClient, TaggedServer};
use hamlyn_rats::{Manager, RatsError};

use super::error::BenchError;
use super::latency::{timed_rounds, Latency};
use super::layers::{Layer, LayerOp, LayerRow};
use super::plan::{median, Plan};
use super::progress::Progress;
use super::report::{size_name, Mode};

/// Size of the latency rows' messages (seed 001's Tables 1–2 are of 16-byte messages).
pub const SMALL: usize = 16;
/// Record sizes of the stream rows.
pub const RECORD_SIZES: [usize; 3] = [64, 1024, 64 * 1024];
/// Size of the byte writes, and of the raw sends they are held against.
const BIG: usize = 64 * 1024;
/// Messages the raw sender keeps in flight, and the stream's metadata entries.
const RAW_IN_FLIGHT: u32 = 32;
/// The raw slot's receive space, and the stream's ring: the two receivers' memory, fresh
/// in every repetition, is the same size (a ring 4× larger cost the stream 4× the page
/// faults of its first pass, and 4× the cache footprint).
const WINDOW_BYTES: u64 = BIG as u64 * RAW_IN_FLIGHT as u64;

const WAIT: Duration = Duration::from_secs(30);

fn attach(socket: &Path) -> Result<Node, BenchError> {
    Ok(Node::connect_with(
        socket,
        NodeOptions {
            queue_cap: 4096,
            ..NodeOptions::default()
        },
    )?)
}

fn none_in_time(what: &'static str) -> BenchError {
    BenchError::Timeout(WAIT, what)
}

/// Joins a helper thread, its own error first.
fn join<T>(
    t: std::thread::JoinHandle<Result<T, BenchError>>,
    name: &'static str,
) -> Result<T, BenchError> {
    t.join().map_err(|_| BenchError::Panicked(name))?
}

/// The driver's result, unless the helper failed too: then the helper's error, which is
/// the cause (the driver only timed out waiting for it).
fn first_cause<T>(
    driver: Result<T, BenchError>,
    helper: Result<(), BenchError>,
) -> Result<T, BenchError> {
    match (driver, helper) {
        (Err(_), Err(h)) => Err(h),
        (d, h) => {
            h?;
            d
        }
    }
}

/// Retries `send` while the terminus (or the protocol's credit) is full, up to [`WAIT`].
fn retry<T>(mut send: impl FnMut() -> Result<T, BenchError>) -> Result<T, BenchError> {
    let deadline = Instant::now() + WAIT;
    loop {
        match send() {
            Err(BenchError::Send(SendError::Full) | BenchError::Rats(RatsError::Full))
                if Instant::now() < deadline =>
            {
                std::thread::yield_now()
            }
            other => return other,
        }
    }
}

/// Waits until the last answer a helper sent has left its terminus: a connection closed
/// with sends still queued loses them, and the driver would wait for its last answer in
/// vain.
fn finish(last: Option<hamlyn::SendHandle>) -> Result<(), BenchError> {
    match last.map(|h| h.wait(Some(WAIT))) {
        None | Some(hamlyn::Status::Sent) => Ok(()),
        Some(other) => Err(BenchError::SendFailed(other)),
    }
}

/// Runs `echo` on a thread with its own connection; it first sends what the driver
/// needs (a seed) through the channel it is given.
fn helper<S: Send + 'static, T: Send + 'static>(
    socket: &Path,
    echo: impl FnOnce(Node, mpsc::Sender<S>) -> Result<T, BenchError> + Send + 'static,
) -> Result<(std::thread::JoinHandle<Result<T, BenchError>>, S), BenchError> {
    let node = attach(socket)?;
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || echo(node, tx));
    match rx.recv_timeout(WAIT) {
        Ok(s) => Ok((t, s)),
        Err(_) => {
            // The helper failed before it could send: its error says why.
            join(t, "a Rats helper thread")?;
            Err(none_in_time("a Rats helper thread's seed"))
        }
    }
}

/// A bandwidth helper's side of the start: says it is set up (its connection, areas,
/// seed handled), then waits for the driver's go, so that set-up (control round trips
/// to the engine, tens of milliseconds on a busy machine) is not timed as bandwidth.
fn wait_for_go(ready: mpsc::Sender<()>, go: &mpsc::Receiver<()>) -> Result<(), BenchError> {
    let _ = ready.send(());
    go.recv_timeout(WAIT)
        .map_err(|_| none_in_time("the driver's go"))
}

/// The driver's side: the clock starts, then the helper is told to go.
fn start_timed(go: &mpsc::Sender<()>) -> Instant {
    let start = Instant::now();
    let _ = go.send(());
    start
}

/// 16-byte ping-pong through the library alone: a fast slot each way.
fn raw_tagged(socket: &Path, warmup: u64, iters: u64) -> Result<Latency, BenchError> {
    let node = attach(socket)?;
    let area = node.area(4096)?;
    let slot = node.slot(&area).mode(SlotMode::Fast).queue(0).create()?;
    let to_a = slot.ticket_all()?;
    let rounds = warmup + iters;
    let (echo, to_b) = helper(socket, move |b, tx| {
        let area = b.area(4096)?;
        let slot = b.slot(&area).mode(SlotMode::Fast).queue(0).create()?;
        let _ = tx.send(slot.ticket_all()?);
        let mut q = b.queue(0)?;
        let mut t = b.terminus(0)?;
        let mut last = None;
        for _ in 0..rounds {
            let n = q.wait(Some(WAIT))?.ok_or(none_in_time("a ping"))?;
            let opts = SendOptions::new().tag(n.word);
            last = Some(retry(|| {
                Ok(t.send(&to_a, &opts, Data::Inline(&[0; SMALL]))?)
            })?);
        }
        finish(last)?;
        drop(slot);
        Ok(())
    })?;
    let mut q = node.queue(0)?;
    let mut t = node.terminus(0)?;
    let lat = timed_rounds(warmup, iters, 2, |i| {
        retry(|| Ok(t.send(&to_b, &SendOptions::new().tag(i), Data::Inline(&[0; SMALL]))?))?;
        q.wait(Some(WAIT))?.ok_or(none_in_time("a pong"))?;
        Ok(())
    });
    let joined = join(echo, "the raw echo");
    drop(slot);
    first_cause(lat, joined)
}

/// 16-byte ping-pong through Rats tagged writes.
fn rats_tagged(socket: &Path, warmup: u64, iters: u64) -> Result<Latency, BenchError> {
    let node = attach(socket)?;
    let ma = Manager::new(&node)?;
    let sa = TaggedServer::new(&ma, 4096)?;
    let seed_a = sa.make_seed()?;
    let rounds = warmup + iters;
    let (echo, seed_b) = helper(socket, move |b, tx| {
        let mb = Manager::new(&b)?;
        let sb = TaggedServer::new(&mb, 4096)?;
        let _ = tx.send(sb.make_seed()?);
        let to_a = TaggedClient::from_seed(&mb, &seed_a)?;
        let mut last = None;
        for _ in 0..rounds {
            let t = sb.wait_tag(Some(WAIT))?.ok_or(none_in_time("a ping"))?;
            last = Some(retry(|| Ok(to_a.write(0, &[0; SMALL], t.tag)?))?);
        }
        finish(last)
    })?;
    let to_b = TaggedClient::from_seed(&ma, &seed_b)?;
    let lat = timed_rounds(warmup, iters, 2, |i| {
        retry(|| Ok(to_b.write(0, &[0; SMALL], i as u32)?))?;
        sa.wait_tag(Some(WAIT))?.ok_or(none_in_time("a pong"))?;
        Ok(())
    });
    let joined = join(echo, "the Rats tagged echo");
    first_cause(lat, joined)
}

/// 16-byte simple-datagram ping-pong through reply seeds: a round trip.
fn simple_datagram(socket: &Path, warmup: u64, iters: u64) -> Result<Latency, BenchError> {
    let node = attach(socket)?;
    let ma = Manager::new(&node)?;
    let mut a = SimpleDatagram::new(&ma, 4096)?;
    let rounds = warmup + iters;
    let (echo, seed_b) = helper(socket, move |b, tx| {
        let mb = Manager::new(&b)?;
        let mut sb = SimpleDatagram::new(&mb, 4096)?;
        let _ = tx.send(sb.make_seed()?);
        let mut last = None;
        for _ in 0..rounds {
            let m = sb.recv(Some(WAIT))?.ok_or(none_in_time("a datagram"))?;
            let got = sb.to_vec(&m)?;
            let reply = sb.reply_seed()?;
            last = Some(retry(|| Ok(reply.send(&mb, &got, None, b"")?))?);
        }
        finish(last)
    })?;
    let to_b = SimpleClient::from_seed(&ma, &seed_b)?;
    let me = a.metadata_for_self()?;
    let lat = timed_rounds(warmup, iters, 1, |_| {
        retry(|| Ok(to_b.send(&[7; SMALL], Some(&me), b"")?))?;
        let m = a.recv(Some(WAIT))?.ok_or(none_in_time("a reply"))?;
        a.to_vec(&m)?;
        Ok(())
    });
    let joined = join(echo, "the simple-datagram echo");
    first_cause(lat, joined)
}

/// Request/response round trip: 16 bytes each way.
fn request_response(socket: &Path, warmup: u64, iters: u64) -> Result<Latency, BenchError> {
    let rounds = warmup + iters;
    let (server, seed) = helper(socket, move |b, tx| {
        let mb = Manager::new(&b)?;
        let mut srv = RequestServer::new(&mb, 4096)?;
        let _ = tx.send(srv.seed_text()?);
        let mut last = None;
        for _ in 0..rounds {
            let r = srv.recv(Some(WAIT))?.ok_or(none_in_time("a request"))?;
            let bytes = srv.to_vec(&r)?;
            last = Some(srv.send_reply(&r, &bytes)?);
            srv.release()?;
        }
        finish(last)
    })?;
    let node = attach(socket)?;
    let ma = Manager::new(&node)?;
    let mut c = RequestClient::from_text(&ma, &seed, 4096)?;
    let lat = timed_rounds(warmup, iters, 1, |_| {
        let r = c.call(&[1; SMALL], WAIT)?;
        c.reply_bytes(&r)?;
        c.release();
        Ok(())
    });
    let joined = join(server, "the request server");
    first_cause(lat, joined)
}

/// How a stream row's sender writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamWrite {
    /// Records copied into message space (`write_record`).
    Records,
    /// Records sent from message space as they lie, without a copy (`write_buffer`):
    /// the path of the raw sends, which go from an area the sender wrote before.
    Buffers,
    /// Bytes copied into message space (`write_bytes`).
    Bytes,
}

/// Stream bandwidth, GB/s: `total` bytes in writes of `size`, written `how`, through a
/// ring of the raw slot's size and entries. Timed from the sender's start
/// ([`start_timed`]): its connection, manager and seed handling are set-up, not
/// bandwidth.
pub fn stream(socket: &Path, size: usize, how: StreamWrite, total: u64) -> Result<f64, BenchError> {
    let node = attach(socket)?;
    let m = Manager::new(&node)?;
    let mut rx = StreamReceiver::new(&m, WINDOW_BYTES, RAW_IN_FLIGHT)?;
    let seed = rx.make_seed()?;
    let count = (total / size as u64).max(1);
    let (go_tx, go) = mpsc::channel();
    let (sender, ()) = helper(socket, move |b, tx| {
        let mb = Manager::new(&b)?;
        let mut s = StreamSender::from_seed(&mb, &seed)?;
        let chunk = vec![0x5Au8; size];
        // The message space the writes copy into (or send from), written before the go
        // as the raw sender's source is: freed, it is where the manager places the next
        // buffers (the lowest free offsets), so their first touch is set-up, not
        // bandwidth.
        mb.alloc(WINDOW_BYTES)?
            .write(0, &vec![0x5Au8; WINDOW_BYTES as usize])?;
        wait_for_go(tx, &go)?;
        for _ in 0..count {
            match how {
                StreamWrite::Records => {
                    s.write_record(&chunk)?;
                }
                StreamWrite::Buffers => {
                    s.write_buffer(mb.alloc(size as u64)?, size as u64, true)?;
                }
                StreamWrite::Bytes => {
                    s.write_bytes(&chunk)?;
                }
            }
        }
        s.close()?.wait(Some(WAIT));
        Ok(())
    })?;
    let start = start_timed(&go_tx);
    let mut got = 0u64;
    let read = loop {
        match rx.read_bytes(Some(WAIT)) {
            Ok(Some(v)) => {
                got += v.len;
                if let Err(e) = rx.release(&v) {
                    break Err(e.into());
                }
            }
            Ok(None) => break Err(none_in_time("the stream's next bytes")),
            Err(RatsError::EndOfStream) => break Ok(()),
            Err(e) => break Err(e.into()),
        }
    };
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let joined = join(sender, "the stream sender");
    first_cause(read, joined)?;
    if got != count * size as u64 {
        return Err(BenchError::Unexpected(format!(
            "the stream delivered {got} bytes of {}",
            count * size as u64
        )));
    }
    Ok(got as f64 / secs / 1e9)
}

/// The library's raw send bandwidth of 64 KiB messages on the same path, GB/s: the
/// receiver counts notifications; the sender keeps [`RAW_IN_FLIGHT`] in flight from
/// source bytes it wrote at set-up (as the stream's sender wrote its record). Timed from
/// the sender's start, as [`stream`].
pub fn raw_bandwidth(socket: &Path, total: u64) -> Result<f64, BenchError> {
    let msg = BIG as u64;
    let node = attach(socket)?;
    let area = node.area(WINDOW_BYTES)?;
    let meta = node.meta_area(RAW_IN_FLIGHT)?;
    let slot = node.slot(&area).meta(&meta).queue(0).create()?;
    let ticket = slot.ticket_all()?;
    let count = (total / msg).max(1);
    let mut q = node.queue(0)?;
    let (go_tx, go) = mpsc::channel();
    let (sender, ()) = helper(socket, move |b, tx| {
        let src = b.area(WINDOW_BYTES)?;
        // Written before the go, as the stream's record is: the first touch of the
        // source's pages is set-up, not bandwidth (it only ever made raw slower).
        src.write(0, &vec![0x5Au8; WINDOW_BYTES as usize])?;
        let mut t = b.terminus(0)?;
        wait_for_go(tx, &go)?;
        let mut handles = VecDeque::new();
        for i in 0..count {
            let e = i % u64::from(RAW_IN_FLIGHT);
            if handles.len() == RAW_IN_FLIGHT as usize {
                if let Some(h) = handles.pop_front() {
                    let h: hamlyn::SendHandle = h;
                    h.wait(Some(WAIT));
                }
            }
            let opts = SendOptions::new().offset(e * msg).entry(e as u32).tag(i);
            let deadline = Instant::now() + WAIT;
            let h = loop {
                match t.send(&ticket, &opts, Data::Gather(&[src.span(e * msg, msg)])) {
                    Ok(h) => break h,
                    Err(SendError::Full) if Instant::now() < deadline => std::thread::yield_now(),
                    Err(e) => return Err(e.into()),
                }
            };
            handles.push_back(h);
        }
        t.wait_idle(Some(WAIT));
        Ok(())
    })?;
    let start = start_timed(&go_tx);
    let mut received = Ok(());
    for _ in 0..count {
        match q.wait(Some(WAIT)) {
            Ok(Some(_)) => {}
            Ok(None) => {
                received = Err(none_in_time("a raw 64 KiB message"));
                break;
            }
            Err(e) => {
                received = Err(e.into());
                break;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let joined = join(sender, "the raw sender");
    drop(slot);
    first_cause(received, joined)?;
    Ok((count * msg) as f64 / secs / 1e9)
}

/// Every Rats row (mediated) on the engine at `socket`.
pub fn measure(
    socket: &Path,
    plan: &Plan,
    progress: &Progress,
) -> Result<Vec<LayerRow>, BenchError> {
    let mode = Mode::Mediated;
    let row = |op, size| LayerRow::new(Layer::Rats, mode, op, size);
    let mut rows = Vec::new();
    let (warmup, iters) = (plan.warmup, plan.latency_iters);
    type Lat = fn(&Path, u64, u64) -> Result<Latency, BenchError>;
    let latencies: [(LayerOp, &str, Lat); 4] = [
        (
            LayerOp::RawTagged,
            "library alone, tagged write",
            raw_tagged,
        ),
        (LayerOp::RatsTagged, "tagged write", rats_tagged),
        (
            LayerOp::RatsSimpleDatagram,
            "simple datagram",
            simple_datagram,
        ),
        (
            LayerOp::RatsRequestResponse,
            "request/response",
            request_response,
        ),
    ];
    for (op, what, f) in latencies {
        let step = format!("mediated: Rats {what} 16 B");
        progress.start(step.clone());
        let lat = f(socket, warmup, iters).map_err(|e| BenchError::during(step, e))?;
        rows.push(row(op, SMALL).latency(lat.p50_us, lat.p99_us));
        progress.done();
    }
    // Bytes per bandwidth repetition: a quarter of the plan's, at least 4 MiB.
    let total = (plan.bw_bytes / 4).max(4 << 20);
    let medians = |step: String, f: &dyn Fn() -> Result<f64, BenchError>| {
        progress.start(step.clone());
        let r = (|| {
            let mut v = Vec::with_capacity(plan.reps);
            for _ in 0..plan.reps {
                v.push(f()?);
            }
            Ok(median(&v).unwrap_or(0.0))
        })()
        .map_err(|e| BenchError::during(step, e));
        progress.done();
        r
    };
    // The raw sends and the 64 KiB records (the goal's ratio) are measured in turns,
    // raw then records, repetition after repetition: on a shared machine whose load
    // drifts, the two medians are then of the same minutes.
    let step = "mediated: raw sends and Rats stream records of 64 KiB, in turns".to_string();
    progress.start(step.clone());
    let turns = (|| -> Result<(f64, f64), BenchError> {
        let (mut raw, mut records) = (Vec::with_capacity(plan.reps), Vec::new());
        for _ in 0..plan.reps {
            raw.push(raw_bandwidth(socket, total)?);
            records.push(stream(socket, BIG, StreamWrite::Buffers, total)?);
        }
        Ok((median(&raw).unwrap_or(0.0), median(&records).unwrap_or(0.0)))
    })()
    .map_err(|e| BenchError::during(step, e));
    progress.done();
    let (raw, big_records) = turns?;
    rows.push(row(LayerOp::RawBandwidth, BIG).bandwidth(raw));
    for size in RECORD_SIZES {
        if size == BIG {
            rows.push(row(LayerOp::RatsStreamRecords, size).bandwidth(big_records));
            continue;
        }
        // Small records move fewer bytes in the same time.
        let bytes = if size < 4096 { total / 16 } else { total }.max(1 << 20);
        let g = medians(
            format!("mediated: Rats stream, records of {}", size_name(size)),
            &|| stream(socket, size, StreamWrite::Records, bytes),
        )?;
        rows.push(row(LayerOp::RatsStreamRecords, size).bandwidth(g));
    }
    let g = medians(
        "mediated: Rats stream, bytes in 64 KiB writes".into(),
        &|| stream(socket, BIG, StreamWrite::Bytes, total),
    )?;
    rows.push(row(LayerOp::RatsStreamBytes, BIG).bandwidth(g));
    Ok(rows)
}

/// Progress steps.
pub fn steps() -> usize {
    // Latencies, raw sends with 64 KiB records in turns, the other record sizes, bytes.
    4 + 1 + (RECORD_SIZES.len() - 1) + 1
}
