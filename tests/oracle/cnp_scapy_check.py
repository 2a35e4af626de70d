#!/usr/bin/python3
"""scapy as the oracle for droce's CNPs (rocev2/dcqcn.h, Engine::np_rx_ce).

Usage: cnp_scapy_check.py FILE DQPN DSCP
FILE holds Ethernet frames droce built, one per line in hex. Each must dissect in scapy's RoCE
layer (scapy.contrib.roce, Debian's python3-scapy) as a CNP: BTH opcode 0x81, BECN set, FECN
clear, destination QP DQPN, PSN 0, P_Key 0xffff, then CNPPadding (16 zero bytes) and the ICRC;
IPv4 DSCP DSCP and ECN Not-ECT. The ICRC must be the one scapy computes, and the frame must be
byte for byte what scapy's own cnp(DQPN) builds with the same addresses.
Exit: 0 all good, 1 a check failed (each printed), 77 scapy is not importable (skip).
"""
import sys

try:
    from scapy.compat import raw
    from scapy.contrib.roce import BTH, CNPPadding, cnp
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
except ImportError as e:
    print(f"scapy not importable ({e}); run with /usr/bin/python3 (Debian python3-scapy)")
    sys.exit(77)


def check(frame, dqpn, dscp):
    problems = []
    p = Ether(frame)
    if IP not in p or UDP not in p or p[UDP].dport != 4791 or BTH not in p:
        return [f"not RoCEv2 over IPv4: {p.summary()}"]
    bth = p[BTH]
    want = {"opcode": 0x81, "becn": 1, "fecn": 0, "dqpn": dqpn, "psn": 0, "pkey": 0xFFFF, "padcount": 0,
            "version": 0, "ackreq": 0, "solicited": 0}
    for field, value in want.items():
        if getattr(bth, field) != value:
            problems.append(f"BTH {field} {getattr(bth, field):#x}, want {value:#x}")
    if CNPPadding not in p:
        problems.append("no CNPPadding after the BTH")
    elif raw(p[CNPPadding])[:16] != bytes(16):
        problems.append(f"CNP reserved bytes not zero: {raw(p[CNPPadding])[:16].hex()}")
    if p[IP].tos >> 2 != dscp or p[IP].tos & 3 != 0:
        problems.append(f"IP TOS {p[IP].tos:#04x}, want DSCP {dscp} and Not-ECT")
    if len(frame) != 14 + 20 + 8 + 12 + 16 + 4:
        problems.append(f"{len(frame)} bytes, want 74 (Ethernet, IPv4, UDP, BTH, 16 reserved, ICRC)")
    # The ICRC as scapy computes it: rebuild the frame with the field left for scapy to fill.
    again = Ether(frame)
    again[BTH].icrc = None
    if raw(again) != frame:
        problems.append(f"ICRC {frame[-4:].hex()}, scapy computes {raw(again)[-4:].hex()}")
    # scapy's own CNP with the same addresses and IP fields.
    ip = p[IP]
    ref = (Ether(src=p.src, dst=p.dst) /
           IP(src=ip.src, dst=ip.dst, tos=ip.tos, ttl=ip.ttl, id=ip.id, flags=ip.flags) /
           UDP(sport=p[UDP].sport, dport=4791, chksum=0) / cnp(dqpn))
    if raw(ref) != frame:
        problems.append(f"differs from scapy's cnp({dqpn:#x}):\n  droce {frame.hex()}\n  scapy {raw(ref).hex()}")
    return problems


def main():
    path, dqpn, dscp = sys.argv[1], int(sys.argv[2], 0), int(sys.argv[3], 0)
    failed = 0
    with open(path) as f:
        frames = [bytes.fromhex(line.strip()) for line in f if line.strip()]
    for n, frame in enumerate(frames):
        for problem in check(frame, dqpn, dscp):
            print(f"frame {n}: {problem}")
            failed += 1
    print(f"{len(frames)} CNPs checked, {failed} problems")
    return 1 if failed or not frames else 0


if __name__ == "__main__":
    sys.exit(main())
