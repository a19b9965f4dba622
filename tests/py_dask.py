#!/usr/bin/env python3
"""py_dask: tadoc.dask on a distributed.LocalCluster of 2 worker processes, against tests/oracle.py.

Archives: the adversarial tree (tests/gen_adversarial.py) as format 4, and
sotu (when present; else a second generated tree) as format 4 and as
format 5 (1 MiB shards). On the cluster (each worker opens the archives
itself, by path):
  - tadoc.dask.count of words and a phrase over two archives: the sums
    equal the oracle's counts over both trees;
  - tadoc.dask.search: (archive, path, offset) lists equal the oracle's
    (a word one task per shard of the format 5 archive, Archive.search_part
    merged by Archive.search_merge; a phrase one task per archive);
  - tadoc.dask.top(20) and top(0) over two archives equal the oracle's
    counts of both trees added up, format 4 and format 5 (one task per
    shard: Archive.vector_part of every shard, added up with
    tadoc.merge_word_counts, equal the oracle's counts and the whole
    archive's vector; a directory's parts too; a word cut between shards
    keeps one part);
  - tadoc.dask.read_text: one partition per shard of the format 5 archive;
    (path, bytes) of every file equal the originals;
  - a missing and a damaged archive: count over them raises TadocError
    naming the file (FileNotFoundError / EIO); through client.map the good
    archive's task still returns the right count;
  - without a client (the default scheduler) count gives the same sums.
Env: TADOC, TADOC_LIB, PYTHONPATH (python/).
"""
import collections
import errno
import os
import shutil
import subprocess
import sys
import tempfile
import time

import py_common as C
from py_common import check, same, raises, log


def main():
    try:
        import dask  # noqa: F401
        from distributed import Client, LocalCluster
    except ImportError as e:  # Debian: python3-dask, python3-distributed (contrib/install-deps.sh)
        log("skip: %s (install python3-dask and python3-distributed)" % e)
        sys.exit(77)
    import tadoc
    import tadoc.dask as td

    work = tempfile.mkdtemp(prefix="py_dask.")
    cluster = client = None
    try:
        adv = C.adversarial(work)
        second = C.corpus("sotu")
        if not second:
            log("sotu not in %s: a second generated tree instead" % C.CORPORA)
            second = os.path.join(work, "adv2")
            subprocess.run([sys.executable, os.path.join(C.HERE, "gen_adversarial.py"), "--seed", "7", second],
                           check=True)
        a4 = C.compress(adv, os.path.join(work, "adv.tadoc"), "--format", "4")
        b4 = C.compress(second, os.path.join(work, "second-4.tadoc"), "--format", "4")
        b5 = C.compress(second, os.path.join(work, "second-5.tadoc"), "--shard-size", "1M")
        ca, cb = C.oracle.Corpus(adv), C.oracle.Corpus(second)
        t0 = time.monotonic()
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=40)
        client = Client(cluster)
        log("LocalCluster with 2 worker processes up in %.1f s" % (time.monotonic() - t0))
        check(len(client.scheduler_info()["workers"]) == 2, "2 workers")

        words = [w for w, _ in (ca.counter(b"") + cb.counter(b"")).most_common(2)]
        words += [b"whale", "日本語".encode(), b"zzqqxx"]
        t0 = time.monotonic()
        for i, w in enumerate(words):
            want = len(ca.hits(w, b"")) + len(cb.hits(w, b""))
            same(td.count(w.decode(), [a4, b5]), want, "count %r over format 4 + format 5" % w)
            if i < 2:
                same(td.count(w.decode(), [a4, b4]), want, "count %r over format 4 + format 4" % w)
        log("%d counts: %.1f s" % (len(words) + 2, time.monotonic() - t0))
        phrase = b"of the"
        same(td.count(phrase.decode(), [a4, b4]), len(ca.hits(phrase, b"")) + len(cb.hits(phrase, b"")),
             "count of a phrase")
        for w in words[1:4]:
            want = [(a4, os.fsdecode(p), o) for p, o in ca.hits(w, b"")]
            want += [(b5, os.fsdecode(p), o) for p, o in cb.hits(w, b"")]
            same(td.search(w.decode(), [a4, b5]), want, "search %r" % w)
        # per shard: the parts' raw hits merged equal the whole search
        with tadoc.Archive(b5) as a:
            k = a.vector_nparts()
            for w in words[:2]:
                same(a.search_merge([a.search_part(w.decode(), i) for i in range(k)]), a.search(w.decode()),
                     "search_part x %d merged = search %r" % (k, w))
            raises(lambda: a.search_part("the", k), tadoc.TadocError, errno.EINVAL, ["part"], "search part out of range")
        same(td.search("of the", [b5, a4]),
             [(b5, os.fsdecode(p), o) for p, o in cb.hits(phrase, b"")] +
             [(a4, os.fsdecode(p), o) for p, o in ca.hits(phrase, b"")], "search of a phrase (one task an archive)")
        log("counts and searches: %.1f s" % (time.monotonic() - t0))

        t0 = time.monotonic()
        total = ca.counter(b"") + cb.counter(b"")
        want = sorted(((w.decode(), n) for w, n in total.items()), key=lambda kv: (-kv[1], kv[0].encode()))
        same(td.top(20, [a4, b4]), want[:20], "top 20 over two archives")
        same(td.top(0, [a4, b4]), want, "top 0 (every word) over two archives")
        # per shard: one task per part of the format 5 archive's term vector, merged in C
        with tadoc.Archive(b5) as a:
            nparts = a.vector_nparts()
            check(nparts == a.info()["nshards"] and nparts > 1, "format 5: %d parts for %d shards"
                  % (nparts, a.info()["nshards"]))
            parts = [a.vector_part(k) for k in range(nparts)]
            merged = tadoc.merge_word_counts(parts)
            wantb = sorted((w.decode("utf-8", "surrogateescape"), n) for w, n in cb.counter(b"").items())
            same(sorted(merged.items()), wantb, "the shards' term vectors added up = the oracle's counts")
            same(merged.items(), a.vector(), "the shards' term vectors added up = the whole archive's vector")
            same(tadoc.top_word_counts(merged, 20), a.top(20), "top_word_counts of the merge = Archive.top")
            sub = sorted({p.split(b"/")[0] for p in cb.words if b"/" in p})
            if sub:  # a directory's parts (the shards holding part of it)
                d = sub[0]
                k = a.vector_nparts(d.decode())
                got = tadoc.merge_word_counts([a.vector_part(i, d.decode()) for i in range(k)])
                same(sorted(got.items()), sorted((w.decode("utf-8", "surrogateescape"), n)
                                                 for w, n in cb.counter(d).items()), "parts of directory %r" % d)
            raises(lambda: a.vector_part(nparts), tadoc.TadocError, errno.EINVAL, ["part"], "part out of range")
        with tadoc.Archive(a4) as a:
            same(a.vector_nparts(), 1, "format 4: one part")
        raises(lambda: tadoc.merge_word_counts([tadoc.WordCounts(b"b\na\n", bytes(16))]), tadoc.TadocError,
               errno.EINVAL, ["order"], "merge of a list out of byte order")
        same(td.top(20, [a4, b5]), want[:20], "top 20 over format 4 + format 5 (per shard)")
        same(td.top(0, [b5, a4]), want, "top 0 over format 5 (per shard) + format 4")
        # a word cut between shards (no separator within 1 MiB past the cut): one part, still right
        cut = os.path.join(work, "cut")
        os.makedirs(cut)
        with open(os.path.join(cut, "a.txt"), "wb") as f:
            f.write(b"the whale " * 1000)
        with open(os.path.join(cut, "b.txt"), "wb") as f:
            f.write(b"x" * (3 << 20) + b" the end\n")
        c5 = C.compress(cut, os.path.join(work, "cut.tadoc"), "--shard-size", "1M")
        cc = C.oracle.Corpus(cut)
        with tadoc.Archive(c5) as a:
            check(a.info()["nshards"] > 1, "the cut tree has %d shards" % a.info()["nshards"])
            same(a.vector_nparts(), 1, "a word cut between shards: one part")
        wantc = sorted(((w.decode(), n) for w, n in cc.counter(b"").items()), key=lambda kv: (-kv[1], kv[0].encode()))
        same(td.top(0, [c5]), wantc, "top over the archive with a cut word")
        log("top words: %.1f s" % (time.monotonic() - t0))

        t0 = time.monotonic()
        with tadoc.Archive(b5) as a:
            nshards = a.info()["nshards"]
        bag = td.read_text([a4, b5], encoding=None, with_archive=True)
        check(nshards > 1 and bag.npartitions >= nshards + 1,
              "read_text: %d partitions for %d shards + the format 4 archive" % (bag.npartitions, nshards))
        got = collections.Counter()
        for arch, p, data in bag.compute():
            got[(arch, p)] += 1
            tree = adv if arch == a4 else second
            if not check(data == open(os.path.join(os.fsencode(tree), os.fsencode(p)), "rb").read(),
                         "read_text %s %s" % (arch, p)):
                break
        nfiles = len(ca.words) + len(cb.words)
        check(len(got) == nfiles and max(got.values()) == 1, "read_text: %d files once each (want %d)"
              % (len(got), nfiles))
        lines = td.read_text([b5], errors="replace").map(lambda pt: pt[1].count("\n")).sum().compute()
        want_lines = sum(open(os.path.join(second, os.fsdecode(f)), "rb").read().count(b"\n") for f in cb.words)
        same(lines, want_lines, "read_text: lines of the format 5 archive")
        log("read_text: %.1f s" % (time.monotonic() - t0))
        # strict decoding (the default) of a file that is not UTF-8: the error names the archive and the file
        raises(lambda: td.read_text([a4]).compute(), UnicodeDecodeError, None, ["in " + a4 + ": ", "errors="],
               "read_text, strict, of invalid UTF-8")

        # bad archives: the job fails with the engine's message naming the file; other tasks unaffected
        missing = os.path.join(work, "missing.tadoc")
        raises(lambda: td.count("the", [a4, missing]), tadoc.TadocError, errno.ENOENT, [missing],
               "count over a missing archive")
        raises(lambda: td.count("the", [a4, missing]), FileNotFoundError, errno.ENOENT, [missing],
               "a missing archive is a FileNotFoundError")
        data = open(b4, "rb").read()
        damaged = os.path.join(work, "damaged.tadoc")
        with open(damaged, "wb") as f:
            f.write(data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0x55]) + data[len(data) // 2 + 1:])
        raises(lambda: td.top(5, [a4, damaged]), tadoc.TadocError, errno.EIO, [damaged, "corrupt"],
               "top over a damaged archive")
        futs = client.map(td.count_one, [a4, missing, damaged], word="the", pure=False)
        client.gather(futs, errors="skip")
        same([f.status for f in futs[:2]], ["finished", "error"], "client.map: statuses of good and missing")
        same(futs[0].result(), len(ca.hits(b"the", b"")), "client.map: the good archive's count")
        e = futs[1].exception()
        check(isinstance(e, tadoc.TadocError) and missing in str(e), "client.map: missing: %r" % e)
        if futs[2].status == "error":  # a damaged byte the count's tables do not use may go unnoticed
            e = futs[2].exception()
            check(isinstance(e, tadoc.TadocError) and damaged in str(e), "client.map: damaged: %r" % e)
        else:
            same(futs[2].result(), len(cb.hits(b"the", b"")), "client.map: damaged archive's count")

        client.close()
        cluster.close()
        client = cluster = None
        # no client: Dask's default scheduler (threads) in this process
        same(td.count("the", [a4, b5]), len(ca.hits(b"the", b"")) + len(cb.hits(b"the", b"")),
             "count without a client")
    finally:
        if client:
            client.close()
        if cluster:
            cluster.close()
        shutil.rmtree(work, ignore_errors=True)
    C.finish("py_dask")


if __name__ == "__main__":
    main()
