/* engine_ready: format 5 shards opened and checked on first touch: concurrent first reads, a background checksum pass, a damaged shard. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine_fixture.h"
#include "td_archive.h"
#include "td_build.h"
#include "td_pack.h"
#include "td_extract.h"
#include "td_format.h"
#include "td_query.h"

#define NDIRS 4
#define NFILES 48 /* NDIRS directories of NFILES / NDIRS files */
#define NTHREADS 8

static const char *const vocab[] = { "whale", "sea", "ship", "the", "of", "harpoon", "Queequeg", "captain",
				     "deck", "mast", "a", "in", "white", "line", "boat" };

/* File i's text (deterministic) into a malloc'd buffer. */
static char *text_of(unsigned i, size_t *len)
{
	uint64_t st = 0x9e3779b97f4a7c15u * (i + 1);
	size_t n = 2000 + (size_t)(tdt_rand(&st) % 9000), at = 0;
	char *t = malloc(n + 32);
	cr_assert_not_null(t);
	while (at < n) {
		const char *w = vocab[tdt_rand(&st) % (sizeof vocab / sizeof *vocab)];
		at += (size_t)sprintf(t + at, "%s%s", w, tdt_rand(&st) % 9 ? " " : ".\n");
	}
	*len = at;
	return t;
}

static void path_of(unsigned i, char *buf, size_t cap)
{
	snprintf(buf, cap, "d%u/f%02u.txt", i / (NFILES / NDIRS), i % (NFILES / NDIRS));
}

/* The test archive: NFILES files in 32 KiB shards (about a dozen), built
 * once per worker process. */
static const char *archive(void)
{
	const char *out = tdt_path("ready5.tadoc");
	struct stat st;
	if (stat(out, &st) == 0)
		return out;
	td_build *b = tdt_build_new(32 << 10);
	for (unsigned d = 0; d < NDIRS; d++) {
		char p[32];
		snprintf(p, sizeof p, "d%u", d);
		cr_assert_eq(td_build_add_dir(b, p, 0755, 1700000000, 0), TD_OK, "%s", td_errdetail());
	}
	for (unsigned i = 0; i < NFILES; i++) {
		char p[32];
		size_t n;
		char *t = text_of(i, &n);
		path_of(i, p, sizeof p);
		cr_assert_eq(td_build_add_file(b, p, 0644, 1700000000, 0, t, n), TD_OK, "%s", td_errdetail());
		free(t);
	}
	tdt_build_finish(b, out);
	return out;
}

/* Read file i whole through a; TD_OK with *same set, or the error. */
static int read_file(td_archive *a, unsigned i, int *same)
{
	char p[32];
	size_t n, got = 0;
	path_of(i, p, sizeof p);
	td_entry e;
	int err = td_archive_lookup_path(a, p, &e);
	if (err)
		return err;
	char *want = text_of(i, &n);
	char *buf = malloc(n + 1);
	cr_assert_not_null(buf);
	err = td_extract(a, e, 0, buf, n + 1, &got);
	*same = err == TD_OK && got == n && memcmp(buf, want, n) == 0;
	free(buf);
	free(want);
	return err;
}

typedef struct job {
	td_archive *a;
	unsigned first, t; /* files first .. first + 3 */
	int sums;          /* thread 0: the checksum pass beside the readers */
	int bad;
} job;

static void reader(void *arg)
{
	job *j = arg;
	if (j->sums && td_archive_check_sums(j->a, 1, NULL) != TD_OK)
		j->bad++;
	for (unsigned k = 0; k < 4; k++) {
		int same = 0;
		if (read_file(j->a, j->first + (j->t + k) % 4, &same) != TD_OK || !same)
			j->bad++;
	}
}

/* Eight threads released together read four neighbouring files (one or
 * two shards) on a fresh open, one of them checking every checksum first:
 * each shard is opened once and every byte is the original's. */
Test(ready, concurrent_first_reads)
{
	const char *arc = archive();
	for (unsigned round = 0; round < 24; round++) {
		td_archive *a;
		cr_assert_eq(td_archive_open(arc, 0, &a), TD_OK, "%s", td_errdetail());
		job jobs[NTHREADS];
		unsigned first = (round * 7) % (NFILES - 4);
		for (unsigned t = 0; t < NTHREADS; t++)
			jobs[t] = (job){ a, first, t, t == 0 && round % 2, 0 };
		tdt_threads(NTHREADS, reader, jobs, sizeof *jobs);
		for (unsigned t = 0; t < NTHREADS; t++)
			cr_assert_eq(jobs[t].bad, 0, "round %u thread %u: %d bad reads", round, t, jobs[t].bad);
		td_archive_close(a);
	}
}

/* Offset of shard k's root section in the container image b. */
static size_t shard_root(const uint8_t *b, uint32_t k, uint32_t *nshards)
{
	const td_disk_header *h = (const td_disk_header *)b;
	const td_disk_section *tab = (const td_disk_section *)(b + h->sectab_off);
	const td_disk_shard *sh = NULL;
	for (uint32_t i = 0; i < h->nsections; i++)
		if (tab[i].id == TD_SEC5_SHARDS) {
			sh = (const td_disk_shard *)(b + tab[i].off);
			*nshards = (uint32_t)(tab[i].size / sizeof *sh);
		}
	cr_assert_not_null(sh);
	cr_assert_lt(k, *nshards);
	const uint8_t *img = b + sh[k].off;
	const td_disk_header *sh_h = (const td_disk_header *)img;
	const td_disk_section *st = (const td_disk_section *)(img + sh_h->sectab_off);
	for (uint32_t i = 0; i < sh_h->nsections; i++)
		if (st[i].id == TD_SEC_ROOT_SYMS)
			return (size_t)(sh[k].off + st[i].off + st[i].size / 2);
	cr_assert_fail("shard %u has no root section", k);
	return 0;
}

/* Open path (damaged, yet it opens) and check that its root lists. */
static td_archive *open_lists(const char *path)
{
	td_archive *a;
	cr_assert_eq(td_archive_open(path, 0, &a), TD_OK, "%s", td_errdetail());
	td_entry first;
	uint32_t count;
	cr_assert_eq(td_archive_children(a, TD_ROOT, &first, &count), TD_OK);
	cr_assert_eq(count, NDIRS);
	return a;
}

/* A damaged shard: the archive opens and lists its tree; the checksum pass
 * names the shard (td_archive_verify: its section); reads of its files give
 * TD_ECORRUPT, every other file reads exact; a count over the root gives
 * TD_ECORRUPT. */
Test(ready, damaged_shard)
{
	size_t len;
	uint8_t *b = tdt_slurp(archive(), &len);
	cr_assert_not_null(b);
	uint32_t n = 0;
	shard_root(b, 0, &n);
	cr_assert_geq(n, 6, "only %u shards", n);
	size_t at = shard_root(b, n / 2, &n);
	b[at] ^= 0x5a;
	const char *bad = tdt_path("damaged5.tadoc");
	cr_assert_eq(tdt_spit(bad, b, len), 0);
	free(b);
	for (int pass = 0; pass < 2; pass++) {
		td_archive *a = open_lists(bad);
		if (pass == 1) { /* the pass first, then the reads */
			cr_assert_eq(td_archive_check_sums(a, 1, NULL), TD_ECORRUPT);
			char want[64];
			snprintf(want, sizeof want, "shard %u: checksum mismatch", n / 2);
			cr_assert(strstr(td_errdetail(), want), "detail: %s", td_errdetail());
			/* the whole check names the shard's section: the byte is in its root */
			char want2[80];
			snprintf(want2, sizeof want2, "shard %u: section 'root': checksum mismatch", n / 2);
			cr_assert_eq(td_archive_verify(a), TD_ECORRUPT);
			cr_assert(strstr(td_errdetail(), want2), "detail: %s", td_errdetail());
		}
		unsigned ok = 0, corrupt = 0, damaged = 0;
		for (unsigned i = 0; i < NFILES; i++) {
			int same = 0, err = read_file(a, i, &same);
			cr_assert(err == TD_ECORRUPT || (err == TD_OK && same), "file %u: %s", i, td_strerror(err));
			ok += err == TD_OK;
			corrupt += err == TD_ECORRUPT;
			if (err == TD_ECORRUPT)
				damaged = i;
		}
		cr_assert(ok > 0 && corrupt > 0, "pass %d: %u exact, %u corrupt", pass, ok, corrupt);
		/* a count over a damaged file reads its root symbols */
		char p[32];
		td_entry e;
		uint64_t c = 0;
		path_of(damaged, p, sizeof p);
		cr_assert_eq(td_archive_lookup_path(a, p, &e), TD_OK);
		cr_assert_eq(td_count(a, "whale", 5, e, &c), TD_ECORRUPT);
		td_archive_close(a);
	}
}

/* A hostile piece map: the last piece (of the last file, deep in the tree)
 * names a shard past the table's end. Opening decodes no piece, so the
 * archive opens and lists; reading that file, td_archive_verify and an
 * open with TD_OPEN_VERIFY each give TD_ECORRUPT naming the piece. */
Test(ready, hostile_piece_refused_when_reached)
{
	size_t len;
	uint8_t *b = tdt_slurp(archive(), &len);
	cr_assert_not_null(b);
	td_disk_header *h = (td_disk_header *)b;
	td_disk_section *tab = (td_disk_section *)(b + h->sectab_off), *ps = NULL;
	uint32_t nshards = 0;
	for (uint32_t i = 0; i < h->nsections; i++) {
		if (tab[i].id == TD_SEC5_P_SHARD)
			ps = &tab[i];
		if (tab[i].id == TD_SEC5_SHARDS)
			nshards = (uint32_t)(tab[i].size / sizeof(td_disk_shard));
	}
	cr_assert(ps && nshards > 1);
	td_pack col;
	cr_assert_eq(td_pack_view(&col, b + ps->off, ps->size), TD_OK);
	uint64_t np = col.n, *v = malloc(np * sizeof *v);
	cr_assert(v && np > 1);
	td_pack_get_range(&col, 0, np, v);
	v[np - 1] = nshards + 7;
	td_buf nb = { 0 };
	cr_assert_eq(td_pack_encode(v, np, &nb), TD_OK);
	free(v);
	/* the new column after the old end, the table and header resummed */
	size_t at = (len + 7) & ~(size_t)7, nlen = at + nb.len;
	uint8_t *c = calloc(1, nlen);
	cr_assert_not_null(c);
	memcpy(c, b, len);
	memcpy(c + at, nb.p, nb.len);
	h = (td_disk_header *)c;
	tab = (td_disk_section *)(c + h->sectab_off);
	ps = &tab[ps - (td_disk_section *)(b + ((td_disk_header *)b)->sectab_off)];
	ps->off = at;
	ps->size = nb.len;
	ps->sum = XXH3_64bits(c + at, nb.len);
	h->file_size = nlen;
	h->sectab_sum = XXH3_64bits(tab, h->nsections * sizeof *tab);
	h->header_sum = XXH3_64bits(h, offsetof(td_disk_header, header_sum));
	td_buf_free(&nb);
	free(b);
	const char *bad = tdt_path("hostile-piece5.tadoc");
	cr_assert_eq(tdt_spit(bad, c, nlen), 0);
	free(c);
	char want[96];
	snprintf(want, sizeof want, "piece %llu names no shard", (unsigned long long)(np - 1));
	td_archive *a = open_lists(bad);
	int same = 0;
	for (int k = 0; k < 2; k++) { /* refused again, not half-decoded */
		cr_assert_eq(read_file(a, NFILES - 1, &same), TD_ECORRUPT);
		cr_assert(strstr(td_errdetail(), want), "detail: %s", td_errdetail());
	}
	cr_assert_eq(td_archive_verify(a), TD_ECORRUPT);
	cr_assert(strstr(td_errdetail(), want), "detail: %s", td_errdetail());
	td_archive_close(a);
	cr_assert_eq(td_archive_open(bad, TD_OPEN_VERIFY, &a), TD_ECORRUPT);
	cr_assert(strstr(td_errdetail(), want), "detail: %s", td_errdetail());
}

int main(int argc, char **argv)
{
	return tdt_main(argc, argv, 0);
}
