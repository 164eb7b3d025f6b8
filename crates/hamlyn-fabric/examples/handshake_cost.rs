//! What a link's handshake costs with node identities: the TCP fabric's
//! `Noise_XXpsk0_25519_ChaChaPoly_BLAKE2s` (three messages, static keys: five X25519
//! operations a side counting key generation, instead of three), beside the
//! `Noise_NNpsk0` handshake the links ran before (ephemeral keys only), both in memory on
//! one thread (both ends' work), and a whole session set-up over loopback (two fabrics:
//! connect, handshake, HELLOs, up) with the fabric as it is.
//!
//! `cargo run --release -p hamlyn-fabric --example handshake_cost`
//!
//! Absolute numbers on a shared machine are noise; the ratio of one run is the result.

use std::time::{Duration, Instant as WallInstant};

use hamlyn_fabric::tcp::secure::{Link, Opened, HANDSHAKE_PAYLOAD, MAX_PLAIN};
use hamlyn_fabric::tcp::{tcp_cluster, Clock, ClusterSecret, NodeKey, PeerState, TcpConfig};
use hamlyn_fabric::{Fabric, Landing, PacketSink, PeerEvent, SharedBytesMut};
use hamlyn_wire::{Header, NodeId};

type Error = Box<dyn std::error::Error>;

const ROUNDS: u32 = 2000;

/// One XXpsk0 handshake through the fabric's `Link`, both ends.
fn xx(secret: &ClusterSecret, dk: &NodeKey, ak: &NodeKey, out: &mut [u8]) -> Result<(), Error> {
    let (mut d, first) = Link::dialer(secret, dk)?;
    let mut a = Link::acceptor(secret, ak)?;
    a.push(&first);
    if a.open(out)? != Opened::Reply {
        return Err("no reply".into());
    }
    d.push(&a.take_handshake_out());
    if d.open(out)? != Opened::Secured {
        return Err("dialer not secured".into());
    }
    a.push(&d.take_handshake_out());
    if a.open(out)? != Opened::Secured {
        return Err("acceptor not secured".into());
    }
    Ok(())
}

/// One NNpsk0 handshake as the links ran it before: snow directly, the same secret,
/// prologue and payload.
fn nn(secret: &ClusterSecret, buf: &mut [u8], payload: &mut [u8]) -> Result<(), Error> {
    let params: snow::params::NoiseParams = "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s".parse()?;
    let build = || {
        snow::Builder::new(params.clone())
            .psk(0, secret.as_bytes())?
            .prologue(b"hamlyn tcp fabric, records v1")
    };
    let mut d = build()?.build_initiator()?;
    let mut a = build()?.build_responder()?;
    let n = d.write_message(&HANDSHAKE_PAYLOAD, buf)?;
    a.read_message(&buf[..n], payload)?;
    let n = a.write_message(&HANDSHAKE_PAYLOAD, buf)?;
    d.read_message(&buf[..n], payload)?;
    let _ = (d.into_transport_mode()?, a.into_transport_mode()?);
    Ok(())
}

struct Quiet;

impl PacketSink for Quiet {
    fn on_header(&mut self, _: NodeId, _: &Header, _: &[u8]) -> Landing {
        Landing::Discard
    }
    fn payload_buf(&mut self, _: &Header) -> SharedBytesMut<'_> {
        SharedBytesMut::from(&mut [][..])
    }
    fn on_payload(&mut self, _: NodeId, _: &Header, _: &[u8]) {}
    fn on_peer(&mut self, _: PeerEvent) {}
    fn on_unconfirmed(&mut self, _: NodeId, _: &Header) {}
}

/// Time from the first poll of two fresh fabrics to both seeing the other up.
fn session_setup(secure: bool) -> Result<Duration, Error> {
    let mut c = TcpConfig::new(NodeId(0), ([127, 0, 0, 1], 0).into());
    c.rails = 1;
    c.danger_insecure = !secure;
    let mut v = tcp_cluster(2, &c)?;
    let clock = Clock::new();
    let start = WallInstant::now();
    let up = |f: &hamlyn_fabric::tcp::TcpFabric, n| {
        matches!(f.peer_state(NodeId(n)), Some(PeerState::Up { .. }))
    };
    while !(up(&v[0], 1) && up(&v[1], 0)) {
        for f in v.iter_mut() {
            f.poll(clock.now(), &mut Quiet, 64)?;
        }
        if start.elapsed() > Duration::from_secs(10) {
            return Err("no session".into());
        }
    }
    Ok(start.elapsed())
}

fn main() -> Result<(), Error> {
    let secret = ClusterSecret::generate()?;
    let (dk, ak) = (NodeKey::generate()?, NodeKey::generate()?);
    let mut out = vec![0u8; MAX_PLAIN];
    let (mut buf, mut payload) = (vec![0u8; 256], vec![0u8; 256]);
    // Warm up, then time each kind.
    for _ in 0..50 {
        xx(&secret, &dk, &ak, &mut out)?;
        nn(&secret, &mut buf, &mut payload)?;
    }
    // Medians: on a loaded machine a mean mostly measures the scheduler.
    let mut nn_t = Vec::new();
    let mut xx_t = Vec::new();
    for _ in 0..ROUNDS {
        let t = WallInstant::now();
        nn(&secret, &mut buf, &mut payload)?;
        nn_t.push(t.elapsed());
        let t = WallInstant::now();
        xx(&secret, &dk, &ak, &mut out)?;
        xx_t.push(t.elapsed());
    }
    nn_t.sort();
    xx_t.sort();
    let nn_us = nn_t[nn_t.len() / 2].as_secs_f64() * 1e6;
    let xx_us = xx_t[xx_t.len() / 2].as_secs_f64() * 1e6;
    println!("handshake, both ends in memory, median of {ROUNDS}:");
    println!("  NNpsk0 (before: ephemeral keys only)   {nn_us:8.1} µs");
    println!(
        "  XXpsk0 (now: static keys, via Link)    {xx_us:8.1} µs  ({:.2}x)",
        xx_us / nn_us
    );
    let mut plain = Vec::new();
    let mut secure = Vec::new();
    for _ in 0..20 {
        plain.push(session_setup(false)?);
        secure.push(session_setup(true)?);
    }
    plain.sort();
    secure.sort();
    println!("session set-up over loopback (1 rail, both fabrics on one thread), median of 20:");
    println!(
        "  danger_insecure  {:8.1} µs",
        plain[10].as_secs_f64() * 1e6
    );
    println!(
        "  XXpsk0           {:8.1} µs",
        secure[10].as_secs_f64() * 1e6
    );
    Ok(())
}
