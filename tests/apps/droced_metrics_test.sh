#!/usr/bin/env bash
# droced --metrics: two droce hosts on the same-host link, host A serving its counters as
# OpenMetrics on a free loopback port. After an ibv_rc_pingpong between them (data checked), a
# scrape parsed by prometheus_client's OpenMetrics parser must match `droce counters --json` read
# just before and after it (droced_metrics_check.py totals); during a second pingpong, the
# per-QP families must match `droce qps --json` (qps); bad requests get 400/404/405 and droced
# A still serves (refusals), and it stops cleanly with SIGTERM.
#
#   droced_metrics_test.sh DROCE DROCED PAIR_LIB CHECK_PY
#
# DROCE is the built droce CLI (droce exec finds the provider and preload next to it), DROCED the
# droced binary, PAIR_LIB scripts/lib/droced-pair.sh, CHECK_PY tests/apps/droced_metrics_check.py.
# Skips (77) without /usr/bin/python3, its prometheus_client (Debian package
# python3-prometheus-client) or ibv_rc_pingpong (ibverbs-utils).
set -uo pipefail

if [ $# -ne 4 ]; then
  echo "usage: $0 DROCE DROCED PAIR_LIB CHECK_PY" >&2
  exit 2
fi
droce=$(realpath "$1")
droced=$(realpath "$2")
pair_lib=$(realpath "$3")
check=$(realpath "$4")
py=/usr/bin/python3

skip() { echo "SKIP: $*"; exit 77; }
[ -x "$py" ] || skip "no /usr/bin/python3"
"$py" -c 'import prometheus_client.openmetrics.parser' 2>/dev/null ||
  skip "python3's prometheus_client is not installed (Debian package python3-prometheus-client)"
command -v ibv_rc_pingpong >/dev/null || skip "ibv_rc_pingpong not installed (Debian package ibverbs-utils)"

tmp=$(mktemp -d /tmp/droce-metrics-test.XXXXXX)
fail=0
# shellcheck source=scripts/lib/droced-pair.sh
. "$pair_lib"
on_exit rm -rf "$tmp"
on_exit droced_pair_stop
on_exit kill_jobs TERM

free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
metrics_port=$(free_port)
url=http://127.0.0.1:$metrics_port/metrics
DROCE_PAIR_A_ARGS="--metrics 127.0.0.1:$metrics_port" droced_pair_start "$(dirname "$droced")" "$tmp/hosts" || exit 1
grep -q "metrics on $url" "$tmp/hosts/a.log" || { echo "FAIL: droced A did not say where its metrics are"; fail=1; }

# The verbs programs run through `droce exec` of their host, as a user would; started straight
# from this shell (no function), so that a background one's $! is droce exec, which passes
# SIGTERM on.
check() { "$py" "$check" "$1" --url "$url" --droce "$droce" --socket "$DROCE_A_SOCK" || fail=1; }

# pingpong PORT ITERS LOG: server on A, client on B; 0 when both ended well.
pingpong() {
  local port=$1 iters=$2 log=$3
  "$droce" exec --run-dir "$tmp/hosts/a" -- timeout 60 ibv_rc_pingpong -g 1 -c -s 4096 -n "$iters" -p "$port" \
    >"$log.server" 2>&1 &
  local server=$!
  wait_tcp_listen "" "$port" "$server" || true
  local crc=0 src=0
  "$droce" exec --run-dir "$tmp/hosts/b" -- timeout 60 ibv_rc_pingpong -g 1 -c -s 4096 -n "$iters" -p "$port" \
    127.0.0.1 >"$log.client" 2>&1 || crc=$?
  wait "$server" || src=$?
  [ "$crc" -eq 0 ] && [ "$src" -eq 0 ] && return 0
  echo "--- server ($src)"; cat "$log.server"; echo "--- client ($crc)"; cat "$log.client"
  return 1
}

# ---- totals, after traffic ----------------------------------------------------------------------
if pingpong "$(free_port)" 500 "$tmp/pp1"; then
  echo "ok: ibv_rc_pingpong, 500 x 4096 bytes, data checked"
  check totals
else
  echo "FAIL: ibv_rc_pingpong between the hosts"
  fail=1
fi

# ---- per QP, while a pingpong runs --------------------------------------------------------------
qp_live() { "$droce" qps --json --socket "$DROCE_A_SOCK" 2>/dev/null | grep -q '"state":"RTS"'; }
qp_moving() { [ "$("$droce" qps --json --socket "$DROCE_A_SOCK" | "$py" -c 'import json, sys; print(sum(r["tx_packets"] for r in json.load(sys.stdin)))')" -gt 100 ]; }
port=$(free_port)
"$droce" exec --run-dir "$tmp/hosts/a" -- timeout 60 ibv_rc_pingpong -g 1 -c -n 100000000 -p "$port" \
  >"$tmp/pp2.server" 2>&1 &
server=$!
wait_tcp_listen "" "$port" "$server" || true
"$droce" exec --run-dir "$tmp/hosts/b" -- timeout 60 ibv_rc_pingpong -g 1 -c -n 100000000 -p "$port" 127.0.0.1 \
  >"$tmp/pp2.client" 2>&1 &
client=$!
if wait_for 30 qp_live && wait_for 30 qp_moving; then
  check qps
else
  echo "FAIL: no QP of host A in RTS with traffic within 30 s"
  cat "$tmp/pp2.server" "$tmp/pp2.client"
  fail=1
fi
kill -TERM "$client" "$server" 2>/dev/null
wait "$client" "$server" 2>/dev/null

# ---- bad requests, and droced after them --------------------------------------------------------
check refusals
if kill -0 "$DROCE_A_PID" 2>/dev/null; then
  echo "ok: droced A lives after the bad requests"
else
  echo "FAIL: droced A is gone"
  fail=1
fi
if droced_stop "$DROCE_A_PID" "$DROCE_B_PID"; then
  echo "ok: both droced stopped cleanly"
else
  echo "FAIL: a droced did not exit 0 on SIGTERM"
  cat "$tmp/hosts/a.log"
  fail=1
fi
DROCE_A_PID='' DROCE_B_PID=''
exit "$fail"
