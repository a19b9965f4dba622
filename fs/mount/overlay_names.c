/* overlay_names: names and attributes through the edit overlay: lookup, stat, setattr, mkdir, unlink, rename, readdir. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kernel_tune.h"
#include "dir.h"
#include "overlay.h"
#include "td_err.h"
#include "td_format.h"

#define FS(req) ((td_fs *)fuse_req_userdata(req))

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

static int errno_of(int err)
{
	return err == TD_EINVAL ? EINVAL : td_err_errno(err);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	td_fs *fs = FS(req);
	td_fs_tune_readahead(fs);
	struct fuse_entry_param ep;
	td_node child;
	size_t nlen = strlen(name);
	if (nlen > TD_MAXNAME) { /* as creating one does (td_edit: TD_ELIMIT) */
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	td_fs_rw_rdlock(fs);
	int err = td_edit_lookup(fs->rw->ed, td_fs_rw_node(parent), name, nlen, &child);
	int rc = 0;
	if (err == TD_OK)
		rc = td_fs_rw_entry(fs, child, &ep);
	td_fs_rw_unlock(fs);
	if (err == TD_ENOENT) {
		memset(&ep, 0, sizeof ep);
		ep.entry_timeout = fs->entry_timeout; /* negative entry */
		fuse_reply_entry(req, &ep);
	} else if (err) {
		fuse_reply_err(req, errno_of(err));
	} else if (rc) {
		fuse_reply_err(req, -rc);
	} else {
		fuse_reply_entry(req, &ep);
	}
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)fi;
	td_fs *fs = FS(req);
	struct stat st;
	td_fs_rw_rdlock(fs);
	int rc = td_fs_rw_getattr(fs, td_fs_rw_node(ino), &st);
	td_fs_rw_unlock(fs);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_attr(req, &st, fs->attr_timeout);
}

static void now(int64_t *sec, uint32_t *nsec)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	*sec = ts.tv_sec;
	*nsec = (uint32_t)ts.tv_nsec;
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, struct fuse_file_info *fi)
{
	(void)fi;
	td_fs *fs = FS(req);
	td_node n = td_fs_rw_node(ino);
	int rc = td_fs_rw_begin(fs);
	td_edit *ed = fs->rw->ed;
	td_stat ts;
	if (rc == 0) {
		int err = td_edit_stat(ed, n, &ts);
		if (err)
			rc = err == TD_EINVAL ? -ENOENT : -td_err_errno(err);
	}
	/* Owners are the mounting user's: only "changes" to them pass. */
	if (rc == 0 && (((to_set & FUSE_SET_ATTR_UID) && attr->st_uid != fs->uid) ||
			((to_set & FUSE_SET_ATTR_GID) && attr->st_gid != fs->gid)))
		rc = -EPERM;
	if (rc == 0 && (to_set & FUSE_SET_ATTR_SIZE)) {
		if (!S_ISREG(ts.mode))
			rc = S_ISDIR(ts.mode) ? -EISDIR : -EINVAL;
		else if (attr->st_size < 0)
			rc = -EINVAL;
		else if ((uint64_t)attr->st_size != ts.size)
			rc = td_fs_rw_status(fs, td_edit_truncate(ed, n, (uint64_t)attr->st_size));
	}
	if (rc == 0 && (to_set & FUSE_SET_ATTR_MODE) && (attr->st_mode & 07777) != (ts.mode & 07777))
		rc = td_fs_rw_status(fs, td_edit_chmod(ed, n, attr->st_mode & 07777));
	if (rc == 0 && (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW))) {
		int64_t sec;
		uint32_t nsec;
		if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
			now(&sec, &nsec);
		} else {
			sec = attr->st_mtim.tv_sec;
			nsec = (uint32_t)attr->st_mtim.tv_nsec;
		}
		rc = td_fs_rw_status(fs, td_edit_utimes(ed, n, sec, nsec));
	}
	/* atime and ctime are not stored: they read as the mtime. */
	struct stat st;
	if (rc == 0)
		rc = td_fs_rw_getattr(fs, n, &st);
	td_fs_rw_unlock(fs);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_attr(req, &st, fs->attr_timeout);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	td_fs *fs = FS(req);
	td_node n = td_fs_rw_node(ino);
	char target[TD_MAXPATH + 1];
	size_t got = 0;
	td_stat st;
	td_fs_rw_rdlock(fs);
	int err = td_edit_stat(fs->rw->ed, n, &st);
	if (!err && !S_ISLNK(st.mode))
		err = TD_EINVAL;
	if (!err && st.size > TD_MAXPATH)
		err = TD_ECORRUPT;
	if (!err)
		err = td_edit_read(fs->rw->ed, n, 0, target, (size_t)st.size, &got, NULL);
	td_fs_rw_unlock(fs);
	if (err) {
		fuse_reply_err(req, errno_of(err));
		return;
	}
	target[got] = '\0';
	fuse_reply_readlink(req, target);
}

/* Create a node (file, directory, symlink) and answer with its entry. */
static void make_node(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, const char *target)
{
	td_fs *fs = FS(req);
	struct fuse_entry_param ep;
	int rc = td_fs_rw_begin(fs);
	td_node n = TD_NOENTRY;
	/* A directory made in a set-group-ID directory is set-group-ID too, as
	 * on a local file system (the group is the mount's either way). */
	td_stat ps;
	if (rc == 0 && S_ISDIR(mode) && td_edit_stat(fs->rw->ed, td_fs_rw_node(parent), &ps) == 0 &&
	    (ps.mode & S_ISGID))
		mode |= S_ISGID;
	if (rc == 0)
		rc = td_fs_rw_status(fs, td_edit_create(fs->rw->ed, td_fs_rw_node(parent), name, strlen(name), mode,
							target, &n));
	if (rc == 0)
		rc = td_fs_rw_entry(fs, n, &ep);
	td_fs_rw_unlock(fs);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_entry(req, &ep);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	(void)rdev;
	if (!S_ISREG(mode)) {
		fuse_reply_err(req, EPERM); /* only files, directories and symlinks are stored */
		return;
	}
	make_node(req, parent, name, mode & (S_IFMT | 07777), NULL);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	make_node(req, parent, name, S_IFDIR | (mode & 07777), NULL);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	make_node(req, parent, name, S_IFLNK | 0777, link);
}

static void remove_common(fuse_req_t req, fuse_ino_t parent, const char *name, int dir)
{
	td_fs *fs = FS(req);
	int rc = td_fs_rw_begin(fs);
	if (rc == 0) {
		td_node d = td_fs_rw_node(parent);
		size_t len = strlen(name);
		rc = td_fs_rw_status(fs, dir ? td_edit_rmdir(fs->rw->ed, d, name, len)
					     : td_edit_unlink(fs->rw->ed, d, name, len));
	}
	td_fs_rw_unlock(fs);
	fuse_reply_err(req, -rc);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_common(req, parent, name, 0);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_common(req, parent, name, 1);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	td_fs *fs = FS(req);
	if (flags & ~(unsigned)RENAME_NOREPLACE) {
		fuse_reply_err(req, EINVAL); /* RENAME_EXCHANGE, RENAME_WHITEOUT */
		return;
	}
	int rc = td_fs_rw_begin(fs);
	if (rc == 0)
		rc = td_fs_rw_status(fs, td_edit_rename(fs->rw->ed, td_fs_rw_node(parent), name, strlen(name),
							td_fs_rw_node(newparent), newname, strlen(newname),
							(flags & RENAME_NOREPLACE) ? TD_RENAME_NOREPLACE : 0));
	td_fs_rw_unlock(fs);
	fuse_reply_err(req, -rc);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	(void)ino, (void)newparent, (void)newname;
	/* A node has one name: hard links are not stored. */
	fuse_reply_err(req, FS(req)->writable ? EPERM : EROFS);
}

/* --- directories: a listing is a snapshot taken at opendir (and again at
 * rewinddir), so a reader that removes entries as it goes (rm -r) neither
 * skips nor repeats names --- */

typedef struct dsnap_ent {
	td_node node;
	mode_t type;
	char *name;
} dsnap_ent;

typedef struct dsnap {
	td_node dir, parent;
	size_t n;
	dsnap_ent *v;
	int served;               /* a readdir at offset > 0 has been answered */
} dsnap;

static void dsnap_clear(dsnap *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i].name);
	free(s->v);
	s->v = NULL;
	s->n = 0;
}

/* Fill s from the current listing; caller holds the read lock. */
static int dsnap_take(td_fs *fs, dsnap *s)
{
	td_edit *ed = fs->rw->ed;
	dsnap_clear(s);
	td_stat st;
	int err = td_edit_stat(ed, s->dir, &st);
	if (err)
		return err == TD_EINVAL ? -ENOENT : -td_err_errno(err);
	if (!S_ISDIR(st.mode))
		return -ENOTDIR;
	s->parent = s->dir == TD_ROOT || st.parent == TD_NOENTRY ? s->dir : st.parent;
	size_t cap = 0;
	uint64_t cookie = 0;
	td_node child;
	const char *name;
	size_t len;
	while ((err = td_edit_dir_next(ed, s->dir, &cookie, &child, &name, &len)) == TD_OK) {
		if (s->n == cap) {
			cap = cap ? cap * 2 : 64;
			dsnap_ent *v = realloc(s->v, cap * sizeof *v);
			if (!v)
				return -ENOMEM;
			s->v = v;
		}
		td_stat cs;
		if (td_edit_stat(ed, child, &cs))
			return -EIO;
		char *nm = malloc(len + 1);
		if (!nm)
			return -ENOMEM;
		memcpy(nm, name, len);
		nm[len] = '\0';
		s->v[s->n++] = (dsnap_ent){ .node = child, .type = cs.mode & S_IFMT, .name = nm };
	}
	return err == TD_ENOENT ? 0 : -td_err_errno(err);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	td_fs *fs = FS(req);
	dsnap *s = calloc(1, sizeof *s);
	if (!s) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	s->dir = td_fs_rw_node(ino);
	td_fs_rw_rdlock(fs);
	int rc = dsnap_take(fs, s);
	td_fs_rw_unlock(fs);
	if (rc) {
		dsnap_clear(s);
		free(s);
		fuse_reply_err(req, -rc);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)s;
	if (fuse_reply_open(req, fi) != 0) {
		dsnap_clear(s);
		free(s);
	}
}

static int rw_child(td_fs *fs, const td_fs_listing *l, uint64_t k, int plus, char *namebuf, const char **name,
		    struct fuse_entry_param *ep)
{
	(void)namebuf;
	const dsnap_ent *d = &((const dsnap *)l->ctx)->v[k];
	*name = d->name;
	ep->attr.st_ino = (ino_t)d->node + 1;
	ep->attr.st_mode = d->type;
	/* An entry removed, renamed or replaced since the snapshot is listed
	 * without attributes (no lookup is counted for it): with them the
	 * kernel would link the name to that node again (a dentry over the
	 * current one), and a path lookup would reach a file no longer (or
	 * not yet) under that name until the entry timeout. The caller holds
	 * the read lock, and the kernel the directory's lock, so what is
	 * checked here is what the kernel sees when it links the entry. */
	td_node now;
	if (plus && (td_edit_lookup(fs->rw->ed, ((const dsnap *)l->ctx)->dir, d->name, strlen(d->name), &now) != TD_OK ||
		     now != d->node || td_fs_rw_entry(fs, d->node, ep) != 0)) {
		memset(ep, 0, sizeof *ep);
		ep->attr.st_ino = (ino_t)d->node + 1;
		ep->attr.st_mode = d->type;
	}
	return 0;
}

int td_fs_rw_listing(td_fs *fs, struct fuse_file_info *fi, off_t off, td_fs_listing *l)
{
	dsnap *s = (dsnap *)(uintptr_t)fi->fh;
	if (!s)
		return -EBADF;
	int rc = 0;
	td_fs_rw_rdlock(fs);
	if (off == 0 && s->served)
		rc = dsnap_take(fs, s); /* rewinddir: a fresh listing */
	td_fs_rw_unlock(fs);
	if (rc)
		return rc;
	*l = (td_fs_listing){
		.self = (fuse_ino_t)s->dir + 1,
		.parent = (fuse_ino_t)s->parent + 1,
		.n = s->n,
		.child = rw_child,
		.ctx = s,
		.lock = &fs->rw->lock,
		.served = &s->served,
	};
	return 0;
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	dsnap *s = (dsnap *)(uintptr_t)fi->fh;
	if (s) {
		dsnap_clear(s);
		free(s);
	}
	fuse_reply_err(req, 0);
}

void td_fs_rw_ops_ns(struct fuse_lowlevel_ops *ops)
{
	ops->lookup = op_lookup;
	ops->getattr = op_getattr;
	ops->setattr = op_setattr;
	ops->readlink = op_readlink;
	ops->mknod = op_mknod;
	ops->mkdir = op_mkdir;
	ops->symlink = op_symlink;
	ops->unlink = op_unlink;
	ops->rmdir = op_rmdir;
	ops->rename = op_rename;
	ops->link = op_link;
	ops->opendir = op_opendir;
	ops->releasedir = op_releasedir;
}
