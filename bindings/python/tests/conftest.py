"""Shared fixtures: one engine for the test session (embedded in the pytest process, so
no daemon needs to be installed), which the other processes reach at its socket, and a
way to run those processes (tests/peer.py) with bounded waits."""

import json
import os
import shutil
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


ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def rust_programs():
    """The workspace's Rust programs the tests run (the `hamlyn` binary, examples), by
    target name: what `cargo test --workspace --no-run` lists, which after the README's
    `cargo test --workspace` (CI runs it before pytest) builds nothing and takes about a
    second (`$HAMLYN_CARGO_PROGRAMS`, a JSON object of name to path, overrides it)."""
    given = os.environ.get("HAMLYN_CARGO_PROGRAMS")
    if given:
        return json.loads(given)
    if shutil.which("cargo") is None:
        pytest.fail("cargo is needed for the Rust programs (or set HAMLYN_CARGO_PROGRAMS)")
    out = subprocess.run(
        ["cargo", "test", "--workspace", "--no-run", "--message-format=json"],
        cwd=ROOT, capture_output=True, text=True, timeout=3600,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    programs = {}
    for line in out.stdout.splitlines():
        msg = json.loads(line)
        if (
            msg.get("reason") == "compiler-artifact"
            and msg.get("executable")
            and not msg["profile"]["test"]
            and set(msg["target"]["kind"]) & {"bin", "example"}
        ):
            programs[msg["target"]["name"]] = msg["executable"]
    return programs
