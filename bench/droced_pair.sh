#!/usr/bin/env bash
# Two droced processes over net_memif on this machine (release build):
# message rate and bandwidth of RDMA WRITE and SEND, 64 B and 64 KiB, one QP
# and 16, through the client library (droce-selftest --bench); then the CPU
# an idle daemon uses (5 s of /proc/<pid>/stat).
#   bench/droced_pair.sh [BUILD_DIR]   (default build/release)
#   DROCED_FLAGS="--lcores 0,1" bench/droced_pair.sh   (flags for both daemons)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
ninja -C "$build" apps/droced apps/droce-selftest >/dev/null
# shellcheck source=scripts/lib/droced-pair.sh
. scripts/lib/droced-pair.sh
on_exit droced_pair_stop
# shellcheck disable=SC2086 # DROCED_FLAGS is a list of flags
droced_pair_start "$build/apps" build/bench-droced ${DROCED_FLAGS:-}
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
"$build/apps/droce-selftest" --a "$DROCE_A_SOCK" --b "$DROCE_B_SOCK" --bench --qps 16 --size 65536

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
sleep 2
t0=$(ticks "$DROCE_A_PID")
sleep 5
t1=$(ticks "$DROCE_A_PID")
hz=$(getconf CLK_TCK)
awk -v d=$((t1 - t0)) -v hz="$hz" 'BEGIN { printf "idle droced: %.1f %% of one CPU over 5 s\n", 100 * d / hz / 5 }'
