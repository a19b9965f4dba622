/* td_gpu_digram: every digram of a grammar's input sequence counted on the GPU, as the CPU grammar's count table holds them (a prototype: the writer does not use it yet). */
#include <stdlib.h>
#include <string.h>

#include "td_err.h"
#include "td_gpu.h"
#include "td_gpu_dev.cuh"

/* TD_SPLIT of engine/td_grammar.h (an engine-internal header): the symbol
 * that ends every file in the grammar's input sequence */
#define TD_DG_SPLIT UINT32_MAX

/*
 * The count td_grammar.c keeps: the pair at i, (s[i], s[i+1]), counts
 * unless either is TD_SPLIT; in a run of one repeated symbol a a a a ...
 * the pairs count every other one from the run's start (a pair equal to
 * the counted one before it does not count), so "a a a" gives (a, a) once.
 * On the GPU: one thread a position marks whether its pair counts (the
 * thread at a run's start walks the run), a prefix sum places the counted
 * pairs, a radix sort of their 64-bit keys groups equal ones, and a second
 * prefix sum over "first of its key" gives each distinct digram its slot
 * and its count. Every step is an integer sum or a sort: the result does
 * not depend on thread order.
 */

namespace {

struct td_f_mark {
	const uint32_t *s;
	uint64_t n;
	uint64_t *cnt;
	TD_HD void operator()(uint64_t i) const
	{
		uint32_t a = s[i], b = s[i + 1];
		if (a == TD_DG_SPLIT || b == TD_DG_SPLIT) {
			cnt[i] = 0;
		} else if (a != b) {
			cnt[i] = 1;
		} else if (i == 0 || s[i - 1] != a) {
			/* the start of a run of a: every other pair of it */
			for (uint64_t j = i; j + 1 < n && s[j] == a && s[j + 1] == a; j++)
				cnt[j] = ((j - i) & 1) == 0;
		} /* else: inside a run, marked by the thread at its start */
	}
};

struct td_f_gather {
	const uint32_t *s;
	const uint64_t *cnt, *pos;
	uint64_t *keys;
	uint32_t *vals;
	TD_HD void operator()(uint64_t i) const
	{
		if (cnt[i]) {
			keys[pos[i]] = ((uint64_t)s[i] << 32) | s[i + 1];
			vals[pos[i]] = 0;
		}
	}
};

/* flag[k] = 1 where sorted key k is the first of its kind; flag[m] = 0 */
struct td_f_first_flag {
	const uint64_t *k;
	uint64_t m;
	uint64_t *flag;
	TD_HD void operator()(uint64_t i) const
	{
		flag[i] = i < m && (i == 0 || k[i] != k[i - 1]);
	}
};

/* first[u] = the sorted position where distinct key u starts; first[U] = m */
struct td_f_first {
	const uint64_t *flag, *uidx;
	uint64_t m;
	uint64_t *first;
	TD_HD void operator()(uint64_t i) const
	{
		if (i == m)
			first[uidx[m]] = m;
		else if (flag[i])
			first[uidx[i]] = i;
	}
};

struct td_f_out {
	const uint64_t *sk, *first;
	uint64_t *okey;
	uint32_t *ocount;
	TD_HD void operator()(uint64_t u) const
	{
		okey[u] = sk[first[u]];
		ocount[u] = (uint32_t)(first[u + 1] - first[u]);
	}
};

} // namespace

#define TD_DGCK(call)                          \
	do {                                   \
		if ((ce = (call)) != cudaSuccess) \
			goto fail;             \
	} while (0)

extern "C" int td_gpu_digram_count(const uint32_t *seq, uint64_t n, uint64_t **keys, uint32_t **counts,
				   uint64_t *ndistinct)
{
	cudaStream_t st = 0;
	cudaError_t ce = cudaSuccess;
	*keys = NULL;
	*counts = NULL;
	*ndistinct = 0;
	if (n < 2)
		return TD_OK;
	uint32_t *s = NULL, *vals = NULL, *svals = NULL;
	uint64_t *cnt = NULL, *pos = NULL, *k = NULL, *sk = NULL;
	uint64_t m = 0, U = 0;
	uint64_t *hk = NULL;
	uint32_t *hc = NULL;
	TD_DGCK(td_dalloc((void **)&s, n * 4));
	TD_DGCK(td_dalloc((void **)&cnt, n * 8));
	TD_DGCK(td_dalloc((void **)&pos, n * 8));
	TD_DGCK(td_h2d(s, seq, n * 4, st));
	TD_DGCK(td_dzero(cnt + n - 1, 8, st));
	TD_DGCK(td_each(n - 1, td_f_mark{s, n, cnt}, st));
	TD_DGCK(td_dscan(cnt, pos, n, st));
	TD_DGCK(td_d2h(&m, pos + n - 1, 8, st)); /* cnt[n - 1] is 0 */
	TD_DGCK(td_dsync(st));
	TD_DGCK(td_dalloc((void **)&k, (m + 1) * 8)); /* later first[], U + 1 <= m + 1 entries */
	TD_DGCK(td_dalloc((void **)&sk, m * 8));
	TD_DGCK(td_dalloc((void **)&vals, m * 4));
	TD_DGCK(td_dalloc((void **)&svals, m * 4));
	TD_DGCK(td_each(n - 1, td_f_gather{s, cnt, pos, k, vals}, st));
	TD_DGCK(td_dsort(k, sk, vals, svals, m, 64, st));
	/* cnt and pos (n >= m + 1 entries) now hold the flags and their sums */
	TD_DGCK(td_each(m + 1, td_f_first_flag{sk, m, cnt}, st));
	TD_DGCK(td_dscan(cnt, pos, m + 1, st));
	TD_DGCK(td_d2h(&U, pos + m, 8, st));
	TD_DGCK(td_dsync(st));
	/* first[] in k, then the output in cnt (keys) and vals (counts) */
	if (m) {
		TD_DGCK(td_each(m + 1, td_f_first{cnt, pos, m, k}, st));
		TD_DGCK(td_each(U, td_f_out{sk, k, cnt, vals}, st));
	}
	hk = (uint64_t *)malloc((U ? U : 1) * 8);
	hc = (uint32_t *)malloc((U ? U : 1) * 4);
	if (!hk || !hc) {
		free(hk);
		free(hc);
		hk = NULL;
		hc = NULL;
		td_dfree(s), td_dfree(cnt), td_dfree(pos), td_dfree(k), td_dfree(sk), td_dfree(vals), td_dfree(svals);
		return td_fail(TD_ENOMEM, "gpu digram count: host memory");
	}
	TD_DGCK(td_d2h(hk, cnt, U * 8, st));
	TD_DGCK(td_d2h(hc, vals, U * 4, st));
	TD_DGCK(td_dsync(st));
	td_dfree(s), td_dfree(cnt), td_dfree(pos), td_dfree(k), td_dfree(sk), td_dfree(vals), td_dfree(svals);
	*keys = hk;
	*counts = hc;
	*ndistinct = U;
	return TD_OK;
fail:
	free(hk);
	free(hc);
	td_dfree(s), td_dfree(cnt), td_dfree(pos), td_dfree(k), td_dfree(sk), td_dfree(vals), td_dfree(svals);
	(void)cudaGetLastError();
	return td_fail(TD_EIO, "gpu digram count: CUDA: %s", cudaGetErrorString(ce));
}
