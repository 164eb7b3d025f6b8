"""Across real processes: each side is its own Python process (tests/peer.py) on its own
connection to the engine, and seeds cross between them as text."""

import struct

import pytest

import hamlyn

WAIT = 30.0


def test_ping_pong_between_two_python_processes(peers):
    pong = peers.start("pong")
    seed = peers.line(pong)
    assert seed.startswith("hmseed1-")
    ping = peers.start("ping", env={"HAMLYN_PEER_SEED": seed, "HAMLYN_ROUNDS": "200"})
    assert "ping: 200 round trips" in peers.finish(ping)
    assert "pong: answered 200" in peers.finish(pong)


@pytest.mark.parametrize("parts", [1, 3])
def test_group_receive_with_split_tickets_sent_by_other_processes(peers, parts):
    receiver = peers.start("group-receive", str(parts))
    seeds = [peers.line(receiver) for _ in range(parts)]
    assert all(s.startswith("hmseed1-") for s in seeds), seeds
    senders = [
        peers.start("group-send", env={"HAMLYN_SEED": s, "HAMLYN_PART": str(i)})
        for i, s in enumerate(seeds)
    ]
    for s in senders:
        peers.finish(s)
    assert f"group: {parts} parts, one message" in peers.finish(receiver)


def answer(queue, kind, send):
    n = queue.wait(timeout=WAIT)
    assert n is not None, "no answer"
    assert n.kind == kind
    assert n.request == send.request
    send.result(timeout=WAIT)
    return n


def test_remote_read_compare_and_swap_and_fetch_add_on_another_process(peers, node):
    target_proc = peers.start("target", stdin=True)
    target = hamlyn.Ticket.from_seed(peers.line(target_proc))
    assert target.grants == "ra"

    reply_area = node.area(4096)
    slot = node.slot(reply_area, meta=node.meta_area(1), queue=1)
    reply = slot.ticket()
    with node.queue(1) as q, node.terminus() as t:
        answer(q, "read_done", t.read(target, 64, 8, reply, 128))
        assert reply_area.read(128, 8) == b"read me!"

        # A compare-and-swap that swaps (40 -> 42), one that does not, a fetch-and-add.
        assert answer(q, "atomic_done", t.compare_swap(target, 0, 40, 42, reply, 0)).word == 40
        assert answer(q, "atomic_done", t.compare_swap(target, 0, 40, 99, reply, 8)).word == 42
        assert answer(q, "atomic_done", t.fetch_add(target, 0, 8, reply, 16)).word == 42
        assert struct.unpack_from("<QQQ", reply_area) == (40, 42, 42)

        # A ticket granting writes only reads nothing.
        with pytest.raises(hamlyn.NotGrantedError):
            t.read(reply, 0, 8, reply, 0)

    target_proc.stdin.write("done\n")
    target_proc.stdin.flush()
    assert peers.finish(target_proc).strip() == "50", "the target's word after the atomics"


def test_a_stale_ticket_is_refused_with_bad_key_in_the_sending_process(peers, node):
    area = node.area(64)
    slot = node.slot(area, meta=node.meta_area(1), queue=0)
    old = slot.ticket()
    slot.rekey()
    sender = peers.start("send-once", env={"HAMLYN_SEED": old.seed})
    assert peers.finish(sender).strip() == "bad_key"
    # Sent with the new key, it lands.
    sender = peers.start("send-once", env={"HAMLYN_SEED": slot.ticket().seed})
    assert peers.finish(sender).strip() == "sent"
    with node.queue(0) as q:
        n = q.wait(timeout=WAIT)
        assert n is not None and n.kind == "message" and n.length == 8
    assert area.read(0, 8) == b"8 bytes!"


def test_a_direct_slot_is_deposited_into_by_the_sending_process(peers, node):
    area = node.area(64)
    slot = node.slot(area, meta=node.meta_area(1), queue=0, direct=True)
    sender = peers.start("direct-send", env={"HAMLYN_SEED": slot.ticket().seed})
    peers.finish(sender)
    with node.queue(0) as q:
        n = q.wait(timeout=WAIT)
    assert n is not None and (n.kind, n.word, n.length) == ("message", 11, 8)
    assert area.read(0, 8) == b"directly"
    # A slot that is not direct is not mapped.
    plain = node.slot(node.area(64), meta=node.meta_area(1))
    with pytest.raises(hamlyn.RefusedError):
        node.open_direct(plain.ticket())
