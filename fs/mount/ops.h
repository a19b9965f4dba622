/* ops: the libfuse low-level operations of tadocfs (thin: translate, call, reply). */
#ifndef TD_FS_OPS_H
#define TD_FS_OPS_H

#include "fuse_api.h"

/* Fill *ops with every tadocfs handler; the session userdata must be the
 * mount's td_fs. Mutating operations answer EROFS on a read-only mount; a
 * writable-mount module replaces those entries after this call. */
void td_fs_ops_fill(struct fuse_lowlevel_ops *ops);

#endif
