/* engine_roundtrip: byte-exact round trip of the adversarial tree through both writers, extract, cursors, lookups. */
#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine_fixture.h"
#include "td_archive.h"
#include "td_extract.h"
#include "td_format.h"
#include "td_grammar.h"
#include "td_query.h"
#include "td_writer.h"

/* ---- the original tree, walked independently of the engine ---- */

typedef struct orig {
	char *rel;
	struct stat st;
} orig;

static orig *g_o;
static size_t g_no, g_cap, g_rootlen;

static int walk_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)flag;
	if (ftw->level == 0)
		return 0;
	if (g_no == g_cap) {
		g_cap = g_cap ? 2 * g_cap : 1024;
		g_o = realloc(g_o, g_cap * sizeof *g_o);
		cr_assert_not_null(g_o);
	}
	g_o[g_no].rel = strdup(path + g_rootlen + 1);
	g_o[g_no].st = *st;
	g_no++;
	return 0;
}

static void walk_tree(void)
{
	if (g_o)
		return;
	const char *root = tdt_path("tree");
	g_rootlen = strlen(root);
	cr_assert_eq(nftw(root, walk_cb, 64, FTW_PHYS), 0, "walking the original tree");
	cr_assert_gt(g_no, 100u);
}

static char *orig_data(const orig *o, size_t *len)
{
	char full[8192];
	snprintf(full, sizeof full, "%s/%s", tdt_path("tree"), o->rel);
	if (S_ISLNK(o->st.st_mode)) {
		char *t = malloc(4096);
		ssize_t n = readlink(full, t, 4095);
		cr_assert_geq(n, 0);
		*len = (size_t)n;
		return t;
	}
	char *d = tdt_slurp(full, len);
	cr_assert_not_null(d, "reading original %s", o->rel);
	return d;
}

static void assert_same(const char *what, const char *rel, uint64_t off, const void *got, size_t ngot,
			const void *want, size_t nwant)
{
	cr_assert_eq(ngot, nwant, "%s %s @%llu: got %zu bytes, want %zu", what, rel, (unsigned long long)off, ngot,
		     nwant);
	if (memcmp(got, want, ngot) != 0) {
		size_t i = 0;
		while (((const char *)got)[i] == ((const char *)want)[i])
			i++;
		cr_assert_fail("%s %s @%llu: first difference at byte %zu of %zu", what, rel, (unsigned long long)off, i,
			       ngot);
	}
}

static td_entry lookup(const td_archive *a, const char *rel)
{
	td_entry e = TD_NOENTRY;
	int err = td_archive_lookup_path(a, rel, &e);
	cr_assert_eq(err, TD_OK, "lookup %s: %s (%s)", rel, td_strerror(err), td_errdetail());
	return e;
}

/* Every entry: type, permissions, mtime, size, and the bytes read sequentially
 * through a cursor in random chunk sizes, then in one td_extract call. */
static void check_tree(const char *archive)
{
	walk_tree();
	td_archive *a = tdt_open(archive, 0);
	cr_assert_eq(td_archive_nentries(a), g_no + 1, "%s: %u entries, tree has %zu + root", archive,
		     td_archive_nentries(a), g_no);
	td_cursor *c = td_cursor_new(a);
	cr_assert_not_null(c);
	uint64_t rs = 1;
	size_t bufcap = 1 << 16;
	char *buf = malloc(bufcap);
	for (size_t i = 0; i < g_no; i++) {
		const orig *o = &g_o[i];
		td_entry e = lookup(a, o->rel);
		td_stat st;
		cr_assert_eq(td_archive_stat(a, e, &st), TD_OK);
		cr_assert_eq(st.mode & S_IFMT, o->st.st_mode & S_IFMT, "%s: type", o->rel);
		if (!S_ISLNK(o->st.st_mode))
			cr_assert_eq(st.mode & 07777, o->st.st_mode & 07777, "%s: mode %o, want %o", o->rel,
				     (unsigned)(st.mode & 07777), (unsigned)(o->st.st_mode & 07777));
		cr_assert_eq(st.mtime_sec, (int64_t)o->st.st_mtim.tv_sec, "%s: mtime %lld, want %lld", o->rel,
			     (long long)st.mtime_sec, (long long)o->st.st_mtim.tv_sec);
		cr_assert_eq(st.mtime_nsec, (uint32_t)o->st.st_mtim.tv_nsec, "%s: mtime nsec", o->rel);
		if (S_ISDIR(o->st.st_mode)) {
			size_t got = 1;
			cr_assert_eq(td_extract(a, e, 0, buf, 16, &got), TD_EISDIR, "%s: extract on a directory", o->rel);
			continue;
		}
		size_t len;
		char *want = orig_data(o, &len);
		cr_assert_eq(st.size, (uint64_t)len, "%s: size %llu, want %zu", o->rel, (unsigned long long)st.size, len);
		/* Sequential cursor reads, chunk sizes from 1 byte to 64 KiB. */
		char *got = malloc(len + 1);
		size_t at = 0;
		while (at < len) {
			uint64_t r = tdt_rand(&rs);
			size_t want_n = (r & 3) == 0 ? 1 + (r >> 8) % 7 : 1 + (r >> 8) % bufcap;
			size_t n = 0;
			int err = td_cursor_read(c, e, at, buf, want_n, &n);
			cr_assert_eq(err, TD_OK, "%s: cursor read @%zu: %s (%s)", o->rel, at, td_strerror(err), td_errdetail());
			cr_assert_gt(n, 0u, "%s: cursor read @%zu of %zu returned 0 bytes", o->rel, at, len);
			cr_assert_leq(n, want_n);
			memcpy(got + at, buf, n);
			at += n;
		}
		size_t n = 99;
		cr_assert_eq(td_cursor_read(c, e, len, buf, 100, &n), TD_OK);
		cr_assert_eq(n, 0u, "%s: cursor read at EOF gave %zu bytes", o->rel, n);
		assert_same("cursor", o->rel, 0, got, at, want, len);
		/* One call for the whole file. */
		memset(got, 0, len);
		int err = td_extract(a, e, 0, got, len + 1, &n);
		cr_assert_eq(err, TD_OK, "%s: extract: %s (%s)", o->rel, td_strerror(err), td_errdetail());
		assert_same("extract", o->rel, 0, got, n, want, len);
		free(got);
		free(want);
	}
	free(buf);
	td_cursor_free(c);
	td_archive_close(a);
}

Test(roundtrip, compress_paths_archive)
{
	check_tree("paths.tadoc");
}

Test(roundtrip, writer_streaming_archive)
{
	check_tree("writer.tadoc");
}

/* Random offsets and lengths, including zero lengths, EOF and past EOF. */
static void random_extracts_on(const td_archive *a)
{
	walk_tree();
	uint64_t rs = 7;
	size_t bufcap = 300000;
	char *buf = malloc(bufcap);
	for (size_t i = 0; i < g_no; i++) {
		const orig *o = &g_o[i];
		if (S_ISDIR(o->st.st_mode))
			continue;
		int many = strncmp(o->rel, "many/", 5) == 0;
		size_t len;
		char *want = orig_data(o, &len);
		td_entry e = lookup(a, o->rel);
		int rounds = many ? 2 : 24;
		for (int k = 0; k < rounds; k++) {
			uint64_t r = tdt_rand(&rs);
			uint64_t off;
			switch (k % 6) {
			case 0: off = len; break;
			case 1: off = len + 1 + r % 100000; break;
			case 2: off = len ? len - 1 - r % len : 0; break;
			default: off = len ? r % len : 0; break;
			}
			size_t n = (r >> 20) % 5 == 0 ? (r >> 24) % 8 : (r >> 24) % bufcap;
			size_t got = 12345;
			int err = td_extract(a, e, off, buf, n, &got);
			cr_assert_eq(err, TD_OK, "%s: extract @%llu+%zu: %s (%s)", o->rel, (unsigned long long)off, n,
				     td_strerror(err), td_errdetail());
			size_t expect = off >= len ? 0 : (len - off < n ? len - off : n);
			assert_same("random extract", o->rel, off, buf, got, want + (off < len ? off : len), expect);
		}
		free(want);
	}
	free(buf);
}

static void random_extracts(const char *archive)
{
	td_archive *a = tdt_open(archive, 0);
	random_extracts_on(a);
	td_archive_close(a);
}

Test(extract, random_offsets_paths)
{
	random_extracts("paths.tadoc");
}

/* td_archive_warm fills the rule cache; reads after it, and reads racing
 * it on another thread, still equal the original files. */
static void *warm_thread(void *arg)
{
	uint64_t bytes = 0;
	int err = td_archive_warm(arg, NULL, &bytes);
	return (void *)(intptr_t)(err == TD_OK && bytes > 0);
}

Test(extract, random_offsets_after_warm)
{
	td_archive *a = tdt_open("paths.tadoc", 0);
	uint64_t bytes = 0;
	cr_assert_eq(td_archive_warm(a, NULL, &bytes), TD_OK, "%s", td_errdetail());
	cr_assert_gt(bytes, 0u, "nothing warmed within the default cache budget");
	uint64_t again = 1;
	cr_assert_eq(td_archive_warm(a, NULL, &again), TD_OK);
	cr_assert_eq(again, 0u, "a second warm-up found %llu bytes not cached", (unsigned long long)again);
	random_extracts_on(a);
	td_archive_close(a);
}

/* Random extracts from archive `name` while fn(archive) runs on another
 * thread; fn's result, nonzero for success. */
static int extracts_beside(const char *name, void *(*fn)(void *))
{
	td_archive *a = tdt_open(name, 0);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, fn, a), 0);
	random_extracts_on(a);
	void *ok;
	pthread_join(t, &ok);
	td_archive_close(a);
	return ok != NULL;
}

Test(extract, random_offsets_while_warming)
{
	cr_assert(extracts_beside("writer.tadoc", warm_thread), "the warm-up failed or cached nothing");
}

Test(extract, warm_skips_over_budget_and_stops)
{
	td_archive *a = tdt_open("paths.tadoc", 0);
	td_archive_set_cache(a, 64 << 10); /* far less than the expansions */
	uint64_t bytes = 1;
	cr_assert_eq(td_archive_warm(a, NULL, &bytes), TD_OK);
	cr_assert_eq(bytes, 0u, "warmed %llu bytes past the budget", (unsigned long long)bytes);
	random_extracts_on(a);
	td_archive_close(a);
	a = tdt_open("paths.tadoc", 0);
	volatile int stop = 1;
	bytes = 1;
	cr_assert_eq(td_archive_warm(a, &stop, &bytes), TD_OK);
	cr_assert_eq(bytes, 0u, "a stopped warm-up cached %llu bytes", (unsigned long long)bytes);
	td_archive_close(a);
}

/* Total bytes of the regular files in archive a. */
static uint64_t file_bytes(const td_archive *a)
{
	uint64_t total = 0;
	td_stat st;
	for (td_entry e = 0; e < td_archive_nentries(a); e++)
		if (td_archive_stat(a, e, &st) == TD_OK && S_ISREG(st.mode))
			total += st.size;
	return total;
}

/* td_archive_will_read for the whole tree expands every short rule at once
 * (a warm-up after it finds nothing left to cache); reads after it equal
 * the original files, in both formats. A read hint below the short rules'
 * total leaves them to the reads. */
Test(extract, random_offsets_after_will_read)
{
	static const char *const name[] = { "paths.tadoc", "writer.tadoc" };
	for (size_t i = 0; i < 2; i++) {
		td_archive *a = tdt_open(name[i], 0);
		cr_assert_eq(td_archive_will_read(a, 1), TD_OK);
		uint64_t left = 0;
		cr_assert_eq(td_archive_will_read(a, file_bytes(a)), TD_OK, "%s: %s", name[i], td_errdetail());
		cr_assert_eq(td_archive_will_read(a, file_bytes(a)), TD_OK, "%s: a second hint", name[i]);
		cr_assert_eq(td_archive_warm(a, NULL, &left), TD_OK, "%s", td_errdetail());
		cr_assert_eq(left, 0u, "%s: %llu bytes of short rules not cached by the hint", name[i],
			     (unsigned long long)left);
		random_extracts_on(a);
		td_archive_close(a);
	}
	td_archive *a = tdt_open("paths.tadoc", 0);
	cr_assert_eq(td_archive_will_read(a, td_archive_nentries(a)), TD_OK);
	uint64_t cached = 0;
	cr_assert_eq(td_archive_warm(a, NULL, &cached), TD_OK);
	cr_assert_gt(cached, 0u, "a small read hint expanded every rule");
	td_archive_close(a);
}

/* The hint on one thread while another reads, and with a budget far below
 * the expansions (no sweep): reads still equal the original files. */
static void *will_read_thread(void *arg)
{
	return (void *)(intptr_t)(td_archive_will_read(arg, UINT64_MAX) == TD_OK);
}

Test(extract, random_offsets_while_will_read)
{
	cr_assert(extracts_beside("paths.tadoc", will_read_thread), "the hint failed");
	td_archive *a = tdt_open("paths.tadoc", 0);
	td_archive_set_cache(a, 64 << 10);
	cr_assert_eq(td_archive_will_read(a, UINT64_MAX), TD_OK);
	random_extracts_on(a);
	td_archive_close(a);
}

Test(extract, random_offsets_writer)
{
	random_extracts("writer.tadoc"); /* format 3 */
}

/* No budget: no decoded tables and no rule cache, so every root and rule
 * symbol is decoded from its coded tile where it is read. */
Test(extract, random_offsets_coded_tiles)
{
	td_archive *a = tdt_open("paths.tadoc", 0);
	td_archive_set_cache(a, 0);
	random_extracts_on(a);
	td_archive_close(a);
}

/* Budgets from one that holds no table to one that holds them all: each
 * step turns another table on, and reads through every mix of them equal
 * the original files. For the fixture's archive (about 28k terminals and
 * rules, 122k root symbols): nothing at 4 and 64 KiB, the flat offsets
 * without the symbol table at 256 KiB, with it and the decoded rule
 * symbols but coded root symbols at 512 KiB, every table from 1 MiB on. */
Test(extract, random_offsets_every_budget)
{
	static const uint64_t budget[] = { 4 << 10, 64 << 10, 256 << 10, 512 << 10, 1 << 20, 4 << 20 };
	for (size_t i = 0; i < sizeof budget / sizeof *budget; i++) {
		td_archive *a = tdt_open("paths.tadoc", 0);
		td_archive_set_cache(a, budget[i]);
		random_extracts_on(a);
		td_archive_close(a);
	}
}

/* td_extract_batch gives what td_extract gives, for 1, 2 and "all" threads. */
Test(extract, batch_equals_single)
{
	walk_tree();
	td_archive *a = tdt_open("paths.tadoc", 0);
	size_t nreq = 5000;
	td_extract_req *req = calloc(nreq, sizeof *req);
	char **want = calloc(nreq, sizeof *want);
	size_t *wantn = calloc(nreq, sizeof *wantn);
	uint64_t rs = 3;
	size_t *files = malloc(g_no * sizeof *files), nf = 0;
	for (size_t i = 0; i < g_no; i++)
		if (!S_ISDIR(g_o[i].st.st_mode))
			files[nf++] = i;
	for (size_t k = 0; k < nreq; k++) {
		const orig *o = &g_o[files[tdt_rand(&rs) % nf]];
		size_t len;
		char *d = orig_data(o, &len);
		uint64_t r = tdt_rand(&rs);
		req[k].file = lookup(a, o->rel);
		req[k].off = (r & 15) == 0 ? len + (r >> 4) % 10 : (len ? (r >> 4) % len : 0);
		req[k].len = (uint32_t)((r >> 40) % 9000);
		req[k].buf = malloc(req[k].len + 1);
		size_t off = req[k].off < len ? req[k].off : len;
		wantn[k] = len - off < req[k].len ? len - off : req[k].len;
		want[k] = malloc(wantn[k] + 1);
		memcpy(want[k], d + off, wantn[k]);
		free(d);
	}
	/* A directory and an out-of-range entry fail per request, not the batch. */
	req[0].file = TD_ROOT;
	req[1].file = td_archive_nentries(a);
	static const unsigned threads[] = {1, 2, 0};
	for (int t = 0; t < 3; t++) {
		for (size_t k = 0; k < nreq; k++) {
			req[k].got = 777;
			req[k].err = 777;
		}
		cr_assert_eq(td_extract_batch(a, req, nreq, threads[t]), TD_OK);
		cr_assert_eq(req[0].err, TD_EISDIR, "batch: directory gives %d", req[0].err);
		cr_assert_eq(req[1].err, TD_EINVAL, "batch: bad entry gives %d", req[1].err);
		for (size_t k = 2; k < nreq; k++) {
			cr_assert_eq(req[k].err, TD_OK, "batch req %zu: %s", k, td_strerror(req[k].err));
			assert_same("batch", "", req[k].off, req[k].buf, req[k].got, want[k], wantn[k]);
		}
	}
	for (size_t k = 0; k < nreq; k++) {
		free(req[k].buf);
		free(want[k]);
	}
	free(req);
	free(want);
	free(wantn);
	free(files);
	td_archive_close(a);
}

/* Cursors: restart after a backwards seek, two files interleaved on one
 * cursor, many cursors on one archive, bad arguments. */
Test(extract, cursor_seek_patterns)
{
	td_archive *a = tdt_open("paths.tadoc", 0);
	static const char *const files[] = {"line/single_line.txt", "periodic/fibonacci.txt", "text/crlf.txt",
					    "binary/repeated_a.bin", "text/long_words.txt"};
	size_t len[5];
	char *want[5];
	td_entry e[5];
	for (int i = 0; i < 5; i++) {
		char p[4096];
		snprintf(p, sizeof p, "tree/%s", files[i]);
		want[i] = tdt_slurp(tdt_path(p), &len[i]);
		cr_assert_not_null(want[i]);
		e[i] = lookup(a, files[i]);
	}
	td_cursor *c = td_cursor_new(a), *c2 = td_cursor_new(a);
	cr_assert(c && c2);
	uint64_t rs = 11, pos[5] = {0};
	char buf[5000];
	for (int step = 0; step < 20000; step++) {
		uint64_t r = tdt_rand(&rs);
		int f = (int)(r % 5);
		td_cursor *cc = (r >> 3) & 1 ? c : c2;
		if (((r >> 4) & 31) == 0)
			pos[f] = len[f] ? (r >> 10) % len[f] : 0; /* jump anywhere, backwards too */
		size_t n = 1 + (r >> 40) % sizeof buf, got = 0;
		int err = td_cursor_read(cc, e[f], pos[f], buf, n, &got);
		cr_assert_eq(err, TD_OK);
		size_t expect = pos[f] >= len[f] ? 0 : (len[f] - pos[f] < n ? len[f] - pos[f] : n);
		assert_same("cursor", files[f], pos[f], buf, got, want[f] + (pos[f] < len[f] ? pos[f] : len[f]), expect);
		pos[f] += got;
		if (pos[f] >= len[f])
			pos[f] = 0;
	}
	size_t got = 5;
	cr_assert_eq(td_cursor_read(c, TD_ROOT, 0, buf, 10, &got), TD_EISDIR);
	cr_assert_eq(td_cursor_read(c, td_archive_nentries(a), 0, buf, 10, &got), TD_EINVAL);
	cr_assert_eq(td_extract(a, td_archive_nentries(a), 0, buf, 10, &got), TD_EINVAL);
	/* The cursor still works after errors. */
	cr_assert_eq(td_cursor_read(c, e[2], 0, buf, 100, &got), TD_OK);
	assert_same("cursor after error", files[2], 0, buf, got, want[2], len[2] < 100 ? len[2] : 100);
	td_cursor_free(c);
	td_cursor_free(c2);
	td_cursor_free(NULL);
	for (int i = 0; i < 5; i++)
		free(want[i]);
	td_archive_close(a);
}

/* Entries are numbered breadth-first with children sorted bytewise; names,
 * paths, parents, children and look-ups agree with the oracle's walk. */
Test(archive, entry_order_and_lookup)
{
	tdt_oracle *o = tdt_oracle_load();
	td_archive *a = tdt_open("paths.tadoc", 0);
	cr_assert_eq(td_archive_nentries(a), o->ne + 1);
	char path[8192];
	cr_assert_eq(td_archive_path(a, TD_ROOT, path, sizeof path), 0);
	cr_assert_str_eq(path, "");
	td_stat st;
	cr_assert_eq(td_archive_stat(a, TD_ROOT, &st), TD_OK);
	cr_assert(S_ISDIR(st.mode));
	for (size_t i = 0; i < o->ne; i++) {
		td_entry e = (td_entry)(i + 1);
		int n = td_archive_path(a, e, path, sizeof path);
		cr_assert_geq(n, 0, "path of entry %u: %s", e, td_strerror(n));
		cr_assert_eq((size_t)n, strlen(o->e[i].path));
		cr_assert_str_eq(path, o->e[i].path, "entry %u is %s, oracle order says %s", e, path, o->e[i].path);
		cr_assert_eq(lookup(a, path), e);
		/* The name is the last component; the parent lists e among its children. */
		size_t nl;
		const char *name = td_archive_name(a, e, &nl);
		const char *slash = strrchr(path, '/');
		const char *base = slash ? slash + 1 : path;
		cr_assert(name && nl == strlen(base) && memcmp(name, base, nl) == 0, "name of %s", path);
		cr_assert_eq(td_archive_stat(a, e, &st), TD_OK);
		td_entry first, found;
		uint32_t cnt;
		cr_assert_eq(td_archive_children(a, st.parent, &first, &cnt), TD_OK);
		cr_assert(e >= first && e < first + cnt, "%s not among its parent's children", path);
		cr_assert_eq(td_archive_lookup(a, st.parent, name, nl, &found), TD_OK);
		cr_assert_eq(found, e);
		char k = o->e[i].kind;
		cr_assert(k == 'd' ? S_ISDIR(st.mode) : k == 'f' ? S_ISREG(st.mode) : S_ISLNK(st.mode), "%s kind", path);
		if (k == 'f') {
			cr_assert_eq(st.size, o->e[i].size, "%s: size", path);
			uint64_t wt = 0;
			cr_assert_eq(td_word_total(a, e, &wt), TD_OK);
			cr_assert_eq(wt, o->e[i].nwords, "%s: td_word_total %llu, oracle %llu", path, (unsigned long long)wt,
				     (unsigned long long)o->e[i].nwords);
			/* Decision 2: words longer than TD_MAXTOK count like any other. */
			cr_assert_eq(st.nwords, o->e[i].nwords, "%s: nwords %llu, oracle %llu (longest word %llu bytes)",
				     path, (unsigned long long)st.nwords, (unsigned long long)o->e[i].nwords,
				     (unsigned long long)o->e[i].maxword);
		} else {
			cr_assert_eq(st.nwords, 0u, "%s: non-file with words", path);
		}
		cr_assert_eq(td_archive_children(a, e, &first, &cnt), k == 'd' ? TD_OK : TD_ENOTDIR, "%s: children", path);
	}
	/* td_archive_names: every entry at once, in number order and reversed
	 * (many entries: its entry-order pass), equal to the oracle's names
	 * and parents; an entry out of range stops it there. */
	{
		const size_t n = o->ne;
		td_entry *ents = malloc(2 * n * sizeof *ents);
		td_name_ref *ref = malloc(2 * n * sizeof *ref);
		cr_assert(ents && ref);
		for (size_t i = 0; i < n; i++)
			ents[i] = (td_entry)(i + 1), ents[2 * n - 1 - i] = (td_entry)(i + 1);
		size_t done = 0;
		cr_assert_eq(td_archive_names(a, ents, 2 * n, ref, &done), TD_OK, "%s", td_errdetail());
		cr_assert_eq(done, 2 * n);
		for (size_t j = 0; j < 2 * n; j++) {
			const char *op = o->e[ents[j] - 1].path, *slash = strrchr(op, '/');
			const char *base = slash ? slash + 1 : op;
			cr_assert(ref[j].len == strlen(base) && memcmp(ref[j].name, base, ref[j].len) == 0, "names: %s", op);
			cr_assert_eq(ref[j].esc, strpbrk(base, "\\\n") != NULL, "names: %s: escape", op);
			td_entry want = TD_ROOT;
			if (slash) {
				memcpy(path, op, (size_t)(slash - op));
				path[slash - op] = '\0';
				want = lookup(a, path);
			}
			cr_assert_eq(ref[j].parent, want, "names: %s: parent", op);
		}
		/* td_dir_path: the parent's escaped path and '/', then the name
		 * escaped, spell the oracle's path escaped here ('\\' and '\n'
		 * as two bytes each), asked twice (built, then from the memo) */
		td_dir_paths dp;
		cr_assert_eq(td_dir_paths_init(&dp, a), TD_OK);
		for (size_t j = 0; j < 2 * n; j++) {
			static char want[2 * (TD_MAXPATH + 2)], got[2 * (TD_MAXPATH + 2)];
			size_t wl = 0;
			for (const char *c = o->e[ents[j] - 1].path; *c; c++) {
				if (*c == '\\' || *c == '\n')
					want[wl++] = '\\';
				want[wl++] = *c == '\n' ? 'n' : *c;
			}
			const char *pre;
			size_t pn;
			cr_assert_eq(td_dir_path(a, &dp, ref[j].parent, &pre, &pn), TD_OK, "%s", td_errdetail());
			memcpy(got, pre, pn);
			size_t gl = pn + td_path_escape(ref[j].name, ref[j].len, got + pn);
			cr_assert(gl == wl && memcmp(got, want, wl) == 0, "dir path: %.*s, want %.*s", (int)gl, got, (int)wl,
				  want);
		}
		td_dir_paths_free(&dp);
		ents[n / 2] = td_archive_nentries(a);
		cr_assert_eq(td_archive_names(a, ents, 2 * n, ref, &done), TD_EINVAL);
		cr_assert_eq(done, n / 2);
		free(ents);
		free(ref);
	}
	/* Path spellings and errors. */
	td_entry e, e2;
	cr_assert_eq(td_archive_lookup_path(a, "", &e), TD_OK);
	cr_assert_eq(e, TD_ROOT);
	cr_assert_eq(td_archive_lookup_path(a, ".", &e), TD_OK);
	cr_assert_eq(e, TD_ROOT);
	cr_assert_eq(td_archive_lookup_path(a, "text/crlf.txt", &e), TD_OK);
	cr_assert_eq(td_archive_lookup_path(a, "/text//crlf.txt", &e2), TD_OK);
	cr_assert_eq(e, e2);
	cr_assert_eq(td_archive_lookup_path(a, "text/nope", &e), TD_ENOENT);
	cr_assert_eq(td_archive_lookup_path(a, "nope/crlf.txt", &e), TD_ENOENT);
	cr_assert_eq(td_archive_lookup_path(a, "text/crlf.txt/x", &e), TD_ENOTDIR);
	cr_assert_eq(td_archive_lookup_path(a, "text/crl", &e), TD_ENOENT);
	cr_assert_eq(td_archive_lookup_path(a, "text/crlf.txtx", &e), TD_ENOENT);
	cr_assert_eq(td_archive_lookup(a, TD_ROOT, "", 0, &e), TD_ENOENT);
	cr_assert_eq(td_archive_lookup(a, td_archive_nentries(a), "a", 1, &e), TD_EINVAL);
	cr_assert_eq(td_archive_stat(a, td_archive_nentries(a), &st), TD_EINVAL);
	size_t nl;
	cr_assert_null(td_archive_name(a, td_archive_nentries(a), &nl));
	cr_assert_eq(td_archive_path(a, td_archive_nentries(a), path, sizeof path), TD_EINVAL);
	cr_assert_eq(td_archive_path(a, lookup(a, "text/crlf.txt"), path, 5), TD_ERANGE);
	td_archive_close(a);
	tdt_oracle_free(o);
}

Test(archive, info_and_verify)
{
	tdt_oracle *o = tdt_oracle_load();
	static const char *const names[] = {"paths.tadoc", "writer.tadoc"};
	for (int k = 0; k < 2; k++) {
		td_archive *a = tdt_open(names[k], TD_OPEN_VERIFY);
		int err = td_archive_verify(a);
		cr_assert_eq(err, TD_OK, "%s: verify: %s (%s)", names[k], td_strerror(err), td_errdetail());
		td_info in;
		memset(&in, 0xaa, sizeof in);
		td_archive_info(a, &in);
		uint64_t nf = 0, nd = 1, nl = 0;
		for (size_t i = 0; i < o->ne; i++)
			o->e[i].kind == 'f' ? nf++ : o->e[i].kind == 'd' ? nd++ : nl++;
		cr_assert_eq(in.total_bytes, o->total_bytes, "%s: total bytes %llu, oracle %llu", names[k],
			     (unsigned long long)in.total_bytes, (unsigned long long)o->total_bytes);
		cr_assert_eq(in.total_words, o->total_words, "%s: total words %llu, oracle %llu", names[k],
			     (unsigned long long)in.total_words, (unsigned long long)o->total_words);
		uint64_t wt = 0;
		cr_assert_eq(td_word_total(a, TD_ROOT, &wt), TD_OK);
		cr_assert_eq(wt, o->total_words, "%s: td_word_total(root) %llu, oracle %llu", names[k],
			     (unsigned long long)wt, (unsigned long long)o->total_words);
		cr_assert_eq(td_word_total(a, td_archive_nentries(a), &wt), TD_EINVAL);
		cr_assert_eq(in.nfiles, nf);
		cr_assert_eq(in.ndirs, nd);
		cr_assert_eq(in.nsymlinks, nl);
		cr_assert_eq(in.nentries, o->ne + 1);
		struct stat st;
		cr_assert_eq(stat(tdt_path(names[k]), &st), 0);
		cr_assert_eq(in.archive_bytes, (uint64_t)st.st_size);
		cr_assert_leq(in.max_depth, TD_MAXDEPTH);
		uint64_t sum = 0;
		for (int s = 0; s < 32; s++)
			sum += in.section_bytes[s];
		cr_assert_leq(sum, in.archive_bytes);
		cr_assert_gt(in.nwords, 0u);
		td_archive_close(a);
	}
	tdt_oracle_free(o);
}

/* ---- writer and compress_paths errors ---- */

Test(writer, bad_paths_and_limits)
{
	td_writer *w = td_writer_new(NULL);
	cr_assert_not_null(w);
	static const char *const bad[] = {"", "/abs", "a/../b", "..", "../x", "./x", "a/./b", "."};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		cr_assert_eq(td_writer_add_file(w, bad[i], 0644, 0, 0, "x", 1), TD_EINVAL, "path '%s' accepted", bad[i]);
	char name[300];
	memset(name, 'n', 256);
	name[256] = 0;
	cr_assert_eq(td_writer_add_file(w, name, 0644, 0, 0, "x", 1), TD_ELIMIT, "256-byte name accepted");
	name[255] = 0;
	cr_assert_eq(td_writer_add_file(w, name, 0644, 0, 0, "x", 1), TD_OK, "255-byte name refused");
	char longp[5000];
	size_t n = 0;
	while (n < 4200) {
		memcpy(longp + n, "dddddddddd/", 11);
		n += 11;
	}
	memcpy(longp + n, "f", 2);
	cr_assert_eq(td_writer_add_file(w, longp, 0644, 0, 0, "x", 1), TD_ELIMIT, "path of %zu bytes accepted", n + 1);
	cr_assert_eq(td_writer_add_file(w, "dup", 0644, 0, 0, "x", 1), TD_OK);
	cr_assert_eq(td_writer_add_file(w, "dup", 0644, 0, 0, "y", 1), TD_EEXIST);
	cr_assert_eq(td_writer_add_dir(w, "dup", 0755, 0, 0), TD_EEXIST);
	/* Implicit parents. */
	cr_assert_eq(td_writer_add_file(w, "imp/a/b/file", 0600, 1234, 5, "implicit", 8), TD_OK);
	cr_assert_eq(td_writer_add_symlink(w, "imp/link", 99, 1, "a/b/file"), TD_OK);
	cr_assert_eq(td_writer_file_begin(w, "stream", 0640, 10, 20), TD_OK);
	cr_assert_eq(td_writer_file_data(w, "hello ", 6), TD_OK);
	cr_assert_eq(td_writer_file_data(w, "", 0), TD_OK);
	cr_assert_eq(td_writer_file_data(w, "world", 5), TD_OK);
	cr_assert_eq(td_writer_file_end(w), TD_OK);
	cr_assert_eq(td_writer_finish(w, tdt_path("w1.tadoc")), TD_OK, "%s", td_errdetail());
	td_archive *a = tdt_open("w1.tadoc", TD_OPEN_VERIFY);
	td_entry e;
	td_stat st;
	cr_assert_eq(td_archive_lookup_path(a, "imp/a", &e), TD_OK);
	cr_assert_eq(td_archive_stat(a, e, &st), TD_OK);
	cr_assert(S_ISDIR(st.mode));
	cr_assert_eq(st.mode & 07777, 0755);
	cr_assert_eq(td_archive_lookup_path(a, "imp/a/b/file", &e), TD_OK);
	cr_assert_eq(td_archive_stat(a, e, &st), TD_OK);
	cr_assert_eq(st.mode & 07777, 0600);
	cr_assert_eq(st.mtime_sec, 1234);
	cr_assert_eq(st.mtime_nsec, 5u);
	char buf[64];
	size_t got;
	cr_assert_eq(td_archive_lookup_path(a, "stream", &e), TD_OK);
	cr_assert_eq(td_extract(a, e, 0, buf, sizeof buf, &got), TD_OK);
	assert_same("stream", "stream", 0, buf, got, "hello world", 11);
	cr_assert_eq(td_archive_lookup_path(a, "imp/link", &e), TD_OK);
	cr_assert_eq(td_archive_stat(a, e, &st), TD_OK);
	cr_assert(S_ISLNK(st.mode));
	cr_assert_eq(td_extract(a, e, 0, buf, sizeof buf, &got), TD_OK);
	assert_same("symlink", "imp/link", 0, buf, got, "a/b/file", 8);
	td_archive_close(a);
	td_writer_abort(NULL);
	w = td_writer_new(NULL);
	cr_assert_eq(td_writer_add_file(w, "x", 0644, 0, 0, "x", 1), TD_OK);
	td_writer_abort(w);
}

Test(writer, empty_archive)
{
	td_writer *w = td_writer_new(NULL);
	cr_assert_eq(td_writer_finish(w, tdt_path("empty.tadoc")), TD_OK, "%s", td_errdetail());
	td_archive *a = tdt_open("empty.tadoc", TD_OPEN_VERIFY);
	cr_assert_eq(td_archive_nentries(a), 1u);
	cr_assert_eq(td_archive_verify(a), TD_OK);
	td_archive_close(a);
	/* Unwritable destination: an error naming the file, no crash. */
	w = td_writer_new(NULL);
	cr_assert_eq(td_writer_add_file(w, "x", 0644, 0, 0, "x", 1), TD_OK);
	int err = td_writer_finish(w, "/nonexistent-dir/out.tadoc");
	cr_assert_eq(err, TD_EIO, "finish into a missing dir: %s", td_strerror(err));
	cr_assert(strstr(td_errdetail(), "nonexistent-dir") != NULL, "detail '%s' does not name the file",
		  td_errdetail());
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f, "%s", path);
	char *p = NULL;
	size_t n = 0, cap = 0, k;
	do {
		if (n == cap) {
			cap = cap ? 2 * cap : 1 << 16;
			p = realloc(p, cap);
			cr_assert_not_null(p);
		}
		n += k = fread(p + n, 1, cap - n, f);
	} while (k);
	fclose(f);
	*len = n;
	return p;
}

/* The same entries through a writer that tokenizes as it goes and one
 * that defers tokenizing to finish (what td_build's shards use), on the
 * finishing thread alone or (cores) on the threads it may borrow; nsmall
 * small files of their own words go between the big ones. */
static void write_mixed_on(int defer, const td_grammar_cores *cores, unsigned nsmall, const char *name,
			   const char *text, size_t n)
{
	td_writer_opts o;
	memset(&o, 0, sizeof o);
	o.build_time = 1700000000;
	o.defer_tokenize = defer;
	o.grammar_cores = cores;
	td_writer *w = td_writer_new(&o);
	cr_assert_not_null(w);
	cr_assert_eq(td_writer_add_dir(w, "", 0755, 1700000000, 0), TD_OK);
	cr_assert_eq(td_writer_add_file(w, "d/whole", 0644, 1, 2, text, n), TD_OK);
	for (unsigned i = 0; i < nsmall; i++) {
		char path[64], body[256];
		snprintf(path, sizeof path, "s/%04u", i);
		int k = snprintf(body, sizeof body, "small%u word%u the \xff\xfe %s\n", i, i % 7, i % 3 ? "fox" : "");
		cr_assert_eq(td_writer_add_file(w, path, 0644, 1, 2, body, (size_t)k), TD_OK);
	}
	cr_assert_eq(td_writer_add_symlink(w, "d/link", 3, 4, "whole words here"), TD_OK);
	cr_assert_eq(td_writer_file_begin(w, "empty", 0600, 5, 6), TD_OK);
	cr_assert_eq(td_writer_file_end(w), TD_OK);
	/* streamed in uneven chunks: cuts inside words and inside a word
	 * longer than TD_MAXTOK */
	cr_assert_eq(td_writer_file_begin(w, "d/e/stream", 0640, 7, 8), TD_OK);
	for (size_t at = 0, k = 1; at < n; k = k * 7 % 97 + 1) {
		size_t c = k < n - at ? k : n - at;
		cr_assert_eq(td_writer_file_data(w, text + at, c), TD_OK);
		at += c;
	}
	cr_assert_eq(td_writer_file_end(w), TD_OK);
	/* what td_build's hard links read back from the filling shard */
	char *back = malloc(n + 1);
	cr_assert_not_null(back);
	uint64_t nb = 0;
	cr_assert_eq(td_writer_file_text(w, "d/e/stream", back, n + 1, &nb), TD_OK, "%s", td_errdetail());
	assert_same("file_text", "d/e/stream", 0, back, nb, text, n);
	free(back);
	cr_assert_eq(td_writer_add_copy(w, "copy", 0644, 9, 10, "d/e/stream"), TD_OK, "%s", td_errdetail());
	cr_assert_eq(td_writer_add_dir(w, "late", 0700, 11, 12), TD_OK);
	cr_assert_eq(td_writer_finish(w, tdt_path(name)), TD_OK, "%s", td_errdetail());
}

static void write_mixed(int defer, const char *name, const char *text, size_t n)
{
	write_mixed_on(defer, NULL, 0, name, text, n);
}

static void assert_same_file(const char *x, const char *y, const char *what)
{
	size_t la, lb;
	char *a = slurp(tdt_path(x), &la), *b = slurp(tdt_path(y), &lb);
	cr_assert(a && b);
	cr_assert(la == lb && !memcmp(a, b, la), "%s wrote other bytes (%zu vs %zu)", what, la, lb);
	free(a);
	free(b);
}

Test(writer, deferred_tokenize_same_bytes)
{
	char text[4096];
	size_t n = 0;
	static const char *const parts[] = {"The quick brown fox, ", "jumps over\n", "the lazy dog. ", "caf\xc3\xa9 ",
					    "\t12345 ", "x_y z"};
	for (unsigned i = 0; n + 400 < sizeof text; i++) {
		if (i % 9 == 4) { /* a word longer than TD_MAXTOK */
			memset(text + n, 'w', 300);
			n += 300;
			text[n++] = ' ';
		}
		const char *p = parts[i % 6];
		memcpy(text + n, p, strlen(p));
		n += strlen(p);
	}
	write_mixed(0, "tok-now.tadoc", text, n);
	write_mixed(1, "tok-defer.tadoc", text, n);
	assert_same_file("tok-now.tadoc", "tok-defer.tadoc", "deferred tokenizing");
	td_archive *ar = tdt_open("tok-defer.tadoc", TD_OPEN_VERIFY);
	td_entry e;
	static char got[sizeof text];
	size_t ng;
	cr_assert_eq(td_archive_lookup_path(ar, "copy", &e), TD_OK);
	cr_assert_eq(td_extract(ar, e, 0, got, sizeof got, &ng), TD_OK);
	assert_same("copy", "copy", 0, got, ng, text, n);
	td_archive_close(ar);
}

/* Cores for the writer: every one asked for (the tokenizer's threads,
 * the grammar's); counted, so the test knows threads were used. */
static unsigned g_taken;
static unsigned take_all(void *ctx, unsigned want)
{
	(void)ctx;
	__atomic_fetch_add(&g_taken, want, __ATOMIC_RELAXED);
	return want;
}
static void give_back(void *ctx, unsigned k)
{
	(void)ctx;
	(void)k;
}

Test(writer, parallel_tokenize_same_bytes, .timeout = 0)
{
	/* about 4 MB a big file (three of them: the tokenizer cuts its work
	 * into threads of a few MB at text boundaries), words and other
	 * tokens that first occur in one part or another, long words, UTF-8
	 * and bytes that are not */
	size_t cap = 4u << 20, n = 0;
	char *text = malloc(cap + 1024);
	cr_assert_not_null(text);
	static const char *const parts[] = {"The quick brown fox, ", "jumps over\n", "the lazy dog. ", "caf\xc3\xa9 ",
					    "\t12345 ", "x_y z", "\xc3 broken ", "\xe4\xb8\xad\xe6\x96\x87 "};
	for (unsigned i = 0; n < cap; i++) {
		if (i % 97 == 4) {
			memset(text + n, 'w', 300 + i % 5);
			n += 300 + i % 5;
			text[n++] = ' ';
		}
		n += (size_t)sprintf(text + n, "%s tok%u %s", parts[i % 8], (unsigned)(i * 2654435761u % 500000), i % 11 ? "" : "!?");
	}
	td_grammar_cores cores = { take_all, give_back, NULL, NULL };
	write_mixed_on(0, NULL, 300, "ptok-now.tadoc", text, n);
	g_taken = 0;
	write_mixed_on(1, &cores, 300, "ptok-par.tadoc", text, n);
	cr_assert_gt(g_taken, 0, "no thread was asked for");
	assert_same_file("ptok-now.tadoc", "ptok-par.tadoc", "tokenizing on threads");
	td_archive *ar = tdt_open("ptok-par.tadoc", TD_OPEN_VERIFY);
	td_entry e;
	char *got = malloc(n);
	size_t ng;
	cr_assert_eq(td_archive_lookup_path(ar, "copy", &e), TD_OK);
	cr_assert_eq(td_extract(ar, e, 0, got, n, &ng), TD_OK);
	assert_same("copy", "copy", 0, got, ng, text, n);
	td_archive_close(ar);
	free(got);
	free(text);
}

static int compress_one(const char *in)
{
	const char *ins[] = {in};
	return td_compress_paths(tdt_path("cp.tadoc"), ins, 1, NULL);
}

Test(compress_paths, bad_inputs)
{
	cr_assert_eq(td_compress_paths(tdt_path("cp.tadoc"), NULL, 0, NULL), TD_EINVAL);
	/* A fifo, alone and inside a directory. */
	char d[4096];
	snprintf(d, sizeof d, "%s", tdt_path("cpdir"));
	cr_assert_eq(mkdir(d, 0755), 0);
	cr_assert_eq(tdt_spit(tdt_path("cpdir/ok.txt"), "fine\n", 5), 0);
	cr_assert_eq(mkfifo(tdt_path("cpdir/fifo"), 0644), 0);
	int err = compress_one(tdt_path("cpdir/fifo"));
	cr_assert_eq(err, TD_EUNSUPP, "fifo: %s", td_strerror(err));
	cr_assert(strstr(td_errdetail(), "fifo") != NULL, "detail '%s' does not name the fifo", td_errdetail());
	err = compress_one(d);
	cr_assert_eq(err, TD_EUNSUPP, "dir with a fifo: %s", td_strerror(err));
	cr_assert(strstr(td_errdetail(), "fifo") != NULL, "detail '%s'", td_errdetail());
	cr_assert_eq(unlink(tdt_path("cpdir/fifo")), 0);
	/* A unix socket. */
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", tdt_path("cpdir/sock"));
	if (strlen(tdt_path("cpdir/sock")) < sizeof sa.sun_path && bind(s, (struct sockaddr *)&sa, sizeof sa) == 0) {
		err = compress_one(d);
		cr_assert_eq(err, TD_EUNSUPP, "dir with a socket: %s", td_strerror(err));
		unlink(tdt_path("cpdir/sock"));
	}
	close(s);
	/* Missing input. */
	err = compress_one(tdt_path("cpdir/missing"));
	cr_assert_neq(err, TD_OK);
	cr_assert(strstr(td_errdetail(), "missing") != NULL, "detail '%s'", td_errdetail());
	/* Device node. */
	err = compress_one("/dev/null");
	cr_assert_eq(err, TD_EUNSUPP, "/dev/null: %s", td_strerror(err));
	/* The fixed directory now compresses, and the output inside the tree is skipped. */
	const char *ins[] = {d};
	char out[4200];
	snprintf(out, sizeof out, "%s/self.tadoc", d);
	err = td_compress_paths(out, ins, 1, NULL);
	cr_assert_eq(err, TD_OK, "%s", td_errdetail());
	td_archive *a = tdt_open("cpdir/self.tadoc", TD_OPEN_VERIFY);
	td_entry e;
	cr_assert_eq(td_archive_lookup_path(a, "self.tadoc", &e), TD_ENOENT, "the output archive archived itself");
	cr_assert_eq(td_archive_lookup_path(a, "ok.txt", &e), TD_OK);
	td_archive_close(a);
}

/* An unreadable file is an error naming it. Root reads anything, so the
 * check runs in a child that drops to an unprivileged user. */
Test(compress_paths, unreadable_file)
{
	char d[4096];
	snprintf(d, sizeof d, "%s", tdt_path("unr"));
	cr_assert_eq(mkdir(d, 0777), 0);
	cr_assert_eq(chmod(d, 0777), 0);
	cr_assert_eq(chmod(tdt_path(""), 0755), 0);
	cr_assert_eq(tdt_spit(tdt_path("unr/secret"), "secret\n", 7), 0);
	cr_assert_eq(chmod(tdt_path("unr/secret"), 0), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
			_exit(3);
		if (access(tdt_path("unr/secret"), R_OK) == 0)
			_exit(4); /* still readable: cannot test here */
		const char *ins[] = {d};
		int err = td_compress_paths(tdt_path("unr/out.tadoc"), ins, 1, NULL);
		if (err == TD_OK)
			_exit(1);
		_exit(strstr(td_errdetail(), "secret") ? 0 : 2);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st), "child crashed");
	if (WEXITSTATUS(st) == 4 || WEXITSTATUS(st) == 3)
		cr_skip_test("cannot make a file unreadable here");
	cr_assert_eq(WEXITSTATUS(st), 0, "unreadable file: %s", WEXITSTATUS(st) == 1 ? "accepted" : "detail does not name it");
}

/* Several inputs land at the root under their base names. */
Test(compress_paths, several_inputs)
{
	char d[4096];
	snprintf(d, sizeof d, "%s", tdt_path("multi"));
	cr_assert_eq(mkdir(d, 0755), 0);
	cr_assert_eq(mkdir(tdt_path("multi/dir"), 0755), 0);
	cr_assert_eq(tdt_spit(tdt_path("multi/dir/in.txt"), "inside\n", 7), 0);
	cr_assert_eq(tdt_spit(tdt_path("multi/top.txt"), "top\n", 4), 0);
	cr_assert_eq(symlink("top.txt", tdt_path("multi/ln")), 0);
	const char *ins[] = {tdt_path("multi/dir"), tdt_path("multi/top.txt"), tdt_path("multi/ln")};
	int err = td_compress_paths(tdt_path("multi.tadoc"), ins, 3, NULL);
	cr_assert_eq(err, TD_OK, "%s", td_errdetail());
	td_archive *a = tdt_open("multi.tadoc", TD_OPEN_VERIFY);
	td_entry e;
	td_stat st;
	cr_assert_eq(td_archive_lookup_path(a, "dir/in.txt", &e), TD_OK);
	cr_assert_eq(td_archive_lookup_path(a, "top.txt", &e), TD_OK);
	cr_assert_eq(td_archive_lookup_path(a, "ln", &e), TD_OK);
	cr_assert_eq(td_archive_stat(a, e, &st), TD_OK);
	cr_assert(S_ISLNK(st.mode));
	td_archive_close(a);
}

int main(int argc, char **argv)
{
	return tdt_main(argc, argv, TDT_TREE | TDT_ARCHIVE | TDT_WRITER | TDT_ORACLE);
}
