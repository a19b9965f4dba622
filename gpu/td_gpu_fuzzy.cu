/* td_gpu_fuzzy: the fuzzy-search kernel: a query's Levenshtein band against a run of the vocabulary, on a warp. */
#include <cuda_runtime.h>

#include "td_gpu_int.h"

/* The vocabulary (td_gfz_dev) is sorted by length in code points, so a
 * query of m code points and distance k looks only at the words of m - k
 * .. m + k code points: one contiguous run [lo, hi), cut into segments of
 * TD_GFZ_SEG words, one warp a segment (td_gfz_q.seg0 numbers them), its
 * lanes taking every 32nd word. A word passes a 64-bit character filter
 * first (at most k characters of each side may be missing from the
 * other: every one costs an edit of its own), then the banded dynamic
 * program: the 2k + 1 cells of a row of the edit matrix around its
 * diagonal live in registers, saturate at k + 1 and stop the row loop once
 * all exceed k. Matches are word id << 2 | distance, appended to the
 * query's slots by an atomic counter (those past its capacity are only
 * counted: the host runs those queries again with room for all). */

#define TD_FZ_HD __host__ __device__

/* The host versions serve tests/gpu_host_emu.cu, whose emulated warps run
 * one lane at a time. */
TD_FZ_HD __forceinline__ uint32_t td_fz_inc(uint32_t *p)
{
#ifdef __CUDA_ARCH__
	return atomicAdd(p, 1u);
#else
	return (*p)++;
#endif
}

TD_FZ_HD __forceinline__ uint32_t td_fz_popc(uint64_t v)
{
#ifdef __CUDA_ARCH__
	return (uint32_t)__popcll(v);
#else
	return (uint32_t)__builtin_popcountll(v);
#endif
}

/* Levenshtein distance of q[0..m) and w[0..n) if at most k (<= 3), else
 * k + 1. |m - n| <= k is required. */
TD_FZ_HD __forceinline__ uint32_t td_fz_dist(const uint32_t *q, uint32_t m, const uint32_t *w, uint32_t n, uint32_t k)
{
	const uint32_t inf = k + 1, w2 = 2 * k;
	uint32_t row[7]; /* cell t of row i is column j = i - k + t */
#pragma unroll
	for (uint32_t t = 0; t < 7; t++) {
		int j = (int)t - (int)k;
		row[t] = t <= w2 && j >= 0 && (uint32_t)j <= m ? ((uint32_t)j < inf ? (uint32_t)j : inf) : inf;
	}
	for (uint32_t i = 1; i <= n; i++) {
		const uint32_t c = w[i - 1];
		uint32_t left = inf, mn = inf;
#pragma unroll
		for (uint32_t t = 0; t < 7; t++) {
			if (t > w2)
				break;
			int j = (int)i - (int)k + (int)t;
			uint32_t v;
			if (j < 0 || (uint32_t)j > m) {
				v = inf;
			} else if (j == 0) {
				v = i < inf ? i : inf;
			} else {
				v = row[t] + (q[j - 1] != c);
				uint32_t up = t < w2 ? row[t + 1] + 1 : inf;
				v = v < up ? v : up;
				v = v < left + 1 ? v : left + 1;
				v = v < inf ? v : inf;
			}
			row[t] = v;
			left = v;
			mn = v < mn ? v : mn;
		}
		if (mn > k)
			return inf;
	}
	uint32_t t = m + k - n;
	uint32_t r = inf;
#pragma unroll
	for (uint32_t u = 0; u < 7; u++)
		if (u == t)
			r = row[u];
	return r;
}

/* Lane `lane` of warp `warp` of a launch over q[0..nq). */
TD_FZ_HD __forceinline__ void td_fz_lane(const td_gfz_dev &z, const td_gfz_q *q, uint32_t nq, const uint32_t *qcps,
					 uint32_t warp, uint32_t lane, uint32_t *cnt, uint32_t *out)
{
	/* the query holding this warp's segment: the last with seg0 <= warp */
	uint32_t lo = 0, hi = nq;
	while (hi - lo > 1) {
		uint32_t mid = (lo + hi) / 2;
		if (q[mid].seg0 <= warp)
			lo = mid;
		else
			hi = mid;
	}
	const td_gfz_q Q = q[lo];
	uint64_t s0 = (uint64_t)Q.lo + (uint64_t)(warp - Q.seg0) * TD_GFZ_SEG;
	uint64_t s1 = s0 + TD_GFZ_SEG < Q.hi ? s0 + TD_GFZ_SEG : Q.hi;
	const uint32_t *qc = qcps + Q.qoff;
	for (uint64_t x = s0 + lane; x < s1; x += 32) {
		uint64_t wm = z.mask[x];
		if (td_fz_popc(Q.mask & ~wm) > Q.k || td_fz_popc(wm & ~Q.mask) > Q.k)
			continue;
		uint32_t a = z.cpoff[x], b = z.cpoff[x + 1];
		uint32_t d = td_fz_dist(qc, Q.m, z.cps + a, b - a, Q.k);
		if (d > Q.k)
			continue;
		uint32_t slot = td_fz_inc(&cnt[lo]);
		if (slot < Q.cap)
			out[Q.base + slot] = z.id[x] << 2 | d;
	}
}

#ifndef TD_GPU_EMU /* tests run the body on the host */
__global__ void __launch_bounds__(128) td_k_fuzzy(td_gfz_dev z, const td_gfz_q *q, uint32_t nq, uint32_t nwarps,
						  const uint32_t *qcps, uint32_t *cnt, uint32_t *out)
{
	uint32_t w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	if (w < nwarps)
		td_fz_lane(z, q, nq, qcps, w, threadIdx.x & 31, cnt, out);
}

extern "C" int td_gk_fuzzy(const td_gfz_dev *z, const td_gfz_q *q, uint32_t nq, uint32_t nwarps, const uint32_t *qcps,
			   uint32_t *cnt, uint32_t *out, void *stream)
{
	if (nq == 0 || nwarps == 0)
		return 0;
	td_k_fuzzy<<<(nwarps + 3) / 4, 128, 0, (cudaStream_t)stream>>>(*z, q, nq, nwarps, qcps, cnt, out);
	return (int)cudaGetLastError();
}
#endif
