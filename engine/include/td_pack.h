/* td_pack: tile-based bit-packed integer arrays (FOR), read in place from a mapping. */
#ifndef TD_PACK_H
#define TD_PACK_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * On-disk layout of one packed array (all little-endian, 8-byte aligned):
 *
 *   u64 n           number of values
 *   u64 ntiles      ceil(n / TD_TILE)
 *   u64 datasize    bytes of tile data that follow the group table, including
 *                   8 trailing pad bytes so a reader may load 8 bytes anywhere
 *   u64 slope       the line frames' step in 1/65536 units (0: none)
 *   u64             tiles[ntiles]        one header word per tile (below)
 *   u32             groups[ceil(ntiles / 8)], zero-padded to 8 bytes
 *   u8              data[datasize]
 *
 * A tile header word holds, from bit 0: width (6 bits), rel (9), lin (1)
 * and base (48). Value i lives in tile t = i / TD_TILE at slot j = i % TD_TILE:
 *   value = base + (lin ? (slope * j) >> 16 : 0)
 *         + bits(data + 16 * (groups[t / 8] + rel), j * width, width)
 * A tile of width w holds TD_TILE*w bits = 16*w bytes, so data offsets are
 * kept in 16-byte units: each group of 8 tiles stores where its data starts
 * and each tile its distance from there (rel < 8 * 56), so a tile costs 8
 * bytes of header instead of 16. Width 0 means no data (every residual 0);
 * width <= 56; base < 2^48.
 *
 * This is FOR ("frame of reference") coding in 128-value tiles, with a
 * linear frame for ascending arrays (offsets, samples): the encoder gives an
 * ascending array a slope (of the array's mean step and a few quantiles of
 * its tiles' own steps, the one whose tiles take the fewest bits) and a
 * tile lin = 1 when the residuals from the line are narrower than from a
 * flat base, which for offset arrays saves 3-5 bits a value. The GPU kernels decode exactly the
 * same bytes.
 *
 * Archive versions 1 and 2 used 16-byte tile headers (td_disk_tile_v1: base,
 * off16, width) and no slope; td_pack_view_v1 converts such a tile table
 * into the layout above in a heap buffer, so one decoder serves both.
 */
#define TD_TILE 128u
#define TD_PACK_MAXW 56u
#define TD_PACK_GROUP 8u                       /* tiles per group offset */
#define TD_PACK_MAXBASE ((UINT64_C(1) << 48) - 1)
#define TD_PACK_HDR 32u                        /* the four header words */

/* Fields of a tile header word. */
#define TD_TILE_W(h) ((uint32_t)(h) & 63u)
#define TD_TILE_REL(h) ((uint32_t)((h) >> 6) & 511u)
#define TD_TILE_LIN(h) ((uint32_t)((h) >> 15) & 1u)
#define TD_TILE_BASE(h) ((h) >> 16)

/* The version 1/2 tile header. */
typedef struct td_disk_tile_v1 {
	uint64_t base;
	uint32_t off16;
	uint8_t width;
	uint8_t pad[3];
} td_disk_tile_v1;

/* A read-only view of a packed array inside a mapping. Plain value type. */
typedef struct td_pack {
	const uint64_t *tiles;
	const uint32_t *groups;
	const uint8_t *data;
	uint64_t n;
	uint64_t ntiles;
	uint64_t datasize;
	uint64_t slope;
} td_pack;

/* Point `p` at the packed array stored in blob[0..size). Checks only the
 * header words against `size` (O(1)); tile contents are checked on access
 * (a tile whose data lies outside the array reads as its frame) and fully
 * by td_pack_check(). Returns TD_OK or TD_ECORRUPT / TD_ETRUNC. */
int td_pack_view(td_pack *p, const void *blob, uint64_t size);

/* The same for a version 1/2 packed array (16-byte tile headers, no
 * slope): the tile table is converted into a malloc'd buffer returned in
 * *owned (the caller frees it after the last use of `p`); O(ntiles).
 * TD_ENOMEM, or TD_ECORRUPT for a tile the current layout cannot express. */
int td_pack_view_v1(td_pack *p, const void *blob, uint64_t size, void **owned);

/* Total bytes a packed array occupies given its blob start (for walking). */
uint64_t td_pack_blob_size(const td_pack *p);

/* Validate every tile header (O(ntiles)). TD_OK or TD_ECORRUPT. */
int td_pack_check(const td_pack *p);

static inline uint64_t td_pack_load64(const uint8_t *s)
{
	uint64_t v;
	memcpy(&v, s, 8);
	return v; /* little-endian hosts only; meson.build enforces it */
}

/* Byte offset of tile t's data (header word h) within p->data. */
static inline uint64_t td_pack_tile_at(const td_pack *p, uint64_t t, uint64_t h)
{
	return ((uint64_t)p->groups[t / TD_PACK_GROUP] + TD_TILE_REL(h)) * 16u;
}

/* The frame of slot j of a tile: base, plus the line for a linear tile. */
static inline uint64_t td_pack_frame(const td_pack *p, uint64_t h, uint64_t j)
{
	return TD_TILE_BASE(h) + ((p->slope & (0 - (uint64_t)TD_TILE_LIN(h))) * j >> 16);
}

/* Value i (i < p->n, asserted by callers). Never reads outside the view:
 * a tile whose header points outside the data reads as its frame. */
static inline uint64_t td_pack_get(const td_pack *p, uint64_t i)
{
	uint64_t t = i / TD_TILE, h = p->tiles[t], j = i % TD_TILE;
	uint32_t w = TD_TILE_W(h);
	uint64_t v = td_pack_frame(p, h, j);
	if (w == 0)
		return v;
	uint64_t bit = j * w;
	uint64_t at = td_pack_tile_at(p, t, h) + (bit >> 3);
	if (w > TD_PACK_MAXW || at + 8 > p->datasize)
		return v;
	uint64_t raw = td_pack_load64(p->data + at) >> (bit & 7);
	return v + (raw & ((UINT64_C(1) << w) - 1));
}

/* Decode values [i, i+count) into out (count may cross tiles). */
void td_pack_get_range(const td_pack *p, uint64_t i, uint64_t count, uint64_t *out);

/* Growable byte buffer used by writers. */
typedef struct td_buf {
	uint8_t *p;
	size_t len, cap;
} td_buf;

/* Append bytes; TD_OK or TD_ENOMEM. */
int td_buf_put(td_buf *b, const void *src, size_t len);
/* Pad with zero bytes to a multiple of `align` (a power of two). */
int td_buf_align(td_buf *b, size_t align);
void td_buf_free(td_buf *b);

/* Encode vals[0..n) as a packed array appended to `out` (8-byte aligned).
 * TD_OK, TD_ENOMEM, or TD_ERANGE when one tile spans more than 2^56. */
int td_pack_encode(const uint64_t *vals, uint64_t n, td_buf *out);

/* Same from 32-bit values. */
int td_pack_encode32(const uint32_t *vals, uint64_t n, td_buf *out);

/* td_pack_encode / td_pack_encode32 with the mean step as the slope (no
 * search among the tiles' own steps): the same values in one planning pass
 * instead of up to 17, at the cost of a few bits a value on arrays whose
 * local steps vary. For arrays built in memory when an archive is read,
 * where time matters more than size; same returns. */
int td_pack_encode_quick(const uint64_t *vals, uint64_t n, td_buf *out);
int td_pack_encode32_quick(const uint32_t *vals, uint64_t n, td_buf *out);

/* A "wide" packed array, laid out in place by a reader that computes its
 * values in order (no encoder pass): every tile is 32 bits wide over a flat
 * frame, so value i is its tile's frame plus the uint32_t data[i], and an
 * array whose frames are all 0 is its data, a plain uint32_t array.
 * td_pack_wide_size: the bytes of one of n (< 2^34) values. td_pack_wide_init: lay
 * out the header, group table and tile words (frames 0) in blob (that many
 * bytes, zeroed, 8-byte aligned) and return where data[0] lies; then the
 * caller stores each tile's frame (< 2^48, set before td_pack_view) with
 * td_pack_wide_frame and the residuals in data, and views it with
 * td_pack_view. */
uint64_t td_pack_wide_size(uint64_t n);
uint32_t *td_pack_wide_init(uint8_t *blob, uint64_t n);
static inline void td_pack_wide_frame(uint8_t *blob, uint64_t t, uint64_t frame)
{
	uint64_t h;
	memcpy(&h, blob + TD_PACK_HDR + 8 * t, 8);
	h = (h & 0xffffu) | frame << 16;
	memcpy(blob + TD_PACK_HDR + 8 * t, &h, 8);
}

#ifdef __cplusplus
}
#endif
#endif
