/* td_gpu_words: word counts of many scopes at once on the GPU (top words, term vectors): expansion, sort, runs. */
#include <stdlib.h>
#include <string.h>

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

enum { B_SPAN, B_TOFF, B_KA, B_KB, B_RFIRST, B_RKEY, B_V0, B_V1, B_RC, B_KEEP, B_TOPN, B_ONE, B_N };

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
	    (r = td_gwd_grow(z, B_TOPN, 8 * (nreq + 1))) || (r = td_gwd_grow(z, B_ONE, 8)))
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
		uint64_t *kstart = toff, *tn = (uint64_t *)z->buf[B_TOPN];
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
