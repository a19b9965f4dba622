#!/usr/bin/env bash
# Set up, build, and run the main job on the bundled sample corpus:
# compress contrib/sample, mount it, cat/grep/getfattr on the mount, unmount.
# Usage: contrib/quickstart.sh   (from anywhere; installs Debian packages if missing)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
contrib/install-deps.sh
echo "quickstart: building in build/ (meson, ninja: a few minutes on 2 cores)"
t0=$(date +%s)
blog=$(mktemp)
{ [ -f build/build.ninja ] || meson setup build --buildtype=release -Dgpu=auto; } >"$blog" 2>&1 &&
	ninja -C build >>"$blog" 2>&1 || { tail -40 "$blog"; rm -f "$blog"; exit 1; }
rm -f "$blog"
echo "quickstart: built in $(($(date +%s) - t0)) s"
tadoc=build/fs/tadoc tadocfs=build/fs/tadocfs
work=$(mktemp -d)
mnt=$work/mnt
cleanup() { if mountpoint -q "$mnt" 2>/dev/null; then fusermount3 -u "$mnt"; fi; rm -rf "$work"; }
trap cleanup EXIT
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

say tadoc compress -o sample.tadoc contrib/sample
"$tadoc" compress -q -o "$work/sample.tadoc" contrib/sample
say tadoc info sample.tadoc
"$tadoc" info "$work/sample.tadoc" | head -16
say tadoc verify sample.tadoc
"$tadoc" verify "$work/sample.tadoc"

mkdir "$mnt"
say tadocfs sample.tadoc mnt
"$tadocfs" "$work/sample.tadoc" "$mnt"
say ls -l mnt
ls -l "$mnt"
say head -5 mnt/moby-dick-ch01.txt
head -5 "$mnt/moby-dick-ch01.txt"
say grep -rc whale mnt
(cd "$work" && grep -rc whale mnt | sort)
say "grep -rwo whale mnt | wc -l        # occurrences, as the count below"
(cd "$work" && grep -rwo whale mnt | wc -l)
say getfattr -n user.tadoc.count.whale mnt
(cd "$work" && getfattr -n user.tadoc.count.whale mnt)
say getfattr --only-values -n user.tadoc.search.Ishmael mnt/moby-dick-ch01.txt
(cd "$work" && getfattr --only-values -n user.tadoc.search.Ishmael mnt/moby-dick-ch01.txt)
say getfattr -n user.tadoc.words mnt/speeches
(cd "$work" && getfattr -n user.tadoc.words mnt/speeches)
say diff -r contrib/sample mnt
diff -r contrib/sample "$mnt" && echo "identical"
say fusermount3 -u mnt
fusermount3 -u "$mnt"
echo "quickstart: OK"
