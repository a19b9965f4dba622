#!/usr/bin/env python3
"""Writable mounts (issue 4), model-based: random operations on a `-o rw`
mount and on a shadow directory, compared after every batch; then
unmount/remount, a read-only mount of the edited archive, `tadoc compact`
and remount, each compared again. Also: read-your-writes of xattrs
(words, count, search against a Python \\w oracle) and of the page cache
after insert/delete, POSIX corner cases (gaps, O_APPEND, O_TRUNC,
RENAME_NOREPLACE, rename over files, unlinked-but-open files, hard links),
the exclusive lock, and real tools and editors: vim (writes and renames),
vim -es, nano, sed -i, echo >>, truncate -s, dd conv=notrunc seek=, cp over
a file, mv, rm, patch.

Environment: TADOC, TADOCFS (binaries); FS_WRITE_OPS (default 3000),
FS_WRITE_SEED. Exit 77 without /dev/fuse.
"""
import ctypes
import errno
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fs_write_lib import (TADOC, check, compare, compress, finish, log, make_corpus, mount,  # noqa: E402
                          random_text, run, skip_without_fuse, snapshot, unmount, words_of, diff_trees)

OPS = int(os.environ.get("FS_WRITE_OPS", "3000"))
SEED = int(os.environ.get("FS_WRITE_SEED", str(random.randrange(1 << 30))))
BATCH = 100

libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_NOREPLACE = 1


def renameat2(a, b, flags):
    r = libc.renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), flags)
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


# ---------------------------------------------------------------- the model

class Model:
    """Applies one random operation to the mount and the shadow."""

    def __init__(self, rng, mnt, shadow):
        self.rng, self.mnt, self.shadow = rng, mnt, shadow
        self.stats = {}

    def entries(self):
        files, dirs = [], [""]
        for root, ds, fs in os.walk(self.shadow):
            rel = os.path.relpath(root, self.shadow)
            rel = "" if rel == "." else rel
            for d in ds:
                p = os.path.join(rel, d)
                if os.path.islink(os.path.join(self.shadow, p)):
                    continue
                dirs.append(p)
            for f in fs:
                p = os.path.join(rel, f)
                if os.path.isfile(os.path.join(self.shadow, p)) and not os.path.islink(os.path.join(self.shadow, p)):
                    files.append(p)
        return sorted(files), sorted(dirs)

    def both(self, rel):
        return os.path.join(self.mnt, rel), os.path.join(self.shadow, rel)

    counter = 0  # shared by every Model of the run: names never repeat

    def new_name(self, d):
        Model.counter += 1
        return os.path.join(d, "n%05d%s" % (Model.counter, self.rng.choice(["", ".txt", " sp", "é"])))

    def step(self):
        rng = self.rng
        files, dirs = self.entries()
        ops = ["write", "overwrite", "append", "truncate", "insert", "delete", "create", "rename",
               "unlink", "mkdir", "rmdir", "chmod", "symlink", "renamedir"]
        weights = [14, 14, 12, 6, 12, 10, 6, 6, 4, 3, 2, 2, 1, 1]
        if not files:
            op = "create"
        else:
            op = rng.choices(ops, weights)[0]
        self.stats[op] = self.stats.get(op, 0) + 1
        getattr(self, "op_" + op)(files, dirs)

    def sizes(self, rel):
        return os.path.getsize(os.path.join(self.shadow, rel))

    def op_write(self, files, dirs):
        rel = self.rng.choice(files)
        size = self.sizes(rel)
        off = self.rng.randint(0, size + 200)
        data = random_text(self.rng, self.rng.choice([1, 10, 100, 3000, 70000]))
        for p in self.both(rel):
            fd = os.open(p, os.O_WRONLY)
            try:
                check(os.pwrite(fd, data, off) == len(data), "pwrite %s" % p)
            finally:
                os.close(fd)

    def op_overwrite(self, files, dirs):
        rel = self.rng.choice(files)
        size = self.sizes(rel)
        if size == 0:
            return self.op_append(files, dirs)
        off = self.rng.randrange(size)
        n = self.rng.randint(1, min(size - off, 500))
        data = random_text(self.rng, n)[:n]
        for p in self.both(rel):
            with open(p, "r+b") as f:
                f.seek(off)
                f.write(data)

    def op_append(self, files, dirs):
        rel = self.rng.choice(files)
        data = random_text(self.rng, self.rng.choice([1, 50, 1000, 10000]))
        for p in self.both(rel):
            with open(p, "ab") as f:
                f.write(data)

    def op_truncate(self, files, dirs):
        rel = self.rng.choice(files)
        size = self.sizes(rel)
        n = self.rng.randint(0, size + 300) if self.rng.random() < 0.8 else self.rng.randint(0, max(size // 2, 1))
        for p in self.both(rel):
            os.truncate(p, n)

    def op_insert(self, files, dirs):
        rel = self.rng.choice(files)
        m, s = self.both(rel)
        size = self.sizes(rel)
        off = self.rng.randint(0, size)
        data = random_text(self.rng, self.rng.choice([1, 20, 500, 4000]))
        # Read first so the kernel caches pages that the insert then moves.
        with open(m, "rb") as f:
            f.read()
        os.setxattr(m, "user.tadoc.insert.%d" % off, data)
        with open(s, "rb") as f:
            old = f.read()
        with open(s, "wb") as f:
            f.write(old[:off] + data + old[off:])
        if self.rng.random() < 0.2:
            with open(m, "rb") as f:
                got = f.read()
            check(got == old[:off] + data + old[off:], "read after insert into %s at %d" % (rel, off))

    def op_delete(self, files, dirs):
        rel = self.rng.choice(files)
        m, s = self.both(rel)
        size = self.sizes(rel)
        off = self.rng.randint(0, size)
        n = self.rng.randint(1, max(1, min(size - off + 5, 3000)))
        with open(m, "rb") as f:
            f.read()
        os.setxattr(m, "user.tadoc.delete.%d" % off, str(n).encode())
        with open(s, "rb") as f:
            old = f.read()
        with open(s, "wb") as f:
            f.write(old[:off] + old[off + n:])

    def op_create(self, files, dirs):
        rel = self.new_name(self.rng.choice(dirs))
        data = random_text(self.rng, self.rng.choice([0, 10, 1000])) if self.rng.random() < 0.8 else b""
        for p in self.both(rel):
            fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            os.write(fd, data)
            os.close(fd)

    def op_rename(self, files, dirs):
        src = self.rng.choice(files)
        if self.rng.random() < 0.4 and len(files) > 1:
            dst = self.rng.choice([f for f in files if f != src])  # over an existing file
        else:
            dst = self.new_name(self.rng.choice(dirs))
        for a, b in zip(self.both(src), self.both(dst)):
            os.rename(a, b)

    def op_renamedir(self, files, dirs):
        cand = [d for d in dirs if d]
        if not cand:
            return
        src = self.rng.choice(cand)
        parents = [d for d in dirs if d != src and not d.startswith(src + "/")]
        dst = self.new_name(self.rng.choice(parents))
        for a, b in zip(self.both(src), self.both(dst)):
            os.rename(a, b)

    def op_unlink(self, files, dirs):
        if len(files) < 4:
            return
        rel = self.rng.choice(files)
        for p in self.both(rel):
            os.unlink(p)

    def op_mkdir(self, files, dirs):
        rel = self.new_name(self.rng.choice(dirs))
        for p in self.both(rel):
            os.mkdir(p, 0o755)

    def op_rmdir(self, files, dirs):
        empty = [d for d in dirs if d and not os.listdir(os.path.join(self.shadow, d))]
        if not empty:
            return
        rel = self.rng.choice(empty)
        for p in self.both(rel):
            os.rmdir(p)

    def op_chmod(self, files, dirs):
        rel = self.rng.choice(files)
        mode = self.rng.choice([0o600, 0o644, 0o640, 0o755])
        for p in self.both(rel):
            os.chmod(p, mode)

    def op_symlink(self, files, dirs):
        rel = self.new_name(self.rng.choice(dirs))
        target = self.rng.choice(files + ["nowhere", "../x"])
        for p in self.both(rel):
            os.symlink(target, p)


def check_xattrs(rng, mnt, shadow, nfiles=4):
    """user.tadoc.words/count/search on a few files and the root equal the
    Python oracle over the shadow's current bytes."""
    snap = snapshot(shadow)
    files = sorted(k for k, v in snap.items() if v[0] == "f")
    total = 0
    allw = {}
    for rel in files:
        ws = words_of(snap[rel][2])
        total += sum(1 for w, _ in ws if len(w) <= 255)
        for w, off in ws:
            allw.setdefault(w, []).append((rel, off))
    for rel in rng.sample(files, min(nfiles, len(files))):
        data = snap[rel][2]
        p = os.path.join(mnt, rel)
        ws = words_of(data)
        got = int(os.getxattr(p, "user.tadoc.words"))
        check(got == len(ws), "%s: user.tadoc.words %d, oracle %d" % (rel, got, len(ws)))
        word = rng.choice([w for w, _ in ws] or [b"whale"])
        exp = [off for w, off in ws if w == word]
        got = int(os.getxattr(p, b"user.tadoc.count." + word))
        check(got == len(exp), "%s: count.%s %d, oracle %d" % (rel, word, got, len(exp)))
        val = os.getxattr(p, b"user.tadoc.search." + word)
        if b"#more" not in val:
            offs = [int(x) for x in val.split()]
            check(offs == exp, "%s: search.%s differs from the oracle" % (rel, word))
    got = int(os.getxattr(mnt, "user.tadoc.words"))
    check(got == total, "root: user.tadoc.words %d, oracle %d" % (got, total))
    for word in (b"whale", b"Ahab"):
        exp = len(allw.get(word, []))
        got = int(os.getxattr(mnt, b"user.tadoc.count." + word))
        check(got == exp, "root: count.%s %d, oracle %d" % (word, got, exp))


def run_model(rng, mnt, shadow, nops):
    m = Model(rng, mnt, shadow)
    for i in range(nops):
        try:
            m.step()
        except OSError as e:
            check(False, "operation %d failed: %s" % (i, e))
            raise
        if (i + 1) % BATCH == 0 or i + 1 == nops:
            if not compare(shadow, mnt, "after %d operations" % (i + 1)):
                return False
            if (i + 1) % (BATCH * 5) == 0:
                check_xattrs(rng, mnt, shadow)
    log("  operations: " + ", ".join("%s %d" % kv for kv in sorted(m.stats.items())))
    return True


# ---------------------------------------------------------------- corner cases

def expect_errno(fn, code, what):
    try:
        fn()
        check(False, "%s succeeded, expected %s" % (what, errno.errorcode[code]))
    except OSError as e:
        check(e.errno == code, "%s: %s, expected %s" % (what, e, errno.errorcode[code]))


def check_posix(mnt, shadow):
    log("== POSIX corner cases")
    p = os.path.join(mnt, "posix.txt")
    with open(p, "wb") as f:
        f.write(b"hello")
    fd = os.open(p, os.O_WRONLY)
    os.pwrite(fd, b"X", 10)  # gap reads as zeros
    os.close(fd)
    check(open(p, "rb").read() == b"hello\0\0\0\0\0X", "a write past the end leaves zeros")
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"AP")
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, b"PE")  # O_APPEND ignores the position
    os.close(fd)
    check(open(p, "rb").read() == b"hello\0\0\0\0\0XAPPE", "O_APPEND appends")
    os.truncate(p, 3)
    check(open(p, "rb").read() == b"hel", "truncate shrinks")
    os.truncate(p, 6)
    check(open(p, "rb").read() == b"hel\0\0\0", "truncate extends with zeros")
    expect_errno(lambda: os.truncate(p, (1 << 62) + 1), errno.EFBIG, "truncate past 2^62 bytes")
    fd = os.open(p, os.O_WRONLY)
    expect_errno(lambda: os.pwrite(fd, b"x", 1 << 62), errno.EFBIG, "pwrite ending past 2^62 bytes")
    os.close(fd)
    check(open(p, "rb").read() == b"hel\0\0\0", "a refused size changes nothing")
    with open(p, "wb") as f:  # O_TRUNC
        f.write(b"new")
    check(open(p, "rb").read() == b"new", "O_TRUNC")
    # Read-your-writes across descriptors and processes.
    r = os.open(p, os.O_RDONLY)
    with open(p, "r+b") as f:
        f.write(b"N")
    check(os.pread(r, 10, 0) == b"New", "another descriptor sees the write")
    os.setxattr(p, "user.tadoc.insert.1", b"12345")
    check(os.pread(r, 20, 0) == b"N12345ew", "another descriptor sees the insert")
    check(run(["cat", p]).stdout == b"N12345ew", "another process sees the insert")
    check(os.stat(p).st_size == 8, "size after insert")
    os.setxattr(p, "user.tadoc.delete.0", b"3")
    check(os.pread(r, 20, 0) == b"345ew", "another descriptor sees the delete")
    os.close(r)
    expect_errno(lambda: os.setxattr(p, "user.tadoc.insert.99", b"x"), errno.EINVAL, "insert past the end")
    expect_errno(lambda: os.setxattr(p, "user.tadoc.delete.1", b"x1"), errno.EINVAL, "delete with a bad length")
    expect_errno(lambda: os.setxattr(p, "user.tadoc.insert.z", b"x"), errno.EINVAL, "insert at a bad offset")
    expect_errno(lambda: os.setxattr(mnt, "user.tadoc.insert.0", b"x"), errno.EISDIR, "insert into a directory")
    expect_errno(lambda: os.setxattr(p, "user.other", b"x"), errno.EOPNOTSUPP, "other xattr names")
    # tadoc insert/delete: the CLI on the mounted path, text longer than one setxattr.
    big = random_text(random.Random(7), 150000)
    with open(os.path.join(mnt, "big.txt"), "wb") as f:
        f.write(b"<>")
    r = run([TADOC, "insert", os.path.join(mnt, "big.txt"), "1", "-"], input=big)
    check(r.returncode == 0, "tadoc insert from stdin: %s" % r.stderr)
    r = run([TADOC, "delete", os.path.join(mnt, "big.txt"), "0", "1"])
    check(r.returncode == 0, "tadoc delete: %s" % r.stderr)
    r = run([TADOC, "insert", os.path.join(mnt, "big.txt"), "0", "[["])
    check(open(os.path.join(mnt, "big.txt"), "rb").read() == b"[[" + big + b">", "tadoc insert/delete result")
    r = run([TADOC, "insert", os.path.join(mnt, "big.txt"), "999999999", "x"])
    check(r.returncode == 1 and b"past the end" in r.stderr, "tadoc insert past the end: %s" % r.stderr)
    r = run([TADOC, "insert", os.path.join(shadow, "..", "nowhere-file"), "0", "x"])
    check(r.returncode == 1, "tadoc insert on a missing file fails")
    os.unlink(os.path.join(mnt, "big.txt"))
    # a shared writable mapping, written back through an O_APPEND descriptor
    import mmap
    q = os.path.join(mnt, "mapped.bin")
    with open(q, "wb") as f:
        f.write(b"a" * 10000)
    fd = os.open(q, os.O_RDWR | os.O_APPEND)
    mm = mmap.mmap(fd, 10000)
    mm[5:10] = b"HELLO"
    mm.flush()
    mm.close()
    os.close(fd)
    check(open(q, "rb").read() == b"aaaaaHELLO" + b"a" * 9990, "msync of a shared mapping writes in place")
    os.unlink(q)
    # rename corner cases
    a, b = os.path.join(mnt, "ra"), os.path.join(mnt, "rb")
    for q, t in ((a, b"A"), (b, b"B")):
        with open(q, "wb") as f:
            f.write(t)
    expect_errno(lambda: renameat2(a, b, RENAME_NOREPLACE), errno.EEXIST, "RENAME_NOREPLACE onto a file")
    renameat2(a, os.path.join(mnt, "rc"), RENAME_NOREPLACE)
    fd = os.open(b, os.O_RDONLY)
    os.rename(os.path.join(mnt, "rc"), b)  # over an open file
    check(os.pread(fd, 10, 0) == b"B", "a replaced file stays readable through an open descriptor")
    check(os.fstat(fd).st_nlink == 0, "a replaced open file has nlink 0")
    os.close(fd)
    check(open(b, "rb").read() == b"A", "rename over an existing file")
    os.mkdir(os.path.join(mnt, "rd"))
    expect_errno(lambda: os.rename(os.path.join(mnt, "rd"), os.path.join(mnt, "rd", "in")), errno.EINVAL,
                 "rename a directory into itself")
    expect_errno(lambda: os.rename(b, os.path.join(mnt, "rd")), errno.EISDIR, "rename a file over a directory")
    with open(os.path.join(mnt, "rd", "k"), "wb"):
        pass
    expect_errno(lambda: os.rmdir(os.path.join(mnt, "rd")), errno.ENOTEMPTY, "rmdir of a non-empty directory")
    expect_errno(lambda: os.unlink(os.path.join(mnt, "rd")), errno.EISDIR, "unlink of a directory")
    expect_errno(lambda: os.link(b, os.path.join(mnt, "hard")), errno.EPERM, "hard link")
    expect_errno(lambda: os.mkfifo(os.path.join(mnt, "fifo")), errno.EPERM, "mkfifo")
    expect_errno(lambda: os.mkdir(os.path.join(mnt, "rd")), errno.EEXIST, "mkdir over an existing name")
    # chmod, utimens
    os.chmod(b, 0o640)
    check(stat.S_IMODE(os.stat(b).st_mode) == 0o640, "chmod")
    os.utime(b, ns=(1_000_000_000_123_456_789, 1_500_000_000_987_654_321))
    check(os.stat(b).st_mtime_ns == 1_500_000_000_987_654_321, "utimens sets the mtime to the nanosecond")
    os.symlink("ra-target", os.path.join(mnt, "sl"))
    check(os.readlink(os.path.join(mnt, "sl")) == "ra-target", "symlink")
    # a directory made in a set-group-ID directory is set-group-ID too (a file is not)
    sg = os.path.join(mnt, "sgid")
    os.mkdir(sg)
    os.chmod(sg, 0o2755)
    os.mkdir(os.path.join(sg, "sub"), 0o700)
    open(os.path.join(sg, "f"), "wb").close()
    check(stat.S_IMODE(os.stat(os.path.join(sg, "sub")).st_mode) == 0o2700,
          "mkdir in a set-group-ID directory: mode %o" % stat.S_IMODE(os.stat(os.path.join(sg, "sub")).st_mode))
    check(not os.stat(os.path.join(sg, "f")).st_mode & stat.S_ISGID, "a file made there is not set-group-ID")
    os.unlink(os.path.join(sg, "f"))
    os.rmdir(os.path.join(sg, "sub"))
    os.rmdir(sg)
    # the same on the shadow, so the trees stay equal
    for q in ("posix.txt", "rb", "rd", "sl"):
        src = os.path.join(mnt, q)
        dst = os.path.join(shadow, q)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        elif os.path.isdir(src):
            shutil.copytree(src, dst)
        else:
            shutil.copyfile(src, dst)
            os.chmod(dst, stat.S_IMODE(os.stat(src).st_mode))
    compare(shadow, mnt, "after the POSIX corner cases")


def check_concurrency(mnt, shadow):
    """Threads writing their own files, appending records to one shared
    O_APPEND file, inserting, and reading all the while; then the same end
    state on the shadow (the per-file operations are deterministic)."""
    import threading
    log("== concurrent writers and readers")
    nthreads, nops = 6, 150
    errors = []

    def writer(k):
        try:
            rng = random.Random(k)
            p = os.path.join(mnt, "conc%d" % k)
            model = b""
            with open(p, "wb"):
                pass
            for i in range(nops):
                r = rng.random()
                if r < 0.5:
                    data = random_text(rng, rng.randint(1, 5000))
                    off = rng.randint(0, len(model))
                    fd = os.open(p, os.O_WRONLY)
                    os.pwrite(fd, data, off)
                    os.close(fd)
                    model = model[:off] + data + model[off + len(data):]
                elif r < 0.7 and model:
                    off = rng.randint(0, len(model))
                    data = random_text(rng, rng.randint(1, 300))
                    os.setxattr(p, "user.tadoc.insert.%d" % off, data)
                    model = model[:off] + data + model[off:]
                else:
                    rec = b"<%d:%04d>" % (k, i) + b"." * 20 + b"\n"
                    fd = os.open(os.path.join(mnt, "shared.log"), os.O_WRONLY | os.O_APPEND)
                    os.write(fd, rec)
                    os.close(fd)
                with open(p, "rb") as f:
                    if f.read() != model:
                        errors.append("thread %d: read-your-writes broken at op %d" % (k, i))
                        return
            with open(os.path.join(shadow, "conc%d" % k), "wb") as f:
                f.write(model)
        except OSError as e:
            errors.append("thread %d: %s" % (k, e))

    stop = threading.Event()

    def reader():
        while not stop.is_set():
            for n in os.listdir(mnt):
                p = os.path.join(mnt, n)
                if os.path.isfile(p):
                    try:
                        with open(p, "rb") as f:
                            f.read()
                        os.getxattr(p, "user.tadoc.words")
                    except FileNotFoundError:
                        pass
    with open(os.path.join(mnt, "shared.log"), "wb"):
        pass
    ts = [threading.Thread(target=writer, args=(k,)) for k in range(nthreads)]
    rs = [threading.Thread(target=reader) for _ in range(2)]
    for t in ts + rs:
        t.start()
    for t in ts:
        t.join()
    stop.set()
    for t in rs:
        t.join()
    for e in errors:
        check(False, e)
    data = open(os.path.join(mnt, "shared.log"), "rb").read()
    recs = data.split(b"\n")[:-1]
    check(all(len(r) == 28 and r.startswith(b"<") for r in recs) and len(set(recs)) == len(recs),
          "O_APPEND records from several threads stay whole and distinct")
    with open(os.path.join(shadow, "shared.log"), "wb") as f:
        f.write(data)
    # an unlinked file stays writable and readable through its descriptor
    p = os.path.join(mnt, "gone")
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    os.unlink(p)
    os.write(fd, b"still here")
    os.ftruncate(fd, 5)
    check(os.pread(fd, 20, 0) == b"still", "an unlinked open file keeps working")
    os.close(fd)
    compare(shadow, mnt, "after concurrent writers")


def check_tools(mnt, shadow, tmp):
    """Real tools and editors do the same on the mount and on the shadow."""
    log("== tools and editors")
    env = dict(os.environ, HOME=tmp, LC_ALL="C.UTF-8", TERM="xterm")
    text = b"".join(b"line %d: the whale and the sea\n" % i for i in range(200))
    for root in (mnt, shadow):
        with open(os.path.join(root, "tool.txt"), "wb") as f:
            f.write(text)

    def both(cmd):
        """Run cmd (a list with {} for the root) on both trees."""
        res = []
        for root in (mnt, shadow):
            c = [x.replace("{}", root) for x in cmd]
            r = run(c, env=env, cwd=root, stdin=subprocess.DEVNULL)
            res.append(r.returncode)
            check(r.returncode == 0, "%s on %s: %d %s" % (" ".join(cmd), root, r.returncode,
                                                         r.stderr.decode(errors="replace")[-300:]))
        return res

    both(["sed", "-i", "s/whale/WHALE/g; 5d; 10a inserted by sed", "{}/tool.txt"])
    both(["sh", "-c", "echo appended >> {}/tool.txt"])
    both(["truncate", "-s", "5000", "{}/tool.txt"])
    both(["truncate", "-s", "+100", "{}/tool.txt"])
    both(["sh", "-c", "printf XYZ | dd of={}/tool.txt bs=1 seek=100 conv=notrunc status=none"])
    both(["sh", "-c", "printf 0123456789 | dd of={}/tool.txt bs=1 seek=9000 conv=notrunc status=none"])
    both(["cp", "{}/f00.txt", "{}/tool.txt"] if os.path.exists(os.path.join(shadow, "f00.txt"))
         else ["cp", "{}/tool.txt", "{}/tool-copy.txt"])
    both(["mv", "{}/tool.txt", "{}/tool-moved.txt"])
    both(["cp", "-r", "{}/sub", "{}/sub-copy"]) if os.path.isdir(os.path.join(shadow, "sub")) else None
    both(["rm", "-r", "{}/sub-copy"]) if os.path.isdir(os.path.join(shadow, "sub-copy")) else None
    compare(shadow, mnt, "after sed, echo, truncate, dd, cp, mv, rm")

    # patch
    with open(os.path.join(tmp, "orig.txt"), "wb") as f:
        f.write(text)
    new = text.replace(b"line 7:", b"LINE SEVEN:").replace(b"line 150: the whale", b"line 150: a whale")
    with open(os.path.join(tmp, "new.txt"), "wb") as f:
        f.write(new)
    d = run(["diff", "-u", os.path.join(tmp, "orig.txt"), os.path.join(tmp, "new.txt")]).stdout
    with open(os.path.join(tmp, "p.diff"), "wb") as f:
        f.write(d)
    for root in (mnt, shadow):
        with open(os.path.join(root, "patched.txt"), "wb") as f:
            f.write(text)
    both(["patch", "-s", "{}/patched.txt", os.path.join(tmp, "p.diff")])
    check(open(os.path.join(mnt, "patched.txt"), "rb").read() == new, "patch result")

    # vim -es scripts (ex mode: substitute, delete, append, write) and vim's
    # default write strategy (backup + rename), with and without swap files.
    if shutil.which("vim"):
        script = os.path.join(tmp, "edit.vim")
        with open(script, "w") as f:
            f.write("set nocompatible\n%s/sea/SEA/g\n3,5d\n$put ='added by vim'\n1\nnormal! 5x\nwq\n")
        for root in (mnt, shadow):
            with open(os.path.join(root, "vim.txt"), "wb") as f:
                f.write(text)
        both(["vim", "-es", "-u", "NONE", "-i", "NONE", "-n", "-S", script, "{}/vim.txt"])
        with open(script, "w") as f:
            f.write("set nocompatible backup writebackup backupcopy=no directory=.\n"
                    "%s/whale/orca/g\nw\n%s/orca/dolphin/\nwq\n")
        both(["vim", "-es", "-u", "NONE", "-i", "NONE", "-S", script, "{}/vim.txt"])
        for root in (mnt, shadow):  # backup files name the tree: drop them
            for n in os.listdir(root):
                if n.endswith("~"):
                    os.unlink(os.path.join(root, n))
        compare(shadow, mnt, "after vim")
    else:
        log("skip: vim not installed")

    # nano: a scripted session through a pseudo-terminal (type, save, exit).
    if shutil.which("nano"):
        import pty
        for root in (mnt, shadow):
            pid, fd = pty.fork()
            if pid == 0:
                os.chdir(root)
                os.execvpe("nano", ["nano", "--ignorercfiles", "--nohelp", "nano.txt"], env)
            keys = [b"hello from nano\r", b"second line", b"\x0f", b"\r", b"\x18"]
            for k in keys:
                time.sleep(0.3)
                os.write(fd, k)
            deadline = time.time() + 10
            while time.time() < deadline:
                try:
                    if not os.read(fd, 65536):
                        break
                except OSError:
                    break
            os.waitpid(pid, 0)
            os.close(fd)
        check(open(os.path.join(mnt, "nano.txt"), "rb").read().startswith(b"hello from nano\nsecond line"),
              "nano wrote the file: %r" % open(os.path.join(mnt, "nano.txt"), "rb").read()[:80])
        compare(shadow, mnt, "after nano")
    else:
        log("skip: nano not installed")


def check_lock(archive, mnt, tmp):
    log("== one writable mount per archive")
    other = os.path.join(tmp, "mnt2")
    rc, err = mount(archive, other, "rw", expect_fail=True)
    check(rc != 0 and "locked" in err, "a second writable mount is refused: %d %s" % (rc, err.strip()))
    rc, err = mount(archive, other, expect_fail=True)
    check(rc != 0 and "locked" in err, "a read-only mount beside a writable one is refused: %d %s" % (rc, err.strip()))
    r = run([TADOC, "compact", archive])
    check(r.returncode == 1 and b"locked" in r.stderr, "tadoc compact of a mounted archive is refused: %s" % r.stderr)


def main():
    skip_without_fuse()
    log("seed %d, %d operations" % (SEED, OPS))
    rng = random.Random(SEED)
    tmp = tempfile.mkdtemp(prefix="tadoc-fs-write-")
    try:
        src = os.path.join(tmp, "src")
        make_corpus(src, rng)
        shadow = os.path.join(tmp, "shadow")
        shutil.copytree(src, shadow, symlinks=True)
        archive = os.path.join(tmp, "corpus.tadoc")
        compress(src, archive)
        mnt = os.path.join(tmp, "mnt")

        log("== read-only by default")
        mount(archive, mnt)
        expect_errno(lambda: open(os.path.join(mnt, "new"), "wb"), errno.EROFS, "create on a read-only mount")
        unmount(mnt)

        log("== model: %d random operations, compared every %d" % (OPS, BATCH))
        mount(archive, mnt, "rw")
        compare(shadow, mnt, "fresh writable mount")
        # df: the room to grow is the journal's file system's
        sv, host = os.statvfs(mnt), os.statvfs(os.path.dirname(archive))
        check(sv.f_bavail > 0 and not sv.f_flag & os.ST_RDONLY and
              abs(sv.f_bavail * sv.f_frsize - host.f_bavail * host.f_frsize) < (64 << 20),
              "statvfs of a writable mount: %d free of %d bytes, the host has %d" %
              (sv.f_bavail * sv.f_frsize, sv.f_blocks * sv.f_frsize, host.f_bavail * host.f_frsize))
        check_lock(archive, mnt, tmp)
        ok = run_model(rng, mnt, shadow, OPS)
        if ok:
            check_posix(mnt, shadow)
            check_concurrency(mnt, shadow)
            check_tools(mnt, shadow, tmp)
            check_xattrs(rng, mnt, shadow, nfiles=8)
        rc, err = unmount(mnt)
        check(rc == 0, "daemon exit status %s: %s" % (rc, err))
        if not ok:
            return

        log("== remount: the journal is replayed")
        jbytes = os.path.getsize(archive + ".journal")
        mount(archive, mnt, "rw")
        compare(shadow, mnt, "after remount")
        check_xattrs(rng, mnt, shadow, nfiles=8)
        run_model(rng, mnt, shadow, 300)
        for root in (mnt, shadow):
            with open(os.path.join(root, "journal_only.txt"), "wb") as f:
                f.write(b"made on the writable mount\n")
        unmount(mnt)

        log("== read-only mount of the edited archive")
        mount(archive, mnt)
        compare(shadow, mnt, "read-only mount of the edited archive")
        expect_errno(lambda: open(os.path.join(mnt, "new"), "wb"), errno.EROFS, "create on a read-only mount")
        unmount(mnt)

        log("== tadoc cat of a file only the journal holds names the journal")
        r = run([TADOC, "cat", archive, "journal_only.txt"])
        want = ("tadoc: %s: journal_only.txt: not in the archive; it is in the uncompacted edits in %s.journal "
                "(run `tadoc compact %s` to fold them in)\n" % (archive, archive, archive))
        check(r.returncode == 1 and r.stdout == b"" and r.stderr.decode() == want,
              "tadoc cat journal_only.txt: exit %d, %r; expected %r" % (r.returncode, r.stderr, want))
        r = run([TADOC, "cat", archive, "nowhere.txt"])
        want = "tadoc: %s: nowhere.txt: not found: no 'nowhere.txt' in the archive\n" % archive
        check(r.returncode == 1 and r.stderr.decode() == want,
              "tadoc cat nowhere.txt: exit %d, %r; expected %r" % (r.returncode, r.stderr, want))

        log("== tadoc compact (journal of %d bytes)" % jbytes)
        t = time.time()
        r = run([TADOC, "compact", archive])
        check(r.returncode == 0 and b"folded" in r.stdout, "tadoc compact: %s %s" % (r.stdout, r.stderr))
        log("  %s (%.2fs)" % (r.stdout.decode().strip(), time.time() - t))
        check(os.path.getsize(archive + ".journal") == 64, "the journal is empty after compaction")
        r = run([TADOC, "verify", archive])
        check(r.returncode == 0, "tadoc verify after compaction: %s" % r.stderr)
        r = run([TADOC, "cat", archive, "journal_only.txt"])
        check(r.returncode == 0 and r.stdout == b"made on the writable mount\n",
              "tadoc cat journal_only.txt after compaction: %s" % r.stderr)
        r = run([TADOC, "compact", archive])
        check(r.returncode == 0 and b"nothing to compact" in r.stdout, "second compaction: %s" % r.stdout)
        unpack = os.path.join(tmp, "unpacked")
        r = run([TADOC, "unpack", archive, unpack])
        if check(r.returncode == 0, "tadoc unpack: %s" % r.stderr):
            d = diff_trees(snapshot(shadow), snapshot(unpack))
            check(not d, "unpacked compacted archive differs: %s" % "; ".join(d))
        mount(archive, mnt)
        compare(shadow, mnt, "read-only mount after compaction")
        check_xattrs(rng, mnt, shadow, nfiles=8)
        unmount(mnt)
        mount(archive, mnt, "rw")
        compare(shadow, mnt, "writable mount after compaction")
        run_model(rng, mnt, shadow, 300)
        unmount(mnt)

        log("== automatic compaction at unmount past compact_threshold")
        before = os.path.getsize(archive + ".journal")
        mount(archive, mnt, "rw", "compact_threshold=1K")
        run_model(rng, mnt, shadow, 100)
        rc, err = unmount(mnt)
        check(rc == 0, "daemon exit status %s: %s" % (rc, err))
        check(os.path.getsize(archive + ".journal") == 64,
              "journal emptied by the compaction at unmount (was %d bytes)" % before)
        mount(archive, mnt, "rw", "sync=always")
        compare(shadow, mnt, "after the automatic compaction")
        run_model(rng, mnt, shadow, 100)
        unmount(mnt)
        mount(archive, mnt)
        compare(shadow, mnt, "after -o sync=always")
        unmount(mnt)

        log("== fusermount3 -u DIR && tadoc compact ARCHIVE, at once (the daemon may still hold its lock)")
        for i in range(4):
            mount(archive, mnt, "rw")
            for root in (shadow, mnt):
                with open(os.path.join(root, "unmount_then_compact.txt"), "ab") as f:
                    f.write(b"round %d\n" % i)
            r = run(["sh", "-c", 'fusermount3 -u "$1" && exec "$2" compact "$3"', "sh", mnt, TADOC, archive])
            check(r.returncode == 0 and b"folded" in r.stdout,
                  "round %d: tadoc compact right after fusermount3 -u: %s %s" % (i, r.stdout, r.stderr))
            unmount(mnt)  # reap the daemon
        mount(archive, mnt)
        compare(shadow, mnt, "after compacting right after each unmount")
        unmount(mnt)
    finally:
        finish_tmp(tmp)
    finish()


def finish_tmp(tmp):
    from fs_write_lib import cleanup
    cleanup()
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
