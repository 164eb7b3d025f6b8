#!/bin/sh
# Runs `hamlyn bench --peers`: Hamlyn measured beside UCX (ucx_perftest, shared memory and
# TCP) and raw TCP (sockperf) on this machine, in the same run (DESIGN §8).
# Installs the peers first when missing (Debian/Ubuntu: apt-get, as root or with sudo).
# Arguments are passed to `hamlyn bench`, e.g. `bench/peers.sh --quick`.
set -eu

cd "$(dirname "$0")/.."

missing=""
command -v ucx_perftest >/dev/null 2>&1 || missing="$missing ucx-utils"
command -v sockperf >/dev/null 2>&1 || missing="$missing sockperf"
if [ -n "$missing" ]; then
    echo "peers.sh: installing$missing" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq >/dev/null
    # shellcheck disable=SC2086 # $missing is a list of package names
    $sudo apt-get install -y -qq $missing >/dev/null
fi

cargo build --release -p hamlyn-cli
exec target/release/hamlyn bench --peers "$@"
