#!/usr/bin/env bash
# The distro's libibverbs finds droce0 through a SysfsTree and droce's provider module, with no
# RDMA kernel module and no RDMA netlink (see docs/discovery.md).
#
#   ibv_discovery_test.sh MODULE SYSFS_TREE_RUN IBV_PROBE
#
# MODULE is the built libdroce-rdmav<PABI>.so. libibverbs looks for the char node at the
# compile-time path /dev/infiniband/<uverbs>, which only root may create; so the test runs in a
# private mount namespace whose /dev is a tmpfs the test fills (as root: mknod; unprivileged,
# in a user namespace: bind mounts of /dev's own nodes), and /etc/libibverbs.d is likewise
# replaced for the .driver-file case. Nothing outside the namespace changes; the namespace's
# mounts end with it. Without root and without user namespaces it skips (exit 77).
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 MODULE SYSFS_TREE_RUN IBV_PROBE" >&2
  exit 2
fi
module=$(realpath "$1")
tree_run=$(realpath "$2")
probe=$(realpath "$3")

skip() { echo "SKIP: $*"; exit 77; }
command -v ibv_devices >/dev/null || skip "ibv_devices not installed (Debian package ibverbs-utils)"
command -v unshare >/dev/null || skip "unshare not installed (util-linux)"

if [ "${DROCE_PROVIDER_TEST_INNER:-}" != 1 ]; then
  export DROCE_PROVIDER_TEST_INNER=1
  if [ "$(id -u)" -eq 0 ]; then
    exec unshare --mount --propagation private "$0" "$@"
  fi
  if unshare --user --map-root-user --mount --propagation private true 2>/dev/null; then
    exec unshare --user --map-root-user --mount --propagation private "$0" "$@"
  fi
  skip "needs root, or unprivileged user namespaces, to provide /dev/infiniband/uverbs0: " \
       "libibverbs only looks there (RDMA_CDEV_DIR is compiled in) and /dev is root's"
fi

# ---- inside the private mount namespace -----------------------------------------------------
fail=0
pass() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

tmp=$(mktemp -d /tmp/droce-provider-test.XXXXXX)
newdev=$tmp/dev
cleanup() {
  # Unmount before removing, so rm never reaches a bind-mounted node of the real /dev.
  umount -R -l /dev 2>/dev/null || true
  umount -l /etc/libibverbs.d 2>/dev/null || true
  umount -R -l "$newdev" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# A char node: mknod where allowed (root), else a bind mount of the real node with those numbers.
mkchar() {  # path major minor source
  if mknod -m 0666 "$1" c "$2" "$3" 2>/dev/null; then return 0; fi
  touch "$1" && mount --bind "$4" "$1"
}

mkdir -p "$newdev" "$tmp/sys" "$tmp/libibverbs.d"
mount -t tmpfs -o mode=0755 droce-dev "$newdev"
mkchar "$newdev/null" 1 3 /dev/null
mkchar "$newdev/zero" 1 5 /dev/zero
mkchar "$newdev/full" 1 7 /dev/full
mkchar "$newdev/urandom" 1 9 /dev/urandom
mkdir "$newdev/infiniband"
mount --rbind "$newdev" /dev   # with the bind-mounted nodes below it

driver_base=${module%-rdmav*.so}   # libibverbs appends -rdmav<PABI>.so to an absolute name
[ "$driver_base" != "$module" ] || { echo "FAIL: $module is not named lib<x>-rdmav<PABI>.so"; exit 1; }
guid=0002c9fffe123456
node=/dev/infiniband/uverbs0

run_probe() {  # [env...] -- tree args: prints the probe's output, returns its status
  local out rc=0
  out=$(env -u RDMAV_DRIVERS "$@" "$tree_run" --root "$tmp/sys" --guid $guid -- "$probe" droce0 2>&1) || rc=$?
  echo "$out"
  return $rc
}

# 1. No node at /dev/infiniband/uverbs0: libibverbs stat()s it before listing the device.
out=$(run_probe RDMAV_DRIVERS="$driver_base") && rc=0 || rc=$?
if [ $rc -eq 1 ] && ! grep -q '^device droce0' <<<"$out"; then
  pass "without $node droce0 is not listed"
else
  bad "without $node: rc=$rc, output: $out"
fi

# 2. A regular file there: listed (only stat() is needed to list), but not openable.
touch "$node"
out=$(run_probe RDMAV_DRIVERS="$driver_base") && rc=0 || rc=$?
if [ $rc -eq 0 ] && grep -q "^device droce0 guid $guid node_type 1 transport 0 uverbs uverbs0\$" <<<"$out" &&
   grep -q '^open droce0: errno' <<<"$out" && ! grep -q '^open droce0: errno 19 ' <<<"$out"; then
  pass "a regular file at $node: listed, open refused before the provider"
else
  bad "regular file at $node: rc=$rc, output: $out"
fi
rm -f "$node"

# 3. A char device with other numbers (/dev/null's 1:3) than the tree's dev (1:7): open refused.
mkchar "$node" 1 3 /dev/null
out=$(run_probe RDMAV_DRIVERS="$driver_base") && rc=0 || rc=$?
if [ $rc -eq 0 ] && grep -q '^device droce0 ' <<<"$out" && grep -q '^open droce0: errno' <<<"$out" &&
   ! grep -q '^open droce0: errno 19 ' <<<"$out"; then
  pass "char node 1:3 against dev 1:7: listed, open refused"
else
  bad "char node 1:3: rc=$rc, output: $out"
fi
umount "$node" 2>/dev/null || true
rm -f "$node"

# 4. The right node (/dev/full's numbers): ibv_devices lists droce0 with its node GUID, and
#    ibv_open_device reaches the provider's alloc_context, which finds no droced (ENODEV): the
#    tree names no control socket and $DROCE_RUN_DIR has none.
mkchar "$node" 1 7 /dev/full
out=$(RDMAV_DRIVERS="$driver_base" "$tree_run" --root "$tmp/sys" --guid $guid -- ibv_devices 2>&1) && rc=0 || rc=$?
if [ $rc -eq 0 ] && grep -Eq "^[[:space:]]*droce0[[:space:]]+$guid\$" <<<"$out"; then
  pass "ibv_devices lists droce0 $guid (RDMAV_DRIVERS=$driver_base)"
else
  bad "ibv_devices: rc=$rc, output: $out"
fi
out=$(run_probe RDMAV_DRIVERS="$driver_base" DROCE_RUN_DIR="$tmp/no-droced") && rc=0 || rc=$?
if [ $rc -eq 0 ] && grep -q "^open droce0: errno 19 " <<<"$out"; then
  pass "ibv_open_device(droce0) reaches droce_glue_alloc_context (ENODEV: no droced)"
else
  bad "open with the right node: rc=$rc, output: $out"
fi

# 5. No provider named anywhere: the device is there but no driver claims it.
out=$(run_probe IBV_SHOW_WARNINGS=1) && rc=0 || rc=$?
if [ $rc -eq 1 ] && grep -q 'no userspace device-specific driver found for droce0' <<<"$out"; then
  pass "without the droce provider no driver claims droce0"
else
  bad "without provider: rc=$rc, output: $out"
fi

# 6. The installed form: a .driver file in /etc/libibverbs.d (IBV_CONFIG_DIR is compiled in, so
#    the directory itself is replaced inside this namespace), naming the module by absolute path.
cp /etc/libibverbs.d/*.driver "$tmp/libibverbs.d/" 2>/dev/null || true
echo "driver $driver_base" > "$tmp/libibverbs.d/droce.driver"
mount --bind "$tmp/libibverbs.d" /etc/libibverbs.d
out=$(env -u RDMAV_DRIVERS "$tree_run" --root "$tmp/sys" --guid $guid -- ibv_devices 2>&1) && rc=0 || rc=$?
if [ $rc -eq 0 ] && grep -Eq "^[[:space:]]*droce0[[:space:]]+$guid\$" <<<"$out"; then
  pass "ibv_devices lists droce0 through /etc/libibverbs.d/droce.driver"
else
  bad "droce.driver: rc=$rc, output: $out"
fi
umount /etc/libibverbs.d

# 7. Names the provider must leave alone: droceX (not droce<digits>) and another prefix.
for name in droce0x mlx5_0; do
  out=$(RDMAV_DRIVERS="$driver_base" "$tree_run" --root "$tmp/sys" --name $name -- "$probe" $name 2>&1) && rc=0 || rc=$?
  if [ $rc -eq 1 ] && ! grep -q "^device $name" <<<"$out"; then
    pass "a device named $name is not claimed"
  else
    bad "device named $name: rc=$rc, output: $out"
  fi
done

# 8. The tree is gone after each run (sysfs_tree_run exits 124 otherwise; checked above via rc).
if [ -z "$(ls -A "$tmp/sys")" ]; then pass "nothing left under the tree root"; else bad "left: $(ls -A "$tmp/sys")"; fi

exit $fail
