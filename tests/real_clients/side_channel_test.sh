#!/usr/bin/env bash
# Programs that open a TCP side channel to the peer's RDMA address, or find the RDMA device by a
# kernel interface address, on the README's pair of droce hosts with kernel-visible addresses
# (DROCE_PAIR_NETNS=1: each droced in its own namespace, its addresses on the kernel's veth;
# RoCE over droce's same-host link):
#   - qperf -cm1 rc_bw and rc_lat, a server each (rdma_cm, and qperf's TCP control connection to
#     10.77.0.1);
#   - libfabric's fi_pingpong over the verbs provider: -e msg, -e rdm (verbs;ofi_rxm) and -e dgram,
#     each with -c (every byte checked);
#   - perftest's ib_write_bw with its TCP exchange to the peer's RDMA address (not loopback).
#
#   side_channel_test.sh DROCE DROCED PAIR_LIB
#
# Root only (network namespaces); each program skipped with the reason when its package is
# missing (qperf, libfabric-bin, perftest).
set -uo pipefail
droce=$(realpath "$1")
droced=$(realpath "$2")
pair_lib=$(realpath "$3")

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (the pair's network namespaces)"
command -v ip >/dev/null || skip "needs ip (iproute2)"

tmp=$(mktemp -d /tmp/droce-side-channel.XXXXXX)
fail=0
export DROCE_PAIR_NETNS=1
# shellcheck source=scripts/lib/droced-pair.sh
. "$pair_lib"  # and scripts/lib/netns.sh: server_ready
DROCE_BIN=$droce
on_exit rm -rf "$tmp"
on_exit droced_pair_stop
on_exit kill_jobs TERM
droced_pair_start "$(dirname "$droced")" "$tmp/hosts" || skip "the namespaced pair did not start"

# run_on a|b LIMIT PROGRAM...: a verbs program on host A or B, for at most LIMIT seconds.
run_on() {
  local ns=$DROCE_A_NS side=$1 limit=$2
  [ "$side" = b ] && ns=$DROCE_B_NS
  shift 2
  timeout "$limit" ip netns exec "$ns" "$droce" exec --run-dir "$DROCE_PAIR_WORK/$side" -- "$@"
}

# two WHAT SERVER_ARGS -- CLIENT_ARGS: the server on host A, the client on host B.
two() {
  local what=$1 spid st_s st_c
  shift
  local -a s=() c=()
  while [ "$1" != -- ]; do s+=("$1"); shift; done
  shift
  c=("$@")
  run_on a 90 "${s[@]}" >"$tmp/server.txt" 2>&1 &
  spid=$!
  server_ready "$DROCE_A_NS" "$DROCE_A_SOCK" "${PORT:-}"
  run_on b 60 "${c[@]}" >"$tmp/client.txt" 2>&1
  st_c=$?
  # $spid is the subshell running run_on: TERM its child too (timeout, which passes it on), or
  # the server outlives the test, still listening on the port the next server wants.
  if [ "${SERVER_STAYS:-0}" = 1 ]; then pkill -TERM -P $spid; kill -TERM $spid 2>/dev/null; wait $spid; st_s=0
  else wait $spid; st_s=$?; fi
  if [ $st_c -eq 0 ] && [ $st_s -eq 0 ] && ! grep -qiE "fail|error" "$tmp/client.txt"; then
    echo "ok: $what: $(grep -E "${RESULT_LINE:-.}" "$tmp/client.txt" | tail -1 | tr -s ' ')"
  else
    echo "FAIL: $what (client $st_c, server $st_s)"
    tail -n 8 "$tmp/client.txt" "$tmp/server.txt" | sed 's/^/    /'
    fail=1
  fi
}

if command -v qperf >/dev/null; then
  # A server per test: between two tests of one client qperf's server listens again, and a loaded
  # machine lets the client's connect come first (rdma_cm rejects it: no listener), as
  # tests/real_clients/rdmacm_test.sh found.
  PORT=19765 SERVER_STAYS=1 RESULT_LINE="bw" two "qperf -cm1 rc_bw" qperf -- qperf -cm1 10.77.0.1 rc_bw
  PORT=19765 SERVER_STAYS=1 RESULT_LINE="latency" two "qperf -cm1 rc_lat" qperf -- qperf -cm1 10.77.0.1 rc_lat
else
  echo "SKIP (part): qperf not installed (Debian package qperf)"
fi
if command -v fi_pingpong >/dev/null; then
  PORT=47592 RESULT_LINE='^[0-9]' two "fi_pingpong -p verbs -e msg -c" fi_pingpong -p verbs -e msg -I 200 -c -- \
    fi_pingpong -p verbs -e msg -I 200 -c 10.77.0.1
  PORT=47592 RESULT_LINE='^[0-9]' two "fi_pingpong -p 'verbs;ofi_rxm' -e rdm -c" fi_pingpong -p "verbs;ofi_rxm" -e rdm -I 200 -c -- \
    fi_pingpong -p "verbs;ofi_rxm" -e rdm -I 200 -c 10.77.0.1
  PORT=47592 RESULT_LINE='^[0-9]' two "fi_pingpong -p verbs -e dgram -c" fi_pingpong -p verbs -e dgram -I 200 -c -- \
    fi_pingpong -p verbs -e dgram -I 200 -c 10.77.0.1
else
  echo "SKIP (part): fi_pingpong not installed (Debian package libfabric-bin)"
fi
if command -v ib_write_bw >/dev/null; then
  PORT=18515 RESULT_LINE='^ *65536' two "ib_write_bw, TCP exchange to 10.77.0.1" ib_write_bw -d droce0 -x 1 -s 65536 -n 2000 -- \
    ib_write_bw -d droce0 -x 1 -s 65536 -n 2000 10.77.0.1
fi
# The frames took droce's same-host link, not the veth: droced B received them.
rx=$("$droce" counters --json --socket "$DROCE_B_SOCK" | tr ',{}' '\n\n\n' | sed -n 's/^"rx_frames":\([0-9]*\)$/\1/p')
if [ "${rx:-0}" -gt 1000 ]; then echo "ok: droced B received $rx RoCE frames"; else echo "FAIL: droced B rx_frames ${rx:-?}"; fail=1; fi

[ $fail -eq 0 ] && echo "all side-channel programs passed"
exit $fail
