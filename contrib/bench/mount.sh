#!/usr/bin/env bash
# mount.sh: tadocfs against squashfuse, squashfuse_ll, kernel squashfs (all on
# the same `mksquashfs -comp zstd` image), the plain directory and a no-op
# FUSE filesystem (the FUSE ceiling): mount-ready time, random 4 KiB pread
# rate with 1 and 8 threads from a cold page cache, whole-tree tar
# throughput, and getfattr word counts against grep -r.
#
# Usage: contrib/bench/mount.sh CORPORA_DIR [NAME...]   (run as root)
#   NAME defaults to: sotu spam gcide linuxdoc.
# Env: ROUNDS (3) repetitions, medians reported; PREAD_SECS (10) cap per
# pread run; TAR_ROUNDS (7) rounds of the interleaved cold tar; BENCH_WORK /
# BUILD as in bench_lib.sh (archives and images made by compress.sh are
# reused, missing ones are built here).
# Cold tar is measured twice: per filesystem (ROUNDS in a row, beside its
# warm rate) and interleaved (every FUSE and kernel mount live at once, one
# cold tar of each per round in rotating order), so drift of a shared
# machine falls on all alike; the goal row uses the interleaved medians.
# Random reads: every file opened first, caches dropped, then each 4 KiB-
# aligned block of the corpus is read at most once in random order with
# POSIX_FADV_RANDOM (no readahead), so each read misses the page cache
# unless the filesystem itself filled the page (see pread_bench.c).
set -u -o pipefail
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"

if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
	awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'
	exit $([ $# -lt 1 ] && echo 2 || echo 0)
fi
CORPORA=$1
shift
NAMES=("$@")
[ ${#NAMES[@]} -eq 0 ] && NAMES=("${DEFAULT_CORPORA[@]}")
ROUNDS=${ROUNDS:-3}
TAR_ROUNDS=${TAR_ROUNDS:-7}
PREAD_SECS=${PREAD_SECS:-10}
DROP="sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches'"
# Cold tar runs drop every cache, then load tar and cat again (untimed):
# the filesystem's pages start cold, the tools' own binaries and libraries
# do not (reading those back from disk is the same for every filesystem
# and was a third of a cold tar of sotu on the 2-core machine).
DROP_TAR="sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches; tar --version >/dev/null; cat --version >/dev/null'"

[ "$(id -u)" = 0 ] || die "mount.sh needs root (mount, drop_caches)"
[ -e /dev/fuse ] || die "/dev/fuse missing"
bench_setup_bins
bench_setup_work
for t in mksquashfs squashfuse fusermount3 getfattr setfattr hyperfine python3 tar grep; do
	command -v $t >/dev/null || die "$t not found (Debian: squashfs-tools squashfuse fuse3 attr hyperfine python3)"
done
[ -n "$PREAD_BENCH" ] || die "pread_bench not built (ninja -C $BUILD)"
[ -n "$NOOPFS" ] || die "noopfs not built (ninja -C $BUILD)"
[ -n "$TADOCFS" ] || log "tadocfs not built: its rows read n/a"
HAVE_LL=$(command -v squashfuse_ll >/dev/null && echo 1 || echo 0)
READY=$BENCH_DIR/mount_ready.py

FSES=(tadocfs squashfuse)
[ "$HAVE_LL" = 1 ] && FSES+=(squashfuse_ll)
FSES+=(kernel plain noop)

fs_label() {
	case $1 in
	tadocfs) echo tadocfs ;;
	squashfuse) echo squashfuse ;;
	squashfuse_ll) echo squashfuse_ll ;;
	kernel) echo kernel squashfs ;;
	plain) echo plain directory ;;
	noop) echo no-op FUSE ceiling ;;
	esac
}

MOUNTED=()
cleanup() {
	local m
	for m in "${MOUNTED[@]}"; do
		if mountpoint -q "$m"; then
			fusermount3 -u "$m" 2>/dev/null || umount "$m" 2>/dev/null || umount -l "$m"
		fi
	done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# do_mount KIND MNT: mount and print the milliseconds until MNT answers stat.
do_mount() {
	local kind=$1 mnt=$2
	case $kind in
	tadocfs) python3 "$READY" "$mnt" "$TADOCFS" "$A" "$mnt" ;;
	squashfuse) python3 "$READY" "$mnt" squashfuse "$IMG" "$mnt" ;;
	squashfuse_ll) python3 "$READY" "$mnt" squashfuse_ll "$IMG" "$mnt" ;;
	kernel) python3 "$READY" "$mnt" mount -t squashfs -o loop,ro "$IMG" "$mnt" ;;
	noop) python3 "$READY" "$mnt" "$NOOPFS" -o "files=$NOOP_FILES,size=$NOOP_SIZE" "$mnt" ;;
	esac
}

# The no-op ceiling gets tadocfs's readahead window (its read_ahead default,
# 8M); squashfuse runs as shipped.
noop_readahead() {
	local dev
	mountpoint -q "$1" || return 0
	dev=$(awk -v m="$1" '$5 == m { d = $3 } END { print d }' /proc/self/mountinfo)
	[ -n "$dev" ] && echo 8192 >"/sys/class/bdi/$dev/read_ahead_kb" 2>/dev/null ||
		log "$name: could not set the no-op mount's read_ahead_kb"
}


do_umount() {
	local kind=$1 mnt=$2 i
	for i in 1 2 3 4 5; do
		mountpoint -q "$mnt" || return 0
		if [ "$kind" = kernel ]; then umount "$mnt"; else fusermount3 -u "$mnt"; fi 2>/dev/null && return 0
		sleep 0.2
	done
	umount -l "$mnt"
}

words_for() {
	case $1 in
	sotu) echo the government freedom ;;
	spam) echo the money click ;;
	gcide) echo the horse Latin ;;
	linuxdoc) echo the kernel mutex ;;
	*) echo the time data ;;
	esac
}

READY_ROWS=""
PREAD_ROWS=""
TAR_ROWS=""
TARI_ROWS=""
REL_ROWS=""
XATTR_ROWS=""
SEARCH_ROWS=""
GOAL_ROWS=""

# The floor for a whole getfattr process: the same command on a plain local
# file holding a user xattr (process start, no filesystem work). A count
# "100x faster than grep" at process level needs grep to take 100x this.
floor_file="$BENCH_WORK/xattr-floor"
echo x >"$floor_file"
if setfattr -n user.tadoc.floor -v 1 "$floor_file" 2>/dev/null; then
	GX_FLOOR=$(hf $((ROUNDS * 3)) "" "getfattr --only-values -n user.tadoc.floor $floor_file")
else
	GX_FLOOR=-
fi

for name in "${NAMES[@]}"; do
	dir="$CORPORA/$name"
	[ -d "$dir" ] || die "$dir: no such corpus directory"
	dir=$(cd "$dir" && pwd)
	W="$BENCH_WORK/$name"
	mkdir -p "$W/mnt"
	IMG="$W/$name.sqfs"
	A="$W/$name.tadoc"
	if [ ! -s "$IMG" ]; then
		log "$name: mksquashfs"
		mksquashfs "$dir" "$IMG" -comp zstd -noappend -quiet -no-progress >/dev/null || die "mksquashfs failed"
	fi
	if [ -n "$TADOCFS" ] && [ ! -s "$A" ] && [ -n "$TADOC" ]; then
		log "$name: tadoc compress"
		"$TADOC" compress -o "$A" "$dir" >/dev/null 2>"$W/compress.err" || log "$name: tadoc compress failed: $(tail -n 2 "$W/compress.err")"
	fi
	orig=$(file_bytes "$dir")
	(cd "$dir" && find . -type f -size +0 -printf '%P\n') >"$W/files.list"
	nfiles=$(wc -l <"$W/files.list")
	NOOP_FILES=$nfiles
	NOOP_SIZE=$(( (orig + nfiles - 1) / nfiles ))
	seq -f 'f%06g' 0 $((nfiles - 1)) >"$W/noop.list"
	minx=""
	declare -A ready=() r1=() p50_1=() p99_1=() r8=() p50_8=() p99_8=() tarc=() tarw=()

	for kind in "${FSES[@]}"; do
		mnt="$W/mnt/$kind"
		list="$W/files.list"
		ready[$kind]=-
		if [ "$kind" = tadocfs ] && { [ -z "$TADOCFS" ] || [ ! -s "$A" ]; }; then
			for v in r1 p50_1 p99_1 r8 p50_8 p99_8 tarc tarw; do eval "$v[\$kind]=n/a"; done
			ready[$kind]=n/a
			continue
		fi
		if [ "$kind" = plain ]; then
			mnt=$dir
		else
			mkdir -p "$mnt"
			MOUNTED+=("$mnt")
			ms=()
			for ((i = 1; i <= ROUNDS; i++)); do
				mountpoint -q "$mnt" && do_umount "$kind" "$mnt"
				drop_caches
				m=$(do_mount "$kind" "$mnt") || { log "$name: mounting $kind failed"; m=-; break; }
				ms+=("$m")
			done
			ready[$kind]=$(median "${ms[@]}")
			[ "$kind" = noop ] && noop_readahead "$mnt"
			if ! mountpoint -q "$mnt"; then
				for v in r1 p50_1 p99_1 r8 p50_8 p99_8 tarc tarw; do eval "$v[\$kind]=failed"; done
				continue
			fi
		fi
		[ "$kind" = noop ] && list="$W/noop.list"
		for t in 1 8; do
			rs=(); p50s=(); p99s=()
			for ((i = 1; i <= ROUNDS; i++)); do
				log "$name: $kind pread 4 KiB x $t threads (round $i)"
				out=$("$PREAD_BENCH" -C "$mnt" -t "$t" -s 4096 -u -D -d "$PREAD_SECS" -S "$i" "$list" 2>&1) ||
					log "$name: pread_bench on $kind: $out"
				printf '%s\n' "$out" | tr ' ' '\n' >"$W/pread.out"
				rs+=("$(kv "$W/pread.out" reads_per_s)")
				p50s+=("$(kv "$W/pread.out" p50_us)")
				p99s+=("$(kv "$W/pread.out" p99_us)")
			done
			eval "r$t[\$kind]=\$(median \"\${rs[@]}\")"
			eval "p50_$t[\$kind]=\$(median \"\${p50s[@]}\")"
			eval "p99_$t[\$kind]=\$(median \"\${p99s[@]}\")"
		done
		log "$name: $kind tar (cold, then warm)"
		s=$(hf "$ROUNDS" "$DROP_TAR" "cd '$mnt' && tar cf - . | cat > /dev/null")
		tarc[$kind]=$(mbps "$orig" "$s")
		s=$(hf "$ROUNDS" "" "cd '$mnt' && tar cf - . | cat > /dev/null")
		tarw[$kind]=$(mbps "$orig" "$s")

		if [ "$kind" = tadocfs ]; then
			minx=""
			for w in $(words_for "$name"); do
				log "$name: getfattr count.$w vs grep"
				xt=$(python3 "$BENCH_DIR/xattr_time.py" "$mnt" "user.tadoc.count.$w" 2>/dev/null | tr ' ' '\n')
				sc_first=$(printf '%s\n' "$xt" | sed -n 's/^first=//p')
				sc_med=$(printf '%s\n' "$xt" | sed -n 's/^median=//p')
				val=$(getfattr --only-values -n "user.tadoc.count.$w" "$mnt" 2>"$W/getfattr.err") || val="error: $(head -n 1 "$W/getfattr.err")"
				g=$(cd "$dir" && grep -r -o -w -a -- "$w" . | wc -l)
				gx_cold=$(hf "$ROUNDS" "$DROP" "getfattr --only-values -n user.tadoc.count.$w $mnt")
				gx_warm=$(hf $((ROUNDS * 3)) "" "getfattr --only-values -n user.tadoc.count.$w $mnt")
				gr=$(hf "$ROUNDS" "" "cd '$dir' && grep -r -o -w -a -- '$w' . | wc -l")
				grc=$(hf "$ROUNDS" "$DROP" "cd '$dir' && grep -r -o -w -a -- '$w' . | wc -l")
				match=$([ "$val" = "$g" ] && echo yes || echo NO)
				x=$(div "$gr" "$gx_warm" 1)
				minx=$(printf '%s\n' $minx "$x" | grep -E '^[0-9.]+$' | sort -g | head -n 1)
				XATTR_ROWS+="| $name | $w | $val | $g | $match | $(div "$gx_warm" 0.001 2) | $(div "$gx_cold" 0.001 2) | $(div "$gr" 0.001 1) | $(div "$grc" 0.001 1) | $(div "$gr" "$gx_warm" 0)x | $(div "$gr" "$GX_FLOOR" 0)x | ${sc_first:--} | ${sc_med:--} | $(div "$gr" "$(div "${sc_med:--}" 1000000 9)" 0)x |"$'\n'
				# Search: every hit's path and byte offset, against grep -b.
				log "$name: getfattr search.$w vs grep -b"
				xt=$(python3 "$BENCH_DIR/xattr_time.py" "$mnt" "user.tadoc.search.$w" 2>/dev/null | tr ' ' '\n')
				ss_first=$(printf '%s\n' "$xt" | sed -n 's/^first=//p')
				ss_med=$(printf '%s\n' "$xt" | sed -n 's/^median=//p')
				getfattr --only-values -n "user.tadoc.search.$w" "$mnt" >"$W/search.tadoc" 2>/dev/null || :
				(cd "$dir" && grep -r -o -b -w -a -- "$w" . | sed -e 's|^\./||' -e 's|:[^:]*$||' | LC_ALL=C sort) >"$W/search.grep"
				if grep -q '^#more ' "$W/search.tadoc"; then
					smatch="first $(grep -vc '^#more ' "$W/search.tadoc") (continued)"
				else
					smatch=$(LC_ALL=C sort "$W/search.tadoc" | cmp -s - "$W/search.grep" && echo yes || echo NO)
				fi
				sx_warm=$(hf $((ROUNDS * 3)) "" "getfattr --only-values -n user.tadoc.search.$w $mnt")
				sgr=$(hf "$ROUNDS" "" "cd '$dir' && grep -r -o -b -w -a -- '$w' . | wc -l")
				SEARCH_ROWS+="| $name | $w | $(grep -c . "$W/search.grep") | $smatch | $(div "$sx_warm" 0.001 2) | $(div "$sgr" 0.001 1) | $(div "$sgr" "$sx_warm" 0)x | ${ss_first:--} | ${ss_med:--} | $(div "$sgr" "$(div "${ss_med:--}" 1000000 9)" 0)x |"$'\n'
			done
		fi
		[ "$kind" != plain ] && do_umount "$kind" "$mnt"
	done

	# Interleaved cold tar: all mounts live, one run of each per round, the
	# order rotated every round.
	declare -A tari=() tsec=()
	IK=()
	for kind in "${FSES[@]}"; do
		[ "$kind" = tadocfs ] && [ "${ready[tadocfs]}" = n/a ] && continue
		mnt="$W/mnt/$kind"
		[ "$kind" = plain ] && mnt=$dir
		if [ "$kind" != plain ]; then
			mountpoint -q "$mnt" && do_umount "$kind" "$mnt"
			do_mount "$kind" "$mnt" >/dev/null || { log "$name: mounting $kind failed"; continue; }
			[ "$kind" = noop ] && noop_readahead "$mnt"
			mountpoint -q "$mnt" || continue
		fi
		IK+=("$kind")
	done
	sleep 1 # tadocfs's idle-priority cache warm-up finishes (ms on these corpora)
	n=${#IK[@]}
	for ((i = 0; i < TAR_ROUNDS && n > 0; i++)); do
		log "$name: interleaved cold tar, round $((i + 1)) of $TAR_ROUNDS"
		for ((j = 0; j < n; j++)); do
			kind=${IK[$(((i + j) % n))]}
			mnt="$W/mnt/$kind"
			[ "$kind" = plain ] && mnt=$dir
			tsec[$kind]+=" $(tar_cold "$mnt")"
		done
	done
	for kind in "${IK[@]}"; do
		# shellcheck disable=SC2086
		tari[$kind]=$(mbps "$orig" "$(median ${tsec[$kind]})")
		[ "$kind" != plain ] && do_umount "$kind" "$(printf '%s/mnt/%s' "$W" "$kind")"
	done
	row="| $name |"
	for kind in "${FSES[@]}"; do row+=" ${tari[$kind]:--} |"; done
	row+=" $(div "${tari[tadocfs]:--}" "${tari[squashfuse]:--}")x | $(pct "${tari[tadocfs]:--}" "${tari[noop]:--}") | $(div "${tari[noop]:--}" "${tari[squashfuse]:--}")x |"
	TARI_ROWS+="$row"$'\n'

	row="| $name |"
	for kind in "${FSES[@]}"; do [ "$kind" != plain ] && row+=" ${ready[$kind]} |"; done
	READY_ROWS+="$row"$'\n'
	for kind in "${FSES[@]}"; do
		PREAD_ROWS+="| $name | $(fs_label "$kind") | ${r1[$kind]} | ${p50_1[$kind]} | ${p99_1[$kind]} | ${r8[$kind]} | ${p50_8[$kind]} | ${p99_8[$kind]} |"$'\n'
		TAR_ROWS+="| $name | $(fs_label "$kind") | ${tarc[$kind]} | ${tarw[$kind]} |"$'\n'
	done
	REL_ROWS+="| $name | $(div "${r1[tadocfs]}" "${r1[squashfuse]}")x | $(div "${r8[tadocfs]}" "${r8[squashfuse]}")x | $(div "${tarc[tadocfs]}" "${tarc[squashfuse]}")x | $(pct "${r1[tadocfs]}" "${r1[noop]}") | $(pct "${r8[tadocfs]}" "${r8[noop]}") | $(pct "${tarc[tadocfs]}" "${tarc[noop]}") | ${ready[tadocfs]} |"$'\n'
	gx_goal="-"
	case $name in gcide | linuxdoc) gx_goal="$(goal "${minx:-}" ">=" 100) (min ${minx:--}x)" ;; esac
	GOAL_ROWS+="| $name | $(goal "$(div "${r1[tadocfs]}" "${r1[squashfuse]}")" ">=" 3) | $(goal "$(div "${r8[tadocfs]}" "${r8[squashfuse]}")" ">=" 3) | $(goal "$(div "${tari[tadocfs]:--}" "${tari[squashfuse]:--}")" ">=" 2) | $gx_goal | $(goal "${ready[tadocfs]}" "<" 50) |"$'\n'
	unset ready r1 p50_1 p99_1 r8 p50_8 p99_8 tarc tarw tari tsec
done

hdr="| corpus |"
sep="|---|"
for kind in "${FSES[@]}"; do
	[ "$kind" != plain ] && { hdr+=" $(fs_label "$kind") |"; sep+="---:|"; }
done
thdr="| corpus |"
tsep="|---|"
for kind in "${FSES[@]}"; do thdr+=" $(fs_label "$kind") |"; tsep+="---:|"; done
thdr+=" tadocfs / squashfuse | tadocfs, % of no-op | no-op / squashfuse (2x needs this >= 2) |"
tsep+="---:|---:|---:|"
cat <<EOF
### Mount ready (ms from starting the mount command until the mount point answers stat; caches dropped; median of $ROUNDS)

$hdr
$sep
${READY_ROWS}
### Random 4 KiB pread, cold page cache (reads/s; latency in us; median of $ROUNDS)

| corpus | filesystem | 1 thread reads/s | p50 us | p99 us | 8 threads reads/s | p50 us | p99 us |
|---|---|---:|---:|---:|---:|---:|---:|
${PREAD_ROWS}
### Whole-tree \`tar cf - . | cat > /dev/null\` (MB/s of file data; median of $ROUNDS; tadocfs and the no-op ceiling with an 8 MiB readahead window (tadocfs's read_ahead default), squashfuse with the kernel's 128 KiB, as shipped)

| corpus | filesystem | cold cache MB/s | warm cache MB/s |
|---|---|---:|---:|
${TAR_ROWS}
### Whole-tree cold tar, interleaved (MB/s; median of $TAR_ROUNDS rounds, each round one cold run of every filesystem in rotating order, all mounted at once; cold = every cache dropped, then tar and cat loaded again untimed)

$thdr
$tsep
${TARI_ROWS}
### tadocfs relative to squashfuse and to the no-op FUSE ceiling

| corpus | 4 KiB reads 1 thread vs squashfuse | 8 threads vs squashfuse | cold tar vs squashfuse | 1 thread, % of no-op FUSE | 8 threads, % of no-op FUSE | cold tar, % of no-op FUSE | mount ready ms |
|---|---:|---:|---:|---:|---:|---:|---:|
${REL_ROWS}
EOF
cat <<EOF
### Goals of the mount issue (yes = met; ratios in the tables above)

| corpus | random 4 KiB >= 3x squashfuse (1 thread) | (8 threads) | whole-tree read >= 2x squashfuse (cold tar, interleaved) | count >= 100x faster than grep (gcide, linuxdoc; warm) | mount ready < 50 ms |
|---|:---:|:---:|:---:|:---:|:---:|
${GOAL_ROWS}
EOF
if [ -n "$XATTR_ROWS" ]; then
	cat <<EOF
### Word count: \`getfattr -n user.tadoc.count.W\` on the mount root vs \`grep -r -o -w W | wc -l\` on the plain tree (ms, median; cold = caches dropped before each run, the tool's own binary included; getxattr() = the system call alone, timed in one python3 process by xattr_time.py, first call then median of 51)

| corpus | word | getfattr | grep | equal | getfattr warm ms | getfattr cold ms | grep warm ms | grep cold ms | warm grep / warm getfattr | warm grep / getfattr floor | getxattr() first us | getxattr() median us | warm grep / getxattr() |
|---|---|---:|---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
${XATTR_ROWS}
getfattr floor: $(div "$GX_FLOOR" 0.001 2) ms, the same getfattr command on a user xattr of a plain local file (process start-up, no filesystem work): no filesystem can answer a whole getfattr process faster, so "warm grep / getfattr floor" is the best process-level ratio any mount could reach.

### Word search: \`getfattr --only-values -n user.tadoc.search.W\` on the mount root vs \`grep -r -o -b -w W | wc -l\` on the plain tree (ms, median, warm; same = the path:offset lines equal grep's, sorted; a list over 64 KiB is continued in further attributes and only its first part is timed; getxattr() as above: the first call, which builds the query index, and the median of 51)

| corpus | word | hits | same | getfattr ms | grep -b ms | grep / getfattr | getxattr() first us | getxattr() median us | grep / getxattr() |
|---|---|---:|:---:|---:|---:|---:|---:|---:|---:|
${SEARCH_ROWS}
EOF
fi
