#!/usr/bin/env python3
"""Journal damage through the mount and the CLI (issue 4): a flipped byte
in a record, a record cut in half, garbage appended, a damaged header, a
journal of another archive. The documented recovery (td_journal.h):
replay stops at the first bad record, everything before it is kept, the
rest is saved in ARCHIVE.journal.damaged-OFFSET and cut off, and one
message names the journal, the byte offset and what was dropped. A bad
header or a foreign journal refuses the mount and leaves the file as it
was.

The edits are made one journal record at a time (small writes, inserts,
deletes, truncates, empty creates, renames), with the tree recorded after
each, so the state expected after damage in record k is the tree after
record k-1 exactly.

Environment: TADOC, TADOCFS. Exit 77 without /dev/fuse.
"""
import glob
import os
import random
import shutil
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fs_write_lib import (teardown, TADOC, check, compress, daemon_stderr, diff_trees, finish, log,  # noqa: E402
                          mount, random_text, run, skip_without_fuse, snapshot, unmount)

HDR = 64


def records(journal):
    """[(offset, size)] of the records of a journal file."""
    with open(journal, "rb") as f:
        data = f.read()
    out = []
    pos = HDR
    while pos + 8 <= len(data):
        size = struct.unpack_from("<I", data, pos)[0]
        if size < 96 or pos + size > len(data):
            break
        out.append((pos, size))
        pos += size
    return out


def one_record_edits(rng, mnt, n):
    """n changes of one journal record each; returns the snapshots before
    the first and after each."""
    snaps = [snapshot(mnt)]
    k = 0
    while len(snaps) <= n:
        files = sorted(f for f, v in snaps[-1].items() if v[0] == "f")
        f = rng.choice(files)
        p = os.path.join(mnt, f)
        size = os.path.getsize(p)
        kind = rng.choice(["write", "append", "insert", "delete", "truncate", "create", "rename"])
        if kind == "write":
            fd = os.open(p, os.O_WRONLY)
            os.pwrite(fd, random_text(rng, 300)[:300], rng.randint(0, size))
            os.close(fd)
        elif kind == "append":
            with open(p, "ab") as fh:
                fh.write(random_text(rng, 200)[:200])
        elif kind == "insert":
            os.setxattr(p, "user.tadoc.insert.%d" % rng.randint(0, size), random_text(rng, 100))
        elif kind == "delete" and size > 0:
            os.setxattr(p, "user.tadoc.delete.%d" % rng.randrange(size), b"17")
        elif kind == "truncate":
            os.truncate(p, rng.randint(0, size + 10))
        elif kind == "create":
            k += 1
            fd = os.open(os.path.join(mnt, "new%d" % k), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            os.close(fd)
        else:
            k += 1
            os.rename(p, os.path.join(mnt, "renamed%d" % k))
        snaps.append(snapshot(mnt))
    return snaps


def check_replace(tmp):
    """tadoc compress -o over an archive that has a journal, and tadoc add
    right after an unmount."""
    src, src2 = os.path.join(tmp, "r1"), os.path.join(tmp, "r2")
    for d, text in ((src, b"hi\n"), (src2, b"other\n")):
        os.makedirs(d)
        with open(os.path.join(d, "f"), "wb") as f:
            f.write(text)
    arc = os.path.join(tmp, "r.tadoc")
    mnt = os.path.join(tmp, "mnt-r")

    def recompress(s):
        return run([TADOC, "compress", "-q", "-o", arc, s])

    def write_rw(data):
        mount(arc, mnt, "rw")
        with open(os.path.join(mnt, "f"), "wb") as f:
            f.write(data)
        unmount(mnt)

    def read_ro():
        mount(arc, mnt)
        with open(os.path.join(mnt, "f"), "rb") as f:
            data = f.read()
        unmount(mnt)
        return data

    log("== compress -o over an archive whose journal was compacted: the new one mounts")
    compress(src, arc)
    write_rw(b"EDITED\n")
    check(run([TADOC, "compact", arc]).returncode == 0, "compact")
    r = recompress(src2)
    check(r.returncode == 0, "compress over a compacted archive: %r" % r.stderr)
    check(read_ro() == b"other\n", "the new archive mounts and reads its own file")

    log("== compress -o over an archive with edits not folded in: refused, nothing lost")
    write_rw(b"EDITED2\n")
    before = open(arc, "rb").read()
    r = recompress(src)
    err = r.stderr.decode(errors="replace")
    check(r.returncode == 1 and "tadoc compact" in err and err.count("\n") == 1,
          "compress over pending edits: exit %d, %r" % (r.returncode, err))
    check(open(arc, "rb").read() == before, "the archive is left as it was")
    check(read_ro() == b"EDITED2\n", "the edits are still there")

    log("== compress -o over an archive mounted writable: refused")
    mount(arc, mnt, "rw")
    r = recompress(src)
    check(r.returncode == 1 and b"in use" in r.stderr, "compress over a writable mount: %r" % r.stderr)
    unmount(mnt)
    check(open(arc, "rb").read() == before, "the archive is left as it was")

    log("== tadoc add right after fusermount3 -u waits for the daemon's lock")
    check(run([TADOC, "compact", arc]).returncode == 0, "compact")
    more = os.path.join(tmp, "r3")
    os.makedirs(more)
    with open(os.path.join(more, "g"), "wb") as f:
        f.write(b"more\n")
    failed = []
    for i in range(5):
        mount(arc, mnt)
        with open(os.path.join(mnt, "f"), "rb") as f:
            f.read()
        run(["fusermount3", "-u", mnt])   # not unmount(): no wait for the daemon
        r = run([TADOC, "add", "--to", "t%d" % i, arc, more])
        if r.returncode != 0:
            failed.append(r.stderr)
        unmount(mnt)   # reaps the daemon
    check(not failed, "tadoc add right after an unmount failed %d of 5 times: %r" % (len(failed), failed[:1]))


def main():
    skip_without_fuse()
    rng = random.Random(int(os.environ.get("FS_JOURNAL_SEED", "4242")))
    tmp = tempfile.mkdtemp(prefix="tadoc-fs-journal-")
    try:
        src = os.path.join(tmp, "src")
        os.makedirs(src)
        for i in range(3):
            with open(os.path.join(src, "t%d.txt" % i), "wb") as f:
                f.write(random_text(rng, 3000))
        archive = os.path.join(tmp, "j.tadoc")
        journal = archive + ".journal"
        compress(src, archive)
        mnt = os.path.join(tmp, "mnt")
        N = 12
        mount(archive, mnt, "rw")
        snaps = one_record_edits(rng, mnt, N)
        unmount(mnt)
        recs = records(journal)
        if not check(len(recs) == N, "one record per change: %d records for %d changes" % (len(recs), N)):
            return
        with open(journal, "rb") as f:
            pristine = f.read()
        # the CLI answers from the archive as built, and says so while edits wait
        r = run([TADOC, "count", archive, "x"])
        check(r.returncode == 0 and ("note: %s holds edits not yet compacted" % journal) in r.stderr.decode(),
              "tadoc count with a journal of edits: exit %d, stderr %r" % (r.returncode, r.stderr))

        def reset(data):
            for g in glob.glob(journal + ".damaged-*"):
                os.unlink(g)
            with open(journal, "wb") as f:
                f.write(data)

        def expect_state(k, what, cli=False):
            """Mount (or compact, then mount) and compare with snaps[k]."""
            if cli:
                r = run([TADOC, "compact", archive])
                msg = r.stderr.decode(errors="replace")
                check(r.returncode == 0, "%s: tadoc compact exit %d: %s" % (what, r.returncode, msg))
                mount(archive, mnt)
            else:
                mount(archive, mnt, "rw")
                msg = daemon_stderr(mnt)
            d = diff_trees(snaps[k], snapshot(mnt))
            check(not d, "%s: the tree is not the one after record %d: %s" % (what, k, "; ".join(d)))
            unmount(mnt)
            return msg

        def expect_report(msg, off, dropped, what):
            log("  %s: %s" % (what, msg.strip()))
            check(journal in msg and "byte offset %d" % off in msg and "%d bytes" % dropped in msg,
                  "%s: the message names the journal, offset %d and %d dropped bytes: %r" % (what, off, dropped, msg))
            saved = journal + ".damaged-%d" % off
            if check(os.path.exists(saved), "%s: the damaged tail is saved in %s" % (what, saved)):
                with open(saved, "rb") as f:
                    check(len(f.read()) == dropped, "%s: the saved tail has the dropped bytes" % what)

        log("== a flipped byte in record k: records before k are kept")
        for k in (1, N // 2, N):
            off, size = recs[k - 1]
            bad = bytearray(pristine)
            bad[off + rng.randrange(8, size)] ^= 0x5A
            reset(bytes(bad))
            msg = expect_state(k - 1, "flipped byte in record %d" % k)
            expect_report(msg, off, len(pristine) - off, "flipped byte in record %d" % k)
            check(os.path.getsize(journal) == off, "the journal is cut at the damage")
            # the next mount is clean and keeps the same state
            msg = expect_state(k - 1, "remount after the repair")
            check("byte offset" not in msg, "a repaired journal mounts without a message: %r" % msg)

        log("== the last record cut in half (a torn write)")
        off, size = recs[-1]
        reset(pristine[:off + size // 2])
        msg = expect_state(N - 1, "torn last record")
        expect_report(msg, off, size // 2, "torn last record")

        log("== damaged twice at the same offset: both saved tails are kept (issue 26)")
        off, size = recs[-1]
        reset(pristine[:off + size // 2])
        first_tail = pristine[off:off + size // 2]
        expect_state(N - 1, "torn last record, first time")
        # the same damage again, with different bytes, at the same offset
        second_tail = pristine[off:off + size // 3] + b"\x01\x02\x03"
        with open(journal, "ab") as f:
            f.write(second_tail)
        msg = expect_state(N - 1, "torn last record, second time")
        log("  second damage: %s" % msg.strip())
        first, second = journal + ".damaged-%d" % off, journal + ".damaged-%d.1" % off
        check(os.path.exists(first) and open(first, "rb").read() == first_tail,
              "the first saved tail %s is kept as it was" % first)
        check(os.path.exists(second) and open(second, "rb").read() == second_tail,
              "the second tail is saved in %s" % second)
        check(second in msg, "the message names the new file %s: %r" % (second, msg))

        log("== garbage appended after the last record")
        junk = bytes(rng.randrange(256) for _ in range(300))
        reset(pristine + junk)
        msg = expect_state(N, "garbage appended")
        expect_report(msg, len(pristine), len(junk), "garbage appended")

        log("== the same damage through tadoc compact")
        off, size = recs[N // 2]
        bad = bytearray(pristine)
        bad[off + size - 3] ^= 1  # inside the record's checksum
        reset(bytes(bad))
        arch_copy = archive + ".orig"
        shutil.copyfile(archive, arch_copy)
        msg = expect_state(N // 2, "flipped byte, then tadoc compact", cli=True)
        expect_report(msg, off, len(pristine) - off, "tadoc compact")
        check(os.path.getsize(journal) == HDR, "compaction leaves an empty journal")
        r = run([TADOC, "count", archive, "x"])
        check(r.returncode == 0 and b"note:" not in r.stderr, "tadoc count after compaction: %r" % r.stderr)
        shutil.copyfile(arch_copy, archive)
        os.unlink(arch_copy)

        log("== a damaged header refuses the mount and leaves the journal alone")
        bad = bytearray(pristine)
        bad[3] ^= 0xFF
        reset(bytes(bad))
        rc, err = mount(archive, mnt, "rw", expect_fail=True)
        check(rc == 1 and journal in err and "header" in err, "bad header: exit %s, %r" % (rc, err))
        with open(journal, "rb") as f:
            check(f.read() == bytes(bad), "the journal with a bad header is left untouched")
        r = run([TADOC, "compact", archive])
        check(r.returncode == 1 and b"header" in r.stderr, "tadoc compact with a bad header: %r" % r.stderr)

        log("== a journal of another archive refuses the mount")
        other_src = os.path.join(tmp, "other")
        os.makedirs(other_src)
        with open(os.path.join(other_src, "o.txt"), "wb") as f:
            f.write(b"another corpus\n")
        other = os.path.join(tmp, "other.tadoc")
        compress(other_src, other)
        mount(other, mnt, "rw")
        with open(os.path.join(mnt, "o.txt"), "ab") as f:
            f.write(b"x")
        unmount(mnt)
        reset(open(other + ".journal", "rb").read())
        rc, err = mount(archive, mnt, "rw", expect_fail=True)
        check(rc == 1 and "another archive" in err, "foreign journal: exit %s, %r" % (rc, err))
        log("  %s" % err.strip())

        log("== the intact journal still gives the full state")
        reset(pristine)
        expect_state(N, "intact journal")
        check_replace(tmp)
    finally:
        teardown(tmp)
    finish()


if __name__ == "__main__":
    main()
