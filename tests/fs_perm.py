#!/usr/bin/env python3
"""Directory-scope attributes answer only what the caller may read (issue 26).

An `allow_other` mount of a tree with 0600 files, 0700 and 0711 directories
(the latter searchable but not listable: `grep -r` does not enter it) and a
0640 file. For callers of every class - an unprivileged user
(setpriv --reuid=65534 --regid=65534 --clear-groups), the same user with the
mount's group as a supplementary group, and root - every directory-scope
user.tadoc.words / count.WORD / search.WORD, and the analytics of issue 23
(top.N, vector, ngrams.LEN.K, files.PHRASE, fuzzy.K.WORD - a word only an
unreadable file holds must not show - and phrases in count/search), equals the oracle
(tests/oracle.py) run over a copy of exactly the files that caller may read
through directories it may list and search (root: everything); file-scope
attributes of a file the caller may not read give EACCES. On a writable
mount, a chmod changes the answer at once. All of it on a format 4 archive
and on a format 5 one cut into 16-byte shards (every file split over shards,
so the answers over a caller's files add the runs across the cuts). A
hostile archive (a name '..')
and a damaged one are refused at mount with one line.

Environment: TADOC, TADOCFS. Exit 77 without /dev/fuse, root or setpriv.
"""
import errno
import os
import shutil
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402
from fs_write_lib import teardown, TADOC, check, compress, finish, log, mount, run, unmount  # noqa: E402

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
GROUPED = ["setpriv", "--reuid=65534", "--regid=65534", "--groups=0", "--"]   # the mount's group (root's, 0)
WORDS = ["secret", "hi", "text", "alpha", "nothere"]

# path -> (mode, text); directories end with '/'
TREE = {
    "pub.txt": (0o644, "public hi text alpha\n"),
    "secret.txt": (0o600, "top secret text hi hi\n"),
    "grp.txt": (0o640, "group secret alpha text\n"),
    "priv/": (0o700, None),
    "priv/x": (0o644, "hi secret alpha\n"),
    "priv/open/": (0o755, None),
    "priv/open/y": (0o644, "hi text inside a private directory\n"),
    "blind/": (0o711, None),
    "blind/z": (0o644, "alpha hi in a directory nobody may list\n"),
    "docs/": (0o755, None),
    "docs/a.txt": (0o644, "alpha text hi\n"),
    "docs/b.txt": (0o600, "secret alpha alpha classified\n"),
    "docs/deep/": (0o750, None),
    "docs/deep/c.txt": (0o644, "text secret hi\n"),
}
DIRS = ["", "docs", "docs/deep", "priv", "priv/open", "blind"]


def build(root):
    os.makedirs(root)
    for path, (mode, text) in TREE.items():
        p = os.path.join(root, path)
        if text is None:
            os.makedirs(p, exist_ok=True)
        else:
            with open(p, "w") as f:
                f.write(text)
    for path, (mode, _) in sorted(TREE.items(), key=lambda kv: -kv[0].count("/")):
        os.chmod(os.path.join(root, path.rstrip("/")), mode)


def may(cls, mode, is_dir):
    """The mode bits of class cls ('all', 'group', 'other') allow it."""
    if cls == "all":
        return True
    bits = (mode >> (3 if cls == "group" else 0)) & 7
    return bits & 5 == 5 if is_dir else bool(bits & 4)


def visible_copy(src, dst, cls):
    """Copy into dst the files class cls may read, through directories it
    may list and search (what `grep -r` run by it reads)."""
    os.makedirs(dst)
    for dirpath, dirnames, filenames in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        keep = []
        for d in dirnames:
            if may(cls, os.lstat(os.path.join(dirpath, d)).st_mode, True):
                keep.append(d)
                os.makedirs(os.path.join(dst, rel, d))
        dirnames[:] = keep
        for f in filenames:
            p = os.path.join(dirpath, f)
            if may(cls, os.lstat(p).st_mode, False):
                shutil.copyfile(p, os.path.join(dst, rel, f))


def expected(copy, scope, word):
    """(count, search lines, words) the oracle gives over the visible copy."""
    d = os.path.join(copy, scope) if scope else copy
    if not os.path.isdir(d):       # the scope itself is hidden: nothing shows
        return 0, [], 0
    c = oracle.Corpus(copy)
    pre = os.fsencode(scope)
    hits = c.hits(word.encode(), pre)
    total = sum(len(ws) for rel, ws in c.words.items() if not pre or rel.startswith(pre + b"/"))
    return len(hits), ["%s:%d" % (f.decode(), off) for f, off in hits], total


def getx(who, path, name):
    r = subprocess.run(who + ["getfattr", "--only-values", "--absolute-names", "-n", name, path],
                       capture_output=True)
    if r.returncode != 0:
        err = r.stderr.decode(errors="replace")
        return "EACCES" if "Permission denied" in err else "ERR " + err.strip()
    return r.stdout.decode(errors="replace")


def check_class(mnt, copy, who, label):
    bad = 0
    for scope in DIRS:
        path = os.path.join(mnt, scope) if scope else mnt
        n_words = None
        for w in WORDS:
            count, lines, total = expected(copy, scope, w)
            n_words = total
            got = getx(who, path, "user.tadoc.count." + w)
            if got == "EACCES":   # the kernel refused the scope itself
                ok = not os.path.isdir(os.path.join(copy, scope) if scope else copy)
                bad += not check(ok, "%s: count.%s of %r refused although visible" % (label, w, scope))
                continue
            bad += not check(got == str(count), "%s: count.%s of %r: %r, oracle %d" % (label, w, scope, got, count))
            got = getx(who, path, "user.tadoc.search." + w)
            want = "".join(line + "\n" for line in lines)
            bad += not check(got == want, "%s: search.%s of %r: %r, oracle %r" % (label, w, scope, got, want))
        got = getx(who, path, "user.tadoc.words")
        if got != "EACCES":
            bad += not check(got == str(n_words), "%s: words of %r: %r, oracle %d" % (label, scope, got, n_words))
    log("  %s: every directory-scope answer equals the oracle over its visible files%s" %
        (label, "" if not bad else " (%d differ)" % bad))


PHRASES = ["hi text", "secret text", "alpha alpha", "alpha text hi"]
FUZZY = [("tap", 1), ("secrat", 1), ("classifyed", 2), ("alpah", 2), ("hi", 3)]


def analytics_names(scope):
    """(attribute, oracle render arguments) of the analytics checked per scope."""
    s = os.fsencode(scope)
    out = [("top.0", ("top", {"path": s, "n": 0})), ("top.2", ("top", {"path": s, "n": 2})),
           ("vector", ("vector", {"path": s})), ("ngrams.2.0", ("ngrams", {"path": s, "len": 2, "top": 0})),
           ("ngrams.3.4", ("ngrams", {"path": s, "len": 3, "top": 4}))]
    out += [("fuzzy.%d.%s" % (k, w), ("fuzzy", {"path": s, "word": w, "k": k})) for w, k in FUZZY]
    out += [("files." + p, ("files", {"path": s, "word": p})) for p in PHRASES + ["secret", "top"]]
    return out


def check_analytics(mnt, copy, who, label):
    bad = n = 0
    for scope in DIRS:
        path = os.path.join(mnt, scope) if scope else mnt
        d = os.path.join(copy, scope) if scope else copy
        c = oracle.Corpus(copy) if os.path.isdir(d) else None
        for name, (cmd, args) in analytics_names(scope):
            n += 1
            got = getx(who, path, "user.tadoc." + name)
            if got == "EACCES":
                bad += not check(c is None, "%s: %s of %r refused although visible" % (label, name, scope))
                continue
            want = oracle.render(cmd, c, args).decode() if c else ""
            bad += not check(got == want, "%s: %s of %r: %r, oracle %r" % (label, name, scope, got, want))
        for p in PHRASES:
            n += 2
            hits = c.hits(p.encode(), os.fsencode(scope)) if c else []
            got = getx(who, path, "user.tadoc.count." + p)
            if got == "EACCES":
                continue
            bad += not check(got == str(len(hits)), "%s: count.%s of %r: %r, oracle %d" % (label, p, scope, got,
                                                                                          len(hits)))
            got = getx(who, path, "user.tadoc.search." + p)
            want = "".join("%s:%d\n" % (f.decode(), off) for f, off in hits)
            bad += not check(got == want, "%s: search.%s of %r: %r, oracle %r" % (label, p, scope, got, want))
    log("  %s: %d analytics answers (top, vector, ngrams, fuzzy, files, phrases) equal the oracle over the "
        "visible files%s" % (label, n, "" if not bad else " (%d differ)" % bad))


def check_files(mnt, who, cls, label):
    for path, (mode, text) in TREE.items():
        if text is None:
            continue
        parents = path.split("/")[:-1]
        shift = 3 if cls == "group" else 0
        reachable = cls == "all" or all(TREE[p + "/"][0] >> shift & 1
                                        for p in ["/".join(parents[:i + 1]) for i in range(len(parents))])
        if not reachable:
            continue
        got = getx(who, os.path.join(mnt, path), "user.tadoc.count.hi")
        if may(cls, mode, False):
            check(got != "EACCES", "%s: file %s is readable, its count is refused" % (label, path))
        else:
            check(got == "EACCES", "%s: file %s may not be read: count gives %r, not EACCES" % (label, path, got))


def one_format(tmp, label, cargs):
    """Every check on one archive of TREE (label: its format); returns it."""
    tmp = os.path.join(tmp, label.split(",")[0].replace(" ", ""))
    os.makedirs(tmp)
    os.chmod(tmp, 0o755)
    src = os.path.join(tmp, "src")
    build(src)
    archive = os.path.join(tmp, "p.tadoc")
    compress(src, archive, cargs)
    copies = {}
    for cls in ("all", "group", "other"):
        copies[cls] = os.path.join(tmp, "visible-" + cls)
        visible_copy(src, copies[cls], cls)
    mnt = os.path.join(tmp, "mnt")

    log("== %s: read-only allow_other mount" % label)
    mount(archive, mnt, "ro", "allow_other")
    check_class(mnt, copies["other"], NOBODY, "nobody")
    check_class(mnt, copies["group"], GROUPED, "nobody in the mount's group")
    check_class(mnt, copies["all"], [], "root")
    check_analytics(mnt, copies["other"], NOBODY, "nobody")
    check_analytics(mnt, copies["group"], GROUPED, "nobody in the mount's group")
    check_analytics(mnt, copies["all"], [], "root")
    check_files(mnt, NOBODY, "other", "nobody")
    check_files(mnt, GROUPED, "group", "group")
    unmount(mnt)

    log("== %s: writable allow_other mount: chmod changes the answer at once" % label)
    mount(archive, mnt, "rw", "allow_other")
    check_class(mnt, copies["other"], NOBODY, "nobody (rw)")
    check_analytics(mnt, copies["other"], NOBODY, "nobody (rw)")
    before = getx(NOBODY, mnt, "user.tadoc.count.secret")
    os.chmod(os.path.join(mnt, "secret.txt"), 0o644)
    os.chmod(os.path.join(mnt, "docs/b.txt"), 0o644)
    os.chmod(os.path.join(mnt, "docs/deep"), 0o755)
    os.chmod(os.path.join(src, "secret.txt"), 0o644)
    os.chmod(os.path.join(src, "docs/b.txt"), 0o644)
    os.chmod(os.path.join(src, "docs/deep"), 0o755)
    after_copy = os.path.join(tmp, "visible-other-after")
    visible_copy(src, after_copy, "other")
    after = getx(NOBODY, mnt, "user.tadoc.count.secret")
    want = expected(after_copy, "", "secret")[0]
    check(after == str(want) and after != before,
          "after chmod: count.secret %r -> %r, oracle %d" % (before, after, want))
    check_class(mnt, after_copy, NOBODY, "nobody after chmod (rw)")
    check_analytics(mnt, after_copy, NOBODY, "nobody after chmod (rw)")
    os.chmod(os.path.join(mnt, "pub.txt"), 0o600)
    got = getx(NOBODY, mnt, "user.tadoc.count.public")
    check(got == "0", "after chmod 600 pub.txt: count.public %r, not 0" % got)
    unmount(mnt)

    return archive


def main():
    if not os.path.exists("/dev/fuse") or os.geteuid() != 0 or not shutil.which("setpriv") or \
            not shutil.which("getfattr"):
        print("SKIP: needs /dev/fuse, root, setpriv and getfattr")
        sys.exit(77)
    tmp = tempfile.mkdtemp(prefix="tadoc-fs-perm-")
    os.chmod(tmp, 0o755)   # the unprivileged callers reach the mount point
    try:
        # format 4, and format 5 cut into shards of 16 bytes (every file of
        # the tree split over shards: the analytics of a caller's visible
        # files add the runs across the cuts)
        archives = [one_format(tmp, label, cargs) for label, cargs in
                    (("format 4", ["--format", "4"]), ("format 5, 16-byte shards", ["--shard-size", "16"]))]
        archive, mnt = archives[0], os.path.join(tmp, "mnt")
        log("== a hostile archive is refused at mount with one line naming the entry")
        hostile = os.path.join(tmp, "hostile.tadoc")
        shutil.copyfile(archive, hostile)
        r = run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "archive_patch.py"),
                 "setname", hostile, "pub.txt", ".."])
        check(r.returncode == 0, "archive_patch.py setname: %r" % r.stderr)
        rc, err = mount(hostile, mnt, "ro", expect_fail=True)
        check(rc == 1 and len(err.strip().splitlines()) == 1 and "name '.' or '..'" in err and hostile in err,
              "hostile archive: exit %s, %r" % (rc, err))
        log("  " + err.strip())
    finally:
        teardown(tmp)
    finish()


if __name__ == "__main__":
    main()
