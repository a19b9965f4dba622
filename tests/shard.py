#!/usr/bin/env python3
"""shard: format 5 archives (issue 22), checked against the originals and tests/oracle.py.

For the generated adversarial tree (tests/gen_adversarial.py plus big files
that must be cut between shards) with 64 KiB shards, and for a slice of the
real spam and gcide corpora where they are present (gcide's first 8 MB, cut
inside its one file, and a sixth of spam's mails; 1 MiB shards):
  - `-j 1` and `-j 4` write byte-identical archives; `tadoc info` lists the
    shards and `tadoc verify` passes; one large shard whose grammar rounds
    run on the idle workers' cores (-j 3, -j 7) equals -j 1's;
  - `tadoc unpack` then `diff -r` equals the original, and so does a real
    mount (tadocfs);
  - random `tadoc extract` ranges, many crossing shard cuts, equal the
    original bytes read by Python;
  - `tadoc count` / `tadoc search` on files, directories and the root, and
    the mount's user.tadoc.count.* attributes, equal the oracle;
then `tadoc add` (old shards kept byte for byte; unpack and a mount exact;
refusals); the shard size the archive records (info; add and compact
without --shard-size use it: the same bytes as giving it; an archive
without it gets the default) and kill -9 of it at random moments (the archive always verifies
and holds the old or the new set of files); `tadoc compact` of an archive
edited through a writable mount (only the shards holding edited text
rebuilt, the others byte for byte; the result equals the shadow tree and
the oracle; with SOURCE_DATE_EPOCH two compactions a second apart, at -j 2
and -j 1, give the same bytes; --full repacks); a memory bound: a
generated corpus 3x larger than `--memory` builds (from the directory and
from a tar stream on stdin, the same bytes) with the child's peak RSS
(getrusage through wait4) under the bound; and bad arguments and input
(shard size 0, memory too small for one shard, -j 0, a bad tar stream, add
to format 4) exit non-zero with one message, an existing archive untouched.
Needs $TADOC and $TADOCFS; mounts are skipped without FUSE.
"""
import os
import random
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fs_write_lib as L  # noqa: E402
import oracle  # noqa: E402

check, log = L.check, L.log
TADOC = L.TADOC


def tadoc(*args, env=None):
    env = oracle.leak_env(args, env)  # under sanitizers the first call of each kind leak-checked
    return subprocess.run([TADOC] + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=env)


def compress(src, out, *opts):
    env = dict(os.environ, SOURCE_DATE_EPOCH="1700000000")
    r = tadoc("compress", "-q", "-o", out, *opts, src, env=env)
    if r.returncode != 0:
        raise SystemExit("compress %s: %s" % (src, r.stderr.decode(errors="replace")))


def have_fuse():
    if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
        return False
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
        return True
    except OSError:
        return False


def files_of(root):
    out = []
    for d, _, fs in os.walk(root):
        for f in fs:
            p = os.path.join(d, f)
            if os.path.isfile(p) and not os.path.islink(p):
                out.append(os.path.relpath(p, root))
    return sorted(out)


def esc(p):
    return p.replace(b"\\", b"\\\\").replace(b"\n", b"\\n")


def check_queries(arc, src, corpus, rnd, name):
    """Counts and searches on files, directories and the root equal the oracle."""
    files = [r for r, k in corpus.kind.items() if k == "f"]
    dirs = [r for r, k in corpus.kind.items() if k == "d" and r]
    common = sorted(corpus.index, key=lambda w: -len(corpus.index[w]))[:4]
    words = common + [w for w in rnd.sample(sorted(corpus.index), min(4, len(corpus.index)))]
    big = sorted(files, key=lambda f: -len(corpus.words[f]))[:3]
    scopes = [b""] + rnd.sample(dirs, min(2, len(dirs))) + big + rnd.sample(files, min(2, len(files)))
    bad = 0
    for w in words:
        for s in scopes:
            want = corpus.hits(w, s)
            args = [arc, os.fsdecode(w)] + ([os.fsdecode(s)] if s else [])
            r = tadoc("count", *args)
            if not check(r.returncode == 0 and r.stdout.strip() == b"%d" % len(want),
                         "%s: count %r in %r: %r, oracle %d" % (name, w, s, r.stdout[:80], len(want))):
                bad += 1
                continue
            if len(want) > 20000:
                continue
            r = tadoc("search", *args)
            if corpus.kind.get(s) == "f":
                exp = b"".join(b"%d\n" % off for _, off in want)
            else:
                exp = b"".join(esc(f) + b":%d\n" % off for f, off in want)
            if not check(r.returncode == 0 and r.stdout == exp, "%s: search %r in %r differs from the oracle"
                         % (name, w, s)):
                bad += 1
    log("%s: %d words x %d scopes, %d differ" % (name, len(words), len(scopes), bad))
    return words, scopes


def check_extracts(arc, src, shard, rnd, name, n=40):
    """Random ranges of the big files, many of them across shard cuts."""
    files = [f for f in files_of(src) if os.path.getsize(os.path.join(src, f)) > shard // 2]
    bad = 0
    datas = {}
    for _ in range(n if files else 0):
        f = rnd.choice(files)
        if f not in datas:
            with open(os.path.join(src, f), "rb") as fh:
                datas[f] = fh.read()
        data = datas[f]
        off = rnd.randrange(len(data))
        ln = rnd.choice([1, 7, 4096, shard // 3, shard, 3 * shard])
        r = tadoc("extract", arc, f, off, ln)
        if not check(r.returncode == 0 and r.stdout == data[off:off + ln],
                     "%s: extract %s %d %d differs" % (name, f, off, ln)):
            bad += 1
    log("%s: %d random extracts from %d big files, %d differ" % (name, n, len(files), bad))


def check_mount(arc, src, corpus, words, scopes, work, name):
    if not have_fuse():
        log("%s: no FUSE, mount skipped" % name)
        return
    mnt = os.path.join(work, "mnt-" + name)
    L.mount(arc, mnt)
    try:
        r = subprocess.run(["diff", "-r", "--no-dereference", src, mnt], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        check(r.returncode == 0, "%s: the mount differs from the original: %s" % (name, r.stdout[:500]))
        for w in words[:4]:
            for s in scopes:
                if corpus.kind.get(s) == "l":
                    continue
                p = os.path.join(mnt, os.fsdecode(s)) if s else mnt
                got = os.getxattr(p, "user.tadoc.count." + os.fsdecode(w), follow_symlinks=False)
                check(got == b"%d" % len(corpus.hits(w, s)), "%s: mount count %r in %r: %r" % (name, w, s, got))
    finally:
        L.unmount(mnt)
    log("%s: mount equals the original and the oracle" % name)


def check_tree(src, shard, work, name, jobs=(1, 4), inspect=None):
    """The checks of the module docstring on src cut at `shard` bytes; inspect(arc), when
    given, looks at the first archive too (before it is removed)."""
    rnd = random.Random(22)
    arcs = []
    for j in jobs:
        a = os.path.join(work, "%s-j%d.tadoc" % (name, j))
        compress(src, a, "-j", j, "--shard-size", shard)
        arcs.append(a)
    with open(arcs[0], "rb") as f0, open(arcs[-1], "rb") as f1:
        check(f0.read() == f1.read(), "%s: -j %d and -j %d archives differ" % (name, jobs[0], jobs[-1]))
    arc = arcs[0]
    info = tadoc("info", arc).stdout.decode()
    nshards = [int(l.split()[1]) for l in info.splitlines() if l.startswith("shards")]
    check(nshards and nshards[0] >= 2, "%s: expected several shards, info says %r" % (name, nshards))
    check(tadoc("verify", arc).returncode == 0, "%s: verify" % name)
    out = os.path.join(work, "u-" + name)
    r = tadoc("unpack", arc, out)
    check(r.returncode == 0, "%s: unpack: %s" % (name, r.stderr))
    r = subprocess.run(["diff", "-r", "--no-dereference", src, out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    check(r.returncode == 0, "%s: unpack differs: %s" % (name, r.stdout[:500]))
    shutil.rmtree(out, ignore_errors=True)
    log("%s: %s shards, -j identical, verify, unpack identical" % (name, nshards[0] if nshards else "?"))
    check_extracts(arc, src, shard, rnd, name)
    corpus = oracle.Corpus(src)
    words, scopes = check_queries(arc, src, corpus, rnd, name)
    check_mount(arc, src, corpus, words, scopes, work, name)
    out = inspect(arc) if inspect else None
    for a in arcs:
        os.unlink(a)
    return out


def gen_idents(root, rnd, nbytes=3 << 20):
    """C-like files of identifiers in families sharing long prefixes (as
    in linux's sources), about 3 MB: its shards' WORDS take the split
    layout (td_format.h, TD_SECF_SPLIT)."""
    syl = ["drv", "reg", "ctl", "dma", "irq", "buf", "phy", "clk", "pci", "usb", "tx", "rx", "cfg", "init",
           "mask", "addr", "dev", "mux", "pwr", "gpio", "ring", "desc", "queue", "stat", "hw", "sw", "fw"]
    fams = ["_".join(rnd.choice(syl) for _ in range(rnd.randrange(3, 6))) for _ in range(2000)]

    def ident():
        s = "%s_%s%d" % (rnd.choice(fams), rnd.choice(syl), rnd.randrange(64))
        return s.upper() if rnd.random() < 0.3 else s
    n, i = 0, 0
    while n < nbytes:
        d = os.path.join(root, "src%d" % (i % 8))
        os.makedirs(d, exist_ok=True)
        text = "".join("static int %s(struct %s *%s) { return %s | %s; }\n" % tuple(ident() for _ in range(5))
                       for _ in range(400))
        with open(os.path.join(d, "f%03d.c" % i), "w") as f:
            f.write(text)
        n += len(text)
        i += 1


def split_words(arc):
    """How many of a format 5 archive's shards hold WORDS (section 13) in
    the split layout (flag 2), and how many shards there are."""
    n = 0
    images = shard_images(arc)
    for img in images:
        nsec, tab = struct.unpack_from("<I", img, 24)[0], struct.unpack_from("<Q", img, 32)[0]
        for k in range(nsec):
            sid, flags = struct.unpack_from("<II", img, tab + 32 * k)[0:2]
            n += sid == 13 and (flags & 2) != 0
    return n, len(images)


def check_idents(work):
    """An identifier-heavy tree: its shards' WORDS split (all but perhaps
    the small last one); -j 1 = -j 4, verify, unpack, a mount exact."""
    src = os.path.join(work, "idents")
    gen_idents(src, random.Random(9))
    n, shards = check_tree(src, 1 << 20, work, "idents", inspect=split_words)
    # the last shard holds the remainder: its few words may keep the records
    check(shards >= 3 and n >= shards - 1, "idents: %d of %d shards' WORDS split, expected all but the last" % (n, shards))
    shutil.rmtree(src)
    log("idents: %d of %d shards' WORDS split" % (n, shards))


def gen_big(root, rnd):
    """Files larger than a 64 KiB shard: lines of words, one long line,
    UTF-8, and a run of word characters longer than a cut's window."""
    os.makedirs(os.path.join(root, "big", "deep"), exist_ok=True)
    vocab = ["alpha", "beta", "gamma", "Delta", "épée", "naïve", "x_1", "42", "straße", "中文", "the", "of"]
    lines = [" ".join(rnd.choice(vocab) for _ in range(rnd.randrange(1, 30))) for _ in range(30000)]
    with open(os.path.join(root, "big", "lines.txt"), "w") as f:
        f.write("\n".join(lines))
    with open(os.path.join(root, "big", "deep", "oneline.txt"), "w") as f:
        f.write(" ".join(rnd.choice(vocab) for _ in range(60000)))
    with open(os.path.join(root, "big", "deep", "utf8.txt"), "w") as f:
        f.write("".join(rnd.choice(["中文", "é", "ß", "x", ",", "\n"]) for _ in range(120000)))


def gen_corpus(root, nbytes, rnd):
    os.makedirs(root, exist_ok=True)
    vocab = ["w%d" % i for i in range(20000)]
    n, i = 0, 0
    while n < nbytes:
        d = os.path.join(root, "d%02d" % (i % 16))
        os.makedirs(d, exist_ok=True)
        words = rnd.choices(vocab, weights=None, k=60000)
        text = "\n".join(" ".join(words[k:k + 12]) for k in range(0, len(words), 12))
        with open(os.path.join(d, "f%04d.txt" % i), "w") as f:
            f.write(text)
        n += len(text)
        i += 1
    return n


def real_slice(work):
    """Real text across shard cuts, one tree (None without spam and gcide): the first
    8 MB of gcide's one 40 MB file (seven cuts inside it at 1 MiB shards) and every
    sixth mail of spam's five directories in path order (about 7 MB: cuts between
    and inside small files). The whole corpora cost five times the CPU on the same
    paths: one compress, extract, count and search per shard cut (tests/README.md)."""
    out = os.path.join(work, "real")
    have = []
    gcide = oracle.real_corpus("gcide")
    if gcide and os.path.isfile(os.path.join(gcide, "gcide.txt")):
        os.makedirs(os.path.join(out, "gcide"))
        with open(os.path.join(gcide, "gcide.txt"), "rb") as f, open(os.path.join(out, "gcide", "gcide.txt"), "wb") as g:
            g.write(f.read(8 << 20))
        have.append("gcide")
    spam = oracle.real_corpus("spam")
    if spam:
        mails = [f for f in files_of(spam) if not os.path.basename(f).startswith(".")]
        for f in mails[::6]:
            os.makedirs(os.path.join(out, "spam", os.path.dirname(f)), exist_ok=True)
            shutil.copy2(os.path.join(spam, f), os.path.join(out, "spam", f))
        have.append("spam")
    if not have:
        return None
    log("real: %s (%.1f MB)" % (" and ".join(have), sum(os.path.getsize(os.path.join(out, f))
                                                        for f in files_of(out)) / 1e6))
    return out


def check_grammar_threads(work):
    """One shard large enough (over a million tokens) for its grammar rounds
    to borrow the idle workers' cores: -j 1 (no helper), -j 3 and -j 7 write
    the same bytes, and the archive unpacks to the original. Repeated
    phrases make many rounds (some rewriting most of the sequence), runs of
    one word test the run edges where the sequence is split."""
    src = os.path.join(work, "oneshard")
    rnd = random.Random(11)
    phrases = [" ".join("p%d" % rnd.randrange(3000) for _ in range(rnd.randrange(2, 9))) for _ in range(4000)]
    for i in range(10):
        d = os.path.join(src, "d%d" % (i % 3))
        os.makedirs(d, exist_ok=True)
        parts = []
        for _ in range(40000):
            r = rnd.random()
            if r < 0.6:
                parts.append(rnd.choice(phrases))
            elif r < 0.9:
                parts.append("w%d" % rnd.randrange(50000))
            else:
                parts.append(" ".join(["aa"] * rnd.randrange(1, 40)))
        with open(os.path.join(d, "f%d.txt" % i), "w") as f:
            f.write("\n".join(parts))
    arcs = []
    for j in (1, 3, 7):
        a = os.path.join(work, "oneshard-j%d.tadoc" % j)
        compress(src, a, "-j", j, "--shard-size", "64M")
        arcs.append(a)
    with open(arcs[0], "rb") as f:
        first = f.read()
    for a in arcs[1:]:
        with open(a, "rb") as f:
            check(f.read() == first, "grammar threads: %s differs from -j 1's archive" % os.path.basename(a))
    out = os.path.join(work, "u-oneshard")
    r = tadoc("unpack", arcs[0], out)
    check(r.returncode == 0, "grammar threads: unpack: %s" % r.stderr)
    r = subprocess.run(["diff", "-r", src, out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    check(r.returncode == 0, "grammar threads: unpack differs: %s" % r.stdout[:500])
    log("grammar threads: one %.1f MB shard, -j 1, 3, 7 identical, unpack identical" %
        (sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(src) for f in fs) / 1e6))
    for p in arcs + [src, out]:
        if os.path.isdir(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            os.unlink(p)


def check_memory(work):
    """A corpus 3x the bound builds under it (peak RSS of the child, by
    getrusage through wait4), from the directory and from a tar stream on
    standard input (the same archive bytes)."""
    src = os.path.join(work, "mem")
    bound = 28 << 20
    # under sanitizers the bound is not checked (below): a corpus 1.5x the bound
    # runs the same bounded build (shards in flight limited by it); the
    # default suite's is 3x
    size = bound * 3 // 2 if oracle.sanitized() else 3 * bound
    subprocess.run([sys.executable, os.path.abspath(__file__), "--gen", src, str(size)], check=True)
    n = sum(os.path.getsize(os.path.join(src, f)) for f in files_of(src))
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    arc = os.path.join(work, "mem.tadoc")
    # A child starts with its parent's resident pages (fork copies the
    # mapping; exec keeps the high-water mark): the compress is started by
    # a fresh, small interpreter (python3 -S), which reports its getrusage.
    helper = ("import os, sys\n"
              "pid = os.fork()\n"
              "if pid == 0:\n"
              "    os.execv(sys.argv[1], sys.argv[1:])\n"
              "_, st, ru = os.wait4(pid, 0)\n"
              "print(os.waitstatus_to_exitcode(st), ru.ru_maxrss)\n")
    def peak(stdin, *args):
        r = subprocess.run([sys.executable, "-S", "-c", helper, shutil.which(TADOC) or TADOC, "compress", "-q", "-j", "2",
                            "--shard-size", "512K", "--memory", str(bound), "-o", arc] + list(args),
                           stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=dict(os.environ, SOURCE_DATE_EPOCH="1700000000"))
        out = r.stdout.split()
        return ((int(out[0]), int(out[1]) * 1024) if len(out) == 2 else (-1, 0)), r.stderr

    (status, rss), err = peak(subprocess.DEVNULL, src)
    check(status == 0, "memory: compress failed: %r" % err)
    r = subprocess.run(["ldd", shutil.which(TADOC) or TADOC], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    limit = bound
    if b"libasan" in r.stdout or b"libtsan" in r.stdout:
        log("memory: a sanitizer build (shadow memory, quarantine): the bound is not checked")
        limit = float("inf")
    check(rss < limit, "memory: peak RSS %.1f MiB over the bound of %.1f MiB" % (rss / 2**20, bound / 2**20))
    check(tadoc("verify", arc).returncode == 0, "memory: verify")
    log("memory: %.1f MB corpus, --memory 28 MiB, peak RSS %.1f MiB (this test's own %.1f MiB, not counted)"
        % (n / 1e6, rss / 2**20, own / 2**20))
    with open(arc, "rb") as f:
        from_dir = f.read()
    # the same corpus as a tar stream on standard input: streamed, not held
    tarf = os.path.join(work, "mem.tar")
    subprocess.run(["tar", "--sort=name", "--format=pax", "-C", src, "-cf", tarf, "."], check=True)
    with open(tarf, "rb") as stdin:
        (status, rss_tar), err = peak(stdin, "-")
    check(status == 0, "memory: compress - failed: %r" % err)
    check(rss_tar < limit, "memory: tar stream: peak RSS %.1f MiB over the bound of %.1f MiB"
          % (rss_tar / 2**20, bound / 2**20))
    with open(arc, "rb") as f:
        same = f.read() == from_dir
    check(same, "memory: the tar stream's archive differs from the directory's")
    log("memory: the same corpus as a %.1f MB tar stream on stdin: peak RSS %.1f MiB, the same archive bytes"
        % (os.path.getsize(tarf) / 1e6, rss_tar / 2**20))
    os.unlink(tarf)
    shutil.rmtree(src)
    os.unlink(arc)


def check_bad_args(work):
    """Bad input (issue 22 item 9): one message naming the option or the
    file and the problem, a non-zero exit, and an existing archive left as
    it was (compress -o over it, add, compact, a bad tar stream)."""
    src = os.path.join(work, "tiny")
    os.makedirs(src, exist_ok=True)
    with open(os.path.join(src, "a"), "w") as f:
        f.write("a b c\n")
    out = os.path.join(work, "bad.tadoc")
    for opts, what in ((["--shard-size", "0"], "shard-size"), (["--memory", "1M"], "memory"),
                       (["-j", "0"], "-j"), (["--shard-size", "1G", "--memory", "2G"], "memory")):
        r = tadoc("compress", "-q", "-o", out, *opts, src)
        msg = r.stderr.decode(errors="replace")
        check(r.returncode == 2 and what in msg and msg.count("\n") == 1 and not os.path.exists(out),
              "compress %s: exit %d, %r" % (opts, r.returncode, msg))
    # an archive that exists: every refusal leaves its bytes (and journal) as they were
    old = os.path.join(work, "old.tadoc")
    compress(src, old, "--shard-size", "64K")
    with open(old, "rb") as f:
        before = f.read()

    def unchanged(what):
        with open(old, "rb") as f:
            check(f.read() == before, "%s changed the archive" % what)
        left = [n for n in os.listdir(work) if n.startswith("old.tadoc.") or n.startswith(".tadoc-shard.")]
        check(not left, "%s left %s behind" % (what, left))

    for cmd in (["compress", "-q", "-o", old], ["add", old], ["compact", old]):
        for opts, what in ((["--shard-size", "0"], "--shard-size '0'"), (["--memory", "1M"], "--memory 1 MiB is too small"),
                           (["--shard-size", "1G", "--memory", "2G"], "too small for shards of 1024 MiB")):
            args = cmd[:1] + opts + cmd[1:] + ([src] if cmd[0] != "compact" else [])
            r = tadoc(*args)
            msg = r.stderr.decode(errors="replace")
            check(r.returncode == 2 and what in msg and msg.count("\n") == 1,
                  "%s: exit %d, %r" % (" ".join(map(str, args)), r.returncode, msg))
            unchanged(" ".join(map(str, args)))
    with open(os.path.join(work, "not.tar"), "wb") as f:
        f.write(b"hello, I am text\n" * 100)
    with open(os.path.join(work, "not.tar"), "rb") as stdin:
        r = subprocess.run([TADOC, "compress", "-q", "--format", "5", "-o", old, "-"], stdin=stdin,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    check(r.returncode == 1 and r.stderr == b"tadoc: -: not a tar archive\n", "compress - of text over an archive: %d %r"
          % (r.returncode, r.stderr))
    unchanged("compress - of text")
    # a tar cut inside a file's data, into an existing archive
    big = os.path.join(work, "tarsrc")
    gen_big(big, random.Random(3))
    tarred = subprocess.run(["tar", "-C", big, "-cf", "-", "."], stdout=subprocess.PIPE, check=True).stdout
    r = subprocess.run([TADOC, "compress", "-q", "--format", "5", "--shard-size", "64K", "-o", old, "-"],
                       input=tarred[:len(tarred) // 2], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    msg = r.stderr.decode(errors="replace")
    check(r.returncode == 1 and msg.startswith("tadoc: -: truncated tar archive at entry ") and msg.count("\n") == 1,
          "compress - of a cut tar over an archive: %d %r" % (r.returncode, msg))
    unchanged("compress - of a cut tar")
    # tadoc add to a format 4 archive: says how to convert, names it, leaves it
    a4 = os.path.join(work, "old4.tadoc")
    compress(src, a4, "--format", 4)
    with open(a4, "rb") as f:
        b4 = f.read()
    r = tadoc("add", a4, src)
    msg = r.stderr.decode(errors="replace")
    check(r.returncode == 1 and a4 in msg and "format 4" in msg and "tadoc compact --format 5" in msg
          and msg.count("\n") == 1, "add to format 4: %d %r" % (r.returncode, msg))
    with open(a4, "rb") as f:
        check(f.read() == b4, "a refused add changed the format 4 archive")
    log("bad arguments and input: one message, exit 2 (usage) or 1, the archive untouched")


def shard_lines(arc):
    return [l for l in tadoc("info", arc).stdout.decode().splitlines() if l.startswith("  shard ")]


def check_unpack_damaged(work):
    """A format 5 archive with a bit flipped in its last shard: unpack
    writes nothing (every shard is checked before the first file), one
    message naming the archive; and an archive written inside its own
    input tree holds none of its build's temporary shard files."""
    src = os.path.join(work, "dmg")
    os.makedirs(src)
    rnd = random.Random(3)
    for n in ("a", "b"):
        with open(os.path.join(src, n), "w") as f:
            f.write(" ".join(str(rnd.randrange(10 ** 9)) for _ in range(30000)))
    arc = os.path.join(work, "dmg.tadoc")
    compress(src, arc, "--shard-size", "65537")
    with open(arc, "r+b") as f:
        f.seek(os.path.getsize(arc) * 3 // 4)   # inside the last shard's image
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x10]))
    out = os.path.join(work, "dmg-out")
    r = tadoc("unpack", arc, out)
    err = r.stderr.decode(errors="replace")
    check(r.returncode == 1 and err.count("\n") == 1 and arc in err and "checksum" in err,
          "unpack of a damaged shard: exit %d, %r" % (r.returncode, err))
    check(not os.path.exists(out) or not os.listdir(out), "unpack of a damaged shard wrote %r" %
          (os.listdir(out) if os.path.exists(out) else None))
    # the output inside the input tree: its shard temporaries are not input
    os.makedirs(os.path.join(src, "z"))
    inner = os.path.join(src, "z", "out.tadoc")
    compress(src, inner, "--shard-size", "65537")
    r = tadoc("ls", inner)
    names = r.stdout.decode(errors="replace").split()
    check(r.returncode == 0 and not [x for x in names if x.startswith("z/")],
          "an archive inside its input tree lists its own files: %r" % [x for x in names if x.startswith("z/")][:3])
    log("unpack of a damaged shard writes nothing; an archive inside its input holds no temporaries")


def check_add(work):
    """tadoc add: new shards after the old ones (kept byte for byte), old and
    new files read exact through unpack and a mount, refusals."""
    rnd = random.Random(11)
    a, b = os.path.join(work, "addA"), os.path.join(work, "addB")
    gen_big(a, rnd)
    subprocess.run([sys.executable, os.path.join(HERE, "gen_adversarial.py"), b], check=True)
    arc = os.path.join(work, "add.tadoc")
    compress(a, arc, "--shard-size", 64 << 10)
    before = shard_lines(arc)
    with open(arc, "rb") as f:
        old = f.read()
    env = dict(os.environ, SOURCE_DATE_EPOCH="1700000000")
    r = tadoc("add", "--shard-size", 64 << 10, arc, os.path.join(b, "text"), os.path.join(b, "deep"), env=env)
    check(r.returncode == 0, "add: %s" % r.stderr)
    r = tadoc("add", "--shard-size", 64 << 10, arc, os.path.join(b, "names"), "--to", "/big//./more/", env=env)  # options after the inputs too; empty and '.' components left out
    check(r.returncode == 0, "add --to: %s" % r.stderr)
    after = shard_lines(arc)
    check(after[:len(before)] == before and len(after) > len(before),
          "add: the old shards are not kept (%d before, %d after)" % (len(before), len(after)))
    # the old shard images, byte for byte, at the start of the new archive
    with open(arc, "rb") as f:
        new = f.read()
    n0 = sum(int(l.split()[7]) for l in before)  # archive bytes of the old shards
    hs = int.from_bytes(old[12:16], "little")  # header_size: the first shard follows the header
    check(new[hs:hs + n0] == old[hs:hs + n0], "add: old shard images changed")
    check(tadoc("verify", arc).returncode == 0, "add: verify")
    # the expected tree: A, plus B's members under their base names
    want = os.path.join(work, "addW")
    shutil.copytree(a, want, symlinks=True)
    shutil.copytree(os.path.join(b, "text"), os.path.join(want, "text"), symlinks=True)
    shutil.copytree(os.path.join(b, "deep"), os.path.join(want, "deep"), symlinks=True)
    shutil.copytree(os.path.join(b, "names"), os.path.join(want, "big", "more", "names"), symlinks=True)
    out = os.path.join(work, "u-add")
    check(tadoc("unpack", arc, out).returncode == 0, "add: unpack")
    r = subprocess.run(["diff", "-r", "--no-dereference", want, out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    check(r.returncode == 0, "add: unpack differs: %s" % r.stdout[:500])
    corpus = oracle.Corpus(want)
    words, scopes = check_queries(arc, want, corpus, rnd, "add")
    check_mount(arc, want, corpus, words, scopes, work, "add")
    # refusals: an existing path (named), a format 4 archive; the archive unchanged
    with open(arc, "rb") as f:
        cur = f.read()
    r = tadoc("add", arc, os.path.join(b, "text"))
    check(r.returncode != 0 and b"text" in r.stderr and b"already" in r.stderr,
          "add of an existing path: %d %r" % (r.returncode, r.stderr))
    r = tadoc("add", "--to", "big/../x", arc, os.path.join(b, "text"))
    check(r.returncode != 0 and b"'..'" in r.stderr and r.stderr.count(b"\n") == 1,
          "add --to with a '..' component: %d %r" % (r.returncode, r.stderr))
    with open(arc, "rb") as f:
        check(f.read() == cur, "a refused add changed the archive")
    a4 = os.path.join(work, "add4.tadoc")
    compress(a, a4, "--format", 4)
    r = tadoc("add", a4, os.path.join(b, "text"))
    check(r.returncode != 0 and b"compact --format 5" in r.stderr, "add to format 4: %r" % r.stderr)
    log("add: old shards kept, unpack and mount exact, refusals")

def recorded_size(arc):
    """The `shard size` line of tadoc info: a number, or its text."""
    for line in tadoc("info", arc).stdout.decode().splitlines():
        if line.startswith("shard size"):
            v = line.split(None, 2)[2]
            return int(v) if v.isdigit() else v
    return None


def check_shard_size(work):
    """The shard size is recorded in the archive: tadoc info shows it, add
    and compact without --shard-size cut at it (the same bytes as giving it),
    with --shard-size at the one given (then recorded); an archive from
    before (the field 0) shows 'not recorded' and gets the default."""
    import archive_patch
    rnd = random.Random(31)
    a, b = os.path.join(work, "ssA"), os.path.join(work, "ssB")
    gen_unique(a, rnd)
    gen_unique(b, rnd)
    env = dict(os.environ, SOURCE_DATE_EPOCH="1700000000")
    arc = os.path.join(work, "ss.tadoc")
    compress(a, arc, "--shard-size", "48K")
    check(recorded_size(arc) == 48 << 10, "compress --shard-size 48K: info says %r" % recorded_size(arc))

    def variant(name, *cmd):
        """A copy of arc after `tadoc CMD... COPY [ARGS]` (COPY replaces '@')."""
        out = os.path.join(work, name)
        shutil.copyfile(arc, out)
        r = tadoc(*[out if c == "@" else c for c in cmd], env=env)
        check(r.returncode == 0, "%s: %s" % (" ".join(map(str, cmd)), r.stderr))
        with open(out, "rb") as f:
            return out, f.read()

    implied, ib = variant("ss-add1.tadoc", "add", "-j", 2, "@", b)
    _, gb = variant("ss-add2.tadoc", "add", "-j", 1, "--shard-size", 48 << 10, "@", b)
    check(ib == gb and recorded_size(implied) == 48 << 10,
          "add without --shard-size differs from add --shard-size 48K (recorded %r)" % recorded_size(implied))
    check(len(shard_lines(implied)) > len(shard_lines(arc)) + 4, "add: %d shards" % len(shard_lines(implied)))
    other, _ = variant("ss-add3.tadoc", "add", "--shard-size", "32K", "@", b)
    check(recorded_size(other) == 32 << 10, "add --shard-size 32K: recorded %r" % recorded_size(other))
    _, cb = variant("ss-cmp1.tadoc", "compact", "--full", "@")
    _, gb = variant("ss-cmp2.tadoc", "compact", "--full", "--shard-size", 48 << 10, "@")
    check(cb == gb, "compact --full without --shard-size differs from --shard-size 48K")
    # an archive from before the field was filled: 0 there
    old = os.path.join(work, "ss-old.tadoc")
    shutil.copyfile(arc, old)
    p = archive_patch.Archive(old)
    _, (_, _, off, _, _) = p.section(1)   # META: td_disk_meta, shard_size is its 16th u64
    p.b[off + 15 * 8:off + 16 * 8] = bytes(8)
    p.resum()
    p.save()
    check(tadoc("verify", old).returncode == 0, "the archive with no shard size recorded does not verify")
    check(isinstance(recorded_size(old), str) and "not recorded" in recorded_size(old),
          "info of an archive without a recorded shard size: %r" % recorded_size(old))
    arc = old
    _, ib = variant("ss-old1.tadoc", "add", "@", b)
    _, gb = variant("ss-old2.tadoc", "add", "--shard-size", "64M", "@", b)
    check(ib == gb, "add to an archive without a recorded size differs from add --shard-size 64M")
    log("shard size: recorded (info), reused by add and compact, given sizes recorded, older archives: the default")


def shard_images(arc):
    """The shard images of a format 5 archive, in order: they follow the
    header (8-byte aligned), their sizes from `tadoc info`."""
    with open(arc, "rb") as f:
        data = f.read()
    at = int.from_bytes(data[12:16], "little")  # header_size
    out = []
    for line in shard_lines(arc):
        n = int(line.split()[7])
        out.append(data[at:at + n])
        at += (n + 7) & ~7
    return out


def gen_unique(root, rnd):
    """Files whose every 32-byte window is their own (random tokens), two
    of them larger than a 64 KiB shard, a symlink."""
    def text(n):
        toks, size = [], 0  # size: the tokens' bytes plus one separator each
        while size < n:
            toks.append("".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randrange(3, 10))))
            size += len(toks[-1]) + 1
        return "".join(t + rnd.choice(" \n  ,") for t in toks)
    for d in ("a", "b", "c"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
        for i in range(16):
            with open(os.path.join(root, d, "f%02d.txt" % i), "w") as f:
                f.write(text(rnd.randrange(2000, 30000)))
    for name in ("a/big.txt", "c/huge.txt"):
        with open(os.path.join(root, name), "w") as f:
            f.write(text(200000))
    os.symlink("../a/f00.txt", os.path.join(root, "c", "link"))


def shard_owners(images, contents, work):
    """For each shard image: the files (of contents: path -> bytes) it
    holds a piece of, found by the pieces' bytes after unpacking it."""
    out = []
    for i, img in enumerate(images):
        p, d = os.path.join(work, "img%d" % i), os.path.join(work, "img%d.d" % i)
        with open(p, "wb") as f:
            f.write(img)
        check(tadoc("unpack", p, d).returncode == 0, "compact: unpack of shard image %d" % i)
        own = set()
        for fn in files_of(d):
            with open(os.path.join(d, fn), "rb") as f:
                c = f.read()
            for path, t in contents.items():
                if (len(c) >= 32 and c in t) or (len(c) < 32 and (t.startswith(c) or t.endswith(c))):
                    own.add(path)
        out.append(own)
        os.unlink(p)
        shutil.rmtree(d)
    return out


def check_compact(work):
    """tadoc compact of a format 5 archive edited through a writable mount
    rebuilds exactly the shards holding text of the edited, deleted or moved
    files (found from the old shard images' bytes); the other images are in
    the new archive byte for byte; the result equals the shadow tree
    (unpack, a mount, modes, the oracle's counts)."""
    if not have_fuse():
        log("compact: no FUSE, skipped")
        return
    rnd = random.Random(23)
    src, shadow = os.path.join(work, "cmpS"), os.path.join(work, "cmpW")
    gen_unique(src, rnd)
    shutil.copytree(src, shadow, symlinks=True)
    arc = os.path.join(work, "cmp.tadoc")
    compress(src, arc, "--shard-size", 64 << 10)
    contents = {}
    for fn in files_of(src):
        with open(os.path.join(src, fn), "rb") as f:
            contents[fn] = f.read()
    old = shard_images(arc)
    old_sums = [l.split()[-1] for l in shard_lines(arc)]
    owners = shard_owners(old, contents, work)
    mnt = os.path.join(work, "mnt-cmp")
    L.mount(arc, mnt, "rw")
    try:
        for root in (mnt, shadow):
            with open(os.path.join(root, "a/f03.txt"), "a") as f:  # append
                f.write("appended words here\n")
            fd = os.open(os.path.join(root, "c/huge.txt"), os.O_WRONLY)  # overwrite inside a big file
            os.pwrite(fd, b"OVERWRITTEN middle text", 100000)
            os.close(fd)
            os.unlink(os.path.join(root, "b/f07.txt"))  # delete
            os.rename(os.path.join(root, "b/f11.txt"), os.path.join(root, "c/moved.txt"))  # another directory
            os.rename(os.path.join(root, "a/f09.txt"), os.path.join(root, "a/renamed.txt"))  # same directory
            os.chmod(os.path.join(root, "b/f02.txt"), 0o600)
            with open(os.path.join(root, "b/new.txt"), "w") as f:
                f.write("a new file with new words\n")
            os.mkdir(os.path.join(root, "newdir"))
            with open(os.path.join(root, "newdir/inner.txt"), "w") as f:
                f.write("inner text\n" * 50)
    finally:
        L.unmount(mnt)
    changed = {"a/f03.txt", "c/huge.txt", "b/f07.txt", "b/f11.txt"}
    dirty = [i for i, own in enumerate(owners) if own & changed]
    kept = [i for i in range(len(old)) if i not in dirty]
    check(0 < len(dirty) < len(old) // 2, "compact: %d of %d shards hold the edited files" % (len(dirty), len(old)))
    # kill -9 of the compaction at random moments: the archive always
    # verifies and is the old one (its journal kept) or the new one
    old_ls = tadoc("ls", arc).stdout
    saved = os.path.join(work, "cmp-saved")
    shutil.copyfile(arc, saved)
    shutil.copyfile(arc + ".journal", saved + ".journal")
    kills = {"old": 0, "new": 0}
    for i in range(8):
        p = subprocess.Popen([TADOC, "compact", "--shard-size", str(64 << 10), arc], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        try:
            p.wait(timeout=rnd.uniform(0.0, 0.6))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        check(tadoc("verify", arc).returncode == 0, "compact kill %d: the archive does not verify" % i)
        if tadoc("ls", arc).stdout == old_ls:  # the journal still holds the edits (maybe a COMPACT record more)
            check(os.path.getsize(arc + ".journal") >= os.path.getsize(saved + ".journal"),
                  "compact kill %d: the old archive lost its journal" % i)
            kills["old"] += 1
        else:
            r = tadoc("ls", arc).stdout
            check(b"newdir/inner.txt" in r and b"b/f07.txt" not in r, "compact kill %d: neither old nor new" % i)
            kills["new"] += 1
        shutil.copyfile(saved, arc)
        shutil.copyfile(saved + ".journal", arc + ".journal")
    log("compact kill -9: 8 iterations, old %d, new %d, always verifies" % (kills["old"], kills["new"]))
    # reproducible: the same edits compacted a second apart with
    # SOURCE_DATE_EPOCH give the same bytes (a copy of the archive and journal)
    arc2 = os.path.join(work, "cmp2.tadoc")
    shutil.copyfile(arc, arc2)
    shutil.copyfile(arc + ".journal", arc2 + ".journal")
    sde = dict(os.environ, SOURCE_DATE_EPOCH="1600000000")
    r = tadoc("compact", "--shard-size", 64 << 10, "-j", 2, arc, env=sde)
    time.sleep(1.1)
    r2 = tadoc("compact", "--shard-size", 64 << 10, "-j", 1, arc2, env=sde)
    # what the killed compactions left (their shard files too) the next one removed
    left = [f for f in os.listdir(work) if f.startswith("cmp.tadoc.") and ".tmp." in f]
    check(r.returncode == 0 and not left,
          "compact after kills: left %s, %r" % (left[:3], r.stderr[:300]))
    with open(arc, "rb") as f1, open(arc2, "rb") as f2:
        check(r2.returncode == 0 and f1.read() == f2.read(), "compact: not reproducible (-j 2 and -j 1, a second apart)")
    check(r.returncode == 0 and b"%d kept of %d" % (len(kept), len(old)) in r.stdout,
          "compact: %r %r (expected %d of %d shards kept)" % (r.stdout, r.stderr, len(kept), len(old)))
    check(tadoc("verify", arc).returncode == 0, "compact: verify")
    new = shard_images(arc)
    new_sums = [l.split()[-1] for l in shard_lines(arc)]
    check(new[:len(kept)] == [old[i] for i in kept] and new_sums[:len(kept)] == [old_sums[i] for i in kept],
          "compact: the unedited shards are not the first ones, byte for byte")
    check(not any(old[i] in new for i in dirty), "compact: an edited shard is still there")
    out = os.path.join(work, "u-cmp")
    check(tadoc("unpack", arc, out).returncode == 0, "compact: unpack")
    r = subprocess.run(["diff", "-r", "--no-dereference", shadow, out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    check(r.returncode == 0, "compact: unpack differs from the shadow: %s" % r.stdout[:500])
    for fn in files_of(shadow):
        m0, m1 = os.lstat(os.path.join(shadow, fn)).st_mode, os.lstat(os.path.join(out, fn)).st_mode
        check(m0 == m1, "compact: %s has mode %o, the shadow %o" % (fn, m1, m0))
    shutil.rmtree(out)
    corpus = oracle.Corpus(shadow)
    words, scopes = check_queries(arc, shadow, corpus, rnd, "compact")
    check_mount(arc, shadow, corpus, words, scopes, work, "compact")
    # --full: a repack without edits rebuilds every shard, same tree
    r = tadoc("compact", "--full", "--shard-size", 256 << 10, arc)
    check(r.returncode == 0 and b"0 kept of %d" % len(new) in r.stdout, "compact --full: %r %r" % (r.stdout, r.stderr))
    check(tadoc("verify", arc).returncode == 0 and len(shard_lines(arc)) < len(new), "compact --full: verify, fewer shards")
    check(tadoc("unpack", arc, out).returncode == 0, "compact --full: unpack")
    r = subprocess.run(["diff", "-r", "--no-dereference", shadow, out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    check(r.returncode == 0, "compact --full: unpack differs from the shadow: %s" % r.stdout[:500])
    log("compact: %d of %d shards rebuilt (%s), %d kept byte for byte, %d in all now; equals the shadow; "
        "--full repacks into %d" % (len(dirty), len(old), dirty, len(kept), len(new), len(shard_lines(arc))))


def check_add_kill(work, iters=10):
    """kill -9 of tadoc add at random moments: the archive always verifies
    and holds the old set of files or the new one, never a mix."""
    rnd = random.Random(13)
    a, extra = os.path.join(work, "killA"), os.path.join(work, "killB")
    gen_big(a, rnd)
    os.makedirs(extra, exist_ok=True)
    with open(os.path.join(extra, "more.txt"), "w") as f:
        f.write(" ".join(rnd.choice(["alpha", "beta", "gamma"]) for _ in range(200000)))
    arc = os.path.join(work, "kill.tadoc")
    compress(a, arc, "--shard-size", 64 << 10)
    old_ls = tadoc("ls", arc).stdout
    outcomes = {"old": 0, "new": 0}
    for i in range(iters):
        shutil.copyfile(arc, arc + ".orig")
        p = subprocess.Popen([TADOC, "add", "--shard-size", str(64 << 10), arc, os.path.join(extra, "more.txt")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time_s = rnd.uniform(0.0, 0.8)
        try:
            p.wait(timeout=time_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        ok = tadoc("verify", arc).returncode == 0
        ls = tadoc("ls", arc).stdout
        if ls == old_ls:
            outcomes["old"] += 1
        elif set(ls.splitlines()) == set(old_ls.splitlines()) | {b"more.txt"}:
            outcomes["new"] += 1
            with open(os.path.join(extra, "more.txt"), "rb") as f:
                check(tadoc("cat", arc, "more.txt").stdout == f.read(), "add kill %d: more.txt differs" % i)
            os.replace(arc + ".orig", arc)  # back to the old set for the next round
        else:
            check(False, "add kill %d: neither the old nor the new set of files" % i)
        check(ok, "add kill %d (after %.2f s): the archive does not verify" % (i, time_s))
        if os.path.exists(arc + ".orig"):
            os.unlink(arc + ".orig")
        for f in os.listdir(work):  # what a killed add leaves: its temporaries
            if (f.startswith("kill.tadoc.") and ".tmp." in f) or f.startswith(".tadoc-shard."):
                os.unlink(os.path.join(work, f))
    check(outcomes["old"] > 0 or outcomes["new"] > 0, "add kill: no outcome")
    log("add kill -9: %d iterations, old set %d, new set %d, always verifies" % (iters, outcomes["old"], outcomes["new"]))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--gen":
        gen_corpus(sys.argv[2], int(sys.argv[3]), random.Random(5))
        return
    work = tempfile.mkdtemp(prefix="shard-test.")
    try:
        check_memory(work)
        check_bad_args(work)
        adv = os.path.join(work, "adv")
        subprocess.run([sys.executable, os.path.join(HERE, "gen_adversarial.py"), adv], check=True)
        gen_big(adv, random.Random(7))
        check_tree(adv, 64 << 10, work, "adversarial")
        check_idents(work)
        check_grammar_threads(work)
        check_add(work)
        check_unpack_damaged(work)
        check_shard_size(work)
        check_compact(work)
        check_add_kill(work)
        real = None if os.environ.get("SHARD_REAL") == "0" else real_slice(work)
        if real:
            check_tree(real, 1 << 20, work, "real", jobs=(2,))
        else:
            log(oracle.corpus_skip("spam and gcide"))
    finally:
        L.cleanup()
        shutil.rmtree(work, ignore_errors=True)
    L.finish()


if __name__ == "__main__":
    main()
