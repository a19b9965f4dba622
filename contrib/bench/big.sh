#!/bin/bash
# big.sh: a corpus larger than --memory (issue 22): COPIES copies of the `linux` tree under the
# top-level names linux1..linuxN plus sotu, spam, gcide and linuxdoc (8 copies: about 10.5 GB)
# built by `tadoc compress --format 5 --memory MEM` under `nice -n 19`: wall, peak RSS, input and
# archive bytes, ratio; `tadoc info` and `tadoc verify`; a cold mount (page cache dropped) to the
# first `ls` answered and the first `cat` of a small file; word counts through
# `getfattr -n user.tadoc.count.W` on the root and on directories against
# `grep -r -a -o -w W | wc -l` over the original trees (the root's oracle is COPIES times the
# linux tree's count plus the four corpora's: the copies are the same bytes); one word also by
# tests/oracle.py; files read back through the mount and compared with `cmp`.
#
#   sudo contrib/bench/big.sh CORPORA            # CORPORA holds linux sotu spam gcide linuxdoc
#
# The copies are not written to disk: each is a read-only bind mount of CORPORA/linux under
# WORK/in (unmounted on exit; so: root). Nothing is written beside CORPORA.
# Environment: BUILD (default build-rel: a `--buildtype=release` build with fs/tadoc and
# fs/tadocfs), WORK (default /tmp/tadoc-big), COPIES (8), MEM (4G), JOBS (2), NICE (19),
# WORDS (default "the zygote kmem_cache_zalloc Webster": a common word, a rare one, one found
# only in linux, one only in the corpora; pick again for other corpora), STEPS (default
# "build info mount counts read": without "build" WORK/big.tadoc from an earlier run is reused),
# KEEP=1 keeps the archive (otherwise it is deleted at the end).
# Results: contrib/bench/results/compress.md ("Larger than memory").
set -u -o pipefail
export LC_ALL=C.UTF-8
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
B=$(cd "$ROOT/${BUILD:-build-rel}" && pwd)
TADOC=$B/fs/tadoc TADOCFS=$B/fs/tadocfs
C=$(cd "${1:?usage: big.sh CORPORA}" && pwd)
W=${WORK:-/tmp/tadoc-big} N=${COPIES:-8} MEM=${MEM:-4G} J=${JOBS:-2} NI=${NICE:-19}
WORDS=${WORDS:-the zygote kmem_cache_zalloc Webster}
STEPS=" ${STEPS:-build info mount counts read} "
CORP="sotu spam gcide linuxdoc"
A=$W/big.tadoc MNT=$W/mnt
step() { [[ $STEPS == *" $1 "* ]]; }
[ "$(id -u)" = 0 ] || { echo "big.sh: needs root (bind mounts, FUSE, drop_caches)" >&2; exit 1; }
for x in "$TADOC" "$TADOCFS"; do [ -x "$x" ] || { echo "big.sh: $x: not built" >&2; exit 1; }; done
for d in linux $CORP; do [ -d "$C/$d" ] || { echo "big.sh: $C/$d: missing" >&2; exit 1; }; done

cleanup() {
	mountpoint -q "$MNT" && { fusermount3 -u "$MNT" || umount -l "$MNT"; }
	for i in $(seq 1 "$N"); do mountpoint -q "$W/in/linux$i" && umount "$W/in/linux$i"; done
	[ "${KEEP:-0}" = 1 ] || rm -rf "$A" "$W/ref.tadoc" "$W/ref"
}
trap cleanup EXIT
mkdir -p "$W/in" "$MNT"
inputs=()
for i in $(seq 1 "$N"); do
	mkdir -p "$W/in/linux$i"
	mountpoint -q "$W/in/linux$i" || mount --bind -o ro "$C/linux" "$W/in/linux$i" || exit 1
	inputs+=("$W/in/linux$i")
done
for d in $CORP; do inputs+=("$C/$d"); done

# Results, one "name | value" row each, printed as a table at the end.
R=$W/results.txt
: > "$R"
row() { printf '| %s | %s |\n' "$1" "$2" | tee -a "$R"; }
bytes_of() { find "$1" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%d", s }'; }
files_of() { find "$1" -type f | wc -l; }

lin=$(bytes_of "$C/linux") lf=$(files_of "$C/linux")
in=$((N * lin)) nf=$((N * lf))
for d in $CORP; do in=$((in + $(bytes_of "$C/$d"))); nf=$((nf + $(files_of "$C/$d"))); done
row "machine" "$(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(free -g | awk '/Mem/{print $2}') GiB RAM, load $(cut -d' ' -f1-3 /proc/loadavg)"
row "commit" "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)"
row "date" "$(date -u '+%Y-%m-%d %H:%M UTC')"
row "input" "$N x linux ($lin bytes, $lf files) + $CORP: $in bytes, $nf files"

if step build; then
	rm -f "$A" "$W/compress.time"
	echo "compress: nice -n $NI tadoc compress --format 5 -j $J --memory $MEM ($(date -u +%H:%M:%S))"
	nice -n "$NI" /usr/bin/time -v -o "$W/compress.time" \
		"$TADOC" compress -q --format 5 -j "$J" --memory "$MEM" -o "$A" "${inputs[@]}" > "$W/compress.log" 2>&1
fi
# the build's figures from /usr/bin/time -v (also those of an earlier run that built WORK/big.tadoc)
if [ -s "$W/compress.time" ]; then
	rc=$(awk -F': ' '/Exit status/ { print $2 }' "$W/compress.time")
	rc=${rc:-$(head -1 "$W/compress.time")}
	wall=$(awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, t, ":"); s = 0
		for (i = 1; i <= n; i++) s = s * 60 + t[i]; print s }' "$W/compress.time")
	rss=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$W/compress.time")
	row "compress" "$(sed -n 's/^.*Command being timed: "\([^ ]*\/\)\{0,1\}\(tadoc compress [^/]*\)-o .*$/\2/p' "$W/compress.time")under nice -n $NI"
	row "compress exit" "$rc$( [ "$rc" = 0 ] || echo ": $(tail -2 "$W/compress.log" | tr '\n' ' ')")"
	row "compress wall" "$(awk "BEGIN { printf \"%.0f s (%.1f MB/s)\", $wall, $in / 1e6 / $wall }")"
	row "compress CPU (user + sys)" "$(awk -F': ' '/User time/ { u = $2 } /System time/ { s = $2 } END { printf "%.0f s", u + s }' "$W/compress.time")"
	row "compress peak RSS" "$((rss / 1024)) MiB ($(awk "BEGIN { printf \"%.2f\", $rss / 1048576 }") GiB; bound --memory $MEM)"
	[ "$rc" = 0 ] || exit 1
fi
[ -f "$A" ] || { echo "big.sh: $A: no archive (run with STEPS including build)" >&2; exit 1; }
ab=$(stat -c %s "$A")
row "archive bytes" "$ab"
row "ratio" "$(awk "BEGIN { printf \"%.3f\", $in / $ab }")"

if step info; then
	"$TADOC" info "$A" > "$W/info.txt" 2>&1
	sed -n '1,16p' "$W/info.txt"
	row "shards" "$(awk '/^shards / { print $2 }' "$W/info.txt")"
	s=$(date +%s.%N)
	nice -n "$NI" "$TADOC" verify "$A" > "$W/verify.log" 2>&1
	rc=$? e=$(date +%s.%N)
	row "tadoc verify" "rc $rc, $(awk "BEGIN { printf \"%.0f s\", $e - $s }") ($(tail -1 "$W/verify.log"))"
fi

# mount: ms from starting tadocfs to the first `ls` answered, then the first `cat` of a small file
# of the last copy (compared with its original), on a cold page cache (every cache dropped before
# the mount: the archive's pages, tadocfs, its libraries, ls and cat come from disk) and on a warm
# one; in the same rounds a reference archive holding only that file, so the process starts and
# the machine's load show apart from the archive's size. Medians and min-max of MOUNT_RUNS (5).
small=linux$N/$(cd "$C/linux" && find . -type f -size -2k -printf '%P\n' | grep -v '^\.' | sort | head -1)
if step mount; then
	rm -rf "$W/ref" "$W/ref.tadoc" && mkdir -p "$W/ref/$(dirname "$small")" &&
		cp -p "$C/linux/${small#linux$N/}" "$W/ref/$small" &&
		"$TADOC" compress -q --format 5 -o "$W/ref.tadoc" "$W/ref" || exit 1
	python3 - "$TADOCFS" "$A" "$W/ref.tadoc" "$MNT" "$small" "$C/linux/${small#linux$N/}" "${MOUNT_RUNS:-5}" <<'EOF' | tee -a "$R"
import os, statistics, subprocess, sys, time
tadocfs, big, ref, mnt, rel, orig, runs = sys.argv[1:8]
want = open(orig, "rb").read()
clock = time.monotonic


def once(arc, cold):
    if cold:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    t0 = clock()
    subprocess.run([tadocfs, arc, mnt], check=True)
    try:
        names = subprocess.run(["ls", mnt], stdout=subprocess.PIPE, check=True).stdout.split()
        t1 = clock()
        data = subprocess.run(["cat", os.path.join(mnt, rel)], stdout=subprocess.PIPE, check=True).stdout
        t2 = clock()
    finally:
        subprocess.run(["fusermount3", "-u", mnt], check=True)
    if data != want:
        sys.exit(f"big.sh: {arc}: {rel} read through the mount differs from {orig}")
    return 1e3 * (t1 - t0), 1e3 * (t2 - t1)


res = {}
for i in range(int(runs)):
    for cold in (True, False):
        for name, arc in (("big", big), ("reference", ref)):
            res.setdefault((name, cold), []).append(once(arc, cold))
for (name, cold), rs in res.items():
    what = f"{'cold' if cold else 'warm'}, {name} archive ({os.path.getsize(big if name == 'big' else ref)} B)"
    for k, col in enumerate(("mount -> first ls answered", f"first cat of {rel} ({len(want)} B, exact)")):
        v = [r[k] for r in rs]
        print(f"| {col}, {what} | {statistics.median(v):.1f} ms (min {min(v):.1f}, max {max(v):.1f}) |", flush=True)
EOF
fi

"$TADOCFS" "$A" "$MNT" || exit 1
if step counts; then
	# one grep per word and tree: linux once (the copies are the same bytes), each corpus; kept
	# in WORK/oracle (the original trees do not change), so a rerun greps no tree again
	mkdir -p "$W/oracle"
	g() {
		local f=$W/oracle/$1.$(printf '%s' "$2" | md5sum | cut -c1-12)
		[ -s "$f" ] || grep -r -a -o -w -- "$1" "$2" | wc -l > "$f"
		cat "$f"
	}
	for w in $WORDS; do
		gl=$(g "$w" "$C/linux") gsub=$(g "$w" "$C/linux/fs") groot=$((N * gl)) gc=
		for d in $CORP; do x=$(g "$w" "$C/$d"); gc="$gc $d=$x"; groot=$((groot + x)); done
		for pair in "/:$groot" "/linux$(( (N + 1) / 2 )):$gl" "/linux$N/fs:$gsub" "/gcide:$(g "$w" "$C/gcide")"; do
			p=${pair%%:*} want=${pair#*:}
			got=$(getfattr --absolute-names --only-values -n "user.tadoc.count.$w" "$MNT$p" 2>&1)
			row "count $w in $p" "$got (grep: $want$( [ "$p" = / ] && echo " = $N x $gl +$gc")) $( [ "$got" = "$want" ] && echo ok || echo MISMATCH)"
		done
	done
	w=${WORDS%% *}
	o=$(python3 "$ROOT/tests/oracle.py" count "$C/linux/kernel" "$w")
	row "count $w in /linux$N/kernel" "$(getfattr --absolute-names --only-values -n "user.tadoc.count.$w" "$MNT/linux$N/kernel") (tests/oracle.py: $o, grep: $(g "$w" "$C/linux/kernel"))"
fi
if step read; then
	# files read back through the mount: a few named ones and a sample of each copy
	ok=0 bad=0
	list=$(cd "$C/linux" && { echo MAINTAINERS; find . -type f -printf '%P\n' | awk 'NR % 4001 == 7'; })
	for i in $(printf '%s\n' 1 5 "$N" | awk -v n="$N" '$1 <= n' | sort -un); do
		for f in $list; do
			if cmp -s "$C/linux/$f" "$MNT/linux$i/$f"; then ok=$((ok + 1)); else bad=$((bad + 1)); echo "DIFFERS: linux$i/$f"; fi
		done
	done
	for d in $CORP; do
		for f in $(cd "$C/$d" && find . -type f -printf '%P\n' | awk 'NR % 997 == 1'); do
			if cmp -s "$C/$d/$f" "$MNT/$d/$f"; then ok=$((ok + 1)); else bad=$((bad + 1)); echo "DIFFERS: $d/$f"; fi
		done
	done
	row "files read back (cmp)" "$ok exact, $bad differ"
fi
fusermount3 -u "$MNT"

echo
echo "| what | result |"
echo "|---|---|"
cat "$R"
