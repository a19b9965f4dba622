/* fuse_api: the one place that picks the libfuse3 low-level API version. */
#ifndef TD_FS_FUSE_H
#define TD_FS_FUSE_H

/* fs/meson.build passes -DFUSE_USE_VERSION=312 when libfuse >= 3.12 (loop
 * config with a thread limit); 35 is the floor (libfuse 3.10). */
#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 35
#endif
#include <fuse_lowlevel.h>

#endif
