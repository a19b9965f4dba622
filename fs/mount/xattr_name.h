/* xattr_name: the user.tadoc.* namespace shared by read-only and edit mounts: parsing names, building values. */
#ifndef TD_FS_XATTR_NAME_H
#define TD_FS_XATTR_NAME_H

#include <stddef.h>
#include <stdint.h>

#include "td_query.h"

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
 *   user.tadoc.stats               the request counters (root only)
 * A search value that would exceed TD_FS_XATTR_MAX ends, instead, with the
 * line "#more user.tadoc.search.WORD@N" naming the part that continues it;
 * a value without that line is complete.
 * Writable names (setxattr on a writable mount, regular files only):
 *   user.tadoc.insert.OFFSET       value: the bytes to insert before OFFSET
 *   user.tadoc.delete.OFFSET       value: LENGTH in decimal */

enum td_fs_xkind {
	TD_FS_XNONE = 0,  /* not a user.tadoc. name, or not one tadocfs knows */
	TD_FS_XSTATS,
	TD_FS_XWORDS,
	TD_FS_XCOUNT,
	TD_FS_XSEARCH,
	TD_FS_XINSERT,
	TD_FS_XDELETE,
};

/* A parsed attribute name. word points into the parsed name. */
typedef struct td_fs_xname {
	int kind;                 /* td_fs_xkind */
	int err;                  /* 0, or -EINVAL: a malformed WORD, part number or OFFSET */
	const char *word;         /* COUNT, SEARCH: the word (not NUL-terminated for SEARCH@N) */
	size_t wlen;
	uint64_t num;             /* SEARCH: first hit (N of @N, else 0); INSERT, DELETE: OFFSET */
} td_fs_xname;

/* Parse `name` into *x. Never fails: an unknown name is TD_FS_XNONE, a known
 * one with a bad argument carries x->err, which callers report after their
 * own checks of the entry (so that a stale entry still answers ENOENT).
 * Thread-safe; x borrows from name. */
void td_fs_xattr_parse(const char *name, td_fs_xname *x);

/* Strict decimal of n bytes (1..19 digits, leading zeros allowed) into *out.
 * 0 or -EINVAL. */
int td_fs_xattr_dec(const char *s, size_t n, uint64_t *out);

/* Decimal digits of v into out (no NUL); returns the length (<= 20). */
size_t fs_u64dec(uint64_t v, char *out);

/* *val = malloc'd decimal of v, *len its length. 0 or -ENOMEM. */
int fs_value_u64(uint64_t v, char **val, size_t *len);

/* Path of hit file `file` relative to the mount root into buf (cap bytes
 * with the NUL): its length, or a negative td_err. */
typedef int (*td_fs_xpath_fn)(const void *ctx, uint32_t file, char *buf, size_t cap);

/* The user.tadoc.search value of hits h (of word w) from hit `first` on:
 * offsets only when path is NULL (a file), `path:offset` lines otherwise (a
 * directory), cut with a "#more" line as described above. *val is malloc'd
 * (caller frees; NULL when *len is 0). Returns 0 or -errno: ENODATA (first
 * past the last hit), ENOMEM, or the errno of a failed path. */
int td_fs_xattr_search_value(const td_hits *h, uint64_t first, const char *w, size_t wlen, td_fs_xpath_fn path,
			     const void *ctx, char **val, size_t *len);

#endif
