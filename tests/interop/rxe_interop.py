#!/usr/bin/python3
"""droce <-> the Linux kernel's soft-RoCE (rdma_rxe) on the wire, through the rxe rig
(../shared/tools/rxe-rig): one guest running rxe-peer.py, one droced on a veth port of the
rig's bridge, droce-interop-peer on droce's side. Run by rxe_interop_test.sh, which decides
whether the machine can run it at all.

For each case the guest and droce each run an op list; droce-interop-peer checks droce's side
(completions, received bytes, READ and atomic results, its whole exposed region) and writes
what the guest must have printed, which check_guest.py compares with the guest's output
(completions, receives, READ and atomic results, its whole memory region). Error cases also
assert droce's per-QP counters and the NAKs on the wire. Every case is captured; at the end
every RoCEv2 packet must pass the rig's independent ICRC check, `droce decode`, and tshark's
dissector, and a comparison of droce's headers with rxe's is printed.

After those cases (at MTU 1500, --tool-mtus), the stock programs of issue #6 run both ways:
perftest's send/write/read/atomic bandwidth and latency tools and ibv_rc/ud_pingpong, on the host
through `droce exec` on droced, in the guest on rxe0 (tool_cases()); both must exit 0 and print
their results, and their captures go through the same checks. --no-tools WHY skips them.

A guest whose emulated NIC stops sending (a known rig problem under TCG) is detected by
pinging it when a case gets no answer; it is restarted once and the case rerun. A second
stall ends the run as inconclusive (exit 77), never as a pass or a droce failure.

usage: rxe_interop.py --rig RXE-RIG.SH --droced DROCED --droce DROCE --peer PEER --workdir DIR
                      [--mtus 1500,9000] [--only NAME[,NAME...]] [--simulate-stall NAME]
                      [--tool-mtus 1500] [--no-tools WHY]
--simulate-stall checks the restart path itself: it takes the guest's tap down during the first
attempt of case NAME, as a stalled emulated NIC would look from outside.
exit: 0 all passed; 1 failures; 77 inconclusive (the rig, not droce).
"""
import argparse
import ctypes
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_guest import check_guest  # noqa: E402

GUEST_IP = "10.99.0.11"
DROCE_IP = "10.99.0.50"
PORT = "drx0"
# droced's link on that veth: DPDK's af_packet (the default), or droce's packet socket
# (DROCE_RXE_PORT_KIND=droce_packet0), whose GSO frames the kernel must cut before rxe's guest.
PORT_KIND = os.environ.get("DROCE_RXE_PORT_KIND", "net_af_packet0")
SIZE = 65536                   # both sides' regions; the guest's receives land at SIZE / 2
PEER_WAIT = 60                 # seconds either program waits for the other
DROP_EVERY = 11                # the loss cases drop every 11th RoCEv2 packet in one direction
LOSS_SIZE = 16384              # ... with regions this small, so no message has DROP_EVERY packets


# An ICMP echo, once a second until one is answered or the time is up (exit 0 when answered).
# The host may have no ping(8); this runs with python3 inside the rig's namespace, as root.
ICMP_PROBE = r"""
import os, socket, struct, sys, time
dst, seconds = sys.argv[1], float(sys.argv[2])
def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff)
    return ~(s + (s >> 16)) & 0xffff
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
s.settimeout(1.0)
ident, end, seq = os.getpid() & 0xffff, time.time() + seconds, 0
while time.time() < end:
    seq += 1
    hdr = struct.pack("!BBHHH", 8, 0, 0, ident, seq) + b"droce-probe!"  # even length
    s.sendto(hdr[:2] + struct.pack("!H", csum(hdr)) + hdr[4:], (dst, 0))
    stop = time.time() + 1.0
    while time.time() < stop:
        try:
            data, addr = s.recvfrom(2048)
        except socket.timeout:
            break
        icmp = data[(data[0] & 15) * 4:]
        if addr[0] == dst and icmp[0] == 0 and struct.unpack("!H", icmp[4:6])[0] == ident:
            sys.exit(0)
sys.exit(1)
"""


class Wedged(Exception):
    """The guest stopped answering on the wire (the rig's emulated-NIC stall)."""


def log(msg):
    print(msg, flush=True)


class Rig:
    def __init__(self, script, rig_dir, netns, guest):
        self.script, self.guest = script, guest
        self.env = dict(os.environ, RIG_DIR=rig_dir, RIG_NETNS=netns)
        self.netns, self.rig_dir = netns, rig_dir
        self.mtu = 1500
        self.console_seen = 0

    def sh(self, *args, timeout=600, check=True):
        env = dict(self.env, RIG_MTU=str(self.mtu))
        p = subprocess.run([self.script, *args], env=env, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise RuntimeError(f"rxe-rig.sh {' '.join(args)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
        return p

    def share(self):
        return os.path.join(self.rig_dir, "vms", self.guest, "share")

    def up(self):
        t0 = time.monotonic()
        self.console_seen = 0
        self.sh("up", self.guest, GUEST_IP, timeout=400)
        return time.monotonic() - t0

    def down(self):
        self.sh("down", self.guest, check=False, timeout=120)

    def start(self, cmd):
        return self.sh("start", self.guest, cmd).stdout.strip()

    # The rig's cap-start leaves its dumpcap behind as an orphan, and its cap-stop polls with
    # kill -0 until that dumpcap is gone: a zombie counts as there until PID 1 reaps it, which in
    # a container can take a second or two, and every case paid it. So this process is
    # the subreaper while cap-start runs (only then: qemu and the rest are not adopted), dumpcap
    # becomes its child, and a thread reaps it as soon as cap-stop's SIGTERM ends it. Where any of
    # that fails (no prctl, another pid file layout), cap-stop is only slower.
    PR_SET_CHILD_SUBREAPER = 36

    def _subreaper(self, on):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(self.PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)
        except (OSError, AttributeError):
            pass

    def cap_start(self, pcap):
        self._subreaper(True)
        try:
            self.sh("cap-start", pcap)
        finally:
            self._subreaper(False)

    def cap_stop(self, pcap):
        digest = hashlib.md5(pcap.encode()).hexdigest()[:12]  # the rig's capf()
        try:
            pid = int(open(os.path.join(self.rig_dir, "caps", digest + ".pid")).read())
        except (OSError, ValueError):
            pid = 0
        done = threading.Event()

        def reap():
            while pid and not done.is_set():
                try:
                    if os.waitpid(pid, os.WNOHANG)[0]:
                        return
                except ChildProcessError:  # not ours: the rig's poll ends when PID 1 reaps it
                    return
                time.sleep(0.01)

        reaper = threading.Thread(target=reap, daemon=True)
        reaper.start()
        try:
            self.sh("cap-stop", pcap, check=False)
        finally:
            done.set()
            reaper.join()

    def wait(self, job, timeout):
        p = self.sh("wait", self.guest, job, str(timeout), check=False, timeout=timeout + 30)
        return p.returncode, p.stdout + p.stderr

    def ns(self, *cmd, check=True, timeout=60):
        p = subprocess.run(["ip", "netns", "exec", self.netns, *cmd], capture_output=True, text=True,
                           timeout=timeout)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
        return p

    def new_console_trouble(self):
        """Kernel warnings, oopses or BUGs the guest printed on its console since the last call."""
        try:
            text = open(os.path.join(self.rig_dir, "vms", self.guest, "console.log"), errors="replace").read()
        except OSError:
            return ""
        new, self.console_seen = text[self.console_seen:], len(text)
        hits = [line for line in new.splitlines()
                if re.search(r"(WARNING:|BUG:|Oops|Call Trace|general protection|rdma_rxe.*(error|fail))", line)]
        return "\n".join(hits[:20])

    def answers(self):
        """True when the guest answers ping on the wire within about 15 s (its NIC still
        transmits). Generous: a guest under TCG that has just been busy can be slow."""
        return self.ns("/usr/bin/python3", "-c", ICMP_PROBE, GUEST_IP, "15", check=False, timeout=40).returncode == 0


class Droced:
    def __init__(self, binary, rig, run_dir):
        self.binary, self.rig, self.run_dir = binary, rig, run_dir
        self.proc = None
        self.sock = os.path.join(run_dir, "droce0.sock")
        self.log_path = os.path.join(run_dir, "droced.log")

    def start(self):
        os.makedirs(self.run_dir, exist_ok=True)
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        self.logf = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.rig.netns, self.binary, "--run-dir", self.run_dir,
             "--port", f"{PORT_KIND},iface={PORT}", "--address", DROCE_IP, "--memory", "256",
             "--mbufs", "8192"], stdout=self.logf, stderr=subprocess.STDOUT)
        for _ in range(400):
            if os.path.exists(self.sock):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"droced did not start:\n{self.tail()}")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """SIGTERM; returns droced's exit status."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc, self.proc = self.proc.returncode, None
        self.logf.close()
        return rc

    def tail(self, n=20):
        try:
            return "".join(open(self.log_path, errors="replace").readlines()[-n:])
        except OSError:
            return ""


# ---- the cases ------------------------------------------------------------------------------

def rc_droce_requester(mtu):
    """droce requests every RC operation; rxe responds."""
    return dict(
        name="rc_droce_requester",
        what="RC, droce requester: SEND, SEND with immediate, multi-packet SEND, WRITE only and "
             "multi-packet, WRITE with immediate (multi-packet), READ with one and several response "
             "packets, fetch-and-add, compare-and-swap match and mismatch; lengths that need pad bytes; "
             "droce's PSNs wrap",
        guest=f"--mtu {mtu} --recv 4 --expect-recv 4",
        peer=["--psn", "0xfffff0", "--peer-u64", "30720=1000",
              "--ops", "send:64,sendimm:33:0xdeadbeef,write:61@1024,write:10239@2048,"
                       "writeimm:6143:0x1234@12288,read:62@18432,read:10237@20480,"
                       "fadd:5@30720,cswap:1005:77@30720,cswap:1:2@30720,send:8191"])


GUEST_RC_OPS = ("send:63,sendimm:30:0xdeadbeef@64,send:8191@1024,write:61@10240,write:10239@12288,"
                "writeimm:6141:0x4321@22528,read:62@40960,read:10237@49152,fadd:7@61440,"
                "cswap:1007:99@61440,cswap:5:6@61448")


def rc_droce_responder(mtu):
    """rxe requests every RC operation; droce responds."""
    return dict(
        name="rc_droce_responder",
        what="RC, droce responder: the same operations issued by rxe; rxe's PSNs wrap",
        guest=f"--mtu {mtu} --psn 0xfffffa --ops {GUEST_RC_OPS}",
        peer=["--recv", "4", "--peer-ops", GUEST_RC_OPS, "--u64", "61440=1000",
              "--u64", "61448=0x1122334455667788"])


def ud_both(mtu):
    ops_g = f"send:61,sendimm:{mtu}:0xcafe@128"
    return dict(
        name="ud_both_ways",
        what=f"UD SEND and SEND with immediate (up to the path MTU, {mtu} B) both ways",
        guest=f"--qpt ud --fill 0xc3 --recv 2 --expect-recv 2 --ops {ops_g}",
        peer=["--qpt", "ud", "--recv", "2", "--peer-fill", "0xc3", "--peer-ops", ops_g,
              "--ops", f"send:63@256,sendimm:{mtu}:0xbeef@256"])


def rnr_droce_naks():
    return dict(
        name="rnr_droce_sends_rnr_nak",
        what="droce has no receive: it answers rxe's SEND with RNR NAKs until rxe's rnr_retry (2) runs out",
        guest="--rnr-retry 2 --ops send:64",
        peer=["--recv", "0", "--min-rnr-timer", "1", "--peer-ops", "send:64",
              "--peer-expect-fail", "rnr_retry_exc_err"],
        counters={"rnr_naks_sent": ("==", 3)},
        wire=[("droce", "rnr_nak", "==", 3)])


def rnr_droce_naks_then_recv():
    return dict(
        name="rnr_droce_sends_rnr_nak_then_accepts",
        what="droce posts its receives only after it has sent an RNR NAK; rxe retries and both SENDs land",
        guest="--ops send:64,sendimm:32:7",
        peer=["--recv", "2", "--late-recv", "--min-rnr-timer", "10", "--peer-ops", "send:64,sendimm:32:7"],
        counters={"rnr_naks_sent": (">=", 1)},
        wire=[("droce", "rnr_nak", ">=", 1)])


def rnr_rxe_naks():
    return dict(
        name="rnr_droce_receives_rnr_nak",
        what="rxe has no receive: droce's SEND gets RNR NAKs until droce's rnr_retry (2) runs out",
        guest="--min-rnr-timer 1",
        peer=["--rnr-retry", "2", "--ops", "send:64", "--expect-fail", "rnr_retry_exc_err"],
        counters={"rnr_naks_received": ("==", 3), "rnr_retry_exceeded": ("==", 1)},
        wire=[("rxe", "rnr_nak", "==", 3)])


def bad_rkey_droce_requester():
    return dict(
        name="bad_rkey_droce_requester",
        what="droce WRITEs with a wrong R_Key: rxe NAKs (remote access error), nothing is written",
        guest="",
        peer=["--bad-rkey", "--ops", "write:64@0", "--expect-fail", "rem_access_err"],
        wire=[("rxe", "nak_access", "==", 1)])


def bad_rkey_rxe_requester():
    return dict(
        name="bad_rkey_droce_responder",
        what="rxe WRITEs with a wrong R_Key: droce NAKs (remote access error), nothing is written",
        guest="--bad-rkey --ops write:64@0",
        peer=["--peer-ops", "write:64@0", "--peer-expect-fail", "rem_access_err"],
        wire=[("droce", "nak_access", "==", 1)])


ZERO_OPS = "send:0,write:0@64,read:0@128,writeimm:0:0x77@256,write:8@0"


def zero_length_droce_requester():
    return dict(
        name="zero_length_droce_requester",
        what="zero-length SEND, WRITE, READ and WRITE with immediate from droce (RETH with DMA length 0)",
        guest="--recv 2 --expect-recv 2", peer=["--ops", ZERO_OPS])


def zero_length_droce_responder():
    return dict(
        name="zero_length_droce_responder",
        what="zero-length SEND, WRITE, READ and WRITE with immediate from rxe",
        guest=f"--ops {ZERO_OPS}", peer=["--recv", "2", "--peer-ops", ZERO_OPS])


def misaligned_atomic():
    # rxe's provider refuses a misaligned atomic at post (EINVAL), so only droce can send one.
    return dict(
        name="misaligned_atomic_droce_requester",
        what="droce's fetch-and-add at an address not 8-byte aligned: rxe NAKs (invalid request)",
        guest="", peer=["--ops", "fadd:1@4", "--expect-fail", "rem_inv_req_err"],
        wire=[("rxe", "nak_0x61", "==", 1)])


def tc_drop(where):
    """Guest-side tc commands: drop every DROP_EVERY-th RoCEv2 packet entering (ingress) or
    leaving (egress) the guest. The rig host's kernel has no netem/gact; the guest's has both,
    and a deterministic drop makes 'a sequence NAK happened' certain rather than likely."""
    match = "protocol ip u32 match ip dport 4791 0xffff action gact ok random determ drop " + str(DROP_EVERY)
    if where == "ingress":
        return (f"tc qdisc add dev eth0 ingress && tc filter add dev eth0 parent ffff: {match}",
                "tc -s filter show dev eth0 parent ffff:; tc qdisc del dev eth0 ingress")
    return (f"tc qdisc add dev eth0 root handle 1: prio && tc filter add dev eth0 parent 1: {match}",
            "tc -s filter show dev eth0 parent 1:; tc qdisc del dev eth0 root")


# A deterministic drop must not line up with go-back-N: if a retransmission round (from the lost
# PSN to the end of the message) were a multiple of the period long, the same packet would be
# dropped in every round forever (an early version, every 7th packet and 8-packet messages whose
# first packet got through, did exactly that). Every message here is at most 8 packets (8 KiB at
# path MTU 1024, the seed WRITE included), shorter than the period, so each round gets its first
# packet through.
def loss_droce_requester():
    ops = "write:8192@0,write:4096@4096,write:8192@0,send:8192@8192,write:8192@0,write:8192@0,read:8192@0"
    return dict(
        name="loss_toward_rxe",
        what=f"every {DROP_EVERY}th packet droce sends is lost: rxe sends PSN sequence NAKs, droce goes back and resends",
        guest="--recv 1 --expect-recv 1", tc=tc_drop("ingress"), size=LOSS_SIZE,
        peer=["--timeout", "12", "--ops", ops],
        counters={"seq_naks_received": (">=", 1), "retransmits": (">=", 1)},
        wire=[("rxe", "nak_seq", ">=", 1)])


def loss_rxe_requester():
    ops = "write:8192@0,write:4096@4096,send:8192@0,write:8192@0,write:8192@0,read:8192@8192,write:8192@0"
    return dict(
        name="loss_toward_droce",
        what=f"every {DROP_EVERY}th packet rxe sends is lost: droce sends PSN sequence NAKs, rxe goes back and resends",
        # rxe takes retry_cnt 7 as "forever" (rxe_comp.c); 6 makes a stuck retransmission end.
        guest=f"--timeout 12 --retry-cnt 6 --ops {ops}", tc=tc_drop("egress"), size=LOSS_SIZE,
        peer=["--recv", "1", "--peer-ops", ops],
        counters={"seq_naks_sent": (">=", 1), "out_of_sequence": (">=", 1)},
        wire=[("droce", "nak_seq", ">=", 1)])


# Responses lost instead: the requester times out and resends; the responder must answer a
# duplicate WRITE with an ACK and a duplicate READ or atomic from saved state, never running an
# atomic twice (the model's final value would be off by the add). 22 fetch-and-adds in a row
# make sure some atomic acknowledgement is among the dropped packets.
def loss_of_rxe_responses():
    ops = ",".join(["fadd:1@0"] * 22) + ",read:8192@0,write:4096@4096,read:8192@0,cswap:122:7@0"
    return dict(
        name="loss_of_rxe_responses",
        what=f"every {DROP_EVERY}th response rxe sends is lost: droce times out and resends; rxe replays "
             "READs and atomics (22 fetch-and-adds add 22 exactly once)",
        guest="", tc=tc_drop("egress"), size=LOSS_SIZE,
        peer=["--timeout", "12", "--peer-u64", "0=100", "--ops", ops],
        counters={"retransmits": (">=", 1), "timeouts": (">=", 1)})


def loss_of_droce_responses():
    ops = ",".join(["fadd:1@8"] * 22) + ",read:8192@0,write:4096@4096,read:4096@8192,cswap:122:7@8"
    return dict(
        name="loss_of_droce_responses",
        what=f"every {DROP_EVERY}th response droce sends is lost: rxe times out and resends; droce replays "
             "READs and atomics (22 fetch-and-adds add 22 exactly once)",
        guest=f"--timeout 12 --retry-cnt 6 --ops {ops}", tc=tc_drop("ingress"), size=LOSS_SIZE,
        peer=["--u64", "8=100", "--peer-ops", ops],
        counters={"duplicate_requests": (">=", 1)})


MW_PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mw_peer.py")


def mw_cases():
    """Memory windows (issue #38), both ways: mw_peer.py (pyverbs) runs on rxe0 in the guest and,
    through `droce exec`, on droce0. The owner binds a window over a region that has no remote
    access of its own; the user WRITEs and READs through the window's R_Key (data checked),
    invalidates it (type 2: SEND with invalidate, the owner's receive reports IBV_WC_WITH_INV and
    the key; type 1: the owner's zero-length bind), and its next WRITE through the old key must
    complete IBV_WC_REM_ACCESS_ERR, the owner NAKing it."""
    cases = []
    for mw_type in (2, 1):
        for owner in ("rxe", "droce"):
            user = "droce" if owner == "rxe" else "rxe"
            inv = "SEND with invalidate from " + user if mw_type == 2 else "a zero-length bind on " + owner
            wire = [(owner, "nak_access", "==", 1)]
            if mw_type == 2:
                wire.append((user, "op23", "==", 1))   # RC SEND Only with Invalidate
            cases.append(dict(name=f"mw{mw_type}_{owner}_binds", mw=mw_type, owner=owner, wire=wire,
                              what=f"type {mw_type} memory window bound on {owner}: {user} WRITEs and READs "
                                   f"through it, {inv} ends it, {user}'s next WRITE gets a remote access error"))
    # A SEND with invalidate of a type 1 window's key, which IBA does not allow (o10-37.2.26). The
    # stacks answer differently (docs/interop.md, "Memory windows"): droce NAKs it as an invalid
    # request (the SEND completes IBV_WC_REM_INV_REQ_ERR, 9; droce's receive
    # IBV_WC_LOC_QP_OP_ERR, 2); rxe ACKs it without counting it in the MSN, completes its receive
    # IBV_WC_REM_INV_REQ_ERR and moves its QP to the error state, so the SEND succeeds.
    for owner, send, recv, nak in (("droce", 9, 2, 1), ("rxe", 0, 9, 0)):
        user = "droce" if owner == "rxe" else "rxe"
        cases.append(dict(name=f"mw1_bad_inv_{owner}_binds", mw=1, owner=owner,
                          args={owner: f"--bad-inv --want-recv {recv}", user: f"--bad-inv --want-send {send}"},
                          wire=[(owner, "nak_0x61", "==", nak)],
                          what=f"type 1 memory window bound on {owner}, used by {user}, then {user}'s SEND with "
                               f"invalidate of its key: {'an invalid request NAK' if nak else 'an ACK'}, "
                               f"the SEND completes with status {send}, {owner}'s receive with {recv}"))
    return cases


def cases_for(mtu_link):
    m = 1024 if mtu_link < 4200 else 4096
    cases = [rc_droce_requester(m), rc_droce_responder(m), ud_both(m)]
    if mtu_link == 1500:
        cases += [zero_length_droce_requester(), zero_length_droce_responder(), misaligned_atomic(),
                  rnr_droce_naks(), rnr_droce_naks_then_recv(), rnr_rxe_naks(), bad_rkey_droce_requester(),
                  bad_rkey_rxe_requester(), loss_droce_requester(), loss_rxe_requester(),
                  loss_of_rxe_responses(), loss_of_droce_responses()] + mw_cases()
    return m, cases


# ---- unmodified verbs programs: perftest and the pingpongs ----------------------------------------

MCAST_GROUP = "239.99.0.7"    # mckey's group
TOOL_ITERS = 50               # the guest is emulated (~20 MB/s): few iterations, one size
TOOL_WAIT = 120               # seconds either program may take (timeout(1) on both)
TOOL_PORT0 = 18600            # their TCP exchange ports (one per case), over the rig's bridge


def cm_no_listener_cases(runner, rig, a, droced):
    """rdma_cm in the guest (the kernel's ib_cm over rxe) toward droce, where nobody listens:
    droced's connection manager on QP1 (issue #15, docs/cm.md) answers the REQ with REJ 8 and the
    SIDR_REQ with status 1, so ucmatose sees REJECTED (8) and udaddy UNREACHABLE (1) at once,
    where without a CM on droce's side the kernel retries for about 74 s (15 retries of 4.6 s)."""
    def counter(name):
        out = subprocess.run([a.droce, "counters", "--json", "--socket", droced.sock], capture_output=True,
                             text=True).stdout
        return json.loads(out).get(name, -1) if out else -1
    for tag, tool, want, name in [
            ("cm_rc_no_listener", "ucmatose", "RDMA_CM_EVENT_REJECTED, error: 8", "cm_rej_no_listener"),
            ("cm_ud_no_listener", "udaddy", "RDMA_CM_EVENT_UNREACHABLE, error: 1", "cm_sidr_no_listener")]:
        before = counter(name)
        t0 = time.monotonic()
        p = rig.sh("run", rig.guest, f"timeout 60 {tool} -s {DROCE_IP} -c 1 2>&1", check=False, timeout=120)
        took = time.monotonic() - t0
        out = p.stdout + p.stderr
        after = counter(name)
        if want in out and after == before + 1:
            log(f"PASS {tag}: the kernel's {tool} to droce, nobody listening: '{want}' in {took:.1f} s")
        else:
            runner.fail(tag, f"wanted '{want}' and {name} {before} -> {before + 1}; got {name} {after} and:\n"
                             f"{out[-800:]}\n{droced.tail()}")


def tool_cases():
    """Each program of issue #6's list, droce as server (the guest connects) and as client.
    Stock binaries on both sides: the host's run through `droce exec` on droced, the guest's on
    rxe0; GID index 1 (the IPv4-mapped GID) on both; their TCP exchange crosses the bridge to
    the kernel's address on droced's veth (the same 10.99.0.50 droced has)."""
    n = TOOL_ITERS
    # -F: perftest would fail on the emulated CPU's unsteady frequency readings.
    # -o 16 for READ and atomics: perftest sets the requester's max_rd_atomic to the number of
    # outstanding reads the *other* side advertises (its device maximum by default: rxe 128,
    # droce 16), and both stacks refuse an RTS with more than their own maximum (EINVAL), so
    # droce as the requester could not reach RTS against rxe's 128 (docs/interop.md).
    tools = [("ibv_rc_pingpong", f"-n {n} -c", "-g 1"),
             ("ibv_ud_pingpong", f"-n {n} -c -s 1024", "-g 1"),   # UD: at most the path MTU (1024)
             ("ib_send_bw", f"-n {n} -s 4096 -F", "-x 1"),
             ("ib_write_bw", f"-n {n} -s 4096 -F", "-x 1"),
             ("ib_read_bw", f"-n {n} -s 4096 -F -o 16", "-x 1"),
             ("ib_atomic_bw", f"-n {n} -F -o 16", "-x 1"),
             ("ib_atomic_bw", f"-n {n} -F -o 16 -A CMP_AND_SWAP", "-x 1"),
             ("ib_send_lat", f"-n {n} -s 4096 -F", "-x 1"),
             ("ib_write_lat", f"-n {n} -s 4096 -F", "-x 1"),
             ("ib_read_lat", f"-n {n} -s 4096 -F -o 16", "-x 1")]
    cases = []
    for tool, args, gid in tools:
        variant = "_cmp_and_swap" if "CMP_AND_SWAP" in args else ""
        for server in ("droce", "rxe"):
            case = dict(name=f"{tool}{variant}_{server}_server", tool=tool, args=f"{args} {gid}", server=server,
                        what=f"{tool} {args} {gid}, {server} the server")
            if tool.startswith("ibv_"):
                # The pingpongs put hop_limit 1 in their address vector; droce sends it as IPv4 TTL 1
                # (RoCEv2: TTL from the GRH hop limit), which tshark notes. The kernel's verbs layer
                # replaces it with the route's hop limit, so rxe sends 64 (docs/interop.md).
                case["allowed_expert"] = ('"Time To Live" only 1',)
            cases.append(case)
    return cases


def cm_tool_cases():
    """rdma_cm programs (issue #15) both ways: droce's CM and the kernel's ib_cm/rdma_cm speak IB
    CM over QP1 to each other. No TCP: the client starts once the server's listener shows (droce
    cm on droced, `rdma resource show cm_id` in the guest). Each case: (name, server command,
    client command, what the client must print, what the server must print); {ip} is the
    server's address, {self} the address of the side running the command, {port} the case's port.
    mckey: UD multicast, the "server" the receiver (it joins first), the client the sender; its
    readiness is the receiver's join (droced's attached QP, the guest kernel's IGMP membership)."""
    n = TOOL_ITERS
    row = rf"^ +[0-9]+ +{n} +[0-9]"
    done = r"return status 0"
    progs = [
        ("rping", f"rping -s -a {{ip}} -p {{port}} -V -C {n}", f"rping -c -a {{ip}} -p {{port}} -V -C {n} -v",
         rf"ping data: rdma-ping-{n - 1}: ", ""),
        ("ucmatose", f"ucmatose -p {{port}} -c 2 -C {n}", f"ucmatose -s {{ip}} -p {{port}} -c 2 -C {n}", done, done),
        # udaddy has no port option: rping's 7174.
        ("udaddy", f"udaddy -c 2 -C {n}", f"udaddy -s {{ip}} -c 2 -C {n}", done, done),
        ("ib_send_bw_R", f"ib_send_bw -R -F -n {n} -p {{port}}", f"ib_send_bw -R -F -n {n} -p {{port}} {{ip}}", row, row),
        ("ib_write_lat_R", f"ib_write_lat -R -F -n {n} -p {{port}}", f"ib_write_lat -R -F -n {n} -p {{port}} {{ip}}",
         row, row),
        ("ib_read_bw_R", f"ib_read_bw -R -F -o 16 -n {n} -p {{port}}",
         f"ib_read_bw -R -F -o 16 -n {n} -p {{port}} {{ip}}", row, row),
        ("ib_send_bw_ud_R", f"ib_send_bw -c UD -R -F -n {n} -p {{port}}",
         f"ib_send_bw -c UD -R -F -n {n} -p {{port}} {{ip}}", row, row),
        # -b: the guest routes a multicast destination through the device that owns the source.
        ("mckey", f"mckey -m {MCAST_GROUP} -b {{self}} -C {n}", f"mckey -m {MCAST_GROUP} -b {{self}} -s -C {n}",
         done, r"data transfers complete"),
    ]
    cases = []
    for name, server_cmd, client_cmd, client_wants, server_wants in progs:
        # perftest -R connects twice (its parameter exchange, then the test's QPs), and its server
        # listens anew for the second: a guest emulated at ~1/100 speed listens again only after
        # droce's client has already sent the second REQ, which the kernel then rejects (8) as
        # it must. So perftest runs with droce as the server only; the rdmacm-utils cover the
        # kernel as the passive side.
        for server in ("droce",) if name.startswith("ib_") else ("droce", "rxe"):
            cases.append(dict(name=f"cm_{name}_{server}_server", tool=name.split("_R")[0], cm=True, server=server,
                              server_cmd=server_cmd, client_cmd=client_cmd, client_wants=client_wants,
                              server_wants=server_wants,
                              listen_port=7174 if name == "udaddy" else None,
                              mcast=MCAST_GROUP if name == "mckey" else None,
                              what=f"{client_cmd.split()[0]} through rdma_cm, {server} the server"))
    return cases


def tool_output_ok(case, side, out):
    """What a program must have printed: the pingpongs their iteration line and no data
    error (-c compares every received buffer), perftest its result row of TOOL_ITERS; an
    rdma_cm case what it names for its client and server."""
    n = TOOL_ITERS
    if case.get("cm"):
        want = case["client_wants"] if side != case["server"] else case["server_wants"]
        if want and not re.search(want, out, re.M):
            return f"{side}: no /{want}/ in its output"
        if re.search(r"RDMA_CM_EVENT_(REJECTED|UNREACHABLE|ADDR_ERROR|CONNECT_ERROR)", out):
            return f"{side}: an rdma_cm error event"
        return ""
    if case["tool"].startswith("ibv_"):
        if not re.search(rf"^{n} iters in", out, re.M):
            return f"{side}: no '{n} iters in' line"
        if re.search(r"invalid data|failed|couldn't", out, re.I):
            return f"{side}: an error line"
        return ""
    # ib_read_lat's server prints no result (the client measures).
    if case["tool"] == "ib_read_lat" and side == case["server"]:
        return ""
    if not re.search(rf"^ +[0-9]+ +{n} +[0-9]", out, re.M):
        return f"{side}: no result row with {n} iterations"
    return ""


def rping_teardown_race(rc, out):
    """Debian 12's rping (rdma-core 44) destroys its event channel while its CM thread may be
    between two rdma_get_cm_event calls; that call then fails with EBADF and rping exits 255 after
    a complete run, over the kernel's rdma_cm as over droce's (rdma-core f3ae6534 stops the thread
    first). True when the output shows exactly that: a disconnect, then that error last."""
    lines = out.strip().splitlines()
    return rc == 255 and "DISCONNECT EVENT" in out and lines[-1:] == ["rdma_get_cm_event: Bad file descriptor"]


def listening(tcp_text, port):
    return re.search(rf":{port:04X} [0-9A-F]+:0000 0A", tcp_text) is not None


# ---- the wire -----------------------------------------------------------------------------------

TSHARK_FIELDS = ["frame.number", "ip.src", "eth.dst", "frame.protocols", "_ws.malformed", "_ws.expert.message", "infiniband.bth.destqp",
                 "infiniband.bth.padcnt",
                 "infiniband.bth.opcode", "infiniband.aeth.syndrome", "ip.flags.df", "ip.ttl", "ip.dsfield",
                 "ip.id", "udp.srcport", "udp.checksum", "infiniband.bth.se", "infiniband.bth.m",
                 "infiniband.bth.a", "infiniband.bth.tver", "infiniband.bth.p_key", "infiniband.bth.reserved7",
                 "infiniband.aeth.msn"]


def tshark_rows(pcap):
    cmd = ["tshark", "-r", pcap, "-n", "--disable-heuristic", "rpcrdma_infiniband", "-T", "fields",
           "-E", "separator=\t", "-E", "occurrence=a", "-E", "aggregator=|"]
    for f in TSHARK_FIELDS:
        cmd += ["-e", f]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=dict(os.environ, LC_ALL="C")).stdout
    return [dict(zip(TSHARK_FIELDS, line.split("\t") + [""] * len(TSHARK_FIELDS))) for line in out.splitlines()]


def who(row):
    return "droce" if row["ip.src"] == DROCE_IP else "rxe"


def kind(row):
    op = int(row["infiniband.bth.opcode"] or -1)
    syn = int(row["infiniband.aeth.syndrome"] or "-1", 0) if row["infiniband.aeth.syndrome"] else -1
    if op == 17 and syn >= 0:
        if syn >> 5 == 1:
            return "rnr_nak"
        if syn == 0x60:
            return "nak_seq"
        if syn == 0x62:
            return "nak_access"
        if syn >> 5 == 3:
            return f"nak_0x{syn:02x}"
    return f"op{op}"


def tshark_problems(rows, allowed=()):
    """The tshark oracle's rule (tests/oracle/tshark_oracle.py): every frame dissected as RoCEv2;
    no malformed mark or expert note unless a heuristic payload dissector guessed at the payload.
    `allowed`: expert notes a case expects (a program's own choice, such as TTL 1)."""
    problems = []
    for r in rows:
        layers = r["frame.protocols"].split(":")
        if "infiniband" not in layers:
            problems.append(f"frame {r['frame.number']} ({who(r)}): not RoCEv2: {r['frame.protocols']}")
            continue
        guessed = any(x != "data" for x in layers[layers.index("infiniband") + 1:])
        if guessed:
            continue
        if r["_ws.malformed"]:
            problems.append(f"frame {r['frame.number']} ({who(r)}): malformed")
        for msg in filter(None, r["_ws.expert.message"].split("|")):
            if msg in allowed:
                continue
            problems.append(f"frame {r['frame.number']} ({who(r)}): expert: {msg}")
    return problems


def wire_summary(rows_by_pcap):
    """Per field, the values each stack put on the wire (printed; docs/interop.md discusses them)."""
    fields = {"ip.flags.df": "IPv4 DF", "ip.ttl": "IPv4 TTL", "ip.dsfield": "IPv4 DSCP/ECN",
              "udp.checksum": "UDP checksum", "infiniband.bth.se": "BTH SE", "infiniband.bth.m": "BTH MigReq",
              "infiniband.bth.tver": "BTH TVer", "infiniband.bth.p_key": "BTH P_Key",
              "infiniband.bth.reserved7": "BTH reserved (after AckReq)"}
    seen = {}
    ip_ids = {"droce": set(), "rxe": set()}
    sports = {"droce": set(), "rxe": set()}
    ackreq = {}
    for rows in rows_by_pcap.values():
        for r in rows:
            w = who(r)
            for f in fields:
                seen.setdefault(f, {"droce": set(), "rxe": set()})[w].add(r[f])
            ip_ids[w].add(r["ip.id"])
            sports[w].add(int(r["udp.srcport"] or 0))
            ackreq.setdefault((w, kind(r)), set()).add(r["infiniband.bth.a"])
    lines = []
    if not any(rows_by_pcap.values()):
        return lines
    for f, label in fields.items():
        d, x = sorted(seen[f]["droce"]), sorted(seen[f]["rxe"])
        lines.append(f"  {label:28} droce {','.join(d):22} rxe {','.join(x):22}{'' if d == x else '  <- differs'}")
    lines.append(f"  {'IPv4 ID':28} droce {len(ip_ids['droce'])} distinct value(s)    rxe {len(ip_ids['rxe'])} distinct value(s)")
    lines.append(f"  {'UDP source port range':28} droce {min(sports['droce'])}-{max(sports['droce'])}        "
                 f"rxe {min(sports['rxe'])}-{max(sports['rxe'])}")
    return lines


def count_kind(rows, side, k):
    return sum(1 for r in rows if who(r) == side and kind(r) == k)


# ---- running a case -----------------------------------------------------------------------------

class Runner:
    def __init__(self, a, rig, droced):
        self.a, self.rig, self.droced = a, rig, droced
        self.failures = []
        self.pcaps = []
        self.wedges = 0
        self.case_times = []
        self.stalled = False
        self.allowed_expert = {}   # pcap -> tshark expert notes its case expects
        self.droced_mac = ""
        # mw_peer.py runs on the host with the distro's pyverbs (python3-pyverbs).
        self.no_pyverbs = "" if subprocess.run(["/usr/bin/python3", "-c", "import pyverbs.mr"],
                                               capture_output=True).returncode == 0 else \
            "no pyverbs for /usr/bin/python3 on the host (python3-pyverbs)"

    def case_ended(self, tag, base, pcap, t0, side, rc, out, guest_rc, guest_out):
        """What every case does once both sides are done and its capture stopped: keep the logs
        (BASE.SIDE.log, BASE.guest.log), check the guest's console, that the guest still answers
        when a side failed (Wedged if not) and that droced lives. The case's seconds, or None when
        it failed here."""
        elapsed = time.monotonic() - t0
        open(f"{base}.{side}.log", "w").write(out)
        open(base + ".guest.log", "w").write(guest_out)
        self.pcaps.append(pcap)
        oops = self.rig.new_console_trouble()
        if oops:
            # The guest's kernel complained (an rxe WARN_ON, an oops): that is about what it was fed.
            self.fail(tag, "the guest's kernel logged trouble during the case:\n" + oops)
            return None
        if (rc != 0 or guest_rc != 0) and not self.rig.answers():
            raise Wedged(f"{tag}: the guest does not answer an ICMP echo ({side} exit {rc}, guest exit {guest_rc})")
        if not self.droced.alive():
            self.fail(tag, f"droced died:\n{self.droced.tail()}")
            return None
        return elapsed

    def run_case(self, case, mtu_link):
        tag = f"{case['name']}_{mtu_link}"
        base = os.path.join(self.a.workdir, tag)
        share = self.rig.share()
        for f in os.listdir(share):
            if f.startswith(tag + "."):
                os.unlink(os.path.join(share, f))
        pcap = base + ".pcap"
        size = case.get("size", SIZE)
        guest_cmd = (f"rxe-peer.py --tag {tag} --wait {PEER_WAIT} --linger 600 --dump {size}@0 "
                     f"--size {size} {case['guest']}")
        setup, teardown = case.get("tc", ("", ""))
        if setup:
            guest_cmd = f"{setup} && {{ {guest_cmd}; rc=$?; {teardown}; exit $rc; }}"
        self.rig.cap_start(pcap)
        t0 = time.monotonic()
        try:
            job = self.rig.start(guest_cmd)
            if self.a.simulate_stall == case["name"] and not self.stalled:
                self.stalled = True
                tap = open(os.path.join(self.rig.rig_dir, "vms", self.rig.guest, "tap")).read().strip()
                self.rig.ns("ip", "link", "set", tap, "down")
                log(f"(simulating an emulated-NIC stall: {tap} down)")
            expect = base + ".expect.json"
            stats = base + ".stats.json"
            for f in (expect, stats):
                if os.path.exists(f):
                    os.unlink(f)
            cmd = [self.a.peer, "--socket", self.droced.sock, "--share", share, "--tag", tag,
                   "--size", str(size), "--peer-size", str(size), "--wait", str(PEER_WAIT),
                   "--expect-out", expect, "--stats-out", stats, *case["peer"]]
            try:
                peer = subprocess.run(cmd, capture_output=True, text=True, timeout=4 * PEER_WAIT)
                peer_rc, peer_out = peer.returncode, peer.stdout + peer.stderr
            except subprocess.TimeoutExpired as e:
                peer_rc, peer_out = 124, (e.stdout or b"").decode(errors="replace")
            if peer_rc in (3, 124):
                # The guest did not answer: make it finish (T.end), then see whether it still talks.
                open(os.path.join(share, tag + ".end"), "w").close()
            guest_rc, guest_out = self.rig.wait(job, 2 * PEER_WAIT)
        finally:
            self.rig.cap_stop(pcap)
        elapsed = self.case_ended(tag, base, pcap, t0, "peer", peer_rc, peer_out, guest_rc, guest_out)
        if elapsed is None:
            return
        problems = []
        out = []
        for line in peer_out.splitlines():
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                continue
            if e.get("event") == "check" and not e["ok"]:
                problems.append(f"droce: {e['what']}: {e.get('detail', '')}")
            if e.get("event") == "error":
                problems.append(f"droce-interop-peer: {e['why']}")
        if peer_rc not in (0, 1):
            problems.append(f"droce-interop-peer exit {peer_rc}")
        if guest_rc != 0:
            problems.append(f"rxe-peer.py exit {guest_rc}: {guest_out.strip().splitlines()[-1:] }")
        if os.path.exists(expect):
            check_guest(json.load(open(expect)), guest_out,
                        report=lambda line: (out.append(line), line.startswith("FAIL") and problems.append(line)))
        else:
            problems.append("no expectations from droce-interop-peer (it did not get that far)")
        counters = json.load(open(stats)) if os.path.exists(stats) else {}
        for name, (op, want) in case.get("counters", {}).items():
            got = counters.get(name)
            ok = got is not None and (got == want if op == "==" else got >= want)
            out.append(f"{'ok' if ok else 'FAIL'}: droce counter {name} = {got} ({op} {want})")
            if not ok:
                problems.append(f"counter {name} = {got}, want {op} {want}")
        rows = tshark_rows(pcap)
        for side, k, op, want in case.get("wire", []):
            got = count_kind(rows, side, k)
            ok = got == want if op == "==" else got >= want
            out.append(f"{'ok' if ok else 'FAIL'}: on the wire: {got} {k} from {side} ({op} {want})")
            if not ok:
                problems.append(f"wire: {got} {k} from {side}, want {op} {want}")
        if case.get("tc"):
            drops = [int(x) for x in re.findall(r"dropped (\d+)", guest_out)]
            ok = sum(drops) > 0
            out.append(f"{'ok' if ok else 'FAIL'}: the guest's tc dropped {sum(drops)} RoCEv2 packets")
            if not ok:
                problems.append("no packet was dropped: the loss case tested nothing")
        droce_pkts = sum(1 for r in rows if who(r) == "droce")
        rxe_pkts = len(rows) - droce_pkts
        summary = (f"{len(rows)} packets ({droce_pkts} from droce, {rxe_pkts} from rxe), "
                   f"{elapsed:.1f} s; counters: " +
                   ", ".join(f"{k}={counters.get(k)}" for k in ("tx_packets", "rx_packets", "retransmits",
                                                               "timeouts", "seq_naks_sent", "seq_naks_received",
                                                               "rnr_naks_sent", "rnr_naks_received",
                                                               "duplicate_requests", "out_of_sequence")))
        self.case_times.append((tag, elapsed))
        if problems:
            self.fail(tag, "\n".join(problems))
            for line in out:
                log("    " + line)
            log(f"    {summary}\n    logs: {base}.{{peer,guest}}.log, {pcap}")
        else:
            log(f"PASS {tag}: {case['what']}")
            log(f"    {summary}")

    def run_mw_case(self, case, mtu_link):
        """One memory-window case (mw_cases()): mw_peer.py on both sides."""
        tag = f"{case['name']}_{mtu_link}"
        if self.a.no_tools or self.no_pyverbs:
            log(f"SKIP {tag}: {self.a.no_tools or self.no_pyverbs}")
            return
        base = os.path.join(self.a.workdir, tag)
        pcap = base + ".pcap"
        share = self.rig.share()
        for f in os.listdir(share):
            if f.startswith(tag + "."):
                os.unlink(os.path.join(share, f))
        shutil.copy(MW_PEER, os.path.join(share, "mw_peer.py"))
        path_mtu = 1024 if mtu_link < 4200 else 4096
        role = {"rxe": "owner" if case["owner"] == "rxe" else "user"}
        role["droce"] = "user" if role["rxe"] == "owner" else "owner"
        common = f"--tag {tag} --mw-type {case['mw']} --mtu {path_mtu} --wait {PEER_WAIT}"
        # rxe marks a receive that invalidated a key with the kernel's IB_WC_WITH_INVALIDATE bit
        # (1 << 2, libibverbs' IBV_WC_IP_CSUM_OK), not IBV_WC_WITH_INV (1 << 3): docs/interop.md.
        inv_flag = " --inv-flag 4" if role["rxe"] == "owner" else ""
        extra = case.get("args", {})
        guest_cmd = (f"python3 /rig/mw_peer.py --role {role['rxe']} --dev rxe0 --dir /rig {common}{inv_flag} "
                     f"{extra.get('rxe', '')}")
        droce_cmd = ["ip", "netns", "exec", self.rig.netns, self.a.droce, "exec", "--run-dir", self.droced.run_dir,
                     "--", "/usr/bin/python3", MW_PEER, "--role", role["droce"], "--dev", "droce0", "--dir", share,
                     *shlex.split(common), *shlex.split(extra.get("droce", ""))]
        self.rig.cap_start(pcap)
        t0 = time.monotonic()
        try:
            job = self.rig.start(guest_cmd)
            try:
                p = subprocess.run(droce_cmd, capture_output=True, text=True, timeout=4 * PEER_WAIT)
                droce_rc, droce_out = p.returncode, p.stdout + p.stderr
            except subprocess.TimeoutExpired as e:
                droce_rc, droce_out = 124, (e.stdout or b"").decode(errors="replace")
            guest_rc, guest_out = self.rig.wait(job, 2 * PEER_WAIT)
        finally:
            self.rig.cap_stop(pcap)
        elapsed = self.case_ended(tag, base, pcap, t0, "droce", droce_rc, droce_out, guest_rc, guest_out)
        if elapsed is None:
            return
        problems, lines = [], []
        for side, rc, text in (("droce", droce_rc, droce_out), ("rxe", guest_rc, guest_out)):
            done = False
            for line in text.splitlines():
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if ev.get("event") == "check":
                    lines.append(f"{'ok' if ev['ok'] else 'FAIL'}: {side} ({role[side]}): {ev['what']}"
                                 f"{'' if ev['ok'] else ': ' + ev.get('detail', '')}")
                    if not ev["ok"]:
                        problems.append(f"{side}: {ev['what']}: {ev.get('detail', '')}")
                elif ev.get("event") == "error":
                    problems.append(f"{side}: {ev['why']}")
                elif ev.get("event") == "done":
                    done = True
            if rc != 0 or not done:
                problems.append(f"{side} side (mw_peer.py, {role[side]}) exit {rc}: "
                                f"{text.strip().splitlines()[-3:]}")
        rows = tshark_rows(pcap)
        for side, k, op, want in case["wire"]:
            got = count_kind(rows, side, k)
            ok = got == want if op == "==" else got >= want
            lines.append(f"{'ok' if ok else 'FAIL'}: on the wire: {got} {k} from {side} ({op} {want})")
            if not ok:
                problems.append(f"wire: {got} {k} from {side}, want {op} {want}")
        droce_pkts = sum(1 for r in rows if who(r) == "droce")
        summary = f"{len(rows)} packets ({droce_pkts} from droce, {len(rows) - droce_pkts} from rxe), {elapsed:.1f} s"
        self.case_times.append((tag, elapsed))
        if problems:
            self.fail(tag, "\n".join(problems))
            log(f"    {summary}\n    logs: {base}.{{droce,guest}}.log, {pcap}")
        else:
            log(f"PASS {tag}: {case['what']}")
            log(f"    {summary}")
        for line in lines:
            log("    " + line)

    def run_tool_case(self, case, mtu_link):
        """One stock program on each side (see tool_cases())."""
        tag = f"{case['name']}_{mtu_link}"
        base = os.path.join(self.a.workdir, tag)
        pcap = base + ".pcap"
        self.tool_port = getattr(self, "tool_port", TOOL_PORT0) + 1
        port = self.tool_port
        tool = case["tool"]
        exec_droce = ["ip", "netns", "exec", self.rig.netns, self.a.droce, "exec", "--run-dir",
                      self.droced.run_dir, "--", "timeout", str(TOOL_WAIT)]
        if case.get("cm"):
            # Each side runs its role's command; the address is the server's.
            server_ip = DROCE_IP if case["server"] == "droce" else GUEST_IP
            role = {"droce": "server_cmd" if case["server"] == "droce" else "client_cmd",
                    "rxe": "server_cmd" if case["server"] == "rxe" else "client_cmd"}
            own = {"droce": DROCE_IP, "rxe": GUEST_IP}
            form = {side: case[role[side]].format(ip=server_ip, port=port, self=own[side]) for side in role}
            guest_cmd = f"timeout {TOOL_WAIT} stdbuf -o0 {form['rxe']}"
            droce_cmd = exec_droce + ["stdbuf", "-o0", *shlex.split(form["droce"])]
            listen_port = case["listen_port"] or port
        else:
            guest_cmd = f"timeout {TOOL_WAIT} {tool} -d rxe0 {case['args']} -p {port}"
            droce_cmd = exec_droce + [tool, "-d", "droce0", *shlex.split(case["args"]), "-p", str(port)]
        droce_log = base + ".droce.log"
        problems = []
        self.rig.cap_start(pcap)
        t0 = time.monotonic()
        try:
            if case["server"] == "droce":
                with open(droce_log, "w") as f:
                    proc = subprocess.Popen(droce_cmd, stdout=f, stderr=subprocess.STDOUT)
                # /proc/PID/net/tcp is the namespace of PID: the rig's, where the server listens
                # (rdma_cm servers: droced's CM shows the listener).
                for _ in range(400):
                    if case.get("mcast"):
                        text = subprocess.run([self.a.droce, "multicast", "--json", "--socket", self.droced.sock],
                                              capture_output=True, text=True).stdout
                        up = f'"group":"{case["mcast"]}"' in text
                    elif case.get("cm"):
                        text = subprocess.run([self.a.droce, "cm", "--json", "--socket", self.droced.sock],
                                              capture_output=True, text=True).stdout
                        up = re.search(rf'"state":"listen","local":"[^"]*:{listen_port}"', text) is not None
                    else:
                        try:
                            text = (open(f"/proc/{proc.pid}/net/tcp").read() +
                                    open(f"/proc/{proc.pid}/net/tcp6").read())
                        except OSError:
                            text = ""
                        up = listening(text, port)
                    if up or proc.poll() is not None:
                        break
                    time.sleep(0.05)
                if proc.poll() is None:
                    job = self.rig.start(guest_cmd if case.get("cm") else f"{guest_cmd} {DROCE_IP}")
                    guest_rc, guest_out = self.rig.wait(job, TOOL_WAIT + 30)
                else:
                    guest_rc, guest_out = 255, "(not run: the droce server ended before it listened)"
                try:
                    droce_rc = proc.wait(timeout=TOOL_WAIT + 30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    droce_rc = proc.wait()
                droce_out = open(droce_log, errors="replace").read()
            else:
                job = self.rig.start(guest_cmd)
                if case.get("mcast"):
                    # The kernel's join adds the group to the netdev (cma_igmp_send): /proc/net/igmp
                    # shows it, in the host's byte order (x86: the address reversed).
                    group_hex = "".join(f"{int(b):02X}" for b in reversed(case["mcast"].split(".")))
                    probe = (f"for i in $(seq 100); do grep -q {group_hex} /proc/net/igmp && exit 0; "
                             f"sleep 0.2; done; exit 1")
                elif case.get("cm"):
                    probe = (f"for i in $(seq 100); do rdma resource show cm_id | grep -Eq "
                             f"'state LISTEN .* src-addr [^ ]*:{listen_port}( |$)' && exit 0; sleep 0.2; done; exit 1")
                else:
                    probe = (f"for i in $(seq 100); do grep -Eq ':{port:04X} [0-9A-F]+:0000 0A' "
                             f"/proc/net/tcp /proc/net/tcp6 && exit 0; sleep 0.2; done; exit 1")
                if self.rig.sh("run", self.rig.guest, probe, "60", check=False, timeout=90).returncode == 0:
                    with open(droce_log, "w") as f:
                        try:
                            client = droce_cmd if case.get("cm") else droce_cmd + [GUEST_IP]
                            droce_rc = subprocess.run(client, stdout=f, stderr=subprocess.STDOUT,
                                                      timeout=TOOL_WAIT + 30).returncode
                        except subprocess.TimeoutExpired:
                            droce_rc = 124
                    droce_out = open(droce_log, errors="replace").read()
                else:
                    droce_rc, droce_out = 255, "(not run: the guest's server did not listen)"
                guest_rc, guest_out = self.rig.wait(job, TOOL_WAIT + 30)
        finally:
            self.rig.cap_stop(pcap)
        self.allowed_expert[pcap] = case.get("allowed_expert", ())
        elapsed = self.case_ended(tag, base, pcap, t0, "droce", droce_rc, droce_out, guest_rc, guest_out)
        if elapsed is None:
            return
        if rping_teardown_race(droce_rc, droce_out):
            log(f"  ({tag}: rping's own teardown race on the droce side: exit 255 after a complete run, taken as 0)")
            droce_rc = 0
        if rping_teardown_race(guest_rc, guest_out):
            log(f"  ({tag}: rping's own teardown race in the guest: exit 255 after a complete run, taken as 0)")
            guest_rc = 0
        if droce_rc != 0:
            problems.append(f"droce side ({tool} via droce exec) exit {droce_rc}")
        if guest_rc != 0:
            problems.append(f"guest side ({tool} on rxe0) exit {guest_rc}")
        for side, out in (("droce", droce_out), ("rxe", guest_out)):
            why = tool_output_ok(case, side, out)
            if why:
                problems.append(why)
        rows = tshark_rows(pcap)
        droce_pkts = sum(1 for r in rows if who(r) == "droce")
        rxe_pkts = len(rows) - droce_pkts
        if case.get("mcast"):
            # Multicast is one way: the sender's datagrams, each to QPN 0xFFFFFF and the group.
            sender = "rxe" if case["server"] == "droce" else "droce"
            sent = [r for r in rows if who(r) == sender]
            if len(sent) < TOOL_ITERS or any(int(r["infiniband.bth.destqp"] or "0", 0) != 0xFFFFFF for r in sent):
                problems.append(f"on the wire: {len(sent)} datagrams from {sender}, not {TOOL_ITERS} to QPN 0xFFFFFF")
        elif droce_pkts == 0 or rxe_pkts == 0:
            problems.append(f"on the wire: {droce_pkts} RoCEv2 packets from droce, {rxe_pkts} from rxe")
        # Every RoCEv2 packet of rxe's must go to droced's MAC (the veth's): one sent elsewhere
        # (the bridge) is lost to droce, and only rxe's retries would hide that. Multicast goes to
        # the group's MAC.
        astray = sum(1 for r in rows if who(r) == "rxe" and r["eth.dst"].lower() != self.droced_mac and
                     int(r["eth.dst"][:2], 16) & 1 == 0)
        if astray:
            problems.append(f"on the wire: {astray} of rxe's packets went to another MAC than droced's {self.droced_mac}")
        summary = f"{len(rows)} packets ({droce_pkts} from droce, {rxe_pkts} from rxe), {elapsed:.1f} s"
        self.case_times.append((tag, elapsed))
        if problems:
            self.fail(tag, "\n".join(problems))
            log(f"    {summary}\n    logs: {base}.{{droce,guest}}.log, {pcap}")
            for side, out in (("droce", droce_out), ("guest", guest_out)):
                log(f"    --- {side}:")
                for line in out.strip().splitlines()[-15:]:
                    log("      " + line)
        else:
            log(f"PASS {tag}: {case['what']}")
            log(f"    {summary}")

    def fail(self, tag, why):
        self.failures.append(tag)
        log(f"FAIL {tag}:")
        for line in why.splitlines():
            log("    " + line)

    def run_with_restart(self, case, mtu_link):
        run = self.run_tool_case if "tool" in case else self.run_mw_case if "mw" in case else self.run_case
        try:
            run(case, mtu_link)
        except Wedged as e:
            self.wedges += 1
            tag = f"{case['name']}_{mtu_link}"
            for ext in (".peer.log", ".droce.log", ".guest.log", ".pcap"):
                base = os.path.join(self.a.workdir, tag)
                if os.path.exists(base + ext):
                    os.replace(base + ext, base + ".wedged" + ext)
            self.pcaps = [p for p in self.pcaps if not p.endswith(tag + ".pcap")]
            log(f"RIG: {e}; restarting the guest once and rerunning the case (not counted for or against droce)")
            self.rig.down()
            log(f"RIG: guest back in {self.rig.up():.1f} s")
            run(case, mtu_link)   # a second Wedged propagates: the run is inconclusive


def check_captures(a, pcaps, allowed=None):
    """ICRC (the rig's checker), droce decode and tshark over every capture."""
    bad = []
    p = subprocess.run([a.rig, "icrc", *pcaps], capture_output=True, text=True)
    total_ok = sum(int(m) for m in re.findall(r": (\d+) RoCEv2 packets with valid ICRC", p.stdout))
    if p.returncode != 0:
        bad.append("ICRC: " + " | ".join(line for line in p.stdout.splitlines() if "BAD" in line or "bad" in line))
    log(f"{'ok' if p.returncode == 0 else 'FAIL'}: the rig's ICRC check: {total_ok} packets with a valid ICRC "
        f"in {len(pcaps)} captures")
    decoded = 0
    for f in pcaps:
        d = subprocess.run([a.droce, "decode", "--quiet", f], capture_output=True, text=True)
        m = re.search(r"(\d+) frames: (\d+) RoCEv2 ok, (\d+) rejected", d.stdout)
        if d.returncode != 0 or not m:
            bad.append(f"droce decode {os.path.basename(f)}: {d.stdout.strip()[-300:]}")
        else:
            decoded += int(m.group(2))
    log(f"{'ok' if not [b for b in bad if b.startswith('droce decode')] else 'FAIL'}: droce decode: "
        f"{decoded} frames decoded, ICRC recomputed")
    rows_by_pcap = {f: tshark_rows(f) for f in pcaps}
    allowed = allowed or {}
    problems = [f"{os.path.basename(f)}: {p}" for f, rows in rows_by_pcap.items()
                for p in tshark_problems(rows, allowed.get(f, ()))]
    n_droce = sum(1 for rows in rows_by_pcap.values() for r in rows if who(r) == "droce")
    n_all = sum(len(rows) for rows in rows_by_pcap.values())
    log(f"{'ok' if not problems else 'FAIL'}: tshark dissects all {n_all} frames ({n_droce} from droce) as "
        f"RoCEv2 with no malformed mark or expert note")
    bad += problems[:20]
    # RoCEv2 carries flow entropy in the UDP source port; a QP must keep one so that ECMP keeps
    # its packets in order (REFERENCES.md). Both stacks, per capture and QP.
    ports = {}
    for f, rows in rows_by_pcap.items():
        for r in rows:
            ports.setdefault((f, who(r), r["infiniband.bth.destqp"]), set()).add(r["udp.srcport"])
    split = [f"{os.path.basename(f)} {w} to QP {q}: ports {sorted(p)}" for (f, w, q), p in ports.items() if len(p) > 1]
    log(f"{'ok' if not split else 'FAIL'}: every QP of either stack keeps one UDP source port")
    bad += split
    pads = {w: sorted({r["infiniband.bth.padcnt"] for rows in rows_by_pcap.values() for r in rows if who(r) == w})
            for w in ("droce", "rxe")}
    log(f"pad counts seen: droce {','.join(pads['droce'])}; rxe {','.join(pads['rxe'])}")
    if total_ok != n_all:
        bad.append(f"the ICRC checker saw {total_ok} RoCEv2 packets, tshark {n_all}")
    log("wire fields, droce vs rxe, over every capture:")
    for line in wire_summary(rows_by_pcap):
        log(line)
    return bad


def reap_stale(a):
    """Guests and namespaces left by an earlier run that was killed (qemu daemonizes, so it
    outlives us): guest i<PID> in namespace droce-rxe-<PID>, for a PID no longer running."""
    vms = os.path.join(a.rig_dir, "vms")
    for name in os.listdir(vms) if os.path.isdir(vms) else []:
        m = re.fullmatch(r"i(\d+)", name)
        if not m or os.path.exists(f"/proc/{m.group(1)}"):
            continue
        log(f"removing guest {name} left by an earlier run")
        Rig(a.rig, a.rig_dir, f"droce-rxe-{m.group(1)}", name).down()
        subprocess.run(["ip", "netns", "del", f"droce-rxe-{m.group(1)}"], capture_output=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rig", required=True)
    ap.add_argument("--rig-dir", required=True)
    ap.add_argument("--droced", required=True)
    ap.add_argument("--droce", required=True)
    ap.add_argument("--peer", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--mtus", default="1500,9000")
    ap.add_argument("--only", default="")
    ap.add_argument("--simulate-stall", default="")
    ap.add_argument("--tool-mtus", default="1500", help="link MTUs at which the perftest/pingpong cases run")
    ap.add_argument("--no-tools", default="", metavar="WHY",
                    help="skip the perftest/pingpong cases, saying why (no provider module built)")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    for f in os.listdir(a.workdir):
        if f.endswith((".pcap", ".log", ".json")):
            os.unlink(os.path.join(a.workdir, f))
    reap_stale(a)
    pid = os.getpid()
    rig = Rig(a.rig, a.rig_dir, f"droce-rxe-{pid}", f"i{pid}")
    droced = Droced(a.droced, rig, os.path.join(a.workdir, "droced"))
    runner = Runner(a, rig, droced)
    only = set(filter(None, a.only.split(",")))
    tool_mtus = {int(x) for x in a.tool_mtus.split(",") if x}
    if not a.no_tools:
        missing = [c["tool"] for c in tool_cases() if not shutil.which(c["tool"])]
        if missing:
            a.no_tools = f"not installed on the host: {' '.join(sorted(set(missing)))} (perftest, ibverbs-utils)"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))   # meson's timeout: clean up below
    t_start = time.monotonic()
    inconclusive = None
    try:
        for mtu_link in [int(x) for x in a.mtus.split(",")]:
            rig.mtu = mtu_link
            path_mtu, cases = cases_for(mtu_link)
            rig.down()
            log(f"== MTU {mtu_link} (RoCE path MTU {path_mtu})")
            log(f"guest {rig.guest} up in {rig.up():.1f} s (TCG emulation: slow but correct)")
            if not os.path.exists(os.path.join(a.rig_dir, "vms", rig.guest)):
                raise RuntimeError("guest directory missing after up")
            if rig.ns("ip", "link", "show", PORT, check=False).returncode != 0:
                rig.sh("port", PORT)
            for dev in (PORT, PORT + "-br"):
                rig.ns("ip", "link", "set", dev, "mtu", str(mtu_link))
            droced.stop()
            droced.start()
            ports = json.loads(subprocess.run([a.droce, "ports", "--json", "--socket", droced.sock],
                                              capture_output=True, text=True, check=True).stdout)
            log(f"droced on {PORT}: port MTU {ports[0]['mtu']}")
            for case in cases:
                if only and case["name"] not in only:
                    continue
                runner.run_with_restart(case, mtu_link)
            if mtu_link == min(tool_mtus or {1500}) and (not only or only & {"cm_rc_no_listener", "cm_ud_no_listener"}):
                cm_no_listener_cases(runner, rig, a, droced)
            cm_tools = [c for c in cm_tool_cases() if not only or c["name"] in only]
            if cm_tools and mtu_link == min(tool_mtus or {1500}) and not a.no_tools:
                log(f"-- rdma_cm programs both ways (droce's CM and the kernel's), {TOOL_ITERS} iterations each")
                runner.droced_mac = json.loads(rig.ns("ip", "-j", "link", "show", PORT).stdout)[0]["address"]
                for case in cm_tools:
                    runner.run_with_restart(case, mtu_link)
            tools = [c for c in tool_cases() if not only or c["name"] in only]
            if a.no_tools and tools and mtu_link in tool_mtus:
                log(f"SKIP (part): the perftest/pingpong cases: {a.no_tools}")
            elif tools and mtu_link in tool_mtus:
                # The programs' TCP exchange: the kernel gets droced's address on the veth droced
                # uses (af_packet: one MAC, so ARP answers agree; droced's UDP 4791 sink keeps the
                # kernel quiet about RoCE). arp_ignore=1: the bridge's own interface, in the same
                # namespace, must not answer ARP for 10.99.0.50 with its MAC, or rxe's RoCE packets
                # would go to the bridge instead of droced.
                # And what the kernel sends from 10.99.0.50 (its TCP replies, its ARP requests
                # naming 10.99.0.50 as sender) must leave through droced's veth too: from the
                # bridge's interface, an ARP request "who has 10.99.0.11, tell 10.99.0.50" taught
                # the guest the bridge's MAC for droced's address, and rxe sent 8 s of RoCE
                # retries to the bridge (seen in a first version). A rule for that source
                # address, and arp_announce=2 (ARP senders from the outgoing interface's subnet).
                rig.ns("sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1")
                rig.ns("sysctl", "-qw", "net.ipv4.conf.all.arp_announce=2")
                rig.ns("ip", "addr", "replace", f"{DROCE_IP}/24", "dev", PORT)
                rig.ns("ip", "route", "replace", "10.99.0.0/24", "dev", PORT, "src", DROCE_IP, "table", "4791")
                if DROCE_IP not in rig.ns("ip", "rule", "show").stdout:
                    rig.ns("ip", "rule", "add", "from", DROCE_IP, "table", "4791")
                runner.droced_mac = json.loads(rig.ns("ip", "-j", "link", "show", PORT).stdout)[0]["address"]
                log(f"-- stock verbs programs (droce exec on the host, rxe0 in the guest), "
                    f"{TOOL_ITERS} iterations each")
                for case in tools:
                    runner.run_with_restart(case, mtu_link)
                rig.ns("ip", "rule", "del", "from", DROCE_IP, "table", "4791", check=False)
                rig.ns("ip", "route", "flush", "table", "4791", check=False)
                rig.ns("ip", "addr", "del", f"{DROCE_IP}/24", "dev", PORT, check=False)
            rc = droced.stop()
            if rc != 0:
                runner.fail(f"droced_{mtu_link}", f"droced exit status {rc} on SIGTERM:\n{droced.tail()}")
    except Wedged as e:
        inconclusive = f"the guest wedged again after a restart ({e})"
    finally:
        droced.stop()
        rig.down()
        if rig.sh("net-down", check=False).returncode != 0:
            subprocess.run(["ip", "netns", "del", rig.netns], capture_output=True)
    if inconclusive:
        log(f"INCONCLUSIVE: {inconclusive}; rerun the test. Not a droce failure, not a pass.")
        return 77
    bad = check_captures(a, runner.pcaps, runner.allowed_expert) if runner.pcaps else ["no captures"]
    for b in bad:
        runner.fail("captures", b)
    log(f"guest restarts after an emulated-NIC stall: {runner.wedges}")
    log(f"total {time.monotonic() - t_start:.0f} s; captures and logs in {a.workdir}")
    if runner.failures:
        log(f"FAILED: {', '.join(sorted(set(runner.failures)))}")
        return 1
    log("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
