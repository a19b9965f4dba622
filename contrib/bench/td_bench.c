/* td_bench: engine micro-benchmarks on one archive (open, random and sequential
 * extract, count and search), printed as key=value lines.
 *
 * Usage: td_bench [-a] [-c] [-D ROUNDS] [-d SECONDS] [-m MIB] [-p PASSES] [-r] [-t THREADS] [-n BATCH] [-w WORD[,WORD...]] ARCHIVE
 *
 *   -m MIB              the archive's cache budget (td_archive_set_cache;
 *                       default the engine's, TD_RCACHE_DEFAULT)
 *   -a                  tell the engine before the first sequential pass
 *                       that it will read every file (td_archive_will_read,
 *                       as `tadoc unpack` does); its work counts in the pass
 *   -c                  time the one-thread figures (open, random, sequential,
 *                       count, search) in process CPU time instead of wall
 *                       time: steadier on a machine shared with other work
 *                       (the batches, on several threads, stay wall time)
 *
 *   open_us_*           td_archive_open + close, median/min of many (us)
 *   rand64_ops_per_s    td_extract of 64 B, one core, random file weighted
 *                       by size and random offset within it
 *   rand4k_ops_per_s    the same for 4 KiB
 *   rand64c_ops_per_s,  the same through one td_cursor (what a mount's
 *   rand4kc_ops_per_s   worker thread reads with)
 *   -r                  the random reads before the sequential pass, on
 *                       the freshly opened archive (caches empty)
 *   batch4k_ops_per_s   td_extract_batch of BATCH 4 KiB requests, THREADS
 *   seq_MB_per_s        every file read with a td_cursor in 1 MiB chunks:
 *                       the first pass over the freshly opened archive
 *   decoder_*           -D ROUNDS: first passes over fresh opens of the
 *                       archive with the portable and the vector decoder of
 *                       coded sequences (td_scode_simd), alternating; the
 *                       median of each (after the figures above)
 *   seq_warm_MB_per_s   -p PASSES > 1: the median of passes 2..PASSES (the
 *                       rule cache filled by the passes before)
 *   count_us.W          td_count(W, whole corpus), median (us)
 *   search_us.W         td_search(W, whole corpus), median (us), with hits
 *   count_file_us.W,    td_count / td_search(W, one file) for every file,
 *   search_file_us.W    one thread, mean per call (us)
 *   count_batch_us      td_count_batch of all words x every file scope
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "td_archive.h"
#include "td_extract.h"
#include "td_query.h"
#include "td_scode.h"

#define TB_OPEN_REPS 501
#define TB_SEQ_CHUNK (1u << 20)
#define TB_MAX_WORDS 32

struct tb_files {
	td_entry *e;
	uint64_t *cum;                /* cum[i] = bytes in files [0, i] */
	size_t n;
	uint64_t total;
};

static clockid_t tb_clock = CLOCK_MONOTONIC; /* -c: CLOCK_PROCESS_CPUTIME_ID */
static int tb_hint;                           /* -a: td_archive_will_read before the first pass */

static double tb_time(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds for the one-thread figures; tb_wall() for the threaded batches. */
static double tb_now(void)
{
	return tb_time(tb_clock);
}

static double tb_wall(void)
{
	return tb_time(CLOCK_MONOTONIC);
}

static uint64_t tb_rand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

static int tb_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double tb_median(double *v, size_t n)
{
	qsort(v, n, sizeof *v, tb_cmp_double);
	return v[n / 2];
}

static void tb_die(const char *what, int err)
{
	fprintf(stderr, "td_bench: %s: %s%s%s\n", what, td_strerror(err),
		*td_errdetail() ? ": " : "", td_errdetail());
	exit(1);
}

/* Collect the regular files with non-zero size and their cumulative sizes. */
static void tb_collect(const td_archive *a, struct tb_files *f)
{
	uint32_t n = td_archive_nentries(a);
	f->e = malloc(n * sizeof *f->e);
	f->cum = malloc(n * sizeof *f->cum);
	if (!f->e || !f->cum) {
		fprintf(stderr, "td_bench: out of memory\n");
		exit(1);
	}
	f->n = 0;
	f->total = 0;
	for (uint32_t i = 0; i < n; i++) {
		td_stat st;
		int err = td_archive_stat(a, i, &st);
		if (err)
			tb_die("stat", err);
		if (!S_ISREG(st.mode) || st.size == 0)
			continue;
		f->total += st.size;
		f->e[f->n] = i;
		f->cum[f->n] = f->total;
		f->n++;
	}
}

/* A random (file, offset) for a read of len bytes: file weighted by size. */
static void tb_pick(const struct tb_files *f, uint64_t *rng, size_t len, td_entry *e, uint64_t *off)
{
	uint64_t x = tb_rand(rng) % f->total;
	size_t lo = 0, hi = f->n - 1;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (f->cum[mid] > x)
			hi = mid;
		else
			lo = mid + 1;
	}
	uint64_t size = f->cum[lo] - (lo ? f->cum[lo - 1] : 0);
	*e = f->e[lo];
	*off = size > len ? tb_rand(rng) % (size - len + 1) : 0;
}

static void tb_open_times(const char *path)
{
	double *v = malloc(TB_OPEN_REPS * sizeof *v);
	if (!v)
		exit(1);
	for (int i = 0; i < TB_OPEN_REPS; i++) {
		td_archive *a;
		double t0 = tb_now();
		int err = td_archive_open(path, 0, &a);
		double t1 = tb_now();
		if (err)
			tb_die(path, err);
		td_archive_close(a);
		v[i] = (t1 - t0) * 1e6;
	}
	double first = v[0];
	double med = tb_median(v, TB_OPEN_REPS);
	printf("open_us_first=%.1f\nopen_us_median=%.1f\nopen_us_min=%.1f\n", first, med, v[0]);
	free(v);
}

/* Random reads of len bytes for secs: through td_extract, or with cur
 * through that one cursor (as a mount's worker thread reads). */
static void tb_random(const td_archive *a, td_cursor *cur, const struct tb_files *f, size_t len, double secs,
		      const char *key)
{
	char *buf = malloc(len);
	if (!buf)
		exit(1);
	uint64_t rng = 0x1234567u + len, ops = 0, bytes = 0;
	double t0 = tb_now(), t;
	do {
		for (int k = 0; k < 256; k++) {
			td_entry e;
			uint64_t off;
			size_t got;
			tb_pick(f, &rng, len, &e, &off);
			int err = cur ? td_cursor_read(cur, e, off, buf, len, &got) : td_extract(a, e, off, buf, len, &got);
			if (err)
				tb_die("extract", err);
			bytes += got;
			ops++;
		}
		t = tb_now();
	} while (t - t0 < secs);
	printf("%s_ops_per_s=%.0f\n%s_MB_per_s=%.1f\n", key, ops / (t - t0), key, bytes / (t - t0) / 1e6);
	free(buf);
}

static void tb_batch(const td_archive *a, const struct tb_files *f, size_t n, unsigned nthreads)
{
	const uint32_t len = 4096;
	td_extract_req *r = calloc(n, sizeof *r);
	char *bufs = malloc(n * (size_t)len);
	if (!r || !bufs) {
		fprintf(stderr, "td_bench: out of memory for the batch\n");
		exit(1);
	}
	uint64_t rng = 0xabcdefu;
	for (size_t i = 0; i < n; i++) {
		tb_pick(f, &rng, len, &r[i].file, &r[i].off);
		r[i].len = len;
		r[i].buf = bufs + i * (size_t)len;
	}
	double t0 = tb_wall();
	int err = td_extract_batch(a, r, n, nthreads);
	double dt = tb_wall() - t0;
	if (err)
		tb_die("extract_batch", err);
	for (size_t i = 0; i < n; i++)
		if (r[i].err)
			tb_die("extract_batch request", r[i].err);
	printf("batch4k_threads=%u\nbatch4k_n=%zu\nbatch4k_ops_per_s=%.0f\n", nthreads, n, n / dt);
	free(bufs);
	free(r);
}

/* One pass reading every file with cursor c in TB_SEQ_CHUNK pieces; its
 * seconds. Exits on an error or a short total. */
static double tb_seq_pass(td_cursor *c, const struct tb_files *f, char *buf, uint64_t *sum)
{
	uint64_t bytes = 0;
	double t0 = tb_now();
	for (size_t i = 0; i < f->n; i++) {
		uint64_t off = 0;
		for (;;) {
			size_t got;
			int err = td_cursor_read(c, f->e[i], off, buf, TB_SEQ_CHUNK, &got);
			if (err)
				tb_die("cursor_read", err);
			if (got == 0)
				break;
			*sum += (unsigned char)buf[got - 1];
			off += got;
		}
		bytes += off;
	}
	double dt = tb_now() - t0;
	if (bytes != f->total) {
		fprintf(stderr, "td_bench: sequential read gave %" PRIu64 " bytes, expected %" PRIu64 "\n",
			bytes, f->total);
		exit(1);
	}
	return dt;
}

static void tb_sequential(const td_archive *a, const struct tb_files *f, unsigned passes)
{
	char *buf = malloc(TB_SEQ_CHUNK);
	td_cursor *c = td_cursor_new(a);
	double *dt = calloc(passes, sizeof *dt);
	if (!buf || !c || !dt) {
		fprintf(stderr, "td_bench: out of memory\n");
		exit(1);
	}
	uint64_t sum = 0;
	for (unsigned p = 0; p < passes; p++) {
		double t0 = tb_now();
		int err = p == 0 && tb_hint ? td_archive_will_read(a, f->total) : TD_OK;
		if (err)
			tb_die("will_read", err);
		tb_seq_pass(c, f, buf, &sum);
		dt[p] = tb_now() - t0; /* the hint's work counts in the pass */
	}
	printf("seq_bytes=%" PRIu64 "\nseq_secs=%.3f\nseq_MB_per_s=%.1f\nseq_checksum=%" PRIu64 "\n",
	       f->total, dt[0], f->total / dt[0] / 1e6, sum);
	if (passes > 1) {
		double med = tb_median(dt + 1, passes - 1);
		printf("seq_passes=%u\nseq_warm_MB_per_s=%.1f\n", passes, f->total / med / 1e6);
	}
	free(dt);
	td_cursor_free(c);
	free(buf);
}

static void tb_queries(const td_archive *a, const struct tb_files *f, char **words, size_t nw, unsigned nthreads)
{
	for (size_t w = 0; w < nw; w++) {
		size_t len = strlen(words[w]);
		double v[21];
		uint64_t count = 0;
		for (int i = 0; i < 21; i++) {
			double t0 = tb_now();
			int err = td_count(a, words[w], len, TD_ROOT, &count);
			v[i] = (tb_now() - t0) * 1e6;
			if (err)
				tb_die("count", err);
		}
		printf("count.%s=%" PRIu64 "\ncount_us.%s=%.2f\n", words[w], count, words[w], tb_median(v, 21));
		size_t hits = 0;
		for (int i = 0; i < 5; i++) {
			td_hits h = { 0 };
			double t0 = tb_now();
			int err = td_search(a, words[w], len, TD_ROOT, &h);
			v[i] = (tb_now() - t0) * 1e6;
			if (err)
				tb_die("search", err);
			hits = h.n;
			td_hits_free(&h);
		}
		printf("search_hits.%s=%zu\nsearch_us.%s=%.1f\n", words[w], hits, words[w], tb_median(v, 5));
		/* every file on its own, one call each */
		double t0 = tb_now();
		for (size_t i = 0; i < f->n; i++) {
			int err = td_count(a, words[w], len, f->e[i], &count);
			if (err)
				tb_die("count", err);
		}
		double t1 = tb_now();
		hits = 0;
		for (size_t i = 0; i < f->n; i++) {
			td_hits h = { 0 };
			int err = td_search(a, words[w], len, f->e[i], &h);
			if (err)
				tb_die("search", err);
			hits += h.n;
			td_hits_free(&h);
		}
		double t2 = tb_now();
		printf("count_file_us.%s=%.2f\nsearch_file_hits.%s=%zu\nsearch_file_us.%s=%.2f\n", words[w],
		       f->n ? (t1 - t0) * 1e6 / f->n : 0, words[w], hits, words[w], f->n ? (t2 - t1) * 1e6 / f->n : 0);
	}
	/* Per-file counts of every word, batched. */
	size_t n = nw * f->n;
	if (n == 0)
		return;
	td_count_req *r = calloc(n, sizeof *r);
	if (!r)
		exit(1);
	for (size_t w = 0; w < nw; w++)
		for (size_t i = 0; i < f->n; i++) {
			td_count_req *q = &r[w * f->n + i];
			q->word = words[w];
			q->len = strlen(words[w]);
			q->scope = f->e[i];
		}
	double t0 = tb_wall();
	int err = td_count_batch(a, r, n, nthreads);
	double dt = tb_wall() - t0;
	if (err)
		tb_die("count_batch", err);
	printf("count_batch_n=%zu\ncount_batch_threads=%u\ncount_batch_us=%.0f\n", n, nthreads, dt * 1e6);
	free(r);
}

/* The archive at path, with a cache budget of budget_mib MiB unless it is
 * negative (the engine's default); exits when it does not open. */
static td_archive *tb_open(const char *path, long long budget_mib)
{
	td_archive *a;
	int err = td_archive_open(path, 0, &a);
	if (err)
		tb_die(path, err);
	if (budget_mib >= 0)
		td_archive_set_cache(a, (uint64_t)budget_mib << 20);
	return a;
}

/* -D ROUNDS: first passes over freshly opened copies of the archive with
 * the portable decoder of coded sequences and with the vector one
 * (td_scode_simd; format 4 archives, CPUs with AVX-512), which goes first
 * alternating from round to round; the median of each. */
static void tb_decoders(const char *path, long long budget_mib, const struct tb_files *f, unsigned rounds)
{
	int have = td_scode_simd(1);
	printf("decoder_vector_available=%d\n", have);
	if (!have || rounds == 0)
		return;
	double *dt[2] = { calloc(rounds, sizeof(double)), calloc(rounds, sizeof(double)) };
	char *buf = malloc(TB_SEQ_CHUNK);
	if (!dt[0] || !dt[1] || !buf) {
		fprintf(stderr, "td_bench: out of memory\n");
		exit(1);
	}
	uint64_t sum = 0;
	for (unsigned r = 0; r < rounds; r++)
		for (unsigned k = 0; k < 2; k++) {
			unsigned v = (r + k) & 1;
			td_scode_simd((int)v);
			td_archive *a = tb_open(path, budget_mib);
			td_cursor *c = td_cursor_new(a);
			if (!c)
				tb_die(path, TD_ENOMEM);
			dt[v][r] = tb_seq_pass(c, f, buf, &sum);
			td_cursor_free(c);
			td_archive_close(a);
		}
	td_scode_simd(1);
	printf("decoder_rounds=%u\ndecoder_scalar_first_MB_per_s=%.1f\ndecoder_vector_first_MB_per_s=%.1f\n", rounds,
	       f->total / tb_median(dt[0], rounds) / 1e6, f->total / tb_median(dt[1], rounds) / 1e6);
	free(dt[0]);
	free(dt[1]);
	free(buf);
}

static void tb_usage(FILE *out)
{
	fprintf(out, "usage: td_bench [-a] [-c] [-D ROUNDS] [-d SECONDS] [-m MIB] [-p PASSES] [-r] [-t THREADS] [-n BATCH] [-w WORD[,WORD...]] ARCHIVE\n"
		     "Engine benchmarks: open time, random 64 B / 4 KiB extract on one core,\n"
		     "batched extract on THREADS threads (0 = all cores), sequential cursor\n"
		     "reads of every file, count/search of the given words. key=value output.\n"
		     "-a: hint before the first sequential pass that every file is read\n"
		     "    (td_archive_will_read, as tadoc unpack does).\n"
		     "-c: one-thread figures in process CPU time (batches stay wall time).\n"
		     "-p: sequential passes (default 1); the later ones are reported warm.\n"
		     "-r: the random reads first, on the freshly opened archive.\n"
		     "-m: the archive's cache budget in MiB (decoded tables and rule cache).\n"
		     "-D: ROUNDS first passes over fresh opens with each decoder of coded\n"
		     "    sequences (portable, vector), alternating; the medians.\n");
}

int main(int argc, char **argv)
{
	double secs = 2.0;
	unsigned nthreads = 0, passes = 1;
	long long budget_mib = -1;
	unsigned drounds = 0;
	int random_first = 0;
	size_t batch = 100000;
	char *wordlist = NULL;
	int c;
	while ((c = getopt(argc, argv, "acD:d:m:p:rt:n:w:h")) != -1) {
		switch (c) {
		case 'a': tb_hint = 1; break;
		case 'c': tb_clock = CLOCK_PROCESS_CPUTIME_ID; break;
		case 'D': drounds = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'd': secs = strtod(optarg, NULL); break;
		case 'm': budget_mib = strtoll(optarg, NULL, 10); break;
		case 'r': random_first = 1; break;
		case 'p': passes = (unsigned)strtoul(optarg, NULL, 10); break;
		case 't': nthreads = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'n': batch = (size_t)strtoull(optarg, NULL, 10); break;
		case 'w': wordlist = optarg; break;
		case 'h': tb_usage(stdout); return 0;
		default: tb_usage(stderr); return 2;
		}
	}
	if (optind != argc - 1 || secs <= 0 || passes < 1) {
		tb_usage(stderr);
		return 2;
	}
	const char *path = argv[optind];
	char *words[TB_MAX_WORDS];
	size_t nw = 0;
	if (wordlist)
		for (char *s = strtok(wordlist, ","); s && nw < TB_MAX_WORDS; s = strtok(NULL, ","))
			words[nw++] = s;

	tb_open_times(path);
	td_archive *a = tb_open(path, budget_mib);
	struct tb_files f;
	tb_collect(a, &f);
	printf("files=%zu\nbytes=%" PRIu64 "\n", f.n, f.total);
	if (f.n > 0) {
		if (!random_first)
			tb_sequential(a, &f, passes);
		td_cursor *cur = td_cursor_new(a);
		if (!cur)
			tb_die("cursor", TD_ENOMEM);
		tb_random(a, NULL, &f, 64, secs, "rand64");
		tb_random(a, cur, &f, 64, secs, "rand64c");
		tb_random(a, NULL, &f, 4096, secs, "rand4k");
		tb_random(a, cur, &f, 4096, secs, "rand4kc");
		td_cursor_free(cur);
		if (random_first)
			tb_sequential(a, &f, passes);
		if (batch > 0)
			tb_batch(a, &f, batch, nthreads);
	}
	tb_queries(a, &f, words, nw, nthreads);
	if (drounds && f.n > 0)
		tb_decoders(path, budget_mib, &f, drounds);
	free(f.e);
	free(f.cum);
	td_archive_close(a);
	return 0;
}
