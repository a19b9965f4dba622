/* overlay: lock, journal replay, change application and teardown of an edit-overlay mount. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"
#include "kernel_tune.h"
#include "overlay.h"
#include "inode.h"
#include "req.h"
#include "td_compact.h"
#include "td_err.h"
#include "td_lock.h"

/* Writable mounts see changes only through this mount's own kernel inode
 * cache, but setxattr edits move bytes behind it: keep timeouts short. */
#define TD_FS_RW_TIMEOUT 1.0
/* Directories with more children than this report nlink 1 ("unknown",
 * as btrfs and find's -noleaf understand it) instead of being counted. */
#define NLINK_SCAN_MAX 4096

/* A compaction may have replaced the archive file between the first open
 * and the lock: when the locked file is not the mapped archive (its size or
 * header differs: td_archive_same_file), open it and serve it. */
static int reopen_archive(td_fs *fs)
{
	/* the same file: nothing to do (comparing td_info instead opened the
	 * archive again and, format 5, every shard twice: not at mount) */
	if (td_archive_same_file(fs->a, fs->archive_path))
		return 0;
	td_archive *na = NULL;
	int err = td_archive_open(fs->archive_path, 0, &na);
	if (err)
		return td_fs_fail_td(fs->archive_path, err);
	td_info now;
	td_archive_info(na, &now);
	td_archive_close(fs->a);
	fs->a = na;
	fs->nentries = td_archive_nentries(na);
	fs->archive_bytes = now.archive_bytes;
	return 0;
}

static int journal_exists(const char *archive_path)
{
	size_t n = strlen(archive_path);
	char *p = malloc(n + sizeof ".journal");
	if (!p)
		return 1;
	memcpy(p, archive_path, n);
	memcpy(p + n, ".journal", sizeof ".journal");
	struct stat st;
	int r = stat(p, &st) == 0;
	free(p);
	return r;
}

int td_fs_rw_open(td_fs *fs, int writable, int *lock_fd)
{
	*lock_fd = -1;
	int err = td_lock_archive(fs->archive_path, writable, TD_LOCK_WAIT_MS, lock_fd);
	if (err)
		return td_fs_fail_td(fs->archive_path, err);
	if (reopen_archive(fs))
		goto fail_lock;
	if (!writable && !journal_exists(fs->archive_path))
		return 0;

	td_fs_rw *rw = calloc(1, sizeof *rw);
	if (!rw) {
		fprintf(stderr, "tadocfs: %s: %s\n", fs->archive_path, strerror(ENOMEM));
		goto fail_lock;
	}
	rw->lock_fd = *lock_fd;
	rw->writable = writable;
	rw->sync = (int)fs->conf.journal_sync;
	if ((err = td_edit_new(fs->a, &rw->ed))) {
		td_fs_fail_td(fs->archive_path, err);
		goto fail_rw;
	}
	unsigned flags = 0;
	if (!writable)
		flags |= TD_JOURNAL_READONLY;
	else if (rw->sync == TD_CONF_SYNC_ALWAYS)
		flags |= TD_JOURNAL_SYNC;
	err = td_journal_open(fs->archive_path, rw->ed, flags, &rw->j, &rw->rep);
	if (err) {
		/* The detail names the journal, the offset and what to do. */
		const char *d = td_errdetail();
		if (d && *d)
			fprintf(stderr, "tadocfs: %s\n", d);
		else
			td_fs_fail_td("journal", err);
		goto fail_rw;
	}
	/* Damage found and dropped (or an already folded-in journal emptied):
	 * say so before the daemon leaves the terminal. */
	if (rw->rep.swept_msg[0])
		td_fs_log(TD_CONF_LOG_WARN, "%s: %s", fs->archive_path, rw->rep.swept_msg);
	if (rw->rep.msg[0])
		td_fs_log(TD_CONF_LOG_ERROR, "%s", rw->rep.msg);
	if (!writable && !td_edit_changed(rw->ed)) {
		td_journal_close(rw->j);
		td_edit_free(rw->ed);
		free(rw);
		return 0;
	}
	if (writable)
		td_edit_set_log(rw->ed, td_journal_log, rw->j);
	pthread_rwlock_init(&rw->lock, NULL);
	pthread_mutex_init(&rw->vmu, NULL);
	pthread_mutex_init(&rw->imu, NULL);
	pthread_cond_init(&rw->icv, NULL);
	fs->rw = rw;
	fs->writable = writable;
	fs->entry_timeout = TD_FS_RW_TIMEOUT;
	fs->attr_timeout = TD_FS_RW_TIMEOUT;
	return 0;

fail_rw:
	td_journal_close(rw->j);
	td_edit_free(rw->ed);
	free(rw);
fail_lock:
	td_unlock_archive(*lock_fd);
	*lock_fd = -1;
	return 1;
}

int td_fs_rw_close(td_fs *fs, int lock_fd)
{
	td_fs_rw *rw = fs->rw;
	int rc = 0;
	if (rw) {
		td_fs_files_free_all(fs);
		if (rw->j && td_journal_sync(rw->j)) {
			td_fs_log(TD_CONF_LOG_ERROR, "journal: %s", td_errdetail());
			rc = -1;
		}
		/* compact_threshold (default 0: off) compacts at unmount */
		const td_conf *c = &fs->conf;
		if (rc == 0 && rw->writable && rw->j && !rw->broken && c->compact_threshold > 0 &&
		    td_journal_bytes(rw->j) > c->compact_threshold) {
			uint64_t jb = td_journal_bytes(rw->j);
			int err = td_compact(fs->a, rw->ed, rw->j, fs->archive_path, NULL, &lock_fd);
			if (err)
				td_fs_log(TD_CONF_LOG_ERROR,
					  "%s: compaction at unmount failed (the journal keeps every change): %s: %s",
					  fs->archive_path, td_strerror(err), td_errdetail());
			else
				td_fs_log(TD_CONF_LOG_INFO, "%s: compacted %llu journal bytes into the archive at unmount",
					  fs->archive_path, (unsigned long long)jb);
		}
		td_journal_close(rw->j);
		td_edit_free(rw->ed);
		pthread_rwlock_destroy(&rw->lock);
		td_fs_rw_vals_free(rw);
		pthread_mutex_destroy(&rw->vmu);
		td_fs_rw_inval_stop(fs); /* normally done already: nothing left */
		pthread_cond_destroy(&rw->icv);
		pthread_mutex_destroy(&rw->imu);
		free(rw);
		fs->rw = NULL;
	}
	td_unlock_archive(lock_fd);
	return rc;
}

int td_fs_rw_begin(td_fs *fs)
{
	td_fs_rw *rw = fs->rw;
	pthread_rwlock_wrlock(&rw->lock);
	if (!rw->writable)
		return -EROFS;
	if (rw->broken)
		return -EIO;
	return 0;
}

int td_fs_rw_status(td_fs *fs, int err)
{
	if (err == TD_ENOMEM) {
		/* Logged but perhaps half applied: the journal is right, the
		 * state may not be. Refuse further changes; a remount replays. */
		fs->rw->broken = 1;
		td_fs_log(TD_CONF_LOG_ERROR,
			  "%s: out of memory while applying a change; further changes refused until remount",
			  fs->archive_path);
		return -ENOMEM;
	}
	if (err == TD_EIO) {
		const char *d = td_errdetail();
		td_fs_log(TD_CONF_LOG_ERROR, "journal: %s", d && *d ? d : "write failed");
		/* A full disk is worth telling the writer as such. */
		if (d && strstr(d, strerror(ENOSPC)))
			return -ENOSPC;
	}
	return err ? -td_err_errno(err) : 0;
}

typedef struct td_fs_inval {
	struct td_fs_inval *next;
	td_node n;
	fuse_req_t req;           /* answered once the pages are gone; or NULL */
} td_fs_inval;

static void *inval_main(void *arg)
{
	td_fs *fs = arg;
	td_fs_rw *rw = fs->rw;
	pthread_mutex_lock(&rw->imu);
	for (;;) {
		while (!rw->ihead && !rw->istop)
			pthread_cond_wait(&rw->icv, &rw->imu);
		td_fs_inval *it = rw->ihead;
		if (!it)
			break; /* stopping, nothing left */
		rw->ihead = it->next;
		if (!rw->ihead)
			rw->itail = NULL;
		int stopping = rw->istop;
		pthread_mutex_unlock(&rw->imu);
		/* Once the session loop ended no worker answers the reads
		 * whose pages the kernel would wait for: only answer. */
		if (fs->se && !stopping)
			fuse_lowlevel_notify_inval_inode(fs->se, (fuse_ino_t)it->n + 1, 0, 0);
		if (it->req)
			fuse_reply_err(it->req, 0);
		free(it);
		pthread_mutex_lock(&rw->imu);
	}
	pthread_mutex_unlock(&rw->imu);
	return NULL;
}

void td_fs_rw_inval(td_fs *fs, td_node n, fuse_req_t req)
{
	td_fs_rw *rw = fs->rw;
	td_fs_inval *it = malloc(sizeof *it);
	pthread_mutex_lock(&rw->imu);
	if (it && !rw->istop && !rw->istarted) {
		/* started on first use: after fuse_daemonize's fork */
		if (pthread_create(&rw->ithread, NULL, inval_main, fs) == 0)
			rw->istarted = 1;
	}
	if (it && rw->istarted && !rw->istop) {
		*it = (td_fs_inval){ NULL, n, req };
		if (rw->itail)
			rw->itail->next = it;
		else
			rw->ihead = it;
		rw->itail = it;
		pthread_cond_signal(&rw->icv);
		pthread_mutex_unlock(&rw->imu);
		return;
	}
	pthread_mutex_unlock(&rw->imu);
	free(it);
	/* No thread (out of memory, or stopping): as before, in this thread. */
	if (fs->se)
		fuse_lowlevel_notify_inval_inode(fs->se, (fuse_ino_t)n + 1, 0, 0);
	if (req)
		fuse_reply_err(req, 0);
}

void td_fs_rw_inval_stop(td_fs *fs)
{
	td_fs_rw *rw = fs->rw;
	if (!rw)
		return;
	pthread_mutex_lock(&rw->imu);
	int started = rw->istarted;
	rw->istop = 1;
	rw->istarted = 0;
	pthread_cond_broadcast(&rw->icv);
	pthread_mutex_unlock(&rw->imu);
	if (started)
		pthread_join(rw->ithread, NULL);
}

static uint32_t count_subdirs(const td_edit *ed, td_node dir)
{
	uint64_t cookie = 0;
	uint32_t n = 0;
	td_node child;
	const char *name;
	size_t len;
	while (td_edit_dir_next(ed, dir, &cookie, &child, &name, &len) == TD_OK) {
		if (cookie > NLINK_SCAN_MAX)
			return UINT32_MAX;
		td_stat cs;
		if (td_edit_stat(ed, child, &cs) == TD_OK && S_ISDIR(cs.mode))
			n++;
	}
	return n;
}

int td_fs_rw_getattr(td_fs *fs, td_node n, struct stat *st)
{
	td_stat ts;
	if (n == TD_NOENTRY)
		return -ENOENT;
	int err = td_edit_stat(fs->rw->ed, n, &ts);
	if (err)
		return err == TD_EINVAL ? -ENOENT : -td_err_errno(err);
	nlink_t nlink = 1;
	if (S_ISDIR(ts.mode)) {
		uint32_t sub = count_subdirs(fs->rw->ed, n);
		nlink = sub == UINT32_MAX ? 1 : 2 + sub;
	}
	if (n != TD_ROOT && ts.parent == TD_NOENTRY)
		nlink = 0; /* unlinked, still open */
	td_fs_stat_fill(fs, (fuse_ino_t)n + 1, &ts, nlink, st);
	return 0;
}

int td_fs_rw_entry(td_fs *fs, td_node n, struct fuse_entry_param *ep)
{
	memset(ep, 0, sizeof *ep);
	int rc = td_fs_rw_getattr(fs, n, &ep->attr);
	if (rc)
		return rc;
	td_fs_entry_fill(fs, (fuse_ino_t)n + 1, ep);
	return 0;
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	/* Symlink targets never change for an inode (a new link is a new
	 * node), so the kernel may keep them. */
	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	/* Write-through: every write() reaches the journal before it returns.
	 * O_TRUNC arrives with open (handled there). */
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
	if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
		conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
	/* -o max_read=: libfuse ends the session unless INIT says it too. */
	if (((td_fs *)userdata)->max_read)
		conn->max_read = ((td_fs *)userdata)->max_read;
	td_fs_set_background(userdata, conn);
}

void td_fs_rw_ops(struct fuse_lowlevel_ops *ops)
{
	ops->init = op_init;
	td_fs_rw_ops_ns(ops);
	td_fs_rw_ops_io(ops);
	td_fs_rw_ops_xattr(ops);
}
