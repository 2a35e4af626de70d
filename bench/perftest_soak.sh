#!/usr/bin/env bash
# A soak of Debian's unmodified perftest between two droced on this machine: the same transfer
# again and again on one long-lived pair, each run's transport counters printed, and everything
# kept when a run fails. For failures too rare for one bench run (issue #13's retry-exceeded at
# SCHED_RR: 4 in about 160 runs of 200 000 x 64 KiB, found with this loop; docs/droced.md).
#
#   bench/perftest_soak.sh [--runs N] [--out DIR] [--no-build] [--droced ARG]... [-- TOOL ARGS...]
#
#   --runs N    runs (default 20); the script stops at the first failure unless --keep-going
#   --keep-going  go on after a failure (each failure gets its own folder)
#   --out DIR   where failures are kept (default bench/out/soak-DATE)
#   --no-build  use build/release as it is
#   --droced A  pass A to both droced (repeatable), e.g. --droced --event-policy=other
#   -- TOOL ARGS  the perftest run (default: ib_write_bw -s 65536 -n 200000); -d, -x and -p
#               (a TCP port of its own; the client starts once the server listens) are added
#
# Per run, one line: the tool's exit status and its result line, then per droced (A serves, B is the client)
# what the run added to `droce counters`: retransmits, ACK timeouts, sequence NAKs sent and
# received, duplicates, out-of-sequence, retry-exceeded, frames built with no room (tx_no_mbuf),
# stuck blocks and port wake-ups. While a run goes, `droce status --json` of both is taken every
# 0.2 s; at a failure its last pair, both droced's logs and perftest's output are copied to
# DIR/fail-N. Exit status: 0 if every run passed, 1 if one failed, 2 for a usage error.
# Nothing leaves this machine: the two hosts talk over droce_shm.
set -euo pipefail

runs=20 keep_going=0 out='' build=1 droced_args=() tool=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=${2:?--runs needs a number}; shift ;;
    --keep-going) keep_going=1 ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    --no-build) build=0 ;;
    --droced) droced_args+=("${2:?--droced needs an argument}"); shift ;;
    --) shift; tool=("$@"); break ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "perftest_soak.sh: unknown option $1 (-h for help)" >&2; exit 2 ;;
  esac
  shift
done
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "perftest_soak.sh: --runs wants a positive number" >&2; exit 2; }
[ ${#tool[@]} -gt 0 ] || tool=(ib_write_bw -s 65536 -n 200000)
[ -z "$out" ] || out=$(realpath -m "$out")
cd "$(dirname "$0")/.."
[ -n "$out" ] || out=$PWD/bench/out/soak-$(date -u +%Y%m%d-%H%M%S)
command -v "${tool[0]}" >/dev/null || { echo "perftest_soak.sh: ${tool[0]} not found (Debian's perftest)" >&2; exit 2; }
if [ "$build" = 1 ] || [ ! -x build/release/apps/droced ]; then
  scripts/install-deps.sh
  pabi=$(scripts/fetch-rdma-core-headers.sh --pabi-only 2>/dev/null | tail -1)
  [ -f build/release/build.ninja ] || meson setup build/release -Dbuildtype=release -Dprovider=enabled >/dev/null
  ninja -C build/release apps/droce apps/droced "provider/verbs/libdroce-rdmav$pabi.so" \
    provider/preload/libdroce-preload.so >/dev/null
fi

droce=build/release/apps/droce
work=$(mktemp -d "${TMPDIR:-/tmp}/droce-soak.XXXXXX")
snapper=
. scripts/lib/droced-pair.sh
cleanup() {
  [ -z "$snapper" ] || kill "$snapper" 2>/dev/null || true
  droced_pair_stop
  rm -rf "$work"
}
trap cleanup EXIT
droced_pair_start build/release/apps "$work/hosts" --mtu 9000 "${droced_args[@]}"
# perftest's TCP exchange: a port of our own, below the kernel's ephemeral range (32768 up).
port=$((10000 + $$ % 20000))

# One line of numbers: what a run adds to droced's counters (the transport totals outlive the QPs).
counters() {
  env -u LD_PRELOAD "$droce" counters --json --socket "$1" | python3 -c '
import json, sys
c = json.load(sys.stdin); t = c["transport"]
print(*[t[k] for k in ("retransmits", "timeouts", "seq_naks_sent", "seq_naks_received", "duplicate_requests",
                       "out_of_sequence", "retry_exceeded")],
      c["tx_no_mbuf"], c["stuck_blocks"], c["wakeups_by_port"])'
}
delta() { paste -d' ' <(tr ' ' '\n' <<<"$1") <(tr ' ' '\n' <<<"$2") | awk '{printf "%s%d", (NR > 1 ? " " : ""), $2 - $1}'; }
snapshots() {  # the last two `droce status --json` of both, every 0.2 s
  while :; do
    for h in a b; do
      env -u LD_PRELOAD "$droce" status --json --socket "$work/hosts/$h/droce0.sock" >"$work/status.$h.new" 2>/dev/null &&
        mv "$work/status.$h.new" "$work/status.$h.json"
    done
    sleep 0.2
  done
}

echo "soak: ${tool[*]}, $runs runs, droced ${droced_args[*]:-(defaults)}; failures kept in $out"
echo "per droced: retransmits timeouts seq_naks_sent seq_naks_received duplicates out_of_sequence retry_exceeded tx_no_mbuf stuck_blocks wakeups_by_port"
failed=0
for i in $(seq "$runs"); do
  a0=$(counters "$DROCE_A_SOCK") b0=$(counters "$DROCE_B_SOCK")
  snapshots & snapper=$!
  cmd=(timeout 120 "${tool[@]}" -d droce0 -x 1 -p "$port")
  "$droce" exec --run-dir "$work/hosts/a" -- "${cmd[@]}" >"$work/server.out" 2>&1 & server=$!
  rc=0
  if wait_tcp_listen "" "$port" "$server"; then
    "$droce" exec --run-dir "$work/hosts/b" -- "${cmd[@]}" 127.0.0.1 >"$work/client.out" 2>&1 || rc=$?
  else
    rc=255
    echo "(the server did not listen on TCP $port)" >"$work/client.out"
  fi
  [ "$rc" = 0 ] || kill "$server" 2>/dev/null || true  # a server whose client failed waits out its timeout
  wait "$server" 2>/dev/null || true
  kill "$snapper" 2>/dev/null || true
  wait "$snapper" 2>/dev/null || true
  snapper=
  result=$(awk '$1 ~ /^[0-9]+$/ && NF >= 5 {r = $0} END {print r == "" ? "-" : r}' "$work/client.out" | tr -s ' \t' ' ')
  echo "run $i: exit $rc, result [${result# }]; A: $(delta "$a0" "$(counters "$DROCE_A_SOCK")"); B: $(delta "$b0" "$(counters "$DROCE_B_SOCK")")"
  if [ "$rc" != 0 ]; then
    failed=1
    mkdir -p "$out/fail-$i"
    cp "$work"/client.out "$work"/server.out "$work"/hosts/a.log "$work"/hosts/b.log "$out/fail-$i/"
    cp "$work"/status.*.json "$out/fail-$i/" 2>/dev/null || true
    grep -m2 -i 'status\|error' "$work/client.out" | sed 's/^/  /' || true
    echo "  kept in $out/fail-$i"
    [ "$keep_going" = 1 ] || break
  fi
done
exit "$failed"
