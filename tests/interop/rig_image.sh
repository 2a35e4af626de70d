#!/usr/bin/env bash
# The rxe rig's guest image, built once and cached (tests/interop/rxe_interop_test.sh uses it;
# scripts/test.sh starts it in the background while the debug build runs, so a new machine
# does not wait for it after the build). One build at a time: a second caller waits on the
# lock and finds the image ready.
#
#   rig_image.sh
#
# Exit 0 when the image is ready, 77 (with "SKIP: reason") when this machine cannot run the rig
# (not root, no tun device, a package missing, too little disk, no Debian mirror), 1 when the
# rig built nothing. Environment: DROCE_RXE_RIG (the rig script; default
# ../shared/tools/rxe-rig/rxe-rig.sh beside the repository), DROCE_RXE_RIG_DIR (the cache;
# default /var/tmp/droce-rxe-rig).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
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

