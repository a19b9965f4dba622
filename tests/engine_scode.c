/* engine_scode: td_scode entropy-coded symbol arrays: round trips on skewed, flat and extreme inputs, size against the entropy, damaged blobs, the encoder's bytes pinned; td_sort_keys against a stable sort. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "td_err.h"
#include "td_out.h"
#include "td_scode.h"

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* A Zipf-like draw over [0, alphabet): rank r with weight ~ 1/(r+1). */
static uint32_t zipf(uint64_t *s, uint64_t alphabet)
{
	double u = (double)(rnd(s) >> 11) / 9007199254740992.0;
	double r = exp(u * log((double)alphabet + 1)) - 1;
	uint64_t k = (uint64_t)r;
	return (uint32_t)(k < alphabet ? k : alphabet - 1);
}

/* Encode v, view it, and read it back every way: get in order and at
 * random, ranges across tiles, the full check. Returns the blob size. */
static uint64_t round_trip(const uint32_t *v, uint64_t n, uint64_t alphabet, uint32_t c1, uint32_t c2, unsigned shift)
{
	td_buf b = { 0 };
	cr_assert_eq(td_buf_put(&b, "12345678", 8), TD_OK); /* not at offset 0 */
	int err = td_scode_encode(v, n, alphabet, c1, c2, shift, &b);
	cr_assert_eq(err, TD_OK, "encode n=%llu alphabet=%llu: %s", (unsigned long long)n,
		     (unsigned long long)alphabet, td_errdetail());
	cr_assert_eq(b.len % 8, 0u);
	td_scode c;
	cr_assert_eq(td_scode_view(&c, b.p + 8, b.len - 8), TD_OK, "view: %s", td_errdetail());
	cr_assert_eq(c.n, n);
	cr_assert_eq(td_scode_check(&c), TD_OK, "check: %s", td_errdetail());
	for (uint64_t i = 0; i < n; i++)
		if (td_scode_get(&c, i) != v[i])
			cr_assert_fail("symbol %llu of %llu: got %llu want %u", (unsigned long long)i,
				       (unsigned long long)n, (unsigned long long)td_scode_get(&c, i), v[i]);
	uint64_t s = n * 17 + alphabet;
	for (int k = 0; k < 200 && n; k++) {
		uint64_t i = rnd(&s) % n;
		cr_assert_eq(td_scode_get(&c, i), v[i], "random get %llu", (unsigned long long)i);
	}
	/* the vector decoder (where the CPU has it) and the portable one */
	uint32_t *all = malloc((n + 1) * sizeof *all);
	for (int simd = 1; simd >= 0; simd--) {
		int on = td_scode_simd(simd);
		memset(all, 0xa5, (n + 1) * sizeof *all);
		td_scode_decode_all(&c, all);
		cr_assert(memcmp(all, v, n * sizeof *v) == 0, "decode_all of %llu symbols (vector decoder %s)",
			  (unsigned long long)n, on ? "on" : "off");
	}
	td_scode_simd(1);
	free(all);
	uint64_t *out = malloc((n + 1) * sizeof *out);
	for (int k = 0; k < 50 && n; k++) {
		uint64_t i = rnd(&s) % n, cnt = rnd(&s) % (n - i + 1);
		td_scode_range(&c, i, cnt, out);
		for (uint64_t x = 0; x < cnt; x++)
			cr_assert_eq(out[x], v[i + x], "range(%llu, %llu) at %llu", (unsigned long long)i,
				     (unsigned long long)cnt, (unsigned long long)x);
	}
	free(out);
	uint64_t size = b.len - 8;
	td_scode_free(&c);
	td_buf_free(&b);
	return size;
}

Test(scode, lengths_around_tile_edges)
{
	static const uint64_t lens[] = { 0, 1, 2, 7, 8, 9, 15, 16, 17, 127, 128, 129, 1023, 1024, 1025, 5000 };
	uint64_t s = 3;
	for (unsigned shift = TD_SC_MINSHIFT; shift <= TD_SC_MAXSHIFT; shift++)
		for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
			uint64_t n = lens[li];
			uint32_t *v = malloc((n + 1) * sizeof *v);
			for (uint64_t i = 0; i < n; i++)
				v[i] = zipf(&s, 1000);
			round_trip(v, n, 1000, 200, 600, shift);
			free(v);
		}
}

/* One symbol only, the alphabet of one, the largest alphabet (32-bit
 * escapes), every symbol distinct (all escaped), two symbols alternating. */
Test(scode, extremes)
{
	uint64_t n = 3000, s = 5;
	uint32_t *v = malloc(n * sizeof *v);
	for (uint64_t i = 0; i < n; i++)
		v[i] = 0;
	round_trip(v, n, 1, 0, 0, 7);
	for (uint64_t i = 0; i < n; i++)
		v[i] = 41;
	round_trip(v, n, 100, 10, 50, 7);
	for (uint64_t i = 0; i < n; i++)
		v[i] = (uint32_t)(rnd(&s) % (UINT32_MAX - 1));
	v[0] = UINT32_MAX - 2;
	round_trip(v, n, UINT32_MAX - 1, 1u << 30, 1u << 31, 5);
	for (uint64_t i = 0; i < n; i++)
		v[i] = (uint32_t)(i * 7919 % 1000003);
	round_trip(v, n, 1000003, 1000, 2000, 7);
	for (uint64_t i = 0; i < n; i++)
		v[i] = (uint32_t)(i & 1) * 999;
	round_trip(v, n, 1000, 500, 800, 4);
	free(v);
}

/* Fibonacci counts make a Huffman tree as deep as there are symbols: the
 * coder must limit codes to TD_SC_MAXLEN bits and still round trip. */
Test(scode, deep_code_is_length_limited)
{
	uint64_t fib[40] = { 1, 1 }, n = 0;
	for (int k = 2; k < 30; k++)
		fib[k] = fib[k - 1] + fib[k - 2];
	for (int k = 0; k < 30; k++)
		n += fib[k];
	cr_assert(n < 50000000);
	uint32_t *v = malloc(n * sizeof *v);
	uint64_t at = 0, s = 9;
	for (int k = 0; k < 30; k++)
		for (uint64_t j = 0; j < fib[k]; j++)
			v[at++] = (uint32_t)k;
	for (uint64_t i = n - 1; i > 0; i--) { /* shuffle */
		uint64_t j = rnd(&s) % (i + 1);
		uint32_t t = v[i];
		v[i] = v[j];
		v[j] = t;
	}
	round_trip(v, n, 30, 30, 30, 10);
	free(v);
}

/* The coded size of a skewed stream over a large alphabet is close to its
 * order-0 entropy (computed here from the counts, not by the coder). */
Test(scode, size_near_the_entropy)
{
	const uint64_t n = 400000, alphabet = 200000;
	uint32_t *v = malloc(n * sizeof *v);
	uint64_t *cnt = calloc(alphabet, sizeof *cnt), s = 11;
	for (uint64_t i = 0; i < n; i++)
		cnt[v[i] = zipf(&s, alphabet)]++;
	double h = 0;
	for (uint64_t k = 0; k < alphabet; k++)
		if (cnt[k])
			h += (double)cnt[k] * log2((double)n / (double)cnt[k]);
	uint64_t size = round_trip(v, n, alphabet, alphabet, alphabet, 7);
	/* Symbols seen once or twice cost an escape plus 18 raw bits, at most
	 * one bit over log2(n); the description and tile table are extra. */
	double plain = ceil(log2((double)alphabet)) * (double)n / 8;
	cr_assert(size * 8.0 < h * 1.10, "coded %llu bytes, entropy %.0f bytes", (unsigned long long)size, h / 8);
	cr_assert(size < plain * 0.9, "coded %llu bytes, fixed width %.0f", (unsigned long long)size, plain);
	free(v);
	free(cnt);
}

Test(scode, bad_parameters)
{
	td_buf b = { 0 };
	uint32_t v[2] = { 1, 5 };
	cr_assert_eq(td_scode_encode(v, 2, 5, 0, 0, 7, &b), TD_EINVAL); /* 5 is not below 5 */
	cr_assert_eq(td_scode_encode(v, 2, 10, 6, 5, 7, &b), TD_EINVAL);
	cr_assert_eq(td_scode_encode(v, 2, 10, 0, 0, 2, &b), TD_EINVAL);
	cr_assert_eq(td_scode_encode(v, 2, 10, 0, 0, 11, &b), TD_EINVAL);
	cr_assert_eq(td_scode_encode(v, 2, 0, 0, 0, 7, &b), TD_EINVAL);
	td_buf_free(&b);
}

/* Truncated views fail at view time; damaged bytes anywhere never crash
 * (ASan runs this too) and never yield a symbol outside the alphabet:
 * a symbol reads back right, or as the alphabet (out of range). */
Test(scode, damaged_blobs)
{
	const uint64_t n = 3000, alphabet = 5000;
	uint32_t *v = malloc(n * sizeof *v);
	uint64_t s = 13;
	for (uint64_t i = 0; i < n; i++)
		v[i] = zipf(&s, alphabet);
	td_buf b = { 0 };
	cr_assert_eq(td_scode_encode(v, n, alphabet, 100, 3000, 6, &b), TD_OK);
	td_scode c;
	for (uint64_t cut = 0; cut < b.len; cut += 8)
		cr_assert_neq(td_scode_view(&c, b.p, cut), TD_OK, "view of %llu bytes", (unsigned long long)cut);
	uint8_t *copy = malloc(b.len);
	for (int round = 0; round < 300; round++) {
		memcpy(copy, b.p, b.len);
		for (int k = 0; k < 1 + round % 4; k++)
			copy[rnd(&s) % b.len] ^= (uint8_t)(1u << (rnd(&s) % 8));
		if (td_scode_view(&c, copy, b.len) != TD_OK)
			continue;
		(void)td_scode_check(&c);
		uint32_t *all = malloc((c.n + 1) * sizeof *all), *all0 = malloc((c.n + 1) * sizeof *all0);
		td_scode_simd(0);
		td_scode_decode_all(&c, all0);
		td_scode_simd(1);
		td_scode_decode_all(&c, all);
		cr_assert(memcmp(all, all0, c.n * sizeof *all) == 0, "vector and portable decoders differ");
		free(all0);
		for (uint64_t i = 0; i < c.n; i++) {
			uint64_t x = td_scode_get(&c, i);
			cr_assert(x <= c.alphabet, "symbol %llu decoded as %llu", (unsigned long long)i,
				  (unsigned long long)x);
			cr_assert(x == all[i], "symbol %llu: get %llu, decode_all %u", (unsigned long long)i,
				  (unsigned long long)x, all[i]);
		}
		free(all);
		td_scode_free(&c);
	}
	free(copy);
	free(v);
	td_buf_free(&b);
}

/* The encoder's bytes are what archives hold: -j 1 against -j N and the
 * GPU build against the CPU build compare whole archives, and a faster
 * encoder must write what the one before it wrote. Pinned on three inputs
 * (XXH3-64 of the blob, from the encoder before the 2026-11-28 speed-up:
 * a dense count table, a large sparse alphabet with escapes, a small one). */
static uint64_t pinned_case(uint64_t n, uint64_t alphabet, unsigned shift, int skew, uint64_t *len)
{
	uint64_t s = UINT64_C(88172645463325252) + n + alphabet;
	uint32_t *v = malloc(n * sizeof *v);
	cr_assert_not_null(v);
	for (uint64_t i = 0; i < n; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		uint64_t x;
		if (skew) {
			double u = (double)(s >> 11) / 9007199254740992.0;
			x = (uint64_t)((double)alphabet * u * u * u * u);
			if (x >= alphabet)
				x = alphabet - 1;
		} else {
			x = (s & 1) ? (s >> 8) % 64 : (s >> 8) % alphabet;
		}
		v[i] = (uint32_t)x;
	}
	td_buf b = { 0 };
	cr_assert_eq(td_scode_encode(v, n, alphabet, (uint32_t)(alphabet / 3), (uint32_t)(alphabet / 2), shift, &b),
		     TD_OK);
	uint64_t h = XXH3_64bits(b.p, b.len);
	*len = b.len;
	td_buf_free(&b);
	free(v);
	return h;
}

Test(scode, bytes_as_before)
{
	uint64_t len;
	cr_expect_eq(pinned_case(300000, 1300000, 10, 1, &len), UINT64_C(0xb6c6d6b4346c8853));
	cr_expect_eq(len, 735272u);
	cr_expect_eq(pinned_case(200000, 40000000, 3, 0, &len), UINT64_C(0x05f1dbcc9ad14ac6));
	cr_expect_eq(len, 456000u);
	cr_expect_eq(pinned_case(100000, 3000, 6, 1, &len), UINT64_C(0x7196105cbcee1f77));
	cr_expect_eq(len, 125928u);
}

static int cmp_key_id(const void *x, const void *y)
{
	const td_skey *a = x, *b = y;
	if (a->key != b->key)
		return a->key < b->key ? -1 : 1;
	return (a->id > b->id) - (a->id < b->id);
}

/* td_sort_keys is stable: from id order it gives the (key, id) order, on
 * keys that differ in few bytes (skipped passes), in many, and all equal. */
Test(scode, sort_keys_is_a_stable_sort)
{
	static const uint64_t masks[] = { 0, 0xff, 0xff00ff0000ull, UINT64_MAX, 0x7ull << 40 };
	static const size_t sizes[] = { 0, 1, 2, 3, 1000, 100000 };
	uint64_t s = 7;
	for (size_t mi = 0; mi < sizeof masks / sizeof *masks; mi++)
		for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
			size_t n = sizes[si];
			td_skey *k = malloc((n + 1) * sizeof *k), *want = malloc((n + 1) * sizeof *want);
			cr_assert(k && want);
			for (size_t i = 0; i < n; i++)
				k[i] = want[i] = (td_skey){ rnd(&s) & masks[mi], (uint32_t)i };
			qsort(want, n, sizeof *want, cmp_key_id);
			cr_assert_eq(td_sort_keys(k, n), TD_OK);
			for (size_t i = 0; i < n; i++)
				cr_assert(k[i].key == want[i].key && k[i].id == want[i].id,
					  "mask %zu, %zu keys: at %zu key %llx id %u, want %llx id %u", mi, n, i,
					  (unsigned long long)k[i].key, k[i].id, (unsigned long long)want[i].key,
					  want[i].id);
			free(k);
			free(want);
		}
}
