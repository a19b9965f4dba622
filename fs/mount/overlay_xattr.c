/* overlay_xattr: user.tadoc.* through the edit overlay: counts and search over edits, insert and delete. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "batcher.h"
#include "overlay.h"
#include "xattr.h"
#include "td_err.h"
#include "td_format.h"
#include "td_query.h"

#define FS(req) ((td_fs *)fuse_req_userdata(req))
#define PREFIX TD_FS_XATTR_PREFIX
#define PREFIX_LEN (sizeof PREFIX - 1)
#define SEARCH_NAME PREFIX "search."
#define MORE_TAG "#more "

/*
 * Writable names (setxattr), on regular files:
 *   user.tadoc.insert.OFFSET   value: the bytes to insert before OFFSET
 *                              (0 <= OFFSET <= size; the rest shifts right)
 *   user.tadoc.delete.OFFSET   value: LENGTH in decimal; removes
 *                              [OFFSET, OFFSET+LENGTH) clamped to the size
 *                              (OFFSET <= size); the rest shifts left
 * The read names are those of xattr.h, computed over the edited text;
 * directory search lists hits by node (creation) order, not path order.
 */

/* Strict decimal (1..19 digits). 0 or -EINVAL. */
static int parse_dec(const char *s, size_t n, uint64_t *out)
{
	if (n == 0 || n > 19)
		return -EINVAL;
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*out = v;
	return 0;
}

/* The search value from hit `first` on (format of xattr.h); caller
 * holds the read lock. */
static int value_search(td_fs *fs, td_node n, int is_dir, const char *w, size_t wlen, uint64_t first, char **val,
			size_t *len)
{
	td_edit *ed = fs->rw->ed;
	td_hits h = { 0 };
	int err = td_edit_search(ed, w, wlen, n, &h);
	if (err) {
		td_hits_free(&h);
		return -td_err_errno(err);
	}
	if (first > h.n) {
		td_hits_free(&h);
		return -ENODATA;
	}
	const size_t reserve = (sizeof MORE_TAG - 1) + (sizeof SEARCH_NAME - 1) + wlen + 1 + 20 + 1;
	char *out = malloc(TD_FS_XATTR_MAX);
	char *path = is_dir ? malloc(TD_MAXPATH + 1) : NULL;
	char *line = malloc(2 * (TD_MAXPATH + 1) + 24);
	int rc = 0;
	if (!out || (is_dir && !path) || !line) {
		rc = -ENOMEM;
		goto out;
	}
	size_t pos = 0, safe_pos = 0;
	uint64_t safe_next = first, i = first;
	td_node path_of = TD_NOENTRY;
	size_t plen = 0;
	for (; i < h.n; i++) {
		size_t ll = 0;
		if (is_dir) {
			if (h.v[i].file != path_of) {
				int pl = td_edit_path(ed, h.v[i].file, path, TD_MAXPATH + 1);
				if (pl < 0) {
					rc = -td_err_errno(pl);
					break;
				}
				plen = (size_t)pl;
				path_of = h.v[i].file;
			}
			ll = td_path_escape(path, plen, line);
			line[ll++] = ':';
		}
		ll += fs_u64dec(h.v[i].off, line + ll);
		line[ll++] = '\n';
		if (pos + ll > TD_FS_XATTR_MAX)
			break;
		memcpy(out + pos, line, ll);
		pos += ll;
		if (pos + reserve <= TD_FS_XATTR_MAX) {
			safe_pos = pos;
			safe_next = i + 1;
		}
	}
	if (rc == 0 && i < h.n) {
		pos = safe_pos;
		memcpy(out + pos, MORE_TAG SEARCH_NAME, sizeof MORE_TAG SEARCH_NAME - 1);
		pos += sizeof MORE_TAG SEARCH_NAME - 1;
		memcpy(out + pos, w, wlen);
		pos += wlen;
		out[pos++] = '@';
		pos += fs_u64dec(safe_next, out + pos);
		out[pos++] = '\n';
	}
	if (rc == 0) {
		if (pos == 0) {
			free(out);
			out = NULL;
		}
		*val = out;
		*len = pos;
		out = NULL;
	}
out:
	free(out);
	free(path);
	free(line);
	td_hits_free(&h);
	return rc;
}

/* Value of a read name; caller holds the read lock. */
static int xattr_get(td_fs *fs, td_node n, const char *name, char **val, size_t *len)
{
	*val = NULL;
	*len = 0;
	td_edit *ed = fs->rw->ed;
	const char *rest = name + PREFIX_LEN;
	td_stat st;
	int err = td_edit_stat(ed, n, &st);
	if (err)
		return err == TD_EINVAL ? -ENOENT : -td_err_errno(err);
	int is_dir = S_ISDIR(st.mode);
	if (!is_dir && !S_ISREG(st.mode))
		return -ENODATA;
	if (strcmp(rest, "words") == 0) {
		uint64_t v = 0;
		if ((err = td_edit_nwords(ed, n, &v)))
			return -td_err_errno(err);
		return fs_value_u64(v, val, len);
	}
	if (strncmp(rest, "count.", 6) == 0) {
		const char *w = rest + 6;
		size_t wlen = strlen(w);
		if (wlen == 0 || !td_is_word(w, wlen))
			return -EINVAL;
		uint64_t v = 0;
		if ((err = td_edit_count(ed, w, wlen, n, &v)))
			return -td_err_errno(err);
		return fs_value_u64(v, val, len);
	}
	if (strncmp(rest, "search.", 7) == 0) {
		const char *w = rest + 7;
		const char *at = strrchr(w, '@');
		size_t wlen = at ? (size_t)(at - w) : strlen(w);
		uint64_t first = 0;
		if (at && fs_parse_hit_index(at + 1, &first))
			return -EINVAL;
		if (wlen == 0 || !td_is_word(w, wlen))
			return -EINVAL;
		return value_search(fs, n, is_dir, w, wlen, first, val, len);
	}
	return -ENODATA;
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	td_fs *fs = FS(req);
	if (strncmp(name, PREFIX, PREFIX_LEN) != 0) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	char *val = NULL;
	size_t len = 0;
	uint64_t t0 = td_fs_batch_clock();
	int rc;
	if (strcmp(name + PREFIX_LEN, "stats") == 0) { /* the request counters, on the root only */
		rc = td_fs_rw_node(ino) == TD_ROOT ? td_fs_batch_stats(fs, &val, &len) : -ENODATA;
	} else {
		td_fs_rw_rdlock(fs);
		rc = xattr_get(fs, td_fs_rw_node(ino), name, &val, &len);
		td_fs_rw_unlock(fs);
		td_fs_batch_record(fs, 0, t0, 0);
	}
	if (rc)
		fuse_reply_err(req, -rc);
	else if (size == 0)
		fuse_reply_xattr(req, len);
	else if (len > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, val, len);
	free(val);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
			int flags)
{
	(void)flags;
	td_fs *fs = FS(req);
	td_node n = td_fs_rw_node(ino);
	int insert = strncmp(name, PREFIX "insert.", PREFIX_LEN + 7) == 0;
	int del = strncmp(name, PREFIX "delete.", PREFIX_LEN + 7) == 0;
	if (!insert && !del) {
		/* Other names are not stored (cp --preserve=xattr skips them). */
		fuse_reply_err(req, strncmp(name, PREFIX, PREFIX_LEN) == 0 ? EPERM : EOPNOTSUPP);
		return;
	}
	const char *num = name + PREFIX_LEN + 7;
	uint64_t off = 0, dlen = 0;
	if (parse_dec(num, strlen(num), &off) || (del && parse_dec(value, size, &dlen))) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	int rc = td_fs_rw_begin(fs);
	if (rc == 0) {
		td_stat st;
		int err = td_edit_stat(fs->rw->ed, n, &st);
		if (err)
			rc = err == TD_EINVAL ? -ENOENT : -td_err_errno(err);
		else if (!S_ISREG(st.mode))
			rc = S_ISDIR(st.mode) ? -EISDIR : -EINVAL;
		else if (off > st.size)
			rc = -EINVAL; /* insert/delete start at most at the end */
		else if (insert ? size == 0 : dlen == 0 || off == st.size)
			rc = 1; /* nothing changes: no record */
	}
	if (rc == 0)
		rc = td_fs_rw_status(fs, insert ? td_edit_insert(fs->rw->ed, n, off, value, size)
						: td_edit_delete(fs->rw->ed, n, off, dlen));
	td_fs_rw_unlock(fs);
	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	/* The bytes moved behind the kernel's page cache: drop it (and the
	 * size) before answering, so the caller's next read sees the change. */
	if (rc == 0)
		td_fs_rw_inval(fs, n);
	fuse_reply_err(req, 0);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	static const char names[] = PREFIX "words";
	td_fs *fs = FS(req);
	td_stat st;
	td_fs_rw_rdlock(fs);
	int err = td_edit_stat(fs->rw->ed, td_fs_rw_node(ino), &st);
	td_fs_rw_unlock(fs);
	if (err) {
		fuse_reply_err(req, err == TD_EINVAL ? ENOENT : td_err_errno(err));
		return;
	}
	size_t n = S_ISDIR(st.mode) || S_ISREG(st.mode) ? sizeof names : 0;
	if (size == 0)
		fuse_reply_xattr(req, n);
	else if (n > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, names, n);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	(void)ino;
	td_fs *fs = FS(req);
	if (!fs->writable)
		fuse_reply_err(req, EROFS);
	else
		fuse_reply_err(req, strncmp(name, PREFIX, PREFIX_LEN) == 0 ? EPERM : ENODATA);
}

void td_fs_rw_ops_xattr(struct fuse_lowlevel_ops *ops)
{
	ops->getxattr = op_getxattr;
	ops->setxattr = op_setxattr;
	ops->listxattr = op_listxattr;
	ops->removexattr = op_removexattr;
}
