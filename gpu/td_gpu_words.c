/* td_gpu_words: top words and term vectors in batches (td_top_batch, td_vector_batch): word counts of many scopes on the GPU, the rest by the engine. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cuda_runtime_api.h>

#include "td_analytics.h"
#include "td_err.h"
#include "td_gpu.h"
#include "td_gpu_int.h"
#include "td_tokenize.h"

/*
 * A scope's top words and term vector are its word counts ranked or in
 * word order; word ids are in byte order, so where no word of the scope is
 * longer than TD_MAXTOK (stored as pieces, without an id) both orders are
 * orders of (count, word id). The unit's grammar goes to the device flat
 * once (td_gwd_build: root symbols, rules' right sides, each rule's word
 * tokens); a batch's scopes are cut into spans (a file's root range), a
 * root symbol a GPU thread, and td_gwdev_round (td_gpu_words.cu) expands,
 * sorts and counts them. Scopes holding long words, the whole corpus
 * (WORD_FREQ: the engine reads it at once), symbolic links, scopes of
 * 2^32 words or more and anything a round cannot take are answered by the
 * engine in the same call, so every answer and error is td_top_words's /
 * td_term_vector's.
 */

#define TD_GWD_ROUND (UINT64_C(1) << 26) /* word tokens a round, at most */

struct td_gwd {
	struct td_gwdev *dev;
	uint32_t nent;
	uint64_t nwords;
	uint64_t *fw;                  /* word tokens of each regular file (else 0) */
	uint8_t *skip;                 /* entry holds a long word, or is no file or directory */
	uint8_t *isfile;               /* entry is a regular file */
	/* over the files in depth-first order (td_gunit.files): word tokens
	 * and files with long words before position i */
	uint64_t *cumw, *cuml;
	uint64_t *woff;                /* word id -> offset in words (W + 1) */
	const uint8_t *words;
	td_pack eroot;                 /* host view of E_ROOT */
};

/* Root symbols [*rs, *re) of entry e (checked at build for files). */
static inline void td_gwd_roots(const struct td_gwd *w, uint32_t e, uint64_t *rs, uint64_t *re)
{
	*rs = td_pack_get(&w->eroot, e);
	*re = td_pack_get(&w->eroot, e + 1);
}

void td_gwd_free(struct td_gwd *w)
{
	if (!w)
		return;
	td_gwdev_free(w->dev);
	free(w->fw);
	free(w->skip);
	free(w->isfile);
	free(w->cumw);
	free(w->cuml);
	free(w->woff);
	free(w);
}

/* A packed section's host view with at least n values. */
static int td_gwd_pack(const td_archive *a, unsigned id, uint64_t n, td_pack *p)
{
	uint64_t sz = 0;
	const void *b = td_archive_bytes(a, id, &sz);
	if (!b || td_pack_view(p, b, sz) || p->n < n)
		return td_fail(TD_ENOGPU, "gpu: words: section '%s' not taken", td_section_name(id));
	return TD_OK;
}

/* Word tokens and long-word flag of every rule (memo: 0 unknown, 1 in
 * progress, 2 done), depth first, at most TD_MAXDEPTH deep. */
typedef struct td_gwd_rules {
	const uint32_t *rstart, *rsyms;
	const uint8_t *opiece;         /* other token is a piece of a long word, or NULL */
	uint64_t w2, t, nrules;
	uint32_t *rnw;
	uint8_t *state, *rpiece;
} td_gwd_rules;

static int td_gwd_rule(td_gwd_rules *g, uint64_t r, unsigned depth)
{
	if (g->state[r] == 2)
		return TD_OK;
	if (g->state[r] == 1 || depth > TD_MAXDEPTH)
		return TD_ENOGPU;
	g->state[r] = 1;
	uint64_t nw = 0;
	uint8_t piece = 0;
	for (uint32_t j = g->rstart[r]; j < g->rstart[r + 1]; j++) {
		uint64_t c = g->rsyms[j];
		if (c < g->w2) {
			nw++;
		} else if (c < g->t) {
			piece |= g->opiece && g->opiece[c - g->w2];
		} else {
			if (c - g->t >= g->nrules || td_gwd_rule(g, c - g->t, depth + 1))
				return TD_ENOGPU;
			nw += g->rnw[c - g->t];
			piece |= g->rpiece[c - g->t];
		}
	}
	if (nw > UINT32_MAX)
		return TD_ENOGPU;
	g->rnw[r] = (uint32_t)nw;
	g->rpiece[r] = piece;
	g->state[r] = 2;
	return TD_OK;
}

/* Build the unit's structure and upload its grammar. TD_OK, TD_ENOGPU
 * (not taken: the engine answers), TD_ENOMEM. */
static int td_gwd_build(const td_gunit *u, struct td_gwd **out)
{
	const td_archive *a = u->a;
	uint64_t msz = 0;
	const td_disk_meta *m = td_archive_section(a, TD_SEC_META, &msz);
	if (!m || msz < sizeof *m)
		return TD_ENOGPU;
	const uint64_t W = m->nwords, S = m->nother, R = m->nrules, NR = m->nroot, NE = m->nentries;
	const uint64_t w2 = 2 * W, t = w2 + S;
	if (t + R > UINT32_MAX || NE > UINT32_MAX || !u->files || !u->sub)
		return td_fail(TD_ENOGPU, "gpu: words: grammar too large");
	td_pack roots, rsyms, eroot, emode, woff, ooff;
	int r;
	if ((r = td_gwd_pack(a, TD_SEC_ROOT_SYMS, NR, &roots)) || (r = td_gwd_pack(a, TD_SEC_RULE_SYMS, 0, &rsyms)) ||
	    (r = td_gwd_pack(a, TD_SEC_E_ROOT, NE + 1, &eroot)) || (r = td_gwd_pack(a, TD_SEC_E_MODE, NE, &emode)) ||
	    (r = td_gwd_pack(a, TD_SEC_WORD_OFF, W + 1, &woff)))
		return r;
	uint64_t gsz = 0, wsz = 0;
	const td_disk_group *grp = td_archive_bytes(a, TD_SEC_RULE_GROUPS, &gsz);
	const uint8_t *words = td_archive_bytes(a, TD_SEC_WORDS, &wsz);
	if ((m->ngroups && (!grp || gsz < m->ngroups * sizeof *grp)) || (W && !words) || rsyms.n > UINT32_MAX)
		return td_fail(TD_ENOGPU, "gpu: words: sections not taken");
	struct td_gwd *w = calloc(1, sizeof *w);
	uint32_t *hroots = malloc(4 * (NR + 1)), *rstart = malloc(4 * (R + 1)), *hrs = malloc(4 * (rsyms.n + 1));
	uint32_t *rnw = malloc(4 * (R + 1));
	uint8_t *state = calloc(R + 1, 1), *rpiece = calloc(R + 1, 1), *opiece = NULL;
	r = !w || !hroots || !rstart || !hrs || !rnw || !state || !rpiece ? td_fail(TD_ENOMEM, "gpu: words") : TD_OK;
	if (!r) {
		w->nent = (uint32_t)NE;
		w->nwords = W;
		w->words = words;
		w->eroot = eroot;
		w->fw = calloc(NE + 1, sizeof *w->fw);
		w->skip = calloc(NE + 1, 1);
		w->isfile = calloc(NE + 1, 1);
		w->woff = malloc((W + 1) * sizeof *w->woff);
		w->cumw = calloc(NE + 1, sizeof *w->cumw);
		w->cuml = calloc(NE + 1, sizeof *w->cuml);
		if (!w->fw || !w->skip || !w->isfile || !w->woff || !w->cumw || !w->cuml)
			r = td_fail(TD_ENOMEM, "gpu: words");
	}
	for (uint64_t i = 0; !r && i <= W; i++) {
		w->woff[i] = td_pack_get(&woff, i);
		if (w->woff[i] > wsz || (i && w->woff[i] < w->woff[i - 1]))
			r = TD_ENOGPU;
	}
	for (uint64_t i = 0; !r && i < NR; i++)
		if ((hroots[i] = (uint32_t)td_pack_get(&roots, i)) >= t + R)
			r = TD_ENOGPU;
	/* right sides, rule by rule (rule k of a group: len symbols from
	 * first_sym + (k - first_rule) * len) */
	uint64_t at = 0;
	for (uint64_t gi = 0; !r && gi < m->ngroups; gi++) {
		uint64_t fr = grp[gi].first_rule, lr = gi + 1 < m->ngroups ? grp[gi + 1].first_rule : R;
		uint64_t len = grp[gi].len, fs = grp[gi].first_sym;
		if (gi == 0 && fr != 0)
			r = TD_ENOGPU;
		if (lr < fr || lr > R || fs + (lr - fr) * len > rsyms.n || at + (lr - fr) * len > rsyms.n)
			r = TD_ENOGPU;
		for (uint64_t k = fr; !r && k < lr; k++) {
			rstart[k] = (uint32_t)at;
			for (uint64_t j = 0; j < len; j++)
				hrs[at++] = (uint32_t)td_pack_get(&rsyms, fs + (k - fr) * len + j);
		}
		if (!r && gi + 1 == m->ngroups && lr != R)
			r = TD_ENOGPU;
	}
	if (!r && !m->ngroups && R)
		r = TD_ENOGPU;
	if (!r)
		rstart[R] = (uint32_t)at;
	/* pieces of long words: other tokens made of word characters */
	if (!r && m->nlongwords) {
		uint64_t osz = 0;
		const uint8_t *other = td_archive_bytes(a, TD_SEC_OTHER, &osz);
		opiece = calloc(S + 1, 1);
		if (!opiece)
			r = td_fail(TD_ENOMEM, "gpu: words");
		else if ((r = td_gwd_pack(a, TD_SEC_OTHER_OFF, S + 1, &ooff)) == TD_OK && S && !other)
			r = TD_ENOGPU;
		for (uint64_t s = 0; !r && s < S; s++) {
			uint64_t o0 = td_pack_get(&ooff, s), o1 = td_pack_get(&ooff, s + 1);
			if (o1 < o0 || o1 > osz)
				r = TD_ENOGPU;
			else
				opiece[s] = o1 > o0 && td_word_char(other + o0, o1 - o0) != 0;
		}
	}
	td_gwd_rules g = { rstart, hrs, opiece, w2, t, R, rnw, state, rpiece };
	for (uint64_t k = 0; !r && k < R; k++)
		r = td_gwd_rule(&g, k, 0);
	/* each file's word tokens; entries the GPU leaves to the engine */
	for (uint64_t e = 0; !r && e < NE; e++) {
		uint64_t mode = td_pack_get(&emode, e), rs = td_pack_get(&eroot, e), re = td_pack_get(&eroot, e + 1);
		if (!S_ISREG(mode)) {
			w->skip[e] = !S_ISDIR(mode);
			continue;
		}
		if (rs > re || re > NR) {
			r = TD_ENOGPU;
			break;
		}
		uint64_t nw = 0;
		for (uint64_t k = rs; k < re; k++) {
			uint64_t y = hroots[k];
			if (y < w2)
				nw++;
			else if (y >= t)
				nw += rnw[y - t], w->skip[e] |= rpiece[y - t];
			else
				w->skip[e] |= opiece && opiece[y - w2];
		}
		w->fw[e] = nw;
		w->isfile[e] = 1;
	}
	/* prefix sums over the depth-first files (sub[2 * TD_ROOT + 1] of them) */
	for (uint64_t i = 0; !r && i < u->sub[2 * TD_ROOT + 1] && i < NE; i++) {
		uint32_t f = u->files[i];
		w->cumw[i + 1] = w->cumw[i] + w->fw[f];
		w->cuml[i + 1] = w->cuml[i] + w->skip[f];
	}
	if (!r) {
		td_gwd_in in = { hroots, rstart, hrs, rnw, NR, R, at, w2, t };
		r = td_gwdev_upload(&in, &w->dev);
	}
	free(hroots);
	free(rstart);
	free(hrs);
	free(rnw);
	free(state);
	free(rpiece);
	free(opiece);
	if (r) {
		td_gwd_free(w);
		return r == TD_ENOMEM ? r : td_fail(TD_ENOGPU, "gpu: words: grammar not taken");
	}
	*out = w;
	return TD_OK;
}

/* ---- a batch ---- */

enum { TD_GWK_VECTOR, TD_GWK_TOP, TD_GWK_NGRAM };

typedef struct td_gwb {
	struct td_gwd *w;
	const td_gunit *u;
	void *reqs;                    /* td_words_req, or td_ngram_req (NGRAM) */
	int kind;
	int host_top;                  /* rank top words on the host over the runs */
	unsigned nt;                   /* threads filling in answers */
	unsigned len;                  /* the round's n-gram length */
	/* the round */
	const uint32_t *map;           /* round request -> batch request */
	uint32_t nreq;
	td_gwd_out o;
	td_gng_out go;
	int err;                       /* TD_ENOMEM while filling answers */
} td_gwb;

typedef struct td_gwr {
	uint32_t wid, cnt;
} td_gwr;

static int td_gwr_cmp(const void *p, const void *q)
{
	const td_gwr *x = p, *y = q;
	if (x->cnt != y->cnt)
		return x->cnt > y->cnt ? -1 : 1;
	return (x->wid > y->wid) - (x->wid < y->wid);
}

/* Request req's answer from runs (wid, cnt)[0..n). */
static int td_gwd_fill(const struct td_gwd *w, td_words_req *q, const uint32_t *wid, const uint32_t *cnt, size_t n)
{
	size_t nb = 0;
	for (size_t j = 0; j < n; j++)
		nb += w->woff[wid[j] + 1] - w->woff[wid[j]];
	q->words = malloc((n ? n : 1) * sizeof *q->words);
	q->bytes = malloc(nb ? nb : 1);
	if (!q->words || !q->bytes) {
		td_words_req_free(q);
		return TD_ENOMEM;
	}
	size_t at = 0;
	for (size_t j = 0; j < n; j++) {
		uint64_t o0 = w->woff[wid[j]], len = w->woff[wid[j] + 1] - o0;
		memcpy(q->bytes + at, w->words + o0, len);
		q->words[j] = (td_word_count){ at, cnt[j], (uint32_t)len };
		at += len;
	}
	q->nwords = n;
	q->nbytes = nb;
	if (!n) {
		td_words_req_free(q);
	}
	return TD_OK;
}

/* Host ranking of one request's runs (count descending, word id
 * ascending), the first topn (0: all) filled in. */
static int td_gwd_fill_top(const struct td_gwd *w, td_words_req *q, const uint32_t *wid, const uint32_t *cnt,
			   size_t n, uint64_t topn)
{
	td_gwr *v = malloc((n ? n : 1) * sizeof *v);
	if (!v)
		return TD_ENOMEM;
	size_t k = topn && topn < n ? (size_t)topn : n, m = 0;
	if (k < 64 && k < n) { /* a sorted window of the best k */
		for (size_t j = 0; j < n; j++) {
			td_gwr x = { wid[j], cnt[j] };
			if (m == k && td_gwr_cmp(&x, &v[k - 1]) >= 0)
				continue;
			size_t i = m < k ? m++ : k - 1;
			while (i && td_gwr_cmp(&x, &v[i - 1]) < 0) {
				v[i] = v[i - 1];
				i--;
			}
			v[i] = x;
		}
	} else {
		for (size_t j = 0; j < n; j++)
			v[j] = (td_gwr){ wid[j], cnt[j] };
		qsort(v, n, sizeof *v, td_gwr_cmp);
		m = k;
	}
	uint32_t *a = malloc((m ? m : 1) * 2 * sizeof *a);
	int r = a ? TD_OK : TD_ENOMEM;
	if (a) {
		for (size_t j = 0; j < m; j++) {
			a[j] = v[j].wid;
			a[m + j] = v[j].cnt;
		}
		r = td_gwd_fill(w, q, a, a + m, m);
	}
	free(a);
	free(v);
	return r;
}

/* Request q's n-grams from runs (wid[j * len ..], cnt[j])[0..n): each
 * its words joined by spaces. */
static int td_gng_fill(const struct td_gwd *w, td_ngram_req *q, unsigned len, const uint32_t *wid,
		       const uint32_t *cnt, size_t n)
{
	size_t nb = 0;
	for (size_t j = 0; j < n * len; j++)
		nb += w->woff[wid[j] + 1] - w->woff[wid[j]] + 1;
	q->grams = malloc((n ? n : 1) * sizeof *q->grams);
	q->bytes = malloc(nb ? nb : 1);
	if (!q->grams || !q->bytes) {
		td_ngram_req_free(q);
		return TD_ENOMEM;
	}
	size_t at = 0;
	for (size_t j = 0; j < n; j++) {
		size_t from = at;
		for (unsigned k = 0; k < len; k++) {
			uint32_t x = wid[j * len + k];
			uint64_t o0 = w->woff[x], l = w->woff[x + 1] - o0;
			if (k)
				q->bytes[at++] = ' ';
			memcpy(q->bytes + at, w->words + o0, l);
			at += l;
		}
		q->grams[j] = (td_word_count){ from, cnt[j], (uint32_t)(at - from) };
	}
	q->ngrams = n;
	q->nbytes = at;
	if (!n)
		td_ngram_req_free(q);
	return TD_OK;
}

static void td_gwd_answers(void *ctx, unsigned c)
{
	td_gwb *b = ctx;
	const unsigned nt = b->nt;
	for (uint32_t i = c; i < b->nreq; i += nt) {
		int r;
		if (b->kind == TD_GWK_NGRAM) {
			td_ngram_req *q = &((td_ngram_req *)b->reqs)[b->map[i]];
			uint64_t s = b->go.start[i], n = b->go.start[i + 1] - s;
			r = td_gng_fill(b->w, q, b->len, b->go.wid + s * b->len, b->go.cnt + s, n);
		} else {
			td_words_req *q = &((td_words_req *)b->reqs)[b->map[i]];
			uint64_t s = b->o.start[i], n = b->o.start[i + 1] - s;
			r = b->kind == TD_GWK_TOP && b->host_top
				    ? td_gwd_fill_top(b->w, q, b->o.wid + s, b->o.cnt + s, n, q->n)
				    : td_gwd_fill(b->w, q, b->o.wid + s, b->o.cnt + s, n);
		}
		if (r)
			b->err = r;
	}
}

static int td_cpu_top(const td_archive *a, void *q, size_t n, unsigned t)
{
	return td_top_batch(a, q, n, t);
}

static int td_cpu_vector(const td_archive *a, void *q, size_t n, unsigned t)
{
	return td_vector_batch(a, q, n, t);
}

static int td_cpu_ngram(const td_archive *a, void *q, size_t n, unsigned t)
{
	return td_ngram_batch(a, q, n, t);
}

static int td_gwd_host_top(void)
{
	static int v = -1;
	if (v < 0) {
		const char *e = getenv("TD_GPU_TOP_HOST");
		v = e && *e && strcmp(e, "0") != 0;
	}
	return v;
}

static void td_gwb_free_out(td_gwb *b)
{
	free(b->o.wid);
	free(b->o.cnt);
	free(b->o.start);
	free(b->go.wid);
	free(b->go.cnt);
	free(b->go.start);
	memset(&b->o, 0, sizeof b->o);
	memset(&b->go, 0, sizeof b->go);
}

/* The round of requests map[0..nreq) (spans sp[0..nsp)) on the device and
 * their answers. TD_OK, TD_ENOGPU (the requests go to the engine),
 * TD_ENOMEM. */
static int td_gwd_run(td_gwb *b, const td_gwd_span *sp, uint32_t nsp, const uint64_t *topn, uint64_t ntasks,
		      uint64_t nwords)
{
	int r = b->kind == TD_GWK_NGRAM
			? td_gngdev_round(b->w->dev, b->u->stream, sp, nsp, b->nreq, ntasks, nwords, b->len, topn, &b->go)
			: td_gwdev_round(b->w->dev, b->u->stream, sp, nsp, b->nreq, ntasks, nwords,
					 b->kind == TD_GWK_TOP && !b->host_top, topn, &b->o);
	if (r)
		return r;
	b->err = TD_OK;
	td_gpu_par(b->nt, td_gwd_answers, b);
	td_gwb_free_out(b);
	return b->err;
}

/* The batch's request i: its scope, top n (0: all) and n-gram length. */
static void td_gwb_req(const td_gwb *b, size_t i, td_entry *scope, uint64_t *topn, unsigned *len)
{
	if (b->kind == TD_GWK_NGRAM) {
		const td_ngram_req *q = &((const td_ngram_req *)b->reqs)[i];
		*scope = q->scope;
		*topn = q->top;
		*len = q->len;
	} else {
		const td_words_req *q = &((const td_words_req *)b->reqs)[i];
		*scope = q->scope;
		*topn = b->kind == TD_GWK_TOP ? q->n : 0;
		*len = 0;
	}
}

static void td_gwb_clear(const td_gwb *b, size_t i)
{
	if (b->kind == TD_GWK_NGRAM)
		td_ngram_req_free(&((td_ngram_req *)b->reqs)[i]);
	else
		td_words_req_free(&((td_words_req *)b->reqs)[i]);
}

/* Rounds over the requests i < n of length b->len (any for words) that
 * the device takes; the others are appended to rest. *gpu_ok drops to 0
 * after a round the device could not take. TD_OK or TD_ENOMEM. */
static int td_gwd_rounds(td_gwb *b, size_t n, size_t *rest, size_t *nrest, int *gpu_ok, uint64_t *topn,
			 uint32_t *map, td_gwd_span **psp, size_t *pcap)
{
	const struct td_gwd *w = b->w;
	const td_gunit *u = b->u;
	td_gwd_span *sp = *psp;
	size_t cap = *pcap;
	uint32_t nsp = 0;
	uint64_t ntasks = 0, nwords = 0;
	int r = TD_OK;
	b->map = map;
	b->nreq = 0;
	for (size_t i = 0; i <= n && r != TD_ENOMEM; i++) {
		td_entry e = 0;
		uint64_t tn = 0;
		unsigned len = 0;
		if (i < n) {
			td_gwb_req(b, i, &e, &tn, &len);
			/* another length's round (a bad length goes to the engine from 2's) */
			if (b->kind == TD_GWK_NGRAM && (len >= 2 && len <= TD_PHRASE_MAX ? len != b->len : b->len != 2))
				continue;
		}
		/* the request's files in depth-first order [f0, f1), and words */
		uint64_t f0 = 0, f1 = 0, words = 0;
		int take = 0;
		if (i < n && *gpu_ok && (b->kind != TD_GWK_NGRAM || len == b->len)) {
			if (e < w->nent && e != TD_ROOT && !w->skip[e]) {
				f0 = u->sub[2 * (uint64_t)e];
				f1 = u->sub[2 * (uint64_t)e + 1];
				if (w->isfile[e] && f1 != f0 + 1)
					f1 = f0; /* not where the order says: the engine */
				take = f1 > f0 && f1 <= w->nent && w->cuml[f1] == w->cuml[f0];
				words = take ? w->cumw[f1] - w->cumw[f0] : 0;
				take = take && words < TD_GWD_ROUND && (f1 - f0) < UINT32_MAX / 2;
				if (f1 == f0 && !w->isfile[e])
					take = 1; /* a directory without files: no words */
			}
		}
		/* the round is full (or the batch done): run it */
		if (b->nreq && (i == n || (take && (nwords + words > TD_GWD_ROUND || nsp + (f1 - f0) > UINT32_MAX / 2)))) {
			int x = td_gwd_run(b, sp, nsp, topn, ntasks, nwords);
			if (x) { /* the engine answers the round */
				for (uint32_t k = 0; k < b->nreq; k++) {
					td_gwb_clear(b, map[k]);
					rest[(*nrest)++] = map[k];
				}
				if (x == TD_ENOMEM)
					r = x;
				else
					*gpu_ok = 0;
			}
			b->nreq = 0;
			nsp = 0;
			ntasks = nwords = 0;
		}
		if (i == n)
			break;
		if (!take) {
			rest[(*nrest)++] = i;
			continue;
		}
		topn[b->nreq] = tn;
		map[b->nreq] = (uint32_t)i;
		for (uint64_t k = f0; k < f1; k++) {
			uint32_t f = u->files[k];
			uint64_t rs = 0, re = 0;
			td_gwd_roots(w, f, &rs, &re);
			if (re == rs)
				continue;
			if (nsp == cap) {
				td_gwd_span *v = realloc(sp, 2 * cap * sizeof *v);
				if (!v) {
					r = td_fail(TD_ENOMEM, "gpu: words batch");
					break;
				}
				sp = v;
				cap *= 2;
			}
			sp[nsp++] = (td_gwd_span){ rs, ntasks, b->nreq, (uint32_t)(re - rs) };
			ntasks += re - rs;
		}
		b->nreq++;
		nwords += words;
	}
	*psp = sp;
	*pcap = cap;
	return r;
}

static int td_gwd_batch(td_gpu *g, void *reqs, size_t n, int kind)
{
	const size_t size = kind == TD_GWK_NGRAM ? sizeof(td_ngram_req) : sizeof(td_words_req);
	if (!g || (!reqs && n))
		return td_fail(TD_EINVAL, "gpu: bad batch");
	for (size_t i = 0; i < n; i++) {
		if (kind == TD_GWK_NGRAM) {
			td_ngram_req *q = &((td_ngram_req *)reqs)[i];
			q->grams = NULL;
			q->bytes = NULL;
			q->ngrams = q->nbytes = 0;
			q->err = TD_OK;
		} else {
			td_words_req *q = &((td_words_req *)reqs)[i];
			q->words = NULL;
			q->bytes = NULL;
			q->nwords = q->nbytes = 0;
			q->err = TD_OK;
		}
	}
	const td_archive *a = td_gpu_archive(g);
	const unsigned threads = td_gpu_cpu_threads(g);
	int (*run)(const td_archive *, void *, size_t, unsigned) =
		kind == TD_GWK_NGRAM ? td_cpu_ngram : kind == TD_GWK_TOP ? td_cpu_top : td_cpu_vector;
	td_gunit u;
	if (!td_gpu_unit(g, &u) || n > UINT32_MAX)
		return run(a, reqs, n, threads);
	size_t *rest = malloc((n + 1) * sizeof *rest);
	uint32_t *map = malloc((n + 1) * sizeof *map);
	uint64_t *topn = malloc((n + 1) * sizeof *topn);
	size_t nrest = 0, cap = 1024;
	td_gwd_span *sp = malloc(cap * sizeof *sp);
	if (!rest || !map || !topn || !sp) {
		free(rest);
		free(map);
		free(topn);
		free(sp);
		return td_fail(TD_ENOMEM, "gpu: words batch");
	}
	pthread_mutex_lock(u.lock);
	cudaSetDevice(u.device);
	int r = *u.wd ? TD_OK : td_gwd_build(&u, u.wd);
	td_gwb b = { .w = *u.wd, .u = &u, .reqs = reqs, .kind = kind, .host_top = td_gwd_host_top(),
		     .nt = threads ? threads : 1 };
	if (b.nt > 64)
		b.nt = 64;
	int gpu_ok = b.w != NULL;
	if (r != TD_ENOMEM && !gpu_ok) {
		for (size_t i = 0; i < n; i++)
			rest[nrest++] = i;
	} else if (r != TD_ENOMEM) {
		r = TD_OK;
		/* n-grams: a round of each length (bad lengths to the engine with 2's) */
		for (unsigned len = 2; r == TD_OK && len <= (kind == TD_GWK_NGRAM ? TD_PHRASE_MAX : 2); len++) {
			b.len = len;
			r = td_gwd_rounds(&b, n, rest, &nrest, &gpu_ok, topn, map, &sp, &cap);
		}
	}
	pthread_mutex_unlock(u.lock);
	if (r != TD_ENOMEM) {
		for (size_t k = 0; k < nrest; k++)
			td_gwb_clear(&b, rest[k]);
		r = td_gpu_cpu_rest(a, threads, reqs, size, rest, nrest, run);
	}
	td_gwb_free_out(&b);
	free(rest);
	free(map);
	free(topn);
	free(sp);
	return r;
}

int td_gpu_top_batch(td_gpu *g, td_words_req *reqs, size_t n)
{
	return td_gwd_batch(g, reqs, n, TD_GWK_TOP);
}

int td_gpu_vector_batch(td_gpu *g, td_words_req *reqs, size_t n)
{
	return td_gwd_batch(g, reqs, n, TD_GWK_VECTOR);
}

int td_gpu_ngram_batch(td_gpu *g, td_ngram_req *reqs, size_t n)
{
	return td_gwd_batch(g, reqs, n, TD_GWK_NGRAM);
}
