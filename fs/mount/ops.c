/* ops: libfuse low-level handlers; each translates to engine calls and replies. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "dir.h"
#include "inode.h"
#include "kernel_tune.h"
#include "log.h"
#include "xattr_perm.h"
#include "ops.h"
#include "req.h"
#include "xattr.h"
#include "td_err.h"
#include "td_format.h"

#define FS(req) ((td_fs *)fuse_req_userdata(req))

/* Resolve ino or answer ENOENT; evaluates to the entry. */
#define ENTRY_OR_REPLY(fs, req, ino, e)                 \
	td_fs_busy(fs);                                 \
	td_entry e = td_fs_entry((fs), (ino));          \
	if (e == TD_NOENTRY) {                          \
		fuse_reply_err((req), ENOENT);          \
		return;                                 \
	}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	td_fs *fs = userdata;
	/* Opens carry no state a read needs (reads name the inode; a
	 * per-thread cursor continues sequential reads), so where the kernel
	 * can skip OPEN and RELEASE it is told to: two round trips fewer per
	 * file read whole (op_open answers ENOSYS once). */
	fs->no_open = (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) != 0;
	/* Symlink targets never change: let the kernel cache them. */
	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	/* Every listing chunk carries its entries' attributes (they cost
	 * nothing to give): with the kernel's adaptive mode, only the first
	 * chunk did, so `tar` or `find` over a directory larger than one
	 * chunk sent a LOOKUP for each entry after it. */
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	conn->want &= ~(unsigned)FUSE_CAP_READDIRPLUS_AUTO;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	/* Nothing is written, so no write-related caps; the largest request
	 * libfuse's buffer takes (1 MiB: max_pages 256) comes from max_write's
	 * default, which also sets max_pages for reads. */
	conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA;
	/* -o max_read=: libfuse ends the session unless INIT says it too. */
	if (((td_fs *)userdata)->max_read)
		conn->max_read = ((td_fs *)userdata)->max_read;
	td_fs_set_background(fs, conn);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	td_fs *fs = FS(req);
	td_fs_tune_readahead(fs);
	ENTRY_OR_REPLY(fs, req, parent, dir);
	size_t nlen = strlen(name);
	if (nlen > TD_MAXNAME) { /* as a local file system: statfs says f_namemax */
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	td_entry e;
	int err = td_archive_lookup(fs->a, dir, name, nlen, &e);
	struct fuse_entry_param ep;
	if (err == TD_ENOENT) {
		/* Negative entry, cached as long as positive ones. */
		memset(&ep, 0, sizeof ep);
		ep.entry_timeout = fs->entry_timeout;
		fuse_reply_entry(req, &ep);
		return;
	}
	if (err) {
		fuse_reply_err(req, td_err_errno(err));
		return;
	}
	int rc = td_fs_entry_param(fs, e, &ep);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_entry(req, &ep);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	(void)ino;
	(void)nlookup;
	fuse_reply_none(req); /* the inode table is the archive: nothing to drop */
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	(void)count;
	(void)forgets;
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)fi;
	td_fs *fs = FS(req);
	ENTRY_OR_REPLY(fs, req, ino, e);
	struct stat st;
	int rc = td_fs_getattr(fs, e, &st);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_attr(req, &st, fs->attr_timeout);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	td_fs *fs = FS(req);
	ENTRY_OR_REPLY(fs, req, ino, e);
	char target[TD_MAXPATH + 1];
	size_t got = 0;
	int err = td_archive_readlink(fs->a, e, target, sizeof target, &got);
	if (err) {
		if (err == TD_ECORRUPT)
			td_fs_log(TD_CONF_LOG_ERROR, "%s: %s", fs->archive_path, td_errdetail());
		fuse_reply_err(req, td_err_errno(err));
		return;
	}
	fuse_reply_readlink(req, target);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	td_fs *fs = FS(req);
	ENTRY_OR_REPLY(fs, req, ino, e);
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	td_stat st;
	int err = td_archive_stat(fs->a, e, &st);
	if (err) {
		fuse_reply_err(req, td_err_errno(err));
		return;
	}
	if (S_ISDIR(st.mode)) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if (fs->no_open) {
		fuse_reply_err(req, ENOSYS); /* from now on the kernel opens without asking */
		return;
	}
	td_fs_file *f = td_fs_file_new(fs, e, 0);
	if (!f) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)f;
	fi->keep_cache = 1; /* unmodified files keep their pages across opens */
	if (fuse_reply_open(req, fi) != 0)
		td_fs_file_free(fs, f); /* interrupted: the kernel will not release it */
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	td_fs *fs = FS(req);
	td_fs_file *f = (td_fs_file *)(uintptr_t)fi->fh; /* NULL: opened without op_open */
	td_fs_tune_readahead(fs);
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	ENTRY_OR_REPLY(fs, req, ino, e);
	td_fs_req r = {
		.kind = TD_FS_READ,
		.req = req,
		.fs = fs,
		.e = f ? f->e : e,
		.size = size,
		.off = (uint64_t)off,
		.file = f,
		.direct = (fi->flags & O_DIRECT) != 0,
	};
	td_fs_dispatch(fs, &r);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	td_fs_file_free(FS(req), (td_fs_file *)(uintptr_t)fi->fh);
	fi->fh = 0;
	fuse_reply_err(req, 0);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	td_fs *fs = FS(req);
	ENTRY_OR_REPLY(fs, req, ino, e);
	td_entry first;
	uint32_t count;
	int err = td_archive_children(fs->a, e, &first, &count);
	if (err) {
		fuse_reply_err(req, td_err_errno(err));
		return;
	}
	fi->fh = 0;
	fi->cache_readdir = 1; /* listings never change on a read-only mount */
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static int ro_child(td_fs *fs, const td_fs_listing *l, uint64_t k, int plus, char *namebuf, const char **name,
		    struct fuse_entry_param *ep)
{
	td_entry e = l->first + (td_entry)k;
	size_t nlen = 0;
	const char *p = td_archive_name(fs->a, e, &nlen);
	if (!p || nlen == 0 || nlen > TD_MAXNAME)
		return -EIO;
	memcpy(namebuf, p, nlen);
	namebuf[nlen] = '\0';
	*name = namebuf;
	if (plus)
		return td_fs_entry_param(fs, e, ep);
	td_stat st;
	int err = td_archive_stat(fs->a, e, &st);
	if (err)
		return -td_err_errno(err);
	ep->attr.st_ino = td_fs_ino(e);
	ep->attr.st_mode = st.mode;
	return 0;
}

int td_fs_ro_listing(td_fs *fs, fuse_ino_t ino, td_fs_listing *l)
{
	td_fs_busy(fs);
	td_entry dir = td_fs_entry(fs, ino);
	if (dir == TD_NOENTRY)
		return -ENOENT;
	td_entry first;
	uint32_t count;
	int err = td_archive_children(fs->a, dir, &first, &count);
	td_stat dst;
	if (!err)
		err = td_archive_stat(fs->a, dir, &dst);
	if (err)
		return -td_err_errno(err);
	*l = (td_fs_listing){
		.self = td_fs_ino(dir),
		.parent = td_fs_ino(dir == TD_ROOT ? TD_ROOT : dst.parent),
		.n = count,
		.child = ro_child,
		.first = first,
	};
	return 0;
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	fuse_reply_err(req, 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	(void)ino;
	td_fs *fs = FS(req);
	struct statvfs sv;
	memset(&sv, 0, sizeof sv);
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = (fsblkcnt_t)((fs->archive_bytes + 4095) / 4096);
	sv.f_files = fs->nentries;
	sv.f_namemax = TD_MAXNAME;
	sv.f_flag = fs->writable ? 0 : ST_RDONLY;
	struct statvfs host;
	if (fs->writable && statvfs(fs->archive_path, &host) == 0) {
		/* writes go to the journal beside the archive: its file system's
		 * free space and inodes are this mount's room to grow */
		uint64_t unit = host.f_frsize ? host.f_frsize : host.f_bsize;
		sv.f_bfree = (fsblkcnt_t)((uint64_t)host.f_bfree * unit / 4096);
		sv.f_bavail = (fsblkcnt_t)((uint64_t)host.f_bavail * unit / 4096);
		sv.f_blocks += sv.f_bfree;
		sv.f_ffree = sv.f_favail = host.f_favail;
		sv.f_files += sv.f_ffree;
	}
	fuse_reply_statfs(req, &sv);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	td_fs *fs = FS(req);
	ENTRY_OR_REPLY(fs, req, ino, e);
	/* `ls -l`, cp -a and the kernel ask for security.* and system.* names
	 * on every entry: answer those at once instead of queueing them. */
	if (strncmp(name, TD_FS_XATTR_PREFIX, sizeof TD_FS_XATTR_PREFIX - 1) != 0) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	td_fs_req r = {
		.kind = TD_FS_GETXATTR,
		.req = req,
		.fs = fs,
		.e = e,
		.size = size,
		.name = name,
		.who = td_fs_who(fs, req),
	};
	td_fs_dispatch(fs, &r);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	td_fs *fs = FS(req);
	ENTRY_OR_REPLY(fs, req, ino, e);
	char buf[256];
	ssize_t n = td_fs_xattr_list(fs, e, buf, sizeof buf);
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)n);
	else if ((size_t)n > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, buf, (size_t)n);
}

/* --- mutations: EROFS until a writable-mount module replaces these --- */

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, struct fuse_file_info *fi)
{
	(void)ino, (void)attr, (void)to_set, (void)fi;
	fuse_reply_err(req, EROFS);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	(void)parent, (void)name, (void)mode, (void)rdev;
	fuse_reply_err(req, EROFS);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	(void)parent, (void)name, (void)mode;
	fuse_reply_err(req, EROFS);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)parent, (void)name;
	fuse_reply_err(req, EROFS);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	(void)link, (void)parent, (void)name;
	fuse_reply_err(req, EROFS);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	(void)parent, (void)name, (void)newparent, (void)newname, (void)flags;
	fuse_reply_err(req, EROFS);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	(void)ino, (void)newparent, (void)newname;
	fuse_reply_err(req, EROFS);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	(void)ino, (void)buf, (void)size, (void)off, (void)fi;
	fuse_reply_err(req, EROFS);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
			int flags)
{
	(void)ino, (void)name, (void)value, (void)size, (void)flags;
	fuse_reply_err(req, EROFS);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	(void)ino, (void)name;
	fuse_reply_err(req, EROFS);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	(void)parent, (void)name, (void)mode, (void)fi;
	fuse_reply_err(req, EROFS);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
			 struct fuse_file_info *fi)
{
	(void)ino, (void)mode, (void)offset, (void)length, (void)fi;
	fuse_reply_err(req, EROFS);
}

void td_fs_ops_fill(struct fuse_lowlevel_ops *ops)
{
	memset(ops, 0, sizeof *ops);
	ops->init = op_init;
	ops->lookup = op_lookup;
	ops->forget = op_forget;
	ops->forget_multi = op_forget_multi;
	ops->getattr = op_getattr;
	ops->readlink = op_readlink;
	ops->open = op_open;
	ops->read = op_read;
	ops->release = op_release;
	ops->opendir = op_opendir;
	td_fs_ops_dir(ops);
	ops->releasedir = op_releasedir;
	ops->statfs = op_statfs;
	ops->getxattr = op_getxattr;
	ops->listxattr = op_listxattr;
	ops->setattr = op_setattr;
	ops->mknod = op_mknod;
	ops->mkdir = op_mkdir;
	ops->unlink = op_unlink;
	ops->rmdir = op_unlink;
	ops->symlink = op_symlink;
	ops->rename = op_rename;
	ops->link = op_link;
	ops->write = op_write;
	ops->setxattr = op_setxattr;
	ops->removexattr = op_removexattr;
	ops->create = op_create;
	ops->fallocate = op_fallocate;
}
