//! RPC between two nodes: the server's engine and the client's joined by the TCP fabric
//! (two rails, authenticated links, loopback), the registry on node 0 — plain calls,
//! calls by reference, and every frame outstanding at once.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use hamlyn::Node;
use hamlyn_rpc::{frame, Ctx, Procedure, RpcClient, RpcServer};
use hamlyn_shm::sync::{AtomicBool, Ordering};

#[test]
fn calls_cross_the_tcp_fabric() {
    let mut engines = hamlyn_engine::cluster::tcp_engines(2, 2).unwrap();
    let b = engines.pop().unwrap();
    let a = engines.pop().unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = {
        let (path, stop) = (b.socket_path().to_path_buf(), stop.clone());
        std::thread::spawn(move || {
            let procs: Vec<(String, Procedure)> = vec![
                (
                    "upper".into(),
                    Box::new(|b: &[u8], _: &mut Ctx<'_>| Ok(b.to_ascii_uppercase())),
                ),
                (
                    "reverse_segment".into(),
                    Box::new(|_: &[u8], ctx: &mut Ctx<'_>| {
                        let len = ctx.segment_len().ok_or("no segment")? as usize;
                        let mut bytes = ctx.read(0, len)?;
                        bytes.reverse();
                        ctx.write(0, &bytes)?;
                        Ok(Vec::new())
                    }),
                ),
            ];
            let mut server =
                RpcServer::publish(Node::connect(&path).unwrap(), "remote", procs).unwrap();
            ready_tx.send(()).unwrap();
            // Acquire: pairs with the Release store below.
            server.serve_until(|| stop.load(Ordering::Acquire)).unwrap();
        })
    };
    ready_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    // The client is on node 0; the server on node 1.
    let mut client = RpcClient::connect(
        Node::connect(a.socket_path()).unwrap(),
        "remote",
        Duration::from_secs(30),
    )
    .unwrap();
    assert_eq!(
        client.call("upper", b"across nodes").unwrap(),
        b"ACROSS NODES"
    );
    let calls: Vec<_> = (0..frame::FRAMES)
        .map(|i| {
            client
                .start("upper", format!("call {i}").as_bytes())
                .unwrap()
        })
        .collect();
    for (i, c) in calls.into_iter().enumerate() {
        assert_eq!(client.finish(c).unwrap(), format!("CALL {i}").as_bytes());
    }
    let area = client.node().area(100_000).unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    area.write(0, &data).unwrap();
    let seg = client.segment(&area).unwrap();
    client.call_by_ref("reverse_segment", b"", &seg).unwrap();
    let mut want = data;
    want.reverse();
    assert!(
        area.read_vec(0, 100_000).unwrap() == want,
        "reversed in place, remotely"
    );
    drop(client);
    // Release: pairs with the server loop's Acquire load.
    stop.store(true, Ordering::Release);
    server.join().unwrap();
    a.stop().unwrap();
    b.stop().unwrap();
}
