#!/usr/bin/env bash
# droce beside the kernel, on this machine, in one run (issue #13). Prints a table, writes JSON and
# draws a PNG (latency: droce's perftest beside sockperf over loopback; throughput: ib_write_bw
# against QPs and 64 KiB beside iperf3).
#
#   bench/vs_kernel.sh [--link shm|memif] [--quick] [--out DIR]
#
# The kernel's figures: sockperf TCP and UDP ping-pong, 64 B (half round trip, as perftest's
# latency tools report; ib_read_lat reports a whole READ, request and response), and iperf3 TCP, all over 127.0.0.1. droce's: Debian's unmodified perftest
# between the demo's two droce hosts (scripts/lib/droced-pair.sh; --link picks droce_shm, the
# default, or net_memif; MTU 9000, path MTU 4096): ib_write_lat, ib_send_lat, ib_read_lat (64 B
# and 4 KiB), ib_write_bw 64 B with 1, 8 and 64 QPs, ib_write_bw and ib_read_bw 64 KiB. For every
# bandwidth run, the CPU time of each of the four processes per message; then an idle daemon's
# CPU. Timing belongs here, never in a test: nothing in this script passes or fails on a number.
# Nothing leaves this machine (loopback and droce's same-host link only).
set -euo pipefail
cd "$(dirname "$0")/.."

link=shm
quick=0
out=bench/out
while [ $# -gt 0 ]; do
  case "$1" in
    --link) link=$2; shift ;;
    --quick) quick=1 ;;
    --out) out=$2; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "vs_kernel.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
case "$link" in shm|memif) ;; *) echo "--link is shm or memif" >&2; exit 2 ;; esac

# ---- what it needs ----------------------------------------------------------------------------
scripts/install-deps.sh
need=()
for p in sockperf iperf3 perftest python3-matplotlib time; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "vs_kernel.sh: installing ${need[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
pabi=$(scripts/fetch-rdma-core-headers.sh --pabi-only 2>/dev/null | tail -1)
[ -f build/release/build.ninja ] || meson setup build/release -Dbuildtype=release -Dprovider=enabled >/dev/null
ninja -C build/release apps/droce apps/droced "provider/verbs/libdroce-rdmav$pabi.so" \
  provider/preload/libdroce-preload.so >/dev/null

n_lat=20000 n_bw=300000 n_big=30000 secs=5   # n_bw, n_big: multiples of 100 (see below)
[ "$quick" = 1 ] && { n_lat=3000; n_bw=100000; n_big=10000; secs=2; }
work=$(mktemp -d /tmp/droce-vs-kernel.XXXXXX)
results=$work/results.tsv      # kind  name  field  value
: > "$results"
bg=()
cleanup() {
  for p in "${bg[@]}"; do kill "$p" 2>/dev/null || true; done
  droced_pair_stop 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
put() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$results"; }

# ---- the kernel -------------------------------------------------------------------------------
echo "== the kernel: sockperf ping-pong (64 B) and iperf3 over 127.0.0.1"
sockperf_pp() {  # sockperf_pp NAME [--tcp]
  local name=$1 port=$((11000 + RANDOM % 1000)) o; shift
  sockperf server "$@" -i 127.0.0.1 -p "$port" >/dev/null 2>&1 & bg+=($!)
  sleep 0.5
  if o=$(timeout 60 sockperf ping-pong "$@" -i 127.0.0.1 -p "$port" -m 64 -t "$secs" 2>&1); then
    put lat "$name" typical "$(sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' <<<"$o")"
    put lat "$name" p99 "$(sed -n 's/.*percentile 99.000 = *\([0-9.]*\).*/\1/p' <<<"$o")"
    put lat "$name" min "$(sed -n 's/.*<MIN> observation = *\([0-9.]*\).*/\1/p' <<<"$o")"
  else
    put lat "$name" failed 1
  fi
  kill "${bg[-1]}" 2>/dev/null || true
}
sockperf_pp "kernel TCP 64 B" --tcp
sockperf_pp "kernel UDP 64 B"
iperf3 -s -B 127.0.0.1 -p 15201 -1 >/dev/null 2>&1 & bg+=($!)
sleep 0.5
if o=$(timeout 60 iperf3 -c 127.0.0.1 -p 15201 -t "$secs" -J 2>/dev/null); then
  put bw "kernel TCP (iperf3)" gbps "$(python3 -c 'import json,sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9, 2))' <<<"$o")"
else
  put bw "kernel TCP (iperf3)" failed 1
fi

# ---- droce ------------------------------------------------------------------------------------
. scripts/lib/droced-pair.sh
export DROCE_PAIR_LINK=$link
echo "== droce: two droce hosts on this machine over $link (MTU 9000), Debian's perftest"
droced_pair_start build/release/apps "$work/hosts" --mtu 9000 >/dev/null
run_on() { local h=$1; shift; build/release/apps/droce exec --run-dir "$work/hosts/$h" -- "$@"; }
# A process's CPU time in ns, every thread's (schedstat: ns, where /proc/PID/stat counts ticks).
cpu_of() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f", s}'; }

# perftest NAME KIND TOOL ARGS...: server on host A, client on host B (perftest's own TCP
# exchange over loopback), the client's result line kept; for bandwidth, every process's CPU.
perftest() {
  local name=$1 kind=$2 tool=$3; shift 3
  local a0 b0 sv cl line
  a0=$(cpu_of "$DROCE_A_PID"); b0=$(cpu_of "$DROCE_B_PID")
  /usr/bin/time -f '%U %S' -o "$work/server.time" \
    build/release/apps/droce exec --run-dir "$work/hosts/a" -- "$tool" -d droce0 -x 1 "$@" >"$work/server.out" 2>&1 &
  sv=$!
  sleep 0.7
  if ! /usr/bin/time -f '%U %S' -o "$work/client.time" timeout 120 \
      build/release/apps/droce exec --run-dir "$work/hosts/b" -- "$tool" -d droce0 -x 1 "$@" 127.0.0.1 >"$work/client.out" 2>&1; then
    kill "$sv" 2>/dev/null || true
    wait "$sv" 2>/dev/null || true
    put "$kind" "$name" failed 1
    echo "  $name: failed (see below)"; tail -3 "$work/client.out" | sed 's/^/    /'
    return 0
  fi
  wait "$sv" || true
  line=$(grep -E '^ *[0-9]+ +[0-9]+ ' "$work/client.out" | tail -1)
  if [ "$kind" = lat ]; then
    # #bytes #iterations t_min t_max t_typical t_avg t_stdev p99 p99.9
    read -r _ _ mn _ typ _ _ p99 _ <<<"$line"
    put lat "$name" typical "$typ"; put lat "$name" p99 "$p99"; put lat "$name" min "$mn"
  else
    # #bytes #iterations BW-peak BW-avg MsgRate(Mpps), BW in MB/s
    local bytes iters avg mpps msgs
    read -r bytes iters _ avg mpps <<<"$line"
    put bw "$name" mpps "$mpps"; put bw "$name" gbps "$(awk -v a="$avg" 'BEGIN{printf "%.2f", a*8/1000}')"
    msgs=$iters
    local a1 b1 s c
    a1=$(cpu_of "$DROCE_A_PID"); b1=$(cpu_of "$DROCE_B_PID")
    # time(1) adds a "Command exited with non-zero status" line before its figures when so.
    s=$(tail -1 "$work/server.time" | awk '{printf "%.0f", ($1+$2)*1e6}')
    c=$(tail -1 "$work/client.time" | awk '{printf "%.0f", ($1+$2)*1e6}')
    put bw "$name" us_per_msg_droced_a "$(awk -v d=$((a1 - a0)) -v n="$msgs" 'BEGIN{printf "%.3f", d/1e3/n}')"
    put bw "$name" us_per_msg_droced_b "$(awk -v d=$((b1 - b0)) -v n="$msgs" 'BEGIN{printf "%.3f", d/1e3/n}')"
    put bw "$name" us_per_msg_perftest_server "$(awk -v d="$s" -v n="$msgs" 'BEGIN{printf "%.3f", d/n}')"
    put bw "$name" us_per_msg_perftest_client "$(awk -v d="$c" -v n="$msgs" 'BEGIN{printf "%.3f", d/n}')"
  fi
  echo "  $name: $line"
}
perftest "ib_write_lat 64 B" lat ib_write_lat -s 64 -n "$n_lat"
perftest "ib_write_lat 4 KiB" lat ib_write_lat -s 4096 -n "$n_lat"
perftest "ib_send_lat 64 B" lat ib_send_lat -s 64 -n "$n_lat"
perftest "ib_send_lat 4 KiB" lat ib_send_lat -s 4096 -n "$n_lat"
perftest "ib_read_lat 64 B (whole READ)" lat ib_read_lat -s 64 -n "$n_lat"
perftest "ib_read_lat 4 KiB (whole READ)" lat ib_read_lat -s 4096 -n "$n_lat"
# Iterations per QP a multiple of perftest's CQ moderation (100): otherwise its completion count
# overshoots (each QP's last completion counts 100) and, when QPs finish unevenly, it stops
# polling while some QPs still wait for completions (seen with -q 64 -n 1562: a stall).
for q in 1 8 64; do
  perftest "ib_write_bw 64 B, $q QP" bw ib_write_bw -s 64 -q "$q" -n $(( (n_bw / q + 99) / 100 * 100 ))
done
perftest "ib_write_bw 64 KiB" bw ib_write_bw -s 65536 -n "$n_big"
perftest "ib_read_bw 64 KiB" bw ib_read_bw -s 65536 -n "$n_big"

echo "== an idle droced (10 s)"
a0=$(cpu_of "$DROCE_A_PID"); b0=$(cpu_of "$DROCE_B_PID")
sleep 10
a1=$(cpu_of "$DROCE_A_PID"); b1=$(cpu_of "$DROCE_B_PID")
put idle "droced A" cpu_percent "$(awk -v d=$((a1 - a0)) 'BEGIN{printf "%.3f", d/1e9*100/10}')"
put idle "droced B" cpu_percent "$(awk -v d=$((b1 - b0)) 'BEGIN{printf "%.3f", d/1e9*100/10}')"
modes=$(build/release/apps/droce cores --socket "$DROCE_A_SOCK" | awk 'NR == 2 {print $3}')
droced_pair_stop

# ---- report -----------------------------------------------------------------------------------
mkdir -p "$out"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
/usr/bin/python3 - "$results" "$out/vs_kernel-$stamp" "$link" "$commit" "$modes" <<'PY'
import json, os, platform, sys
path, base, link, commit, mode = sys.argv[1:6]
rows = {}
for line in open(path):
    kind, name, field, value = line.rstrip("\n").split("\t")
    r = rows.setdefault(name, {"kind": kind})
    try:
        r[field] = float(value)
    except ValueError:
        r[field] = None
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
machine = {"cpus": os.cpu_count(), "cpu": cpu, "kernel": platform.release(), "droce": commit,
           "link": link, "droced_mode": mode}
json.dump({"machine": machine, "results": rows}, open(base + ".json", "w"), indent=1)

def f(r, k, fmt="{:.2f}"):
    v = r.get(k)
    return "-" if v is None else fmt.format(v)
print(f"\n{cpu}, {machine['cpus']} CPUs, kernel {machine['kernel']}, droce {commit} over {link} "
      f"(droced in {mode} mode)\n")
print(f"{'latency (half round trip, us)':34} {'typical':>8} {'p99':>8} {'min':>8}")
for n, r in rows.items():
    if r["kind"] == "lat":
        print(f"{n:34} {f(r, 'typical'):>8} {f(r, 'p99'):>8} {f(r, 'min'):>8}" + ("  FAILED" if "failed" in r else ""))
print(f"\n{'throughput':34} {'M msg/s':>8} {'Gbit/s':>8}   CPU us per message: droced A, B, perftest server, client")
for n, r in rows.items():
    if r["kind"] == "bw":
        cpu_cols = ", ".join(f(r, k, "{:.3f}") for k in ("us_per_msg_droced_a", "us_per_msg_droced_b",
                                                          "us_per_msg_perftest_server", "us_per_msg_perftest_client"))
        print(f"{n:34} {f(r, 'mpps', '{:.3f}'):>8} {f(r, 'gbps'):>8}   " +
              ("FAILED" if "failed" in r else (cpu_cols if "mpps" in r else "")))
for n, r in rows.items():
    if r["kind"] == "idle":
        print(f"idle {n}: {f(r, 'cpu_percent')} % of a CPU")

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 5))
lat = [(n, r) for n, r in rows.items() if r["kind"] == "lat" and "typical" in r]
xs = range(len(lat))
a1.bar([x - 0.2 for x in xs], [r["typical"] for _, r in lat], 0.4, label="typical (median)")
a1.bar([x + 0.2 for x in xs], [r.get("p99") or 0 for _, r in lat], 0.4, label="99th percentile")
a1.set_xticks(list(xs))
a1.set_xticklabels([n.replace(" B", "B").replace(" KiB", "K") for n, _ in lat], rotation=35, ha="right", fontsize=8)
a1.set_ylabel("microseconds (half round trip)")
a1.set_title("latency: droce (perftest) beside the kernel (sockperf)")
a1.legend()
bws = [(n, r) for n, r in rows.items() if r["kind"] == "bw" and r.get("gbps") is not None]
a2.barh([n for n, _ in bws], [r["gbps"] for _, r in bws], color=["tab:gray" if n.startswith("kernel") else "tab:blue" for n, _ in bws])
for i, (n, r) in enumerate(bws):
    if r.get("mpps"):
        a2.text(r["gbps"], i, f" {r['mpps']:.2f} M msg/s", va="center", fontsize=8)
a2.set_xlabel("Gbit/s")
a2.set_title("throughput: droce (ib_write/read_bw) beside iperf3")
fig.suptitle(f"droce {commit} over {link} vs the kernel: {cpu}, {machine['cpus']} CPUs, {machine['kernel']}", fontsize=9)
fig.tight_layout()
fig.savefig(base + ".png", dpi=110)
print(f"\nJSON: {base}.json\nPNG:  {base}.png")
PY
