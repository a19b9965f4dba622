#!/bin/bash
# batcher.sh: concurrent readers through the mount: tadocfs with the GPU and
# the batcher, tadocfs on the CPU only (the FUSE threads answer, and queued
# for the CPU workers with TADOCFS_BATCH_CPU=1),
# squashfuse on a `mksquashfs -comp zstd` image of the same files, and the
# no-op FUSE filesystem (noopfs) as the ceiling.
#
#   contrib/bench/batcher.sh CORPUS_DIR|ARCHIVE.tadoc [OUT.md]     (root)
#
# For 1, 16, 64 and 256 readers (threads of batch_load), each doing random
# 4 KiB reads, random 64 KiB reads (O_DIRECT: every read reaches the
# filesystem) or user.tadoc.count.WORD getxattrs: ops/s and p99 latency.
# Given an archive, its files are unpacked (tadoc unpack) for squashfs.
# Columns that cannot run are skipped with a note: GPU (tadocfs -o gpu=on
# does not mount: no GPU or no CUDA build), squashfuse (squashfuse or
# mksquashfs missing, e.g. on a bare GPU machine); counts exist on tadocfs
# only. Writes the markdown table to OUT.md (default
# $BENCH_WORK/batcher.md) and stdout.
#
# Environment: BL_SECS (seconds per run, default 5), BL_WARM (seconds of
# unrecorded 16-reader warm-up per mount, default 2), BL_ROUNDS (runs per
# point, median kept, default 1), BL_THREADS (default
# "1 16 64 256"), BL_MODES (default "read4k read64k count"),
# BL_GPU_MIN_BATCH (read crossover of the GPU mount; default: the daemon's),
# BUILD, BENCH_WORK,
# TADOC, TADOCFS, NOOPFS, BATCH_LOAD (program paths; else $BUILD, else PATH).
set -u
. "$(dirname "$0")/bench_lib.sh"

[ $# -ge 1 ] || { echo "usage: $0 CORPUS_DIR|ARCHIVE.tadoc [OUT.md]" >&2; exit 2; }
SRC=$1
bench_setup_bins
BATCH_LOAD=${BATCH_LOAD:-$(bench_bin batch_load contrib/bench || true)}
bench_setup_work
OUT=${2:-$BENCH_WORK/batcher.md}
SECS=${BL_SECS:-5}
WARM=${BL_WARM:-2}
ROUNDS=${BL_ROUNDS:-1}
# The GPU mount's read crossover: the daemon's default (10000: reads stay
# on the CPU, counts go to the GPU) unless BL_GPU_MIN_BATCH sets one (e.g.
# 32 to send reads to the GPU too).
GPU_MIN=${BL_GPU_MIN_BATCH:-}
THREADS=${BL_THREADS:-1 16 64 256}
MODES=${BL_MODES:-read4k read64k count}
[ -n "$TADOC" ] && [ -n "$TADOCFS" ] || die "tadoc/tadocfs not found (ninja -C $BUILD, or set TADOC/TADOCFS)"
[ -n "$BATCH_LOAD" ] || die "batch_load not found (ninja -C $BUILD contrib/bench/batch_load)"
command -v fusermount3 >/dev/null || die "fusermount3 not found"

MOUNTED=()
cleanup() {
	local m
	for m in "${MOUNTED[@]}"; do
		if mountpoint -q "$m"; then fusermount3 -u "$m" 2>/dev/null || umount -l "$m"; fi
	done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the corpus, the archive, the image ---
W=$BENCH_WORK
mkdir -p "$W/mnt"
if [ -d "$SRC" ]; then
	DIR=$(cd "$SRC" && pwd)
	NAME=$(basename "$DIR")
	A="$W/$NAME.tadoc"
	if [ ! -s "$A" ]; then
		log "$NAME: tadoc compress"
		"$TADOC" compress -o "$A" "$DIR" >/dev/null || die "tadoc compress failed"
	fi
else
	A=$(cd "$(dirname "$SRC")" && pwd)/$(basename "$SRC")
	NAME=$(basename "$A" .tadoc)
	DIR="$W/$NAME.files"
	if [ ! -d "$DIR" ]; then
		log "$NAME: tadoc unpack"
		"$TADOC" unpack "$A" "$DIR" >/dev/null || die "tadoc unpack failed"
	fi
fi
(cd "$DIR" && find . -type f -size +0 -printf '%P\n' | sort) >"$W/files.list"
NFILES=$(wc -l <"$W/files.list")
[ "$NFILES" -gt 0 ] || die "$DIR: no non-empty files"
ORIG=$(file_bytes "$DIR")
NOOP_SIZE=$(( (ORIG + NFILES - 1) / NFILES ))
[ "$NOOP_SIZE" -lt 65536 ] && NOOP_SIZE=65536 # room for a whole 64 KiB read
seq -f 'f%06g' 0 $((NFILES - 1)) >"$W/noop.list"
# 200 frequent words (letters only, so every one is a valid xattr name)
cat "$W/files.list" | (cd "$DIR" && xargs -d '\n' cat) | tr -cs 'A-Za-z' '\n' |
	awk 'length($0) > 1 && length($0) < 40' | sort | uniq -c | sort -rn | head -200 | awk '{ print $2 }' >"$W/words.list"

HAVE_SQ=0
if command -v squashfuse >/dev/null && command -v mksquashfs >/dev/null; then
	IMG="$W/$NAME.sqfs"
	if [ ! -s "$IMG" ]; then
		log "$NAME: mksquashfs -comp zstd"
		mksquashfs "$DIR" "$IMG" -comp zstd -noappend -quiet -no-progress >/dev/null && HAVE_SQ=1
	else
		HAVE_SQ=1
	fi
fi
NOTES=()
[ "$HAVE_SQ" = 1 ] || NOTES+=("squashfuse: skipped (squashfuse or mksquashfs not installed here)")
[ -n "$NOOPFS" ] || NOTES+=("no-op FUSE: skipped (noopfs not built)")

# --- mounts ---
# mount_fs KIND MNT: 0 when mounted.
mount_fs() {
	local kind=$1 mnt=$2
	mkdir -p "$mnt"
	case $kind in gpu | cpu | cpuq) cat "$A" >/dev/null ;; esac # same page-cache start for each
	case $kind in
	gpu) "$TADOCFS" "$A" "$mnt" -o gpu=on,gpu_min_reads="${GPU_MIN:-0}" 2>"$W/gpu.err" ;; # 0: default
	cpu) "$TADOCFS" "$A" "$mnt" -o gpu=off ;;
	cpuq) TADOCFS_BATCH_CPU=1 "$TADOCFS" "$A" "$mnt" -o gpu=off ;;
	squashfuse) squashfuse "$IMG" "$mnt" ;;
	noop) "$NOOPFS" -o "files=$NFILES,size=$NOOP_SIZE" "$mnt" ;;
	esac || return 1
	MOUNTED+=("$mnt")
	mountpoint -q "$mnt"
}

umount_fs() {
	local i
	for i in 1 2 3 4 5; do
		mountpoint -q "$1" || return 0
		fusermount3 -u "$1" 2>/dev/null && return 0
		sleep 0.2
	done
	umount -l "$1"
}

KINDS=(gpu cpu cpuq)
[ "$HAVE_SQ" = 1 ] && KINDS+=(squashfuse)
[ -n "$NOOPFS" ] && KINDS+=(noop)
declare -A OPS=() P99=() STATS=()
list_of() { if [ "$1" = noop ]; then echo "$W/noop.list"; else echo "$W/files.list"; fi; }

# All mounts are live at once and every (op, readers) point runs on each of
# them in turn (BL_ROUNDS times, the median kept), so load that drifts
# during the run (a shared machine) hits every column alike.
LIVE=()
for kind in "${KINDS[@]}"; do
	mnt="$W/mnt/$kind"
	if ! mount_fs "$kind" "$mnt"; then
		if [ "$kind" = gpu ]; then
			NOTES+=("GPU+batcher: skipped ($(head -c 300 "$W/gpu.err" | tr '\n' ' '))")
		else
			NOTES+=("$kind: mount failed")
		fi
		continue
	fi
	LIVE+=("$kind")
	# warm-up (not recorded): archive pages, rule cache, daemon threads
	"$BATCH_LOAD" -t 16 -d "$WARM" -m read -s 65536 -C "$mnt" "$(list_of "$kind")" >/dev/null 2>&1
done
for mode in $MODES; do
	for t in $THREADS; do
		declare -A runs=() p99s=()
		for ((round = 0; round < ROUNDS; round++)); do
			for kind in "${LIVE[@]}"; do
				case $mode in
				read4k) args=(-m read -s 4096) ;;
				read64k) args=(-m read -s 65536) ;;
				count)
					case $kind in gpu | cpu | cpuq) ;; *) continue ;; esac
					args=(-m count -w "$W/words.list") ;;
				*) die "unknown mode $mode" ;;
				esac
				line=$("$BATCH_LOAD" -t "$t" -d "$SECS" "${args[@]}" -C "$W/mnt/$kind" "$(list_of "$kind")" 2>&1 | tail -n 1)
				log "$kind $mode $t: $line"
				runs[$kind]+=" $(printf '%s\n' "$line" | tr ' ' '\n' | awk -F= '$1 == "ops_per_s" { print $2 }')"
				p99s[$kind]+=" $(printf '%s\n' "$line" | tr ' ' '\n' | awk -F= '$1 == "p99_us" { print $2 }')"
			done
		done
		for kind in "${!runs[@]}"; do
			# shellcheck disable=SC2086
			OPS[$kind,$mode,$t]=$(median ${runs[$kind]})
			# shellcheck disable=SC2086
			P99[$kind,$mode,$t]=$(median ${p99s[$kind]})
		done
		unset runs p99s
	done
done
for kind in "${LIVE[@]}"; do
	case $kind in
	gpu | cpu | cpuq)
		STATS[$kind]=$(getfattr --only-values -n user.tadoc.stats "$W/mnt/$kind" 2>/dev/null | tr '\n' ' ') ;;
	esac
	umount_fs "$W/mnt/$kind"
done

# --- report ---
cell() { # KIND MODE T -> "ops/s (p99 us)" or "-"
	local o=${OPS[$1,$2,$3]:-} p=${P99[$1,$2,$3]:-}
	[ -n "$o" ] && printf '%s / %s' "$o" "$p" || printf -- '-'
}
{
	echo "## Batcher benchmark: $NAME ($NFILES files, $ORIG bytes)"
	echo
	echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); machine: $(machine_description)"
	if command -v nvidia-smi >/dev/null 2>&1; then
		echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -n 1)"
	fi
	echo "- commit: ${BENCH_COMMIT:-$(git -C "$REPO_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)}; load average before: $(load_average)"
	echo "- each cell: ops/s / p99 latency in us, median of $ROUNDS run(s) of ${SECS} s, batch_load (O_DIRECT reads: no page cache); all mounts live at once, each point measured on every mount in turn"
	echo "- GPU+batcher: -o gpu=on (read crossover ${GPU_MIN:-default}: -o gpu_min_reads; count crossover: the default); CPU-only: -o gpu=off (the FUSE threads answer every request); CPU, queued: -o gpu=off with TADOCFS_BATCH_CPU=1 (queued for the cpu_workers whenever another request is in flight)"
	for n in "${NOTES[@]}"; do echo "- note: $n"; done
	echo
	echo "| op | readers | GPU+batcher | CPU-only | CPU, queued | squashfuse | no-op FUSE | GPU vs CPU-only | GPU % of no-op | CPU % of no-op |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for mode in $MODES; do
		for t in $THREADS; do
			echo "| $mode | $t | $(cell gpu "$mode" "$t") | $(cell cpu "$mode" "$t") | $(cell cpuq "$mode" "$t") | $(cell squashfuse "$mode" "$t") | $(cell noop "$mode" "$t") | $(div "${OPS[gpu,$mode,$t]:-}" "${OPS[cpu,$mode,$t]:-}")x | $(pct "${OPS[gpu,$mode,$t]:-}" "${OPS[noop,$mode,$t]:-}") | $(pct "${OPS[cpu,$mode,$t]:-}" "${OPS[noop,$mode,$t]:-}") |"
		done
	done
	echo
	echo "Goals (issue 6): at >= 64 readers GPU+batcher beats CPU-only and reaches >= 70% of the no-op ceiling; one reader's latency unchanged."
	echo
	echo "| op | readers | GPU+batcher > CPU-only | GPU+batcher >= 70% of no-op |"
	echo "|---|---:|---|---|"
	for mode in read4k read64k; do
		case " $MODES " in *" $mode "*) ;; *) continue ;; esac
		for t in $THREADS; do
			[ "$t" -ge 64 ] || continue
			r=$(div "${OPS[gpu,$mode,$t]:-}" "${OPS[cpu,$mode,$t]:-}" 3)
			q=$(div "${OPS[gpu,$mode,$t]:-}" "${OPS[noop,$mode,$t]:-}" 3)
			echo "| $mode | $t | $(goal "$r" ">=" 1.0) | $(goal "$q" ">=" 0.7) |"
		done
	done
	echo
	echo "user.tadoc.stats at the end of each tadocfs run:"
	echo
	for kind in gpu cpu cpuq; do
		[ -n "${STATS[$kind]:-}" ] && echo "- $kind: \`${STATS[$kind]}\`"
	done
} | tee "$OUT"
log "results in $OUT"
