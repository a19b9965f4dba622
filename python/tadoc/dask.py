"""Dask jobs over tadoc archives: a bag of (path, text), and counts, searches
and top words reduced across archives.

    import tadoc.dask
    from distributed import Client
    client = Client("scheduler:8786")            # or none: Dask's default scheduler
    tadoc.dask.count("whale", ["a.tadoc", "b.tadoc"])   # -> int
    tadoc.dask.top(20, archives)                          # -> [(word, count), ...]
    bag = tadoc.dask.read_text(archives)                  # (path, text) per file

Every task opens its archive itself, by path, in the worker that runs it
(an archive is opened once per worker process and kept: opening is mmap
plus checks, O(files)); nothing but paths and results crosses the network.
So every worker must see every archive at the same path: put them on
shared storage (NFS, CephFS, a cluster filesystem: pages are read as the
grammar needs them), or copy one archive (or a few) to each node and pin
its tasks there (`workers=` / resources, see python/README.md). top runs
one task per shard of a format 5 archive (its term vector, packed, added
up by a tree of merges in C), and so does search of a word (the shards'
hits put in path order by a last task per archive); count one task per
archive (a corpus-wide count is a table look-up per shard). read_text partitions each
archive by shard (format 5) or into groups of files of about
`partition_bytes`.

Errors: a missing or damaged archive fails its own task with the engine's
message naming the file (TadocError, an OSError); the job then raises that
error (the first one Dask reports) and the results of the other archives'
tasks are dropped: they are independent tasks and run or are cancelled as
Dask decides, and nothing they read is affected. For per-archive results
and errors, map count_one / search_one / top_one yourself
(client.map(tadoc.dask.count_one, archives, word="whale")) and look at each
future's status.
"""
import collections
import os
import pickle
import threading

import dask
import dask.bag as db

from .archive import Archive, merge_word_counts, top_word_counts

# archives opened in this process (worker), by path and identity of the file
_open = {}
_open_lock = threading.Lock()


def _archive(path):
    """The open Archive for `path` in this process (reopened when the file
    at that path was replaced)."""
    st = os.stat(path) if os.path.exists(path) else None
    key = (os.path.abspath(path), st and (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size))
    with _open_lock:
        a = _open.get(key)
        if a is None or a.closed:
            a = Archive(path)  # raises TadocError naming the file
            for k in [k for k in _open if k[0] == key[0]]:
                _open.pop(k).close()
            _open[key] = a
        return a


def _paths(archives):
    if isinstance(archives, (str, bytes, os.PathLike)):
        return [os.fspath(archives)]
    return [os.fspath(a) for a in archives]


# --- per archive: what one task does --------------------------------------
def count_one(archive, word):
    """count(word) over one archive, in the calling process."""
    return _archive(archive).count(word)


def search_one(archive, word):
    """[(archive, path, offset)] of every occurrence in one archive."""
    return [(archive, p, o) for p, o in _archive(archive).search(word)]


def top_one(archive, n=0):
    """top(n) of one archive (n = 0: every word with its count)."""
    return _archive(archive).top(n)


def _search_packed(archive, word):
    return pickle.dumps(search_one(archive, word), protocol=pickle.HIGHEST_PROTOCOL)


def word_counts_one(archive):
    """{word: count} of every word of one archive (its term vector)."""
    return _archive(archive).word_counts()


def nparts_one(archive):
    """How many parts top() splits one archive's word count into (its
    shards for format 5, else 1)."""
    return _archive(archive).vector_nparts()


def vector_part_one(archive, k):
    """Part k of one archive's term vector, a tadoc.WordCounts (packed)."""
    return _archive(archive).vector_part(k)


def _merge_packed(*parts):
    return tuple(merge_word_counts(parts))


def _top_final(part, n):
    return pickle.dumps(top_word_counts(part, n), protocol=pickle.HIGHEST_PROTOCOL)


# Results of many small items (hits, words) travel as one pickled bytes
# object: distributed serializes a plain list item by item, which costs
# seconds for a hundred thousand hits.
FAN_IN = 8


def count(word, archives, scheduler=None):
    """Occurrences of a word or phrase summed over the archives (one task
    per archive on the current distributed client, else Dask's default
    scheduler; scheduler= overrides). Returns an int."""
    parts = [dask.delayed(count_one, pure=False)(a, word) for a in _paths(archives)]
    return int(dask.delayed(sum)(parts).compute(scheduler=scheduler)) if parts else 0


def _search_part(archive, word, k):
    return _archive(archive).search_part(word, k)


def _search_merged(archive, word, *parts):
    hits = _archive(archive).search_merge(parts)
    return pickle.dumps([(archive, p, o) for p, o in hits], protocol=pickle.HIGHEST_PROTOCOL)


def _is_phrase(word):
    return (b" " if isinstance(word, bytes) else " ") in word


def search(word, archives, scheduler=None):
    """Every occurrence as (archive, path, offset), archives in the order
    given, then path order, offsets ascending. A word is searched one task
    per shard of a format 5 archive (after a first round that asks how
    many), the hits put in order by a last task per archive; a phrase one
    task per archive."""
    paths = _paths(archives)
    if _is_phrase(word):
        nparts = [1] * len(paths)
    else:
        nparts = dask.compute(*[dask.delayed(nparts_one, pure=False)(a) for a in paths], scheduler=scheduler)
    parts = []
    for a, np_ in zip(paths, nparts):
        if np_ == 1:
            parts.append(dask.delayed(_search_packed, pure=False)(a, word))
        else:
            pieces = [dask.delayed(_search_part, pure=False)(a, word, k) for k in range(np_)]
            parts.append(dask.delayed(_search_merged, pure=False)(a, word, *pieces))
    out = []
    for blob in dask.compute(*parts, scheduler=scheduler):
        out += pickle.loads(blob)
    return out


def top(n, archives, scheduler=None):
    """The n most frequent words over all the archives (n = 0: all) as
    (word, count), count descending, ties by word bytes. One task per
    part of each archive's term vector (a format 5 archive's shards; a
    first round of one small task per archive finds how many), computed
    on the grammar; the parts (packed words and counts, in word order)
    are added up by a tree of merges in C, and the last task picks the n
    most frequent: only they come back."""
    paths = _paths(archives)
    if not paths:
        return []
    nparts = dask.compute(*[dask.delayed(nparts_one, pure=False)(a) for a in paths], scheduler=scheduler)
    level = [dask.delayed(vector_part_one, pure=False)(a, k) for a, np_ in zip(paths, nparts) for k in range(np_)]
    while len(level) > 1:
        level = [dask.delayed(_merge_packed, pure=False)(*level[i:i + FAN_IN]) for i in range(0, len(level), FAN_IN)]
    return pickle.loads(dask.delayed(_top_final, pure=False)(level[0], n).compute(scheduler=scheduler))


# --- a bag of (path, text) ----------------------------------------------------
def _partitions(path, partition_bytes):
    """[(archive, [file paths])]: by shard for format 5, else by size."""
    a = Archive(path)
    try:
        files = [(p, st.st_size) for p, st in a.walk_entries() if (st.st_mode & 0o170000) == 0o100000]
        groups = []
        if a.info()["nshards"]:
            by = collections.defaultdict(list)
            for p, _ in files:
                by[a.shard_of(p)].append(p)
            groups = [by[s] for s in sorted(by)]
        else:
            cur, size = [], 0
            for p, sz in files:
                if cur and size + sz > partition_bytes:
                    groups.append(cur)
                    cur, size = [], 0
                cur.append(p)
                size += sz
            if cur:
                groups.append(cur)
    finally:
        a.close()
    return [(path, g) for g in groups]


def _read_part(part, encoding, errors, with_archive):
    archive, files = part
    a = _archive(archive)
    out = []
    for p in files:
        data = a.read(p)
        name = os.fsdecode(p)
        try:
            text = data if encoding is None else data.decode(encoding, errors)
        except UnicodeDecodeError as e:  # say which file (Dask shows only the message)
            raise UnicodeDecodeError(e.encoding, e.object, e.start, e.end,
                                     "%s (in %s: %s; read_text(errors='surrogateescape' or 'replace') keeps going)"
                                     % (e.reason, archive, name)) from None
        out.append((archive, name, text) if with_archive else (name, text))
    return out


def _read_parts(parts, encoding, errors, with_archive):
    return [x for part in parts for x in _read_part(part, encoding, errors, with_archive)]


def read_text(archives, encoding="utf-8", errors="strict", partition_bytes=32 << 20, with_archive=False):
    """A Dask bag of (path, text) for every regular file of the archives
    (path inside its archive; with_archive=True: (archive, path, text)),
    one partition per shard of a format 5 archive, else per group of
    files of about partition_bytes. encoding=None gives bytes. The
    archives are listed here (they must be visible to the caller too); the
    partitions open them in the workers."""
    parts = []
    for p in _paths(archives):
        parts += _partitions(p, partition_bytes)
    if not parts:
        return db.from_sequence([], npartitions=1)
    return db.from_sequence(parts, npartitions=len(parts)).map_partitions(
        _read_parts, encoding, errors, with_archive)


__all__ = ["read_text", "count", "search", "top", "count_one", "search_one", "top_one", "word_counts_one", "nparts_one",
           "vector_part_one"]
