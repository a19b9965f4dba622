/* gpu_host_emu: gpu_batch's checks through the real host side (gpu/td_gpu.c) over an emulated device; needs no GPU. */
/*
 * Linked with tests/gpu_batch.c and gpu/td_gpu.c instead of the CUDA
 * runtime: the runtime calls td_gpu.c makes are defined over host memory in
 * gpu_host_emu_rt.c (copies happen when queued, events and streams are always done)
 * and the launchers run the kernels' own code on 32 coroutine lanes
 * (gpu_warp_emu.h). So rounds, pieces, streams, offsets and the threads
 * that copy results out are checked against the CPU engine where there is
 * no GPU; CUDA itself (asynchrony, races on the device) is not.
 */
#define TD_GPU_EMU 1
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "td_gpu_kernels.cu"
#include "td_gpu_fuzzy.cu"
#include "td_gpu_words.cu"

#include "gpu_warp_emu.h"

#ifndef __CUDA_ARCH__

/* ---- the launchers ---- */

/* The emulated warp (gpu_warp_emu.h) is one per process: launches from the
 * host threads of several emulated devices take turns. */
static std::mutex emu_launch;

extern "C" unsigned td_gk_mask_w(void)
{
	return TD_MASK_W;
}

extern "C" int td_gk_build_masks(const td_gdev *d, uint64_t *mask, int *changed, void *)
{
	std::lock_guard<std::mutex> hold(emu_launch);
	for (uint64_t r = 0; r < d->nrules; r++)
		td_mask_rule(*d, mask, changed, r);
	return 0;
}

extern "C" int td_gk_rx_fill(const td_gdev *d, uint8_t *pool, int *bad, void *)
{
	std::lock_guard<std::mutex> hold(emu_launch);
	for (uint64_t r = 0; d->rx_off && r < d->nrules; r++)
		if (td_rx_has(*d, r))
			td_rx_fill_rule(*d, pool, bad, r);
	return 0;
}

extern "C" int td_gk_extract(const td_gdev *d, const td_gx_req *req, uint32_t nreq, uint32_t item0, uint32_t nitems,
			     uint32_t warp0, uint32_t nwarps, uint8_t *out, td_gx_res *res, void *)
{
	std::lock_guard<std::mutex> hold(emu_launch);
	for (uint32_t w = 0; w < nwarps; w++)
		warp_run([&](uint32_t) { td_xc_warp(*d, req, nreq, warp0 + w, out, res); });
	for (uint32_t w = 0; w < nitems; w += 32)
		warp_run([&](uint32_t lane) {
			td_extract_warp(*d, req, nreq, item0 + nitems, item0 + w + lane, out, res);
		});
	return 0;
}

extern "C" int td_gk_count(const td_gdev *d, const uint8_t *qwords, const td_gq_req *req, uint32_t nreq, int search,
			   uint64_t *count, void *, const td_gk_big *big)
{
	std::lock_guard<std::mutex> hold(emu_launch);
	uint32_t nbig = big ? big->n : 0;
	const uint32_t *idx = big ? big->idx : nullptr;
	warp_run([&](uint32_t) {
		for (uint32_t i = 0; i < nreq; i++)
			if (!req[i].big)
				td_count_one(*d, qwords, req, i, search, count);
		for (uint32_t j = 0; j < nbig; j++)
			td_count_big_one(*d, qwords, req, idx[j], search, big->qbig, count);
	});
	return 0;
}

extern "C" int td_gk_search(const td_gdev *d, const uint8_t *qwords, const td_gq_req *req, uint32_t nreq,
			    const uint64_t *base, const uint8_t *skip, td_hit *hits, void *, const td_gk_big *big)
{
	std::lock_guard<std::mutex> hold(emu_launch);
	uint32_t nbig = big ? big->n : 0;
	const uint32_t *idx = big ? big->idx : nullptr;
	warp_run([&](uint32_t) {
		for (uint32_t i = 0; i < nreq; i++)
			if (!skip[i] && !req[i].big)
				td_search_one(*d, qwords, req, i, base, hits);
		for (uint32_t j = 0; j < nbig; j++)
			if (!skip[idx[j]])
				td_search_big_one(*d, qwords, req, idx[j], big->qbig, base, hits);
	});
	return 0;
}

extern "C" int td_gk_fuzzy(const td_gfz_dev *z, const td_gfz_q *q, uint32_t nq, uint32_t nwarps, const uint32_t *qcps,
			   uint32_t *cnt, uint32_t *out, void *)
{
	std::lock_guard<std::mutex> hold(emu_launch);
	for (uint32_t w = 0; w < nwarps; w++)
		for (uint32_t lane = 0; lane < 32; lane++)
			td_fz_lane(*z, q, nq, qcps, w, lane, cnt, out);
	return 0;
}
#endif
