#!/usr/bin/env python3
"""pinned: one-shot tadoc queries and their plain-text pipelines side by side as whole processes,
two tadoc binaries interleaved, each process pinned to one core (one-thread figures), then once
more unpinned (wall on every core).

Usage: pinned.py [-r ROUNDS] [-t TADOC_RUNS] [-p PIPE_RUNS] [-c CORE] -o OUT.md NEW_TADOC BASE_TADOC
       ARCHIVE DIR 'LABEL|TADOC ARGS|PIPELINE' ...

Each query is 'LABEL|ARGS|PIPELINE': ARGS are the tadoc arguments after the binary with {A} for the
archive (split on spaces; a phrase between single quotes stays one argument), PIPELINE a shell
command with {D} for the tree (empty: no pipeline). Both binaries' answers are checked equal
first. Each round runs every tadoc command TADOC_RUNS times (NEW and BASE alternating) and every
pipeline PIPE_RUNS times; the figures are the median CPU (user + sys of the process and every
child it waited for, from wait4) and median wall over all rounds, pinned to core CORE (this
process's affinity, inherited; tadoc with TADOC_THREADS=1), then unpinned (tadoc on every core) for one round.
Everything runs with LC_ALL=C.UTF-8 (PINNED_LC_ALL=LOCALE for another), the locale of the project's other
benchmarks.
"""
import argparse
import os
import shlex
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oneshot import run_once  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("-t", type=int, default=20)
    ap.add_argument("-p", type=int, default=2)
    ap.add_argument("-c", default="2")
    ap.add_argument("-o", required=True)
    ap.add_argument("new")
    ap.add_argument("base")
    ap.add_argument("archive")
    ap.add_argument("dir")
    ap.add_argument("queries", nargs="+")
    a = ap.parse_args()
    # the project's pipelines run in C.UTF-8 (grep's \w Unicode-aware, like tadoc's words; sort by code
    # point): an inherited locale such as en_US.UTF-8 made `grep -rcw | sort` take 1.25-2.4x the CPU on the GPU host
    os.environ["LC_ALL"] = os.environ.get("PINNED_LC_ALL", "C.UTF-8")
    qs = []
    for q in a.queries:
        label, args, pipe = q.split("|", 2)
        argv = [x.replace("{A}", a.archive) for x in shlex.split(args)]
        qs.append((label, argv, pipe.replace("{D}", shlex.quote(a.dir))))
    for label, argv, _ in qs:
        outs = [subprocess.run([b] + argv, capture_output=True, check=True).stdout for b in (a.new, a.base)]
        if outs[0] != outs[1]:
            sys.exit("pinned: answers differ: %s" % label)
    lines = ["| query | mode | new tadoc (ms CPU / wall) | base tadoc (ms CPU / wall) | new / base (CPU) "
             "| pipeline (ms CPU / wall) | speed-up CPU new / base |", "|---|---|---:|---:|---:|---:|---:|"]
    every = os.sched_getaffinity(0)
    for mode in ("one core", "every core"):
        pin = mode == "one core"
        # children inherit the affinity: no taskset process in the measured CPU
        os.sched_setaffinity(0, {int(a.c)} if pin else every)
        if pin:
            os.environ["TADOC_THREADS"] = "1"
        else:
            os.environ.pop("TADOC_THREADS", None)
        rounds = a.r if mode == "one core" else 1
        got = {}
        for _ in range(rounds):
            for label, argv, pipe in qs:
                for _ in range(a.t):
                    for who, b in (("new", a.new), ("base", a.base)):
                        got.setdefault((label, who), []).append(run_once([b] + argv))
                for _ in range(a.p if pipe else 0):
                    got.setdefault((label, "pipe"), []).append(run_once(pipe, shell=True))
        for label, _, pipe in qs:
            med = {}
            for who in ("new", "base", "pipe"):
                v = got.get((label, who))
                if v:
                    med[who] = (statistics.median(c for c, _ in v), statistics.median(w for _, w in v))
            n, b = med["new"], med["base"]
            p = med.get("pipe")
            lines.append("| %s | %s | %.2f / %.2f | %.2f / %.2f | %.3f | %s | %s |" % (
                label, mode, n[0], n[1], b[0], b[1], n[0] / b[0],
                "%.0f / %.0f" % p if p else "", "%.0fx / %.0fx" % (p[0] / n[0], p[0] / b[0]) if p else ""))
            print(lines[-1], flush=True)
    with open(a.o, "w") as f:
        f.write("- locale: LC_ALL=%s\n\n" % os.environ["LC_ALL"] + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
