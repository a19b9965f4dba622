#!/usr/bin/python3
"""Word counts over tadoc archives with Dask: the example to copy.

Usage:
  wordcount.py [--scheduler ADDRESS | --workers N] [-n TOP] [--word WORD]... ARCHIVE...

Prints the TOP most frequent words over all the archives (computed on each
shard's grammar by the worker that opens it, then added up), and the
count of each --word (a word, or a phrase: words separated by single
spaces). Without --scheduler it starts a local cluster of N worker
processes (default: one per core). Every worker opens the archives itself,
by path: on a real cluster put them on storage every node mounts at the
same path (or one archive per node, python/README.md).

  /usr/bin/python3 contrib/dask/wordcount.py -n 10 --word whale corpus-a.tadoc corpus-b.tadoc
  /usr/bin/python3 contrib/dask/wordcount.py --scheduler tcp://head:8786 /shared/*.tadoc

Needs the tadoc package (meson install, or PYTHONPATH=python with
TADOC_LIB=build/libtadoc.so in a build tree) and python3-distributed
(Debian's /usr/bin/python3 finds it; another python3 first on PATH may not).
"""
import argparse
import os
import sys
import time

from distributed import Client, LocalCluster

import tadoc.dask


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("archives", nargs="+", metavar="ARCHIVE")
    ap.add_argument("--scheduler", help="address of a running Dask scheduler (default: a local cluster)")
    ap.add_argument("--workers", type=int, default=os.cpu_count(), help="local worker processes")
    ap.add_argument("-n", "--top", type=int, default=20, help="how many words (0 = all)")
    ap.add_argument("--word", action="append", default=[], help="also count this word or phrase")
    a = ap.parse_args()

    if a.scheduler:
        client = Client(a.scheduler)
    else:
        cluster = LocalCluster(n_workers=a.workers, threads_per_worker=1, dashboard_address=None)
        client = Client(cluster)
    with client:
        t = time.monotonic()
        try:
            top = tadoc.dask.top(a.top, a.archives)
            counts = [(w, tadoc.dask.count(w, a.archives)) for w in a.word]
        except tadoc.TadocError as e:  # a missing or damaged archive: the engine's message names it
            sys.exit("wordcount: %s" % e)
        for word, n in top:
            print("%d\t%s" % (n, word))
        for word, n in counts:
            print("%s: %d" % (word, n))
        print("%d archives, %d workers, %.2f s" % (len(a.archives), len(client.scheduler_info()["workers"]),
                                                   time.monotonic() - t), file=sys.stderr)


if __name__ == "__main__":
    main()
