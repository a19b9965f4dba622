/* td_atab: the analytics tables of a version 5 container, written after its shards, read as a prefix. */
#include "td_atab.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#include "td_analytics_int.h"
#include "td_archive_int.h"
#include "td_format.h"
#include "td_out.h"

/* zstd level of the parts (a few KiB each) */
#define AT_LEVEL 19
/* the most one part may decode to: 2^26 bytes (its k is at most 2^20) */
#define AT_RAW_MAX (UINT64_C(1) << 26)
#define AT_K_MAX (UINT64_C(1) << 20)
/* the default words' part of a small archive (TD_ATAB_WORDS_K's over 0.1%) */
#define AT_WORDS_SMALL 100u

#define AT_BAD(...) td_fail(TD_ECORRUPT, "analytics tables (section 40): " __VA_ARGS__)

/* ---------- building ---------- */

typedef struct atraw {
	td_buf b;
	uint64_t n;
	int err;
} atraw;

static int put_item(atraw *r, const void *p, size_t len, uint64_t count)
{
	int err = td_buf_leb(&r->b, count);
	if (!err)
		err = td_buf_leb(&r->b, len);
	if (!err)
		err = td_buf_put(&r->b, p, len);
	r->n++;
	return err;
}

static int word_fn(void *ctx, const char *word, size_t len, uint64_t count)
{
	return put_item(ctx, word, len, count);
}

static int ngram_fn(void *ctx, const char *const *words, const size_t *lens, unsigned nwords, uint64_t count)
{
	atraw *r = ctx;
	int err = td_buf_leb(&r->b, count);
	size_t len = nwords - 1;
	for (unsigned i = 0; i < nwords; i++)
		len += lens[i];
	if (!err)
		err = td_buf_leb(&r->b, len);
	for (unsigned i = 0; i < nwords && !err; i++) {
		err = td_buf_put(&r->b, words[i], lens[i]);
		if (!err && i + 1 < nwords)
			err = td_buf_put(&r->b, " ", 1);
	}
	r->n++;
	return err;
}

/* Part L's items computed from the shards (never from the tables): the
 * top k words (L = 1) or L-grams. */
static int part_raw(const td_archive *a, unsigned L, uint64_t k, atraw *r)
{
	memset(r, 0, sizeof *r);
	int err = L == 1 ? td_shard_top_words(a, TD_ROOT, k, word_fn, r)
			 : td_shard_ngrams(a, TD_ROOT, L, k, ngram_fn, r);
	if (err)
		td_buf_free(&r->b);
	return err;
}

int td_atab_append(const char *path, const char *name, uint64_t words_k, uint64_t ngrams_k)
{
	if (!words_k && !ngrams_k)
		return TD_OK;
	if (words_k > AT_K_MAX || ngrams_k > AT_K_MAX)
		return td_fail(TD_EINVAL, "%s: analytics tables of more than %llu items", name,
			       (unsigned long long)AT_K_MAX);
	td_archive *a;
	int err = td_archive_open(path, 0, &a);
	if (err)
		return err;
	if (!td_sharded(a) || !a->sec5[0] || a->sec_at) {
		err = td_fail(TD_EINVAL, "%s: %s", name,
			      a->sec_at ? "already has analytics tables" : "not a version 5 archive");
		td_archive_close(a);
		return err;
	}
	td_disk_atab h;
	memset(&h, 0, sizeof h);
	memcpy(h.magic, TD_ATAB_MAGIC, sizeof h.magic);
	h.shards_sum = XXH3_64bits(a->map + a->sec5[0]->off, a->sec5[0]->size);
	td_buf sec = { 0 };
	err = td_buf_put(&sec, &h, sizeof h);
	for (unsigned L = 1; L <= TD_PHRASE_MAX && !err; L++) {
		const uint64_t k = L == 1 ? words_k : ngrams_k;
		if (!k)
			continue;
		atraw r = { 0 };
		td_disk_atpart *p = &h.p[L];
		for (uint64_t kk = k;; kk = AT_WORDS_SMALL) {
			if ((err = part_raw(a, L, kk, &r)))
				break;
			p->raw = r.b.len;
			p->n = r.n;
			p->k = kk;
			p->complete = r.n < kk;
			if ((err = td_buf_zstd(&r.b, AT_LEVEL)))
				break;
			/* the default words' part over a thousandth of the archive
			 * (a small corpus): its top AT_WORDS_SMALL only */
			if (L > 1 || words_k != TD_ATAB_WORDS_K || kk <= AT_WORDS_SMALL || r.b.len * 1000 <= a->size)
				break;
			td_buf_free(&r.b);
		}
		if (!err) {
			p->off = sec.len;
			p->size = r.b.len;
			err = td_buf_put(&sec, r.b.p, r.b.len);
		}
		td_buf_free(&r.b);
	}
	td_archive_close(a);
	if (!err && !(err = td_buf_align(&sec, 8))) {
		memcpy(sec.p, &h, sizeof h);
		err = td_sec_append(path, name, TD_SEC5_ATAB, sec.p, sec.len);
	}
	td_buf_free(&sec);
	return err;
}

/* ---------- reading ---------- */

/* The section's header once its bytes match the section table's sum;
 * NULL with *err set (TD_OK: no usable tables). */
static const td_disk_atab *at_header(const td_archive *a, int *err)
{
	*err = TD_OK;
	const td_disk_section *s = a->sec_at;
	if (!s || !td_sharded(a) || !a->sec5[0])
		return NULL;
	const td_disk_atab *h = (const td_disk_atab *)(a->map + s->off);
	if (XXH3_64bits(a->map + s->off, s->size) != s->sum) {
		*err = AT_BAD("checksum mismatch");
		return NULL;
	}
	if (s->size < sizeof *h || memcmp(h->magic, TD_ATAB_MAGIC, sizeof h->magic)) {
		*err = AT_BAD("bad header");
		return NULL;
	}
	if (h->shards_sum != XXH3_64bits(a->map + a->sec5[0]->off, a->sec5[0]->size))
		return NULL; /* made for other shards */
	return h;
}

int td_archive_tables(const td_archive *a, uint64_t *bytes, uint64_t *words_k, uint64_t *ngrams_k)
{
	*bytes = a->sec_at ? a->sec_at->size : 0;
	*words_k = *ngrams_k = 0;
	int err;
	const td_disk_atab *h = at_header(a, &err);
	if (!h)
		return err;
	*words_k = h->p[1].size ? h->p[1].k : 0;
	*ngrams_k = h->p[2].size ? h->p[2].k : 0;
	return 1;
}

/* Part L decoded into *out (malloc'd, h->p[L].raw bytes, its items
 * checked: lengths, counts descending, L words an n-gram). */
static int at_part(const td_archive *a, const td_disk_atab *h, unsigned L, uint8_t **out)
{
	const td_disk_atpart *p = &h->p[L];
	const uint64_t size = a->sec_at->size;
	*out = NULL;
	if (p->off < sizeof *h || p->off > size || p->size > size - p->off || p->k > AT_K_MAX || p->n > p->k ||
	    p->raw > AT_RAW_MAX || p->raw < 3 * p->n || p->complete > 1 || (p->complete && p->n >= p->k))
		return AT_BAD("part %u out of bounds", L);
	uint8_t *b = malloc(p->raw ? p->raw : 1);
	if (!b)
		return TD_ENOMEM;
	const size_t got = ZSTD_decompress(b, p->raw, a->map + a->sec_at->off + p->off, p->size);
	if (ZSTD_isError(got) || got != p->raw) {
		free(b);
		return AT_BAD("part %u does not decode", L);
	}
	const uint8_t *q = b, *end = b + p->raw;
	uint64_t prev = UINT64_MAX;
	for (uint64_t i = 0; i < p->n; i++) {
		uint64_t c, len;
		if (td_leb_get(&q, end, &c) || td_leb_get(&q, end, &len) || !c || c > prev || !len || len > (uint64_t)(end - q))
			break;
		unsigned sp = 0, empty = q[0] == ' ' || q[len - 1] == ' ';
		for (uint64_t j = 0; L > 1 && j < len; j++)
			if (q[j] == ' ') {
				sp++;
				empty |= j + 1 < len && q[j + 1] == ' ';
			}
		if (L > 1 && (sp != L - 1 || empty))
			break;
		prev = c;
		q += len;
	}
	if (q != end) {
		free(b);
		return AT_BAD("part %u: damaged item", L);
	}
	*out = b;
	return TD_OK;
}

/* How many items of part L answer a request for the top n (0: all): 0
 * when the part cannot (absent, or n beyond it and not complete). */
static uint64_t at_take(const td_disk_atab *h, unsigned L, uint64_t n)
{
	const td_disk_atpart *p = &h->p[L];
	if (!p->size)
		return 0;
	if (n && n <= p->n)
		return n;
	return p->complete ? p->n : 0;
}

/* The items of part L answering the top n: fn_w (words) or fn_g (n-grams)
 * each; *used as td_atab_top says. */
static int at_answer(const td_archive *a, unsigned L, uint64_t n, td_word_fn fn_w, td_ngram_fn fn_g, void *ctx,
		     int *used)
{
	*used = 0;
	int err;
	/* a request the tables cannot answer (by the header as it reads,
	 * before it is checked) does not read them: it is computed */
	const td_disk_section *s = a->sec_at;
	if (!s || s->size < sizeof(td_disk_atab) || !at_take((const td_disk_atab *)(a->map + s->off), L, n))
		return TD_OK;
	const td_disk_atab *h = at_header(a, &err);
	uint64_t take;
	if (!h || !(take = at_take(h, L, n)))
		return err;
	if (!h->p[L].n) {
		*used = 1;
		return TD_OK;
	}
	uint8_t *b;
	if ((err = at_part(a, h, L, &b)))
		return err;
	*used = 1;
	const uint8_t *q = b, *end = b + h->p[L].raw;
	for (uint64_t i = 0; i < take && !err; i++) {
		uint64_t c = 0, len = 0;
		td_leb_get(&q, end, &c); /* checked by at_part */
		td_leb_get(&q, end, &len);
		if (L == 1) {
			err = fn_w(ctx, (const char *)q, len, c);
		} else {
			const char *w[TD_PHRASE_MAX];
			size_t l[TD_PHRASE_MAX];
			unsigned k = 0;
			w[0] = (const char *)q;
			for (uint64_t j = 0; j < len; j++)
				if (q[j] == ' ') {
					l[k] = (size_t)((const char *)q + j - w[k]);
					w[++k] = (const char *)q + j + 1;
				}
			l[k] = (size_t)((const char *)q + len - w[k]);
			err = fn_g(ctx, w, l, L, c);
		}
		q += len;
	}
	free(b);
	return err;
}

int td_atab_top(const td_archive *a, uint64_t n, td_word_fn fn, void *ctx, int *used)
{
	return at_answer(a, 1, n, fn, NULL, ctx, used);
}

int td_atab_ngrams(const td_archive *a, unsigned len, uint64_t top, td_ngram_fn fn, void *ctx, int *used)
{
	*used = 0;
	if (len < 2 || len > TD_PHRASE_MAX)
		return TD_OK;
	return at_answer(a, len, top, NULL, fn, ctx, used);
}

int td_atab_verify(const td_archive *a)
{
	if (!a->sec_at)
		return TD_OK;
	int err;
	const td_disk_atab *h = at_header(a, &err);
	if (!h)
		return err ? err : AT_BAD("made for other shards");
	for (unsigned L = 0; L <= TD_PHRASE_MAX && !err; L++) {
		const td_disk_atpart *p = &h->p[L];
		if (!p->size) {
			if (p->off || p->raw || p->n || p->k || p->complete)
				err = AT_BAD("part %u: absent but described", L);
			continue;
		}
		uint8_t *b;
		atraw r;
		if (!L)
			err = AT_BAD("part 0 is not empty");
		else if (!(err = at_part(a, h, L, &b))) {
			if (!(err = part_raw(a, L, p->k, &r))) {
				if (r.n != p->n || r.b.len != p->raw || (r.b.len && memcmp(r.b.p, b, r.b.len)) ||
				    p->complete != (r.n < p->k))
					err = AT_BAD("part %u differs from the archive's %s", L,
						     L == 1 ? "top words" : "n-grams");
				td_buf_free(&r.b);
			}
			free(b);
		}
	}
	return err;
}
