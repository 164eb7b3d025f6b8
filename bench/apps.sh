#!/usr/bin/env bash
# Speedup tables in the shape of seed 004's Tables 5 and 6: the Ising model on growing
# grids and the circuit simulator (the 32-bit adder) with linear and random gate
# placement, as P = 1, 2 and 4 processes of one node (`hamlyn run -n P`, an engine of its
# own), each against the sequential program; the median of REPEATS runs (default 3) of
# each, as the programs time themselves (between two barriers, start-up excluded).
# Prints a Markdown table (what docs/PERFORMANCE.md holds) with the machine's core count:
# with P above it the processes share cores, and the table says so.
#
#   bench/apps.sh [REPEATS]
set -euo pipefail

repeats=${1:-3}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
cargo build --release -q -p hamlyn-cli -p hamlyn-apps
bin=$root/target/release
cores=$(nproc)

# median of the numbers on stdin
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# ms COMMAND...: the "N ms" a program prints, median of $repeats runs
ms() {
    for _ in $(seq "$repeats"); do
        "$@" | sed -n 's/.*: \([0-9.]*\) ms.*/\1/p' | head -1
    done | median
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
note() { (($1 > cores)) && printf ' (%d processes on %d cores)' "$1" "$cores" || true; }

echo "Machine: $(nproc) cores, $(uname -sr); median of $repeats runs; times in ms."
echo
echo "Ising model (seed 004 Table 5 shape): 100 sweeps, beta 0.44"
echo
echo "| grid | sequential | P=1 | P=2 | speedup P=2 | P=4 | speedup P=4 |"
echo "|---|---|---|---|---|---|---|"
for n in 20 40 80 160 320; do
    seq_ms=$(ms "$bin/hamlyn-ising" --sequential "$n" 100 0.44 7)
    row="| ${n}×${n} | $seq_ms"
    for p in 1 2 4; do
        t=$(ms "$bin/hamlyn" run -n "$p" -- "$bin/hamlyn-ising" "$n" 100 0.44 7)
        row+=" | $t"
        ((p == 1)) || row+=" | $(ratio "$seq_ms" "$t")$(note "$p")"
    done
    echo "$row |"
done
echo
echo "Circuit simulator (seed 004 Table 6 shape): 32-bit adder, 200 test vectors"
echo
echo "| placement | sequential | P=1 | P=2 | speedup P=2 | P=4 | speedup P=4 |"
echo "|---|---|---|---|---|---|---|"
seq_ms=$(ms "$bin/hamlyn-circuit" --sequential 200)
for placement in linear random:7; do
    row="| ${placement%%:*} | $seq_ms"
    for p in 1 2 4; do
        t=$(ms "$bin/hamlyn" run -n "$p" -- "$bin/hamlyn-circuit" 200 "$placement")
        row+=" | $t"
        ((p == 1)) || row+=" | $(ratio "$seq_ms" "$t")$(note "$p")"
    done
    echo "$row |"
done
