/* req: work a FUSE handler hands off, run inline now or queued and answered later. */
#ifndef TD_FS_REQ_H
#define TD_FS_REQ_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "ctx.h"
#include "fuse_api.h"
#include "td_extract.h"

/* An open regular file (kept in fi->fh) of either kind of mount: its entry
 * (a td_node of the edit overlay on an edit mount) and a cursor so that a
 * sequential reader continues where its last read ended (decision 4). */
typedef struct td_fs_file {
	td_entry e;
	int append;               /* edit mounts: opened with O_APPEND (2: write-only, direct I/O) */
	pthread_mutex_t mu;       /* guards cur; when busy, a read goes without it */
	td_cursor *cur;
	_Atomic uint64_t seq_next; /* batcher: where the last read handed in ends */
	struct td_fs_file *prev, *next; /* fs->files list, under fs->files_mu */
} td_fs_file;

/* New open-file state for entry (or edit node) e, listed in fs->files;
 * NULL on out of memory. Thread-safe. */
td_fs_file *td_fs_file_new(td_fs *fs, td_entry e, int append);

/* Unlist and free f. The kernel sends release only after every read of the
 * handle was answered, so no queued request still points at f. NULL
 * accepted. */
void td_fs_file_free(td_fs *fs, td_fs_file *f);

/* Free every file still open (the session ended without their release). */
void td_fs_files_free_all(td_fs *fs);

enum td_fs_req_kind {
	TD_FS_READ = 1,
	TD_FS_GETXATTR = 2,
};

/* One request handed off by a handler. */
struct td_fs_req {
	int kind;                 /* td_fs_req_kind */
	fuse_req_t req;
	td_fs *fs;
	td_entry e;
	size_t size;              /* READ: bytes asked; GETXATTR: caller's buffer (0: probe) */
	uint64_t off;             /* READ: file offset */
	td_fs_file *file;         /* READ: the open file */
	const char *name;         /* GETXATTR: attribute name */
	int who;                  /* GETXATTR: the caller's class (xattr_perm.h) */
	int heap;                 /* 1 when r (and name, in the same block) is malloc'd */
	int in_fuse;              /* 1 while run by the FUSE thread that received it */
	int direct;               /* READ: the reader bypasses the page cache (O_DIRECT) */
	volatile int intr;        /* GETXATTR: set when the kernel interrupts req (td_fs_cancel_begin) */
	/* the batcher's, while r is queued (batcher.c) */
	struct td_fs_req *qnext;  /* next older request in the hand-in stack */
	uint64_t qt0;             /* ns, when the handler gave r to the batcher */
	int qcls;                 /* how the batcher classified r */
};

/* Around a query's engine work on this thread: watch the mount's stop flag
 * and, when req is not NULL, `flag`, which libfuse sets when the kernel
 * interrupts req (the caller's signal); the engine's long calls then end
 * with TD_ECANCELED (EINTR). `flag` must stay valid until
 * td_fs_cancel_end(req), which must come before the reply. */
void td_fs_cancel_begin(td_fs *fs, fuse_req_t req, volatile int *flag);
void td_fs_cancel_end(fuse_req_t req);

/* Hand r to fs->exec, or run it inline when no executor takes it. r may be
 * on the caller's stack: it is copied (with its name) before being queued. */
void td_fs_dispatch(td_fs *fs, const td_fs_req *r);

/* Do the engine work of r and answer the kernel; frees r if heap.
 * Callable from any thread. */
void td_fs_req_run(td_fs_req *r);

/* Answer a READ whose bytes a batcher extracted itself: `err` is a td_err
 * (TD_OK: reply buf[0..got)). Frees r if heap. */
void td_fs_reply_read(td_fs_req *r, const void *buf, size_t got, int err);

/* Answer r with an errno value (positive, e.g. EIO). Frees r if heap. */
void td_fs_reply_err(td_fs_req *r, int errnum);

/* Answer a GETXATTR with its complete value: honours the probe (size 0) and
 * ERANGE rules of getxattr(2). Frees r if heap. */
void td_fs_reply_xattr(td_fs_req *r, const void *val, size_t len);

/* This thread's scratch buffer of at least len bytes for a read reply
 * (kept per thread, freed when the thread exits); NULL on out of memory. */
void *fs_scratch_get(size_t len);

/* The same from one of TD_FS_SCRATCH_SLOTS independent buffers per thread
 * (slot 0 is fs_scratch_get's; store_ahead.h stores ahead from slot 1 while
 * slot 0 still holds a reply). */
#define TD_FS_SCRATCH_SLOTS 2u
void *fs_scratch_slot(unsigned slot, size_t len);

/* Read up to len bytes of entry e at off into buf through open file f's
 * cursor (or without it when another thread holds it); with f NULL (a
 * file the kernel opened without asking, see op_init) through this
 * thread's cursor. Returns a td_err; *got as td_extract. */
int td_fs_file_read(td_fs *fs, td_fs_file *f, td_entry e, uint64_t off, void *buf, size_t len, size_t *got);

#endif
