#!/usr/bin/env python3
"""xattr_oneshot: the analytics through `getfattr` on a fresh read-only tadocfs mount, as whole
processes, two (or more) tadocfs binaries side by side, against the plain-text pipelines.

Usage: xattr_oneshot.py [-r RUNS] [-p PIPE_RUNS] [-w WARM] [-o OUT.md] [-q NAMES] [-O OPTS] [-v] [--parts] [--prime NAMES]
                        [--cpu CORE] [--rw [--edit FILE]] NEW_TADOCFS BASE_TADOCFS NAME:ARCHIVE:DIR:W:PHRASE ...

For each corpus NAME (ARCHIVE its archive, built with `tadoc compress --postings --fuzzy-index`
to use those paths; DIR the original tree), the xattrs of the mount's root: `top.20`,
`files.W`, `files.PHRASE`, `ngrams.3.20`, `count.PHRASE`, `fuzzy.2.W`. Each query runs RUNS
times (default 5) on a fresh mount per run (`tadocfs -f -o ro`, this script's child; one
`user.tadoc.words` asked, then until the mount's idle-priority warm-up thread ends: an error
past WARM seconds, default 1.5), the binaries interleaved (their order swapped every run): one `getfattr
--only-values -n user.tadoc.NAME ROOT` process (the first answer; getfattr asks for the size,
then the value), then the same process again. With --parts every `#more NAME@N` part of a long
value is read too, a getfattr each, and the figures are their sums (what a user pays for the
whole list). --prime NAMES asks those xattrs on each fresh mount before the clock starts: a mount
that has served other queries (its threads' malloc arenas hold memory; the answer is not kept). Figures: the getfattr process's median wall time (spawn to exit, from this
script) and its least CPU (wait4), the daemon's least CPU meanwhile (its POSIX process CPU
clock, which counts every thread, exited ones too, less the warm-up thread's schedstat: no perf
needed), and the median wall of the repeat. --cpu CORE runs everything on one core. Both
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


class Deadline:
    """A blocking step (wait4, getxattr on the mount) interrupted after `s` seconds: SIGALRM raises."""

    def __init__(self, s, what):
        self.s, self.what = s, what

    def _fire(self, *_):
        raise TimeoutError("xattr_oneshot: %s took over %g s" % (self.what, self.s))

    def __enter__(self):
        self.old = signal.signal(signal.SIGALRM, self._fire)
        signal.setitimer(signal.ITIMER_REAL, self.s)

    def __exit__(self, *_):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.old)


def spawn_wait(argv, timeout=600):
    """Run argv (stdout, stderr to /dev/null); (wall ms, CPU ms, exit status). Killed past timeout s."""
    t = time.monotonic()
    pid = os.posix_spawnp(argv[0], argv, os.environ,
                          file_actions=[(os.POSIX_SPAWN_DUP2, NULL, 1), (os.POSIX_SPAWN_DUP2, NULL, 2)],
                          setpgroup=0)
    try:
        with Deadline(timeout, argv[0]):
            _, st, ru = os.wait4(pid, 0)
    except BaseException:
        os.killpg(pid, signal.SIGKILL)
        os.wait4(pid, 0)
        raise
    return (time.monotonic() - t) * 1e3, (ru.ru_utime + ru.ru_stime) * 1e3, os.waitstatus_to_exitcode(st)


def getxattr(path, name, timeout=60):
    with Deadline(timeout, "getxattr %s" % name):
        return os.getxattr(path, name)


def run_to(argv, timeout=20):
    """Run argv with a timeout; its exit status (124: timed out)."""
    try:
        return subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        return 124


def proc_cpu(pid):
    """The process's CPU (ms, every thread, exited ones too): its POSIX CPU clock."""
    return time.clock_gettime(((~pid) << 3) | 2) * 1e3


def background(pid, tid):
    """1 for the mount's warm-up thread (named tadocfs-warm, at SCHED_IDLE after its first part:
    kernel_tune.c; a binary older than the name: SCHED_IDLE only)."""
    try:
        st = open("/proc/%d/task/%d/stat" % (pid, tid)).read()
    except OSError:
        return False
    return "(tadocfs-warm)" in st or int(st.rsplit(")", 1)[1].split()[38]) == 5


def bg_cpu(pid):
    """(ms of CPU of the live warm-up threads, how many there are)."""
    ms, n = 0.0, 0
    for t in os.listdir("/proc/%d/task" % pid):
        if background(pid, int(t)):
            try:
                ms += int(open("/proc/%d/task/%s/schedstat" % (pid, t)).read().split()[0]) / 1e6
                n += 1
            except OSError:
                pass
    return ms, n


MOUNT_OPTS = ""  # ",OPT..." from -O


class Mount:
    """A fresh tadocfs mount in the foreground (-f, this script's child)."""

    def __init__(self, binary, arch, mnt, warm, rw=False, edit=None):
        self.mnt, self.arch, self.rw = mnt, arch, rw
        self.log = open(os.path.join(os.path.dirname(mnt), "tadocfs.log"), "ab")
        self.p = subprocess.Popen([binary, arch, mnt, "-f", "-o", ("rw" if rw else "ro") + MOUNT_OPTS],
                                  stdout=self.log, stderr=self.log)
        self.pid = self.p.pid
        t = time.monotonic()
        while not os.path.ismount(mnt):
            if self.p.poll() is not None or time.monotonic() - t > 10:
                self.close()
                sys.exit("xattr_oneshot: %s did not mount %s (its log: %s)" % (binary, arch, self.log.name))
            time.sleep(0.005)
        getxattr(mnt, "user.tadoc.words")
        if edit:
            with open(os.path.join(mnt, edit), "ab") as h:
                h.write(b"xattr_oneshot edit\n")
        # the warm-up (checksums, rule cache) ends: its CPU counts in the process clock even after
        # it exits, so a warm-up alive past WARM seconds would be counted as the query's (-w more)
        while warm is not None and bg_cpu(self.pid)[1]:
            if time.monotonic() - t > warm:
                self.close()
                sys.exit("xattr_oneshot: the mount's warm-up still runs after %g s (-w more)" % warm)
            time.sleep(0.01)

    def cpu(self):
        """The daemon's CPU (ms) less its warm-up threads'."""
        return proc_cpu(self.pid) - bg_cpu(self.pid)[0]

    def close(self):
        if os.path.ismount(self.mnt) and run_to(["fusermount3", "-u", self.mnt], 10):
            run_to(["umount", "-l", self.mnt], 10)
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.log.close()
        if self.arch and os.path.exists(self.arch + ".journal"):
            os.unlink(self.arch + ".journal")


def one(binary, arch, mnt, names, warm, rw=False, edit=None, prime=()):
    """getfattr of each of names (a value's #more parts) on a fresh mount, after one getxattr of each name in
    prime: (wall ms, getfattr CPU ms, daemon CPU ms, wall ms of the same again), summed over the names."""
    m = Mount(binary, arch, mnt, warm, rw, edit)
    try:
        for p in prime:
            getxattr(mnt, "user.tadoc." + p)
        w = c = d = w2 = 0.0
        for name in names:
            argv = ["getfattr", "--only-values", "--absolute-names", "-n", "user.tadoc." + name, mnt]
            d0 = m.cpu()
            wi, ci, st = spawn_wait(argv)
            d += m.cpu() - d0
            w += wi
            c += ci
            if st:
                sys.exit("xattr_oneshot: getfattr -n user.tadoc.%s failed (%d)" % (name, st))
        for name in names:
            w2 += spawn_wait(["getfattr", "--only-values", "--absolute-names", "-n", "user.tadoc." + name, mnt])[0]
    finally:
        m.close()
    return w, c, d, w2


def value(binary, arch, mnt, name, rw=False, edit=None, parts=False):
    """The xattr's value (with every #more part when parts), and the names read."""
    m = Mount(binary, arch, mnt, None, rw, edit)  # no wait for the warm-up: nothing is timed
    try:
        names, val = [name], b""
        while True:
            if len(names) > 1000 or names[-1] in names[:-1]:
                sys.exit("xattr_oneshot: %s: #more parts do not end (%s)" % (name, names[-1]))
            v = getxattr(mnt, "user.tadoc." + names[-1])
            val += v
            tail = v.rsplit(b"\n", 2)
            more = tail[-2] if len(tail) > 1 and not tail[-1] else tail[-1]
            if not parts or not more.startswith(b"#more "):
                return val, names
            names.append(more[6:].decode().replace("user.tadoc.", "", 1))
    finally:
        m.close()


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
    ap.add_argument("-O", default="", help="more mount options (comma-separated)")
    ap.add_argument("--prime", default="", help="xattrs asked on each fresh mount before the clock starts"
                    " (comma-separated; a mount that has served other queries)")
    ap.add_argument("-v", action="store_true", help="every run's figures on stderr")
    ap.add_argument("--parts", action="store_true", help="read every #more part of a long value (each a getfattr)")
    ap.add_argument("--cpu", type=int, help="run the mounts, getfattr and the pipelines on this core only")
    ap.add_argument("new")
    ap.add_argument("base")
    ap.add_argument("corpora", nargs="+")
    a = ap.parse_args()
    os.environ["LC_ALL"] = "C.UTF-8"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("xattr_oneshot: terminated"))
    prime = [p for p in a.prime.split(",") if p]
    global MOUNT_OPTS
    MOUNT_OPTS = "," + a.O if a.O else ""
    if a.cpu is not None:
        os.sched_setaffinity(0, {a.cpu})
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
                                                   os.path.basename(a.new), os.path.basename(a.base)),
           "- mount: %s%s%s%s" % ("-o rw" if a.rw else "-o ro", MOUNT_OPTS,
                                       ", then `%s` asked before the clock starts" % ", ".join(prime) if prime else "",
                                       ", one line appended to %s first" % a.edit if a.edit else ""),
           "- getfattr on a fresh mount: median wall / least CPU of %d runs, binaries interleaved; daemon: least"
           " CPU (its POSIX process CPU clock, every thread, less the warm-up thread's schedstat); pipelines: median"
           " wall / least CPU of %d%s%s" % (a.r, a.p, "; every #more part of a long value read, one getfattr each,"
                                           " summed" if a.parts else "; the first part of a long value",
                                           "; all of it on core %d" % a.cpu if a.cpu is not None else ""), ""]
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
                vn, names = value(bins["new"], arch, mnt, xn, a.rw, a.edit, a.parts)
                if vn != value(bins["base"], arch, mnt, xn, a.rw, a.edit, a.parts)[0]:
                    sys.exit("xattr_oneshot: %s: the binaries' values differ" % xn)
                got = {k: [] for k in bins}
                for i in range(a.r):
                    for k, b in (bins.items() if i % 2 == 0 else reversed(list(bins.items()))):
                        got[k].append(one(b, arch, mnt, names, a.w, a.rw, a.edit, prime))
                        if a.v:
                            print("  %s %s run %d: getfattr %.2f ms wall, %.2f CPU; daemon %.2f; again %.2f"
                                  % (xn, k, i, *got[k][-1]), file=sys.stderr, flush=True)
                m = {k: (med([x[0] for x in v]), min(x[1] for x in v), min(x[2] for x in v), med([x[3] for x in v]))
                     for k, v in got.items()}
                row = "| %s | `%s`%s | %.2f / %.2f, %.2f | %.2f | %.2f / %.2f, %.2f | %.2f |" % (
                    name, xn, " (%d parts)" % len(names) if len(names) > 1 else "", *m["base"], *m["new"])
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
        if os.path.ismount(mnt) and run_to(["fusermount3", "-u", mnt], 10):
            run_to(["umount", "-l", mnt], 10)
        if not os.path.ismount(mnt):
            shutil.rmtree(tmp, ignore_errors=True)
    if a.o:
        open(a.o, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
