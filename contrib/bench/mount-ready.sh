#!/usr/bin/env bash
# mount-ready.sh: how soon a fresh tadocfs mount answers: milliseconds from
# starting `tadocfs ARCHIVE MNT` until the mount point answers stat(), until
# a first `ls MNT` has answered, then a first `ls -l MNT` and a first
# `cat MNT/FILE` (checked against ORIGINAL when given); each tool is a
# real process, timed with a monotonic clock; then unmount. Run as root.
#
# Usage: contrib/bench/mount-ready.sh [-n RUNS] [-o OPTS] [-b BASE] ARCHIVE FILE [ORIGINAL]
#   FILE is a path inside the archive (a small file); ORIGINAL its original.
#   -n RUNS   mounts (default 5): each row, then median / min / max
#   -o OPTS   extra tadocfs -o options (e.g. noverify)
#   -b BASE   another tadocfs binary (e.g. main's) measured in the same
#             rounds, alternating which goes first, so a busy machine's
#             drift falls on both alike
# Env: TADOCFS (default build/fs/tadocfs), STRACE=FILE runs the daemon under
# `strace -f -tt -o FILE` (a timeline of every thread's system calls: shows
# what, if anything, a FUSE thread waits for before it answers).
# Caches are not dropped: the numbers are for the archive in the page cache.
set -u -o pipefail
RUNS=5
OPTS=
BASE=
while getopts n:o:b:h c; do
	case $c in
	n) RUNS=$OPTARG ;;
	o) OPTS=$OPTARG ;;
	b) BASE=$OPTARG ;;
	*) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [ $# -lt 2 ]; then
	awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'
	exit 2
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TADOCFS=${TADOCFS:-$ROOT/build/fs/tadocfs}
[ -x "$TADOCFS" ] || { echo "mount-ready.sh: $TADOCFS: not built" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "mount-ready.sh: needs root (FUSE mounts)" >&2; exit 1; }
MNT=$(mktemp -d /tmp/mount-ready.XXXXXX)
trap 'mountpoint -q "$MNT" && fusermount3 -u "$MNT"; rmdir "$MNT"' EXIT
python3 - "$TADOCFS" "$1" "$MNT" "$2" "${3:-}" "$RUNS" "$OPTS" "${STRACE:-}" "$BASE" <<'EOF'
import os, statistics, subprocess, sys, time

tadocfs, archive, mnt, rel, orig, runs, opts, strace, base = sys.argv[1:10]
runs = int(runs)
clock = time.monotonic


def run(cmd):
    """Run a tool to its end; its output, and the ms it took."""
    t = clock()
    out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True).stdout
    return out, (clock() - t) * 1e3


def once(binary):
    before = os.stat(mnt).st_dev
    cmd = [binary, archive, mnt] + (["-o", opts] if opts else [])
    if strace:
        cmd = ["strace", "-f", "-tt", "-o", strace] + cmd
    t0 = clock()
    subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    while True:  # the mount point answers from the new file system
        try:
            if os.stat(mnt).st_dev != before:
                break
        except OSError:
            pass
        if clock() - t0 > 60:
            sys.exit("mount-ready.sh: nothing mounted after 60 s")
        time.sleep(0.0001)
    mounted = (clock() - t0) * 1e3
    _, ls = run(["ls", mnt])
    ready = (clock() - t0) * 1e3
    _, lsl = run(["ls", "-l", mnt])
    data, cat = run(["cat", os.path.join(mnt, rel)])
    ok = "-"
    if orig:
        with open(orig, "rb") as f:
            ok = "yes" if f.read() == data else "NO"
    subprocess.run(["fusermount3", "-u", mnt], check=True)
    while os.stat(mnt).st_dev != before:
        time.sleep(0.001)
    return mounted, ls, ready, lsl, cat, ok


_, ls_alone = run(["ls", "/"])  # a tool's own start, for scale
print(f"archive: {archive} ({os.path.getsize(archive)} bytes); file: {rel} "
      f"({len(open(orig, 'rb').read()) if orig else '?'} bytes); `ls /` alone: {ls_alone:.2f} ms")
cols = ["mounted (stat answers)", "first ls", "mount -> ls answered", "then ls -l", "then cat FILE"]
builds = [("base", base), ("new", tadocfs)] if base else [("new", tadocfs)]
print("| run | build | " + " | ".join(f"{c} ms" for c in cols) + " | cat exact |")
print("|---:|---|" + "---:|" * len(cols) + "---|")
rows = {b: [] for b, _ in builds}
for i in range(runs):
    for b, binary in (builds if i % 2 == 0 else builds[::-1]):
        r = once(binary)
        rows[b].append(r)
        print(f"| {i + 1} | {b} | " + " | ".join(f"{x:.2f}" for x in r[:5]) + f" | {r[5]} |", flush=True)
for b, _ in builds:
    rs = rows[b]
    print(f"| median | {b} | " + " | ".join(f"{statistics.median(r[k] for r in rs):.2f}" for k in range(5)) + " | |")
    print(f"| min-max | {b} | " + " | ".join(f"{min(r[k] for r in rs):.2f}-{max(r[k] for r in rs):.2f}"
                                          for k in range(5)) + " | |")
sys.exit(1 if any(r[5] == "NO" for rs in rows.values() for r in rs) else 0)
EOF
