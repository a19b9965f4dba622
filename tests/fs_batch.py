#!/usr/bin/env python3
"""Integration test of the tadocfs batcher (fs/mount/batcher.c), through real mounts.

Checks, against the original files and a Python word counter:
- 64 concurrent readers (threads, O_DIRECT so every read reaches the daemon)
  doing random preads of random sizes, some of them overlapping on purpose,
  plus concurrent user.tadoc.count.* queries, get exactly the original
  bytes and counts, in each dispatch mode: no GPU (answered by the FUSE
  threads), the GPU path (see below) and queued for the CPU workers
  (TADOCFS_BATCH_CPU=1); user.tadoc.stats shows that requests were queued
  and batched (or inline) and that the bytes served add up;
- a sequential `cat` during that load reads exact bytes, and goes through
  the per-file cursor fast path (stats: sequential > 0);
- latency: one reader's median small pread with the batcher on (GPU
  dispatch active: emulated, or the real GPU with TD_TEST_GPU=1) is within
  1.2x of the batcher off (batch_max=1) plus an absolute slack of
  TD_BATCH_SLACK_US (default 15 us). Both mounts are live at once and
  measured in alternating rounds, so load from other processes on a small,
  shared CI machine hits both alike; medians of thousands of samples;
  the comparison is repeated up to 3 times before it counts as a failure
  (skipped under sanitizers, TD_TEST_SANITIZED=1: the default suite makes it);
- configuration keys take effect (batch limits with CPU queueing on):
  batch_max, cpu_workers, batch_window_us,
  gpu, log_level (from -o and from a config file, -o winning);
  bad keys and values give "FILE:LINE: message" or "option -o KEY: message" and exit
  status 2 with nothing mounted;
- gpu_min_reads=10000 sends no read to the (emulated) GPU, nor does
  gpu_min_read_size=1G with gpu_min_reads=1 (every read is smaller), nor a
  queue shallower than 8 requests a worker (16 readers, 8 workers);
- SIGUSR1 writes the stats line to the log (stderr in the foreground) and
  does not end the daemon;
- user.tadoc.top.N, .vector, .ngrams.LEN.K, .fuzzy.K.WORD and .files.WORD (over the
  root, a directory, files, an empty file) asked from 16 threads (8 under sanitizers) go through
  the batcher's GPU batches (run_lists: emulated, or the real GPU with
  TD_TEST_GPU=1) and equal the tadoc commands' output, #more parts joined.

The GPU path: the load test runs again with the GPU dispatch on and the CPU
engine standing in for the device (TADOCFS_GPU_EMULATE=1, read crossover 4
instead of the default 1, so that the window wait runs too): the
batches, merged runs and count queries of run_gpu() answer exact bytes,
and the FUSE threads keep answering beside the GPU (the hybrid split). On a
GPU machine set TD_TEST_GPU=1 to run it a third time with gpu=on and the
real device, requiring gpu_requests > 0.

Environment: TADOC, TADOCFS; exit 77 (skip) without a usable /dev/fuse.
"""
import errno
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

TADOC = os.environ.get("TADOC", "tadoc")
TADOCFS = os.environ.get("TADOCFS", "tadocfs")
TADOC, TADOCFS = [os.path.abspath(p) if os.sep in p else p for p in (TADOC, TADOCFS)]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fs_write_lib import check, failures, log, run, xattr_joined  # noqa: E402
from oracle import sanitized  # noqa: E402

GPU = os.environ.get("TD_TEST_GPU") == "1"
SLACK_US = float(os.environ.get("TD_BATCH_SLACK_US", "15"))
WORD = re.compile(rb"\w+")

mounted = []


def is_mounted(mnt):
    mnt = os.path.realpath(mnt)
    with open("/proc/mounts") as f:
        return any(line.split(" ")[1] == mnt and line.split(" ")[2].startswith("fuse") for line in f)


def unmount(mnt):
    if not is_mounted(mnt):
        return
    run(["fusermount3", "-u", mnt])
    for _ in range(100):
        if not is_mounted(mnt):
            return
        time.sleep(0.05)
    run(["fusermount3", "-u", "-z", mnt])


def mount(archive, mnt, *opts, env=None):
    os.makedirs(mnt, exist_ok=True)
    args = [TADOCFS, archive, mnt]
    if opts:
        args += ["-o", ",".join(opts)]
    r = run(args, env=env)
    if r.returncode != 0 or not is_mounted(mnt):
        raise SystemExit("%s failed (%d): %s" % (" ".join(args), r.returncode, r.stderr.decode(errors="replace")))
    mounted.append(mnt)
    return mnt


def stats(mnt):
    v = os.getxattr(mnt, "user.tadoc.stats").decode()
    out = {}
    for line in v.splitlines():
        k, _, val = line.partition("=")
        try:
            out[k] = float(val) if "." in val else int(val)
        except ValueError:
            out[k] = val
    return out


# ---------------------------------------------------------------- corpus

def make_tree(dst, seed=7):
    """40 files of random words (10 KB .. 1.5 MB), one empty, one tiny."""
    rnd = random.Random(seed)
    vocab = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(1, 10)))
             for _ in range(4000)] + ["the", "whale", "sea"] * 50
    seps = [" ", " ", " ", "\n", ", ", ". ", "\t", " -- "]
    os.makedirs(os.path.join(dst, "sub"), exist_ok=True)
    files = {}
    for i in range(40):
        n = rnd.choice([10_000, 50_000, 200_000, 700_000, 1_500_000])
        parts, size = [], 0
        while size < n:
            w = rnd.choice(vocab) + rnd.choice(seps)
            parts.append(w)
            size += len(w)
        rel = ("sub/g%02d.txt" if i % 4 == 0 else "f%02d.txt") % i
        data = "".join(parts).encode()
        files[rel] = data
    files["empty.txt"] = b""
    files["tiny.txt"] = b"x"
    for rel, data in files.items():
        with open(os.path.join(dst, rel), "wb") as f:
            f.write(data)
    return files


def count_words(data):
    counts = {}
    for m in WORD.finditer(data):
        w = m.group()
        counts[w] = counts.get(w, 0) + 1
    return counts


# ---------------------------------------------------------------- checks

def concurrent_load(mnt, files, nthreads=64, seconds=4.0, seed=1):
    """nthreads readers: random preads (exact bytes) and count xattrs."""
    names = sorted(f for f in files if files[f])
    big = [f for f in names if len(files[f]) >= 200_000]
    oracle = {f: count_words(files[f]) for f in names}
    vocab = sorted({w for c in oracle.values() for w in c})[:3000] + [b"nosuchword"]
    errors, ops = [], [0, 0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    barrier = threading.Barrier(nthreads)

    def reader(k):
        rnd = random.Random(seed * 1000 + k)
        fds = {}
        nread = ncount = 0
        try:
            barrier.wait()
            while time.monotonic() < stop:
                f = rnd.choice(big if rnd.random() < 0.7 else names)
                data = files[f]
                if k % 8 == 7:
                    w = rnd.choice(vocab)
                    got = os.getxattr(os.path.join(mnt, f), b"user.tadoc.count." + w)
                    want = b"%d" % oracle[f].get(w, 0)
                    if got != want:
                        errors.append("count %s %r: %r != %r" % (f, w, got, want))
                    ncount += 1
                    continue
                fd = fds.get(f)
                if fd is None:
                    fd = fds[f] = os.open(os.path.join(mnt, f), os.O_RDONLY | os.O_DIRECT)
                r = rnd.random()
                if r < 0.25:
                    # a few hot regions: concurrent overlapping reads
                    off = rnd.choice([0, 4096, 65536, 100_000]) + rnd.randint(0, 64)
                    size = rnd.choice([4096, 8192])
                elif r < 0.35:
                    off = max(0, len(data) - rnd.randint(0, 9000))  # across EOF
                    size = rnd.randint(1, 20000)
                else:
                    off = rnd.randrange(0, len(data) + 1)
                    size = rnd.choice([1, 100, 4096, 4096, 4096, 65536, 131072, rnd.randint(1, 300000)])
                got = os.pread(fd, size, off)
                if got != data[off:off + size]:
                    errors.append("pread %s off=%d size=%d: got %d bytes, differ" % (f, off, size, len(got)))
                if off < len(data):  # the kernel answers reads at EOF itself
                    nread += 1
        except Exception as e:  # report, do not hang the others
            errors.append("thread %d: %r" % (k, e))
        finally:
            for fd in fds.values():
                os.close(fd)
            with lock:
                ops[0] += nread
                ops[1] += ncount

    th = [threading.Thread(target=reader, args=(k,)) for k in range(nthreads)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    return ops[0], ops[1], errors


def check_concurrent(archive, files, tmp, gpu):
    """gpu: None (no GPU: answered by the FUSE threads), "cpuq" (queued for
    the CPU workers: TADOCFS_BATCH_CPU=1), "emu" (GPU dispatch with the CPU
    engine standing in for the device: TADOCFS_GPU_EMULATE=1) or "on" (a
    real GPU)."""
    log("== 64 concurrent readers through the batcher (%s)" % {
        None: "no GPU: inline", "cpuq": "queued for CPU workers", "emu": "GPU path, emulated", "on": "GPU"}[gpu])
    mnt = os.path.join(tmp, "mnt_load")
    env = dict(os.environ)
    opts = []
    if gpu is None:
        opts += ["gpu=off"]   # gpu=auto would find the GPU on a GPU machine
    elif gpu == "cpuq":
        env["TADOCFS_BATCH_CPU"] = "1"
        opts += ["gpu=off"]
    else:
        # reads of every size may go to the GPU (the default keeps reads
        # under gpu_min_read_size on the CPU): the merged runs too; 4
        # workers, so that 64 readers are deep enough a queue for reads
        # (8 a worker) and counts (2 a worker) on any machine
        opts += ["gpu=on" if gpu == "on" else "gpu=auto", "gpu_min_reads=4", "gpu_min_read_size=1",
                 "cpu_workers=4"]
        if gpu == "emu":
            env["TADOCFS_GPU_EMULATE"] = "1"
    mount(archive, mnt, *opts, env=env)
    if gpu:
        for _ in range(100):  # gpu=auto opens in the background
            if stats(mnt)["gpu"] != "opening":
                break
            time.sleep(0.05)
    before = stats(mnt)
    reads, counts, errors = concurrent_load(mnt, files)
    for e in errors[:10]:
        log("  " + e)
    check(not errors, "64 readers: %d wrong answers of %d reads + %d counts" % (len(errors), reads, counts))
    # A handler counts its request just after replying: give the last
    # counts a moment to land before comparing.
    for _ in range(40):
        s = stats(mnt)
        if s["requests"] - before["requests"] >= reads + counts:
            break
        time.sleep(0.05)
    log("  %d reads, %d counts; stats: %s" % (reads, counts, {k: s[k] for k in (
        "requests", "inline", "batches", "mean_batch", "max_batch", "merged", "gpu_requests", "gpu_batch_us", "p50_us", "p99_us")}))
    check(s["requests"] - before["requests"] >= reads + counts, "stats count every request")
    if gpu is None:
        check(s["batches"] == 0 and s["inline"] >= s["requests"], "no GPU: answered inline (%s)" %
              {k: s[k] for k in ("requests", "inline", "batches")})
    else:
        check(s["batches"] > 0 and s["max_batch"] > 1, "requests were batched (batches=%s max_batch=%s)" %
              (s["batches"], s["max_batch"]))
        check(s["batched"] > 0 and abs(s["mean_batch"] - s["batched"] / s["batches"]) < 0.01, "mean batch size")
    check(s["p50_us"] > 0 and s["p99_us"] >= s["p50_us"], "latency quantiles")
    check(abs(s["gpu_share"] + s["cpu_share"] - 1.0) < 1e-3, "GPU and CPU shares add up")
    if gpu in ("emu", "on"):
        check(s["gpu_requests"] > 0 and s["gpu_batches"] > 0, "some requests were answered by GPU batches")
        check(s["gpu_batch_us"] > 0, "mean GPU batch time (gpu_batch_us=%s)" % s["gpu_batch_us"])
        # the hybrid split: the FUSE threads keep answering while the GPU
        # takes what they have no room for
        check(s["inline"] - before["inline"] > 0, "the CPU kept answering beside the GPU (inline=%s)" % s["inline"])
    if gpu != "cpuq":
        unmount(mnt)
        return

    log("== sequential cat during concurrent load")
    stop = threading.Event()

    def noise(k):
        rnd = random.Random(k)
        big = max(files, key=lambda f: len(files[f]))
        fd = os.open(os.path.join(mnt, big), os.O_RDONLY | os.O_DIRECT)
        while not stop.is_set():
            os.pread(fd, 4096, rnd.randrange(0, len(files[big])))
        os.close(fd)

    th = [threading.Thread(target=noise, args=(k,)) for k in range(16)]
    for t in th:
        t.start()
    try:
        s0 = stats(mnt)
        for f in sorted(files, key=lambda f: -len(files[f]))[:3]:
            r = run(["cat", os.path.join(mnt, f)])
            check(r.returncode == 0 and r.stdout == files[f], "cat %s under load" % f)
        s1 = stats(mnt)
    finally:
        stop.set()
        for t in th:
            t.join()
    check(s1["sequential"] > s0["sequential"] or s1["inline"] > s0["inline"],
          "sequential reads took the inline cursor path")
    check(s1["bytes_served"] - s0["bytes_served"] >= sum(len(files[f]) for f in
                                                          sorted(files, key=lambda f: -len(files[f]))[:3]),
          "bytes_served counts what cat read")

    log("== SIGUSR1 on a detached daemon: stats logged, daemon keeps running")
    pids = daemon_pids(mnt)
    check(len(pids) == 1, "one daemon for %s (%s)" % (mnt, pids))
    for pid in pids:
        os.kill(pid, signal.SIGUSR1)
    time.sleep(0.3)
    check(is_mounted(mnt) and all(os.path.exists("/proc/%d" % p) for p in pids), "alive after SIGUSR1")
    check(len(os.listdir(mnt)) > 0, "still answering after SIGUSR1")
    unmount(mnt)


def check_lists(archive, files, tmp, gpu):
    """user.tadoc.top/vector/ngrams/fuzzy/files queries from 16 threads (8 under sanitizers) go through
    the batcher's GPU batches (emulated: TADOCFS_GPU_EMULATE=1, the CPU
    engine standing in; or the real GPU) and equal the tadoc commands."""
    log("== top, vector, ngrams, fuzzy, files attributes through GPU batches (%s)" % gpu)
    mnt = os.path.join(tmp, "mnt_lists")
    env = dict(os.environ)
    if gpu == "emu":
        env["TADOCFS_GPU_EMULATE"] = "1"
    mount(archive, mnt, "gpu=on" if gpu == "on" else "gpu=auto", "gpu_min_counts=1", "cpu_workers=4", env=env)
    for _ in range(100):
        if stats(mnt)["gpu"] != "opening":
            break
        time.sleep(0.05)
    words = sorted({w for f in ("f01.txt", "sub/g00.txt") for w in count_words(files[f][:3000])})[:6]
    scopes = ["", "sub", "f01.txt", "sub/g04.txt", "empty.txt"]
    queries = []
    for sc in scopes:
        p = [sc] if sc else []
        queries.append((sc, "user.tadoc.top.20", ["top", "-n", "20", None] + p))
        queries.append((sc, "user.tadoc.top.0", ["top", "-n", "0", None] + p))
        queries.append((sc, "user.tadoc.vector", ["vector", None, sc or "."]))
        queries.append((sc, "user.tadoc.ngrams.3.20", ["ngrams", "-n", "3", "--top", "20", None] + p))
        if sc.endswith(".txt"):  # every run of a file (a directory's would be many #more parts)
            queries.append((sc, "user.tadoc.ngrams.2.0", ["ngrams", "-n", "2", "--top", "0", None] + p))
        for w in words[:3]:
            wd = w.decode()
            queries.append((sc, "user.tadoc.fuzzy.2." + wd, ["fuzzy", "-k", "2", None, wd] + p))
            queries.append((sc, "user.tadoc.files." + wd, ["files", None, wd] + p))
    want = {}
    for sc, name, argv in queries:  # None: where the archive goes
        r = run([TADOC] + [archive if a is None else a for a in argv])
        check(r.returncode == 0, "tadoc %s: %s" % (" ".join(map(str, argv)), r.stderr.decode(errors="replace")))
        want[(sc, name)] = r.stdout
    before = stats(mnt)
    bad = []

    def ask(k):
        rnd = random.Random(k)
        for sc, name, _ in rnd.sample(queries, len(queries)):
            try:
                got = xattr_joined(os.path.join(mnt, sc) if sc else mnt, name)
            except OSError as e:
                got = b"<%s>" % os.strerror(e.errno).encode()
            if got != want[(sc, name)]:
                bad.append("%s on /%s: %d bytes, tadoc %d" % (name, sc, len(got), len(want[(sc, name)])))

    # under sanitizers 8 threads (each asks every query): the same concurrent
    # batches at half the volume; the default suite runs 16
    nth = 8 if sanitized() else 16
    th = [threading.Thread(target=ask, args=(k,)) for k in range(nth)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    for e in bad[:10]:
        log("  " + e)
    check(not bad, "%d queries x %d threads equal the tadoc commands (%d differ)" % (len(queries), nth, len(bad)))
    s = stats(mnt)
    check(s["gpu_requests"] > before["gpu_requests"], "lists were answered by GPU batches (gpu_requests %s -> %s)" %
          (before["gpu_requests"], s["gpu_requests"]))
    log("  %d queries x %d threads; gpu_requests %d -> %d" % (len(queries), nth, before["gpu_requests"], s["gpu_requests"]))
    # a list the batch computed is kept in the mount's list cache: the
    # same query again (and the value after getxattr's size probe) is
    # answered from it, not by another GPU batch
    want7 = run([TADOC, "top", "-n", "7", archive]).stdout
    g0 = stats(mnt)["gpu_requests"]
    got1 = xattr_joined(mnt, "user.tadoc.top.7")
    g1 = stats(mnt)["gpu_requests"]
    got2 = xattr_joined(mnt, "user.tadoc.top.7")
    g2 = stats(mnt)["gpu_requests"]
    check(got1 == want7 and got2 == want7, "top.7 twice equals tadoc top -n 7")
    check(g1 - g0 <= 1 and g2 == g1, "a batched list is kept: gpu_requests %d -> %d -> %d" % (g0, g1, g2))
    unmount(mnt)


def check_reads_on_cpu(archive, files, tmp, opts=("gpu_min_reads=10000",)):
    """gpu_min_reads=10000 (or reads all smaller than gpu_min_read_size)
    keeps every read on the CPU (the FUSE threads) while counts still go
    to the (emulated) GPU."""
    log("== %s: reads stay on the CPU, counts may queue" % ",".join(opts))
    mnt = os.path.join(tmp, "mnt_rcpu")
    env = dict(os.environ, TADOCFS_GPU_EMULATE="1")
    mount(archive, mnt, "gpu=auto", *opts, env=env)
    for _ in range(100):
        if stats(mnt)["gpu"] != "opening":
            break
        time.sleep(0.05)
    before = stats(mnt)
    reads, counts, errors = concurrent_load(mnt, files, nthreads=16, seconds=2.0, seed=3)
    check(not errors, "reads on CPU: %d wrong answers" % len(errors))
    s = stats(mnt)
    check(s["gpu_requests"] - before["gpu_requests"] <= counts,
          "no read went to the GPU (%d GPU requests, %d counts)" % (s["gpu_requests"] - before["gpu_requests"], counts))
    unmount(mnt)


def daemon_pids(mnt):
    pids = []
    want = os.fsencode(mnt)
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"tadocfs") and want in argv:
                pids.append(int(d))
    return pids


def median_latency(paths, rounds, per_round, sizes):
    """Alternate rounds between the mounts; per mount: the median pread in us."""
    fds = [os.open(p, os.O_RDONLY | os.O_DIRECT) for p in paths]
    n = os.fstat(fds[0]).st_size
    rnd = random.Random(5)
    samples = [[] for _ in paths]
    clock = time.perf_counter_ns
    try:
        for _ in range(rounds):
            for i, fd in enumerate(fds):
                s = samples[i]
                for _ in range(per_round):
                    off = rnd.randrange(0, n - 70000)
                    size = rnd.choice(sizes)
                    t0 = clock()
                    os.pread(fd, size, off)
                    s.append(clock() - t0)
    finally:
        for fd in fds:
            os.close(fd)
    return [statistics.median(s) / 1000.0 for s in samples]


def check_latency(archive, files, tmp):
    # "on": the batcher with the GPU dispatch active, where requests queue
    # as soon as another is in flight (the real GPU with TD_TEST_GPU=1, else
    # the emulated one); "off": batch_max=1.
    log("== single-reader latency: batcher on (GPU dispatch%s) vs off (batch_max=1)" % ("" if GPU else ", emulated"))
    env = dict(os.environ)
    if not GPU:
        env["TADOCFS_GPU_EMULATE"] = "1"
    # gpu_min_reads=2: reads queue as soon as another is in flight
    on = mount(archive, os.path.join(tmp, "mnt_on"), "gpu=on" if GPU else "gpu=auto", "gpu_min_reads=2", env=env)
    off = mount(archive, os.path.join(tmp, "mnt_off"), "batch_max=1")
    f = max(files, key=lambda f: len(files[f]))
    paths = [os.path.join(on, f), os.path.join(off, f)]
    median_latency(paths, 2, 100, [4096])  # warm up both daemons
    ok = False
    if sanitized():
        # a timing comparison, not a code path: the default suite makes it (here
        # the test runs beside others, tests/meson.build)
        log("  latency comparison: skipped under sanitizers (the default suite runs it)")
        ok = True
    for attempt in range(0 if ok else 3):
        m_on, m_off = median_latency(paths, 20, 150, [512, 4096, 4096, 16384])
        limit = 1.2 * m_off + SLACK_US
        log("  attempt %d: median on %.1f us, off %.1f us (limit %.1f us)" % (attempt + 1, m_on, m_off, limit))
        if m_on <= limit:
            ok = True
            break
    check(ok, "batcher-on median latency within 1.2x of batcher off + %.0f us" % SLACK_US)
    s = stats(on)
    check(s["inline"] >= 0.9 * s["requests"], "a lone reader is answered inline (%d of %d)" % (s["inline"], s["requests"]))
    unmount(on)
    unmount(off)


def check_config(archive, files, tmp):
    log("== configuration keys take effect")
    mnt = os.path.join(tmp, "mnt_conf")
    env = dict(os.environ, TADOCFS_BATCH_CPU="1")
    mount(archive, mnt, "batch_max=7", "cpu_workers=1", "batch_window_us=50", "gpu=off", env=env)
    s = stats(mnt)
    check(s["batch_max"] == 7 and s["cpu_workers"] == 1 and s["batch_window_us"] == 50 and s["gpu"] == "off",
          "-o batch_max=7,cpu_workers=1,batch_window_us=50,gpu=off shown in stats: %s" % s)
    _, _, errors = concurrent_load(mnt, files, nthreads=32, seconds=2.0, seed=3)
    check(not errors, "exact bytes with batch_max=7, cpu_workers=1: %s" % errors[:3])
    s = stats(mnt)
    check(1 <= s["max_batch"] <= 7, "no batch above batch_max=7 (max_batch=%s)" % s["max_batch"])
    unmount(mnt)

    mount(archive, mnt, "batch_max=1", env=env)
    _, _, errors = concurrent_load(mnt, files, nthreads=16, seconds=1.5, seed=4)
    s = stats(mnt)
    check(not errors and s["batches"] == 0 and s["inline"] >= s["requests"],
          "batch_max=1: every request inline (%s)" % {k: s[k] for k in ("requests", "inline", "batches")})
    unmount(mnt)

    conf = os.path.join(tmp, "tadocfs.conf")
    with open(conf, "w") as fh:
        fh.write("# test config\n[tadocfs]\nbatch_max = 9\ncpu_workers = 3\ncache_size = 1M\nlog_level = info\n")
    mount(archive, mnt, "config=" + conf, "cpu_workers=2")
    s = stats(mnt)
    check(s["batch_max"] == 9 and s["cpu_workers"] == 2, "config file values, -o wins: %s" % s)
    unmount(mnt)

    log("== log_level: info lines only at info or debug")
    for level, expect in (("info", True), ("error", False)):
        p = subprocess.Popen([TADOCFS, "-f", archive, mnt, "-o", "log_level=" + level],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(200):
            if is_mounted(mnt):
                break
            time.sleep(0.025)
        mounted.append(mnt)
        # SIGUSR1 logs the stats at any level
        p.send_signal(signal.SIGUSR1)
        time.sleep(0.3)
        alive = p.poll() is None
        unmount(mnt)
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        err = p.stderr.read().decode(errors="replace")
        check(alive, "foreground daemon alive after SIGUSR1")
        check(("batcher: on" in err) == expect, "log_level=%s: info line %s: %r" %
              (level, "present" if expect else "absent", err[:300]))
        check(re.search(r"stats: requests=\d+ .*p99_us=[\d.]+ .*bytes_served=\d+", err) is not None,
              "SIGUSR1 wrote the stats line (log_level=%s): %r" % (level, err[:300]))

    log("== bad keys and values: FILE:LINE, exit 2, nothing mounted")
    bad = os.path.join(tmp, "bad.conf")
    with open(bad, "w") as fh:
        fh.write("batch_max = 8\n\nbatch_windw_us = 10\n")
    cases = [
        (["-o", "batch_max=0"], r"^tadocfs: option -o batch_max: "),
        (["-o", "cpu_workers=two"], r"^tadocfs: option -o cpu_workers: "),
        (["-o", "gpu=maybe"], r"^tadocfs: option -o gpu: "),
        (["-o", "config=" + bad], r"^tadocfs: " + re.escape(bad) + r":3: .*batch_windw_us"),
        (["-o", "config=" + os.path.join(tmp, "missing.conf")], r"^tadocfs: config file " + re.escape(os.path.join(tmp, "missing.conf")) + r": cannot open: No such file or directory$"),
    ]
    for extra, pat in cases:
        r = run([TADOCFS, archive, mnt] + extra)
        err = r.stderr.decode(errors="replace")
        check(r.returncode == 2 and re.search(pat, err, re.M) is not None and not is_mounted(mnt),
              "%s: exit %d, %r" % (" ".join(extra), r.returncode, err))
        unmount(mnt)

    log("== gpu=on without a usable GPU fails before mounting")
    r = run([TADOCFS, archive, mnt, "-o", "gpu=on"])
    if r.returncode == 0:
        mounted.append(mnt)
        log("  (a GPU is usable here: mounted)")
        unmount(mnt)
    else:
        err = r.stderr.decode(errors="replace")
        check(r.returncode == 1 and "gpu=on" in err and not is_mounted(mnt), "gpu=on: exit %d, %r" % (r.returncode, err))


def check_rw_stats(archive, files, tmp):
    log("== user.tadoc.stats on a writable mount")
    rw = os.path.join(tmp, "rw.tadoc")
    subprocess.run(["cp", archive, rw], check=True)
    mnt = mount(rw, os.path.join(tmp, "mnt_rw"), "rw")
    before = stats(mnt)
    f = max(files, key=lambda f: len(files[f]))
    fd = os.open(os.path.join(mnt, f), os.O_RDONLY | os.O_DIRECT)
    try:
        got = os.pread(fd, 8192, 0)
    finally:
        os.close(fd)
    check(got == files[f][:8192], "rw read of %s" % f)
    os.getxattr(os.path.join(mnt, f), "user.tadoc.words")
    for _ in range(40):  # counted just after the reply
        s = stats(mnt)
        if s["requests"] - before["requests"] >= 2:
            break
        time.sleep(0.05)
    check(s["reads"] - before["reads"] >= 1 and s["xattrs"] - before["xattrs"] >= 1 and
          s["bytes_served"] - before["bytes_served"] >= 8192, "rw stats count the read and the xattr: %s -> %s" % (before, s))
    try:
        os.getxattr(os.path.join(mnt, f), "user.tadoc.stats")
        check(False, "user.tadoc.stats on a file of a rw mount")
    except OSError as e:
        check(e.errno == errno.ENODATA, "user.tadoc.stats on a file: ENODATA, got %s" % e.strerror)
    unmount(mnt)


def main():
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
    except OSError as e:
        log("SKIP: /dev/fuse: %s" % e.strerror)
        return 77
    # the batcher reads the queue's depth from fusectl (mounted by systemd
    # on most systems, not in a bare container)
    conns = "/sys/fs/fuse/connections"
    with open("/proc/self/mounts") as fh:
        have_ctl = any(line.split()[2:3] == ["fusectl"] for line in fh)
    if os.geteuid() == 0 and os.path.isdir(conns) and not have_ctl:
        run(["mount", "-t", "fusectl", "none", conns])
    tmp = tempfile.mkdtemp(prefix="tadocfs_batch_")
    try:
        tree = os.path.join(tmp, "tree")
        files = make_tree(tree)
        archive = os.path.join(tmp, "t.tadoc")
        r = run([TADOC, "compress", "-o", archive, tree])
        if r.returncode != 0:
            raise SystemExit("tadoc compress failed: %s" % r.stderr.decode(errors="replace"))
        # TD_BATCH_PART=latency: only the latency comparison (meson's fs_batch_latency, which
        # runs alone); =rest: everything else (fs_batch, beside other tests); unset: all
        part = os.environ.get("TD_BATCH_PART", "")
        if part == "latency":
            check_latency(archive, files, tmp)
            return finish()
        check_concurrent(archive, files, tmp, None)
        check_concurrent(archive, files, tmp, "emu")
        check_lists(archive, files, tmp, "emu")
        check_concurrent(archive, files, tmp, "cpuq")
        check_reads_on_cpu(archive, files, tmp)
        check_reads_on_cpu(archive, files, tmp, ("gpu_min_reads=1", "gpu_min_read_size=1G"))
        # 16 readers are a shallower queue than 8 a worker (64): the CPU
        check_reads_on_cpu(archive, files, tmp, ("gpu_min_reads=1", "gpu_min_read_size=1", "cpu_workers=8"))
        if GPU:
            check_concurrent(archive, files, tmp, "on")
            check_lists(archive, files, tmp, "on")
        if part != "rest":
            check_latency(archive, files, tmp)
        check_config(archive, files, tmp)
        check_rw_stats(archive, files, tmp)
    finally:
        for m in reversed(mounted):
            try:
                unmount(m)
            except Exception as e:
                log("cleanup %s: %s" % (m, e))
        subprocess.run(["rm", "-rf", tmp])
    return finish()


def finish():
    if failures:
        log("%d check(s) failed" % len(failures))
        return 1
    log("all batcher checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
