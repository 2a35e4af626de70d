#!/usr/bin/env bash
# Incast through droce's congestion point, with and without DCQCN (issue 37).
#
# Four droce hosts on one bridge (scripts/lab.sh, lab "dincast"): h2, h3 and h4 each
# run the distro's ib_write_bw, 64 KiB WRITEs for SECS seconds, to h1, whose receive path holds
# one congestion point (`droce fault set rate=... --dir rx`, net/congestion_point.h): every
# sender's frames share its queue, as a switch's egress port toward h1. Twice:
#   dcqcn:    `droce cc` defaults (DCQCN on: ECT(0) data, CNPs for CE marks, rate cuts), over a
#             lossless queue as DCQCN is deployed: past pfc-xoff h1 pauses the senders with PFC
#             (802.1Qbb frames, net/pfc.h) until the queue is down to pfc-xon;
#   no-dcqcn: `droce cc set rp_enable=0 np_enable=0` on every host, and the queue without
#             RED/ECN and without PFC (same rate and buffer): a lossy fabric that runs no DCQCN
#             marks nothing, so the queue fills to its buffer and drops at its tail.
# First it measures what the path carries (one ib_write_bw, no queue) and prints it: the queue's
# rate must be well below it for the queue to be the bottleneck.
# Every ~100 ms it samples each flow's rate (the bytes h1's QP for that sender received), the
# queue's depth, marks and drops, CNPs sent (h1) and handled (senders), retransmits (senders)
# and the senders' DCQCN rates. It prints a table per second and the acceptance figures of
# issue 37 (printed, never asserted): the share of samples with the queue under kmin and under
# kmax, drops, the three flows' rates' spread (max/min over the run's middle), retransmits.
# During the dcqcn run `droce capture` on h2 records what h2 receives and sends (first 96 bytes
# of each of its first 100 000 frames, so the capture's cost ends early) and tshark counts the
# CNPs in it (BTH opcode 0x81).
# Writes incast.json and incast.png (python3-matplotlib) under bench/out or --out DIR.
#
#   bench/incast.sh [--out DIR] [--secs N] [--rate R] [--buffer B] [--ecn-min B] [--ecn-max B]
#                   [--ecn-pmax P] [--cc 'NAME=VALUE ...'] [--red-both] [--link packet|af_packet]
#                   [--arrival wire|loop] [--mark enqueue|dequeue] [--pfc XOFF] [--pfc-both]
#                   [--ring SLOTS] [--build DIR] [--no-build]
# --pfc: the dcqcn run's PFC threshold (pfc-xoff=; 0: lossy too). Default 512k, the buffer above
# it the headroom for what the senders still send while the pause reaches them (a millisecond of
# three line-rate senders on this VM). With it DCQCN keeps the queue near its marking threshold
# and the pauses stop the line-rate start no CNP has reached yet; without it that start overflows
# the buffer in some runs (docs/benchmarks.md). --pfc-both makes the no-dcqcn run lossless too:
# no drops then, but pauses all the time (a PFC storm is what a fabric without DCQCN gets).
# --ring: the packet link's receive ring slots on every host (droced --link-args frames=; 0: the
# link's default, 256). Default 1024: each slot takes one frame, a 64 KiB GSO frame or a 60-byte
# ACK alike, and a droced off its CPU for a few milliseconds on this 2-vCPU VM (four droceds,
# three spinning perftests) comes back to a full ring of 256: h1's with the senders' data, a
# sender's with CNPs, ACKs and the pauses it then never sees. That is the emulated NIC's receive
# queue overflowing, not the congestion point; the bench prints each host's rx_missed.
# DROCE_INCAST_KEEP=1 keeps the raw samples, the programs' output and every namespace's link
# counters after each run under OUT/raw.
# --link: the hosts' link (scripts/lab.sh --link). packet (the default), droce's packet socket,
# stamps each frame with the kernel's receive time, and the queue takes frames at that time;
# af_packet (DPDK's PMD) gives no stamps, so the queue takes every frame of a burst at the
# instant h1's loop polled it, and a loop that was off its CPU for a millisecond (h1's droced
# shares the 2 vCPUs with three spinning perftests and three other droceds) sees a millisecond
# of frames arrive at once: a depth spike the wire never had.
# The packet link's path is also 5-8 times faster (7-9 Gbit/s here, af_packet's 1-1.5); on it
# DCQCN with mlx5's own timers did not hold the queue, which is why droced's defaults on a kernel
# netdev put them at a kernel path's scale (docs/droced.md).
# --arrival: the rule's arrival= (`droce fault`): loop times frames by the loop even on the
# packet link (the A/B for the stamps; docs/benchmarks.md has both).
# --mark: where the queue's RED looks (the rule's mark=): enqueue, on the depth a frame meets, or
# dequeue, on the depth it leaves behind, so a mark does not first wait out the queue it reports.
# --cc: DCQCN parameters (droce cc set) for the dcqcn run on every host, over droced's defaults
# (mlx5's, with dce_tcp_rtt 50 and rpg_time_reset 3000 on these kernel netdevs): e.g.
# 'dce_tcp_rtt=1 rpg_time_reset=300' gives mlx5's own; 'rpg_max_rate=1000 clamp_tgt_rate=1'
# starts the reaction point from this path's rate instead of the line rate (the port's speed:
# af_packet on a veth says 10 Gbit/s). docs/benchmarks.md has runs of each.
# Root (namespaces). Defaults: 10 s, rate 500mbit (this 2-vCPU VM's path carries 1-1.5 Gbit/s on
# af_packet, 7-9 on the packet link, so three senders overrun it), buffer 2m, one marking
# threshold K = 20k (ecn-min = ecn-max: DCTCP's step, every ECT frame marked past K), marked on
# dequeue. Why those (docs/benchmarks.md has the runs):
#  - the step: with RED's ramp from ecn-min DCQCN settles where the ramp's probability holds the
#    rates, a few KiB above ecn-min, so "under ecn-min" is a coin flip (40-88 %); with one K the
#    queue sits under K 83-100 % of the samples;
#  - dequeue: the mark does not first wait out the queue it reports;
#  - 2m: the senders start at the line rate (10 Gbit/s on a veth) with perftest's 128 x 64 KiB
#    in flight, and the first CNPs come back a millisecond or so later on this VM: 1m dropped
#    that first burst in most runs. 4m absorbed it, but then the run without DCQCN never
#    overflowed either (three windows of in-flight WRITEs, ~3 MiB, fit), and that is the
#    comparison the bench exists for.
# Kept on in the second run, RED would drop the Not-ECT data where it would have marked it (RFC
# 3168) and hold the queue near kmax, hiding the overflow a fabric without ECN sees; --red-both
# keeps it on anyway. The table tells RED's drops from drop-tail's.
set -uo pipefail
cc_extra="" red_both=0 link=packet arrival=wire mark=dequeue out=bench/out secs=10 rate=500mbit buffer=2m kmin=20k kmax=20k pmax=20% build=build/release no_build=0
pfc=512k pfc_both=0 ring=1024
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --secs) secs=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --buffer) buffer=$2; shift 2 ;;
    --ecn-min) kmin=$2; shift 2 ;;
    --ecn-max) kmax=$2; shift 2 ;;
    --ecn-pmax) pmax=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --cc) cc_extra=$2; shift 2 ;;
    --no-build) no_build=1; shift ;;
    --red-both) red_both=1; shift ;;
    --link) link=$2; shift 2 ;;
    --arrival) arrival=$2; shift 2 ;;
    --mark) mark=$2; shift 2 ;;
    --pfc) pfc=$2; shift 2 ;;
    --pfc-both) pfc_both=1; shift ;;
    --ring) ring=$2; shift 2 ;;
    *) sed -n '2,70p' "$0"; exit 2 ;;
  esac
done
case $link in packet|af_packet) ;; *) echo "incast.sh: --link is packet or af_packet" >&2; exit 2 ;; esac
case $arrival in wire|loop) ;; *) echo "incast.sh: --arrival is wire or loop" >&2; exit 2 ;; esac
case $mark in enqueue|dequeue) ;; *) echo "incast.sh: --mark is enqueue or dequeue" >&2; exit 2 ;; esac
[ "$(id -u)" -eq 0 ] || { echo "incast.sh: needs root (network namespaces)" >&2; exit 2; }
[ "$out" = bench/out ] || out=$(realpath -m "$out")
[[ "$build" = /* ]] || build=$(realpath -m "$build")
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/netns.sh
. scripts/lib/netns.sh
for t in ib_write_bw tshark; do command -v "$t" >/dev/null || { echo "incast.sh: needs $t (perftest, tshark)" >&2; exit 2; }; done
py=/usr/bin/python3  # the system's, which has python3-matplotlib
if [ "$no_build" = 0 ]; then
  pabi=$(scripts/fetch-rdma-core-headers.sh --pabi-only 2>/dev/null | tail -1)
  [ -f "$build/build.ninja" ] || meson setup "$build" -Dbuildtype=release -Dprovider=enabled >/dev/null
  ninja -C "$build" apps/droce apps/droced "provider/verbs/libdroce-rdmav$pabi.so" \
    provider/preload/libdroce-preload.so >/dev/null || exit 1
fi
droce=$build/apps/droce
lab=dincast
state=/run/droce-lab/$lab
tmp=$(mktemp -d /tmp/droce-incast.XXXXXX)
mkdir -p "$out"
on_exit rm -rf "$tmp"
[ -n "${DROCE_INCAST_KEEP:-}" ] && on_exit cp -r "$tmp" "$out/raw"
on_exit scripts/lab.sh down --name "$lab"
on_exit kill_jobs KILL
on_exit kill_jobs TERM
sock() { echo "$state/$1/droce0.sock"; }
run_on() { scripts/lab.sh exec "$1" --name "$lab" --build "$build" -- "${@:2}"; }

[ -d "$state" ] && scripts/lab.sh down --name "$lab"
ring_args=""
[ "$link" = packet ] && [ "$ring" != 0 ] && ring_args="--link-args frames=$ring"
DROCE_LAB_DROCED_ARGS="--log-level=droce.*:warning $ring_args" scripts/lab.sh up --hosts 4 --link "$link" --name "$lab" \
  --build "$build" >"$tmp/lab.out" 2>&1 || { cat "$tmp/lab.out"; exit 1; }
recv=$(scripts/lab.sh addr h1 --name "$lab")

# ---- what the path carries without the queue ----------------------------------------------------
run_on h1 ib_write_bw -d droce0 -x 1 -s 65536 -D 3 --report_gbits -p 19800 >"$tmp/path.srv" 2>&1 &
wait_tcp_listen "$lab-h1" 19800 "" || true
run_on h2 ib_write_bw -d droce0 -x 1 -s 65536 -D 3 --report_gbits -p 19800 "$recv" >"$tmp/path.cli" 2>&1
wait
path=$(awk '/^ *65536 /{print $4}' "$tmp/path.cli" | tail -1)
echo "link $link, frames timed by the $([ "$arrival" = loop ] || [ "$link" = af_packet ] && echo "loop" || echo "kernel's receive stamp"), RED on $mark"
echo "the path alone (one ib_write_bw 64 KiB, h2 -> h1, no queue): ${path:-?} Gbit/s; the queue: $rate"

# The sampler: every ~100 ms, the JSON of `droce qps` on every host, `droce fault` and
# `droce counters` on h1 and the senders' counters, one line per sample.
cat >"$tmp/sample.py" <<'PY'
import json, subprocess, sys, time
droce, state, secs, outp = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
hosts = ["h1", "h2", "h3", "h4"]
def cmd(h, *a):
    return [droce, *a, "--json", "--socket", f"{state}/{h}/droce0.sock"]
with open(outp, "w") as f:
    t0 = time.monotonic()
    while time.monotonic() - t0 < secs:
        t = time.monotonic()
        jobs = {("qps", h): subprocess.Popen(cmd(h, "qps"), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) for h in hosts}
        jobs[("fault", "h1")] = subprocess.Popen(cmd("h1", "fault"), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        for h in hosts:
            jobs[("counters", h)] = subprocess.Popen(cmd(h, "counters"), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        row = {"t": t - t0}
        for (what, h), p in jobs.items():
            o, _ = p.communicate()
            try:
                row.setdefault(what, {})[h] = json.loads(o)
            except ValueError:
                pass
        f.write(json.dumps(row) + "\n")
        time.sleep(max(0.0, 0.1 - (time.monotonic() - t)))
PY

# run MODE PORT: one incast run; its samples in $tmp/MODE.jsonl.
run() {
  local mode=$1 p=$2 h s pids=()
  for h in h1 h2 h3 h4; do
    # shellcheck disable=SC2086 # cc_extra is a list of NAME=VALUE
    if [ "$mode" = dcqcn ]; then "$droce" cc set rp_enable=1 np_enable=1 $cc_extra --socket "$(sock "$h")" >/dev/null
    else "$droce" cc set rp_enable=0 np_enable=0 --socket "$(sock "$h")" >/dev/null; fi
  done
  "$droce" fault clear all --socket "$(sock h1)" >/dev/null 2>&1
  local spec="rate=$rate,buffer=$buffer"
  [ "$arrival" = loop ] && spec="$spec,arrival=loop"
  [ "$mode" = dcqcn ] || [ "$red_both" = 1 ] && spec="$spec,ecn-min=$kmin,ecn-max=$kmax,ecn-pmax=$pmax,mark=$mark"
  [ "$mode" = dcqcn ] || [ "$pfc_both" = 1 ] && [ "$pfc" != 0 ] && spec="$spec,pfc-xoff=$pfc"
  echo "  h1's queue: $spec"
  "$droce" fault set "$spec" --dir rx \
    --socket "$(sock h1)" >/dev/null || { echo "incast.sh: the congestion point was refused" >&2; exit 1; }
  # The links' own drops (a ring the kernel found full) before and after: `droce ports`.
  for h in h1 h2 h3 h4; do "$droce" ports --json --socket "$(sock "$h")" >"$tmp/$mode.ports0.$h" 2>/dev/null; done
  for s in 0 1 2; do
    run_on h1 ib_write_bw -d droce0 -x 1 -s 65536 -D "$secs" -p $((p + s)) >"$tmp/$mode.srv$s" 2>&1 &
  done
  for s in 0 1 2; do wait_tcp_listen "$lab-h1" $((p + s)) "" || true; done
  if [ "$mode" = dcqcn ]; then
    ip netns exec "$lab-h2" "$droce" capture -s 96 -c 100000 -w "$tmp/cnp.pcapng" --socket "$(sock h2)" \
      >"$tmp/capture.out" 2>&1 &
    cap=$!
  fi
  for s in 0 1 2; do
    run_on "h$((s + 2))" ib_write_bw -d droce0 -x 1 -s 65536 -D "$secs" -p $((p + s)) "$recv" \
      >"$tmp/$mode.cli$s" 2>&1 &
    pids+=($!)
  done
  $py "$tmp/sample.py" "$droce" "$state" "$((secs + 3))" "$tmp/$mode.jsonl" &
  pids+=($!)
  for s in "${pids[@]}"; do wait "$s"; done
  [ "$mode" = dcqcn ] && { kill -INT "$cap" 2>/dev/null; wait "$cap"; }
  wait
  for h in h1 h2 h3 h4; do
    "$droce" ports --json --socket "$(sock "$h")" >"$tmp/$mode.ports1.$h" 2>/dev/null
    # How the hosts' workers were scheduled (SCHED_RR budget demotions, rescues): with four
    # droced on this machine's CPUs the queue's figures depend on it (docs/benchmarks.md).
    "$droce" cores --json --socket "$(sock "$h")" >"$tmp/$mode.cores1.$h" 2>/dev/null
  done
  if [ -n "${DROCE_INCAST_KEEP:-}" ]; then
    for h in h1 h2 h3 h4 sw; do ip -n "$lab-$h" -s -s link >"$tmp/$mode.links.$h" 2>&1; done
    ip -s -s link >"$tmp/$mode.links.root" 2>&1; cat /proc/net/softnet_stat >"$tmp/$mode.softnet"
  fi
  for s in 0 1 2; do
    echo "  $mode h$((s + 2)): $(grep -E '^ *65536 ' "$tmp/$mode.cli$s" | tr -s ' ' || tail -n 2 "$tmp/$mode.cli$s")"
  done
}
echo "--- with DCQCN (droce cc defaults${cc_extra:+, $cc_extra}; $([ "$pfc" = 0 ] && echo lossy || echo "lossless, PFC past $pfc"))"
run dcqcn 19810
cnps=$(tshark -r "$tmp/cnp.pcapng" -Y 'infiniband.bth.opcode == 0x81' 2>/dev/null | wc -l)
echo "  CNPs captured on h2 that tshark decodes (infiniband.bth.opcode == 0x81): $cnps"
echo "--- without DCQCN (rp_enable=0 np_enable=0 on every host; the queue $([ "$red_both" = 1 ] && echo "with RED, Not-ECT dropped" || echo "drop-tail only")$([ "$pfc_both" = 1 ] && [ "$pfc" != 0 ] && echo ", lossless, PFC past $pfc"))"
run no-dcqcn 19820

$py - "$tmp" "$out" "$recv" "${path:-0}" "$rate" "$buffer" "$kmin" "$kmax" "$pmax" "$cnps" "$cc_extra" "$red_both" \
  "$link" "$arrival" "$mark" "$pfc" "$pfc_both" <<'PY'
import json, sys
tmp, out, recv, path, rate, buffer, kmin, kmax, pmax, cnps = sys.argv[1:11]
def size(s):
    s = s.lower()
    for u, k in (("kib", 1024), ("mib", 1 << 20), ("k", 1024), ("m", 1 << 20)):
        if s.endswith(u): return float(s[:-len(u)]) * k
    return float(s)
kmin_b, kmax_b = size(kmin), size(kmax)
senders = ["h2", "h3", "h4"]
def total(cj, name):
    def find(j):
        if isinstance(j, dict):
            if name in j and not isinstance(j[name], (dict, list)): return j[name]
            for v in j.values():
                r = find(v)
                if r is not None: return r
        return None
    return find(cj) or 0
def missed(mode, h):
    # rx_missed of the host's port (the kernel found its ring full), over the run.
    def read(k):
        try:
            return json.load(open(f"{tmp}/{mode}.ports{k}.{h}"))[0]["stats"]["rx_missed"]
        except (OSError, ValueError, LookupError):
            return None
    a, b = read(0), read(1)
    return b - a if a is not None and b is not None else None
def worker_stat(mode, h, name):
    # A worker counter of the host's droced (summed over its cores), at the end of the run: the
    # daemon's totals since it started, so the dcqcn run's and, in the no-dcqcn run, both runs'.
    try:
        return sum(c.get(name, 0) for c in json.load(open(f"{tmp}/{mode}.cores1.{h}")))
    except (OSError, ValueError, LookupError, TypeError, AttributeError):
        return None
def analyse(mode):
    rows = [json.loads(l) for l in open(f"{tmp}/{mode}.jsonl")]
    series = []
    prev = None
    for r in rows:
        qps = r.get("qps", {})
        # h1's QP of each flow, by the sender's address ("dest" of h1's QP).
        addr = {h: None for h in senders}
        rx = {}
        for q in qps.get("h1", []):
            rx[q["dest"]] = rx.get(q["dest"], 0) + q["rx_bytes"]
        snd = {h: qps.get(h, []) for h in senders}
        faults = r.get("fault", {}).get("h1", [])
        fc = faults[0]["counters"] if faults else {}
        cnt = r.get("counters", {})
        s = {"t": r["t"], "rx": rx,
             "retransmits": sum(q["retransmits"] for h in senders for q in snd[h]),
             "rate_mbps": {h: max([q["rate_mbps"] for q in snd[h]] or [0]) for h in senders},
             "depth": fc.get("queue_depth", 0), "marked": fc.get("queue_marked", 0),
             "dropped": fc.get("queue_dropped", 0) + fc.get("queue_red_dropped", 0),
             "dropped_full": fc.get("queue_dropped", 0),
             "matched": fc.get("matched", 0), "wire_timed": fc.get("wire_timed", 0),
             "cnp_sent": total(cnt.get("h1", {}), "np_cnp_sent"),
             "cnp_handled": sum(total(cnt.get(h, {}), "rp_cnp_handled") for h in senders),
             "retx_total": sum(total(cnt.get(h, {}), "retransmits") for h in senders),
             "pfc_xoff": fc.get("pfc_xoff_sent", 0), "pfc_xon": fc.get("pfc_xon_sent", 0),
             "pfc_paused_us": fc.get("pfc_paused_us", 0), "pfc_repaused": fc.get("pfc_repaused", 0),
             "pause_rx": sum(total(cnt.get(h, {}), "pause_frames_in") for h in senders),
             "timeouts": sum(total(cnt.get(h, {}), "timeouts") for h in senders),
             "seq_naks": sum(total(cnt.get(h, {}), "seq_naks_received") for h in senders)}
        if prev is not None:
            dt = s["t"] - prev["t"]
            s["flow_gbps"] = {a: (s["rx"].get(a, 0) - prev["rx"].get(a, 0)) * 8 / dt / 1e9
                              for a in s["rx"] if a in prev["rx"]}
        series.append(s)
        prev = s
    act = [s for s in series if s.get("flow_gbps") and sum(s["flow_gbps"].values()) > 0]
    mid = act[len(act) // 5: len(act) - len(act) // 5] if len(act) >= 5 else act
    flows = sorted({a for s in mid for a in s["flow_gbps"]})
    mean = {a: sum(s["flow_gbps"].get(a, 0) for s in mid) / max(1, len(mid)) for a in flows}
    last, first = series[-1], series[0]
    fig = {
        "samples": len(act),
        "under_kmin": sum(s["depth"] <= kmin_b for s in act) / max(1, len(act)),
        "under_kmax": sum(s["depth"] <= kmax_b for s in act) / max(1, len(act)),
        "depth_mean": sum(s["depth"] for s in act) / max(1, len(act)),
        "drops": last["dropped"] - first["dropped"],
        "drops_full": last["dropped_full"] - first["dropped_full"],
        "marked": last["marked"] - first["marked"],
        "cnp_sent": last["cnp_sent"] - first["cnp_sent"],
        "cnp_handled": last["cnp_handled"] - first["cnp_handled"],
        "retransmits": last["retx_total"] - first["retx_total"],
        "ring_drops": {h: missed(mode, h) for h in ["h1"] + senders},
        "rt_demotions": {h: worker_stat(mode, h, "rt_demotions") for h in ["h1"] + senders},
        "rt_rescues": {h: worker_stat(mode, h, "rt_rescues") for h in ["h1"] + senders},
        "timeouts": last["timeouts"] - first["timeouts"],
        "seq_naks": last["seq_naks"] - first["seq_naks"],
        "pfc_xoff": last["pfc_xoff"] - first["pfc_xoff"],
        "pfc_xon": last["pfc_xon"] - first["pfc_xon"],
        "pfc_repaused": last["pfc_repaused"] - first["pfc_repaused"],
        "pfc_paused_ms": (last["pfc_paused_us"] - first["pfc_paused_us"]) / 1000,
        "pause_rx": last["pause_rx"] - first["pause_rx"],
        "pfc_times": [round(s["t"], 1) for p, s in zip(series, series[1:]) if s["pfc_xoff"] > p["pfc_xoff"]],
        "wire_timed": (last["wire_timed"] - first["wire_timed"]) / max(1, last["matched"] - first["matched"]),
        "flow_gbps": mean,
        "total_gbps": sum(mean.values()),
        "spread": (max(mean.values()) / min(mean.values())) if len(mean) == 3 and min(mean.values()) > 0 else None,
    }
    return series, fig
res = {"path_gbps": float(path), "cc": sys.argv[11], "link": sys.argv[13], "arrival": sys.argv[14], "mark": sys.argv[15], "queue": {"rate": rate, "buffer": buffer, "ecn_min": kmin, "ecn_max": kmax,
       "ecn_pmax": pmax, "red_without_dcqcn": sys.argv[12] == "1", "pfc_xoff": sys.argv[16],
       "pfc_without_dcqcn": sys.argv[17] == "1"}, "cnps_captured": int(cnps), "runs": {}}
for mode in ("dcqcn", "no-dcqcn"):
    series, fig = analyse(mode)
    res["runs"][mode] = {"figures": fig, "series": series}
    print(f"\n{mode}: per second (flows Gbit/s at h1; queue depth KiB; cumulative marks, drops, CNPs, retransmits)")
    print(f"{'t':>5} {'flow1':>7} {'flow2':>7} {'flow3':>7} {'depth':>7} {'marked':>8} {'dropped':>8} "
          f"{'cnp_tx':>7} {'cnp_rx':>7} {'retx':>7}")
    nxt = 0.0
    for s in series:
        if "flow_gbps" not in s or s["t"] < nxt: continue
        nxt = s["t"] + 1.0
        f = [s["flow_gbps"].get(a, 0) for a in sorted(s["flow_gbps"])] + [0, 0, 0]
        print(f"{s['t']:5.1f} {f[0]:7.3f} {f[1]:7.3f} {f[2]:7.3f} {s['depth']/1024:7.1f} {s['marked']:8} "
              f"{s['dropped']:8} {s['cnp_sent']:7} {s['cnp_handled']:7} {s['retx_total']:7}")
print("\nacceptance figures (issue 37; printed, not asserted):")
print(f"{'':>10} {'<kmin':>7} {'<kmax':>7} {'depth':>9} {'drops':>7} {'(full)':>7} {'marked':>8} {'CNPs tx':>8} {'CNPs rx':>8} "
      f"{'retx':>7} {'total':>7} {'spread':>7}")
for mode, r in res["runs"].items():
    f = r["figures"]
    sp = f"{f['spread']:.2f}" if f["spread"] else "-"
    print(f"{mode:>10} {f['under_kmin']*100:6.0f}% {f['under_kmax']*100:6.0f}% {f['depth_mean']/1024:7.1f}Ki "
          f"{f['drops']:7} {f['drops_full']:7} {f['marked']:8} {f['cnp_sent']:8} {f['cnp_handled']:8} {f['retransmits']:7} "
          f"{f['total_gbps']:6.3f}G {sp:>7}")
print("(<kmin, <kmax: share of samples with the queue at most that deep; depth: its mean; drops: RED's")
print(" and drop-tail's, (full) drop-tail's alone; total: the flows' sum at h1, Gbit/s; spread: the flows'")
print(" mean rates, max/min, over the middle 60 % of the run; issue 37's goal with DCQCN < 1.2)")
for mode, r in res["runs"].items():
    f = r["figures"]
    rd = f["ring_drops"]
    print(f"{mode}: the links' rings dropped (rx_missed) " + ", ".join(f"{h} {v if v is not None else '?'}" for h, v in rd.items())
          + f"; the senders' retransmits came from {f['seq_naks']} sequence NAKs and {f['timeouts']} timeouts")
    print(f"{mode}: the workers' SCHED_RR budget, since each droced started: demoted / rescued "
          + ", ".join(f"{h} {f['rt_demotions'][h] if f['rt_demotions'][h] is not None else '?'} / "
                      f"{f['rt_rescues'][h] if f['rt_rescues'][h] is not None else '?'}" for h in f["rt_demotions"]))
    if f["pfc_xoff"] or f["pfc_xon"]:
        print(f"{mode}: PFC: {f['pfc_xoff']} pauses ({f['pfc_repaused']} to senders that had missed one) and "
              f"{f['pfc_xon']} resumes sent by h1, {f['pause_rx']} received by "
              f"the senders; senders paused {f['pfc_paused_ms']:.1f} ms in all; pauses began in the samples at "
              f"{', '.join(map(str, f['pfc_times'][:8]))}{' ...' if len(f['pfc_times']) > 8 else ''} s")
    else:
        print(f"{mode}: no PFC pause")
print(f"CNPs captured on h2 that tshark decodes: {cnps}")
print("frames the queue timed by the kernel's receive stamp (the rest by h1's loop): " +
      ", ".join(f"{m} {r['figures']['wire_timed'] * 100:.0f}%" for m, r in res["runs"].items()))
with open(f"{out}/incast.json", "w") as fo:
    json.dump(res, fo, indent=1)
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(3, 2, figsize=(12, 9), sharex=True)
    for col, mode in enumerate(("dcqcn", "no-dcqcn")):
        ser = [s for s in res["runs"][mode]["series"] if "flow_gbps" in s]
        t = [s["t"] for s in ser]
        for i, a in enumerate(sorted({a for s in ser for a in s["flow_gbps"]})):
            ax[0][col].plot(t, [s["flow_gbps"].get(a, 0) for s in ser], label=f"flow {i + 1} ({a})")
        ax[0][col].set_title(f"{mode}: per-flow rate at h1 (Gbit/s)")
        ax[0][col].legend(fontsize=7)
        ax[1][col].plot(t, [s["depth"] / 1024 for s in ser], color="k")
        ax[1][col].axhline(kmin_b / 1024, ls="--", color="g", label="kmin")
        ax[1][col].axhline(kmax_b / 1024, ls="--", color="r", label="kmax")
        ax[1][col].set_title("queue depth (KiB)")
        ax[1][col].legend(fontsize=7)
        for k, label in (("cnp_sent", "CNPs sent (h1)"), ("dropped", "drops"), ("retx_total", "retransmits"),
                         ("pfc_xoff", "PFC pauses sent (h1)")):
            ax[2][col].plot(t, [s[k] - ser[0][k] for s in ser], label=label)
        ax[2][col].set_title("since the run began")
        ax[2][col].set_xlabel("s")
        ax[2][col].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{out}/incast.png", dpi=100)
    print(f"wrote {out}/incast.json and {out}/incast.png")
except ImportError:
    print(f"wrote {out}/incast.json (no python3-matplotlib: no plot)")
PY
