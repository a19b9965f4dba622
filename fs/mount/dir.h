/* dir: readdir and readdirplus replies for both kinds of mount, from a listing each kind describes. */
#ifndef TD_FS_DIR_H
#define TD_FS_DIR_H

#include <pthread.h>
#include <stdint.h>

#include "ctx.h"
#include "fuse_api.h"

/* One directory as readdir shows it. Offsets: 0 ".", 1 "..", 2 + k the k-th
 * child; each entry carries the offset of the next one. */
typedef struct td_fs_listing {
	fuse_ino_t self, parent;  /* inodes of "." and ".." */
	uint64_t n;               /* children */
	/* Child k: *name (NUL-terminated; may be written into namebuf, which
	 * holds TD_MAXNAME + 1 bytes) and ep: with plus a full entry (a lookup
	 * the kernel counts), else at least ep->attr.st_ino and st_mode.
	 * 0 or -errno (the reply is then that error). */
	int (*child)(td_fs *fs, const struct td_fs_listing *l, uint64_t k, int plus, char *namebuf,
		     const char **name, struct fuse_entry_param *ep);
	const void *ctx;          /* the kind's own: an edit mount's snapshot */
	uint32_t first;           /* the kind's own: a read-only mount's first child */
	pthread_rwlock_t *lock;   /* NULL, or held for reading while a plus reply is filled */
	int *served;              /* NULL, or set to 1 once a non-empty reply was filled */
} td_fs_listing;

/* Answer a readdir (plus = 0) or readdirplus (plus = 1) of at most size
 * bytes from offset off with the entries of l. */
void td_fs_reply_listing(fuse_req_t req, const td_fs_listing *l, size_t size, off_t off, int plus);

/* Set l to the listing of directory ino of a read-only mount (ops.c), or of
 * the open directory fi of an edit mount (overlay_names.c; off 0 after an
 * earlier reply takes a fresh snapshot). 0 or -errno. */
int td_fs_ro_listing(td_fs *fs, fuse_ino_t ino, td_fs_listing *l);
int td_fs_rw_listing(td_fs *fs, struct fuse_file_info *fi, off_t off, td_fs_listing *l);

/* Fill ops->readdir and ops->readdirplus: both kinds of mount, chosen by
 * whether the mount has an edit overlay (fs->rw). */
void td_fs_ops_dir(struct fuse_lowlevel_ops *ops);

#endif
