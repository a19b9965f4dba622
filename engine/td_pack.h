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
 *   u64 datasize    bytes of tile data that follow the tile table, including
 *                   8 trailing pad bytes so a reader may load 8 bytes anywhere
 *   td_disk_tile    tiles[ntiles]
 *   u8              data[datasize]
 *
 * Value i lives in tile t = i / TD_TILE at slot j = i % TD_TILE:
 *   value = tiles[t].base + bits(data + 16*tiles[t].off16, j*width, width)
 * A tile of width w holds TD_TILE*w bits = 16*w bytes, so tile offsets are
 * kept in 16-byte units. Width 0 means every value equals base. Width <= 56.
 * This is FOR ("frame of reference") coding in 128-value tiles; the GPU
 * kernels decode exactly the same bytes.
 */
#define TD_TILE 128u
#define TD_PACK_MAXW 56u

typedef struct td_disk_tile {
	uint64_t base;
	uint32_t off16;
	uint8_t width;
	uint8_t pad[3];
} td_disk_tile;

/* A read-only view of a packed array inside a mapping. Plain value type. */
typedef struct td_pack {
	const td_disk_tile *tiles;
	const uint8_t *data;
	uint64_t n;
	uint64_t ntiles;
	uint64_t datasize;
} td_pack;

/* Point `p` at the packed array stored in blob[0..size). Checks only the
 * three header words against `size` (O(1)); tile contents are checked on
 * access (a corrupt tile reads as its base) and fully by td_pack_check().
 * Returns TD_OK or TD_ECORRUPT / TD_ETRUNC. */
int td_pack_view(td_pack *p, const void *blob, uint64_t size);

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

/* Value i (i < p->n, asserted by callers). Never reads outside the view:
 * a tile whose header points outside the data reads as its base. */
static inline uint64_t td_pack_get(const td_pack *p, uint64_t i)
{
	const td_disk_tile *t = &p->tiles[i / TD_TILE];
	uint32_t w = t->width;
	if (w == 0)
		return t->base;
	uint64_t bit = (uint64_t)(i % TD_TILE) * w;
	uint64_t at = (uint64_t)t->off16 * 16u + (bit >> 3);
	if (w > TD_PACK_MAXW || at + 8 > p->datasize)
		return t->base;
	uint64_t raw = td_pack_load64(p->data + at) >> (bit & 7);
	return t->base + (raw & ((UINT64_C(1) << w) - 1));
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

#ifdef __cplusplus
}
#endif
#endif
