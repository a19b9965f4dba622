#!/usr/bin/env python3
"""Concurrency of writable mounts (found by a concurrent fuzzer).

1. A directory handle opened before a change must not bring the old entry
   back: the listing is a snapshot taken at opendir (overlay_names.c), and
   READDIRPLUS served from it re-linked the name in the kernel to the node
   it named then. After rename(new, a/target) over an existing file and a
   getdents on a handle opened before, a/target read the replaced (unlinked)
   file and writes went to it (lost on remount); a file renamed away was
   still found under its old name.
2. user.tadoc.insert/delete invalidate the kernel's pages; done in the FUSE
   worker, that waited for the page locks of a read in flight, which only a
   worker can answer: with one worker (-s, max_threads=1) the mount hung
   (and SIGKILL of the daemon did not end it). A reader and an inserter on
   one file run for a few seconds on such mounts; every insert must be seen
   by the inserter's next read.

Environment: TADOC, TADOCFS. Exit 77 without /dev/fuse.
"""
import multiprocessing as mp
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fs_write_lib import (teardown, check, compress, finish, log, mount, skip_without_fuse,  # noqa: E402
                          snapshot, unmount)


def stale_readdirplus(tmp):
    src = os.path.join(tmp, "src1")
    os.makedirs(os.path.join(src, "a"))
    with open(os.path.join(src, "a", "target"), "w") as f:
        f.write("OLD\n")
    with open(os.path.join(src, "a", "moved"), "w") as f:
        f.write("moved\n")
    archive = os.path.join(tmp, "c1.tadoc")
    compress(src, archive)
    mnt = os.path.join(tmp, "mnt1")
    mount(archive, mnt, "rw")
    a = os.path.join(mnt, "a")
    os.listdir(a)
    dfd = os.open(a, os.O_RDONLY | os.O_DIRECTORY)  # snapshot taken here
    with open(os.path.join(mnt, "new"), "w") as f:
        f.write("NEW\n")
    os.rename(os.path.join(mnt, "new"), os.path.join(a, "target"))
    os.rename(os.path.join(a, "moved"), os.path.join(mnt, "moved2"))
    check(sorted(os.listdir(dfd)) == ["moved", "target"], "the old handle lists its snapshot")
    os.close(dfd)
    with open(os.path.join(a, "target")) as f:
        got = f.read()
    check(got == "NEW\n", "a/target after a getdents of an older handle reads %r, not the new file" % got)
    check(not os.path.exists(os.path.join(a, "moved")), "a/moved renamed away is still found")
    with open(os.path.join(a, "target"), "a") as f:
        f.write("appended\n")
    want = snapshot(mnt)
    unmount(mnt)
    mount(archive, mnt, "ro")
    check(snapshot(mnt) == want, "tree after remount differs (a write went to the replaced file)")
    unmount(mnt)


def reader(path, hb):
    while True:
        with open(path, "rb") as f:
            while f.read(1 << 16):
                pass
        hb.value = time.time()


def inval_no_hang(tmp, opts, k):
    src = os.path.join(tmp, "src2_%d" % k)
    os.makedirs(src)
    with open(os.path.join(src, "f"), "w") as f:
        f.write("word " * 100000)
    archive = os.path.join(tmp, "c2_%d.tadoc" % k)
    compress(src, archive)
    mnt = os.path.join(tmp, "mnt2_%d" % k)
    mount(archive, mnt, *opts)
    path = os.path.join(mnt, "f")
    hb = mp.Value("d", time.time())
    rd = mp.get_context("fork").Process(target=reader, args=(path, hb), daemon=True)
    rd.start()
    done = mp.Value("i", 0)
    bad = mp.Value("i", 0)

    def edits():
        for i in range(300):
            os.setxattr(path, "user.tadoc.insert.0", b"Z")
            with open(path, "rb") as f:
                if f.read(1) != b"Z":
                    bad.value += 1
            os.setxattr(path, "user.tadoc.delete.0", b"1")
        done.value = 1
    ed = mp.get_context("fork").Process(target=edits, daemon=True)
    ed.start()
    ed.join(30)
    hung = ed.is_alive()
    check(not hung, "%s: insert/delete beside a reader hung the mount" % ",".join(opts))
    check(bad.value == 0, "%s: %d reads after an insert missed it" % (",".join(opts), bad.value))
    rd.kill()
    if hung:  # free the kernel: abort the connection (SIGKILL alone cannot)
        for line in open("/proc/self/mountinfo"):
            f = line.split()
            if f[4] == os.path.abspath(mnt):  # no stat: the mount is hung
                with open("/sys/fs/fuse/connections/%s/abort" % f[2].split(":")[1], "w") as a:
                    a.write("1")
        ed.kill()
    unmount(mnt)


def main():
    skip_without_fuse()
    tmp = os.path.realpath(tempfile.mkdtemp(prefix="tadoc-fs-conc-"))
    try:
        stale_readdirplus(tmp)
        for k, opts in enumerate((["rw", "max_threads=1"], ["rw"])):
            inval_no_hang(tmp, opts, k)
    finally:
        teardown(tmp)
    finish()


if __name__ == "__main__":
    main()
