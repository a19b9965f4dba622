# bench_lib.sh: helpers shared by the contrib/bench scripts (sourced, not run).
#
# Environment understood by every script:
#   BUILD        meson build directory (default: build, relative to the repo)
#   BENCH_WORK   scratch directory for archives, images and mount points
#                (default: a new mktemp -d directory; kept when set)
#   TADOC TADOCFS TD_BENCH NOOPFS PREAD_BENCH   override program paths

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$BENCH_DIR/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD="$REPO_DIR/$BUILD" ;; esac
DEFAULT_CORPORA=(sotu spam gcide linuxdoc)
export LC_ALL=C.UTF-8

log() { printf '[bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }

# bench_bin NAME SUBDIR: the program NAME from $BUILD/SUBDIR, else from PATH.
bench_bin() {
	local name=$1 sub=$2
	if [ -x "$BUILD/$sub/$name" ]; then
		printf '%s\n' "$BUILD/$sub/$name"
	elif command -v "$name" >/dev/null 2>&1; then
		command -v "$name"
	else
		return 1
	fi
}

bench_setup_bins() {
	TADOC=${TADOC:-$(bench_bin tadoc fs || true)}
	TADOCFS=${TADOCFS:-$(bench_bin tadocfs fs || true)}
	TD_BENCH=${TD_BENCH:-$(bench_bin td_bench contrib/bench || true)}
	NOOPFS=${NOOPFS:-$(bench_bin noopfs contrib/bench || true)}
	PREAD_BENCH=${PREAD_BENCH:-$(bench_bin pread_bench contrib/bench || true)}
}

bench_setup_work() {
	if [ -z "${BENCH_WORK:-}" ]; then
		BENCH_WORK=$(mktemp -d "${TMPDIR:-/tmp}/tadoc-bench.XXXXXX")
	fi
	mkdir -p "$BENCH_WORK"
	BENCH_WORK=$(cd "$BENCH_WORK" && pwd)
}

# GNU time for peak RSS (Debian package "time").
bench_need_gnu_time() {
	if ! /usr/bin/time -f %M true >/dev/null 2>&1; then
		die "GNU time (/usr/bin/time) is needed for peak RSS: apt-get install time"
	fi
}

now_ns() { date +%s%N; }

# secs_since START_NS: seconds (3 decimals) elapsed since START_NS.
secs_since() {
	local end
	end=$(now_ns)
	awk -v a="$1" -v b="$end" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'
}

# timed CMD...: run CMD (stdout and stderr to $BENCH_WORK/last.log); sets
# T_SECS (wall seconds) and T_RSS_KB (peak RSS of CMD and its children).
# Returns CMD's status.
timed() {
	local t0 rc
	t0=$(now_ns)
	/usr/bin/time -f %M -o "$BENCH_WORK/time.out" "$@" >"$BENCH_WORK/last.log" 2>&1
	rc=$?
	T_SECS=$(secs_since "$t0")
	T_RSS_KB=$(tail -n 1 "$BENCH_WORK/time.out")
	return $rc
}

# file_bytes DIR: total size of the regular files under DIR.
file_bytes() { find "$1" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%d", s }'; }

# div A B [DECIMALS]: A / B, or "-" if B is zero or not a number.
div() {
	awk -v a="$1" -v b="$2" -v d="${3:-2}" 'BEGIN {
		num = "^[0-9]*[.]?[0-9]+([eE][-+]?[0-9]+)?$"
		if (a !~ num || b !~ num || b + 0 == 0) { print "-"; exit }
		printf "%.*f", d, a / b }'
}

# pct A B: 100 * A / B, no decimals, with a % sign ("-" when undefined).
pct() {
	local v
	v=$(awk -v a="$1" -v b="$2" 'BEGIN {
		num = "^[0-9]*[.]?[0-9]+([eE][-+]?[0-9]+)?$"
		if (a !~ num || b !~ num || b + 0 == 0) print "-"; else printf "%.0f%%", 100 * a / b }')
	printf '%s' "$v"
}

# mbps BYTES SECS: megabytes (1e6) per second, one decimal.
mbps() { div "$(div "$1" 1000000 6)" "$2" 1; }

drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# tar_cold DIR: seconds of one whole-tree `tar cf - . | cat > /dev/null` of
# DIR after dropping every cache and loading tar and cat again (untimed:
# the tools' own binaries read back from disk are the same for every
# filesystem); "-" when tar fails.
tar_cold() {
	local t0 t1
	drop_caches
	tar --version >/dev/null
	cat --version >/dev/null
	t0=$EPOCHREALTIME
	(cd "$1" && tar cf - . | cat >/dev/null) || { echo -; return; }
	t1=$EPOCHREALTIME
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f", b - a }'
}

# kv FILE KEY: the value of KEY=VALUE in FILE ("-" when absent).
kv() {
	local v
	v=$(grep -m1 "^$2=" "$1" 2>/dev/null | cut -d= -f2-)
	printf '%s' "${v:--}"
}

# median of the numbers given as arguments ("-" when none).
median() {
	printf '%s\n' "$@" | grep -E '^[0-9]*[.]?[0-9]+$' | sort -g | awk '{ v[NR] = $1 } END {
		if (NR == 0) print "-"; else print v[int((NR + 1) / 2)] }'
}

machine_description() {
	local cpu mem
	cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
	mem=$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
	printf '%s, %s cores (nproc), %s RAM, Linux %s' "${cpu:-unknown CPU}" "$(nproc)" "$mem" "$(uname -r)"
}

# hf_median JSON: median seconds of hyperfine's first result ("-" if none).
hf_median() {
	python3 -c 'import json, sys
try:
    print("%.6f" % json.load(open(sys.argv[1]))["results"][0]["median"])
except Exception:
    print("-")' "$1"
}

# hf RUNS PREPARE CMD: run CMD (a shell command line; without shell
# metacharacters it runs without a shell) RUNS times under
# hyperfine, PREPARE (may be empty) before each run; prints median seconds.
hf() {
	local runs=$1 prep=$2 cmd=$3 json="$BENCH_WORK/hf.json" shell=()
	rm -f "$json"
	# No shell for a plain command: sub-millisecond commands stay measurable.
	case $cmd in *[\|\&\;\<\>\$\(]*) ;; *) shell=(-N) ;; esac
	if [ -n "$prep" ]; then
		hyperfine "${shell[@]}" --style none --runs "$runs" --prepare "$prep" --export-json "$json" "$cmd" >/dev/null 2>&1
	else
		hyperfine "${shell[@]}" --style none --warmup 1 --runs "$runs" --export-json "$json" "$cmd" >/dev/null 2>&1
	fi || { echo -; return; }
	hf_median "$json"
}

# goal VALUE OP LIMIT: "yes" or "NO" for VALUE OP LIMIT (OP is >=, >, <=
# or <), "-" when VALUE is not a number.
goal() {
	awk -v a="$1" -v op="$2" -v b="$3" 'BEGIN {
		num = "^[0-9]*[.]?[0-9]+([eE][-+]?[0-9]+)?$"
		if (a !~ num) { print "-"; exit }
		a += 0; b += 0
		ok = op == ">=" ? a >= b : op == ">" ? a > b : op == "<=" ? a <= b : a < b
		print ok ? "yes" : "NO" }'
}

# load_average: the 1, 5 and 15 minute load averages.
load_average() { cut -d' ' -f1-3 /proc/loadavg; }

# run_cpu CMD...: one run, its output in BENCH_WORK/out.txt and err.txt; sets W_SECS (wall)
# and C_SECS (user + sys of CMD and its children, from getrusage: microseconds, where GNU
# time rounds to 10 ms).
run_cpu() {
	read -r W_SECS C_SECS < <(python3 -c '
import resource, subprocess, sys, time
r0 = resource.getrusage(resource.RUSAGE_CHILDREN)  # not zero after a launcher exec
t = time.monotonic()
with open(sys.argv[1], "wb") as out, open(sys.argv[2], "wb") as err:
    subprocess.run(sys.argv[3:], stdout=out, stderr=err)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print("%.5f %.5f" % (time.monotonic() - t, r.ru_utime + r.ru_stime - r0.ru_utime - r0.ru_stime))' "$BENCH_WORK/out.txt" "$BENCH_WORK/err.txt" "$@")
}

# runs N CMD...: N runs of run_cpu; sets W_MED (median wall) and C_MIN (least CPU).
runs() {
	local n=$1 ws=() cs=() i
	shift
	for ((i = 0; i < n; i++)); do
		run_cpu "$@"
		ws+=("$W_SECS")
		cs+=("$C_SECS")
	done
	W_MED=$(printf '%s\n' "${ws[@]}" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
	C_MIN=$(printf '%s\n' "${cs[@]}" | sort -g | head -n 1)
}

# ratio A B: A / B as "12x" or "3.4x"; ms SECS: milliseconds, one decimal below 0.1 s.
# A / B as "12x"; a B of 0 (under the clock's tick, e.g. a daemon's CPU in 10 ms ticks) gives no ratio.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b <= 0) { printf "n/a (0 measured)"; exit } printf (a / b < 10 ? "%.1fx" : "%.0fx"), a / b }'; }
ms() { awk -v s="$1" 'BEGIN { printf (s < 0.1 ? "%.1f" : "%.0f"), s * 1000 }'; }
