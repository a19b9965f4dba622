/* td_gpu_digram: the digram-count kernels shared by the digram counter and the GPU grammar rounds (device functors; host loops under TD_GPU_EMU). */
#ifndef TD_GPU_DIGRAM_CUH
#define TD_GPU_DIGRAM_CUH

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

/* the counted pairs' keys packed in 2 * sh bits, (a << sh) | b: sorted
 * in as few radix passes as the symbols allow, in the order of (a, b) */
struct td_f_gather {
	const uint32_t *s;
	const uint64_t *cnt, *pos;
	uint64_t *keys;
	int sh;
	TD_HD void operator()(uint64_t i) const
	{
		if (cnt[i])
			keys[pos[i]] = ((uint64_t)s[i] << sh) | s[i + 1];
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

/* distinct key u unpacked to (a << 32) | b, and its count */
struct td_f_out {
	const uint64_t *sk, *first;
	int sh;
	uint64_t *okey;
	uint32_t *ocount;
	TD_HD void operator()(uint64_t u) const
	{
		uint64_t k = sk[first[u]];
		okey[u] = sh == 32 ? k : ((k >> sh) << 32) | (k & ((UINT64_C(1) << sh) - 1));
		ocount[u] = (uint32_t)(first[u + 1] - first[u]);
	}
};

} // namespace

/* Device buffers of td_dg_count: cnt and pos hold n + 1 values, k and sk
 * n + 1, vals and svals n. */
struct td_dg_buf {
	uint64_t *cnt, *pos, *k, *sk;
	uint32_t *vals, *svals;
};

/* Count the digrams of the device sequence s[0..n), n >= 2, whose symbols
 * other than TD_SPLIT are below 2^(keybits - 32): on return the *ndistinct
 * distinct digrams in ascending order of (a << 32 | b) are in b.cnt, their
 * counts in b.vals; *npairs is how many pairs counted. Synchronizes st. */
static cudaError_t td_dg_count(const uint32_t *s, uint64_t n, int keybits, const td_dg_buf &b, uint64_t *npairs,
			       uint64_t *ndistinct, cudaStream_t st)
{
	cudaError_t ce;
	uint64_t m = 0, U = 0;
	if ((ce = td_dzero(b.cnt + n - 1, 8, st)) != cudaSuccess ||
	    (ce = td_each(n - 1, td_f_mark{s, n, b.cnt}, st)) != cudaSuccess ||
	    (ce = td_dscan(b.cnt, b.pos, n, st)) != cudaSuccess || (ce = td_d2h(&m, b.pos + n - 1, 8, st)) != cudaSuccess ||
	    (ce = td_dsync(st)) != cudaSuccess) /* cnt[n - 1] is 0 */
		return ce;
	/* keys alone (equal keys are alike: no values to carry) */
	int sh = keybits - 32;
	if ((ce = td_each(n - 1, td_f_gather{s, b.cnt, b.pos, b.k, sh}, st)) != cudaSuccess ||
	    (ce = td_dsort_keys(b.k, b.sk, m, 2 * sh, st)) != cudaSuccess)
		return ce;
	/* cnt and pos now hold the flags and their sums */
	if ((ce = td_each(m + 1, td_f_first_flag{b.sk, m, b.cnt}, st)) != cudaSuccess ||
	    (ce = td_dscan(b.cnt, b.pos, m + 1, st)) != cudaSuccess || (ce = td_d2h(&U, b.pos + m, 8, st)) != cudaSuccess ||
	    (ce = td_dsync(st)) != cudaSuccess)
		return ce;
	/* first[] in k, then the output in cnt (keys) and vals (counts) */
	if (m && ((ce = td_each(m + 1, td_f_first{b.cnt, b.pos, m, b.k}, st)) != cudaSuccess ||
		  (ce = td_each(U, td_f_out{b.sk, b.k, sh, b.cnt, b.vals}, st)) != cudaSuccess))
		return ce;
	*npairs = m;
	*ndistinct = U;
	return cudaSuccess;
}

#endif
