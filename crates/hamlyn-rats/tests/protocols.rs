//! Every protocol between two clients of one engine (two managers, two ports: what two
//! processes on one node have, mediated by the engine), byte-exact, with the bad input a
//! malicious peer can forge refused, counted, and the instance working on.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use hamlyn::{Data, Node, Seed, SendOptions};
use hamlyn_rats::datagram::{DatagramReceiver, DatagramSender};
use hamlyn_rats::remote_write::{RemoteWriteClient, RemoteWriteServer};
use hamlyn_rats::simple_datagram::{split_seed, SimpleClient, SimpleDatagram};
use hamlyn_rats::tagged::{TaggedClient, TaggedServer};
use hamlyn_rats::{Manager, ManagerOptions, RatsError};

const WAIT: Option<Duration> = Some(Duration::from_secs(10));

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

/// Two managers on two ports of one engine; the seed of each travels as text.
fn pair() -> (Node, Manager, Manager) {
    let a = Node::embedded().unwrap();
    let b = Node::connect(a.socket_path()).unwrap();
    let ma = Manager::new(&a).unwrap();
    let mb = Manager::new(&b).unwrap();
    (a, ma, mb)
}

fn via_text(seed: &Seed) -> Seed {
    hamlyn::seed::from_text(&hamlyn::seed::to_text(seed).unwrap()).unwrap()
}

#[test]
fn tagged_writes_arrive_by_tag_and_waiting_for_one_loses_none_of_the_others() {
    let (_node, ma, mb) = pair();
    let server = TaggedServer::new(&ma, 64 * 1024).unwrap();
    let client = TaggedClient::from_seed(&mb, &via_text(&server.make_seed().unwrap())).unwrap();
    let sizes = [0usize, 1, 16, 128, 129, 1000, 4096];
    let mut handles = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let data = pattern(i as u32, n);
        handles.push(
            client
                .write(i as u64 * 8192, &data, 100 + i as u32)
                .unwrap(),
        );
    }
    for h in &handles {
        assert!(!h.wait(WAIT).is_failed());
    }
    // The last one first: the others stay queued.
    let last = server
        .get_specific_tag(100 + sizes.len() as u32 - 1, WAIT)
        .unwrap()
        .unwrap();
    assert_eq!(last.len, 4096);
    let mut seen = vec![last.tag];
    while let Some(a) = server.get_tag().unwrap() {
        let i = (a.tag - 100) as usize;
        assert_eq!((a.offset, a.len), (i as u64 * 8192, sizes[i] as u64));
        assert_eq!(
            server.read_arrival(&a).unwrap(),
            pattern(i as u32, sizes[i])
        );
        seen.push(a.tag);
    }
    seen.sort_unstable();
    assert_eq!(seen, (100..100 + sizes.len() as u32).collect::<Vec<_>>());
    assert!(matches!(
        client.write(0, &[0; 4097], 1),
        Err(RatsError::TooLong { .. })
    ));
    // A seed of another protocol is a clear error.
    let rw = RemoteWriteServer::new(&ma, 64).unwrap();
    assert!(matches!(
        TaggedClient::from_seed(&mb, &rw.make_seed().unwrap()),
        Err(RatsError::WrongProtocol { .. })
    ));
    assert_eq!(ma.stats().forged, 0);
}

#[test]
fn remote_writes_scatter_and_gather_without_notifying() {
    let (_node, ma, mb) = pair();
    let server = RemoteWriteServer::new(&ma, 8 << 20).unwrap();
    let client = RemoteWriteClient::from_seed(&mb, &server.make_seed().unwrap()).unwrap();
    let big = pattern(1, 4 << 20);
    let h = client.write(100, &big).unwrap();
    assert!(!h.wait(WAIT).is_failed());
    // Gather: two buffers of the client land back to back.
    let b1 = mb.alloc(1000).unwrap();
    let b2 = mb.alloc(3000).unwrap();
    b1.write(0, &pattern(2, 1000)).unwrap();
    b2.write(0, &pattern(3, 3000)).unwrap();
    let h = client
        .write_gather(6 << 20, &[(&b1, 0, 1000), (&b2, 0, 3000)])
        .unwrap();
    assert!(!h.wait(WAIT).is_failed());
    // Scatter: pieces at their own offsets.
    for h in client
        .write_scatter(&[(7 << 20, b"abc"), ((7 << 20) + 10, b"defgh")])
        .unwrap()
    {
        assert!(!h.wait(WAIT).is_failed());
    }
    let mut got = vec![0u8; big.len()];
    server.read(100, &mut got).unwrap();
    assert!(got == big, "4 MiB byte-exact");
    let mut g = vec![0u8; 4000];
    server.read(6 << 20, &mut g).unwrap();
    assert_eq!(&g[..1000], &pattern(2, 1000)[..]);
    assert_eq!(&g[1000..], &pattern(3, 3000)[..]);
    let mut s = [0u8; 15];
    server.read(7 << 20, &mut s).unwrap();
    assert_eq!(&s, b"abc\0\0\0\0\0\0\0defgh");
    assert_eq!(ma.next_ready(), None, "no notification for remote writes");
}

#[test]
fn datagrams_from_eight_senders_to_a_slow_receiver_are_all_delivered_with_back_pressure() {
    let node = Node::embedded().unwrap();
    let rx_node = Node::connect(node.socket_path()).unwrap();
    let rm = Manager::new(&rx_node).unwrap();
    let mut rx = DatagramReceiver::new(&rm, 16, 4096).unwrap();
    const SENDERS: usize = 8;
    const PER_SENDER: usize = 40;
    let seeds: Vec<Seed> = (0..SENDERS).map(|_| rx.make_seed(2).unwrap()).collect();
    let sm = Manager::new(&node).unwrap();
    let mut senders: Vec<DatagramSender> = seeds
        .iter()
        .map(|s| DatagramSender::from_seed(&sm, &via_text(s)).unwrap())
        .collect();
    let mut sent = [0usize; SENDERS];
    let mut got = vec![Vec::new(); SENDERS];
    let mut refused = 0u64;
    let mut handles = Vec::new();
    // Bounded: every round the receiver takes and releases at most one datagram, and
    // every sender tries once.
    for _round in 0..100_000 {
        if got.iter().map(Vec::len).sum::<usize>() == SENDERS * PER_SENDER {
            break;
        }
        for (i, s) in senders.iter_mut().enumerate() {
            if sent[i] == PER_SENDER {
                continue;
            }
            let len = (sent[i] * 97 + i * 13) % 4097;
            let data = pattern((i * 1000 + sent[i]) as u32, len);
            match s.send(&data, &[i as u8, sent[i] as u8]) {
                Ok(h) => {
                    sent[i] += 1;
                    handles.push(h);
                }
                Err(RatsError::Full) => refused += 1,
                Err(e) => panic!("{e}"),
            }
        }
        // A short wait: credits on their way back are picked up by the senders' next try.
        if let Some(d) = rx.recv(Some(Duration::from_millis(1))).unwrap() {
            let (i, k) = (d.oob()[0] as usize, d.oob()[1] as usize);
            assert_eq!(d.sender as usize, i);
            let want = pattern((i * 1000 + k) as u32, (k * 97 + i * 13) % 4097);
            assert_eq!(rx.to_vec(&d).unwrap(), want, "sender {i} datagram {k}");
            got[i].push(k);
            rx.release(d).unwrap();
        }
    }
    for (i, g) in got.iter_mut().enumerate() {
        g.sort_unstable();
        assert_eq!(*g, (0..PER_SENDER).collect::<Vec<_>>(), "sender {i}");
    }
    assert!(refused > 0, "senders saw back-pressure");
    for h in &handles {
        assert!(
            !h.wait(WAIT).is_failed(),
            "no datagram was refused: never overrun"
        );
    }
    assert_eq!((rm.stats().forged, rx.forged()), (0, 0));
    // A sender that waits gets its credit back as soon as the receiver releases. (The
    // credits of the last releases above may still be on their way: the first two sends
    // wait for them.)
    let s = &mut senders[0];
    s.send_wait(b"one", &[], WAIT).unwrap();
    s.send_wait(b"two", &[], WAIT).unwrap();
    assert!(matches!(s.send(b"three", &[]), Err(RatsError::Full)));
    let d = rx.recv(WAIT).unwrap().unwrap();
    rx.release(d).unwrap();
    s.send_wait(b"three", &[], WAIT).unwrap();
    // Without a copy, from the sender's message space, once a credit is back.
    for _ in 0..3 {
        if let Some(d) = rx.recv(Some(Duration::ZERO)).unwrap() {
            rx.release(d).unwrap();
        }
    }
    let buf = sm.alloc(4096).unwrap();
    buf.write(0, &pattern(77, 4096)).unwrap();
    let mut credited = false;
    for _ in 0..100_000 {
        if s.credits() > 0 {
            credited = true;
            break;
        }
        if let Some(d) = rx.recv(Some(Duration::from_millis(1))).unwrap() {
            rx.release(d).unwrap();
        }
    }
    assert!(credited);
    let h = s.send_buffer(buf, 4096, b"zc").unwrap();
    assert!(!h.wait(WAIT).is_failed());
    let got = (0..100)
        .find_map(|_| rx.recv(WAIT).unwrap().filter(|d| d.oob() == b"zc"))
        .expect("the zero-copy datagram");
    assert_eq!(rx.to_vec(&got).unwrap(), pattern(77, 4096));
}

#[test]
fn forged_datagrams_are_refused_counted_and_change_nothing_outside_the_grant() {
    let (node_a, rm, sm) = pair();
    let mut rx = DatagramReceiver::new(&rm, 4, 1024).unwrap();
    let seed = rx.make_seed(2).unwrap();
    let mut good = DatagramSender::from_seed(&sm, &seed).unwrap();
    // A malicious peer holding the same grants, writing by hand.
    let peer = Node::connect(node_a.socket_path()).unwrap();
    let pa = peer.area(8192).unwrap();
    pa.write(0, &[0xEE; 8192]).unwrap();
    let mut pt = peer.terminus(0).unwrap();
    let grant = seed.tickets[0];
    // Lying metadata (wrong token) on a granted buffer: accepted by the engine (the key
    // is right), refused by the protocol.
    let mut meta = vec![1u8];
    meta.extend_from_slice(&0u32.to_le_bytes());
    meta.extend_from_slice(&0xBAD_u64.to_le_bytes());
    meta.extend_from_slice(&[0u8; 36]);
    let h = pt
        .send(
            &grant,
            &SendOptions::new().meta(&meta).entry(0),
            Data::Inline(b"forged"),
        )
        .unwrap();
    assert!(!h.wait(WAIT).is_failed());
    assert!(rx.recv(Some(Duration::ZERO)).unwrap().is_none());
    assert_eq!(rx.forged(), 1);
    // Bytes beyond the grant's buffer: the engine refuses them (paranoid range).
    let wide = hamlyn::Ticket { len: 4096, ..grant };
    let h = pt
        .send(
            &wide,
            &SendOptions::new().offset(1024).entry(0),
            Data::Inline(b"x"),
        )
        .unwrap();
    assert!(h.wait(WAIT).is_failed(), "outside the granted range");
    // The instance keeps working: the good sender's datagram arrives whole. (The forged
    // one used up that grant's one message; the good sender's first credit is that one,
    // so it uses its second by sending twice.)
    let _ = good.send(b"first", &[1]);
    let h = good.send(b"second", &[2]).unwrap();
    assert!(!h.wait(WAIT).is_failed());
    let d = rx.recv(WAIT).unwrap().unwrap();
    assert_eq!(rx.to_vec(&d).unwrap(), b"second");
    assert_eq!(d.oob(), &[2]);
    let mut other = vec![0u8; 1024];
    rx.read(&d, &mut other[..6]).unwrap();
    assert!(rm.stats().forged >= 1);
}

#[test]
fn simple_datagrams_ping_pong_with_reply_seeds() {
    let (_node, ma, mb) = pair();
    let mut a = SimpleDatagram::new(&ma, 4 << 20).unwrap();
    let mut b = SimpleDatagram::new(&mb, 4 << 20).unwrap();
    let to_b = SimpleClient::from_seed(&ma, &via_text(&b.make_seed().unwrap())).unwrap();
    let sizes = [0usize, 1, 8, 128, 1000, 65536, 4 << 20];
    to_b.send(
        &pattern(0, sizes[0]),
        Some(&a.metadata_for_self().unwrap()),
        b"hi",
    )
    .unwrap();
    for (round, &n) in sizes.iter().enumerate().skip(1) {
        // b answers a, a answers b, each through the reply seed that came with the last.
        let m = b.recv(WAIT).unwrap().unwrap();
        assert_eq!(
            b.to_vec(&m).unwrap(),
            pattern(round as u32 - 1, sizes[round - 1])
        );
        b.reply_seed()
            .unwrap()
            .send(
                &mb,
                &pattern(round as u32, n),
                Some(&b.metadata_for_self().unwrap()),
                b"b",
            )
            .unwrap();
        let m = a.recv(WAIT).unwrap().unwrap();
        assert_eq!(m.oob(), b"b");
        assert_eq!(a.to_vec(&m).unwrap(), pattern(round as u32, n));
        a.reply_seed()
            .unwrap()
            .send(
                &ma,
                &pattern(round as u32, n),
                Some(&a.metadata_for_self().unwrap()),
                b"a",
            )
            .unwrap();
    }
    let m = b.recv(WAIT).unwrap().unwrap();
    assert_eq!(m.len, 4 << 20);
}

#[test]
fn split_seeds_make_a_group_told_once_when_all_parts_arrived() {
    let node = Node::embedded().unwrap();
    let rm = Manager::new(&node).unwrap();
    let mut rx = SimpleDatagram::new(&rm, 3 * 4096).unwrap();
    let parts = split_seed(&rx.make_seed().unwrap(), 3).unwrap();
    let others: Vec<(Node, Manager)> = (0..3)
        .map(|_| {
            let n = Node::connect(node.socket_path()).unwrap();
            let m = Manager::with_options(&n, ManagerOptions::default()).unwrap();
            (n, m)
        })
        .collect();
    for (i, (p, (_, m))) in parts.iter().zip(&others).enumerate() {
        let c = SimpleClient::from_seed(m, &via_text(p)).unwrap();
        assert_eq!(c.len(), 4096);
        c.send(&pattern(i as u32, 4096), None, &[i as u8]).unwrap();
        if i < 2 {
            // Not told until every part is there.
            for (_, m) in &others {
                m.reclaim();
            }
        }
    }
    let m = rx.recv(WAIT).unwrap().unwrap();
    assert_eq!((m.offset, m.len), (0, 3 * 4096));
    let all = rx.to_vec(&m).unwrap();
    for i in 0..3 {
        assert_eq!(&all[i * 4096..(i + 1) * 4096], &pattern(i as u32, 4096)[..]);
    }
    assert!(rx.ready().unwrap().is_none(), "told once");
}

#[test]
fn the_manager_dispatches_to_the_instance_that_has_data() {
    let (_node, ma, mb) = pair();
    let s1 = TaggedServer::new(&ma, 4096).unwrap();
    let s2 = TaggedServer::new(&ma, 4096).unwrap();
    let c2 = TaggedClient::from_seed(&mb, &s2.make_seed().unwrap()).unwrap();
    assert_eq!(ma.poll(Some(Duration::ZERO)).unwrap(), None);
    c2.write(0, b"x", 5).unwrap();
    assert_eq!(ma.poll(WAIT).unwrap(), Some(s2.id()));
    assert!(s1.get_tag().unwrap().is_none());
    assert_eq!(s2.get_tag().unwrap().map(|a| a.tag), Some(5));
    // Event-loop mode: the port's descriptor turns readable.
    assert!(!ma.arm());
    c2.write(0, b"y", 6).unwrap();
    let fd = ma.event_fd();
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    let timeout = rustix::event::Timespec {
        tv_sec: 10,
        tv_nsec: 0,
    };
    assert_eq!(rustix::event::poll(&mut fds, Some(&timeout)).unwrap(), 1);
    assert_eq!(ma.next_ready(), Some(s2.id()));
}

#[test]
fn remote_reads_blocking_and_asynchronous() {
    let (_node, ma, mb) = pair();
    let server = hamlyn_rats::remote_read::RemoteReadServer::new(&ma, 5 << 20).unwrap();
    let data = pattern(5, 5 << 20);
    server.write(0, &data).unwrap();
    let mut c = hamlyn_rats::remote_read::RemoteReadClient::from_seed(
        &mb,
        &via_text(&server.make_seed().unwrap()),
        4 << 20,
    )
    .unwrap();
    for (off, len) in [(0u64, 0u64), (1, 1), (100, 4096), (7, 4 << 20)] {
        let got = c.remote_read(off, len, WAIT).unwrap();
        assert!(
            got == data[off as usize..(off + len) as usize],
            "{off}+{len}"
        );
    }
    c.async_remote_read(12345, 1000).unwrap();
    assert!(
        matches!(c.async_remote_read(0, 1), Err(RatsError::State(_))),
        "one at a time"
    );
    let mut ready = false;
    for _ in 0..100_000 {
        if c.ready().unwrap() {
            ready = true;
            break;
        }
        std::thread::yield_now();
    }
    assert!(ready);
    assert_eq!(c.take().unwrap(), &data[12345..13345]);
    // Past the end of the server's slot: the engine refuses, the client says so.
    assert!(matches!(
        c.remote_read((5 << 20) - 10, 100, WAIT),
        Err(RatsError::SendFailed(_)) | Err(RatsError::Send(_))
    ));
    // And it keeps working.
    assert_eq!(c.remote_read(0, 3, WAIT).unwrap(), &data[..3]);
}

/// An arrival still queued for an instance that is gone never reaches the next instance
/// given the same number: it is counted as unroutable.
#[test]
fn an_arrival_for_a_dropped_instance_does_not_reach_its_successor() {
    let (_node, ma, mb) = pair();
    let old = SimpleDatagram::new(&ma, 4096).unwrap();
    let to_old = SimpleClient::from_seed(&mb, &via_text(&old.make_seed().unwrap())).unwrap();
    let h = to_old.send(&pattern(1, 100), None, b"old").unwrap();
    assert!(!h.wait(WAIT).is_failed());
    let before = ma.stats().unroutable;
    drop(old);
    // The same instance number, the same metadata entry.
    let mut new = SimpleDatagram::new(&ma, 4096).unwrap();
    let got = new.recv(Some(Duration::from_millis(300))).unwrap();
    assert!(
        got.is_none(),
        "the old instance's arrival reached the new one: {got:?}"
    );
    assert_eq!(ma.stats().unroutable, before + 1);
    // The new instance works.
    let to_new = SimpleClient::from_seed(&mb, &via_text(&new.make_seed().unwrap())).unwrap();
    to_new.send(&pattern(2, 50), None, b"new").unwrap();
    let m = new.recv(WAIT).unwrap().expect("the new instance's message");
    assert_eq!(new.to_vec(&m).unwrap(), pattern(2, 50));
    assert_eq!(m.oob(), b"new");
}

/// Taking one instance's next arrival hands over the queue's head at once when it is
/// that instance's (the fast path), and otherwise dispatches what is in front of it to
/// the instances it belongs to: every instance still gets all of its arrivals, each
/// once, in order, whether routed by cookie (a simple datagram) or by slot (a tagged
/// server).
#[test]
fn taking_one_instances_arrival_leaves_the_others_theirs_in_order() {
    let (_node, ma, mb) = pair();
    let s1 = TaggedServer::new(&ma, 4096).unwrap();
    let s2 = TaggedServer::new(&ma, 4096).unwrap();
    let mut dg = SimpleDatagram::new(&ma, 4096).unwrap();
    let c1 = TaggedClient::from_seed(&mb, &s1.make_seed().unwrap()).unwrap();
    let c2 = TaggedClient::from_seed(&mb, &s2.make_seed().unwrap()).unwrap();
    let cd = SimpleClient::from_seed(&mb, &dg.make_seed().unwrap()).unwrap();
    // Queued in this order (each send done before the next): s1 1, s2 2, dg, s1 3,
    // s2 4, s1 5.
    let sends: [&dyn Fn() -> hamlyn::SendHandle; 6] = [
        &|| c1.write(0, b"a", 1).unwrap(),
        &|| c2.write(8, b"bb", 2).unwrap(),
        &|| cd.send(&pattern(3, 40), None, b"d").unwrap(),
        &|| c1.write(16, b"ccc", 3).unwrap(),
        &|| c2.write(24, b"dddd", 4).unwrap(),
        &|| c1.write(32, b"eeeee", 5).unwrap(),
    ];
    for send in sends {
        assert!(!send().wait(WAIT).is_failed());
    }
    let tag = |s: &TaggedServer| s.get_tag().unwrap().map(|a| (a.tag, a.offset, a.len));
    // s2 first: s1's arrival in front of it goes to s1's inbox.
    assert_eq!(tag(&s2), Some((2, 8, 2)));
    assert_eq!(tag(&s1), Some((1, 0, 1)));
    // The datagram in front of s1's next goes to the datagram's inbox.
    assert_eq!(tag(&s1), Some((3, 16, 3)));
    assert_eq!(tag(&s2), Some((4, 24, 4)));
    assert_eq!(tag(&s2), None);
    let m = dg
        .ready()
        .unwrap()
        .expect("the datagram, dispatched on the way");
    assert_eq!(dg.to_vec(&m).unwrap(), pattern(3, 40));
    assert_eq!(tag(&s1), Some((5, 32, 5)));
    assert_eq!(tag(&s1), None);
    assert!(dg.ready().unwrap().is_none());
    assert_eq!(ma.next_ready(), None, "nothing left for anyone");
    let stats = ma.stats();
    assert_eq!((stats.arrivals, stats.unroutable, stats.forged), (6, 0, 0));
}

/// A tagged server's slot is routed by its id, not by an entry's cookie: an arrival
/// still queued when it is dropped is dispatched then (unroutable), never taken by a
/// server made after it.
#[test]
fn an_arrival_for_a_dropped_tagged_server_does_not_reach_its_successor() {
    let (_node, ma, mb) = pair();
    let old = TaggedServer::new(&ma, 4096).unwrap();
    let to_old = TaggedClient::from_seed(&mb, &old.make_seed().unwrap()).unwrap();
    assert!(!to_old.write(0, b"old", 7).unwrap().wait(WAIT).is_failed());
    let before = ma.stats().unroutable;
    drop(old);
    assert_eq!(ma.stats().unroutable, before + 1);
    let new = TaggedServer::new(&ma, 4096).unwrap();
    assert!(new.get_tag().unwrap().is_none());
    assert!(new
        .wait_tag(Some(Duration::from_millis(200)))
        .unwrap()
        .is_none());
    let to_new = TaggedClient::from_seed(&mb, &new.make_seed().unwrap()).unwrap();
    to_new.write(4, b"new", 8).unwrap();
    let a = new
        .wait_tag(WAIT)
        .unwrap()
        .expect("the new server's arrival");
    assert_eq!((a.tag, a.offset, a.len), (8, 4, 3));
    assert_eq!(new.read_arrival(&a).unwrap(), b"new");
}
