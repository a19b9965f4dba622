/* td_out: output helpers shared by the archive writers td_writer and
 * td_build (engine-internal). */
#ifndef TD_OUT_H
#define TD_OUT_H

#include <stddef.h>

#include "td_format.h"
#include "td_pack.h"

/* Write all n bytes of p to fd, retrying on EINTR and short writes.
 * Returns 0, or -1 with errno set. */
int td_write_all(int fd, const void *p, size_t n);

/* Replace *b by one zstd frame of its bytes at `level`. Returns TD_OK, or
 * TD_ENOMEM (with td_fail's detail where zstd failed); *b is unchanged then. */
int td_buf_zstd(td_buf *b, int level);

/* A key and the id it sorts (td_sort_keys). */
typedef struct td_skey {
	uint64_t key;
	uint32_t id;
} td_skey;

/* Sort k[0..n) by key, stably (equal keys keep their order), in O(n) a
 * key byte: where the order is a total one on 64-bit keys, what qsort's
 * call per comparison costs (several CPU seconds of a 16-core GPU build of
 * linux-source) goes. TD_OK or TD_ENOMEM (k unchanged). */
int td_sort_keys(td_skey *k, size_t n);

/* Append v to b as LEB128 (7 bits a byte, low first). TD_OK or TD_ENOMEM. */
int td_buf_leb(td_buf *b, uint64_t v);

/* The most that the zstd frame z[0, n) can decode to, from its blocks (the
 * content size in its header is only a claim): a raw or RLE block its
 * size, a compressed one 128 KiB (zstd's largest block); 0 when the frame
 * does not parse. Reads only z[0, n). */
uint64_t td_zstd_frame_bound(const uint8_t *z, size_t n);

/* Read one LEB128 value at *p (before end) into *v and move *p past it:
 * 0, or -1 when it runs past end or over 64 bits' bytes (*p then
 * unspecified). */
static inline int td_leb_get(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	uint64_t x = 0;
	for (unsigned sh = 0; sh < 64; sh += 7) {
		if (*p == end)
			return -1;
		const uint8_t c = *(*p)++;
		x |= (uint64_t)(c & 0x7F) << sh;
		if (!(c & 0x80)) {
			*v = x;
			return 0;
		}
	}
	return -1;
}

/* Append section `id` (sec[0, len), a length multiple of 8) to the
 * finished version 5 container at path (written by td_build, not yet
 * renamed, its header and table already checked by an open): the section
 * goes where the section table was, the table (one longer) after it, then
 * the header is rewritten and the file fsynced. name: the archive's name in
 * messages. Returns TD_OK, TD_ELIMIT (256 sections already), TD_ENOMEM or
 * TD_EIO (td_fail's detail). Not thread-safe for one path. */
int td_sec_append(const char *path, const char *name, uint32_t id, const void *sec, size_t len);

#endif
