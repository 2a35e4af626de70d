#!/usr/bin/env bash
# Unmodified verbs programs (Debian's ibverbs-utils and perftest) over droce: two droced hosts
# joined by net_memif, the provider module, and the completion-channel preload.
#
#   verbs_programs_test.sh MODULE PRELOAD DROCED DROCED_TREE PAIR_LIB API_PROBE EXT_PROBE
#
# MODULE is the built libdroce-rdmav<PABI>.so, PRELOAD libdroce-preload.so, DROCED the droced
# binary, DROCED_TREE the tests' droced_tree, PAIR_LIB scripts/lib/droced-pair.sh, API_PROBE the
# tests' verbs_api_probe, EXT_PROBE their verbs_ext_probe. As root, in a private mount namespace whose /dev holds the char nodes
# libibverbs opens (/dev/infiniband/<uverbs>, a compiled-in path; see docs/discovery.md), it
# starts the two droced (each writes its sysfs tree) and runs, server on host A and client on
# host B: the four pingpongs with and without -e (completion channels), all with -c (data
# check); rc_pingpong with the ibv_wr_* API (-N), at 1 and 65536 bytes, with completion
# timestamps (-t), with its buffer in device memory (-j), with on-demand paging (-o, -o -P
# and implicit -O); RC and UD pingpongs
# with both processes on host A; ibv_xsrq_pingpong (XRC) between the hosts, with -e, and on one
# host; an ib_write_bw whose server is killed mid-run (the client must
# fail with a transport retry error, droced A must keep serving the runs after it); perftest's
# send/write/read/atomic bandwidth and latency tools over RC (one with -a), ib_send_bw over UD
# and UC, bidirectional, ib_write_bw with 4 QPs, and -e. Then verbs_ext_probe (timestamps,
# parent domains, device memory, on-demand paging with droced A's resident memory under a 1 GiB
# ODP region) and, last, verbs_api_probe with both hosts in
# one tree written by droced_tree (droce0 and droce1): the API's corners, async events, and the
# device-fatal event when it kills droced B.
# Each check asserts exit statuses and what the program prints. Skips (77) without root,
# unshare, or ibverbs-utils; the perftest part is skipped alone when perftest is missing.
set -euo pipefail

if [ $# -ne 7 ]; then
  echo "usage: $0 MODULE PRELOAD DROCED DROCED_TREE PAIR_LIB API_PROBE EXT_PROBE" >&2
  exit 2
fi
module=$(realpath "$1")
preload=$(realpath "$2")
droced=$(realpath "$3")
droced_tree=$(realpath "$4")
pair_lib=$(realpath "$5")
api_probe=$(realpath "$6")
ext_probe=$(realpath "$7")
here=$(dirname "$(realpath "$0")")

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root: /dev/infiniband/uverbs0 must be a char node (mknod) in a private /dev"
command -v unshare >/dev/null || skip "unshare not installed (util-linux)"
command -v ibv_rc_pingpong >/dev/null || skip "ibv_rc_pingpong not installed (Debian package ibverbs-utils)"

if [ "${DROCE_VERBS_TEST_INNER:-}" != 1 ]; then
  export DROCE_VERBS_TEST_INNER=1
  exec unshare --mount --propagation private "$0" "$@"
fi

# ---- inside the private mount namespace ------------------------------------------------------
tmp=$(mktemp -d /tmp/droce-verbs-test.XXXXXX)
fail=0
failed=()
pass() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; failed+=("$*"); }

# shellcheck source=scripts/lib/droced-pair.sh
. "$pair_lib"
cleanup() {
  # `timeout` passes TERM on to the program it runs.
  jobs -p | xargs -r kill -TERM 2>/dev/null || true
  droced_pair_stop
  if mountpoint -q "$tmp/fuse" 2>/dev/null; then  # the ODP stall check's filesystem
    touch "$tmp/fuse-gate"
    umount -l "$tmp/fuse" 2>/dev/null || true
  fi
  umount -R -l /dev 2>/dev/null || true
  umount -R -l "$tmp/dev" 2>/dev/null || true
  rm -rf "$tmp"
  [ "$xrc_file_was_there" = 1 ] || rm -f /tmp/xrc_domain  # ibv_xsrq_pingpong's domain file
}
# ibv_xsrq_pingpong opens its XRC domain through /tmp/xrc_domain (made if missing): ours goes.
xrc_file_was_there=0
[ -e /tmp/xrc_domain ] && xrc_file_was_there=1
trap cleanup EXIT

# droced first, then the private /dev the programs need. Each droced writes its own tree
# (<run-dir>/sys, its device's node named uverbs_droce0); it must not make that node in the real
# /dev (--dev-node no): the programs get theirs in the private one.
droced_pair_start "$(dirname "$droced")" "$tmp/hosts" --max-sleep-us 100 --dev-node no
A=$tmp/hosts/a/sys B=$tmp/hosts/b/sys
for t in "$A" "$B"; do  # droced may write its tree just after its socket appears
  for _ in $(seq 100); do [ -f "$t/class/infiniband_verbs/uverbs_droce0/ibdev" ] && break; sleep 0.05; done
  [ -f "$t/class/infiniband_verbs/uverbs_droce0/ibdev" ] || { echo "FAIL: droced wrote no tree at $t"; exit 1; }
done
# Both hosts in one tree, for verbs_api_probe: B's device is droce1 there (droced_tree writes it).
"$droced_tree" --socket "$DROCE_A_SOCK" --root "$tmp/sysAB" --uverbs uverbs0
"$droced_tree" --socket "$DROCE_B_SOCK" --root "$tmp/sysAB" --name droce1 --uverbs uverbs1

mkdir -p "$tmp/dev"
mount -t tmpfs -o mode=0755 droce-dev "$tmp/dev"
for n in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9; do
  IFS=: read -r name major minor <<<"$n"
  mknod -m 0666 "$tmp/dev/$name" c "$major" "$minor"
done
# FUSE, when the kernel has it: the ODP stall check's filesystem (ext_probe).
[ -c /dev/fuse ] && mknod -m 0666 "$tmp/dev/fuse" c 10 229
mkdir "$tmp/dev/infiniband" "$tmp/dev/shm"
ln -s /proc/self/fd "$tmp/dev/fd"  # process substitution and /dev/stdin need it
for n in uverbs_droce0 uverbs0 uverbs1; do mknod -m 0666 "$tmp/dev/infiniband/$n" c 1 7; done
mount -t tmpfs -o mode=1777 droce-shm "$tmp/dev/shm"
mount --rbind "$tmp/dev" /dev

export RDMAV_DRIVERS=${module%-rdmav*.so}  # libibverbs appends -rdmav<PABI>.so
export LD_PRELOAD=$preload
gid=1  # droced's GID table: 0 the link-local GID, 1 the IPv4-mapped 10.77.0.x
# A TCP port for the programs' own exchange, apart from other tests' (18515 is their default)
# and below the kernel's ephemeral range (32768 up), where a connection's own port may sit.
port=$((10000 + $$ % 20000))

# run_pair NAME SERVER_SYS CLIENT_SYS PROG ARGS...: server and client, each with a 90 s limit.
# Leaves their output in $tmp/NAME.server and $tmp/NAME.client and their statuses in src/crc.
run_pair() {
  local name=$1 ssys=$2 csys=$3
  shift 3
  port=$((port + 1))
  SYSFS_PATH=$ssys timeout 90 "$@" -p "$port" >"$tmp/$name.server" 2>&1 &
  local spid=$!
  src=0
  crc=0
  if ! wait_tcp_listen "" "$port" "$spid"; then
    wait "$spid" || src=$?
    crc=255
    echo "(the server did not listen)" >"$tmp/$name.client"
    return 0
  fi
  SYSFS_PATH=$csys timeout 90 "$@" -p "$port" 127.0.0.1 >"$tmp/$name.client" 2>&1 || crc=$?
  wait "$spid" || src=$?
}

show() {  # the two outputs, for a failure message
  echo "--- server ($src)"; cat "$tmp/$1.server"; echo "--- client ($crc)"; cat "$tmp/$1.client"
}

# ---- the pingpongs ----------------------------------------------------------------------------
pingpong() {  # NAME SERVER_SYS CLIENT_SYS PROG ARGS...
  local name=$1 n=200
  run_pair "$@" -d droce0 -g $gid -n $n -c
  if [ "$src" -eq 0 ] && [ "$crc" -eq 0 ] &&
     grep -q "^$n iters in" "$tmp/$name.server" && grep -q "^$n iters in" "$tmp/$name.client" &&
     ! grep -qi "invalid data\|failed\|couldn't" "$tmp/$name.server" "$tmp/$name.client"; then
    pass "$name: $n iterations, data checked"
  else
    bad "$name"; show "$name"
  fi
}

for pp in rc uc ud srq; do
  pingpong "ibv_${pp}_pingpong" "$A" "$B" "ibv_${pp}_pingpong"
  pingpong "ibv_${pp}_pingpong-e" "$A" "$B" "ibv_${pp}_pingpong" -e
done
pingpong "ibv_rc_pingpong-N (ibv_wr_* API)" "$A" "$B" ibv_rc_pingpong -N
pingpong "ibv_rc_pingpong-s1" "$A" "$B" ibv_rc_pingpong -s 1
pingpong "ibv_rc_pingpong-s65536" "$A" "$B" ibv_rc_pingpong -s 65536
pingpong "ibv_rc_pingpong-t (completion timestamps)" "$A" "$B" ibv_rc_pingpong -t
pingpong "ibv_rc_pingpong-j (device memory)" "$A" "$B" ibv_rc_pingpong -j
# On-demand paging: explicit, explicit with ibv_advise_mr's prefetch, implicit (the whole
# address space; rc_pingpong's -O also prefetches).
pingpong "ibv_rc_pingpong-o (on-demand paging)" "$A" "$B" ibv_rc_pingpong -o
pingpong "ibv_rc_pingpong-oP (ODP, prefetched)" "$A" "$B" ibv_rc_pingpong -o -P
pingpong "ibv_rc_pingpong-O (implicit ODP)" "$A" "$B" ibv_rc_pingpong -O
# Two processes on one droced: the frames loop back inside droced A.
pingpong "ibv_rc_pingpong (both on host A)" "$A" "$A" ibv_rc_pingpong
pingpong "ibv_ud_pingpong (both on host A)" "$A" "$A" ibv_ud_pingpong
# XRC (ibv_xsrq_pingpong: -c is its number of clients, it has no data check): the server's XRC
# send QP names the client's XRC SRQ and the other way round; both open their domain through
# /tmp/xrc_domain, so on one host the two processes share it (ibv_open_xrcd(3)).
xsrq() {  # NAME SERVER_SYS CLIENT_SYS ARGS...
  local name=$1 ssys=$2 csys=$3
  shift 3
  run_pair "$name" "$ssys" "$csys" ibv_xsrq_pingpong -d droce0 -g $gid -n 100 "$@"
  if [ "$src" -eq 0 ] && [ "$crc" -eq 0 ] &&
     grep -q "^success$" "$tmp/$name.server" && grep -q "^success$" "$tmp/$name.client" &&
     ! grep -qi "failed\|couldn't\|error" "$tmp/$name.server" "$tmp/$name.client"; then
    pass "$name: 100 messages each way, success"
  else
    bad "$name"; show "$name"
  fi
}
if command -v ibv_xsrq_pingpong >/dev/null; then
  xsrq "ibv_xsrq_pingpong" "$A" "$B"
  xsrq "ibv_xsrq_pingpong-e" "$A" "$B" -e
  xsrq "ibv_xsrq_pingpong (both on host A, one domain)" "$A" "$A"
fi
# ---- perftest -----------------------------------------------------------------------------------
ext_probe() {
  local rc=0 fuse_pid="" stall=()
  # A filesystem whose reads wait for a gate file (a page whose fault does not end: the probe's
  # odp_stall). Needs /dev/fuse and Debian's python3-fusepy.
  if [ -c /dev/fuse ] && /usr/bin/python3 -c 'import fusepy' 2>/dev/null; then
    mkdir -p "$tmp/fuse"
    /usr/bin/python3 "$here/odp_fuse_gate.py" "$tmp/fuse" "$tmp/fuse-gate" >"$tmp/fuse.log" 2>&1 &
    fuse_pid=$!
    for _ in $(seq 100); do [ -e "$tmp/fuse/slow" ] && break; sleep 0.05; done
    if [ -e "$tmp/fuse/slow" ]; then
      stall=(ODP_STALL_FILE="$tmp/fuse/slow" ODP_STALL_GATE="$tmp/fuse-gate")
    else
      bad "the stalling filesystem did not mount: $(cat "$tmp/fuse.log")"
    fi
  else
    echo "SKIP (part): the ODP stall check needs /dev/fuse and python3-fusepy"
  fi
  SYSFS_PATH=$tmp/sysAB ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
    env "${stall[@]}" timeout 120 "$ext_probe" droce0 droce1 "$DROCE_A_PID" >"$tmp/ext_probe.out" 2>&1 || rc=$?
  if [ -n "$fuse_pid" ]; then
    touch "$tmp/fuse-gate"  # whatever still waits on the filesystem ends
    umount "$tmp/fuse" 2>/dev/null || umount -l "$tmp/fuse" 2>/dev/null || true
    wait "$fuse_pid" 2>/dev/null || true
  fi
  cat "$tmp/ext_probe.out"
  if [ $rc -eq 0 ]; then pass "verbs_ext_probe"; else bad "verbs_ext_probe: status $rc"; fi
  # Its WRITEs into untouched pages of A's ODP region waited for them (droced's fault-in
  # thread brought them in, from the client's pagemap) rather than faulting on A's worker.
  local waits
  waits=$(env -u LD_PRELOAD "$(dirname "$droced")/droce" counters --json --socket "$DROCE_A_SOCK" |
    python3 -c 'import json,sys
def find(o):
    if isinstance(o, dict):
        return sum(v if k == "odp_page_waits" and isinstance(v, int) else find(v) for k, v in o.items())
    if isinstance(o, list):
        return sum(find(v) for v in o)
    return 0
print(find(json.load(sys.stdin)))') || waits="?"
  if [[ $waits =~ ^[0-9]+$ ]] && [ "$waits" -gt 0 ]; then
    pass "ODP: accesses to pages not yet in waited for them off the worker ($waits waits)"
  else
    bad "ODP: no access waited for its pages (odp_page_waits: $waits)"
  fi
}

api_probe() {
  # Last: it kills droced B.
  local rc=0
  # The probe is built like the rest of the tests (ASan in a sanitized build): the preload
  # comes before ASan's runtime in its library list, which ASan accepts when told.
  SYSFS_PATH=$tmp/sysAB ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
    timeout 120 "$api_probe" droce0 droce1 "$DROCE_B_PID" >"$tmp/probe.out" 2>&1 || rc=$?
  cat "$tmp/probe.out"
  if [ $rc -eq 0 ]; then pass "verbs_api_probe"; else bad "verbs_api_probe: status $rc"; fi
}

if ! command -v ib_send_bw >/dev/null; then
  echo "SKIP (part): perftest not installed"
  ext_probe
  api_probe
  exit $fail
fi

# perf NAME ITERS PROG ARGS...: server on A, client on B; both must report a result line with
# ITERS iterations (bandwidth tools: ITERS x QPs) and exit 0.
perf() {
  local name=$1 iters=$2 server_file
  shift 2
  run_pair "$name" "$A" "$B" "$@" -d droce0 -x $gid
  server_file=$tmp/$name.server
  # The READ latency server prints no result of its own (the client measures).
  [ "$1" = ib_read_lat ] && server_file=$tmp/$name.client
  # Every iteration done, on both sides. The times may read "inf": perftest calibrates its clock
  # at start and gives up when the machine is too busy ("Correlation coefficient r^2 ... < 0.9"),
  # which says nothing about the transfer (seen once in CI on ib_send_lat -e).
  if [ "$src" -eq 0 ] && [ "$crc" -eq 0 ] &&
     grep -Eq "^ +[0-9]+ +$iters +([0-9]|inf)" "$server_file" && grep -Eq "^ +[0-9]+ +$iters +([0-9]|inf)" "$tmp/$name.client"; then
    pass "$name"
  else
    bad "$name"; show "$name"
  fi
}

# A server killed mid-run: its droced session ends and its QP with it, so the client's RDMA
# writes are never acknowledged: it must fail with a transport retry error (status 12), and
# droced A must go on serving.
port=$((port + 1))
# Without `timeout`: $! must be the server itself (stdbuf execs it), not a parent it outlives.
SYSFS_PATH=$A stdbuf -oL ib_write_bw -d droce0 -x $gid -D 30 -p $port >"$tmp/kill.server" 2>&1 &
kpid=$!
if wait_tcp_listen "" $port $kpid; then
  SYSFS_PATH=$B timeout 90 stdbuf -oL ib_write_bw -d droce0 -x $gid -D 30 -p $port 127.0.0.1 \
    >"$tmp/kill.client" 2>&1 &
  cpid=$!
  for _ in $(seq 200); do grep -q "#bytes" "$tmp/kill.client" && break; sleep 0.05; done
  sleep 1
  kill -KILL $kpid
  wait $kpid 2>/dev/null || true
  crc=0
  wait $cpid || crc=$?
  if [ $crc -ne 0 ] && [ $crc -ne 124 ] && grep -q "Failed status 12" "$tmp/kill.client"; then
    pass "ib_write_bw with its server killed mid-run: the client failed with a transport retry error"
  else
    bad "killed server: client status $crc"; cat "$tmp/kill.client"
  fi
else
  bad "killed server: the server did not start"; cat "$tmp/kill.server"
fi
kill -0 "$DROCE_A_PID" 2>/dev/null || bad "droced A died after its client was killed"

# A stream of 64 B WRITEs, 1 QP: the two droced share a CPU (both on their lcore's, CPU 0) and,
# each holding frames of the other's in turn, must hand it over rather than spin out a time
# slice. How depends on the worker's scheduling policy (`droce cores`): at SCHED_OTHER by
# yielding (YieldPolicy); at SCHED_RR (the default as root) an idle worker does not yield, it
# blocks and the other's frames wake it (wakeups_by_port). Each daemon must have handed over in
# its policy's way. (Early: latency tests before it may pause yielding for up to 1 s.)
cores() {  # SOCKET EXPR: EXPR (Python, over `c`, the list of `droce cores --json`) for that daemon
  # Without the preload the programs get (an ASan build's droce wants its runtime first).
  env -u LD_PRELOAD "$(dirname "$droced")/droce" cores --json --socket "$1" |
    python3 -c "import json,sys; c=json.load(sys.stdin); print($2)"
}
handovers() {  # "POLICY YIELDS PORT_WAKEUPS" of the daemon at socket $1 (its workers' sums)
  cores "$1" 'c[0]["policy"], sum(w["yields"] for w in c), sum(w["wakeups_by_port"] for w in c)'
}
read -r _ ya0 wa0 <<<"$(handovers "$DROCE_A_SOCK")"
read -r _ yb0 wb0 <<<"$(handovers "$DROCE_B_SOCK")"
perf "ib_write_bw -s 64 stream" 1000000 ib_write_bw -s 64 -n 1000000
read -r pa ya1 wa1 <<<"$(handovers "$DROCE_A_SOCK")"
read -r pb yb1 wb1 <<<"$(handovers "$DROCE_B_SOCK")"
for h in "A $pa $((ya1 - ya0)) $((wa1 - wa0))" "B $pb $((yb1 - yb0)) $((wb1 - wb0))"; do
  read -r host policy y w <<<"$h"
  case $policy in
    other) [ "$y" -gt 0 ] ;;
    rr) [ $((y + w)) -gt 0 ] ;;  # a worker demoted by its budget for a while yields
    *) false ;;
  esac && pass "droced $host ($policy) handed its CPU over in the stream: $y yields, woken by frames $w times" ||
    bad "droced $host ($policy) never handed its CPU over in a 1 QP stream ($y yields, $w wake-ups by frames)"
done

# A ping-pong whose client shares a CPU with both droced (the server on another): droced B
# acknowledges each of the server's WRITEs and, as its client waits for that CPU to post the
# next one, must hold the wake-up that would run droced A for that ACK alone (AckHold), and
# its client's next post must end those holds (ack_holds_paid).
holds_paid() {  # "CPUS PAID" of the daemon at socket $1: its first worker's CPUs, and its holds paid
  cores "$1" 'c[0]["cpus"], sum(w["ack_holds_paid"] for w in c)'
}
read -r cpus_b paid0 <<<"$(holds_paid "$DROCE_B_SOCK")"
other_cpu=$(python3 -c 'import os,sys; c=sorted(os.sched_getaffinity(0)); d=sys.argv[1]; print(next((x for x in c if str(x) != d), ""))' "$cpus_b")
if [[ "$cpus_b" =~ ^[0-9]+$ ]] && [ -n "$other_cpu" ]; then
  port=$((port + 1))
  SYSFS_PATH=$A timeout 90 taskset -c "$other_cpu" ib_write_lat -d droce0 -x $gid -n 2000 -p $port \
    >"$tmp/hold.server" 2>&1 &
  hpid=$!
  hrc=0
  if wait_tcp_listen "" $port $hpid; then
    SYSFS_PATH=$B timeout 90 taskset -c "$cpus_b" ib_write_lat -d droce0 -x $gid -n 2000 -p $port 127.0.0.1 \
      >"$tmp/hold.client" 2>&1 || hrc=$?
  else
    hrc=255
  fi
  wait $hpid || hrc=$((hrc + 1))
  read -r _ paid1 <<<"$(holds_paid "$DROCE_B_SOCK")"
  if [ $hrc -eq 0 ] && [ $((paid1 - paid0)) -gt 0 ]; then
    pass "ib_write_lat, client on droced's CPU $cpus_b: droced B held $((paid1 - paid0)) ACK wake-ups its client's next post ended"
  else
    bad "ib_write_lat, client on droced's CPU $cpus_b: status $hrc, ACK wake-ups held and paid: $((paid1 - paid0))"
    cat "$tmp/hold.server" "$tmp/hold.client"
  fi
else
  echo "note: no held ACKs checked (droced B on CPUs '$cpus_b', no other CPU to put the server on)"
fi

perf "ib_send_bw" 100 ib_send_bw -n 100
perf "ib_send_bw -a" 5 ib_send_bw -a -n 5
perf "ib_write_bw" 100 ib_write_bw -n 100
perf "ib_read_bw" 100 ib_read_bw -n 100
perf "ib_atomic_bw FETCH_AND_ADD" 100 ib_atomic_bw -A FETCH_AND_ADD -n 100
perf "ib_atomic_bw CMP_AND_SWAP" 100 ib_atomic_bw -A CMP_AND_SWAP -n 100
perf "ib_send_lat" 100 ib_send_lat -n 100
perf "ib_write_lat" 100 ib_write_lat -n 100
perf "ib_read_lat" 100 ib_read_lat -n 100
perf "ib_send_bw -c UD" 100 ib_send_bw -c UD -n 100
perf "ib_send_bw -c UC" 100 ib_send_bw -c UC -n 100
perf "ib_send_bw -b" 100 ib_send_bw -b -n 100 -s 4096
perf "ib_write_bw -q 4" 400 ib_write_bw -q 4 -n 100 -s 4096
perf "ib_send_bw -e" 100 ib_send_bw -e -n 100
perf "ib_send_lat -e" 100 ib_send_lat -e -n 100

ext_probe
api_probe
# Meson shows only a log's last lines: say again what failed, so the summary holds it.
if [ $fail -ne 0 ]; then
  echo "${#failed[@]} step(s) failed:"
  printf '  FAIL: %s\n' "${failed[@]}"
fi
exit $fail
