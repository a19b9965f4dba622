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

/* Free out's arrays and reset it to empty. NULL is accepted. */
void td_word_counts_free(td_word_counts *out);

#ifdef __cplusplus
}
#endif
#endif
