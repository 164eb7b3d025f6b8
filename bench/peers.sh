#!/bin/sh
# Runs `hamlyn bench --peers`: Hamlyn measured beside UCX (ucx_perftest, shared memory and
# TCP) and raw TCP (sockperf) on this machine, in the same run (DESIGN §8).
# Installs the peers first when missing (Debian/Ubuntu: apt-get, as root or with sudo).
# Arguments are passed to `hamlyn bench`, e.g. `bench/peers.sh --quick`; without
# `--modes`, every mode is measured, TCP links in clear (`tcp-plain`) too.
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
# Without --modes, TCP links in clear are measured beside the secured ones: raw TCP and
# UCX's tcp transport neither authenticate nor encrypt, so `tcp-plain` is the figure that
# compares the layer alone (the report's goals name it "links in clear").
case " $* " in
*" --modes"*) ;;
*) set -- --modes direct,mediated,tcp,tcp-plain "$@" ;;
esac
exec target/release/hamlyn bench --peers "$@"
