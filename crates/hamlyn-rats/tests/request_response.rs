//! Initial request/response: found by registry name, a busy server refuses (never
//! overwrites) and the client's retransmission succeeds, no request is delivered twice,
//! a server that is gone is the client's error within its timeout.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::time::Duration;

use hamlyn::Node;
use hamlyn_rats::request_response::{RequestClient, RequestServer};
use hamlyn_rats::{Manager, RatsError};

const WAIT: Option<Duration> = Some(Duration::from_secs(20));
const TIMEOUT: Duration = Duration::from_secs(20);

/// Serves until a request says "quit": the reply is the request reversed. Before
/// answering the first request it waits (bounded) until the engine refused another
/// request because the buffer was busy. Returns the requests it saw, in order.
fn serve(node: Node, name: &'static str, hold_first: bool) -> Vec<(u64, u32, Vec<u8>)> {
    let m = Manager::new(&node).unwrap();
    let mut s = RequestServer::new(&m, 1 << 20).unwrap();
    s.publish(name).unwrap();
    let mut seen = Vec::new();
    let mut first = true;
    loop {
        let r = s.recv(WAIT).unwrap().expect("a request");
        let body = s.to_vec(&r).unwrap();
        if first && hold_first {
            // Busy: another request must be refused meanwhile (bounded wait).
            let mut refused = false;
            for _ in 0..20_000 {
                let st = node.stats().unwrap();
                if st.interface.rejects.get("disarmed").is_some_and(|&n| n > 0) {
                    refused = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(refused, "no request was refused while busy");
        }
        first = false;
        let quit = body == b"quit";
        let reply: Vec<u8> = body.iter().rev().copied().collect();
        seen.push((r.client, r.seq, body));
        let h = s.send_reply(&r, &reply).unwrap();
        s.release().unwrap();
        if quit {
            // Answered before the server goes.
            assert!(!h.wait(WAIT).is_failed());
            assert_eq!(s.forged(), 0);
            return seen;
        }
    }
}

fn call(c: &mut RequestClient, body: &[u8]) -> Vec<u8> {
    let r = c.call(body, TIMEOUT).unwrap();
    let v = c.reply_bytes(&r).unwrap();
    c.release();
    v
}

#[test]
fn requests_by_registry_name_with_a_busy_server_and_no_duplicates() {
    let node = Node::embedded().unwrap();
    let server_node = Node::connect(node.socket_path()).unwrap();
    let server = std::thread::spawn(move || serve(server_node, "rats-echo", true));
    // Two clients on two ports; the name becomes known when the server published it.
    let m1 = Manager::new(&node).unwrap();
    let mut c1 = None;
    for _ in 0..20_000 {
        match RequestClient::lookup(&m1, "rats-echo", 1 << 20) {
            Ok(c) => {
                c1 = Some(c);
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    let mut c1 = c1.expect("the name is published");
    let other = Node::connect(node.socket_path()).unwrap();
    let seed_text = hamlyn::seed::to_text(&node.lookup("rats-echo").unwrap()).unwrap();
    let c2_thread = std::thread::spawn(move || {
        let m2 = Manager::new(&other).unwrap();
        // The seed as ASCII text, as a file or environment variable would carry it.
        let mut c2 = RequestClient::from_text(&m2, &seed_text, 1 << 20).unwrap();
        let got = call(&mut c2, b"second");
        (got, c2.retransmissions)
    });
    // The first request to arrive (c1's, unless c2's thread got there first) is held
    // by the server until the other is refused.
    assert_eq!(call(&mut c1, b"first"), b"tsrif");
    let (got2, retrans) = c2_thread.join().unwrap();
    assert_eq!(got2, b"dnoces");
    assert!(
        retrans + c1.retransmissions > 0,
        "the refused request was retransmitted"
    );
    for i in 0..50u32 {
        let body = pattern(i);
        let want: Vec<u8> = body.iter().rev().copied().collect();
        assert_eq!(call(&mut c1, &body), want);
    }
    assert_eq!(call(&mut c1, b"quit"), b"tiuq");
    let seen = server.join().unwrap();
    let mut ids = HashSet::new();
    for (client, seq, _) in &seen {
        assert!(
            ids.insert((*client, *seq)),
            "request {client}/{seq} delivered twice"
        );
    }
    assert_eq!(seen.len(), 53);
}

fn pattern(i: u32) -> Vec<u8> {
    (0..(i * 997 % 70_000)).map(|k| (k ^ i) as u8).collect()
}

#[test]
fn a_server_that_is_gone_is_an_error_within_the_timeout() {
    let node = Node::embedded().unwrap();
    let server_node = Node::connect(node.socket_path()).unwrap();
    let server = std::thread::spawn(move || serve(server_node, "rats-gone", false));
    let m = Manager::new(&node).unwrap();
    let seed = (0..20_000)
        .find_map(|_| {
            node.lookup("rats-gone").ok().or_else(|| {
                std::thread::sleep(Duration::from_millis(1));
                None
            })
        })
        .expect("published");
    let mut c = RequestClient::from_seed(&m, &seed, 4096).unwrap();
    assert_eq!(call(&mut c, b"quit"), b"tiuq");
    server.join().unwrap();
    // The server's port is gone with its thread: its slot is a tombstone.
    let e = c.call(b"anyone?", TIMEOUT).unwrap_err();
    assert!(matches!(e, RatsError::PeerGone), "{e}");
    // With a short timeout it is an error within it, whatever the reason.
    let e = c.call(b"anyone?", Duration::from_millis(200)).unwrap_err();
    assert!(matches!(e, RatsError::PeerGone | RatsError::Timeout), "{e}");
}

/// A late copy of an earlier request can land in the server's buffer together with the
/// next one (the entry counts both into one completion, their bytes overlapping). A
/// request declares its length, so bytes that do not add up to it are dropped, counted,
/// and never recorded as seen: the client's own request, whole, is served after.
#[test]
fn bytes_that_do_not_add_up_to_the_declared_length_are_dropped_and_counted() {
    use hamlyn::{Data, SendOptions};
    use hamlyn_rats::request_response::{request_meta, RequestMeta};
    let node = Node::embedded().unwrap();
    let server_node = Node::connect(node.socket_path()).unwrap();
    let m = Manager::new(&server_node).unwrap();
    let mut s = RequestServer::new(&m, 4096).unwrap();
    let seed = s.make_seed();
    // What a mix of two requests looks like to the server: the metadata of one (client
    // 7, sequence 1, 100 bytes declared) over 120 bytes that arrived.
    let peer = Node::connect(node.socket_path()).unwrap();
    let mut pt = peer.terminus(0).unwrap();
    let meta = request_meta(&RequestMeta {
        client: 7,
        seq: 1,
        timestamp: 0,
        len: 100,
        reply: seed.tickets[0],
    })
    .unwrap();
    let h = pt
        .send(
            &seed.tickets[0],
            &SendOptions::new().meta(&meta).entry(0),
            Data::Inline(&[0xAB; 120]),
        )
        .unwrap();
    assert!(!h.wait(WAIT).is_failed(), "the engine takes it");
    assert!(s.recv(Some(Duration::from_millis(200))).unwrap().is_none());
    assert_eq!((s.mixed(), s.forged(), s.duplicates()), (1, 0, 0));
    // The buffer was taken again, and client 7's sequence number 1 is not spent.
    let client = std::thread::spawn(move || {
        let mc = Manager::new(&peer).unwrap();
        let mut c = RequestClient::from_seed(&mc, &seed, 4096).unwrap();
        call(&mut c, b"whole")
    });
    let r = s.recv(WAIT).unwrap().expect("the client's request");
    assert_eq!(s.to_vec(&r).unwrap(), b"whole");
    let reply: Vec<u8> = b"whole".iter().rev().copied().collect();
    s.send_reply(&r, &reply).unwrap();
    s.release().unwrap();
    assert_eq!(client.join().unwrap(), b"elohw");
    assert_eq!(s.mixed(), 1);
}

/// Whether `name` is gone from the registry (not found, rather than any other error).
fn not_found(node: &Node, name: &str) -> bool {
    matches!(
        node.lookup(name),
        Err(hamlyn::Error::Refused {
            code: Some(hamlyn::ControlErrorCode::NotFound),
            ..
        })
    )
}

/// A server's names go with it, though the manager's connection (which holds them)
/// stays: a client looking one up after is told there is none rather than sent to a slot
/// that is gone. A name another server of the same connection published since is that
/// one's, and stays until it goes too.
#[test]
fn a_dropped_servers_names_go_with_it() {
    let node = Node::embedded().unwrap();
    let m = Manager::new(&node).unwrap();
    let mut a = RequestServer::new(&m, 4096).unwrap();
    a.publish("rats-a").unwrap();
    a.publish("rats-shared").unwrap();
    let mut b = RequestServer::new(&m, 4096).unwrap();
    b.publish("rats-shared").unwrap();
    assert_eq!(node.lookup("rats-a").unwrap(), a.make_seed());
    drop(a);
    assert!(not_found(&node, "rats-a"));
    assert_eq!(node.lookup("rats-shared").unwrap(), b.make_seed());
    drop(b);
    assert!(not_found(&node, "rats-shared"));
}
