#!/usr/bin/env python3
"""kill -9 of `tadoc compact` at each of its fsyncs and renames (issue 26).

Edits made on a writable mount leave an archive and its journal. Then, for
every fsync, fdatasync and rename that `tadoc compact` makes, one run is
killed with SIGKILL as it enters that call (strace -e inject=SYSCALL:
signal=KILL:when=N). After each kill the archive (with what is left of its
journal) reads exactly the edited tree; the next `tadoc compact` succeeds,
names the temporaries of the killed process that it removed, and leaves no
temporary (ARCHIVE.*.tmp.PID) behind; the tree is still exact. A temporary
of a process that still runs is never removed.

Environment: TADOC, TADOCFS. Exit 77 without /dev/fuse or strace.
"""
import glob
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fs_write_lib import (teardown, TADOC, check, compress, diff_trees, finish, log, make_corpus, mount,  # noqa: E402
                          run, skip_without_fuse, snapshot, unmount)


def temporaries(archive):
    return sorted(g for g in glob.glob(archive + ".*") if ".tmp." in os.path.basename(g))


def main():
    skip_without_fuse()
    if not shutil.which("strace"):
        print("SKIP: needs strace")
        sys.exit(77)
    rng = random.Random(2626)
    tmp = tempfile.mkdtemp(prefix="tadoc-fs-compact-kill-")
    try:
        src = os.path.join(tmp, "src")
        make_corpus(src, rng, nfiles=6)
        archive = os.path.join(tmp, "k.tadoc")
        journal = archive + ".journal"
        compress(src, archive)
        mnt = os.path.join(tmp, "mnt")
        mount(archive, mnt, "rw")
        names = sorted(n for n in os.listdir(mnt) if os.path.isfile(os.path.join(mnt, n)))
        with open(os.path.join(mnt, names[0]), "ab") as f:
            f.write(b"appended before the compaction\n")
        with open(os.path.join(mnt, "new.txt"), "wb") as f:
            f.write(b"a file made on the mount\n")
        os.setxattr(os.path.join(mnt, names[1]), "user.tadoc.insert.3", b"INSERTED ")
        want = snapshot(mnt)
        unmount(mnt)
        pristine = {p: open(p, "rb").read() for p in (archive, journal)}

        def restore():
            for g in temporaries(archive):
                os.unlink(g)
            for p, data in pristine.items():
                with open(p, "wb") as f:
                    f.write(data)

        def tree_is_right(what):
            mount(archive, mnt)
            d = diff_trees(want, snapshot(mnt))
            unmount(mnt)
            return check(not d, "%s: the tree is not the edited one: %s" % (what, "; ".join(d)))

        # LeakSanitizer cannot run under ptrace (ASan builds): leaks are
        # checked by the runs without strace
        env = dict(os.environ, ASAN_OPTIONS=(os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":"))
        kills = 0
        for call in ("fsync", "fdatasync", "rename"):
            for n in range(1, 20):
                restore()
                r = run(["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=" + call,
                         "-e", "inject=%s:signal=KILL:when=%d" % (call, n), TADOC, "compact", archive], env=env)
                if r.returncode == 0:
                    break      # fewer than n such calls: this one ran to the end
                what = "killed at %s #%d" % (call, n)
                kills += 1
                check(r.returncode in (-9, 137), "%s: exit %d (%r)" % (what, r.returncode, r.stderr[-300:]))
                left = temporaries(archive)
                tree_is_right(what)
                r = run([TADOC, "compact", archive])
                err = r.stderr.decode(errors="replace")
                check(r.returncode == 0, "%s: the next compact: exit %d: %s" % (what, r.returncode, err))
                check(not temporaries(archive), "%s: temporaries left after the next compact: %s"
                      % (what, temporaries(archive)))
                for t in left:
                    check(os.path.basename(t) in err, "%s: the next compact names the removed %s: %r" % (what, t, err))
                log("  %s: %d temporaries left, removed by the next compact" % (what, len(left)))
                tree_is_right(what + ", then compacted")
        check(kills >= 4, "only %d kill points found (fsync, fdatasync, rename)" % kills)

        log("== a live process's temporary is kept; a dead one's is removed")
        restore()
        live = subprocess.Popen(["sleep", "60"])
        dead = subprocess.Popen(["true"])
        dead.wait()
        keep = "%s.compact.tmp.%d" % (archive, live.pid)
        gone = "%s.compact.tmp.%d" % (archive, dead.pid)
        for p in (keep, gone):
            with open(p, "wb") as f:
                f.write(b"partial")
        r = run([TADOC, "compact", archive])
        err = r.stderr.decode(errors="replace")
        check(r.returncode == 0, "compact with planted temporaries: %s" % err)
        check(os.path.exists(keep), "the temporary of running process %d was removed" % live.pid)
        check(not os.path.exists(gone) and os.path.basename(gone) in err,
              "the temporary of dead process %d is removed and named: %r" % (dead.pid, err))
        live.kill()
        live.wait()
        os.unlink(keep)
        log("  " + err.strip().splitlines()[0])
        tree_is_right("after the planted temporaries")
    finally:
        teardown(tmp)
    finish()


if __name__ == "__main__":
    main()
