#!/usr/bin/python3
"""A filesystem whose reads do not come back until told: for verbs_ext_probe's ODP stall check.

    odp_fuse_gate.py MOUNTPOINT GATE

Serves one read-only file, MOUNTPOINT/slow, of 1 MiB whose byte at offset i is (i * 7) & 0xff.
A read of it waits until the file GATE exists, as a filesystem that never answers (a client's
own FUSE mount, a dead NFS server) would. A program that maps `slow` and registers it as an ODP
region gives droced a page whose fault does not end; droced must take that fault off the worker
that serves everyone else (droced/process_memory.h). Runs in the foreground until unmounted
(`umount MOUNTPOINT`). Needs Debian's python3-fusepy.
"""
import errno
import os
import stat
import sys
import time

import fusepy

SIZE = 1 << 20


class Gate(fusepy.Operations):
    def __init__(self, gate):
        self.gate = gate

    def getattr(self, path, fh=None):
        if path == "/":
            return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2}
        if path == "/slow":
            return {"st_mode": stat.S_IFREG | 0o444, "st_nlink": 1, "st_size": SIZE}
        raise fusepy.FuseOSError(errno.ENOENT)

    def readdir(self, path, fh):
        return [".", "..", "slow"]

    def open(self, path, flags):
        if path != "/slow":
            raise fusepy.FuseOSError(errno.ENOENT)
        return 0

    def read(self, path, size, offset, fh):
        while not os.path.exists(self.gate):
            time.sleep(0.01)
        end = min(SIZE, offset + size)
        return bytes((i * 7) & 0xFF for i in range(offset, end))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    fusepy.FUSE(Gate(sys.argv[2]), sys.argv[1], foreground=True, nothreads=False, ro=True)
