//! The Rust side of `bench/pingpong.py`: the same 8-byte ping-pong loop as the Python one,
//! on the same objects, run entirely in Rust (without the GIL), so that one run measures
//! what the binding adds per message. Not part of the public API (`hamlyn._hamlyn` only).

use std::time::{Duration, Instant};

use hamlyn::{Data, NotificationKind, SendOptions};
use pyo3::prelude::*;

use crate::area::PyArea;
use crate::errors;
use crate::queue::PyQueue;
use crate::terminus::PyTerminus;
use crate::ticket::PyTicket;

/// The tag of a ping (and of a pong's answer).
const PING: u64 = 2;
/// The tag that ends a pong loop.
const BYE: u64 = 3;
/// Longest wait for one answer: a lost peer fails the bench instead of hanging it.
const ANSWER_BOUND: Duration = Duration::from_secs(10);

/// What the loops report.
type Outcome = Result<Vec<u64>, String>;

/// Runs `f` with the terminus, queue and area of one side, without the GIL.
fn run(
    py: Python<'_>,
    terminus: &PyTerminus,
    queue: &PyQueue,
    area: &PyArea,
    f: impl FnOnce(&mut hamlyn::Terminus, &mut hamlyn::NotifyQueue, &hamlyn::Area) -> Outcome + Send,
) -> PyResult<Vec<u64>> {
    let area = area.get(py)?;
    let got = terminus.with(py, |t| {
        queue.with(py, |q| Ok(py.allow_threads(|| f(t, q, &area))))
    })?;
    got.map_err(errors::invalid)
}

/// The next message's tag, or why there is none.
fn next(q: &mut hamlyn::NotifyQueue) -> Result<u64, String> {
    match q.wait(Some(ANSWER_BOUND)) {
        Ok(Some(n)) if n.kind == NotificationKind::Message => Ok(n.word),
        Ok(Some(n)) => Err(format!("unexpected notification {n:?}")),
        Ok(None) => Err("no answer within 10 s".to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

/// The word at offset 0 of `area`.
fn word(area: &hamlyn::Area) -> Result<u64, String> {
    let mut b = [0u8; 8];
    area.read(0, &mut b).map_err(|e| e.to_string())?;
    Ok(u64::from_le_bytes(b))
}

/// Sends the 8-byte `value` with `tag` to `to`.
fn send(t: &mut hamlyn::Terminus, to: &hamlyn::Ticket, tag: u64, value: u64) -> Result<(), String> {
    let o = SendOptions::new().tag(tag);
    t.send(to, &o, Data::Inline(&value.to_le_bytes()))
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Answers every ping `n` with `n + 1` until a goodbye; returns how many it answered.
#[pyfunction]
pub(crate) fn bench_pong(
    py: Python<'_>,
    terminus: &PyTerminus,
    queue: &PyQueue,
    area: &PyArea,
    peer: &PyTicket,
) -> PyResult<u64> {
    let peer = peer.ticket;
    let got = run(py, terminus, queue, area, move |t, q, area| {
        let mut answered = 0u64;
        loop {
            match next(q)? {
                BYE => return Ok(vec![answered]),
                PING => {
                    send(t, &peer, PING, word(area)? + 1)?;
                    answered += 1;
                }
                other => return Err(format!("unexpected tag {other}")),
            }
        }
    })?;
    Ok(got.first().copied().unwrap_or(0))
}

/// Sends `rounds` pings to `peer` and waits for each answer; the round trips in
/// nanoseconds. `bye` ends the pong's loop afterwards.
#[pyfunction]
#[pyo3(signature = (terminus, queue, area, peer, rounds, bye=true))]
pub(crate) fn bench_ping(
    py: Python<'_>,
    terminus: &PyTerminus,
    queue: &PyQueue,
    area: &PyArea,
    peer: &PyTicket,
    rounds: u64,
    bye: bool,
) -> PyResult<Vec<u64>> {
    let peer = peer.ticket;
    run(py, terminus, queue, area, move |t, q, area| {
        let mut times = Vec::with_capacity(usize::try_from(rounds).unwrap_or(0));
        for i in 0..rounds {
            let t0 = Instant::now();
            send(t, &peer, PING, i * 2)?;
            if next(q)? != PING {
                return Err("the answer has the wrong tag".to_owned());
            }
            let v = word(area)?;
            let dt = t0.elapsed();
            if v != i * 2 + 1 {
                return Err(format!("answer {v} to ping {}", i * 2));
            }
            times.push(u64::try_from(dt.as_nanos()).unwrap_or(u64::MAX));
        }
        if bye {
            send(t, &peer, BYE, 0)?;
        }
        Ok(times)
    })
}
