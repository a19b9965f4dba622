#!/usr/bin/env bash
# Install the Debian packages tadocfs builds, tests and benchmarks with.
# Usage: contrib/install-deps.sh [--bench]   (needs root or sudo; skips what is installed)
set -euo pipefail
pkgs=(meson ninja-build pkg-config gcc clang libfuse3-dev fuse3 libinih-dev libcriterion-dev
      libutf8proc-dev libxxhash-dev libzstd-dev libarchive-dev python3 attr
      python3-fsspec python3-dask python3-distributed)
if [ "${1:-}" = --bench ] || [ "${1:-}" = --test ]; then
  pkgs+=(squashfs-tools squashfuse zstd xz-utils time vim nano patch libclang-rt-14-dev ca-certificates strace)
  [ "$1" = --bench ] && pkgs+=(hyperfine ugrep tre-agrep)
  # the real-corpus test fetches with npm; a node install may already bring one
  command -v npm >/dev/null 2>&1 || pkgs+=(npm)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
