/* td_grammar: round-based digram replacement with rule inlining.
 *
 * How a round runs. One table holds every digram of the sequence with its
 * count; it is filled once, then kept exact: a round uncounts the stretches
 * it is about to rewrite (each widened to the edges of runs of equal
 * symbols, so counting a stretch alone gives what a count of the whole
 * sequence gives) and counts them again once rewritten. A round that would
 * replace a large share of the sequence counts it afresh instead. From the
 * table a round picks the digrams that get a rule into a small table of
 * its own; one pass over the sequence gives them their rules in order of
 * first occurrence and takes the replacement decisions, a second rewrites
 * the sequence in place. Count updates are queued and applied in batches
 * with their slots prefetched (the table is far larger than the caches);
 * a digram whose count falls to 0 leaves the table, so it holds only what
 * the sequence has (about a third as many digrams as positions) and is
 * sized once, at 0.6 slots of 12 bytes a position.
 * The grammar is the same as counting every round from scratch gives: the
 * counts are equal, and rule ids follow the sequence, not the table. */
#include "td_grammar.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "td_err.h"
#include "td_mem.h"
#include "td_trace.h"

__extension__ typedef unsigned __int128 u128;

static inline uint64_t mix(uint64_t k)
{
	k ^= k >> 33;
	k *= UINT64_C(0xff51afd7ed558ccd);
	k ^= k >> 33;
	k *= UINT64_C(0xc4ceb9fe1a85ec53);
	k ^= k >> 33;
	return k;
}

/* Digram (a, b) as one key; never 0 (b is never TD_SPLIT). */
static inline uint64_t pkey(uint32_t a, uint32_t b)
{
	return (((uint64_t)a << 32) | b) + 1;
}

/* Home slot of `key` in a table of `cap` slots: the hash mapped onto
 * [0, cap) by a multiply, so any capacity works. */
static inline uint64_t home(uint64_t key, uint64_t cap)
{
	return (uint64_t)(((u128)mix(key) * cap) >> 64);
}

/* Tables are big (every access misses the caches): huge pages. */
static void *slots_alloc(uint64_t n, size_t size)
{
	return n > SIZE_MAX / size ? NULL : td_big_alloc(n * size);
}

/* The count table: every digram of the sequence with its count, open
 * addressing with linear probing. A slot is empty when its count is 0: a
 * digram whose count falls to 0 is deleted (the entries after it shift
 * back), so the table holds only digrams that occur. */
typedef struct cslot {
	uint32_t a, b;
	uint32_t count;
} cslot;

typedef struct ctab {
	cslot *v;
	uint64_t cap, used;
} ctab;

static int ctab_init(ctab *t, uint64_t cap)
{
	if (cap < 64)
		cap = 64;
	if (!(t->v = slots_alloc(cap, sizeof *t->v)))
		return TD_ENOMEM;
	t->cap = cap;
	t->used = 0;
	return TD_OK;
}

static void ctab_free(ctab *t)
{
	td_big_free(t->v, t->cap * sizeof *t->v);
	t->v = NULL;
}

/* The slot of (a, b), or the empty slot where it would go; h is its home. */
static inline cslot *ctab_find(const ctab *t, uint32_t a, uint32_t b, uint64_t h)
{
	for (;;) {
		cslot *s = &t->v[h];
		if (!s->count || (s->a == a && s->b == b))
			return s;
		if (++h == t->cap)
			h = 0;
	}
}

/* Empty slot i, moving back the entries after it that may not stay. */
static void ctab_delete(ctab *t, uint64_t i)
{
	uint64_t k = i;
	for (;;) {
		if (++k == t->cap)
			k = 0;
		cslot *s = &t->v[k];
		if (!s->count)
			break;
		uint64_t h = home(pkey(s->a, s->b), t->cap);
		/* it stays if its home lies cyclically in (i, k] */
		if (i <= k ? (i < h && h <= k) : (i < h || h <= k))
			continue;
		t->v[i] = *s;
		i = k;
	}
	t->v[i].count = 0;
	t->used--;
}

/* Move every entry into a table of `cap` slots. */
static int ctab_resize(ctab *t, uint64_t cap)
{
	ctab nt;
	if (ctab_init(&nt, cap) != TD_OK)
		return TD_ENOMEM;
	for (uint64_t i = 0; i < t->cap; i++) {
		const cslot *s = &t->v[i];
		if (s->count)
			*ctab_find(&nt, s->a, s->b, home(pkey(s->a, s->b), nt.cap)) = *s;
	}
	nt.used = t->used;
	ctab_free(t);
	*t = nt;
	return TD_OK;
}

/* The hot table: this round's digrams that get a rule, with their counts
 * as the round began. */
typedef struct hslot {
	uint64_t key;   /* pkey(a, b); 0 = empty */
	uint32_t count;
	uint32_t rule;  /* the rule made for it this round, or 0 */
} hslot;

typedef struct htab {
	hslot *v;
	uint64_t cap;
	uint64_t alloc;  /* slots allocated (>= cap) */
} htab;

static inline hslot *htab_find(const htab *t, uint64_t key)
{
	for (uint64_t h = home(key, t->cap);;) {
		hslot *s = &t->v[h];
		if (s->key == key || s->key == 0)
			return s;
		if (++h == t->cap)
			h = 0;
	}
}

/* Count updates are queued and applied a batch at a time, each batch's
 * slots prefetched first: the table is far larger than the caches, and
 * the order of updates changes no count. */
enum { KB_N = 128 };
typedef struct kbuf {
	uint64_t k[KB_N];
	unsigned n;
	int add;        /* 1: count, 0: uncount */
} kbuf;

static int kb_flush(ctab *t, kbuf *b)
{
	uint64_t h[KB_N];
	for (unsigned i = 0; i < b->n; i++) {
		h[i] = home(b->k[i], t->cap);
		__builtin_prefetch(&t->v[h[i]], 1);
	}
	int err = TD_OK;
	uint64_t cap = t->cap;
	for (unsigned i = 0; i < b->n; i++) {
		uint32_t x = (uint32_t)((b->k[i] - 1) >> 32), y = (uint32_t)(b->k[i] - 1);
		cslot *p = ctab_find(t, x, y, cap == t->cap ? h[i] : home(b->k[i], t->cap));
		if (!b->add) {
			assert(p->count > 0);
			if (!--p->count)
				ctab_delete(t, (uint64_t)(p - t->v));
			continue;
		}
		if (!p->count) {
			/* at most 0.7 full; growing leaves it 0.35 full */
			if ((t->used + 1) * 10 > t->cap * 7) {
				if ((err = ctab_resize(t, (t->used + 1) * 2)))
					break;
				p = ctab_find(t, x, y, home(b->k[i], t->cap));
			}
			p->a = x;
			p->b = y;
			t->used++;
		}
		p->count++;
	}
	b->n = 0;
	return err;
}

static inline int kb_put(ctab *t, kbuf *b, uint64_t key)
{
	b->k[b->n++] = key;
	return b->n == KB_N ? kb_flush(t, b) : TD_OK;
}

/* Queue the digrams of s[l..r] as the sequence's count has them: a run
 * like "aaa" counts the digram once per two symbols, and no digram spans a
 * TD_SPLIT. Exact for a range that starts and ends at the edge of a run of
 * equal symbols (or of the sequence). */
static int count_range(ctab *t, kbuf *b, const uint32_t *s, uint64_t l, uint64_t r)
{
	uint64_t prev_key = 0;
	for (uint64_t i = l; i < r; i++) {
		if (s[i] == TD_SPLIT || s[i + 1] == TD_SPLIT) {
			prev_key = 0;
			continue;
		}
		uint64_t k = pkey(s[i], s[i + 1]);
		if (k == prev_key) {
			prev_key = 0;
			continue;
		}
		prev_key = k;
		int err = kb_put(t, b, k);
		if (err)
			return err;
	}
	return TD_OK;
}

/* Growable u32 vector. */
typedef struct vec32 {
	uint32_t *v;
	uint64_t n, cap;
} vec32;

/* The array v of *cap elements of `size` bytes, n of them in use, with
 * room for one more (doubled when full); NULL when out of memory (v is
 * then left as it was). */
static void *room(void *v, uint64_t *cap, uint64_t n, size_t size)
{
	if (n < *cap)
		return v;
	uint64_t nc = *cap ? *cap * 2 : 1024;
	void *p = realloc(v, nc * size);
	if (p)
		*cap = nc;
	return p;
}

static int vpush(vec32 *x, uint32_t val)
{
	uint32_t *v = room(x->v, &x->cap, x->n, sizeof *v);
	if (!v)
		return TD_ENOMEM;
	x->v = v;
	x->v[x->n++] = val;
	return TD_OK;
}

/* A stretch [l, r] of the sequence that a round rewrites, widened to the
 * edges of runs of equal symbols so that counting it alone is exact. */
typedef struct span {
	uint64_t l, r;
} span;

/* State kept across rounds. */
typedef struct rounds {
	ctab t;            /* every digram of the sequence with its count */
	htab hot;          /* this round's digrams that get a rule */
	kbuf kb;           /* count updates not applied yet */
	uint64_t *left;    /* bit per symbol: it starts a digram in `hot` */
	uint64_t *right;   /* bit per symbol: it ends a digram in `hot` */
	uint64_t nleft;    /* words in `left` and in `right` */
	uint64_t *rep;     /* bit per position: a rule replaces the digram there */
	vec32 reprule;     /* the rule of each replacement, in sequence order */
	span *spans;
	uint64_t nspans, capspans;
	uint64_t hot_sum;  /* the counts of the digrams in `hot`, summed */
	uint8_t *dep;      /* nesting depth of each rule made so far */
	uint64_t capdep;
	uint64_t *cand;    /* pick_hot: slots of the count table that may be hot */
	uint64_t capcand;
	uint32_t last_thr; /* the previous round's threshold (0 before the first) */
} rounds;

static void rounds_free(rounds *st)
{
	ctab_free(&st->t);
	td_big_free(st->hot.v, st->hot.alloc * sizeof *st->hot.v);
	free(st->left);
	free(st->right);
	free(st->rep);
	free(st->spans);
	free(st->dep);
	free(st->cand);
	free(st->reprule.v);
}

static inline int bit(const uint64_t *b, uint64_t i)
{
	return (b[i >> 6] >> (i & 63)) & 1;
}

/* The digram at s[i], s[i + 1] if it gets a rule this round. */
static inline hslot *hot_at(const rounds *st, const uint32_t *s, uint64_t i)
{
	uint32_t a = s[i], b = s[i + 1];
	if (a == TD_SPLIT || b == TD_SPLIT || !bit(st->left, a) || !bit(st->right, b))
		return NULL;
	hslot *p = htab_find(&st->hot, pkey(a, b));
	return p->key ? p : NULL;
}

static unsigned sym_depth(const rounds *st, uint32_t s, uint32_t nterm)
{
	return s < nterm ? 0 : st->dep[s - nterm];
}

/* Pick the digrams that get a rule this round: those seen at least
 * max(min_count, most frequent / div) times whose rule would not nest
 * deeper than max_depth. Returns how many. */
static int64_t pick_hot(rounds *st, uint32_t next_id, uint32_t min_count, uint32_t div, uint32_t nterm,
			unsigned max_depth)
{
	const ctab *t = &st->t;
	/* One scan of the (large) count table finds the largest count and
	 * lists the slots at or above a guess of the threshold (half the last
	 * round's); the hot digrams then come from that short list. Only when
	 * the threshold falls below the guess is the table scanned again. */
	uint32_t maxc = 0, lo = st->last_thr / 2 > min_count ? st->last_thr / 2 : min_count;
	uint64_t ncand = 0;
	for (int pass = 0; pass < 2; pass++) {
		ncand = 0;
		for (uint64_t i = 0; i < t->cap; i++) {
			uint32_t c = t->v[i].count;
			if (c < lo)
				continue;
			uint64_t *nc = room(st->cand, &st->capcand, ncand, sizeof *nc);
			if (!nc)
				return TD_ENOMEM;
			st->cand = nc;
			st->cand[ncand++] = i;
			if (c > maxc)
				maxc = c;
		}
		/* the list holds every slot >= thr unless thr < lo; maxc is then
		 * the largest count (or 0 when nothing reached lo): scan again */
		if (maxc / div < lo && lo > min_count) {
			lo = maxc / div > min_count ? maxc / div : min_count;
			continue;
		}
		break;
	}
	uint32_t thr = maxc / div > min_count ? maxc / div : min_count;
	st->last_thr = thr;
	uint64_t nhot = 0;
	for (uint64_t j = 0; j < ncand; j++)
		nhot += t->v[st->cand[j]].count >= thr;
	/* the table is reused from round to round (it is left empty) */
	uint64_t hcap = nhot * 2 + 64;
	if (hcap > st->hot.alloc) {
		td_big_free(st->hot.v, st->hot.alloc * sizeof *st->hot.v);
		st->hot.alloc = hcap + hcap / 2;
		if (!(st->hot.v = slots_alloc(st->hot.alloc, sizeof *st->hot.v))) {
			st->hot.alloc = 0;
			return TD_ENOMEM;
		}
	}
	st->hot.cap = hcap;
	uint64_t words = ((uint64_t)next_id + 63) / 64;
	if (words > st->nleft) {
		uint64_t *nl = realloc(st->left, words * sizeof *nl);
		if (!nl)
			return TD_ENOMEM;
		memset(nl + st->nleft, 0, (words - st->nleft) * sizeof *nl);
		st->left = nl;
		uint64_t *nr = realloc(st->right, words * sizeof *nr);
		if (!nr)
			return TD_ENOMEM;
		memset(nr + st->nleft, 0, (words - st->nleft) * sizeof *nr);
		st->right = nr;
		st->nleft = words;
	}
	int64_t made = 0;
	st->hot_sum = 0;
	for (uint64_t j = 0; j < ncand; j++) {
		const cslot *p = &t->v[st->cand[j]];
		if (p->count < thr)
			continue;
		uint32_t a = p->a, b = p->b;
		unsigned da = sym_depth(st, a, nterm), db = sym_depth(st, b, nterm);
		if ((da > db ? da : db) + 1 > max_depth)
			continue;
		uint64_t key = pkey(p->a, p->b);
		hslot *h = htab_find(&st->hot, key);
		h->key = key;
		h->count = p->count;
		h->rule = 0;
		st->left[a >> 6] |= UINT64_C(1) << (a & 63);
		st->right[b >> 6] |= UINT64_C(1) << (b & 63);
		st->hot_sum += p->count;
		made++;
	}
	return made;
}

static int span_push(rounds *st, uint64_t l, uint64_t r)
{
	span *v = room(st->spans, &st->capspans, st->nspans, sizeof *v);
	if (!v)
		return TD_ENOMEM;
	st->spans = v;
	st->spans[st->nspans].l = l;
	st->spans[st->nspans++].r = r;
	return TD_OK;
}

/* A new rule for digram h (the first time the pass meets it). */
static int make_rule(rounds *st, hslot *h, uint32_t *next_id, vec32 *pairs, uint32_t nterm)
{
	uint32_t a = (uint32_t)((h->key - 1) >> 32), b = (uint32_t)(h->key - 1);
	unsigned da = sym_depth(st, a, nterm), db = sym_depth(st, b, nterm);
	unsigned d = (da > db ? da : db) + 1;
	if (*next_id - nterm >= st->capdep) {
		uint64_t cap = st->capdep * 2 + 4096;
		uint8_t *nd = realloc(st->dep, cap);
		if (!nd)
			return TD_ENOMEM;
		st->dep = nd;
		st->capdep = cap;
	}
	st->dep[*next_id - nterm] = (uint8_t)d;
	if (*next_id >= TD_SPLIT - 1)
		return td_fail(TD_ELIMIT, "more than 2^32 grammar symbols");
	h->rule = (*next_id)++;
	if (vpush(pairs, a) || vpush(pairs, b))
		return TD_ENOMEM;
	return TD_OK;
}

#ifdef TD_GRAMMAR_VERIFY
/* Debug builds with -DTD_GRAMMAR_VERIFY: the table kept across rounds
 * equals a count of the sequence from scratch. */
static void verify_counts(const rounds *st, const uint32_t *s, uint64_t n)
{
	rounds fresh;
	memset(&fresh, 0, sizeof fresh);
	fresh.kb.add = 1;
	if (ctab_init(&fresh.t, st->t.cap) || count_range(&fresh.t, &fresh.kb, s, 0, n ? n - 1 : 0) ||
	    kb_flush(&fresh.t, &fresh.kb))
		abort();
	uint64_t live = 0;
	for (uint64_t i = 0; i < st->t.cap; i++)
		if (st->t.v[i].count) {
			live++;
			const cslot *p = &st->t.v[i];
			if (ctab_find(&fresh.t, p->a, p->b, home(pkey(p->a, p->b), fresh.t.cap))->count != p->count)
				abort();
		}
	if (live != fresh.t.used || live != st->t.used)
		abort();
	ctab_free(&fresh.t);
}
#endif

/* One round: give each digram picked by pick_hot a rule (in order of first
 * occurrence), then replace left to right, taking a digram unless the
 * overlapping next one is more frequent. The counts in st->t follow the
 * sequence: the stretches rewritten are uncounted before and counted
 * again after. Returns the number of new rules (0 = done) or a negative
 * td_err. */
static int64_t round_once(rounds *st, uint32_t *s, uint64_t *np, uint32_t *next_id, vec32 *pairs,
			  uint32_t min_count, uint32_t div, uint32_t nterm, unsigned max_depth)
{
	uint64_t n = *np;
	int64_t made = pick_hot(st, *next_id, min_count, div, nterm, max_depth);
	if (made <= 0)
		return made;
	/* Pass 1 (reads the sequence only): rules, the replacement decisions,
	 * and the stretches they rewrite, uncounted. */
	int err = TD_OK;
	st->nspans = 0;
	st->kb.add = 0;
	uint64_t dec = 0;  /* next position a decision is taken at */
	int open = 0;
	uint64_t sl = 0, sr = 0, floor_ = 0;
	st->reprule.n = 0;
	/* Following a replacement costs about what counting 8 positions
	 * afresh does (measured on a 64 MiB slice of linux-source): past
	 * that, the counts are rebuilt from the new sequence instead. */
	int follow = st->hot_sum * 8 < n;
#ifdef TD_GRAMMAR_VERIFY
	follow = 1; /* the path to check */
#endif
	hslot *e_next = n >= 2 ? hot_at(st, s, 0) : NULL;
	for (uint64_t i = 0; i + 1 < n; i++) {
		enum { AHEAD = 12 };
		if (i + AHEAD + 1 < n) {
			uint32_t a = s[i + AHEAD], b = s[i + AHEAD + 1];
			if (b != TD_SPLIT)
				__builtin_prefetch(&st->hot.v[home(pkey(a, b), st->hot.cap)]);
		}
		hslot *e = e_next;
		e_next = i + 2 < n ? hot_at(st, s, i + 1) : NULL;
		if (e && !e->rule && (err = make_rule(st, e, next_id, pairs, nterm)))
			return err;
		if (i != dec)
			continue;
		if (!e || (e_next && e->count < e_next->count)) {
			dec = i + 1;
			continue;
		}
		dec = i + 2;
		st->rep[i >> 6] |= UINT64_C(1) << (i & 63);
		if ((err = vpush(&st->reprule, e->rule)))
			return err;
		if (!follow)
			continue;
		/* widen to the runs around it; never below the stretch before */
		uint64_t l = i, r;
		if (i > 0 && s[i - 1] != TD_SPLIT) {
			l = i - 1;
			while (l > floor_ && s[l - 1] == s[l])
				l--;
		}
		if (open && i + 2 <= sr) {
			r = sr;
		} else if (i + 2 < n && s[i + 2] != TD_SPLIT) {
			r = i + 2;
			while (r + 1 < n && s[r + 1] == s[r])
				r++;
		} else {
			r = i + 1;
		}
		if (open && l <= sr + 1) {
			if (r > sr)
				sr = r;
		} else {
			if (open && ((err = count_range(&st->t, &st->kb, s, sl, sr)) || (err = span_push(st, sl, sr))))
				return err;
			sl = l;
			sr = r;
			open = 1;
		}
		floor_ = sr + 1;
	}
	if ((open && ((err = count_range(&st->t, &st->kb, s, sl, sr)) || (err = span_push(st, sl, sr)))) ||
	    (err = kb_flush(&st->t, &st->kb)))
		return err;
	st->kb.add = 1;
	/* Pass 2: replace in place, and count each rewritten stretch once it
	 * is written. */
	uint64_t out = 0, k = 0, nl = 0, nrep = 0;
	for (uint64_t i = 0; i < n;) {
		if (k < st->nspans && i == st->spans[k].l)
			nl = out;
		uint64_t last;
		if (bit(st->rep, i)) {
			st->rep[i >> 6] &= ~(UINT64_C(1) << (i & 63));
			s[out++] = st->reprule.v[nrep++];
			last = i + 1;
			i += 2;
		} else {
			s[out++] = s[i];
			last = i;
			i++;
		}
		if (k < st->nspans && last >= st->spans[k].r) {
			if ((err = count_range(&st->t, &st->kb, s, nl, out - 1)))
				return err;
			k++;
		}
	}
	assert(k == st->nspans);
	if (!follow) {
		memset(st->t.v, 0, st->t.cap * sizeof *st->t.v);
		st->t.used = 0;
		if ((err = count_range(&st->t, &st->kb, s, 0, out ? out - 1 : 0)))
			return err;
	}
	if ((err = kb_flush(&st->t, &st->kb)))
		return err;
	/* leave `left` and the hot table empty */
	for (uint64_t j = 0; j < st->hot.cap; j++)
		if (st->hot.v[j].key) {
			uint32_t a = (uint32_t)((st->hot.v[j].key - 1) >> 32), b = (uint32_t)(st->hot.v[j].key - 1);
			st->left[a >> 6] &= ~(UINT64_C(1) << (a & 63));
			st->right[b >> 6] &= ~(UINT64_C(1) << (b & 63));
		}
	memset(st->hot.v, 0, st->hot.cap * sizeof *st->hot.v);
#ifdef TD_GRAMMAR_VERIFY
	verify_counts(st, s, out);
#endif
	*np = out;
	return made;
}

typedef struct inl_ctx {
	const uint32_t *pairs;  /* 2 per round rule */
	const uint32_t *uses;
	const uint32_t *newid;  /* round rule -> final id, or UINT32_MAX if inlined */
	uint32_t nterm;
	vec32 *out;
} inl_ctx;

/* Append the right-hand side of symbol `sym` as it appears in a kept rule
 * or the root: kept rules by final id, inlined rules expanded. */
static int emit(const inl_ctx *c, uint32_t sym)
{
	if (sym < c->nterm)
		return vpush(c->out, sym);
	uint32_t r = sym - c->nterm;
	if (c->newid[r] != UINT32_MAX)
		return vpush(c->out, c->newid[r]);
	int err = emit(c, c->pairs[2 * r]);
	return err ? err : emit(c, c->pairs[2 * r + 1]);
}

int td_grammar_build(uint32_t *seq, uint64_t n, uint32_t nterm, unsigned max_depth,
		     td_progress_fn progress, void *ctx, td_grammar *g)
{
	memset(g, 0, sizeof *g);
	g->nterm = nterm;
	if (max_depth == 0 || max_depth > 64)
		max_depth = 32;
	vec32 pairs = { 0 };
	uint32_t next_id = nterm;
	/* Measured on sotu/spam/linuxdoc/gcide: digrams seen twice and rules
	 * used twice (td_grammar_finish) pay off overall (3/3 helps sotu,
	 * hurts the others). */
	const uint32_t min_count = 2;
	int err = TD_OK;
	/* Each round takes digrams seen at least max/8 times (measured: 3.199
	 * vs 3.112 on sotu, 2.521 vs 2.463 on linuxdoc, for twice the time). */
	const uint32_t div = 8;
	rounds st;
	memset(&st, 0, sizeof st);
	st.kb.add = 1;
	/* 0.6 slots a position: the digrams of linux-source peak near a third
	 * of the positions, so the table does not grow */
	if (ctab_init(&st.t, n / 5 * 3 + 1024) != TD_OK || !(st.rep = calloc(n / 64 + 1, sizeof *st.rep)) ||
	    count_range(&st.t, &st.kb, seq, 0, n ? n - 1 : 0) != TD_OK || kb_flush(&st.t, &st.kb) != TD_OK) {
		rounds_free(&st);
		return TD_ENOMEM;
	}
	for (unsigned r = 0; r < 1000; r++) {
		if (progress)
			progress(ctx, "grammar", r, max_depth);
		int64_t made = round_once(&st, seq, &n, &next_id, &pairs, min_count, div, nterm, max_depth);
		td_trace("round: n %llu made %lld cap %llu used %llu", (unsigned long long)n, (long long)made,
			 (unsigned long long)st.t.cap, (unsigned long long)st.t.used);
		if (made < 0) {
			free(pairs.v);
			rounds_free(&st);
			return (int)made;
		}
		if (made == 0)
			break;
	}
	rounds_free(&st);
	td_trace("rounds done");
	err = td_grammar_finish(seq, n, nterm, pairs.v, pairs.n / 2, g);
	free(pairs.v);
	return err;
}

int td_grammar_finish(const uint32_t *seq, uint64_t n, uint32_t nterm, const uint32_t *pairs_v, uint64_t nr,
		      td_grammar *g)
{
	memset(g, 0, sizeof *g);
	g->nterm = nterm;
	const uint32_t keep_uses = 2; /* rules used fewer times are inlined (see td_grammar_build) */
	int err = TD_OK;
	const struct {
		const uint32_t *v;
		uint64_t n;
	} pairs = { pairs_v, nr * 2 };
	uint32_t *uses = calloc(nr + 1, sizeof *uses);
	uint32_t *newid = malloc((nr + 1) * sizeof *newid);
	uint32_t *depth = calloc(nr + 1, sizeof *depth);
	if (!uses || !newid || !depth) {
		err = TD_ENOMEM;
		goto out;
	}
	for (uint64_t i = 0; i < n; i++)
		if (seq[i] != TD_SPLIT && seq[i] >= nterm)
			uses[seq[i] - nterm]++;
	for (uint64_t i = 0; i < pairs.n; i++)
		if (pairs.v[i] >= nterm)
			uses[pairs.v[i] - nterm]++;
	/* Inline every rule used fewer than `keep_uses` times: its user(s)
	 * then use its children directly, so each child gains uses - 1 uses
	 * (an unused rule takes one away). Walk newest to oldest so a rule's
	 * final use count is known before its children are looked at. */
	for (uint64_t k = nr; k-- > 0;) {
		if (uses[k] >= keep_uses)
			continue;
		for (int j = 0; j < 2; j++) {
			uint32_t c = pairs.v[2 * k + j];
			if (c >= nterm)
				uses[c - nterm] += uses[k] - 1;
		}
	}
	uint32_t kept = 0;
	for (uint64_t k = 0; k < nr; k++)
		newid[k] = uses[k] >= keep_uses ? nterm + kept++ : UINT32_MAX;
	g->nrules = kept;
	g->rule_off = malloc((kept + 1) * sizeof *g->rule_off);
	if (!g->rule_off) {
		err = TD_ENOMEM;
		goto out;
	}
	vec32 rs = { 0 }, root = { 0 };
	inl_ctx c = { pairs.v, uses, newid, nterm, &rs };
	uint32_t kept_i = 0;
	uint32_t maxd = 0;
	for (uint64_t k = 0; k < nr && !err; k++) {
		if (newid[k] == UINT32_MAX)
			continue;
		g->rule_off[kept_i++] = rs.n;
		uint64_t start = rs.n;
		err = emit(&c, pairs.v[2 * k]);
		if (!err)
			err = emit(&c, pairs.v[2 * k + 1]);
		uint32_t d = 0;
		for (uint64_t j = start; j < rs.n; j++)
			if (rs.v[j] >= nterm && depth[rs.v[j] - nterm] > d)
				d = depth[rs.v[j] - nterm];
		depth[newid[k] - nterm] = d + 1; /* indexed by final id */
		if (d + 1 > maxd)
			maxd = d + 1;
	}
	g->rule_off[kept] = rs.n;
	g->rule_syms = rs.v;
	g->depth = maxd;
	/* Root: the sequence with inlining applied, split per file. */
	vec32 fr = { 0 };
	uint64_t nfiles = 0;
	for (uint64_t i = 0; i < n; i++)
		nfiles += seq[i] == TD_SPLIT;
	g->file_root = malloc((nfiles + 1) * sizeof *g->file_root);
	if (!g->file_root && !err)
		err = TD_ENOMEM;
	c.out = &root;
	uint64_t f = 0;
	if (!err) {
		g->file_root[0] = 0;
		for (uint64_t i = 0; i < n && !err; i++) {
			if (seq[i] == TD_SPLIT)
				g->file_root[++f] = root.n;
			else
				err = emit(&c, seq[i]);
		}
	}
	g->root = root.v;
	g->nfiles = nfiles;
	td_trace("inlining");
	free(fr.v);
	if (err)
		td_grammar_free(g);
out:
	free(uses);
	free(newid);
	free(depth);
	return err;
}

void td_grammar_free(td_grammar *g)
{
	free(g->rule_off);
	free(g->rule_syms);
	free(g->root);
	free(g->file_root);
	memset(g, 0, sizeof *g);
}
