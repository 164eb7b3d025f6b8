#!/usr/bin/env python3
"""Per-message instruction counts from a callgrind run of the `path8` example.

Usage: path8_table.py N PREFIX [--json FILE]
  N       messages per path (the argument given to path8)
  PREFIX  the callgrind output file given with --callgrind-out-file (PREFIX.2 is the idle
          phase, PREFIX.3 normal, PREFIX.4 fast, PREFIX.5 direct, PREFIX.6 tcp,
          PREFIX.7 stream)
  --json FILE  also write the table as JSON to FILE (`bench/instructions.sh` keeps it in
          docs/perf/instructions.json)

The engine is driven by the waiting thread (the default for a host): its own thread
sleeps, and path8's thread runs every turn of a mediated message inside its push
(`Driver::nudge`). For every phase the script takes, from the call records, the
inclusive cost and the call count of each function named below (the sum over all of its
callers; none of them is recursive):

- idle turn: `EngineState::turn` in the idle phase (N tries of a waiting thread at an
  engine with nothing to do; most are glances, `Drove::Glance`, with a turn every few);
- idle try: `Driving::turn` in that phase (its `run_within_tries`), per call (glances and turns together: what a
  waiting thread pays per look while nothing comes);
- send side (library): `Terminus::send` plus dropping the `SendHandle`, less the turns it
  ran (`Driver::nudge`); `DirectTarget::send` for direct (the whole path: deposit, count,
  notify), counted as `path8::direct_send`, which calls it (the release profile's
  link-time optimisation inlines it into its caller);
- engine: every `EngineState::turn` of the phase (mediated: the turn that takes,
  delivers, notifies and completes, and the hand-back's turn that finds nothing);
- hand-off: `Driver::nudge` less its turns (the ownership word, the hand-back's arming
  of the doorbells);
- receive side: `NotifyQueue::poll` (called once per message, when it is there).

Stream (mediated, normal slot, N messages rounded up to batches of 16): each batch pushed
while path8's thread holds a drive (no push runs a turn, as when a host's waiter drives
while a client of another process streams), taken in one turn (a visit's quantum), then
polled. Per message: the send side (`Terminus::send` and the handle's drop), the engine
(its turns), the receive side (`NotifyQueue::poll`): what bounds the 8-byte message rate,
where the host's CPU runs the engine's turns and the receiver.

TCP (a sender on engine A, a receiver on engine B, loopback, links secured) is not one
thread's deterministic path: this thread runs A's turns in its push, B's in its wait for
the notification and A's again in its wait for B's acknowledgement, with idle turns and
polls of the sockets while a packet is in the kernel, and the engines' own threads wake
for the sockets too. So its row gives the deterministic parts, one call per message
each: the send side as above; A's work for the message (`EngineState::first_packet`:
the request decoded to a sealed packet written to the socket); B's (`TcpFabric::read_conn`:
the socket read, the packet opened and checked, deposited, notified, the rail's counts
and acknowledgement); and, as a figure that
varies from run to run, all this thread ran per message (`TcpRig::one`).
"""

import re
import sys
from collections import defaultdict


def parse(path):
    """Returns {function name: [calls, inclusive Ir]} from one callgrind dump."""
    names = {}
    incl = defaultdict(lambda: [0, 0])
    cfn = None
    pending_calls = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = re.match(r"^c?fn=\((\d+)\)(?: (.*))?$", line)
            if m:
                ident, name = m.group(1), m.group(2)
                if name is not None:
                    names[ident] = name
                if line.startswith("cfn="):
                    cfn = names.get(ident, ident)
                continue
            if line.startswith("calls="):
                pending_calls = int(line.split("=")[1].split()[0])
                continue
            if pending_calls is not None:
                # The line after calls=: "<position> <inclusive Ir>".
                parts = line.split()
                cost = int(parts[1]) if len(parts) > 1 else 0
                entry = incl[cfn]
                entry[0] += pending_calls
                entry[1] += cost
                pending_calls = None
    return incl


def find(incl, pattern):
    """Calls and inclusive cost summed over every function whose name matches."""
    calls = cost = 0
    for name, (c, ir) in incl.items():
        if re.search(pattern, name):
            calls += c
            cost += ir
    return calls, cost


TURN = r"^hamlyn_engine::engine::EngineState::turn$"
TRY = r"^hamlyn_engine::hosted::Driving::run_within_tries$"
NUDGE = r"^hamlyn_engine::hosted::Driver::nudge$"
SEND = r"^hamlyn::terminus::Terminus::send$"
HANDLE_DROP = r"drop_in_place<hamlyn::terminus::SendHandle>$"
POLL = r"^(hamlyn::queue::NotifyQueue::poll|path8::receive)$"
SERVE = r"^hamlyn_engine::event_loop::Engine::serve$"
DIRECT_SEND = r"^(hamlyn::direct::DirectTarget::send|path8::direct_send)$"


def called(incl, pattern, n, phase):
    """`find`, warning when the function was called fewer than `n` times in the phase: the
    compiler inlined it (link-time optimisation may, across crates), so the row it feeds
    would silently lose its instructions to the caller."""
    calls, cost = find(incl, pattern)
    if calls < n:
        print(f"warning: {pattern} called {calls} times in the {phase} phase, not {n} or more "
              "(inlined? keep it out of line, as Driver::nudge and path8::direct_send are)")
    return calls, cost


def mediated(incl, n):
    """(send side, engine, hand-off, receive side, turns per message)."""
    _, send = called(incl, SEND, n, "mediated")
    _, drop = find(incl, HANDLE_DROP)
    _, nudge = called(incl, NUDGE, n, "mediated")
    turns, turn_ir = called(incl, TURN, n, "mediated")
    calls, recv = find(incl, POLL)
    if calls != n:
        print(f"warning: NotifyQueue::poll called {calls} times, not {n}")
    served, _ = find(incl, SERVE)
    if served:
        print(f"warning: the engine's own thread served {served} times in a message phase")
    return ((send + drop - nudge) / n, turn_ir / n, (nudge - turn_ir) / n, recv / n, turns / n)


def tcp(incl, n):
    """(send side, A's work, B's work, this thread per message)."""
    _, send = called(incl, SEND, n, "tcp")
    _, drop = find(incl, HANDLE_DROP)
    _, nudge = called(incl, NUDGE, n, "tcp")
    _, a = called(incl, r"^hamlyn_engine::engine::EngineState::first_packet$", n, "tcp")
    calls, b = called(incl, r"^hamlyn_fabric::tcp::TcpFabric::read_conn$", n, "tcp")
    _, whole = called(incl, r"path8::TcpRig::one$", n, "tcp")
    return ((send + drop - nudge) / n, a / n, b / n, whole / n, calls / n)


STREAM_BATCH = 16


def stream(incl, n):
    """(send side, engine, receive side, turns per message) of the stream phase."""
    m = -(-n // STREAM_BATCH) * STREAM_BATCH
    _, send = called(incl, SEND, m, "stream")
    _, drop = find(incl, HANDLE_DROP)
    nudges, _ = find(incl, NUDGE)
    if nudges:
        print(f"warning: {nudges} pushes of the stream phase ran a turn (Driver::nudge)")
    turns, turn_ir = called(incl, TURN, m // STREAM_BATCH, "stream")
    calls, recv = find(incl, POLL)
    if calls != m:
        print(f"warning: NotifyQueue::poll called {calls} times in the stream phase, not {m}")
    return ((send + drop) / m, turn_ir / m, recv / m, turns / m)


def main():
    args = sys.argv[1:]
    json_path = None
    if "--json" in args:
        i = args.index("--json")
        json_path = args[i + 1]
        del args[i : i + 2]
    n = int(args[0])
    prefix = args[1]
    idle = parse(prefix + ".2")
    idle_turns, idle_turn_ir = find(idle, TURN)
    per_turn = idle_turn_ir / idle_turns
    tries, tries_ir = find(idle, TRY)
    per_try = tries_ir / tries if tries else 0.0
    print(
        f"idle phase: {tries} tries of a waiting thread, {idle_turns} of them turns; "
        f"{per_turn:.1f} instructions per idle turn, {per_try:.1f} per try"
    )
    cols = {}
    for part, path in ((3, "normal"), (4, "fast")):
        cols[path] = mediated(parse(f"{prefix}.{part}"), n)
    direct = parse(f"{prefix}.5")
    _, dsend = called(direct, DIRECT_SEND, n, "direct")
    _, drecv = find(direct, POLL)
    cols["direct"] = (dsend / n, 0.0, 0.0, drecv / n, 0.0)
    print(f"{'per message':<22}" + "".join(f"{p:>10}" for p in cols))
    rows = ("send side (library)", "engine turns", "hand-off", "receive side")
    for i, row in enumerate(rows):
        print(f"{row:<22}" + "".join(f"{c[i]:>10.0f}" for c in cols.values()))
    print(f"{'total':<22}" + "".join(f"{sum(c[:4]):>10.0f}" for c in cols.values()))
    print(f"{'engine turns/message':<22}" + "".join(f"{c[4]:>10.2f}" for c in cols.values()))
    t = tcp(parse(f"{prefix}.6"), n)
    print(
        f"tcp: send side {t[0]:.0f}; A's work (request to sealed packet on the socket) "
        f"{t[1]:.0f}; B's work (socket to slot and notification) {t[2]:.0f}; "
        f"this thread per message, varies from run to run: {t[3]:.0f}"
    )
    st = stream(parse(f"{prefix}.7"), n)
    print(
        f"stream of 16-message batches (normal slot), per message: send side {st[0]:.0f}, "
        f"engine {st[1]:.0f}, receive side {st[2]:.0f}, total {sum(st[:3]):.0f}; "
        f"engine turns/message {st[3]:.3f}"
    )
    if json_path:
        write_json(json_path, n, per_turn, per_try, cols, t, st)


def write_json(path, n, per_turn, per_try, cols, t, st):
    """The table as JSON: instructions per 8-byte message, by path and side."""
    import json

    names = {"normal": "mediated_normal_slot", "fast": "mediated_fast_slot", "direct": "direct"}
    paths = {
        names[p]: {
            "send_side": round(c[0]),
            "engine": round(c[1]),
            "hand_off": round(c[2]),
            "receive_side": round(c[3]),
            "total": round(sum(c[:4])),
            "engine_turns_per_message": round(c[4], 2),
        }
        for p, c in cols.items()
    }
    paths["tcp"] = {
        "send_side": round(t[0]),
        "sending_engine_work": round(t[1]),
        "receiving_engine_work": round(t[2]),
        "driving_thread_per_message_varies": round(t[3]),
    }
    paths["mediated_stream"] = {
        "batch": STREAM_BATCH,
        "send_side": round(st[0]),
        "engine": round(st[1]),
        "receive_side": round(st[2]),
        "total": round(sum(st[:3])),
        "engine_turns_per_message": round(st[3], 3),
    }
    doc = {
        "what": "instructions per 8-byte tagged message (callgrind, path8 example, engine "
        "driven by the waiting thread as a host runs by default); regenerate with "
        "bench/instructions.sh; crates/hamlyn/examples/path8_table.py says what each "
        "field counts",
        "messages_per_path": n,
        "idle_engine_turn": round(per_turn, 1),
        "idle_waiter_try": round(per_try, 1),
        "paths": paths,
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
