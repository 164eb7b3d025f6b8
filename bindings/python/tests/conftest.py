"""Shared fixtures: one engine for the test session (embedded in the pytest process, so
no daemon needs to be installed), which the other processes reach at its socket, and a
way to run those processes (tests/peer.py) with bounded waits."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import hamlyn

PEER = Path(__file__).with_name("peer.py")
#: Longest a peer process may run: a hung one is killed and fails its test.
RUN_BOUND = 120


@pytest.fixture(scope="session")
def engine():
    """An embedded engine for the session: its node (whose handles tests may use) and,
    through `engine.socket_path`, the socket other processes connect to."""
    with hamlyn.Node.embedded() as node:
        yield node


@pytest.fixture
def node(engine):
    """A fresh connection to the session's engine, closed after the test."""
    with hamlyn.Node.connect(engine.socket_path) as n:
        yield n


class Peers:
    """Starts tests/peer.py processes against the session's engine; kills any left."""

    def __init__(self, socket: str) -> None:
        self.socket = socket
        self.procs: list[subprocess.Popen] = []

    def start(self, *args: str, env: dict[str, str] | None = None,
              stdin: bool = False) -> subprocess.Popen:
        e = dict(os.environ, HAMLYN_SOCKET=str(self.socket), **(env or {}))
        p = subprocess.Popen(
            [sys.executable, str(PEER), *args],
            env=e,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.procs.append(p)
        return p

    @staticmethod
    def line(p: subprocess.Popen) -> str:
        """The next line `p` prints (empty if it ended first)."""
        assert p.stdout is not None
        return p.stdout.readline().strip()

    @staticmethod
    def finish(p: subprocess.Popen) -> str:
        """Waits (bounded) for `p` to succeed; the rest of what it printed."""
        try:
            out, _ = p.communicate(timeout=RUN_BOUND)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            pytest.fail(f"{p.args} did not finish within {RUN_BOUND} s")
        assert p.returncode == 0, f"{p.args} exited with {p.returncode}"
        return out

    def kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.communicate()


@pytest.fixture
def peers(engine):
    p = Peers(engine.socket_path)
    yield p
    p.kill_all()
