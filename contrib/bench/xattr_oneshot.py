#!/usr/bin/env python3
"""xattr_oneshot: the analytics through `getfattr` on a fresh read-only tadocfs mount, as whole
processes, two (or more) tadocfs binaries side by side, against the plain-text pipelines.

Usage: xattr_oneshot.py [-r RUNS] [-p PIPE_RUNS] [-w WARM] [-o OUT.md] NEW_TADOCFS BASE_TADOCFS
                        NAME:ARCHIVE:DIR:W:PHRASE ...

For each corpus NAME (ARCHIVE its archive, built with `tadoc compress --postings --fuzzy-index`
to use those paths; DIR the original tree), the xattrs of the mount's root: `top.20`,
`files.W`, `files.PHRASE`, `ngrams.3.20`, `count.PHRASE`, `fuzzy.2.W`. Each query runs RUNS
times (default 5) on a fresh mount per run (mounted `-o ro`, one `user.tadoc.words` asked,
then WARM seconds, default 1.5, for the mount's idle-priority warm-up), the binaries
interleaved: one `getfattr --only-values -n user.tadoc.NAME ROOT` process (the first answer;
getfattr asks for the size, then the value), then the same process again. Figures: the
getfattr process's median wall time (spawn to exit, from this script) and its least CPU
(wait4), the daemon's least CPU meanwhile (`perf stat -e task-clock -p PID`, which follows the
threads the daemon starts; all its threads), and the median wall of the repeat. Both
binaries' values are checked equal first. The pipelines (analytics.sh's) run PIPE_RUNS times
(default 3; 0: none): median wall, least CPU (user + sys of the shell and its children). Speed-ups:
the pipeline's wall over getfattr's wall, and its CPU over getfattr's CPU plus the daemon's.
Also the floors: `/bin/true` and `getfattr` of a name a plain file lacks.
--rw mounts `-o rw` instead (ARCHIVE must be a scratch copy: its journal is deleted after
each run); --edit FILE then appends one line to FILE (a path in the tree) through the
mount before the clock starts, so the root and FILE's directories have a change below them.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import time

NULL = os.open(os.devnull, os.O_WRONLY)


def spawn_wait(argv):
    """Run argv (stdout, stderr to /dev/null); (wall ms, CPU ms, exit status)."""
    t = time.monotonic()
    pid = os.posix_spawnp(argv[0], argv, os.environ,
                          file_actions=[(os.POSIX_SPAWN_DUP2, NULL, 1), (os.POSIX_SPAWN_DUP2, NULL, 2)])
    _, st, ru = os.wait4(pid, 0)
    return (time.monotonic() - t) * 1e3, (ru.ru_utime + ru.ru_stime) * 1e3, os.waitstatus_to_exitcode(st)


def mount(binary, arch, mnt, warm, rw=False, edit=None):
    subprocess.run([binary, arch, mnt, "-o", "rw" if rw else "ro"], check=True)
    for _ in range(500):
        if os.path.ismount(mnt):
            break
        time.sleep(0.01)
    out = subprocess.run(["pgrep", "-n", "-f", "^%s %s %s" % (binary, arch, mnt)], capture_output=True, text=True)
    if not out.stdout.strip():
        sys.exit("xattr_oneshot: %s did not mount %s" % (binary, arch))
    pid = int(out.stdout.split()[0])
    os.getxattr(mnt, "user.tadoc.words")
    if edit:
        with open(os.path.join(mnt, edit), "ab") as h:
            h.write(b"xattr_oneshot edit\n")
    time.sleep(warm)
    return pid


def umount(mnt, pid, arch=None):
    subprocess.run(["fusermount3", "-u", mnt])
    for _ in range(500):
        try:
            os.kill(pid, 0)
        except OSError:
            break
        time.sleep(0.01)
    if arch and os.path.exists(arch + ".journal"):
        os.unlink(arch + ".journal")


def perf_start(pid, out):
    p = subprocess.Popen(["perf", "stat", "--per-thread", "-x,", "-e", "task-clock", "-p", str(pid), "-o", out],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.25)  # attached to every thread
    return p


def background(pid, tid):
    """1 for the mount's warm-up thread (nice 19, then SCHED_IDLE: kernel_tune.c)."""
    try:
        f = open("/proc/%d/task/%d/stat" % (pid, tid)).read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return int(f[16]) > 0 or int(f[38]) == 5


def perf_stop(p, out, pid):
    """(ms of CPU of the threads that answer requests, ms of the background warm-up)."""
    time.sleep(0.02)
    p.send_signal(signal.SIGINT)
    p.wait()
    fg = bg = 0.0
    for ln in open(out):
        f = ln.strip().split(",")
        if len(f) > 3 and f[3] == "task-clock" and f[1] not in ("<not counted>", "<not supported>"):
            tid = int(f[0].rsplit("-", 1)[1])
            if background(pid, tid):
                bg += float(f[1])
            else:
                fg += float(f[1])
    return fg, bg


def one(binary, arch, mnt, name, warm, tmp, rw=False, edit=None):
    pid = mount(binary, arch, mnt, warm, rw, edit)
    pf = os.path.join(tmp, "perf.out")
    p = perf_start(pid, pf)
    argv = ["getfattr", "--only-values", "--absolute-names", "-n", "user.tadoc." + name, mnt]
    w, c, st = spawn_wait(argv)
    d, _ = perf_stop(p, pf, pid)
    w2, _, _ = spawn_wait(argv)
    umount(mnt, pid, arch if rw else None)
    if st:
        sys.exit("xattr_oneshot: getfattr -n user.tadoc.%s failed (%d)" % (name, st))
    return w, c, d, w2


def value(binary, arch, mnt, name, rw=False, edit=None):
    pid = mount(binary, arch, mnt, 0, rw, edit)
    try:
        return os.getxattr(mnt, "user.tadoc." + name)
    finally:
        umount(mnt, pid, arch if rw else None)


def med(v):
    v = sorted(v)
    return v[len(v) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("-p", type=int, default=3)
    ap.add_argument("-w", type=float, default=1.5)
    ap.add_argument("-o")
    ap.add_argument("-q", help="only the xattrs whose name holds one of these (comma-separated)")
    ap.add_argument("--rw", action="store_true")
    ap.add_argument("--edit")
    ap.add_argument("new")
    ap.add_argument("base")
    ap.add_argument("corpora", nargs="+")
    a = ap.parse_args()
    os.environ["LC_ALL"] = "C.UTF-8"
    bins = {"new": os.path.realpath(a.new), "base": os.path.realpath(a.base)}
    tmp = "/tmp/xattr_oneshot.%d" % os.getpid()
    mnt = os.path.join(tmp, "mnt")
    os.makedirs(mnt)
    here = os.path.dirname(os.path.abspath(__file__))
    commit = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    model = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    out = ["- machine: %s, %d cores, load average %s at the start" % (model, os.cpu_count(),
                                                                     " ".join(open("/proc/loadavg").read().split()[:3])),
           "- %s, commit %s; new: %s, base: %s" % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit,
                                                   a.new, a.base),
           "- mount: %s%s" % ("-o rw" if a.rw else "-o ro", ", one line appended to %s first" % a.edit if a.edit else ""),
           "- getfattr on a fresh mount: median wall / least CPU of %d runs, binaries interleaved; daemon: least"
           " CPU (perf task-clock); pipelines: median wall / least CPU of %d" % (a.r, a.p), ""]
    fl = {"true": [], "getfattr": []}
    for _ in range(21):
        fl["true"].append(spawn_wait(["/bin/true"]))
        fl["getfattr"].append(spawn_wait(["getfattr", "-n", "user.none", "/etc/hostname"]))
    out.append("Floors: `/bin/true` %.2f ms wall / %.2f CPU; `getfattr -n user.none FILE` (a plain file) %.2f / %.2f."
               % (med([x[0] for x in fl["true"]]), min(x[1] for x in fl["true"]),
                  med([x[0] for x in fl["getfattr"]]), min(x[1] for x in fl["getfattr"])))
    out.append("")
    out.append("| corpus | xattr | base: getfattr wall / CPU, daemon CPU (ms) | again (wall) | new: getfattr wall / CPU,"
               " daemon CPU (ms) | again (wall) | pipeline | pipeline (ms wall / CPU) | speed-up wall base / new |"
               " speed-up CPU (getfattr + daemon) base / new |")
    out.append("|---|---|---:|---:|---:|---:|---|---:|---:|---:|")
    print("\n".join(out), flush=True)
    try:
        for spec in a.corpora:
            name, arch, tree, w, ph = spec.split(":")
            arch = os.path.realpath(arch)
            p1, p2 = ph.split(" ", 1)
            qs = [
                ("top.20", "grep -rhow '\\w\\+' DIR | sort | uniq -c | sort -rn | head -20",
                 "grep -rhow '\\w\\+' '%s' | sort | uniq -c | sort -rn | head -20" % tree),
                ("files." + w, "grep -rcw W DIR | sort -t: -k2 -rn", "grep -rcw '%s' '%s' | sort -t: -k2 -rn" % (w, tree)),
                ("files." + ph, "grep -row '\\w\\+' DIR | awk (pair per file, counted per file) | sort -rn",
                 "grep -row '\\w\\+' '%s' | awk -F: '{ w = $NF; if ($1 == f && p == \"%s\" && w == \"%s\") n[f]++;"
                 " p = w; f = $1 } END { for (k in n) print n[k] \"\\t\" k }' | sort -rn" % (tree, p1, p2)),
                ("ngrams.3.20", "grep -row '\\w\\+' DIR | awk (3-gram per file) | sort -rn | head -20",
                 "grep -row '\\w\\+' '%s' | awk -F: '{ w = $NF; if ($1 != f) { a = b = \"\"; f = $1 } if (a != \"\")"
                 " n[a \" \" b \" \" w]++; a = b; b = w } END { for (k in n) print n[k] \"\\t\" k }' | sort -rn | head -20"
                 % tree),
                ("count." + ph, "grep -row '\\w\\+' DIR | awk (pair per file)",
                 "grep -row '\\w\\+' '%s' | awk -F: '{ w = $NF; if ($1 == f && p == \"%s\" && w == \"%s\") n++;"
                 " p = w; f = $1 } END { print n }'" % (tree, p1, p2)),
                ("fuzzy.2." + w, "ugrep -r -Z2 -w -o W DIR | sort | uniq -c",
                 "ugrep -r -Z2 -w -o -h '%s' '%s' | sort | uniq -c" % (w, tree)),
            ]
            subprocess.run(["cat", arch], stdout=subprocess.DEVNULL)
            for xn, plabel, pcmd in qs:
                if a.q and not any(q in xn for q in a.q.split(",")):
                    continue
                if value(bins["new"], arch, mnt, xn, a.rw, a.edit) != value(bins["base"], arch, mnt, xn, a.rw, a.edit):
                    sys.exit("xattr_oneshot: %s: the binaries' values differ" % xn)
                got = {k: [] for k in bins}
                for _ in range(a.r):
                    for k, b in bins.items():
                        got[k].append(one(b, arch, mnt, xn, a.w, tmp, a.rw, a.edit))
                m = {k: (med([x[0] for x in v]), min(x[1] for x in v), min(x[2] for x in v), med([x[3] for x in v]))
                     for k, v in got.items()}
                row = "| %s | `%s` | %.2f / %.2f, %.2f | %.2f | %.2f / %.2f, %.2f | %.2f |" % (
                    name, xn, *m["base"], *m["new"])
                if a.p:
                    pr = [spawn_wait(["bash", "-c", pcmd]) for _ in range(a.p)]
                    pw, pc = med([x[0] for x in pr]), min(x[1] for x in pr)
                    row += " `%s` | %.0f / %.0f |" % (plabel.replace("|", "\\|"), pw, pc)
                    row += " %.0fx / %.0fx | %.0fx / %.0fx |" % (pw / m["base"][0], pw / m["new"][0],
                                                               pc / (m["base"][1] + m["base"][2]),
                                                               pc / (m["new"][1] + m["new"][2]))
                else:
                    row += " | | | |"
                out.append(row)
                print(row, flush=True)
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", mnt])
        if not os.path.ismount(mnt):
            shutil.rmtree(tmp, ignore_errors=True)
    if a.o:
        open(a.o, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
