//! Scaling: the engine's one-hop latency while idle state piles up on it (DESIGN §8:
//! "latency flat as ports, slots and termini grow").
//!
//! What is timed is the driver sending 8-byte tagged writes to its own inbox through
//! the engine ([`latency::loopback`], the latency table's "to itself" row): one hop with
//! the engine on a core of its own, so what the idle state costs the engine shows. (The
//! two-process ping-pong shares two cores among three threads and moves by tens of
//! percent from run to run by itself, more than the 10% this is to show;
//! so it is not what is measured here.) The points:
//!
//! - **ports** ([`PORT_POINTS`]): `n` idle connections of this process to the engine,
//!   each a port with one terminus opened (so the engine schedules it) and its
//!   notification queue taken; no traffic. The engine scans every open terminus each
//!   turn and arms every port's doorbell before it sleeps: this is what grows. The count
//!   the engine reports (`Stats`) is checked against the ports held.
//! - **slots** ([`SLOT_POINTS`]): the ports closed again (and the engine seen to have
//!   dropped them), one idle port holding `n` small fast slots ([`SLOT_BYTES`] each,
//!   side by side over one area, no queue). Slot lookup is O(1), so this should not grow.
//!
//! Points are cumulative within a series (the 16-port point adds 12 ports to the 4 of
//! the one before). A point that cannot be built (a limit: open files, the engine's
//! client limit, memory) ends its series: the points so far are kept, and
//! [`Scaling::notes`] says what stopped it. The open-file limit is raised to its hard
//! limit first when the port series may need more descriptors than the soft one allows
//! (an embedded engine's descriptors count against this process too).

use std::path::Path;
use std::time::{Duration, Instant};

use hamlyn::{Node, NodeOptions, NotifyQueue, Slot, Terminus};

use super::endpoint::Endpoint;
use super::engine_stats::EngineStats;
use super::error::BenchError;
use super::latency::{self, Latency};
use super::progress::Progress;

/// Idle ports held at each point of the port series.
pub const PORT_POINTS: [usize; 5] = [1, 4, 16, 64, 256];
/// Idle slots held at each point of the slot series.
pub const SLOT_POINTS: [usize; 5] = [1, 16, 256, 4096, 65536];
/// Bytes each idle slot covers.
pub const SLOT_BYTES: u64 = 64;
/// Size of the ping-pong's messages.
pub const SIZE: usize = 8;
/// Descriptors one port may cost this process (its own and, with an embedded engine,
/// the engine's: control socket, port and queue memfds, eventfds), with room to spare.
const FDS_PER_PORT: u64 = 12;
/// Longest wait for the engine to drop the closed ports.
const TEARDOWN_WAIT: Duration = Duration::from_secs(10);

/// The ping-pong's latency at one point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScalingPoint {
    /// Idle ports held by this process (beyond the driver's and the peer's).
    pub ports: usize,
    /// Idle slots held (on one idle port; 0 in the port series).
    pub slots: usize,
    /// Median one-way time in µs of the 8-byte ping-pong.
    pub p50_us: f64,
    /// 99th-percentile one-way time in µs.
    pub p99_us: f64,
}

/// Both series: the points measured, and why a series stopped early (if one did).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scaling {
    /// The port series, then the slot series.
    pub points: Vec<ScalingPoint>,
    /// What stopped a series before its last point, or a limit met on the way.
    pub notes: Vec<String>,
}

/// Measures the 8-byte one-hop latency of `ep` sending to itself at every point of
/// [`PORT_POINTS`] and [`SLOT_POINTS`], the idle ports opened to the engine at `socket`:
/// `warmup` untimed messages, then `iters` timed ones per point. One progress step per
/// point.
pub fn measure(
    socket: &Path,
    ep: &mut Endpoint,
    warmup: u64,
    iters: u64,
    progress: &Progress,
) -> Result<Scaling, BenchError> {
    let round = || latency::loopback(ep, SIZE, warmup, iters);
    measure_with(socket, &PORT_POINTS, &SLOT_POINTS, round, progress)
}

/// The ping-pong the tests run: tagged 8-byte writes through the engine.
#[cfg(test)]
fn ping_pong() -> latency::PingPong {
    latency::PingPong {
        via: super::endpoint::Via::Mediated,
        exchange: latency::Exchange::Tagged,
        size: SIZE,
        series: 1,
    }
}

/// The series of `ports` and then of `slots` points (each ascending), measuring each with
/// `round` (one latency measurement, run with the point's idle state in place).
pub fn measure_with(
    socket: &Path,
    ports: &[usize],
    slots: &[usize],
    mut round: impl FnMut() -> Result<Latency, BenchError>,
    progress: &Progress,
) -> Result<Scaling, BenchError> {
    let mut out = Scaling::default();
    let most_ports = ports.iter().copied().max().unwrap_or(0);
    out.notes.extend(raise_fd_limit(most_ports));
    // The first idle port: counted in the port series, and it holds the slot series.
    let holder = IdlePort::open(socket)?;
    // The engine's ports with the holder: everything else is someone else's.
    let baseline = engine_ports(&holder.node)?;

    let mut idle: Vec<IdlePort> = Vec::new();
    let mut steps = ports.len();
    for &n in ports {
        let step = format!("scaling: latency {SIZE} B with {n} idle ports");
        progress.start(step.clone());
        let mut built = Ok(());
        while 1 + idle.len() < n {
            match IdlePort::open(socket) {
                Ok(p) => idle.push(p),
                Err(e) => {
                    built = Err(e);
                    break;
                }
            }
        }
        if let Err(e) = built {
            out.notes.push(format!(
                "port series stopped at {} idle ports (wanted {n}): {e}{}",
                1 + idle.len(),
                fd_limit_text()
            ));
            break;
        }
        let seen = engine_ports(&holder.node)?;
        if seen != baseline + idle.len() {
            tracing::warn!(
                seen,
                expected = baseline + idle.len(),
                "the engine reports another number of ports than this run holds"
            );
        }
        let lat = round().map_err(|e| BenchError::during(step, e))?;
        out.points.push(ScalingPoint {
            ports: n,
            slots: 0,
            p50_us: lat.p50_us,
            p99_us: lat.p99_us,
        });
        progress.done();
        steps -= 1;
    }
    // Points not measured still count as steps, so the bar ends full.
    (0..steps).for_each(|_| progress.done());

    // Teardown: close the other idle ports and wait for the engine to drop them.
    drop(idle);
    let deadline = Instant::now() + TEARDOWN_WAIT;
    loop {
        let seen = engine_ports(&holder.node)?;
        if seen <= baseline {
            break;
        }
        if Instant::now() > deadline {
            out.notes.push(format!(
                "the engine still listed {} more ports than before {TEARDOWN_WAIT:?} after \
                 they were closed; the slot series ran with them",
                seen - baseline
            ));
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }

    let most_slots = slots.iter().copied().max().unwrap_or(0);
    let area = holder.node.area(SLOT_BYTES * most_slots.max(1) as u64)?;
    let mut held: Vec<Slot> = Vec::with_capacity(most_slots);
    let mut steps = slots.len();
    for &n in slots {
        let step = format!("scaling: latency {SIZE} B with {n} idle slots");
        progress.start(step.clone());
        let mut built = Ok(());
        while held.len() < n {
            let at = held.len() as u64 * SLOT_BYTES;
            match holder
                .node
                .slot(&area)
                .fast()
                .range(at..at + SLOT_BYTES)
                .create()
            {
                Ok(s) => held.push(s),
                Err(e) => {
                    built = Err(e);
                    break;
                }
            }
        }
        if let Err(e) = built {
            out.notes.push(format!(
                "slot series stopped at {} idle slots (wanted {n}): {e}",
                held.len()
            ));
            break;
        }
        let lat = round().map_err(|e| BenchError::during(step, e))?;
        out.points.push(ScalingPoint {
            ports: 1,
            slots: n,
            p50_us: lat.p50_us,
            p99_us: lat.p99_us,
        });
        progress.done();
        steps -= 1;
    }
    (0..steps).for_each(|_| progress.done());
    // One control round trip each.
    drop(held);
    drop(area);
    drop(holder);
    Ok(out)
}

/// An idle port: a connection with one terminus opened and its queue taken.
struct IdlePort {
    _terminus: Terminus,
    _queue: NotifyQueue,
    node: Node,
}

impl IdlePort {
    fn open(socket: &Path) -> Result<IdlePort, hamlyn::Error> {
        let node = Node::connect_with(
            socket,
            NodeOptions {
                termini: 1,
                queues: 1,
                queue_cap: 64,
                ..NodeOptions::default()
            },
        )?;
        Ok(IdlePort {
            _terminus: node.terminus(0)?,
            _queue: node.queue(0)?,
            node,
        })
    }
}

/// The ports the engine lists in its statistics.
fn engine_ports(node: &Node) -> Result<usize, BenchError> {
    Ok(EngineStats::of(node)?.ports())
}

/// Raises this process's soft open-file limit to the hard one if `ports` idle ports may
/// need more than it allows; says so if even the hard limit may not do.
fn raise_fd_limit(ports: usize) -> Option<String> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let open = std::fs::read_dir("/proc/self/fd").map_or(64, |d| d.count() as u64);
    let need = open + 64 + FDS_PER_PORT * ports as u64;
    let lim = getrlimit(Resource::Nofile);
    let soft = lim.current?;
    if soft >= need {
        return None;
    }
    let raised = match lim.maximum {
        None => need,
        Some(hard) => hard.min(need.max(soft)),
    };
    if raised > soft {
        let new = Rlimit {
            current: Some(raised),
            maximum: lim.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, new) {
            return Some(format!(
                "could not raise the open-file limit from {soft} to {raised}: {e}"
            ));
        }
        tracing::debug!(soft, raised, "open-file limit raised for the port series");
    }
    (raised < need).then(|| {
        format!(
            "open-file limit {raised} (hard) may be too low for {ports} idle ports (about \
             {need} descriptors)"
        )
    })
}

/// The open-file limit, for a note on why a port could not be opened.
fn fd_limit_text() -> String {
    let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let open = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    match lim.current {
        Some(soft) => format!(" ({open} descriptors open, open-file limit {soft})"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hamlyn_engine::{EngineConfig, EngineHandle};
    use std::sync::mpsc;

    /// A small version against an embedded engine, the peer's `pong` run by a thread of
    /// this process (the test binary cannot be the `bench-peer` process).
    #[test]
    fn small_series_build_measure_and_tear_down() {
        let engine = EngineHandle::start(EngineConfig::embedded()).expect("engine");
        let socket = engine.socket_path().to_path_buf();
        let mut ep = Endpoint::connect(&socket, None).expect("driver endpoint");
        let mut peer_ep = Endpoint::connect(&socket, None).expect("peer endpoint");
        let to_peer = crate::endpoint::Remote::new(peer_ep.tickets().expect("tickets"));
        let to_driver = crate::endpoint::Remote::new(ep.tickets().expect("tickets"));
        let (start, starts) = mpsc::channel::<u64>();
        let (done, dones) = mpsc::channel();
        let ponger = std::thread::spawn(move || {
            for rounds in starts {
                let r = latency::pong(&mut peer_ep, &to_driver, ping_pong(), rounds);
                if done.send(r.map_err(|e| e.to_string())).is_err() {
                    break;
                }
            }
        });
        let before = engine_ports(&Node::connect(&socket).expect("probe")).expect("stats");
        let (warmup, iters) = (20, 200);
        let progress = Progress::new(4);
        let scaling = measure_with(
            &socket,
            &[1, 4],
            &[1, 16],
            || {
                start.send(warmup + iters).expect("pong thread");
                let lat = latency::ping(&mut ep, &to_peer, ping_pong(), warmup, iters)?;
                dones
                    .recv_timeout(Duration::from_secs(10))
                    .expect("pong answer")
                    .expect("pong");
                Ok(lat)
            },
            &progress,
        )
        .expect("scaling");
        eprintln!("scaling: {scaling:?}");
        let shape: Vec<(usize, usize)> =
            scaling.points.iter().map(|p| (p.ports, p.slots)).collect();
        assert_eq!(shape, [(1, 0), (4, 0), (1, 1), (1, 16)]);
        assert!(scaling.notes.is_empty(), "{:?}", scaling.notes);
        assert!(scaling
            .points
            .iter()
            .all(|p| p.p50_us > 0.0 && p.p99_us >= p.p50_us));
        // Everything the series opened is gone again (the holder's connection included).
        let probe = Node::connect(&socket).expect("probe");
        let deadline = Instant::now() + TEARDOWN_WAIT;
        while engine_ports(&probe).expect("stats") > before && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(engine_ports(&probe).expect("stats"), before);
        drop(start);
        ponger.join().expect("pong thread");
        drop((probe, ep));
        engine.stop().expect("engine stop");
    }
}
