/* td_grammar: round-based digram replacement with rule inlining.
 *
 * How a round runs. One table holds every digram of the sequence with its
 * count; it is filled once, then kept exact: a round uncounts the stretches
 * it is about to rewrite (each widened to the edges of runs of equal
 * symbols, so counting a stretch alone gives what a count of the whole
 * sequence gives) and counts them again once rewritten. A round that would
 * replace a large share of the sequence counts it afresh instead. From the
 * table a round picks the digrams that get a rule into a small table of
 * its own; bitmaps of their first and second symbols flag the positions
 * that may hold one, and one pass over the flagged positions gives them
 * their rules in order of first occurrence and takes the replacement
 * decisions; a second pass rewrites the sequence in place. Count updates
 * are queued and applied in batches with their slots prefetched (the
 * table is far larger than the caches); a digram whose count falls to 0
 * leaves the table, so it holds only what the sequence has (about a third
 * as many digrams as positions) and is sized once, at 0.6 slots of 12
 * bytes a position.
 *
 * Threads. The count table is cut into parts by hash; with helper threads
 * (cores a td_build lends while it has no shard for them) each thread
 * applies the updates of its own parts, so the full counts, the uncounts
 * and recounts of the stretches and the scan for the round's picks split
 * without locks; the flags and the rewrite split by ranges of the
 * sequence. Only the decision pass stays on one thread.
 *
 * The grammar is the same as counting every round from scratch gives, on
 * any number of threads: the counts are equal, and rule ids follow the
 * sequence, not the table. */
#include "td_grammar.h"

#include <sys/mman.h>
#include <unistd.h>

#include <assert.h>
#include <pthread.h>
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
 * addressing with linear probing, cut into NPART parts by the top bits of
 * the digram's hash so that threads can update it at once, each the parts
 * it owns. A slot is empty when its count is 0: a digram whose count falls
 * to 0 is deleted (the entries after it shift back), so the table holds
 * only digrams that occur. The parts share one allocation until one of
 * them has to grow (then it moves to one of its own). */
typedef struct cslot {
	uint32_t a, b;
	uint32_t count;
} cslot;

enum { NPART = 64, PART_SHIFT = 58 };

typedef struct cpart {
	cslot *v;
	uint64_t cap, used;
	int own;        /* v is an allocation of its own */
} cpart;

typedef struct ctab {
	cpart p[NPART];
	cslot *base;    /* the shared allocation */
	uint64_t basecap;
} ctab;

static inline unsigned part_of(uint64_t m)
{
	return (unsigned)(m >> PART_SHIFT);
}

/* Home slot in a part of `cap` slots of a digram whose hash is m: the bits
 * below the part's, mapped onto [0, cap) by a multiply. */
static inline uint64_t home_in(uint64_t m, uint64_t cap)
{
	return (uint64_t)(((u128)(m << (64 - PART_SHIFT)) * cap) >> 64);
}

static int ctab_init(ctab *t, uint64_t cap)
{
	memset(t, 0, sizeof *t);
	uint64_t per = cap / NPART + 1;
	if (per < 16)
		per = 16;
	if (!(t->base = slots_alloc(per * NPART, sizeof *t->base)))
		return TD_ENOMEM;
	t->basecap = per * NPART;
	for (unsigned i = 0; i < NPART; i++) {
		t->p[i].v = t->base + i * per;
		t->p[i].cap = per;
	}
	return TD_OK;
}

static void ctab_free(ctab *t)
{
	for (unsigned i = 0; i < NPART; i++)
		if (t->p[i].own)
			td_big_free(t->p[i].v, t->p[i].cap * sizeof *t->p[i].v);
	td_big_free(t->base, t->basecap * sizeof *t->base);
	memset(t, 0, sizeof *t);
}

static uint64_t ctab_used(const ctab *t)
{
	uint64_t u = 0;
	for (unsigned i = 0; i < NPART; i++)
		u += t->p[i].used;
	return u;
}

/* The slot of (a, b), or the empty slot where it would go; h is its home. */
static inline cslot *ctab_find(const cpart *t, uint32_t a, uint32_t b, uint64_t h)
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
static void ctab_delete(cpart *t, uint64_t i)
{
	uint64_t k = i;
	for (;;) {
		if (++k == t->cap)
			k = 0;
		cslot *s = &t->v[k];
		if (!s->count)
			break;
		uint64_t h = home_in(mix(pkey(s->a, s->b)), t->cap);
		/* it stays if its home lies cyclically in (i, k] */
		if (i <= k ? (i < h && h <= k) : (i < h || h <= k))
			continue;
		t->v[i] = *s;
		i = k;
	}
	t->v[i].count = 0;
	t->used--;
}

/* A part that moved out of the shared allocation gives its pages back:
 * random text has about as many digrams as positions, so every part
 * grows, and the shared table (0.6 slots a position) would otherwise stay
 * resident beside the grown parts until the grammar is done. */
static void base_release(void *p, size_t n)
{
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t a = ((uintptr_t)p + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
	uintptr_t e = ((uintptr_t)p + n) & ~((uintptr_t)pg - 1);
	if (pg > 0 && e > a)
		madvise((void *)a, e - a, MADV_DONTNEED);
}

/* Move every entry of part t into an allocation of its own of `cap` slots. */
static int ctab_resize(cpart *t, uint64_t cap)
{
	cpart nt = { slots_alloc(cap, sizeof *nt.v), cap, t->used, 1 };
	if (!nt.v)
		return TD_ENOMEM;
	for (uint64_t i = 0; i < t->cap; i++) {
		const cslot *s = &t->v[i];
		if (s->count)
			*ctab_find(&nt, s->a, s->b, home_in(mix(pkey(s->a, s->b)), nt.cap)) = *s;
	}
	if (t->own)
		td_big_free(t->v, t->cap * sizeof *t->v);
	else
		base_release(t->v, t->cap * sizeof *t->v);
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
 * the order of updates changes no count. A queue takes only the digrams
 * of the parts its thread owns (`mine`; all of them with one thread). */
enum { KB_N = 128 };
typedef struct kbuf {
	uint64_t k[KB_N];
	uint64_t m[KB_N];     /* mix(k) */
	unsigned n;
	int add;              /* 1: count, 0: uncount */
	int all;              /* every part is this thread's */
	uint8_t mine[NPART];  /* parts this thread updates */
} kbuf;

static void kb_init(kbuf *b, int add, unsigned tid, unsigned nthr)
{
	b->n = 0;
	b->add = add;
	b->all = nthr <= 1;
	for (unsigned i = 0; i < NPART; i++)
		b->mine[i] = i % (nthr ? nthr : 1) == tid;
}

static int kb_flush(ctab *t, kbuf *b)
{
	uint64_t h[KB_N];
	for (unsigned i = 0; i < b->n; i++) {
		const cpart *p = &t->p[part_of(b->m[i])];
		h[i] = home_in(b->m[i], p->cap);
		__builtin_prefetch(&p->v[h[i]], 1);
	}
	int err = TD_OK;
	int grew = 0; /* a part grew (only this thread grows the parts it updates) */
	for (unsigned i = 0; i < b->n; i++) {
		uint32_t x = (uint32_t)((b->k[i] - 1) >> 32), y = (uint32_t)(b->k[i] - 1);
		cpart *pt = &t->p[part_of(b->m[i])];
		cslot *p = ctab_find(pt, x, y, !grew ? h[i] : home_in(b->m[i], pt->cap));
		if (!b->add) {
			assert(p->count > 0);
			if (!--p->count)
				ctab_delete(pt, (uint64_t)(p - pt->v));
			continue;
		}
		if (!p->count) {
			/* at most 0.7 full; growing leaves it 0.35 full */
			if ((pt->used + 1) * 10 > pt->cap * 7) {
				if ((err = ctab_resize(pt, (pt->used + 1) * 2)))
					break;
				grew = 1;
				p = ctab_find(pt, x, y, home_in(b->m[i], pt->cap));
			}
			p->a = x;
			p->b = y;
			pt->used++;
		}
		p->count++;
	}
	b->n = 0;
	return err;
}

static inline int kb_put(ctab *t, kbuf *b, uint64_t key)
{
	uint64_t m = mix(key);
	if (!b->all && !b->mine[part_of(m)])
		return TD_OK;
	b->k[b->n] = key;
	b->m[b->n++] = m;
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

/* A list of count-table slots. */
typedef struct vecp {
	const cslot **v;
	uint64_t n, cap;
} vecp;

enum { MAXTHR = 32 }; /* threads a round (the building one included) */

/* State kept across rounds. */
typedef struct rounds {
	ctab t;            /* every digram of the sequence with its count */
	htab hot;          /* this round's digrams that get a rule */
	kbuf kb;           /* count updates not applied yet (one thread) */
	unsigned nthr;     /* threads this round, the building one included */
	const td_grammar_cores *cores;
	uint64_t *left;    /* bit per symbol: it starts a digram in `hot` */
	uint64_t *right;   /* bit per symbol: it ends a digram in `hot` */
	uint64_t nleft;    /* words in `left` and in `right` */
	uint64_t *rep;     /* bit per position: a rule replaces the digram there */
	uint64_t *flag;    /* bit per position: the digram there may be hot (flag_range) */
	vec32 reprule;     /* the rule of each replacement, in sequence order */
	span *spans;
	uint64_t nspans, capspans;
	uint64_t hot_sum;  /* the counts of the digrams in `hot`, summed */
	uint8_t *dep;      /* nesting depth of each rule made so far */
	uint64_t capdep;
	vecp tc[MAXTHR];   /* pick_hot: each thread's slots that may be hot */
	uint32_t last_thr; /* the previous round's threshold (0 before the first) */
} rounds;

static void rounds_free(rounds *st)
{
	ctab_free(&st->t);
	td_big_free(st->hot.v, st->hot.alloc * sizeof *st->hot.v);
	free(st->left);
	free(st->right);
	free(st->rep);
	free(st->flag);
	free(st->spans);
	free(st->dep);
	for (unsigned i = 0; i < MAXTHR; i++)
		free(st->tc[i].v);
	free(st->reprule.v);
}

/* st->flag words [w0, w1): bit i set when s[i], s[i + 1] (i + 1 < n) may
 * be a digram in `hot` (both symbols pass the bitmaps). */
static void flag_range(rounds *st, const uint32_t *s, uint64_t n, uint64_t w0, uint64_t w1)
{
	const uint64_t *L = st->left, *R = st->right;
	for (uint64_t w = w0; w < w1; w++) {
		uint64_t m = 0, base = w * 64, end = base + 64 < n - 1 ? base + 64 : n - 1;
		for (uint64_t i = base; i < end; i++) {
			uint32_t a = s[i], b = s[i + 1];
			uint64_t ok = (a != TD_SPLIT) & (b != TD_SPLIT);
			a = ok ? a : 0;
			b = ok ? b : 0;
			m |= (ok & (L[a >> 6] >> (a & 63)) & (R[b >> 6] >> (b & 63))) << (i - base);
		}
		st->flag[w] = m;
	}
}

/* Replace s[] in st->rep's words [wa, wb) in place: the digram at each
 * set bit by the next rule of st->reprule (from index ridx on), the other
 * symbols moved down. The words' positions start at `start` (one later
 * than the first word's when the replacement before them ends there) and
 * end at n or at the next word range; the result starts there too.
 * Returns its length. The bits are cleared. */
static uint64_t compact_range(rounds *st, uint32_t *s, uint64_t n, uint64_t wa, uint64_t wb, uint64_t start,
			      uint64_t ridx)
{
	uint64_t end = wb * 64 < n ? wb * 64 : n;
	if (start >= end)
		return 0;
	uint64_t out = start, prev = start;
	for (uint64_t w = wa; w < wb; w++) {
		uint64_t m = st->rep[w];
		if (!m)
			continue;
		st->rep[w] = 0;
		do {
			uint64_t j = w * 64 + (uint64_t)__builtin_ctzll(m);
			m &= m - 1;
			memmove(s + out, s + prev, (j - prev) * sizeof *s);
			out += j - prev;
			s[out++] = st->reprule.v[ridx++];
			prev = j + 2;
		} while (m);
	}
	if (prev < end) {
		memmove(s + out, s + prev, (end - prev) * sizeof *s);
		out += end - prev;
	}
	return out - start;
}

/* Table work of one round split over threads: each thread takes the
 * digrams of its parts of the count table (kbuf.mine), so no two threads
 * touch one slot and the counts are what one thread gives. */
enum { PH_COUNT_ALL, PH_SPANS, PH_PICK, PH_FLAG, PH_REPS, PH_COMPACT };
typedef struct phase {
	rounds *st;
	int kind;
	const uint32_t *s;
	uint32_t *sw;      /* PH_COMPACT: the sequence, rewritten */
	uint64_t n;        /* PH_COUNT_ALL: the sequence's length (the table is emptied first) */
	int add;           /* PH_SPANS: count (1) or uncount (0) st->spans */
	uint32_t lo;       /* PH_PICK: list the slots counted at least lo times */
	uint32_t maxc[MAXTHR];
	uint64_t start[MAXTHR]; /* PH_COMPACT: the thread's first position */
	uint64_t cnt[MAXTHR]; /* PH_REPS: replacements in the thread's words; PH_COMPACT: rule index in, length out */
	int err[MAXTHR];
} phase;

typedef struct tharg {
	phase *ph;
	unsigned tid;
} tharg;

static int phase_part(phase *ph, unsigned tid)
{
	rounds *st = ph->st;
	unsigned nthr = st->nthr;
	int err = TD_OK;
	if (ph->kind == PH_REPS || ph->kind == PH_COMPACT) {
		uint64_t nw = ph->n ? (ph->n - 1) / 64 + 1 : 0, wa = nw * tid / nthr, wb = nw * (tid + 1) / nthr;
		if (ph->kind == PH_COMPACT) {
			ph->cnt[tid] = compact_range(st, ph->sw, ph->n, wa, wb, ph->start[tid], ph->cnt[tid]);
			return TD_OK;
		}
		uint64_t c = 0;
		for (uint64_t w = wa; w < wb; w++)
			c += (uint64_t)__builtin_popcountll(st->rep[w]);
		ph->cnt[tid] = c;
		return TD_OK;
	}
	if (ph->kind == PH_FLAG) {
		uint64_t nw = ph->n >= 2 ? (ph->n - 2) / 64 + 1 : 0;
		flag_range(st, ph->s, ph->n, nw * tid / nthr, nw * (tid + 1) / nthr);
		return TD_OK;
	}
	if (ph->kind == PH_PICK) {
		vecp *c = &st->tc[tid];
		uint32_t maxc = 0;
		c->n = 0;
		for (unsigned p = tid; p < NPART; p += nthr) {
			const cpart *t = &st->t.p[p];
			for (uint64_t i = 0; i < t->cap; i++) {
				uint32_t k = t->v[i].count;
				if (k < ph->lo)
					continue;
				const cslot **nv = room(c->v, &c->cap, c->n, sizeof *nv);
				if (!nv)
					return TD_ENOMEM;
				c->v = nv;
				c->v[c->n++] = &t->v[i];
				if (k > maxc)
					maxc = k;
			}
		}
		ph->maxc[tid] = maxc;
		return TD_OK;
	}
	kbuf b;
	kb_init(&b, ph->kind == PH_COUNT_ALL || ph->add, tid, nthr);
	if (ph->kind == PH_COUNT_ALL) {
		for (unsigned p = tid; p < NPART; p += nthr) {
			cpart *t = &st->t.p[p];
			memset(t->v, 0, t->cap * sizeof *t->v);
			t->used = 0;
		}
		err = count_range(&st->t, &b, ph->s, 0, ph->n ? ph->n - 1 : 0);
	} else {
		for (uint64_t k = 0; k < st->nspans && !err; k++)
			err = count_range(&st->t, &b, ph->s, st->spans[k].l, st->spans[k].r);
	}
	return err ? err : kb_flush(&st->t, &b);
}

static void *phase_thread(void *arg)
{
	tharg *a = arg;
	a->ph->err[a->tid] = phase_part(a->ph, a->tid);
	return NULL;
}

/* Run ph on st->nthr threads (the caller is thread 0); a thread that cannot
 * be started has its share run here. Returns the first error. */
static int phase_run(phase *ph)
{
	unsigned nthr = ph->st->nthr;
	pthread_t th[MAXTHR];
	tharg arg[MAXTHR];
	int started[MAXTHR] = { 0 };
	for (unsigned t = 1; t < nthr; t++) {
		arg[t] = (tharg){ ph, t };
		started[t] = pthread_create(&th[t], NULL, phase_thread, &arg[t]) == 0;
	}
	ph->err[0] = phase_part(ph, 0);
	for (unsigned t = 1; t < nthr; t++) {
		if (started[t])
			pthread_join(th[t], NULL);
		else
			ph->err[t] = phase_part(ph, t);
	}
	for (unsigned t = 0; t < nthr; t++)
		if (ph->err[t])
			return ph->err[t];
	return TD_OK;
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
	/* One scan of the (large) count table finds the largest count and
	 * lists the slots at or above a guess of the threshold (half the last
	 * round's); the hot digrams then come from that short list. Only when
	 * the threshold falls below the guess is the table scanned again. */
	uint32_t maxc = 0, lo = st->last_thr / 2 > min_count ? st->last_thr / 2 : min_count;
	for (int pass = 0; pass < 2; pass++) {
		phase ph = { .st = st, .kind = PH_PICK, .lo = lo };
		int err = phase_run(&ph);
		if (err)
			return err;
		maxc = 0;
		for (unsigned t = 0; t < st->nthr; t++)
			if (ph.maxc[t] > maxc)
				maxc = ph.maxc[t];
		/* the lists hold every slot >= thr unless thr < lo; maxc is then
		 * the largest count (or 0 when nothing reached lo): scan again */
		if (maxc / div < lo && lo > min_count) {
			lo = maxc / div > min_count ? maxc / div : min_count;
			continue;
		}
		break;
	}
	uint32_t thr = maxc / div > min_count ? maxc / div : min_count;
	st->last_thr = thr;
	/* one list: the other threads' appended to the first's */
	vecp *cand = &st->tc[0];
	for (unsigned t = 1; t < st->nthr; t++)
		for (uint64_t j = 0; j < st->tc[t].n; j++) {
			const cslot **nv = room(cand->v, &cand->cap, cand->n, sizeof *nv);
			if (!nv)
				return TD_ENOMEM;
			cand->v = nv;
			cand->v[cand->n++] = st->tc[t].v[j];
		}
	uint64_t nhot = 0;
	for (uint64_t j = 0; j < cand->n; j++)
		nhot += cand->v[j]->count >= thr;
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
	for (uint64_t j = 0; j < cand->n; j++) {
		const cslot *p = cand->v[j];
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

/* Uncount s[l..r] now (one thread) or later, over every thread (PH_SPANS). */
static int uncount(rounds *st, const uint32_t *s, uint64_t l, uint64_t r)
{
	return st->nthr == 1 ? count_range(&st->t, &st->kb, s, l, r) : TD_OK;
}

/* The spans moved to where pass 2 puts them: a position p that stays (or
 * the first symbol of a replaced digram) moves down by the replacements
 * before it; the second symbol of one lands on its rule. */
static void spans_moved(rounds *st)
{
	uint64_t w = 0, below = 0; /* replacements in st->rep's words before w */
	for (uint64_t k = 0; k < st->nspans; k++)
		for (int e = 0; e < 2; e++) {
			uint64_t *p = e ? &st->spans[k].r : &st->spans[k].l, pw = *p >> 6;
			for (; w < pw; w++)
				below += (uint64_t)__builtin_popcountll(st->rep[w]);
			uint64_t rank = below + (uint64_t)__builtin_popcountll(st->rep[pw] & ((UINT64_C(1) << (*p & 63)) - 1));
			*p -= rank;
		}
}

/* The sequence s[0..n) rewritten by st->rep and st->reprule (pass 2), its
 * new length in *out: the words split over the threads, each range
 * rewritten in place, then moved down after the one before. */
static int compact(rounds *st, uint32_t *s, uint64_t n, uint64_t *out)
{
	if (st->nthr == 1) {
		*out = compact_range(st, s, n, 0, n ? (n - 1) / 64 + 1 : 0, 0, 0);
		return TD_OK;
	}
	phase ph = { .st = st, .kind = PH_REPS, .n = n };
	int err = phase_run(&ph);
	if (err)
		return err;
	uint64_t ridx = 0, nw = n ? (n - 1) / 64 + 1 : 0;
	for (unsigned t = 0; t < st->nthr; t++) {
		uint64_t c = ph.cnt[t];
		ph.cnt[t] = ridx;
		ridx += c;
	}
	for (unsigned t = 0; t < st->nthr; t++) {
		uint64_t wa = nw * t / st->nthr;
		ph.start[t] = wa * 64 + (wa > 0 && ((st->rep[wa - 1] >> 63) & 1));
	}
	ph.kind = PH_COMPACT;
	ph.sw = s;
	if ((err = phase_run(&ph)))
		return err;
	uint64_t o = 0;
	for (unsigned t = 0; t < st->nthr; t++) {
		memmove(s + o, s + ph.start[t], ph.cnt[t] * sizeof *s);
		o += ph.cnt[t];
	}
	*out = o;
	return TD_OK;
}

/* st->flag for the whole sequence, over every thread. */
static int flag_all(rounds *st, const uint32_t *s, uint64_t n)
{
	phase ph = { .st = st, .kind = PH_FLAG, .s = s, .n = n };
	return n >= 2 ? phase_run(&ph) : TD_OK;
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
	ctab fresh;
	kbuf b;
	kb_init(&b, 1, 0, 1);
	if (ctab_init(&fresh, st->t.basecap) || count_range(&fresh, &b, s, 0, n ? n - 1 : 0) || kb_flush(&fresh, &b))
		abort();
	uint64_t live = 0;
	for (unsigned q = 0; q < NPART; q++)
		for (uint64_t i = 0; i < st->t.p[q].cap; i++) {
			const cslot *p = &st->t.p[q].v[i];
			if (!p->count)
				continue;
			live++;
			uint64_t m = mix(pkey(p->a, p->b));
			const cpart *f = &fresh.p[part_of(m)];
			if (part_of(m) != q || ctab_find(f, p->a, p->b, home_in(m, f->cap))->count != p->count)
				abort();
		}
	if (live != ctab_used(&fresh) || live != ctab_used(&st->t))
		abort();
	ctab_free(&fresh);
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
	/* Only the positions whose two symbols pass the bitmaps are looked
	 * at (st->flag), a batch at a time with their hot slots prefetched; a
	 * position that is not hot takes no rule and, when a decision is due
	 * there, defers it to the next one, so skipping them changes nothing. */
	if ((err = flag_all(st, s, n)))
		return err;
	enum { HB = 64 };
	uint64_t pos[HB];
	hslot *res[HB];
	uint64_t nw = n >= 2 ? (n - 2) / 64 + 1 : 0, w = 0, word = nw ? st->flag[0] : 0;
	for (;;) {
		unsigned nb = 0;
		while (nb < HB) {
			while (!word && ++w < nw)
				word = st->flag[w];
			if (!word)
				break;
			pos[nb++] = w * 64 + (uint64_t)__builtin_ctzll(word);
			word &= word - 1;
		}
		if (!nb)
			break;
		for (unsigned j = 0; j < nb; j++)
			__builtin_prefetch(&st->hot.v[home(pkey(s[pos[j]], s[pos[j] + 1]), st->hot.cap)]);
		for (unsigned j = 0; j < nb; j++) {
			hslot *p = htab_find(&st->hot, pkey(s[pos[j]], s[pos[j] + 1]));
			res[j] = p->key ? p : NULL;
		}
		for (unsigned j = 0; j < nb; j++) {
			uint64_t i = pos[j];
			hslot *e = res[j];
			if (!e)
				continue;
			if (!e->rule && (err = make_rule(st, e, next_id, pairs, nterm)))
				return err;
			if (i < dec) /* the second symbol of the replacement before */
				continue;
			hslot *e_next = NULL;
			if (j + 1 < nb)
				e_next = pos[j + 1] == i + 1 ? res[j + 1] : NULL;
			else if (i + 2 < n && bit(st->flag, i + 1))
				e_next = hot_at(st, s, i + 1);
			if (e_next && e->count < e_next->count) {
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
				if (open && ((err = uncount(st, s, sl, sr)) || (err = span_push(st, sl, sr))))
					return err;
				sl = l;
				sr = r;
				open = 1;
			}
			floor_ = sr + 1;
		}
	}
	if ((open && ((err = uncount(st, s, sl, sr)) || (err = span_push(st, sl, sr)))) ||
	    (err = kb_flush(&st->t, &st->kb)))
		return err;
	if (st->nthr > 1 && follow) {
		phase ph = { .st = st, .kind = PH_SPANS, .s = s, .add = 0 };
		if ((err = phase_run(&ph)))
			return err;
	}
	st->kb.add = 1;
	/* Pass 2: replace in place (over every thread), then count the
	 * rewritten stretches, now at their new places. */
	if (follow)
		spans_moved(st);
	uint64_t out;
	if ((err = compact(st, s, n, &out)))
		return err;
	phase ph = { .st = st, .kind = follow ? PH_SPANS : PH_COUNT_ALL, .s = s, .n = out, .add = 1 };
	if ((err = phase_run(&ph)))
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

/* Borrow helper threads for the table work of a round over n positions
 * (none for short sequences: starting them would cost more). */
static void team_take(rounds *st, uint64_t n)
{
	st->nthr = 1;
	if (!st->cores || !st->cores->take || n < (UINT64_C(1) << 20))
		return;
	uint64_t want = n >> 19;
	if (want > MAXTHR - 1)
		want = MAXTHR - 1;
	unsigned got = st->cores->take(st->cores->ctx, (unsigned)want);
	st->nthr += got < want ? got : (unsigned)want;
}

static void team_give(rounds *st)
{
	if (st->nthr > 1 && st->cores->give)
		st->cores->give(st->cores->ctx, st->nthr - 1);
	st->nthr = 1;
}

int td_grammar_build(uint32_t *seq, uint64_t n, uint32_t nterm, unsigned max_depth,
		     td_progress_fn progress, void *ctx, td_grammar *g)
{
	return td_grammar_build_mt(seq, n, nterm, max_depth, progress, ctx, NULL, g);
}

int td_grammar_build_mt(uint32_t *seq, uint64_t n, uint32_t nterm, unsigned max_depth, td_progress_fn progress,
			void *ctx, const td_grammar_cores *cores, td_grammar *g)
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
	/* Each round takes digrams seen at least max/2 times: closer to
	 * Re-Pair's most frequent first than max/8 (archives 0.03-0.5% smaller
	 * on the reference corpora and linux-source, for 12-22% more
	 * build CPU time; contrib/bench/NOTES.md), while max/1 needs too many
	 * rounds. max/8 had beaten taking every digram seen twice (3.199 vs
	 * 3.112 on sotu, 2.521 vs 2.463 on linuxdoc). */
	const uint32_t div = TD_GRAMMAR_DIV;
	rounds st;
	memset(&st, 0, sizeof st);
	kb_init(&st.kb, 1, 0, 1);
	st.cores = cores;
	/* 0.6 slots a position: the digrams of linux-source peak near a third
	 * of the positions, so the table does not grow */
	if (ctab_init(&st.t, n / 5 * 3 + 1024) != TD_OK || !(st.rep = calloc(n / 64 + 1, sizeof *st.rep)) ||
	    !(st.flag = calloc(n / 64 + 1, sizeof *st.flag))) {
		rounds_free(&st);
		return TD_ENOMEM;
	}
	team_take(&st, n);
	phase first = { .st = &st, .kind = PH_COUNT_ALL, .s = seq, .n = n };
	err = phase_run(&first);
	team_give(&st);
	if (err) {
		rounds_free(&st);
		return err;
	}
	for (unsigned r = 0; r < 1000; r++) {
		if (progress)
			progress(ctx, "grammar", r, max_depth);
		team_take(&st, n);
		unsigned nthr = st.nthr;
		int64_t made = round_once(&st, seq, &n, &next_id, &pairs, min_count, div, nterm, max_depth);
		team_give(&st);
		td_trace("round: n %llu made %lld threads %u used %llu", (unsigned long long)n, (long long)made, nthr,
			 (unsigned long long)ctab_used(&st.t));
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

/* The root of td_grammar_finish: seq with inlining applied, split per
 * file (file_root); on a thread of its own beside the rules. */
typedef struct root_job {
	inl_ctx c;
	const uint32_t *seq;
	uint64_t n;
	uint64_t *file_root;
	int err;
} root_job;

static void *root_emit(void *arg)
{
	root_job *j = arg;
	uint64_t f = 0;
	j->file_root[0] = 0;
	for (uint64_t i = 0; i < j->n && !j->err; i++) {
		if (j->seq[i] == TD_SPLIT)
			j->file_root[++f] = j->c.out->n;
		else
			j->err = emit(&j->c, j->seq[i]);
	}
	return NULL;
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
	/* Root: the sequence with inlining applied, split per file; it needs
	 * only newid, so it is emitted beside the rules (on this thread when
	 * no other can be started). */
	uint64_t nfiles = 0;
	for (uint64_t i = 0; i < n; i++)
		nfiles += seq[i] == TD_SPLIT;
	g->file_root = malloc((nfiles + 1) * sizeof *g->file_root);
	if (!g->file_root) {
		free(g->rule_off);
		g->rule_off = NULL;
		err = TD_ENOMEM;
		goto out;
	}
	root_job rj = { { pairs.v, uses, newid, nterm, &root }, seq, n, g->file_root, TD_OK };
	pthread_t rt;
	int rt_on = pthread_create(&rt, NULL, root_emit, &rj) == 0;
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
	if (rt_on)
		pthread_join(rt, NULL);
	else
		root_emit(&rj);
	if (!err)
		err = rj.err;
	g->root = root.v;
	g->nfiles = nfiles;
	td_trace("inlining");
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
