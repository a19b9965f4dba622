/* td_rcache: engine-internal cache of expanded short rules, shared by all readers of an archive. */
#ifndef TD_RCACHE_H
#define TD_RCACHE_H

#include "td_archive_int.h"

/* Rules whose expansion is at most this many bytes are cached whole. */
#define TD_RCACHE_MAXRULE 8192u

/* Slot value of a rule met once and not expanded yet. */
#define TD_RCACHE_SEEN 1u

/* Every cached expansion may be read TD_RCACHE_PAD bytes past its end, so
 * readers copy short ones with fixed-size moves. */
#define TD_RCACHE_PAD 32u
_Static_assert(TD_RCACHE_PAD >= TD_SYM_PAD, "cached expansions are f_sym entries too");

struct td_rcache_chunk;

struct td_rcache {
	_Atomic(uint8_t *) *slot;   /* per rule; zero-filled, untouched pages cost nothing
	                               (4 KiB pages until the read hint sweeps: td_mem.h) */
	atomic_uint_fast64_t used;  /* bytes of arena chunks, within the budget */
	_Atomic(struct td_rcache_chunk *) chunk; /* arena the expansions live in */
	uint64_t gen;               /* unique per cache: names it for thread-local arena blocks */
};

/* Rule r's cached expansion, or NULL when it is not cached (yet): a
 * look-up with no side effects, for the hot path before td_rcache_get. */
static inline const uint8_t *td_rcache_peek(const td_archive *a, uint64_t r)
{
	struct td_rcache *c = atomic_load_explicit(&((td_archive *)a)->rcache, memory_order_acquire);
	if (!c)
		return NULL;
	uint8_t *p = atomic_load_explicit(&c->slot[r], memory_order_acquire);
	return (uintptr_t)p > TD_RCACHE_SEEN ? p : NULL;
}

/* The expansion of rule r (its rule_len bytes) for a reader that needs part
 * of it: built on the second such request (or taken from an earlier
 * td_rcache_expand) and kept until the archive closes; NULL when not built
 * yet, r is too long, the cache's byte budget is spent, or the grammar is
 * inconsistent. Thread-safe, lock-free: concurrent builders of one rule
 * race and one result wins. */
const uint8_t *td_rcache_get(const td_archive *a, uint64_t r);

/* Write the expansion of rule r (< R; its rule_len bytes) into out, which
 * may be written up to lim bytes (bytes past the expansion are scratch;
 * more room lets short tokens go by fixed-size moves), taking
 * sub-rules from the cache; r and sub-rules expanded here are cached as
 * they are written (bounded by the budget, like td_rcache_get). Returns 0,
 * or -1 when the grammar does not add up (a corrupt archive). Thread-safe. */
int td_rcache_expand(const td_archive *a, uint64_t r, uint8_t *out, uint64_t lim);

/* Free every cached expansion (td_archive_close calls it). */
void td_rcache_free(td_archive *a);

/* Build flat 32-bit copies of the arrays read at every token (terminal
 * offsets, rule lengths, FOR-packed rule symbols) and the symbol table
 * f_sym with its pool of token bytes (td_archive_int.h) once per archive,
 * when they fit the cache budget; readers use them through TD_FLAT,
 * td_sym_entry and td_rule_sym. A rule's f_sym entry is set when its
 * expansion is cached.
 * Then td_syms_poll. Thread-safe, idempotent. Costs one pass over those
 * arrays, not at open: readers call it through td_flat_after, queries and
 * td_archive_warm directly. */
void td_flat_build(const td_archive *a);

/* Readers (td_walk_read) call this with the bytes each read asks for while
 * the tables are not built: td_flat_build runs once walks have asked for
 * as many bytes since open as the archive has terminals and rules (T + R:
 * the tables' size is proportional to it). A one-off read of a small file
 * (`tadoc cat`, `tadoc extract`) then does not pay for tables it would not
 * use, while a long read reads only that many bytes at the slower rate
 * first. Rules cached meanwhile
 * get their f_sym entries when the table is built. Thread-safe. */
void td_flat_after(const td_archive *a, uint64_t bytes);

/* Coded sequences (version 4): decode the rule symbols, then the root
 * symbols, into flat arrays now, each when it fits the budget left beside
 * td_flat_build's tables (td_syms_flat / td_root_flat). About 3-4 ns a
 * symbol with the vector decoder (td_scode.h), 6-9 without, so a mount
 * does it while warming up (td_archive_warm), and
 * readers call td_syms_poll, which does it once the tiles they decoded
 * where they read again (td_scode.redecoded) cost an eighth of decoding
 * the rule symbols whole or half of the root symbols: a
 * one-off read of a small file decodes only what it reads. Thread-safe,
 * idempotent; a no-op for FOR-packed archives. */
void td_syms_build(const td_archive *a);
/* The same for the rule symbols only (rules != 0) and/or the root symbols
 * only (root != 0): for a reader about to walk that much of them (a count
 * or search over a large scope). */
void td_syms_build_part(const td_archive *a, int rules, int root);
void td_syms_consider(const td_archive *a);
static inline void td_syms_poll(const td_archive *a)
{
	if (a->rule_syms.coded && (atomic_load_explicit(&a->syms_flat, memory_order_relaxed) == 0 ||
				   atomic_load_explicit(&a->root_flat, memory_order_relaxed) == 0))
		td_syms_consider(a);
}

/* Where every symbol occurs, for counts and searches over large scopes
 * (td_query.c): the root positions of each symbol, ascending, and the
 * rules whose right side holds it (a rule once per time it is there).
 * Four bytes per root symbol and per rule symbol, eight per symbol. */
typedef struct td_qindex {
	const uint32_t *pos_at; /* T + R + 1: symbol s is at root positions pos[pos_at[s] .. pos_at[s + 1]) */
	const uint32_t *pos;
	const uint32_t *par_at; /* T + R + 1: rules par[par_at[s] .. par_at[s + 1]) hold s */
	const uint32_t *par;
} td_qindex;

/* The index, built by the first call (after td_flat_build) when it fits
 * the budget beside the other tables and every count fits 32 bits; NULL
 * when it does not, or when a symbol is out of range (the caller's own
 * walk then reports the damage). Costs two passes over the root symbols
 * (decoded whole first, td_syms_build) and two over the rule symbols.
 * Thread-safe; freed by td_flat_free. */
const td_qindex *td_qindex_get(const td_archive *a);

/* Free every table above; for td_archive_close only (no reader may run). */
void td_flat_free(td_archive *a);

#endif
