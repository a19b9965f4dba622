/* inode: inode numbers (entry index + 1) and attributes of archive entries. */
#ifndef TD_FS_INODE_H
#define TD_FS_INODE_H

#include <sys/stat.h>

#include "ctx.h"
#include "fuse_api.h"

/* Inode numbers are entry index + 1, so the root is FUSE_ROOT_ID and numbers
 * are stable across mounts of the same archive. */
static inline fuse_ino_t td_fs_ino(td_entry e)
{
	return (fuse_ino_t)e + 1;
}

/* Entry of inode `ino`, or TD_NOENTRY when ino is not one of this mount's. */
static inline td_entry td_fs_entry(const td_fs *fs, fuse_ino_t ino)
{
	if (ino < 1 || ino > (fuse_ino_t)fs->nentries)
		return TD_NOENTRY;
	return (td_entry)(ino - 1);
}

/* Fill *st for entry e: mode, size, mtime (also atime/ctime), nlink
 * (directories: 2 + subdirectories), owner = the mounting user, st_blocks
 * from the size. 0 or -errno (EIO for a broken entry, ENOENT out of range). */
int td_fs_getattr(td_fs *fs, td_entry e, struct stat *st);

/* Fill *st (zeroed first) from ts for inode ino with link count nlink:
 * owner = the mounting user, st_blocks from the size, atime = ctime = mtime.
 * Both kinds of mount. */
void td_fs_stat_fill(const td_fs *fs, fuse_ino_t ino, const td_stat *ts, nlink_t nlink, struct stat *st);

/* Finish *ep (attributes already in ep->attr) for a positive lookup of ino
 * with the mount's timeouts. */
void td_fs_entry_fill(const td_fs *fs, fuse_ino_t ino, struct fuse_entry_param *ep);

/* Fill *ep for a positive lookup of e with the mount's timeouts. 0 or -errno. */
int td_fs_entry_param(td_fs *fs, td_entry e, struct fuse_entry_param *ep);

#endif
