#!/usr/bin/env bash
# fio's rdma ioengine (Debian's fio, unmodified) between two droce hosts (issue #38): a server
# (rw=read, no hostname) on host A and a client (rw=write, hostname=A's address) on host B, each
# started through `droce exec` of its host, for each of the engine's verbs the client can ask for:
#   write  the client RDMA WRITEs into the server's buffers;
#   read   the client RDMA READs from them;
#   send   the client SENDs and the server receives (the server's side is the engine's `recv`:
#          it turns the client's `send` into `recv` for itself).
# Each case asserts both fio's exit status 0, no error in their JSON output, the client's
# write.io_bytes = the size, and what moved on the wire: for write, droced A received at least
# the size in payload; for read, it sent at least that; for send, the server's read.io_bytes =
# the size and droced A sent no RNR NAK.
#
# The send case gives the server an iodepth of size/bs, so that it posts a receive for every
# message before the client sends the first. fio's engine needs that (its own comment in
# fio_rdmaio_connect says the RECV side should be deeper than the SEND side): it connects with
# rnr_retry_count 0, so a single RNR NAK fails the client's QP (IBV_WC_RNR_RETRY_EXC_ERR), and
# nothing in its protocol orders the server's next ibv_post_recv before the client's next SEND;
# with iodepth 1 on both sides the two race after every message, and the kernel's rxe fails
# there as droce does (docs/cm.md, "fio's rdma engine", has the captures). The client's
# `verb=recv` is not run: fio 3.33 has no client side for it (it prints "unknown rdma protocol -
# 4" and dereferences a null WR).
#
#   fio_test.sh DROCE DROCED PAIR_LIB
#
# Skips (77) when fio is missing or was built without its rdma engine. FIO_CASES=REGEX runs only
# the verbs that match.
set -uo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 DROCE DROCED PAIR_LIB" >&2
  exit 2
fi
droce=$(realpath "$1")
droced=$(realpath "$2")
pair_lib=$(realpath "$3")
# timeout(1) that prints a stuck program's stacks first
deadline=$(dirname "$(realpath "$0")")/deadline.sh

skip() { echo "SKIP: $*"; exit 77; }
command -v fio >/dev/null || skip "fio not installed (Debian package fio)"
fio --enghelp=rdma >/dev/null 2>&1 || skip "this fio has no rdma ioengine"

tmp=$(mktemp -d /tmp/droce-fio-test.XXXXXX)
fail=0
# shellcheck source=scripts/lib/droced-pair.sh
. "$pair_lib"  # and scripts/lib/netns.sh
DROCE_BIN=$droce  # for wait_cm_listen
on_exit rm -rf "$tmp"
on_exit droced_pair_stop
on_exit kill_jobs KILL

droced_pair_start "$(dirname "$droced")" "$tmp/hosts" --mtu 9000 || exit 1
hosts=$tmp/hosts
size=$((4 * 1024 * 1024)) bs=$((64 * 1024))

# A TCP-like port for rdma_cm, apart from other tests' ports.
port=$((21000 + $$ % 10000))

# json FILE EXPR: EXPR (Python, over `j`, fio's JSON report in FILE, or `c`, droce's counters)
# printed. fio's server prints "fio: waiting for connection" before its report.
json() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
j = c = json.loads(text[text.find('{'):])
print(eval(sys.argv[2]))
EOF
}
counters() { "$droce" counters --json --socket "$hosts/$1/droce0.sock" >"$2"; }

# fio_case VERB SERVER_IODEPTH: one run; sets `why` to what went wrong ("" if nothing).
fio_case() {
  local verb=$1 sdepth=$2 name=fio.$1
  [ -z "${FIO_CASES:-}" ] || [[ $name =~ $FIO_CASES ]] || return 0
  port=$((port + 1))
  local s=$tmp/$verb.server c=$tmp/$verb.client src=0 crc=0 server
  local common=(--ioengine=rdma --port="$port" --bs="$bs" --size="$size" --thread --output-format=json)
  why=""
  counters a "$tmp/$verb.before"
  droced_pair_run a "$deadline" 60 fio --name=server "${common[@]}" --rw=read --iodepth="$sdepth" \
    >"$s" 2>&1 &
  server=$!
  wait_cm_listen "$hosts/a/droce0.sock" "$port" || why+=" the server never listened;"
  droced_pair_run b "$deadline" 60 fio --name=client "${common[@]}" --rw=write --verb="$verb" \
    --hostname=10.77.0.1 >"$c" 2>&1 || crc=$?
  # A client that failed leaves its server waiting: 5 s, then it is stopped.
  if [ "$crc" -ne 0 ]; then
    for _ in $(seq 100); do kill -0 "$server" 2>/dev/null || break; sleep 0.05; done
    kill "$server" 2>/dev/null
  fi
  wait "$server" || src=$?
  counters a "$tmp/$verb.after"
  [ "$crc" -eq 0 ] || why+=" client exit $crc;"
  [ "$src" -eq 0 ] || why+=" server exit $src;"
  [ "$(json "$c" 'j["jobs"][0]["error"]' 2>/dev/null)" = 0 ] || why+=" the client reports an error;"
  [ "$(json "$s" 'j["jobs"][0]["error"]' 2>/dev/null)" = 0 ] || why+=" the server reports an error;"
  local wrote
  wrote=$(json "$c" 'j["jobs"][0]["write"]["io_bytes"]' 2>/dev/null)
  [ "$wrote" = "$size" ] || why+=" the client moved ${wrote:-?} bytes, not $size;"
  local delta='c["transport"][K] - json.load(open(sys.argv[1].replace(".after", ".before")))["transport"][K]'
  local rx tx rnr
  rx=$(json "$tmp/$verb.after" "${delta//K/\"rx_bytes\"}")
  tx=$(json "$tmp/$verb.after" "${delta//K/\"tx_bytes\"}")
  rnr=$(json "$tmp/$verb.after" "${delta//K/\"rnr_naks_sent\"}")
  case $verb in
    write) [ "$rx" -ge "$size" ] || why+=" droced A received $rx bytes, less than $size;" ;;
    read) [ "$tx" -ge "$size" ] || why+=" droced A sent $tx bytes, less than $size;" ;;
    send)
      local got
      got=$(json "$s" 'j["jobs"][0]["read"]["io_bytes"]' 2>/dev/null)
      [ "$got" = "$size" ] || why+=" the server received ${got:-?} bytes, not $size;"
      [ "$rnr" -eq 0 ] || why+=" droced A sent $rnr RNR NAKs with every receive posted;" ;;
  esac
  if [ -z "$why" ]; then
    echo "ok: $name: $size bytes in ${bs}-byte messages (droced A: $rx bytes in, $tx out)"
  else
    echo "FAIL: $name:$why"
    echo "--- client"; "$deadline" --show "$c"
    echo "--- server"; "$deadline" --show "$s"
    fail=1
  fi
}

fio_case write 1
fio_case read 1
fio_case send $((size / bs))
exit "$fail"
