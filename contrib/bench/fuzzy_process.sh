#!/usr/bin/env bash
# fuzzy_process: `tadoc fuzzy -k 2` as a one-shot process, with and without the fuzzy index
# (tadoc compress --fuzzy-index), against `ugrep -r -Z2 -w -o W DIR` and `tre-agrep -2 -w W`
# over the original tree, side by side in one run; `tadoc info` as the floor (a process that
# opens the archive and answers nothing). CPU = user + sys.
#
# Usage: fuzzy_process.sh TADOC OUT.md NAME:DIR:WORD...   (env: RUNS=5, ARCH=DIR for the archives,
#        built there unless NAME.tadoc and NAME-fz.tadoc are already there; PIPES=0 skips ugrep and tre-agrep)
set -euo pipefail
tadoc=$(realpath "${1:?usage: fuzzy_process.sh TADOC OUT.md NAME:DIR:WORD...}")
out=${2:?usage}
shift 2
runs=${RUNS:-5}
arch=${ARCH:-$(mktemp -d "${TMPDIR:-/tmp}/fuzzy_process.XXXXXX")}
export LC_ALL=C.UTF-8

# least CPU and median wall (ms) of $runs runs of "$@" (stdout discarded)
measure() {
	local i t
	t=$(mktemp)
	for ((i = 0; i < runs; i++)); do
		/usr/bin/time -o "$t" -f '%e %U %S' "$@" >/dev/null 2>&1 || true
		tail -1 "$t"
	done | sort -n | awk '{ w[NR] = $1 * 1000; c = ($2 + $3) * 1000; if (NR == 1 || c < m) m = c }
		END { printf "%.1f %.1f\n", w[int((NR + 1) / 2)], m }'
	rm -f "$t"
}
# the same through perf stat's task-clock (sub-millisecond), when perf works
measure_perf() {
	if perf stat -x, -e task-clock true 2>/dev/null >/dev/null; then
		perf stat -x, -e task-clock -r "$runs" "$@" 2>&1 >/dev/null | awk -F, '/task-clock/ { printf "%.2f\n", $1 }'
	else
		measure "$@" | awk '{ print $2 }'
	fi
}

{
	echo "- machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
	echo "- commit: $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "- tadoc: mean CPU (perf stat -r $runs, task-clock) / median wall (10 ms ticks); pipelines: one run each (getrusage: user + sys of every thread and child, 10 ms ticks)"
	echo
	echo "| corpus (W) | archive (fuzzy index: % of it) | floor: tadoc info (CPU ms) | tadoc fuzzy -k 2, no index (CPU ms) | with the index (CPU ms / wall ms) | ugrep -r -Z2 -w -o \\| sort \\| uniq -c (CPU / wall ms) | tre-agrep -2 -w (CPU / wall ms) | speed-up CPU over ugrep / tre-agrep |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|"
} >"$out"

for spec in "$@"; do
	IFS=: read -r name dir word <<<"$spec"
	a0=$arch/$name.tadoc a1=$arch/$name-fz.tadoc
	[ -f "$a0" ] || nice "$tadoc" compress -q -o "$a0" "$dir"
	[ -f "$a1" ] || nice "$tadoc" compress -q --fuzzy-index -o "$a1" "$dir"
	cmp <("$tadoc" fuzzy -k 2 "$a0" "$word") <("$tadoc" fuzzy -k 2 "$a1" "$word") || { echo "$name: answers differ" >&2; exit 1; }
	s0=$(stat -c %s "$a0") s1=$(stat -c %s "$a1")
	floor=$(measure_perf "$tadoc" info "$a1")
	c0=$(measure_perf "$tadoc" fuzzy -k 2 "$a0" "$word")
	c1=$(measure_perf "$tadoc" fuzzy -k 2 "$a1" "$word")
	w1=$(measure "$tadoc" fuzzy -k 2 "$a1" "$word" | awk '{ print $1 }')
	if [ "${PIPES:-1}" = 1 ]; then
		# through sort | uniq -c (the words and their counts, as tadoc prints them): ugrep,
		# like grep, stops at the first match when its output is /dev/null
		read -r uw uc < <(runs=1 measure nice sh -c "ugrep -r -Z2 -w -o -h '$word' '$dir' | sort | uniq -c")
		read -r tw tc < <(runs=1 measure nice sh -c "find '$dir' -type f -print0 | xargs -0 tre-agrep -2 -w '$word'")
	else
		uw=- uc=- tw=- tc=-
	fi
	awk -v n="$name" -v w="$word" -v s0="$s0" -v s1="$s1" -v f="$floor" -v c0="$c0" -v c1="$c1" -v w1="$w1" \
		-v uc="$uc" -v uw="$uw" -v tc="$tc" -v tw="$tw" 'BEGIN {
		printf "| %s (`%s`) | %.1f MB (%.1f%%) | %s | %s | %s / %s | %s / %s | %s / %s | %s / %s |\n",
			n, w, s1 / 1e6, 100 * (s1 - s0) / s1, f, c0, c1, w1, uc, uw, tc, tw,
			uc == "-" ? "-" : sprintf("%.0fx", uc / c1), tc == "-" ? "-" : sprintf("%.0fx", tc / c1) }' >>"$out"
done
cat "$out"
