/* gpu_fuzzy_bench: batches of fuzzy word queries on the GPU against the CPU engine on 1 and on all threads. */
/*
 * Usage: gpu_fuzzy_bench [-k K] [-t SECONDS] [-c THREADS] [-n MAXBATCH] [-o TABLE.md] ARCHIVE...
 * Queries are corpus words (uniform over the vocabulary) with one code
 * point changed, distance K (default 2), scope the whole corpus. For batch
 * sizes 1, 10, 100, 1k, 10k and 100k (up to MAXBATCH): queries a second on
 * the GPU (td_gpu_fuzzy_batch, transfers and the engine's ranking
 * included), the CPU engine on one thread (td_fuzzy_batch; above 2000
 * queries timed on the first 2000) and on THREADS threads (default: every
 * core); every GPU answer is compared with the all-threads CPU answer,
 * byte for byte. Each timing repeats until SECONDS (default 0.3) passed
 * (the first GPU batch, which uploads the vocabulary, is timed apart). Exit 0 when all answers matched, 1 otherwise, 77
 * without a GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "td_analytics.h"
#include "td_archive.h"
#include "td_err.h"
#include "td_gpu.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

typedef struct vocab {
	char **w;
	size_t *len;
	size_t n, cap;
} vocab;

static int add_word(void *ctx, const char *word, size_t len, uint64_t count)
{
	(void)count;
	vocab *v = ctx;
	if (v->n == v->cap) {
		v->cap = v->cap ? 2 * v->cap : 4096;
		v->w = realloc(v->w, v->cap * sizeof *v->w);
		v->len = realloc(v->len, v->cap * sizeof *v->len);
		if (!v->w || !v->len)
			return TD_ENOMEM;
	}
	v->w[v->n] = malloc(len + 1);
	if (!v->w[v->n])
		return TD_ENOMEM;
	memcpy(v->w[v->n], word, len);
	v->len[v->n++] = len;
	return TD_OK;
}

static void free_reqs(td_fuzzy_req *q, size_t n)
{
	for (size_t i = 0; i < n; i++)
		td_fuzzy_req_free(&q[i]);
}

static int same(const td_fuzzy_req *x, const td_fuzzy_req *y)
{
	if (x->err != y->err || x->nhits != y->nhits || x->nbytes != y->nbytes ||
	    (x->nbytes && memcmp(x->words, y->words, x->nbytes)))
		return 0;
	for (size_t k = 0; k < x->nhits; k++)
		if (x->hits[k].off != y->hits[k].off || x->hits[k].len != y->hits[k].len ||
		    x->hits[k].dist != y->hits[k].dist || x->hits[k].count != y->hits[k].count)
			return 0;
	return 1;
}

/* Queries a second of run() over q[0..n), repeated for `secs`. */
static double rate(td_fuzzy_req *q, size_t n, double secs, int (*run)(void *, td_fuzzy_req *, size_t), void *ctx)
{
	unsigned reps = 0;
	double t0 = now(), t;
	do {
		free_reqs(q, n);
		run(ctx, q, n);
		reps++;
	} while ((t = now() - t0) < secs);
	return (double)n * reps / t;
}

typedef struct cpu_ctx {
	const td_archive *a;
	unsigned threads;
} cpu_ctx;

static int run_cpu(void *ctx, td_fuzzy_req *q, size_t n)
{
	cpu_ctx *c = ctx;
	return td_fuzzy_batch(c->a, q, n, c->threads);
}

static int run_gpu(void *ctx, td_fuzzy_req *q, size_t n)
{
	return td_gpu_fuzzy_batch(ctx, q, n);
}

int main(int argc, char **argv)
{
	unsigned k = 2, threads = 0;
	double secs = 0.3;
	size_t maxbatch = 100000;
	const char *table = NULL;
	int opt;
	while ((opt = getopt(argc, argv, "k:t:c:n:o:")) != -1) {
		switch (opt) {
		case 'k': k = (unsigned)atoi(optarg); break;
		case 't': secs = atof(optarg); break;
		case 'c': threads = (unsigned)atoi(optarg); break;
		case 'n': maxbatch = (size_t)atol(optarg); break;
		case 'o': table = optarg; break;
		default:
			fprintf(stderr, "usage: gpu_fuzzy_bench [-k K] [-t SECONDS] [-c THREADS] [-n MAXBATCH] [-o TABLE.md] ARCHIVE...\n");
			return 2;
		}
	}
	if (!threads)
		threads = (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
	if (!td_gpu_available()) {
		printf("no GPU\n");
		return 77;
	}
	FILE *out = table ? fopen(table, "w") : NULL;
	int bad = 0;
	static const size_t sizes[] = { 1, 10, 100, 1000, 10000, 100000 };
	const char *head = "| archive | words | batch | GPU q/s | CPU 1 thread q/s | CPU %u threads q/s | GPU / 1 thread | GPU / %u threads | equal |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n";
	printf(head, threads, threads);
	if (out)
		fprintf(out, head, threads, threads);
	for (int ai = optind; ai < argc; ai++) {
		td_archive *a = NULL;
		int r = td_archive_open(argv[ai], 0, &a);
		vocab v = { 0 };
		if (!r)
			r = td_term_vector(a, TD_ROOT, add_word, &v);
		td_gpu *g = NULL;
		if (!r)
			r = td_gpu_open(a, NULL, &g);
		if (r || !v.n) {
			fprintf(stderr, "%s: %s (%s)\n", argv[ai], td_strerror(r), td_errdetail());
			return 1;
		}
		uint64_t tn = 0, tb = 0;
		double tt = now();
		td_fuzzy_tree(a, &tn, &tb);
		tt = now() - tt;
		fprintf(stderr, "%s: %zu words, tree %llu nodes built in %.3f s, %s\n", argv[ai], v.n,
			(unsigned long long)tn, tt, td_gpu_device_name(g));
		size_t nmax = maxbatch;
		td_fuzzy_req *q = calloc(nmax, sizeof *q), *c = calloc(nmax, sizeof *c);
		char *text = malloc(nmax * 272);
		for (size_t i = 0; i < nmax; i++) {
			size_t w = rnd() % v.n, len;
			while ((len = v.len[w]) > 255)
				w = rnd() % v.n;
			char *b = text + i * 272;
			memcpy(b, v.w[w], len);
			/* one ASCII letter for a byte that starts a code point */
			size_t at = rnd() % len;
			while (at && ((uint8_t)b[at] & 0xC0) == 0x80)
				at--;
			size_t cl = 1;
			while (at + cl < len && ((uint8_t)b[at + cl] & 0xC0) == 0x80)
				cl++;
			memmove(b + at + 1, b + at + cl, len - at - cl);
			b[at] = (char)('a' + rnd() % 26);
			len = len - cl + 1;
			q[i] = (td_fuzzy_req){ .word = b, .len = len, .k = k, .scope = TD_ROOT };
			c[i] = q[i];
		}
		double up = now();
		td_gpu_fuzzy_batch(g, q, 1); /* builds the device vocabulary */
		up = now() - up;
		fprintf(stderr, "%s: first GPU batch (vocabulary upload) %.3f s\n", argv[ai], up);
		for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
			size_t n = sizes[s];
			if (n > nmax)
				break;
			cpu_ctx one = { a, 1 }, all = { a, threads };
			size_t n1 = n > 2000 ? 2000 : n;
			double g_qs = rate(q, n, secs, run_gpu, g);
			double a_qs = rate(c, n, secs, run_cpu, &all);
			size_t diff = 0;
			for (size_t i = 0; i < n; i++)
				diff += !same(&q[i], &c[i]);
			free_reqs(c, n);
			double o_qs = rate(c, n1, secs, run_cpu, &one);
			free_reqs(c, n1);
			free_reqs(q, n);
			bad |= diff != 0;
			const char *fmt = "| %s | %zu | %zu | %.0f | %.0f%s | %.0f | %.1fx | %.2fx | %s |\n";
			const char *base = strrchr(argv[ai], '/') ? strrchr(argv[ai], '/') + 1 : argv[ai];
			char eq[64];
			snprintf(eq, sizeof eq, diff ? "%zu DIFFER" : "yes", diff);
			printf(fmt, base, v.n, n, g_qs, o_qs, n1 < n ? " (2000)" : "", a_qs, g_qs / o_qs, g_qs / a_qs, eq);
			if (out)
				fprintf(out, fmt, base, v.n, n, g_qs, o_qs, n1 < n ? " (2000)" : "", a_qs, g_qs / o_qs,
					g_qs / a_qs, eq);
			fflush(stdout);
		}
		free(q);
		free(c);
		free(text);
		for (size_t i = 0; i < v.n; i++)
			free(v.w[i]);
		free(v.w);
		free(v.len);
		td_gpu_close(g);
		td_archive_close(a);
	}
	if (out)
		fclose(out);
	return bad;
}
