/* td_out: output helpers shared by the archive writers. */
#include "td_out.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "td_err.h"

int td_write_all(int fd, const void *p, size_t n)
{
	const uint8_t *s = p;
	while (n) {
		ssize_t k = write(fd, s, n);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		s += k;
		n -= (size_t)k;
	}
	return 0;
}

int td_buf_zstd(td_buf *b, int level)
{
	size_t bound = ZSTD_compressBound(b->len);
	td_buf z = { 0 };
	if (!(z.p = malloc(bound ? bound : 1)))
		return TD_ENOMEM;
	z.cap = bound;
	size_t n = ZSTD_compress(z.p, bound, b->p, b->len, level);
	if (ZSTD_isError(n)) {
		free(z.p);
		return td_fail(TD_ENOMEM, "zstd: %s", ZSTD_getErrorName(n));
	}
	z.len = n;
	td_buf_free(b);
	*b = z;
	return TD_OK;
}

int td_sec_append(const char *path, const char *name, uint32_t id, const void *sec, size_t len)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return td_fail(TD_EIO, "%s: %s", name, strerror(errno));
	td_disk_header dh;
	td_disk_section *tab = NULL;
	int err = TD_OK;
	if (pread(fd, &dh, sizeof dh, 0) != (ssize_t)sizeof dh)
		goto ioerr;
	if (dh.nsections >= 256) {
		err = td_fail(TD_ELIMIT, "%s: 256 sections already", name);
		goto out;
	}
	const size_t tl = dh.nsections * sizeof *tab;
	if (!(tab = malloc(tl + sizeof *tab))) {
		err = TD_ENOMEM;
		goto out;
	}
	if (pread(fd, tab, tl, (off_t)dh.sectab_off) != (ssize_t)tl)
		goto ioerr;
	const uint64_t off = dh.sectab_off;
	tab[dh.nsections] = (td_disk_section){ id, 0, off, len, XXH3_64bits(sec, len) };
	dh.nsections++;
	dh.sectab_off = off + len;
	dh.sectab_sum = XXH3_64bits(tab, dh.nsections * sizeof *tab);
	dh.file_size = dh.sectab_off + dh.nsections * sizeof *tab;
	dh.header_sum = XXH3_64bits(&dh, offsetof(td_disk_header, header_sum));
	if (lseek(fd, (off_t)off, SEEK_SET) < 0 || td_write_all(fd, sec, len) ||
	    td_write_all(fd, tab, dh.nsections * sizeof *tab) || ftruncate(fd, (off_t)dh.file_size) ||
	    pwrite(fd, &dh, sizeof dh, 0) != (ssize_t)sizeof dh || fsync(fd))
		goto ioerr;
	goto out;
ioerr:
	err = td_fail(TD_EIO, "%s: %s", name, strerror(errno));
out:
	free(tab);
	if (close(fd) && !err)
		err = td_fail(TD_EIO, "%s: %s", name, strerror(errno));
	return err;
}

int td_buf_leb(td_buf *b, uint64_t v)
{
	uint8_t t[10];
	unsigned n = 0;
	do {
		t[n++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
		v >>= 7;
	} while (v);
	return td_buf_put(b, t, n);
}

/* LSD radix over the key's bytes, skipping a byte that is the same in
 * every key (found first by one pass of and / or: only the bytes that
 * differ are counted, a count a byte costing a dependent add each). */
int td_sort_keys(td_skey *k, size_t n)
{
	if (n < 2)
		return TD_OK;
	uint64_t any = 0, all = ~UINT64_C(0);
	for (size_t i = 0; i < n; i++)
		any |= k[i].key, all &= k[i].key;
	unsigned sh[8], nd = 0; /* the shifts of the bytes that differ */
	for (unsigned d = 0; d < 8; d++)
		if ((any ^ all) >> (8 * d) & 255)
			sh[nd++] = 8 * d;
	if (!nd)
		return TD_OK; /* one key: in order already */
	td_skey *t = malloc(n * sizeof *t);
	size_t(*cnt)[256] = calloc(nd, sizeof *cnt);
	if (!t || !cnt) {
		free(t);
		free(cnt);
		return TD_ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		for (unsigned d = 0; d < nd; d++)
			cnt[d][(k[i].key >> sh[d]) & 255]++;
	td_skey *src = k, *dst = t;
	for (unsigned d = 0; d < nd; d++) {
		size_t *c = cnt[d], sum = 0;
		for (unsigned b = 0; b < 256; b++) {
			size_t x = c[b];
			c[b] = sum;
			sum += x;
		}
		for (size_t i = 0; i < n; i++)
			dst[c[(src[i].key >> sh[d]) & 255]++] = src[i];
		td_skey *x = src;
		src = dst;
		dst = x;
	}
	if (src != k)
		memcpy(k, src, n * sizeof *k);
	free(t);
	free(cnt);
	return TD_OK;
}

/* The most that the zstd frame z[0, n) can decode to, from its blocks (the
 * content size in its header is only a claim): a raw or RLE block its
 * size, a compressed one 128 KiB (zstd's largest block); 0 when the frame
 * does not parse. */
uint64_t td_zstd_frame_bound(const uint8_t *z, size_t n)
{
	/* the frame header (RFC 8878, 3.1.1.1): magic, descriptor, window
	 * byte unless single segment, dictionary id, content size */
	static const uint8_t did[4] = { 0, 1, 2, 4 }, fcs[4] = { 0, 2, 4, 8 };
	if (n < 5 || (z[0] | (uint32_t)z[1] << 8 | (uint32_t)z[2] << 16 | (uint32_t)z[3] << 24) != ZSTD_MAGICNUMBER)
		return 0;
	const uint8_t fd = z[4];
	const unsigned single = fd >> 5 & 1;
	size_t at = 5 + !single + did[fd & 3] + (fd >> 6 ? fcs[fd >> 6] : single);
	uint64_t out = 0;
	for (;;) {
		if (at + 3 > n)
			return 0;
		const uint32_t bh = z[at] | (uint32_t)z[at + 1] << 8 | (uint32_t)z[at + 2] << 16;
		const unsigned type = bh >> 1 & 3;
		const uint32_t bsize = bh >> 3;
		at += 3;
		const uint64_t in = type == 1 ? 1 : bsize; /* RLE: one byte repeated */
		if (type == 3 || in > n - at)
			return 0;
		at += in;
		out += type == 2 ? UINT64_C(1) << 17 : bsize;
		if (bh & 1)
			return out;
	}
}
