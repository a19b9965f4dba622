/* td_out: output helpers shared by the archive writers. */
#include "td_out.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
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
