#!/usr/bin/python3
"""mw-peer: one side of a memory-window exchange (issue #38), in pyverbs, so that the same program
runs on the kernel's rxe in a rig guest (python3 /rig/mw_peer.py --dev rxe0) and on droce
(droce exec -- python3 mw_peer.py --dev droce0). rxe_interop.py runs it both ways.

  mw_peer.py --role owner|user --dev DEV --dir DIR --tag T --mw-type 1|2 [--wait S]

The owner registers a region with IBV_ACCESS_MW_BIND only (its own R_Key is never published), fills
it with pattern A, binds a window of WLEN bytes at WOFF over it (type 2: an IBV_WR_BIND_MW work
request; type 1: ibv_bind_mw) with remote read and write, and publishes the window's R_Key and
address. The user, on the other end of an RC connection:
  1. WRITEs pattern B (WRITE_LEN bytes) to the window's start;
  2. READs READ_LEN bytes from the window's start: B, then A (data checked);
  3. type 2: SENDs with invalidate of the window's R_Key (IBA 9.4.1.1); the owner's receive must
     report IBV_WC_WITH_INV and that R_Key as invalidated_rkey (pyverbs' imm_data: the same union);
     type 1 (which cannot be invalidated remotely, IBA 10.6.7.2.5): the owner unbinds it with a
     zero-length bind once the user says it is done;
  4. WRITEs through the old R_Key again: must complete IBV_WC_REM_ACCESS_ERR.
At the end the owner checks its whole region: B where the first WRITE went, A everywhere else
(the refused WRITE changed nothing).

Exchange through files in DIR (the guest's share, /rig inside the guest): T.ROLE.json (qpn, psn,
gid), T.window.json (rkey, addr, len), T.accessed and T.unbound (type 1), T.user-done.
Output: one JSON line per event; checks as {"event": "check", "ok": ..., "what": ...}.
Exit 0 when every check passed, 1 when one failed, 2 on a verbs error or a timeout.
"""
import argparse
import json
import os
import socket
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GID, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR, MW, MWBind, MWBindInfo
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SendWR, SGE

SIZE = 65536
WOFF, WLEN = 4096, 8192          # the window within the owner's region
WRITE_LEN, READ_LEN = 3000, 6000  # the user's first WRITE and its READ, both from the window's start
SEND_LEN = 32                     # the SEND with invalidate's payload
LATE_OFF, LATE_LEN = 4000, 64     # the WRITE through the stale R_Key (window offset)
RECV_OFF = 32768                  # the owner's receive buffer, outside the window
failures = 0


def out(**kw):
    print(json.dumps(kw), flush=True)


def check(ok, what, detail=""):
    global failures
    failures += 0 if ok else 1
    out(event="check", ok=bool(ok), what=what, **({"detail": detail} if detail and not ok else {}))


def pattern(seed, n):
    return bytes(((i * 131) ^ (i >> 8) ^ (seed * 0x3b)) & 0xff for i in range(n))


def die(why):
    out(event="error", why=why)
    sys.exit(2)


def wait_path(path, timeout, parse=False):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with open(path) as f:
                return json.load(f) if parse else True
        except (FileNotFoundError, json.JSONDecodeError):
            time.sleep(0.05)
    die(f"timeout waiting for {path}")


def put(path, obj=None):
    with open(path + ".tmp", "w") as f:
        json.dump(obj or {}, f)
    os.rename(path + ".tmp", path)


def poll(cq, timeout):
    end = time.time() + timeout
    while time.time() < end:
        n, wcs = cq.poll()
        if n:
            wc = wcs[0]
            out(event="wc", wr_id=wc.wr_id, status=wc.status, opcode=wc.opcode, byte_len=wc.byte_len,
                wc_flags=wc.wc_flags, imm_data=wc.imm_data)
            return wc
        time.sleep(0.001)
    die("timeout polling the CQ")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=["owner", "user"], required=True)
    ap.add_argument("--dev", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--mw-type", type=int, choices=[1, 2], default=2)
    ap.add_argument("--gid-index", type=int, default=1)
    ap.add_argument("--mtu", type=int, default=1024)
    ap.add_argument("--wait", type=float, default=60)
    # The wc_flags bit the owner's device sets on a receive that invalidated a key: libibverbs'
    # IBV_WC_WITH_INV (1 << 3). The kernel's rxe writes the kernel's IB_WC_WITH_INVALIDATE (1 << 2)
    # into the user's completion instead, which libibverbs reads as IBV_WC_IP_CSUM_OK
    # (docs/interop.md): rxe_interop.py passes 4 when rxe is the owner.
    ap.add_argument("--inv-flag", type=int, default=e.IBV_WC_WITH_INV)
    # Type 1 only: instead of the owner's unbind, the user SENDs with invalidate of the type 1
    # window's key, which IBA does not allow (o10-37.2.26); the statuses each side must see are
    # given (the two stacks differ: docs/interop.md), and the user's last WRITE is left out.
    ap.add_argument("--bad-inv", action="store_true")
    ap.add_argument("--want-send", type=int, default=0, help="--bad-inv: the user's SEND's status")
    ap.add_argument("--want-recv", type=int, default=0, help="--bad-inv: the owner's receive's status")
    a = ap.parse_args()
    f = lambda name: os.path.join(a.dir, f"{a.tag}.{name}")  # noqa: E731
    owner = a.role == "owner"
    other = "user" if owner else "owner"

    ctx = Context(name=a.dev)
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, sq_sig_all=1,
                           cap=QPCap(max_send_wr=8, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)))
    remote = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    # The owner's region: no remote access of its own; only the window opens it.
    mr = MR(pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE | (e.IBV_ACCESS_MW_BIND if owner else 0))
    mr.write(pattern(1 if owner else 2, SIZE), SIZE)
    mw = MW(pd, e.IBV_MW_TYPE_1 if a.mw_type == 1 else e.IBV_MW_TYPE_2) if owner else None

    attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1, path_mtu={1024: e.IBV_MTU_1024, 4096: e.IBV_MTU_4096}[a.mtu])
    attr.pkey_index = 0
    attr.qp_access_flags = remote
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    if owner:
        qp.post_recv(RecvWR(wr_id=100, num_sge=1, sg=[SGE(mr.buf + RECV_OFF, 4096, mr.lkey)]))
    psn = 0x3000 if owner else 0x7000
    gid = ctx.query_gid(1, a.gid_index)
    put(f(a.role + ".json"), dict(qpn=qp.qp_num, psn=psn, gid=str(gid)))
    rem = wait_path(f(other + ".json"), a.wait, parse=True)
    attr.qp_state = e.IBV_QPS_RTR
    attr.ah_attr = AHAttr(gr=GlobalRoute(dgid=GID(rem["gid"]), sgid_index=a.gid_index, hop_limit=64),
                          is_global=1, port_num=1)
    attr.dest_qp_num = rem["qpn"]
    attr.rq_psn = rem["psn"]
    attr.max_dest_rd_atomic = 1
    attr.min_rnr_timer = 12
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN |
              e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
    attr.qp_state = e.IBV_QPS_RTS
    attr.sq_psn = psn
    attr.timeout, attr.retry_cnt, attr.rnr_retry, attr.max_rd_atomic = 14, 7, 7, 1
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY |
              e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)
    out(event="rts", role=a.role, qpn=qp.qp_num, dest_qpn=rem["qpn"])
    a_pat, b_pat = pattern(1, SIZE), pattern(2, SIZE)

    if owner:
        info = MWBindInfo(mr, mr.buf + WOFF, WLEN, remote)
        if a.mw_type == 2:
            wr = SendWR(wr_id=1, opcode=e.IBV_WR_BIND_MW)
            wr.set_bind_wr(mw, info)
            rkey = wr.rkey   # rxe's provider leaves mw.rkey as it was until the next bind; droce's updates it
            qp.post_send(wr)
        else:
            qp.bind_mw(mw, MWBind(info, e.IBV_SEND_SIGNALED))
            rkey = mw.rkey   # ibv_bind_mw sets it to the new key (libibverbs' contract)
        wc = poll(cq, a.wait)
        check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_BIND_MW,
              f"type {a.mw_type} bind completes IBV_WC_BIND_MW", f"status {wc.status} opcode {wc.opcode}")
        out(event="window", rkey=rkey, addr=mr.buf + WOFF, len=WLEN)
        put(f("window.json"), dict(rkey=rkey, addr=mr.buf + WOFF, len=WLEN))
        if a.bad_inv:
            wc = poll(cq, a.wait)
            check(wc.status == a.want_recv and wc.wr_id == 100,
                  f"the SEND with invalidate of a type 1 key: the receive completes with status {a.want_recv}",
                  f"status {wc.status} wr_id {wc.wr_id}")
        elif a.mw_type == 2:
            wc = poll(cq, a.wait)
            inv = wc.wc_flags & a.inv_flag
            check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_RECV and wc.byte_len == SEND_LEN,
                  "the SEND with invalidate is received", f"status {wc.status} opcode {wc.opcode} len {wc.byte_len}")
            flag = "IBV_WC_WITH_INV" if a.inv_flag == e.IBV_WC_WITH_INV else f"wc_flags bit {a.inv_flag:#x}"
            check(inv and wc.imm_data == rkey, f"the receive reports {flag} and invalidated_rkey {rkey:#x}",
                  f"wc_flags {wc.wc_flags:#x}, invalidated_rkey {wc.imm_data:#x}")
            check(mr.read(SEND_LEN, RECV_OFF) == pattern(3, SEND_LEN), "the SEND's payload")
        else:
            wait_path(f("accessed"), a.wait)
            qp.bind_mw(mw, MWBind(MWBindInfo(mr, mr.buf + WOFF, 0, 0), e.IBV_SEND_SIGNALED))
            wc = poll(cq, a.wait)
            check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_BIND_MW,
                  "the zero-length bind (unbind) completes", f"status {wc.status} opcode {wc.opcode}")
            put(f("unbound"))
        wait_path(f("user-done"), a.wait)
        want = bytearray(a_pat)
        want[WOFF:WOFF + WRITE_LEN] = b_pat[:WRITE_LEN]
        if a.mw_type == 2 or a.bad_inv:   # (--bad-inv: whether the payload landed is not the question)
            want[RECV_OFF:RECV_OFF + SEND_LEN] = mr.read(SEND_LEN, RECV_OFF) if a.bad_inv else pattern(3, SEND_LEN)
        got = mr.read(SIZE, 0)
        bad = [i for i in range(SIZE) if got[i] != want[i]]
        check(not bad, "the owner's region: the WRITE's bytes in the window, nothing else changed",
              f"{len(bad)} bytes differ, first at {bad[0] if bad else 0}")
    else:
        win = wait_path(f("window.json"), a.wait, parse=True)
        rkey, base = win["rkey"], win["addr"]
        out(event="window", **win)

        def post(wr_id, opcode, off, length, raddr=None, inv=None):
            wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[SGE(mr.buf + off, length, mr.lkey)])
            if raddr is not None:
                wr.set_wr_rdma(rkey, raddr)
            if inv is not None:
                wr.imm_data = inv   # invalidate_rkey: the same union, host order
            qp.post_send(wr)
            return poll(cq, a.wait)

        wc = post(1, e.IBV_WR_RDMA_WRITE, 0, WRITE_LEN, base)
        check(wc.status == e.IBV_WC_SUCCESS, f"WRITE {WRITE_LEN} B through the window", f"status {wc.status}")
        wc = post(2, e.IBV_WR_RDMA_READ, 16384, READ_LEN, base)
        check(wc.status == e.IBV_WC_SUCCESS, f"READ {READ_LEN} B through the window", f"status {wc.status}")
        want = b_pat[:WRITE_LEN] + a_pat[WOFF + WRITE_LEN:WOFF + READ_LEN]
        check(mr.read(READ_LEN, 16384) == want, "the READ returns the WRITE's bytes, then the owner's")
        if a.bad_inv:
            mr.write(pattern(3, SEND_LEN), SEND_LEN, 20480)
            wc = post(3, e.IBV_WR_SEND_WITH_INV, 20480, SEND_LEN, inv=rkey)
            check(wc.status == a.want_send, f"SEND with invalidate of the type 1 key {rkey:#x}: status {a.want_send}",
                  f"status {wc.status}")
            put(f("user-done"))
            out(event="done", failures=failures)
            return 1 if failures else 0
        if a.mw_type == 2:
            mr.write(pattern(3, SEND_LEN), SEND_LEN, 20480)
            wc = post(3, e.IBV_WR_SEND_WITH_INV, 20480, SEND_LEN, inv=rkey)
            check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_SEND,
                  f"SEND with invalidate of {rkey:#x} completes", f"status {wc.status} opcode {wc.opcode}")
        else:
            put(f("accessed"))
            wait_path(f("unbound"), a.wait)
        wc = post(4, e.IBV_WR_RDMA_WRITE, 24576, LATE_LEN, base + LATE_OFF)
        check(wc.status == e.IBV_WC_REM_ACCESS_ERR, "the next WRITE through the old R_Key: IBV_WC_REM_ACCESS_ERR",
              f"status {wc.status}")
        put(f("user-done"))
    out(event="done", failures=failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
