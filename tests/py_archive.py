#!/usr/bin/env python3
"""py_archive: the Python package's tadoc.Archive against the original files and tests/oracle.py.

On the generated adversarial tree (tests/gen_adversarial.py) as a format 4
archive and a format 5 one (small shards, so files are cut between shards),
and sotu (when ~/.cache/tadoc-corpora has it) as a format 5 one:
  - ls, stat/lstat, readlink, read (whole, random ranges, past the end)
    and open() (seek, tell, sequential and random reads, readline) equal
    the originals (os.listdir, os.lstat, the bytes on disk);
  - count, search (words and phrases; corpus, directory and file scopes),
    top, vector, files, ngrams and fuzzy equal the oracle; the analytics on
    format 5 either equal the oracle or raise TadocError EOPNOTSUPP (the
    engine does not read shards for analytics yet);
  - 8 threads reading, counting and searching one Archive at once get the
    original bytes and the oracle's answers, and close() from another
    thread meanwhile leaves each call with a right answer or ValueError;
  - bad input raises TadocError (an OSError) with an errno and the engine's
    message naming the file: missing archive, not an archive, truncated and
    damaged archives, missing paths, a path through a file, a directory
    read, bad words, bad k, n and offsets; a closed archive raises
    ValueError.
Env: TADOC, TADOC_LIB (build/libtadoc.so), PYTHONPATH (python/).
"""
import errno
import os
import random
import shutil
import stat
import tempfile
import threading
import time

import py_common as C
from py_common import check, same, raises, log

import tadoc

rng = random.Random(25)


def tree_entries(root):
    """{relpath bytes: lstat} of the original tree."""
    return {rel: st for rel, st in C.oracle.entries(root)}


def check_tree(a, root, name):
    ents = tree_entries(root)
    rootb = os.fsencode(root)
    # ls of the root and every directory, as bytes and as str
    dirs = [b""] + [r for r, st in ents.items() if stat.S_ISDIR(st.st_mode)]
    for d in dirs:
        want = sorted(os.listdir(os.path.join(rootb, d) if d else rootb))
        same(a.ls(d), want, "%s: ls %r" % (name, d))
    same(a.ls(), sorted(os.listdir(root)), "%s: ls() as str" % name)
    # stat / lstat / readlink
    files = []
    for rel, st in ents.items():
        s = a.lstat(rel)
        ok = (s.st_mode == st.st_mode and s.st_mtime_ns == st.st_mtime_ns
              and (stat.S_ISDIR(st.st_mode) or s.st_size == st.st_size))
        if not check(ok, "%s: lstat %r: %r vs %r" % (name, rel, s, st)):
            continue
        if stat.S_ISLNK(st.st_mode):
            same(a.readlink(rel), os.readlink(os.path.join(rootb, rel)), "%s: readlink %r" % (name, rel))
        elif stat.S_ISREG(st.st_mode):
            files.append(rel)
    # a symlink to a file inside the archive reads as its target
    for rel, st in ents.items():
        if stat.S_ISLNK(st.st_mode):
            t = os.path.normpath(os.path.join(os.path.dirname(rel), os.readlink(os.path.join(rootb, rel))))
            if t in ents and stat.S_ISREG(ents[t].st_mode):
                same(a.read(rel), open(os.path.join(rootb, t), "rb").read(), "%s: read via symlink %r" % (name, rel))
                same(a.stat(rel).st_size, ents[t].st_size, "%s: stat follows %r" % (name, rel))
    # whole files, word counts, random ranges, and file objects
    for rel in files:
        data = open(os.path.join(rootb, rel), "rb").read()
        if not same(a.read(rel), data, "%s: read %r" % (name, rel)):
            continue
        same(a.stat(rel).st_nwords, len(C.oracle.words_of(data)), "%s: nwords %r" % (name, rel))
    sample = rng.sample(files, min(30, len(files)))
    big = sorted(files, key=lambda r: -ents[r].st_size)[:5]
    for rel in dict.fromkeys(big + sample):
        data = open(os.path.join(rootb, rel), "rb").read()
        n = len(data)
        for _ in range(8):
            off = rng.randrange(n + 10)
            size = rng.choice([0, 1, 7, 100, 4096, 70000, -1])
            want = data[off:] if size < 0 else data[off:off + size]
            if a.read(rel, off, size) != want:
                check(False, "%s: read %r %d %d" % (name, rel, off, size))
                break
        with a.open(rel) as f:
            check(f.seekable() and f.readable(), "%s: open %r seekable" % (name, rel))
            got = b""
            while True:
                chunk = f.read(rng.choice([1, 100, 5000, 65536]))
                if not chunk:
                    break
                got += chunk
            same(got, data, "%s: sequential reads of %r" % (name, rel))
            for _ in range(6):
                off = rng.randrange(n + 1)
                f.seek(off)
                same(f.tell(), off, "%s: tell %r" % (name, rel))
                same(f.read(333), data[off:off + 333], "%s: seek+read %r @%d" % (name, rel, off))
            f.seek(-min(n, 50), os.SEEK_END)
            same(f.read(), data[-min(n, 50):] if n else b"", "%s: SEEK_END %r" % (name, rel))
            f.seek(0)
            same(f.readline(), data.split(b"\n", 1)[0] + (b"\n" if b"\n" in data else b""),
                 "%s: readline %r" % (name, rel))
    return files


def scopes(c, files, k=8):
    dirs = [r for r, _ in c.entries if c.kind[r] == "d"]
    return [b""] + rng.sample(dirs, min(3, len(dirs))) + rng.sample(files, min(k, len(files)))


def check_queries(a, c, files, name, fmt):
    vocab = sorted(w for w in c.counter(b"") if len(w) <= 600)
    top = [w for w, _ in c.top(b"", 10)]
    phr = []
    for f in rng.sample([f for f in files if len(c.words[f]) >= 3], 6):
        ws = c.words[f]
        i = rng.randrange(len(ws) - 1)
        phr.append(b" ".join(w for w, _ in ws[i:i + rng.choice((2, 3))]))
    for s in scopes(c, files, 5):
        sp = None if s == b"" else s
        label = "%s:%r" % (name, s)
        for q in top[:2] + rng.sample(vocab, 3) + [b"zzqqxx"] + rng.sample(phr, 2):
            hs = c.hits(q, s)
            if fmt == 5 and b" " in q:  # phrases are analytics: not on shards yet, or equal the oracle
                try:
                    n = a.count(q, sp)
                except tadoc.TadocError as e:
                    check(e.errno == errno.EOPNOTSUPP, "%s count %r: %s" % (label, q[:30], e))
                    continue
                same(n, len(hs), "%s count %r" % (label, q[:30]))
            same(a.count(q, sp), len(hs), "%s count %r" % (label, q[:30]))
            got = a.search(q.decode("utf-8", "surrogateescape"), os.fsdecode(s) if sp else None)
            same([(os.fsencode(p), o) for p, o in got], hs, "%s search %r" % (label, q[:30]))
    same(a.count("the"), len(c.hits(b"the", b"")), "%s: count(str)" % name)
    same(a.words(), sum(len(v) for v in c.words.values()), "%s: words()" % name)


def analytics(a, c, files, name, fmt):
    """The analytics against the oracle; on format 5, EOPNOTSUPP is accepted
    (the engine's analytics do not read shards yet)."""
    def run(fn, what):
        try:
            return fn()
        except tadoc.TadocError as e:
            if fmt == 5 and e.errno == errno.EOPNOTSUPP:
                return "unsupported"
            check(False, "%s: %s raised %s" % (name, what, e))
            return None

    probe = run(lambda: a.top(1), "top")
    if probe == "unsupported":
        log("%s: analytics on format 5 are not supported by the engine yet (EOPNOTSUPP): "
            "checked the error only" % name)
        raises(lambda: a.vector(), tadoc.TadocError, errno.EOPNOTSUPP, ["format 5", a.path], "%s: vector" % name)
        raises(lambda: a.word_counts(), tadoc.TadocError, errno.EOPNOTSUPP, ["format 5"], "%s: word_counts" % name)
        return
    enc = lambda items: [(w.encode("utf-8", "surrogateescape"), n) for w, n in items]  # noqa: E731
    top = [w for w, _ in c.top(b"", 10)]
    for s in scopes(c, files, 5):
        sp = None if s == b"" else s
        label = "%s:%r" % (name, s)
        for n in (0, 1, 20):
            if n == 0 and s == b"" and len(c.counter(b"")) > 50000:
                continue
            same(enc(a.top(n, sp)), c.top(s, n), "%s top %d" % (label, n))
        same(enc(a.vector(sp)), c.vector(s), "%s vector" % label)
        same(sorted(enc(a.word_counts(sp).items())), c.vector(s), "%s word_counts" % label)
        for ln, k in ((2, 20), (3, 5), (5, 0 if s else 10)):
            same([(tuple(x.encode() for x in g), n) for g, n in a.ngrams(ln, k, sp)], c.ngrams(s, ln, k),
                 "%s ngrams %d %d" % (label, ln, k))
        if not s or c.kind.get(s) == "d":
            for q in top[:2] + [top[0] + b" " + top[1]]:
                same([(os.fsencode(p), n) for p, n in a.files(q, 0, sp)], c.files(q, s), "%s files %r" % (label, q))
            same([(os.fsencode(p), n) for p, n in a.files(top[1], 2, sp)], c.files(top[1], s)[:2],
                 "%s files -n 2" % label)
    # n-grams as one batch (ngrams_many: td_ngram_batch, td_gpu_ngram_batch
    # with gpu="on" where a GPU is), every length, per file and per directory
    qs, want = [], []
    for s in scopes(c, files, 6):
        for ln in range(2, 9):
            for k in ((0, 20) if ln in (2, 3) else (5,)):
                if k == 0 and s == b"":
                    continue
                qs.append((ln, k, None if s == b"" else s))
                want.append(c.ngrams(s, ln, k))
    gpus = ("off", "on") if tadoc._lib.lib().td_gpu_available() else ("off",)
    for gpu in gpus:
        got = a.ngrams_many(qs, gpu=gpu)
        for q, g, w in zip(qs, got, want):
            same([(tuple(x.encode("utf-8", "surrogateescape") for x in t), n) for t, n in g], w,
                 "%s ngrams_many %r (gpu %s)" % (name, q, gpu))
    for q in ["cafe", "日本語", "the", "x86_64", "zzqqxxyy", top[3].decode()]:
        for k in (0, 1, 2):
            same([(d, n, w.encode()) for d, n, w in a.fuzzy(q, k)], c.fuzzy(q.encode(), k, b""),
                 "%s fuzzy %r %d" % (name, q, k))
    # the same words as one batch (fuzzy_many), on every core and with gpu="auto"
    qs = ["cafe", "日本語", "the", "x86_64", "zzqqxxyy", top[3].decode()]
    for k in (1, 2):
        want = [a.fuzzy(q, k) for q in qs]
        for gpu in ("off", "auto"):
            same(a.fuzzy_many(qs, k, gpu=gpu), want, "%s fuzzy_many %d %s" % (name, k, gpu))


def concurrent(a, root, files, c, name):
    rootb = os.fsencode(root)
    datas = {f: open(os.path.join(rootb, f), "rb").read() for f in files}
    words = [w for w, _ in c.top(b"", 30)]
    counts = {w: len(c.hits(w, b"")) for w in words}  # the oracle once, not in each thread's round
    errors = []

    def worker(seed, rounds):
        r = random.Random(seed)
        try:
            for _ in range(rounds):
                f = r.choice(files)
                d = datas[f]
                off = r.randrange(len(d) + 1)
                if a.read(f, off, 3000) != d[off:off + 3000]:
                    errors.append("read %r %d" % (f, off))
                with a.open(f) as fo:
                    fo.seek(off)
                    if fo.read(2000) != d[off:off + 2000]:
                        errors.append("open+read %r %d" % (f, off))
                w = r.choice(words)
                if a.count(w) != counts[w]:
                    errors.append("count %r" % w)
                if r.random() < 0.2 and len(a.search(w, f)) != len(c.hits(w, f)):
                    errors.append("search %r %r" % (w, f))
        except Exception as e:  # noqa: BLE001
            errors.append("%s: %r" % (type(e).__name__, e))

    ts = [threading.Thread(target=worker, args=(i, 80)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check(not errors, "%s: 8 threads: %d wrong answers, first %r" % (name, len(errors), errors[:3]))

    # close() while threads read: each call answers right or raises ValueError
    b = tadoc.Archive(a.path)
    stop = threading.Event()
    bad = []

    def reader(seed):
        r = random.Random(seed)
        while not stop.is_set():
            f = r.choice(files)
            d = datas[f]
            off = r.randrange(len(d) + 1)
            try:
                if b.read(f, off, 500) != d[off:off + 500]:
                    bad.append("read %r %d" % (f, off))
            except ValueError:
                return
            except Exception as e:  # noqa: BLE001
                bad.append(repr(e))
                return

    ts = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    threading.Event().wait(0.3)
    b.close()
    stop.set()
    for t in ts:
        t.join()
    check(not bad, "%s: reads racing close(): %r" % (name, bad[:3]))
    raises(lambda: b.read(files[0]), ValueError, None, ["closed"], "%s: read after close" % name)
    # a file read before close() (its reader holds a buffer) and one never read
    c = tadoc.Archive(b.path)
    f1, f2 = c.open(files[0]), c.open(files[0])
    f1.read(1)
    c.close()
    for f in (f1, f2):
        raises(lambda: f.read(1), ValueError, None, ["closed"], "%s: a file's read after close" % name)


def bad_input(work, arch, name):
    missing = os.path.join(work, "no-such.tadoc")
    raises(lambda: tadoc.Archive(missing), tadoc.TadocError, errno.ENOENT, [missing], "missing archive")
    raises(lambda: tadoc.Archive(work), tadoc.TadocError, errno.EISDIR, [work], "a directory as archive")
    notarc = os.path.join(work, "not-an-archive.tadoc")
    with open(notarc, "wb") as f:
        f.write(b"hello, this is not an archive\n" * 100)
    raises(lambda: tadoc.Archive(notarc), tadoc.TadocError, None, [notarc, "not a tadoc archive"], "not an archive")
    data = open(arch, "rb").read()
    trunc = os.path.join(work, "truncated.tadoc")
    with open(trunc, "wb") as f:
        f.write(data[:len(data) // 2])
    raises(lambda: tadoc.Archive(trunc), tadoc.TadocError, None, [trunc], "truncated archive")
    # damage in the middle: refused at open or at the first read, EIO, naming the file and the damage
    dmg = os.path.join(work, "damaged.tadoc")
    with open(dmg, "wb") as f:
        f.write(data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0x55]) + data[len(data) // 2 + 1:])

    def use_damaged():
        with tadoc.Archive(dmg) as d:
            for rel, st in d.walk_entries():
                if stat.S_ISREG(st.st_mode):
                    d.read(rel)
            d.count("the")
    raises(use_damaged, tadoc.TadocError, errno.EIO, [dmg, "corrupt"], "damaged archive")
    with tadoc.Archive(arch) as a:
        raises(lambda: a.read("no/such/file"), tadoc.TadocError, errno.ENOENT, [arch, "no/such/file", "'no'"],
               "%s: missing path" % name)
        raises(lambda: a.stat("empty/x"), tadoc.TadocError, errno.ENOTDIR, [arch], "%s: path through a file" % name)
        raises(lambda: a.read("text"), tadoc.TadocError, errno.EISDIR, [arch], "%s: read of a directory" % name)
        raises(lambda: a.open("text"), tadoc.TadocError, errno.EISDIR, [arch], "%s: open of a directory" % name)
        raises(lambda: a.ls("text/crlf.txt"), tadoc.TadocError, errno.ENOTDIR, [arch], "%s: ls of a file" % name)
        raises(lambda: a.read("links/abs"), tadoc.TadocError, errno.EINVAL, ["outside the archive"],
               "%s: symlink outside" % name)
        raises(lambda: a.read("../x"), tadoc.TadocError, errno.EINVAL, ["outside the archive"], "%s: '..'" % name)
        raises(lambda: a.read("text/crlf.txt", -1), tadoc.TadocError, errno.EINVAL, [], "%s: negative offset" % name)
        for w in ("", "two  spaces", " lead", "a-b", "x" * 10 + " "):
            raises(lambda: a.count(w), tadoc.TadocError, errno.EINVAL, ["not a"], "%s: count(%r)" % (name, w))
            raises(lambda: a.search(w), tadoc.TadocError, errno.EINVAL, ["not a"], "%s: search(%r)" % (name, w))
        raises(lambda: a.count("the", "nope"), tadoc.TadocError, errno.ENOENT, ["nope"], "%s: count scope" % name)
        raises(lambda: a.fuzzy("the", 4), tadoc.TadocError, errno.EINVAL, [arch, "4"], "%s: fuzzy k=4" % name)
        raises(lambda: a.fuzzy("the", -1), tadoc.TadocError, errno.EINVAL, ["k must be"], "%s: fuzzy k=-1" % name)
        raises(lambda: a.fuzzy("a b", 1), tadoc.TadocError, errno.EINVAL, [], "%s: fuzzy of a phrase" % name)
        raises(lambda: a.fuzzy_many(["the", "a b"], 1), tadoc.TadocError, errno.EINVAL, [],
               "%s: fuzzy_many with a phrase" % name)
        raises(lambda: a.fuzzy_many(["the"], 1, gpu="maybe"), tadoc.TadocError, errno.EINVAL, ["gpu must be"],
               "%s: fuzzy_many gpu=maybe" % name)
        raises(lambda: a.ngrams(1), tadoc.TadocError, errno.EINVAL, ["n must be"], "%s: ngrams n=1" % name)
        raises(lambda: a.ngrams(9), tadoc.TadocError, errno.EINVAL, ["n must be"], "%s: ngrams n=9" % name)
        raises(lambda: a.top(-1), tadoc.TadocError, errno.EINVAL, [], "%s: top -1" % name)
        raises(lambda: a.count(3), TypeError, None, [], "%s: count(3)" % name)
        raises(lambda: a.read("text/crlf.txt", "5", 10), TypeError, None, ["offset must be an int"],
               "%s: read with a str offset" % name)
        raises(lambda: a.read("text/crlf.txt", 5.5), TypeError, None, ["offset"], "%s: float offset" % name)
        raises(lambda: a.top("5"), TypeError, None, ["n must be an int"], "%s: top('5')" % name)
        raises(lambda: a.files("the", b""), TypeError, None, ["n must be an int"], "%s: files(w, b'')" % name)
        raises(lambda: a.files("the", -1), tadoc.TadocError, errno.EINVAL, ["n must be"], "%s: files n=-1" % name)
        raises(lambda: a.fuzzy("the", 4), tadoc.TadocError, errno.EINVAL, ["k must be 0..3"],
               "%s: fuzzy k=4, the message of k=-1" % name)
        check(isinstance(tadoc.TadocError(1, "x"), OSError), "TadocError is an OSError")
        # found by /tmp/fzpy (differential fuzzing): ctypes wraps ints past the C type silently, a NUL cuts the
        # archive's path, fuzzy_many took bools, and a long fuzzy query sized its rows O(m^2)
        raises(lambda: tadoc.Archive(arch + "\0junk"), ValueError, None, ["null byte"], "%s: NUL in the path" % name)
        same(len(a.top((1 << 64) + 1)), len(a.top(0)), "%s: top(2^64 + 1) is every word, not top(1)" % name)
        same(len(a.ngrams(2, (1 << 64) + 1)), len(a.ngrams(2, 0)), "%s: ngrams top 2^64 + 1" % name)
        raises(lambda: a.vector_part(1 << 32), tadoc.TadocError, errno.EINVAL, ["part"], "%s: vector_part(2^32)" % name)
        raises(lambda: a.fuzzy_many(["the"], True), TypeError, None, ["k must be an int"], "%s: fuzzy_many k=True" % name)
        raises(lambda: a.fuzzy_many(["the"], 4), tadoc.TadocError, errno.EINVAL, ["k must be 0..3"],
               "%s: fuzzy_many k=4" % name)
        raises(lambda: a.ngrams_many([(2, True, None)]), TypeError, None, ["top must be an int"],
               "%s: ngrams_many top=True" % name)
        t0 = time.monotonic()
        same(a.fuzzy("q" * 30000, 1), [], "%s: fuzzy of a 30,000-letter word" % name)  # was 3.6 GB a shard, minutes
        check(time.monotonic() - t0 < 5, "%s: fuzzy of a 30,000-letter word took %.1f s" % (name, time.monotonic() - t0))
    # close() with a file whose raw stream was detached (found by /tmp/fzpy): closes the archive, no ValueError
    b = tadoc.Archive(arch)
    f = b.open("text/crlf.txt")
    raw = f.detach()  # f kept alive, as a wrapper holding it would
    b.close()
    check(b._h is None, "%s: close() with a detached file frees the archive" % name)
    raises(lambda: raw.read(5), ValueError, None, ["closed"], "%s: a detached raw file after close" % name)


def run_corpus(name, tree, work, heavy_analytics=True, formats=(4, 5)):
    c = C.oracle.Corpus(tree)
    for fmt, opts in ((4, ["--format", "4"]), (5, ["--shard-size", "64K" if name == "adv" else "1M"])):
        if fmt not in formats:
            continue
        arch = C.compress(tree, os.path.join(work, "%s-%d.tadoc" % (name, fmt)), *opts)
        label = "%s/format %d" % (name, fmt)
        with tadoc.Archive(arch) as a:
            info = a.info()
            same(info["version"], fmt, label + ": version")
            if fmt == 5:
                check(info["nshards"] > 1, "%s: %d shards" % (label, info["nshards"]))
            files = check_tree(a, tree, label)
            check_queries(a, c, files, label, fmt)
            if heavy_analytics or fmt == 4:
                analytics(a, c, files, label, fmt)
            concurrent(a, tree, files, c, label)
        log("%s: done (%d checks so far)" % (label, C.checks))
    return os.path.join(work, "%s-4.tadoc" % name)


def main():
    work = tempfile.mkdtemp(prefix="py_archive.")
    try:
        adv = C.adversarial(work)
        arch = run_corpus("adv", adv, work)
        bad_input(work, arch, "adv")
        sotu = C.corpus("sotu")
        if sotu:
            run_corpus("sotu", sotu, work, formats=(5,))  # format 4: the adversarial tree
        else:
            log("sotu not in %s: skipped (the adversarial tree was checked)" % C.CORPORA)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    C.finish("py_archive")


if __name__ == "__main__":
    main()
