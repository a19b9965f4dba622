/* td_fzix: the fuzzy index of a version 5 container, written after its shards and searched in place. */
#include "td_fzix.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "td_archive_int.h"
#include "td_format.h"
#include "td_out.h"
#include "td_tokenize.h"

/* zstd level of the buckets: level 19 (the shards' dictionaries) costs
 * seconds on linux's vocabulary for a few percent of its size */
#define FZ_LEVEL 12

#define FZ_BAD(...) td_fail(TD_ECORRUPT, "fuzzy index (section 37): " __VA_ARGS__)

/* Code point at byte pos of w (its bytes in *n); a byte that does not
 * decode is one code point. */
static inline uint32_t fz_cp(const uint8_t *w, size_t len, size_t pos, unsigned *n)
{
	if (w[pos] < 0x80) {
		*n = 1;
		return w[pos];
	}
	uint32_t cp = 0;
	*n = td_utf8_decode(w + pos, len - pos, &cp);
	if (!*n) {
		*n = 1;
		cp = w[pos] | 0x800000u;
	}
	return cp;
}

static unsigned fz_cps(const uint8_t *w, size_t len, uint32_t *out)
{
	unsigned n = 0, k;
	for (size_t i = 0; i < len; i += k) {
		uint32_t c = fz_cp(w, len, i, &k);
		if (out)
			out[n] = c;
		n++;
	}
	return n;
}

/* ---------- building the buckets ---------- */

typedef struct fzb {
	td_buf e, c;       /* the words, front-coded; their counts */
	uint8_t prev[TD_MAXTOK];
	unsigned plen;
	uint64_t n;
} fzb;

typedef struct fzraw {
	fzb b[TD_FZIX_NB];
	uint64_t n;
} fzraw;

static int gather_fn(void *ctx, const char *word, size_t len, uint64_t count)
{
	fzraw *r = ctx;
	const uint8_t *w = (const uint8_t *)word;
	if (!len || len > TD_MAXTOK)
		return TD_OK; /* long words: a query that could reach them does not use the index */
	fzb *b = &r->b[fz_cps(w, len, NULL)];
	unsigned p = 0;
	while (p < b->plen && p < len && b->prev[p] == w[p])
		p++;
	if (b->n && (p == len || (p < b->plen && b->prev[p] > w[p])))
		return td_fail(TD_ECORRUPT, "vocabulary not in byte order");
	uint8_t h[2] = { (uint8_t)p, (uint8_t)(len - p) };
	int err = td_buf_put(&b->e, h, 2);
	if (!err)
		err = td_buf_put(&b->e, w + p, len - p);
	if (!err)
		err = td_buf_leb(&b->c, count);
	memcpy(b->prev, w, len);
	b->plen = (unsigned)len;
	b->n++;
	r->n++;
	return err;
}

static void raw_free(fzraw *r)
{
	for (unsigned i = 0; i < TD_FZIX_NB; i++) {
		td_buf_free(&r->b[i].e);
		td_buf_free(&r->b[i].c);
	}
}

/* The root's vocabulary of a, bucketed (each bucket's e then holds its
 * raw bytes: words, then counts). */
static int raw_gather(const td_archive *a, fzraw *r)
{
	memset(r, 0, sizeof *r);
	int err = td_term_vector(a, TD_ROOT, gather_fn, r);
	for (unsigned i = 0; i < TD_FZIX_NB && !err; i++)
		err = td_buf_put(&r->b[i].e, r->b[i].c.p, r->b[i].c.len);
	if (err)
		raw_free(r);
	return err;
}

int td_fzix_append(const char *path, const char *name)
{
	td_archive *a;
	int err = td_archive_open(path, 0, &a);
	if (err)
		return err;
	fzraw *r = calloc(1, sizeof *r);
	td_buf sec = { 0 };
	if (!r || !td_sharded(a) || !a->sec5[0]) {
		td_archive_close(a);
		free(r);
		return r ? td_fail(TD_EINVAL, "%s: not a version 5 archive", name) : TD_ENOMEM;
	}
	td_disk_fzix h;
	memset(&h, 0, sizeof h);
	memcpy(h.magic, TD_FZIX_MAGIC, sizeof h.magic);
	h.shards_sum = XXH3_64bits(a->map + a->sec5[0]->off, a->sec5[0]->size);
	if (a->sec_fz)
		err = td_fail(TD_EINVAL, "%s: already has a fuzzy index", name);
	if (!err)
		err = raw_gather(a, r);
	td_archive_close(a);
	if (err)
		goto out;
	h.nwords = r->n;
	if ((err = td_buf_put(&sec, &h, sizeof h)))
		goto out;
	for (unsigned i = 0; i < TD_FZIX_NB && !err; i++) {
		fzb *b = &r->b[i];
		if (!b->n)
			continue;
		h.b[i].raw = b->e.len;
		h.b[i].nwords = b->n;
		if ((err = td_buf_zstd(&b->e, FZ_LEVEL)))
			break;
		h.b[i].off = sec.len;
		h.b[i].size = b->e.len;
		h.b[i].sum = XXH3_64bits(b->e.p, b->e.len);
		err = td_buf_put(&sec, b->e.p, b->e.len);
		td_buf_free(&b->e);
	}
	if (err || (err = td_buf_align(&sec, 8)))
		goto out;
	h.sum = XXH3_64bits(&h, offsetof(td_disk_fzix, sum));
	memcpy(sec.p, &h, sizeof h);
	err = td_sec_append(path, name, TD_SEC5_FUZZY, sec.p, sec.len);
out:
	raw_free(r);
	free(r);
	td_buf_free(&sec);
	return err;
}

/* ---------- reading ---------- */

/* The index's header, checked; NULL with *err set (TD_OK: no usable
 * index). */
static const td_disk_fzix *fz_header(const td_archive *a, int *err)
{
	*err = TD_OK;
	const td_disk_section *s = a->sec_fz;
	if (!s || !td_sharded(a) || !a->sec5[0])
		return NULL;
	const td_disk_fzix *h = (const td_disk_fzix *)(a->map + s->off);
	if (s->size < sizeof *h || memcmp(h->magic, TD_FZIX_MAGIC, sizeof h->magic) ||
	    XXH3_64bits(h, offsetof(td_disk_fzix, sum)) != h->sum) {
		*err = FZ_BAD("header checksum mismatch");
		return NULL;
	}
	if (h->shards_sum != XXH3_64bits(a->map + a->sec5[0]->off, a->sec5[0]->size))
		return NULL; /* built for other shards */
	return h;
}

int td_archive_fuzzy_index(const td_archive *a, uint64_t *bytes, uint64_t *nwords)
{
	*bytes = a->sec_fz ? a->sec_fz->size : 0;
	*nwords = 0;
	int err;
	const td_disk_fzix *h = fz_header(a, &err);
	if (!h)
		return err;
	*nwords = h->nwords;
	return 1;
}

/* Bucket L's raw bytes into *buf (grown as needed). */
static int fz_bucket(const td_archive *a, const td_disk_fzix *h, unsigned L, uint8_t **buf, size_t *cap)
{
	const td_disk_fzbucket *b = &h->b[L];
	const uint64_t size = a->sec_fz->size;
	if (b->off < sizeof *h || b->off > size || b->size > size - b->off || !b->size || b->raw < 3 * b->nwords ||
	    b->raw > (uint64_t)(2 + TD_MAXTOK + 10) * b->nwords)
		return FZ_BAD("bucket %u out of bounds", L);
	const uint8_t *z = a->map + a->sec_fz->off + b->off;
	if (XXH3_64bits(z, b->size) != b->sum)
		return FZ_BAD("bucket %u checksum mismatch", L);
	/* the buffer is sized by what the frame can hold, not by the counts
	 * alone (a fuzzed header asked for 2^56 bytes) */
	if (b->raw > td_zstd_frame_bound(z, b->size))
		return FZ_BAD("bucket %u: %llu bytes, more than its frame holds", L, (unsigned long long)b->raw);
	if (b->raw > *cap) {
		uint8_t *n = realloc(*buf, b->raw);
		if (!n)
			return TD_ENOMEM;
		*buf = n;
		*cap = b->raw;
	}
	size_t got = ZSTD_decompress(*buf, b->raw, z, b->size);
	if (ZSTD_isError(got) || got != b->raw)
		return FZ_BAD("bucket %u does not decode", L);
	return TD_OK;
}

/* A match: word bytes at off in the arena. */
typedef struct fzm {
	uint64_t off, count;
	uint32_t len, dist;
} fzm;

typedef struct fzout {
	fzm *v;
	size_t n, cap;
	td_buf arena;
} fzout;

/* Count i's varint from *at (checked). */
static int leb_next(const uint8_t *p, size_t n, size_t *at, uint64_t *v)
{
	uint64_t x = 0;
	for (unsigned sh = 0; sh < 64; sh += 7) {
		if (*at >= n)
			return -1;
		uint8_t c = p[(*at)++];
		x |= (uint64_t)(c & 0x7F) << sh;
		if (!(c & 0x80)) {
			*v = x;
			return 0;
		}
	}
	return -1;
}

/*
 * The words of bucket L (all of L code points, in byte order, front-coded)
 * within k of q[0, m): a depth-first walk of their implicit trie, one row
 * of the Levenshtein matrix a code point, kept while the next word shares
 * the code points (rows are reused along the shared prefix). Only the band
 * |j - d| <= k is computed, saturated at k + 1; a prefix is given up when
 * every cell j, plus the difference between the query's m - j code points
 * left and the word's L - d, exceeds k, and so is every word after it
 * that shares it (front coding says how many bytes each shares).
 */
static int fz_walk(const uint8_t *raw, size_t rawn, uint64_t n, unsigned L, const uint32_t *q, unsigned m, unsigned k,
		   fzout *o)
{
	uint8_t w[TD_MAXTOK + 1];
	uint16_t ends[TD_MAXTOK + 2];
	uint8_t rows[64 * 64];
	const unsigned cols = m + 1;
	memset(rows, (int)(k + 1), sizeof rows);
	for (unsigned j = 0; j <= m && j <= k; j++)
		rows[j] = (uint8_t)j;
	ends[0] = 0;
	size_t at = 0, first = o->n;
	unsigned wl = 0, have = 0, dead = TD_MAXTOK + 1;
	for (uint64_t i = 0; i < n; i++) {
		if (at + 2 > rawn)
			return FZ_BAD("bucket %u truncated", L);
		unsigned p = raw[at], sl = raw[at + 1];
		at += 2;
		if (!sl || p > wl || p + sl > TD_MAXTOK || sl > rawn - at)
			return FZ_BAD("bucket %u: word %llu does not decode", L, (unsigned long long)i);
		const unsigned len = p + sl;
		if (p >= dead) { /* shares a prefix given up */
			at += sl;
			wl = len;
			continue;
		}
		dead = TD_MAXTOK + 1;
		memcpy(w + p, raw + at, sl);
		at += sl;
		wl = len;
		unsigned d = have;
		while (d && ends[d] > p)
			d--;
		int gone = 0;
		for (unsigned pos = ends[d]; pos < len;) {
			if (d >= L)
				return FZ_BAD("bucket %u: word %llu is longer", L, (unsigned long long)i);
			unsigned nb;
			const uint32_t c = fz_cp(w, len, pos, &nb);
			d++;
			pos += nb;
			ends[d] = (uint16_t)pos;
			const uint8_t *prev = rows + (size_t)(d - 1) * cols;
			uint8_t *row = rows + (size_t)d * cols;
			const unsigned lo = d > k ? d - k : 0, hi = d + k < m ? d + k : m;
			unsigned lb = k + 1;
			for (unsigned j = lo; j <= hi; j++) {
				unsigned v;
				if (!j) {
					v = d;
				} else {
					v = prev[j - 1] + (q[j - 1] != c);
					unsigned x = prev[j] + 1u, y = row[j - 1] + 1u;
					v = v < x ? v : x;
					v = v < y ? v : y;
				}
				v = v < k + 1 ? v : k + 1;
				row[j] = (uint8_t)v;
				const unsigned lq = m - j, lw = L - d, gap = lq > lw ? lq - lw : lw - lq;
				lb = v + gap < lb ? v + gap : lb;
			}
			if (lb > k) {
				gone = 1;
				break;
			}
		}
		have = d;
		if (gone) {
			dead = ends[d];
			continue;
		}
		if (d != L)
			return FZ_BAD("bucket %u: word %llu is shorter", L, (unsigned long long)i);
		const unsigned dist = rows[(size_t)L * cols + m];
		if (dist > k)
			continue;
		if (o->n == o->cap) {
			size_t cap = o->cap ? 2 * o->cap : 64;
			fzm *v = realloc(o->v, cap * sizeof *v);
			if (!v)
				return TD_ENOMEM;
			o->v = v;
			o->cap = cap;
		}
		o->v[o->n++] = (fzm){ o->arena.len, i, len, dist }; /* count: the index until read */
		int err = td_buf_put(&o->arena, w, len);
		if (err)
			return err;
	}
	/* the counts of the matches (in word order) */
	uint64_t idx = 0, c = 0;
	for (size_t x = first; x < o->n; x++) {
		const uint64_t want = o->v[x].count;
		for (; idx <= want; idx++)
			if (leb_next(raw, rawn, &at, &c))
				return FZ_BAD("bucket %u: counts do not decode", L);
		if (!c)
			return FZ_BAD("bucket %u: a count of 0", L);
		o->v[x].count = c;
	}
	return TD_OK;
}

static int fzm_cmp(const void *p, const void *q, void *ctx)
{
	const fzm *u = p, *v = q;
	if (u->dist != v->dist)
		return u->dist < v->dist ? -1 : 1;
	if (u->count != v->count)
		return u->count > v->count ? -1 : 1;
	const uint8_t *ar = ctx;
	int c = memcmp(ar + u->off, ar + v->off, u->len < v->len ? u->len : v->len);
	return c ? c : (u->len > v->len) - (u->len < v->len);
}

int td_fzix_fuzzy(const td_archive *a, const char *word, size_t len, unsigned k, td_fuzzy_fn fn, void *ctx, int *used)
{
	*used = 0;
	int err;
	const td_disk_fzix *h = fz_header(a, &err);
	if (!h || len > TD_MAXTOK)
		return err;
	uint32_t q[TD_MAXTOK];
	const unsigned m = fz_cps((const uint8_t *)word, len, q);
	if (m + k >= TD_MAXTOK / 4 + 1)
		return TD_OK; /* a word longer than TD_MAXTOK could be within k */
	*used = 1;
	fzout o;
	memset(&o, 0, sizeof o);
	uint8_t *buf = NULL;
	size_t cap = 0;
	for (unsigned L = m > k ? m - k : 1; L <= m + k && !err; L++)
		if (h->b[L].nwords && !(err = fz_bucket(a, h, L, &buf, &cap)))
			err = fz_walk(buf, h->b[L].raw, h->b[L].nwords, L, q, m, k, &o);
	free(buf);
	if (!err && o.n > 1)
		qsort_r(o.v, o.n, sizeof *o.v, fzm_cmp, o.arena.p);
	for (size_t i = 0; i < o.n && !err; i++)
		err = fn(ctx, o.v[i].dist, (const char *)o.arena.p + o.v[i].off, o.v[i].len, o.v[i].count);
	free(o.v);
	td_buf_free(&o.arena);
	return err;
}

int td_fzix_verify(const td_archive *a)
{
	int err;
	if (!a->sec_fz)
		return TD_OK;
	const td_disk_section *s = a->sec_fz;
	if (XXH3_64bits(a->map + s->off, s->size) != s->sum)
		return FZ_BAD("section checksum mismatch");
	const td_disk_fzix *h = fz_header(a, &err);
	if (!h)
		return err ? err : FZ_BAD("built for other shards");
	fzraw *r = calloc(1, sizeof *r);
	if (!r)
		return TD_ENOMEM;
	if ((err = raw_gather(a, r))) {
		free(r);
		return err;
	}
	uint8_t *buf = NULL;
	size_t cap = 0;
	if (h->nwords != r->n)
		err = FZ_BAD("%llu words, the archive has %llu", (unsigned long long)h->nwords, (unsigned long long)r->n);
	for (unsigned L = 0; L < TD_FZIX_NB && !err; L++) {
		if (h->b[L].nwords != r->b[L].n)
			err = FZ_BAD("bucket %u: %llu words, the archive has %llu", L, (unsigned long long)h->b[L].nwords,
				     (unsigned long long)r->b[L].n);
		else if (h->b[L].nwords &&
			 !(err = fz_bucket(a, h, L, &buf, &cap)) &&
			 (h->b[L].raw != r->b[L].e.len || memcmp(buf, r->b[L].e.p, r->b[L].e.len)))
			err = FZ_BAD("bucket %u differs from the archive's words", L);
	}
	free(buf);
	raw_free(r);
	free(r);
	return err;
}
