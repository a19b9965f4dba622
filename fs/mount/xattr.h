/* xattr: the user.tadoc.* extended attributes of a read-only mount: word totals, counts, search hits (names: xattr_name.h). */
#ifndef TD_FS_XATTR_H
#define TD_FS_XATTR_H

#include <stddef.h>
#include <sys/types.h>

#include "ctx.h"
#include "xattr_name.h"
#include "xattr_perm.h"

/* Set up the search-result cache. 0 or -ENOMEM. */
int td_fs_xattr_init(td_fs *fs);

/* Free the cache. Safe after a failed or skipped init. */
void td_fs_xattr_fini(td_fs *fs);

/* Value of `name` on entry e into *val (malloc'd, caller frees; NULL when
 * *len is 0), never longer than TD_FS_XATTR_MAX, as caller class `who`
 * (xattr_perm.h) sees it: a directory's answer covers only the files that
 * class may read. Returns 0 or -errno: ENODATA (not a tadoc name, or not
 * one this entry kind has), EACCES (a file the caller may not read),
 * EINVAL (empty or non-word WORD, bad part number), ENOMEM, EIO.
 * Thread-safe. */
int td_fs_xattr_get(td_fs *fs, td_entry e, const char *name, int who, char **val, size_t *len);

/* Value of the parsed name x of `name` (kinds COUNT, SEARCH, TOP, VECTOR,
 * FILES, NGRAMS, FUZZY) over the archive entry e (is_dir: a directory),
 * for a caller e's subtree hides nothing from: the whole subtree's answer,
 * from the engine's scope functions (stored postings, the fuzzy index,
 * the whole-corpus tables) and the mount's caches. An edit mount asks it
 * for a scope that reads as in the archive (td_edit_clean, and the same
 * path). Returns as td_fs_xattr_get. Thread-safe. */
int td_fs_xattr_whole(td_fs *fs, td_entry e, int is_dir, const td_fs_xname *x, const char *name, char **val,
		      size_t *len);

/* Value of the list name `name` (kinds TOP, VECTOR, FUZZY, FILES) on
 * entry e from `given`, the engine's answer for it computed already over
 * the whole scope (td_fs_xsrc.given says its type; the batcher's GPU
 * batches): what td_fs_xattr_get gives a caller the subtree hides nothing
 * from. Returns as td_fs_xattr_get. Thread-safe. */
int td_fs_xattr_given(td_fs *fs, td_entry e, const char *name, const void *given, char **val, size_t *len);

/* Value of the list name `name` on entry e from the mount's list cache,
 * for a caller the subtree hides nothing from (the batcher's list
 * queries, before they go to the GPU): 0 or -errno as td_fs_xattr_get
 * when the cache holds the list, 1 when it does not (nothing done; the
 * value is then computed, and td_fs_xattr_given keeps the list).
 * Thread-safe. */
int td_fs_xattr_list_kept(td_fs *fs, td_entry e, const char *name, char **val, size_t *len);

/* 1 when the subtree of e hides nothing from class `who` (its answers are
 * the whole subtree's); 0 otherwise or when the totals cannot be built. */
int td_fs_xattr_open_to(td_fs *fs, td_entry e, int who);

/* The NUL-separated names listxattr shows for e (the fixed names only; the
 * WORD families are open-ended and documented instead). With cap == 0 just
 * returns the length; otherwise copies into buf. Returns the length or
 * -ERANGE when cap is too small. */
ssize_t td_fs_xattr_list(td_fs *fs, td_entry e, char *buf, size_t cap);

#endif
