#!/usr/bin/env bash
# droce <-> the Linux kernel's soft-RoCE (rdma_rxe) in a rig guest, on the wire (issue #6).
#
#   rxe_interop_test.sh DROCED DROCE DROCE-INTEROP-PEER WORKDIR [rxe_interop.py options]
#
# Decides whether this machine can run the rig and builds its guest image once (rig_image.sh;
# scripts/test.sh starts that in the background during the build; cached in
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

"$here/rig_image.sh" || exit $?  # says SKIP: or FAIL: itself
rig=$(realpath "${DROCE_RXE_RIG:-$here/../../../shared/tools/rxe-rig/rxe-rig.sh}")
rig_dir=$(realpath "${DROCE_RXE_RIG_DIR:-/var/tmp/droce-rxe-rig}")
export RIG_DIR=$rig_dir  # the rig's folder for its guests: the one the image was built in
exec /usr/bin/python3 "$here/rxe_interop.py" --rig "$rig" --rig-dir "$rig_dir" --droced "$droced" \
  --droce "$droce" --peer "$peer" --workdir "$workdir" "$@"
