/* engine_query: td_count / td_search and their batched forms against the Python oracle, per file, per directory, corpus-wide. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine_fixture.h"
#include "td_collect.h"
#include "td_extract.h"
#include "td_archive.h"
#include "td_query.h"

/* Path of entry e, cached for runs of hits in one file. */
static const char *entry_path(const td_archive *a, td_entry e)
{
	static char buf[8192];
	static td_entry last = TD_NOENTRY;
	static const td_archive *lasta;
	if (e != last || a != lasta) {
		int n = td_archive_path(a, e, buf, sizeof buf);
		cr_assert_geq(n, 0, "path of hit entry %u: %s", e, td_strerror(n));
		last = e;
		lasta = a;
	}
	return buf;
}

static td_entry scope_of(const td_archive *a, const tdt_query *q)
{
	td_entry e;
	int err = td_archive_lookup_path(a, q->scope, &e);
	cr_assert_eq(err, TD_OK, "scope '%s': %s", q->scope, td_strerror(err));
	return e;
}

static void show_word(const tdt_query *q, char *out, size_t cap)
{
	snprintf(out, cap, "%.*s%s", q->wlen > 60 ? 60 : (int)q->wlen, q->word, q->wlen > 60 ? "..." : "");
}

static void check_hits(const td_archive *a, const tdt_query *q, const td_hits *h, const char *how)
{
	char w[80];
	show_word(q, w, sizeof w);
	cr_assert_eq(h->n, q->count, "%s '%s' in '%s': %zu hits, oracle %llu", how, w, q->scope, h->n,
		     (unsigned long long)q->count);
	for (size_t k = 0; k < h->n; k++) {
		const char *p = entry_path(a, h->v[k].file);
		if (strcmp(p, q->hits[k].path) != 0 || h->v[k].off != q->hits[k].off)
			cr_assert_fail("%s '%s' in '%s': hit %zu is %s@%llu, oracle %s@%llu", how, w, q->scope, k, p,
				       (unsigned long long)h->v[k].off, q->hits[k].path,
				       (unsigned long long)q->hits[k].off);
	}
}

/* Every oracle query through td_count and td_search on an archive opened
 * with the given cache budget (UINT64_MAX: the default). With stride > 1 (the
 * heavy tree's passes that repeat the queries under other budgets) every
 * directory query and the file queries of every file of 4 KiB or more, but of
 * the tiny files (the heavy tree's 20,000 in many/, each the same path through
 * the engine) those of one in `stride`, starting at the phase-th: the passes
 * take turns, so that together they still ask every file. */
static void queries_equal_oracle_some(const char *archive, uint64_t budget, size_t stride, size_t phase)
{
	tdt_oracle *o = tdt_oracle_load();
	cr_assert_gt(o->nq, 100u);
	td_archive *a = tdt_open(archive, 0);
	if (budget != UINT64_MAX)
		td_archive_set_cache(a, budget);
	size_t nd = 0, nf = 0, file = 0, ent = 0;
	const char *last = NULL;
	for (size_t i = 0; i < o->nq; i++) {
		const tdt_query *q = &o->q[i];
		if (!q->dir && (!last || strcmp(q->scope, last) != 0)) { /* the next file's queries */
			last = q->scope;
			file++;
			while (ent < o->ne && strcmp(o->e[ent].path, q->scope) != 0)
				ent++;
			cr_assert_lt(ent, o->ne, "oracle: file query on '%s', not an entry in order", q->scope);
		}
		if (!q->dir && stride > 1 && o->e[ent].size < 4096 && file % stride != phase % stride)
			continue;
		td_entry s = scope_of(a, q);
		char w[80];
		show_word(q, w, sizeof w);
		cr_assert_eq(td_is_word(q->word, q->wlen), 1, "td_is_word('%s') is 0, Python says it is a word", w);
		uint64_t n = 777;
		int err = td_count(a, q->word, q->wlen, s, &n);
		cr_assert_eq(err, TD_OK, "count '%s' in '%s': %s (%s)", w, q->scope, td_strerror(err), td_errdetail());
		cr_assert_eq(n, q->count, "count '%s' in '%s': %llu, oracle %llu", w, q->scope, (unsigned long long)n,
			     (unsigned long long)q->count);
		td_hits h = {0};
		err = td_search(a, q->word, q->wlen, s, &h);
		cr_assert_eq(err, TD_OK, "search '%s' in '%s': %s (%s)", w, q->scope, td_strerror(err), td_errdetail());
		check_hits(a, q, &h, "search");
		td_hits_free(&h);
		q->dir ? nd++ : nf++;
	}
	cr_assert_gt(nd, 10u);
	cr_assert_gt(nf, 100u);
	td_archive_close(a);
	tdt_oracle_free(o);
}

static void queries_equal_oracle(const char *archive, uint64_t budget)
{
	queries_equal_oracle_some(archive, budget, 1, 0);
}

/* The passes over other budgets on the heavy tree: a sixth of its tiny files
 * each (six passes), every file on the small tree. */
#define TINY_STRIDE (tdt_heavy() ? 6u : 1u)

Test(query, count_and_search_equal_oracle)
{
	queries_equal_oracle("paths.tadoc", UINT64_MAX);
}

/* Format 3 (FOR-packed symbols, stored word offsets). */
Test(query, count_and_search_equal_oracle_format3)
{
	queries_equal_oracle("writer.tadoc", UINT64_MAX);
}

/* No decoded tables at all: every symbol comes from its coded tile. */
Test(query, count_and_search_equal_oracle_coded_tiles)
{
	queries_equal_oracle_some("paths.tadoc", 0, TINY_STRIDE, 5);
}

/* Budgets that hold some of the tables and not others: for the fixture's
 * archive, flat offsets without the symbol table and coded root symbols at
 * 256 KiB, with the symbol table at 512 KiB, flat root symbols from 1 MiB
 * on, and the query index from 2 MiB on; so queries over large scopes go
 * through the index or walk the root, over flat or coded sequences, and
 * every mix equals the oracle. */
Test(query, count_and_search_equal_oracle_every_budget)
{
	static const uint64_t budget[] = { 256 << 10, 512 << 10, 1 << 20, 2 << 20, 8 << 20 };
	for (size_t i = 0; i < sizeof budget / sizeof *budget; i++)
		queries_equal_oracle_some("paths.tadoc", budget[i], TINY_STRIDE, i);
}

/* td_search appends to a list that already holds hits. */
Test(query, search_appends)
{
	tdt_oracle *o = tdt_oracle_load();
	td_archive *a = tdt_open("paths.tadoc", 0);
	const tdt_query *q = NULL;
	for (size_t i = 0; i < o->nq && !q; i++)
		if (o->q[i].dir && o->q[i].count > 3 && o->q[i].count < 100000)
			q = &o->q[i];
	cr_assert_not_null(q);
	td_hits h = {0};
	td_entry s = scope_of(a, q);
	cr_assert_eq(td_search(a, q->word, q->wlen, s, &h), TD_OK);
	cr_assert_eq(td_search(a, q->word, q->wlen, s, &h), TD_OK);
	cr_assert_eq(h.n, 2 * q->count);
	for (size_t k = 0; k < q->count; k++) {
		cr_assert_eq(h.v[k].file, h.v[k + q->count].file);
		cr_assert_eq(h.v[k].off, h.v[k + q->count].off);
	}
	td_hits_free(&h);
	td_hits_free(&h); /* freeing twice is safe on a zeroed list */
	td_archive_close(a);
	tdt_oracle_free(o);
}

/* The batched forms equal the single calls, for 1, 2 and "all" threads,
 * with bad requests failing alone. */
Test(query, batches_equal_single_calls)
{
	tdt_oracle *o = tdt_oracle_load();
	td_archive *a = tdt_open("paths.tadoc", 0);
	size_t nbad = 4, n = o->nq + nbad;
	td_count_req *cr = calloc(n, sizeof *cr);
	td_search_req *sr = calloc(n, sizeof *sr);
	for (size_t i = 0; i < o->nq; i++) {
		cr[i].word = sr[i].word = o->q[i].word;
		cr[i].len = sr[i].len = o->q[i].wlen;
		cr[i].scope = sr[i].scope = scope_of(a, &o->q[i]);
	}
	static const struct {
		const char *w;
		int err;
	} bad[] = {{"two words", TD_ENOTWORD}, {"", TD_ENOTWORD}, {"a-b", TD_ENOTWORD}, {"ok", TD_EINVAL}};
	for (size_t b = 0; b < nbad; b++) {
		size_t i = o->nq + b;
		cr[i].word = sr[i].word = bad[b].w;
		cr[i].len = sr[i].len = strlen(bad[b].w);
		cr[i].scope = sr[i].scope = b == 3 ? td_archive_nentries(a) : TD_ROOT;
	}
	static const unsigned threads[] = {1, 2, 0};
	for (int t = 0; t < 3; t++) {
		for (size_t i = 0; i < n; i++) {
			cr[i].count = 12345;
			cr[i].err = 777;
			sr[i].err = 777;
			memset(&sr[i].hits, 0, sizeof sr[i].hits);
		}
		cr_assert_eq(td_count_batch(a, cr, n, threads[t]), TD_OK);
		cr_assert_eq(td_search_batch(a, sr, n, threads[t]), TD_OK);
		for (size_t i = 0; i < o->nq; i++) {
			const tdt_query *q = &o->q[i];
			uint64_t single;
			cr_assert_eq(td_count(a, q->word, q->wlen, cr[i].scope, &single), TD_OK);
			cr_assert_eq(cr[i].err, TD_OK, "count batch %zu: %s", i, td_strerror(cr[i].err));
			cr_assert_eq(cr[i].count, single, "count batch %zu (%u threads) differs from td_count", i, threads[t]);
			cr_assert_eq(sr[i].err, TD_OK, "search batch %zu: %s", i, td_strerror(sr[i].err));
			check_hits(a, q, &sr[i].hits, "search batch");
			td_hits_free(&sr[i].hits);
		}
		for (size_t b = 0; b < nbad; b++) {
			size_t i = o->nq + b;
			cr_assert_eq(cr[i].err, bad[b].err, "bad count request '%s': %d", bad[b].w, cr[i].err);
			cr_assert_eq(sr[i].err, bad[b].err, "bad search request '%s': %d", bad[b].w, sr[i].err);
			td_hits_free(&sr[i].hits);
		}
	}
	cr_assert_eq(td_count_batch(a, cr, 0, 0), TD_OK);
	cr_assert_eq(td_search_batch(a, sr, 0, 2), TD_OK);
	free(cr);
	free(sr);
	td_archive_close(a);
	tdt_oracle_free(o);
}

/* Decision 2 at the API edge: what is and is not one word. */
Test(query, word_definition_and_errors)
{
	static const char *const yes[] = {"a", "_", "word", "x86_64", "naïve", "日本語", "٣٤", "²", "Ⅻ", "ǅemal",
					  "𝔘𝔫𝔦", "__init__", "ﬁne", "ｆｕｌｌ"};
	static const char *const no[] = {"", " ", "a b", "a-b", "a.b", "don't", "e\xcc\x81", "\xcc\x81", "\xff",
					 "ab\xff", "a\n", "\0", "😀", "a\xc2\xa0", "\xed\xa0\x80", "\xc0\xaf"};
	for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
		cr_assert_eq(td_is_word(yes[i], strlen(yes[i])), 1, "'%s' should be a word", yes[i]);
	for (size_t i = 0; i < sizeof no / sizeof *no; i++)
		cr_assert_eq(td_is_word(no[i], strlen(no[i]) + (no[i][0] == 0)), 0, "'%s' should not be a word", no[i]);
	td_archive *a = tdt_open("paths.tadoc", 0);
	uint64_t n;
	td_hits h = {0};
	for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
		size_t l = strlen(no[i]) + (no[i][0] == 0);
		cr_assert_eq(td_count(a, no[i], l, TD_ROOT, &n), TD_ENOTWORD, "count of non-word '%s'", no[i]);
		cr_assert_eq(td_search(a, no[i], l, TD_ROOT, &h), TD_ENOTWORD, "search of non-word '%s'", no[i]);
		cr_assert_eq(h.n, 0u);
	}
	cr_assert_eq(td_count(a, "the", 3, td_archive_nentries(a), &n), TD_EINVAL);
	cr_assert_eq(td_search(a, "the", 3, td_archive_nentries(a), &h), TD_EINVAL);
	/* Absent words count 0; symlinks count nothing; a word is matched whole. */
	cr_assert_eq(td_count(a, "qqqzzzabsent", 12, TD_ROOT, &n), TD_OK);
	cr_assert_eq(n, 0u);
	td_entry e;
	cr_assert_eq(td_archive_lookup_path(a, "links/rel", &e), TD_OK);
	cr_assert_eq(td_count(a, "the", 3, e, &n), TD_OK);
	cr_assert_eq(n, 0u);
	cr_assert_eq(td_archive_lookup_path(a, "periodic/sentence.txt", &e), TD_OK);
	uint64_t fox, fo;
	cr_assert_eq(td_count(a, "fox", 3, e, &fox), TD_OK);
	cr_assert_eq(td_count(a, "fo", 2, e, &fo), TD_OK);
	cr_assert_gt(fox, 1000u);
	cr_assert_eq(fo, 0u);
	/* The word count of a directory is the sum over its files. */
	td_entry first;
	uint32_t cnt;
	cr_assert_eq(td_archive_lookup_path(a, "text", &e), TD_OK);
	cr_assert_eq(td_archive_children(a, e, &first, &cnt), TD_OK);
	uint64_t sum = 0, dir;
	for (uint32_t k = 0; k < cnt; k++) {
		uint64_t c;
		cr_assert_eq(td_count(a, "the", 3, first + k, &c), TD_OK);
		sum += c;
	}
	cr_assert_eq(td_count(a, "the", 3, e, &dir), TD_OK);
	cr_assert_eq(dir, sum);
	cr_assert_gt(dir, 0u);
	td_archive_close(a);
}

/* td_extract.h: "*got receives the bytes copied: min(len, size - off), 0 at
 * or past EOF". pos + len wrapped past 2^64, so the read was not clamped:
 * TD_ECORRUPT, or a read of the seek's unset token state (SEGV). */
Test(query, extract_offsets_near_2_64)
{
	td_archive *a = tdt_open("paths.tadoc", 0);
	td_entry e = TD_NOENTRY;
	for (td_entry i = 1; i < td_archive_nentries(a) && e == TD_NOENTRY; i++) {
		td_stat st;
		cr_assert_eq(td_archive_stat(a, i, &st), TD_OK);
		if (S_ISREG(st.mode) && st.size >= 4)
			e = i;
	}
	cr_assert_neq(e, TD_NOENTRY);
	td_stat st;
	td_archive_stat(a, e, &st);
	char buf[64];
	size_t got = 99;
	cr_assert_eq(td_extract(a, e, UINT64_MAX, buf, 10, &got), TD_OK, "%s", td_errdetail());
	cr_assert_eq(got, 0);
	cr_assert_eq(td_extract(a, e, st.size - 3, buf, SIZE_MAX, &got), TD_OK, "%s", td_errdetail());
	cr_assert_eq(got, 3);
	td_cursor *c = td_cursor_new(a);
	cr_assert_eq(td_cursor_read(c, e, UINT64_MAX - 1, buf, sizeof buf, &got), TD_OK, "%s", td_errdetail());
	cr_assert_eq(got, 0);
	td_cursor_free(c);
	td_extract_req r = { .file = e, .off = UINT64_MAX, .len = 10, .buf = buf };
	cr_assert_eq(td_extract_batch(a, &r, 1, 1), TD_OK);
	cr_assert_eq(r.err, TD_OK, "%s", td_strerror(r.err));
	cr_assert_eq(r.got, 0);
	td_archive_close(a);
}

/* td_collect.h: "TD_EINVAL for a scope out of range" (format 4 said TD_OK). */
Test(query, term_vector_nparts_bad_scope)
{
	td_archive *a = tdt_open("paths.tadoc", 0);
	uint32_t np = 0;
	cr_assert_eq(td_term_vector_nparts(a, td_archive_nentries(a), &np), TD_EINVAL);
	td_archive_close(a);
}

int main(int argc, char **argv)
{
	return tdt_main(argc, argv, TDT_TREE | TDT_ARCHIVE | TDT_WRITER | TDT_ORACLE);
}
