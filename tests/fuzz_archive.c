/* fuzz_archive: libFuzzer target for the archive reader: open (plain and verified) and every read path. */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include "td_analytics.h"
#include "td_archive.h"
#include "td_extract.h"
#include "td_format.h"
#include "td_query.h"

/*
 * Each input is tried twice: as given (so header, table and checksum checks
 * are fuzzed), and with every checksum recomputed (so the structural checks
 * and the readers behind them see damaged content that passes the sums).
 * Each version is opened plainly, with TD_OPEN_VERIFY and with its entry
 * tree checked lazily (a directory at a time); whatever opens is
 * read through stat, names, paths, look-ups, extract, cursors, count, search
 * and the batched forms. Work per input is bounded (first entries, short
 * reads) so a slow input means a slow reader, not a slow harness.
 */

static int g_fd = -1;
static char g_path[64];

static void put(const uint8_t *data, size_t size)
{
	if (g_fd < 0) {
		g_fd = memfd_create("fuzz_archive", MFD_CLOEXEC);
		if (g_fd < 0) {
			perror("memfd_create");
			abort();
		}
		snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
	}
	if (ftruncate(g_fd, 0) < 0 || pwrite(g_fd, data, size, 0) != (ssize_t)size) {
		perror("memfd write");
		abort();
	}
}

/* The fuzzy index's own sums (its buckets', then its header's). */
static void fix_fzix(uint8_t *p, uint64_t size)
{
	td_disk_fzix *x = (td_disk_fzix *)p;
	for (unsigned i = 0; i < TD_FZIX_NB; i++)
		if (x->b[i].off <= size && x->b[i].size <= size - x->b[i].off)
			x->b[i].sum = XXH3_64bits(p + x->b[i].off, x->b[i].size);
	x->sum = XXH3_64bits(x, offsetof(td_disk_fzix, sum));
}

/* The root vector's own sums (its blocks', then its header's over the
 * header and the block table). */
static void fix_vtab(uint8_t *p, uint64_t size)
{
	td_disk_vtab *h = (td_disk_vtab *)p;
	if (h->nblocks > (size - sizeof *h) / sizeof(td_disk_vblock))
		return;
	td_disk_vblock *bl = (td_disk_vblock *)(h + 1);
	for (uint64_t i = 0; i < h->nblocks; i++)
		if (bl[i].off <= size && bl[i].size <= size - bl[i].off)
			bl[i].sum = XXH3_64bits(p + bl[i].off, bl[i].size);
	XXH3_state_t *st = XXH3_createState();
	if (st && !XXH3_64bits_reset(st) && !XXH3_64bits_update(st, h, offsetof(td_disk_vtab, sum)) &&
	    !XXH3_64bits_update(st, bl, h->nblocks * sizeof *bl))
		h->sum = XXH3_64bits_digest(st);
	XXH3_freeState(st);
}

static int fz_fn(void *ctx, unsigned dist, const char *word, size_t len, uint64_t count)
{
	(void)ctx;
	(void)dist;
	(void)word;
	(void)len;
	(void)count;
	return TD_OK;
}

static int tw_fn(void *ctx, const char *word, size_t len, uint64_t count)
{
	(void)ctx;
	(void)word;
	(void)len;
	(void)count;
	return TD_OK;
}

static int ng_fn(void *ctx, const char *const *words, const size_t *lens, unsigned nwords, uint64_t count)
{
	(void)ctx;
	(void)count;
	size_t t = 0; /* every word readable */
	for (unsigned i = 0; i < nwords; i++)
		t += lens[i] && words[i][0] && words[i][lens[i] - 1];
	return t > SIZE_MAX - 1 ? 1 : TD_OK;
}

static void fix_sums(uint8_t *b, size_t len)
{
	if (len < sizeof(td_disk_header))
		return;
	td_disk_header h;
	memcpy(&h, b, sizeof h);
	uint64_t tl = (uint64_t)h.nsections * sizeof(td_disk_section);
	if (h.sectab_off > len || tl > len - h.sectab_off || h.sectab_off % 8)
		return;
	td_disk_section *t = (td_disk_section *)(b + h.sectab_off);
	for (uint32_t i = 0; i < h.nsections; i++)
		if (t[i].off <= len && t[i].size <= len - t[i].off) {
			if (t[i].id == TD_SEC5_FUZZY && t[i].size >= sizeof(td_disk_fzix) && t[i].off % 8 == 0)
				fix_fzix(b + t[i].off, t[i].size);
			if (t[i].id == TD_SEC5_VECTOR && t[i].size >= sizeof(td_disk_vtab) && t[i].off % 8 == 0)
				fix_vtab(b + t[i].off, t[i].size);
			t[i].sum = XXH3_64bits(b + t[i].off, t[i].size);
		}
	h.sectab_sum = XXH3_64bits(t, tl);
	h.header_sum = XXH3_64bits(&h, offsetof(td_disk_header, header_sum));
	memcpy(b, &h, sizeof h);
}

static void exercise(td_archive *a)
{
	static char buf[8192];
	uint32_t n = td_archive_nentries(a);
	/* many entries' parents and names at once, past the end too */
	{
		static td_entry ents[96];
		static td_name_ref ref[96];
		size_t done;
		for (uint32_t i = 0; i < 96; i++)
			ents[i] = i < n ? n - 1 - i : i;
		(void)td_archive_names(a, ents, 96, ref, &done);
	}
	td_cursor *c = td_cursor_new(a);
	uint32_t lim = n < 64 ? n : 64;
	for (uint32_t e = 0; e < lim; e++) {
		if (e == lim / 2)
			(void)td_archive_will_read(a, UINT64_MAX); /* the rest read after the sweep */
		td_stat st;
		size_t nl, got;
		char path[TD_MAXPATH + 1];
		td_entry first, found;
		uint32_t cnt;
		if (td_archive_stat(a, e, &st) != TD_OK)
			continue;
		const char *name = td_archive_name(a, e, &nl);
		if (td_archive_path(a, e, path, sizeof path) >= 0)
			(void)td_archive_lookup_path(a, path, &found);
		if (td_archive_children(a, e, &first, &cnt) == TD_OK && name)
			(void)td_archive_lookup(a, e, name, nl, &found);
		(void)td_extract(a, e, 0, buf, sizeof buf, &got);
		if (st.size > 3)
			(void)td_extract(a, e, st.size / 2, buf, 300, &got);
		(void)td_extract(a, e, st.size, buf, 10, &got);
		if (c) {
			uint64_t off = 0;
			for (int k = 0; k < 8; k++) {
				if (td_cursor_read(c, e, off, buf, 500, &got) != TD_OK || got == 0)
					break;
				off += got;
			}
		}
		if (e < 8) {
			uint64_t count;
			td_hits h = {0};
			(void)td_count(a, "the", 3, e, &count);
			(void)td_search(a, "a", 1, e, &h);
			td_hits_free(&h);
		}
	}
	uint64_t count;
	(void)td_count(a, "word", 4, TD_ROOT, &count);
	(void)td_word_total(a, TD_ROOT, &count);
	(void)td_fuzzy(a, "the", 3, 1, TD_ROOT, 1, fz_fn, NULL); /* the fuzzy index, where there is one */
	(void)td_fuzzy(a, "quick", 5, 2, TD_ROOT, 1, fz_fn, NULL);
	td_extract_req r[2] = {{.file = n > 1 ? 1 : 0, .off = 0, .len = 64, .buf = buf},
			       {.file = n, .off = 0, .len = 8, .buf = buf + 100}};
	(void)td_extract_batch(a, r, 2, 1);
	td_count_req cr[2] = {{.word = "x", .len = 1, .scope = TD_ROOT}, {.word = "y z", .len = 3, .scope = 0}};
	(void)td_count_batch(a, cr, 2, 1);
	td_search_req sr[1] = {{.word = "the", .len = 3, .scope = n > 1 ? 1 : 0}};
	(void)td_search_batch(a, sr, 1, 1);
	td_hits_free(&sr[0].hits);
	/* phrase counts over the whole archive (every rule's info in one pass):
	 * two words, three, a repeated word */
	static const char *const pw[] = { "the quick", "the the", "a b c" };
	for (unsigned k = 0; k < 3; k++)
		(void)td_phrase_count(a, pw[k], strlen(pw[k]), TD_ROOT, &count);
	/* ranked files: the stored postings' parser when the archive has them */
	static const char *const fw[] = { "the", "ab", "x", "fox" };
	for (unsigned k = 0; k < 4; k++) {
		td_file_count *fc = NULL;
		size_t nf = 0;
		(void)td_phrase_files(a, fw[k], strlen(fw[k]), k & 1 ? (n > 1 ? 1 : 0) : TD_ROOT, &fc, &nf);
		free(fc);
	}
	/* top words and n-grams of the root: the analytics tables' parser
	 * where the archive has them (a prefix, and all when complete) */
	(void)td_top_words(a, TD_ROOT, 3, tw_fn, NULL);
	(void)td_top_words(a, TD_ROOT, 0, tw_fn, NULL);
	(void)td_ngrams(a, TD_ROOT, 2, 4, ng_fn, NULL);
	(void)td_ngrams(a, TD_ROOT, 8, 0, ng_fn, NULL);
	uint64_t atb, atw, atn;
	(void)td_archive_tables(a, &atb, &atw, &atn);
	/* the root's vector: the stored one's block parser where there is one */
	(void)td_term_vector(a, TD_ROOT, tw_fn, NULL);
	uint64_t skipped;
	(void)td_term_vector_from(a, TD_ROOT, 3, tw_fn, NULL, &skipped);
	uint64_t vtb, vtw;
	(void)td_archive_root_vector(a, &vtb, &vtw);
	uint64_t pbytes;
	uint32_t pwith, pn;
	td_archive_postings(a, &pbytes, &pwith, &pn);
	td_info in;
	td_archive_info(a, &in);
	uint64_t sz;
	for (unsigned id = 0; id <= TD_SEC_MAX; id++) {
		(void)td_archive_section(a, id, &sz);
		(void)td_archive_bytes(a, id, &sz);
	}
	(void)td_archive_verify(a);
	td_cursor_free(c);
}

/* The engine checks trees of more entries than this a directory at a time,
 * when first reached (engine/td_archive_int.h): the third open below makes
 * every input's tree lazy, so the readers meet damaged trees that way too. */
extern uint32_t td_tree_eager_max;

static void try_all(const uint8_t *data, size_t size)
{
	put(data, size);
	static const unsigned flags[] = {0, TD_OPEN_VERIFY, 0};
	const uint32_t eager = td_tree_eager_max;
	for (int f = 0; f < 3; f++) {
		td_archive *a = NULL;
		td_tree_eager_max = f == 2 ? 0 : eager;
		if (td_archive_open(g_path, flags[f], &a) == TD_OK) {
			exercise(a);
			td_archive_close(a);
		}
	}
	td_tree_eager_max = eager;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	try_all(data, size);
	if (size >= sizeof(td_disk_header) && size <= (64u << 20)) {
		uint8_t *b = malloc(size);
		if (!b)
			return 0;
		memcpy(b, data, size);
		fix_sums(b, size);
		if (memcmp(b, data, size) != 0)
			try_all(b, size);
		free(b);
	}
	return 0;
}
