/* engine_pack: td_pack FOR tiles: encode/get round trip for every width, ranges, walking, bad blobs. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "td_err.h"
#include "td_pack.h"

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static void check_view(const td_buf *b, size_t start, const uint64_t *vals, uint64_t n)
{
	td_pack p;
	int err = td_pack_view(&p, b->p + start, b->len - start);
	cr_assert_eq(err, TD_OK, "view: %s", td_strerror(err));
	cr_assert_eq(p.n, n);
	cr_assert_eq(p.ntiles, (n + TD_TILE - 1) / TD_TILE);
	cr_assert_eq(td_pack_check(&p), TD_OK);
	for (uint64_t i = 0; i < n; i++)
		if (td_pack_get(&p, i) != vals[i])
			cr_assert_fail("value %llu of %llu: got %llu want %llu", (unsigned long long)i,
				       (unsigned long long)n, (unsigned long long)td_pack_get(&p, i),
				       (unsigned long long)vals[i]);
	uint64_t s = n * 31 + 7;
	uint64_t *out = malloc((n + 1) * sizeof *out);
	for (int k = 0; k < 50 && n; k++) {
		uint64_t i = rnd(&s) % n, c = rnd(&s) % (n - i + 1);
		td_pack_get_range(&p, i, c, out);
		cr_assert(memcmp(out, vals + i, c * sizeof *out) == 0, "get_range(%llu, %llu)", (unsigned long long)i,
			  (unsigned long long)c);
	}
	if (n) {
		td_pack_get_range(&p, 0, n, out);
		cr_assert(memcmp(out, vals, n * sizeof *out) == 0, "get_range of everything");
	}
	free(out);
}

/* Every width 0..56, array lengths around tile edges, one base per array. */
Test(pack, round_trip_every_width)
{
	static const uint64_t lens[] = {0, 1, 2, 127, 128, 129, 255, 256, 257, 1000, 4099};
	uint64_t s = 1;
	for (unsigned w = 0; w <= TD_PACK_MAXW; w++) {
		for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
			uint64_t n = lens[li];
			uint64_t *v = malloc((n + 1) * sizeof *v);
			uint64_t base = rnd(&s) >> (16 + (unsigned)(rnd(&s) % 4)); /* bases are < 2^48 */
			uint64_t mask = w ? (w == 64 ? ~UINT64_C(0) : (UINT64_C(1) << w) - 1) : 0;
			for (uint64_t i = 0; i < n; i++)
				v[i] = base + (rnd(&s) & mask);
			/* Make sure the full width is really used in every tile. */
			for (uint64_t t = 0; t * TD_TILE < n; t++) {
				v[t * TD_TILE] = base;
				if (t * TD_TILE + 1 < n)
					v[t * TD_TILE + 1] = base + mask;
			}
			td_buf b = {0};
			cr_assert_eq(td_buf_put(&b, "12345678", 8), TD_OK); /* not at offset 0 */
			cr_assert_eq(td_pack_encode(v, n, &b), TD_OK, "encode w=%u n=%llu", w, (unsigned long long)n);
			cr_assert_eq(b.len % 8, 0u);
			check_view(&b, 8, v, n);
			td_pack p;
			cr_assert_eq(td_pack_view(&p, b.p + 8, b.len - 8), TD_OK);
			uint64_t bs = td_pack_blob_size(&p);
			cr_assert_eq((bs + 7) / 8 * 8, b.len - 8, "blob size %llu, encoded %zu", (unsigned long long)bs,
				     b.len - 8);
			td_buf_free(&b);
			free(v);
		}
	}
}

/* Tiles of different widths in one array (FOR per tile), extremes, and
 * several arrays back to back walked with td_pack_blob_size. */
Test(pack, mixed_tiles_and_walking)
{
	uint64_t s = 5;
	enum { NARR = 40 };
	uint64_t *arr[NARR], len[NARR];
	td_buf b = {0};
	size_t start[NARR];
	for (int k = 0; k < NARR; k++) {
		uint64_t n = rnd(&s) % 3000;
		uint64_t *v = malloc((n + 1) * sizeof *v);
		for (uint64_t i = 0; i < n; i++) {
			unsigned tw = (unsigned)((i / TD_TILE * 7 + (unsigned)k) % (TD_PACK_MAXW + 1));
			uint64_t base = (k % 3 == 0) ? TD_PACK_MAXBASE : (i / TD_TILE) * 1000003u;
			v[i] = base + (tw ? rnd(&s) & ((UINT64_C(1) << tw) - 1) : 0);
		}
		if (k == 1 && n)
			for (uint64_t i = 0; i < n; i++)
				v[i] = TD_PACK_MAXBASE + (UINT64_C(1) << TD_PACK_MAXW) - 1; /* the largest value */
		arr[k] = v;
		len[k] = n;
		start[k] = b.len;
		if (k % 2)
			cr_assert_eq(td_pack_encode(v, n, &b), TD_OK);
		else {
			int all32 = 1;
			for (uint64_t i = 0; i < n; i++)
				all32 &= v[i] <= UINT32_MAX;
			if (all32 && n) {
				uint32_t *v32 = malloc(n * sizeof *v32);
				for (uint64_t i = 0; i < n; i++)
					v32[i] = (uint32_t)v[i];
				cr_assert_eq(td_pack_encode32(v32, n, &b), TD_OK);
				free(v32);
			} else
				cr_assert_eq(td_pack_encode(v, n, &b), TD_OK);
		}
	}
	size_t at = 0;
	for (int k = 0; k < NARR; k++) {
		cr_assert_eq(at, start[k], "walking: array %d at %zu, written at %zu", k, at, start[k]);
		check_view(&b, at, arr[k], len[k]);
		td_pack p;
		cr_assert_eq(td_pack_view(&p, b.p + at, b.len - at), TD_OK);
		at += (td_pack_blob_size(&p) + 7) / 8 * 8;
		free(arr[k]);
	}
	cr_assert_eq(at, b.len);
	td_buf_free(&b);
}

Test(pack, encode32_equals_encode)
{
	uint64_t s = 9;
	uint32_t v32[1000];
	uint64_t v64[1000];
	for (int i = 0; i < 1000; i++)
		v64[i] = v32[i] = (uint32_t)(rnd(&s) >> (i % 33));
	td_buf a = {0}, b = {0};
	cr_assert_eq(td_pack_encode32(v32, 1000, &a), TD_OK);
	cr_assert_eq(td_pack_encode(v64, 1000, &b), TD_OK);
	cr_assert_eq(a.len, b.len);
	cr_assert(memcmp(a.p, b.p, a.len) == 0);
	check_view(&a, 0, v64, 1000);
	td_buf_free(&a);
	td_buf_free(&b);
}

/* The quick encoders (mean slope, no search) keep every value: ascending
 * arrays with dense and sparse stretches (word offsets), a flat one, a
 * random one, across tile edges; 32-bit input gives the same bytes. */
Test(pack, quick_round_trip)
{
	static const uint64_t lens[] = {0, 1, 2, 127, 128, 129, 1000, 5000};
	uint64_t s = 21;
	for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
		for (int kind = 0; kind < 3; kind++) {
			uint64_t n = lens[li], at = 0;
			uint64_t *v = malloc((n + 1) * sizeof *v);
			uint32_t *v32 = malloc((n + 1) * sizeof *v32);
			for (uint64_t i = 0; i < n; i++) {
				if (kind == 0) /* steps of 1-8, then 1000-wide stretches */
					at += (i / 300) % 2 ? 1000 + rnd(&s) % 50 : 1 + rnd(&s) % 8;
				v[i] = kind == 0 ? at : kind == 1 ? 77 : rnd(&s) >> 33;
				v32[i] = (uint32_t)v[i];
			}
			td_buf a = {0}, b = {0};
			cr_assert_eq(td_pack_encode_quick(v, n, &a), TD_OK);
			cr_assert_eq(td_pack_encode32_quick(v32, n, &b), TD_OK);
			cr_assert_eq(a.len, b.len);
			cr_assert(a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
			check_view(&a, 0, v, n);
			td_buf_free(&a);
			td_buf_free(&b);
			free(v);
			free(v32);
		}
}

/* A wide array laid out in place (td_pack_wide_init): frames 0 give a
 * plain uint32_t array; tiles with frames reach values past 2^32. */
Test(pack, wide_in_place)
{
	static const uint64_t lens[] = {1, 2, 127, 128, 129, 1000, 5000};
	uint64_t s = 5;
	for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
		for (int big = 0; big < 2; big++) {
			const uint64_t n = lens[li], size = td_pack_wide_size(n);
			uint64_t *v = malloc(n * sizeof *v), at = big ? (UINT64_C(1) << 40) - 3000 : 0;
			td_buf b = {0};
			b.p = calloc(1, size);
			b.len = b.cap = size;
			uint32_t *d = td_pack_wide_init(b.p, n);
			for (uint64_t i = 0; i < n; i++) {
				v[i] = at;
				at += rnd(&s) % 256;
				uint64_t frame = v[i - i % TD_TILE] & ~((UINT64_C(1) << 31) - 1);
				if (i % TD_TILE == 0)
					td_pack_wide_frame(b.p, i / TD_TILE, frame);
				d[i] = (uint32_t)(v[i] - frame);
			}
			check_view(&b, 0, v, n);
			if (!big) /* the data are the values */
				for (uint64_t i = 0; i < n; i++)
					cr_assert_eq(d[i], v[i]);
			td_buf_free(&b);
			free(v);
		}
}

/* A tile whose values span more than 2^56 cannot be packed. */
Test(pack, range_too_wide)
{
	uint64_t v[3] = {0, UINT64_C(1) << 60, 5};
	td_buf b = {0};
	cr_assert_eq(td_pack_encode(v, 3, &b), TD_ERANGE);
	td_buf_free(&b);
	uint64_t ok[2] = {0, (UINT64_C(1) << TD_PACK_MAXW) - 1};
	cr_assert_eq(td_pack_encode(ok, 2, &b), TD_OK);
	check_view(&b, 0, ok, 2);
	td_buf_free(&b);
	/* Bases stop at 2^48: a larger value is base + residual, up to 56 bits. */
	uint64_t top[2] = {TD_PACK_MAXBASE + (UINT64_C(1) << TD_PACK_MAXW) - 1, TD_PACK_MAXBASE + 5};
	cr_assert_eq(td_pack_encode(top, 2, &b), TD_OK);
	check_view(&b, 0, top, 2);
	td_buf_free(&b);
	uint64_t over[1] = {TD_PACK_MAXBASE + (UINT64_C(1) << TD_PACK_MAXW)};
	cr_assert_eq(td_pack_encode(over, 1, &b), TD_ERANGE);
	td_buf_free(&b);
}

/* Ascending arrays get linear frames: exact values, and far narrower than a
 * flat frame (steps of 3-11: ~7 bits a value instead of 10). */
Test(pack, linear_frames)
{
	uint64_t s = 11, n = 100000;
	uint64_t *v = malloc(n * sizeof *v);
	v[0] = 12345;
	for (uint64_t i = 1; i < n; i++)
		v[i] = v[i - 1] + 3 + rnd(&s) % 9;
	td_buf b = {0};
	cr_assert_eq(td_pack_encode(v, n, &b), TD_OK);
	check_view(&b, 0, v, n);
	cr_assert_lt(b.len, n * 15 / 16, "%zu bytes for %llu ascending values", b.len, (unsigned long long)n);
	td_buf_free(&b);
	/* A run that rises then stays flat: tiles below the line stay flat-framed. */
	for (uint64_t i = n / 2; i < n; i++)
		v[i] = v[n / 2 - 1];
	cr_assert_eq(td_pack_encode(v, n, &b), TD_OK);
	check_view(&b, 0, v, n);
	td_buf_free(&b);
	free(v);
}

/* A version 1-2 array (16-byte tiles, no slope) converted on view. */
Test(pack, version1_tiles)
{
	uint64_t vals[300];
	for (int i = 0; i < 300; i++)
		vals[i] = i < 128 ? 7 : i < 256 ? 1000 + (uint64_t)(i % 5) : 50 + (uint64_t)(i % 3) * 100;
	/* tile 0: width 0; tile 1: base 1000, width 3; tile 2: base 50, width 8 */
	const uint8_t widths[3] = {0, 3, 8};
	const uint64_t bases[3] = {7, 1000, 50};
	uint64_t ds = (3 + 8) * 16 + 8;
	size_t size = 24 + 3 * sizeof(td_disk_tile_v1) + ds;
	uint8_t *blob = calloc(1, size);
	uint64_t hdr[3] = {300, 3, ds};
	memcpy(blob, hdr, 24);
	td_disk_tile_v1 *t = (td_disk_tile_v1 *)(blob + 24);
	uint8_t *data = blob + 24 + 3 * sizeof *t;
	uint32_t off16 = 0;
	for (int k = 0; k < 3; k++) {
		t[k].base = bases[k];
		t[k].width = widths[k];
		t[k].off16 = widths[k] ? off16 : 0;
		for (int j = 0; j < 128 && k * 128 + j < 300 && widths[k]; j++) {
			uint64_t bit = (uint64_t)off16 * 128 + (uint64_t)j * widths[k], x = vals[k * 128 + j] - bases[k];
			for (unsigned q = 0; q < widths[k]; q++, bit++)
				data[bit / 8] |= (uint8_t)(((x >> q) & 1) << (bit % 8));
		}
		off16 += widths[k];
	}
	td_pack p;
	void *owned;
	cr_assert_eq(td_pack_view_v1(&p, blob, size, &owned), TD_OK);
	cr_assert_eq(td_pack_check(&p), TD_OK);
	for (int i = 0; i < 300; i++)
		cr_assert_eq(td_pack_get(&p, (uint64_t)i), vals[i], "value %d", i);
	free(owned);
	free(blob);
}

/* Truncated and corrupted blobs are rejected or read as the tile base, never
 * outside the view (ASan checks the "never"). */
Test(pack, bad_blobs)
{
	uint64_t v[1000];
	uint64_t s = 3;
	for (int i = 0; i < 1000; i++)
		v[i] = rnd(&s) % 100000;
	td_buf b = {0};
	cr_assert_eq(td_pack_encode(v, 1000, &b), TD_OK);
	td_pack p;
	cr_assert_eq(td_pack_view(&p, b.p, b.len), TD_OK);
	size_t blob = (size_t)td_pack_blob_size(&p);
	for (size_t cut = 0; cut < blob; cut += (cut < 64 ? 1 : 97)) {
		uint8_t *copy = malloc(cut ? cut : 1);
		memcpy(copy, b.p, cut);
		int err = td_pack_view(&p, copy, cut);
		cr_assert(err == TD_ETRUNC || err == TD_ECORRUPT, "view of %zu of %zu bytes: %d", cut, b.len, err);
		free(copy);
	}
	/* Huge counts in the header. */
	uint8_t *copy = malloc(b.len);
	memcpy(copy, b.p, b.len);
	uint64_t huge = UINT64_MAX / 2;
	memcpy(copy, &huge, 8);
	cr_assert_neq(td_pack_view(&p, copy, b.len), TD_OK);
	memcpy(copy, b.p, b.len);
	memcpy(copy + 8, &huge, 8);
	cr_assert_neq(td_pack_view(&p, copy, b.len), TD_OK);
	memcpy(copy, b.p, b.len);
	memcpy(copy + 16, &huge, 8);
	cr_assert_neq(td_pack_view(&p, copy, b.len), TD_OK);
	/* Corrupt tile headers: bad width, offset past the data. */
	memcpy(copy, b.p, b.len);
	cr_assert_eq(td_pack_view(&p, copy, b.len), TD_OK);
	uint64_t *t = (uint64_t *)(copy + TD_PACK_HDR);
	t[1] |= 63;                                   /* width 63 */
	t[2] = (t[2] & ~UINT64_C(0x7fff)) | 511u << 6 | TD_PACK_MAXW; /* past the data */
	t[3] = (t[3] & ~UINT64_C(63)) | TD_PACK_MAXW;
	cr_assert_eq(td_pack_check(&p), TD_ECORRUPT);
	for (uint64_t i = 0; i < p.n; i++)
		(void)td_pack_get(&p, i); /* any value, no out-of-bounds read */
	uint64_t *out = malloc(p.n * sizeof *out);
	td_pack_get_range(&p, 0, p.n, out);
	free(out);
	free(copy);
	td_buf_free(&b);
}

Test(pack, buffers)
{
	td_buf b = {0};
	for (int i = 0; i < 10000; i++)
		cr_assert_eq(td_buf_put(&b, "abc", (size_t)(i % 4)), TD_OK);
	cr_assert_eq(b.len, 2500u * 6);
	cr_assert_eq(td_buf_put(&b, "x", 1), TD_OK);
	cr_assert_eq(td_buf_align(&b, 64), TD_OK);
	cr_assert_eq(b.len % 64, 0u);
	cr_assert_eq(b.p[2500 * 6], 'x');
	for (size_t i = 2500 * 6 + 1; i < b.len; i++)
		cr_assert_eq(b.p[i], 0);
	size_t l = b.len;
	cr_assert_eq(td_buf_align(&b, 8), TD_OK);
	cr_assert_eq(b.len, l);
	td_buf_free(&b);
	td_buf_free(&b);
}
