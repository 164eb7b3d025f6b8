//! The handler registry across three nodes (TCP, two rails) and several processes'
//! endpoints: the same ids everywhere, a late joiner gets the table, a collision is
//! refused, and a message for an unknown or unregistered handler is an error at its
//! sender that names the handler.
#![allow(clippy::unwrap_used)]

mod common;

use common::{cluster, endpoint, serve, WAIT};
use hamlyn_am::{fingerprint, Addr, AmError, HandlerId, Refusal, Want};

fn echo(ctx: &mut hamlyn_am::Ctx<'_>) -> Result<(), String> {
    ctx.reply(ctx.args()).map_err(|e| e.to_string())
}

#[test]
fn ids_agree_across_three_nodes_late_joiners_get_them_and_wrong_handlers_fail() {
    let engines = cluster(3);
    let fp_pair = fingerprint("u64 a, u64 b");
    // Node 1: "sum" and "echo"; node 2: "echo" and "max".
    let one = serve(
        engines[1].socket_path(),
        move |ep| {
            ep.register("sum", fp_pair, |c| {
                let [a, b, ..] = c.args();
                c.reply([a + b, 0, 0, 0]).map_err(|e| e.to_string())
            })
            .unwrap();
            ep.register("echo", fingerprint("any"), echo).unwrap();
            ep.synch().unwrap();
        },
        |ep| {
            ep.synch().unwrap();
            ep.table().1.to_vec()
        },
    );
    let two = serve(
        engines[2].socket_path(),
        move |ep| {
            ep.register("echo", fingerprint("any"), echo).unwrap();
            ep.register("max", fp_pair, |c| {
                let [a, b, ..] = c.args();
                c.reply([a.max(b), 0, 0, 0]).map_err(|e| e.to_string())
            })
            .unwrap();
            ep.synch().unwrap();
        },
        |ep| {
            ep.unregister("echo").unwrap();
            ep.synch().unwrap();
            (ep.table().1.to_vec(), ep.handler_counters())
        },
    );
    // Node 0: a collision is refused, naming the name and both layouts; "min" is still
    // registered.
    let mut zero = endpoint(engines[0].socket_path());
    zero.register("sum", fingerprint("u32 a"), |_| Ok(()))
        .unwrap();
    zero.register("min", fp_pair, |_| Ok(())).unwrap();
    match zero.synch() {
        Err(AmError::Collision {
            name,
            ours,
            cluster,
        }) => {
            assert_eq!(name, "sum");
            assert_eq!((ours, cluster), (fingerprint("u32 a"), fp_pair));
        }
        other => panic!("a collision must be refused: {other:?}"),
    }
    let ids: Vec<HandlerId> = ["sum", "echo", "max", "min"]
        .iter()
        .map(|n| zero.handler_by_name(n).unwrap())
        .collect();
    // Dense: after the engine-resident handlers, which hold the first ids.
    let mut dense: Vec<u32> = ids.iter().map(|h| h.id).collect();
    dense.sort_unstable();
    assert_eq!(dense, [4, 5, 6, 7], "dense ids");
    let names: Vec<&str> = zero.table().1.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(&names[..4], hamlyn::am_engine::NAMES);

    // A late joiner on node 2 (another process's connection) gets the same table.
    let mut late = endpoint(engines[2].socket_path());
    assert!(
        late.handler_by_name("sum").is_err(),
        "nothing before a refresh"
    );
    late.refresh().unwrap();
    for (n, id) in ["sum", "echo", "max", "min"].iter().zip(&ids) {
        assert_eq!(late.handler_by_name(n).unwrap(), *id, "{n}");
    }

    // Calls reach the handlers, across nodes (on a logical channel of the late joiner's).
    let late_channel = late.open_channel(1).unwrap();
    let sum = ids[0];
    assert_eq!(
        zero.call(one.addr, sum, 0, [2, 40, 0, 0], WAIT).unwrap()[0],
        42
    );
    assert_eq!(
        late.call(two.addr, ids[2], late_channel, [7, 9, 0, 0], WAIT)
            .unwrap()[0],
        9
    );
    // "sum" is not a handler of node 2's endpoint: refused there, named here.
    match zero.call(two.addr, sum, 0, [1, 1, 0, 0], WAIT) {
        Err(AmError::Refused { handler, why, .. }) => {
            assert_eq!((handler.as_str(), why), ("sum", Refusal::NoHandler));
        }
        other => panic!("{other:?}"),
    }
    // A forged id: refused too, and a message nobody waits for reports it as a failure.
    let forged = HandlerId { id: 4242, epoch: 1 };
    let c = zero
        .send_short(two.addr, forged, 0, [0; 4], Want::Nothing)
        .unwrap();
    let failure = loop {
        zero.poll(Some(std::time::Duration::from_millis(10)))
            .unwrap();
        if let Some(f) = zero.failures().pop() {
            break f;
        }
    };
    assert_eq!(failure.call, c);
    assert!(matches!(
        failure.error,
        AmError::Refused {
            id: 4242,
            why: Refusal::NoHandler,
            ..
        }
    ));

    // Node 1 unregisters "echo" (at once, locally): a message for it there fails,
    // naming it; node 2 still has it, so the name stays live with its id.
    one.run(|ep| ep.unregister("echo").unwrap());
    match zero.call(one.addr, ids[1], 0, [0; 4], WAIT) {
        Err(AmError::Refused { handler, why, .. }) => {
            assert_eq!((handler.as_str(), why), ("echo", Refusal::NoHandler));
        }
        other => panic!("echo is gone from node 1: {other:?}"),
    }
    let table_one = one.finish();
    assert_eq!(table_one.len(), 8);
    late.refresh().unwrap();
    assert_eq!(late.handler_by_name("echo").unwrap(), ids[1]);
    assert_eq!(
        zero.call(two.addr, ids[1], 0, [5, 6, 7, 8], WAIT).unwrap(),
        [5, 6, 7, 8]
    );
    // Node 2's endpoint reports its counters to its engine, which sums its clients'
    // (what `hamlyn stat` shows): "max" ran once, "echo" once, and a message for "sum"
    // was refused there (the forged id is not in the table: not counted by name).
    two.run(|ep| ep.report_counters().unwrap());
    let summed = late.node().am_counters().unwrap();
    let row = |n: &str| summed.iter().find(|(h, _)| h == n).map(|r| r.1);
    let counts = |calls, replies, errors, refused| hamlyn::AmCounts {
        calls,
        replies,
        errors,
        refused,
    };
    assert_eq!(row("max"), Some(counts(1, 1, 0, 0)));
    assert_eq!(row("echo"), Some(counts(1, 1, 0, 0)));
    assert_eq!(row("sum"), Some(counts(0, 0, 0, 1)));
    let (table_two, counters) = two.finish();
    assert_eq!(table_two.len(), 8);
    let max = counters.iter().find(|(n, _)| n == "max").unwrap().1;
    assert_eq!((max.calls, max.replies, max.errors), (1, 1, 0));
    // Both of "echo"'s owners unregistered it now: not live any more, under the same id.
    zero.refresh().unwrap();
    assert!(matches!(
        zero.handler_by_name("echo"),
        Err(AmError::UnknownName(_))
    ));
    assert!(!zero.table().1[ids[1].id as usize].live);

    // The engine-resident handlers: every node has them, under the same ids; the
    // counter is each engine's own.
    let ping = zero.handler_by_name("hamlyn.ping").unwrap();
    let counter = zero.handler_by_name("hamlyn.counter").unwrap();
    let echo = late.handler_by_name("hamlyn.echo").unwrap();
    for n in 0..3u32 {
        let node = hamlyn::NodeId(n);
        let r = zero.call(
            Addr::engine(node),
            ping,
            0,
            [40 + u64::from(n), 0, 0, 0],
            WAIT,
        );
        assert_eq!(r.unwrap(), [40 + u64::from(n), u64::from(n), 0, 0]);
        let r = late.call(Addr::engine(node), echo, 0, [1, 2, 3, 4], WAIT);
        assert_eq!(r.unwrap(), [1, 2, 3, 4]);
    }
    let two_engine = Addr::engine(hamlyn::NodeId(2));
    assert_eq!(
        zero.call(two_engine, counter, 0, [5, 0, 0, 0], WAIT)
            .unwrap()[..2],
        [0, 5]
    );
    assert_eq!(
        late.call(two_engine, counter, 0, [3, 0, 0, 0], WAIT)
            .unwrap()[..2],
        [5, 8]
    );
    let c = zero
        .send_short(two_engine, counter, 0, [1, 0, 0, 0], Want::Ack)
        .unwrap();
    assert_eq!(zero.wait(c, WAIT).unwrap(), hamlyn_am::Outcome::Done);
    let stats = zero.handler_by_name("hamlyn.stats").unwrap();
    assert_eq!(
        zero.call(two_engine, stats, 0, [0; 4], WAIT).unwrap(),
        [1, 1, 3, 1],
        "node 2's engine answered one ping, one echo, three counter calls and this"
    );
    // A user handler's id at an engine: refused, named.
    match zero.call(two_engine, sum, 0, [0; 4], WAIT) {
        Err(AmError::Refused { handler, why, .. }) => {
            assert_eq!((handler.as_str(), why), ("sum", Refusal::NoHandler));
        }
        other => panic!("{other:?}"),
    }
    drop((zero, late));
    for e in engines {
        e.stop().unwrap();
    }
}
