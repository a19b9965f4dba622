/* gpu_bench: ops/s of GPU batches (transfers included) against the CPU engine on 1 thread and on all cores. */
/*
 * Usage: gpu_bench [-o TABLE.md] [-t SECONDS] ARCHIVE...
 * For each archive: extract 64 B, extract 4 KiB, count and search (random
 * dictionary words in random files) at batch sizes 1, 100, 1k, 10k, 100k.
 * Each cell is the median of repeated runs lasting about -t seconds
 * (default 0.5) after one warm-up. Prints a Markdown table (also to -o),
 * then the smallest batch size at which the GPU beats all CPU cores.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "td_archive.h"
#include "td_err.h"
#include "td_extract.h"
#include "td_format.h"
#include "td_gpu.h"
#include "td_pack.h"
#include "td_query.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

enum { OP_X64, OP_X4K, OP_COUNT, OP_SEARCH, NOPS };
static const char *op_name[NOPS] = {"extract 64 B", "extract 4 KiB", "count", "search"};
enum { E_GPU, E_CPU1, E_CPUALL, NENG };

typedef struct bench {
	const td_archive *a;
	td_gpu *g;
	uint32_t *files;
	uint64_t *fsize;
	size_t nfiles;
	td_pack word_off;
	const char *words;
	uint64_t nwords;
	double budget;
} bench;

typedef struct batch {
	size_t n;
	td_extract_req *x;
	uint8_t *xbuf;
	td_count_req *c;
	td_search_req *s;
} batch;

static void make_batch(const bench *b, batch *t, size_t n, int op)
{
	memset(t, 0, sizeof *t);
	t->n = n;
	if (op == OP_X64 || op == OP_X4K) {
		uint32_t len = op == OP_X64 ? 64 : 4096;
		t->x = calloc(n, sizeof *t->x);
		t->xbuf = malloc(n * (size_t)len);
		for (size_t i = 0; i < n; i++) {
			size_t f = rnd() % b->nfiles;
			uint64_t sz = b->fsize[f];
			t->x[i].file = b->files[f];
			t->x[i].off = sz > len ? rnd() % (sz - len + 1) : 0;
			t->x[i].len = len;
			t->x[i].buf = t->xbuf + i * (size_t)len;
		}
		return;
	}
	if (op == OP_COUNT)
		t->c = calloc(n, sizeof *t->c);
	else
		t->s = calloc(n, sizeof *t->s);
	for (size_t i = 0; i < n; i++) {
		uint64_t w = rnd() % b->nwords;
		uint64_t o0 = td_pack_get(&b->word_off, w), o1 = td_pack_get(&b->word_off, w + 1);
		td_entry scope = b->files[rnd() % b->nfiles];
		if (op == OP_COUNT) {
			t->c[i].word = b->words + o0;
			t->c[i].len = (size_t)(o1 - o0);
			t->c[i].scope = scope;
		} else {
			t->s[i].word = b->words + o0;
			t->s[i].len = (size_t)(o1 - o0);
			t->s[i].scope = scope;
		}
	}
}

static void free_batch(batch *t)
{
	if (t->s)
		for (size_t i = 0; i < t->n; i++)
			td_hits_free(&t->s[i].hits);
	free(t->x);
	free(t->xbuf);
	free(t->c);
	free(t->s);
}

static int run_once(const bench *b, batch *t, int op, int eng)
{
	if (t->s)
		for (size_t i = 0; i < t->n; i++)
			t->s[i].hits.n = 0;
	unsigned nt = eng == E_CPU1 ? 1 : 0;
	switch (op) {
	case OP_X64:
	case OP_X4K:
		return eng == E_GPU ? td_gpu_extract_batch(b->g, t->x, t->n) : td_extract_batch(b->a, t->x, t->n, nt);
	case OP_COUNT:
		return eng == E_GPU ? td_gpu_count_batch(b->g, t->c, t->n) : td_count_batch(b->a, t->c, t->n, nt);
	default:
		return eng == E_GPU ? td_gpu_search_batch(b->g, t->s, t->n) : td_search_batch(b->a, t->s, t->n, nt);
	}
}

/* Median ops/s of one cell. */
static double measure(const bench *b, batch *t, int op, int eng)
{
	double times[64];
	int k = 0;
	double t0 = now();
	if (run_once(b, t, op, eng))
		return -1;
	double warm = now() - t0;
	double start = now();
	while (k < 64 && (k < 3 || now() - start < b->budget)) {
		if (warm > 4 * b->budget && k >= 1)
			break; /* one slow run is enough */
		double s = now();
		if (run_once(b, t, op, eng))
			return -1;
		times[k++] = now() - s;
	}
	qsort(times, (size_t)k, sizeof times[0], cmp_double);
	return (double)t->n / times[k / 2];
}

static int bench_archive(const char *path, double budget, FILE *md)
{
	td_archive *a = NULL;
	int r = td_archive_open(path, TD_OPEN_POPULATE, &a);
	if (r) {
		fprintf(stderr, "%s: %s (%s)\n", path, td_strerror(r), td_errdetail());
		return 1;
	}
	bench b = {.a = a, .budget = budget};
	uint32_t ne = td_archive_nentries(a);
	b.files = malloc(ne * sizeof *b.files);
	b.fsize = malloc(ne * sizeof *b.fsize);
	for (uint32_t e = 0; e < ne; e++) {
		td_stat st;
		if (td_archive_stat(a, e, &st) == TD_OK && S_ISREG(st.mode) && st.size > 0) {
			b.files[b.nfiles] = e;
			b.fsize[b.nfiles++] = st.size;
		}
	}
	uint64_t sz = 0;
	const void *p = td_archive_section(a, TD_SEC_WORD_OFF, &sz);
	if (!p || td_pack_view(&b.word_off, p, sz) || b.nfiles == 0 || b.word_off.n < 2) {
		fprintf(stderr, "%s: no files or no words to benchmark\n", path);
		return 1;
	}
	b.words = td_archive_section(a, TD_SEC_WORDS, &sz);
	b.nwords = b.word_off.n - 1;
	if ((r = td_gpu_open(a, NULL, &b.g))) {
		fprintf(stderr, "%s: td_gpu_open: %s (%s)\n", path, td_strerror(r), td_errdetail());
		return 1;
	}
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	printf("## %s: %s, %s, upload + signatures %.3f s; CPU: %ld cores\n\n", base, td_gpu_device_name(b.g),
	       td_gpu_resident(b.g) ? "resident" : "CPU fallback", td_gpu_open_seconds(b.g), cores);
	if (md)
		fprintf(md, "\n### %s (%s; upload + rule signatures %.3f s; CPU %ld cores)\n\n"
			    "| op | batch | GPU ops/s | CPU 1 thread ops/s | CPU %ld threads ops/s | GPU / 1T | GPU / all |\n"
			    "|---|---:|---:|---:|---:|---:|---:|\n",
			base, td_gpu_device_name(b.g), td_gpu_open_seconds(b.g), cores, cores);
	static const size_t sizes[] = {1, 100, 1000, 10000, 100000};
	const size_t nsizes = sizeof sizes / sizeof sizes[0];
	for (int op = 0; op < NOPS; op++) {
		size_t crossover = 0;
		for (size_t s = 0; s < nsizes; s++) {
			batch t;
			make_batch(&b, &t, sizes[s], op);
			double v[NENG];
			for (int e = 0; e < NENG; e++)
				v[e] = measure(&b, &t, op, e);
			free_batch(&t);
			if (!crossover && v[E_GPU] > v[E_CPUALL])
				crossover = sizes[s];
			printf("%-14s %7zu  gpu %12.0f  cpu1 %12.0f  cpu%ld %12.0f  x%.1f  x%.1f\n", op_name[op], sizes[s],
			       v[E_GPU], v[E_CPU1], cores, v[E_CPUALL], v[E_GPU] / v[E_CPU1], v[E_GPU] / v[E_CPUALL]);
			fflush(stdout);
			if (md)
				fprintf(md, "| %s | %zu | %.0f | %.0f | %.0f | %.1fx | %.1fx |\n", op_name[op], sizes[s],
					v[E_GPU], v[E_CPU1], v[E_CPUALL], v[E_GPU] / v[E_CPU1], v[E_GPU] / v[E_CPUALL]);
		}
		if (crossover)
			printf("%s: the GPU beats all cores from batch size %zu (of those measured)\n", op_name[op], crossover);
		else
			printf("%s: the GPU never beat all cores here\n", op_name[op]);
		if (md)
			fprintf(md, "| %s | crossover | %s%zu | | | | |\n", op_name[op], crossover ? "" : "none, > ",
				crossover ? crossover : sizes[nsizes - 1]);
	}
	td_gpu_close(b.g);
	free(b.files);
	free(b.fsize);
	td_archive_close(a);
	return 0;
}

int main(int argc, char **argv)
{
	const char *out = NULL;
	double budget = 0.5;
	int opt;
	while ((opt = getopt(argc, argv, "o:t:h")) != -1) {
		if (opt == 'o')
			out = optarg;
		else if (opt == 't')
			budget = atof(optarg);
		else {
			fprintf(stderr, "usage: gpu_bench [-o TABLE.md] [-t SECONDS] ARCHIVE...\n");
			return opt == 'h' ? 0 : 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "usage: gpu_bench [-o TABLE.md] [-t SECONDS] ARCHIVE...\n");
		return 2;
	}
	if (!td_gpu_available()) {
		printf("no GPU: nothing to benchmark (no usable CUDA device, or built without CUDA)\n");
		return 77;
	}
	FILE *md = out ? fopen(out, "w") : NULL;
	if (out && !md) {
		perror(out);
		return 1;
	}
	if (md) {
		char date[32];
		time_t tt = time(NULL);
		strftime(date, sizeof date, "%Y-%m-%d", gmtime(&tt));
		fprintf(md, "GPU engine benchmark, %s. Ops/s, median of repeated batches; GPU times include host-device transfers.\n",
			date);
	}
	int bad = 0;
	for (int i = optind; i < argc; i++)
		bad |= bench_archive(argv[i], budget, md);
	if (md)
		fclose(md);
	return bad;
}
