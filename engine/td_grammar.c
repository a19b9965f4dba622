/* td_grammar: round-based digram replacement with rule inlining. */
#include "td_grammar.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "td_err.h"

/* Open-addressing table from digram to (count, rule id). */
typedef struct pair_slot {
	uint64_t key;   /* (a << 32 | b) + 1; 0 = empty */
	uint32_t count;
	uint32_t rule;  /* assigned rule id, or 0 */
} pair_slot;

typedef struct pair_tab {
	pair_slot *v;
	uint64_t mask, used;
} pair_tab;

static uint64_t mix(uint64_t k)
{
	k ^= k >> 33;
	k *= UINT64_C(0xff51afd7ed558ccd);
	k ^= k >> 33;
	k *= UINT64_C(0xc4ceb9fe1a85ec53);
	k ^= k >> 33;
	return k;
}

static int tab_init(pair_tab *t, uint64_t want)
{
	uint64_t cap = 1024;
	while (cap < want * 2)
		cap <<= 1;
	t->v = calloc(cap, sizeof *t->v);
	if (!t->v)
		return TD_ENOMEM;
	t->mask = cap - 1;
	t->used = 0;
	return TD_OK;
}

static pair_slot *tab_find(const pair_tab *t, uint64_t key)
{
	uint64_t h = mix(key) & t->mask;
	for (;;) {
		pair_slot *s = &t->v[h];
		if (s->key == key || s->key == 0)
			return s;
		h = (h + 1) & t->mask;
	}
}

static int tab_grow(pair_tab *t)
{
	pair_tab nt;
	if (tab_init(&nt, (t->mask + 1)) != TD_OK)
		return TD_ENOMEM;
	for (uint64_t i = 0; i <= t->mask; i++)
		if (t->v[i].key) {
			pair_slot *s = tab_find(&nt, t->v[i].key);
			*s = t->v[i];
			nt.used++;
		}
	free(t->v);
	*t = nt;
	return TD_OK;
}

static uint64_t pkey(uint32_t a, uint32_t b)
{
	return (((uint64_t)a << 32) | b) + 1;
}

/* Growable u32 vector. */
typedef struct vec32 {
	uint32_t *v;
	uint64_t n, cap;
} vec32;

static int vpush(vec32 *x, uint32_t val)
{
	if (x->n == x->cap) {
		uint64_t cap = x->cap ? x->cap * 2 : 1024;
		uint32_t *p = realloc(x->v, cap * sizeof *p);
		if (!p)
			return TD_ENOMEM;
		x->v = p;
		x->cap = cap;
	}
	x->v[x->n++] = val;
	return TD_OK;
}

/* Nesting depth of each rule made so far. */
typedef struct depvec {
	uint8_t *v;
	uint64_t cap;
} depvec;

/* One round: count digrams, give each repeated one a rule, replace.
 * Returns number of new rules (0 = done) or a negative td_err. */
static int64_t round_once(uint32_t *s, uint64_t *np, uint32_t *next_id, vec32 *pairs, uint32_t min_count,
			  uint32_t div, depvec *dep, uint32_t nterm, unsigned max_depth)
{
	uint64_t n = *np;
	pair_tab t;
	if (tab_init(&t, n / 4 + 16) != TD_OK)
		return TD_ENOMEM;
	/* Count; a run like "aaa" counts the digram once per two symbols. */
	uint64_t prev_key = 0;
	for (uint64_t i = 0; i + 1 < n; i++) {
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
		pair_slot *p = tab_find(&t, k);
		if (!p->key) {
			p->key = k;
			if (++t.used * 2 > t.mask) {
				p->count = 1;
				if (tab_grow(&t) != TD_OK) {
					free(t.v);
					return TD_ENOMEM;
				}
				continue;
			}
		}
		p->count++;
	}
	/* Only the most frequent digrams this round (Re-Pair replaces the most
	 * frequent first; rounds approximate that), never past max_depth. */
	uint32_t maxc = 0;
	for (uint64_t i = 0; i <= t.mask; i++)
		if (t.v[i].key && t.v[i].count > maxc)
			maxc = t.v[i].count;
	uint32_t thr = maxc / div > min_count ? maxc / div : min_count;
	/* Assign rules to repeated digrams, in sequence order (deterministic). */
	int64_t made = 0;
	for (uint64_t i = 0; i + 1 < n; i++) {
		if (s[i] == TD_SPLIT || s[i + 1] == TD_SPLIT)
			continue;
		pair_slot *p = tab_find(&t, pkey(s[i], s[i + 1]));
		if (p->count >= thr && !p->rule) {
			unsigned da = s[i] < nterm ? 0 : dep->v[s[i] - nterm];
			unsigned db = s[i + 1] < nterm ? 0 : dep->v[s[i + 1] - nterm];
			unsigned d = (da > db ? da : db) + 1;
			if (d > max_depth)
				continue;
			if (*next_id - nterm >= dep->cap) {
				uint64_t cap = dep->cap * 2 + 4096;
				uint8_t *nd = realloc(dep->v, cap);
				if (!nd) {
					free(t.v);
					return TD_ENOMEM;
				}
				dep->v = nd;
				dep->cap = cap;
			}
			dep->v[*next_id - nterm] = (uint8_t)d;
			if (*next_id >= TD_SPLIT - 1) {
				free(t.v);
				return td_fail(TD_ELIMIT, "more than 2^32 grammar symbols");
			}
			p->rule = (*next_id)++;
			if (vpush(pairs, s[i]) || vpush(pairs, s[i + 1])) {
				free(t.v);
				return TD_ENOMEM;
			}
			made++;
		}
	}
	if (made == 0) {
		free(t.v);
		return 0;
	}
	/* Replace, left to right, taking a digram unless the overlapping next
	 * one is more frequent. */
	uint64_t out = 0, i = 0;
	pair_slot *cur = NULL;
	int have_cur = 0;
	while (i < n) {
		if (i + 1 < n && s[i] != TD_SPLIT && s[i + 1] != TD_SPLIT) {
			pair_slot *p = have_cur ? cur : tab_find(&t, pkey(s[i], s[i + 1]));
			have_cur = 0;
			if (p->rule) {
				pair_slot *q = NULL;
				if (i + 2 < n && s[i + 2] != TD_SPLIT) {
					q = tab_find(&t, pkey(s[i + 1], s[i + 2]));
					if (!q->rule)
						q = NULL;
				}
				if (!q || p->count >= q->count) {
					s[out++] = p->rule;
					i += 2;
					continue;
				}
				cur = q;
				have_cur = 1;
			}
		} else {
			have_cur = 0;
		}
		s[out++] = s[i++];
	}
	free(t.v);
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
	 * used twice pay off overall (3/3 helps sotu, hurts the others). */
	const uint32_t min_count = 2, keep_uses = 2;
	int err = TD_OK;
	/* Each round takes digrams seen at least max/8 times (measured: 3.199
	 * vs 3.112 on sotu, 2.521 vs 2.463 on linuxdoc, for twice the time). */
	const uint32_t div = 8;
	depvec dep = { 0 };
	for (unsigned r = 0; r < 1000; r++) {
		if (progress)
			progress(ctx, "grammar", r, max_depth);
		int64_t made = round_once(seq, &n, &next_id, &pairs, min_count, div, &dep, nterm, max_depth);
		if (made < 0) {
			free(pairs.v);
			free(dep.v);
			return (int)made;
		}
		if (made == 0)
			break;
	}
	free(dep.v);
	uint64_t nr = pairs.n / 2;
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
	free(fr.v);
	if (err)
		td_grammar_free(g);
out:
	free(pairs.v);
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
