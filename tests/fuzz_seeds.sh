#!/usr/bin/env bash
# fuzz_seeds: write a small seed corpus of valid tadoc archives (and damaged copies) for
# tests/fuzz_archive.c. Usage: fuzz_seeds.sh OUTDIR [TADOC]  (TADOC defaults to $TADOC).
set -euo pipefail
out=${1:?usage: fuzz_seeds.sh OUTDIR [TADOC]}
tadoc=${2:-${TADOC:?give the tadoc binary as the second argument or in \$TADOC}}
mkdir -p "$out"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fuzz_seeds.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

mk() { mkdir -p "$tmp/$1"; }
# Each tree small enough that its archive stays a few KiB (libFuzzer's -max_len).
mk empty
mk one; printf 'the cat sat on the mat\n' >"$tmp/one/a.txt"
mk words; for i in $(seq 40); do printf 'the quick brown fox %d jumps over the lazy dog\r\n' "$i"; done >"$tmp/words/w.txt"
mk uni; printf 'naïve café 日本語 ٣٤ e\xcc\x81 __init__ \xff\xfe broken \xc3\n' >"$tmp/uni/u.txt"
mk tree; mkdir -p "$tmp/tree/d1/d2/d3"; echo deep >"$tmp/tree/d1/d2/d3/f"; echo top >"$tmp/tree/top"
ln -s top "$tmp/tree/link"; ln -s 'to@#@p' "$tmp/tree/odd"; : >"$tmp/tree/empty"; printf '\0\1\2' >"$tmp/tree/d1/bin"
mk long; head -c 700 /dev/zero | tr '\0' 'x' >"$tmp/long/x"; printf ' ab ab ab ab ab\n' >>"$tmp/long/x"
mk periodic; for _ in $(seq 300); do printf 'ab '; done >"$tmp/periodic/p"
# identifiers sharing long prefixes: format 5's shard takes WORDS's split
# layout (td_format.h, TD_SECF_SPLIT)
mk idents; for f in tx_ring rx_ring pci_cfg usb_phy clk_mux gpio_pwr; do for i in $(seq 0 47); do
	printf 'REG_%s_CTRL_MASK%d = %s_desc_queue_stat%d | drv_%s_irq_addr%d;\n' "${f^^}" "$i" "$f" "$i" "$f" "$i"
done; done >"$tmp/idents/regs.h"

# Format 4 (one grammar): the patches below address its sections. Format 5
# (shards, the default) beside it, so the fuzzer starts from both layouts.
for t in empty one words uni tree long periodic; do
	"$tadoc" compress -q --format 4 -o "$out/$t.tadoc" "$tmp/$t" >/dev/null
	"$tadoc" compress -q --format 5 -j 1 -o "$out/$t-v5.tadoc" "$tmp/$t" >/dev/null
done
"$tadoc" compress -q --format 5 -j 1 -o "$out/idents-split-v5.tadoc" "$tmp/idents" >/dev/null
# With the stored postings (their parser: tadoc files of one word, verify).
for t in words uni tree periodic; do
	"$tadoc" compress -q --postings --format 4 -o "$out/$t-post.tadoc" "$tmp/$t" >/dev/null
	"$tadoc" compress -q --postings --format 5 -j 1 -o "$out/$t-post-v5.tadoc" "$tmp/$t" >/dev/null
done
# Format 5 with the fuzzy index (section 37, its parser behind its own sums).
for t in words uni long; do
	"$tadoc" compress -q --format 5 -j 1 --fuzzy-index -o "$out/$t-fzix.tadoc" "$tmp/$t" >/dev/null
done
# Format 5 with the analytics tables (section 40: the top words and n-grams, --top-ngrams).
for t in words uni long; do
	"$tadoc" compress -q --format 5 -j 1 --top-ngrams=5 -o "$out/$t-atab.tadoc" "$tmp/$t" >/dev/null
done
# Format 5 with the stored root vector (section 41, its blocks behind the section's sum).
for t in words uni long; do
	"$tadoc" compress -q --format 5 -j 1 --root-vector -o "$out/$t-vtab.tadoc" "$tmp/$t" >/dev/null
done
# The version 3 layout (FOR-packed symbols, stored word offsets) is still read.
"$tadoc" compress -q --format 3 -o "$out/tree-v3.tadoc" "$tmp/tree" >/dev/null
# Damaged copies: truncated, and a header-only prefix.
head -c 100 "$out/one.tadoc" >"$out/one-trunc100.tadoc"
head -c "$(($(stat -c %s "$out/tree.tadoc") / 2))" "$out/tree.tadoc" >"$out/tree-half.tadoc"
# Hostile entry trees with valid checksums (tests/archive_patch.py): names empty,
# '.', '..', with '/' or NUL, repeated or unsorted within a directory, a symlink
# whose size disagrees with its target, a target holding a NUL byte.
patch=$(dirname "$0")/archive_patch.py
if command -v python3 >/dev/null && [ -f "$patch" ]; then
	hostile() { cp "$out/tree.tadoc" "$out/tree-$1.tadoc"; python3 "$patch" "$2" "$out/tree-$1.tadoc" "${@:3}"; }
	hostile name-empty setname top ''
	hostile name-dot setname top .
	hostile name-dotdot setname f ..
	hostile name-slash setname top t/p
	hostile name-nul setname top 't\x00p'
	hostile name-dup setname top odd
	hostile name-unsorted setname d1 zz
	hostile link-size setcol 8 link 2
	hostile link-nul replace 16 '@#@' '@\x00@'
fi
ls -l "$out" >&2
