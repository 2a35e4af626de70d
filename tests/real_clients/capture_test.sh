#!/usr/bin/env bash
# `droce capture` (droced/capture.h) on a running droced, between two droce hosts on the
# same-host link, read back by tshark and by an independent pcapng and ICRC reader
# (capture_check.py):
#   - a capture of an ibv_rc_pingpong run (SIGINT ends it) holds frames of both directions,
#     every one dissected by tshark as RoCEv2 with no malformed mark or expert note, every
#     whole frame with a valid ICRC (filled in by droced where the link carries none);
#   - --qp N keeps only QP N's frames: received ones have BTH destination QP N, sent ones the
#     peer's QP (the QP N talks to);
#   - -c COUNT ends the capture by itself after exactly COUNT frames;
#   - -s SNAPLEN cuts frames to SNAPLEN bytes, keeping their lengths on the wire;
#   - `-w -` piped into `tshark -r -` reads;
#   - perftest's ib_write_bw under a --qp capture, on the same-host link and (root) between two
#     lab hosts sharing a veth with the kernel over af_packet (scripts/lab.sh, real ICRCs on the
#     wire): tshark finds nothing malformed, every ICRC is right, only that QP's frames.
#
#   capture_test.sh DROCE DROCED PAIR_LIB
#
# Skips (77) without tshark or ibv_rc_pingpong.
set -uo pipefail
[ $# -eq 3 ] || { echo "usage: $0 DROCE DROCED PAIR_LIB" >&2; exit 2; }
droce=$(realpath "$1")
droced=$(realpath "$2")
pair_lib=$(realpath "$3")
here=$(dirname "$(realpath "$0")")
deadline=$here/deadline.sh
check=$here/capture_check.py

skip() { echo "SKIP: $*"; exit 77; }
command -v tshark >/dev/null || skip "tshark not installed (Debian package tshark)"
command -v ibv_rc_pingpong >/dev/null || skip "ibv_rc_pingpong not installed (Debian package ibverbs-utils)"
command -v python3 >/dev/null || skip "python3 not installed"

tmp=$(mktemp -d /tmp/droce-capture-test.XXXXXX)
fail=0
# shellcheck source=scripts/lib/droced-pair.sh
. "$pair_lib"
DROCE_BIN=$droce
on_exit rm -rf "$tmp"
on_exit droced_pair_stop
on_exit kill_jobs KILL
on_exit kill_jobs TERM  # first: droce exec passes TERM on to its program

droced_pair_start "$(dirname "$droced")" "$tmp/hosts" || exit 1
hosts=$tmp/hosts
sock_a=$hosts/a/droce0.sock
sock_b=$hosts/b/droce0.sock
on() { "$droce" exec --run-dir "$hosts/$1" -- "${@:2}"; }
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
export LC_ALL=C

qpns() {
  "$droce" qps --json --socket "$1" | /usr/bin/python3 -c "import json,sys; print(' '.join(str(q['qpn']) for q in json.load(sys.stdin)))"
}
# new_qp SOCK BEFORE [SECONDS]: waits (10 s unless SECONDS says otherwise) for a QP on that host
# not in the list BEFORE; prints it.
new_qp() {
  local q
  for ((i = 0; i < ${3:-10} * 20; i++)); do
    for q in $(qpns "$1"); do
      [[ " $2 " == *" $q "* ]] || { echo "$q"; return 0; }
    done
    sleep 0.05
  done
  return 1
}
# started FILE: waits (10 s) until droced wrote the capture's header (its first two blocks).
started() {
  for ((i = 0; i < 200; i++)); do
    [ "$(stat -c %s "$1" 2>/dev/null || echo 0)" -ge 60 ] && return 0
    sleep 0.05
  done
  return 1
}
# pingpong PORT ITERS [SERVER_STARTED_HOOK]: a checked ibv_rc_pingpong from B to A; the hook runs
# once A's QP exists (with it as $qp_a). 0 when both ends finished.
pingpong() {
  local before srv rc_cli rc_srv
  before=$(qpns "$sock_a")
  on a ibv_rc_pingpong -d droce0 -g 1 -p "$1" -c -s 1024 -n "$2" >"$tmp/pp$1.srv" 2>&1 &
  srv=$!
  qp_a=$(new_qp "$sock_a" "$before") || { echo "the server made no QP"; return 1; }
  [ $# -lt 3 ] || "$3"
  wait_tcp_listen "" "$1" "$srv" || true
  "$deadline" 120 "$droce" exec --run-dir "$hosts/b" -- ibv_rc_pingpong -d droce0 -g 1 -p "$1" -c -s 1024 \
    -n "$2" 127.0.0.1 >"$tmp/pp$1.cli" 2>&1
  rc_cli=$?
  wait "$srv"
  rc_srv=$?
  [ "$rc_cli" -eq 0 ] && [ "$rc_srv" -eq 0 ] || { tail -n 3 "$tmp/pp$1.cli" "$tmp/pp$1.srv"; return 1; }
}
# tshark_problems FILE: frames that are not RoCEv2 (ARP aside) or carry a malformed mark or an
# expert note; one line each.
tshark_problems() {
  tshark -r "$1" -n -T fields -e frame.number -e frame.protocols -e _ws.malformed -e _ws.expert.message 2>/dev/null |
    awk -F'\t' '$2 !~ /infiniband/ && $2 !~ /arp/ || $3 != "" || $4 != ""'
}

# ---- 1. everything, both directions, ended by SIGINT ----------------------------------------------
"$droce" capture -w "$tmp/all.pcapng" --socket "$sock_a" 2>"$tmp/all.err" &
cap=$!
if ! started "$tmp/all.pcapng"; then
  bad "the capture never started: $(cat "$tmp/all.err")"
else
  pingpong 18700 50 || bad "ibv_rc_pingpong under capture failed"
  kill -INT "$cap"
  "$deadline" 10 bash -c "while kill -0 $cap 2>/dev/null; do sleep 0.05; done"
  wait "$cap"
  rc=$?
  summary=$(python3 "$check" "$tmp/all.pcapng")
  rc_check=$?
  problems=$(tshark_problems "$tmp/all.pcapng")
  n_ib=$(tshark -r "$tmp/all.pcapng" -Y infiniband -n 2>/dev/null | wc -l)
  in=$(tshark -r "$tmp/all.pcapng" -Y 'infiniband && frame.packet_flags_direction == 1' -n 2>/dev/null | wc -l)
  out=$(tshark -r "$tmp/all.pcapng" -Y 'infiniband && frame.packet_flags_direction == 2' -n 2>/dev/null | wc -l)
  why=""
  [ "$rc" -eq 0 ] || why+=" droce capture exited $rc ($(cat "$tmp/all.err"));"
  [ "$rc_check" -eq 0 ] || why+=" $summary;"
  [[ "$summary" == *"icrc_bad=0"* && "$summary" != *"icrc_checked=0 "* ]] || why+=" ICRC: $summary;"
  [ -z "$problems" ] || why+=" tshark: $(echo "$problems" | head -3 | tr '\n' ' ');"
  # 50 exchanges of 1 KiB (one frame each, plus ACKs) each way, both seen from A.
  [ "$in" -ge 50 ] && [ "$out" -ge 50 ] || why+=" $in received and $out sent RoCE frames;"
  if [ -z "$why" ]; then
    ok "capture of ibv_rc_pingpong: $n_ib RoCEv2 frames ($in received, $out sent), tshark finds nothing wrong; $summary"
  else
    bad "capture:$why"
  fi
fi

# ---- 2. --qp: only that QP's frames -------------------------------------------------------------
# direction_destqp FILE: "direction:destqp=count" for each pair in FILE's RoCEv2 frames
# (direction 1 received, 2 sent), space-separated.
direction_destqp() {
  tshark -r "$1" -n -Y infiniband -T fields -e frame.packet_flags_direction -e infiniband.bth.destqp 2>/dev/null |
    python3 -c "import collections,sys
c = collections.Counter((int(d, 0), int(q, 0)) for d, q in (l.split() for l in sys.stdin if l.strip()))
print(' '.join(f'{d}:{q}={n}' for (d, q), n in sorted(c.items())))"
}
start_qp_capture() {
  "$droce" capture --qp "$qp_a" -w "$tmp/qp.pcapng" --socket "$sock_a" 2>"$tmp/qp.err" &
  cap=$!
  started "$tmp/qp.pcapng" || bad "the --qp capture never started: $(cat "$tmp/qp.err")"
}
# A clean pair beside it, whose frames the filter must leave out.
# Started directly, not through on(): $! is then droce exec itself, which passes TERM on.
"$droce" exec --run-dir "$hosts/a" -- ibv_rc_pingpong -d droce0 -g 1 -p 18710 -c -s 1024 -n 100000000 \
  >"$tmp/other.srv" 2>&1 &
other_srv=$!
wait_tcp_listen "" 18710 "" || true
"$droce" exec --run-dir "$hosts/b" -- ibv_rc_pingpong -d droce0 -g 1 -p 18710 -c -s 1024 -n 100000000 \
  127.0.0.1 >"$tmp/other.cli" 2>&1 &
other_cli=$!
if pingpong 18711 50 start_qp_capture; then
  kill -INT "$cap"
  wait "$cap"
  # The peer's QP: ibv_rc_pingpong prints both ends' ("local address: ... QPN 0x..., remote ...").
  qp_b=$(grep -m1 'remote address' "$tmp/pp18711.srv" | grep -o 'QPN 0x[0-9a-fA-F]*' | cut -d' ' -f2)
  qp_b=$((qp_b))
  # "direction:destqp=count" for each pair found (direction 1 received, 2 sent).
  dests=$(direction_destqp "$tmp/qp.pcapng")
  want_in=$(printf "1:%d=" "$qp_a")
  want_out=$(printf "2:%d=" "$qp_b")
  others=$(echo "$dests" | tr ' ' '\n' | grep -v -e "^$want_in" -e "^$want_out" -e '^$')
  if [[ "$dests" == *"$want_in"* && "$dests" == *"$want_out"* && -z "$others" ]]; then
    ok "--qp $qp_a: received frames all to QP $qp_a, sent ones all to its peer QP $qp_b ($dests)"
  else
    bad "--qp $qp_a (peer $qp_b): direction:destqp=count $dests"
  fi
else
  bad "ibv_rc_pingpong under the --qp capture failed"
fi

# ---- 3. -c COUNT ends the capture; -s SNAPLEN cuts frames --------------------------------------
"$droce" capture -c 25 -s 64 -w "$tmp/count.pcapng" --socket "$sock_a" 2>"$tmp/count.err" &
cap=$!
started "$tmp/count.pcapng" || bad "the -c capture never started"
"$deadline" 20 bash -c "while kill -0 $cap 2>/dev/null; do sleep 0.05; done"
wait "$cap"
rc=$?
n=$(tshark -r "$tmp/count.pcapng" -n 2>/dev/null | wc -l)
# Each frame keeps min(its length, 64) bytes (ACKs are 62).
uncut=$(tshark -r "$tmp/count.pcapng" -n -Y 'frame.cap_len > 64 || (frame.len >= 64 && frame.cap_len != 64)' 2>/dev/null | wc -l)
caplens=$(tshark -r "$tmp/count.pcapng" -n -T fields -e frame.cap_len 2>/dev/null | sort -u | tr '\n' ' ')
longer=$(tshark -r "$tmp/count.pcapng" -n -Y 'frame.len > 64' 2>/dev/null | wc -l)
if [ "$rc" -eq 0 ] && [ "$n" -eq 25 ] && [ "$uncut" -eq 0 ] && [ "$longer" -gt 0 ]; then
  ok "-c 25 -s 64: the capture ended by itself with 25 frames, each cut to 64 bytes ($longer longer on the wire)"
else
  bad "-c 25 -s 64: exit $rc, $n frames, captured lengths $caplens, $longer longer on the wire"
fi

# ---- 4. -w - into tshark -----------------------------------------------------------------------
n=$("$deadline" 20 bash -c "'$droce' capture -c 10 -w - --socket '$sock_a' | tshark -r - -n -Y infiniband 2>/dev/null | wc -l")
if [ "$n" -eq 10 ]; then
  ok "droce capture -c 10 -w - | tshark -r -: 10 RoCEv2 frames"
else
  bad "-w - into tshark: $n frames"
fi

# This run's pair (by pid: a pattern would also find another run's).
kill -0 "$other_srv" 2>/dev/null && kill -0 "$other_cli" 2>/dev/null || bad "the clean pair stopped (a data check failed?)"
kill "$other_srv" "$other_cli" 2>/dev/null

# ---- 5. perftest under a --qp capture: on the same-host link, then on af_packet ------------------
# perftest_capture WHERE SOCK_A NS_A RUN_A RUN_B SERVER_ADDR PORT: ib_write_bw (4 KiB for 2 s, its
# TCP exchange to SERVER_ADDR) from host B to host A (in namespace NS_A, or none), while host A
# captures only the server's QP; the capture must read in tshark with nothing malformed, every ICRC
# right (capture_check.py), and hold that QP's frames only, both directions. RUN_A/RUN_B run a
# program on a host. perftest makes its QP only once its TCP exchange has begun, so the client
# runs before the capture can name the QP; for 2 s rather than a count, so that the transfer is
# still running once the capture is.
perftest_capture() {
  local where=$1 sock=$2 ns=$3 run_a=$4 run_b=$5 addr=$6 port=$7 before qp srv cli rc_cli rc_srv why=""
  local file=$tmp/perftest-$port.pcapng
  before=$(qpns "$sock")
  $run_a ib_write_bw -d droce0 -x 1 -s 4096 -D 2 -p "$port" >"$tmp/bw$port.srv" 2>&1 &
  srv=$!
  wait_tcp_listen "$ns" "$port" "$srv" || true
  "$deadline" 120 $run_b ib_write_bw -d droce0 -x 1 -s 4096 -D 2 -p "$port" "$addr" >"$tmp/bw$port.cli" 2>&1 &
  cli=$!
  # perftest (under ASan in a debug build) connects and makes its QP in a few seconds; give it 30.
  if ! qp=$(new_qp "$sock" "$before" 30); then
    bad "$where: ib_write_bw's server made no QP"
    wait "$cli" "$srv"
    tail -n 3 "$tmp/bw$port.cli" "$tmp/bw$port.srv"
    return
  fi
  "$droce" capture --qp "$qp" -w "$file" --socket "$sock" 2>"$tmp/bw$port.err" &
  cap=$!
  started "$file" || why+=" the capture never started ($(cat "$tmp/bw$port.err"));"
  wait "$cli"
  rc_cli=$?
  wait "$srv"
  rc_srv=$?
  kill -INT "$cap" 2>/dev/null
  "$deadline" 10 bash -c "while kill -0 $cap 2>/dev/null; do sleep 0.05; done"
  wait "$cap"
  [ "$rc_cli" -eq 0 ] && [ "$rc_srv" -eq 0 ] || why+=" ib_write_bw exited $rc_cli/$rc_srv;"
  local summary rc_check problems peer dests
  summary=$(python3 "$check" "$file")
  rc_check=$?
  problems=$(tshark_problems "$file")
  # The peer's QP from the server's own report ("remote address: ... QPN 0x...").
  peer=$(grep -m1 'remote address' "$tmp/bw$port.srv" | grep -o 'QPN 0x[0-9a-fA-F]*' | cut -d' ' -f2)
  dests=$(direction_destqp "$file")
  [ "$rc_check" -eq 0 ] || why+=" $summary;"
  [[ "$summary" == *"icrc_bad=0"* && "$summary" != *"icrc_checked=0 "* ]] || why+=" ICRC: $summary;"
  [ -z "$problems" ] || why+=" tshark: $(echo "$problems" | head -3 | tr '\n' ' ');"
  # WRITEs arrive at A's QP for the rest of the 2 s (hundreds of frames at the least), ACKs leave
  # toward the peer.
  local want_in want_out others n_in
  want_in=$(printf "1:%d=" "$qp")
  want_out=$(printf "2:%d=" "$((peer))")
  others=$(echo "$dests" | tr ' ' '\n' | grep -v -e "^$want_in" -e "^$want_out" -e '^$')
  n_in=$(echo "$dests" | tr ' ' '\n' | grep "^$want_in" | cut -d= -f2)
  [ -n "$peer" ] && [[ "$dests" == *"$want_out"* ]] && [ "${n_in:-0}" -ge 100 ] && [ -z "$others" ] ||
    why+=" QP $qp (peer ${peer:-?}): direction:destqp=count $dests;"
  if [ -z "$why" ]; then
    ok "$where: ib_write_bw under --qp $qp: $dests; tshark finds nothing wrong; $summary"
  else
    bad "$where: perftest capture:$why"
    tail -n 3 "$tmp/bw$port.cli" "$tmp/bw$port.srv"
  fi
}

perftest_capture "same-host link" "$sock_a" "" "on a" "$droce exec --run-dir $hosts/b --" 127.0.0.1 18720

if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP (part): perftest capture on af_packet needs root (namespaces, a veth)"
elif ! command -v ib_write_bw >/dev/null; then
  echo "SKIP (part): perftest capture: ib_write_bw not installed (Debian package perftest)"
else
  # Two lab hosts (scripts/lab.sh) whose droced share their veth with the kernel over af_packet:
  # frames on a real netdev, with the ICRC the wire carries.
  lab_sh=$(dirname "$pair_lib")/../lab.sh
  lab=dcap
  build=$(dirname "$(dirname "$droced")")
  [ -d "/run/droce-lab/$lab" ] && "$lab_sh" down --name "$lab"  # a run killed before its cleanup
  on_exit "$lab_sh" down --name "$lab"
  if DROCE_LAB_DROCED_ARGS="--log-level=droce.*:warning" "$lab_sh" up --hosts 2 --link af_packet --name "$lab" \
      --build "$build" >"$tmp/lab.out" 2>&1; then
    perftest_capture "af_packet" "/run/droce-lab/$lab/h1/droce0.sock" "$lab-h1" "$lab_sh exec h1 --name $lab --build $build --" \
      "$lab_sh exec h2 --name $lab --build $build --" "$("$lab_sh" addr h1 --name "$lab")" 18730
  else
    cat "$tmp/lab.out"
    bad "the af_packet lab did not come up"
  fi
fi
exit "$fail"
