//! Issue 17: what one client may hold is bounded, a request past a bound is refused with a
//! typed error and counted, what a client held is returned when it leaves, and
//! connections that never attach are closed — all while a well-behaved pair of clients
//! keeps exchanging messages through the same engine.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use common::{call, connect, inline, RawClient};
use hamlyn_engine::{EngineConfig, EngineHandle, Quotas};
use hamlyn_shm::region::ShmRegion;
use hamlyn_wire::control::{mode, perm, ControlErrorCode, Reply, Request};

const MIB: u64 = 1 << 20;

/// A well-behaved sender and receiver: one message per `round`, checked.
struct Pair {
    tx: RawClient,
    rx: RawClient,
    slot: u32,
    key: u64,
    region: std::sync::Arc<ShmRegion>,
    rounds: u64,
}

impl Pair {
    fn new(engine: &EngineHandle) -> Pair {
        let rx = RawClient::attach(engine.socket_path(), 1, 1, 256);
        let tx = RawClient::attach(engine.socket_path(), 1, 1, 256);
        tx.open(0, 0);
        let (area, region) = rx.area(4096);
        let (meta, _) = rx.area(128);
        let Reply::Slot { slot, key } = rx.call(Request::CreateSlot {
            area,
            base: 0,
            len: 4096,
            mode: mode::NORMAL,
            perms: perm::WRITE,
            meta_area: meta,
            meta_base: 0,
            meta_count: 1,
            queue: 0,
        }) else {
            panic!("slot")
        };
        Pair {
            tx,
            rx,
            slot,
            key,
            region,
            rounds: 0,
        }
    }

    /// One more message goes through, byte-exact.
    fn round(&mut self) {
        let r = self.rounds;
        self.tx
            .push(
                0,
                inline(
                    self.tx.node,
                    self.slot,
                    self.key,
                    0,
                    64,
                    &r.to_le_bytes(),
                    r,
                ),
            )
            .unwrap();
        let n = self.rx.wait_notif(0).expect("the good message arrives");
        assert_eq!(n.word.get(), r);
        let mut b = [0u8; 8];
        self.region.read(64, &mut b).unwrap();
        assert_eq!(u64::from_le_bytes(b), r);
        self.rounds += 1;
    }
}

fn register(c: &RawClient, len: u64) -> Result<u32, (Option<ControlErrorCode>, String)> {
    let region = ShmRegion::create("quota-area", len as usize).unwrap();
    let (reply, _) = call(
        c.sock.as_fd(),
        &Request::RegisterArea { len },
        &[region.fd()],
    );
    match reply {
        Reply::Area { area } => Ok(area),
        Reply::Error { code, message } => Err((ControlErrorCode::from_u16(code), message)),
        other => panic!("{other:?}"),
    }
}

fn slot(c: &RawClient, area: u32) -> Result<u32, Option<ControlErrorCode>> {
    match c.call(Request::CreateSlot {
        area,
        base: 0,
        len: 64,
        mode: mode::FAST,
        perms: perm::WRITE,
        meta_area: 0,
        meta_base: 0,
        meta_count: 0,
        queue: u32::MAX,
    }) {
        Reply::Slot { slot, .. } => Ok(slot),
        Reply::Error { code, .. } => Err(ControlErrorCode::from_u16(code)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn quotas_refuse_what_is_past_them_and_what_a_client_held_comes_back() {
    let mut cfg = EngineConfig::embedded();
    cfg.quotas = Quotas {
        areas: 8,
        area_bytes: 1024 * MIB,
        slots: 16,
        termini: 4,
        queues: 2,
    };
    cfg.max_mapped = 1536 * MIB;
    let engine = EngineHandle::start(cfg).unwrap();
    let mut good = Pair::new(&engine);
    good.round();
    let mut refused = 0;

    // A port past the termini quota.
    let sock = connect(engine.socket_path());
    let (reply, _) = call(
        sock.as_fd(),
        &Request::Attach {
            version: hamlyn_wire::control::CONTROL_VERSION,
            pid: 1,
            termini: 8,
            queues: 1,
            queue_cap: 64,
        },
        &[],
    );
    assert!(
        matches!(reply, Reply::Error { code, .. } if code == ControlErrorCode::Quota as u16),
        "{reply:?}"
    );
    refused += 1;
    good.round();

    // Bytes of areas: three of 256 MiB, then 512 MiB more is past 1 GiB.
    let bad = RawClient::attach(engine.socket_path(), 1, 1, 64);
    for _ in 0..3 {
        register(&bad, 256 * MIB).unwrap();
    }
    let e = register(&bad, 512 * MIB).unwrap_err();
    assert_eq!(e.0, Some(ControlErrorCode::Quota), "{e:?}");
    refused += 1;
    good.round();
    // The number of areas: five more small ones, then the ninth.
    let mut small = Vec::new();
    for _ in 0..5 {
        small.push(register(&bad, 4096).unwrap());
    }
    assert_eq!(
        register(&bad, 4096).unwrap_err().0,
        Some(ControlErrorCode::Quota)
    );
    refused += 1;
    good.round();
    // The engine's mapping budget: another client's 1 GiB does not fit beside bad's.
    let other = RawClient::attach(engine.socket_path(), 1, 1, 64);
    let e = register(&other, 1024 * MIB).unwrap_err();
    assert_eq!(e.0, Some(ControlErrorCode::Quota), "{e:?}");
    refused += 1;
    // Slots: sixteen, then the seventeenth; destroying one makes room again.
    let mut slots = Vec::new();
    for _ in 0..16 {
        slots.push(slot(&bad, small[0]).unwrap());
    }
    assert_eq!(slot(&bad, small[0]), Err(Some(ControlErrorCode::Quota)));
    refused += 1;
    assert!(matches!(
        bad.call(Request::DestroySlot { slot: slots[0] }),
        Reply::Ok
    ));
    slot(&bad, small[0]).unwrap();
    good.round();

    let stats = good.rx.stats();
    assert_eq!(stats.engine.quota_refusals, refused, "{:?}", stats.engine);
    assert_eq!(
        stats.slots.iter().filter(|s| s.owner == bad.client).count(),
        16
    );

    // The client leaves: its slots and areas go, and the budget is free again.
    let bad_id = bad.client;
    drop(bad);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = good.rx.stats();
        if !s.slots.iter().any(|sl| sl.owner == bad_id) && register(&other, 1024 * MIB).is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "what the client held never came back"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    good.round();
    drop(other);
    engine.stop().unwrap();
}

#[test]
fn connections_that_never_attach_are_closed_and_make_room() {
    let mut cfg = EngineConfig::embedded();
    cfg.max_clients = 12;
    cfg.attach_timeout = Duration::from_millis(200);
    let engine = EngineHandle::start(cfg).unwrap();
    let mut good = Pair::new(&engine);
    // Fill every other place with connections that never attach.
    let idle: Vec<_> = (0..10).map(|_| connect(engine.socket_path())).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        good.round();
        let s = good.rx.stats();
        if s.engine.idle_closed >= idle.len() as u64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "idle connections kept: {:?}",
            s.engine
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Their places are free: a new client attaches.
    let late = RawClient::attach(engine.socket_path(), 1, 1, 64);
    assert!(late.client < 12);
    good.round();
    drop(idle);
    engine.stop().unwrap();
}

#[test]
fn one_user_cannot_take_every_place() {
    let mut cfg = EngineConfig::embedded();
    cfg.max_clients = 16;
    cfg.max_clients_per_user = 6;
    let engine = EngineHandle::start(cfg).unwrap();
    // The test runs as one user: the pair takes 2 of its 6 places.
    let mut good = Pair::new(&engine);
    let held: Vec<_> = (0..4)
        .map(|_| RawClient::attach(engine.socket_path(), 1, 1, 64))
        .collect();
    good.round();
    // A seventh connection of the same user is refused (closed at once) and counted.
    let extra = connect(engine.socket_path());
    let mut buf = [0u8; 16];
    let n = rustix::io::read(&extra, &mut buf).unwrap_or(0);
    assert_eq!(n, 0, "closed without a word");
    let s = good.rx.stats();
    assert_eq!(s.engine.connections_refused, 1, "{:?}", s.engine);
    // One leaves: there is a place again.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        good.round();
        if good.rx.stats().ports.len() == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "the places never came back");
        std::thread::sleep(Duration::from_millis(10));
    }
    let again = RawClient::attach(engine.socket_path(), 1, 1, 64);
    assert!(again.client < 16);
    good.round();
    engine.stop().unwrap();
}
