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
