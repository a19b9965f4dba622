/* bench_common: what gpu_bench and gpu_fuzzy_bench share: the clock, the random words' generator and the start-up checks. */
#ifndef TD_BENCH_COMMON_H
#define TD_BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "td_gpu.h"

/* Seconds on the monotonic clock. */
static inline double bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* xorshift64: the next value of *s (not 0). */
static inline uint64_t bench_rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* After getopt: at least one ARCHIVE (else the usage line, status 2), a
 * usable GPU (else a "no GPU" line, status 77), and the table file `path`
 * opened for writing into *md (NULL path: *md NULL). Returns -1 to go on,
 * or the exit status. */
static inline int bench_start(int argc, int optind_, const char *usage, const char *path, FILE **md)
{
	*md = NULL;
	if (optind_ >= argc) {
		fprintf(stderr, "%s\n", usage);
		return 2;
	}
	if (!td_gpu_available()) {
		printf("no GPU: nothing to benchmark (no usable CUDA device, or built without CUDA)\n");
		return 77;
	}
	if (path && !(*md = fopen(path, "w"))) {
		perror(path);
		return 1;
	}
	return -1;
}

#endif
