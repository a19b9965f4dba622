/* td_rcache: lazily built, budgeted, lock-free cache of short rule expansions. */
#include "td_rcache.h"
#include "td_shard.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "td_mem.h"
#include "td_par.h"

/* Slot value of a rule met once and not expanded yet. */
#define SEEN ((uint8_t *)TD_RCACHE_SEEN)

/* Expansions are carved from chunks (no malloc per rule; freed together). */
#define CHUNK_BYTES (TD_BIG_PAGE - sizeof(struct td_rcache_chunk) - TD_RCACHE_PAD)

struct td_rcache_chunk {
	struct td_rcache_chunk *next;
	atomic_uint_fast64_t off;
	uint64_t cap;
	_Alignas(16) uint8_t data[];
};

/* len bytes (plus TD_RCACHE_PAD readable after them) from the arena, or
 * NULL on out of memory or when a new chunk would pass the budget (the
 * budget counts chunk bytes: the memory the cache really holds). Lock-free:
 * a full chunk is replaced by CAS. */
static uint8_t *chunk_alloc(const td_archive *a, struct td_rcache *c, uint64_t need)
{
	for (;;) {
		struct td_rcache_chunk *ch = atomic_load_explicit(&c->chunk, memory_order_acquire);
		if (ch) {
			uint64_t o = atomic_fetch_add_explicit(&ch->off, need, memory_order_relaxed);
			if (o + need <= ch->cap)
				return ch->data + o;
		}
		uint64_t cap = a->rcache_budget < CHUNK_BYTES ? a->rcache_budget : CHUNK_BYTES;
		if (cap < need)
			cap = need;
		if (atomic_fetch_add_explicit(&c->used, cap, memory_order_relaxed) + cap > a->rcache_budget) {
			atomic_fetch_sub_explicit(&c->used, cap, memory_order_relaxed);
			return NULL;
		}
		struct td_rcache_chunk *n = td_big_alloc(sizeof *n + cap + TD_RCACHE_PAD);
		if (!n) {
			atomic_fetch_sub_explicit(&c->used, cap, memory_order_relaxed);
			return NULL;
		}
		n->next = ch;
		n->cap = cap;
		atomic_init(&n->off, 0);
		if (!atomic_compare_exchange_strong_explicit(&c->chunk, &ch, n, memory_order_acq_rel,
							     memory_order_acquire)) {
			atomic_fetch_sub_explicit(&c->used, cap, memory_order_relaxed);
			td_big_free(n, sizeof *n + cap + TD_RCACHE_PAD);
		}
	}
}

/* Each thread carves small expansions from a block of BUMP_BYTES it took
 * from the shared chunk with one atomic add, instead of one locked add
 * per cached rule on a first pass. A block belongs to one cache (named by
 * its generation: a closed cache's address may be reused). A thread keeps
 * a block for each of BUMP_WAYS caches (picked by generation), so reads
 * that hop between the shards of an archive, each with its cache, keep
 * filling their blocks instead of dropping one at every hop (which spent
 * a shard's budget on unused tails and zeroed a fresh chunk every few
 * hundred reads). A cache whose way holds another cache's block takes a
 * block of its own only when that block is nearly used up (its tail, at
 * most BUMP_BYTES / 8, is lost); until then it allocates from the chunk
 * directly. */
#define BUMP_BYTES (UINT64_C(16) << 10)
#define BUMP_WAYS 64u
static atomic_uint_fast64_t cache_gen;
static _Thread_local struct {
	uint64_t gen;
	uint8_t *at, *end;
} bump[BUMP_WAYS];

static uint8_t *arena_alloc(const td_archive *a, struct td_rcache *c, uint64_t len)
{
	uint64_t need = (len + 15) & ~UINT64_C(15);
	__typeof__(bump[0]) *w = &bump[c->gen % BUMP_WAYS];
	if (w->gen == c->gen && (uint64_t)(w->end - w->at) >= need) {
		uint8_t *p = w->at;
		w->at += need;
		return p;
	}
	if (need > BUMP_BYTES / 4 || (w->gen != c->gen && (uint64_t)(w->end - w->at) > BUMP_BYTES / 8))
		return chunk_alloc(a, c, need);
	uint8_t *b = chunk_alloc(a, c, BUMP_BYTES);
	if (!b)
		return chunk_alloc(a, c, need); /* the budget's last bytes */
	w->gen = c->gen;
	w->at = b + need;
	w->end = b + BUMP_BYTES;
	return b;
}

static struct td_rcache *cache_of(const td_archive *a)
{
	td_archive *m = (td_archive *)a; /* the cache is the only mutable part */
	struct td_rcache *c = atomic_load_explicit(&m->rcache, memory_order_acquire);
	if (c || a->R == 0 || a->rcache_budget == 0)
		return c;
	struct td_rcache *n = calloc(1, sizeof *n);
	if (!n)
		return NULL;
	n->gen = atomic_fetch_add_explicit(&cache_gen, 1, memory_order_relaxed) + 1;
	n->slot = td_big_alloc_sparse(a->R * sizeof *n->slot);
	if (!n->slot) {
		free(n);
		return NULL;
	}
	struct td_rcache *expected = NULL;
	if (!atomic_compare_exchange_strong(&m->rcache, &expected, n)) {
		td_big_free(n->slot, a->R * sizeof *n->slot);
		free(n);
		return expected;
	}
	return n;
}

/* Point rule r's f_sym entry at its cached expansion p (len bytes). */
static void sym_rule(const td_archive *a, uint64_t r, const uint8_t *p, uint64_t len)
{
	if (td_fsym_ready(a))
		atomic_store_explicit(&a->f_sym[a->T + r], td_sym_make(p, len, 0), memory_order_release);
}

/* Keep a copy of rule r's expansion (len bytes at src) when it is short
 * enough and the budget allows; a rule already cached is left alone. The
 * slot is set with a plain release store, not a compare-and-swap: a locked
 * instruction waits for every store before it (the copy into fresh arena
 * memory) and cost 12% of a first pass. Racing writers of one rule store
 * equal bytes and the last pointer stays (the other's arena bytes are
 * unused until close); td_rcache_get only ever swaps NULL for SEEN, so a
 * stored pointer is never replaced by SEEN. */
static void put(const td_archive *a, uint64_t r, const uint8_t *src, uint64_t len)
{
	if (len > TD_RCACHE_MAXRULE || len == 0)
		return;
	struct td_rcache *c = cache_of(a);
	if (!c)
		return;
	uint8_t *p = atomic_load_explicit(&c->slot[r], memory_order_acquire);
	if (p > SEEN)
		return;
	uint8_t *n = arena_alloc(a, c, len);
	if (!n)
		return;
	memcpy(n, src, len);
	atomic_store_explicit(&c->slot[r], n, memory_order_release);
	sym_rule(a, r, n, len);
}

/* Write the expansion of rule r (len bytes) into out, which may be written
 * up to lim >= len bytes (scratch past len); a sub-rule comes from the
 * cache, or is expanded in place and then cached (it was paid for).
 * Returns 0, or -1 if the grammar does not add up (a corrupt archive may
 * loop: depth bounds the recursion). */
static int fill(const td_archive *a, uint64_t r, uint8_t *out, uint64_t len, uint64_t lim, unsigned depth)
{
	uint64_t start;
	uint32_t n;
	if (depth > TD_MAXDEPTH || td_rule_rhs(a, r, &start, &n))
		return -1;
	uint64_t at = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t s = td_rule_sym(a, start + i);
		if (td_fsym_ready(a) && s < a->T + a->R) {
			/* a terminal, or a rule cached already: one look-up */
			uint64_t e = td_sym_entry(a, s);
			if (td_sym_elen(e)) {
				if (at + td_sym_elen(e) + td_sym_espace(e) > len)
					return -1;
				at += td_sym_write(out + at, lim - at, e);
				continue;
			}
		}
		if (s < a->T) {
			uint32_t tl;
			int space;
			const uint8_t *p = td_term_bytes(a, s, &tl, &space);
			if (!p || at + tl + (unsigned)space > len)
				return -1;
			td_copy(out + at, p, tl);
			at += tl;
			if (space)
				out[at++] = ' ';
			continue;
		}
		if (s >= a->T + a->R)
			return -1;
		uint64_t cl = td_sym_len(a, s);
		if (at + cl > len)
			return -1;
		const uint8_t *c = td_rcache_peek(a, s - a->T);
		if (c) {
			td_copy(out + at, c, cl);
		} else {
			if (fill(a, s - a->T, out + at, cl, lim - at, depth + 1))
				return -1;
			put(a, s - a->T, out + at, cl);
		}
		at += cl;
	}
	return at == len ? 0 : -1;
}

int td_rcache_expand(const td_archive *a, uint64_t r, uint8_t *out, uint64_t lim)
{
	uint64_t len = td_sym_len(a, a->T + r);
	if (len > lim || fill(a, r, out, len, lim, 0))
		return -1;
	put(a, r, out, len);
	return 0;
}

const uint8_t *td_rcache_get(const td_archive *a, uint64_t r)
{
	uint64_t len = td_sym_len(a, a->T + r);
	if (len > TD_RCACHE_MAXRULE || len == 0)
		return NULL;
	struct td_rcache *c = cache_of(a);
	if (!c)
		return NULL;
	uint8_t *p = atomic_load_explicit(&c->slot[r], memory_order_acquire);
	if (p > SEEN)
		return p;
	/* Admission for a rule read only in part: it is expanded into the
	 * cache on its second such use, so a small read inside a long rule
	 * does not pay for a whole expansion it never reuses. (A rule read
	 * whole is cached at once by td_rcache_expand: it is expanded anyway.) */
	if (!p) {
		atomic_compare_exchange_strong_explicit(&c->slot[r], &p, SEEN, memory_order_relaxed,
							memory_order_relaxed);
		return NULL;
	}
	/* A failed or lost build leaves its arena bytes unused until close. */
	uint8_t *n = arena_alloc(a, c, len);
	if (!n || fill(a, r, n, len, (len + 15) & ~UINT64_C(15), 0)) /* the arena rounds to 16 */
		return NULL;
	uint8_t *expected = SEEN;
	if (!atomic_compare_exchange_strong_explicit(&c->slot[r], &expected, n, memory_order_acq_rel,
						     memory_order_acquire))
		n = expected;
	else
		sym_rule(a, r, n, len);
	return n;
}

/* Cache rule symbol s's expansion when it is short, or those of the short
 * rules below it (each long rule walked once: seen[]); the text of short
 * ones is written to buf. 0, or -1 when the grammar does not add up. */
static int warm_sym(const td_archive *a, uint64_t s, uint8_t *buf, uint8_t *seen, unsigned depth, uint64_t *have)
{
	if (s < a->T)
		return 0;
	uint64_t r = s - a->T, start;
	uint32_t n;
	if (r >= a->R || depth > TD_MAXDEPTH)
		return -1;
	uint64_t l = a->f_rule_len[r];
	if (l <= TD_RCACHE_MAXRULE) {
		if (l == 0 || td_rcache_peek(a, r))
			return 0;
		*have += l;
		return td_rcache_expand(a, r, buf, TD_RCACHE_MAXRULE + TD_RCACHE_PAD);
	}
	if (seen[r >> 3] & (1u << (r & 7)))
		return 0;
	seen[r >> 3] |= (uint8_t)(1u << (r & 7));
	if (td_rule_rhs(a, r, &start, &n))
		return -1;
	for (uint32_t i = 0; i < n; i++)
		if (warm_sym(a, a->f_rule_syms[start + i], buf, seen, depth + 1, have))
			return -1;
	return 0;
}

/* Arena bytes every short rule's expansion takes (after td_flat_build). */
static uint64_t short_bytes(const td_archive *a)
{
	uint64_t need = 0;
	for (uint64_t r = 0; r < a->R; r++) {
		uint64_t l = a->f_rule_len[r];
		if (l <= TD_RCACHE_MAXRULE)
			need += (l + 15) & ~UINT64_C(15);
	}
	return need;
}

/* Whether need bytes of expansions fit the budget, with a margin for the
 * thread-local blocks' tails, a lost race now and then, and the arena's
 * last chunk (a chunk that would pass the budget is not started). */
static int short_fit(const td_archive *a, uint64_t need)
{
	return need + need / 8 + 2 * BUMP_BYTES + CHUNK_BYTES <= a->rcache_budget;
}

/* The warm-up and the sweep are about to write every short rule's slot:
 * huge pages for them from now on (linuxdoc's hinted pass: 1.6k page
 * faults fewer, about 4% faster). The cache exists (callers checked). */
static void slots_filled_whole(const td_archive *a)
{
	struct td_rcache *c = cache_of(a);
	td_big_huge(c->slot, a->R * sizeof *c->slot);
}

/* td_archive_warm's rule cache fill. */
static int warm_cache(const td_archive *a, const volatile int *stop, uint64_t *bytes)
{
	int err = td_data_check(a);
	if (err)
		return err;
	td_flat_build(a);
	td_syms_build(a); /* a mount decodes coded sequences now, not at its first reads */
	if (!a->flat || !td_syms_flat(a) || !cache_of(a))
		return TD_OK; /* tables or cache over the budget, or no rules */
	uint64_t have = 0;
	if (!short_fit(a, short_bytes(a)))
		return TD_OK;
	/* td_archive_will_read need not sweep too (when one did, this walk
	 * finds every short rule cached and adds nothing) */
	int none = 0;
	atomic_compare_exchange_strong(&((td_archive *)a)->swept, &none, 1);
	slots_filled_whole(a);
	/* In the order of the root sequence, as a first read of every file
	 * would: the arena then holds expansions in the order sequential
	 * readers meet them (in rule order, later passes ran 20% slower). */
	uint8_t *buf = malloc(TD_RCACHE_MAXRULE + TD_RCACHE_PAD), *seen = calloc(a->R / 8 + 1, 1);
	err = buf && seen ? TD_OK : TD_ENOMEM;
	uint64_t ring[TD_TILE];
	for (uint64_t i = 0; i < a->meta.nroot && !err && !(stop && __atomic_load_n(stop, __ATOMIC_RELAXED)); i += TD_TILE) {
		uint64_t k = a->meta.nroot - i < TD_TILE ? a->meta.nroot - i : TD_TILE;
		td_root_range(a, i, k, ring);
		for (uint64_t j = 0; j < k; j++)
			if (warm_sym(a, ring[j], buf, seen, 0, &have)) {
				err = td_fail(TD_ECORRUPT, "root symbol %" PRIu64 ": rule lengths do not add up", i + j);
				break;
			}
	}
	free(buf);
	free(seen);
	if (bytes)
		*bytes = have;
	return err;
}

int td_archive_warm(const td_archive *a, const volatile int *stop, uint64_t *bytes)
{
	if (td_sharded(a))
		return td_shard_warm(a, stop, bytes);
	if (bytes)
		*bytes = 0;
	int err = warm_cache(a, stop, bytes);
	if (!err && a->flat && !(stop && __atomic_load_n(stop, __ATOMIC_RELAXED)))
		(void)td_qindex_get(a); /* the first search is then as fast as the next */
	return err;
}

/* Prefetch distance of the sweep, in rules: the entries of rule r + SWEEP_AHEAD's
 * symbols, and the bytes of rule r + SWEEP_AHEAD / 2's. With the tables in
 * huge pages, 32 swept linuxdoc in 11.3 ms and gcide in 5.8 against 11.5
 * and 6.2 with 16 (medians of 11 fresh processes, 2026-11-26); 64 no
 * faster. */
#define SWEEP_AHEAD 32u

static void sweep_prefetch(const td_archive *a, const td_disk_group *g, uint64_t end, uint64_t r)
{
	const uint32_t *rs = a->f_rule_syms;
	uint32_t n = g->len < 4 ? g->len : 4;
	if (r + SWEEP_AHEAD < end) {
		const uint32_t *p = rs + g->first_sym + (r + SWEEP_AHEAD - g->first_rule) * g->len;
		for (uint32_t i = 0; i < n; i++)
			if (p[i] < a->T + a->R)
				__builtin_prefetch(&a->f_sym[p[i]]);
	}
	if (r + SWEEP_AHEAD / 2 < end) {
		const uint32_t *p = rs + g->first_sym + (r + SWEEP_AHEAD / 2 - g->first_rule) * g->len;
		for (uint32_t i = 0; i < n; i++)
			if (p[i] < a->T + a->R)
				__builtin_prefetch(td_sym_eptr(td_sym_entry(a, p[i])));
	}
}

/* Cache every short rule, in rule order (td_archive_will_read). The rule
 * symbols are read front to back; most of a rule's parts have lower ids
 * (shorter expansions sort first within a right-hand-side length), so they
 * are cached already and the rule is one table look-up and one copy a
 * part, with no descent: the look-ups of the next rules are prefetched
 * while this one is copied. A part not cached yet (a later id) is expanded
 * by fill(). 0, or -1 with *bad the rule whose lengths do not add up. */
static int sweep_rules(const td_archive *a, uint64_t *bad)
{
	struct td_rcache *c = cache_of(a);
	uint8_t buf[TD_RCACHE_MAXRULE + TD_RCACHE_PAD];
	for (uint64_t gi = 0; gi < a->ngroups; gi++) {
		const td_disk_group *g = &a->groups[gi];
		uint64_t end = gi + 1 < a->ngroups ? a->groups[gi + 1].first_rule : a->R;
		*bad = g->first_rule;
		if (end < g->first_rule || end > a->R || g->first_sym + (end - g->first_rule) * g->len > a->rule_syms.n)
			return -1;
		for (uint64_t r = g->first_rule; r < end; r++) {
			*bad = r;
			sweep_prefetch(a, g, end, r);
			uint64_t len = a->f_rule_len[r];
			if (len == 0 || len > TD_RCACHE_MAXRULE ||
			    (uintptr_t)atomic_load_explicit(&c->slot[r], memory_order_relaxed) > TD_RCACHE_SEEN)
				continue;
			/* fill()'s first case inline, with the symbols at hand: a
			 * call to fill() per rule (its group search and checked
			 * symbol reads) made the sweep 20% slower */
			const uint32_t *p = a->f_rule_syms + g->first_sym + (r - g->first_rule) * g->len;
			uint64_t at = 0;
			uint32_t i;
			for (i = 0; i < g->len; i++) {
				uint64_t e = p[i] < a->T + a->R ? td_sym_entry(a, p[i]) : 0;
				uint32_t l = td_sym_elen(e);
				if (!l || at + l + td_sym_espace(e) > len)
					break;
				at += td_sym_write(buf + at, sizeof buf - at, e);
			}
			if (i < g->len) {
				if (fill(a, r, buf, len, sizeof buf, 0))
					return -1;
			} else if (at != len) {
				return -1;
			}
			put(a, r, buf, len);
		}
	}
	return 0;
}

int td_archive_will_read(const td_archive *a, uint64_t bytes)
{
	if (td_sharded(a))
		return td_shard_will_read(a, bytes);
	td_archive *m = (td_archive *)a; /* the cache is the only mutable part */
	int state = atomic_load_explicit(&a->swept, memory_order_acquire);
	if (state < 0)
		return td_fail(TD_ECORRUPT, "rule %" PRIu64 ": lengths do not add up", a->sweep_bad);
	/* Below T + R bytes a read would not even build the tables
	 * (td_flat_after); past it, below sweep_min once that is known. */
	if (state || a->R == 0 || bytes < a->T + a->R || bytes < atomic_load_explicit(&a->sweep_min, memory_order_relaxed))
		return TD_OK;
	int err = td_data_check(a);
	if (err)
		return err;
	td_flat_build(a);
	if (!a->flat || !td_fsym_ready(a) || !cache_of(a)) {
		atomic_store_explicit(&m->sweep_min, UINT64_MAX, memory_order_relaxed);
		return TD_OK; /* tables or cache over the budget: never */
	}
	uint64_t need = short_bytes(a);
	int fit = short_fit(a, need);
	atomic_store_explicit(&m->sweep_min, !fit ? UINT64_MAX : need ? need : 1, memory_order_relaxed);
	if (bytes < need || !fit)
		return TD_OK;
	td_syms_build_part(a, 1, 0);
	if (!td_syms_flat(a))
		return TD_OK;
	int none = 0;
	if (!atomic_compare_exchange_strong(&m->swept, &none, 1))
		return TD_OK; /* another reader sweeps or swept, or a warm-up runs or ran */
	slots_filled_whole(a);
	uint64_t bad = 0;
	if (sweep_rules(a, &bad)) {
		m->sweep_bad = bad;
		atomic_store_explicit(&m->swept, -1, memory_order_release);
		return td_fail(TD_ECORRUPT, "rule %" PRIu64 ": lengths do not add up", bad);
	}
	return TD_OK;
}

void td_rcache_free(td_archive *a)
{
	struct td_rcache *c = atomic_load(&a->rcache);
	if (!c)
		return;
	for (struct td_rcache_chunk *ch = atomic_load(&c->chunk), *next; ch; ch = next) {
		next = ch->next;
		td_big_free(ch, sizeof *ch + ch->cap + TD_RCACHE_PAD);
	}
	td_big_free(c->slot, a->R * sizeof *c->slot);
	free(c);
	atomic_store(&a->rcache, NULL);
}

static size_t flat_bytes(uint64_t n)
{
	return (n + 1) * sizeof(uint32_t);
}

/* Coded symbols decoded whole on threads: FLAT_TILES tiles a task (a
 * multiple of the vector decoder's 32), threads for FLAT_GRAIN symbols
 * or more each. */
#define FLAT_TILES 256u
#define FLAT_GRAIN (UINT64_C(1) << 17)

typedef struct fjob {
	const td_scode *c;
	uint32_t *v;
} fjob;

static void flat_tiles(void *ctx, size_t i)
{
	const fjob *j = ctx;
	td_scode_decode_tiles(j->c, (uint64_t)i * FLAT_TILES, (uint64_t)(i + 1) * FLAT_TILES, j->v);
}

static uint32_t *flatten_syms(const td_syms *s)
{
	uint32_t *v = td_big_alloc(flat_bytes(s->n));
	if (!v)
		return NULL;
	if (s->coded) { /* undecodable symbols read as the alphabet, out of range */
		unsigned nt = td_par_threads(s->n, FLAT_GRAIN);
		if (nt <= 1) {
			td_scode_decode_all(&s->c, v);
			return v;
		}
		/* in parallel: ranges of FLAT_TILES tiles, taken in turn */
		fjob j = { &s->c, v };
		if (td_par_for_all((size_t)((s->c.ntiles + FLAT_TILES - 1) / FLAT_TILES), nt, flat_tiles, &j))
			td_scode_decode_all(&s->c, v);
		return v;
	}
	uint64_t t[TD_TILE]; /* a tile at a time: one header (or decode) per 128 values */
	for (uint64_t i = 0; i < s->n; i += TD_TILE) {
		uint64_t k = s->n - i < TD_TILE ? s->n - i : TD_TILE, big = 0;
		td_syms_range(s, i, k, t);
		for (uint64_t j = 0; j < k; j++) {
			big |= t[j] >> 32;
			v[i + j] = (uint32_t)t[j];
		}
		if (big) {
			td_big_free(v, flat_bytes(s->n));
			return NULL;
		}
	}
	return v;
}

static uint32_t *flatten(const td_pack *p)
{
	td_syms s = { .n = p->n, .p = *p };
	return flatten_syms(&s);
}

static size_t sym_bytes(const td_archive *a)
{
	return 8 * (a->T + a->R + 1);
}

/* Words are laid out in the pool by how often they occur, the most
 * frequent first (buckets of log2 of the count, in word order within
 * one), up to SYM_HOT bytes: the words most tokens are then lie on a few
 * cache lines instead of all over WORDS (sequential reads of gcide and
 * linuxdoc 13% and 40% faster than with entries in word order). Words
 * that occur once are left in WORDS: about half of a vocabulary, and
 * hardly any of its tokens. */
#define SYM_NBUCKET 34u
#define SYM_HOT (UINT64_C(8) << 20)
#define SYM_COLD (SYM_NBUCKET - 2) /* buckets of words met once or never: not copied */

static size_t sym_pool_bytes(const td_archive *a)
{
	uint64_t w = a->bytes_size[TD_SEC_WORDS];
	return (w < SYM_HOT ? w : SYM_HOT) + TD_SYM_PAD;
}

static unsigned freq_bucket(uint64_t f)
{
	unsigned b = f ? 64u - (unsigned)__builtin_clzll(f) : 0u; /* 0..64 */
	return b >= SYM_NBUCKET ? 0u : SYM_NBUCKET - 1 - b;
}

/* Every word's bucket, from WORD_FREQ a tile at a time (all 0 without it);
 * NULL out of memory. */
static uint8_t *freq_buckets(const td_pack *wf, uint64_t nw)
{
	uint8_t *b = malloc(nw ? nw : 1);
	uint64_t f[TD_TILE];
	for (uint64_t w = 0; b && w < nw; w += TD_TILE) {
		uint64_t k = nw - w < TD_TILE ? nw - w : TD_TILE;
		if (wf)
			td_pack_get_range(wf, w, k, f);
		for (uint64_t j = 0; j < k; j++)
			b[w + j] = (uint8_t)(wf ? freq_bucket(f[j]) : SYM_NBUCKET - 1);
	}
	return b;
}

/* Token t's bytes [off[t], off[t + 1]) of bytes[0..size): their length,
 * 0 when the offsets are bad or the token is longer than max, the most
 * td_term_bytes accepts (no entry: the checked path reports it, so reads
 * through the table never give what reads without it reject). */
static uint64_t tok_len(const uint32_t *off, uint64_t t, uint64_t size, uint64_t max)
{
	return off[t] < off[t + 1] && off[t + 1] <= size && off[t + 1] - off[t] <= max ? off[t + 1] - off[t] : 0;
}

/* Whether TD_SYM_PAD bytes may be read from p, a token's bytes in the
 * mapping or in a decoded copy (TD_BYTES_PAD bytes after it). */
static int sym_readable(const td_archive *a, const uint8_t *p)
{
	if (p >= a->map && p < a->map + a->size)
		return p + TD_SYM_PAD <= a->map + a->size;
	return 1;
}

/* The f_sym table and its pool from the flat offsets (td_archive_int.h);
 * 0, or -1 out of memory. Rules get their entries as they are cached. */
static int sym_build(td_archive *m, const uint32_t *wo, const uint32_t *oo)
{
	_Atomic(uint64_t) *ent = td_big_alloc(sym_bytes(m));
	uint8_t *pool = td_big_alloc(sym_pool_bytes(m));
	uint8_t *bucket = freq_buckets(td_word_freq(m), m->W);
	if (!ent || !pool || !bucket) {
		td_big_free(ent, sym_bytes(m));
		td_big_free(pool, sym_pool_bytes(m));
		free(bucket);
		return -1;
	}
	const uint8_t *words = td_words(m), *other = td_other(m);
	const uint64_t wsize = m->bytes_size[TD_SEC_WORDS], osize = m->bytes_size[TD_SEC_OTHER];
	uint64_t start[SYM_NBUCKET + 1] = { 0 };
	for (uint64_t w = 0; words && w < m->W; w++)
		start[bucket[w] + 1] += tok_len(wo, w, wsize, TD_MAXTOK);
	for (unsigned b = 0; b < SYM_NBUCKET; b++)
		start[b + 1] += start[b];
	for (uint64_t w = 0; words && w < m->W; w++) {
		uint64_t l = tok_len(wo, w, wsize, TD_MAXTOK);
		if (!l)
			continue;
		unsigned b = bucket[w];
		const uint8_t *p = words + wo[w];
		if (b < SYM_COLD && start[b] + l <= SYM_HOT) {
			memcpy(pool + start[b], p, l);
			p = pool + start[b];
			start[b] += l;
		} else if (!sym_readable(m, p)) {
			continue;
		}
		atomic_init(&ent[2 * w], td_sym_make(p, l, 0));
		atomic_init(&ent[2 * w + 1], td_sym_make(p, l, 1));
	}
	for (uint64_t o = 0; other && o < m->T - 2 * m->W; o++) {
		uint64_t l = tok_len(oo, o, osize, TD_MAXTOK + 1);
		if (l && sym_readable(m, other + oo[o]))
			atomic_init(&ent[2 * m->W + o], td_sym_make(other + oo[o], l, 0));
	}
	free(bucket);
	m->f_sym_pool = pool;
	__atomic_store_n(&m->f_sym, ent, __ATOMIC_RELEASE); /* published: td_fsym_ready */
	/* Rules cached before the table (reads before td_flat_after's
	 * threshold). A put() racing with this may store its slot unseen here
	 * and find f_sym still NULL: that rule then keeps entry 0 and is
	 * expanded where it is met (slower, never wrong). */
	const struct td_rcache *c = atomic_load_explicit(&m->rcache, memory_order_acquire);
	for (uint64_t r = 0; c && r < m->R; r++) {
		const uint8_t *p = atomic_load_explicit(&c->slot[r], memory_order_acquire);
		if (p > SEEN)
			atomic_store_explicit(&ent[m->T + r], td_sym_make(p, m->f_rule_len[r], 0), memory_order_release);
	}
	return 0;
}

/* The archive's table lock (flat tables, coded sequences decoded whole,
 * the query index): one per archive, so a build in one shard of a format 5
 * archive never holds up a reader of another. */
static pthread_mutex_t *flat_lock(const td_archive *a)
{
	return &((td_archive *)a)->flat_mu;
}

/* Bytes of the tables built at the first read (td_flat_build). */
static uint64_t flat1_bytes(const td_archive *a)
{
	return 4 * (a->word_off.n + a->other_off.n + a->rule_len.n + (a->rule_syms.coded ? 0 : a->rule_syms.n));
}

void td_flat_build(const td_archive *a)
{
	if (td_data_check(a) != TD_OK)
		return; /* version 4's word offsets come from the checked words */
	if (!atomic_load_explicit(&a->flat, memory_order_acquire) && a->rcache_budget != 0 &&
	    flat1_bytes(a) <= a->rcache_budget) {
		uint64_t bytes = flat1_bytes(a);
		pthread_mutex_lock(flat_lock(a));
		td_archive *m = (td_archive *)a;
		if (!atomic_load(&m->flat)) {
			/* version 4's offsets are a flat array already (unfront) */
			uint32_t *wo_own = a->word_off32 ? NULL : flatten(&a->word_off);
			const uint32_t *wo = a->word_off32 ? a->word_off32 : wo_own;
			uint32_t *oo = flatten(&a->other_off), *rl = flatten(&a->rule_len),
				 *rs = a->rule_syms.coded ? NULL : flatten_syms(&a->rule_syms);
			if (wo && oo && rl && (rs || a->rule_syms.coded)) {
				m->f_word_off = wo;
				m->f_other_off = oo;
				m->f_rule_len = rl;
				if (bytes + sym_bytes(a) + sym_pool_bytes(a) <= a->rcache_budget)
					sym_build(m, wo, oo);
				if (rs) { /* FOR tiles decode at ~1 ns a symbol: now */
					m->f_rule_syms = rs;
					atomic_store_explicit(&m->syms_flat, 1, memory_order_release);
				}
				atomic_store_explicit(&m->flat, wo, memory_order_release);
			} else {
				td_big_free(wo_own, flat_bytes(a->word_off.n));
				td_big_free(oo, flat_bytes(a->other_off.n));
				td_big_free(rl, flat_bytes(a->rule_len.n));
				td_big_free(rs, flat_bytes(a->rule_syms.n));
			}
		}
		pthread_mutex_unlock(flat_lock(a));
	}
	td_syms_poll(a);
}

/* Flatten coded sequence s into *f and publish its state (td_archive_int.h):
 * 1, or 2 when its flat copy does not fit the budget beside *used bytes;
 * the caller holds flat_lock. */
static void syms_flatten(const td_archive *a, const td_syms *s, const uint32_t **f, atomic_int *state, uint64_t *used)
{
	if (atomic_load(state))
		return;
	uint64_t need = flat_bytes(s->n);
	uint32_t *v = *used + need <= a->rcache_budget ? flatten_syms(s) : NULL;
	if (v) {
		*f = v;
		*used += need;
	}
	atomic_store_explicit(state, v ? 1 : 2, memory_order_release);
}

/* Bytes of the query index (td_qindex) of a. */
static uint64_t qindex_bytes(const td_archive *a)
{
	return 4 * (2 * (a->T + a->R + 1) + a->meta.nroot + a->rule_syms.n);
}

/* Bytes of every table built so far; the caller holds flat_lock. */
static uint64_t tables_used(const td_archive *a)
{
	uint64_t used = a->flat ? flat1_bytes(a) + (a->f_sym ? sym_bytes(a) + sym_pool_bytes(a) : 0) : 0;
	if (atomic_load(&a->syms_flat) == 1)
		used += flat_bytes(a->rule_syms.n);
	if (atomic_load(&a->root_flat) == 1)
		used += flat_bytes(a->root_syms.n);
	if (atomic_load(&a->qindex_state) == 1)
		used += qindex_bytes(a);
	return used;
}

/* Coded sequences: which to decode whole now (rules: want_rules, root:
 * want_root), within the budget left beside td_flat_build's tables. */
static void syms_build(const td_archive *a, int want_rules, int want_root)
{
	if (!a->rule_syms.coded)
		return;
	pthread_mutex_lock(flat_lock(a));
	td_archive *m = (td_archive *)a;
	uint64_t used = tables_used(a);
	/* the rule symbols first: read at random, they matter most */
	if (want_rules)
		syms_flatten(a, &a->rule_syms, &m->f_rule_syms, &m->syms_flat, &used);
	if (want_root)
		syms_flatten(a, &a->root_syms, &m->f_root_syms, &m->root_flat, &used);
	pthread_mutex_unlock(flat_lock(a));
}

void td_syms_build(const td_archive *a)
{
	syms_build(a, 1, 1);
}

void td_syms_build_part(const td_archive *a, int rules, int root)
{
	rules = rules && !atomic_load_explicit(&a->syms_flat, memory_order_acquire);
	root = root && !atomic_load_explicit(&a->root_flat, memory_order_acquire);
	if (rules || root)
		syms_build(a, rules, root);
}

void td_syms_consider(const td_archive *a)
{
	uint64_t rules = atomic_load_explicit(&a->rule_syms.c.redecoded, memory_order_relaxed),
		 root = atomic_load_explicit(&a->root_syms.c.redecoded, memory_order_relaxed);
	int want_rules = !atomic_load_explicit(&a->syms_flat, memory_order_relaxed) && rules >= a->rule_syms.n / 8,
	    want_root = !atomic_load_explicit(&a->root_flat, memory_order_relaxed) && root >= a->root_syms.n / 2;
	if (want_rules || want_root)
		syms_build(a, want_rules, want_root);
}

void td_flat_after(const td_archive *a, uint64_t bytes)
{
	td_archive *m = (td_archive *)a;
	if (atomic_fetch_add_explicit(&m->walk_bytes, bytes, memory_order_relaxed) + bytes >= a->T + a->R)
		td_flat_build(a);
}

/* Turn counts c[s + 1] into starts c[s] (s <= n); 0, or -1 when a total
 * passes 32 bits. */
static int counts_to_starts(uint32_t *c, uint64_t n)
{
	uint64_t sum = 0;
	for (uint64_t s = 0; s <= n; s++) {
		sum += c[s];
		if (sum > UINT32_MAX)
			return -1;
		c[s] = (uint32_t)sum;
	}
	return 0;
}

/* After filling through c[s]++ from the starts, c[s] is the start of s + 1:
 * shift it back. */
static void starts_back(uint32_t *c, uint64_t n)
{
	memmove(c + 1, c, n * sizeof *c);
	c[0] = 0;
}

/* Fill x (allocated, zeroed) from the root and rule symbols of a: 0, or -1
 * when a symbol is out of range. */
static int qindex_fill(const td_archive *a, uint32_t *pos_at, uint32_t *pos, uint32_t *par_at, uint32_t *par)
{
	const uint64_t S = a->T + a->R, nroot = a->meta.nroot;
	uint64_t v[256];
	for (int pass = 0; pass < 2; pass++) {
		for (uint64_t i = 0; i < nroot;) {
			uint64_t k = nroot - i < 256 ? nroot - i : 256;
			td_root_range(a, i, k, v);
			for (uint64_t j = 0; j < k; j++) {
				if (v[j] >= S)
					return -1;
				if (pass == 0)
					pos_at[v[j] + 1]++;
				else
					pos[pos_at[v[j]]++] = (uint32_t)(i + j);
			}
			i += k;
		}
		for (uint64_t g = 0; g < a->ngroups; g++) {
			const td_disk_group *gr = &a->groups[g];
			uint64_t end = g + 1 < a->ngroups ? a->groups[g + 1].first_rule : a->R;
			if (end > a->R)
				return -1;
			for (uint64_t r = gr->first_rule; r < end; r++)
				for (uint64_t i = 0; i < gr->len; i++) {
					uint64_t s = td_rule_sym(a, gr->first_sym + (r - gr->first_rule) * gr->len + i);
					if (s >= S)
						return -1;
					if (pass == 0)
						par_at[s + 1]++;
					else
						par[par_at[s]++] = (uint32_t)r;
				}
		}
		/* a damaged archive's groups may cover rule symbols twice */
		if (pass == 0 && (counts_to_starts(pos_at, S) || counts_to_starts(par_at, S) ||
				  par_at[S] != a->rule_syms.n))
			return -1;
	}
	starts_back(pos_at, S);
	starts_back(par_at, S);
	return 0;
}

/* Free the index's arrays (each may be NULL). */
static void qindex_arrays_free(const td_archive *a, const uint32_t *pos_at, const uint32_t *pos,
			       const uint32_t *par_at, const uint32_t *par)
{
	td_big_free(pos_at, flat_bytes(a->T + a->R));
	td_big_free(pos, flat_bytes(a->meta.nroot));
	td_big_free(par_at, flat_bytes(a->T + a->R));
	td_big_free(par, flat_bytes(a->rule_syms.n));
}

/* Whether the index fits the budget beside the tables built so far. */
static int qindex_fits(const td_archive *a)
{
	pthread_mutex_lock(flat_lock(a));
	int fits = tables_used(a) + qindex_bytes(a) <= a->rcache_budget;
	pthread_mutex_unlock(flat_lock(a));
	return fits;
}

const td_qindex *td_qindex_get(const td_archive *a)
{
	int st = atomic_load_explicit(&a->qindex_state, memory_order_acquire);
	if (st)
		return st == 1 ? atomic_load_explicit(&a->qindex, memory_order_acquire) : NULL;
	const uint64_t S = a->T + a->R;
	td_archive *m = (td_archive *)a;
	if (S >= UINT32_MAX || a->meta.nroot >= UINT32_MAX || a->rule_syms.n >= UINT32_MAX || !a->flat ||
	    !qindex_fits(a)) {
		atomic_store(&m->qindex_state, 2);
		return NULL;
	}
	td_syms_build(a); /* both passes read every symbol twice (the index is checked again below) */
	pthread_mutex_lock(flat_lock(a));
	if (!atomic_load(&m->qindex_state)) {
		td_qindex *x = calloc(1, sizeof *x);
		uint32_t *pos_at = NULL, *pos = NULL, *par_at = NULL, *par = NULL;
		int ok = x && tables_used(a) + qindex_bytes(a) <= a->rcache_budget &&
			 (pos_at = td_big_alloc(flat_bytes(S))) && (pos = td_big_alloc(flat_bytes(a->meta.nroot))) &&
			 (par_at = td_big_alloc(flat_bytes(S))) && (par = td_big_alloc(flat_bytes(a->rule_syms.n))) &&
			 qindex_fill(a, pos_at, pos, par_at, par) == 0;
		if (ok) {
			x->pos_at = pos_at;
			x->pos = pos;
			x->par_at = par_at;
			x->par = par;
			atomic_store_explicit(&m->qindex, x, memory_order_release);
		} else {
			free(x);
			qindex_arrays_free(a, pos_at, pos, par_at, par);
		}
		atomic_store_explicit(&m->qindex_state, ok ? 1 : 2, memory_order_release);
	}
	pthread_mutex_unlock(flat_lock(a));
	return td_qindex_get(a);
}

static void qindex_free(td_archive *a)
{
	const td_qindex *x = atomic_load(&a->qindex);
	if (x) {
		qindex_arrays_free(a, x->pos_at, x->pos, x->par_at, x->par);
		free((void *)x);
	}
	atomic_store(&a->qindex, NULL);
	atomic_store(&a->qindex_state, 0);
}

void td_flat_free(td_archive *a)
{
	qindex_free(a);
	if (atomic_load(&a->syms_flat) == 1)
		td_big_free(a->f_rule_syms, flat_bytes(a->rule_syms.n));
	if (atomic_load(&a->root_flat) == 1)
		td_big_free(a->f_root_syms, flat_bytes(a->root_syms.n));
	a->f_rule_syms = a->f_root_syms = NULL;
	atomic_store(&a->syms_flat, 0);
	atomic_store(&a->root_flat, 0);
	if (!atomic_load(&a->flat))
		return;
	if (a->f_word_off != a->word_off32) /* adopted: the archive frees it */
		td_big_free(a->f_word_off, flat_bytes(a->word_off.n));
	td_big_free(a->f_other_off, flat_bytes(a->other_off.n));
	td_big_free(a->f_rule_len, flat_bytes(a->rule_len.n));
	if (a->f_sym) {
		td_big_free(a->f_sym, sym_bytes(a));
		td_big_free(a->f_sym_pool, sym_pool_bytes(a));
	}
	a->f_sym = NULL;
	a->f_sym_pool = NULL;
	atomic_store(&a->flat, NULL);
}
