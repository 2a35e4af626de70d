// SPDX-License-Identifier: BSD-3-Clause
// droce's XDP program for a netdev droce shares with the kernel (net_af_xdp with
// xdp_prog=...; net/xdp_filter.h loads nothing itself, it finds this program on
// the netdev and fills its address map).
//
// Only RoCEv2 for droce leaves the kernel: an IPv4 or IPv6 UDP datagram to port
// 4791 whose destination is one of droce's addresses (droce_addrs, in GID form:
// IPv4 as ::ffff:a.b.c.d) or a multicast group goes to the queue's AF_XDP socket
// (xsks_map, which DPDK's af_xdp PMD fills by queue index); everything else,
// ARP, ND, ICMP, TCP and SSH among it, passes to the kernel as if no program were
// there. MAC Control frames (EtherType 0x8808: PFC and PAUSE) go to droce too: a NIC
// consumes them itself, the kernel has no use for them, and droced obeys them (net/pfc.h).
// An empty address map (droced not started, or the netdev without
// addresses) takes only multicast RoCE. A queue without a socket passes too
// (bpf_redirect_map's XDP_PASS fallback).
//
// droce_stats counts per CPU: [0] frames redirected, [1] RoCE frames to an
// address droce does not own (passed to the kernel), [2] frames passed.
//
// droce_tc, the same test at TC ingress, serves net_af_packet (droced loads and
// attaches it itself, net/xdp_filter.h attach_tc): af_packet's socket is a tap,
// handed its copy before TC ingress runs, so RoCEv2 for droce can be dropped
// there and the kernel is spared the IP and UDP receive of every frame droce
// already has (about a tenth of droced's CPU per frame on a veth). Its counters
// are its own instance's: [0] frames dropped after the tap, [1], [2] as above.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define DROCE_ROCEV2_PORT 4791
#define DROCE_MAX_QUEUES 64
#define DROCE_MAX_ADDRESSES 256

struct droce_gid {
  __u8 b[16];
};

struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, DROCE_MAX_QUEUES);
  __type(key, __u32);
  __type(value, __u32);
} xsks_map SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, DROCE_MAX_ADDRESSES);
  __type(key, struct droce_gid);
  __type(value, __u32);
} droce_addrs SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 3);
  __type(key, __u32);
  __type(value, __u64);
} droce_stats SEC(".maps");

struct droce_vlan {
  __be16 tci;
  __be16 proto;
};

static __always_inline void count(__u32 which) {
  __u64 *c = bpf_map_lookup_elem(&droce_stats, &which);
  if (c) *c += 1;
}

enum droce_class { DROCE_OTHER, DROCE_OURS, DROCE_NOT_OURS };

// What a frame is: RoCEv2 for droce (one of its addresses, or multicast), RoCEv2
// for an address droce does not own, or anything else.
static __always_inline enum droce_class classify(void *data, void *end) {
  struct ethhdr *eth = data;
  if ((void *)(eth + 1) > end) return DROCE_OTHER;
  __be16 proto = eth->h_proto;
  if (proto == bpf_htons(0x8808)) return DROCE_OURS;  // PFC, PAUSE
  void *l3 = eth + 1;
  if (proto == bpf_htons(ETH_P_8021Q)) {
    struct droce_vlan *v = l3;
    if ((void *)(v + 1) > end) return DROCE_OTHER;
    proto = v->proto;
    l3 = v + 1;
  }
  struct droce_gid key = {};
  struct udphdr *udp;
  int multicast;
  if (proto == bpf_htons(ETH_P_IP)) {
    struct iphdr *ip = l3;
    if ((void *)(ip + 1) > end) return DROCE_OTHER;
    // Options and fragments are the kernel's business (droce sends neither).
    if (ip->protocol != IPPROTO_UDP || ip->ihl != 5 || (ip->frag_off & bpf_htons(0x3fff))) return DROCE_OTHER;
    udp = (void *)(ip + 1);
    key.b[10] = 0xff;
    key.b[11] = 0xff;
    __builtin_memcpy(&key.b[12], &ip->daddr, 4);
    multicast = (key.b[12] & 0xf0) == 0xe0;
  } else if (proto == bpf_htons(ETH_P_IPV6)) {
    struct ipv6hdr *ip6 = l3;
    if ((void *)(ip6 + 1) > end) return DROCE_OTHER;
    if (ip6->nexthdr != IPPROTO_UDP) return DROCE_OTHER;
    udp = (void *)(ip6 + 1);
    __builtin_memcpy(key.b, &ip6->daddr, 16);
    multicast = key.b[0] == 0xff;
  } else {
    return DROCE_OTHER;
  }
  if ((void *)(udp + 1) > end) return DROCE_OTHER;
  if (udp->dest != bpf_htons(DROCE_ROCEV2_PORT)) return DROCE_OTHER;
  if (!multicast && !bpf_map_lookup_elem(&droce_addrs, &key)) return DROCE_NOT_OURS;
  return DROCE_OURS;
}

SEC("xdp")
int droce_xdp(struct xdp_md *ctx) {
  switch (classify((void *)(long)ctx->data, (void *)(long)ctx->data_end)) {
    case DROCE_OURS:
      count(0);
      return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
    case DROCE_NOT_OURS:
      count(1);
      break;
    default:
      break;
  }
  count(2);
  return XDP_PASS;
}

#define DROCE_TC_ACT_OK 0
#define DROCE_TC_ACT_SHOT 2

// The headers classify() reads: Ethernet, a VLAN tag, IPv6 (the larger), UDP.
#define DROCE_HEADERS (14 + 4 + 40 + 8)

SEC("tc")
int droce_tc(struct __sk_buff *skb) {
  // An af_packet sender's frame (PACKET_TX_RING) has only its Ethernet header in
  // the linear part, the rest in page fragments direct access cannot reach.
  __u32 want = skb->len < DROCE_HEADERS ? skb->len : DROCE_HEADERS;
  if ((long)skb->data_end - (long)skb->data < (long)want) bpf_skb_pull_data(skb, want);
  switch (classify((void *)(long)skb->data, (void *)(long)skb->data_end)) {
    case DROCE_OURS:
      count(0);
      return DROCE_TC_ACT_SHOT;
    case DROCE_NOT_OURS:
      count(1);
      break;
    default:
      break;
  }
  count(2);
  return DROCE_TC_ACT_OK;
}

char _license[] SEC("license") = "Dual BSD/GPL";
