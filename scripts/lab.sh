#!/usr/bin/env bash
# A lab of droce hosts on this machine: network namespaces standing in for machines, each
# with a netdev the kernel owns (its addresses, routes, ARP/ND, TCP) and a droced sharing that
# netdev as the kernel's rxe would (--netdev eth0).
#
#   scripts/lab.sh up [--hosts N] [--routed] [--link af_xdp|af_packet|packet] [--name LAB] [--build DIR]
#                     [--no-droced]    (the namespaces only: start droced yourself, e.g. with
#                                       addresses of its own, in /run/droce-lab/LAB/hN)
#   scripts/lab.sh exec HOST -- COMMAND [ARGS...]   run a verbs program on HOST's droce0
#   scripts/lab.sh addr HOST [4|6]                  HOST's address
#   scripts/lab.sh status                           the hosts, their addresses and droced
#   scripts/lab.sh rsh ADDRESS COMMAND...           run COMMAND (a shell string) in the host with
#                                                   ADDRESS: an rsh agent for mpirun
#   scripts/lab.sh rank -- PROGRAM [ARGS...]        PROGRAM on the droce0 of the host it runs in
#                                                   (an MPI rank: mpirun starts it in each host)
#   scripts/lab.sh down [--name LAB]
#
# Topology (root; everything it makes is named after LAB, default "dlab", and removed by down):
#   default:  hosts LAB-h1..hN (N default 2) on one bridge in LAB-sw, one subnet:
#             10.71.0.(10+i)/24 and fd71:0::(10+i)/64 on each host's eth0
#   --routed: two subnets joined by a router namespace LAB-rt that forwards between them:
#             odd hosts on 10.71.1.0/24 (router 10.71.1.1), even hosts on 10.71.2.0/24
#             (router 10.71.2.1), IPv6 fd71:1::/64 and fd71:2::/64 likewise; each host's
#             default route is its router, so RoCEv2 between subnets crosses it.
# Each host's droced: `droced --netdev eth0 --link LINK` with its run directory, log and sysfs
# tree under /run/droce-lab/LAB/hN (the kernel's ping, TCP and SSH-like traffic keep working on
# eth0). $DROCE_LAB_DROCED_ARGS adds flags to every host's droced, e.g. the link's own options:
#   DROCE_LAB_DROCED_ARGS="--link-args frames=1024" scripts/lab.sh up --link packet
# Example:
#   scripts/lab.sh up --hosts 2 --routed
#   scripts/lab.sh exec h1 -- ib_write_bw -d droce0 -x 1 &
#   scripts/lab.sh exec h2 -- ib_write_bw -d droce0 -x 1 "$(scripts/lab.sh addr h1)"
#   scripts/lab.sh down
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib/netns.sh
. "$here/scripts/lib/netns.sh"

cmd=${1:-}
[ -n "$cmd" ] && shift
lab=dlab
hosts=2
routed=0
no_droced=0
link=af_xdp
build=$here/build/release
build_given=0
args=()      # positional arguments (a host, a family)
command=()   # after --
while [ $# -gt 0 ]; do
  case $1 in
    --hosts) hosts=$2; shift 2 ;;
    --routed) routed=1; shift ;;
    --no-droced) no_droced=1; shift ;;
    --link) link=$2; shift 2 ;;
    --name) lab=$2; shift 2 ;;
    --build) build=$(realpath "$2"); build_given=1; shift 2 ;;
    --) shift; command=("$@"); break ;;
    *) args+=("$1"); shift
       if [ "$cmd" = rsh ] && [ ${#args[@]} -eq 1 ]; then command=("$@"); break; fi ;;
  esac
done
state=/run/droce-lab/$lab
# The build a lab came up with serves its exec, rank and the rest (droce exec's provider must
# speak that droced's ABI), unless told otherwise.
if [ "$build_given" = 0 ] && [ "$cmd" != up ] && [ -f "$state/build" ]; then build=$(cat "$state/build"); fi

die() { echo "lab: $*" >&2; exit 1; }

host_subnet() {  # host_subnet I: 0 (one segment), 1 or 2 (routed)
  if [ -f "$state/routed" ] || [ "$routed" = 1 ]; then echo $(( ($1 - 1) % 2 + 1 )); else echo 0; fi
}

lab_addr() {  # lab_addr I [4|6]
  local s
  s=$(host_subnet "$1")
  if [ "${2:-4}" = 6 ]; then echo "fd71:$s::$((10 + $1))"; else echo "10.71.$s.$((10 + $1))"; fi
}

droce_bin() {
  for b in "$build/apps" "$here/build/release/apps" "$here/build/debug/apps" /usr/local/bin; do
    [ -x "$b/$1" ] && { echo "$b/$1"; return; }
  done
  command -v "$1"
}

lab_up() {
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, veth, XDP)"
  [ -d "$state" ] && die "lab $lab is up already (scripts/lab.sh down --name $lab)"
  local droced
  droced=$(droce_bin droced) || die "no droced: build first (meson setup build/release && ninja -C build/release)"
  [ -n "$droced" ] || die "no droced: build first (meson setup build/release && ninja -C build/release)"
  mkdir -p "$state"
  [ "$routed" = 1 ] && touch "$state/routed"
  echo "$hosts" >"$state/hosts"
  echo "$build" >"$state/build"
  local sw=$lab-sw
  netns_add "$sw" || die "cannot create namespace $sw"
  # A switch does not run the host's iptables on the frames it bridges. Where br_netfilter is
  # loaded (Docker loads it) a new namespace starts with bridge-nf-call-* on, and a quarter of
  # a sender's kernel time per af_xdp frame went to br_nf_* here. The settings are this
  # namespace's own (kernel 5.3 and later); where they are not, the write fails and nothing changes.
  ip netns exec "$sw" sysctl -qw net.bridge.bridge-nf-call-iptables=0 net.bridge.bridge-nf-call-ip6tables=0 \
    net.bridge.bridge-nf-call-arptables=0 >/dev/null 2>&1 || true
  if [ "$routed" = 1 ]; then
    # The router is the switch namespace itself: one bridge per subnet, forwarding between them.
    for s in 1 2; do
      bridge_add "$sw" "br$s" "10.71.$s.1/24" "fd71:$s::1/64"
    done
    ip netns exec "$sw" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
  else
    bridge_add "$sw" br0
  fi
  local i h s
  for i in $(seq "$hosts"); do
    h=$lab-h$i
    s=$(host_subnet "$i")
    netns_add "$h" || die "cannot create namespace $h"
    veth_add "$h" eth0 "$sw" "h$i" || die "cannot create a veth pair"
    link_up "$sw" "h$i" --master "br$s"
    link_up "$h" eth0 "$(lab_addr "$i")/24" "$(lab_addr "$i" 6)/64"
    if [ "$routed" = 1 ]; then
      ip -n "$h" route add default via "10.71.$s.1"
      ip -n "$h" -6 route add default via "fd71:$s::1"
    fi
    mkdir -p "$state/h$i"
    [ "$no_droced" = 1 ] && continue
    # shellcheck disable=SC2086 # DROCE_LAB_DROCED_ARGS is a list of flags
    droced_spawn "$h" "$state/h$i" "$state/h$i.log" "$droced" --netdev eth0 --link "$link" --memory 256 \
      --mbufs 8192 ${DROCE_LAB_DROCED_ARGS:-}
    echo "$DROCED_PID" >"$state/h$i.pid"
  done
  [ "$no_droced" = 1 ] && { lab_status; return 0; }
  for i in $(seq "$hosts"); do
    if ! wait_unix_socket "$state/h$i/droce0.sock" "$(cat "$state/h$i.pid")"; then
      tail -5 "$state/h$i.log" >&2
      die "droced on $lab-h$i did not start (log: $state/h$i.log)"
    fi
  done
  lab_status
}

lab_down() {
  local p i pids=()
  for p in "$state"/h*.pid; do
    [ -f "$p" ] && pids+=("$(cat "$p")")
  done
  droced_stop "${pids[@]}"  # not this shell's children: 5 s each, then SIGKILL
  local n=${hosts}
  [ -f "$state/hosts" ] && n=$(cat "$state/hosts")
  for i in $(seq "$n"); do netns_del "$lab-h$i"; done
  netns_del "$lab-sw"
  rm -rf "$state"
  return 0
}

lab_status() {
  local n i
  n=$(cat "$state/hosts" 2>/dev/null) || die "lab $lab is not up"
  for i in $(seq "$n"); do
    printf '%s-h%s  %-12s %-14s droced pid %s  (%s)\n' "$lab" "$i" "$(lab_addr "$i")" "$(lab_addr "$i" 6)" \
      "$(cat "$state/h$i.pid" 2>/dev/null || echo -)" "scripts/lab.sh exec h$i -- PROGRAM"
  done
}

case $cmd in
  up) lab_up ;;
  down) lab_down ;;
  status) lab_status ;;
  addr)
    h=${args[0]:?host}; h=${h#"$lab-"}
    lab_addr "${h#h}" "${args[1]:-4}" ;;
  exec)
    h=${args[0]:?host}; h=${h#"$lab-"}
    [ ${#command[@]} -gt 0 ] || die "exec HOST -- COMMAND"
    droce=$(droce_bin droce) || die "no droce command"
    exec ip netns exec "$lab-$h" "$droce" exec --run-dir "$state/$h" -- "${command[@]}" ;;
  rsh)
    # mpirun's rsh agent: "rsh HOST ORTED ARGS..."; HOST is a lab address or hN.
    target=${args[0]:?host}
    ns=
    n=$(cat "$state/hosts" 2>/dev/null) || die "lab $lab is not up"
    for i in $(seq "$n"); do
      if [ "$target" = "h$i" ] || [ "$target" = "$lab-h$i" ] || [ "$target" = "$(lab_addr "$i")" ] ||
         [ "$target" = "$(lab_addr "$i" 6)" ]; then ns=$lab-h$i; fi
    done
    [ -n "$ns" ] || die "rsh: no lab host $target"
    exec ip netns exec "$ns" sh -c "${command[*]}" ;;
  rank)
    # The host this runs in is the namespace it runs in.
    ns=$(ip netns identify $$)
    h=${ns#"$lab-"}
    [ -n "$ns" ] && [ -d "$state/$h" ] || die "rank: not in a host of lab $lab (namespace '$ns')"
    droce=$(droce_bin droce) || die "no droce command"
    exec "$droce" exec --run-dir "$state/$h" -- "${command[@]}" ;;
  *) sed -n '2,32p' "$0"; exit 2 ;;
esac
