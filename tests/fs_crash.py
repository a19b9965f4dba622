#!/usr/bin/env python3
"""Crash test of writable mounts (issue 4): a writer changes files on a
`-o rw` mount, fsyncs after every change and counts a change as
acknowledged once that returned; the daemon is killed with SIGKILL at a
random moment. After the remount every acknowledged change must be there
and the tree must equal the writer's model after the last acknowledged
change - or after the one change that was in flight when the daemon died
(it may or may not have reached the journal). A torn journal tail left by
the kill is reported and dropped by the next mount.

Every change is one journal record (pwrite, O_APPEND write, truncate,
insert, delete, empty create, unlink, rename) - except that the kernel may
split one write(2) at page boundaries into several requests, so a killed
write may have left a page-aligned prefix, as on any file system. Every
other iteration mounts with -o sync=always.

Environment: TADOC, TADOCFS; FS_CRASH_ITERS (default 50), FS_CRASH_SEED.
Exit 77 without /dev/fuse.
"""
import errno
import os
import random
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fs_write_lib import (teardown, TADOC, check, compress, daemon_stderr, finish, kill_daemon, log, mount,  # noqa: E402
                          random_text, run, skip_without_fuse, unmount)

ITERS = int(os.environ.get("FS_CRASH_ITERS", "50"))
SEED = int(os.environ.get("FS_CRASH_SEED", str(random.randrange(1 << 30))))


def read_tree(mnt):
    """{name: bytes} of the regular files at the mount's top level."""
    out = {}
    for n in os.listdir(mnt):
        p = os.path.join(mnt, n)
        if os.path.isfile(p) and not os.path.islink(p):
            with open(p, "rb") as f:
                out[n] = f.read()
    return out


def plan(rng, model, counter):
    """A random change: (description, function on the mount root, new
    model, [models of a partly done change])."""
    names = sorted(model)
    new = dict(model)
    kind = rng.choices(["write", "append", "truncate", "insert", "delete", "create", "unlink", "rename"],
                       [25, 20, 8, 15, 10, 8, 4, 6])[0]
    if not names or (kind in ("unlink", "rename") and len(names) < 3):
        kind = "create"
    if kind == "create":
        name = "c%06d" % counter
        new[name] = b""

        def fn(root):
            fd = os.open(os.path.join(root, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            os.close(fd)
            dfd = os.open(root, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        return "create " + name, fn, new, []
    name = rng.choice(names)
    p_of = lambda root: os.path.join(root, name)  # noqa: E731
    data = model[name]
    if kind in ("write", "append"):
        chunk = random_text(rng, rng.choice([1, 100, 4000, 30000]))
        off = rng.randint(0, len(data) + 100) if kind == "write" else len(data)

        def put(k):
            buf = bytearray(data)
            if off > len(buf):
                buf.extend(b"\0" * (off - len(buf)))
            buf[off:off + k] = chunk[:k]
            return bytes(buf)
        new[name] = put(len(chunk))
        # The kernel may send one write(2) as several requests split at
        # page boundaries; a kill between them leaves a prefix written.
        partial = []
        for k in range(1, len(chunk)):
            if (off + k) % 4096 == 0:
                m = dict(model)
                m[name] = put(k)
                partial.append(m)

        def fn(root):
            flags = os.O_WRONLY | (os.O_APPEND if kind == "append" else 0)
            fd = os.open(p_of(root), flags)
            try:
                n = os.pwrite(fd, chunk, off) if kind == "write" else os.write(fd, chunk)
                if n != len(chunk):
                    raise OSError(errno.EIO, "short write")
                os.fsync(fd)
            finally:
                os.close(fd)
        return "%s %s" % (kind, name), fn, new, partial
    if kind == "truncate":
        size = rng.randint(0, len(data) + 50)
        new[name] = data[:size] + b"\0" * max(0, size - len(data))

        def fn(root):
            fd = os.open(p_of(root), os.O_WRONLY)
            try:
                os.ftruncate(fd, size)
                os.fdatasync(fd)
            finally:
                os.close(fd)
        return "truncate %s %d" % (name, size), fn, new, []
    if kind in ("insert", "delete"):
        off = rng.randint(0, len(data))
        if kind == "insert":
            text = random_text(rng, rng.choice([1, 50, 3000]))
            new[name] = data[:off] + text + data[off:]
            attr, val = "user.tadoc.insert.%d" % off, text
        else:
            n = rng.randint(1, 2000)
            if off == len(data):
                return plan(rng, model, counter)
            new[name] = data[:off] + data[off + n:]
            attr, val = "user.tadoc.delete.%d" % off, str(n).encode()

        def fn(root):
            os.setxattr(p_of(root), attr, val)
            fd = os.open(p_of(root), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return "%s %s %d" % (kind, name, off), fn, new, []
    if kind == "unlink":
        del new[name]

        def fn(root):
            os.unlink(p_of(root))
            dfd = os.open(root, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        return "unlink " + name, fn, new, []
    # rename, over another file half of the time
    others = [n for n in names if n != name]
    dst = rng.choice(others) if rng.random() < 0.5 else "r%06d" % counter
    new[dst] = new.pop(name)

    def fn(root):
        os.rename(p_of(root), os.path.join(root, dst))
        dfd = os.open(root, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return "rename %s %s" % (name, dst), fn, new, []


def main():
    skip_without_fuse()
    log("seed %d, %d kill -9 iterations" % (SEED, ITERS))
    rng = random.Random(SEED)
    tmp = tempfile.mkdtemp(prefix="tadoc-fs-crash-")
    try:
        src = os.path.join(tmp, "src")
        os.makedirs(src)
        for i in range(4):
            with open(os.path.join(src, "base%d.txt" % i), "wb") as f:
                f.write(random_text(rng, rng.choice([100, 5000, 40000])))
        archive = os.path.join(tmp, "crash.tadoc")
        compress(src, archive)
        mnt = os.path.join(tmp, "mnt")
        model = {n: open(os.path.join(src, n), "rb").read() for n in os.listdir(src)}
        pending = None
        partial = []
        last_what = None
        counter = 0
        acked_total = 0
        torn = 0
        inflight_applied = 0
        for it in range(ITERS + 1):
            opts = ["rw"] + (["sync=always"] if it % 2 else [])
            mount(archive, mnt, *opts)
            if "byte offset" in daemon_stderr(mnt):
                torn += 1  # the kill tore the last record: reported and dropped
            got = read_tree(mnt)
            if got == model:
                pass
            elif pending is not None and got == pending:
                model = pending  # the change in flight reached the journal
                inflight_applied += 1
            elif pending is not None and got in partial:
                model = got  # part of a multi-request write reached it
                inflight_applied += 1
            else:
                diff = sorted(k for k in set(got) | set(model) if got.get(k) != model.get(k))
                check(False, "iteration %d: tree differs from the acknowledged state in %s" % (it, diff[:5]))
                for k in diff[:3]:
                    g, m = got.get(k), model.get(k)
                    pv = pending.get(k) if pending else None
                    log("  %s: mount %s, acknowledged %s, in flight %s" % (
                        k, None if g is None else len(g), None if m is None else len(m),
                        None if pv is None else len(pv)))
                log("  last change: %s" % last_what)
                break
            pending = None
            if it == ITERS:
                break
            # The killer: SIGKILL the daemon after a random delay.
            delay = rng.uniform(0.01, 0.25)
            killing = threading.Event()

            def killer():
                time.sleep(delay)
                killing.set()
                kill_daemon(mnt)
            t = threading.Thread(target=killer)
            # Paths through a descriptor of the mount's root: once the dead
            # mount is detached they fail instead of reaching the directory
            # underneath.
            rootfd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
            root = "/proc/self/fd/%d" % rootfd
            t.start()
            while not killing.is_set():
                counter += 1
                what, fn, new, partial = plan(rng, model, counter)
                last_what = what
                pending = new
                try:
                    fn(root)
                except OSError as e:
                    if not killing.is_set():
                        check(False, "iteration %d: %s failed: %s" % (it, what, e))
                    break
                if killing.is_set():
                    break  # finished while the kill happened: counts as in flight
                model, pending = new, None
                acked_total += 1
            t.join()
            os.close(rootfd)
        rc, err = unmount(mnt)
        check(rc == 0, "final unmount: %s %s" % (rc, err))
        log("  %d acknowledged changes; %d in-flight changes survived the kill; %d torn tails dropped"
            % (acked_total, inflight_applied, torn))
        # Compaction of the crash-worn journal keeps the acknowledged state.
        r = run([TADOC, "compact", archive])
        check(r.returncode == 0, "tadoc compact after the crashes: %s" % r.stderr)
        mount(archive, mnt)
        check(read_tree(mnt) == model, "after compaction the tree equals the acknowledged state")
        unmount(mnt)
    finally:
        teardown(tmp)
    finish()


if __name__ == "__main__":
    main()
