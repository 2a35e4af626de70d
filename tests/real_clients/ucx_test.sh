#!/usr/bin/env bash
# UCX (Debian's ucx-utils) over droce: ucx_perftest at the UCT level over rc_verbs and ud_verbs,
# and at the UCP level with UCX_TLS=rc_verbs,ud_verbs,self (so no shared-memory transport can
# carry the data), between two droce hosts (two droced on droce's same-host link, each program
# started through `droce exec` of its host, as a user would) and over one droced's loopback
# (both programs on host A).
#
#   ucx_test.sh DROCE DROCED PAIR_LIB
#
# DROCE is the built droce CLI (droce exec finds the provider and preload next to it), DROCED the
# droced binary, PAIR_LIB scripts/lib/droced-pair.sh.
# Each case asserts: both processes exit 0, the client prints ucx_perftest's "Final:" line, and
# neither prints a UCX error or warning line. Skips (77) when ucx_perftest is missing (Debian
# package ucx-utils). DROCE_UCX_CASES=REGEX runs only the cases whose name matches.
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
command -v ucx_perftest >/dev/null || skip "ucx_perftest not installed (Debian package ucx-utils)"

tmp=$(mktemp -d /tmp/droce-ucx-test.XXXXXX)
fail=0
# shellcheck source=scripts/lib/droced-pair.sh
. "$pair_lib"
on_exit rm -rf "$tmp"
on_exit droced_pair_stop
on_exit kill_jobs TERM

droced_pair_start "$(dirname "$droced")" "$tmp/hosts" --mtu 9000 || exit 1
on() {  # on HOST COMMAND...: run COMMAND on droce host a or b
  local host=$1
  shift
  "$droce" exec --run-dir "$tmp/hosts/$host" -- "$@"
}

# UCX prints its own problems as "[time] [host:pid:thread] file:line UCX  ERROR|WARN ...".
ucx_complaints() { grep -E 'UCX +(ERROR|WARN)' "$@" || true; }

port=13400
# run_case NAME SERVER_HOST CLIENT_HOST [ucx_perftest args...]
run_case() {
  local name=$1 shost=$2 chost=$3
  shift 3
  if [ -n "${DROCE_UCX_CASES:-}" ] && ! [[ $name =~ $DROCE_UCX_CASES ]]; then return; fi
  port=$((port + 1))
  local slog=$tmp/$name.server clog=$tmp/$name.client
  on "$shost" "$deadline" 120 ucx_perftest -p "$port" "$@" >"$slog" 2>&1 &
  local server=$!
  # Until the server listens (its exit is judged below); a fixed wait raced a slow start.
  wait_tcp_listen "" "$port" "$server" || true
  local crc=0 src=0
  on "$chost" "$deadline" 110 ucx_perftest -p "$port" "$@" 127.0.0.1 >"$clog" 2>&1 || crc=$?
  wait "$server" || src=$?
  local why=""
  [ "$crc" -eq 0 ] || why+=" client exit $crc;"
  [ "$src" -eq 0 ] || why+=" server exit $src;"
  grep -q '^Final:' "$clog" || why+=" no 'Final:' line;"
  local complaints
  complaints=$(ucx_complaints "$slog" "$clog")
  [ -z "$complaints" ] || why+=" UCX complained;"
  if [ -z "$why" ]; then
    echo "ok: $name: $(grep '^Final:' "$clog" | tr -s ' ')"
  else
    echo "FAIL: $name:$why"
    echo "--- client"; "$deadline" --show "$clog"
    echo "--- server"; "$deadline" --show "$slog"
    fail=1
  fi
}

uct() { run_case "$@"; }
ucp() {  # ucp NAME SERVER CLIENT args...: UCP with droce's verbs transports only
  local name=$1 s=$2 c=$3
  shift 3
  UCX_TLS=rc_verbs,ud_verbs,self UCX_NET_DEVICES=droce0:1 run_case "$name" "$s" "$c" "$@"
}

for where in "a b" "a a"; do
  read -r s c <<<"$where"
  tag=$([ "$s" = "$c" ] && echo loopback || echo two-hosts)
  n_lat=(-n 2000 -w 200)
  n_bw=(-n 20000 -w 1000)
  n_big=(-n 2000 -w 100)
  # UCT, rc_verbs: one-sided, active messages, atomics.
  uct "$tag.rc.put_lat.8" "$s" "$c" -d droce0:1 -x rc_verbs -t put_lat -s 8 "${n_lat[@]}"
  uct "$tag.rc.put_bw.8" "$s" "$c" -d droce0:1 -x rc_verbs -t put_bw -s 8 "${n_bw[@]}"
  uct "$tag.rc.put_bw.64k" "$s" "$c" -d droce0:1 -x rc_verbs -t put_bw -D zcopy -s 65536 "${n_big[@]}"
  uct "$tag.rc.get.8" "$s" "$c" -d droce0:1 -x rc_verbs -t get -D bcopy -s 8 "${n_lat[@]}"
  uct "$tag.rc.get.64k" "$s" "$c" -d droce0:1 -x rc_verbs -t get -D zcopy -s 65536 "${n_big[@]}"
  uct "$tag.rc.am_lat.8" "$s" "$c" -d droce0:1 -x rc_verbs -t am_lat -s 8 "${n_lat[@]}"
  uct "$tag.rc.am_bw.8" "$s" "$c" -d droce0:1 -x rc_verbs -t am_bw -s 8 "${n_bw[@]}"
  uct "$tag.rc.am_bw.4k" "$s" "$c" -d droce0:1 -x rc_verbs -t am_bw -D zcopy -s 4096 "${n_big[@]}"
  uct "$tag.rc.add_lat" "$s" "$c" -d droce0:1 -x rc_verbs -t add_lat -s 8 "${n_lat[@]}"
  uct "$tag.rc.fadd" "$s" "$c" -d droce0:1 -x rc_verbs -t fadd -s 8 "${n_lat[@]}"
  uct "$tag.rc.cswap" "$s" "$c" -d droce0:1 -x rc_verbs -t cswap -s 8 "${n_lat[@]}"
  # UCT, ud_verbs: active messages only (UD has no one-sided operations).
  uct "$tag.ud.am_lat.8" "$s" "$c" -d droce0:1 -x ud_verbs -t am_lat -s 8 "${n_lat[@]}"
  uct "$tag.ud.am_bw.8" "$s" "$c" -d droce0:1 -x ud_verbs -t am_bw -s 8 "${n_bw[@]}"
  uct "$tag.ud.am_bw.4k" "$s" "$c" -d droce0:1 -x ud_verbs -t am_bw -D zcopy -s 4000 "${n_big[@]}"
  # UCP: tag matching (eager and rendezvous), RMA, streams, active messages.
  ucp "$tag.ucp.tag_lat.8" "$s" "$c" -t tag_lat -s 8 "${n_lat[@]}"
  ucp "$tag.ucp.tag_bw.8" "$s" "$c" -t tag_bw -s 8 "${n_bw[@]}"
  ucp "$tag.ucp.tag_bw.1m" "$s" "$c" -t tag_bw -s 1048576 -n 300 -w 20
  ucp "$tag.ucp.put_bw.64k" "$s" "$c" -t ucp_put_bw -s 65536 "${n_big[@]}"
  ucp "$tag.ucp.get.64k" "$s" "$c" -t ucp_get -s 65536 "${n_big[@]}"
  ucp "$tag.ucp.stream_bw.64k" "$s" "$c" -t stream_bw -s 65536 "${n_big[@]}"
  ucp "$tag.ucp.am_lat.8" "$s" "$c" -t ucp_am_lat -s 8 "${n_lat[@]}"
done

exit "$fail"
