#!/usr/bin/env python3
"""What the Rats layer adds, in instructions per 16-byte message, from a callgrind run of
the `rats16` example (crates/hamlyn-rats/examples/rats16.rs), beside seed 001 Tables 1-2.

Usage: rats_instructions.py N PREFIX [--json FILE]
  N       messages per phase (the argument given to rats16)
  PREFIX  the callgrind output file given with --callgrind-out-file (PREFIX.2 is the
          library phase, PREFIX.3 the Rats tagged write, PREFIX.4 the simple datagram)
  --json FILE  also add the table to FILE under "rats" (bench/instructions.sh keeps it in
          docs/perf/instructions.json, after path8's table)

Each side is the inclusive cost of one function of the example (never inlined), divided
by N: lib_send / lib_receive (Terminus::send, NotifyQueue::poll), rats_write /
rats_get_tag (TaggedClient::write, TaggedServer::get_tag), dgram_send / dgram_receive
(SimpleClient::send with a reply seed, SimpleDatagram::ready). The engine's share is
not counted: it is the same message through the same engine in every phase. But a
sending thread that finds the embedded engine asleep runs the engine's turn itself,
inside Terminus::send, and those turns differ by a few dozen instructions from phase to
phase (timing): so a send side is the library phase's Terminus::send plus what the
side's function costs outside its own Terminus::send call (when it makes exactly one
per message; otherwise its inclusive count as it is).
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "crates", "hamlyn", "examples"))
from path8_table import find, parse  # noqa: E402

# Seed 001 (HP9000 J200, direct I/O, 16-byte messages): on-cp and off-cp instructions.
SEED = {
    "tagged_write": {
        "rats_functions": {"on_cp": 10 + 16 + 15, "off_cp": 6 + 20},
        "with_sendmsg_and_poll": {"on_cp": 141 + 3 * 16 // 4, "off_cp": 47},
    },
    "simple_datagram_44_16": {
        "rats_functions": {"on_cp": 10 + 39 + 14, "off_cp": 22},
        "with_sendmsg_and_poll": {"on_cp": 158 + 3 * (44 + 16) // 4, "off_cp": 36},
    },
}
GOAL = 150


def side(incl, name, n):
    calls, ir = find(incl, rf"^rats16::{name}$")
    if calls != n:
        print(f"warning: {name} called {calls} times, not {n}", file=sys.stderr)
    return ir / n


TERMINUS_SEND = r"^hamlyn::terminus::Terminus::send$"


def send_side(incl, name, n, lib_terminus_send):
    """A send side with the library phase's Terminus::send in place of its own."""
    s = side(incl, name, n)
    calls, ir = find(incl, TERMINUS_SEND)
    if calls != n:
        print(f"note: {name}: {calls} Terminus::send calls, not {n}; counted as it is", file=sys.stderr)
        return s
    return s - ir / n + lib_terminus_send


def main():
    args = sys.argv[1:]
    json_path = None
    if "--json" in args:
        i = args.index("--json")
        json_path = args[i + 1]
        del args[i : i + 2]
    n = int(args[0])
    prefix = args[1]
    lib = parse(prefix + ".2")
    tagged = parse(prefix + ".3")
    dgram = parse(prefix + ".4")
    lib_calls, lib_ts = find(lib, TERMINUS_SEND)
    lib_ts = lib_ts / max(lib_calls, 1)
    rows = {
        "library_tagged": (side(lib, "lib_send", n), side(lib, "lib_receive", n)),
        "rats_tagged_write": (
            send_side(tagged, "rats_write", n, lib_ts),
            side(tagged, "rats_get_tag", n),
        ),
        "rats_simple_datagram_reply_seed": (
            send_side(dgram, "dgram_send", n, lib_ts),
            side(dgram, "dgram_receive", n),
        ),
    }
    base = sum(rows["library_tagged"])
    print(f"{'per 16 B message':<34}{'send':>8}{'receive':>9}{'total':>8}{'added':>8}")
    out = {}
    for name, (s, r) in rows.items():
        added = s + r - base
        print(f"{name:<34}{s:>8.0f}{r:>9.0f}{s + r:>8.0f}{added:>+8.0f}")
        out[name] = {
            "send_side": round(s),
            "receive_side": round(r),
            "total": round(s + r),
            "added_to_library": round(added),
        }
    added = out["rats_tagged_write"]["added_to_library"]
    print(f"goal: Rats adds at most {GOAL} to a tagged write: {added} ({'met' if added <= GOAL else 'NOT met'})")
    if json_path:
        with open(json_path, encoding="utf-8") as f:
            doc = json.load(f)
        doc["rats"] = {
            "what": "instructions per 16-byte message through the Rats layer and through "
            "the library alone, send and receive side, engine not counted (callgrind, "
            "rats16 example); regenerate with bench/instructions.sh",
            "messages_per_phase": n,
            "paths": out,
            "goal": f"the layer adds at most {GOAL} instructions to a tagged write",
            "goal_met": added <= GOAL,
            "seed_001": SEED,
        }
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
