"""GRIM's active messages from Python: Python callables registered by name, numbered
cluster-wide, called by short, bulk and memory messages from another thread's endpoint
and from a Rust program in another process (which Python calls back by name); handlers
run inside poll() on the polling thread."""

import os
import queue
import subprocess
import threading
import zlib

import pytest

import hamlyn

WAIT = 30.0
PAIR = "u64 a, u64 b"


class Served:
    """An endpoint served on a thread of its own: `setup(ep)` registers; then it synchs
    and polls until stopped (or paused)."""

    def __init__(self, socket, setup, **options):
        self.ready, self.stop, self.paused = threading.Event(), threading.Event(), threading.Event()
        self.error = None
        self.ran_on = set()
        self.todo = queue.Queue()
        self.thread = threading.Thread(target=self.run, args=(socket, setup, options))
        self.thread.start()
        assert self.ready.wait(WAIT), "the served endpoint did not start"
        if self.error is not None:
            raise self.error

    def run(self, socket, setup, options):
        try:
            with hamlyn.Node.connect(socket) as node, hamlyn.AmEndpoint(node, **options) as ep:
                self.ident = threading.get_ident()
                setup(self, ep)
                ep.synch()
                self.addr = ep.addr
                self.ready.set()
                while not self.stop.is_set():
                    while not self.todo.empty():
                        f, out = self.todo.get()
                        out.put(f(ep))
                    if self.paused.is_set():
                        self.stop.wait(0.01)
                        continue
                    ep.poll(timeout=0.01)
                self.handler_counters = ep.handler_counters()
                self.counters = ep.counters()
        except BaseException as e:  # handed to the test
            self.error = e
            self.ready.set()

    def do(self, f):
        """Runs `f(ep)` on the served thread (an endpoint is its thread's own)."""
        out = queue.Queue()
        self.todo.put((f, out))
        return out.get(timeout=WAIT)

    def finish(self):
        self.stop.set()
        self.thread.join(WAIT)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error


def server_setup(served, ep):
    def add(call):
        served.ran_on.add(threading.get_ident())
        a, b, _, _ = call.args
        call.reply(a + b, call.channel, len(call.payload))

    def checksum(call):
        call.reply(zlib.crc32(call.payload), len(call.payload))

    def fails(call):
        raise ValueError("no, thank you")

    def twice(call):
        call.reply(1)
        call.reply(2)

    ep.register("py.add", PAIR, add)
    ep.register("py.checksum", "u64 x4; payload bytes", checksum)
    ep.register("py.noop", PAIR, lambda call: None)
    ep.register("py.fails", PAIR, fails)
    ep.register("py.twice", PAIR, twice)
    ep.register("py.gone", PAIR, lambda call: call.reply(1))


@pytest.fixture
def client(engine):
    with hamlyn.Node.connect(engine.socket_path) as node, hamlyn.AmEndpoint(node) as ep:
        yield ep


def test_the_fingerprint_is_rusts_fnv1a():
    assert hamlyn.am_fingerprint("") == 0xCBF29CE484222325
    assert hamlyn.am_fingerprint(PAIR) != hamlyn.am_fingerprint("u64 a")


def test_handlers_by_name_replies_completion_bulk_and_refusals(engine, client):
    served = Served(engine.socket_path, server_setup)
    try:
        to = served.addr
        client.refresh()
        add = client.handler_by_name("py.add")
        version, table = client.table()
        row = next(r for r in table if r[0] == "py.add")
        assert row[1:4] == (add[0], add[1], True)
        assert row[4] == hamlyn.am_fingerprint(PAIR)
        # A reply, by name and by id, with the logical channel it came on.
        assert client.call(to, "py.add", [2, 3]) == (5, 0, 0, 0)
        lazy = client.open_channel(3)
        assert client.call(to, add, [4, 4], channel=lazy) == (8, lazy, 0, 0)
        with pytest.raises(hamlyn.NoChannelError):
            client.send_short(to, add, [1], channel=lazy + 5)
        # Remote completion of a message without reply.
        c = client.send_short(to, "py.noop", want="ack")
        assert client.wait(c) is None
        with pytest.raises(hamlyn.NoCallError):
            client.wait(c)
        # A bulk message of 64 KiB: the handler sees every byte.
        payload = bytes(i % 251 for i in range(64 * 1024))
        c = client.send_bulk(to, "py.checksum", payload, want="reply")
        assert client.wait(c) == (zlib.crc32(payload), len(payload), 0, 0)
        with pytest.raises(hamlyn.TooLongError):
            client.send_bulk(to, "py.checksum", payload + b"!")
        # A handler that raises, one that replies twice, one that gives no reply asked
        # for: each an error at the sender naming the handler.
        with pytest.raises(hamlyn.HandlerRefusedError, match="py.fails.*HandlerFailed"):
            client.call(to, "py.fails")
        with pytest.raises(hamlyn.HandlerRefusedError, match="py.twice.*HandlerFailed"):
            client.call(to, "py.twice")
        with pytest.raises(hamlyn.HandlerRefusedError, match="py.noop.*NoReply"):
            client.call(to, "py.noop")
        # Errors of messages nobody waits for come back as failures.
        c = client.send_short(to, "py.fails")
        for _ in range(int(WAIT / 0.01)):
            got = client.failures()
            if got:
                break
            client.poll(timeout=0.01)
        assert [f[0] for f in got] == [c]
        assert isinstance(got[0][1], hamlyn.HandlerRefusedError)
        with pytest.raises(hamlyn.UnknownHandlerError):
            client.handler_by_name("py.nobody")
        # A forged id: refused at the receiver.
        with pytest.raises(hamlyn.HandlerRefusedError, match="NoHandler"):
            client.call(to, (9999, 0))
        assert served.ran_on == {served.ident}, "handlers ran on the polling thread only"
        # What the endpoint reports to its engine, for `hamlyn stat`.
        served.do(lambda ep: ep.report_counters())
        reported = engine.am_counters()["py.add"]
        assert (reported["calls"], reported["replies"]) == (2, 2)
    finally:
        served.finish()
    c = served.handler_counters
    assert (c["py.add"]["calls"], c["py.add"]["replies"]) == (2, 2)

    assert (c["py.fails"]["calls"], c["py.fails"]["errors"]) == (2, 2)
    assert (c["py.twice"]["calls"], c["py.twice"]["errors"]) == (1, 1)
    assert served.counters["unknown_handler"] == 1


def test_a_name_with_another_layout_is_a_collision_and_an_unregistered_handler_fails(
    engine, client
):
    served = Served(engine.socket_path, server_setup)
    try:
        client.register("py.add", "u64 just_one", lambda call: None)
        with pytest.raises(hamlyn.CollisionError, match="py.add"):
            client.synch()
        with pytest.raises(hamlyn.InvalidArgumentError):
            client.register("", PAIR, lambda call: None)
        client.register("py.client", PAIR, lambda call: None)
        with pytest.raises(hamlyn.InvalidArgumentError):
            client.register("py.client", PAIR, lambda call: None)
        client.synch()
        assert client.handler_by_name("py.client")[0] > client.handler_by_name("py.add")[0]
        assert client.call(served.addr, "py.gone") == (1, 0, 0, 0)
        # The server unregisters: a message for it fails at the receiver, named.
        served.do(lambda ep: ep.unregister("py.gone"))
        with pytest.raises(hamlyn.HandlerRefusedError, match="py.gone.*NoHandler"):
            client.call(served.addr, "py.gone")
    finally:
        served.finish()


def test_an_endpoint_is_its_threads_own(client):
    errors = []

    def other():
        try:
            client.poll(timeout=0)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join(WAIT)
    assert len(errors) == 1 and isinstance(errors[0], hamlyn.WrongThreadError), errors
    assert isinstance(errors[0], RuntimeError)


def test_memory_messages_and_the_engines_own_handlers(engine, client):
    region = client.memory_region(4096)
    with hamlyn.Node.connect(engine.socket_path) as n2, hamlyn.AmEndpoint(n2) as sender:
        target = sender.memory_target(region.seed)
        data = bytes(i % 251 for i in range(3000))
        target.write(500, data).result(timeout=WAIT)
        assert region.read(500, 3000) == data
        with pytest.raises(hamlyn.BadSeedError):
            sender.memory_target("hmseed1-garbage")
        # The engine runs 'hamlyn.echo' and 'hamlyn.ping' itself.
        sender.refresh()
        engine_addr = hamlyn.AmEndpoint.engine_addr(engine.id)
        assert sender.call(engine_addr, "hamlyn.echo", [1, 2, 3, 4]) == (1, 2, 3, 4)
        assert sender.call(engine_addr, "hamlyn.ping", [7])[:2] == (7, engine.id)


def test_a_receiver_that_does_not_poll_pushes_back_with_full(engine, client):
    served = Served(engine.socket_path, server_setup, short_credits=2)
    try:
        to = served.addr
        client.refresh()
        assert client.call(to, "py.add", [1, 1]) == (2, 0, 0, 0)  # linked
        served.paused.set()
        sent = 0
        with pytest.raises(hamlyn.FullError):
            for _ in range(100):
                client.send_short(to, "py.noop")
                sent += 1
        assert sent >= 1
        assert client.counters()["full"] == 1
        served.paused.clear()
        # Once it polls again, credit comes back and sends go through.
        for _ in range(int(WAIT / 0.01)):
            try:
                client.send_short(to, "py.noop", want="ack")
                break
            except hamlyn.FullError:
                client.poll(timeout=0.01)
        else:
            pytest.fail("no credit came back")
    finally:
        served.finish()
    assert served.handler_counters["py.noop"]["calls"] >= sent


def test_a_rust_program_and_python_call_each_others_handlers_by_name(engine, client, rust_programs):
    def mul(call):
        a, b, _, _ = call.args
        call.reply(a * b, 0, 0, 0)

    def length(call):
        call.reply(len(call.payload), zlib.crc32(call.payload))

    client.register("py.mul", PAIR, mul)
    client.register("py.len", "u64 x4; payload bytes", length)
    client.synch()
    peer = subprocess.Popen(
        [rust_programs["am_peer"]],
        env=dict(os.environ, HAMLYN_SOCKET=str(engine.socket_path)),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(peer.stdout), daemon=True)

        def line(n):
            """The peer's n-th line, this endpoint serving its handlers meanwhile."""
            for _ in range(int(WAIT / 0.01)):
                if len(lines) > n:
                    return lines[n].strip()
                client.poll(timeout=0.01)
            pytest.fail(f"the Rust peer said {lines}")

        reader.start()
        words = line(0).split()
        assert words[0] == "addr", words
        rust = (int(words[1]), int(words[2]))
        # The same fingerprint for the same layout in both languages.
        assert line(1) == f"fingerprint {hamlyn.am_fingerprint(PAIR)}"
        # Python calls Rust's handlers by name.
        client.refresh()
        assert client.call(rust, "rust.add", [40, 2]) == (42, 0, 0, 0)
        data = bytes(range(200)) * 100
        c = client.send_bulk(rust, "rust.sum", data, [5], want="reply")
        assert client.wait(c) == (5 + sum(data), len(data), 0, 0)
        # Rust calls Python's, by name, while this thread polls.
        me = client.addr
        peer.stdin.write(f"call {me[0]} {me[1]} py.mul 6 7\n")
        peer.stdin.write(f"bulk {me[0]} {me[1]} py.len 65536\n")
        peer.stdin.write(f"call {me[0]} {me[1]} py.nobody 1 1\n")
        peer.stdin.flush()
        assert line(2) == "reply 42 0 0 0"
        payload = bytes(i % 251 for i in range(65536))
        assert line(3) == f"reply 65536 {zlib.crc32(payload)} 0 0"
        assert line(4).startswith("error") and "py.nobody" in line(4)
        peer.stdin.close()
        assert line(5) == "served 2"
        assert peer.wait(WAIT) == 0
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.wait()
    c = client.handler_counters()
    assert (c["py.mul"]["calls"], c["py.len"]["calls"]) == (1, 1)
