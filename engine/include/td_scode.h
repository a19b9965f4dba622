/* td_scode: entropy-coded symbol arrays (the root and rule sequences of format 4), decoded in place a tile at a time. */
#ifndef TD_SCODE_H
#define TD_SCODE_H

#include <stdatomic.h>
#include <stdint.h>

#include "td_pack.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Why. FOR tiles (format 3) spend several bits a symbol more than the
 * sequences' order-0 entropy. A prefix code per context, with rare symbols
 * escaped to a fixed-width id, comes within 2% of that entropy and keeps
 * tile-level random access (engine/README.md, decision 5).
 *
 * On-disk layout (little-endian, every part 8-byte aligned):
 *
 *   u64 n             number of symbols
 *   u64 alphabet      every symbol is < alphabet (< 2^32)
 *   u32 c1, c2        class bounds (below; c1 <= c2 <= alphabet)
 *   u32 tile_shift    2^tile_shift symbols a tile (TD_SC_MINSHIFT..TD_SC_MAXSHIFT)
 *   u32 raw_bits      width of an escaped symbol (1..32)
 *   u64 tiles_bytes   bytes of the tile table
 *   u64 desc_bytes    bytes of the code description
 *   u64 data_bytes    bytes of coded data, 8 zero bytes of padding included
 *   tile table        a td_pack array of ntiles + 1 values: the bit offset
 *                     in data at which tile t starts (the last: the end)
 *   desc[desc_bytes]  the codes, padded to 8 bytes
 *   data[data_bytes]  the coded symbols, padded to 8 bytes
 *
 * Bits are MSB-first: bit b of a byte string is bit 7 - b % 8 of byte b / 8.
 *
 * Contexts. Symbol i is coded with context 4 when it starts its tile, else
 * with the class of symbol i - 1: 0 or 1 below c1 (its bit 0; a word, and
 * a word followed by ' ', td_format.h), 2 below c2 (an other token), 3 from
 * c2 on (a rule). Each context has a canonical prefix code of at most
 * TD_SC_MAXLEN bits: codes of one length are consecutive numbers, shorter
 * codes come first, and within a length the symbols are grouped by class
 * (0 to 3, then the escape as group 4) and ascend within a group. So the
 * code alone tells the class, which is the next symbol's context: a decoder
 * need not wait for the symbol's table entry to go on. The code covers the
 * symbols frequent in that context and one escape, which is followed by the
 * symbol in raw_bits bits.
 *
 * Description, MSB-first bits, for each context 0..4 in turn:
 *   5 bits      maxlen (0: the context codes nothing)
 *   for L = 1..maxlen, for group g = 0..4: the number of codes of length L
 *               in group g, Elias gamma of n + 1
 *   for each (L, g) with codes: 5 bits k, then its symbols in ascending
 *               order as gaps minus one (the first: value + 1 - 1, then
 *               value - previous - 1), Rice coded with parameter k (the
 *               quotient in unary as one-bits ended by a zero bit, then k
 *               bits); the escape is written as the value `alphabet`.
 *
 * Reading. Opening a view checks the header and tile table bounds (O(1)).
 * The decoding tables (a 2^11-entry look-up table and the symbol list per
 * context, about 100 KB plus 4 bytes a coded symbol) are built on first
 * decode. Where the CPU has AVX-512 (F and BW), td_scode_decode_all and
 * long in-order readers decode 16 tiles in one vector pass, two passes in
 * step (about twice as fast as the scalar loop: contrib/bench/NOTES.md);
 * the symbols are the same, and
 * a tile the vector pass does not decode exactly is decoded again by the
 * scalar loop. A symbol that does not decode (a damaged description or data)
 * reads as `alphabet`, which every reader rejects as out of range; decoding
 * never reads outside the view.
 */

#define TD_SC_HDR 56u
#define TD_SC_NCTX 5u
#define TD_SC_MAXLEN 24u
#define TD_SC_MINSHIFT 3u
#define TD_SC_MAXSHIFT 10u

struct td_sc_tab;

/* A read-only view of a coded symbol array inside a mapping. */
typedef struct td_scode {
	uint64_t n, alphabet, ntiles;
	uint32_t c1, c2;
	unsigned tile_shift, raw_bits;
	td_pack tiles;             /* ntiles + 1 bit offsets into data */
	const uint8_t *desc, *data;
	uint64_t desc_bytes, data_bytes;
	_Atomic(struct td_sc_tab *) tab; /* decoding tables, built on first decode */
	unsigned slot;             /* which of a thread's two tile caches it uses (0 or
	                              1): arrays read together take different ones */
	atomic_uint_fast64_t redecoded; /* symbols td_scode_get/range decoded again */
} td_scode;

/* Point c at the coded array stored in blob[0..size): header and table
 * bounds only, O(1). TD_OK, TD_ETRUNC or TD_ECORRUPT (td_fail detail).
 * The view must be released with td_scode_free. */
int td_scode_view(td_scode *c, const void *blob, uint64_t size);

/* Free the decoding tables (the view itself lies in the caller's memory). */
void td_scode_free(td_scode *c);

/* Build the decoding tables now (the first td_scode_get / range /
 * decode_all builds them otherwise), e.g. on another thread while the
 * first reader does other work. Thread-safe; idempotent. */
void td_scode_prepare(const td_scode *c);

/* Symbol i (< c->n), or c->alphabet when it does not decode. Consecutive
 * calls within one tile cost one look-up: each thread keeps its last
 * decoded tiles in slot c->slot. c->redecoded counts the symbols of tiles
 * decoded so a second time or more (a reader may decide from it to decode
 * the array whole: reading in order decodes each tile once). Thread-safe. */
uint64_t td_scode_get(const td_scode *c, uint64_t i);

/* Symbols [i, i + count) into out (i + count <= c->n), undecodable ones as
 * c->alphabet. Thread-safe. */
void td_scode_range(const td_scode *c, uint64_t i, uint64_t count, uint64_t *out);

/* Every symbol into out[0..n), undecodable ones as c->alphabet: the
 * fastest way through the array (four tiles decoded at once, or 32 by the
 * vector decoder). Thread-safe. */
void td_scode_decode_all(const td_scode *c, uint32_t *out);

/* The symbols of tiles [t, end) (end capped at the tile count) into
 * out[t << tile_shift ..], as td_scode_decode_all does for all of them:
 * threads decoding disjoint tile ranges fill one array. Thread-safe. */
void td_scode_decode_tiles(const td_scode *c, uint64_t t, uint64_t end, uint32_t *out);

/* The same, but tile t's first symbol goes to out[0] (out holds at least
 * (end - t) << tile_shift symbols): a reader going through the array in
 * order decodes a few tiles at a time into a small buffer. Thread-safe. */
void td_scode_decode_span(const td_scode *c, uint64_t t, uint64_t end, uint32_t *out);

/* Whether decoding uses the CPU's vector unit (AVX-512: sixteen tiles in
 * step, td_scode_decode_all), which gives the same symbols as the
 * portable decoder. on = 0 turns it off for the whole process (tests
 * compare the two), 1 turns it back on where the CPU has it. Returns
 * whether it is in use now. */
int td_scode_simd(int on);

/* Check every part: the description builds valid codes, every tile decodes
 * to exactly its bits, every symbol is < alphabet. O(n). TD_OK, TD_ENOMEM
 * or TD_ECORRUPT naming the tile. */
int td_scode_check(const td_scode *c);

/* Encode v[0..n) (each < alphabet < 2^32) with class bounds c1 <= c2 and
 * 2^tile_shift symbols a tile, appended to out (8-byte aligned). Memory:
 * about 24 bytes per alphabet symbol while encoding. TD_OK, TD_ENOMEM,
 * TD_EINVAL (bad parameters) or TD_ELIMIT. */
int td_scode_encode(const uint32_t *v, uint64_t n, uint64_t alphabet, uint32_t c1, uint32_t c2,
		    unsigned tile_shift, td_buf *out);

#ifdef __cplusplus
}
#endif
#endif
