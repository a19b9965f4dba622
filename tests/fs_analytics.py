#!/usr/bin/env python3
"""fs_analytics: the analytics extended attributes of a real mount (issue 23, items 7 and 9).

On the adversarial generated tree and sotu (skipped when absent), mounted
read-only: user.tadoc.top.N, vector, files.PHRASE, ngrams.LEN.K,
fuzzy.K.WORD and the phrases of count/search, per file, per directory and
at the root, read with os.getxattr (parts joined through their
"#more NAME@N" lines) and with getfattr, each equal to the independent
oracle (tests/oracle.py: collections.Counter over re.findall(r'\\w+'),
brute-force Levenshtein) and, at the first scope of each kind (the root, a
directory, a file), to the `tadoc` command's output on the archive.
A value over 64 KiB is cut into parts that each fit and join to the whole.
Bad names give EINVAL. On writable mounts, after random edits (inserts,
deletes, overwrites, new files, unlinks, renames), every attribute equals
the oracle over the mount's current files: a format 4 archive, and a format
5 one at 64 KiB shards (files split over shards; `tadoc add` of the tree to
an archive of a file without ASCII separators, which the builder cuts
inside words), with phrases and words at those cuts asked at the root.
A file of 1.4 MB beside a new file on a writable mount: files.WORD
equals the oracle (the phrase pass over many root symbols in chunks).
A new file whose phrase's words lie 64 KiB and more apart: count, search
and files of the phrase (a text is read in 64 KiB chunks).
The read-only mounts are of format 5 archives (the default) with the
analytics tables (`--top-ngrams=30`: the root's top words and n-grams
read as a prefix); so is the writable format 5 one (`tadoc add` keeps them).

Environment: TADOC, TADOCFS, TADOC_CORPORA (sotu). Exit 77 without
/dev/fuse or root.
"""
import errno
import importlib.util
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402
from fs_write_lib import teardown, TADOC, check, compress, finish, log, mount, unmount  # noqa: E402

TESTS = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("TADOC", TADOC)
_spec = importlib.util.spec_from_file_location("cli_analytics", os.path.join(TESTS, "cli_analytics.py"))
cli_an = importlib.util.module_from_spec(_spec)   # make_midcut, shard_cuts, cut_phrases
_spec.loader.exec_module(cli_an)
MAXV = 65536
NAME_MAX = 255


def getx(path, name):
    """The whole value of a list attribute: its parts joined (each <= 64 KiB).
    A part that is one line too long for any value gives E2BIG (as getxattr
    does for a value over the kernel's limit): it is stepped over (@N+1)."""
    out, parts = b"", 0
    while True:
        try:
            v = os.getxattr(path, name)
        except OSError as e:
            if e.errno != errno.E2BIG or "@" not in name:
                raise
            base, n = name.rsplit("@", 1)
            name = "%s@%d" % (base, int(n) + 1)
            out += b"<E2BIG>\n"
            continue
        parts += 1
        if len(v) > MAXV:
            raise AssertionError("part of %s over 64 KiB: %d" % (name, len(v)))
        i = v.rfind(b"\n", 0, len(v) - 1) + 1
        if v[i:].startswith(b"#more "):
            out += v[:i]
            name = os.fsdecode(v[i + 6:].rstrip(b"\n"))
            continue
        return out + v, parts


def getfattr(path, name):
    r = subprocess.run(["getfattr", "--only-values", "--absolute-names", "-n", name, path], capture_output=True)
    return r.stdout if r.returncode == 0 else None


def cli(*args):
    r = subprocess.run([TADOC] + [os.fsencode(a) if isinstance(a, str) else a for a in args],
                       capture_output=True, timeout=600)
    return r.stdout if r.returncode == 0 else None


def queries(c, scope, rng, is_dir, extra=()):
    """(name, oracle bytes, CLI argv or None) for one scope; extra: more
    phrases (and, the single words among them, fuzzy queries)."""
    s = scope
    p = [s] if s else []
    top = [w for w, _ in c.top(s, 3)]
    vocab = sorted(w for w in c.counter(s) if len(w) <= 60)
    out = []
    for n in (0, 1, 7, 20):
        out.append(("top.%d" % n, oracle.render("top", c, {"path": s, "n": n}), ["top", "-n", str(n)] + p))
    out.append(("vector", oracle.render("vector", c, {"path": s}), ["vector", s or b"."]))
    for ln, k in ((2, 10), (3, 20), (4, 0 if s else 15), (8, 5)):
        out.append(("ngrams.%d.%d" % (ln, k), oracle.render("ngrams", c, {"path": s, "len": ln, "top": k}),
                    ["ngrams", "-n", str(ln), "--top", str(k)] + p))
    fq = [w for w in top if len(w) <= 60][:2] + rng.sample(vocab, min(1, len(vocab))) + [b"zzqqxx", "café".encode()]
    fq += [w for w in extra if b" " not in w and len(w) <= 60][:4]
    for w in dict.fromkeys(fq):
        for k in (0, 1, 2, 3):
            out.append(("fuzzy.%d.%s" % (k, os.fsdecode(w)),
                        oracle.render("fuzzy", c, {"path": s, "word": os.fsdecode(w), "k": k}),
                        ["fuzzy", "-k", str(k), w] + p))
    phr = []
    files = [f for f in c.files_in(s) if len(c.words[f]) >= 3]
    for _ in range(4):
        if not files:
            break
        ws = c.words[rng.choice(files)]
        m = rng.choice((2, 2, 3))
        i = rng.randrange(len(ws) - m + 1)
        phr.append(b" ".join(w for w, _ in ws[i:i + m]))
    phr += [w for w in top[:1]] + [b"zzqqxx the"] + list(extra)
    for q in dict.fromkeys(phr):
        if len(q) > NAME_MAX - 20:
            continue
        hits = c.hits(q, s)
        out.append(("count." + os.fsdecode(q), b"%d" % len(hits), None))
        if is_dir:
            want = b"".join(oracle.esc_path(f) + b":%d\n" % o for f, o in hits)
            out.append(("files." + os.fsdecode(q), oracle.render("files", c, {"path": s, "word": os.fsdecode(q)}),
                        ["files", q] + p))
        else:
            want = b"".join(b"%d\n" % o for _, o in hits)
        out.append(("search." + os.fsdecode(q), want, ["search", q] + p))
    return out


def check_scopes(label, c, mnt, arch, scopes, rng, use_cli=True, extra=None):
    """Every attribute of queries() at each scope against the oracle; with use_cli, at the first
    scope of each kind (the root, a directory, a file) against `tadoc` too (cli_analytics checks
    `tadoc` against the oracle). extra: {scope: phrases} asked there besides the random ones."""
    bad = n = 0
    cli_kinds = set()
    for s in scopes:
        is_dir = not s or c.kind.get(s) == "d"
        kind = "root" if not s else c.kind.get(s)
        with_cli = use_cli and kind not in cli_kinds
        cli_kinds.add(kind)
        path = os.path.join(mnt, os.fsdecode(s))
        for i, (name, want, argv) in enumerate(queries(c, s, rng, is_dir, (extra or {}).get(s, ()))):
            n += 1
            try:
                got, _ = getx(path, "user.tadoc." + name)
            except OSError as e:
                bad += not check(False, "%s %r %s: %s" % (label, s, name, e))
                continue
            if b"<E2BIG>\n" in got:   # lines longer than a value can be: the rest must be equal
                want = b"".join(x if len(x) < MAXV - 400 else b"<E2BIG>\n" for x in want.splitlines(True))
            bad += not check(got == want, "%s %r %s: %r..., oracle %r..." % (label, s, name, got[:200], want[:200]))
            if with_cli and argv is not None:
                ref = cli(*cli_args(argv, arch))
                if ref and b"<E2BIG>\n" in got:
                    ref = b"".join(x if len(x) < MAXV - 400 else b"<E2BIG>\n" for x in ref.splitlines(True))
                bad += not check(ref == got, "%s %r %s: xattr differs from tadoc %s" % (label, s, name, argv[0]))
            if i % 5 == 0 and len(want) < MAXV - 100:  # getfattr reads the same bytes
                full = "user.tadoc." + name
                bad += not check(getfattr(path, full) == os.getxattr(path, full),
                                 "%s %r %s: getfattr differs" % (label, s, name))
    log("  %s: %d attributes over %d scopes equal the oracle%s%s" %
        (label, n, len(scopes), " (and tadoc at one scope of each kind)" if use_cli else "",
         "" if not bad else " (%d differ)" % bad))


def cli_args(argv, arch):
    """tadoc argv with ARCHIVE inserted where each command takes it."""
    cmd, rest = argv[0], list(argv[1:])
    if cmd == "vector":
        return [cmd, arch] + rest
    opts = []
    while rest and isinstance(rest[0], str) and rest[0].startswith("-"):
        opts += rest[:2]
        rest = rest[2:]
    return [cmd] + opts + [arch] + rest


def check_more(mnt, arch, c, how):
    """The root's vector is over 64 KiB: parts that fit, joined = tadoc vector
    (parts cut from the cached whole list, or each computed again)."""
    want = cli("vector", arch, ".")
    got, parts = getx(mnt, "user.tadoc.vector")
    check(len(want) > MAXV and parts > 1 and got == want,
          "vector of the root: %d bytes in %d parts, tadoc %d bytes" % (len(got), parts, len(want)))
    first = os.getxattr(mnt, "user.tadoc.vector")
    last = first.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    check(last.startswith(b"#more user.tadoc.vector@") and len(first) <= MAXV,
          "first part ends with %r (%d bytes)" % (last, len(first)))
    got, parts = getx(mnt, "user.tadoc.top.0")
    check(got == oracle.render("top", c, {"path": b"", "n": 0}) and parts > 1, "top.0 of the root in %d parts" % parts)
    try:
        os.getxattr(mnt, "user.tadoc.vector@999999999")
        check(False, "vector@999999999: no ENODATA")
    except OSError as e:
        check(e.errno == errno.ENODATA, "vector@999999999: %s" % e)
    log("  #more (%s): the root's vector comes in %d parts of at most 64 KiB, joined equal to tadoc vector"
        % (how, parts))


def check_einval(mnt, afile):
    bad = ["top.-1", "top.x", "top.", "top.1x", "top. 3", "ngrams.1.5", "ngrams.9.5", "ngrams.3", "ngrams.3.-2",
           "ngrams.x.2", "ngrams.3.2.1", "fuzzy.4.word", "fuzzy.1.", "fuzzy.1.two words", "fuzzy.-1.word",
           "fuzzy.x.word", "fuzzy.word", "count.", "count.of  the", "count. the", "count.the ", "count.a-b",
           "search.!!", "search.of, the", "files.", "files.a  b", "vector@x", "top.3@01", "count.a b c d e f g h i",
           "top.18446744073709551616", "top.99999999999999999999"]
    n = 0
    for where in (mnt, afile):
        for name in bad:
            try:
                os.getxattr(where, "user.tadoc." + name)
                ok = False
            except OSError as e:
                ok = e.errno == errno.EINVAL
            n += check(ok, "%s on %s: not EINVAL" % (name, where))
    # the largest N `tadoc top -n` takes is taken too: every word
    big = "top.18446744073709551615"
    check(getx(afile, "user.tadoc." + big) == getx(afile, "user.tadoc.top.0"),
          "%s: not the same as top.0 (every word)" % big)
    log("  %d malformed names give EINVAL (file and directory); top.2^64-1 = top.0" % n)


def read_only(label, tree, work, rng, nfiles, ndirs):
    arch = os.path.join(work, label + ".tadoc")
    # format 5 with the analytics tables (the root's top words and n-grams read as a prefix)
    # and the stored root vector (read in blocks; with cache_size=0 each #more part skips
    # the blocks before it)
    compress(tree, arch, ["--top-ngrams=30", "--root-vector"])
    c = oracle.Corpus(tree)
    mnt = os.path.join(work, "mnt-" + label)
    mount(arch, mnt, "ro")
    try:
        files = sorted(c.words)
        dirs = [rel for rel, _ in c.entries if c.kind[rel] == "d" and rel]
        special = [f for f in files if any(any(b > 0x7f for b in w) for w, _ in c.words[f])][:3]
        scopes = [b""] + rng.sample(dirs, min(ndirs, len(dirs))) + \
            list(dict.fromkeys(special + rng.sample(files, min(nfiles, len(files)))))
        scopes = [s for s in scopes if b"\n" not in s]
        check_scopes("%s (ro)" % label, c, mnt, arch, scopes, rng)
        if label == "sotu":
            check_more(mnt, arch, c, "list cache")
        check_einval(mnt, os.path.join(mnt, os.fsdecode(files[0])))
    finally:
        unmount(mnt)
    if label == "sotu":
        mount(arch, mnt, "ro", "cache_size=0")
        try:
            check_more(mnt, arch, c, "cache_size=0: each part computed")
        finally:
            unmount(mnt)


def vector_parts(work):
    """A stored root vector over several blocks (--root-vector, 40,000 words), read through
    the mount in #more parts with nothing cached (cache_size=0: each part starts at the
    block holding its first word): joined equal to the oracle; a part starting on a block's
    first word, on its last and past the end."""
    many = os.path.join(work, "many")
    oracle.make_many_words(many)
    c = oracle.Corpus(many)
    arch = os.path.join(work, "many.tadoc")
    compress(many, arch, ["--root-vector", "--shard-size", "256K"])
    want = oracle.render("vector", c, {"path": b""})
    lines = want.split(b"\n")
    mnt = os.path.join(work, "mnt-many")
    mount(arch, mnt, "ro", "cache_size=0")
    try:
        got, parts = getx(mnt, "user.tadoc.vector")
        check(got == want and parts > 3, "vector of %d words in %d parts: equal %s" % (len(lines) - 1, parts, got == want))
        for n in (16383, 16384, 16385, 32768, len(lines) - 2):
            v = os.getxattr(mnt, "user.tadoc.vector@%d" % n).split(b"\n")
            body = [ln for ln in v if ln and not ln.startswith(b"#more ")]
            check(body and body == lines[n:n + len(body)], "vector@%d starts with %r, want %r" % (n, v[0], lines[n]))
        check(os.getxattr(mnt, "user.tadoc.vector@%d" % (len(lines) - 1)) == b"", "vector@END not empty")
        try:
            os.getxattr(mnt, "user.tadoc.vector@%d" % len(lines))
            check(False, "vector past the end: no ENODATA")
        except OSError as e:
            check(e.errno == errno.ENODATA, "vector past the end: %s" % e)
        log("  stored root vector: %d words in %d parts through the mount (cache_size=0), equal to the oracle"
            % (len(lines) - 1, parts))
    finally:
        unmount(mnt)


def random_edits(mnt, rng, n, keep=()):
    """Random content and namespace changes through the mount (the files
    in keep, relative paths, are left alone)."""
    words = ["alpha", "beta", "the", "of", "café", "日本", "x86_64", "zzqqxx", "new", "Word", "007"]
    files = []
    for dp, dn, fn in os.walk(mnt):
        files += [os.path.join(dp, f) for f in fn if os.path.isfile(os.path.join(dp, f))
                  and not os.path.islink(os.path.join(dp, f))
                  and os.path.relpath(os.path.join(dp, f), mnt) not in keep]
    files.sort()
    for i in range(n):
        f = rng.choice(files)
        op = rng.randrange(6)
        text = (" ".join(rng.choice(words) for _ in range(rng.randint(1, 6))) + rng.choice([" ", "\n", ", "])).encode()
        size = os.path.getsize(f)
        if op == 0:      # insert through the xattr
            off = rng.randint(0, size)
            os.setxattr(f, "user.tadoc.insert.%d" % off, text)
        elif op == 1 and size:    # delete
            off = rng.randrange(size)
            os.setxattr(f, "user.tadoc.delete.%d" % off, b"%d" % rng.randint(1, 40))
        elif op == 2:    # overwrite in place
            with open(f, "r+b") as h:
                h.seek(rng.randint(0, size))
                h.write(text)
        elif op == 3:    # append
            with open(f, "ab") as h:
                h.write(text)
        elif op == 4:    # a new file
            d = os.path.dirname(f)
            nf = os.path.join(d, "new%d.txt" % i)
            with open(nf, "wb") as h:
                h.write(text * rng.randint(1, 3))
            files.append(nf)
        elif len(files) > 4:      # unlink or rename
            files.remove(f)
            # a name that ".moved" would make longer than NAME_MAX is unlinked
            if rng.random() < 0.5 or len(os.fsencode(os.path.basename(f))) + 6 > NAME_MAX:
                os.unlink(f)
            else:
                nf = f + ".moved"
                os.rename(f, nf)
                files.append(nf)


def writable(tree, work, rng):
    """Format 4: the adversarial tree after random edits."""
    arch = os.path.join(work, "w4.tadoc")
    compress(tree, arch, ["--format", "4"])
    mnt = os.path.join(work, "mnt-w4")
    mount(arch, mnt, "rw")
    try:
        random_edits(mnt, rng, 60)
        c = oracle.Corpus(mnt)   # the mount's current files
        files = sorted(c.words)
        dirs = [rel for rel, _ in c.entries if c.kind[rel] == "d" and rel]
        edited = [f for f in files if b"new" in f or f.endswith(b".moved")][:3]
        scopes = [b""] + rng.sample(dirs, min(2, len(dirs))) + edited + rng.sample(files, min(2, len(files)))
        scopes = [s for s in dict.fromkeys(scopes) if b"\n" not in s]
        check_scopes("format 4, adversarial after 60 random edits (rw)", c, mnt, arch, scopes, rng, use_cli=False)
        check_einval(mnt, os.path.join(mnt, os.fsdecode(files[0])))
    finally:
        unmount(mnt)


def writable_shards(tree, work, rng):
    """Format 5 at 64 KiB shards: a file without ASCII separators (cut inside
    words and characters, first in input order so its cuts are where the
    shards' inputs end) and the adversarial tree, after random edits that
    leave that file alone; a new file beside it puts its directory on the
    edited (file set) path. Phrases and words at its cuts are asked there."""
    mid = os.path.join(work, "mid")
    os.mkdir(mid)
    # 2.3 MB: cut twice (at 1114113 and 2228226: 1 MiB past the shard size at most)
    cli_an.make_midcut(os.path.join(mid, "nosep.txt"), size=2_300_000)
    arch = os.path.join(work, "w5.tadoc")
    compress(mid, arch, ["--format", "5", "--shard-size", "65537", "--top-ngrams=30"])
    # the cuts of nosep.txt, read before the tree is added (its shards stay first)
    cuts = cli_an.shard_cuts(arch)
    r = subprocess.run([TADOC, "add", arch, tree], capture_output=True)
    check(r.returncode == 0, "tadoc add: %r" % r.stderr)
    nsh = [ln for ln in cli(b"info", arch).decode().splitlines() if ln.startswith("shards")]
    mnt = os.path.join(work, "mnt-w5")
    mount(arch, mnt, "rw")
    try:
        random_edits(mnt, rng, 60, keep=("nosep.txt",))
        with open(os.path.join(mnt, "beside.txt"), "wb") as h:
            h.write("alpha beta the café 日本 x86_64\n".encode())
        c = oracle.Corpus(mnt)
        files = sorted(c.words)
        dirs = [rel for rel, _ in c.entries if c.kind[rel] == "d" and rel]
        edited = [f for f in files if b"new" in f or f.endswith(b".moved")][:2]
        scopes = [b""] + rng.sample(dirs, min(2, len(dirs))) + edited + \
            rng.sample(files, min(2, len(files)))
        scopes = [s for s in dict.fromkeys(scopes) if b"\n" not in s]
        cutp = [p for p in cli_an.cut_phrases(c, b"nosep.txt", cuts) if len(p) <= NAME_MAX - 20]
        check(len(cuts) >= 2 and len(cutp) >= 8, "nosep.txt: %d cuts, %d phrases at them" % (len(cuts), len(cutp)))
        log("  %s; nosep.txt cut %d times inside words" % (nsh[0] if nsh else "no shards line", len(cuts)))
        # every other phrase at the cuts (words cut in two, runs across each cut) at the root
        check_scopes("format 5, adversarial and a file cut inside words after 60 random edits (rw)", c, mnt, arch,
                     scopes, rng, use_cli=False, extra={b"": cutp[::2]})
    finally:
        unmount(mnt)


def writable_big(work, rng):
    """A file of 1.4 MB of random words (over 128K root symbols: its phrase
    pass runs in chunks on several threads) and a new file beside it: the
    files of the edited (file set) path. Each chunk counted the rest of the
    file again for a one-word query (9895 for 1148 before the fix)."""
    src = os.path.join(work, "big")
    os.mkdir(src)
    vocab = ["the", "of", "and"] + ["w%d" % i for i in range(2000)]
    with open(os.path.join(src, "a.txt"), "w") as f:
        f.write(" ".join(rng.choice(vocab) for _ in range(220000)) + "\n")
    arch = os.path.join(work, "big.tadoc")
    compress(src, arch)
    mnt = os.path.join(work, "mnt-big")
    mount(arch, mnt, "rw")
    try:
        with open(os.path.join(mnt, "new.txt"), "wb") as h:
            h.write(b"the end of w7\n")
        c = oracle.Corpus(mnt)
        for w in ("the", "w7", "of the"):
            want = oracle.render("files", c, {"word": w})
            got, _ = getx(mnt, "user.tadoc.files." + w)
            check(got == want, "big file beside a new one (rw): files.%s = %r, oracle %r" % (w, got[:80], want[:80]))
    finally:
        unmount(mnt)


def writable_gap(work):
    """A phrase of a new file on a writable mount whose words are over
    64 KiB apart: the words of a text come a 64 KiB chunk at a time, and
    the phrase matcher kept pointers to its last words, which the next
    chunk overwrote (count 0, no hit, before the fix)."""
    src = os.path.join(work, "gap")
    os.mkdir(src)
    with open(os.path.join(src, "a.txt"), "w") as f:
        f.write("alpha beta\n")
    arch = os.path.join(work, "gap.tadoc")
    compress(src, arch)
    mnt = os.path.join(work, "mnt-gap")
    mount(arch, mnt, "rw")
    try:
        for name, gap in (("g1.txt", 65527), ("g2.txt", 200000)):
            with open(os.path.join(mnt, name), "wb") as h:
                h.write(b"x " * 50000 + b"alpha" + b"\0" * gap + b"beta gamma" + b" " * gap + b"delta\n")
        c = oracle.Corpus(mnt)
        for ph in ("alpha beta", "beta gamma delta", "x alpha beta gamma"):
            for scope in ("", "g1.txt", "g2.txt"):
                p = os.path.join(mnt, scope)
                got, _ = getx(p, "user.tadoc.count." + ph)
                want = b"%d" % len(c.hits(ph.encode(), scope.encode()))
                check(got == want, "phrase over a gap (rw): %s count.%s = %r, oracle %r" % (scope or "/", ph, got, want))
                got, _ = getx(p, "user.tadoc.files." + ph)
                want = oracle.render("files", c, {"word": ph, "path": scope})
                check(got == want, "phrase over a gap (rw): %s files.%s = %r, oracle %r" % (scope or "/", ph, got, want))
    finally:
        unmount(mnt)


def main():
    if not os.path.exists("/dev/fuse") or os.geteuid() != 0 or not shutil.which("getfattr"):
        print("SKIP: needs /dev/fuse, root and getfattr")
        sys.exit(77)
    work = tempfile.mkdtemp(prefix="tadoc-fs-analytics-")
    try:
        rng = random.Random(23)
        adv = os.path.join(work, "adv")
        subprocess.run([sys.executable, os.path.join(TESTS, "gen_adversarial.py"), adv], check=True,
                       stdout=subprocess.DEVNULL)
        log("== read-only mounts")
        read_only("adversarial", adv, work, rng, nfiles=3 if oracle.sanitized() else 5,
                  ndirs=2 if oracle.sanitized() else 3)
        sotu = oracle.real_corpus("sotu")
        if sotu:
            read_only("sotu", sotu, work, rng, nfiles=2, ndirs=2)
        else:
            log("  " + oracle.corpus_skip("sotu"))
        vector_parts(work)
        log("== writable mounts after random edits")
        writable(adv, work, rng)
        writable_shards(adv, work, rng)
        writable_big(work, rng)
        writable_gap(work)
    finally:
        teardown(work)
    finish()


if __name__ == "__main__":
    main()
