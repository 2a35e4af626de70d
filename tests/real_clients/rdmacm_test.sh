#!/usr/bin/env bash
# rdma_cm programs over droce (issue #15): Debian's unmodified rdmacm-utils (rping, ucmatose,
# udaddy, rdma_server/rdma_client, rstream, riostream) and perftest's -R (connection through
# rdma_cm) for every tool, between two droce hosts (two droced on droce's same-host link) and
# over one droced's loopback, each program started through `droce exec` of its host as a user
# would. Then the errors a user meets, as the kernel gives them: a port nobody listens on
# (REJECTED 8), a UD service nobody offers (UNREACHABLE 1), an address nobody owns (ADDR_ERROR
# after the program's timeout), a peer killed mid-connection (DISCONNECTED on the survivor).
# Last, as root, two hosts in two network namespaces over net_af_packet on a veth pair whose
# kernel interfaces own the same addresses (so programs with a TCP side channel have one that
# stays inside the namespaces): the rdmacm-utils again, qperf -cm1 (its RC and RDMA tests; its UD
# tests build address handles without a GRH, which no RoCE device takes, and ignore -cm1),
# libfabric's verbs provider (fi_pingpong with data checks: MSG endpoints through rdma_cm, RDM
# over verbs;ofi_rxm, DGRAM) and rcopy (a file over rsockets, compared byte for byte).
#
#   rdmacm_test.sh DROCE DROCED PAIR_LIB [CM_CHANNELS]
#
# The pair runs with --cm-channels 64: CM_CHANNELS (tests/real_clients/cm_channels.c) checks that
# a process gets exactly that many event channels, the next fails with EMFILE, and closing them
# gives the room back; and that a thread waiting in rdma_get_cm_event stays waiting when another
# thread closes its channel, as the kernel's does (Debian 12's rping depends on it), and gets an
# event that was due on it (10.77.0.98, which nobody owns: ADDR_ERROR; not .99, whose failed
# resolution error.no_such_address expects to be the first: a neighbour that failed answers the
# next resolve with -113 at once, as the kernel's does).
#
# Each case asserts both programs' exit status and what they print (the last verified rping
# payload, "return status 0", perftest's result line). A server is started first and the client
# only once `droce cm` shows the server's listener. Skips (77) when rdmacm-utils or perftest are
# missing. DROCE_RDMACM_CASES=REGEX runs only the cases whose name matches.
set -uo pipefail

if [ $# -ne 3 ] && [ $# -ne 4 ]; then
  echo "usage: $0 DROCE DROCED PAIR_LIB [CM_CHANNELS]" >&2
  exit 2
fi
droce=$(realpath "$1")
droced=$(realpath "$2")
pair_lib=$(realpath "$3")
cm_channels=${4:-}
# timeout(1) that prints a stuck program's stacks first
deadline=$(dirname "$(realpath "$0")")/deadline.sh

skip() { echo "SKIP: $*"; exit 77; }
command -v rping >/dev/null || skip "rping not installed (Debian package rdmacm-utils)"
command -v ib_send_bw >/dev/null || skip "ib_send_bw not installed (Debian package perftest)"

tmp=$(mktemp -d /tmp/droce-rdmacm-test.XXXXXX)
fail=0
# shellcheck source=scripts/lib/droced-pair.sh
. "$pair_lib"  # and scripts/lib/netns.sh
DROCE_BIN=$droce  # for wait_cm_listen
on_exit rm -rf "$tmp"
on_exit droced_pair_stop
on_exit kill_jobs KILL

droced_pair_start "$(dirname "$droced")" "$tmp/hosts" --mtu 9000 --cm-channels 64 || exit 1
declare -A ip=([a]=10.77.0.1 [b]=10.77.0.2)
declare -A netns=([a]="" [b]="")
hosts=$tmp/hosts
on() {  # on HOST COMMAND...: run COMMAND on droce host a or b (in its namespace, if any)
  in_netns "${netns[$1]}" "$droce" exec --run-dir "$hosts/$1" -- "${@:2}"
}

# Waits (10 s at most) until droced of HOST has a listening rdma_cm id on PORT.
wait_listener() { wait_cm_listen "$hosts/$1/droce0.sock" "$2"; }

# Waits (10 s at most) until droced of HOST has a QP attached to multicast GROUP.
# shellcheck disable=SC2317 # called by wait_for
in_group() {
  "$droce" multicast --json --socket "$hosts/$1/droce0.sock" 2>/dev/null | grep -q "\"group\":\"$2\""
}
wait_group() { wait_for 10 in_group "$1" "$2"; }

selected() { [ -z "${DROCE_RDMACM_CASES:-}" ] || [[ $1 =~ $DROCE_RDMACM_CASES ]]; }

report() {  # report NAME WHY CLIENT_LOG SERVER_LOG
  if [ -z "$2" ]; then
    echo "ok: $1"
  else
    echo "FAIL: $1:$2"
    echo "--- client"; "$deadline" --show "$3"
    echo "--- server"; "$deadline" --show "$4"
    fail=1
  fi
}

# rping_teardown_race LOG STATUS: Debian 12's rping (rdma-core 44) destroys its event channel
# while its CM thread may be between two rdma_get_cm_event calls; that thread's next call then
# fails with EBADF and rping exits 255 after a complete run, with the kernel's rdma_cm as with
# droce's (rdma-core f3ae6534 stops the thread first). True when LOG shows exactly that: a
# disconnect after the run, then that error as the last line.
rping_teardown_race() {
  [ "$2" -eq 255 ] && grep -q 'DISCONNECT EVENT' "$1" &&
    [ "$(tail -n 1 "$1")" = 'rdma_get_cm_event: Bad file descriptor' ] &&
    echo "  (rping's own teardown race in $(basename "$1"): exit 255 after a complete run, taken as 0)"
}

port=18500
# pair NAME SERVER_HOST CLIENT_HOST 'SERVER ARGS' 'CLIENT ARGS' CLIENT_PATTERN [SERVER_PATTERN [LISTEN]]
# The server's arguments may say @PORT and @SERVER (its address); the client's too. LISTEN says
# what shows the server is ready: rdma_cm (default: its listener in `droce cm`), tcp (a TCP
# listener in its namespace), rsocket (an rdma_cm listener on the port, made by rsockets) or
# mcast:GROUP (a QP of its host attached to GROUP, in `droce multicast`).
pair() {
  local name=$1 s=$2 c=$3 sargs=$4 cargs=$5 cpat=$6 spat=${7:-} listen=${8:-rdma_cm}
  selected "$name" || return 0
  port=$((port + 1))
  sargs=${sargs//@PORT/$port}; sargs=${sargs//@SERVER/${ip[$s]}}
  cargs=${cargs//@PORT/$port}; cargs=${cargs//@SERVER/${ip[$s]}}
  local slog=$tmp/$name.server clog=$tmp/$name.client lport=$port why crc src server
  # udaddy has no port option: it listens on rping's 7174.
  [[ $sargs == udaddy* ]] && lport=7174
  # perftest -R connects twice and its server listens anew for the second connection: droced's CM
  # holds a REQ that comes between the two listens (cm::Agent::stop_listening).
  # shellcheck disable=SC2086
  on "$s" "$deadline" 120 stdbuf -o0 $sargs >"$slog" 2>&1 &
  server=$! why="" crc=0 src=0
  if [ "$listen" = tcp ]; then
    wait_tcp_listen "${netns[$s]}" "$lport"
  elif [[ $listen == mcast:* ]]; then
    wait_group "$s" "${listen#mcast:}" || why+=" the receiver never joined;"
  else
    wait_listener "$s" "$lport" || why+=" the server never listened;"
  fi
  # shellcheck disable=SC2086
  on "$c" "$deadline" 100 stdbuf -o0 $cargs >"$clog" 2>&1 || crc=$?
  # A client that failed leaves its server waiting for it: 5 s, then it is stopped.
  if [ "$crc" -ne 0 ]; then
    for _ in $(seq 100); do kill -0 "$server" 2>/dev/null || break; sleep 0.05; done
    kill "$server" 2>/dev/null
  fi
  wait "$server" || src=$?
  rping_teardown_race "$clog" "$crc" && crc=0
  rping_teardown_race "$slog" "$src" && src=0
  [ "$crc" -eq 0 ] || why+=" client exit $crc;"
  [ "$src" -eq 0 ] || why+=" server exit $src;"
  grep -Eq -- "$cpat" "$clog" || why+=" client output lacks /$cpat/;"
  [ -z "$spat" ] || grep -Eq -- "$spat" "$slog" || why+=" server output lacks /$spat/;"
  report "$name" "$why" "$clog" "$slog"
}

done_ok='return status 0'
for where in "b a" "a a"; do
  read -r s c <<<"$where"
  tag=$([ "$s" = "$c" ] && echo loopback || echo two-hosts)
  # rping verifies every payload (-V) both ways; the client prints the last one.
  pair "$tag.rping" "$s" "$c" "rping -s -a @SERVER -p @PORT -V -C 1000" "rping -c -a @SERVER -p @PORT -V -C 1000 -v" \
    'ping data: rdma-ping-999: '
  pair "$tag.ucmatose" "$s" "$c" "ucmatose -p @PORT -c 8 -C 50" "ucmatose -s @SERVER -p @PORT -c 8 -C 50" \
    "$done_ok" "$done_ok"
  pair "$tag.udaddy" "$s" "$c" "udaddy -c 4 -C 50" "udaddy -s @SERVER -c 4 -C 50" "$done_ok" "$done_ok"
  # mckey: UD multicast through rdma_join_multicast; the receiver counts every datagram (one lost
  # would leave it waiting). On one host the sender's frames reach the receiver through droced's
  # multicast loopback.
  group=239.77.0.$([ "$tag" = loopback ] && echo 1 || echo 2)
  pair "$tag.mckey" "$s" "$c" "mckey -m $group -C 100" "mckey -m $group -s -C 100" "$done_ok" \
    "data transfers complete" "mcast:$group"
  # -l: QPs made with IBV_QP_CREATE_BLOCK_SELF_MCAST_LB (the sender does not hear itself).
  pair "$tag.mckey-l" "$s" "$c" "mckey -m 239.77.1.${group##*.} -l -C 100" "mckey -m 239.77.1.${group##*.} -l -s -C 100" \
    "$done_ok" "data transfers complete" "mcast:239.77.1.${group##*.}"
  pair "$tag.rdma_server" "$s" "$c" "rdma_server -s @SERVER -p @PORT" "rdma_client -s @SERVER -p @PORT" \
    'rdma_client: end 0' 'rdma_server: end 0'
  pair "$tag.rstream" "$s" "$c" "rstream -b @SERVER -p @PORT -S 4096 -C 200" \
    "rstream -s @SERVER -p @PORT -S 4096 -C 200" '^custom +4k +200 '
  pair "$tag.riostream" "$s" "$c" "riostream -b @SERVER -p @PORT -S 65536 -C 100" \
    "riostream -s @SERVER -p @PORT -S 65536 -C 100" '^custom +64k +100 '
  # perftest through rdma_cm (-R): every tool, RC and UD.
  result='^ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+'
  for t in ib_send_bw ib_send_lat ib_write_bw ib_write_lat ib_read_bw ib_read_lat ib_atomic_bw ib_atomic_lat; do
    pair "$tag.$t" "$s" "$c" "$t -R -p @PORT -n 200" "$t -R -p @PORT -n 200 @SERVER" "$result"
  done
  pair "$tag.ib_send_bw.ud" "$s" "$c" "ib_send_bw -c UD -R -p @PORT -n 200" \
    "ib_send_bw -c UD -R -p @PORT -n 200 @SERVER" "$result"
  pair "$tag.ib_send_lat.ud" "$s" "$c" "ib_send_lat -c UD -R -p @PORT -n 200" \
    "ib_send_lat -c UD -R -p @PORT -n 200 @SERVER" "$result"
done

# One process's rdma_cm event channels are bounded (droced --cm-channels 64): the 65th fails with
# EMFILE, and closing them gives the room back. A waiter on a channel another thread closes
# stays waiting.
if selected error.cm_channel_limit; then
  if [ -x "$cm_channels" ]; then
    why=""
    on a "$deadline" 60 "$cm_channels" 64 10.77.0.98 >"$tmp/cm_channels.out" 2>&1 || why+=" exit $?;"
    grep -q '^opened 64, then Too many open files$' "$tmp/cm_channels.out" || why+=" not 64 then EMFILE;"
    grep -q '^after closing them: one more opens$' "$tmp/cm_channels.out" || why+=" no room after closing;"
    grep -q '^a waiter when its channel closed: still waiting$' "$tmp/cm_channels.out" ||
      why+=" rdma_get_cm_event failed when another thread closed its channel (rping would exit 255);"
    grep -q '^a waiter when its channel closed with an event due: RDMA_CM_EVENT_ADDR_ERROR$' "$tmp/cm_channels.out" ||
      why+=" a waiter on a closed channel did not get the event that was due (the kernel delivers it);"
    report error.cm_channel_limit "$why" "$tmp/cm_channels.out" /dev/null
  else
    echo "SKIP (part): cm_channels was not built (librdmacm-dev)"
  fi
fi

# expect NAME CLIENT_HOST EXPECTED_STATUS PATTERN CLIENT ARGS...: a client alone, failing as the
# kernel makes it fail.
expect() {
  local name=$1 c=$2 status=$3 pat=$4
  shift 4
  selected "$name" || return 0
  local clog=$tmp/$name.client rc=0 why=""
  on "$c" "$deadline" 60 stdbuf -o0 "$@" >"$clog" 2>&1 || rc=$?
  [ "$rc" -eq "$status" ] || why+=" exit $rc, expected $status;"
  grep -Eq -- "$pat" "$clog" || why+=" output lacks /$pat/;"
  report "$name" "$why" "$clog" /dev/null
}
expect error.no_listener a 8 'RDMA_CM_EVENT_REJECTED, error: 8' ucmatose -s 10.77.0.2 -p 18999
expect error.no_ud_service a 1 'RDMA_CM_EVENT_UNREACHABLE, error: 1' udaddy -s 10.77.0.2
# udaddy resolves with a 2000 ms timeout; nobody owns .99, so ARP stays unanswered.
expect error.no_such_address a 146 'RDMA_CM_EVENT_ADDR_ERROR, error: -110' udaddy -s 10.77.0.99

# A peer that dies mid-connection: the survivor gets DISCONNECTED (the dying channel's close
# makes droced send a DREQ for it).
if selected error.peer_killed; then
  port=$((port + 1))
  slog=$tmp/killed.server clog=$tmp/killed.client
  on b timeout 120 stdbuf -o0 rping -s -a 10.77.0.2 -p "$port" -C 100000000 >"$slog" 2>&1 &
  server=$!
  why=""
  wait_listener b "$port" || why+=" the server never listened;"
  on a timeout 60 stdbuf -o0 rping -c -a 10.77.0.2 -p "$port" -C 100000000 -d >"$clog" 2>&1 &
  client=$!
  wait_for 10 grep -q ESTABLISHED "$clog"
  sleep 0.5
  pkill -KILL -f "rping -s -a 10.77.0.2 -p $port" || why+=" no server to kill;"
  wait "$client" 2>/dev/null
  wait "$server" 2>/dev/null
  grep -q 'RDMA_CM_EVENT_DISCONNECTED' "$clog" || why+=" the client saw no DISCONNECTED;"
  report error.peer_killed "$why" "$clog" "$slog"
fi

# ---- two namespaces over af_packet -----------------------------------------------------------
netns_cases() {
  [ "$(id -u)" -eq 0 ] || { echo "SKIP (part): the namespace cases need root"; return; }
  local tag=$$ side
  netns=([a]=droce-cma-$tag [b]=droce-cmb-$tag)
  ip=([a]=10.79.0.1 [b]=10.79.0.2)
  hosts=$tmp/ns
  netns_add "${netns[a]}" "${netns[b]}" || { echo "SKIP (part): no network namespaces"; return; }
  veth_add "${netns[a]}" va "${netns[b]}" vb || { echo "SKIP (part): no veth pair"; return; }
  for side in a b; do
    link_up "${netns[$side]}" "v$side" "${ip[$side]}/24"
    droced_spawn "${netns[$side]}" "$hosts/$side" "$tmp/ns-$side.log" "$droced" \
      --port "net_af_packet_$side$tag,iface=v$side" --address "${ip[$side]}" --memory 256 --mbufs 8192
    ns_pids+=("$DROCED_PID")
  done
  for side in a b; do
    wait_unix_socket "$hosts/$side/droce0.sock" "" 20 ||
      { echo "FAIL: netns droced $side did not start"; tail "$tmp/ns-$side.log"; fail=1; return; }
  done
  pair netns.rping b a "rping -s -a @SERVER -p @PORT -V -C 1000" "rping -c -a @SERVER -p @PORT -V -C 1000 -v" \
    'ping data: rdma-ping-999: '
  pair netns.ucmatose b a "ucmatose -p @PORT -c 8 -C 50" "ucmatose -s @SERVER -p @PORT -c 8 -C 50" \
    "$done_ok" "$done_ok"
  pair netns.udaddy b a "udaddy -c 4 -C 50" "udaddy -s @SERVER -c 4 -C 50" "$done_ok" "$done_ok"
  mckey_igmp_case
  pair netns.ib_write_bw b a "ib_write_bw -R -p @PORT -n 200" "ib_write_bw -R -p @PORT -n 200 @SERVER" "$result"
  pair netns.ib_send_lat.ud b a "ib_send_lat -c UD -R -p @PORT -n 200" \
    "ib_send_lat -c UD -R -p @PORT -n 200 @SERVER" "$result"
  # qperf: its request goes over TCP to the server (the kernel's address in B's namespace), then
  # -cm1 connects the QPs through rdma_cm. Each test prints its result lines.
  if command -v qperf >/dev/null; then
    for t in rc_lat rc_bw rc_rdma_write_lat rc_rdma_read_bw; do
      qperf_case "netns.qperf.$t" "$t"
    done
  else
    echo "SKIP (part): qperf not installed (Debian package qperf)"
  fi
  if command -v fi_pingpong >/dev/null; then
    # Its control channel is TCP between the namespaces (-B/-P); -c checks every payload.
    local ep
    for ep in "msg verbs" "rdm verbs;ofi_rxm" "dgram verbs"; do
      read -r e prov <<<"$ep"
      pair "netns.fi_pingpong.$e" b a "fi_pingpong -p $prov -e $e -I 200 -S 1024 -c -B @PORT" \
        "fi_pingpong -p $prov -e $e -I 200 -S 1024 -c -P @PORT @SERVER" '^1k +200 +=200 ' '^1k +200 +=200 ' tcp
    done
  else
    echo "SKIP (part): fi_pingpong not installed (Debian package libfabric-bin)"
  fi
  if selected netns.rcopy; then
    # rcopy: a file over rsockets (librdmacm's socket layer on rdma_cm), compared byte for byte.
    local blob=$tmp/blob dest=$tmp/rcopy-dest why=""
    mkdir -p "$dest"
    head -c 4000000 /dev/urandom >"$blob"
    port=$((port + 1))
    (cd "$dest" && on b timeout 60 rcopy -p "$port" >"$tmp/rcopy.server" 2>&1) &
    local server=$!
    wait_listener b "$port" || why+=" the server never listened;"
    on a timeout 50 rcopy "$blob" "${ip[b]}:$dest/copied" -p "$port" >"$tmp/rcopy.client" 2>&1 || why+=" client exit $?;"
    kill "$server" 2>/dev/null
    wait "$server" 2>/dev/null
    cmp -s "$blob" "$dest/copied" || why+=" the copy differs;"
    report netns.rcopy "$why" "$tmp/rcopy.client" "$tmp/rcopy.server"
  fi
}

# mckey across the namespaces, receiver in A, while tshark (the oracle) watches B's end of the
# veth: droced A must report its membership (IGMPv2 report for the group, from A's address, a
# valid checksum) when the receiver joins and leave the group when it is done.
mckey_igmp_case() {
  selected netns.mckey || return 0
  local group=239.79.0.5 cap="" why=""
  if command -v tshark >/dev/null; then
    ip netns exec "${netns[b]}" timeout 60 tshark -l -n -i vb -f igmp \
      -T fields -e ip.src -e igmp.type -e igmp.maddr -e igmp.checksum.status >"$tmp/igmp.txt" 2>"$tmp/igmp.err" &
    cap=$!
    wait_for 10 grep -q "Capturing on" "$tmp/igmp.err"
  else
    echo "SKIP (part): tshark not installed: the IGMP reports are not checked"
  fi
  pair netns.mckey a b "mckey -m $group -C 100" "mckey -m $group -s -C 100" "$done_ok" "data transfers complete" \
    "mcast:$group"
  [ -n "$cap" ] || return 0
  sleep 1
  kill -INT "$cap" 2>/dev/null
  wait "$cap" 2>/dev/null
  # A report (0x16) and a leave (0x17) for the group from A, checksums good; B's droced joined as
  # the sender (a full member too: librdmacm's legacy join has no send-only flag) and reports also.
  grep -Eq "^${ip[a]}[[:space:]]+0x16[[:space:]]+${group}[[:space:]]+1$" "$tmp/igmp.txt" ||
    why+=" no good IGMPv2 report from A;"
  grep -Eq "^${ip[a]}[[:space:]]+0x17[[:space:]]+$group" "$tmp/igmp.txt" || why+=" no leave from A;"
  report netns.mckey.igmp "$why" "$tmp/igmp.txt" "$tmp/igmp.err"
}

# qperf_case NAME TEST: qperf's server in B (a TCP listener), the client in A runs TEST -cm1.
qperf_case() {
  local name=$1 test=$2
  selected "$name" || return 0
  local slog=$tmp/$name.server clog=$tmp/$name.client why="" crc=0
  port=$((port + 1))
  on b "$deadline" 60 qperf -lp "$port" >"$slog" 2>&1 &
  local server=$!
  wait_tcp_listen "${netns[b]}" "$port" "" 5
  on a "$deadline" 50 qperf -lp "$port" -cm1 -t 1 "${ip[b]}" "$test" >"$clog" 2>&1 || crc=$?
  kill "$server" 2>/dev/null
  wait "$server" 2>/dev/null
  [ "$crc" -eq 0 ] || why+=" client exit $crc;"
  grep -Eq 'latency|bw' "$clog" || why+=" no result line;"
  ! grep -qi 'failed\|unexpected\|error' "$clog" || why+=" an error line;"
  report "$name" "$why" "$clog" "$slog"
}

ns_pids=()
netns_cleanup() {
  droced_stop "${ns_pids[@]}"
  netns_del "${netns[a]}" "${netns[b]}"
}
on_exit netns_cleanup
netns_cases

exit "$fail"
