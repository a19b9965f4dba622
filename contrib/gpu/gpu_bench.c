/* gpu_bench: ops/s of GPU batches (transfers included) against the CPU engine on 1 thread and on all cores. */
/*
 * Usage: gpu_bench [-o TABLE.md] [-t SECONDS] [-x | -q | -s | -c | -l | -m] ARCHIVE...
 * (-x: the extract rows, the link and the extract tuning only; -q: only
 * the 4 KiB extract into host_alloc buffers at batch 100k, GPU against all
 * cores, then warp-walked against lane-walked reads (td_gpu_opts.xcoop),
 * interleaved twice: for comparing builds of the kernel side by side;
 * -s: the same for 64 B reads, lane- and warp-walked, seeking by root
 * offsets or by samples (td_gpu_opts.seek_index);
 * -c: the count and search rows only (all batch sizes): for comparing
 * builds or $TD_GPU_NORJT / $TD_GPU_NORRHS side by side;
 * -l: only small batches of 4 KiB and 64 KiB reads, 1 to 256 a batch, as
 * median microseconds a batch for each warp segment (td_gpu_opts.xseg) and
 * the adaptive default, against the CPU engine on one thread;
 * -m: only batches of 100k counts, searches and 64-byte reads on 1, 2, 4 ...
 * devices (a version 5 archive's shards spread over them; a version 1-4
 * archive on one), each device count's results checked equal to one
 * device's and to the CPU engine's, byte for byte; with
 * $TD_BENCH_INFLIGHT=D also the counts and searches of D callers at once,
 * each on a handle of its own)
 * For each archive: extract 64 B, extract 4 KiB, count and search (random
 * dictionary words in random files) at batch sizes 1, 100, 1k, 10k, 100k.
 * The extracts run twice: into malloc'ed buffers, and into one
 * td_gpu_host_alloc block with the buffers back to back (the GPU's direct
 * path; the CPU engine writes into the same block).
 * Each cell is the median of repeated runs lasting about -t seconds
 * (default 0.5) after one warm-up. Prints a Markdown table (also to -o),
 * then the smallest batch size at which the GPU beats all CPU cores.
 * Then the link's ceilings for the 410 MB a 100k x 4 KiB batch brings back
 * (td_gpu_link_measure: device -> pinned host, where the results land;
 * pageable; host -> device; the host copy-out) with the 4 KiB batch's GB/s
 * against them, and that batch under other lane widths, piece sizes and
 * stream counts (td_gpu_opts.xcoop, xchunk, piece_bytes, nstreams), each checked
 * equal to the CPU engine.
 * Then insert (in batch), insert (in sequence), append and mixed batches
 * (random files, and all on the largest file): the
 * offsets resolved into td_edit records (td_gpu_edit_resolve against
 * td_edit_batch_resolve_mt on 1 thread and on all cores), plus the
 * end-to-end cost with the records applied through td_edit at 100k. Last,
 * the index build (td_gpu_build_indexes against td_index_build_cpu) on the
 * archive's own grammar, with the outputs checked equal.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "td_archive.h"
#include "td_edit.h"
#include "td_edit_batch.h"
#include "td_err.h"
#include "td_extract.h"
#include "td_format.h"
#include "td_gpu.h"
#include "td_index.h"
#include "td_pack.h"
#include "td_query.h"
#include "bench_common.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint64_t rnd(void)
{
	return bench_rnd(&rng);
}

#define now bench_now

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

enum { OP_X64, OP_X4K, OP_X64P, OP_X4KP, OP_COUNT, OP_SEARCH, NOPS };
static const char *op_name[NOPS] = {"extract 64 B", "extract 4 KiB", "extract 64 B, host_alloc buffers",
				    "extract 4 KiB, host_alloc buffers", "count", "search"};
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
	td_gpu *g;                /* xbuf came from td_gpu_host_alloc(g) */
} batch;

static void make_batch(const bench *b, batch *t, size_t n, int op)
{
	memset(t, 0, sizeof *t);
	t->n = n;
	if (op == OP_X64 || op == OP_X4K || op == OP_X64P || op == OP_X4KP) {
		uint32_t len = op == OP_X64 || op == OP_X64P ? 64 : 4096;
		t->x = calloc(n, sizeof *t->x);
		if (op == OP_X64P || op == OP_X4KP) {
			t->g = b->g;
			t->xbuf = td_gpu_host_alloc(b->g, n * (size_t)len);
			if (!t->xbuf) {
				fprintf(stderr, "td_gpu_host_alloc(%zu) failed: malloc'ed buffers instead\n", n * (size_t)len);
				t->g = NULL;
				t->xbuf = malloc(n * (size_t)len);
			}
		} else
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
	if (t->g)
		td_gpu_host_free(t->g, t->xbuf);
	else
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
	case OP_X64P:
	case OP_X4KP:
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

/* ---- extract 4 KiB against the link ---- */

#define X4K_N 100000u

/* The link's ceilings for the bytes a 100k x 4 KiB batch brings back, and
 * that batch's GPU rate against them. */
static void bench_link(double x4k_gpu, double x4k_direct, FILE *md)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned nt = cores > 8 ? 8 : cores > 0 ? (unsigned)cores : 1; /* as the copy-out uses */
	uint64_t bytes = (uint64_t)X4K_N * 4096;
	td_gpu_link l;
	int r = td_gpu_link_measure(0, bytes, nt, &l);
	if (r) {
		fprintf(stderr, "link: %s (%s)\n", td_strerror(r), td_errdetail());
		return;
	}
	double got = x4k_gpu * 4096 * 1e-9;
	struct {
		const char *what;
		double gbs;
	} row[] = {
		{"device -> pinned host (where extract results land: the ceiling)", l.d2h_pinned},
		{"device -> pinned host, 2 streams", l.d2h_pinned_2},
		{"device -> pageable host", l.d2h_pageable},
		{"pinned host -> device", l.h2d_pinned},
		{"host memcpy pinned -> pageable, as many threads as the copy-out", l.host_copy},
	};
	printf("link, %llu MB copies: d2h pinned %.1f GB/s (2 streams %.1f), d2h pageable %.1f, h2d pinned %.1f, "
	       "host copy (%u threads) %.1f\n",
	       (unsigned long long)(bytes / 1000000), l.d2h_pinned, l.d2h_pinned_2, l.d2h_pageable, l.h2d_pinned,
	       l.host_threads, l.host_copy);
	printf("extract 4 KiB at %u: GPU %.1f GB/s of results = %.0f%% of the pinned d2h ceiling "
	       "(%.0f ops/s at the ceiling)\n",
	       X4K_N, got, 100 * got / l.d2h_pinned, l.d2h_pinned * 1e9 / 4096);
	if (!md)
		return;
	fprintf(md, "\n| copy of %llu MB (the results of %u x 4 KiB) | GB/s | 4 KiB ops/s at that rate |\n"
		    "|---|---:|---:|\n",
		(unsigned long long)(bytes / 1000000), X4K_N);
	for (size_t i = 0; i < sizeof row / sizeof row[0]; i++)
		fprintf(md, "| %s | %.1f | %.0f |\n", row[i].what, row[i].gbs, row[i].gbs * 1e9 / 4096);
	fprintf(md, "| extract 4 KiB, batch %u, GPU (transfers and copy-out included) | %.1f | %.0f |\n", X4K_N, got,
		x4k_gpu);
	fprintf(md, "| extract 4 KiB, batch %u, GPU, results straight into td_gpu_host_alloc buffers | %.1f | %.0f |\n",
		X4K_N, x4k_direct * 4096 * 1e-9, x4k_direct);
	fprintf(md, "\nExtract 4 KiB at %u runs at %.0f%% of the pinned device -> host ceiling with the copy-out, "
		    "%.0f%% straight into host_alloc buffers.\n",
		X4K_N, 100 * got / l.d2h_pinned, 100 * x4k_direct * 4096 * 1e-9 / l.d2h_pinned);
}

/* Extract 4 KiB at 100k under other lane widths, piece sizes and stream
 * counts (td_gpu_opts), each into malloc'ed buffers (the copy-out path) and
 * into a td_gpu_host_alloc block of that handle (the direct path), each
 * checked equal to the CPU engine first. */
static int x4k_same(const batch *t, const uint8_t *ref, const td_extract_req *rq, size_t nb)
{
	int same = memcmp(t->xbuf, ref, nb) == 0;
	for (size_t i = 0; same && i < t->n; i++)
		same = t->x[i].got == rq[i].got && t->x[i].err == rq[i].err;
	return same;
}

/* The batch under other settings. Each row is (warp-walked, lane width,
 * piece MiB, streams); lane widths only matter lane-walked. X_ALL: every
 * combination (4 KiB); X_FEW: warp-walked against lane-walked at the
 * defaults, twice interleaved (-q); X_SMALL: 64 B reads lane- and
 * warp-walked, seeking by root offsets or by samples
 * (td_gpu_opts.seek_index), twice interleaved (-s). */
struct x4k_cfg {
	int coop;
	uint32_t chunk;
	uint64_t piece;
	unsigned streams;
	int seek;                 /* td_gpu_opts.seek_index */
};

enum { X_ALL, X_FEW, X_SMALL };

static size_t x4k_configs(struct x4k_cfg *c, int set)
{
	static const uint32_t chunks[] = {256, 512, 1024, 2048};
	static const uint64_t pieces[] = {8, 16, 32};
	static const unsigned streams[] = {4, 8};
	size_t n = 0;
	if (set == X_FEW) {
		for (int r = 0; r < 4; r++)
			c[n++] = (struct x4k_cfg){r % 2 == 0, 256, 32, 4, 0};
		return n;
	}
	if (set == X_SMALL) {
		for (int r = 0; r < 2; r++)
			for (int seek = 0; seek >= -1; seek--)
				for (int coop = 0; coop < 2; coop++)
					c[n++] = (struct x4k_cfg){coop, 256, 32, 4, seek};
		return n;
	}
	for (int coop = 1; coop >= 0; coop--)
		for (size_t k = 0; k < (coop ? 1 : sizeof chunks / sizeof chunks[0]); k++)
			for (size_t p = 0; p < sizeof pieces / sizeof pieces[0]; p++)
				for (size_t s = 0; s < sizeof streams / sizeof streams[0]; s++)
					c[n++] = (struct x4k_cfg){coop, chunks[k], pieces[p], streams[s], 0};
	return n;
}

static void bench_x4k_tuning(bench *b, FILE *md, int set)
{
	struct x4k_cfg cfg[64];
	size_t ncfg = x4k_configs(cfg, set);
	const uint32_t len = set == X_SMALL ? 64 : 4096;
	const int op = set == X_SMALL ? OP_X64 : OP_X4K;
	batch t;
	make_batch(b, &t, X4K_N, op);
	size_t nb = (size_t)X4K_N * len;
	uint8_t *ref = malloc(nb), *heap = t.xbuf;
	td_extract_req *rq = malloc(X4K_N * sizeof *rq);
	memset(t.xbuf, 0xA5, nb); /* short reads leave the rest as it was */
	if (!ref || !rq || td_extract_batch(b->a, t.x, t.n, 0)) {
		fprintf(stderr, "extract tuning: no CPU reference\n");
		goto out;
	}
	memcpy(ref, t.xbuf, nb);
	memcpy(rq, t.x, X4K_N * sizeof *rq);
	if (md)
		fprintf(md, "\n| extract %u B, batch %u: walked by | seek by | bytes a lane | piece MiB | streams | copy-out ops/s | GB/s | "
			    "host_alloc ops/s | GB/s | equals CPU |\n"
			    "|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n",
			len, X4K_N);
	td_gpu *keep = b->g;
	for (size_t c = 0; c < ncfg; c++) {
		td_gpu_opts o;
		td_gpu_opts_default(&o);
		o.xcoop = cfg[c].coop ? 1 : UINT32_MAX;
		o.xchunk = cfg[c].chunk;
		o.piece_bytes = cfg[c].piece << 20;
		o.nstreams = cfg[c].streams;
		o.seek_index = cfg[c].seek;
		td_gpu *g = NULL;
		if (td_gpu_open(b->a, &o, &g) || !td_gpu_resident(g)) {
			td_gpu_close(g);
			continue;
		}
		b->g = g;
		double v[2] = {-1, -1};
		int same = 1;
		for (int direct = 0; direct < 2; direct++) {
			uint8_t *buf = direct ? td_gpu_host_alloc(g, nb) : heap;
			if (!buf)
				continue;
			for (size_t i = 0; i < t.n; i++)
				t.x[i].buf = buf + i * (size_t)len;
			t.xbuf = buf;
			memset(buf, 0xA5, nb);
			/* the direct path may leave the tails of short reads
			 * unspecified: compare what was read */
			int ok = td_gpu_extract_batch(g, t.x, t.n) == TD_OK;
			for (size_t i = 0; ok && i < t.n; i++)
				if (t.x[i].got < len)
					memcpy(buf + i * len + t.x[i].got, ref + i * len + t.x[i].got,
					       len - t.x[i].got);
			same &= ok && x4k_same(&t, ref, rq, nb);
			v[direct] = measure(b, &t, op, E_GPU);
			if (direct)
				td_gpu_host_free(g, buf);
		}
		t.xbuf = heap;
		for (size_t i = 0; i < t.n; i++)
			t.x[i].buf = heap + i * (size_t)len;
		b->g = keep;
		td_gpu_close(g);
		printf("extract %u B %u: %s, seek by %s, %5u bytes a lane, %2llu MiB pieces, %u streams: copy-out %10.0f ops/s "
		       "%5.1f GB/s, host_alloc %10.0f ops/s %5.1f GB/s %s\n",
		       len, X4K_N, cfg[c].coop ? "warp" : "lanes", cfg[c].seek < 0 ? "samples" : "offsets", cfg[c].chunk,
		       (unsigned long long)cfg[c].piece, cfg[c].streams, v[0], v[0] * len * 1e-9, v[1], v[1] * len * 1e-9, same ? "equal" : "DIFFER");
		fflush(stdout);
		if (md)
			fprintf(md, "| %s | %s | %u | %llu | %u | %.0f | %.1f | %.0f | %.1f | %s |\n",
				cfg[c].coop ? "warp" : "lanes", cfg[c].seek < 0 ? "samples" : "root offsets", cfg[c].chunk, (unsigned long long)cfg[c].piece,
				cfg[c].streams, v[0], v[0] * len * 1e-9, v[1], v[1] * len * 1e-9, same ? "yes" : "NO");
	}
out:
	free(ref);
	free(rq);
	free_batch(&t);
}

/* ---- small batches: latency against the warp segment ---- */

static int latency; /* -l */

/* Wall microseconds of one small batch of long reads into one
 * td_gpu_host_alloc block (the batcher's path) under the defaults (adaptive
 * warp segments, zero copy), without zero copy, with fixed segments (8 KiB
 * was the only one before adaptive segments), and spinning (or spinning
 * and yielding) instead of sleeping while the batch runs; the CPU engine on one thread for the
 * same batches last. Every configuration's results are checked against
 * the CPU engine. */
#define LAT_SETS 4
static void bench_latency(bench *b, FILE *md)
{
	static const uint32_t lens[] = {4096, 65536};
	static const size_t ns[] = {1, 16, 64, 256};
	static const struct {
		const char *name;
		uint32_t xseg;
		uint64_t zc;
		int blocking;
	} cfg[] = {
		{"defaults", 0, 0, 1},      {"no zero copy", 0, UINT64_MAX, 1}, {"seg 8K, no zc", 8192, UINT64_MAX, 1},
		{"seg 1K, no zc", 1024, UINT64_MAX, 1}, {"defaults, spin", 0, 0, 0}, {"defaults, yield", 0, 0, 2},
	};
	enum { NL = 2, NN = 4, NS = sizeof cfg / sizeof cfg[0] };
	double us[NL][NN][NS + 1];
	int same[NS] = {0};
	uint32_t gots[256];
	for (size_t c = 0; c < NS + 1; c++) {
		td_gpu *g = NULL;
		if (c < NS) {
			td_gpu_opts o;
			td_gpu_opts_default(&o);
			o.blocking_sync = cfg[c].blocking;
			o.xseg = cfg[c].xseg;
			o.zc_bytes = cfg[c].zc;
			if (td_gpu_open(b->a, &o, &g) || !td_gpu_resident(g)) {
				td_gpu_close(g);
				fprintf(stderr, "latency: no resident handle for %s\n", cfg[c].name);
				return;
			}
			same[c] = 1;
		}
		for (size_t li = 0; li < NL; li++)
			for (size_t ni = 0; ni < NN; ni++) {
				uint32_t len = lens[li];
				size_t n = ns[ni], nb = n * (size_t)len;
				td_extract_req *x = calloc(LAT_SETS * n, sizeof *x);
				uint8_t *buf = td_gpu_host_alloc(g, LAT_SETS * nb), *ref = malloc(LAT_SETS * nb);
				if (!x || !buf || !ref) {
					fprintf(stderr, "latency: no memory\n");
					exit(1);
				}
				for (size_t i = 0; i < LAT_SETS * n; i++) {
					size_t f = rnd() % b->nfiles;
					uint64_t sz = b->fsize[f];
					x[i].file = b->files[f];
					x[i].off = sz > len ? rnd() % (sz - len + 1) : 0;
					x[i].len = len;
					x[i].buf = buf + i * (size_t)len;
				}
				if (g) { /* check every set once against the CPU engine */
					for (int k = 0; k < LAT_SETS; k++) {
						td_extract_req *q = x + (size_t)k * n;
						td_extract_batch(b->a, q, n, 1);
						for (size_t i = 0; i < n; i++)
							gots[i] = q[i].got;
						memcpy(ref + (size_t)k * nb, buf + (size_t)k * nb, nb);
						memset(buf + (size_t)k * nb, 0xA5, nb);
						if (td_gpu_extract_batch(g, q, n))
							same[c] = 0;
						for (size_t i = 0; i < n; i++)
							if (q[i].err || q[i].got != gots[i] ||
							    memcmp(q[i].buf, ref + (size_t)k * nb + i * len, q[i].got))
								same[c] = 0;
					}
				}
				double t[256];
				int k = 0;
				double start = now();
				while (k < 256 && (k < 20 || now() - start < 0.15)) {
					td_extract_req *q = x + (size_t)(k % LAT_SETS) * n;
					double s0 = now();
					if (g)
						td_gpu_extract_batch(g, q, n);
					else
						td_extract_batch(b->a, q, n, 1);
					t[k++] = now() - s0;
				}
				qsort(t, (size_t)k, sizeof t[0], cmp_double);
				us[li][ni][c] = t[k / 2] * 1e6;
				td_gpu_host_free(g, buf);
				free(ref);
				free(x);
			}
		td_gpu_close(g);
	}
	printf("\nsmall batches: median microseconds a batch (into host_alloc buffers; blocking sync unless 'spin')\n");
	printf("%-6s %5s |", "read", "batch");
	for (size_t c = 0; c < NS; c++)
		printf(" %14s", cfg[c].name);
	printf(" | %8s\n", "CPU 1T");
	if (md) {
		fprintf(md, "\n| read | batch |");
		for (size_t c = 0; c < NS; c++)
			fprintf(md, " %s µs |", cfg[c].name);
		fprintf(md, " CPU engine, 1 thread µs |\n|---|---:|");
		for (size_t c = 0; c <= NS; c++)
			fprintf(md, "---:|");
		fprintf(md, "\n");
	}
	for (size_t li = 0; li < NL; li++)
		for (size_t ni = 0; ni < NN; ni++) {
			printf("%-6u %5zu |", lens[li], ns[ni]);
			if (md)
				fprintf(md, "| %u B | %zu |", lens[li], ns[ni]);
			for (size_t c = 0; c < NS + 1; c++) {
				printf(c < NS ? " %14.1f" : " | %8.1f", us[li][ni][c]);
				if (md)
					fprintf(md, " %.1f |", us[li][ni][c]);
			}
			printf("\n");
			if (md)
				fprintf(md, "\n");
		}
	for (size_t c = 0; c < NS; c++)
		if (!same[c]) {
			printf("%s: results DIFFER from the CPU engine\n", cfg[c].name);
			if (md)
				fprintf(md, "\n%s: results DIFFER from the CPU engine\n", cfg[c].name);
		}
	fflush(stdout);
}

/* ---- insert / append batches ---- */

enum { EOP_INS_BATCH, EOP_INS_SEQ, EOP_APPEND, EOP_MIXED, EOP_MIXED_ONE, NEOPS };
static const char *eop_name[NEOPS] = {"insert (in batch)", "insert (in sequence)", "append", "insert (mixed)",
				      "insert (mixed, one file)"};
static const int eop_mode[NEOPS] = {TD_BATCH_SNAPSHOT, TD_BATCH_SEQUENCE, TD_BATCH_SNAPSHOT, TD_BATCH_MIXED,
				    TD_BATCH_MIXED};
static const uint8_t edit_data[16] = "sixteen bytes..";

static void make_edits(const bench *b, td_edit_rec *r, size_t n, int op)
{
	size_t big = 0; /* mixed, one file: the largest */
	for (size_t f = 1; f < b->nfiles; f++)
		if (b->fsize[f] > b->fsize[big])
			big = f;
	for (size_t i = 0; i < n; i++) {
		size_t f = op == EOP_MIXED_ONE ? big : rnd() % b->nfiles;
		memset(&r[i], 0, sizeof r[i]);
		r[i].type = TD_REC_INSERT;
		r[i].node = b->files[f];
		/* mixed: half the offsets in batch, half in sequence */
		if ((op == EOP_MIXED || op == EOP_MIXED_ONE) && rnd() % 2)
			r[i].flags = TD_EDIT_SNAPSHOT;
		/* offsets within the size before the batch: valid in both meanings */
		r[i].off = op == EOP_APPEND ? TD_OFF_END : rnd() % (b->fsize[f] + 1);
		r[i].data = edit_data;
		r[i].data_len = sizeof edit_data;
		r[i].time_sec = 1700000000;
	}
}

typedef struct ebench {
	const td_edit *ed;
	td_edit_rec *r, *out;
	size_t n;
	int mode;
} ebench;

/* Median ops/s of resolving one batch: eng E_GPU, E_CPU1 or E_CPUALL. */
static double measure_resolve(const bench *b, ebench *e, int eng)
{
	double times[64];
	int k = 0;
	td_gpu_run run = {.device = 0, .strict = 1, .ran_on_gpu = 0};
	double t0 = now(), start = t0;
	for (int rep = -1; rep < 64; rep++) {
		if (rep == 0)
			start = now();
		if (rep >= 3 && now() - start >= b->budget)
			break;
		if (rep >= 1 && now() - t0 > 8 * b->budget)
			break;
		double s = now();
		int err = eng == E_GPU ? td_gpu_edit_resolve(&run, e->ed, e->r, e->n, e->mode, e->out, NULL) :
					 td_edit_batch_resolve_mt(e->ed, e->r, e->n, e->mode, e->out, NULL, eng == E_CPU1 ? 1 : 0);
		if (err) {
			fprintf(stderr, "resolve: %s (%s)\n", td_strerror(err), td_errdetail());
			return -1;
		}
		if (rep >= 0)
			times[k++] = now() - s;
	}
	qsort(times, (size_t)k, sizeof times[0], cmp_double);
	return (double)e->n / times[k / 2];
}

/* Seconds to resolve and apply one batch to a fresh edit state. */
static double apply_once(const bench *b, ebench *e, int gpu)
{
	td_edit *ed = NULL;
	if (td_edit_new(b->a, &ed))
		return -1;
	td_gpu_run run = {.device = 0, .strict = 1, .ran_on_gpu = 0};
	double s = now();
	int err = gpu ? td_gpu_edit_apply_batch(&run, ed, e->r, e->n, e->mode, NULL) :
			td_edit_apply_batch(ed, e->r, e->n, e->mode, NULL);
	double t = now() - s;
	td_edit_free(ed);
	return err ? -1 : t;
}

static void bench_edits(const bench *b, FILE *md)
{
	static const size_t sizes[] = {1, 100, 1000, 10000, 100000};
	const size_t nsizes = sizeof sizes / sizeof sizes[0];
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	td_edit *ed = NULL;
	if (td_edit_new(b->a, &ed)) {
		fprintf(stderr, "td_edit_new failed\n");
		return;
	}
	td_edit_rec *r = malloc(sizes[nsizes - 1] * sizeof *r), *out = malloc(sizes[nsizes - 1] * sizeof *out);
	if (md)
		fprintf(md, "\n| edit op (offsets resolved) | batch | GPU ops/s | CPU 1 thread ops/s | CPU %ld threads ops/s | GPU / 1T | GPU / all |\n"
			    "|---|---:|---:|---:|---:|---:|---:|\n", cores);
	for (int op = 0; op < NEOPS; op++) {
		size_t crossover = 0;
		for (size_t s = 0; s < nsizes; s++) {
			ebench e = {.ed = ed, .r = r, .out = out, .n = sizes[s],
				    .mode = eop_mode[op]};
			make_edits(b, r, e.n, op);
			double v[NENG];
			for (int g = 0; g < NENG; g++)
				v[g] = measure_resolve(b, &e, g);
			if (!crossover && v[E_GPU] > v[E_CPUALL])
				crossover = sizes[s];
			printf("%-20s %7zu  gpu %12.0f  cpu1 %12.0f  cpu%ld %12.0f  x%.1f  x%.1f\n", eop_name[op], sizes[s],
			       v[E_GPU], v[E_CPU1], cores, v[E_CPUALL], v[E_GPU] / v[E_CPU1], v[E_GPU] / v[E_CPUALL]);
			fflush(stdout);
			if (md)
				fprintf(md, "| %s | %zu | %.0f | %.0f | %.0f | %.1fx | %.1fx |\n", eop_name[op], sizes[s], v[E_GPU],
					v[E_CPU1], v[E_CPUALL], v[E_GPU] / v[E_CPU1], v[E_GPU] / v[E_CPUALL]);
		}
		if (md)
			fprintf(md, "| %s | crossover | %s%zu | | | | |\n", eop_name[op], crossover ? "" : "none, > ",
				crossover ? crossover : sizes[nsizes - 1]);
		/* end to end at the largest size: resolve + apply through td_edit
		 * (the apply is the same CPU work on both sides) */
		ebench e = {.ed = ed, .r = r, .out = out, .n = sizes[nsizes - 1],
			    .mode = eop_mode[op]};
		make_edits(b, r, e.n, op);
		double tg = apply_once(b, &e, 1), tc = apply_once(b, &e, 0);
		printf("%-20s %7zu  resolve+apply: gpu %.0f ops/s, cpu1 %.0f ops/s\n", eop_name[op], e.n,
		       (double)e.n / tg, (double)e.n / tc);
		if (md)
			fprintf(md, "| %s, resolve + apply | %zu | %.0f | %.0f | | %.1fx | |\n", eop_name[op], e.n,
				(double)e.n / tg, (double)e.n / tc, tc / tg);
	}
	free(r);
	free(out);
	td_edit_free(ed);
}

/* ---- index build ---- */

static int section_view(const td_archive *a, unsigned id, td_pack *p)
{
	uint64_t sz = 0;
	const void *s = td_archive_bytes(a, id, &sz); /* version 3 form (td_archive.h) */
	return s ? td_pack_view(p, s, sz) : TD_ECORRUPT;
}

/* The builders' input, rebuilt from an archive: the laid-out grammar is
 * what td_writer_finish hands to them (long words per file are 0 here). */
typedef struct ixin {
	td_index_in in;
	uint16_t *term;
	uint32_t *syms, *root, *topo;
	uint64_t *eroot, *elong;
	uint8_t *isfile;
} ixin;

static int ixin_load(const td_archive *a, ixin *x)
{
	memset(x, 0, sizeof *x);
	uint64_t sz = 0;
	const td_disk_meta *m = td_archive_section(a, TD_SEC_META, &sz);
	td_pack woff, ooff, rsyms, rootp, eroot, emode;
	if (!m || section_view(a, TD_SEC_WORD_OFF, &woff) || section_view(a, TD_SEC_OTHER_OFF, &ooff) ||
	    section_view(a, TD_SEC_RULE_SYMS, &rsyms) || section_view(a, TD_SEC_ROOT_SYMS, &rootp) ||
	    section_view(a, TD_SEC_E_ROOT, &eroot) || section_view(a, TD_SEC_E_MODE, &emode))
		return 1;
	td_index_in *in = &x->in;
	uint64_t W = m->nwords, S = m->nother, T = 2 * W + S, R = m->nrules, ne = m->nentries;
	x->term = malloc((T + 1) * sizeof *x->term);
	x->syms = malloc((m->nrulesyms + 1) * sizeof *x->syms);
	x->root = malloc((m->nroot + 1) * sizeof *x->root);
	x->topo = malloc((R + 1) * sizeof *x->topo);
	x->eroot = malloc((ne + 1) * sizeof *x->eroot);
	x->elong = calloc(ne + 1, sizeof *x->elong);
	x->isfile = malloc(ne + 1);
	uint64_t *tmp = malloc((m->nrulesyms > m->nroot ? m->nrulesyms : m->nroot) * 8 + 8 * (ne + 2) + 8);
	uint32_t *lvl = calloc(R + 1, sizeof *lvl);
	if (!x->term || !x->syms || !x->root || !x->topo || !x->eroot || !x->elong || !x->isfile || !tmp || !lvl)
		return 1;
	for (uint64_t w = 0; w < W; w++) {
		uint64_t l = td_pack_get(&woff, w + 1) - td_pack_get(&woff, w);
		x->term[2 * w] = (uint16_t)l;
		x->term[2 * w + 1] = (uint16_t)(l + 1);
	}
	for (uint64_t o = 0; o < S; o++)
		x->term[2 * W + o] = (uint16_t)(td_pack_get(&ooff, o + 1) - td_pack_get(&ooff, o));
	td_pack_get_range(&rsyms, 0, m->nrulesyms, tmp);
	for (uint64_t i = 0; i < m->nrulesyms; i++)
		x->syms[i] = (uint32_t)tmp[i];
	td_pack_get_range(&rootp, 0, m->nroot, tmp);
	for (uint64_t i = 0; i < m->nroot; i++)
		x->root[i] = (uint32_t)tmp[i];
	td_pack_get_range(&eroot, 0, ne + 1, x->eroot);
	for (uint64_t e = 0; e < ne; e++)
		x->isfile[e] = S_ISREG((mode_t)td_pack_get(&emode, e));
	const td_disk_group *g = td_archive_section(a, TD_SEC_RULE_GROUPS, &sz);
	/* a topological order: rule levels by repeated passes, then by level */
	uint32_t maxlv = 0;
	for (int changed = 1, pass = 0; changed && pass < 2 * (int)TD_MAXDEPTH; pass++) {
		changed = 0;
		for (uint64_t gi = 0; gi < m->ngroups; gi++) {
			uint64_t end = gi + 1 < m->ngroups ? g[gi + 1].first_rule : R;
			for (uint64_t r = g[gi].first_rule; r < end; r++) {
				uint32_t lv = 1;
				const uint32_t *rhs = x->syms + g[gi].first_sym + (r - g[gi].first_rule) * g[gi].len;
				for (uint32_t j = 0; j < g[gi].len; j++)
					if (rhs[j] >= T && lvl[rhs[j] - T] + 1 > lv)
						lv = lvl[rhs[j] - T] + 1;
				if (lv != lvl[r]) {
					lvl[r] = lv;
					changed = 1;
				}
				maxlv = lv > maxlv ? lv : maxlv;
			}
		}
	}
	uint64_t k = 0;
	for (uint32_t lv = 1; lv <= maxlv; lv++)
		for (uint64_t r = 0; r < R; r++)
			if (lvl[r] == lv)
				x->topo[k++] = (uint32_t)r;
	free(tmp);
	free(lvl);
	in->nwords = W;
	in->nterm = T;
	in->term_len = x->term;
	in->nrules = (uint32_t)R;
	in->nrulesyms = m->nrulesyms;
	in->rule_syms = x->syms;
	in->ngroups = m->ngroups;
	in->groups = g;
	in->nrulesamples = m->nrulesamples;
	in->topo = x->topo;
	in->depth = (uint32_t)m->max_depth;
	in->nroot = m->nroot;
	in->root = x->root;
	in->nentries = (uint32_t)ne;
	in->e_root = x->eroot;
	in->e_isfile = x->isfile;
	in->e_longwords = x->elong;
	in->sample_shift = (unsigned)m->sample_shift;
	return k == R ? 0 : 1;
}

static void ixin_free(ixin *x)
{
	free(x->term);
	free(x->syms);
	free(x->root);
	free(x->topo);
	free(x->eroot);
	free(x->elong);
	free(x->isfile);
}

/* Output arrays of one build, in one block. */
static uint64_t *ixout_alloc(const td_index_in *in, td_index_out *o, uint64_t *nvals)
{
	uint64_t ns = td_index_nroot_samples(in->nroot, in->sample_shift);
	*nvals = in->nrules + in->nrulesamples + ns + in->nentries + 1 + in->nwords + in->nentries;
	uint64_t *v = calloc(*nvals + 1, sizeof *v);
	if (!v)
		return NULL;
	o->rule_len = v;
	o->rule_samples = o->rule_len + in->nrules;
	o->root_samples = o->rule_samples + in->nrulesamples;
	o->e_gstart = o->root_samples + ns;
	o->word_freq = o->e_gstart + in->nentries + 1;
	o->e_nwords = o->word_freq + in->nwords;
	return v;
}

static double time_build(td_index_fn fn, void *ctx, const td_index_in *in, td_index_out *o, double budget)
{
	double times[32];
	int k = 0;
	double start = now();
	while (k < 32 && (k < 3 || now() - start < budget)) {
		double s = now();
		if (fn(ctx, in, o))
			return -1;
		times[k++] = now() - s;
	}
	qsort(times, (size_t)k, sizeof times[0], cmp_double);
	return times[k / 2];
}

static void bench_index(const td_archive *a, double budget, FILE *md)
{
	ixin x;
	if (ixin_load(a, &x)) {
		fprintf(stderr, "index build: cannot rebuild the builder input from the archive\n");
		ixin_free(&x);
		return;
	}
	td_index_out oc, og;
	uint64_t nv = 0;
	uint64_t *vc = ixout_alloc(&x.in, &oc, &nv), *vg = ixout_alloc(&x.in, &og, &nv);
	td_gpu_run run = {.device = 0, .strict = 1, .ran_on_gpu = 0};
	if (vc && vg && td_gpu_build_indexes(&run, &x.in, &og) == TD_OK) { /* warm-up */
		double tc = time_build(td_index_build_cpu, NULL, &x.in, &oc, budget);
		double tg = time_build(td_gpu_build_indexes, &run, &x.in, &og, budget);
		int same = memcmp(vc, vg, nv * sizeof *vc) == 0;
		printf("index build: %llu rule symbols, %llu root symbols: gpu %.3f ms, cpu %.3f ms: x%.1f; outputs %s\n",
		       (unsigned long long)x.in.nrulesyms, (unsigned long long)x.in.nroot, tg * 1e3, tc * 1e3, tc / tg,
		       same ? "identical" : "DIFFER");
		if (md)
			fprintf(md, "\n| index build | rule symbols | root symbols | GPU ms (transfers included) | CPU ms (1 thread) | CPU / GPU | outputs |\n"
				    "|---|---:|---:|---:|---:|---:|---|\n"
				    "| RULE_LEN, samples, E_GSTART, WORD_FREQ, E_NWORDS | %llu | %llu | %.3f | %.3f | %.1fx | %s |\n",
				(unsigned long long)x.in.nrulesyms, (unsigned long long)x.in.nroot, tg * 1e3, tc * 1e3, tc / tg,
				same ? "identical" : "DIFFER");
	} else {
		fprintf(stderr, "index build on the GPU failed: %s\n", td_errdetail());
	}
	free(vc);
	free(vg);
	ixin_free(&x);
}

/* ---- -m: one device against several ---- */

static int multi; /* -m */

#define M_N 100000u

/* A dictionary to draw query words from: the archive's, or each shard's. */
typedef struct mdict {
	td_pack off;
	const char *words;
	uint64_t n;
} mdict;

static int mdict_of(const td_archive *a, mdict *d)
{
	uint64_t sz = 0;
	const void *p = td_archive_bytes(a, TD_SEC_WORD_OFF, &sz);
	if (!p || td_pack_view(&d->off, p, sz) || d->off.n < 2)
		return -1;
	d->words = td_archive_bytes(a, TD_SEC_WORDS, &sz);
	d->n = d->off.n - 1;
	return 0;
}

/* Results of one device count, kept to compare the next ones with. */
typedef struct mref {
	uint64_t *count;
	int *cerr;
	td_hits *hits;
	int *serr;
	uint8_t *xbytes;
	uint32_t *xgot;
} mref;

static void mref_take(mref *r, const batch *t, size_t xbytes)
{
	r->count = malloc(t->n * sizeof *r->count);
	r->cerr = malloc(t->n * sizeof *r->cerr);
	r->serr = malloc(t->n * sizeof *r->serr);
	r->hits = calloc(t->n, sizeof *r->hits);
	r->xgot = malloc(t->n * sizeof *r->xgot);
	r->xbytes = malloc(xbytes);
	for (size_t i = 0; i < t->n; i++) {
		r->count[i] = t->c[i].count;
		r->cerr[i] = t->c[i].err;
		r->serr[i] = t->s[i].err;
		r->hits[i].n = t->s[i].hits.n;
		r->hits[i].v = malloc((t->s[i].hits.n + 1) * sizeof(td_hit));
		memcpy(r->hits[i].v, t->s[i].hits.v, t->s[i].hits.n * sizeof(td_hit));
		r->xgot[i] = t->x[i].err ? UINT32_MAX : t->x[i].got;
	}
	memcpy(r->xbytes, t->xbuf, xbytes);
}

/* How many results differ from r. */
static size_t mref_diff(const mref *r, const batch *t, size_t xbytes)
{
	size_t bad = 0;
	for (size_t i = 0; i < t->n; i++) {
		bad += r->cerr[i] != t->c[i].err || r->count[i] != t->c[i].count;
		bad += r->serr[i] != t->s[i].err || r->hits[i].n != t->s[i].hits.n ||
		       memcmp(r->hits[i].v, t->s[i].hits.v, r->hits[i].n * sizeof(td_hit)) != 0;
		bad += r->xgot[i] != (t->x[i].err ? UINT32_MAX : t->x[i].got);
	}
	bad += memcmp(r->xbytes, t->xbuf, xbytes) != 0;
	return bad;
}

static void mref_free(mref *r)
{
	for (size_t i = 0; r->hits && i < M_N; i++)
		free(r->hits[i].v);
	free(r->count);
	free(r->cerr);
	free(r->serr);
	free(r->hits);
	free(r->xbytes);
	free(r->xgot);
}

/* $TD_BENCH_INFLIGHT=D: D callers at once, each on a handle of its own
 * (opened like the first one: the archive resident D times) with copies of
 * the count and search batches, for about b->budget seconds a kind: the
 * throughput of D batches in flight, ops/s of every caller together. */
typedef struct mflight {
	const bench *b;
	td_gpu *g;
	batch t;
	int op;
	double until;
	size_t batches;
	int err;
} mflight;

static void *mflight_run(void *p)
{
	mflight *f = p;
	bench bb = *f->b;
	bb.g = f->g;
	while (now() < f->until) {
		if (run_once(&bb, &f->t, f->op, E_GPU)) {
			f->err = 1;
			break;
		}
		f->batches++;
	}
	return NULL;
}

/* ops/s of kind op (OP_COUNT, OP_SEARCH) with nf callers on g[0..nf) at
 * once, each on its own copy of t; -1 on an error. *cores_busy (NULL:
 * not asked): CPU seconds of the process a second meanwhile. */
static double tv_sec(struct timeval v)
{
	return (double)v.tv_sec + 1e-6 * (double)v.tv_usec;
}

static double measure_inflight(const bench *b, td_gpu *const *g, unsigned nf, const batch *t, int op,
			       double *cores_busy)
{
	mflight f[16];
	pthread_t th[16];
	nf = nf > 16 ? 16 : nf;
	for (unsigned i = 0; i < nf; i++) {
		f[i] = (mflight){.b = b, .g = g[i], .op = op};
		f[i].t.n = t->n;
		if (op == OP_COUNT) {
			f[i].t.c = malloc(t->n * sizeof *t->c);
			memcpy(f[i].t.c, t->c, t->n * sizeof *t->c);
		} else {
			f[i].t.s = calloc(t->n, sizeof *t->s);
			for (size_t k = 0; k < t->n; k++) {
				f[i].t.s[k] = t->s[k];
				f[i].t.s[k].hits = (td_hits){NULL, 0, 0};
			}
		}
		/* one warm-up batch each, one at a time */
		bench bb = *b;
		bb.g = g[i];
		if (run_once(&bb, &f[i].t, op, E_GPU))
			f[i].err = 1;
	}
	struct rusage ru0, ru1;
	getrusage(RUSAGE_SELF, &ru0);
	double t0 = now();
	for (unsigned i = 0; i < nf; i++) {
		f[i].until = t0 + b->budget;
		pthread_create(&th[i], NULL, mflight_run, &f[i]);
	}
	size_t nb = 0;
	int err = 0;
	for (unsigned i = 0; i < nf; i++) {
		pthread_join(th[i], NULL);
		nb += f[i].batches;
		err |= f[i].err;
	}
	double el = now() - t0;
	getrusage(RUSAGE_SELF, &ru1);
	if (cores_busy)
		*cores_busy = (tv_sec(ru1.ru_utime) - tv_sec(ru0.ru_utime) + tv_sec(ru1.ru_stime) - tv_sec(ru0.ru_stime)) / el;
	for (unsigned i = 0; i < nf; i++)
		free_batch(&f[i].t);
	return err ? -1 : (double)nb * (double)t->n / el;
}

static void bench_multi(bench *b, const char *base, FILE *md)
{
	const td_archive *a = b->a;
	uint32_t nsh = td_archive_nshards(a);
	mdict *d = calloc(nsh ? nsh : 1, sizeof *d);
	for (uint32_t i = 0; i < (nsh ? nsh : 1); i++) {
		const td_archive *s = a;
		if (nsh && td_archive_shard(a, i, &s))
			s = NULL;
		if (!s || mdict_of(s, &d[i])) {
			fprintf(stderr, "%s: shard %u has no dictionary\n", base, i);
			free(d);
			return;
		}
	}
	/* one batch of each kind: words from the dictionary of the shard
	 * holding the scope's first piece */
	batch t = {.n = M_N};
	t.c = calloc(M_N, sizeof *t.c);
	t.s = calloc(M_N, sizeof *t.s);
	t.x = calloc(M_N, sizeof *t.x);
	t.xbuf = malloc((size_t)M_N * 64);
	for (size_t i = 0; i < M_N; i++) {
		size_t f = rnd() % b->nfiles;
		uint32_t sh = 0;
		const td_disk_piece *pc;
		uint64_t np = 0;
		if (nsh && td_archive_pieces(a, b->files[f], &pc, &np) == TD_OK && np)
			sh = pc[0].shard;
		const mdict *dd = &d[sh];
		uint64_t w = rnd() % dd->n;
		uint64_t o0 = td_pack_get(&dd->off, w), o1 = td_pack_get(&dd->off, w + 1);
		t.c[i] = (td_count_req){dd->words + o0, (size_t)(o1 - o0), b->files[f], 0, 0};
		t.s[i] = (td_search_req){dd->words + o0, (size_t)(o1 - o0), b->files[f], {NULL, 0, 0}, 0};
		f = rnd() % b->nfiles;
		uint64_t sz = b->fsize[f];
		t.x[i] = (td_extract_req){.file = b->files[f], .off = sz > 64 ? rnd() % (sz - 64 + 1) : 0, .len = 64,
					  .buf = t.xbuf + i * 64};
	}
	const size_t xbytes = (size_t)M_N * 64;
	static const int ops[3] = {OP_COUNT, OP_SEARCH, OP_X64};
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	/* the CPU engine first: the reference */
	double cpu[3];
	for (int k = 0; k < 3; k++)
		cpu[k] = measure(b, &t, ops[k], E_CPUALL);
	mref ref;
	mref_take(&ref, &t, xbytes);
	printf("%s: CPU %ld threads: count %.0f, search %.0f, extract 64 B %.0f ops/s\n", base, cores, cpu[0], cpu[1],
	       cpu[2]);
	if (md)
		fprintf(md, "| %s | %u | CPU, %ld threads | | %.0f | %.0f | %.0f | | | | reference |\n", base,
			nsh ? nsh : 1, cores, cpu[0], cpu[1], cpu[2]);
	int ndev = td_gpu_device_count();
	/* $TD_BENCH_QPARTS: the td_gpu_opts.qpart values to run, e.g.
	 * "never,2048" (never: long requests walked whole, one warp each) */
	uint32_t qparts[8] = {0};
	unsigned nq = 1;
	const char *qe = getenv("TD_BENCH_QPARTS");
	if (qe && *qe) {
		nq = 0;
		for (const char *q = qe; *q && nq < 8;) {
			qparts[nq++] = strncmp(q, "never", 5) == 0 ? UINT32_MAX : (uint32_t)strtoul(q, NULL, 10);
			q = strchr(q, ',');
			if (!q)
				break;
			q++;
		}
	}
	for (unsigned qi = 0; qi < nq; qi++) {
		double one[3] = {0, 0, 0}, oneflight[2] = {1, 1};
		char plabel[48];
		if (qparts[qi] == UINT32_MAX)
			snprintf(plabel, sizeof plabel, ", whole requests");
		else
			snprintf(plabel, sizeof plabel, ", parts of %u", qparts[qi] ? qparts[qi] : 2048u);
		for (int nd = 1; nd <= ndev; nd *= 2) {
			td_gpu_opts o;
			td_gpu_opts_default(&o);
			if (qparts[qi])
				o.qpart = qparts[qi];
			/* $TD_BENCH_SYNC: how the host threads wait (spin, the
			 * default; yield; block), td_gpu_opts.blocking_sync */
			const char *sy = getenv("TD_BENCH_SYNC");
			if (sy && *sy)
				o.blocking_sync = strcmp(sy, "yield") == 0 ? 2 : strcmp(sy, "block") == 0 ? 1 : 0;
			o.devices = nd >= 64 ? TD_GPU_DEVICES_ALL : (UINT64_C(1) << nd) - 1;
			td_gpu *g = NULL;
			int r = td_gpu_open(a, &o, &g);
			if (r) {
				fprintf(stderr, "%s: td_gpu_open on %d devices: %s (%s)\n", base, nd, td_strerror(r), td_errdetail());
				break;
			}
			uint32_t res = 0, units = 0;
			unsigned used = 0;
			td_gpu_residency(g, &res, &units, &used);
			b->g = g;
			double v[3];
			for (int k = 0; k < 3; k++)
				v[k] = measure(b, &t, ops[k], E_GPU);
			if (nd == 1)
				memcpy(one, v, sizeof one);
			size_t bad = mref_diff(&ref, &t, xbytes);
			printf("%s: %d device(s)%s (%u used, %u of %u units resident, %.2f s open): count %.0f, search %.0f, "
			       "extract 64 B %.0f ops/s (x%.2f, x%.2f, x%.2f of one device); %s\n",
			       base, nd, plabel, used, res, units, td_gpu_open_seconds(g), v[0], v[1], v[2], v[0] / one[0],
			       v[1] / one[1], v[2] / one[2], bad ? "DIFFERENT from the CPU engine" : "equal to the CPU engine");
			if (md)
				fprintf(md, "| %s | %u | %s%s%s | %u of %u | %.0f | %.0f | %.0f | %.2fx | %.2fx | %.2fx | %s |\n",
					base, units, nd == 1 ? "1 x " : "", td_gpu_device_name(g), plabel, res, units, v[0], v[1], v[2], v[0] / one[0],
					v[1] / one[1], v[2] / one[2], bad ? "**differ**" : "equal");
			fflush(stdout);
			const char *fe = getenv("TD_BENCH_INFLIGHT");
			unsigned nf = fe ? (unsigned)strtoul(fe, NULL, 10) : 0;
			if (nf >= 1) {
				td_gpu *gs[16] = {g};
				unsigned ng = 1;
				nf = nf > 16 ? 16 : nf;
				while (ng < nf && td_gpu_open(a, &o, &gs[ng]) == TD_OK)
					ng++;
				double bc = 0, bs = 0;
				double fc = measure_inflight(b, gs, ng, &t, OP_COUNT, &bc);
				double fs = measure_inflight(b, gs, ng, &t, OP_SEARCH, &bs);
				if (nd == 1) {
					oneflight[0] = fc;
					oneflight[1] = fs;
				}
				printf("%s: %d device(s), %u batches in flight: count %.0f, search %.0f ops/s (x%.2f, x%.2f of "
				       "one device with as many in flight; %.1f, %.1f cores busy)\n",
				       base, nd, ng, fc, fs, fc / oneflight[0], fs / oneflight[1], bc, bs);
				fflush(stdout);
				for (unsigned i = 1; i < ng; i++)
					td_gpu_close(gs[i]);
			}
			b->g = NULL;
			td_gpu_close(g);
			if (!nsh)
				break; /* one unit: one device */
		}
	}
	mref_free(&ref);
	free_batch(&t);
	free(d);
}

static int extract_only; /* -x */
static int quick;        /* -q */
static int small;        /* -s */
static int counts_only;  /* -c: the count and search rows only */

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
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	if (multi) {
		if (b.nfiles)
			bench_multi(&b, base, md);
		free(b.files);
		free(b.fsize);
		td_archive_close(a);
		return 0;
	}
	uint64_t sz = 0;
	const void *p = td_archive_bytes(a, TD_SEC_WORD_OFF, &sz); /* built from the words in version 4 */
	if (!p || td_pack_view(&b.word_off, p, sz) || b.nfiles == 0 || b.word_off.n < 2) {
		fprintf(stderr, "%s: no files or no words to benchmark\n", path);
		return 1;
	}
	b.words = td_archive_bytes(a, TD_SEC_WORDS, &sz);
	b.nwords = b.word_off.n - 1;
	if ((r = td_gpu_open(a, NULL, &b.g))) {
		fprintf(stderr, "%s: td_gpu_open: %s (%s)\n", path, td_strerror(r), td_errdetail());
		return 1;
	}
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	printf("## %s: %s, %s, upload + signatures %.3f s; CPU: %ld cores\n\n", base, td_gpu_device_name(b.g),
	       td_gpu_resident(b.g) ? "resident" : "CPU fallback", td_gpu_open_seconds(b.g), cores);
	if (md && latency)
		fprintf(md, "\n### %s (%s)\n", base, td_gpu_device_name(b.g));
	else if (md)
		fprintf(md, "\n### %s (%s; upload + rule signatures %.3f s; CPU %ld cores)\n\n"
			    "| op | batch | GPU ops/s | CPU 1 thread ops/s | CPU %ld threads ops/s | GPU / 1T | GPU / all |\n"
			    "|---|---:|---:|---:|---:|---:|---:|\n",
			base, td_gpu_device_name(b.g), td_gpu_open_seconds(b.g), cores, cores);
	if (latency) {
		if (td_gpu_resident(b.g))
			bench_latency(&b, md);
		goto done;
	}
	static const size_t sizes[] = {1, 100, 1000, 10000, 100000};
	const size_t nsizes = sizeof sizes / sizeof sizes[0];
	double x4k_gpu = 0, x4k_direct = 0;
	const int op0 = quick ? OP_X4KP : small ? OP_X64P : counts_only ? OP_COUNT : 0;
	for (int op = op0; op < (quick || small ? op0 + 1 : extract_only ? OP_COUNT : NOPS); op++) {
		size_t crossover = 0;
		for (size_t s = quick || small ? nsizes - 1 : 0; s < nsizes; s++) {
			batch t;
			make_batch(&b, &t, sizes[s], op);
			double v[NENG];
			for (int e = 0; e < NENG; e++)
				v[e] = measure(&b, &t, op, e);
			free_batch(&t);
			if (op == OP_X4K && sizes[s] == X4K_N)
				x4k_gpu = v[E_GPU];
			if (op == OP_X4KP && sizes[s] == X4K_N)
				x4k_direct = v[E_GPU];
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
	if (quick || small || counts_only) {
		if ((quick || small) && td_gpu_resident(b.g))
			bench_x4k_tuning(&b, md, quick ? X_FEW : X_SMALL);
		goto done;
	}
	if (td_gpu_resident(b.g) && x4k_gpu > 0) {
		bench_link(x4k_gpu, x4k_direct, md);
		bench_x4k_tuning(&b, md, X_ALL);
	}
	if (!extract_only) {
		bench_edits(&b, md);
		bench_index(a, budget, md);
	}
done:
	td_gpu_close(b.g);
	free(b.files);
	free(b.fsize);
	td_archive_close(a);
	return 0;
}

int main(int argc, char **argv)
{
	static const char usage[] = "usage: gpu_bench [-o TABLE.md] [-t SECONDS] [-x | -q | -s | -c | -l | -m] ARCHIVE...";
	const char *out = NULL;
	double budget = 0.5;
	int opt;
	while ((opt = getopt(argc, argv, "o:t:xqsclmh")) != -1) {
		if (opt == 'x' || opt == 'q' || opt == 's' || opt == 'c' || opt == 'l' || opt == 'm') {
			*(opt == 'x'   ? &extract_only
			  : opt == 'q' ? &quick
			  : opt == 's' ? &small
			  : opt == 'c' ? &counts_only
			  : opt == 'l' ? &latency
				       : &multi) = 1;
			continue;
		}
		if (opt == 'o')
			out = optarg;
		else if (opt == 't')
			budget = atof(optarg);
		else {
			fprintf(stderr, "%s\n", usage);
			return opt == 'h' ? 0 : 2;
		}
	}
	FILE *md;
	int st = bench_start(argc, optind, usage, out, &md);
	if (st >= 0)
		return st;
	if (md) {
		char date[32];
		time_t tt = time(NULL);
		strftime(date, sizeof date, "%Y-%m-%d", gmtime(&tt));
		fprintf(md, "GPU engine benchmark, %s. Ops/s, median of repeated batches; GPU times include host-device transfers.\n",
			date);
	}
	if (md && multi)
		fprintf(md, "\nBatches of %u requests (count and search of a word of the scope's shard in a random file; "
			    "64-byte reads at random offsets).\n\n"
			    "| archive | shards | engine | resident | count ops/s | search ops/s | extract 64 B ops/s | "
			    "count / 1 device | search / 1 device | extract / 1 device | results |\n"
			    "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|\n", M_N);
	int bad = 0;
	for (int i = optind; i < argc; i++)
		bad |= bench_archive(argv[i], budget, md);
	if (md)
		fclose(md);
	return bad;
}
