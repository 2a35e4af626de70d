# Sourced (bash) by the shell tests, scripts and benchmarks that make droce hosts on this machine:
# network namespaces and the veth pairs and bridges between them, waiting until a server listens,
# droced started in a namespace and stopped again, and what runs at exit. scripts/lib/droced-pair.sh
# builds the two-host pair on it; scripts/lab.sh the routed lab.
#
# A namespace argument NS may be "" for the namespace the caller is in. Every wait polls every
# 50 ms. DROCE_BIN names the droce command the rdma_cm waits ask (default: droce on PATH).
# Nothing here sets shell options; it works under `set -euo pipefail` as without.

[ -z "${_DROCE_NETNS_SH:-}" ] || return 0
_DROCE_NETNS_SH=1

# ---- namespaces, veth pairs, bridges ----------------------------------------------------------

# in_netns NS COMMAND [ARGS...]: runs COMMAND in namespace NS. Returns COMMAND's status.
in_netns() {
  local ns=$1
  shift
  if [ -n "$ns" ]; then ip netns exec "$ns" "$@"; else "$@"; fi
}

# netns_add NS...: creates each network namespace NS and brings its loopback up. 0; 1 at the
# first that could not be made (those made before it stay: netns_del them).
netns_add() {
  local ns
  for ns in "$@"; do
    ip netns add "$ns" && ip -n "$ns" link set lo up || return 1
  done
}

# netns_del NS...: deletes each namespace NS, and with it its interfaces and their veth peers
# (empty names are skipped, missing namespaces ignored). Returns 0.
netns_del() {
  local ns
  for ns in "$@"; do
    [ -z "$ns" ] || ip netns del "$ns" 2>/dev/null
  done
  return 0
}

# veth_add NS_A DEV_A NS_B DEV_B: a veth pair, DEV_A in namespace NS_A and DEV_B in NS_B, both
# ends down. Returns ip's status.
veth_add() {
  local a=() b=()
  [ -z "$1" ] || a=(netns "$1")
  [ -z "$3" ] || b=(netns "$3")
  ip link add "$2" "${a[@]}" type veth peer name "$4" "${b[@]}"
}

# bridge_add NS BRIDGE [ADDRESS/PREFIX...]: a bridge in namespace NS with those addresses, up.
# 0; 1 if ip refused a step.
bridge_add() {
  ip ${1:+-n "$1"} link add "$2" type bridge || return 1
  link_up "$@"
}

# link_up NS DEV [--mtu N] [--master BRIDGE] [ADDRESS/PREFIX...]: in namespace NS, in the order
# given, sets DEV's MTU, makes it a port of BRIDGE and gives it the addresses (IPv6 ones without
# duplicate address detection); then brings DEV up. 0; 1 at the first step ip refused.
link_up() {
  local ns=$1 dev=$2
  shift 2
  while [ $# -gt 0 ]; do
    case $1 in
      --mtu) ip ${ns:+-n "$ns"} link set "$dev" mtu "$2" || return 1; shift ;;
      --master) ip ${ns:+-n "$ns"} link set "$dev" master "$2" || return 1; shift ;;
      *:*) ip ${ns:+-n "$ns"} addr add "$1" dev "$dev" nodad || return 1 ;;
      *) ip ${ns:+-n "$ns"} addr add "$1" dev "$dev" || return 1 ;;
    esac
    shift
  done
  ip ${ns:+-n "$ns"} link set "$dev" up
}

# kernel_noise NS: UDP datagrams the kernel found no socket for (UdpNoPorts, Udp6NoPorts) plus
# the ICMP and ICMPv6 destination unreachables it sent, in namespace NS. A RoCE packet the kernel
# answered moves it; droce sharing a netdev must leave it where it was. Prints the sum.
kernel_noise() {
  in_netns "$1" cat /proc/net/snmp /proc/net/snmp6 | awk '
    /^Udp:/ { if (!h) { for (i = 1; i <= NF; i++) col[$i] = i; h = 1 } else n += $col["NoPorts"] }
    /^Icmp:/ { if (!ih) { for (i = 1; i <= NF; i++) icol[$i] = i; ih = 1 } else n += $icol["OutDestUnreachs"] }
    /^Udp6NoPorts/ || /^Icmp6OutDestUnreachs/ { n += $2 }
    END { print n + 0 }'
}

# ---- waiting ----------------------------------------------------------------------------------

# wait_for [-p PID] SECONDS COMMAND [ARGS...]: runs COMMAND every 50 ms until it succeeds, for
# SECONDS at most. 0 once it did; 1 as soon as process PID (what the wait is for) has ended;
# 2 when the time ran out.
wait_for() {
  local pid="" tries _wait_i
  if [ "$1" = -p ]; then
    pid=$2
    shift 2
  fi
  tries=$(($1 * 20))
  shift
  for ((_wait_i = 0; _wait_i < tries; _wait_i++)); do
    "$@" && return 0
    [ -z "$pid" ] || kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.05
  done
  return 2
}

# start_watcher OUT COMMAND [ARGS...]: a `droce events` COMMAND in the background, its output in
# OUT, WATCHER_PID its pid; 0 once it printed "watching" (its context is open: it hears what
# happens from now on), else non-zero after 20 s. OUT is removed first: the background job opens
# it, and a wait that read an earlier run's "watching" would go on before this watcher listens.
start_watcher() {
  local out=$1
  shift
  rm -f "$out"
  "$@" >"$out" 2>&1 &
  WATCHER_PID=$!
  wait_for -p "$WATCHER_PID" 20 grep -qs watching "$out"
}

# tcp_listening NS PORT: 0 if a TCP socket listens on PORT (IPv4 or IPv6) in namespace NS, else 1.
tcp_listening() {
  # shellcheck disable=SC2016 # awk's program
  in_netns "$1" awk -v p="$(printf ':%04X' "$2")" \
    '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# wait_tcp_listen NS PORT [PID [SECONDS]]: waits until a TCP socket listens on PORT in namespace
# NS (a server's exchange or control socket: perftest's 18515, qperf's 19765...), 10 s unless
# SECONDS says otherwise, or until process PID (the server; "" for none) ends. wait_for's status.
wait_tcp_listen() {
  wait_for ${3:+-p "$3"} "${4:-10}" tcp_listening "$1" "$2"
}

# wait_unix_socket SOCK [PID [SECONDS]]: waits until the unix socket SOCK exists, 10 s unless
# SECONDS says otherwise, or until process PID (the one that makes it; "" for none) ends.
# wait_for's status.
wait_unix_socket() {
  wait_for ${2:+-p "$2"} "${3:-10}" test -S "$1"
}

# cm_listening SOCK [PORT]: 0 if the droced at control socket SOCK has a listening rdma_cm id (on
# PORT, when given), else 1.
cm_listening() {
  local pat='"state":"listen"'
  [ -z "${2:-}" ] || pat+=",\"local\":\"[^\"]*:$2\""
  "${DROCE_BIN:-droce}" cm --json --socket "$1" 2>/dev/null | grep -q "$pat"
}

# wait_cm_listen SOCK [PORT [SECONDS]]: waits until the droced at SOCK has a listening rdma_cm id
# (on PORT, when given; "" for any), 10 s unless SECONDS says otherwise. Without PORT, another
# 0.3 s once one shows: the id of a server that just ended may linger that long. wait_for's status.
wait_cm_listen() {
  wait_for "${3:-10}" cm_listening "$1" "${2:-}" || return
  [ -n "${2:-}" ] || sleep 0.3
}

# server_ready NS DROCED_SOCKET [PORT]: waits, up to 10 s, until a server in namespace NS serves:
# with PORT, until a TCP socket listens on it there (perftest's exchange 18515, qperf 19765,
# fi_pingpong's out-of-band 47592, ...); without, until the droced at DROCED_SOCKET holds a
# listening rdma_cm id (rping, ucmatose, perftest -R). Non-zero if nothing came in time (the
# caller goes on and lets the client say what failed).
server_ready() {
  if [ -n "${3:-}" ]; then wait_tcp_listen "$1" "$3"; else wait_cm_listen "$2"; fi
}

# ---- droced -----------------------------------------------------------------------------------

# droced_spawn NS RUN_DIR LOG DROCED [ARGS...]: starts `DROCED --run-dir RUN_DIR ARGS...` in
# namespace NS, in the background, its output in LOG, and sets DROCED_PID to the daemon's pid
# (`ip netns exec` execs it). Returns 0. Call it directly, not in $(...): the daemon must be
# this shell's child for droced_stop to wait for it.
droced_spawn() {
  local ns=$1 run=$2 log=$3 bin=$4 in=()
  shift 4
  [ -z "$ns" ] || in=(ip netns exec "$ns")
  "${in[@]}" "$bin" --run-dir "$run" "$@" >"$log" 2>&1 &
  DROCED_PID=$!
}

# droced_start NS RUN_DIR LOG DROCED [ARGS...]: droced_spawn, then waits (30 s at most) for the
# daemon's control socket RUN_DIR/droce0.sock. 0 once it is there; 1 if droced exited first, 2 if
# the socket did not come in time (LOG says why). DROCED_PID is set either way.
droced_start() {
  droced_spawn "$@"
  wait_unix_socket "$2/droce0.sock" "$DROCED_PID" 30
}

# droced_stop PID...: SIGTERM to each droced (empty PIDs skipped), then waits for each: a child of
# this shell until it exits; any other process (one an earlier `scripts/lab.sh up` started) 5 s,
# then SIGKILL. 0 if every child exited 0, else the last non-zero exit status among them (wait's
# 127 reads as "not a child").
droced_stop() {
  local pid st rc=0
  for pid in "$@"; do
    [ -z "$pid" ] || kill -TERM "$pid" 2>/dev/null
  done
  for pid in "$@"; do
    [ -n "$pid" ] || continue
    wait "$pid" 2>/dev/null
    st=$?
    if [ "$st" -eq 127 ]; then  # not this shell's child
      wait_for 5 _pid_gone "$pid" || kill -KILL "$pid" 2>/dev/null
    elif [ "$st" -ne 0 ]; then
      rc=$st
    fi
  done
  return "$rc"
}

_pid_gone() { ! kill -0 "$1" 2>/dev/null; }

# ---- cleaning up ------------------------------------------------------------------------------

# on_exit COMMAND [ARGS...]: runs COMMAND with ARGS as they are now when the shell exits, before
# the commands given earlier (last in, first out); what must be read at exit (pids started since,
# a redirection) goes in a function given as COMMAND. A failing command does not stop the others
# or change the exit status. Sets the EXIT trap (replacing one set with trap). Returns 0.
_on_exit_code=()
on_exit() {
  _on_exit_code+=("$(printf '%q ' "$@")")
  trap _on_exit_run EXIT
}
_on_exit_run() {
  local _on_exit_i
  for ((_on_exit_i = ${#_on_exit_code[@]} - 1; _on_exit_i >= 0; _on_exit_i--)); do
    eval "${_on_exit_code[_on_exit_i]}" || true
  done
}

# kill_jobs [SIGNAL]: sends SIGNAL (default TERM) to every background job of this shell still
# running (timeout(1) passes it on to the program it runs). Returns 0.
kill_jobs() {
  jobs -p | xargs -r kill -"${1:-TERM}" 2>/dev/null || true
}
