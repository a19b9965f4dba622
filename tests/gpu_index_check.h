/* gpu_index_check: build archives with the CPU index builder and with another one, and compare them section by section (shared by gpu_index.c and gpu_index_emu.cu). */
#ifndef GPU_INDEX_CHECK_H
#define GPU_INDEX_CHECK_H

/*
 * The two archives must be byte-identical except META's build_time (the
 * clock may tick between the two builds), so every section is compared,
 * META with build_time zeroed. Inputs: an adversarial corpus written here
 * (empty files, a word longer than TD_MAXTOK, symlinks, binary bytes,
 * CRLF, many small files in nested directories, one file large enough for
 * deep rules and long-rule samples), under each sample shift, plus any
 * directories named on the command line (compressed like `tadoc compress`).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "td_err.h"
#include "td_format.h"
#include "td_index.h"
#include "td_build.h"
#include "td_writer.h"

static int gic_failures;

static unsigned char *gic_slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long sz = ftell(f);
	fseek(f, 0, SEEK_SET);
	unsigned char *b = (unsigned char *)malloc((size_t)sz + 1);
	if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
		free(b);
		b = NULL;
	}
	fclose(f);
	*n = (size_t)sz;
	return b;
}

/* Section `id` of archive bytes b (META with build_time zeroed, into tmp). */
static const unsigned char *gic_section(const unsigned char *b, size_t n, unsigned id, uint64_t *size,
					 td_disk_meta *tmp)
{
	const td_disk_header *h = (const td_disk_header *)b;
	if (n < sizeof *h || h->sectab_off + (uint64_t)h->nsections * sizeof(td_disk_section) > n)
		return NULL;
	const td_disk_section *t = (const td_disk_section *)(b + h->sectab_off);
	for (uint32_t i = 0; i < h->nsections; i++) {
		if (t[i].id != id)
			continue;
		if (t[i].off + t[i].size > n)
			return NULL;
		*size = t[i].size;
		if (id == TD_SEC_META && t[i].size >= sizeof *tmp) {
			memcpy(tmp, b + t[i].off, sizeof *tmp);
			tmp->build_time = 0;
			return (const unsigned char *)tmp;
		}
		return b + t[i].off;
	}
	return NULL;
}

static const char *const gic_names[TD_SEC_MAX] = {
	"", "meta", "names", "e_nameoff", "e_parent", "e_mode", "e_mtime", "e_mtimens", "e_size", "e_child",
	"e_root", "e_gstart", "e_nwords", "words", "word_off", "word_freq", "other", "other_off", "rule_syms",
	"rule_groups", "rule_len", "root_syms", "root_samples", "rule_samples",
};

/* 0 when archives a and b hold the same sections, else prints and counts. */
static int gic_compare(const char *what, const char *a, const char *b)
{
	size_t na = 0, nb = 0;
	unsigned char *x = gic_slurp(a, &na), *y = gic_slurp(b, &nb);
	int bad = 0;
	if (!x || !y) {
		fprintf(stderr, "MISMATCH %s: cannot read the archives\n", what);
		bad = 1;
	}
	for (unsigned id = 1; id < TD_SEC_MAX && !bad; id++) {
		uint64_t sa = 0, sb = 0;
		td_disk_meta ma, mb;
		const unsigned char *pa = gic_section(x, na, id, &sa, &ma), *pb = gic_section(y, nb, id, &sb, &mb);
		if (!pa || !pb || sa != sb || memcmp(pa, pb, sa)) {
			fprintf(stderr, "MISMATCH %s: section %s differs (%llu vs %llu bytes)\n", what, gic_names[id],
				(unsigned long long)sa, (unsigned long long)sb);
			bad = 1;
		}
	}
	free(x);
	free(y);
	gic_failures += bad;
	return bad;
}

static uint64_t gic_rng = 0x243F6A8885A308D3ull;

static uint64_t gic_rnd(void)
{
	gic_rng ^= gic_rng << 13;
	gic_rng ^= gic_rng >> 7;
	gic_rng ^= gic_rng << 17;
	return gic_rng;
}

static size_t gic_text(unsigned char *buf, size_t n, int kind)
{
	static const char *vocab[] = {"the", "of", "and", "a", "rule", "grammar", "\xc3\x9c" "n" "\xc3\xaf" "c" "\xc3\xb6" "d" "\xc3\xa9",
				      "\xe6\x97\xa5\xe6\x9c\xac", "x1", "_", "42", "na\xc3\xafve", "tadoc"};
	size_t i = 0;
	while (i < n) {
		if (kind == 1) {
			buf[i++] = (unsigned char)gic_rnd();
			continue;
		}
		const char *w = vocab[gic_rnd() % (sizeof vocab / sizeof vocab[0])];
		size_t l = strlen(w) < n - i ? strlen(w) : n - i;
		memcpy(buf + i, w, l);
		i += l;
		if (i < n)
			buf[i++] = (unsigned char)" \n, \r\0."[gic_rnd() % 7];
	}
	return n;
}

/* Where gic_fill adds: a td_writer (format 4) or a td_build (format 5). */
typedef struct gic_sink {
	td_writer *w;
	td_build *b;
} gic_sink;

static int gic_dir(const gic_sink *k, const char *path)
{
	return k->w ? td_writer_add_dir(k->w, path, 0755, 1, 0) : td_build_add_dir(k->b, path, 0755, 1, 0);
}

static int gic_file(const gic_sink *k, const char *path, const unsigned char *data, size_t len)
{
	return k->w ? td_writer_add_file(k->w, path, 0644, 1, 0, data, len)
		    : td_build_add_file(k->b, path, 0644, 1, 0, data, len);
}

static int gic_symlink(const gic_sink *k, const char *path, const char *target)
{
	return k->w ? td_writer_add_symlink(k->w, path, 1, 0, target) : td_build_add_symlink(k->b, path, 1, 0, target);
}

/* The adversarial corpus into a writer or a sharded build. */
static int gic_fill(const gic_sink *k)
{
	size_t cap = 1 << 21;
	unsigned char *b = (unsigned char *)malloc(cap);
	int err = 0;
	if (!b)
		return TD_ENOMEM;
	err |= gic_dir(k, ""); /* the root's mtime: not the clock */
	err |= gic_file(k, "empty", (const unsigned char *)"", 0);
	err |= gic_file(k, "big", b, gic_text(b, 1500000, 0));
	memset(b, 'z', 700); /* one word longer than TD_MAXTOK: three pieces */
	memcpy(b + 700, " the end", 8);
	err |= gic_file(k, "long", b, 708);
	err |= gic_file(k, "bin", b, gic_text(b, 5000, 1));
	err |= gic_symlink(k, "ln", "the rule of the grammar");
	err |= gic_dir(k, "d/empty");
	for (int i = 0; i < 400 && !err; i++) {
		char name[64];
		snprintf(name, sizeof name, "d/%c/%c/f%03d", 'a' + i % 3, 'a' + i % 5, i);
		err |= gic_file(k, name, b, gic_text(b, gic_rnd() % (i % 50 ? 3000 : 60000), 0));
	}
	free(b);
	return err;
}

/* Whole files equal, byte for byte. */
static int gic_same_file(const char *what, const char *a, const char *b)
{
	size_t na = 0, nb = 0;
	unsigned char *x = gic_slurp(a, &na), *y = gic_slurp(b, &nb);
	int bad = !x || !y || na != nb || memcmp(x, y, na) != 0;
	if (bad)
		fprintf(stderr, "MISMATCH %s: the archives differ (%zu vs %zu bytes)\n", what, na, nb);
	free(x);
	free(y);
	gic_failures += bad;
	return bad;
}

/* The adversarial corpus as a format 5 archive of many small shards built
 * on 4 threads, once with the CPU index builder and once with `fn`, which
 * the threads call at the same time (td_gpu_build_indexes_shared): the two
 * files must be equal byte for byte (one build time for both). Returns the
 * number of mismatches so far. */
static int gic_run_sharded(td_index_fn fn, void *ctx, const char *tmpdir)
{
	char pa[4096], pb[4096];
	snprintf(pa, sizeof pa, "%s/cpu5.tadoc", tmpdir);
	snprintf(pb, sizeof pb, "%s/other5.tadoc", tmpdir);
	for (int pass = 0; pass < 2; pass++) {
		td_build_opts bo;
		td_build_opts_init(&bo);
		bo.format = TD_VERSION_SHARDED;
		bo.jobs = 4;
		bo.shard_size = 256 << 10;
		bo.build_time = 1;
		bo.writer.sample_shift = 4;
		bo.writer.index_build = pass ? fn : NULL;
		bo.writer.index_ctx = pass ? ctx : NULL;
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

/* Build the adversarial archive twice (CPU builder, then `fn`) and compare;
 * then every directory in dirs. Returns the number of mismatches. */
static int gic_run(td_index_fn fn, void *ctx, const char *tmpdir, char **dirs, int ndirs)
{
	char pa[4096], pb[4096];
	snprintf(pa, sizeof pa, "%s/cpu.tadoc", tmpdir);
	snprintf(pb, sizeof pb, "%s/other.tadoc", tmpdir);
	static const unsigned shifts[] = {4, 1, 2, 6};
	for (size_t s = 0; s < sizeof shifts / sizeof shifts[0]; s++) {
		td_writer_opts o;
		memset(&o, 0, sizeof o);
		o.sample_shift = shifts[s];
		o.max_depth = s == 3 ? 4 : 0;
		for (int pass = 0; pass < 2; pass++) {
			gic_rng = 0x243F6A8885A308D3ull + s;
			o.index_build = pass ? fn : NULL;
			o.index_ctx = pass ? ctx : NULL;
			td_writer *w = td_writer_new(&o);
			gic_sink k = {w, NULL};
			int err = w ? gic_fill(&k) : TD_ENOMEM;
			if (!err)
				err = td_writer_finish(w, pass ? pb : pa);
			else
				td_writer_abort(w);
			if (err) {
				fprintf(stderr, "build (shift %u): %s (%s)\n", shifts[s], td_strerror(err), td_errdetail());
				return ++gic_failures;
			}
		}
		char what[64];
		snprintf(what, sizeof what, "adversarial, sample shift %u", shifts[s]);
		printf("%s: %s\n", what, gic_compare(what, pa, pb) ? "DIFFER" : "identical");
	}
	for (int i = 0; i < ndirs; i++) {
		td_writer_opts o;
		memset(&o, 0, sizeof o);
		const char *in[1] = {dirs[i]};
		int err = td_compress_paths(pa, in, 1, &o);
		o.index_build = fn;
		o.index_ctx = ctx;
		if (!err)
			err = td_compress_paths(pb, in, 1, &o);
		if (err) {
			fprintf(stderr, "%s: %s (%s)\n", dirs[i], td_strerror(err), td_errdetail());
			gic_failures++;
			continue;
		}
		printf("%s: %s\n", dirs[i], gic_compare(dirs[i], pa, pb) ? "DIFFER" : "identical");
	}
	unlink(pa);
	unlink(pb);
	return gic_failures;
}

#endif
