#!/usr/bin/env bash
# Build and run every test: the whole suite in build/ (-Dgpu=auto; GPU tests skip without
# a GPU), the same suite under ASan+UBSan in build-asan/, then a short libFuzzer run of the
# archive reader (clang) in build-fuzz/. Exits non-zero if anything failed.
#
# Usage: contrib/test-all.sh            (from anywhere; installs missing Debian packages first)
# Environment: JOBS (parallel builds and tests, default 2), FUZZ_SECONDS (default 60, 0 skips
# the fuzz run), SKIP_ASAN=1, BUILD_PREFIX (default "build": build/, build-asan/, build-fuzz/),
# TADOC_CORPORA (where ../shared/corpora/fetch put the real corpora, for tests/corpus_real.sh).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

# Set-up: the Debian packages (a no-op when they are installed, as in CI).
contrib/install-deps.sh --test

jobs=${JOBS:-2}
fuzz_seconds=${FUZZ_SECONDS:-60}
prefix=${BUILD_PREFIX:-build}
status=0
summary=()
total_ok=0 total_fail=0 total_skip=0

section() { printf '\n==== %s ====\n' "$*"; }

# setup DIR [meson options...]: configure (or reconfigure with these options) and build.
setup() {
	local dir=$1; shift
	if [ -f "$dir/build.ninja" ]; then
		meson setup --reconfigure "$dir" "$@" >/dev/null
	else
		meson setup "$dir" "$@" >/dev/null
	fi
}

# suite NAME DIR [MESON TEST OPTIONS...]: build and run meson test in DIR; print and
# remember its summary.
suite() {
	local name=$1 dir=$2 rc=0
	shift 2
	section "$name: build ($dir)"
	if ! ninja -C "$dir" -j "$jobs"; then
		summary+=("$name: BUILD FAILED")
		status=1
		return
	fi
	section "$name: meson test ($dir)"
	meson test -C "$dir" --num-processes "$jobs" --print-errorlogs "$@" || rc=$?
	[ "$rc" -eq 0 ] || status=1
	local line
	line=$(python3 - "$dir/meson-logs/testlog.json" <<-'EOF'
		import collections, json, sys
		c = collections.Counter()
		for l in open(sys.argv[1]):
		    if l.strip():
		        c[json.loads(l)["result"]] += 1
		ok = c["OK"]
		fail = c["FAIL"] + c["ERROR"] + c["TIMEOUT"] + c["UNEXPECTEDPASS"]
		print("Ok: %d Fail: %d Skipped: %d Expected Fail: %d Timeout: %d"
		      % (ok, fail, c["SKIP"], c["EXPECTEDFAIL"], c["TIMEOUT"]))
	EOF
	) || line="no test log"
	summary+=("$name: $line (meson test exit $rc)")
	local n
	n=$(sed -n 's/^Ok: \([0-9]*\) Fail: \([0-9]*\) Skipped: \([0-9]*\).*/\1 \2 \3/p' <<<"$line")
	if [ -n "$n" ]; then
		set -- $n
		total_ok=$((total_ok + $1)) total_fail=$((total_fail + $2)) total_skip=$((total_skip + $3))
	else
		total_fail=$((total_fail + 1))
	fi
}

# 1. The suite as users build it.
setup "$prefix" -Dgpu=auto -Dtests=enabled
suite "default" "$prefix"

# 2. The same suite under AddressSanitizer + UndefinedBehaviorSanitizer. Leak checking stays
# on, FUSE daemons included (they unmount and exit normally); UB aborts the test.
if [ "${SKIP_ASAN:-0}" != 1 ]; then
	setup "$prefix-asan" -Dgpu=auto -Dtests=enabled -Db_sanitize=address,undefined -Db_lundef=false
	# Longer per-test limits here: gpu_emu (32 coroutine stacks swapped through
	# ASan's swapcontext) ran 11-15 minutes under the sanitizers on 2 cores,
	# near its 15-minute limit; here it checks a quarter of the random requests
	# (the default suite checks them all).
	TD_EMU_SAMPLES_DIV=${TD_EMU_SAMPLES_DIV:-4} \
	ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=1:print_summary=1} \
	UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1:print_summary=1} \
		suite "asan+ubsan" "$prefix-asan" --timeout-multiplier 3
fi

# 3. libFuzzer on the archive reader: seeds from tests/fuzz_seeds.sh and the
# inputs that once crashed it (tests/fuzz-regress/), a timed run.
if [ "$fuzz_seconds" -gt 0 ]; then
	section "fuzz: build ($prefix-fuzz, clang)"
	fz=$prefix-fuzz
	if CC=clang setup "$fz" -Dgpu=disabled -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false &&
		ninja -C "$fz" -j "$jobs" tests/fuzz_archive fs/tadoc; then
		section "fuzz: fuzz_archive for ${fuzz_seconds}s"
		rm -rf "$fz/fuzz-seeds"
		mkdir -p "$fz/fuzz-corpus" "$fz/fuzz-artifacts"
		tests/fuzz_seeds.sh "$fz/fuzz-seeds" "$fz/fs/tadoc" 2>/dev/null
		rc=0
		"$fz/tests/fuzz_archive" -max_total_time="$fuzz_seconds" -max_len=65536 -timeout=20 \
			-rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$fz/fuzz-artifacts/" \
			"$fz/fuzz-corpus" "$fz/fuzz-seeds" tests/fuzz-regress >"$fz/fuzz.log" 2>&1 || rc=$?
		tail -25 "$fz/fuzz.log"
		if [ "$rc" -eq 0 ]; then
			total_ok=$((total_ok + 1))
			summary+=("fuzz: Ok: 1 Fail: 0 (${fuzz_seconds}s, $(grep -c . <(ls "$fz/fuzz-corpus")) corpus inputs)")
		else
			total_fail=$((total_fail + 1))
			summary+=("fuzz: Ok: 0 Fail: 1 (exit $rc; reproducer in $fz/fuzz-artifacts/, log $fz/fuzz.log)")
			status=1
		fi
	else
		summary+=("fuzz: BUILD FAILED")
		total_fail=$((total_fail + 1))
		status=1
	fi
fi

section "summary"
printf '%s\n' "${summary[@]}"
[ "$status" -eq 0 ] || [ "$total_fail" -gt 0 ] || total_fail=1
[ "$status" -eq 0 ] && echo "ALL TESTS PASSED" || echo "SOME TESTS FAILED"
echo "tests: $total_ok passed, $total_fail failed, $total_skip skipped"
exit "$status"
