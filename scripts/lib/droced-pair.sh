# Sourced by scripts/demo.sh, the benchmarks and the tests that need two droce hosts: two droced
# processes on this machine joined by a same-host link (no root, no NIC).
#   droced_pair_start BIN_DIR WORK_DIR [extra droced flags...]
#   droced_pair_stop
# Sets DROCE_A_SOCK, DROCE_B_SOCK, DROCE_A_PID, DROCE_B_PID.
# DROCE_PAIR_NETNS=1 (root): each droced in a network namespace of its own (DROCE_A_NS,
# DROCE_B_NS) whose kernel owns the droced's addresses on a veth joining the two, as two
# machines' kernels own their NICs' addresses: programs that open a TCP side channel to the
# peer's RDMA address, or find the device by a kernel interface address (qperf, libfabric,
# perftest's exchange), run there as between two machines, while RoCE still takes the
# same-host link. droced_pair_run a|b COMMAND... runs a verbs program on host A or B.
# DROCE_PAIR_LINK picks the link: shm (default; droce's own, which wakes a
# sleeping droced when a frame comes) or memif (DPDK's net_memif, which cannot:
# a sleeping droced sees frames only when its sleep timer ends).
# DROCE_PAIR_A_ARGS and DROCE_PAIR_B_ARGS: flags for one host's droced alone, after the common
# ones (split at spaces), for what the two cannot share, e.g. a --metrics port.
# Built on scripts/lib/netns.sh, sourced here: the sourcing script gets its helpers too.

# shellcheck source=scripts/lib/netns.sh
. "$(dirname "${BASH_SOURCE[0]}")/netns.sh"

# droced_pair_start BIN_DIR WORK_DIR [DROCED_FLAGS...]: droced A, then B, from BIN_DIR, their run
# directories under WORK_DIR (emptied first). 0 once both serve; 1 if one did not (it says why).
droced_pair_start() {
  local bin=$1 work
  work=$(realpath -m "$2")  # memif wants an absolute socket path
  shift 2
  rm -rf "$work"
  mkdir -p "$work/a" "$work/b"
  local port_a port_b
  case "${DROCE_PAIR_LINK:-shm}" in
    shm)
      port_a="droce_shm0,role=server,socket=$work/link.sock"
      port_b="droce_shm1,role=client,socket=$work/link.sock" ;;
    memif)
      port_a="net_memif0,role=server,socket=$work/memif.sock,socket-abstract=no"
      port_b="net_memif1,role=client,socket=$work/memif.sock,socket-abstract=no" ;;
    *) echo "DROCE_PAIR_LINK is shm or memif, not '$DROCE_PAIR_LINK'" >&2; return 1 ;;
  esac
  DROCE_PAIR_BIN=$bin
  DROCE_PAIR_WORK=$work
  DROCE_A_NS='' DROCE_B_NS=''
  if [ "${DROCE_PAIR_NETNS:-0}" = 1 ]; then
    DROCE_A_NS=droce-pair-a-$$
    DROCE_B_NS=droce-pair-b-$$
    _droced_pair_netns || return 1
  fi
  # shellcheck disable=SC2086  # DROCE_PAIR_A_ARGS is split on purpose
  droced_spawn "$DROCE_A_NS" "$work/a" "$work/a.log" "$bin/droced" --port "$port_a" \
    --address 10.77.0.1 --address fd00:77::1 "$@" ${DROCE_PAIR_A_ARGS:-}
  DROCE_A_PID=$DROCED_PID
  DROCE_A_SOCK=$work/a/droce0.sock
  _droced_pair_wait "$DROCE_A_SOCK" "$DROCE_A_PID" "$work/a.log" || return 1
  # shellcheck disable=SC2086  # DROCE_PAIR_B_ARGS is split on purpose
  droced_spawn "$DROCE_B_NS" "$work/b" "$work/b.log" "$bin/droced" --port "$port_b" \
    --address 10.77.0.2 --address fd00:77::2 "$@" ${DROCE_PAIR_B_ARGS:-}
  DROCE_B_PID=$DROCED_PID
  DROCE_B_SOCK=$work/b/droce0.sock
  _droced_pair_wait "$DROCE_B_SOCK" "$DROCE_B_PID" "$work/b.log" || return 1
}

# The two namespaces and the veth whose ends carry 10.77.0.1/24 and 10.77.0.2/24 (and
# fd00:77::1/64, ::2/64) for the kernels, at MTU 9000. 0, or 1 if ip refused a step.
_droced_pair_netns() {
  [ "$(id -u)" -eq 0 ] || { echo "DROCE_PAIR_NETNS=1 needs root" >&2; return 1; }
  netns_add "$DROCE_A_NS" "$DROCE_B_NS" || return 1
  veth_add "$DROCE_A_NS" eth0 "$DROCE_B_NS" eth0 || return 1
  link_up "$DROCE_A_NS" eth0 10.77.0.1/24 fd00:77::1/64 --mtu 9000 &&
    link_up "$DROCE_B_NS" eth0 10.77.0.2/24 fd00:77::2/64 --mtu 9000
}

# droced_pair_run a|b COMMAND...: a verbs program on host A or B (droce exec, in the host's
# namespace with DROCE_PAIR_NETNS=1). Returns the program's status.
droced_pair_run() {
  local ns=${DROCE_B_NS:-}
  [ "$1" = a ] && ns=${DROCE_A_NS:-}
  in_netns "$ns" "$DROCE_PAIR_BIN/droce" exec --run-dir "$DROCE_PAIR_WORK/$1" -- "${@:2}"
}

# _droced_pair_wait SOCK PID LOG: 0 once droced PID made SOCK; else says why and returns 1.
_droced_pair_wait() {
  local sock=$1 pid=$2 log=$3
  wait_unix_socket "$sock" "$pid" 30
  case $? in
    0) return 0 ;;
    1) echo "droced did not start:" >&2
       cat "$log" >&2 ;;
    *) echo "droced did not create $sock in 30 s" >&2 ;;
  esac
  return 1
}

# droced_pair_stop: stops both droced (SIGTERM, then waits for them) and removes the namespaces
# DROCE_PAIR_NETNS=1 made. Returns 0; safe to call when nothing runs.
droced_pair_stop() {
  droced_stop "${DROCE_A_PID:-}" "${DROCE_B_PID:-}" || true
  DROCE_A_PID='' DROCE_B_PID=''
  netns_del "${DROCE_A_NS:-}" "${DROCE_B_NS:-}"
  DROCE_A_NS='' DROCE_B_NS=''
  return 0
}
