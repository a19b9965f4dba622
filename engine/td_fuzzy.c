/* td_fuzzy: edit-distance word search over a pointer-free adaptive radix tree of the vocabulary. */
#include "td_analytics_int.h"

#include <pthread.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "td_fzix.h"
#include "td_shard.h"
#include "td_tokenize.h"

/*
 * The tree (SEBD'20): one node per distinct prefix of the vocabulary, in
 * code points; a node's children are one contiguous run of the node array
 * sorted by code point, so a node names them by index and count (no
 * pointers: the tree is four flat u32 columns, as it would be uploaded to
 * a GPU or stored in a file), and each node's fan-out is exactly its
 * children's count (the adaptive part: no fixed 4/16/48/256-way slots).
 * Built in one pass over the sorted WORDS (a node's subtree is a range of
 * them). A query walks it depth-first with one row of the Levenshtein
 * matrix per node and skips a subtree as soon as its row's minimum
 * exceeds k: every word below shares the prefix, so no word there is
 * closer.
 */

typedef struct fnode {
	uint32_t cp;      /* code point on the edge into the node (bits 0-23), and the
	                     fewest code points a word below has after it (24-31) */
	uint32_t first;   /* first child */
	uint32_t nchild;  /* children (bits 0-23), and the most code points a word
	                     below has after the node (24-31) */
	uint32_t word;    /* word id + 1 ending here, or 0 */
} fnode;

#define LOW24 0xFFFFFFu

typedef struct ftree {
	fnode *v;
	uint64_t n, cap;
} ftree;

/* What an archive keeps for fuzzy search (td_archive.fuzzy): the tree of
 * the words and the tree of the words reversed (code point order
 * reversed; never where a word is not valid UTF-8), both built at the
 * archive's second query (its first walks the sorted words instead), and
 * the corpus's long words with their counts (gathered at the first query
 * that needs them). */
typedef struct fstate {
	_Atomic(ftree *) fwd, rev;
	_Atomic(td_longw *) lw;
	atomic_uint queries;
	atomic_int no_rev; /* 1: the reversed tree cannot be built */
} fstate;

static pthread_mutex_t build_mu = PTHREAD_MUTEX_INITIALIZER;

static void ftree_free(ftree *t)
{
	if (t) {
		free(t->v);
		free(t);
	}
}

void td_fuzzy_free(td_archive *a)
{
	fstate *st = atomic_load(&a->fuzzy);
	if (!st)
		return;
	ftree_free(atomic_load(&st->fwd));
	ftree_free(atomic_load(&st->rev));
	td_longw *lw = atomic_load(&st->lw);
	if (lw) {
		td_longw_free(lw);
		free(lw);
	}
	free(st);
	atomic_store(&a->fuzzy, NULL);
}

/* Code point of word w at byte pos (its length in *k); words are valid
 * UTF-8 of word characters. */
static uint32_t cp_at(const char *w, size_t len, size_t pos, unsigned *k)
{
	uint32_t cp = 0;
	*k = td_utf8_decode((const uint8_t *)w + pos, len - pos, &cp);
	if (!*k) {
		*k = 1;
		cp = (uint8_t)w[pos] | 0x800000u; /* not valid: kept apart from real code points */
	}
	return cp;
}

/* Code point at byte pos of a word, ASCII inline. */
static inline uint32_t cp_fast(const char *w, size_t len, size_t pos, unsigned *k)
{
	if ((uint8_t)w[pos] < 0x80) {
		*k = 1;
		return (uint8_t)w[pos];
	}
	return cp_at(w, len, pos, k);
}

/* A group of words with the same next code point, while building. */
typedef struct bgroup {
	uint64_t lo, hi;
	uint32_t cp;
	unsigned k;
} bgroup;

typedef struct builder {
	ftree *t;
	const char *words;
	const uint64_t *off;  /* W + 1 word offsets, flat */
	const uint32_t *ids;  /* the word id of each (NULL: its index) */
	bgroup *g;            /* a stack of groups, a run per level */
	size_t ng, gcap;
} builder;

/* Fill node `node` for words [lo, hi) that share their first `bpos` bytes. */
static int build(builder *b, uint64_t node, uint64_t lo, uint64_t hi, size_t bpos, unsigned depth)
{
	ftree *t = b->t;
	if (depth > 4 * TD_MAXTOK)
		return td_fail(TD_ECORRUPT, "vocabulary not sorted");
	if (b->off[lo + 1] - b->off[lo] == bpos) {
		t->v[node].word = (b->ids ? b->ids[lo] : (uint32_t)lo) + 1;
		lo++;
	}
	/* children: one per distinct next code point, found in one pass */
	size_t g0 = b->ng;
	for (uint64_t i = lo; i < hi; i++) {
		const char *w = b->words + b->off[i];
		size_t len = b->off[i + 1] - b->off[i];
		unsigned k;
		if (len <= bpos)
			return td_fail(TD_ECORRUPT, "vocabulary not sorted");
		uint32_t c = cp_fast(w, len, bpos, &k);
		if (b->ng > g0 && b->g[b->ng - 1].cp == c) {
			b->g[b->ng - 1].hi = i + 1;
			continue;
		}
		if (b->ng == b->gcap) {
			size_t cap = b->gcap ? 2 * b->gcap : 1024;
			bgroup *ng = realloc(b->g, cap * sizeof *ng);
			if (!ng)
				return TD_ENOMEM;
			b->g = ng;
			b->gcap = cap;
		}
		b->g[b->ng++] = (bgroup){ i, i + 1, c, k };
	}
	uint64_t nch = b->ng - g0;
	if (!nch)
		return TD_OK; /* a leaf: 0 code points after it */
	if (nch > LOW24)
		return td_fail(TD_ELIMIT, "over 2^24 children in the fuzzy tree");
	if (t->n + nch > t->cap) {
		uint64_t cap = t->cap * 2 > t->n + nch ? t->cap * 2 : t->n + nch;
		fnode *v = cap > UINT32_MAX ? NULL : realloc(t->v, cap * sizeof *v);
		if (!v)
			return TD_ENOMEM;
		t->v = v;
		t->cap = cap;
	}
	uint64_t f = t->n;
	t->n += nch;
	t->v[node].first = (uint32_t)f;
	t->v[node].nchild = (uint32_t)nch;
	for (uint64_t c = 0; c < nch; c++) {
		bgroup g = b->g[g0 + c]; /* a copy: the stack may move below */
		t->v[f + c] = (fnode){ g.cp, 0, 0, 0 };
		int err = build(b, f + c, g.lo, g.hi, bpos + g.k, depth + 1);
		if (err)
			return err;
		b->ng = g0 + nch; /* what the child pushed is done */
	}
	b->ng = g0;
	/* the lengths left below: from the children's, one code point more */
	uint32_t mn = t->v[node].word ? 0 : 255, mx = 0;
	for (uint64_t ch = f; ch < f + nch; ch++) {
		uint32_t cmn = (t->v[ch].cp >> 24) + 1, cmx = (t->v[ch].nchild >> 24) + 1;
		mn = cmn < mn ? cmn : mn;
		mx = cmx > mx ? cmx : mx;
	}
	t->v[node].cp = (t->v[node].cp & LOW24) | (mn > 255 ? 255 : mn) << 24;
	t->v[node].nchild = (t->v[node].nchild & LOW24) | (mx > 255 ? 255 : mx) << 24;
	return TD_OK;
}

/* Build *t over words[off[i], off[i + 1]) for i < W, sorted (ids: their
 * word ids, NULL: i). */
static int tree_build(ftree *t, const char *words, const uint64_t *off, const uint32_t *ids, uint64_t W)
{
	t->n = 1;
	t->cap = W + 1024;
	t->v = malloc(t->cap * sizeof *t->v);
	if (!t->v)
		return TD_ENOMEM;
	t->v[0] = (fnode){ 0, 0, 0, 0 };
	builder b = { .t = t, .words = words, .off = off, .ids = ids };
	int err = W ? build(&b, 0, 0, W, 0, 0) : TD_OK;
	free(b.g);
	if (err) {
		free(t->v);
		t->v = NULL;
	}
	return err;
}

/* The archive's W + 1 word offsets, flat (malloc'd), or NULL. */
static uint64_t *word_offsets(const td_archive *a)
{
	uint64_t *off = malloc((a->W + 1) * sizeof *off);
	for (uint64_t i = 0; off && i <= a->W; i++)
		off[i] = TD_FLAT(a, f_word_off, word_off, i);
	return off;
}

/* TD_OK, or TD_ECORRUPT where the word offsets do not ascend within the
 * words' bytes by at most TD_MAXTOK. A version 3 archive stores them as
 * they are (only verify checks them); version 4 builds them from the
 * words, checked. Every walk and tree here trusts them. */
static int offsets_check(const td_archive *a)
{
	if (a->version >= 4)
		return TD_OK;
	const uint64_t end = a->bytes_size[TD_SEC_WORDS];
	for (uint64_t i = 0, prev = 0; i <= a->W; i++) {
		const uint64_t o = TD_FLAT(a, f_word_off, word_off, i);
		if (o > end || (i && (o < prev || o - prev > TD_MAXTOK)))
			return td_fail(TD_ECORRUPT, "section 'word-offsets': word %llu out of order or bounds",
				       (unsigned long long)i);
		prev = o;
	}
	return TD_OK;
}

static int get_state(const td_archive *a, fstate **out)
{
	fstate *st = atomic_load_explicit(&a->fuzzy, memory_order_acquire);
	if (st) {
		*out = st;
		return TD_OK;
	}
	int err = td_data_check(a);
	if (err)
		return err;
	if (!td_words(a))
		return TD_ECORRUPT;
	if ((err = offsets_check(a)))
		return err;
	pthread_mutex_lock(&build_mu);
	st = atomic_load_explicit(&a->fuzzy, memory_order_acquire);
	if (!st && (st = calloc(1, sizeof *st)))
		atomic_store_explicit(&((td_archive *)a)->fuzzy, st, memory_order_release);
	pthread_mutex_unlock(&build_mu);
	*out = st;
	return st ? TD_OK : TD_ENOMEM;
}

/* A word reversed for the reversed tree: its first 8 bytes as a
 * big-endian key (zeros after its end), then the rest by memcmp. */
typedef struct rkey {
	uint64_t key;
	uint64_t off; /* in the reversed words */
	uint32_t len, id;
} rkey;

static int rkey_cmp(const void *p, const void *q, void *ctx)
{
	const rkey *u = p, *v = q;
	if (u->key != v->key)
		return u->key < v->key ? -1 : 1;
	if (u->len <= 8 || v->len <= 8)
		return (u->len > v->len) - (u->len < v->len);
	const char *w = ctx;
	size_t n = (u->len < v->len ? u->len : v->len) - 8;
	int c = memcmp(w + u->off + 8, w + v->off + 8, n);
	return c ? c : (u->len > v->len) - (u->len < v->len);
}

/* Build the reversed tree of st (TD_OK, also when it cannot be: then
 * no_rev). Called under build_mu. */
static int rev_build(const td_archive *a, fstate *st)
{
	const char *words = (const char *)td_words(a);
	uint64_t W = a->W;
	uint64_t *off = word_offsets(a);
	char *rw = off ? malloc(off[W] - off[0] + 1) : NULL;
	rkey *rk = rw ? malloc((W ? W : 1) * sizeof *rk) : NULL;
	ftree *t = rk ? calloc(1, sizeof *t) : NULL;
	int err = t ? TD_OK : TD_ENOMEM, bad = 0;
	/* each word's code points in reverse order, each kept in its bytes */
	for (uint64_t i = 0; i < W && !err && !bad; i++) {
		const char *w = words + off[i];
		size_t len = off[i + 1] - off[i], at = off[i] - off[0];
		char *o = rw + at + len;
		for (size_t p = 0; p < len;) {
			unsigned k;
			uint32_t cp = cp_fast(w, len, p, &k);
			bad |= (cp & 0x800000u) != 0; /* not valid UTF-8: the reversal would not decode back */
			o -= k;
			memcpy(o, w + p, k);
			p += k;
		}
		rk[i] = (rkey){ td_word_key(rw + at, len), at, (uint32_t)len, (uint32_t)i };
	}
	if (!err && !bad && W > 1)
		qsort_r(rk, W, sizeof *rk, rkey_cmp, rw);
	/* the reversed words in their order, and their ids */
	char *sw = !err && !bad ? malloc(off[W] - off[0] + 1) : NULL;
	uint64_t *soff = sw ? malloc((W + 1) * sizeof *soff) : NULL;
	uint32_t *ids = soff ? malloc((W ? W : 1) * sizeof *ids) : NULL;
	if (!err && !bad && !ids)
		err = TD_ENOMEM;
	if (!err && !bad) {
		uint64_t at = 0;
		for (uint64_t i = 0; i < W; i++) {
			soff[i] = at;
			memcpy(sw + at, rw + rk[i].off, rk[i].len);
			at += rk[i].len;
			ids[i] = rk[i].id;
		}
		soff[W] = at;
		free(rk);
		rk = NULL;
		free(rw);
		rw = NULL;
		err = tree_build(t, sw, soff, ids, W);
	}
	free(sw);
	free(soff);
	free(ids);
	free(rk);
	free(rw);
	free(off);
	if (!err && !bad) {
		atomic_store_explicit(&st->rev, t, memory_order_release);
		return TD_OK;
	}
	free(t);
	if (bad)
		atomic_store(&st->no_rev, 1);
	return err;
}

/* The trees (*fwd NULL: not yet; *rev NULL: not yet, or never), built
 * now, or from the archive's second query on by one caller (the others go
 * on without them). Errors: building the tree (the reversed one's only
 * when now). */
static int get_trees(const td_archive *a, fstate *st, int now, const ftree **fwd, const ftree **rev)
{
	*fwd = atomic_load_explicit(&st->fwd, memory_order_acquire);
	*rev = atomic_load_explicit(&st->rev, memory_order_acquire);
	if (*fwd && (*rev || atomic_load(&st->no_rev)))
		return TD_OK;
	if (!now && atomic_fetch_add(&st->queries, 1) < 1)
		return TD_OK;
	if (now)
		pthread_mutex_lock(&build_mu);
	else if (pthread_mutex_trylock(&build_mu))
		return TD_OK;
	int err = TD_OK;
	if (!atomic_load(&st->fwd)) {
		ftree *t = calloc(1, sizeof *t);
		uint64_t *off = t ? word_offsets(a) : NULL;
		err = off ? tree_build(t, (const char *)td_words(a), off, NULL, a->W) : TD_ENOMEM;
		free(off);
		if (!err)
			atomic_store_explicit(&st->fwd, t, memory_order_release);
		else
			free(t);
	}
	if (!err && !atomic_load(&st->rev) && !atomic_load(&st->no_rev) && (err = rev_build(a, st)) && !now)
		err = TD_OK;
	pthread_mutex_unlock(&build_mu);
	*fwd = atomic_load_explicit(&st->fwd, memory_order_acquire);
	*rev = atomic_load_explicit(&st->rev, memory_order_acquire);
	return err;
}

/* The corpus's long words with their counts, gathered once (NULL: no
 * memory, or the archive's error in *err). */
static const td_longw *root_longw(const td_archive *a, fstate *st, int *err)
{
	td_longw *l = atomic_load_explicit(&st->lw, memory_order_acquire);
	if (l)
		return l;
	pthread_mutex_lock(&build_mu);
	l = atomic_load_explicit(&st->lw, memory_order_acquire);
	if (!l) {
		td_counts c;
		memset(&c, 0, sizeof c);
		*err = td_scope_counts(a, TD_ROOT, &c);
		if (!*err && !(l = malloc(sizeof *l)))
			*err = TD_ENOMEM;
		if (!*err) {
			*l = c.lw;
			memset(&c.lw, 0, sizeof c.lw);
			atomic_store_explicit(&st->lw, l, memory_order_release);
		}
		td_counts_free(&c);
	}
	pthread_mutex_unlock(&build_mu);
	return l;
}

int td_fuzzy_tree(const td_archive *a, uint64_t *nodes, uint64_t *bytes)
{
	if (td_sharded(a)) { /* one tree a shard */
		uint64_t sn = 0, sb = 0;
		for (uint32_t i = 0; i < td_archive_nshards(a); i++) {
			td_archive *s;
			uint64_t n1, b1;
			int err = td_shard_sub(a, i, &s);
			if (err || (err = td_fuzzy_tree(s, &n1, &b1)))
				return err;
			sn += n1;
			sb += b1;
		}
		if (nodes)
			*nodes = sn;
		if (bytes)
			*bytes = sb;
		return TD_OK;
	}
	fstate *st;
	const ftree *f, *r;
	int err = get_state(a, &st);
	if (err || (err = get_trees(a, st, 1, &f, &r)))
		return err;
	uint64_t n = f->n + (r ? r->n : 0);
	if (nodes)
		*nodes = n;
	if (bytes)
		*bytes = n * sizeof *f->v;
	return TD_OK;
}

/* ---------- search ---------- */

typedef struct fmatch {
	uint32_t id;      /* word id, or W + long word index */
	uint32_t dist;
	uint64_t count;
} fmatch;

typedef struct fsearch {
	const ftree *t;
	const uint32_t *q;
	unsigned m, k;
	unsigned h, th;   /* split: a word must have a prefix within th of q[0, h) */
	const td_archive *a; /* without a tree: the archive's words */
	const char *wb;
	uint32_t *rows;   /* (depth + 1) * (m + 1) */
	fmatch *v;
	size_t n, cap;
	int err;
} fsearch;

static void found(fsearch *s, uint32_t id, uint32_t dist)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		fmatch *v = realloc(s->v, cap * sizeof *v);
		if (!v) {
			s->err = TD_ENOMEM;
			return;
		}
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n].id = id;
	s->v[s->n].dist = dist;
	s->v[s->n++].count = 0;
}

/* Node nd at depth d (>= 1): its row from its parent's, then its children.
 * Values saturate at k + 1, and only the band |j - d| <= k is computed
 * (cells outside it exceed k; they keep the k + 1 of the initial rows).
 * A subtree is skipped when no word in it can come within k: for every
 * cell j, row[j] plus the gap between the query's m - j code points left
 * and the lengths left below the node (at least that many more edits).
 * With a split (h > th), ok says whether a prefix of the path is within th
 * of q[0, h); until one is, a subtree is also skipped when every cell
 * j <= h exceeds th (cell (d', h) below is at least their minimum). */
/* Row d for code point c (rmin, rmax: the fewest and most code points
 * below). */
typedef struct frow {
	uint32_t lb, mn, mh; /* with the gaps; least cell; least cell j <= h */
	unsigned lo0, hi;    /* the cells computed */
} frow;

static inline frow step(fsearch *s, unsigned d, uint32_t c, uint32_t rmin, uint32_t rmax)
{
	const unsigned m = s->m, k = s->k, h = s->h;
	const uint32_t *prev = s->rows + (size_t)(d - 1) * (m + 1);
	uint32_t *row = s->rows + (size_t)d * (m + 1);
	frow r = { k + 1, k + 1, k + 1, d > k ? d - k : 0, d + k < m ? d + k : m };
	unsigned lo = r.lo0;
	if (lo == 0) {
		row[0] = d;
		r.lb = d + (m < rmin ? rmin - m : m > rmax ? m - rmax : 0);
		r.mh = r.mn = d;
		lo = 1;
	}
	for (unsigned j = lo; j <= r.hi; j++) {
		uint32_t v = prev[j - 1] + (s->q[j - 1] != c);
		uint32_t x = prev[j] + 1, y = row[j - 1] + 1;
		v = v < x ? v : x;
		v = v < y ? v : y;
		v = v < k + 1 ? v : k + 1;
		row[j] = v;
		uint32_t left = m - j, gap = left < rmin ? rmin - left : left > rmax ? left - rmax : 0;
		r.lb = v + gap < r.lb ? v + gap : r.lb;
		r.mn = v < r.mn ? v : r.mn;
		if (j <= h)
			r.mh = v < r.mh ? v : r.mh;
	}
	return r;
}

/* Whether to go below a node whose row d is r (a word ending there has
 * been taken); *ok updated. */
static inline int below(const fsearch *s, unsigned d, const frow *r, int *ok)
{
	if (r->lb > s->k || d >= 4 * TD_MAXTOK)
		return 0;
	*ok = *ok || s->rows[(size_t)d * (s->m + 1) + s->h] <= s->th;
	return *ok || r->mh <= s->th;
}

/* The code points a child of a node at depth d (row computed in cells
 * lo0 .. hi, the least that matters being best) may have: sorted, each
 * once, in cand; their number, or -1 for any. The cells that matter (all,
 * or those up to h until ok) being at best T, the edits allowed, only a
 * child whose code point is q[j] for a cell j < jm at T keeps one (a
 * diagonal step). */
static int cands(const fsearch *s, unsigned d, int ok, uint32_t best, unsigned lo0, unsigned hi, uint32_t *cand)
{
	const uint32_t T = ok ? s->k : s->th;
	if (best < T)
		return -1;
	const uint32_t *row = s->rows + (size_t)d * (s->m + 1);
	unsigned jm = ok ? s->m : s->h, top = hi < jm - 1 ? hi : jm - 1, nc = 0;
	for (unsigned j = lo0; j <= top && jm; j++)
		if (row[j] == T) {
			unsigned x = nc;
			for (; x && cand[x - 1] > s->q[j]; x--)
				cand[x] = cand[x - 1];
			cand[x] = s->q[j];
			nc++;
		}
	unsigned u = 0;
	for (unsigned i = 0; i < nc; i++)
		if (!u || cand[u - 1] != cand[i])
			cand[u++] = cand[i];
	return (int)u;
}

static void kids(fsearch *s, uint64_t nd, unsigned d, int ok, uint32_t best, unsigned lo0, unsigned hi);

/* Node nd at depth d (>= 1): its row from its parent's, then its children.
 * Values saturate at k + 1, and only the band |j - d| <= k is computed
 * (cells outside it exceed k; they keep the k + 1 of the initial rows).
 * A subtree is skipped when no word in it can come within k: for every
 * cell j, row[j] plus the gap between the query's m - j code points left
 * and the lengths left below the node (at least that many more edits).
 * With a split (h > th), ok says whether a prefix of the path is within th
 * of q[0, h); until one is, a subtree is also skipped when every cell
 * j <= h exceeds th (cell (d', h) below is at least their minimum). */
static void walk(fsearch *s, uint64_t nd, unsigned d, int ok)
{
	const fnode *t = s->t->v;
	frow r = step(s, d, t[nd].cp & LOW24, t[nd].cp >> 24, t[nd].nchild >> 24);
	const uint32_t *row = s->rows + (size_t)d * (s->m + 1);
	if (t[nd].word && r.hi == s->m && row[s->m] <= s->k)
		found(s, t[nd].word - 1, row[s->m]);
	if (below(s, d, &r, &ok))
		kids(s, nd, d, ok, ok ? r.mn : r.mh, r.lo0, r.hi);
}

/* The children of node nd at depth d: all, or those of cands (binary
 * search among the sorted children). */
static void kids(fsearch *s, uint64_t nd, unsigned d, int ok, uint32_t best, unsigned lo0, unsigned hi)
{
	const fnode *t = s->t->v;
	const uint32_t n = t[nd].nchild & LOW24, f = t[nd].first;
	uint32_t cand[2 * TD_FUZZY_MAXK + 2];
	int nc = cands(s, d, ok, best, lo0, hi, cand);
	for (uint32_t i = 0; nc < 0 && i < n && !s->err; i++)
		walk(s, f + i, d + 1, ok);
	uint32_t from = 0;
	for (int c = 0; c < nc && !s->err; c++) {
		uint32_t l = from, r = n;
		while (l < r) {
			uint32_t mid = l + (r - l) / 2;
			if ((t[f + mid].cp & LOW24) < cand[c])
				l = mid + 1;
			else
				r = mid;
		}
		from = l;
		if (l < n && (t[f + l].cp & LOW24) == cand[c])
			walk(s, f + l, d + 1, ok);
	}
}

/* ---- the same over the sorted words, without a tree (a node is a run
 * of words sharing a prefix): an archive's first query ---- */

static inline const char *iword(const fsearch *s, uint64_t i, size_t *len)
{
	uint64_t o0 = TD_FLAT(s->a, f_word_off, word_off, i), o1 = TD_FLAT(s->a, f_word_off, word_off, i + 1);
	*len = (size_t)(o1 - o0);
	return s->wb + o0;
}

/* Word i's bytes from bpos against b[0, n): <0, 0 (b is a prefix), >0. */
static inline int icmp(const fsearch *s, uint64_t i, size_t bpos, const char *b, unsigned n)
{
	size_t len;
	const char *w = iword(s, i, &len) + bpos;
	len -= bpos;
	int c = memcmp(w, b, len < n ? len : n);
	return c ? c : len < n ? -1 : 0;
}

/* The first word of (i, hi) whose bytes from bpos do not start with b[0,
 * n) (word i's do), or hi: galloping, then binary search. */
static uint64_t iend(const fsearch *s, uint64_t i, uint64_t hi, size_t bpos, const char *b, unsigned n)
{
	uint64_t lo = i, step = 1, up;
	for (;;) {
		uint64_t p = lo + step;
		if (p >= hi || icmp(s, p, bpos, b, n)) {
			up = p < hi ? p : hi;
			break;
		}
		lo = p;
		step *= 2;
	}
	while (up - lo > 1) {
		uint64_t mid = lo + (up - lo) / 2;
		if (icmp(s, mid, bpos, b, n))
			up = mid;
		else
			lo = mid;
	}
	return up;
}

static void iwalk(fsearch *s, uint64_t lo, uint64_t hi, size_t bpos, unsigned d, int ok, uint32_t best, unsigned lo0,
		  unsigned hi_);

/* The child of code point c (n bytes, b) of a run at depth d: words
 * [i, j). */
static void ichild(fsearch *s, uint64_t i, uint64_t j, size_t bpos, unsigned d, int ok, uint32_t c, unsigned n)
{
	size_t len;
	iword(s, i, &len);
	uint32_t rmin = 0, rmax = 255;
	if (j == i + 1) { /* one word: between a quarter of its bytes left and all */
		size_t rb = len - bpos - n;
		rmin = (uint32_t)(rb + 3) / 4;
		rmax = rb < 255 ? (uint32_t)rb : 255;
	}
	frow r = step(s, d + 1, c, rmin, rmax);
	const uint32_t *row = s->rows + (size_t)(d + 1) * (s->m + 1);
	if (len == bpos + n && r.hi == s->m && row[s->m] <= s->k)
		found(s, (uint32_t)i, row[s->m]);
	if (below(s, d + 1, &r, &ok))
		iwalk(s, i, j, bpos + n, d + 1, ok, ok ? r.mn : r.mh, r.lo0, r.hi);
}

static unsigned utf8_put(uint32_t c, char *o)
{
	if (c < 0x80) {
		o[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		o[0] = (char)(0xC0 | c >> 6);
		o[1] = (char)(0x80 | (c & 0x3F));
		return 2;
	}
	if (c < 0x10000) {
		o[0] = (char)(0xE0 | c >> 12);
		o[1] = (char)(0x80 | (c >> 6 & 0x3F));
		o[2] = (char)(0x80 | (c & 0x3F));
		return 3;
	}
	o[0] = (char)(0xF0 | c >> 18);
	o[1] = (char)(0x80 | (c >> 12 & 0x3F));
	o[2] = (char)(0x80 | (c >> 6 & 0x3F));
	o[3] = (char)(0x80 | (c & 0x3F));
	return 4;
}

/* Words [lo, hi) share their first bpos bytes (d code points; row d
 * computed): their children, as kids does for a node. */
static void iwalk(fsearch *s, uint64_t lo, uint64_t hi, size_t bpos, unsigned d, int ok, uint32_t best, unsigned lo0,
		  unsigned hi_)
{
	size_t len;
	const char *w = iword(s, lo, &len);
	if (len == bpos) /* the word ending here (taken by the caller) comes first */
		lo++;
	uint32_t cand[2 * TD_FUZZY_MAXK + 2];
	int nc = cands(s, d, ok, best, lo0, hi_, cand);
	for (uint64_t i = lo; nc < 0 && i < hi && !s->err;) {
		unsigned n;
		w = iword(s, i, &len);
		uint32_t c = cp_fast(w, len, bpos, &n);
		uint64_t j = iend(s, i, hi, bpos, w + bpos, n);
		ichild(s, i, j, bpos, d, ok, c, n);
		i = j;
	}
	for (int c = 0; c < nc && !s->err; c++) {
		char b[4];
		unsigned n = utf8_put(cand[c], b);
		uint64_t l = lo, r = hi; /* the first word from bpos >= b */
		while (l < r) {
			uint64_t mid = l + (r - l) / 2;
			if (icmp(s, mid, bpos, b, n) < 0)
				l = mid + 1;
			else
				r = mid;
		}
		if (l < hi && !icmp(s, l, bpos, b, n)) {
			uint64_t j = iend(s, l, hi, bpos, b, n);
			ichild(s, l, j, bpos, d, ok, cand[c], n);
			lo = j;
		} else {
			lo = l;
		}
	}
}

/* One thread's part of a query: every nt-th child of the root of the
 * tree, then of the reversed tree when split. */
typedef struct fjob {
	fsearch s;
	unsigned ti, nt;
	const ftree *rev;  /* NULL: no split */
	const uint32_t *qr; /* the query reversed */
} fjob;

static void *fthread(void *p)
{
	fjob *j = p;
	const unsigned m = j->s.m, h = j->s.h;
	if (!j->s.t) { /* no tree yet: the sorted words */
		if (j->s.a->W)
			iwalk(&j->s, 0, j->s.a->W, 0, 0, 1, 0, 0, m < j->s.k ? m : j->s.k);
		return NULL;
	}
	for (int pass = 0; pass < (j->rev ? 2 : 1); pass++) {
		if (pass) { /* q[h, m) reversed is qr[0, m - h) */
			j->s.t = j->rev;
			j->s.q = j->qr;
			j->s.h = m - h;
		}
		const ftree *t = j->s.t;
		int ok = j->s.h <= j->s.th;
		if (j->nt == 1) /* row 0 is 0, 1, .., k */
			kids(&j->s, 0, 0, ok, 0, 0, m < j->s.k ? m : j->s.k);
		for (uint32_t i = j->ti; i < (t->v[0].nchild & LOW24) && !j->s.err && j->nt > 1; i += j->nt)
			walk(&j->s, t->v[0].first + i, 1, ok);
	}
	return NULL;
}

static int fsearch_init(fsearch *s, const td_archive *a, const ftree *t, const uint32_t *q, unsigned m, unsigned k,
			unsigned h)
{
	memset(s, 0, sizeof *s);
	s->t = t;
	s->q = q;
	s->m = m;
	s->k = k;
	s->h = h;
	s->th = k / 2;
	s->a = a;
	s->wb = (const char *)td_words(a);
	/* a node deeper than m + k has no cell within k: rows 0 .. m + k + 1 */
	size_t cells = (size_t)(m + k + 2) * (m + 1);
	s->rows = malloc(cells * sizeof *s->rows);
	if (!s->rows)
		return TD_ENOMEM;
	for (size_t j = 0; j < cells; j++)
		s->rows[j] = k + 1;
	for (unsigned j = 0; j <= m && j <= k; j++)
		s->rows[j] = j;
	return TD_OK;
}

/* Levenshtein distance of code points a[0..n) and b[0..m), or k + 1 when
 * it exceeds k. Only the band |i - j| <= k is computed (cells outside it
 * exceed k), values saturate at k + 1, and a row whose cells all exceed k
 * ends it: O(n k), not O(n m) (long words of 70,000 code points took
 * minutes a query). */
static unsigned lev(const uint32_t *a, unsigned n, const uint32_t *b, unsigned m, unsigned k)
{
	if ((n > m ? n - m : m - n) > k)
		return k + 1;
	uint32_t *row = malloc((m + 1) * sizeof *row);
	if (!row)
		return k + 1;
	const uint32_t out = k + 1;
	for (unsigned j = 0; j <= m; j++)
		row[j] = j <= k ? j : out; /* cells right of every band read as out until written */
	for (unsigned i = 1; i <= n; i++) {
		unsigned lo = i > k ? i - k : 1, hi = i + k < m ? i + k : m;
		uint32_t diag = row[lo - 1]; /* row i - 1, cell lo - 1 */
		row[lo - 1] = lo == 1 && i <= k ? i : out; /* row i, cell lo - 1: column 0 or outside the band */
		uint32_t least = row[lo - 1];
		for (unsigned j = lo; j <= hi; j++) {
			uint32_t v = diag + (a[i - 1] != b[j - 1]);
			if (row[j] + 1 < v)
				v = row[j] + 1;
			if (row[j - 1] + 1 < v)
				v = row[j - 1] + 1;
			if (v > out)
				v = out;
			diag = row[j];
			row[j] = v;
			if (v < least)
				least = v;
		}
		if (least > k) {
			free(row);
			return k + 1;
		}
	}
	unsigned d = row[m];
	free(row);
	return d > k ? k + 1 : d;
}

/* Code points of w[0..len) into cp (room for len); their number. */
static unsigned to_cps(const char *w, size_t len, uint32_t *cp)
{
	unsigned n = 0;
	for (size_t i = 0; i < len;) {
		unsigned k;
		cp[n++] = cp_at(w, len, i, &k);
		i += k;
	}
	return n;
}

typedef struct fsort {
	const td_archive *a;
	const td_longw *l;
} fsort;

static const char *match_word(const fsort *f, uint32_t id, size_t *len)
{
	if (id < f->a->W)
		return td_word_at(f->a, id, len);
	*len = f->l->len[id - f->a->W];
	return f->l->w[id - f->a->W];
}

static int id_cmp(const void *p, const void *q)
{
	const fmatch *u = p, *v = q;
	return (u->id > v->id) - (u->id < v->id);
}

/* Distance, then count descending, then word bytes. */
static int fcmp(const void *p, const void *q, void *ctx)
{
	const fmatch *u = p, *v = q;
	if (u->dist != v->dist)
		return u->dist < v->dist ? -1 : 1;
	if (u->count != v->count)
		return u->count > v->count ? -1 : 1;
	size_t ul, vl;
	const char *a = match_word(ctx, u->id, &ul), *b = match_word(ctx, v->id, &vl);
	int c = memcmp(a, b, ul < vl ? ul : vl);
	return c ? c : (ul > vl) - (ul < vl);
}

/* Where a query's dictionary matches come from: the tree, or find. */
typedef struct fsource {
	td_fuzzy_find_fn find; /* NULL: the tree */
	void *fctx;
	size_t req;
	uint32_t shard;
} fsource;

static int fuzzy_in(const td_archive *a, const char *word, size_t len, unsigned k, td_entry scope, td_counts *given,
		    unsigned nthreads, const fsource *src, td_fuzzy_fn fn, void *ctx);

/* ---------- version 5: the shards' matches merged by word ---------- */

typedef struct smatch {
	char *w;
	size_t len;
	unsigned dist;
	uint64_t count; /* signed sum (two's complement) while gathering */
} smatch;

typedef struct sgather {
	smatch *v;
	size_t n, cap;
	const uint32_t *q;  /* the query's code points (cut words are measured here) */
	unsigned m, k;
} sgather;

/* An empty gathering for query word (checked by the caller) at distance
 * k: its code points (the caller frees them), or NULL (no memory). */
static uint32_t *sg_init(sgather *g, const char *word, size_t len, unsigned k)
{
	memset(g, 0, sizeof *g);
	uint32_t *q = malloc((len + 1) * sizeof *q);
	if (q) {
		g->q = q;
		g->k = k;
		g->m = to_cps(word, len, q);
	}
	return q;
}

static int sg_add(sgather *g, unsigned dist, const char *w, size_t len, uint64_t count)
{
	if (g->n == g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 64;
		smatch *v = realloc(g->v, cap * sizeof *v);
		if (!v)
			return TD_ENOMEM;
		g->v = v;
		g->cap = cap;
	}
	char *c = malloc(len ? len : 1);
	if (!c)
		return TD_ENOMEM;
	memcpy(c, w, len);
	g->v[g->n++] = (smatch){ c, len, dist, count };
	return TD_OK;
}

static int sg_fuzzy_fn(void *ctx, unsigned dist, const char *word, size_t len, uint64_t count)
{
	return sg_add(ctx, dist, word, len, count);
}

/* A word met outside the shards' trees, with its count: kept where it is
 * close enough. */
static int sg_word(sgather *g, const char *w, size_t len, uint64_t count)
{
	uint32_t *b = malloc((len ? len : 1) * sizeof *b);
	if (!b)
		return TD_ENOMEM;
	unsigned d = lev(g->q, g->m, b, to_cps(w, len, b), g->k);
	free(b);
	return d <= g->k ? sg_add(g, d, w, len, count) : TD_OK;
}

/* A word of a file cut in two mid-word. */
static int sg_cut_fn(void *ctx, const char *w, size_t len, int sign)
{
	return sg_word(ctx, w, len, (uint64_t)(int64_t)sign);
}

static int sm_bytes(const smatch *u, const smatch *v)
{
	int c = memcmp(u->w, v->w, u->len < v->len ? u->len : v->len);
	return c ? c : (u->len > v->len) - (u->len < v->len);
}

static int sm_word_cmp(const void *p, const void *q)
{
	return sm_bytes(p, q);
}

/* Distance, then count descending, then word bytes. */
static int sm_rank_cmp(const void *p, const void *q)
{
	const smatch *u = p, *v = q;
	if (u->dist != v->dist)
		return u->dist < v->dist ? -1 : 1;
	if (u->count != v->count)
		return u->count > v->count ? -1 : 1;
	return sm_bytes(u, v);
}

static int sg_finish(sgather *gp, int err, td_fuzzy_fn fn, void *ctx);

static int shard_fuzzy(const td_archive *a, const char *word, size_t len, unsigned k, td_entry scope,
		       unsigned nthreads, const fsource *given, td_fuzzy_fn fn, void *ctx)
{
	fsource src = given ? *given : (fsource){ NULL, NULL, 0, 0 };
	if (!td_is_word(word, len))
		return td_fail(TD_ENOTWORD, "'%.*s' is not a single word", (int)(len > 64 ? 64 : len), word);
	if (k > TD_FUZZY_MAXK)
		return td_fail(TD_EINVAL, "edit distance %u over %u", k, TD_FUZZY_MAXK);
	if (scope >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no entry %u", scope);
	td_stat st;
	const td_disk_piece *p = NULL;
	uint64_t n = 0;
	int err = td_archive_stat(a, scope, &st);
	if (!err && !S_ISLNK(st.mode))
		err = td_shard_pieces(a, scope, &p, &n);
	if (err)
		return err;
	if (n == 1) { /* held whole by one shard */
		td_archive *s;
		src.shard = p[0].shard;
		return (err = td_shard_sub(a, p[0].shard, &s)) ? err
							       : fuzzy_in(s, word, len, k, p[0].local, NULL, nthreads, &src, fn, ctx);
	}
	sgather g;
	uint32_t *q = sg_init(&g, word, len, k);
	if (!q)
		return TD_ENOMEM;
	/* every shard's matches in its part of the scope, and the words cut in two */
	for (uint64_t i = 0; i < n && !err; i++) {
		td_archive *s;
		src.shard = p[i].shard;
		if (!(err = td_shard_sub(a, p[i].shard, &s)))
			err = fuzzy_in(s, word, len, k, p[i].local, NULL, nthreads, &src, sg_fuzzy_fn, &g);
	}
	if (!err && n > 1)
		err = td_shard_cut_words(a, scope, sg_cut_fn, &g);
	err = sg_finish(&g, err, fn, ctx);
	free(q);
	return err;
}

/* One line a word (counts summed), ranked, to fn; err: the gathering's.
 * Frees g's matches. */
static int sg_finish(sgather *gp, int err, td_fuzzy_fn fn, void *ctx)
{
	sgather g = *gp;
	size_t kept = 0;
	if (!err && g.n > 1)
		qsort(g.v, g.n, sizeof *g.v, sm_word_cmp);
	for (size_t i = 0; i < g.n && !err;) {
		smatch x = g.v[i++];
		while (i < g.n && !sm_bytes(&g.v[i], &x)) {
			x.count += g.v[i].count;
			free(g.v[i++].w);
		}
		if (x.count)
			g.v[kept++] = x;
		else
			free(x.w);
	}
	if (err)
		kept = 0;
	if (kept > 1)
		qsort(g.v, kept, sizeof *g.v, sm_rank_cmp);
	for (size_t i = 0; i < kept && !err; i++)
		err = fn(ctx, g.v[i].dist, g.v[i].w, g.v[i].len, g.v[i].count);
	for (size_t i = 0; i < (err && !kept ? g.n : kept); i++)
		free(g.v[i].w);
	free(g.v);
	return err;
}

typedef struct sset_fz {
	sgather *g;
	const char *word;
	size_t len;
} sset_fz;

static int sset_fz_fn(void *ctx, const td_archive *s, td_counts *c)
{
	const sset_fz *f = ctx;
	return td_counts_fuzzy(s, c, f->word, f->len, f->g->k, 0, sg_fuzzy_fn, f->g);
}

static int sset_cut_fn(void *ctx, const char *w, size_t len, int sign)
{
	return sg_cut_fn(((const sset_fz *)ctx)->g, w, len, sign);
}

static int sset_text_fn(void *ctx, const uint8_t *w, size_t len, uint64_t off)
{
	(void)off;
	td_longw *l = ctx;
	int64_t i = td_longw_intern(l, (const char *)w, len);
	if (i < 0)
		return (int)i;
	l->count[i]++;
	return TD_OK;
}

int td_shard_set_fuzzy(const td_archive *a, const td_entry *list, size_t nlist, const td_texts *texts,
		       const char *word, size_t len, unsigned k, td_fuzzy_fn fn, void *ctx)
{
	sgather g;
	uint32_t *q = sg_init(&g, word, len, k);
	if (!q)
		return TD_ENOMEM;
	/* each shard's matches over its pieces, the words cut in two, then
	 * the texts' distinct words */
	sset_fz f = { &g, word, len };
	int err = td_shard_set_counts(a, list, nlist, sset_fz_fn, sset_cut_fn, &f);
	td_longw tw = { 0 };
	for (size_t i = 0; texts && i < texts->n && !err; i++)
		err = texts->words(texts->ctx, i, sset_text_fn, &tw);
	for (size_t i = 0; i < tw.n && !err; i++)
		err = sg_word(&g, tw.w[i], tw.len[i], tw.count[i]);
	td_longw_free(&tw);
	err = sg_finish(&g, err, fn, ctx);
	free(q);
	return err;
}

int td_fuzzy(const td_archive *a, const char *word, size_t len, unsigned k, td_entry scope, unsigned nthreads,
	     td_fuzzy_fn fn, void *ctx)
{
	if (td_sharded(a) && scope == TD_ROOT && td_is_word(word, len) && k <= TD_FUZZY_MAXK) {
		int used, err = td_fzix_fuzzy(a, word, len, k, fn, ctx, &used); /* one search, no shard opened */
		if (err || used)
			return err;
	}
	if (td_sharded(a))
		return shard_fuzzy(a, word, len, k, scope, nthreads, NULL, fn, ctx);
	return fuzzy_in(a, word, len, k, scope, NULL, nthreads, NULL, fn, ctx);
}

int td_fuzzy_given(const td_archive *a, const char *word, size_t len, unsigned k, td_entry scope,
		   td_fuzzy_find_fn find, void *fctx, size_t req, td_fuzzy_fn fn, void *ctx)
{
	fsource src = { find, fctx, req, 0 };
	if (td_sharded(a))
		return shard_fuzzy(a, word, len, k, scope, 1, &src, fn, ctx);
	return fuzzy_in(a, word, len, k, scope, NULL, 1, &src, fn, ctx);
}

int td_counts_fuzzy(const td_archive *a, td_counts *c, const char *word, size_t len, unsigned k, unsigned nthreads,
		    td_fuzzy_fn fn, void *ctx)
{
	return fuzzy_in(a, word, len, k, TD_ROOT, c, nthreads, NULL, fn, ctx);
}

/* td_fuzzy over the scope's counts, or over *given (taken over: freed). */
static int fuzzy_in(const td_archive *a, const char *word, size_t len, unsigned k, td_entry scope, td_counts *given,
		    unsigned nthreads, const fsource *src, td_fuzzy_fn fn, void *ctx)
{
	td_counts c;
	memset(&c, 0, sizeof c);
	if (given) {
		c = *given;
		memset(given, 0, sizeof *given);
	}
	int err = TD_OK;
	if (!td_is_word(word, len))
		err = td_fail(TD_ENOTWORD, "'%.*s' is not a single word", (int)(len > 64 ? 64 : len), word);
	else if (k > TD_FUZZY_MAXK)
		err = td_fail(TD_EINVAL, "edit distance %u over %u", k, TD_FUZZY_MAXK);
	else if (scope >= a->meta.nentries)
		err = td_fail(TD_EINVAL, "no entry %u", scope);
	fstate *st = NULL;
	uint32_t *q = NULL;
	td_fuzzy_found fd = { NULL, 0 };
	int have_fd = 0;
	if (!err && src && src->find) {
		err = src->find(src->fctx, src->req, src->shard, &fd);
		have_fd = !err;
		if (err == TD_ENOGPU)
			err = TD_OK;
		if (have_fd && !(err = td_data_check(a)) && !td_words(a))
			err = TD_ECORRUPT;
	}
	if (!err && !have_fd)
		err = get_state(a, &st);
	const ftree *fwd = NULL, *rev = NULL;
	if (!err && st)
		err = get_trees(a, st, 0, &fwd, &rev);
	if (!err && !(q = malloc(2 * (len + 1) * sizeof *q)))
		err = TD_ENOMEM;
	if (err) {
		td_counts_free(&c);
		return err;
	}
	unsigned m = to_cps(word, len, q);
	/* the scope's counts: the corpus's are WORD_FREQ; a long word (more
	 * than TD_MAXTOK bytes, so 64 code points or more) only matters to a
	 * query of 64 - k code points or more */
	const td_pack *wf = NULL;
	const td_longw *lw = &c.lw;
	int need_long = a->meta.nlongwords && m + k >= TD_MAXTOK / 4 + 1;
	if (given)
		; /* the caller's counts */
	else if (scope != TD_ROOT || (need_long && !st))
		err = td_scope_counts(a, scope, &c);
	else if (!(wf = td_word_freq(a)))
		err = TD_ECORRUPT;
	else if (need_long && !(lw = root_longw(a, st, &err)) && !err)
		err = TD_ENOMEM;
	/* split in two halves when the reversed tree is there: a word within k
	 * has a prefix within k / 2 of q[0, h), or a suffix within k / 2 of
	 * q[h, m) (the halves' distances add up to at most k), found in the
	 * tree and in the reversed tree */
	unsigned h = m / 2;
	uint32_t *qr = q + len + 1;
	if (!fwd || !k || h <= k / 2 || m - h <= k / 2)
		rev = NULL;
	for (unsigned i = 0; rev && i < m; i++)
		qr[i] = q[m - 1 - i];
	if (!rev)
		h = 0;
	/* the tree, in parallel over the root's children for a large one */
	unsigned nt = nthreads ? nthreads : (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
	if (nt < 1 || a->W < 1000000 || k < 2 || have_fd || rev || !fwd)
		nt = 1;
	if (nt > 64)
		nt = 64;
	fjob jobs[64];
	pthread_t th[64];
	int created[64] = { 0 };
	unsigned started = 0;
	/* the dictionary's words (tree or sorted list) have at most TD_MAXTOK
	 * bytes, so code points: a longer query can match only long words, and
	 * fsearch_init's (m + k + 2) x (m + 1) rows would be O(m^2) memory (19.6
	 * GB for a query of 70,000 code points) */
	const int dict = m <= TD_MAXTOK + k;
	for (unsigned i = 0; i < nt && !err && !have_fd && dict; i++) {
		jobs[i].ti = i;
		jobs[i].nt = nt;
		jobs[i].rev = rev;
		jobs[i].qr = qr;
		if ((err = fsearch_init(&jobs[i].s, a, fwd, q, m, k, h))) {
			free(jobs[i].s.rows);
			break;
		}
		started++;
		if (nt > 1)
			created[i] = pthread_create(&th[i], NULL, fthread, &jobs[i]) == 0;
		if (nt > 1 && !created[i])
			jobs[i].s.err = TD_ENOMEM;
	}
	if (!err && nt == 1 && started)
		fthread(&jobs[0]);
	for (unsigned i = 0; i < started; i++)
		if (created[i])
			pthread_join(th[i], NULL);
	fsearch all;
	memset(&all, 0, sizeof all);
	for (size_t i = 0; i < fd.n && have_fd && !err; i++) {
		uint32_t id = fd.v[i] >> 2, d = fd.v[i] & 3;
		if (id >= a->W || d > k)
			err = td_fail(TD_ECORRUPT, "fuzzy match: word %u of %llu at distance %u", id,
				      (unsigned long long)a->W, d);
		else
			found(&all, id, d);
		if (!err)
			err = all.err;
	}
	for (unsigned i = 0; i < started; i++) {
		if (jobs[i].s.err)
			err = jobs[i].s.err;
		for (size_t j = 0; j < jobs[i].s.n && !err; j++) {
			found(&all, jobs[i].s.v[j].id, jobs[i].s.v[j].dist);
			err = all.err;
		}
		free(jobs[i].s.v);
		free(jobs[i].s.rows);
	}
	/* a word both trees found, once */
	size_t kept = 0;
	if (!err && rev && all.n > 1) {
		qsort(all.v, all.n, sizeof *all.v, id_cmp);
		for (size_t i = 0; i < all.n; i++)
			if (!kept || all.v[kept - 1].id != all.v[i].id)
				all.v[kept++] = all.v[i];
		all.n = kept;
	}
	/* the scope's words among them, and its long words */
	kept = 0;
	for (size_t i = 0; i < all.n && !err; i++) {
		uint64_t n = wf ? td_pack_get(wf, all.v[i].id) : c.cnt[all.v[i].id];
		if (n) {
			all.v[kept] = all.v[i];
			all.v[kept++].count = n;
		}
	}
	all.n = kept;
	for (size_t i = 0; i < lw->n && !err; i++) {
		if (lw->len[i] > 4 * (size_t)(m + k))
			continue; /* over m + k code points */
		uint32_t *b = malloc(lw->len[i] * sizeof *b);
		if (!b) {
			err = TD_ENOMEM;
			break;
		}
		unsigned d = lev(q, m, b, to_cps(lw->w[i], lw->len[i], b), k);
		free(b);
		if (d <= k) {
			found(&all, (uint32_t)(a->W + i), d);
			if (!(err = all.err))
				all.v[all.n - 1].count = lw->count[i];
		}
	}
	fsort fs = { a, lw };
	if (!err && all.n > 1)
		qsort_r(all.v, all.n, sizeof *all.v, fcmp, &fs);
	for (size_t i = 0; i < all.n && !err; i++) {
		size_t wl;
		const char *w = match_word(&fs, all.v[i].id, &wl);
		err = fn(ctx, all.v[i].dist, w, wl, all.v[i].count);
	}
	free(all.v);
	td_counts_free(&c);
	free(q);
	return err;
}
