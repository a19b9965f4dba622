/* td_gpu_words: word counts of many scopes at once on the GPU (top words, term vectors): expansion, sort, runs. */
#include <stdlib.h>
#include <string.h>

#include "td_analytics.h"
#include "td_err.h"
#include "td_format.h"
#include "td_gpu_int.h"
#include "td_gpu_dev.cuh"

/*
 * A round (td_gwd_round): every task (one root symbol of a span) writes its
 * word tokens as keys (request << wb | word id) at its place (a prefix sum
 * of the tasks' word counts); the keys are sorted; each run of equal keys
 * is a (request, word, count); a term vector is the runs in order (word ids
 * are in byte order), top words the runs sorted again, stably, by (request,
 * count descending), cut to n a request. Every step is an integer sum, a
 * scan or a stable sort, so the result does not depend on thread order.
 */

enum { B_SPAN, B_TOFF, B_KA, B_KB, B_RFIRST, B_RKEY, B_V0, B_V1, B_RC, B_KEEP, B_TOPN, B_ONE, B_SWS, B_KST, B_OUTW, B_N };

struct td_gwdev {
	td_gwd_in d;                   /* device arrays */
	void *mem[4];
	void *buf[B_N];
	size_t cap[B_N];
};

static int td_gwd_err(cudaError_t e, const char *what)
{
	return e == cudaSuccess ? TD_OK : td_fail(TD_ENOGPU, "gpu: words %s: %s", what, cudaGetErrorString(e));
}

#define WCK(x, what)                                    \
	do {                                            \
		int r_ = td_gwd_err((x), what);         \
		if (r_)                                 \
			return r_;                      \
	} while (0)

extern "C" void td_gwdev_free(struct td_gwdev *z)
{
	if (!z)
		return;
	for (int i = 0; i < 4; i++)
		td_dfree(z->mem[i]);
	for (int i = 0; i < B_N; i++)
		td_dfree(z->buf[i]);
	free(z);
}

static int td_gwd_up(void **dst, const void *src, size_t bytes)
{
	WCK(td_dalloc(dst, bytes), "upload");
	WCK(td_h2d(*dst, src, bytes, 0), "upload");
	return TD_OK;
}

extern "C" int td_gwdev_upload(const td_gwd_in *in, struct td_gwdev **out)
{
	struct td_gwdev *z = (struct td_gwdev *)calloc(1, sizeof *z);
	if (!z)
		return td_fail(TD_ENOMEM, "gpu: words");
	z->d = *in;
	int r = td_gwd_up(&z->mem[0], in->roots, 4 * in->nroot);
	if (!r)
		r = td_gwd_up(&z->mem[1], in->rstart, 4 * (in->nrules + 1));
	if (!r)
		r = td_gwd_up(&z->mem[2], in->rsyms, 4 * in->nrsyms);
	if (!r)
		r = td_gwd_up(&z->mem[3], in->rnw, 4 * in->nrules);
	if (!r)
		r = td_gwd_err(td_dsync(0), "upload");
	if (r) {
		td_gwdev_free(z);
		return r;
	}
	z->d.roots = (const uint32_t *)z->mem[0];
	z->d.rstart = (const uint32_t *)z->mem[1];
	z->d.rsyms = (const uint32_t *)z->mem[2];
	z->d.rnw = (const uint32_t *)z->mem[3];
	*out = z;
	return TD_OK;
}

/* Buffer b of at least `need` bytes (contents not kept). */
static int td_gwd_grow(struct td_gwdev *z, int b, size_t need)
{
	if (need <= z->cap[b])
		return TD_OK;
	td_dfree(z->buf[b]);
	z->buf[b] = NULL;
	z->cap[b] = 0;
	size_t c = need < 4096 ? 4096 : need + need / 4;
	WCK(td_dalloc(&z->buf[b], c), "buffers");
	z->cap[b] = c;
	return TD_OK;
}

/* The span holding task i (spans ascending by t0, the first at 0). */
TD_HD inline uint32_t td_gwd_span_of(const td_gwd_span *sp, uint32_t nsp, uint64_t i)
{
	uint32_t lo = 0, hi = nsp;
	while (hi - lo > 1) {
		uint32_t m = lo + (hi - lo) / 2;
		if (sp[m].t0 <= i)
			lo = m;
		else
			hi = m;
	}
	return lo;
}

/* Word tokens of each task. */
struct td_wx_tw {
	td_gwd_in d;
	const td_gwd_span *sp;
	uint32_t nsp;
	uint64_t *tw;
	TD_HD void operator()(uint64_t i) const
	{
		const td_gwd_span s = sp[td_gwd_span_of(sp, nsp, i)];
		uint64_t y = d.roots[s.rs + (i - s.t0)];
		tw[i] = y < d.w2 ? 1 : y >= d.t ? d.rnw[y - d.t] : 0;
	}
};

/* Each task's word tokens as keys, from keys[toff[i]] on, depth first. */
struct td_wx_expand {
	td_gwd_in d;
	const td_gwd_span *sp;
	uint32_t nsp;
	unsigned wb;
	const uint64_t *toff;
	uint64_t *keys;
	TD_HD void operator()(uint64_t i) const
	{
		const td_gwd_span s = sp[td_gwd_span_of(sp, nsp, i)];
		uint64_t y = d.roots[s.rs + (i - s.t0)];
		uint64_t pre = (uint64_t)s.req << wb, o = toff[i];
		if (y < d.w2) {
			keys[o] = pre | (y >> 1);
			return;
		}
		if (y < d.t)
			return;
		uint32_t pos[TD_MAXDEPTH + 2], end[TD_MAXDEPTH + 2];
		int top = 0;
		pos[0] = d.rstart[y - d.t];
		end[0] = d.rstart[y - d.t + 1];
		while (top >= 0) {
			if (pos[top] == end[top]) {
				top--;
				continue;
			}
			uint32_t c = d.rsyms[pos[top]++];
			if (c < d.w2) {
				keys[o++] = pre | (c >> 1);
			} else if (c >= d.t && top + 1 < (int)TD_MAXDEPTH + 2) {
				top++;
				pos[top] = d.rstart[c - d.t];
				end[top] = d.rstart[c - d.t + 1];
			}
		}
	}
};

/* flag[i] = whether sorted key i starts a run. */
struct td_wx_flag {
	const uint64_t *k;
	uint64_t *flag;
	TD_HD void operator()(uint64_t i) const { flag[i] = i == 0 || k[i] != k[i - 1]; }
};

/* Runs: first index and key of each; *nruns from the last key. */
struct td_wx_runs {
	const uint64_t *k, *pos;
	uint64_t n;
	uint64_t *rfirst, *rkey, *nruns;
	TD_HD void operator()(uint64_t i) const
	{
		int f = i == 0 || k[i] != k[i - 1];
		if (f) {
			rfirst[pos[i]] = i;
			rkey[pos[i]] = k[i];
		}
		if (i == n - 1)
			*nruns = pos[i] + (uint64_t)f;
	}
};

/* Run j's word id and count (vector), or its second sort key (top); runs
 * a request. */
struct td_wx_count {
	const uint64_t *rfirst, *rkey;
	uint64_t n, nruns;
	unsigned wb;
	int top;
	uint32_t *wid, *cnt;
	uint64_t *key2, *rc;
	TD_HD void operator()(uint64_t j) const
	{
		uint64_t c = (j + 1 < nruns ? rfirst[j + 1] : n) - rfirst[j];
		uint64_t req = rkey[j] >> wb;
		uint32_t w = (uint32_t)(rkey[j] & ((UINT64_C(1) << wb) - 1));
		wid[j] = w;
		if (top)
			key2[j] = req << 32 | (UINT64_C(0xffffffff) - c);
		else
			cnt[j] = (uint32_t)c;
		td_atomic_add(&rc[req], 1);
	}
};

/* keep[r] = runs kept of request r (at most topn[r]; 0: all). */
struct td_wx_keep {
	const uint64_t *rc, *topn;
	uint64_t *keep;
	TD_HD void operator()(uint64_t r) const { keep[r] = topn[r] && topn[r] < rc[r] ? topn[r] : rc[r]; }
};

/* The first keep[r] runs of each request (sorted by the second key) to
 * kstart[r] on. */
struct td_wx_cut {
	const uint64_t *k2, *seg, *keep, *kstart;
	const uint32_t *v;
	uint32_t *wid, *cnt;
	TD_HD void operator()(uint64_t j) const
	{
		uint64_t req = k2[j] >> 32, at = j - seg[req];
		if (at < keep[req]) {
			wid[kstart[req] + at] = v[j];
			cnt[kstart[req] + at] = (uint32_t)(UINT64_C(0xffffffff) - (k2[j] & UINT64_C(0xffffffff)));
		}
	}
};

static unsigned td_gwd_bits(uint64_t v)
{
	unsigned b = 1;
	while (b < 64 && (UINT64_C(1) << b) <= v)
		b++;
	return b;
}

static int td_gwd_do(struct td_gwdev *z, cudaStream_t st, const td_gwd_span *sp, uint32_t nsp, uint32_t nreq,
		     uint64_t ntasks, uint64_t nwords, int top, const uint64_t *topn, td_gwd_out *o)
{
	int r;
	uint64_t nw1 = nwords ? nwords : 1;
	if ((r = td_gwd_grow(z, B_SPAN, nsp * sizeof *sp)) || (r = td_gwd_grow(z, B_TOFF, 8 * (ntasks + 1))) ||
	    (r = td_gwd_grow(z, B_KA, 8 * nw1)) || (r = td_gwd_grow(z, B_KB, 8 * nw1)) ||
	    (r = td_gwd_grow(z, B_RFIRST, 8 * nw1)) || (r = td_gwd_grow(z, B_RKEY, 8 * nw1)) ||
	    (r = td_gwd_grow(z, B_V0, 4 * nw1)) || (r = td_gwd_grow(z, B_V1, 4 * nw1)) ||
	    (r = td_gwd_grow(z, B_RC, 8 * (nreq + 1))) || (r = td_gwd_grow(z, B_KEEP, 8 * (nreq + 1))) ||
	    (r = td_gwd_grow(z, B_TOPN, 8 * (nreq + 1))) || (r = td_gwd_grow(z, B_ONE, 8)) ||
	    (r = td_gwd_grow(z, B_KST, 8 * (nreq + 1))))
		return r;
	const td_gwd_span *dsp = (const td_gwd_span *)z->buf[B_SPAN];
	uint64_t *toff = (uint64_t *)z->buf[B_TOFF], *ka = (uint64_t *)z->buf[B_KA], *kb = (uint64_t *)z->buf[B_KB];
	uint64_t *rfirst = (uint64_t *)z->buf[B_RFIRST], *rkey = (uint64_t *)z->buf[B_RKEY];
	uint32_t *v0 = (uint32_t *)z->buf[B_V0], *v1 = (uint32_t *)z->buf[B_V1];
	uint64_t *rc = (uint64_t *)z->buf[B_RC], *keep = (uint64_t *)z->buf[B_KEEP], *one = (uint64_t *)z->buf[B_ONE];
	unsigned wb = td_gwd_bits(z->d.w2 / 2), rb = td_gwd_bits(nreq);
	WCK(td_h2d((void *)dsp, sp, nsp * sizeof *sp, st), "spans");
	WCK(td_each(ntasks, td_wx_tw{ z->d, dsp, nsp, toff }, st), "task sizes");
	WCK(td_dscan(toff, toff, ntasks, st), "task offsets");
	WCK(td_each(ntasks, td_wx_expand{ z->d, dsp, nsp, wb, toff, ka }, st), "expand");
	WCK(td_dsort_keys(ka, kb, nwords, (int)(wb + rb), st), "sort");
	WCK(td_each(nwords, td_wx_flag{ kb, ka }, st), "runs");
	WCK(td_dscan(ka, ka, nwords, st), "runs");
	WCK(td_dzero(one, 8, st), "runs");
	WCK(td_each(nwords, td_wx_runs{ kb, ka, nwords, rfirst, rkey, one }, st), "runs");
	uint64_t nruns = 0;
	WCK(td_d2h(&nruns, one, 8, st), "runs");
	WCK(td_dsync(st), "runs");
	if (nruns > nwords)
		return td_fail(TD_ENOGPU, "gpu: words: runs do not add up");
	WCK(td_dzero(rc, 8 * (nreq + 1), st), "counts");
	/* vector: v0 = word ids, v1 = counts; top: v0 = word ids, ka = second keys */
	WCK(td_each(nruns, td_wx_count{ rfirst, rkey, nwords, nruns, wb, top, v0, v1, ka, rc }, st), "counts");
	const uint32_t *ow = v0, *oc = v1;
	uint64_t *hk = (uint64_t *)malloc(8 * (nreq + 1));
	if (!hk)
		return td_fail(TD_ENOMEM, "gpu: words");
	uint64_t nout = nruns;
	int e = TD_OK;
	if (top) {
		/* stable: equal counts keep word id order */
		uint64_t *seg = rfirst; /* free now */
		uint32_t *ocnt = (uint32_t *)rkey;
		uint64_t *kstart = (uint64_t *)z->buf[B_KST], *tn = (uint64_t *)z->buf[B_TOPN];
		if ((e = td_gwd_err(td_h2d(tn, topn, 8 * nreq, st), "cut")) ||
		    (e = td_gwd_err(td_dsort(ka, kb, v0, v1, nruns, (int)(32 + rb), st), "sort")) ||
		    (e = td_gwd_err(td_dscan(rc, seg, nreq, st), "cut")) ||
		    (e = td_gwd_err(td_each(nreq, td_wx_keep{ rc, tn, keep }, st), "cut")) ||
		    (e = td_gwd_err(td_dscan(keep, kstart, nreq, st), "cut")) ||
		    (e = td_gwd_err(td_each(nruns, td_wx_cut{ kb, seg, keep, kstart, v1, v0, ocnt }, st), "cut")) ||
		    (e = td_gwd_err(td_d2h(hk, keep, 8 * nreq, st), "cut")) ||
		    (e = td_gwd_err(td_dsync(st), "cut")))
			goto fail;
		nout = 0;
		for (uint32_t i = 0; i < nreq; i++)
			nout += hk[i];
		ow = v0;
		oc = ocnt;
	} else if ((e = td_gwd_err(td_d2h(hk, rc, 8 * nreq, st), "counts")) ||
		   (e = td_gwd_err(td_dsync(st), "counts"))) {
		goto fail;
	}
	o->wid = (uint32_t *)malloc(4 * (nout + 1));
	o->cnt = (uint32_t *)malloc(4 * (nout + 1));
	o->start = (uint64_t *)malloc(8 * ((size_t)nreq + 1));
	if (!o->wid || !o->cnt || !o->start) {
		e = td_fail(TD_ENOMEM, "gpu: words");
		goto fail;
	}
	o->start[0] = 0;
	for (uint32_t i = 0; i < nreq; i++)
		o->start[i + 1] = o->start[i] + hk[i];
	o->nruns = nout;
	if ((e = td_gwd_err(td_d2h(o->wid, ow, 4 * nout, st), "download")) ||
	    (e = td_gwd_err(td_d2h(o->cnt, oc, 4 * nout, st), "download")) ||
	    (e = td_gwd_err(td_dsync(st), "download")))
		goto fail;
	free(hk);
	return TD_OK;
fail:
	free(hk);
	return e;
}

extern "C" int td_gwdev_round(struct td_gwdev *z, void *stream, const td_gwd_span *sp, uint32_t nsp, uint32_t nreq,
			    uint64_t ntasks, uint64_t nwords, int top, const uint64_t *topn, td_gwd_out *o)
{
	memset(o, 0, sizeof *o);
	if (td_gwd_bits(z->d.w2 / 2) + td_gwd_bits(nreq) > 64 || td_gwd_bits(nreq) > 31)
		return td_fail(TD_ENOGPU, "gpu: words: batch too large");
	int r = td_gwd_do(z, (cudaStream_t)stream, sp, nsp, nreq, ntasks, nwords, top, topn, o);
	if (r) {
		free(o->wid);
		free(o->cnt);
		free(o->start);
		memset(o, 0, sizeof *o);
	}
	return r;
}

/* ---- n-grams ----
 *
 * The same expansion writes each request's word tokens in file order
 * (seq); a run of len words starts at every position whose span (one
 * file) holds len words from it. The starts are sorted by (request, word
 * 0, ..., word len-1), least significant digits first, as many digits a
 * stable radix sort as fit in 64 bits; word ids are in byte order and
 * word bytes are above ' ', so this is the order of the runs' words
 * joined by spaces. Equal neighbours are one run of the answer; the runs
 * are sorted again, stably, by (request, count descending) and cut to
 * topn a request, as top words are. */

/* sws[s] = first word of span s; sws[nsp] = nwords. */
struct td_ng_sws {
	const td_gwd_span *sp;
	const uint64_t *toff;
	uint32_t nsp;
	uint64_t nwords;
	uint64_t *sws;
	TD_HD void operator()(uint64_t s) const
	{
		sws[s] = toff[sp[s].t0];
		if (s + 1 == nsp)
			sws[nsp] = nwords;
	}
};

/* flag[p] = whether a run of len words starts at p (inside its span). */
struct td_ng_start {
	const uint64_t *sws;
	uint32_t nsp;
	unsigned len;
	uint64_t *flag;
	TD_HD void operator()(uint64_t p) const
	{
		uint32_t lo = 0, hi = nsp;
		while (hi - lo > 1) {
			uint32_t m = lo + (hi - lo) / 2;
			if (sws[m] <= p)
				lo = m;
			else
				hi = m;
		}
		flag[p] = p + len <= sws[lo + 1];
	}
};

/* The starts, compacted: v[pos[p]] = p; *cnt from the last. */
struct td_ng_pack {
	const uint64_t *flag, *pos;
	uint64_t n;
	uint32_t *v;
	uint64_t *cnt;
	TD_HD void operator()(uint64_t p) const
	{
		if (flag[p])
			v[pos[p]] = (uint32_t)p;
		if (p == n - 1)
			*cnt = pos[p] + flag[p];
	}
};

/* A sort key of digits [d0, d1) of start v[j]: digit 0 the request,
 * digit k the run's word k-1, most significant first. */
struct td_ng_key {
	const uint64_t *seq;
	const uint32_t *v;
	unsigned wb, rb, d0, d1;
	uint64_t *key;
	TD_HD void operator()(uint64_t j) const
	{
		uint64_t p = v[j], k = 0, m = (UINT64_C(1) << wb) - 1;
		for (unsigned d = d0; d < d1; d++)
			k = d == 0 ? k << rb | seq[p] >> wb : k << wb | (seq[p + d - 1] & m);
		key[j] = k;
	}
};

/* flag[j] = whether sorted start j begins a new run (request or words differ). */
struct td_ng_flag {
	const uint64_t *seq;
	const uint32_t *v;
	unsigned len, wb;
	uint64_t *flag;
	TD_HD void operator()(uint64_t j) const
	{
		if (j == 0) {
			flag[j] = 1;
			return;
		}
		uint64_t p = v[j], q = v[j - 1], m = (UINT64_C(1) << wb) - 1;
		int f = seq[p] >> wb != seq[q] >> wb;
		for (unsigned k = 0; !f && k < len; k++)
			f = (seq[p + k] & m) != (seq[q + k] & m);
		flag[j] = (uint64_t)f;
	}
};

/* Run j: its first sorted start, from the flags' scan pos. */
struct td_ng_runs {
	const uint64_t *flag, *pos;
	uint64_t n;
	uint64_t *rfirst, *nruns;
	TD_HD void operator()(uint64_t j) const
	{
		if (flag[j])
			rfirst[pos[j]] = j;
		if (j == n - 1)
			*nruns = pos[j] + flag[j];
	}
};

/* Run j's second sort key (request, count descending) and its start. */
struct td_ng_count {
	const uint64_t *seq, *rfirst;
	const uint32_t *v;
	uint64_t n, nruns;
	unsigned wb;
	uint64_t *key2, *rc;
	uint32_t *start;
	TD_HD void operator()(uint64_t j) const
	{
		uint64_t c = (j + 1 < nruns ? rfirst[j + 1] : n) - rfirst[j];
		uint32_t p = v[rfirst[j]];
		uint64_t req = seq[p] >> wb;
		key2[j] = req << 32 | (UINT64_C(0xffffffff) - c);
		start[j] = p;
		td_atomic_add(&rc[req], 1);
	}
};

/* The first keep[r] runs of each request to kstart[r] on: words and count. */
struct td_ng_cut {
	const uint64_t *seq, *k2, *seg, *keep, *kstart;
	const uint32_t *start;
	unsigned len, wb;
	uint32_t *wid, *cnt;
	TD_HD void operator()(uint64_t j) const
	{
		uint64_t req = k2[j] >> 32, at = j - seg[req], m = (UINT64_C(1) << wb) - 1;
		if (at >= keep[req])
			return;
		uint64_t o = kstart[req] + at;
		cnt[o] = (uint32_t)(UINT64_C(0xffffffff) - (k2[j] & UINT64_C(0xffffffff)));
		for (unsigned k = 0; k < len; k++)
			wid[o * len + k] = (uint32_t)(seq[start[j] + k] & m);
	}
};

/* d2h of n values and a sync. */
static int td_ng_count_back(uint64_t *h, const uint64_t *d, cudaStream_t st, const char *what)
{
	WCK(td_d2h(h, d, 8, st), what);
	WCK(td_dsync(st), what);
	return TD_OK;
}

static int td_ng_do(struct td_gwdev *z, cudaStream_t st, const td_gwd_span *sp, uint32_t nsp, uint32_t nreq,
		    uint64_t ntasks, uint64_t nwords, unsigned len, const uint64_t *topn, td_gng_out *o)
{
	int r;
	uint64_t nw1 = nwords ? nwords : 1;
	if ((r = td_gwd_grow(z, B_SPAN, nsp * sizeof *sp)) || (r = td_gwd_grow(z, B_TOFF, 8 * (ntasks + 1))) ||
	    (r = td_gwd_grow(z, B_KA, 8 * nw1)) || (r = td_gwd_grow(z, B_KB, 8 * nw1)) ||
	    (r = td_gwd_grow(z, B_RFIRST, 8 * nw1)) || (r = td_gwd_grow(z, B_RKEY, 8 * nw1)) ||
	    (r = td_gwd_grow(z, B_V0, 4 * nw1)) || (r = td_gwd_grow(z, B_V1, 4 * nw1)) ||
	    (r = td_gwd_grow(z, B_RC, 8 * (nreq + 1))) || (r = td_gwd_grow(z, B_KEEP, 8 * (nreq + 1))) ||
	    (r = td_gwd_grow(z, B_TOPN, 8 * (nreq + 1))) || (r = td_gwd_grow(z, B_ONE, 8)) ||
	    (r = td_gwd_grow(z, B_KST, 8 * (nreq + 1))) || (r = td_gwd_grow(z, B_SWS, 8 * ((uint64_t)nsp + 1))))
		return r;
	const td_gwd_span *dsp = (const td_gwd_span *)z->buf[B_SPAN];
	uint64_t *toff = (uint64_t *)z->buf[B_TOFF], *seq = (uint64_t *)z->buf[B_KA], *kb = (uint64_t *)z->buf[B_KB];
	uint64_t *ta = (uint64_t *)z->buf[B_RFIRST], *tb = (uint64_t *)z->buf[B_RKEY], *sws = (uint64_t *)z->buf[B_SWS];
	uint32_t *va = (uint32_t *)z->buf[B_V0], *vb = (uint32_t *)z->buf[B_V1];
	uint64_t *rc = (uint64_t *)z->buf[B_RC], *keep = (uint64_t *)z->buf[B_KEEP], *one = (uint64_t *)z->buf[B_ONE];
	uint64_t *kstart = (uint64_t *)z->buf[B_KST], *tn = (uint64_t *)z->buf[B_TOPN];
	const unsigned wb = td_gwd_bits(z->d.w2 / 2), rb = td_gwd_bits(nreq);
	uint64_t ng = 0, nruns = 0;
	WCK(td_h2d((void *)dsp, sp, nsp * sizeof *sp, st), "spans");
	WCK(td_h2d(tn, topn, 8 * nreq, st), "spans");
	WCK(td_each(ntasks, td_wx_tw{ z->d, dsp, nsp, toff }, st), "task sizes");
	WCK(td_dscan(toff, toff, ntasks, st), "task offsets");
	WCK(td_each(ntasks, td_wx_expand{ z->d, dsp, nsp, wb, toff, seq }, st), "expand");
	WCK(td_each(nsp, td_ng_sws{ dsp, toff, nsp, nwords, sws }, st), "starts");
	WCK(td_dzero(one, 8, st), "starts");
	if (nsp) {
		WCK(td_each(nwords, td_ng_start{ sws, nsp, len, ta }, st), "starts");
		WCK(td_dscan(ta, tb, nwords, st), "starts");
		WCK(td_each(nwords, td_ng_pack{ ta, tb, nwords, va, one }, st), "starts");
	}
	if ((r = td_ng_count_back(&ng, one, st, "starts")))
		return r;
	if (ng > nwords)
		return td_fail(TD_ENOGPU, "gpu: n-grams: starts do not add up");
	/* least significant digits first: digits 0 (request) .. len (last word) */
	for (int d1 = (int)len + 1; d1 > 0;) {
		int d0 = d1, bits = 0;
		while (d0 > 0 && bits + (int)(d0 - 1 == 0 ? rb : wb) <= 64)
			bits += (int)(--d0 == 0 ? rb : wb);
		WCK(td_each(ng, td_ng_key{ seq, va, wb, rb, (unsigned)d0, (unsigned)d1, ta }, st), "sort");
		WCK(td_dsort(ta, kb, va, vb, ng, bits, st), "sort");
		uint32_t *t = va;
		va = vb;
		vb = t;
		d1 = d0;
	}
	WCK(td_dzero(one, 8, st), "runs");
	WCK(td_each(ng, td_ng_flag{ seq, va, len, wb, ta }, st), "runs");
	WCK(td_dscan(ta, tb, ng, st), "runs");
	WCK(td_each(ng, td_ng_runs{ ta, tb, ng, kb, one }, st), "runs");
	if ((r = td_ng_count_back(&nruns, one, st, "runs")))
		return r;
	if (nruns > ng)
		return td_fail(TD_ENOGPU, "gpu: n-grams: runs do not add up");
	/* kb = first start of each run; ta = second keys, vb = the runs' starts */
	WCK(td_dzero(rc, 8 * (nreq + 1), st), "counts");
	WCK(td_each(nruns, td_ng_count{ seq, kb, va, ng, nruns, wb, ta, rc, vb }, st), "counts");
	if ((r = td_gwd_grow(z, B_OUTW, 4 * (uint64_t)len * (nruns ? nruns : 1))))
		return r;
	uint32_t *ow = (uint32_t *)z->buf[B_OUTW], *ocnt = vb;
	uint64_t *seg = kb;
	WCK(td_dsort(ta, tb, vb, va, nruns, (int)(32 + rb), st), "sort");
	/* tb = sorted second keys, va = their starts; vb free for counts */
	WCK(td_dscan(rc, seg, nreq, st), "cut");
	WCK(td_each(nreq, td_wx_keep{ rc, tn, keep }, st), "cut");
	WCK(td_dscan(keep, kstart, nreq, st), "cut");
	WCK(td_each(nruns, td_ng_cut{ seq, tb, seg, keep, kstart, va, len, wb, ow, ocnt }, st), "cut");
	uint64_t *hk = (uint64_t *)malloc(8 * ((size_t)nreq + 1));
	if (!hk)
		return td_fail(TD_ENOMEM, "gpu: n-grams");
	int e = td_gwd_err(td_d2h(hk, keep, 8 * nreq, st), "cut");
	if (!e)
		e = td_gwd_err(td_dsync(st), "cut");
	uint64_t nout = 0;
	for (uint32_t i = 0; !e && i < nreq; i++)
		nout += hk[i];
	if (!e) {
		o->wid = (uint32_t *)malloc(4 * (len * nout + 1));
		o->cnt = (uint32_t *)malloc(4 * (nout + 1));
		o->start = (uint64_t *)malloc(8 * ((size_t)nreq + 1));
		if (!o->wid || !o->cnt || !o->start)
			e = td_fail(TD_ENOMEM, "gpu: n-grams");
	}
	if (!e) {
		o->start[0] = 0;
		for (uint32_t i = 0; i < nreq; i++)
			o->start[i + 1] = o->start[i] + hk[i];
		o->nruns = nout;
		if (!(e = td_gwd_err(td_d2h(o->wid, ow, 4 * len * nout, st), "download")) &&
		    !(e = td_gwd_err(td_d2h(o->cnt, ocnt, 4 * nout, st), "download")))
			e = td_gwd_err(td_dsync(st), "download");
	}
	free(hk);
	return e;
}

extern "C" int td_gngdev_round(struct td_gwdev *z, void *stream, const td_gwd_span *sp, uint32_t nsp, uint32_t nreq,
			     uint64_t ntasks, uint64_t nwords, unsigned len, const uint64_t *topn, td_gng_out *o)
{
	memset(o, 0, sizeof *o);
	if (td_gwd_bits(z->d.w2 / 2) + td_gwd_bits(nreq) > 64 || td_gwd_bits(nreq) > 31 || len < 2 ||
	    len > TD_PHRASE_MAX || nwords >= UINT32_MAX)
		return td_fail(TD_ENOGPU, "gpu: n-grams: batch too large");
	int r = td_ng_do(z, (cudaStream_t)stream, sp, nsp, nreq, ntasks, nwords, len, topn, o);
	if (r) {
		free(o->wid);
		free(o->cnt);
		free(o->start);
		memset(o, 0, sizeof *o);
	}
	return r;
}
