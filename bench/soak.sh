#!/usr/bin/env bash
# Soak: two `hamlyn node` daemons in network namespaces joined by a veth pair, a
# checksummed stream in each direction (`hamlyn soak send` / `hamlyn soak recv`), random
# link cuts and random kills of the sending clients, for SECONDS (default 3600). Reports
# messages and bytes sent, delivered, failed and lost, and corrupt arrivals (issue 16; goal
# 0 lost, 0 corrupt). Needs root and iproute2. Everything it creates is named after its
# process id and removed on exit, whatever happens.
#
#   bench/soak.sh [SECONDS]            # uses target/release/hamlyn (builds it if missing)
#   HAMLYN=path/to/hamlyn bench/soak.sh 600
#
# Link cuts (the veth pair down for 0.5-8 s, so both shorter and longer than the peer
# timeout of 3 s) and sender kills (SIGKILL, then a new instance 2 s later) happen at
# random, never within 5 s of each other: a sender killed while a cut is also losing its
# session could not be told of its failures (it is dead), which would read as a loss the
# system did not make. Receivers are not killed: what a dead receiver had not checked yet
# cannot be told apart from a loss. A message counts as lost when the sender was told
# `Sent` and, 60 s later, neither has the receiver verified it nor has its handle failed.
set -euo pipefail

seconds=${1:-3600}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
hamlyn=${HAMLYN:-$root/target/release/hamlyn}
if [[ ! -x $hamlyn ]]; then
    (cd "$root" && cargo build --release -p hamlyn-cli)
fi
[[ $(id -u) == 0 ]] || { echo "soak: needs root (network namespaces)" >&2; exit 2; }
command -v ip >/dev/null || { echo "soak: needs iproute2 (ip)" >&2; exit 2; }

tag="hs$(($$ % 100000))"
dir=$(mktemp -d "/tmp/hamlyn-soak-$$.XXXX")
secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
pids=()

cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "${tag}a" 2>/dev/null || true
    ip netns del "${tag}b" 2>/dev/null || true
}
trap cleanup EXIT

ip netns add "${tag}a"
ip netns add "${tag}b"
ip -n "${tag}a" link set lo up
ip -n "${tag}b" link set lo up
ip link add "${tag}x" type veth peer name "${tag}y"
ip link set "${tag}x" netns "${tag}a"
ip link set "${tag}y" netns "${tag}b"
ip -n "${tag}a" addr add 10.77.0.1/24 dev "${tag}x"
ip -n "${tag}b" addr add 10.77.0.2/24 dev "${tag}y"
ip -n "${tag}a" link set "${tag}x" up
ip -n "${tag}b" link set "${tag}y" up

node() { # node ID NS ADDR PEER
    HAMLYN_SECRET=$secret ip netns exec "$2" "$hamlyn" node --socket "$dir/n$1.sock" \
        --node-id "$1" --listen "$3:7400" --peer "$4" --rails 2 \
        --heartbeat-ms 250 --peer-timeout-ms 3000 --node-key "$dir/n$1.key" \
        >"$dir/n$1.log" 2>&1 &
    pids+=($!)
}
node 1 "${tag}a" 10.77.0.1 2@10.77.0.2:7400
node 2 "${tag}b" 10.77.0.2 1@10.77.0.1:7400
for i in 1 2; do
    for _ in $(seq 200); do [[ -S $dir/n$i.sock ]] && break; sleep 0.1; done
    [[ -S $dir/n$i.sock ]] || { echo "soak: node $i did not start" >&2; cat "$dir/n$i.log" >&2; exit 1; }
done

# Receivers run to the end plus the resolve bound; senders to the end.
recv_seconds=$((seconds + 90))
receivers=()
"$hamlyn" soak recv --socket "$dir/n2.sock" --seconds "$recv_seconds" --out "$dir/recv-1to2" \
    s1to2 2>"$dir/recv-1to2.err" &
receivers+=($!)
"$hamlyn" soak recv --socket "$dir/n1.sock" --seconds "$recv_seconds" --out "$dir/recv-2to1" \
    s2to1 2>"$dir/recv-2to1.err" &
receivers+=($!)
pids+=("${receivers[@]}")

declare -A sender instance
start_sender() { # start_sender FROM-NODE STREAM
    local k=$2
    instance[$k]=$((${instance[$k]:-0} + 1))
    local left=$((end - SECONDS))
    ((left > 0)) || return 0
    "$hamlyn" soak send --socket "$dir/n$1.sock" --seconds "$left" \
        --instance "${instance[$k]}" --out "$dir/send-$k" "$k" 2>>"$dir/send-$k.err" &
    sender[$k]=$!
    pids+=($!)
}
end=$((SECONDS + seconds))
start_sender 1 s1to2
start_sender 2 s2to1

cuts=0 kills=0
while ((SECONDS < end)); do
    sleep $((5 + RANDOM % 20))
    ((SECONDS < end - 10)) || break
    if ((RANDOM % 2)); then
        ms=$((500 + RANDOM % 7500))
        ip -n "${tag}a" link set "${tag}x" down
        sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
        ip -n "${tag}a" link set "${tag}x" up
        cuts=$((cuts + 1))
        echo "soak: t=${SECONDS}s link cut for ${ms} ms"
    else
        if ((RANDOM % 2)); then from=1 k=s1to2; else from=2 k=s2to1; fi
        kill -9 "${sender[$k]}" 2>/dev/null || true
        wait "${sender[$k]}" 2>/dev/null || true
        sleep 2
        start_sender "$from" "$k"
        kills=$((kills + 1))
        echo "soak: t=${SECONDS}s sender $k killed and restarted (instance ${instance[$k]})"
    fi
done

# Let the senders finish and resolve, and the receivers drain; then stop the receivers
# before the daemons they are attached to.
for k in s1to2 s2to1; do wait "${sender[$k]}" 2>/dev/null || true; done
sleep 5
for p in "${receivers[@]}"; do kill -INT "$p" 2>/dev/null || true; done
sleep 1
for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
sleep 1

# Sum each sender instance's last line and each receiver's last line.
python3 - "$dir" "$seconds" "$cuts" "$kills" <<'EOF'
import json, os, sys
d, seconds, cuts, kills = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
def last_lines(path, key):
    last = {}
    if os.path.exists(path):
        for line in open(path):
            try:
                o = json.loads(line)
            except ValueError:
                continue
            last[o.get(key, 0)] = o
    return list(last.values())
tot = {}
print(f"soak: {seconds} s, {cuts} link cuts, {kills} sender kills")
for k in ("s1to2", "s2to1"):
    s = last_lines(f"{d}/send-{k}", "instance")
    r = last_lines(f"{d}/recv-{k[1:]}", "end")
    sent = {f: sum(o[f] for o in s)
            for f in ("sent", "bytes", "delivered", "failed", "lost", "failed_at_once")}
    rv = {f: sum(o[f] for o in r) for f in ("delivered", "bytes", "corrupt")}
    unresolved = sent["sent"] - sent["delivered"] - sent["failed"] - sent["lost"]
    print(f"  {k}: sent {sent['sent']} ({sent['bytes']} B), delivered {sent['delivered']}, "
          f"failed {sent['failed']}, LOST {sent['lost']}, unresolved when a sender stopped "
          f"{unresolved}; failed at once (peer known down) {sent['failed_at_once']}; "
          f"receiver verified {rv['delivered']} ({rv['bytes']} B), CORRUPT {rv['corrupt']}")
    for f in ("lost",):
        tot[f] = tot.get(f, 0) + sent[f]
    tot["corrupt"] = tot.get("corrupt", 0) + rv["corrupt"]
ok = tot["lost"] == 0 and tot["corrupt"] == 0
print("soak: " + ("PASS: 0 lost, 0 corrupt" if ok else f"FAIL: {tot}"))
sys.exit(0 if ok else 1)
EOF
