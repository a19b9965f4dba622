#!/bin/bash
# batcher.sh: concurrent readers through the mount: tadocfs with the GPU and
# the batcher (shipped defaults: counts and reads of 32 KiB or more split
# between CPU and GPU once the mount's queue is deep), the same with reads
# of every size split (gpu_min_read_size=1: shows what sending the small
# reads the CPU has no room for to the GPU costs), tadocfs on the CPU only (the FUSE threads
# answer, and queued for the CPU workers with TADOCFS_BATCH_CPU=1: the
# hand-off's cost without a GPU), squashfuse on a `mksquashfs -comp zstd`
# image of the same files, and the no-op FUSE filesystem (noopfs) as the
# ceiling.
#
#   contrib/bench/batcher.sh CORPUS_DIR|ARCHIVE.tadoc [OUT.md]     (root)
#
# For 1, 16, 64 and 256 readers (threads of batch_load), each doing random
# 4 KiB reads, random 64 KiB reads (O_DIRECT: every read reaches the
# filesystem) or user.tadoc.count.WORD getxattrs: ops/s and p99 latency.
# Given an archive, its files are unpacked (tadoc unpack) for squashfs; an
# image ARCHIVE's-name.sqfs beside the archive (build-and-pack.sh makes one)
# or $BL_SQFS is used as it is, so only squashfuse is needed there.
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
# BL_GPU_OPTS (more -o options for the GPU mount, e.g. cpu_workers=8),
# BL_KINDS (columns, default "gpu gpu_split cpu cpuq squashfuse noop"),
# BL_SQFS (a squashfs image of the corpus to use as it is),
# BL_GPU_EMULATE=1 (no GPU needed: the GPU mounts use gpu=auto with
# TADOCFS_GPU_EMULATE=1, the CPU engine on the batcher thread standing in for
# the device: measures the hand-off, not a GPU),
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
GPU_OPTS=${BL_GPU_OPTS:-}
EMU=0
GPU_MODE=on
if [ "${BL_GPU_EMULATE:-0}" = 1 ]; then EMU=1; GPU_MODE=auto; fi
[ -n "$TADOC" ] && [ -n "$TADOCFS" ] || die "tadoc/tadocfs not found (ninja -C $BUILD, or set TADOC/TADOCFS)"
[ -n "$BATCH_LOAD" ] || die "batch_load not found (ninja -C $BUILD contrib/bench/batch_load)"
command -v fusermount3 >/dev/null || die "fusermount3 not found"
# tadocfs reads the depth of its request queue from fusectl (the GPU split):
# systemd mounts it; a bare machine may not have
if [ -d /sys/fs/fuse/connections ] && ! grep -q ' fusectl ' /proc/self/mounts; then
	mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null || echo "batcher: fusectl not mounted" >&2
fi

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
IMG=${BL_SQFS:-}
[ -z "$IMG" ] && [ ! -d "$SRC" ] && [ -s "${A%.tadoc}.sqfs" ] && IMG=${A%.tadoc}.sqfs
if [ -n "$IMG" ] && command -v squashfuse >/dev/null; then
	HAVE_SQ=1
elif command -v squashfuse >/dev/null && command -v mksquashfs >/dev/null; then
	IMG="$W/$NAME.sqfs"
	if [ ! -s "$IMG" ]; then
		log "$NAME: mksquashfs -comp zstd"
		mksquashfs "$DIR" "$IMG" -comp zstd -noappend -quiet -no-progress >/dev/null && HAVE_SQ=1
	else
		HAVE_SQ=1
	fi
fi
NOTES=()
[ "$HAVE_SQ" = 1 ] || NOTES+=("squashfuse: skipped (squashfuse, or mksquashfs and an image, not found here)")
[ -n "$NOOPFS" ] || NOTES+=("no-op FUSE: skipped (noopfs not built)")

# --- mounts ---
# mount_fs KIND MNT: 0 when mounted.
mount_fs() {
	local kind=$1 mnt=$2
	mkdir -p "$mnt"
	case $kind in gpu* | cpu*) cat "$A" >/dev/null ;; esac # same page-cache start for each
	case $kind in
	gpu) TADOCFS_GPU_EMULATE=$EMU "$TADOCFS" "$A" "$mnt" -o gpu=$GPU_MODE,gpu_min_reads="${GPU_MIN:-0}"${GPU_OPTS:+,$GPU_OPTS} 2>"$W/gpu.err" ;; # 0: default
	gpu_split) TADOCFS_GPU_EMULATE=$EMU "$TADOCFS" "$A" "$mnt" -o gpu=$GPU_MODE,gpu_min_reads=1,gpu_min_read_size=1${GPU_OPTS:+,$GPU_OPTS} 2>"$W/gpu.err" ;;
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

KINDS=()
for kind in ${BL_KINDS:-gpu gpu_split cpu cpuq squashfuse noop}; do
	case $kind in
	squashfuse) [ "$HAVE_SQ" = 1 ] && KINDS+=(squashfuse) ;;
	noop) [ -n "$NOOPFS" ] && KINDS+=(noop) ;;
	gpu | gpu_split | cpu | cpuq) KINDS+=("$kind") ;;
	*) die "unknown kind $kind in BL_KINDS" ;;
	esac
done
declare -A OPS=() P99=() P50=() STATS=()
list_of() { if [ "$1" = noop ]; then echo "$W/noop.list"; else echo "$W/files.list"; fi; }

# All mounts are live at once and every (op, readers) point runs on each of
# them in turn (BL_ROUNDS times, the median kept), so load that drifts
# during the run (a shared machine) hits every column alike.
LIVE=()
for kind in "${KINDS[@]}"; do
	mnt="$W/mnt/$kind"
	if ! mount_fs "$kind" "$mnt"; then
		if [ "$kind" = gpu ] || [ "$kind" = gpu_split ]; then
			NOTES+=("$kind: skipped ($(head -c 300 "$W/gpu.err" | tr '\n' ' '))")
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
		declare -A runs=() p99s=() p50s=()
		for ((round = 0; round < ROUNDS; round++)); do
			for kind in "${LIVE[@]}"; do
				case $mode in
				read4k) args=(-m read -s 4096) ;;
				read64k) args=(-m read -s 65536) ;;
				count)
					case $kind in gpu* | cpu*) ;; *) continue ;; esac
					args=(-m count -w "$W/words.list") ;;
				*) die "unknown mode $mode" ;;
				esac
				line=$("$BATCH_LOAD" -t "$t" -d "$SECS" "${args[@]}" -C "$W/mnt/$kind" "$(list_of "$kind")" 2>&1 | tail -n 1)
				log "$kind $mode $t: $line"
				runs[$kind]+=" $(printf '%s\n' "$line" | tr ' ' '\n' | awk -F= '$1 == "ops_per_s" { print $2 }')"
				p99s[$kind]+=" $(printf '%s\n' "$line" | tr ' ' '\n' | awk -F= '$1 == "p99_us" { print $2 }')"
				p50s[$kind]+=" $(printf '%s\n' "$line" | tr ' ' '\n' | awk -F= '$1 == "p50_us" { print $2 }')"
			done
		done
		for kind in "${!runs[@]}"; do
			# shellcheck disable=SC2086
			OPS[$kind,$mode,$t]=$(median ${runs[$kind]})
			# shellcheck disable=SC2086
			P99[$kind,$mode,$t]=$(median ${p99s[$kind]})
			# shellcheck disable=SC2086
			P50[$kind,$mode,$t]=$(median ${p50s[$kind]})
		done
		unset runs p99s p50s
	done
done
for kind in "${LIVE[@]}"; do
	case $kind in
	gpu* | cpu*)
		# python3 where getfattr is missing (a bare GPU machine has no attr package)
		STATS[$kind]=$( { getfattr --only-values -n user.tadoc.stats "$W/mnt/$kind" 2>/dev/null ||
			python3 -c 'import os, sys; sys.stdout.write(os.getxattr(sys.argv[1], "user.tadoc.stats").decode())' \
				"$W/mnt/$kind" 2>/dev/null; } | tr '\n' ' ') ;;
	esac
	umount_fs "$W/mnt/$kind"
done

# --- report ---
cell() { # KIND MODE T -> "ops/s / p99 us" or "-"
	local o=${OPS[$1,$2,$3]:-} p=${P99[$1,$2,$3]:-}
	[ -n "$o" ] && printf '%s / %s' "$o" "$p" || printf -- '-'
}
ratio() { local r; r=$(div "$1" "$2"); [ "$r" = "-" ] && printf -- '-' || printf '%sx' "$r"; }
{
	echo "## Batcher benchmark: $NAME ($NFILES files, $ORIG bytes)"
	echo
	echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); machine: $(machine_description)"
	if command -v nvidia-smi >/dev/null 2>&1; then
		echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -n 1)"
	fi
	echo "- commit: ${BENCH_COMMIT:-$(git -C "$REPO_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)}; load average before: $(load_average)"
	echo "- each cell: ops/s / p99 latency in us, median of $ROUNDS run(s) of ${SECS} s, batch_load (O_DIRECT reads: no page cache); all mounts live at once, each point measured on every mount in turn"
	echo "- GPU+batcher: -o gpu=on${GPU_OPTS:+,$GPU_OPTS} (read crossover ${GPU_MIN:-default}: -o gpu_min_reads; count crossover: the default); GPU, reads split: the same with gpu_min_reads=1,gpu_min_read_size=1 (reads of every size the CPU has no room for go to the GPU too, not only those of 32 KiB or more); CPU-only: -o gpu=off (the FUSE threads answer every request); CPU, queued: -o gpu=off with TADOCFS_BATCH_CPU=1 (queued for the cpu_workers whenever another request is in flight: the hand-off without a GPU)"
	[ "$EMU" = 1 ] && echo "- GPU EMULATED (BL_GPU_EMULATE=1): the GPU columns ran the CPU engine on the batcher thread; they measure the hand-off, not a GPU"
	for n in "${NOTES[@]}"; do echo "- note: $n"; done
	echo
	echo "| op | readers | GPU+batcher | GPU, reads split | CPU-only | CPU, queued | squashfuse | no-op FUSE | GPU vs CPU-only | GPU % of no-op | CPU % of no-op |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for mode in $MODES; do
		for t in $THREADS; do
			echo "| $mode | $t | $(cell gpu "$mode" "$t") | $(cell gpu_split "$mode" "$t") | $(cell cpu "$mode" "$t") | $(cell cpuq "$mode" "$t") | $(cell squashfuse "$mode" "$t") | $(cell noop "$mode" "$t") | $(ratio "${OPS[gpu,$mode,$t]:-}" "${OPS[cpu,$mode,$t]:-}") | $(pct "${OPS[gpu,$mode,$t]:-}" "${OPS[noop,$mode,$t]:-}") | $(pct "${OPS[cpu,$mode,$t]:-}" "${OPS[noop,$mode,$t]:-}") |"
		done
	done
	echo
	echo "Goals (issue 6): at >= 64 readers GPU+batcher beats CPU-only and reaches >= 70% of the no-op ceiling; one reader's latency unchanged (here: median within 1.2x of CPU-only)."
	echo
	echo "| op | readers | GPU+batcher / CPU-only | beats CPU-only | GPU+batcher / no-op | >= 70% of no-op |"
	echo "|---|---:|---:|---|---:|---|"
	for mode in $MODES; do
		for t in $THREADS; do
			[ "$t" -ge 64 ] || continue
			r=$(div "${OPS[gpu,$mode,$t]:-}" "${OPS[cpu,$mode,$t]:-}" 3)
			q=$(div "${OPS[gpu,$mode,$t]:-}" "${OPS[noop,$mode,$t]:-}" 3)
			if [ "$mode" = count ]; then
				echo "| $mode | $t | $r | $(goal "$r" ">" 1.0) | - | - (no-op has no counts) |"
			else
				echo "| $mode | $t | $r | $(goal "$r" ">" 1.0) | $q | $(goal "$q" ">=" 0.7) |"
			fi
		done
	done
	echo
	echo "| op | 1 reader: GPU+batcher p50 / p99 us | CPU-only p50 / p99 us | p50 ratio | unchanged (<= 1.2x) |"
	echo "|---|---:|---:|---:|---|"
	for mode in $MODES; do
		case " $THREADS " in *" 1 "*) ;; *) continue ;; esac
		r=$(div "${P50[gpu,$mode,1]:-}" "${P50[cpu,$mode,1]:-}" 3)
		echo "| $mode | ${P50[gpu,$mode,1]:--} / ${P99[gpu,$mode,1]:--} | ${P50[cpu,$mode,1]:--} / ${P99[cpu,$mode,1]:--} | $r | $(goal "$r" "<=" 1.2) |"
	done
	echo
	echo "user.tadoc.stats at the end of each tadocfs run:"
	echo
	for kind in gpu gpu_split cpu cpuq; do
		[ -n "${STATS[$kind]:-}" ] && echo "- $kind: \`${STATS[$kind]}\`"
	done
} | tee "$OUT"
log "results in $OUT"
