#!/usr/bin/env bash
# shards.sh: format 4 against format 5 (shards, issue 22): archive ratio, build
# wall time and peak RSS of `tadoc compress` at -j 1 and -j 2, beside
# `mksquashfs DIR x.sqfs -comp zstd` in the same run.
#
# Usage: contrib/bench/shards.sh CORPORA_DIR [NAME...]
#   NAME defaults to: sotu spam gcide linuxdoc (directories in CORPORA_DIR).
#   SHARD_SIZES (default "64M 16M") lists the format 5 shard sizes to run.
# A markdown table goes to stdout, progress to stderr. Ratio = original
# bytes (sum of regular file sizes) / archive bytes. Inputs are read once
# before timing (warm page cache); archives are written to $BENCH_WORK.
set -u -o pipefail
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"

if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
	sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
	exit $([ $# -lt 1 ] && echo 2 || echo 0)
fi
CORPORA=$1
shift
NAMES=("$@")
[ ${#NAMES[@]} -eq 0 ] && NAMES=("${DEFAULT_CORPORA[@]}")
SHARD_SIZES=${SHARD_SIZES:-64M 16M}

bench_setup_bins
bench_setup_work
bench_need_gnu_time
[ -n "$TADOC" ] || die "tadoc not built"
command -v mksquashfs >/dev/null || die "mksquashfs not found (Debian: squashfs-tools)"

echo "| corpus | input bytes | build | archive bytes | ratio | vs format 4 | wall s | peak RSS MiB | shards |"
echo "|---|---:|---|---:|---:|---:|---:|---:|---:|"
for name in "${NAMES[@]}"; do
	dir="$CORPORA/$name"
	[ -d "$dir" ] || die "$dir: no such corpus directory"
	tar cf - -C "$dir" . | cat >/dev/null
	orig=$(file_bytes "$dir")
	out="$BENCH_WORK/shards-$name.tadoc"
	base=""
	row() { # LABEL FILE SHARDS
		local bytes r v
		bytes=$(stat -c %s "$2")
		r=$(div "$orig" "$bytes" 3)
		[ -z "$base" ] && base=$bytes
		v=$(awk -v a="$base" -v b="$bytes" 'BEGIN { printf "%+.2f%%", (a / b - 1) * 100 }')
		echo "| $name | $orig | $1 | $bytes | $r | $v | $T_SECS | $((T_RSS_KB / 1024)) | $3 |"
	}
	log "$name: format 4"
	timed "$TADOC" compress -q --format 4 -o "$out" "$dir" || die "$name: format 4: $(cat "$BENCH_WORK/last.log")"
	row "tadoc --format 4 (one thread)" "$out" -
	for ss in $SHARD_SIZES; do
		for j in 1 2; do
			log "$name: format 5, --shard-size $ss, -j $j"
			timed "$TADOC" compress -q -j "$j" --shard-size "$ss" -o "$out" "$dir" ||
				die "$name: format 5: $(cat "$BENCH_WORK/last.log")"
			row "tadoc -j $j --shard-size $ss" "$out" "$("$TADOC" info "$out" | awk '/^shards/ { print $2 }')"
		done
	done
	rm -f "$out"
	log "$name: mksquashfs"
	rm -f "$BENCH_WORK/x.sqfs"
	timed mksquashfs "$dir" "$BENCH_WORK/x.sqfs" -comp zstd -noappend -quiet || die "$name: mksquashfs"
	row "mksquashfs -comp zstd (all cores)" "$BENCH_WORK/x.sqfs" -
	rm -f "$BENCH_WORK/x.sqfs"
done
