/* td_rcache: engine-internal cache of expanded short rules, shared by all readers of an archive. */
#ifndef TD_RCACHE_H
#define TD_RCACHE_H

#include "td_archive_int.h"

/* Rules whose expansion is at most this many bytes are cached whole. */
#define TD_RCACHE_MAXRULE 8192u

/* The expansion of rule r (its rule_len bytes), built on first use and kept
 * until the archive closes, or NULL when r is too long, the cache's byte
 * budget is spent, or the grammar is inconsistent. Thread-safe, lock-free:
 * concurrent builders of one rule race and one result wins. */
const uint8_t *td_rcache_get(const td_archive *a, uint64_t r);

/* Free every cached expansion (td_archive_close calls it). */
void td_rcache_free(td_archive *a);

/* Build flat 32-bit copies of the arrays read at every token (terminal
 * offsets, rule lengths, rule symbols) once per archive, when they fit the
 * cache budget; readers use them through TD_FLAT. Thread-safe, idempotent.
 * Costs one pass over those arrays on the first read, not at open. */
void td_flat_build(const td_archive *a);
void td_flat_free(td_archive *a);

#endif
