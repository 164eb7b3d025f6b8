#!/usr/bin/env bash
# What the bindings cost per message, in one run (issue 15): an 8-byte ping-pong between
# two processes through one `hamlyn node` daemon, the same loop written against the C API
# (crates/hamlyn-capi/tests/c/pingpong.c, linked statically with the release library)
# and against the Rust library (crates/hamlyn-capi/examples/pingpong.rs), alternating,
# REPEATS times (default 5) of ROUNDS round trips (default 20000); then, if the Python
# package is importable (`pip install ./bindings/python`), its own Python-vs-Rust
# ping-pong (bindings/python/bench/pingpong.py) on the same daemon. Prints medians and
# the C API's overhead per message ((C round trip - Rust round trip) / 2). Nothing is
# asserted: it is a measurement.
#
#   bench/bindings.sh [REPEATS] [ROUNDS]
set -euo pipefail

repeats=${1:-5}
rounds=${2:-20000}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
cargo build --release -q -p hamlyn-cli -p hamlyn-capi
cargo build --release -q -p hamlyn-capi --example pingpong
tmp=$(mktemp -d /tmp/hamlyn-bindings.XXXX)
daemon=
cleanup() {
    [[ -n $daemon ]] && kill "$daemon" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

cc -O2 -std=c11 -D_GNU_SOURCE -I crates/hamlyn-capi/include -I crates/hamlyn-capi/tests/c \
    crates/hamlyn-capi/tests/c/pingpong.c target/release/libhamlyn_capi.a \
    -lpthread -ldl -lm -o "$tmp/pingpong-c"

export HAMLYN_SOCKET=$tmp/node.sock
target/release/hamlyn node --socket "$HAMLYN_SOCKET" --danger-insecure >"$tmp/node.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do [[ -S $HAMLYN_SOCKET ]] && break; sleep 0.1; done

# one PROGRAM: a pong and a ping of PROGRAM; prints the ping's ns per round trip
one() {
    local fifo=$tmp/seed seed pid
    rm -f "$fifo"
    mkfifo "$fifo"
    "$1" pong >"$fifo" 2>/dev/null &
    pid=$!
    read -r seed <"$fifo"
    HAMLYN_PEER_SEED=$seed HAMLYN_ROUNDS=$rounds "$1" ping 2>&1 >/dev/null |
        sed -n 's/^ping: \([0-9.]*\) ns per round trip/\1/p'
    wait "$pid"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

c=() r=()
for i in $(seq "$repeats"); do
    if ((i % 2)); then
        c+=("$(one "$tmp/pingpong-c")")
        r+=("$(one target/release/examples/pingpong)")
    else
        r+=("$(one target/release/examples/pingpong)")
        c+=("$(one "$tmp/pingpong-c")")
    fi
done
cm=$(printf '%s\n' "${c[@]}" | median)
rm_=$(printf '%s\n' "${r[@]}" | median)
echo "8-byte ping-pong through one daemon, $rounds round trips x $repeats repeats, $(nproc) cores"
echo
echo "| loop | round trip (median, µs) | one way (µs) |"
echo "|---|---|---|"
awk -v c="$cm" -v r="$rm_" 'BEGIN {
    printf "| Rust library | %.2f | %.2f |\n", r / 1000, r / 2000
    printf "| C API | %.2f | %.2f |\n", c / 1000, c / 2000
    printf "\nC API overhead per message: %.3f µs (%+.1f%% of Rust)\n", (c - r) / 2000, (c - r) / r * 100
}'
if python3 -c 'import hamlyn' 2>/dev/null; then
    echo
    python3 bindings/python/bench/pingpong.py --socket "$HAMLYN_SOCKET" --repeats "$repeats"
else
    echo
    echo "(Python: the package is not importable here; pip install ./bindings/python to add it)"
fi
