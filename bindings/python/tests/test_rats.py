"""The protocol level (Rats) from Python, across processes: tagged remote writes taken
by tag, and request/response; seeds travel as text; the objects are one thread's."""

import threading

import pytest

import hamlyn

WAIT = 30.0


def test_tagged_writes_from_another_process_are_taken_by_tag(node, peers):
    rats = hamlyn.Rats(node)
    server = rats.tagged_server(4096)
    assert server.length == 4096
    assert server.get_tag() is None
    assert server.wait_tag(timeout=0.05) is None, "nothing written: the timeout"
    p = peers.start("rats-tag-write", env={"HAMLYN_SEED": server.seed, "HAMLYN_COUNT": "5"})
    got = []
    for _ in range(5):
        a = server.wait_tag(timeout=WAIT)
        assert a is not None, got
        got.append(a)
    peers.finish(p)
    assert [a[0] for a in sorted(got)] == [1, 2, 3, 4, 5]
    for tag, offset, length, src in got:
        assert (offset, src) == (64 * tag, node.id)
        assert server.read(offset, length) == b"tag %d" % tag
    assert server.get_tag() is None
    with pytest.raises(hamlyn.BadSeedError):
        rats.tagged_client("hmseed1-not-a-seed")
    # A request/response seed is not a tagged one: refused by protocol.
    other = rats.request_server(64)
    with pytest.raises(hamlyn.BadSeedError, match="protocol"):
        rats.tagged_client(other.seed)


def test_request_response_with_a_server_in_another_process(node, peers):
    p = peers.start("rats-respond", "3")
    seed = peers.line(p)
    rats = hamlyn.Rats(node)
    client = rats.request_client(seed, 4096)
    assert client.call(b"first") == b"FIRST"
    assert client.call(bytearray(b"second")) == b"SECOND"
    assert client.call(b"x" * 3000) == b"X" * 3000
    assert peers.finish(p).strip() == "answered 3"
    # The server is gone: the next call is an error, not a hang.
    with pytest.raises(hamlyn.PeerGoneError):
        client.call(b"anyone?", timeout=WAIT)


def test_request_response_between_threads_and_the_state_rule(engine):
    """The server on a thread of its own (its manager is that thread's), the client
    here: each waits without the GIL while the other runs."""
    ready, seeds, seen = threading.Event(), [], []

    def serve():
        try:
            with hamlyn.Node.connect(engine.socket_path) as n:
                s = hamlyn.Rats(n).request_server(256)
                seeds.append(s.seed)
                ready.set()
                r = s.recv(timeout=WAIT)
                try:
                    s.recv(timeout=0)  # the last one not answered yet
                except hamlyn.StateError:
                    seen.append("state")
                s.reply(r, b"<" + r.data + b">").result(timeout=WAIT)
                # Nothing dropped: no duplicate, forgery or mix of two requests.
                seen.append((s.duplicates, s.forged, s.mixed))
        except BaseException as e:  # handed to the test
            seen.append(e)
            ready.set()

    t = threading.Thread(target=serve)
    t.start()
    assert ready.wait(WAIT)
    with hamlyn.Node.connect(engine.socket_path) as n:
        c = hamlyn.Rats(n).request_client(seeds[0], 256)
        assert c.call(b"hi") == b"<hi>"
    t.join(WAIT)
    assert not t.is_alive()
    assert seen == ["state", (0, 0, 0)]


def test_rats_objects_are_their_threads_own(node):
    rats = hamlyn.Rats(node)
    server = rats.tagged_server(64)
    errors = []

    def other():
        for f in (lambda: server.get_tag(), lambda: rats.space_free):
            try:
                f()
            except BaseException as e:
                errors.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join(WAIT)
    assert len(errors) == 2 and all(isinstance(e, hamlyn.WrongThreadError) for e in errors)


def test_datagrams_from_another_process_flow_under_credit_and_are_read_in_place(node, peers):
    rats = hamlyn.Rats(node)
    receiver = rats.datagram_receiver(2, 256)
    assert receiver.buffer_len >= 256
    # Two credits and six datagrams: the sender can only go on as buffers are released.
    p = peers.start("rats-datagrams", "6", env={"HAMLYN_SEED": receiver.seed(2)})
    got = []
    for _ in range(6):
        d = receiver.recv(timeout=WAIT)
        assert d is not None, got
        assert d.src_node == node.id and d.oob == bytes([len(got)])
        text = receiver.read(d)
        assert receiver.read(d, 9, d.length - 9) == text[9:], "a part, from the buffer"
        got.append(text)
        receiver.release(d)
        assert d.released
        with pytest.raises(hamlyn.StateError):
            receiver.read(d)  # its buffer is its sender's again
    peers.finish(p)
    assert got == [b"datagram %d" % i for i in range(6)]
    assert receiver.try_recv() is None


def test_a_sender_without_credit_is_pushed_back_with_full(node):
    rats = hamlyn.Rats(node)
    receiver = rats.datagram_receiver(1, 64)
    sender = rats.datagram_sender(receiver.seed(1))
    assert sender.credits == 1 and sender.max_len >= 64
    with pytest.raises(hamlyn.TooLongError):
        sender.send(b"x" * (sender.max_len + 1))
    sender.send(b"one").result(timeout=WAIT)
    with pytest.raises(hamlyn.FullError):
        sender.send(b"two")  # nothing sent: no credit until the receiver releases
    d = receiver.recv(timeout=WAIT)
    assert receiver.read(d) == b"one"
    with pytest.raises(hamlyn.InvalidArgumentError):
        receiver.read(d, 2, 5)  # outside the datagram
    receiver.release(d)
    with pytest.raises(hamlyn.StateError):
        receiver.release(d)
    sender.send_wait(b"two", timeout=WAIT).result(timeout=WAIT)
    assert receiver.read(receiver.recv(timeout=WAIT)) == b"two"


def test_a_stream_from_another_process_arrives_whole_and_in_order_past_a_small_ring(
    node, peers
):
    rats = hamlyn.Rats(node)
    # A ring much smaller than what is sent: the sender waits for the reader's credit.
    receiver = rats.stream_receiver(65536, 8)  # the smallest ring: 64 KiB
    count = 200  # 200 KB
    p = peers.start("rats-stream", str(count), env={"HAMLYN_SEED": receiver.seed})
    for i in range(count):
        r = receiver.read_record(timeout=WAIT)
        assert r == bytes([i % 251]) * 1000, (i, r[:8] if r else r)
    assert receiver.read_bytes(timeout=WAIT) == b"tail"
    with pytest.raises(hamlyn.EndOfStreamError):
        receiver.read_bytes(timeout=WAIT)
    assert receiver.at_end
    peers.finish(p)


def test_a_stream_in_one_thread_coalesces_small_writes_until_flushed(node):
    rats = hamlyn.Rats(node)
    receiver = rats.stream_receiver(65536, 4)
    sender = rats.stream_sender(receiver.seed)
    assert sender.write_bytes(b"ab") is None, "coalesced"
    assert sender.write_bytes(b"cd") is None
    assert receiver.read_bytes(timeout=0.05) is None, "nothing sent before the flush"
    sender.flush().result(timeout=WAIT)
    assert receiver.read_bytes(timeout=WAIT) == b"abcd"
    with pytest.raises(hamlyn.TooLongError):
        sender.write_record(b"x" * (sender.max_write + 1))
    with pytest.raises(hamlyn.InvalidArgumentError):
        sender.write_record(b"")
    sender.close().result(timeout=WAIT)
    with pytest.raises(hamlyn.EndOfStreamError):
        receiver.read_bytes(timeout=WAIT)


def test_simple_datagrams_ping_pong_through_reply_seeds_with_another_process(node, peers):
    p = peers.start("rats-simple-pong", "3")
    rats = hamlyn.Rats(node)
    to = rats.simple_client(peers.line(p))
    me = rats.simple_datagram(4096)
    for i in range(3):
        to.send(b"ping %d" % i, bytes([i]), reply_to=me).result(timeout=WAIT)
        got = me.recv(timeout=WAIT)
        assert got == ((b"ping %d" % i)[::-1], bytes([i, i])), got
    peers.finish(p)


def test_a_simple_datagram_without_a_reply_seed_cannot_be_answered(node):
    rats = hamlyn.Rats(node)
    me = rats.simple_datagram(256)
    client = rats.simple_client(me.seed)
    assert client.length == 256
    client.send(b"no way back").result(timeout=WAIT)
    assert me.recv(timeout=WAIT) == (b"no way back", b"")
    with pytest.raises(hamlyn.StateError, match="no reply seed"):
        me.reply(b"?")
    assert me.recv(timeout=0.05) is None
