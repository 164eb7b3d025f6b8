"""An 8-byte ping-pong from Python beside the same from Rust, in one run: what the
binding adds per message.

    python bench/pingpong.py [--rounds 20000] [--repeats 5] [--socket PATH]

Two processes, this one (the pinger) and a child (the ponger), each with its own
connection to one engine: an engine embedded in this process (the default) or the
daemon at --socket. Each side has an inbox slot reporting to queue 0 and a terminus; a
ping is 8 bytes inline, answered with the word plus one; the pinger reads the answer
from its inbox through a memoryview (no copy).

The same objects run the same loop twice per repeat: once in Python (Terminus.send,
Queue.wait, struct.unpack_from on the area's memoryview) and once in Rust
(`hamlyn._hamlyn.bench_ping` / `bench_pong`: the loop of the library's own calls,
without the GIL), alternating which goes first. It prints the median round trip of
each, the median one-way latency (round trip / 2) and the binding's overhead per
message: (Python round trip - Rust round trip) / 2, since every round trip is two
messages, each sent, waited for and read once. Medians of the repeats' medians.
Nothing here is asserted: it is a measurement.
"""

import argparse
import os
import platform
import statistics
import struct
import subprocess
import sys
import time

import hamlyn
from hamlyn import _hamlyn

PING, BYE = 2, 3
WAIT = 10.0


class End:
    """A connection with an inbox slot reporting to queue 0 and a terminus."""

    def __init__(self, socket: str) -> None:
        self.node = hamlyn.Node.connect(socket)
        self.area = self.node.area(4096)
        self.view = memoryview(self.area)
        self.slot = self.node.slot(self.area, meta=self.node.meta_area(4), queue=0)
        self.ticket = self.slot.ticket()
        self.queue = self.node.queue(0)
        self.terminus = self.node.terminus()


def pong_python(e: End, peer: hamlyn.Ticket) -> None:
    send, wait, unpack, pack, view = e.terminus.send, e.queue.wait, struct.unpack_from, struct.pack, e.view
    while True:
        n = wait(WAIT)
        if n is None:
            sys.exit("pong: no ping within 10 s")
        if n.word == BYE:
            return
        send(peer, pack("<Q", unpack("<Q", view)[0] + 1), tag=PING)


def ping_python(e: End, peer: hamlyn.Ticket, rounds: int, bye: bool = True) -> list[int]:
    send, wait, unpack, pack, view = e.terminus.send, e.queue.wait, struct.unpack_from, struct.pack, e.view
    clock = time.perf_counter_ns
    times = []
    for i in range(rounds):
        t0 = clock()
        send(peer, pack("<Q", i * 2), tag=PING)
        n = wait(WAIT)
        v = unpack("<Q", view)[0]
        times.append(clock() - t0)
        if n is None or n.word != PING or v != i * 2 + 1:
            sys.exit(f"ping {i}: {n!r}, answer {v}")
    if bye:
        send(peer, b"\0" * 8, tag=BYE)
    return times


def child(socket: str, mode: str) -> None:
    """The ponger: prints its seed, reads the pinger's, answers until the goodbye."""
    e = End(socket)
    print(e.ticket.seed, flush=True)
    peer = hamlyn.Ticket.from_seed(sys.stdin.readline())
    if mode == "python":
        pong_python(e, peer)
    else:
        _hamlyn.bench_pong(e.terminus, e.queue, e.area, peer)
    e.view.release()
    e.node.close()


def run(socket: str, mode: str, rounds: int, warmup: int) -> list[int]:
    """One repeat of one mode: a fresh ponger and connection; the round trips (ns)."""
    e = End(socket)
    p = subprocess.Popen(
        [sys.executable, __file__, "--child", mode, "--socket", socket],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        peer = hamlyn.Ticket.from_seed(p.stdout.readline())
        p.stdin.write(e.ticket.seed + "\n")
        p.stdin.flush()
        if mode == "python":
            ping_python(e, peer, warmup, bye=False)
            times = ping_python(e, peer, rounds)
        else:
            _hamlyn.bench_ping(e.terminus, e.queue, e.area, peer, warmup, bye=False)
            times = _hamlyn.bench_ping(e.terminus, e.queue, e.area, peer, rounds)
        if p.wait(timeout=60) != 0:
            sys.exit(f"the {mode} ponger failed")
        return times
    finally:
        if p.poll() is None:
            p.kill()
        e.view.release()
        e.node.close()


def machine() -> str:
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} CPUs ({model}), {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, hamlyn {hamlyn.__version__}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20000)
    ap.add_argument("--warmup", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--socket", help="a daemon's socket (default: an embedded engine)")
    ap.add_argument("--child", choices=["python", "rust"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.socket, a.child)
        return
    engine = None
    socket = a.socket
    if socket is None:
        engine = hamlyn.Node.embedded()
        socket = str(engine.socket_path)
    print(f"8-byte ping-pong, {a.repeats} repeats of {a.rounds} round trips "
          f"(after {a.warmup} warm-up), {'daemon ' + socket if a.socket else 'embedded engine'}")
    print(f"machine: {machine()}")
    medians: dict[str, list[float]] = {"rust": [], "python": []}
    for r in range(a.repeats):
        order = ["rust", "python"] if r % 2 == 0 else ["python", "rust"]
        for mode in order:
            t = run(socket, mode, a.rounds, a.warmup)
            medians[mode].append(statistics.median(t))
        print(f"  repeat {r + 1}: round trip p50 rust {medians['rust'][-1] / 1000:.2f} µs, "
              f"python {medians['python'][-1] / 1000:.2f} µs", flush=True)
    rust = statistics.median(medians["rust"])
    py = statistics.median(medians["python"])
    print(f"round trip p50 (median of repeats): rust {rust / 1000:.2f} µs, python {py / 1000:.2f} µs")
    print(f"one-way p50: rust {rust / 2000:.2f} µs, python {py / 2000:.2f} µs")
    print(f"python binding overhead per message: {(py - rust) / 2000:.2f} µs "
          f"(goal: within 2 µs of Rust)")
    if engine is not None:
        engine.close()


if __name__ == "__main__":
    main()
