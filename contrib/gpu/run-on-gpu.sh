#!/bin/sh
# run-on-gpu.sh: on a GPU machine with nothing installed, run the GPU tests
# and the GPU benchmark from what build-and-pack.sh put in .carry/, and write
# the logs and result tables under $OUT (default ./gpu-results).
#
#   contrib/gpu/run-on-gpu.sh [all|tests|sanitize|bench|multi|batcher|tree]...   (default: all)
#
#   tests     gpu_batch on the adversarial archive (built there) and on every
#             packed corpus archive: GPU == CPU for batch sizes 1..100k;
#             gpu_index: archives whose indexes the GPU built == CPU-built,
#             byte for byte (adversarial corpus, and the two smallest packed
#             archives unpacked and recompressed); gpu_edit: insert/append batches
#             in sequence, in batch and mixed, GPU == CPU == a byte model
#             ($TD_TEST_ARCHIVES="mobydick sotu" picks some: the CPU reference
#             of 10k-100k searches over gcide's one 40 MB file takes minutes)
#             (the adversarial archive also as format 5 with 1 MiB shards:
#             every device, device 0 alone, partial residency, CPU fallback)
#   sanitize  compute-sanitizer memcheck and racecheck on small batches
#   multi     gpu_bench -m on every packed archive ($TD_MULTI_ARCHIVES picks
#             some): 100k counts, searches and 64-byte reads on 1, 2, 4 ...
#             devices, each checked equal to the CPU engine -> $OUT/multi-gpu.md
#   analytics gpu_fuzzy_bench on the packed archives ($TD_AN_ARCHIVES picks
#             some): ranked files over small directories and over the corpus,
#             the top 20 words and the term vector of random files and small
#             directories (and fuzzy search with TD_AN_FUZZY=1), batches of 1..100k
#             against the CPU engine on 1 and all threads, answers compared
#             -> $OUT/analytics.md; and `tadoc files -f` of 10k corpus words
#             over the corpus and over its largest directory that the
#             query index does not take, as whole processes, --gpu on
#             against --gpu off (time, output md5)
#   bench     gpu_bench on every packed archive -> $OUT/gpu_bench.md
#             ($TD_BENCH_ARCHIVES="sotu spam" picks some, $TD_BENCH_T sets
#             the seconds per cell)
#
#   batcher   contrib/bench/batcher.sh through the mount -> $OUT/batcher.md
#             (GPU+batcher, GPU with reads on the CPU, CPU-only, CPU queued,
#             squashfuse, no-op; 1/16/64/256 readers; 4 KiB, 64 KiB, counts;
#             about 4 minutes with BL_SECS=3)
#   tree      contrib/bench/tree_read.sh: whole-tree cold tar of tadocfs,
#             tadocfs -o store_ahead=off, squashfuse and the no-op on every
#             packed archive with a squashfs image -> $OUT/tree.md
#
# Files under $OUT: device.txt, tests.log, sanitize.log, gpu_bench.md,
# bench.log, batcher.md, batcher.log, tree.md, tree.log. Exit status: 0 when every step passed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# works from contrib/gpu/ (checkout) and from .carry/ (a copy of the script)
if [ -d "$here/build" ] && [ -d "$here/lib" ]; then carry=$here; else carry=$(cd "$here/../.." && pwd)/.carry; fi
[ -x "$carry/build/gpu_batch" ] || { echo "run-on-gpu: $carry/build/gpu_batch missing: run contrib/gpu/build-and-pack.sh first" >&2; exit 2; }
out=${OUT:-$PWD/gpu-results}
mkdir -p "$out"
export LD_LIBRARY_PATH="$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$carry/build:$carry/bin:$PATH"
[ -s "$carry/COMMIT" ] && export BENCH_COMMIT="$(cat "$carry/COMMIT")"
archives=$(ls "$carry"/archives/*.tadoc 2>/dev/null | tr '\n' ' ')
small=$(ls -S "$carry"/archives/*.tadoc 2>/dev/null | tail -1)
steps=${*:-all}
rc=0

{
	date -u '+%Y-%m-%d %H:%M:%S UTC'
	nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi failed"
	echo "CPU cores: $(nproc)"
	echo "archives: $archives"
} > "$out/device.txt"
cat "$out/device.txt"

# pick NAMES: the packed archives named (without .tadoc), or all when empty
pick() {
	if [ -z "$1" ]; then echo "$archives"; return; fi
	for n in $1; do printf '%s ' "$carry/archives/$n.tadoc"; done
}

has() { case " $steps " in *" $1 "* | *" all "*) return 0 ;; esac; return 1; }

if has tests; then
	{
		echo "== gpu_batch: adversarial archive"
		gpu_batch || rc=1
		echo "== gpu_batch: adversarial archive as format 5 (1 MiB shards): every device, device 0, partial residency"
		TD_GPU_SHARDED=1 gpu_batch || rc=1
		for a in $(pick "${TD_TEST_ARCHIVES:-}"); do
			echo "== gpu_batch: $a"
			gpu_batch "$a" || rc=1
		done
		echo "== gpu_edit: insert/append batches, sizes 1..100k"
		gpu_edit || rc=1
		tmp=$(mktemp -d)
		dirs=
		for a in $(ls -Sr "$carry"/archives/*.tadoc 2>/dev/null | head -n 2); do # the two smallest
			d="$tmp/$(basename "$a" .tadoc)"
			tadoc unpack "$a" "$d" >/dev/null 2>&1 && dirs="$dirs $d"
		done
		echo "== gpu_index: adversarial corpus and$dirs"
		gpu_index $dirs || rc=1
		echo "== gpu_digram: digram counts == a plain CPU count"
		[ -x "$(command -v gpu_digram)" ] && { gpu_digram || rc=1; }
		rm -rf "$tmp"
	} > "$out/tests.log" 2>&1
	tail -n 40 "$out/tests.log"
fi

if has sanitize; then
	if command -v compute-sanitizer >/dev/null 2>&1; then
		{
			for tool in memcheck racecheck; do
				echo "== compute-sanitizer --tool $tool (batches up to 100) on ${small:-the adversarial archive}"
				TD_GPU_MAXBATCH=100 compute-sanitizer --tool "$tool" --error-exitcode 3 gpu_batch $small || rc=1
				echo "== compute-sanitizer --tool $tool: gpu_edit (batches up to 100), gpu_index (adversarial corpus)"
				TD_GPU_MAXBATCH=100 compute-sanitizer --tool "$tool" --error-exitcode 3 gpu_edit || rc=1
				compute-sanitizer --tool "$tool" --error-exitcode 3 gpu_index || rc=1
			done
		} > "$out/sanitize.log" 2>&1
	else
		echo "compute-sanitizer not found" > "$out/sanitize.log"
		rc=1
	fi
	tail -n 20 "$out/sanitize.log"
fi

if has bench; then
	if [ -n "$archives" ]; then
		# TD_BENCH_T: seconds per cell (default 0.5); TD_BENCH_ARCHIVES: a
		# subset of the packed archives (names without .tadoc), so a run
		# fits the device tool's 10-minute limit
		sel=$(pick "${TD_BENCH_ARCHIVES:-}")
		gpu_bench -t "${TD_BENCH_T:-0.5}" -o "$out/gpu_bench.md" $sel > "$out/bench.log" 2>&1 || rc=1
		cat "$out/gpu_bench.md"
	else
		echo "no archives packed: nothing to benchmark" | tee "$out/bench.log"
	fi
fi
if has analytics; then
	sel=$(pick "${TD_AN_ARCHIVES:-}")
	t=${TD_BENCH_T:-0.2}
	{
		kinds="files_dirs files_root top_files vector_files top_dirs vector_dirs"
		[ "${TD_AN_FUZZY:-0}" = 1 ] && kinds="$kinds fuzzy"
		for kind in $kinds; do
			case $kind in
			files_dirs) how="files -s dirs" ;; files_root) how="files -s root" ;;
			top_files) how="top -s files" ;; vector_files) how="vector -s files" ;;
			top_dirs) how="top -s dirs" ;; vector_dirs) how="vector -s dirs" ;; *) how=fuzzy ;;
			esac
			gpu_fuzzy_bench -a $how -t "$t" -o "$out/an.tmp" $sel || rc=1
			cat "$out/an.tmp" >> "$out/analytics.md"
		done
		rm -f "$out/an.tmp"
		command -v tadoc >/dev/null && tadoc --help >/dev/null 2>&1 || { echo "tadoc not packed: whole processes skipped"; sel=; }
		for a in $sel; do
			words=$(mktemp)
			tadoc vector "$a" . | cut -f2 | awk 'length($0) < 256' | shuf -n 10000 --random-source=/dev/zero -r > "$words"
			for p in "" "${TD_AN_DIR:-}"; do
				for gpu in on off; do
					s0=$(date +%s.%N)
					h=$(tadoc files --gpu $gpu -f "$words" "$a" $p | md5sum | cut -c1-12)
					s1=$(date +%s.%N)
					echo "whole process: tadoc files --gpu $gpu -f (10k words) $(basename "$a") ${p:-(corpus)}: $(awk "BEGIN { print $s1 - $s0 }") s, md5 $h"
				done
				[ -n "${TD_AN_DIR:-}" ] || break
			done
			rm -f "$words"
		done
	} > "$out/analytics.log" 2>&1
	cat "$out/analytics.md"; grep "whole process" "$out/analytics.log"
fi
if has multi; then
	sel=$(pick "${TD_MULTI_ARCHIVES:-}")
	gpu_bench -m -t "${TD_BENCH_T:-0.5}" -o "$out/multi-gpu.md" $sel > "$out/multi.log" 2>&1 || rc=1
	cat "$out/multi-gpu.md"
fi
if has batcher; then
	# The batcher through the mount (contrib/bench/batcher.sh) on one archive
	# ($TD_BATCHER_ARCHIVE, default sotu), with the daemon's defaults (the
	# hybrid split; BL_GPU_MIN_BATCH, BL_GPU_OPTS change the GPU mount).
	# gpu_bench's batch crossover is not used: it compares the GPU with CPU
	# threads that have nothing else to do, which the daemon's are not.
	# squashfuse and the image come from .carry/ (build-and-pack.sh).
	a="$carry/archives/${TD_BATCHER_ARCHIVE:-sotu}.tadoc"
	BL_SECS=${BL_SECS:-3} bash "$carry/bench/batcher.sh" "$a" "$out/batcher.md" > "$out/batcher.log" 2>&1 || rc=1
	tail -n 40 "$out/batcher.md" 2>/dev/null || tail -n 20 "$out/batcher.log"
fi
if has tree; then
	sq=$(for a in $archives; do [ -f "${a%.tadoc}.sqfs" ] && printf '%s ' "$a"; done)
	TR_OPT=${TR_OPT-store_ahead=off} bash "$carry/bench/tree_read.sh" "$out/tree.md" $sq > "$out/tree.log" 2>&1 || rc=1
	cat "$out/tree.md" 2>/dev/null || tail -n 20 "$out/tree.log"
fi
# the files name paths relative to the carry folder and the temporary one,
# not this machine's absolute paths
for f in "$out"/*.log "$out"/*.md "$out"/*.txt; do
	[ -f "$f" ] && sed -i "s|$carry/|.carry/|g; s|/tmp/tmp\.[A-Za-z0-9]*/|TMPDIR/|g" "$f"
done
echo "run-on-gpu: status $rc; results in $out"
exit $rc
