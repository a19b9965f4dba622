/* xattr: the user.tadoc.* extended attributes: word totals, counts, search hits. */
#ifndef TD_FS_XATTR_H
#define TD_FS_XATTR_H

#include <stddef.h>
#include <sys/types.h>

#include "ctx.h"

/* Every attribute tadocfs answers starts with this. */
#define TD_FS_XATTR_PREFIX "user.tadoc."

/* Largest value the kernel passes through getxattr (XATTR_SIZE_MAX). */
#define TD_FS_XATTR_MAX 65536u

/* Namespace (man page tadocfs(8) is the user documentation):
 *   user.tadoc.words               word tokens in the file / subtree
 *   user.tadoc.count.WORD          occurrences of WORD (decimal)
 *   user.tadoc.search.WORD         one hit per line, ascending: the byte
 *                                  offset (file) or `path:offset` with path
 *                                  relative to the mount root (directory);
 *                                  in paths '\' is written "\\" and a
 *                                  newline "\n"
 *   user.tadoc.search.WORD@N       the same list from hit N (0-based) on
 * A search value that would exceed TD_FS_XATTR_MAX ends, instead, with the
 * line "#more user.tadoc.search.WORD@N" naming the part that continues it;
 * a value without that line is complete. */

/* Set up the search-result cache. 0 or -ENOMEM. */
int td_fs_xattr_init(td_fs *fs);

/* Free the cache. Safe after a failed or skipped init. */
void td_fs_xattr_fini(td_fs *fs);

/* Value of `name` on entry e into *val (malloc'd, caller frees; NULL when
 * *len is 0), never longer than TD_FS_XATTR_MAX. Returns 0 or -errno:
 * ENODATA (not a tadoc name, or not one this entry kind has), EINVAL (empty
 * or non-word WORD, bad part number), ENOMEM, EIO. Thread-safe. */
int td_fs_xattr_get(td_fs *fs, td_entry e, const char *name, char **val, size_t *len);

/* The NUL-separated names listxattr shows for e (the fixed names only; the
 * WORD families are open-ended and documented instead). With cap == 0 just
 * returns the length; otherwise copies into buf. Returns the length or
 * -ERANGE when cap is too small. */
ssize_t td_fs_xattr_list(td_fs *fs, td_entry e, char *buf, size_t cap);

/* Shared value builders of the xattr handlers (read-only and rw mounts). */
/* N of a continuation name (user.tadoc.search.WORD@N): decimal digits
 * without leading zeros (one name per part); a number past 2^64 - 1 reads
 * as UINT64_MAX, past every hit count (ENODATA, as any N past the end).
 * 0 or -EINVAL. */
int fs_parse_hit_index(const char *s, uint64_t *out);

/* Decimal digits of v into out (no NUL); returns the length (<= 20). */
size_t fs_u64dec(uint64_t v, char *out);
/* *val = malloc'd decimal of v, *len its length. 0 or -ENOMEM. */
int fs_value_u64(uint64_t v, char **val, size_t *len);

#endif
