#!/usr/bin/env python3
"""analytics_shards: the analytics of issue 23 on format 5 (sharded) archives against the
same corpus as format 4, each as a whole `tadoc` process.

Usage: contrib/bench/analytics_shards.py CORPORA NAME:SHARDSIZE[,SHARDSIZE...] ...
  e.g. contrib/bench/analytics_shards.py ~/.cache/tadoc-corpora gcide:4M linuxdoc:64M,8M

For each corpus: a format 4 archive and one format 5 archive per shard size (`tadoc
compress --format 5 --shard-size S`), then top -n 20, vector, files W, ngrams -n 3 --top 20,
count 'PHRASE' and fuzzy -k 2 W over the whole archive (and over the largest file when it
is split over shards), each AN_RUNS times (default 5): median wall and least CPU time
(user + sys, getrusage) in ms. Every format 5 answer is compared with format 4's (a
difference is reported and fails the run). Prints a markdown section on stdout.
Env: TADOC (default build/fs/tadoc), BENCH_WORK (default a temporary folder), AN_RUNS.
"""
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TADOC = os.environ.get("TADOC") or os.path.join(REPO, "build", "fs", "tadoc")
RUNS = int(os.environ.get("AN_RUNS", "5"))


def run(args):
    """One process: (wall s, CPU s, stdout)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    p = subprocess.run([TADOC] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    w = time.monotonic() - t
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        sys.exit("tadoc %s: %s" % (" ".join(args), p.stderr.decode(errors="replace")))
    return w, r.ru_utime + r.ru_stime - r0.ru_utime - r0.ru_stime, p.stdout


def measure(args):
    ws, cs, out = [], [], None
    for _ in range(RUNS):
        w, c, out = run(args)
        ws.append(w)
        cs.append(c)
    ws.sort()
    return ws[len(ws) // 2], min(cs), out


def compress(src, out, extra):
    if not os.path.exists(out):
        subprocess.run([TADOC, "compress", "-o", out] + extra + [src], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    info = subprocess.run([TADOC, "info", out], stdout=subprocess.PIPE, check=True).stdout.decode()
    shards = [l.split()[-1] for l in info.splitlines() if l.startswith("shards")]
    return shards[0] if shards else "-"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    corpora = sys.argv[1]
    work = os.environ.get("BENCH_WORK") or tempfile.mkdtemp(prefix="an_shards.")
    bad = 0
    print("## Format 5 (shards) against format 4 (%s)\n" % time.strftime("%Y-%m-%d", time.gmtime()))
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print("- machine: %d cores, load average %s at the start; tadoc runs: median wall / least CPU of %d"
          % (os.cpu_count(), load, RUNS))
    try:
        commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                                check=True).stdout.decode().strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    print("- commit: %s; every format 5 answer equals format 4's byte for byte\n" % commit)
    for spec in sys.argv[2:]:
        name, sizes = spec.split(":")
        src = os.path.join(corpora, name)
        a4 = os.path.join(work, name + ".f4.tadoc")
        compress(src, a4, ["--format", "4"])
        arch = [("format 4", a4, "-")]
        for s in sizes.split(","):
            a5 = os.path.join(work, "%s.f5.%s.tadoc" % (name, s))
            n = compress(src, a5, ["--format", "5", "--shard-size", s])
            arch.append(("format 5, %s shards" % s, a5, n))
        top = run(["top", "-n", "50", a4])[2].splitlines()
        word = top[-1].split(b"\t")[1].decode()
        pair = run(["ngrams", "-n", "2", "--top", "1", a4])[2].split(b"\t")[1].strip().decode()
        biggest = max(((os.path.getsize(os.path.join(d, f)), os.path.relpath(os.path.join(d, f), src))
                       for d, _, fs in os.walk(src) for f in fs))[1]
        queries = [("top -n 20", ["top", "-n", "20", "A"]), ("vector (corpus)", ["vector", "A", "."]),
                   ("files W", ["files", "A", word]), ("ngrams -n 3 --top 20", ["ngrams", "-n", "3", "--top", "20", "A"]),
                   ("count 'PHRASE'", ["count", "A", pair]), ("fuzzy -k 2 W", ["fuzzy", "-k", "2", "A", word]),
                   ("top -n 20 (largest file)", ["top", "-n", "20", "A", biggest]),
                   ("ngrams -n 3 (largest file)", ["ngrams", "-n", "3", "--top", "20", "A", biggest])]
        print("### %s: W = `%s`, PHRASE = `%s`, largest file `%s`\n" % (name, word, pair, biggest))
        print("| analytic | " + " | ".join("%s (%s shards)" % (l, n) if n != "-" else l for l, _, n in arch) +
              " | format 5 / format 4 (CPU) |")
        print("|---|" + "---:|" * (len(arch) + 1))
        for label, q in queries:
            cells, base, ref, ratios = [], None, None, []
            for _, a, _ in arch:
                w, c, out = measure([a if x == "A" else x for x in q])
                if ref is None:
                    ref, base = out, c
                elif out != ref:
                    bad += 1
                    print("DIFF %s %s" % (a, label), file=sys.stderr)
                else:
                    ratios.append("%.2fx" % (c / base if base > 0 else 0))
                cells.append("%.0f / %.0f" % (w * 1000, c * 1000))
            print("| %s | %s | %s |" % (label, " | ".join(cells), ", ".join(ratios)))
        print()
        sys.stdout.flush()
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
