"""Bad input from Python gets an exception with a clear message, never a crash."""

import pytest

import hamlyn


def test_bad_seed_text_is_a_value_error_naming_the_problem(node):
    slot = node.slot(node.area(64), meta=node.meta_area(1))
    good = slot.ticket().seed
    for bad in ["", "hello", "hmseed1-", good[:-3], good[:-1] + ("a" if good[-1] != "a" else "b")]:
        with pytest.raises(hamlyn.BadSeedError) as e:
            hamlyn.Ticket.from_seed(bad)
        assert isinstance(e.value, ValueError)
        assert str(e.value), "a message says what is wrong"
    with pytest.raises(hamlyn.BadSeedError, match="checksum"):
        hamlyn.Ticket.from_seed(good[:-3])
    with pytest.raises(hamlyn.BadSeedError):
        hamlyn.tickets_from_seed("not a seed")
    assert hamlyn.Ticket.from_seed("  " + good + "\n") == slot.ticket()


def test_a_wrong_key_is_bad_key_error_from_result(node):
    slot = node.slot(node.area(64), meta=node.meta_area(1))
    old = slot.ticket()
    slot.rekey()
    with node.terminus() as t:
        s = t.send(old, b"stale")
        status = s.wait(timeout=30.0)
        assert (status.state, status.reason) == ("failed", "bad_key")
        assert status.code > 0
        with pytest.raises(hamlyn.BadKeyError, match="bad_key") as e:
            s.result(timeout=30.0)
        assert isinstance(e.value, hamlyn.RejectedError)
        # Revoked tickets are refused too, with their own reason.
        slot.revoke()
        with pytest.raises(hamlyn.RejectedError, match="revoked"):
            t.send(slot.ticket(), b"x").result(timeout=30.0)


def test_a_full_terminus_is_full_error_and_nothing_is_dropped(node):
    # 16 MiB sends (many packets each) from another area fill the work queue faster than
    # the engine empties it: each costs the engine a 16 MiB copy, a millisecond or so,
    # and this loop a few microseconds. (From the slot's own area, as this test once
    # sent, the copy is onto itself, which memmove skips: a release build's engine then
    # kept up with the loop and the ring never filled. Naming the entry: the default, the
    # ticket's first free entry, would be refused as busy first, an EntriesBusyError,
    # before the ring is full.)
    area = node.area(1 << 24)
    source = node.area(1 << 24)
    slot = node.slot(area, meta=node.meta_area(1))
    ticket = slot.ticket()
    with node.terminus() as t:
        sends, full = [], None
        for _ in range(100_000):
            try:
                sends.append(t.send_area(ticket, source, notify=False, entry=0))
            except hamlyn.FullError as e:
                full = e
                break
        assert full is not None, "the terminus never filled"
        assert "full" in str(full) and "nothing was queued" in str(full)
        # Room comes back before the queue drains: one more send is taken.
        assert t.wait_room(timeout=60.0)
        sends.append(t.send_area(ticket, source, notify=False, entry=0))
        assert t.wait_idle(timeout=60.0)
        # Every send queued before the refusal was carried out, none dropped.
        assert all(s.wait(timeout=30.0).sent for s in sends)
        # And the terminus takes requests again.
        t.send(ticket, b"again").result(timeout=30.0)


def test_every_entry_busy_is_entries_busy_error_a_full_error(peers):
    # An engine in another process: a thread of the process hosting an engine runs its
    # turns for its own sends when it finds it asleep, so there each 1 MiB send would
    # finish before the next is asked for; from here, sends queue while that engine's
    # thread copies, and the slot's one entry stays taken by one of them.
    p = peers.start("engine", stdin=True)
    socket = peers.line(p)
    with hamlyn.Node.connect(socket) as node:
        area = node.area(1 << 20)
        slot = node.slot(area, meta=node.meta_area(1))
        ticket = slot.ticket()
        with node.terminus() as t:
            sends = [t.send_area(ticket, area, notify=False)]
            with pytest.raises(hamlyn.EntriesBusyError, match="back-pressure") as e:
                for _ in range(1000):
                    sends.append(t.send_area(ticket, area, notify=False))
            # Still a FullError: code that catches back-pressure as one keeps working.
            assert isinstance(e.value, hamlyn.FullError)
            assert t.wait_idle(timeout=60.0)
            assert all(s.wait(timeout=30.0).sent for s in sends)
    # (Finishing closes its stdin: the engine process ends.)
    peers.finish(p)


def test_handles_of_a_closed_node_raise_closed_error(engine):
    node = hamlyn.Node.connect(engine.socket_path)
    area = node.area(64)
    meta = node.meta_area(1)
    slot = node.slot(area, meta=meta, queue=0)
    ticket = slot.ticket()
    q = node.queue(0)
    t = node.terminus()
    s = t.send(ticket, b"x")
    node.close()
    node.close()  # twice is fine
    assert node.closed
    for call in [
        lambda: node.area(64),
        lambda: node.id,
        lambda: node.stats(),
        lambda: area.read(0, 1),
        lambda: memoryview(area),
        lambda: meta.metadata(0),
        lambda: slot.ticket(),
        lambda: q.poll(),
        lambda: q.wait(timeout=0.0),
        lambda: t.send(ticket, b"x"),
        lambda: s.status,
        lambda: s.wait(),
    ]:
        with pytest.raises(hamlyn.ClosedError, match="closed"):
            call()
    # A ticket is a value: it outlives its node.
    assert hamlyn.Ticket.from_seed(ticket.seed) == ticket
    # Closing handles of a closed node is fine.
    for h in (area, meta, slot, q, t):
        h.close()


def test_handles_closed_themselves_raise_closed_error(node):
    with node.area(64) as area:
        pass
    with pytest.raises(hamlyn.ClosedError, match="area is closed"):
        area.read(0, 1)
    with node.queue(0) as q:
        pass
    with pytest.raises(hamlyn.ClosedError, match="queue is closed"):
        q.poll()
    with node.terminus() as t:
        pass
    with pytest.raises(hamlyn.ClosedError, match="terminus is closed"):
        t.wait_idle(timeout=0)


def test_argument_errors_are_typed(node):
    area = node.area(64)
    meta = node.meta_area(2)
    slot = node.slot(area, meta=meta, queue=0)
    ticket = slot.ticket()
    with pytest.raises(hamlyn.InvalidArgumentError, match="mode"):
        node.slot(area, meta=meta, mode="sideways")
    with pytest.raises(hamlyn.InvalidArgumentError):
        node.area(0)
    with pytest.raises(hamlyn.OutOfRangeError):
        area.read(60, 8)
    with pytest.raises(hamlyn.OutOfRangeError):
        area.write(63, b"ab")
    with pytest.raises(hamlyn.OutOfRangeError):
        slot.ticket(0, 128)
    with pytest.raises(hamlyn.SplitError):
        ticket.split(0)
    with pytest.raises(hamlyn.NoSuchQueueError):
        node.queue(99)
    with node.queue(0):
        with pytest.raises(hamlyn.QueueTakenError):
            node.queue(0)
    with node.terminus() as t:
        with pytest.raises(hamlyn.InlineTooLongError):
            t.send(ticket, bytes(hamlyn.MAX_INLINE + 1))
        with pytest.raises(hamlyn.BadTicketError):
            t.send(ticket, b"x", offset=64)
        readable = node.slot(area, meta=meta, write=False, read=True).ticket()
        with pytest.raises(hamlyn.OutsideTicketError):
            t.read(readable, 60, 8, ticket, 0)
        with pytest.raises(hamlyn.InvalidArgumentError, match="fast"):
            t.send(ticket, b"x", fast=True, entry=0)
        with pytest.raises(hamlyn.InvalidArgumentError, match="bytes-like"):
            t.send(ticket, "text is not bytes")
        with pytest.raises(hamlyn.InvalidArgumentError, match="timeout"):
            t.wait_idle(timeout=-1.0)
    other = hamlyn.Node.embedded()
    try:
        with other.terminus() as t, pytest.raises(hamlyn.ForeignObjectError):
            t.send_area(ticket, area, 0, 8)
    finally:
        other.close()
    with pytest.raises(hamlyn.ConnectError, match="cannot connect"):
        hamlyn.Node.connect("/nonexistent/hamlyn.sock")
    with pytest.raises(hamlyn.NotFoundError):
        node.lookup("no one published this")


def test_every_exception_is_a_hamlyn_error():
    names = [n for n in hamlyn.__all__ if n.endswith("Error")]
    assert len(names) > 20
    for n in names:
        assert issubclass(getattr(hamlyn, n), hamlyn.HamlynError), n


def test_an_engine_that_dies_is_engine_gone_error_not_a_crash(peers):
    engine = peers.start("engine", stdin=True)
    socket = peers.line(engine)
    node = hamlyn.Node.connect(socket)
    area = node.area(64)
    slot = node.slot(area, meta=node.meta_area(1), queue=0)
    ticket = slot.ticket()
    q = node.queue(0)
    t = node.terminus()
    view = memoryview(area)
    engine.kill()
    engine.wait(timeout=60)
    # A send the dead engine will never take: waiting for it to finish raises.
    t.send(ticket, b"x")
    with pytest.raises(hamlyn.EngineGoneError):
        t.wait_idle(timeout=30.0)
    with pytest.raises(hamlyn.EngineGoneError):
        q.wait(timeout=30.0)
    with pytest.raises(hamlyn.HamlynError):
        node.area(64)
    # The wait saw the engine gone, so sends are refused at once, nothing queued.
    with pytest.raises(hamlyn.EngineGoneError):
        t.send(ticket, b"x")
    assert node.engine_gone()
    view[0] = 1  # our mapping of the area is still ours
    view.release()
    node.close()
