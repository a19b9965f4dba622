#!/usr/bin/env python3
"""fs_stop: a long query ends when its caller is killed or the daemon is told to stop.

A generated corpus of random words (which the grammar hardly shares, so
every 8-word run is its own: `user.tadoc.ngrams.8.0` of the root walks and
ranks all of them) on read-only and writable mounts:
- getfattr of that list killed with SIGTERM while the daemon computes it:
  the kernel sends the daemon an interrupt and the killed process waits
  (uninterruptibly) for its answer, so it must end within seconds, long
  before the query would; the mount then answers the next query;
- the daemon sent SIGTERM while getfattr waits on the query: getfattr
  fails with EINTR, the daemon exits 0 and the mount is gone, within
  seconds.
The whole query is timed once on each archive; the signals come at a
quarter of that time. A query under a second, or one that ended before its
signal, proves nothing: the corpus is then made larger (twice), else the
case is skipped with a line saying so.

Environment: TADOC, TADOCFS. Exit 77 without /dev/fuse or root.
"""
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fs_write_lib import TADOC, check, compress, finish, is_mounted, log, mount, skip_without_fuse, teardown, unmount  # noqa: E402

NAME = "user.tadoc.ngrams.8.0"
WAIT = 60  # seconds a stop may take at most (sanitizer builds on 2 busy cores)


def corpus(d, rng, mb):
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
             for _ in range(20000)]
    os.makedirs(d)
    for k in range(8):
        words = rng.choices(vocab, k=mb * 1000000 // 8 // 6)
        with open(os.path.join(d, "f%d.txt" % k), "w") as f:
            for i in range(0, len(words), 12):
                f.write(" ".join(words[i:i + 12]) + "\n")


def start_query(mnt):
    return subprocess.Popen(["getfattr", "--only-values", "-n", NAME, mnt], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def running(q, secs):
    """True when the query still runs after secs (the daemon computing)."""
    try:
        q.wait(secs)
        return False
    except subprocess.TimeoutExpired:
        return True


def full_time(archive, mnt):
    """Seconds the whole query takes on a read-only mount."""
    mount(archive, mnt)
    t = time.time()
    q = start_query(mnt)
    q.wait()
    t = time.time() - t
    check(q.returncode == 0, "the whole query failed: %s" % q.stderr.read().decode(errors="replace"))
    unmount(mnt)
    return t


def kill_caller(mnt, label, delay):
    """getfattr killed mid-query ends at once; the mount still answers."""
    q = start_query(mnt)
    if not running(q, delay):
        return False
    t = time.time()
    q.send_signal(signal.SIGTERM)
    try:
        q.wait(WAIT)
    except subprocess.TimeoutExpired:
        q.kill()
        check(False, "%s: getfattr killed mid-query still waits after %d s" % (label, WAIT))
        return True
    log("  %s: getfattr killed mid-query ended after %.2f s" % (label, time.time() - t))
    check(q.returncode == -signal.SIGTERM, "%s: getfattr ended %d, not by the signal" % (label, q.returncode))
    v = os.getxattr(mnt, "user.tadoc.count.the")
    check(v.strip().isdigit(), "%s: the next query answered %r" % (label, v))
    return True


def stop_daemon(archive, mnt, opts, label, delay):
    """SIGTERM to the daemon mid-query: the query fails with EINTR, the
    daemon exits 0, the mount is gone."""
    p, _ = mount(archive, mnt, *opts)
    q = start_query(mnt)
    if not running(q, delay):
        unmount(mnt)
        return False
    t = time.time()
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(WAIT)
        q.wait(WAIT)
    except subprocess.TimeoutExpired:
        check(False, "%s: the daemon or the query still runs %d s after SIGTERM" % (label, WAIT))
        unmount(mnt)
        q.kill()
        return True
    err = q.stderr.read().decode(errors="replace")
    log("  %s: the daemon ended %.2f s after SIGTERM (rc %d); getfattr: %s" %
        (label, time.time() - t, p.returncode, err.strip()))
    check(p.returncode == 0, "%s: daemon exit status %d after SIGTERM" % (label, p.returncode))
    check(q.returncode != 0 and "Interrupted system call" in err,
          "%s: getfattr should fail with EINTR, got %d: %s" % (label, q.returncode, err))
    check(not is_mounted(mnt), "%s: still mounted after the daemon ended" % label)
    unmount(mnt)  # forgets the daemon
    return True


def main():
    skip_without_fuse()
    work = tempfile.mkdtemp(prefix="fs_stop-")
    rng = random.Random(7)
    mnt = os.path.join(work, "mnt")
    done = set()
    for mb in (4, 12, 36):
        src = os.path.join(work, "src%d" % mb)
        corpus(src, rng, mb)
        for fmt in ("5", "4"):
            archive = os.path.join(work, "c%d-%s.tadoc" % (mb, fmt))
            compress(src, archive, ["--format", fmt])
            full = full_time(archive, mnt)
            log("format %s, %d MB: the whole query takes %.2f s" % (fmt, mb, full))
            if full < 1:
                continue
            for opts, how in (((), "read-only"), (("rw",), "writable")):
                label = "format %s, %s, %d MB" % (fmt, how, mb)
                if ("kill", fmt, how) not in done:
                    mount(archive, mnt, *opts)
                    if kill_caller(mnt, label, full / 4):
                        done.add(("kill", fmt, how))
                    unmount(mnt)
                if ("stop", fmt, how) not in done and stop_daemon(archive, mnt, opts, label, full / 4):
                    done.add(("stop", fmt, how))
        if len(done) == 8:
            break
    for case in sorted({(k, f, h) for k in ("kill", "stop") for f in ("5", "4")
                        for h in ("read-only", "writable")} - done):
        log("  skipped: %s on format %s, %s: the query ended before the signal even at 36 MB" % case)
    check(len(done) > 0, "every query ended before its signal: nothing was tested")
    teardown(work)
    finish()


if __name__ == "__main__":
    main()
