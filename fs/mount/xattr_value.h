/* xattr_value: the values of the analytics names (top, vector, files, ngrams, fuzzy, phrases) over a scope or a file set, for both kinds of mount. */
#ifndef TD_FS_XATTR_VALUE_H
#define TD_FS_XATTR_VALUE_H

#include <stddef.h>

#include "td_analytics_set.h"
#include "xattr_name.h"

/* What a value is computed over: the archive scope `scope` (set NULL: the
 * td_analytics.h functions, the CLI's answers) or the file set `set` (a
 * scope less what the caller may not read, or an edited tree:
 * td_analytics_set.h). `path` names a file of a directory answer: an
 * archive entry, or a set file id. */
typedef struct td_fs_xsrc {
	const td_archive *a;
	td_entry scope;
	const td_fileset *set;
	td_fs_xpath_fn path;
	const void *pctx;
	/* path is td_archive_path over a: a ranked file's path is then built
	 * from its directory's (once a directory) and its name
	 * (td_archive_names), the same bytes */
	int archive_paths;
	/* The engine's answer over `scope`, computed already (a batch: the
	 * batcher's GPU batches), or NULL: a td_words_req (TOP, VECTOR), a
	 * td_ngram_req (NGRAMS), a td_fuzzy_req (FUZZY) or a td_files_req
	 * (FILES) of the same name;
	 * its lines (or its error) are the value's. */
	const void *given;
} td_fs_xsrc;

/* Value of the parsed name x (kinds TOP, VECTOR, FILES, NGRAMS, FUZZY; and
 * COUNT and SEARCH over a set) of `name` into *val (malloc'd, caller frees;
 * NULL when *len is 0), byte-equal to the matching `tadoc` command's
 * output over the same files, cut into parts as xattr_name.h says.
 * is_dir: a directory answer (search lines carry paths). Returns 0 or
 * -errno: ENODATA (a part past the end), EINVAL, E2BIG (one line longer
 * than a value), ENOMEM, EIO, EOPNOTSUPP (an archive the analytics do not
 * read yet). Thread-safe as the engine calls it makes. */
int td_fs_xattr_value(const td_fs_xsrc *src, const td_fs_xname *x, const char *name, int is_dir, char **val,
		      size_t *len);

/* A whole list value: every line of it, for the parts to be cut from. */
typedef struct td_fs_xlist {
	char *text;
	size_t len;
	uint64_t *start;          /* line i is text[start[i] .. start[i + 1]) */
	uint64_t n;               /* lines */
} td_fs_xlist;

/* Every line of list name x (kinds TOP..FUZZY) over src into *l, no cut.
 * Returns 0, 1 when the list would exceed `limit` bytes (*l empty: cut
 * parts with td_fs_xattr_value instead, which holds one part at a time),
 * or -errno as td_fs_xattr_value. */
int td_fs_xattr_list_all(const td_fs_xsrc *src, const td_fs_xname *x, uint64_t limit, td_fs_xlist *l);

void td_fs_xlist_free(td_fs_xlist *l);

/* The part of list l named name[0..blen) from line `first`: what
 * td_fs_xattr_value gives for the same name. 0 or -errno (ENODATA, E2BIG,
 * ENOMEM). */
int td_fs_xlist_part(const td_fs_xlist *l, const char *name, size_t blen, uint64_t first, char **val, size_t *len);

#endif
