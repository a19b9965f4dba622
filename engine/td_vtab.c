/* td_vtab: the root's term vector of a version 5 container, written after its shards, read block by block. */
#include "td_vtab.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#include "td_analytics_int.h"
#include "td_archive_int.h"
#include "td_format.h"
#include "td_out.h"

/* zstd level of the blocks: 9 is within 8% of 19's size on linux-source's
 * vector (16.9 against 15.7 MB) at a fraction of its time */
#define VT_LEVEL 9
/* a block is closed at TD_VTAB_BLOCK words or once it decodes to this many bytes */
#define VT_RAW_CLOSE (1u << 20)
/* an item's bytes beyond its word's: three LEB128 values */
#define VT_ITEM_OVER 30u

#define VT_BAD(...) td_fail(TD_ECORRUPT, "root vector (section 41): " __VA_ARGS__)

/* The header's sum: XXH3-64 of its bytes before `sum`, then the block
 * table (tab bytes). TD_OK or TD_ENOMEM. */
static int vt_head_sum(const td_disk_vtab *h, const void *table, size_t tab, uint64_t *sum)
{
	XXH3_state_t *st = XXH3_createState();
	int err = !st || XXH3_64bits_reset(st) || XXH3_64bits_update(st, h, offsetof(td_disk_vtab, sum)) ||
			  XXH3_64bits_update(st, table, tab)
		      ? TD_ENOMEM
		      : TD_OK;
	if (!err)
		*sum = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	return err;
}

/* ---------- building ---------- */

typedef struct vbuild {
	const char *name;      /* the archive, in messages */
	td_buf raw;            /* the open block's items */
	td_buf frames;         /* the closed blocks' frames */
	td_buf table;          /* their td_disk_vblock */
	td_disk_vtab h;
	char *prev;            /* the word before (for the shared prefix) */
	size_t prev_len, prev_cap;
	uint64_t n;            /* items in the open block */
	ZSTD_CCtx *z;
	td_buf zb;             /* a frame's room */
} vbuild;

static int vb_close(vbuild *v)
{
	if (!v->n)
		return TD_OK;
	size_t bound = ZSTD_compressBound(v->raw.len);
	if (bound > v->zb.cap) {
		free(v->zb.p);
		v->zb.len = 0;
		v->zb.cap = 0;
		if (!(v->zb.p = malloc(bound)))
			return TD_ENOMEM;
		v->zb.cap = bound;
	}
	size_t got = ZSTD_compressCCtx(v->z, v->zb.p, v->zb.cap, v->raw.p, v->raw.len, VT_LEVEL);
	if (ZSTD_isError(got))
		return td_fail(TD_ENOMEM, "root vector: zstd: %s", ZSTD_getErrorName(got));
	td_disk_vblock b = { .off = v->frames.len, .size = got, .raw = v->raw.len, .n = v->n,
			     .sum = XXH3_64bits(v->zb.p, got) };
	if (b.raw > v->h.raw_max)
		v->h.raw_max = b.raw;
	int err = td_buf_put(&v->frames, v->zb.p, got);
	if (!err)
		err = td_buf_put(&v->table, &b, sizeof b);
	v->h.nblocks++;
	v->raw.len = 0;
	v->n = 0;
	v->prev_len = 0;
	return err;
}

static int vb_word(void *ctx, const char *word, size_t len, uint64_t count)
{
	vbuild *v = ctx;
	int err;
	if (len > TD_VTAB_RAW_MAX - VT_ITEM_OVER)
		return td_fail(TD_ELIMIT, "%s: root vector: a word of %zu bytes, over what a block holds (%llu MiB)",
			       v->name, len, (unsigned long long)(TD_VTAB_RAW_MAX >> 20));
	if (v->n && v->raw.len + len + VT_ITEM_OVER > TD_VTAB_RAW_MAX && (err = vb_close(v)))
		return err;
	size_t shared = 0;
	while (shared < v->prev_len && shared < len && v->prev[shared] == word[shared])
		shared++;
	err = td_buf_leb(&v->raw, shared);
	if (!err)
		err = td_buf_leb(&v->raw, len - shared);
	if (!err)
		err = td_buf_put(&v->raw, word + shared, len - shared);
	if (!err)
		err = td_buf_leb(&v->raw, count);
	if (err)
		return err;
	if (len > v->prev_cap) {
		char *p = realloc(v->prev, len);
		if (!p)
			return TD_ENOMEM;
		v->prev = p;
		v->prev_cap = len;
	}
	memcpy(v->prev, word, len);
	v->prev_len = len;
	v->n++;
	v->h.nitems++;
	v->h.tokens += count;
	return v->n >= TD_VTAB_BLOCK || v->raw.len >= VT_RAW_CLOSE ? vb_close(v) : TD_OK;
}

int td_vtab_append(const char *path, const char *name)
{
	td_archive *a;
	int err = td_archive_open(path, 0, &a);
	if (err)
		return err;
	if (!td_sharded(a) || !a->sec5[0] || a->sec_vt) {
		err = td_fail(TD_EINVAL, "%s: %s", name, a->sec_vt ? "already has a root vector" : "not a version 5 archive");
		td_archive_close(a);
		return err;
	}
	vbuild v;
	memset(&v, 0, sizeof v);
	v.name = name;
	memcpy(v.h.magic, TD_VTAB_MAGIC, sizeof v.h.magic);
	v.h.shards_sum = XXH3_64bits(a->map + a->sec5[0]->off, a->sec5[0]->size);
	if (!(v.z = ZSTD_createCCtx()))
		err = TD_ENOMEM;
	if (!err)
		err = td_shard_term_vector(a, TD_ROOT, vb_word, &v);
	if (!err)
		err = vb_close(&v);
	td_archive_close(a);
	td_buf sec = { 0 };
	const uint64_t start = sizeof v.h + v.table.len; /* the frames' offset in the section */
	for (size_t i = 0; !err && i < v.h.nblocks; i++) {
		td_disk_vblock b;
		memcpy(&b, v.table.p + i * sizeof b, sizeof b);
		b.off += start;
		memcpy(v.table.p + i * sizeof b, &b, sizeof b);
	}
	if (!err)
		err = vt_head_sum(&v.h, v.table.p, v.table.len, &v.h.sum);
	if (!err)
		err = td_buf_put(&sec, &v.h, sizeof v.h);
	if (!err)
		err = td_buf_put(&sec, v.table.p, v.table.len);
	if (!err)
		err = td_buf_put(&sec, v.frames.p, v.frames.len);
	if (!err)
		err = td_buf_align(&sec, 8);
	if (!err)
		err = td_sec_append(path, name, TD_SEC5_VECTOR, sec.p, sec.len);
	td_buf_free(&sec);
	td_buf_free(&v.raw);
	td_buf_free(&v.frames);
	td_buf_free(&v.table);
	free(v.zb.p);
	free(v.prev);
	ZSTD_freeCCtx(v.z);
	return err;
}

/* ---------- reading ---------- */

/* The section's header and block table once their sum matches and every
 * block is in bounds (the frames are hashed as they are read); NULL with
 * *err set (TD_OK: no usable vector: none, or made for other shards). */
static const td_disk_vtab *vt_header(const td_archive *a, const td_disk_vblock **blocks, int *err)
{
	*err = TD_OK;
	const td_disk_section *s = a->sec_vt;
	if (!s || !td_sharded(a) || !a->sec5[0])
		return NULL;
	const uint8_t *base = a->map + s->off;
	const td_disk_vtab *h = (const td_disk_vtab *)base;
	if (s->size < sizeof *h || memcmp(h->magic, TD_VTAB_MAGIC, sizeof h->magic)) {
		*err = VT_BAD("bad header");
		return NULL;
	}
	const td_disk_vblock *bl = (const td_disk_vblock *)(h + 1);
	if (h->nblocks > (s->size - sizeof *h) / sizeof *bl) {
		*err = VT_BAD("block table out of bounds");
		return NULL;
	}
	uint64_t sum = 0;
	if ((*err = vt_head_sum(h, bl, h->nblocks * sizeof *bl, &sum)))
		return NULL;
	if (sum != h->sum) {
		*err = VT_BAD("checksum mismatch");
		return NULL;
	}
	if (h->raw_max > TD_VTAB_RAW_MAX) {
		*err = VT_BAD("blocks of %llu bytes", (unsigned long long)h->raw_max);
		return NULL;
	}
	const uint64_t first = sizeof *h + h->nblocks * sizeof *bl;
	uint64_t items = 0;
	for (uint64_t i = 0; i < h->nblocks; i++) {
		const td_disk_vblock *b = &bl[i];
		if (b->off < first || b->off > s->size || b->size > s->size - b->off || b->raw > h->raw_max || !b->n ||
		    b->n > TD_VTAB_BLOCK || b->raw < 4 * b->n) {
			*err = VT_BAD("block %llu out of bounds", (unsigned long long)i);
			return NULL;
		}
		items += b->n;
	}
	if (items != h->nitems) {
		*err = VT_BAD("%llu words in its blocks, %llu in its header", (unsigned long long)items,
			      (unsigned long long)h->nitems);
		return NULL;
	}
	if (h->shards_sum != XXH3_64bits(a->map + a->sec5[0]->off, a->sec5[0]->size))
		return NULL; /* made for other shards */
	*blocks = bl;
	return h;
}

/* A cursor over the stored items, one block decoded at a time. */
typedef struct vcur {
	const td_archive *a;
	const td_disk_vtab *h;
	const td_disk_vblock *bl;
	uint64_t bi;                  /* the next block */
	uint64_t left;                /* items left in the decoded block */
	uint8_t *buf;                 /* the decoded block */
	size_t bcap;
	const uint8_t *q, *end;
	char *word;                   /* the current word */
	size_t len, cap;
	uint64_t items, tokens;       /* read so far */
	int partial;                  /* blocks skipped: no totals to check */
} vcur;

static int vcur_block(vcur *c)
{
	const td_disk_vblock *b = &c->bl[c->bi]; /* in bounds: vt_header */
	const uint8_t *z = c->a->map + c->a->sec_vt->off + b->off;
	if (XXH3_64bits(z, b->size) != b->sum)
		return VT_BAD("block %llu checksum mismatch", (unsigned long long)c->bi);
	/* room for what the frame can hold, not for what the table claims */
	if (b->raw > td_zstd_frame_bound(z, b->size))
		return VT_BAD("block %llu: %llu bytes, more than its frame holds", (unsigned long long)c->bi,
			      (unsigned long long)b->raw);
	if (b->raw > c->bcap) {
		uint8_t *p = realloc(c->buf, b->raw);
		if (!p)
			return TD_ENOMEM;
		c->buf = p;
		c->bcap = b->raw;
	}
	const size_t got = ZSTD_decompress(c->buf, b->raw, z, b->size);
	if (ZSTD_isError(got) || got != b->raw)
		return VT_BAD("block %llu does not decode", (unsigned long long)c->bi);
	c->q = c->buf;
	c->end = c->buf + b->raw;
	c->left = b->n;
	c->bi++;
	return TD_OK;
}

/* The next item into c->word[0, c->len) and *count: 1, 0 at the end, or TD_ECORRUPT. */
static int vcur_next(vcur *c, uint64_t *count)
{
	if (!c->left) {
		if (c->q != c->end)
			return VT_BAD("block %llu: bytes after its words", (unsigned long long)(c->bi - 1));
		if (c->bi == c->h->nblocks) {
			if (!c->partial && (c->items != c->h->nitems || c->tokens != c->h->tokens))
				return VT_BAD("%llu words, %llu tokens where the header says %llu, %llu",
					      (unsigned long long)c->items, (unsigned long long)c->tokens,
					      (unsigned long long)c->h->nitems, (unsigned long long)c->h->tokens);
			return 0;
		}
		int err = vcur_block(c);
		if (err)
			return err;
	}
	const int first = c->left == c->bl[c->bi - 1].n;
	uint64_t shared, add;
	if (td_leb_get(&c->q, c->end, &shared) || td_leb_get(&c->q, c->end, &add) || !add ||
	    add > (uint64_t)(c->end - c->q) || shared > c->len || (first && shared))
		return VT_BAD("block %llu: damaged word", (unsigned long long)(c->bi - 1));
	const size_t len = (size_t)(shared + add);
	/* strictly ascending: within a block from the first byte after the
	 * shared ones, across blocks (nothing shared) the whole words */
	int up;
	if (first && c->len) {
		const int cmp = memcmp(c->word, c->q, c->len < add ? c->len : (size_t)add);
		up = cmp < 0 || (!cmp && c->len < add);
	} else {
		up = first || shared == c->len || c->q[0] > (uint8_t)c->word[shared];
	}
	if (!up)
		return VT_BAD("block %llu: words out of order", (unsigned long long)(c->bi - 1));
	if (len > c->cap) {
		size_t cap = c->cap * 2 > len ? c->cap * 2 : len;
		char *p = realloc(c->word, cap);
		if (!p)
			return TD_ENOMEM;
		c->word = p;
		c->cap = cap;
	}
	memcpy(c->word + shared, c->q, add);
	c->q += add;
	c->len = len;
	if (td_leb_get(&c->q, c->end, count) || !*count || *count > UINT64_MAX - c->tokens)
		return VT_BAD("block %llu: damaged count", (unsigned long long)(c->bi - 1));
	c->left--;
	c->items++;
	c->tokens += *count;
	return 1;
}

/* A cursor at the first item of a's usable vector: 1, 0 when there is
 * none (or made for other shards), or an error. */
static int vcur_open(vcur *c, const td_archive *a)
{
	memset(c, 0, sizeof *c);
	int err;
	c->a = a;
	if (!(c->h = vt_header(a, &c->bl, &err)))
		return err;
	return 1;
}

static void vcur_close(vcur *c)
{
	free(c->buf);
	free(c->word);
}

int td_vtab_vector(const td_archive *a, uint64_t from, td_word_fn fn, void *ctx, int *used, uint64_t *skipped)
{
	*used = 0;
	*skipped = 0;
	if (!a->sec_vt)
		return TD_OK;
	vcur c;
	int r = vcur_open(&c, a);
	if (r <= 0)
		return r;
	*used = 1;
	c.partial = from > 0; /* the totals are those of the whole vector */
	/* the blocks wholly before item `from`: counted, not decoded */
	while (c.bi < c.h->nblocks && c.bl[c.bi].n <= from - c.items)
		c.items += c.bl[c.bi++].n;
	uint64_t count;
	while ((r = vcur_next(&c, &count)) == 1)
		if (c.items > from && (r = fn(ctx, c.word, c.len, count))) /* before: decoded for the words after */
			break;
	*skipped = c.items < from ? c.items : from;
	vcur_close(&c);
	return r;
}

/* td_shard_term_vector's items against the cursor's */
static int vt_cmp(void *ctx, const char *word, size_t len, uint64_t count)
{
	vcur *c = ctx;
	uint64_t got;
	int r = vcur_next(c, &got);
	if (r < 0)
		return r;
	if (!r || c->len != len || memcmp(c->word, word, len) || got != count)
		return VT_BAD("word %llu differs from the archive's vector", (unsigned long long)c->items);
	return TD_OK;
}

int td_vtab_verify(const td_archive *a)
{
	if (!a->sec_vt)
		return TD_OK;
	const td_disk_section *s = a->sec_vt;
	if (XXH3_64bits(a->map + s->off, s->size) != s->sum)
		return VT_BAD("section checksum mismatch");
	vcur c;
	int r = vcur_open(&c, a);
	if (r <= 0) {
		if (!r)
			r = VT_BAD("made for other shards");
		return r;
	}
	uint64_t count;
	r = td_shard_term_vector(a, TD_ROOT, vt_cmp, &c);
	if (!r && (r = vcur_next(&c, &count)) == 1)
		r = VT_BAD("holds more words than the archive's vector (%llu)", (unsigned long long)(c.items - 1));
	vcur_close(&c);
	return r;
}

int td_archive_root_vector(const td_archive *a, uint64_t *bytes, uint64_t *nwords)
{
	*bytes = a->sec_vt ? a->sec_vt->size : 0;
	*nwords = 0;
	int err;
	const td_disk_vblock *bl;
	const td_disk_vtab *h = vt_header(a, &bl, &err);
	if (!h)
		return err;
	*nwords = h->nitems;
	return 1;
}
