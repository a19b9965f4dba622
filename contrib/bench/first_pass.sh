#!/usr/bin/env bash
# first_pass.sh OUT.md ARCHIVE...: first passes over freshly opened archives
# (issue 2's whole-file extract goal), interleaved rounds, medians.
#
# Each round runs, for every archive in turn and each in a fresh process:
#   td_bench        every file through one cursor in 1 MiB reads, no hint
#                   (a reader that does not say what it will read)
#   td_bench -a     the same after td_archive_will_read(every file's bytes),
#                   as `tadoc unpack` and `tadoc cat` do
#   tadoc unpack    the whole tree into a scratch directory (on tmpfs when
#                   /dev/shm is there, so the disk does not set the pace)
#   tadoc cat       every regular file (`tadoc ls -l` order) in one process,
#                   to /dev/null (all paths on one command line: fine for the
#                   four corpora, too long for linux-source-6.1)
# and, with FP_BASE=OTHER_BUILD_DIR, all four from that build too (a build
# before a change, measured in the same rounds; its will_read column needs
# a build that has td_bench -a).
# Rates are original bytes (cat: the listed files' bytes) / wall seconds of
# the pass; "warm" is the median of passes 2-4 in the same process. Needs
# the archives' files on disk only.
#
# Environment: FP_ROUNDS (default 7), FP_BASE, BUILD, TADOC, TD_BENCH.
set -euo pipefail
. "$(dirname "$0")/bench_lib.sh"
[ $# -ge 2 ] || die "usage: $0 OUT.md ARCHIVE..."
OUT=$1
shift
bench_setup_bins
[ -n "$TD_BENCH" ] && [ -n "$TADOC" ] || die "td_bench and tadoc are needed (ninja -C $BUILD)"
ROUNDS=${FP_ROUNDS:-7}
SCRATCH=$(mktemp -d "$([ -d /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/fp.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
RAW="$SCRATCH/raw"
: >"$RAW"

kinds=(plain hint unpack cat)
if [ -n "${FP_BASE:-}" ]; then
	BASE_TD_BENCH="$FP_BASE/contrib/bench/td_bench"
	BASE_TADOC="$FP_BASE/fs/tadoc"
	[ -x "$BASE_TD_BENCH" ] && [ -x "$BASE_TADOC" ] || die "FP_BASE=$FP_BASE has no td_bench or tadoc"
	kinds+=(base_plain base_hint base_unpack base_cat)
fi

# files ARCHIVE: the archive's regular files, NUL-separated, listed once
# into $SCRATCH; prints the list's path, and leaves their total size
# beside it (.bytes)
files() {
	local list
	list="$SCRATCH/$(basename "$1").files"
	if [ ! -s "$list" ]; then
		"$TADOC" ls -l "$1" | LIST="$list" perl -ne 'if (/^-\S*\s+(\d+) \S+ \S+ \S+ (.*)$/) { print "$2\0"; $b += $1 }
			END { open(my $f, ">", $ENV{LIST} . ".bytes") or die; print $f $b + 0, "\n" }' \
			>"$list" || die "tadoc ls -l $1 failed"
	fi
	echo "$list"
}

# one KIND ARCHIVE: prints "first warm" (MB/s; warm is - for unpack and cat)
one() {
	local kind=$1 a=$2 tb=$TD_BENCH td=$TADOC opt=()
	case $kind in base_*) tb=${BASE_TD_BENCH:-}; td=${BASE_TADOC:-} ;; esac
	case $kind in
	*unpack)
		local bytes t0
		bytes=$("$td" info "$a" | awk '/^original bytes/ { print $3 }')
		rm -rf "$SCRATCH/u"
		t0=$(now_ns)
		"$td" unpack "$a" "$SCRATCH/u" || die "$td unpack $a failed"
		awk -v b="$bytes" -v s="$(secs_since "$t0")" 'BEGIN { printf "%.1f -\n", b / s / 1e6 }'
		rm -rf "$SCRATCH/u"
		;;
	*cat)
		local list t0 paths
		list=$(files "$a")
		mapfile -d '' -t paths <"$list"
		t0=$(now_ns)
		"$td" cat "$a" "${paths[@]}" >/dev/null || die "$td cat $a (${#paths[@]} files) failed"
		awk -v b="$(cat "$list.bytes")" -v s="$(secs_since "$t0")" 'BEGIN { printf "%.1f -\n", b / s / 1e6 }'
		;;
	*)
		case $kind in *hint) opt=(-a) ;; esac
		local out
		out=$("$tb" "${opt[@]}" -d 0.05 -n 0 -p 4 "$a") || die "$tb ${opt[*]} $a failed"
		awk -F= '$1 == "seq_MB_per_s" { f = $2 } $1 == "seq_warm_MB_per_s" { w = $2 }
			END { if (f == "" || w == "") exit 1; print f, w }' <<<"$out" || die "$tb $a: no sequential figures"
		;;
	esac
}

for ((r = 1; r <= ROUNDS; r++)); do
	log "round $r of $ROUNDS"
	for a in "$@"; do
		n=${#kinds[@]}
		for ((k = 0; k < n; k++)); do
			kind=${kinds[$(((k + r) % n))]} # rotate which goes first
			res=$(one "$kind" "$a") || exit 1
			printf '%s %s %s\n' "$(basename "$a" .tadoc)" "$kind" "$res" >>"$RAW"
		done
	done
done

{
	echo "# First passes over fresh opens, $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo
	echo "Machine: $(machine_description); load average before: $(load_average). Commit $(git -C "$REPO_DIR" rev-parse --short HEAD 2>/dev/null || echo '?')${FP_BASE:+; base build: $(git -C "$FP_BASE" rev-parse --short HEAD 2>/dev/null || echo "$FP_BASE")}."
	echo "\`contrib/bench/first_pass.sh\`, $ROUNDS interleaved rounds, each run a fresh process; cells: median MB/s (min-max)."
	echo
	python3 - "$RAW" "${kinds[@]}" <<'EOF'
import statistics as S, sys
raw, kinds = sys.argv[1], sys.argv[2:]
d = {}
for line in open(raw):
    c, k, f, w = line.split()
    d.setdefault(c, {}).setdefault(k, []).append((float(f), None if w == "-" else float(w)))
title = {"plain": "first pass, no hint", "hint": "first pass, will_read", "unpack": "tadoc unpack",
         "cat": "tadoc cat, every file", "base_plain": "base: first pass", "base_hint": "base: will_read",
         "base_unpack": "base: tadoc unpack", "base_cat": "base: tadoc cat"}
print("| corpus | " + " | ".join(title[k] for k in kinds) + " | warm, no hint | warm, will_read |")
print("|---|" + "---:|" * (len(kinds) + 2))
def cell(v):
    return "%.0f (%.0f-%.0f)" % (S.median(v), min(v), max(v))
for c, m in d.items():
    row = [cell([x[0] for x in m[k]]) for k in kinds]
    row += ["%.0f" % S.median(x[1] for x in m[k]) for k in ("plain", "hint")]
    print("| %s | %s |" % (c, " | ".join(row)))
EOF
	echo
	echo "Raw runs (corpus, kind, first MB/s, warm MB/s):"
	echo
	echo '```'
	cat "$RAW"
	echo '```'
} >"$OUT"
log "wrote $OUT"
