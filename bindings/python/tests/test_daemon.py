"""A `hamlyn node` daemon (the node's engine as its own process), reached by
`Node.connect_default()` through $HAMLYN_SOCKET as a user would. Needs the `hamlyn`
binary: $HAMLYN_BIN, else the workspace's target/debug or target/release build, else
`hamlyn` on PATH; skipped with a message without one."""

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import hamlyn

REPO = Path(__file__).resolve().parents[3]


def hamlyn_binary():
    candidates = [
        os.environ.get("HAMLYN_BIN"),
        REPO / "target" / "debug" / "hamlyn",
        REPO / "target" / "release" / "hamlyn",
        shutil.which("hamlyn"),
    ]
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return str(c)
    return None


@pytest.fixture
def daemon(monkeypatch):
    binary = hamlyn_binary()
    if binary is None:
        pytest.skip("no hamlyn binary (cargo build -p hamlyn-cli, or set HAMLYN_BIN)")
    with tempfile.TemporaryDirectory() as d:
        socket = os.path.join(d, "node.sock")
        p = subprocess.Popen(
            [binary, "node", "--socket", socket, "--log", "warn"],
            stdin=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while not os.path.exists(socket):
                assert p.poll() is None, f"hamlyn node exited with {p.returncode}"
                assert time.monotonic() < deadline, "hamlyn node never bound its socket"
                time.sleep(0.02)
            monkeypatch.setenv(hamlyn.SOCKET_ENV, socket)
            yield p
        finally:
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_two_connections_to_a_daemon_exchange_a_message(daemon):
    with hamlyn.Node.connect_default() as receiver, hamlyn.Node.connect_default() as sender:
        assert receiver.id == sender.id and receiver.client_id != sender.client_id
        area = receiver.area(64)
        slot = receiver.slot(area, meta=receiver.meta_area(1), queue=0)
        seed = slot.ticket().seed  # as text, as another process would get it
        with receiver.queue(0) as q, sender.terminus() as t:
            t.send(hamlyn.Ticket.from_seed(seed), b"to the daemon", tag=4).result(timeout=30)
            n = q.wait(timeout=30)
        assert n is not None and (n.word, n.length) == (4, 13)
        assert area.read(0, 13) == b"to the daemon"


def test_progress_has_nothing_to_drive_for_a_daemons_node(daemon, engine):
    """`Node.progress()` runs a turn of an engine this process hosts: a daemon's node
    has none to run (False every time), while the session's embedded engine is this
    process's and may be driven."""
    with hamlyn.Node.connect_default() as node:
        assert not any(node.progress() for _ in range(100))
    turns = [engine.progress() for _ in range(100)]
    assert all(isinstance(t, bool) for t in turns)


def test_a_daemon_that_stops_is_engine_gone(daemon):
    node = hamlyn.Node.connect_default()
    q = node.queue(0)
    daemon.terminate()
    daemon.wait(timeout=30)
    with pytest.raises(hamlyn.EngineGoneError):
        q.wait(timeout=30)
    node.close()
