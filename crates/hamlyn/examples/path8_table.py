#!/usr/bin/env python3
"""Per-message instruction counts from a callgrind run of the `path8` example.

Usage: path8_table.py N PREFIX [BUSY] [--json FILE]
  N       messages per path (the argument given to path8)
  PREFIX  the callgrind output file given with --callgrind-out-file (PREFIX.2 is the idle
          phase, PREFIX.3 normal, PREFIX.4 fast, PREFIX.5 direct)
  BUSY    busy engine turns per message (default 1, see below)
  --json FILE  also write the table as JSON to FILE (`bench/instructions.sh` keeps it in
          docs/perf/instructions.json)

For every phase it takes, from the call records, the inclusive cost and the call count of
each function named below (the sum over all of its callers; none of them is recursive):

- send side: `Terminus::send` plus dropping the `SendHandle` it returns (mediated),
  `DirectTarget::send` (direct: the whole path, deposit, count and notify);
- receive side: `NotifyQueue::poll` (called once per message, when the message is there);
- engine: the instructions of the engine's turns (`EngineState::turn`, everything the
  engine does with a request: take it from the ring, check, deposit, count, notify,
  complete) minus its idle turns. A turn that finds no work costs the same every time;
  that cost is measured in the idle phase (the engine spinning, nobody sending) as
  turn instructions / turns, and every turn of a message phase beyond the busy ones is
  charged at that rate and subtracted. BUSY is the number of busy turns per message
  (2 for engines that finish a request on the turn after its last packet, 1 since they
  finish it on the same turn). The run loop around the turns (`Engine::run`: stop flag,
  idle counting) is printed separately as "loop", from the same subtraction over the
  whole engine thread (`Engine::serve`), less its looks at the control sockets (`Engine::poll_io`, an
  `epoll_wait` every 256 turns, whose rate differs a little between phases); it is
  about 0 when the loop does nothing per message.
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


RUN = r"^hamlyn_engine::event_loop::Engine::serve$"
TURN = r"^hamlyn_engine::engine::EngineState::turn$"
POLL_IO = r"^hamlyn_engine::event_loop::Engine::poll_io$"


def loop_ir(incl):
    """The engine thread's instructions, less its looks at the control sockets."""
    _, run = find(incl, RUN)
    _, io = find(incl, POLL_IO)
    return run - io


def main():
    args = sys.argv[1:]
    json_path = None
    if "--json" in args:
        i = args.index("--json")
        json_path = args[i + 1]
        del args[i : i + 2]
    n = int(args[0])
    prefix = args[1]
    busy = int(args[2]) if len(args) > 2 else 1
    idle = parse(prefix + ".2")
    idle_turns, idle_turn_ir = find(idle, TURN)
    idle_run = loop_ir(idle)
    per_turn = idle_turn_ir / idle_turns
    per_loop = idle_run / idle_turns
    print(
        f"idle phase: {idle_turns} turns, {per_turn:.1f} instructions per idle turn, "
        f"{per_loop:.1f} with the loop"
    )
    cols = {}
    for part, path in ((3, "normal"), (4, "fast"), (5, "direct")):
        incl = parse(f"{prefix}.{part}")
        if path == "direct":
            _, send = find(incl, r"^hamlyn::direct::DirectTarget::send$")
            engine = loop = 0.0
            turns = 0
        else:
            _, send = find(incl, r"^hamlyn::terminus::Terminus::send$")
            _, drop = find(incl, r"drop_in_place<hamlyn::terminus::SendHandle>$")
            send += drop
            turns, turn_ir = find(incl, TURN)
            run = loop_ir(incl)
            idle_turns_here = turns - busy * n
            engine = (turn_ir - idle_turns_here * per_turn) / n
            loop = (run - idle_turns_here * per_loop) / n - engine
        calls, recv = find(incl, r"^(hamlyn::queue::NotifyQueue::poll|path8::receive)$")
        if calls != n:
            print(f"warning: {path}: NotifyQueue::poll called {calls} times, not {n}")
        cols[path] = (send / n, engine, recv / n, loop, turns)
    print(f"{'per message':<14}" + "".join(f"{p:>10}" for p in cols))
    rows = ("send side", "engine", "receive side")
    for i, row in enumerate(rows):
        print(f"{row:<14}" + "".join(f"{c[i]:>10.0f}" for c in cols.values()))
    print(f"{'total':<14}" + "".join(f"{c[0] + c[1] + c[2]:>10.0f}" for c in cols.values()))
    print(f"{'(loop)':<14}" + "".join(f"{c[3]:>10.0f}" for c in cols.values()))
    print(f"{'engine turns':<14}" + "".join(f"{c[4]:>10}" for c in cols.values()))
    if json_path:
        write_json(json_path, n, per_turn, cols)


def write_json(path, n, per_turn, cols):
    """The table as JSON: instructions per 8-byte message, by path and side."""
    import json

    names = {"normal": "mediated_normal_slot", "fast": "mediated_fast_slot", "direct": "direct"}
    doc = {
        "what": "instructions per 8-byte tagged message (callgrind, path8 example, "
        "engine busy-polling); regenerate with bench/instructions.sh",
        "messages_per_path": n,
        "idle_engine_turn": round(per_turn, 1),
        "paths": {
            names[p]: {
                "send_side": round(c[0]),
                # Not written while the subtraction of idle turns is unsound (see below).
                "engine": None if p != "direct" else 0,
                "receive_side": round(c[2]),
                "total": round(c[0] + c[2]) if p == "direct" else None,
            }
            for p, c in cols.items()
        },
        "engine_note": "the engine column (busy turns less idle turns at the idle "
        "phase's rate) is left out: under valgrind the message phases now run thousands "
        "of idle turns per message, costing about 25 instructions more each than the "
        "idle phase's, which swamps the ~1,500 of a message (issue 14 follow-up)",
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
