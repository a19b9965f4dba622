/* overlay_xattr: user.tadoc.* through the edit overlay: counts and search over edits, insert and delete. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "batcher.h"
#include "overlay.h"
#include "xattr_name.h"
#include "td_err.h"
#include "td_query.h"

#define FS(req) ((td_fs *)fuse_req_userdata(req))
#define PREFIX TD_FS_XATTR_PREFIX
#define PREFIX_LEN (sizeof PREFIX - 1)

/* The read names are those of xattr_name.h, computed over the edited text;
 * directory search lists hits by node (creation) order, not path order.
 * insert.OFFSET inserts the value before OFFSET (0 <= OFFSET <= size; the
 * rest shifts right); delete.OFFSET removes [OFFSET, OFFSET+LENGTH) clamped
 * to the size (OFFSET <= size; the rest shifts left). */

static int edit_path(const void *ed, uint32_t file, char *buf, size_t cap)
{
	return td_edit_path(ed, file, buf, cap);
}

/* Value of a read name; caller holds the read lock. */
static int xattr_get(td_fs *fs, td_node n, const td_fs_xname *x, char **val, size_t *len)
{
	*val = NULL;
	*len = 0;
	td_edit *ed = fs->rw->ed;
	td_stat st;
	int err = td_edit_stat(ed, n, &st);
	if (err)
		return err == TD_EINVAL ? -ENOENT : -td_err_errno(err);
	int is_dir = S_ISDIR(st.mode);
	if (!is_dir && !S_ISREG(st.mode))
		return -ENODATA;
	if (x->kind == TD_FS_XINSERT || x->kind == TD_FS_XDELETE)
		return -ENODATA;
	if (x->err)
		return x->err;
	uint64_t v = 0;
	switch (x->kind) {
	case TD_FS_XWORDS:
		if ((err = td_edit_nwords(ed, n, &v)))
			return -td_err_errno(err);
		return fs_value_u64(v, val, len);
	case TD_FS_XCOUNT:
		if ((err = td_edit_count(ed, x->word, x->wlen, n, &v)))
			return -td_err_errno(err);
		return fs_value_u64(v, val, len);
	case TD_FS_XSEARCH: {
		td_hits h = { 0 };
		err = td_edit_search(ed, x->word, x->wlen, n, &h);
		int rc = err ? -td_err_errno(err)
			     : td_fs_xattr_search_value(&h, x->num, x->word, x->wlen, is_dir ? edit_path : NULL, ed,
							val, len);
		td_hits_free(&h);
		return rc;
	}
	default:
		return -ENODATA;
	}
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	td_fs *fs = FS(req);
	td_fs_xname x;
	td_fs_xattr_parse(name, &x);
	if (strncmp(name, PREFIX, PREFIX_LEN) != 0) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	char *val = NULL;
	size_t len = 0;
	uint64_t t0 = td_fs_batch_clock();
	int rc;
	if (x.kind == TD_FS_XSTATS) { /* the request counters, on the root only */
		rc = td_fs_rw_node(ino) == TD_ROOT ? td_fs_batch_stats(fs, &val, &len) : -ENODATA;
	} else {
		td_fs_rw_rdlock(fs);
		rc = xattr_get(fs, td_fs_rw_node(ino), &x, &val, &len);
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
	td_fs_xname x;
	td_fs_xattr_parse(name, &x);
	int insert = x.kind == TD_FS_XINSERT, del = x.kind == TD_FS_XDELETE;
	if (!insert && !del) {
		/* Other names are not stored (cp --preserve=xattr skips them). */
		fuse_reply_err(req, strncmp(name, PREFIX, PREFIX_LEN) == 0 ? EPERM : EOPNOTSUPP);
		return;
	}
	uint64_t off = x.num, dlen = 0;
	if (x.err || (del && td_fs_xattr_dec(value, size, &dlen))) {
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
