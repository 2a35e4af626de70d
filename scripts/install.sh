#!/usr/bin/env bash
# Installs droce where the distro's libibverbs and a shell find it (Debian 12 paths):
#   /usr/local/bin/{droced,droce,droce-selftest}
#   /usr/lib/x86_64-linux-gnu/libibverbs/libdroce-rdmav<PABI>.so   the provider module
#   /etc/libibverbs.d/droce.driver                                  "driver droce"
#   /usr/lib/x86_64-linux-gnu/droce/libdroce-preload.so             completion channels
#   /usr/lib/x86_64-linux-gnu/droce/libdroce-rdmacm.so              librdmacm's rdma_cm device
# Then any verbs program finds droce0 with `droce exec -- PROGRAM` (which still supplies
# SYSFS_PATH and, if droced does not run as root, /dev/infiniband), or with SYSFS_PATH set to
# droced's tree and /dev/infiniband/uverbs_droce0 present.
#
#   scripts/install.sh [--build DIR] [--root DIR] [--no-build] [--uninstall]
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
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --root) root=$2; shift 2 ;;
    --uninstall) uninstall=1; shift ;;
    --no-build) no_build=1; shift ;;
    *) echo "usage: $0 [--build DIR] [--root DIR] [--no-build] [--uninstall]" >&2; exit 2 ;;
  esac
done

bindir=$root/usr/local/bin
verbsdir=$root/usr/lib/x86_64-linux-gnu/libibverbs
confdir=$root/etc/libibverbs.d
libdir=$root/usr/lib/x86_64-linux-gnu/droce

if [ $uninstall -eq 1 ]; then
  rm -f "$bindir/droced" "$bindir/droce" "$bindir/droce-selftest" "$verbsdir"/libdroce-rdmav*.so \
        "$confdir/droce.driver" "$libdir/libdroce-preload.so" "$libdir/libdroce-rdmacm.so"
  rmdir "$libdir" 2>/dev/null || true
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
install -d "$bindir" "$verbsdir" "$confdir" "$libdir"
install -m 0755 "$build/apps/droced" "$build/apps/droce" "$build/apps/droce-selftest" "$bindir/"
install -m 0644 "$module" "$verbsdir/"
echo "driver droce" >"$confdir/droce.driver"
for lib in "$build/provider/preload/libdroce-preload.so" "$build/provider/rdmacm/libdroce-rdmacm.so"; do
  if [ -f "$lib" ]; then install -m 0644 "$lib" "$libdir/"; fi
done
echo "droce installed${root:+ under $root}: $bindir/{droced,droce,droce-selftest}, $verbsdir/$(basename "$module"), $confdir/droce.driver"
