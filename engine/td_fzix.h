/* td_fzix: the fuzzy index of a version 5 container (section TD_SEC5_FUZZY): the whole archive's
 * vocabulary with its counts, bucketed by length, searched in place (engine-internal). */
#ifndef TD_FZIX_H
#define TD_FZIX_H

#include <stddef.h>

#include "td_analytics.h"
#include "td_archive.h"

/* Add the fuzzy index to the finished, not yet renamed container at path
 * (written by td_build): open it, gather the whole archive's vocabulary
 * (td_term_vector of the root), append the section and rewrite the section
 * table and header in place. name: the archive's name in messages.
 * Returns TD_OK, or the errors of opening and reading the archive,
 * TD_ENOMEM, TD_EIO (with td_fail's detail). Not thread-safe for one path. */
int td_fzix_append(const char *path, const char *name);

/* td_fuzzy over the whole archive answered from a's fuzzy index: *used is
 * 1 when it answered (fn called as td_fuzzy would, same words, counts and
 * order), 0 when a has no usable index for this query (no section, one
 * left from another set of shards, or a query of 64 - k code points or
 * more, whose answer may hold words longer than TD_MAXTOK): then the caller
 * answers it. word must be a word and k <= TD_FUZZY_MAXK (checked by the
 * caller). Errors: TD_ECORRUPT for a damaged section (td_fail names it),
 * TD_ENOMEM, or what fn returns. Thread-safe (reads the mapping only). */
int td_fzix_fuzzy(const td_archive *a, const char *word, size_t len, unsigned k, td_fuzzy_fn fn, void *ctx, int *used);

/* Check a's fuzzy index, if it has one: its checksums, every bucket's
 * words (their lengths, their order, their counts), and that it holds
 * exactly the root's term vector. TD_OK, or TD_ECORRUPT naming what is
 * wrong, TD_ENOMEM. */
int td_fzix_verify(const td_archive *a);

#endif
