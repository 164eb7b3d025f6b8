#!/bin/sh
# Instructions per 8-byte message on the direct and mediated paths, counted by callgrind
# (deterministic, unlike time on a shared VM), written to docs/perf/instructions.json and
# printed (issue 14 item 5; docs/PERFORMANCE.md, "Where the time goes", explains the
# columns). Needs valgrind and python3. N (messages per path) defaults to 300 (counts per message do not depend on it; about 40 s under valgrind once built, 3 min at 4000).
# Then the same for the Rats layer (issue 10): a 16-byte tagged write and a 16-byte simple
# datagram with a reply seed through Rats, beside the library alone (rats16 example,
# bench/rats_instructions.py; added to the same file under "rats").
# Usage: bench/instructions.sh [OUT.json]
set -eu

cd "$(dirname "$0")/.."
n="${N:-300}"
out="${1:-docs/perf/instructions.json}"
command -v valgrind >/dev/null 2>&1 || { echo "instructions.sh: valgrind is not installed" >&2; exit 1; }
cargo build --release -q -p hamlyn --example path8
cargo build --release -q -p hamlyn-rats --example rats16
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
valgrind --tool=callgrind --dump-before=path8_mark \
    --callgrind-out-file="$tmp/path8.cg" target/release/examples/path8 "$n" \
    >"$tmp/path8.out" 2>"$tmp/valgrind.log"
python3 crates/hamlyn/examples/path8_table.py "$n" "$tmp/path8.cg" --json "$out"
valgrind --tool=callgrind --dump-before=rats16_mark \
    --callgrind-out-file="$tmp/rats16.cg" target/release/examples/rats16 "$n" \
    >"$tmp/rats16.out" 2>"$tmp/valgrind-rats.log"
python3 bench/rats_instructions.py "$n" "$tmp/rats16.cg" --json "$out"
echo "instructions.sh: wrote $out"
