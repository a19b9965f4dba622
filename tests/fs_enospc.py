#!/usr/bin/env python3
"""A full disk under a writable mount (issue 26): the archive and its journal
on a 1 MiB tmpfs; a writer appends 16 KiB at a time, fsyncing after each,
until the journal cannot grow (a write may come back short first, as the
kernel sends it in page-sized parts). The failing write (or fsync) reports ENOSPC,
not another error; after a remount every byte acknowledged before it (each
write was followed by a successful fsync) is there, in order, and nothing
else changed.

Environment: TADOC, TADOCFS. Exit 77 without /dev/fuse or when tmpfs
cannot be mounted (not root).
"""
import errno
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fs_write_lib import (check, cleanup, compress, diff_trees, finish, log, make_corpus, mount,  # noqa: E402
                          skip_without_fuse, snapshot, unmount)


def main():
    skip_without_fuse()
    tmp = tempfile.mkdtemp(prefix="tadoc-fs-enospc-")
    disk = os.path.join(tmp, "disk")
    os.makedirs(disk)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", disk], capture_output=True).returncode:
        shutil.rmtree(tmp, ignore_errors=True)
        print("SKIP: cannot mount a tmpfs")
        sys.exit(77)
    try:
        rng = random.Random(77)
        src = os.path.join(tmp, "src")
        make_corpus(src, rng, nfiles=4)
        archive = os.path.join(disk, "e.tadoc")
        compress(src, archive)
        mnt = os.path.join(tmp, "mnt")
        mount(archive, mnt, "rw")
        before = snapshot(mnt)
        name = sorted(n for n in os.listdir(mnt) if os.path.isfile(os.path.join(mnt, n)))[0]
        path = os.path.join(mnt, name)
        acked = b""
        failure = None
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        for i in range(1000):
            chunk = (b"%06d " % i) * (16384 // 7) + b"\n"
            try:
                n = os.write(fd, chunk)
                os.fsync(fd)
            except OSError as e:
                failure = e
                break
            acked += chunk[:n]   # a short write (the disk filled up mid-way) is allowed
        try:
            os.close(fd)
        except OSError:
            pass
        check(failure is not None, "1000 writes of 16 KiB fitted a 1 MiB tmpfs")
        if failure is not None:
            check(failure.errno == errno.ENOSPC, "the failing call reports %s, not ENOSPC" %
                  errno.errorcode.get(failure.errno, failure.errno))
            log("  after %d acknowledged bytes: %s" % (len(acked), os.strerror(failure.errno)))
        unmount(mnt)
        mount(archive, mnt, "rw")
        after = snapshot(mnt)
        got = after[name][2]
        want = before[name][2] + acked
        check(got[:len(want)] == want, "after remount %s does not begin with every acknowledged byte (%d of %d)"
              % (name, len(got), len(want)))
        check(got == want, "after remount %s holds %d bytes past the acknowledged ones" % (name, len(got) - len(want)))
        after.pop(name)
        before.pop(name)
        d = diff_trees(before, after)
        check(not d, "other files changed: %s" % "; ".join(d))
        unmount(mnt)
    finally:
        cleanup()
        subprocess.run(["umount", disk], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
