"""Shared helpers of the writable-mount tests (fs_write.py, fs_crash.py, fs_journal.py).

Mounts run in the foreground (`tadocfs -f`) as child processes so a test
can wait for the daemon to finish (journal sync, compaction at unmount) or
kill it. Trees are compared entry by entry against a shadow directory on
the local file system (the independent oracle: the kernel's own file
system doing the same operations).
"""
import errno
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

TADOC = os.environ.get("TADOC", "tadoc")
TADOCFS = os.environ.get("TADOCFS", "tadocfs")
TADOC, TADOCFS = [os.path.abspath(p) if os.sep in p else p for p in (TADOC, TADOCFS)]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle import words_of  # noqa: E402,F401  (re-exported to the tests)

failures = []
_daemons = {}  # mountpoint -> Popen


def log(msg):
    print(msg, flush=True)


def check(cond, what):
    if cond:
        return True
    failures.append(what)
    log("FAIL: " + what)
    return False


def finish():
    cleanup()
    if failures:
        log("%d failure(s)" % len(failures))
        sys.exit(1)
    log("all checks passed")
    sys.exit(0)


def teardown(tmp):
    """At the end of a test, whatever happened: unmount what is still mounted, remove tmp."""
    cleanup()
    shutil.rmtree(tmp, ignore_errors=True)


def skip_without_fuse():
    if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
        log("skip: no /dev/fuse or fusermount3")
        sys.exit(77)
    try:
        fd = os.open("/dev/fuse", os.O_RDWR)
        os.close(fd)
    except OSError as e:
        log("skip: /dev/fuse: %s" % e)
        sys.exit(77)


def xattr_joined(path, name):
    """A list attribute's whole value: its "#more NAME@N" parts joined."""
    out = b""
    while True:
        v = os.getxattr(path, name)
        i = v.rfind(b"\n", 0, len(v) - 1) + 1
        if not v[i:].startswith(b"#more "):
            return out + v
        out += v[:i]
        name = os.fsdecode(v[i + 6:].rstrip(b"\n"))


def run(cmd, **kw):
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    kw.setdefault("timeout", 300)
    return subprocess.run(cmd, **kw)


# ---------------------------------------------------------------- mounts

def proc_mounts():
    out = set()
    with open("/proc/mounts", "rb") as f:
        for line in f:
            parts = line.split(b" ")
            if len(parts) >= 3 and parts[2].startswith(b"fuse"):
                mp = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), parts[1])
                out.add(os.fsdecode(mp))
    return out


def is_mounted(mnt):
    return os.path.realpath(mnt) in proc_mounts()


def mount(archive, mnt, *opts, expect_fail=False):
    """Start `tadocfs ARCHIVE MNT -f -o OPTS` and wait until mounted.
    Returns (Popen, stderr path). With expect_fail, waits for the exit
    instead and returns (returncode, stderr text)."""
    os.makedirs(mnt, exist_ok=True)
    errf = tempfile.NamedTemporaryFile(prefix="tadocfs-err-", delete=False)
    args = [TADOCFS, archive, mnt, "-f"]
    if opts:
        args += ["-o", ",".join(opts)]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=errf)
    errf.close()
    deadline = time.time() + 20
    while time.time() < deadline:
        if p.poll() is not None:
            with open(errf.name, "rb") as f:
                err = f.read().decode(errors="replace")
            os.unlink(errf.name)
            if expect_fail:
                return p.returncode, err
            raise SystemExit("tadocfs %s exited %d: %s" % (" ".join(args), p.returncode, err))
        if is_mounted(mnt):
            if expect_fail:
                check(False, "mount of %s with %s should have failed" % (archive, opts))
            _daemons[os.path.realpath(mnt)] = (p, errf.name)
            return p, errf.name
        time.sleep(0.02)
    p.kill()
    raise SystemExit("tadocfs %s did not mount" % " ".join(args))


def daemon_stderr(mnt):
    p, name = _daemons[os.path.realpath(mnt)]
    with open(name, "rb") as f:
        return f.read().decode(errors="replace")


def unmount(mnt, timeout=60):
    """Unmount and wait for the daemon to exit; returns (rc, stderr)."""
    key = os.path.realpath(mnt)
    if is_mounted(mnt):
        r = run(["fusermount3", "-u", mnt])
        if r.returncode != 0:
            time.sleep(0.2)
            r = run(["fusermount3", "-u", mnt])
            if r.returncode != 0:
                run(["fusermount3", "-u", "-z", mnt])
    ent = _daemons.pop(key, None)
    if not ent:
        return None, ""
    p, name = ent
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        check(False, "daemon of %s did not exit after unmount" % mnt)
    with open(name, "rb") as f:
        err = f.read().decode(errors="replace")
    os.unlink(name)
    # Every clean unmount must end the daemon with status 0 (a sanitizer
    # report or a failed journal sync would not).
    check(p.returncode == 0 and "Sanitizer" not in err and "runtime error" not in err,
          "daemon of %s exited %s: %s" % (mnt, p.returncode, err[-2000:]))
    return p.returncode, err


def kill_daemon(mnt):
    """kill -9 the daemon, then detach the dead mount."""
    key = os.path.realpath(mnt)
    p, name = _daemons.pop(key)
    p.send_signal(signal.SIGKILL)
    p.wait()
    for _ in range(50):
        run(["fusermount3", "-u", "-z", mnt])
        if not is_mounted(mnt):
            break
        time.sleep(0.05)
    with open(name, "rb") as f:
        err = f.read().decode(errors="replace")
    os.unlink(name)
    return err


def cleanup():
    for key in list(_daemons):
        try:
            unmount(key, timeout=10)
        except Exception as e:  # keep going
            log("cleanup: %s: %s" % (key, e))


def on_signal(signum, frame):
    cleanup()
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)


# ---------------------------------------------------------------- trees

def compress(src, out, args=()):
    """tadoc compress (format 5 unless args say otherwise)."""
    r = run([TADOC, "compress", "-o", out] + list(args) + [src])
    if r.returncode != 0:
        raise SystemExit("tadoc compress failed: " + r.stderr.decode(errors="replace"))


def snapshot(root):
    """{relpath: (kind, perm, payload)} for every entry below root:
    payload is the bytes of a file, the target of a symlink, None for a
    directory."""
    out = {}
    stack = [""]
    while stack:
        rel = stack.pop()
        d = os.path.join(root, rel) if rel else root
        for name in os.listdir(d):
            r = os.path.join(rel, name) if rel else name
            p = os.path.join(root, r)
            st = os.lstat(p)
            if stat.S_ISDIR(st.st_mode):
                out[r] = ("d", stat.S_IMODE(st.st_mode), None)
                stack.append(r)
            elif stat.S_ISLNK(st.st_mode):
                out[r] = ("l", None, os.readlink(p))
            else:
                with open(p, "rb") as f:
                    data = f.read()
                check(len(data) == st.st_size, "%s: st_size %d but %d bytes read" % (p, st.st_size, len(data)))
                out[r] = ("f", stat.S_IMODE(st.st_mode), data)
    return out


def diff_trees(a, b, limit=5):
    """Differences between two snapshots, as short lines."""
    out = []
    for k in sorted(set(a) | set(b)):
        if k not in a:
            out.append("only in mount: %s" % k)
        elif k not in b:
            out.append("missing on mount: %s" % k)
        elif a[k] != b[k]:
            ka, pa, da = a[k]
            kb, pb, db = b[k]
            if ka != kb:
                out.append("%s: kind %s vs %s" % (k, ka, kb))
            elif pa != pb:
                out.append("%s: mode %o vs %o" % (k, pa, pb))
            elif ka == "f":
                i = next((i for i in range(min(len(da), len(db))) if da[i] != db[i]), min(len(da), len(db)))
                out.append("%s: %d vs %d bytes, first difference at %d" % (k, len(da), len(db), i))
            else:
                out.append("%s: %r vs %r" % (k, da, db))
        if len(out) >= limit:
            break
    return out


def compare(shadow_root, mnt, what):
    d = diff_trees(snapshot(shadow_root), snapshot(mnt))
    return check(not d, "%s: trees differ: %s" % (what, "; ".join(d)))


# ---------------------------------------------------------------- oracle



VOCAB = ["whale", "sea", "Ishmael", "ship", "the", "of", "and", "harpoon", "Queequeg", "naïve",
         "café", "東京", "x_1", "42", "Ahab", "white", "ocean", "line", "rope", "sail"]
PUNCT = [" ", " ", " ", "\n", ", ", ". ", "; ", "-", "\t", "\r\n", "!"]


def random_text(rng, n):
    """About n bytes of word-rich text, sometimes with odd bytes."""
    parts = []
    size = 0
    while size < n:
        r = rng.random()
        if r < 0.7:
            s = rng.choice(VOCAB)
        elif r < 0.97:
            s = rng.choice(PUNCT)
        elif r < 0.99:
            s = "\x00"
        else:
            parts.append(bytes([rng.randrange(128, 256)]))
            size += 1
            continue
        b = s.encode()
        parts.append(b)
        size += len(b)
    return b"".join(parts)[:max(n, 1)]


def make_corpus(dst, rng, nfiles=12):
    """A small tree: text files, an empty file, a subdirectory, a symlink."""
    os.makedirs(os.path.join(dst, "sub", "deeper"))
    for i in range(nfiles):
        d = ["", "sub", os.path.join("sub", "deeper")][i % 3]
        with open(os.path.join(dst, d, "f%02d.txt" % i), "wb") as f:
            f.write(random_text(rng, rng.choice([10, 200, 3000, 20000])))
    open(os.path.join(dst, "empty"), "wb").close()
    os.symlink("f00.txt", os.path.join(dst, "link"))
