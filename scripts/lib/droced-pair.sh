# Sourced by scripts/demo.sh and bench/droced_pair.sh: two droced processes
# on this machine joined by a same-host link (no root, no NIC).
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
  local in_a=() in_b=()
  if [ "${DROCE_PAIR_NETNS:-0}" = 1 ]; then
    DROCE_A_NS=droce-pair-a-$$
    DROCE_B_NS=droce-pair-b-$$
    _droced_pair_netns || return 1
    in_a=(ip netns exec "$DROCE_A_NS")
    in_b=(ip netns exec "$DROCE_B_NS")
  fi
  "${in_a[@]}" "$bin/droced" --run-dir "$work/a" --port "$port_a" \
    --address 10.77.0.1 --address fd00:77::1 "$@" >"$work/a.log" 2>&1 &
  DROCE_A_PID=$!
  DROCE_A_SOCK=$work/a/droce0.sock
  _droced_pair_wait "$DROCE_A_SOCK" "$DROCE_A_PID" "$work/a.log" || return 1
  "${in_b[@]}" "$bin/droced" --run-dir "$work/b" --port "$port_b" \
    --address 10.77.0.2 --address fd00:77::2 "$@" >"$work/b.log" 2>&1 &
  DROCE_B_PID=$!
  DROCE_B_SOCK=$work/b/droce0.sock
  _droced_pair_wait "$DROCE_B_SOCK" "$DROCE_B_PID" "$work/b.log" || return 1
}

# The two namespaces and the veth whose ends carry 10.77.0.1/24 and 10.77.0.2/24 (and
# fd00:77::1/64, ::2/64) for the kernels.
_droced_pair_netns() {
  [ "$(id -u)" -eq 0 ] || { echo "DROCE_PAIR_NETNS=1 needs root" >&2; return 1; }
  ip netns add "$DROCE_A_NS" && ip netns add "$DROCE_B_NS" || return 1
  ip link add eth0 netns "$DROCE_A_NS" type veth peer name eth0 netns "$DROCE_B_NS" || return 1
  local side ns
  for side in 1 2; do
    if [ $side = 1 ]; then ns=$DROCE_A_NS; else ns=$DROCE_B_NS; fi
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "10.77.0.$side/24" dev eth0
    ip -n "$ns" addr add "fd00:77::$side/64" dev eth0 nodad
    ip -n "$ns" link set eth0 mtu 9000 up
  done
}

# droced_pair_run a|b COMMAND...: a verbs program on host A or B (droce exec, in the host's
# namespace with DROCE_PAIR_NETNS=1).
droced_pair_run() {
  local side=$1
  shift
  local in=()
  if [ "${DROCE_PAIR_NETNS:-0}" = 1 ]; then
    if [ "$side" = a ]; then in=(ip netns exec "$DROCE_A_NS"); else in=(ip netns exec "$DROCE_B_NS"); fi
  fi
  "${in[@]}" "$DROCE_PAIR_BIN/droce" exec --run-dir "$DROCE_PAIR_WORK/$side" -- "$@"
}

_droced_pair_wait() {
  local sock=$1 pid=$2 log=$3
  for _ in $(seq 600); do
    [ -S "$sock" ] && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "droced did not start:" >&2
      cat "$log" >&2
      return 1
    fi
    sleep 0.05
  done
  echo "droced did not create $sock in 30 s" >&2
  return 1
}

droced_pair_stop() {
  for pid in ${DROCE_A_PID:-} ${DROCE_B_PID:-}; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in ${DROCE_A_PID:-} ${DROCE_B_PID:-}; do
    wait "$pid" 2>/dev/null || true
  done
  DROCE_A_PID= DROCE_B_PID=
  if [ -n "${DROCE_A_NS:-}" ]; then
    ip netns del "$DROCE_A_NS" 2>/dev/null
    ip netns del "$DROCE_B_NS" 2>/dev/null
    DROCE_A_NS= DROCE_B_NS=
  fi
  return 0
}

# droced_wait_listen PORT PID: waits until something listens on TCP PORT in this network
# namespace (a perftest or pingpong server's exchange socket), or PID ends; 10 s at most.
droced_wait_listen() {
  local hex
  hex=$(printf '%04X' "$1")
  for _ in $(seq 200); do
    grep -Eq ":$hex [0-9A-F]+:0000 0A" /proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}
