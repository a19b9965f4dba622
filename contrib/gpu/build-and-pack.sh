#!/bin/sh
# build-and-pack.sh: build tadocfs with the CUDA kernels on a machine without
# a GPU and pack what must travel to a GPU machine into .carry/ (git-ignored).
#
#   contrib/gpu/build-and-pack.sh [CORPUS_DIR...]
#
# .carry/ receives: build/ (the binaries tadoc, tadocfs, gpu_batch,
# gpu_index, gpu_edit, gpu_digram, gpu_grammar, gpu_bench, gpu_fuzzy_bench from a release build with -Dgpu=enabled), lib/ (the shared
# libraries they need that a bare machine lacks: libfuse3.so.3, libinih,
# libutf8proc, libxxhash, squashfuse's), bin/fusermount3, bin/squashfuse,
# archives/NAME.sqfs (squashfs images for the batcher benchmark and
# tree_read.sh: the corpora named in $TD_SQFS, default "sotu gcide"), and archives/NAME.tadoc, one per
# corpus directory given (default: every directory in $TD_CORPORA, else
# ../corpora beside the checkout), as long as .carry/ stays under
# $TD_CARRY_MAX_MB (default 60; the device tool carries 64 MiB at most).
# (Release build with -Dwerror=false: warnings are CI's job, not the packer's.)
# The full build tree stays in build-gpu-release/ (also git-ignored): object
# files would not fit the carry limit.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
carry=.carry
build=build-gpu-release
max_mb=${TD_CARRY_MAX_MB:-60}

# nvcc may live outside PATH (gpu/meson.build also looks there)
if ! command -v nvcc >/dev/null 2>&1; then
	for d in /usr/local/cuda/bin /opt/cuda/bin; do
		[ -x "$d/nvcc" ] && PATH="$d:$PATH" && break
	done
fi
command -v nvcc >/dev/null 2>&1 || { echo "build-and-pack: nvcc not found" >&2; exit 1; }

if [ -d "$build" ]; then
	meson setup --reconfigure "$build" -Dgpu=enabled -Dbuildtype=release -Dwerror=false >/dev/null
else
	meson setup "$build" -Dgpu=enabled -Dbuildtype=release -Dwerror=false >/dev/null
fi
ninja -C "$build" -j"${TD_JOBS:-2}" fs/tadoc fs/tadocfs tests/gpu_batch contrib/gpu/gpu_bench contrib/gpu/gpu_fuzzy_bench \
	contrib/bench/batch_load contrib/bench/noopfs tests/gpu_index tests/gpu_edit tests/gpu_digram tests/gpu_grammar

rm -rf "$carry"
mkdir -p "$carry/build" "$carry/lib" "$carry/bin" "$carry/archives"
cp "$build/fs/tadoc" "$build/fs/tadocfs" "$build/tests/gpu_batch" "$build/contrib/gpu/gpu_bench" "$build/contrib/gpu/gpu_fuzzy_bench" "$carry/build/"
cp "$build/tests/gpu_index" "$build/tests/gpu_edit" "$build/tests/gpu_digram" "$build/tests/gpu_grammar" "$carry/build/"
cp contrib/gpu/run-on-gpu.sh "$carry/"
# the commit the binaries come from (the GPU machine's copy may not say it)
git rev-parse --short HEAD >"$carry/COMMIT" 2>/dev/null || true
# the batcher benchmark (contrib/bench/batcher.sh) and its helpers
cp "$build/contrib/bench/batch_load" "$build/contrib/bench/noopfs" "$carry/build/"
mkdir -p "$carry/bench"
cp contrib/bench/batcher.sh contrib/bench/tree_read.sh contrib/bench/bench_lib.sh "$carry/bench/"

# shared libraries: everything ldd resolves that is not the C runtime itself
for bin in "$carry"/build/*; do
	ldd "$bin" | awk '/=> \// { print $3 }'
done | sort -u | while read -r lib; do
	case "$(basename "$lib")" in
	libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*.so.* | libgcc_s.so.* | libstdc++.so.*) ;;
	*) cp -L "$lib" "$carry/lib/" ;;
	esac
done
fm=$(command -v fusermount3 || true)
[ -n "$fm" ] && cp -L "$fm" "$carry/bin/"
# squashfuse (a peer of the batcher benchmark) with its libraries; the
# images are made below beside the archives (mksquashfs stays here)
sq=$(command -v squashfuse || true)
if [ -n "$sq" ]; then
	cp -L "$sq" "$carry/bin/"
	ldd "$sq" | awk '/=> \// { print $3 }' | while read -r lib; do
		case "$(basename "$lib")" in
		libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*.so.* | libgcc_s.so.* | libstdc++.so.*) ;;
		*) [ -f "$carry/lib/$(basename "$lib")" ] || cp -L "$lib" "$carry/lib/" ;;
		esac
	done
fi
[ -f "$carry/lib/libfuse3.so.3" ] || { lf=$(ldconfig -p | awk '/libfuse3.so.3 / { print $NF; exit }'); [ -n "$lf" ] && cp -L "$lf" "$carry/lib/"; }

# archives of the reference corpora, smallest first, within the size budget
if [ $# -eq 0 ]; then
	cdir=${TD_CORPORA:-$root/../corpora}
	set --
	for d in "$cdir"/*/; do [ -d "$d" ] && set -- "$@" "${d%/}"; done
fi
for d in $(for c in "$@"; do echo "$(du -sk "$c" | cut -f1) $c"; done | sort -n | cut -d' ' -f2-); do
	name=$(basename "$d")
	"$carry/build/tadoc" compress -o "$carry/archives/$name.tadoc" "$d" >/dev/null
	# squashfuse's images: the batcher benchmark's corpus (run-on-gpu.sh
	# batcher: $TD_BATCHER_ARCHIVE, default sotu) and tree_read.sh's
	case " ${TD_SQFS:-sotu gcide} ${TD_BATCHER_ARCHIVE:-sotu} " in *" $name "*) want_sq=1 ;; *) want_sq=0 ;; esac
	if [ "$want_sq" = 1 ] && [ -n "$sq" ] && command -v mksquashfs >/dev/null; then
		mksquashfs "$d" "$carry/archives/$name.sqfs" -comp zstd -noappend -quiet -no-progress >/dev/null
	fi
	used=$(du -sm "$carry" | cut -f1)
	if [ "$used" -gt "$max_mb" ]; then
		rm -f "$carry/archives/$name.tadoc" "$carry/archives/$name.sqfs"
		echo "build-and-pack: $name left out: .carry/ would exceed ${max_mb} MiB" >&2
	fi
done
echo "packed $(du -sh "$carry" | cut -f1) in $carry/:"
ls -l "$carry"/build "$carry"/lib "$carry"/bin "$carry"/archives
