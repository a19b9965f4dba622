#!/usr/bin/env bash
# compress_speed.sh: one writer's build speed and memory, base build against
# new build, in interleaved rounds of fresh `tadoc compress` processes.
#
# Usage: contrib/bench/compress_speed.sh [-r ROUNDS] BASE_TADOC NEW_TADOC DIR...
#   ROUNDS (default 1) runs of each binary per DIR, alternating base and new.
# Prints a markdown table (medians): wall, user and system seconds, peak RSS,
# input MB/s per CPU second (user + system), archive bytes and ratio (sum of
# regular file sizes / archive bytes), and whether the two builds wrote the
# same bytes: time() is pinned with a small LD_PRELOAD shim (built with cc)
# so the archives' build time does not differ.
set -u -o pipefail
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"

ROUNDS=1
if [ "${1:-}" = -r ]; then
	ROUNDS=$2
	shift 2
fi
if [ $# -lt 3 ]; then
	sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
fi
BASE=$1
NEW=$2
shift 2
bench_need_gnu_time
KEEP_WORK=${BENCH_WORK:+1}
bench_setup_work
[ -n "$KEEP_WORK" ] || trap 'rm -rf "$BENCH_WORK"' EXIT
SHIM="$BENCH_WORK/pin_time.so"
printf '#include <time.h>\ntime_t time(time_t *t) { if (t) *t = 1700000000; return 1700000000; }\n' >"$BENCH_WORK/pin_time.c"
cc -shared -fPIC -O2 -o "$SHIM" "$BENCH_WORK/pin_time.c" || die "cannot build the time() shim"

# median of the arguments
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

echo "| input | MB | build | wall s | user s | sys s | peak RSS MiB | MB/s per CPU s | archive bytes | ratio | same bytes |"
echo "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|:---:|"
for dir in "$@"; do
	[ -d "$dir" ] || die "$dir: no such directory"
	name=$(basename "$dir")
	orig=$(file_bytes "$dir")
	tar cf - -C "$dir" . | cat >/dev/null
	declare -A WALL=() USER=() SYS=() RSS=()
	for ((r = 0; r < ROUNDS; r++)); do
		for b in base new; do
			bin=$BASE
			[ $b = new ] && bin=$NEW
			log "$name: $b round $((r + 1))"
			LD_PRELOAD="$SHIM" /usr/bin/time -f '%e %U %S %M' -o "$BENCH_WORK/t" \
				"$bin" compress -q -o "$BENCH_WORK/$name-$b.tadoc" "$dir" || die "$bin failed on $dir"
			read -r w u s m <"$BENCH_WORK/t"
			WALL[$b]+="$w "
			USER[$b]+="$u "
			SYS[$b]+="$s "
			RSS[$b]+="$m "
		done
	done
	same=no
	cmp -s "$BENCH_WORK/$name-base.tadoc" "$BENCH_WORK/$name-new.tadoc" && same=yes
	for b in base new; do
		# shellcheck disable=SC2086
		w=$(median ${WALL[$b]}) u=$(median ${USER[$b]}) s=$(median ${SYS[$b]}) m=$(median ${RSS[$b]})
		bytes=$(stat -c %s "$BENCH_WORK/$name-$b.tadoc")
		awk -v n="$name" -v o="$orig" -v b="$b" -v w="$w" -v u="$u" -v s="$s" -v m="$m" -v z="$bytes" -v same="$same" \
			'BEGIN { printf "| %s | %.1f | %s | %.2f | %.2f | %.2f | %.0f | %.2f | %d | %.3f | %s |\n",
				n, o / 1e6, b, w, u, s, m / 1024, o / 1e6 / (u + s), z, o / z, same }'
	done
	unset WALL USER SYS RSS
done
