"""FLIPC's receive endpoints through the session's engine: messages land in posted
buffers in posting order, the rest are discarded and counted (and refused to their
senders only when the endpoint asks), groups receive by priority without starving a
member and block without the GIL, and termini carry priorities and rate limits."""

import threading

import pytest

import hamlyn

WAIT = 30.0


def endpoint_stats(node, ep):
    for s in node.stats()["slots"]:
        if s["slot"] == ep.id:
            return s
    raise AssertionError(f"endpoint {ep.id} not in the statistics")


def test_messages_land_in_posted_buffers_in_order_and_the_rest_are_only_counted(node):
    with node.endpoint(128, 4) as ep, node.terminus() as t:
        assert (ep.buf_size, ep.buffers, ep.queue) == (128, 4, None)
        ticket = ep.ticket()
        # Buffers 0 and 1 only, posted in the order 1, 0: the engine follows it.
        b0, b1 = ep.alloc(), ep.alloc()
        assert ep.held == sorted([b0, b1])
        ep.post(b1)
        ep.post(b0)
        assert ep.posted == 2 and ep.held == []
        sends = [t.send(ticket, f"message {i}".encode(), tag=i) for i in range(5)]
        for s in sends:
            s.result(timeout=WAIT)  # optimistic discard: the senders are told nothing
        first = ep.receive()
        assert (first.buffer, first.tag, first.data) == (b1, 0, b"message 0")
        assert first.src_node == node.id and first.member is None
        second = ep.receive()
        assert (second.buffer, second.tag, second.data) == (b0, 1, b"message 1")
        assert ep.read(b0, 9) == b"message 1"
        assert ep.receive() is None, "three found no buffer"
        assert ep.take_discards() == 3, "and were counted"
        assert ep.take_discards() == 0, "read and reset"
        # A reposted buffer takes the next message.
        ep.post(first.buffer)
        t.send(ticket, b"again", tag=9).result(timeout=WAIT)
        again = ep.receive(repost=True)
        assert (again.buffer, again.length, again.data) == (b1, 5, b"again")
        assert ep.posted == 1 and ep.held == [b0]
        s = endpoint_stats(node, ep)
        assert s["mode"] == "endpoint"
        e = s["endpoint"]
        assert (e["buf_size"], e["buffers"], e["report_discards"]) == (128, 4, False)
        assert (e["delivered"], e["discarded"], e["posted"]) == (3, 3, 1)


def test_a_reporting_endpoint_fails_the_sender_with_no_buffer(node):
    with node.endpoint(64, 2, report_discards=True) as ep, node.terminus() as t:
        ep.post(ep.alloc())
        ok = t.send(ep.ticket(), b"fits", tag=1)
        refused = t.send(ep.ticket(), b"no room", tag=2)
        ok.result(timeout=WAIT)
        with pytest.raises(hamlyn.RejectedError, match="no_buffer"):
            refused.result(timeout=WAIT)
        assert refused.status.reason == "no_buffer"
        assert ep.take_discards() == 1, "reported and counted"
        assert ep.receive().tag == 1
        assert endpoint_stats(node, ep)["endpoint"]["report_discards"] is True


def test_one_endpoints_traffic_never_takes_anothers_buffers(node):
    with node.endpoint(64, 2) as busy, node.endpoint(64, 2) as calm, node.terminus() as t:
        assert busy.post_all() == 2 and calm.post_all() == 2
        for s in [t.send(busy.ticket(), b"x", tag=i) for i in range(20)]:
            s.result(timeout=WAIT)
        t.send(calm.ticket(), b"important", tag=99).result(timeout=WAIT)
        assert calm.receive().tag == 99
        assert calm.take_discards() == 0
        assert busy.take_discards() == 18


def test_bad_uses_are_typed_errors(node):
    ep = node.endpoint(64, 2)
    with node.terminus() as t:
        with pytest.raises(hamlyn.InvalidArgumentError):
            node.endpoint(100, 2)  # not a multiple of 64
        with pytest.raises(hamlyn.InvalidArgumentError):
            node.endpoint(64, 0)
        with pytest.raises(hamlyn.NoSuchQueueError):
            node.endpoint(64, 2, queue=999)
        b = ep.alloc()
        ep.post(b)
        with pytest.raises(hamlyn.InvalidArgumentError, match="not held"):
            ep.post(b)  # never posted twice
        with pytest.raises(hamlyn.InvalidArgumentError, match="not held"):
            ep.read(b)
        with pytest.raises(hamlyn.InvalidArgumentError, match="not held"):
            ep.post(12345)
        # Larger than a buffer: the sender's library refuses it before queueing.
        with pytest.raises(hamlyn.BadTicketError, match="outside"):
            t.send(ep.ticket(), b"y" * 65)
        held = ep.alloc()
        with pytest.raises(hamlyn.InvalidArgumentError):
            ep.write(held, b"z" * 65)
        ep.write(held, b"prepared")
        assert ep.read(held, 8) == b"prepared"
        # A ticket for a destroyed endpoint: refused by the engine, typed.
        ticket = ep.ticket()
        ep.close()
        ep.close()
        assert ep.closed
        with pytest.raises(hamlyn.ClosedError):
            ep.receive()
        with pytest.raises(hamlyn.RejectedError, match="unknown_slot"):
            t.send(ticket, b"late").result(timeout=WAIT)


def test_senders_in_other_processes_flood_a_slowly_posting_receiver_and_every_message_is_accounted_for(
    node, peers
):
    senders, count = 3, 300
    with node.endpoint(64, 4, report_discards=True) as ep:
        seed = ep.ticket().seed
        procs = [
            peers.start(
                "endpoint-flood",
                env={"HAMLYN_SEED": seed, "HAMLYN_SENDER": str(i), "HAMLYN_COUNT": str(count)},
            )
            for i in range(senders)
        ]
        delivered = {i: [] for i in range(senders)}

        def take_all():
            while (m := ep.receive()) is not None:
                sender, i = divmod(m.tag, 1 << 32)
                assert m.data == sender.to_bytes(4, "little") + i.to_bytes(8, "little")
                delivered[sender].append(i)
                yield m.buffer

        # Post one buffer at a time, only when the last one was filled: slowly.
        ep.post(ep.alloc())
        while any(p.poll() is None for p in procs):
            for b in list(take_all()):
                ep.post(b)
            if ep.posted == 0 and (b := ep.alloc()) is not None:
                ep.post(b)  # (none free: every buffer holds a message not taken yet)
        outcomes = [peers.finish(p) for p in procs]
        list(take_all())
        discarded = ep.take_discards()
    refused_total = 0
    for i, out in enumerate(outcomes):
        words = out.split()
        sent, refused = int(words[2]), int(words[4])
        assert sent + refused == count, out
        assert len(delivered[i]) == sent, (i, out)
        assert delivered[i] == sorted(delivered[i]), "one sender's messages in order"
        refused_total += refused
    assert discarded == refused_total
    assert refused_total > 0, "the receiver posted too fast to test discards"


def test_receive_any_serves_priority_first_and_never_starves_a_member(node):
    high = node.endpoint(64, 64, queue=2)
    low = node.endpoint(64, 64, queue=2)
    high.post_all()
    low.post_all()
    with (
        hamlyn.EndpointGroup(node.queue(2), [(high, 0), (low, 5)], starvation_bound=4) as g,
        node.terminus() as t,
    ):
        assert len(g) == 2
        for i in range(3):
            t.send(low.ticket(), b"low", tag=100 + i).result(timeout=WAIT)
        for i in range(20):
            t.send(high.ticket(), b"high", tag=i).result(timeout=WAIT)
        order = []
        while (m := g.receive(repost=True)) is not None:
            order.append((m.member, m.tag))
        assert len(order) == 23
        # Priority first, but the low member is served after at most 4 passes.
        assert order[0] == (0, 0)
        gaps, since = [], 0
        for member, _ in order:
            if member == 1:
                gaps.append(since)
                since = 0
            else:
                since += 1
        assert len(gaps) == 3 and max(gaps) <= 4, order
        assert [tag for m, tag in order if m == 0] == list(range(20))
        # The members' handles still work: posted again, and discards are theirs.
        assert high.posted == 64 and low.take_discards() == 0
    with pytest.raises(hamlyn.ClosedError):
        high.receive()  # the group destroyed its members


def test_group_construction_refuses_what_cannot_work(node):
    other_queue = node.endpoint(64, 1, queue=1)
    no_queue = node.endpoint(64, 1)
    with node.queue(3) as q:
        with pytest.raises(hamlyn.InvalidArgumentError, match="does not report"):
            hamlyn.EndpointGroup(q, [(other_queue, 0)])
        with pytest.raises(hamlyn.InvalidArgumentError, match="does not report"):
            hamlyn.EndpointGroup(q, [(no_queue, 0)])
        with pytest.raises(hamlyn.InvalidArgumentError):
            hamlyn.EndpointGroup(q, [])
        ep = node.endpoint(64, 1, queue=3)
        with pytest.raises(hamlyn.InvalidArgumentError, match="twice"):
            hamlyn.EndpointGroup(q, [(ep, 0), (ep, 1)])
        assert not q.closed, "a refused group takes nothing"
        g = hamlyn.EndpointGroup(q, [(ep, 0)])
        assert q.closed, "the group took the queue"
        with pytest.raises(hamlyn.InvalidArgumentError, match="in a group already"):
            with node.queue(1) as q1:
                hamlyn.EndpointGroup(q1, [(ep, 0), (other_queue, 0)])
        g.close()
        g.close()
        with pytest.raises(hamlyn.ClosedError):
            g.receive()
    other_queue.close()
    no_queue.close()


def test_a_blocking_receive_waits_without_the_gil_until_an_arrival_or_its_timeout(node, peers):
    ep = node.endpoint(64, 4, queue=1)
    ep.post_all()
    with hamlyn.EndpointGroup(node.queue(1), [(ep, 0)]) as g:
        assert g.receive_wait(timeout=0.05) is None, "nothing sent: the timeout"
        got, started = [], threading.Event()

        def waiter():
            started.set()
            got.append(g.receive_wait(timeout=WAIT))

        th = threading.Thread(target=waiter)
        th.start()
        assert started.wait(WAIT)
        # This thread runs Python while the other sleeps in receive_wait: it released the
        # GIL. The sender is another process (its send wakes the waiter).
        p = peers.start("send-once", env={"HAMLYN_SEED": ep.ticket().seed})
        assert peers.finish(p).strip() == "sent"
        th.join(WAIT)
        assert not th.is_alive()
        assert got[0] is not None and got[0].data == b"8 bytes!"
        assert got[0].member == 0


def test_several_waiting_threads_are_served_highest_priority_first(node):
    ep = node.endpoint(64, 8, queue=3)
    ep.post_all()
    with hamlyn.EndpointGroup(node.queue(3), [(ep, 0)]) as g, node.terminus() as t:
        served = []
        lock = threading.Lock()

        def waiter(priority):
            m = g.receive_wait(timeout=WAIT, priority=priority, repost=True)
            with lock:
                served.append((priority, m.tag if m else None))

        threads = [threading.Thread(target=waiter, args=(p,)) for p in (7, 1, 4)]
        for th in threads:
            th.start()
        # Bounded: every waiter is asleep in the group before the first send.
        for _ in range(int(WAIT / 0.01)):
            if g.waiting == 3:
                break
            threading.Event().wait(0.01)
        assert g.waiting == 3
        for tag in range(3):
            t.send(ep.ticket(), b"w", tag=tag).result(timeout=WAIT)
            # One at a time: the next send only once this one's waiter has it.
            for _ in range(int(WAIT / 0.01)):
                if len(served) == tag + 1:
                    break
                threading.Event().wait(0.01)
        for th in threads:
            th.join(WAIT)
        assert served == [(1, 0), (4, 1), (7, 2)]


def test_a_terminus_carries_a_rate_limit_the_engine_keeps_and_shows(node):
    def rates(t):
        for port in node.stats()["ports"]:
            if port["client"] == node.client_id:
                return [r for r in port["rates"] if r["terminus"] == t.index]
        raise AssertionError("our port is not in the statistics")

    with node.endpoint(64, 64) as ep, node.terminus(3, msgs_per_sec=100000) as t:
        ep.post_all()
        r = rates(t)
        assert [(x["bytes_per_sec"], x["msgs_per_sec"]) for x in r] == [(0, 100000)]
        for s in [t.send(ep.ticket(), b"r", tag=i) for i in range(10)]:
            s.result(timeout=WAIT)
        assert rates(t)[0]["passed"] == 10
        node.set_rate(t, bytes_per_sec=1 << 20, msgs_per_sec=50)
        assert [(x["bytes_per_sec"], x["msgs_per_sec"]) for x in rates(t)] == [(1 << 20, 50)]
        node.set_rate(t)  # both 0: the limit lifted
        assert [(x["bytes_per_sec"], x["msgs_per_sec"]) for x in rates(t)] in ([], [(0, 0)])
        t.send(ep.ticket(), b"free").result(timeout=WAIT)
        assert ep.take_discards() == 0
    t.close()
    with pytest.raises(hamlyn.ClosedError):
        node.set_rate(t, msgs_per_sec=1)


def test_a_direct_endpoint_takes_deposits_from_another_process_without_the_engine(node, peers):
    with node.endpoint(64, 2, direct=True) as ep:
        b = ep.alloc()
        ep.post(b)
        p = peers.start("direct-send", env={"HAMLYN_SEED": ep.ticket().seed})
        peers.finish(p)
        m = ep.receive()
        assert (m.buffer, m.tag, m.data) == (b, 11, b"directly")
        # With no buffer posted, the sender's library (the same core code) discards and
        # counts, and says so.
        with node.open_direct(ep.ticket()) as d:
            with pytest.raises(hamlyn.RejectedError, match="NoBuffer"):
                d.send(b"no room", tag=12)
        assert ep.take_discards() == 1
