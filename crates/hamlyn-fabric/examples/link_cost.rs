//! What authenticated, encrypted links cost: two TCP fabrics on loopback in one thread,
//! ping-pong latency and one-way bandwidth with `danger_insecure` links (plain) and with
//! Noise links (authenticated and encrypted), in one run, as ratios.
//!
//! `cargo run --release -p hamlyn-fabric --example link_cost [-- --quick]`
//!
//! Both fabrics share one thread (the figures include both ends' work); absolute numbers
//! on a shared machine are noise, the secure ÷ plain ratio of one run is the result.

use std::time::{Duration, Instant as WallInstant};

use hamlyn_fabric::tcp::{tcp_cluster, Clock, ClusterSecret, PeerState, TcpConfig, TcpFabric};
use hamlyn_fabric::{Fabric, FabricError, Landing, PacketSink, PeerEvent, SharedBytesMut};
use hamlyn_wire::{Flags, Header, NodeId, Op, RequestId};

/// Counts arrivals; every payload lands in one reused buffer.
struct Sink {
    buf: Vec<u8>,
    got: u64,
}

impl PacketSink for Sink {
    fn on_header(&mut self, _: NodeId, h: &Header, _: &[u8]) -> Landing {
        self.buf.resize(h.payload_len as usize, 0);
        Landing::Accept
    }
    fn payload_buf(&mut self, _: &Header) -> SharedBytesMut<'_> {
        SharedBytesMut::from(&mut self.buf[..])
    }
    fn on_payload(&mut self, _: NodeId, _: &Header, _: &[u8]) {
        self.got += 1;
    }
    fn on_peer(&mut self, _: PeerEvent) {}
}

type Error = Box<dyn std::error::Error>;

fn pair(secure: bool) -> Result<(TcpFabric, TcpFabric, Clock), Error> {
    let mut c = TcpConfig::new(NodeId(0), ([127, 0, 0, 1], 0).into());
    c.rails = 1;
    if secure {
        c.secret = Some(ClusterSecret::generate()?);
    } else {
        c.danger_insecure = true;
    }
    let mut v = tcp_cluster(2, &c)?;
    let (Some(b), Some(a)) = (v.pop(), v.pop()) else {
        return Err("two fabrics".into());
    };
    let (mut a, mut b, clock) = (a, b, Clock::new());
    let mut s = [new_sink(), new_sink()];
    let deadline = WallInstant::now() + Duration::from_secs(20);
    while !matches!(a.peer_state(NodeId(1)), Some(PeerState::Up { .. }))
        || !matches!(b.peer_state(NodeId(0)), Some(PeerState::Up { .. }))
    {
        a.poll(clock.now(), &mut s[0], 64)?;
        b.poll(clock.now(), &mut s[1], 64)?;
        if WallInstant::now() > deadline {
            return Err("the pair never came up".into());
        }
    }
    Ok((a, b, clock))
}

fn new_sink() -> Sink {
    Sink {
        buf: Vec::new(),
        got: 0,
    }
}

fn header(src: u32, dst: u32, len: usize, seq: u32) -> Header {
    let mut h = Header::new(Op::Write);
    h.flags = Flags::FIRST | Flags::LAST;
    h.src = NodeId(src);
    h.dst = NodeId(dst);
    h.payload_len = len as u32;
    h.request = RequestId { terminus: 0, seq };
    h
}

/// Sends one packet, polling both ends while the link is full.
fn send(
    from: &mut TcpFabric,
    to: &mut TcpFabric,
    s: &mut [Sink; 2],
    clock: &Clock,
    h: &Header,
    payload: &[u8],
    rev: bool,
) -> Result<(), Error> {
    loop {
        match from.send(clock.now(), h, &[], &[payload.into()]) {
            Ok(()) => return Ok(()),
            Err(FabricError::Full) => {
                let (sf, st) = if rev { (1, 0) } else { (0, 1) };
                from.poll(clock.now(), &mut s[sf], 64)?;
                to.poll(clock.now(), &mut s[st], 64)?;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Mean one-way latency (half a round trip) of `iters` ping-pongs of `len` bytes.
fn latency(secure: bool, len: usize, iters: u32) -> Result<f64, Error> {
    let (mut a, mut b, clock) = pair(secure)?;
    let mut s = [new_sink(), new_sink()];
    let payload = vec![7u8; len];
    let start = WallInstant::now();
    for i in 0..iters {
        send(
            &mut a,
            &mut b,
            &mut s,
            &clock,
            &header(0, 1, len, i),
            &payload,
            false,
        )?;
        while s[1].got <= u64::from(i) {
            b.poll(clock.now(), &mut s[1], 64)?;
            a.poll(clock.now(), &mut s[0], 64)?;
        }
        send(
            &mut b,
            &mut a,
            &mut s,
            &clock,
            &header(1, 0, len, i),
            &payload,
            true,
        )?;
        while s[0].got <= u64::from(i) {
            a.poll(clock.now(), &mut s[0], 64)?;
            b.poll(clock.now(), &mut s[1], 64)?;
        }
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / f64::from(iters) / 2.0)
}

/// GB/s of `count` packets of `len` bytes one way.
fn bandwidth(secure: bool, len: usize, count: u32) -> Result<f64, Error> {
    let (mut a, mut b, clock) = pair(secure)?;
    let mut s = [new_sink(), new_sink()];
    let payload = vec![7u8; len];
    let start = WallInstant::now();
    for i in 0..count {
        send(
            &mut a,
            &mut b,
            &mut s,
            &clock,
            &header(0, 1, len, i),
            &payload,
            false,
        )?;
        b.poll(clock.now(), &mut s[1], 64)?;
    }
    while s[1].got < u64::from(count) {
        a.poll(clock.now(), &mut s[0], 64)?;
        b.poll(clock.now(), &mut s[1], 64)?;
    }
    Ok(len as f64 * f64::from(count) / start.elapsed().as_secs_f64() / 1e9)
}

fn main() -> Result<(), Error> {
    let quick = std::env::args().any(|a| a == "--quick");
    let k = if quick { 10 } else { 1 };
    println!("{:<28} {:>12} {:>12} {:>8}", "", "plain", "secure", "ratio");
    for (len, iters) in [(8usize, 20_000u32), (4096, 10_000), (65_536, 2_000)] {
        let p = latency(false, len, iters / k)?;
        let s = latency(true, len, iters / k)?;
        println!(
            "{:<28} {:>9.2} µs {:>9.2} µs {:>7.2}×",
            format!("one-way latency {len} B"),
            p,
            s,
            s / p
        );
    }
    for (len, count) in [(65_536usize, 8_192u32), (1 << 20, 512)] {
        let p = bandwidth(false, len, count / k)?;
        let s = bandwidth(true, len, count / k)?;
        println!(
            "{:<28} {:>8.2} GB/s {:>7.2} GB/s {:>7.2}×",
            format!("bandwidth {len} B"),
            p,
            s,
            s / p
        );
    }
    Ok(())
}
