/* td_archive: map an archive, validate it, and answer tree questions. */
#include "td_archive.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_d_stableOutBuffer */
#include <zstd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "td_archive_int.h"
#include "td_mem.h"
#include "td_rcache.h"
#include "td_shard.h"

static const char *const sec_names[TD_SEC_MAX] = {
	[TD_SEC_META] = "meta",
	[TD_SEC_NAMES] = "names",
	[TD_SEC_E_NAMEOFF] = "entry-name-offsets",
	[TD_SEC_E_PARENT] = "entry-parents",
	[TD_SEC_E_MODE] = "entry-modes",
	[TD_SEC_E_MTIME] = "entry-mtimes",
	[TD_SEC_E_MTIMENS] = "entry-mtime-ns",
	[TD_SEC_E_SIZE] = "entry-sizes",
	[TD_SEC_E_CHILD] = "entry-children",
	[TD_SEC_E_ROOT] = "entry-root-ranges",
	[TD_SEC_E_GSTART] = "entry-offsets",
	[TD_SEC_E_NWORDS] = "entry-word-counts",
	[TD_SEC_WORDS] = "words",
	[TD_SEC_WORD_OFF] = "word-offsets",
	[TD_SEC_WORD_FREQ] = "word-counts",
	[TD_SEC_OTHER] = "other-tokens",
	[TD_SEC_OTHER_OFF] = "other-offsets",
	[TD_SEC_RULE_SYMS] = "rules",
	[TD_SEC_RULE_GROUPS] = "rule-groups",
	[TD_SEC_RULE_LEN] = "rule-lengths",
	[TD_SEC_ROOT_SYMS] = "root",
	[TD_SEC_ROOT_SAMPLES] = "root-samples",
	[TD_SEC_RULE_SAMPLES] = "rule-samples",
};

const char *td_section_name(unsigned id)
{
	return id < TD_SEC_MAX && sec_names[id] ? sec_names[id] : "unknown";
}

static int bad(unsigned id, const char *what)
{
	return td_fail(TD_ECORRUPT, "section '%s': %s", td_section_name(id), what);
}

static int check_sum(const td_archive *a, unsigned id);

/* View a packed array of section id in the archive's version's layout
 * (versions 1-2: a converted tile table the archive keeps until close). */
static int view_bytes(td_archive *a, unsigned id, td_pack *p, const void *blob, uint64_t size)
{
	if (a->version >= 3)
		return td_pack_view(p, blob, size);
	void *owned;
	int err = td_pack_view_v1(p, blob, size, &owned);
	if (err == TD_OK) {
		free(a->pack_owned[id]);
		a->pack_owned[id] = owned;
	}
	return err;
}

static int view(td_archive *a, unsigned id, td_pack *p, uint64_t want_n)
{
	const td_disk_section *s = a->sec[id];
	if (view_bytes(a, id, p, a->map + s->off, s->size) != TD_OK)
		return bad(id, "malformed packed array");
	if (want_n != UINT64_MAX && p->n != want_n)
		return bad(id, "wrong number of values");
	return TD_OK;
}

/* Version 4 sections whose version 3 form (td_archive_bytes) is built on
 * demand: WORD_OFF from the words, the symbol arrays by decoding them. */
static int derived(const td_archive *a, unsigned id)
{
	return a->version >= 4 && (id == TD_SEC_WORD_OFF || id == TD_SEC_ROOT_SYMS || id == TD_SEC_RULE_SYMS);
}

/* Sections whose logical bytes, once built, are a heap copy the archive
 * owns: zstd frames decoded, derived sections, and version 4's words
 * (front-coded even when stored plain). */
static int on_heap(const td_archive *a, unsigned id)
{
	return (a->sec[id]->flags & TD_SECF_ZSTD) || derived(a, id) || (id == TD_SEC_WORDS && a->version >= 4);
}

/* View a root or rule sequence: FOR tiles, or (version 4) coded tiles over
 * the alphabet T + R with class bounds 2W and T. */
static int view_syms(td_archive *a, unsigned id, td_syms *s, uint64_t want_n, unsigned slot)
{
	memset(s, 0, sizeof *s);
	if (a->version < 4) {
		int err = view(a, id, &s->p, want_n);
		s->n = s->p.n;
		return err;
	}
	const td_disk_section *x = a->sec[id];
	if (td_scode_view(&s->c, a->map + x->off, x->size) != TD_OK)
		return bad(id, "malformed coded symbol array");
	uint64_t alphabet = a->T + a->R ? a->T + a->R : 1;
	if (s->c.n != want_n || s->c.alphabet != alphabet || s->c.c1 != 2 * a->W || s->c.c2 != a->T)
		return bad(id, "coded symbol array does not match the archive's counts");
	s->c.slot = slot;
	s->coded = 1;
	s->n = want_n;
	return TD_OK;
}

/* Bytes of a compressed section: the frame, without the alignment padding. */
static uint64_t frame_size(const td_archive *a, unsigned id)
{
	const td_disk_section *s = a->sec[id];
	size_t n = ZSTD_findFrameCompressedSize(a->map + s->off, s->size);
	return ZSTD_isError(n) ? UINT64_MAX : n;
}

/* The largest logical size a compressed section may claim (so a corrupt
 * frame header cannot make a reader allocate without bound). */
static uint64_t zstd_max(const td_archive *a, unsigned id)
{
	switch (id) {
	case TD_SEC_NAMES: return a->meta.nentries * TD_MAXNAME;
	case TD_SEC_WORDS: return a->W * (TD_MAXTOK + (a->version >= 4 ? 2 : 0));
	case TD_SEC_OTHER: return a->S * (TD_MAXTOK + 1);
	/* a packed array's fixed part (header, frame line, group offsets)
	 * is a few hundred bytes: a shard of three words stores 216 */
	case TD_SEC_WORD_FREQ: return 1024 + a->W * 9 + (a->W / TD_TILE + 1) * 2 * sizeof(td_disk_tile_v1);
	default: return 0;
	}
}

/* A compressed section is one zstd frame and up to 7 zero bytes of
 * padding: TD_OK with the frame's bytes in *fs, or TD_ECORRUPT. Finding
 * the frame's end walks its block headers (a page of the mapping touched
 * every block), so it is checked where the frame is decoded (or at open
 * with TD_OPEN_VERIFY), not at every open of every shard. */
static int frame_ok(const td_archive *a, unsigned id, uint64_t *fs)
{
	const td_disk_section *s = a->sec[id];
	*fs = frame_size(a, id);
	if (*fs == UINT64_MAX || s->size - *fs > 7)
		return bad(id, "not one zstd frame");
	for (uint64_t i = *fs; i < s->size; i++)
		if (a->map[s->off + i])
			return bad(id, "nonzero padding after the zstd frame");
	return TD_OK;
}

/* Set up the logical bytes of section `id`: the mapping itself, or for a
 * compressed one only its logical size, from the frame header, leaving the
 * bytes to td_archive_bytes. */
static int lay_out(td_archive *a, unsigned id, unsigned flags)
{
	const td_disk_section *s = a->sec[id];
	if (derived(a, id)) {
		atomic_init(&a->bytes[id], NULL);
		a->bytes_size[id] = 0;
		return TD_OK;
	}
	if (!(s->flags & TD_SECF_ZSTD) && on_heap(a, id)) {
		/* version 4's words stored plain: front-coded, the plain words
		 * are built on first use from its stored size */
		atomic_init(&a->bytes[id], NULL);
		a->bytes_size[id] = s->size;
		return TD_OK;
	}
	if (!(s->flags & TD_SECF_ZSTD)) {
		atomic_init(&a->bytes[id], a->map + s->off);
		a->bytes_size[id] = s->size;
		return TD_OK;
	}
	atomic_init(&a->bytes[id], NULL);
	uint64_t fs;
	int err = (flags & TD_OPEN_VERIFY) ? frame_ok(a, id, &fs) : TD_OK;
	if (err)
		return err;
	unsigned long long n = ZSTD_getFrameContentSize(a->map + s->off, s->size);
	if (n == ZSTD_CONTENTSIZE_UNKNOWN || n == ZSTD_CONTENTSIZE_ERROR || n > zstd_max(a, id))
		return bad(id, "zstd frame without a plausible content size");
	a->bytes_size[id] = n;
	return TD_OK;
}

/* Decode compressed section `id` into a heap copy followed by TD_BYTES_PAD
 * zero bytes, from malloc or (big) td_big_alloc(bytes_size[id] +
 * TD_BYTES_PAD); caller holds lazy_mu. */
static const uint8_t *decode_frame(const td_archive *a, unsigned id, int big)
{
	/* Decoding reads the whole frame anyway: check its checksum first, so a
	 * damaged frame is an error, never wrong names, words or counts. */
	const td_disk_section *s = a->sec[id];
	uint64_t n = a->bytes_size[id];
	if (XXH3_64bits(a->map + s->off, s->size) != s->sum) {
		td_fail(TD_ECORRUPT, "section '%s': checksum mismatch", td_section_name(id));
		return NULL;
	}
	uint64_t fs;
	if (frame_ok(a, id, &fs))
		return NULL;
	uint8_t *buf = big ? td_big_alloc(n + TD_BYTES_PAD) : malloc(n + TD_BYTES_PAD);
	if (!buf) {
		td_fail(TD_ENOMEM, "section '%s': %llu bytes", td_section_name(id), (unsigned long long)n);
		return NULL;
	}
	size_t k = ZSTD_decompress(buf, n, a->map + s->off, fs);
	if (ZSTD_isError(k) || k != n) {
		if (big)
			td_big_free(buf, n + TD_BYTES_PAD);
		else
			free(buf);
		td_fail(TD_ECORRUPT, "section '%s': zstd frame does not decode (%s)", td_section_name(id),
			ZSTD_isError(k) ? ZSTD_getErrorName(k) : "short");
		return NULL;
	}
	memset(buf + n, 0, TD_BYTES_PAD);
	return buf;
}

/* 16 bytes in a vector register (GCC/clang vector extensions). */
typedef uint8_t v16u __attribute__((vector_size(16)));

/* Bit j set where p[j] is '\n' (j < 64). */
static inline uint64_t nl_mask64(const uint8_t *p)
{
#if defined(__SSE2__)
	const __m128i nl = _mm_set1_epi8('\n');
	uint64_t m = 0;
	for (unsigned q = 0; q < 4; q++) {
		__m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * q));
		m |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, nl)) << (16 * q);
	}
	return m;
#else
	uint64_t m = 0;
	for (unsigned q = 0; q < 8; q++) {
		uint64_t x, t, y;
		memcpy(&x, p + 8 * q, 8);
		t = x ^ UINT64_C(0x0a0a0a0a0a0a0a0a);
		/* 0x80 exactly in the bytes of t that are 0 */
		y = ~(((t & UINT64_C(0x7f7f7f7f7f7f7f7f)) + UINT64_C(0x7f7f7f7f7f7f7f7f)) | t |
		      UINT64_C(0x7f7f7f7f7f7f7f7f));
		m |= ((y >> 7) * UINT64_C(0x0102040810204080) >> 56) << (8 * q);
	}
	return m;
#endif
}

/* The '\n' mask of fc's 64-byte chunk at cb (< n): bytes past n read as
 * not '\n' (a plain stored section may end at the mapping's end). */
static inline uint64_t nl_chunk(const uint8_t *fc, uint64_t n, uint64_t cb)
{
	if (cb + 64 <= n)
		return nl_mask64(fc + cb);
	uint8_t tail[64] = { 0 };
	memcpy(tail, fc + cb, n - cb);
	return nl_mask64(tail);
}

/* Version 4 words: undo the front coding of the decoded frame fc[0..n)
 * into the plain words (TD_BYTES_PAD zero bytes after them, from
 * td_big_alloc: a few huge pages instead of a thousand page faults), set
 * their size and build WORD_OFF's version 3 form, a wide packed array
 * (td_pack_wide_init) written as the words are found: no encoder pass, and
 * while the words take under 2 GiB its data are the offsets themselves
 * (a->word_off32), which td_flat_build adopts as its flat copy. room
 * (>= n) bytes may be read from fc. Caller holds lazy_mu. */
static inline __attribute__((always_inline)) const uint8_t *
unfront_as(td_archive *a, const uint8_t *pl, const uint8_t *fc, uint64_t n, uint64_t room, const unsigned hd)
{
	const uint64_t nv = a->W + 1, blob_bytes = td_pack_wide_size(nv);
	uint8_t *blob = td_big_alloc(blob_bytes);
	uint8_t *w = NULL;
	uint64_t out = 0;
	if (!blob) {
		td_fail(TD_ENOMEM, "section 'word-offsets': %llu values", (unsigned long long)nv);
		return NULL;
	}
	uint32_t *d = td_pack_wide_init(blob, nv);
	/* First pass: check every word and find where each one starts, from
	 * the '\n' masks of 64 bytes at a time. A word's record is its prefix
	 * length (one byte, which may itself be '\n'), then the rest of its
	 * bytes up to the first '\n' after that byte. Each tile's frame is its
	 * first offset rounded down to 2^31, so its residuals fit 32 bits. */
	uint64_t at = 0, plen = 0, frame = 0, cb = 0, m = n ? nl_chunk(fc, n, 0) : 0;
	unsigned broken = 0;
	for (uint64_t i = 0; i < a->W; i++) {
		const uint64_t from = at + hd;
		if (from >= n) {
			broken = 1;
			break;
		}
		if (from - cb >= 64)
			m = nl_chunk(fc, n, cb = from & ~UINT64_C(63));
		uint64_t mm = m & (~UINT64_C(0) << (from - cb)), p;
		while (!mm) {
			cb += 64;
			if (cb >= n)
				break;
			mm = m = nl_chunk(fc, n, cb);
		}
		if (!mm) {
			broken = 1;
			break;
		}
		p = cb + (uint64_t)__builtin_ctzll(mm);
		const uint64_t k = hd ? fc[at] : pl[i], len = k + (p - at - hd);
		broken |= (k > plen) | (len > TD_MAXTOK) | (len == 0);
		if (i % TD_TILE == 0) {
			frame = out & ~((UINT64_C(1) << 31) - 1);
			td_pack_wide_frame(blob, i / TD_TILE, frame);
		}
		d[i] = (uint32_t)(out - frame);
		plen = len;
		out += len;
		at = p + 1;
	}
	if (broken) {
		bad(TD_SEC_WORDS, "front-coded words do not decode");
		goto fail;
	}
	if (at != n) {
		bad(TD_SEC_WORDS, "bytes after the last front-coded word");
		goto fail;
	}
	if (a->W % TD_TILE == 0) {
		frame = out & ~((UINT64_C(1) << 31) - 1);
		td_pack_wide_frame(blob, a->W / TD_TILE, frame);
	}
	d[a->W] = (uint32_t)(out - frame);
	/* Second pass: each word is the prefix it shares with the one before
	 * and the rest of its bytes. */
	if (!(w = td_big_alloc(out + TD_BYTES_PAD))) {
		td_fail(TD_ENOMEM, "section 'words': %llu bytes", (unsigned long long)out);
		goto fail;
	}
	/* A word of at most 32 bytes whose prefix is at most 32 is built in
	 * two 16-byte registers: the previous word's (lo, hi) where a lane is
	 * below k, else the 32 bytes at its rest's start less k (its rest then
	 * lands at lane k; at >= k, as every word before took 2 bytes more
	 * than its length), and stored whole (lanes past its length are
	 * overwritten by the next word or are padding). Copying the prefix
	 * back out of w instead would load what the previous word's two
	 * overlapping stores just wrote, which the CPU cannot forward: a stall
	 * a word. Longer words go through w, 16 bytes at a time. */
	const v16u iota0 = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 }, iota1 = iota0 + 16;
	v16u lo = { 0 }, hi = { 0 };
	at = 0;
	for (uint64_t i = 0, o = 0, prev = 0; i < a->W; i++) {
		const uint64_t k = hd ? fc[at] : pl[i];
		uint64_t h;
		memcpy(&h, blob + TD_PACK_HDR + 8 * ((i + 1) / TD_TILE), 8);
		const uint64_t next = TD_TILE_BASE(h) + d[i + 1], len = next - o;
		if (len <= 32 && at + hd + 32 - k <= room) { /* k < len */
			v16u r0, r1;
			memcpy(&r0, fc + at + hd - k, 16);
			memcpy(&r1, fc + at + hd + 16 - k, 16);
			const v16u kv = (v16u){ 0 } + (uint8_t)k, m0 = (v16u)(iota0 < kv), m1 = (v16u)(iota1 < kv);
			lo = (lo & m0) | (r0 & ~m0);
			hi = (hi & m1) | (r1 & ~m1);
			memcpy(w + o, &lo, 16);
			memcpy(w + o + 16, &hi, 16);
		} else {
			/* 16 bytes at a time (no call for a few bytes): w has
			 * TD_BYTES_PAD bytes past its end, and a word starts
			 * at least its predecessor's length (>= k) after it,
			 * so a move never reads what this word's earlier moves
			 * wrote. A move of the prefix may overlap itself (a
			 * predecessor shorter than 16 bytes): it goes through
			 * a register, loaded before stored. */
			for (uint64_t j = 0; j < k; j += 16) { /* k > 0 only after a word */
				uint8_t t[16];
				memcpy(t, w + prev + j, 16);
				memcpy(w + o + j, t, 16);
			}
			for (uint64_t j = k; j < len; j += 16) {
				uint64_t c = len - j < 16 ? len - j : 16;
				if (at + hd + (j - k) + 16 <= room)
					memcpy(w + o + j, fc + at + hd + (j - k), 16);
				else
					memcpy(w + o + j, fc + at + hd + (j - k), c);
			}
			memcpy(&lo, w + o, 16);
			memcpy(&hi, w + o + 16, 16);
		}
		at += len - k + 1 + hd;
		prev = o;
		o = next;
	}
	memset(w + out, 0, TD_BYTES_PAD);
	if (td_pack_view(&a->word_off, blob, blob_bytes)) {
		td_fail(TD_ENOMEM, "section 'word-offsets': %llu values", (unsigned long long)nv);
		goto fail;
	}
	a->word_off32 = out < (UINT64_C(1) << 31) ? d : NULL;
	a->bytes_size[TD_SEC_WORDS] = out;
	a->bytes_size[TD_SEC_WORD_OFF] = blob_bytes;
	atomic_store_explicit(&a->bytes[TD_SEC_WORD_OFF], blob, memory_order_release);
	return w;
fail:
	td_big_free(blob, blob_bytes);
	td_big_free(w, out + TD_BYTES_PAD);
	return NULL;
}

/* The words of WORDS's n bytes at fc (room >= n may be read), interleaved
 * records or (split, TD_SECF_SPLIT) the W prefix lengths first and then the
 * rests with their '\n': one loop each, the layout a constant in it. */
static const uint8_t *unfront(td_archive *a, const uint8_t *fc, uint64_t n, uint64_t room, int split)
{
	if (!split)
		return unfront_as(a, NULL, fc, n, room, 1);
	if (n < a->W) {
		bad(TD_SEC_WORDS, "fewer prefix lengths than words");
		return NULL;
	}
	return unfront_as(a, fc, fc + a->W, n - a->W, room - a->W, 0);
}

/* A coded symbol array in its version 3 form, after checking its checksum.
 * Caller holds lazy_mu. */
static const uint8_t *repack_syms(td_archive *a, unsigned id)
{
	const td_syms *s = id == TD_SEC_ROOT_SYMS ? &a->root_syms : &a->rule_syms;
	if (check_sum(a, id))
		return NULL;
	uint32_t *v = malloc((s->n ? s->n : 1) * sizeof *v);
	td_buf blob = { 0 };
	if (!v) {
		td_fail(TD_ENOMEM, "section '%s': %llu symbols", td_section_name(id), (unsigned long long)s->n);
		return NULL;
	}
	td_scode_decode_all(&s->c, v); /* undecodable symbols read as T + R */
	for (uint64_t i = 0; i < s->n; i++)
		if (v[i] >= a->T + a->R) {
			free(v);
			bad(id, "coded symbols do not decode");
			return NULL;
		}
	int err = td_pack_encode32_quick(v, s->n, &blob);
	free(v);
	if (err) {
		td_fail(TD_ENOMEM, "section '%s': %llu symbols", td_section_name(id), (unsigned long long)s->n);
		td_buf_free(&blob);
		return NULL;
	}
	a->bytes_size[id] = blob.len;
	return blob.p;
}

/* Compressed NAMES decoded up to at least byte hi (all of it: published as
 * bytes[TD_SEC_NAMES]); caller holds lazy_mu. The output buffer is stable
 * (zstd keeps no window of its own) and the frame is fed a step at a time,
 * so a call decodes about what it was asked for. */
static const uint8_t *names_locked(td_archive *a, uint64_t hi)
{
	const unsigned id = TD_SEC_NAMES;
	const td_disk_section *s = a->sec[id];
	const uint64_t n = a->bytes_size[id];
	uint64_t done = atomic_load_explicit(&a->names_done, memory_order_relaxed);
	if (a->names_bad) {
		td_fail(TD_ECORRUPT, "section 'names': zstd frame does not decode");
		return NULL;
	}
	if (!a->names_buf) {
		/* the frame's checksum first: damage is an error, never wrong names */
		if (XXH3_64bits(a->map + s->off, s->size) != s->sum) {
			td_fail(TD_ECORRUPT, "section 'names': checksum mismatch");
			return NULL;
		}
		if (frame_ok(a, id, &a->names_fsz)) {
			a->names_bad = 1;
			return NULL;
		}
		ZSTD_DStream *ds = ZSTD_createDStream();
		uint8_t *buf = malloc(n + TD_BYTES_PAD);
		if (!ds || !buf || ZSTD_isError(ZSTD_DCtx_setParameter(ds, ZSTD_d_stableOutBuffer, 1))) {
			ZSTD_freeDStream(ds);
			free(buf);
			td_fail(TD_ENOMEM, "section 'names': %llu bytes", (unsigned long long)n);
			return NULL;
		}
		a->names_ds = ds;
		a->names_buf = buf;
	}
	const uint64_t fsz = a->names_fsz;
	ZSTD_outBuffer out = { a->names_buf, n, done };
	while (out.pos < hi && out.pos < n) {
		/* feed about what the bytes still wanted take, at the ratio so far */
		const uint64_t ratio = a->names_in ? out.pos / a->names_in + 1 : 4;
		const uint64_t want = (hi < n ? hi : n) - out.pos, feed = want / ratio + 1024;
		ZSTD_inBuffer in = { a->map + s->off, fsz - a->names_in > feed ? a->names_in + feed : fsz, a->names_in };
		const size_t was = out.pos;
		size_t r = ZSTD_decompressStream(a->names_ds, &out, &in);
		int stuck = in.pos == a->names_in && in.pos == fsz && out.pos == was;
		a->names_in = in.pos;
		if (ZSTD_isError(r) || stuck || (r == 0 && out.pos < n)) {
			a->names_bad = 1;
			td_fail(TD_ECORRUPT, "section 'names': zstd frame does not decode (%s)",
				ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short");
			return NULL;
		}
		atomic_store_explicit(&a->names_done, out.pos, memory_order_release);
	}
	if (out.pos >= n && a->names_ds) {
		memset(a->names_buf + n, 0, TD_BYTES_PAD);
		ZSTD_freeDStream(a->names_ds);
		a->names_ds = NULL;
		atomic_store_explicit(&a->bytes[id], a->names_buf, memory_order_release);
	}
	return a->names_buf;
}

const char *td_names(const td_archive *a, uint64_t hi, uint64_t *nb)
{
	*nb = a->bytes_size[TD_SEC_NAMES];
	const uint8_t *p = atomic_load_explicit(&a->bytes[TD_SEC_NAMES], memory_order_acquire);
	if (p)
		return (const char *)p;
	if (!(a->sec[TD_SEC_NAMES]->flags & TD_SECF_ZSTD)) /* stored plain: bytes[] is the mapping */
		return td_archive_bytes(a, TD_SEC_NAMES, nb);
	if (atomic_load_explicit(&a->names_done, memory_order_acquire) >= hi && hi)
		return (const char *)a->names_buf;
	td_archive *m = (td_archive *)a; /* the decoded names are a cache */
	pthread_mutex_lock(&m->lazy_mu);
	p = names_locked(m, hi);
	pthread_mutex_unlock(&m->lazy_mu);
	return (const char *)p;
}

/* The logical bytes of section id, built; caller holds lazy_mu. */
static const uint8_t *build_locked(td_archive *a, unsigned id)
{
	const uint8_t *p = atomic_load_explicit(&a->bytes[id], memory_order_relaxed);
	if (p)
		return p;
	if (id == TD_SEC_WORD_OFF) {
		/* built with the words */
		if (!build_locked(a, TD_SEC_WORDS))
			return NULL;
		return atomic_load_explicit(&a->bytes[id], memory_order_relaxed);
	}
	if (id == TD_SEC_NAMES && (a->sec[id]->flags & TD_SECF_ZSTD)) {
		p = names_locked(a, UINT64_MAX);
		return p && atomic_load_explicit(&a->bytes[id], memory_order_relaxed) ? p : NULL;
	} else if (id == TD_SEC_ROOT_SYMS || id == TD_SEC_RULE_SYMS) {
		p = repack_syms(a, id);
	} else if (id == TD_SEC_WORDS && a->version >= 4) {
		/* front-coded words, stored as a zstd frame or (tools) plain */
		const td_disk_section *x = a->sec[id];
		int framed = (x->flags & TD_SECF_ZSTD) != 0;
		const uint8_t *fc = framed ? decode_frame(a, id, 1) : check_sum(a, id) ? NULL : a->map + x->off;
		const uint64_t fc_bytes = a->bytes_size[id]; /* unfront sets the plain size */
		const uint64_t room = framed ? fc_bytes + TD_BYTES_PAD : (uint64_t)(a->map + a->size - fc);
		p = fc ? unfront(a, fc, fc_bytes, room, (x->flags & TD_SECF_SPLIT) != 0) : NULL;
		if (framed)
			td_big_free(fc, fc_bytes + TD_BYTES_PAD);
	} else {
		p = decode_frame(a, id, 0);
		/* the first use's helper may have published it meanwhile */
		const uint8_t *none = NULL;
		if (p && !atomic_compare_exchange_strong(&a->bytes[id], &none, p)) {
			free((void *)p);
			return none;
		}
		return p;
	}
	if (p)
		atomic_store_explicit(&a->bytes[id], p, memory_order_release);
	return p;
}

const void *td_archive_bytes(const td_archive *a, unsigned id, uint64_t *size)
{
	if (id == 0 || id >= TD_SEC_MAX) {
		td_fail(TD_EINVAL, "no section %u", id);
		return NULL;
	}
	const uint8_t *p = atomic_load_explicit(&a->bytes[id], memory_order_acquire);
	if (!p) {
		td_archive *m = (td_archive *)a; /* a decoded copy is a cache */
		pthread_mutex_lock(&m->lazy_mu);
		p = build_locked(m, id);
		pthread_mutex_unlock(&m->lazy_mu);
	}
	*size = p ? a->bytes_size[id] : 0;
	return p;
}

const td_pack *td_word_freq_load(const td_archive *a)
{
	uint64_t n;
	const void *p = td_archive_bytes(a, TD_SEC_WORD_FREQ, &n);
	if (!p)
		return NULL;
	td_archive *m = (td_archive *)a;
	const td_pack *r = &a->word_freq;
	pthread_mutex_lock(&m->lazy_mu);
	if (!atomic_load_explicit(&a->word_freq_ready, memory_order_relaxed)) {
		td_pack v;
		if (view_bytes(m, TD_SEC_WORD_FREQ, &v, p, n) != TD_OK || v.n != a->W) {
			bad(TD_SEC_WORD_FREQ, "malformed packed array");
			r = NULL;
		} else {
			m->word_freq = v;
			atomic_store_explicit(&m->word_freq_ready, 1, memory_order_release);
		}
	}
	pthread_mutex_unlock(&m->lazy_mu);
	return r;
}

static int check_sections(td_archive *a)
{
	const td_disk_header *h = (const td_disk_header *)a->map;
	if (memcmp(h->magic, TD_MAGIC, TD_MAGIC_LEN))
		return td_fail(TD_EFORMAT, "bad magic number");
	if (h->version < TD_VERSION_MIN || h->version > TD_VERSION_MAX)
		return td_fail(TD_EVERSION, "archive version %u, this build reads versions %u to %u", h->version,
			       TD_VERSION_MIN, TD_VERSION_MAX);
	if (h->header_sum != XXH3_64bits(h, offsetof(td_disk_header, header_sum)))
		return td_fail(TD_ECORRUPT, "header checksum mismatch");
	if (h->header_size != sizeof *h)
		return td_fail(TD_ECORRUPT, "unexpected header size %u", h->header_size);
	if (h->file_size > a->size)
		return td_fail(TD_ETRUNC, "archive has %llu bytes, header says %llu",
			       (unsigned long long)a->size, (unsigned long long)h->file_size);
	if (h->file_size < a->size)
		return td_fail(TD_ECORRUPT, "%llu bytes of trailing garbage",
			       (unsigned long long)(a->size - h->file_size));
	if (h->nsections == 0 || h->nsections > 256 || h->sectab_off > a->size ||
	    (a->size - h->sectab_off) / sizeof(td_disk_section) < h->nsections || (h->sectab_off & 7))
		return td_fail(TD_ECORRUPT, "section table out of bounds");
	a->version = h->version;
	const td_disk_section *tab = (const td_disk_section *)(a->map + h->sectab_off);
	if (h->sectab_sum != XXH3_64bits(tab, h->nsections * sizeof *tab))
		return td_fail(TD_ECORRUPT, "section table checksum mismatch");
	for (uint32_t i = 0; i < h->nsections; i++) {
		const td_disk_section *s = &tab[i];
		if (s->off > a->size || s->size > a->size - s->off || (s->off & 7) || s->off < sizeof *h)
			return bad(s->id, "out of bounds");
		if (s->flags & ~(h->version >= 2 ? TD_SECF_ZSTD : 0u) &
		    ~(h->version >= 4 && s->id == TD_SEC_WORDS ? TD_SECF_SPLIT : 0u))
			return bad(s->id, "unknown section flags");
		if (s->id < TD_SEC_MAX && s->id > 0) {
			if (a->sec[s->id])
				return bad(s->id, "appears twice");
			a->sec[s->id] = s;
		} else if (h->version >= TD_VERSION_SHARDED && s->id >= TD_SEC5_SHARDS && s->id < TD_SEC5_SHARDS + TD_SEC5_N) {
			if (a->sec5[s->id - TD_SEC5_SHARDS])
				return td_fail(TD_ECORRUPT, "shard section %u appears twice", s->id);
			a->sec5[s->id - TD_SEC5_SHARDS] = s;
		} else if (h->version == TD_VERSION && s->id == TD_SEC_POSTINGS) {
			if (a->post)
				return td_fail(TD_ECORRUPT, "section 'postings' appears twice");
			a->post = s;
		} else if (h->version >= TD_VERSION_SHARDED && s->id == TD_SEC5_FUZZY) {
			if (a->sec_fz)
				return td_fail(TD_ECORRUPT, "fuzzy index section %u appears twice", s->id);
			a->sec_fz = s;
		} else if (h->version >= TD_VERSION_SHARDED && s->id == TD_SEC5_ATAB) {
			if (a->sec_at)
				return td_fail(TD_ECORRUPT, "analytics tables section %u appears twice", s->id);
			a->sec_at = s;
		} else if (h->version >= TD_VERSION_SHARDED && s->id == TD_SEC5_VECTOR) {
			if (a->sec_vt)
				return td_fail(TD_ECORRUPT, "root vector section %u appears twice", s->id);
			a->sec_vt = s;
		}
	}
	for (unsigned id = 1; id < TD_SEC_MAX; id++)
		if (!a->sec[id])
			return bad(id, "missing");
	return TD_OK;
}

static int check_sum(const td_archive *a, unsigned id)
{
	const td_disk_section *s = a->sec[id];
	if (XXH3_64bits(a->map + s->off, s->size) != s->sum)
		return bad(id, "checksum mismatch");
	return TD_OK;
}

/* Sections checked at open: the small ones every lookup reads (entry
 * tables: a few bytes per file, so well under a millisecond even for 100k
 * files). The rest are checked before the first read (td_data_check) or,
 * stored compressed, when decoded. */
static int checked_at_open(unsigned id)
{
	return id == TD_SEC_META || id == TD_SEC_RULE_GROUPS || (id >= TD_SEC_E_NAMEOFF && id <= TD_SEC_E_NWORDS);
}

void td_sec_mark_ok(const td_archive *a, unsigned id)
{
	atomic_fetch_or_explicit(&((td_archive *)a)->sec_ok, UINT32_C(1) << id, memory_order_release);
}

/* Whether section id's checksum is known right (no hashing). */
static int sec_known_ok(const td_archive *a, unsigned id)
{
	return atomic_load_explicit(&a->sums_ok, memory_order_acquire) ||
	       (atomic_load_explicit(&a->sec_ok, memory_order_acquire) >> id & 1u);
}

/* The checksums of the sections read in place that are not known right
 * yet (each marked once it matched): 0, or the first damaged one. */
static unsigned sums_in_place(const td_archive *a)
{
	for (unsigned id = 1; id < TD_SEC_MAX; id++) {
		const td_disk_section *s = a->sec[id];
		if (checked_at_open(id) || (s->flags & TD_SECF_ZSTD) || sec_known_ok(a, id))
			continue;
		if (XXH3_64bits(a->map + s->off, s->size) != s->sum)
			return id;
		td_sec_mark_ok(a, id);
	}
	return 0;
}

/* Version 4's first use besides the words, on a helper thread while the
 * first reader rebuilds them (the longest part): the checksums of the
 * sections read in place, then what every read needs next, the other
 * tokens (decoded without lazy_mu, which the words' build holds) and the
 * coded sequences' decoding tables (once their sections matched). */
typedef struct first_use {
	const td_archive *a;
	unsigned bad; /* the damaged section, or 0 */
} first_use;

static void *first_use_run(void *arg)
{
	first_use *f = arg;
	const td_archive *a = f->a;
	f->bad = sums_in_place(a);
	if (!f->bad) {
		if (!atomic_load_explicit(&a->bytes[TD_SEC_OTHER], memory_order_acquire) &&
		    (a->sec[TD_SEC_OTHER]->flags & TD_SECF_ZSTD)) {
			const uint8_t *p = decode_frame(a, TD_SEC_OTHER, 0), *none = NULL;
			/* published unless a reader decoded it meanwhile (build_locked
			 * publishes the same way) */
			if (p && !atomic_compare_exchange_strong(&((td_archive *)a)->bytes[TD_SEC_OTHER], &none, p))
				free((void *)p);
		}
		td_scode_prepare(&a->root_syms.c);
		td_scode_prepare(&a->rule_syms.c);
	}
	return NULL;
}

int td_data_check_slow(const td_archive *a)
{
	td_archive *m = (td_archive *)a; /* the result is a cache */
	/* One check for all the first readers; a background
	 * td_archive_check_sums never holds this lock (it marks sections in
	 * sec_ok, which the loop skips), so no reader waits for it. */
	pthread_mutex_lock(&m->check_mu);
	if (atomic_load_explicit(&a->data_state, memory_order_relaxed) == 0) {
		int state = 1;
		/* version 4: the word offsets every terminal read needs come
		 * from the words, rebuilt here while a helper thread does the
		 * rest of a first read's work (first_use_run); without one, the
		 * checksums first and the rest on demand */
		first_use f = { a, 0 };
		pthread_t th;
		const int helped = a->version >= 4 && a->rule_syms.coded && pthread_create(&th, NULL, first_use_run, &f) == 0;
		if (!helped && (m->data_bad = sums_in_place(a)))
			state = -1;
		if (state == 1 && a->version >= 4) {
			pthread_mutex_lock(&m->lazy_mu);
			if (!build_locked(m, TD_SEC_WORDS)) {
				m->data_bad = TD_SEC_WORDS;
				state = -1;
			}
			pthread_mutex_unlock(&m->lazy_mu);
		}
		if (helped) {
			pthread_join(th, NULL);
			if (f.bad) { /* a damaged section is named before the words */
				m->data_bad = f.bad;
				state = -1;
			}
		}
		atomic_store_explicit(&m->data_state, state, memory_order_release);
	}
	int state = atomic_load_explicit(&a->data_state, memory_order_relaxed);
	pthread_mutex_unlock(&m->check_mu);
	if (state == 1)
		return TD_OK;
	if (a->data_bad == TD_SEC_WORDS)
		return td_fail(TD_ECORRUPT, "section 'words': does not decode");
	return td_fail(TD_ECORRUPT, "section '%s': checksum mismatch", td_section_name(a->data_bad));
}

int td_data_check_sums(const td_archive *a)
{
	int state = atomic_load_explicit(&a->data_state, memory_order_acquire);
	if (state == 1)
		return TD_OK;
	/* each section hashed at most once more (marked as it matches); a
	 * damaged one goes through the whole check, which names it */
	if (state == -1 || sums_in_place(a))
		return td_data_check_slow(a);
	return TD_OK;
}

int td_archive_check_data(const td_archive *a)
{
	if (td_sharded(a))
		return td_shard_check_data(a);
	return td_data_check(a);
}

static int setup(td_archive *a, unsigned flags)
{
	int err = check_sections(a);
	if (err)
		return err;
	for (unsigned id = 1; id < TD_SEC_MAX; id++)
		if (((flags & TD_OPEN_VERIFY) || checked_at_open(id)) && (err = check_sum(a, id)))
			return err;
	if (a->sec[TD_SEC_META]->size < sizeof(td_disk_meta))
		return bad(TD_SEC_META, "too short");
	memcpy(&a->meta, a->map + a->sec[TD_SEC_META]->off, sizeof a->meta);
	const td_disk_meta *m = &a->meta;
	if (m->nentries == 0 || m->nentries >= UINT32_MAX || m->nwords >= UINT32_MAX / 4 ||
	    m->nother >= UINT32_MAX / 4 || m->nrules >= UINT32_MAX / 2 || m->max_depth > TD_MAXDEPTH ||
	    m->sample_shift == 0 || m->sample_shift > 16)
		return bad(TD_SEC_META, "counts out of range");
	a->W = m->nwords;
	a->S = m->nother;
	a->R = m->nrules;
	a->T = 2 * a->W + a->S;
	a->shift = (unsigned)m->sample_shift;
	uint64_t ne = m->nentries;
	if ((err = view(a, TD_SEC_E_NAMEOFF, &a->e_nameoff, ne + 1)) ||
	    (err = view(a, TD_SEC_E_PARENT, &a->e_parent, ne)) || (err = view(a, TD_SEC_E_MODE, &a->e_mode, ne)) ||
	    (err = view(a, TD_SEC_E_MTIME, &a->e_mtime, ne)) ||
	    (err = view(a, TD_SEC_E_MTIMENS, &a->e_mtimens, ne)) || (err = view(a, TD_SEC_E_SIZE, &a->e_size, ne)) ||
	    (err = view(a, TD_SEC_E_CHILD, &a->e_child, ne + 1)) ||
	    (err = view(a, TD_SEC_E_ROOT, &a->e_root, ne + 1)) ||
	    (err = view(a, TD_SEC_E_GSTART, &a->e_gstart, ne + 1)) ||
	    (err = view(a, TD_SEC_E_NWORDS, &a->e_nwords, ne)) ||
	    (a->version < 4 && (err = view(a, TD_SEC_WORD_OFF, &a->word_off, a->W + 1))) ||
	    (err = view(a, TD_SEC_OTHER_OFF, &a->other_off, a->S + 1)) ||
	    (err = view_syms(a, TD_SEC_RULE_SYMS, &a->rule_syms, m->nrulesyms, 1)) ||
	    (err = view(a, TD_SEC_RULE_LEN, &a->rule_len, a->R)) ||
	    (err = view_syms(a, TD_SEC_ROOT_SYMS, &a->root_syms, m->nroot, 0)) ||
	    (err = view(a, TD_SEC_ROOT_SAMPLES, &a->root_samples, m->nsamples)) ||
	    (err = view(a, TD_SEC_RULE_SAMPLES, &a->rule_samples, m->nrulesamples)))
		return err;
	if (m->nsamples < (m->nroot + (UINT64_C(1) << a->shift) - 1) >> a->shift)
		return bad(TD_SEC_ROOT_SAMPLES, "too few samples");
	/* Only byte sections and WORD_FREQ (read by counts alone) may be
	 * stored compressed: the rest are read in place. */
	if (a->version >= 4 && a->sec[TD_SEC_WORD_OFF]->size != 0)
		return bad(TD_SEC_WORD_OFF, "not empty in a version 4 archive");
	for (unsigned id = 1; id < TD_SEC_MAX; id++) {
		if ((a->sec[id]->flags & TD_SECF_ZSTD) && !td_sec_zstd(id))
			return bad(id, "compressed, which this section may not be");
		if ((err = lay_out(a, id, flags)))
			return err;
	}
	if (!(a->sec[TD_SEC_WORD_FREQ]->flags & TD_SECF_ZSTD)) {
		if ((err = view(a, TD_SEC_WORD_FREQ, &a->word_freq, a->W)))
			return err;
		atomic_init(&a->word_freq_ready, 1);
	}
	/* Every checksum matched at open: what td_data_check would do first
	 * is done (version 4: the word offsets come from the words). */
	if (flags & TD_OPEN_VERIFY) {
		if (a->version >= 4 && !build_locked(a, TD_SEC_WORDS))
			return TD_ECORRUPT;
		atomic_init(&a->data_state, 1);
	}
	/* Rule groups: ascending first_rule from 0, symbols inside RULE_SYMS. */
	const td_disk_section *gs = a->sec[TD_SEC_RULE_GROUPS];
	a->groups = (const td_disk_group *)(a->map + gs->off);
	a->ngroups = m->ngroups;
	if (gs->size / sizeof(td_disk_group) < a->ngroups || (a->R && !a->ngroups))
		return bad(TD_SEC_RULE_GROUPS, "wrong size");
	for (uint64_t g = 0; g < a->ngroups; g++) {
		const td_disk_group *x = &a->groups[g];
		uint64_t end = g + 1 < a->ngroups ? a->groups[g + 1].first_rule : a->R;
		uint64_t per = ((uint64_t)x->len + (UINT64_C(1) << a->shift) - 1) >> a->shift;
		/* written so that no sum or product can wrap around */
		if ((g == 0 && x->first_rule != 0) || x->first_rule >= end || x->len == 0 ||
		    x->first_sym > m->nrulesyms || end - x->first_rule > (m->nrulesyms - x->first_sym) / x->len ||
		    (x->len > (UINT64_C(1) << a->shift) &&
		     (x->first_sample > m->nrulesamples ||
		      end - x->first_rule > (m->nrulesamples - x->first_sample) / per)))
			return bad(TD_SEC_RULE_GROUPS, "inconsistent group");
	}
	/* The tree's shape is read on every lookup: check the cheap parts. */
	if (td_pack_get(&a->e_child, 0) != 1 || td_pack_get(&a->e_child, ne) != ne)
		return bad(TD_SEC_E_CHILD, "children ranges do not cover the tree");
	if (td_pack_get(&a->e_root, ne) != m->nroot || td_pack_get(&a->e_nameoff, ne) > a->bytes_size[TD_SEC_NAMES])
		return bad(TD_SEC_E_ROOT, "ranges do not match the root");
	/* Hostile names or shapes are refused here, once, not met by lookups;
	 * a large tree a directory at a time, before anything in it is
	 * answered (td_tree_vouch): open stays O(1) in the number of files. */
	int terr = (flags & TD_OPEN_VERIFY) || (!(flags & TD_OPEN_LAZY_TREE) && ne <= td_tree_eager_max)
			   ? td_tree_check(a)
			   : td_tree_lazy_setup(a);
	if (terr)
		return terr;
	if (a->version >= TD_VERSION_SHARDED)
		return td_shard_setup(a, flags);
	return TD_OK;
}

int td_archive_open(const char *path, unsigned flags, td_archive **out)
{
	*out = NULL;
	td_archive *a = calloc(1, sizeof *a);
	if (!a)
		return TD_ENOMEM;
	pthread_mutex_init(&a->lazy_mu, NULL);
	pthread_mutex_init(&a->check_mu, NULL);
	pthread_mutex_init(&a->flat_mu, NULL);
	/* O_NONBLOCK: a FIFO given as the archive is refused below instead of
	 * blocking the open until a writer comes (no effect on regular files) */
	a->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (a->fd < 0) {
		int e = errno;
		free(a);
		return td_fail(e == ENOENT ? TD_ENOENT : TD_EIO, "%s", strerror(e));
	}
	struct stat st;
	if (fstat(a->fd, &st)) {
		int e = errno;
		close(a->fd);
		free(a);
		return td_fail(TD_EIO, "%s", strerror(e));
	}
	if (S_ISDIR(st.st_mode)) {
		close(a->fd);
		free(a);
		return td_fail(TD_EISDIR, "is a directory");
	}
	if (!S_ISREG(st.st_mode)) {
		close(a->fd);
		free(a);
		return td_fail(TD_EFORMAT, "not a regular file");
	}
	if ((uint64_t)st.st_size < sizeof(td_disk_header)) {
		close(a->fd);
		free(a);
		if (st.st_size >= TD_MAGIC_LEN) {
			char m[TD_MAGIC_LEN];
			int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
			ssize_t k = fd >= 0 ? read(fd, m, sizeof m) : -1;
			if (fd >= 0)
				close(fd);
			if (k == TD_MAGIC_LEN && !memcmp(m, TD_MAGIC, TD_MAGIC_LEN))
				return td_fail(TD_ETRUNC, "only %lld bytes, shorter than the header",
					       (long long)st.st_size);
		}
		return td_fail(TD_EFORMAT, "too short to be a tadoc archive (%lld bytes)", (long long)st.st_size);
	}
	a->size = (uint64_t)st.st_size;
	a->rcache_budget = TD_RCACHE_DEFAULT;
	void *m = mmap(NULL, a->size, PROT_READ, MAP_SHARED | ((flags & TD_OPEN_POPULATE) ? MAP_POPULATE : 0),
		       a->fd, 0);
	if (m == MAP_FAILED) {
		int e = errno;
		close(a->fd);
		free(a);
		return td_fail(TD_EIO, "mmap: %s", strerror(e));
	}
	a->map = m;
	int err = setup(a, flags);
	if (err) {
		td_archive_close(a);
		return err;
	}
	*out = a;
	return TD_OK;
}

int td_archive_open_mem(const uint8_t *map, uint64_t size, unsigned flags, td_archive **out)
{
	*out = NULL;
	if (size < sizeof(td_disk_header))
		return td_fail(TD_ETRUNC, "shard of %llu bytes, shorter than a header", (unsigned long long)size);
	td_archive *a = calloc(1, sizeof *a);
	if (!a)
		return TD_ENOMEM;
	pthread_mutex_init(&a->lazy_mu, NULL);
	pthread_mutex_init(&a->check_mu, NULL);
	pthread_mutex_init(&a->flat_mu, NULL);
	a->fd = -1;
	a->borrowed = 1;
	a->map = map;
	a->size = size;
	a->rcache_budget = TD_RCACHE_DEFAULT;
	int err = setup(a, flags);
	if (!err && a->version >= TD_VERSION_SHARDED)
		err = td_fail(TD_ECORRUPT, "a shard is itself sharded");
	if (err) {
		td_archive_close(a);
		return err;
	}
	*out = a;
	return TD_OK;
}

void td_archive_close(td_archive *a)
{
	if (!a)
		return;
	td_rcache_free(a);
	td_flat_free(a);
	td_fuzzy_free(a);
	free(atomic_load(&a->scope_roots));
	/* decoded copies of compressed sections (calloc left the rest NULL) */
	for (unsigned id = 1; id < TD_SEC_MAX; id++)
		if (a->sec[id] && on_heap(a, id)) {
			if (id == TD_SEC_WORDS && a->version >= 4) /* unfront */
				td_big_free(atomic_load(&a->bytes[id]), a->bytes_size[id] + TD_BYTES_PAD);
			else if (id == TD_SEC_WORD_OFF) /* unfront */
				td_big_free(atomic_load(&a->bytes[id]), a->bytes_size[id]);
			else
				free((void *)atomic_load(&a->bytes[id]));
		}
	td_scode_free(&a->root_syms.c);
	td_scode_free(&a->rule_syms.c);
	for (unsigned id = 1; id < TD_SEC_MAX; id++)
		free(a->pack_owned[id]);
	td_shard_free(a);
	free(a->dir_ok);
	if (!atomic_load(&a->bytes[TD_SEC_NAMES])) /* names decoded in part */
		free(a->names_buf);
	ZSTD_freeDStream(a->names_ds);
	pthread_mutex_destroy(&a->lazy_mu);
	pthread_mutex_destroy(&a->check_mu);
	pthread_mutex_destroy(&a->flat_mu);
	if (a->map && !a->borrowed)
		munmap((void *)a->map, a->size);
	if (a->fd >= 0)
		close(a->fd);
	free(a);
}

int td_archive_same_file(const td_archive *a, const char *path)
{
	td_disk_header h;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	struct stat st;
	int same = fstat(fd, &st) == 0 && (uint64_t)st.st_size == a->size &&
		   pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h && memcmp(&h, a->map, sizeof h) == 0;
	close(fd);
	return same;
}

void td_archive_set_cache(td_archive *a, uint64_t bytes)
{
	a->rcache_budget = bytes;
	if (td_sharded(a))
		td_shard_set_cache(a, bytes);
}

uint32_t td_archive_nentries(const td_archive *a)
{
	return (uint32_t)a->meta.nentries;
}

int td_archive_stat(const td_archive *a, td_entry e, td_stat *st)
{
	if (e >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no entry %u", e);
	int err = td_tree_vouch(a, e);
	if (err)
		return err;
	st->mode = (mode_t)td_pack_get(&a->e_mode, e);
	st->size = td_pack_get(&a->e_size, e);
	st->mtime_sec = (int64_t)td_pack_get(&a->e_mtime, e) - TD_MTIME_BIAS;
	st->mtime_nsec = (uint32_t)td_pack_get(&a->e_mtimens, e);
	st->parent = (td_entry)td_pack_get(&a->e_parent, e);
	st->nwords = td_pack_get(&a->e_nwords, e);
	return TD_OK;
}

const void *td_archive_section(const td_archive *a, unsigned id, uint64_t *size)
{
	if (id == 0 || id >= TD_SEC_MAX || !a->sec[id])
		return NULL;
	*size = a->sec[id]->size;
	return a->map + a->sec[id]->off;
}

/* Entry e's name (e < nentries), or NULL. Unless `checked` (e vouched
 * for: the tree check passed its name), a name that could escape or
 * confuse a path is refused here too. */
static const char *name_get(const td_archive *a, td_entry e, size_t *len, int checked)
{
	uint64_t lo = td_pack_get(&a->e_nameoff, e), hi = td_pack_get(&a->e_nameoff, e + 1);
	if (lo > hi || hi > a->bytes_size[TD_SEC_NAMES] || hi - lo > TD_MAXNAME)
		return NULL;
	uint64_t nb;
	const char *names = td_names(a, hi, &nb);
	if (!names)
		return NULL;
	const char *p = names + lo;
	size_t n = hi - lo;
	if (!checked && e != 0 &&
	    (n == 0 || memchr(p, '/', n) || memchr(p, '\0', n) || (n == 1 && p[0] == '.') ||
	     (n == 2 && p[0] == '.' && p[1] == '.')))
		return NULL;
	*len = n;
	return p;
}

/* Entry e's name (e < nentries) without td_tree_vouch, or NULL. */
static const char *name_raw(const td_archive *a, td_entry e, size_t *len)
{
	return name_get(a, e, len, 0);
}

int td_archive_parent(const td_archive *a, td_entry e, td_entry *parent)
{
	if (e >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no entry %u", e);
	int err = td_tree_vouch(a, e);
	if (!err)
		*parent = (td_entry)td_pack_get(&a->e_parent, e);
	return err;
}

const char *td_archive_name(const td_archive *a, td_entry e, size_t *len)
{
	if (e >= a->meta.nentries || td_tree_vouch(a, e))
		return NULL;
	return name_get(a, e, len, 1);
}

int td_archive_names(const td_archive *a, const td_entry *e, size_t n, td_name_ref *out, size_t *done)
{
	const uint64_t ne = a->meta.nentries;
	size_t i = 0;
	int err = TD_OK;
	/* each entry's parent and name first, its bytes asked for ahead
	 * (entries at random: their names miss the cache independently)... */
	for (; i < n; i++) {
		const td_entry x = e[i];
		size_t len;
		if (x >= ne) {
			err = td_fail(TD_EINVAL, "no entry %u", x);
			break;
		}
		if ((err = td_tree_vouched(a, x)))
			break;
		const char *nm = name_get(a, x, &len, 1);
		if (!nm) {
			err = TD_ECORRUPT; /* td_archive_name says why */
			break;
		}
		__builtin_prefetch(nm);
		out[i] = (td_name_ref){ nm, (uint32_t)len, (td_entry)td_pack_get(&a->e_parent, x), 0 };
	}
	/* ...then read */
	for (size_t j = 0; j < i; j++)
		out[j].esc = td_span_find2(out[j].name, out[j].len, '\\', '\n') < out[j].len;
	*done = i;
	return err;
}

int td_archive_children(const td_archive *a, td_entry e, td_entry *first, uint32_t *count)
{
	if (e >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no entry %u", e);
	if (!S_ISDIR(td_pack_get(&a->e_mode, e)))
		return TD_ENOTDIR;
	int err = td_tree_dir(a, e);
	if (err)
		return err;
	uint64_t lo = td_pack_get(&a->e_child, e), hi = td_pack_get(&a->e_child, e + 1);
	if (lo > hi || hi > a->meta.nentries || lo <= e)
		return td_fail(TD_ECORRUPT, "entry %u: bad children range", e);
	*first = (td_entry)lo;
	*count = (uint32_t)(hi - lo);
	return TD_OK;
}

int td_archive_lookup(const td_archive *a, td_entry dir, const char *name, size_t len, td_entry *out)
{
	td_entry first;
	uint32_t n;
	int err = td_archive_children(a, dir, &first, &n);
	if (err)
		return err;
	uint32_t lo = 0, hi = n;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		size_t ml;
		const char *mn = name_raw(a, first + mid, &ml);
		if (!mn)
			return td_fail(TD_ECORRUPT, "entry %u: bad name", first + mid);
		int c = memcmp(mn, name, ml < len ? ml : len);
		if (c == 0)
			c = (ml > len) - (ml < len);
		if (c == 0) {
			*out = first + mid;
			return TD_OK;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return TD_ENOENT;
}

int td_archive_lookup_path(const td_archive *a, const char *path, td_entry *out)
{
	td_entry cur = TD_ROOT;
	const char *p = path;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (!(n == 1 && p[0] == '.')) {
			int err = td_archive_lookup(a, cur, p, n, &cur);
			if (err)
				return err;
		}
		p += n;
	}
	*out = cur;
	return TD_OK;
}

static int path_build(const td_archive *a, td_entry e, char *buf, size_t cap, int checked);

int td_archive_path(const td_archive *a, td_entry e, char *buf, size_t cap)
{
	if (e >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no entry %u", e);
	int err = td_tree_vouch(a, e);
	return err ? err : path_build(a, e, buf, cap, 1);
}

int td_path_raw(const td_archive *a, td_entry e, char *buf, size_t cap)
{
	if (e >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no entry %u", e);
	return path_build(a, e, buf, cap, 0);
}

/* td_path_raw; `checked`: e is vouched for (its names and parents passed
 * the tree check). */
static int path_build(const td_archive *a, td_entry e, char *buf, size_t cap, int checked)
{
	/* Build backwards from the end of buf, then move to the front. */
	size_t at = cap;
	if (at == 0)
		return TD_ERANGE;
	buf[--at] = 0;
	unsigned guard = 0;
	while (e != TD_ROOT) {
		size_t n;
		const char *nm = name_get(a, e, &n, checked);
		if (!nm || ++guard > 4096)
			return td_fail(TD_ECORRUPT, "entry %u: bad name or parent chain", e);
		if (n + (at < cap - 1) > at)
			return TD_ERANGE;
		if (at < cap - 1)
			buf[--at] = '/';
		at -= n;
		memcpy(buf + at, nm, n);
		td_entry p = (td_entry)td_pack_get(&a->e_parent, e);
		if (p >= e)
			return td_fail(TD_ECORRUPT, "entry %u: parent %u does not come first", e, p);
		e = p;
	}
	size_t len = cap - 1 - at;
	memmove(buf, buf + at, len + 1);
	return (int)len;
}

uint32_t td_archive_version(const td_archive *a)
{
	return a->version;
}

uint64_t td_archive_shard_size(const td_archive *a)
{
	return a->version == TD_VERSION_SHARDED ? a->meta.shard_size : 0;
}

void td_archive_info(const td_archive *a, td_info *o)
{
	memset(o, 0, sizeof *o);
	o->archive_bytes = a->size;
	o->nentries = a->meta.nentries;
	for (uint64_t e = 0; e < a->meta.nentries; e++) {
		mode_t m = (mode_t)td_pack_get(&a->e_mode, e);
		o->nfiles += S_ISREG(m);
		if (S_ISREG(m))
			o->total_bytes += td_pack_get(&a->e_size, e);
		o->ndirs += S_ISDIR(m);
		o->nsymlinks += S_ISLNK(m);
	}
	o->nwords = a->W;
	o->nother = a->S;
	o->total_words = a->meta.total_words;
	o->nrules = a->R;
	o->nrulesyms = a->meta.nrulesyms;
	o->nroot = a->meta.nroot;
	o->max_depth = a->meta.max_depth;
	o->build_time = a->meta.build_time;
	for (unsigned id = 1; id < TD_SEC_MAX; id++)
		o->section_bytes[id] = a->sec[id]->size;
	if (td_sharded(a))
		td_shard_fill_info(a, o);
}
