#!/usr/bin/env bash
# run-all.sh: build the benchmark programs, run compress.sh and mount.sh side
# by side on the same corpora, and write contrib/bench/results-<date>.md.
#
# Usage: contrib/bench/run-all.sh CORPORA_DIR [NAME...]   (root for mount.sh)
#   CORPORA_DIR holds the corpora fetched by ../shared/corpora/fetch DEST;
#   NAME defaults to: sotu spam gcide linuxdoc.
# Env: BUILD (default build-bench: a release build configured here if
# missing), BENCH_WORK (scratch, default a new temporary directory, removed
# at the end unless set), RESULTS (output file), ROUNDS, PREAD_SECS, TD_SECS,
# BENCH_COMMIT (commit to name when the tree is not a git checkout).
set -u -o pipefail
BUILD=${BUILD:-build-bench}
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"

if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
	sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
	exit $([ $# -lt 1 ] && echo 2 || echo 0)
fi
CORPORA=$(cd "$1" && pwd) || die "$1: not a directory"
shift
NAMES=("$@")
[ ${#NAMES[@]} -eq 0 ] && NAMES=("${DEFAULT_CORPORA[@]}")

if [ ! -f "$BUILD/build.ninja" ]; then
	log "configuring $BUILD (release)"
	meson setup "$BUILD" "$REPO_DIR" -Dbuildtype=release -Db_ndebug=if-release -Dwerror=false -Dgpu=disabled >&2 || die "meson setup failed"
fi
log "building"
meson compile -C "$BUILD" noopfs pread_bench >&2 || die "cannot build noopfs/pread_bench"
for t in tadoc tadocfs td_bench; do
	meson compile -C "$BUILD" "$t" >&2 || log "$t does not build yet: its numbers read n/a"
done

KEEP_WORK=${BENCH_WORK:+1}
bench_setup_work
export BUILD BENCH_WORK
[ -n "$KEEP_WORK" ] || trap 'rm -rf "$BENCH_WORK"' EXIT

STAMP=$(date -u +%Y-%m-%d)
RESULTS=${RESULTS:-$BENCH_DIR/results-$STAMP.md}
TMP_RESULTS="$BENCH_WORK/results.md"

ver() { "$@" 2>&1 | head -n 1 | tr -s ' ' | cut -c1-80; }
if [ -n "${BENCH_COMMIT:-}" ]; then
	commit=$BENCH_COMMIT   # e.g. when run from a `git archive` export
else
	commit=$(git -C "$REPO_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)
	git -C "$REPO_DIR" diff --quiet HEAD 2>/dev/null || commit="$commit (with local changes)"
fi

{
	echo "## Benchmarks ($STAMP)"
	echo
	echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "- Machine: $(machine_description)"
	echo "- tadocfs commit: $commit; build: $(grep -m1 -o "buildtype=[a-z]*" "$BUILD/meson-logs/meson-log.txt" 2>/dev/null || echo default)"
	echo "- Tools: $(ver zstd --version); $(ver xz --version); $(ver mksquashfs -version); $(ver squashfuse --version 2>&1 | grep -i squashfuse || true); libfuse $(pkg-config --modversion fuse3 2>/dev/null || echo '?'); $(ver tar --version)"
	echo "- Load average at start (1/5/15 min): $(load_average); other work on the machine adds noise"
	echo "- Corpora: ${NAMES[*]} (from \`../shared/corpora/fetch\`)"
	echo "- Scripts: \`contrib/bench/run-all.sh\` (\`compress.sh\`, \`mount.sh\`, \`td_bench\`, \`pread_bench\`, \`noopfs\`)"
	echo
} >"$TMP_RESULTS"

log "compress.sh"
"$BENCH_DIR/compress.sh" "$CORPORA" "${NAMES[@]}" >>"$TMP_RESULTS" || log "compress.sh failed"
echo >>"$TMP_RESULTS"
if [ "$(id -u)" = 0 ]; then
	log "mount.sh"
	"$BENCH_DIR/mount.sh" "$CORPORA" "${NAMES[@]}" >>"$TMP_RESULTS" || log "mount.sh failed"
else
	echo "_mount.sh skipped: it needs root (mount, drop_caches)._" >>"$TMP_RESULTS"
fi
printf '\n_Load average at the end (1/5/15 min): %s; finished %s._\n' "$(load_average)" "$(date -u '+%H:%M UTC')" >>"$TMP_RESULTS"
cp "$TMP_RESULTS" "$RESULTS"
log "results written to $RESULTS"
cat "$RESULTS"
