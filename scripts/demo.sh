#!/usr/bin/env bash
# droce's demo: installs what is missing, builds (release), and runs:
#  0. the main job: two droce hosts on this machine (two droced processes on
#     droce's same-host link, droce_shm) and verbs traffic between them through the client
#     library (droce-selftest: RC SEND/WRITE/READ/atomics, SRQ, UD, 64 QP
#     pairs, every byte checked), then droced's own view (droce status);
#     then the distro's own verbs programs on the same two hosts: ibv_devices,
#     ibv_devinfo, ib_write_bw and ib_send_lat through droce's provider;
#  1. the transport: two droce hosts in one process on droce's same-host link find
#     each other by ARP and run RC SEND, WRITE, READ and atomics, checked;
#  2. the wire format: every RoCEv2 opcode built on one DPDK port, sent to a
#     second one (net_ring), parsed and checked there, and the capture of it
#     decoded by tshark and by droce's own decoder.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

if [ -f build/release/build.ninja ]; then
  configure=(meson configure build/release)
else
  configure=(meson setup build/release)
fi
# The provider is what the demo shows: a machine that cannot build it stops here, with meson's reason.
out=$("${configure[@]}" -Dbuildtype=release -Dprovider=enabled 2>&1) || { echo "$out" >&2; exit 1; }
pabi=$(scripts/fetch-rdma-core-headers.sh --pabi-only 2>/dev/null | tail -1)
ninja -C build/release apps/droce apps/droced apps/droce-selftest apps/droce-wire-demo apps/droce-engine-demo \
  "provider/verbs/libdroce-rdmav$pabi.so" provider/preload/libdroce-preload.so >/dev/null

. scripts/lib/droced-pair.sh
trap droced_pair_stop EXIT
echo "### two droce hosts: droced A (10.77.0.1) and droced B (10.77.0.2) on droce's same-host link (droce_shm; DROCE_PAIR_LINK=memif for net_memif)"
droced_pair_start build/release/apps build/demo/hosts
build/release/apps/droce-selftest --a "$DROCE_A_SOCK" --b "$DROCE_B_SOCK" --qps 64
echo
echo "### droce status (host A), while a client holds 4 QPs with traffic"
build/release/apps/droce-selftest --a "$DROCE_A_SOCK" --b "$DROCE_B_SOCK" --qps 4 --hold-seconds 2 --quiet >/dev/null &
holder=$!
sleep 1
build/release/apps/droce status --socket "$DROCE_A_SOCK"
wait "$holder"  # not a bare wait: the droced processes are this shell's children too
droced_pair_stop
echo

# The same two hosts, for the distro's own verbs programs, on a jumbo-frame link (path MTU 4096).
echo "### unmodified verbs programs on two droce hosts at MTU 9000 (droce exec: the provider, SYSFS_PATH, /dev/infiniband)"
droced_pair_start build/release/apps build/demo/hosts --mtu 9000
run_a() { build/release/apps/droce exec --run-dir build/demo/hosts/a -- "$@"; }
run_b() { build/release/apps/droce exec --run-dir build/demo/hosts/b -- "$@"; }
echo '$ ibv_devices   (host A)'
run_a ibv_devices
echo '$ ibv_devinfo -d droce0   (host B)'
run_b ibv_devinfo -d droce0
# perftest's own TCP exchange over loopback; GID 1 is each host's IPv4-mapped RoCE v2 GID.
echo '$ ib_write_bw -d droce0 -x 1 -s 65536 -n 5000   (A serves, B runs)'
run_a ib_write_bw -d droce0 -x 1 -s 65536 -n 5000 >build/demo/ib_write_bw.server 2>&1 &
server=$!
sleep 1
run_b ib_write_bw -d droce0 -x 1 -s 65536 -n 5000 127.0.0.1
wait "$server"
echo '$ ib_send_lat -d droce0 -x 1 -s 64 -n 2000   (A serves, B runs)'
run_a ib_send_lat -d droce0 -x 1 -s 64 -n 2000 >build/demo/ib_send_lat.server 2>&1 &
server=$!
sleep 1
run_b ib_send_lat -d droce0 -x 1 -s 64 -n 2000 127.0.0.1
wait "$server"
droced_pair_stop
echo

echo "### droce-engine-demo: two droce hosts on droce's same-host link, in one process"
build/release/apps/droce-engine-demo 2>&1 | grep -vE '^(EAL|TELEMETRY)|rte_pmd_memif|Frame size'
echo

mkdir -p build/demo
pcap=build/demo/wire.pcap
echo "### droce-wire-demo: two DPDK ports (net_ring) in one process"
build/release/apps/droce-wire-demo --pcap "$pcap"

echo
echo "### tshark's view of the capture (first 12 of $(tshark -r "$pcap" 2>/dev/null | wc -l) frames)"
{ tshark -r "$pcap" --disable-heuristic rpcrdma_infiniband 2>/dev/null || true; } | head -12

echo
echo "### droce decode: a WRITE with immediate, an atomic, a UD SEND (full headers)"
{ build/release/apps/droce decode "$pcap" || true; } | awk '
  /^frame/ { keep = 0; block = $0; next }
  { block = block "\n" $0 }
  /RDMA_WRITE_ONLY_WITH_IMMEDIATE|COMPARE_SWAP \(|UD_SEND_ONLY_WITH_IMMEDIATE/ { if (!seen[$2]++) keep = 1 }
  /verdict/ { if (keep) print block; keep = 0 }'
echo
echo "### droce decode --quiet: the summary (the broken frames are meant to be refused)"
{ build/release/apps/droce decode --quiet "$pcap" || true; } | tail -12
