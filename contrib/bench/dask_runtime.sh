#!/bin/sh
# dask_runtime.sh: pack Debian's Python with Dask and distributed as a
# relocatable runtime for a machine that has neither (nor a package
# registry), e.g. the GPU host of dask_wordcount.py.
#
#   contrib/bench/dask_runtime.sh OUT.tar.xz
#
# The tarball holds pyrt/: bin/python3 (Debian's python3.11), lib/python3.11
# (the standard library less its tests and GUI modules), dist/ (dask,
# distributed and what they import, psutil's compiled module included, from
# /usr/lib/python3/dist-packages), so/ (the shared libraries the extension
# modules need that a bare machine may lack) and env.sh. There:
#
#   tar xJf OUT.tar.xz && PYRT=$PWD/pyrt && . $PYRT/env.sh && python3 ...
#
# Needs python3.11, python3-dask, python3-distributed, python3-fsspec,
# python3-psutil (Debian 12); the target needs glibc 2.36 or newer.
set -eu
out=${1:?usage: dask_runtime.sh OUT.tar.xz}
case "$out" in /*) ;; *) out=$PWD/$out ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rt=$tmp/pyrt
mkdir -p "$rt/bin" "$rt/lib" "$rt/dist" "$rt/so"
cp /usr/bin/python3.11 "$rt/bin/"
ln -s python3.11 "$rt/bin/python3"
cp -a /usr/lib/python3.11 "$rt/lib/"
(cd "$rt/lib/python3.11" && rm -rf test idlelib tkinter lib2to3 ensurepip turtledemo config-3.11* site-packages \
	dist-packages lib-dynload/_tkinter*)
dp=/usr/lib/python3/dist-packages
for m in click cloudpickle dask distributed fsspec heapdict.py jinja2 locket markupsafe msgpack packaging partd \
	psutil sortedcontainers tblib tlz toolz tornado yaml _yaml zict; do
	cp -a "$dp/$m" "$rt/dist/"
done
for m in click cloudpickle dask distributed fsspec HeapDict Jinja2 locket MarkupSafe msgpack packaging partd psutil \
	sortedcontainers tblib toolz tornado PyYAML zict; do
	cp -a "$dp/$m"-*.dist-info "$dp/$m"-*.egg-info "$rt/dist/" 2>/dev/null || true
done
find "$rt/dist" -type d -name tests -prune -exec rm -rf {} +
for l in libffi.so.8 libyaml-0.so.2 libexpat.so.1 libz.so.1 libbz2.so.1.0 liblzma.so.5 libuuid.so.1 libsqlite3.so.0 \
	libssl.so.3 libcrypto.so.3 libncursesw.so.6 libtinfo.so.6 libreadline.so.8; do
	cp -L "/lib/x86_64-linux-gnu/$l" "$rt/so/"
done
cat >"$rt/env.sh" <<'ENV'
# . this with PYRT set to the pyrt/ directory
export PYTHONHOME="$PYRT"
export PYTHONPATH="$PYRT/dist${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONNOUSERSITE=1
export LD_LIBRARY_PATH="$PYRT/so${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$PYRT/bin:$PATH"
ENV
tar cf - -C "$tmp" pyrt | xz -6 -T2 >"$out"
echo "packed $(du -h "$out" | cut -f1) in $out"
