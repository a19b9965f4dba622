#!/usr/bin/env python3
"""Independent oracle for tadoc word counts and search (decision 2).

A word is what Python's re.findall(r'\\w+') finds in a file's bytes decoded
as UTF-8 with errors='surrogateescape' (so invalid bytes are separators);
positions are BYTE offsets of the word's first byte in the original file.
Entries are numbered like the archive: breadth-first from the root, the
children of a directory sorted bytewise by name. Search hits come in path
order (depth-first, names sorted bytewise), offsets ascending within a file.
Symlinks are not followed and count nothing; a directory scope aggregates
its whole subtree.

Usage:
  oracle.py count  DIR WORD [PATH]   print the number of occurrences
  oracle.py search DIR WORD [PATH]   one offset per line for a file PATH;
                                     PATH:OFFSET lines (path order) for a
                                     directory scope (no PATH = the corpus)
  oracle.py words FILE...            "= INDEX" per file, then "OFFSET LENGTH"
                                     (bytes) of each of its words
  oracle.py top [-n N] DIR [PATH]          COUNT<TAB>WORD, count descending, ties by bytes
  oracle.py vector DIR PATH                every word of PATH, COUNT<TAB>WORD by bytes
  oracle.py files [-n N] DIR PHRASE [PATH] COUNT<TAB>PATH of the files holding PHRASE
  oracle.py ngrams [-n LEN] [--top K] DIR [PATH]   COUNT<TAB>W1 W2 ... runs of LEN words
  oracle.py fuzzy [-k K] DIR WORD [PATH]   DIST<TAB>COUNT<TAB>WORD within Levenshtein K
  (options before DIR)
  (count, search and files take a phrase: words separated by single spaces,
  matched consecutively in a file's sequence of words; a hit is the offset
  of the first word. Scopes for all: a file, a directory subtree, the corpus.)
  oracle.py queries DIR -o OUT [--seed N] [--max-word N]
                                     write the query file the C tests read
  oracle.py many OUTDIR <JOBS        one job a line, CMD<TAB>DIR<TAB>WORD[<TAB>PATH]
                                     (CMD count or search): writes OUTDIR/N, what
                                     `oracle.py CMD DIR WORD [PATH]` prints, for
                                     the Nth job (from 1); each DIR is read once

Query file (one record per line, paths and words hex-encoded bytes, the
root directory written as '-'):
  T <total_bytes> <total_words>
  E <path> <f|d|l> <size> <nwords> <longest word in bytes>   every entry, in archive order
  QF <file> <word> <count> <off>...                          file scope
  QD <dir|-> <word> <count> <path>:<off>,<off>...           directory scope,
                                                             hits grouped by file
"""
import argparse
import collections
import heapq
import os
import random
import re
import signal
import stat
import sys

WORD = re.compile(r"\w+")


def entries(root):
    """(relpath bytes, lstat) for every entry below root, in archive order."""
    root = os.fsencode(root)
    out = []
    queue = collections.deque([b""])
    while queue:
        rel = queue.popleft()
        d = os.path.join(root, rel) if rel else root
        for name in sorted(os.listdir(d)):
            r = rel + b"/" + name if rel else name
            st = os.lstat(os.path.join(root, r))
            out.append((r, st))
            if stat.S_ISDIR(st.st_mode):
                queue.append(r)
    return out


def words_of(data):
    """[(word bytes, byte offset)] for data (bytes)."""
    text = data.decode("utf-8", "surrogateescape")
    res = []
    ci = bi = 0
    for m in WORD.finditer(text):
        s = m.start()
        bi += len(text[ci:s].encode("utf-8", "surrogateescape"))
        ci = s
        res.append((m.group().encode("utf-8"), bi))
    return res


class Corpus:
    def __init__(self, root):
        self.root = os.fsencode(root)
        self.entries = entries(root)
        self.kind = {}
        self.words = {}
        for rel, st in self.entries:
            if stat.S_ISREG(st.st_mode):
                self.kind[rel] = "f"
                with open(os.path.join(self.root, rel), "rb") as f:
                    self.words[rel] = words_of(f.read())
            elif stat.S_ISDIR(st.st_mode):
                self.kind[rel] = "d"
            else:
                self.kind[rel] = "l"

        self.index = collections.defaultdict(list)
        for rel in sorted(self.words, key=lambda r: r.split(b"/")):
            for w, off in self.words[rel]:
                self.index[w].append((rel, off))

    def hits(self, word, scope):
        if b" " in word:
            return self.phrase_hits(word.split(b" "), scope)
        if scope in self.kind and self.kind[scope] != "d":
            return [(f, off) for f, off in self.index.get(word, ()) if f == scope]
        pre = scope + b"/" if scope else b""
        return [(f, off) for f, off in self.index.get(word, ()) if f.startswith(pre)]

    def files_in(self, scope):
        """Regular files of scope (a file, a directory subtree, b"" = all), path order."""
        if scope in self.kind and self.kind[scope] != "d":
            return [scope] if self.kind[scope] == "f" else []
        pre = scope + b"/" if scope else b""
        return sorted((f for f in self.words if f.startswith(pre)), key=lambda r: r.split(b"/"))

    def phrase_hits(self, ws, scope):
        """Where the words ws follow each other, path order: through the
        word positions of ws[0] (built on first use)."""
        if not hasattr(self, "_pos"):
            self._pos = collections.defaultdict(list)
            self._seq = {}
            for rel in sorted(self.words, key=lambda r: r.split(b"/")):
                self._seq[rel] = [w for w, _ in self.words[rel]]
                for i, w in enumerate(self._seq[rel]):
                    self._pos[w].append((rel, i))
        m = len(ws)
        inscope = set(self.files_in(scope))
        return [(f, self.words[f][i][1]) for f, i in self._pos.get(ws[0], ())
                if f in inscope and self._seq[f][i:i + m] == ws]

    def counter(self, scope):
        memo = self.__dict__.setdefault("_counters", {})
        if scope not in memo:
            memo[scope] = collections.Counter(w for f in self.files_in(scope) for w, _ in self.words[f])
        return memo[scope]

    def top(self, scope, n):
        items = sorted(self.counter(scope).items(), key=lambda kv: (-kv[1], kv[0]))
        return items[:n] if n else items

    def vector(self, scope):
        return sorted((w, c) for w, c in self.counter(scope).items())

    def files(self, phrase, scope):
        per = collections.Counter(f for f, _ in self.hits(phrase, scope))
        return sorted(per.items(), key=lambda kv: (-kv[1], kv[0]))

    def ngrams(self, scope, n, top):
        # the runs of the last (scope, n) asked are kept: tests ask one several times
        memo = self.__dict__.setdefault("_ngrams", {})
        if (scope, n) not in memo:
            memo.clear()
            c = collections.Counter()
            for f in self.files_in(scope):
                ws = [w for w, _ in self.words[f]]
                c.update(zip(*(ws[i:] for i in range(n))))  # every run of n consecutive words
            memo[scope, n] = c
        c = memo[scope, n]
        key = lambda kv: (-kv[1], b" ".join(kv[0]))  # noqa: E731
        if top and top < len(c):
            # only runs counted at least as often as the top-th can be among the first top
            least = heapq.nlargest(top, c.values())[-1]
            return sorted(((g, k) for g, k in c.items() if k >= least), key=key)[:top]
        return sorted(c.items(), key=key)

    def fuzzy(self, word, k, scope):
        memo = self.__dict__.setdefault("_fuzzy", {})
        if (word, scope) not in memo:  # every word within 3, by brute force
            q = word.decode("utf-8", "surrogateescape")
            out = []
            for w, c in self.counter(scope).items():
                t = w.decode("utf-8", "surrogateescape")
                if abs(len(t) - len(q)) <= 3:
                    d = levenshtein(q, t)
                    if d <= 3:
                        out.append((d, c, w))
            memo[word, scope] = sorted(out, key=lambda x: (x[0], -x[1], x[2]))
        return [x for x in memo[word, scope] if x[0] <= k]


def sanitized():
    """True in a sanitizer build's run (tests/meson.build sets TD_TEST_SANITIZED=1):
    the real corpora and the larger generated inputs are the default suite's; the
    sanitizers check the same code paths on the generated trees."""
    return os.environ.get("TD_TEST_SANITIZED") == "1"


_leak_checked = set()  # the kinds of call already run with LeakSanitizer on


def leak_env(args, env=None, extra=None):
    """The environment for a `tadoc ARGS...` call (env: None for the inherited one).
    Under sanitizers, LeakSanitizer's pass at exit is about half of a sanitized
    process's CPU: the first call of each kind in a run of a test (command, its
    options, the number of arguments, extra) is leak-checked, its repeats with other
    words and scopes get detect_leaks=0. Outside sanitizers env is returned as is."""
    if not sanitized():
        return env
    kind = (str(args[0]), tuple(a for a in args if isinstance(a, str) and a.startswith("-")), len(args), extra)
    if kind in _leak_checked:
        env = dict(env or os.environ)
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    _leak_checked.add(kind)
    return env


SANITIZED_SKIP = "skipped under sanitizers (the default suite runs it)"


def corpus_skip(names):
    """Why real corpus `names` (a name or several, for the message) is not
    checked, when real_corpus() gave None."""
    if sanitized():
        return "%s: %s" % (names, SANITIZED_SKIP)
    return "%s not available: skipped (set TADOC_CORPORA)" % names


def real_corpus(name):
    """The directory of fetched corpus `name` (TADOC_CORPORA, else
    ~/.cache/tadoc-corpora), or None when it is not there or under sanitizers
    (sanitized())."""
    if sanitized():
        return None
    for d in (os.environ.get("TADOC_CORPORA"),
              os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tadoc-corpora")):
        if d and os.path.isdir(os.path.join(d, name)) and os.listdir(os.path.join(d, name)):
            return os.path.join(d, name)
    return None


def make_many_words(root, n=40000, seed=41):
    """A tree whose vocabulary is over two blocks of a stored root vector (16384 words):
    n distinct words (ASCII, accented, CJK, digits; prefixes shared in runs, as front
    coding meets them) over three files in two directories, some words repeated."""
    rng = random.Random(seed)
    alpha = ["ab", "abc", "x86_", "zz", "é", "日本", "q", "Ω"]
    words = ["%s%05d%s" % (rng.choice(alpha), i, rng.choice(("", "s", "ing", "é"))) for i in range(n)]
    os.makedirs(os.path.join(root, "d1"), exist_ok=True)
    os.makedirs(os.path.join(root, "d2"), exist_ok=True)
    paths = [os.path.join(root, "d1", "a.txt"), os.path.join(root, "d1", "b.txt"), os.path.join(root, "d2", "c.txt")]
    for k, p in enumerate(paths):
        part = words[k::3] + rng.sample(words, n // 10)
        rng.shuffle(part)
        with open(p, "w", encoding="utf-8") as f:
            for i in range(0, len(part), 12):
                f.write(" ".join(part[i:i + 12]) + ",\n")


def levenshtein(a, b):
    """Edit distance over code points, brute force (the full matrix)."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def esc_path(p):
    return p.replace(b"\\", b"\\\\").replace(b"\n", b"\\n")


def answer(c, cmd, word, path):
    """What `oracle.py count|search DIR WORD PATH` prints (word and path bytes)."""
    scope = path.strip(b"/")
    if scope and scope not in c.kind:
        sys.exit("oracle: no such path in %s: %s" % (os.fsdecode(c.root), os.fsdecode(path)))
    hs = c.hits(word, scope)
    if cmd == "count":
        return b"%d\n" % len(hs)
    if scope and c.kind[scope] == "f":
        return b"".join(b"%d\n" % off for _, off in hs)
    # path:offset lines escape '\\' and newline (td_path_escape)
    return b"".join(esc_path(f) + b":%d\n" % off for f, off in hs)


def render(cmd, c, args):
    """The exact bytes tadoc CMD prints for these arguments (analytics)."""
    scope = os.fsencode(args.get("path", "")).strip(b"/")
    scope = b"" if scope == b"." else scope
    if cmd == "top":
        return b"".join(b"%d\t%s\n" % (n, w) for w, n in c.top(scope, args.get("n", 20)))
    if cmd == "vector":
        return b"".join(b"%d\t%s\n" % (n, w) for w, n in c.vector(scope))
    if cmd == "files":
        items = c.files(os.fsencode(args["word"]), scope)
        if args.get("n"):
            items = items[:args["n"]]
        return b"".join(b"%d\t%s\n" % (n, esc_path(f)) for f, n in items)
    if cmd == "ngrams":
        return b"".join(b"%d\t%s\n" % (n, b" ".join(g))
                        for g, n in c.ngrams(scope, args.get("len", 3), args.get("top", 20)))
    if cmd == "fuzzy":
        return b"".join(b"%d\t%d\t%s\n" % m for m in c.fuzzy(os.fsencode(args["word"]), args.get("k", 1), scope))
    raise ValueError(cmd)


def hx(b):
    return b.hex() if b else "-"


def write_queries(c, out, seed, max_word):
    rng = random.Random(seed)
    freq = collections.Counter(w for ws in c.words.values() for w, _ in ws)
    allw = sorted(w for w in freq if len(w) <= max_word)
    top = [w for w, _ in freq.most_common(40) if len(w) <= max_word][:30]
    absent = [b"zzqqxx", b"Thee", b"th", b"he", "ΑΒΓΔ".encode(), b"x" * 300,
              "日本語日本語".encode(), b"L" * 256, b"_x_"]
    special = [w for w in allw if len(w) > 200 or any(ch > 0x7f for ch in w) or b"_" in w]
    glob = list(dict.fromkeys(top + rng.sample(allw, min(40, len(allw))) + special[:150] + absent))
    small = top[:3] + absent[:3]

    def qf(f, w, byword):
        hs = byword.get(w, ())
        out.write("QF %s %s %d%s\n" % (hx(f), w.hex(), len(hs), "".join(" %d" % o for o in hs)))

    def qd(d, w):
        hs = c.hits(w, d)
        groups = []
        for f, o in hs:
            if groups and groups[-1][0] == f:
                groups[-1][1].append(o)
            else:
                groups.append((f, [o]))
        out.write("QD %s %s %d%s\n" % (hx(d), w.hex(), len(hs),
                  "".join(" %s:%s" % (f.hex(), ",".join(map(str, offs))) for f, offs in groups)))

    total_bytes = sum(st.st_size for r, st in c.entries if c.kind[r] == "f")
    out.write("T %d %d\n" % (total_bytes, sum(len(v) for v in c.words.values())))
    for rel, st in c.entries:
        k = c.kind[rel]
        ws = c.words.get(rel, [])
        size = st.st_size if k != "d" else 0
        out.write("E %s %s %d %d %d\n" % (hx(rel), k, size, len(ws), max((len(w) for w, _ in ws), default=0)))
    for w in glob:
        qd(b"", w)
    dirs = [r for r, _ in c.entries if c.kind[r] == "d"]
    for d in rng.sample(dirs, min(6, len(dirs))):
        for w in top[:3] + glob[30:40] + absent[:2]:
            qd(d, w)
    for rel, _ in c.entries:
        if c.kind[rel] != "f":
            continue
        byword = collections.defaultdict(list)
        for w, off in c.words[rel]:
            byword[w].append(off)
        own = [w for w in byword if len(w) <= max_word]
        pick = own[:5] + rng.sample(own[5:], min(5, max(0, len(own) - 5)))
        for w in dict.fromkeys(small + pick):
            qf(rel, w, byword)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("count", "search"):
        p = sub.add_parser(name)
        p.add_argument("dir")
        p.add_argument("word")
        p.add_argument("path", nargs="?", default="")
    p = sub.add_parser("top")
    p.add_argument("dir")
    p.add_argument("-n", type=int, default=20)
    p.add_argument("path", nargs="?", default="")
    p = sub.add_parser("vector")
    p.add_argument("dir")
    p.add_argument("path")
    p = sub.add_parser("files")
    p.add_argument("dir")
    p.add_argument("word")
    p.add_argument("path", nargs="?", default="")
    p.add_argument("-n", type=int, default=0)
    p = sub.add_parser("ngrams")
    p.add_argument("dir")
    p.add_argument("-n", dest="len", type=int, default=3)
    p.add_argument("--top", type=int, default=20)
    p.add_argument("path", nargs="?", default="")
    p = sub.add_parser("fuzzy")
    p.add_argument("dir")
    p.add_argument("word")
    p.add_argument("-k", type=int, default=1)
    p.add_argument("path", nargs="?", default="")
    p = sub.add_parser("words")
    p.add_argument("file", nargs="+")
    p = sub.add_parser("many")
    p.add_argument("outdir")
    p = sub.add_parser("queries")
    p.add_argument("dir")
    p.add_argument("-o", "--out", required=True)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--max-word", type=int, default=4096)
    a = ap.parse_args()
    if a.cmd == "words":
        for i, name in enumerate(a.file):
            print("=", i)
            with open(name, "rb") as f:
                for w, off in words_of(f.read()):
                    print(off, len(w))
        return
    if a.cmd == "many":
        trees = {}
        for i, line in enumerate(sys.stdin.buffer.read().split(b"\n")[:-1], 1):
            cmd, d, word, *path = line.split(b"\t")
            if d not in trees:
                trees[d] = Corpus(d)
            with open(os.path.join(a.outdir, str(i)), "wb") as f:
                f.write(answer(trees[d], cmd.decode(), word, path[0] if path else b""))
        return
    c = Corpus(a.dir)
    if a.cmd in ("top", "vector", "files", "ngrams", "fuzzy"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        sys.stdout.buffer.write(render(a.cmd, c, vars(a)))
        return
    if a.cmd == "queries":
        with open(a.out, "w") as out:
            write_queries(c, out, a.seed, a.max_word)
        return
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.stdout.buffer.write(answer(c, a.cmd, os.fsencode(a.word), os.fsencode(a.path)))


if __name__ == "__main__":
    main()
