/* engine_shard_read: format 5 reads through cursors and td_extract: reads across piece cuts, cursors hopping between shards, concurrent readers on a fresh open; term vectors in parts (td_collect.h). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine_fixture.h"
#include "td_archive.h"
#include "td_build.h"
#include "td_collect.h"
#include "td_extract.h"
#include "td_format.h"
#include "td_analytics.h"
#include <stddef.h>
#include <xxhash.h>

#define NSMALL 40
#define NFILES (NSMALL + 3)
#define NTHREADS 8

static const char *const vocab[] = { "whale", "sea", "ship", "the", "of", "harpoon", "Queequeg", "captain",
				     "deck", "mast", "a", "in", "white", "line", "boat", "\xc3\xa9t\xc3\xa9" };

/* File i's path and text (deterministic, malloc'd): NSMALL small files in
 * four directories, then big/words.txt (about 150 KB, split over many
 * shards), big/run.txt (one 48 KB word: cut inside it) and big/lines.txt
 * (60 KB, CRLF lines). */
static char *text_of(unsigned i, size_t *len, char *path, size_t cap)
{
	uint64_t st = 0x9e3779b97f4a7c15u * (i + 7);
	size_t n = i < NSMALL ? 200 + (size_t)(tdt_rand(&st) % 7000) : i == NSMALL ? 150000 : i == NSMALL + 1 ? 48000 : 60000;
	char *t = malloc(n + 64);
	cr_assert_not_null(t);
	size_t at = 0;
	if (i == NSMALL + 1) {
		for (; at < n; at++)
			t[at] = (char)('a' + at % 26);
	} else {
		while (at < n) {
			const char *w = vocab[tdt_rand(&st) % (sizeof vocab / sizeof *vocab)];
			const char *sep = i == NSMALL + 2 ? (tdt_rand(&st) % 7 ? " " : ".\r\n") : tdt_rand(&st) % 9 ? " " : ".\n";
			at += (size_t)sprintf(t + at, "%s%s", w, sep);
		}
	}
	*len = at;
	if (i < NSMALL)
		snprintf(path, cap, "d%u/f%02u.txt", i % 4, i);
	else
		snprintf(path, cap, "big/%s", i == NSMALL ? "words.txt" : i == NSMALL + 1 ? "run.txt" : "lines.txt");
	return t;
}

/* The originals, made once per process. */
static char *orig[NFILES];
static size_t olen[NFILES];
static char opath[NFILES][32];

static void originals(void)
{
	if (orig[0])
		return;
	for (unsigned i = 0; i < NFILES; i++)
		orig[i] = text_of(i, &olen[i], opath[i], sizeof opath[i]);
}

/* The archive: 16 KiB shards, built once per worker process. */
static const char *archive(void)
{
	originals();
	const char *out = tdt_path("read5.tadoc");
	struct stat st;
	if (stat(out, &st) == 0)
		return out;
	td_build *b = tdt_build_new(16 << 10);
	const char *dirs[] = { "big", "d0", "d1", "d2", "d3" };
	for (unsigned d = 0; d < 5; d++)
		cr_assert_eq(td_build_add_dir(b, dirs[d], 0755, 1700000000, 0), TD_OK, "%s", td_errdetail());
	for (unsigned i = 0; i < NFILES; i++)
		cr_assert_eq(td_build_add_file(b, opath[i], 0644, 1700000000, 0, orig[i], olen[i]), TD_OK, "%s",
			     td_errdetail());
	tdt_build_finish(b, out);
	return out;
}

static td_entry entry_of(const td_archive *a, unsigned i)
{
	td_entry e;
	cr_assert_eq(td_archive_lookup_path(a, opath[i], &e), TD_OK, "%s", opath[i]);
	return e;
}

/* Read file i's [off, off + len) through c (or td_extract when c is NULL)
 * and compare with the original: 1 when equal. */
static int read_same(const td_archive *a, td_cursor *c, td_entry e, unsigned i, uint64_t off, size_t len, char *buf)
{
	size_t got = 0;
	int err = c ? td_cursor_read(c, e, off, buf, len, &got) : td_extract(a, e, off, buf, len, &got);
	size_t want = off >= olen[i] ? 0 : olen[i] - off < len ? olen[i] - off : len;
	return err == TD_OK && got == want && memcmp(buf, orig[i] + (off < olen[i] ? off : 0), want) == 0;
}

/* Through one cursor: reads around every cut of the split files (ending
 * at it, starting at it, crossing it by 1 byte and by more), the whole
 * file in one call and in odd chunk sizes, the two largest files read in
 * turn, then a directory and the end of a file. */
Test(shard_read, cursor_across_cuts)
{
	td_archive *a;
	cr_assert_eq(td_archive_open(archive(), 0, &a), TD_OK, "%s", td_errdetail());
	cr_assert_gt(td_archive_nshards(a), 8u);
	char *buf = malloc(200000);
	cr_assert_not_null(buf);
	td_cursor *c = td_cursor_new(a);
	cr_assert_not_null(c);
	unsigned split = 0;
	for (unsigned i = 0; i < NFILES; i++) {
		td_entry e = entry_of(a, i);
		const td_disk_piece *p;
		uint64_t n;
		cr_assert_eq(td_archive_pieces(a, e, &p, &n), TD_OK);
		split += n > 1;
		for (uint64_t k = 1; k < n; k++) {
			uint64_t cut = p[k].start;
			static const uint64_t before[] = { 1, 2, 7, 100, 0 };
			static const size_t span[] = { 1, 5, 300, 20000 };
			for (unsigned b = 0; b < 5; b++)
				for (unsigned s = 0; s < 4; s++) {
					cr_assert(read_same(a, c, e, i, cut - before[b], before[b] + span[s], buf),
						  "%s: cursor [%llu -%llu, +%zu)", opath[i], (unsigned long long)cut,
						  (unsigned long long)before[b], span[s]);
					cr_assert(read_same(a, NULL, e, i, cut - before[b], before[b] + span[s], buf),
						  "%s: extract at cut %llu", opath[i], (unsigned long long)cut);
				}
			/* up to the cut, then on from it: the cursor continues */
			cr_assert(read_same(a, c, e, i, cut - 50, 50, buf));
			cr_assert(read_same(a, c, e, i, cut, 50, buf));
		}
		cr_assert(read_same(a, c, e, i, 0, olen[i] + 10, buf), "%s whole", opath[i]);
		static const size_t chunk[] = { 1, 3, 4096, 17, 65536, 999, 2 };
		for (uint64_t off = 0, k = 0; off < olen[i]; off += chunk[k % 7], k++)
			cr_assert(read_same(a, c, e, i, off, chunk[k % 7], buf), "%s chunk @%llu", opath[i],
				  (unsigned long long)off);
		cr_assert(read_same(a, c, e, i, olen[i], 10, buf), "%s at EOF", opath[i]);
		cr_assert(read_same(a, c, e, i, olen[i] + 5, 10, buf), "%s past EOF", opath[i]);
	}
	cr_assert_geq(split, 3u, "split files: %u", split);
	/* two split files in turn, 777 bytes at a time: the cursor moves
	 * between shards and back */
	td_entry e0 = entry_of(a, NSMALL), e2 = entry_of(a, NSMALL + 2);
	for (uint64_t off = 0; off < olen[NSMALL]; off += 777) {
		cr_assert(read_same(a, c, e0, NSMALL, off, 777, buf), "words @%llu", (unsigned long long)off);
		cr_assert(read_same(a, c, e2, NSMALL + 2, off, 777, buf), "lines @%llu", (unsigned long long)off);
	}
	/* a directory after a file read: still EISDIR */
	td_entry d;
	size_t got = 1;
	cr_assert_eq(td_archive_lookup_path(a, "big", &d), TD_OK);
	cr_assert(read_same(a, c, e0, NSMALL, 10, 10, buf));
	cr_assert_eq(td_cursor_read(c, d, 0, buf, 10, &got), TD_EISDIR);
	cr_assert_eq(td_cursor_read(c, TD_NOENTRY - 1, 0, buf, 10, &got), TD_EINVAL);
	cr_assert(read_same(a, c, e0, NSMALL, 20, 10, buf));
	td_cursor_free(c);
	free(buf);
	td_archive_close(a);
}

/* One reader's random reads: half continue where the last one ended
 * (the cursor's piece), the rest at a random file and offset, any length
 * up to 9,000 bytes; through its cursor, every tenth through td_extract. */
typedef struct job {
	td_archive *a;
	uint64_t seed;
	unsigned nreads;
	unsigned bad;
	char what[160];
} job;

static void reader(void *arg)
{
	job *j = arg;
	char *buf = malloc(9001);
	td_cursor *c = td_cursor_new(j->a);
	td_entry ent[NFILES];
	if (!buf || !c) {
		j->bad++;
		goto out;
	}
	for (unsigned i = 0; i < NFILES; i++)
		if (td_archive_lookup_path(j->a, opath[i], &ent[i]))
			j->bad++;
	uint64_t st = j->seed;
	unsigned i = 0;
	uint64_t off = 0;
	for (unsigned r = 0; r < j->nreads && !j->bad; r++) {
		uint64_t x = tdt_rand(&st);
		size_t len = 1 + (size_t)(tdt_rand(&st) % (x & 1 ? 9000 : 200));
		if (x & 2) { /* a random file (the big ones a third of the time) and offset */
			i = x % 3 == 0 ? NSMALL + (unsigned)((x >> 8) % 3) : (unsigned)((x >> 8) % NFILES);
			off = tdt_rand(&st) % (olen[i] + 1);
		}
		int viac = r % 10 != 0;
		if (!read_same(j->a, viac ? c : NULL, ent[i], i, off, len, buf)) {
			j->bad++;
			snprintf(j->what, sizeof j->what, "read %u: %s [%llu, +%zu) via %s", r, opath[i],
				 (unsigned long long)off, len, viac ? "cursor" : "extract");
		}
		off += len;
	}
out:
	td_cursor_free(c);
	free(buf);
}

Test(shard_read, random_cursor_reads)
{
	td_archive *a;
	cr_assert_eq(td_archive_open(archive(), 0, &a), TD_OK, "%s", td_errdetail());
	job j = { a, 42, 20000, 0, "" };
	reader(&j);
	cr_assert_eq(j.bad, 0u, "%s", j.what);
	td_archive_close(a);
}

/* NTHREADS readers released together on a fresh open (the shards open and
 * the rule caches fill under them), each with its own cursor. */
Test(shard_read, concurrent_readers)
{
	const char *arc = archive();
	for (unsigned round = 0; round < 6; round++) {
		td_archive *a;
		cr_assert_eq(td_archive_open(arc, 0, &a), TD_OK, "%s", td_errdetail());
		job jobs[NTHREADS];
		for (unsigned t = 0; t < NTHREADS; t++)
			jobs[t] = (job){ a, 1000u * round + t + 1, 3000, 0, "" };
		tdt_threads(NTHREADS, reader, jobs, sizeof *jobs);
		for (unsigned t = 0; t < NTHREADS; t++)
			cr_assert_eq(jobs[t].bad, 0u, "round %u thread %u: %s", round, t, jobs[t].what);
		td_archive_close(a);
	}
}

/* One thread reading archives opened and closed in turn, two at a time:
 * a thread's rule-cache blocks of a closed archive are never used again. */
Test(shard_read, reopened_archives)
{
	const char *arc = archive();
	td_archive *keep;
	cr_assert_eq(td_archive_open(arc, 0, &keep), TD_OK, "%s", td_errdetail());
	for (unsigned round = 0; round < 12; round++) {
		td_archive *a;
		cr_assert_eq(td_archive_open(arc, 0, &a), TD_OK, "%s", td_errdetail());
		job j = { a, 7u + round, 1500, 0, "" }, k = { keep, 99u + round, 500, 0, "" };
		reader(&j);
		reader(&k);
		cr_assert_eq(j.bad + k.bad, 0u, "round %u: %s%s", round, j.what, k.what);
		td_archive_close(a);
	}
	td_archive_close(keep);
}

static void same_counts(const td_word_counts *x, const td_word_counts *y, const char *what)
{
	cr_assert_eq(x->n, y->n, "%s: %zu words, want %zu", what, x->n, y->n);
	cr_assert_eq(x->len, y->len, "%s: %zu bytes of words, want %zu", what, x->len, y->len);
	cr_assert(x->len == 0 || memcmp(x->words, y->words, x->len) == 0, "%s: words differ", what);
	cr_assert(x->n == 0 || memcmp(x->count, y->count, x->n * sizeof *x->count) == 0, "%s: counts differ", what);
}

/* Every scope's term vector parts added up (td_word_counts_merge) equal
 * td_term_vector; ranked (td_word_counts_top) they equal td_top_words. A
 * scope holding the word cut between shards (big/run.txt: the root, big)
 * is one part; a file split at separators (big/words.txt) one part a
 * piece. */
Test(shard_read, term_vector_parts)
{
	td_archive *a;
	cr_assert_eq(td_archive_open(archive(), 0, &a), TD_OK, "%s", td_errdetail());
	static const char *const scopes[] = { "", "big", "big/words.txt", "big/run.txt", "big/lines.txt", "d0", "d1",
					      "d2", "d3", "d0/f00.txt" };
	unsigned multi = 0;
	for (unsigned i = 0; i < sizeof scopes / sizeof *scopes; i++) {
		td_entry e = TD_ROOT;
		if (*scopes[i])
			cr_assert_eq(td_archive_lookup_path(a, scopes[i], &e), TD_OK, "%s", scopes[i]);
		uint32_t np = 0;
		cr_assert_eq(td_term_vector_nparts(a, e, &np), TD_OK, "%s: %s", scopes[i], td_errdetail());
		const td_disk_piece *p;
		uint64_t npieces;
		cr_assert_eq(td_archive_pieces(a, e, &p, &npieces), TD_OK);
		if (td_archive_cut_in_word(a, e))
			cr_assert_eq(np, 1u, "%s holds a word cut between shards: one part, not %u", scopes[i], np);
		else
			cr_assert_eq(np, npieces > 1 ? npieces : 1, "%s: %u parts for %llu pieces", scopes[i], np,
				     (unsigned long long)npieces);
		multi += np > 1;
		td_word_counts *parts = calloc(np, sizeof *parts), whole, merged, top, want;
		cr_assert_not_null(parts);
		for (uint32_t k = 0; k < np; k++)
			cr_assert_eq(td_term_vector_part_collect(a, e, k, &parts[k]), TD_OK, "%s part %u: %s", scopes[i], k,
				     td_errdetail());
		cr_assert_eq(td_term_vector_part_collect(a, e, np, &whole), TD_EINVAL, "%s: part %u of %u", scopes[i],
			     np, np);
		cr_assert_eq(whole.n, 0u);
		cr_assert_eq(td_term_vector_collect(a, e, &whole), TD_OK);
		cr_assert_eq(td_word_counts_merge(parts, np, &merged), TD_OK, "%s: %s", scopes[i], td_errdetail());
		same_counts(&merged, &whole, scopes[i]);
		for (uint64_t n = 0; n <= 7; n += 7) {
			cr_assert_eq(td_word_counts_top(&merged, n, &top), TD_OK);
			cr_assert_eq(td_top_words_collect(a, e, n, &want), TD_OK);
			same_counts(&top, &want, scopes[i]);
			td_word_counts_free(&top);
			td_word_counts_free(&want);
		}
		/* merging the merge with itself doubles every count */
		td_word_counts two[2] = { merged, merged }, twice;
		cr_assert_eq(td_word_counts_merge(two, 2, &twice), TD_OK);
		cr_assert_eq(twice.n, merged.n);
		for (size_t w = 0; w < twice.n; w++)
			cr_assert_eq(twice.count[w], 2 * merged.count[w]);
		td_word_counts_free(&twice);
		for (uint32_t k = 0; k < np; k++)
			td_word_counts_free(&parts[k]);
		free(parts);
		td_word_counts_free(&whole);
		td_word_counts_free(&merged);
	}
	cr_assert_geq(multi, 2u, "scopes of several parts: %u", multi);
	/* lists that are not what the contract asks */
	char bad[] = "sea\nharpoon\n", dup[] = "sea\nsea\n", nonl[] = "sea\nship";
	uint64_t cnt[2] = { 1, 2 };
	td_word_counts in = { bad, sizeof bad - 1, cnt, 2 }, out;
	cr_assert_eq(td_word_counts_merge(&in, 1, &out), TD_EINVAL, "out of order");
	cr_assert_eq(out.n, 0u);
	in = (td_word_counts){ dup, sizeof dup - 1, cnt, 2 };
	cr_assert_eq(td_word_counts_merge(&in, 1, &out), TD_EINVAL, "a word twice");
	in = (td_word_counts){ nonl, sizeof nonl - 1, cnt, 2 };
	cr_assert_eq(td_word_counts_merge(&in, 1, &out), TD_EINVAL, "no last newline");
	cr_assert_eq(td_word_counts_top(&in, 1, &out), TD_EINVAL, "no last newline");
	in = (td_word_counts){ bad, sizeof bad - 1, cnt, 3 };
	cr_assert_eq(td_word_counts_top(&in, 0, &out), TD_EINVAL, "3 words counted, 2 there");
	cr_assert_eq(td_word_counts_merge(NULL, 0, &out), TD_OK);
	cr_assert_eq(out.n, 0u);
	td_word_counts_free(&out);
	td_archive_close(a);
}

int main(int argc, char **argv)
{
	return tdt_main(argc, argv, 0);
}

static int count_runs(void *ctx, const char *const *w, const size_t *l, unsigned n, uint64_t c)
{
	(void)w;
	(void)l;
	(void)n;
	*(uint64_t *)ctx += c;
	return TD_OK;
}

/* The container's copy of p with one byte of the first `name` in NAMES
 * replaced by '/' (a name the tree check refuses), every container
 * checksum recomputed (the shard images are untouched). */
static const char *damage_name(const char *p, const char *name, const char *out)
{
	size_t len;
	uint8_t *b = tdt_slurp(p, &len);
	cr_assert_not_null(b);
	td_disk_header *h = (td_disk_header *)b;
	td_disk_section *t = (td_disk_section *)(b + h->sectab_off);
	int done = 0;
	for (uint32_t i = 0; i < h->nsections; i++)
		if (t[i].id == TD_SEC_NAMES) {
			cr_assert_eq(t[i].flags & TD_SECF_ZSTD, 0, "container names stored plain");
			uint8_t *at = memmem(b + t[i].off, t[i].size, name, strlen(name));
			cr_assert_not_null(at, "%s in the names", name);
			at[1] = '/';
			t[i].sum = XXH3_64bits(b + t[i].off, t[i].size);
			done = 1;
		}
	cr_assert(done);
	h->sectab_sum = XXH3_64bits(t, h->nsections * sizeof *t);
	h->header_sum = XXH3_64bits(b, offsetof(td_disk_header, header_sum));
	const char *q = tdt_path(out);
	cr_assert_eq(tdt_spit(q, b, len), 0);
	free(b);
	return q;
}

/* Runs across the cuts of a split file are added by a walk that looks the
 * file up in the tree: a damaged directory met there (checksums right,
 * lazy tree) is an error or leaves the answer whole, never a smaller
 * answer with TD_OK (it dropped the runs across the cuts). */
Test(shard_read, damaged_tree_never_drops_runs_across_cuts)
{
	const char *p = archive();
	td_archive *a;
	cr_assert_eq(td_archive_open(p, 0, &a), TD_OK, "%s", td_errdetail());
	td_entry big = entry_of(a, NSMALL);
	uint64_t want_root = 0, want_big = 0, want_ph = 0, got, ph;
	cr_assert_eq(td_ngrams(a, TD_ROOT, 2, 0, count_runs, &want_root), TD_OK);
	cr_assert_eq(td_ngrams(a, big, 2, 0, count_runs, &want_big), TD_OK);
	cr_assert_eq(td_phrase_count(a, "whale sea", 9, TD_ROOT, &want_ph), TD_OK);
	td_archive_close(a);
	/* 'd1' -> 'd/': the root directory is damaged (stat of big/ fails);
	 * 'lines.txt' -> 'l/nes.txt': big/ is (stat of big/words.txt fails) */
	const char *bad[] = { damage_name(p, "d1", "read5-d1.tadoc"), damage_name(p, "lines.txt", "read5-lines.tadoc") };
	for (unsigned k = 0; k < 2; k++) {
		cr_assert_eq(td_archive_open(bad[k], TD_OPEN_LAZY_TREE, &a), TD_OK, "%s", td_errdetail());
		got = 0;
		int err = td_ngrams(a, TD_ROOT, 2, 0, count_runs, &got);
		cr_expect(err != TD_OK || got == want_root, "root: %llu runs of %llu with TD_OK", (unsigned long long)got,
			  (unsigned long long)want_root);
		got = 0;
		err = td_ngrams(a, big, 2, 0, count_runs, &got);
		cr_expect(err != TD_OK || got == want_big, "big/: %llu runs of %llu with TD_OK", (unsigned long long)got,
			  (unsigned long long)want_big);
		ph = 0;
		err = td_phrase_count(a, "whale sea", 9, TD_ROOT, &ph);
		cr_expect(err != TD_OK || ph == want_ph, "'whale sea': %llu of %llu with TD_OK", (unsigned long long)ph,
			  (unsigned long long)want_ph);
		td_archive_close(a);
	}
}

static int count_words(void *ctx, const char *w, size_t len, uint64_t c)
{
	(void)w;
	(void)len;
	*(uint64_t *)ctx += c;
	return TD_OK;
}

/* Damage inside one shard (a byte of its NAMES, checksums left stale: what
 * a bad disk does) reached by a query of a directory: an error, never the
 * other shards' part of the answer with TD_OK (a shard's directory that
 * does not check was taken for an empty one). */
Test(shard_read, damaged_shard_tree_is_an_error_not_an_empty_directory)
{
	const char *p = archive();
	size_t len;
	uint8_t *b = tdt_slurp(p, &len);
	cr_assert_not_null(b);
	td_archive *a;
	cr_assert_eq(td_archive_open(p, 0, &a), TD_OK, "%s", td_errdetail());
	td_entry d0;
	cr_assert_eq(td_archive_lookup_path(a, "d0", &d0), TD_OK);
	uint64_t want_c = 0, want_t = 0, want_v = 0;
	cr_assert_eq(td_count(a, "whale", 5, d0, &want_c), TD_OK);
	cr_assert_eq(td_top_words(a, d0, 0, count_words, &want_t), TD_OK);
	cr_assert_eq(td_term_vector(a, d0, count_words, &want_v), TD_OK);
	const td_disk_piece *pc;
	uint64_t np;
	cr_assert_eq(td_archive_pieces(a, d0, &pc, &np), TD_OK);
	cr_assert_gt(np, 0);
	uint32_t shard = pc[0].shard;
	td_archive_close(a);
	/* shard `shard`'s image: its NAMES section's middle byte */
	td_disk_header *h = (td_disk_header *)b;
	td_disk_section *t = (td_disk_section *)(b + h->sectab_off);
	for (uint32_t i = 0; i < h->nsections; i++)
		if (t[i].id == TD_SEC5_SHARDS) {
			const td_disk_shard *sh = (const td_disk_shard *)(b + t[i].off) + shard;
			uint8_t *img = b + sh->off;
			td_disk_header *sh_h = (td_disk_header *)img;
			td_disk_section *st = (td_disk_section *)(img + sh_h->sectab_off);
			for (uint32_t j = 0; j < sh_h->nsections; j++)
				if (st[j].id == TD_SEC_NAMES)
					img[st[j].off + st[j].size / 2] ^= 0x55;
		}
	const char *q = tdt_path("read5-shardnames.tadoc");
	cr_assert_eq(tdt_spit(q, b, len), 0);
	free(b);
	cr_assert_eq(td_archive_open(q, TD_OPEN_LAZY_TREE, &a), TD_OK, "%s", td_errdetail());
	uint64_t c = 0, tw = 0, tv = 0;
	int err = td_count(a, "whale", 5, d0, &c);
	cr_expect(err != TD_OK || c == want_c, "count: %llu of %llu with TD_OK", (unsigned long long)c,
		  (unsigned long long)want_c);
	err = td_top_words(a, d0, 0, count_words, &tw);
	cr_expect(err != TD_OK || tw == want_t, "top: %llu of %llu with TD_OK", (unsigned long long)tw,
		  (unsigned long long)want_t);
	err = td_term_vector(a, d0, count_words, &tv);
	cr_expect(err != TD_OK || tv == want_v, "vector: %llu of %llu with TD_OK", (unsigned long long)tv,
		  (unsigned long long)want_v);
	td_archive_close(a);
}
