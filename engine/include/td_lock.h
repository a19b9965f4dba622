/* td_lock: advisory locks that keep one writable mount (or compaction) per archive. */
#ifndef TD_LOCK_H
#define TD_LOCK_H

#include "td_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How long mounts and compaction wait for a conflicting lock to go away: a
 * mount's daemon still holds its lock for a few milliseconds after
 * `fusermount3 -u` returns, so `fusermount3 -u DIR && tadoc compact ARCHIVE`
 * must not fail on that. */
#define TD_LOCK_WAIT_MS 2000

/* Take a flock on the archive file at `path`, waiting at most wait_ms
 * (0: not at all) for another process's lock to be released: exclusive
 * for a writable mount or a compaction, shared for a read-only mount (many
 * read-only mounts share; a writer excludes them all). After locking, the
 * path is checked to still name the locked file (a compaction may just have
 * renamed a new archive over it) and the lock is retaken if not. On success
 * *fd holds the lock until td_unlock_archive(*fd).
 * Errors: TD_EBUSY (held by another process; detail names the file),
 * TD_EIO (detail names the file). */
int td_lock_archive(const char *path, int exclusive, unsigned wait_ms, int *fd);

/* Release a lock taken by td_lock_archive. Negative fd accepted. */
void td_unlock_archive(int fd);

#ifdef __cplusplus
}
#endif
#endif
