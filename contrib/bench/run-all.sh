#!/usr/bin/env bash
# run-all.sh: build the benchmark programs, run compress.sh and mount.sh side
# by side on the same corpora, and replace contrib/bench/results/compress.md
# and results/mount.md with this run (git keeps the earlier runs).
#
# Usage: contrib/bench/run-all.sh CORPORA_DIR [NAME...]   (root for mount.sh)
#   CORPORA_DIR holds the corpora fetched by ../shared/corpora/fetch DEST;
#   NAME defaults to: sotu spam gcide linuxdoc.
# Env: BUILD (default build-bench: a release build configured here if
# missing), BENCH_WORK (scratch, default a new temporary directory, removed
# at the end unless set), RESULTS_DIR (default contrib/bench/results), ROUNDS, PREAD_SECS, TD_SECS,
# BENCH_COMMIT (commit to name when the tree is not a git checkout).
set -u -o pipefail
BUILD=${BUILD:-build-bench}
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"

if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
	sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
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
# targets by path: "tadoc" alone is ambiguous (fs/tadoc and libtadoc.so)
for t in fs/tadoc fs/tadocfs contrib/bench/td_bench; do
	ninja -C "$BUILD" "$t" >&2 || log "$t does not build yet: its numbers read n/a"
done

KEEP_WORK=${BENCH_WORK:+1}
bench_setup_work
export BUILD BENCH_WORK
[ -n "$KEEP_WORK" ] || trap 'rm -rf "$BENCH_WORK"' EXIT

STAMP=$(date -u +%Y-%m-%d)
RESULTS_DIR=${RESULTS_DIR:-$BENCH_DIR/results}
mkdir -p "$RESULTS_DIR"

ver() { "$@" 2>&1 | head -n 1 | tr -s ' ' | cut -c1-80; }
if [ -n "${BENCH_COMMIT:-}" ]; then
	commit=$BENCH_COMMIT   # e.g. when run from a `git archive` export
else
	commit=$(git -C "$REPO_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)
	git -C "$REPO_DIR" diff --quiet HEAD 2>/dev/null || commit="$commit (with local changes)"
fi

# header TITLE: the machine, date and commit lines every results file starts with.
header() {
	echo "# $1"
	echo
	echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "- machine: $(machine_description)"
	echo "- commit: $commit; build: $(grep -m1 -o "buildtype=[a-z]*" "$BUILD/meson-logs/meson-log.txt" 2>/dev/null || echo default)"
	echo "- tools: $(ver zstd --version); $(ver xz --version); $(ver mksquashfs -version); $(ver squashfuse --version 2>&1 | grep -i squashfuse || true); libfuse $(pkg-config --modversion fuse3 2>/dev/null || echo '?'); $(ver tar --version)"
	echo "- load average at start (1/5/15 min): $(load_average); other work on the machine adds noise"
	echo "- corpora: ${NAMES[*]} (from \`../shared/corpora/fetch\`)"
	echo "- rerun: \`contrib/bench/run-all.sh CORPORA\` (replaces this file; git keeps the earlier runs)"
	echo
}

# one NAME SCRIPT: run SCRIPT into results/NAME.md (through a scratch file, so a failed
# run leaves the last results in place).
one() {
	local name=$1 script=$2 tmp="$BENCH_WORK/$1.md"
	header "$name.sh ($STAMP)" >"$tmp"
	log "$name.sh"
	if "$BENCH_DIR/$script" "$CORPORA" "${NAMES[@]}" >>"$tmp"; then
		printf '\n_Load average at the end (1/5/15 min): %s; finished %s._\n' "$(load_average)" "$(date -u '+%H:%M UTC')" >>"$tmp"
		cp "$tmp" "$RESULTS_DIR/$name.md"
		log "results written to $RESULTS_DIR/$name.md"
		cat "$RESULTS_DIR/$name.md"
	else
		log "$name.sh failed; $RESULTS_DIR/$name.md left as it was"
	fi
}

one compress compress.sh
if [ "$(id -u)" = 0 ]; then
	one mount mount.sh
else
	log "mount.sh skipped: it needs root (mount, drop_caches)"
fi
