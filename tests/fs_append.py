#!/usr/bin/env python3
"""Readers never see part of a write during concurrent O_APPEND writers (issue 26).

On a writable mount, four threads append lines of 1 to 5,000 bytes to one
file through O_APPEND descriptors (so many lines cross page boundaries)
while four readers, opened after them, read it: two read the whole file
again and again, two follow it like `tail -f` (pread on from where they
stopped). Every line any reader sees must be a whole line some writer
wrote, the file must always end with a newline, and afterwards the file
holds exactly every line written, each writer's in its order.

Through the page cache this failed: the kernel sends a write(2) in parts at
page boundaries and readers met zero-filled pages (overlay_io.c says how
appenders and their readers go direct instead).

Then an append through an O_RDWR | O_APPEND descriptor (through the page
cache) after an insert and after a delete through user.tadoc.insert/delete,
which leave the kernel's idea of the file's end behind the daemon's: the
write must return and land at the real end. It hung the mount before (the
daemon invalidated the kernel's pages before replying, while the write
held their locks until the reply).

Environment: TADOC, TADOCFS; FS_APPEND_SECONDS (default 3). Exit 77
without /dev/fuse.
"""
import os
import random
import re
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fs_write_lib import teardown, check, compress, finish, kill_daemon, log, mount, skip_without_fuse, unmount  # noqa: E402

LINE = re.compile(rb"^w(\d) (\d+) (x*) end$")


def abort_connection(mnt):
    """Abort the FUSE connection of mnt (a daemon thread stuck in the
    kernel cannot exit on SIGKILL until the connection is gone)."""
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        if os.path.realpath(f[4]) == os.path.realpath(mnt):
            with open("/sys/fs/fuse/connections/%s/abort" % f[2].split(":")[1], "w") as a:
                a.write("1")
            return


def write_within(fd, data, secs=30):
    """os.write(fd, data) on a thread: its result, or None if it hung."""
    res = []
    t = threading.Thread(target=lambda: res.append(os.write(fd, data)), daemon=True)
    t.start()
    t.join(secs)
    return res[0] if res else None


def mount_one(tmp, tag, name, data):
    """A writable mount of an archive of one file `name` holding data."""
    src = os.path.join(tmp, "src-" + tag)
    os.makedirs(src)
    with open(os.path.join(src, name), "wb") as f:
        f.write(data)
    archive = os.path.join(tmp, tag + ".tadoc")
    compress(src, archive)
    mnt = os.path.join(tmp, "mnt-" + tag)
    mount(archive, mnt, "rw")
    return mnt


def append_or_abort(mnt, fd, data, what):
    """Append data through fd; a write that hangs aborts the mount and fails."""
    n = write_within(fd, data)
    if n is None:
        abort_connection(mnt)
        kill_daemon(mnt)
        check(False, "%s returned within 30 s" % what)
        return False
    check(n == len(data), "%s wrote %d bytes of %d" % (what, n, len(data)))
    return True


def append_after_edit(tmp):
    """Appends through the page cache after an insert and a delete."""
    mnt = mount_one(tmp, "edit", "seed.txt", b"seed\n")
    path = os.path.join(mnt, "f.txt")
    with open(path, "wb") as f:
        f.write(b"abc")
    fd = os.open(path, os.O_RDWR | os.O_APPEND)
    os.setxattr(path, "user.tadoc.insert.0", b"XYZ")
    if not append_or_abort(mnt, fd, b"!", "an O_RDWR|O_APPEND write after an insert"):
        return
    os.setxattr(path, "user.tadoc.delete.1", b"2")
    big = bytes(random.Random(7).choice(b"abcdefgh \n") for _ in range(300000))
    if not append_or_abort(mnt, fd, big, "a 300 KB O_RDWR|O_APPEND write after a delete"):
        return
    os.close(fd)
    with open(path, "rb") as f:
        got = f.read()
    check(got == b"Xabc!" + big, "the appends after an insert and a delete landed at the file's end")
    unmount(mnt)


def main():
    skip_without_fuse()
    secs = float(os.environ.get("FS_APPEND_SECONDS", "3"))
    tmp = tempfile.mkdtemp(prefix="tadoc-fs-append-")
    try:
        mnt = mount_one(tmp, "log", "log.txt", b"start\n")
        path = os.path.join(mnt, "log.txt")
        stop = time.time() + secs
        bad, written, reads = [], [[] for _ in range(4)], [0]
        started = threading.Barrier(5)

        def writer(k):
            rng = random.Random(k)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            started.wait()
            n = 0
            while time.time() < stop:
                line = b"w%d %d %s end\n" % (k, n, b"x" * rng.choice([1, 50, 300, 3000, 5000]))
                check(os.write(fd, line) == len(line), "a short append")
                written[k].append(line)
                n += 1
            os.close(fd)

        def whole_reader():
            while time.time() < stop:
                with open(path, "rb") as f:
                    data = f.read()
                reads[0] += 1
                if not data.endswith(b"\n"):
                    bad.append(("the file read does not end with a newline", data[-80:]))
                    continue
                for line in data.split(b"\n")[1:-1]:
                    if not LINE.match(line):
                        bad.append(("a line read whole is not one written", line[:60] + b"..." + line[-30:]))
                        break

        def tail_reader():
            fd = os.open(path, os.O_RDONLY)
            off, buf = 0, b""
            while time.time() < stop:
                d = os.pread(fd, 65536, off)
                reads[0] += 1
                if not d:
                    time.sleep(0.001)
                    continue
                off += len(d)
                buf += d
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if line != b"start" and not LINE.match(line):
                        bad.append(("a line followed by pread is not one written", line[:60] + b"..." + line[-30:]))
            os.close(fd)

        writers = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for t in writers:
            t.start()
        started.wait()   # the readers open after the appenders
        readers = [threading.Thread(target=whole_reader if k % 2 else tail_reader) for k in range(4)]
        for t in readers:
            t.start()
        for t in writers + readers:
            t.join()
        nlines = sum(len(w) for w in written)
        log("  %d lines appended by 4 writers, %d reads by 4 readers, %d bad" % (nlines, reads[0], len(bad)))
        for what, line in bad[:5]:
            check(False, "%s: %r" % (what, line))
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
        check(lines[0] == b"start" and lines[-1] == b"", "the file begins with its old line and ends with a newline")
        mine = [[x + b"\n" for x in lines[1:-1] if x.startswith(b"w%d " % k)] for k in range(4)]
        check(mine == written and sum(map(len, mine)) == len(lines) - 2,
              "the file holds exactly every line written, each writer's in order")
        unmount(mnt)
        append_after_edit(tmp)
    finally:
        teardown(tmp)
    finish()


if __name__ == "__main__":
    main()
