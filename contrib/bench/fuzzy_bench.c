/* fuzzy_bench: time td_fuzzy's tree build and its queries (one thread and all cores) on an archive. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "td_analytics.h"

/* Wall seconds, or this thread's CPU seconds (a shared machine's other
 * load does not count). */
static double clock_s(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double now(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

static double cpu(void)
{
	return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

typedef struct vocab {
	char **w;
	size_t n, cap;
} vocab;

static int collect(void *ctx, const char *word, size_t len, uint64_t count)
{
	(void)count;
	vocab *v = ctx;
	if (len > 64)
		return 0;
	if (v->n == v->cap) {
		v->cap = v->cap ? 2 * v->cap : 1024;
		v->w = realloc(v->w, v->cap * sizeof *v->w);
		if (!v->w)
			return 1;
	}
	v->w[v->n++] = strndup(word, len);
	return 0;
}

static int count_match(void *ctx, unsigned dist, const char *word, size_t len, uint64_t count)
{
	(void)dist;
	(void)word;
	(void)len;
	(void)count;
	++*(size_t *)ctx;
	return 0;
}

static int dcmp(const void *p, const void *q)
{
	double a = *(const double *)p, b = *(const double *)q;
	return (a > b) - (a < b);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: fuzzy_bench ARCHIVE [QUERIES [1]]\n"
				"Times the fuzzy tree's build (CPU time), then QUERIES (default 1000) vocabulary words\n"
				"with one letter changed, at K = 1, 2, 3, on one thread (its CPU time) and on\n"
				"all cores (wall time; threads only for vocabularies of 1M words or more);\n"
				"a third argument 1: one thread only.\n");
		return 2;
	}
	size_t nq = argc > 2 ? strtoul(argv[2], NULL, 10) : 1000;
	unsigned modes = argc > 3 && !strcmp(argv[3], "1") ? 1 : 2;
	td_archive *a;
	double t0 = now();
	int err = td_archive_open(argv[1], 0, &a);
	if (err) {
		fprintf(stderr, "fuzzy_bench: %s: %s\n", argv[1], td_strerror(err));
		return 1;
	}
	double t_open = now() - t0;
	uint64_t nodes = 0, bytes = 0;
	t0 = cpu();
	err = td_fuzzy_tree(a, &nodes, &bytes);
	double t_build = cpu() - t0;
	if (err) {
		fprintf(stderr, "fuzzy_bench: tree: %s\n", td_strerror(err));
		return 1;
	}
	vocab v = { 0 };
	td_term_vector(a, TD_ROOT, collect, &v);
	printf("archive %s: open %.1f ms; vocabulary %zu words (up to 64 bytes); tree %llu nodes, %.1f MiB, "
	       "built in %.1f ms (CPU)\n",
	       argv[1], t_open * 1e3, v.n, (unsigned long long)nodes, (double)bytes / 1048576.0, t_build * 1e3);
	if (!v.n)
		return 0;
	srand(7);
	char **q = malloc(nq * sizeof *q);
	for (size_t i = 0; i < nq; i++) {
		const char *w = v.w[(size_t)rand() % v.n];
		q[i] = strdup(w);
		size_t l = strlen(q[i]);
		/* one ASCII letter changed where there is one (a misspelling) */
		size_t p = (size_t)rand() % l;
		if ((unsigned char)q[i][p] < 0x80 && q[i][p] >= 'a' && q[i][p] <= 'z')
			q[i][p] = (char)('a' + (q[i][p] - 'a' + 1 + rand() % 25) % 26);
	}
	double *lat = malloc(nq * sizeof *lat);
	for (unsigned k = 1; k <= 3; k++) {
		for (unsigned th = 1; th <= modes; th++) {
			unsigned nt = th == 1 ? 1 : 0;
			size_t found = 0;
			/* one thread: its CPU time; all cores: wall time */
			double (*clk)(void) = nt == 1 ? cpu : now;
			double all0 = clk();
			for (size_t i = 0; i < nq; i++) {
				double s = clk();
				err = td_fuzzy(a, q[i], strlen(q[i]), k, TD_ROOT, nt, count_match, &found);
				lat[i] = clk() - s;
				if (err) {
					fprintf(stderr, "fuzzy_bench: %s: %s\n", q[i], td_strerror(err));
					return 1;
				}
			}
			double all = clk() - all0;
			qsort(lat, nq, sizeof *lat, dcmp);
			printf("K=%u %-15s %zu queries: mean %.3f ms, median %.3f ms, p99 %.3f ms; %.1f matches a query\n", k,
			       nt == 1 ? "1 thread, CPU" : "all cores, wall", nq, all / (double)nq * 1e3, lat[nq / 2] * 1e3,
			       lat[nq * 99 / 100] * 1e3, (double)found / (double)nq);
		}
	}
	td_archive_close(a);
	return 0;
}
