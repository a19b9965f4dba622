#!/usr/bin/env python3
"""cli_analytics: tadoc top, vector, files, ngrams, fuzzy and phrases in count/search
against the independent oracle (tests/oracle.py: collections.Counter over re.findall(r'\\w+'),
brute-force Levenshtein), per file, per directory and corpus-wide, on the adversarial
generated tree, the bundled sample (contrib/sample) and sotu (skipped when absent), as
format 4 archives and as format 5 archives forced to many shards (so files are split over
shards): the adversarial tree at --shard-size 64K, sotu at 1M, and with TD_TEST_HEAVY=1
also spam at 1M and gcide (one 40 MB file) at 4M; and a generated file without any ASCII separator, which the builder can only
cut inside words and UTF-8 characters. Top n-grams of a generated Zipf corpus over several shards
(pruned by the words' counts over all shards) against the oracle and the unpruned answer.
Phrases and n-grams across the cuts are checked
explicitly (the cuts are where `tadoc info` says each shard's input ends). Format 5 runs
with --format5 (meson: cli_analytics_shards).
Bad arguments: one message on stderr, exit 2.
Fuzzy queries: each one a process at K 0..3 at the root (the fuzzy index where there is one) and
at a directory or a file in turn (the words at the cuts at both), and all of them at each of the
three as batches (fuzzy -f) at K 0..3.

Env: TADOC (the binary), TESTS_DIR (this folder); TADOC_CORPORA or ~/.cache/tadoc-corpora
for sotu (format 5 only); TD_TEST_SANITIZED=1 (a sanitizer build): no real corpora, no sample, 3 random files
and 2 directories of the adversarial tree (2 of each kind of special file) instead of 8 and 5 (5).
"""
import importlib.util
import os
import re
import bisect
import random
import subprocess
import sys
import tempfile
import time

TADOC = os.environ.get("TADOC") or sys.exit("set TADOC to the tadoc binary")
TESTS = os.environ.get("TESTS_DIR") or os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(TESTS)

spec = importlib.util.spec_from_file_location("oracle", os.path.join(TESTS, "oracle.py"))
oracle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oracle)

failures = []
checks = 0


def tadoc(*args, threads=None):
    env = None
    if threads:
        env = dict(os.environ, TADOC_THREADS=str(threads))
    env = oracle.leak_env(args, env, threads)  # the first call of each kind leak-checked
    return subprocess.run([TADOC] + [os.fsencode(a) if isinstance(a, str) else a for a in args],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600, env=env)


def same(what, args, want, threads=None):
    global checks
    checks += 1
    r = tadoc(*args, threads=threads)
    if r.returncode != 0 or r.stdout != want:
        got = r.stdout.splitlines()
        exp = want.splitlines()
        first = next((i for i in range(min(len(got), len(exp))) if got[i] != exp[i]), min(len(got), len(exp)))
        failures.append(what)
        print("FAIL %s: rc %d, %d lines vs %d expected; first difference at line %d: %r vs %r; stderr %r"
              % (what, r.returncode, len(got), len(exp), first, got[first] if first < len(got) else None,
                 exp[first] if first < len(exp) else None, r.stderr[:300]), flush=True)


def phrases(c, rng, k):
    """k phrases of 2..4 words taken from the corpus (some across lines and punctuation)."""
    files = [f for f in c.words if len(c.words[f]) >= 4]
    out = []
    for _ in range(k):
        f = rng.choice(files)
        ws = c.words[f]
        m = rng.choice((2, 2, 3, 4))
        i = rng.randrange(len(ws) - m + 1)
        p = b" ".join(w for w, _ in ws[i:i + m])
        if len(p) <= 4096:  # an argument must fit the kernel's limit
            out.append(p)
    return out


def common_phrases(c, rng):
    """Phrases of common words (the pass over every rule, td_analytics.c: a scope holding
    more than a thirty-second of the root): the most frequent word repeated (2..8 times),
    runs of 2..8 words taken where the most frequent words stand, and pairs across file
    boundaries (a file's last word, the next file's first: no phrase spans two files)."""
    top = [w for w, _ in c.top(b"", 3)]
    if not top:
        return []
    out = [b" ".join([top[0]] * m) for m in (2, 3, 8)]
    files = sorted(f for f in c.words if len(c.words[f]) >= 8)
    for m in range(2, 9):
        for f in rng.sample(files, min(len(files), 6)):
            ws = c.words[f]
            at = [i for i in range(len(ws) - m + 1) if ws[i][0] in top]
            if at:
                i = rng.choice(at)
                out.append(b" ".join(w for w, _ in ws[i:i + m]))
                break
    order = sorted(c.words)
    for f, g in list(zip(order, order[1:]))[:200]:
        if c.words[f] and c.words[g] and len(out) < 20:
            out.append(c.words[f][-1][0] + b" " + c.words[g][0][0])
    return [p for p in dict.fromkeys(out) if len(p) <= 4096]


def shard_cuts(arch):
    """File offsets where a format 5 archive of ONE file is cut: each shard's input ends."""
    r = tadoc("info", arch)
    sizes = [int(l.split()[5]) for l in r.stdout.decode().splitlines()
             if l.strip().startswith("shard ") and l.split()[1].isdigit()]
    cuts, at = [], 0
    for n in sizes[:-1]:
        at += n
        cuts.append(at)
    return cuts


def cut_phrases(c, f, cuts):
    """Phrases of 1..4 words of file f whose words straddle a cut (or the word a cut is inside)."""
    ws = c.words[f]
    starts = [o for _, o in ws]
    out = []
    for cut in cuts:
        i = bisect.bisect_left(starts, cut)  # first word starting at or after the cut
        if i > 0 and starts[i - 1] + len(ws[i - 1][0]) > cut:
            w = ws[i - 1][0]
            out.append(w)  # a word cut in two, and what its halves look like alone
            k = cut - starts[i - 1]
            out += [x for x, _ in oracle.words_of(w[:k]) + oracle.words_of(w[k:]) if len(x) <= 4096]
        for m, j in ((2, i - 1), (3, i - 2), (3, i - 1), (4, i - 3), (4, i - 2)):  # straddling the cut
            if 0 <= j and j + m <= len(ws):
                p = b" ".join(w for w, _ in ws[j:j + m])
                if len(p) <= 4096:
                    out.append(p)
    return list(dict.fromkeys(out))


def check_corpus(name, tree, work, nfiles, ndirs, seed=11, heavy_root=True, cargs=(), light=False, single=None):
    """Every command on `tree` compressed with `cargs` against the oracle. light: no
    all-n-gram listings and fewer fuzzy queries (a big corpus). single: the one file of a
    format 5 archive whose cuts get phrases of their own."""
    arch = os.path.join(work, name + ".tadoc")
    r = subprocess.run([TADOC, "compress", "-o", arch] + list(cargs) + [tree], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    if r.returncode:
        failures.append(name + ": compress")
        print("FAIL compress %s: %r" % (name, r.stderr), flush=True)
        return
    if cargs:
        nsh = [l for l in tadoc("info", arch).stdout.decode().splitlines() if l.startswith("shards")]
        print("%s: %s" % (name, nsh[0] if nsh else "no shards line"), flush=True)
    c = oracle.Corpus(tree)
    rng = random.Random(seed)
    files = sorted(c.words)
    dirs = [rel for rel, _ in c.entries if c.kind[rel] == "d"]
    # the files with the longest words and non-ASCII words, then a random sample
    ns = 2 if oracle.sanitized() else 5
    special = sorted(files, key=lambda f: -max((len(w) for w, _ in c.words[f]), default=0))[:ns]
    special += [f for f in files if any(any(b > 0x7f for b in w) for w, _ in c.words[f])][:ns]
    pick_f = list(dict.fromkeys(special + rng.sample(files, min(nfiles, len(files)))))
    pick_d = rng.sample(dirs, min(ndirs, len(dirs)))
    scopes = [b""] + pick_d + pick_f
    top_words = [w for w, _ in c.top(b"", 30)]
    vocab = sorted(w for w in c.counter(b"") if len(w) <= 4096)
    phr = phrases(c, rng, 12) + [b"zzqqxx the", top_words[0] + b" " + top_words[0]]
    cutp = cut_phrases(c, single, shard_cuts(arch)) if single else []
    longest = max(((len(w), f, i) for f in files for i, (w, _) in enumerate(c.words[f]) if len(w) <= 4096),
                  default=None)
    if longest and longest[0] > 255:
        _, f, i = longest
        ws = c.words[f]
        j = max(0, i - 1)
        phr.append(b" ".join(w for w, _ in ws[j:j + 2]))  # a phrase holding a word over 255 bytes
        phr.append(ws[i][0])
    grams_want = {}  # (scope, len, top) -> the oracle's n-grams, for the thread checks below
    for s in scopes:
        p = [s] if s else []
        label = "%s:%s" % (name, os.fsdecode(s) or "(corpus)")
        for n in (0, 3):
            same(label + " top -n %d" % n, ["top", "-n", str(n), arch] + p,
                 oracle.render("top", c, {"path": s, "n": n}))
        same(label + " top", ["top", arch] + p, oracle.render("top", c, {"path": s, "n": 20}))
        same(label + " vector", ["vector", arch, s or b"."], oracle.render("vector", c, {"path": s}))
        grams = ((2, 0 if s or not heavy_root else 50), (3, 20), (5, 0 if s else 30), (8, 10))
        if light:
            grams = ((2, 20), (3, 20))
        for ln, top in grams:
            want = grams_want[(s, ln, top)] = oracle.render("ngrams", c, {"path": s, "len": ln, "top": top})
            same(label + " ngrams -n %d --top %d" % (ln, top), ["ngrams", "-n", str(ln), "--top", str(top), arch] + p,
                 want)
        words_here = [w for w, _ in c.top(s, 3) if len(w) <= 4096] + ([rng.choice(vocab)] if vocab else [])
        for q in words_here + rng.sample(phr, min(3, len(phr))) + (cutp if s == single or not single else []):
            same(label + " count %r" % q[:40], ["count", arch, q] + p, b"%d\n" % len(c.hits(q, s)))
            if s and c.kind.get(s) == "f":
                want = b"".join(b"%d\n" % o for _, o in c.hits(q, s))
            else:
                want = b"".join(oracle.esc_path(f) + b":%d\n" % o for f, o in c.hits(q, s))
            same(label + " search %r" % q[:40], ["search", arch, q] + p, want)
        if not s or c.kind.get(s) == "d":
            # top words, a random one and an absent one (td_word_file_counts), phrases, long words, cuts
            for q in words_here[:2] + words_here[-1:] + [b"zzqqxxw"] + phr[:3] + phr[-2:] + cutp[:6]:
                same(label + " files %r" % q[:40], ["files", arch, q] + p,
                     oracle.render("files", c, {"path": s, "word": os.fsdecode(q)}))
            same(label + " files -n 2", ["files", "-n", "2", arch, top_words[1]] + p,
                 oracle.render("files", c, {"path": s, "word": os.fsdecode(top_words[1]), "n": 2}))
    # phrases of common words (count, search, files) over the corpus, directories and files
    comp = common_phrases(c, random.Random(seed + 1))  # its own generator: the checks after it draw as before
    for s in [b""] + pick_d[:2] + pick_f[:1]:
        p = [s] if s else []
        label = "%s:%s" % (name, os.fsdecode(s) or "(corpus)")
        for q in comp:
            hits = c.hits(q, s)
            same(label + " count %r (common)" % q[:40], ["count", arch, q] + p, b"%d\n" % len(hits))
            if not s or c.kind.get(s) == "d":
                same(label + " files %r (common)" % q[:40], ["files", arch, q] + p,
                     oracle.render("files", c, {"path": s, "word": os.fsdecode(q)}))
        for q in comp[:4]:
            hits = c.hits(q, s)
            if s and c.kind.get(s) == "f":
                want = b"".join(b"%d\n" % o for _, o in hits)
            else:
                want = b"".join(oracle.esc_path(f) + b":%d\n" % o for f, o in hits)
            same(label + " search %r (common)" % q[:40], ["search", arch, q] + p, want)
            same(label + " count %r (common, 3 threads)" % q[:40], ["count", arch, q] + p, b"%d\n" % len(hits),
                 threads=3)
    # n-grams and phrase counts on several threads (TADOC_THREADS forces them on small
    # scopes): root symbols cut in chunks inside files, per-thread run tables merged
    for s in [b""] + pick_d[:1] + pick_f[:1]:
        p = [s] if s else []
        label = "%s:%s" % (name, os.fsdecode(s) or "(corpus)")
        for ln, top in ((2, 0 if s or not heavy_root else 50), (3, 20), (5, 0 if s else 30)):
            want = grams_want.get((s, ln, top)) or oracle.render("ngrams", c, {"path": s, "len": ln, "top": top})
            same(label + " ngrams -n %d --top %d (7 threads)" % (ln, top),
                 ["ngrams", "-n", str(ln), "--top", str(top), arch] + p, want, threads=7)
        for q in phr[:4] + phr[-2:] + cutp[:2]:
            want = b"%d\n" % len(c.hits(q, s))
            for th in (2, 7):
                same(label + " count %r (%d threads)" % (q[:40], th), ["count", arch, q] + p, want, threads=th)
    # fuzzy: accents, CJK, digits, a word not in the corpus, an empty result; K 0..3
    queries = [b"cafe", "café".encode(), "naive".encode(), "日本語".encode(), "日本".encode(), b"007", b"1e10",
               "русский".encode(), b"zzqqxxyyzz", "Straße".encode(), b"the", b"x86_64"]
    queries += [top_words[i] for i in (0, 3, 7) if i < len(top_words)]
    queries += rng.sample(vocab, min(3, len(vocab)))
    queries += [q for q in cutp if b" " not in q and len(q) < 200]
    if light:
        queries = queries[:4] + queries[-4:]
    elif single:  # one generated file: its own words and those at the cuts (the fixed kinds: other trees)
        queries = queries[:4] + queries[12:]
    rendered = {}

    def fuzzy_want(q, k, s):
        if (q, k, s) not in rendered:
            rendered[(q, k, s)] = oracle.render("fuzzy", c, {"path": s, "word": os.fsdecode(q), "k": k})
        return rendered[(q, k, s)]

    # one query a process: every query at the root (the fuzzy index, where there is one), and at a
    # directory and a file in turn (the scope's own words; the words at the cuts at both); the
    # batches below ask each at all three
    for i, q in enumerate(dict.fromkeys(queries)):
        for k in (0, 1, 2, 3):
            for s in [b""] + (pick_d[:1] + pick_f[:1] if q in cutp else (pick_d[:1], pick_f[:1])[i % 2]):
                p = [s] if s else []
                same("%s:%s fuzzy -k %d %r" % (name, os.fsdecode(s) or "(corpus)", k, q[:30]),
                     ["fuzzy", "-k", str(k), arch, q] + p, fuzzy_want(q, k, s))
    # the same queries as one batch (tadoc fuzzy -f) at each K and scope, on every core (and with
    # --gpu auto at K 1 and 2)
    batch = [q for q in dict.fromkeys(queries) if re.fullmatch(r"\w+", q.decode("utf-8", "replace"))]
    wfile = os.path.join(work, "fuzzy-words.txt")
    with open(wfile, "wb") as f:
        f.write(b"".join(q + b"\n" for q in batch))
    for k in (0, 1, 2, 3):
        for s in [b""] + pick_d[:1] + pick_f[:1]:
            p = [s] if s else []
            want = b"".join(b"".join(q + b"\t" + line + b"\n" for line in
                                     fuzzy_want(q, k, s).splitlines())
                            for q in batch)
            for gpu in ("off", "auto") if k in (1, 2) else ("off",):
                same("%s:%s fuzzy -k %d -f (%d words, --gpu %s)" % (name, os.fsdecode(s) or "(corpus)", k, len(batch), gpu),
                     ["fuzzy", "-k", str(k), "--gpu", gpu, "-f", wfile, arch] + p, want)

    # ranked files as one batch (tadoc files -f): words, phrases, an absent word; -n 2
    fq = list(dict.fromkeys(top_words[:3] + rng.sample(vocab, min(3, len(vocab))) + phr[:3] + [b"zzqqxxw"]))
    fq = [q for q in fq if b"\n" not in q]
    ffile = os.path.join(work, "files-words.txt")
    with open(ffile, "wb") as f:
        f.write(b"".join(q + b"\n" for q in fq))
    for s in [b""] + pick_d[:2]:
        p = [s] if s else []
        for n in (0, 2):
            want = b"".join(b"".join(q + b"\t" + line + b"\n" for line in
                                     oracle.render("files", c, {"path": s, "word": os.fsdecode(q), "n": n}).splitlines())
                            for q in fq)
            for gpu in ("off", "auto"):
                same("%s:%s files -n %d -f (%d queries, --gpu %s)" % (name, os.fsdecode(s) or "(corpus)", n, len(fq), gpu),
                     ["files", "-n", str(n), "--gpu", gpu, "-f", ffile, arch] + p, want)


F5 = ["--format", "5"]


def sections(path):
    """The archive's bytes and its section table: (id, flags, offset, size, sum) rows."""
    import struct
    d = open(path, "rb").read()
    nsec, tab = struct.unpack_from("<I", d, 24)[0], struct.unpack_from("<Q", d, 32)[0]
    return d, [struct.unpack_from("<IIQQQ", d, tab + 32 * i) for i in range(nsec)]


def grow(tree, work, prefix, text):
    """A copy of tree with one more directory, PREFIX-extra/added.txt holding text (under
    work): (the grown copy, the extra directory alone, for tadoc add)."""
    import shutil
    grown = os.path.join(work, prefix + "-tree")
    shutil.copytree(tree, grown, symlinks=True)
    extra = os.path.join(work, prefix + "-extra")
    os.makedirs(extra, exist_ok=True)
    with open(os.path.join(extra, "added.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    shutil.copytree(extra, os.path.join(grown, prefix + "-extra"))
    return grown, extra


def fuzzy_index_checks(name, tree, work):
    """The fuzzy index (tadoc compress --fuzzy-index): kept by tadoc add and tadoc compact
    (rebuilt over the new shards, equal to the oracle over the grown tree), checked by
    tadoc verify; a damaged
    bucket or header gives one message naming the index, on the queries that read it and on
    verify, and the archive's other answers stay right."""
    global checks
    import struct
    arch = os.path.join(work, "fzix.tadoc")
    r = tadoc("compress", "-q", "--fuzzy-index", "--shard-size", "64K", "-o", arch, tree)
    grown, extra = grow(tree, work, "fzix",
                        "controllre controller contrôleur Straße strasse x86_64 x86-64 café cafe " * 3 + "\n")
    if r.returncode == 0:
        r = tadoc("add", arch, extra)
    checks += 1
    if r.returncode:
        failures.append("fuzzy index: compress/add")
        print("FAIL fuzzy index compress/add: %r" % r.stderr, flush=True)
        return
    c = oracle.Corpus(grown)
    for q in (b"controller", "contrôleur".encode(), b"strasse", b"x86_64", b"cafe", b"the", b"zzqqxxyyzz"):
        for k in (0, 1, 2, 3):
            same("fzix after add fuzzy -k %d %r" % (k, q), ["fuzzy", "-k", str(k), arch, q],
                 oracle.render("fuzzy", c, {"path": b"", "word": os.fsdecode(q), "k": k}))
    # a compaction rebuilds every shard: the index is rebuilt over them
    r = tadoc("compact", "--full", arch)
    checks += 1
    if r.returncode:
        failures.append("fuzzy index: compact")
        print("FAIL fuzzy index compact: %r" % r.stderr, flush=True)
    for q in (b"controller", b"strasse"):
        same("fzix after compact fuzzy -k 2 %r" % q, ["fuzzy", "-k", "2", arch, q],
             oracle.render("fuzzy", c, {"path": b"", "word": os.fsdecode(q), "k": 2}))
    checks += 1
    r = tadoc("verify", arch)
    if r.returncode or not r.stdout.endswith(b": OK\n"):
        failures.append("fuzzy index: verify")
        print("FAIL fuzzy index verify: rc %d %r %r" % (r.returncode, r.stdout, r.stderr), flush=True)
    data = bytearray(open(arch, "rb").read())
    nsec, tab = struct.unpack_from("<I", data, 24)[0], struct.unpack_from("<Q", data, 32)[0]
    secs = [struct.unpack_from("<IIQQQ", data, tab + 32 * i) for i in range(nsec)]
    fz = [s for s in secs if s[0] == 37]
    checks += 1
    if len(fz) != 1:
        failures.append("fuzzy index: no section 37 after add")
        print("FAIL fuzzy index: sections %r" % [s[0] for s in secs], flush=True)
        return
    # tadoc info names the index, its bytes (the section's, from the table) and its words
    # (the oracle's vocabulary of the grown tree, less words over 255 bytes: the index
    # leaves them to the queries that could reach them)
    checks += 1
    nw = sum(1 for w in c.counter(b"") if len(w if isinstance(w, bytes) else w.encode()) <= 255)
    want = "fuzzy index      %d bytes (%.2f%%), %d words" % (fz[0][3], 100.0 * fz[0][3] / len(data), nw)
    line = [ln for ln in tadoc("info", arch).stdout.decode().splitlines() if ln.startswith("fuzzy index")]
    if line != [want]:
        failures.append("fuzzy index: info")
        print("FAIL fuzzy index info: %r, want %r" % (line, want), flush=True)
    base = fz[0][2]
    # bucket 10 (the query "controller" reads buckets 8..12 at k = 2; "cafe" at k = 1 reads 3..5)
    boff, bsize = struct.unpack_from("<QQ", data, base + 32 + 40 * 10)
    for what, at, word, k, other in (("bucket", base + boff + bsize // 2, b"controller", 2, b"cafe"),
                                     ("header", base + 40, b"cafe", 1, None)):
        bad = os.path.join(work, "fzix-bad.tadoc")
        d = bytearray(data)
        d[at] ^= 0x20
        open(bad, "wb").write(d)
        for args in (["fuzzy", "-k", str(k), bad, word], ["verify", bad]):
            checks += 1
            r = tadoc(*args)
            msg = r.stderr.decode(errors="replace")
            if r.returncode == 0 or "fuzzy index (section 37)" not in msg or msg.count("\n") != 1:
                failures.append("fuzzy index: damaged %s: %s" % (what, args[0]))
                print("FAIL damaged fuzzy index %s, %s: rc %d, %r" % (what, args[0], r.returncode, msg), flush=True)
        if what == "header":  # info still answers, and names the damage
            checks += 1
            r = tadoc("info", bad)
            line = [ln for ln in r.stdout.decode().splitlines() if ln.startswith("fuzzy index")]
            if r.returncode or len(line) != 1 or "damaged: fuzzy index (section 37)" not in line[0]:
                failures.append("fuzzy index: info on a damaged header")
                print("FAIL info, damaged fuzzy index header: rc %d %r" % (r.returncode, line), flush=True)
        if other:
            same("fzix damaged bucket, other query", ["fuzzy", "-k", "1", bad, other],
                 oracle.render("fuzzy", c, {"path": b"", "word": os.fsdecode(other), "k": 1}))
        same("fzix damaged %s, count" % what, ["count", bad, b"the"], b"%d\n" % len(c.hits(b"the", b"")))


def tables_checks(name, tree, work):
    """The analytics tables (section 40): the root's top words (--top-words, or with
    --top-ngrams) and top n-grams (--top-ngrams=K) answer the root's `top` and `ngrams` up to what they hold, equal
    to the oracle with and without them (no flag, none: the shards' walks); tadoc add
    and tadoc compact keep them over the new shards; tadoc verify recomputes them; a damaged
    part gives one message naming the section on the queries that read it and on verify,
    while other scopes and longer lists still answer."""
    global checks
    import struct
    K = 40
    arch = os.path.join(work, "atab.tadoc")
    bare = os.path.join(work, "atab-bare.tadoc")
    r = tadoc("compress", "-q", "--top-ngrams=%d" % K, "--shard-size", "64K", "-o", arch, tree)
    if r.returncode == 0:
        r = tadoc("compress", "-q", "--shard-size", "64K", "-o", bare, tree)
    grown, extra = grow(tree, work, "atab", "zebra zebra zebra the the quick brown fox " * 50 + "\n")
    checks += 1
    if r.returncode:
        failures.append("tables: compress")
        print("FAIL tables compress: %r" % r.stderr, flush=True)
        return

    def root_checks(label, path, c, full=False):
        nv = len(c.counter(b""))
        for n in (0, 1, 3, 20, K, 999, 1000, 1001, nv, nv + 1):
            same("%s top -n %d" % (label, n), ["top", "-n", str(n), path], oracle.render("top", c, {"path": b"", "n": n}))
        for ln in range(2, 9) if full else (2, 3, 8):
            # full: the tables' parts at every length (1, 7, K), and the walks past them (every
            # run: 0; K + 1) at some (the one without tables walks K + 1 at 2, 3 and 8)
            for top in ((1, 7, K) + ((0,) if ln in (2, 5, 8) else ()) + ((K + 1,) if 4 <= ln <= 7 else ())
                        if full else (7, K, K + 1)):
                same("%s ngrams -n %d --top %d" % (label, ln, top), ["ngrams", "-n", str(ln), "--top", str(top), path],
                     oracle.render("ngrams", c, {"path": b"", "len": ln, "top": top}))

    c = oracle.Corpus(tree)
    checks += 1
    if [s[0] for s in sections(bare)[1] if s[0] == 40] or len([s for s in sections(arch)[1] if s[0] == 40]) != 1:
        failures.append("tables: section 40 present or absent as asked")
        print("FAIL tables: sections %r / %r" % ([s[0] for s in sections(arch)[1]], [s[0] for s in sections(bare)[1]]))
    root_checks("tables", arch, c, full=True)
    root_checks("no tables", bare, c)
    r = tadoc("add", arch, extra)
    checks += 1
    if r.returncode:
        failures.append("tables: add")
        print("FAIL tables add: %r" % r.stderr, flush=True)
        return
    g = oracle.Corpus(grown)
    root_checks("tables after add", arch, g)
    r = tadoc("compact", "--full", arch)
    checks += 1
    if r.returncode:
        failures.append("tables: compact")
        print("FAIL tables compact: %r" % r.stderr, flush=True)
    same("tables after compact ngrams -n 3", ["ngrams", "-n", "3", arch], oracle.render("ngrams", g, {"path": b"", "len": 3, "top": 20}))
    same("tables after compact top", ["top", arch], oracle.render("top", g, {"path": b"", "n": 20}))
    for path in (arch, bare):
        checks += 1
        r = tadoc("verify", path)
        if r.returncode or not r.stdout.endswith(b": OK\n"):
            failures.append("tables: verify")
            print("FAIL tables verify: rc %d %r %r" % (r.returncode, r.stdout, r.stderr), flush=True)
    checks += 1
    line = [ln for ln in tadoc("info", arch).stdout.decode().splitlines() if ln.startswith("tables")]
    # 1000 top words, or 100 where they would take over 0.1% of the archive
    if len(line) != 1 or not re.search(r"top 1?000? words, top %d n-grams" % K, line[0]):
        failures.append("tables: info")
        print("FAIL tables info: %r" % line, flush=True)
    data, secs = sections(arch)
    at = [s for s in secs if s[0] == 40][0]
    base = at[2]
    # part 3 (the 3-grams): a byte in the middle of its frame
    off3, size3 = struct.unpack_from("<QQ", data, base + 16 + 48 * 3)
    bad = os.path.join(work, "atab-bad.tadoc")
    d = bytearray(data)
    d[base + off3 + size3 // 2] ^= 0x20
    open(bad, "wb").write(d)
    for args in (["ngrams", bad], ["top", bad], ["verify", bad]):
        checks += 1
        r = tadoc(*args)
        msg = r.stderr.decode(errors="replace")
        if r.returncode == 0 or "section 40" not in msg or msg.count("\n") != 1:
            failures.append("tables: damaged part: %s" % args[0])
            print("FAIL damaged tables, %s: rc %d, %r" % (args[0], r.returncode, msg), flush=True)
    # scopes other than the root, and the root's lists longer than the tables, do not read them
    same("tables damaged, count", ["count", bad, b"the"], b"%d\n" % len(g.hits(b"the", b"")))
    same("tables damaged, ngrams --top %d" % (K + 1), ["ngrams", "--top", str(K + 1), bad],
         oracle.render("ngrams", g, {"path": b"", "len": 3, "top": K + 1}))
    sub = sorted(rel for rel, _ in g.entries if g.kind[rel] == "d" and rel)[0]
    same("tables damaged, top of a directory", ["top", bad, sub], oracle.render("top", g, {"path": sub, "n": 20}))


def vector_table_checks(name, tree, work):
    """The stored root vector (section 41, --root-vector): `vector` of the root equals the
    oracle with and without it; tadoc add and tadoc compact keep it over the new shards;
    tadoc verify recomputes it; info names it; --root-vector with format 4 is a usage
    error; a damaged block gives one message naming the section on the root's vector and
    on verify, while other scopes still answer, and info says it is damaged."""
    global checks
    import struct
    arch = os.path.join(work, "vtab.tadoc")
    r = tadoc("compress", "-q", "--root-vector", "--shard-size", "64K", "-o", arch, tree)
    checks += 1
    if r.returncode:
        failures.append("root vector: compress")
        print("FAIL root vector compress: %r" % r.stderr, flush=True)
        return
    checks += 1
    r = tadoc("compress", "-q", "--format", "4", "--root-vector", "-o", os.path.join(work, "vtab4.tadoc"), tree)
    if r.returncode != 2 or b"--root-vector needs format 5" not in r.stderr:
        failures.append("root vector: format 4")
        print("FAIL root vector with format 4: rc %d %r" % (r.returncode, r.stderr), flush=True)

    c = oracle.Corpus(tree)
    checks += 1
    if len([s for s in sections(arch)[1] if s[0] == 41]) != 1:
        failures.append("root vector: section 41 present")
        print("FAIL root vector: sections %r" % [s[0] for s in sections(arch)[1]], flush=True)
    same("root vector", ["vector", arch, b"/"], oracle.render("vector", c, {"path": b""}))
    sub = sorted(rel for rel, _ in c.entries if c.kind[rel] == "d" and rel)[0]
    same("root vector archive, a directory", ["vector", arch, sub], oracle.render("vector", c, {"path": sub}))
    checks += 1
    line = [ln for ln in tadoc("info", arch).stdout.decode().splitlines() if ln.startswith("root vector")]
    if len(line) != 1 or not line[0].endswith(", %d words" % len(c.counter(b""))):
        failures.append("root vector: info")
        print("FAIL root vector info: %r (want %d words)" % (line, len(c.counter(b""))), flush=True)
    grown, extra = grow(tree, work, "vtab", "zebra aardvark Zürich \u65e5\u672c the " * 40 + "\n")
    g = oracle.Corpus(grown)
    for step, args in (("add", ("add", arch, extra)), ("compact", ("compact", "--full", arch))):
        r = tadoc(*args)
        checks += 1
        if r.returncode or len([s for s in sections(arch)[1] if s[0] == 41]) != 1:
            failures.append("root vector: %s" % step)
            print("FAIL root vector %s: rc %d %r" % (step, r.returncode, r.stderr), flush=True)
            return
        same("root vector after %s" % step, ["vector", arch, b"/"], oracle.render("vector", g, {"path": b""}))
    checks += 1
    r = tadoc("verify", arch)
    if r.returncode or not r.stdout.endswith(b": OK\n"):
        failures.append("root vector: verify")
        print("FAIL root vector verify: rc %d %r %r" % (r.returncode, r.stdout, r.stderr), flush=True)
    data, secs = sections(arch)
    vt = [s for s in secs if s[0] == 41][0]
    base = vt[2]
    nblocks = struct.unpack_from("<Q", data, base + 24)[0]

    def damaged(label, at):
        bad = os.path.join(work, "vtab-bad-%s.tadoc" % label)
        d = bytearray(data)
        d[at] ^= 0x20
        open(bad, "wb").write(d)
        return bad

    # a byte in the middle of the last block's frame: its checksum
    off, size = struct.unpack_from("<QQ", data, base + 56 + 40 * (nblocks - 1))
    bad = damaged("block", base + off + size // 2)
    # the header's word count: the header's checksum
    badh = damaged("header", base + 16)
    for path, what in ((bad, "block %d checksum mismatch" % (nblocks - 1)), (badh, "checksum mismatch")):
        for args in (["vector", path, b"/"], ["verify", path]):
            checks += 1
            r = tadoc(*args)
            msg = r.stderr.decode(errors="replace")
            if r.returncode == 0 or "section 41" not in msg or msg.count("\n") != 1 or \
                    (args[0] == "vector" and what not in msg):
                failures.append("root vector: damaged %s: %s" % (what, args[0]))
                print("FAIL damaged root vector (%s), %s: rc %d, %r" % (what, args[0], r.returncode, msg),
                      flush=True)
    # info reads the header and the block table only: a damaged block shows when read
    for path, want in ((bad, ", %d words" % len(g.counter(b""))),
                       (badh, "damaged: root vector (section 41): checksum mismatch")):
        checks += 1
        line = [ln for ln in tadoc("info", path).stdout.decode().splitlines() if ln.startswith("root vector")]
        if len(line) != 1 or want not in line[0]:
            failures.append("root vector: info on a damaged section")
            print("FAIL root vector info, damaged: %r (want %r)" % (line, want), flush=True)
    for path in (bad, badh):
        same("root vector damaged, a directory", ["vector", path, sub], oracle.render("vector", g, {"path": sub}))
        same("root vector damaged, top", ["top", path], oracle.render("top", g, {"path": b"", "n": 20}))
    # over two blocks (16384 words each): front coding across blocks, each block's order check
    many = os.path.join(work, "vtab-many")
    oracle.make_many_words(many)
    cm = oracle.Corpus(many)
    archm = os.path.join(work, "vtab-many.tadoc")
    r = tadoc("compress", "-q", "--root-vector", "--shard-size", "256K", "-o", archm, many)
    checks += 1
    data, secs = sections(archm)
    vt = [s for s in secs if s[0] == 41]
    nb = struct.unpack_from("<Q", data, vt[0][2] + 24)[0] if vt else 0
    if r.returncode or nb < 3:
        failures.append("root vector: many words")
        print("FAIL root vector of %d words: rc %d, %d blocks, %r" % (len(cm.counter(b"")), r.returncode, nb,
                                                                     r.stderr), flush=True)
    same("root vector of %d words" % len(cm.counter(b"")), ["vector", archm, b"/"],
         oracle.render("vector", cm, {"path": b""}))
    same("root vector archive of many words, d2", ["vector", archm, b"d2"], oracle.render("vector", cm, {"path": b"d2"}))
    checks += 1
    r = tadoc("verify", archm)
    if r.returncode or not r.stdout.endswith(b": OK\n"):
        failures.append("root vector: verify, many words")
        print("FAIL root vector verify, many words: rc %d %r" % (r.returncode, r.stderr), flush=True)


def make_midcut(path, size=3 << 20, seed=5):
    """A text without one ASCII byte that is not a word character: long words (letters,
    digits, accents, CJK) between non-ASCII separators (no-break space, ideographic comma,
    em dash). The builder finds no byte to cut after, so it cuts inside words and inside
    UTF-8 characters."""
    rng = random.Random(seed)
    alpha = "abcdefghijklmnopqrstuvwxyzéèüß0123456789日本語中文字_"
    seps = ["\u00a0", "\u3001", "\u2014", "\u00a0\u00a0"]
    vocab = ["".join(rng.choice(alpha) for _ in range(rng.randint(1, 40))) for _ in range(300)]
    vocab += ["x" * 300, "é" * 200]  # words over 255 bytes
    out, n = [], 0
    while n < size:
        w = rng.choice(vocab) + rng.choice(seps)
        out.append(w)
        n += len(w.encode())
    with open(path, "wb") as f:
        f.write("".join(out).encode())


def make_zipf(top, nfiles=5, size=200_000, last=1_600_000, seed=9):
    """Files of words drawn from a Zipf-like vocabulary (so top n-grams are pruned: their
    words are frequent, most runs hold a rare word), in two directories; the last file has
    no ASCII separator and is longer than a shard and the builder's 1 MiB of slack, so it
    is cut inside words."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 9)))
             for _ in range(4000)] + ["é" * 200, "x" * 300]  # a word over 255 bytes
    vocab = list(dict.fromkeys(vocab))
    weights = [1.0 / (i + 1) for i in range(len(vocab))]
    for i in range(nfiles):
        d = os.path.join(top, "d%d" % (i % 2))
        os.makedirs(d, exist_ok=True)
        seps = ["\u00a0", "\u3001", "\u2014"] if i == nfiles - 1 else [" ", " ", " ", "\n", ", ", ". "]
        out, n = [], 0
        while n < (size if i < nfiles - 1 else last):
            w = rng.choices(vocab, weights, k=64)
            t = "".join(x + rng.choice(seps) for x in w)
            out.append(t)
            n += len(t.encode())
        with open(os.path.join(d, "f%d.txt" % i), "wb") as f:
            f.write("".join(out).encode())


def pruned_shards(name, work):
    """Top n-grams of a format 5 archive of many shards, pruned by the words' counts over
    every shard (cuts at sync points and inside words): equal to the oracle, and to the
    unpruned answer (--top 0, every run, cut to its first K lines), on 1 and 7 threads."""
    global checks
    tree = os.path.join(work, "zipf")
    make_zipf(tree)
    arch = os.path.join(work, "zipf.tadoc")
    r = tadoc("compress", "-q", "--format", "5", "--shard-size", "256K", "-o", arch, tree)
    if r.returncode:
        failures.append(name + ": compress")
        print("FAIL compress %s: %r" % (name, r.stderr), flush=True)
        return
    nsh = [l for l in tadoc("info", arch).stdout.decode().splitlines() if l.startswith("shards")]
    print("%s: %s" % (name, nsh[0] if nsh else "no shards line"), flush=True)
    c = oracle.Corpus(tree)
    for s in (b"", b"d1"):
        p = [s] if s else []
        every = None
        for ln, top in ((2, 20), (3, 20), (3, 1), (4, 10), (5, 5)):
            want = oracle.render("ngrams", c, {"path": s, "len": ln, "top": top})
            label = "%s:%s ngrams -n %d --top %d" % (name, os.fsdecode(s) or "(corpus)", ln, top)
            # 1 and 7 threads at the root; the directory (a file set) on 7, and on 1 once
            for th in (1, 7) if not s or (ln, top) == (3, 20) else (7,):
                same(label + " (%d threads)" % th, ["ngrams", "-n", str(ln), "--top", str(top), arch] + p, want,
                     threads=th)
            if ln == 3:
                checks += 1
                if every is None:
                    every = tadoc("ngrams", "-n", "3", "--top", "0", arch, *p)
                # the unpruned answer cut to its first lines is the oracle's (so the pruned one's)
                if every.returncode or b"".join(every.stdout.splitlines(True)[:top]) != want:
                    failures.append(label + " = --top 0")
                    print("FAIL %s = --top 0: rc %d, %r..." % (label, every.returncode, every.stdout[:200]),
                          flush=True)


def postings_f5(name, tree, work):
    """Ranked files from stored postings over many shards (--postings, 64K shards; names stored
    plain): one query a process (its answer's shard entries mapped to the tree in one pass) and
    a batch (-f: the later questions through the shards' entry map), over the corpus and some
    directories, equal to the oracle; the archive passes tadoc verify."""
    arch = os.path.join(work, name + ".tadoc")
    r = tadoc("compress", "-q", *F5, "--shard-size", "64K", "--postings", "-o", arch, tree)
    if r.returncode:
        failures.append(name + ": compress")
        print("FAIL compress %s: %r" % (name, r.stderr), flush=True)
        return
    same(name + ": verify", ["verify", arch], (arch + ": OK\n").encode())
    c = oracle.Corpus(tree)
    dirs = sorted(rel for rel, _ in c.entries if c.kind[rel] == "d" and rel)[:4]
    words = [w for w, _ in c.top(b"", 8)] + [b"zzqqxxw"]
    wfile = os.path.join(work, name + "-words.txt")
    with open(wfile, "wb") as f:
        f.write(b"".join(w + b"\n" for w in words))
    for s in [b""] + dirs:
        p = [s] if s else []
        label = "%s:%s" % (name, os.fsdecode(s) or "(corpus)")
        want = {w: oracle.render("files", c, {"path": s, "word": os.fsdecode(w)}) for w in words}
        for w in words:
            same(label + " files %r" % w[:40], ["files", arch, w] + p, want[w])
        same(label + " files -f (%d queries)" % len(words), ["files", "--gpu", "off", "-f", wfile, arch] + p,
             b"".join(b"".join(w + b"\t" + line + b"\n" for line in want[w].splitlines()) for w in words))


def bad_args(work):
    global checks
    arch = os.path.join(work, "sample.tadoc")
    cases = [
        ["fuzzy", "-k", "4", arch, "word"],
        ["fuzzy", "-k", "-1", arch, "word"],
        ["fuzzy", arch, "two words"],
        ["fuzzy", arch, ""],
        ["fuzzy", "-f", os.path.join(work, "no-such-words.txt"), arch],
        ["fuzzy", "--gpu", "sometimes", "-f", "-", arch],
        ["files", "-f", os.path.join(work, "no-such-words.txt"), arch],
        ["files", "--gpu", "sometimes", "-f", "-", arch],
        ["ngrams", "-n", "1", arch],
        ["ngrams", "-n", "9", arch],
        ["ngrams", "--top", "-3", arch],
        ["top", "-n", "-1", arch],
        ["files", "-n", "-2", arch, "the"],
        ["count", arch, ""],
        ["count", arch, "of  the"],
        ["count", arch, " the"],
        ["count", arch, "the "],
        ["search", arch, "!!"],
        ["files", arch, "of, the"],
        ["vector", arch],
    ]
    for a in cases:
        checks += 1
        r = tadoc(*a)
        lines = r.stderr.decode(errors="replace").splitlines()
        if r.returncode != 2 or len(lines) != 1 or r.stdout:
            failures.append("bad args %r" % a[:3])
            print("FAIL bad args %r: rc %d stderr %r" % (a, r.returncode, r.stderr), flush=True)


def corpora_dir():
    """The fetched corpora's directory (the one holding sotu), or None."""
    sotu = oracle.real_corpus("sotu")
    return os.path.dirname(sotu) if sotu else None


def timed(name, fn, *a, **k):
    t = time.monotonic()
    fn(name, *a, **k)
    print("%s: %.0f s" % (name, time.monotonic() - t), flush=True)


def main():
    """Format 4 archives by default; with --format5, format 5 archives forced to many shards."""
    f5 = "--format5" in sys.argv[1:]
    corpora = corpora_dir()
    # Under sanitizers fewer random files and directories of the adversarial tree are
    # asked (the special ones, longest and non-ASCII words, always are): the same
    # commands and code paths; the default suite asks 8 and 5.
    nf, nd = (3, 2) if oracle.sanitized() else (8, 5)
    with tempfile.TemporaryDirectory(prefix="cli_analytics.") as work:
        adv = os.path.join(work, "adv")
        subprocess.run([sys.executable, os.path.join(TESTS, "gen_adversarial.py"), adv], check=True,
                       stdout=subprocess.DEVNULL)
        if not f5:
            # with the fuzzy index: whole-archive fuzzy queries answered from it
            timed("adversarial", check_corpus, adv, work, nfiles=nf, ndirs=nd, cargs=["--fuzzy-index"])
            timed("fuzzy-index", fuzzy_index_checks, adv, work)
            timed("tables", tables_checks, adv, work)
            timed("root vector", vector_table_checks, adv, work)
            if oracle.sanitized():
                print("sample: not asked under sanitizers (the default suite asks it); its archive is "
                      "bad_args' input")
                subprocess.run([TADOC, "compress", "-q", "-o", os.path.join(work, "sample.tadoc"),
                                os.path.join(SRC, "contrib", "sample")], check=True)
            else:
                timed("sample", check_corpus, os.path.join(SRC, "contrib", "sample"), work, nfiles=6, ndirs=3)
            bad_args(work)
            # sotu: as format 5 only (cli_analytics_shards, sotu-f5); format 4 is checked here
            # on the adversarial tree and the sample
            print("sotu: format 5 only (cli_analytics_shards)")
        else:
            # many shards: files split over them, phrases and n-grams across the cuts
            timed("adversarial-f5", check_corpus, adv, work, nfiles=nf, ndirs=nd, cargs=F5 + ["--shard-size", "64K"])
            timed("pruned-f5", pruned_shards, work)
            timed("postings-f5", postings_f5, adv, work)
            mid = os.path.join(work, "midcut")
            os.mkdir(mid)
            make_midcut(os.path.join(mid, "nosep.txt"), size=1 << 20)
            # 65537: the first cut falls inside a 2-byte character of a word over 255 bytes
            timed("midcut-f5", check_corpus, mid, work, nfiles=1, ndirs=0,
                  cargs=F5 + ["--shard-size", "65537", "--fuzzy-index", "--root-vector"],
                  single=b"nosep.txt")
            if corpora:
                timed("sotu-f5", check_corpus, os.path.join(corpora, "sotu"), work, nfiles=4, ndirs=2,
                      cargs=F5 + ["--shard-size", "1M", "--fuzzy-index", "--root-vector"])
                # spam and gcide take about 20 minutes on 2 busy cores: with TD_TEST_HEAVY=1 only
                heavy = os.environ.get("TD_TEST_HEAVY") == "1"
                if not heavy:
                    print("spam-f5, gcide-f5: skipped (TD_TEST_HEAVY=1 runs them)")
                for name, size in (("spam", "1M"), ("gcide", "4M")) if heavy else ():
                    if os.path.isdir(os.path.join(corpora, name)):
                        timed(name + "-f5", check_corpus, os.path.join(corpora, name), work, nfiles=4,
                              ndirs=2, cargs=F5 + ["--shard-size", size], light=True,
                              single=b"gcide.txt" if name == "gcide" else None)
            else:
                print(oracle.corpus_skip("sotu, spam, gcide"))
    print("%d checks, %d failures" % (checks, len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
