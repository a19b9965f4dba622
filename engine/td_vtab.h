/* td_vtab: the root's term vector stored in a version 5 container (section TD_SEC5_VECTOR), written after
 * its shards with `tadoc compress --root-vector`, read as a stream of blocks (engine-internal). */
#ifndef TD_VTAB_H
#define TD_VTAB_H

#include <stdint.h>

#include "td_analytics.h"
#include "td_archive.h"

/* Add the root's term vector to the finished, not yet renamed container at
 * path (written by td_build): open it, compute td_term_vector of the root
 * from its shards (every shard's dictionary and a merge: about 3 s of CPU
 * and 0.7 GB on linux-source), write it in blocks of TD_VTAB_BLOCK words,
 * append the section (about 9% of a source tree's archive). name: the
 * archive's name in messages. Returns TD_OK, or the errors of opening and
 * reading the archive, TD_EINVAL (not version 5, or a vector there
 * already), TD_ELIMIT (a word over TD_VTAB_RAW_MAX less a few bytes, or the
 * section table full), TD_ENOMEM, TD_EIO (td_fail's detail). Not
 * thread-safe for one path. */
int td_vtab_append(const char *path, const char *name);

/* td_term_vector(a, TD_ROOT, fn, ctx) from the stored vector, from its
 * item `from` on (0: all): *used 1 when it answered (fn called once a word
 * from item `from`, as td_term_vector would, one block of at most
 * TD_VTAB_BLOCK words decoded at a time; the blocks wholly before `from`
 * are not decoded) and *skipped the items left out (min(from, words)), 0
 * when a has none or one made for other shards (nothing called). Errors:
 * TD_ECORRUPT for a damaged section (td_fail names it; the header and
 * block table checked before the first call of fn, each block's checksum
 * and items as it is decoded, so fn may have been called for the words
 * before a damaged block; the totals only when from is 0), TD_ENOMEM, or
 * what fn returns. Thread-safe (reads the mapping). */
int td_vtab_vector(const td_archive *a, uint64_t from, td_word_fn fn, void *ctx, int *used, uint64_t *skipped);

/* Check a's stored vector, if it has one: the section's checksum, the
 * header's, every block's, and every item equal to the vector recomputed
 * from the shards. TD_OK, or TD_ECORRUPT naming the problem, TD_ENOMEM. */
int td_vtab_verify(const td_archive *a);

#endif
