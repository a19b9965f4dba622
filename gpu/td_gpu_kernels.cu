/* td_gpu_kernels: CUDA kernels for extract, count, search and the rule signatures. */
#include <cuda_runtime.h>

#include "td_err.h"
#include "td_gpu_dev.cuh"
#include "td_gpu_int.h"

/* The kernels read the archive sections exactly as stored: td_pack tiles are
 * decoded in place (td_pgets below mirrors td_pack_get bit for bit, including
 * "a corrupt tile reads as its base"), rules are found through RULE_GROUPS,
 * lengths through RULE_LEN / WORD_OFF / OTHER_OFF. Every index taken from the
 * data is bounds-checked; a violation marks the request corrupt and the host
 * lets the CPU engine produce the error it would give. */

#define TD_S_IFMT 0170000u
#define TD_S_IFDIR 0040000u
#define TD_S_IFREG 0100000u

#define FULL 0xffffffffu

typedef unsigned long long u64;

/* TD_HD functions run on the device; tests/gpu_emu.cu also runs them on the
 * host (defining TD_GPU_EMU and the td_emu_* warp hooks) to check the
 * kernels' logic against the CPU engine on machines without a GPU. */
#define TD_HD __host__ __device__

#ifdef __CUDA_ARCH__
#define TD_LDG(p) __ldg(p)
__device__ __forceinline__ uint32_t td_lane(void) { return threadIdx.x & 31; }
__device__ __forceinline__ uint64_t td_shfl(uint64_t v, uint32_t l) { return __shfl_sync(FULL, v, (int)l); }
__device__ __forceinline__ uint64_t td_shfl_up(uint64_t v, uint32_t o) { return __shfl_up_sync(FULL, v, o); }
__device__ __forceinline__ uint64_t td_shfl_xor(uint64_t v, uint32_t o) { return __shfl_xor_sync(FULL, v, (int)o); }
__device__ __forceinline__ bool td_any(bool p) { return __any_sync(FULL, p) != 0; }
__device__ __forceinline__ uint32_t td_ballot(bool p) { return __ballot_sync(FULL, p); }
__device__ __forceinline__ uint32_t td_ffs(uint32_t m) { return (uint32_t)__ffs((int)m); }
__device__ __forceinline__ uint32_t td_popc(uint32_t m) { return (uint32_t)__popc(m); }
__device__ __forceinline__ uint32_t td_popc64(uint64_t m) { return (uint32_t)__popcll(m); }
#else
#define TD_LDG(p) (*(p))
#ifdef TD_GPU_EMU
uint32_t td_lane(void);
uint64_t td_emu_exchange(uint64_t v, uint32_t src);
uint32_t td_ballot(bool p);
static inline uint64_t td_shfl(uint64_t v, uint32_t l) { return td_emu_exchange(v, l); }
static inline uint64_t td_shfl_up(uint64_t v, uint32_t o)
{
	return td_emu_exchange(v, td_lane() >= o ? td_lane() - o : td_lane());
}
static inline uint64_t td_shfl_xor(uint64_t v, uint32_t o) { return td_emu_exchange(v, td_lane() ^ o); }
static inline bool td_any(bool p) { return td_ballot(p) != 0; }
#else /* the host pass of a normal build: never called */
static inline uint32_t td_lane(void) { return 0; }
static inline uint64_t td_shfl(uint64_t v, uint32_t) { return v; }
static inline uint64_t td_shfl_up(uint64_t v, uint32_t) { return v; }
static inline uint64_t td_shfl_xor(uint64_t v, uint32_t) { return v; }
static inline bool td_any(bool p) { return p; }
static inline uint32_t td_ballot(bool p) { return p; }
#endif
static inline uint32_t td_ffs(uint32_t m) { return (uint32_t)__builtin_ffs((int)m); }
static inline uint32_t td_popc(uint32_t m) { return (uint32_t)__builtin_popcount(m); }
static inline uint32_t td_popc64(uint64_t m) { return (uint32_t)__builtin_popcountll(m); }
#endif

/* ---- packed arrays ---- */

TD_HD __forceinline__ uint64_t ldg64(const void *p)
{
	return (uint64_t)TD_LDG((const u64 *)p);
}

/* Value i of p (i < p.n required); same bits as td_pack_get. The data
 * pointer is 8-byte aligned and every section is followed by 16 bytes of
 * slack, so two aligned 8-byte loads replace the CPU's unaligned one. */
TD_HD __forceinline__ uint64_t td_pget(const td_pack &p, uint64_t i)
{
	uint64_t t = i / TD_TILE, j = i % TD_TILE;
	uint64_t h = ldg64(p.tiles + t);
	uint32_t w = TD_TILE_W(h);
	uint64_t v = TD_TILE_BASE(h) + ((p.slope & (0 - (uint64_t)TD_TILE_LIN(h))) * j >> 16);
	if (w == 0)
		return v;
	uint64_t start = ((uint64_t)TD_LDG(p.groups + t / TD_PACK_GROUP) + TD_TILE_REL(h)) * 16u;
	uint64_t bit = j * w;
	if (w > TD_PACK_MAXW || start + (bit >> 3) + 8 > p.datasize)
		return v;
	uint64_t bp = start * 8u + bit;
	const u64 *q = (const u64 *)p.data + (bp >> 6);
	uint32_t r = (uint32_t)(bp & 63);
	uint64_t x = (uint64_t)TD_LDG(q) >> r;
	if (r + w > 64)
		x |= (uint64_t)TD_LDG(q + 1) << (64 - r);
	return v + (x & ((UINT64_C(1) << w) - 1));
}

/* Checked access: out-of-range i sets *bad and reads 0. */
TD_HD __forceinline__ uint64_t td_pgets(const td_pack &p, uint64_t i, bool &bad)
{
	if (i >= p.n) {
		bad = true;
		return 0;
	}
	return td_pget(p, i);
}

/* Value readers for the searches below: a packed array from an offset, or
 * a flat one. */
struct td_at_pack {
	const td_pack &p;
	uint64_t off;
	TD_HD __forceinline__ uint64_t operator()(uint64_t i) const { return td_pget(p, off + i); }
};
struct td_at_flat {
	const uint64_t *a;
	TD_HD __forceinline__ uint64_t operator()(uint64_t i) const { return (uint64_t)TD_LDG((const u64 *)a + i); }
};

/* One step of the search for the last x in [lo, hi) with at(x) <= v
 * (values ascending, at(lo) <= v assumed): seven probes, loaded together,
 * narrow the range eightfold. Done when hi - lo == 1. */
template <class A> TD_HD __forceinline__ void td_bs8_step(const A &at, uint64_t &lo, uint64_t &hi, uint64_t v)
{
	const uint64_t n = hi - lo;
	uint64_t x[7];
	bool le[7];
#pragma unroll
	for (int j = 0; j < 7; j++) {
		x[j] = lo + n * (uint64_t)(j + 1) / 8;
		le[j] = x[j] == lo || at(x[j]) <= v;
	}
	int c = 0;
#pragma unroll
	for (int j = 0; j < 7; j++)
		c += le[j];
	uint64_t nlo = c ? x[c - 1] : lo, nhi = hi;
#pragma unroll
	for (int j = 0; j < 7; j++)
		if (j == c)
			nhi = x[j];
	lo = nlo;
	hi = nhi;
}

/* ---- grammar helpers ---- */

/* Expanded byte length of symbol s. */
TD_HD __forceinline__ uint64_t td_symlen(const td_gdev &d, uint64_t s, bool &bad)
{
	uint64_t w2 = 2 * d.nwords;
	if (s < w2) {
		uint64_t w = s >> 1;
		return td_pgets(d.word_off, w + 1, bad) - td_pgets(d.word_off, w, bad) + (s & 1);
	}
	s -= w2;
	if (s < d.nother)
		return td_pgets(d.other_off, s + 1, bad) - td_pgets(d.other_off, s, bad);
	s -= d.nother;
	if (s < d.nrules)
		return td_pgets(d.rule_len, s, bad);
	bad = true;
	return 0;
}

/* Rule r's right-hand side from its td_gdev.rrhs word w (r < d.nrules). */
TD_HD __forceinline__ bool td_rhs_word(const td_gdev &d, uint64_t w, uint64_t &first, uint32_t &len)
{
	first = w >> TD_RRHS_LENBITS;
	len = (uint32_t)(w & ((UINT64_C(1) << TD_RRHS_LENBITS) - 1));
	return len && first + len <= d.rule_syms.n;
}

/* The rrhs word of rule r, or 0 when there is none (the loads that take
 * it, issued beside the signature's, keep the walk's chain short). */
TD_HD __forceinline__ uint64_t td_rrhs_get(const td_gdev &d, uint64_t r)
{
	return d.rrhs && r < d.nrules ? ldg64(&d.rrhs[r]) : 0;
}

/* Right-hand side of rule r: symbols RULE_SYMS[first, first+len). w: its
 * rrhs word when the caller loaded it (td_rrhs_get), else 0. */
TD_HD __forceinline__ bool td_rhs(const td_gdev &d, uint64_t r, uint64_t &first, uint32_t &len,
				 uint64_t *sample = NULL, uint64_t w = 0)
{
	if (d.ngroups == 0 || r >= d.nrules)
		return false;
	if (!sample && d.rrhs)
		return td_rhs_word(d, w ? w : ldg64(&d.rrhs[r]), first, len);
	uint64_t lo = 0, hi = d.ngroups;
	if (d.rjt) { /* the groups of rules r >> shift and the next entry's */
		lo = TD_LDG(&d.rjt[r >> TD_RJT_SHIFT]);
		hi = (uint64_t)TD_LDG(&d.rjt[(r >> TD_RJT_SHIFT) + 1]) + 1;
	}
	while (hi - lo > 1) {
		uint64_t mid = (lo + hi) >> 1;
		if ((uint64_t)TD_LDG(&d.groups[mid].first_rule) <= r)
			lo = mid;
		else
			hi = mid;
	}
	uint64_t fr = TD_LDG(&d.groups[lo].first_rule);
	uint32_t l = TD_LDG(&d.groups[lo].len);
	uint64_t fs = (uint64_t)TD_LDG((const u64 *)&d.groups[lo].first_sym);
	if (fr > r || l == 0)
		return false;
	first = fs + (r - fr) * l;
	len = l;
	if (sample) { /* first RULE_SAMPLES index of a long rule (see td_format.h) */
		uint64_t per = ((uint64_t)l + (UINT64_C(1) << d.sample_shift) - 1) >> d.sample_shift;
		*sample = (uint64_t)TD_LDG((const u64 *)&d.groups[lo].first_sample) + (r - fr) * per;
	}
	return first + l <= d.rule_syms.n && first + l >= first;
}

/* Word signature bit of word w (64 * TD_MASK_W bits). */
TD_HD __forceinline__ uint32_t td_wbit(uint64_t w)
{
	return (uint32_t)((w * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - TD_MASK_LOG2));
}

TD_HD __forceinline__ bool td_mask_has(const td_gdev &d, uint64_t r, uint32_t bit)
{
	return (ldg64(&d.rule_mask[TD_MASK_W * r + (bit >> 6)]) >> (bit & 63)) & 1;
}

struct td_frame {
	uint64_t first;
	uint32_t len;
	uint32_t j;
};

/* ---- rule signatures (built once at open) ---- */

/* One pass for rule r: OR its children's signatures into its own. */
TD_HD void td_mask_rule(const td_gdev &d, uint64_t *mask, int *changed, uint64_t r)
{
	uint64_t first;
	uint32_t len;
	if (!td_rhs(d, r, first, len))
		return; /* corrupt rules are left empty; extract reports them */
	uint64_t w2 = 2 * d.nwords, t = w2 + d.nother;
	uint64_t m[TD_MASK_W];
	for (uint32_t k = 0; k < TD_MASK_W; k++)
		m[k] = 0;
	for (uint32_t j = 0; j < len; j++) {
		uint64_t c = td_pget(d.rule_syms, first + j);
		if (c < w2) {
			uint32_t b = td_wbit(c >> 1);
			m[b >> 6] |= UINT64_C(1) << (b & 63);
		} else if (c >= t && c - t < d.nrules) {
			const volatile uint64_t *cm = mask + TD_MASK_W * (c - t);
			for (uint32_t k = 0; k < TD_MASK_W; k++)
				m[k] |= cm[k];
		}
	}
	volatile uint64_t *mine = mask + TD_MASK_W * r;
	bool grew = false;
	for (uint32_t k = 0; k < TD_MASK_W; k++) {
		uint64_t o = mine[k];
		if ((m[k] | o) != o) {
			mine[k] = m[k] | o;
			grew = true;
		}
	}
	if (grew)
		*changed = 1;
}

/* ---- expansions of short rules (built once at open) ---- */

/* 1 if rule r's expansion is kept in d.rx_pool (at rx_off[r], rx_off[r+1] -
 * rx_off[r] bytes). */
TD_HD __forceinline__ bool td_rx_has(const td_gdev &d, uint64_t r)
{
	return d.rx_off && TD_LDG(&d.rx_off[r + 1]) > TD_LDG(&d.rx_off[r]);
}

/* Write rule r's expansion at pool + rx_off[r] (r kept, see td_rx_has);
 * *bad = 1 if the grammar does not add up to rx_off's length. */
TD_HD void td_rx_fill_rule(const td_gdev &d, uint8_t *pool, int *bad, uint64_t r)
{
	const uint64_t w2 = 2 * d.nwords, t = w2 + d.nother;
	uint64_t o = d.rx_off[r], n = d.rx_off[r + 1] - o, w = 0;
	td_frame st[TD_MAXDEPTH];
	uint32_t depth = 0;
	bool b = false;
	if (!td_rhs(d, r, st[0].first, st[0].len)) {
		*bad = 1;
		return;
	}
	st[0].j = 0;
	depth = 1;
	while (depth && !b) {
		td_frame &f = st[depth - 1];
		if (f.j == f.len) {
			depth--;
			continue;
		}
		uint64_t c = td_pget(d.rule_syms, f.first + f.j++);
		if (c >= t) {
			if (depth == TD_MAXDEPTH || c - t >= d.nrules || !td_rhs(d, c - t, st[depth].first, st[depth].len)) {
				b = true;
				break;
			}
			st[depth++].j = 0;
			continue;
		}
		const uint8_t *src;
		uint64_t a, e, sp = 0;
		if (c < w2) {
			a = td_pgets(d.word_off, c >> 1, b);
			e = td_pgets(d.word_off, (c >> 1) + 1, b);
			src = d.words;
			sp = c & 1;
		} else {
			a = td_pgets(d.other_off, c - w2, b);
			e = td_pgets(d.other_off, c - w2 + 1, b);
			src = d.other;
		}
		if (b || a > e || e > (c < w2 ? d.words_size : d.other_size) || w + (e - a) + sp > n) {
			b = true;
			break;
		}
		for (uint64_t x = a; x < e; x++)
			pool[o + w++] = src[x];
		if (sp)
			pool[o + w++] = (uint8_t)' ';
	}
	if (b || w != n)
		*bad = 1;
}

#ifndef TD_GPU_EMU /* tests run the bodies on the host */
__global__ void td_k_rx_fill(td_gdev d, uint8_t *pool, int *bad)
{
	uint64_t r = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (r < d.nrules && td_rx_has(d, r))
		td_rx_fill_rule(d, pool, bad, r);
}
#endif

/* ---- root symbol offsets (built once at open) ---- */

/* pos[k] = length of root symbol k, 0 past the last (td_gk_root_pos then
 * turns them into offsets). */
struct td_f_root_len {
	td_gdev d;
	uint64_t *pos;
	int *bad;
	TD_HD void operator()(uint64_t k) const
	{
		bool b = false;
		pos[k] = k < d.nroot ? td_symlen(d, td_pgets(d.root_syms, k, b), b) : 0;
		if (b)
			*bad = 1;
	}
};

extern "C" int td_gk_root_pos(const td_gdev *d, uint64_t *pos, int *bad, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	cudaError_t e = td_each(d->nroot + 1, td_f_root_len{*d, pos, bad}, s);
	if (e == cudaSuccess)
		e = td_dscan(pos, pos, d->nroot + 1, s);
	return (int)e;
}

#ifndef TD_GPU_EMU /* tests run the bodies on the host */
__global__ void td_k_masks(td_gdev d, uint64_t *mask, int *changed)
{
	uint64_t r = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (r < d.nrules)
		td_mask_rule(d, mask, changed, r);
}
#endif

/* ---- extract ---- */

/* With root_pos: root symbol k holds corpus offset v unless its file ends
 * first; then its symbol and v's offset inside it. */
TD_HD __forceinline__ bool td_root_at(const td_gdev &d, uint64_t k, uint64_t v, uint64_t &sym, uint64_t &inner)
{
	const td_at_flat at = {d.root_pos};
	uint64_t p0 = at(k);
	if (v < p0 || v >= at(k + 1))
		return false;
	sym = td_pget(d.root_syms, k);
	inner = v - p0;
	return true;
}

/* Extraction of one output chunk is a resumable state machine: one call of
 * td_x_step() does one bounded step (a binary-search probe, one length
 * look-up, one rule entered, one token copied) and the warp loop in
 * td_extract_warp() votes after every step. Lanes seek and walk
 * independently, but their paths reconverge once per step: a plain loop
 * nest with early exits let divergent lanes run one after another to the
 * end. The steps mirror td_extract: seek with ROOT_SAMPLES (binary search
 * restricted to the file's root range) and RULE_LEN, descend root -> rule
 * -> token with a stack of at most TD_MAXDEPTH frames (RULE_SAMPLES inside
 * long rules, like td_walk_seek), then emit tokens left to right. */
enum {
	TD_X_PBS,   /* search of root_pos (td_gdev) over the file's root range */
	TD_X_RBS,   /* binary search of ROOT_SAMPLES */
	TD_X_RSCAN, /* root elements from the sample to the one holding gpos */
	TD_X_RULE,  /* enter rule sym (or start emitting token sym) */
	TD_X_SBS,   /* binary search of a long rule's RULE_SAMPLES */
	TD_X_CSCAN, /* the rule's children up to the one holding inner */
	TD_X_EMIT,  /* copy token sym from byte inner, then step to the next */
	TD_X_DOWN,  /* descend to the leftmost token of sym */
	TD_X_DONE
};

#define TD_X_SCANW 2u /* root elements looked at per TD_X_RSCAN step */

struct td_xs {
	uint8_t *dst;
	uint64_t n, done;
	uint64_t gpos, pos;     /* target corpus offset; start of root element k */
	uint64_t k, rlo, rhi;   /* root element; the file's root range */
	uint64_t lo, hi;        /* binary search bounds */
	uint64_t sym, inner;    /* current symbol; byte offset inside it */
	uint64_t first, fsample;
	uint32_t len, j, depth;
	int phase, err;
	td_frame st[TD_MAXDEPTH];
};

TD_HD __forceinline__ void td_x_fail(td_xs &s)
{
	s.err = TD_ECORRUPT;
	s.phase = TD_X_DONE;
}

/* Set s up to copy n bytes of entry e's text from file offset foff to dst. */
TD_HD void td_x_init(const td_gdev &d, td_xs &s, uint32_t e, uint64_t foff, uint64_t n, uint8_t *dst)
{
	bool bad = false;
	s.dst = dst;
	s.n = n;
	s.done = 0;
	s.depth = 0;
	s.err = TD_OK;
	s.phase = TD_X_RBS;
	uint64_t gstart = td_pgets(d.e_gstart, e, bad);
	s.rlo = td_pgets(d.e_root, e, bad);
	s.rhi = td_pgets(d.e_root, (uint64_t)e + 1, bad);
	if (bad || s.rlo >= s.rhi || s.rhi > d.root_syms.n || d.sample_shift >= 64) {
		td_x_fail(s);
		return;
	}
	if (d.root_pos) {
		s.lo = s.rlo;
		s.hi = s.rhi;
		s.gpos = TD_LDG((const u64 *)d.root_pos + s.rlo) + foff;
		s.phase = TD_X_PBS;
		return;
	}
	s.pos = gstart;
	s.gpos = gstart + foff;
	s.lo = s.rlo >> d.sample_shift;
	s.hi = ((s.rhi - 1) >> d.sample_shift) + 1;
	if (s.hi > d.root_samples.n)
		td_x_fail(s);
}

/* One step of s (s.phase != TD_X_DONE). */
TD_HD void td_x_step(const td_gdev &d, td_xs &s)
{
	const uint64_t w2 = 2 * d.nwords, t = w2 + d.nother, sh = d.sample_shift;
	bool bad = false;
	if (s.phase == TD_X_PBS) {
		const td_at_flat at = {d.root_pos};
		if (s.hi - s.lo > 1)
			return td_bs8_step(at, s.lo, s.hi, s.gpos);
		s.k = s.lo;
		if (!td_root_at(d, s.k, s.gpos, s.sym, s.inner))
			return td_x_fail(s);
		s.phase = TD_X_RULE;
		return;
	}
	if (s.phase == TD_X_RBS) {
		/* last sample at or before gpos, not before the file's start:
		 * two levels of the binary search per step, their three
		 * probes loaded together (same path as one level at a time) */
		if (s.hi - s.lo > 1) {
			uint64_t mid = (s.lo + s.hi) >> 1, ml = (s.lo + mid) >> 1, mr = (mid + s.hi) >> 1;
			uint64_t v = td_pget(d.root_samples, mid);
			uint64_t vl = mid - s.lo > 1 ? td_pget(d.root_samples, ml) : 0;
			uint64_t vr = s.hi - mid > 1 ? td_pget(d.root_samples, mr) : 0;
			if (v <= s.gpos) {
				s.lo = mid;
				if (s.hi - mid > 1) {
					if (vr <= s.gpos)
						s.lo = mr;
					else
						s.hi = mr;
				}
			} else {
				s.hi = mid;
				if (mid - s.lo > 1) {
					if (vl <= s.gpos)
						s.lo = ml;
					else
						s.hi = ml;
				}
			}
			return;
		}
		s.k = s.lo << sh;
		if (s.k < s.rlo)
			s.k = s.rlo; /* s.pos is the file's start */
		else
			s.pos = td_pget(d.root_samples, s.lo);
		s.phase = TD_X_RSCAN;
		return;
	}
	if (s.phase == TD_X_RSCAN) {
		/* TD_X_SCANW root elements per step, loaded together, then
		 * taken one by one as a one-element step would */
		uint64_t sy[TD_X_SCANW], l[TD_X_SCANW];
		bool lb[TD_X_SCANW];
#pragma unroll
		for (uint32_t u = 0; u < TD_X_SCANW; u++) {
			lb[u] = false;
			sy[u] = l[u] = 0;
			if (s.k + u < s.rhi) {
				sy[u] = td_pget(d.root_syms, s.k + u);
				l[u] = td_symlen(d, sy[u], lb[u]);
			}
		}
#pragma unroll
		for (uint32_t u = 0; u < TD_X_SCANW; u++) {
			if (s.k >= s.rhi || lb[u])
				return td_x_fail(s);
			if (s.gpos < s.pos + l[u]) {
				s.sym = sy[u];
				s.inner = s.gpos - s.pos;
				s.phase = TD_X_RULE;
				return;
			}
			s.pos += l[u];
			s.k++;
		}
		return;
	}
	if (s.phase == TD_X_RULE) {
		if (s.sym < t || td_rx_has(d, s.sym - t)) {
			s.phase = TD_X_EMIT;
			return;
		}
		if (s.depth == TD_MAXDEPTH || !td_rhs(d, s.sym - t, s.first, s.len, &s.fsample))
			return td_x_fail(s);
		s.j = 0;
		s.phase = TD_X_CSCAN;
		if (s.len > (UINT32_C(1) << sh)) {
			/* long rule: binary search of its offset samples */
			uint64_t per = ((uint64_t)s.len + (UINT64_C(1) << sh) - 1) >> sh;
			if (s.fsample + per > d.rule_samples.n || s.fsample + per < s.fsample)
				return td_x_fail(s);
			s.lo = 0;
			s.hi = per;
			s.phase = TD_X_SBS;
		}
		return;
	}
	if (s.phase == TD_X_SBS) {
		if (s.hi - s.lo > 1) {
			uint64_t mid = (s.lo + s.hi) >> 1;
			if (td_pget(d.rule_samples, s.fsample + mid) <= s.inner)
				s.lo = mid;
			else
				s.hi = mid;
			return;
		}
		uint64_t base = td_pget(d.rule_samples, s.fsample + s.lo);
		if (base > s.inner)
			return td_x_fail(s);
		s.inner -= base;
		s.j = (uint32_t)(s.lo << sh);
		s.phase = TD_X_CSCAN;
		return;
	}
	if (s.phase == TD_X_CSCAN) {
		if (s.j >= s.len)
			return td_x_fail(s);
		uint64_t c = td_pget(d.rule_syms, s.first + s.j);
		uint64_t l = td_symlen(d, c, bad);
		if (bad)
			return td_x_fail(s);
		if (s.inner < l) {
			td_frame &f = s.st[s.depth++];
			f.first = s.first;
			f.len = s.len;
			f.j = s.j;
			s.sym = c;
			s.phase = TD_X_RULE;
		} else {
			s.inner -= l;
			s.j++;
		}
		return;
	}
	if (s.phase == TD_X_DOWN) {
		if (s.sym >= t && !td_rx_has(d, s.sym - t)) {
			uint64_t first;
			uint32_t len;
			if (s.depth == TD_MAXDEPTH || !td_rhs(d, s.sym - t, first, len))
				return td_x_fail(s);
			td_frame &f = s.st[s.depth++];
			f.first = first;
			f.len = len;
			f.j = 0;
			s.sym = td_pget(d.rule_syms, first);
			return;
		}
		s.phase = TD_X_EMIT;
	}
	/* TD_X_EMIT: token tok (or a kept rule's expansion) from byte inner. The next symbol (pop
	 * finished frames, step right; TD_X_DOWN descends) is fetched first so
	 * its loads overlap the token's; it only counts if bytes remain. */
	const uint64_t tok = s.sym;
	bool nfail = false;
	for (;;) {
		if (s.depth == 0) {
			if (++s.k >= s.rhi)
				nfail = true;
			else
				s.sym = td_pget(d.root_syms, s.k);
			break;
		}
		td_frame &f = s.st[s.depth - 1];
		if (++f.j < f.len) {
			s.sym = td_pget(d.rule_syms, f.first + f.j);
			break;
		}
		s.depth--;
	}
	const uint8_t *src;
	uint64_t a, b, sp;
	if (tok < w2) {
		a = td_pgets(d.word_off, tok >> 1, bad);
		b = td_pgets(d.word_off, (tok >> 1) + 1, bad);
		if (bad || a > b || b > d.words_size || b - a > TD_MAXTOK)
			return td_x_fail(s);
		src = d.words;
		sp = tok & 1;
	} else if (tok >= t) { /* td_rx_has */
		a = TD_LDG(&d.rx_off[tok - t]);
		b = TD_LDG(&d.rx_off[tok - t + 1]);
		src = d.rx_pool;
		sp = 0;
	} else {
		a = td_pgets(d.other_off, tok - w2, bad);
		b = td_pgets(d.other_off, tok - w2 + 1, bad);
		if (bad || a > b || b > d.other_size || b - a > TD_MAXTOK + 1)
			return td_x_fail(s);
		src = d.other;
		sp = 0;
	}
	uint64_t tl = b - a + sp;
	if (s.inner >= tl)
		return td_x_fail(s);
	uint64_t m = tl - s.inner < s.n - s.done ? tl - s.inner : s.n - s.done;
	uint64_t cb = b - a > s.inner ? b - a - s.inner : 0; /* bytes before the space */
	if (cb > m)
		cb = m;
	const uint8_t *p = src + a + s.inner;
	uint8_t *q = s.dst + s.done;
	for (uint64_t x = 0; x < cb; x++)
		q[x] = TD_LDG(p + x);
	if (m > cb)
		q[cb] = (uint8_t)' ';
	s.done += m;
	if (s.done == s.n) {
		s.phase = TD_X_DONE;
		return;
	}
	if (nfail)
		return td_x_fail(s);
	s.inner = 0;
	s.phase = TD_X_DOWN;
}

/* The request that work unit u belongs to: the last one whose first unit
 * (warp0 when by_warp, else item0) is <= u; both are ascending. */
TD_HD uint32_t td_gx_owner(const td_gx_req *req, uint32_t nreq, uint32_t u, int by_warp)
{
	uint32_t lo = 0, hi = nreq;
	while (hi - lo > 1) {
		uint32_t mid = (lo + hi) >> 1;
		if ((by_warp ? req[mid].warp0 : req[mid].item0) <= u)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* Whole warp: every lane calls this with its work item (items >= item_end
 * idle). One item per d.xchunk (default TD_GX_CHUNK) bytes of output; the items of one request
 * are adjacent, so a long read is extracted by a whole warp (each lane
 * seeks to its own chunk) while short reads pack 32 requests into a warp. */
TD_HD void td_extract_warp(const td_gdev &d, const td_gx_req *req, uint32_t nreq, uint32_t item_end, uint32_t item,
			   uint8_t *out, td_gx_res *res)
{
	td_xs s;
	s.phase = TD_X_DONE;
	s.err = TD_OK;
	uint32_t lo = 0;
	if (item < item_end) {
		lo = td_gx_owner(req, nreq, item, 0);
		const td_gx_req q = req[lo];
		uint32_t c = item - q.item0;
		int err = TD_OK;
		uint64_t got = 0;
		if (q.file >= d.nentries) {
			err = TD_EINVAL;
		} else {
			uint32_t mode = (uint32_t)td_pget(d.e_mode, q.file);
			if ((mode & TD_S_IFMT) == TD_S_IFDIR) {
				err = TD_EISDIR;
			} else {
				uint64_t size = td_pget(d.e_size, q.file);
				if (q.off < size)
					got = size - q.off < q.len ? size - q.off : q.len;
			}
		}
		if (c == 0) {
			res[lo].got = (uint32_t)got;
			if (err)
				res[lo].err = err;
		}
		uint64_t chunk = d.xchunk ? d.xchunk : TD_GX_CHUNK;
		uint64_t b0 = (uint64_t)c * chunk;
		if (!err && b0 < got) {
			uint64_t b1 = b0 + chunk < got ? b0 + chunk : got;
			td_x_init(d, s, q.file, q.off + b0, b1 - b0, out + q.outoff + b0);
		}
	}
	while (td_any(s.phase != TD_X_DONE))
		if (s.phase != TD_X_DONE)
			td_x_step(d, s);
	if (s.err)
		res[lo].err = s.err;
}

/* ---- warp helpers ---- */

TD_HD __forceinline__ uint64_t td_warp_sum(uint64_t v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += td_shfl_xor(v, o);
	return v;
}

/* Inclusive prefix sum across the warp. */
TD_HD __forceinline__ uint64_t td_warp_scan(uint64_t v, uint32_t lane)
{
	for (int o = 1; o < 32; o <<= 1) {
		uint64_t u = td_shfl_up(v, (uint32_t)o);
		if (lane >= (uint32_t)o)
			v += u;
	}
	return v;
}

/* ---- cooperative extract: one warp per long read ----
 *
 * The step machine above gives each lane its own piece of a read, and the
 * lanes of a warp wait for each other at every step (different phases,
 * token lengths and depths). For a long read the warp instead walks the
 * grammar together: it seeks once (32 samples or 32 symbols looked at per
 * step, a prefix sum across the lanes finds the one holding the offset),
 * then takes the symbols that follow 32 at a time, lane i the i-th: their
 * lengths' prefix sum places each one in the output, terminals and kept
 * rules are copied by all lanes together (byte p of the run by lane
 * p % 32: one 32-byte store per round), and the first rule that is not kept
 * is descended into depth-first. The stack of rule frames is spread over
 * the lanes (frame f in lane f % 32). Same results as td_extract; a grammar
 * that does not add up gives TD_ECORRUPT (the host asks the CPU engine). */

/* A symbol as the cooperative walk copies it: a terminal's bytes (and its
 * space) or a kept rule's expansion at src, or a rule to descend into. */
struct td_xc_sym {
	const uint8_t *src;
	uint64_t len;    /* bytes it expands to */
	uint32_t tl;     /* bytes at src (len - 1 when a ' ' follows them) */
	bool walk;       /* a rule that is not kept */
};

TD_HD __forceinline__ void td_xc_load(const td_gdev &d, uint64_t c, td_xc_sym &y, bool &bad)
{
	const uint64_t w2 = 2 * d.nwords, t = w2 + d.nother;
	uint64_t a = 0, b = 0, sp = 0;
	y.walk = false;
	y.src = NULL;
	if (c < w2) {
		a = td_pgets(d.word_off, c >> 1, bad);
		b = td_pgets(d.word_off, (c >> 1) + 1, bad);
		if (a > b || b > d.words_size || b - a > TD_MAXTOK)
			bad = true;
		y.src = d.words + a;
		sp = c & 1;
	} else if (c < t) {
		a = td_pgets(d.other_off, c - w2, bad);
		b = td_pgets(d.other_off, c - w2 + 1, bad);
		if (a > b || b > d.other_size || b - a > TD_MAXTOK + 1)
			bad = true;
		y.src = d.other + a;
	} else if (c - t < d.nrules && td_rx_has(d, c - t)) {
		a = TD_LDG(&d.rx_off[c - t]);
		b = TD_LDG(&d.rx_off[c - t + 1]);
		y.src = d.rx_pool + a;
	} else if (c - t < d.nrules) {
		y.walk = true;
		y.len = td_pgets(d.rule_len, c - t, bad);
		y.tl = 0;
		return;
	} else {
		bad = true;
	}
	if (bad)
		a = b = sp = 0;
	y.tl = (uint32_t)(b - a);
	y.len = (b - a) + sp;
}

/* Copy B bytes of items spread over the lanes to dst: the lane holding
 * byte p of the run is the first whose incl (bytes of the items up to and
 * including its own, non-decreasing across lanes, capped at B) exceeds p;
 * that byte is item byte p + base of its lane (base = the bytes it skips
 * less those before it), src[that] or ' ' past tl. Whole warp. */
TD_HD void td_xc_copy(const uint8_t *src, uint32_t tl, int64_t base, uint32_t incl, uint32_t B, uint8_t *dst)
{
	const uint32_t lane = td_lane();
	const uint64_t sv = (uint64_t)(uintptr_t)src;
	for (uint32_t r = 0; r < B; r += 32) {
		uint32_t p = r + lane, i = 0;
		for (uint32_t st = 16; st; st >>= 1)
			if ((uint32_t)td_shfl(incl, i + st - 1) <= p)
				i += st;
		const uint8_t *s = (const uint8_t *)(uintptr_t)td_shfl(sv, i);
		uint32_t l = (uint32_t)td_shfl(tl, i);
		int64_t q = (int64_t)p + (int64_t)td_shfl((uint64_t)base, i);
		if (p < B)
			dst[p] = (uint64_t)q < l ? TD_LDG(s + q) : (uint8_t)' ';
	}
}

/* Last index x in [lo, hi) with at(x) <= v, lo when there is none
 * (values ascending): 32 probes a step. Whole warp. */
template <class A> TD_HD __forceinline__ uint64_t td_xc_search(const A &at, uint64_t lo, uint64_t hi, uint64_t v)
{
	const uint32_t lane = td_lane();
	while (hi - lo > 1) {
		uint64_t step = (hi - lo - 1 + 31) / 32, x = lo + 1 + lane * step;
		uint32_t c = td_popc(td_ballot(x < hi && at(x) <= v));
		if (c == 0)
			return lo;
		uint64_t nh = lo + 1 + c * step;
		lo = lo + 1 + (c - 1) * step;
		if (nh < hi)
			hi = nh;
	}
	return lo;
}

/* Among symbols [at, end) of p (at < end), starting at byte pos of the
 * run, the one holding byte v >= pos: its index (*at), symbol and offset
 * inside it. false when the symbols end first or one is bad. Whole warp. */
TD_HD __forceinline__ bool td_xc_find(const td_gdev &d, const td_pack &p, uint64_t &at, uint64_t end, uint64_t pos,
				      uint64_t v, uint64_t &sym, uint64_t &inner)
{
	const uint32_t lane = td_lane();
	for (;;) {
		bool bad = false, ok = at + lane < end;
		uint64_t c = ok ? td_pget(p, at + lane) : 0;
		uint64_t l = ok ? td_symlen(d, c, bad) : 0;
		if (td_any(bad))
			return false;
		uint64_t incl = td_warp_scan(l, lane);
		uint32_t m = td_ballot(ok && pos + incl > v);
		if (m) {
			uint32_t f = td_ffs(m) - 1;
			sym = td_shfl(c, f);
			inner = v - pos - (td_shfl(incl, f) - td_shfl(l, f));
			at += f;
			return true;
		}
		if (end - at <= 32)
			return false;
		pos += td_shfl(incl, 31);
		at += 32;
	}
}

#define TD_XC_FRAMES 64u /* the root frame and 63 rule frames */

/* The warp's frame stack: frame f is (at, end) in lane f % 32, slot f / 32. */
struct td_xc_stack {
	uint64_t at0, end0, at1, end1;
	uint32_t n;
};

TD_HD __forceinline__ bool td_xc_push(td_xc_stack &k, uint64_t at, uint64_t end)
{
	if (k.n == TD_XC_FRAMES)
		return false;
	if (td_lane() == (k.n & 31)) {
		if (k.n < 32) {
			k.at0 = at;
			k.end0 = end;
		} else {
			k.at1 = at;
			k.end1 = end;
		}
	}
	k.n++;
	return true;
}

/* Warp w (< the warps of the warp-walked requests, see "Work units" in td_gpu_int.h), whole
 * warp: the d.xseg bytes of its request it writes. */
TD_HD void td_xc_warp(const td_gdev &d, const td_gx_req *req, uint32_t nreq, uint32_t w, uint8_t *out, td_gx_res *res)
{
	const uint32_t lane = td_lane();
	const uint64_t w2 = 2 * d.nwords, t = w2 + d.nother, sh = d.sample_shift;
	const uint32_t ri = td_gx_owner(req, nreq, w, 1);
	const td_gx_req q = req[ri];
	const uint64_t seg = d.xseg ? d.xseg : TD_GX_SEG, b0 = (uint64_t)(w - q.warp0) * seg;
	int err = TD_OK;
	uint64_t n = 0;
	if (q.file >= d.nentries) {
		err = TD_EINVAL;
	} else if (((uint32_t)td_pget(d.e_mode, q.file) & TD_S_IFMT) == TD_S_IFDIR) {
		err = TD_EISDIR;
	} else {
		uint64_t size = td_pget(d.e_size, q.file);
		if (q.off < size)
			n = size - q.off < q.len ? size - q.off : q.len;
	}
	if (lane == 0 && b0 == 0) {
		res[ri].got = (uint32_t)n;
		if (err)
			res[ri].err = err;
	}
	if (err || b0 >= n)
		return;
	n = n - b0 < seg ? n - b0 : seg; /* this warp's bytes */
	uint8_t *dst = out + q.outoff + b0;
	bool bad = false;
	uint64_t gstart = td_pgets(d.e_gstart, q.file, bad);
	uint64_t rlo = td_pgets(d.e_root, q.file, bad), rhi = td_pgets(d.e_root, (uint64_t)q.file + 1, bad);
	uint64_t target = gstart + q.off + b0;
	td_xc_stack k = {0, 0, 0, 0, 0};
	uint64_t sym = 0, inner = 0, done = 0;
	if (bad || rlo >= rhi || rhi > d.root_syms.n || sh >= 64 || ((rhi - 1) >> sh) + 1 > d.root_samples.n)
		goto fail;
	{
		/* the root element holding the offset: root_pos, or samples
		 * then symbols */
		uint64_t at;
		if (d.root_pos) {
			const td_at_flat rp = {d.root_pos};
			target += rp(rlo) - gstart;
			at = td_xc_search(rp, rlo, rhi, target);
			if (!td_root_at(d, at, target, sym, inner))
				goto fail;
		} else {
			uint64_t s0 = td_xc_search(td_at_pack{d.root_samples, 0}, rlo >> sh, ((rhi - 1) >> sh) + 1, target);
			uint64_t pos = gstart;
			at = s0 << sh;
			if (at < rlo)
				at = rlo;
			else
				pos = td_pget(d.root_samples, s0);
			if (pos > target || !td_xc_find(d, d.root_syms, at, rhi, pos, target, sym, inner))
				goto fail;
		}
		td_xc_push(k, at + 1, rhi);
	}
	/* down to the terminal or kept rule holding it */
	while (sym >= t && !td_rx_has(d, sym - t)) {
		uint64_t first, fs, at = 0;
		uint32_t len;
		if (!td_rhs(d, sym - t, first, len, &fs))
			goto fail;
		if (len > (UINT32_C(1) << sh)) {
			uint64_t per = ((uint64_t)len + (UINT64_C(1) << sh) - 1) >> sh;
			if (fs + per > d.rule_samples.n || fs + per < fs)
				goto fail;
			uint64_t x = td_xc_search(td_at_pack{d.rule_samples, fs}, 0, per, inner);
			uint64_t base = td_pget(d.rule_samples, fs + x);
			if (base > inner)
				goto fail;
			inner -= base;
			at = x << sh;
		}
		at += first;
		if (!td_xc_find(d, d.rule_syms, at, first + len, 0, inner, sym, inner) ||
		    !td_xc_push(k, at + 1, first + len))
			goto fail;
	}
	{
		td_xc_sym y;
		td_xc_load(d, sym, y, bad);
		if (bad || y.walk || inner >= y.len)
			goto fail;
		done = y.len - inner < n ? y.len - inner : n;
		td_xc_copy(y.src, y.tl, (int64_t)inner, (uint32_t)done, (uint32_t)done, dst);
	}
	/* the symbols after it, 32 at a time, depth-first */
	while (done < n) {
		if (k.n == 0)
			goto fail; /* the file's root range ends first */
		uint32_t f = k.n - 1, fl = f & 31;
		uint64_t at = td_shfl(f < 32 ? k.at0 : k.at1, fl), end = td_shfl(f < 32 ? k.end0 : k.end1, fl);
		if (at >= end) {
			k.n--;
			continue;
		}
		bool ok = at + lane < end;
		uint64_t c = ok ? td_pget(f == 0 ? d.root_syms : d.rule_syms, at + lane) : 0;
		td_xc_sym y = {NULL, 0, 0, false};
		if (ok)
			td_xc_load(d, c, y, bad);
		if (td_any(bad))
			goto fail;
		uint64_t incl = td_warp_scan(y.len, lane), room = n - done;
		uint32_t mw = td_ballot(y.walk), mf = td_ballot(ok && incl >= room), nv = td_popc(td_ballot(ok));
		uint32_t fw = mw ? td_ffs(mw) - 1 : 32, ff = mf ? td_ffs(mf) - 1 : 32;
		/* lanes [0, cut) are copied: up to the one where the read ends
		 * (in part), else up to the first rule to descend into */
		uint32_t cut = ff < fw && ff < nv ? ff + 1 : fw < nv ? fw : nv;
		uint64_t last = td_shfl(incl, (cut - 1) & 31);
		uint64_t B = ff < fw && ff < nv ? room : cut ? last : 0;
		uint32_t ic = lane < cut && incl < B ? (uint32_t)incl : (uint32_t)B;
		td_xc_copy(y.src, y.tl, -(int64_t)(incl - y.len), ic, (uint32_t)B, dst + done);
		done += B;
		if (done >= n)
			break;
		uint64_t nat = at + (fw < nv ? fw + 1 : nv);
		if (lane == fl) {
			if (f < 32)
				k.at0 = nat;
			else
				k.at1 = nat;
		}
		if (fw < nv) {
			uint64_t r = td_shfl(c, fw) - t, first;
			uint32_t len;
			if (!td_rhs(d, r, first, len) || !td_xc_push(k, first, first + len))
				goto fail;
		}
	}
	return;
fail:
	if (lane == 0)
		res[ri].err = TD_ECORRUPT;
}

#ifndef TD_GPU_EMU /* tests run the bodies on the host */
/* 128-thread blocks, at least TD_X_MINBLOCKS per SM (default 7: at most
 * 72 registers, the occupancy the one-level version had; ptxas -v: 80
 * without the bound, a few bytes of spills with it). Measured on the H100:
 * 5, 6 and no bound ran at the same rate, 10 and 14 12% and 38% slower
 * (spills; contrib/bench/NOTES.md).
 * To compare, change the default here and rebuild: the kernel object comes
 * from the custom target in gpu/meson.build, which takes no cuda_args. */
#ifndef TD_X_MINBLOCKS
#define TD_X_MINBLOCKS 7
#endif
__global__ void __launch_bounds__(128, TD_X_MINBLOCKS) td_k_extract(td_gdev d, const td_gx_req *req, uint32_t nreq,
								      uint32_t item0, uint32_t nitems, uint8_t *out,
								      td_gx_res *res)
{
	uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
	if (t - threadIdx.x % 32 < nitems) /* whole warps stay: the loop votes */
		td_extract_warp(d, req, nreq, item0 + nitems, item0 + t, out, res);
}

/* Warp-walked reads (len >= d.xcoop): one warp per d.xseg bytes. */
__global__ void __launch_bounds__(128) td_k_extract_coop(td_gdev d, const td_gx_req *req, uint32_t nreq,
							  uint32_t warp0, uint32_t nwarps, uint8_t *out, td_gx_res *res)
{
	uint32_t w = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
	if (w < nwarps) /* the same for the whole warp */
		td_xc_warp(d, req, nreq, warp0 + w, out, res);
}
#endif

/* ---- count and search ---- */

/* Binary search of the query in WORDS (bytewise order). Word id or -1. */
TD_HD int64_t td_dev_lookup(const td_gdev &d, const uint8_t *qw, uint32_t ql)
{
	uint64_t lo = 0, hi = d.nwords;
	bool bad = false;
	while (lo < hi) {
		uint64_t mid = (lo + hi) >> 1;
		uint64_t a = td_pgets(d.word_off, mid, bad), b = td_pgets(d.word_off, mid + 1, bad);
		if (bad || a > b || b > d.words_size)
			return -1;
		uint64_t l = b - a;
		uint64_t m = l < ql ? l : ql;
		int cmp = 0;
		for (uint64_t x = 0; x < m && !cmp; x++) {
			uint8_t u = d.words[a + x], v = qw[x];
			cmp = u < v ? -1 : u > v ? 1 : 0;
		}
		if (!cmp)
			cmp = l < ql ? -1 : l > ql ? 1 : 0;
		if (cmp == 0)
			return (int64_t)mid;
		if (cmp < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* Query state of one request. */
struct td_q {
	uint64_t w;    /* word id */
	uint32_t bit;  /* signature bit */
	uint32_t e;    /* entry being walked */
};

TD_HD __forceinline__ bool td_is_hit(const td_q &q, uint64_t s, uint64_t w2)
{
	return s < w2 && (s >> 1) == q.w;
}

/* Occurrences of the word in the expansion of symbol s (depth-first, rules
 * whose signature lacks the word's bit are skipped). */
TD_HD uint64_t td_dev_count_sym(const td_gdev &d, const td_q &q, uint64_t s, bool &bad)
{
	const uint64_t w2 = 2 * d.nwords, t = w2 + d.nother;
	if (s < t)
		return td_is_hit(q, s, w2);
	if (s - t >= d.nrules) {
		bad = true;
		return 0;
	}
	if (!td_mask_has(d, s - t, q.bit))
		return 0;
	/* the rule being read stays in registers (first, len, j); the stack
	 * holds the ones above it, so a step reads no frame from memory */
	td_frame st[TD_MAXDEPTH];
	uint32_t depth = 0; /* frames on the stack, below the current one */
	uint64_t n = 0, first;
	uint32_t len, j = 0;
	if (!td_rhs(d, s - t, first, len)) {
		bad = true;
		return 0;
	}
	for (;;) {
		if (j == len) {
			if (depth == 0)
				break;
			depth--;
			first = st[depth].first;
			len = st[depth].len;
			j = st[depth].j;
			continue;
		}
		uint64_t c = td_pget(d.rule_syms, first + j++);
		if (c < t) {
			n += td_is_hit(q, c, w2);
			continue;
		}
		if (c - t >= d.nrules || depth + 1 == TD_MAXDEPTH) {
			bad = true;
			return 0;
		}
		uint64_t w = td_rrhs_get(d, c - t); /* beside the signature's load */
		if (!td_mask_has(d, c - t, q.bit))
			continue;
		uint64_t cf;
		uint32_t cl;
		if (!td_rhs(d, c - t, cf, cl, NULL, w)) {
			bad = true;
			return 0;
		}
		st[depth].first = first;
		st[depth].len = len;
		st[depth].j = j;
		depth++;
		first = cf;
		len = cl;
		j = 0;
	}
	return n;
}

/* Write the hits in symbol s, whose first byte is at file offset pos, to
 * out[0..]; returns how many were written. */
TD_HD uint64_t td_dev_fill_sym(const td_gdev &d, const td_q &q, uint64_t s, uint64_t pos, td_hit *out,
				    bool &bad)
{
	const uint64_t w2 = 2 * d.nwords, t = w2 + d.nother;
	if (s < t) {
		if (!td_is_hit(q, s, w2))
			return 0;
		out[0].file = q.e;
		out[0].off = pos;
		return 1;
	}
	if (s - t >= d.nrules) {
		bad = true;
		return 0;
	}
	if (!td_mask_has(d, s - t, q.bit))
		return 0;
	td_frame st[TD_MAXDEPTH];
	uint32_t depth = 1;
	uint64_t n = 0;
	if (!td_rhs(d, s - t, st[0].first, st[0].len)) {
		bad = true;
		return 0;
	}
	st[0].j = 0;
	while (depth) {
		td_frame &f = st[depth - 1];
		if (f.j == f.len) {
			depth--;
			continue;
		}
		uint64_t c = td_pget(d.rule_syms, f.first + f.j++);
		if (c < t) {
			if (td_is_hit(q, c, w2)) {
				out[n].file = q.e;
				out[n].off = pos;
				n++;
			}
			pos += td_symlen(d, c, bad);
			continue;
		}
		if (c - t >= d.nrules || depth == TD_MAXDEPTH) {
			bad = true;
			return n;
		}
		if (!td_mask_has(d, c - t, q.bit)) {
			pos += td_pget(d.rule_len, c - t);
			continue;
		}
		if (!td_rhs(d, c - t, st[depth].first, st[depth].len)) {
			bad = true;
			return n;
		}
		st[depth].j = 0;
		depth++;
	}
	return n;
}

/* Whole warp: occurrences in root symbols [rlo, rhi) (lanes split them). */
TD_HD uint64_t td_warp_range_count(const td_gdev &d, const td_q &q, uint64_t rlo, uint64_t rhi, uint32_t lane,
				       bool &bad)
{
	uint64_t n = 0;
	if (!bad)
		for (uint64_t k = rlo + lane; k < rhi; k += 32)
			n += td_dev_count_sym(d, q, td_pget(d.root_syms, k), bad);
	return td_warp_sum(n);
}

/* Whole warp: write the hits of file e in its root symbols [rlo, rhi),
 * whose first byte is at file offset pos, at out, in offset order. Returns
 * the number written (same on every lane). */
TD_HD uint64_t td_warp_range_fill(const td_gdev &d, td_q q, uint32_t e, uint64_t rlo, uint64_t rhi, uint64_t pos,
				      uint32_t lane, td_hit *out, bool &bad)
{
	if (td_any(bad))
		return 0;
	q.e = e;
	uint64_t n = 0;
	for (uint64_t k0 = rlo; k0 < rhi; k0 += 32) {
		uint64_t k = k0 + lane;
		uint64_t s = 0, l = 0, c = 0;
		if (k < rhi) {
			s = td_pget(d.root_syms, k);
			l = td_symlen(d, s, bad);
			c = td_dev_count_sym(d, q, s, bad);
		}
		uint64_t li = td_warp_scan(l, lane), ci = td_warp_scan(c, lane);
		if (c)
			td_dev_fill_sym(d, q, s, pos + li - l, out + n + ci - c, bad);
		pos += td_shfl(li, 31);
		n += td_shfl(ci, 31);
	}
	return n;
}

/* File e's root range [*rlo, *rhi), checked against the root sequence. */
TD_HD void td_file_roots(const td_gdev &d, uint32_t e, uint64_t *rlo, uint64_t *rhi, bool &bad)
{
	*rlo = td_pgets(d.e_root, e, bad);
	*rhi = td_pgets(d.e_root, (uint64_t)e + 1, bad);
	if (*rhi > d.root_syms.n || *rlo > *rhi)
		bad = true;
}

/* Whole warp: occurrences in one file's text (lanes split its root range). */
TD_HD uint64_t td_warp_file_count(const td_gdev &d, td_q q, uint32_t e, uint32_t lane, bool &bad)
{
	uint64_t rlo, rhi;
	td_file_roots(d, e, &rlo, &rhi, bad);
	return td_warp_range_count(d, q, rlo, rhi, lane, bad);
}

/* Whole warp: write one file's hits at out, in offset order. Returns the
 * number written (same on every lane). */
TD_HD uint64_t td_warp_file_fill(const td_gdev &d, td_q q, uint32_t e, uint32_t lane, td_hit *out,
				      bool &bad)
{
	uint64_t rlo, rhi;
	td_file_roots(d, e, &rlo, &rhi, bad);
	return td_warp_range_fill(d, q, e, rlo, rhi, 0, lane, out, bad);
}

/* File offset of root symbol a of regular file e, for the slice [a, b) of
 * its root (checked: a is the file's first root symbol or a multiple of
 * 2^sample_shift, whose file offset ROOT_SAMPLES and E_GSTART give). */
TD_HD __forceinline__ uint64_t td_slice_pos(const td_gdev &d, uint32_t e, uint64_t a, uint64_t b, bool &bad)
{
	uint64_t rlo, rhi, pos = 0;
	td_file_roots(d, e, &rlo, &rhi, bad);
	if (a < rlo || a > b || b > rhi || (a != rlo && (a & ((UINT64_C(1) << d.sample_shift) - 1))))
		bad = true;
	if (!bad && a != rlo) {
		uint64_t g0 = td_pgets(d.e_gstart, e, bad), ga = td_pgets(d.root_samples, a >> d.sample_shift, bad);
		if (ga < g0)
			bad = true;
		pos = ga - g0;
	}
	return pos;
}

/* Whole warp: count (out == NULL) or fill the hits of root symbols [a, b)
 * of regular file e (a part of a long request, td_gq_req.part 2). */
TD_HD uint64_t td_warp_slice(const td_gdev &d, const td_q &q, uint32_t e, uint64_t a, uint64_t b, uint32_t lane,
				 td_hit *out, bool &bad)
{
	uint64_t pos = td_slice_pos(d, e, a, b, bad);
	if (td_any(bad))
		return 0;
	if (out)
		return td_warp_range_fill(d, q, e, a, b, pos, lane, out, bad);
	return td_warp_range_count(d, q, a, b, lane, bad);
}

/* One lane: occurrences in a small file, serially. */
TD_HD uint64_t td_lane_file_count(const td_gdev &d, const td_q &q, uint64_t rlo, uint64_t rhi, bool &bad)
{
	uint64_t n = 0;
	for (uint64_t k = rlo; k < rhi && !bad; k++)
		n += td_dev_count_sym(d, q, td_pget(d.root_syms, k), bad);
	return n;
}

TD_HD void td_lane_file_fill(const td_gdev &d, const td_q &q, uint64_t rlo, uint64_t rhi, td_hit *out,
				  bool &bad)
{
	uint64_t pos = 0, n = 0;
	for (uint64_t k = rlo; k < rhi && !bad; k++) {
		uint64_t s = td_pget(d.root_syms, k);
		n += td_dev_fill_sym(d, q, s, pos, out + n, bad);
		pos += td_symlen(d, s, bad);
	}
}

/* Files with at most this many root elements are walked by one lane inside
 * a directory scope; larger ones by the whole warp. */
#define TD_SMALL_ROOT 64u

/* Whole warp: count (out == NULL) or fill the hits of files dfs_files[a, b)
 * (a directory subtree's regular files, in td_search's depth-first order,
 * are one contiguous range of dfs_files). Lanes take a file each; files
 * with many root elements are done by the whole warp. */
TD_HD uint64_t td_warp_files(const td_gdev &d, td_q q, uint64_t a, uint64_t b, uint32_t lane, td_hit *out,
				 bool &bad)
{
	uint64_t total = 0;
	if (a > b || b > d.nentries) {
		bad = true;
		return 0;
	}
	for (uint64_t i0 = a; i0 < b; i0 += 32) {
		uint64_t i = i0 + lane;
		bool has = i < b, big = false;
		uint32_t e = 0;
		uint64_t rlo = 0, rhi = 0, c = 0;
		if (has) {
			e = d.dfs_files[i];
			rlo = td_pgets(d.e_root, e, bad);
			rhi = td_pgets(d.e_root, (uint64_t)e + 1, bad);
			if (rlo > rhi || rhi > d.root_syms.n)
				bad = true;
			big = rhi - rlo > TD_SMALL_ROOT;
		}
		if (td_any(bad))
			return total;
		td_q lq = q;
		lq.e = e;
		if (has && !big)
			c = td_lane_file_count(d, lq, rlo, rhi, bad);
		uint32_t bigs = td_ballot(big);
		for (uint32_t m = bigs; m; m &= m - 1) {
			uint32_t l = td_ffs(m) - 1;
			uint32_t el = (uint32_t)td_shfl(e, l);
			uint64_t cb = td_warp_file_count(d, q, el, lane, bad);
			if (lane == l)
				c = cb;
		}
		uint64_t ci = td_warp_scan(c, lane);
		if (out) {
			if (has && !big && c)
				td_lane_file_fill(d, lq, rlo, rhi, out + total + ci - c, bad);
			for (uint32_t m = bigs; m; m &= m - 1) {
				uint32_t l = td_ffs(m) - 1;
				uint32_t el = (uint32_t)td_shfl(e, l);
				uint64_t base = td_shfl(ci - c, l);
				td_warp_file_fill(d, q, el, lane, out + total + base, bad);
			}
		}
		total += td_shfl(ci, 31);
	}
	return total;
}

/* Whole warp: count (out == NULL) or fill the hits of a directory subtree. */
TD_HD uint64_t td_warp_dir(const td_gdev &d, td_q q, uint32_t scope, uint32_t lane, td_hit *out, bool &bad)
{
	return td_warp_files(d, q, d.sub[2 * (uint64_t)scope], d.sub[2 * (uint64_t)scope + 1], lane, out, bad);
}

/* Whole warp: lane 0 looks request r's word up; q gets its id, signature
 * bit and the scope (false: not in the dictionary). */
TD_HD __forceinline__ bool td_q_begin(const td_gdev &d, const uint8_t *qwords, const td_gq_req &r, uint32_t lane,
				      td_q &q)
{
	int64_t w = -1;
	if (lane == 0)
		w = td_dev_lookup(d, qwords + r.woff, r.wlen);
	w = (int64_t)td_shfl((uint64_t)w, 0);
	if (w < 0)
		return false;
	q.w = (uint64_t)w;
	q.bit = td_wbit(q.w);
	q.e = r.scope;
	return true;
}

/* One warp per request: look the word up, then count (out == NULL) or fill
 * its hits in the request's scope. */
TD_HD uint64_t td_warp_query(const td_gdev &d, const uint8_t *qwords, const td_gq_req &r, int search,
				  td_hit *out, bool &bad, bool &found)
{
	uint32_t lane = td_lane();
	td_q q;
	found = td_q_begin(d, qwords, r, lane, q);
	if (!found)
		return 0;
	uint32_t mode = (uint32_t)td_pget(d.e_mode, r.scope);
	if (r.part == TD_GQ_FILES) { /* a part of a directory scope */
		if ((mode & TD_S_IFMT) != TD_S_IFDIR || r.a < d.sub[2 * (uint64_t)r.scope] ||
		    r.b > d.sub[2 * (uint64_t)r.scope + 1]) {
			bad = true;
			return 0;
		}
		return td_warp_files(d, q, r.a, r.b, lane, out, bad);
	}
	if (r.part == TD_GQ_SLICE) { /* a part of a file's root */
		if ((mode & TD_S_IFMT) != TD_S_IFREG) {
			bad = true;
			return 0;
		}
		return td_warp_slice(d, q, r.scope, r.a, r.b, lane, out, bad);
	}
	if ((mode & TD_S_IFMT) == TD_S_IFREG) {
		if (out)
			return td_warp_file_fill(d, q, r.scope, lane, out, bad);
		return td_warp_file_count(d, q, r.scope, lane, bad);
	}
	if ((mode & TD_S_IFMT) != TD_S_IFDIR)
		return 0; /* symlinks count nothing */
	if (!search && r.scope == TD_ROOT)
		return td_pgets(d.word_freq, q.w, bad); /* whole corpus: one look-up */
	return td_warp_dir(d, q, r.scope, lane, out, bad);
}

/* Whole warp: request i of a count launch. */
TD_HD void td_count_one(const td_gdev &d, const uint8_t *qwords, const td_gq_req *req, uint32_t i, int search,
			uint64_t *count)
{
	bool bad = false, found = false;
	uint64_t n = td_warp_query(d, qwords, req[i], search, NULL, bad, found);
	bad = td_any(bad);
	if (td_lane() == 0)
		count[i] = (!found || bad) ? TD_GQ_NOTFOUND : n;
}

/* Whole warp: request i of a search launch. */
TD_HD void td_search_one(const td_gdev &d, const uint8_t *qwords, const td_gq_req *req, uint32_t i,
			 const uint64_t *base, td_hit *hits)
{
	bool bad = false, found = false;
	td_warp_query(d, qwords, req[i], 1, hits + base[i], bad, found);
}

#ifndef TD_GPU_EMU /* tests run the bodies on the host */
__global__ void td_k_count(td_gdev d, const uint8_t *qwords, const td_gq_req *req, uint32_t nreq, int search,
			   uint64_t *count)
{
	uint32_t i = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	if (i < nreq && !req[i].big) /* whole warps take the same branch; big: td_k_count_big */
		td_count_one(d, qwords, req, i, search, count);
}
#endif

#ifndef TD_GPU_EMU /* tests run the bodies on the host */
__global__ void td_k_search(td_gdev d, const uint8_t *qwords, const td_gq_req *req, uint32_t nreq,
			    const uint64_t *base, const uint8_t *skip, td_hit *hits)
{
	uint32_t i = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	if (i < nreq && !skip[i] && !req[i].big)
		td_search_one(d, qwords, req, i, base, hits);
}
#endif

/* ---- requests marked big (td_gq_req.big): their own kernels ----
 * A file holding a root symbol over qbig bytes (marked at open by the
 * host) is walked here: a root symbol whose rule holds the word's
 * signature bit and expands to more than qbig bytes is counted and filled
 * by all 32 lanes, each over 1/32 of its bytes, instead of by one lane.
 * Kernels of their own (td_k_count_big, td_k_search_big, launched beside
 * the usual ones on a second stream), so the usual kernels' code and
 * registers are not touched by this path. */

/* Occurrences of the word in rule symbol s (out == NULL), or write them at out
 * with s's first byte at file offset base, that start at offsets [lo, hi)
 * of s's expansion: subtrees wholly inside are counted or filled as
 * usual, those wholly outside skipped by their length, the ones across
 * an end walked into (a long rule's prefix skipped by its offset samples,
 * RULE_SAMPLES, as extract does). Returns the number found. */
TD_HD uint64_t td_dev_part_sym(const td_gdev &d, const td_q &q, uint64_t s, uint64_t lo, uint64_t hi, uint64_t base,
			       td_hit *out, bool &bad)
{
	const uint64_t w2 = 2 * d.nwords, t = w2 + d.nother;
	if (lo >= hi)
		return 0;
	if (s < t || s - t >= d.nrules) { /* td_q_big: a rule */
		bad = true;
		return 0;
	}
	td_frame st[TD_MAXDEPTH];
	uint32_t depth = 0;
	uint64_t n = 0, pos = 0; /* pos: offset of the next symbol in s */
	uint64_t r = s - t;      /* the rule to enter */
	for (;;) {
		uint64_t fs = 0;
		if (depth == TD_MAXDEPTH || !td_rhs(d, r, st[depth].first, st[depth].len, &fs)) {
			bad = true;
			return n;
		}
		st[depth].j = 0;
		if (pos < lo && st[depth].len > (UINT32_C(1) << d.sample_shift)) {
			/* a long rule begun before lo: its offset samples skip ahead */
			const uint32_t sh = (uint32_t)d.sample_shift;
			uint64_t per = ((uint64_t)st[depth].len + (UINT64_C(1) << sh) - 1) >> sh;
			if (fs + per > d.rule_samples.n || fs + per < fs) {
				bad = true;
				return n;
			}
			uint64_t a = 0, b = per, want = lo - pos;
			while (b - a > 1) {
				uint64_t mid = (a + b) >> 1;
				if (td_pget(d.rule_samples, fs + mid) <= want)
					a = mid;
				else
					b = mid;
			}
			uint64_t skip = td_pget(d.rule_samples, fs + a);
			if (skip > want) {
				bad = true;
				return n;
			}
			pos += skip;
			st[depth].j = (uint32_t)(a << sh);
		}
		depth++;
		/* walk until the next rule to enter across lo or hi */
		bool enter = false;
		while (depth && pos < hi && !enter) {
			td_frame &f = st[depth - 1];
			if (f.j == f.len) {
				depth--;
				continue;
			}
			uint64_t c = td_pget(d.rule_syms, f.first + f.j++);
			if (c < t) {
				if (pos >= lo && td_is_hit(q, c, w2)) {
					if (out) {
						out[n].file = q.e;
						out[n].off = base + pos;
					}
					n++;
				}
				pos += td_symlen(d, c, bad);
				continue;
			}
			if (c - t >= d.nrules) {
				bad = true;
				return n;
			}
			uint64_t l = td_pget(d.rule_len, c - t);
			if (pos + l <= lo || !td_mask_has(d, c - t, q.bit)) {
				pos += l;
				continue;
			}
			if (pos >= lo && pos + l <= hi) {
				n += out ? td_dev_fill_sym(d, q, c, base + pos, out + n, bad) : td_dev_count_sym(d, q, c, bad);
				pos += l;
				continue;
			}
			r = c - t;
			enter = true;
		}
		if (!enter)
			return n;
	}
}

/* Signature bits a rule must have set before its length is looked at
 * (td_q_big, when qbig >= 1 KiB): 100 of 128, what about 195 distinct
 * words set (a rule of a few KiB); the same words set 136 of 256 bits
 * and 161 of 512. */
#define TD_GQ_BIGBITS (TD_MASK_W == 8u ? 161u : TD_MASK_W == 4u ? 136u : 100u)

/* Whether symbol s is walked by the whole warp (a rule holding the word's
 * bit, with at least TD_GQ_BIGBITS bits of its signature set, that expands
 * to more than qbig bytes); *len gets its length. The bits keep the
 * length's decoding off the small rules, most of the root. */
TD_HD __forceinline__ bool td_q_big(const td_gdev &d, const td_q &q, uint64_t qbig, uint64_t s, uint64_t *len,
				    bool &bad)
{
	const uint64_t t = 2 * d.nwords + d.nother;
	if (!qbig || s < t || s - t >= d.nrules)
		return false;
	if (!td_mask_has(d, s - t, q.bit))
		return false;
	if (qbig >= 1024) {
		uint32_t bits = 0;
		for (uint32_t k = 0; k < TD_MASK_W; k++)
			bits += td_popc64(ldg64(&d.rule_mask[TD_MASK_W * (s - t) + k]));
		if (bits < TD_GQ_BIGBITS)
			return false;
	}
	*len = td_pgets(d.rule_len, s - t, bad);
	return *len > qbig;
}

/* Whole warp: occurrences in symbol s of len bytes (out == NULL; same on
 * every lane), or write them at out with s at file offset base; each lane
 * takes the ones starting in its 1/32 of s's bytes (a word belongs to the
 * lane whose range holds its first byte, so the counts add up and the
 * lanes' hits, scanned, stay in offset order). */
TD_HD uint64_t td_warp_big_sym(const td_gdev &d, const td_q &q, uint64_t s, uint64_t len, uint64_t base,
			       uint32_t lane, td_hit *out, bool &bad)
{
	uint64_t lo = len * lane / 32, hi = len * (lane + 1) / 32;
	uint64_t c = td_dev_part_sym(d, q, s, lo, hi, base, NULL, bad);
	if (!out)
		return td_warp_sum(c);
	uint64_t ci = td_warp_scan(c, lane);
	if (c)
		td_dev_part_sym(d, q, s, lo, hi, base, out + ci - c, bad);
	return td_shfl(ci, 31);
}

/* Whole warp: occurrences in root symbols [rlo, rhi), large ones counted
 * by the whole warp (td_q_big). */
TD_HD uint64_t td_warp_range_count_big(const td_gdev &d, const td_q &q, uint64_t qbig, uint64_t rlo, uint64_t rhi,
				       uint32_t lane, bool &bad)
{
	uint64_t n = 0;
	if (td_any(bad))
		return 0;
	for (uint64_t k0 = rlo; k0 < rhi; k0 += 32) {
		uint64_t k = k0 + lane, s = 0, l = 0;
		bool big = false;
		if (k < rhi && !bad) {
			s = td_pget(d.root_syms, k);
			big = td_q_big(d, q, qbig, s, &l, bad);
			if (!big)
				n += td_dev_count_sym(d, q, s, bad);
		}
		for (uint32_t m = td_ballot(big); m; m &= m - 1) {
			uint32_t b = td_ffs(m) - 1;
			uint64_t c = td_warp_big_sym(d, q, td_shfl(s, b), td_shfl(l, b), 0, lane, NULL, bad);
			if (lane == 0)
				n += c;
		}
	}
	return td_warp_sum(n);
}

/* Whole warp: td_warp_range_fill with large root symbols filled by the
 * whole warp (td_q_big). */
TD_HD uint64_t td_warp_range_fill_big(const td_gdev &d, td_q q, uint64_t qbig, uint32_t e, uint64_t rlo, uint64_t rhi,
				      uint64_t pos, uint32_t lane, td_hit *out, bool &bad)
{
	if (td_any(bad))
		return 0;
	q.e = e;
	uint64_t n = 0;
	for (uint64_t k0 = rlo; k0 < rhi; k0 += 32) {
		uint64_t k = k0 + lane;
		uint64_t s = 0, l = 0, c = 0, bl = 0;
		bool big = false;
		if (k < rhi) {
			s = td_pget(d.root_syms, k);
			l = td_symlen(d, s, bad);
			big = td_q_big(d, q, qbig, s, &bl, bad);
			if (!big)
				c = td_dev_count_sym(d, q, s, bad);
		}
		uint32_t bigs = td_ballot(big);
		for (uint32_t m = bigs; m; m &= m - 1) {
			uint32_t b = td_ffs(m) - 1;
			uint64_t cb = td_warp_big_sym(d, q, td_shfl(s, b), td_shfl(bl, b), 0, lane, NULL, bad);
			if (lane == b)
				c = cb;
		}
		uint64_t li = td_warp_scan(l, lane), ci = td_warp_scan(c, lane);
		if (c && !big)
			td_dev_fill_sym(d, q, s, pos + li - l, out + n + ci - c, bad);
		for (uint32_t m = bigs; m; m &= m - 1) {
			uint32_t b = td_ffs(m) - 1;
			uint64_t sb = td_shfl(s, b), lb = td_shfl(bl, b), pb = td_shfl(li - l, b);
			uint64_t cb = td_shfl(c, b), ob = td_shfl(ci - c, b);
			if (cb)
				td_warp_big_sym(d, q, sb, lb, pos + pb, lane, out + n + ob, bad);
		}
		pos += td_shfl(li, 31);
		n += td_shfl(ci, 31);
	}
	return n;
}

/* One warp per request marked big: as td_warp_query, a regular file's
 * whole root or a slice of it walked with large root symbols by the
 * whole warp; any other scope as td_warp_query does. */
TD_HD uint64_t td_warp_query_big(const td_gdev &d, const uint8_t *qwords, const td_gq_req &r, int search,
				 uint64_t qbig, td_hit *out, bool &bad, bool &found)
{
	uint32_t mode = (uint32_t)td_pget(d.e_mode, r.scope);
	if ((mode & TD_S_IFMT) != TD_S_IFREG || (r.part != TD_GQ_WHOLE && r.part != TD_GQ_SLICE))
		return td_warp_query(d, qwords, r, search, out, bad, found);
	uint32_t lane = td_lane();
	td_q q;
	found = td_q_begin(d, qwords, r, lane, q);
	if (!found)
		return 0;
	uint64_t a = r.a, b = r.b, pos = 0;
	if (r.part == TD_GQ_WHOLE)
		td_file_roots(d, r.scope, &a, &b, bad);
	else
		pos = td_slice_pos(d, r.scope, a, b, bad);
	if (td_any(bad))
		return 0;
	if (out)
		return td_warp_range_fill_big(d, q, qbig, r.scope, a, b, pos, lane, out, bad);
	return td_warp_range_count_big(d, q, qbig, a, b, lane, bad);
}

/* Whole warp: request i of a count launch, when marked big. */
TD_HD void td_count_big_one(const td_gdev &d, const uint8_t *qwords, const td_gq_req *req, uint32_t i, int search,
			    uint64_t qbig, uint64_t *count)
{
	bool bad = false, found = false;
	uint64_t n = td_warp_query_big(d, qwords, req[i], search, qbig, NULL, bad, found);
	bad = td_any(bad);
	if (td_lane() == 0)
		count[i] = (!found || bad) ? TD_GQ_NOTFOUND : n;
}

/* Whole warp: request i of a search launch, when marked big. */
TD_HD void td_search_big_one(const td_gdev &d, const uint8_t *qwords, const td_gq_req *req, uint32_t i,
			     uint64_t qbig, const uint64_t *base, td_hit *hits)
{
	bool bad = false, found = false;
	td_warp_query_big(d, qwords, req[i], 1, qbig, hits + base[i], bad, found);
}

#ifndef TD_GPU_EMU /* tests run the bodies on the host */
/* One warp per request marked big in req[idx[j]] (j < nbig). */
__global__ void td_k_count_big(td_gdev d, const uint8_t *qwords, const td_gq_req *req, const uint32_t *idx,
			       uint32_t nbig, int search, uint64_t qbig, uint64_t *count)
{
	uint32_t j = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	if (j < nbig)
		td_count_big_one(d, qwords, req, idx[j], search, qbig, count);
}

__global__ void td_k_search_big(td_gdev d, const uint8_t *qwords, const td_gq_req *req, const uint32_t *idx,
				uint32_t nbig, uint64_t qbig, const uint64_t *base, const uint8_t *skip, td_hit *hits)
{
	uint32_t j = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	if (j < nbig && !skip[idx[j]])
		td_search_big_one(d, qwords, req, idx[j], qbig, base, hits);
}
#endif

/* ---- launchers (tests/gpu_host_emu.cu has host versions) ---- */
#ifndef TD_GPU_EMU

extern "C" unsigned td_gk_mask_w(void)
{
	return TD_MASK_W;
}

extern "C" int td_gk_build_masks(const td_gdev *d, uint64_t *mask, int *changed, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	if (d->nrules == 0)
		return 0;
	unsigned blocks = (unsigned)((d->nrules + 255) / 256);
	td_k_masks<<<blocks, 256, 0, s>>>(*d, mask, changed);
	return (int)cudaGetLastError();
}

extern "C" int td_gk_rx_fill(const td_gdev *d, uint8_t *pool, int *bad, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	if (d->nrules == 0 || !d->rx_off)
		return 0;
	td_k_rx_fill<<<(unsigned)((d->nrules + 127) / 128), 128, 0, s>>>(*d, pool, bad);
	return (int)cudaGetLastError();
}

extern "C" int td_gk_extract(const td_gdev *d, const td_gx_req *req, uint32_t nreq, uint32_t item0, uint32_t nitems,
			     uint32_t warp0, uint32_t nwarps, uint8_t *out, td_gx_res *res, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	if (nwarps) {
		td_k_extract_coop<<<(nwarps + 3) / 4, 128, 0, s>>>(*d, req, nreq, warp0, nwarps, out, res);
		cudaError_t e = cudaGetLastError();
		if (e != cudaSuccess)
			return (int)e;
	}
	if (nitems == 0)
		return 0;
	td_k_extract<<<(nitems + 127) / 128, 128, 0, s>>>(*d, req, nreq, item0, nitems, out, res);
	return (int)cudaGetLastError();
}

/* The big kernel of a launch on big->stream, forked from stream s after
 * what s holds (the uploads) and joined back before what s gets next (the
 * download): it runs beside the usual kernel. */
static int td_gk_fork(cudaStream_t s, const td_gk_big *big)
{
	cudaError_t e = cudaEventRecord((cudaEvent_t)big->fork, s);
	if (e == cudaSuccess)
		e = cudaStreamWaitEvent((cudaStream_t)big->stream, (cudaEvent_t)big->fork, 0);
	return (int)e;
}

static int td_gk_join(cudaStream_t s, const td_gk_big *big)
{
	cudaError_t e = cudaGetLastError();
	if (e == cudaSuccess)
		e = cudaEventRecord((cudaEvent_t)big->join, (cudaStream_t)big->stream);
	if (e == cudaSuccess)
		e = cudaStreamWaitEvent(s, (cudaEvent_t)big->join, 0);
	return (int)e;
}

extern "C" int td_gk_count(const td_gdev *d, const uint8_t *qwords, const td_gq_req *req, uint32_t nreq,
			   int search, uint64_t *count, void *stream, const td_gk_big *big)
{
	cudaStream_t s = (cudaStream_t)stream;
	int e;
	if (nreq == 0)
		return 0;
	if (big && big->n) { /* one warp a block: the long warps spread over the SMs */
		if ((e = td_gk_fork(s, big)))
			return e;
		td_k_count_big<<<big->n, 32, 0, (cudaStream_t)big->stream>>>(*d, qwords, req, big->idx, big->n, search,
									  big->qbig, count);
		if ((e = (int)cudaGetLastError()))
			return e;
	}
	td_k_count<<<(nreq + 3) / 4, 128, 0, s>>>(*d, qwords, req, nreq, search, count);
	if ((e = (int)cudaGetLastError()))
		return e;
	return big && big->n ? td_gk_join(s, big) : 0;
}

extern "C" int td_gk_search(const td_gdev *d, const uint8_t *qwords, const td_gq_req *req, uint32_t nreq,
			    const uint64_t *base, const uint8_t *skip, td_hit *hits, void *stream, const td_gk_big *big)
{
	cudaStream_t s = (cudaStream_t)stream;
	int e;
	if (nreq == 0)
		return 0;
	if (big && big->n) {
		if ((e = td_gk_fork(s, big)))
			return e;
		td_k_search_big<<<big->n, 32, 0, (cudaStream_t)big->stream>>>(*d, qwords, req, big->idx, big->n, big->qbig,
									   base, skip, hits);
		if ((e = (int)cudaGetLastError()))
			return e;
	}
	td_k_search<<<(nreq + 3) / 4, 128, 0, s>>>(*d, qwords, req, nreq, base, skip, hits);
	if ((e = (int)cudaGetLastError()))
		return e;
	return big && big->n ? td_gk_join(s, big) : 0;
}
#endif
