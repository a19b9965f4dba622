#!/usr/bin/env python3
"""oneshot: one-shot tadoc queries as whole processes (ranked files from stored postings,
fuzzy -k 2 from the fuzzy index, and the floors `tadoc --version` and `tadoc info`), two
tadoc binaries side by side in one run, against the plain-text pipelines over the tree.

Usage: oneshot.py [-r RUNS] [-p PIPE_RUNS] [-x LABEL=TADOC ...] -o OUT.md NEW_TADOC BASE_TADOC NAME:ARCHIVE:DIR:W1,W2:FW ...

ARCHIVE may be NEW_ARCHIVE+BASE_ARCHIVE (each binary its own build of the corpus; -x binaries
read the base's); an empty FW leaves the fuzzy row out.

For each corpus NAME (its archive built with `tadoc compress --postings --fuzzy-index`, the
original tree DIR): `tadoc files ARCHIVE W` for each W, `tadoc fuzzy -k 2 ARCHIVE FW`, and
the pipelines `grep -rcw W DIR | sort -t: -k2 -rn` and `ugrep -r -Z2 -w -o -h FW DIR | sort |
uniq -c`. Each command runs RUNS times (default 7), the commands of a round one after the
other (NEW and BASE interleaved), pipelines PIPE_RUNS times (default 5); the figures are the
least CPU time (user + sys of the process and every child it waited for, from wait4) and
the median wall time. Both binaries' answers are checked equal first. CPU time is the
figure to compare on a shared machine. Each -x adds one more binary (another build of
either), measured in the same rounds, its answers checked too, in columns of its own.
"""
import argparse
import os
import subprocess
import sys
import time


def run_once(cmd, shell=False):
    devnull = os.open(os.devnull, os.O_WRONLY)
    argv = ["bash", "-c", cmd] if shell else cmd
    t = time.monotonic()
    pid = os.posix_spawnp(argv[0], argv, os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1)])
    _, st, ru = os.wait4(pid, 0)
    w = time.monotonic() - t
    os.close(devnull)
    if os.waitstatus_to_exitcode(st) != 0:
        sys.exit("oneshot: failed: %r" % (argv,))
    return (ru.ru_utime + ru.ru_stime) * 1000.0, w * 1000.0


def measure(cmds, runs):
    """cmds: {label: (argv or shell string, shell)}; interleaved rounds; {label: (cpu_min, wall_med)}."""
    got = {label: ([], []) for label in cmds}
    for _ in range(runs):
        for label, (cmd, shell) in cmds.items():
            c, w = run_once(cmd, shell)
            got[label][0].append(c)
            got[label][1].append(w)
    return {label: (min(c), sorted(w)[len(w) // 2]) for label, (c, w) in got.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-r", type=int, default=7)
    ap.add_argument("-p", type=int, default=5)
    ap.add_argument("-o", required=True)
    ap.add_argument("-x", action="append", default=[], metavar="LABEL=TADOC")
    ap.add_argument("new")
    ap.add_argument("base")
    ap.add_argument("corpora", nargs="+")
    a = ap.parse_args()
    os.environ["LC_ALL"] = "C.UTF-8"
    new, base = os.path.realpath(a.new), os.path.realpath(a.base)
    extra = [(x.split("=", 1)[0], os.path.realpath(x.split("=", 1)[1])) for x in a.x]
    out = []
    load = open("/proc/loadavg").read().split()[:3]
    model = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    here = os.path.dirname(os.path.abspath(__file__))
    commit = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    out.append("- machine: %s, %d cores, load average %s at the start" % (model, os.cpu_count(), " ".join(load)))
    out.append("- %s, commit %s; new: %s, base: %s%s" % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit,
                                                        a.new, a.base, "".join(", %s: %s" % tuple(x.split("=", 1)) for x in a.x)))
    out.append("- tadoc: least CPU / median wall of %d runs, the binaries interleaved; pipelines: of %d" % (a.r, a.p))
    out.append("")
    xh = "".join(" %s tadoc (ms CPU / wall) |" % lab for lab, _ in extra)
    xs = "".join(" / %s" % lab for lab, _ in extra)
    out.append("| corpus | query | base tadoc (ms CPU / wall) | new tadoc (ms CPU / wall) |%s pipeline | pipeline (ms CPU / wall) | speed-up CPU base / new%s |" % (xh, xs))
    out.append("|---|---|---:|---:|%s---|---:|---:|" % ("---:|" * len(extra)))
    for spec in a.corpora:
        name, arch, tree, words, fw = spec.split(":")
        # ARCHIVE may be NEW_ARCHIVE+BASE_ARCHIVE: each binary reads its own build of the corpus
        arch, barch = (arch.split("+", 1) + [arch])[:2]
        queries = [("files %s" % w, ["files", arch, w], "grep -rcw W DIR | sort -t: -k2 -rn",
                    "grep -rcw '%s' '%s' | sort -t: -k2 -rn" % (w, tree)) for w in words.split(",")]
        if fw:  # an empty FW: no fuzzy row (archives without the fuzzy index)
            queries.append(("fuzzy -k 2 %s" % fw, ["fuzzy", "-k", "2", arch, fw],
                            "ugrep -r -Z2 -w -o W DIR | sort | uniq -c",
                            "ugrep -r -Z2 -w -o -h '%s' '%s' | sort | uniq -c" % (fw, tree)))
        queries.append(("tadoc info (floor)", ["info", arch], None, None))
        queries.append(("tadoc --version (floor)", ["--version"], None, None))
        for f in {arch, barch}:
            subprocess.run(["cat", f], stdout=subprocess.DEVNULL)
        for label, args, plabel, pcmd in queries:
            bargs = [barch if x == arch else x for x in args]
            if args[0] != "info" and args[0] != "--version":
                x = subprocess.run([new] + args, capture_output=True).stdout
                y = subprocess.run([base] + bargs, capture_output=True).stdout
                if x != y:
                    sys.exit("oneshot: %s: the two binaries' answers differ" % label)
                for lab, b in extra:
                    if subprocess.run([b] + bargs, capture_output=True).stdout != x:
                        sys.exit("oneshot: %s: %s's answer differs" % (label, lab))
            cmds = {"base": ([base] + bargs, False), "new": ([new] + args, False)}
            for lab, b in extra:
                cmds[lab] = ([b] + bargs, False)
            m = measure(cmds, a.r)
            row = "| %s | `%s` | %.2f / %.1f | %.2f / %.1f |" % (name, label, m["base"][0], m["base"][1],
                                                              m["new"][0], m["new"][1])
            row += "".join(" %.2f / %.1f |" % m[lab] for lab, _ in extra)
            if pcmd:
                p = measure({"p": (pcmd, True)}, a.p)["p"]
                row += " `%s` | %.0f / %.0f | %.0fx / %.0fx%s |" % (plabel.replace("|", "\\|"), p[0], p[1],
                                                                  p[0] / m["base"][0], p[0] / m["new"][0],
                                                                  "".join(" / %.0fx" % (p[0] / m[lab][0])
                                                                          for lab, _ in extra))
            else:
                row += " | | |"
            out.append(row)
            print(row, flush=True)
    open(a.o, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
