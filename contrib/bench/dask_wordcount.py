#!/usr/bin/python3
"""dask_wordcount: Dask word counts over tadoc archives vs the same jobs over the plain files and tadoc CLI calls.

Usage:
  contrib/bench/dask_wordcount.py [--workers 1,2] [--runs 3] [--word the] [--archives DIR]
                                  [--compress-opts '...'] [--out FILE.md] CORPUS_DIR...

Each CORPUS_DIR (e.g. ~/.cache/tadoc-corpora/{sotu,spam,linuxdoc,gcide},
linux) is compressed once with build/fs/tadoc into --archives DIR (kept
there and reused when newer than the tadoc binary). Then for each worker
count W, on a distributed.LocalCluster of W single-threaded worker
processes (started before the clock; warm page cache: every job reads
its input once before the timed runs), the jobs, over all the corpora at
once (one archive each):

  top words (word count: every word's count, added up over the corpora,
  then the 20 most frequent):
    tadoc.dask.top        each shard's term vector computed on its grammar (one task a shard),
                          added up by a tree of merges in C (td_word_counts_merge)
    tadoc.dask.read_text  the files' text from the archives, tokenized in Python (re \\w+)
    dask.bag.read_text    the original files, tokenized the same way (the plain-text job)
    tadoc CLI             `tadoc top -n 0 ARCHIVE`, W processes at a time, output added up in Python
  count of one word (--word, whole words):
    tadoc.dask.count      one table look-up per archive
    dask.bag.read_text    regex (?<!\\w)WORD(?!\\w) over the original files
    tadoc CLI             `tadoc count ARCHIVE WORD`, W processes at a time

Every job's answer is checked against the plain-text job's (identical
top-20 lists and counts), so a faster wrong answer cannot pass. Reported:
median wall time of --runs runs, and the speed-up over the plain-text Dask
job. Needs only the repo's build (build/fs/tadoc, build/libtadoc.so;
--build DIR otherwise) and Debian's python3-dask, python3-distributed.
"""
import argparse
import collections
import concurrent.futures
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORD = re.compile(r"\w+")


def setup_paths(build):
    lib = os.path.join(build, "libtadoc.so")
    os.environ.setdefault("TADOC_LIB", lib)
    py = os.path.join(REPO, "python")
    os.environ["PYTHONPATH"] = py + (":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    sys.path.insert(0, py)


def corpus_files(d):
    out = []
    for root, dirs, files in os.walk(d):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(root, f)
            if os.path.isfile(p) and not os.path.islink(p):
                out.append(p)
    return out


def compress(tadoc, src, dst, opts):
    if os.path.exists(dst) and os.path.getmtime(dst) >= os.path.getmtime(tadoc):
        return dst
    t = time.monotonic()
    subprocess.run([tadoc, "compress", "-q", "-o", dst] + opts + [src], check=True)
    print("compressed %s in %.1f s" % (src, time.monotonic() - t), file=sys.stderr, flush=True)
    return dst


# --- the plain-text side: the same tokenization for every text job ----------------
def count_words_lines(lines):
    c = collections.Counter()
    for ln in lines:
        c.update(WORD.findall(ln))
    return c


def count_words_pairs(pairs):
    c = collections.Counter()
    for _, text in pairs:
        c.update(WORD.findall(text))
    return c


def merge_counters(parts):
    total = collections.Counter()
    for p in parts:
        total.update(p)
    return total


def top20(counter):
    return sorted(counter.items(), key=lambda kv: (-kv[1], kv[0].encode("utf-8", "surrogateescape")))[:20]


def plain_bag(files_by_corpus, workers):
    """dask.bag.read_text over the original files: about 4 partitions a
    worker per corpus (whole files grouped, or big files cut in blocks)."""
    import dask.bag as db
    bags = []
    for files in files_by_corpus:
        total = sum(os.path.getsize(f) for f in files)
        want = 4 * workers
        if len(files) >= want:
            bags.append(db.read_text(files, files_per_partition=math.ceil(len(files) / want),
                                     encoding="utf-8", errors="surrogateescape"))
        else:
            bags.append(db.read_text(files, blocksize=max(1 << 20, total // want), encoding="utf-8",
                                     errors="surrogateescape"))
    return db.concat(bags)


def tadoc_bag(archives, sizes, workers):
    import dask.bag as db
    import tadoc.dask
    return db.concat([tadoc.dask.read_text([a], errors="surrogateescape",
                                           partition_bytes=max(1 << 20, s // (4 * workers)))
                      for a, s in zip(archives, sizes)])


def cli_top(tadoc, archives, workers):
    def one(a):
        r = subprocess.run([tadoc, "top", "-n", "0", a], stdout=subprocess.PIPE, check=True)
        c = collections.Counter()
        for line in r.stdout.decode("utf-8", "surrogateescape").splitlines():
            n, w = line.split("\t", 1)
            c[w] = int(n)
        return c
    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        return merge_counters(ex.map(one, archives))


def cli_count(tadoc, archives, workers, word):
    def one(a):
        return int(subprocess.run([tadoc, "count", a, word], stdout=subprocess.PIPE, check=True).stdout)
    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        return sum(ex.map(one, archives))


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def timed(fn, runs):
    out = None
    times = []
    for _ in range(runs):
        t = time.monotonic()
        out = fn()
        times.append(time.monotonic() - t)
    return statistics.median(times), out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpora", nargs="+", metavar="CORPUS_DIR")
    ap.add_argument("--workers", default="1,2", help="worker counts, comma-separated (default 1,2)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warm", type=int, default=1,
                    help="untimed runs of each job first (default 1; 0 where the page cache is known warm)")
    ap.add_argument("--word", default="the")
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--archives", default=os.path.join(REPO, "build", "bench-dask"),
                    help="where the archives are made and kept")
    ap.add_argument("--compress-opts", default="", help="extra tadoc compress options, e.g. '--format 4'")
    ap.add_argument("--skip-plain-read", action="store_true", help="leave out the tadoc.dask.read_text job")
    ap.add_argument("--plain-workers", help="run the plain-text jobs only at these worker counts (comma-separated;"
                    " default every W); other W rows are checked against the answers of the first plain run")
    ap.add_argument("--cli-workers", help="run the tadoc CLI jobs only at these worker counts (default every W)")
    ap.add_argument("--slow-runs", type=int, help="timed runs of the plain-text and CLI top jobs (default --runs)")
    ap.add_argument("--slow-warm", type=int, help="untimed runs of those jobs first (default --warm)")
    ap.add_argument("--out", help="append the markdown report here (default: stdout)")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    setup_paths(build)
    tadoc_bin = os.path.join(build, "fs", "tadoc")
    import dask
    import distributed
    from distributed import Client, LocalCluster
    import tadoc
    import tadoc.dask

    os.makedirs(a.archives, exist_ok=True)
    names, archives, sizes, files_by = [], [], [], []
    for d in a.corpora:
        d = os.path.abspath(d)
        name = os.path.basename(d.rstrip("/"))
        files = corpus_files(d)
        names.append(name)
        files_by.append(files)
        sizes.append(sum(os.path.getsize(f) for f in files))
        archives.append(compress(tadoc_bin, d, os.path.join(a.archives, name + ".tadoc"), a.compress_opts.split()))
    wordre = re.compile(r"(?<!\w)%s(?!\w)" % re.escape(a.word))
    workers = [int(x) for x in a.workers.split(",")]
    plain_at = set(int(x) for x in a.plain_workers.split(",")) if a.plain_workers else set(workers)
    cli_at = set(int(x) for x in a.cli_workers.split(",")) if a.cli_workers else set(workers)
    plain_runs = a.runs if a.slow_runs is None else a.slow_runs
    plain_warm = a.warm if a.slow_warm is None else a.slow_warm
    rows = []
    answers = {}  # kind -> the first plain-text job's answer
    for w in workers:
        cluster = LocalCluster(n_workers=w, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=40)
        client = Client(cluster)
        try:
            def plain_top():
                return top20(plain_bag(files_by, w).reduction(count_words_lines, merge_counters).compute())

            def plain_count():
                return plain_bag(files_by, w).map(lambda ln: len(wordre.findall(ln))).sum().compute()

            jobs = [
                ("top words", "dask.bag.read_text, plain files", plain_top),
                ("top words", "tadoc.dask.top (on the grammar)", lambda: tadoc.dask.top(20, archives)),
                ("top words", "tadoc CLI `top -n 0`, %d at a time" % w, lambda: top20(cli_top(tadoc_bin, archives, w))),
                ("count", "dask.bag.read_text, plain files", plain_count),
                ("count", "tadoc.dask.count", lambda: tadoc.dask.count(a.word, archives)),
                ("count", "tadoc CLI `count`, %d at a time" % w, lambda: cli_count(tadoc_bin, archives, w, a.word)),
            ]
            if not a.skip_plain_read:
                jobs.insert(1, ("top words", "tadoc.dask.read_text, text tokenized in Python",
                                lambda: top20(tadoc_bag(archives, sizes, w).reduction(count_words_pairs,
                                                                                      merge_counters).compute())))
            base = {}
            for kind, label, fn in jobs:
                plain = label.startswith("dask.bag.read_text")
                cli = label.startswith("tadoc CLI")
                if (plain and w not in plain_at) or (cli and w not in cli_at):
                    continue
                slow = plain or (cli and kind == "top words")
                for _ in range(plain_warm if slow else a.warm):
                    fn()  # warm: page cache, worker imports, opened archives
                secs, out = timed(fn, plain_runs if slow else a.runs)
                if plain:
                    base[kind] = secs
                    answers.setdefault(kind, out)
                ok = out == answers.get(kind, out)
                rows.append((w, kind, label, secs, base[kind] / secs if kind in base else None, ok))
                print("W=%d %-9s %-48s %8.2f s  %s" % (w, kind, label, secs, "ok" if ok else "DIFFERENT ANSWER"),
                      file=sys.stderr, flush=True)
        finally:
            client.close()
            cluster.close()

    total = sum(sizes)
    nfiles = sum(len(f) for f in files_by)
    arch_bytes = sum(os.path.getsize(x) for x in archives)
    try:
        commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True).stdout.strip()
    except OSError:  # no git where it runs (the GPU machine): $BENCH_COMMIT
        commit = ""
    lines = []
    lines.append("## Run: %s, %s" % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), ", ".join(names)))
    lines.append("")
    lines.append("- machine: %s, %d cores, load average %s at the end" % (
        cpu_model(), os.cpu_count(), " ".join("%.2f" % x for x in os.getloadavg())))
    lines.append("- commit %s; Python %s, dask %s, distributed %s; %d run(s) a job (median) after %d untimed"
                 " (plain-text jobs and CLI top: %d after %d; plain-text jobs at W = %s)" % (
                     commit or os.environ.get("BENCH_COMMIT", "?"), platform.python_version(), dask.__version__,
                     distributed.__version__, a.runs, a.warm, plain_runs, plain_warm,
                     ",".join(str(x) for x in workers if x in plain_at)))
    lines.append("- input: %d corpora, %d files, %.1f MB of text; archives %.1f MB (`tadoc compress %s`)" % (
        len(names), nfiles, total / 1e6, arch_bytes / 1e6, a.compress_opts or "(defaults)"))
    lines.append("- count word: `%s`; every answer equal to the plain-text job's: %s" % (
        a.word, "yes" if all(r[5] for r in rows) else "**NO** (see DIFFERENT rows)"))
    lines.append("")
    lines.append("| workers | job | how | wall s | vs plain-text Dask job |")
    lines.append("|---:|---|---|---:|---:|")
    for w, kind, label, secs, sp, ok in rows:
        lines.append("| %d | %s | %s%s | %.2f | %s |" % (w, kind, label, "" if ok else " **DIFFERENT**", secs,
                                                      "-" if sp is None else "%.1fx" % sp if sp < 100 else
                                                      "%.0fx" % sp))
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "a") as f:
            f.write("\n" + text)
    print(text)


if __name__ == "__main__":
    main()
