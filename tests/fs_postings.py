#!/usr/bin/env python3
"""fs_postings: the stored ranked inverted index (`tadoc compress --postings`).

`tadoc files ARCHIVE WORD [PATH]` of archives with postings equals the
independent oracle (tests/oracle.py) on the adversarial tree as format 4
and as format 5 at small shard sizes (files split over shards), and on sotu
as format 5:
the most frequent words, random ones, words over 255 bytes (no block: the
grammar's path), non-ASCII words, an absent word, phrases; at the root, in
directories and on files; -n; the -f batch. `tadoc verify` passes and
`tadoc info` reports the section. `tadoc add` to an archive with postings
gives its new shards postings too, and the answers stay the oracle's.
A writable mount with postings and the fuzzy index answers a scope that
reads as in the archive from them (the read-only mount's code) and every
other scope from the file set: all the analytics xattrs equal the oracle
before edits, after edits beside, inside and above (a renamed directory)
scopes, and after each further edit (no value outlives a change).
On a writable mount after random edits, user.tadoc.files.WORD equals the
oracle over the mount's current files (edited files are never answered
from the stored lists); `tadoc compact` afterwards keeps postings in every
shard. A damaged section (a byte flipped, checksums left stale; or
flipped with every checksum made right again) is refused by verify and by
`tadoc files` with one message naming the archive and the section.
Phrases, which postings restrict to the files holding their rarest word
(td_analytics.c): `tadoc count`, `search` and `files` of phrases around
words in one or two files, of rare words never together, of rare beside
common words, of common pairs and of absent words, on format 4 and 5
(files split over shards, phrases across cuts inside words and between
words), and the same
xattrs on the writable mount after the edits (phrases only the edits
wrote included), against the oracle.

Environment: TADOC, TADOCFS, TADOC_CORPORA (sotu). Exit 77 without
/dev/fuse or root (the mount part; the rest needs neither, but runs with
it so one test covers the feature).
"""
import importlib.util
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402
from fs_write_lib import teardown, TADOC, check, finish, log, mount, unmount, skip_without_fuse  # noqa: E402

TESTS = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("TADOC", TADOC)


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(TESTS, name + ".py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


fs_an = load("fs_analytics")   # random_edits, getx
cli_an = load("cli_analytics")  # make_midcut, shard_cuts, cut_phrases


def tadoc(*args):
    return subprocess.run([TADOC] + [os.fsencode(a) if isinstance(a, str) else a for a in args],
                          capture_output=True, timeout=600, env=oracle.leak_env(args))  # leak-checked once a kind


def compress(tree, arch, args):
    r = tadoc("compress", "-q", "--postings", "-o", arch, *args, tree)
    check(r.returncode == 0, "compress %s %s: %r" % (tree, args, r.stderr))


def postings_line(arch):
    for ln in tadoc("info", arch).stdout.decode().splitlines():
        if ln.startswith("postings"):
            return ln
    return "(no postings line)"


def words_of(c, rng, scope):
    top = [w for w, _ in c.top(scope, 4)]
    vocab = sorted(c.counter(scope))
    out = top + rng.sample(vocab, min(4, len(vocab)))
    out += [w for w in vocab if len(w) > 255][:2]                    # no block: the grammar's path
    out += [w for w in vocab if any(b > 0x7f for b in w)][:3]        # non-ASCII
    out += [b"zzqqxxw"]                                              # absent
    if top:
        out += [top[0] + b" " + top[0]]                              # a phrase: the matcher's path
    return [w for w in dict.fromkeys(out) if b"\n" not in w and len(w) < 4000]


def rare_phrases(c, rng, k=3):
    """Phrases the postings restrict (td_analytics.c, "phrases of rare words"): around
    words in at most two files (the word and its neighbours), two rare words of different
    files (each in few files, never together), a rare word beside a common one it never
    precedes, common pairs, and absent words beside common ones."""
    df = {}
    for f, ws in c.words.items():
        for w in set(w for w, _ in ws):
            df[w] = df.get(w, 0) + 1
    top = [w for w, _ in c.top(b"", 2)]
    out, rare = [], []
    files = sorted(f for f in c.words if len(c.words[f]) >= 4)
    for f in rng.sample(files, min(len(files), 40)):
        ws = c.words[f]
        i = next((i for i in rng.sample(range(1, len(ws) - 2), len(ws) - 3) if df[ws[i][0]] <= 2), None)
        if i is None or len(rare) >= 2 * k:
            continue
        rare.append((ws[i][0], f))
        out += [b" ".join(w for w, _ in ws[i:i + 2]), b" ".join(w for w, _ in ws[i - 1:i + 2])]
    out = out[:2 * k]
    for (a, fa), (b, fb) in zip(rare, rare[1:]):
        if fa != fb:
            out.append(a + b" " + b)
    if rare and top:
        out += [rare[0][0] + b" " + top[0], top[0] + b" " + rare[0][0]]
    if len(files) > 0:
        ws = c.words[rng.choice(files)]
        out.append(b" ".join(w for w, _ in ws[:2]))
    out += [b" ".join(top[:2]) if len(top) > 1 else b"", b"zzqqxxw " + top[0], top[0] + b" zzqqxxw"] if top else []
    return [p for p in dict.fromkeys(out) if b" " in p and b"\n" not in p and len(p) < 250]


def check_phrases(label, c, arch, rng, scopes, mnt=None, phr=None):
    """count, search and files of rare_phrases (or phr) on `scopes` against the oracle:
    through tadoc, and through the xattrs of the mount mnt when given."""
    n = bad = 0
    t0 = time.monotonic()
    phr = phr if phr is not None else rare_phrases(c, rng, 2) + cli_an.common_phrases(c, random.Random(7))[:10]
    for s in scopes:
        is_dir = not s or c.kind.get(s) == "d"
        p = [s] if s else []
        for q in phr:
            hits = c.hits(q, s)
            want = {"count": b"%d\n" % len(hits),
                    "search": b"".join((oracle.esc_path(f) + b":" if is_dir else b"") + b"%d\n" % o for f, o in hits)}
            if is_dir:
                want["files"] = oracle.render("files", c, {"path": s, "word": os.fsdecode(q)})
            for cmd, w in want.items():
                n += 1
                if mnt is None:
                    got = tadoc(cmd, arch, q, *p)
                    got = got.stdout if got.returncode == 0 else got.stderr
                else:
                    got, _ = fs_an.getx(os.path.join(mnt, os.fsdecode(s)), "user.tadoc.%s.%s" % (cmd, os.fsdecode(q)))
                    w = w[:-1] if cmd == "count" else w
                bad += not check(got == w, "%s %r %s %r: %r..., oracle %r..." % (label, s, cmd, q[:60], got[:200],
                                                                             w[:200]))
    log("  %s: %d phrase queries (count, search, files; %d phrases) over %d scopes equal the oracle%s (%.1f s)" %
        (label, n, len(phr), len(scopes), "" if not bad else " (%d differ)" % bad, time.monotonic() - t0))


def check_archive(label, c, arch, rng, ndirs=4, nfiles=4, phrases=True):
    r = tadoc("verify", arch)
    check(r.returncode == 0, "%s: verify: %r" % (label, r.stderr))
    pl = postings_line(arch)
    check(pl.startswith("postings") and "none" not in pl, "%s: info says %r" % (label, pl))
    dirs = [rel for rel, _ in c.entries if c.kind[rel] == "d" and rel]
    files = sorted(c.words)
    if oracle.sanitized():  # the same kinds of scope, fewer of them
        ndirs, nfiles = min(ndirs, 3), min(nfiles, 3)
    scopes = [b""] + rng.sample(dirs, min(ndirs, len(dirs))) + rng.sample(files, min(nfiles, len(files)))
    n = bad = 0
    for s in scopes:
        p = [s] if s else []
        for i, w in enumerate(words_of(c, rng, s if c.kind.get(s) == "d" or not s else b"")):
            for lim in ((), ("-n", "2")) if i < 3 else ((),):  # -n on the most frequent words
                want = oracle.render("files", c, {"path": s, "word": os.fsdecode(w), "n": 2 if lim else 0})
                got = tadoc("files", *lim, arch, w, *p)
                n += 1
                bad += not check(got.returncode == 0 and got.stdout == want,
                                 "%s: files %s %r %r: %r..., oracle %r..." % (label, " ".join(lim), w[:40], s,
                                                                                 got.stdout[:200] or got.stderr,
                                                                                 want[:200]))
    # the batch form (td_files_batch)
    qs = words_of(c, rng, b"")
    qfile = arch + ".words"
    with open(qfile, "wb") as h:
        h.write(b"".join(q + b"\n" for q in qs))
    want = b"".join(b"".join(q + b"\t" + ln + b"\n" for ln in
                             oracle.render("files", c, {"path": b"", "word": os.fsdecode(q), "n": 0}).splitlines())
                    for q in qs)
    got = tadoc("files", "-f", qfile, arch)
    n += 1
    bad += not check(got.stdout == want, "%s: files -f: %r..." % (label, got.stdout[:200] or got.stderr))
    log("  %s (%s): %d ranked-files queries over %d scopes equal the oracle%s" %
        (label, pl, n, len(scopes), "" if not bad else " (%d differ)" % bad))
    if phrases:
        check_phrases(label, c, arch, rng, scopes[:2])


def sections(arch):
    """{id: (offset, size)} from the section table (td_format.h)."""
    with open(arch, "rb") as h:
        b = h.read()
    import struct
    nsec, = struct.unpack_from("<I", b, 24)
    tab, = struct.unpack_from("<Q", b, 32)
    out = {}
    for i in range(nsec):
        sid, _, off, size, _ = struct.unpack_from("<IIQQQ", b, tab + 32 * i)
        out[sid] = (off, size)
    return out


def damaged(work, tree, c):
    arch = os.path.join(work, "dmg.tadoc")
    compress(tree, arch, ["--format", "4"])
    off, size = sections(arch)[40]
    patch = os.path.join(TESTS, "archive_patch.py")
    for how in ("stale", "resum"):
        a = os.path.join(work, "dmg-%s.tadoc" % how)
        shutil.copy(arch, a)
        with open(a, "r+b") as h:   # a byte of the item data, past the header and offsets
            h.seek(off + size - 9)
            byte = h.read(1)
            h.seek(off + size - 9)
            h.write(bytes([byte[0] ^ 0x5a]))
        if how == "resum":
            subprocess.run([sys.executable, patch, "resum", a], check=True)
        r = tadoc("verify", a)
        err = r.stderr.decode(errors="replace")
        check(r.returncode != 0 and "postings" in err and a in err and err.count("\n") == 1,
              "verify of a damaged postings section (%s): rc %d, %r" % (how, r.returncode, err))
        # the word whose block holds the flipped byte: the last in byte order
        c_words = sorted(c.counter(b""))
        last = [w for w in c_words if len(w) <= 255][-1]
        r2 = tadoc("files", a, last)
        err2 = r2.stderr.decode(errors="replace")
        if how == "stale":
            check(r2.returncode != 0 and "postings" in err2 and a in err2 and not r2.stdout,
                  "files on a damaged postings section: rc %d, %r, %r" % (r2.returncode, r2.stdout[:100], err2))
        else:   # checksums right: a query may answer from the damaged block only if it still decodes
            check(r2.returncode in (0, 1), "files on a resummed damaged section: rc %d" % r2.returncode)
        log("  damaged postings (%s): verify says %r" % (how, err.strip()))


def writable(work, tree, rng):
    arch = os.path.join(work, "w5.tadoc")
    compress(tree, arch, ["--format", "5", "--shard-size", "64K"])
    mnt = os.path.join(work, "mnt-w5")
    mount(arch, mnt, "rw")
    try:
        fs_an.random_edits(mnt, rng, 60)
        # new files created in the reverse of path order: hits on a directory
        # still come in path order (not creation order), words and phrases
        for rel in ("pz_t/new12.txt", "pz_m/new31.txt"):
            os.makedirs(os.path.join(mnt, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(mnt, rel), "w") as h:
                h.write("zzhit wordy zzhit\nalpha beta\n")
        c = oracle.Corpus(mnt)
        dirs = [rel for rel, _ in c.entries if c.kind[rel] == "d" and rel]
        scopes = [b""] + rng.sample(dirs, min(5, len(dirs)))
        qs = [b"the", b"of", b"alpha", "café".encode(), b"zzqqxx", b"new", b"Word", b"007"]
        n = bad = 0
        for s in scopes:
            path = os.path.join(mnt, os.fsdecode(s))
            for w in qs + [w for w, _ in c.top(s, 3)]:
                want = oracle.render("files", c, {"path": s, "word": os.fsdecode(w)})
                got, _ = fs_an.getx(path, "user.tadoc.files." + os.fsdecode(w))
                n += 1
                bad += not check(got == want, "rw %r files.%s: %r..., oracle %r..." % (s, os.fsdecode(w), got[:200],
                                                                                        want[:200]))
        log("  writable format 5 (64K shards) after 60 random edits: %d files.WORD attributes equal the oracle%s"
            % (n, "" if not bad else " (%d differ)" % bad))
        # phrases: rare ones of the edited tree, and ones only the edits wrote (absent from the postings)
        check_phrases("writable, phrases", c, arch, rng, scopes[:1], mnt=mnt,
                      phr=rare_phrases(c, rng, 2) + [b"zzqqxx the", b"the zzqqxx", b"alpha beta", b"new Word",
                                                          b"zzhit", b"zzhit wordy", b"alpha"])
    finally:
        unmount(mnt)
    r = tadoc("compact", arch)
    check(r.returncode == 0, "compact: %r" % r.stderr)
    pl = postings_line(arch)
    got = pl.split("in ")[-1].split(" of ") if "shards" in pl else []
    check(len(got) == 2 and got[0] == got[1].split()[0], "after compaction: %r" % pl)
    check_archive("compacted after the edits", c, arch, rng, ndirs=3, nfiles=3, phrases=False)


def writable_clean(work, tree, rng):
    """A writable mount of an archive with postings and the fuzzy index: a scope that
    reads as in the archive (no change below it, same path) is answered by the
    read-only mount's code (the stored lists, the fuzzy index, the caches), any other
    by the file-set path; every answer is the oracle's over the mount's current files,
    before any edit, after edits beside, inside and above (a renamed directory) a
    scope, and again after each further edit (a value kept for getfattr's second
    call must not outlive a change)."""
    arch = os.path.join(work, "wc5.tadoc")
    compress(tree, arch, ["--format", "5", "--shard-size", "64K", "--fuzzy-index"])
    mnt = os.path.join(work, "mnt-wc5")
    mount(arch, mnt, "rw")
    try:
        c = oracle.Corpus(mnt)
        dirs = sorted(rel for rel, _ in c.entries if c.kind[rel] == "d" and rel and b"\n" not in rel
                      and any(f.startswith(rel + b"/") for f in c.words))
        top = [d for d in dirs if b"/" not in d]
        check(len(top) >= 3, "the tree has %d top directories with files" % len(top))
        files = sorted(f for f in c.words if b"\n" not in f)
        scopes = [b""] + rng.sample(dirs, min(4, len(dirs))) + rng.sample(files, min(3, len(files)))
        fs_an.check_scopes("rw, no edit yet (the archive's answers)", c, mnt, arch, list(dict.fromkeys(scopes)), rng,
                           use_cli=False)
        # edit a file of one top directory, rename another, leave a third alone
        d_edit, d_ren, d_keep = top[0], top[1], top[2]
        f_edit = next(f for f in files if f.startswith(d_edit + b"/"))
        with open(os.path.join(mnt, os.fsdecode(f_edit)), "ab") as h:
            h.write(b" zzqqxx the alpha zzqqxx\n")
        d_new = d_ren + b".renamed"
        os.rename(os.path.join(mnt, os.fsdecode(d_ren)), os.path.join(mnt, os.fsdecode(d_new)))
        c = oracle.Corpus(mnt)
        inner = [d for d in dirs if d.startswith(d_ren + b"/")][:1]
        scopes = [b"", d_edit, f_edit, d_new, d_keep] + [d_new + d[len(d_ren):] for d in inner]
        scopes += [f for f in sorted(c.words) if f.startswith(d_keep + b"/")][:1]
        fs_an.check_scopes("rw after edits beside, inside and above scopes", c, mnt, arch, scopes, rng,
                           use_cli=False, extra={s: [b"zzqqxx the", b"the alpha"] for s in scopes} |
                           # periodic/period7.txt is cut between its words at 64 KiB shards: the runs
                           # at that cut were counted from the shards' word ids and then lost on this
                           # path (a root with a change below it), one hit short until 2026-11-28
                           {b"": [b"zzqqxx the", b"the alpha", b"zw xy", b"xy zw"]})
        # each change shows at once, also between a size probe and a read of the same name
        n = bad = 0
        for i, (s, f) in enumerate(((d_edit, f_edit), (b"", f_edit), (d_keep, None))):
            if f is None:
                f = next(x for x in sorted(c.words) if x.startswith(d_keep + b"/"))
            for name in ("files.zzqqxx", "count.zzqqxx the", "top.3", "fuzzy.1.zzqqxy", "search.the alpha"):
                path = os.path.join(mnt, os.fsdecode(s))
                os.getxattr(path, "user.tadoc." + name)    # kept (or cached) now
                with open(os.path.join(mnt, os.fsdecode(f)), "ab") as h:
                    h.write(b"zzqqxx the alpha zzqqxx zzqqxx\n")
                c = oracle.Corpus(mnt)
                got, _ = fs_an.getx(path, "user.tadoc." + name)
                kind, arg = name.split(".", 1)
                if kind == "files":
                    want = oracle.render("files", c, {"path": s, "word": arg})
                elif kind == "count":
                    want = b"%d" % len(c.hits(arg.encode(), s))
                elif kind == "top":
                    want = oracle.render("top", c, {"path": s, "n": 3})
                elif kind == "fuzzy":
                    want = oracle.render("fuzzy", c, {"path": s, "word": "zzqqxy", "k": 1})
                else:
                    want = b"".join(oracle.esc_path(x) + b":%d\n" % o for x, o in c.hits(arg.encode(), s))
                    got, want = sorted(got.splitlines()), sorted(want.splitlines())
                n += 1
                bad += not check(got == want, "rw %r %s after an append to %r: %r..., oracle %r..." %
                                 (s, name, f, got[:200], want[:200]))
        log("  rw: %d answers asked again after a change equal the oracle%s" % (n, "" if not bad else
                                                                              " (%d differ)" % bad))
    finally:
        unmount(mnt)


def main():
    skip_without_fuse()
    rng = random.Random(23)
    work = tempfile.mkdtemp(prefix="fs_postings.")
    try:
        adv = os.path.join(work, "adv")
        subprocess.run([sys.executable, os.path.join(TESTS, "gen_adversarial.py"), adv], check=True,
                       stdout=subprocess.DEVNULL)
        c = oracle.Corpus(adv)
        for label, args in (("adversarial, format 4", ["--format", "4"]),
                            ("adversarial, format 5 at 64K shards", ["--format", "5", "--shard-size", "64K"])):
            arch = os.path.join(work, "adv-%d.tadoc" % len(args))
            compress(adv, arch, args)
            check_archive(label, c, arch, rng)
        sotu = oracle.real_corpus("sotu")
        if sotu:
            cs = oracle.Corpus(sotu)
            # format 5 only (files split over shards): format 4 on the adversarial tree
            for label, args in (("sotu, format 5 at 1M shards", ["--format", "5", "--shard-size", "1M"]),):
                arch = os.path.join(work, "sotu-%d.tadoc" % len(args))
                compress(sotu, arch, args)
                check_archive(label, cs, arch, rng, ndirs=0, nfiles=4, phrases=False)
        else:
            log(oracle.corpus_skip("sotu"))
        # a file without ASCII separators, cut inside words: the words at the cuts
        # (the shards' postings say where a piece ends inside a word)
        mid = os.path.join(work, "mid")
        os.mkdir(mid)
        cli_an.make_midcut(os.path.join(mid, "nosep.txt"))
        arch = os.path.join(work, "mid.tadoc")
        compress(mid, arch, ["--format", "5", "--shard-size", "65537"])
        cm = oracle.Corpus(mid)
        cuts = cli_an.shard_cuts(arch)
        cutw = [w for p in cli_an.cut_phrases(cm, b"nosep.txt", cuts) for w in p.split(b" ")]
        cutw = [w for w in dict.fromkeys(cutw) if len(w) <= 255][:24]
        check(len(cuts) >= 2 and len(cutw) >= 4, "nosep.txt: %d cuts, %d words at them" % (len(cuts), len(cutw)))
        bad = 0
        for w in cutw:
            want = oracle.render("files", cm, {"path": b"", "word": os.fsdecode(w)})
            got = tadoc("files", arch, w)
            bad += not check(got.stdout == want, "midcut files %r: %r, oracle %r" % (w, got.stdout or got.stderr, want))
        r = tadoc("verify", arch)
        check(r.returncode == 0, "midcut verify: %r" % r.stderr)
        log("  a file cut inside words (%d cuts): %d words at the cuts equal the oracle%s" %
            (len(cuts), len(cutw), "" if not bad else " (%d differ)" % bad))
        # phrases across the cuts (rare words there: the shards' candidates hold a piece)
        cutp = [p for p in cli_an.cut_phrases(cm, b"nosep.txt", cuts) if b" " in p and len(p) < 250]
        check_phrases("midcut", cm, arch, rng, [b""], phr=cutp[:3])
        # one file of separated words over five shards: its cuts fall between words (cuts a
        # phrase cannot touch are not read; these phrases straddle them)
        sep = os.path.join(work, "sep")
        os.mkdir(sep)
        vocab = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 7))) for _ in range(3000)]
        with open(os.path.join(sep, "words.txt"), "w") as h:
            h.write("".join(w + rng.choice(" \n, ") for w in rng.choices(vocab, [1 / (i + 1) for i in range(3000)],
                                                                        k=60000)))
        arch = os.path.join(work, "sep.tadoc")
        compress(sep, arch, ["--format", "5", "--shard-size", "64K"])
        cs5 = oracle.Corpus(sep)
        cuts = cli_an.shard_cuts(arch)
        cutp = [p for p in cli_an.cut_phrases(cs5, b"words.txt", cuts) if b" " in p]
        check(len(cuts) >= 3 and len(cutp) >= 8, "words.txt: %d cuts, %d phrases at them" % (len(cuts), len(cutp)))
        check_phrases("separated words, %d cuts" % len(cuts), cs5, arch, rng, [b""],
                      phr=cutp[:8] + rare_phrases(cs5, rng, 1))
        # tadoc add: the new shards get postings too
        part = os.path.join(work, "part")
        os.mkdir(part)
        names = sorted(os.listdir(adv))
        for nm in names[: len(names) // 2]:
            os.rename(os.path.join(adv, nm), os.path.join(part, nm))
        arch = os.path.join(work, "added.tadoc")
        compress(part, arch, ["--format", "5", "--shard-size", "64K"])
        rest = sorted(os.listdir(adv))  # two adds: one entry, then the others at once
        for nms in (rest[:1], rest[1:]):
            r = tadoc("add", arch, *[os.path.join(adv, nm) for nm in nms])
            check(r.returncode == 0, "add %s: %r" % (nms, r.stderr))
        for nm in os.listdir(part):
            os.rename(os.path.join(part, nm), os.path.join(adv, nm))
        pl = postings_line(arch)
        got = pl.split("in ")[-1].split(" of ")
        check(len(got) == 2 and got[0] == got[1].split()[0], "after tadoc add: %r" % pl)
        check_archive("adversarial, built in two halves by tadoc add", c, arch, rng, ndirs=4, nfiles=3, phrases=False)
        damaged(work, adv, c)
        writable_clean(work, adv, rng)
        writable(work, adv, rng)
    finally:
        teardown(work)
    finish()


if __name__ == "__main__":
    main()
