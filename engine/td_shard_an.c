/* td_shard_an: the analytics of a version 5 archive: per-shard answers merged by word bytes, plus the runs across cuts. */
#include "td_analytics_int.h"
#include "td_query_int.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "td_shard.h"
#include "td_tokenize.h"

/*
 * Each shard answers for its pieces as a format 4 archive does (its word
 * ids are its own: results are merged by word bytes). What no shard sees
 * lies at the cuts of a file split over shards (engine/README.md,
 * "Analytics on shards"):
 *
 * - the builder cuts a file after an ASCII byte that is not a word
 *   character (td_build.c, is_cut_byte), so normally no word is cut and
 *   the only runs missing are those across the cut: the last words of one
 *   piece with the first of the next;
 * - when it finds no such byte within CUT_SLACK past the shard size it
 *   cuts anywhere, even inside a word or a UTF-8 character: the shards
 *   then count the fragments as words of their own.
 *
 * Both are fixed the same way, per "zone": a cut at a sync point (a
 * position after an ASCII non-word byte, or a file's start or end; the
 * text tokenizes the same from there whatever precedes it) is the empty
 * zone [c, c); a cut elsewhere widens to [zs, ze), the nearest sync points
 * around it. Around each zone the file's text is read (a few words either
 * side), tokenized as the file (the truth) and piece by piece (what the
 * shards saw); every run of m words touching the zone is added from the
 * truth (+1) and taken away from the pieces' view (-1). A run touching two
 * zones is counted at the first one only: its first word must lie at or
 * after the previous zone's end.
 */

/* The bytes the builder cuts after (td_build.c's is_cut_byte). */
static int is_sep(uint8_t c)
{
	return c < 0x80 && !(c >= '0' && c <= '9') && !(c >= 'A' && c <= 'Z') && !(c >= 'a' && c <= 'z') && c != '_';
}

/* ---------- reading around the cuts ---------- */

typedef struct ctok {
	uint64_t s, e; /* word bytes [s, e) of the region */
} ctok;

typedef struct toks {
	ctok *v;
	size_t n, cap;
} toks;

static int toks_push(toks *t, uint64_t s, uint64_t e)
{
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 64;
		ctok *v = realloc(t->v, cap * sizeof *v);
		if (!v)
			return TD_ENOMEM;
		t->v = v;
		t->cap = cap;
	}
	t->v[t->n++] = (ctok){ s, e };
	return TD_OK;
}

/* The words of buf[from, to) tokenized on their own (as td_text_words). */
static int tokenize(const uint8_t *buf, uint64_t from, uint64_t to, toks *t)
{
	for (uint64_t i = from; i < to;) {
		unsigned k = td_word_char(buf + i, to - i);
		if (!k) {
			i++;
			continue;
		}
		uint64_t j = i;
		while (j < to && (k = td_word_char(buf + j, to - j)))
			j += k;
		int err = toks_push(t, i, j);
		if (err)
			return err;
		i = j;
	}
	return TD_OK;
}

/* A split file being fixed. */
typedef struct cfile {
	const td_archive *a;
	td_entry e;
	uint64_t size;
	const td_disk_piece *pc;
	uint64_t npc;
	uint8_t *buf;
	size_t cap;
} cfile;

/* File bytes [off, off + len) into cf->buf. */
static int cf_read(cfile *cf, uint64_t off, uint64_t len)
{
	if (len > cf->cap) {
		size_t cap = (size_t)len;
		uint8_t *b = realloc(cf->buf, cap ? cap : 1);
		if (!b)
			return TD_ENOMEM;
		cf->buf = b;
		cf->cap = cap;
	}
	size_t got = 0;
	int err = td_shard_read(cf->a, cf->e, off, cf->buf, (size_t)len, &got, NULL, NULL);
	if (!err && got != len)
		err = td_fail(TD_ECORRUPT, "entry %u: shorter than its size", cf->e);
	return err;
}

/* The greatest sync point < c (c > 0). */
static int sync_back(cfile *cf, uint64_t c, uint64_t *out)
{
	for (uint64_t chunk = 4096;; chunk *= 4) {
		uint64_t lo = c > chunk ? c - chunk : 0;
		int err = cf_read(cf, lo, c - lo);
		if (err)
			return err;
		for (uint64_t p = c - 1; p > lo; p--)
			if (is_sep(cf->buf[p - 1 - lo])) {
				*out = p;
				return TD_OK;
			}
		if (lo == 0) {
			*out = 0;
			return TD_OK;
		}
	}
}

/* The least sync point > c (c < size). */
static int sync_fwd(cfile *cf, uint64_t c, uint64_t *out)
{
	for (uint64_t chunk = 4096, at = c; at < cf->size; chunk *= 4) {
		uint64_t hi = cf->size - at > chunk ? at + chunk : cf->size;
		int err = cf_read(cf, at, hi - at);
		if (err)
			return err;
		for (uint64_t q = at; q < hi; q++)
			if (is_sep(cf->buf[q - at])) {
				*out = q + 1;
				return TD_OK;
			}
		at = hi;
	}
	*out = cf->size;
	return TD_OK;
}

typedef struct zone {
	uint64_t zs, ze;
} zone;

/* Words of the region's part [from, to) in the pieces' view: tokenized
 * piece by piece (cuts inside it split the text). */
static int tokenize_pieces(const cfile *cf, uint64_t A, uint64_t from, uint64_t to, toks *t)
{
	uint64_t s = from;
	for (uint64_t k = 1; k <= cf->npc && s < to; k++) {
		uint64_t cut = k < cf->npc ? cf->pc[k].start : cf->size;
		if (cut <= s)
			continue;
		uint64_t e = cut < to ? cut : to;
		int err = tokenize(cf->buf, s - A, e - A, t);
		if (err)
			return err;
		s = e;
	}
	return TD_OK;
}

/* A run of m words near a cut: its words are buf[t[k].s, t[k].e), its first
 * byte is file offset base + t[0].s; sign +1 (the file has it, no shard
 * does) or -1 (a shard has it, the file does not). */
typedef int (*run_fn)(void *ctx, td_entry e, const uint8_t *buf, const ctok *t, unsigned m, uint64_t base,
		      int sign);

/* Emit the runs of ts (region [A, B)) touching zone z first (none before pe);
 * with `cuts`, a run must lie within one piece. */
static int emit_runs(const cfile *cf, const toks *ts, uint64_t A, zone z, uint64_t pe, unsigned m, int sign,
		     int cuts, run_fn fn, void *ctx)
{
	for (size_t i = 0; i + m <= ts->n; i++) {
		uint64_t s = A + ts->v[i].s, e = A + ts->v[i + m - 1].e;
		if (s < pe || s >= z.ze || e <= z.zs)
			continue;
		if (cuts) {
			int across = 0;
			for (uint64_t k = 1; k < cf->npc && !across; k++)
				across = cf->pc[k].start > s && cf->pc[k].start < e;
			if (across)
				continue;
		}
		int err = fn(ctx, cf->e, cf->buf, ts->v + i, m, A, sign);
		if (err)
			return err;
	}
	return TD_OK;
}

/* Words in the region's part [from, to), in both views (the fewer). */
static int words_both(const cfile *cf, uint64_t A, uint64_t from, uint64_t to, size_t *n)
{
	toks t = { 0 }, p = { 0 };
	int err = tokenize(cf->buf, from - A, to - A, &t);
	if (!err)
		err = tokenize_pieces(cf, A, from, to, &p);
	*n = t.n < p.n ? t.n : p.n;
	free(t.v);
	free(p.v);
	return err;
}

/* The runs of m words of zone z of file cf (pe: the previous zone's end). */
static int fix_zone(cfile *cf, zone z, uint64_t pe, unsigned m, run_fn fn, void *ctx)
{
	uint64_t A = z.zs, B = z.ze;
	int err = TD_OK;
	size_t n;
	/* m - 1 words before the zone (or up to pe), starting at a sync point */
	for (uint64_t back = 1024; m > 1 && A > pe; back *= 4) {
		uint64_t a0 = z.zs - pe > back ? z.zs - back : pe, from = a0 ? a0 - 1 : 0;
		if ((err = cf_read(cf, from, z.zs - from)))
			return err;
		uint64_t p = a0;
		if (a0 > pe)
			while (p < z.zs && !is_sep(cf->buf[p - 1 - from]))
				p++;
		toks t = { 0 };
		err = tokenize(cf->buf, p - from, z.zs - from, &t);
		n = t.n;
		free(t.v);
		if (err)
			return err;
		if (n >= m - 1 || a0 == pe) {
			A = p;
			break;
		}
	}
	/* m - 1 words after it in both views (or up to the end) */
	for (uint64_t fwd = 1024; m > 1 && B < cf->size; fwd *= 4) {
		uint64_t b0 = cf->size - z.ze > fwd ? z.ze + fwd : cf->size;
		if ((err = cf_read(cf, z.ze, b0 - z.ze)))
			return err;
		uint64_t p = b0;
		if (b0 < cf->size)
			while (p > z.ze && !is_sep(cf->buf[p - 1 - z.ze]))
				p--;
		if ((err = words_both(cf, z.ze, z.ze, p, &n)))
			return err;
		if (n >= m - 1 || b0 == cf->size) {
			B = p;
			break;
		}
	}
	if ((err = cf_read(cf, A, B - A)))
		return err;
	toks t = { 0 }, p = { 0 };
	if (!(err = tokenize(cf->buf, 0, B - A, &t)) && !(err = tokenize_pieces(cf, A, A, B, &p)) &&
	    !(err = emit_runs(cf, &t, A, z, pe, m, +1, 0, fn, ctx)))
		err = emit_runs(cf, &p, A, z, pe, m, -1, 1, fn, ctx);
	free(t.v);
	free(p.v);
	return err;
}

/* Every run of m words that the shards miscount in split file e. */
static int fix_file(const td_archive *a, td_entry e, unsigned m, run_fn fn, void *ctx)
{
	cfile cf = { .a = a, .e = e };
	td_stat st;
	int err = td_archive_stat(a, e, &st);
	if (!err)
		err = td_shard_pieces(a, e, &cf.pc, &cf.npc);
	if (err)
		return err;
	cf.size = st.size;
	zone *zv = calloc(cf.npc ? cf.npc : 1, sizeof *zv);
	size_t nz = 0;
	if (!zv)
		return TD_ENOMEM;
	for (uint64_t k = 1; k < cf.npc && !err; k++) {
		uint64_t c = cf.pc[k].start;
		zone z = { c, c };
		if (c == 0 || c >= cf.size)
			continue; /* an empty piece: nothing is cut */
		if ((err = cf_read(&cf, c - 1, 1)))
			break;
		if (!is_sep(cf.buf[0]) && ((err = sync_back(&cf, c, &z.zs)) || (err = sync_fwd(&cf, c, &z.ze))))
			break;
		if (m == 1 && z.zs == z.ze)
			continue; /* a word never spans a cut at a sync point */
		if (nz && z.zs < zv[nz - 1].ze) { /* overlaps the last one: one zone */
			zv[nz - 1].ze = z.ze > zv[nz - 1].ze ? z.ze : zv[nz - 1].ze;
			continue;
		}
		zv[nz++] = z;
	}
	for (size_t i = 0; i < nz && !err; i++)
		err = fix_zone(&cf, zv[i], i ? zv[i - 1].ze : 0, m, fn, ctx);
	free(zv);
	free(cf.buf);
	return err;
}

/* fix_file over every split file of scope. */
static int fix_scope(const td_archive *a, td_entry scope, unsigned m, run_fn fn, void *ctx)
{
	td_entry *v;
	size_t n;
	int err = td_shard_split_files(a, scope, &v, &n);
	for (size_t i = 0; i < n && !err; i++)
		err = fix_file(a, v[i], m, fn, ctx);
	free(v);
	return err;
}

/* ---------- the scope's pieces ---------- */

/* The pieces of `scope` (none for a symbolic link): its own (a file) or
 * its directory in each shard that holds part of it. */
static int scope_pieces(const td_archive *a, td_entry scope, const td_disk_piece **p, uint64_t *n)
{
	*p = NULL;
	*n = 0;
	if (scope >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no entry %u", scope);
	td_stat st;
	int err = td_archive_stat(a, scope, &st);
	if (err || S_ISLNK(st.mode))
		return err;
	return td_shard_pieces(a, scope, p, n);
}

/* ---------- merging sorted runs by bytes ---------- */

/* The cuts' runs as one more sorted stream: items index lw, counts are
 * signed (two's complement). */
typedef struct corr {
	td_grams g;
	uint64_t cap;
} corr;

static int corr_run(void *ctx, td_entry e, const uint8_t *buf, const ctok *t, unsigned m, uint64_t base, int sign)
{
	(void)e;
	(void)base;
	corr *c = ctx;
	td_grams *g = &c->g;
	if (g->n == c->cap) {
		uint64_t cap = c->cap ? 2 * c->cap : 64;
		uint32_t *k = realloc(g->key, cap * m * sizeof *k);
		if (k)
			g->key = k;
		uint64_t *n = realloc(g->cnt, cap * sizeof *n);
		if (n)
			g->cnt = n;
		if (!k || !n)
			return TD_ENOMEM;
		c->cap = cap;
	}
	for (unsigned k = 0; k < m; k++) {
		int64_t i = td_longw_intern(&g->lw, (const char *)buf + t[k].s, (size_t)(t[k].e - t[k].s));
		if (i < 0)
			return (int)i;
		g->key[g->n * m + k] = (uint32_t)i;
	}
	g->cnt[g->n++] = (uint64_t)(int64_t)sign;
	return TD_OK;
}

static int bytes_cmp(const char *p, size_t pl, const char *q, size_t ql)
{
	int c = memcmp(p, q, pl < ql ? pl : ql);
	return c ? c : (pl > ql) - (pl < ql);
}

/* Run i of g against run j of h, by bytes. */
static int run_cmp(const td_grams *g, uint64_t i, const td_grams *h, uint64_t j)
{
	for (unsigned k = 0; k < g->m; k++) {
		size_t gl, hl;
		const char *gw = td_grams_word(g, i, k, &gl), *hw = td_grams_word(h, j, k, &hl);
		int c = bytes_cmp(gw, gl, hw, hl);
		if (c)
			return c;
	}
	return 0;
}

static int corr_cmp(const void *p, const void *q, void *ctx)
{
	const td_grams *g = ctx;
	return run_cmp(g, *(const uint64_t *)p, g, *(const uint64_t *)q);
}

/* Sort the cuts' runs by bytes. */
static int corr_sort(corr *c)
{
	td_grams *g = &c->g;
	uint64_t n = g->n, m = g->m, *ix = malloc((n ? n : 1) * sizeof *ix), *cnt = malloc((n ? n : 1) * sizeof *cnt);
	uint32_t *key = malloc((n ? n : 1) * m * sizeof *key);
	int err = ix && cnt && key ? TD_OK : TD_ENOMEM;
	for (uint64_t i = 0; !err && i < n; i++)
		ix[i] = i;
	if (!err && n > 1)
		qsort_r(ix, n, sizeof *ix, corr_cmp, g);
	for (uint64_t i = 0; !err && i < n; i++) {
		memcpy(key + i * m, g->key + ix[i] * m, m * sizeof *key);
		cnt[i] = g->cnt[ix[i]];
	}
	if (!err) {
		free(g->key);
		free(g->cnt);
		g->key = key;
		g->cnt = cnt;
		key = NULL;
		cnt = NULL;
	}
	free(ix);
	free(cnt);
	free(key);
	return err;
}

/* The merged runs of a scope: every shard's, plus the cuts'. */
typedef struct merged {
	td_grams *g;   /* ng streams; the last is the cuts' */
	size_t ng;
	corr c;
} merged;

static void merged_free(merged *mg)
{
	for (size_t i = 0; i + 1 < mg->ng; i++)
		td_grams_free(&mg->g[i]);
	free(mg->g);
	td_grams_free(&mg->c.g);
}

/* Gather the runs of m words of scope's pieces and cuts. */
static int merged_init(merged *mg, const td_archive *a, td_entry scope, unsigned m)
{
	memset(mg, 0, sizeof *mg);
	const td_disk_piece *p;
	uint64_t n;
	int err = scope_pieces(a, scope, &p, &n);
	if (err)
		return err;
	if (!(mg->g = calloc(n + 1, sizeof *mg->g)))
		return TD_ENOMEM;
	for (uint64_t k = 0; k < n && !err; k++) {
		td_archive *s;
		if (!(err = td_shard_sub(a, p[k].shard, &s)) && !(err = td_scope_grams(s, p[k].local, m, &mg->g[k])))
			mg->ng++;
	}
	mg->c.g.m = m;
	if (!err && n > 1 && !(err = fix_scope(a, scope, m, corr_run, &mg->c)))
		err = corr_sort(&mg->c);
	return err;
}

/* Each distinct run of the merged streams in byte order with its total
 * count (runs totalling 0 are left out). */
typedef int (*merged_fn)(void *ctx, const char *const *w, const size_t *len, unsigned m, uint64_t count);

typedef struct head {
	const td_grams *g;
	uint64_t i;
} head;

static int head_less(const head *x, const head *y)
{
	return run_cmp(x->g, x->i, y->g, y->i) < 0;
}

static void sift_down(head *h, size_t n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		if (l < n && head_less(&h[l], &h[m]))
			m = l;
		if (l + 1 < n && head_less(&h[l + 1], &h[m]))
			m = l + 1;
		if (m == i)
			return;
		head t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

static int merged_walk(merged *mg, merged_fn fn, void *ctx)
{
	size_t nh = 0;
	head *h = malloc((mg->ng + 1) * sizeof *h);
	if (!h)
		return TD_ENOMEM;
	for (size_t i = 0; i < mg->ng; i++)
		if (mg->g[i].n)
			h[nh++] = (head){ &mg->g[i], 0 };
	if (mg->c.g.n)
		h[nh++] = (head){ &mg->c.g, 0 };
	for (size_t i = nh / 2; i-- > 0;)
		sift_down(h, nh, i);
	int err = TD_OK;
	const unsigned m = mg->c.g.m;
	while (nh && !err) {
		head top = h[0];
		const char *w[TD_PHRASE_MAX];
		size_t wl[TD_PHRASE_MAX];
		for (unsigned k = 0; k < m; k++)
			w[k] = td_grams_word(top.g, top.i, k, &wl[k]);
		uint64_t total = 0;
		/* every stream's copies of this run (a stream may repeat one: the cuts') */
		while (nh && !run_cmp(h[0].g, h[0].i, top.g, top.i)) {
			total += h[0].g->cnt[h[0].i];
			if (++h[0].i == h[0].g->n)
				h[0] = h[--nh];
			sift_down(h, nh, 0);
		}
		if (total)
			err = fn(ctx, w, wl, m, total);
	}
	free(h);
	return err;
}

/* ---------- top words, term vector, n-grams ---------- */

/* The best K of a stream in byte order, ranked by count descending then
 * bytes: as the stream is in byte order, a later run with the same count
 * ranks after an earlier one. A heap with the worst kept on top. */
typedef struct kept {
	uint64_t count, seq;
	char *w;        /* the words, each followed by a NUL */
	size_t len[TD_PHRASE_MAX];
} kept;

typedef struct best {
	kept *h;
	size_t n, cap;  /* cap 0: all */
	size_t alloc;
	uint64_t seq;
} best;

/* x ranks after y. */
static int worse(const kept *x, const kept *y)
{
	return x->count != y->count ? x->count < y->count : x->seq > y->seq;
}

static void best_down(best *b, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		if (l < b->n && worse(&b->h[l], &b->h[m]))
			m = l;
		if (l + 1 < b->n && worse(&b->h[l + 1], &b->h[m]))
			m = l + 1;
		if (m == i)
			return;
		kept t = b->h[i];
		b->h[i] = b->h[m];
		b->h[m] = t;
		i = m;
	}
}

static int best_fn(void *ctx, const char *const *w, const size_t *len, unsigned m, uint64_t count)
{
	best *b = ctx;
	kept k = { count, b->seq++, NULL, { 0 } };
	if (b->cap && b->n == b->cap && !worse(&b->h[0], &k))
		return TD_OK;
	size_t all = 0;
	for (unsigned i = 0; i < m; i++)
		all += len[i] + 1;
	if (!(k.w = malloc(all)))
		return TD_ENOMEM;
	char *p = k.w;
	for (unsigned i = 0; i < m; i++) {
		memcpy(p, w[i], len[i]);
		p[len[i]] = 0;
		p += len[i] + 1;
		k.len[i] = len[i];
	}
	if (b->cap && b->n == b->cap) { /* replaces the worst kept */
		free(b->h[0].w);
		b->h[0] = k;
		best_down(b, 0);
		return TD_OK;
	}
	if (b->n == b->alloc) {
		size_t cap = b->alloc ? 2 * b->alloc : 1024;
		kept *h = realloc(b->h, cap * sizeof *h);
		if (!h) {
			free(k.w);
			return TD_ENOMEM;
		}
		b->h = h;
		b->alloc = cap;
	}
	size_t i = b->n++;
	b->h[i] = k;
	while (i && worse(&b->h[(i - 1) / 2], &b->h[i])) {
		kept t = b->h[i];
		b->h[i] = b->h[(i - 1) / 2];
		b->h[(i - 1) / 2] = t;
		i = (i - 1) / 2;
	}
	return TD_OK;
}

static int kept_cmp(const void *p, const void *q)
{
	const kept *x = p, *y = q;
	return worse(y, x) ? -1 : worse(x, y) ? 1 : 0;
}

/* The K best runs of m words of scope, best first. */
static int best_runs(const td_archive *a, td_entry scope, unsigned m, uint64_t K, best *b)
{
	memset(b, 0, sizeof *b);
	b->cap = K > (1u << 26) ? 0 : (size_t)K;
	if (b->cap && !(b->h = malloc(b->cap * sizeof *b->h)))
		return TD_ENOMEM;
	b->alloc = b->cap;
	merged mg;
	int err = merged_init(&mg, a, scope, m);
	if (!err)
		err = merged_walk(&mg, best_fn, b);
	merged_free(&mg);
	if (!err && b->n > 1)
		qsort(b->h, b->n, sizeof *b->h, kept_cmp);
	if (!err && K && b->n > K)
		b->n = (size_t)K;
	return err;
}

static void best_free(best *b)
{
	for (size_t i = 0; i < b->n; i++)
		free(b->h[i].w);
	free(b->h);
}

/* The one shard of a scope held whole by one shard, or NULL (then *local
 * is unset): a file in one piece, or a directory in one shard. */
static int one_shard(const td_archive *a, td_entry scope, td_archive **s, td_entry *local)
{
	const td_disk_piece *p;
	uint64_t n;
	*s = NULL;
	int err = scope_pieces(a, scope, &p, &n);
	if (err || n != 1)
		return err;
	if ((err = td_shard_sub(a, p[0].shard, s)))
		return err;
	*local = p[0].local;
	return TD_OK;
}

int td_shard_top_words(const td_archive *a, td_entry scope, uint64_t n, td_word_fn fn, void *ctx)
{
	td_archive *s;
	td_entry local = 0;
	int err = one_shard(a, scope, &s, &local);
	if (err || s)
		return err ? err : td_top_words(s, local, n, fn, ctx);
	best b;
	err = best_runs(a, scope, 1, n, &b);
	for (size_t i = 0; i < b.n && !err; i++)
		err = fn(ctx, b.h[i].w, b.h[i].len[0], b.h[i].count);
	best_free(&b);
	return err;
}

typedef struct vec_ctx {
	td_word_fn fn;
	void *ctx;
} vec_ctx;

static int vec_fn(void *ctx, const char *const *w, const size_t *len, unsigned m, uint64_t count)
{
	(void)m;
	const vec_ctx *v = ctx;
	return v->fn(v->ctx, w[0], len[0], count);
}

int td_shard_term_vector(const td_archive *a, td_entry scope, td_word_fn fn, void *ctx)
{
	td_archive *s;
	td_entry local = 0;
	int err = one_shard(a, scope, &s, &local);
	if (err || s)
		return err ? err : td_term_vector(s, local, fn, ctx);
	/* streamed: the shards' words in byte order, merged */
	merged mg;
	vec_ctx v = { fn, ctx };
	if (!(err = merged_init(&mg, a, scope, 1)))
		err = merged_walk(&mg, vec_fn, &v);
	merged_free(&mg);
	return err;
}

int td_shard_ngrams(const td_archive *a, td_entry scope, unsigned n, uint64_t top, td_ngram_fn fn, void *ctx)
{
	if (n < 2 || n > TD_PHRASE_MAX)
		return td_fail(TD_EINVAL, "n-gram length %u outside 2..%u", n, TD_PHRASE_MAX);
	td_archive *s;
	td_entry local = 0;
	int err = one_shard(a, scope, &s, &local);
	if (err || s)
		return err ? err : td_ngrams(s, local, n, top, fn, ctx);
	best b;
	err = best_runs(a, scope, n, top, &b);
	for (size_t i = 0; i < b.n && !err; i++) {
		const char *w[TD_PHRASE_MAX];
		const char *p = b.h[i].w;
		for (unsigned k = 0; k < n; k++) {
			w[k] = p;
			p += b.h[i].len[k] + 1;
		}
		err = fn(ctx, w, b.h[i].len, n, b.h[i].count);
	}
	best_free(&b);
	return err;
}

/* ---------- phrases ---------- */

typedef struct pmatch {
	const char *w[TD_PHRASE_MAX];
	size_t len[TD_PHRASE_MAX];
	unsigned m;
	int64_t count;
	td_hits *add, *drop;      /* searches: the hits to add and to take away */
	int files;                /* files: the file of each match, and its sign */
	td_entry *fe;
	int *fsign;
	size_t nf, fcap;
} pmatch;

static int pmatch_init(pmatch *pm, const char *p, size_t len)
{
	memset(pm, 0, sizeof *pm);
	pm->m = td_phrase_words(p, len);
	if (!pm->m)
		return td_fail(TD_ENOTWORD, "'%.*s' is not a word or a phrase of words separated by single spaces",
			       (int)(len > 64 ? 64 : len), p);
	size_t i = 0;
	for (unsigned k = 0; k < pm->m; k++) {
		size_t j = i;
		while (j < len && p[j] != ' ')
			j++;
		pm->w[k] = p + i;
		pm->len[k] = j - i;
		i = j + 1;
	}
	return TD_OK;
}

static int pmatch_run(void *ctx, td_entry e, const uint8_t *buf, const ctok *t, unsigned m, uint64_t base, int sign)
{
	pmatch *pm = ctx;
	for (unsigned k = 0; k < m; k++)
		if (t[k].e - t[k].s != pm->len[k] || memcmp(buf + t[k].s, pm->w[k], pm->len[k]))
			return TD_OK;
	pm->count += sign;
	if (pm->add)
		return td_hits_push(sign > 0 ? pm->add : pm->drop, e, base + t[0].s);
	if (pm->files) {
		if (pm->nf == pm->fcap) {
			size_t cap = pm->fcap ? 2 * pm->fcap : 16;
			td_entry *fe = realloc(pm->fe, cap * sizeof *fe);
			if (fe)
				pm->fe = fe;
			int *fs = realloc(pm->fsign, cap * sizeof *fs);
			if (fs)
				pm->fsign = fs;
			if (!fe || !fs)
				return TD_ENOMEM;
			pm->fcap = cap;
		}
		pm->fe[pm->nf] = e;
		pm->fsign[pm->nf++] = sign;
	}
	return TD_OK;
}

int td_shard_phrase_count(const td_archive *a, const char *p, size_t len, td_entry scope, uint64_t *count)
{
	*count = 0;
	pmatch pm;
	int err = pmatch_init(&pm, p, len);
	const td_disk_piece *pc = NULL;
	uint64_t n = 0, sum = 0;
	if (!err)
		err = scope_pieces(a, scope, &pc, &n);
	for (uint64_t k = 0; k < n && !err; k++) {
		td_archive *s;
		uint64_t c = 0;
		if (!(err = td_shard_sub(a, pc[k].shard, &s)) && !(err = td_phrase_count(s, p, len, pc[k].local, &c)))
			sum += c;
	}
	if (!err && n > 1)
		err = fix_scope(a, scope, pm.m, pmatch_run, &pm);
	if (!err)
		*count = sum + (uint64_t)pm.count;
	return err;
}

typedef struct psearch {
	const char *p;
	size_t len;
} psearch;

static int phrase_piece_fn(void *ctx, const td_archive *s, td_entry local, td_hits *h)
{
	const psearch *ps = ctx;
	return td_phrase_search(s, ps->p, ps->len, local, h);
}

static int hit_cmp(const void *p, const void *q)
{
	const td_hit *u = p, *v = q;
	if (u->file != v->file)
		return u->file < v->file ? -1 : 1;
	return (u->off > v->off) - (u->off < v->off);
}

int td_shard_phrase_search(const td_archive *a, const char *p, size_t len, td_entry scope, td_hits *out)
{
	pmatch pm;
	int err = pmatch_init(&pm, p, len);
	if (err)
		return err;
	if (scope >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no entry %u", scope);
	size_t before = out->n;
	td_hits drop = { 0 };
	psearch ps = { p, len };
	const td_disk_piece *pc;
	uint64_t n;
	pm.add = out;
	pm.drop = &drop;
	if (!(err = td_shard_hits(a, scope, phrase_piece_fn, &ps, out)) && !(err = scope_pieces(a, scope, &pc, &n)) &&
	    n > 1)
		err = fix_scope(a, scope, pm.m, pmatch_run, &pm);
	if (!err && drop.n) {
		/* the shards' hits on fragments of a cut word: taken away */
		size_t m = out->n - before, j = 0, w = before;
		qsort(out->v + before, m, sizeof *out->v, hit_cmp);
		qsort(drop.v, drop.n, sizeof *drop.v, hit_cmp);
		for (size_t i = before; i < out->n; i++) {
			while (j < drop.n && hit_cmp(&drop.v[j], &out->v[i]) < 0)
				j++;
			if (j < drop.n && !hit_cmp(&drop.v[j], &out->v[i])) {
				j++;
				continue;
			}
			out->v[w++] = out->v[i];
		}
		out->n = w;
	}
	if (!err)
		err = td_shard_sort_hits(a, out, before);
	td_hits_free(&drop);
	if (err)
		out->n = before;
	return err;
}

static int fc_entry_cmp(const void *p, const void *q)
{
	const td_file_count *u = p, *v = q;
	return (u->file > v->file) - (u->file < v->file);
}

int td_shard_phrase_files(const td_archive *a, const char *p, size_t len, td_entry scope, td_file_count **out,
			  size_t *nout)
{
	*out = NULL;
	*nout = 0;
	pmatch pm;
	int err = pmatch_init(&pm, p, len);
	const td_disk_piece *pc = NULL;
	uint64_t n = 0;
	td_file_count *v = NULL;
	size_t nv = 0, cap = 0;
	if (!err)
		err = scope_pieces(a, scope, &pc, &n);
	td_stat st;
	int dir = !err && !td_archive_stat(a, scope, &st) && S_ISDIR(st.mode);
	/* every shard's files (a split file's pieces add up) */
	for (uint64_t k = 0; k < n && !err; k++) {
		td_archive *s;
		td_file_count *f = NULL;
		size_t nf = 0;
		if (!(err = td_shard_sub(a, pc[k].shard, &s)))
			err = td_phrase_files(s, p, len, pc[k].local, &f, &nf);
		if (!err && nv + nf > cap) {
			cap = 2 * (nv + nf);
			td_file_count *nv2 = realloc(v, cap * sizeof *nv2);
			if (!nv2)
				err = TD_ENOMEM;
			else
				v = nv2;
		}
		for (size_t i = 0; i < nf && !err; i++) {
			uint64_t start;
			td_entry e = scope;
			if (dir)
				err = td_shard_global(a, pc[k].shard, f[i].file, &e, &start);
			v[nv++] = (td_file_count){ e, f[i].count };
		}
		free(f);
	}
	/* and the runs at the cuts */
	pm.files = 1;
	if (!err && n > 1)
		err = fix_scope(a, scope, pm.m, pmatch_run, &pm);
	if (!err && nv + pm.nf > cap) {
		cap = nv + pm.nf;
		td_file_count *nv2 = realloc(v, (cap ? cap : 1) * sizeof *nv2);
		if (!nv2)
			err = TD_ENOMEM;
		else
			v = nv2;
	}
	for (size_t i = 0; i < pm.nf && !err; i++)
		v[nv++] = (td_file_count){ pm.fe[i], (uint64_t)(int64_t)pm.fsign[i] };
	free(pm.fe);
	free(pm.fsign);
	/* one line a file, counts summed, then ranked */
	size_t k = 0;
	if (!err && nv > 1)
		qsort(v, nv, sizeof *v, fc_entry_cmp);
	for (size_t i = 0; i < nv && !err;) {
		td_file_count f = v[i++];
		while (i < nv && v[i].file == f.file)
			f.count += v[i++].count;
		if (f.count)
			v[k++] = f;
	}
	if (!err)
		err = td_rank_files(a, v, k);
	if (err || !k) {
		free(v);
		v = NULL;
		k = 0;
	}
	*out = v;
	*nout = k;
	return err;
}

/* ---------- words at mid-word cuts (fuzzy) ---------- */

typedef struct cw {
	td_cutword_fn fn;
	void *ctx;
} cw;

static int cw_run(void *ctx, td_entry e, const uint8_t *buf, const ctok *t, unsigned m, uint64_t base, int sign)
{
	(void)e;
	(void)m;
	(void)base;
	const cw *c = ctx;
	return c->fn(c->ctx, (const char *)buf + t[0].s, (size_t)(t[0].e - t[0].s), sign);
}

int td_shard_cut_words(const td_archive *a, td_entry scope, td_cutword_fn fn, void *ctx)
{
	cw c = { fn, ctx };
	return fix_scope(a, scope, 1, cw_run, &c);
}
