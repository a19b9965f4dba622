/* gpu_host_emu_rt: the CUDA runtime calls gpu/td_gpu.c makes, over host memory, for tests/gpu_host_emu.cu. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

/* Copies happen when queued, so streams and events are always done. */

/* $TD_EMU_NDEV devices (default 1, at most 8): each its own name, the
 * same host memory; the current device is per thread, as in CUDA. */
static int emu_ndev(void)
{
	const char *e = getenv("TD_EMU_NDEV");
	int n = e ? atoi(e) : 1;
	return n < 1 ? 1 : n > 8 ? 8 : n;
}

static _Thread_local int emu_cur;

cudaError_t cudaGetDeviceCount(int *n)
{
	*n = emu_ndev();
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int dev)
{
	if (dev < 0 || dev >= emu_ndev())
		return cudaErrorInvalidDevice;
	emu_cur = dev;
	return cudaSuccess;
}

cudaError_t cudaSetDeviceFlags(unsigned flags)
{
	(void)flags;
	return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
	return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev)
{
	memset(p, 0, sizeof *p);
	snprintf(p->name, sizeof p->name, "emulated device %d", dev);
	p->multiProcessorCount = 4; /* small: adaptive warp segments shrink often */
	p->unifiedAddressing = 1;   /* host memory is the device's: zero-copy rounds */
	p->canMapHostMemory = 1;
	return dev >= 0 && dev < emu_ndev() ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaMemGetInfo(size_t *fre, size_t *tot)
{
	*fre = *tot = (size_t)4 << 30;
	return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t e)
{
	return e == cudaSuccess ? "no error" : "emulated error";
}

static cudaError_t emu_alloc(void **p, size_t n)
{
	*p = aligned_alloc(256, (n + 255) & ~(size_t)255);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaMalloc(void **p, size_t n)
{
	return emu_alloc(p, n);
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags)
{
	(void)flags;
	return emu_alloc(p, n);
}

cudaError_t cudaFree(void *p)
{
	free(p);
	return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
	free(p);
	return cudaSuccess;
}

cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k)
{
	(void)k;
	memcpy(d, s, n);
	return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st)
{
	(void)st;
	return cudaMemcpy(d, s, n, k);
}

cudaError_t cudaMemset(void *d, int v, size_t n)
{
	memset(d, v, n);
	return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st)
{
	(void)st;
	return cudaMemset(d, v, n);
}

static uintptr_t emu_handles;

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
	(void)flags;
	*s = (cudaStream_t)++emu_handles;
	return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) { (void)s; return cudaSuccess; }

cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; return cudaSuccess; }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
	(void)flags;
	*e = (cudaEvent_t)++emu_handles;
	return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) { (void)e; return cudaSuccess; }

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	(void)e;
	(void)s;
	return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) { (void)e; return cudaSuccess; }

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventQuery(cudaEvent_t e) { (void)e; return cudaSuccess; }

/* Copies and kernels are done when queued: no time passes between events. */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
	(void)a;
	(void)b;
	*ms = 0;
	return cudaSuccess;
}

/* What nvcc's host code calls at start and exit to register the (here
 * unused) device code of gpu_host_emu.o. */
void **__cudaRegisterFatBinary(void *fat);
void __cudaRegisterFatBinaryEnd(void **handle);
void __cudaUnregisterFatBinary(void **handle);

static void *emu_fat;

void **__cudaRegisterFatBinary(void *fat)
{
	emu_fat = fat;
	return &emu_fat;
}

void __cudaRegisterFatBinaryEnd(void **handle)
{
	(void)handle;
}

void __cudaUnregisterFatBinary(void **handle)
{
	(void)handle;
}
