#!/usr/bin/env python3
"""Reads a pcapng file by hand (independently of droce's writer and of tshark) and checks every
whole RoCEv2 frame's ICRC with zlib's CRC-32 (IBA Annex A17.4.3.4: eight 0xff bytes for the
absent LRH, the IP and UDP headers and the BTH with their variant fields masked to ones).

  capture_check.py FILE.pcapng
Prints "frames=N inbound=I outbound=O icrc_checked=C icrc_bad=B snaplen=S dropped=D" and exits
1 when a block is malformed or an ICRC is wrong."""
import struct
import sys
import zlib


def icrc_ok(f):
    off = 12
    etype = struct.unpack_from(">H", f, off)[0]
    if etype == 0x8100:
        off += 4
        etype = struct.unpack_from(">H", f, off)[0]
    l3 = off + 2
    if etype == 0x0800 and f[l3] == 0x45 and f[l3 + 9] == 17:
        hdr = bytearray(f[l3:l3 + 20])
        hdr[1] = 0xff                      # TOS
        hdr[8] = 0xff                      # TTL
        hdr[10:12] = b"\xff\xff"           # header checksum
        l4 = l3 + 20
    elif etype == 0x86DD and f[l3 + 6] == 17:
        hdr = bytearray(f[l3:l3 + 40])
        hdr[0] |= 0x0f                     # traffic class, flow label
        hdr[1:4] = b"\xff\xff\xff"
        hdr[7] = 0xff                      # hop limit
        l4 = l3 + 40
    else:
        return None
    if struct.unpack_from(">H", f, l4 + 2)[0] != 4791:
        return None
    udp = bytearray(f[l4:l4 + 8])
    udp[6:8] = b"\xff\xff"                 # UDP checksum
    bth = bytearray(f[l4 + 8:l4 + 20])
    bth[4] = 0xff                          # FECN, BECN, resv6
    covered = b"\xff" * 8 + bytes(hdr) + bytes(udp) + bytes(bth) + f[l4 + 20:len(f) - 4]
    return zlib.crc32(covered) & 0xffffffff == struct.unpack_from("<I", f, len(f) - 4)[0]


def main():
    data = open(sys.argv[1], "rb").read()
    pos, frames, inbound, outbound, checked, bad, snaplen, dropped = 0, 0, 0, 0, 0, 0, None, None
    while pos < len(data):
        if len(data) - pos < 12:
            sys.exit(f"a block cut short at {pos}")
        btype, blen = struct.unpack_from("<II", data, pos)
        if blen < 12 or blen % 4 or pos + blen > len(data) or struct.unpack_from("<I", data, pos + blen - 4)[0] != blen:
            sys.exit(f"block at {pos}: bad length {blen}")
        body = data[pos + 8:pos + blen - 4]
        if btype == 1:
            snaplen = struct.unpack_from("<I", body, 4)[0]
        elif btype == 6:
            caplen, wirelen = struct.unpack_from("<II", body, 12)
            frame = body[20:20 + caplen]
            opts = body[20 + ((caplen + 3) & ~3):]
            flags = 0
            while len(opts) >= 4:
                code, olen = struct.unpack_from("<HH", opts, 0)
                if code == 0:
                    break
                if code == 2:
                    flags = struct.unpack_from("<I", opts, 4)[0]
                opts = opts[4 + ((olen + 3) & ~3):]
            frames += 1
            inbound += (flags & 3) == 1
            outbound += (flags & 3) == 2
            if caplen == wirelen:
                ok = icrc_ok(frame)
                if ok is not None:
                    checked += 1
                    bad += not ok
        elif btype == 5:
            # interface, time, then isb_ifrecv and isb_ifdrop (net/pcapng.cc's order)
            dropped = struct.unpack_from("<Q", body, 28)[0] if len(body) >= 36 else None
        pos += blen
    print(f"frames={frames} inbound={inbound} outbound={outbound} icrc_checked={checked} icrc_bad={bad} "
          f"snaplen={snaplen} dropped={dropped}")
    sys.exit(1 if bad else 0)


main()
