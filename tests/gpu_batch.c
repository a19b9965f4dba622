/* gpu_batch: the GPU engine's batched extract, count and search equal the CPU engine's, byte for byte. */
/*
 * Usage: gpu_batch [ARCHIVE...]   (also $TD_GPU_ARCHIVES, ':'-separated)
 * With no archive it builds an adversarial one in a temporary directory.
 * Exits 77 (skip) with a "no GPU" line when no CUDA device is usable, 0
 * when every batch matched, 1 otherwise. $TD_GPU_MAXBATCH caps batch sizes
 * (default 100000), $TD_GPU_SEED sets the random seed.
 * $TD_GPU_SHARDED=1 builds the adversarial archive as format 5 with shards
 * of 1 MiB (files cut between shards) and checks a version 5 archive (built
 * or given) on every device, on one device, with a memory cap that leaves
 * only some shards resident (partial residency) and in CPU fallback.
 *
 * gpu_batch --ngrams ARCHIVE: n-gram requests "LEN<TAB>TOP<TAB>PATH" (PATH
 * empty: the corpus) from stdin as one td_gpu_ngram_batch; per request
 * "= PIECES ERR" (the scope's pieces in a format 5 archive, else 1, and
 * the answer's td_err) then its runs as `tadoc ngrams` prints them
 * (COUNT<TAB>W1 W2 ...), for tests/gpu_ngram_oracle.py; exit 1 when an
 * answer differs from td_ngram_batch's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "td_analytics.h"
#include "td_archive.h"
#include "td_build.h"
#include "td_err.h"
#include "td_extract.h"
#include "td_format.h"
#include "td_gpu.h"
#include "td_pack.h"
#include "td_query.h"
#include "td_writer.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static uint64_t below(uint64_t n)
{
	return n ? rnd() % n : 0;
}

static int failures;

#define FAIL(...)                                   \
	do {                                        \
		fprintf(stderr, "MISMATCH: " __VA_ARGS__); \
		fputc('\n', stderr);                \
		if (++failures > 20)                \
			exit(1);                    \
	} while (0)

/* ---- an adversarial corpus ---- */

static const char *vocab[] = {"the", "of", "and", "a", "to", "in", "tadoc", "grammar", "rule", "word",
			      "Ünïcödé", "日本語", "x1", "_", "42", "CamelCase", "snake_case", "é", "naïve", "ß"};

static size_t gen_text(uint8_t *buf, size_t n, int kind)
{
	size_t i = 0;
	while (i < n) {
		size_t room = n - i;
		if (kind == 1) { /* random binary */
			buf[i++] = (uint8_t)rnd();
			continue;
		}
		const char *w = vocab[below(sizeof vocab / sizeof vocab[0])];
		size_t l = strlen(w);
		if (l > room)
			l = room;
		memcpy(buf + i, w, l);
		i += l;
		if (i >= n)
			break;
		uint64_t r = below(20);
		const char *sep = r < 12 ? " " : r < 14 ? "\r\n" : r < 15 ? ", " : r < 16 ? "\0" : r < 17 ? "\xff\xfe" :
				  r < 18 ? "  " : r < 19 ? "\n" : ".";
		size_t sl = r == 15 ? 1 : strlen(sep);
		if (sl > n - i)
			sl = n - i;
		memcpy(buf + i, sep, sl);
		i += sl;
	}
	return n;
}

/* The adversarial corpus goes to a td_writer (format 4) or, with
 * TD_GPU_SHARDED, to a td_build of 1 MiB shards (format 5). */
typedef struct sink {
	td_writer *w;
	td_build *b;
} sink;

static int add_file(sink *k, const char *path, const void *data, size_t len)
{
	return k->b ? td_build_add_file(k->b, path, 0644, 1, 0, data, len)
		    : td_writer_add_file(k->w, path, 0644, 1, 0, data, len);
}

static int add_dir(sink *k, const char *path)
{
	return k->b ? td_build_add_dir(k->b, path, 0755, 1, 0) : td_writer_add_dir(k->w, path, 0755, 1, 0);
}

static int add_symlink(sink *k, const char *path, const char *target)
{
	return k->b ? td_build_add_symlink(k->b, path, 1, 0, target) : td_writer_add_symlink(k->w, path, 1, 0, target);
}

static int build_adversarial(const char *path, int sharded)
{
	sink k = {NULL, NULL};
	sink *w = &k;
	if (sharded) {
		td_build_opts bo;
		td_build_opts_init(&bo);
		bo.shard_size = 1u << 20;
		bo.jobs = 2;
		bo.build_time = 1;
		int r = td_build_new(&bo, &k.b);
		if (r)
			return r;
	} else if (!(k.w = td_writer_new(NULL))) {
		return TD_ENOMEM;
	}
	int err = 0;
	size_t cap = 6u << 20;
	uint8_t *buf = malloc(cap);
	if (!buf) {
		if (k.b)
			td_build_abort(k.b);
		else
			td_writer_abort(k.w);
		return TD_ENOMEM;
	}
	char name[128];
	err |= add_file(w, "empty", "", 0);
	err |= add_file(w, "one", "x", 1);
	err |= add_file(w, "nonl", "no trailing newline", 19);
	/* a word longer than TD_MAXTOK, stored as pieces */
	memset(buf, 'q', 600);
	memcpy(buf + 600, " qq ", 4);
	memset(buf + 604, 'q', 300);
	err |= add_file(w, "longword", buf, 904);
	/* 1 MB of one byte, a long periodic pattern, a big text, binary */
	memset(buf, 'a', 1 << 20);
	err |= add_file(w, "same", buf, 1 << 20);
	for (size_t i = 0; i < (2u << 20); i++)
		buf[i] = "abc de fgh\n"[i % 11];
	err |= add_file(w, "periodic", buf, 2u << 20);
	err |= add_file(w, "big/text", buf, gen_text(buf, 5u << 20, 0));
	err |= add_file(w, "bin", buf, gen_text(buf, 100000, 1));
	/* a deep tree with many small files, symlinks, empty dirs */
	char dir[96] = "deep"; /* 12 levels of /dN fit */
	for (int d = 0; d < 12; d++) {
		snprintf(name, sizeof name, "%s/f%d", dir, d);
		err |= add_file(w, name, buf, gen_text(buf, below(5000), 0));
		size_t l = strlen(dir);
		snprintf(dir + l, sizeof dir - l, "/d%d", d);
	}
	err |= add_dir(w, "emptydir");
	err |= add_symlink(w, "link", "big/text");
	err |= add_symlink(w, "deep/link2", "the grammar of the rule");
	for (int i = 0; i < 3000; i++) {
		snprintf(name, sizeof name, "many/%02d/t%04d", i % 37, i);
		err |= add_file(w, name, buf, gen_text(buf, below(3000), 0));
	}
	free(buf);
	if (err) {
		if (k.b)
			td_build_abort(k.b);
		else
			td_writer_abort(k.w);
		return TD_EINVAL;
	}
	return k.b ? td_build_finish(k.b, path) : td_writer_finish(k.w, path);
}

/* ---- request generators ---- */

typedef struct corpus {
	const td_archive *a;
	uint32_t nent;
	uint64_t *size;
	mode_t *mode;
	td_pack word_off;
	const char *words;
	uint64_t nwords;
} corpus;

static int corpus_init(corpus *c, const td_archive *a)
{
	c->a = a;
	c->nent = td_archive_nentries(a);
	c->size = calloc(c->nent, sizeof *c->size);
	c->mode = calloc(c->nent, sizeof *c->mode);
	if (!c->size || !c->mode)
		return TD_ENOMEM;
	for (uint32_t e = 0; e < c->nent; e++) {
		td_stat st;
		td_archive_stat(a, e, &st);
		c->size[e] = st.size;
		c->mode[e] = st.mode;
	}
	uint64_t sz = 0;
	const void *p = td_archive_bytes(a, TD_SEC_WORD_OFF, &sz); /* built from the words in version 4 */
	int r = p ? td_pack_view(&c->word_off, p, sz) : TD_ECORRUPT;
	if (r)
		return r;
	c->words = td_archive_bytes(a, TD_SEC_WORDS, &sz);
	c->nwords = c->word_off.n ? c->word_off.n - 1 : 0;
	return TD_OK;
}

static void pick_word(const corpus *c, const char **w, size_t *len, char *scratch)
{
	uint64_t r = below(100);
	if (r < 80 && c->nwords) { /* a dictionary word */
		uint64_t i = below(c->nwords);
		uint64_t a = td_pack_get(&c->word_off, i), b = td_pack_get(&c->word_off, i + 1);
		*w = c->words + a;
		*len = (size_t)(b - a);
		return;
	}
	static const char *odd[] = {"", "two words", "!!", "absentword", "the ", "q", "zzzzzzzzzz", "日本"};
	if (r < 95) {
		*w = odd[below(sizeof odd / sizeof odd[0])];
		*len = strlen(*w);
		return;
	}
	memset(scratch, 'q', 600); /* long word: the CPU's slow path */
	*w = scratch;
	*len = below(2) ? 600 : 300;
}

static td_entry pick_scope(const corpus *c)
{
	uint64_t r = below(100);
	if (r < 10)
		return TD_ROOT;
	if (r < 12)
		return (td_entry)(c->nent + below(3)); /* invalid */
	return (td_entry)below(c->nent);
}

/* ---- checks ---- */

/* direct = 1: the GPU's buffers lie back to back in one td_gpu_host_alloc
 * block (the direct download path), with a guard after the last. */
#define GUARD 64u

/* n random reads (sparse: all but one in 32 empty, so a batch large
 * enough for several pieces and result-copy threads stays quick to check
 * where the device is emulated), into separate buffers or (direct) into one
 * td_gpu_host_alloc block, against the CPU engine. */
static void check_extract(td_gpu *g, const corpus *c, size_t n, int direct, int sparse)
{
	td_extract_req *cq = calloc(n, sizeof *cq), *gq = calloc(n, sizeof *gq);
	uint8_t **bufs = calloc(n, sizeof *bufs);
	uint8_t *blk = NULL;
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t r = below(100);
		td_entry e = r < 2 ? (td_entry)(c->nent + below(5)) : (td_entry)below(c->nent);
		uint64_t size = e < c->nent ? c->size[e] : 0;
		uint32_t len = r < 40 ? 64 : r < 70 ? 4096 : r < 80 ? (uint32_t)below(70000) : r < 85 ? 0 :
			       r < 90 ? (uint32_t)(size + 10) : (uint32_t)below(300);
		if (sparse && i % 32)
			len = 0;
		uint64_t off = below(size + 2);
		if (r % 7 == 0)
			off = size > len ? size - len / 2 : 0; /* crosses EOF */
		cq[i].file = gq[i].file = e;
		cq[i].off = gq[i].off = off;
		cq[i].len = gq[i].len = len;
		bufs[i] = malloc(2 * (size_t)len + 2);
		memset(bufs[i], 0xA5, 2 * (size_t)len + 2);
		cq[i].buf = bufs[i];
		gq[i].buf = bufs[i] + len + 1;
		gq[i].got = 0xdeadbeef;
		gq[i].err = 12345;
		total += len;
	}
	if (direct) {
		blk = td_gpu_host_alloc(g, total + GUARD);
		if (!blk)
			FAIL("td_gpu_host_alloc(%zu) failed", total + GUARD);
		else {
			memset(blk + total, 0x5A, GUARD);
			for (size_t i = 0, pos = 0; i < n; pos += gq[i].len, i++)
				gq[i].buf = blk + pos;
		}
	}
	td_extract_batch(c->a, cq, n, 0);
	int r = td_gpu_extract_batch(g, gq, n);
	if (r)
		FAIL("extract batch of %zu: %s (%s)", n, td_strerror(r), td_errdetail());
	for (size_t i = 0; i < n; i++) {
		if (cq[i].err != gq[i].err || cq[i].got != gq[i].got)
			FAIL("extract #%zu file %u off %llu len %u: cpu err %d got %u, gpu err %d got %u", i, cq[i].file,
			     (unsigned long long)cq[i].off, cq[i].len, cq[i].err, cq[i].got, gq[i].err, gq[i].got);
		else if (memcmp(cq[i].buf, gq[i].buf, cq[i].got))
			FAIL("extract #%zu file %u off %llu len %u: bytes differ", i, cq[i].file,
			     (unsigned long long)cq[i].off, cq[i].len);
		free(bufs[i]);
	}
	for (size_t k = 0; blk && k < GUARD; k++)
		if (blk[total + k] != 0x5A) {
			FAIL("extract batch of %zu (direct): byte %zu after the last buffer was written", n, k);
			break;
		}
	td_gpu_host_free(g, blk);
	free(bufs);
	free(cq);
	free(gq);
}

static void check_count(td_gpu *g, const corpus *c, size_t n, char *scratch)
{
	td_count_req *cq = calloc(n, sizeof *cq), *gq = calloc(n, sizeof *gq);
	for (size_t i = 0; i < n; i++) {
		pick_word(c, &cq[i].word, &cq[i].len, scratch);
		cq[i].scope = pick_scope(c);
		gq[i] = cq[i];
		gq[i].count = 777;
		gq[i].err = 12345;
	}
	td_count_batch(c->a, cq, n, 0);
	int r = td_gpu_count_batch(g, gq, n);
	if (r)
		FAIL("count batch of %zu: %s", n, td_strerror(r));
	for (size_t i = 0; i < n; i++)
		if (cq[i].err != gq[i].err || (!cq[i].err && cq[i].count != gq[i].count))
			FAIL("count #%zu '%.*s' scope %u: cpu err %d count %llu, gpu err %d count %llu", i,
			     (int)(cq[i].len > 40 ? 40 : cq[i].len), cq[i].word, cq[i].scope, cq[i].err,
			     (unsigned long long)cq[i].count, gq[i].err, (unsigned long long)gq[i].count);
	free(cq);
	free(gq);
}

static void check_search(td_gpu *g, const corpus *c, size_t n, char *scratch)
{
	td_search_req *cq = calloc(n, sizeof *cq), *gq = calloc(n, sizeof *gq);
	for (size_t i = 0; i < n; i++) {
		pick_word(c, &cq[i].word, &cq[i].len, scratch);
		/* the root scope of a frequent word is huge: keep it rare */
		cq[i].scope = below(10) ? (td_entry)below(c->nent) : pick_scope(c);
		gq[i].word = cq[i].word;
		gq[i].len = cq[i].len;
		gq[i].scope = cq[i].scope;
		gq[i].err = 12345;
	}
	td_search_batch(c->a, cq, n, 0);
	int r = td_gpu_search_batch(g, gq, n);
	if (r)
		FAIL("search batch of %zu: %s", n, td_strerror(r));
	for (size_t i = 0; i < n; i++) {
		if (cq[i].err != gq[i].err || cq[i].hits.n != gq[i].hits.n)
			FAIL("search #%zu '%.*s' scope %u: cpu err %d hits %zu, gpu err %d hits %zu", i,
			     (int)(cq[i].len > 40 ? 40 : cq[i].len), cq[i].word, cq[i].scope, cq[i].err, cq[i].hits.n,
			     gq[i].err, gq[i].hits.n);
		else
			for (size_t k = 0; k < cq[i].hits.n; k++)
				if (cq[i].hits.v[k].file != gq[i].hits.v[k].file || cq[i].hits.v[k].off != gq[i].hits.v[k].off) {
					FAIL("search #%zu '%.*s' scope %u: hit %zu is %u:%llu on the CPU, %u:%llu on the GPU",
					     i, (int)cq[i].len, cq[i].word, cq[i].scope, k, cq[i].hits.v[k].file,
					     (unsigned long long)cq[i].hits.v[k].off, gq[i].hits.v[k].file,
					     (unsigned long long)gq[i].hits.v[k].off);
					break;
				}
		td_hits_free(&cq[i].hits);
		td_hits_free(&gq[i].hits);
	}
	free(cq);
	free(gq);
}

/* A dictionary word with up to three random edits (ASCII or multibyte
 * code points), or one of pick_word's odd ones, into buf (room 1024). */
static size_t fuzzy_word(const corpus *c, char *buf, char *scratch)
{
	const char *w;
	size_t len;
	pick_word(c, &w, &len, scratch);
	if (len > 700)
		len = 700;
	memcpy(buf, w, len);
	static const char *ins[] = {"e", "x", "Z", "7", "_", "é", "日", "ß"};
	for (unsigned e = (unsigned)below(4); e && len; e--) {
		size_t at = below(len), k = 1;
		while (at + k < len && ((uint8_t)buf[at + k] & 0xC0) == 0x80)
			k++; /* the code point at `at` (or a piece of one) */
		const char *x = ins[below(sizeof ins / sizeof ins[0])];
		size_t xl = strlen(x), op = below(3);
		if (op == 0) { /* delete */
			memmove(buf + at, buf + at + k, len - at - k);
			len -= k;
		} else if (len + xl < 1000) { /* substitute or insert */
			size_t cut = op == 1 ? k : 0;
			memmove(buf + at + xl, buf + at + cut, len - at - cut);
			memcpy(buf + at, x, xl);
			len = len - cut + xl;
		}
	}
	return len;
}

/* n fuzzy queries (distance 0-3, now and then 4; mostly the whole corpus)
 * through td_gpu_fuzzy_batch against td_fuzzy_batch. */
static void check_fuzzy(td_gpu *g, const corpus *c, size_t n, char *scratch)
{
	td_fuzzy_req *cq = calloc(n, sizeof *cq), *gq = calloc(n, sizeof *gq);
	char *text = malloc(n * 1024);
	for (size_t i = 0; i < n; i++) {
		cq[i].word = text + i * 1024;
		cq[i].len = fuzzy_word(c, text + i * 1024, scratch);
		cq[i].k = below(50) ? (unsigned)below(4) : 4;
		cq[i].scope = below(10) < 7 ? TD_ROOT : pick_scope(c);
		gq[i] = cq[i];
		gq[i].err = 12345;
	}
	td_fuzzy_batch(c->a, cq, n, 0);
	int r = td_gpu_fuzzy_batch(g, gq, n);
	if (r)
		FAIL("fuzzy batch of %zu: %s", n, td_strerror(r));
	for (size_t i = 0; i < n; i++) {
		const td_fuzzy_req *x = &cq[i], *y = &gq[i];
		int same = x->err == y->err && x->nhits == y->nhits && x->nbytes == y->nbytes &&
			   (!x->nbytes || !memcmp(x->words, y->words, x->nbytes));
		for (size_t k = 0; same && k < x->nhits; k++)
			same = x->hits[k].off == y->hits[k].off && x->hits[k].len == y->hits[k].len &&
			       x->hits[k].dist == y->hits[k].dist && x->hits[k].count == y->hits[k].count;
		if (!same)
			FAIL("fuzzy #%zu '%.*s' k %u scope %u: cpu err %d, %zu matches; gpu err %d, %zu matches", i,
			     (int)(x->len > 40 ? 40 : x->len), x->word, x->k, x->scope, x->err, x->nhits, y->err,
			     y->nhits);
		td_fuzzy_req_free(&cq[i]);
		td_fuzzy_req_free(&gq[i]);
	}
	free(text);
	free(cq);
	free(gq);
}

/* n ranked-files queries (words as pick_word's, now and then a phrase of
 * two dictionary words; scopes as pick_scope's) through
 * td_gpu_files_batch against td_files_batch. */
static void check_files(td_gpu *g, const corpus *c, size_t n, char *scratch)
{
	td_files_req *cq = calloc(n, sizeof *cq), *gq = calloc(n, sizeof *gq);
	char *text = malloc(n * 128);
	for (size_t i = 0; i < n; i++) {
		const char *w;
		size_t len;
		pick_word(c, &w, &len, scratch);
		if (below(10) < 4) { /* a word of the generator's: many files hold it */
			w = vocab[below(sizeof vocab / sizeof vocab[0])];
			len = strlen(w);
		}
		if (below(10) == 0 && c->nwords) { /* a phrase "W1 W2" */
			const char *w2;
			size_t l2;
			uint64_t j = below(c->nwords);
			uint64_t a0 = td_pack_get(&c->word_off, j), b0 = td_pack_get(&c->word_off, j + 1);
			w2 = c->words + a0;
			l2 = (size_t)(b0 - a0);
			if (len + l2 + 1 <= 128) {
				char *t = text + i * 128;
				memcpy(t, w, len);
				t[len] = ' ';
				memcpy(t + len + 1, w2, l2);
				w = t;
				len += l2 + 1;
			}
		}
		cq[i].word = w;
		cq[i].len = len;
		cq[i].scope = below(10) < 2 ? TD_ROOT : pick_scope(c);
		gq[i] = cq[i];
		gq[i].err = 12345;
		gq[i].nfiles = 777;
	}
	td_files_batch(c->a, cq, n, 0);
	int r = td_gpu_files_batch(g, gq, n);
	if (r)
		FAIL("files batch of %zu: %s", n, td_strerror(r));
	for (size_t i = 0; i < n; i++) {
		const td_files_req *x = &cq[i], *y = &gq[i];
		int same = x->err == y->err && x->nfiles == y->nfiles;
		for (size_t k = 0; same && k < x->nfiles; k++)
			same = x->files[k].file == y->files[k].file && x->files[k].count == y->files[k].count;
		if (!same)
			FAIL("files #%zu '%.*s' scope %u: cpu err %d, %zu files; gpu err %d, %zu files", i,
			     (int)(x->len > 40 ? 40 : x->len), x->word, x->scope, x->err, x->nfiles, y->err, y->nfiles);
		free(cq[i].files);
		free(gq[i].files);
	}
	free(text);
	free(cq);
	free(gq);
}

/* n top-words (top = 1: n of 0 to 30, now and then all) or term-vector
 * requests over scopes as pick_scope's (files, directories, the corpus,
 * symlinks, bad entries) through td_gpu_top_batch / td_gpu_vector_batch
 * against td_top_batch / td_vector_batch, word by word. */
static void check_words(td_gpu *g, const corpus *c, size_t n, int top)
{
	td_words_req *cq = calloc(n, sizeof *cq), *gq = calloc(n, sizeof *gq);
	for (size_t i = 0; i < n; i++) {
		cq[i].scope = below(20) == 0 ? TD_ROOT : pick_scope(c);
		cq[i].n = below(10) == 0 ? 0 : below(31);
		gq[i] = cq[i];
		gq[i].err = 12345;
		gq[i].nwords = 777;
	}
	if (top)
		td_top_batch(c->a, cq, n, 0);
	else
		td_vector_batch(c->a, cq, n, 0);
	int r = top ? td_gpu_top_batch(g, gq, n) : td_gpu_vector_batch(g, gq, n);
	if (r)
		FAIL("%s batch of %zu: %s", top ? "top" : "vector", n, td_strerror(r));
	for (size_t i = 0; i < n; i++) {
		const td_words_req *x = &cq[i], *y = &gq[i];
		int same = x->err == y->err && x->nwords == y->nwords && x->nbytes == y->nbytes &&
			   (!x->nbytes || !memcmp(x->bytes, y->bytes, x->nbytes));
		for (size_t k = 0; same && k < x->nwords; k++)
			same = x->words[k].off == y->words[k].off && x->words[k].len == y->words[k].len &&
			       x->words[k].count == y->words[k].count;
		if (!same)
			FAIL("%s #%zu scope %u n %llu: cpu err %d, %zu words; gpu err %d, %zu words", top ? "top" : "vector",
			     i, x->scope, (unsigned long long)x->n, x->err, x->nwords, y->err, y->nwords);
		td_words_req_free(&cq[i]);
		td_words_req_free(&gq[i]);
	}
	free(cq);
	free(gq);
}

/* n n-gram requests (lengths 2 to 8, now and then a bad one; top 0 to
 * 30, now and then all) over scopes as pick_scope's through
 * td_gpu_ngram_batch against td_ngram_batch, run by run. */
static int ngram_same(const td_ngram_req *x, const td_ngram_req *y)
{
	int same = x->err == y->err && x->ngrams == y->ngrams && x->nbytes == y->nbytes &&
		   (!x->nbytes || !memcmp(x->bytes, y->bytes, x->nbytes));
	for (size_t k = 0; same && k < x->ngrams; k++)
		same = x->grams[k].off == y->grams[k].off && x->grams[k].len == y->grams[k].len &&
		       x->grams[k].count == y->grams[k].count;
	return same;
}

/* Pieces of entry e in a format 5 archive (1 otherwise, or on error). */
static uint64_t scope_pieces(const td_archive *a, td_entry e)
{
	const struct td_disk_piece *p = NULL;
	uint64_t np = 0;
	return td_archive_version(a) == TD_VERSION_SHARDED && !td_archive_pieces(a, e, &p, &np) ? np : 1;
}

static void check_ngrams(td_gpu *g, const corpus *c, size_t n)
{
	td_ngram_req *cq = calloc(n, sizeof *cq), *gq = calloc(n, sizeof *gq);
	/* format 5: scopes over several shards (files cut between shards and
	 * the directories above them) first, a third of the batch */
	td_entry *split = calloc(c->nent + 1, sizeof *split);
	size_t nsplit = 0;
	for (td_entry e = 1; split && e < c->nent; e++)
		if (scope_pieces(c->a, e) > 1)
			split[nsplit++] = e;
	for (size_t i = 0; i < n; i++) {
		cq[i].scope = below(50) == 0 ? TD_ROOT : pick_scope(c);
		if (nsplit && i < n / 3)
			cq[i].scope = split[i % nsplit];
		cq[i].len = below(30) == 0 ? (unsigned)below(12) : 2 + (unsigned)below(7);
		cq[i].top = below(10) == 0 ? 0 : below(31);
		gq[i] = cq[i];
		gq[i].err = 12345;
		gq[i].ngrams = 777;
	}
	td_ngram_batch(c->a, cq, n, 0);
	int r = td_gpu_ngram_batch(g, gq, n);
	if (r)
		FAIL("n-gram batch of %zu: %s", n, td_strerror(r));
	for (size_t i = 0; i < n; i++) {
		const td_ngram_req *x = &cq[i], *y = &gq[i];
		if (!ngram_same(x, y))
			FAIL("ngrams #%zu scope %u len %u top %llu: cpu err %d, %zu runs; gpu err %d, %zu runs", i,
			     x->scope, x->len, (unsigned long long)x->top, x->err, x->ngrams, y->err, y->ngrams);
		td_ngram_req_free(&cq[i]);
		td_ngram_req_free(&gq[i]);
	}
	free(cq);
	free(gq);
	free(split);
}

/* gpu_batch --ngrams ARCHIVE (above). */
static int ngram_mode(const char *path)
{
	td_archive *a = NULL;
	td_gpu *g = NULL;
	int r = td_archive_open(path, 0, &a);
	if (!r)
		r = td_gpu_open(a, NULL, &g);
	if (r) {
		fprintf(stderr, "%s: %s (%s)\n", path, td_strerror(r), td_errdetail());
		return 1;
	}
	size_t n = 0, cap = 0;
	td_ngram_req *gq = NULL;
	char line[4096];
	while (fgets(line, sizeof line, stdin)) {
		line[strcspn(line, "\n")] = 0;
		char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
		if (!t2) {
			fprintf(stderr, "--ngrams: bad request line '%s'\n", line);
			return 1;
		}
		*t2 = 0;
		td_entry e = TD_ROOT;
		if (t2[1] && td_archive_lookup_path(a, t2 + 1, &e)) {
			fprintf(stderr, "--ngrams: no entry '%s'\n", t2 + 1);
			return 1;
		}
		if (n == cap) {
			cap = cap ? 2 * cap : 256;
			gq = realloc(gq, cap * sizeof *gq);
			if (!gq)
				return 1;
		}
		gq[n++] = (td_ngram_req){ .scope = e, .len = (unsigned)atoi(line), .top = strtoull(t1 + 1, NULL, 10) };
	}
	td_ngram_req *cq = calloc(n + 1, sizeof *cq);
	for (size_t i = 0; cq && i < n; i++)
		cq[i] = gq[i];
	uint32_t res = 0, units = 0;
	unsigned ndev = 0;
	td_gpu_residency(g, &res, &units, &ndev);
	fprintf(stderr, "%s: %u of %u units resident on %u devices\n", path, res, units, ndev);
	if (!cq || (r = td_gpu_ngram_batch(g, gq, n)) || (r = td_ngram_batch(a, cq, n, 0))) {
		fprintf(stderr, "--ngrams: batch of %zu: %s\n", n, td_strerror(r));
		return 1;
	}
	int bad = 0;
	for (size_t i = 0; i < n; i++) {
		const td_ngram_req *q = &gq[i];
		if (!ngram_same(q, &cq[i])) {
			fprintf(stderr, "--ngrams: request %zu differs from td_ngram_batch's\n", i);
			bad = 1;
		}
		printf("= %llu %d\n", (unsigned long long)scope_pieces(a, q->scope), q->err);
		for (size_t k = 0; k < q->ngrams; k++)
			printf("%llu\t%.*s\n", (unsigned long long)q->grams[k].count, (int)q->grams[k].len,
			       q->bytes + q->grams[k].off);
		td_ngram_req_free(&gq[i]);
		td_ngram_req_free(&cq[i]);
	}
	free(gq);
	free(cq);
	td_gpu_close(g);
	td_archive_close(a);
	return bad;
}

static int run_archive(const char *path, size_t maxbatch)
{
	td_archive *a = NULL;
	int r = td_archive_open(path, 0, &a);
	if (r) {
		fprintf(stderr, "%s: %s (%s)\n", path, td_strerror(r), td_errdetail());
		return 1;
	}
	corpus c;
	if ((r = corpus_init(&c, a))) {
		fprintf(stderr, "%s: %s\n", path, td_strerror(r));
		return 1;
	}
	char *scratch = malloc(1024);
	static const size_t sizes[] = {1, 7, 100, 1000, 10000, 100000};
	/* format 4: resident, CPU fallback, extract tuning; format 5: on
	 * every device, on device 0 alone, partly resident, CPU fallback */
	const int sharded = td_archive_version(a) == TD_VERSION_SHARDED;
	static const int modes4[] = {0, 1, 2}, modes5[] = {0, 3, 4, 1};
	const int *modes = sharded ? modes5 : modes4;
	const int nmodes = sharded ? 4 : 3;
	for (int mi = 0; mi < nmodes; mi++) {
		const int mode = modes[mi];
		td_gpu_opts o;
		td_gpu_opts_default(&o);
		if (mode == 0)
			o.qpart = 64; /* long counts and searches cut into many parts */
		if (mode == 1)
			o.mem_cap = 1; /* forces the CPU fallback */
		if (mode == 3)
			o.devices = 1; /* device 0 alone */
		if (mode == 4)
			o.mem_cap = 200u << 20; /* room for a few 1 MiB shards' batch buffers */
		if (mode == 2) { /* extract tuning: odd lane width, shortest warp
			          * segment, many pieces, no zero copy, seeking by
			          * the samples (mode 0: adaptive segments, small
			          * rounds zero copy, seeking by root offsets) */
			o.xchunk = 1000;
			o.seek_index = -1;
			o.xseg = 512;
			o.zc_bytes = UINT64_MAX; /* small rounds downloaded too */
			o.piece_bytes = 1 << 20;
			o.nstreams = 3;
		}
		if (mode != 1)
			o.blocking_sync = 1; /* as tadocfs opens it */
		td_gpu *g = NULL;
		if ((r = td_gpu_open(a, &o, &g))) {
			fprintf(stderr, "%s: td_gpu_open: %s (%s)\n", path, td_strerror(r), td_errdetail());
			return 1;
		}
		if (td_gpu_resident(g) != (mode != 1))
			FAIL("%s: resident=%d with mem_cap %llu", path, td_gpu_resident(g),
			     (unsigned long long)o.mem_cap);
		uint32_t res = 0, units = 0;
		unsigned ndev = 0;
		td_gpu_residency(g, &res, &units, &ndev);
		if (sharded && (mode == 0 || mode == 3) && res != units)
			FAIL("%s: %u of %u shards resident without a memory cap", path, res, units);
		if (sharded && mode == 0 && units >= 2 && td_gpu_device_count() >= 2 && ndev < 2)
			FAIL("%s: %u shards on %u device(s) of %d", path, units, ndev, td_gpu_device_count());
		if (sharded && mode == 3 && ndev != 1)
			FAIL("%s: shards on %u devices with devices = {0}", path, ndev);
		if (sharded && mode == 4 && units >= 4 && (res == 0 || res == units))
			FAIL("%s: %u of %u shards resident under mem_cap %llu: not partial", path, res, units,
			     (unsigned long long)o.mem_cap);
		printf("%s: %s (%s: %u of %u units on %u device(s)), opened in %.3f s\n", path, td_gpu_device_name(g),
		       td_gpu_resident(g) ? "resident" : "CPU fallback", res, units, ndev, td_gpu_open_seconds(g));
		for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
			size_t n = sizes[s];
			if (n > maxbatch || (mode == 1 && n > 1000))
				continue;
			int before = failures;
			check_extract(g, &c, n, 0, 0);
			check_extract(g, &c, n, 1, 0);
			if (mode == 2) {
				printf("  batch %6zu: extract (%u bytes a lane, %u a warp, pieces of 1 MiB, seeking by samples; also into host_alloc buffers) %s\n", n, o.xchunk, o.xseg,
				       failures == before ? "equal" : "DIFFER");
				fflush(stdout);
				continue;
			}
			check_count(g, &c, n, scratch);
			check_search(g, &c, n > 10000 ? 10000 : n, scratch);
			check_fuzzy(g, &c, n > 10000 ? 10000 : n, scratch);
			check_files(g, &c, n > 10000 ? 10000 : n, scratch);
			check_words(g, &c, n > 10000 ? 10000 : n, 1);
			check_words(g, &c, n > 10000 ? 10000 : n, 0);
			/* n-grams of directories cost about 40 ms a request here (the engine's
			 * and the emulated kernels'): 250 a batch at most; gpu_ngram_emu
			 * checks larger format 5 batches against the Python oracle */
			check_ngrams(g, &c, n > 250 ? 250 : n);
			printf("  batch %6zu: extract (also into host_alloc buffers), count, search, fuzzy, files, top, vector, ngrams %s\n", n,
			       failures == before ? "equal" : "DIFFER");
			fflush(stdout);
		}
		if (mode != 1 && (!sharded || mode == 0) && maxbatch < 40000) { /* a large round, where batches stay small */
			int before = failures;
			check_extract(g, &c, 40000, 0, 1);
			check_extract(g, &c, 40000, 1, 1);
			printf("  batch  40000: extract, 1 read in 32 not empty (also into host_alloc buffers) %s\n",
			       failures == before ? "equal" : "DIFFER");
			fflush(stdout);
		}
		td_gpu_close(g);
	}
	free(scratch);
	free(c.size);
	free(c.mode);
	td_archive_close(a);
	return 0;
}

int main(int argc, char **argv)
{
	if (!td_gpu_available()) {
		printf("no GPU: skipping the GPU tests (no usable CUDA device, or built without CUDA)\n");
		return 77;
	}
	if (argc == 3 && strcmp(argv[1], "--ngrams") == 0)
		return ngram_mode(argv[2]);
	const char *seed = getenv("TD_GPU_SEED");
	if (seed)
		rng = strtoull(seed, NULL, 0) | 1;
	size_t maxbatch = 100000;
	const char *mb = getenv("TD_GPU_MAXBATCH");
	if (mb)
		maxbatch = strtoull(mb, NULL, 0);
	int bad = 0, any = 0;
	for (int i = 1; i < argc; i++, any++)
		bad |= run_archive(argv[i], maxbatch);
	const char *env = getenv("TD_GPU_ARCHIVES");
	if (env && *env) {
		char *list = strdup(env);
		for (char *save = NULL, *p = strtok_r(list, ":", &save); p; p = strtok_r(NULL, ":", &save), any++)
			bad |= run_archive(p, maxbatch);
		free(list);
	}
	if (!any) {
		const char *sh = getenv("TD_GPU_SHARDED");
		const int sharded = sh && strcmp(sh, "1") == 0;
		char dir[] = "/tmp/td_gpu_testXXXXXX";
		if (!mkdtemp(dir)) {
			perror("mkdtemp");
			return 1;
		}
		char path[64];
		snprintf(path, sizeof path, "%s/adv.tadoc", dir);
		int r = build_adversarial(path, sharded);
		if (r) {
			fprintf(stderr, "building the adversarial archive: %s (%s)\n", td_strerror(r), td_errdetail());
			return 1;
		}
		bad |= run_archive(path, maxbatch);
		unlink(path);
		rmdir(dir);
	}
	if (failures || bad) {
		printf("FAILED: %d mismatches\n", failures);
		return 1;
	}
	printf("all GPU batches equal the CPU engine\n");
	return 0;
}
