"""fsspec filesystem over a tadoc archive: protocol "tadoc".

    fs = fsspec.filesystem("tadoc", fo="corpus.tadoc")
    fs.ls("speeches"); fs.info("speeches/1790.txt"); fs.cat_file("speeches/1790.txt", 100, 200)
    fsspec.open("tadoc://speeches/1790.txt::file:///data/corpus.tadoc").open().read()
    dask.bag.read_text("tadoc://speeches/*.txt::file:///data/corpus.tadoc")

Modelled on fsspec's archive filesystems (zip, tar: AbstractArchiveFileSystem):
paths are relative to the archive's root, the listing is built once per
instance (O(entries)), reads are ranged extracts from the grammar. The
archive is memory-mapped, so `fo` must name a local file (or one on shared
storage); another protocol is reached through a local copy
(fsspec.open_local: chain it through simplecache::, e.g.
"tadoc://a.txt::simplecache::s3://bucket/corpus.tadoc"). Read-only.
Instances pickle by their arguments (Dask ships them to workers, which open
the archive themselves).
"""
import os
import stat as _stat

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.archive import AbstractArchiveFileSystem
from fsspec.spec import AbstractBufferedFile
from fsspec.utils import DEFAULT_BLOCK_SIZE

from .archive import Archive


def _local_path(fo, target_protocol, target_options):
    if isinstance(fo, os.PathLike):
        return os.fspath(fo)
    if not isinstance(fo, str):
        name = getattr(fo, "name", None) or getattr(fo, "path", None)
        if isinstance(name, str) and os.path.isfile(name):
            return name
        raise ValueError("tadoc: fo must be the path or URL of an archive (it is memory-mapped), not %r" % (fo,))
    proto = target_protocol or fsspec.utils.infer_storage_options(fo).get("protocol", "file")
    if proto in ("file", "local"):
        return LocalFileSystem._strip_protocol(fo)
    url = fo if "://" in fo else "%s://%s" % (proto, fo)
    try:
        return fsspec.open_local(url, **(target_options or {}))
    except ValueError as e:
        raise ValueError("tadoc: the archive %s is memory-mapped and must be a local file; chain the URL "
                         "through simplecache:: (%s)" % (url, e)) from None


class TadocFileSystem(AbstractArchiveFileSystem):
    """Read the files of a tadoc archive as a filesystem (protocol "tadoc")."""

    root_marker = ""
    protocol = "tadoc"

    def __init__(self, fo="", mode="r", target_protocol=None, target_options=None, block_size=DEFAULT_BLOCK_SIZE,
                 **kwargs):
        """fo: the archive's path or URL (local, or reachable through
        fsspec.open_local); mode: only "r"; target_protocol/target_options:
        how to reach fo (set by chained URLs)."""
        super().__init__(**kwargs)
        if mode != "r":
            raise ValueError("tadoc archives are read-only here (mode %r): write through a writable mount" % mode)
        if not fo:
            raise ValueError("tadoc filesystem: no archive given (fsspec.filesystem('tadoc', fo='corpus.tadoc'), "
                             "or a chained URL tadoc://PATH::file:///DIR/corpus.tadoc)")
        self.fo = fo
        self.archive = Archive(_local_path(fo, target_protocol, target_options))
        self.block_size = block_size
        self.dir_cache = None

    @classmethod
    def _strip_protocol(cls, path):
        # paths are relative to the archive's root
        return super()._strip_protocol(path).lstrip("/")

    def close(self):
        self.archive.close()
        # a closed instance must not be handed out again by fsspec's instance cache
        type(self)._cache.pop(getattr(self, "_fs_token", None), None)

    def _get_dirs(self):
        if self.dir_cache is not None:
            return
        cache = {}
        children = {"": []}
        for p, st in self.archive.walk_entries():
            name = os.fsdecode(p)
            d = {"name": name, "size": st.st_size, "type": "file", "mode": st.st_mode,
                 "mtime": st.st_mtime, "nwords": st.st_nwords}
            if _stat.S_ISDIR(st.st_mode):
                d.update(name=name + "/", size=0, type="directory")
                cache[name + "/"] = d
                children.setdefault(name, [])
                children[name.rsplit("/", 1)[0] if "/" in name else ""].append(d)
                continue
            if _stat.S_ISLNK(st.st_mode):
                d["islink"] = True
                d["destination"] = os.fsdecode(self.archive.readlink(p))
                try:  # size and type of what it points to, as fsspec's local filesystem gives
                    t = self.archive.stat(p)
                    d["size"] = t.st_size if not _stat.S_ISDIR(t.st_mode) else 0
                    d["type"] = "directory" if _stat.S_ISDIR(t.st_mode) else "file"
                except OSError:
                    d["type"] = "link"  # dangling, or pointing outside the archive
            cache[name] = d
            # in listings a symlink to a directory is not descended into by walk/find (fsspec's local
            # filesystem lists it as "other" too): a link to ".." would otherwise never end
            listed = dict(d, type="other") if d.get("islink") and d["type"] == "directory" else d
            children[name.rsplit("/", 1)[0] if "/" in name else ""].append(listed)
        self.dir_cache = cache
        self._children = children

    def info(self, path, **kwargs):
        self._get_dirs()
        path = self._strip_protocol(path).rstrip("/")
        if path == "":
            return {"name": "", "type": "directory", "size": 0}
        d = self.dir_cache.get(path) or self.dir_cache.get(path + "/")
        if d is not None:
            return d
        # not an entry of the table: a path through a symlinked directory, or missing
        st = self.archive.stat(path)  # follows symlinks; FileNotFoundError / NotADirectoryError
        isdir = _stat.S_ISDIR(st.st_mode)
        return {"name": path + ("/" if isdir else ""), "size": 0 if isdir else st.st_size,
                "type": "directory" if isdir else "file", "mode": st.st_mode, "mtime": st.st_mtime,
                "nwords": st.st_nwords}

    def ls(self, path, detail=False, **kwargs):
        """Entries of directory `path` (O(its entries)); a file gives itself;
        a missing path FileNotFoundError, as fsspec's local filesystem."""
        self._get_dirs()
        path = self._strip_protocol(path).rstrip("/")
        out = self._children.get(path)
        if out is None:
            d = self.info(path)
            if d["type"] != "directory":
                out = [d]
            else:  # a symlink to a directory: its target's entries under this path
                out = [self.info(path + "/" + n) for n in self.archive.ls(path)]
                out = [dict(x, name=path + "/" + x["name"].rstrip("/").rsplit("/", 1)[-1]
                            + ("/" if x["type"] == "directory" else "")) for x in out]
        return list(out) if detail else sorted(x["name"] for x in out)

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kwargs):
        if mode != "rb":
            raise ValueError("tadoc archives are read-only (mode %r)" % mode)
        path = self._strip_protocol(path)
        return TadocFile(self, path, mode, block_size or self.block_size, cache_options=cache_options, **kwargs)

    def cat_file(self, path, start=None, end=None, **kwargs):
        """Bytes [start, end) of a file (negative: from the end, as slices),
        one ranged extract."""
        path = self._strip_protocol(path)
        if start is None and end is None:
            return self.archive.read(path)
        size = self.archive.stat(path).st_size
        start = 0 if start is None else (max(0, size + start) if start < 0 else start)
        end = size if end is None else (max(0, size + end) if end < 0 else min(end, size))
        return self.archive.read(path, start, max(0, end - start))


class TadocFile(AbstractBufferedFile):
    """A file inside the archive: buffered ranged reads (fsspec's caches)."""

    def __init__(self, fs, path, mode="rb", block_size="default", cache_type="readahead", **kwargs):
        st = fs.archive.stat(path)  # follows symlinks, raises for a missing path
        if _stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(path)
        super().__init__(fs, path, mode, block_size, cache_type=cache_type, size=st.st_size, **kwargs)

    def _fetch_range(self, start, end):
        return self.fs.archive.read(self.path, start, end - start)
