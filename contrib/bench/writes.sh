#!/usr/bin/env bash
# writes.sh: writable tadocfs mounts (issue 4) against a plain directory on
# the file system that holds BENCH_WORK: append MB/s (1 MiB O_APPEND writes,
# one fsync at the end; also with -o sync=always), small-overwrite ops/s
# (100-byte pwrites at random offsets of the largest file, one fsync), whole
# tree read MB/s before and after 10,000 random small edits (overwrite,
# insert, delete of 1..64 bytes; read after a remount, so the journal is
# replayed and the FUSE page cache is cold), and `tadoc compact` seconds
# per GB of corpus. Prints a markdown table.
#
# Usage: contrib/bench/writes.sh CORPORA_DIR [NAME]   (NAME default: gcide)
# Env: WRITE_MB (256) appended MiB, OVERWRITES (20000), EDITS (10000),
#      ROUNDS (5) read repetitions (median), BENCH_WORK / BUILD as in
#      bench_lib.sh. Needs /dev/fuse and fusermount3.
set -u -o pipefail
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"

if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
	sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
	exit $([ $# -lt 1 ] && echo 2 || echo 0)
fi
CORPORA=$1
NAME=${2:-gcide}
WRITE_MB=${WRITE_MB:-256}
OVERWRITES=${OVERWRITES:-20000}
EDITS=${EDITS:-10000}
ROUNDS=${ROUNDS:-5}
LOAD="python3 $BENCH_DIR/writes_load.py"

[ -e /dev/fuse ] || die "/dev/fuse missing"
command -v fusermount3 >/dev/null || die "fusermount3 not found (Debian: fuse3)"
bench_setup_bins
bench_setup_work
[ -n "$TADOC" ] && [ -n "$TADOCFS" ] || die "tadoc/tadocfs not built (ninja -C $BUILD)"
SRC=$CORPORA/$NAME
[ -d "$SRC" ] || die "$SRC: no such corpus (../shared/corpora/fetch $CORPORA $NAME)"

W=$BENCH_WORK/writes
rm -rf "$W"
mkdir -p "$W/mnt" "$W/plain"
DAEMON=
cleanup() {
	if [ -n "$DAEMON" ]; then
		fusermount3 -u "$W/mnt" 2>/dev/null
		wait "$DAEMON" 2>/dev/null
	fi
}
trap cleanup EXIT

# mount_rw ARCHIVE [OPT,...]: writable mount in the background (foreground
# daemon, so unmount_rw can wait for its journal sync and exit).
mount_rw() {
	local opts=rw${2:+,$2}
	"$TADOCFS" "$1" "$W/mnt" -f -o "$opts" 2>>"$W/daemon.log" &
	DAEMON=$!
	for _ in $(seq 200); do
		grep -q " $W/mnt fuse" /proc/mounts && return 0
		sleep 0.05
	done
	die "tadocfs did not mount (see $W/daemon.log)"
}
unmount_rw() {
	fusermount3 -u "$W/mnt" || die "unmount failed"
	wait "$DAEMON"
	DAEMON=
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

log "compressing $NAME"
BYTES=$(file_bytes "$SRC")
"$TADOC" compress -o "$W/base.tadoc" "$SRC" >/dev/null 2>&1 || die "tadoc compress failed"
FSTYPE=$(stat -f -c %T "$W/plain")
BIG=$(cd "$SRC" && find . -type f -printf '%s %P\n' | sort -n | tail -n 1 | cut -d' ' -f2-)

# --- appends and small overwrites (on a scratch copy of the archive) ---
cp "$W/base.tadoc" "$W/scratch.tadoc"
mount_rw "$W/scratch.tadoc"
log "append $WRITE_MB MiB"
APP_FS=$($LOAD append "$W/mnt" "$WRITE_MB")
APP_PLAIN=$($LOAD append "$W/plain" "$WRITE_MB")
log "small overwrites ($OVERWRITES) in $BIG"
OVR_FS=$($LOAD overwrite "$W/mnt/$BIG" "$OVERWRITES")
cp "$SRC/$BIG" "$W/plain/big"
OVR_PLAIN=$($LOAD overwrite "$W/plain/big" "$OVERWRITES")
unmount_rw
rm -f "$W/scratch.tadoc"*
cp "$W/base.tadoc" "$W/scratch.tadoc"
mount_rw "$W/scratch.tadoc" sync=always
SYNC_MB=$((WRITE_MB / 4 > 0 ? WRITE_MB / 4 : 1))
log "append $SYNC_MB MiB with sync=always"
APP_SYNC=$($LOAD append "$W/mnt" "$SYNC_MB")
unmount_rw
rm -f "$W/scratch.tadoc"* "$W/plain/big"

# --- reads before and after random edits, compaction ---
cp "$W/base.tadoc" "$W/edit.tadoc"
read_rounds() {
	local i
	for i in $(seq "$ROUNDS"); do
		mount_rw "$W/edit.tadoc"
		$LOAD read "$W/mnt" | awk '{ print $3 }'
		unmount_rw
	done | median
}
log "reads before edits"
READ_BEFORE=$(read_rounds)
mount_rw "$W/edit.tadoc"
log "$EDITS random edits"
EDIT_OPS=$($LOAD edit "$W/mnt" "$EDITS" 1)
unmount_rw
JBYTES=$(stat -c %s "$W/edit.tadoc.journal")
log "reads after edits"
READ_AFTER=$(read_rounds)
log "tadoc compact"
timed "$TADOC" compact "$W/edit.tadoc" || die "tadoc compact failed: $(cat "$BENCH_WORK/last.log")"
COMPACT_S=$T_SECS
COMPACT_RSS=$T_RSS_KB
log "reads after compaction"
READ_COMPACT=$(read_rounds)
cp -r "$SRC" "$W/plain/tree"
READ_PLAIN=$($LOAD read "$W/plain/tree" | awk '{ print $3 }')

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
GB=$(awk -v b="$BYTES" 'BEGIN { printf "%.4f", b / 1e9 }')

cat <<EOF

### Writable mounts: $NAME ($(awk -v b="$BYTES" 'BEGIN { printf "%.1f", b / 1e6 }') MB, plain directory on $FSTYPE)

| measure | tadocfs -o rw | plain $FSTYPE | tadocfs / plain |
|---|---|---|---|
| append, 1 MiB writes, fsync at end (MB/s) | $APP_FS | $APP_PLAIN | $(ratio "$APP_FS" "$APP_PLAIN") |
| append with -o sync=always (MB/s) | $APP_SYNC | - | $(ratio "$APP_SYNC" "$APP_PLAIN") |
| small overwrites, 100 B pwrite (ops/s) | $OVR_FS | $OVR_PLAIN | $(ratio "$OVR_FS" "$OVR_PLAIN") |
| random edits via write/setxattr (ops/s) | $EDIT_OPS | - | - |
| whole-tree read, unedited (MB/s) | $READ_BEFORE | $READ_PLAIN | $(ratio "$READ_BEFORE" "$READ_PLAIN") |
| whole-tree read after $EDITS edits (MB/s) | $READ_AFTER | - | $(ratio "$READ_AFTER" "$READ_PLAIN") |
| whole-tree read after compaction (MB/s) | $READ_COMPACT | - | $(ratio "$READ_COMPACT" "$READ_PLAIN") |
| tadoc compact (s; s per GB of corpus) | $COMPACT_S; $(awk -v s="$COMPACT_S" -v g="$GB" 'BEGIN { printf "%.1f", s / g }') | - | - |

Reads after $EDITS edits run at $(ratio "$READ_AFTER" "$READ_BEFORE")x of unedited reads (goal >= 0.67, i.e. within 1.5x);
appends reach $(ratio "$APP_FS" "$APP_PLAIN")x of the plain directory (goal >= 0.5). Journal after the edits:
$JBYTES bytes; compaction peak RSS $COMPACT_RSS KiB. Reads: one pass over every file in 1 MiB
reads after a fresh mount (journal replayed, FUSE page cache cold; the archive itself stays in the
OS page cache), median of $ROUNDS; the plain-directory read is warm.
EOF
