#!/usr/bin/python3
"""scapy as an independent oracle for droce's RoCEv2 builder/parser and ICRC.

Needs Debian's python3-scapy (2.5.0), i.e. run with /usr/bin/python3.

  A. `droce gen` frames are dissected by scapy and checked against the .jsonl.
  B. scapy-built frames must be decoded by `droce decode --json` as built.
  C. negative controls: covered-byte corruptions must be rejected (bad_icrc),
     masked-field changes must be accepted, non-RoCE frames must be "foreign".

Usage: scapy_oracle.py --droce PATH --workdir DIR [--count N] [--seed S]
Hidden: --selftest runs A/B/C against a fake droce built from this file's own
builder and dissector (`--fake-droce gen|decode ...`), so no binary is needed.
"""
import argparse, json, os, random, shlex, socket, struct, subprocess, sys, tempfile, time, zlib

try:
    from scapy.compat import raw
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP, TCP, in4_chksum
    from scapy.layers.inet6 import IPv6, in6_chksum
    from scapy.layers.l2 import ARP, Dot1Q, Ether
    from scapy.packet import Raw
    from scapy.utils import checksum, rdpcap, wrpcap
except ImportError as e:
    sys.exit(print(f"error: scapy not importable ({e}); run with /usr/bin/python3 "
                   "(Debian python3-scapy)", file=sys.stderr) or 2)

FIELDS = ("opcode", "psn", "dqpn", "pad", "payload_len", "ip_version", "vlan",
          "se", "ackreq", "pkey")
CNP = 0x81
RC = set(range(0x00, 0x15)) | {0x16, 0x17, 0x1C, 0x1D}   # 0x1C FLUSH, 0x1D ATOMIC WRITE (IBA 1.5)
UC = set(range(0x20, 0x2C))                      # SEND 0x00-0x05, WRITE 0x06-0x0B
UD = {0x64, 0x65}                                # SEND_ONLY, SEND_ONLY_WITH_IMM
XRC = {0xA0 | o for o in range(0x00, 0x15)} | {0xB6, 0xB7}  # IBA A14: RC's 0x00-0x17, no IBA 1.5 ones
VALID = sorted(RC | UC | UD | XRC | {CNP})
NO_PAYLOAD = {0x0C, 0x11, 0x12, 0x13, 0x14, 0x1C, 0xAC, 0xB1, 0xB2, 0xB3, 0xB4, CNP}  # READ req, ACK,
                                                 # atomic ACK/req, FLUSH, CNP (and XRC's)
FIRST_MIDDLE = {0x00, 0x01, 0x06, 0x07, 0x0D, 0x0E, 0x20, 0x21, 0x26, 0x27,
                0xA0, 0xA1, 0xA6, 0xA7, 0xAD, 0xAE}
AETH_OPS = {0x0D, 0x0F, 0x10, 0x11, 0x12}         # AETH is the first ext header
MAX_PAYLOAD = 4096


def ext_len(op):
    """Bytes of extension headers between BTH and payload, None if invalid."""
    if op not in VALID:
        return None
    if op == CNP:
        return 16                                 # reserved bytes
    low, n = op & 0x1F, 0
    # XRCETH: every XRC request, first after the BTH (A14.4.1); responses have none.
    n += 4 if op in XRC and low not in (0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12) else 0
    n += 8 if op in UD else 0                     # DETH (before ImmDt)
    n += 4 if low == 0x1C else 0                  # FETH (before RETH)
    n += 16 if low in (0x06, 0x0A, 0x0B, 0x0C, 0x1C, 0x1D) else 0     # RETH
    n += 28 if low in (0x13, 0x14) else 0         # AtomicETH
    n += 4 if low in AETH_OPS else 0              # AETH
    n += 8 if low == 0x12 else 0                  # AtomicAckETH
    n += 4 if low in (0x03, 0x05, 0x09, 0x0B) else 0      # ImmDt
    n += 4 if low in (0x16, 0x17) else 0          # IETH
    return n


def icrc_rule(dgram, iphdr_len):
    """ICRC of an IP datagram (IP header .. ICRC included), as wire bytes.

    RoCEv2 rule, implemented here because scapy's BTH.compute_icrc handles IPv4
    only (IPv6 is a TODO in scapy.contrib.roce): CRC-32 (zlib.crc32, init 0) over
    8 bytes of 0xFF + IP header + UDP header + BTH + ext headers + payload + pad,
    with these fields replaced by all-ones: IPv4 TOS, TTL, header checksum;
    IPv6 traffic class, flow label, hop limit; UDP checksum; BTH byte 4 (FECN,
    BECN, 6 reserved bits). IP/UDP lengths already include the 4 ICRC bytes.
    The 32-bit result goes on the wire least-significant byte first.
    Cross-checked against scapy's compute_icrc on every IPv4 frame built here.
    """
    b = bytearray(dgram[:-4])
    if b[0] >> 4 == 4:
        b[1] = b[8] = 0xFF
        b[10:12] = b"\xff\xff"
    else:
        b[0] |= 0x0F
        b[1:4] = b"\xff\xff\xff"
        b[7] = 0xFF
    b[iphdr_len + 6:iphdr_len + 8] = b"\xff\xff"
    b[iphdr_len + 8 + 4] = 0xFF
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(b)) & 0xFFFFFFFF)


class Foreign(Exception):
    pass


class Bad(Exception):
    pass


def _walk(p):
    l2, vlan, ip = 14, None, p.payload
    if isinstance(ip, Dot1Q):
        l2, vlan, ip = 18, ip.vlan, ip.payload
    if not isinstance(ip, (IP, IPv6)) or not isinstance(ip.payload, UDP) \
            or ip.payload.dport != 4791:
        raise Foreign()
    return l2, vlan, ip, ip.payload


def dissect(frame):
    """scapy dissection of one Ethernet frame -> info dict (FIELDS + extras).
    Raises Foreign for non-RoCEv2 frames, Bad for unparseable ones; structural
    inconsistencies are listed in info["problems"]."""
    l2, vlan, ip, udp = _walk(Ether(frame))
    v4 = isinstance(ip, IP)
    hdr, total = (ip.ihl * 4, ip.len) if v4 else (40, 40 + ip.plen)
    end, probs = l2 + total, []
    if len(frame) < end:
        raise Bad(f"frame {len(frame)} bytes < L2 {l2} + IP length {total}")
    if len(frame) > end:                         # only Ethernet min-size padding
        if len(frame) not in (60, 64):
            probs.append(f"{len(frame) - end} trailing bytes after IP datagram")
        l2, vlan, ip, udp = _walk(Ether(frame[:end]))   # keep padding out of BTH
    if udp.len != total - hdr:
        raise Bad(f"UDP length {udp.len} != IP payload length {total - hdr}")
    if v4 and checksum(frame[l2:l2 + hdr]) != 0:
        probs.append(f"bad IPv4 header checksum {ip.chksum:#06x}")
    udp_bytes = frame[l2 + hdr:end]
    if udp.chksum and (in4_chksum(17, ip, udp_bytes) if v4 else in6_chksum(17, udp, udp_bytes)):
        probs.append(f"nonzero UDP checksum {udp.chksum:#06x} is wrong")
    if len(udp_bytes) < 8 + 12 + 4:
        raise Bad(f"UDP payload {len(udp_bytes) - 8} bytes, too short for BTH+ICRC")
    bth = udp.payload
    if not isinstance(bth, BTH):                 # scapy guessed another layer
        udp.remove_payload()
        bth = BTH(udp_bytes[8:])
        udp.add_payload(bth)
    ext, wire = ext_len(bth.opcode), udp_bytes[-4:]
    plen = None if ext is None else len(udp_bytes) - 8 - 12 - ext - bth.padcount - 4
    if plen is not None and plen < 0:
        raise Bad(f"UDP length {udp.len} too short for opcode {bth.opcode:#x} + pad")
    own = icrc_rule(frame[l2:end], hdr)
    want = own
    if v4:
        want = bth.compute_icrc(b"")              # scapy's own IPv4 ICRC
        if want != own:
            probs.append(f"ORACLE: scapy ICRC {want.hex()} != rule {own.hex()}")
    bth_off = l2 + hdr + 8
    return dict(opcode=bth.opcode, psn=bth.psn, dqpn=bth.dqpn, pad=bth.padcount,
                payload_len=plen, ip_version=4 if v4 else 6, vlan=vlan,
                se=bth.solicited, ackreq=bth.ackreq, pkey=bth.pkey, tver=bth.version,
                icrc=int.from_bytes(wire, "little"), icrc_ok=wire == want,
                expected_icrc=int.from_bytes(want, "little"), problems=probs,
                bth_off=bth_off, payload_off=bth_off + 12 + (ext or 0))


def semantic_problems(info):
    op, n, pad = info["opcode"], info["payload_len"], info["pad"]
    if op not in VALID:
        return [f"opcode {op:#04x} not a valid RC/UC/UD/XRC/CNP opcode"]
    p = [] if info["tver"] == 0 else [f"BTH version {info['tver']} != 0"]
    if pad != (-n) % 4:
        p.append(f"pad {pad} != (-payload_len {n}) % 4")
    if op in NO_PAYLOAD and n:
        p.append(f"opcode {op:#04x} carries no payload but has {n} bytes")
    if op in FIRST_MIDDLE and (n < 4 or n % 4):
        p.append(f"first/middle opcode {op:#04x} with payload {n}")
    if n > MAX_PAYLOAD:
        p.append(f"payload {n} > {MAX_PAYLOAD}")
    return p


def _addr(rng, v4):
    if v4:
        return "10." + ".".join(str(rng.randrange(256)) for _ in range(3))
    return socket.inet_ntop(socket.AF_INET6, b"\xfd" + rng.randbytes(15))


def build_frame(rng):
    """One random valid RoCEv2 frame built with scapy -> (bytes, spec, agree),
    agree = scapy's IPv4 ICRC equals icrc_rule (None for IPv6)."""
    op = rng.choice(VALID)
    if op in NO_PAYLOAD:
        n = 0
    elif op in FIRST_MIDDLE:
        n = 4 * rng.randint(1, MAX_PAYLOAD // 4)
    elif rng.random() < 0.25:                    # edge cases
        n = rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 4093, 4094, 4095, MAX_PAYLOAD])
    else:
        n = rng.randint(0, MAX_PAYLOAD)
    v4, vlan = rng.random() < 0.5, rng.choice([None, rng.randint(1, 4094)])
    spec = dict(opcode=op, psn=rng.randrange(1 << 24), dqpn=rng.randrange(1 << 24),
                pad=(-n) % 4, payload_len=n, ip_version=4 if v4 else 6, vlan=vlan,
                se=rng.randrange(2), ackreq=rng.randrange(2),
                # 0x0000 and 0x8000 are invalid P_Keys (IBA 10.9.1.2), refused by droce.
                # (low 15 bits nonzero, membership bit either way).
                pkey=rng.choice([0xFFFF, rng.randint(1, 0x7FFF) | rng.choice([0, 0x8000])]))
    ext = bytearray(16 if op == CNP else rng.randbytes(ext_len(op)))
    if (op & 0x1F) in AETH_OPS:                 # RC and XRC responses
        ext[0] = rng.randrange(0x20)             # AETH syndrome: ACK + credits
    mac = lambda: "02:" + ":".join(f"{rng.randrange(256):02x}" for _ in range(5))
    p = Ether(src=mac(), dst=mac())
    if vlan is not None:
        p /= Dot1Q(vlan=vlan, prio=rng.randrange(8))
    if v4:
        p /= IP(src=_addr(rng, 1), dst=_addr(rng, 1), tos=rng.randrange(256),
                ttl=rng.randint(1, 255), id=rng.randrange(65536), flags="DF")
    else:
        p /= IPv6(src=_addr(rng, 0), dst=_addr(rng, 0), tc=rng.randrange(256),
                  fl=rng.randrange(1 << 20), hlim=rng.randint(1, 255))
    p /= UDP(sport=rng.randint(49152, 65535), dport=4791, chksum=0)
    p /= BTH(opcode=op, solicited=spec["se"], migreq=rng.randrange(2),
             padcount=spec["pad"], pkey=spec["pkey"], fecn=rng.randrange(2),
             becn=rng.randrange(2), dqpn=spec["dqpn"], ackreq=spec["ackreq"],
             psn=spec["psn"], icrc=0) / Raw(bytes(ext) + rng.randbytes(n) + b"\0" * spec["pad"])
    f = bytearray(raw(p))
    l2 = 18 if vlan is not None else 14
    f[-4:] = icrc_rule(bytes(f[l2:]), 20 if v4 else 40)
    spec["icrc"], agree = int.from_bytes(f[-4:], "little"), None
    if v4:
        p[BTH].icrc = None                       # let scapy compute it
        agree = raw(p)[-4:] == f[-4:]
    return bytes(f) + b"\0" * max(0, 60 - len(f)), spec, agree


def mutate_masked(rng, frame):
    """Change a field the ICRC masks; keeps the IPv4 header checksum valid."""
    p, kind = Ether(frame), rng.choice(["ttl", "tos", "udp"])
    ip = p[IP] if IP in p else p[IPv6]
    if kind == "udp":
        p[UDP].chksum = None                     # scapy fills the valid checksum
    elif kind == "ttl":
        old = ip.ttl if IP in p else ip.hlim
        new = rng.choice([t for t in range(1, 256) if t != old])
        setattr(ip, "ttl" if IP in p else "hlim", new)
    elif IP in p:
        ip.tos ^= rng.randint(1, 255)
    else:
        ip.tc, ip.fl = ip.tc ^ rng.randint(1, 255), ip.fl ^ rng.randint(1, 0xFFFFF)
    if IP in p:
        ip.chksum = None
    return raw(p), kind


class Report:
    def __init__(self, seed):
        self.seed, self.passed, self.failed, self.parts = seed, 0, 0, {}

    def check(self, part, frame, problems):
        c = self.parts.setdefault(part, [0, 0])
        if not problems:
            self.passed += 1
            c[0] += 1
            return
        self.failed += 1
        c[1] += 1
        if self.failed <= 20:
            where = f"frame {frame}" if frame is not None else "run"
            print(f"FAIL [{part}] {where} seed {self.seed}: " + "; ".join(problems))


def run(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, "", str(e)
    return r.returncode, r.stdout, r.stderr


def decode(droce, pcap):
    rc, out, err = run([droce, "decode", "--json", pcap])
    objs, junk = {}, []
    for line in out.splitlines():
        try:
            o = json.loads(line)
            objs[o["frame"]] = o
        except (ValueError, KeyError, TypeError):
            if line.strip():
                junk.append(line[:80])
    return rc, objs, junk, (": " + err.strip()[-300:]) if err.strip() else ""


def run_problems(rc, want_rc, err, objs, junk, n):
    p = [f"decode exited {rc} (want {want_rc}){err}"] if rc != want_rc else []
    if sorted(objs) != list(range(1, n + 1)):
        p.append(f"decode reported {len(objs)} frames, want frames 1..{n}")
    return p + [f"unparsable decode line {j!r}" for j in junk[:3]]


def diff(want, got, who):
    return [f"{k}: {who} {got.get(k, 'missing')!r} != scapy {want[k]!r}"
            for k in FIELDS if k not in got or got[k] != want[k]]


def part_a(droce, work, seed, count, rep):
    out = os.path.join(work, "gen.pcap")
    rc, _, err = run([droce, "gen", "--seed", str(seed), "--count", str(count), out])
    if rc != 0:
        return rep.check("A", None, [f"gen exited {rc}: {err.strip()[-300:]}"])
    try:
        pkts = rdpcap(out)
        with open(out + ".jsonl") as fh:
            meta = [json.loads(l) for l in fh if l.strip()]
    except (OSError, ValueError) as e:
        return rep.check("A", None, [f"cannot read gen output: {e}"])
    rep.check("A", None, [] if len(pkts) == len(meta) == count else
              [f"{len(pkts)} frames, {len(meta)} jsonl lines, asked for {count}"])
    for i, (pkt, m) in enumerate(zip(pkts, meta), 1):
        if not isinstance(pkt, Ether):
            rep.check("A", i, [f"not an Ethernet frame ({type(pkt).__name__})"])
            continue
        try:
            info = dissect(bytes(pkt.original))
        except Foreign:
            rep.check("A", i, ["scapy does not see Ether/[Dot1Q]/IP|IPv6/UDP 4791/BTH"])
            continue
        except Bad as e:
            rep.check("A", i, [str(e)])
            continue
        probs = info["problems"] + semantic_problems(info) + diff(info, m, "jsonl")
        if not info["icrc_ok"]:
            probs.append(f"ICRC on wire {info['icrc']:#010x} != oracle "
                         f"{info['expected_icrc']:#010x} (IPv{info['ip_version']})")
        rep.check("A", i, probs)


def expect(i, got, status, spec=None):
    if got is None:
        return [f"no decode output for frame {i}"]
    p = [] if got.get("status") == status else [f"status {got.get('status')!r} != {status!r}"]
    if status == "rejected" and got.get("reason") != "bad_icrc":
        p.append(f"reason {got.get('reason')!r} != 'bad_icrc'")
    if status == "ok":
        p += diff(spec, got, "decode")
        if got.get("icrc_ok") is not True or got.get("icrc") != spec["icrc"]:
            p.append(f"icrc {got.get('icrc')!r} icrc_ok {got.get('icrc_ok')!r}, "
                     f"want {spec['icrc']:#010x} true")
    return p


def part_bc(droce, work, rng, count, rep):
    built = [build_frame(rng) for _ in range(count)]
    bad = sum(1 for _, _, a in built if a is False)
    rep.check("X", None, [f"scapy IPv4 ICRC != icrc_rule on {bad} built frames"] if bad else [])
    pcap = os.path.join(work, "scapy_b.pcap")
    wrpcap(pcap, [f for f, _, _ in built], linktype=1)
    rc, objs, junk, err = decode(droce, pcap)
    rep.check("B", None, run_problems(rc, 0, err, objs, junk, count))
    for i, (f, spec, _) in enumerate(built, 1):
        rep.check("B", i, expect(i, objs.get(i), "ok", spec))

    # C: ~50 covered-byte corruptions, ~20 masked-field changes, 4 foreign frames
    idx = rng.sample(range(count), min(count, 70))
    n_mask = min(20, len(idx) // 3)
    cases = []
    for k, j in enumerate(idx):
        f, spec, _ = built[j]
        if k < n_mask:
            g, what = mutate_masked(rng, f)
            cases.append((g, "ok", spec, f"masked {what} of B frame {j + 1}"))
            continue
        info, g = dissect(f), bytearray(f)
        if info["payload_len"] and rng.random() < 0.7:
            pos, what = info["payload_off"] + rng.randrange(info["payload_len"]), "payload"
        else:
            pos, what = info["bth_off"] + 9 + rng.randrange(3), "BTH PSN"
        g[pos] ^= rng.randint(1, 255)
        cases.append((bytes(g), "rejected", None, f"{what} byte {pos} of B frame {j + 1}"))
    e = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    for g in (e / IP(dst="10.0.0.1") / UDP(sport=4791, dport=4792) / Raw(b"x" * 40),
              e / IPv6(dst="fd00::1") / UDP(dport=53) / Raw(b"y" * 20),
              e / IP(dst="10.0.0.2") / TCP(dport=4791), e / ARP()):
        cases.append((raw(g), "foreign", None, "non-RoCEv2 frame"))
    pcap = os.path.join(work, "scapy_c.pcap")
    wrpcap(pcap, [c[0] for c in cases], linktype=1)
    rc, objs, junk, err = decode(droce, pcap)
    rep.check("C", None, run_problems(rc, 1, err, objs, junk, len(cases)))
    for i, (g, status, spec, what) in enumerate(cases, 1):
        p = expect(i, objs.get(i), status, spec)
        rep.check("C", i, [f"({what}) " + "; ".join(p)] if p else [])


def fake_droce(argv):
    """Stand-in for the droce binary, used by --selftest only."""
    if argv[:1] == ["gen"]:
        ap = argparse.ArgumentParser()
        for name in ("cmd", "--seed", "--count", "out"):
            ap.add_argument(name, type=int if name.startswith("--") else str)
        a = ap.parse_args(argv)
        rng = random.Random(a.seed ^ 0x5EED)
        built = [build_frame(rng) for _ in range(a.count)]
        wrpcap(a.out, [f for f, _, _ in built], linktype=1)
        with open(a.out + ".jsonl", "w") as fh:
            fh.writelines(json.dumps({k: s[k] for k in FIELDS}) + "\n" for _, s, _ in built)
        return 0
    rejected = 0
    for i, pkt in enumerate(rdpcap(argv[2]), 1):
        try:
            info = dissect(bytes(pkt.original))
            o = dict(frame=i, status="ok" if info["icrc_ok"] else "rejected",
                     **{k: info[k] for k in FIELDS + ("icrc", "icrc_ok")})
            if not info["icrc_ok"]:
                o["reason"] = "bad_icrc"
        except Foreign:
            o = dict(frame=i, status="foreign")
        except Bad:
            o = dict(frame=i, status="rejected", reason="malformed")
        rejected += o["status"] == "rejected"
        print(json.dumps(o))
    return 1 if rejected else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--droce")
    ap.add_argument("--workdir")
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=int(time.time() * 1000) % (1 << 31))
    ap.add_argument("--selftest", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.selftest:
        a.workdir = a.workdir or tempfile.mkdtemp(prefix="scapy_oracle.")
        os.makedirs(a.workdir, exist_ok=True)
        a.droce = os.path.join(a.workdir, "fake_droce")
        with open(a.droce, "w") as fh:
            fh.write(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
                     f"{shlex.quote(os.path.abspath(__file__))} --fake-droce \"$@\"\n")
        os.chmod(a.droce, 0o755)
    if not a.droce or not a.workdir:
        ap.error("--droce and --workdir are required")
    if not (os.path.isfile(a.droce) and os.access(a.droce, os.X_OK)):
        print(f"error: droce binary not found or not executable: {a.droce}", file=sys.stderr)
        return 2
    os.makedirs(a.workdir, exist_ok=True)
    print(f"seed {a.seed}  count {a.count}  droce {a.droce}  workdir {a.workdir}")
    print(f"reproduce: {sys.argv[0]} --droce {a.droce} --workdir {a.workdir} "
          f"--count {a.count} --seed {a.seed}")
    rep = Report(a.seed)
    part_a(a.droce, a.workdir, a.seed, a.count, rep)
    part_bc(a.droce, a.workdir, random.Random(a.seed), a.count, rep)
    if rep.failed > 20:
        print(f"... {rep.failed - 20} more failures not shown")
    names = {"A": "droce gen -> scapy", "X": "scapy vs rule ICRC (IPv4)",
             "B": "scapy -> droce decode", "C": "negative controls"}
    for k in "AXBC":
        p, f = rep.parts.get(k, [0, 0])
        print(f"  {k} {names[k]:28s} {p} passed, {f} failed")
    print(f"{rep.passed} passed, {rep.failed} failed")
    return 0 if rep.failed == 0 else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--fake-droce"]:
        sys.exit(fake_droce(sys.argv[2:]))
    sys.exit(main())
