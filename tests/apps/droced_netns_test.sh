#!/usr/bin/env bash
# Two droced hosts in two network namespaces joined by a veth pair, over the kernel-netdev PMDs
# net_af_packet and net_af_xdp (root only; the test creates and removes everything it uses).
#
#   droced_netns_test.sh DROCED SELFTEST DROCE [PMD...]
#
# For each PMD (default: net_af_packet net_af_xdp):
#   - MTU 1500: ARP and ND, then droce-selftest (RC SEND/WRITE/READ/atomics, SRQ, UD both ways,
#     16 QP pairs, every byte checked) over IPv4 and over IPv6 at the port's path MTU (1024);
#     frames woke both daemons from their sleeps through the port's descriptor (the RX queue's
#     own socket: wakeups_by_port > 0 in `droce cores --json`);
#     the kernel, which also owns B's IPv4 address here, must not answer a single RoCE packet
#     (UdpNoPorts and ICMP unreachables unchanged in B's namespace); link down on B's veth end:
#     both ports go DOWN and a client of A gets IBV_EVENT_PORT_ERR, then up: ACTIVE,
#     IBV_EVENT_PORT_ACTIVE, and traffic passes again. On af_packet also the distro's
#     ibv_rc_pingpong (data checked), ib_write_bw, ib_send_lat and ib_read_bw across the
#     namespaces through droce's provider, their TCP exchange over the same veth.
#   - jumbo: MTU 9000 for af_packet (path MTU 4096). af_xdp cannot carry 9000 on a veth (the
#     kernel refuses an XDP program on a veth whose peer's MTU exceeds a page, and DPDK 22.11's
#     af_xdp frames are one page): droced must refuse to start with the reason, and the test
#     then runs at 3500, the most a veth with XDP carries (path MTU 2048).
#     Both over IPv4 and IPv6, on VLAN 100.
#   - af_packet with two lcores on two queue pairs (qpairs=2): three selftests at once; each
#     worker polls its own queue and frames reach their QP's worker (handed over), none dropped.
#   - SIGTERM: both daemons exit 0.
# Exit 77 (skip) without root or network namespaces; a PMD the kernel refuses is reported and
# skipped, the others still run.
set -uo pipefail

if [ $# -lt 3 ]; then
  echo "usage: $0 DROCED SELFTEST DROCE [PMD...]" >&2
  exit 2
fi
droced=$(realpath "$1")
selftest=$(realpath "$2")
droce=$(realpath "$3")
shift 3
pmds=("$@")
[ ${#pmds[@]} -eq 0 ] && pmds=(net_af_packet net_af_xdp)

# shellcheck source=scripts/lib/netns.sh
. "$(dirname "$0")/../../scripts/lib/netns.sh"

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces, veth, af_packet/af_xdp sockets)"
command -v ip >/dev/null || skip "needs ip (iproute2)"

tag=$$
nsa=droce-a-$tag
nsb=droce-b-$tag
work=$(mktemp -d /tmp/droced-netns.XXXXXX)
on_exit rm -rf "$work"
# DPDK 22.11's af_xdp never frees its umem on close (tests/net/port_test.cc): not droce's leak.
export LSAN_OPTIONS="suppressions=$work/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
echo "leak:xsk_umem__create" >"$work/lsan.supp"

fails=0
pass() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

pids=()
# stop_daemons: SIGTERM to both droced; 0 if both exited 0.
stop_daemons() {
  local rc=0
  droced_stop "${pids[@]}" || rc=$?
  pids=()
  return $rc
}
on_exit netns_del "$nsa" "$nsb"
on_exit kill_jobs KILL  # the daemons, if the test ends between start_daemons and stop_daemons

# A fresh pair of namespaces with veth ends va (in A) and vb (in B) at MTU $1.
make_link() {
  netns_del "$nsa" "$nsb"
  netns_add "$nsa" "$nsb" || skip "cannot create network namespaces"
  veth_add "$nsa" va "$nsb" vb || skip "cannot create a veth pair"
  link_up "$nsa" va --mtu "$1" && link_up "$nsb" vb --mtu "$1"
}

# Starts droced in each namespace: start_daemons PMD [droced flags...]. Returns 1 (with A's
# log in $work/a.log) if either does not come up.
start_daemons() {
  local pmd=$1 side ns dev ip4 ip6 run st
  shift
  for side in a b; do
    if [ $side = a ]; then ns=$nsa dev=va ip4=10.78.0.1 ip6=fd00:78::1; else ns=$nsb dev=vb ip4=10.78.0.2 ip6=fd00:78::2; fi
    run=$work/$side
    rm -rf "$run"
    droced_start "$ns" "$run" "$work/$side.log" "$droced" --port "${pmd}_${side}${tag},iface=$dev${devargs_extra:-}" \
      --address $ip4 --address $ip6 --memory 256 --mbufs 8192 "$@"
    st=$?
    pids+=("$DROCED_PID")
    [ $st -eq 0 ] || return 1
  done
}

sock_a() { echo "$work/a/droce0.sock"; }
sock_b() { echo "$work/b/droce0.sock"; }

# A port's field from `droce ports --json` (one port): port_field SOCK state|mtu
port_field() {
  "$droce" ports --json --socket "$1" | python3 -c \
    "import json,sys; print(json.load(sys.stdin)[0]['$2'])"
}

# run_selftest WHAT GID_INDEX: the full selftest, 16 QP pairs, at the ports' path MTU.
run_selftest() {
  local what=$1 out
  out=$("$selftest" --a "$(sock_a)" --b "$(sock_b)" --qps 16 --gid-index "$2" --mtu port 2>&1)
  if [ $? -eq 0 ] && grep -q "ok: 0 failures" <<<"$out"; then
    pass "$what: $(head -1 <<<"$out")"
  else
    bad "$what"
    echo "$out" | grep -v '^PASS' | sed 's/^/    /'
  fi
}

# wait_port SOCK STATE: up to 5 s for the port to reach STATE.
port_in_state() { [ "$(port_field "$1" state 2>/dev/null)" = "$2" ]; }
wait_port() { wait_for 5 port_in_state "$1" "$2"; }

# Unmodified verbs programs across the namespaces, through droce's provider (droce exec), with
# their TCP exchange over the same veth: with af_packet the kernel shares the link (and the MAC)
# with droce, owns the same addresses, carries the TCP, and stays out of the RoCE traffic.
verbs_programs() {
  local module out
  module=$(ls "$(dirname "$droce")"/../provider/verbs/libdroce-rdmav*.so 2>/dev/null | head -1)
  if [ -z "$module" ] || ! command -v ib_write_bw >/dev/null || ! command -v ibv_rc_pingpong >/dev/null; then
    echo "SKIP verbs programs: no provider module next to $droce, or perftest/ibverbs-utils missing"
    return
  fi
  ip -n "$nsa" addr add 10.78.0.1/24 dev va
  run_pair "ibv_rc_pingpong -c" ibv_rc_pingpong -d droce0 -g 1 -n 200 -c
  run_pair "ib_write_bw" ib_write_bw -d droce0 -x 1 -n 200 -s 65536
  run_pair "ib_send_lat" ib_send_lat -d droce0 -x 1 -n 200 -s 64
  run_pair "ib_read_bw" ib_read_bw -d droce0 -x 1 -n 200 -s 4096
}

# run_pair WHAT PROGRAM ARGS...: the server in A's namespace on host A, the client in B's.
run_pair() {
  local what=$1 spid st_s st_c
  shift
  ip netns exec "$nsa" "$droce" exec --run-dir "$work/a" -- "$@" >"$work/server.txt" 2>&1 &
  spid=$!
  sleep 1
  timeout 60 ip netns exec "$nsb" "$droce" exec --run-dir "$work/b" -- "$@" 10.78.0.1 >"$work/client.txt" 2>&1
  st_c=$?
  wait $spid
  st_s=$?
  if [ $st_c -eq 0 ] && [ $st_s -eq 0 ]; then
    pass "$pmd: $what between the namespaces: $(grep -E '^ *[0-9]+ +[0-9]+|bytes in' "$work/client.txt" | tail -1 | tr -s ' ')"
  else
    bad "$pmd: $what between the namespaces (client $st_c, server $st_s)"
    tail -5 "$work/client.txt" "$work/server.txt" | sed 's/^/    /'
  fi
}

for pmd in "${pmds[@]}"; do
  echo "== $pmd, MTU 1500"
  make_link 1500 || { bad "$pmd: cannot set MTU 1500"; continue; }
  # The kernel owns B's IPv4 address too, as on a host that shares its NIC with droce.
  ip -n "$nsb" addr add 10.78.0.2/24 dev vb
  if ! start_daemons "$pmd"; then
    if [ "$pmd" = net_af_xdp ] && grep -qi "xdp" "$work/a.log" "$work/b.log"; then
      echo "SKIP $pmd: the kernel refused it:"
      sed 's/^/    /' "$work/a.log" | tail -5
      stop_daemons
      continue
    fi
    bad "$pmd: droced did not start"
    tail -20 "$work/a.log" "$work/b.log" | sed 's/^/    /'
    stop_daemons
    continue
  fi
  noise_before=$(kernel_noise "$nsb")
  run_selftest "$pmd MTU 1500 IPv4" 1
  run_selftest "$pmd MTU 1500 IPv6" 2
  # GID 0 is the link-local address, which the kernel derives from the same MAC: it owns it too.
  run_selftest "$pmd MTU 1500 IPv6 link-local" 0
  # Waking up: a frame wakes a sleeping droced through the RX queue's own kernel socket, the
  # TPACKET_V2 socket on af_packet and the XSK socket on af_xdp (net/port.h, RX interrupts), not a
  # timer: each worker counts the sleeps its port's descriptor ended (wakeups_by_port).
  wakes=$(for s in "$(sock_a)" "$(sock_b)"; do
    "$droce" cores --json --socket "$s" | python3 -c 'import json,sys; print(sum(c["wakeups_by_port"] for c in json.load(sys.stdin)))'
  done | tr '\n' ' ')
  read -r wa wb <<<"$wakes"
  [ "${wa:-0}" -gt 0 ] && [ "${wb:-0}" -gt 0 ] && pass "$pmd: frames woke both sleeping daemons ($wa, $wb times)" ||
    bad "$pmd: no frame woke a sleeping daemon (wake-ups by the port: A ${wa:-?}, B ${wb:-?})"
  noise_after=$(kernel_noise "$nsb")
  if [ "$noise_before" = "$noise_after" ]; then
    pass "$pmd: the kernel answered none of the RoCE packets to its own addresses"
  else
    bad "$pmd: the kernel counted $((noise_after - noise_before)) UDP no-port drops / ICMP unreachables"
  fi
  mtu=$(port_field "$(sock_a)" mtu)
  [ "$mtu" = 1500 ] && pass "$pmd: port MTU 1500" || bad "$pmd: port MTU $mtu, not 1500"
  [ "$pmd" = net_af_packet ] && verbs_programs

  # Link down and up on B's end of the veth.
  start_watcher "$work/events.txt" "$droce" events --socket "$(sock_a)" --count 2 --timeout 20 ||
    bad "$pmd: droce events did not start watching"
  watcher=$WATCHER_PID
  ip -n "$nsb" link set vb down
  if wait_port "$(sock_b)" DOWN && wait_port "$(sock_a)" DOWN; then
    pass "$pmd: link down on vb: both ports DOWN"
  else
    bad "$pmd: link down on vb: ports $(port_field "$(sock_a)" state) / $(port_field "$(sock_b)" state)"
  fi
  # droced looks at the link every 50 ms (a veth has no link-change interrupt): up again before
  # it looked, the flap would pass unseen, as on a NIC without LSC. Up once the client heard.
  wait_for 20 grep -q IBV_EVENT_PORT_ERR "$work/events.txt" || true
  ip -n "$nsb" link set vb up
  if wait_port "$(sock_b)" ACTIVE && wait_port "$(sock_a)" ACTIVE; then
    pass "$pmd: link up again: both ports ACTIVE"
  else
    bad "$pmd: link up on vb: ports $(port_field "$(sock_a)" state) / $(port_field "$(sock_b)" state)"
  fi
  wait $watcher
  if grep -q "IBV_EVENT_PORT_ERR" "$work/events.txt" && grep -q "IBV_EVENT_PORT_ACTIVE" "$work/events.txt"; then
    pass "$pmd: a client got IBV_EVENT_PORT_ERR then IBV_EVENT_PORT_ACTIVE"
  else
    bad "$pmd: port events: $(tr '\n' ' ' <"$work/events.txt")"
    # Which side failed: droced never saw the change (no "port link" line, link_downs 0), or saw it
    # and the client heard nothing.
    grep -E "port link" "$work/a.log" | tail -4 | sed 's/^/    A: /'
    "$droce" counters --socket "$(sock_a)" 2>&1 | grep -E "^(link_downs|clients_accepted|clients_closed) " | sed 's/^/    A: /'
  fi
  run_selftest "$pmd after the link came back, IPv4" 1
  stop_daemons && pass "$pmd: both daemons stopped cleanly on SIGTERM" || bad "$pmd: a daemon's exit status was not 0"

  if [ "$pmd" = net_af_packet ]; then
    # Two lcores on two queue pairs: the kernel's fanout spreads flows (one UDP source port per
    # QP) over both sockets, so frames reach the worker that does not own their QP and are handed
    # over. Three selftests at once put contexts on both workers of each daemon.
    echo "== $pmd, two lcores on two queue pairs (qpairs=2)"
    make_link 1500
    if devargs_extra=",qpairs=2" start_daemons "$pmd" --lcores 0,1; then
      spids=()
      for i in 1 2 3; do
        "$selftest" --a "$(sock_a)" --b "$(sock_b)" --qps 16 --gid-index 1 --mtu port >"$work/lc$i.txt" 2>&1 &
        spids+=($!)
      done
      ok=0
      for i in 1 2 3; do
        wait "${spids[$((i - 1))]}" && grep -q "ok: 0 failures" "$work/lc$i.txt" && ok=$((ok + 1))
      done
      [ $ok = 3 ] && pass "$pmd, 2 lcores: three selftests at once" || bad "$pmd, 2 lcores: $ok of 3 selftests passed"
      verdict=$("$droce" cores --json --socket "$(sock_a)" | python3 -c '
import json, sys
c = json.load(sys.stdin)
got = "cores %d, rx queues %s, handed in %d, dropped %d" % (
    len(c), [x["rx_queue"] for x in c], sum(x["handed_in"] for x in c), sum(x["hand_off_dropped"] for x in c))
good = len(c) == 2 and [x["rx_queue"] for x in c] == ["0", "1"] and sum(x["handed_in"] for x in c) > 0 \
    and sum(x["hand_off_dropped"] for x in c) == 0
print(("ok " if good else "bad ") + got)')
      if [ "${verdict%% *}" = ok ]; then
        pass "$pmd, 2 lcores: each polls its own queue, frames handed between them: ${verdict#ok }"
      else
        bad "$pmd, 2 lcores: ${verdict#bad }"
      fi
    else
      bad "$pmd: droced did not start with --lcores 0,1 and qpairs=2"
      tail -20 "$work/a.log" | sed 's/^/    /'
    fi
    stop_daemons && pass "$pmd, 2 lcores: both daemons stopped cleanly on SIGTERM" || bad "$pmd, 2 lcores: a daemon's exit status was not 0"
  fi

  jumbo=9000
  want_mtu=4096
  if [ "$pmd" = net_af_xdp ]; then
    echo "== $pmd, MTU 9000 (refused: a veth carries XDP only below a page)"
    make_link 9000
    if start_daemons "$pmd"; then
      bad "$pmd: droced started on a 9000-byte veth that cannot carry its frames"
    elif grep -q "an XDP program carries frames of one page" "$work/a.log"; then
      # droced's own explanation (libbpf's "Peer MTU is too large" alone would not do).
      pass "$pmd: droced refused MTU 9000: $(grep -m1 'an XDP program carries' "$work/a.log")"
    else
      bad "$pmd: droced did not start on MTU 9000 and did not say why"
      tail -5 "$work/a.log" | sed 's/^/    /'
    fi
    stop_daemons
    jumbo=3500
    want_mtu=2048
  fi
  echo "== $pmd, MTU $jumbo, VLAN 100"
  make_link $jumbo || { bad "$pmd: cannot set MTU $jumbo"; continue; }
  if ! start_daemons "$pmd" --vlan 100; then
    bad "$pmd: droced did not start at MTU $jumbo"
    tail -20 "$work/a.log" | sed 's/^/    /'
    stop_daemons
    continue
  fi
  active=$("$droce" ports --json --socket "$(sock_a)" | python3 -c "import json,sys; print(json.load(sys.stdin)[0]['mtu'])")
  pass "$pmd: MTU $jumbo link, droce port MTU $active"
  out=$("$selftest" --a "$(sock_a)" --b "$(sock_b)" --qps 16 --gid-index 1 --mtu port 2>&1)
  if [ $? -eq 0 ] && grep -q "path MTU $want_mtu" <<<"$out" && grep -q "ok: 0 failures" <<<"$out"; then
    pass "$pmd MTU $jumbo VLAN 100 IPv4: $(head -1 <<<"$out")"
  else
    bad "$pmd MTU $jumbo VLAN 100 IPv4 (want path MTU $want_mtu)"
    echo "$out" | grep -v '^PASS' | sed 's/^/    /'
  fi
  run_selftest "$pmd MTU $jumbo VLAN 100 IPv6" 2
  stop_daemons && pass "$pmd: both daemons stopped cleanly on SIGTERM" || bad "$pmd: a daemon's exit status was not 0"
done

if [ $fails -ne 0 ]; then
  echo "$fails failures"
  exit 1
fi
echo "all passed"
