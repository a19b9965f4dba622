/* td_scode: encoder, decoding tables and tile decoder of entropy-coded symbol arrays. */
#include "td_scode.h"
#include "td_out.h"

#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "td_err.h"

#define LUT_BITS 11u
#define ESC UINT32_MAX        /* the escape in a decoding table's symbol list */
#define TILE_MAX (1u << TD_SC_MAXSHIFT)
_Static_assert(TD_SC_MINSHIFT >= 3, "a tile holds a multiple of 8 symbols");

#define NGROUP 5u            /* classes 0-3, then the escape */
#define GROUP_ESC 4u
#define NLONG 16u            /* lengths LUT_BITS + 1 .. LUT_BITS + NLONG */
#define LUT_LONG (1u << 18)  /* a long prefix's entry with its lengths; else (0) search every limit */
_Static_assert(LUT_BITS + NLONG >= TD_SC_MAXLEN, "every long code length has a limit");
_Static_assert(NLONG == 16 && TD_SC_NCTX == 5, "the long lengths' limits and bmf fit three 32-entry permutes");

/* One context's decoding table. A code of at most LUT_BITS bits is one
 * look-up; a longer one is found among the left-justified limits of its
 * length. Either gives the symbol's index in syms and its group (its
 * class, or the escape) without reading syms, so the next symbol's
 * context never waits for that load. The look-up entry of a LUT_BITS-bit
 * prefix of longer codes holds the shortest and longest length of the
 * codes under it (lengths grow with the code in a canonical code, so
 * they span one to three lengths under most prefixes): two comparisons
 * with limits give the length. A prefix whose codes span more lengths, or
 * that holds no code (a context that codes nothing has only such
 * entries), has entry 0 and is searched among all limits, which also
 * finds a code that does not exist. */
struct sc_ctx {
	uint32_t lut[1u << LUT_BITS];      /* index << 8 | group << 5 | length; 0: a longer code */
	uint64_t lim[TD_SC_MAXLEN + 1];    /* codes of length <= L lie below lim[L] (32-bit, left-justified) */
	uint32_t limx[LUT_BITS + 1 + NLONG]; /* lim[L] for L <= maxlen where it is below 2^32, else 2^32 - 1 */
	uint32_t first[TD_SC_MAXLEN + 1];  /* first code of length L */
	uint32_t base[TD_SC_MAXLEN + 1];   /* index in syms of the first symbol of length L */
	uint32_t bmf[TD_SC_MAXLEN + 1];    /* base[L] - first[L] (mod 2^32): a code's index in
	                                      syms is its value plus this */
	uint32_t gend[TD_SC_MAXLEN + 1][NGROUP - 1]; /* codes of length L in groups <= g: [0, gend[L][g]) */
	uint32_t *syms;                    /* by (length, group, symbol); the escape's entry unused */
	uint64_t nsyms;                    /* entries of syms */
	unsigned maxlen;
};

struct td_sc_tab {
	uint64_t gen; /* unique per table: names it in the threads' tile caches */
	int bad;      /* the description does not decode: every symbol is bad */
	atomic_uint_fast64_t *seen; /* a bit per tile decoded by get/range */
	uint32_t *block;            /* every context's syms back to back, in
	                               one allocation */
	uint32_t *all;              /* block when its offsets fit the SIMD
	                               decoder's 32-bit gather indices, else NULL */
	uint32_t soff[16];          /* ctx[k].syms == all + soff[k] (5 used; 16
	                               for the vector decoder's one 512-bit load) */
	/* each context's limx and bmf from LUT_BITS + 1 on (16 entries,
	 * zeros past the end): contexts 0 and 1, 2 and 3, then 4 in a 32-entry
	 * table each, which the vector decoder looks up with in-register
	 * permutes instead of gathers (the gathers are most of a step's cost on
	 * AMD Zen 4) */
	uint32_t plimx[3][32], pbmf[3][32];
	struct sc_ctx ctx[TD_SC_NCTX];
};

static inline unsigned sc_class(const td_scode *c, uint32_t s)
{
	return s < c->c1 ? (s & 1u) : s < c->c2 ? 2u : 3u;
}

static inline uint64_t load_be64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return __builtin_bswap64(v);
}

static unsigned bits_for(uint64_t v)
{
	return v ? 64u - (unsigned)__builtin_clzll(v) : 0u;
}

/* ---- view ---- */

int td_scode_view(td_scode *c, const void *blob, uint64_t size)
{
	const uint8_t *b = blob;
	memset(c, 0, sizeof *c);
	if (size < TD_SC_HDR)
		return td_fail(TD_ETRUNC, "coded symbol array shorter than its header");
	uint64_t n = td_pack_load64(b), alphabet = td_pack_load64(b + 8);
	uint32_t w[4];
	memcpy(w, b + 16, sizeof w);
	uint64_t tb = td_pack_load64(b + 32), db = td_pack_load64(b + 40), xb = td_pack_load64(b + 48);
	if (alphabet == 0 || alphabet > UINT32_MAX - 1 || w[0] > w[1] || w[1] > alphabet || w[2] < TD_SC_MINSHIFT ||
	    w[2] > TD_SC_MAXSHIFT || w[3] == 0 || w[3] > 32 || (alphabet - 1) >> w[3] != 0)
		return td_fail(TD_ECORRUPT, "coded symbol array: bad header");
	if (tb > size - TD_SC_HDR || db > size - TD_SC_HDR - tb || xb > size - TD_SC_HDR - tb - db || xb < 8 ||
	    (tb | db | xb) & 7)
		return td_fail(TD_ETRUNC, "coded symbol array runs past its section");
	int err = td_pack_view(&c->tiles, b + TD_SC_HDR, tb);
	if (err)
		return err;
	uint64_t nt = (n >> w[2]) + ((n & ((UINT64_C(1) << w[2]) - 1)) != 0);
	if (c->tiles.n != nt + 1)
		return td_fail(TD_ECORRUPT, "coded symbol array: %llu tile offsets for %llu symbols",
			       (unsigned long long)c->tiles.n, (unsigned long long)n);
	c->n = n;
	c->alphabet = alphabet;
	c->ntiles = nt;
	c->c1 = w[0];
	c->c2 = w[1];
	c->tile_shift = w[2];
	c->raw_bits = w[3];
	c->desc = b + TD_SC_HDR + tb;
	c->desc_bytes = db;
	c->data = c->desc + db;
	c->data_bytes = xb;
	atomic_init(&c->tab, NULL);
	atomic_init(&c->redecoded, 0);
	return TD_OK;
}

/* ---- decoding tables ---- */

typedef struct brd {
	const uint8_t *p;
	uint64_t nbits, at;
	int bad;
} brd;

/* The next 57 or more bits, left-justified (zeros past the end). */
static inline uint64_t peek(const brd *r)
{
	uint64_t byte = r->at >> 3, nbytes = r->nbits >> 3;
	if (byte + 8 <= nbytes)
		return load_be64(r->p + byte) << (r->at & 7);
	uint8_t tmp[8] = { 0 };
	if (byte < nbytes)
		memcpy(tmp, r->p + byte, nbytes - byte);
	return load_be64(tmp) << (r->at & 7);
}

/* Next k (<= 32) bits; 0 and bad set past the end. */
static inline uint64_t rd(brd *r, unsigned k)
{
	if (k == 0)
		return 0;
	if (r->bad || r->at + k > r->nbits) {
		r->bad = 1;
		return 0;
	}
	uint64_t x = peek(r);
	r->at += k;
	return x >> (64 - k);
}

/* How many bits equal to `bit` come next (at most 56), not consumed. */
static inline unsigned run_of(const brd *r, unsigned bit)
{
	uint64_t x = peek(r) | 0xff; /* the low 7 bits may lie past the window */
	x = bit ? ~x : x;
	unsigned n = x ? (unsigned)__builtin_clzll(x) : 64;
	return n < 56 ? n : 56;
}

static uint64_t rd_gamma(brd *r)
{
	unsigned z = 0;
	for (unsigned n; !r->bad && (n = run_of(r, 0)) > 0 && z <= 40; z += n)
		r->at += n; /* zeros, a run at a time */
	if (z > 40 || rd(r, 1) != 1) /* the leading one of the value */
		r->bad = 1;
	if (r->bad)
		return 0;
	return (UINT64_C(1) << z) | rd(r, z);
}

static uint64_t rd_rice(brd *r, unsigned k)
{
	/* Most values: one window holds the quotient's ones, its zero and
	 * the k low bits. */
	if (!r->bad && r->at + 64 <= r->nbits) {
		uint64_t x = peek(r);
		unsigned q = ~x ? (unsigned)__builtin_clzll(~x) : 64u;
		if (q + 1 + k <= 57) {
			uint64_t low = k ? (x << (q + 1)) >> (64 - k) : 0;
			r->at += q + 1 + k;
			return ((uint64_t)q << k) | low;
		}
	}
	uint64_t q = 0;
	for (unsigned n; !r->bad && r->at < r->nbits && (n = run_of(r, 1)) > 0; q += n) {
		if (r->at + n > r->nbits)
			n = (unsigned)(r->nbits - r->at);
		r->at += n; /* ones, a run at a time */
	}
	if (rd(r, 1) != 0) /* the zero that ends the quotient */
		r->bad = 1;
	return (q << k) | rd(r, k);
}

static void tab_free(struct td_sc_tab *t)
{
	if (!t)
		return;
	free(t->block);
	free(t->seen);
	free(t);
}

/* One Rice value the slow way (near the end, or a long quotient). */
static __attribute__((noinline)) uint64_t rice_slow(brd *r, uint64_t *at, unsigned k)
{
	r->at = *at;
	uint64_t g = rd_rice(r, k);
	*at = r->at;
	return g;
}

/* cnt ascending values of a Rice list (parameter k, each the gap from the
 * one before less 1, the first from v + 1; v = UINT64_MAX: from 0) into
 * out; returns the last, or UINT64_MAX (r->bad set) when the list runs
 * past r's end or a value reaches lim (<= 2^32, so the sum cannot wrap).
 * Values are taken from a 64-bit window shifted along, reloaded only when
 * the next one does not fit what is left of it: the chain from one value
 * to the next is a count of leading ones and a shift, not a load. */
static uint64_t rice_list(brd *r, unsigned k, uint64_t cnt, uint64_t v, uint64_t lim, uint32_t *out)
{
	const uint8_t *p = r->p;
	const uint64_t nbits = r->nbits;
	uint64_t at = r->at, x = 0;
	unsigned avail = 0; /* valid bits at the top of x (the rest are 0) */
	for (uint64_t j = 0; j < cnt; j++) {
		uint64_t g;
		unsigned q = ~x ? (unsigned)__builtin_clzll(~x) : 64u, need = q + 1 + k;
		if (__builtin_expect(need > avail, 0)) {
			if (at + 64 <= nbits) {
				x = load_be64(p + (at >> 3)) << (at & 7);
				avail = 64 - (unsigned)(at & 7);
				q = ~x ? (unsigned)__builtin_clzll(~x) : 64u;
				need = q + 1 + k;
			}
			if (need > avail) {
				g = rice_slow(r, &at, k);
				if (r->bad)
					return UINT64_MAX;
				avail = 0;
				x = 0;
				goto have;
			}
		}
		g = ((uint64_t)q << k) | (k ? (x << (q + 1)) >> (64 - k) : 0);
		at += need;
		avail -= need;
		x = need < 64 ? x << need : 0;
have:
		v += g + 1;
		if (__builtin_expect(v >= lim, 0)) {
			r->bad = 1;
			return UINT64_MAX;
		}
		out[j] = (uint32_t)v;
	}
	r->at = at;
	return v;
}

/* Read one context's code from r into x, its symbol list appended to
 * *blk (*nblk entries, *cap allocated: grown here; x->syms is left NULL
 * and x->nsyms set, the caller points it into the block). 0, or -1 when
 * it is malformed or memory is short. */
static int read_ctx(const td_scode *c, brd *r, struct sc_ctx *x, uint32_t **blk, uint64_t *nblk, uint64_t *cap)
{
	x->maxlen = (unsigned)rd(r, 5);
	for (unsigned L = 0; L < LUT_BITS + 1 + NLONG; L++)
		x->limx[L] = UINT32_MAX;
	if (r->bad || x->maxlen > TD_SC_MAXLEN)
		return -1;
	uint64_t cnt[TD_SC_MAXLEN + 1][NGROUP], code = 0, m = 0;
	for (unsigned L = 1; L <= x->maxlen; L++) {
		uint64_t inlen = 0;
		for (unsigned g = 0; g < NGROUP; g++) {
			cnt[L][g] = rd_gamma(r) - 1;
			if (r->bad || cnt[L][g] > c->alphabet + 1 || (g == GROUP_ESC && cnt[L][g] > 1))
				return -1;
			inlen += cnt[L][g];
			if (g < NGROUP - 1)
				x->gend[L][g] = (uint32_t)inlen;
		}
		x->first[L] = (uint32_t)code;
		x->base[L] = (uint32_t)m;
		x->bmf[L] = (uint32_t)m - (uint32_t)code;
		if (code + inlen > (UINT64_C(1) << L))
			return -1; /* not a prefix code */
		code += inlen;
		x->lim[L] = code << (32 - L);
		if (x->lim[L] < (UINT64_C(1) << 32))
			x->limx[L] = (uint32_t)x->lim[L];
		code <<= 1;
		m += inlen;
		if (m > c->alphabet + 1)
			return -1;
	}
	if (x->maxlen != 0 && m == 0)
		return -1;
	x->nsyms = x->maxlen == 0 ? 1 : m; /* a context that codes nothing: one entry, read (and ignored) by sc_step */
	if (*nblk + x->nsyms > *cap) {
		uint64_t want = *cap ? *cap : 1024;
		while (want < *nblk + x->nsyms)
			want *= 2;
		uint32_t *nb = want <= SIZE_MAX / sizeof *nb ? realloc(*blk, want * sizeof *nb) : NULL;
		if (!nb)
			return -1;
		*blk = nb;
		*cap = want;
	}
	uint32_t *syms = *blk + *nblk;
	*nblk += x->nsyms;
	if (x->maxlen == 0) {
		syms[0] = 0;
		return 0;
	}
	uint64_t at = 0;
	for (unsigned L = 1; L <= x->maxlen; L++)
		for (unsigned g = 0; g < NGROUP; g++) {
			if (!cnt[L][g])
				continue;
			unsigned k = (unsigned)rd(r, 5);
			if (r->bad)
				return -1;
			/* a symbol of group g has class g (classes 0 and 1 by
			 * parity below c1, 2 up to c2, 3 up to the alphabet);
			 * the escape is `alphabet` */
			if (g == GROUP_ESC) {
				uint32_t e;
				if (rice_list(r, k, 1, UINT64_MAX, c->alphabet + 1, &e) != c->alphabet)
					return -1;
				syms[at++] = ESC;
				continue;
			}
			const uint64_t lo = g < 2 ? 0 : g == 2 ? c->c1 : c->c2, hi = g < 2 ? c->c1 : g == 2 ? c->c2 : c->alphabet;
			uint32_t *out = syms + at;
			if (rice_list(r, k, cnt[L][g], UINT64_MAX, hi, out) == UINT64_MAX || out[0] < lo)
				return -1;
			if (g < 2) {
				uint32_t odd = 0;
				for (uint64_t j = 0; j < cnt[L][g]; j++)
					odd |= (out[j] ^ g) & 1u;
				if (odd)
					return -1;
			}
			at += cnt[L][g];
		}
	for (uint64_t p = 0; p < (UINT64_C(1) << LUT_BITS); p++) {
		/* a prefix of longer codes (short codes overwrite theirs below):
		 * the lengths of the codes in [lo, hi), 32-bit left-justified */
		uint64_t lo = p << (32 - LUT_BITS), hi = lo + (UINT64_C(1) << (32 - LUT_BITS));
		unsigned lmin = 0, lmax = 0;
		for (unsigned L = LUT_BITS + 1; L <= x->maxlen && !lmax; L++) {
			if (!lmin && x->lim[L] > lo)
				lmin = L;
			if (x->lim[L] >= hi)
				lmax = L;
		}
		x->lut[p] = lmin && lmax && lmax - lmin <= 2 ? LUT_LONG | lmin << 8 | lmax << 13 : 0;
	}
	for (unsigned L = 1; L <= x->maxlen && L <= LUT_BITS; L++) {
		uint64_t inlen = x->gend[L][NGROUP - 2] + cnt[L][GROUP_ESC];
		for (uint64_t j = 0, g = 0; j < inlen; j++) {
			while (g < NGROUP - 1 && j >= x->gend[L][g])
				g++;
			uint64_t lo = (x->first[L] + j) << (LUT_BITS - L), hi = lo + (UINT64_C(1) << (LUT_BITS - L));
			uint32_t e = (uint32_t)((x->base[L] + j) << 8 | g << 5 | L);
			for (uint64_t i = lo; i < hi; i++)
				x->lut[i] = e;
		}
	}
	return 0;
}

static struct td_sc_tab *tab_build(const td_scode *c)
{
	static atomic_uint_fast64_t gens = 1;
	struct td_sc_tab *t = calloc(1, sizeof *t);
	if (!t)
		return NULL;
	t->gen = atomic_fetch_add(&gens, 1);
	if (!(t->seen = calloc(c->ntiles / 64 + 1, sizeof *t->seen))) {
		free(t);
		return NULL;
	}
	/* Every context's symbol list in one block (one gather base and a
	 * per-context offset reach them all), grown as the lists are read. */
	brd r = { c->desc, c->desc_bytes * 8, 0, 0 };
	uint64_t nblk = 0, cap = 0;
	for (unsigned k = 0; k < TD_SC_NCTX && !t->bad; k++)
		if (read_ctx(c, &r, &t->ctx[k], &t->block, &nblk, &cap))
			t->bad = 1;
	if (t->bad) {
		for (unsigned k = 0; k < TD_SC_NCTX; k++)
			t->ctx[k].nsyms = 0; /* tables that do not decode: never read */
		return t;
	}
	for (uint64_t k = 0, at = 0; k < TD_SC_NCTX; k++) {
		t->ctx[k].syms = t->block + at;
		t->soff[k] = (uint32_t)at; /* used only with all (below 2^29) */
		at += t->ctx[k].nsyms;
	}
	t->all = nblk < (UINT64_C(1) << 29) ? t->block : NULL;
	for (unsigned k = 0; k < TD_SC_NCTX; k++) {
		for (unsigned l = 0; l < 16; l++) {
			unsigned at = (k & 3) * 16 + l;
			t->plimx[k >> 1][at & 31] = LUT_BITS + 1 + l < LUT_BITS + 1 + NLONG ? t->ctx[k].limx[LUT_BITS + 1 + l] : 0;
			t->pbmf[k >> 1][at & 31] = LUT_BITS + 1 + l <= TD_SC_MAXLEN ? t->ctx[k].bmf[LUT_BITS + 1 + l] : 0;
		}
	}
	return t;
}

/* The decoding tables: built once, on first use (NULL only out of memory). */
static const struct td_sc_tab *tables(const td_scode *c)
{
	struct td_sc_tab *t = atomic_load_explicit(&c->tab, memory_order_acquire);
	if (t)
		return t;
	/* one build per sequence; a lock stripe by its address, so the first
	 * reads of two shards (each a sequence of its own) rarely wait for
	 * each other's build */
	static pthread_mutex_t mu[64] = {[0 ... 63] = PTHREAD_MUTEX_INITIALIZER};
	pthread_mutex_t *m = &mu[((uintptr_t)c >> 6) % 64];
	pthread_mutex_lock(m);
	t = atomic_load_explicit(&c->tab, memory_order_relaxed);
	if (!t && (t = tab_build(c)))
		atomic_store_explicit(&((td_scode *)c)->tab, t, memory_order_release);
	pthread_mutex_unlock(m);
	return t;
}

void td_scode_prepare(const td_scode *c)
{
	(void)tables(c);
}

void td_scode_free(td_scode *c)
{
	tab_free(atomic_load(&c->tab));
	atomic_store(&c->tab, NULL);
}

/* ---- decoding ---- */

/* One stream being decoded: its next bit, its end, its context. All
 * 64-bit, like the constants of sc_dec: a uint32_t store of a symbol may
 * not alias them, so they stay in registers while decoding. */
typedef struct sc_state {
	uint64_t bit, end, ctx;
} sc_state;

/* What a decoding loop reads at every step, copied out of the view. */
typedef struct sc_dec {
	const uint8_t *data;
	const struct sc_ctx *ctx;
	uint64_t alphabet, raw, c1, c2;
	uint64_t last; /* the last byte a window may start at */
} sc_dec;

static sc_dec sc_dec_of(const td_scode *c, const struct td_sc_tab *tb)
{
	return (sc_dec){ c->data, tb ? tb->ctx : NULL, c->alphabet, c->raw_bits, c->c1, c->c2, c->data_bytes - 8 };
}

static inline unsigned tile_count(const td_scode *c, uint64_t t)
{
	uint64_t first = t << c->tile_shift, left = c->n - first;
	return left < (UINT64_C(1) << c->tile_shift) ? (unsigned)left : 1u << c->tile_shift;
}

/* Start tile t; 0, or -1 when its bounds are bad. */
static int sc_start(const td_scode *c, const struct td_sc_tab *tb, uint64_t t, sc_state *st)
{
	st->bit = td_pack_get(&c->tiles, t);
	st->end = td_pack_get(&c->tiles, t + 1);
	st->ctx = 4;
	return !tb || tb->bad || st->bit > st->end || st->end > (c->data_bytes - 8) * 8 ? -1 : 0;
}

/* Decode the next symbol of st into *out (a symbol at or over the
 * alphabet reads as the alphabet). 0, or -1 when its code does not exist;
 * a stream that runs past its tile's end is found by the caller, at the
 * tile's end (the window stays inside the data meanwhile). A short code is
 * one look-up; a long one (about half of them) two comparisons with the
 * limits its prefix's entry names, or, under a prefix marked 0, a
 * branch-free binary search of all of them. */
static inline __attribute__((always_inline)) int sc_step(const sc_dec d, sc_state *st, uint32_t *out)
{
	/* 57 bits or more: a code (<= 24) and an escaped symbol (<= 32) */
	uint64_t byte = st->bit >> 3;
	byte = byte < d.last ? byte : d.last;
	uint64_t x = load_be64(d.data + byte) << (st->bit & 7);
	uint32_t top = (uint32_t)(x >> 32);
	const struct sc_ctx *k = &d.ctx[st->ctx];
	uint32_t e = k->lut[top >> (32 - LUT_BITS)];
	uint64_t len = e & 31u, g = (e >> 5) & 7u;
	uint32_t idx = e >> 8;
	int bad = 0;
	if (!len) {
		if (__builtin_expect((e & LUT_LONG) != 0, 1)) {
			/* the prefix's codes have lengths lmin..lmax (<= lmin + 2) */
			unsigned lmin = (e >> 8) & 31u, lmax = (e >> 13) & 31u;
			len = lmin + (top >= k->limx[lmin]) + (top >= k->limx[lmin + 1]);
			len = len < lmax ? len : lmax;
		} else {
			/* how many length limits the code reaches (a code at or
			 * past lim[maxlen] does not exist: bad, len maxlen) */
			const uint32_t *lm = k->limx + LUT_BITS + 1;
			unsigned n = top >= lm[7] ? 8u : 0u;
			n += top >= lm[n + 3] ? 4u : 0u;
			n += top >= lm[n + 1] ? 2u : 0u;
			n += top >= lm[n];
			len = LUT_BITS + 1 + n;
			len = len < k->maxlen ? len : k->maxlen;
			bad = top >= k->lim[k->maxlen]; /* no code of this context starts so */
		}
		/* 64-bit: len is 0 in a context that codes nothing (bad) */
		uint32_t at = (uint32_t)((uint64_t)top >> (32 - len)) - k->first[len];
		const uint32_t *ge = k->gend[len];
		g = (at >= ge[0]) + (at >= ge[1]) + (at >= ge[2]) + (at >= ge[3]);
		idx = bad ? 0 : k->base[len] + at;
	}
	uint32_t s = k->syms[idx]; /* off the critical path: the context is g */
	if (__builtin_expect(g == GROUP_ESC, 0)) {
		/* rare symbols: a well-predicted branch costs less than
		 * selecting the raw id at every step */
		uint64_t raw = (x << len) >> (64 - d.raw);
		len += d.raw;
		g = raw < d.c1 ? (raw & 1) : raw < d.c2 ? 2u : 3u;
		s = raw < d.alphabet ? (uint32_t)raw : (uint32_t)d.alphabet;
	}
	st->bit += len;
	*out = s; /* a table symbol is < alphabet (read_ctx) */
	st->ctx = g;
	return -bad;
}

/* Decode the first cnt symbols of tile t into out. Returns the bit
 * position after them, or UINT64_MAX when the tile does not decode (its
 * remaining symbols then read as c->alphabet). */
static uint64_t decode_tile(const td_scode *c, const struct td_sc_tab *tb, uint64_t t, unsigned cnt, uint32_t *out)
{
	sc_state st;
	unsigned j = 0;
	if (sc_start(c, tb, t, &st) == 0) {
		const sc_dec d = sc_dec_of(c, tb);
		for (; j < cnt && sc_step(d, &st, &out[j]) == 0; j++)
			;
	}
	if (j == cnt && st.bit <= st.end && (cnt < tile_count(c, t) || st.bit == st.end))
		return st.bit;
	for (j = 0; j < cnt; j++) /* a damaged tile: none of it */
		out[j] = (uint32_t)c->alphabet;
	return UINT64_MAX;
}

/* Tiles t..t+3, all full, into out: four streams decoded in step, so their
 * table look-ups overlap (one stream alone waits on each in turn). */
static void decode_tiles4(const td_scode *c, const struct td_sc_tab *tb, uint64_t t, uint32_t *out)
{
	const unsigned n = 1u << c->tile_shift;
	sc_state st[4];
	int ok = 1;
	for (unsigned q = 0; q < 4; q++)
		ok &= sc_start(c, tb, t + q, &st[q]) == 0;
	const sc_dec d = sc_dec_of(c, tb);
	for (unsigned j = 0; j < n && ok; j++)
		ok = !(sc_step(d, &st[0], &out[j]) | sc_step(d, &st[1], &out[n + j]) | sc_step(d, &st[2], &out[2 * n + j]) |
		       sc_step(d, &st[3], &out[3 * n + j]));
	for (unsigned q = 0; q < 4; q++)
		ok &= st[q].bit == st[q].end;
	if (!ok) /* one of them is damaged: each on its own, bad tiles marked */
		for (unsigned q = 0; q < 4; q++)
			decode_tile(c, tb, t + q, n, out + q * n);
}


/* Tiles the vector decoder takes at once (two groups of 16 lanes); a long
 * in-order reader gets that many decoded together. */
#define X16_TILES 32u

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SC_X16 1
#include <immintrin.h>
#if defined(__has_include)
#if __has_include(<sys/platform/x86.h>)
/* glibc's view of the CPU, filled in before main: reading it runs no
 * cpuid, and linking it brings no start-up constructor (libgcc's
 * __builtin_cpu_init does both). */
#include <sys/platform/x86.h>
#define SC_GLIBC_X86 1
#endif
#endif

/* Whether decode_tiles32 runs (CPUs with AVX-512F and BW); td_scode_simd
 * can turn it off. */
static atomic_int sc_x16 = -1;

static int x16_on(void)
{
	int v = atomic_load_explicit(&sc_x16, memory_order_relaxed);
	if (v < 0) {
#ifdef SC_GLIBC_X86
		int have = CPU_FEATURE_ACTIVE(AVX512F) && CPU_FEATURE_ACTIVE(AVX512BW);
#else
		__builtin_cpu_init();
		int have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
#endif
		/* from -1 only: a td_scode_simd(0) meanwhile stays */
		if (atomic_compare_exchange_strong_explicit(&sc_x16, &v, have, memory_order_relaxed, memory_order_relaxed))
			v = have;
	}
	return v;
}

#define X16 __attribute__((target("avx512f,avx512bw")))

/* What every vector step reads, built once per call. */
typedef struct x16_k {
	__m512i vstride, soff, one, k31, k7, k32, two, three, all1, vlast, vraw, vraw64, vc1, vc2, valpha,
		bswap, odd, even;
	__m512i limx[3][2], bmf[3][2]; /* td_sc_tab's plimx, pbmf */
	__m512i k12, k4;
	const int *T;        /* the contexts' fields, in 4-byte units */
	const int *all;      /* every context's symbols */
	const uint8_t *data; /* the coded bytes from the group's first tile */
} x16_k;

/* 16 streams (one a lane): their next bit (relative to k->data), context
 * and the lanes that met a look-up entry 0. */
typedef struct x16_s {
	__m512i bit, ctx;
	__mmask16 fail;
} x16_s;

/* Entry l (LUT_BITS + 1 <= l < LUT_BITS + 17) of each lane's context in t
 * (x16_k's limx or bmf): cof is the context times 16, hi the lanes of
 * contexts 2 and 3, c4 those of context 4. */
X16 static inline __attribute__((always_inline)) __m512i x16_look(const x16_k *k, const __m512i t[3][2], __m512i cof,
								   __mmask16 hi, __mmask16 c4, __m512i l)
{
	__m512i i = _mm512_add_epi32(cof, _mm512_sub_epi32(l, k->k12));
	__m512i r = _mm512_mask_mov_epi32(_mm512_permutex2var_epi32(t[0][0], i, t[0][1]), hi,
					  _mm512_permutex2var_epi32(t[1][0], i, t[1][1]));
	return _mm512_mask_mov_epi32(r, c4, _mm512_permutex2var_epi32(t[2][0], i, t[2][1]));
}

/* One sc_step on every lane of s; returns the 16 symbols. Each lane
 * follows both the short- and the long-code path and keeps the one its
 * look-up entry names (a lane never waits on another's branch); the next
 * context is the decoded symbol's class, as the code's group names it. */
X16 static inline __attribute__((always_inline)) __m512i x16_step(const x16_k *k, x16_s *s)
{
	__m512i byte = _mm512_min_epu32(_mm512_srli_epi32(s->bit, 3), k->vlast);
	__m512i xl = _mm512_i32gather_epi64(_mm512_castsi512_si256(byte), k->data, 1);
	__m512i xh = _mm512_i32gather_epi64(_mm512_extracti64x4_epi64(byte, 1), k->data, 1);
	__m512i sh = _mm512_and_si512(s->bit, k->k7);
	xl = _mm512_sllv_epi64(_mm512_shuffle_epi8(xl, k->bswap), _mm512_cvtepu32_epi64(_mm512_castsi512_si256(sh)));
	xh = _mm512_sllv_epi64(_mm512_shuffle_epi8(xh, k->bswap), _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(sh, 1)));
	__m512i top = _mm512_permutex2var_epi32(xl, k->odd, xh);
	__m512i cb = _mm512_mullo_epi32(s->ctx, k->vstride); /* lut is the context's first field */
	__m512i e = _mm512_i32gather_epi32(_mm512_add_epi32(cb, _mm512_srli_epi32(top, 32 - LUT_BITS)), k->T, 4);
	s->fail |= _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512());
	__m512i len = _mm512_and_si512(e, k->k31);
	__mmask16 lng = _mm512_cmpeq_epi32_mask(len, _mm512_setzero_si512()) & ~s->fail;
	__m512i idx = _mm512_srli_epi32(e, 8);
	if (lng) {
		/* the lane's context's 16 entries from LUT_BITS + 1 on: contexts
		 * 0-3 in limx[0] (0, 1) and limx[1] (2, 3), 4 in limx[2] */
		__mmask16 hi = _mm512_test_epi32_mask(s->ctx, k->two), c4 = _mm512_cmpeq_epi32_mask(s->ctx, k->k4);
		__m512i cof = _mm512_slli_epi32(s->ctx, 4);
		/* the prefix's codes have lengths lmin..lmax (<= lmin + 2) */
		__m512i lmin = _mm512_and_si512(idx, k->k31), lmax = _mm512_and_si512(_mm512_srli_epi32(e, 13), k->k31);
		__m512i l0 = x16_look(k, k->limx, cof, hi, c4, lmin);
		__m512i l1 = x16_look(k, k->limx, cof, hi, c4, _mm512_add_epi32(lmin, k->one));
		__m512i ll = _mm512_mask_add_epi32(lmin, _mm512_cmpge_epu32_mask(top, l0), lmin, k->one);
		ll = _mm512_mask_add_epi32(ll, _mm512_cmpge_epu32_mask(top, l1), ll, k->one);
		len = _mm512_mask_mov_epi32(len, lng, _mm512_min_epu32(ll, lmax));
		__m512i bmf = x16_look(k, k->bmf, cof, hi, c4, len);
		idx = _mm512_mask_mov_epi32(idx, lng, _mm512_add_epi32(_mm512_srlv_epi32(top, _mm512_sub_epi32(k->k32, len)), bmf));
	}
	idx = _mm512_add_epi32(idx, _mm512_permutexvar_epi32(s->ctx, k->soff));
	__m512i sym = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), (__mmask16)~s->fail, idx, k->all, 4);
	__mmask16 esc = _mm512_cmpeq_epi32_mask(sym, k->all1) & ~s->fail; /* ESC */
	if (esc) {
		/* rare symbols: raw_bits after the code */
		__m512i rl = _mm512_srlv_epi64(_mm512_sllv_epi64(xl, _mm512_cvtepu32_epi64(_mm512_castsi512_si256(len))), k->vraw64);
		__m512i rh = _mm512_srlv_epi64(_mm512_sllv_epi64(xh, _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(len, 1))),
					       k->vraw64);
		__m512i raw = _mm512_permutex2var_epi32(rl, k->even, rh);
		len = _mm512_mask_add_epi32(len, esc, len, k->vraw);
		sym = _mm512_mask_mov_epi32(sym, esc, _mm512_min_epu32(raw, k->valpha));
	}
	/* class: bit 0 below c1, 2 below c2, else 3 (also out of range) */
	__m512i g = _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(sym, k->vc2), k->three, k->two);
	s->ctx = _mm512_mask_mov_epi32(g, _mm512_cmplt_epu32_mask(sym, k->vc1), _mm512_and_si512(sym, k->one));
	s->bit = _mm512_add_epi32(s->bit, len);
	return sym;
}

/* Tiles t..t+31, all full, into out: sc_step on 16 streams at once, one a
 * vector lane, the windows, look-up entries and symbols read by gathers
 * (a long code's limits and bmf by permutes of registers), two such groups
 * in step so that one's gathers wait while the other's run. In the scalar loop a
 * mispredicted branch (on a long code or an escape, each about half of the
 * symbols) stalls every stream. Returns 0, or -1 with out partly written
 * when any tile does not decode exactly as sc_step would without its
 * search (a look-up entry 0, bad bounds, a stream not ending at its
 * tile's end): the caller then decodes these tiles with the scalar code,
 * which marks the bad ones. */
X16 static int decode_tiles32(const td_scode *c, const struct td_sc_tab *tb, uint64_t t, uint32_t *out)
{
	if (!tb || tb->bad || !tb->all)
		return -1;
	const unsigned n = 1u << c->tile_shift;
	const uint64_t b0 = td_pack_get(&c->tiles, t), bend = td_pack_get(&c->tiles, t + X16_TILES);
	const uint64_t last = c->data_bytes - 8; /* the last byte a window may start at */
	if (b0 > bend || bend > last * 8 || bend - (b0 & ~UINT64_C(7)) >= (UINT64_C(1) << 31))
		return -1;
	const uint64_t base = b0 >> 3;
	uint32_t st[X16_TILES], en[X16_TILES];
	uint64_t prev = b0;
	for (unsigned q = 0; q < X16_TILES; q++) {
		uint64_t e = td_pack_get(&c->tiles, t + q + 1);
		if (e < prev)
			return -1;
		st[q] = (uint32_t)(prev - base * 8);
		en[q] = (uint32_t)(e - base * 8);
		prev = e;
	}
	const uint64_t vl = last - base < INT32_MAX ? last - base : INT32_MAX;
	const x16_k k0 = {
		.vstride = _mm512_set1_epi32((int)(sizeof(struct sc_ctx) / 4)),
		.soff = _mm512_loadu_si512(tb->soff),
		.one = _mm512_set1_epi32(1),
		.k31 = _mm512_set1_epi32(31),
		.k7 = _mm512_set1_epi32(7),
		.k32 = _mm512_set1_epi32(32),
		.two = _mm512_set1_epi32(2),
		.k12 = _mm512_set1_epi32(LUT_BITS + 1),
		.k4 = _mm512_set1_epi32(4),
		.three = _mm512_set1_epi32(3),
		.all1 = _mm512_set1_epi32(-1),
		.vlast = _mm512_set1_epi32((int)vl),
		.vraw = _mm512_set1_epi32((int)c->raw_bits),
		.vraw64 = _mm512_set1_epi64(64 - (long long)c->raw_bits),
		.vc1 = _mm512_set1_epi32((int)c->c1),
		.vc2 = _mm512_set1_epi32((int)c->c2),
		.valpha = _mm512_set1_epi32((int)(uint32_t)c->alphabet),
		/* byte reversal within each 8-byte lane: the windows are big-endian */
		.bswap = _mm512_set_epi8(8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0,
					 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
					 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7),
		/* the high and the low halves of 16 windows (lanes 0-7, 8-15) */
		.odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1),
		.even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0),
		.T = (const int *)tb->ctx,
		.all = (const int *)tb->all,
		.data = c->data + base,
	};
	x16_k k = k0; /* k0 and the contexts' permute tables */
	for (unsigned q = 0; q < 3; q++)
		for (unsigned h = 0; h < 2; h++) {
			k.limx[q][h] = _mm512_loadu_si512(tb->plimx[q] + 16 * h);
			k.bmf[q][h] = _mm512_loadu_si512(tb->pbmf[q] + 16 * h);
		}
	x16_s s0 = { _mm512_loadu_si512(st), _mm512_set1_epi32(4), 0 }, s1 = s0;
	s1.bit = _mm512_loadu_si512(st + 16);
	/* 8 steps' symbols stored whole, then moved to their tiles (a
	 * scatter a step costs more on some CPUs); tiles hold a multiple of 8 */
	uint32_t stage[8][X16_TILES];
	for (unsigned j = 0; j < n; j += 8) {
		for (unsigned r = 0; r < 8; r++) {
			__m512i y0 = x16_step(&k, &s0), y1 = x16_step(&k, &s1);
			if (s0.fail | s1.fail)
				return -1; /* the scalar code decodes these tiles */
			_mm512_storeu_si512(stage[r], y0);
			_mm512_storeu_si512(stage[r] + 16, y1);
		}
		for (unsigned q = 0; q < X16_TILES; q++)
			for (unsigned r = 0; r < 8; r++)
				out[q * n + j + r] = stage[r][q];
	}
	if (_mm512_cmpneq_epi32_mask(s0.bit, _mm512_loadu_si512(en)) ||
	    _mm512_cmpneq_epi32_mask(s1.bit, _mm512_loadu_si512(en + 16)))
		return -1;
	return 0;
}
#endif

/* Tiles t..t+31, all full, into out: in two vector passes where the CPU
 * has them, else (or when they find a tile they do not decode) in groups of
 * four. */
static void decode_tiles32_any(const td_scode *c, const struct td_sc_tab *tb, uint64_t t, uint32_t *out)
{
#ifdef SC_X16
	if (x16_on() && decode_tiles32(c, tb, t, out) == 0)
		return;
#endif
	const unsigned n = 1u << c->tile_shift;
	for (unsigned q = 0; q < X16_TILES; q += 4)
		decode_tiles4(c, tb, t + q, out + q * n);
}

int td_scode_simd(int on)
{
#ifdef SC_X16
	if (!on) {
		atomic_store(&sc_x16, 0);
		return 0;
	}
	atomic_store(&sc_x16, -1);
	return x16_on();
#else
	(void)on;
	return 0;
#endif
}

/* Each thread's last decoded tile of two arrays (td_scode.slot), named by
 * its table's gen (unique, so never stale) and tile index. */
struct sc_slot {
	uint64_t gen, t, nt; /* tiles [t, t + nt) of the table named gen */
	uint64_t run;        /* tile groups met one after the other so far */
	const uint32_t *at;  /* where those tiles are: sym, or big */
	uint32_t *big;       /* X16_TILES tiles, malloc'd on first use */
	uint32_t sym[4 * TILE_MAX];
};
static _Thread_local struct sc_slot sc_tls[2];


#ifdef SC_X16
static pthread_key_t big_key;
static int big_key_ok;
static pthread_once_t big_once = PTHREAD_ONCE_INIT;

/* At thread exit: free the slots' vector buffers and forget what they held
 * (a later destructor that reads an array decodes it again). */
static void big_free(void *p)
{
	struct sc_slot *tls = p;
	for (unsigned k = 0; k < 2; k++) {
		free(tls[k].big);
		tls[k].big = NULL;
		tls[k].nt = 0;
	}
}

static void big_init(void)
{
	big_key_ok = pthread_key_create(&big_key, big_free) == 0;
}

/* The slot's buffer of X16_TILES full-size tiles (freed when the thread
 * ends), or NULL. */
static uint32_t *big_of(struct sc_slot *s)
{
	if (s->big)
		return s->big;
	pthread_once(&big_once, big_init);
	if (!big_key_ok || pthread_setspecific(big_key, sc_tls) != 0)
		return NULL;
	return s->big = malloc(X16_TILES * TILE_MAX * sizeof *s->big);
}
#endif

/* Tile t's symbols: from the thread's slot, or decoded into it. A reader
 * that has moved on to the next tile twice in a row gets the next one and
 * the three after it decoded in step (decode_tiles4, as fast as a
 * whole-array decode; before that, reads of small files that skip about
 * would waste the other three); one that then goes on through two more
 * such groups, where the CPU has vector passes, the next 32 at once
 * (decode_tiles32: about half the time of decode_tiles4 a symbol;
 * contrib/bench/NOTES.md, "Decoder"). */
static const uint32_t *tile_of(const td_scode *c, uint64_t t)
{
	const struct td_sc_tab *tb = tables(c);
	uint64_t gen = tb ? tb->gen : 0;
	struct sc_slot *s = &sc_tls[c->slot & 1];
	const unsigned shift = c->tile_shift;
	if (tb && s->gen == gen && t - s->t < s->nt)
		return s->at + ((t - s->t) << shift);
	s->run = tb && s->gen == gen && t == s->t + s->nt ? s->run + 1 : 0;
	uint32_t *big = NULL;
#ifdef SC_X16
	if (s->run >= 4 && t + X16_TILES <= c->n >> shift && x16_on())
		big = big_of(s);
#endif
	if (big) {
		decode_tiles32_any(c, tb, t, big);
		s->nt = X16_TILES;
		s->at = big;
	} else if (s->run >= 2 && t + 4 <= c->n >> shift) {
		decode_tiles4(c, tb, t, s->sym);
		s->nt = 4;
		s->at = s->sym;
	} else {
		decode_tile(c, tb, t, tile_count(c, t), s->sym);
		s->nt = 1;
		s->at = s->sym;
	}
	uint64_t again = 0;
	for (uint64_t k = t; tb && k < t + s->nt; k++) {
		uint64_t bit = UINT64_C(1) << (k & 63);
		if (atomic_fetch_or_explicit(&tb->seen[k >> 6], bit, memory_order_relaxed) & bit)
			again += tile_count(c, k);
	}
	if (again)
		atomic_fetch_add_explicit(&((td_scode *)c)->redecoded, again, memory_order_relaxed);
	s->gen = gen;
	s->t = t;
	return s->at;
}

uint64_t td_scode_get(const td_scode *c, uint64_t i)
{
	if (i >= c->n)
		return c->alphabet;
	return tile_of(c, i >> c->tile_shift)[i & ((UINT64_C(1) << c->tile_shift) - 1)];
}

void td_scode_range(const td_scode *c, uint64_t i, uint64_t count, uint64_t *out)
{
	const uint64_t mask = (UINT64_C(1) << c->tile_shift) - 1;
	while (count) {
		if (i >= c->n) {
			*out++ = c->alphabet;
			count--;
			continue;
		}
		const uint32_t *sym = tile_of(c, i >> c->tile_shift);
		uint64_t j = i & mask, k = tile_count(c, i >> c->tile_shift) - j;
		if (k > count)
			k = count;
		for (uint64_t x = 0; x < k; x++)
			out[x] = sym[j + x];
		out += k;
		i += k;
		count -= k;
	}
}

/* Tiles [t, end) into out, tile u's symbols at out + ((u - t0) << shift). */
static void decode_tiles_from(const td_scode *c, uint64_t t0, uint64_t t, uint64_t end, uint32_t *out)
{
	const struct td_sc_tab *tb = tables(c);
	uint64_t full = c->n >> c->tile_shift;
	if (end > c->ntiles)
		end = c->ntiles;
	if (full > end)
		full = end;
	for (; t + X16_TILES <= full; t += X16_TILES)
		decode_tiles32_any(c, tb, t, out + ((t - t0) << c->tile_shift));
	for (; t + 4 <= full; t += 4)
		decode_tiles4(c, tb, t, out + ((t - t0) << c->tile_shift));
	for (; t < end; t++)
		decode_tile(c, tb, t, tile_count(c, t), out + ((t - t0) << c->tile_shift));
}

void td_scode_decode_tiles(const td_scode *c, uint64_t t, uint64_t end, uint32_t *out)
{
	decode_tiles_from(c, 0, t, end, out);
}

void td_scode_decode_span(const td_scode *c, uint64_t t, uint64_t end, uint32_t *out)
{
	decode_tiles_from(c, t, t, end, out);
}

void td_scode_decode_all(const td_scode *c, uint32_t *out)
{
	td_scode_decode_tiles(c, 0, c->ntiles, out);
}

int td_scode_check(const td_scode *c)
{
	const struct td_sc_tab *tb = tables(c);
	if (!tb)
		return td_fail(TD_ENOMEM, "coded symbol array: decoding tables");
	if (tb->bad)
		return td_fail(TD_ECORRUPT, "coded symbol array: the code description does not decode");
	int err = td_pack_check(&c->tiles);
	if (err)
		return err;
	uint32_t sym[TILE_MAX];
	for (uint64_t t = 0; t < c->ntiles; t++) {
		uint64_t end = decode_tile(c, tb, t, tile_count(c, t), sym);
		if (end == UINT64_MAX || end != td_pack_get(&c->tiles, t + 1))
			return td_fail(TD_ECORRUPT, "coded symbol array: tile %llu does not decode",
				       (unsigned long long)t);
	}
	if (td_pack_get(&c->tiles, 0) != 0)
		return td_fail(TD_ECORRUPT, "coded symbol array: tile 0 does not start the data");
	return TD_OK;
}

/* ---- encoder ---- */

/* The bit writer: up to 63 bits wait in acc, whole 32-bit words go to a
 * staging block and the block to the buffer (one td_buf_put a few KiB, not
 * one a byte: the coder's loop is a tenth of a GPU build's CPU). */
#define BWR_STAGE 8192u
#define SC_AHEAD 16u
typedef struct bwr {
	td_buf *b;
	uint64_t acc, bits;
	unsigned n;  /* bits waiting in acc, below 32 between calls */
	unsigned sn; /* bytes staged */
	int err;
	uint8_t st[BWR_STAGE];
} bwr;

static void bwr_init(bwr *w, td_buf *b)
{
	w->b = b;
	w->acc = w->bits = 0;
	w->n = w->sn = 0;
	w->err = 0;
}

static void stage_out(bwr *w)
{
	if (w->sn && !w->err)
		w->err = td_buf_put(w->b, w->st, w->sn);
	w->sn = 0;
}

/* Append the low k (<= 32) bits of v, MSB-first. */
static inline void put(bwr *w, uint64_t v, unsigned k)
{
	if (k == 0)
		return;
	w->acc = (w->acc << k) | (v & ((UINT64_C(1) << k) - 1));
	w->n += k;
	w->bits += k;
	if (w->n >= 32) {
		uint32_t x = (uint32_t)(w->acc >> (w->n - 32));
		w->n -= 32;
		uint8_t *o = w->st + w->sn;
		o[0] = (uint8_t)(x >> 24);
		o[1] = (uint8_t)(x >> 16);
		o[2] = (uint8_t)(x >> 8);
		o[3] = (uint8_t)x;
		if ((w->sn += 4) == BWR_STAGE)
			stage_out(w);
	}
}

/* Pad to a whole byte with zero bits and hand every staged byte to the
 * buffer. */
static void put_flush(bwr *w)
{
	if (w->n & 7)
		put(w, 0, 8 - (w->n & 7));
	while (w->n >= 8) {
		w->st[w->sn++] = (uint8_t)(w->acc >> (w->n - 8));
		w->n -= 8;
		if (w->sn == BWR_STAGE)
			stage_out(w);
	}
	stage_out(w);
}

static void put_gamma(bwr *w, uint64_t v) /* v >= 1 */
{
	unsigned nb = bits_for(v);
	put(w, 0, nb - 1);
	for (unsigned k = nb; k > 0;) {
		unsigned step = k > 32 ? 32 : k;
		put(w, v >> (k - step), step);
		k -= step;
	}
}

static void put_rice(bwr *w, uint64_t g, unsigned k)
{
	for (uint64_t q = g >> k; q;) {
		unsigned step = q > 32 ? 32 : (unsigned)q;
		put(w, UINT32_MAX, step);
		q -= step;
	}
	put(w, 0, 1);
	put(w, g, k);
}

/* Symbols are counted in a dense table over the alphabet, or, for an
 * alphabet much larger than the array, over the distinct symbols found by
 * sorting a copy (then looked up by binary search). */
typedef struct sc_ids {
	uint32_t *uniq; /* NULL: dense, id = symbol */
	uint64_t m;     /* ids */
} sc_ids;

static int cmp_u32(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
	return (a > b) - (a < b);
}

static int ids_make(sc_ids *d, const uint32_t *v, uint64_t n, uint64_t alphabet)
{
	d->uniq = NULL;
	d->m = alphabet;
	if (alphabet <= 8 * n + (UINT64_C(1) << 20))
		return TD_OK;
	uint32_t *u = malloc((n ? n : 1) * sizeof *u);
	if (!u)
		return TD_ENOMEM;
	memcpy(u, v, n * sizeof *u);
	qsort(u, n, sizeof *u, cmp_u32);
	uint64_t m = 0;
	for (uint64_t i = 0; i < n; i++)
		if (m == 0 || u[m - 1] != u[i])
			u[m++] = u[i];
	d->uniq = u;
	d->m = m ? m : 1;
	return TD_OK;
}

static inline uint64_t ids_of(const sc_ids *d, uint32_t s)
{
	if (!d->uniq)
		return s;
	uint64_t lo = 0, hi = d->m;
	while (hi - lo > 1) {
		uint64_t mid = (lo + hi) / 2;
		if (d->uniq[mid] <= s)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

static inline uint32_t ids_sym(const sc_ids *d, uint64_t id)
{
	return d->uniq ? d->uniq[id] : (uint32_t)id;
}

typedef struct sc_sym {
	uint64_t w;   /* weight (count) */
	uint32_t s;   /* id (sc_ids), or ESC */
	uint16_t len;
	uint16_t g;   /* group: the symbol's class, or GROUP_ESC */
} sc_sym;

static int by_weight(const void *x, const void *y)
{
	const sc_sym *a = x, *b = y;
	return a->w < b->w ? -1 : a->w > b->w ? 1 : (a->s > b->s) - (a->s < b->s);
}

static int by_code(const void *x, const void *y)
{
	const sc_sym *a = x, *b = y;
	if (a->len != b->len)
		return a->len < b->len ? -1 : 1;
	if (a->g != b->g)
		return a->g < b->g ? -1 : 1;
	return (a->s > b->s) - (a->s < b->s);
}

/* Sort sym[0..m) by weight (code 0: by_weight's order) or by code
 * (1: by_code's); both orders are total (ids differ), so the one 64-bit
 * key sort (td_sort_keys) gives qsort's result where the fields fit it;
 * qsort itself where they do not or memory is short. */
static void sort_syms(sc_sym *sym, uint64_t m, int code)
{
	int fits = m < UINT32_MAX;
	for (uint64_t i = 0; i < m && fits && !code; i++)
		fits = sym[i].w <= UINT32_MAX;
	td_skey *k = fits ? malloc((m ? m : 1) * sizeof *k) : NULL;
	sc_sym *t = k ? malloc((m ? m : 1) * sizeof *t) : NULL;
	if (!k || !t) {
		free(k);
		free(t);
		qsort(sym, m, sizeof *sym, code ? by_code : by_weight);
		return;
	}
	for (uint64_t i = 0; i < m; i++)
		k[i] = (td_skey){ code ? (uint64_t)sym[i].len << 40 | (uint64_t)sym[i].g << 32 | sym[i].s
				       : sym[i].w << 32 | sym[i].s,
				  (uint32_t)i };
	int err = td_sort_keys(k, m);
	if (!err) {
		for (uint64_t i = 0; i < m; i++)
			t[i] = sym[k[i].id];
		memcpy(sym, t, m * sizeof *sym);
	} else
		qsort(sym, m, sizeof *sym, code ? by_code : by_weight);
	free(k);
	free(t);
}

/* Huffman code lengths of sym[0..m) (sorted by weight) into len, at most
 * TD_SC_MAXLEN bits: weights are halved until the code fits. */
static int huffman(sc_sym *sym, uint64_t m)
{
	if (m == 1) {
		sym[0].len = 1;
		return TD_OK;
	}
	uint64_t *w = malloc(2 * m * sizeof *w), *parent = malloc(2 * m * sizeof *parent);
	uint32_t *depth = malloc(2 * m * sizeof *depth);
	if (!w || !parent || !depth) {
		free(w);
		free(parent);
		free(depth);
		return TD_ENOMEM;
	}
	for (unsigned shift = 0;; shift++) {
		for (uint64_t i = 0; i < m; i++)
			w[i] = (sym[i].w >> shift) | 1; /* monotone: the order holds */
		uint64_t leaf = 0, node = m, made = m;
		for (; made < 2 * m - 1; made++) {
			uint64_t pick[2];
			for (int k = 0; k < 2; k++) {
				if (leaf < m && (node >= made || w[leaf] <= w[node]))
					pick[k] = leaf++;
				else
					pick[k] = node++;
			}
			w[made] = w[pick[0]] + w[pick[1]];
			parent[pick[0]] = parent[pick[1]] = made;
		}
		uint32_t maxd = 0;
		depth[2 * m - 2] = 0;
		for (uint64_t i = 2 * m - 2; i-- > 0;) {
			depth[i] = depth[parent[i]] + 1;
			if (i < m && depth[i] > maxd)
				maxd = depth[i];
		}
		if (maxd <= TD_SC_MAXLEN) {
			for (uint64_t i = 0; i < m; i++)
				sym[i].len = depth[i];
			break;
		}
	}
	free(w);
	free(parent);
	free(depth);
	return TD_OK;
}

/* Estimated bits of coding a context's n occurrences (sum of all[].w,
 * added in index order) with symbols of count >= t in the table and the rest
 * escaped; lg[i] = log2(n / all[i].w), computed once for every t. */
static double plan_cost(const sc_sym *all, const double *lg, double n, uint64_t m, uint64_t t, unsigned raw,
			uint64_t alphabet)
{
	double esc = 0, bits = 0, tab = 0;
	for (uint64_t i = 0; i < m; i++) {
		double c = (double)all[i].w;
		if (all[i].w >= t) {
			bits += c * lg[i];
			tab++;
		} else {
			esc += c;
		}
	}
	if (esc > 0) {
		bits += esc * (log2(n / esc) + raw);
		tab++;
	}
	return bits + tab * (log2((double)alphabet / tab) + 2.5);
}

/* Best Rice parameter for a list of gaps. */
static unsigned rice_k(const uint64_t *g, uint64_t m)
{
	unsigned best = 0;
	uint64_t best_bits = UINT64_MAX;
	for (unsigned k = 0; k < 32; k++) {
		uint64_t bits = 0;
		for (uint64_t i = 0; i < m && bits < best_bits; i++)
			bits += (g[i] >> k) + 1 + k;
		if (bits < best_bits) {
			best_bits = bits;
			best = k;
		}
	}
	return best;
}

/* Build a context's code from its counts cnt[0..ids->m) (replaced by the
 * encoding: length << 24 | code, 0 for an escaped symbol), write its
 * description, and return its escape in *esc (same form; 0 when none). */
static int build_ctx(uint32_t *cnt, const sc_ids *ids, const td_scode *shape, uint64_t alphabet, unsigned raw, bwr *d,
		     uint32_t *esc)
{
	uint64_t m = 0, nid = ids->m;
	*esc = 0;
	for (uint64_t s = 0; s < nid; s++)
		m += cnt[s] != 0;
	if (m == 0) {
		put(d, 0, 5);
		return TD_OK;
	}
	sc_sym *all = malloc((m + 1) * sizeof *all);
	uint64_t *gap = malloc((m + 1) * sizeof *gap);
	if (!all || !gap) {
		free(all);
		free(gap);
		return TD_ENOMEM;
	}
	m = 0;
	for (uint64_t s = 0; s < nid; s++) /* ids ascend with their symbols */
		if (cnt[s])
			all[m++] = (sc_sym){ cnt[s], (uint32_t)s, 0, (uint16_t)sc_class(shape, ids_sym(ids, s)) };
	double *lg = malloc(m * sizeof *lg), tot = 0;
	if (!lg) {
		free(all);
		free(gap);
		return TD_ENOMEM;
	}
	for (uint64_t i = 0; i < m; i++)
		tot += (double)all[i].w;
	for (uint64_t i = 0; i < m; i++)
		lg[i] = log2(tot / (double)all[i].w);
	uint64_t best_t = 1;
	double best = plan_cost(all, lg, tot, m, 1, raw, alphabet);
	for (uint64_t t = 2; t <= 8; t++) {
		double x = plan_cost(all, lg, tot, m, t, raw, alphabet);
		if (x < best) {
			best = x;
			best_t = t;
		}
	}
	free(lg);
	uint64_t k = 0, escw = 0;
	for (uint64_t i = 0; i < m; i++) {
		if (all[i].w >= best_t)
			all[k++] = all[i];
		else
			escw += all[i].w;
		cnt[all[i].s] = 0;
	}
	if (escw)
		all[k++] = (sc_sym){ escw, ESC, 0, GROUP_ESC };
	sort_syms(all, k, 0);
	int err = huffman(all, k);
	if (err)
		goto out;
	sort_syms(all, k, 1);
	unsigned maxlen = all[k - 1].len;
	for (uint64_t i = 0; i < k; i++)
		if (all[i].len > maxlen)
			maxlen = all[i].len;
	put(d, maxlen, 5);
	uint64_t ng[TD_SC_MAXLEN + 1][NGROUP];
	memset(ng, 0, sizeof ng);
	for (uint64_t i = 0; i < k; i++)
		ng[all[i].len][all[i].g]++;
	for (unsigned L = 1; L <= maxlen; L++)
		for (unsigned g = 0; g < NGROUP; g++)
			put_gamma(d, ng[L][g] + 1);
	uint64_t code = 0, i = 0;
	for (unsigned L = 1; L <= maxlen; L++) {
		uint64_t lfrom = i;
		for (unsigned g = 0; g < NGROUP; g++) {
			uint64_t from = i;
			for (uint64_t prev = UINT64_MAX; i < k && all[i].len == L && all[i].g == g; i++) {
				uint64_t v = all[i].s == ESC ? alphabet : ids_sym(ids, all[i].s);
				gap[i - from] = v - prev - 1;
				prev = v;
				uint32_t enc = (uint32_t)(L << 24 | (code + (i - lfrom)));
				if (all[i].s == ESC)
					*esc = enc;
				else
					cnt[all[i].s] = enc;
			}
			if (i > from) {
				unsigned rk = rice_k(gap, i - from);
				put(d, rk, 5);
				for (uint64_t j = 0; j < i - from; j++)
					put_rice(d, gap[j], rk);
			}
		}
		code = (code + (i - lfrom)) << 1;
	}
out:
	free(all);
	free(gap);
	return err;
}

int td_scode_encode(const uint32_t *v, uint64_t n, uint64_t alphabet, uint32_t c1, uint32_t c2,
		    unsigned tile_shift, td_buf *out)
{
	if (alphabet == 0 || alphabet > UINT32_MAX - 1 || c1 > c2 || c2 > alphabet || tile_shift < TD_SC_MINSHIFT ||
	    tile_shift > TD_SC_MAXSHIFT)
		return td_fail(TD_EINVAL, "coded symbol array: bad parameters");
	for (uint64_t i = 0; i < n; i++)
		if (v[i] >= alphabet)
			return td_fail(TD_EINVAL, "coded symbol array: symbol %u is not below %llu", v[i],
				       (unsigned long long)alphabet);
	unsigned raw = bits_for(alphabet - 1) ? bits_for(alphabet - 1) : 1;
	td_scode shape = { .c1 = c1, .c2 = c2 }; /* for sc_class */
	const uint64_t mask = (UINT64_C(1) << tile_shift) - 1, nt = (n + mask) >> tile_shift;
	sc_ids ids;
	int err = ids_make(&ids, v, n, alphabet);
	if (err)
		return err;
	const uint64_t m = ids.m;
	uint32_t *cnt = calloc(TD_SC_NCTX * m, sizeof *cnt);
	uint64_t *tiles = malloc((nt + 1) * sizeof *tiles);
	td_buf desc = { 0 }, data = { 0 };
	if (!cnt || !tiles) {
		err = TD_ENOMEM;
		goto out;
	}
	/* The count table is tens of MB on a large shard and its look-ups go
	 * where the symbols do: each symbol's slot is fetched SC_AHEAD symbols
	 * early (its context is the class of the symbol before, known), so the
	 * misses overlap (a dense table; the sorted ids' search has its own). */
	for (uint64_t i = 0; i < n; i++) {
		if (!ids.uniq && i + SC_AHEAD < n) {
			uint64_t j = i + SC_AHEAD;
			unsigned kj = (j & mask) ? sc_class(&shape, v[j - 1]) : 4u;
			__builtin_prefetch(&cnt[kj * m + v[j]], 1);
		}
		unsigned k = (i & mask) ? sc_class(&shape, v[i - 1]) : 4u;
		uint32_t *x = &cnt[k * m + ids_of(&ids, v[i])];
		*x += *x != UINT32_MAX;
	}
	uint32_t esc[TD_SC_NCTX];
	static _Thread_local bwr d, w; /* 8 KiB of staging each: not on the stack */
	bwr_init(&d, &desc);
	for (unsigned k = 0; k < TD_SC_NCTX && !err; k++)
		err = build_ctx(cnt + k * m, &ids, &shape, alphabet, raw, &d, &esc[k]);
	put_flush(&d);
	if (err || (err = d.err))
		goto out;
	bwr_init(&w, &data);
	for (uint64_t i = 0; i < n; i++) {
		if (!(i & mask))
			tiles[i >> tile_shift] = w.bits;
		if (!ids.uniq && i + SC_AHEAD < n) {
			uint64_t j = i + SC_AHEAD;
			unsigned kj = (j & mask) ? sc_class(&shape, v[j - 1]) : 4u;
			__builtin_prefetch(&cnt[kj * m + v[j]], 0);
		}
		unsigned k = (i & mask) ? sc_class(&shape, v[i - 1]) : 4u;
		uint32_t e = cnt[k * m + ids_of(&ids, v[i])];
		if (e) {
			put(&w, e & 0xffffffu, e >> 24);
		} else {
			put(&w, esc[k] & 0xffffffu, esc[k] >> 24);
			put(&w, v[i], raw);
		}
	}
	tiles[nt] = w.bits;
	put_flush(&w);
	if ((err = w.err))
		goto out;
	static const uint8_t zero[8];
	if ((err = td_buf_put(&data, zero, 8)) || (err = td_buf_align(&data, 8)) || (err = td_buf_align(&desc, 8)) ||
	    (err = td_buf_align(out, 8)))
		goto out;
	size_t hdr_at = out->len;
	uint8_t hdr[TD_SC_HDR] = { 0 };
	if ((err = td_buf_put(out, hdr, sizeof hdr)) || (err = td_pack_encode(tiles, nt + 1, out)) ||
	    (err = td_buf_align(out, 8)))
		goto out;
	uint64_t tb = out->len - hdr_at - TD_SC_HDR;
	uint64_t h64[2] = { n, alphabet };
	uint32_t h32[4] = { c1, c2, tile_shift, raw };
	uint64_t h3[3] = { tb, desc.len, data.len };
	memcpy(out->p + hdr_at, h64, sizeof h64);
	memcpy(out->p + hdr_at + 16, h32, sizeof h32);
	memcpy(out->p + hdr_at + 32, h3, sizeof h3);
	if ((err = td_buf_put(out, desc.p, desc.len)) == TD_OK)
		err = td_buf_put(out, data.p, data.len);
out:
	free(ids.uniq);
	free(cnt);
	free(tiles);
	td_buf_free(&desc);
	td_buf_free(&data);
	return err;
}
