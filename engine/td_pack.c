/* td_pack: encoder and checks for FOR-packed tile arrays. */
#include "td_pack.h"

#include <stdlib.h>

#include "td_err.h"

int td_pack_view(td_pack *p, const void *blob, uint64_t size)
{
	const uint8_t *b = blob;
	if (size < 24)
		return td_fail(TD_ETRUNC, "packed array shorter than its header");
	uint64_t n = td_pack_load64(b), nt = td_pack_load64(b + 8), ds = td_pack_load64(b + 16);
	if (nt != (n + TD_TILE - 1) / TD_TILE || nt > size / sizeof(td_disk_tile))
		return td_fail(TD_ECORRUPT, "packed array tile count %llu does not fit %llu values",
			       (unsigned long long)nt, (unsigned long long)n);
	if (24 + nt * sizeof(td_disk_tile) + ds > size || ds < 8)
		return td_fail(TD_ETRUNC, "packed array data runs past its section");
	p->n = n;
	p->ntiles = nt;
	p->datasize = ds;
	p->tiles = (const td_disk_tile *)(b + 24);
	p->data = b + 24 + nt * sizeof(td_disk_tile);
	return TD_OK;
}

uint64_t td_pack_blob_size(const td_pack *p)
{
	return (24 + p->ntiles * sizeof(td_disk_tile) + p->datasize + 7) & ~UINT64_C(7);
}

int td_pack_check(const td_pack *p)
{
	for (uint64_t t = 0; t < p->ntiles; t++) {
		const td_disk_tile *d = &p->tiles[t];
		if (d->width > TD_PACK_MAXW)
			return td_fail(TD_ECORRUPT, "tile %llu has width %u", (unsigned long long)t, d->width);
		if (d->width && (uint64_t)d->off16 * 16 + 16u * d->width + 8 > p->datasize)
			return td_fail(TD_ECORRUPT, "tile %llu points past the data", (unsigned long long)t);
	}
	return TD_OK;
}

void td_pack_get_range(const td_pack *p, uint64_t i, uint64_t count, uint64_t *out)
{
	while (count) {
		const td_disk_tile *t = &p->tiles[i / TD_TILE];
		uint32_t j = (uint32_t)(i % TD_TILE), w = t->width;
		uint64_t k = TD_TILE - j < count ? TD_TILE - j : count;
		uint64_t bit = (uint64_t)j * w, base = t->base;
		uint64_t end = (uint64_t)t->off16 * 16u + ((bit + (k - 1) * w) >> 3) + 8;
		if (w == 0 || w > TD_PACK_MAXW || end > p->datasize) {
			for (uint64_t x = 0; x < k; x++)
				out[x] = td_pack_get(p, i + x); /* constant or corrupt tile */
		} else {
			/* One header per tile; the data stays in bounds up to its last value. */
			const uint8_t *d = p->data + (uint64_t)t->off16 * 16u;
			uint64_t mask = (UINT64_C(1) << w) - 1;
			for (uint64_t x = 0; x < k; x++, bit += w)
				out[x] = base + ((td_pack_load64(d + (bit >> 3)) >> (bit & 7)) & mask);
		}
		out += k;
		i += k;
		count -= k;
	}
}

int td_buf_put(td_buf *b, const void *src, size_t len)
{
	if (b->len + len > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + len)
			cap *= 2;
		uint8_t *np = realloc(b->p, cap);
		if (!np)
			return TD_ENOMEM;
		b->p = np;
		b->cap = cap;
	}
	if (len)
		memcpy(b->p + b->len, src, len);
	b->len += len;
	return TD_OK;
}

int td_buf_align(td_buf *b, size_t align)
{
	static const uint8_t zero[64];
	size_t pad = (align - (b->len & (align - 1))) & (align - 1);
	return td_buf_put(b, zero, pad);
}

void td_buf_free(td_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

static unsigned bits_for(uint64_t v)
{
	return v ? 64u - (unsigned)__builtin_clzll(v) : 0u;
}

static int encode(const uint64_t *v64, const uint32_t *v32, uint64_t n, td_buf *out)
{
	uint64_t nt = (n + TD_TILE - 1) / TD_TILE;
	td_disk_tile *tiles = calloc(nt ? nt : 1, sizeof *tiles);
	if (!tiles)
		return TD_ENOMEM;
	/* First pass: widths and offsets. */
	uint64_t off16 = 0;
	for (uint64_t t = 0; t < nt; t++) {
		uint64_t lo = UINT64_MAX, hi = 0;
		uint64_t end = (t + 1) * TD_TILE < n ? (t + 1) * TD_TILE : n;
		for (uint64_t i = t * TD_TILE; i < end; i++) {
			uint64_t v = v64 ? v64[i] : v32[i];
			lo = v < lo ? v : lo;
			hi = v > hi ? v : hi;
		}
		unsigned w = bits_for(hi - lo);
		if (w > TD_PACK_MAXW) {
			free(tiles);
			return td_fail(TD_ERANGE, "packed tile spans more than 2^56");
		}
		if (off16 > UINT32_MAX) {
			free(tiles);
			return td_fail(TD_ELIMIT, "packed array over 64 GiB");
		}
		tiles[t].base = lo;
		tiles[t].width = (uint8_t)w;
		tiles[t].off16 = w ? (uint32_t)off16 : 0;
		off16 += w;
	}
	uint64_t ds = off16 * 16 + 8;
	uint64_t hdr[3] = { n, nt, ds };
	int err = td_buf_align(out, 8);
	if (!err)
		err = td_buf_put(out, hdr, sizeof hdr);
	if (!err)
		err = td_buf_put(out, tiles, nt * sizeof *tiles);
	size_t data_at = out->len;
	if (!err)
		err = td_buf_put(out, NULL, 0);
	if (!err) { /* grow, zeroed */
		while (!err && out->len < data_at + ds) {
			static const uint8_t zero[4096];
			size_t k = data_at + ds - out->len;
			err = td_buf_put(out, zero, k < sizeof zero ? k : sizeof zero);
		}
	}
	if (!err) {
		uint8_t *d = out->p + data_at;
		for (uint64_t t = 0; t < nt; t++) {
			unsigned w = tiles[t].width;
			if (!w)
				continue;
			uint8_t *td = d + (uint64_t)tiles[t].off16 * 16;
			uint64_t end = (t + 1) * TD_TILE < n ? (t + 1) * TD_TILE : n;
			for (uint64_t i = t * TD_TILE; i < end; i++) {
				uint64_t v = (v64 ? v64[i] : v32[i]) - tiles[t].base;
				uint64_t bit = (i - t * TD_TILE) * w;
				uint8_t *at = td + (bit >> 3);
				uint64_t cur = td_pack_load64(at);
				cur |= v << (bit & 7);
				memcpy(at, &cur, 8);
			}
		}
		err = td_buf_align(out, 8);
	}
	free(tiles);
	return err;
}

int td_pack_encode(const uint64_t *vals, uint64_t n, td_buf *out)
{
	return encode(vals, NULL, n, out);
}

int td_pack_encode32(const uint32_t *vals, uint64_t n, td_buf *out)
{
	return encode(NULL, vals, n, out);
}
