"""tadoc.Archive: one open archive (read-only), its files, counts, searches and analytics."""
import array
import collections
import ctypes
import errno
import io
import os
import stat as _stat
import threading
import weakref

from . import _lib
from ._lib import TadocError, TD_ROOT, TD_MAXPATH

MAX_LINK_HOPS = 40

StatResult = collections.namedtuple("StatResult", "st_mode st_size st_mtime st_mtime_ns st_nwords")
StatResult.__doc__ = """An entry's attributes: mode (S_IFREG/S_IFDIR/S_IFLNK and permission bits),
size in bytes (a symlink: its target's length), mtime (float seconds and
integer nanoseconds), and its number of word tokens (files; 0 otherwise)."""


def _b(s):
    """str (encoded like os.fsencode) or bytes -> bytes."""
    if isinstance(s, bytes):
        return s
    if isinstance(s, str):
        return os.fsencode(s)
    if isinstance(s, os.PathLike):
        return os.fsencode(s)
    raise TypeError("expected str or bytes, not %s" % type(s).__name__)


def _word_b(w):
    if isinstance(w, bytes):
        return w
    if isinstance(w, str):
        return w.encode("utf-8", "surrogateescape")
    raise TypeError("expected str or bytes, not %s" % type(w).__name__)


def _int(name, v):
    """v when it is an int (bool excluded), else TypeError naming the argument."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError("%s must be an int, not %s" % (name, type(v).__name__))
    return v


U64_MAX = (1 << 64) - 1


def _u64(v):
    """A count bound (top n) for a C uint64: ctypes wraps larger ints silently
    (2**64 + 5 would become 5), and any bound past 2**64 - 1 means "all"."""
    return min(v, U64_MAX)


def _unpack_pairs(v, n):
    """Lists of the entries and the 64-bit values of n {td_entry, uint64}
    structs (td_hit, td_file_count: 16 bytes each, 4 of them padding)."""
    if not n:
        return [], []
    arr = array.array("Q", ctypes.string_at(v, 16 * n))
    return [x & 0xFFFFFFFF for x in arr[0::2]], arr[1::2].tolist()


def _split_counts(wc):
    """The words and counts of a td_word_counts, as two lists."""
    if not wc.n:
        return [], []
    words = ctypes.string_at(wc.words, wc.len).decode("utf-8", "surrogateescape").split("\n")
    return words[:wc.n], array.array("Q", ctypes.string_at(wc.count, 8 * wc.n)).tolist()


class WordCounts(collections.namedtuple("WordCounts", "words counts")):
    """Words with their counts, packed for shipping between processes:
    `words` (bytes: every word followed by a newline) and `counts` (bytes:
    one native uint64 a word). Two bytes objects pickle at memory speed, where a
    dict of millions of words takes seconds. Lists from vector_part are in
    byte order of the words (what merge_word_counts needs)."""
    __slots__ = ()

    @property
    def n(self):
        """The number of words."""
        return len(self.counts) // 8

    def items(self):
        """[(word, count)] as str words (surrogate escapes for non-UTF-8)."""
        words, counts = _split_packed(self)
        return list(zip(words, counts))


def _packed(wc):
    """A WordCounts copied out of a td_word_counts."""
    if not wc.n:
        return WordCounts(b"", b"")
    return WordCounts(ctypes.string_at(wc.words, wc.len), ctypes.string_at(wc.count, 8 * wc.n))


def _split_packed(p):
    n = len(p.counts) // 8
    if not n:
        return [], []
    return p.words.decode("utf-8", "surrogateescape").split("\n")[:n], array.array("Q", p.counts).tolist()


def _wc_of(p):
    """A td_word_counts that points into WordCounts p's bytes (valid while p lives)."""
    if len(p.counts) % 8:
        raise TadocError(errno.EINVAL, "invalid argument: counts of %d bytes are not uint64s" % len(p.counts))
    return _lib.td_word_counts(ctypes.cast(ctypes.c_char_p(p.words), ctypes.c_void_p), len(p.words),
                               ctypes.cast(ctypes.c_char_p(p.counts), ctypes.POINTER(ctypes.c_uint64)),
                               len(p.counts) // 8)


def _wc_call(fn, *args):
    wc = _lib.td_word_counts()
    L = _lib.lib()
    _lib.clear_detail()
    err = fn(*args, ctypes.byref(wc))
    if err:
        raise _lib.error(err)
    try:
        return _packed(wc)
    finally:
        L.td_word_counts_free(ctypes.byref(wc))


def merge_word_counts(parts):
    """Add up WordCounts lists, each in strictly ascending byte order of its
    words (vector_part's), into one in that order (td_word_counts_merge,
    in C without the GIL). TadocError EINVAL for a list out of order."""
    parts = [WordCounts(*p) for p in parts]
    arr = (_lib.td_word_counts * max(1, len(parts)))(*[_wc_of(p) for p in parts])
    return _wc_call(_lib.lib().td_word_counts_merge, arr, len(parts))


def top_word_counts(p, n):
    """The n most frequent words of WordCounts p (each word once; n = 0:
    all) as [(word, count)], count descending, ties by word bytes
    (td_word_counts_top)."""
    if n < 0:
        raise TadocError(errno.EINVAL, "invalid argument: n must be >= 0, not %d" % n)
    p = WordCounts(*p)
    wc = _wc_of(p)
    return _wc_call(_lib.lib().td_word_counts_top, ctypes.byref(wc), _u64(_int("n", n))).items()


class Archive:
    """A tadoc archive opened read-only (memory-mapped; opening costs O(files),
    not O(size)).

    Paths inside the archive are '/'-separated and relative ("" or "." is
    the root); str paths are encoded as os.fsencode does (so names that are
    not UTF-8 round-trip), and functions return str paths for str
    arguments and bytes for bytes, as os.listdir does. Symlinks inside the
    archive are followed (stat(follow_symlinks=False) and lstat do not).

    Errors raise TadocError (an OSError: errno ENOENT, ENOTDIR, EISDIR,
    EINVAL, EIO for a damaged archive, ...) carrying the engine's message,
    the archive's path (filename) and the path inside it (filename2).

    Thread safety: every method may be called from many threads at once
    (the engine's read calls are thread-safe on one archive and run
    without the GIL); close() waits for calls in flight, and later calls
    raise ValueError. A file object from open() is for one thread at a time
    (as any Python file object).

    Pickling reopens the archive by path (for process pools and Dask).
    """

    def __init__(self, path, verify=False):
        self._path = os.fspath(path)
        if (b"\0" if isinstance(self._path, bytes) else "\0") in self._path:
            # ctypes would pass the string cut at the NUL, opening another file (open() refuses it too)
            raise ValueError("embedded null byte in the archive path %r" % (self._path,))
        L = _lib.lib()
        self._L = L
        h = ctypes.c_void_p()
        _lib.clear_detail()
        err = L.td_archive_open(_b(self._path), 1 if verify else 0, ctypes.byref(h))
        if err:
            raise _lib.error(err, self._path)
        self._h = h.value
        self._verify = verify
        self._cond = threading.Condition()
        self._busy = 0
        self._closed = False
        self._files = weakref.WeakSet()
        self._raws = weakref.WeakSet()  # a reader's raw file may be detached from it

    # --- lifetime -------------------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __reduce__(self):
        return (Archive, (self._path, self._verify))

    def __repr__(self):
        return "<tadoc.Archive %r%s>" % (self._path, " (closed)" if self._closed else "")

    @property
    def path(self):
        """The archive's path, as given."""
        return self._path

    @property
    def closed(self):
        return self._closed

    def close(self):
        """Close the archive (after the calls in flight return) and every file
        opened from it. Closing twice is harmless."""
        if not hasattr(self, "_cond"):
            return
        with self._cond:
            if self._closed:
                return
            self._closed = True
            while self._busy:
                self._cond.wait()
        for f in list(self._files):
            try:
                f.close()  # its reader's buffer too: a later read raises ValueError
            except ValueError:  # a reader whose raw file was detached (closed below)
                pass
        for r in list(self._raws):
            r.close()
        self._L.td_archive_close(self._h)
        self._h = None

    def _enter(self):
        with self._cond:
            if self._closed:
                raise ValueError("I/O operation on a closed tadoc.Archive (%s)" % self._path)
            self._busy += 1
        return self._h

    def _leave(self):
        with self._cond:
            self._busy -= 1
            if not self._busy:
                self._cond.notify_all()

    def _err(self, err, path=None):
        return _lib.error(err, self._path, path)

    # --- paths ----------------------------------------------------------
    def _stat_e(self, h, e, path=None):
        st = _lib.td_stat()
        err = self._L.td_archive_stat(h, e, ctypes.byref(st))
        if err:
            raise self._err(err, path)
        return st

    def _readlink_e(self, h, e, path):
        buf = ctypes.create_string_buffer(TD_MAXPATH + 2)
        n = ctypes.c_size_t()
        err = self._L.td_archive_readlink(h, e, buf, len(buf), ctypes.byref(n))
        if err:
            raise self._err(err, path)
        return buf.raw[:n.value]

    def _resolve(self, h, path, follow_last=True):
        """Entry of `path` (bytes), following symlinks as tadoc's CLI does."""
        todo = path
        cur = TD_ROOT
        hops = 0
        pos = 0
        L = self._L
        out = ctypes.c_uint32()
        while True:
            while pos < len(todo) and todo[pos:pos + 1] == b"/":
                pos += 1
            if pos >= len(todo):
                return cur
            end = todo.find(b"/", pos)
            end = len(todo) if end < 0 else end
            name = todo[pos:end]
            last = end == len(todo)
            if name == b".":
                pos = end
                continue
            if name == b"..":
                if cur == TD_ROOT:
                    raise TadocError(errno.EINVAL, "'..' leads outside the archive", self._path, path,
                                     _lib.TD_EINVAL)
                cur = self._stat_e(h, cur, path).parent
                pos = end
                continue
            err = L.td_archive_lookup(h, cur, name, len(name), ctypes.byref(out))
            if err == _lib.TD_ENOENT:
                raise TadocError(errno.ENOENT, "not found: no '%s' in the archive" % os.fsdecode(name),
                                 self._path, path, err)
            if err == _lib.TD_ENOTDIR:
                raise TadocError(errno.ENOTDIR, "not a directory: a path component before '%s' is not a "
                                 "directory" % os.fsdecode(name), self._path, path, err)
            if err:
                raise self._err(err, path)
            e = out.value
            st = self._stat_e(h, e, path)
            if _stat.S_ISLNK(st.mode) and (not last or follow_last):
                hops += 1
                if hops > MAX_LINK_HOPS:
                    raise TadocError(errno.ELOOP, "too many levels of symbolic links", self._path, path,
                                     _lib.TD_ELIMIT)
                target = self._readlink_e(h, e, path)
                if target.startswith(b"/"):
                    raise TadocError(errno.EINVAL, "symlink '%s' points outside the archive (%s)"
                                     % (os.fsdecode(name), os.fsdecode(target)), self._path, path,
                                     _lib.TD_EINVAL)
                todo = target + todo[end:]
                pos = 0
                continue
            if not last and not _stat.S_ISDIR(st.mode):
                raise TadocError(errno.ENOTDIR, "not a directory: '%s' is not a directory" % os.fsdecode(name),
                                 self._path, path, _lib.TD_ENOTDIR)
            cur = e
            pos = end

    def _scope(self, h, path):
        if path is None:
            return TD_ROOT
        return self._resolve(h, _b(path))

    def _path_of(self, h, e):
        buf = ctypes.create_string_buffer(TD_MAXPATH + 2)
        n = self._L.td_archive_path(h, e, buf, len(buf))
        if n < 0:
            raise self._err(n)
        return buf.raw[:n]

    # --- the tree -------------------------------------------------------
    def ls(self, path=""):
        """Names of the entries of directory `path` (default the root), in
        byte order; str for a str path, bytes for bytes."""
        pb = _b(path)
        h = self._enter()
        try:
            e = self._resolve(h, pb)
            first, count = ctypes.c_uint32(), ctypes.c_uint32()
            err = self._L.td_archive_children(h, e, ctypes.byref(first), ctypes.byref(count))
            if err:
                raise self._err(err, pb)
            n = ctypes.c_size_t()
            names = []
            for c in range(first.value, first.value + count.value):
                p = self._L.td_archive_name(h, c, ctypes.byref(n))
                names.append(ctypes.string_at(p, n.value) if n.value else b"")
        finally:
            self._leave()
        return names if isinstance(path, bytes) else [os.fsdecode(x) for x in names]

    def stat(self, path, follow_symlinks=True):
        """StatResult of `path` (following a final symlink unless
        follow_symlinks is False)."""
        pb = _b(path)
        h = self._enter()
        try:
            st = self._stat_e(h, self._resolve(h, pb, follow_symlinks), pb)
        finally:
            self._leave()
        ns = st.mtime_sec * 1_000_000_000 + st.mtime_nsec
        return StatResult(st.mode, st.size, ns / 1e9, ns, st.nwords)

    def lstat(self, path):
        """stat() of `path` itself (a symlink is not followed)."""
        return self.stat(path, follow_symlinks=False)

    def readlink(self, path):
        """The target of symlink `path` (str or bytes, as path)."""
        pb = _b(path)
        h = self._enter()
        try:
            e = self._resolve(h, pb, False)
            st = self._stat_e(h, e, pb)
            if not _stat.S_ISLNK(st.mode):
                raise TadocError(errno.EINVAL, "invalid argument: not a symlink", self._path, pb, _lib.TD_EINVAL)
            t = self._readlink_e(h, e, pb)
        finally:
            self._leave()
        return t if isinstance(path, bytes) else os.fsdecode(t)

    def walk_entries(self):
        """Every entry as (path bytes, StatResult) in archive order (breadth
        first, names in byte order; the root is left out): O(entries)."""
        h = self._enter()
        try:
            L = self._L
            n = L.td_archive_nentries(h)
            paths = [b""]
            ln = ctypes.c_size_t()
            st = _lib.td_stat()
            out = []
            for e in range(1, n):
                err = L.td_archive_stat(h, e, ctypes.byref(st))
                if err:
                    raise self._err(err)
                p = L.td_archive_name(h, e, ctypes.byref(ln))
                name = ctypes.string_at(p, ln.value)
                par = paths[st.parent]
                full = par + b"/" + name if par else name
                paths.append(full)
                ns = st.mtime_sec * 1_000_000_000 + st.mtime_nsec
                out.append((full, StatResult(st.mode, st.size, ns / 1e9, ns, st.nwords)))
        finally:
            self._leave()
        return out

    def info(self):
        """Sizes and counts of the archive (tadoc info), as a dict."""
        h = self._enter()
        try:
            inf = _lib.td_info()
            self._L.td_archive_info(h, ctypes.byref(inf))
            d = {k: getattr(inf, k) for k, _ in _lib.td_info._fields_ if k != "section_bytes"}
            d["version"] = self._L.td_archive_version(h)
            d["nshards"] = self._L.td_archive_nshards(h)
        finally:
            self._leave()
        return d

    def shard_of(self, path):
        """The shard holding the start of file `path` in a format 5 archive
        (None for an empty directory); TadocError EINVAL for formats 1-4."""
        pb = _b(path)
        h = self._enter()
        try:
            e = self._resolve(h, pb)
            pc = ctypes.POINTER(_lib.td_disk_piece)()
            n = ctypes.c_uint64()
            err = self._L.td_archive_pieces(h, e, ctypes.byref(pc), ctypes.byref(n))
            if err:
                raise self._err(err, pb)
            shard = pc[0].shard if n.value else None
        finally:
            self._leave()
        return shard

    # --- reading --------------------------------------------------------
    def read(self, path, offset=0, size=-1):
        """Bytes [offset, offset + size) of file `path` (size < 0: to the end;
        at or past the end: b"")."""
        _int("offset", offset)
        if size is not None:
            _int("size", size)
        if offset < 0:
            raise TadocError(errno.EINVAL, "invalid argument: negative offset %d" % offset, self._path,
                             _b(path), _lib.TD_EINVAL)
        pb = _b(path)
        h = self._enter()
        try:
            e = self._resolve(h, pb)
            st = self._stat_e(h, e, pb)
            if _stat.S_ISDIR(st.mode):
                raise TadocError(errno.EISDIR, "is a directory", self._path, pb, _lib.TD_EISDIR)
            left = max(0, st.size - offset)
            n = left if size is None or size < 0 else min(size, left)
            if n == 0:
                return b""
            buf = bytearray(n)
            cbuf = (ctypes.c_char * n).from_buffer(buf)
            got = ctypes.c_size_t()
            done = 0
            addr = ctypes.addressof(cbuf)
            _lib.clear_detail()
            while done < n:
                err = self._L.td_extract(h, e, offset + done, addr + done, n - done, ctypes.byref(got))
                if err:
                    raise self._err(err, pb)
                if got.value == 0:
                    break
                done += got.value
            del cbuf
        finally:
            self._leave()
        if done < n:
            del buf[done:]
        return bytes(buf)

    def open(self, path):
        """A seekable binary file object (io.BufferedReader) over file `path`;
        sequential reads continue where the last one ended (a cursor)."""
        pb = _b(path)
        h = self._enter()
        try:
            e = self._resolve(h, pb)
            st = self._stat_e(h, e, pb)
            if _stat.S_ISDIR(st.mode):
                raise TadocError(errno.EISDIR, "is a directory", self._path, pb, _lib.TD_EISDIR)
            raw = ArchiveRawFile(self, h, e, st.size, path)
        finally:
            self._leave()
        f = io.BufferedReader(raw, buffer_size=256 * 1024)
        self._files.add(f)  # the reader, not raw: closing raw alone leaves its buffer readable
        self._raws.add(raw)
        return f

    # --- words ----------------------------------------------------------
    def _phrase(self, word):
        wb = _word_b(word)
        if not self._L.td_phrase_words(wb, len(wb)):
            raise TadocError(errno.EINVAL, "not a single word: %r is not a word or a phrase (words separated "
                             "by single spaces)" % (word,), self._path, None, _lib.TD_ENOTWORD)
        return wb

    def _paths(self, h, entries, want_bytes):
        memo = {}
        out = []
        for e in entries:
            p = memo.get(e)
            if p is None:
                p = self._path_of(h, e)
                memo[e] = p = p if want_bytes else os.fsdecode(p)
            out.append(p)
        return out

    def count(self, word_or_phrase, path=None):
        """Occurrences of a word (or a phrase: words separated by single
        spaces, matched consecutively) in file `path`, the subtree of
        directory `path`, or the whole corpus (None)."""
        wb = self._phrase(word_or_phrase)
        h = self._enter()
        try:
            scope = self._scope(h, path)
            n = ctypes.c_uint64()
            _lib.clear_detail()
            err = self._L.td_phrase_count(h, wb, len(wb), scope, ctypes.byref(n))
            if err:
                raise self._err(err, None if path is None else _b(path))
        finally:
            self._leave()
        return n.value

    def _hit_pairs(self, err, hits, path):
        """(files, offsets) of a td_hits an engine call filled with status
        err (raised as TadocError naming path); the hits are freed."""
        try:
            if err:
                raise self._err(err, None if path is None else _b(path))
            return _unpack_pairs(hits.v, hits.n)
        finally:
            self._L.td_hits_free(ctypes.byref(hits))

    def search(self, word_or_phrase, path=None):
        """Every occurrence as (file path, byte offset of the first word),
        files in path order, offsets ascending (scope as count())."""
        wb = self._phrase(word_or_phrase)
        hits = _lib.td_hits()
        h = self._enter()
        try:
            scope = self._scope(h, path)
            _lib.clear_detail()
            err = self._L.td_phrase_search(h, wb, len(wb), scope, ctypes.byref(hits))
            files, offs = self._hit_pairs(err, hits, path)
            paths = self._paths(h, files, isinstance(path, bytes))
        finally:
            self._leave()
        return list(zip(paths, offs))

    def search_part(self, word_or_phrase, k, path=None):
        """Part k (0 <= k < vector_nparts(path)) of search(): its raw hits
        as bytes (td_hit structs), for search_merge. With several parts
        (format 5) part k is td_search on the scope's k-th piece in its
        shard (the shard's entries, the piece's offsets); with one part,
        or for a phrase (which may span a cut: k must be 0), the whole
        search (this archive's entries)."""
        wb = self._phrase(word_or_phrase)
        phrase = b" " in wb
        hits = _lib.td_hits()
        h = self._enter()
        try:
            scope = self._scope(h, path)
            n = 1 if phrase else self.vector_nparts(path)
            if not 0 <= k < n:
                raise TadocError(errno.EINVAL, "invalid argument: part %d of %d" % (k, n), self._path, None,
                                 _lib.TD_EINVAL)
            _lib.clear_detail()
            on, where = h, scope
            if n > 1:
                pc = ctypes.POINTER(_lib.td_disk_piece)()
                npc = ctypes.c_uint64()
                s = ctypes.c_void_p()
                err = self._L.td_archive_pieces(h, scope, ctypes.byref(pc), ctypes.byref(npc))
                if not err:
                    err = self._L.td_archive_shard(h, pc[k].shard, ctypes.byref(s))
                if err:
                    raise self._err(err, None if path is None else _b(path))
                on, where = s, pc[k].local
            err = self._L.td_phrase_search(on, wb, len(wb), where, ctypes.byref(hits))
            try:
                if err:
                    raise self._err(err, None if path is None else _b(path))
                return ctypes.string_at(hits.v, 16 * hits.n) if hits.n else b""
            finally:
                self._L.td_hits_free(ctypes.byref(hits))
        finally:
            self._leave()

    def search_merge(self, parts, path=None):
        """search()'s answer, [(file path, offset)], from the search_part
        results of every part in order (td_archive_search_merge: a
        piece's hits named in the whole tree, offsets moved by the piece's
        start, path order)."""
        parts = list(parts)
        h = self._enter()
        try:
            scope = self._scope(h, path)
            if len(parts) == 1:
                arr = array.array("Q", parts[0])
                files, offs = [x & 0xFFFFFFFF for x in arr[0::2]], arr[1::2].tolist()
            else:
                per = (_lib.td_hits * len(parts))(*[
                    _lib.td_hits(ctypes.cast(ctypes.c_char_p(b), ctypes.POINTER(_lib.td_hit)), len(b) // 16,
                                 len(b) // 16) for b in parts])
                out = _lib.td_hits()
                _lib.clear_detail()
                err = self._L.td_archive_search_merge(h, scope, per, len(parts), ctypes.byref(out))
                files, offs = self._hit_pairs(err, out, path)
            paths = self._paths(h, files, isinstance(path, bytes))
        finally:
            self._leave()
        return list(zip(paths, offs))

    def words(self, path=None):
        """Number of word tokens in the scope (file, subtree, corpus)."""
        h = self._enter()
        try:
            scope = self._scope(h, path)
            n = ctypes.c_uint64()
            err = self._L.td_word_total(h, scope, ctypes.byref(n))
            if err:
                raise self._err(err, None if path is None else _b(path))
        finally:
            self._leave()
        return n.value

    # --- analytics (td_analytics.h) -------------------------------------
    def _word_list(self, call, path, *args):
        """(word, count) pairs of a td_*_collect call: one flat buffer of
        words separated by newlines (a word never holds one) and an array of
        counts, split here at C speed instead of one callback a word."""
        wc = _lib.td_word_counts()
        h = self._enter()
        try:
            scope = self._scope(h, path)
            _lib.clear_detail()
            err = call(h, scope, *args, ctypes.byref(wc))
            if err:
                raise self._err(err, None if path is None else _b(path))
            try:
                words, counts = _split_counts(wc)
            finally:
                self._L.td_word_counts_free(ctypes.byref(wc))
        finally:
            self._leave()
        return list(zip(words, counts))

    def top(self, n=20, path=None):
        """The n most frequent words (n = 0: all) as (word, count), count
        descending, ties by word bytes ascending; computed on the grammar."""
        if _int("n", n) < 0:
            raise TadocError(errno.EINVAL, "invalid argument: n must be >= 0, not %d" % n, self._path, None,
                             _lib.TD_EINVAL)
        return self._word_list(self._L.td_top_words_collect, path, _u64(n))

    def vector(self, path=None):
        """Every word of the scope with its count, (word, count) in byte order
        of the words (the term vector)."""
        return self._word_list(self._L.td_term_vector_collect, path)

    def word_counts(self, path=None):
        """{word: count} of every word of the scope (the term vector as a
        dict, in word byte order)."""
        return dict(self._word_list(self._L.td_term_vector_collect, path))

    def vector_nparts(self, path=None):
        """The number of parts vector_part splits the scope's term vector
        into (td_term_vector_nparts): a format 5 archive's pieces of the
        scope (one per shard holding part of a directory), else 1."""
        h = self._enter()
        try:
            scope = self._scope(h, path)
            n = ctypes.c_uint32()
            _lib.clear_detail()
            err = self._L.td_term_vector_nparts(h, scope, ctypes.byref(n))
            if err:
                raise self._err(err, None if path is None else _b(path))
        finally:
            self._leave()
        return n.value

    def vector_part(self, k, path=None):
        """Part k (0 <= k < vector_nparts(path)) of the scope's term vector
        as a WordCounts (packed: words in byte order, counts); the parts
        added up with merge_word_counts give vector(path) exactly."""
        if not 0 <= _int("k", k) <= 0xFFFFFFFF:  # a td part number is a uint32: ctypes would wrap it
            raise TadocError(errno.EINVAL, "invalid argument: part must be 0..2^32-1, not %d" % k, self._path, None,
                             _lib.TD_EINVAL)
        wc = _lib.td_word_counts()
        h = self._enter()
        try:
            scope = self._scope(h, path)
            _lib.clear_detail()
            err = self._L.td_term_vector_part_collect(h, scope, k, ctypes.byref(wc))
            if err:
                raise self._err(err, None if path is None else _b(path))
            try:
                return _packed(wc)
            finally:
                self._L.td_word_counts_free(ctypes.byref(wc))
        finally:
            self._leave()

    def files(self, word_or_phrase, n=0, path=None):
        """(file path, count) of every file (under `path`) holding the word or
        phrase, count descending, ties by path; the first n only (0: all)."""
        if _int("n", n) < 0:
            raise TadocError(errno.EINVAL, "invalid argument: n must be >= 0, not %d" % n, self._path, None,
                             _lib.TD_EINVAL)
        wb = self._phrase(word_or_phrase)
        v = ctypes.POINTER(_lib.td_file_count)()
        k = ctypes.c_size_t()
        h = self._enter()
        try:
            scope = self._scope(h, path)
            _lib.clear_detail()
            err = self._L.td_phrase_files(h, wb, len(wb), scope, ctypes.byref(v), ctypes.byref(k))
            try:
                if err:
                    raise self._err(err, None if path is None else _b(path))
                m = k.value if not n else min(n, k.value)
                files, counts = _unpack_pairs(v, m)
            finally:
                _lib.libc_free(ctypes.cast(v, ctypes.c_void_p))
            paths = self._paths(h, files, isinstance(path, bytes))
        finally:
            self._leave()
        return list(zip(paths, counts))

    def ngrams(self, n=3, top=20, path=None):
        """The `top` most frequent runs of n consecutive words (2 <= n <= 8;
        top = 0: all) as (tuple of words, count), count descending, ties by
        the words joined with spaces."""
        if not 2 <= _int("n", n) <= _lib.TD_PHRASE_MAX or _int("top", top) < 0:
            raise TadocError(errno.EINVAL, "invalid argument: n must be 2..%d and top >= 0 (n=%d, top=%d)"
                             % (_lib.TD_PHRASE_MAX, n, top), self._path, None, _lib.TD_EINVAL)
        out = []

        def fn(ctx, words, lens, nw, count):
            out.append((tuple(ctypes.string_at(words[i], lens[i]).decode("utf-8", "surrogateescape")
                              for i in range(nw)), count))
            return 0

        cb = _lib.NGRAM_FN(fn)
        h = self._enter()
        try:
            scope = self._scope(h, path)
            _lib.clear_detail()
            err = self._L.td_ngrams(h, scope, n, _u64(top), cb, None)
            if err:
                raise self._err(err, None if path is None else _b(path))
        finally:
            self._leave()
        return out

    def _gpu_for(self, h, n, gpu, g):
        """Open the GPU into g for a batch of n queries when `gpu` ("auto":
        4000 queries or more and a usable GPU; "on": required) says so."""
        L = self._L
        if gpu == "on" or (gpu == "auto" and n >= 4000 and L.td_gpu_available()):
            err = L.td_gpu_open(h, None, ctypes.byref(g)) if L.td_gpu_available() else _lib.TD_ENOGPU
            if err and gpu == "on":
                raise self._err(err, None)

    def ngrams_many(self, queries, gpu="auto"):
        """ngrams() of every (n, top, path) of `queries` as one batch: a
        list of their answers, in order. gpu: "auto" runs a batch of 4000
        queries or more on the GPU when one is usable, "on" requires it,
        "off" keeps it on the CPU (every core); the answers are the same."""
        qs = list(queries)
        if gpu not in ("auto", "on", "off"):
            raise TadocError(errno.EINVAL, "invalid argument: gpu must be auto, on or off, not %r" % (gpu,),
                             self._path, None, _lib.TD_EINVAL)
        for n, top, _ in qs:
            if not 2 <= _int("n", n) <= _lib.TD_PHRASE_MAX or _int("top", top) < 0:
                raise TadocError(errno.EINVAL, "invalid argument: n must be 2..%d and top >= 0 (n=%d, top=%d)"
                                 % (_lib.TD_PHRASE_MAX, n, top), self._path, None, _lib.TD_EINVAL)
        reqs = (_lib.td_ngram_req * max(1, len(qs)))()
        h = self._enter()
        g = ctypes.c_void_p()
        try:
            for i, (n, top, path) in enumerate(qs):
                reqs[i].scope = self._scope(h, path)
                reqs[i].len = n
                reqs[i].top = _u64(top)
            L = self._L
            _lib.clear_detail()
            self._gpu_for(h, len(qs), gpu, g)
            err = (L.td_gpu_ngram_batch(g, reqs, len(qs)) if g.value
                   else L.td_ngram_batch(h, reqs, len(qs), 0))
            out = []
            for i in range(len(qs) if not err else 0):
                r = reqs[i]
                err = err or r.err
                if err:
                    break
                raw = ctypes.string_at(r.bytes, r.nbytes) if r.nbytes else b""
                out.append([(tuple(raw[r.grams[j].off:r.grams[j].off + r.grams[j].len]
                                   .decode("utf-8", "surrogateescape").split(" ")), r.grams[j].count)
                            for j in range(r.ngrams)])
            if err:
                raise self._err(err, None)
        finally:
            for i in range(len(qs)):
                self._L.td_ngram_req_free(ctypes.byref(reqs[i]))
            if g.value:
                self._L.td_gpu_close(g)
            self._leave()
        return out

    def fuzzy(self, word, k=1, path=None):
        """Every distinct word of the scope within Levenshtein distance k
        (0..3, over code points) of `word`, as (distance, count, word), by
        distance, then count descending, then word bytes."""
        wb = _word_b(word)
        if not 0 <= _int("k", k) <= _lib.TD_FUZZY_MAXK:
            raise TadocError(errno.EINVAL, "invalid argument: k must be 0..%d, not %r" % (_lib.TD_FUZZY_MAXK, k),
                             self._path, None, _lib.TD_EINVAL)
        out = []

        def fn(ctx, dist, w, n, count):
            out.append((dist, count, ctypes.string_at(w, n).decode("utf-8", "surrogateescape")))
            return 0

        cb = _lib.FUZZY_FN(fn)
        h = self._enter()
        try:
            scope = self._scope(h, path)
            _lib.clear_detail()
            err = self._L.td_fuzzy(h, wb, len(wb), min(k, 0xFFFFFFFF), scope, 1, cb, None)
            if err:
                raise self._err(err, None if path is None else _b(path))
        finally:
            self._leave()
        return out

    def fuzzy_many(self, words, k=1, path=None, gpu="auto"):
        """fuzzy() of every word of `words` as one batch: a list of their
        answers, in order. gpu: "auto" runs a batch of 4000 words or more on
        the GPU when one is usable, "on" requires it, "off" keeps it on the
        CPU (every core); the answers are the same."""
        wbs = [_word_b(w) for w in words]
        if not 0 <= _int("k", k) <= _lib.TD_FUZZY_MAXK:
            raise TadocError(errno.EINVAL, "invalid argument: k must be 0..%d, not %r" % (_lib.TD_FUZZY_MAXK, k),
                             self._path, None, _lib.TD_EINVAL)
        if gpu not in ("auto", "on", "off"):
            raise TadocError(errno.EINVAL, "invalid argument: gpu must be auto, on or off, not %r" % (gpu,),
                             self._path, None, _lib.TD_EINVAL)
        reqs = (_lib.td_fuzzy_req * max(1, len(wbs)))()
        h = self._enter()
        g = ctypes.c_void_p()
        try:
            scope = self._scope(h, path)
            for i, wb in enumerate(wbs):
                reqs[i].word = wb
                reqs[i].len = len(wb)
                reqs[i].k = min(k, 0xFFFFFFFF)
                reqs[i].scope = scope
            L = self._L
            _lib.clear_detail()
            self._gpu_for(h, len(wbs), gpu, g)
            err = (L.td_gpu_fuzzy_batch(g, reqs, len(wbs)) if g.value
                   else L.td_fuzzy_batch(h, reqs, len(wbs), 0))
            out = []
            for i in range(len(wbs) if not err else 0):
                r = reqs[i]
                err = err or r.err
                if err:
                    break
                raw = ctypes.string_at(r.words, r.nbytes) if r.nbytes else b""
                out.append([(r.hits[j].dist, r.hits[j].count,
                             raw[r.hits[j].off:r.hits[j].off + r.hits[j].len].decode("utf-8", "surrogateescape"))
                            for j in range(r.nhits)])
            if err:
                raise self._err(err, None if path is None else _b(path))
        finally:
            for i in range(len(wbs)):
                self._L.td_fuzzy_req_free(ctypes.byref(reqs[i]))
            if g.value:
                self._L.td_gpu_close(g)
            self._leave()
        return out


class ArchiveRawFile(io.RawIOBase):
    """The raw, seekable file object under Archive.open() (a td_cursor)."""

    def __init__(self, archive, h, entry, size, name):
        super().__init__()
        self._a = archive
        self._e = entry
        self._size = size
        self._pos = 0
        self._lock = threading.Lock()
        self._cur = archive._L.td_cursor_new(h)
        if not self._cur:
            raise MemoryError("td_cursor_new")
        self.name = name

    @property
    def size(self):
        return self._size

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        self._check()
        return self._pos

    def _check(self):
        if self.closed:
            raise ValueError("I/O operation on closed file")

    def seek(self, pos, whence=io.SEEK_SET):
        self._check()
        if whence == io.SEEK_SET:
            new = pos
        elif whence == io.SEEK_CUR:
            new = self._pos + pos
        elif whence == io.SEEK_END:
            new = self._size + pos
        else:
            raise ValueError("invalid whence (%r)" % whence)
        if new < 0:
            raise OSError(errno.EINVAL, "negative seek position %d" % new)
        self._pos = new
        return new

    def readinto(self, b):
        self._check()
        with memoryview(b) as mv, mv.cast("B") as m:
            n = len(m)
            if n == 0 or self._pos >= self._size:
                return 0
            n = min(n, self._size - self._pos)
            cbuf = (ctypes.c_char * len(m)).from_buffer(m)
            got = ctypes.c_size_t()
            with self._lock:
                if self._cur is None:
                    raise ValueError("I/O operation on a file of a closed tadoc.Archive")
                self._a._enter()
                try:
                    _lib.clear_detail()
                    err = self._a._L.td_cursor_read(self._cur, self._e, self._pos, cbuf, n, ctypes.byref(got))
                finally:
                    self._a._leave()
            del cbuf
            if err:
                raise self._a._err(err, _b(self.name))
            self._pos += got.value
            return got.value

    def readall(self):
        self._check()
        left = max(0, self._size - self._pos)
        buf = bytearray(left)
        got = self.readinto(buf) if left else 0
        while 0 < got < left:
            n = self.readinto(memoryview(buf)[got:])
            if not n:
                break
            got += n
        del buf[got:]
        return bytes(buf)

    def _drop_cursor(self):
        with self._lock:
            if self._cur is not None:
                self._a._L.td_cursor_free(self._cur)
                self._cur = None

    def close(self):
        if not self.closed:
            self._drop_cursor()
        super().close()
