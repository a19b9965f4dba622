/* scode_bench: the coded-sequence decoder alone on a real archive (format
 * 4/5): the root sequence decoded in 4096-symbol spans, as the analytics'
 * in-order root readers do (td_scode_decode_span), and the rule sequence
 * whole (td_scode_decode_all), with the vector decoder on and off
 * (td_scode_simd). Prints key=value lines: process CPU ns a symbol, the
 * median of ROUNDS.
 *
 * Usage: scode_bench [-r ROUNDS] [-v] ARCHIVE   (-v: the vector decoder only)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "td_archive.h"
#include "td_archive_int.h"
#include "td_err.h"
#include "td_scode.h"
#include "td_shard.h"

static double cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_d(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return a < b ? -1 : a > b;
}

/* c decoded in spans of `span` symbols, hashed (FNV-1a of the symbols)
 * into *h: the answer two builds must agree on. */
static void hash_all(const td_scode *c, uint32_t *buf, uint64_t span, uint64_t *h)
{
	unsigned sh = c->tile_shift;
	uint64_t per = span >> sh ? span >> sh : 1;
	for (uint64_t t = 0; t < c->ntiles; t += per) {
		td_scode_decode_span(c, t, t + per, buf);
		uint64_t m = c->n - (t << sh) < (per << sh) ? c->n - (t << sh) : per << sh;
		for (uint64_t i = 0; i < m; i++)
			*h = (*h ^ buf[i]) * UINT64_C(0x100000001b3);
	}
}

/* One pass over c in spans of `span` symbols; ns a symbol. */
static double pass(const td_scode *c, uint32_t *buf, uint64_t span, uint64_t *sum)
{
	unsigned sh = c->tile_shift;
	uint64_t per = span >> sh ? span >> sh : 1;
	double t0 = cpu_ns();
	for (uint64_t t = 0; t < c->ntiles; t += per) {
		td_scode_decode_span(c, t, t + per, buf);
		*sum += buf[0];
	}
	return (cpu_ns() - t0) / (double)c->n;
}

int main(int argc, char **argv)
{
	int rounds = 9, opt, lo = 0;
	while ((opt = getopt(argc, argv, "r:v")) != -1) {
		if (opt == 'r')
			rounds = atoi(optarg);
		else if (opt == 'v')
			lo = 1;
		else
			return fprintf(stderr, "usage: scode_bench [-r ROUNDS] ARCHIVE\n"), 2;
	}
	if (optind + 1 != argc || rounds < 1 || rounds > 99)
		return fprintf(stderr, "usage: scode_bench [-r ROUNDS] ARCHIVE\n"), 2;
	td_archive *a = NULL;
	td_err e = td_archive_open(argv[optind], 0, &a);
	if (e != TD_OK)
		return fprintf(stderr, "scode_bench: %s: %s\n", argv[optind], td_strerror(e)), 1;
	/* a version 5 container: its shards' sequences, one after the other */
	uint32_t nsh = 1;
	if (td_sharded(a))
		td_shard_table(a, &nsh);
	const char *name[2] = { "root", "rule" };
	uint64_t sum = 0;
	for (int k = 0; k < 2; k++) {
		double v[2][99] = { { 0 } };
		uint64_t nsym = 0, ncoded = 0;
		unsigned tile = 0;
		uint64_t hash[2] = { UINT64_C(0xcbf29ce484222325), UINT64_C(0xcbf29ce484222325) };
		for (uint32_t i = 0; i < nsh; i++) {
			td_archive *s = a;
			if (td_sharded(a) && (e = td_shard_sub(a, i, &s)) != TD_OK)
				return fprintf(stderr, "scode_bench: shard %u: %s\n", i, td_strerror(e)), 1;
			const td_syms *sy = k == 0 ? &s->root_syms : &s->rule_syms;
			if (!sy->coded)
				continue;
			const td_scode *c = &sy->c;
			td_scode_prepare(c);
			uint64_t span = k == 0 ? 4096 : c->ntiles << c->tile_shift;
			uint32_t *buf = malloc(((c->ntiles << c->tile_shift) + 64) * sizeof *buf);
			if (!buf)
				return fprintf(stderr, "scode_bench: out of memory\n"), 1;
			ncoded++;
			nsym += c->n;
			tile = 1u << c->tile_shift;
			for (int r = 0; r < rounds; r++)
				for (int on = 1; on >= lo; on--) {
					td_scode_simd(on);
					v[on][r] += pass(c, buf, span, &sum) * (double)c->n;
				}
			for (int on = 1; on >= lo; on--) {
				td_scode_simd(on);
				hash_all(c, buf, span, &hash[on]);
			}
			td_scode_simd(1);
			free(buf);
		}
		printf("%s_coded_arrays=%llu\n%s_symbols=%llu\n%s_tile=%u\n", name[k], (unsigned long long)ncoded, name[k],
		       (unsigned long long)nsym, name[k], tile);
		if (!nsym)
			continue;
		for (int on = 1; on >= lo; on--) {
			qsort(v[on], (size_t)rounds, sizeof v[on][0], cmp_d);
			printf("%s_%s_ns_per_sym=%.2f\n%s_%s_hash=%016llx\n", name[k], on ? "vector" : "scalar",
			       v[on][rounds / 2] / (double)nsym, name[k], on ? "vector" : "scalar", (unsigned long long)hash[on]);
		}
	}
	if (sum == 1)
		fprintf(stderr, "(unlikely)\n"); /* keeps the passes' work */
	td_archive_close(a);
	return 0;
}
