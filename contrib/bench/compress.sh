#!/usr/bin/env bash
# compress.sh: archive ratio and compression time of tadoc against zstd -3,
# zstd -19, xz -6 and mksquashfs -comp zstd, plus tadoc's read-side numbers
# (open time, random extract, sequential extract, unpack, cat, count/search).
#
# Usage: contrib/bench/compress.sh CORPORA_DIR [NAME...]
#   NAME defaults to: sotu spam gcide linuxdoc (directories in CORPORA_DIR).
# Markdown tables go to stdout, progress to stderr. Archives and images stay
# in $BENCH_WORK (see bench_lib.sh) for mount.sh to reuse. Ends with shards.sh
# (format 4 against format 5) unless SHARDS=0.
# Ratio = original bytes (sum of regular file sizes) / archive bytes (the
# whole file, every index included). zstd and xz compress `tar cf - .` of the
# tree; tools run with their default thread counts; inputs are read once
# before timing so every tool starts from a warm page cache.
set -u -o pipefail
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"

if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
	sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
	exit $([ $# -lt 1 ] && echo 2 || echo 0)
fi
CORPORA=$1
shift
NAMES=("$@")
[ ${#NAMES[@]} -eq 0 ] && NAMES=("${DEFAULT_CORPORA[@]}")

bench_setup_bins
bench_setup_work
bench_need_gnu_time
for t in zstd xz tar mksquashfs; do
	command -v $t >/dev/null || die "$t not found (Debian: zstd xz-utils tar squashfs-tools)"
done
[ -n "$TADOC" ] || log "tadoc not built: its columns read n/a"
[ -n "$TD_BENCH" ] || log "td_bench not built: engine numbers read n/a"
TD_THREADS=${TD_THREADS:-$(nproc)}

# words_for NAME: the query words used for a corpus.
words_for() {
	case $1 in
	sotu) echo the,government,freedom ;;
	spam) echo the,money,click ;;
	gcide) echo the,horse,Latin ;;
	linuxdoc) echo the,kernel,mutex ;;
	*) echo the,time,data ;;
	esac
}

RATIO_ROWS=""
DETAIL_ROWS=""
READ_ROWS=""
QUERY_ROWS=""
GOAL_ROWS=""

for name in "${NAMES[@]}"; do
	dir="$CORPORA/$name"
	[ -d "$dir" ] || die "$dir: no such corpus directory"
	log "$name: warming the page cache"
	tar cf - -C "$dir" . | cat >/dev/null
	orig=$(file_bytes "$dir")
	nfiles=$(find "$dir" -type f | wc -l)
	W="$BENCH_WORK/$name"
	mkdir -p "$W"
	declare -A bytes=() secs=() rss=()

	run_tool() { # KEY OUTFILE CMD...
		local key=$1 out=$2
		shift 2
		rm -f "$out"
		log "$name: $key"
		if timed "$@" && [ -s "$out" ]; then
			bytes[$key]=$(stat -c %s "$out")
			secs[$key]=$T_SECS
			rss[$key]=$(div "$T_RSS_KB" 1024 0)
		else
			log "$name: $key failed: $(tail -n 3 "$BENCH_WORK/last.log" | tr '\n' ' ')"
			bytes[$key]=-; secs[$key]=-; rss[$key]=-
		fi
	}

	if [ -n "$TADOC" ]; then
		run_tool tadoc "$W/$name.tadoc" "$TADOC" compress -o "$W/$name.tadoc" "$dir"
	else
		bytes[tadoc]=n/a; secs[tadoc]=n/a; rss[tadoc]=n/a
	fi
	run_tool zstd3 "$W/$name.tar.zst3" bash -c 'tar cf - -C "$1" . | zstd -3 -q -c >"$2"' _ "$dir" "$W/$name.tar.zst3"
	run_tool zstd19 "$W/$name.tar.zst19" bash -c 'tar cf - -C "$1" . | zstd -19 -q -c >"$2"' _ "$dir" "$W/$name.tar.zst19"
	run_tool xz6 "$W/$name.tar.xz" bash -c 'tar cf - -C "$1" . | xz -6 -c >"$2"' _ "$dir" "$W/$name.tar.xz"
	run_tool sqfs "$W/$name.sqfs" mksquashfs "$dir" "$W/$name.sqfs" -comp zstd -noappend -quiet -no-progress

	r() { div "$orig" "${bytes[$1]}" 2; }
	verdict="-"
	if [ "${bytes[tadoc]}" != n/a ] && [ "${bytes[tadoc]}" != - ] && [ "${bytes[sqfs]}" != - ]; then
		verdict=$([ "${bytes[tadoc]}" -le "${bytes[sqfs]}" ] && echo yes || echo NO)
	fi
	RATIO_ROWS+="| $name | $nfiles | $orig | $(r tadoc) | $(r zstd3) | $(r zstd19) | $(r xz6) | $(r sqfs) | $verdict |"$'\n'
	for key in tadoc zstd3 zstd19 xz6 sqfs; do
		case $key in
		tadoc) label='`tadoc compress`' ;;
		zstd3) label='tar + `zstd -3`' ;;
		zstd19) label='tar + `zstd -19`' ;;
		xz6) label='tar + `xz -6`' ;;
		sqfs) label='`mksquashfs -comp zstd`' ;;
		esac
		DETAIL_ROWS+="| $name | $label | ${bytes[$key]} | $(r $key) | ${secs[$key]} | $(mbps "$orig" "${secs[$key]}") | ${rss[$key]} |"$'\n'
	done

	# Read side of tadoc.
	A="$W/$name.tadoc"
	if [ -n "$TADOC" ] && [ -s "$A" ]; then
		tb="$W/td_bench.out"
		if [ -n "$TD_BENCH" ]; then
			log "$name: td_bench"
			"$TD_BENCH" -d "${TD_SECS:-2}" -p 4 -t "$TD_THREADS" -w "$(words_for "$name")" "$A" >"$tb" 2>"$W/td_bench.err" ||
				log "$name: td_bench failed: $(tail -n 2 "$W/td_bench.err" | tr '\n' ' ')"
		else
			: >"$tb"
		fi
		log "$name: tadoc unpack"
		rm -rf "$W/unpack"
		if timed "$TADOC" unpack "$A" "$W/unpack"; then
			unpack_mbps=$(mbps "$orig" "$T_SECS")
			exact=$(diff -r --no-dereference "$dir" "$W/unpack" >/dev/null 2>&1 && echo yes || echo NO)
		else
			unpack_mbps=failed; exact=-
		fi
		rm -rf "$W/unpack"
		# Every regular file, in find order, through as few `tadoc cat` processes
		# as xargs allows; checked against the plain files in the same order.
		(cd "$dir" && find . -type f -printf '%P\0') >"$W/files.nul"
		log "$name: tadoc cat of every file"
		if timed bash -c 'xargs -0 -a "$3" "$1" cat "$2" >/dev/null' _ "$TADOC" "$A" "$W/files.nul"; then
			cat_mbps=$(mbps "$orig" "$T_SECS")
			h1=$(xargs -0 -a "$W/files.nul" "$TADOC" cat "$A" | sha256sum)
			h2=$(cd "$dir" && xargs -0 -a "$W/files.nul" cat | sha256sum)
			[ "$h1" = "$h2" ] || cat_mbps="$cat_mbps (output DIFFERS)"
		else
			cat_mbps=failed
		fi
		GOAL_ROWS+="| $name | $(goal "$(r tadoc)" ">=" "$(r sqfs)") ($(r tadoc) vs $(r sqfs)) | $(goal "$(kv "$tb" seq_MB_per_s)" ">=" 500) ($(kv "$tb" seq_MB_per_s)) | $(goal "$(kv "$tb" rand4k_ops_per_s)" ">=" 100000) ($(kv "$tb" rand4k_ops_per_s)) | $(goal "$(kv "$tb" open_us_median)" "<" 10000) ($(kv "$tb" open_us_median) us) |"$'\n'
		READ_ROWS+="| $name | $(kv "$tb" open_us_median) | $(kv "$tb" rand64_ops_per_s) | $(kv "$tb" rand4k_ops_per_s) | $(kv "$tb" batch4k_ops_per_s) | $(kv "$tb" seq_MB_per_s) | $(kv "$tb" seq_warm_MB_per_s) | $unpack_mbps | $exact | $cat_mbps |"$'\n'
		IFS=, read -r -a ws <<<"$(words_for "$name")"
		for w in "${ws[@]}"; do
			QUERY_ROWS+="| $name | $w | $(kv "$tb" "count.$w") | $(kv "$tb" "count_us.$w") | $(kv "$tb" "search_hits.$w") | $(kv "$tb" "search_us.$w") |"$'\n'
		done
		QUERY_ROWS+="| $name | (all words x every file, batched, $(kv "$tb" count_batch_threads) threads) | $(kv "$tb" count_batch_n) requests | $(kv "$tb" count_batch_us) total | | |"$'\n'
	fi
	unset bytes secs rss
done

cat <<EOF
### Archive ratio (original bytes / archive bytes, every index included)

| corpus | files | original bytes | tadoc | zstd -3 | zstd -19 | xz -6 | mksquashfs zstd | tadoc >= squashfs |
|---|---:|---:|---:|---:|---:|---:|---:|:---:|
${RATIO_ROWS}
### Compression: size, time and peak memory

| corpus | tool | archive bytes | ratio | seconds | input MB/s | peak RSS MiB |
|---|---|---:|---:|---:|---:|---:|
${DETAIL_ROWS}
EOF
if [ -n "$READ_ROWS" ]; then
	cat <<EOF
### tadoc read side (engine via td_bench, one core unless noted; CLI wall time)

| corpus | open us (median) | random 64 B extract/s | random 4 KiB extract/s | batched 4 KiB extract/s ($TD_THREADS threads) | sequential cursor MB/s, first pass | warm (median of passes 2-4) | \`tadoc unpack\` MB/s | unpack byte-exact | \`tadoc cat\` every file MB/s |
|---|---:|---:|---:|---:|---:|---:|---:|:---:|---:|
${READ_ROWS}
### Goals of the compress issue (yes = met)

| corpus | ratio >= mksquashfs zstd | sequential extract >= 500 MB/s (one core) | random 4 KiB extract >= 100,000/s (one core) | open < 10 ms |
|---|:---:|:---:|:---:|:---:|
${GOAL_ROWS}
### tadoc count and search (whole corpus, median)

| corpus | word | count | count us | search hits | search us |
|---|---|---:|---:|---:|---:|
${QUERY_ROWS}
EOF
fi
# Format 4 against format 5 (shards.sh: shard sizes, -j 1 and -j 2, mksquashfs
# in the same run); SHARDS=0 leaves it out.
if [ "${SHARDS:-1}" != 0 ]; then
	printf '\n### Format 4 against format 5 (shards): `contrib/bench/shards.sh`\n\n'
	"$(dirname "${BASH_SOURCE[0]}")/shards.sh" "$CORPORA" "${NAMES[@]}"
fi
