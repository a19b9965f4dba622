/* tadocfs_ahead: reading ahead into the kernel's page cache on read-only mounts (fs_ahead.h). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs_ahead.h"
#include "fs_inode.h"
#include "fs_log.h"

#define AHEAD_PAGE 4096u            /* a one-page read is a random reader's, not readahead */
#define AHEAD_WINDOW (128u << 10)   /* the kernel's, when read_ahead = 0 leaves it */
#define AHEAD_FILE (1u << 20)       /* files read whole at their first read: a larger
                                       one is left to the kernel's readahead, so that
                                       `head` of a big file extracts no more than it */
#define AHEAD_SKIP 4096u            /* entries: a reader further on is another reader's */

static int ahead_on(const td_fs *fs)
{
	return fs->conf.store_ahead && fs->no_open && !fs->writable && !fs->rw && fs->se &&
	       fs->fuse_threads >= 2;
}

static uint64_t ahead_window(const td_fs *fs)
{
	return fs->conf.read_ahead ? fs->conf.read_ahead : AHEAD_WINDOW;
}

size_t td_fs_ahead_want(const td_fs *fs, const td_fs_req *r, int *whole)
{
	*whole = 0;
	td_stat st;
	if (!ahead_on(fs) || !r->in_fuse || r->off != 0 || td_archive_stat(fs->a, r->e, &st) != TD_OK ||
	    !S_ISREG(st.mode))
		return 0;
	if (st.size <= r->size) {
		*whole = 1;
		return 0;
	}
	/* The kernel marks a stored page up to date only when the store
	 * starts at the page's start: a tail after a request of whole pages. */
	if (r->size <= AHEAD_PAGE || r->size % AHEAD_PAGE || st.size > AHEAD_FILE || st.size > ahead_window(fs))
		return 0;
	*whole = 1;
	return (size_t)(st.size - r->size);
}

/* One store of len bytes at off of entry e; 0 or -errno (the kernel's). */
static int store(td_fs *fs, td_entry e, uint64_t off, const void *buf, size_t len)
{
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(len);
	bv.buf[0].mem = (void *)buf;
	int rc = fuse_lowlevel_notify_store(fs->se, td_fs_ino(e), (off_t)off, &bv, 0);
	if (rc && rc != -ENOENT)
		td_fs_log(TD_CONF_LOG_DEBUG, "read-ahead store of entry %u: %s", (unsigned)e, strerror(-rc));
	return rc;
}

void td_fs_ahead_tail(td_fs *fs, const td_fs_req *r, const void *tail, size_t len)
{
	if (len == 0 || pthread_mutex_trylock(&fs->ahead_mu) != 0)
		return;
	store(fs, r->e, r->off + r->size, tail, len);
	pthread_mutex_unlock(&fs->ahead_mu);
}

int td_fs_ahead_begin(td_fs *fs, td_entry e)
{
	/* ahead_last holds 1 + the last entry read whole or stored. */
	uint32_t prev = atomic_exchange_explicit(&fs->ahead_last, (uint32_t)e + 1, memory_order_relaxed);
	return prev == (uint32_t)e;
}

/* ahead_buf holding at least len bytes (the caller holds ahead_mu). */
static void *ahead_buf(td_fs *fs, size_t len)
{
	if (fs->ahead_cap < len) {
		void *p = realloc(fs->ahead_buf, len);
		if (!p)
			return NULL;
		fs->ahead_buf = p;
		fs->ahead_cap = len;
	}
	return fs->ahead_buf;
}

void td_fs_ahead_next(td_fs *fs, td_entry e, int before_reply)
{
	td_stat st;
	if (pthread_mutex_trylock(&fs->ahead_mu) != 0)
		return;
	if (td_archive_stat(fs->a, e, &st) != TD_OK) {
		pthread_mutex_unlock(&fs->ahead_mu);
		return;
	}
	const td_entry parent = st.parent;
	uint64_t budget = ahead_window(fs) / (before_reply ? 2 : 1);
	td_entry last = e;
	for (td_entry n = e + 1; n < fs->nentries; n++) {
		/* Past what is stored already, and past a reader that got
		 * ahead of the run (its READs went to other threads). */
		uint32_t at = atomic_load_explicit(&fs->ahead_last, memory_order_relaxed);
		if (at > n && at - e < AHEAD_SKIP)
			n = at;
		if (n >= fs->nentries || td_archive_stat(fs->a, n, &st) != TD_OK || st.parent != parent)
			break;
		if (!S_ISREG(st.mode) || st.size == 0)
			continue;
		if (st.size > budget)
			break;
		void *buf = ahead_buf(fs, (size_t)st.size);
		size_t got = 0;
		if (!buf || td_fs_file_read(fs, NULL, n, 0, buf, (size_t)st.size, &got) != TD_OK ||
		    got != st.size || store(fs, n, 0, buf, got) != 0)
			break;
		budget -= st.size;
		last = n;
	}
	/* Readers move ahead_last where they are; a run only raises it. */
	uint32_t cur = atomic_load_explicit(&fs->ahead_last, memory_order_relaxed);
	while (cur < (uint32_t)last + 1 &&
	       !atomic_compare_exchange_weak_explicit(&fs->ahead_last, &cur, (uint32_t)last + 1, memory_order_relaxed,
						      memory_order_relaxed))
		;
	pthread_mutex_unlock(&fs->ahead_mu);
}
