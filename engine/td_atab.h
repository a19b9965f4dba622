/* td_atab: the analytics tables of a version 5 container (section TD_SEC5_ATAB): the root's top words
 * and top n-grams precomputed at build, answered as a prefix (engine-internal). */
#ifndef TD_ATAB_H
#define TD_ATAB_H

#include <stdint.h>

#include "td_analytics.h"
#include "td_archive.h"

/* Top words stored with --top-words / --top-ngrams: `tadoc top` and `top.N` up to this many
 * read a prefix (100 where these would take over 0.1% of the archive). */
#define TD_ATAB_WORDS_K 1000u

/* Add the tables to the finished, not yet renamed container at path
 * (written by td_build): open it, compute the root's top words_k words
 * (0: none) and, for every length 2 .. TD_PHRASE_MAX, its top ngrams_k
 * n-grams (0: none), append the section. name: the archive's name in
 * messages. Returns TD_OK, or the errors of opening and reading the
 * archive, TD_ENOMEM, TD_EIO (td_fail's detail). Not thread-safe for one
 * path. */
int td_atab_append(const char *path, const char *name, uint64_t words_k, uint64_t ngrams_k);

/* td_top_words(a, TD_ROOT, n) from a's tables: *used 1 when it answered
 * (fn called as td_top_words would), 0 when there is no usable table for
 * n (none, made for other shards, or n above what it holds). Errors:
 * TD_ECORRUPT for a damaged section (td_fail names it), TD_ENOMEM, or what
 * fn returns. Thread-safe (reads the mapping). */
int td_atab_top(const td_archive *a, uint64_t n, td_word_fn fn, void *ctx, int *used);

/* td_ngrams(a, TD_ROOT, len, top) from a's tables, as td_atab_top. */
int td_atab_ngrams(const td_archive *a, unsigned len, uint64_t top, td_ngram_fn fn, void *ctx, int *used);

/* Check a's tables, if it has them (and they were made for its shards):
 * every part decodes and equals the answer recomputed from the shards.
 * TD_OK, or TD_ECORRUPT naming the part, TD_ENOMEM. */
int td_atab_verify(const td_archive *a);

#endif
