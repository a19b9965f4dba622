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
 * (stored as pieces, rare) are tokenized from their text.
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
 * rule weights; the output is streamed. */
int td_term_vector(const td_archive *a, td_entry scope, td_word_fn fn, void *ctx);

/* A phrase: one word, or several separated by single spaces ("of the").
 * Returns the number of words (>= 1), or 0 when `p[0..len)` is not a
 * phrase (empty, a non-word part, leading/trailing/double spaces). At most
 * TD_PHRASE_MAX words. */
#define TD_PHRASE_MAX 8u
unsigned td_phrase_words(const char *p, size_t len);

/* Occurrences of the phrase in `scope` (its words consecutively). A single
 * word gives td_count's answer. Errors also TD_ENOTWORD (not a phrase). */
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
 * NULL when *n is 0) holds *n of them. Errors also TD_ENOTWORD. */
int td_phrase_files(const td_archive *a, const char *p, size_t len, td_entry scope, td_file_count **out,
		    size_t *n);

/* An n-gram: nwords words words[i] of lens[i] bytes, valid during the call. */
typedef int (*td_ngram_fn)(void *ctx, const char *const *words, const size_t *lens, unsigned nwords,
			   uint64_t count);

/* The `top` most frequent runs of `n` consecutive words (2 <= n <=
 * TD_PHRASE_MAX; top = 0: all) in `scope`, count descending, ties by the
 * words joined with spaces, ascending. Memory: a hash table of the
 * distinct n-grams met. */
int td_ngrams(const td_archive *a, td_entry scope, unsigned n, uint64_t top, td_ngram_fn fn, void *ctx);

/* Fuzzy word search. The vocabulary's adaptive radix tree (td_fuzzy.c) is
 * built by the first call on an archive and kept until td_archive_close
 * (a later call waits for it); its memory is reported by td_fuzzy_tree. */

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

/* Build the fuzzy tree now if not built (e.g. at mount, or to time it);
 * *nodes and *bytes (either may be NULL) get its size. TD_OK, TD_ENOMEM,
 * TD_ECORRUPT. */
int td_fuzzy_tree(const td_archive *a, uint64_t *nodes, uint64_t *bytes);

#ifdef __cplusplus
}
#endif
#endif
