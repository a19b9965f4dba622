#!/usr/bin/env python3
"""fs_ready: a fresh mount lists its tree without waiting for the data checks,
and still never serves damaged data (issue 22, item 8: mount-ready time).

For a generated tree (text files in nested directories), compressed as
format 4 (one grammar) and as format 5 with small shards (about a dozen):
  - damage in a large section (format 4: the root symbols, then the rules;
    format 5: one shard's root symbols, with its image's checksum left
    stale): the mount comes up (default options and -o noverify); `ls` of
    every directory and a stat of every entry give the original names and
    sizes; reads give EIO or the exact bytes, never wrong bytes: format 4,
    every non-empty file gives EIO; format 5, the files with a piece in the
    damaged shard (a run of files, in the order they were compressed) give
    EIO and every other file reads exact; count attributes give EIO where
    they need the damaged part and equal tests/oracle.py where not; the
    background check logs the damaged section; -o verify refuses the mount;
  - concurrent first reads: on fresh mounts of the good archives, 8 threads
    released together each read files of one region of the tree (so of one
    shard) whole: every byte equals the original.
Needs $TADOC and $TADOCFS; exit 77 without a usable /dev/fuse.
"""
import errno
import os
import random
import shutil
import struct
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fs_write_lib as L  # noqa: E402
import oracle  # noqa: E402

check, log = L.check, L.log
HDR = struct.Struct("<8sIIQIIQQ2QQ")   # td_disk_header (engine/include/td_format.h)
SEC = struct.Struct("<IIQQQ")          # td_disk_section: id, flags, off, size, sum
SHARD = struct.Struct("<6Q")           # td_disk_shard: off, size, sum, nfiles, input_bytes, reserved
SEC_RULES, SEC_ROOT, SEC5_SHARDS = 18, 21, 32


def make_tree(dst, rng):
    """Files in input (depth-first, name) order, as `tadoc compress` takes them."""
    for d in range(4):
        for s in range(3):
            sub = os.path.join(dst, "d%d" % d, "s%d" % s)
            os.makedirs(sub)
            for i in range(5):
                with open(os.path.join(sub, "f%d.txt" % i), "wb") as f:
                    f.write(L.random_text(rng, rng.choice([3000, 20000, 60000, 120000])))
    open(os.path.join(dst, "empty"), "wb").close()


def files_in_order(root):
    out = []
    for d, dirs, fs in os.walk(root):
        dirs.sort()
        for f in sorted(fs):
            out.append(os.path.relpath(os.path.join(d, f), root))
    return out


def sections(buf, base):
    """{id: (off, size)} of the archive image starting at byte base of buf."""
    h = HDR.unpack_from(buf, base)
    nsec, tab = h[4], h[6]
    out = {}
    for i in range(nsec):
        sid, _, off, size, _ = SEC.unpack_from(buf, base + tab + i * SEC.size)
        out[sid] = (off, size)
    return out


def flip(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x5A]))


def damage_shard(path, which):
    """Flip a byte in the middle of shard `which`'s root symbols; returns the shard count."""
    buf = open(path, "rb").read()
    top = sections(buf, 0)
    off, size = top[SEC5_SHARDS]
    n = size // SHARD.size
    soff = SHARD.unpack_from(buf, off + which * SHARD.size)[0]
    roff, rsize = sections(buf, soff)[SEC_ROOT]
    flip(path, soff + roff + rsize // 2)
    return n


def wait_log(mnt, text, secs=30):
    deadline = time.time() + secs
    while time.time() < deadline:
        err = L.daemon_stderr(mnt)
        if text in err:
            return err
        time.sleep(0.1)
    return L.daemon_stderr(mnt)


def count_attr(path, word):
    try:
        return int(os.getxattr(path, "user.tadoc.count." + word))
    except OSError as e:
        return -e.errno


def check_listing(src, mnt, what):
    for d, dirs, fs in os.walk(src):
        rel = os.path.relpath(d, src)
        m = os.path.join(mnt, rel)
        check(sorted(os.listdir(m)) == sorted(dirs + fs), "%s: ls %s" % (what, rel))
        for f in fs:
            check(os.stat(os.path.join(m, f)).st_size == os.path.getsize(os.path.join(d, f)),
                  "%s: stat %s" % (what, os.path.join(rel, f)))


def read_all(src, mnt, order):
    """{rel: 'ok' | 'eio' | 'wrong'} for every non-empty file."""
    out = {}
    for rel in order:
        want = open(os.path.join(src, rel), "rb").read()
        if not want:
            continue
        try:
            with open(os.path.join(mnt, rel), "rb") as f:
                got = f.read()
            out[rel] = "ok" if got == want else "wrong"
        except OSError as e:
            out[rel] = "eio" if e.errno == errno.EIO else "errno %d" % e.errno
    return out


def check_damaged(src, arc, tmp, fmt, sid=None, shard=None):
    name = "format %d, %s" % (fmt, "shard %d's root" % shard if shard is not None else "section %d" % sid)
    bad = os.path.join(tmp, "bad.tadoc")
    shutil.copyfile(arc, bad)
    if shard is not None:
        damage_shard(bad, shard)
    else:
        r = L.run([sys.executable, os.path.join(HERE, "archive_patch.py"), "flip", bad, str(sid)])
        check(r.returncode == 0, "archive_patch.py flip: %s" % r.stderr)
    mnt = os.path.join(tmp, "mnt")
    rc, err = L.mount(bad, mnt, "verify", expect_fail=True)
    check(rc != 0 and "checksum mismatch" in err and len(err.strip().splitlines()) == 1,
          "%s: -o verify refuses the mount with one line: %r" % (name, err))
    order = files_in_order(src)
    for opts in ((), ("noverify",)):
        what = "%s %s" % (name, opts or "(default)")
        L.mount(bad, mnt, *opts)
        check_listing(src, mnt, what)   # before any read: the tree alone
        res = read_all(src, mnt, order)
        check(all(v in ("ok", "eio") for v in res.values()), "%s: reads are exact or EIO: %s" %
              (what, {k: v for k, v in res.items() if v not in ("ok", "eio")}))
        eio = [k for k in order if res.get(k) == "eio"]
        if shard is None:
            check(len(eio) == len(res), "%s: %d of %d non-empty files give EIO" % (what, len(eio), len(res)))
        else:
            # the damaged shard's files: one run in input order, the rest exact
            idx = [order.index(k) for k in eio]
            ok = [k for k in res if res[k] == "ok"]
            check(eio and ok and idx == list(range(idx[0], idx[0] + len(idx))),
                  "%s: the EIO files are one run in input order, the others exact (%d EIO, %d exact)" %
                  (what, len(eio), len(ok)))
            for k in ok[:5]:
                text = open(os.path.join(src, k), "rb").read()
                w = b"the" if b"the" in text else b"whale"
                want = sum(1 for x, _ in oracle.words_of(text) if x == w)
                got = count_attr(os.path.join(mnt, k), w.decode())
                check(got == want, "%s: count.%s of intact %s: %s, oracle %s" % (what, w.decode(), k, got, want))
        check(count_attr(os.path.join(mnt, eio[0] if eio else order[0]), "the") == -errno.EIO,
              "%s: count of a damaged file gives EIO" % what)
        if not opts:
            log_text = wait_log(mnt, "checksum mismatch")
            check("checksum mismatch" in log_text and "verify:" in log_text,
                  "%s: the background check logs the damage: %r" % (what, log_text[-500:]))
        L.unmount(mnt)
    log("  %s: mounted, listed, %d EIO / %d exact, never wrong" % (name, len(eio), len(res) - len(eio)))


def run_threads(fn, n):
    ts = [threading.Thread(target=fn, args=(t,)) for t in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def check_concurrent_first_reads(src, arc, tmp, what, rounds=3):
    order = [k for k in files_in_order(src) if os.path.getsize(os.path.join(src, k))]
    want = {k: open(os.path.join(src, k), "rb").read() for k in order}
    mnt = os.path.join(tmp, "mnt")
    rng = random.Random(7)
    for rnd in range(rounds):
        L.mount(arc, mnt)
        start = rng.randrange(len(order) - 4)
        group = order[start:start + 4]   # neighbours: pieces of one shard (or two)
        barrier = threading.Barrier(8)
        errs = []

        def reader(t):
            mine = group[t % 4:] + group[:t % 4]
            try:
                barrier.wait()
                for k in mine:
                    with open(os.path.join(mnt, k), "rb") as f:
                        if f.read() != want[k]:
                            errs.append("thread %d: %s differs" % (t, k))
            except Exception as e:  # noqa: BLE001 (reported as a failure)
                errs.append("thread %d: %s" % (t, e))
        run_threads(reader, 8)
        check(not errs, "%s round %d: concurrent first reads of %s: %s" % (what, rnd, group, errs))
        # then everything, from 4 threads at once, on the same fresh-ish mount
        errs2 = []

        def sweep(t):
            ks = order[t::4]
            for k in ks:
                with open(os.path.join(mnt, k), "rb") as f:
                    if f.read() != want[k]:
                        errs2.append(k)
        run_threads(sweep, 4)
        check(not errs2, "%s round %d: concurrent reads of every file: %s differ" % (what, rnd, errs2))
        L.unmount(mnt)
    log("  %s: %d fresh mounts, 8 concurrent first readers, all exact" % (what, rounds))


def main():
    L.skip_without_fuse()
    tmp = tempfile.mkdtemp(prefix="tadoc-ready-")
    try:
        src = os.path.join(tmp, "src")
        os.makedirs(src)
        make_tree(src, random.Random(22))
        a4, a5 = os.path.join(tmp, "t4.tadoc"), os.path.join(tmp, "t5.tadoc")
        for out, opts in ((a4, ["--format", "4"]), (a5, ["-j", "2", "--shard-size", "256K"])):
            r = L.run([L.TADOC, "compress", "-q", *opts, "-o", out, src], timeout=900)
            if r.returncode != 0:
                raise SystemExit("compress: %s" % r.stderr.decode(errors="replace"))
        buf = open(a5, "rb").read()
        nshards = sections(buf, 0)[SEC5_SHARDS][1] // SHARD.size
        check(nshards >= 6, "format 5 test archive has %d shards" % nshards)
        log("== damaged large sections: the tree lists, reads are exact or EIO")
        check_damaged(src, a4, tmp, 4, sid=SEC_ROOT)
        check_damaged(src, a4, tmp, 4, sid=SEC_RULES)
        check_damaged(src, a5, tmp, 5, shard=nshards // 2)
        log("== concurrent first reads on fresh mounts")
        check_concurrent_first_reads(src, a4, tmp, "format 4")
        check_concurrent_first_reads(src, a5, tmp, "format 5 (%d shards)" % nshards)
    finally:
        L.teardown(tmp)
    L.finish()


if __name__ == "__main__":
    main()
