/* overlay_io: open files through the edit overlay: create, open, read, write, fsync, release. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "req.h"
#include "batcher.h"
#include "overlay.h"
#include "td_err.h"

#define FS(req) ((td_fs *)fuse_req_userdata(req))

/* 1 when a handle of node n other than self is a write-only appender's. */
static int appending(td_fs *fs, td_node n, const td_fs_file *self)
{
	int r = 0;
	pthread_mutex_lock(&fs->files_mu);
	for (const td_fs_file *f = fs->files; f && !r; f = f->next)
		r = f != self && f->e == n && f->append == 2;
	pthread_mutex_unlock(&fs->files_mu);
	return r;
}

/* Answer an open or create with a new file handle for node n. */
static void reply_opened(fuse_req_t req, td_fs *fs, td_node n, struct fuse_file_info *fi,
			 const struct fuse_entry_param *ep)
{
	int log_writer = (fi->flags & O_APPEND) && (fi->flags & O_ACCMODE) == O_WRONLY;
	td_fs_file *f = td_fs_file_new(fs, n, log_writer ? 2 : (fi->flags & O_APPEND) != 0);
	if (!f) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)f;
	/* Every change of the bytes goes through this kernel (writes, truncates)
	 * or is announced to it (insert/delete invalidate the inode), so pages
	 * may stay cached across opens. */
	fi->keep_cache = 1;
	/* Each write appears whole to readers. Through the page cache it
	 * would not: the kernel sends a write(2) in parts at the first page
	 * it does not hold whole, and a reader of the cache may meet a page it
	 * zero-filled past the old end. So a write-only O_APPEND handle (a
	 * log writer's: it cannot be mapped) writes directly (one request up
	 * to max_write, applied at once under the overlay's lock), and so does
	 * every handle opened while one is open, reading straight from the
	 * overlay: a writer's bytes are then seen all or not at all. Such
	 * handles cannot be mapped shared (ENODEV), like any direct-I/O file
	 * of FUSE; an O_RDWR | O_APPEND handle keeps the page cache so that
	 * it can be (its writes may show in parts), and so do handles opened
	 * before the first appender. */
	if (log_writer || appending(fs, n, f)) {
		fi->direct_io = 1;
		fi->keep_cache = 0;
	}
	int r = ep ? fuse_reply_create(req, ep, fi) : fuse_reply_open(req, fi);
	if (r != 0)
		td_fs_file_free(fs, f); /* interrupted: no release will come */
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	td_fs *fs = FS(req);
	td_node n = td_fs_rw_node(ino);
	int wants_write = (fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC);
	int rc = 0;
	td_stat st;
	td_fs_rw_rdlock(fs);
	int err = td_edit_stat(fs->rw->ed, n, &st);
	td_fs_rw_unlock(fs);
	if (err)
		rc = err == TD_EINVAL ? -ENOENT : -td_err_errno(err);
	else if (S_ISDIR(st.mode))
		rc = -EISDIR;
	else if (wants_write && !fs->writable)
		rc = -EROFS;
	if (rc == 0 && (fi->flags & O_TRUNC) && st.size > 0) {
		rc = td_fs_rw_begin(fs);
		if (rc == 0)
			rc = td_fs_rw_status(fs, td_edit_truncate(fs->rw->ed, n, 0));
		td_fs_rw_unlock(fs);
	}
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	reply_opened(req, fs, n, fi, NULL);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	td_fs *fs = FS(req);
	struct fuse_entry_param ep;
	td_node n = TD_NOENTRY;
	int rc = td_fs_rw_begin(fs);
	if (rc == 0)
		rc = td_fs_rw_status(fs, td_edit_create(fs->rw->ed, td_fs_rw_node(parent), name, strlen(name),
							S_IFREG | (mode & 07777), NULL, &n));
	if (rc == 0)
		rc = td_fs_rw_entry(fs, n, &ep);
	td_fs_rw_unlock(fs);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	reply_opened(req, fs, n, fi, &ep);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)ino;
	td_fs *fs = FS(req);
	uint64_t t0 = td_fs_batch_clock();
	td_fs_file *f = (td_fs_file *)(uintptr_t)fi->fh;
	if (!f || off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	void *buf = fs_scratch_get(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	size_t got = 0;
	int err;
	td_fs_rw_rdlock(fs);
	/* Readahead and threads sharing a descriptor must not wait for each
	 * other: the read that finds the cursor busy goes without it. */
	if (pthread_mutex_trylock(&f->mu) == 0) {
		err = td_edit_read(fs->rw->ed, f->e, (uint64_t)off, buf, size, &got, f->cur);
		pthread_mutex_unlock(&f->mu);
	} else {
		err = td_edit_read(fs->rw->ed, f->e, (uint64_t)off, buf, size, &got, NULL);
	}
	td_fs_rw_unlock(fs);
	if (err)
		fuse_reply_err(req, td_err_errno(err));
	else
		fuse_reply_buf(req, buf, got);
	td_fs_batch_record(fs, 1, t0, err ? 0 : got);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	(void)ino;
	td_fs *fs = FS(req);
	td_fs_file *f = (td_fs_file *)(uintptr_t)fi->fh;
	if (!f || off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	uint64_t at = (uint64_t)off;
	int rc = td_fs_rw_begin(fs);
	if (rc == 0 && f->append && !fi->writepage) {
		/* O_APPEND: the end is ours to know (the kernel's size may be
		 * stale after an insert or delete by another process). Page
		 * writeback of a shared mapping (writepage) keeps its offset. */
		td_stat st;
		int err = td_edit_stat(fs->rw->ed, f->e, &st);
		if (err)
			rc = -td_err_errno(err);
		else
			at = st.size;
	}
	if (rc == 0)
		rc = td_fs_rw_status(fs, td_edit_write(fs->rw->ed, f->e, at, buf, size));
	td_fs_rw_unlock(fs);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	/* f may be released (freed) as soon as the reply is out */
	const td_node node = f->e;
	fuse_reply_write(req, size);
	/* The kernel placed the bytes elsewhere: drop its pages and size. Only
	 * after the reply: a write through the page cache holds the locks of
	 * the pages it writes until it is answered, and the invalidation waits
	 * for them (a deadlock when done first). */
	if (at != (uint64_t)off)
		td_fs_rw_inval(fs, node, NULL);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino, (void)fi;
	fuse_reply_err(req, 0); /* every write already reached the journal */
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	(void)ino, (void)datasync, (void)fi;
	td_fs *fs = FS(req);
	int rc = 0;
	/* The journal holds every change of every file and directory: syncing
	 * it makes this one's changes (and the names leading to it) durable.
	 * Serves fsync and fsyncdir. */
	if (fs->rw->j && fs->rw->sync != TD_CONF_SYNC_NONE && td_journal_sync(fs->rw->j))
		rc = EIO;
	fuse_reply_err(req, rc);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	td_fs_file_free(FS(req), (td_fs_file *)(uintptr_t)fi->fh);
	fi->fh = 0;
	fuse_reply_err(req, 0);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
			 struct fuse_file_info *fi)
{
	(void)ino, (void)mode, (void)offset, (void)length, (void)fi;
	/* posix_fallocate(3) then writes zeros itself where needed. */
	fuse_reply_err(req, EOPNOTSUPP);
}

void td_fs_rw_ops_io(struct fuse_lowlevel_ops *ops)
{
	ops->open = op_open;
	ops->create = op_create;
	ops->read = op_read;
	ops->write = op_write;
	ops->flush = op_flush;
	ops->fsync = op_fsync;
	ops->fsyncdir = op_fsync;
	ops->release = op_release;
	ops->fallocate = op_fallocate;
}
