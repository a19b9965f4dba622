/* xattr_perm: which files a caller may see in a directory-scope answer (user.tadoc.words/count/search on a directory). */
#ifndef TD_FS_XATTR_PERM_H
#define TD_FS_XATTR_PERM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ctx.h"
#include "fuse_api.h"
#include "td_query.h"

/*
 * A directory-scope answer counts what `grep -r DIR`, run by the caller,
 * would read: regular files the caller may read (r), reached through
 * directories it may list and search (r and x), the scope included. Every
 * entry of a mount shows the same owner and group (td_fs.uid, .gid), so a
 * caller is one of four classes: all (uid 0: root reads everything, as
 * with CAP_DAC_READ_SEARCH), the owner, the group (its gid or a
 * supplementary group is td_fs.gid) or others; the class picks the mode
 * bits that apply. The kernel (default_permissions, always set) already
 * refuses getxattr on an entry the caller may not read; what it cannot see
 * is what an aggregate over a subtree holds.
 *
 * An answer over a subtree that hides nothing from the caller is the
 * whole-subtree answer (fast paths, caches, GPU batches); otherwise the
 * hidden parts are found (hidden roots: unreadable files and directories
 * not listable, with everything under them) and their contributions
 * subtracted, and search hits inside them dropped.
 */

enum td_fs_who {
	TD_FS_WHO_ALL = 0,        /* root: sees everything */
	TD_FS_WHO_OWNER = 1,
	TD_FS_WHO_GROUP = 2,
	TD_FS_WHO_OTHER = 3,
};

/* The class of the caller of req (fuse_req_ctx, and fuse_req_getgroups when
 * its own gid is not the mount's). A caller whose groups cannot be read is
 * judged by its uid and gid. Thread-safe. */
int td_fs_who(const td_fs *fs, fuse_req_t req);

/* 1 when class `who` may read a regular file / list and search a directory
 * of this mode; 1 for other types (they hold no words). */
int td_fs_who_may(int who, mode_t mode);

/* A tree to judge: the archive's entries or the edit overlay's nodes. */
typedef struct td_fs_tview {
	const void *ctx;
	uint32_t nids;            /* every id is below this */
	/* mode of id n: 0 or a negative td_err */
	int (*mode)(const void *ctx, uint32_t n, mode_t *mode);
	/* the next child of directory dir (cookie starts at 0): 0, TD_ENOENT at
	 * the end, or another negative td_err */
	int (*next)(const void *ctx, uint32_t dir, uint64_t *cookie, uint32_t *child);
	/* may be NULL: 1 when nothing under n (n included) is hidden from who,
	 * so the walk need not go in */
	int (*clean)(const void *ctx, int who, uint32_t n);
} td_fs_tview;

/* What a subtree hides from a caller. */
typedef struct td_fs_hidden {
	uint32_t *roots;          /* hidden roots, none under another */
	size_t n, cap;
	int all;                  /* the scope itself is hidden: nothing shows */
} td_fs_hidden;

/* Find what the subtree of `scope` hides from `who` into *h (zeroed first;
 * free with td_fs_hidden_free). 0 or -errno. */
int td_fs_hidden_find(const td_fs_tview *v, uint32_t scope, int who, td_fs_hidden *h);

void td_fs_hidden_free(td_fs_hidden *h);

/* The regular files a caller sees under `scope` (scope itself when it is
 * one): every one not under a hidden root of h, in depth-first order of
 * the view's children (the archive's path order). *ids is malloc'd
 * (caller frees; NULL when *n is 0). 0 or -errno. */
int td_fs_visible_files(const td_fs_tview *v, uint32_t scope, const td_fs_hidden *h, uint32_t **ids, size_t *n);

/* Drop from *hits every hit in a file under a hidden root (hits keep their
 * order). 0 or -ENOMEM. */
int td_fs_hidden_filter(const td_fs_tview *v, const td_fs_hidden *h, td_hits *hits);

#endif
