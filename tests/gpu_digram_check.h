/* gpu_digram_check: td_gpu_digram_count against a plain CPU count of the same sequences (shared by gpu_digram.c and gpu_digram_emu.cu). */
#ifndef GPU_DIGRAM_CHECK_H
#define GPU_DIGRAM_CHECK_H

/*
 * The reference is the CPU grammar's counting rule written out plainly
 * (engine/td_grammar.c, count_range: a pair next to a TD_SPLIT does not
 * count; a pair equal to the counted pair just before it does not count),
 * its keys sorted and run-length counted. Sequences: random over alphabets
 * of 1, 2, 3, 50 and 100,000 symbols (long runs of one symbol, odd and even
 * run lengths), TD_SPLIT at random and at the end, lengths 0 to 1,000,000;
 * and a symbol run as long as the whole sequence.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td_err.h"

typedef int (*gdc_fn)(const uint32_t *seq, uint64_t n, uint64_t **keys, uint32_t **counts, uint64_t *nd);

#define GDC_SPLIT UINT32_MAX

static int gdc_cmp64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* The reference: sorted distinct keys and counts into k[] and c[]. */
static uint64_t gdc_ref(const uint32_t *s, uint64_t n, uint64_t *k, uint32_t *c)
{
	uint64_t m = 0, prev = 0;
	uint64_t *all = (uint64_t *)malloc((n ? n : 1) * sizeof *all);
	if (!all)
		abort();
	for (uint64_t i = 0; i + 1 < n; i++) {
		if (s[i] == GDC_SPLIT || s[i + 1] == GDC_SPLIT) {
			prev = 0;
			continue;
		}
		uint64_t key = (((uint64_t)s[i] << 32) | s[i + 1]) + 1;
		if (key == prev) {
			prev = 0;
			continue;
		}
		prev = key;
		all[m++] = key - 1;
	}
	qsort(all, m, sizeof *all, gdc_cmp64);
	uint64_t u = 0;
	for (uint64_t i = 0; i < m; i++) {
		if (i == 0 || all[i] != all[i - 1]) {
			k[u] = all[i];
			c[u++] = 0;
		}
		c[u - 1]++;
	}
	free(all);
	return u;
}

static uint64_t gdc_rng = 0x9E3779B97F4A7C15ull;

static uint64_t gdc_rnd(void)
{
	gdc_rng ^= gdc_rng << 13;
	gdc_rng ^= gdc_rng >> 7;
	gdc_rng ^= gdc_rng << 17;
	return gdc_rng;
}

/* One sequence through fn and the reference; 0 when equal. */
static int gdc_one(gdc_fn fn, const char *what, const uint32_t *s, uint64_t n)
{
	uint64_t *rk = (uint64_t *)malloc((n + 1) * 8), *gk = NULL, nd = 0;
	uint32_t *rc = (uint32_t *)malloc((n + 1) * 4), *gc = NULL;
	if (!rk || !rc)
		abort();
	uint64_t ru = gdc_ref(s, n, rk, rc);
	int err = fn(s, n, &gk, &gc, &nd), bad = 0;
	if (err) {
		fprintf(stderr, "%s: %s (%s)\n", what, td_strerror(err), td_errdetail());
		bad = 1;
	} else if (nd != ru || (ru && (memcmp(gk, rk, ru * 8) || memcmp(gc, rc, ru * 4)))) {
		fprintf(stderr, "MISMATCH %s: %llu distinct digrams, the reference %llu\n", what, (unsigned long long)nd,
			(unsigned long long)ru);
		bad = 1;
	}
	printf("%s: %llu distinct digrams: %s\n", what, (unsigned long long)ru, bad ? "DIFFER" : "identical");
	free(rk);
	free(rc);
	free(gk);
	free(gc);
	return bad;
}

/* Every case; returns the number of mismatches. */
static int gdc_run(gdc_fn fn)
{
	static const uint32_t alpha[] = {1, 2, 3, 50, 100000};
	static const uint64_t lens[] = {0, 1, 2, 3, 17, 1000, 100000, 1000000};
	uint32_t *s = (uint32_t *)malloc(1000000 * 4);
	int bad = 0;
	char what[128];
	if (!s)
		abort();
	for (size_t a = 0; a < sizeof alpha / sizeof alpha[0]; a++)
		for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
			uint64_t n = lens[l];
			for (uint64_t i = 0; i < n; i++) {
				uint64_t r = gdc_rnd();
				s[i] = r % 97 == 0 ? GDC_SPLIT : (uint32_t)((r >> 8) % alpha[a]);
			}
			if (n)
				s[n - 1] = GDC_SPLIT;
			snprintf(what, sizeof what, "alphabet %u, %llu symbols", alpha[a], (unsigned long long)n);
			bad += gdc_one(fn, what, s, n);
		}
	for (uint64_t n = 999999; n <= 1000000; n++) { /* one run: odd and even */
		for (uint64_t i = 0; i < n; i++)
			s[i] = 7;
		snprintf(what, sizeof what, "one run of %llu symbols", (unsigned long long)n);
		bad += gdc_one(fn, what, s, n);
	}
	free(s);
	return bad;
}

#endif
