#!/usr/bin/env bash
# compact_shards.sh: `tadoc compact` of a format 5 archive after edits to a
# few files: per shard (only the edited files' shards rebuilt) against a full
# rebuild (`tadoc compact --full`, every shard, as compaction did before).
#
# Usage: contrib/bench/compact_shards.sh CORPORA_DIR [NAME...]
#   NAME defaults to: spam linuxdoc. SHARD_SIZE (default 4M) cuts the
#   archive into many shards; NEDIT (default 2) files are edited through a
#   writable mount (a line appended, a word overwritten mid-file).
# Needs FUSE (root or fuse group). A markdown table goes to stdout.
set -u -o pipefail
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"

if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
	sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
	exit $([ $# -lt 1 ] && echo 2 || echo 0)
fi
CORPORA=$1
shift
NAMES=("$@")
[ ${#NAMES[@]} -eq 0 ] && NAMES=(spam linuxdoc)
SHARD_SIZE=${SHARD_SIZE:-4M}
NEDIT=${NEDIT:-2}

bench_setup_bins
bench_setup_work
bench_need_gnu_time
[ -n "$TADOC" ] && [ -n "$TADOCFS" ] || die "tadoc and tadocfs not built"

echo "| corpus | input bytes | shards | edited files | compaction | wall s | peak RSS MiB | shards kept / built |"
echo "|---|---:|---:|---:|---|---:|---:|---|"
for name in "${NAMES[@]}"; do
	dir="$CORPORA/$name"
	[ -d "$dir" ] || die "$dir: no such corpus directory"
	orig=$(file_bytes "$dir")
	a="$BENCH_WORK/cs-$name.tadoc" b="$BENCH_WORK/cs-$name-full.tadoc" mnt="$BENCH_WORK/cs-mnt"
	rm -f "$a" "$a.journal" "$b" "$b.journal"
	log "$name: compress -j 2 --shard-size $SHARD_SIZE"
	"$TADOC" compress -q -j 2 --shard-size "$SHARD_SIZE" -o "$a" "$dir" || die "$name: compress"
	nsh=$("$TADOC" info "$a" | awk '/^shards/ { print $2 }')
	mkdir -p "$mnt"
	"$TADOCFS" "$a" "$mnt" -o rw || die "$name: mount"
	nfiles=$(find "$mnt" -type f | wc -l)
	# NEDIT files spread over the tree: a line appended, 8 bytes overwritten in the middle
	find "$mnt" -type f -size +2k | LC_ALL=C sort | awk -v n="$NEDIT" -v t="$nfiles" \
		'NR % int(t / n + 1) == 1' | head -n "$NEDIT" | while read -r f; do
		echo "an appended line for the benchmark" >>"$f"
		printf 'EDITEDXX' | dd of="$f" bs=1 seek=$(($(stat -c %s "$f") / 2)) conv=notrunc status=none
	done
	fusermount3 -u "$mnt"
	sleep 0.5
	cp "$a" "$b" && cp "$a.journal" "$b.journal"
	for how in "per shard" full; do
		f=$a opt=""
		[ "$how" = full ] && f=$b opt=--full
		log "$name: compact ($how)"
		# shellcheck disable=SC2086
		timed "$TADOC" compact $opt -j 2 --shard-size "$SHARD_SIZE" "$f" || die "$name: compact: $(cat "$BENCH_WORK/last.log")"
		kept=$(sed -n 's/.*shards: \([0-9]*\) kept of [0-9]*, \([0-9]*\) built/\1 \/ \2/p' "$BENCH_WORK/last.log")
		echo "| $name | $orig | $nsh | $NEDIT | $how | $T_SECS | $((T_RSS_KB / 1024)) | $kept |"
	done
	"$TADOC" verify "$a" >/dev/null && "$TADOC" verify "$b" >/dev/null || die "$name: verify"
	diff <("$TADOC" ls -l "$a") <("$TADOC" ls -l "$b") >/dev/null || die "$name: the two compactions differ"
	rm -f "$a" "$a.journal" "$b" "$b.journal"
done
