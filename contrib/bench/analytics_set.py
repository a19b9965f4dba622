#!/usr/bin/env python3
"""analytics_set: the analytics of an edited tree (the file-set path, td_analytics_set.h) on a
writable mount, format 4 against format 5 at several shard sizes.

Usage (root, FUSE): contrib/bench/analytics_set.py CORPUS_DIR SHARDSIZE[,SHARDSIZE...]
  e.g. contrib/bench/analytics_set.py ~/.cache/tadoc-corpora/sotu 64M,1M

For each archive (`tadoc compress --format 4`, then `--shard-size S` for each S): a writable
mount with cache_size=0 (every value computed), one line appended to the first file (so
every scope holding it is an edited file set: its other files on the grammar, that one read
as text), then getxattr at the root of top.20, vector, ngrams.3.20, fuzzy.2.W, files.W and
count.PHRASE, each AN_RUNS times (default 5): the median wall in ms. Every format 5 answer
is compared with format 4's (a difference fails the run). Prints a markdown table.
Env: TADOC, TADOCFS (default build/fs/...), AN_RUNS.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TADOC = os.environ.get("TADOC") or os.path.join(REPO, "build", "fs", "tadoc")
TADOCFS = os.environ.get("TADOCFS") or os.path.join(REPO, "build", "fs", "tadocfs")
RUNS = int(os.environ.get("AN_RUNS", "5"))
NAMES = ["top.20", "vector", "ngrams.3.20", "fuzzy.2.freedom", "files.freedom", "count.of the"]


def getx(path, name):
    """The whole value (parts joined through their #more lines)."""
    out = b""
    while True:
        v = os.getxattr(path, name)
        i = v.rfind(b"\n", 0, len(v) - 1) + 1
        if not v[i:].startswith(b"#more "):
            return out + v
        out += v[:i]
        name = os.fsdecode(v[i + 6:].rstrip(b"\n"))


def one(src, arch, cargs, mnt):
    subprocess.run([TADOC, "compress", "-q", "-o", arch] + cargs + [src], check=True)
    os.makedirs(mnt, exist_ok=True)
    p = subprocess.Popen([TADOCFS, arch, mnt, "-f", "-o", "rw,cache_size=0"])
    for _ in range(500):
        if os.path.ismount(mnt):
            break
        time.sleep(0.02)
    try:
        first = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(mnt) for f in fs)[0]
        with open(first, "ab") as f:
            f.write(b"\nfreedom of the new line\n")
        res = {}
        for name in NAMES:
            ts, val = [], None
            for _ in range(RUNS):
                t = time.monotonic()
                val = getx(mnt, "user.tadoc." + name)
                ts.append(time.monotonic() - t)
            res[name] = (statistics.median(ts) * 1000, val)
        return res
    finally:
        subprocess.run(["fusermount3", "-u", mnt])
        p.wait()


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, sizes = sys.argv[1], sys.argv[2].split(",")
    with tempfile.TemporaryDirectory(prefix="an-set.") as work:
        rows = [("format 4", one(src, os.path.join(work, "a4.tadoc"), ["--format", "4"], os.path.join(work, "m")))]
        for s in sizes:
            a = os.path.join(work, "a5-%s.tadoc" % s)
            r = one(src, a, ["--format", "5", "--shard-size", s], os.path.join(work, "m"))
            nsh = [ln.split()[1] for ln in subprocess.run([TADOC, "info", a], capture_output=True, text=True)
                   .stdout.splitlines() if ln.startswith("shards")]
            rows.append(("format 5, %s shards (%s)" % (s, nsh[0] if nsh else "?"), r))
    bad = [(label, n) for label, r in rows[1:] for n in NAMES if r[n][1] != rows[0][1][n][1]]
    print("| archive (%s, one file edited) | %s |" % (os.path.basename(src.rstrip("/")), " | ".join(NAMES)))
    print("|---|" + "---:|" * len(NAMES))
    for label, r in rows:
        print("| %s | %s |" % (label, " | ".join("%.1f" % r[n][0] for n in NAMES)))
    print("\nmedian ms of %d getxattr at the root, cache_size=0; format 5 answers %s format 4's" %
          (RUNS, "equal" if not bad else "DIFFER from (%r)" % bad))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
