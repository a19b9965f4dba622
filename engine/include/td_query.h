/* td_query: exact word counts and word positions from the grammar (decision 2). */
#ifndef TD_QUERY_H
#define TD_QUERY_H

#include <stddef.h>
#include <stdint.h>

#include "td_archive.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A word is what Python 3 `re.findall(r'\w+', text)` finds in the text
 * decoded as UTF-8 with invalid bytes acting as separators: a maximal run of
 * letters (L*), numbers (N*) and '_'. Matching is exact and case-sensitive;
 * a query matches whole words only.
 *
 * Scope: a file counts its own text; a directory aggregates over its whole
 * subtree (TD_ROOT = the whole corpus); symlinks count nothing.
 */

/* 1 if word[0..len) is exactly one word (non-empty, all word characters),
 * else 0. */
int td_is_word(const char *word, size_t len);

/* The dictionary id of word[0..len) in a version 1-4 archive (or one
 * shard: td_archive_shard), ids being in byte order of the words; -1 when
 * it is not in the dictionary (or is longer than TD_MAXTOK, or the archive
 * is of version 5), -2 when the dictionary cannot be read. Thread-safe. */
int64_t td_word_id(const td_archive *a, const char *word, size_t len);

/* Number of occurrences of `word` in `scope`. Whole-corpus counts are one
 * table look-up. A scope of a sixteenth of the root symbols or more goes
 * through the query index (td_rcache.h: td_qindex_get; built by the first
 * such query when it fits the cache budget): only the rules that hold the
 * word and the root positions of those rules and of the word are visited.
 * Others walk the scope's part of the grammar once.
 * Errors: TD_ENOTWORD (query is not a single word), TD_EINVAL (bad scope),
 * TD_ENOMEM, TD_ECORRUPT (and TD_ECANCELED on a sharded archive,
 * td_cancel.h); *count is 0 on any error. A word absent from the archive
 * counts 0. Thread-safe. */
int td_count(const td_archive *a, const char *word, size_t len, td_entry scope, uint64_t *count);

/* 1 when td_count and td_search on scope take the fast paths above: the
 * whole corpus (a count is one look-up) or a scope of a sixteenth of the
 * root symbols or more while the query index is built or not tried yet;
 * else 0. For a caller that could send a query elsewhere (the mount's GPU
 * batches): these are answered here in well under a millisecond. O(the
 * entries under scope). */
int td_query_fast(const td_archive *a, td_entry scope);

/* Number of word tokens in `scope` (a file's own, a directory's subtree,
 * the corpus for TD_ROOT). TD_OK or TD_EINVAL. Thread-safe. */
int td_word_total(const td_archive *a, td_entry scope, uint64_t *n);

/* One occurrence: entry and byte offset of the word's first byte. */
typedef struct td_hit {
	td_entry file;
	uint64_t off;
} td_hit;

/* A growable list of hits owned by the caller; zero-initialise, then free
 * with td_hits_free(). */
typedef struct td_hits {
	td_hit *v;
	size_t n, cap;
} td_hits;

/* Free h's array and reset it to the empty list (it may be reused). */
void td_hits_free(td_hits *h);

/* Directory-wide hits are written one per line as "PATH:OFFSET" (tadoc
 * search, user.tadoc.search.* on a directory); so that any name keeps to
 * one line, PATH is escaped: a backslash becomes two backslashes, a newline
 * a backslash and 'n'. Writes the escaped form of p[0..n) to out (room for
 * 2n bytes); returns its length. */
size_t td_path_escape(const char *p, size_t n, char *out);

/* Whether td_path_escape would change p[0..n) (it holds a backslash or a
 * newline). Thread-safe. */
int td_path_needs_escape(const char *p, size_t n);

/* A memo of directories' escaped paths, for printing many files' paths
 * from their parents and names (td_archive_names): each directory's path
 * is built (td_archive_path) and escaped (td_path_escape) once. Initialise
 * with td_dir_paths_init, free with td_dir_paths_free. One memo is used by
 * one thread at a time; the archive may be shared. */
typedef struct td_dir_paths {
	uint32_t *at;             /* per entry: offset + 1 into buf, 0 = not built */
	char *buf;                /* per directory: its length (uint32_t), then its bytes */
	size_t len, cap;
} td_dir_paths;

/* An empty memo for archive a (an array of td_archive_nentries(a) words).
 * TD_OK or TD_ENOMEM (then *m is empty and td_dir_paths_free is harmless). */
int td_dir_paths_init(td_dir_paths *m, const td_archive *a);

/* Directory d's escaped path followed by '/' ("" for the root) in *p,
 * *n bytes, not NUL-terminated, valid until the next call on m. d must be
 * a directory of a (the parent of a file td_archive_names returned).
 * TD_OK; TD_EINVAL (d out of range); TD_ENOMEM (also past 4 GiB of
 * paths); td_archive_path's errors (TD_ECORRUPT names the entry). */
int td_dir_path(const td_archive *a, td_dir_paths *m, td_entry d, const char **p, size_t *n);

/* Free m's memory and reset it to empty. */
void td_dir_paths_free(td_dir_paths *m);

/* Append every occurrence of `word` in `scope` to *out: files in path order
 * (depth-first, names sorted bytewise), offsets ascending within a file.
 * Errors and cost as td_count (the offsets add up the lengths of at most
 * 2^shift root symbols per hit at the root). */
int td_search(const td_archive *a, const char *word, size_t len, td_entry scope, td_hits *out);

/* td_search's answer over scope in a version 5 archive, from its pieces'
 * answers (td_archive_pieces): per[k] holds the hits of td_search on piece
 * k's shard (td_archive_shard) for the piece's entry there, k < n (the
 * number of scope's pieces). Appends to *out what td_search(a, word, ...,
 * scope) appends: a file's offsets moved by its pieces' starts, a
 * directory's hits named in the whole tree and in path order. per[] is left
 * as is. TD_OK, TD_EINVAL (not version 5, or n is not scope's number of
 * pieces), TD_ENOMEM, TD_ECORRUPT; out is as before on error. Thread-safe. */
int td_archive_search_merge(const td_archive *a, td_entry scope, const td_hits *per, uint64_t n, td_hits *out);

/* Batched forms: the same results as calling one request at a time, served
 * by `nthreads` CPU threads (0 = one per core). gpu/ offers identical calls. */
typedef struct td_count_req {
	const char *word;
	size_t len;
	td_entry scope;
	uint64_t count;           /* out */
	int err;                  /* out */
} td_count_req;

/* Answer reqs[0..n): each request's own error (as td_count) goes to its
 * err, its result to count. Returns TD_OK, or TD_ENOMEM when the threads
 * could not be set up (no request answered then). Thread-safe. */
int td_count_batch(const td_archive *a, td_count_req *reqs, size_t n, unsigned nthreads);

typedef struct td_search_req {
	const char *word;
	size_t len;
	td_entry scope;
	td_hits hits;             /* out: caller frees with td_hits_free */
	int err;                  /* out */
} td_search_req;

/* As td_count_batch, with td_search's results appended to each request's
 * hits (caller frees each with td_hits_free, also after an error). */
int td_search_batch(const td_archive *a, td_search_req *reqs, size_t n, unsigned nthreads);

#ifdef __cplusplus
}
#endif
#endif
