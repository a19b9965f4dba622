/* td_query_int: word look-up, hit lists and text tokenizing shared by td_query.c and td_analytics.c (engine-internal). */
#ifndef TD_QUERY_INT_H
#define TD_QUERY_INT_H

#include "td_archive_int.h"
#include "td_query.h"

/* Word id of word[0..len) by binary search over the sorted WORDS; -1 when
 * absent (or longer than TD_MAXTOK), -2 when the dictionary does not
 * decode (td_fail has the detail). */
int64_t td_find_word(const td_archive *a, const char *word, size_t len);

/* Append one hit. TD_OK or TD_ENOMEM. */
int td_hits_push(td_hits *h, td_entry e, uint64_t off);

/* Every word of file e's text, in order, from its extracted bytes:
 * fn(ctx, word, len, byte offset); a nonzero return stops and is
 * returned. For the files that hold words longer than TD_MAXTOK (stored as
 * pieces). TD_OK, TD_ENOMEM, TD_ECORRUPT. The word's bytes are valid only
 * during the call (a td_texts producer reuses its buffer). */
typedef int (*td_text_fn)(void *ctx, const uint8_t *w, size_t len, uint64_t off);
int td_text_words(const td_archive *a, td_entry e, td_text_fn fn, void *ctx);

/* Occurrences of one word (at most TD_MAXTOK bytes) in each of the
 * regular files files[0..nfiles): counts[f] for files[f] (the caller's
 * array). Through the query index when the files hold a large share of
 * the root (as td_count for a large scope), else by walking their root
 * symbols. TD_OK (counts all zero for a word not in the archive),
 * TD_EINVAL (not a word, or a longer one), TD_ECORRUPT, TD_ENOMEM; on
 * error counts are zero. Thread-safe. */
int td_word_file_counts(const td_archive *a, const char *word, size_t len, const td_entry *files, size_t nfiles,
			uint64_t *counts);

#endif
