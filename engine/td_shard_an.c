/* td_shard_an: the analytics of a version 5 archive: per-shard answers merged by word bytes, plus the runs across cuts. */
#include "td_analytics_int.h"
#include "td_query_int.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "td_cancel.h"
#include "td_par.h"
#include "td_postings.h"
#include "td_out.h"
#include "td_shard.h"
#include "td_tokenize.h"

/*
 * Each shard answers for its pieces as a format 4 archive does (its word
 * ids are its own: results are merged by word bytes). What no shard sees
 * lies at the cuts of a file split over shards (engine/README.md,
 * "Analytics on shards"):
 *
 * - the builder cuts a file after an ASCII byte that is not a word
 *   character (td_build.c, td_cut_byte), so normally no word is cut and
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
	int err = td_shard_read(cf->a, cf->e, off, cf->buf, (size_t)len, &got, NULL);
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
			if (td_cut_byte(cf->buf[p - 1 - lo])) {
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
			if (td_cut_byte(cf->buf[q - at])) {
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
			while (p < z.zs && !td_cut_byte(cf->buf[p - 1 - from]))
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
			while (p > z.ze && !td_cut_byte(cf->buf[p - 1 - z.ze]))
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
/* Whether the cut between pieces p and q (the next) of a file can be left
 * out: 1 (no run fn could want touches it), 0, or an error. */
typedef int (*cut_fn)(void *sctx, const td_archive *a, const td_disk_piece *p, const td_disk_piece *q);

static int fix_file(const td_archive *a, td_entry e, unsigned m, run_fn fn, void *ctx, cut_fn skip, void *sctx)
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
		int sk = skip ? skip(sctx, a, &cf.pc[k - 1], &cf.pc[k]) : 0;
		if (sk < 0) {
			err = sk;
			break;
		}
		if (sk)
			continue;
		if ((err = cf_read(&cf, c - 1, 1)))
			break;
		if (!td_cut_byte(cf.buf[0]) && ((err = sync_back(&cf, c, &z.zs)) || (err = sync_fwd(&cf, c, &z.ze))))
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
static int fix_scope(const td_archive *a, td_entry scope, unsigned m, run_fn fn, void *ctx, cut_fn skip, void *sctx)
{
	td_entry *v;
	size_t n;
	int err = td_shard_split_files(a, scope, m == 1, &v, &n); /* one word spans no cut at a sync point */
	for (size_t i = 0; i < n && !err; i++)
		err = fix_file(a, v[i], m, fn, ctx, skip, sctx);
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

/* Threads over a scope's n pieces, each piece's walk then on one thread:
 * when there are at least half as many pieces as threads; else 1 (each
 * piece's own walk takes the threads). */
static unsigned piece_threads(uint64_t n)
{
	unsigned t = td_par_threads(n, 1);
	return n >= 2 && 2 * n >= t ? t : 1;
}

/* ---------- merging the shards' runs by bytes ---------- */

/* ---------- pruning top n-grams over shards ----------
 *
 * As td_ngrams prunes one archive's runs (engine/README.md, "Sequences"):
 * only the runs whose words all occur at least `min` times may be
 * counted. A word's count over the archive is at most its shards' counts
 * (WORD_FREQ, each over the shard's whole text) plus the number of cuts:
 * a cut inside a word hides at most that one occurrence from the shards
 * (its fragments count as other words, which only adds). A word whose
 * count is below T = (min - cuts - 1) / shards + 1 in every shard thus
 * occurs fewer than min times; the others (the candidates, few) get that
 * bound exactly, summed over every shard. A word is kept when it is a
 * candidate whose bound reaches min; each shard keeps the runs of kept
 * words (its ok flags, by its ids) and so do the cuts' runs (by bytes;
 * words longer than TD_MAXTOK always, as the shards do): a run is
 * counted in full or not at all. */
typedef struct gprune {
	uint64_t min;
	uint32_t nsh;
	uint8_t **ok;    /* per shard: ok[w] for its word ids */
	td_longw cand;   /* the candidates' bytes; count: their bound */
} gprune;

static void gprune_free(gprune *gp)
{
	for (uint32_t k = 0; gp->ok && k < gp->nsh; k++)
		free(gp->ok[k]);
	free(gp->ok);
	td_longw_free(&gp->cand);
	memset(gp, 0, sizeof *gp);
}

/* Whether the word w[0..len) may be in a counted run. */
static int gprune_keep(const gprune *gp, const char *w, size_t len)
{
	if (len > TD_MAXTOK)
		return 1;
	int64_t i = td_longw_find(&gp->cand, w, len);
	return i >= 0 && gp->cand.count[i] >= gp->min;
}

/* Per shard (one thread a shard): its words counted T times or more
 * (gp_gather), then each candidate's id and count there (gp_lookup). */
typedef struct gpjob {
	const td_archive *a;
	gprune *gp;
	uint64_t T;
	uint32_t **fw;   /* per shard: its frequent words' ids, then */
	uint64_t *nfw;
	int64_t *id;     /* per shard and candidate: its id there (-1: none) */
	uint64_t *cnt;   /* and its count there */
	td_par_err err;
} gpjob;

static void gp_gather(void *ctx, size_t k)
{
	gpjob *j = ctx;
	td_archive *s;
	const td_pack *wf = NULL;
	int err = td_shard_sub(j->a, (uint32_t)k, &s);
	if (!err && (!(wf = td_word_freq(s)) || !td_words(s)))
		err = td_fail(TD_ECORRUPT, "shard %zu: word counts or words unreadable", k);
	uint64_t n = 0, cap = 0;
	uint32_t *v = NULL;
	for (uint64_t w = 0; !err && w < s->W; w++) {
		if (td_pack_get(wf, w) < j->T)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 1024;
			uint32_t *nv = realloc(v, cap * sizeof *v);
			if (!nv) {
				err = TD_ENOMEM;
				break;
			}
			v = nv;
		}
		v[n++] = (uint32_t)w;
	}
	j->fw[k] = v;
	j->nfw[k] = n;
	td_par_err_set(&j->err, err);
}

static void gp_lookup(void *ctx, size_t k)
{
	gpjob *j = ctx;
	const td_longw *c = &j->gp->cand;
	td_archive *s;
	const td_pack *wf = NULL;
	int err = td_shard_sub(j->a, (uint32_t)k, &s);
	if (!err && (!(wf = td_word_freq(s)) || !td_words(s)))
		err = td_fail(TD_ECORRUPT, "shard %zu: word counts or words unreadable", k);
	for (size_t i = 0; !err && i < c->n; i++) {
		int64_t w = td_find_word(s, c->w[i], c->len[i]);
		j->id[k * c->n + i] = w;
		j->cnt[k * c->n + i] = w >= 0 ? td_pack_get(wf, (uint64_t)w) : 0;
	}
	td_par_err_set(&j->err, err);
}

/* gp for scope's runs with `min`, over every shard of a; gp->min is 0
 * when the cuts leave no room to prune (then count every run). */
static int gprune_init(gprune *gp, const td_archive *a, uint64_t min)
{
	memset(gp, 0, sizeof *gp);
	uint32_t nsh = td_archive_nshards(a);
	td_entry *split;
	size_t nsplit;
	uint64_t cuts = 0;
	int err = td_shard_split_files(a, TD_ROOT, 0, &split, &nsplit);
	for (size_t i = 0; i < nsplit && !err; i++) {
		const td_disk_piece *p;
		uint64_t n;
		if (!(err = td_shard_pieces(a, split[i], &p, &n)))
			cuts += n ? n - 1 : 0;
	}
	free(split);
	if (err || !nsh || min <= cuts + 1)
		return err;
	/* the candidates: words counted T times or more in some shard (the
	 * shards' words decoded on threads) */
	gpjob j = { .a = a, .gp = gp, .T = (min - cuts - 1) / nsh + 1 };
	const unsigned nt = td_par_threads(nsh, 1);
	if (!(j.fw = calloc(nsh, sizeof *j.fw)) || !(j.nfw = calloc(nsh, sizeof *j.nfw)))
		err = TD_ENOMEM;
	if (!err && !(err = td_par_for(nsh, nt, gp_gather, &j)))
		err = td_par_err_get(&j.err);
	for (uint32_t k = 0; k < nsh && !err; k++) {
		td_archive *s;
		if ((err = td_shard_sub(a, k, &s)))
			break;
		for (uint64_t i = 0; i < j.nfw[k] && !err; i++) {
			size_t len;
			const char *b = td_word_at(s, j.fw[k][i], &len);
			int64_t c = td_longw_intern(&gp->cand, b, len);
			err = c < 0 ? (int)c : TD_OK;
		}
	}
	for (uint32_t k = 0; j.fw && k < nsh; k++)
		free(j.fw[k]);
	free(j.fw);
	free(j.nfw);
	/* their bounds: their counts in every shard, plus the cuts */
	const size_t nc = gp->cand.n;
	gp->nsh = nsh;
	if (!err && (!(j.id = malloc((size_t)nsh * (nc ? nc : 1) * sizeof *j.id)) ||
		     !(j.cnt = malloc((size_t)nsh * (nc ? nc : 1) * sizeof *j.cnt)) ||
		     !(gp->ok = calloc(nsh, sizeof *gp->ok))))
		err = TD_ENOMEM;
	if (!err && !(err = td_par_for(nsh, nt, gp_lookup, &j)))
		err = td_par_err_get(&j.err);
	for (size_t i = 0; i < nc && !err; i++) {
		gp->cand.count[i] = cuts;
		for (uint32_t k = 0; k < nsh; k++)
			gp->cand.count[i] += j.cnt[(size_t)k * nc + i];
	}
	/* each shard's flags */
	for (uint32_t k = 0; k < nsh && !err; k++) {
		td_archive *s;
		if ((err = td_shard_sub(a, k, &s)))
			break;
		if (!(gp->ok[k] = calloc(s->W ? s->W : 1, 1))) {
			err = TD_ENOMEM;
			break;
		}
		for (size_t i = 0; i < nc; i++) {
			int64_t w = j.id[(size_t)k * nc + i];
			if (w >= 0 && gp->cand.count[i] >= min)
				gp->ok[k][w] = 1;
		}
	}
	free(j.id);
	free(j.cnt);
	if (!err)
		gp->min = min;
	else
		gprune_free(gp);
	return err;
}

/* The cuts' runs: items index lw, each with its sign; with gp, only the
 * runs it keeps. */
typedef struct corr {
	unsigned m;
	uint64_t n, cap;
	uint32_t *key;
	int *sign;
	td_longw lw;
	uint32_t *map; /* lw index -> global id */
	const gprune *gp;
} corr;

static int corr_run(void *ctx, td_entry e, const uint8_t *buf, const ctok *t, unsigned m, uint64_t base, int sign)
{
	(void)e;
	(void)base;
	corr *c = ctx;
	for (unsigned k = 0; c->gp && k < m; k++)
		if (!gprune_keep(c->gp, (const char *)buf + t[k].s, (size_t)(t[k].e - t[k].s)))
			return TD_OK;
	if (c->n == c->cap) {
		uint64_t cap = c->cap ? 2 * c->cap : 64;
		uint32_t *k = realloc(c->key, cap * m * sizeof *k);
		if (k)
			c->key = k;
		int *sg = realloc(c->sign, cap * sizeof *sg);
		if (sg)
			c->sign = sg;
		if (!k || !sg)
			return TD_ENOMEM;
		c->cap = cap;
	}
	for (unsigned k = 0; k < m; k++) {
		int64_t i = td_longw_intern(&c->lw, (const char *)buf + t[k].s, (size_t)(t[k].e - t[k].s));
		if (i < 0)
			return (int)i;
		c->key[c->n * m + k] = (uint32_t)i;
	}
	c->sign[c->n++] = sign;
	return TD_OK;
}

static int bytes_cmp(const char *p, size_t pl, const char *q, size_t ql)
{
	int c = memcmp(p, q, pl < ql ? pl : ql);
	return c ? c : (pl > ql) - (pl < ql);
}

/* One piece's answer: word counts (m = 1) or a run table (m >= 2) with
 * its long words; items are the shard's word ids, then W + long word.
 * The texts of a set are a part without a shard (W = 0: every word is a
 * long word). */
typedef struct part {
	const td_archive *s;
	td_counts c;
	td_gtab t;
	td_longw lw;
	uint32_t *map; /* item -> global id */
} part;

static uint64_t part_W(const part *p)
{
	return p->s ? p->s->W : 0;
}

/* A scope's runs over all its pieces and cuts, by global ids: the ids
 * of the words met, in byte order (gw/gl give their bytes), so that
 * rankings compare integers. */
typedef struct merged {
	unsigned m;
	part *p;
	size_t np;
	corr c;
	const char **gw;
	uint32_t *gl;
	uint64_t nid;
	uint64_t *cnt;   /* m == 1: count per global id */
	td_gtab t;       /* m >= 2: the runs */
} merged;

static void merged_free(merged *mg)
{
	for (size_t i = 0; i < mg->np; i++) {
		td_counts_free(&mg->p[i].c);
		td_gtab_free(&mg->p[i].t);
		td_longw_free(&mg->p[i].lw);
		free(mg->p[i].map);
	}
	free(mg->p);
	free(mg->c.key);
	free(mg->c.sign);
	free(mg->c.map);
	td_longw_free(&mg->c.lw);
	free(mg->gw);
	free(mg->gl);
	free(mg->cnt);
	td_gtab_free(&mg->t);
}

static const td_longw *part_lw(const merged *mg, const part *p)
{
	return mg->m == 1 ? &p->c.lw : &p->lw;
}

/* A source of words for the global ids: a piece's word ids in use
 * (ascending: byte order), or every long and cut word (`xw`, sorted). */
typedef struct vsrc {
	const part *p;
	uint32_t *ids;
	uint64_t n, i;
	const char *w;  /* word i (i < n): its bytes, length and first 8 bytes as one number */
	size_t len;
	uint64_t key;
} vsrc;

typedef struct xword {
	const char *w;
	size_t len;
	uint32_t *slot; /* where its global id goes */
} xword;

static int xword_cmp(const void *p, const void *q)
{
	const xword *u = p, *v = q;
	return bytes_cmp(u->w, u->len, v->w, v->len);
}

static const char *vsrc_word(const vsrc *v, const xword *xw, uint64_t i, size_t *len)
{
	if (!v->p) {
		*len = xw[i].len;
		return xw[i].w;
	}
	return td_word_at(v->p->s, v->ids[i], len);
}

/* Source v's current word (v->i < v->n) into v->w, v->len, v->key. */
static void vsrc_load(vsrc *v, const xword *xw)
{
	if (v->i < v->n) {
		v->w = vsrc_word(v, xw, v->i, &v->len);
		v->key = td_word_key(v->w, v->len);
	}
}

typedef struct vheap {
	vsrc *src;
	const xword *xw;
} vheap;

static int vless(const vheap *vh, size_t x, size_t y)
{
	const vsrc *u = &vh->src[x], *v = &vh->src[y];
	if (u->key != v->key)
		return u->key < v->key;
	return bytes_cmp(u->w, u->len, v->w, v->len) < 0;
}

static void vdown(const vheap *vh, size_t *h, size_t n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		if (l < n && vless(vh, h[l], h[m]))
			m = l;
		if (l + 1 < n && vless(vh, h[l + 1], h[m]))
			m = l + 1;
		if (m == i)
			return;
		size_t t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

/* Mark the items piece p uses (map[item] = 0; the rest ~0). */
static int part_used(const merged *mg, part *p)
{
	uint64_t W = part_W(p), items = W + part_lw(mg, p)->n;
	if (!(p->map = malloc((items ? items : 1) * sizeof *p->map)))
		return TD_ENOMEM;
	memset(p->map, 0xff, (items ? items : 1) * sizeof *p->map);
	if (mg->m == 1) {
		uint64_t nt = p->c.dense ? W : p->c.ntouched;
		for (uint64_t i = 0; i < nt; i++) {
			uint64_t w = p->c.dense ? i : p->c.touched[i];
			if (p->c.cnt[w])
				p->map[w] = 0;
		}
		for (uint64_t i = W; i < items; i++)
			p->map[i] = 0;
		return TD_OK;
	}
	for (uint64_t i = 0; p->t.mask && i <= p->t.mask; i++)
		if (td_gtab_val(&p->t, i))
			for (unsigned k = 0; k < mg->m; k++)
				p->map[td_gtab_key(&p->t, i)[k]] = 0;
	return TD_OK;
}

/* Give every word met a global id in byte order (one k-way merge). */
static int merged_ids(merged *mg)
{
	size_t nsrc = 0, nx = mg->c.lw.n;
	vsrc *src = calloc(mg->np + 1, sizeof *src);
	size_t *h = malloc((mg->np + 1) * sizeof *h);
	xword *xw = NULL;
	int err = src && h ? TD_OK : TD_ENOMEM;
	if (!err && !(mg->c.map = malloc((mg->c.lw.n ? mg->c.lw.n : 1) * sizeof *mg->c.map)))
		err = TD_ENOMEM;
	for (size_t k = 0; k < mg->np && !err; k++) {
		part *p = &mg->p[k];
		if ((err = part_used(mg, p)))
			break;
		nx += part_lw(mg, p)->n;
		vsrc *v = &src[nsrc++];
		v->p = p;
		for (uint64_t w = 0; w < part_W(p); w++)
			v->n += p->map[w] == 0;
		if (!(v->ids = malloc((v->n ? v->n : 1) * sizeof *v->ids))) {
			err = TD_ENOMEM;
			break;
		}
		for (uint64_t w = 0, j = 0; w < part_W(p); w++)
			if (p->map[w] == 0)
				v->ids[j++] = (uint32_t)w;
	}
	/* the long and cut words, sorted */
	if (!err && !(xw = malloc((nx ? nx : 1) * sizeof *xw)))
		err = TD_ENOMEM;
	nx = 0;
	for (size_t k = 0; k < mg->np && !err; k++) {
		const td_longw *l = part_lw(mg, &mg->p[k]);
		for (size_t i = 0; i < l->n; i++)
			xw[nx++] = (xword){ l->w[i], l->len[i], &mg->p[k].map[part_W(&mg->p[k]) + i] };
	}
	for (size_t i = 0; !err && i < mg->c.lw.n; i++)
		xw[nx++] = (xword){ mg->c.lw.w[i], mg->c.lw.len[i], &mg->c.map[i] };
	if (!err) {
		if (nx > 1)
			qsort(xw, nx, sizeof *xw, xword_cmp);
		src[nsrc++] = (vsrc){ .n = nx };
	}
	uint64_t total = 0;
	for (size_t k = 0; k < nsrc; k++)
		total += src[k].n;
	if (!err && (!(mg->gw = malloc((total ? total : 1) * sizeof *mg->gw)) ||
		     !(mg->gl = malloc((total ? total : 1) * sizeof *mg->gl))))
		err = TD_ENOMEM;
	vheap vh = { src, xw };
	size_t nh = 0;
	for (size_t k = 0; k < nsrc && !err; k++)
		if (src[k].n) {
			vsrc_load(&src[k], xw);
			h[nh++] = k;
		}
	for (size_t i = nh / 2; !err && i-- > 0;)
		vdown(&vh, h, nh, i);
	uint64_t nid = 0;
	while (nh && !err) {
		vsrc *v = &src[h[0]];
		const size_t len = v->len;
		const char *w = v->w;
		if (!nid || bytes_cmp(mg->gw[nid - 1], mg->gl[nid - 1], w, len)) { /* equal words: one id */
			mg->gw[nid] = w;
			mg->gl[nid++] = (uint32_t)len;
		}
		if (v->p)
			v->p->map[v->ids[v->i]] = (uint32_t)(nid - 1);
		else
			*xw[v->i].slot = (uint32_t)(nid - 1);
		if (++v->i == v->n)
			h[0] = h[--nh];
		else
			vsrc_load(v, xw);
		vdown(&vh, h, nh, 0);
	}
	mg->nid = nid;
	for (size_t k = 0; src && k < nsrc; k++)
		free(src[k].ids);
	free(src);
	free(h);
	free(xw);
	return err;
}

/* TD_ECANCELED when a flag this thread watches is set (td_cancel.h): the
 * sequential stages after the pieces' td_par_for (merging, ranking,
 * emitting) take most of a multi-shard call and must look too. */
static int merge_canceled(void)
{
	return td_cancel_requested() ? td_fail(TD_ECANCELED, "interrupted") : TD_OK;
}

/* Sum the pieces' and the cuts' runs by global id. */
static int merged_sum(merged *mg)
{
	const unsigned m = mg->m;
	int err = TD_OK;
	if (m == 1) {
		if (!(mg->cnt = calloc(mg->nid ? mg->nid : 1, sizeof *mg->cnt)))
			return TD_ENOMEM;
		for (size_t k = 0; k < mg->np; k++) {
			const part *p = &mg->p[k];
			uint64_t W = part_W(p), nt = p->c.dense ? W : p->c.ntouched;
			for (uint64_t i = 0; i < nt; i++) {
				uint64_t w = p->c.dense ? i : p->c.touched[i];
				if (p->c.cnt[w])
					mg->cnt[p->map[w]] += p->c.cnt[w];
			}
			for (size_t i = 0; i < p->c.lw.n; i++)
				mg->cnt[p->map[W + i]] += p->c.lw.count[i];
		}
		for (uint64_t i = 0; i < mg->c.n; i++)
			mg->cnt[mg->c.map[mg->c.key[i]]] += (uint64_t)(int64_t)mg->c.sign[i];
		return TD_OK;
	}
	mg->t.m = m;
	uint32_t g[TD_PHRASE_MAX];
	for (size_t k = 0; k < mg->np && !err; k++) {
		const part *p = &mg->p[k];
		for (uint64_t i = 0; p->t.mask && i <= p->t.mask && !err; i++) {
			if (!(i & 0xffff) && (err = merge_canceled()))
				break;
			uint64_t v = td_gtab_val(&p->t, i);
			if (!v)
				continue;
			for (unsigned j = 0; j < m; j++)
				g[j] = p->map[td_gtab_key(&p->t, i)[j]];
			err = td_gtab_add(&mg->t, g, v);
		}
	}
	/* the cuts: what the file has first, then what only the pieces had
	 * (found before any count drops to 0, which would empty its slot) */
	for (int pass = 0; pass < 2 && !err; pass++) {
		int64_t *slot = pass ? malloc((mg->c.n ? mg->c.n : 1) * sizeof *slot) : NULL;
		if (pass && !slot)
			return TD_ENOMEM;
		for (uint64_t i = 0; i < mg->c.n && !err; i++) {
			if ((mg->c.sign[i] > 0) == pass)
				continue;
			for (unsigned j = 0; j < m; j++)
				g[j] = mg->c.map[mg->c.key[i * m + j]];
			if (!pass)
				err = td_gtab_add(&mg->t, g, 1);
			else if ((slot[i] = td_gtab_find(&mg->t, g)) < 0)
				err = td_fail(TD_ECORRUPT, "a run at a shard cut is in no shard");
		}
		for (uint64_t i = 0; pass && i < mg->c.n && !err; i++)
			if (mg->c.sign[i] < 0)
				td_gtab_set(&mg->t, (uint64_t)slot[i], td_gtab_val(&mg->t, (uint64_t)slot[i]) - 1);
		free(slot);
	}
	return err;
}

/* Part pt: the runs of m words of the files list[0..n) of shard s (list
 * NULL: of its entry `local`). */
static int part_fill(part *pt, const td_archive *s, td_entry local, const td_entry *list, size_t n, unsigned m,
		     const uint8_t *ok)
{
	pt->s = s;
	return m == 1 ? td_list_counts(s, local, list, n, &pt->c)
		      : td_list_gtab(s, local, list, n, m, ok, &pt->t, &pt->lw);
}

/* A piece's word counts given elsewhere (td_words_find_fn), for request
 * `req` of a batch (find NULL: none). */
typedef struct pgiven {
	td_words_find_fn find;
	void *fctx;
	size_t req;
} pgiven;

/* Part pt from given counts of shard s's word ids: TD_OK, TD_ENOGPU (not
 * given: the shard counts), TD_ENOMEM, TD_ECORRUPT (an id past the shard's
 * words). */
static int part_given(part *pt, const td_archive *s, const pgiven *gv, uint64_t k)
{
	td_piece_words pw = { 0 };
	if (!gv || !gv->find || gv->find(gv->fctx, gv->req, k, &pw) != TD_OK)
		return TD_ENOGPU;
	pt->s = s;
	if (!(pt->c.cnt = calloc(s->W ? s->W : 1, sizeof *pt->c.cnt)))
		return TD_ENOMEM;
	int err = TD_OK;
	for (size_t i = 0; i < pw.n && !err; i++) {
		if (pw.wid[i] >= s->W)
			err = td_fail(TD_ECORRUPT, "given word id %u past the shard's %llu words", pw.wid[i],
				      (unsigned long long)s->W);
		else if (pw.cnt[i])
			err = td_counts_add(&pt->c, pw.wid[i], pw.cnt[i]);
	}
	return err;
}

/* Pieces filled on threads (fill_piece: piece k into parts[k]). */
typedef struct pfjob {
	const td_archive *a;
	const td_disk_piece *p;
	part *parts;
	unsigned m;
	const pgiven *given;
	const gprune *gp;
	td_par_err err;
} pfjob;

static void fill_piece(void *ctx, size_t k)
{
	pfjob *j = ctx;
	td_archive *s;
	int err = td_shard_sub(j->a, j->p[k].shard, &s);
	if (!err && j->m == 1)
		err = part_given(&j->parts[k], s, j->given, k);
	else if (!err)
		err = TD_ENOGPU;
	if (err == TD_ENOGPU) {
		td_counts_free(&j->parts[k].c);
		err = part_fill(&j->parts[k], s, j->p[k].local, NULL, 0, j->m,
				j->gp && j->gp->min ? j->gp->ok[j->p[k].shard] : NULL);
	}
	td_par_err_set(&j->err, err);
}

/* Gather and sum the runs of m words of scope's pieces and cuts (the
 * pieces' word counts from given where it has them; with gp, the runs it
 * keeps). */
static int merged_init_given(merged *mg, const td_archive *a, td_entry scope, unsigned m, const pgiven *given,
			     const gprune *gp)
{
	memset(mg, 0, sizeof *mg);
	mg->m = m;
	mg->c.m = m;
	mg->c.gp = gp && gp->min ? gp : NULL;
	const td_disk_piece *p;
	uint64_t n;
	int err = scope_pieces(a, scope, &p, &n);
	if (err)
		return err;
	if (!(mg->p = calloc(n + 1, sizeof *mg->p)))
		return TD_ENOMEM;
	pfjob j = { .a = a, .p = p, .parts = mg->p, .m = m, .given = given, .gp = mg->c.gp };
	err = td_par_for((size_t)n, piece_threads(n), fill_piece, &j);
	mg->np = (size_t)n;
	if (!err)
		err = td_par_err_get(&j.err);
	if (!err && n > 1)
		err = fix_scope(a, scope, m, corr_run, &mg->c, NULL, NULL);
	if (!err && !(err = merge_canceled()))
		err = merged_ids(mg);
	if (!err && !(err = merge_canceled()))
		err = merged_sum(mg);
	return err;
}

static int merged_init(merged *mg, const td_archive *a, td_entry scope, unsigned m, const gprune *gp)
{
	return merged_init_given(mg, a, scope, m, NULL, gp);
}

/* ---------- a set of files (td_analytics_set.c) ---------- */

/* A piece of a set's file: its entry in its shard, its file's index in
 * the set's list, its start in that file. */
typedef struct spiece {
	td_entry local;
	size_t idx;
	uint64_t start;
} spiece;

/* A set's files grouped by shard: their pieces in shard `shard`, and the
 * pieces' local entries (a list for the shard's analytics). */
typedef struct slist {
	uint32_t shard;
	spiece *pc;
	td_entry *local;
	size_t n, cap;
} slist;

typedef struct sset {
	slist *v;     /* the shards holding pieces, ascending */
	size_t n;
	size_t *split; /* list indices of the files with several pieces */
	size_t nsplit;
} sset;

static void sset_free(sset *ss)
{
	for (size_t i = 0; i < ss->n; i++) {
		free(ss->v[i].pc);
		free(ss->v[i].local);
	}
	free(ss->v);
	free(ss->split);
	memset(ss, 0, sizeof *ss);
}

static int slist_push(slist *l, td_entry local, size_t idx, uint64_t start)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		spiece *pc = realloc(l->pc, cap * sizeof *pc);
		if (!pc)
			return TD_ENOMEM;
		l->pc = pc;
		l->cap = cap;
	}
	l->pc[l->n++] = (spiece){ local, idx, start };
	return TD_OK;
}

/* Group the regular files list[0..nlist) by shard. TD_OK, TD_EINVAL (an
 * entry that is not a regular file), TD_ECORRUPT, TD_ENOMEM. */
static int sset_init(sset *ss, const td_archive *a, const td_entry *list, size_t nlist)
{
	memset(ss, 0, sizeof *ss);
	uint32_t nsh = td_archive_nshards(a);
	slist *by = calloc(nsh ? nsh : 1, sizeof *by);
	int err = by ? TD_OK : TD_ENOMEM;
	if (!err && !(ss->split = malloc((nlist ? nlist : 1) * sizeof *ss->split)))
		err = TD_ENOMEM;
	for (size_t i = 0; i < nlist && !err; i++) {
		td_stat st;
		const td_disk_piece *p;
		uint64_t n;
		if (list[i] >= a->meta.nentries || td_archive_stat(a, list[i], &st) || !S_ISREG(st.mode)) {
			err = td_fail(TD_EINVAL, "entry %u is not a regular file", list[i]);
			break;
		}
		if ((err = td_shard_pieces(a, list[i], &p, &n)))
			break;
		for (uint64_t k = 0; k < n && !err; k++)
			err = p[k].shard < nsh ? slist_push(&by[p[k].shard], p[k].local, i, p[k].start)
					       : td_fail(TD_ECORRUPT, "entry %u: a piece in no shard", list[i]);
		if (n > 1)
			ss->split[ss->nsplit++] = i;
	}
	/* the shards holding pieces, in order */
	size_t used = 0;
	for (uint32_t k = 0; by && k < nsh; k++)
		used += by[k].n > 0;
	if (!err && !(ss->v = malloc((used ? used : 1) * sizeof *ss->v)))
		err = TD_ENOMEM;
	for (uint32_t k = 0; by && k < nsh; k++) {
		if (!by[k].n)
			continue;
		if (!err && !(by[k].local = malloc(by[k].n * sizeof *by[k].local)))
			err = TD_ENOMEM;
		if (err) {
			free(by[k].pc);
			continue;
		}
		for (size_t j = 0; j < by[k].n; j++)
			by[k].local[j] = by[k].pc[j].local;
		by[k].shard = k;
		ss->v[ss->n++] = by[k];
	}
	free(by);
	if (err)
		sset_free(ss);
	return err;
}

/* The texts' words as a part of their own (m = 1: counts; m >= 2: runs). */
typedef struct tpart {
	part *p;
	unsigned m, n;
	uint32_t win[TD_PHRASE_MAX];
} tpart;

static int tpart_word(void *ctx, const uint8_t *w, size_t len, uint64_t off)
{
	(void)off;
	tpart *tp = ctx;
	td_longw *lw = tp->m == 1 ? &tp->p->c.lw : &tp->p->lw;
	int64_t i = td_longw_intern(lw, (const char *)w, len);
	if (i < 0)
		return (int)i;
	if (tp->m == 1) {
		lw->count[i]++;
		return TD_OK;
	}
	if (tp->n == tp->m) {
		memmove(tp->win, tp->win + 1, (tp->m - 1) * sizeof *tp->win);
		tp->n--;
	}
	tp->win[tp->n++] = (uint32_t)i;
	return tp->n == tp->m ? td_gtab_add(&tp->p->t, tp->win, 1) : TD_OK;
}

/* Gather and sum the runs of m words of the set's files and texts. */
static int merged_init_set(merged *mg, const td_archive *a, const td_entry *list, size_t nlist, const td_texts *texts,
			   unsigned m)
{
	memset(mg, 0, sizeof *mg);
	mg->m = m;
	mg->c.m = m;
	sset ss;
	int err = sset_init(&ss, a, list, nlist);
	if (err)
		return err;
	if (!(mg->p = calloc(ss.n + 1, sizeof *mg->p)))
		err = TD_ENOMEM;
	for (size_t k = 0; k < ss.n && !err; k++) {
		td_archive *s;
		if (!(err = td_shard_sub(a, ss.v[k].shard, &s)))
			err = part_fill(&mg->p[mg->np++], s, TD_ROOT, ss.v[k].local, ss.v[k].n, m, NULL);
	}
	for (size_t i = 0; i < ss.nsplit && !err; i++)
		err = fix_file(a, list[ss.split[i]], m, corr_run, &mg->c, NULL, NULL);
	if (!err && texts && texts->n) {
		part *pt = &mg->p[mg->np++];
		tpart tp = { .p = pt, .m = m };
		pt->t.m = m;
		for (size_t i = 0; i < texts->n && !err; i++) {
			tp.n = 0; /* no run spans two files */
			err = texts->words(texts->ctx, i, tpart_word, &tp);
		}
	}
	sset_free(&ss);
	if (!err)
		err = merged_ids(mg);
	if (!err)
		err = merged_sum(mg);
	return err;
}

/* ---------- top words, term vector, n-grams ---------- */

/* The best K runs by count descending, then global ids (byte order): a
 * heap with the worst kept on top. */
typedef struct kept {
	uint64_t count;
	uint32_t id[TD_PHRASE_MAX];
} kept;

typedef struct best {
	kept *h;
	size_t n, cap, alloc; /* cap 0: all */
	unsigned m;
} best;

static int ids_cmp(const uint32_t *x, const uint32_t *y, unsigned m)
{
	for (unsigned k = 0; k < m; k++)
		if (x[k] != y[k])
			return x[k] < y[k] ? -1 : 1;
	return 0;
}

/* x ranks after y. */
static int worse(const kept *x, const kept *y, unsigned m)
{
	return x->count != y->count ? x->count < y->count : ids_cmp(x->id, y->id, m) > 0;
}

static void best_down(best *b, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		if (l < b->n && worse(&b->h[l], &b->h[m], b->m))
			m = l;
		if (l + 1 < b->n && worse(&b->h[l + 1], &b->h[m], b->m))
			m = l + 1;
		if (m == i)
			return;
		kept t = b->h[i];
		b->h[i] = b->h[m];
		b->h[m] = t;
		i = m;
	}
}

static int best_offer(best *b, const uint32_t *id, uint64_t count)
{
	kept k = { count, { 0 } };
	memcpy(k.id, id, b->m * sizeof *id);
	if (b->cap && b->n == b->cap) { /* replaces the worst kept, if better */
		if (worse(&b->h[0], &k, b->m)) {
			b->h[0] = k;
			best_down(b, 0);
		}
		return TD_OK;
	}
	if (b->n == b->alloc) {
		size_t cap = b->alloc ? 2 * b->alloc : 1024;
		kept *h = realloc(b->h, cap * sizeof *h);
		if (!h)
			return TD_ENOMEM;
		b->h = h;
		b->alloc = cap;
	}
	size_t i = b->n++;
	b->h[i] = k;
	while (i && worse(&b->h[i], &b->h[(i - 1) / 2], b->m)) { /* the worst rises to the top */
		kept t = b->h[i];
		b->h[i] = b->h[(i - 1) / 2];
		b->h[(i - 1) / 2] = t;
		i = (i - 1) / 2;
	}
	return TD_OK;
}

static int kept_cmp(const void *p, const void *q, void *ctx)
{
	const kept *x = p, *y = q;
	unsigned m = *(const unsigned *)ctx;
	return worse(y, x, m) ? -1 : worse(x, y, m) ? 1 : 0;
}

/* The K best runs of mg (K = 0: all) into b, best first. */
static int best_pick(const merged *mg, uint64_t K, best *b)
{
	const unsigned m = mg->m;
	int err = TD_OK;
	*b = (best){ .m = m };
	b->cap = K > (1u << 26) ? 0 : (size_t)K;
	if (b->cap && !(b->h = malloc(b->cap * sizeof *b->h)))
		return TD_ENOMEM;
	b->alloc = b->cap;
	if (m == 1) {
		for (uint32_t i = 0; i < mg->nid && !err; i++)
			if (mg->cnt[i])
				err = best_offer(b, &i, mg->cnt[i]);
	} else {
		for (uint64_t i = 0; mg->t.mask && i <= mg->t.mask && !err; i++) {
			if (!(i & 0xffff) && (err = merge_canceled()))
				break;
			if (td_gtab_val(&mg->t, i))
				err = best_offer(b, td_gtab_key(&mg->t, i), td_gtab_val(&mg->t, i));
		}
	}
	if (!err)
		err = merge_canceled();
	if (!err && b->n > 1)
		qsort_r(b->h, b->n, sizeof *b->h, kept_cmp, &b->m);
	if (!err && K && b->n > K)
		b->n = (size_t)K;
	return err;
}

/* fn per run of b (runs of mg), in order. */
static int best_emit(const merged *mg, const best *b, td_ngram_fn fn, void *ctx)
{
	int err = TD_OK;
	for (size_t i = 0; i < b->n && !err; i++) {
		if (!(i & 0xffff) && (err = merge_canceled()))
			break;
		const char *w[TD_PHRASE_MAX];
		size_t wl[TD_PHRASE_MAX];
		for (unsigned k = 0; k < mg->m; k++) {
			w[k] = mg->gw[b->h[i].id[k]];
			wl[k] = mg->gl[b->h[i].id[k]];
		}
		err = fn(ctx, w, wl, mg->m, b->h[i].count);
	}
	return err;
}

/* The K best runs of mg (K = 0: all), best first: fn per run; err is
 * merged_init's. Frees mg. */
static int best_of(merged *mgp, int err, uint64_t K, td_ngram_fn fn, void *ctx)
{
	best b = { 0 };
	if (!err)
		err = best_pick(mgp, K, &b);
	if (!err)
		err = best_emit(mgp, &b, fn, ctx);
	free(b.h);
	merged_free(mgp);
	return err;
}

/* Words of scope's pieces. */
static int scope_words(const td_archive *a, td_entry scope, uint64_t *n)
{
	const td_disk_piece *p;
	uint64_t np;
	*n = 0;
	int err = scope_pieces(a, scope, &p, &np);
	for (uint64_t k = 0; k < np && !err; k++) {
		td_archive *s;
		uint64_t w = 0;
		if (!(err = td_shard_sub(a, p[k].shard, &s)) && !(err = td_word_total(s, p[k].local, &w)))
			*n += w;
	}
	return err;
}

/* The K best runs of m words of scope (K = 0: all), best first. With K
 * and m >= 2 pruned as td_ngrams_list prunes (the same guess of min, the
 * same retries; gprune says which runs are counted): exact when the K-th
 * run counted occurs min times or more. A scope under a sixteenth of the
 * archive's words is not pruned: gprune's bound comes from the words'
 * counts in the whole archive, and for such a min it would look most of
 * the vocabulary up in every shard, which costs more than counting the
 * scope's runs in full (the answer is the same either way). */
static int best_runs(const td_archive *a, td_entry scope, unsigned m, uint64_t K, td_ngram_fn fn, void *ctx)
{
	uint64_t min = 0, all = 0;
	int err = TD_OK;
	if (K && m >= 2 && !(err = scope_words(a, scope, &min)) && !(err = scope_words(a, TD_ROOT, &all)))
		min = min < all / 16 ? 0 : min >> (9 + m);
	for (; !err;) {
		gprune gp = { 0 };
		merged mg;
		best b = { 0 };
		if (min > 1)
			err = gprune_init(&gp, a, min);
		if (!err)
			err = merged_init(&mg, a, scope, m, &gp);
		else
			memset(&mg, 0, sizeof mg);
		if (!err)
			err = best_pick(&mg, K, &b);
		int again = !err && gp.min && !(b.n == K && b.h[K - 1].count >= min);
		if (!err && !again)
			err = best_emit(&mg, &b, fn, ctx);
		if (again)
			min = b.n == K ? b.h[K - 1].count : min / 64;
		free(b.h);
		merged_free(&mg);
		gprune_free(&gp);
		if (!again)
			break;
	}
	return err;
}

/* Every word of mg with its count, in byte order (global ids are);
 * err is merged_init's. Frees mg. */
static int vector_of(merged *mg, int err, td_word_fn fn, void *ctx)
{
	for (uint64_t i = 0; i < mg->nid && !err; i++)
		if (mg->cnt[i])
			err = fn(ctx, mg->gw[i], mg->gl[i], mg->cnt[i]);
	merged_free(mg);
	return err;
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

typedef struct word_ctx {
	td_word_fn fn;
	void *ctx;
} word_ctx;

static int word_fn(void *ctx, const char *const *w, const size_t *len, unsigned m, uint64_t count)
{
	(void)m;
	const word_ctx *v = ctx;
	return v->fn(v->ctx, w[0], len[0], count);
}

int td_shard_words_given(const td_archive *a, td_entry scope, int top, uint64_t n, td_words_find_fn find,
			 void *fctx, size_t req, td_word_fn fn, void *ctx)
{
	td_archive *s;
	td_entry local = 0;
	int err = one_shard(a, scope, &s, &local);
	if (err || s)
		return err ? err : top ? td_top_words(s, local, n, fn, ctx) : td_term_vector(s, local, fn, ctx);
	pgiven gv = { find, fctx, req };
	merged mg;
	err = merged_init_given(&mg, a, scope, 1, find ? &gv : NULL, NULL);
	if (!top)
		return vector_of(&mg, err, fn, ctx);
	word_ctx v = { fn, ctx };
	return best_of(&mg, err, n, word_fn, &v);
}

int td_shard_top_words(const td_archive *a, td_entry scope, uint64_t n, td_word_fn fn, void *ctx)
{
	return td_shard_words_given(a, scope, 1, n, NULL, NULL, 0, fn, ctx);
}

int td_shard_term_vector(const td_archive *a, td_entry scope, td_word_fn fn, void *ctx)
{
	return td_shard_words_given(a, scope, 0, 0, NULL, NULL, 0, fn, ctx);
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
	return best_runs(a, scope, n, top, fn, ctx);
}

/* ---------- phrases ---------- */

typedef struct pmatch {
	const char *w[TD_PHRASE_MAX];
	size_t len[TD_PHRASE_MAX];
	unsigned m;
	int64_t count;
	td_hits *add, *drop;      /* searches: the hits to add and to take away */
	int files;                /* files: the file of each match, and its sign */
	int text_cuts;            /* a cut's runs found in its text (their offsets), never by word ids */
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

/* 1 when the run of m words t (in buf) is the phrase. */
static int pmatch_is(const pmatch *pm, const uint8_t *buf, const ctok *t, unsigned m)
{
	for (unsigned k = 0; k < m; k++)
		if (t[k].e - t[k].s != pm->len[k] || memcmp(buf + t[k].s, pm->w[k], pm->len[k]))
			return 0;
	return 1;
}

static int pmatch_run(void *ctx, td_entry e, const uint8_t *buf, const ctok *t, unsigned m, uint64_t base, int sign)
{
	pmatch *pm = ctx;
	if (!pmatch_is(pm, buf, t, m))
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

/* A count's runs across a cut that no word spans (pmatch_cut's
 * conditions): the last m - 1 words of piece a of shard sa and the first
 * m - 1 of piece b of sb, as each shard's word ids (the phrase's words
 * looked up in each shard's postings), matched where they straddle the
 * cut; their number is added to pm->count and 1 returned (the cut's text
 * is not read: reading it would decode both shards' dictionaries). 0
 * (read the text) when a phrase word is longer than TD_MAXTOK. */
static int pmatch_cut_ids(pmatch *pm, td_archive *sa, td_entry a, td_archive *sb, td_entry b)
{
	const unsigned m = pm->m, L = m - 1;
	int64_t ia[TD_PHRASE_MAX], ib[TD_PHRASE_MAX];
	uint32_t w[2 * TD_PHRASE_MAX];
	unsigned na = 0, nb = 0;
	int err = TD_OK;
	for (unsigned k = 0; k < m && !err; k++) {
		if (pm->len[k] > TD_MAXTOK)
			return 0;
		if (!(err = td_post_word_id(sa, pm->w[k], pm->len[k], &ia[k])))
			err = td_post_word_id(sb, pm->w[k], pm->len[k], &ib[k]);
	}
	if (!err)
		err = td_edge_words(sa, a, 1, L, w, &na);
	if (!err)
		err = td_edge_words(sb, b, 0, L, w + na, &nb);
	if (err)
		return err;
	/* runs starting at i < na and ending at or after na */
	for (unsigned i = na > L ? na - L : 0; i < na; i++) {
		if (i + m > na + nb)
			break;
		unsigned k = 0;
		while (k < m && (int64_t)w[i + k] == (i + k < na ? ia[k] : ib[k]) && w[i + k] != UINT32_MAX)
			k++;
		pm->count += k == m;
	}
	return 1;
}

/* The cut between pieces p and q of a file, for a phrase (a cut_fn): it
 * can be left out when no run of the phrase touches it. With both shards'
 * postings that is so when p's text does not end inside a word (no word
 * spans the cut, so the shards' words near it are the file's), both
 * pieces hold at least m + 2 words (a run touching the cut lies in the two
 * pieces), and one of the phrase's words is in neither piece (a run
 * equal to the phrase holds each of its words whole, in p or in q). */
static int pmatch_cut(void *sctx, const td_archive *a, const td_disk_piece *p, const td_disk_piece *q)
{
	pmatch *pm = sctx;
	td_archive *sp, *sq;
	int err = td_shard_sub(a, p->shard, &sp);
	if (!err)
		err = td_shard_sub(a, q->shard, &sq);
	if (err)
		return err;
	if (!td_post_has(sp) || !td_post_has(sq) || td_post_ends_mid(sp, p->local) != 0 ||
	    p->local >= sp->meta.nentries || q->local >= sq->meta.nentries ||
	    td_pack_get(&sp->e_nwords, p->local) < pm->m + 2 || td_pack_get(&sq->e_nwords, q->local) < pm->m + 2)
		return 0;
	for (unsigned k = 0; k < pm->m; k++) {
		if (pm->len[k] > TD_MAXTOK)
			continue; /* never in the postings */
		int in = td_post_holds(sp, pm->w[k], pm->len[k], p->local);
		if (!in)
			in = td_post_holds(sq, pm->w[k], pm->len[k], q->local);
		if (in <= 0)
			return in < 0 ? in : 1;
	}
	return pm->add || pm->files || pm->text_cuts ? 0 : pmatch_cut_ids(pm, sp, p->local, sq, q->local);
}

/* Pieces counted on threads (count_piece: piece k's count into c[k]). */
typedef struct pcjob {
	const td_archive *a;
	const char *p;
	size_t len;
	const td_disk_piece *pc;
	uint64_t *c;
	td_par_err err;
} pcjob;

static void count_piece(void *ctx, size_t k)
{
	pcjob *j = ctx;
	td_archive *s;
	int err = td_shard_sub(j->a, j->pc[k].shard, &s);
	if (!err)
		err = td_phrase_count(s, j->p, j->len, j->pc[k].local, &j->c[k]);
	td_par_err_set(&j->err, err);
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
	uint64_t *cs = !err ? calloc(n ? n : 1, sizeof *cs) : NULL;
	if (!err && !cs)
		err = TD_ENOMEM;
	pcjob j = { .a = a, .p = p, .len = len, .pc = pc, .c = cs };
	if (!err)
		err = td_par_for((size_t)n, piece_threads(n), count_piece, &j);
	if (!err)
		err = td_par_err_get(&j.err);
	for (uint64_t k = 0; k < n && !err; k++)
		sum += cs[k];
	free(cs);
	if (!err && n > 1)
		err = fix_scope(a, scope, pm.m, pmatch_run, &pm, pmatch_cut, &pm);
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

/* Take the hits in drop (the shards' hits on fragments of a cut word)
 * away from out->v[before..] (sorted by file, then offset, when any). */
static void drop_hits(td_hits *out, size_t before, td_hits *drop)
{
	size_t j = 0, w = before;
	if (!drop->n || out->n == before)
		return;
	qsort(out->v + before, out->n - before, sizeof *out->v, hit_cmp);
	qsort(drop->v, drop->n, sizeof *drop->v, hit_cmp);
	for (size_t i = before; i < out->n; i++) {
		while (j < drop->n && hit_cmp(&drop->v[j], &out->v[i]) < 0)
			j++;
		if (j < drop->n && !hit_cmp(&drop->v[j], &out->v[i])) {
			j++;
			continue;
		}
		out->v[w++] = out->v[i];
	}
	out->n = w;
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
		err = fix_scope(a, scope, pm.m, pmatch_run, &pm, pmatch_cut, &pm);
	if (!err)
		drop_hits(out, before, &drop);
	if (!err)
		err = td_shard_sort_hits(a, out, before);
	td_hits_free(&drop);
	if (err)
		out->n = before;
	return err;
}

/* v[0..n) by file ascending, stably (td_sort_keys: a qsort of a few
 * thousand files cost as much as their ranking). TD_ENOMEM. */
static int fc_sort_by_entry(td_file_count *v, size_t n)
{
	td_skey *k = malloc(n * sizeof *k);
	td_file_count *w = malloc(n * sizeof *w);
	int err = k && w ? TD_OK : TD_ENOMEM;
	for (size_t i = 0; !err && i < n; i++)
		k[i] = (td_skey){ v[i].file, (uint32_t)i };
	if (!err && (err = td_sort_keys(k, n)) == TD_OK) {
		for (size_t i = 0; i < n; i++)
			w[i] = v[k[i].id];
		memcpy(v, w, n * sizeof *v);
	}
	free(k);
	free(w);
	return err;
}

/* Whether v[0..n)'s files are distinct entries below ne (then nothing is
 * to be summed): a bit an entry. 0 for a repeat, an entry out of range
 * or no memory (the sort by entry then decides). */
static int fc_distinct(const td_file_count *v, size_t n, uint64_t ne)
{
	uint64_t *seen = calloc((ne + 63) / 64, sizeof *seen);
	int ok = seen != NULL;
	for (size_t i = 0; i < n && ok; i++) {
		const uint64_t e = v[i].file, bit = UINT64_C(1) << (e % 64);
		ok = e < ne && !(seen[e / 64] & bit);
		if (ok)
			seen[e / 64] |= bit;
	}
	free(seen);
	return ok;
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
	td_shard_loc *loc = NULL; /* a directory's: v[i]'s shard and entry there */
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
		int done = 0;
		if (!(err = td_shard_sub(a, pc[k].shard, &s)))
			err = td_post_files(s, p, len, pc[k].local, 0, &f, &nf, &done); /* ranked below */
		if (!err && !done)
			err = td_phrase_files(s, p, len, pc[k].local, &f, &nf);
		if (!err && dir && !nv && nf) { /* the first files: f itself, counts in place */
			if (!(loc = malloc(nf * sizeof *loc)))
				err = TD_ENOMEM;
			for (size_t i = 0; i < nf && !err; i++)
				loc[i] = (td_shard_loc){ pc[k].shard, f[i].file, TD_NOENTRY };
			if (!err) {
				free(v);
				v = f, cap = nv = nf, f = NULL, nf = 0;
			}
		}
		if (!err && nv + nf > cap) {
			cap = 2 * (nv + nf);
			td_file_count *nv2 = realloc(v, cap * sizeof *nv2);
			td_shard_loc *nl = dir && nv2 ? realloc(loc, cap * sizeof *nl) : loc;
			if (nv2)
				v = nv2;
			if (nl)
				loc = nl;
			if (!nv2 || (dir && !nl))
				err = TD_ENOMEM;
		}
		for (size_t i = 0; i < nf && !err; i++) {
			if (dir) /* mapped to the global entries below, all at once */
				loc[nv] = (td_shard_loc){ pc[k].shard, f[i].file, TD_NOENTRY };
			v[nv++] = (td_file_count){ scope, f[i].count };
		}
		free(f);
	}
	if (!err && dir && (err = td_shard_globals(a, loc, nv)) == TD_OK)
		for (size_t i = 0; i < nv; i++)
			v[i].file = loc[i].e;
	free(loc);
	/* and the runs at the cuts */
	pm.files = 1;
	if (!err && n > 1)
		err = fix_scope(a, scope, pm.m, pmatch_run, &pm, pmatch_cut, &pm);
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
	if (!err && nv > 1 && !fc_distinct(v, nv, a->meta.nentries))
		err = fc_sort_by_entry(v, nv);
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
	return fix_scope(a, scope, 1, cw_run, &c, NULL, NULL);
}

/* ---------- a set of files: the public forms ---------- */

int td_shard_set_top(const td_archive *a, const td_entry *list, size_t nlist, const td_texts *texts, uint64_t n,
		     td_word_fn fn, void *ctx)
{
	merged mg;
	word_ctx v = { fn, ctx };
	int err = merged_init_set(&mg, a, list, nlist, texts, 1);
	return best_of(&mg, err, n, word_fn, &v);
}

int td_shard_set_vector(const td_archive *a, const td_entry *list, size_t nlist, const td_texts *texts,
			td_word_fn fn, void *ctx)
{
	merged mg;
	int err = merged_init_set(&mg, a, list, nlist, texts, 1);
	return vector_of(&mg, err, fn, ctx);
}

int td_shard_set_ngrams(const td_archive *a, const td_entry *list, size_t nlist, const td_texts *texts, unsigned n,
			uint64_t top, td_ngram_fn fn, void *ctx)
{
	if (n < 2 || n > TD_PHRASE_MAX)
		return td_fail(TD_EINVAL, "n-gram length %u outside 2..%u", n, TD_PHRASE_MAX);
	merged mg;
	int err = merged_init_set(&mg, a, list, nlist, texts, n);
	return best_of(&mg, err, top, fn, ctx);
}

/* The phrase's runs at the cuts of set file i. */
typedef struct setp {
	const pmatch *pm;
	size_t i;
	uint64_t *counts;
	td_hits *add, *drop;
} setp;

static int setp_run(void *ctx, td_entry e, const uint8_t *buf, const ctok *t, unsigned m, uint64_t base, int sign)
{
	(void)e;
	setp *sp = ctx;
	if (!pmatch_is(sp->pm, buf, t, m))
		return TD_OK;
	sp->counts[sp->i] += (uint64_t)(int64_t)sign;
	return sp->add ? td_hits_push(sign > 0 ? sp->add : sp->drop, (td_entry)sp->i, base + t[0].s) : TD_OK;
}

int td_shard_set_phrase(const td_archive *a, const char *p, size_t len, const td_entry *list, size_t nlist,
			const td_texts *texts, uint64_t *counts, td_hits *out)
{
	pmatch pm;
	int err = pmatch_init(&pm, p, len);
	if (err)
		return err;
	memset(counts, 0, (nlist + (texts ? texts->n : 0)) * sizeof *counts);
	sset ss;
	if ((err = sset_init(&ss, a, list, nlist)))
		return err;
	size_t before = out ? out->n : 0;
	td_hits drop = { 0 };
	/* each shard over its pieces of the files: counts and hits by piece */
	for (size_t k = 0; k < ss.n && !err; k++) {
		const slist *l = &ss.v[k];
		td_archive *s;
		td_hits h = { 0 };
		uint64_t *c = calloc(l->n, sizeof *c);
		if (!c)
			err = TD_ENOMEM;
		if (!err && !(err = td_shard_sub(a, l->shard, &s)))
			err = td_phrase_list(s, p, len, l->local, l->n, NULL, c, out ? &h : NULL);
		for (size_t j = 0; j < l->n && !err; j++)
			counts[l->pc[j].idx] += c[j];
		for (size_t j = 0; j < h.n && !err; j++)
			err = td_hits_push(out, (td_entry)l->pc[h.v[j].file].idx, l->pc[h.v[j].file].start + h.v[j].off);
		td_hits_free(&h);
		free(c);
	}
	/* the runs at the cuts of the split files: setp_run counts those read
	 * from a cut's text; pmatch_cut_ids counts others into pm.count (a
	 * count only: a search needs each run's offset, so reads every cut) */
	setp sp = { &pm, 0, counts, out, &drop };
	pm.text_cuts = out != NULL;
	for (size_t i = 0; i < ss.nsplit && !err; i++) {
		sp.i = ss.split[i];
		pm.count = 0;
		err = fix_file(a, list[sp.i], pm.m, setp_run, &sp, pmatch_cut, &pm);
		counts[sp.i] += (uint64_t)pm.count;
	}
	/* the texts, matched by bytes */
	if (!err && texts)
		err = td_phrase_texts(p, len, texts, nlist, counts + nlist, out);
	if (!err && out) {
		drop_hits(out, before, &drop);
		if (out->n - before > 1) /* out->v may be NULL when there are none */
			qsort(out->v + before, out->n - before, sizeof *out->v, hit_cmp);
	}
	td_hits_free(&drop);
	sset_free(&ss);
	if (err && out)
		out->n = before;
	return err;
}

int td_shard_set_counts(const td_archive *a, const td_entry *list, size_t nlist, td_shard_counts_fn fn,
			td_cutword_fn cut, void *ctx)
{
	sset ss;
	int err = sset_init(&ss, a, list, nlist);
	for (size_t k = 0; k < ss.n && !err; k++) {
		td_archive *s;
		td_counts c;
		memset(&c, 0, sizeof c);
		if (!(err = td_shard_sub(a, ss.v[k].shard, &s)) &&
		    !(err = td_list_counts(s, TD_ROOT, ss.v[k].local, ss.v[k].n, &c)))
			err = fn(ctx, s, &c);
		td_counts_free(&c);
	}
	cw c = { cut, ctx };
	for (size_t i = 0; i < ss.nsplit && !err; i++)
		err = fix_file(a, list[ss.split[i]], 1, cw_run, &c, NULL, NULL);
	sset_free(&ss);
	return err;
}
