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

/* Namespace (man page tadocfs(8) is the user documentation). WORD is one
 * word; PHRASE is a word or several separated by single spaces, matched
 * consecutively (td_analytics.h):
 *   user.tadoc.words               word tokens in the file / subtree
 *   user.tadoc.count.PHRASE        occurrences of PHRASE (decimal)
 *   user.tadoc.search.PHRASE       one hit per line, ascending: the byte
 *                                  offset (file) or `path:offset` with path
 *                                  relative to the mount root (directory);
 *                                  in paths '\' is written "\\" and a
 *                                  newline "\n"
 *   user.tadoc.top.N               `tadoc top -n N` (N = 0: all words)
 *   user.tadoc.vector              `tadoc vector`
 *   user.tadoc.files.PHRASE        `tadoc files PHRASE`
 *   user.tadoc.ngrams.LEN.K        `tadoc ngrams -n LEN --top K` (LEN 2..8)
 *   user.tadoc.fuzzy.K.WORD        `tadoc fuzzy -k K WORD` (K 0..3)
 *   user.tadoc.stats               the request counters (root only)
 * listxattr shows user.tadoc.words only: the other names are computed
 * (some cost a walk of the subtree), so `getfattr -d`, `cp -a` and
 * `rsync -X` must not fetch them unasked.
 * Each list name (search, top, vector, files, ngrams, fuzzy) also answers
 * as NAME@N: the same list from line N (0-based) on. A list value that
 * would exceed TD_FS_XATTR_MAX ends, instead, with the line
 * "#more NAME@N" naming the part that continues it; a value without that
 * line is complete.
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
	TD_FS_XTOP,
	TD_FS_XVECTOR,
	TD_FS_XFILES,
	TD_FS_XNGRAMS,
	TD_FS_XFUZZY,
};

/* A parsed attribute name. word and base point into the parsed name. */
typedef struct td_fs_xname {
	int kind;                 /* td_fs_xkind */
	int err;                  /* 0, or -EINVAL: a malformed WORD, PHRASE, number, part number or OFFSET */
	const char *word;         /* COUNT, SEARCH, FILES: the phrase; FUZZY: the word (not NUL-terminated) */
	size_t wlen;
	unsigned nwords;          /* words in `word` (1: a single word) */
	uint64_t num;             /* list names: first line (N of @N, else 0); INSERT, DELETE: OFFSET */
	uint64_t n;               /* TOP: N; NGRAMS: K; FUZZY: K */
	unsigned len;             /* NGRAMS: LEN */
	size_t blen;              /* list names: length of the name without "@N" */
} td_fs_xname;

/* Parse `name` into *x. Never fails: an unknown name is TD_FS_XNONE, a known
 * one with a bad argument carries x->err, which callers report after their
 * own checks of the entry (so that a stale entry still answers ENOENT).
 * Thread-safe; x borrows from name. */
void td_fs_xattr_parse(const char *name, td_fs_xname *x);

/* Strict decimal of n bytes (digits only, leading zeros allowed, at most
 * 2^64 - 1) into *out. 0 or -EINVAL. */
int td_fs_xattr_dec(const char *s, size_t n, uint64_t *out);

/* Decimal digits of v into out (no NUL); returns the length (<= 20). */
size_t fs_u64dec(uint64_t v, char *out);

/* *val = malloc'd decimal of v, *len its length. 0 or -ENOMEM. */
int fs_value_u64(uint64_t v, char **val, size_t *len);

/* Path of hit file `file` relative to the mount root into buf (cap bytes
 * with the NUL): its length, or a negative td_err. */
typedef int (*td_fs_xpath_fn)(const void *ctx, uint32_t file, char *buf, size_t cap);

/* A list value being built, one line at a time, from line `first` on,
 * cut with a "#more" line when the next line does not fit. */
typedef struct td_fs_lines {
	char *out;
	size_t pos, safe_pos, reserve;
	uint64_t first, i, safe_next;
	const char *name;         /* the list's name without "@N" */
	size_t nlen;
	int full;                 /* cut: later lines are ignored */
} td_fs_lines;

/* Start a list value for name[0..nlen) from line `first`. 0 or -ENOMEM. */
int td_fs_lines_init(td_fs_lines *l, const char *name, size_t nlen, uint64_t first);

/* Offer the next line (with its '\n'). Returns 1 once the value is full
 * (the caller may stop producing lines), else 0. */
int td_fs_lines_add(td_fs_lines *l, const char *line, size_t len);

/* Finish: *val (malloc'd, NULL when *len is 0) gets the value; frees l
 * either way. 0, -ENODATA (first is past the last line) or -E2BIG (one
 * line alone is longer than a value can be). */
int td_fs_lines_end(td_fs_lines *l, char **val, size_t *len);

/* The user.tadoc.search value of hits h (of word w) from hit `first` on:
 * offsets only when path is NULL (a file), `path:offset` lines otherwise (a
 * directory), cut with a "#more" line as described above. *val is malloc'd
 * (caller frees; NULL when *len is 0). Returns 0 or -errno: ENODATA (first
 * past the last hit), ENOMEM, or the errno of a failed path. */
int td_fs_xattr_search_value(const td_hits *h, uint64_t first, const char *w, size_t wlen, td_fs_xpath_fn path,
			     const void *ctx, char **val, size_t *len);

#endif
