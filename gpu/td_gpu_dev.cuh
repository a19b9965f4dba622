/* td_gpu_dev: the device primitives of the index builder, the edit batches and the grammar rounds (launch, copy, scan, sort, atomics); host versions under TD_GPU_EMU. */
#ifndef TD_GPU_DEV_CUH
#define TD_GPU_DEV_CUH

/*
 * Kernels are written as functors with a `TD_HD void operator()(uint64_t i)`
 * run for i in [0, n) by td_each(). On the GPU that is one thread per i; with
 * TD_GPU_EMU defined (tests/gpu_*_emu.cu) the same functor runs in a host
 * loop, device memory is host memory, and the scans and sorts are sequential,
 * so the host-side orchestration and every kernel body are checked on
 * machines without a GPU. Kernels must therefore never depend on the order
 * in which threads run: what they read was written by an earlier launch, or
 * they combine with td_atomic_add (integer sums: same result in any order).
 */
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifndef TD_HD
#define TD_HD __host__ __device__
#endif

#ifdef TD_GPU_EMU
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>
#else
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#endif

/* *p += v, atomically on the device. */
TD_HD inline void td_atomic_add(uint64_t *p, uint64_t v)
{
#ifdef __CUDA_ARCH__
	atomicAdd((unsigned long long *)p, (unsigned long long)v);
#else
	*p += v;
#endif
}

/* *p = min(*p, v), atomically on the device. */
TD_HD inline void td_atomic_min(uint64_t *p, uint64_t v)
{
#ifdef __CUDA_ARCH__
	atomicMin((unsigned long long *)p, (unsigned long long)v);
#else
	if (v < *p)
		*p = v;
#endif
}

/* *p = max(*p, v), atomically on the device. */
TD_HD inline void td_atomic_max32(uint32_t *p, uint32_t v)
{
#ifdef __CUDA_ARCH__
	atomicMax((unsigned int *)p, (unsigned int)v);
#else
	if (v > *p)
		*p = v;
#endif
}

#ifndef TD_GPU_EMU

template <class F> __global__ void td_k_each(uint64_t n, F f)
{
	uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		f(i);
}

/* Run f(i) for i in [0, n) on stream s. */
template <class F> static cudaError_t td_each(uint64_t n, const F &f, cudaStream_t s)
{
	if (n == 0)
		return cudaSuccess;
	td_k_each<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(n, f);
	return cudaGetLastError();
}

static inline cudaError_t td_dalloc(void **p, size_t n)
{
	return cudaMalloc(p, n ? n : 8);
}

static inline void td_dfree(void *p)
{
	if (p)
		cudaFree(p);
}

/* Stream-ordered: from the device's memory pool, no device-wide sync. */
static inline cudaError_t td_dalloc_on(void **p, size_t n, cudaStream_t s)
{
	return cudaMallocAsync(p, n ? n : 8, s);
}

static inline void td_dfree_on(void *p, cudaStream_t s)
{
	if (p)
		cudaFreeAsync(p, s);
}

static inline cudaError_t td_h2d(void *d, const void *h, size_t n, cudaStream_t s)
{
	return n ? cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s) : cudaSuccess;
}

static inline cudaError_t td_d2h(void *h, const void *d, size_t n, cudaStream_t s)
{
	return n ? cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, s) : cudaSuccess;
}

static inline cudaError_t td_dzero(void *d, size_t n, cudaStream_t s)
{
	return n ? cudaMemsetAsync(d, 0, n, s) : cudaSuccess;
}

static inline cudaError_t td_d2d(void *d, const void *src, size_t n, cudaStream_t s)
{
	return n ? cudaMemcpyAsync(d, src, n, cudaMemcpyDeviceToDevice, s) : cudaSuccess;
}

static inline cudaError_t td_dsync(cudaStream_t s)
{
	return cudaStreamSynchronize(s);
}

/* out[i] = in[0] + ... + in[i-1] for i in [0, n) (in == out allowed). */
static inline cudaError_t td_dscan(const uint64_t *in, uint64_t *out, uint64_t n, cudaStream_t s)
{
	if (n == 0)
		return cudaSuccess;
	size_t tb = 0;
	cudaError_t e = cub::DeviceScan::ExclusiveSum(NULL, tb, in, out, (int64_t)n, s);
	void *t = NULL;
	if (e == cudaSuccess)
		e = cudaMallocAsync(&t, tb ? tb : 8, s);
	if (e == cudaSuccess)
		e = cub::DeviceScan::ExclusiveSum(t, tb, in, out, (int64_t)n, s);
	if (t)
		cudaFreeAsync(t, s);
	return e;
}

/* Sort n (key, value) pairs by the low `bits` bits of the key, stably. */
static inline cudaError_t td_dsort(const uint64_t *kin, uint64_t *kout, const uint32_t *vin, uint32_t *vout,
				   uint64_t n, int bits, cudaStream_t s)
{
	if (n == 0)
		return cudaSuccess;
	size_t tb = 0;
	cudaError_t e = cub::DeviceRadixSort::SortPairs(NULL, tb, kin, kout, vin, vout, (int64_t)n, 0, bits, s);
	void *t = NULL;
	if (e == cudaSuccess)
		e = cudaMallocAsync(&t, tb ? tb : 8, s);
	if (e == cudaSuccess)
		e = cub::DeviceRadixSort::SortPairs(t, tb, kin, kout, vin, vout, (int64_t)n, 0, bits, s);
	if (t)
		cudaFreeAsync(t, s);
	return e;
}

/* Sort n keys by their low `bits` bits. */
static inline cudaError_t td_dsort_keys(const uint64_t *kin, uint64_t *kout, uint64_t n, int bits, cudaStream_t s)
{
	if (n == 0)
		return cudaSuccess;
	size_t tb = 0;
	cudaError_t e = cub::DeviceRadixSort::SortKeys(NULL, tb, kin, kout, (int64_t)n, 0, bits, s);
	void *t = NULL;
	if (e == cudaSuccess)
		e = cudaMallocAsync(&t, tb ? tb : 8, s);
	if (e == cudaSuccess)
		e = cub::DeviceRadixSort::SortKeys(t, tb, kin, kout, (int64_t)n, 0, bits, s);
	if (t)
		cudaFreeAsync(t, s);
	return e;
}

#else /* TD_GPU_EMU: the same primitives on the host */

template <class F> static cudaError_t td_each(uint64_t n, const F &f, cudaStream_t)
{
	for (uint64_t i = 0; i < n; i++)
		f(i);
	return cudaSuccess;
}

static inline cudaError_t td_dalloc(void **p, size_t n)
{
	*p = malloc(n ? n : 8);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

static inline void td_dfree(void *p)
{
	free(p);
}

static inline cudaError_t td_dalloc_on(void **p, size_t n, cudaStream_t)
{
	return td_dalloc(p, n);
}

static inline void td_dfree_on(void *p, cudaStream_t)
{
	free(p);
}

static inline cudaError_t td_h2d(void *d, const void *h, size_t n, cudaStream_t)
{
	if (n)
		memcpy(d, h, n);
	return cudaSuccess;
}

static inline cudaError_t td_d2h(void *h, const void *d, size_t n, cudaStream_t)
{
	if (n)
		memcpy(h, d, n);
	return cudaSuccess;
}

static inline cudaError_t td_dzero(void *d, size_t n, cudaStream_t)
{
	if (n)
		memset(d, 0, n);
	return cudaSuccess;
}

static inline cudaError_t td_d2d(void *d, const void *src, size_t n, cudaStream_t)
{
	if (n)
		memcpy(d, src, n);
	return cudaSuccess;
}

static inline cudaError_t td_dsync(cudaStream_t)
{
	return cudaSuccess;
}

static inline cudaError_t td_dscan(const uint64_t *in, uint64_t *out, uint64_t n, cudaStream_t)
{
	uint64_t sum = 0;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t v = in[i];
		out[i] = sum;
		sum += v;
	}
	return cudaSuccess;
}

static inline cudaError_t td_dsort(const uint64_t *kin, uint64_t *kout, const uint32_t *vin, uint32_t *vout,
				   uint64_t n, int bits, cudaStream_t)
{
	uint64_t mask = bits >= 64 ? ~UINT64_C(0) : (UINT64_C(1) << bits) - 1;
	std::vector<uint64_t> idx(n);
	std::iota(idx.begin(), idx.end(), 0);
	std::stable_sort(idx.begin(), idx.end(), [&](uint64_t a, uint64_t b) { return (kin[a] & mask) < (kin[b] & mask); });
	std::vector<uint64_t> k(n);
	std::vector<uint32_t> v(n);
	for (uint64_t i = 0; i < n; i++) {
		k[i] = kin[idx[i]];
		v[i] = vin[idx[i]];
	}
	std::copy(k.begin(), k.end(), kout);
	std::copy(v.begin(), v.end(), vout);
	return cudaSuccess;
}

static inline cudaError_t td_dsort_keys(const uint64_t *kin, uint64_t *kout, uint64_t n, int bits, cudaStream_t)
{
	uint64_t mask = bits >= 64 ? ~UINT64_C(0) : (UINT64_C(1) << bits) - 1;
	std::vector<uint64_t> k(kin, kin + n);
	std::stable_sort(k.begin(), k.end(), [&](uint64_t a, uint64_t b) { return (a & mask) < (b & mask); });
	std::copy(k.begin(), k.end(), kout);
	return cudaSuccess;
}

#endif
#endif
