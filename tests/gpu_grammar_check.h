/* gpu_grammar_check: grammars and archives built with another grammar-rounds builder against the CPU builder's, byte for byte (shared by gpu_grammar.c and gpu_grammar_emu.cu). */
#ifndef GPU_GRAMMAR_CHECK_H
#define GPU_GRAMMAR_CHECK_H

/*
 * Grammars: each sequence goes through td_grammar_build (the CPU rounds and
 * finishing steps) and through `fn` followed by td_grammar_finish; the two
 * td_grammar must be equal array for array, and both must report the same
 * number of rounds. Sequences: empty, one file of one symbol, runs of one
 * symbol of every length 1-40 and 100,001 ("aaaa": the pairs count every
 * other one, replacements go every other one from the run's start), "abab"
 * and "aab"/"abcabc" repeats (overlaps resolved for the more frequent),
 * runs beside other runs, many tiny and empty files (consecutive splits),
 * random sequences over 1 to 100,000 symbols, Zipf-like text, symbol ids
 * near a large nterm, each under depth bounds 1, 2, 3, 4, the default and
 * 64. Archives: the adversarial corpus of gpu_index_check.h (format 4,
 * depth bounds default and 4), every directory given (`tadoc compress`
 * defaults), and the adversarial corpus as format 5 on 4 threads through a
 * shared builder, all equal byte for byte with the CPU-built ones.
 */
#include "gpu_index_check.h"
#include "td_grammar.h"

static uint64_t ggc_rng = 0x853C49E6748FEA9Bull;
static uint64_t ggc_nseq; /* sequences compared */

static uint64_t ggc_rnd(void)
{
	ggc_rng ^= ggc_rng << 13;
	ggc_rng ^= ggc_rng >> 7;
	ggc_rng ^= ggc_rng << 17;
	return ggc_rng;
}

static void ggc_count_round(void *ctx, const char *phase, uint64_t done, uint64_t total)
{
	(void)phase, (void)done, (void)total;
	(*(uint64_t *)ctx)++;
}

#define GGC_SAME(field, cnt) \
	(memcmp(a->field, b->field, (cnt) * sizeof *a->field) == 0)

/* 0 when the two grammars are equal, array for array. */
static int ggc_same(const td_grammar *a, const td_grammar *b)
{
	if (a->nterm != b->nterm || a->nrules != b->nrules || a->nfiles != b->nfiles || a->depth != b->depth)
		return 1;
	if (!GGC_SAME(rule_off, a->nrules + 1) || !GGC_SAME(file_root, a->nfiles + 1))
		return 1;
	return !GGC_SAME(rule_syms, a->rule_off[a->nrules]) || !GGC_SAME(root, a->file_root[a->nfiles]);
}

/* One sequence through the CPU builder and through fn; 0 when equal. */
static int ggc_one(td_grammar_rounds_fn fn, void *ctx, const char *what, const uint32_t *s, uint64_t n, uint32_t nterm,
		   unsigned maxd)
{
	uint32_t *a = (uint32_t *)malloc((n ? n : 1) * 4), *b = (uint32_t *)malloc((n ? n : 1) * 4);
	if (!a || !b)
		abort();
	if (n) {
		memcpy(a, s, n * 4);
		memcpy(b, s, n * 4);
	}
	td_grammar ga, gb;
	memset(&gb, 0, sizeof gb);
	uint64_t ra = 0, rb = 0, nb = n, nr = 0;
	uint32_t *pairs = NULL;
	int ea = td_grammar_build(a, n, nterm, maxd, ggc_count_round, &ra, &ga);
	int eb = fn(ctx, b, &nb, nterm, maxd, ggc_count_round, &rb, &pairs, &nr);
	if (eb == TD_OK)
		eb = td_grammar_finish(b, nb, nterm, pairs, nr, &gb);
	int bad = ea != TD_OK || eb != TD_OK || ra != rb || ggc_same(&ga, &gb);
	ggc_nseq++;
	if (bad)
		fprintf(stderr,
			"MISMATCH %s (n %llu, depth bound %u): cpu %s, %llu rounds, %u rules, depth %u; other %s "
			"(%s), %llu rounds, %u rules, depth %u\n",
			what, (unsigned long long)n, maxd, td_strerror(ea), (unsigned long long)ra, ga.nrules, ga.depth,
			td_strerror(eb), eb ? td_errdetail() : "", (unsigned long long)rb, gb.nrules, gb.depth);
	free(pairs);
	td_grammar_free(&ga);
	td_grammar_free(&gb);
	free(a);
	free(b);
	gic_failures += bad;
	return bad;
}

/* Append `len` symbols of pattern `pat` (k symbols, repeated). */
static uint64_t ggc_pat(uint32_t *s, uint64_t n, const uint32_t *pat, unsigned k, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		s[n++] = pat[i % k];
	return n;
}

/* Every sequence under every depth bound through fn. Returns the failures so far. */
static int ggc_sequences(td_grammar_rounds_fn fn, void *ctx)
{
	const uint64_t cap = 400000;
	uint32_t *s = (uint32_t *)malloc(cap * 4);
	if (!s)
		abort();
	static const unsigned depths[] = {0, 1, 2, 3, 4, 64};
	const uint32_t SP = TD_SPLIT;
	int before = gic_failures;
	for (size_t di = 0; di < sizeof depths / sizeof depths[0]; di++) {
		unsigned d = depths[di];
		uint64_t n = 0;
		char what[96];
		/* empty; one file of one symbol; one empty file */
		ggc_one(fn, ctx, "empty", s, 0, 10, d);
		s[0] = 3, s[1] = SP;
		ggc_one(fn, ctx, "one symbol", s, 2, 10, d);
		ggc_one(fn, ctx, "one empty file", s + 1, 1, 10, d);
		/* runs of one symbol of every length, one file each and all in one file */
		static const uint32_t a1[] = {7}, ab[] = {1, 2}, aab[] = {1, 1, 2}, abc[] = {4, 5, 6},
				      abab_c[] = {1, 2, 1, 2, 1, 3};
		for (uint64_t len = 1; len <= 40; len++) {
			n = ggc_pat(s, 0, a1, 1, len);
			s[n++] = SP;
			snprintf(what, sizeof what, "run of %llu", (unsigned long long)len);
			ggc_one(fn, ctx, what, s, n, 10, d);
		}
		n = 0;
		for (uint64_t len = 1; len <= 40; len++) {
			n = ggc_pat(s, n, a1, 1, len);
			n = ggc_pat(s, n, ab, 2, len % 5);
		}
		s[n++] = SP;
		ggc_one(fn, ctx, "runs of every length in one file", s, n, 10, d);
		n = ggc_pat(s, 0, a1, 1, 100001);
		s[n++] = SP;
		ggc_one(fn, ctx, "run of 100001", s, n, 10, d);
		/* overlaps */
		struct {
			const char *name;
			const uint32_t *p;
			unsigned k;
			uint64_t len;
		} pats[] = {{"abab", ab, 2, 1001}, {"abab even", ab, 2, 4096}, {"aab", aab, 3, 3000},
			    {"abcabc", abc, 3, 6001}, {"ababac", abab_c, 6, 6000}};
		for (size_t p = 0; p < sizeof pats / sizeof pats[0]; p++) {
			n = ggc_pat(s, 0, pats[p].p, pats[p].k, pats[p].len);
			s[n++] = SP;
			ggc_one(fn, ctx, pats[p].name, s, n, 10, d);
		}
		/* many files: tiny, empty (consecutive splits), repeated */
		n = 0;
		for (int f = 0; f < 20000; f++) {
			unsigned len = (unsigned)(ggc_rnd() % 4);
			for (unsigned i = 0; i < len; i++)
				s[n++] = (uint32_t)(ggc_rnd() % 3);
			s[n++] = SP;
		}
		ggc_one(fn, ctx, "20000 tiny and empty files", s, n, 3, d);
		/* random over alphabets of every size, splits at random */
		static const uint32_t alpha[] = {1, 2, 3, 5, 50, 1000, 100000};
		for (size_t k = 0; k < sizeof alpha / sizeof alpha[0]; k++) {
			uint64_t len = k < 3 ? 50000 : 200000;
			n = 0;
			while (n < len) {
				s[n++] = (uint32_t)(ggc_rnd() % alpha[k]);
				if (ggc_rnd() % 500 == 0)
					s[n++] = SP;
			}
			s[n++] = SP;
			snprintf(what, sizeof what, "random over %u symbols", alpha[k]);
			ggc_one(fn, ctx, what, s, n, alpha[k], d);
		}
		/* text-like: Zipf-ish words in repeated phrases, a large nterm */
		n = 0;
		uint32_t nterm = 3000000;
		while (n < 300000) {
			uint64_t r = ggc_rnd();
			if (r % 7 == 0 && n > 1000) { /* repeat an earlier stretch */
				uint64_t from = ggc_rnd() % (n - 500), len = 2 + ggc_rnd() % 60;
				for (uint64_t i = 0; i < len; i++)
					s[n + i] = s[from + i];
				n += len;
			} else {
				s[n++] = nterm - 1 - (uint32_t)(5000.0 / (1 + (double)(ggc_rnd() % 5000)));
			}
			if (ggc_rnd() % 3000 == 0)
				s[n++] = SP;
		}
		s[n++] = SP;
		ggc_one(fn, ctx, "text-like, nterm 3000000", s, n, nterm, d);
	}
	free(s);
	printf("grammars (%llu sequences and depth bounds): %s\n", (unsigned long long)ggc_nseq,
	       gic_failures == before ? "identical" : "DIFFER");
	return gic_failures;
}

/* The adversarial corpus (format 4, two depth bounds), each directory and
 * the adversarial corpus as format 5 on 4 threads through `shared`: archives
 * with fn's rounds equal the CPU's byte for byte. Returns the failures so far. */
static int ggc_archives(td_grammar_rounds_fn fn, void *ctx, td_grammar_rounds_fn shared, const char *tmpdir,
			char **dirs, int ndirs)
{
	char pa[4096], pb[4096];
	snprintf(pa, sizeof pa, "%s/cpu.tadoc", tmpdir);
	snprintf(pb, sizeof pb, "%s/other.tadoc", tmpdir);
	(void)gic_run, (void)gic_run_sharded, (void)gic_compare;
	for (int dd = 0; dd < 2; dd++) {
		td_writer_opts o;
		memset(&o, 0, sizeof o);
		o.max_depth = dd ? 4 : 0;
		o.build_time = 1;
		for (int pass = 0; pass < 2; pass++) {
			gic_rng = 0x243F6A8885A308D3ull;
			o.grammar_rounds = pass ? fn : NULL;
			o.grammar_ctx = pass ? ctx : NULL;
			td_writer *w = td_writer_new(&o);
			gic_sink k = {w, NULL};
			int err = w ? gic_fill(&k) : TD_ENOMEM;
			if (!err)
				err = td_writer_finish(w, pass ? pb : pa);
			else
				td_writer_abort(w);
			if (err) {
				fprintf(stderr, "build: %s (%s)\n", td_strerror(err), td_errdetail());
				return ++gic_failures;
			}
		}
		printf("adversarial corpus, depth bound %u: %s\n", o.max_depth,
		       gic_same_file("adversarial", pa, pb) ? "DIFFER" : "identical");
	}
	for (int i = 0; i < ndirs; i++) {
		td_writer_opts o;
		memset(&o, 0, sizeof o);
		o.build_time = 1;
		const char *in[1] = {dirs[i]};
		int err = td_compress_paths(pa, in, 1, &o);
		o.grammar_rounds = fn;
		o.grammar_ctx = ctx;
		if (!err)
			err = td_compress_paths(pb, in, 1, &o);
		if (err) {
			fprintf(stderr, "%s: %s (%s)\n", dirs[i], td_strerror(err), td_errdetail());
			gic_failures++;
			continue;
		}
		printf("%s: %s\n", dirs[i], gic_same_file(dirs[i], pa, pb) ? "DIFFER" : "identical");
	}
	for (int pass = 0; pass < 2; pass++) {
		td_build_opts bo;
		td_build_opts_init(&bo);
		bo.format = TD_VERSION_SHARDED;
		bo.jobs = 4;
		bo.shard_size = 256 << 10;
		bo.build_time = 1;
		bo.writer.grammar_rounds = pass ? shared : NULL;
		gic_rng = 0x243F6A8885A308D3ull;
		td_build *b = NULL;
		int err = td_build_new(&bo, &b);
		gic_sink k = {NULL, b};
		if (!err)
			err = gic_fill(&k);
		if (!err) {
			err = td_build_finish(b, pass ? pb : pa);
			b = NULL;
		}
		td_build_abort(b);
		if (err) {
			fprintf(stderr, "sharded build: %s (%s)\n", td_strerror(err), td_errdetail());
			return ++gic_failures;
		}
	}
	printf("adversarial, format 5, 256 KiB shards, 4 threads: %s\n",
	       gic_same_file("format 5", pa, pb) ? "DIFFER" : "identical");
	unlink(pa);
	unlink(pb);
	return gic_failures;
}

#endif
