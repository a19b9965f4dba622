/* td_gpu_grammar: the grammar's rounds on the GPU, the same rules and final sequence as engine/td_grammar.c's rounds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "td_err.h"
#include "td_gpu.h"
#include "td_gpu_digram.cuh"

/*
 * One round, as td_grammar.c's round_once decides it (see gpu/README.md):
 *  1. count every digram afresh (td_dg_count: the CPU's count table holds
 *     exactly these counts) - sorted distinct keys and their counts;
 *  2. the largest count (an atomic max), threshold max(2, max / TD_GRAMMAR_DIV); the
 *     hot digrams are those at or above it whose rule would not nest deeper
 *     than max_depth (flags, a prefix sum, packed: sorted by key);
 *  3. every position finds its pair among the hot digrams (binary search)
 *     and the first position of each hot digram (an atomic min); a sort by
 *     first position gives the rule ids (the CPU makes a rule the first time
 *     its left-to-right pass meets the digram, replaced there or not);
 *  4. the replacement decisions: the CPU takes the pair at a decision point
 *     unless the next pair is hot and strictly more frequent, and a taken
 *     pair moves the next decision two places on. So a maximal stretch of
 *     positions whose pair would be taken starts at a decision point, and
 *     inside it every other position is replaced from its start: the thread
 *     at a stretch's start walks it (stretches are short except in runs of
 *     one symbol, which the count walks too);
 *  5. a prefix sum over the positions that survive writes the new sequence.
 * Every step is a sort, a prefix sum, an integer min/max or a write of its
 * own: the result does not depend on thread order.
 */

#define TD_GR_SPLIT UINT32_MAX /* TD_SPLIT of engine/td_grammar.h */
#define TD_GR_NONE UINT32_MAX  /* no hot digram at this position */

namespace {

struct td_f_maxc {
	const uint32_t *c;
	uint32_t *out;
	TD_HD void operator()(uint64_t u) const
	{
		td_atomic_max32(out, c[u]);
	}
};

TD_HD inline unsigned td_gr_depth(const uint8_t *dep, uint32_t nterm, uint32_t s)
{
	return s < nterm ? 0 : dep[s - nterm];
}

/* flag[u] = 1 when digram u gets a rule this round; flag[U] = 0 */
struct td_f_hotflag {
	const uint64_t *key;
	const uint32_t *cnt;
	const uint8_t *dep;
	uint32_t nterm, thr;
	unsigned max_depth;
	uint64_t U;
	uint64_t *flag;
	TD_HD void operator()(uint64_t u) const
	{
		if (u == U) {
			flag[u] = 0;
			return;
		}
		unsigned da = td_gr_depth(dep, nterm, (uint32_t)(key[u] >> 32)), db = td_gr_depth(dep, nterm, (uint32_t)key[u]);
		flag[u] = cnt[u] >= thr && (da > db ? da : db) + 1 <= max_depth;
	}
};

/* the hot digrams packed (still in key order), first positions unset */
struct td_f_hotpack {
	const uint64_t *flag, *pos, *key;
	const uint32_t *cnt;
	uint64_t *hk;
	uint32_t *hc;
	TD_HD void operator()(uint64_t u) const
	{
		if (flag[u]) {
			hk[pos[u]] = key[u];
			hc[pos[u]] = cnt[u];
		}
	}
};

struct td_f_hotinit {
	uint64_t *hfirst;
	uint32_t *iota;
	TD_HD void operator()(uint64_t h) const
	{
		hfirst[h] = UINT64_MAX;
		iota[h] = (uint32_t)h;
	}
};

/* hid[i]: the hot digram of the pair at i (or NONE); hfirst[h] = the
 * first position of hot digram h */
struct td_f_hotat {
	const uint32_t *s;
	uint64_t n;
	const uint64_t *hk;
	uint64_t H;
	uint32_t *hid;
	uint64_t *hfirst;
	TD_HD void operator()(uint64_t i) const
	{
		uint32_t r = TD_GR_NONE;
		if (i + 1 < n && s[i] != TD_GR_SPLIT && s[i + 1] != TD_GR_SPLIT) {
			uint64_t key = ((uint64_t)s[i] << 32) | s[i + 1], lo = 0, hi = H;
			while (lo < hi) {
				uint64_t mid = lo + (hi - lo) / 2;
				if (hk[mid] < key)
					lo = mid + 1;
				else
					hi = mid;
			}
			if (lo < H && hk[lo] == key)
				r = (uint32_t)lo;
		}
		hid[i] = r;
		if (r != TD_GR_NONE)
			td_atomic_min(&hfirst[r], i);
	}
};

/* Rule j of the round (ord: hot digrams by first position): rank[h] = j,
 * and its depth (its children are older rules: no thread writes them). */
struct td_f_rank {
	const uint32_t *ord;
	const uint64_t *hk;
	uint32_t *rank;
	uint8_t *dep;
	uint32_t nterm;
	uint64_t base; /* rules made before this round */
	TD_HD void operator()(uint64_t j) const
	{
		uint32_t h = ord[j];
		rank[h] = (uint32_t)j;
		unsigned da = td_gr_depth(dep, nterm, (uint32_t)(hk[h] >> 32)), db = td_gr_depth(dep, nterm, (uint32_t)hk[h]);
		dep[base + j] = (uint8_t)((da > db ? da : db) + 1);
	}
};

/* Whether the CPU's pass, deciding at i, replaces the pair at i: it is hot
 * and the next (overlapping) pair is not hot and strictly more frequent. */
TD_HD inline int td_gr_take(const uint32_t *hid, const uint32_t *hc, uint64_t n, uint64_t i)
{
	uint32_t h = hid[i];
	if (h == TD_GR_NONE)
		return 0;
	if (i + 2 < n && hid[i + 1] != TD_GR_NONE && hc[h] < hc[hid[i + 1]])
		return 0;
	return 1;
}

/* rep[i] = 1 where a rule replaces the pair at i */
struct td_f_rep {
	const uint32_t *hid, *hc;
	uint64_t n;
	uint32_t *rep;
	TD_HD void operator()(uint64_t i) const
	{
		if (!td_gr_take(hid, hc, n, i)) {
			rep[i] = 0;
			return;
		}
		if (i > 0 && td_gr_take(hid, hc, n, i - 1))
			return; /* inside a stretch: its start walks it */
		for (uint64_t j = i; j < n && td_gr_take(hid, hc, n, j); j++)
			rep[j] = ((j - i) & 1) == 0;
	}
};

/* keep[i] = position i stays (it is not the right half of a replaced
 * pair); keep[n] = 0 */
struct td_f_keep {
	const uint32_t *rep;
	uint64_t n;
	uint64_t *keep;
	TD_HD void operator()(uint64_t i) const
	{
		keep[i] = i < n && !(i > 0 && rep[i - 1]);
	}
};

struct td_f_write {
	const uint32_t *s, *rep, *hid, *rank;
	const uint64_t *keep, *pos;
	uint32_t next_id; /* the first rule id of this round */
	uint32_t *out;
	TD_HD void operator()(uint64_t i) const
	{
		if (keep[i])
			out[pos[i]] = rep[i] ? next_id + rank[hid[i]] : s[i];
	}
};

/* Device arrays of one build: the sequence twice (rounds alternate), the
 * hot digram of every position, the counting buffers, the round's rule
 * order and ranks, the depth of every rule so far. */
struct td_gr {
	uint32_t *s, *s2, *hid, *ord, *rank;
	td_dg_buf b;
	uint8_t *dep;
	uint64_t depcap;
	uint32_t *maxc;
};

void td_gr_free(td_gr *g, cudaStream_t st)
{
	void *v[] = { g->s, g->s2, g->hid, g->ord, g->rank, g->b.cnt, g->b.pos, g->b.k, g->b.sk, g->b.vals, g->b.svals,
		      g->dep, g->maxc };
	for (size_t i = 0; i < sizeof v / sizeof *v; i++)
		td_dfree_on(v[i], st);
	memset(g, 0, sizeof *g);
}

/* Bytes of device memory a sequence of n symbols needs, roughly. */
uint64_t td_gr_need(uint64_t n)
{
	return n * 60 + (UINT64_C(64) << 20);
}

cudaError_t td_gr_alloc(td_gr *g, uint64_t n, cudaStream_t st)
{
	cudaError_t ce;
	uint64_t half = n / 2 + 1;
	g->depcap = half + 4096;
	if ((ce = td_dalloc_on((void **)&g->s, n * 4, st)) || (ce = td_dalloc_on((void **)&g->s2, n * 4, st)) ||
	    (ce = td_dalloc_on((void **)&g->hid, n * 4, st)) || (ce = td_dalloc_on((void **)&g->ord, half * 4, st)) ||
	    (ce = td_dalloc_on((void **)&g->rank, half * 4, st)) ||
	    (ce = td_dalloc_on((void **)&g->b.cnt, (n + 1) * 8, st)) ||
	    (ce = td_dalloc_on((void **)&g->b.pos, (n + 1) * 8, st)) ||
	    (ce = td_dalloc_on((void **)&g->b.k, (n + 1) * 8, st)) ||
	    (ce = td_dalloc_on((void **)&g->b.sk, (n + 1) * 8, st)) ||
	    (ce = td_dalloc_on((void **)&g->b.vals, n * 4, st)) || (ce = td_dalloc_on((void **)&g->b.svals, n * 4, st)) ||
	    (ce = td_dalloc_on((void **)&g->dep, g->depcap, st)) || (ce = td_dalloc_on((void **)&g->maxc, 8, st)))
		return ce;
	return cudaSuccess;
}

/* Room in g->dep for `need` rules (the old depths copied over). */
cudaError_t td_gr_dep_room(td_gr *g, uint64_t need, cudaStream_t st)
{
	if (need <= g->depcap)
		return cudaSuccess;
	uint64_t cap = need * 2;
	uint8_t *nd = NULL;
	cudaError_t ce = td_dalloc_on((void **)&nd, cap, st);
	if (ce == cudaSuccess)
		ce = td_d2d(nd, g->dep, g->depcap, st);
	if (ce != cudaSuccess) {
		td_dfree_on(nd, st);
		return ce;
	}
	td_dfree_on(g->dep, st);
	g->dep = nd;
	g->depcap = cap;
	return cudaSuccess;
}

double td_gr_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int td_bitlen(uint64_t x)
{
	int b = 0;
	while (x) {
		b++;
		x >>= 1;
	}
	return b;
}

/* One round over g->s[0..*n): the new rules' pairs appended to *pairs
 * (grown as needed), *made set to how many. TD_OK, TD_ENOMEM, TD_ELIMIT,
 * or TD_EIO with *ce set. */
int td_gr_round(td_gr *g, uint64_t *np, uint32_t nterm, unsigned max_depth, uint32_t *next_id, uint32_t **pairs,
		uint64_t *cap, uint64_t *npairs, uint64_t *made, cudaError_t *cep, cudaStream_t st)
{
	cudaError_t ce = cudaSuccess;
	uint64_t n = *np, m = 0, U = 0, H = 0;
	uint32_t maxc = 0;
	*made = 0;
	uint64_t *hkeys = NULL;
	uint32_t *hord = NULL;
	int err = TD_OK;
#define TD_GRCK(call)                             \
	do {                                      \
		if ((ce = (call)) != cudaSuccess) \
			goto cuda_fail;           \
	} while (0)
	if (n < 2)
		return TD_OK;
	TD_GRCK(td_dg_count(g->s, n, 32 + td_bitlen(*next_id), g->b, &m, &U, st));
	if (U == 0)
		return TD_OK;
	/* keys in b.cnt, counts in b.vals */
	TD_GRCK(td_dzero(g->maxc, 4, st));
	TD_GRCK(td_each(U, td_f_maxc{g->b.vals, g->maxc}, st));
	TD_GRCK(td_d2h(&maxc, g->maxc, 4, st));
	TD_GRCK(td_dsync(st));
	{
		uint32_t thr = maxc / TD_GRAMMAR_DIV > 2 ? maxc / TD_GRAMMAR_DIV : 2;
		TD_GRCK(td_each(U + 1, td_f_hotflag{g->b.cnt, g->b.vals, g->dep, nterm, thr, max_depth, U, g->b.k}, st));
	}
	TD_GRCK(td_dscan(g->b.k, g->b.pos, U + 1, st));
	TD_GRCK(td_d2h(&H, g->b.pos + U, 8, st));
	TD_GRCK(td_dsync(st));
	if (H == 0)
		return TD_OK;
	if ((uint64_t)*next_id + H > TD_GR_SPLIT - 1)
		return td_fail(TD_ELIMIT, "more than 2^32 grammar symbols");
	TD_GRCK(td_gr_dep_room(g, (uint64_t)*next_id - nterm + H, st));
	/* hot keys in sk, their counts in svals, first positions in k */
	TD_GRCK(td_each(U, td_f_hotpack{g->b.k, g->b.pos, g->b.cnt, g->b.vals, g->b.sk, g->b.svals}, st));
	TD_GRCK(td_each(H, td_f_hotinit{g->b.k, g->b.vals}, st));
	TD_GRCK(td_each(n, td_f_hotat{g->s, n, g->b.sk, H, g->hid, g->b.k}, st));
	TD_GRCK(td_dsort(g->b.k, g->b.pos, g->b.vals, g->ord, H, td_bitlen(n), st));
	TD_GRCK(td_each(H, td_f_rank{g->ord, g->b.sk, g->rank, g->dep, nterm, (uint64_t)*next_id - nterm}, st));
	/* the rules' pairs, in creation order, for the host */
	hkeys = (uint64_t *)malloc(H * 8);
	hord = (uint32_t *)malloc(H * 4);
	if (!hkeys || !hord) {
		err = td_fail(TD_ENOMEM, "gpu grammar: host memory");
		goto out;
	}
	TD_GRCK(td_d2h(hkeys, g->b.sk, H * 8, st));
	TD_GRCK(td_d2h(hord, g->ord, H * 4, st));
	/* the decisions (rep in vals) and the new sequence */
	TD_GRCK(td_each(n, td_f_rep{g->hid, g->b.svals, n, g->b.vals}, st));
	TD_GRCK(td_each(n + 1, td_f_keep{g->b.vals, n, g->b.cnt}, st));
	TD_GRCK(td_dscan(g->b.cnt, g->b.pos, n + 1, st));
	TD_GRCK(td_each(n, td_f_write{g->s, g->b.vals, g->hid, g->rank, g->b.cnt, g->b.pos, *next_id, g->s2}, st));
	TD_GRCK(td_d2h(np, g->b.pos + n, 8, st));
	TD_GRCK(td_dsync(st));
	if (*npairs + 2 * H > *cap) {
		uint64_t nc = (*npairs + 2 * H) * 2;
		uint32_t *p = (uint32_t *)realloc(*pairs, nc * 4);
		if (!p) {
			err = td_fail(TD_ENOMEM, "gpu grammar: host memory");
			goto out;
		}
		*pairs = p;
		*cap = nc;
	}
	for (uint64_t j = 0; j < H; j++) {
		uint64_t key = hkeys[hord[j]];
		(*pairs)[(*npairs)++] = (uint32_t)(key >> 32);
		(*pairs)[(*npairs)++] = (uint32_t)key;
	}
	{
		uint32_t *t = g->s;
		g->s = g->s2;
		g->s2 = t;
	}
	*next_id += (uint32_t)H;
	*made = H;
	goto out;
cuda_fail:
	*cep = ce;
	err = TD_EIO;
out:
	free(hkeys);
	free(hord);
	return err;
#undef TD_GRCK
}

#ifndef TD_GPU_EMU
/* Select the device and check its free memory: 0 to go on, 1 to decline. */
int td_gr_device(const td_gpu_run *c, uint64_t n)
{
	int device = c ? c->device : 0, ndev = 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || device < 0 || device >= ndev) {
		(void)cudaGetLastError();
		td_fail(TD_ENOGPU, "no GPU: no CUDA device %d", device);
		return 1;
	}
	size_t fre = 0, tot = 0;
	cudaError_t ce = cudaSetDevice(device);
	if (ce == cudaSuccess)
		ce = cudaMemGetInfo(&fre, &tot);
	if (ce != cudaSuccess) {
		(void)cudaGetLastError();
		td_fail(TD_ENOGPU, "gpu grammar: CUDA: %s", cudaGetErrorString(ce));
		return 1;
	}
	if (td_gr_need(n) > fre) {
		td_fail(TD_ENOGPU, "gpu grammar: %llu device bytes needed, %zu free", (unsigned long long)td_gr_need(n),
			fre);
		return 1;
	}
	return 0;
}
#endif

} // namespace

extern "C" void td_gpu_grammar_release(void)
{
#ifndef TD_GPU_EMU
	int device = 0;
	cudaMemPool_t pool;
	if (cudaGetDevice(&device) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess)
		cudaMemPoolTrimTo(pool, 0);
	(void)cudaGetLastError();
#endif
}

extern "C" int td_gpu_grammar_rounds(void *ctx, uint32_t *seq, uint64_t *np, uint32_t nterm, unsigned max_depth,
				     td_progress_fn progress, void *progress_ctx, uint32_t **pairs, uint64_t *nrules)
{
	td_gpu_run *c = (td_gpu_run *)ctx;
	cudaStream_t st = 0;
	cudaError_t ce = cudaSuccess;
	*pairs = NULL;
	*nrules = 0;
	if (c)
		c->ran_on_gpu = 0;
	if (max_depth == 0 || max_depth > 64)
		max_depth = 32;
	uint64_t n0 = *np, n = n0, cap = 0, npairs = 0;
#ifndef TD_GPU_EMU
	if (td_gr_device(c, n0))
		return TD_ENOGPU;
	/* a stream of its own: two shards' rounds may share the device
	 * (td_gpu_grammar_rounds_shared), each one's waits on the host
	 * leaving the GPU to the other */
	{
		/* the device's pool keeps what a call frees (its arrays, the
		 * sorts' and scans' scratch) for the next allocation, which
		 * then neither maps memory nor waits for the whole device as
		 * cudaMalloc and cudaFree do (the other call's stream);
		 * td_gpu_grammar_release gives it back */
		cudaMemPool_t pool;
		uint64_t keep = UINT64_MAX;
		if (cudaDeviceGetDefaultMemPool(&pool, c ? c->device : 0) == cudaSuccess)
			cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
	}
	if ((ce = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking)) != cudaSuccess) {
		(void)cudaGetLastError();
		td_fail(TD_ENOGPU, "gpu grammar: CUDA: %s", cudaGetErrorString(ce));
		return TD_ENOGPU;
	}
#endif
	td_gr g;
	memset(&g, 0, sizeof g);
	uint32_t *pv = NULL, next_id = nterm;
	int err = TD_OK, copied = 0;
	/* $TD_GPU_GTRACE (measurement only): the call's steps on stderr */
	static int gtrace = -1;
	if (gtrace < 0)
		gtrace = getenv("TD_GPU_GTRACE") != NULL;
	double tm[5] = { td_gr_now(), 0, 0, 0, 0 };
	uint64_t sumn = 0;
	unsigned nr = 0;
	if ((ce = td_gr_alloc(&g, n0 ? n0 : 1, st)) != cudaSuccess || (ce = td_h2d(g.s, seq, n0 * 4, st)) != cudaSuccess) {
		err = TD_EIO;
		goto done;
	}
	if (gtrace)
		td_dsync(st);
	tm[1] = td_gr_now();
	for (unsigned r = 0; r < 1000; r++) {
		if (progress)
			progress(progress_ctx, "grammar", r, max_depth);
		uint64_t made = 0;
		sumn += n;
		nr++;
		if ((err = td_gr_round(&g, &n, nterm, max_depth, &next_id, &pv, &cap, &npairs, &made, &ce, st)) ||
		    made == 0)
			break;
	}
	tm[2] = td_gr_now();
	if (err == TD_OK) {
		copied = 1;
		if ((ce = td_d2h(seq, g.s, n * 4, st)) != cudaSuccess || (ce = td_dsync(st)) != cudaSuccess)
			err = TD_EIO;
	}
	tm[3] = td_gr_now();
done:
	td_gr_free(&g, st);
	if (gtrace) {
		tm[4] = td_gr_now();
		fprintf(stderr, "gpugrammar: %llu symbols, %u rounds over %llu symbols: alloc+h2d %.3f rounds %.3f d2h %.3f free %.3f s\n",
			(unsigned long long)n0, nr, (unsigned long long)sumn, tm[1] - tm[0], tm[2] - tm[1], tm[3] - tm[2],
			tm[4] - tm[3]);
	}
#ifndef TD_GPU_EMU
	cudaStreamDestroy(st);
#endif
	if (err == TD_EIO) {
		(void)cudaGetLastError();
		free(pv);
		td_fail(copied ? TD_EIO : TD_ENOGPU, "gpu grammar: CUDA: %s", cudaGetErrorString(ce));
		/* before the sequence was copied back the CPU can still build it */
		return copied || (c && c->strict) ? TD_EIO : TD_ENOGPU;
	}
	if (err) {
		free(pv);
		return err;
	}
	*np = n;
	*pairs = pv;
	*nrules = npairs / 2;
	if (c)
		c->ran_on_gpu = 1;
	return TD_OK;
}
