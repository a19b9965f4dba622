/* td_collect: the word lists of td_analytics.h gathered into flat arrays, for callers that cannot take callbacks cheaply (language bindings). */
#ifndef TD_COLLECT_H
#define TD_COLLECT_H

#include <stddef.h>
#include <stdint.h>

#include "td_archive.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Words with their counts, in the order the analytics call gave them:
 * `words` holds the n words, each followed by one '\n' (a word never holds
 * a newline: td_query.h), `len` bytes in all (not NUL-terminated);
 * count[i] is word i's count. Owned by the caller: free with
 * td_word_counts_free. */
typedef struct td_word_counts {
	char *words;
	size_t len;
	uint64_t *count;
	size_t n;
} td_word_counts;

/* td_top_words(a, scope, n) gathered into *out (overwritten; empty on
 * error). Errors as td_top_words. Thread-safe as td_top_words. */
int td_top_words_collect(const td_archive *a, td_entry scope, uint64_t n, td_word_counts *out);

/* td_term_vector(a, scope) gathered into *out, as above. */
int td_term_vector_collect(const td_archive *a, td_entry scope, td_word_counts *out);

/* A term vector in parts, for callers that spread one archive's word count
 * over several processes or machines (the Python package's tadoc.dask).
 *
 * td_term_vector_nparts sets *nparts (>= 1) to the number of parts of
 * `scope`: in a version 5 archive, its pieces (td_archive_pieces: one per
 * shard holding anything under a directory, a file's pieces); 1 for
 * versions 1-4, for a scope without pieces (a symlink, an empty
 * directory), and when td_archive_cut_in_word(a, scope) (a word cut
 * between two pieces: the pieces' counts would not add up to the answer).
 *
 * td_term_vector_part_collect gathers part `part` (0 <= part < nparts)
 * into *out (overwritten; empty on error): the words of that piece with
 * their counts, in byte order of the words (for one part: the whole
 * td_term_vector). Adding up the parts' counts word by word
 * (td_word_counts_merge) gives td_term_vector(a, scope) exactly: same
 * words, same counts. Each part costs what td_term_vector costs on its
 * shard; parts may be computed at once on several threads.
 *
 * Errors: those of td_term_vector; TD_EINVAL for a scope out of range or
 * `part` >= nparts; the error of opening a piece's shard (detail names
 * it). Thread-safe on one td_archive. */
int td_term_vector_nparts(const td_archive *a, td_entry scope, uint32_t *nparts);
int td_term_vector_part_collect(const td_archive *a, td_entry scope, uint32_t part, td_word_counts *out);

/* Add up `n` word lists, each in strictly ascending byte order of its
 * words (what td_term_vector_collect and this function give), into *out
 * (overwritten; empty on error): every word of any input once, in byte
 * order, with the sum of its counts. The inputs are only read (they may
 * point into memory the caller owns, e.g. a language's byte strings: out
 * never aliases them). Errors: TD_EINVAL when an input's words are not in
 * strictly ascending order or its `len` does not hold exactly n
 * newline-terminated words, TD_ENOMEM. O(total bytes * log n).
 * Thread-safe (no shared state). */
int td_word_counts_merge(const td_word_counts *in, size_t n, td_word_counts *out);

/* The `n` most frequent words of `in` (n = 0: all of them), count
 * descending, ties by the words' bytes ascending (td_top_words' order),
 * into *out (overwritten; empty on error). `in` holds each word once, in
 * any order. Errors: TD_EINVAL when in's `len` does not hold exactly
 * in->n newline-terminated words, TD_ENOMEM. O(in->n log n) for a
 * small n. Thread-safe (no shared state). */
int td_word_counts_top(const td_word_counts *in, uint64_t n, td_word_counts *out);

/* Free out's arrays and reset it to empty. NULL is accepted. */
void td_word_counts_free(td_word_counts *out);

#ifdef __cplusplus
}
#endif
#endif
