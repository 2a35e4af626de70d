#!/usr/bin/env bash
# droce beside the Linux kernel on this machine, in one run (issue #13): a table on stdout, JSON and
# a PNG in bench/out (or --out DIR).
#
#   bench/vs_kernel.sh [--link auto|shm|memif] [--quick] [--out DIR] [--netns] [--no-build]
#                      [--droced ARG]...
#
#   --link L    the link between the two droce hosts: shm (droce_shm, droce's own same-host link),
#               memif (DPDK's net_memif), auto (default): shm if this droced accepts it, else memif
#   --quick     fewer iterations, for a first look (about 40 s in all; --netns doubles it)
#   --out DIR   where vs_kernel-DATE.json and .png go (default bench/out)
#   --netns     (root) also two droced sharing a veth with the kernel (droced --netdev) on
#               net_af_packet, then on net_af_xdp, between two network namespaces this script
#               makes and removes, beside the kernel's TCP/UDP on that veth and DPDK's testpmd
#               sending 64 B frames over each PMD on it (the PMD's own rate: droce's ceiling);
#               prints issue #35's goals against the kernel on that veth
#   --no-build  use build/release as it is (default: ninja brings it up to date, or sets it up)
#   --droced A  pass A to both droced (repeatable), e.g. --droced --event-affinity=lcore, to
#               compare droced's knobs; the table's header says which were given
#   --no-idle   (root) hold /dev/cpu_dma_latency at 0 for the run: idle CPUs poll instead of
#               entering an idle state (a VM's vCPU halt), so no wake-up pays the idle exit. On
#               the 2-vCPU development VM it takes the kernel's TCP ping-pong from 28 to 8.6 us
#               and leaves droce's figures where they were (droced and perftest keep the CPUs
#               busy); without it the kernel's figures include what waking an idle CPU costs
#
# The kernel: sockperf ping-pong, TCP and UDP, 64 B and 4 KiB, and iperf3 TCP, over 127.0.0.1.
# droce: Debian's unmodified perftest between two droced on this machine
# (scripts/lib/droced-pair.sh, MTU 9000): ib_write_lat, ib_send_lat, ib_read_lat at 64 B and 4 KiB,
# ib_send_lat 64 B over completion events (-e); ib_write_bw 64 B with 1, 8 and 64 QPs; ib_write_bw
# and ib_read_bw at 64 KiB. Latencies are half a round trip (sockperf and perftest both report so)
# except ib_read_lat's, a whole READ. The two figures issue #13's goals divide, ib_write_bw 64 B 1
# QP and 64 KiB, and the engine bench they are divided by, run three times each and keep the median
# (every run's rate is in the JSON; --quick runs once), and the goals divide the medians (the engine
# alone moves by a half within seconds on the development VM: a median of three on each side filters
# a slow run on either side). Each of those runs also prints, and the JSON keeps, both droced's
# counters over the run (`droce cores --json` before and after: yields, sleeps and their wakers,
# preemptions, CPU moves) and the share of the vCPUs the hypervisor gave to others meanwhile (steal,
# kept for every throughput run), so that a slow run shows what was different. CPU per message: the
# CPU time of both droced and both perftest processes while the transfer ran, over its messages.
# Then 5 s of an idle droced. Nothing goes anywhere but 127.0.0.1, droce's same-host link and the
# namespaces made here; a measurement that fails is reported as failed and the run goes on.
set -euo pipefail

link=auto quick=0 out=bench/out netns=0 build=1 droced_args=() no_idle=0
while [ $# -gt 0 ]; do
  case "$1" in
    --link) link=${2:?--link needs a value}; shift ;;
    --quick) quick=1 ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    --netns) netns=1 ;;
    --no-build) build=0 ;;
    --no-idle) no_idle=1 ;;
    --droced) droced_args+=("${2:?--droced needs an argument}"); shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "vs_kernel.sh: unknown option $1 (-h for help)" >&2; exit 2 ;;
  esac
  shift
done
case "$link" in auto|shm|memif) ;; *) echo "vs_kernel.sh: --link is auto, shm or memif" >&2; exit 2 ;; esac
if [ "$netns" = 1 ] && [ "$(id -u)" != 0 ]; then echo "vs_kernel.sh: --netns needs root" >&2; exit 2; fi
idle_states="allowed"
if [ "$no_idle" = 1 ]; then
  # The request lasts while the descriptor is open: this script's life (the kernel drops it at exit).
  exec {qos_fd}>/dev/cpu_dma_latency && printf 0 >&"$qos_fd" ||
    { echo "vs_kernel.sh: --no-idle: cannot write /dev/cpu_dma_latency (root?)" >&2; exit 2; }
  idle_states="held off (/dev/cpu_dma_latency 0)"
fi
[ "$out" = bench/out ] || out=$(realpath -m "$out")  # the user's --out is relative to where they are
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/droced-pair.sh
. scripts/lib/droced-pair.sh  # and scripts/lib/netns.sh

# ---- what it needs ----------------------------------------------------------------------------
sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
need=()
for p in sockperf iperf3 perftest python3-matplotlib time iproute2; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "vs_kernel.sh: installing ${need[*]}"
  # A fresh image has empty package lists: no candidate until the first update.
  apt-cache policy "${need[@]}" 2>/dev/null | grep -q 'Candidate: [0-9]' || $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [ "$build" = 1 ] || [ ! -x build/release/apps/droced ]; then
  scripts/install-deps.sh
  pabi=$(scripts/fetch-rdma-core-headers.sh --pabi-only 2>/dev/null | tail -1)
  [ -f build/release/build.ninja ] || meson setup build/release -Dbuildtype=release -Dprovider=enabled >/dev/null
  ninja -C build/release apps/droce apps/droced "provider/verbs/libdroce-rdmav$pabi.so" \
    provider/preload/libdroce-preload.so bench/droce_engine_bench >/dev/null
fi

load=$(cut -d' ' -f1-3 /proc/loadavg)  # before this script adds its own: others' work skews figures
py=/usr/bin/python3  # the system's, which has python3-matplotlib (not a pyenv or venv one)
# Throughput runs last a few seconds each (64 B: 5 M messages over the QPs; 64 KiB: 200 000),
# long enough that the rate is the steady one: for the first second or so the scheduler is still
# placing the two droced and perftest (1 QP on 2 vCPUs, interleaved, the same binaries: 1 M
# messages gave 1.63-2.17 M msg/s, 6 M gave 2.07-2.19). Even so one run of 1 QP moves by a
# quarter with where the kernel puts perftest's spinning client: `reps` runs, the median kept.
n_lat=20000 n_bw=5000000 n_big=200000 secs=5 reps=3
# --quick's 64 B runs stay at 600 000 messages (about 0.3 s): with 200 000 (0.1 s) they measured
# droced adapting its spin and affinity as much as the rate, 10-25 % under a full run's.
[ "$quick" = 1 ] && { n_lat=3000; n_bw=600000; n_big=10000; secs=2; reps=1; }
work=$(mktemp -d /tmp/droce-vs-kernel.XXXXXX)
results=$work/results.tsv      # section  kind  name  field  value
: >"$results"
nsa='' nsb=''
# Every process this script starts is its child (servers and clients under timeout, which passes
# the signal on; droced directly, `ip netns exec` execs it): stop those still running, then wait.
cleanup() {
  local p kids=()
  for p in $(jobs -p); do
    [ "$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null)" = $$ ] && kids+=("$p")
  done
  for p in "${kids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${kids[@]}"; do wait "$p" 2>/dev/null || true; done
  netns_del "$nsa" "$nsb"
  rm -rf "$work"
}
on_exit cleanup
trap 'exit 130' INT TERM HUP
put() { printf '%s\t%s\t%s\t%s\t%s\n' "$section" "$1" "$2" "$3" "$4" >>"$results"; }

# The perftest helper. `parse FILE` prints perftest's result columns by their header names (the
# gaps between them are spaces and tabs, and vary). `watch ...` samples the CPU of the four
# processes (every 10 ms, every 100 ms from 0.3 s into the transfer) from the client's result
# header, printed just before the transfer, to its result line, and keeps the transfer's share:
# perftest's own message count over its own rate, the CPU between samples taken as linear.
cat >"$work/pt.py" <<'PY'
import os, re, sys, time
COLS = ["#bytes", "#iterations", "t_min", "t_max", "t_typical", "t_avg", "t_stdev", "99.9% percentile",
        "99% percentile", "BW peak", "BW average", "MsgRate"]
def result(text):
    m = re.search(r"^(.*#bytes.*)\n\s*(\d+\s+\d+[^\n]*)\n", text, re.M)
    if not m:
        return None
    names = [c for _, c in sorted((m.group(1).find(c), c) for c in COLS if c in m.group(1))]
    vals = m.group(2).split()
    return dict(zip(names, vals)) if len(vals) >= len(names) else None
def children():
    kids = {}
    for d in os.listdir("/proc"):
        try:
            f = open(f"/proc/{d}/stat").read()
            kids.setdefault(int(f[f.rindex(")") + 2:].split()[1]), []).append((int(d), f[f.index("(") + 1:f.rindex(")")]))
        except (OSError, ValueError):
            pass
    return kids
def find(root, comm):
    kids, todo = children(), [root]
    while todo:
        for pid, c in kids.get(todo.pop(), []):
            if c == comm[:15]:
                return pid
            todo.append(pid)
def cpu_ns(pid):
    try:
        return sum(int(open(f"/proc/{pid}/task/{t}/schedstat").read().split()[0]) for t in os.listdir(f"/proc/{pid}/task"))
    except (OSError, TypeError):
        return None
if sys.argv[1] == "cores":
    # cores BEFORE_A AFTER_A BEFORE_B AFTER_B: what each droced's workers did over one run (`droce
    # cores --json` before and after, summed over workers), so that a slow run shows why: yields
    # and crowded yields (a third task on the CPU), sleeps and what woke them, preemptions, CPU moves.
    import json
    counters = ["yields", "yields_crowded", "sleeps", "wakeups_by_port", "wakeups_by_client",
                "wakeups_by_timer", "preempted", "affinity_changes", "loops"]
    def load(f):
        try:
            return json.load(open(f))
        except (OSError, ValueError):
            return None
    for side, (b, a) in zip("ab", [(sys.argv[2], sys.argv[3]), (sys.argv[4], sys.argv[5])]):
        before, after = load(b), load(a)
        if not before or not after:
            continue
        for c in counters:
            print(f"core_{side}_{c}", sum(w.get(c, 0) for w in after) - sum(w.get(c, 0) for w in before))
        print(f"core_{side}_spin_us", max(w.get("spin_us", 0) for w in after))
    sys.exit(0)
if sys.argv[1] == "parse":
    r = result(open(sys.argv[2], errors="replace").read())
    short = {"#iterations": "iters", "t_min": "min", "t_typical": "typical", "99% percentile": "p99",
             "99.9% percentile": "p999", "BW average": "gbps", "MsgRate": "mpps"}
    for k, v in (r or {}).items():
        if k in short:
            print(short[k], v)
    sys.exit(0 if r else 1)
out, tool, da, db, sroot, croot = sys.argv[2], sys.argv[3], *map(int, sys.argv[4:8])
samples, sp, cp, t_hdr, r = [], None, None, None, None
deadline = time.monotonic() + 70
last = 0.0
while time.monotonic() < deadline and r is None:
    sp, cp = sp or find(sroot, tool), cp or find(croot, tool)
    text = open(out, errors="replace").read()
    now = time.monotonic()
    # The four processes' CPU every 10 ms until 0.3 s into the transfer (short ones), then every
    # 100 ms: reading every droced thread's schedstat each 10 ms cost a few % of a CPU and, a
    # runnable task beside perftest's spinning client, got the client moved onto the daemons'
    # vCPU (a look-alike sampler made 1 QP slower in three of three interleaved runs).
    header = t_hdr is None and "#bytes" in text
    period = 0.01 if t_hdr is None or now - t_hdr < 0.3 else 0.1
    if header or now - last >= period:
        samples.append([now] + [cpu_ns(p) for p in (da, db, sp, cp)])
        last = now
    if header:
        t_hdr = now
    r = result(text)
    if r is not None:  # printed after the transfer: a sample past its end to interpolate to
        samples.append([time.monotonic()] + [cpu_ns(p) for p in (da, db, sp, cp)])
    try:  # a client that exited stays a zombie until the shell reaps it
        if open(f"/proc/{croot}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
            break
    except OSError:
        break
    time.sleep(0.01)
if r and t_hdr and float(r.get("MsgRate", 0)) > 0:
    # After the transfer perftest spins ~0.2 s calibrating its clock (get_cpu_mhz) before it
    # prints the result: not the messages' cost.
    span = int(r["#iterations"]) / float(r["MsgRate"]) / 1e6
    def at(i, t):  # process i's CPU at time t, between the samples around it
        pts = [(s[0], s[i]) for s in samples if s[i] is not None]
        for (t0, c0), (t1, c1) in zip(pts, pts[1:]):
            if t0 <= t <= t1:
                return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c0
    print("transfer_s", f"{span:.3f}")
    for i, n in enumerate(["cpu_droced_a", "cpu_droced_b", "cpu_perftest_server", "cpu_perftest_client"], 1):
        a, b = at(i, t_hdr), at(i, t_hdr + span)
        if a is not None and b is not None:
            print(n, round(b - a))
PY

# ---- the kernel: sockperf and iperf3 ----------------------------------------------------------
# srv_ns / cli_ns: a command prefix that puts server and client in their namespaces (none here);
# srv_netns the server's namespace.
srv_ns=() cli_ns=() srv_netns='' srv_ip=127.0.0.1
sockperf_pp() {  # sockperf_pp NAME SIZE [--tcp]
  local name=$1 size=$2 port=$((11000 + RANDOM % 1000)) o sv; shift 2
  "${srv_ns[@]}" timeout 120 sockperf server "$@" -i "$srv_ip" -p "$port" >/dev/null 2>&1 & sv=$!
  sleep 0.5
  if o=$("${cli_ns[@]}" timeout 60 sockperf ping-pong "$@" -i "$srv_ip" -p "$port" -m "$size" -t "$secs" 2>&1) &&
     grep -q 'percentile 99.000' <<<"$o"; then
    put lat "$name" typical "$(sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' <<<"$o")"
    put lat "$name" p99 "$(sed -n 's/.*percentile 99.000 = *\([0-9.]*\).*/\1/p' <<<"$o")"
    put lat "$name" min "$(sed -n 's/.*<MIN> observation = *\([0-9.]*\).*/\1/p' <<<"$o")"
  else
    put lat "$name" failed 1; echo "  $name: failed"; tail -3 <<<"$o" | sed 's/^/    /'
  fi
  kill "$sv" 2>/dev/null || true; wait "$sv" 2>/dev/null || true
}
kernel_section() {
  echo "== $section: sockperf ping-pong and iperf3 to $srv_ip"
  sockperf_pp "TCP ping-pong 64 B (sockperf)" 64 --tcp
  sockperf_pp "TCP ping-pong 4 KiB" 4096 --tcp
  sockperf_pp "UDP ping-pong 64 B" 64
  sockperf_pp "UDP ping-pong 4 KiB" 4096
  iperf3_stream "TCP stream (iperf3)"
}
iperf3_stream() {  # iperf3_stream NAME: the kernel's TCP from the client's side to srv_ip
  local name=$1 o sv port=$((15200 + RANDOM % 500))
  "${srv_ns[@]}" timeout 120 iperf3 -s -1 -B "$srv_ip" -p "$port" >/dev/null 2>&1 & sv=$!
  sleep 0.5
  if o=$("${cli_ns[@]}" timeout 60 iperf3 -c "$srv_ip" -p "$port" -t "$secs" -J 2>/dev/null); then
    put bw "$name" gbps "$($py -c 'import json,sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9, 2))' <<<"$o")"
  else
    put bw "$name" failed 1; echo "  iperf3: failed"
  fi
  kill "$sv" 2>/dev/null || true; wait "$sv" 2>/dev/null || true
}
section="kernel loopback"
kernel_section

# ---- the engine alone: what one core does with no daemon, no client, no link ------------------
# droce_engine_bench's WRITE (two engines in one process, frames handed over in memory): the
# ceiling the two-host figures are measured against (issue #13's goals).
echo "== droce_engine_bench: WRITE 64 B and 64 KiB on one core, with and without the ICRC"
section="engine alone"
# Three repetitions, the median kept (each repetition's rate is in the JSON): one core's rate
# here moves by a fifth between runs a minute apart, and the goals divide by it.
if eb=$(build/release/bench/droce_engine_bench --benchmark_filter='BM_EngineWrite(NoIcrc)?/(64|65536)/' \
          --benchmark_min_time="$([ "$quick" = 1 ] && echo 0.2 || echo 1)" --benchmark_repetitions="$reps" \
          --benchmark_format=json 2>/dev/null); then
  while IFS=$'\t' read -r name field value; do
    put eng "$name" "$field" "$value"
  done < <($py -c '
import json, sys
runs = {}
for b in json.load(sys.stdin)["benchmarks"]:
    if b.get("run_type") == "aggregate":
        continue
    name = ("WRITE 64 B" if b["name"].split("/")[1] == "64" else "WRITE 64 KiB") + \
        (", no ICRC" if "NoIcrc" in b["name"] else "")
    runs.setdefault(name, []).append((b["items_per_second"] / 1e6, b["bytes_per_second"] * 8 / 1e9))
for name, rs in runs.items():
    mpps, gbps = sorted(rs)[(len(rs) - 1) // 2]
    print(name, "mpps", round(mpps, 4), sep="\t")
    print(name, "gbps", round(gbps, 2), sep="\t")
    for i, (m, _) in enumerate(rs if len(rs) > 1 else [], 1):
        print(name, f"rep_mpps_{i}", round(m, 4), sep="\t")
' <<<"$eb")
else
  put eng "WRITE 64 B" failed 1
fi

# ---- droce: perftest between two droced -------------------------------------------------------
# exec_a / exec_b run a verbs program on host A / B; dpid_a / dpid_b are the two droced.
exec_a=() exec_b=() dpid_a='' dpid_b='' sock_a='' sock_b=''
perftest() {  # perftest KIND NAME TOOL ARGS...: server on host A, client on host B
  local kind=$1 name=$2 tool=$3; shift 3
  perftest_median 1 "$kind" "$name" "$tool" "$@"
}
# perftest_median N KIND NAME TOOL ARGS...: N runs, the one with the median rate kept (each
# run's rate is in the JSON): the runs that issue #13's goals divide are repeated, so that one
# run's placement by the scheduler does not decide them.
# run_counters FILE: one run's droced counters, one line: per droced its CPU per message, yields
# (crowded), sleeps and what woke them (port/client/timer), preemptions, CPU moves, final spin;
# then the share of the vCPUs' time the hypervisor counted as stolen during the run.
run_counters() {
  awk '{v[$1] = $2} END {
    msgs = v["iters"] > 0 ? v["iters"] : 1
    for (i = 1; i <= 2; i++) {
      s = i == 1 ? "a" : "b"; p = "core_" s "_"
      printf "droced %s %.3f us/msg, yields %d (%d crowded), sleeps %d (woken %d/%d/%d), preempted %d, moved %d, spin %d us%s",
        toupper(s), v["cpu_droced_" s] / 1000 / msgs, v[p "yields"], v[p "yields_crowded"], v[p "sleeps"],
        v[p "wakeups_by_port"], v[p "wakeups_by_client"], v[p "wakeups_by_timer"], v[p "preempted"],
        v[p "affinity_changes"], v[p "spin_us"], i == 1 ? "; " : ""
    }
    printf "; the host took %.1f %% of the vCPUs\n", v["host_steal_pct"]
  }' "$1"
}
perftest_median() {
  local n=$1 kind=$2 name=$3 tool=$4 i ok=0 f v; shift 4
  for i in $(seq "$n"); do
    perftest_once "$kind" "$name" "$tool" "$@" || continue
    cat "$work/fields.txt" "$work/cpu.txt" >"$work/run.$ok.txt"
    ok=$((ok + 1))
  done
  if [ $ok -lt "$n" ]; then put "$kind" "$name" failed 1; return 0; fi
  local key=mpps vals=() pick note=''; [ "$kind" = lat ] && key=typical
  for i in $(seq 0 $((n - 1))); do vals+=("$(awk -v k="$key" '$1 == k {print $2}' "$work/run.$i.txt")"); done
  # The run whose figure is the middle one when sorted.
  pick=0
  [ "$n" = 1 ] || pick=$(for i in "${!vals[@]}"; do echo "${vals[$i]} $i"; done | sort -g | awk -v m=$(((n + 1) / 2)) 'NR == m {print $2}')
  while read -r f v; do put "$kind" "$name" "$f" "$v"; done <"$work/run.$pick.txt"
  if [ "$n" -gt 1 ]; then
    for i in "${!vals[@]}"; do
      put "$kind" "$name" "rep_${key}_$((i + 1))" "${vals[$i]}"
      # Every run's CPU and droced counters too (JSON reps_FIELD): a slow run next to the others.
      while read -r f v; do
        case "$f" in cpu_*|core_*|host_*) put "$kind" "$name" "rep_${f}_$((i + 1))" "$v" ;; esac
      done <"$work/run.$i.txt"
      [ "$kind" = bw ] && echo "    run $((i + 1)): ${vals[$i]} M msg/s; $(run_counters "$work/run.$i.txt")"
    done
    note="(the median of $n runs: ${vals[*]})"
  fi
  echo "  $name: $(grep -Ev '^(cpu|core|host)_' "$work/run.$pick.txt" | tr '\n' ' ')$note"
}
# cores_snapshot N: both droced's `droce cores --json` into $work/coresN.a and .b (empty if it fails).
cores_snapshot() {
  local side sock
  for side in a b; do
    if [ $side = a ]; then sock=$sock_a; else sock=$sock_b; fi
    build/release/apps/droce cores --json --socket "$sock" >"$work/cores$1.$side" 2>/dev/null || : >"$work/cores$1.$side"
  done
}
perftest_once() {  # leaves the result's fields in $work/fields.txt, CPU and counters in $work/cpu.txt
  local kind=$1 name=$2 tool=$3 sv cl rc_s=0 rc_c=0; shift 3
  local cmd=(stdbuf -oL "$tool" -d droce0 -x 1 "$@")  # line-buffered: the watcher sees the header
  [ "$kind" = bw ] && cores_snapshot 0
  local steal0; steal0=$(cpu_jiffies)
  timeout 60 "${exec_a[@]}" "${cmd[@]}" >"$work/server.out" 2>&1 & sv=$!
  wait_for 10 grep -q 'Waiting for client' "$work/server.out" || true
  # And its exchange socket listening (18515), in the server's namespace: perftest prints before
  # it listens, and a loaded machine lets the client in between (connection refused).
  wait_tcp_listen "$srv_netns" 18515 "" 5 || true
  timeout 60 "${exec_b[@]}" "${cmd[@]}" "$srv_ip" >"$work/client.out" 2>&1 & cl=$!
  : >"$work/cpu.txt"
  if [ "$kind" = bw ]; then
    $py "$work/pt.py" watch "$work/client.out" "$tool" "$dpid_a" "$dpid_b" "$sv" "$cl" >"$work/cpu.txt" || true
  fi
  wait "$cl" || rc_c=$?
  [ $rc_c = 0 ] || kill "$sv" 2>/dev/null || true  # a server with no client would wait out its timeout
  wait "$sv" || rc_s=$?
  if [ "$kind" = bw ]; then
    cores_snapshot 1
    $py "$work/pt.py" cores "$work/cores0.a" "$work/cores1.a" "$work/cores0.b" "$work/cores1.b" >>"$work/cpu.txt" || true
    # Steal: time the hypervisor gave this VM's vCPUs to others, a share of all the CPU time of
    # the run (a slow run on an unchanged binary is often the host's).
    echo "$steal0 $(cpu_jiffies)" | awk '{d = $4 - $2; printf "host_steal_pct %.2f\n", (d > 0 ? ($3 - $1) * 100 / d : 0)}' >>"$work/cpu.txt"
  fi
  if [ $rc_c != 0 ] || ! $py "$work/pt.py" parse "$work/client.out" >"$work/fields.txt"; then
    echo "  $name: failed (client exit $rc_c, server exit $rc_s):"; tail -3 "$work/client.out" | sed 's/^/    /'
    return 1
  fi
}
droce_section() {
  echo "== $section: perftest, server on host A, client on host B"
  perftest lat "ib_write_lat 64 B" ib_write_lat -s 64 -n "$n_lat"
  perftest lat "ib_write_lat 4 KiB" ib_write_lat -s 4096 -n "$n_lat"
  perftest lat "ib_send_lat 64 B" ib_send_lat -s 64 -n "$n_lat"
  perftest lat "ib_send_lat 4 KiB" ib_send_lat -s 4096 -n "$n_lat"
  # Completion events (-e: the client blocks on its completion channel, as sockperf's ping-pong
  # blocks in recv): three wake-ups a half round trip (the sender's droced, the receiver's, the
  # receiving client) against the kernel's one.
  perftest lat "ib_send_lat 64 B, events (-e)" ib_send_lat -s 64 -e -n "$n_lat"
  perftest lat "ib_read_lat 64 B (a whole READ)" ib_read_lat -s 64 -n "$n_lat"
  perftest lat "ib_read_lat 4 KiB (a whole READ)" ib_read_lat -s 4096 -n "$n_lat"
  # -n is per QP and must be a multiple of perftest's CQ moderation (100): otherwise each QP's
  # last completion counts 100, perftest reaches its total while some QPs still wait, and stops
  # polling them (seen with -q 64 -n 1562: a stall until the timeout).
  # -N: no peak bandwidth, which perftest computes in time quadratic in the iterations when each
  # QP has at most 20000 of them (2 s of a spinning client after 64 QPs' 0.3 s transfer).
  local q
  perftest_median "$reps" bw "ib_write_bw 64 B, 1 QP" ib_write_bw -s 64 -q 1 -N --report_gbits -n "$n_bw"
  for q in 8 64; do
    perftest bw "ib_write_bw 64 B, $q QP" ib_write_bw -s 64 -q "$q" -N --report_gbits -n $(((n_bw / q + 99) / 100 * 100))
  done
  perftest_median "$reps" bw "ib_write_bw 64 KiB" ib_write_bw -s 65536 -N --report_gbits -n "$n_big"
  perftest bw "ib_read_bw 64 KiB" ib_read_bw -s 65536 -N --report_gbits -n "$n_big"
}
# cpu_jiffies: "STEAL TOTAL" of all CPUs from /proc/stat (user .. steal).
cpu_jiffies() { awk '$1 == "cpu" {t = 0; for (i = 2; i <= 9; i++) t += $i; print $9, t; exit}' /proc/stat; }
# cpu_of PID: its threads' run time, ns (0 once it is gone: a daemon that died mid-run must not
# end the script under pipefail).
cpu_of() { { cat /proc/"$1"/task/*/schedstat 2>/dev/null || :; } | awk '{s += $1} END {printf "%.0f", s}'; }

start_pair() {
  DROCE_PAIR_LINK=$1 droced_pair_start build/release/apps "$work/hosts" --mtu 9000 "${droced_args[@]}" \
    >/dev/null 2>"$work/pair.err"
}
if [ "$link" = auto ]; then
  if start_pair shm; then link=shm why="droced accepts droce_shm"
  else droced_pair_stop; link=memif why="droced refused droce_shm: $(grep -m1 -i 'error\|unknown\|cannot' "$work/pair.err" || echo '?')"
    start_pair memif
  fi
else
  why="--link $link"; start_pair "$link"
fi || { cat "$work/pair.err" >&2; exit 1; }
echo "== link between the droce hosts: $link ($why)"
section="droce $link"
exec_a=(build/release/apps/droce exec --run-dir "$work/hosts/a" --)
exec_b=(build/release/apps/droce exec --run-dir "$work/hosts/b" --)
dpid_a=$DROCE_A_PID dpid_b=$DROCE_B_PID sock_a=$DROCE_A_SOCK sock_b=$DROCE_B_SOCK
droce_section

echo "== an idle droced (5 s)"
# From a second after the last perftest exited: droced's teardown of its client (QPs, MRs, the
# shared rings) is the client's cost, not idleness (one run read 0.53 % when sampling from the
# moment perftest exited, against 0.07-0.2 % in the others).
sleep 1
a0=$(cpu_of "$dpid_a") b0=$(cpu_of "$dpid_b")
sleep 5
a1=$(cpu_of "$dpid_a") b1=$(cpu_of "$dpid_b")
put idle "droced A" cpu_percent "$(awk -v d=$((a1 - a0)) 'BEGIN {printf "%.3f", d / 1e9 * 100 / 5}')"
put idle "droced B" cpu_percent "$(awk -v d=$((b1 - b0)) 'BEGIN {printf "%.3f", d / 1e9 * 100 / 5}')"
mode=$(build/release/apps/droce cores --socket "$DROCE_A_SOCK" | awk 'NR == 2 {print $3}') || mode=unknown
[ ${#droced_args[@]} = 0 ] || mode="$mode (droced ${droced_args[*]})"
# What the port's engines were given (droce_shm: no ICRC on the link by default).
offloads=$(build/release/apps/droce ports --json --socket "$DROCE_A_SOCK" |
  $py -c 'import json, sys; print(json.load(sys.stdin)[0].get("offloads", "?"))') || offloads=unknown
droced_pair_stop

# ---- optional: two network namespaces on a veth pair ------------------------------------------
# The same runs over net_af_packet and net_af_xdp, droce's paths to a real NIC shared with the
# kernel (droced --netdev: the kernel keeps the veth and its addresses, droce takes RoCEv2 for them;
# on af_xdp through droce's XDP program), and the kernel's own TCP/UDP over the same veth (va/vb,
# 10.79.0.1 and .2), which also carries perftest's TCP exchange. af_xdp needs an MTU that fits a
# page (3000). The second veth pair (ca/cb, 10.79.2.1 and .2) is kept for --port runs by hand.
# These addresses exist only in these namespaces.
netns_up() {
  nsa=droce-vsk-a-$$ nsb=droce-vsk-b-$$
  netns_add "$nsa" "$nsb" && veth_add "$nsa" va "$nsb" vb && veth_add "$nsa" ca "$nsb" cb &&
    link_up "$nsa" va --mtu 9000 10.79.0.1/24 && link_up "$nsb" vb --mtu 9000 10.79.0.2/24 &&
    link_up "$nsa" ca 10.79.2.1/24 && link_up "$nsb" cb 10.79.2.2/24
}
droced_up() {  # droced_up PMD: one droced per namespace on va / vb
  local side ns dev st
  if [ "$1" = af_xdp ]; then
    # Both ends first: veth refuses an XDP program while its peer's MTU is larger than a page.
    link_up "$nsa" va --mtu 3000 && link_up "$nsb" vb --mtu 3000 || return 1
  fi
  for side in a b; do
    if [ $side = a ]; then ns=$nsa dev=va; else ns=$nsb dev=vb; fi
    rm -rf "$work/ns$side"
    st=0
    droced_start "$ns" "$work/ns$side" "$work/ns$side-$1.log" build/release/apps/droced --netdev "$dev" --link "$1" \
      --memory 256 --mbufs 8192 "${droced_args[@]}" || st=$?
    if [ $side = a ]; then dpid_a=$DROCED_PID; else dpid_b=$DROCED_PID; fi
    [ $st = 0 ] || { tail -5 "$work/ns$side-$1.log" >&2; return 1; }
  done
}
droced_down() {
  droced_stop "$dpid_a" "$dpid_b" || true
  dpid_a='' dpid_b=''
}
# The PMD's own ceiling on this veth, before droce does anything: DPDK's testpmd sends frames
# flat out through net_PMD on vb (txonly) to a testpmd on va that only counts them (rxonly), each
# forwarding on its own vCPU, as the two droced would. No RoCE, no ACKs, no client spinning beside
# them (perftest's does, on one of this VM's two vCPUs): what droce's rate over this PMD can at most
# be. Twice: 64 B frames (the ceiling of ib_write_bw 64 B, in frames/s) and the largest frame droce
# sends over the PMD (the ceiling of ib_write_bw 64 KiB, in Gbit/s; each 64 KiB message is that
# many frames, one skb each, both ways through the kernel). The median of the receiver's
# per-second rates (not the first two, nor the last, partly idle).
pmd_floor() {  # pmd_floor PMD FRAME_BYTES NAME (droced down, the veth's MTU as droced_up leaves it)
  local pmd=$1 frame=$2 name=$3 rx tx dev eal=(--no-huge --no-shconf -m 256 --no-pci) st=0 rate
  local devx='' mbuf=()
  command -v dpdk-testpmd >/dev/null || { put bw "$name" failed 1; return; }
  # As droced opens the PMD (net/ethdev_link.cc): af_packet with 4608-byte ring frames, af_xdp
  # with mbufs that fit its page-sized UMEM frames. --mbuf-size must come before --txpkts.
  if [ "$pmd" = af_packet ]; then devx=,framesz=4608,blocksz=36864 mbuf=(--mbuf-size=4800); fi
  if [ "$pmd" = af_xdp ]; then mbuf=(--mbuf-size=3712); fi
  rx=$work/testpmd-rx-$pmd-$frame.txt tx=$work/testpmd-tx-$pmd-$frame.txt
  dev=net_${pmd}0,iface=va$devx
  timeout 16 "${srv_ns[@]}" dpdk-testpmd "${eal[@]}" -l 0,1 --main-lcore 0 --vdev="$dev" -- "${mbuf[@]}" \
    --forward-mode=rxonly --stats-period=1 --total-num-mbufs=8192 -a >"$rx" 2>&1 &
  local rpid=$!
  sleep 3
  dev=net_${pmd}1,iface=vb$devx
  timeout 10 "${cli_ns[@]}" dpdk-testpmd "${eal[@]}" -l 0,1 --main-lcore 1 --vdev="$dev" -- "${mbuf[@]}" \
    --forward-mode=txonly --txpkts="$frame" --stats-period=1 --total-num-mbufs=8192 -a >"$tx" 2>&1 || st=$?
  wait "$rpid" 2>/dev/null || true
  # timeout ends both (124): what counts is that the receiver printed rates.
  rate=$(awk '/Rx-pps:/ { print $2 }' "$rx" | tail -n +3 | head -n -1 | sort -n |
         awk '{ v[n++] = $1 } END { if (n < 2) exit 1; print v[int((n - 1) / 2)] / 1e6 }') || {
    put bw "$name" failed 1
    echo "  testpmd on net_$pmd, $frame B: failed (exit $st): $(grep -m1 -i -E 'cause|give up' "$rx" "$tx")"; return; }
  put bw "$name" mpps "$rate"
  put bw "$name" gbps "$(awk -v r="$rate" -v f="$frame" 'BEGIN { printf "%.2f", r * f * 8 / 1e3 }')"
}
if [ "$netns" = 1 ]; then
  srv_ns=(ip netns exec "droce-vsk-a-$$") cli_ns=(ip netns exec "droce-vsk-b-$$") srv_netns=droce-vsk-a-$$
  dpid_a='' dpid_b=''
  if netns_up; then
    section="kernel veth (netns)" srv_ip=10.79.0.1
    kernel_section
    exec_a=("${srv_ns[@]}" build/release/apps/droce exec --run-dir "$work/nsa" --)
    sock_a=$work/nsa/droce0.sock sock_b=$work/nsb/droce0.sock
    exec_b=("${cli_ns[@]}" build/release/apps/droce exec --run-dir "$work/nsb" --)
    srv_ip=10.79.0.1  # perftest's TCP exchange, over the veth droced shares with the kernel
    # af_packet and af_xdp run at a tenth of droce_shm's rates: the same-host counts would take
    # minutes and brush perftest's 60 s timeout.
    [ "$quick" = 1 ] || { n_bw=1000000; n_big=40000; }
    # packet: droce's own packet socket with UDP GSO both ways (net/packet_link.h); no testpmd
    # floor for it (no PMD).
    for pmd in af_packet packet af_xdp; do
      section="droce $pmd veth (netns)"
      echo "== droce over net_$pmd on the veth"
      if droced_up "$pmd"; then
        # Without droce's filter the receiving kernel segments and takes in every RoCE frame a
        # second time (tens of percent of the rates): say so beside the numbers it skews.
        for ks in "$sock_a" "$sock_b"; do
          kf=$(build/release/apps/droce ports --json --socket "$ks" |
               python3 -c 'import json, sys; print(json.load(sys.stdin)[0].get("kernel_filter", "?"))' 2>/dev/null) ||
            kf='?'
          if [ "$kf" = none ]; then
            echo "  WARNING: these $pmd numbers are without droce's filter ($ks: kernel_filter none)"
          fi
        done
        droce_section
        # The kernel's own TCP on the veth as droced leaves it: with droce's XDP program on it
        # (af_xdp) a veth sends without segmentation offload, one skb per MTU-sized frame, as
        # droce does; the like-for-like figure for droce's 64 KiB rate.
        iperf3_stream "kernel TCP stream on the shared veth (iperf3)"
      else
        put lat "droced on net_$pmd" failed 1
      fi
      droced_down
      if [ "$pmd" != packet ]; then
        pmd_floor "$pmd" 64 "testpmd 64 B on the veth (the PMD's own rate)"
        # The frames of droce's 64 KiB WRITE on the PMD: a middle packet of the path MTU (2048 on
        # af_xdp, whose veth carries 3000; 4096 on af_packet, whose ring frames carry 4524) and its
        # 58 bytes of Ethernet, IP, UDP, BTH and ICRC.
        big=2106; [ "$pmd" = af_packet ] && big=4154
        pmd_floor "$pmd" "$big" "testpmd in a 64 KiB WRITE's frames on the veth (the PMD's own rate)"
      fi
    done
  else
    section="kernel veth (netns)"
    put lat "network namespaces" failed 1; echo "== --netns: could not set up the namespaces"
  fi
  droced_down
  netns_del "$nsa" "$nsb"; nsa='' nsb=''
fi

# ---- report: table, JSON, PNG -----------------------------------------------------------------
mkdir -p "$out"
base=$out/vs_kernel-$(date +%Y%m%d-%H%M%S)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit (with uncommitted changes)"
versions=$(dpkg-query -W -f='${Package} ${Version}, ' sockperf iperf3 perftest 2>/dev/null || true)
$py - "$results" "$base" "$link" "$commit" "$mode" "$quick" "${versions%, }" "$load" \
  "$(date -u -r build/release/apps/droced +%Y-%m-%dT%H:%M:%SZ)" "$offloads" "$idle_states" <<'PY'
import json, os, platform, sys, time
path, base, link, commit, mode, quick, versions, load, built, offloads, idle_states = sys.argv[1:12]
res = {}
for line in open(path):
    sec, kind, name, field, value = line.rstrip("\n").split("\t")
    r = res.setdefault(sec, {}).setdefault(name, {"kind": kind})
    try:
        r[field] = float(value)
    except ValueError:
        r[field] = None
who = ["droced_a", "droced_b", "perftest_server", "perftest_client"]
for rows in res.values():  # repeated runs: rep_KEY_I fields into a list, reps_KEY
    for r in rows.values():
        for k in sorted((k for k in r if k.startswith("rep_")), key=lambda k: int(k.rsplit("_", 1)[1])):
            r.setdefault("reps_" + k[4:].rsplit("_", 1)[0], []).append(r.pop(k))
def reps(r, key):
    v = r.get("reps_" + key)
    return f"  (median of {len(v)}: " + " ".join(f"{x:.3f}" for x in v) + ")" if v else ""
for rows in res.values():  # the watcher's CPU ns over the transfer, per message
    for r in rows.values():
        for k in who:
            if r.get("cpu_" + k) is not None and r.get("iters"):
                r["cpu_us_per_msg_" + k] = round(r.pop("cpu_" + k) / 1e3 / r["iters"], 4)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
machine = {"nproc": os.cpu_count(), "cpu": cpu, "kernel": platform.release(), "droce_commit": commit, "droced_built": built,
           "link": link, "droced_mode": mode, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "quick": quick == "1", "tools": versions, "loadavg_before": load, "link_offloads": offloads,
           "cpu_idle_states": idle_states}
json.dump({"machine": machine, "results": res}, open(base + ".json", "w"), indent=1)

def f(r, k, fmt="{:.2f}"):
    return "failed" if "failed" in r else ("-" if r.get(k) is None else fmt.format(r[k]))
print(f"\n{cpu}, {machine['nproc']} CPUs, kernel {machine['kernel']}; droce {commit} (droced built {built}), {mode} mode")
busy = float(load.split()[0]) > 0.75 * os.cpu_count()
print(f"load average before the run: {load}" + (" (others were using the CPUs: expect skewed figures)" if busy else ""))
print(f"CPU idle states: {idle_states}")
w = max([30] + [len(s) + len(n) + 2 for s, rows in res.items() for n in rows])
print(f"\n{'latency, us (half round trip)':{w}} {'typical':>8} {'p99':>8} {'min':>8}")
for s, rows in res.items():
    for n, r in rows.items():
        if r["kind"] == "lat":
            print(f"{s + ': ' + n:{w}} {f(r, 'typical'):>8} {f(r, 'p99'):>8} {f(r, 'min'):>8}")
print(f"\n{'throughput':{w}} {'Mmsg/s':>8} {'Gbit/s':>8}   CPU us/msg: droced A + B + perftest server + client = total")
for s, rows in res.items():
    for n, r in rows.items():
        if r["kind"] == "bw":
            c = [r.get("cpu_us_per_msg_" + k) for k in who]
            cs = "" if None in c or "failed" in r else " + ".join(f"{x:.3f}" for x in c) + f" = {sum(c):.3f}"
            print(f"{s + ': ' + n:{w}} {f(r, 'mpps', '{:.3f}'):>8} {f(r, 'gbps'):>8}   {cs}{reps(r, 'mpps')}")
for s, rows in res.items():
    for n, r in rows.items():
        if r["kind"] == "eng":
            print(f"{s + ': ' + n:{w}} {f(r, 'mpps', '{:.3f}'):>8} {f(r, 'gbps'):>8}   (droce_engine_bench, one core){reps(r, 'mpps')}")
for s, rows in res.items():
    for n, r in rows.items():
        if r["kind"] == "idle":
            print(f"idle {n} ({s}): {f(r, 'cpu_percent', '{:.2f}')} % of one CPU")

# Issue #13's goals, from the figures of this run.
def val(sec, name, key):
    r = res.get(sec, {}).get(name, {})
    return None if "failed" in r else r.get(key)
dsec = f"droce {link}"
goals = []
lat, tcp = val(dsec, "ib_write_lat 64 B", "typical"), val("kernel loopback", "TCP ping-pong 64 B (sockperf)", "typical")
p99 = val(dsec, "ib_write_lat 64 B", "p99")
rate, erate = val(dsec, "ib_write_bw 64 B, 1 QP", "mpps"), val("engine alone", "WRITE 64 B", "mpps")
big, ebig = val(dsec, "ib_write_bw 64 KiB", "gbps"), val("engine alone", "WRITE 64 KiB", "gbps")
idle = [val(dsec, d, "cpu_percent") for d in ("droced A", "droced B")]
def goal(text, x, limit, higher_is_better):
    if x is None:
        goals.append(f"  {text}: not measured")
    else:
        ok = x >= limit if higher_is_better else x <= limit
        goals.append(f"  {text}: {x:.2f} ({'met' if ok else 'NOT met'}; goal {'>=' if higher_is_better else '<='} {limit})")
goal("ib_write_lat 64 B typical / TCP ping-pong typical", lat / tcp if lat and tcp else None, 2, False)
goal("ib_write_lat 64 B p99 / typical", p99 / lat if p99 and lat else None, 5, False)
goal("ib_write_bw 64 B 1 QP / engine WRITE 64 B rate", rate / erate if rate and erate else None, 0.5, True)
goal("ib_write_bw 64 KiB / engine WRITE 64 KiB bandwidth", big / ebig if big and ebig else None, 0.8, True)
if "icrc" in offloads:
    # The link carries no ICRC, so droce's figures above skip work the engine bench does; the
    # same ratios against the engine without the ICRC show droced's own overhead.
    nrate, nbig = val("engine alone", "WRITE 64 B, no ICRC", "mpps"), val("engine alone", "WRITE 64 KiB, no ICRC", "gbps")
    goals.append(f"  (the link carries no ICRC: {offloads}; like for like, against the engine without it:"
                 f" 64 B {rate / nrate if rate and nrate else float('nan'):.2f},"
                 f" 64 KiB {big / nbig if big and nbig else float('nan'):.2f})")
goal("idle droced, % of a CPU (the busier of the two)", max(idle) if None not in idle else None, 0.5, False)
print("\nissue #13's goals, from this run:")
print("\n".join(goals))

# Issue #35's goals on the veth (--netns), against the kernel measured on that veth in this run,
# and beside them what the PMD itself moves there (testpmd), the ceiling no stack over it passes.
ksec = "kernel veth (netns)"
for pmd in ("af_packet", "packet", "af_xdp"):
    vsec = f"droce {pmd} veth (netns)"
    if vsec not in res:
        continue
    goals = []
    ktcp, kbw = val(ksec, "TCP ping-pong 64 B (sockperf)", "typical"), val(ksec, "TCP stream (iperf3)", "gbps")
    vlat, vp99 = val(vsec, "ib_write_lat 64 B", "typical"), val(vsec, "ib_write_lat 64 B", "p99")
    vev = val(vsec, "ib_send_lat 64 B, events (-e)", "typical")
    vrate, vbig = val(vsec, "ib_write_bw 64 B, 1 QP", "mpps"), val(vsec, "ib_write_bw 64 KiB", "gbps")
    floor = val(vsec, "testpmd 64 B on the veth (the PMD's own rate)", "mpps")
    bigfloor = val(vsec, "testpmd in a 64 KiB WRITE's frames on the veth (the PMD's own rate)", "gbps")
    shared = val(vsec, "kernel TCP stream on the shared veth (iperf3)", "gbps")
    goal("ib_write_lat 64 B typical / the veth's TCP ping-pong", vlat / ktcp if vlat and ktcp else None, 1, False)
    goal("ib_write_lat 64 B p99 / typical", vp99 / vlat if vp99 and vlat else None, 5, False)
    goal("ib_send_lat -e 64 B typical / the veth's TCP ping-pong", vev / ktcp if vev and ktcp else None, 2, False)
    goal("ib_write_bw 64 B 1 QP, M msg/s", vrate, 0.6, True)
    goal("ib_write_bw 64 KiB / the veth's iperf3 TCP", vbig / kbw if vbig and kbw else None, 0.6, True)
    print(f"\nissue #35's goals over {'droce_packet (--link packet)' if pmd == 'packet' else 'net_' + pmd}, from this run:")
    print("\n".join(goals))
    if floor:
        print(f"  (testpmd alone moves {floor:.3f} M 64 B frames/s over net_{pmd} on this veth: "
              f"ib_write_bw 64 B is {vrate / floor if vrate else float('nan'):.2f} of the PMD's own rate)")
    if bigfloor and kbw:
        print(f"  (testpmd alone moves {bigfloor:.2f} Gbit/s in a 64 KiB WRITE's frames over net_{pmd} on this veth, "
              f"{bigfloor / kbw:.2f} of iperf3: ib_write_bw 64 KiB is "
              f"{vbig / bigfloor if vbig else float('nan'):.2f} of the PMD's own rate)")
    if shared and vbig:
        print(f"  (the kernel's TCP on the veth as droced leaves it: {shared:.2f} Gbit/s; "
              f"ib_write_bw 64 KiB is {vbig / shared:.2f} of it)")

print(f"\nJSON: {base}.json")
try:
    import matplotlib
except ImportError:
    print("PNG:  not drawn: no matplotlib in /usr/bin/python3 (apt-get install python3-matplotlib)")
    sys.exit(0)
matplotlib.use("Agg")
import matplotlib.pyplot as plt, matplotlib.ticker
from matplotlib.patches import Patch
fig = plt.figure(figsize=(15, 6))
ax, aq, ab = (fig.add_subplot(g) for g in fig.add_gridspec(1, 3, width_ratios=[2.4, 1, 1]))
colour = lambda s: "tab:gray" if s.startswith("kernel loop") else "silver" if s.startswith("kernel") else \
    "tab:blue" if "netns" not in s else "tab:green" if "af_xdp" in s else "tab:orange" if "af_packet" in s else "tab:red"
short = lambda s, n: ("kernel " if s.startswith("kernel") else "droce ") + \
    ("xdp " if "af_xdp" in s else "pkt " if "af_packet" in s else "gso " if "packet" in s else "veth " if "netns" in s else "") + \
    n.replace(" (sockperf)", "").replace(" (a whole READ)", "*").replace("ping-pong ", "").replace(", events (-e)", " -e")
lat = [(s, n, r) for s, rows in res.items() for n, r in rows.items() if r["kind"] == "lat" and r.get("typical")]
x = range(len(lat))
ax.bar(x, [r["typical"] for *_, r in lat], 0.7, color=[colour(s) for s, *_ in lat])
ax.scatter(x, [r.get("p99") or 0 for *_, r in lat], marker="_", s=250, color="black", zorder=3)
for i, (*_, r) in enumerate(lat):
    ax.text(i, r["typical"], f"{r['typical']:.0f}", ha="center", va="bottom", fontsize=7)
ax.set_xticks(list(x), [short(s, n) for s, n, _ in lat], rotation=40, ha="right", fontsize=8)
ax.set_yscale("log")  # a p99 can be a hundred times the typical
# Bars start at 1 us, so their heights compare; the room above the tallest p99 is the legend's.
ax.set_ylim(1, 8 * max([r.get("p99") or 0 for *_, r in lat] + [r["typical"] for *_, r in lat] + [10]))
ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
ax.set_ylabel("microseconds (log), half round trip (* ib_read_lat: whole READ)")
ax.set_title("latency: bar typical (median), black line p99")
ax.legend(handles=[Patch(color=colour(s), label=s) for s in res if any(r.get("typical") for r in res[s].values())], fontsize=8, ncol=2, loc="upper left")
for s, rows in res.items():
    pts = [(int(n.split(", ")[1].split()[0]), r["mpps"]) for n, r in rows.items() if n.startswith("ib_write_bw 64 B") and r.get("mpps")]
    if pts:
        aq.plot(*zip(*pts), marker="o", color=colour(s), label=s)
        for q, m in pts:
            aq.annotate(f"{m:.2f}", (q, m), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=7)
aq.set_xscale("log", base=2); aq.set_xticks([1, 8, 64], ["1", "8", "64"]); aq.set_ylim(bottom=0)
aq.set_xlabel("QPs"); aq.set_ylabel("million messages/s"); aq.set_title("ib_write_bw 64 B: message rate")
aq.legend(fontsize=7) if aq.lines else None
bw = [(s, n, r) for s, rows in res.items() for n, r in rows.items() if r["kind"] == "bw" and "64 B" not in n and r.get("gbps")]
ab.barh(range(len(bw)), [r["gbps"] for *_, r in bw], color=[colour(s) for s, *_ in bw])
ab.set_yticks(range(len(bw)), [short(s, n).replace(" (iperf3)", "\n(iperf3)") for s, n, _ in bw], fontsize=8)
for i, (*_, r) in enumerate(bw):
    ab.text(r["gbps"], i, f" {r['gbps']:.1f}", va="center", fontsize=7)
ab.invert_yaxis(); ab.set_xlabel("Gbit/s"); ab.set_title("64 KiB bandwidth vs iperf3")
fig.suptitle(f"droce {commit} over {link} vs the Linux kernel: {cpu}, {machine['nproc']} CPUs, kernel {machine['kernel']}", fontsize=9)
fig.tight_layout()
fig.savefig(base + ".png", dpi=100)
print(f"PNG:  {base}.png")
PY
