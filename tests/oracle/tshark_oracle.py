#!/usr/bin/env python3
"""tshark (Wireshark's dissector) as a second, independent oracle for droce's
packet builder: every random frame `droce gen` writes must dissect as
RoCEv2 (InfiniBand over UDP 4791), not be marked malformed, and carry in the
BTH fields tshark reads the values droce meant (from OUT.pcap.jsonl).

tshark does not check the ICRC (scapy's oracle does); the only expert notes
allowed are the ones RoCEv2 itself implies: a zero UDP checksum over IPv6
(Annex A17 allows it) and warnings about the random TTLs.

usage: tshark_oracle.py --droce PATH --workdir DIR [--count N] [--seed S]
Ends with "N passed, M failed"; exit 0 only when M == 0; 2 when tshark is missing.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

FIELDS = ["frame.number", "frame.protocols", "_ws.malformed", "_ws.expert.severity", "_ws.expert.message",
          "infiniband.bth.opcode", "infiniband.bth.psn", "infiniband.bth.destqp", "infiniband.bth.padcnt",
          "infiniband.bth.se", "infiniband.bth.a", "infiniband.bth.p_key", "infiniband.bth.tver"]
ALLOWED_EXPERT = ("Illegal checksum value (0)", '"Time To Live" only')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--droce", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    a = ap.parse_args()
    tshark = shutil.which("tshark")
    if tshark is None:
        print("tshark_oracle: tshark is not installed (scripts/install-deps.sh installs it)")
        return 2
    os.makedirs(a.workdir, exist_ok=True)
    pcap = os.path.join(a.workdir, "tshark_oracle.pcap")
    print(f"seed {a.seed}; reproduce: {sys.argv[0]} --droce {a.droce} --workdir {a.workdir} "
          f"--count {a.count} --seed {a.seed}")
    subprocess.run([a.droce, "gen", "--seed", str(a.seed), "--count", str(a.count), pcap], check=True,
                   stdout=subprocess.DEVNULL)
    want = [json.loads(line) for line in open(pcap + ".jsonl")]
    cmd = [tshark, "-r", pcap, "-n", "--disable-heuristic", "rpcrdma_infiniband", "-T", "fields",
           "-E", "separator=\t", "-E", "occurrence=a", "-E", "aggregator=|"]
    for f in FIELDS:
        cmd += ["-e", f]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=dict(os.environ, LC_ALL="C")).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    passed = failed = 0
    shown = 0
    guessed = 0

    def fail(n, what):
        nonlocal failed, shown
        failed += 1
        if shown < 20:
            print(f"FAIL frame {n} seed {a.seed}: {what}")
            shown += 1

    if len(rows) != len(want):
        fail(0, f"tshark read {len(rows)} frames, droce wrote {len(want)}")
    for row, w in zip(rows, want):
        r = dict(zip(FIELDS, row + [""] * (len(FIELDS) - len(row))))
        n = r["frame.number"]
        problems = []
        if "infiniband" not in r["frame.protocols"].split(":"):
            problems.append(f"not dissected as RoCEv2: {r['frame.protocols']}")
        # tshark's heuristic payload dissectors (EoIB, SMC, iSER, ...) sometimes
        # read a random payload as their protocol and then complain about it.
        # Such notes and "malformed" marks are about the payload bytes, not
        # droce's headers: they count only when nothing was dissected past the
        # InfiniBand layer. The BTH fields are compared for every frame.
        layers = r["frame.protocols"].split(":")
        after_ib = layers[layers.index("infiniband") + 1:] if "infiniband" in layers else []
        payload_guessed = any(layer != "data" for layer in after_ib)
        guessed += payload_guessed
        if r["_ws.malformed"] and not payload_guessed:
            problems.append("marked malformed")
        for msg in filter(None, r["_ws.expert.message"].split("|")):
            if not msg.startswith(ALLOWED_EXPERT) and not payload_guessed:
                problems.append(f"expert: {msg}")
        got = {
            "opcode": int(r["infiniband.bth.opcode"] or -1),
            "psn": int(r["infiniband.bth.psn"] or -1),
            "dqpn": int(r["infiniband.bth.destqp"] or "-1", 0),
            "pad": int(r["infiniband.bth.padcnt"] or -1),
            "pkey": int(r["infiniband.bth.p_key"] or -1),
        }
        for k, v in got.items():
            if v != w[k]:
                problems.append(f"{k}: tshark {v}, droce meant {w[k]}")
        if int(r["infiniband.bth.tver"] or -1) != 0:
            problems.append("TVer not 0")
        if problems:
            fail(n, "; ".join(problems))
        else:
            passed += 1
    print(f"tshark dissected {len(rows)} frames; {passed} agree with droce "
          f"({guessed} payloads were guessed at by tshark's heuristic dissectors)")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
