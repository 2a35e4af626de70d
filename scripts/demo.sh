#!/usr/bin/env bash
# droce's demo: installs what is missing, builds (release), and runs:
#  0. the main job: two droce hosts on this machine (two droced processes on
#     droce's same-host link, droce_shm) and verbs traffic between them through the client
#     library (droce-selftest: RC SEND/WRITE/READ/atomics, SRQ, UD, 64 QP
#     pairs, every byte checked), then droced's own view (droce status);
#     then the distro's own verbs programs on the same two hosts: ibv_devices,
#     ibv_devinfo, ib_write_bw and ib_send_lat through droce's provider;
#     as root, the same two hosts with kernel-visible addresses (each in a network namespace of
#     its own): qperf -cm1 and libfabric's fi_pingpong, which open TCP side channels; and a
#     routed lab (scripts/lab.sh): two hosts in two subnets behind a router namespace, each
#     droced sharing its host's eth0 with the kernel (--netdev, the rxe model), ib_write_bw
#     and rping across the router while the kernel's ping keeps working;
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
ninja -C build/release apps/droce apps/droced apps/droce-selftest apps/droce-wire-demo apps/droce-engine-demo net/droce_xdp.o \
  "provider/verbs/libdroce-rdmav$pabi.so" provider/preload/libdroce-preload.so provider/rdmacm/libdroce-rdmacm.so >/dev/null

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

if [ "$(id -u)" -eq 0 ]; then
  echo "### the two hosts as two machines: each droced in a namespace whose kernel owns its address (10.77.0.1, 10.77.0.2)"
  export DROCE_PAIR_NETNS=1
  droced_pair_start build/release/apps build/demo/hosts
  echo '$ qperf -cm1 10.77.0.1 rc_bw   (B runs; qperf serves on A)'
  droced_pair_run a qperf >build/demo/qperf.server 2>&1 &
  server=$!
  sleep 1
  droced_pair_run b qperf -cm1 10.77.0.1 rc_bw
  kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true
  echo "\$ fi_pingpong -p 'verbs;ofi_rxm' -e rdm -c 10.77.0.1   (libfabric finds droce0 by the kernel's address)"
  droced_pair_run a fi_pingpong -p 'verbs;ofi_rxm' -e rdm -c -I 1000 >build/demo/fi.server 2>&1 &
  server=$!
  sleep 1
  droced_pair_run b fi_pingpong -p 'verbs;ofi_rxm' -e rdm -c -I 1000 10.77.0.1
  wait "$server"
  droced_pair_stop
  unset DROCE_PAIR_NETNS
  echo

  echo "### a routed lab: h1 (10.71.1.11) and h2 (10.71.2.12) behind a router, droced sharing each eth0 with the kernel"
  trap 'scripts/lab.sh down --name demo >/dev/null 2>&1; droced_pair_stop' EXIT
  scripts/lab.sh up --name demo --hosts 2 --routed --build build/release
  echo '$ ping 10.71.1.11   (the kernel, from h2, across the router, while droce shares eth0)'
  ip netns exec demo-h2 ping -c 2 -i 0.2 10.71.1.11 | tail -2
  echo '$ ib_write_bw -d droce0 -x 1 -s 65536 10.71.1.11   (h2 runs; h1 serves; RoCEv2 crosses the router)'
  scripts/lab.sh exec h1 --name demo --build build/release -- ib_write_bw -d droce0 -x 1 -s 65536 -n 5000 \
    >build/demo/lab.server 2>&1 &
  server=$!
  sleep 1
  scripts/lab.sh exec h2 --name demo --build build/release -- ib_write_bw -d droce0 -x 1 -s 65536 -n 5000 10.71.1.11
  wait "$server"
  echo '$ droce gids   (h1: GID 0 is the link-local one, then eth0'"'"'s addresses, followed as they change)'
  ip netns exec demo-h1 build/release/apps/droce gids --socket /run/droce-lab/demo/h1/droce0.sock
  scripts/lab.sh down --name demo
  echo
else
  echo "### (not root: the namespaced pair and the routed lab are skipped; run scripts/demo.sh as root to see them)"
  echo
fi

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
