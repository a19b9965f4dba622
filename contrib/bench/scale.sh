#!/bin/bash
# scale.sh: the scale benchmark (issue 22) on a many-core host, side by side in one run:
# `tadoc compress --format 5` at -j N (every core; with --gpu on where a GPU is usable) against
# mksquashfs -comp zstd, tar | zstd -19 -T0 and tar | xz -6 -T0; the same build and mksquashfs
# pinned to two cores (taskset); mount to first `ls` and first `cat`; `tadoc add` of a small corpus
# against compressing it alone; `tadoc compact` after 10,000 appends to 10 files against the full
# build.
#
#   contrib/bench/scale.sh CORPUS.tar.xz [SMALL_DIR]
#
# CORPUS.tar.xz holds one top directory (e.g. linux/). SMALL_DIR (e.g. sotu) is what `tadoc add`
# adds; without it that step is skipped.
# Environment: CARRY (default .carry: build/tadoc, build/tadocfs, lib/, extra/bin with
# mksquashfs, xz, zstd and GNU time as gtime, extra/lib), JOBS (default: every core),
# PIN (default 0,1: the cores of the two-core runs; empty skips them), WORK (default /tmp/scale),
# STEPS (default "cores tar pinned mount add compact": which parts run; "tar" is the two
# tar pipelines of the "cores" part; without "cores" the tree
# already unpacked in WORK and its archive out/a.tadoc are reused; "big", not in the default,
# builds 8 hard-linked copies of the tree under --memory 4G, then times the mount's first ls and
# cat on that archive).
# Results: contrib/bench/results/compress.md ("Many cores").
set -u
C=$(cd "${CARRY:-.carry}" && pwd)
export LD_LIBRARY_PATH=$C/lib:$C/extra/lib PATH=$C/build:$C/extra/bin:$PATH
J=${JOBS:-$(nproc)} PIN=${PIN-0,1} W=${WORK:-/tmp/scale}
src=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
small=${2:+$(cd "$2" && pwd)}
T() {
	local name=$1; shift
	local s=$(date +%s.%N)
	gtime -f "%M" -o $W/rss "$@" > $W/out.log 2>&1
	local rc=$? e=$(date +%s.%N)
	printf '%-44s rc=%d wall=%7.1fs peakRSS=%7d MiB\n' "$name" $rc "$(awk "BEGIN{print $e - $s}")" \
		$(( $(tail -1 $W/rss) / 1024 ))
	[ $rc = 0 ] || tail -3 $W/out.log | sed 's/^/    /'
}
ratio() { printf '%-28s %13d bytes  ratio %.3f\n' "$1" $(stat -c %s "$2") "$(awk "BEGIN{print $in / $(stat -c %s "$2")}")"; }

STEPS=" ${STEPS:-cores tar pinned mount add compact} "
step() { [[ $STEPS == *" $1 "* ]]; }
if step cores || [ ! -d $W/src ]; then
	rm -rf $W; mkdir -p $W/src $W/out $W/mnt; cd $W
	s=$(date +%s); xz -dc -T0 "$src" | tar xf - -C src; echo "untar $(( $(date +%s) - s )) s"
fi
cd $W
top=$(ls src | head -1)
in=$(find src/$top -type f -printf '%s\n' | awk '{s += $1} END {print s}')
echo "input $top: $in bytes, $(find src/$top -type f | wc -l) files"
echo "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(free -g | awk '/Mem/{print $2}') GiB"
nvidia-smi -L 2>/dev/null | head -2
echo "tadoc $(cat $C/COMMIT 2>/dev/null)"
export SOURCE_DATE_EPOCH=1700000000
gpu=0; tadoc compress --help 2>&1 | grep -q -- '--gpu' && nvidia-smi -L >/dev/null 2>&1 && gpu=1

if step cores; then
echo "## all $J cores"
T "tadoc compress --format 5 -j$J" tadoc compress -q --format 5 -j $J -o out/a.tadoc src/$top
[ $gpu = 1 ] && T "tadoc compress --format 5 -j$J --gpu on" \
	tadoc compress -q --format 5 -j $J --gpu on -o out/g.tadoc src/$top
[ $gpu = 1 ] && T "tadoc compress --format 5 -j$J --gpu off" \
	tadoc compress -q --format 5 -j $J --gpu off -o out/o.tadoc src/$top
[ -f out/g.tadoc ] && { cmp -s out/a.tadoc out/g.tadoc && echo "--gpu on == --gpu auto: identical" || echo "--gpu on DIFFERS"; }
[ -f out/o.tadoc ] && { cmp -s out/a.tadoc out/o.tadoc && echo "--gpu off == --gpu auto: identical" || echo "--gpu off DIFFERS"; rm -f out/o.tadoc; }
T "mksquashfs -comp zstd -processors $J" mksquashfs src/$top out/x.sqfs -comp zstd -processors $J -no-progress -quiet
if step tar; then
	T "tar | zstd -19 -T0" bash -c "tar cf - -C src $top | zstd -19 -T0 -q > out/x.tar.zst"
	T "tar | xz -6 -T0" bash -c "tar cf - -C src $top | xz -6 -T0 > out/x.tar.xz"
fi
T "tadoc verify" tadoc verify out/a.tadoc
fi

if [ -n "$PIN" ] && step pinned; then
	echo "## pinned to cores $PIN (taskset)"
	T "tadoc compress --format 5 -j2 (2 cores)" taskset -c $PIN tadoc compress -q --format 5 -j 2 -o out/p.tadoc src/$top
	cmp -s out/a.tadoc out/p.tadoc && echo "-j2 == -j$J: identical" || echo "-j2 DIFFERS from -j$J"
	T "mksquashfs -comp zstd -processors 2 (2 cores)" taskset -c $PIN mksquashfs src/$top out/p.sqfs -comp zstd -processors 2 -no-progress -quiet
fi

echo "## sizes"
for f in out/*; do ratio "$(basename $f)" $f; done
tadoc info out/a.tadoc | sed -n '1,12p'

# mount_first ARCHIVE FILE: mount to first `ls` of the root answered, then the first `cat` of
# FILE (a path inside the archive), three times
mount_first() {
python3 - "$1" "$W/mnt" "$2" <<'EOF'
import os, shutil, subprocess, sys, time
arc, mnt, f = sys.argv[1:4]
umount = ["fusermount3", "-u", mnt] if shutil.which("fusermount3") else ["umount", mnt]
for i in range(3):
    t0 = time.perf_counter()
    subprocess.run(["tadocfs", arc, mnt], check=True)
    names = os.listdir(mnt)
    t1 = time.perf_counter()
    with open(os.path.join(mnt, f), "rb") as fh:
        data = fh.read()
    t2 = time.perf_counter()
    subprocess.run(umount)
    print(f"run {i}: mount+first ls {1e3*(t1-t0):.1f} ms ({len(names)} names); first cat of {f} ({len(data)} B) {1e3*(t2-t1):.1f} ms")
EOF
}
small_file=$(cd src/$top && find . -type f -size -8k ! -empty ! -name ".*" | sort | head -1 | cut -c3-)

if step mount; then
echo "## mount to first ls / first cat (warm page cache)"
mount_first "$W/out/a.tadoc" "$small_file"
fi

if step big; then
echo "## 8 copies of $top under --memory 4G (hard links: nothing copied), then mount to first ls / cat"
rm -rf big; mkdir big
for k in 1 2 3 4 5 6 7 8; do cp -al src/$top big/$top$k; done
bigin=$(( in * 8 ))
T "tadoc compress -j$J --memory 4G (8 copies)" tadoc compress -q -j $J --memory 4G -o out/big.tadoc big/$top?
printf '8 copies: %d bytes of files, archive %d bytes, ratio %.3f\n' $bigin $(stat -c %s out/big.tadoc) \
	"$(awk "BEGIN{print $bigin / $(stat -c %s out/big.tadoc)}")"
tadoc info out/big.tadoc | head -12
mount_first "$W/out/big.tadoc" "${top}8/$small_file"
rm -f out/big.tadoc; rm -rf big
fi

if [ -n "$small" ] && step add; then
	echo "## tadoc add $(basename $small) (against compressing it alone)"
	cp out/a.tadoc out/b.tadoc
	T "tadoc add $(basename $small)" tadoc add -j $J out/b.tadoc $small
	T "tadoc compress $(basename $small) alone" tadoc compress -q --format 5 -j $J -o out/s.tadoc $small
	tadoc ls out/b.tadoc | head -3 | tr '\n' ' '; echo
fi

if step compact; then
echo "## compact after 10,000 appends to 10 files (against the full build above)"
cp out/a.tadoc out/c.tadoc
tadocfs out/c.tadoc mnt -o rw || echo "rw mount failed"
python3 - "$W/mnt" <<'EOF'
import os, sys
mnt = sys.argv[1]
files = []
for d, _, fs in os.walk(mnt):
    for f in sorted(fs):
        p = os.path.join(d, f)
        if os.path.isfile(p) and not os.path.islink(p):
            files.append(p)
    if len(files) >= 400:
        break
picked = files[::40][:10]
for p in picked:
    for k in range(1000):
        with open(p, "ab") as fh:
            fh.write(b"appended line %d of the scale benchmark\n" % k)
print("appended 1000 records to each of", len(picked), "files")
EOF
fusermount3 -u mnt 2>/dev/null || umount mnt
tadoc info out/c.tadoc 2>/dev/null | grep -i journal
T "tadoc compact (10 edited files)" tadoc compact -j $J out/c.tadoc
T "tadoc verify (compacted)" tadoc verify out/c.tadoc
fi
