/* td_gpu_link: the host-device link's copy bandwidths (the ceilings gpu_bench states extract throughput against). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "td_err.h"
#include "td_gpu.h"
#include "td_gpu_int.h"

#define TD_LINK_REPS 5

typedef struct td_lcopy {
	uint8_t *dst;
	const uint8_t *src;
	size_t n;
} td_lcopy;

static void *td_lcopy_run(void *arg)
{
	td_lcopy *c = arg;
	memcpy(c->dst, c->src, c->n);
	return NULL;
}

static int td_lcmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double td_lmedian(double *v)
{
	qsort(v, TD_LINK_REPS, sizeof *v, td_lcmp);
	return v[TD_LINK_REPS / 2];
}

typedef struct td_lctx {
	uint8_t *dev, *pin, *page;
	size_t n;
	cudaStream_t st[2];
	cudaEvent_t e0, e1;
} td_lctx;

/* Seconds of one copy of ctx->n bytes, kind 0: D2H pinned, 1: the same over
 * 2 streams, 2: D2H pageable, 3: H2D pinned (warm-up run first). */
static cudaError_t td_ltime(td_lctx *c, int kind, double *sec)
{
	double v[TD_LINK_REPS];
	cudaError_t e = cudaSuccess;
	for (int rep = -1; rep < TD_LINK_REPS && e == cudaSuccess; rep++) {
		if ((e = cudaEventRecord(c->e0, c->st[0])) != cudaSuccess)
			break;
		if (kind == 1) {
			/* the second stream starts after e0 and ends before e1 */
			size_t h = c->n / 2;
			if ((e = cudaStreamWaitEvent(c->st[1], c->e0, 0)) != cudaSuccess ||
			    (e = cudaMemcpyAsync(c->pin, c->dev, h, cudaMemcpyDeviceToHost, c->st[0])) != cudaSuccess ||
			    (e = cudaMemcpyAsync(c->pin + h, c->dev + h, c->n - h, cudaMemcpyDeviceToHost, c->st[1])) !=
				    cudaSuccess ||
			    (e = cudaEventRecord(c->e1, c->st[1])) != cudaSuccess ||
			    (e = cudaStreamWaitEvent(c->st[0], c->e1, 0)) != cudaSuccess)
				break;
		} else {
			uint8_t *dst = kind == 3 ? c->dev : kind == 2 ? c->page : c->pin;
			const uint8_t *src = kind == 3 ? c->pin : c->dev;
			enum cudaMemcpyKind k = kind == 3 ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
			if ((e = cudaMemcpyAsync(dst, src, c->n, k, c->st[0])) != cudaSuccess)
				break;
		}
		float ms = 0;
		if ((e = cudaEventRecord(c->e1, c->st[0])) != cudaSuccess || (e = cudaEventSynchronize(c->e1)) != cudaSuccess ||
		    (e = cudaEventElapsedTime(&ms, c->e0, c->e1)) != cudaSuccess)
			break;
		if (rep >= 0)
			v[rep] = ms * 1e-3;
	}
	if (e == cudaSuccess)
		*sec = td_lmedian(v);
	return e;
}

/* Seconds of the host copy pinned -> pageable on nt threads. */
static double td_lhost(td_lctx *c, unsigned nt)
{
	double v[TD_LINK_REPS];
	td_lcopy w[16];
	pthread_t th[16];
	for (int rep = -1; rep < TD_LINK_REPS; rep++) {
		double t0 = td_now();
		unsigned started = 0;
		for (unsigned t = 0; t < nt; t++) {
			size_t a = c->n * t / nt, b = c->n * (t + 1) / nt;
			w[t] = (td_lcopy){c->page + a, c->pin + a, b - a};
		}
		for (unsigned t = 1; t < nt; t++, started++)
			if (pthread_create(&th[t], NULL, td_lcopy_run, &w[t]))
				break;
		td_lcopy_run(&w[0]);
		for (unsigned t = started + 1; t < nt; t++)
			td_lcopy_run(&w[t]);
		for (unsigned t = 1; t <= started; t++)
			pthread_join(th[t], NULL);
		if (rep >= 0)
			v[rep] = td_now() - t0;
	}
	return td_lmedian(v);
}

int td_gpu_link_measure(int device, uint64_t bytes, unsigned host_threads, td_gpu_link *out)
{
	memset(out, 0, sizeof *out);
	int ndev = 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || device < 0 || device >= ndev)
		return td_fail(TD_ENOGPU, "no GPU: no CUDA device %d", device);
	if (bytes < 4096)
		bytes = 4096;
	unsigned nt = host_threads ? host_threads : 8;
	nt = nt > 16 ? 16 : nt;
	td_lctx c;
	memset(&c, 0, sizeof c);
	c.n = (size_t)bytes;
	cudaError_t e = cudaSetDevice(device);
	int err = TD_OK;
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&c.dev, c.n);
	if (e == cudaSuccess)
		e = cudaHostAlloc((void **)&c.pin, c.n, cudaHostAllocDefault);
	c.page = malloc(c.n);
	if (e == cudaSuccess && !c.page)
		err = td_fail(TD_ENOMEM, "gpu link: %zu bytes", c.n);
	for (int i = 0; i < 2 && e == cudaSuccess; i++)
		e = cudaStreamCreateWithFlags(&c.st[i], cudaStreamNonBlocking);
	if (e == cudaSuccess)
		e = cudaEventCreate(&c.e0);
	if (e == cudaSuccess)
		e = cudaEventCreate(&c.e1);
	if (e == cudaSuccess && !err) {
		/* not zeros: every page written once */
		for (size_t i = 0; i < c.n; i++)
			c.pin[i] = (uint8_t)(i * 131 + 7);
		memset(c.page, 0x5A, c.n);
		e = cudaMemcpy(c.dev, c.pin, c.n, cudaMemcpyHostToDevice);
	}
	double s[4] = {0, 0, 0, 0};
	for (int k = 0; k < 4 && e == cudaSuccess && !err; k++)
		e = td_ltime(&c, k, &s[k]);
	if (e == cudaSuccess && !err) {
		double gb = (double)c.n * 1e-9;
		out->d2h_pinned = gb / s[0];
		out->d2h_pinned_2 = gb / s[1];
		out->d2h_pageable = gb / s[2];
		out->h2d_pinned = gb / s[3];
		out->host_copy = gb / td_lhost(&c, nt);
		out->host_threads = nt;
	}
	if (e != cudaSuccess && !err)
		err = td_fail(TD_EIO, "gpu link: CUDA: %s", cudaGetErrorString(e));
	if (c.e0)
		cudaEventDestroy(c.e0);
	if (c.e1)
		cudaEventDestroy(c.e1);
	for (int i = 0; i < 2; i++)
		if (c.st[i])
			cudaStreamDestroy(c.st[i]);
	cudaFree(c.dev);
	cudaFreeHost(c.pin);
	free(c.page);
	return err;
}
