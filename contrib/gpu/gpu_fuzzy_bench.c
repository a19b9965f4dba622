/* gpu_fuzzy_bench: batches of fuzzy word queries or ranked-files queries on the GPU against the CPU engine on 1 and on all threads. */
/*
 * Usage: gpu_fuzzy_bench [-a fuzzy|files|top|vector|ngrams] [-s dirs|root|files] [-k K] [-t SECONDS] [-c THREADS] [-n MAXBATCH]
 *                        [-b SIZE,...] [-1 N1] [-m NMAX] [-o TABLE.md] ARCHIVE...
 * fuzzy (default): queries are corpus words (uniform over the vocabulary)
 * with one code point changed, distance K (default 2), scope the whole
 * corpus (td_gpu_fuzzy_batch against td_fuzzy_batch). files: queries are
 * corpus words (uniform over the vocabulary), scope (-s) a random
 * directory that the engine's query index does not answer at once
 * (td_query_fast; dirs, the default) or the whole corpus (root)
 * (td_gpu_files_batch against td_files_batch). top, vector: each request
 * the top 20 words (td_gpu_top_batch against td_top_batch) or the term
 * vector (td_gpu_vector_batch against td_vector_batch) of a random regular
 * file (-s files) or directory as for files (-s dirs). ngrams: the top
 * 20 3-grams of such a scope (td_gpu_ngram_batch against td_ngram_batch).
 * For batch sizes 1, 10, 100,
 * 1k, 10k and 100k (up to MAXBATCH; -b: the sizes listed): queries a
 * second on the GPU (transfers and the engine's ranking included), the CPU
 * engine on one thread (above N1 queries, default 2000, timed on the first
 * N1) and on THREADS threads (default: every core; -m: above NMAX queries
 * timed on the first NMAX, default all); every GPU answer the all-threads
 * CPU answered is compared with it, byte for byte. Each timing repeats until SECONDS
 * (default 0.3) passed (the first GPU batch, which uploads the fuzzy
 * vocabulary, is timed apart). Exit 0 when all answers matched, 1
 * otherwise, 77 without a GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "td_analytics.h"
#include "td_archive.h"
#include "td_err.h"
#include "td_gpu.h"
#include "td_query.h"
#include "bench_common.h"

#define now bench_now
static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void)
{
	return bench_rnd(&rng);
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

/* An analytic under test: its requests (elements of `size` bytes), the
 * batch calls, the comparison and the release of a request's answer. */
typedef struct analytic {
	size_t size;
	int (*gpu)(td_gpu *g, void *q, size_t n);
	int (*cpu)(const td_archive *a, void *q, size_t n, unsigned threads);
	int (*same)(const void *x, const void *y);
	void (*release)(void *q);
} analytic;

static int fz_gpu(td_gpu *g, void *q, size_t n)
{
	return td_gpu_fuzzy_batch(g, q, n);
}

static int fz_cpu(const td_archive *a, void *q, size_t n, unsigned threads)
{
	return td_fuzzy_batch(a, q, n, threads);
}

static int fz_same(const void *px, const void *py)
{
	const td_fuzzy_req *x = px, *y = py;
	if (x->err != y->err || x->nhits != y->nhits || x->nbytes != y->nbytes ||
	    (x->nbytes && memcmp(x->words, y->words, x->nbytes)))
		return 0;
	for (size_t k = 0; k < x->nhits; k++)
		if (x->hits[k].off != y->hits[k].off || x->hits[k].len != y->hits[k].len ||
		    x->hits[k].dist != y->hits[k].dist || x->hits[k].count != y->hits[k].count)
			return 0;
	return 1;
}

static void fz_release(void *q)
{
	td_fuzzy_req_free(q);
}

static int fl_gpu(td_gpu *g, void *q, size_t n)
{
	return td_gpu_files_batch(g, q, n);
}

static int fl_cpu(const td_archive *a, void *q, size_t n, unsigned threads)
{
	return td_files_batch(a, q, n, threads);
}

static int fl_same(const void *px, const void *py)
{
	const td_files_req *x = px, *y = py;
	if (x->err != y->err || x->nfiles != y->nfiles)
		return 0;
	for (size_t k = 0; k < x->nfiles; k++)
		if (x->files[k].file != y->files[k].file || x->files[k].count != y->files[k].count)
			return 0;
	return 1;
}

static void fl_release(void *q)
{
	td_files_req *r = q;
	free(r->files);
	r->files = NULL;
	r->nfiles = 0;
}

static int tp_gpu(td_gpu *g, void *q, size_t n)
{
	return td_gpu_top_batch(g, q, n);
}

static int tp_cpu(const td_archive *a, void *q, size_t n, unsigned threads)
{
	return td_top_batch(a, q, n, threads);
}

static int vc_gpu(td_gpu *g, void *q, size_t n)
{
	return td_gpu_vector_batch(g, q, n);
}

static int vc_cpu(const td_archive *a, void *q, size_t n, unsigned threads)
{
	return td_vector_batch(a, q, n, threads);
}

static int wd_same(const void *px, const void *py)
{
	const td_words_req *x = px, *y = py;
	if (x->err != y->err || x->nwords != y->nwords || x->nbytes != y->nbytes ||
	    (x->nbytes && memcmp(x->bytes, y->bytes, x->nbytes)))
		return 0;
	for (size_t k = 0; k < x->nwords; k++)
		if (x->words[k].off != y->words[k].off || x->words[k].len != y->words[k].len ||
		    x->words[k].count != y->words[k].count)
			return 0;
	return 1;
}

static void wd_release(void *q)
{
	td_words_req_free(q);
}

static int ng_gpu(td_gpu *g, void *q, size_t n)
{
	return td_gpu_ngram_batch(g, q, n);
}

static int ng_cpu(const td_archive *a, void *q, size_t n, unsigned threads)
{
	return td_ngram_batch(a, q, n, threads);
}

static int ng_same(const void *px, const void *py)
{
	const td_ngram_req *x = px, *y = py;
	if (x->err != y->err || x->ngrams != y->ngrams || x->nbytes != y->nbytes ||
	    (x->nbytes && memcmp(x->bytes, y->bytes, x->nbytes)))
		return 0;
	for (size_t k = 0; k < x->ngrams; k++)
		if (x->grams[k].off != y->grams[k].off || x->grams[k].len != y->grams[k].len ||
		    x->grams[k].count != y->grams[k].count)
			return 0;
	return 1;
}

static void ng_release(void *q)
{
	td_ngram_req_free(q);
}

static const analytic fuzzy_an = { sizeof(td_fuzzy_req), fz_gpu, fz_cpu, fz_same, fz_release };
static const analytic files_an = { sizeof(td_files_req), fl_gpu, fl_cpu, fl_same, fl_release };
static const analytic top_an = { sizeof(td_words_req), tp_gpu, tp_cpu, wd_same, wd_release };
static const analytic vector_an = { sizeof(td_words_req), vc_gpu, vc_cpu, wd_same, wd_release };
static const analytic ngram_an = { sizeof(td_ngram_req), ng_gpu, ng_cpu, ng_same, ng_release };

/* Regular files of a, into *out (malloc'd); their number. */
static size_t reg_files(const td_archive *a, td_entry **out)
{
	uint32_t ne = td_archive_nentries(a);
	size_t n = 0;
	*out = malloc((ne + 1) * sizeof **out);
	for (td_entry e = 1; *out && e < ne; e++) {
		td_stat st;
		if (td_archive_stat(a, e, &st) == TD_OK && S_ISREG(st.mode))
			(*out)[n++] = e;
	}
	return n;
}

static void release_all(const analytic *an, char *q, size_t n)
{
	for (size_t i = 0; i < n; i++)
		an->release(q + i * an->size);
}

/* Queries a second of a batch over q[0..n) on g (cpu NULL) or on the CPU
 * engine with `threads` threads, repeated for `secs`. */
static double rate(const analytic *an, char *q, size_t n, double secs, td_gpu *g, const td_archive *cpu,
		   unsigned threads)
{
	unsigned reps = 0;
	double t0 = now(), t;
	do {
		release_all(an, q, n);
		if (cpu)
			an->cpu(cpu, q, n, threads);
		else
			an->gpu(g, q, n);
		reps++;
	} while ((t = now() - t0) < secs);
	return (double)n * reps / t;
}

/* Directories of a (TD_ROOT excluded) that td_query_fast does not take,
 * into *out (malloc'd); their number. */
static size_t small_dirs(const td_archive *a, td_entry **out)
{
	uint32_t ne = td_archive_nentries(a);
	size_t n = 0;
	*out = malloc((ne + 1) * sizeof **out);
	for (td_entry e = 1; *out && e < ne; e++) {
		td_stat st;
		if (td_archive_stat(a, e, &st) == TD_OK && S_ISDIR(st.mode) && !td_query_fast(a, e))
			(*out)[n++] = e;
	}
	return n;
}

int main(int argc, char **argv)
{
	static const char usage[] = "usage: gpu_fuzzy_bench [-a fuzzy|files|top|vector|ngrams] [-s dirs|root|files] [-k K] [-t SECONDS] "
				    "[-c THREADS] [-n MAXBATCH] [-b SIZE,...] [-1 N1] [-m NMAX] [-o TABLE.md] ARCHIVE...";
	unsigned k = 2, threads = 0;
	double secs = 0.3;
	size_t maxbatch = 100000, n1max = 2000, nallmax = SIZE_MAX, bsizes[16], nb = 0;
	const char *table = NULL;
	int files = 0, root = 0, words = 0, opt; /* words: 1 top, 2 vector, 3 n-grams */
	int sfiles = 0;
	while ((opt = getopt(argc, argv, "a:s:k:t:c:n:o:b:1:m:")) != -1) {
		switch (opt) {
		case 'a':
			files = !strcmp(optarg, "files");
			words = !strcmp(optarg, "top") ? 1 : !strcmp(optarg, "vector") ? 2 : !strcmp(optarg, "ngrams") ? 3 : 0;
			break;
		case 's':
			root = !strcmp(optarg, "root");
			sfiles = !strcmp(optarg, "files");
			break;
		case 'k': k = (unsigned)atoi(optarg); break;
		case 't': secs = atof(optarg); break;
		case 'c': threads = (unsigned)atoi(optarg); break;
		case 'n': maxbatch = (size_t)atol(optarg); break;
		case 'o': table = optarg; break;
		case '1': n1max = (size_t)atol(optarg); break;
		case 'm': nallmax = (size_t)atol(optarg); break;
		case 'b':
			for (char *t = strtok(optarg, ","); t && nb < 16; t = strtok(NULL, ","))
				bsizes[nb++] = (size_t)atol(t);
			break;
		default:
			fprintf(stderr, "%s\n", usage);
			return 2;
		}
	}
	if (!threads)
		threads = (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
	FILE *out;
	int st = bench_start(argc, optind, usage, table, &out);
	if (st >= 0)
		return st;
	const analytic *an = words == 1 ? &top_an : words == 2 ? &vector_an : words == 3 ? &ngram_an : files ? &files_an : &fuzzy_an;
	int bad = 0;
	static const size_t dsizes[] = { 1, 10, 100, 1000, 10000, 100000 };
	const size_t *sizes = nb ? bsizes : dsizes, nsizes = nb ? nb : sizeof dsizes / sizeof dsizes[0];
	const char *head = "| archive | analytic | words | batch | GPU q/s | CPU 1 thread q/s | CPU %u threads q/s | GPU / 1 thread | GPU / %u threads | equal |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n";
	printf(head, threads, threads);
	if (out)
		fprintf(out, head, threads, threads);
	const char *what = files ? (root ? "files (corpus)" : "files (directory)") : "fuzzy";
	if (words)
		what = words == 1   ? (sfiles ? "top 20 (file)" : "top 20 (directory)")
		       : words == 3 ? (sfiles ? "top 20 3-grams (file)" : "top 20 3-grams (directory)")
				    : (sfiles ? "vector (file)" : "vector (directory)");
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
		td_entry *dirs = NULL;
		size_t ndirs = (files || words) && !root ? (sfiles ? reg_files(a, &dirs) : small_dirs(a, &dirs)) : 0;
		if (words) {
			fprintf(stderr, "%s: %zu words, %zu %s, %s\n", argv[ai], v.n, ndirs,
				sfiles ? "regular files" : "directories below the query index's size", td_gpu_device_name(g));
		} else if (!files) {
			uint64_t tn = 0, tb = 0;
			double tt = now();
			td_fuzzy_tree(a, &tn, &tb);
			tt = now() - tt;
			fprintf(stderr, "%s: %zu words, tree %llu nodes built in %.3f s, %s\n", argv[ai], v.n,
				(unsigned long long)tn, tt, td_gpu_device_name(g));
		} else {
			fprintf(stderr, "%s: %zu words, %zu directories below the query index's size, %s\n", argv[ai],
				v.n, ndirs, td_gpu_device_name(g));
		}
		size_t nmax = maxbatch;
		for (size_t si = 0; si < nsizes; si++)
			if (sizes[si] > nmax)
				nmax = sizes[si];
		char *q = calloc(nmax, an->size), *c = calloc(nmax, an->size);
		char *text = malloc(nmax * 272);
		for (size_t i = 0; i < nmax; i++) {
			size_t w = rnd() % v.n, len;
			while ((len = v.len[w]) > 255)
				w = rnd() % v.n;
			char *b = text + i * 272;
			memcpy(b, v.w[w], len);
			if (words) {
				td_entry scope = ndirs ? dirs[rnd() % ndirs] : TD_ROOT;
				if (words == 3)
					((td_ngram_req *)q)[i] = (td_ngram_req){ .scope = scope, .len = 3, .top = 20 };
				else
					((td_words_req *)q)[i] = (td_words_req){ .scope = scope, .n = 20 };
				memcpy(c + i * an->size, q + i * an->size, an->size);
				continue;
			}
			if (files) {
				td_entry scope = ndirs ? dirs[rnd() % ndirs] : TD_ROOT;
				((td_files_req *)q)[i] = (td_files_req){ .word = b, .len = len, .scope = scope };
				memcpy(c + i * an->size, q + i * an->size, an->size);
				continue;
			}
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
			((td_fuzzy_req *)q)[i] = (td_fuzzy_req){ .word = b, .len = len, .k = k, .scope = TD_ROOT };
			memcpy(c + i * an->size, q + i * an->size, an->size);
		}
		double up = now();
		an->gpu(g, q, 1); /* builds the device vocabulary (fuzzy) or grammar (top, vector) */
		up = now() - up;
		an->release(q);
		fprintf(stderr, "%s: first GPU batch %.3f s\n", argv[ai], up);
		/* a batch that reaches every shard of format 5 (each builds its
		 * device grammar or vocabulary at its first request), untimed */
		size_t nw = nmax < 1000 ? nmax : 1000;
		up = now();
		an->gpu(g, q, nw);
		release_all(an, q, nw);
		fprintf(stderr, "%s: warm-up batch of %zu %.3f s\n", argv[ai], nw, now() - up);
		for (size_t si = 0; si < nsizes; si++) {
			size_t n = sizes[si];
			if (n > nmax || !n)
				break;
			size_t n1 = n > n1max ? n1max : n, na = n > nallmax ? nallmax : n;
			double g_qs = rate(an, q, n, secs, g, NULL, 0);
			double a_qs = rate(an, c, na, secs, NULL, a, threads);
			size_t diff = 0;
			for (size_t i = 0; i < na; i++)
				diff += !an->same(q + i * an->size, c + i * an->size);
			release_all(an, c, na);
			double o_qs = rate(an, c, n1, secs, NULL, a, 1);
			release_all(an, c, n1);
			release_all(an, q, n);
			bad |= diff != 0;
			const char *fmt = "| %s | %s | %zu | %zu | %.0f | %.0f%s | %.0f%s | %.1fx | %.2fx | %s |\n";
			const char *base = strrchr(argv[ai], '/') ? strrchr(argv[ai], '/') + 1 : argv[ai];
			char eq[64], p1[32] = "", pa[32] = "";
			if (n1 < n)
				snprintf(p1, sizeof p1, " (%zu)", n1);
			if (na < n)
				snprintf(pa, sizeof pa, " (%zu)", na);
			snprintf(eq, sizeof eq, diff ? "%zu DIFFER" : "yes", diff);
			printf(fmt, base, what, v.n, n, g_qs, o_qs, p1, a_qs, pa, g_qs / o_qs, g_qs / a_qs, eq);
			if (out)
				fprintf(out, fmt, base, what, v.n, n, g_qs, o_qs, p1, a_qs, pa, g_qs / o_qs, g_qs / a_qs, eq);
			fflush(stdout);
		}
		free(q);
		free(c);
		free(text);
		free(dirs);
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
