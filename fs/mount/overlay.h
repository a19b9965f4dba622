/* overlay: the edit overlay of a mount: writable mounts, and read-only mounts of an edited archive. */
#ifndef TD_FS_RW_H
#define TD_FS_RW_H

#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>

#include "ctx.h"
#include "fuse_api.h"
#include "td_edit.h"
#include "td_journal.h"

/*
 * A `-o rw` mount serves every request through a td_edit overlay
 * of the archive whose changes go to the journal ARCHIVE.journal beside the
 * archive (td_journal.h) before they are applied and answered:
 *   - locking: the archive is flock'ed exclusively for a writable mount and
 *     shared for a read-only one (td_lock.h), so two writable mounts, or a
 *     writable mount and `tadoc compact`, never meet;
 *   - durability: every change is one journal record appended before the
 *     reply; fsync/fdatasync/fsyncdir sync the journal (journal_sync=fsync,
 *     the default), every append is synced first with journal_sync=always
 *     (-o sync=always), never with journal_sync=none;
 *   - a read-only mount of an archive whose journal holds records replays it
 *     read-only and shows the edited tree through the same handlers
 *     (mutations answer EROFS);
 *   - concurrency: one reader/writer lock; reads, lookups and xattr queries
 *     share it, each change holds it exclusively;
 *   - inode numbers are node + 1 (td_edit.h node ids: stable until
 *     compaction, never reused while mounted);
 *   - compaction never runs under a live mount (node ids would change under
 *     the kernel's inodes): `tadoc compact ARCHIVE` offline, or automatically
 *     at unmount when compact_threshold was configured explicitly and the
 *     append buffer outgrew it.
 */

/* Values of read names kept between a getfattr's size probe and its read
 * (overlay_xattr.c); a slot is good while the journal's sequence number
 * is the one it was computed at. */
#define TD_FS_RW_VALS 4
typedef struct td_fs_rwval {
	uint64_t gen;             /* 1 + journal sequence number; 0: empty */
	uint64_t used;
	td_node n;
	int who;                  /* caller class (xattr_perm.h) */
	char *name, *val;
	size_t len;
} td_fs_rwval;

typedef struct td_fs_rw {
	td_edit *ed;
	td_journal *j;            /* NULL on a read-only mount */
	int lock_fd;
	int writable;             /* 0: replayed edits served read-only */
	int sync;                 /* td_conf_sync */
	int broken;               /* a change failed half-applied: refuse more */
	pthread_rwlock_t lock;    /* readers share, changes exclude */
	/* 1 + the journal sequence number at which the whole tree was found
	 * to hide nothing from class c + 1 (xattr_perm.h); 0: not known */
	_Atomic uint64_t open_at[3];
	td_journal_report rep;    /* what the replay found */
	/* Invalidations of the kernel's pages, made by a thread of their own
	 * (td_fs_rw_inval): the kernel waits for the page locks of reads and
	 * writes in flight, which only a FUSE worker can release by answering
	 * them, so a worker must never wait for it (one worker: a hang). */
	pthread_mutex_t imu;      /* guards the fields below */
	pthread_cond_t icv;
	struct td_fs_inval *ihead, *itail;
	int istarted, istop;
	pthread_t ithread;
	pthread_mutex_t vmu;      /* guards vals, vclock */
	td_fs_rwval vals[TD_FS_RW_VALS];
	uint64_t vclock;
} td_fs_rw;

/* Lock the archive (exclusive when `writable`, else shared) and, for a
 * writable mount or an archive that has a journal, open and replay the
 * journal. On success fs->rw is set when the mount must use the edit
 * handlers (always for writable mounts; for read-only ones only when the
 * journal holds changes) and *lock_fd holds the lock in every case (release
 * it with td_fs_rw_close). Prints the replay report (damage found and
 * dropped) to stderr. Returns 0 or prints one "tadocfs: ..." line and
 * returns a td_fs_exit status. */
int td_fs_rw_open(td_fs *fs, int writable, int *lock_fd);

/* At unmount (no requests in flight): sync the journal, compact when the
 * configured threshold is exceeded, close the journal and free fs->rw;
 * then release lock_fd. Logs problems (log.h); returns 0, or -1 when the
 * journal could not be synced. A failed compaction is logged only: the
 * journal still holds every change. */
int td_fs_rw_close(td_fs *fs, int lock_fd);

/* Replace the entries of ops (filled by td_fs_ops_fill) with the
 * edit-overlay handlers. */
void td_fs_rw_ops(struct fuse_lowlevel_ops *ops);

/* --- shared by the tadocfs_w*.c handlers --- */

/* Node of inode ino, or TD_NOENTRY. */
static inline td_node td_fs_rw_node(fuse_ino_t ino)
{
	if (ino < 1 || ino > (fuse_ino_t)UINT32_MAX)
		return TD_NOENTRY;
	return (td_node)(ino - 1);
}

/* Attributes of node n for the kernel (caller holds the read lock).
 * 0 or -errno. */
int td_fs_rw_getattr(td_fs *fs, td_node n, struct stat *st);

/* Entry parameters for a positive lookup (caller holds the read lock). */
int td_fs_rw_entry(td_fs *fs, td_node n, struct fuse_entry_param *ep);

/* Take the read lock (lookups, reads, queries) / release either lock. */
static inline void td_fs_rw_rdlock(td_fs *fs)
{
	pthread_rwlock_rdlock(&fs->rw->lock);
}
static inline void td_fs_rw_unlock(td_fs *fs)
{
	pthread_rwlock_unlock(&fs->rw->lock);
}

/* Take the write lock for a change; returns 0 when changes are allowed,
 * else -EROFS (read-only mount) or -EIO (an earlier change failed half
 * applied). The lock is held in every case: release with td_fs_rw_unlock. */
int td_fs_rw_begin(td_fs *fs);

/* Map the td_err of a change call (td_edit_write, ...; it logged to the
 * journal before applying) to 0 or -errno; TD_ENOMEM marks the state broken
 * so later changes are refused until a remount replays the journal. */
int td_fs_rw_status(td_fs *fs, int err);

/* Drop the kernel's cached pages and attributes of node n (after a change
 * the kernel did not make itself: insert, delete), then, when req is not
 * NULL, answer req with success. Done by the overlay's invalidation thread:
 * the kernel's invalidation waits for the pages of reads and writes in
 * flight, which need a FUSE worker to be answered, so the handler returns
 * at once (with -s or max_threads=1 it would wait for itself). The caller
 * learns of the change only once the pages are gone, so its next read
 * sees it. Call without the lock. */
void td_fs_rw_inval(td_fs *fs, td_node n, fuse_req_t req);

/* At the end of the session loop, before fuse_session_unmount: answer what
 * the invalidation thread still holds and stop it. NULL fs->rw accepted. */
void td_fs_rw_inval_stop(td_fs *fs);

/* Free the kept values (overlay_xattr.c); at teardown. */
void td_fs_rw_vals_free(td_fs_rw *rw);

/* Handler groups (each file fills its own). */
void td_fs_rw_ops_ns(struct fuse_lowlevel_ops *ops);    /* overlay_names.c */
void td_fs_rw_ops_io(struct fuse_lowlevel_ops *ops);    /* overlay_io.c */
void td_fs_rw_ops_xattr(struct fuse_lowlevel_ops *ops); /* overlay_xattr.c */

#endif
