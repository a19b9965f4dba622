/* first_answer: the engine's CPU time to open an archive, answer the root's
 * listing (children, then stat and name of each), and read the first 4 KiB
 * of one file (lookup + extract), each from a fresh open; the mean of N
 * opens, per phase, and the first read's wall time (the engine may spread
 * a shard's first use over two threads) (contrib/bench/results/mount-ready.md).
 *
 * Usage: first_answer ARCHIVE N [FILE]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "td_archive.h"
#include "td_err.h"
#include "td_extract.h"

static double clock_ms(clockid_t id)
{
	struct timespec t;
	clock_gettime(id, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static double cpu_ms(void)
{
	return clock_ms(CLOCK_PROCESS_CPUTIME_ID);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: first_answer ARCHIVE N [FILE]\n");
		return 2;
	}
	const int n = atoi(argv[2]);
	const char *file = argc > 3 ? argv[3] : NULL;
	double open_ms = 0, ls_ms = 0, cat_ms = 0, cat_wall = 0;
	for (int i = 0; i < n; i++) {
		double t0 = cpu_ms();
		td_archive *a;
		if (td_archive_open(argv[1], 0, &a)) {
			fprintf(stderr, "first_answer: %s: %s\n", argv[1], td_errdetail());
			return 1;
		}
		double t1 = cpu_ms();
		td_entry first, e;
		uint32_t count;
		if (td_archive_children(a, TD_ROOT, &first, &count)) {
			fprintf(stderr, "first_answer: %s: /: %s\n", argv[1], td_errdetail());
			return 1;
		}
		for (uint32_t j = 0; j < count; j++) {
			td_stat st;
			size_t len;
			if (td_archive_stat(a, first + j, &st) || !td_archive_name(a, first + j, &len)) {
				fprintf(stderr, "first_answer: %s: %s\n", argv[1], td_errdetail());
				return 1;
			}
		}
		double t2 = cpu_ms(), w2 = clock_ms(CLOCK_MONOTONIC);
		if (file) {
			static char buf[4096];
			size_t got;
			if (td_archive_lookup_path(a, file, &e) || td_extract(a, e, 0, buf, sizeof buf, &got)) {
				fprintf(stderr, "first_answer: %s: %s: %s\n", argv[1], file, td_errdetail());
				return 1;
			}
		}
		double t3 = cpu_ms(), w3 = clock_ms(CLOCK_MONOTONIC);
		td_archive_close(a);
		cat_wall += w3 - w2;
		open_ms += t1 - t0;
		ls_ms += t2 - t1;
		cat_ms += t3 - t2;
	}
	printf("open_ms=%.3f\nroot_ls_ms=%.3f\nfirst_read_ms=%.3f\nfirst_read_wall_ms=%.3f\n", open_ms / n, ls_ms / n,
	       cat_ms / n, cat_wall / n);
	return 0;
}
