//! What a newcomer meets in the public API, against a real engine: handles print short
//! summaries, `?` works across the library's error types, a slot without a queue never
//! notifies, and answers to reads and atomics name the request they answer.

use std::collections::BTreeMap;
use std::time::Duration;

use hamlyn::{
    Data, Error, FetchAddArgs, Node, NotificationKind, RequestRef, SendError, SendOptions,
    SlotPerms, Status, Ticket,
};

const WAIT: Option<Duration> = Some(Duration::from_secs(10));

/// Longest `{:?}` a handle may print: a summary, never a buffer.
const MAX_DEBUG: usize = 400;

fn short_debug(what: &str, value: &dyn std::fmt::Debug) -> String {
    let s = format!("{value:?}");
    assert!(
        s.len() <= MAX_DEBUG,
        "{what}: {} characters of Debug: {}",
        s.len(),
        &s[..s.len().min(2 * MAX_DEBUG)]
    );
    s
}

#[test]
fn debug_of_every_handle_is_a_short_summary() {
    let node = Node::embedded().expect("engine");
    let area = node.area(1 << 20).expect("area");
    let meta = node.meta_area(4).expect("meta");
    let builder = node.slot(&area).meta(&meta).queue(0);
    short_debug("SlotBuilder", &builder);
    let slot = builder.create().expect("slot");
    let direct_slot = node
        .slot(&area)
        .fast()
        .danger_direct()
        .queue(1)
        .create()
        .expect("direct slot");
    let ticket = slot.ticket_all().expect("ticket");
    let mut terminus = node.terminus(0).expect("terminus");
    let handle = terminus
        .send(&ticket, &SendOptions::new(), Data::Inline(b"x"))
        .expect("send");
    let queue = node.queue(0).expect("queue");
    let direct = node
        .open_direct(&direct_slot.ticket_all().expect("ticket"))
        .expect("open_direct");

    let n = short_debug("Node", &node);
    assert!(n.contains("Node"), "{n}");
    short_debug("Area", &area);
    short_debug("MetaArea", &meta);
    let s = short_debug("Slot", &slot);
    assert!(
        !s.contains(&slot.key().to_string()),
        "a slot's Debug does not show its key: {s}"
    );
    short_debug("Terminus", &terminus);
    let h = short_debug("SendHandle", &handle);
    assert!(h.contains("SendHandle"), "{h}");
    short_debug("NotifyQueue", &queue);
    short_debug("DirectTarget", &direct);
    assert_eq!(handle.wait(WAIT), Status::Sent);
}

/// A caller's function with one error type: every library error converts with `?`.
fn split_and_send(node: &Node, ticket: &Ticket, parts: usize) -> Result<Status, Error> {
    let text = hamlyn::seed::ticket_to_text(ticket)?;
    let seed = hamlyn::Seed::from_text(&text)?; // WireError
    let whole = seed
        .tickets
        .first()
        .copied()
        .ok_or(Error::InvalidArgument("no ticket"))?;
    let first = whole.split(parts)?[0]; // SplitError
    let mut t = node.terminus(0)?;
    let h = t.send(&first, &SendOptions::new(), Data::Inline(b"part"))?; // SendError
    Ok(h.wait(WAIT))
}

#[test]
fn question_mark_works_across_the_error_types() {
    let node = Node::embedded().expect("engine");
    let area = node.area(4096).expect("area");
    let meta = node.meta_area(1).expect("meta");
    let slot = node.slot(&area).meta(&meta).create().expect("slot");
    let ticket = slot.ticket_all().expect("ticket");
    assert_eq!(
        split_and_send(&node, &ticket, 2).expect("sent"),
        Status::Sent
    );
    assert!(matches!(
        split_and_send(&node, &ticket, 0),
        Err(Error::Split(hamlyn::SplitError::NoParts))
    ));
    let read_only = Ticket {
        flags: hamlyn::TicketFlags::READ,
        ..ticket
    };
    assert!(matches!(
        split_and_send(&node, &read_only, 1),
        Err(Error::Send(SendError::NotWritable))
    ));
    assert!(matches!(
        hamlyn::Seed::from_text("hmseed1-garbage").map_err(Error::from),
        Err(Error::Seed(_))
    ));
    // An engine refusal carries a code the caller can name from this crate.
    let foreign = hamlyn::Ticket {
        node: hamlyn::NodeId(node.id().0 + 1),
        ..ticket
    };
    assert!(matches!(
        node.open_direct(&foreign),
        Err(Error::NotLocal { .. })
    ));
    let mut bad = ticket;
    bad.slot = hamlyn::SlotId(ticket.slot.0 + 1000);
    bad.flags = bad.flags | hamlyn::TicketFlags::WRITE;
    assert!(matches!(
        node.open_direct(&bad),
        Err(Error::Refused {
            code: Some(hamlyn::ControlErrorCode::NotFound),
            ..
        })
    ));
}

#[test]
fn a_slot_without_a_queue_takes_messages_but_never_notifies() {
    let node = Node::embedded().expect("engine");
    let area = node.area(4096).expect("area");
    let meta = node.meta_area(2).expect("meta");
    let silent = node
        .slot(&area)
        .range(0..2048)
        .meta(&meta)
        .create()
        .expect("slot without a queue");
    assert_eq!(silent.queue(), None);
    let heard = node
        .slot(&area)
        .range(2048..4096)
        .meta(&meta)
        .queue(0)
        .create()
        .expect("slot with a queue");
    let mut queues = node.queues().expect("every queue");
    let mut t = node.terminus(0).expect("terminus");

    let to_silent = silent.ticket(0..2048, 0..1).expect("ticket");
    let opts = SendOptions::new().notify(true).tag(1);
    let h = t
        .send(&to_silent, &opts, Data::Inline(b"unheard"))
        .expect("send");
    assert_eq!(h.wait(WAIT), Status::Sent, "the sender sees it complete");
    // A later message to a slot with a queue: the engine serves a terminus in order, so
    // once this one is notified the first was committed too.
    let to_heard = heard.ticket(0..2048, 1..2).expect("ticket");
    t.send(
        &to_heard,
        &SendOptions::new().tag(2),
        Data::Inline(b"heard"),
    )
    .expect("send");
    let n = queues[0].wait(WAIT).expect("wait").expect("notified");
    assert_eq!((n.kind, n.word), (NotificationKind::Message, 2));

    assert_eq!(area.read_vec(0, 7).expect("read"), b"unheard", "deposited");
    assert_eq!(meta.entry(0).expect("entry").completed.get(), 1, "counted");
    for q in &mut queues {
        assert_eq!(q.poll(), None, "queue {} heard nothing more", q.index());
    }
}

#[test]
fn answers_from_two_termini_name_their_requests() {
    const ROUNDS: u64 = 16;
    let owner = Node::embedded().expect("engine");
    let user = Node::connect(owner.socket_path()).expect("second client");
    let data = owner.area(4096).expect("area");
    let meta = owner.meta_area(1).expect("meta");
    let perms = SlotPerms {
        write: true,
        read: true,
        atomic: true,
    };
    let shared = owner
        .slot(&data)
        .meta(&meta)
        .perms(perms)
        .create()
        .expect("slot");
    let target = shared.ticket_all().expect("ticket");
    let inbox = user.area(4096).expect("reply area");
    let rmeta = user.meta_area(1).expect("reply meta");
    let reply_slot = user
        .slot(&inbox)
        .meta(&rmeta)
        .queue(0)
        .create()
        .expect("reply slot");
    let reply = reply_slot.ticket_all().expect("reply ticket");
    let mut q = user.queue(0).expect("queue");
    let mut termini = [
        user.terminus(0).expect("terminus"),
        user.terminus(0).expect("terminus"),
    ];
    assert_ne!(termini[0].index(), termini[1].index());

    // Fetch-and-adds of 1 from both termini, interleaved: each old value is one of
    // 0..2 * ROUNDS, and every answer names one request, each exactly once.
    let mut asked: BTreeMap<RequestRef, ()> = BTreeMap::new();
    for _ in 0..ROUNDS {
        for t in &mut termini {
            let h = t
                .fetch_add(&FetchAddArgs {
                    target: &target,
                    offset: 0,
                    addend: 1,
                    reply: &reply,
                    reply_offset: 8,
                })
                .expect("fetch-add");
            assert!(asked.insert(h.request(), ()).is_none());
        }
    }
    let mut olds = Vec::new();
    for _ in 0..2 * ROUNDS {
        let n = q.wait(WAIT).expect("wait").expect("AtomicDone");
        assert_eq!(n.kind, NotificationKind::AtomicDone);
        let r = n.request.expect("an answer names its request");
        assert!(
            asked.remove(&r).is_some(),
            "{r:?} asked once, answered once"
        );
        olds.push(n.word);
    }
    assert!(asked.is_empty());
    olds.sort_unstable();
    assert_eq!(olds, (0..2 * ROUNDS).collect::<Vec<_>>());
}
