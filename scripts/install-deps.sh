#!/usr/bin/env bash
# Installs what droce needs to build, test and run, from Debian 12 packages.
# Idempotent and quick when everything is present (no apt-get unless a
# package is missing). Needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
  # build
  g++ meson ninja-build pkg-config
  # libraries
  libdpdk-dev dpdk-dev libtbb-dev libisal-dev libpcap-dev
  libgtest-dev libbenchmark-dev
  nlohmann-json3-dev  # JSON: droced's state (`droce ... --json`), `droce decode --json`, the interop peer's files
  libbpf-dev  # droce's XDP program (net/xdp) is built with clang and found on the netdev with libbpf
  # test oracles and tools: scapy computes ICRCs, tshark decodes RoCEv2,
  # clang + its runtime give libFuzzer
  python3 python3-scapy tshark clang libclang-rt-14-dev iproute2 procps
  iputils-ping  # the lab test's kernel ping across droce's netdevs
  gdb  # the real-client suites print a stuck program's stacks (tests/real_clients/deadline.sh)
  systemtap-sdt-dev  # <sys/sdt.h>: droced's USDT probes (rocev2/probes.h); without it they compile to nothing
  python3-prometheus-client  # a real OpenMetrics parser for the --metrics test (tests/apps/droced_metrics_test.sh)
  # the rdma-core provider: the libibverbs it loads into and its public headers, the programs
  # that test it (python3-pyverbs brings rdma-core's own test suite, provider_pyverbs), and what
  # scripts/fetch-rdma-core-headers.sh uses (objdump, apt-get source)
  libibverbs-dev ibverbs-utils perftest python3-pyverbs binutils dpkg-dev
  qemu-system-x86 qemu-utils debootstrap busybox-static e2fsprogs cpio  # the rxe rig (docs/interop.md)
  # middleware the real_clients suite runs over droce: UCX's perftest, OpenMPI (pml ucx), NetPIPE,
  # the rdma_cm programs (rping, ucmatose, udaddy, rstream, ...), qperf, libfabric's fi_pingpong
  # and fio (its rdma ioengine); librdmacm-dev builds the suite's own rdma_cm probe
  # (tests/real_clients/cm_channels.c)
  ucx-utils openmpi-bin libopenmpi-dev netpipe-openmpi rdmacm-utils qperf libfabric-bin librdmacm-dev
  fio
  python3-fusepy  # a filesystem that does not answer: the ODP stall check (tests/provider/odp_fuse_gate.py)
)

missing=()
for p in "${packages[@]}"; do
  if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "droce: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "droce: need root to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
# tshark asks whether non-root users may capture; the answer does not matter here.
echo "wireshark-common wireshark-common/install-setuid boolean false" | $sudo debconf-set-selections
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "droce: installed ${#missing[@]} packages"
