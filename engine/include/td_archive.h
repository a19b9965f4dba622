/* td_archive: open a tadoc archive read-only and walk its tree of entries. */
#ifndef TD_ARCHIVE_H
#define TD_ARCHIVE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "td_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An open archive: an immutable mapping plus a bounded cache of expanded
 * rules. All read functions below are thread-safe on one td_archive. */
typedef struct td_archive td_archive;

/* Entry index: 0 is the root directory; entries are numbered breadth-first,
 * so indexes are stable for a given archive (tadocfs uses index + 1 as the
 * inode number). */
typedef uint32_t td_entry;
#define TD_ROOT ((td_entry)0)
#define TD_NOENTRY ((td_entry)UINT32_MAX)

enum td_open_flags {
	TD_OPEN_VERIFY = 1u << 0, /* also check every section checksum (O(size)) */
	TD_OPEN_POPULATE = 1u << 1, /* MAP_POPULATE the mapping (benchmarks) */
	TD_OPEN_LAZY_TREE = 1u << 2, /* check the entry tree a directory at a time, whatever its size */
};

/* Map `path` and validate header, section table and the checksums of the
 * small sections (metadata, rule groups, the entry tables: a few bytes per
 * file) and the entry tree: whole at open for a small tree or with
 * TD_OPEN_VERIFY; a large one (or any, with TD_OPEN_LAZY_TREE: for a
 * process that answers one query and may reach few entries, or none) a
 * directory at a time, when the directory
 * is first listed or an entry under it first reached (then that call,
 * and every later one answering from the damaged directory, fails with
 * TD_ECORRUPT naming the entry; td_archive_stat, _name, _children,
 * _lookup, _path). Cost is O(1) in corpus size (hashing the entry tables:
 * O(files) at several GB/s) unless TD_OPEN_VERIFY; the large sections are checked by the first read
 * (td_archive_check_data); a format 5 archive's shards are opened and
 * checked each on its first touch. On success *out owns
 * the mapping; close with td_archive_close().
 * Errors: TD_ENOENT (no such file), TD_EISDIR, TD_EIO (open/stat/mmap
 * failed; detail has strerror), TD_EFORMAT
 * (not a tadoc archive), TD_EVERSION, TD_ETRUNC, TD_ECORRUPT (detail names
 * the section and the problem), TD_ENOMEM. */
int td_archive_open(const char *path, unsigned flags, td_archive **out);

/* Readers keep decoded tables (the rule and, in version 4, root sequences
 * and the token offsets as flat 32-bit arrays, built once reads have asked
 * for as many bytes as the archive has terminals and rules, when they fit:
 * td_flat_after) and expansions of short rules (up to 8 KiB each) in memory, so
 * hot text is copied instead of walked again; this caps the total bytes
 * (default TD_RCACHE_DEFAULT, 0 disables). Past it, reads decode tiles
 * where they stand (version 4: several times slower). The rule cache grows
 * in 2 MiB chunks. Call before the first read; everything is freed by
 * td_archive_close. Not thread-safe with reads. */
#define TD_RCACHE_DEFAULT (UINT64_C(512) << 20)
void td_archive_set_cache(td_archive *a, uint64_t bytes);

/* Fill that cache now: expand every rule of at most 8 KiB, in the order of
 * the root sequence (the order a first read of every file meets them, so
 * that later passes find the expansions they copy one after another), so
 * that first reads go at the speed of later ones; for a background thread
 * after open (tadocfs runs it at mount). It only runs when all those
 * expansions fit the cache's budget with room to spare (otherwise the
 * cache keeps filling with what readers use, and *bytes is 0); then builds
 * the query index for counts and searches over large scopes when it fits
 * (td_rcache.h: td_qindex_get). It stops soon after *stop (may be NULL;
 * read with relaxed atomic loads) becomes nonzero. Thread-safe with
 * concurrent reads; not with td_archive_set_cache or td_archive_close.
 * *bytes (may be NULL) gets the expanded bytes it cached. TD_OK,
 * TD_ENOMEM, or TD_ECORRUPT when a rule's lengths do not add up. */
int td_archive_warm(const td_archive *a, const volatile int *stop, uint64_t *bytes);

/* A hint before reading `bytes` bytes in order (`tadoc unpack` gives the
 * whole tree's size, `tadoc cat` its files' total). When they are at least
 * as many as all rules of at most 8 KiB expand to (and at least as many as
 * the archive has terminals and rules: fewer would not even build the
 * read tables, td_archive_set_cache), and those expansions fit the
 * cache's budget, every such rule is expanded into the cache now, in rule
 * order, instead of each one where the read first meets it: the rule
 * symbols are then read front to back, most of a rule's parts are cached
 * before it (shorter expansions have lower ids), so a rule is one table
 * look-up and one copy a part, and the look-ups of the rules after it are
 * prefetched meanwhile, so a first pass over a whole corpus is faster
 * (contrib/bench/NOTES.md). Later passes find the expansions in rule order
 * rather than in the order they read them (td_archive_warm's), a little
 * slower; a smaller read leaves the cache to fill with what it meets. Runs at most once per
 * archive, and not after td_archive_warm has started; thread-safe with
 * reads. TD_OK, or TD_ECORRUPT (a damaged section, or a short rule whose
 * lengths do not add up: then on every later call too, while reads of
 * files that do not use that rule go on). */
int td_archive_will_read(const td_archive *a, uint64_t bytes);

/* Check, once per open archive, the checksums of the large sections that
 * readers use in place (the root sequence, the rules and their offsets):
 * O(archive size).
 * Every extract, cursor read, count, search and td_archive_warm calls it
 * first, so damage there is TD_ECORRUPT (naming the section) on every read,
 * never wrong bytes; sections stored compressed are checked when first
 * decoded, and the small ones at open. TD_OK or TD_ECORRUPT. */
int td_archive_check_data(const td_archive *a);

/* Check the checksum of every section as stored (compressed ones too)
 * and, in a format 5 archive, of every shard's whole image: O(archive
 * size) of hashing at memory speed, spread over up to `threads` threads
 * (one section a thread at a time, largest first; 0 or 1: this thread
 * only); no shard is opened and nothing is decoded. It takes no lock that
 * readers take, so it may run on a background thread beside them: each
 * section (or shard) that matched is marked, and the readers' own first
 * check (td_archive_check_data) skips it; a reader never waits for this
 * call. It stops soon (every 16 MiB hashed) after *stop (may be NULL;
 * read with relaxed atomic loads) becomes nonzero, and then returns TD_OK
 * having checked only part (what matched stays marked). Thread-safe.
 * TD_OK, TD_ECORRUPT (detail: "section 'NAME': checksum mismatch", the
 * first damaged section in table order, or "shard N: checksum
 * mismatch"), TD_ENOMEM. */
int td_archive_check_sums(const td_archive *a, unsigned threads, const volatile int *stop);

/* 1 when the file at `path` holds the archive `a` maps (the same size and
 * header; the header's checksum covers the section table, which holds
 * every section's checksum), 0 when not or when it cannot be read: O(1),
 * for a caller that must know whether the file was replaced since it was
 * opened. Thread-safe. */
int td_archive_same_file(const td_archive *a, const char *path);

/* Unmap and free. NULL is accepted. */
void td_archive_close(td_archive *a);

/* Check every checksum and structural invariant: symbol ids in range, rule
 * lengths equal the sum of their children, depth bound, file sizes equal the
 * expansion of their root range, tree shape, name order. O(archive size).
 * TD_OK or TD_ECORRUPT with detail. */
int td_archive_verify(const td_archive *a);

/* Attributes of one entry. */
typedef struct td_stat {
	mode_t mode;              /* S_IFREG / S_IFDIR / S_IFLNK | permission bits */
	uint64_t size;            /* bytes (symlink: target length) */
	int64_t mtime_sec;
	uint32_t mtime_nsec;
	td_entry parent;
	uint64_t nwords;          /* word tokens (files); 0 for others */
} td_stat;

/* Number of entries (>= 1: the root directory always exists). */
uint32_t td_archive_nentries(const td_archive *a);

/* Fill *st for entry e. TD_OK, TD_EINVAL (e out of range), TD_ECORRUPT
 * (a large tree's entry, or a directory above it, is damaged: see
 * td_archive_open). */
int td_archive_stat(const td_archive *a, td_entry e, td_stat *st);

/* Name of entry e (not NUL-terminated; the root's name is empty). Returns a
 * pointer into the decoded names and sets *len; NULL if e is out of range
 * or damaged (td_errdetail says how). */
const char *td_archive_name(const td_archive *a, td_entry e, size_t *len);

/* Parent of entry e (the root's is the root). TD_OK, TD_EINVAL (e out of
 * range), TD_ECORRUPT (as td_archive_stat). */
int td_archive_parent(const td_archive *a, td_entry e, td_entry *parent);

/* Parent and name of each entry e[0..n) at once, what td_archive_parent
 * and td_archive_name give one entry (for printing many paths: one call,
 * no dependent chain from one entry to the next): out[i].parent,
 * out[i].name (into the archive's names, not NUL-terminated, valid while
 * `a` is open), out[i].len, and out[i].esc = td_path_needs_escape of the
 * name. Stops at the first entry either call would refuse: *done is the
 * number of entries filled (n when TD_OK); the error is TD_EINVAL (out of
 * range) or TD_ECORRUPT, its detail set by td_archive_parent or, for a
 * damaged name, left for td_archive_name to give (call it for e[*done]).
 * Thread-safe as those calls are. */
typedef struct td_name_ref {
	const char *name;
	uint32_t len;
	td_entry parent;
	int esc;
} td_name_ref;
int td_archive_names(const td_archive *a, const td_entry *e, size_t n, td_name_ref *out, size_t *done);

/* Children of directory e are the entries [*first, *first + *count), sorted
 * bytewise by name. TD_OK, TD_EINVAL, TD_ENOTDIR, or TD_ECORRUPT (a large
 * tree's directory checked on its first listing, or one above it). */
int td_archive_children(const td_archive *a, td_entry e, td_entry *first, uint32_t *count);

/* Find child `name` (len bytes) of directory `dir` by binary search.
 * TD_OK, TD_ENOENT, TD_ENOTDIR, TD_EINVAL, TD_ECORRUPT. */
int td_archive_lookup(const td_archive *a, td_entry dir, const char *name, size_t len, td_entry *out);

/* Resolve a '/'-separated relative path ("" or "." is the root; leading and
 * repeated slashes are ignored; symlinks are not followed).
 * TD_OK, TD_ENOENT, TD_ENOTDIR. */
int td_archive_lookup_path(const td_archive *a, const char *path, td_entry *out);

/* Write the relative path of e into buf (NUL-terminated). Returns the
 * length, or TD_ERANGE if cap is too small, TD_EINVAL for a bad entry,
 * TD_ECORRUPT for a damaged one. */
int td_archive_path(const td_archive *a, td_entry e, char *buf, size_t cap);

/* Sizes and counts for `tadoc info`. */
typedef struct td_info {
	uint64_t archive_bytes;
	uint64_t total_bytes;     /* original bytes, all files */
	uint64_t nentries, nfiles, ndirs, nsymlinks;
	uint64_t nwords;          /* vocabulary: distinct words */
	uint64_t nother;          /* distinct non-word tokens */
	uint64_t total_words;     /* word tokens in the corpus */
	uint64_t nrules, nrulesyms, nroot, max_depth;
	uint64_t section_bytes[32]; /* by td_section_id */
	uint64_t build_time;
} td_info;

/* Fill *out (overwritten whole). O(entries); thread-safe. */
void td_archive_info(const td_archive *a, td_info *out);

/* The stored postings (td_format.h: TD_SEC_POSTINGS): their bytes in
 * *bytes and in how many grammars (format 4: 0 or 1; format 5: shards)
 * they are, *nwith, out of *ngrammars. O(shards); thread-safe. */
void td_archive_postings(const td_archive *a, uint64_t *bytes, uint32_t *nwith, uint32_t *ngrammars);

/* The fuzzy index (td_format.h: TD_SEC5_FUZZY; format 5 only): its
 * section's bytes in *bytes (0: none) and its words in *nwords; returns 1
 * when whole-archive fuzzy queries are answered from it, 0 when there is
 * none or it was built for other shards (left by a tool that rewrote the
 * shard table: unused), or TD_ECORRUPT when its header is damaged (the
 * detail names it). Checks the header and the shard table's hash, not the
 * buckets (td_archive_verify does). Thread-safe. */
int td_archive_fuzzy_index(const td_archive *a, uint64_t *bytes, uint64_t *nwords);

/* The analytics tables of a version 5 archive (section TD_SEC5_ATAB,
 * `tadoc compress`: the root's top words by default, its top n-grams with
 * --top-ngrams): the section's bytes in *bytes (0: none), the top words it
 * holds in *words_k and the top n-grams of each length in *ngrams_k (0:
 * none); returns 1 when the root's `top` and `ngrams` are answered from
 * it, 0 when there is none or it was made for other shards, or
 * TD_ECORRUPT when it fails its checksum (the detail names it). Hashes the
 * section (a few KiB), decodes nothing. Thread-safe. */
int td_archive_tables(const td_archive *a, uint64_t *bytes, uint64_t *words_k, uint64_t *ngrams_k);

/* The root's stored term vector of a version 5 archive (section
 * TD_SEC5_VECTOR, `tadoc compress --root-vector`): the section's bytes in
 * *bytes (0: none) and its words in *nwords; returns 1 when the root's
 * `vector` is read from it, 0 when there is none or it was made for other
 * shards, or TD_ECORRUPT when its header or block table fails its
 * checksum or is out of bounds (the detail names it). Hashes the header
 * and the block table (40 bytes a block of 16384 words), decodes nothing;
 * the blocks are checked when read (td_term_vector, td_archive_verify).
 * Thread-safe. */
int td_archive_root_vector(const td_archive *a, uint64_t *bytes, uint64_t *nwords);

/* The archive's format version (td_format.h: TD_VERSION_MIN..TD_VERSION_MAX;
 * TD_VERSION_SHARDED for a container of shards). */
uint32_t td_archive_version(const td_archive *a);

/* Version 5 archives are a set of shards (td_build.h, td_format.h), each
 * a format 4 grammar over some of the files; every call in td_archive.h,
 * td_extract.h and td_query.h answers over all of them, opening a shard
 * when it is first touched. The number of shards: 0 for versions 1-4. */
uint32_t td_archive_nshards(const td_archive *a);

/* Shard i: its file pieces (a file cut between shards counts in each),
 * the text bytes of those pieces, the bytes of its archive image and the
 * image's checksum as the container stores it (XXH3-64). */
typedef struct td_shard_info {
	uint64_t nfiles;
	uint64_t input_bytes;
	uint64_t archive_bytes;
	uint64_t checksum;
} td_shard_info;

/* The shard size (text bytes) a version 5 archive's newest shards were
 * cut at (td_build_opts.shard_size of the build, add or compaction that
 * wrote it), which tadoc add and compact reuse; 0 when not recorded
 * (archives written before it was) and for versions 1-4. Thread-safe. */
uint64_t td_archive_shard_size(const td_archive *a);

/* TD_OK or TD_EINVAL (no shard i). Thread-safe. */
int td_archive_shard_info(const td_archive *a, uint32_t i, td_shard_info *out);

/* Shard i as an archive of its own (format 4), opened on the first call:
 * for gpu/, which serves each shard on its own. *out belongs to a (valid
 * until td_archive_close(a)). TD_OK, TD_EINVAL (no shard i), or the open's
 * error (detail names the shard). Thread-safe. */
int td_archive_shard(const td_archive *a, uint32_t i, const td_archive **out);

/* Entry e's pieces in a version 5 archive (td_format.h: a file's pieces
 * ascending by start, a directory's one per shard holding anything under
 * it): *p (inside a's tables), *n. TD_OK, TD_EINVAL (not version 5, or no
 * entry e), TD_ECORRUPT. Thread-safe. */
struct td_disk_piece;
int td_archive_pieces(const td_archive *a, td_entry e, const struct td_disk_piece **p, uint64_t *n);

/* 1 when `scope` of a version 5 archive holds a file that td_build cut
 * inside a word (it found no ASCII separator within 1 MiB past the shard
 * size): td_count and td_search over it are then not the plain sums and
 * merges of its pieces' answers (they add the cut word and drop its two
 * fragments), so a per-piece engine (gpu/) must send such a question to
 * td_count/td_search. 0 otherwise, for other versions, and on any error.
 * The archive's list is found on first use. Thread-safe. */
int td_archive_cut_in_word(const td_archive *a, td_entry scope);

/* Raw bytes of section `id` (td_section_id) inside the mapping and its size,
 * for gpu/ uploads and tools; NULL when absent. Of a version 5 archive, the
 * container's sections (its grammar sections are empty: td_format.h). */
const void *td_archive_section(const td_archive *a, unsigned id, uint64_t *size);

/* Logical bytes of section `id` in its version 3 form, and their count:
 * the mapping itself, or a heap copy built on the first call, after checking
 * the section's checksum, and kept until td_archive_close (thread-safe: one
 * build, under a lock): a section stored compressed (TD_SECF_ZSTD,
 * td_format.h) decoded; in version 4, the plain words, their offsets
 * (WORD_OFF) and the root and rule sequences as FOR-packed arrays (what
 * gpu/ uploads; the sequences cost 4 bytes a symbol or less). Returns
 * NULL with td_fail detail on a checksum mismatch or a frame that does not
 * decode to the size the archive declares (TD_ECORRUPT), out of memory, and
 * for ids outside 1..TD_SEC_MAX-1. */
const void *td_archive_bytes(const td_archive *a, unsigned id, uint64_t *size);

/* Name of a section id ("rules", ...), for messages and `tadoc info`. */
const char *td_section_name(unsigned id);

#ifdef __cplusplus
}
#endif
#endif
