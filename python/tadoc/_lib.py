"""libtadoc through ctypes: finding the library, the C prototypes, errors.

Lookup order: $TADOC_LIB (a path to libtadoc.so; the tests point it at
build/libtadoc.so), the library `meson install` put beside this package
(_libpath.py, written at install), then ctypes.util.find_library("tadoc").
"""
import ctypes
import ctypes.util
import errno
import os
import threading

from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_int, c_int64, c_size_t, c_uint,
                    c_uint32, c_uint64, c_void_p)

TD_ROOT = 0
TD_NOENTRY = 0xFFFFFFFF
TD_MAXPATH = 4096
TD_FUZZY_MAXK = 3
TD_PHRASE_MAX = 8

# td_err.h
TD_OK, TD_EIO, TD_ENOMEM, TD_EINVAL, TD_ENOENT = 0, -1, -2, -3, -4
TD_EFORMAT, TD_EVERSION, TD_ETRUNC, TD_ECORRUPT = -5, -6, -7, -8
TD_ENOTDIR, TD_EISDIR, TD_ENOTWORD, TD_ELIMIT, TD_EUNSUPP = -9, -10, -11, -13, -14
TD_ENOGPU = -15


class TadocError(OSError):
    """An engine error: errno (td_err_errno: ENOENT, EINVAL, EIO for a damaged
    archive, ...), strerror (td_strerror plus the engine's detail),
    filename (the archive), filename2 (the path inside it, when there is
    one), and td_err (the engine's td_err code). As OSError(errno, ...)
    does, it is made an instance of the matching built-in subclass too:
    TadocError(ENOENT, ...) is a FileNotFoundError, EISDIR an
    IsADirectoryError, ENOTDIR a NotADirectoryError."""

    def __new__(cls, err=None, message=None, archive=None, path=None, td_err=None):
        if cls is TadocError and err in _SUBCLASSES:
            cls = _SUBCLASSES[err]
        return super().__new__(cls, err, message)

    def __init__(self, err=None, message=None, archive=None, path=None, td_err=None):
        super().__init__(err, message)
        self.errno, self.strerror = err, message
        self.filename, self.filename2 = archive, path
        self.td_err = td_err

    def __reduce__(self):  # pickles (Dask sends a worker's errors to the client)
        return (TadocError, (self.errno, self.strerror, self.filename, self.filename2, self.td_err))

    def __str__(self):
        where = ": ".join(os.fsdecode(x) for x in (self.filename, self.filename2) if x is not None)
        return "%s: %s" % (where, self.strerror) if where else str(self.strerror)


class _NotFound(TadocError, FileNotFoundError):
    pass


class _IsADirectory(TadocError, IsADirectoryError):
    pass


class _NotADirectory(TadocError, NotADirectoryError):
    pass


TadocError.__module__ = "tadoc"
_SUBCLASSES = {errno.ENOENT: _NotFound, errno.EISDIR: _IsADirectory, errno.ENOTDIR: _NotADirectory}
for _c in _SUBCLASSES.values():
    _c.__name__ = _c.__qualname__ = "TadocError"
    _c.__module__ = "tadoc"


class td_stat(Structure):
    _fields_ = [("mode", c_uint32), ("size", c_uint64), ("mtime_sec", c_int64), ("mtime_nsec", c_uint32),
                ("parent", c_uint32), ("nwords", c_uint64)]


class td_hit(Structure):
    _fields_ = [("file", c_uint32), ("off", c_uint64)]


assert ctypes.sizeof(td_hit) == 16  # archive.py's _unpack_pairs reads them as pairs of uint64


class td_hits(Structure):
    _fields_ = [("v", POINTER(td_hit)), ("n", c_size_t), ("cap", c_size_t)]


class td_file_count(Structure):
    _fields_ = [("file", c_uint32), ("count", c_uint64)]


assert ctypes.sizeof(td_file_count) == 16


class td_shard_info(Structure):
    _fields_ = [("nfiles", c_uint64), ("input_bytes", c_uint64), ("archive_bytes", c_uint64)]


class td_disk_piece(Structure):
    _fields_ = [("shard", c_uint32), ("local", c_uint32), ("start", c_uint64)]


class td_info(Structure):
    _fields_ = [(n, c_uint64) for n in (
        "archive_bytes", "total_bytes", "nentries", "nfiles", "ndirs", "nsymlinks", "nwords", "nother",
        "total_words", "nrules", "nrulesyms", "nroot", "max_depth")] + [
        ("section_bytes", c_uint64 * 32), ("build_time", c_uint64)]


class td_word_counts(Structure):
    _fields_ = [("words", c_void_p), ("len", c_size_t), ("count", POINTER(c_uint64)), ("n", c_size_t)]


class td_fuzzy_hit(Structure):
    _fields_ = [("off", c_uint64), ("len", c_uint32), ("dist", c_uint32), ("count", c_uint64)]


class td_fuzzy_req(Structure):
    _fields_ = [("word", c_char_p), ("len", c_size_t), ("k", c_uint), ("scope", c_uint32),
                ("hits", POINTER(td_fuzzy_hit)), ("nhits", c_size_t), ("words", c_void_p), ("nbytes", c_size_t),
                ("err", c_int)]


class td_word_count(Structure):
    _fields_ = [("off", c_uint64), ("count", c_uint64), ("len", c_uint32)]


class td_ngram_req(Structure):
    _fields_ = [("scope", c_uint32), ("len", c_uint), ("top", c_uint64), ("grams", POINTER(td_word_count)),
                ("ngrams", c_size_t), ("bytes", c_void_p), ("nbytes", c_size_t), ("err", c_int)]


WORD_FN = CFUNCTYPE(c_int, c_void_p, POINTER(c_char), c_size_t, c_uint64)
NGRAM_FN = CFUNCTYPE(c_int, c_void_p, POINTER(POINTER(c_char)), POINTER(c_size_t), c_uint, c_uint64)
FUZZY_FN = CFUNCTYPE(c_int, c_void_p, c_uint, POINTER(c_char), c_size_t, c_uint64)

_A = c_void_p  # const td_archive *
_E = c_uint32  # td_entry
_PROTOS = {
    "td_strerror": (c_char_p, [c_int]),
    "td_err_errno": (c_int, [c_int]),
    "td_errdetail": (c_char_p, []),
    "td_archive_open": (c_int, [c_char_p, c_uint, POINTER(c_void_p)]),
    "td_archive_close": (None, [_A]),
    "td_archive_nentries": (c_uint32, [_A]),
    "td_archive_stat": (c_int, [_A, _E, POINTER(td_stat)]),
    "td_archive_name": (c_void_p, [_A, _E, POINTER(c_size_t)]),
    "td_archive_children": (c_int, [_A, _E, POINTER(c_uint32), POINTER(c_uint32)]),
    "td_archive_lookup": (c_int, [_A, _E, c_char_p, c_size_t, POINTER(c_uint32)]),
    "td_archive_path": (c_int, [_A, _E, c_void_p, c_size_t]),
    "td_archive_readlink": (c_int, [_A, _E, c_void_p, c_size_t, POINTER(c_size_t)]),
    "td_archive_version": (c_uint32, [_A]),
    "td_archive_nshards": (c_uint32, [_A]),
    "td_archive_shard_info": (c_int, [_A, c_uint32, POINTER(td_shard_info)]),
    "td_archive_pieces": (c_int, [_A, _E, POINTER(POINTER(td_disk_piece)), POINTER(c_uint64)]),
    "td_archive_info": (None, [_A, POINTER(td_info)]),
    "td_archive_check_data": (c_int, [_A]),
    "td_extract": (c_int, [_A, _E, c_uint64, c_void_p, c_size_t, POINTER(c_size_t)]),
    "td_cursor_new": (c_void_p, [_A]),
    "td_cursor_free": (None, [c_void_p]),
    "td_cursor_read": (c_int, [c_void_p, _E, c_uint64, c_void_p, c_size_t, POINTER(c_size_t)]),
    "td_phrase_words": (c_uint, [c_char_p, c_size_t]),
    "td_phrase_count": (c_int, [_A, c_char_p, c_size_t, _E, POINTER(c_uint64)]),
    "td_phrase_search": (c_int, [_A, c_char_p, c_size_t, _E, POINTER(td_hits)]),
    "td_hits_free": (None, [POINTER(td_hits)]),
    "td_archive_shard": (c_int, [_A, c_uint32, POINTER(c_void_p)]),
    "td_archive_search_merge": (c_int, [_A, _E, POINTER(td_hits), c_uint64, POINTER(td_hits)]),
    "td_word_total": (c_int, [_A, _E, POINTER(c_uint64)]),
    "td_top_words": (c_int, [_A, _E, c_uint64, WORD_FN, c_void_p]),
    "td_top_words_collect": (c_int, [_A, _E, c_uint64, POINTER(td_word_counts)]),
    "td_term_vector_collect": (c_int, [_A, _E, POINTER(td_word_counts)]),
    "td_word_counts_free": (None, [POINTER(td_word_counts)]),
    "td_term_vector_nparts": (c_int, [_A, _E, POINTER(c_uint32)]),
    "td_term_vector_part_collect": (c_int, [_A, _E, c_uint32, POINTER(td_word_counts)]),
    "td_word_counts_merge": (c_int, [POINTER(td_word_counts), c_size_t, POINTER(td_word_counts)]),
    "td_word_counts_top": (c_int, [POINTER(td_word_counts), c_uint64, POINTER(td_word_counts)]),
    "td_term_vector": (c_int, [_A, _E, WORD_FN, c_void_p]),
    "td_phrase_files": (c_int, [_A, c_char_p, c_size_t, _E, POINTER(POINTER(td_file_count)), POINTER(c_size_t)]),
    "td_ngrams": (c_int, [_A, _E, c_uint, c_uint64, NGRAM_FN, c_void_p]),
    "td_fuzzy": (c_int, [_A, c_char_p, c_size_t, c_uint, _E, c_uint, FUZZY_FN, c_void_p]),
    "td_fuzzy_batch": (c_int, [_A, POINTER(td_fuzzy_req), c_size_t, c_uint]),
    "td_fuzzy_req_free": (None, [POINTER(td_fuzzy_req)]),
    "td_gpu_available": (c_int, []),
    "td_gpu_open": (c_int, [_A, c_void_p, POINTER(c_void_p)]),
    "td_gpu_close": (None, [c_void_p]),
    "td_gpu_fuzzy_batch": (c_int, [c_void_p, POINTER(td_fuzzy_req), c_size_t]),
    "td_ngram_batch": (c_int, [_A, POINTER(td_ngram_req), c_size_t, c_uint]),
    "td_ngram_req_free": (None, [POINTER(td_ngram_req)]),
    "td_gpu_ngram_batch": (c_int, [c_void_p, POINTER(td_ngram_req), c_size_t]),
}

_lib = None
_lib_lock = threading.Lock()
libc_free = None


def _candidates():
    env = os.environ.get("TADOC_LIB")
    if env:
        return [env], "TADOC_LIB=" + env
    out = []
    try:
        from . import _libpath
        out.append(os.path.join(_libpath.LIBDIR, _libpath.SONAME))
    except ImportError:
        pass
    found = ctypes.util.find_library("tadoc")
    if found:
        out.append(found)
    return out, "TADOC_LIB, the installed libdir or the linker's search path"


def lib():
    """The loaded libtadoc with its prototypes set (loaded on first use)."""
    global _lib, libc_free
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        names, where = _candidates()
        errs = []
        for name in names:
            try:
                handle = ctypes.CDLL(name)
                break
            except OSError as e:
                errs.append(str(e))
        else:
            raise ImportError("libtadoc not found (looked in %s%s); build it (ninja -C build) and set "
                              "TADOC_LIB=build/libtadoc.so, or install it (meson install)"
                              % (where, ": " + "; ".join(errs) if errs else ""))
        for fn, (res, args) in _PROTOS.items():
            f = getattr(handle, fn)
            f.restype = res
            f.argtypes = args
        handle.td_fail.restype = c_int  # variadic: called as td_fail(0, "%s", "") to clear the detail
        free = ctypes.CDLL(None).free
        free.argtypes = [c_void_p]
        free.restype = None
        libc_free = free
        _lib = handle
        return _lib


def error(err, archive=None, path=None, detail=None):
    """A TadocError for td_err `err`, with this thread's engine detail."""
    L = lib()
    if detail is None:
        detail = (L.td_errdetail() or b"").decode("utf-8", "replace")
    what = L.td_strerror(err).decode()
    # leave out a detail that repeats the subject or the generic message (as the CLI does)
    for subj in (archive, path):
        if subj is not None:
            s = os.fsdecode(subj)
            if detail.startswith(s + ": "):
                detail = detail[len(s) + 2:]
            elif detail.startswith("'%s': " % s):
                detail = detail[len(s) + 4:]
    msg = what if not detail or detail == what else "%s: %s" % (what, detail)
    return TadocError(L.td_err_errno(err) or errno.EIO, msg, archive, path, err)


def clear_detail():
    """Forget this thread's engine error detail (before a call that may fail)."""
    lib().td_fail(TD_OK, b"%s", b"")
