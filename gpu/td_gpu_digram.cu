/* td_gpu_digram: every digram of a grammar's input sequence counted on the GPU, as the CPU grammar's count table holds them (the count itself: td_gpu_digram.cuh). */
#include <stdlib.h>
#include <string.h>

#include "td_err.h"
#include "td_gpu.h"
#include "td_gpu_digram.cuh"

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
	uint32_t *s = NULL;
	td_dg_buf b = {};
	uint64_t m = 0, U = 0;
	uint64_t *hk = NULL;
	uint32_t *hc = NULL;
	TD_DGCK(td_dalloc((void **)&s, n * 4));
	TD_DGCK(td_dalloc((void **)&b.cnt, (n + 1) * 8));
	TD_DGCK(td_dalloc((void **)&b.pos, (n + 1) * 8));
	TD_DGCK(td_dalloc((void **)&b.k, (n + 1) * 8));
	TD_DGCK(td_dalloc((void **)&b.sk, (n + 1) * 8));
	TD_DGCK(td_dalloc((void **)&b.vals, n * 4));
	TD_DGCK(td_dalloc((void **)&b.svals, n * 4));
	TD_DGCK(td_h2d(s, seq, n * 4, st));
	TD_DGCK(td_dg_count(s, n, 64, b, &m, &U, st));
	hk = (uint64_t *)malloc((U ? U : 1) * 8);
	hc = (uint32_t *)malloc((U ? U : 1) * 4);
	if (!hk || !hc) {
		free(hk);
		free(hc);
		td_dfree(s), td_dfree(b.cnt), td_dfree(b.pos), td_dfree(b.k), td_dfree(b.sk), td_dfree(b.vals),
			td_dfree(b.svals);
		return td_fail(TD_ENOMEM, "gpu digram count: host memory");
	}
	TD_DGCK(td_d2h(hk, b.cnt, U * 8, st));
	TD_DGCK(td_d2h(hc, b.vals, U * 4, st));
	TD_DGCK(td_dsync(st));
	td_dfree(s), td_dfree(b.cnt), td_dfree(b.pos), td_dfree(b.k), td_dfree(b.sk), td_dfree(b.vals), td_dfree(b.svals);
	*keys = hk;
	*counts = hc;
	*ndistinct = U;
	return TD_OK;
fail:
	free(hk);
	free(hc);
	td_dfree(s), td_dfree(b.cnt), td_dfree(b.pos), td_dfree(b.k), td_dfree(b.sk), td_dfree(b.vals), td_dfree(b.svals);
	(void)cudaGetLastError();
	return td_fail(TD_EIO, "gpu digram count: CUDA: %s", cudaGetErrorString(ce));
}
