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

typedef struct td_gwb {
	struct td_gwd *w;
	const td_gunit *u;
	td_words_req *reqs;
	td_gwd_raw *raw;               /* non-NULL: runs kept here instead of answers */
	int top;
	int host_top;                  /* rank top words on the host over the runs */
	unsigned nt;                   /* threads filling in answers */
	/* the round */
	const uint32_t *map;           /* round request -> batch request */
	uint32_t nreq;
	td_gwd_out o;
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

static void td_gwd_answers(void *ctx, unsigned c)
{
	td_gwb *b = ctx;
	const unsigned nt = b->nt;
	for (uint32_t i = c; i < b->nreq; i += nt) {
		td_words_req *q = &b->reqs[b->map[i]];
		uint64_t s = b->o.start[i], n = b->o.start[i + 1] - s;
		if (b->raw) {
			td_gwd_raw *x = &b->raw[b->map[i]];
			if (!(x->v = malloc((n ? 2 * n : 1) * sizeof *x->v))) {
				b->err = TD_ENOMEM;
				continue;
			}
			memcpy(x->v, b->o.wid + s, n * sizeof *x->v);
			memcpy(x->v + n, b->o.cnt + s, n * sizeof *x->v);
			x->n = (size_t)n;
			x->ok = 1;
			continue;
		}
		int r = b->top && b->host_top ? td_gwd_fill_top(b->w, q, b->o.wid + s, b->o.cnt + s, n, q->n)
				    : td_gwd_fill(b->w, q, b->o.wid + s, b->o.cnt + s, n);
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

static int td_gwd_host_top(void)
{
	static int v = -1;
	if (v < 0) {
		const char *e = getenv("TD_GPU_TOP_HOST");
		v = e && *e && strcmp(e, "0") != 0;
	}
	return v;
}

/* The round of requests map[0..nreq) (spans sp[0..nsp)) on the device and
 * their answers. TD_OK, TD_ENOGPU (the requests go to the engine),
 * TD_ENOMEM. */
static int td_gwd_run(td_gwb *b, const td_gwd_span *sp, uint32_t nsp, const uint64_t *topn, uint64_t ntasks,
		      uint64_t nwords)
{
	int r = td_gwdev_round(b->w->dev, b->u->stream, sp, nsp, b->nreq, ntasks, nwords, b->top && !b->host_top,
			       topn, &b->o);
	if (r)
		return r;
	b->err = TD_OK;
	td_gpu_par(b->nt, td_gwd_answers, b);
	free(b->o.wid);
	free(b->o.cnt);
	free(b->o.start);
	memset(&b->o, 0, sizeof b->o);
	return b->err;
}

static void td_gwd_raw_free(td_gwd_raw *x, size_t n)
{
	for (size_t i = 0; x && i < n; i++)
		free(x[i].v);
	free(x);
}

/* Whether the device takes scope e of unit u: its files in depth-first
 * order [*f0, *f1) and their word tokens *words. */
static int td_gwd_take(const struct td_gwd *w, const td_gunit *u, td_entry e, uint64_t *f0, uint64_t *f1,
		       uint64_t *words)
{
	int take = 0;
	*f0 = *f1 = *words = 0;
	if (e < w->nent && e != TD_ROOT && !w->skip[e]) {
		*f0 = u->sub[2 * (uint64_t)e];
		*f1 = u->sub[2 * (uint64_t)e + 1];
		if (w->isfile[e] && *f1 != *f0 + 1)
			*f1 = *f0; /* not where the order says: the engine */
		take = *f1 > *f0 && *f1 <= w->nent && w->cuml[*f1] == w->cuml[*f0];
		*words = take ? w->cumw[*f1] - w->cumw[*f0] : 0;
		take = take && *words < TD_GWD_ROUND && (*f1 - *f0) < UINT32_MAX / 2;
		if (*f1 == *f0 && !w->isfile[e])
			take = 1; /* a directory without files: no words */
	}
	return take;
}

/* Spans of files [f0, f1) of round request req appended to *sp (cap
 * *cap, *nsp of them), tasks numbered from *ntasks. TD_OK or TD_ENOMEM. */
static int td_gwd_spans(const struct td_gwd *w, const td_gunit *u, uint64_t f0, uint64_t f1, uint32_t req,
			td_gwd_span **sp, size_t *cap, uint32_t *nsp, uint64_t *ntasks)
{
	for (uint64_t k = f0; k < f1; k++) {
		uint64_t rs = 0, re = 0;
		td_gwd_roots(w, u->files[k], &rs, &re);
		if (re == rs)
			continue;
		if (*nsp == *cap) {
			td_gwd_span *v = realloc(*sp, 2 * *cap * sizeof *v);
			if (!v)
				return td_fail(TD_ENOMEM, "gpu: words batch");
			*sp = v;
			*cap *= 2;
		}
		(*sp)[(*nsp)++] = (td_gwd_span){ rs, *ntasks, req, (uint32_t)(re - rs) };
		*ntasks += re - rs;
	}
	return TD_OK;
}

/* The GPU's part of a batch on unit u: the requests it takes are answered
 * (or, with raw, their runs kept there; top must be 0), the others' indices
 * listed in rest[0..*nrest) (rest holds n). TD_OK or TD_ENOMEM (then the
 * caller answers nothing: every answer given is freed). */
static int td_gwd_gpu(const td_gunit *up, unsigned threads, td_words_req *reqs, size_t n, int top, td_gwd_raw *raw,
		      size_t *rest, size_t *nrest_out)
{
	td_gunit u = *up;
	uint32_t *map = malloc((n + 1) * sizeof *map);
	uint64_t *topn = malloc((n + 1) * sizeof *topn);
	size_t nrest = 0, cap = 1024;
	td_gwd_span *sp = malloc(cap * sizeof *sp);
	*nrest_out = 0;
	if (!map || !topn || !sp) {
		free(map);
		free(topn);
		free(sp);
		return td_fail(TD_ENOMEM, "gpu: words batch");
	}
	pthread_mutex_lock(u.lock);
	cudaSetDevice(u.device);
	int r = *u.wd ? TD_OK : td_gwd_build(&u, u.wd);
	struct td_gwd *w = *u.wd;
	td_gwb b = { .w = w, .u = &u, .reqs = reqs, .raw = raw, .top = top, .host_top = td_gwd_host_top(),
		     .nt = threads ? threads : 1, .map = map };
	if (b.nt > 64)
		b.nt = 64;
	uint32_t nsp = 0;
	uint64_t ntasks = 0, nwords = 0;
	int gpu_ok = w != NULL;
	for (size_t i = 0; i <= n && r != TD_ENOMEM; i++) {
		/* the request's files in depth-first order [f0, f1), and words */
		uint64_t f0 = 0, f1 = 0, words = 0;
		int take = i < n && gpu_ok && td_gwd_take(w, &u, reqs[i].scope, &f0, &f1, &words);
		/* the round is full (or the batch done): run it */
		if (b.nreq && (i == n || (take && (nwords + words > TD_GWD_ROUND || nsp + (f1 - f0) > UINT32_MAX / 2)))) {
			int e = td_gwd_run(&b, sp, nsp, topn, ntasks, nwords);
			if (e) { /* the engine answers the round */
				for (uint32_t k = 0; k < b.nreq; k++) {
					td_words_req_free(&reqs[map[k]]);
					if (raw) {
						free(raw[map[k]].v);
						raw[map[k]] = (td_gwd_raw){ 0 };
					}
					rest[nrest++] = map[k];
				}
				if (e == TD_ENOMEM)
					r = e;
				else
					gpu_ok = 0;
			}
			b.nreq = 0;
			nsp = 0;
			ntasks = nwords = 0;
		}
		if (i == n)
			break;
		if (!take) {
			rest[nrest++] = i;
			continue;
		}
		topn[b.nreq] = top ? reqs[i].n : 0;
		map[b.nreq] = (uint32_t)i;
		if (td_gwd_spans(w, &u, f0, f1, b.nreq, &sp, &cap, &nsp, &ntasks))
			r = TD_ENOMEM;
		b.nreq++;
		nwords += words;
	}
	pthread_mutex_unlock(u.lock);
	free(map);
	free(topn);
	free(sp);
	if (r == TD_ENOMEM) {
		for (size_t k = 0; k < n; k++)
			td_words_req_free(&reqs[k]);
		return r;
	}
	for (size_t k = 0; k < nrest; k++)
		td_words_req_free(&reqs[rest[k]]);
	*nrest_out = nrest;
	return TD_OK;
}

static void td_words_clear(td_words_req *reqs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		reqs[i].words = NULL;
		reqs[i].bytes = NULL;
		reqs[i].nwords = reqs[i].nbytes = 0;
		reqs[i].err = TD_OK;
	}
}

/* A batch on one handle of one unit (format 1-4, or one shard): the GPU's
 * part, then the engine for the rest, on the unit's archive. */
static int td_gwd_unit_batch(td_gpu *g, td_words_req *reqs, size_t n, int top)
{
	const td_archive *a = td_gpu_archive(g);
	const unsigned threads = td_gpu_cpu_threads(g);
	int (*run)(const td_archive *, void *, size_t, unsigned) = top ? td_cpu_top : td_cpu_vector;
	td_gunit u;
	if (!td_gpu_unit(g, &u) || n > UINT32_MAX)
		return run(a, reqs, n, threads);
	size_t *rest = malloc((n + 1) * sizeof *rest), nrest = 0;
	if (!rest)
		return td_fail(TD_ENOMEM, "gpu: words batch");
	int r = td_gwd_gpu(&u, threads, reqs, n, top, NULL, rest, &nrest);
	if (!r)
		r = td_gpu_cpu_rest(a, threads, reqs, sizeof *reqs, rest, nrest, run);
	free(rest);
	return r;
}

/* ---- format 5: a batch over the shards ---- */

/* Where a request goes: the engine on the whole archive, the one shard
 * holding its scope, or its pieces' counts on their shards and the
 * engine's merge. */
enum { TD_GWM_CPU, TD_GWM_ONE, TD_GWM_PIECES };

typedef struct td_gwm_unit_l {
	size_t *req;                   /* whole: batch request; pieces: its piece's index in pc */
	td_entry *local;               /* the scope in the shard */
	size_t n;
} td_gwm_unit_l;

typedef struct td_gwm {
	td_gmulti *m;
	td_words_req *reqs;
	int top;
	/* pieces of the requests over several shards: request i's are
	 * pcu[pbase[i]..], each the unit (UINT32_MAX: not resident) and the
	 * index of its runs in that unit's raw answers */
	uint64_t *pbase;
	uint32_t *pcu, *pci;
	td_gwm_unit_l *one, *pcs;      /* a unit each */
	td_gwd_raw **raw;              /* a unit each */
	const size_t *cmap;            /* engine request -> batch request */
	int err;
} td_gwm;

static void td_gwm_unit(void *ctx, unsigned s)
{
	td_gwm *c = ctx;
	td_gpu *h = td_gmulti_handle(c->m, s);
	const td_gwm_unit_l *one = &c->one[s], *pcs = &c->pcs[s];
	size_t ns = one->n > pcs->n ? one->n : pcs->n;
	if (!ns || !h)
		return;
	td_words_req *sub = calloc(ns, sizeof *sub);
	int r = sub ? TD_OK : TD_ENOMEM;
	/* scopes held whole by this shard: its answers are the archive's */
	for (size_t k = 0; !r && k < one->n; k++)
		sub[k] = (td_words_req){ .scope = one->local[k], .n = c->reqs[one->req[k]].n };
	if (!r && one->n && (r = td_gwd_unit_batch(h, sub, one->n, c->top)) == TD_OK)
		for (size_t k = 0; k < one->n; k++) {
			td_words_req *q = &c->reqs[one->req[k]];
			q->words = sub[k].words;
			q->bytes = sub[k].bytes;
			q->nwords = sub[k].nwords;
			q->nbytes = sub[k].nbytes;
			q->err = sub[k].err;
		}
	/* pieces of scopes over several shards: their runs, for the merge */
	td_gunit u;
	if (!r && pcs->n && td_gpu_unit(h, &u)) {
		size_t *rest = malloc((pcs->n + 1) * sizeof *rest), nrest = 0;
		c->raw[s] = calloc(pcs->n + 1, sizeof *c->raw[s]);
		if (!rest || !c->raw[s])
			r = td_fail(TD_ENOMEM, "gpu: words batch");
		for (size_t k = 0; !r && k < pcs->n; k++)
			sub[k] = (td_words_req){ .scope = pcs->local[k] };
		if (!r)
			r = td_gwd_gpu(&u, td_gpu_cpu_threads(h), sub, pcs->n, 0, c->raw[s], rest, &nrest);
		free(rest);
	}
	free(sub);
	if (r)
		c->err = r;
}

static int td_gwm_find(void *fctx, size_t req, uint64_t k, td_piece_words *out)
{
	const td_gwm *c = fctx;
	size_t i = c->cmap[req];
	if (c->pbase[i] == UINT64_MAX)
		return TD_ENOGPU;
	uint32_t s = c->pcu[c->pbase[i] + k], x = c->pci[c->pbase[i] + k];
	if (s == UINT32_MAX || !c->raw[s] || !c->raw[s][x].ok)
		return TD_ENOGPU;
	const td_gwd_raw *w = &c->raw[s][x];
	*out = (td_piece_words){ w->v, w->v + w->n, w->n };
	return TD_OK;
}

static int td_gwm_push(td_gwm_unit_l *l, size_t *cap, size_t req, td_entry local)
{
	if (l->n == *cap) {
		size_t nc = *cap ? 2 * *cap : 64;
		size_t *a = realloc(l->req, nc * sizeof *a);
		if (a)
			l->req = a;
		td_entry *b = realloc(l->local, nc * sizeof *b);
		if (b)
			l->local = b;
		if (!a || !b)
			return TD_ENOMEM;
		*cap = nc;
	}
	l->req[l->n] = req;
	l->local[l->n++] = local;
	return TD_OK;
}

static int td_gwd_multi(td_gpu *g, td_gmulti *m, td_words_req *reqs, size_t n, int top)
{
	const td_archive *a = td_gpu_archive(g);
	const unsigned threads = td_gpu_cpu_threads(g);
	const uint32_t nu = td_gmulti_units(m), nent = td_archive_nentries(a);
	td_gwm c = { .m = m, .reqs = reqs, .top = top };
	size_t *ocap = calloc(nu + 1, sizeof *ocap), *pcap = calloc(nu + 1, sizeof *pcap);
	size_t *cmap = malloc((n + 1) * sizeof *cmap), nc = 0, npc = 0, pccap = 0;
	c.pbase = malloc((n + 1) * sizeof *c.pbase);
	c.one = calloc(nu + 1, sizeof *c.one);
	c.pcs = calloc(nu + 1, sizeof *c.pcs);
	c.raw = calloc(nu + 1, sizeof *c.raw);
	int r = ocap && pcap && cmap && c.pbase && c.one && c.pcs && c.raw ? TD_OK : TD_ENOMEM;
	for (size_t i = 0; i < n && !r; i++) {
		const td_disk_piece *p = NULL;
		uint64_t np = 0;
		td_entry e = reqs[i].scope;
		c.pbase[i] = UINT64_MAX;
		if (e >= nent || e == TD_ROOT || td_archive_pieces(a, e, &p, &np) || np == 0) {
			cmap[nc++] = i; /* the corpus (WORD_FREQ), a symbolic link, a bad entry: the engine */
			continue;
		}
		if (np == 1) {
			if (p[0].shard < nu && td_gmulti_handle(m, p[0].shard))
				r = td_gwm_push(&c.one[p[0].shard], &ocap[p[0].shard], i, p[0].local);
			else
				cmap[nc++] = i;
			continue;
		}
		if (npc + np > pccap) {
			size_t cap2 = pccap ? 2 * pccap : 1024;
			while (cap2 < npc + np)
				cap2 *= 2;
			uint32_t *x = realloc(c.pcu, cap2 * sizeof *x), *y = x ? realloc(c.pci, cap2 * sizeof *y) : NULL;
			if (x)
				c.pcu = x;
			if (y)
				c.pci = y;
			if (!x || !y) {
				r = TD_ENOMEM;
				break;
			}
			pccap = cap2;
		}
		c.pbase[i] = npc;
		for (uint64_t k = 0; k < np && !r; k++, npc++) {
			uint32_t s = p[k].shard;
			c.pcu[npc] = UINT32_MAX;
			if (s < nu && td_gmulti_handle(m, s) && td_gpu_resident(td_gmulti_handle(m, s))) {
				c.pcu[npc] = s;
				c.pci[npc] = (uint32_t)c.pcs[s].n;
				r = td_gwm_push(&c.pcs[s], &pcap[s], npc, p[k].local);
			}
		}
		cmap[nc++] = i;
	}
	if (!r) {
		td_gpu_par(nu, td_gwm_unit, &c);
		r = c.err;
	}
	/* the engine: the rest, and the merges */
	td_words_req *cr = !r && nc ? malloc(nc * sizeof *cr) : NULL;
	if (!r && nc && !cr)
		r = TD_ENOMEM;
	if (!r && nc) {
		for (size_t k = 0; k < nc; k++)
			cr[k] = reqs[cmap[k]];
		c.cmap = cmap;
		r = top ? td_top_batch_given(a, cr, nc, threads, td_gwm_find, &c)
			: td_vector_batch_given(a, cr, nc, threads, td_gwm_find, &c);
		for (size_t k = 0; k < nc; k++)
			reqs[cmap[k]] = cr[k];
	}
	free(cr);
	for (uint32_t s = 0; s < nu && c.one; s++) {
		free(c.one[s].req);
		free(c.one[s].local);
		free(c.pcs[s].req);
		td_gwd_raw_free(c.raw[s], c.pcs[s].n);
		free(c.pcs[s].local);
	}
	if (r)
		for (size_t i = 0; i < n; i++)
			td_words_req_free(&reqs[i]);
	free(c.one);
	free(c.pcs);
	free(c.raw);
	free(c.pbase);
	free(c.pcu);
	free(c.pci);
	free(cmap);
	free(ocap);
	free(pcap);
	return r == TD_ENOMEM ? td_fail(TD_ENOMEM, "gpu: words batch") : r;
}

static int td_gwd_batch(td_gpu *g, td_words_req *reqs, size_t n, int top)
{
	if (!g || (!reqs && n))
		return td_fail(TD_EINVAL, "gpu: bad batch");
	td_words_clear(reqs, n);
	td_gmulti *m = td_gpu_multi(g);
	if (m && n <= UINT32_MAX)
		return td_gwd_multi(g, m, reqs, n, top);
	return td_gwd_unit_batch(g, reqs, n, top);
}

int td_gpu_top_batch(td_gpu *g, td_words_req *reqs, size_t n)
{
	return td_gwd_batch(g, reqs, n, 1);
}

int td_gpu_vector_batch(td_gpu *g, td_words_req *reqs, size_t n)
{
	return td_gwd_batch(g, reqs, n, 0);
}

int td_gwd_counts(const td_gunit *u, unsigned threads, const td_entry *scopes, size_t n, td_gwd_raw *out)
{
	td_words_req *q = calloc(n + 1, sizeof *q);
	size_t *rest = malloc((n + 1) * sizeof *rest), nrest = 0;
	int r = q && rest && n <= UINT32_MAX ? TD_OK : td_fail(TD_ENOMEM, "gpu: word counts");
	for (size_t i = 0; !r && i < n; i++) {
		q[i].scope = scopes[i];
		out[i] = (td_gwd_raw){ 0 };
	}
	if (!r)
		r = td_gwd_gpu(u, threads, q, n, 0, out, rest, &nrest);
	if (r)
		for (size_t i = 0; i < n; i++) {
			free(out[i].v);
			out[i] = (td_gwd_raw){ 0 };
		}
	free(q);
	free(rest);
	return r;
}

int64_t td_gwd_word(const td_gunit *u, const char *p, size_t len)
{
	int64_t w = td_word_id(u->a, p, len);
	return w >= 0 && (uint64_t)w < u->nwords ? w : -1;
}

/* ---- n-grams (td_gpu_ngram_batch) ----
 * The same spans and expansion as top words (td_gngdev_round); a round a
 * length. The corpus, long words, symbolic links, bad lengths and what a
 * round cannot take go to the engine (td_ngram_batch). Format 5: a scope
 * held whole by one shard is that shard's question (td_shard_ngrams asks
 * td_ngrams of the shard the same way), on the shard's handle; a scope
 * over several shards (a file cut between shards, a directory across a
 * cut) is the engine's, which counts the runs across each cut. */

typedef struct td_gngb {
	const struct td_gwd *w;
	td_ngram_req *reqs;
	unsigned nt, len;
	const uint32_t *map;
	uint32_t nreq;
	td_gng_out go;
	int err;
} td_gngb;

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

static void td_gng_answers(void *ctx, unsigned c)
{
	td_gngb *b = ctx;
	for (uint32_t i = c; i < b->nreq; i += b->nt) {
		uint64_t s = b->go.start[i], n = b->go.start[i + 1] - s;
		if (td_gng_fill(b->w, &b->reqs[b->map[i]], b->len, b->go.wid + s * b->len, b->go.cnt + s, n))
			b->err = TD_ENOMEM;
	}
}

static int td_gng_run(td_gngb *b, const td_gunit *u, const td_gwd_span *sp, uint32_t nsp, const uint64_t *topn,
		      uint64_t ntasks, uint64_t nwords)
{
	int r = td_gngdev_round(b->w->dev, u->stream, sp, nsp, b->nreq, ntasks, nwords, b->len, topn, &b->go);
	if (r)
		return r;
	b->err = TD_OK;
	td_gpu_par(b->nt, td_gng_answers, b);
	free(b->go.wid);
	free(b->go.cnt);
	free(b->go.start);
	memset(&b->go, 0, sizeof b->go);
	return b->err;
}

static int td_cpu_ngram(const td_archive *a, void *q, size_t n, unsigned t)
{
	return td_ngram_batch(a, q, n, t);
}

/* A batch on one handle of one unit (format 1-4, or one shard); the
 * requests' answers are cleared. */
static int td_gng_unit_batch(td_gpu *g, td_ngram_req *reqs, size_t n)
{
	const td_archive *a = td_gpu_archive(g);
	const unsigned threads = td_gpu_cpu_threads(g);
	td_gunit u;
	if (!td_gpu_unit(g, &u) || n > UINT32_MAX)
		return td_cpu_ngram(a, reqs, n, threads);
	size_t *rest = malloc((n + 1) * sizeof *rest), nrest = 0, cap = 1024;
	uint32_t *map = malloc((n + 1) * sizeof *map);
	uint64_t *topn = malloc((n + 1) * sizeof *topn);
	td_gwd_span *sp = malloc(cap * sizeof *sp);
	int r = rest && map && topn && sp ? TD_OK : td_fail(TD_ENOMEM, "gpu: n-gram batch");
	if (r) {
		free(rest);
		free(map);
		free(topn);
		free(sp);
		return r;
	}
	pthread_mutex_lock(u.lock);
	cudaSetDevice(u.device);
	r = *u.wd ? TD_OK : td_gwd_build(&u, u.wd);
	const struct td_gwd *w = *u.wd;
	td_gngb b = { .w = w, .reqs = reqs, .nt = threads ? (threads > 64 ? 64 : threads) : 1, .map = map };
	int gpu_ok = w != NULL;
	if (r != TD_ENOMEM)
		r = TD_OK;
	/* a round of each length; bad lengths go to the engine with 2's */
	for (unsigned len = 2; !r && len <= TD_PHRASE_MAX; len++) {
		uint32_t nsp = 0;
		uint64_t ntasks = 0, nwords = 0;
		b.len = len;
		b.nreq = 0;
		for (size_t i = 0; i <= n && !r; i++) {
			unsigned ql = i < n ? reqs[i].len : 0;
			if (i < n && (ql >= 2 && ql <= TD_PHRASE_MAX ? ql != len : len != 2))
				continue;
			uint64_t f0 = 0, f1 = 0, words = 0;
			int take = i < n && gpu_ok && ql == len && td_gwd_take(w, &u, reqs[i].scope, &f0, &f1, &words);
			if (b.nreq && (i == n || (take && (nwords + words > TD_GWD_ROUND ||
							   nsp + (f1 - f0) > UINT32_MAX / 2)))) {
				int x = td_gng_run(&b, &u, sp, nsp, topn, ntasks, nwords);
				if (x) {
					for (uint32_t k = 0; k < b.nreq; k++) {
						td_ngram_req_free(&reqs[map[k]]);
						rest[nrest++] = map[k];
					}
					if (x == TD_ENOMEM)
						r = x;
					else
						gpu_ok = 0;
				}
				b.nreq = 0;
				nsp = 0;
				ntasks = nwords = 0;
			}
			if (i == n)
				break;
			if (!take) {
				rest[nrest++] = i;
				continue;
			}
			topn[b.nreq] = reqs[i].top;
			map[b.nreq] = (uint32_t)i;
			if (td_gwd_spans(w, &u, f0, f1, b.nreq, &sp, &cap, &nsp, &ntasks))
				r = TD_ENOMEM;
			b.nreq++;
			nwords += words;
		}
	}
	pthread_mutex_unlock(u.lock);
	if (r != TD_ENOMEM) {
		for (size_t k = 0; k < nrest; k++)
			td_ngram_req_free(&reqs[rest[k]]);
		r = td_gpu_cpu_rest(a, threads, reqs, sizeof *reqs, rest, nrest, td_cpu_ngram);
	} else {
		for (size_t k = 0; k < n; k++)
			td_ngram_req_free(&reqs[k]);
	}
	free(rest);
	free(map);
	free(topn);
	free(sp);
	return r;
}

/* ---- n-grams of format 5: by shard ---- */

typedef struct td_gngm {
	td_gmulti *m;
	const td_archive *a;
	td_ngram_req *reqs;
	td_gwm_unit_l *one;            /* a unit each: its whole scopes */
	const size_t *cmap;            /* the engine's requests, one of each question */
	size_t nc;
	const size_t *dup;             /* pairs (request, the same question in cmap) */
	size_t ndup;
	unsigned threads;
	uint32_t nu;
	int err;
} td_gngm;

/* *d = a copy of answer *q. TD_OK or TD_ENOMEM. */
static int td_gng_copy(td_ngram_req *d, const td_ngram_req *q)
{
	d->err = q->err;
	if (!q->ngrams)
		return TD_OK;
	d->grams = malloc(q->ngrams * sizeof *d->grams);
	d->bytes = malloc(q->nbytes ? q->nbytes : 1);
	if (!d->grams || !d->bytes) {
		td_ngram_req_free(d);
		return TD_ENOMEM;
	}
	memcpy(d->grams, q->grams, q->ngrams * sizeof *d->grams);
	memcpy(d->bytes, q->bytes, q->nbytes);
	d->ngrams = q->ngrams;
	d->nbytes = q->nbytes;
	return TD_OK;
}

/* Order of requests by question (scope, length, top), then index. */
static int td_gng_qcmp(const void *x, const void *y, void *ctx)
{
	const td_ngram_req *r = ctx, *p = &r[*(const size_t *)x], *q = &r[*(const size_t *)y];
	if (p->scope != q->scope)
		return p->scope < q->scope ? -1 : 1;
	if (p->len != q->len)
		return p->len < q->len ? -1 : 1;
	if (p->top != q->top)
		return p->top < q->top ? -1 : 1;
	return (*(const size_t *)x > *(const size_t *)y) - (*(const size_t *)x < *(const size_t *)y);
}

/* Task s < nu: shard s's requests on its handle; task nu: the engine's
 * requests on the whole archive, meanwhile. */
static void td_gngm_unit(void *ctx, unsigned s)
{
	td_gngm *c = ctx;
	int r = TD_OK;
	if (s == c->nu) {
		if (c->nc)
			r = td_gpu_cpu_rest(c->a, c->threads, c->reqs, sizeof *c->reqs, c->cmap, c->nc, td_cpu_ngram);
		for (size_t k = 0; !r && k < c->ndup; k++)
			r = td_gng_copy(&c->reqs[c->dup[2 * k]], &c->reqs[c->dup[2 * k + 1]]);
		if (r)
			c->err = r;
		return;
	}
	const td_gwm_unit_l *one = &c->one[s];
	td_gpu *h = td_gmulti_handle(c->m, s);
	if (!one->n || !h)
		return;
	td_ngram_req *sub = calloc(one->n, sizeof *sub);
	if (!sub) {
		c->err = TD_ENOMEM;
		return;
	}
	for (size_t k = 0; k < one->n; k++) {
		const td_ngram_req *q = &c->reqs[one->req[k]];
		sub[k] = (td_ngram_req){ .scope = one->local[k], .len = q->len, .top = q->top };
	}
	if ((r = td_gng_unit_batch(h, sub, one->n)) == TD_OK)
		for (size_t k = 0; k < one->n; k++) {
			td_ngram_req *q = &c->reqs[one->req[k]];
			q->grams = sub[k].grams;
			q->bytes = sub[k].bytes;
			q->ngrams = sub[k].ngrams;
			q->nbytes = sub[k].nbytes;
			q->err = sub[k].err;
		}
	free(sub);
	if (r)
		c->err = r;
}

static int td_gng_multi(td_gpu *g, td_gmulti *m, td_ngram_req *reqs, size_t n)
{
	const td_archive *a = td_gpu_archive(g);
	const uint32_t nu = td_gmulti_units(m), nent = td_archive_nentries(a);
	td_gngm c = { .m = m, .a = a, .reqs = reqs, .threads = td_gpu_cpu_threads(g), .nu = nu };
	size_t *ocap = calloc(nu + 1, sizeof *ocap), *cmap = malloc((n + 1) * sizeof *cmap), nc = 0;
	c.one = calloc(nu + 1, sizeof *c.one);
	int r = ocap && cmap && c.one ? TD_OK : TD_ENOMEM;
	for (size_t i = 0; i < n && !r; i++) {
		const td_disk_piece *p = NULL;
		uint64_t np = 0;
		td_entry e = reqs[i].scope;
		td_stat st;
		/* bad lengths, the corpus, symbolic links, bad entries, scopes
		 * over several shards: the engine */
		if (reqs[i].len < 2 || reqs[i].len > TD_PHRASE_MAX || e >= nent || e == TD_ROOT ||
		    td_archive_stat(a, e, &st) || !(S_ISREG(st.mode) || S_ISDIR(st.mode)) || td_archive_pieces(a, e, &p, &np) || np != 1 || p[0].shard >= nu || !td_gmulti_handle(m, p[0].shard))
			cmap[nc++] = i;
		else
			r = td_gwm_push(&c.one[p[0].shard], &ocap[p[0].shard], i, p[0].local);
	}
	/* the engine's requests asking the same question (a scope over
	 * several shards costs it a merge of every piece): answered once,
	 * then copied */
	size_t *dup = !r && nc > 1 ? malloc(2 * nc * sizeof *dup) : NULL, ndup = 0;
	if (dup) {
		qsort_r(cmap, nc, sizeof *cmap, td_gng_qcmp, reqs);
		size_t nu2 = 0;
		for (size_t k = 0; k < nc; k++) {
			const td_ngram_req *p = &reqs[cmap[k]], *q = nu2 ? &reqs[cmap[nu2 - 1]] : NULL;
			if (q && p->scope == q->scope && p->len == q->len && p->top == q->top) {
				dup[2 * ndup] = cmap[k];
				dup[2 * ndup++ + 1] = cmap[nu2 - 1];
			} else {
				cmap[nu2++] = cmap[k];
			}
		}
		nc = nu2;
	}
	if (!r) {
		c.cmap = cmap;
		c.nc = nc;
		c.dup = dup;
		c.ndup = ndup;
		td_gpu_par(nu + 1, td_gngm_unit, &c);
		r = c.err;
	}
	for (uint32_t s = 0; s < nu && c.one; s++) {
		free(c.one[s].req);
		free(c.one[s].local);
	}
	if (r)
		for (size_t i = 0; i < n; i++)
			td_ngram_req_free(&reqs[i]);
	free(c.one);
	free(cmap);
	free(dup);
	free(ocap);
	return r == TD_ENOMEM ? td_fail(TD_ENOMEM, "gpu: n-gram batch") : r;
}

int td_gpu_ngram_batch(td_gpu *g, td_ngram_req *reqs, size_t n)
{
	if (!g || (!reqs && n))
		return td_fail(TD_EINVAL, "gpu: bad batch");
	for (size_t i = 0; i < n; i++) {
		reqs[i].grams = NULL;
		reqs[i].bytes = NULL;
		reqs[i].ngrams = reqs[i].nbytes = 0;
		reqs[i].err = TD_OK;
	}
	td_gmulti *m = td_gpu_multi(g);
	if (m && n <= UINT32_MAX)
		return td_gng_multi(g, m, reqs, n);
	return td_gng_unit_batch(g, reqs, n);
}
