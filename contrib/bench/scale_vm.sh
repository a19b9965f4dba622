#!/bin/bash
# scale_vm.sh: the 2-core goal of the scale benchmark (issue 22), side by side in one run on
# this machine: `tadoc compress` with its defaults (format 5, every core, --memory half the RAM)
# against `mksquashfs -comp zstd` (every core) on one tree, page cache warm for both.
#
#   contrib/bench/scale_vm.sh TREE [BUILD_DIR]
#
# TREE: e.g. the `linux` corpus (../shared/corpora/fetch DEST linux). BUILD_DIR: default build.
# Prints one line per tool: wall seconds, peak RSS (GNU time), archive bytes and ratio (sum of
# the regular files' sizes over the archive's size). Work files go to $WORK (default
# /tmp/scale_vm) and are removed at the end. Results: contrib/bench/results/compress.md
# ("The 2-core goal").
set -eu
[ $# -ge 1 ] || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
tree=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
tadoc=$(cd "${2:-$root/build}" && pwd)/fs/tadoc
W=${WORK:-/tmp/scale_vm}
command -v mksquashfs >/dev/null || { echo "scale_vm.sh: mksquashfs not found (Debian: squashfs-tools)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "scale_vm.sh: GNU time not found (Debian: time)" >&2; exit 2; }
[ -x "$tadoc" ] || { echo "scale_vm.sh: $tadoc not built" >&2; exit 2; }
rm -rf "$W"; mkdir -p "$W"
find "$tree" -type f -print0 | xargs -0 cat > /dev/null 2>&1 || true
in=$(find "$tree" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
echo "input $in bytes, $(find "$tree" -type f | wc -l) files; $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); $(date -u +%FT%TZ); commit $(git -C "$root" log -1 --format=%h)"
run() { # NAME OUT CMD...
	local name=$1 out=$2; shift 2
	local s e
	s=$(date +%s.%N); /usr/bin/time -f %M -o "$W/rss" "$@"; e=$(date +%s.%N)
	printf '%-52s wall %7.1f s  peak RSS %6d MiB  %11d bytes  ratio %.3f\n' "$name" \
		"$(awk "BEGIN{print $e - $s}")" $(( $(tail -1 "$W/rss") / 1024 )) "$(stat -c %s "$out")" \
		"$(awk "BEGIN{print $in / $(stat -c %s "$out")}")"
	rm -f "$out"
}
run "tadoc compress (defaults)" "$W/a.tadoc" "$tadoc" compress -q -o "$W/a.tadoc" "$tree"
run "mksquashfs -comp zstd" "$W/x.sqfs" mksquashfs "$tree" "$W/x.sqfs" -comp zstd -no-progress -quiet
rm -rf "$W"
