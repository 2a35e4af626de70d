#!/usr/bin/env bash
# droce's congestion point (a `droce fault` rule with rate=, net/congestion_point.h) and DCQCN
# with the distro's programs: three droce hosts on a bridge (scripts/lab.sh, af_packet, lab
# "dcpt": namespaces dcpt-sw, dcpt-h1..h3, made and removed here), h2 and h3 sending to h1
# through one small queue on h1's receive path, ib_write_bw 64 KiB from both for 4 s and an
# ibv_rc_pingpong with its data check (-c) beside them:
#   0. `droce cc` shows the link's defaults: on this kernel netdev mlx5's with a kernel path's
#      dce_tcp_rtt and rpg_time_reset;
#   1. DCQCN on (droce cc defaults), RED/ECN marking: the queue marks CE (> 0), h1 answers with
#      CNPs (np_cnp_sent > 0), h2 and h3 act on them (rp_cnp_handled > 0, rp_rate_cuts > 0) and
#      raise their rates again (rp_rate_increases > 0); all
#      programs finish and the pingpong's 50 checked messages arrive;
#   2. DCQCN off on every host (`droce cc set rp_enable=0 np_enable=0`), the queue drop-tail only:
#      it drops (queue_dropped > 0), the senders retransmit (retransmits > 0), and RC still
#      delivers: every program finishes, the pingpong's data checked;
#   3. the same queue lossless (pfc-xoff=, net/pfc.h), DCQCN still off: h1 pauses h2 and h3 with
#      PFC frames (pfc_xoff_sent > 0) and resumes them (pfc_xon_sent > 0), their droced take the
#      pauses (pause_frames_in > 0) and hold their transmit (tx_pause_waits > 0), the queue drops
#      nothing, and every program finishes, the pingpong's data checked. The senders keep at most
#      4 x 64 KiB in flight (ib_write_bw -t 4), which the buffer holds many times over and the
#      queue (100 Mbit/s here) drains well within an ACK timeout, so neither "no drop" nor the
#      programs' success hangs on how soon a pause reaches them (a debug droced on af_packet
#      takes long enough for all 256 KiB to arrive first); that the pauses are sent and obeyed
#      is what is tested.
# Nothing here times anything: the rate is far below what even a debug droced sends, so the
# queue fills whatever the machine's speed.
#
#   congestion_test.sh DROCE DROCED LAB_SCRIPT
#
# Root (namespaces). Skips (77) without root, ibv_rc_pingpong or perftest.
set -uo pipefail
[ $# -eq 3 ] || { echo "usage: $0 DROCE DROCED LAB_SCRIPT" >&2; exit 2; }
droce=$(realpath "$1")
droced=$(realpath "$2")
lab_sh=$(realpath "$3")
deadline=$(dirname "$(realpath "$0")")/deadline.sh
build=$(dirname "$(dirname "$droced")")

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
command -v ibv_rc_pingpong >/dev/null || skip "ibv_rc_pingpong not installed (Debian package ibverbs-utils)"
command -v ib_write_bw >/dev/null || skip "ib_write_bw not installed (Debian package perftest)"

lab=dcpt
state=/run/droce-lab/$lab
tmp=$(mktemp -d /tmp/droce-congestion-test.XXXXXX)
fail=0
# shellcheck source=scripts/lib/netns.sh
. "$(dirname "$lab_sh")/lib/netns.sh"
on_exit rm -rf "$tmp"
on_exit "$lab_sh" down --name "$lab"
on_exit kill_jobs KILL
on_exit kill_jobs TERM

ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
sock() { echo "$state/$1/droce0.sock"; }
run_on() { "$lab_sh" exec "$1" --name "$lab" --build "$build" -- "${@:2}"; }

# counter HOST NAME: the counter NAME in `droce counters --json` of HOST (its first occurrence).
counter() {
  "$droce" counters --json --socket "$(sock "$1")" | /usr/bin/python3 -c '
import json, sys
def find(j, k):
    if isinstance(j, dict):
        if k in j and not isinstance(j[k], (dict, list)): return j[k]
        for v in j.values():
            r = find(v, k)
            if r is not None: return r
    return None
r = find(json.load(sys.stdin), sys.argv[1])
print(-1 if r is None else r)' "$2"
}
# rule_counter NAME: the counter NAME of h1's congestion point rule.
rule_counter() {
  "$droce" fault --json --socket "$(sock h1)" |
    /usr/bin/python3 -c "import json,sys; print(next((r['counters']['$1'] for r in json.load(sys.stdin) if r['id'] == $rule), -1))"
}

if [ -d "$state" ]; then "$lab_sh" down --name "$lab"; fi  # a run killed before its cleanup
DROCE_LAB_DROCED_ARGS="--log-level=droce.*:warning" "$lab_sh" up --hosts 3 --link af_packet --name "$lab" \
  --build "$build" >"$tmp/lab.out" 2>&1 || { cat "$tmp/lab.out"; bad "the lab did not come up"; exit 1; }
recv=$("$lab_sh" addr h1 --name "$lab")

# On a kernel netdev DCQCN's defaults are mlx5's with a kernel path's alpha period and rate timer
# (rocev2/dcqcn.h CcParams::kernel_netdev); `droce cc` shows them as the values and the defaults.
cc_json=$("$droce" cc --json --socket "$(sock h1)")
while read -r key want value default; do
  if [ "$value $default" = "$want $want" ]; then echo "ok: droce cc on af_packet: $key = $want, its default"
  else bad "droce cc on af_packet: $key (value, default) = $value $default, want $want"; fi
done < <(/usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
for key, want in (("dce_tcp_rtt", 50), ("rpg_time_reset", 3000), ("rpg_byte_reset", 32767), ("rp_enable", 1)):
    print(key, want, j["params"].get(key), j.get("defaults", {}).get(key))' <<<"$cc_json")

# perftest_clock_gave_up FILE: perftest's report failed on its cycle-counter calibration alone.
perftest_clock_gave_up() {
  grep -q "^Correlation coefficient r^2: .* < 0.9" "$1" && grep -q "^Can't produce a report" "$1"
}

# traffic PHASE PORT [ARGS]: ib_write_bw 64 KiB for 4 s from h2 and from h3 to h1 (ARGS added to
# the senders'), and ibv_rc_pingpong -c (50 x 4 KiB) from h2 beside them; 0 when every program
# finished well.
traffic() {
  local phase=$1 p=$2 pids=() rc=0 s
  # shellcheck disable=SC2206 # ARGS is a list of words
  local -a extra=(${3:-})
  for s in 0 1; do
    run_on h1 ib_write_bw -d droce0 -x 1 -s 65536 -D 4 -p $((p + s)) >"$tmp/$phase.bw$s.srv" 2>&1 &
    pids+=($!)
  done
  run_on h1 ibv_rc_pingpong -d droce0 -g 1 -p $((p + 2)) -c -s 4096 -n 50 >"$tmp/$phase.pp.srv" 2>&1 &
  pids+=($!)
  for s in 0 1 2; do wait_tcp_listen "$lab-h1" $((p + s)) "" || true; done
  for s in 0 1; do
    "$deadline" 60 "$lab_sh" exec "h$((s + 2))" --name "$lab" --build "$build" -- ib_write_bw -d droce0 -x 1 \
      -s 65536 -D 4 -p $((p + s)) "${extra[@]}" "$recv" >"$tmp/$phase.bw$s.cli" 2>&1 &
    pids+=($!)
  done
  sleep 0.5
  "$deadline" 60 "$lab_sh" exec h2 --name "$lab" --build "$build" -- ibv_rc_pingpong -d droce0 -g 1 -p $((p + 2)) \
    -c -s 4096 -n 50 "$recv" >"$tmp/$phase.pp.cli" 2>&1 &
  pids+=($!)
  # pids: bw0 server, bw1 server, pingpong server, bw0 client, bw1 client, pingpong client.
  local st=() k
  for s in "${pids[@]}"; do wait "$s"; st+=($?); done
  [ "${st[2]}" -eq 0 ] && [ "${st[5]}" -eq 0 ] && grep -q "^50 iters" "$tmp/$phase.pp.cli" || rc=1
  for k in 0 1; do
    if [ "${st[k]}" -eq 0 ] && [ "${st[k + 3]}" -eq 0 ] && grep -qE '^ *65536 +[0-9]+ ' "$tmp/$phase.bw$k.cli"; then
      continue
    elif perftest_clock_gave_up "$tmp/$phase.bw$k.cli"; then
      # perftest calibrates its cycle counter against the clock before it reports, and gives up
      # (exit 1, no result line; its server then fails too) when a busy machine spoils the fit:
      # that says nothing about the transfer, which the counters below check.
      echo "note: $phase: ib_write_bw $k ran but could not report (perftest's clock calibration: $(grep -m1 Correlation "$tmp/$phase.bw$k.cli"))"
    else
      rc=1
    fi
  done
  if [ "$rc" -ne 0 ]; then
    for f in "$tmp/$phase".*; do echo "--- $f"; tail -n 5 "$f"; done
  fi
  return "$rc"
}

# ---- 1. DCQCN on, RED/ECN marking ---------------------------------------------------------------
# 40 Mbit/s: 5 MB/s, a tenth of what a debug droced sends; marking from 16 KiB, always past 48 KiB.
rule=$("$droce" fault set "rate=40mbit,buffer=128k,ecn-min=16k,ecn-max=48k,ecn-pmax=20%" --dir rx --json \
  --socket "$(sock h1)" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['id'])")
[ -n "$rule" ] || { bad "the congestion point rule was refused"; exit 1; }
if traffic dcqcn 19910; then
  ok "DCQCN: both ib_write_bw runs and the pingpong's 50 checked messages finished through the queue"
else
  bad "DCQCN: a program failed"
fi
marked=$(rule_counter queue_marked)
cnp_sent=$(counter h1 np_cnp_sent)
handled=$(( $(counter h2 rp_cnp_handled) + $(counter h3 rp_cnp_handled) ))
cuts=$(( $(counter h2 rp_rate_cuts) + $(counter h3 rp_rate_cuts) ))
rises=$(( $(counter h2 rp_rate_increases) + $(counter h3 rp_rate_increases) ))
depth_max=$(rule_counter queue_depth_max)
dropped1=$(( $(rule_counter queue_dropped) + $(rule_counter queue_red_dropped) ))
[ "$marked" -gt 0 ] && ok "the queue marked $marked frames CE (deepest $depth_max bytes, $dropped1 dropped)" ||
  bad "the queue marked nothing (deepest $depth_max bytes)"
[ "$cnp_sent" -gt 0 ] && ok "h1 answered with $cnp_sent CNPs" || bad "h1 sent no CNP ($marked marked)"
[ "$handled" -gt 0 ] && [ "$cuts" -gt 0 ] && ok "h2 and h3 handled $handled CNPs, $cuts rate cuts" ||
  bad "the senders handled $handled CNPs, $cuts rate cuts"
[ "$rises" -gt 0 ] && ok "h2 and h3 raised their rates again $rises times" ||
  bad "no rate increase event after $cuts cuts"

# ---- 2. DCQCN off, drop-tail only -----------------------------------------------------------------
for h in h1 h2 h3; do
  "$droce" cc set rp_enable=0 np_enable=0 --socket "$(sock "$h")" >/dev/null || bad "droce cc set on $h failed"
done
"$droce" fault set "rate=40mbit,buffer=32k" --id "$rule" --dir rx --socket "$(sock h1)" >/dev/null ||
  bad "changing the rule failed"
retx0=$(( $(counter h2 retransmits) + $(counter h3 retransmits) ))
marked0=$(rule_counter queue_marked)
if traffic droptail 19920; then
  ok "drop-tail: both ib_write_bw runs and the pingpong's 50 checked messages finished through the drops"
else
  bad "drop-tail: a program failed"
fi
dropped=$(( $(rule_counter queue_dropped) + $(rule_counter queue_red_dropped) - dropped1 ))
retx=$(( $(counter h2 retransmits) + $(counter h3 retransmits) - retx0 ))
marked2=$(( $(rule_counter queue_marked) - marked0 ))
[ "$dropped" -gt 0 ] && ok "the full queue dropped $dropped frames" || bad "the queue dropped nothing"
[ "$retx" -gt 0 ] && ok "the senders retransmitted $retx packets" || bad "no retransmits ($dropped dropped)"
[ "$marked2" -eq 0 ] && ok "without ecn-* nothing was marked" || bad "$marked2 frames marked without ecn-*"

# ---- 3. DCQCN off, the queue lossless (PFC) -------------------------------------------------------
"$droce" fault set "rate=100mbit,buffer=4m,pfc-xoff=32k" --id "$rule" --dir rx --socket "$(sock h1)" >/dev/null ||
  bad "changing the rule to a lossless one failed"
dropped0=$(( $(rule_counter queue_dropped) + $(rule_counter queue_red_dropped) ))
pin0=$(( $(counter h2 pause_frames_in) + $(counter h3 pause_frames_in) ))
if traffic lossless 19930 "-t 4"; then
  ok "lossless: both ib_write_bw runs and the pingpong's 50 checked messages finished through the pauses"
else
  bad "lossless: a program failed"
fi
xoff=$(rule_counter pfc_xoff_sent)
xon=$(rule_counter pfc_xon_sent)
pin=$(( $(counter h2 pause_frames_in) + $(counter h3 pause_frames_in) - pin0 ))
waits=$(( $(counter h2 tx_pause_waits) + $(counter h3 tx_pause_waits) ))
dropped3=$(( $(rule_counter queue_dropped) + $(rule_counter queue_red_dropped) - dropped0 ))
[ "$xoff" -gt 0 ] && [ "$xon" -gt 0 ] && ok "h1 sent $xoff PFC pauses and $xon resumes" ||
  bad "h1 sent $xoff PFC pauses and $xon resumes (deepest $(rule_counter queue_depth_max) bytes)"
[ "$pin" -gt 0 ] && [ "$waits" -gt 0 ] && ok "h2 and h3 took $pin pause frames and held $waits bursts for them" ||
  bad "h2 and h3 took $pin pause frames and held $waits bursts for them"
[ "$dropped3" -eq 0 ] && ok "the lossless queue dropped nothing" || bad "the lossless queue dropped $dropped3 frames"
exit "$fail"
