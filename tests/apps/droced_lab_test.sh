#!/usr/bin/env bash
# droce on a network it shares with the kernel (the rxe model), in a lab made by scripts/lab.sh:
# two hosts in two subnets behind a router namespace, each droced on `--netdev eth0`, once over
# af_xdp (droce's XDP program), once over af_packet (DPDK's) and once over packet (droce's
# packet socket with UDP GSO: there h1 must also have received GSO frames the router forwarded
# whole). Root only; the lab is made and removed here.
#
#   droced_lab_test.sh SOURCE_ROOT BUILD_DIR
#
# For each link:
#   - the kernel keeps the netdev: ping across the router and a TCP connection work while droced
#     runs, after RDMA traffic and while ib_write_bw runs; the kernel never answers RoCE (no ICMP
#     unreachable);
#   - RoCEv2 crosses the router: ibv_rc_pingpong (data checked), ib_write_bw with perftest's TCP
#     exchange (IPv4 and IPv6 GIDs) and with rdma_cm (-R), rping -V, ucmatose, and UCX's
#     ucx_perftest (UCT rc_verbs put_bw, UCP tag_bw), between the subnets;
#   - the GIDs follow the netdev: `ip addr add` on h1's eth0 shows up in `droce gids` and as an
#     IBV_EVENT_GID_CHANGE to a client within a second, `ip addr del` takes it away;
#   - a link flap of a few milliseconds (h1's eth0 down and up) reaches a client as
#     IBV_EVENT_PORT_ERR then IBV_EVENT_PORT_ACTIVE (netlink link messages);
#   - a route through a gateway that never answers fails the verb (EHOSTUNREACH), droced lives;
#   - bad input from the router (scapy): datagrams to UDP 4791 that are not RoCE, and RoCE frames
#     for an address droce does not own, are counted and dropped (af_xdp: the XDP program leaves
#     the second to the kernel and counts it), and droced serves on;
#   - af_xdp: a second droced on the same netdev refuses to start and leaves the first alone.
# Then own addresses (droce's, not the kernel's) on af_packet: droced --address A/24 --route
# "default via GW" on each host, the router holding a gateway address in each of droce's subnets:
# droce answers ARP for its addresses and resolves its gateway itself, and ibv_rc_pingpong and
# ib_write_bw cross the router on droce's own GIDs (their TCP exchange on the kernel's).
# Last, four hosts in the two subnets (af_xdp; h1 and h3 on one side of the router, h2 and h4 on
# the other): OpenMPI over UCX (rc_verbs, ud_verbs) with one rank on each host, mpirun in h1
# starting the others through `lab.sh rsh`, each rank on its host's droce0
# (`lab.sh rank`): mpi_check's point-to-point, collectives and one-sided checks, and every
# droced received RoCE frames.
# Exit 77 without root or namespaces.
set -uo pipefail
src=$(realpath "$1")
build=$(realpath "$2")
lab="$src/scripts/lab.sh"
name=dlt$$
droce=$build/apps/droce
# shellcheck source=scripts/lib/netns.sh
. "$src/scripts/lib/netns.sh"
DROCE_BIN=$droce  # for server_ready

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces, veth, XDP)"
command -v ip >/dev/null || skip "needs ip (iproute2)"
netns_add "$name-probe" 2>/dev/null || skip "cannot create network namespaces"
netns_del "$name-probe"

fails=0
pass() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
work=$(mktemp -d /tmp/droced-lab.XXXXXX)
on_exit rm -rf "$work"
export LSAN_OPTIONS="suppressions=$work/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
echo "leak:xsk_umem__create" >"$work/lsan.supp"

L() { "$lab" "$@" --name "$name" --build "$build"; }
teardown() { L down >/dev/null 2>&1; }  # the lab, whatever is up of it
on_exit teardown
inns() { local h=$1; shift; ip netns exec "$name-$h" "$@"; }

kernel_keeps_netdev() {  # WHEN: ping and a TCP exchange from h2 to h1 across the router
  local a1
  a1=$("$lab" addr h1 --name "$name")
  if inns h2 ping -c 2 -W 2 -i 0.2 "$a1" >/dev/null 2>&1; then pass "$link: kernel ping across the router $1"
  else bad "$link: kernel ping across the router $1"; fi
  inns h1 python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 18515 + 7)); s.listen(1); s.settimeout(10)
c, _ = s.accept(); c.sendall(c.recv(64).upper())' &
  local spid=$!
  # Listening before the client dials: python's start-up is slow on a busy machine.
  wait_tcp_listen "$name-h1" 18522 "$spid" 5
  local got
  got=$(inns h2 python3 -c "
import socket
c = socket.create_connection(('$a1', 18522), timeout=5); c.sendall(b'roce'); print(c.recv(64).decode())" 2>&1)
  wait $spid
  if [ "$got" = ROCE ]; then pass "$link: kernel TCP across the router $1"; else bad "$link: kernel TCP $1: $got"; fi
}

# packet link: 8 MiB of the kernel's TCP from h2 to h1 must not reach h1's ring (its socket
# filter leaves TCP out): h1's port counts only a few frames meanwhile (ARP, ND), not the
# hundreds of segments the tap would have copied.
port_rx_packets() {
  inns h1 "$droce" status --json --socket "/run/droce-lab/$name/h1/droce0.sock" |
    /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["ports"][0]["stats"]["rx_packets"])'
}
tcp_left_out() {
  local a1 before after
  a1=$("$lab" addr h1 --name "$name")
  before=$(port_rx_packets) || { bad "$link: droce status"; return; }
  inns h1 python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 18523)); s.listen(1); s.settimeout(10)
c, _ = s.accept(); n = 0
while True:
    b = c.recv(1 << 20)
    if not b: break
    n += len(b)
print(n)' >"$work/tcp_bytes.txt" &
  local spid=$!
  wait_tcp_listen "$name-h1" 18523 "$spid" 5
  inns h2 python3 -c "
import socket
c = socket.create_connection(('$a1', 18523), timeout=5); c.sendall(b'x' * (8 << 20)); c.close()"
  wait $spid
  after=$(port_rx_packets)
  if [ "$(cat "$work/tcp_bytes.txt")" = $((8 << 20)) ] && [ $((after - before)) -lt 50 ]; then
    pass "$link: 8 MiB of the kernel's TCP went by, $((after - before)) frames reached droce's ring"
  else
    bad "$link: TCP $(cat "$work/tcp_bytes.txt") bytes, $((after - before)) frames in droce's ring (want 8 MiB, < 50)"
  fi
}

# [PORT=P] pair WHAT SERVER_ARGS -- CLIENT_ARGS: server on h1, client on h2, the client started once
# the server listens (on TCP port P, or as an rdma_cm id when P is not given).
pair() {
  local what=$1 spid st_s st_c
  shift
  local -a sargs=() cargs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do sargs+=("$1"); shift; done
  shift
  cargs=("$@")
  timeout 60 "$lab" exec h1 --name "$name" --build "$build" -- "${sargs[@]}" >"$work/server.txt" 2>&1 &
  spid=$!
  server_ready "$name-h1" "/run/droce-lab/$name/h1/droce0.sock" "${PORT:-}"
  timeout 60 "$lab" exec h2 --name "$name" --build "$build" -- "${cargs[@]}" >"$work/client.txt" 2>&1
  st_c=$?
  wait $spid
  st_s=$?
  if [ $st_c -eq 0 ] && [ $st_s -eq 0 ]; then
    pass "$link: $what across the router: $(grep -E '^ *[0-9]+ +[0-9]+|bytes in|complete|Final' "$work/client.txt" | tail -1 | tr -s ' ')"
  else
    bad "$link: $what across the router (client $st_c, server $st_s)"
    tail -n 6 "$work/client.txt" "$work/server.txt" | sed 's/^/    /'
  fi
}

gid_shown() { inns h1 "$droce" gids --socket "$1" 2>/dev/null | grep -q "10.71.9.1"; }  # gid_shown SOCK
gid_gone() { ! gid_shown "$1"; }
gid_follows() {
  local sock=/run/droce-lab/$name/h1/droce0.sock
  start_watcher "$work/events.txt" timeout 10 ip netns exec "$name-h1" "$droce" events --count 2 --timeout 5 \
    --socket "$sock" || { bad "$link: droce events did not start"; return; }
  local epid=$WATCHER_PID
  inns h1 ip addr add 10.71.9.1/24 dev eth0
  if wait_for 1 gid_shown "$sock"; then pass "$link: ip addr add shows in droce gids within a second"
  else bad "$link: 10.71.9.1 not in droce gids a second after ip addr add"; fi
  inns h1 ip addr del 10.71.9.1/24 dev eth0
  if wait_for 1 gid_gone "$sock"; then pass "$link: ip addr del takes it out of droce gids"
  else bad "$link: 10.71.9.1 still a GID after ip addr del"; fi
  wait $epid
  if [ "$(grep -c GID_CHANGE "$work/events.txt")" -ge 2 ]; then pass "$link: a client got IBV_EVENT_GID_CHANGE for each"
  else bad "$link: GID change events"; sed 's/^/    /' "$work/events.txt"; fi
}

# link_flap: h1's eth0 down and straight up again, a few milliseconds apart, well inside
# droced's 50 ms look at the link: the kernel's link messages (netlink) must still let a client
# hear IBV_EVENT_PORT_ERR, then IBV_EVENT_PORT_ACTIVE, and the port end ACTIVE. The netdev's own
# flags, not its carrier: the kernel's linkwatch may fold a carrier drop and return shorter than
# its delay into one message, and then no one (rxe included) hears the flap. Last in a section:
# the kernel drops h1's routes through eth0 as it goes down.
link_flap() {
  local sock=/run/droce-lab/$name/h1/droce0.sock
  # Every event for 3 s: the kernel also takes h1's IPv6 address away as eth0 goes down (GID
  # changes come in between).
  start_watcher "$work/flap.txt" timeout 15 ip netns exec "$name-h1" "$droce" events --timeout 3 --socket "$sock" ||
    { bad "$link: droce events did not start"; return; }
  local epid=$WATCHER_PID
  local downs0 downs1
  downs0=$(inns h1 "$droce" counters --socket "$sock" | awk '$1 == "link_downs" {print $2}')
  inns h1 sh -c 'ip link set eth0 down && ip link set eth0 up'
  wait $epid
  downs1=$(inns h1 "$droce" counters --socket "$sock" | awk '$1 == "link_downs" {print $2}')
  if grep -A100 IBV_EVENT_PORT_ERR "$work/flap.txt" | grep -q IBV_EVENT_PORT_ACTIVE &&
     wait_for 5 sh -c "ip netns exec '$name-h1' '$droce' ports --socket '$sock' | grep -q ACTIVE"; then
    pass "$link: a link flap shorter than droced's look: IBV_EVENT_PORT_ERR, then IBV_EVENT_PORT_ACTIVE"
  else
    bad "$link: a short link flap (link_downs ${downs0:-?} -> ${downs1:-?}): $(tr '\n' ' ' <"$work/flap.txt")"
    tail -n 8 "/run/droce-lab/$name/h1.log" | sed 's/^/    /'
  fi
}

# bad_input: five garbage datagrams to h1's RoCE port and five RoCE frames for 10.71.1.99 (not
# h1's), sent by the router onto h1's segment; droced counts all ten somewhere and stays up.
dropped_total() {  # what h1's droced counted as not for it, or not RoCE
  inns h1 "$droce" counters --json --socket "/run/droce-lab/$name/h1/droce0.sock" | /usr/bin/python3 -c '
import json, sys
c = json.load(sys.stdin)
def walk(o, key=""):
    if isinstance(o, dict):
        return sum(walk(v, k) for k, v in o.items())
    if isinstance(o, list):
        return sum(walk(v, key) for v in o)
    return o if key in ("rx_bad_dest", "rx_unknown_qp", "roce_not_ours") else 0
print(walk(c) + sum(v for k, v in c.get("parse", {}).items() if k != "ok"))'
}
bad_input() {
  [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import scapy.contrib.roce" 2>/dev/null ||
    { echo "SKIP (part): bad input: no scapy (python3-scapy)"; return; }
  local mac before after
  mac=$(inns h1 cat /sys/class/net/eth0/address)
  before=$(dropped_total)
  ip netns exec "$name-sw" /usr/bin/python3 - "$mac" <<'PY'
import sys
from scapy.all import Ether, IP, UDP, Raw, sendp
from scapy.contrib.roce import BTH
mac = sys.argv[1]
sendp(Ether(dst=mac) / IP(src="10.71.1.1", dst="10.71.1.11") / UDP(sport=5000, dport=4791) / Raw(b"not RoCE at all"),
      iface="br1", count=5, verbose=False)
sendp(Ether(dst=mac) / IP(src="10.71.1.1", dst="10.71.1.99") / UDP(sport=49152, dport=4791) /
      BTH(opcode=0x04, dqpn=0x11, psn=1) / Raw(b"x" * 16), iface="br1", count=5, verbose=False)
PY
  sleep 0.3
  after=$(dropped_total)
  if [ $((after - before)) -ge 10 ] && inns h1 "$droce" ports --socket "/run/droce-lab/$name/h1/droce0.sock" >/dev/null; then
    pass "$link: 10 bad frames (not RoCE; RoCE for an address not droce's) counted ($before -> $after), droced serves on"
  else
    bad "$link: bad frames counted $before -> $after (want 10 more)"
  fi
}

for link in af_xdp af_packet packet; do
  echo "== $link: two subnets behind a router"
  if ! L up --hosts 2 --routed --link "$link" >"$work/up.txt" 2>&1; then
    bad "$link: the lab did not come up"
    sed 's/^/    /' "$work/up.txt"
    teardown
    continue
  fi
  noise1=$(kernel_noise "$name-h1")
  ipin1=$(inns h1 nstat -az IpInReceives | awk '/IpInReceives/ {print $2}')
  kernel_keeps_netdev "with droced running"
  a1=$("$lab" addr h1 --name "$name")
  if command -v ibv_rc_pingpong >/dev/null; then
    PORT=18515 pair "ibv_rc_pingpong -c" ibv_rc_pingpong -d droce0 -g 1 -n 200 -c -- ibv_rc_pingpong -d droce0 -g 1 -n 200 -c "$a1"
  fi
  if command -v ib_write_bw >/dev/null; then
    PORT=18515 pair "ib_write_bw (TCP exchange)" ib_write_bw -d droce0 -x 1 -n 500 -s 65536 -- ib_write_bw -d droce0 -x 1 -n 500 -s 65536 "$a1"
    if [ "$link" = packet ]; then
      # droce's packet socket sends each message as UDP GSO frames; the router forwards them
      # whole, and h1's link cuts them into the frames h2's engine built (ICRC checked after).
      gso=$(inns h1 "$droce" status --json --socket "/run/droce-lab/$name/h1/droce0.sock" | /usr/bin/python3 -c '
import json, sys
x = json.load(sys.stdin)["ports"][0]["xstats"]
print(x["rx_gso_frames"], x["rx_gso_segments"], x["rx_gso_refused"])' 2>/dev/null) || gso="? ? ?"
      read -r gf gs gr <<<"$gso"
      if [ "${gf:-0}" -gt 0 ] 2>/dev/null && [ "$gs" -gt "$gf" ] && [ "$gr" = 0 ]; then
        pass "$link: h1 received GSO frames across the router: $gf carrying $gs packets"
      else
        bad "$link: GSO frames at h1: $gso (frames, packets, refused)"
      fi
    fi
    pair "ib_write_bw -R (rdma_cm)" ib_write_bw -d droce0 -R -n 500 -s 4096 -- ib_write_bw -d droce0 -R -n 500 -s 4096 "$a1"
    # GID 2 is each host's IPv6 address: the kernel's IPv6 route and neighbour (ND) this time.
    PORT=18515 pair "ib_write_bw over IPv6 (GID 2)" ib_write_bw -d droce0 -x 2 -n 500 -s 4096 -- ib_write_bw -d droce0 -x 2 -n 500 -s 4096 "$a1"
  fi
  if command -v rping >/dev/null; then
    pair "rping -V" rping -s -V -C 20 -a 0.0.0.0 -- rping -c -V -C 20 -a "$a1"
    pair "ucmatose" ucmatose -p 7471 -c 4 -C 20 -- ucmatose -s "$a1" -p 7471 -c 4 -C 20
  fi
  if command -v ucx_perftest >/dev/null; then
    # UCT over rc_verbs, and UCP's tag matching over rc_verbs and ud_verbs: UCX's own address
    # exchange and address handles, routed.
    PORT=13337 pair "ucx_perftest rc_verbs put_bw" ucx_perftest -p 13337 -d droce0:1 -x rc_verbs -t put_bw -D zcopy -s 65536 -n 1000 -- \
      ucx_perftest -p 13337 -d droce0:1 -x rc_verbs -t put_bw -D zcopy -s 65536 -n 1000 "$a1"
    PORT=13338 pair "ucx_perftest UCP tag_bw" env UCX_TLS=rc_verbs,ud_verbs,self UCX_NET_DEVICES=droce0:1 \
      ucx_perftest -p 13338 -t tag_bw -s 65536 -n 500 -- \
      env UCX_TLS=rc_verbs,ud_verbs,self UCX_NET_DEVICES=droce0:1 ucx_perftest -p 13338 -t tag_bw -s 65536 -n 500 "$a1"
  fi
  kernel_keeps_netdev "after RDMA traffic"
  [ "$link" = packet ] && tcp_left_out
  if command -v ib_write_bw >/dev/null; then
    # And while it flows: 4 s of ib_write_bw across the router, the kernel's ping and TCP meanwhile.
    timeout 30 "$lab" exec h1 --name "$name" --build "$build" -- ib_write_bw -d droce0 -x 1 -s 4096 -D 4 \
      >"$work/bg_server.txt" 2>&1 &
    bgs=$!
    sleep 1
    timeout 30 "$lab" exec h2 --name "$name" --build "$build" -- ib_write_bw -d droce0 -x 1 -s 4096 -D 4 "$a1" \
      >"$work/bg_client.txt" 2>&1 &
    bgc=$!
    sleep 1.5
    kernel_keeps_netdev "while ib_write_bw runs"
    wait $bgc; st_c=$?
    wait $bgs; st_s=$?
    [ $st_c -eq 0 ] && [ $st_s -eq 0 ] && pass "$link: the ib_write_bw beside them finished ($(grep -A1 '#bytes' "$work/bg_client.txt" | tail -1 | tr -s ' '))" \
                                    || bad "$link: the ib_write_bw beside the kernel's traffic (client $st_c, server $st_s)"
  fi
  noise2=$(kernel_noise "$name-h1")
  if [ "$link" = af_packet ] || [ "$link" = packet ]; then
    # droce's TC filter drops RoCEv2 for h1's addresses after af_packet's tap took it: the
    # kernel's IP receive counted fewer packets than the filter kept from it (without the
    # filter it counts every one of them, and more).
    ipin2=$(inns h1 nstat -az IpInReceives | awk '/IpInReceives/ {print $2}')
    kept=$(inns h1 "$droce" counters --socket "/run/droce-lab/$name/h1/droce0.sock" | awk '$1 == "xdp.redirected" {print $2}')
    if inns h1 tc filter show dev eth0 ingress | grep -q droce_tc && [ -n "$kept" ] && [ "$kept" -gt 1000 ] &&
       [ $((ipin2 - ipin1)) -lt "$kept" ]; then
      pass "$link: the TC filter kept $kept RoCE frames from the kernel's IP receive (which counted $((ipin2 - ipin1)))"
    else
      bad "$link: TC filter: kept ${kept:-?}, IpInReceives grew by $((ipin2 - ipin1))"
    fi
  fi
  # `droce ports` names the filter that keeps the kernel off droce's frames ("none" would mean
  # droced found no program: the kernel then takes in every RoCE frame a second time).
  want_filter="tc droce_tc"
  [ "$link" = af_xdp ] && want_filter="xdp droce_xdp"
  filter=$(inns h1 "$droce" ports --json --socket "/run/droce-lab/$name/h1/droce0.sock" |
           python3 -c 'import json, sys; print(json.load(sys.stdin)[0].get("kernel_filter", "-"))')
  [ "$filter" = "$want_filter" ] && pass "$link: droce ports names the kernel filter ($filter)" \
                                 || bad "$link: droce ports: kernel_filter '$filter', want '$want_filter'"
  [ "$noise1" = "$noise2" ] && pass "$link: the kernel answered no RoCE packet (UdpNoPorts/unreachables $noise1)" \
                            || bad "$link: the kernel sent unreachables ($noise1 -> $noise2)"
  gid_follows
  bad_input
  if [ "$link" = af_xdp ]; then
    # A second droced on the same netdev refuses before the PMD could detach the first one's
    # program (its failed open would), and the first serves on.
    out=$(timeout 30 ip netns exec "$name-h1" "$build/apps/droced" --netdev eth0 --run-dir "$work/second" \
          --memory 256 --mbufs 8192 2>&1)
    if grep -q "already has an XDP program (droce_xdp)" <<<"$out" &&
       inns h1 ip -d link show dev eth0 | grep -q "name droce_xdp" &&
       inns h1 "$droce" ports --socket "/run/droce-lab/$name/h1/droce0.sock" >/dev/null; then
      pass "$link: a second droced on the same netdev refuses and leaves the first's program alone"
    else
      bad "$link: a second droced on the netdev: $(tail -2 <<<"$out")"
    fi
  fi
  # A gateway that never answers: rdma_cm says so (address or route error), droced stays up.
  inns h2 ip route add 10.99.0.0/24 via 10.71.2.250
  out=$(timeout 30 "$lab" exec h2 --name "$name" --build "$build" -- rping -c -C 1 -a 10.99.0.1 2>&1)
  # The same, given up after a second (the program killed while the kernel still resolves): the
  # abandoned next hop must not keep droced from sleeping (loops per second stay those of an idle
  # droced, a few hundred, not a spinning one's hundreds of thousands).
  timeout -s KILL 1 "$lab" exec h2 --name "$name" --build "$build" -- rping -c -C 1 -a 10.99.0.7 >/dev/null 2>&1
  sleep 0.2
  l1=$(inns h2 "$droce" cores --json --socket "/run/droce-lab/$name/h2/droce0.sock" | tr ',' '\n' | sed -n 's/.*"loops":\([0-9]*\).*/\1/p' | head -1)
  sleep 1
  l2=$(inns h2 "$droce" cores --json --socket "/run/droce-lab/$name/h2/droce0.sock" | tr ',' '\n' | sed -n 's/.*"loops":\([0-9]*\).*/\1/p' | head -1)
  if [ -n "$l1" ] && [ -n "$l2" ] && [ $((l2 - l1)) -lt 20000 ]; then
    pass "$link: an abandoned resolution lets droced sleep ($((l2 - l1)) loops in a second)"
  else
    bad "$link: droced looped $((${l2:-0} - ${l1:-0})) times in an idle second after an abandoned resolution"
  fi
  inns h2 ip route del 10.99.0.0/24 via 10.71.2.250
  if grep -qE "ADDR_ERROR|ROUTE_ERROR|UNREACHABLE" <<<"$out" &&
     inns h2 "$droce" ports --socket "/run/droce-lab/$name/h2/droce0.sock" >/dev/null 2>&1; then
    pass "$link: a silent gateway: $(grep -oE 'RDMA_CM_EVENT_[A-Z_]+' <<<"$out" | head -1), droced stays up"
  else
    bad "$link: a silent gateway"
    echo "$out" | tail -3 | sed 's/^/    /'
  fi
  link_flap
  for h in h1 h2; do
    if ! kill -0 "$(cat /run/droce-lab/$name/$h.pid)" 2>/dev/null; then
      bad "$link: droced on $h exited"; tail -5 "/run/droce-lab/$name/$h.log" | sed 's/^/    /'
    fi
  done
  if [ "$link" = af_packet ] || [ "$link" = packet ]; then
    # A droced that stops takes its TC filter along: the kernel gets RoCE for h1 again.
    p1=$(cat "/run/droce-lab/$name/h1.pid")
    kill -TERM "$p1" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$p1" 2>/dev/null || break; sleep 0.1; done
    if ! kill -0 "$p1" 2>/dev/null && ! inns h1 tc filter show dev eth0 ingress | grep -q droce_tc; then
      pass "$link: droced's exit removed its TC filter"
    else
      bad "$link: after droced's exit: $(inns h1 tc filter show dev eth0 ingress | tr '\n' ' ')"
    fi
  fi
  teardown
done

echo "== packet, without droce's TC program: droce ports says so, and the kernel still keeps its netdev"
# A droced that finds no filter program (a build without clang, a program deleted) runs on: the
# kernel then takes in every RoCE frame a second time, and drops it (droced's UDP 4791 socket
# keeps it from answering unreachable). `droce ports` must say "none" so that a user can tell.
link=packet-nofilter
if env DROCE_XDP_PROG=/nonexistent "$lab" up --hosts 2 --routed --link packet --name "$name" --build "$build" \
     >"$work/up.txt" 2>&1; then
  filter=$(inns h1 "$droce" ports --json --socket "/run/droce-lab/$name/h1/droce0.sock" |
           python3 -c 'import json, sys; print(json.load(sys.stdin)[0].get("kernel_filter", "-"))')
  [ "$filter" = none ] && pass "$link: droce ports names no kernel filter (none)" \
                       || bad "$link: droce ports: kernel_filter '$filter', want 'none'"
  inns h1 tc filter show dev eth0 ingress | grep -q droce_tc && bad "$link: a droce_tc filter is on eth0"
  noise1=$(kernel_noise "$name-h1")
  a1=$("$lab" addr h1 --name "$name")
  if command -v ib_write_bw >/dev/null; then
    PORT=18515 pair "ib_write_bw (TCP exchange)" ib_write_bw -d droce0 -x 1 -n 500 -s 65536 -- \
      ib_write_bw -d droce0 -x 1 -n 500 -s 65536 "$a1"
  fi
  kernel_keeps_netdev "after RDMA traffic"
  noise2=$(kernel_noise "$name-h1")
  [ "$noise1" = "$noise2" ] && pass "$link: the kernel answered no RoCE packet (UdpNoPorts/unreachables $noise1)" \
                            || bad "$link: the kernel sent unreachables ($noise1 -> $noise2)"
else
  bad "$link: the lab did not come up"
  sed 's/^/    /' "$work/up.txt"
fi
teardown

echo "== own addresses (af_packet), static routes through the router"
link=own
if L up --hosts 2 --routed --no-droced >"$work/up.txt" 2>&1; then
  for i in 1 2; do
    ip -n "$name-sw" addr add "10.72.$i.1/24" dev "br$i"
    droced_spawn "$name-h$i" "/run/droce-lab/$name/h$i" "/run/droce-lab/$name/h$i.log" "$build/apps/droced" \
      --port "net_af_packet_own$i,iface=eth0" --address "10.72.$i.$((10 + i))/24" --route "default via 10.72.$i.1" \
      --memory 256 --mbufs 8192
    echo "$DROCED_PID" >"/run/droce-lab/$name/h$i.pid"
  done
  for i in 1 2; do
    wait_unix_socket "/run/droce-lab/$name/h$i/droce0.sock"
  done
  a1=$("$lab" addr h1 --name "$name")
  if command -v ibv_rc_pingpong >/dev/null; then
    PORT=18515 pair "ibv_rc_pingpong -c (droce's own GIDs)" ibv_rc_pingpong -d droce0 -g 1 -n 200 -c -- \
      ibv_rc_pingpong -d droce0 -g 1 -n 200 -c "$a1"
  fi
  if command -v ib_write_bw >/dev/null; then
    PORT=18515 pair "ib_write_bw (droce's own GIDs)" ib_write_bw -d droce0 -x 1 -n 500 -s 65536 -- \
      ib_write_bw -d droce0 -x 1 -n 500 -s 65536 "$a1"
  fi
  arp=$(ip netns exec "$name-sw" ip neigh show 10.72.1.11 dev br1)
  grep -q lladdr <<<"$arp" && pass "own: the router learned droce's address from droce's ARP reply: $arp" \
                            || bad "own: the router has no neighbour entry for 10.72.1.11: $arp"
  teardown
else
  bad "own: the lab did not come up"
fi

echo "== four hosts in two subnets behind the router: MPI over UCX, a rank on each"
link=mpi
mpi_check=$build/tests/real_clients/mpi_check
if ! command -v mpirun >/dev/null || [ ! -x "$mpi_check" ]; then
  echo "SKIP (part): MPI over four hosts: no mpirun (openmpi-bin) or no mpi_check built (libopenmpi-dev)"
elif L up --hosts 4 --routed --link af_xdp >"$work/up.txt" 2>&1; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  hosts=$(for i in 1 2 3 4; do printf '%s,' "$("$lab" addr h$i --name "$name")"; done)
  timeout 300 ip netns exec "$name-h1" mpirun --mca plm_rsh_agent "$lab rsh --name $name --build $build" \
    -H "${hosts%,}" -np 4 --mca pml ucx --mca osc ucx --mca btl self --mca coll '^hcoll' \
    -x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_NET_DEVICES=droce0:1 -x UCX_WARN_UNUSED_ENV_VARS=n \
    "$lab" rank --name "$name" --build "$build" -- "$mpi_check" >"$work/mpi.txt" 2>&1
  st=$?
  quiet=1
  for i in 1 2 3 4; do
    rx=$(inns h$i "$droce" counters --json --socket "/run/droce-lab/$name/h$i/droce0.sock" |
         tr ',{}' '\n\n\n' | sed -n 's/^"rx_frames":\([0-9]*\)$/\1/p')
    [ "${rx:-0}" -gt 0 ] || quiet=0
  done
  if [ $st -eq 0 ] && grep -qE '^mpi_check: [0-9]+ checks, 0 failures$' "$work/mpi.txt" && [ $quiet = 1 ]; then
    pass "mpi: $(grep -E '^mpi_check:' "$work/mpi.txt"), 4 ranks on 4 hosts, every droced received frames"
  else
    bad "mpi: mpi_check over four hosts (exit $st, frames on every host: $quiet)"
    # What failed first (a rank's or an orted's signal, UCX's or droce's error), then the end.
    grep -nE -m 10 'signal|Segmentation|ERROR|error:|Error|Killed|ASan|AddressSanitizer' "$work/mpi.txt" | sed 's/^/    /'
    tail -15 "$work/mpi.txt" | sed 's/^/    /'
  fi
  teardown
else
  bad "mpi: the four-host lab did not come up"
fi

if [ $fails -ne 0 ]; then
  echo "$fails failures"
  exit 1
fi
echo "all lab checks passed"
