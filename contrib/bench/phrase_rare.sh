#!/usr/bin/env bash
# phrase_rare: `tadoc count ARCHIVE 'W1 W2'` as a whole process on an archive with stored
# postings (tadoc compress --postings), this build against another (main's) interleaved run by
# run, and the plain-text pipeline of analytics.sh's "phrase count" row over the original tree
# (grep -row '\w\+' DIR | awk, a consecutive-pair counter; one run a phrase). CPU: perf stat's
# task-clock (user + sys of the process and its threads); the pipeline's: getrusage of the
# shell and its children. Prints markdown rows.
#
# Usage: phrase_rare.sh TADOC TADOC_BASE NAME ARCHIVE DIR 'W1 W2'...
#        (env: RUNS=5; PIPES=0 skips the pipelines, PIPES=N runs them for the first N phrases)
set -euo pipefail
usage="usage: phrase_rare.sh TADOC TADOC_BASE NAME ARCHIVE DIR 'W1 W2'..."
tadoc=$(realpath "${1:?$usage}")
base=$(realpath "${2:?$usage}")
name=${3:?$usage}
arch=${4:?$usage}
dir=${5:?$usage}
shift 5
runs=${RUNS:-5}
pipes=${PIPES:-99}
export LC_ALL=C.UTF-8

# task-clock (ms) of one run of "$@", stdout discarded
tclock() {
	perf stat -x, -e task-clock "$@" 2>&1 >/dev/null | awk -F, '/task-clock/ { printf "%.2f\n", $1 }'
}
# mean of the numbers on stdin
mean() { awk '{ s += $1; n++ } END { printf "%.1f", s / n }'; }

echo "- machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start; $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "| corpus | phrase | occurrences | base (ms CPU) | this build (ms CPU) | pipeline (ms CPU / wall) | speed-up in CPU (base / this) |"
echo "|---|---|---:|---:|---:|---:|---:|"
k=0
for p in "$@"; do
	w1=${p%% *}
	w2=${p#* }
	n=$("$tadoc" count "$arch" "$p")
	nb=$("$base" count "$arch" "$p")
	[ "$n" = "$nb" ] || { echo "answers differ for '$p': $n against $nb" >&2; exit 1; }
	a=$(mktemp) b=$(mktemp)
	for ((i = 0; i < runs; i++)); do # interleaved, run by run
		tclock "$base" count "$arch" "$p" >>"$b"
		tclock "$tadoc" count "$arch" "$p" >>"$a"
	done
	mb=$(mean <"$b") ma=$(mean <"$a")
	rm -f "$a" "$b"
	pc=n/a pw=n/a sp="n/a"
	if [ "$k" -lt "$pipes" ]; then
		t=$(mktemp)
		/usr/bin/time -o "$t" -f '%e %U %S' bash -c "grep -row '\\w\\+' '$dir' | awk -F: '{ w = \$NF; if (\$1 == f && p == \"$w1\" && w == \"$w2\") n++; p = w; f = \$1 } END { print n + 0 }'" >"$t.out"
		[ "$(cat "$t.out")" = "$n" ] || echo "pipeline counts $(cat "$t.out") for '$p', tadoc $n" >&2
		read -r pw pu ps <"$t"
		pc=$(awk -v u="$pu" -v s="$ps" 'BEGIN { printf "%.0f", (u + s) * 1000 }')
		pw=$(awk -v w="$pw" 'BEGIN { printf "%.0f", w * 1000 }')
		sp=$(awk -v c="$pc" -v b="$mb" -v a="$ma" 'BEGIN { printf "%.0fx / **%.0fx**", c / b, c / a }')
		rm -f "$t" "$t.out"
	fi
	echo "| $name | \`$p\` | $n | $mb | $ma | $pc / $pw | $sp |"
	k=$((k + 1))
done
