//! Endpoint groups through a real engine: receive-any by priority without starving a
//! member, a blocking receive that sleeps on the group's queue with a timeout, and, with
//! several waiting threads, each arrival handed to the highest-priority waiter first
//! (checked by which thread got which message, never by time).

use std::sync::{mpsc, Arc};
use std::time::Duration;

use hamlyn::{Data, EndpointGroup, Node, SendOptions, Status, Terminus, Ticket};

const WAIT: Duration = Duration::from_secs(30);

fn send(t: &mut Terminus, ticket: &Ticket, tag: u64) {
    let h = t
        .send(
            ticket,
            &SendOptions::new().tag(tag),
            Data::Inline(&tag.to_le_bytes()),
        )
        .expect("queued");
    assert_eq!(h.wait(Some(WAIT)), Status::Sent);
}

#[test]
fn receive_any_serves_priority_first_and_never_starves_a_member() {
    let node = Node::embedded().expect("engine");
    let bound = 4;
    let mut group = EndpointGroup::new(node.queue(0).expect("queue")).starvation_bound(bound);
    let high = node.endpoint(64, 64).queue(0).create().expect("endpoint");
    let low = node.endpoint(64, 64).queue(0).create().expect("endpoint");
    let (th, tl) = (high.ticket(), low.ticket());
    let hi = group.add(high, 0).expect("member");
    let lo = group.add(low, 3).expect("member");
    for i in [hi, lo] {
        group
            .endpoint_mut(i)
            .expect("member")
            .post_all()
            .expect("post");
    }
    let mut t = node.terminus(0).expect("terminus");
    for i in 0..8 {
        send(&mut t, &tl, 1000 + i);
    }
    for i in 0..50 {
        send(&mut t, &th, i);
    }
    let mut order = Vec::new();
    while let Some((member, r)) = group.receive() {
        order.push((member, r.word));
        group
            .endpoint_mut(member)
            .expect("member")
            .post(r.buffer)
            .expect("repost");
    }
    assert_eq!(order.len(), 58, "everything received");
    assert_eq!(order[0].0, hi, "the high-priority member first");
    // Each member's messages in their order.
    for m in [hi, lo] {
        let words: Vec<_> = order.iter().filter(|o| o.0 == m).map(|o| o.1).collect();
        assert!(words.windows(2).all(|w| w[0] < w[1]), "member {m} in order");
    }
    // While the low member had messages pending, at most bound + members receives
    // passed between two of its messages (and before its first).
    let mut since = 0;
    let mut low_left = 8;
    for &(m, _) in &order {
        if m == lo {
            assert!(
                since <= bound as usize + 2,
                "low member waited {since} receives"
            );
            since = 0;
            low_left -= 1;
        } else if low_left > 0 {
            since += 1;
        }
    }
    // Priority is honoured up to the bound: the high member got more than the low one
    // in the first receives.
    let first: Vec<_> = order[..10].iter().filter(|o| o.0 == hi).collect();
    assert!(first.len() >= 7, "{order:?}");
}

#[test]
fn a_blocking_receive_sleeps_until_an_arrival_or_its_timeout() {
    let node = Node::embedded().expect("engine");
    let mut group = EndpointGroup::new(node.queue(0).expect("queue"));
    let ep = node.endpoint(64, 4).queue(0).create().expect("endpoint");
    let ticket = ep.ticket();
    let m = group.add(ep, 0).expect("member");
    group
        .endpoint_mut(m)
        .expect("member")
        .post_all()
        .expect("post");
    assert!(
        group
            .receive_wait(Some(Duration::from_millis(20)))
            .expect("wait")
            .is_none(),
        "nothing arrives: the wait times out"
    );
    let mut t = node.terminus(0).expect("terminus");
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        send(&mut t, &ticket, 77);
        t
    });
    let (member, r) = group
        .receive_wait(Some(WAIT))
        .expect("wait")
        .expect("an arrival wakes the sleeper");
    assert_eq!((member, r.word), (m, 77));
    drop(sender.join().expect("sender"));
}

#[test]
fn several_waiting_threads_are_served_highest_priority_first() {
    let node = Node::embedded().expect("engine");
    let mut group = EndpointGroup::new(node.queue(0).expect("queue"));
    let ep = node.endpoint(64, 8).queue(0).create().expect("endpoint");
    let ticket = ep.ticket();
    let m = group.add(ep, 0).expect("member");
    group
        .endpoint_mut(m)
        .expect("member")
        .post_all()
        .expect("post");
    let group = Arc::new(group.into_shared());
    let (tx, rx) = mpsc::channel();
    let threads: Vec<_> = [2u8, 0, 1]
        .into_iter()
        .map(|prio| {
            let (group, tx) = (group.clone(), tx.clone());
            std::thread::spawn(move || {
                let got = group.receive_wait(prio, Some(WAIT)).expect("wait");
                let (_, r) = got.expect("a message");
                tx.send((prio, r.word)).expect("report");
            })
        })
        .collect();
    // Wait (bounded) until all three are waiting; nothing is asserted on time.
    for _ in 0..30_000 {
        if group.waiting() == 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(group.waiting(), 3);
    let mut t = node.terminus(0).expect("terminus");
    let mut got = Vec::new();
    for word in 0..3 {
        send(&mut t, &ticket, word);
        got.push(rx.recv_timeout(WAIT).expect("a thread took it"));
    }
    assert_eq!(
        got,
        [(0, 0), (1, 1), (2, 2)],
        "highest-priority waiter first"
    );
    for th in threads {
        th.join().expect("waiter");
    }
}
