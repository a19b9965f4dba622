#!/usr/bin/env python3
"""py_fsspec: the fsspec protocol "tadoc" (python/tadoc/fs.py) against the original files.

On the adversarial tree (tests/gen_adversarial.py) and sotu (when present),
format 4 and format 5 archives:
  - fsspec.open of chained URLs (tadoc://PATH::file:///ARCHIVE and
    tadoc://PATH::ARCHIVE) reads the original bytes, in binary and text mode;
  - ls (names and detail), info (size, type), find, walk, exists, isdir
    equal the original tree;
  - ranged reads (cat_file start/end, negative too; open + seek + read;
    fsspec.open + read) equal slices of the original bytes;
  - fsspec.filesystem("tadoc", fo=...) and url_to_fs; a pickled filesystem
    reads the same; dask.bag.read_text over a tadoc:// glob equals the
    files' lines;
  - in a fresh interpreter that does not import tadoc, fsspec.open("tadoc://...")
    works through the dist-info's fsspec.specs entry point;
  - a missing archive raises FileNotFoundError naming it, a missing path
    FileNotFoundError, mode "w" ValueError.
Env: TADOC, TADOC_LIB, PYTHONPATH (python/ and build/python for the dist-info).
"""
import errno
import os
import pickle
import random
import shutil
import stat
import subprocess
import sys
import tempfile

import py_common as C
from py_common import check, same, raises, log

try:
    import fsspec
    import dask.bag  # noqa: F401
except ImportError as e:  # Debian: python3-fsspec, python3-dask (contrib/install-deps.sh)
    log("skip: %s (install python3-fsspec and python3-dask)" % e)
    sys.exit(77)
import tadoc  # noqa: E402,F401  (registers the protocol)

rng = random.Random(2025)


def originals(root):
    ents = C.oracle.entries(root)
    files = {}
    dirs = set()
    for rel, st in ents:
        name = os.fsdecode(rel)
        if stat.S_ISDIR(st.st_mode):
            dirs.add(name)
        elif stat.S_ISREG(st.st_mode):
            files[name] = st.st_size
    return files, dirs


def check_fs(arch, tree, label):
    files, dirs = originals(tree)
    rootb = os.fsencode(tree)
    data = lambda p: open(os.path.join(rootb, os.fsencode(p)), "rb").read()  # noqa: E731
    fs = fsspec.filesystem("tadoc", fo=arch)
    check(type(fs).__name__ == "TadocFileSystem", label + ": filesystem('tadoc')")
    # ls / info / find / walk
    for d in [""] + sorted(dirs)[:40]:
        want = sorted(os.listdir(os.path.join(tree, d) if d else tree))
        got = sorted(os.path.basename(p.rstrip("/")) for p in fs.ls(d, detail=False))
        same(got, sorted(os.fsdecode(x) for x in want), "%s: ls %r" % (label, d))
        for e in fs.ls(d, detail=True):
            n = e["name"].rstrip("/")
            if n in files:
                check(e["type"] == "file" and e["size"] == files[n], "%s: ls detail %r: %r" % (label, n, e))
            elif n in dirs:
                check(e["type"] == "directory", "%s: ls detail dir %r: %r" % (label, n, e))
    for p, size in files.items():
        inf = fs.info(p)
        if not check(inf["type"] == "file" and inf["size"] == size, "%s: info %r: %r" % (label, p, inf)):
            break
    for d in dirs:
        check(fs.isdir(d) and fs.info(d)["type"] == "directory", "%s: isdir %r" % (label, d))
    found = set(fs.find(""))
    check(set(files) <= found, "%s: find: %d of %d files" % (label, len(set(files) & found), len(files)))
    walked = set()
    for root, _, fnames in fs.walk(""):
        walked |= {(root.rstrip("/") + "/" + f).lstrip("/") for f in fnames}
    check(set(files) <= walked, "%s: walk lists every file" % label)
    check(fs.exists(next(iter(files))) and not fs.exists("no/such/file"), label + ": exists")
    raises(lambda: fs.info("no/such/file"), FileNotFoundError, None, [], label + ": info of a missing path")
    raises(lambda: fs.open("no/such/file").read(), FileNotFoundError, errno.ENOENT, ["no/such/file"],
           label + ": open of a missing path")
    raises(lambda: fs.open(next(iter(files)), "wb"), ValueError, None, ["read-only"], label + ": mode wb")
    # found by /tmp/fzpy: ls of a missing path, of a file, with a protocol or a leading '/'; symlinked directories
    raises(lambda: fs.ls("no/such/dir"), FileNotFoundError, None, [], label + ": ls of a missing path")
    f0 = next(iter(files))
    same(fs.ls(f0, detail=False), [f0], label + ": ls of a file is the file")
    for d in sorted(dirs)[:3]:
        same(fs.ls("/" + d, detail=False), fs.ls(d, detail=False), "%s: ls of '/%s'" % (label, d))
        same(fs.ls("tadoc://" + d, detail=False), fs.ls(d, detail=False), "%s: ls of 'tadoc://%s'" % (label, d))
    if fs.exists("links/dirlink"):  # the adversarial tree: links/dirlink -> ../deep
        same(sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls("links/dirlink", detail=False)),
             sorted(os.listdir(os.path.join(tree, "deep"))), label + ": ls through a symlinked directory")
        check(fs.exists("links/dirlink/d01") and fs.info("links/dirlink/d01")["type"] == "directory",
              label + ": info through a symlinked directory")
    fsspec.filesystem("tadoc", fo=arch, block_size=12345).close()  # an instance of its own (other arguments)
    same(fsspec.filesystem("tadoc", fo=arch, block_size=12345).cat_file(f0), data(f0),
         label + ": filesystem() after close() gives a working instance")
    # whole files and ranges
    pick = sorted(files, key=lambda p: -files[p])[:4] + rng.sample(sorted(files), min(40, len(files)))
    for p in dict.fromkeys(pick):
        d = data(p)
        n = len(d)
        same(fs.cat_file(p), d, "%s: cat_file %r" % (label, p))
        for _ in range(6):
            s, e = sorted((rng.randrange(n + 5), rng.randrange(n + 5)))
            same(fs.cat_file(p, s, e), d[s:e], "%s: cat_file %r %d %d" % (label, p, s, e))
        if n > 20:
            same(fs.cat_file(p, -20), d[-20:], "%s: cat_file -20" % label)
            same(fs.cat_file(p, 5, -5), d[5:-5], "%s: cat_file 5 -5" % label)
        with fs.open(p, "rb", block_size=4096) as f:
            same(f.size, n, "%s: open %r size" % (label, p))
            for _ in range(5):
                off = rng.randrange(n + 1)
                f.seek(off)
                same(f.read(777), d[off:off + 777], "%s: open+seek %r %d" % (label, p, off))
        url = "tadoc://%s::file://%s" % (p, os.path.abspath(arch))
        with fsspec.open(url, "rb") as f:
            same(f.read(), d, "%s: fsspec.open %s" % (label, url))
        with fsspec.open("tadoc://%s::%s" % (p, arch), "rb") as f:
            off = n // 3
            f.seek(off)
            same(f.read(100), d[off:off + 100], "%s: fsspec.open chained, ranged %r" % (label, p))
    # text mode, url_to_fs, pickling
    txt = next(p for p in sorted(files) if files[p] > 100 and p.endswith(".txt"))
    try:
        want_text = data(txt).decode("utf-8")
    except UnicodeDecodeError:
        want_text = None
    if want_text is not None:
        with fsspec.open("tadoc://%s::file://%s" % (txt, os.path.abspath(arch)), "rt", encoding="utf-8",
                         newline="") as f:
            same(f.read(), want_text, "%s: text mode" % label)
    fs2, p2 = fsspec.core.url_to_fs("tadoc://%s::file://%s" % (txt, os.path.abspath(arch)))
    same(fs2.cat_file(p2), data(txt), "%s: url_to_fs" % label)
    fs3 = pickle.loads(pickle.dumps(fs))
    same(fs3.cat_file(txt, 10, 60), data(txt)[10:60], "%s: pickled filesystem" % label)
    return files


def check_dask_bag(arch, tree, files, label):
    import dask.bag as db
    top = sorted({os.path.dirname(p) for p in files if "/" in p and p.endswith(".txt")})
    d = top[0] if top else ""
    pat = (d + "/*.txt") if d else "*.txt"
    names = sorted(p for p in files if os.path.dirname(p) == d and p.endswith(".txt"))
    want = []
    for p in names:
        want += [ln for ln in open(os.path.join(tree, p), "rb").read().decode("utf-8", "replace").splitlines(True)]
    bag = db.read_text("tadoc://%s::file://%s" % (pat, os.path.abspath(arch)), errors="replace")
    got = bag.compute(scheduler="sync")
    same(sorted(got), sorted(want), "%s: dask.bag.read_text over tadoc://%s" % (label, pat))


def entry_point(arch, path, want):
    """A fresh interpreter, no `import tadoc`: the dist-info's entry point."""
    code = ("import fsspec, sys\n"
            "with fsspec.open(sys.argv[1], 'rb') as f: sys.stdout.buffer.write(f.read())\n"
            "assert 'tadoc' not in sys.modules or 'tadoc.fs' in sys.modules\n")
    url = "tadoc://%s::file://%s" % (path, os.path.abspath(arch))
    r = subprocess.run([sys.executable, "-c", code, url], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    check(r.returncode == 0 and r.stdout == want, "entry point: rc %d, %d bytes, stderr %r"
          % (r.returncode, len(r.stdout), r.stderr[-300:]))


def main():
    work = tempfile.mkdtemp(prefix="py_fsspec.")
    try:
        adv = C.adversarial(work)
        trees = [("adv", adv, "64K")]
        sotu = C.corpus("sotu")
        if sotu:
            trees.append(("sotu", sotu, "1M"))
        else:
            log("sotu not in %s: skipped" % C.CORPORA)
        for name, tree, shard in trees:
            for fmt, opts in ((4, ["--format", "4"]), (5, ["--shard-size", shard])):
                arch = C.compress(tree, os.path.join(work, "%s-%d.tadoc" % (name, fmt)), *opts)
                label = "%s/format %d" % (name, fmt)
                files = check_fs(arch, tree, label)
                if name == "sotu":
                    check_dask_bag(arch, tree, files, label)
                log("%s: done (%d checks so far)" % (label, C.checks))
        arch = os.path.join(work, "adv-4.tadoc")
        entry_point(arch, "text/crlf.txt", open(os.path.join(adv, "text/crlf.txt"), "rb").read())
        missing = os.path.join(work, "missing.tadoc")
        raises(lambda: fsspec.open("tadoc://a.txt::file://" + missing).open(), FileNotFoundError, errno.ENOENT,
               [missing], "fsspec.open in a missing archive")
        raises(lambda: fsspec.filesystem("tadoc", skip_instance_cache=True), ValueError, None, ["no archive given"],
               "fsspec.filesystem('tadoc') without fo")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    C.finish("py_fsspec")


if __name__ == "__main__":
    main()
