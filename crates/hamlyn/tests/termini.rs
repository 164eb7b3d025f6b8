//! A port's termini at the limit, against a real engine: all 256 (four ready words of 64
//! bits, a request id's 8-bit terminus) send, at four priorities, and each gets its own
//! completions — the last one its error completions too; a 257th is refused.

use std::collections::BTreeSet;
use std::time::Duration;

use hamlyn::{
    Data, Error, Node, NodeOptions, NotificationKind, RejectReason, SendOptions, Status, Ticket,
};

const WAIT: Option<Duration> = Some(Duration::from_secs(10));
const TERMINI: u16 = 256;

#[test]
fn every_one_of_256_termini_sends_and_the_last_gets_its_own_errors() {
    let options = NodeOptions {
        termini: TERMINI,
        ..NodeOptions::default()
    };
    let node = Node::embedded_with(options).expect("engine");
    assert!(matches!(
        Node::embedded_with(NodeOptions {
            termini: TERMINI + 1,
            ..NodeOptions::default()
        }),
        Err(Error::InvalidArgument(_))
    ));
    let area = node.area(u64::from(TERMINI) * 64).expect("area");
    let meta = node.meta_area(u32::from(TERMINI)).expect("meta");
    let slot = node
        .slot(&area)
        .meta(&meta)
        .queue(0)
        .create()
        .expect("slot");
    let whole = slot.ticket_all().expect("ticket");
    let mut termini: Vec<_> = (0..TERMINI)
        .map(|i| node.terminus((i % 4) as u8).expect("terminus"))
        .collect();
    let indices: BTreeSet<u16> = termini.iter().map(|t| t.index()).collect();
    assert_eq!(indices, (0..TERMINI).collect(), "every index, once");
    assert!(
        node.terminus(0).is_err(),
        "a port has {TERMINI} termini, no more"
    );

    // Every terminus sends its own 64 bytes to its own place in the slot (and its own
    // metadata entry), last terminus first.
    let mut handles = Vec::new();
    for t in termini.iter_mut().rev() {
        let i = t.index();
        let opts = SendOptions::new()
            .offset(u64::from(i) * 64)
            .entry(u32::from(i))
            .tag(u64::from(i));
        let h = t
            .send(&whole, &opts, Data::Inline(&[i as u8; 64]))
            .expect("queued");
        assert_eq!(h.terminus(), i);
        handles.push(h);
    }
    for h in &handles {
        assert_eq!(h.wait(WAIT), Status::Sent);
    }
    let mut q = node.queue(0).expect("queue");
    let mut tags = BTreeSet::new();
    for _ in 0..TERMINI {
        let n = q.wait(WAIT).expect("wait").expect("arrival");
        assert_eq!(n.kind, NotificationKind::Message);
        tags.insert(n.word);
    }
    assert_eq!(tags, (0..u64::from(TERMINI)).collect());
    for i in 0..TERMINI {
        let got = area.read_vec(u64::from(i) * 64, 64).expect("read");
        assert_eq!(got, vec![i as u8; 64], "terminus {i}'s bytes");
    }

    // The last terminus's refused send comes back to it (its request id names it), and
    // it goes on afterwards.
    let last = termini.last_mut().expect("terminus 255");
    assert_eq!(last.index(), TERMINI - 1);
    let forged = Ticket {
        key: whole.key ^ 1,
        ..whole
    };
    let h = last
        .send(&forged, &SendOptions::new(), Data::Inline(b"no"))
        .expect("queued");
    assert_eq!(h.wait(WAIT), Status::Failed(RejectReason::BadKey));
    let h = last
        .send(&whole, &SendOptions::new().tag(7), Data::Inline(b"ok"))
        .expect("queued");
    assert_eq!(h.wait(WAIT), Status::Sent);
    let n = q.wait(WAIT).expect("wait").expect("arrival");
    assert_eq!(n.word, 7);
}
