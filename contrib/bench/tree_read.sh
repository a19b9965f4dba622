#!/usr/bin/env bash
# tree_read.sh: whole-tree cold `tar` of tadocfs against squashfuse and the
# no-op FUSE ceiling, interleaved, for hosts without mksquashfs or
# hyperfine (the GPU machine: contrib/gpu/run-on-gpu.sh tree). mount.sh
# measures the same thing, and more, where those tools exist.
#
# Usage: contrib/bench/tree_read.sh OUT.md ARCHIVE.tadoc...   (run as root)
#   Each ARCHIVE.tadoc needs its image ARCHIVE.sqfs beside it (mksquashfs
#   -comp zstd of the same tree). Env: TR_ROUNDS (11) rounds, each one cold
#   run of every filesystem in turn; TR_OPT (e.g. store_ahead=off) adds a
#   second tadocfs mount with those -o options as a column; TR_ALT=DIR adds
#   a tadocfs mount of DIR/NAME.tadoc (the same tree in another archive,
#   e.g. format 5 beside format 4) as a column named TR_ALT_NAME.
# Cold = every cache dropped, then tar and cat loaded again (untimed), as in
# mount.sh. The no-op filesystem serves as many files of the tree's mean
# size (from `tadoc info`) with tadocfs's 8 MiB readahead window; tadocfs
# runs with its defaults (gpu=off: the CPU path), squashfuse as shipped.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/bench_lib.sh"
[ $# -ge 2 ] || die "usage: tree_read.sh OUT.md ARCHIVE.tadoc..."
[ "$(id -u)" = 0 ] || die "tree_read.sh needs root (mount, drop_caches)"
out=$1
shift
for t in tadoc tadocfs squashfuse noopfs fusermount3 tar python3; do
	command -v "$t" >/dev/null 2>&1 || die "$t not found in PATH"
done
rounds=${TR_ROUNDS:-11}
opt=${TR_OPT:-}
alt=${TR_ALT:-}
altname=${TR_ALT_NAME:-$alt}
work=$(mktemp -d "${TMPDIR:-/tmp}/tree_read.XXXXXX")
trap 'for m in "$work"/*/*; do mountpoint -q "$m" && fusermount3 -u "$m"; done; rm -rf "$work"' EXIT

# cold_ms DIR: tar_cold in milliseconds.
cold_ms() { awk -v s="$(tar_cold "$1")" 'BEGIN { printf "%.2f", s * 1000 }'; }

# stat_reads MNT: the READs tadocfs answered (user.tadoc.stats).
stat_reads() {
	python3 -c 'import os, re, sys; print(re.search(rb"(?m)^reads=(\d+)$", os.getxattr(sys.argv[1], "user.tadoc.stats")).group(1).decode())' "$1"
}

kinds="tadocfs squashfuse noop${opt:+ opt}${alt:+ alt}"
{
	echo "### Whole-tree cold \`tar cf - . | cat > /dev/null\`, interleaved (ms, median of $rounds rounds; $(nproc) cores; $(date -u '+%Y-%m-%d %H:%M UTC'))"
	echo
	printf '| corpus | MB | tadocfs |%s%s squashfuse | no-op FUSE | tadocfs / squashfuse |%s%s no-op / squashfuse | READs a tar (tadocfs) |\n' \
		"${opt:+ tadocfs -o $opt |}" "${alt:+ tadocfs, $altname |}" "${opt:+ -o $opt / squashfuse |}" \
		"${alt:+ $altname / squashfuse | $altname / tadocfs (time) |}"
	printf '|---|---:|---:|%s%s---:|---:|---:|%s%s---:|---:|\n' "${opt:+---:|}" "${alt:+---:|}" "${opt:+---:|}" "${alt:+---:|---:|}"
} >"$out"
for a in "$@"; do
	name=$(basename "$a" .tadoc)
	img="${a%.tadoc}.sqfs"
	[ -f "$img" ] || { log "$name: no $img: skipped"; continue; }
	files=$(tadoc info "$a" | awk '$1 == "files" { print $2 }')
	bytes=$(tadoc info "$a" | awk '$1 == "original" { print $3 }')
	mkdir -p "$work/$name/tadocfs" "$work/$name/squashfuse" "$work/$name/noop" "$work/$name/opt" "$work/$name/alt"
	tadocfs "$a" "$work/$name/tadocfs" -o gpu=off || die "$name: tadocfs failed"
	[ -n "$opt" ] && { tadocfs "$a" "$work/$name/opt" -o "gpu=off,$opt" || die "$name: tadocfs -o $opt failed"; }
	[ -n "$alt" ] && { tadocfs "$alt/$name.tadoc" "$work/$name/alt" -o gpu=off || die "$name: tadocfs of $alt/$name.tadoc failed"; }
	squashfuse "$img" "$work/$name/squashfuse" || die "$name: squashfuse failed"
	noopfs -o "files=$files,size=$((bytes / files))" "$work/$name/noop" || die "$name: noopfs failed"
	dev=$(awk -v m="$work/$name/noop" '$5 == m { print $3 }' /proc/self/mountinfo)
	echo 8192 >"/sys/class/bdi/$dev/read_ahead_kb"
	# tadocfs's rule cache warms at mount: let it, then read once so the
	# first round is not the one that fills it
	sleep 1
	for k in tadocfs opt alt; do [ -d "$work/$name/$k" ] && mountpoint -q "$work/$name/$k" && (cd "$work/$name/$k" && tar cf - . | cat >/dev/null); done
	reads0=$(stat_reads "$work/$name/tadocfs")
	declare -A ms=()
	for r in $(seq "$rounds"); do
		for k in $kinds; do
			ms[$k]+=" $(cold_ms "$work/$name/$k")"
		done
		log "$name: round $r of $rounds"
	done
	reads1=$(stat_reads "$work/$name/tadocfs")
	declare -A med=()
	for k in $kinds; do med[$k]=$(median ${ms[$k]}); done
	row="| $name | $(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1e6 }') | ${med[tadocfs]} |"
	[ -n "$opt" ] && row+=" ${med[opt]} |"
	[ -n "$alt" ] && row+=" ${med[alt]} |"
	row+=" ${med[squashfuse]} | ${med[noop]} | $(div "${med[squashfuse]}" "${med[tadocfs]}")x |"
	[ -n "$opt" ] && row+=" $(div "${med[squashfuse]}" "${med[opt]}")x |"
	[ -n "$alt" ] && row+=" $(div "${med[squashfuse]}" "${med[alt]}")x | $(div "${med[alt]}" "${med[tadocfs]}")x |"
	row+=" $(div "${med[squashfuse]}" "${med[noop]}")x | $(( (reads1 - reads0) / rounds )) |"
	echo "$row" >>"$out"
	for k in tadocfs opt alt squashfuse noop; do mountpoint -q "$work/$name/$k" && fusermount3 -u "$work/$name/$k"; done
	unset ms med
done
cat "$out"
