/* td_analytics: text analytics on the grammar (top words, term vectors, ranked files, n-grams, phrases, fuzzy words). */
#ifndef TD_ANALYTICS_H
#define TD_ANALYTICS_H

#include <stddef.h>
#include <stdint.h>

#include "td_archive.h"
#include "td_query.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Words are td_query.h's (Python 3 `\w+` on UTF-8, invalid bytes as
 * separators), case-sensitive. "Consecutive words" are adjacent in a file's
 * sequence of words whatever non-word bytes lie between them; nothing spans
 * two files. Scopes are as for td_count: a file, a directory's subtree, or
 * TD_ROOT for the corpus; symlinks count nothing. Ties in every ranking are
 * broken by the bytes of the word, n-gram (words joined by single spaces)
 * or path, ascending.
 *
 * Everything is computed on the grammar (engine/README.md, "Analytics"):
 * rule weights top-down from the scope's root symbols, per-rule results
 * bottom-up; only the files holding words longer than TD_MAXTOK bytes
 * (stored as pieces, rare) are tokenized from their text. Except, on a
 * format 5 archive built with them, the root's answers stored at build:
 * its top words and n-grams (`--top-words`, `--top-ngrams`: a prefix
 * read) and its term vector (`--root-vector`: read in blocks). A damaged
 * stored answer is TD_ECORRUPT for the queries that read it (not computed
 * instead); one made for other shards is ignored.
 *
 * All functions are thread-safe on one td_archive (they only read it) and
 * allocate working memory proportional to the grammar they reach, freed
 * before they return. Errors common to all: TD_EINVAL (scope out of range,
 * bad argument), TD_ENOMEM, TD_ECORRUPT (the grammar does not add up, or a
 * section fails its checksum; td_errdetail names it). A callback returning
 * nonzero stops the walk; the function then returns that value.
 */

/* A word and its count: `word` (len bytes, not NUL-terminated) is valid
 * during the call only. */
typedef int (*td_word_fn)(void *ctx, const char *word, size_t len, uint64_t count);

/* The `n` most frequent words of `scope` (n = 0: all), count descending,
 * ties by word bytes ascending, one fn call each. */
int td_top_words(const td_archive *a, td_entry scope, uint64_t n, td_word_fn fn, void *ctx);

/* Every word of `scope` with its count, in byte order of the words, one
 * fn call each. Memory: a count per vocabulary word (8 bytes) plus the
 * rule weights; the output is streamed. The root of an archive that
 * stores its vector (td_archive_root_vector) is read from it instead, one
 * block of at most TD_VTAB_BLOCK words in memory at a time. */
int td_term_vector(const td_archive *a, td_entry scope, td_word_fn fn, void *ctx);

/* td_term_vector from its word `from` on (0-based; 0: all): the words
 * before it are not passed to fn, and *skipped says how many there were
 * (min(from, the scope's words)). The root of a format 5 archive that
 * stores its vector (td_archive_root_vector) skips them without decoding
 * the blocks they fill, so reading a long vector in parts (a mount's
 * `#more` parts) costs each part about its own lines; elsewhere they are
 * computed and dropped. Errors as td_term_vector's. Thread-safe as it. */
int td_term_vector_from(const td_archive *a, td_entry scope, uint64_t from, td_word_fn fn, void *ctx,
			uint64_t *skipped);

/* A phrase: one word, or several separated by single spaces ("of the").
 * Returns the number of words (>= 1), or 0 when `p[0..len)` is not a
 * phrase (empty, a non-word part, leading/trailing/double spaces). At most
 * TD_PHRASE_MAX words. */
#define TD_PHRASE_MAX 8u
unsigned td_phrase_words(const char *p, size_t len);

/* Occurrences of the phrase in `scope` (its words consecutively). A single
 * word gives td_count's answer. Errors also TD_ENOTWORD (not a phrase);
 * *count is 0 on any error. */
int td_phrase_count(const td_archive *a, const char *p, size_t len, td_entry scope, uint64_t *count);

/* Append every occurrence of the phrase in `scope` to *out: the byte
 * offset of its first word, files in path order, offsets ascending (as
 * td_search, which a single word gives). On error *out is as before. */
int td_phrase_search(const td_archive *a, const char *p, size_t len, td_entry scope, td_hits *out);

/* One file of a ranked inverted index. */
typedef struct td_file_count {
	td_entry file;
	uint64_t count;
} td_file_count;

/* Every regular file under `scope` that holds the phrase, with its count,
 * count descending, ties by path ascending. *out (malloc'd, caller frees;
 * NULL when *n is 0) holds *n of them. Errors also TD_ENOTWORD; on any
 * error *out is NULL and *n 0 (nothing to free). */
int td_phrase_files(const td_archive *a, const char *p, size_t len, td_entry scope, td_file_count **out,
		    size_t *n);

/* ---- ranked files in batches (gpu/ offers the same call) ---- */

typedef struct td_files_req {
	const char *word;         /* in: a word or phrase, len bytes */
	size_t len;
	td_entry scope;           /* in */
	td_file_count *files;     /* out: td_phrase_files's answer (malloc'd,
	                             caller frees; NULL when nfiles is 0) */
	size_t nfiles;
	int err;                  /* out: td_phrase_files's error, or TD_OK */
} td_files_req;

/* Answer reqs[0..n) as td_phrase_files would one by one (each request's
 * error in its err), on `nthreads` threads (0 = one per core). Returns
 * TD_OK, or TD_ENOMEM when the threads could not be set up. Thread-safe. */
int td_files_batch(const td_archive *a, td_files_req *reqs, size_t n, unsigned nthreads);

/* The hits of request `req` (a single word, as td_search(a, word, len,
 * scope) appends them), found elsewhere (a GPU): fill *out and return
 * TD_OK, or return TD_ENOGPU to have the engine answer the request itself.
 * Called from the batch's threads; *out stays valid until it returns. */
typedef int (*td_files_find_fn)(void *fctx, size_t req, const td_hits **out);

/* td_files_batch with the hits of single-word requests supplied by find
 * (NULL: td_files_batch): each file's count is its number of hits, ranked
 * by the engine's own order (count descending, path ascending), so the
 * answers are td_phrase_files's when find's hits are td_search's. */
int td_files_batch_given(const td_archive *a, td_files_req *reqs, size_t n, unsigned nthreads, td_files_find_fn find,
			 void *fctx);

/* ---- top words and term vectors in batches (gpu/ offers the same calls) ---- */

/* One word of a batched answer: the word is bytes[off, off + len). */
typedef struct td_word_count {
	uint64_t off;
	uint64_t count;
	uint32_t len;
} td_word_count;

typedef struct td_words_req {
	td_entry scope;           /* in */
	uint64_t n;               /* in: td_top_batch's n (0: all); td_vector_batch ignores it */
	td_word_count *words;     /* out: td_top_words's / td_term_vector's
	                             words in their order (malloc'd: free with
	                             td_words_req_free; none after an error) */
	size_t nwords;
	char *bytes;              /* out: their bytes, back to back */
	size_t nbytes;
	int err;                  /* out: the call's error, or TD_OK */
} td_words_req;

/* Answer reqs[0..n) as td_top_words(a, scope, n) / td_term_vector(a,
 * scope) would one by one (each request's error in its err, its words in
 * words/bytes), on `nthreads` threads (0 = one per core), each request on
 * one thread. Returns TD_OK, or TD_ENOMEM when the threads could not be
 * set up. Thread-safe. */
int td_top_batch(const td_archive *a, td_words_req *reqs, size_t n, unsigned nthreads);
int td_vector_batch(const td_archive *a, td_words_req *reqs, size_t n, unsigned nthreads);

/* The word counts of one piece of a request's scope in a version 5
 * archive (piece k of td_archive_pieces(a, scope): its shard's entry),
 * found elsewhere (a GPU): wid[0..n) are the shard's own word ids, each
 * once, with their counts cnt[0..n); words longer than TD_MAXTOK (no id)
 * must not occur in the piece. */
typedef struct td_piece_words {
	const uint32_t *wid, *cnt;
	size_t n;
} td_piece_words;

/* Fill *out for piece k of request `req` and return TD_OK, or return
 * TD_ENOGPU to have the engine count that piece itself. Called from the
 * batch's threads (only for scopes of several pieces: a scope held by one
 * shard is answered by that shard); *out stays valid until the batch
 * returns. */
typedef int (*td_words_find_fn)(void *fctx, size_t req, uint64_t k, td_piece_words *out);

/* td_top_batch / td_vector_batch with the pieces' counts supplied by find
 * (NULL, or an archive of another version: td_top_batch /
 * td_vector_batch): the pieces are merged by word bytes, the words across
 * shard cuts corrected and ranked by the engine's own code, so the answers
 * are td_top_words's / td_term_vector's when find's counts are the pieces'
 * counts. */
int td_top_batch_given(const td_archive *a, td_words_req *reqs, size_t n, unsigned nthreads, td_words_find_fn find,
		       void *fctx);
int td_vector_batch_given(const td_archive *a, td_words_req *reqs, size_t n, unsigned nthreads,
			  td_words_find_fn find, void *fctx);

/* Free a request's words and bytes (and zero them). NULL accepted. */
void td_words_req_free(td_words_req *r);

/* A td_word_fn that appends a word to the td_words_req ctx (words and
 * bytes grow with realloc). TD_OK or TD_ENOMEM. */
int td_words_req_add(void *ctx, const char *word, size_t len, uint64_t count);

/* An n-gram: nwords words words[i] of lens[i] bytes, valid during the call. */
typedef int (*td_ngram_fn)(void *ctx, const char *const *words, const size_t *lens, unsigned nwords,
			   uint64_t count);

/* The `top` most frequent runs of `n` consecutive words (2 <= n <=
 * TD_PHRASE_MAX; top = 0: all) in `scope`, count descending, ties by the
 * words joined with spaces, ascending. Memory: a hash table of the
 * distinct n-grams met. */
int td_ngrams(const td_archive *a, td_entry scope, unsigned n, uint64_t top, td_ngram_fn fn, void *ctx);

/* ---- n-grams in batches (gpu/ offers the same call) ---- */

typedef struct td_ngram_req {
	td_entry scope;           /* in */
	unsigned len;             /* in: words a run, 2..TD_PHRASE_MAX */
	uint64_t top;             /* in: runs kept (0: all) */
	td_word_count *grams;     /* out: td_ngrams's runs in its order, each
	                             the words joined by single spaces
	                             (malloc'd: free with td_ngram_req_free;
	                             none after an error) */
	size_t ngrams;
	char *bytes;              /* out: their bytes, back to back */
	size_t nbytes;
	int err;                  /* out: td_ngrams's error, or TD_OK */
} td_ngram_req;

/* Answer reqs[0..n) as td_ngrams(a, scope, len, top) would one by one
 * (each request's error in its err, its runs in grams/bytes), on
 * `nthreads` threads (0 = one per core), each request on one thread.
 * Returns TD_OK, or TD_ENOMEM when the threads could not be set up.
 * Thread-safe. */
int td_ngram_batch(const td_archive *a, td_ngram_req *reqs, size_t n, unsigned nthreads);

/* Free a request's grams and bytes (and zero them). NULL accepted. */
void td_ngram_req_free(td_ngram_req *r);

/* Fuzzy word search. The vocabulary's adaptive radix trees (td_fuzzy.c:
 * the words, and the words reversed) are built by the second call on an
 * archive (the first searches the sorted vocabulary itself; a call made
 * while another builds them does the same) and kept until
 * td_archive_close; their memory is reported by td_fuzzy_tree. */

/* Largest edit distance accepted. */
#define TD_FUZZY_MAXK 3u

/* A fuzzy match: Levenshtein distance over Unicode code points. */
typedef int (*td_fuzzy_fn)(void *ctx, unsigned dist, const char *word, size_t len, uint64_t count);

/* Every distinct word occurring in `scope` within distance k (<= 3) of
 * `word` (a single word), sorted by distance, then count descending, then
 * word bytes. `nthreads` searches the tree's subtrees in parallel (0: one
 * per core, used only for large vocabularies; 1: the calling thread).
 * Errors also TD_ENOTWORD. */
int td_fuzzy(const td_archive *a, const char *word, size_t len, unsigned k, td_entry scope, unsigned nthreads,
	     td_fuzzy_fn fn, void *ctx);

/* Build the fuzzy trees now if not built (e.g. at mount, or to time
 * them); *nodes and *bytes (either may be NULL) get their size, both trees
 * together. TD_OK, TD_ENOMEM, TD_ECORRUPT. */
int td_fuzzy_tree(const td_archive *a, uint64_t *nodes, uint64_t *bytes);

/* ---- fuzzy search in batches (gpu/ offers the same call) ---- */

/* One match of a batched fuzzy query: the word is words[off, off + len). */
typedef struct td_fuzzy_hit {
	uint64_t off;
	uint32_t len;
	uint32_t dist;
	uint64_t count;
} td_fuzzy_hit;

typedef struct td_fuzzy_req {
	const char *word;         /* in: the query word, len bytes */
	size_t len;
	unsigned k;               /* in: edit distance, <= TD_FUZZY_MAXK */
	td_entry scope;           /* in */
	td_fuzzy_hit *hits;       /* out: td_fuzzy's matches in its order */
	size_t nhits;
	char *words;              /* out: their bytes, back to back */
	size_t nbytes;
	int err;                  /* out: td_fuzzy's error, or TD_OK */
} td_fuzzy_req;

/* Answer reqs[0..n) as td_fuzzy would one by one (each request's error in
 * its err, its matches in hits/words, malloc'd: free with
 * td_fuzzy_req_free, also after an error), on `nthreads` threads (0 = one
 * per core), each query on one thread. Returns TD_OK, or TD_ENOMEM when the
 * threads could not be set up. Thread-safe. */
int td_fuzzy_batch(const td_archive *a, td_fuzzy_req *reqs, size_t n, unsigned nthreads);

/* Free a request's hits and words (and zero them). NULL accepted. */
void td_fuzzy_req_free(td_fuzzy_req *r);

/* A td_fuzzy_fn that appends a match to the td_fuzzy_req ctx (hits and
 * words grow with realloc). TD_OK or TD_ENOMEM. */
int td_fuzzy_req_add(void *ctx, unsigned dist, const char *word, size_t len, uint64_t count);

/* A query's matches among one unit's dictionary words (the archive's WORDS,
 * or shard `shard`'s of a version 5 archive), found elsewhere (a GPU):
 * v[i] = word id << 2 | distance, each word within the distance once, in
 * any order. */
typedef struct td_fuzzy_found {
	const uint32_t *v;
	size_t n;
} td_fuzzy_found;

/* Fill *out with the matches of request `req` in unit `shard` (0 for
 * versions 1-4); the array must stay valid until the request is answered.
 * Return TD_OK, TD_ENOGPU to have the engine search that unit's tree
 * itself, or an error (the request's err). Called from the batch's
 * threads. */
typedef int (*td_fuzzy_find_fn)(void *fctx, size_t req, uint32_t shard, td_fuzzy_found *out);

/* td_fuzzy_batch with the dictionary matches supplied by find (NULL: the
 * tree, i.e. td_fuzzy_batch): the scope's counts, the words longer than
 * TD_MAXTOK, the words a shard cut splits, the order and the errors are
 * td_fuzzy's own, so the answers are the same when find's matches are
 * right. A request's errors also TD_ECORRUPT (a word id out of range). */
int td_fuzzy_batch_given(const td_archive *a, td_fuzzy_req *reqs, size_t n, unsigned nthreads, td_fuzzy_find_fn find,
			 void *fctx);

#ifdef __cplusplus
}
#endif
#endif
