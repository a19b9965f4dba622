/* ctx: the state of one tadocfs mount, shared by every FUSE handler. */
#ifndef TD_FS_CTX_H
#define TD_FS_CTX_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "td_archive.h"
#include "td_conf.h"

typedef struct td_fs_req td_fs_req;
typedef struct td_fs_xcache td_fs_xcache;
typedef struct td_fs_file td_fs_file;

/* Where handlers send work they may answer later (decision 7). With
 * submit == NULL every request runs inline in the FUSE thread that received
 * it. A batcher installs submit: it takes ownership of the heap request `r`
 * and must eventually answer it exactly once, from any thread, with
 * td_fs_req_run() or one of the td_fs_reply_*() calls of req.h. submit
 * returns 0 when it took the request, or a negative errno to have the caller
 * run it inline instead (queue full, shutting down). */
typedef struct td_fs_exec {
	int (*submit)(void *ctx, td_fs_req *r);
	void *ctx;
} td_fs_exec;

/* Per-entry totals over a subtree, computed once on first use. */
typedef struct td_fs_tree {
	pthread_mutex_t mu;
	atomic_int done;          /* 1 once the pass ran (err says how) */
	int err;                  /* 0, or -errno if the pass failed */
	uint64_t *words;          /* word tokens in the subtree of entry i */
	uint32_t *subdirs;        /* subdirectories directly under entry i */
	/* entries of the subtree of i (i included) that class c + 1
	 * (xattr_perm.h: owner, group, others) may not read or list */
	uint32_t *denied[3];
} td_fs_tree;

struct fuse_session;

/* Background requests (reads) the kernel may have in flight at once unless
 * -o max_background= says otherwise (the kernel's own default is 12). */
#define TD_FS_MAX_BACKGROUND 256u

typedef struct td_fs {
	td_archive *a;
	struct fuse_session *se;  /* for notify_inval_* (set once mounted) */
	uint32_t nentries;
	char *archive_path;       /* absolute path, for messages and statfs */
	uint64_t archive_bytes;
	uid_t uid;                /* owner shown for every entry */
	gid_t gid;
	double entry_timeout;     /* seconds the kernel may cache names/attrs */
	double attr_timeout;
	int writable;             /* 0: read-only mount, writes get EROFS */
	int no_open;              /* read-only: the kernel may skip open/release (op_init) */
	unsigned max_read;        /* -o max_read= for op_init (0: libfuse's default) */
	unsigned max_background;  /* background requests in flight, for op_init */
	int debug;
	td_conf conf;             /* effective configuration (defaults, file, -o) */
	td_fs_exec exec;
	struct td_fs_batch *batch; /* batcher and its stats (batcher.h); NULL when off */
	td_fs_tree tree;
	td_fs_xcache *xcache;     /* search results kept for continuation parts */
	pthread_mutex_t files_mu;
	td_fs_file *files;        /* open files, freed at unmount if never released */
	struct td_fs_rw *rw;      /* edit overlay (overlay.h); NULL: plain archive */
	char *mountpoint;         /* absolute, for td_fs_tune_readahead; NULL: unknown */
	atomic_int ra_tuned;
	int bg_verify;            /* check every checksum after the mount (not -o noverify) */
	atomic_uint_fast64_t last_op_ms; /* CLOCK_MONOTONIC_COARSE ms of the latest request (td_fs_busy) */
	pthread_t warm_thread;    /* td_fs_warm_start, when warm_started */
	int warm_started;
	volatile int warm_stop;   /* set (atomically) by td_fs_warm_stop */
	volatile int stopping;    /* set by the exit signals' handler: long queries end (td_cancel.h) */
	int ahead_max;            /* threads that may store ahead at once (store_ahead.h) */
	atomic_int ahead_storers; /* threads storing ahead now */
	_Atomic uint32_t ahead_last; /* 1 + the last entry a reader read whole */
	_Atomic uint64_t ahead_run;  /* directory + 1 of the run << 32 | next entry */
} td_fs;

/* Fill fs for archive `a` (taken over: td_fs_fini closes it even when this
 * fails) with configuration `conf` (copied; NULL: the defaults).
 * 0 or -errno. */
int td_fs_init(td_fs *fs, td_archive *a, const char *archive_path, const td_conf *conf);

/* Release everything td_fs_init set up, including the archive. */
void td_fs_fini(td_fs *fs);

/* Milliseconds on CLOCK_MONOTONIC_COARSE (a few ms of resolution, no
 * system call). */
static inline uint64_t td_fs_coarse_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
	return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

/* Note that a request came (the background thread starts its work in a
 * quiet moment: kernel_tune.h). Called at the start of the read-only
 * handlers; thread-safe. */
static inline void td_fs_busy(td_fs *fs)
{
	atomic_store_explicit(&fs->last_op_ms, td_fs_coarse_ms(), memory_order_relaxed);
}

/* The subtree totals (lazily computed, thread-safe). 0 or -errno. */
int td_fs_tree_get(td_fs *fs, const td_fs_tree **out);

#endif
