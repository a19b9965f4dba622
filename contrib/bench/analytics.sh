#!/usr/bin/env bash
# analytics.sh: text analytics on the grammar (issue 23) against the plain-text pipelines a
# user would write over the original tree, each as a whole process.
#
# Usage: contrib/bench/analytics.sh CORPORA OUT.md [NAME...]     (default NAMES: gcide linuxdoc)
#
# For each corpus CORPORA/NAME: tadoc top, vector, files W, ngrams, count 'W1 W2' and
# fuzzy -k 2 W against grep/sort/uniq/awk, tre-agrep -2 -w and ugrep -Z2 -w (each where
# installed), then contrib/bench/fuzzy_bench (the radix tree's build and query latency).
# Each analytic also as its extended attribute on a read-only tadocfs mount of the archive
# (`getfattr --only-values -n user.tadoc.NAME MNT`, a whole process; the vector through
# all its #more parts), when tadocfs and getfattr are there: the first query of a fresh
# mount (nothing cached; the mount is made again before each run), and the same query
# asked again (a list comes from the mount's list cache).
# tadoc and getfattr rows: median wall time and least CPU time of AN_RUNS runs (5): tadoc's
# user + sys; getfattr's the daemon's (user + sys of all its threads, live or gone, from
# /proc/PID/stat: 10 ms ticks), which does the work; the pipelines run once (they take seconds). On a shared machine
# the CPU times are the figures to compare; speed-ups are given for both.
# Env: AN_ARCHIVES=DIR reuses DIR/NAME.tadoc (else compressed into BENCH_WORK, with the
# options in AN_COMPRESS_ARGS, e.g. "--top-words --root-vector" for the stored tables); AN_RUNS;
# AN_ROWS=PATTERN runs only the rows whose label matches the extended regular expression
# (e.g. '3-grams|phrase'; then no fuzzy_bench); AN_XATTR=0 leaves out the getfattr columns;
# BUILD, BENCH_WORK, TADOC as bench_lib.sh.
set -euo pipefail
. "$(dirname "$0")/bench_lib.sh"

[ $# -ge 2 ] || { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
CORPORA=$1 OUT=$2
shift 2
NAMES=("$@")
[ ${#NAMES[@]} -gt 0 ] || NAMES=(gcide linuxdoc)
RUNS=${AN_RUNS:-5}
bench_setup_bins
bench_setup_work
bench_need_gnu_time
[ -n "$TADOC" ] || die "tadoc not found (build first)"
FUZZY_BENCH=$(bench_bin fuzzy_bench contrib/bench || true)
XATTR=1
[ "${AN_XATTR:-1}" != 0 ] || XATTR=
[ -z "${AN_ROWS:-}" ] || FUZZY_BENCH=
[ -z "$XATTR" ] ||
	{ [ -n "$TADOCFS" ] && command -v getfattr >/dev/null && command -v mountpoint >/dev/null; } ||
		{ XATTR=; log "no tadocfs or getfattr: no getfattr column"; }
MNT=$BENCH_WORK/an-mnt
DAEMON=
an_umount() {
	if [ -n "$DAEMON" ] && mountpoint -q "$MNT"; then
		fusermount3 -u "$MNT" 2>/dev/null || umount "$MNT" 2>/dev/null || umount -l "$MNT" || true
		local i
		for ((i = 0; i < 200; i++)); do kill -0 "$DAEMON" 2>/dev/null || break; sleep 0.05; done
	fi
	DAEMON=
}
trap an_umount EXIT

# daemon_ns: nanoseconds of CPU the mount daemon has used (user + sys of every thread it
# ran, including those gone: FUSE worker threads come and go; clock ticks).
daemon_ns() {
	awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); print ($12 + $13) * 1e9 / hz }' /proc/"$DAEMON"/stat
}

# an_mount ARCHIVE: a fresh read-only mount on MNT; DAEMON its pid.
an_mount() {
	an_umount
	mkdir -p "$MNT"
	"$TADOCFS" "$1" "$MNT" -o ro
	local i
	for ((i = 0; i < 200; i++)); do mountpoint -q "$MNT" && break; sleep 0.05; done
	DAEMON=$(pgrep -n -f "^$TADOCFS $1 $MNT" || true)
	[ -n "$DAEMON" ] || die "tadocfs did not mount $1"
	getfattr --absolute-names -n user.tadoc.words "$MNT" >/dev/null
	sleep 1 # the idle-priority cache warm-up (cache_warm) is done before the clock starts
}

# xattr_once NAME [all]: one getfattr process reading user.tadoc.NAME on the mount's root
# (all: every #more part); sets W_SECS and D_SECS (the daemon's CPU meanwhile).
xattr_once() {
	local name=$1 all=${2:-} n0
	n0=$(daemon_ns)
	if [ -n "$all" ]; then
			run_cpu bash -c 'n=$1; while [ -n "$n" ]; do v=$(getfattr --only-values --absolute-names -n "$n" "$2"); l=${v##*$'"'\\n'"'}; n=; [ "${l#\#more }" = "$l" ] || n=${l#\#more }; done' \
				_ "user.tadoc.$name" "$MNT"
	else
		run_cpu getfattr --only-values --absolute-names -n "user.tadoc.$name" "$MNT"
	fi
	D_SECS=$(awk -v a="$n0" -v b="$(daemon_ns)" 'BEGIN { printf "%.6f", (b - a) / 1e9 }')
}

# xattr_row ARCHIVE NAME [all]: AN_RUNS fresh mounts, each asked once and again; sets X_MED
# and X_CMIN (median wall, least daemon CPU of the first queries), A_MED (median wall of
# the repeats).
xattr_row() {
	local arch=$1 name=$2 all=${3:-} ws=() cs=() as=() i
	for ((i = 0; i < RUNS; i++)); do
		an_mount "$arch"
		xattr_once "$name" "$all"
		ws+=("$W_SECS")
		cs+=("$D_SECS")
		xattr_once "$name" "$all"
		as+=("$W_SECS")
	done
	an_umount
	X_MED=$(printf '%s\n' "${ws[@]}" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
	X_CMIN=$(printf '%s\n' "${cs[@]}" | sort -g | head -n 1)
	A_MED=$(printf '%s\n' "${as[@]}" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
}

# tadoc_row CMD...: AN_RUNS runs; sets W_MED (median wall) and C_MIN (least CPU).
tadoc_row() { runs "$RUNS" "$@"; }

{
	echo "# Text analytics on the grammar vs plain-text pipelines ($(date -u +%Y-%m-%d))"
	echo
	echo "- machine: $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(nproc) cores," \
		"$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo), load average" \
		"$(cut -d' ' -f1-3 /proc/loadavg) at the start"
	echo "- commit: $(git -C "$REPO_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)," \
		"tadoc runs: median wall / least CPU (user + sys, getrusage) of $RUNS; pipelines: one run"
	echo "- locale: $LC_ALL (grep's \\w is Unicode-aware, like tadoc's words)"
	echo "- tadoc threads: ${TADOC_THREADS:-one per core} (TADOC_THREADS); the pipelines are processes of their own"
	echo
} >"$OUT"

for name in "${NAMES[@]}"; do
	dir=$CORPORA/$name
	[ -d "$dir" ] || { log "skip $name: no $dir"; continue; }
	arch=${AN_ARCHIVES:+$AN_ARCHIVES/$name.tadoc}
	if [ -z "$arch" ] || [ ! -f "$arch" ]; then
		arch=$BENCH_WORK/$name.tadoc
		# shellcheck disable=SC2086 # AN_COMPRESS_ARGS: options, split on spaces
		[ -f "$arch" ] || { log "compress $name"; "$TADOC" compress -q ${AN_COMPRESS_ARGS:-} -o "$arch" "$dir"; }
	fi
	cat "$arch" >/dev/null
	find "$dir" -type f -print0 | xargs -0 cat >/dev/null
	# query words: the 50th most frequent word, and the pair its first file starts with
	W=$("$TADOC" top -n 50 "$arch" | tail -n 1 | cut -f2)
	P=$("$TADOC" ngrams -n 2 --top 1 "$arch" | cut -f2)
	P1=${P% *} P2=${P#* }
	log "$name: W=$W, phrase '$P'"
	{
		echo "## $name ($(du -sh "$dir" | cut -f1) in $(find "$dir" -type f | wc -l) files; archive $(du -hL "$arch" | cut -f1))"
		echo
		echo "Query word W = \`$W\` (the 50th most frequent), phrase = \`$P\` (the most frequent pair)."
		echo
		echo "| analytic | tadoc (ms wall / CPU) | getfattr, fresh mount (ms wall / daemon CPU) | getfattr again (ms wall) | plain-text pipeline | pipeline (ms wall / CPU) | speed-up tadoc wall / CPU | speed-up getfattr (fresh) wall / CPU |"
		echo "|---|---:|---:|---:|---|---:|---:|---:|"
	} >>"$OUT"
	row() { # LABEL TADOC-ARGS-STRING XATTR-NAME PIPE-LABEL PIPE-COMMAND
		local label=$1 targs=$2 xname=$3 plabel=$4 pcmd=$5 xcell="n/a" acell="n/a" xratio="n/a"
		[ -z "${AN_ROWS:-}" ] || [[ $label =~ $AN_ROWS ]] || return 0
		log "$name: $label"
		eval "tadoc_row \"\$TADOC\" $targs"
		if [ -n "$XATTR" ] && [ -n "$xname" ]; then
			xattr_row "$arch" "$xname" "$([ "$xname" = vector ] && echo all)"
			xcell="$(ms "$X_MED") / $(ms "$X_CMIN")"
			acell=$(ms "$A_MED")
		fi
		run_cpu bash -c "$pcmd"
		[ "$xcell" = n/a ] || xratio="$(ratio "$W_SECS" "$X_MED") / $(ratio "$C_SECS" "$X_CMIN")"
		echo "| $label | $(ms "$W_MED") / $(ms "$C_MIN") | $xcell | $acell | \`${plabel//|/\\|}\` | $(ms "$W_SECS") / $(ms "$C_SECS") |" \
			"$(ratio "$W_SECS" "$W_MED") / $(ratio "$C_SECS" "$C_MIN") | $xratio |" >>"$OUT"
	}
	row "top words" "top \"\$arch\"" "top.20" "grep -rhow '\\w\\+' DIR | sort | uniq -c | sort -rn | head -20" \
		"grep -rhow '\\w\\+' '$dir' | sort | uniq -c | sort -rn | head -20"
	row "term vector (corpus)" "vector \"\$arch\" ." "vector" "grep -rhow '\\w\\+' DIR | sort | uniq -c" \
		"grep -rhow '\\w\\+' '$dir' | sort | uniq -c"
	row "ranked files (W)" "files \"\$arch\" \"\$W\"" "files.$W" "grep -rcw W DIR | sort -t: -k2 -rn" \
		"grep -rcw '$W' '$dir' | sort -t: -k2 -rn"
	row "3-grams, top 20" "ngrams \"\$arch\"" "ngrams.3.20" "grep -row '\\w\\+' DIR | awk (3-gram per file) | sort -rn | head -20" \
		"grep -row '\\w\\+' '$dir' | awk -F: '{ w = \$NF; if (\$1 != f) { a = b = \"\"; f = \$1 } if (a != \"\") n[a \" \" b \" \" w]++; a = b; b = w } END { for (k in n) print n[k] \"\t\" k }' | sort -rn | head -20"
	row "phrase count" "count \"\$arch\" \"\$P\"" "count.$P" "grep -row '\\w\\+' DIR | awk (pair per file) " \
		"grep -row '\\w\\+' '$dir' | awk -F: '{ w = \$NF; if (\$1 == f && p == \"$P1\" && w == \"$P2\") n++; p = w; f = \$1 } END { print n }'"
	missing=
	if command -v tre-agrep >/dev/null; then
		row "fuzzy K=2 (W)" "fuzzy -k 2 \"\$arch\" \"\$W\"" "fuzzy.2.$W" "tre-agrep -2 -w W FILES" \
			"find '$dir' -type f -print0 | xargs -0 tre-agrep -2 -w '$W' >/dev/null"
	else
		missing="$missing tre-agrep"
	fi
	if command -v ugrep >/dev/null; then
		row "fuzzy K=2 (W)" "fuzzy -k 2 \"\$arch\" \"\$W\"" "fuzzy.2.$W" "ugrep -r -Z2 -w -o W DIR | sort | uniq -c" \
			"ugrep -r -Z2 -w -o -h '$W' '$dir' | sort | uniq -c"
	else
		missing="$missing ugrep"
	fi
	if [ -n "$missing" ]; then # said, not dropped silently
		log "$name: fuzzy rows left out, not installed:$missing (contrib/install-deps.sh --bench)"
		printf '\nFuzzy rows left out: not installed:%s.\n' "$missing" >>"$OUT"
	fi
	if [ -n "$FUZZY_BENCH" ]; then
		log "$name: fuzzy_bench"
		{
			echo
			echo "\`fuzzy_bench\` (the vocabulary's radix tree, built at a process's first query; 1000"
			echo "vocabulary words with one letter changed; one thread in its CPU time):"
			echo
			echo '```'
			"$FUZZY_BENCH" "$arch" 1000
			echo '```'
		} >>"$OUT"
	fi
	echo >>"$OUT"
done
log "wrote $OUT"
