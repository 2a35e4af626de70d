"""Checks droced's --metrics endpoint against `droce counters --json` / `droce qps --json`.

    droced_metrics_check.py totals|qps|refusals --url URL --droce DROCE --socket SOCK

totals:   reads the JSON, scrapes, reads the JSON again. The scrape must parse with a real
          OpenMetrics parser (prometheus_client's) and show every counter of the JSON under
          droce_<group>_<name> with the device label, each between its two JSON reads (counters
          only grow), so exactly equal to one that did not move between them; the transport
          counters must not have moved (the traffic is over) and must show traffic. Every rdma_*
          family (the kernel's hw_counters names) must equal the droce counter its HELP names.
qps:      the same for the live QPs of `droce qps --json` against droce_qp_*{qpn=...}: the same
          QPs, each counter between its two reads, rdma_qp_* equal to its droce_qp_* twin.
refusals: malformed and foreign requests get 400/404/405 over a raw socket, and a scrape after
          them still answers.
Prints what it checked; exits 1 with the differences otherwise.
"""

import argparse
import json
import re
import socket
import subprocess
import sys
import urllib.parse
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families

CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


def droce_json(args, what):
    out = subprocess.run([args.droce, what, "--json", "--socket", args.socket], check=True, capture_output=True,
                         text=True, timeout=30).stdout
    return json.loads(out)


def scrape(url):
    """{(sample name, frozenset(labels)): value}, and {family: help}."""
    with urllib.request.urlopen(url, timeout=30) as r:
        if r.status != 200:
            fail(f"scrape: status {r.status}")
        if r.headers.get("Content-Type") != CONTENT_TYPE:
            fail(f"scrape: Content-Type {r.headers.get('Content-Type')!r}")
        text = r.read().decode("utf-8")
    samples, helps = {}, {}
    for family in text_string_to_metric_families(text):  # raises on anything malformed
        if family.type != "counter":
            fail(f"{family.name} is a {family.type}, not a counter")
        helps[family.name] = family.documentation
        for s in family.samples:
            if s.name != family.name + "_total":
                fail(f"sample {s.name} in family {family.name}")
            key = (s.name, frozenset(s.labels.items()))
            if key in samples:
                fail(f"{s.name}{s.labels} twice")
            samples[key] = s.value
    return samples, helps


def flat(counters):
    """`droce counters --json` as {family name: value}."""
    out = {}
    for k, v in counters.items():
        if isinstance(v, dict):
            for k2, v2 in v.items():
                out[f"droce_{k}_{k2}"] = v2
        else:
            out[f"droce_{k}"] = v
    return out


def hw_twin(help_text):
    """The droce family an rdma_* family's HELP names ("rxe's sent_pkts: droce's transport tx_packets, ...")."""
    m = re.match(r"\w+'s \w+: droce's (?:(\w+) )?(\w+), ", help_text)
    if not m:
        return None
    return "droce_" + (m.group(1) + "_" if m.group(1) else "") + m.group(2)


def check_totals(args):
    device = frozenset({("device", "droce0")})
    before = flat(droce_json(args, "counters"))
    samples, helps = scrape(args.url)
    after = flat(droce_json(args, "counters"))
    shown = {name[:-len("_total")]: v for (name, labels), v in samples.items()
             if labels == device and name.startswith("droce_")}
    equal = 0
    for name, hi in after.items():
        lo = before.get(name, 0)  # a parse status shows once it is not 0
        if name not in shown:
            fail(f"{name} is in `droce counters --json` but not in the scrape")
            continue
        if not lo <= shown[name] <= hi:
            fail(f"{name}: scraped {shown[name]}, JSON {lo} before and {hi} after")
        equal += lo == hi == shown[name]
    for name in shown:
        if name not in after:
            fail(f"{name} is in the scrape but not in `droce counters --json`")
    transport = [n for n in after if n.startswith("droce_transport_")]
    for name in transport:
        if before.get(name) != after[name]:
            fail(f"{name} moved between the reads ({before.get(name)} -> {after[name]}) with no traffic")
    if after.get("droce_transport_tx_packets", 0) == 0 or after.get("droce_transport_rx_packets", 0) == 0:
        fail("no traffic in the transport counters")
    port = frozenset({("device", "droce0"), ("port", "1")})
    hw = 0
    for (name, labels), v in samples.items():
        family = name[:-len("_total")]
        if not family.startswith("rdma_") or family.startswith("rdma_qp_"):
            continue
        if labels != port:
            fail(f"{name} has labels {dict(labels)}")
        twin = hw_twin(helps[family])
        if twin is None or twin not in shown:
            fail(f"{family}: its HELP names no droce counter: {helps[family]!r}")
        elif v != shown[twin]:
            fail(f"{family} = {v} but {twin} = {shown[twin]} in the same scrape")
        hw += 1
    for rxe in ("sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err", "send_rnr_err",
                "rcvd_seq_err", "retry_exceeded_err", "retry_rnr_exceeded_err", "link_downed"):
        if ("rdma_" + rxe + "_total", port) not in samples:
            fail(f"no rdma_{rxe}")
    print(f"totals: {len(after)} counters match `droce counters --json` ({equal} unmoved and equal, "
          f"transport tx_packets {after.get('droce_transport_tx_packets')}); {hw} rdma_* families equal their twins")


def qp_rows(args):
    return {str(r["qpn"]): r for r in droce_json(args, "qps")}


def check_qps(args):
    before = qp_rows(args)
    samples, helps = scrape(args.url)
    after = qp_rows(args)
    if not after:
        fail("no live QP to compare")
    if set(before) != set(after):
        fail(f"the QPs changed between the reads: {sorted(before)} -> {sorted(after)}")
    per_qp = {}
    for (name, labels), v in samples.items():
        family = name[:-len("_total")]
        if family.startswith("droce_qp_") or family.startswith("rdma_qp_"):
            d = dict(labels)
            want = {"device", "qpn"} | ({"port"} if family.startswith("rdma_") else set())
            if set(d) != want:
                fail(f"{name} has labels {d}")
            per_qp.setdefault(d.get("qpn"), {})[family] = v
    if set(per_qp) != set(after):
        fail(f"the scrape's QPs {sorted(per_qp)} are not `droce qps --json`'s {sorted(after)}")
    compared = 0
    for qpn, row in after.items():
        got = per_qp.get(qpn, {})
        for family, v in got.items():
            if family.startswith("droce_qp_"):
                key = family[len("droce_qp_"):]
                if key not in row:
                    fail(f"qp {qpn}: {family} is not a column of `droce qps --json`")
                    continue
                lo, hi = before.get(qpn, {}).get(key, 0), row[key]
                if not lo <= v <= hi:
                    fail(f"qp {qpn}: {family} scraped {v}, JSON {lo} before and {hi} after")
                compared += 1
            else:
                twin = hw_twin(helps[family])
                twin = twin and "droce_qp_" + twin[len("droce_transport_"):]
                if twin not in got or got[twin] != v:
                    fail(f"qp {qpn}: {family} = {v} but {twin} = {got.get(twin)}")
        if got.get("droce_qp_tx_packets", 0) == 0:
            fail(f"qp {qpn}: no traffic")
    print(f"qps: {sorted(after)} with {compared} counters between their two `droce qps --json` reads")


def raw(host, port, data):
    """Sends data, returns the status line of the answer."""
    with socket.create_connection((host, port), timeout=30) as s:
        s.sendall(data)
        answer = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
    return answer.split(b"\r\n", 1)[0].decode("latin-1")


def check_refusals(args):
    u = urllib.parse.urlsplit(args.url)
    cases = [
        (b"GARBAGE\r\n\r\n", "HTTP/1.1 400 Bad Request"),
        (b"GET /metrics HTTP/9.9\r\n\r\n", "HTTP/1.1 400 Bad Request"),
        (b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 100000 + b"\r\n\r\n", "HTTP/1.1 400 Bad Request"),
        (b"\x00\xff\xfe binary\r\n\r\n", "HTTP/1.1 400 Bad Request"),
        (b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 404 Not Found"),
        (b"DELETE /metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 405 Method Not Allowed"),
    ]
    for data, want in cases:
        got = raw(u.hostname, u.port, data)
        if got != want:
            fail(f"{data[:40]!r}: {got!r}, not {want!r}")
    samples, _ = scrape(args.url)
    if not samples:
        fail("a scrape after the bad requests shows nothing")
    print(f"refusals: {len(cases)} bad requests refused; a scrape after them shows {len(samples)} samples")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["totals", "qps", "refusals"])
    p.add_argument("--url", required=True)
    p.add_argument("--droce", required=True)
    p.add_argument("--socket", required=True)
    args = p.parse_args()
    {"totals": check_totals, "qps": check_qps, "refusals": check_refusals}[args.what](args)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
