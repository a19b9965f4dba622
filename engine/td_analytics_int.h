/* td_analytics_int: what td_analytics.c shares with td_fuzzy.c (engine-internal). */
#ifndef TD_ANALYTICS_INT_H
#define TD_ANALYTICS_INT_H

#include "td_analytics.h"
#include "td_archive_int.h"

/* Words longer than TD_MAXTOK bytes met in a scope (stored as pieces, so
 * without a word id): their bytes and counts. */
typedef struct td_longw {
	char **w;
	size_t *len;
	uint64_t *count;
	size_t n, cap;
} td_longw;

/* Word counts of a scope: cnt[w] for every word id (0 when absent), the
 * long words, and whether every id may be non-zero (dense) or only those
 * in `touched` (each once). */
typedef struct td_counts {
	uint64_t *cnt;
	uint32_t *touched;
	uint64_t ntouched, cap;
	int dense;
	td_longw lw;
} td_counts;

/* Count every word of `scope` on the grammar. TD_OK or an error of
 * td_analytics.h; free with td_counts_free either way. */
int td_scope_counts(const td_archive *a, td_entry scope, td_counts *c);
void td_counts_free(td_counts *c);

/* Bytes of word id w (< W), its length in *len. WORDS must be decoded
 * (td_scope_counts does it). */
static inline const char *td_word_at(const td_archive *a, uint64_t w, size_t *len)
{
	uint64_t o0 = TD_FLAT(a, f_word_off, word_off, w), o1 = TD_FLAT(a, f_word_off, word_off, w + 1);
	*len = (size_t)(o1 - o0);
	return (const char *)td_words(a) + o0;
}

#endif
