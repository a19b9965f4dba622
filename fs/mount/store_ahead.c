/* store_ahead: reading ahead into the kernel's page cache on read-only mounts (store_ahead.h). */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_ahead.h"
#include "batcher.h"
#include "inode.h"
#include "log.h"

#define AHEAD_PAGE 4096u            /* a one-page read is a random reader's, not readahead */
#define AHEAD_WINDOW (128u << 10)   /* the kernel's, when read_ahead = 0 leaves it */
#define AHEAD_FILE (1u << 20)       /* files read whole at their first read: a larger
                                       one is left to the kernel's readahead, so that
                                       `head` of a big file extracts no more than it */
#define AHEAD_SKIP 4096u            /* entries: a reader further on is another reader's */
#define AHEAD_NEAR 256u             /* entries: a read this near the run continues it */

void td_fs_ahead_setup(td_fs *fs, unsigned fuse_threads)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned m = fuse_threads / 2;
	if (cores > 1 && m > (unsigned)cores / 2)
		m = (unsigned)cores / 2;
	fs->ahead_max = fuse_threads >= 2 ? (int)(m ? m : 1) : 0;
}

static int ahead_on(const td_fs *fs)
{
	return fs->conf.store_ahead && fs->no_open && !fs->writable && !fs->rw && fs->se && fs->ahead_max > 0;
}

static uint64_t ahead_window(const td_fs *fs)
{
	return fs->conf.read_ahead ? fs->conf.read_ahead : AHEAD_WINDOW;
}

size_t td_fs_ahead_want(const td_fs *fs, const td_fs_req *r, int *whole)
{
	*whole = 0;
	td_stat st;
	if (!ahead_on(fs) || !r->in_fuse || r->direct || r->off != 0 || td_archive_stat(fs->a, r->e, &st) != TD_OK ||
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
	if (rc == 0)
		td_fs_batch_stored(fs, len);
	else if (rc != -ENOENT)
		td_fs_log(TD_CONF_LOG_DEBUG, "read-ahead store of entry %u: %s", (unsigned)e, strerror(-rc));
	return rc;
}

/* Take a storer's place (at most fs->ahead_max threads store at once, so
 * that other FUSE threads stay free to answer the READs a store may wait
 * for); 0 when all are taken. */
static int storer_enter(td_fs *fs)
{
	if (atomic_fetch_add_explicit(&fs->ahead_storers, 1, memory_order_acquire) < fs->ahead_max)
		return 1;
	atomic_fetch_sub_explicit(&fs->ahead_storers, 1, memory_order_release);
	return 0;
}

static void storer_leave(td_fs *fs)
{
	atomic_fetch_sub_explicit(&fs->ahead_storers, 1, memory_order_release);
}

void td_fs_ahead_tail(td_fs *fs, const td_fs_req *r, const void *tail, size_t len)
{
	if (len == 0 || !storer_enter(fs))
		return;
	store(fs, r->e, r->off + r->size, tail, len);
	storer_leave(fs);
}

/* The run: the directory being stored ahead (high 32 bits) and the next
 * entry to claim in it (low 32 bits), in fs->ahead_run. */
#define RUN(dir, next) (((uint64_t)(dir) << 32) | (uint32_t)(next))
#define RUN_DIR(r) ((uint32_t)((r) >> 32))
#define RUN_NEXT(r) ((uint32_t)(r))

int td_fs_ahead_begin(td_fs *fs, td_entry e)
{
	/* ahead_last: 1 + the last entry a reader read whole. Two in a row
	 * start a run; a reader that meets the run's end (or gets ahead of
	 * its storers) continues it. */
	uint32_t prev = atomic_exchange_explicit(&fs->ahead_last, (uint32_t)e + 1, memory_order_relaxed);
	int streak = prev == (uint32_t)e;
	td_stat st;
	uint64_t run = atomic_load_explicit(&fs->ahead_run, memory_order_relaxed);
	if (td_archive_stat(fs->a, e, &st) != TD_OK || RUN_DIR(run) != st.parent + 1)
		return streak;
	uint32_t next = RUN_NEXT(run);
	if (next > e + (uint32_t)fs->ahead_max + 1) {
		/* The run stored e long ago (a storer holds one file at a
		 * time), so e's pages are gone: a second pass, or memory
		 * pressure. Two misses in a row start the run again here. */
		if (streak)
			atomic_compare_exchange_strong_explicit(&fs->ahead_run, &run, RUN(st.parent + 1, e + 1),
								memory_order_relaxed, memory_order_relaxed);
		return streak;
	}
	return streak || (e >= next ? e - next : next - e) <= AHEAD_NEAR;
}

/* Claim the next entry of directory dir (stored as dir + 1 in the run) at
 * or after `from` (a reader's position): the run moves there when it was
 * elsewhere or behind. UINT32_MAX when the entries run out. */
static uint32_t claim(td_fs *fs, uint32_t dir1, uint32_t from)
{
	uint64_t cur = atomic_load_explicit(&fs->ahead_run, memory_order_relaxed);
	for (;;) {
		uint32_t n = RUN_DIR(cur) == dir1 && RUN_NEXT(cur) > from ? RUN_NEXT(cur) : from;
		if (n >= fs->nentries)
			return UINT32_MAX;
		if (atomic_compare_exchange_weak_explicit(&fs->ahead_run, &cur, RUN(dir1, n + 1), memory_order_relaxed,
							  memory_order_relaxed))
			return n;
	}
}

void td_fs_ahead_next(td_fs *fs, td_entry e, int before_reply)
{
	td_stat st;
	if (td_archive_stat(fs->a, e, &st) != TD_OK || !storer_enter(fs))
		return;
	const td_entry parent = st.parent;
	const uint32_t dir1 = (uint32_t)parent + 1; /* 0: no run yet */
	uint64_t budget = ahead_window(fs) / (before_reply ? 2 : 1);
	uint32_t from = (uint32_t)e + 1;
	for (;;) {
		/* Not behind a reader that got past the run (its READs went
		 * to other threads meanwhile). */
		uint32_t at = atomic_load_explicit(&fs->ahead_last, memory_order_relaxed);
		if (at > from && at - from < AHEAD_SKIP)
			from = at;
		uint32_t n = claim(fs, dir1, from);
		if (n == UINT32_MAX || td_archive_stat(fs->a, n, &st) != TD_OK || st.parent != parent)
			break;
		from = n + 1;
		if (!S_ISREG(st.mode) || st.size == 0)
			continue;
		if (st.size > budget)
			break; /* left to its reader, whose READ continues the run */
		void *buf = fs_scratch_slot(1, (size_t)st.size); /* slot 0 may hold the reply */
		size_t got = 0;
		if (!buf || td_fs_file_read(fs, NULL, n, 0, buf, (size_t)st.size, &got) != TD_OK ||
		    got != st.size || store(fs, n, 0, buf, got) != 0)
			break;
		budget -= st.size;
	}
	storer_leave(fs);
}
