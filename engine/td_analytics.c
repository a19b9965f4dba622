/* td_analytics: top words, term vectors, ranked files, n-grams and phrases computed on the grammar. */
#include "td_analytics_int.h"
#include "td_atab.h"
#include "td_vtab.h"
#include "td_query_int.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "td_cancel.h"
#include "td_extract.h"
#include "td_mem.h"
#include "td_out.h"
#include "td_par.h"
#include "td_rcache.h"
#include "td_postings.h"
#include "td_shard.h"
#include "td_tokenize.h"

/* A word of a sequence that can match nothing: a piece of a word longer
 * than TD_MAXTOK (its own word has no id) in a phrase query. */
#define BREAK UINT32_MAX

/* ---------- the scope: its files, the words stored as pieces ---------- */

typedef struct an {
	const td_archive *a;
	uint64_t W, T, R;
	uint8_t *piece;    /* S flags: other token is a piece of a long word; NULL when none exist */
	uint8_t *rpiece;   /* R memo: 0 unknown, 1 no piece below, 2 a piece below */
	td_entry *files;   /* regular files of the scope, path order */
	size_t nfiles, fcap;
} an;

static int is_file(const td_archive *a, td_entry e)
{
	return S_ISREG(td_pack_get(&a->e_mode, e));
}

static int add_files(an *x, td_entry e, unsigned depth)
{
	if (is_file(x->a, e)) {
		if (x->nfiles == x->fcap) {
			size_t cap = x->fcap ? 2 * x->fcap : 256;
			td_entry *v = realloc(x->files, cap * sizeof *v);
			if (!v)
				return TD_ENOMEM;
			x->files = v;
			x->fcap = cap;
		}
		x->files[x->nfiles++] = e;
		return TD_OK;
	}
	td_entry first;
	uint32_t n;
	if (depth > 4096)
		return TD_OK;
	/* a symlink counts nothing; a directory that does not check (a
	 * damaged tree, met lazily) is an error, not an empty directory */
	int cerr = td_archive_children(x->a, e, &first, &n);
	if (cerr)
		return cerr == TD_ENOTDIR ? TD_OK : cerr;
	for (uint32_t i = 0; i < n; i++) {
		int err = add_files(x, first + i, depth + 1);
		if (err)
			return err;
	}
	return TD_OK;
}

static void an_free(an *x)
{
	free(x->piece);
	free(x->rpiece);
	free(x->files);
}

/* Copy a given file list (td_analytics_set.h) as the scope's files. */
static int add_list(an *x, const td_entry *list, size_t n)
{
	x->files = malloc((n ? n : 1) * sizeof *x->files);
	if (!x->files)
		return TD_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (list[i] >= x->a->meta.nentries || !is_file(x->a, list[i]))
			return td_fail(TD_EINVAL, "entry %u is not a regular file", list[i]);
		x->files[i] = list[i];
	}
	x->nfiles = x->fcap = n;
	return TD_OK;
}

/* an_init_list's `walk` flag: the walk reads no word bytes nor offsets
 * (only the grammar's checksums are checked, the dictionary not decoded). */
#define AN_NO_WORDS 2

/* Open the scope (or, with list, the files list[0..nlist)): checks, its
 * files, the piece flags, and the read tables when the walk reads the
 * grammar (`walk` & 1). */
static int an_init_list(an *x, const td_archive *a, td_entry scope, const td_entry *list, size_t nlist, int walk)
{
	memset(x, 0, sizeof *x);
	x->a = a;
	if (!list && scope >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no entry %u", scope);
	int err = (walk & AN_NO_WORDS) ? td_data_check_sums(a) : td_data_check(a);
	if (err)
		return err;
	if ((!(walk & AN_NO_WORDS) && !td_words(a)) || ((!(walk & AN_NO_WORDS) || a->meta.nlongwords) && !td_other(a)))
		return TD_ECORRUPT;
	x->W = a->W;
	x->T = a->T;
	x->R = a->R;
	err = list ? add_list(x, list, nlist) : add_files(x, scope, 0);
	if (err)
		return err;
	uint64_t roots = 0;
	for (size_t i = 0; i < x->nfiles; i++)
		roots += td_pack_get(&a->e_root, x->files[i] + 1) - td_pack_get(&a->e_root, x->files[i]);
	/* The walks read rules at random, often: decode them whole once the
	 * scope is large; root symbols are read in order, a tile at a time
	 * (the read tables of td_flat_build would cost more than they save). */
	if ((walk & 1) && roots >= a->meta.nroot / 16)
		td_syms_build_part(a, 1, 0);
	if (a->meta.nlongwords) {
		uint64_t S = x->T - 2 * x->W;
		x->piece = calloc(S ? S : 1, 1);
		x->rpiece = calloc(x->R ? x->R : 1, 1);
		if (!x->piece || !x->rpiece)
			return TD_ENOMEM;
		for (uint64_t s = 0; s < S; s++) {
			uint32_t len;
			int sp;
			const uint8_t *b = td_term_bytes(a, 2 * x->W + s, &len, &sp);
			if (!b)
				return td_fail(TD_ECORRUPT, "other token %llu out of bounds", (unsigned long long)s);
			x->piece[s] = len && td_word_char(b, len) != 0;
		}
	}
	return TD_OK;
}

static int is_piece(const an *x, uint64_t s)
{
	return x->piece && s >= 2 * x->W && s < x->T && x->piece[s - 2 * x->W];
}

static int rhs(const an *x, uint64_t r, uint64_t *start, uint32_t *len)
{
	*start = 0;
	*len = 0;
	if (td_rule_rhs(x->a, r, start, len))
		return td_fail(TD_ECORRUPT, "rule table broken");
	return TD_OK;
}

/* Whether symbol s expands to a piece of a long word (1), not (0), or <0. */
static int sym_piece(an *x, uint64_t s, unsigned depth)
{
	if (!x->piece)
		return 0;
	if (s < x->T)
		return is_piece(x, s);
	if (s >= x->T + x->R || depth > TD_MAXDEPTH)
		return td_fail(TD_ECORRUPT, "symbol out of range or rules nest too deep");
	uint64_t r = s - x->T;
	if (x->rpiece[r])
		return x->rpiece[r] == 2;
	uint64_t start;
	uint32_t len;
	int v = rhs(x, r, &start, &len), p = 0;
	for (uint32_t i = 0; !v && i < len && !p; i++)
		p = v = sym_piece(x, td_rule_sym(x->a, start + i), depth + 1);
	if (v < 0)
		return v;
	x->rpiece[r] = p ? 2 : 1;
	return p;
}

static int root_range(const an *x, td_entry e, uint64_t *rs, uint64_t *re)
{
	*rs = td_pack_get(&x->a->e_root, e);
	*re = td_pack_get(&x->a->e_root, e + 1);
	if (*rs > *re || *re > x->a->meta.nroot)
		return td_fail(TD_ECORRUPT, "entry %u: root range out of bounds", e);
	return TD_OK;
}

#define QCHUNK 256u

/* Whether file e holds a word longer than TD_MAXTOK (1), not (0), or <0. */
static int file_long(an *x, td_entry e)
{
	if (!x->piece)
		return 0;
	uint64_t rs, re, sym[QCHUNK];
	int v = root_range(x, e, &rs, &re);
	for (uint64_t i = rs; !v && i < re;) {
		uint64_t k = re - i < QCHUNK ? re - i : QCHUNK;
		td_root_range(x->a, i, k, sym);
		for (uint64_t j = 0; j < k && !v; j++)
			v = sym_piece(x, sym[j], 0);
		i += k;
	}
	return v;
}

/* ---------- long words ---------- */

static uint64_t longw_hash(const uint8_t *w, size_t len)
{
	uint64_t h = 0xcbf29ce484222325u; /* FNV-1a */
	for (size_t i = 0; i < len; i++)
		h = (h ^ w[i]) * 0x100000001b3u;
	return h;
}

static int64_t longw_find(const td_longw *l, const uint8_t *w, size_t len)
{
	if (!l->slot)
		return -1;
	for (uint64_t h = longw_hash(w, len) & l->hmask;; h = (h + 1) & l->hmask) {
		uint64_t v = l->slot[h];
		if (!v)
			return -1;
		if (l->len[v - 1] == len && !memcmp(l->w[v - 1], w, len))
			return (int64_t)(v - 1);
	}
}

/* Room in the hash table for one more word. */
static int longw_rehash(td_longw *l)
{
	if (l->slot && (l->n + 1) * 2 <= l->hmask + 1)
		return TD_OK;
	size_t cap = l->slot ? 2 * (l->hmask + 1) : 64;
	uint64_t *slot = calloc(cap, sizeof *slot);
	if (!slot)
		return TD_ENOMEM;
	for (size_t i = 0; i < l->n; i++) {
		uint64_t h = longw_hash((const uint8_t *)l->w[i], l->len[i]) & (cap - 1);
		while (slot[h])
			h = (h + 1) & (cap - 1);
		slot[h] = i + 1;
	}
	free(l->slot);
	l->slot = slot;
	l->hmask = cap - 1;
	return TD_OK;
}

/* Index of long word w (added with count 0 when new), or <0. */
static int64_t longw_add(td_longw *l, const uint8_t *w, size_t len)
{
	int64_t i = longw_find(l, w, len);
	if (i >= 0)
		return i;
	if (longw_rehash(l))
		return TD_ENOMEM;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		char **nw = realloc(l->w, cap * sizeof *nw);
		if (nw)
			l->w = nw;
		size_t *nl = realloc(l->len, cap * sizeof *nl);
		if (nl)
			l->len = nl;
		uint64_t *nc = realloc(l->count, cap * sizeof *nc);
		if (nc)
			l->count = nc;
		if (!nw || !nl || !nc)
			return TD_ENOMEM;
		l->cap = cap;
	}
	char *c = malloc(len ? len : 1);
	if (!c)
		return TD_ENOMEM;
	memcpy(c, w, len);
	l->w[l->n] = c;
	l->len[l->n] = len;
	l->count[l->n] = 0;
	uint64_t h = longw_hash(w, len) & l->hmask;
	while (l->slot[h])
		h = (h + 1) & l->hmask;
	l->slot[h] = l->n + 1;
	return (int64_t)l->n++;
}

int64_t td_counts_extra(td_counts *c, const uint8_t *w, size_t len)
{
	return longw_add(&c->lw, w, len);
}

static void longw_free(td_longw *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->w[i]);
	free(l->w);
	free(l->len);
	free(l->count);
	free(l->slot);
	memset(l, 0, sizeof *l);
}

static int longw_text_fn(void *ctx, const uint8_t *w, size_t len, uint64_t off)
{
	(void)off;
	if (len <= TD_MAXTOK)
		return TD_OK;
	int64_t i = longw_add(ctx, w, len);
	if (i < 0)
		return (int)i;
	((td_longw *)ctx)->count[i]++;
	return TD_OK;
}

/* Bytes of word item v: a word id (< W) or long word W + i. */
static const char *item_bytes(const td_archive *a, const td_longw *l, uint64_t v, size_t *len)
{
	if (v < a->W)
		return td_word_at(a, v, len);
	*len = l->len[v - a->W];
	return l->w[v - a->W];
}

static int bytes_cmp(const char *p, size_t pl, const char *q, size_t ql)
{
	int c = memcmp(p, q, pl < ql ? pl : ql);
	return c ? c : (pl > ql) - (pl < ql);
}

/* Byte order of two word items (ids are in byte order already). */
static int item_cmp(const td_archive *a, const td_longw *l, uint64_t u, uint64_t v)
{
	if (u < a->W && v < a->W)
		return (u > v) - (u < v);
	size_t ul, vl;
	const char *p = item_bytes(a, l, u, &ul), *q = item_bytes(a, l, v, &vl);
	return bytes_cmp(p, ul, q, vl);
}

/* ---------- reachable rules, post-order ---------- */

/* The rules reachable from a set of root symbols, children before
 * parents, each with a slot (its place in `order`). */
typedef struct rset {
	uint32_t *slot;    /* R: 0 unseen, IN_PROGRESS, else place + 1 */
	uint32_t *order;
	uint64_t n, cap;
	int (*done)(void *ctx, uint64_t r); /* or NULL: called as each rule gets its slot */
	void *ctx;
} rset;
#define IN_PROGRESS UINT32_MAX

static int rset_init(rset *s, uint64_t R)
{
	memset(s, 0, sizeof *s);
	s->slot = calloc(R ? R : 1, sizeof *s->slot);
	return s->slot ? TD_OK : TD_ENOMEM;
}

static void rset_free(rset *s)
{
	free(s->slot);
	free(s->order);
}

static int rset_visit(const an *x, rset *s, uint64_t r, unsigned depth)
{
	if (s->slot[r] == IN_PROGRESS || depth > TD_MAXDEPTH)
		return td_fail(TD_ECORRUPT, "rules nest too deep or in a cycle");
	s->slot[r] = IN_PROGRESS;
	uint64_t start;
	uint32_t len;
	int err = rhs(x, r, &start, &len);
	for (uint32_t i = 0; !err && i < len; i++) {
		uint64_t c = td_rule_sym(x->a, start + i);
		if (c >= x->T + x->R)
			return td_fail(TD_ECORRUPT, "symbol out of range");
		if (c >= x->T && s->slot[c - x->T] == IN_PROGRESS)
			return td_fail(TD_ECORRUPT, "rules in a cycle");
		if (c >= x->T && !s->slot[c - x->T])
			err = rset_visit(x, s, c - x->T, depth + 1);
	}
	if (err)
		return err;
	if (s->n == s->cap) {
		uint64_t cap = s->cap ? 2 * s->cap : 1024;
		uint32_t *o = realloc(s->order, cap * sizeof *o);
		if (!o)
			return TD_ENOMEM;
		s->order = o;
		s->cap = cap;
	}
	s->order[s->n++] = (uint32_t)r;
	s->slot[r] = (uint32_t)s->n;
	return s->done ? s->done(s->ctx, r) : TD_OK;
}

/* Visit the rule symbol s (a no-op for terminals). */
static int rset_add(const an *x, rset *s, uint64_t sym)
{
	if (sym >= x->T + x->R)
		return td_fail(TD_ECORRUPT, "symbol out of range");
	if (sym < x->T || s->slot[sym - x->T])
		return TD_OK;
	return rset_visit(x, s, sym - x->T, 0);
}

/* ---------- word counts of a scope ---------- */

int td_counts_add(td_counts *c, uint64_t w, uint64_t n)
{
	if (!c->cnt[w] && !c->dense) {
		if (c->ntouched == c->cap) {
			uint64_t cap = c->cap ? 2 * c->cap : 1024;
			uint32_t *t = realloc(c->touched, cap * sizeof *t);
			if (!t)
				return TD_ENOMEM;
			c->touched = t;
			c->cap = cap;
		}
		c->touched[c->ntouched++] = (uint32_t)w;
	}
	c->cnt[w] += n;
	return TD_OK;
}

void td_counts_free(td_counts *c)
{
	free(c->cnt);
	free(c->touched);
	longw_free(&c->lw);
	memset(c, 0, sizeof *c);
}

int td_scope_counts(const td_archive *a, td_entry scope, td_counts *c)
{
	return td_list_counts(a, scope, NULL, 0, c);
}

int td_list_counts(const td_archive *a, td_entry scope, const td_entry *list, size_t nlist, td_counts *c)
{
	memset(c, 0, sizeof *c);
	if (td_sharded(a))
		return td_fail(TD_EINVAL, "word counts by id of a format 5 archive: ask its shards");
	an x;
	rset s = { 0 };
	uint64_t *freq = NULL;
	int err = an_init_list(&x, a, scope, list, nlist, list || scope != TD_ROOT);
	if (err)
		goto out;
	c->cnt = calloc(x.W ? x.W : 1, sizeof *c->cnt);
	if (!c->cnt) {
		err = TD_ENOMEM;
		goto out;
	}
	if (scope == TD_ROOT && !list) {
		/* the corpus: WORD_FREQ */
		const td_pack *wf = td_word_freq(a);
		if (!wf) {
			err = TD_ECORRUPT;
			goto out;
		}
		c->dense = 1;
		for (uint64_t w = 0; w < x.W; w++)
			c->cnt[w] = td_pack_get(wf, w);
	} else {
		/* rule weights top-down from the scope's root symbols, each
		 * rule's own words weighted by them */
		if ((err = rset_init(&s, x.R)))
			goto out;
		freq = calloc(x.R ? x.R : 1, sizeof *freq);
		if (!freq) {
			err = TD_ENOMEM;
			goto out;
		}
		uint64_t sym[QCHUNK];
		for (size_t f = 0; f < x.nfiles && !err; f++) {
			uint64_t rs, re;
			err = root_range(&x, x.files[f], &rs, &re);
			for (uint64_t i = rs; !err && i < re;) {
				uint64_t k = re - i < QCHUNK ? re - i : QCHUNK;
				td_root_range(a, i, k, sym);
				for (uint64_t j = 0; j < k && !err; j++) {
					if (sym[j] < 2 * x.W)
						err = td_counts_add(c, sym[j] >> 1, 1);
					else if (sym[j] >= x.T && !(err = rset_add(&x, &s, sym[j])))
						freq[sym[j] - x.T]++;
				}
				i += k;
			}
		}
		for (uint64_t i = s.n; !err && i-- > 0;) {
			uint64_t r = s.order[i], f = freq[r], start;
			uint32_t len;
			if ((err = rhs(&x, r, &start, &len)))
				break;
			for (uint32_t j = 0; j < len && !err; j++) {
				uint64_t y = td_rule_sym(a, start + j);
				if (y < 2 * x.W)
					err = td_counts_add(c, y >> 1, f);
				else if (y >= x.T)
					freq[y - x.T] += f;
			}
		}
	}
	/* words stored as pieces: from the text of the files that hold them */
	for (size_t f = 0; f < x.nfiles && !err && x.piece; f++) {
		int v = file_long(&x, x.files[f]);
		if (v < 0)
			err = v;
		else if (v)
			err = td_text_words(a, x.files[f], longw_text_fn, &c->lw);
	}
out:
	free(freq);
	rset_free(&s);
	an_free(&x);
	return err;
}

/* ---------- top words, term vector ---------- */

/* The best `cap` of a stream of items (uint64 handles) under a ranking
 * (rank(u, v) < 0: u comes first): a heap with the worst kept item on
 * top, sorted at the end. */
typedef int (*rank_fn)(uint64_t u, uint64_t v, void *ctx);

typedef struct topk {
	uint64_t *h;
	size_t n, cap;
	rank_fn rank;
	void *ctx;
} topk;

static int topk_init(topk *t, size_t cap, rank_fn rank, void *ctx)
{
	t->h = malloc((cap ? cap : 1) * sizeof *t->h);
	t->n = 0;
	t->cap = cap;
	t->rank = rank;
	t->ctx = ctx;
	return t->h ? TD_OK : TD_ENOMEM;
}

static void topk_swap(topk *t, size_t i, size_t j)
{
	uint64_t x = t->h[i];
	t->h[i] = t->h[j];
	t->h[j] = x;
}

static void topk_offer(topk *t, uint64_t v)
{
	if (t->n < t->cap) {
		size_t i = t->n++;
		t->h[i] = v;
		while (i && t->rank(t->h[i], t->h[(i - 1) / 2], t->ctx) > 0) {
			topk_swap(t, i, (i - 1) / 2);
			i = (i - 1) / 2;
		}
		return;
	}
	if (!t->cap || t->rank(v, t->h[0], t->ctx) >= 0)
		return;
	t->h[0] = v;
	for (size_t i = 0;;) {
		size_t l = 2 * i + 1, m = i;
		if (l < t->n && t->rank(t->h[l], t->h[m], t->ctx) > 0)
			m = l;
		if (l + 1 < t->n && t->rank(t->h[l + 1], t->h[m], t->ctx) > 0)
			m = l + 1;
		if (m == i)
			return;
		topk_swap(t, i, m);
		i = m;
	}
}

static int topk_cmp(const void *p, const void *q, void *ctx)
{
	const topk *t = ctx;
	return t->rank(*(const uint64_t *)p, *(const uint64_t *)q, t->ctx);
}

static void topk_sort(topk *t)
{
	if (t->n > 1)
		qsort_r(t->h, t->n, sizeof *t->h, topk_cmp, t);
}

typedef struct wrank_ctx {
	const td_archive *a;
	const td_counts *c;
} wrank_ctx;

static uint64_t item_count(const wrank_ctx *w, uint64_t v)
{
	return v < w->a->W ? w->c->cnt[v] : w->c->lw.count[v - w->a->W];
}

/* Words: count descending, then bytes. */
static int wrank(uint64_t u, uint64_t v, void *ctx)
{
	const wrank_ctx *w = ctx;
	uint64_t cu = item_count(w, u), cv = item_count(w, v);
	if (cu != cv)
		return cu > cv ? -1 : 1;
	return item_cmp(w->a, &w->c->lw, u, v);
}

int td_top_words(const td_archive *a, td_entry scope, uint64_t n, td_word_fn fn, void *ctx)
{
	if (td_sharded(a)) {
		int used = 0, err = scope == TD_ROOT ? td_atab_top(a, n, fn, ctx, &used) : TD_OK;
		return used || err ? err : td_shard_top_words(a, scope, n, fn, ctx);
	}
	td_counts c;
	int err = td_scope_counts(a, scope, &c);
	if (err) {
		td_counts_free(&c);
		return err;
	}
	return td_counts_top(a, &c, n, fn, ctx);
}

int td_counts_top(const td_archive *a, td_counts *cp, uint64_t n, td_word_fn fn, void *ctx)
{
	td_counts c = *cp;
	memset(cp, 0, sizeof *cp);
	topk t = { 0 };
	int err = TD_OK;
	uint64_t nt = c.dense ? a->W : c.ntouched, total = nt + c.lw.n;
	wrank_ctx w = { a, &c };
	if (!err)
		err = topk_init(&t, n && n < total ? (size_t)n : (size_t)total, wrank, &w);
	for (uint64_t i = 0; !err && i < total; i++) {
		uint64_t v = i < nt ? (c.dense ? i : c.touched[i]) : a->W + (i - nt);
		if (item_count(&w, v))
			topk_offer(&t, v);
	}
	if (!err)
		topk_sort(&t);
	for (size_t i = 0; !err && i < t.n; i++) {
		size_t len;
		const char *wb = item_bytes(a, &c.lw, t.h[i], &len);
		err = fn(ctx, wb, len, item_count(&w, t.h[i]));
	}
	free(t.h);
	td_counts_free(&c);
	return err;
}

static int u32_cmp(const void *p, const void *q)
{
	uint32_t u = *(const uint32_t *)p, v = *(const uint32_t *)q;
	return (u > v) - (u < v);
}

static int longw_cmp_idx(const void *p, const void *q, void *ctx)
{
	const td_longw *l = ctx;
	size_t i = *(const size_t *)p, j = *(const size_t *)q;
	return bytes_cmp(l->w[i], l->len[i], l->w[j], l->len[j]);
}

int td_term_vector(const td_archive *a, td_entry scope, td_word_fn fn, void *ctx)
{
	uint64_t skipped;
	return td_term_vector_from(a, scope, 0, fn, ctx, &skipped);
}

typedef struct vskip {
	td_word_fn fn;
	void *ctx;
	uint64_t from, *seen;
} vskip;

static int vskip_fn(void *ctx, const char *word, size_t len, uint64_t count)
{
	vskip *s = ctx;
	return (*s->seen)++ < s->from ? TD_OK : s->fn(s->ctx, word, len, count);
}

int td_term_vector_from(const td_archive *a, td_entry scope, uint64_t from, td_word_fn fn, void *ctx,
			uint64_t *skipped)
{
	*skipped = 0;
	if (td_sharded(a) && scope == TD_ROOT) {
		int used = 0, err = td_vtab_vector(a, from, fn, ctx, &used, skipped);
		if (used || err)
			return err;
	}
	/* computed: the words before `from` dropped as they come */
	uint64_t seen = 0;
	vskip s = { fn, ctx, from, &seen };
	if (from) {
		fn = vskip_fn;
		ctx = &s;
	}
	int err;
	if (td_sharded(a)) {
		err = td_shard_term_vector(a, scope, fn, ctx);
	} else {
		td_counts c;
		if ((err = td_scope_counts(a, scope, &c)))
			td_counts_free(&c);
		else
			err = td_counts_vector(a, &c, fn, ctx);
	}
	*skipped = seen < from ? seen : from;
	return err;
}

int td_counts_vector(const td_archive *a, td_counts *cp, td_word_fn fn, void *ctx)
{
	td_counts c = *cp;
	memset(cp, 0, sizeof *cp);
	int err = TD_OK;
	size_t *li = NULL;
	li = malloc((c.lw.n ? c.lw.n : 1) * sizeof *li);
	if (!li) {
		err = TD_ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < c.lw.n; i++)
		li[i] = i;
	if (c.lw.n > 1)
		qsort_r(li, c.lw.n, sizeof *li, longw_cmp_idx, &c.lw);
	/* ids in order: the touched ones sorted, or every id when many are */
	int scan = c.dense || c.ntouched > a->W / 8;
	if (!scan && c.ntouched > 1)
		qsort(c.touched, c.ntouched, sizeof *c.touched, u32_cmp);
	uint64_t nid = scan ? a->W : c.ntouched;
	size_t l = 0;
	for (uint64_t i = 0; i <= nid && !err; i++) {
		uint64_t w = 0;
		size_t wl = 0;
		const char *wb = NULL;
		if (i < nid) {
			w = scan ? i : c.touched[i];
			if (!c.cnt[w])
				continue;
			wb = td_word_at(a, w, &wl);
		}
		/* long words that sort before this one (all of them at the end) */
		while (l < c.lw.n && !err &&
		       (i == nid || bytes_cmp(c.lw.w[li[l]], c.lw.len[li[l]], wb, wl) < 0)) {
			err = fn(ctx, c.lw.w[li[l]], c.lw.len[li[l]], c.lw.count[li[l]]);
			l++;
		}
		if (i < nid && !err)
			err = fn(ctx, wb, wl, c.cnt[w]);
	}
out:
	free(li);
	td_counts_free(&c);
	return err;
}

/* ---------- sequences: phrases and n-grams ---------- */

unsigned td_phrase_words(const char *p, size_t len)
{
	unsigned n = 0;
	size_t i = 0;
	if (!len)
		return 0;
	while (i <= len) {
		size_t j = i;
		while (j < len && p[j] != ' ')
			j++;
		if (!td_is_word(p + i, j - i) || ++n > TD_PHRASE_MAX)
			return 0;
		i = j + 1;
	}
	return n;
}

/* A word of a window: its item, and where it came from (for offsets):
 * the symbol it lies in, that symbol's byte offset, and the word's index
 * within the symbol's words. */
typedef struct wslot {
	uint32_t id;
	uint64_t sym, off, k;
} wslot;

/* Per reachable rule (by slot): words, first and last L words. */
typedef struct seqinfo {
	unsigned m, L;
	uint64_t cap;   /* slots allocated */
	uint64_t *nw;   /* words of the rule (pieces count one each) */
	uint32_t *head; /* L per slot */
	uint32_t *tail; /* L per slot */
	uint64_t *val;  /* phrase: occurrences; n-grams: weight */
} seqinfo;

/* What a scan does with each m-word run it meets: `first` is the run's
 * first word. */
typedef struct scanner scanner;
struct scanner {
	const an *x;
	rset *s;
	seqinfo *si;
	unsigned n;                /* words in the window, <= L */
	wslot win[TD_PHRASE_MAX];
	int (*emit)(scanner *sc, const uint32_t *gram, const wslot *first);
	uint64_t weight;           /* of the sequence being scanned */
	int offsets;               /* track byte offsets (searches) */
	uint64_t below;            /* sum of val over the rules the scan met */
	void *ctx;
};

static void win_push(scanner *sc, const wslot *w)
{
	unsigned L = sc->si->L;
	if (!L)
		return;
	if (sc->n == L) {
		memmove(sc->win, sc->win + 1, (L - 1) * sizeof *sc->win);
		sc->n--;
	}
	sc->win[sc->n++] = *w;
}

/* Feed symbol y (at byte offset off of the sequence) to the scan. */
static int scan_sym(scanner *sc, uint64_t y, uint64_t off)
{
	const an *x = sc->x;
	unsigned m = sc->si->m, L = sc->si->L;
	uint32_t gram[TD_PHRASE_MAX];
	if (y < 2 * x->W || is_piece(x, y)) {
		wslot w = { y < 2 * x->W ? (uint32_t)(y >> 1) : BREAK, y, off, 0 };
		if (sc->n == L) {
			for (unsigned i = 0; i < L; i++)
				gram[i] = sc->win[i].id;
			gram[L] = w.id;
			int err = sc->emit(sc, gram, L ? &sc->win[0] : &w);
			if (err)
				return err;
		}
		win_push(sc, &w);
		return TD_OK;
	}
	if (y < x->T || !L)
		return TD_OK;
	uint64_t slot = sc->s->slot[y - x->T] - 1;
	uint64_t N = sc->si->nw[slot];
	const uint32_t *H = sc->si->head + slot * L, *Tl = sc->si->tail + slot * L;
	unsigned hn = N < L ? (unsigned)N : L;
	/* runs that start before y and end at its i-th word */
	for (unsigned i = 1; i <= hn; i++) {
		if (sc->n < m - i)
			continue;
		unsigned b = sc->n - (m - i);
		for (unsigned t = 0; t < m - i; t++)
			gram[t] = sc->win[b + t].id;
		for (unsigned t = 0; t < i; t++)
			gram[m - i + t] = H[t];
		int err = sc->emit(sc, gram, &sc->win[b]);
		if (err)
			return err;
	}
	if (N >= L) {
		sc->n = 0;
		for (unsigned t = 0; t < L; t++) {
			wslot w = { Tl[t], y, off, N - L + t };
			sc->win[sc->n++] = w;
		}
	} else {
		for (unsigned t = 0; t < hn; t++) {
			wslot w = { H[t], y, off, t };
			win_push(sc, &w);
		}
	}
	return TD_OK;
}

/* Words of symbol y (a rule must be in the set). */
static uint64_t sym_nw(const scanner *sc, uint64_t y)
{
	const an *x = sc->x;
	if (y < 2 * x->W || is_piece(x, y))
		return 1;
	if (y < x->T)
		return 0;
	return sc->si->nw[sc->s->slot[y - x->T] - 1];
}

/* Scan rule r's right side; with `info`, also fill its nw/head/tail
 * (its children's are filled). */
static int scan_rule(scanner *sc, uint64_t r, int info)
{
	const an *x = sc->x;
	uint64_t start, slot = sc->s->slot[r] - 1;
	uint32_t len;
	unsigned L = sc->si->L;
	int err = rhs(x, r, &start, &len);
	uint64_t nw = 0;
	unsigned hn = 0;
	uint32_t *H = sc->si->head + slot * L;
	sc->n = 0;
	sc->below = 0;
	for (uint32_t j = 0; j < len && !err; j++) {
		uint64_t y = td_rule_sym(x->a, start + j);
		if (y >= x->T + x->R)
			return td_fail(TD_ECORRUPT, "symbol out of range");
		if (y >= x->T)
			sc->below += sc->si->val[sc->s->slot[y - x->T] - 1];
		err = scan_sym(sc, y, 0);
		if (!info)
			continue;
		uint64_t yn = sym_nw(sc, y);
		if (hn < L && yn) {
			if (y < x->T)
				H[hn++] = y < 2 * x->W ? (uint32_t)(y >> 1) : BREAK;
			else {
				const uint32_t *CH = sc->si->head + (sc->s->slot[y - x->T] - 1) * L;
				for (uint64_t t = 0; t < yn && hn < L; t++)
					H[hn++] = CH[t];
			}
		}
		nw += yn;
	}
	if (info && !err) {
		sc->si->nw[slot] = nw;
		for (unsigned t = 0; t < sc->n; t++)
			sc->si->tail[slot * L + t] = sc->win[t].id;
	}
	return err;
}

static int seqinfo_init(seqinfo *si, unsigned m, uint64_t n)
{
	memset(si, 0, sizeof *si);
	si->m = m;
	si->L = m - 1;
	n = n ? n : 1;
	si->nw = calloc(n, sizeof *si->nw);
	si->val = calloc(n, sizeof *si->val);
	si->head = calloc(n * (si->L ? si->L : 1), sizeof *si->head);
	si->tail = calloc(n * (si->L ? si->L : 1), sizeof *si->tail);
	si->cap = n;
	return si->nw && si->val && si->head && si->tail ? TD_OK : TD_ENOMEM;
}

/* Room for n slots (contents of new slots undefined: scan_rule fills them). */
static int seqinfo_reserve(seqinfo *si, uint64_t n)
{
	if (n <= si->cap)
		return TD_OK;
	uint64_t cap = 2 * si->cap > n ? 2 * si->cap : n, l = si->L ? si->L : 1;
	uint64_t *nw = realloc(si->nw, cap * sizeof *nw);
	if (nw)
		si->nw = nw;
	uint64_t *val = realloc(si->val, cap * sizeof *val);
	if (val)
		si->val = val;
	uint32_t *h = realloc(si->head, cap * l * sizeof *h);
	if (h)
		si->head = h;
	uint32_t *t = realloc(si->tail, cap * l * sizeof *t);
	if (t)
		si->tail = t;
	if (!nw || !val || !h || !t)
		return TD_ENOMEM;
	si->cap = cap;
	return TD_OK;
}

static void seqinfo_free(seqinfo *si)
{
	free(si->nw);
	free(si->val);
	free(si->head);
	free(si->tail);
}

/* Feed file e's root symbols to the scan (window reset), with offsets. */
static int scan_file(scanner *sc, td_entry e)
{
	const an *x = sc->x;
	uint64_t rs, re, sym[QCHUNK], off = 0;
	int err = root_range(x, e, &rs, &re);
	sc->n = 0;
	sc->below = 0;
	for (uint64_t i = rs; !err && i < re;) {
		uint64_t k = re - i < QCHUNK ? re - i : QCHUNK;
		td_root_range(x->a, i, k, sym);
		for (uint64_t j = 0; j < k && !err; j++) {
			if (sym[j] >= x->T + x->R)
				return td_fail(TD_ECORRUPT, "entry %u: symbol out of range", e);
			if (sym[j] >= x->T && !sc->s->slot[sym[j] - x->T] && (err = rset_add(x, sc->s, sym[j])))
				break;
			if (sym[j] >= x->T)
				sc->below += sc->si->val[sc->s->slot[sym[j] - x->T] - 1];
			err = scan_sym(sc, sym[j], off);
			if (sc->offsets)
				off += td_sym_len(x->a, sym[j]);
		}
		i += k;
	}
	return err;
}

/* ---------- phrases ---------- */

typedef struct phrase {
	unsigned m;
	uint32_t id[TD_PHRASE_MAX];     /* word ids; BREAK for a long word */
	const char *w[TD_PHRASE_MAX];   /* the words' bytes */
	size_t len[TD_PHRASE_MAX];
	int has_long, absent;           /* a word longer than TD_MAXTOK; a word not in the archive */
	int no_words;                   /* ids from the postings: the dictionary not decoded */
} phrase;

/* The phrase's words (their bytes; no archive read). */
static int phrase_parse(const char *p, size_t len, phrase *ph)
{
	memset(ph, 0, sizeof *ph);
	ph->m = td_phrase_words(p, len);
	if (!ph->m)
		return td_fail(TD_ENOTWORD, "'%.*s' is not a word or a phrase of words separated by single spaces",
			       (int)(len > 64 ? 64 : len), p);
	size_t i = 0;
	for (unsigned k = 0; k < ph->m; k++) {
		size_t j = i;
		while (j < len && p[j] != ' ')
			j++;
		ph->w[k] = p + i;
		ph->len[k] = j - i;
		ph->id[k] = BREAK;
		if (j - i > TD_MAXTOK)
			ph->has_long = 1;
		i = j + 1;
	}
	return TD_OK;
}

/* The phrase's word ids in a (BREAK for a long word; ph->absent when a
 * word is not in its dictionary). With `bytes` 0 (a count, which reads
 * no word bytes) and stored postings, the ids come from the postings and
 * only the grammar's checksums are checked: the dictionary (a zstd frame,
 * rebuilt whole) is not decoded; ph->no_words is then set. */
static int phrase_ids(const td_archive *a, phrase *ph, int bytes)
{
	if (!bytes && ph->m > 1 && !ph->has_long && td_post_has(a)) {
		int err = td_data_check_sums(a);
		for (unsigned k = 0; k < ph->m && !err; k++) {
			if (ph->len[k] > TD_MAXTOK)
				continue;
			int64_t w;
			err = td_post_word_id(a, ph->w[k], ph->len[k], &w);
			if (w < 0)
				ph->absent = 1;
			ph->id[k] = w < 0 ? BREAK : (uint32_t)w;
		}
		ph->no_words = !err;
		return err;
	}
	/* checked first, the checksums (and OTHER) go on a helper thread
	 * while this one decodes WORDS, where the words are looked up */
	int err = ph->m > 1 ? td_data_check(a) : TD_OK;
	for (unsigned k = 0; k < ph->m && !err; k++) {
		if (ph->len[k] > TD_MAXTOK)
			continue;
		int64_t w = td_find_word(a, ph->w[k], ph->len[k]);
		if (w == -2)
			return TD_ECORRUPT;
		if (w < 0)
			ph->absent = 1;
		ph->id[k] = w < 0 ? BREAK : (uint32_t)w;
	}
	return err;
}

/* ---------- phrase counts per file: a matcher over the word stream ----------
 *
 * A phrase of m words is matched on a file's stream of words by the
 * Knuth-Morris-Pratt automaton over word ids (state q: how many of the
 * phrase's first words end the stream so far). A rule is fed to it as a
 * whole: its first min(words, m-1) words one by one (the matches that end
 * there began before the rule), then its own occurrences (memoised), then
 * the state its words leave, which depends only on the rule when it has at
 * least m-1 words (the state's words all lie inside it). Each rule's
 * (occurrences, first words, end state) is computed once, on the rules the
 * scope reaches, by the same feed over its right side. */

typedef struct kmp {
	const an *x;
	unsigned m, L;            /* phrase words; L = m - 1 words kept per rule */
	uint32_t p[TD_PHRASE_MAX];
	uint8_t fail[TD_PHRASE_MAX + 1];
	uint32_t stride;          /* u32 per rule: count (2), state word (1), first words (L) */
	uint32_t *info;           /* R * stride, zeroed; state word 0: not computed */
	int err;                  /* this thread's (each thread has its own copy) */
} kmp;

/* State word of a computed rule: bit 31 set, words held (capped at L) in
 * bits 8..15, end state in bits 0..7; KMP_BUSY while the thread that
 * computed it first writes it. Threads share the infos: a rule's is
 * computed into a local copy (its children's first), then published by
 * the thread that claims the state word (compare-and-swap from 0), so a
 * reader that sees KMP_DONE (acquire) sees the whole info. Cycles in a
 * damaged grammar end at TD_MAXDEPTH. */
#define KMP_DONE 0x80000000u
#define KMP_BUSY 0x40000000u

static inline unsigned kmp_step(const kmp *k, unsigned q, uint32_t w, uint64_t *hits)
{
	while (q && k->p[q] != w)
		q = k->fail[q];
	if (k->p[q] == w && ++q == k->m) {
		++*hits;
		q = k->fail[q];
	}
	return q;
}

static void kmp_init(kmp *k, const an *x, const uint32_t *ids, unsigned m)
{
	memset(k, 0, sizeof *k);
	k->x = x;
	k->m = m;
	k->L = m - 1;
	memcpy(k->p, ids, m * sizeof *ids);
	/* fail[q]: the longest proper border of p[0..q) */
	for (unsigned q = 2, b = 0; q <= m; q++) {
		while (b && k->p[b] != k->p[q - 1])
			b = k->fail[b];
		if (k->p[b] == k->p[q - 1])
			b++;
		k->fail[q] = (uint8_t)b;
	}
	k->stride = 3 + k->L;
}

static const uint32_t *kmp_rule(kmp *k, uint64_t r, unsigned depth);

/* Feed symbol y to the automaton at *q: matches ending in y that began
 * before it (or, for a terminal, ending at it) and the occurrences inside
 * y go to *hits; y's first words are appended to head (while *nh < L). */
static inline void kmp_feed(kmp *k, uint64_t y, unsigned *q, uint64_t *hits, uint32_t *head, unsigned *nh,
			    unsigned depth)
{
	const an *x = k->x;
	if (y < 2 * x->W || is_piece(x, y)) {
		uint32_t w = y < 2 * x->W ? (uint32_t)(y >> 1) : BREAK;
		*q = kmp_step(k, *q, w, hits);
		if (head && *nh < k->L)
			head[(*nh)++] = w;
		return;
	}
	if (y < x->T)
		return;
	const uint32_t *ri = kmp_rule(k, y - x->T, depth + 1);
	if (!ri)
		return;
	uint64_t c;
	memcpy(&c, ri, sizeof c);
	*hits += c;
	unsigned n = ri[2] >> 8 & 0xff;
	const uint32_t *H = ri + 3;
	if (!n)
		return;
	for (unsigned t = 0; t < n; t++)
		*q = kmp_step(k, *q, H[t], hits);
	if (n == k->L && k->L)
		*q = ri[2] & 0xff;
	for (unsigned t = 0; head && t < n && *nh < k->L; t++)
		head[(*nh)++] = H[t];
}

/* Rule r's info (computed on first use), or NULL with k->err set. */
static const uint32_t *kmp_rule(kmp *k, uint64_t r, unsigned depth)
{
	uint32_t *ri = k->info + r * k->stride;
	if (__atomic_load_n(&ri[2], __ATOMIC_ACQUIRE) & KMP_DONE)
		return ri;
	if (depth > TD_MAXDEPTH) {
		k->err = td_fail(TD_ECORRUPT, "rules nest too deep or in a cycle");
		return NULL;
	}
	uint64_t start;
	uint32_t len;
	if (rhs(k->x, r, &start, &len)) {
		k->err = TD_ECORRUPT;
		return NULL;
	}
	unsigned q = 0, nh = 0;
	uint64_t hits = 0;
	uint32_t head[TD_PHRASE_MAX];
	const uint64_t TR = k->x->T + k->x->R;
	for (uint32_t j = 0; j < len && !k->err; j++) {
		uint64_t y = td_rule_sym(k->x->a, start + j);
		if (y >= TR) {
			k->err = td_fail(TD_ECORRUPT, "symbol out of range");
			return NULL;
		}
		kmp_feed(k, y, &q, &hits, head, &nh, depth);
	}
	if (k->err)
		return NULL;
	uint32_t st = 0;
	if (__atomic_compare_exchange_n(&ri[2], &st, KMP_BUSY, 0, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)) {
		memcpy(ri, &hits, sizeof hits);
		memcpy(ri + 3, head, nh * sizeof *head);
		__atomic_store_n(&ri[2], KMP_DONE | nh << 8 | q, __ATOMIC_RELEASE);
	} else {
		while (!(__atomic_load_n(&ri[2], __ATOMIC_ACQUIRE) & KMP_DONE))
			td_par_relax();
	}
	return ri;
}

/* Decode the root symbols whole (td_syms_build_part) when the scope's
 * files (those walked: `roots` symbols) hold a quarter of them or more:
 * cheaper than tile by tile. */
static void scope_roots_flat(const an *x, uint64_t roots)
{
	if (roots >= x->a->meta.nroot / 4)
		td_syms_build_part(x->a, 0, 1);
}

/* Root symbols ahead whose rule info is prefetched. */
#define KMP_AHEAD 16u
/* Root symbols a thread takes at least; a scope's root symbols go in
 * about PAR_CHUNKS chunks a thread, taken in turn. */
#define PAR_GRAIN (UINT64_C(1) << 16)
#define PAR_CHUNKS 8u

/* A scope's files as one sequence of root symbols cut in chunks for
 * threads: file f holds positions [pre[f], pre[f + 1]) (none when
 * skipped). */
typedef struct rsplit {
	const an *x;
	uint64_t *pre;  /* nfiles + 1 */
	uint64_t n;     /* root symbols */
	size_t nchunks;
	unsigned nthreads;
} rsplit;

static int rsplit_init(rsplit *sp, const an *x, const uint8_t *skip)
{
	memset(sp, 0, sizeof *sp);
	sp->x = x;
	if (!(sp->pre = malloc((x->nfiles + 1) * sizeof *sp->pre)))
		return TD_ENOMEM;
	sp->pre[0] = 0;
	for (size_t f = 0; f < x->nfiles; f++) {
		uint64_t rs, re;
		int err = root_range(x, x->files[f], &rs, &re);
		if (err)
			return err;
		sp->pre[f + 1] = sp->pre[f] + (skip && skip[f] ? 0 : re - rs);
	}
	sp->n = sp->pre[x->nfiles];
	sp->nthreads = td_par_threads(sp->n, PAR_GRAIN);
	sp->nchunks = sp->nthreads > 1 ? (size_t)sp->nthreads * PAR_CHUNKS : 1;
	if (sp->nchunks > sp->n)
		sp->nchunks = sp->n ? (size_t)sp->n : 1;
	return TD_OK;
}

/* The first file holding position pos of chunk c (pos = the chunk's start). */
static size_t rsplit_first(const rsplit *sp, size_t c, uint64_t *pos)
{
	*pos = sp->n * c / sp->nchunks;
	size_t lo = 0, hi = sp->x->nfiles;
	while (lo < hi) { /* the last f with pre[f] <= pos */
		size_t mid = lo + (hi - lo + 1) / 2;
		if (sp->pre[mid] <= *pos)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* One thread's chunks of a phrase count. */
typedef struct pjob {
	const kmp *k;
	const rsplit *sp;
	uint64_t *counts;
	td_par_err err;
} pjob;

/* Feed the root symbols [i, e) of file f from state *q. */
static void kmp_roots(kmp *k, td_entry f, uint64_t i, uint64_t e, unsigned *q, uint64_t *hits)
{
	const an *x = k->x;
	const uint64_t TR = x->T + x->R;
	uint64_t sym[QCHUNK];
	while (i < e && !k->err) {
		if (td_cancel_requested()) {
			k->err = td_fail(TD_ECANCELED, "interrupted");
			break;
		}
		uint64_t n = e - i < QCHUNK ? e - i : QCHUNK;
		td_root_range(x->a, i, n, sym);
		/* the rules' infos are read at random: ask for them ahead */
		for (uint64_t j = 0; j < n && j < KMP_AHEAD; j++)
			if (sym[j] >= x->T && sym[j] < TR)
				__builtin_prefetch(k->info + (sym[j] - x->T) * k->stride);
		for (uint64_t j = 0; j < n; j++) {
			if (j + KMP_AHEAD < n && sym[j + KMP_AHEAD] >= x->T && sym[j + KMP_AHEAD] < TR)
				__builtin_prefetch(k->info + (sym[j + KMP_AHEAD] - x->T) * k->stride);
			if (sym[j] >= TR) {
				k->err = td_fail(TD_ECORRUPT, "entry %u: symbol out of range", f);
				break;
			}
			kmp_feed(k, sym[j], q, hits, NULL, NULL, 0);
		}
		i += n;
	}
}

/* A chunk that ends inside file f at root symbol i (< e, the file's end):
 * the matches that begin before i and end in its next L words. */
static void kmp_across(kmp *k, td_entry f, uint64_t i, uint64_t e, unsigned q, uint64_t *hits)
{
	const an *x = k->x;
	unsigned fed = 0;
	for (; i < e && fed < k->L && !k->err; i++) {
		uint64_t y = td_root_sym(x->a, i);
		if (y >= x->T + x->R) {
			k->err = td_fail(TD_ECORRUPT, "entry %u: symbol out of range", f);
			break;
		}
		if (y < 2 * x->W || is_piece(x, y)) {
			q = kmp_step(k, q, y < 2 * x->W ? (uint32_t)(y >> 1) : BREAK, hits);
			fed++;
		} else if (y >= x->T) {
			const uint32_t *ri = kmp_rule(k, y - x->T, 0);
			unsigned n = ri ? ri[2] >> 8 & 0xff : 0;
			for (unsigned t = 0; t < n && fed < k->L; t++, fed++)
				q = kmp_step(k, q, ri[3 + t], hits);
		}
	}
}

static void phrase_chunk(void *ctx, size_t c)
{
	pjob *j = ctx;
	const rsplit *sp = j->sp;
	const an *x = sp->x;
	kmp k = *j->k;
	uint64_t pos, end = sp->n * (c + 1) / sp->nchunks;
	for (size_t f = rsplit_first(sp, c, &pos); pos < end && f < x->nfiles && !k.err; f++) {
		if (sp->pre[f + 1] <= pos)
			continue;
		uint64_t rs = td_pack_get(&x->a->e_root, x->files[f]), hits = 0;
		uint64_t a = rs + (pos - sp->pre[f]), fe = rs + (sp->pre[f + 1] - sp->pre[f]);
		uint64_t b = end < sp->pre[f + 1] ? rs + (end - sp->pre[f]) : fe;
		unsigned q = 0;
		kmp_roots(&k, x->files[f], a, b, &q, &hits);
		if (b < fe)
			kmp_across(&k, x->files[f], b, fe, q, &hits);
		if (hits)
			__atomic_fetch_add(&j->counts[f], hits, __ATOMIC_RELAXED);
		pos = sp->pre[f + 1];
	}
	td_par_err_set(&j->err, k.err);
}

/* Occurrences of the phrase ids[0..m) (word ids; 1 <= m <= TD_PHRASE_MAX)
 * in each of x's files into counts[] (zeroed here; 0 for the files
 * skip[f] names, not walked): the files' root symbols in chunks over
 * threads (td_par_threads), each chunk from the automaton's start state
 * (the matches that begin in it) and on for L words past its end (those
 * that begin in it and end after). */
static int phrase_counts_fast(const an *x, const uint32_t *ids, unsigned m, const uint8_t *skip, uint64_t *counts)
{
	kmp k;
	rsplit sp;
	kmp_init(&k, x, ids, m);
	memset(counts, 0, x->nfiles * sizeof *counts);
	int err = rsplit_init(&sp, x, skip);
	/* a walk of a few files reaches few rules: their infos in 4 KiB
	 * pages, not 2 MiB ones zeroed whole */
	const size_t ib = (x->R ? x->R : 1) * k.stride * sizeof *k.info;
	const int few = skip && sp.n < x->a->meta.nroot / 16;
	if (!err && !(k.info = few ? td_big_alloc_sparse(ib) : td_big_alloc(ib)))
		err = TD_ENOMEM;
	if (!err) {
		if (sp.nthreads <= 1)
			scope_roots_flat(x, sp.n);
		pjob j = { .k = &k, .sp = &sp, .counts = counts };
		err = td_par_for(sp.nchunks, sp.nthreads, phrase_chunk, &j);
		if (!err)
			err = td_par_err_get(&j.err);
	}
	td_big_free(k.info, ib);
	free(sp.pre);
	if (err)
		memset(counts, 0, x->nfiles * sizeof *counts);
	return err;
}

/* ---------- phrase counts over most of a grammar: rule infos in one pass ----------
 *
 * The same automaton, but the phrase's words are classes (1..nd, every
 * other word and every piece 0) and each rule's info is one u32: its
 * first min(words, L) word classes, the state its words leave, and
 * whether it holds an occurrence (the count apart, read only then). The
 * infos of every rule are computed first, in rule id order: the right
 * sides are read in order, a child not computed yet is computed then
 * (recursively, at most TD_MAXDEPTH deep). The root symbols are then read
 * in order, a few tiles at a time into a small buffer, the scope's files
 * met in root order. */

#define PS_DONE 0x80000000u
#define PS_OCC 0x40000000u
#define PS_NH(v) ((v) >> 27 & 7u)
#define PS_END(v) ((v) >> 24 & 7u)
#define PS_HEAD(v, t) ((v) >> (4 * (t)) & 15u)
/* Phrases of at most 7 words (6 first words of 4 bits fit the info). */
#define PS_MMAX 7u

typedef struct pseq {
	const an *x;
	unsigned m, L, nd;
	uint32_t wid[TD_PHRASE_MAX];             /* class k + 1: word id wid[k] */
	uint8_t dfa[PS_MMAX][TD_PHRASE_MAX + 1]; /* next state, 0x80 set on a match */
	uint32_t *info;                          /* R, zeroed */
	uint64_t *occ;                           /* R: occurrences, where PS_OCC */
	const uint32_t *rsyms;                   /* the rule symbols decoded, or NULL */
	uint64_t nrsyms;                         /* entries of rsyms */
	uint8_t *tab;                            /* two words: T + R flags (P2_*), or NULL */
	int err;
} pseq;

static inline unsigned ps_class(const pseq *s, uint64_t y)
{
	uint32_t w = (uint32_t)(y >> 1);
	for (unsigned k = 0; k < s->nd; k++)
		if (s->wid[k] == w)
			return k + 1;
	return 0;
}

static void ps_init(pseq *s, const an *x, const uint32_t *ids, unsigned m)
{
	memset(s, 0, sizeof *s);
	s->x = x;
	s->m = m;
	s->L = m - 1;
	uint8_t p[TD_PHRASE_MAX], fail[TD_PHRASE_MAX + 1] = { 0 };
	for (unsigned k = 0; k < m; k++) {
		unsigned c = 0;
		for (unsigned j = 0; j < s->nd && !c; j++)
			if (s->wid[j] == ids[k])
				c = j + 1;
		if (!c) {
			s->wid[s->nd++] = ids[k];
			c = s->nd;
		}
		p[k] = (uint8_t)c;
	}
	for (unsigned q = 2, b = 0; q <= m; q++) {
		while (b && p[b] != p[q - 1])
			b = fail[b];
		if (p[b] == p[q - 1])
			b++;
		fail[q] = (uint8_t)b;
	}
	for (unsigned q = 0; q < m; q++)
		for (unsigned c = 0; c <= s->nd; c++) {
			unsigned r = q, hit = 0;
			while (r && p[r] != c)
				r = fail[r];
			if (p[r] == c && ++r == m) {
				hit = 1;
				r = fail[r];
			}
			s->dfa[q][c] = (uint8_t)(r | hit << 7);
		}
}

static uint32_t ps_rule(pseq *s, uint64_t r, unsigned depth);
static uint8_t p2_body(pseq *s, uint64_t r, uint64_t start, uint32_t len, unsigned depth);
#define P2_DONE 0x80u
/* How far ahead the rules' pass prefetches the info or flags of the
 * symbols it will read (their loads from a table of R u32 or T + R bytes
 * miss the cache). */
#define P2_AHEAD 64u

/* The info of the right side syms [start, start + len) of rule r. */
static uint32_t ps_body(pseq *s, uint64_t r, uint64_t start, uint32_t len, unsigned depth)
{
	const an *x = s->x;
	const uint64_t W2 = 2 * x->W, T = x->T, TR = x->T + x->R;
	const unsigned L = s->L;
	unsigned q = 0, nh = 0;
	uint32_t head = 0;
	uint64_t hits = 0;
	for (uint32_t j = 0; j < len; j++) {
		uint64_t y = s->rsyms ? s->rsyms[start + j] : td_rule_sym(x->a, start + j);
		unsigned c;
		if (s->rsyms && start + j + P2_AHEAD < s->nrsyms && s->rsyms[start + j + P2_AHEAD] - T < x->R)
			__builtin_prefetch(s->info + (s->rsyms[start + j + P2_AHEAD] - T));
		if (y < W2 || is_piece(x, y)) {
			c = y < W2 ? ps_class(s, y) : 0;
			unsigned v = s->dfa[q][c];
			hits += v >> 7;
			q = v & 0x7f;
			if (nh < L)
				head |= (uint32_t)c << (4 * nh++);
			continue;
		}
		if (y < T)
			continue;
		if (y >= TR) {
			s->err = td_fail(TD_ECORRUPT, "symbol out of range");
			return 0;
		}
		uint32_t ci = s->info[y - T];
		if (!(ci & PS_DONE) && !((ci = ps_rule(s, y - T, depth + 1)) & PS_DONE))
			return 0;
		if (ci & PS_OCC)
			hits += s->occ[y - T];
		unsigned cn = PS_NH(ci);
		for (unsigned t = 0; t < cn; t++) {
			c = PS_HEAD(ci, t);
			unsigned v = s->dfa[q][c];
			hits += v >> 7;
			q = v & 0x7f;
			if (nh < L)
				head |= (uint32_t)c << (4 * nh++);
		}
		if (cn == L)
			q = PS_END(ci);
	}
	uint32_t v = PS_DONE | (hits ? PS_OCC : 0) | (uint32_t)nh << 27 | (uint32_t)q << 24 | head;
	if (hits)
		s->occ[r] = hits;
	s->info[r] = v;
	return v;
}

/* Rule r's right side, for its info computed `depth` rules down: TD_OK,
 * or the error (also in s->err). */
static int ps_rhs(pseq *s, uint64_t r, unsigned depth, uint64_t *start, uint32_t *len)
{
	if (depth > TD_MAXDEPTH)
		return s->err = td_fail(TD_ECORRUPT, "rules nest too deep or in a cycle");
	return s->err = rhs(s->x, r, start, len);
}

/* Rule r's info, computed now (its children first); 0 with s->err set. */
static uint32_t ps_rule(pseq *s, uint64_t r, unsigned depth)
{
	uint64_t start = 0;
	uint32_t len = 0;
	return ps_rhs(s, r, depth, &start, &len) ? 0 : ps_body(s, r, start, len, depth);
}

/* Every rule's info, in id order (each group's right sides in order). */
static int ps_rules(pseq *s)
{
	const td_archive *a = s->x->a;
	for (uint64_t g = 0; g < a->ngroups && !s->err; g++) {
		const td_disk_group *gr = &a->groups[g];
		uint64_t end = g + 1 < a->ngroups ? a->groups[g + 1].first_rule : s->x->R;
		if (gr->first_rule > end || end > s->x->R)
			return td_fail(TD_ECORRUPT, "rule table broken");
		uint64_t start = gr->first_sym;
		if (s->tab) {
			for (uint64_t r = gr->first_rule; r < end && !s->err; r++, start += gr->len)
				if (!(s->tab[s->x->T + r] & P2_DONE))
					p2_body(s, r, start, gr->len, 0);
		} else {
			for (uint64_t r = gr->first_rule; r < end && !s->err; r++, start += gr->len)
				if (!(s->info[r] & PS_DONE))
					ps_body(s, r, start, gr->len, 0);
		}
	}
	return s->err;
}

/* Root symbols read in order: [lo, hi) decoded at buf, or the flat copy. */
#define PS_BLOCK 4096u
typedef struct rblock {
	const td_archive *a;
	uint64_t lo, hi;
	const uint32_t *p; /* symbol i (lo <= i < hi) at p[i - lo] */
	uint32_t buf[PS_BLOCK];
} rblock;

/* Make position i (< nroot) readable. */
static void rblock_at(rblock *b, uint64_t i)
{
	const td_archive *a = b->a;
	if (td_root_flat(a)) {
		b->lo = 0;
		b->hi = a->meta.nroot;
		b->p = a->f_root_syms;
		return;
	}
	if (a->root_syms.coded) {
		const td_scode *c = &a->root_syms.c;
		unsigned sh = c->tile_shift;
		uint64_t per = PS_BLOCK >> sh, t = i >> sh;
		t -= t % per;
		td_scode_decode_span(c, t, t + per, b->buf);
		b->lo = t << sh;
		b->hi = (t + per) << sh;
	} else {
		uint64_t tmp[QCHUNK];
		b->lo = i - i % QCHUNK;
		b->hi = b->lo + QCHUNK;
		if (b->hi > a->meta.nroot)
			b->hi = a->meta.nroot;
		td_syms_range(&a->root_syms, b->lo, b->hi - b->lo, tmp);
		for (uint64_t k = 0; k < b->hi - b->lo; k++)
			b->buf[k] = tmp[k] > UINT32_MAX ? UINT32_MAX : (uint32_t)tmp[k];
	}
	if (b->hi > a->meta.nroot)
		b->hi = a->meta.nroot;
	b->p = b->buf;
}

/* Make position i (< e) readable: the end of what can be read from it
 * without another rblock_at (at most e). */
static inline uint64_t rblock_span(rblock *b, uint64_t i, uint64_t e)
{
	if (i < b->lo || i >= b->hi)
		rblock_at(b, i);
	return e < b->hi ? e : b->hi;
}

/* Feed root symbols [i, e) from *q; with `lim`, stop after lim words. */
static void ps_roots(pseq *s, rblock *b, td_entry f, uint64_t i, uint64_t e, unsigned *qp, uint64_t *hitsp,
		     unsigned lim)
{
	const an *x = s->x;
	const uint64_t W2 = 2 * x->W, T = x->T, TR = x->T + x->R;
	const unsigned L = s->L;
	unsigned q = *qp, fed = 0;
	uint64_t hits = *hitsp;
	while (i < e) {
		const uint64_t k = rblock_span(b, i, e);
		if (!lim) /* the rules' infos (R u32) miss the cache: load them ahead */
			for (uint64_t j = i; j < k; j++)
				if (b->p[j - b->lo] - T < x->R)
					__builtin_prefetch(s->info + (b->p[j - b->lo] - T));
		for (; i < k; i++) {
			uint64_t y = b->p[i - b->lo];
			if (y < W2 || is_piece(x, y)) {
				unsigned v = s->dfa[q][y < W2 ? ps_class(s, y) : 0];
				hits += v >> 7;
				q = v & 0x7f;
				if (lim && ++fed >= lim)
					goto out;
				continue;
			}
			if (y < T)
				continue;
			if (y >= TR) {
				s->err = td_fail(TD_ECORRUPT, "entry %u: symbol out of range", f);
				goto out;
			}
			uint32_t ci = s->info[y - T];
			unsigned cn = PS_NH(ci);
			if (lim) { /* the words past a chunk: only the runs begun before it */
				for (unsigned t = 0; t < cn && fed < lim; t++, fed++) {
					unsigned v = s->dfa[q][PS_HEAD(ci, t)];
					hits += v >> 7;
					q = v & 0x7f;
				}
				if (fed >= lim)
					goto out;
				continue;
			}
			if (ci & PS_OCC)
				hits += s->occ[y - T];
			for (unsigned t = 0; t < cn; t++) {
				unsigned v = s->dfa[q][PS_HEAD(ci, t)];
				hits += v >> 7;
				q = v & 0x7f;
			}
			if (cn == L)
				q = PS_END(ci);
		}
	}
out:
	*qp = q;
	*hitsp = hits;
}

/* Two words (a, b): one flag byte a symbol, terminals and rules alike (a
 * table of T + R bytes, read at every symbol): whether it holds words,
 * whether its first word is b, its last a, and the occurrences it holds
 * (a rule): 0..14 in bits 3-6, or P2_OCC_BIG with the count in occ[]. A
 * root symbol then adds its count without a branch on the flags (the
 * branch on a rule holding a match mispredicted at every few symbols, and
 * each miss waited on the table's load: 80% of the root walk's time). */
#define P2_W 1u
#define P2_B 2u
#define P2_A 4u
#define P2_OCC_SHIFT 3u
#define P2_OCC_BIG 15u
#define P2_OCC_OF(f) (((f) >> P2_OCC_SHIFT) & P2_OCC_BIG)

/* The occurrences in rule y - T with flags f. */
static inline uint64_t p2_occ(const pseq *s, unsigned f, uint64_t y)
{
	unsigned c = P2_OCC_OF(f);
	return __builtin_expect(c == P2_OCC_BIG, 0) ? s->occ[y - s->x->T] : c;
}

static uint8_t p2_rule(pseq *s, uint64_t r, unsigned depth);

/* Feed flags f: a match when the words so far end with a and f's first
 * word is b (a symbol without words changes nothing). */
#define P2_FEED(f, prev_a, hits)                                                                                      \
	do {                                                                                                          \
		unsigned w_ = (f) & P2_W;                                                                             \
		(hits) += (prev_a) & ((f) >> 1);                                                                      \
		(prev_a) = ((prev_a) & (w_ ^ 1u)) | ((f) >> 2 & w_);                                                   \
	} while (0)

static uint8_t p2_body(pseq *s, uint64_t r, uint64_t start, uint32_t len, unsigned depth)
{
	const an *x = s->x;
	const uint64_t T = x->T, TR = x->T + x->R;
	unsigned prev_a = 0, any = 0, first_b = 0;
	uint64_t hits = 0;
	for (uint32_t j = 0; j < len; j++) {
		uint64_t y = s->rsyms ? s->rsyms[start + j] : td_rule_sym(x->a, start + j);
		if (y >= TR) {
			s->err = td_fail(TD_ECORRUPT, "symbol out of range");
			return 0;
		}
		if (s->rsyms && start + j + P2_AHEAD < s->nrsyms) /* the pass reads them in order */
			__builtin_prefetch(s->tab + s->rsyms[start + j + P2_AHEAD]);
		unsigned f = s->tab[y];
		if (!(f & P2_DONE) && !((f = p2_rule(s, y - T, depth + 1)) & P2_DONE))
			return 0;
		hits += p2_occ(s, f, y);
		if (!any)
			first_b = f & P2_B;
		any |= f & P2_W;
		P2_FEED(f & 7u, prev_a, hits);
	}
	unsigned c = hits < P2_OCC_BIG ? (unsigned)hits : P2_OCC_BIG;
	uint8_t v = (uint8_t)(P2_DONE | c << P2_OCC_SHIFT | (any ? P2_W | first_b | prev_a << 2 : 0));
	if (c == P2_OCC_BIG)
		s->occ[r] = hits;
	s->tab[T + r] = v;
	return v;
}

static uint8_t p2_rule(pseq *s, uint64_t r, unsigned depth)
{
	uint64_t start = 0;
	uint32_t len = 0;
	return ps_rhs(s, r, depth, &start, &len) ? 0 : p2_body(s, r, start, len, depth);
}

/* The terminals' flags (every rule's not computed: 0). */
static void p2_init(pseq *s)
{
	const an *x = s->x;
	memset(s->tab, P2_DONE | P2_W, 2 * x->W);
	for (uint64_t t = 2 * x->W; t < x->T; t++)
		s->tab[t] = (uint8_t)(P2_DONE | (is_piece(x, t) ? P2_W : 0));
	uint32_t a = s->wid[0], b = s->nd > 1 ? s->wid[1] : a;
	s->tab[2 * (uint64_t)a] |= P2_A;
	s->tab[2 * (uint64_t)a + 1] |= P2_A;
	s->tab[2 * (uint64_t)b] |= P2_B;
	s->tab[2 * (uint64_t)b + 1] |= P2_B;
}

/* Root symbols [i, e) (pairs); with lim, only the first word after. */
static void p2_roots(pseq *s, rblock *b, td_entry f, uint64_t i, uint64_t e, unsigned *qp, uint64_t *hitsp, unsigned lim)
{
	const an *x = s->x;
	const uint64_t TR = x->T + x->R;
	const uint8_t *tab = s->tab;
	unsigned prev_a = *qp;
	uint64_t hits = *hitsp;
	while (i < e) {
		const uint64_t k = rblock_span(b, i, e);
		if (!lim) /* the flags' loads miss the cache: all of them ahead */
			for (uint64_t j = i; j < k; j++)
				__builtin_prefetch(tab + b->p[j - b->lo]);
		for (; i < k; i++) {
			uint32_t y = b->p[i - b->lo];
			if (y >= TR) {
				s->err = td_fail(TD_ECORRUPT, "entry %u: symbol out of range", f);
				goto out;
			}
			unsigned fl = tab[y];
			if (lim) {
				if (fl & P2_W) {
					hits += prev_a & (fl >> 1);
					goto out;
				}
				continue;
			}
			hits += p2_occ(s, fl, y);
			P2_FEED(fl & 7u, prev_a, hits);
		}
	}
out:
	*qp = prev_a;
	*hitsp = hits;
}

/* A scope's files in root order: file f (of x->files) holds root
 * positions [rs, re); pre: the walked positions before it. */
typedef struct psfile {
	uint64_t rs, re, pre;
	size_t f;
} psfile;

static int psfile_cmp(const void *p, const void *q)
{
	const psfile *u = p, *v = q;
	return (u->rs > v->rs) - (u->rs < v->rs);
}

typedef struct psjob {
	const pseq *s;
	const psfile *pf;
	size_t npf, nchunks;
	uint64_t n;
	uint64_t *counts;
	int atomic;
	td_par_err err;
} psjob;

static void ps_chunk(void *ctx, size_t c)
{
	psjob *j = ctx;
	pseq s = *j->s;
	rblock *b = malloc(sizeof *b);
	if (!b) {
		td_par_err_set(&j->err, TD_ENOMEM);
		return;
	}
	b->a = s.x->a;
	b->lo = b->hi = 0;
	uint64_t pos = j->n * c / j->nchunks, end = j->n * (c + 1) / j->nchunks;
	size_t lo = 0, hi = j->npf;
	while (hi - lo > 1) { /* the last file with pre <= pos */
		size_t mid = lo + (hi - lo) / 2;
		if (j->pf[mid].pre <= pos)
			lo = mid;
		else
			hi = mid;
	}
	for (size_t k = lo; k < j->npf && pos < end && !s.err; k++) {
		if (td_cancel_requested()) {
			s.err = td_fail(TD_ECANCELED, "interrupted");
			break;
		}
		const psfile *f = &j->pf[k];
		uint64_t flen = f->re - f->rs;
		if (f->pre + flen <= pos)
			continue;
		uint64_t a = f->rs + (pos - f->pre), e = end < f->pre + flen ? f->rs + (end - f->pre) : f->re, hits = 0;
		unsigned q = 0;
		if (s.tab) {
			p2_roots(&s, b, s.x->files[f->f], a, e, &q, &hits, 0);
			if (e < f->re && !s.err)
				p2_roots(&s, b, s.x->files[f->f], e, f->re, &q, &hits, 1);
		} else {
			ps_roots(&s, b, s.x->files[f->f], a, e, &q, &hits, 0);
			/* a one-word phrase has no run to finish past the chunk
			 * (L = 0), and lim 0 would mean no limit: the rest of the
			 * file counted again by every chunk */
			if (e < f->re && !s.err && s.L)
				ps_roots(&s, b, s.x->files[f->f], e, f->re, &q, &hits, s.L);
		}
		if (hits) {
			if (j->atomic)
				__atomic_fetch_add(&j->counts[f->f], hits, __ATOMIC_RELAXED);
			else
				j->counts[f->f] += hits;
		}
		pos = f->pre + flen;
	}
	free(b);
	td_par_err_set(&j->err, s.err);
}

/* phrase_counts_seq declines (returns PS_DECLINE, counts zeroed) a phrase
 * of more than PS_MMAX words, and a walk of fewer than a PS_SHARE-th of
 * the root symbols: the rules such a walk reaches are few, and the
 * matcher computes only those (on linuxdoc the two cost the same at
 * about 3% of the root). */
#define PS_DECLINE 1
#define PS_SHARE 32u

/* phrase_counts_fast's answer by the pass over every rule. */
static int phrase_counts_seq(const an *x, const uint32_t *ids, unsigned m, const uint8_t *skip, uint64_t *counts)
{
	pseq s;
	memset(counts, 0, x->nfiles * sizeof *counts);
	if (m > PS_MMAX) /* the matcher's table holds PS_MMAX states */
		return PS_DECLINE;
	ps_init(&s, x, ids, m);
	psfile *pf = malloc((x->nfiles ? x->nfiles : 1) * sizeof *pf);
	size_t npf = 0;
	int err = pf ? TD_OK : TD_ENOMEM, sorted = 1;
	for (size_t f = 0; f < x->nfiles && !err; f++) {
		if (skip && skip[f])
			continue;
		uint64_t rs, re;
		if ((err = root_range(x, x->files[f], &rs, &re)) || rs == re)
			continue;
		if (npf && rs < pf[npf - 1].rs)
			sorted = 0;
		pf[npf++] = (psfile){ rs, re, 0, f };
	}
	if (!err && !sorted)
		qsort(pf, npf, sizeof *pf, psfile_cmp);
	uint64_t n = 0;
	for (size_t k = 0; k < npf && !err; k++) {
		if (k && pf[k].rs < pf[k - 1].re)
			err = td_fail(TD_ECORRUPT, "entry %u: root range overlaps another file's", x->files[pf[k].f]);
		pf[k].pre = n;
		n += pf[k].re - pf[k].rs;
	}
	if (!err && (m > PS_MMAX || n < x->a->meta.nroot / PS_SHARE)) {
		free(pf);
		return PS_DECLINE;
	}
	const size_t ib = m == 2 ? x->T + x->R : (x->R ? x->R : 1) * sizeof *s.info;
	void *ip = NULL;
	if (!err && (!(ip = td_big_alloc(ib)) || !(s.occ = td_big_alloc_sparse((x->R ? x->R : 1) * sizeof *s.occ))))
		err = TD_ENOMEM;
	if (m == 2)
		s.tab = ip;
	else
		s.info = ip;
	if (!err && s.tab)
		p2_init(&s);
	if (!err) {
		td_syms_build_part(x->a, 1, 0);
		s.rsyms = td_syms_flat(x->a) ? x->a->f_rule_syms : NULL;
		s.nrsyms = x->a->rule_syms.n;
		err = ps_rules(&s);
	}
	if (!err && n) {
		unsigned nt = td_par_threads(n, PAR_GRAIN);
		psjob j = { .s = &s, .pf = pf, .npf = npf, .n = n, .counts = counts, .atomic = nt > 1 };
		j.nchunks = nt > 1 ? (size_t)nt * PAR_CHUNKS : 1;
		err = td_par_for(j.nchunks, nt, ps_chunk, &j);
		if (!err)
			err = td_par_err_get(&j.err);
	}
	td_big_free(ip, ib);
	td_big_free(s.occ, (x->R ? x->R : 1) * sizeof *s.occ);
	free(pf);
	if (err)
		memset(counts, 0, x->nfiles * sizeof *counts);
	return err;
}

/* ---------- a file's first or last words, as ids ---------- */

typedef struct edge {
	const td_archive *a;
	int from_end;
	unsigned k, n;
	uint32_t *ids;
} edge;

static int edge_sym(edge *g, uint64_t y, unsigned depth)
{
	const td_archive *a = g->a;
	if (y < 2 * a->W) {
		g->ids[g->n++] = (uint32_t)(y >> 1);
		return TD_OK;
	}
	if (y < a->T) {
		if (a->meta.nlongwords) { /* a piece of a long word is a word without an id */
			uint32_t len;
			int sp;
			const uint8_t *b = td_term_bytes(a, y, &len, &sp);
			if (!b)
				return td_fail(TD_ECORRUPT, "other token %llu out of bounds", (unsigned long long)(y - 2 * a->W));
			if (len && td_word_char(b, len))
				g->ids[g->n++] = BREAK;
		}
		return TD_OK;
	}
	uint64_t start;
	uint32_t len;
	if (y >= a->T + a->R || depth > TD_MAXDEPTH)
		return td_fail(TD_ECORRUPT, "symbol out of range or rules nest too deep");
	if (td_rule_rhs(a, y - a->T, &start, &len))
		return td_fail(TD_ECORRUPT, "rule table broken");
	int err = TD_OK;
	for (uint32_t j = 0; j < len && g->n < g->k && !err; j++)
		err = edge_sym(g, td_rule_sym(a, g->from_end ? start + len - 1 - j : start + j), depth + 1);
	return err;
}

int td_edge_words(const td_archive *a, td_entry e, int from_end, unsigned k, uint32_t *ids, unsigned *n)
{
	*n = 0;
	if (e >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no entry %u", e);
	int err = td_data_check_sums(a);
	if (!err && a->meta.nlongwords && !td_other(a))
		err = TD_ECORRUPT;
	uint64_t rs = td_pack_get(&a->e_root, e), re = td_pack_get(&a->e_root, e + 1);
	if (!err && (rs > re || re > a->meta.nroot))
		err = td_fail(TD_ECORRUPT, "entry %u: root range out of bounds", e);
	edge g = { a, from_end, k, 0, ids };
	for (uint64_t i = 0; !err && i < re - rs && g.n < k; i++)
		err = edge_sym(&g, td_root_sym(a, from_end ? re - 1 - i : rs + i), 0);
	for (unsigned i = 0; from_end && i < g.n / 2; i++) { /* into text order */
		uint32_t t = ids[i];
		ids[i] = ids[g.n - 1 - i];
		ids[g.n - 1 - i] = t;
	}
	*n = err ? 0 : g.n;
	return err;
}

typedef struct pctx {
	const phrase *ph;
	uint64_t add;        /* occurrences found by the scan */
	/* search: hits of the current file */
	td_hits *out;
	td_entry file;
	uint64_t base;
} pctx;

static int phrase_emit(scanner *sc, const uint32_t *gram, const wslot *first)
{
	(void)first;
	pctx *p = sc->ctx;
	if (memcmp(gram, p->ph->id, p->ph->m * sizeof *gram))
		return TD_OK;
	p->add += sc->weight;
	return TD_OK;
}

/* Long-word phrases: matched on the text of the files with pieces (and
 * the phrases of texts). A word's bytes are valid only during its call (a
 * text's words come from a buffer refilled a chunk at a time: text_words
 * in td_analytics_set.c), so each of the last m words is kept as the set
 * of phrase positions it equals, never as a pointer. */
typedef struct tmatch {
	const phrase *ph;
	uint32_t eq[TD_PHRASE_MAX]; /* bit k: the word equals the phrase's word k */
	uint64_t off[TD_PHRASE_MAX];
	unsigned n;
	uint64_t count;
	td_hits *out;
	td_entry file;
} tmatch;

static int tmatch_fn(void *ctx, const uint8_t *w, size_t len, uint64_t off)
{
	tmatch *t = ctx;
	unsigned m = t->ph->m;
	if (t->n == m) {
		memmove(t->eq, t->eq + 1, (m - 1) * sizeof *t->eq);
		memmove(t->off, t->off + 1, (m - 1) * sizeof *t->off);
		t->n--;
	}
	uint32_t eq = 0;
	for (unsigned k = 0; k < m; k++)
		if (len == t->ph->len[k] && !memcmp(w, t->ph->w[k], len))
			eq |= UINT32_C(1) << k;
	t->eq[t->n] = eq;
	t->off[t->n++] = off;
	if (t->n < m)
		return TD_OK;
	for (unsigned k = 0; k < m; k++)
		if (!(t->eq[k] >> k & 1))
			return TD_OK;
	t->count++;
	return t->out ? td_hits_push(t->out, t->file, t->off[0]) : TD_OK;
}

/* A rule just reached (its parts done): its words, first and last words
 * and occurrences of the phrase (its parts' plus the runs across them). */
static int phrase_done(void *ctx, uint64_t r)
{
	scanner *sc = ctx;
	pctx *p = sc->ctx;
	int err = seqinfo_reserve(sc->si, sc->s->n);
	if (err)
		return err;
	p->add = 0;
	sc->weight = 1;
	err = scan_rule(sc, r, 1);
	sc->si->val[sc->s->slot[r] - 1] = sc->below + p->add;
	return err;
}

/* Byte offset of word k of symbol y within its expansion. */
static int word_offset(scanner *sc, uint64_t y, uint64_t k, uint64_t *off, unsigned depth)
{
	const an *x = sc->x;
	*off = 0;
	while (y >= x->T) {
		uint64_t start;
		uint32_t len;
		if (depth++ > TD_MAXDEPTH || rhs(x, y - x->T, &start, &len))
			return td_fail(TD_ECORRUPT, "rule table broken");
		uint32_t j = 0;
		for (; j < len; j++) {
			uint64_t c = td_rule_sym(x->a, start + j), n = sym_nw(sc, c);
			if (k < n) {
				y = c;
				break;
			}
			k -= n;
			*off += td_sym_len(x->a, c);
		}
		if (j == len)
			return td_fail(TD_ECORRUPT, "rule words do not add up");
	}
	return TD_OK;
}

static int search_emit(scanner *sc, const uint32_t *gram, const wslot *first)
{
	pctx *p = sc->ctx;
	if (memcmp(gram, p->ph->id, p->ph->m * sizeof *gram))
		return TD_OK;
	uint64_t o;
	int err = word_offset(sc, first->sym, first->k, &o, 0);
	return err ? err : td_hits_push(p->out, p->file, p->base + first->off + o);
}

/* Hits inside symbol y placed at byte `base` of the file. */
static int search_sym(scanner *sc, pctx *p, uint64_t y, uint64_t base, unsigned depth)
{
	const an *x = sc->x;
	if (y < x->T || depth > TD_MAXDEPTH)
		return y < x->T ? TD_OK : td_fail(TD_ECORRUPT, "rules nest too deep");
	if (!sc->si->val[sc->s->slot[y - x->T] - 1])
		return TD_OK;
	uint64_t start;
	uint32_t len;
	int err = rhs(x, y - x->T, &start, &len);
	/* runs across this rule's parts */
	sc->n = 0;
	p->base = base;
	uint64_t off = 0;
	for (uint32_t j = 0; j < len && !err; j++) {
		uint64_t c = td_rule_sym(x->a, start + j);
		err = scan_sym(sc, c, off);
		off += td_sym_len(x->a, c);
	}
	/* runs inside its parts (the window is rebuilt per level) */
	off = 0;
	for (uint32_t j = 0; j < len && !err; j++) {
		uint64_t c = td_rule_sym(x->a, start + j);
		if (c >= x->T)
			err = search_sym(sc, p, c, base + off, depth + 1);
		off += td_sym_len(x->a, c);
	}
	return err;
}

static int hit_cmp(const void *p, const void *q)
{
	const td_hit *u = p, *v = q;
	return (u->off > v->off) - (u->off < v->off);
}

/* Hits in file e (its rules' counts known), offsets ascending. */
static int search_file(scanner *sc, pctx *p, td_entry e)
{
	const an *x = sc->x;
	size_t before = p->out->n;
	p->file = e;
	p->base = 0;
	int err = scan_file(sc, e);
	uint64_t rs = 0, re = 0, sym[QCHUNK], off = 0;
	if (!err)
		err = root_range(x, e, &rs, &re);
	for (uint64_t i = rs; !err && i < re;) {
		uint64_t k = re - i < QCHUNK ? re - i : QCHUNK;
		td_root_range(x->a, i, k, sym);
		for (uint64_t j = 0; j < k && !err; j++) {
			if (sym[j] >= x->T)
				err = search_sym(sc, p, sym[j], off, 0);
			off += td_sym_len(x->a, sym[j]);
		}
		i += k;
	}
	if (!err && p->out->n - before > 1)
		qsort(p->out->v + before, p->out->n - before, sizeof *p->out->v, hit_cmp);
	return err;
}

/* ---------- phrases of rare words: only the files that can hold them ----------
 *
 * With stored postings (td_postings.h: a format 4 archive or a shard
 * made with --postings) the phrase's words are looked up by their bytes
 * before the grammar is read: a word in no file of the archive means no
 * occurrence anywhere (nothing else is read, not even the data's
 * checksums). Otherwise the files holding the word in the fewest files
 * are the candidates; the next rarest words' lists are intersected with
 * them while a list holds at most PHR_ISECT times as many files as the
 * candidates left (a list entry costs a few nanoseconds to decode, a
 * candidate file's walk thousands of symbols). Only the candidates under
 * the scope are walked; when they hold more than PHR_KEEP of the scope's
 * root symbols the whole scope is walked as without postings (the
 * restriction saves little there, and the whole walk decodes the
 * symbols in bulk). A file without the rarest word cannot hold the
 * phrase, so the counts are the full walk's. Phrases with a word longer
 * than TD_MAXTOK (no id, never in the postings) are not restricted. */
#define PHR_ISECT 64u
#define PHR_KEEP(roots) ((roots) / 2)

/* The candidate files of ph in a: *none = 1 when a word is in no file;
 * else *keep (a bitmap over the entries, malloc'd) or NULL for all. */
static int phrase_keep(const td_archive *a, const phrase *ph, uint64_t **keep, int *none)
{
	*keep = NULL;
	*none = 0;
	if (!td_post_has(a) || ph->has_long || ph->m < 2)
		return TD_OK;
	uint64_t df[TD_PHRASE_MAX];
	unsigned ord[TD_PHRASE_MAX];
	for (unsigned k = 0; k < ph->m; k++) {
		int err = td_post_lookup(a, ph->w[k], ph->len[k], &df[k], NULL);
		if (err)
			return err;
		if (!df[k]) {
			*none = 1;
			return TD_OK;
		}
		/* by file count, ascending (insertion: m <= 8) */
		unsigned j = k;
		for (; j > 0 && df[ord[j - 1]] > df[k]; j--)
			ord[j] = ord[j - 1];
		ord[j] = k;
	}
	td_entry *c = NULL;
	uint64_t nc = 0;
	int err = td_post_lookup(a, ph->w[ord[0]], ph->len[ord[0]], &nc, &c);
	for (unsigned i = 1; i < ph->m && !err && nc; i++) {
		unsigned k = ord[i];
		if (df[k] > PHR_ISECT * nc)
			continue;
		td_entry *d = NULL;
		uint64_t nd = 0, n = 0;
		if ((err = td_post_lookup(a, ph->w[k], ph->len[k], &nd, &d)))
			break;
		for (uint64_t u = 0, v = 0; u < nc && v < nd;) { /* both ascending */
			if (c[u] < d[v])
				u++;
			else if (c[u] > d[v])
				v++;
			else {
				c[n++] = c[u++];
				v++;
			}
		}
		nc = n;
		free(d);
	}
	const uint64_t ne = a->meta.nentries;
	if (!err && !nc)
		*none = 1;
	else if (!err && !(*keep = calloc(ne / 64 + 1, sizeof **keep)))
		err = TD_ENOMEM;
	for (uint64_t i = 0; i < nc && !err && *keep; i++)
		(*keep)[c[i] >> 6] |= UINT64_C(1) << (c[i] & 63);
	free(c);
	return err;
}

/* The scope without any file read: its files for a list (checked), none
 * for a scope (checked), for a phrase that cannot occur. */
static int an_init_none(an *x, const td_archive *a, td_entry scope, const td_entry *list, size_t nlist)
{
	memset(x, 0, sizeof *x);
	x->a = a;
	if (list)
		return add_list(x, list, nlist);
	return scope < a->meta.nentries ? TD_OK : td_fail(TD_EINVAL, "no entry %u", scope);
}

/* Per file of x, whether it is left out (not in keep), into *skip
 * (malloc'd), and the root symbols of the files kept in *kept; *skip
 * stays NULL (walk all) when they are more than PHR_KEEP of the scope's. */
static int phrase_skip(const an *x, const uint64_t *keep, uint8_t **skip, uint64_t *kept)
{
	uint64_t all = 0, in = 0;
	*skip = NULL;
	*kept = 0;
	uint8_t *sk = malloc(x->nfiles ? x->nfiles : 1);
	if (!sk)
		return TD_ENOMEM;
	for (size_t f = 0; f < x->nfiles; f++) {
		uint64_t rs, re;
		int err = root_range(x, x->files[f], &rs, &re);
		if (err) {
			free(sk);
			return err;
		}
		sk[f] = !(keep[x->files[f] >> 6] >> (x->files[f] & 63) & 1);
		all += re - rs;
		in += sk[f] ? 0 : re - rs;
	}
	*kept = all;
	if (in > PHR_KEEP(all)) {
		free(sk);
		return TD_OK;
	}
	*skip = sk;
	*kept = in;
	return TD_OK;
}

/* Count a phrase per file of the scope: counts[i] for x->files[i], and,
 * with out, every hit. ph: phrase_parse's (its ids are looked up here). */
static int phrase_run(const td_archive *a, phrase *ph, td_entry scope, const td_entry *list, size_t nlist, an *x,
		      uint64_t **counts, td_hits *out)
{
	rset s = { 0 };
	seqinfo si = { 0 };
	uint64_t *keep = NULL, kept = 0;
	uint8_t *skip = NULL;
	int none = 0;
	*counts = NULL;
	memset(x, 0, sizeof *x);
	int err = phrase_keep(a, ph, &keep, &none);
	if (!err && none)
		err = an_init_none(x, a, scope, list, nlist);
	if (!err && !none && !(err = phrase_ids(a, ph, out != NULL)))
		err = an_init_list(x, a, scope, list, nlist, (keep ? 0 : 1) | (ph->no_words ? AN_NO_WORDS : 0));
	/* rule symbols decoded whole for a large walk, as an_init_list does;
	 * for a walk of some files from a thirty-second of the root symbols
	 * (their rules are read tile by tile, again and again, otherwise) */
	if (!err && keep && !(err = phrase_skip(x, keep, &skip, &kept)) && kept >= a->meta.nroot / (skip ? 32 : 16))
		td_syms_build_part(a, 1, 0);
	free(keep);
	if (err)
		return err;
	*counts = calloc(x->nfiles ? x->nfiles : 1, sizeof **counts);
	if (!*counts) {
		free(skip);
		return TD_ENOMEM;
	}
	if (none || ph->absent) {
		free(skip);
		return TD_OK;
	}
	if (ph->has_long) {
		/* only files with pieces can hold it: their text */
		for (size_t f = 0; f < x->nfiles && !err; f++) {
			int v = file_long(x, x->files[f]);
			if (v <= 0) {
				err = v;
				continue;
			}
			tmatch t = { .ph = ph, .out = out, .file = x->files[f] };
			err = td_text_words(a, x->files[f], tmatch_fn, &t);
			(*counts)[f] = t.count;
		}
		return err;
	}
	/* counts by the matcher; a search then scans only the files that
	 * hold the phrase */
	err = phrase_counts_seq(x, ph->id, ph->m, skip, *counts);
	if (err == PS_DECLINE)
		err = phrase_counts_fast(x, ph->id, ph->m, skip, *counts);
	free(skip);
	if (err || !out)
		return err;
	/* one pass: each file's root symbols, each rule met computed
	 * bottom-up as the walk first reaches it (rule scans have their own
	 * window and tally) */
	pctx p = { .ph = ph, .out = out }, pr = { .ph = ph };
	scanner sc = { .x = x, .s = &s, .si = &si, .emit = phrase_emit, .ctx = &p };
	scanner rsc = { .x = x, .s = &s, .si = &si, .emit = phrase_emit, .ctx = &pr };
	if ((err = rset_init(&s, x->R)) || (err = seqinfo_init(&si, ph->m, 1024)))
		goto out;
	s.done = phrase_done;
	s.ctx = &rsc;
	sc.emit = search_emit;
	sc.offsets = 1;
	for (size_t f = 0; f < x->nfiles && !err; f++)
		if ((*counts)[f])
			err = search_file(&sc, &p, x->files[f]);
out:
	seqinfo_free(&si);
	rset_free(&s);
	return err;
}

int td_phrase_count(const td_archive *a, const char *p, size_t len, td_entry scope, uint64_t *count)
{
	if (td_sharded(a)) {
		int err = td_shard_phrase_count(a, p, len, scope, count);
		if (err)
			*count = 0; /* td_analytics.h */
		return err;
	}
	phrase ph;
	*count = 0;
	int err = phrase_parse(p, len, &ph);
	if (err)
		return err;
	if (ph.m == 1)
		return td_count(a, p, len, scope, count);
	an x;
	uint64_t *counts = NULL;
	err = phrase_run(a, &ph, scope, NULL, 0, &x, &counts, NULL);
	for (size_t f = 0; !err && f < x.nfiles; f++)
		*count += counts[f];
	free(counts);
	an_free(&x);
	if (err)
		*count = 0;
	return err;
}

int td_phrase_search(const td_archive *a, const char *p, size_t len, td_entry scope, td_hits *out)
{
	if (td_sharded(a))
		return td_shard_phrase_search(a, p, len, scope, out);
	phrase ph;
	int err = phrase_parse(p, len, &ph);
	if (err)
		return err;
	if (ph.m == 1)
		return td_search(a, p, len, scope, out);
	an x;
	uint64_t *counts = NULL;
	size_t before = out->n;
	err = phrase_run(a, &ph, scope, NULL, 0, &x, &counts, out);
	free(counts);
	an_free(&x);
	if (err)
		out->n = before;
	return err;
}

/* Ranked files: count descending, then path bytes. */
typedef struct franked {
	td_file_count fc;
	char *path;
} franked;

static int franked_cmp(const void *p, const void *q)
{
	const franked *u = p, *v = q;
	if (u->fc.count != v->fc.count)
		return u->fc.count > v->fc.count ? -1 : 1;
	return strcmp(u->path, v->path);
}

static int entry_path(const void *a, uint32_t e, char *buf, size_t cap);
static int rank_tree(const td_archive *a, td_file_count *v, size_t k);

/* Sort v[0..k) by count descending, then path(pctx, file) bytes. */
static int rank_by(td_file_count *v, size_t k, td_set_path_fn path, const void *pctx)
{
	if (path == entry_path)
		return rank_tree(pctx, v, k);
	franked *f = k > 1 ? calloc(k, sizeof *f) : NULL;
	int err = k > 1 && !f ? TD_ENOMEM : TD_OK;
	for (size_t i = 0; i < k && f && !err; i++) {
		char buf[TD_MAXPATH + 2];
		int pl = path(pctx, v[i].file, buf, sizeof buf);
		f[i].fc = v[i];
		if (pl < 0)
			err = pl;
		else if (!(f[i].path = strdup(buf)))
			err = TD_ENOMEM;
	}
	if (!err && f) {
		qsort(f, k, sizeof *f, franked_cmp);
		for (size_t i = 0; i < k; i++)
			v[i] = f[i].fc;
	}
	for (size_t i = 0; f && i < k; i++)
		free(f[i].path);
	free(f);
	return err;
}

static int entry_path(const void *a, uint32_t e, char *buf, size_t cap)
{
	return td_archive_path(a, e, buf, cap);
}

/* Files of the archive's tree ranked without building their paths: a
 * file's chain of entries below the root decides against another's at the
 * first place they differ, siblings s < t of one directory. Siblings are
 * numbered in name order, so s's path sorts first, unless s is a
 * directory whose name is a proper prefix of t's and the byte after it in
 * t's name sorts before '/' ("a/x" after "a-b"). The names that s prefixes
 * follow it, the first of them with the least next byte, so whether that
 * can happen is known from s's next sibling ("flips"), once a directory. */
typedef struct chain_file {
	td_file_count fc;
	size_t off;               /* its chain: arena[off, off + len), the file last */
	uint32_t len;
} chain_file;

typedef struct chain_ctx {
	const td_archive *a;
	const uint32_t *arena;
	const uint8_t *flip;      /* per entry: 2 when a directory flips */
} chain_ctx;

/* Bytes of name x (then '/' when a directory) against y's. */
static int key_cmp(const char *x, size_t xl, int xdir, const char *y, size_t yl, int ydir)
{
	size_t m = xl < yl ? xl : yl;
	int c = memcmp(x, y, m);
	if (c)
		return c;
	int cx = xl > m ? (uint8_t)x[m] : xdir ? '/' : -1;
	int cy = yl > m ? (uint8_t)y[m] : ydir ? '/' : -1;
	return cx - cy;
}

static int chain_cmp(const void *p, const void *q, void *ctx)
{
	const chain_file *u = p, *v = q;
	const chain_ctx *c = ctx;
	if (u->fc.count != v->fc.count)
		return u->fc.count > v->fc.count ? -1 : 1;
	const uint32_t *x = c->arena + u->off, *y = c->arena + v->off;
	uint32_t n = u->len < v->len ? u->len : v->len, i = 0;
	while (i < n && x[i] == y[i])
		i++;
	if (i == n) /* the same file (not after merging) */
		return (u->len > v->len) - (u->len < v->len);
	const td_entry s = x[i], t = y[i];
	const int sdir = i + 1 < u->len, tdir = i + 1 < v->len;
	if (!(s < t ? sdir && c->flip[s] == 2 : tdir && c->flip[t] == 2))
		return s < t ? -1 : 1;
	size_t sl = 0, tl = 0;
	const char *sn = td_archive_name(c->a, s, &sl), *tn = td_archive_name(c->a, t, &tl);
	if (!sn || !tn) /* checked before the sort: not reached */
		return s < t ? -1 : 1;
	return key_cmp(sn, sl, sdir, tn, tl, tdir);
}

/* Whether directory d flips (above): 2 or 1, or an error. */
static int dir_flips(const td_archive *a, td_entry d)
{
	td_stat st;
	td_entry first;
	uint32_t cnt;
	int err = td_archive_stat(a, d, &st);
	if (!err)
		err = td_archive_children(a, st.parent, &first, &cnt);
	if (err)
		return err;
	if (d + 1 >= (uint64_t)first + cnt)
		return 1;
	size_t l1, l2;
	const char *n1 = td_archive_name(a, d, &l1), *n2 = td_archive_name(a, d + 1, &l2);
	if (!n1 || !n2)
		return td_fail(TD_ECORRUPT, "entry %u: no name", n1 ? d + 1 : d);
	return l2 > l1 && !memcmp(n1, n2, l1) && (uint8_t)n2[l1] < '/' ? 2 : 1;
}

/* rank_num's marks: a file's tag is its count (or, counts too large to
 * place, 1 + its index in v), a directory above a file of v's ABOVE. */
#define RN_ABOVE 0x80000000u

/* A marked child of a directory that flips (rank_num): its name and
 * whether it is a directory (its key: the name, then '/'). */
typedef struct rn_kid {
	const char *name;
	uint32_t len, id;
	int dir;
} rn_kid;

static int rn_kid_cmp(const void *p, const void *q)
{
	const rn_kid *x = p, *y = q;
	return key_cmp(x->name, x->len, x->dir, y->name, y->len, y->dir);
}

/* v[0..k) (k >= 2 files, each vouched for: every directory above it had its
 * children checked) ranked through one numbering of them in path order:
 * the directories above the files are marked (each parent chain walked up
 * to the first marked one), then a depth-first walk from the root lists
 * each marked directory's marked children in number order, which is name
 * order, so path order but around a directory that flips (chain_cmp: then
 * those few are sorted by name), and meets the files in path order: each
 * is written at the next place of its count (counts descending), or, for
 * counts too large for a table of places, keyed for a stable radix sort
 * by count, descending. O(k + the children of the directories above the files), with
 * no chain built or compared. TD_OK; 1 (v unchanged) when v holds an
 * entry twice or one that is also above another (the chains rank those);
 * TD_ENOMEM, TD_ECORRUPT. */
static int rank_num(const td_archive *a, td_file_count *v, size_t k)
{
	const uint64_t ne = a->meta.nentries;
	uint32_t *tag = calloc(ne, sizeof *tag);
	if (!tag)
		return TD_ENOMEM;
	int err = TD_OK;
	size_t ndirs = 1;
	tag[TD_ROOT] = RN_ABOVE;
	/* counts 1..4k+1024 (every answer but a word thousands of times in
	 * few files): a file's tag is its count, and the walk puts each file
	 * at its place (counts descending, path order within a count) through
	 * a count's start; else its index + 1 and a radix sort after */
	uint64_t maxc = 0, minc = UINT64_MAX;
	for (size_t i = 0; i < k; i++)
		maxc = v[i].count > maxc ? v[i].count : maxc, minc = v[i].count < minc ? v[i].count : minc;
	size_t *start = minc && maxc <= 4 * (uint64_t)k + 1024 ? calloc(maxc + 2, sizeof *start) : NULL;
	if (start) {
		for (size_t i = 0; i < k; i++)
			start[v[i].count]++;
		for (size_t c = maxc, at = 0; c >= 1; c--) { /* the first place of count c */
			const size_t n = start[c];
			start[c] = at;
			at += n;
		}
	}
	for (size_t i = 0; i < k && !err; i++) {
		const td_entry e = v[i].file;
		if (tag[e])
			err = 1; /* twice, or above another file */
		else
			tag[e] = start ? (uint32_t)v[i].count : (uint32_t)i + 1;
	}
	for (size_t i = 0; i < k && !err; i++) {
		td_entry x = v[i].file;
		for (;;) {
			const td_entry p = (td_entry)td_pack_get(&a->e_parent, x);
			if (p >= x) { /* vouched for: not reached */
				err = td_fail(TD_ECORRUPT, "entry %u: parent %u does not come first", x, p);
				break;
			}
			if (tag[p] & RN_ABOVE)
				break;
			if (tag[p]) {
				err = 1; /* a file of v above another */
				break;
			}
			tag[p] = RN_ABOVE;
			ndirs++;
			x = p;
		}
	}
	/* sk[r]: the r-th file in path order, keyed by its count descending
	 * (the file itself as the id: v is written from sk alone) */
	uint32_t *stack = NULL;
	td_skey *sk = NULL;
	rn_kid *kids = NULL;
	size_t top = 0, r = 0, nkids = 0;
	if (!err) {
		stack = malloc((k + ndirs + 1) * sizeof *stack); /* and a slot to write past the top */
		sk = start ? NULL : malloc(k * sizeof *sk);
		if (!stack || (!start && !sk))
			err = TD_ENOMEM;
	}
	if (!err)
		stack[top++] = TD_ROOT;
	/* depth-first, children pushed last first: a file is numbered when met */
	while (top && !err) {
		const uint32_t x = stack[--top];
		if (!(tag[x] & RN_ABOVE)) {
			if (r == k) { /* a file met twice: not reached */
				err = 1;
				break;
			}
			if (start) { /* v is written in place: its counts are in tag */
				const uint32_t c = tag[x];
				if (start[c] >= k) { /* a file met twice: not reached */
					err = 1;
					break;
				}
				v[start[c]++] = (td_file_count){ x, c };
				r++;
			} else {
				sk[r++] = (td_skey){ UINT64_MAX - v[tag[x] - 1].count, x };
			}
			continue;
		}
		/* a checked directory: its children range is sound */
		const uint64_t c0 = td_pack_get(&a->e_child, x), c1 = td_pack_get(&a->e_child, x + 1);
		if (c0 <= x || c1 < c0 || c1 > ne) {
			err = td_fail(TD_ECORRUPT, "entry %u: bad children range", x);
			break;
		}
		/* the marked children pushed last first (a slot written for
		 * each, kept when marked: no branch a child), and whether a
		 * marked directory's name is a prefix of the next one's that
		 * sorts before its '/' (then by name below) */
		int flips = 0;
		const size_t before = top;
		for (uint64_t c = c1; c-- > c0;) {
			const uint32_t tc = tag[c];
			stack[top] = (uint32_t)c;
			top += tc != 0;
			if (top > k + ndirs) { /* more than marked: not reached */
				err = 1;
				break;
			}
			if ((tc & RN_ABOVE) && c + 1 < c1 && !flips) {
				size_t l1, l2;
				const char *n1 = td_archive_name(a, (td_entry)c, &l1),
					   *n2 = td_archive_name(a, (td_entry)c + 1, &l2);
				if (!n1 || !n2) {
					err = td_fail(TD_ECORRUPT, "entry %u: no name", n1 ? (td_entry)c + 1 : (td_entry)c);
					break;
				}
				flips = l2 > l1 && !memcmp(n1, n2, l1) && (uint8_t)n2[l1] < '/';
			}
		}
		if (flips && !err && top - before > 1) { /* by name, then pushed last first */
			const size_t m = top - before;
			if (m > nkids) {
				free(kids);
				if (!(kids = malloc(m * sizeof *kids))) {
					err = TD_ENOMEM;
					break;
				}
				nkids = m;
			}
			/* in number order (= name order: pushed last first), each
			 * name read once, then an insertion sort by key: a
			 * flipping directory moves past the few names it
			 * prefixes */
			for (size_t j = 0; j < m && !err; j++) {
				const uint32_t id = stack[top - 1 - j];
				size_t l;
				const char *nm = td_archive_name(a, id, &l);
				if (!nm)
					err = td_fail(TD_ECORRUPT, "entry %u: no name", id);
				kids[j] = (rn_kid){ nm, (uint32_t)l, id, (tag[id] & RN_ABOVE) != 0 };
			}
			if (err)
				break;
			size_t moves = 0; /* past 8 a child (names built to flip): a qsort */
			for (size_t j = 1; j < m && moves <= 8 * m; j++) {
				const rn_kid x = kids[j];
				size_t i = j;
				for (; i > 0 && rn_kid_cmp(&kids[i - 1], &x) > 0; i--)
					kids[i] = kids[i - 1];
				kids[i] = x;
				moves += j - i;
			}
			if (moves > 8 * m)
				qsort(kids, m, sizeof *kids, rn_kid_cmp);
			for (size_t j = 0; j < m; j++)
				stack[top - 1 - j] = kids[j].id;
		}
	}
	if (!err && r != k)
		err = 1; /* a file not met: not reached */
	if (err == 1 && start) /* v partly written: no way back to the chains */
		err = td_fail(TD_ECORRUPT, "entry tree: a file met twice or not at all in path order");
	/* by count, descending, stably: ties stay in path order */
	if (!err && !start && (err = td_sort_keys(sk, k)) == TD_OK)
		for (size_t i = 0; i < k; i++)
			v[i] = (td_file_count){ sk[i].id, UINT64_MAX - sk[i].key };
	free(sk);
	free(start);
	free(tag), free(stack), free(kids);
	return err;
}

static int rank_tree(const td_archive *a, td_file_count *v, size_t k)
{
	if (k < 2)
		return k && v[0].file >= a->meta.nentries ? td_fail(TD_EINVAL, "no entry %u", v[0].file) : TD_OK;
	const uint64_t ne = a->meta.nentries;
	int err = TD_OK;
	/* each file's directories checked (its chain is then sound) */
	for (size_t i = 0; i < k && !err; i++)
		err = v[i].file >= ne ? td_fail(TD_EINVAL, "no entry %u", v[i].file) : td_tree_vouch(a, v[i].file);
	if (err)
		return err;
	/* many files: numbered in one walk rather than sorted by chains (1:
	 * v is not a set of leaves, the chains rank it) */
	if (k >= ne / 32 && (err = rank_num(a, v, k)) <= 0)
		return err;
	err = TD_OK;
	chain_file *f = malloc(k * sizeof *f);
	uint8_t *flip = calloc(ne, 1);
	size_t cap = 8 * k, used = 0;
	uint32_t *arena = malloc(cap * sizeof *arena);
	if (!f || !flip || !arena)
		err = TD_ENOMEM;
	for (size_t i = 0; i < k && !err; i++) {
		td_entry e = v[i].file;
		uint32_t depth = 0;
		for (td_entry x = e; x != TD_ROOT; x = (td_entry)td_pack_get(&a->e_parent, x))
			depth++;
		if (used + depth > cap) {
			cap = 2 * (used + depth);
			uint32_t *na = realloc(arena, cap * sizeof *na);
			if (!na) {
				err = TD_ENOMEM;
				break;
			}
			arena = na;
		}
		uint32_t at = depth;
		for (td_entry x = e; x != TD_ROOT; x = (td_entry)td_pack_get(&a->e_parent, x))
			arena[used + --at] = x;
		for (uint32_t j = 0; j + 1 < depth && !err; j++) {
			td_entry d = arena[used + j];
			if (!flip[d]) {
				int r = dir_flips(a, d);
				if (r < 0)
					err = r;
				else
					flip[d] = (uint8_t)r;
			}
		}
		f[i] = (chain_file){ v[i], used, depth };
		used += depth;
	}
	if (!err) {
		chain_ctx c = { a, arena, flip };
		qsort_r(f, k, sizeof *f, chain_cmp, &c);
		for (size_t i = 0; i < k; i++)
			v[i] = f[i].fc;
	}
	free(f);
	free(flip);
	free(arena);
	return err;
}

int td_rank_files(const td_archive *a, td_file_count *v, size_t k)
{
	return rank_by(v, k, entry_path, a);
}

int td_rank_counts(const uint64_t *counts, const uint32_t *ids, size_t nfiles, td_set_path_fn path, const void *pctx,
		   td_file_count **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	size_t k = 0;
	int err = TD_OK;
	for (size_t f = 0; f < nfiles; f++)
		k += counts[f] != 0;
	if (k && !(*out = malloc(k * sizeof **out)))
		err = TD_ENOMEM;
	for (size_t f = 0, i = 0; !err && f < nfiles; f++)
		if (counts[f])
			(*out)[i++] = (td_file_count){ ids[f], counts[f] };
	if (!err)
		err = rank_by(*out, k, path, pctx);
	if (!err) {
		*n = k;
	} else {
		free(*out);
		*out = NULL;
	}
	return err;
}

int td_hits_files(const td_archive *a, const td_hits *h, td_file_count **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	size_t k = 0;
	for (size_t i = 0; i < h->n; i++)
		k += !i || h->v[i].file != h->v[i - 1].file;
	if (!k)
		return TD_OK;
	td_file_count *v = malloc(k * sizeof *v);
	if (!v)
		return TD_ENOMEM;
	size_t j = 0;
	for (size_t i = 0; i < h->n; i++) {
		if (!i || h->v[i].file != h->v[i - 1].file)
			v[j++] = (td_file_count){ h->v[i].file, 0 };
		v[j - 1].count++;
	}
	int err = td_rank_files(a, v, k);
	if (err) {
		free(v);
		return err;
	}
	*out = v;
	*n = k;
	return TD_OK;
}

int td_phrase_files(const td_archive *a, const char *p, size_t len, td_entry scope, td_file_count **out,
		    size_t *n)
{
	if (td_sharded(a))
		return td_shard_phrase_files(a, p, len, scope, out, n);
	/* one word of a stored index: its list (td_postings.c) */
	int done;
	int err = td_post_files(a, p, len, scope, 1, out, n, &done);
	if (err || done)
		return err;
	phrase ph;
	if ((err = phrase_parse(p, len, &ph)))
		return err;
	an x;
	uint64_t *counts = NULL;
	if (ph.m == 1 && !ph.has_long) {
		/* one word: only the root positions that reach it (td_query.c);
		 * building the query index in a process costs less than the
		 * matcher's pass (0.10 s against 0.14 s of CPU on linuxdoc) */
		err = an_init_list(&x, a, scope, NULL, 0, 0);
		if (!err && !(counts = calloc(x.nfiles ? x.nfiles : 1, sizeof *counts)))
			err = TD_ENOMEM;
		if (!err) /* a word not in the archive: counts 0 */
			err = td_word_file_counts(a, p, len, x.files, x.nfiles, counts);
	} else {
		err = phrase_run(a, &ph, scope, NULL, 0, &x, &counts, NULL);
	}
	if (!err)
		err = td_rank_counts(counts, x.files, x.nfiles, entry_path, a, out, n);
	free(counts);
	an_free(&x);
	return err;
}

/* ---------- n-grams ---------- */

/* Hash table: n-gram (m word items) -> count (td_analytics_int.h). */
typedef td_gtab gtab;

static inline uint64_t gval(const gtab *t, uint64_t i)
{
	return td_gtab_val(t, i);
}

static inline void gset(gtab *t, uint64_t i, uint64_t v)
{
	memcpy(t->slot + i * t->stride, &v, sizeof v);
}

static inline uint32_t *gkey(const gtab *t, uint64_t i)
{
	return t->slot + i * t->stride + 2;
}

static uint64_t ghash(const uint32_t *g, unsigned m)
{
	uint64_t h = 0x9E3779B97F4A7C15u;
	for (unsigned i = 0; i < m; i++) {
		h ^= g[i];
		h *= 0xff51afd7ed558ccdu;
		h ^= h >> 32;
	}
	return h;
}

/* Bytes of a table of cap slots of runs of m words. */
static size_t gtab_bytes(unsigned m, uint64_t cap)
{
	return (size_t)cap * (m + 2) * sizeof(uint32_t);
}

/* The tables are written at random, the large ones in huge pages
 * (td_mem.h): fewer page faults and TLB misses. */
static uint32_t *gtab_slots(unsigned m, uint64_t cap)
{
	return td_big_alloc(gtab_bytes(m, cap));
}

void td_gtab_free(td_gtab *t)
{
	if (t->slot)
		td_big_free(t->slot, gtab_bytes(t->m, t->mask + 1));
	t->slot = NULL;
	t->mask = t->used = 0;
}

static int gtab_grow(gtab *t)
{
	uint64_t cap = t->slot ? 2 * (t->mask + 1) : 1 << 16;
	gtab n = { t->m, t->m + 2, gtab_slots(t->m, cap), cap - 1, t->used };
	if (!n.slot)
		return TD_ENOMEM;
	for (uint64_t i = 0; t->slot && i <= t->mask; i++) {
		uint64_t v = gval(t, i);
		if (!v)
			continue;
		uint64_t h = ghash(gkey(t, i), t->m) & n.mask;
		while (gval(&n, h))
			h = (h + 1) & n.mask;
		memcpy(n.slot + h * n.stride, t->slot + i * t->stride, n.stride * sizeof(uint32_t));
	}
	td_gtab_free(t);
	*t = n;
	return TD_OK;
}

/* An empty table of cap slots (a power of two) for runs of m words. */
static int gtab_alloc(gtab *t, unsigned m, uint64_t cap)
{
	*t = (gtab){ m, m + 2, gtab_slots(m, cap), cap - 1, 0 };
	return t->slot ? TD_OK : TD_ENOMEM;
}

/* gtab_add with the run's ghash given. */
static int gtab_add_h(gtab *t, const uint32_t *g, uint64_t n, uint64_t hash)
{
	if (!n)
		return TD_OK;
	if ((t->used + 1) * 2 > t->mask && gtab_grow(t))
		return TD_ENOMEM;
	const unsigned m = t->m;
	uint64_t h = hash & t->mask, v;
	while ((v = gval(t, h))) {
		const uint32_t *k = gkey(t, h);
		unsigned i = 0;
		while (i < m && k[i] == g[i])
			i++;
		if (i == m) {
			gset(t, h, v + n);
			return TD_OK;
		}
		h = (h + 1) & t->mask;
	}
	memcpy(gkey(t, h), g, m * sizeof *g);
	gset(t, h, n);
	t->used++;
	return TD_OK;
}

static int gtab_add(gtab *t, const uint32_t *g, uint64_t n)
{
	return gtab_add_h(t, g, n, ghash(g, t->m));
}

/* Runs waiting to go into the table while their slots are fetched. */
#define GRING 8u

/* Where runs go: the table, and, when pruning, which word ids may be in
 * a run that is kept (ok[w]; ids >= W, long words, always are). A run is
 * added GRING runs later (gsink_put), its slot prefetched meanwhile: the
 * table is far larger than the caches. */
typedef struct gsink {
	gtab *t;           /* the table, or with pbits the first of 2^pbits (by the hash's top bits) */
	unsigned m, pbits;
	const uint8_t *ok;
	uint64_t W;
	uint32_t ring[GRING][TD_PHRASE_MAX];
	uint64_t rw[GRING], rh_[GRING];
	unsigned rh, rn;
} gsink;

static inline gtab *gsink_tab(const gsink *g, uint64_t h)
{
	return g->pbits ? &g->t[h >> (64 - g->pbits)] : g->t;
}

static inline int gsink_keep(const gsink *g, const uint32_t *gram)
{
	for (unsigned i = 0; g->ok && i < g->m; i++)
		if (gram[i] < g->W && !g->ok[gram[i]])
			return 0;
	return 1;
}

/* Add n to run gram, when kept. TD_OK or TD_ENOMEM. */
static inline int gsink_put(gsink *g, const uint32_t *gram, uint64_t n)
{
	if (!n || !gsink_keep(g, gram))
		return TD_OK;
	int err = TD_OK;
	if (g->rn == GRING) {
		err = gtab_add_h(gsink_tab(g, g->rh_[g->rh]), g->ring[g->rh], g->rw[g->rh], g->rh_[g->rh]);
		g->rh = (g->rh + 1) % GRING;
		g->rn--;
	}
	unsigned i = (g->rh + g->rn++) % GRING;
	uint64_t h = ghash(gram, g->m);
	memcpy(g->ring[i], gram, g->m * sizeof *gram);
	g->rw[i] = n;
	g->rh_[i] = h;
	const gtab *t = gsink_tab(g, h);
	if (t->mask)
		__builtin_prefetch(t->slot + (h & t->mask) * t->stride);
	return err;
}

/* The runs still waiting, into the table. */
static int gsink_flush(gsink *g)
{
	int err = TD_OK;
	for (; g->rn && !err; g->rn--) {
		err = gtab_add_h(gsink_tab(g, g->rh_[g->rh]), g->ring[g->rh], g->rw[g->rh], g->rh_[g->rh]);
		g->rh = (g->rh + 1) % GRING;
	}
	return err;
}

/* The n-gram walk. Each rule reached gets an info, by rule id: its words,
 * first and last L words, and height (1 + its highest part's), computed
 * once on first use from its parts' (children first, recursively) and
 * published as the phrase matcher's are (kmp_rule): threads share them.
 * 1. the scope's root symbols, in chunks over threads: each rule met gets
 *    its info and one more root occurrence (its weight so far), and the
 *    runs across root symbols go to the thread's table;
 * 2. weights top-down, rules by height descending (parents first);
 * 3. each rule's runs across its parts times its weight, rules in id order
 *    (their right sides read in order) in chunks over threads;
 * 4. the threads' tables merged, each a 2^pbits part of the hash space.
 * No list of the rules reached is built: one not reached has weight 0. */
typedef struct ninfo {
	const an *x;
	unsigned m, L, stride; /* u32 a rule (NI_*): state, words (2), first L, last L */
	uint32_t *info;        /* R * stride, zeroed; state 0: not computed */
	uint64_t *w;           /* R weights, zeroed (apart from the infos: threads add to them) */
	int atomic;            /* several threads add to w */
} ninfo;

/* Where a rule's info keeps its words (u64) and first words (then the
 * last). */
#define NI_NW 1u
#define NI_H 3u

/* State word: NI_DONE | height; NI_BUSY while being written. */
#define NI_DONE 0x80000000u
#define NI_BUSY 0x40000000u

static inline uint64_t ni_nw(const uint32_t *ri)
{
	uint64_t v;
	memcpy(&v, ri + NI_NW, sizeof v);
	return v;
}

/* Rule r's info (computed on first use), or NULL with *err set. */
static const uint32_t *ni_rule(const ninfo *ni, uint64_t r, unsigned depth, int *err)
{
	uint32_t *ri = ni->info + r * ni->stride;
	if (__atomic_load_n(ri, __ATOMIC_ACQUIRE) & NI_DONE)
		return ri;
	if (depth > TD_MAXDEPTH) {
		*err = td_fail(TD_ECORRUPT, "rules nest too deep or in a cycle");
		return NULL;
	}
	const an *x = ni->x;
	const unsigned L = ni->L;
	uint64_t start, nw = 0;
	uint32_t len, head[TD_PHRASE_MAX], tail[TD_PHRASE_MAX];
	unsigned nh = 0, nt = 0, h = 0;
	if ((*err = rhs(x, r, &start, &len)))
		return NULL;
	for (uint32_t j = 0; j < len; j++) {
		uint64_t y = td_rule_sym(x->a, start + j);
		const uint32_t *ids;
		uint64_t k;
		uint32_t id;
		if (y < 2 * x->W || is_piece(x, y)) {
			id = y < 2 * x->W ? (uint32_t)(y >> 1) : BREAK;
			ids = &id;
			k = 1;
		} else if (y < x->T) {
			continue;
		} else if (y < x->T + x->R) {
			const uint32_t *c = ni_rule(ni, y - x->T, depth + 1, err);
			if (!c)
				return NULL;
			unsigned ch = c[0] & 0xff;
			if (ch + 1 > h)
				h = ch + 1;
			k = ni_nw(c);
			if (k >= L) { /* its last L words are the rule's so far */
				for (unsigned t = 0; t < L && nh < L; t++)
					head[nh++] = c[NI_H + t];
				memcpy(tail, c + NI_H + L, L * sizeof *tail);
				nt = L;
				nw += k;
				continue;
			}
			ids = c + NI_H;
		} else {
			*err = td_fail(TD_ECORRUPT, "symbol out of range");
			return NULL;
		}
		for (uint64_t t = 0; t < k; t++) {
			if (nh < L)
				head[nh++] = ids[t];
			if (nt == L) {
				for (unsigned u = 1; u < L; u++)
					tail[u - 1] = tail[u];
				nt--;
			}
			if (L)
				tail[nt++] = ids[t];
		}
		nw += k;
	}
	uint32_t st = 0;
	if (__atomic_compare_exchange_n(ri, &st, NI_BUSY, 0, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)) {
		memcpy(ri + NI_NW, &nw, sizeof nw);
		memcpy(ri + NI_H, head, nh * sizeof *head);
		memcpy(ri + NI_H + L, tail, nt * sizeof *tail);
		__atomic_store_n(ri, NI_DONE | h, __ATOMIC_RELEASE);
	} else {
		while (!(__atomic_load_n(ri, __ATOMIC_ACQUIRE) & NI_DONE))
			td_par_relax();
	}
	return ri;
}

/* Root occurrences a thread keeps before adding them to the shared
 * weights: a small direct-mapped cache by rule (the frequent rules would
 * otherwise bounce their weight's cache line between the cores). */
#define WCACHE 2048u

/* One thread's walk of a sequence: the window of its last L words. */
typedef struct gwalk {
	const ninfo *ni;
	gsink *g;
	uint32_t win[TD_PHRASE_MAX];
	unsigned wn;
	int err;
	uint32_t wc_r[WCACHE]; /* rule + 1, 0: empty */
	uint32_t wc_n[WCACHE];
} gwalk;

/* One more root occurrence of rule r. */
static inline void gwalk_root_rule(gwalk *w, uint64_t r)
{
	if (!w->ni->atomic) {
		w->ni->w[r]++;
		return;
	}
	unsigned i = (unsigned)((r * 0x9E3779B1u) >> 7) & (WCACHE - 1);
	if (w->wc_r[i] == r + 1 && w->wc_n[i] < UINT32_MAX) {
		w->wc_n[i]++;
		return;
	}
	if (w->wc_r[i])
		__atomic_fetch_add(&w->ni->w[w->wc_r[i] - 1], w->wc_n[i], __ATOMIC_RELAXED);
	w->wc_r[i] = (uint32_t)(r + 1);
	w->wc_n[i] = 1;
}

/* The cached root occurrences into the weights. */
static void gwalk_root_flush(gwalk *w)
{
	for (unsigned i = 0; w->ni->atomic && i < WCACHE; i++)
		if (w->wc_r[i]) {
			__atomic_fetch_add(&w->ni->w[w->wc_r[i] - 1], w->wc_n[i], __ATOMIC_RELAXED);
			w->wc_r[i] = 0;
		}
}

/* Feed word item id: the run it ends (after L words) goes to the table
 * with `weight`. */
static inline void gwalk_word(gwalk *w, uint32_t id, uint64_t weight)
{
	const unsigned L = w->ni->L;
	if (w->wn == L) {
		uint32_t gram[TD_PHRASE_MAX];
		memcpy(gram, w->win, L * sizeof *gram);
		gram[L] = id;
		int err = gsink_put(w->g, gram, weight);
		if (err)
			w->err = err;
		for (unsigned u = 1; u < L; u++)
			w->win[u - 1] = w->win[u];
		w->wn--;
	}
	w->win[w->wn++] = id;
}

/* Feed symbol y (< T + R): the runs that end in it and begin before it go
 * to the table with `weight`; returns y's info when y is a rule. */
static inline const uint32_t *gwalk_feed(gwalk *w, uint64_t y, uint64_t weight)
{
	const an *x = w->ni->x;
	const unsigned m = w->ni->m, L = w->ni->L;
	if (y < 2 * x->W || is_piece(x, y)) {
		gwalk_word(w, y < 2 * x->W ? (uint32_t)(y >> 1) : BREAK, weight);
		return NULL;
	}
	if (y < x->T)
		return NULL;
	const uint32_t *c = ni_rule(w->ni, y - x->T, 0, &w->err);
	if (!c)
		return NULL;
	uint64_t N = ni_nw(c);
	const uint32_t *H = c + NI_H;
	unsigned hn = N < L ? (unsigned)N : L;
	uint32_t gram[TD_PHRASE_MAX];
	for (unsigned i = 1; i <= hn; i++) {
		if (w->wn < m - i)
			continue;
		memcpy(gram, w->win + w->wn - (m - i), (m - i) * sizeof *gram);
		memcpy(gram + m - i, H, i * sizeof *gram);
		int err = gsink_put(w->g, gram, weight);
		if (err)
			w->err = err;
	}
	if (N >= L) {
		memcpy(w->win, c + NI_H + L, L * sizeof *w->win);
		w->wn = L;
	} else {
		for (unsigned t = 0; t < hn; t++) {
			if (w->wn == L) {
				for (unsigned u = 1; u < L; u++)
					w->win[u - 1] = w->win[u];
				w->wn--;
			}
			w->win[w->wn++] = H[t];
		}
	}
	return c;
}

/* Root symbols [i, e) of file `f` (weight 1), each rule met one more
 * root occurrence; with `across` (e is inside the file, which ends at
 * `across`), then the runs that begin before e and end in its next L
 * words. */
static void gwalk_roots(gwalk *w, td_entry f, uint64_t i, uint64_t e, uint64_t across)
{
	const an *x = w->ni->x;
	const uint64_t TR = x->T + x->R;
	uint64_t sym[QCHUNK];
	while (i < e && !w->err) {
		if (td_cancel_requested()) {
			w->err = td_fail(TD_ECANCELED, "interrupted");
			break;
		}
		uint64_t k = e - i < QCHUNK ? e - i : QCHUNK;
		td_root_range(x->a, i, k, sym);
		for (uint64_t j = 0; j < k && !w->err; j++) {
			if (sym[j] >= TR) {
				w->err = td_fail(TD_ECORRUPT, "entry %u: symbol out of range", f);
				break;
			}
			/* the rules' infos are read at random: ask ahead */
			if (j + KMP_AHEAD < k && sym[j + KMP_AHEAD] >= x->T && sym[j + KMP_AHEAD] < TR) {
				__builtin_prefetch(w->ni->info + (sym[j + KMP_AHEAD] - x->T) * w->ni->stride);
				__builtin_prefetch(w->ni->w + (sym[j + KMP_AHEAD] - x->T));
			}
			if (gwalk_feed(w, sym[j], 1))
				gwalk_root_rule(w, sym[j] - x->T);
		}
		i += k;
	}
	for (unsigned fed = 0; e < across && fed < w->ni->L && !w->err; e++) {
		uint64_t y = td_root_sym(x->a, e);
		if (y >= TR) {
			w->err = td_fail(TD_ECORRUPT, "entry %u: symbol out of range", f);
		} else if (y < 2 * x->W || is_piece(x, y)) {
			gwalk_word(w, y < 2 * x->W ? (uint32_t)(y >> 1) : BREAK, 1);
			fed++;
		} else if (y >= x->T) {
			const uint32_t *c = ni_rule(w->ni, y - x->T, 0, &w->err);
			uint64_t N = c ? ni_nw(c) : 0;
			for (unsigned t = 0; t < N && fed < w->ni->L; t++, fed++)
				gwalk_word(w, c[NI_H + t], 1);
		}
	}
}

/* Rule r's runs across its parts, times its weight. */
static void gwalk_rule(gwalk *w, uint64_t r)
{
	const an *x = w->ni->x;
	uint64_t start, weight = w->ni->w[r];
	uint32_t len;
	if (!weight || (w->err = rhs(x, r, &start, &len)))
		return;
	w->wn = 0;
	for (uint32_t j = 0; j < len && !w->err; j++)
		gwalk_feed(w, td_rule_sym(x->a, start + j), weight);
}

/* The walk's threads: tasks [0, nchunks) are the root chunks of sp,
 * then rchunks chunks of the rules (after the weights: `rules`). */
typedef struct njob {
	const ninfo *ni;
	const rsplit *sp;
	gsink *sinks; /* one a thread */
	size_t rchunks;
	int rules;
	td_par_err err;
} njob;

static void ngram_task(void *ctx, size_t c)
{
	njob *j = ctx;
	gwalk w = { .ni = j->ni, .g = &j->sinks[td_par_self()] };
	const an *x = j->ni->x;
	if (j->rules) {
		uint64_t lo = x->R * c / j->rchunks, hi = x->R * (c + 1) / j->rchunks;
		for (uint64_t r = lo; r < hi && !w.err; r++)
			gwalk_rule(&w, r);
	} else {
		const rsplit *sp = j->sp;
		uint64_t pos, end = sp->n * (c + 1) / sp->nchunks;
		for (size_t f = rsplit_first(sp, c, &pos); pos < end && f < x->nfiles && !w.err; f++) {
			if (sp->pre[f + 1] <= pos)
				continue;
			uint64_t rs = td_pack_get(&x->a->e_root, x->files[f]);
			uint64_t a = rs + (pos - sp->pre[f]), fe = rs + (sp->pre[f + 1] - sp->pre[f]);
			uint64_t b = end < sp->pre[f + 1] ? rs + (end - sp->pre[f]) : fe;
			w.wn = 0;
			gwalk_roots(&w, x->files[f], a, b, fe);
			pos = sp->pre[f + 1];
		}
		gwalk_root_flush(&w);
	}
	td_par_err_set(&j->err, w.err);
}

/* Table p of every thread into thread 0's. */
static void ngram_merge(void *ctx, size_t p)
{
	njob *j = ctx;
	gtab *d = &j->sinks[0].t[p];
	int err = TD_OK;
	for (unsigned k = 1; k < j->sp->nthreads && !err; k++) {
		gtab *src = &j->sinks[k].t[p];
		if (!d->slot) { /* thread 0 walked nothing */
			*d = *src;
			src->slot = NULL;
			continue;
		}
		for (uint64_t i = 0; src->slot && i <= src->mask && !err; i++) {
			uint64_t v = gval(src, i);
			if (v)
				err = gtab_add(d, gkey(src, i), v);
		}
		td_gtab_free(src);
	}
	td_par_err_set(&j->err, err);
}

/* Weights top-down: the rules reached (state set) by height, highest
 * first, each adding its weight to its parts'. The rules of one height
 * hold none of each other, so each height's go in chunks over the
 * threads (atomic adds when several), one height after the other: td_par_stage
 * stages inside one td_par_for task a thread. Before them, the rules
 * listed by height (a counting sort: each chunk of rule ids counts its
 * heights, then places its rules). */
#define WH (TD_MAXDEPTH + 2u)  /* heights */
#define WCHUNK 1024u           /* rules of one height a task */

struct wjob;
typedef struct wlevel {
	struct wjob *j;
	unsigned h;
} wlevel;

typedef struct wjob {
	const ninfo *ni;
	size_t nc;                 /* chunks of rule ids */
	uint32_t (*hist)[WH];      /* per chunk: its rules of each height */
	uint32_t *order;           /* the rules reached by height */
	uint64_t at[WH + 1];       /* the heights' starts in order */
	wlevel lv[WH];
	td_par_gate st[3 + WH];
	td_par_err err;
} wjob;

static void weights_hist(void *ctx, size_t c)
{
	wjob *j = ctx;
	const ninfo *ni = j->ni;
	uint64_t R = ni->x->R;
	for (uint64_t r = R * c / j->nc; r < R * (c + 1) / j->nc; r++) {
		uint32_t st = ni->info[r * ni->stride];
		if (st)
			j->hist[c][st & 0xff]++;
	}
}

static void weights_at(void *ctx, size_t c)
{
	(void)c;
	wjob *j = ctx;
	j->at[0] = 0;
	for (unsigned h = 0; h < WH; h++) {
		j->at[h + 1] = j->at[h];
		for (size_t k = 0; k < j->nc; k++)
			j->at[h + 1] += j->hist[k][h];
	}
}

static void weights_place(void *ctx, size_t c)
{
	wjob *j = ctx;
	const ninfo *ni = j->ni;
	uint64_t R = ni->x->R, off[WH];
	for (unsigned h = 0; h < WH; h++) {
		off[h] = j->at[h];
		for (size_t k = 0; k < c; k++)
			off[h] += j->hist[k][h];
	}
	for (uint64_t r = R * c / j->nc; r < R * (c + 1) / j->nc; r++) {
		uint32_t st = ni->info[r * ni->stride];
		if (st)
			j->order[off[st & 0xff]++] = (uint32_t)r;
	}
}

/* Chunk c of a height's rules: each one's weight into its parts'. */
static void weights_level(void *ctx, size_t c)
{
	const wlevel *lv = ctx;
	wjob *j = lv->j;
	const ninfo *ni = j->ni;
	const an *x = ni->x;
	uint64_t lo = j->at[lv->h] + (uint64_t)c * WCHUNK, hi = lo + WCHUNK;
	if (hi > j->at[lv->h + 1])
		hi = j->at[lv->h + 1];
	int err = TD_OK;
	for (uint64_t i = lo; i < hi && !err; i++) {
		uint64_t r = j->order[i], start, wr = ni->w[r];
		uint32_t len;
		if (!wr || (err = rhs(x, r, &start, &len)))
			continue;
		for (uint32_t k = 0; k < len; k++) {
			uint64_t y = td_rule_sym(x->a, start + k);
			if (y < x->T || y >= x->T + x->R)
				continue;
			if (ni->atomic)
				__atomic_fetch_add(&ni->w[y - x->T], wr, __ATOMIC_RELAXED);
			else
				ni->w[y - x->T] += wr;
		}
	}
	td_par_err_set(&j->err, err);
}

static void weights_task(void *ctx, size_t t)
{
	(void)t;
	wjob *j = ctx;
	td_par_stage(&j->st[0], j->nc, weights_hist, j);
	td_par_stage(&j->st[1], 1, weights_at, j);
	td_par_stage(&j->st[2], j->nc, weights_place, j);
	for (unsigned h = WH; h-- > 1;) /* height 0: no rule parts */
		td_par_stage(&j->st[3 + h], (size_t)((j->at[h + 1] - j->at[h] + WCHUNK - 1) / WCHUNK), weights_level,
			     &j->lv[h]);
}

static int ngram_weights(const ninfo *ni, unsigned nt)
{
	wjob *j = calloc(1, sizeof *j);
	if (!j)
		return TD_ENOMEM;
	j->ni = ni;
	j->nc = nt > 1 ? (size_t)nt * PAR_CHUNKS : 1;
	for (unsigned h = 0; h < WH; h++)
		j->lv[h] = (wlevel){ j, h };
	j->hist = calloc(j->nc, sizeof *j->hist);
	int err = j->hist ? TD_OK : TD_ENOMEM;
	if (!err && !(j->order = malloc((ni->x->R ? ni->x->R : 1) * sizeof *j->order)))
		err = TD_ENOMEM;
	if (!err && !(err = td_par_for(nt, nt, weights_task, j)))
		err = td_par_err_get(&j->err);
	free(j->order);
	free(j->hist);
	free(j);
	return err;
}

/* The runs of x's files (but those flagged in skip) into t (empty,
 * allocated): the walk above on sp->nthreads threads; g gives the
 * pruning. With `out`, runs walked on several threads stay in *np tables
 * (*out, malloc'd, each slot too; every run in one of them) instead of
 * being copied into t; *out is NULL when they are in t. */
static int ngram_walk(const an *x, const uint8_t *skip, unsigned m, gsink *g, gtab *t, gtab **out, unsigned *npout)
{
	rsplit sp;
	ninfo ni = { .x = x, .m = m, .L = m - 1, .stride = NI_H + 2 * (m - 1) };
	njob j = { .ni = &ni, .sp = &sp };
	gtab *parts = NULL;
	unsigned nt = 1, np = 1, pbits = 0;
	int err = rsplit_init(&sp, x, skip);
	if (!err) {
		nt = sp.nthreads;
		ni.atomic = nt > 1;
		/* read at random: in huge pages (td_mem.h) */
		ni.info = td_big_alloc((x->R ? x->R : 1) * ni.stride * sizeof *ni.info);
		ni.w = td_big_alloc((x->R ? x->R : 1) * sizeof *ni.w);
		j.sinks = calloc(nt, sizeof *j.sinks);
		if (!ni.info || !ni.w || !j.sinks)
			err = TD_ENOMEM;
	}
	if (out)
		*out = NULL;
	if (!err && nt > 1) {
		while ((1u << pbits) < 2 * nt && pbits < 10)
			pbits++;
		np = 1u << pbits;
		/* allocated here: grown from threads' malloc arenas instead, they
		 * cost 7 times the page faults (measured, 16 threads) */
		if (!(parts = calloc((size_t)nt * np, sizeof *parts)))
			err = TD_ENOMEM;
		for (size_t i = 0; !err && i < (size_t)nt * np; i++)
			err = gtab_alloc(&parts[i], m, 1u << 8);
		for (unsigned k = 0; !err && k < nt; k++)
			j.sinks[k] = (gsink){ .t = parts + (size_t)k * np, .m = m, .pbits = pbits, .ok = g->ok, .W = g->W };
	} else if (!err) {
		j.sinks[0] = *g;
	}
	if (!err)
		err = td_par_for(sp.nchunks, nt, ngram_task, &j);
	if (!err && !(err = td_par_err_get(&j.err)))
		err = ngram_weights(&ni, nt);
	if (!err) {
		j.rules = 1;
		j.rchunks = nt > 1 ? (size_t)nt * PAR_CHUNKS : 1;
		err = td_par_for(j.rchunks, nt, ngram_task, &j);
	}
	if (!err)
		err = td_par_err_get(&j.err);
	for (unsigned k = 0; !err && k < nt; k++)
		err = gsink_flush(&j.sinks[k]);
	if (nt > 1 && !err && !(err = td_par_for(np, nt, ngram_merge, &j)))
		err = td_par_err_get(&j.err);
	if (nt > 1 && !err && out) {
		*out = parts;
		*npout = np;
		parts = NULL;
	} else if (nt > 1 && !err) {
		/* the merged tables (their runs are distinct) into t */
		uint64_t used = 0, cap = 1u << 16;
		for (unsigned p = 0; p < np; p++)
			used += parts[p].used;
		while ((used + 1) * 2 > cap - 1)
			cap *= 2;
		td_gtab_free(t);
		err = gtab_alloc(t, m, cap);
		for (unsigned p = 0; !err && p < np; p++) {
			const gtab *src = &parts[p];
			for (uint64_t i = 0; src->slot && i <= src->mask; i++) {
				if (!gval(src, i))
					continue;
				uint64_t h = ghash(gkey(src, i), m) & t->mask;
				while (gval(t, h))
					h = (h + 1) & t->mask;
				memcpy(t->slot + h * t->stride, src->slot + i * src->stride, t->stride * sizeof(uint32_t));
			}
			t->used += src->used;
		}
	} else if (!err) {
		*g = j.sinks[0];
	}
	for (size_t i = 0; parts && i < (size_t)nt * np; i++)
		td_gtab_free(&parts[i]);
	free(parts);
	free(j.sinks);
	td_big_free(ni.info, (x->R ? x->R : 1) * ni.stride * sizeof *ni.info);
	td_big_free(ni.w, (x->R ? x->R : 1) * sizeof *ni.w);
	free(sp.pre);
	return err;
}

typedef struct ntext {
	const td_archive *a;
	gsink *g;
	td_longw *lw;
	uint32_t win[TD_PHRASE_MAX];
	unsigned n;
} ntext;

static int ngram_text_fn(void *ctx, const uint8_t *w, size_t len, uint64_t off)
{
	(void)off;
	ntext *nt = ctx;
	int64_t id = td_find_word(nt->a, (const char *)w, len);
	if (id < 0) {
		int64_t i = longw_add(nt->lw, w, len);
		if (i < 0)
			return (int)i;
		id = (int64_t)nt->a->W + i;
	}
	unsigned m = nt->g->m;
	if (nt->n == m) {
		memmove(nt->win, nt->win + 1, (m - 1) * sizeof *nt->win);
		nt->n--;
	}
	nt->win[nt->n++] = (uint32_t)id;
	return nt->n == m ? gsink_put(nt->g, nt->win, 1) : TD_OK;
}

/* Runs in tables t[]: an item is (table << GT_BITS) | slot. */
#define GT_BITS 40
#define GT_SLOT(v) ((v) & ((UINT64_C(1) << GT_BITS) - 1))

typedef struct grank_ctx {
	const td_archive *a;
	const td_longw *l;
	const gtab *t;
} grank_ctx;

/* N-grams (items of the tables): count descending, then words. */
static int grank(uint64_t i, uint64_t j, void *ctx)
{
	const grank_ctx *g = ctx;
	const gtab *ti = &g->t[i >> GT_BITS], *tj = &g->t[j >> GT_BITS];
	uint64_t vi = gval(ti, GT_SLOT(i)), vj = gval(tj, GT_SLOT(j));
	if (vi != vj)
		return vi > vj ? -1 : 1;
	const uint32_t *ki = gkey(ti, GT_SLOT(i)), *kj = gkey(tj, GT_SLOT(j));
	for (unsigned k = 0; k < ti->m; k++) {
		int c = item_cmp(g->a, g->l, ki[k], kj[k]);
		if (c)
			return c;
	}
	return 0;
}

/* The best of each table on threads, then of theirs. */
typedef struct rjob {
	const grank_ctx *g;
	topk *tk;      /* one a table */
	uint64_t top;  /* 0: all */
	td_par_err err;
} rjob;

static void rank_table(void *ctx, size_t p)
{
	rjob *j = ctx;
	const gtab *t = &j->g->t[p];
	topk *tk = &j->tk[p];
	int err = topk_init(tk, j->top && j->top < t->used ? (size_t)j->top : (size_t)t->used, grank, (void *)j->g);
	for (uint64_t i = 0; !err && t->slot && i <= t->mask; i++)
		if (gval(t, i))
			topk_offer(tk, (uint64_t)p << GT_BITS | i);
	td_par_err_set(&j->err, err);
}

/* The `top` best runs (0: all) of the tables g->t[0..nt) into tk, best
 * first. */
static int rank_tables(const grank_ctx *g, unsigned nt, uint64_t top, topk *tk)
{
	rjob j = { .g = g, .top = top };
	uint64_t used = 0, slots = 0;
	for (unsigned p = 0; p < nt; p++) {
		used += g->t[p].used;
		slots += g->t[p].slot ? g->t[p].mask + 1 : 0;
	}
	int err = (j.tk = calloc(nt, sizeof *j.tk)) ? TD_OK : TD_ENOMEM;
	if (!err && !(err = td_par_for(nt, nt > 1 ? td_par_threads(slots, 1u << 16) : 1, rank_table, &j)))
		err = td_par_err_get(&j.err);
	if (!err)
		err = topk_init(tk, top && top < used ? (size_t)top : (size_t)used, grank, (void *)g);
	for (unsigned p = 0; !err && p < nt; p++)
		for (size_t i = 0; i < j.tk[p].n; i++)
			topk_offer(tk, j.tk[p].h[i]);
	if (!err)
		topk_sort(tk);
	for (unsigned p = 0; j.tk && p < nt; p++)
		free(j.tk[p].h);
	free(j.tk);
	return err;
}

/* Count every run of n words of `scope` (or of the files list[0..nlist)
 * when list is not NULL, then of the texts) into t (grown from empty) and
 * the long words met into lw; with ok, only the runs gsink_keep keeps.
 * With out, the runs may instead be left in *np tables (ngram_walk). */
static int ngram_table(const td_archive *a, td_entry scope, const td_entry *list, size_t nlist, const td_texts *texts,
		       unsigned n, const uint8_t *ok, gtab *t, td_longw *lw, gtab **out, unsigned *np)
{
	gsink g = { .t = t, .m = n, .ok = ok, .W = a->W };
	an x;
	uint8_t *longf = NULL;
	int err = an_init_list(&x, a, scope, list, nlist, 1);
	if (err)
		goto out;
	longf = calloc(x.nfiles ? x.nfiles : 1, 1);
	if (!longf || (err = gtab_grow(t))) {
		err = err ? err : TD_ENOMEM;
		goto out;
	}
	for (size_t f = 0; f < x.nfiles && !err; f++) {
		int v = file_long(&x, x.files[f]);
		if (v)
			err = v < 0 ? v : TD_OK;
		longf[f] = v != 0;
	}
	int more = texts && texts->n; /* runs that go into t after the walk */
	for (size_t f = 0; f < x.nfiles; f++)
		more |= longf[f];
	if (!err)
		err = ngram_walk(&x, longf, n, &g, t, more ? NULL : out, np);
	/* files with words longer than TD_MAXTOK, and the texts: their words */
	for (size_t f = 0; f < x.nfiles && !err; f++) {
		if (!longf[f])
			continue;
		ntext nt = { .a = a, .g = &g, .lw = lw };
		err = td_text_words(a, x.files[f], ngram_text_fn, &nt);
	}
	for (size_t i = 0; texts && i < texts->n && !err; i++) {
		ntext nt = { .a = a, .g = &g, .lw = lw };
		err = texts->words(texts->ctx, i, ngram_text_fn, &nt);
	}
	if (!err)
		err = gsink_flush(&g);
out:
	free(longf);
	an_free(&x);
	return err;
}

int td_ngrams(const td_archive *a, td_entry scope, unsigned n, uint64_t top, td_ngram_fn fn, void *ctx)
{
	if (td_sharded(a)) {
		int used = 0, err = scope == TD_ROOT ? td_atab_ngrams(a, n, top, fn, ctx, &used) : TD_OK;
		return used || err ? err : td_shard_ngrams(a, scope, n, top, fn, ctx);
	}
	return td_ngrams_list(a, scope, NULL, 0, NULL, n, top, fn, ctx);
}

/* Words of the scope (or of the files list[0..nlist)). */
static uint64_t ngram_words(const td_archive *a, td_entry scope, const td_entry *list, size_t nlist)
{
	uint64_t n = 0, k;
	if (!list)
		return td_word_total(a, scope, &n) ? 0 : n;
	for (size_t i = 0; i < nlist; i++)
		n += td_word_total(a, list[i], &k) ? 0 : k;
	return n;
}

/* ok[w] = 1 for the words counted at least `min` times in the archive
 * (a run of words occurs no more often than its rarest word). */
static int ngram_ok(const td_archive *a, uint64_t min, uint8_t *ok)
{
	const td_pack *wf = td_word_freq(a);
	if (!wf)
		return TD_ECORRUPT;
	for (uint64_t w = 0; w < a->W; w++)
		ok[w] = td_pack_get(wf, w) >= min;
	return TD_OK;
}

/* Free the tables of a walk: parts[0..np) when parts, and t. */
static void gtabs_free(gtab *parts, unsigned np, gtab *t)
{
	for (unsigned p = 0; parts && p < np; p++)
		td_gtab_free(&parts[p]);
	free(parts);
	td_gtab_free(t);
	*t = (gtab){ .m = t->m, .stride = t->m + 2 };
}

int td_ngrams_list(const td_archive *a, td_entry scope, const td_entry *list, size_t nlist, const td_texts *texts,
		   unsigned n, uint64_t top, td_ngram_fn fn, void *ctx)
{
	if (n < 2 || n > TD_PHRASE_MAX)
		return td_fail(TD_EINVAL, "n-gram length %u outside 2..%u", n, TD_PHRASE_MAX);
	gtab t = { .m = n, .stride = n + 2 }, *parts = NULL;
	unsigned np = 0;
	td_longw lw = { 0 };
	topk tk = { 0 };
	grank_ctx g = { a, &lw, &t };
	uint8_t *ok = NULL;
	/* The top ones only (and no texts, whose words the archive's counts do
	 * not bound): count just the runs whose words all occur at least
	 * `min` times in the archive (a guess: the scope's words / 2^(9 + n);
	 * longer runs are rarer). Every run left out occurs fewer than
	 * min times, so when the top-th counted occurs min times or more the
	 * ranking is exact; else again with min lowered to that count (then
	 * it is), or, with fewer than top runs counted, to min / 64. */
	uint64_t min = 0;
	if (top && (!texts || !texts->n) && a->W) {
		min = ngram_words(a, scope, list, nlist) >> (9 + n);
		if (min > 1 && !(ok = malloc(a->W)))
			return TD_ENOMEM;
	}
	int err;
	for (;;) {
		if (min > 1 && (err = ngram_ok(a, min, ok)))
			goto out;
		err = ngram_table(a, scope, list, nlist, texts, n, min > 1 ? ok : NULL, &t, &lw, &parts, &np);
		if (err)
			goto out;
		g.t = parts ? parts : &t;
		if ((err = rank_tables(&g, parts ? np : 1, top, &tk)))
			goto out;
		uint64_t kth = top && tk.n == top ? gval(&g.t[tk.h[top - 1] >> GT_BITS], GT_SLOT(tk.h[top - 1])) : 0;
		if (min <= 1 || kth >= min)
			break;
		min = tk.n == top ? kth : min / 64;
		free(tk.h);
		gtabs_free(parts, np, &t);
		parts = NULL;
		longw_free(&lw);
		memset(&tk, 0, sizeof tk);
		memset(&lw, 0, sizeof lw);
	}
	for (size_t i = 0; i < tk.n && !err; i++) {
		const gtab *ti = &g.t[tk.h[i] >> GT_BITS];
		uint64_t slot = GT_SLOT(tk.h[i]);
		const char *w[TD_PHRASE_MAX];
		size_t wl[TD_PHRASE_MAX];
		for (unsigned k = 0; k < n; k++)
			w[k] = item_bytes(a, &lw, gkey(ti, slot)[k], &wl[k]);
		err = fn(ctx, w, wl, n, gval(ti, slot));
	}
out:
	free(ok);
	free(tk.h);
	gtabs_free(parts, np, &t);
	longw_free(&lw);
	return err;
}

/* ---------- a given list of files and texts (td_analytics_set.c) ---------- */

/* Occurrences of ph in each text into counts[i]; hits name the text
 * first + i. */
static int texts_phrase(const phrase *ph, const td_texts *texts, size_t first, uint64_t *counts, td_hits *out)
{
	int err = TD_OK;
	for (size_t i = 0; !err && texts && i < texts->n; i++) {
		tmatch t = { .ph = ph, .out = out, .file = (td_entry)(first + i) };
		err = texts->words(texts->ctx, i, tmatch_fn, &t);
		counts[i] = t.count;
	}
	return err;
}

int td_phrase_texts(const char *p, size_t len, const td_texts *texts, size_t first, uint64_t *counts, td_hits *out)
{
	phrase ph;
	int err = phrase_parse(p, len, &ph);
	return err ? err : texts_phrase(&ph, texts, first, counts, out);
}

int td_phrase_list(const td_archive *a, const char *p, size_t len, const td_entry *list, size_t nlist,
		   const td_texts *texts, uint64_t *counts, td_hits *out)
{
	phrase ph;
	int err = phrase_parse(p, len, &ph);
	if (err)
		return err;
	an x;
	uint64_t *c = NULL;
	size_t before = out ? out->n : 0;
	err = phrase_run(a, &ph, TD_ROOT, list, nlist, &x, &c, out);
	for (size_t f = 0; !err && f < nlist; f++)
		counts[f] = c[f];
	/* hits name the file's place in the list (they come in list order) */
	for (size_t h = before, f = 0; !err && out && h < out->n; h++) {
		while (f < nlist && list[f] != out->v[h].file)
			f++;
		if (f == nlist) {
			err = td_fail(TD_ECORRUPT, "phrase hit outside the files searched");
			break;
		}
		out->v[h].file = (td_entry)f;
	}
	if (!err)
		err = texts_phrase(&ph, texts, nlist, counts + nlist, out);
	free(c);
	an_free(&x);
	if (err && out)
		out->n = before;
	return err;
}

/* ---------- for merging shards ---------- */

int td_list_gtab(const td_archive *a, td_entry scope, const td_entry *list, size_t nlist, unsigned m,
		 const uint8_t *ok, td_gtab *t, td_longw *lw)
{
	if (m < 2 || m > TD_PHRASE_MAX)
		return td_fail(TD_EINVAL, "n-gram length %u outside 2..%u", m, TD_PHRASE_MAX);
	memset(t, 0, sizeof *t);
	t->m = m;
	t->stride = m + 2;
	return ngram_table(a, scope, list, nlist, NULL, m, ok, t, lw, NULL, NULL);
}

int td_gtab_add(td_gtab *t, const uint32_t *g, uint64_t n)
{
	if (!t->stride) {
		t->stride = t->m + 2;
		if (gtab_grow(t))
			return TD_ENOMEM;
	}
	return gtab_add(t, g, n);
}

int64_t td_gtab_find(const td_gtab *t, const uint32_t *g)
{
	if (!t->mask)
		return -1;
	for (uint64_t h = ghash(g, t->m) & t->mask; gval(t, h); h = (h + 1) & t->mask)
		if (!memcmp(gkey(t, h), g, t->m * sizeof *g))
			return (int64_t)h;
	return -1;
}

void td_gtab_set(td_gtab *t, uint64_t i, uint64_t v)
{
	gset(t, i, v);
}

int64_t td_longw_find(const td_longw *l, const char *w, size_t len)
{
	return longw_find(l, (const uint8_t *)w, len);
}

int64_t td_longw_intern(td_longw *l, const char *w, size_t len)
{
	return longw_add(l, (const uint8_t *)w, len);
}

void td_longw_free(td_longw *l)
{
	longw_free(l);
}
