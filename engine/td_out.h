/* td_out: output helpers shared by the archive writers td_writer and
 * td_build (engine-internal). */
#ifndef TD_OUT_H
#define TD_OUT_H

#include <stddef.h>

#include "td_pack.h"

/* Write all n bytes of p to fd, retrying on EINTR and short writes.
 * Returns 0, or -1 with errno set. */
int td_write_all(int fd, const void *p, size_t n);

/* Replace *b by one zstd frame of its bytes at `level`. Returns TD_OK, or
 * TD_ENOMEM (with td_fail's detail where zstd failed); *b is unchanged then. */
int td_buf_zstd(td_buf *b, int level);

#endif
