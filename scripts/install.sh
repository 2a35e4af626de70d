#!/usr/bin/env bash
# Installs droce where the distro's libibverbs and a shell find it (Debian 12 paths):
#   /usr/local/bin/{droced,droce,droce-selftest}
#   /usr/lib/x86_64-linux-gnu/libibverbs/libdroce-rdmav<PABI>.so   the provider module
#   /etc/libibverbs.d/droce.driver                                  "driver droce"
#   /usr/lib/x86_64-linux-gnu/droce/libdroce-preload.so             completion channels
#   /usr/lib/x86_64-linux-gnu/droce/libdroce-rdmacm.so              librdmacm's rdma_cm device
#   /usr/lib/x86_64-linux-gnu/droce/droce_xdp.o                     the XDP program (--netdev, af_xdp)
#   /etc/systemd/system/droced@.service                             a service per netdev
#   /etc/droce/droced@IFACE.conf                                     (--netdev IFACE: its settings)
# Then, for a NIC the kernel keeps using (as rxe shares it):
#   systemctl enable --now droced@eth0 && droce exec -- ibv_devices
# Then any verbs program finds droce0 with `droce exec -- PROGRAM` (which still supplies
# SYSFS_PATH and, if droced does not run as root, /dev/infiniband), or with SYSFS_PATH set to
# droced's tree and /dev/infiniband/uverbs_droce0 present.
#
#   scripts/install.sh [--build DIR] [--root DIR] [--no-build] [--uninstall] [--netdev IFACE]
# --netdev: also write /etc/droce/droced@IFACE.conf (if missing) for `systemctl enable droced@IFACE`.
#
# --build: the build to install from (default build/release, configured and built first
# unless --no-build).
# --root: install under DIR instead of / (a staging root, as for a package).
set -euo pipefail
cd "$(dirname "$0")/.."

build=build/release
root=
uninstall=0
no_build=0
netdev=
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --root) root=$2; shift 2 ;;
    --uninstall) uninstall=1; shift ;;
    --no-build) no_build=1; shift ;;
    --netdev) netdev=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--root DIR] [--no-build] [--uninstall]" >&2; exit 2 ;;
  esac
done

bindir=$root/usr/local/bin
verbsdir=$root/usr/lib/x86_64-linux-gnu/libibverbs
confdir=$root/etc/libibverbs.d
libdir=$root/usr/lib/x86_64-linux-gnu/droce
unitdir=$root/etc/systemd/system
droceconf=$root/etc/droce

if [ $uninstall -eq 1 ]; then
  rm -f "$bindir/droced" "$bindir/droce" "$bindir/droce-selftest" "$verbsdir"/libdroce-rdmav*.so \
        "$confdir/droce.driver" "$libdir/libdroce-preload.so" "$libdir/libdroce-rdmacm.so" \
        "$libdir/droce_xdp.o" "$unitdir/droced@.service"
  rmdir "$libdir" 2>/dev/null || true
  # Settings the operator wrote stay, as a package's conffiles do (remove /etc/droce by hand).
  echo "droce uninstalled${root:+ from $root}"
  exit 0
fi

if [ $no_build -eq 0 ]; then
  if [ ! -f "$build/build.ninja" ]; then
    scripts/install-deps.sh
    meson setup "$build" -Dbuildtype=release >/dev/null
  fi
  ninja -C "$build" >/dev/null
fi

module=$(ls "$build"/provider/verbs/libdroce-rdmav*.so 2>/dev/null | head -1)
if [ -z "$module" ]; then
  echo "install: $build has no provider module (configure said why: rdma-core headers?)" >&2
  exit 1
fi
install -d "$bindir" "$verbsdir" "$confdir" "$libdir" "$unitdir"
install -m 0755 "$build/apps/droced" "$build/apps/droce" "$build/apps/droce-selftest" "$bindir/"
install -m 0644 "$module" "$verbsdir/"
echo "driver droce" >"$confdir/droce.driver"
for lib in "$build/provider/preload/libdroce-preload.so" "$build/provider/rdmacm/libdroce-rdmacm.so"; do
  if [ -f "$lib" ]; then install -m 0644 "$lib" "$libdir/"; fi
done
if [ -f "$build/net/droce_xdp.o" ]; then install -m 0644 "$build/net/droce_xdp.o" "$libdir/"; fi
install -m 0644 scripts/systemd/droced@.service "$unitdir/"
if [ -n "$netdev" ] && [ ! -f "$droceconf/droced@$netdev.conf" ]; then
  install -d "$droceconf"
  cat >"$droceconf/droced@$netdev.conf" <<EOF
# droced@$netdev: droce sharing $netdev with the kernel (docs/droced.md lists every key).
# name = droce0            # the device name verbs programs see (one per netdev)
# link = af_xdp            # or af_packet (jumbo frames: af_xdp carries at most MTU 3542)
# lcores = 0               # the poll cores
# poll-mode = auto         # poll on an isolated CPU, else sleep between events
EOF
fi
if [ -z "$root" ] && command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
echo "droce installed${root:+ under $root}: $bindir/{droced,droce,droce-selftest}, $verbsdir/$(basename "$module"), $confdir/droce.driver"
