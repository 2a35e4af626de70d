#pragma once
// RoCEv2 transport headers: wire layouts and host-order field sets.
//
// Each header has a packed wire struct (big-endian, checked by static_assert
// against IBA Vol. 1 ch. 9.2-9.5 and Annex A17) and a plain host-order field
// struct with encode()/decode() between the two. Reserved bits are kept in
// the field structs, so a parsed packet rebuilds to the same bytes.
//
// All functions here are pure and allocation-free; safe on the hot path.

#include <cstddef>
#include <cstdint>

#include "core/endian.h"

namespace droce::rocev2 {

inline constexpr uint16_t kRoceV2UdpPort = 4791;
inline constexpr size_t kIcrcLen = 4;
inline constexpr uint32_t kPsnMask = 0xffffff;
inline constexpr uint32_t kQpnMask = 0xffffff;

// ---- Wire layouts ----------------------------------------------------------

struct __attribute__((packed)) BthWire {
  uint8_t opcode;
  uint8_t se_m_pad_tver;     // SE(1) M(1) PadCnt(2) TVer(4)
  uint16_t pkey;
  uint8_t fecn_becn_resv6;   // FECN(1) BECN(1) resv(6): masked in the ICRC
  uint8_t dest_qp[3];
  uint8_t ackreq_resv7;      // AckReq(1) resv(7)
  uint8_t psn[3];
};
static_assert(sizeof(BthWire) == 12);
static_assert(offsetof(BthWire, pkey) == 2);
static_assert(offsetof(BthWire, fecn_becn_resv6) == 4);
static_assert(offsetof(BthWire, dest_qp) == 5);
static_assert(offsetof(BthWire, psn) == 9);

struct __attribute__((packed)) RethWire {
  uint64_t va;
  uint32_t rkey;
  uint32_t dma_len;
};
static_assert(sizeof(RethWire) == 16);
static_assert(offsetof(RethWire, rkey) == 8 && offsetof(RethWire, dma_len) == 12);

struct __attribute__((packed)) AtomicEthWire {
  uint64_t va;
  uint32_t rkey;
  uint64_t swap_add;
  uint64_t compare;
};
static_assert(sizeof(AtomicEthWire) == 28);
static_assert(offsetof(AtomicEthWire, swap_add) == 12 && offsetof(AtomicEthWire, compare) == 20);

struct __attribute__((packed)) AethWire {
  uint8_t syndrome;
  uint8_t msn[3];
};
static_assert(sizeof(AethWire) == 4);

struct __attribute__((packed)) AtomicAckEthWire {
  uint64_t orig;
};
static_assert(sizeof(AtomicAckEthWire) == 8);

/// XRCETH, the XRC extended transport header (IBA Annex A14.4.1): reserved(8) | XRC SRQ
/// number(24), right after the BTH of every XRC request packet.
struct __attribute__((packed)) XrcethWire {
  uint8_t resv8;
  uint8_t xrc_srq[3];
};
static_assert(sizeof(XrcethWire) == 4 && offsetof(XrcethWire, xrc_srq) == 1);

/// FETH, the FLUSH extended transport header (IBA Annex A19.4.1; rxe_hdr.h's rxe_feth): one
/// big-endian word, reserved(26) | selectivity level(2) | placement type(4).
struct __attribute__((packed)) FethWire {
  uint32_t bits;
};
static_assert(sizeof(FethWire) == 4);

struct __attribute__((packed)) DethWire {
  uint32_t qkey;
  uint8_t resv8;
  uint8_t src_qp[3];
};
static_assert(sizeof(DethWire) == 8 && offsetof(DethWire, src_qp) == 5);

struct __attribute__((packed)) ImmDtWire {
  uint32_t imm;
};
static_assert(sizeof(ImmDtWire) == 4);

struct __attribute__((packed)) IethWire {
  uint32_t rkey;
};
static_assert(sizeof(IethWire) == 4);

/// RoCEv2 CNP (Annex A17.9.3): 16 reserved bytes after the BTH.
struct __attribute__((packed)) CnpWire {
  uint8_t reserved[16];
};
static_assert(sizeof(CnpWire) == 16);

// ---- Host-order field sets ----------------------------------------------------

struct Bth {
  uint8_t opcode = 0;
  bool se = false;
  bool migreq = false;
  uint8_t pad = 0;   // 0..3
  uint8_t tver = 0;  // 0..15; must be 0
  uint16_t pkey = 0xffff;
  bool fecn = false;
  bool becn = false;
  uint8_t resv6 = 0;  // 0..63
  uint32_t dest_qp = 0;
  bool ackreq = false;
  uint8_t resv7 = 0;  // 0..127
  uint32_t psn = 0;

  void encode(void* out) const {
    auto* w = static_cast<BthWire*>(out);
    w->opcode = opcode;
    w->se_m_pad_tver = static_cast<uint8_t>((se << 7) | (migreq << 6) | ((pad & 3) << 4) | (tver & 0xf));
    core::store_be16(&w->pkey, pkey);
    w->fecn_becn_resv6 = static_cast<uint8_t>((fecn << 7) | (becn << 6) | (resv6 & 0x3f));
    core::store_be24(w->dest_qp, dest_qp);
    w->ackreq_resv7 = static_cast<uint8_t>((ackreq << 7) | (resv7 & 0x7f));
    core::store_be24(w->psn, psn);
  }
  static Bth decode(const void* in) {
    Bth b;
    b.read(in);
    return b;
  }
  /// decode() into this one: the parser fills its packet's header in place (a
  /// Bth built on the stack and copied cost a store-forwarding stall per frame,
  /// 3-4 % of a responder's samples).
  void read(const void* in) {
    const auto* w = static_cast<const BthWire*>(in);
    opcode = w->opcode;
    se = w->se_m_pad_tver >> 7;
    migreq = (w->se_m_pad_tver >> 6) & 1;
    pad = (w->se_m_pad_tver >> 4) & 3;
    tver = w->se_m_pad_tver & 0xf;
    pkey = core::load_be16(&w->pkey);
    fecn = w->fecn_becn_resv6 >> 7;
    becn = (w->fecn_becn_resv6 >> 6) & 1;
    resv6 = w->fecn_becn_resv6 & 0x3f;
    dest_qp = core::load_be24(w->dest_qp);
    ackreq = w->ackreq_resv7 >> 7;
    resv7 = w->ackreq_resv7 & 0x7f;
    psn = core::load_be24(w->psn);
  }
  friend bool operator==(const Bth&, const Bth&) = default;
};

struct Reth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t dma_len = 0;

  void encode(void* out) const {
    auto* w = static_cast<RethWire*>(out);
    core::store_be64(&w->va, va);
    core::store_be32(&w->rkey, rkey);
    core::store_be32(&w->dma_len, dma_len);
  }
  static Reth decode(const void* in) {
    const auto* w = static_cast<const RethWire*>(in);
    return {core::load_be64(&w->va), core::load_be32(&w->rkey), core::load_be32(&w->dma_len)};
  }
  friend bool operator==(const Reth&, const Reth&) = default;
};

struct AtomicEth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint64_t swap_add = 0;
  uint64_t compare = 0;

  void encode(void* out) const {
    auto* w = static_cast<AtomicEthWire*>(out);
    core::store_be64(&w->va, va);
    core::store_be32(&w->rkey, rkey);
    core::store_be64(&w->swap_add, swap_add);
    core::store_be64(&w->compare, compare);
  }
  static AtomicEth decode(const void* in) {
    const auto* w = static_cast<const AtomicEthWire*>(in);
    return {core::load_be64(&w->va), core::load_be32(&w->rkey), core::load_be64(&w->swap_add),
            core::load_be64(&w->compare)};
  }
  friend bool operator==(const AtomicEth&, const AtomicEth&) = default;
};

/// AETH syndrome (IBA 9.7.5.1, table 42): bits 7:5 say what it is; 000 ACK,
/// 001 RNR NAK, 011 NAK. Anything else (010, or bit 7 set) is reserved.
enum class AethKind : uint8_t { ack = 0, rnr_nak = 1, reserved = 2, nak = 3 };

/// NAK codes (syndrome bits 4:0 when the kind is nak).
enum class NakCode : uint8_t {
  psn_sequence_error = 0,
  invalid_request = 1,
  remote_access_error = 2,
  remote_operational_error = 3,
  invalid_rd_request = 4,
};

inline constexpr uint8_t kAethCreditInvalid = 0x1f;  // "no credit limit" (needed with SRQ)

struct Aeth {
  uint8_t syndrome = 0;
  uint32_t msn = 0;

  AethKind kind() const {
    return (syndrome & 0x80) ? AethKind::reserved : static_cast<AethKind>(syndrome >> 5);
  }
  uint8_t value() const { return syndrome & 0x1f; }  // credit code, RNR timer or NAK code
  static uint8_t make_syndrome(AethKind k, uint8_t value) {
    return static_cast<uint8_t>((static_cast<uint8_t>(k) << 5) | (value & 0x1f));
  }

  void encode(void* out) const {
    auto* w = static_cast<AethWire*>(out);
    w->syndrome = syndrome;
    core::store_be24(w->msn, msn);
  }
  static Aeth decode(const void* in) {
    const auto* w = static_cast<const AethWire*>(in);
    return {w->syndrome, core::load_be24(w->msn)};
  }
  friend bool operator==(const Aeth&, const Aeth&) = default;
};

struct AtomicAckEth {
  uint64_t orig = 0;

  void encode(void* out) const { core::store_be64(out, orig); }
  static AtomicAckEth decode(const void* in) { return {core::load_be64(in)}; }
  friend bool operator==(const AtomicAckEth&, const AtomicAckEth&) = default;
};

/// FLUSH placement types (FETH bits 3:0; ibv_placement_type's values) and selectivity levels
/// (bits 5:4; ibv_selectivity_level's).
inline constexpr uint8_t kFlushGlobal = 1u << 0;      ///< global visibility
inline constexpr uint8_t kFlushPersistent = 1u << 1;  ///< persistence
inline constexpr uint8_t kFlushRange = 0;             ///< the RETH's range
inline constexpr uint8_t kFlushMr = 1;                ///< the whole region the R_Key names

struct Feth {
  uint8_t placement_type = 0;  ///< 4 bits
  uint8_t selectivity = 0;     ///< 2 bits
  uint32_t resv = 0;           ///< 26 reserved bits, kept so a parsed packet rebuilds the same

  void encode(void* out) const {
    core::store_be32(out, (resv << 6) | (uint32_t{selectivity & 3u} << 4) | (placement_type & 0xfu));
  }
  static Feth decode(const void* in) {
    const uint32_t v = core::load_be32(in);
    return {static_cast<uint8_t>(v & 0xf), static_cast<uint8_t>((v >> 4) & 3), v >> 6};
  }
  friend bool operator==(const Feth&, const Feth&) = default;
};

struct Xrceth {
  uint8_t resv8 = 0;     ///< reserved, kept so a parsed packet rebuilds the same
  uint32_t xrc_srq = 0;  ///< 24 bits: the XRC SRQ the request goes to
  void encode(void* out) const {
    auto* w = static_cast<XrcethWire*>(out);
    w->resv8 = resv8;
    core::store_be24(w->xrc_srq, xrc_srq);
  }
  static Xrceth decode(const void* in) {
    const auto* w = static_cast<const XrcethWire*>(in);
    return {w->resv8, core::load_be24(w->xrc_srq)};
  }
  friend bool operator==(const Xrceth&, const Xrceth&) = default;
};

struct Deth {
  uint32_t qkey = 0;
  uint8_t resv8 = 0;
  uint32_t src_qp = 0;

  void encode(void* out) const {
    auto* w = static_cast<DethWire*>(out);
    core::store_be32(&w->qkey, qkey);
    w->resv8 = resv8;
    core::store_be24(w->src_qp, src_qp);
  }
  static Deth decode(const void* in) {
    const auto* w = static_cast<const DethWire*>(in);
    return {core::load_be32(&w->qkey), w->resv8, core::load_be24(w->src_qp)};
  }
  friend bool operator==(const Deth&, const Deth&) = default;
};

/// Immediate data. Verbs treat it as opaque big-endian bytes (ibv_wc.imm_data
/// is __be32); droce keeps it as the host-order value of those bytes.
struct ImmDt {
  uint32_t imm = 0;
  void encode(void* out) const { core::store_be32(out, imm); }
  static ImmDt decode(const void* in) { return {core::load_be32(in)}; }
  friend bool operator==(const ImmDt&, const ImmDt&) = default;
};

struct Ieth {
  uint32_t rkey = 0;
  void encode(void* out) const { core::store_be32(out, rkey); }
  static Ieth decode(const void* in) { return {core::load_be32(in)}; }
  friend bool operator==(const Ieth&, const Ieth&) = default;
};

struct Cnp {
  uint64_t reserved_hi = 0;
  uint64_t reserved_lo = 0;
  void encode(void* out) const {
    auto* b = static_cast<uint8_t*>(out);
    core::store_be64(b, reserved_hi);
    core::store_be64(b + 8, reserved_lo);
  }
  static Cnp decode(const void* in) {
    const auto* b = static_cast<const uint8_t*>(in);
    return {core::load_be64(b), core::load_be64(b + 8)};
  }
  friend bool operator==(const Cnp&, const Cnp&) = default;
};

/// 24-bit PSN arithmetic (IBA 9.7.1): a is before b when the 24-bit
/// difference, moved to the top of a 32-bit integer, is negative.
inline int32_t psn_diff(uint32_t a, uint32_t b) {
  return static_cast<int32_t>((a - b) << 8) >> 8;
}
inline uint32_t psn_add(uint32_t psn, uint32_t n) { return (psn + n) & kPsnMask; }

}  // namespace droce::rocev2
