#!/usr/bin/python3
"""Checks what rxe-peer.py printed in a rig guest against what droce-interop-peer says it must
have printed (its --expect-out file): the guest's own completions (status, opcode), every
receive (opcode, length, immediate, first bytes), the data its READs and atomics brought
back, and the final contents of its whole memory region (--dump SIZE@0).

usage: check_guest.py EXPECT.json GUEST.log
Prints one line per check; exit 0 when all pass, 1 otherwise.
"""
import json
import sys

IBV_WC_RECV = 128


def check_guest(expect, log_text, report=print):
    """Compares one guest log (rxe-peer.py's output) with droce-interop-peer's expectations;
    calls report(line) per check and returns the number of failed checks."""
    lines = []
    for raw in log_text.splitlines():
        raw = raw.strip()
        if raw.startswith("{"):
            try:
                lines.append(json.loads(raw))
            except json.JSONDecodeError:
                pass
    failures = 0

    def check(ok, what, detail=""):
        nonlocal failures
        failures += not ok
        report(f"{'ok' if ok else 'FAIL'}: guest: {what}{': ' + detail if detail and not ok else ''}")

    wcs = [e for e in lines if e.get("event") == "wc"]
    # rxe reports opcode 0 in a failed send completion; receive completions are 128 and up.
    sends = [w for w in wcs if not w["opcode"] & IBV_WC_RECV]
    recvs = [w for w in wcs if w["opcode"] & IBV_WC_RECV]
    # recv_data follows its receive completion directly.
    heads = []
    for i, e in enumerate(lines):
        if e.get("event") == "wc" and e["opcode"] & IBV_WC_RECV:
            nxt = lines[i + 1] if i + 1 < len(lines) else {}
            heads.append(nxt.get("head") if nxt.get("event") == "recv_data" else None)
    local = [e for e in lines if e.get("event") == "local_data"]
    dumps = [e for e in lines if e.get("event") == "dump"]

    want = expect["wcs"]
    check(len(sends) == len(want), f"{len(want)} completions of its own ops", f"got {len(sends)}")
    for w, g in zip(want, sends):
        ok = g["status"] == w["status"] and (w["status"] != 0 or g["opcode"] == w["opcode"])
        check(ok, f"{w['op']} completes with status {w['status']}",
              f"status {g['status']} {g.get('status_str', '')} opcode {g['opcode']}")

    want = expect["recvs"]
    check(len(recvs) == len(want), f"{len(want)} receive completions", f"got {len(recvs)}")
    for i, (w, g, h) in enumerate(zip(want, recvs, heads)):
        ok = (g["status"] == 0 and g["opcode"] == w["opcode"] and g["byte_len"] == w["byte_len"]
              and g.get("imm_data") == w.get("imm"))
        detail = f"status {g['status']} opcode {g['opcode']} byte_len {g['byte_len']} imm {g.get('imm_data')}"
        if ok and w["heads"]:
            ok = h in w["heads"]
            detail = f"first bytes {h}, want {w['heads'][0]}"
        check(ok, f"receive {i}: opcode {w['opcode']}, {w['byte_len']} bytes, imm {w.get('imm')}"
              + (", first bytes" if w["heads"] else ""), detail)

    want = expect["local_data"]
    check(len(local) == len(want), f"{len(want)} READ/atomic results", f"got {len(local)}")
    for w, g in zip(want, local):
        check(g["off"] == w["off"] and g["head"] == w["head"], f"result at offset {w['off']}",
              f"{g['head']}, want {w['head']}")

    if not dumps:
        check(False, "its memory dump", "missing (run rxe-peer.py with --dump SIZE@0)")
    else:
        got, exp = bytes.fromhex(dumps[-1]["hex"]), bytes.fromhex(expect["dump"])
        skip = set()
        for lo, hi in expect.get("ignore", []):
            skip.update(range(lo, hi))
        diff = [k for k in range(max(len(got), len(exp)))
                if k not in skip and (k >= len(got) or k >= len(exp) or got[k] != exp[k])]
        detail = ""
        if diff:
            k = diff[0]
            detail = (f"{len(diff)} bytes differ, first at offset {k}: "
                      f"{got[k:k + 8].hex()} want {exp[k:k + 8].hex()}")
        check(not diff, f"its whole memory region ({len(exp)} bytes) is what droce's ops left", detail)
    return failures


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    failures = check_guest(json.load(open(sys.argv[1])), open(sys.argv[2], errors="replace").read())
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
