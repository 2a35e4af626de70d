#pragma once
// USDT probes (provider "droce") at the transport events a lab follows a QP by. perf, bpftrace
// and SystemTap find them in the ELF notes of whatever links the engine (`readelf -n
// apps/droced`, `perf probe -x droced --list`, `bpftrace -l 'usdt:/path/to/droced:droce:*'`).
//
//   probe                 arguments               fired when
//   qp_state              qpn, old, new           a QP changes state (abi::QpState values)
//   retransmit            qpn, psn                a request packet goes out again
//   nak_sent              qpn, syndrome, psn      the responder sends a NAK (RNR NAKs too);
//                                                 the AETH syndrome, IBA 9.3.5
//   nak_received          qpn, syndrome, psn      the requester receives a NAK or RNR NAK
//   rnr_nak_sent          qpn, psn                the responder had no receive WQE (RC)
//   rnr_nak_received      qpn, psn
//   retry_exceeded        qpn                     RC retries ran out (the QP goes to error)
//   rnr_retry_exceeded    qpn                     RNR retries ran out
//   cnp_sent              qpn, dest_qp            the notification point answered a CE-marked
//                                                 packet for qpn with a CNP to the peer's dest_qp
//   cnp_received          qpn                     a CNP for qpn arrived (acted on or not)
//   rate_change           qpn, rc, rt             DCQCN cut or raised the QP's rate: current and
//                                                 target, Mbit/s (rocev2/dcqcn.h); 0 and 0 when
//                                                 an increase released it to the line rate
//   odp_page_wait         qpn, why                an access waits for on-demand-paged memory to
//                                                 come in: why 1, a fault began; 2, one is still
//                                                 on its way (rocev2::OdpReady)
//   queue_mark            rule, bytes, depth      a congestion point (droced/fault_stage.h) set CE
//                                                 on a frame of `bytes`, finding `depth` queued
//   queue_drop            rule, bytes, depth      a congestion point dropped a frame (buffer
//                                                 full, or RED on a frame that is not ECN-capable)
//
// Why USDT: an unattached probe is a nop and a note, with no call and no branch, so the data
// path may carry them (CONTRIBUTING.md "The hot path"); attaching one costs a trap per hit, paid
// only by whoever traces. A site is one line, DROCE_PROBE(name, args...), 1 to 3 integer
// arguments (cast enums to an integer type: the note records each argument's size).
//
// Built without <sys/sdt.h> (Debian's systemtap-sdt-dev; the root meson.build defines
// DROCE_HAVE_SDT when it has it) DROCE_PROBE compiles to nothing, yet still type-checks its
// arguments so that both builds accept the same code.

#if defined(DROCE_HAVE_SDT) && DROCE_HAVE_SDT

#include <sys/sdt.h>

#define DROCE_PROBE_ARITY_(a1, a2, a3, n, ...) n
#define DROCE_PROBE_PICK_(n) DROCE_PROBE_PICK2_(n)
#define DROCE_PROBE_PICK2_(n) DROCE_PROBE_##n##_
#define DROCE_PROBE_1_(name, a1) STAP_PROBE1(droce, name, a1)
#define DROCE_PROBE_2_(name, a1, a2) STAP_PROBE2(droce, name, a1, a2)
#define DROCE_PROBE_3_(name, a1, a2, a3) STAP_PROBE3(droce, name, a1, a2, a3)
#define DROCE_PROBE(name, ...) DROCE_PROBE_PICK_(DROCE_PROBE_ARITY_(__VA_ARGS__, 3, 2, 1, 0))(name, __VA_ARGS__)

#else

namespace droce::rocev2::probes {
template <class... A>
inline void unused(const A&...) {}
}  // namespace droce::rocev2::probes

#define DROCE_PROBE(name, ...)                                 \
  do {                                                         \
    if (false) ::droce::rocev2::probes::unused(__VA_ARGS__);   \
  } while (0)

#endif
