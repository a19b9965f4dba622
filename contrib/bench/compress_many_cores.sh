#!/bin/bash
# compress_many_cores.sh: tadoc compress (format 5 at -j 1 and -j N, format 4) against
# mksquashfs -comp zstd, tar | zstd -19 -T0 and tar | xz -6 -T0 on one corpus, side by side,
# on a many-core machine (the GPU host: contrib/gpu/build-and-pack.sh carries the binaries).
#
#   contrib/bench/compress_many_cores.sh CORPUS.tar.xz
#
# Environment: CARRY (default /tmp/c: a copy of .carry/ with extra/bin holding mksquashfs, xz,
# zstd and GNU time as gtime, extra/lib their libraries), JOBS (default: every core).
# Results: contrib/bench/results/compress.md, section "Many cores".
set -u
C=${CARRY:-/tmp/c}; export LD_LIBRARY_PATH=$C/lib:$C/extra/lib; export PATH=$C/build:$C/extra/bin:$PATH
J=${JOBS:-$(nproc)}; src=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
T() { local name=$1; shift; local s=$(date +%s.%N); gtime -f "%M" -o /tmp/rss "$@" > /tmp/out.log 2>&1; local rc=$?; local e=$(date +%s.%N); printf '%-34s rc=%d wall=%.1fs peakRSS=%sKiB\n' "$name" $rc $(awk "BEGIN{print $e - $s}") "$(cat /tmp/rss)"; tail -2 /tmp/out.log | sed 's/^/    /'; }
cd /tmp; rm -rf sub w; mkdir -p sub w
s=$(date +%s); xz -dc -T0 "$src" | tar xf - -C sub; echo "untar $(( $(date +%s) - s ))s"
in=$(du -sb --apparent-size sub | cut -f1); echo "input bytes $in, files $(find sub -type f | wc -l)"
nproc; grep -m1 "model name" /proc/cpuinfo
export SOURCE_DATE_EPOCH=1700000000
T "tadoc -j$J (64M shards)" tadoc compress -q -j $J --format 5 -o w/a16.tadoc sub
T "tadoc -j$J --shard-size 32M" tadoc compress -q -j $J --shard-size 32M -o w/a16s.tadoc sub
T "tadoc --format 4 (one thread)" tadoc compress -q --format 4 -o w/a4.tadoc sub
T "tadoc -j1 (64M shards)" tadoc compress -q -j 1 --format 5 -o w/a1.tadoc sub
cmp w/a1.tadoc w/a16.tadoc && echo "-j1 == -j$J byte-identical"
T "mksquashfs -comp zstd ($J cores)" mksquashfs sub w/x.sqfs -comp zstd -processors $J -no-progress -quiet
T "tar | zstd -19 -T0" bash -c "tar cf - -C /tmp sub | zstd -19 -T0 -q > w/x.tar.zst"
T "tar | xz -6 -T0" bash -c "tar cf - -C /tmp sub | xz -6 -T0 > w/x.tar.xz"
T "tadoc verify (64M shards)" tadoc verify w/a16.tadoc
for f in w/*; do printf '%-20s %12d  ratio %.3f\n' $f $(stat -c %s $f) $(awk "BEGIN{print $in / $(stat -c %s $f)}"); done
tadoc info w/a16.tadoc | head -40
