#!/usr/bin/env python3
"""Generate the adversarial test tree for tadoc, deterministically.

Usage: gen_adversarial.py [--heavy] [--seed N] DIR

DIR must not exist or be empty. The same seed always gives the same bytes,
names, modes and mtimes. Without --heavy the large members are scaled down
(so unit tests stay fast); --heavy adds the full-size ones: 20,000 tiny
files, 10 MB of one repeated byte, a 5 MB single line, 1 MB of random binary.

Covers: empty files, 1-byte files, no trailing newline, CRLF, NUL bytes,
invalid UTF-8, random binary, one repeated byte, long periodic patterns, a
single long line, a 12-deep tree, names with spaces / non-ASCII / invalid
UTF-8 / 255 bytes, many tiny files, words longer than 255 bytes, words in
several scripts, combining marks, digits of other scripts, underscores,
symlinks (relative, dangling, to a directory), unusual modes and mtimes.
"""
import argparse
import os
import random
import sys

MIB = 1 << 20

VOCAB = ("the of and to a in is it that was for on are with as I his they be "
         "at one have this from or had by word but what some we can out other "
         "were all there when up use your how said an each she The THE don't "
         "e-mail 3.14 1,000 x86_64 __init__ snake_case CamelCase O'Brien "
         "re-enter co-op U.S.A. 42 007 0x1F 1e10 tab\there").split(" ")

UNICODE_WORDS = [
    "naïve", "café", "Ελληνικά", "αβγ", "русский", "язык", "Ёлка",
    "العربية", "كتاب", "עברית", "שלום", "हिन्दी", "देवनागरी", "中文",
    "日本語", "ひらがな", "カタカナ", "한국어", "ไทย", "ภาษา", "ǅemal",
    "ﬁne", "ｆｕｌｌ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𐍈𐌰", "𠀀𠀁", "Straße", "ÆØÅ",
    "mixed日本abc", "Ꙗ", "ĳ", "ǈ", "ß", "ẞ",
]
COMBINING = ["e\u0301te\u0301", "a\u0308b", "n\u0303", "\u0301lead", "trail\u0301",
             "x\u0332y", "क्ष", "ก\u0e31น", "\u20dd", "e\u0301\u0302\u0303z"]
DIGITS = ["٠١٢٣٤٥٦٧٨٩", "۰۱۲", "१२३", "০১২", "๑๒๓", "１２３", "²³", "½",
          "Ⅻ", "①②", "〇", "𝟘𝟙𝟚", "a١b", "12٣4"]
UNDERSCORES = ["_", "__", "__init__", "a_b", "_lead", "trail_", "snake_case_word",
               "_1", "1_", "__dunder__", "a__b", "ＡＢ＿"]
SEPARATORS = [" ", " ", " ", " ", "\n", ", ", ". ", "\t", "  ", "\r\n", "; ",
              " - ", "\u00a0", "\u200b", "😀", "\u3000", "/", "'", "\"", "(", ")"]


def text_words(rng, n, vocab):
    out = []
    for _ in range(n):
        out.append(rng.choice(vocab))
        out.append(rng.choice(SEPARATORS))
    return "".join(out)


class Gen:
    def __init__(self, root, seed, heavy):
        self.root = os.fsencode(root)
        self.rng = random.Random(seed)
        self.heavy = heavy
        self.tick = 1_600_000_000
        self.dirs = []

    def _p(self, rel):
        rel = os.fsencode(rel) if isinstance(rel, str) else rel
        return os.path.join(self.root, rel)

    def mtime(self):
        self.tick += self.rng.randrange(1, 100000)
        return self.tick * 1_000_000_000 + self.rng.randrange(1_000_000_000)

    def mkdir(self, rel, mode=0o755, mtime=None):
        p = self._p(rel)
        os.makedirs(p, exist_ok=True)
        self.dirs.append((p, mode, self.mtime() if mtime is None else mtime))

    def file(self, rel, data, mode=0o644, mtime=None):
        if isinstance(data, str):
            data = data.encode("utf-8")
        p = self._p(rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
        os.chmod(p, mode)
        self._utime(p, self.mtime() if mtime is None else mtime, True)

    def symlink(self, rel, target):
        p = self._p(rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        os.symlink(target, p)
        self._utime(p, self.mtime(), False)

    @staticmethod
    def _utime(p, ns, follow):
        try:
            os.utime(p, ns=(ns, ns), follow_symlinks=follow)
        except OSError:  # a file system without that range: keep "now"
            pass

    def finish(self):
        # Directories made implicitly get a mode and mtime too; directory
        # mtimes go last, deepest first, so creating children does not change
        # them afterwards.
        known = {d[0] for d in self.dirs}
        for top, dirs, _ in sorted(os.walk(self.root)):
            if top not in known:
                self.dirs.append((top, 0o755, self.mtime()))
        for p, mode, ns in sorted(self.dirs, key=lambda d: -d[0].count(b"/")):
            os.chmod(p, mode)
            self._utime(p, ns, True)


def build(g):
    rng = g.rng
    big = g.heavy
    g.mkdir("")

    # Empty and 1-byte files, an empty directory.
    g.file("empty", b"")
    g.mkdir("empty dir")
    for name, b in [("a", b"a"), ("nl", b"\n"), ("nul", b"\0"), ("ff", b"\xff"),
                    ("space", b" "), ("underscore", b"_"), ("digit", b"7"),
                    ("cr", b"\r"), ("hi", b"\x80")]:
        g.file("one/" + name, b)

    # Text shapes.
    g.file("text/no_trailing_newline.txt", "the last line has no newline")
    g.file("text/word_space_at_eof.txt", "ends with a word and a space ")
    lines = [text_words(rng, 12, VOCAB).replace("\r\n", " ") for _ in range(300)]
    g.file("text/crlf.txt", "\r\n".join(lines) + "\r\nlone\rcarriage\r\r\n\n\r")
    g.file("text/mixed_eol.txt", "unix\nwindows\r\nold mac\rmixed\n\r\n")
    g.file("text/nul.txt", b"ab\0cd\0\0\0ef gh\0 \0ij" + b"\0" * 1000 + b"tail\0")
    inv = [b"\xff", b"\xfe", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80",
           b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\x80", b"\xbf\xbf",
           b"\xe4\xb8", b"\xf0\x9f\x98", b"\xc3", b"\xc3\x28", b"\xe2\x82\x28"]
    parts = []
    for i in range(400):
        parts.append(rng.choice(VOCAB + UNICODE_WORDS).encode())
        parts.append(rng.choice(inv))
        if i % 7 == 0:
            parts.append("日本".encode()[:rng.randrange(1, 6)])
        parts.append(rng.choice([b" ", b"", b"\n"]))
    g.file("text/invalid_utf8.txt", b"".join(parts) + b"word\xff")
    g.file("text/unicode.txt", text_words(rng, 3000, UNICODE_WORDS + VOCAB))
    g.file("text/combining.txt", text_words(rng, 800, COMBINING + VOCAB[:10]))
    g.file("text/digits.txt", text_words(rng, 800, DIGITS + ["123", "4.5"]))
    g.file("text/underscores.txt", text_words(rng, 800, UNDERSCORES + ["word"]))
    g.file("text/whitespace.txt", "  lead\t\ttabs   three  \n \n\n\t\n trailing   \n" * 50 + "   ")
    g.file("text/punct.txt", "!!?? ... ,,, ;; -- ((x)) [y] {z} <a href=\"u\">b</a> " * 200)
    g.file("text/bom.txt", "\ufeffbyte order mark first\n")

    # Words longer than TD_MAXTOK (255) bytes, and near the edge.
    longs = []
    for n in (254, 255, 256, 257, 300, 510, 511, 512, 1000, 4000):
        longs.append("L" * (n - 3) + str(n).zfill(3))
    longs += ["é" * 127 + "x",          # 255 bytes, multi-byte
              "é" * 128,                # 256 bytes, cut must respect chars
              "日" * 100,               # 300 bytes, 3-byte chars
              "𝔘" * 80,                 # 320 bytes, 4-byte chars
              "a" * 200 + "日" * 30,     # mixed widths across the cut
              "_" * 600,
              "٣" * 200]
    g.file("text/long_words.txt",
           "".join(w + rng.choice([" ", "\n", ". ", "  "]) for w in longs * 3)
           + "w" * 255 + " " + "v" * 254 + " " + "z" * 700)

    # Random binary.
    g.file("binary/random.bin", rng.randbytes(MIB if big else 64 << 10))
    g.file("binary/small_random.bin", rng.randbytes(3000))
    g.file("binary/all_bytes.bin", bytes(range(256)) * 16)

    # One repeated byte (a single enormous word) and a run of one separator.
    g.file("binary/repeated_a.bin", b"a" * (10 * MIB if big else MIB))
    g.file("binary/repeated_nl.bin", b"\n" * (100 << 10))

    # Long periodic patterns.
    plen = (1 * MIB) if big else (128 << 10)
    pats = {
        "period2.txt": b"ab",
        "period3.txt": b"ab ",
        "period7.txt": b"xy zw\r\n",
        "period64.bin": rng.randbytes(64),
        "sentence.txt": b"the quick brown fox jumps over the lazy dog\n",
        "period1000_words.txt": text_words(rng, 150, VOCAB).encode()[:1000],
        "nested.txt": (b"(" * 40 + b"word" + b")" * 40 + b" ") * 3,
    }
    for name, unit in pats.items():
        g.file("periodic/" + name, (unit * (plen // len(unit) + 1))[:plen - 1])
    fa, fb = b"a", b"ab"
    while len(fb) < plen:
        fa, fb = fb, fb + fa
    g.file("periodic/fibonacci.txt", fb[:plen])
    fa, fb = "x ", "y "
    while len(fb) < plen:
        fa, fb = fb, fb + fa
    g.file("periodic/fibonacci_words.txt", fb[:plen])

    # A single long line (no newline at all).
    n = 5 * MIB if big else 512 << 10
    s = " ".join(rng.choice(VOCAB[:60] + UNICODE_WORDS[:8]) for _ in range(n // 3))
    g.file("line/single_line.txt", s.encode()[:n].decode("utf-8", "ignore").replace("\n", " "))

    # A 12-deep tree with files at every level.
    path = "deep"
    g.mkdir(path, 0o700)
    for lvl in range(1, 13):
        path += "/" + ("d%02d" % lvl if lvl % 3 else "level %02d ü" % lvl)
        g.mkdir(path)
        g.file(path + "/file_at_%02d.txt" % lvl, "level %d says %s\n" % (lvl, text_words(rng, 20, VOCAB)))
    g.file(path + "/leaf.txt", "deepest leaf")

    # Names.
    names = ["name with spaces.txt", "naïve café.txt", "日本語のファイル.txt",
             "emoji 😀.txt", "-leading-dash", ".hidden", "trailing space ",
             "tab\tname", "UPPER.TXT", "upper.txt", "a", "a b", "a.b", "a-b",
             "a_b", "Z", "~tilde", "#hash", "colon:name", "quote'name",
             "n" * 255, "é" * 127 + "e"]
    for nm in names:
        g.file(b"names/" + os.fsencode(nm), "file named %s\n" % nm[:40])
    g.file(b"names/latin1-\xe9.txt", b"name is not UTF-8\n")
    g.file(b"names/\x01control", b"control char in name\n")

    # Modes and mtimes.
    g.file("modes/private", "0600", 0o600)
    g.file("modes/exec.sh", "#!/bin/sh\necho hi\n", 0o755)
    g.file("modes/readonly", "0444", 0o444)
    g.file("modes/group", "0640", 0o640)
    g.file("modes/old_1969", "before the epoch", mtime=-1_000_000 * 1_000_000_000 + 5)
    g.file("modes/epoch", "exactly zero", mtime=0)
    g.file("modes/future_2200", "far future", mtime=7_258_118_400 * 1_000_000_000 + 999_999_999)
    g.mkdir("modes/sticky_dir", 0o1777)
    g.file("modes/sticky_dir/f", "in sticky dir")
    g.mkdir("modes/setgid_dir", 0o2755)
    g.mkdir("modes/private_dir", 0o700)

    # Symlinks.
    g.symlink("links/rel", "../text/crlf.txt")
    g.symlink("links/dangling", "does/not/exist")
    g.symlink("links/dirlink", "../deep")
    g.symlink("links/abs", "/etc/hostname")
    g.symlink("links/unicode →", "日本語")

    # Many tiny files.
    nmany = 20000 if big else 200
    g.mkdir("many")
    for i in range(nmany):
        k = i % 6
        if k == 0:
            data = b""
        elif k == 1:
            data = bytes([rng.randrange(256)])
        elif k == 2:
            data = ("file %d\n" % i).encode()
        elif k == 3:
            data = rng.choice(VOCAB).encode()
        elif k == 4:
            data = rng.randbytes(rng.randrange(1, 40))
        else:
            data = text_words(rng, rng.randrange(1, 8), VOCAB + UNICODE_WORDS).encode()
        g.file("many/f%05d" % i, data)

    # Words that share prefixes of every length 0..255 with the word before
    # them in sorted order (format 4 stores the vocabulary front-coded with a
    # one-byte prefix length, and 10 is '\n', its word separator), 255-byte
    # words one byte apart, and multi-byte characters split by a prefix.
    stems = ["p" * k + "q" for k in range(255)] + ["p" * k + "r" for k in (9, 10, 11, 254)]
    stems += ["z" * 254 + c for c in "abc"] + ["é" * 5 + "x", "é" * 5 + "y", "éé" + "e" * 3]
    g.file("text/shared_prefixes.txt", " ".join(stems) + "\n" + "\n".join(reversed(stems)))

    # A mixed random text file, the bulk of ordinary text.
    g.file("text/mixed_random.txt", text_words(rng, (300000 if big else 30000), VOCAB + UNICODE_WORDS[:5]))
    g.finish()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--heavy", action="store_true", help="full-size members (20k files, 10 MB, 5 MB line)")
    ap.add_argument("--seed", type=int, default=20240521)
    a = ap.parse_args()
    if os.path.exists(a.dir) and os.listdir(a.dir):
        sys.exit("gen_adversarial: %s exists and is not empty" % a.dir)
    build(Gen(a.dir, a.seed, a.heavy))


if __name__ == "__main__":
    main()
