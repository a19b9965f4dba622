/* dir: pack a listing into readdir and readdirplus replies. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dir.h"
#include "td_format.h"

#define FS(req) ((td_fs *)fuse_req_userdata(req))

/* Pack the entries of l from off into buf; the bytes used or -errno. */
static ssize_t fill(td_fs *fs, fuse_req_t req, const td_fs_listing *l, char *buf, size_t size, off_t off, int plus)
{
	size_t pos = 0;
	char name[TD_MAXNAME + 1];
	for (uint64_t i = off < 0 ? 0 : (uint64_t)off; i < l->n + 2; i++) {
		struct fuse_entry_param ep;
		memset(&ep, 0, sizeof ep);
		const char *nm;
		if (i < 2) {
			nm = i == 0 ? "." : "..";
			ep.attr.st_ino = i == 0 ? l->self : l->parent;
			ep.attr.st_mode = S_IFDIR;
			/* ep.ino stays 0: the kernel makes no dentry for dots */
		} else {
			int rc = l->child(fs, l, i - 2, plus, name, &nm, &ep);
			if (rc)
				return rc;
		}
		size_t need = plus ? fuse_add_direntry_plus(req, buf + pos, size - pos, nm, &ep, (off_t)(i + 1))
				   : fuse_add_direntry(req, buf + pos, size - pos, nm, &ep.attr, (off_t)(i + 1));
		if (need > size - pos)
			break;
		pos += need;
	}
	return (ssize_t)pos;
}

void td_fs_reply_listing(fuse_req_t req, const td_fs_listing *l, size_t size, off_t off, int plus)
{
	td_fs *fs = FS(req);
	char *buf = malloc(size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (plus && l->lock)
		pthread_rwlock_rdlock(l->lock);
	ssize_t pos = fill(fs, req, l, buf, size, off, plus);
	if (plus && l->lock)
		pthread_rwlock_unlock(l->lock);
	if (pos < 0) {
		fuse_reply_err(req, (int)-pos);
	} else {
		if (pos > 0 && l->served)
			*l->served = 1;
		fuse_reply_buf(req, buf, (size_t)pos);
	}
	free(buf);
}

static void readdir_any(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi, int plus)
{
	td_fs *fs = FS(req);
	td_fs_listing l;
	int rc = fs->rw ? td_fs_rw_listing(fs, fi, off, &l) : td_fs_ro_listing(fs, ino, &l);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		td_fs_reply_listing(req, &l, size, off, plus);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	readdir_any(req, ino, size, off, fi, 0);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	readdir_any(req, ino, size, off, fi, 1);
}

void td_fs_ops_dir(struct fuse_lowlevel_ops *ops)
{
	ops->readdir = op_readdir;
	ops->readdirplus = op_readdirplus;
}
