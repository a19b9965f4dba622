/* td_pack: encoder and checks for FOR-packed tile arrays. */
#include "td_pack.h"

#include <stdlib.h>

#include "td_err.h"

static uint64_t groups_bytes(uint64_t ntiles)
{
	uint64_t ng = (ntiles + TD_PACK_GROUP - 1) / TD_PACK_GROUP;
	return (ng * 4 + 7) & ~UINT64_C(7);
}

int td_pack_view(td_pack *p, const void *blob, uint64_t size)
{
	const uint8_t *b = blob;
	if (size < TD_PACK_HDR)
		return td_fail(TD_ETRUNC, "packed array shorter than its header");
	uint64_t n = td_pack_load64(b), nt = td_pack_load64(b + 8), ds = td_pack_load64(b + 16);
	if (nt != (n + TD_TILE - 1) / TD_TILE || nt > size / 8)
		return td_fail(TD_ECORRUPT, "packed array tile count %llu does not fit %llu values",
			       (unsigned long long)nt, (unsigned long long)n);
	uint64_t head = TD_PACK_HDR + nt * 8 + groups_bytes(nt);
	if (head > size || ds > size - head || ds < 8)
		return td_fail(TD_ETRUNC, "packed array data runs past its section");
	p->n = n;
	p->ntiles = nt;
	p->datasize = ds;
	p->slope = td_pack_load64(b + 24);
	p->tiles = (const uint64_t *)(b + TD_PACK_HDR);
	p->groups = (const uint32_t *)(b + TD_PACK_HDR + nt * 8);
	p->data = b + head;
	return TD_OK;
}

int td_pack_view_v1(td_pack *p, const void *blob, uint64_t size, void **owned)
{
	const uint8_t *b = blob;
	*owned = NULL;
	if (size < 24)
		return td_fail(TD_ETRUNC, "packed array shorter than its header");
	uint64_t n = td_pack_load64(b), nt = td_pack_load64(b + 8), ds = td_pack_load64(b + 16);
	if (nt != (n + TD_TILE - 1) / TD_TILE || nt > size / sizeof(td_disk_tile_v1))
		return td_fail(TD_ECORRUPT, "packed array tile count %llu does not fit %llu values",
			       (unsigned long long)nt, (unsigned long long)n);
	if (24 + nt * sizeof(td_disk_tile_v1) + ds > size || ds < 8)
		return td_fail(TD_ETRUNC, "packed array data runs past its section");
	uint8_t *buf = malloc(nt * 8 + groups_bytes(nt) + 8);
	if (!buf)
		return td_fail(TD_ENOMEM, "packed array: converting %llu tiles", (unsigned long long)nt);
	uint64_t *tiles = (uint64_t *)buf;
	uint32_t *groups = (uint32_t *)(buf + nt * 8);
	const td_disk_tile_v1 *old = (const td_disk_tile_v1 *)(b + 24);
	for (uint64_t g = 0; g * TD_PACK_GROUP < nt; g++) {
		uint64_t first = g * TD_PACK_GROUP, end = first + TD_PACK_GROUP < nt ? first + TD_PACK_GROUP : nt;
		uint32_t start = UINT32_MAX;
		for (uint64_t t = first; t < end; t++)
			if (old[t].width && old[t].off16 < start)
				start = old[t].off16;
		groups[g] = start == UINT32_MAX ? 0 : start;
		for (uint64_t t = first; t < end; t++) {
			td_disk_tile_v1 o;
			memcpy(&o, &old[t], sizeof o);
			if (o.base > TD_PACK_MAXBASE) {
				free(buf);
				return td_fail(TD_ECORRUPT, "packed array tile %llu has a base over 2^48",
					       (unsigned long long)t);
			}
			uint64_t rel = (uint64_t)o.off16 - groups[g];
			/* A width or offset the layout cannot hold was corrupt: it read as
			 * its base before, and reads as its base now (width 0). */
			uint64_t w = o.width > 63 || rel > 511 ? (o.width > 63 ? 63 : 0) : o.width;
			tiles[t] = o.base << 16 | (rel & 511) << 6 | w;
		}
	}
	p->n = n;
	p->ntiles = nt;
	p->datasize = ds;
	p->slope = 0;
	p->tiles = tiles;
	p->groups = groups;
	p->data = b + 24 + nt * sizeof(td_disk_tile_v1);
	*owned = buf;
	return TD_OK;
}

/* A wide tile's data: TD_TILE 32-bit values, in 16-byte units. */
#define WIDE_UNITS (TD_TILE * 4u / 16u)

uint64_t td_pack_wide_size(uint64_t n)
{
	uint64_t nt = (n + TD_TILE - 1) / TD_TILE;
	return TD_PACK_HDR + nt * 8 + groups_bytes(nt) + nt * TD_TILE * 4 + 8;
}

uint32_t *td_pack_wide_init(uint8_t *blob, uint64_t n)
{
	const uint64_t nt = (n + TD_TILE - 1) / TD_TILE, ds = nt * TD_TILE * 4 + 8, slope = 0;
	memcpy(blob, &n, 8);
	memcpy(blob + 8, &nt, 8);
	memcpy(blob + 16, &ds, 8);
	memcpy(blob + 24, &slope, 8);
	for (uint64_t t = 0; t < nt; t++) {
		uint64_t h = (uint64_t)(t % TD_PACK_GROUP) * WIDE_UNITS << 6 | 32u;
		memcpy(blob + TD_PACK_HDR + 8 * t, &h, 8);
	}
	for (uint64_t g = 0; g * TD_PACK_GROUP < nt; g++) {
		uint32_t at = (uint32_t)(g * TD_PACK_GROUP * WIDE_UNITS);
		memcpy(blob + TD_PACK_HDR + 8 * nt + 4 * g, &at, 4);
	}
	return (uint32_t *)(blob + TD_PACK_HDR + 8 * nt + groups_bytes(nt));
}

uint64_t td_pack_blob_size(const td_pack *p)
{
	return (TD_PACK_HDR + p->ntiles * 8 + groups_bytes(p->ntiles) + p->datasize + 7) & ~UINT64_C(7);
}

int td_pack_check(const td_pack *p)
{
	for (uint64_t t = 0; t < p->ntiles; t++) {
		uint64_t h = p->tiles[t];
		uint32_t w = TD_TILE_W(h);
		if (w > TD_PACK_MAXW)
			return td_fail(TD_ECORRUPT, "tile %llu has width %u", (unsigned long long)t, w);
		if (w && td_pack_tile_at(p, t, h) + 16u * w + 8 > p->datasize)
			return td_fail(TD_ECORRUPT, "tile %llu points past the data", (unsigned long long)t);
	}
	return TD_OK;
}

void td_pack_get_range(const td_pack *p, uint64_t i, uint64_t count, uint64_t *out)
{
	while (count) {
		uint64_t t = i / TD_TILE, h = p->tiles[t];
		uint32_t j = (uint32_t)(i % TD_TILE), w = TD_TILE_W(h);
		uint64_t k = TD_TILE - j < count ? TD_TILE - j : count;
		uint64_t bit = (uint64_t)j * w, at = td_pack_tile_at(p, t, h);
		uint64_t end = at + ((bit + (k - 1) * w) >> 3) + 8;
		if (w == 0) {
			/* a tile of its frame alone (constant, or on the line: a
			 * file's one piece, a shard's one number), as td_pack_get */
			if (TD_TILE_LIN(h)) {
				const uint64_t base = TD_TILE_BASE(h), slope = p->slope;
				uint64_t line = slope * j;
				for (uint64_t x = 0; x < k; x++, line += slope)
					out[x] = base + (line >> 16);
			} else {
				const uint64_t base = TD_TILE_BASE(h);
				for (uint64_t x = 0; x < k; x++)
					out[x] = base;
			}
		} else if (w > TD_PACK_MAXW || end > p->datasize) {
			for (uint64_t x = 0; x < k; x++)
				out[x] = td_pack_get(p, i + x); /* a corrupt tile */
		} else {
			/* One header per tile; the data stays in bounds up to its last value. */
			const uint8_t *d = p->data + at;
			uint64_t mask = (UINT64_C(1) << w) - 1;
			if (TD_TILE_LIN(h)) {
				/* the line's step added, not multiplied, a value:
				 * slope * (j + x) as td_pack_frame computes it */
				const uint64_t base = TD_TILE_BASE(h), slope = p->slope;
				uint64_t line = slope * j;
				for (uint64_t x = 0; x < k; x++, bit += w, line += slope)
					out[x] = base + (line >> 16) + ((td_pack_load64(d + (bit >> 3)) >> (bit & 7)) & mask);
			} else {
				/* A constant frame (the symbol arrays' tiles): the
				 * base once, then a load, a shift and a mask a value. */
				uint64_t base = TD_TILE_BASE(h);
				for (uint64_t x = 0; x < k; x++, bit += w)
					out[x] = base + ((td_pack_load64(d + (bit >> 3)) >> (bit & 7)) & mask);
			}
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

/* The mean step of an ascending run from vals[0] to vals[n-1], in 1/65536
 * units; 0 when the array does not rise or rises too steeply for slope * j
 * (j < TD_TILE) to stay within 64 bits. */
static uint64_t mean_slope(const uint64_t *v64, const uint32_t *v32, uint64_t n)
{
	if (n < 2)
		return 0;
	uint64_t a = v64 ? v64[0] : v32[0], z = v64 ? v64[n - 1] : v32[n - 1];
	if (z <= a || z - a >= (UINT64_C(1) << 40))
		return 0;
	return ((z - a) << 16) / (n - 1);
}

/* Choose tile t's header (all but rel): a flat frame, or the line when its
 * residuals are narrower. TD_ERANGE when a residual needs more than 56 bits. */
static int plan_tile(const uint64_t *v64, const uint32_t *v32, uint64_t from, uint64_t end, uint64_t slope,
		     uint64_t *hdr)
{
	uint64_t lo = UINT64_MAX, hi = 0, llo = UINT64_MAX, lhi = 0;
	int lin_ok = slope != 0;
	for (uint64_t i = from; i < end; i++) {
		uint64_t v = v64 ? v64[i] : v32[i], line = slope * (i - from) >> 16;
		lo = v < lo ? v : lo;
		hi = v > hi ? v : hi;
		if (v < line) {
			lin_ok = 0;
			continue;
		}
		llo = v - line < llo ? v - line : llo;
		lhi = v - line > lhi ? v - line : lhi;
	}
	uint64_t base = lo < TD_PACK_MAXBASE ? lo : TD_PACK_MAXBASE;
	unsigned w = bits_for(hi - base), lin = 0;
	if (lin_ok && llo <= TD_PACK_MAXBASE && bits_for(lhi - llo) < w) {
		base = llo;
		w = bits_for(lhi - llo);
		lin = 1;
	}
	if (w > TD_PACK_MAXW)
		return td_fail(TD_ERANGE, "packed value %llu is over 2^56", (unsigned long long)hi);
	*hdr = base << 16 | (uint64_t)lin << 15 | w;
	return TD_OK;
}

/* Data bits of the tiles with this slope (plan_tile's widths), or
 * UINT64_MAX when a tile cannot be planned. */
static uint64_t slope_cost(const uint64_t *v64, const uint32_t *v32, uint64_t n, uint64_t slope)
{
	uint64_t bits = 0, h;
	for (uint64_t from = 0; from < n; from += TD_TILE) {
		uint64_t end = from + TD_TILE < n ? from + TD_TILE : n;
		if (plan_tile(v64, v32, from, end, slope, &h))
			return UINT64_MAX;
		bits += TD_TILE_W(h);
	}
	return bits;
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return (a > b) - (a < b);
}

/* The slope of an ascending array: the one of a few candidates (the mean
 * step, quantiles of the tiles' own steps) whose tiles take the fewest
 * bits. Arrays of local steps that vary (samples of a corpus mixing dense
 * and sparse text) fit a typical tile's step better than the mean. */
static uint64_t best_slope(const uint64_t *v64, const uint32_t *v32, uint64_t n)
{
	uint64_t mean = mean_slope(v64, v32, n), nt = (n + TD_TILE - 1) / TD_TILE;
	if (!mean || nt < 4)
		return mean;
	uint64_t *ts = malloc(nt * sizeof *ts), m = 0;
	if (!ts)
		return mean;
	for (uint64_t from = 0; from + 1 < n; from += TD_TILE) {
		uint64_t end = from + TD_TILE < n ? from + TD_TILE : n;
		uint64_t a = v64 ? v64[from] : v32[from], z = v64 ? v64[end - 1] : v32[end - 1];
		if (end - from >= 2 && z >= a)
			ts[m++] = ((z - a) << 16) / (end - 1 - from);
	}
	qsort(ts, m, sizeof *ts, cmp_u64);
	uint64_t best = mean, best_bits = slope_cost(v64, v32, n, mean);
	for (unsigned q = 1; q < 16 && m; q++) {
		uint64_t s = ts[m * q / 16];
		if (!s || s > 2 * mean || s == best)
			continue;
		uint64_t b = slope_cost(v64, v32, n, s);
		if (b < best_bits) {
			best_bits = b;
			best = s;
		}
	}
	free(ts);
	return best;
}

static int encode(const uint64_t *v64, const uint32_t *v32, uint64_t n, int quick, td_buf *out)
{
	uint64_t nt = (n + TD_TILE - 1) / TD_TILE, gb = groups_bytes(nt);
	uint64_t slope = quick ? mean_slope(v64, v32, n) : best_slope(v64, v32, n);
	uint64_t *tiles = calloc(nt ? nt : 1, 8);
	uint32_t *groups = calloc(gb ? gb : 8, 1);
	if (!tiles || !groups) {
		free(tiles);
		free(groups);
		return TD_ENOMEM;
	}
	/* First pass: frames, widths and offsets. */
	uint64_t off16 = 0;
	int err = TD_OK;
	for (uint64_t t = 0; t < nt && !err; t++) {
		uint64_t end = (t + 1) * TD_TILE < n ? (t + 1) * TD_TILE : n;
		if ((err = plan_tile(v64, v32, t * TD_TILE, end, slope, &tiles[t])))
			break;
		if (off16 > UINT32_MAX) {
			err = td_fail(TD_ELIMIT, "packed array over 64 GiB");
			break;
		}
		if (t % TD_PACK_GROUP == 0)
			groups[t / TD_PACK_GROUP] = (uint32_t)off16;
		tiles[t] |= (off16 - groups[t / TD_PACK_GROUP]) << 6;
		off16 += TD_TILE_W(tiles[t]);
	}
	uint64_t ds = off16 * 16 + 8;
	uint64_t hdr[4] = { n, nt, ds, slope };
	if (!err)
		err = td_buf_align(out, 8);
	if (!err)
		err = td_buf_put(out, hdr, sizeof hdr);
	if (!err)
		err = td_buf_put(out, tiles, nt * 8);
	if (!err)
		err = td_buf_put(out, groups, gb);
	size_t data_at = out->len;
	while (!err && out->len < data_at + ds) { /* grow, zeroed */
		static const uint8_t zero[4096];
		size_t k = data_at + ds - out->len;
		err = td_buf_put(out, zero, k < sizeof zero ? k : sizeof zero);
	}
	if (!err) {
		td_pack view;
		if ((err = td_pack_view(&view, out->p + data_at - (TD_PACK_HDR + nt * 8 + gb), TD_PACK_HDR + nt * 8 + gb + ds)))
			goto out;
		uint8_t *d = out->p + data_at;
		for (uint64_t t = 0; t < nt; t++) {
			uint64_t h = tiles[t];
			unsigned w = TD_TILE_W(h);
			if (!w)
				continue;
			uint8_t *td = d + td_pack_tile_at(&view, t, h);
			uint64_t end = (t + 1) * TD_TILE < n ? (t + 1) * TD_TILE : n;
			for (uint64_t i = t * TD_TILE; i < end; i++) {
				uint64_t v = (v64 ? v64[i] : v32[i]) - td_pack_frame(&view, h, i - t * TD_TILE);
				uint64_t bit = (i - t * TD_TILE) * w;
				uint8_t *at = td + (bit >> 3);
				uint64_t cur = td_pack_load64(at);
				cur |= v << (bit & 7);
				memcpy(at, &cur, 8);
			}
		}
		err = td_buf_align(out, 8);
	}
out:
	free(tiles);
	free(groups);
	return err;
}

int td_pack_encode(const uint64_t *vals, uint64_t n, td_buf *out)
{
	return encode(vals, NULL, n, 0, out);
}

int td_pack_encode32(const uint32_t *vals, uint64_t n, td_buf *out)
{
	return encode(NULL, vals, n, 0, out);
}

int td_pack_encode_quick(const uint64_t *vals, uint64_t n, td_buf *out)
{
	return encode(vals, NULL, n, 1, out);
}

int td_pack_encode32_quick(const uint32_t *vals, uint64_t n, td_buf *out)
{
	return encode(NULL, vals, n, 1, out);
}
