# Sourced by the shell tests that make network namespaces (tests/apps/droced_netns_test.sh,
# tests/apps/droced_lab_test.sh): what they ask the kernel of a namespace.

# kernel_noise NAMESPACE: UDP datagrams the kernel found no socket for (UdpNoPorts, Udp6NoPorts)
# plus the ICMP and ICMPv6 destination unreachables it sent, in NAMESPACE. A RoCE packet the
# kernel answered moves it; droce sharing a netdev must leave it where it was.
kernel_noise() {
  ip netns exec "$1" cat /proc/net/snmp /proc/net/snmp6 | awk '
    /^Udp:/ { if (!h) { for (i = 1; i <= NF; i++) col[$i] = i; h = 1 } else n += $col["NoPorts"] }
    /^Icmp:/ { if (!ih) { for (i = 1; i <= NF; i++) icol[$i] = i; ih = 1 } else n += $icol["OutDestUnreachs"] }
    /^Udp6NoPorts/ || /^Icmp6OutDestUnreachs/ { n += $2 }
    END { print n + 0 }'
}

# server_ready NAMESPACE DROCED_SOCKET [PORT]: waits, up to 10 s, until a server in NAMESPACE
# serves: with PORT, until a TCP socket listens on it there (perftest's exchange 18515, qperf
# 19765, fi_pingpong's out-of-band 47592, ...); without, until droced's connection manager holds a
# listening rdma_cm id (rping, ucmatose, perftest -R). 1 if nothing came in time (the caller goes
# on and lets the client say what failed).
server_ready() {
  local ns=$1 sock=$2 port=${3:-} hex=""
  [ -n "$port" ] && hex=$(printf '%04X' "$port")
  for _ in $(seq 200); do
    if [ -n "$hex" ]; then
      ip netns exec "$ns" awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
    else
      # (An id of the previous server may linger a moment: give the new one that moment too.)
      "${DROCE_BIN:-droce}" cm --socket "$sock" 2>/dev/null | grep -qw listen && { sleep 0.3; return 0; }
    fi
    sleep 0.05
  done
  return 1
}
