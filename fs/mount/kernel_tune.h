/* kernel_tune: the mount's kernel-side settings (readahead window, background-request
 * window, fusectl path) and the cache warm-up thread started after the mount. */
#ifndef TD_FS_KERNEL_TUNE_H
#define TD_FS_KERNEL_TUNE_H

#include <stddef.h>

#include "ctx.h"

/* Once per mount, from the first lookup or read (the kernel has then
 * taken the FUSE handshake, whose reply can only lower the window): set
 * the mount's readahead window (/sys/class/bdi/DEV/read_ahead_kb, DEV from
 * /proc/self/mountinfo) to conf.read_ahead. Sequential readers then get
 * requests of 1 MiB, up to read_ahead ahead of them (8 MiB by default),
 * instead of 128 KiB. Without root the write fails: logged, the kernel's
 * default stays. */
void td_fs_tune_readahead(td_fs *fs);

/* The path of the mount's fusectl "waiting" file (the requests the kernel
 * holds for this mount, queued or being answered; it cannot seek: open and
 * read it anew for each value) into path. 0, or -1 with path "" when the
 * mount or fusectl (/sys/fs/fuse/connections) is not there or the path
 * does not fit len. */
int td_fs_waiting_path(const td_fs *fs, char *path, size_t len);

/* In INIT: let the kernel keep fs->max_background background requests in
 * flight (reads: async reads and direct I/O go as background requests),
 * congestion at 3/4 of that. The kernel's default, 12, left concurrent
 * readers waiting in the kernel with cores idle (contrib/bench/NOTES.md).
 * Needs <fuse_lowlevel.h> for the type. */
struct fuse_conn_info;
void td_fs_set_background(const td_fs *fs, struct fuse_conn_info *conn);

/* After the mount, on one background thread, once no request has come
 * for a moment (50 ms: td_fs_busy stamps them): with conf.cache_warm, the
 * large sections' checks and the dictionary (td_archive_check_data) at
 * nice 19; then at idle priority: unless -o noverify (fs->bg_verify 0),
 * every checksum (td_archive_check_sums; damage is logged, and reads of it
 * give EIO anyway), and with conf.cache_warm the rule cache fill
 * (td_archive_warm), so the first reads after the mount go at the speed
 * of later ones. The FUSE threads never wait for it at idle priority: a
 * reader waits only for a check or build of the archive (format 5: the
 * shard) it reads, which it would otherwise do itself. Call after the
 * daemon has forked; td_fs_warm_stop stops the checksum pass and the fill
 * and joins the thread before the archive closes. */
void td_fs_warm_start(td_fs *fs);
void td_fs_warm_stop(td_fs *fs);

#endif
