#!/usr/bin/env bash
# droce <-> the Linux kernel's soft-RoCE (rdma_rxe) in a rig guest, on the wire (issue #6).
#
#   rxe_interop_test.sh DROCED DROCE DROCE-INTEROP-PEER WORKDIR [rxe_interop.py options]
#
# Decides whether this machine can run the rig, builds its guest image once (cached in
# $DROCE_RXE_RIG_DIR, default /var/tmp/droce-rxe-rig: about 4 minutes and 1 GB cold, a few
# seconds after), then hands over to rxe_interop.py, which boots one guest in a network
# namespace of its own, runs droced on a veth port of the guest's bridge and every case.
# Exit 77 (skip) with the reason when it cannot run: not root, no qemu/debootstrap/tshark
# (scripts/install-deps.sh installs them), no tun device, too little disk space; or when the
# guest's emulated NIC stalls twice (inconclusive: the rig, not droce).
#
# Environment: DROCE_RXE_RIG (the rig script; default ../shared/tools/rxe-rig/rxe-rig.sh
# beside the repository), DROCE_RXE_RIG_DIR (the image cache and the guests' folders).
set -uo pipefail

if [ $# -lt 4 ]; then
  echo "usage: $0 DROCED DROCE DROCE-INTEROP-PEER WORKDIR [rxe_interop.py options]" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
droced=$(realpath "$1")
droce=$(realpath "$2")
peer=$(realpath "$3")
workdir=$4
shift 4

skip() { echo "SKIP: $*"; exit 77; }

rig=${DROCE_RXE_RIG:-$here/../../../shared/tools/rxe-rig/rxe-rig.sh}
[ -x "$rig" ] || skip "no rxe rig at $rig (set DROCE_RXE_RIG)"
rig=$(realpath "$rig")
rig_dir=${DROCE_RXE_RIG_DIR:-/var/tmp/droce-rxe-rig}

[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces, tap devices, af_packet, qemu guests)"
[ -c /dev/net/tun ] || skip "no /dev/net/tun: qemu's guest NIC needs a tap device"
# What rxe-rig.sh needs on the host (its RIG_HOST_PKGS); it would apt-get them itself, which a
# test must not do: scripts/install-deps.sh installs them.
missing=()
for p in qemu-system-x86 qemu-utils debootstrap busybox-static tshark e2fsprogs iproute2 cpio gzip; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] || skip "missing Debian packages: ${missing[*]} (scripts/install-deps.sh installs them)"
command -v dumpcap >/dev/null || skip "no dumpcap (Debian package wireshark-common, with tshark)"
[ -x /usr/bin/python3 ] || skip "no /usr/bin/python3"

mkdir -p "$rig_dir" || skip "cannot create $rig_dir"
rig_dir=$(realpath "$rig_dir")
# One folder for the build and the guests: the rig reads RIG_DIR for both, so it is exported
# before anything runs the rig (it was once set only after the build, which then went to the
# rig's own default folder while the guests booted from this one, and found nothing).
export RIG_DIR=$rig_dir
avail_mb=$(df --output=avail -BM "$rig_dir" | tail -1 | tr -dc 0-9)
exec 8>"$rig_dir/.droce-build.lock"
flock 8                                   # one build at a time; later runs find it done
if [ -f "$rig_dir/image/.build-ok" ] && [ -f "$rig_dir/image/rootfs.img" ]; then
  echo "rxe rig image: cached in $rig_dir/image (rm -rf $rig_dir rebuilds it)"
  [ "$avail_mb" -ge 512 ] || skip "only ${avail_mb} MB free in $rig_dir; a guest's overlay and the captures need 512 MB"
else
  # debootstrap tree (~420 MB) + image (~510 MB) + kernel .deb (~70 MB) + room for the guest.
  [ "$avail_mb" -ge 2048 ] || skip "only ${avail_mb} MB free in $rig_dir; building the rig image needs 2 GB"
  echo "rxe rig image: not in $rig_dir/image, building it (once; about 4 minutes cold here)"
fi
# The rig's build is idempotent (a few ms when its image matches), so it always runs: it also
# rebuilds an image made for other rig settings.
t0=$(date +%s)
if ! "$rig" build > "$rig_dir/build.log" 2>&1; then
  tail -20 "$rig_dir/build.log"
  skip "the rig image did not build (see $rig_dir/build.log): no network to the Debian mirror?"
fi
[ -f "$rig_dir/image/rootfs.img" ] || { echo "FAIL: the rig built no $rig_dir/image/rootfs.img"; exit 1; }
echo "rxe rig image ready in $(( $(date +%s) - t0 )) s"

flock -u 8
exec 8>&-
exec /usr/bin/python3 "$here/rxe_interop.py" --rig "$rig" --rig-dir "$rig_dir" --droced "$droced" \
  --droce "$droce" --peer "$peer" --workdir "$workdir" "$@"
