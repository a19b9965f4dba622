#!/usr/bin/env bash
# corpus_real: compress a real corpus (State of the Union addresses, from ../shared/corpora/fetch),
# check verify, a byte-exact unpack, and word counts / search hits against the Python oracle.
# Corpora come from $TADOC_CORPORA, else the fetch script's default cache (fetched on demand);
# exits 77 (skipped) when neither has the corpus and it cannot be fetched.
# Needs: $TADOC, $TESTS_DIR; python3, diff.
set -euo pipefail

TADOC=${TADOC:?set TADOC to the tadoc binary}
TESTS_DIR=${TESTS_DIR:-$(cd "$(dirname "$0")" && pwd)}
PY=${PYTHON:-python3}
CORPUS=${TADOC_TEST_CORPUS:-sotu}

find_corpus() {
	local d
	for d in "${TADOC_CORPORA:-}" "${XDG_CACHE_HOME:-$HOME/.cache}/tadoc-corpora"; do
		if [ -n "$d" ] && [ -d "$d/$CORPUS" ] && [ -n "$(ls -A "$d/$CORPUS" 2>/dev/null)" ]; then
			echo "$d/$CORPUS"
			return 0
		fi
	done
	return 1
}

if ! src=$(find_corpus); then
	fetch=$TESTS_DIR/../../shared/corpora/fetch
	cache=${TADOC_CORPORA:-${XDG_CACHE_HOME:-$HOME/.cache}/tadoc-corpora}
	if [ -f "$fetch" ]; then
		# The fetch script gets every set in turn and keeps finished ones: run it in its own
		# process group and stop it once ours is done (or after 5 minutes).
		echo "fetching corpora into $cache (stopped once '$CORPUS' is there)" >&2
		setsid bash "$fetch" "$cache" >&2 &
		fpid=$!
		for _ in $(seq 300); do
			[ -f "$cache/$CORPUS/.done" ] && break
			kill -0 "$fpid" 2>/dev/null || break
			sleep 1
		done
		kill -- "-$fpid" 2>/dev/null || true
		wait "$fpid" 2>/dev/null || true
	fi
	if [ ! -f "$cache/$CORPUS/.done" ] || ! src=$(TADOC_CORPORA=$cache find_corpus); then
		echo "SKIP: corpus '$CORPUS' not available (set TADOC_CORPORA or provide ../shared/corpora/fetch)" >&2
		exit 77
	fi
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/corpus_real.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail=0
say() { echo "$*"; }
bad() { echo "FAIL: $*"; fail=1; }

say "corpus: $src ($(find "$src" -type f | wc -l) files, $(du -sb "$src" | cut -f1) bytes)"
start=$(date +%s.%N)
"$TADOC" compress -o "$work/c.tadoc" "$src"
end=$(date +%s.%N)
orig=$(find "$src" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
arc=$(stat -c %s "$work/c.tadoc")
say "compressed in $(awk -v s="$start" -v e="$end" 'BEGIN {printf "%.2f", e - s}') s, ratio $(awk -v o="$orig" -v a="$arc" 'BEGIN {printf "%.3f", o / a}')"
"$TADOC" verify "$work/c.tadoc" || bad "verify"

"$TADOC" unpack "$work/c.tadoc" "$work/u" || bad "unpack"
if diff -r --no-dereference "$src" "$work/u" >"$work/diff" 2>&1; then say "unpack: identical"; else bad "unpack differs: $(head -5 "$work/diff")"; fi
meta() { (cd "$1" && find . -mindepth 1 -printf '%p %y %m %T@\n' | LC_ALL=C sort); }
diff <(meta "$src") <(meta "$work/u") >"$work/mdiff" || bad "unpack metadata differs: $(head -5 "$work/mdiff")"

first=$(cd "$src" && find . -type f ! -name '.*' | LC_ALL=C sort | sed -n '1s|^\./||p')
counts=("the" "The" "America" "freedom" "Congress" "nuclear" "1945" "United" "people" "the $first" "Constitution $first")
searches=("liberty" "Americans" "the $first")
# The oracle reads the corpus once and answers every query (same code as 'oracle.py count/search').
"$PY" - "$TESTS_DIR" "$src" "$work" "${#counts[@]}" "${counts[@]}" "${searches[@]}" <<'PYEOF'
import os, sys
sys.path.insert(0, sys.argv[1])
import oracle
c = oracle.Corpus(sys.argv[2])
work, nc, specs = sys.argv[3], int(sys.argv[4]), sys.argv[5:]
for i, spec in enumerate(specs):
    w, _, p = spec.partition(" ")
    scope = os.fsencode(p)
    hits = c.hits(os.fsencode(w), scope)
    if i < nc:
        open("%s/count%d" % (work, i), "w").write("%d\n" % len(hits))
    else:
        with open("%s/search%d" % (work, i - nc), "wb") as f:
            for fn, off in hits:
                f.write(b"%d\n" % off if scope else fn + b":%d\n" % off)
PYEOF
for i in "${!counts[@]}"; do
	read -r w p <<<"${counts[$i]}"
	want=$(cat "$work/count$i")
	got=$("$TADOC" count "$work/c.tadoc" "$w" ${p:+"$p"}) || got="error"
	[ "$got" = "$want" ] && say "count ${counts[$i]}: $got" || bad "count ${counts[$i]}: tadoc $got, oracle $want"
done
for i in "${!searches[@]}"; do
	read -r w p <<<"${searches[$i]}"
	"$TADOC" search "$work/c.tadoc" "$w" ${p:+"$p"} >"$work/got" || true
	if cmp -s "$work/got" "$work/search$i"; then say "search ${searches[$i]}: $(wc -l <"$work/got") hits"
	else bad "search ${searches[$i]}: $(diff "$work/got" "$work/search$i" | head -3)"; fi
done
exit $fail
