#!/usr/bin/env bash
# cli_tadoc: the tadoc CLI on bad inputs (one clear message naming the file, non-zero exit,
# no crash) and on real work (unpack byte-exact with modes and mtimes; cat, extract, count,
# search equal the originals and the Python oracle). TAP output; run by meson test.
# Needs: $TADOC (the binary), $TESTS_DIR (this folder); python3, diff, find, stat, timeout.
set -euo pipefail

TADOC=${TADOC:?set TADOC to the tadoc binary}
TESTS_DIR=${TESTS_DIR:-$(cd "$(dirname "$0")" && pwd)}
PY=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/cli_tadoc.XXXXXX")
cleanup() { chmod -R u+rwx "$work" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

n=0 failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() {
	n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"
	[ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/# /' | head -20
	return 0
}
check() { # DESC CMD... : passes when CMD succeeds
	local d=$1; shift
	if out=$("$@" 2>&1); then ok "$d"; else not_ok "$d" "$out"; fi
}

# expect_fail DESC NAME CMD...: CMD must exit non-zero without a signal, write no sanitizer
# report, and say something on stderr that names NAME (the file or path at fault).
expect_fail() {
	local d=$1 name=$2; shift 2
	local rc=0
	timeout 60 "$@" >"$work/out" 2>"$work/err" </dev/null || rc=$?
	local err; err=$(cat "$work/err")
	if [ "$rc" -eq 0 ]; then not_ok "$d (exit 0)" "$err"
	elif [ "$rc" -eq 124 ]; then not_ok "$d (hung, killed after 60 s)" "$err"
	elif [ "$rc" -ge 128 ]; then not_ok "$d (killed by signal $((rc - 128)))" "$err"
	elif grep -q -e 'Sanitizer' -e 'runtime error:' "$work/err"; then not_ok "$d (sanitizer report)" "$err"
	elif [ -z "$err" ]; then not_ok "$d (no message)"
	elif ! grep -qF -- "$name" "$work/err"; then not_ok "$d (message does not name '$name')" "$err"
	elif [ "$(grep -c . "$work/err")" -gt 3 ]; then not_ok "$d (more than one clear message)" "$err"
	else ok "$d (exit $rc)"
	fi
}

# no_crash DESC CMD...: any exit status but no signal, no hang and no sanitizer report; a
# failure must name $2-style files, checked by the caller when needed.
no_crash() {
	local d=$1; shift
	local rc=0
	timeout 60 "$@" >"$work/out" 2>"$work/err" </dev/null || rc=$?
	if [ "$rc" -ge 124 ] || grep -q -e 'Sanitizer' -e 'runtime error:' "$work/err"; then
		not_ok "$d (exit $rc)" "$(cat "$work/err")"
	else ok "$d (exit $rc)"; fi
}

# tadoc ARGS...: "$TADOC" ARGS, for the calls that are to work. Under sanitizers
# (TD_TEST_SANITIZED=1) LeakSanitizer checks the first call of each kind (command,
# options, number of arguments) and not its repeats on other words, files and
# archives: its pass at exit is about half of a sanitized process's CPU. The calls
# that are to fail (expect_fail, no_crash, the bad streams) run "$TADOC" itself and
# are always leak-checked: error paths are where leaks hide.
mkdir "$work/.leak-checked"
tadoc() {
	if [ "${TD_TEST_SANITIZED:-0}" = 1 ]; then
		local k=$1 a
		for a in "${@:2}"; do [[ $a == -* ]] && k+=" $a"; done
		k="$work/.leak-checked/${k//\//%} $#"
		if [ -e "$k" ]; then
			ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" "$TADOC" "$@"
			return
		fi
		: >"$k"
	fi
	"$TADOC" "$@"
}

as_user=()
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups --)
fi

# --- the adversarial tree, compressed -------------------------------------
"$PY" "$TESTS_DIR/gen_adversarial.py" "$work/tree"
A=$work/adv.tadoc
# Format 4 (one grammar): the corruption checks below patch its sections by
# id; format 5 has its own tests (shard.py).
check "compress the adversarial tree" tadoc compress --format 4 -o "$A" "$work/tree"
check "verify it" tadoc verify "$A"
A5=$work/adv5.tadoc
check "compress the adversarial tree (format 5)" tadoc compress --format 5 -o "$A5" "$work/tree"
[ "$(tadoc top -n 0 "$A5")" = "$(tadoc top -n 0 "$A")" ] && ok "format 5 top words equal format 4" || not_ok "format 5 top words differ"
check "verify it (format 5)" tadoc verify "$A5"
count_the=$(tadoc count "$A" the) || true
[ "$(tadoc count "$A5" the)" = "$count_the" ] && ok "format 5 count equals format 4" || not_ok "format 5 count differs"
check "info on it" tadoc info "$A"

# --help on every command.
for c in compress ls cat extract unpack count search info verify; do
	if out=$(tadoc "$c" --help 2>&1) && grep -q Usage <<<"$out"; then ok "$c --help"; else not_ok "$c --help" "$out"; fi
done
expect_fail "unknown command" "frobnicate" "$TADOC" frobnicate
if out=$(tadoc help --help 2>&1) && grep -q Usage <<<"$out"; then ok "help --help"; else not_ok "help --help" "$out"; fi
if "$TADOC" --version >/dev/full 2>/dev/null; then not_ok "--version into a full disk exits 0"; else ok "--version into a full disk fails"; fi
expect_fail "compress into a missing directory" "$work/no/such/out.tadoc" "$TADOC" compress -o "$work/no/such/out.tadoc" "$work/tree"
grep -qF '.tadoc.tmp' "$work/err" && not_ok "... the message names a temporary file" "$(cat "$work/err")" || ok "... the message names OUT itself"

# --- unpack restores the tree byte-exact with modes and mtimes --------------
U=$work/unpacked
check "unpack" tadoc unpack "$A" "$U"
if out=$(diff -r --no-dereference "$work/tree" "$U" 2>&1); then ok "unpack: diff -r finds no difference"; else not_ok "unpack: diff -r" "$out"; fi
meta() { (cd "$1" && find . -printf '%p %y %m %T@ %l\n' | LC_ALL=C sort); }
sizes() { (cd "$1" && find . ! -type d -printf '%p %s\n' | LC_ALL=C sort); }
if out=$(diff <(meta "$work/tree") <(meta "$U")); then ok "unpack: types, modes, mtimes (ns) and link targets equal"; else not_ok "unpack: metadata" "$out"; fi
if out=$(diff <(sizes "$work/tree") <(sizes "$U")); then ok "unpack: sizes equal"; else not_ok "unpack: sizes" "$out"; fi
expect_fail "unpack into a non-empty directory" "$U" "$TADOC" unpack "$A" "$U"
# DIR given as a symlink to a directory: its contents are the root, as for DIR itself
ln -s "$work/tree" "$work/tree-link"
if out=$(tadoc compress -o "$work/via-link.tadoc" "$work/tree-link" 2>&1) &&
	out=$(diff <(tadoc ls "$A") <(tadoc ls "$work/via-link.tadoc") 2>&1) &&
	out=$(cmp <(tadoc cat "$A" text/crlf.txt) <(tadoc cat "$work/via-link.tadoc" text/crlf.txt) 2>&1); then
	ok "compress a symlink to a directory: the same tree"
else not_ok "compress a symlink to a directory" "$out"; fi
expect_fail "unpack under a missing parent" "$work/no/such" "$TADOC" unpack "$A" "$work/no/such/dir"

# ls lists every entry.
if out=$(tadoc ls "$A" 2>&1); then
	want=$(cd "$work/tree" && find . -mindepth 1 | wc -l)
	got=$(grep -c . <<<"$out" || true)
	[ "$got" -ge "$((want * 9 / 10))" ] && ok "ls lists the entries ($got lines, $want entries)" || not_ok "ls: $got lines for $want entries"
else not_ok "ls" "$out"; fi

# --- cat / extract equal the original bytes ---------------------------------
for f in "text/crlf.txt" "binary/random.bin" "empty" "one/ff" "names/name with spaces.txt" "names/日本語のファイル.txt" \
	"deep/d01/d02/level 03 ü/d04/d05/level 06 ü/d07/d08/level 09 ü/d10/d11/level 12 ü/leaf.txt" "text/long_words.txt"; do
	if tadoc cat "$A" "$f" 2>"$work/err" | cmp -s - "$work/tree/$f"; then ok "cat $f"; else not_ok "cat $f" "$(cat "$work/err")"; fi
done
for spec in "text/unicode.txt 0 100" "text/unicode.txt 17 1" "line/single_line.txt 100000 70000" "binary/random.bin 65000 1000" \
	"text/crlf.txt 5 0" "one/a 0 10" "one/a 1 10" "one/a 50 10" "binary/repeated_a.bin 1048570 100"; do
	read -r f off len <<<"$spec"
	dd if="$work/tree/$f" of="$work/want" iflag=skip_bytes,count_bytes skip="$off" count="$len" bs=64K status=none
	tadoc extract "$A" "$f" "$off" "$len" >"$work/got" 2>"$work/err" || true
	cmp -s "$work/got" "$work/want" && ok "extract $f $off $len" || not_ok "extract $f $off $len" "$(cat "$work/err")"
done
expect_fail "extract with a negative offset" "-5" "$TADOC" extract "$A" text/crlf.txt -5 10
expect_fail "extract with a non-numeric length" "abc" "$TADOC" extract "$A" text/crlf.txt 0 abc
expect_fail "cat of a directory" "deep" "$TADOC" cat "$A" deep
# Many paths in one call: the files in argument order, byte-exact (small ones
# pass through the 64 KiB output buffer, large ones past it), each bad path
# named once on stderr, exit 1, and the good files around it still written.
mapfile -t catfiles < <(cd "$work/tree" && find . -type f ! -path './deep/*' | sed 's|^\./||' | LC_ALL=C sort)
rc=0
"$TADOC" cat "$A" "${catfiles[@]}" no/such/file deep "${catfiles[@]:0:3}" >"$work/out" 2>"$work/err" || rc=$?
(cd "$work/tree" && cat -- "${catfiles[@]}" "${catfiles[@]:0:3}") >"$work/want"
if [ "$rc" -ne 1 ]; then not_ok "cat of ${#catfiles[@]} files and two bad paths: exit $rc, not 1" "$(cat "$work/err")"
elif ! cmp -s "$work/out" "$work/want"; then not_ok "cat of ${#catfiles[@]} files and two bad paths: other bytes" "$(cmp "$work/out" "$work/want" 2>&1)"
elif [ "$(grep -c . "$work/err")" -ne 2 ] || ! grep -qF no/such/file "$work/err" || ! grep -qF deep "$work/err"; then
	not_ok "cat of ${#catfiles[@]} files and two bad paths: messages" "$(cat "$work/err")"
else ok "cat of ${#catfiles[@]} files in one call with two bad paths among them: the files in order, both paths named, exit 1"; fi

# --- count / search equal the Python oracle ---------------------------------
# The oracle answers every question in one run (oracle.py many: each tree read once);
# "WORD PATH" specs ask within PATH.
specs=("the" "a" "naïve" "日本語" "__init__" "_" "٠١٢٣٤٥٦٧٨٩" "e" "x86_64" "ab" "The" "zzqqxx" "the text" "ab periodic/period3.txt"
	"word deep" "file many")
# names holding a backslash or a newline: escaped so each hit stays one line (below)
mkdir -p "$work/esc/back\\slash"
printf 'hello there\n' >"$work/esc/back\\slash/a.txt"
printf 'say hello\n' >"$work/esc/new
line.txt"
mkdir "$work/oracle"
for spec in "${specs[@]}"; do
	read -r w p <<<"$spec"
	printf 'count\t%s\t%s%s\nsearch\t%s\t%s%s\n' "$work/tree" "$w" "${p:+	$p}" "$work/tree" "$w" "${p:+	$p}"
done >"$work/oracle/jobs"
printf 'search\t%s\thello\n' "$work/esc" >>"$work/oracle/jobs"
"$PY" "$TESTS_DIR/oracle.py" many "$work/oracle" <"$work/oracle/jobs"
i=0
for spec in "${specs[@]}"; do
	read -r w p <<<"$spec"
	i=$((i + 2))
	want=$(cat "$work/oracle/$((i - 1))")
	got=$(tadoc count "$A" "$w" ${p:+"$p"} 2>"$work/err") || true
	[ "$got" = "$want" ] && ok "count $spec = $want" || not_ok "count $spec: tadoc '$got', oracle '$want'" "$(cat "$work/err")"
	cp "$work/oracle/$i" "$work/want"
	tadoc search "$A" "$w" ${p:+"$p"} >"$work/got" 2>"$work/err" || true
	if cmp -s "$work/got" "$work/want"; then ok "search $spec"
	elif cmp -s <(LC_ALL=C sort "$work/got") <(LC_ALL=C sort "$work/want"); then not_ok "search $spec: same hits, other order" "$(diff "$work/got" "$work/want" | head -5)"
	else not_ok "search $spec" "$(diff "$work/got" "$work/want" | head -5)"; fi
done
tadoc compress -q -o "$work/esc.tadoc" "$work/esc" >/dev/null 2>&1
printf 'back\\\\slash/a.txt:0\nnew\\nline.txt:4\n' >"$work/want"
tadoc search "$work/esc.tadoc" hello >"$work/got" 2>"$work/err" || true
if cmp -s "$work/got" "$work/want"; then ok "search escapes '\\' and newline in paths"
else not_ok "search escapes '\\' and newline in paths" "$(diff "$work/got" "$work/want" | head -5; cat "$work/err")"; fi
cp "$work/oracle/$((i + 1))" "$work/want2"
cmp -s "$work/got" "$work/want2" && ok "... as the oracle writes them" || not_ok "escaped search against the oracle" "$(diff "$work/got" "$work/want2" | head -5)"
expect_fail "count of words two spaces apart (not a phrase)" "two  words" "$TADOC" count "$A" "two  words"
expect_fail "count of a phrase with a non-word part" "two, words" "$TADOC" count "$A" "two, words"
expect_fail "count in a missing path" "no/such/file" "$TADOC" count "$A" the no/such/file

# --- bad inputs to compress -------------------------------------------------
B=$work/bad; mkdir -p "$B"
expect_fail "compress with no input" "compress" "$TADOC" compress -o "$B/x.tadoc"
expect_fail "compress a missing file" "$B/missing" "$TADOC" compress -o "$B/x.tadoc" "$B/missing"

mkdir -p "$B/withfifo"; echo hi >"$B/withfifo/ok.txt"; mkfifo "$B/withfifo/pipe"
expect_fail "compress a directory holding a fifo" "pipe" "$TADOC" compress -o "$B/x.tadoc" "$B/withfifo"
expect_fail "compress a fifo" "pipe" "$TADOC" compress -o "$B/x.tadoc" "$B/withfifo/pipe"
expect_fail "compress a device node" "/dev/null" "$TADOC" compress -o "$B/x.tadoc" /dev/null
mkdir -p "$B/nlfifo"; mkfifo "$B/nlfifo/bad
name"
expect_fail "compress a fifo whose name holds a newline" 'bad\nname' "$TADOC" compress -o "$B/x.tadoc" "$B/nlfifo"
[ "$(wc -l <"$work/err")" -eq 1 ] && ok "... in a message of one line" || not_ok "a newline in a name splits the message" "$(cat "$work/err")"
[ -e "$B/x.tadoc" ] && not_ok "failed compress left an archive behind" || ok "failed compress leaves no archive"

mkdir -m 777 "$B/unr"; chmod 755 "$work"; echo secret >"$B/unr/secret"; chmod 000 "$B/unr/secret"; echo fine >"$B/unr/fine"
if "${as_user[@]}" test -r "$B/unr/secret"; then
	echo "ok $((n += 1)) - unreadable file # SKIP cannot make a file unreadable here"
else
	expect_fail "compress an unreadable file" "secret" "${as_user[@]}" "$TADOC" compress -o "$B/unr/x.tadoc" "$B/unr"
fi
mkdir -m 000 "$B/unr/closed"
if ! "${as_user[@]}" test -r "$B/unr/closed"; then
	chmod 644 "$B/unr/secret"
	expect_fail "compress an unreadable directory" "closed" "${as_user[@]}" "$TADOC" compress -o "$B/unr/x.tadoc" "$B/unr"
fi

# Over-long paths: 20 nested directories of 250-byte names (> 4095 bytes).
long=$(printf 'n%.0s' $(seq 250))
( mkdir -p "$B/deep" && cd "$B/deep" && for _ in $(seq 20); do mkdir "$long" && cd "$long"; done && echo x >leaf )
expect_fail "compress a path longer than 4095 bytes" "$long" "$TADOC" compress -o "$B/x.tadoc" "$B/deep"
grep -q "path longer than 4095 bytes" "$work/err" && ok "... and the message says why" || not_ok "over-long path: no reason" "$(tail -c 300 "$work/err")"
expect_fail "cat a path longer than 4095 bytes" "$long" "$TADOC" cat "$A" "$(printf "$long/%.0s" $(seq 20))leaf"

# Paths with '..' never reach outside the archive.
expect_fail "cat ../ path" "../tree/empty" "$TADOC" cat "$A" ../tree/empty
# 'text/../crlf.txt' may resolve inside the archive; if it does, to the right file.
if "$TADOC" cat "$A" text/../text/crlf.txt >"$work/out" 2>"$work/err"; then
	cmp -s "$work/out" "$work/tree/text/crlf.txt" && ok "cat a/../b resolves inside the archive" || not_ok "cat a/../b gave other bytes"
else expect_fail "cat a/../b path" "text/../text/crlf.txt" "$TADOC" cat "$A" text/../text/crlf.txt; fi
expect_fail "compress inputs ending in '..'" "d02/.." "$TADOC" compress -o "$work/dd.tadoc" "$work/tree/deep/d01/d02/.." "$work/tree/empty"
expect_fail "extract ../ path" "../x" "$TADOC" extract "$A" ../x 0 1
# a FIFO given as ARCHIVE: one message, no hang (was: blocked in open(2) until a writer came)
mkfifo "$B/fifo.tadoc"
expect_fail "a fifo as the archive" "$B/fifo.tadoc" "$TADOC" ls "$B/fifo.tadoc"
expect_fail "a fifo as the archive (top)" "$B/fifo.tadoc" "$TADOC" top "$B/fifo.tadoc"
# -o naming what is not a regular file: refused and left as it is (was: replaced
# by rename(2); as root, -o /dev/null put a regular file in place of the device)
expect_fail "compress onto a fifo" "$B/fifo.tadoc" "$TADOC" compress -q -o "$B/fifo.tadoc" "$work/tree"
[ -p "$B/fifo.tadoc" ] && ok "... the fifo is still there" || not_ok "compress replaced a fifo by a file"
# --top is ngrams' option (top and files took it and ignored it)
expect_fail "top --top" "--top" "$TADOC" top --top 5 "$A5"
expect_fail "files --top" "--top" "$TADOC" files --top 5 "$A5" the
# a word holding a newline: a usage error in one line
expect_fail "a word with a newline" "count" "$TADOC" count "$A5" "$(printf 'the\nof')"
[ "$(wc -l <"$work/err")" -eq 1 ] && ok "... in one line" || not_ok "a newline in a word splits the usage message" "$(cat "$work/err")"

# --- damaged archives, made in one run of archive_patch.py ------------------------
# Each damaged archive is a copy patched here (`damage`), and checked where its
# section below says; archive_patch.py starts once for all of them.
patches=()
damage() { # COPY SOURCE PATCH-COMMAND PATCH-ARGS...: COPY = SOURCE patched by archive_patch.py
	cp "$2" "$1"
	patches+=("$3" "$1" "${@:4}" ";")
}
# An archive whose entry is named '..' (checksums made valid).
mkdir -p "$B/dots/in"; echo evil >"$B/dots/in/zz"; echo good >"$B/dots/in/ok"
tadoc compress -o "$B/dots.tadoc" "$B/dots/in" >/dev/null 2>&1
patches+=(rename "$B/dots.tadoc" zz .. ";")
# Hostile entry trees (issue 26), checksums made valid: NAME EXPECTED-MESSAGE PATCH-ARGS...
mkdir -p "$B/host/in/d"; echo a >"$B/host/in/a"; echo b >"$B/host/in/b"; echo c >"$B/host/in/d/c"
ln -s 'ab@#@cd' "$B/host/in/lnk"
# format 4: the patches address its sections (a format 5 container keeps its
# sizes beside the shards, checked against them by verify: shard.py)
tadoc compress --format 4 -o "$B/host.tadoc" "$B/host/in" >/dev/null 2>&1
hostile_names=() hostile_msgs=()
hostile() {
	hostile_names+=("$1") hostile_msgs+=("$2")
	damage "$B/host_$1.tadoc" "$B/host.tadoc" "${@:3}"
}
hostile empty "entry 2 '': empty name" setname b ''
hostile dot "entry 2 '.': name '.' or '..'" setname b .
hostile dotdot "entry 5 'd/..': name '.' or '..'" setname c ..
hostile slash "entry 2 'x/y': name contains '/'" setname b x/y
hostile nul "entry 2 'x\x00y': name contains a NUL byte" setname b 'x\x00y'
hostile dup "entry 2 'a': name repeats within its directory" setname b a
hostile unsorted "entry 2 'b': names of its directory are not sorted" setname a zz
hostile linksize "entry 4 'lnk': size 3 differs from its text (7 bytes)" setcol 8 lnk 3
damage "$B/host_linknul.tadoc" "$B/host.tadoc" replace 16 '@#@' '@\x00@'
# Flipped bytes, stale checksums: rule symbols, meta (checked at open), root sequence
damage "$B/corrupt.tadoc" "$A" flip 18
damage "$B/corrupt_meta.tadoc" "$A" flip 1
damage "$B/corrupt_root.tadoc" "$A" flip 21
# damaged zstd frames: names, words, other tokens, word counts
for sec in 2:names 13:words 16:other 15:freq; do
	damage "$B/z${sec#*:}.tadoc" "$A" flip "${sec%%:*}"
done
# version 4 with its words stored plain
damage "$B/v4plain.tadoc" "$A" plain
"$PY" "$TESTS_DIR/archive_patch.py" "${patches[@]:0:${#patches[@]}-1}"

# An archive whose entry is named '..' is refused by unpack, and nothing appears
# outside the target directory.
mkdir -p "$B/dots/out"
no_crash "ls of an archive with a '..' entry" "$TADOC" ls "$B/dots.tadoc"
expect_fail "unpack refuses an entry named '..'" "dots.tadoc" "$TADOC" unpack "$B/dots.tadoc" "$B/dots/out/t"
[ -e "$B/dots/out/evil" ] || [ -e "$B/dots/zz" ] || [ -e "$B/dots/out/zz" ] && not_ok "unpack wrote outside its directory" || ok "nothing written outside the target"

# Hostile entry trees: every class is refused when the archive is opened (ls,
# verify, unpack), with one message naming the entry and the problem; unpack
# writes nothing.
for k in "${!hostile_names[@]}"; do
	name=${hostile_names[k]} msg=${hostile_msgs[k]}
	expect_fail "ls refuses a hostile archive: $name" "$msg" "$TADOC" ls "$B/host_$name.tadoc"
	expect_fail "verify refuses a hostile archive: $name" "$msg" "$TADOC" verify "$B/host_$name.tadoc"
	expect_fail "unpack refuses a hostile archive: $name" "$msg" "$TADOC" unpack "$B/host_$name.tadoc" "$B/host/out_$name"
	[ -e "$B/host/out_$name" ] && [ -n "$(ls -A "$B/host/out_$name")" ] && not_ok "unpack of hostile archive $name wrote files" || ok "unpack of hostile archive $name wrote nothing"
done
# a symlink target with a NUL byte is found where targets are read (verify, unpack)
expect_fail "verify refuses a symlink target with a NUL byte" "entry 4 'lnk': symlink target holds a NUL byte" "$TADOC" verify "$B/host_linknul.tadoc"
expect_fail "unpack refuses a symlink target with a NUL byte" "entry 4 'lnk': symlink target holds a NUL byte" "$TADOC" unpack "$B/host_linknul.tadoc" "$B/host/out_linknul"

# --- empty, foreign, truncated and corrupt archives ---------------------------
: >"$B/empty.tadoc"
printf 'hello, I am text\n' >"$B/foreign.tadoc"
gzip -c "$TESTS_DIR/oracle.py" >"$B/gzip.tadoc"
size=$(stat -c %s "$A")
head -c $((size / 2)) "$A" >"$B/trunc.tadoc"
head -c 40 "$A" >"$B/trunc40.tadoc"
for bad in empty foreign gzip trunc trunc40 corrupt_meta missing; do
	f=$B/$bad.tadoc
	expect_fail "ls on $bad archive" "$bad.tadoc" "$TADOC" ls "$f"
	expect_fail "cat on $bad archive" "$bad.tadoc" "$TADOC" cat "$f" text/crlf.txt
	expect_fail "extract on $bad archive" "$bad.tadoc" "$TADOC" extract "$f" text/crlf.txt 0 10
	expect_fail "count on $bad archive" "$bad.tadoc" "$TADOC" count "$f" the
	expect_fail "search on $bad archive" "$bad.tadoc" "$TADOC" search "$f" the
	expect_fail "info on $bad archive" "$bad.tadoc" "$TADOC" info "$f"
	expect_fail "verify on $bad archive" "$bad.tadoc" "$TADOC" verify "$f"
	expect_fail "unpack of $bad archive" "$bad.tadoc" "$TADOC" unpack "$f" "$B/out-$bad"
done
# A flipped byte deep in a big section: verify and unpack must see it; the O(1)
# readers may not, but must not crash.
expect_fail "verify on a corrupt rules section" "corrupt.tadoc" "$TADOC" verify "$B/corrupt.tadoc"
expect_fail "unpack of a corrupt rules section" "corrupt.tadoc" "$TADOC" unpack "$B/corrupt.tadoc" "$B/out-corrupt"
[ -e "$B/out-corrupt" ] && [ -n "$(ls -A "$B/out-corrupt")" ] && not_ok "unpack of a corrupt archive wrote files" || ok "unpack of a corrupt archive wrote nothing"
C=$B/corrupt.tadoc
no_crash "ls on a corrupt rules section" "$TADOC" ls "$C"
# damage in a section read in place is an error at the first read, never wrong bytes
expect_fail "cat on a corrupt rules section" "section 'rules': checksum mismatch" "$TADOC" cat "$C" text/crlf.txt
expect_fail "extract on a corrupt rules section" "section 'rules': checksum mismatch" "$TADOC" extract "$C" line/single_line.txt 1000 5000
expect_fail "count on a corrupt rules section" "section 'rules': checksum mismatch" "$TADOC" count "$C" the
expect_fail "search on a corrupt rules section" "section 'rules': checksum mismatch" "$TADOC" search "$C" the
expect_fail "cat on a corrupt root sequence" "section 'root': checksum mismatch" "$TADOC" cat "$B/corrupt_root.tadoc" text/crlf.txt
expect_fail "unpack of a corrupt root sequence" "section 'root': checksum mismatch" "$TADOC" unpack "$B/corrupt_root.tadoc" "$B/out-corrupt-root"
no_crash "info on a corrupt rules section" "$TADOC" info "$C"
expect_fail "archive that is a directory" "$B" "$TADOC" ls "$B"

# --- older formats: version 3 (FOR-packed symbols, plain words with offsets), written
# on request; version 1 (no compressed sections) and version 2 (compressed names,
# words, other tokens, word counts), both with 16-byte tiles (version 3 has 8-byte
# tiles and linear frames). All still read exactly; archive_patch.py rewrites every
# packed array of the version 3 archive with its own decoder and encoder.
A3=$B/v3.tadoc
check "compress --format 3" tadoc compress -q --format 3 -o "$A3" "$work/tree"
check "verify of a version 3 archive" tadoc verify "$A3"
[ "$(tadoc info "$A3" | grep -c 'word-offsets  *0 ')" = 0 ] && ok "version 3 stores word offsets" || not_ok "version 3 without word offsets"
check "unpack of a version 3 archive" tadoc unpack "$A3" "$B/v3-out"
if out=$(diff -r --no-dereference "$work/tree" "$B/v3-out" 2>&1); then ok "version 3 unpack: diff -r finds no difference"; else not_ok "version 3 unpack: diff -r" "$out"; fi
[ "$(tadoc count "$A3" the)" = "$count_the" ] && ok "version 3 count equals version 4" || not_ok "version 3 count differs"
[ "$(stat -c %s "$A")" -lt "$(stat -c %s "$A3")" ] && ok "version 4 is smaller than version 3" || not_ok "version 4 is not smaller than version 3"
expect_fail "compress --format 2" "--format '2'" "$TADOC" compress --format 2 -o "$B/f2.tadoc" "$work/tree"
expect_fail "compress --format x" "--format 'x'" "$TADOC" compress --format x -o "$B/fx.tadoc" "$work/tree"
# Versions 1 and 2 from version 3, and front coding that does not decode (below)
# from version 4 with plain words (made above), in one Python run.
cp "$A3" "$B/v1.tadoc"
cp "$A3" "$B/v2.tadoc"
"$PY" - "$TESTS_DIR" "$B" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[1])
import archive_patch
B = sys.argv[2]
for v in "12":
    archive_patch.patch(["plain", "%s/v%s.tadoc" % (B, v), v])
for how in ("merge", "prefix", "unterminated"):
    a = archive_patch.Archive(B + "/v4plain.tadoc")
    w = bytearray(a.get(13))
    first = w.index(b"\n", 1)
    if how == "merge":               # two words' records run together
        w[first] = ord("x")
    elif how == "prefix":            # a prefix longer than the word before
        w[first + 1] = 255
    else:                            # the last word without its '\n'
        del w[len(w) - 1]
    a.path = "%s/front_%s.tadoc" % (B, how)
    a.put(13, bytes(w))
    a.save()
PYEOF
for v in 1 2; do
	check "verify of a version $v archive" tadoc verify "$B/v$v.tadoc"
	check "unpack of a version $v archive" tadoc unpack "$B/v$v.tadoc" "$B/v$v-out"
	if out=$(diff -r --no-dereference "$work/tree" "$B/v$v-out" 2>&1); then ok "version $v unpack: diff -r finds no difference"; else not_ok "version $v unpack: diff -r" "$out"; fi
	[ "$(tadoc count "$B/v$v.tadoc" the)" = "$count_the" ] && ok "version $v count equals version 4" || not_ok "version $v count differs"
done
# Version 4's words stored plain (tools; the reader undoes their front coding
# straight from the mapping): read exactly. Front coding that does not decode
# (its checksums made right) is refused naming the section, by every reader.
check "unpack of a version 4 archive with plain words" tadoc unpack "$B/v4plain.tadoc" "$B/v4plain-out"
if out=$(diff -r --no-dereference "$work/tree" "$B/v4plain-out" 2>&1); then ok "version 4 plain words: diff -r finds no difference"; else not_ok "version 4 plain words: diff -r" "$out"; fi
for how in merge prefix unterminated; do
	expect_fail "cat with front-coded words that do not decode ($how)" "section 'words'" "$TADOC" cat "$B/front_$how.tadoc" text/crlf.txt
	expect_fail "count with front-coded words that do not decode ($how)" "section 'words'" "$TADOC" count "$B/front_$how.tadoc" the
done
# A damaged frame is found when first read (its checksum is checked before decoding),
# by every reader, with a message naming the archive.
for sec in 2:names 13:words 16:other 15:freq; do
	name=${sec#*:} f=$B/z${sec#*:}.tadoc
	expect_fail "verify with a damaged $name frame" "z$name.tadoc" "$TADOC" verify "$f"
	expect_fail "unpack with a damaged $name frame" "z$name.tadoc" "$TADOC" unpack "$f" "$B/out-z$name"
done
expect_fail "cat with a damaged names frame" "znames.tadoc" "$TADOC" cat "$B/znames.tadoc" text/crlf.txt
expect_fail "cat with a damaged words frame" "zwords.tadoc" "$TADOC" cat "$B/zwords.tadoc" text/crlf.txt
expect_fail "count with a damaged words frame" "zwords.tadoc" "$TADOC" count "$B/zwords.tadoc" the
expect_fail "search with a damaged words frame" "zwords.tadoc" "$TADOC" search "$B/zwords.tadoc" the
expect_fail "corpus count with a damaged word-counts frame" "zfreq.tadoc" "$TADOC" count "$B/zfreq.tadoc" the
check "file count with a damaged word-counts frame (not read)" tadoc count "$B/zfreq.tadoc" the text/crlf.txt

# --- an archive of only empty files: no ratio to speak of -------------------
mkdir -p "$work/empties/sub"
: >"$work/empties/a"; : >"$work/empties/sub/b"
check "compress a tree of empty files" tadoc compress -o "$work/empties.tadoc" "$work/empties"
line=$(tadoc info "$work/empties.tadoc" | grep '^ratio')
if [ "$line" = "ratio            n/a (no data)" ]; then ok "info of empty files: ratio n/a"
else not_ok "info of empty files: ratio n/a" "$line"; fi

# --- a tar stream on standard input equals compressing the directory ---------
# A tree with every kind tar carries: modes, whole-second mtimes (GNU and
# ustar headers hold seconds), symlinks, a hard link (stored as a regular
# file), an empty file and directory, binary data larger than a read chunk.
T=$work/tarsrc
mkdir -p "$T/d/e" "$T/empty_dir"
printf 'hello world\nfoo bar\n' >"$T/a.txt"
: >"$T/empty"
head -c 700000 /dev/urandom >"$T/d/bin"
seq 1 200000 >"$T/d/e/nums"
ln -s ../a.txt "$T/d/lnk"; ln -s nowhere "$T/dangling"
ln "$T/a.txt" "$T/d/hard"
ln "$T/d/e/nums" "$T/d/e/nums_hard" # in several shards, the last one filling as it comes (format 5 below)
chmod 600 "$T/d/e/nums"; chmod 750 "$T/d"; chmod 4755 "$T/empty"
find "$T" -exec touch -h -d @1700000000 {} +
touch -h -d @1600000001 "$T/d/e/nums" "$T/d/lnk"
tarcmp() { # DESC TARFILE|- ARCHIVE-FROM-DIR [COMPRESS-OPTIONS [same]]: compress the stream, compare listing
	# and unpack (and with "same", the archive bytes); the directory archive's listing,
	# unpacked tree and counts are made once (in REF.ref/) for all the streams compared with it
	local d=$1 src=$2 ref=$3 opts=${4:-} out=$work/fromtar.tadoc u=$work/u-tar r=$3.ref w
	rm -rf "$out" "$u"
	if [ ! -d "$r" ]; then
		mkdir "$r"
		tadoc ls -l "$ref" >"$r/ls" && tadoc unpack "$ref" "$r/u" && meta "$r/u" >"$r/meta"
		for w in hello 1999 the; do tadoc count "$ref" "$w" >"$r/count.$w"; done
	fi
	# shellcheck disable=SC2086 # the options are words
	if ! err=$(tadoc compress -o "$out" $opts - <"$src" 2>&1); then not_ok "$d: compress" "$err"; return; fi
	if [ "${5:-}" = same ] && ! cmp -s "$out" "$ref"; then not_ok "$d: archive bytes differ"; return; fi
	if ! out2=$(diff <(tadoc ls -l "$out") "$r/ls"); then not_ok "$d: ls -l" "$out2"; return; fi
	tadoc unpack "$out" "$u"
	if ! out2=$(diff -r --no-dereference "$u" "$r/u"); then not_ok "$d: unpacked bytes" "$out2"; return; fi
	if ! out2=$(diff <(meta "$u") "$r/meta"); then not_ok "$d: unpacked metadata" "$out2"; return; fi
	# word counts (the hard link's words count twice, as in the directory's archive)
	for w in hello 1999 the; do
		if [ "$(tadoc count "$out" "$w")" != "$(cat "$r/count.$w")" ]; then
			not_ok "$d: count $w" "$(tadoc count "$out" "$w") vs $(cat "$r/count.$w")"; return
		fi
	done
	ok "$d: same listing, bytes, modes, mtimes, links, counts"
}
tadoc compress -q -o "$work/fromdir.tadoc" "$T"
for fmt in gnu ustar pax; do
	tar --format=$fmt -C "$T" -cf "$work/t-$fmt.tar" .
	tarcmp "tar --format=$fmt | compress -" "$work/t-$fmt.tar" "$work/fromdir.tadoc"
done
zstd -q -c "$work/t-gnu.tar" >"$work/t.tar.zst"
tarcmp "zstd-compressed tar" "$work/t.tar.zst" "$work/fromdir.tadoc"
gzip -c "$work/t-gnu.tar" >"$work/t.tar.gz"
tarcmp "gzip-compressed tar" "$work/t.tar.gz" "$work/fromdir.tadoc"
# pax keeps nanoseconds: the adversarial tree (odd names, modes, ns mtimes) as
# well; pre-1970 fractional mtimes are left out (libarchive versions differ on
# the sign of a negative pax time's fraction).
A_nofrac=$work/adv_nofrac
rm -rf "$A_nofrac"; cp -a "$work/tree" "$A_nofrac"
find "$A_nofrac" -newermt @0 -o -exec touch -h -d @-1000000 {} + 2>/dev/null || true
tadoc compress -q -o "$work/adv-dir.tadoc" "$A_nofrac"
tar --format=pax -C "$A_nofrac" -cf "$work/adv.tar" .
tarcmp "adversarial tree through pax" "$work/adv.tar" "$work/adv-dir.tadoc"
# format 5: shards of 64K, so a hard link's target is read back from a
# shard already built (a.txt) and from several, the last one still filling
# (nums); with name order and pax (ns mtimes) the archive is byte for byte
# the directory's; -j 1 and -j 2 alike.
SOURCE_DATE_EPOCH=1700000000 tadoc compress -q --format 5 --shard-size 64K -o "$work/fromdir5.tadoc" "$T"
tar --sort=name --format=pax -C "$T" -cf "$work/t-sorted.tar" .
export SOURCE_DATE_EPOCH=1700000000
tarcmp "format 5: sorted pax tar | compress -" "$work/t-sorted.tar" "$work/fromdir5.tadoc" "--format 5 --shard-size 64K -j 1" same
zstd -q -c "$work/t-sorted.tar" >"$work/t-sorted.tar.zst"
tarcmp "format 5: zstd tar | compress - -j 2" "$work/t-sorted.tar.zst" "$work/fromdir5.tadoc" "--format 5 --shard-size 64K -j 2" same
tarcmp "format 5: GNU tar (seconds) | compress -" "$work/t-gnu.tar" "$work/fromdir5.tadoc" "--format 5 --shard-size 64K"
unset SOURCE_DATE_EPOCH
if [ "$(tadoc info "$work/fromdir5.tadoc" | awk '/^shards/ {print $2}')" -ge 10 ]; then ok "format 5 tar: several shards"
else not_ok "format 5 tar: several shards" "$(tadoc info "$work/fromdir5.tadoc" | grep '^shards')"; fi
# Reproducible archives: with SOURCE_DATE_EPOCH two builds of the same input
# a second apart are byte-identical, in formats 3, 4 and 5, from a
# directory, from several inputs (the root is made: its mtime is that time)
# and from a tar stream; without it the build time differs. The input: the tar
# tree without its 2.6 MB of numbers (what it holds does not make the build time;
# d/bin still fills several 64K shards), each build made once, then a second
# later once more.
R=$work/reprosrc
cp -a "$T" "$R"
rm -r "$R/d/e"
tar --sort=name --format=pax -C "$R" -cf "$work/r-sorted.tar" .
repro_cases=(
	"format 3 from a directory|d3|--format 3 --shard-size 64K reprosrc"
	"format 3 from two inputs|m3|--format 3 --shard-size 64K reprosrc/d reprosrc/a.txt"
	"format 3 from a tar stream|t3|--format 3 --shard-size 64K -"
	"format 4 from a directory|d4|--format 4 --shard-size 64K reprosrc"
	"format 4 from two inputs|m4|--format 4 --shard-size 64K reprosrc/d reprosrc/a.txt"
	"format 4 from a tar stream|t4|--format 4 --shard-size 64K -"
	"format 5 from a directory|d5|--format 5 --shard-size 64K reprosrc"
	"format 5 from two inputs|m5|--format 5 --shard-size 64K reprosrc/d reprosrc/a.txt"
	"format 5 from a tar stream|t5|--format 5 --shard-size 64K -"
)
repro() { # 1|2: build every case into $work/rN.SUFFIX (inputs named from $work)
	local c d x args
	for c in "${repro_cases[@]}"; do
		IFS='|' read -r d x args <<<"$c"
		# shellcheck disable=SC2086 # the arguments are words
		(cd "$work" && SOURCE_DATE_EPOCH=1600000000 tadoc compress -q -o "r$1.$x" $args <r-sorted.tar) || true
	done
}
repro 1
tadoc compress -q -o "$work/r3.x" "$R/d" "$R/a.txt"
sleep 1.1
repro 2
tadoc compress -q -o "$work/r4.x" "$R/d" "$R/a.txt"
for c in "${repro_cases[@]}"; do
	IFS='|' read -r d x args <<<"$c"
	if [ -s "$work/r1.$x" ] && cmp -s "$work/r1.$x" "$work/r2.$x"; then ok "reproducible: $d"; else not_ok "reproducible: $d" "archives differ"; fi
done
if ! cmp -s "$work/r3.x" "$work/r4.x"; then ok "without SOURCE_DATE_EPOCH the build time is now"
else not_ok "without SOURCE_DATE_EPOCH the build time is now" "same bytes"; fi
# `tar cf - DIR` keeps DIR/ in the names
(cd "$work" && tar -cf - reprosrc) >"$work/named.tar"
tadoc compress -q -o "$work/named.tadoc" - <"$work/named.tar"
if [ "$(tadoc ls "$work/named.tadoc" | head -1)" = reprosrc ] &&
   [ "$(tadoc cat "$work/named.tadoc" reprosrc/d/hard)" = "$(cat "$R/a.txt")" ]; then ok "tar cf - DIR: entries under DIR/"
else not_ok "tar cf - DIR: entries under DIR/" "$(tadoc ls "$work/named.tadoc" | head -3)"; fi

# Bad streams: one message naming '-', exit 1, no output file.
tar_bad() { # DESC MESSAGE FILE: as format 4 and as format 5 (64K shards; nothing left beside the output)
	local d=$1 msg=$2 in=$3 rc o=$work/bad-tar.tadoc f
	for f in 4 5; do
		rc=0
		rm -f "$o"
		"$TADOC" compress -o "$o" --format $f --shard-size 64K - <"$in" >"$work/out" 2>"$work/err" || rc=$?
		if [ "$rc" -eq 1 ] && [ "$(cat "$work/err")" = "$msg" ] && [ ! -e "$o" ] &&
		   ! ls "$work"/.bad-tar.tadoc* "$work"/bad-tar.tadoc.* "$work"/.tadoc-shard.* >/dev/null 2>&1
		then ok "$d (format $f)"; else not_ok "$d (format $f; exit $rc, output $( [ -e "$o" ] && echo present || echo absent))" "$(cat "$work/err")"; fi
	done
}
printf 'hello, I am text\n' >"$work/not.tar"
tar_bad "compress - of a text file" "tadoc: -: not a tar archive" "$work/not.tar"
: >"$work/empty.tar"
tar_bad "compress - of nothing" "tadoc: -: not a tar archive" "$work/empty.tar"
gzip -c "$work/not.tar" >"$work/not.tar.gz"
tar_bad "compress - of gzip'd text" "tadoc: -: not a tar archive" "$work/not.tar.gz"
# libarchive is loaded only to read a tar stream (fs/README.md, "Start-up"): tadoc does not
# link it, works without it, and compress - names the library it misses (hidden here by a
# bind mount of /dev/null over it, in a mount namespace of its own).
# (grep and awk read all their input: an early exit would end the writer with SIGPIPE, which
# pipefail and set -e turn into the script's exit)
if ldd "$TADOC" | grep 'libarchive' >/dev/null; then not_ok "tadoc does not link libarchive" "$(ldd "$TADOC")"
else ok "tadoc does not link libarchive"; fi
lib=$(ldconfig -p | awk '$1 == "libarchive.so.13" && !lib { lib = $NF } END { print lib }')
if [ "$(id -u)" = 0 ] && [ -n "$lib" ] && command -v unshare >/dev/null && unshare -m true 2>/dev/null; then
	rc=0
	unshare -m sh -c 'mount --bind /dev/null "$1" && "$2" count "$3" the >/dev/null && exec "$2" compress -q -o "$4" - <"$5"' \
		_ "$(readlink -f "$lib")" "$TADOC" "$A" "$work/nolib.tadoc" "$work/t-gnu.tar" >"$work/out" 2>"$work/err" || rc=$?
	if [ "$rc" -eq 1 ] && [ "$(grep -c . "$work/err")" -eq 1 ] && [ ! -e "$work/nolib.tadoc" ] &&
	   grep -q '^tadoc: -: reading a tar stream needs libarchive (libarchive.so.13), which cannot be loaded: ' "$work/err"
	then ok "compress - without libarchive: one message naming it (exit 1)"
	else not_ok "compress - without libarchive (exit $rc)" "$(cat "$work/err")"; fi
else
	echo "ok $((n += 1)) - compress - without libarchive # SKIP needs root, unshare and ldconfig's libarchive.so.13"
fi
# One Python run: where d/bin's data starts (its header is the 7th block or later)
# and where the second entry's header starts in the GNU tar; two one-entry tars
# with a '..' and an absolute name.
read -r off first < <("$PY" - "$work/t-gnu.tar" "$work/dotdot.tar" "$work/abs.tar" <<'PYEOF'
import io, sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    print(t.getmember("./d/bin").offset_data, t.getmembers()[1].offset)
for path, name in ((sys.argv[2], "a/../../evil"), (sys.argv[3], "/abs/x")):
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
        i = tarfile.TarInfo(name); i.size = 3
        t.addfile(i, io.BytesIO(b"abc"))
PYEOF
)
# cut inside d/bin's data
head -c $((off + 1000)) "$work/t-gnu.tar" >"$work/cut-data.tar"
tar_bad "compress - of a tar cut in a file's data" "tadoc: -: truncated tar archive at entry d/bin" "$work/cut-data.tar"
head -c "$first" "$work/t-gnu.tar" >"$work/cut-hdr.tar"
tar_bad "compress - of a tar cut between entries" \
	"tadoc: -: truncated tar archive after entry . (no end-of-archive blocks)" "$work/cut-hdr.tar"
head -c $((first + 100)) "$work/t-gnu.tar" >"$work/cut-mid.tar"
tar_bad "compress - of a tar cut inside a header" "tadoc: -: truncated tar archive after entry ." "$work/cut-mid.tar"
head -c 300 "$work/t.tar.zst" >"$work/cut.tar.zst"
tar_bad "compress - of a cut zstd stream" "tadoc: -: truncated before the first tar entry (Truncated zstd input)" "$work/cut.tar.zst"
tar_bad "compress - of an entry with '..'" "tadoc: -: entry 'a/../../evil': a '..' component leads outside the archive" "$work/dotdot.tar"
tadoc compress -q -o "$work/abs.tadoc" - <"$work/abs.tar"
if [ "$(tadoc cat "$work/abs.tadoc" abs/x)" = abc ]; then ok "compress - strips a leading '/'"; else not_ok "compress - strips a leading '/'"; fi
expect_fail "compress - with another input" "'-'" "$TADOC" compress -o "$work/x.tadoc" - "$T"

# --- --gpu auto|on|off (compress, compact, add) ------------------------------
# Where the indexes are built does not change a byte. Without a usable GPU (CI),
# --gpu on fails with one clear message and writes nothing; with one (the GPU
# machine), every --gpu on build below must equal its --gpu off twin byte for
# byte: format 4, and format 5 in small shards on 4 threads (the shard threads
# share the GPU: one index build at a time on it, the others on CPU threads).
G=$work/gpu; mkdir -p "$G"
for c in compress compact add; do
	expect_fail "$c --gpu with a bad word" "--gpu 'maybe': expected auto, on or off" "$TADOC" "$c" --gpu maybe "$G/x.tadoc" "$work/tree"
	if tadoc "$c" --help 2>&1 | grep -F -- '--gpu auto|on|off' >/dev/null; then ok "$c --help names --gpu"; else not_ok "$c --help names --gpu"; fi
done
expect_fail "compress --gpu without a word" "--gpu" "$TADOC" compress -o "$G/x.tadoc" "$work/tree" --gpu
gpu_build() { # NAME WORD ARGS...: compress the adversarial tree with --gpu WORD into $G/NAME
	local name=$1 word=$2; shift 2
	SOURCE_DATE_EPOCH=1700000000 tadoc compress -q --gpu "$word" "$@" -o "$G/$name" "$work/tree"
}
check "compress --gpu off (format 4)" gpu_build off4 off --format 4
check "compress --gpu auto (format 4)" gpu_build auto4 auto --format 4
cmp -s "$G/off4" "$G/auto4" && ok "--gpu auto equals --gpu off (format 4)" || not_ok "--gpu auto differs from --gpu off (format 4)"
check "compress --gpu off (format 5, 64K shards, -j 4)" gpu_build off5 off --format 5 -j 4 --shard-size 64K
shards=$(tadoc info "$G/off5" | awk '$1 == "shards" { print $2 }')
[ "${shards:-0}" -ge 4 ] && ok "... $shards shards" || not_ok "... only '${shards:-?}' shards (want >= 4)"
if gpu_build on4 on --format 4 2>"$G/err"; then
	ok "compress --gpu on (a GPU is usable here)"
	cmp -s "$G/off4" "$G/on4" && ok "--gpu on equals --gpu off byte for byte (format 4)" || not_ok "--gpu on differs from --gpu off (format 4)"
	check "compress --gpu on (format 5, 64K shards, -j 4)" gpu_build on5 on --format 5 -j 4 --shard-size 64K
	cmp -s "$G/off5" "$G/on5" && ok "--gpu on equals --gpu off byte for byte (format 5)" || not_ok "--gpu on differs from --gpu off (format 5)"
	for w in on off; do
		cp "$G/off4" "$G/c$w" && cp "$G/off5" "$G/a$w"
		check "compact --format 5 --gpu $w" env SOURCE_DATE_EPOCH=1700000000 "$TADOC" compact --format 5 --gpu "$w" "$G/c$w"
		check "add --gpu $w" env SOURCE_DATE_EPOCH=1700000000 "$TADOC" add --gpu "$w" --shard-size 64K "$G/a$w" "$work/tree/text"
	done
	cmp -s "$G/con" "$G/coff" && ok "compact --gpu on equals --gpu off" || not_ok "compact --gpu on differs from --gpu off"
	cmp -s "$G/aon" "$G/aoff" && ok "add --gpu on equals --gpu off" || not_ok "add --gpu on differs from --gpu off"
else
	rc=$?
	[ "$rc" -eq 1 ] && ok "compress --gpu on without a GPU exits 1" || not_ok "compress --gpu on without a GPU exits $rc" "$(cat "$G/err")"
	grep -qE -e "^tadoc: compress: --gpu on: no (GPU|usable CUDA device)" "$G/err" && [ "$(grep -c . "$G/err")" -eq 1 ] &&
		ok "... one clear message" || not_ok "... one clear message" "$(cat "$G/err")"
	[ ! -e "$G/on4" ] && ok "... and writes nothing" || not_ok "... but wrote $G/on4"
	cp "$G/off4" "$G/c" && cp "$G/off5" "$G/a"
	expect_fail "compact --gpu on without a GPU" "--gpu on: no" "$TADOC" compact --format 5 --gpu on "$G/c"
	expect_fail "add --gpu on without a GPU" "--gpu on: no" "$TADOC" add --gpu on "$G/a" "$work/tree/text"
	cmp -s "$G/off4" "$G/c" && cmp -s "$G/off5" "$G/a" && ok "... the archives untouched" || not_ok "... an archive changed"
fi


# tadoc config -o takes tadocfs's -o lists: '\,' escapes, mount options ignored
out=$(XDG_CONFIG_HOME="$work/noconf" "$TADOC" config --print -o 'ro,allow_other,gpu_devices=0\,1,x-systemd.automount' 2>&1) || true
if printf '%s\n' "$out" | grep -q '^gpu_devices *= 0:1 *; -o$'; then ok "config --print -o as tadocfs -o"
else not_ok "config --print -o as tadocfs -o" "$out"; fi
mkfifo "$work/fifo.conf"
expect_fail "config --print of a FIFO" "fifo.conf" "$TADOC" config --print -c "$work/fifo.conf"

echo "1..$n"
[ "$failed" -eq 0 ]
