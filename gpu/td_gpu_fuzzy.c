/* td_gpu_fuzzy: fuzzy word search in batches: the vocabulary's matches on the GPU, the rest by the engine. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "td_err.h"
#include "td_gpu.h"
#include "td_gpu_int.h"
#include "td_tokenize.h"

/*
 * Each unit (the archive, or each resident shard) finds every query's
 * dictionary words within distance k on its device (td_gpu_fuzzy.cu);
 * then every request is answered by td_fuzzy_batch_given on the CPU threads with
 * those matches in place of its tree walk: the scope's counts, long words,
 * words cut between shards, the order and every error stay the engine's,
 * so the answer is td_fuzzy's. A unit that cannot take the batch (no room
 * for its vocabulary, a CUDA error) is searched by the engine's tree.
 */

#define TD_GFZ_MAXCP (TD_MAXTOK + 1)   /* code points of a dictionary word, at most */
#define TD_GFZ_MAXQ 4096u              /* longer queries go to the tree */
#define TD_GFZ_CAP 32u                 /* first pass: matches kept a query */

struct td_gfz {
	td_gfz_dev d;
	void *dmem;                    /* the arrays of d, one allocation */
	uint32_t nw;
	uint32_t lstart[TD_GFZ_MAXCP + 2]; /* words of l code points: [lstart[l], lstart[l+1]) */
	/* batch buffers on the device, grown as needed */
	void *dq, *dcp, *dcnt, *dout;
	size_t cq, ccp, ccnt, cout;
};

void td_gfz_free(struct td_gfz *z)
{
	if (!z)
		return;
	void *p[] = { z->dmem, z->dq, z->dcp, z->dcnt, z->dout };
	for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
		if (p[i])
			cudaFree(p[i]);
	free(z);
}

/* Code points of w[0..len) into cp (room for len), as engine/td_fuzzy.c
 * reads them; their number. */
static uint32_t td_gfz_cps(const uint8_t *w, size_t len, uint32_t *cp)
{
	uint32_t n = 0;
	for (size_t i = 0; i < len;) {
		uint32_t c = 0;
		unsigned k = td_utf8_decode(w + i, len - i, &c);
		if (!k) {
			k = 1;
			c = w[i] | 0x800000u;
		}
		cp[n++] = c;
		i += k;
	}
	return n;
}

static uint64_t td_gfz_mask(const uint32_t *cp, uint32_t n)
{
	uint64_t m = 0;
	for (uint32_t i = 0; i < n; i++)
		m |= td_gfz_bit(cp[i]);
	return m;
}

static int td_gfz_cuda(cudaError_t e, const char *what)
{
	return e == cudaSuccess ? TD_OK : td_fail(TD_EIO, "gpu: %s: %s", what, cudaGetErrorString(e));
}

#define GCK(x, what)                                            \
	do {                                                    \
		int r_ = td_gfz_cuda((x), what);                \
		if (r_)                                         \
			return r_;                              \
	} while (0)

/* Device buffer *p of at least need bytes (contents not kept). */
static int td_gfz_grow(void **p, size_t *cap, size_t need)
{
	if (need <= *cap)
		return TD_OK;
	if (*p)
		cudaFree(*p);
	*p = NULL;
	*cap = 0;
	size_t c = need < 4096 ? 4096 : need + need / 2;
	GCK(cudaMalloc(p, c), "fuzzy buffers");
	*cap = c;
	return TD_OK;
}

/* Build the unit's vocabulary and upload it. */
static int td_gfz_build(const td_gunit *u, struct td_gfz **out)
{
	uint64_t wsz = 0, osz = 0;
	const uint8_t *words = td_archive_bytes(u->a, TD_SEC_WORDS, &wsz);
	const void *offb = td_archive_bytes(u->a, TD_SEC_WORD_OFF, &osz);
	td_pack off;
	if (u->nwords >= (UINT32_C(1) << 30) || (u->nwords && (!words || !offb)) ||
	    (u->nwords && td_pack_view(&off, offb, osz)) || (u->nwords && off.n < u->nwords + 1))
		return td_fail(TD_ENOGPU, "gpu: fuzzy: vocabulary not taken");
	uint32_t nw = (uint32_t)u->nwords;
	struct td_gfz *z = calloc(1, sizeof *z);
	uint32_t *len = malloc(((size_t)nw + 1) * sizeof *len);
	uint32_t *tmp = malloc(TD_GFZ_MAXCP * 4 * sizeof *tmp);
	if (!z || !len || !tmp) {
		free(z);
		free(len);
		free(tmp);
		return td_fail(TD_ENOMEM, "gpu: fuzzy vocabulary");
	}
	z->nw = nw;
	/* code-point lengths, then a counting sort by them */
	uint64_t ncp = 0;
	int bad = 0;
	for (uint32_t i = 0; i < nw && !bad; i++) {
		uint64_t a = td_pack_get(&off, i), b = td_pack_get(&off, i + 1);
		if (b < a || b > wsz || b - a > TD_MAXTOK) {
			bad = 1;
			break;
		}
		len[i] = td_gfz_cps(words + a, b - a, tmp);
		ncp += len[i];
		z->lstart[len[i] + 1]++;
	}
	for (uint32_t l = 1; l < TD_GFZ_MAXCP + 2; l++)
		z->lstart[l] += z->lstart[l - 1];
	size_t bytes = (size_t)nw * (4 + 8 + 4) + 4 + ncp * 4;
	uint8_t *h = bad ? NULL : malloc(bytes + 8);
	int r = TD_OK;
	if (bad)
		r = td_fail(TD_ENOGPU, "gpu: fuzzy: vocabulary not taken");
	else if (!h)
		r = td_fail(TD_ENOMEM, "gpu: fuzzy vocabulary");
	if (!r) {
		/* layout: mask[nw] (8-aligned first), id[nw], cpoff[nw + 1], cps[ncp] */
		uint64_t *mask = (uint64_t *)h;
		uint32_t *id = (uint32_t *)(mask + nw), *cpoff = id + nw, *cps = cpoff + nw + 1;
		uint32_t next[TD_GFZ_MAXCP + 1];
		memcpy(next, z->lstart, sizeof next);
		for (uint32_t i = 0; i < nw; i++)
			id[next[len[i]]++] = i;
		uint64_t c = 0;
		for (uint32_t x = 0; x < nw; x++) {
			uint32_t i = id[x];
			uint64_t a = td_pack_get(&off, i), b = td_pack_get(&off, i + 1);
			cpoff[x] = (uint32_t)c;
			uint32_t n = td_gfz_cps(words + a, b - a, cps + c);
			mask[x] = td_gfz_mask(cps + c, n);
			c += n;
		}
		cpoff[nw] = (uint32_t)c;
		r = td_gfz_cuda(cudaMalloc(&z->dmem, bytes + 8), "fuzzy vocabulary");
		if (!r)
			r = td_gfz_cuda(cudaMemcpy(z->dmem, h, bytes, cudaMemcpyHostToDevice), "fuzzy vocabulary");
		if (!r) {
			uint64_t *dm = z->dmem;
			z->d.mask = dm;
			z->d.id = (const uint32_t *)(dm + nw);
			z->d.cpoff = z->d.id + nw;
			z->d.cps = z->d.cpoff + nw + 1;
		}
	}
	free(h);
	free(len);
	free(tmp);
	if (r) {
		td_gfz_free(z);
		return r;
	}
	*out = z;
	return TD_OK;
}

/* One unit's matches for the batch: query i's are v[start[i], start[i+1]),
 * or it was not taken (skip[i]: the engine walks the tree). */
typedef struct td_gfz_res {
	int ok;
	uint32_t *v;
	size_t *start;
	uint8_t *skip;
} td_gfz_res;

static void td_gfz_res_free(td_gfz_res *r)
{
	free(r->v);
	free(r->start);
	free(r->skip);
	memset(r, 0, sizeof *r);
}

/* Launch the queries of hq[0..nq) (bases and caps set) and download their
 * counts into cnt and matches into out (room for the caps). */
static int td_gfz_launch(struct td_gfz *z, void *stream, const td_gfz_q *hq, uint32_t nq, const uint32_t *hcp,
			 size_t ncp, uint32_t *cnt, uint32_t *out, size_t nout)
{
	if (!nq)
		return TD_OK;
	cudaStream_t st = stream;
	uint32_t nwarps = hq[nq - 1].seg0 + (hq[nq - 1].hi - hq[nq - 1].lo + TD_GFZ_SEG - 1) / TD_GFZ_SEG;
	int r;
	if ((r = td_gfz_grow(&z->dq, &z->cq, nq * sizeof *hq)) || (r = td_gfz_grow(&z->dcp, &z->ccp, ncp * 4 + 4)) ||
	    (r = td_gfz_grow(&z->dcnt, &z->ccnt, nq * 4)) || (r = td_gfz_grow(&z->dout, &z->cout, nout * 4 + 4)))
		return r;
	GCK(cudaMemcpyAsync(z->dq, hq, nq * sizeof *hq, cudaMemcpyHostToDevice, st), "fuzzy queries");
	GCK(cudaMemcpyAsync(z->dcp, hcp, ncp * 4, cudaMemcpyHostToDevice, st), "fuzzy queries");
	GCK(cudaMemsetAsync(z->dcnt, 0, nq * 4, st), "fuzzy counts");
	GCK((cudaError_t)td_gk_fuzzy(&z->d, z->dq, nq, nwarps, z->dcp, z->dcnt, z->dout, st), "fuzzy kernel");
	GCK(cudaMemcpyAsync(cnt, z->dcnt, nq * 4, cudaMemcpyDeviceToHost, st), "fuzzy counts");
	GCK(cudaMemcpyAsync(out, z->dout, nout * 4, cudaMemcpyDeviceToHost, st), "fuzzy matches");
	GCK(cudaStreamSynchronize(st), "fuzzy batch");
	return TD_OK;
}

/* Segments and output room of hq[0..nq), from caps. */
static uint64_t td_gfz_number(td_gfz_q *hq, uint32_t nq)
{
	uint64_t seg = 0, base = 0;
	for (uint32_t j = 0; j < nq; j++) {
		hq[j].seg0 = (uint32_t)seg;
		hq[j].base = (uint32_t)base;
		seg += (hq[j].hi - hq[j].lo + TD_GFZ_SEG - 1) / TD_GFZ_SEG;
		base += hq[j].cap;
	}
	return seg > UINT32_MAX || base > UINT32_MAX ? UINT64_MAX : base;
}

/* Every query of reqs against the unit's vocabulary into *res. */
static int td_gfz_unit(const td_gunit *u, const td_fuzzy_req *reqs, size_t n, td_gfz_res *res)
{
	int r;
	if (!*u->fz && (r = td_gfz_build(u, u->fz)))
		return r;
	struct td_gfz *z = *u->fz;
	res->start = calloc(n + 1, sizeof *res->start);
	res->skip = calloc(n + 1, 1);
	uint32_t *map = malloc((n + 1) * sizeof *map);
	td_gfz_q *hq = malloc((n + 1) * sizeof *hq);
	uint64_t qb = 0;
	for (size_t i = 0; i < n; i++)
		qb += reqs[i].len <= TD_GFZ_MAXQ ? reqs[i].len : 0;
	uint32_t *hcp = malloc((qb + 1) * sizeof *hcp);
	uint32_t *cnt = NULL, *out = NULL;
	r = !res->start || !res->skip || !map || !hq || !hcp ? td_fail(TD_ENOMEM, "gpu: fuzzy batch") : TD_OK;
	uint32_t nq = 0;
	size_t ncp = 0;
	for (size_t i = 0; i < n && !r; i++) {
		const td_fuzzy_req *q = &reqs[i];
		if (!q->word || !q->len || q->len > TD_GFZ_MAXQ || q->k > TD_FUZZY_MAXK || n > UINT32_MAX) {
			res->skip[i] = 1;
			continue;
		}
		uint32_t m = td_gfz_cps((const uint8_t *)q->word, q->len, hcp + ncp);
		uint32_t l0 = m > q->k ? m - q->k : 0, l1 = m + q->k;
		td_gfz_q x = { td_gfz_mask(hcp + ncp, m), (uint32_t)ncp, m, q->k, 0, 0, 0, 0, TD_GFZ_CAP };
		x.lo = l0 <= TD_GFZ_MAXCP ? z->lstart[l0] : z->nw;
		x.hi = l1 <= TD_GFZ_MAXCP ? z->lstart[l1 + 1] : z->nw;
		if (x.hi < x.lo)
			x.hi = x.lo;
		ncp += m;
		map[nq] = (uint32_t)i;
		hq[nq++] = x;
	}
	uint64_t room = r ? 0 : td_gfz_number(hq, nq);
	if (!r && room == UINT64_MAX)
		r = td_fail(TD_ENOGPU, "gpu: fuzzy batch too large");
	if (!r && (!(cnt = malloc((nq + 1) * sizeof *cnt)) || !(out = malloc((room + 1) * sizeof *out))))
		r = td_fail(TD_ENOMEM, "gpu: fuzzy batch");
	if (!r)
		r = td_gfz_launch(z, u->stream, hq, nq, hcp, ncp, cnt, out, room);
	/* queries with more matches than their slots: again, with room for all */
	uint32_t no = 0;
	uint64_t total = 0, oroom = 0;
	for (uint32_t j = 0; j < nq && !r; j++) {
		total += cnt[j];
		if (cnt[j] > hq[j].cap)
			no++;
	}
	uint32_t *omap = NULL, *ocnt = NULL, *oout = NULL;
	td_gfz_q *oq = NULL;
	if (!r && no) {
		omap = malloc(no * sizeof *omap);
		oq = malloc(no * sizeof *oq);
		ocnt = malloc(no * sizeof *ocnt);
		if (!omap || !oq || !ocnt)
			r = td_fail(TD_ENOMEM, "gpu: fuzzy batch");
		for (uint32_t j = 0, o = 0; j < nq && !r; j++)
			if (cnt[j] > hq[j].cap) {
				omap[o] = j;
				oq[o] = hq[j];
				oq[o++].cap = cnt[j];
			}
		if (!r && (oroom = td_gfz_number(oq, no)) == UINT64_MAX)
			r = td_fail(TD_ENOGPU, "gpu: fuzzy batch too large");
		if (!r && !(oout = malloc((oroom + 1) * sizeof *oout)))
			r = td_fail(TD_ENOMEM, "gpu: fuzzy batch");
		if (!r)
			r = td_gfz_launch(z, u->stream, oq, no, hcp, ncp, ocnt, oout, oroom);
		for (uint32_t o = 0; o < no && !r; o++)
			if (ocnt[o] != cnt[omap[o]])
				r = td_fail(TD_EIO, "gpu: fuzzy: two passes disagree");
	}
	/* gather: query i's matches at start[i] */
	if (!r && !(res->v = malloc((total + 1) * sizeof *res->v)))
		r = td_fail(TD_ENOMEM, "gpu: fuzzy batch");
	if (!r) {
		size_t at = 0;
		uint32_t o = 0;
		for (uint32_t j = 0, i = 0; j < nq; j++) {
			for (; i <= map[j]; i++)
				res->start[i] = at;
			const uint32_t *src = out + hq[j].base;
			if (o < no && omap[o] == j)
				src = oout + oq[o++].base;
			memcpy(res->v + at, src, (size_t)cnt[j] * sizeof *src);
			at += cnt[j];
		}
		for (size_t i = nq ? map[nq - 1] + 1 : 0; i <= n; i++)
			res->start[i] = at;
		res->ok = 1;
	}
	free(omap);
	free(oq);
	free(ocnt);
	free(oout);
	free(cnt);
	free(out);
	free(hcp);
	free(hq);
	free(map);
	return r;
}

/* ---- the answers, on the CPU threads ---- */

typedef struct td_gfz_all {
	const td_gfz_res *res;        /* a unit each */
	uint32_t nunits;
} td_gfz_all;

static int td_gfz_found(void *fctx, size_t req, uint32_t shard, td_fuzzy_found *out)
{
	const td_gfz_all *f = fctx;
	const td_gfz_res *r = shard < f->nunits ? &f->res[shard] : NULL;
	if (!r || !r->ok || r->skip[req])
		return TD_ENOGPU;
	out->v = r->v + r->start[req];
	out->n = r->start[req + 1] - r->start[req];
	return TD_OK;
}

int td_gpu_fuzzy_batch(td_gpu *g, td_fuzzy_req *reqs, size_t n)
{
	if (!g || (!reqs && n))
		return td_fail(TD_EINVAL, "gpu: bad batch");
	for (size_t i = 0; i < n; i++) {
		reqs[i].hits = NULL;
		reqs[i].words = NULL;
		reqs[i].nhits = reqs[i].nbytes = 0;
		reqs[i].err = TD_OK;
	}
	const td_archive *a = td_gpu_archive(g);
	td_gmulti *m = td_gpu_multi(g);
	td_gunit one;
	uint32_t nunits = m ? td_gmulti_units(m) : td_gpu_unit(g, &one) ? 1 : 0;
	if (!nunits)
		return td_fuzzy_batch(a, reqs, n, td_gpu_cpu_threads(g));
	td_gfz_res *res = calloc(nunits, sizeof *res);
	if (!res)
		return td_fail(TD_ENOMEM, "gpu: fuzzy batch");
	int r = TD_OK;
	for (uint32_t s = 0; s < nunits && r != TD_ENOMEM; s++) {
		td_gunit u = one;
		if (m && !td_gpu_unit(td_gmulti_handle(m, s), &u))
			continue; /* not resident: the engine's tree */
		pthread_mutex_lock(u.lock);
		cudaSetDevice(u.device);
		r = td_gfz_unit(&u, reqs, n, &res[s]);
		pthread_mutex_unlock(u.lock);
		if (r && r != TD_ENOMEM)
			td_gfz_res_free(&res[s]); /* this unit: the tree */
	}
	if (r != TD_ENOMEM) {
		td_gfz_all f = { res, nunits };
		r = td_fuzzy_batch_given(a, reqs, n, td_gpu_cpu_threads(g), td_gfz_found, &f);
	}
	for (uint32_t s = 0; s < nunits; s++)
		td_gfz_res_free(&res[s]);
	free(res);
	return r;
}
