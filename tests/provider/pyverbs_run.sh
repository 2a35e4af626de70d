#!/usr/bin/env bash
# rdma-core's pyverbs test suite (Debian's python3-pyverbs; the tests ship compressed under
# /usr/share/doc/rdma-core/tests) against droce0 on a droced this script starts, one test per
# process so a test that hangs cannot stop the others: about a minute here (the meson test
# provider_pyverbs runs it with PYVERBS_NETNS=1). docs/provider.md has the latest results.
#
#   pyverbs_run.sh MODULE PRELOAD DROCED DROCED_TREE PAIR_LIB [FILTER_REGEX]
#
# Arguments as verbs_programs_test.sh's (the first five). Prints one line per test ("NAME OK",
# "NAME SKIP reason", "NAME FAIL last error line", "NAME TIMEOUT") and a summary; exits 1 when a
# test failed or timed out, 77 without root, unshare or pyverbs. PYVERBS_TIMEOUT (default 60) is
# the limit per test.
#
# PYVERBS_NETNS=1: run in a private network namespace instead, droced on net_af_packet over a veth
# whose kernel end owns droced's address, and a tmpfs over /sys/class naming that netdev under
# infiniband/droce0/device/net: pyverbs finds an RDMA device's IP only through the kernel's sysfs
# and `ip addr`, so its rdma_cm tests (test_rdmacm) run only this way.
set -euo pipefail

if [ $# -lt 5 ]; then
  echo "usage: $0 MODULE PRELOAD DROCED DROCED_TREE PAIR_LIB [FILTER_REGEX]" >&2
  exit 2
fi
module=$(realpath "$1")
preload=$(realpath "$2")
droced=$(realpath "$3")
droced_tree=$(realpath "$4")
pair_lib=$(realpath "$5")
filter=${6:-.}
limit=${PYVERBS_TIMEOUT:-60}

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (a private /dev with /dev/infiniband/uverbs0)"
command -v unshare >/dev/null || skip "unshare not installed"
/usr/bin/python3 -c 'import pyverbs' 2>/dev/null || skip "python3-pyverbs not installed"
[ -d /usr/share/doc/rdma-core/tests ] || skip "/usr/share/doc/rdma-core/tests missing (python3-pyverbs)"

if [ "${DROCE_PYVERBS_INNER:-}" != 1 ]; then
  export DROCE_PYVERBS_INNER=1
  if [ "${PYVERBS_NETNS:-}" = 1 ]; then exec unshare --net --mount --propagation private "$0" "$@"; fi
  exec unshare --mount --propagation private "$0" "$@"
fi

tmp=$(mktemp -d /tmp/droce-pyverbs.XXXXXX)
# shellcheck source=scripts/lib/droced-pair.sh
. "$pair_lib"  # and scripts/lib/netns.sh
unmount_dev() {
  umount -R -l /dev 2>/dev/null || true
  umount -R -l "$tmp/dev" 2>/dev/null || true
}
on_exit rm -rf "$tmp"
on_exit unmount_dev
on_exit droced_pair_stop

if [ "${PYVERBS_NETNS:-}" = 1 ]; then
  # The namespace unshare made for this script: the veth and droced's host live in it.
  link_up "" lo
  veth_add "" pv0 "" pv1
  link_up "" pv1
  link_up "" pv0 10.81.0.1/24
  droced_spawn "" "$tmp/host" "$tmp/droced.log" "$droced" --port net_af_packet_pv,iface=pv0 --address 10.81.0.1 \
    --memory 256 --mbufs 8192 --dev-node no
  on_exit droced_stop "$DROCED_PID"
  wait_unix_socket "$tmp/host/droce0.sock" "$DROCED_PID" || { cat "$tmp/droced.log"; exit 1; }
  "$droced_tree" --socket "$tmp/host/droce0.sock" --root "$tmp/sys"
  mount -t tmpfs pyverbs-class /sys/class
  mkdir -p /sys/class/infiniband/droce0/device/net/pv0
else
  droced_pair_start "$(dirname "$droced")" "$tmp/hosts" --max-sleep-us 100 --dev-node no
  "$droced_tree" --socket "$DROCE_A_SOCK" --root "$tmp/sys"
fi

cp -r /usr/share/doc/rdma-core/tests "$tmp/tests"
gunzip -q "$tmp"/tests/*.gz

mkdir -p "$tmp/dev"
mount -t tmpfs -o mode=0755 droce-dev "$tmp/dev"
for n in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9; do
  IFS=: read -r name major minor <<<"$n"
  mknod -m 0666 "$tmp/dev/$name" c "$major" "$minor"
done
mkdir "$tmp/dev/infiniband" "$tmp/dev/shm"
ln -s /proc/self/fd "$tmp/dev/fd"  # process substitution and /dev/stdin need it
mknod -m 0666 "$tmp/dev/infiniband/uverbs0" c 1 7
mount -t tmpfs -o mode=1777 droce-shm "$tmp/dev/shm"
mount --rbind "$tmp/dev" /dev

# librdmacm's /dev/infiniband/rdma_cm (test_rdmacm, test_cq_events' CM cases): droce's CM library,
# built next to the completion-channel one.
rdmacm=$(dirname "$preload")/../rdmacm/libdroce-rdmacm.so
[ -f "$rdmacm" ] && preload=$(realpath "$rdmacm"):$preload
export RDMAV_DRIVERS=${module%-rdmav*.so} LD_PRELOAD=$preload SYSFS_PATH=$tmp/sys
cd "$tmp/tests"
run() { /usr/bin/python3 run_tests.py --dev droce0 --gid 1 "$@"; }
mapfile -t tests < <(run --list-tests 2>/dev/null | grep -E "$filter")
ok=0 skipped=0 failed=0
for t in "${tests[@]}"; do
  rc=0
  timeout "$limit" /usr/bin/python3 run_tests.py --dev droce0 --gid 1 -v "$t" >"$tmp/out" 2>&1 || rc=$?
  if [ $rc -eq 124 ]; then
    echo "$t TIMEOUT"; failed=$((failed + 1))
  elif grep -q "skipped" "$tmp/out" && [ $rc -eq 0 ]; then
    echo "$t SKIP $(grep -o "skipped .*" "$tmp/out" | head -1)"; skipped=$((skipped + 1))
  elif [ $rc -eq 0 ]; then
    echo "$t OK"; ok=$((ok + 1))
  else
    echo "$t FAIL $(grep -E "Error|error" "$tmp/out" | tail -1 | cut -c1-160)"; failed=$((failed + 1))
    # The whole output of a failure, indented, so that a log shows why.
    sed 's/^/    /' "$tmp/out" | tail -40
  fi
done
echo "pyverbs: ${#tests[@]} tests: $ok passed, $skipped skipped, $failed failed"
[ $failed -eq 0 ]
