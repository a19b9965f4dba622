"""tadoc: TADOC grammar-compressed archives from Python.

    import tadoc
    with tadoc.Archive("corpus.tadoc") as a:
        a.ls("speeches")                       # names in a directory
        a.read("speeches/1790.txt", 100, 50)   # bytes, straight from the grammar
        a.count("whale"), a.top(10), a.fuzzy("whale", k=1)

    fsspec.open("tadoc://speeches/1790.txt::file:///data/corpus.tadoc")  # after `import tadoc`
    tadoc.dask.count("whale", ["a.tadoc", "b.tadoc"])                   # on a Dask cluster

A pure-Python package over libtadoc.so (ctypes); python/README.md has the
details. The library is found through $TADOC_LIB, the path `meson install`
put it in, or the linker's search path.
"""
from ._lib import TadocError
from .archive import Archive, StatResult, WordCounts, merge_word_counts, top_word_counts

__version__ = "0.1.0"
__all__ = ["Archive", "StatResult", "TadocError", "WordCounts", "merge_word_counts", "open_archive", "top_word_counts"]


def open_archive(path, verify=False):
    """Archive(path): open an archive read-only (verify=True also checks
    every checksum first, O(size))."""
    return Archive(path, verify)


def _register_fsspec():
    try:
        import fsspec
    except ImportError:
        return
    fsspec.register_implementation("tadoc", "tadoc.fs.TadocFileSystem", clobber=True)


_register_fsspec()


def __getattr__(name):
    # tadoc.dask and tadoc.fs import dask / fsspec: loaded on first use
    if name in ("dask", "fs"):
        import importlib
        return importlib.import_module("." + name, __name__)
    raise AttributeError("module 'tadoc' has no attribute %r" % name)
