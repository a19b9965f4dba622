#!/usr/bin/env bash
# postings.sh: ranked files of one word from the stored postings (`tadoc compress --postings`,
# `tadoc files ARCHIVE W`) against the plain-text pipeline `grep -rcw W DIR | sort -t: -k2 -rn`,
# each a whole process, side by side on one machine; and the section's size on each corpus.
#
# Usage: contrib/bench/postings.sh CORPORA OUT.md [NAME...]   (default: sotu linuxdoc gcide spam linux)
#
# W is the 50th most frequent word of the corpus (as analytics.sh), W2 the 2000th. tadoc rows:
# median wall / least CPU (user + sys, getrusage) of PO_RUNS runs (5); `tadoc --version`
# beside them is the process's floor (loading the binary and its libraries). The pipeline
# runs PO_PIPE_RUNS times (3; least CPU). Outputs are compared (the pipeline's counts are
# lines, tadoc's occurrences: only the file sets must agree, which is checked).
# Env: PO_ARCHIVES=DIR reuses DIR/NAME.tadoc (built with --postings; else compressed into
# BENCH_WORK, under nice); PO_RUNS; PO_PIPE_RUNS; BUILD, BENCH_WORK, TADOC as bench_lib.sh.
set -euo pipefail
. "$(dirname "$0")/bench_lib.sh"

[ $# -ge 2 ] || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
CORPORA=$1 OUT=$2
shift 2
NAMES=("$@")
[ ${#NAMES[@]} -gt 0 ] || NAMES=(sotu linuxdoc gcide spam linux)
RUNS=${PO_RUNS:-5}
PRUNS=${PO_PIPE_RUNS:-3}
export LC_ALL=${LC_ALL:-C.UTF-8}
bench_setup_bins
bench_setup_work
[ -n "$TADOC" ] || die "tadoc not found (build first)"

mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

{
	echo "# Ranked files from stored postings vs grep -rcw ($(date -u +%Y-%m-%d))"
	echo
	echo "- machine: $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(nproc) cores," \
		"$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo), load average" \
		"$(cut -d' ' -f1-3 /proc/loadavg) at the start"
	echo "- commit: $(git -C "$REPO_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown); tadoc: median wall /" \
		"least CPU of $RUNS runs; pipeline: median wall / least CPU of $PRUNS; locale $LC_ALL"
	echo
	echo "| corpus | archive (MiB) | postings (MiB, % of archive) | word | files | tadoc files (ms wall / CPU) | tadoc --version (ms wall / CPU) | grep -rcw W DIR \\| sort (ms wall / CPU) | speed-up wall / CPU | same files |"
	echo "|---|---:|---:|---|---:|---:|---:|---:|---:|---|"
} >"$OUT"

for name in "${NAMES[@]}"; do
	dir=$CORPORA/$name
	[ -d "$dir" ] || { log "skip $name: no $dir"; continue; }
	arch=${PO_ARCHIVES:+$PO_ARCHIVES/$name.tadoc}
	if [ -z "$arch" ] || [ ! -f "$arch" ]; then
		arch=$BENCH_WORK/$name-postings.tadoc
		[ -f "$arch" ] || { log "compress $name --postings"; nice "$TADOC" compress -q --postings -o "$arch" "$dir"; }
	fi
	abytes=$(stat -L -c %s "$arch")
	pbytes=$("$TADOC" info "$arch" | awk '$1 == "postings" && $2 ~ /^[0-9]+$/ { print $2; exit }')
	[ -n "$pbytes" ] || die "$arch has no postings (compress it with --postings)"
	cat "$arch" >/dev/null
	find "$dir" -type f -print0 | xargs -0 cat >/dev/null
	for rank in 50 2000; do
		w=$("$TADOC" top -n "$rank" "$arch" | tail -n 1 | cut -f2)
		log "$name: word $rank = $w"
		runs "$RUNS" "$TADOC" files "$arch" "$w"
		tw=$W_MED tc=$C_MIN
		cut -f2 "$BENCH_WORK/out.txt" | sort >"$BENCH_WORK/tfiles.txt"
		nf=$(wc -l <"$BENCH_WORK/tfiles.txt")
		runs "$RUNS" "$TADOC" --version
		vw=$W_MED vc=$C_MIN
		runs "$PRUNS" bash -c "cd '$dir' && grep -rcw -- '$w' . | sort -t: -k2 -rn"
		gw=$W_MED gc=$C_MIN
		# grep -c counts lines, tadoc occurrences: compare the sets of files holding W
		awk -F: '$NF > 0 { sub(/:[0-9]+$/, ""); sub(/^\.\//, ""); print }' "$BENCH_WORK/out.txt" | sort >"$BENCH_WORK/gfiles.txt"
		same=yes
		cmp -s "$BENCH_WORK/tfiles.txt" "$BENCH_WORK/gfiles.txt" || same="no (see $BENCH_WORK)"
		echo "| $name | $(mb "$abytes") | $(mb "$pbytes") ($(awk -v p="$pbytes" -v a="$abytes" 'BEGIN { printf "%.1f%%", 100 * p / a }')) |" \
			"\`$w\` (#$rank) | $nf | $(ms "$tw") / $(ms "$tc") | $(ms "$vw") / $(ms "$vc") | $(ms "$gw") / $(ms "$gc") |" \
			"$(ratio "$gw" "$tw") / $(ratio "$gc" "$tc") | $same |" >>"$OUT"
	done
done
log "wrote $OUT"
