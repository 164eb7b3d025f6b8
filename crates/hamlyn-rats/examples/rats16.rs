//! `rats16`: one 16-byte message at a time through the Rats layer and through the library
//! alone, for instruction counts (callgrind): what the layer adds to a tagged write's
//! critical path (issue 10; seed 001 Tables 1–2). `bench/instructions.sh` runs it and
//! `bench/rats_instructions.py` makes the table.
//!
//! One engine (embedded), a sender and a receiver connection for the library alone and
//! another pair for Rats, all in this process, three phases of N messages each (after a warm-up of [`WARMUP`] each),
//! separated by calls to `rats16_mark` (callgrind: `--dump-before=rats16_mark`):
//!
//! 1. `library`: `Terminus::send` of a tagged 16-byte inline message to a normal slot
//!    with a metadata entry, spin until its handle is done, one `NotifyQueue::poll`;
//! 2. `tagged`: `TaggedClient::write` of 16 bytes, spin until done, one
//!    `TaggedServer::get_tag`;
//! 3. `datagram`: `SimpleClient::send` of 16 bytes with a reply seed, spin until done,
//!    one `SimpleDatagram::ready`.
//!
//! Each side of each phase is a function of its own here (`lib_send`, `lib_receive`,
//! `rats_write`, `rats_get_tag`, `dgram_send`, `dgram_receive`), never inlined, so that
//! callgrind's inclusive count of it divided by N is that side's cost per message; each
//! returns what its call returns, as it is (errors are turned into the harness's own
//! outside them), and the handles are dropped outside them, alike in every phase.
//!
//! Usage: `rats16 [N]` (default 10000 messages per phase).

use std::error::Error;
use std::io::Write;

use hamlyn::{
    Data, Node, NodeOptions, Notification, NotifyQueue, SendError, SendHandle, SendOptions,
    Terminus, Ticket,
};
use hamlyn_rats::simple_datagram::{ReplySeed, SimpleClient, SimpleDatagram, SimpleMessage};
use hamlyn_rats::tagged::{TagArrival, TaggedClient, TaggedServer};
use hamlyn_rats::{Manager, RatsError};

/// Messages sent down each phase's path before the phases start.
const WARMUP: u64 = 2000;
/// The message.
const PAYLOAD: [u8; 16] = [0x5a; 16];

/// Marks the start of a phase: callgrind dumps its counters before each call.
#[no_mangle]
#[inline(never)]
pub extern "C" fn rats16_mark(phase: u32) {
    let _ = std::io::stderr().write_all(format!("rats16: phase {phase}\n").as_bytes());
    std::hint::black_box(phase);
}

#[inline(never)]
fn lib_send(t: &mut Terminus, to: &Ticket, i: u64) -> Result<SendHandle, SendError> {
    t.send(
        to,
        &SendOptions::new().tag(i).entry(0),
        Data::Inline(&PAYLOAD),
    )
}

#[inline(never)]
fn lib_receive(q: &mut NotifyQueue) -> Option<Notification> {
    q.poll()
}

#[inline(never)]
fn rats_write(c: &TaggedClient, i: u32) -> Result<SendHandle, RatsError> {
    c.write(0, &PAYLOAD, i)
}

#[inline(never)]
fn rats_get_tag(s: &TaggedServer) -> Result<Option<TagArrival>, RatsError> {
    s.get_tag()
}

#[inline(never)]
fn dgram_send(c: &SimpleClient, reply: &ReplySeed) -> Result<SendHandle, RatsError> {
    c.send(&PAYLOAD, Some(reply), b"")
}

#[inline(never)]
fn dgram_receive(r: &mut SimpleDatagram) -> Result<Option<SimpleMessage>, RatsError> {
    r.ready()
}

fn spin(h: &SendHandle) {
    // No yield and no sleep: a system call here would be the harness's, not the path's.
    while !h.is_done() {
        std::hint::spin_loop();
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let n: u64 = match std::env::args().nth(1) {
        Some(a) => a.parse()?,
        None => 10_000,
    };
    let engine = Node::embedded()?;
    let options = NodeOptions {
        queue_cap: 4096,
        ..NodeOptions::default()
    };
    let connect = || Node::connect_with(engine.socket_path(), options.clone());
    // The library alone, on connections of its own (a Rats manager takes its node's
    // queue): a normal slot with a metadata entry, as a Rats tagged server's.
    let (lib_rx, lib_tx) = (connect()?, connect()?);
    let inbox = lib_rx.area(4096)?;
    let meta = lib_rx.meta_area(4)?;
    let slot = lib_rx.slot(&inbox).meta(&meta).queue(0).create()?;
    let ticket = slot.ticket_all()?;
    let mut queue = lib_rx.queue(0)?;
    let mut terminus = lib_tx.terminus(0)?;
    let (rx, tx) = (connect()?, connect()?);

    let (m_rx, m_tx) = (Manager::new(&rx)?, Manager::new(&tx)?);
    let server = TaggedServer::new(&m_rx, 4096)?;
    let client = TaggedClient::from_seed(&m_tx, &server.make_seed()?)?;
    let mut dgram_rx = SimpleDatagram::new(&m_rx, 4096)?;
    let dgram_tx = SimpleClient::from_seed(&m_tx, &dgram_rx.make_seed()?)?;
    let reply_to = SimpleDatagram::new(&m_tx, 4096)?;
    let reply = reply_to.metadata_for_self()?;

    let mut library = |i: u64| -> Result<(), Box<dyn Error>> {
        let h = lib_send(&mut terminus, &ticket, i)?;
        spin(&h);
        let got = lib_receive(&mut queue).ok_or("no notification")?;
        if got.word != i {
            return Err(format!("notification {} for message {i}", got.word).into());
        }
        Ok(())
    };
    let tagged = |i: u64| -> Result<(), Box<dyn Error>> {
        let h = rats_write(&client, i as u32)?;
        spin(&h);
        let got = rats_get_tag(&server)?.ok_or("no tag")?;
        if got.tag != i as u32 {
            return Err(format!("tag {} for message {i}", got.tag).into());
        }
        Ok(())
    };
    let mut datagram = |_: u64| -> Result<(), Box<dyn Error>> {
        let h = dgram_send(&dgram_tx, &reply)?;
        spin(&h);
        dgram_receive(&mut dgram_rx)?.ok_or("no datagram")?;
        Ok(())
    };
    for i in 0..WARMUP {
        library(i)?;
        tagged(i)?;
        datagram(i)?;
    }
    rats16_mark(1);
    for i in 0..n {
        library(WARMUP + i)?;
    }
    rats16_mark(2);
    for i in 0..n {
        tagged(WARMUP + i)?;
    }
    rats16_mark(3);
    for i in 0..n {
        datagram(WARMUP + i)?;
    }
    rats16_mark(4);
    drop(slot);
    println!("rats16: {n} messages per phase");
    Ok(())
}
