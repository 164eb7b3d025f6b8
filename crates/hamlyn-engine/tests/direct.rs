//! `OpenDirect` with raw clients: the engine checks the ticket before it hands out a
//! direct slot's descriptors, every refusal is typed, and what it hands out maps the
//! owner's very memory and notification queue (DESIGN §2, "Direct slots").
#![allow(clippy::unwrap_used)]

mod common;

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use common::{call, RawClient};
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_shm::notifq::{self, NotifLayout};
use hamlyn_shm::region::ShmRegion;
use hamlyn_wire::control::{mode, perm, ControlErrorCode, Reply, Request, NO_QUEUE};
use hamlyn_wire::{NotifEntry, NotifKind};

const INCARNATION: u32 = 0x1CE;

fn engine() -> EngineHandle {
    EngineHandle::start(EngineConfig {
        incarnation: INCARNATION,
        ..EngineConfig::embedded()
    })
    .unwrap()
}

/// Creates a slot of `owner` and returns (slot, key).
#[allow(clippy::too_many_arguments)]
fn slot(
    owner: &RawClient,
    area: u32,
    base: u64,
    len: u64,
    mode: u8,
    perms: u8,
    meta: (u32, u64, u32),
    queue: u32,
) -> Result<(u32, u64), Reply> {
    match owner.call(Request::CreateSlot {
        area,
        base,
        len,
        mode,
        perms,
        meta_area: meta.0,
        meta_base: meta.1,
        meta_count: meta.2,
        queue,
    }) {
        Reply::Slot { slot, key } => Ok((slot, key)),
        other => Err(other),
    }
}

fn open(c: &RawClient, node: u32, incarnation: u32, slot: u32, key: u64) -> (Reply, Vec<OwnedFd>) {
    use std::os::fd::AsFd;
    call(
        c.sock.as_fd(),
        &Request::OpenDirect {
            node,
            incarnation,
            slot,
            key,
        },
        &[],
    )
}

fn refused(r: (Reply, Vec<OwnedFd>)) -> ControlErrorCode {
    assert!(r.1.is_empty(), "a refusal carries no descriptors");
    match r.0 {
        Reply::Error { code, .. } => ControlErrorCode::from_u16(code).unwrap(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn open_direct_hands_out_the_owners_memory_and_queue() {
    let engine = engine();
    let mut owner = RawClient::attach(engine.socket_path(), 1, 3, 64);
    let sender = RawClient::attach(engine.socket_path(), 1, 1, 64);
    let (area, region) = owner.area(4 * 4096);
    let (meta_area, meta) = owner.area(8 * 128);
    let (s, key) = slot(
        &owner,
        area,
        4096 + 64,
        8192,
        mode::NORMAL,
        perm::WRITE | perm::DANGER_DIRECT,
        (meta_area, 256, 4),
        2,
    )
    .unwrap();
    let node = owner.node;
    let (reply, mut fds) = open(&sender, node, INCARNATION, s, key);
    let Reply::Direct {
        mode: m,
        base,
        len,
        meta_base,
        meta_count,
        queue_offset,
        queue_cap,
    } = reply
    else {
        panic!("{reply:?}")
    };
    assert_eq!((m, base, len), (mode::NORMAL, 4096 + 64, 8192));
    assert_eq!((meta_base, meta_count), (256, 4));
    let q = owner.layout.queues[2];
    assert_eq!((queue_offset, queue_cap), (q.offset() as u64, 64));
    assert_eq!(fds.len(), 4, "area, metadata area, queue file, eventfd");
    let _eventfd = fds.pop().unwrap();
    let queue_fd = fds.pop().unwrap();
    let meta_fd = fds.pop().unwrap();
    let area_fd = fds.pop().unwrap();

    // The slot's range, mapped alone: byte 0 is the slot's first byte.
    let mapped = ShmRegion::from_fd_range(area_fd, base, len as usize).unwrap();
    mapped.write(0, b"first").unwrap();
    mapped.write(len as usize - 4, b"last").unwrap();
    let mut got = [0u8; 5];
    region.read(4096 + 64, &mut got).unwrap();
    assert_eq!(&got, b"first");
    region.read(4096 + 64 + 8192 - 4, &mut got[..4]).unwrap();
    assert_eq!(&got[..4], b"last");
    // The slot's entries.
    let entries = ShmRegion::from_fd_range(meta_fd, meta_base, 4 * 128).unwrap();
    entries.write(128 + 60, &7u32.to_le_bytes()).unwrap();
    let mut acc = [0u8; 4];
    meta.read(256 + 128 + 60, &mut acc).unwrap();
    assert_eq!(u32::from_le_bytes(acc), 7);
    // The owner's queue 2, and only its pages: a post lands where the owner polls.
    let layout = NotifLayout::new(0, queue_cap).unwrap();
    let qmap = ShmRegion::from_fd_range(queue_fd, queue_offset, layout.bytes()).unwrap();
    let producer = notifq::Producer::attach(qmap, layout).unwrap();
    let mut e = NotifEntry::zeroed();
    e.kind.set(NotifKind::Message as u16);
    e.slot.set(s);
    e.word.set(0xD1EC7);
    producer.post(&e).unwrap();
    let n = owner.wait_notif(2).unwrap();
    assert_eq!((n.slot.get(), n.word.get()), (s, 0xD1EC7));
    assert!(owner.queues[0].poll().is_none() && owner.queues[1].poll().is_none());

    // A fast direct slot without a queue: only the message area travels.
    let (fast, fkey) = slot(
        &owner,
        area,
        0,
        4096,
        mode::FAST,
        perm::WRITE | perm::DANGER_DIRECT,
        (0, 0, 0),
        NO_QUEUE,
    )
    .unwrap();
    let (reply, fds) = open(&sender, node, 0, fast, fkey);
    assert!(matches!(
        reply,
        Reply::Direct {
            mode: mode::FAST,
            meta_count: 0,
            queue_cap: 0,
            ..
        }
    ));
    assert_eq!(fds.len(), 1);
    // The owner may map its own slot too.
    assert!(matches!(
        open(&owner, node, 0, fast, fkey).0,
        Reply::Direct { .. }
    ));

    let stats = owner.stats();
    assert_eq!(stats.engine.direct_opens, 3, "{stats:?}");
    assert!(stats.slots.iter().any(|s| s.direct), "{stats:?}");
}

#[test]
fn open_direct_refusals_are_typed() {
    let engine = engine();
    let owner = RawClient::attach(engine.socket_path(), 1, 1, 64);
    let sender = RawClient::attach(engine.socket_path(), 1, 1, 64);
    let (area, _) = owner.area(4096);
    let (meta_area, _) = owner.area(4 * 128);
    let meta = (meta_area, 0, 4);
    let direct = perm::WRITE | perm::DANGER_DIRECT;
    let (s, key) = slot(&owner, area, 0, 1024, mode::NORMAL, direct, meta, 0).unwrap();
    let (plain, pkey) = slot(&owner, area, 1024, 1024, mode::NORMAL, perm::WRITE, meta, 0).unwrap();
    let (ro, rokey) = slot(
        &owner,
        area,
        2048,
        1024,
        mode::NORMAL,
        perm::READ | perm::DANGER_DIRECT,
        meta,
        0,
    )
    .unwrap();
    let node = owner.node;
    let code = |slot, key| refused(open(&sender, node, 0, slot, key));

    assert_eq!(code(s, key ^ 1), ControlErrorCode::BadKey);
    assert_eq!(code(plain, pkey), ControlErrorCode::NotDirect);
    assert_eq!(code(ro, rokey), ControlErrorCode::NotDirect);
    assert_eq!(code(999, key), ControlErrorCode::NotFound);
    assert_eq!(
        refused(open(&sender, node + 1, 0, s, key)),
        ControlErrorCode::WrongNode
    );
    assert_eq!(
        refused(open(&sender, node, INCARNATION + 2, s, key)),
        ControlErrorCode::WrongNode,
        "a ticket from an earlier incarnation"
    );
    // Paranoid slots cannot be made direct at all.
    for m in [mode::PARANOID, mode::PARANOID_ONE_SHOT] {
        let r = slot(&owner, area, 0, 1024, m, direct, meta, 0).unwrap_err();
        assert!(
            matches!(r, Reply::Error { code, .. } if code == ControlErrorCode::InvalidArgument as u16),
            "{r:?}"
        );
    }
    // Revoke and rekey: later requests see the new state.
    assert_eq!(owner.call(Request::Revoke { slot: s }), Reply::Ok);
    assert_eq!(code(s, key), ControlErrorCode::Revoked);
    let Reply::Slot { key: new, .. } = owner.call(Request::Rekey { slot: s }) else {
        panic!("rekey")
    };
    assert_eq!(
        code(s, key),
        ControlErrorCode::BadKey,
        "the old key is dead"
    );
    assert!(matches!(
        open(&sender, node, 0, s, new).0,
        Reply::Direct { .. }
    ));
    assert_eq!(
        owner.call(Request::Inhibit { slot: s, on: true }),
        Reply::Ok
    );
    assert_eq!(code(s, new), ControlErrorCode::Inhibited);

    // The owner goes: its slot is not found any more.
    drop(owner);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match code(s, new) {
            ControlErrorCode::NotFound => break,
            c if Instant::now() < deadline => {
                assert_eq!(c, ControlErrorCode::Inhibited);
                std::thread::sleep(Duration::from_millis(5));
            }
            c => panic!("still {c:?} after the owner left"),
        }
    }
}
