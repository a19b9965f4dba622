/* batcher: the request queue, the batcher thread, CPU workers and GPU batches. */
#include <assert.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "batcher.h"
#include "kernel_tune.h"
#include "log.h"
#include "req.h"
#include "stats.h"
#include "xattr.h"
#include "td_err.h"
#include "td_gpu.h"
#include "td_query.h"

/* Requests the queue holds; past that, handlers answer inline. */
#define QUEUE_CAP 65536u
/* Sequential-read detection (td_fs_file.seq_next): file offsets stay below
 * 2^63, the top bit marks a streak; reads of SEQ_MIN bytes or more
 * qualify on their first continuation. */
#define SEQ_STREAK (UINT64_C(1) << 63)
#define SEQ_MIN 16384u
/* Largest crossover a queue can be expected to reach (one request per
 * concurrent reader); kinds with a higher one are never queued. */
#define QUEUE_REACH 4096u
/* With a GPU, requests go to it only while at least DEPTH_* per worker are
 * in flight (the hybrid split in batch_submit says why). */
#define DEPTH_COUNT 2u
#define DEPTH_READ 8u
/* Largest byte range read once for several overlapping reads. */
#define MERGE_MAX (4u << 20)
/* Result arenas of GPU batches kept for reuse, and their least size. */
#define ARENA_POOL 8u
#define ARENA_MIN (1u << 20)

enum item_class {
	CLS_OTHER = 0, /* answered by td_fs_req_run on a CPU worker */
	CLS_READ = 1,  /* a read: merged, CPU worker or GPU */
	CLS_COUNT = 2, /* user.tadoc.count.WORD of a file or directory: CPU or GPU */
	CLS_LIST = 3,  /* user.tadoc.{top,vector,ngrams,fuzzy,files}.* likewise (counted with the counts) */
};

enum gpu_state {
	GPU_OFF = 0,      /* gpu = off, or not usable: CPU only */
	GPU_OPENING = 1,  /* being opened in the background */
	GPU_READY = 2,    /* resident: batches may go there */
};

typedef struct bitem {
	td_fs_req *r;
	uint64_t t0;              /* ns, when the handler gave it to us */
	int cls;
} bitem;

struct gres;

typedef struct bjob {
	struct bjob *next;
	struct gres *g;           /* non-NULL: answer runs [r0, r1) and counts [c0, c1) of g */
	size_t r0, r1, c0, c1;
	size_t n;
	bitem it[];
} bjob;

/* The results of one GPU batch while CPU workers send the replies: owned
 * by the reply jobs together, freed by the last one. */
typedef struct gres {
	atomic_uint refs;
	bjob *job;                /* the batch: items, reads first (sorted), then counts */
	size_t nr, nruns, nc;
	td_extract_req *xr;
	size_t *runstart;         /* index in job->it of each run's first read */
	size_t *runlen;
	td_count_req *cr;
	char *arena;              /* the extracted bytes, back to back: a
	                             td_gpu_host_alloc block from the pool, so the
	                             GPU downloads straight into it */
	size_t arena_cap;
} gres;

typedef struct arena {
	char *p;
	size_t cap;
} arena;

/* A growable byte buffer owned by one thread. */
typedef struct tbuf {
	char *p;
	size_t cap;
} tbuf;

struct td_fs_batch {
	td_fs *fs;
	td_fs_stats st;
	unsigned nworkers, batch_max, window_us;
	unsigned gpu_min_read, gpu_min_count; /* CPU/GPU crossovers, in requests */
	uint64_t gpu_min_read_size;            /* smaller reads stay on the CPU */
	int inline_only;          /* batch_max == 1 or an edit overlay: no threads */
	unsigned raise;           /* nice steps the batcher and workers take above
	                             the FUSE threads (batch_priority; 0 with
	                             gpu = off) */
	atomic_int raise_denied;  /* the system refused it (logged once) */
	int cpu_queue;            /* TADOCFS_BATCH_CPU=1: queue for CPU workers too */

	/* Hand-in: handlers push requests onto a lock-free stack (no lock, no
	 * wake-up unless the batcher sleeps waiting for that many); the
	 * batcher takes the whole stack at once into its ring. */
	_Atomic(td_fs_req *) inbox;
	atomic_long inbox_n;      /* requests pushed and not yet taken (may dip below 0 briefly) */
	atomic_long wake_at;      /* the batcher sleeps until inbox_n >= wake_at (LONG_MAX: not for arrivals) */
	atomic_int sleeping;      /* the batcher waits on cv_batcher (or is about to) */
	atomic_size_t pending;    /* queued and not yet dispatched: inbox + ring (<= QUEUE_CAP) */
	atomic_uint cpu_busy;     /* requests FUSE threads are answering inline right now */
	unsigned cpu_slots;       /* with a GPU: queue once this many are answered inline */
	unsigned depth_count;     /* ... and at least this many requests are in */
	unsigned depth_read;      /* flight (counts, reads): see batch_submit */
	char wait_path[96];       /* fusectl "waiting" of the mount, or "" */
	atomic_uint_fast64_t wait_t; /* when wait_n was read (now_ns) */
	atomic_long wait_n;       /* its last value */
	atomic_int stopping;

	pthread_mutex_t mu;
	pthread_cond_t cv_batcher, cv_workers;
	/* the ring of QUEUE_CAP items the batcher took; its thread's alone */
	bitem *q;
	size_t qhead, qlen, q_reads, q_counts;
	int wait_worker;
	uint64_t last_arrival, ia_ewma; /* ns between queued arrivals (moving average) */
	/* CPU jobs */
	bjob *jobs, *jobs_tail;
	size_t njobs;
	unsigned busy;
	/* GPU */
	atomic_int gpu_state;
	int gpu_emulated;         /* TADOCFS_GPU_EMULATE=1: the CPU engine stands in */
	td_gpu *gpu;
	char gpu_name[160];
	int wstop;
	atomic_uint active;       /* requests handed in and not yet answered */
	/* free result arenas (pinned when the GPU is resident), under amu */
	pthread_mutex_t amu;
	arena pool[ARENA_POOL];
	unsigned npool;

	pthread_t batcher, gthread;
	pthread_t *workers;
	unsigned nstarted;
	int has_batcher, has_gthread;
};

static void gres_reply(td_fs_batch *b, gres *g, size_t r0, size_t r1, size_t c0, size_t c1);
static bjob *job_new(size_t n);
static void run_gpu_rw(td_fs_batch *b, bjob *j, tbuf *buf, size_t n, size_t nr);

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *tbuf_get(tbuf *b, size_t len)
{
	if (b->cap >= len && b->p)
		return b->p;
	size_t cap = len < 65536 ? 65536 : len;
	char *p = malloc(cap);
	if (!p)
		return NULL;
	free(b->p);
	b->p = p;
	b->cap = cap;
	return p;
}

/* A request was answered: latency and counters (the in-flight count was
 * lowered by td_fs_batch_replying, before the reply). */
static void done(td_fs_batch *b, uint64_t t0)
{
	td_fs_stats_latency(&b->st, now_ns() - t0);
	atomic_fetch_add_explicit(&b->st.requests, 1, memory_order_relaxed);
}

/* --- classification --- */

static int classify(const td_fs_batch *b, const td_fs_req *r)
{
	if (r->kind == TD_FS_READ)
		return CLS_READ;
	if (r->kind != TD_FS_GETXATTR || !r->name)
		return CLS_OTHER;
	td_fs_xname x;
	td_fs_xattr_parse(r->name, &x);
	int list = x.kind == TD_FS_XTOP || x.kind == TD_FS_XVECTOR || x.kind == TD_FS_XFUZZY || x.kind == TD_FS_XFILES ||
		   x.kind == TD_FS_XNGRAMS;
	if ((x.kind != TD_FS_XCOUNT || x.nwords != 1) && !list)
		return CLS_OTHER; /* the xattr module answers, phrase counts included */
	if (x.err)
		return CLS_OTHER; /* and the errors */
	uint64_t atb, atw, atn;
	if (r->e == TD_ROOT && x.n && (x.kind == TD_FS_XTOP || x.kind == TD_FS_XNGRAMS) &&
	    td_archive_tables(b->fs->a, &atb, &atw, &atn) == 1 && x.n <= (x.kind == TD_FS_XTOP ? atw : atn))
		return CLS_OTHER; /* the root's top words or n-grams stored in the archive: a prefix read */
	uint64_t vtb, vtw;
	if (r->e == TD_ROOT && x.kind == TD_FS_XVECTOR && td_archive_root_vector(b->fs->a, &vtb, &vtw) == 1)
		return CLS_OTHER; /* the root's vector stored in the archive: read in blocks */
	td_stat st;
	if (td_archive_stat(b->fs->a, r->e, &st) != TD_OK || (!S_ISDIR(st.mode) && !S_ISREG(st.mode)))
		return CLS_OTHER;
	if (!list && td_query_fast(b->fs->a, r->e))
		return CLS_OTHER; /* a look-up or the query index: faster than any round trip */
	if (!td_fs_xattr_open_to(b->fs, r->e, r->who))
		return CLS_OTHER; /* the subtree hides files from this caller: the xattr module subtracts them */
	return list ? CLS_LIST : CLS_COUNT;
}

/* --- CPU side --- */

static int cmp_read(const void *pa, const void *pb)
{
	const bitem *a = pa, *b = pb;
	if (a->r->e != b->r->e)
		return a->r->e < b->r->e ? -1 : 1;
	if (a->r->off != b->r->off)
		return a->r->off < b->r->off ? -1 : 1;
	return 0;
}

/* Length of the run of reads starting at it[0] that overlap or touch each
 * other (same entry), within MERGE_MAX bytes; *end receives its end. */
static size_t read_run(const bitem *it, size_t n, uint64_t *end)
{
	const td_fs_req *f = it[0].r;
	uint64_t e = f->off + f->size;
	size_t k = 1;
	while (k < n && it[k].r->e == f->e && it[k].r->off <= e) {
		uint64_t ke = it[k].r->off + it[k].r->size;
		uint64_t ne = ke > e ? ke : e;
		if (ne - f->off > MERGE_MAX)
			break;
		e = ne;
		k++;
	}
	*end = e;
	return k;
}

/* Answer the reads it[0..k) of one run from buf = the run's bytes from
 * `start` (got of them), or all with err. */
static void reply_run(td_fs_batch *b, bitem *it, size_t k, uint64_t start, const char *buf, size_t got, int err)
{
	for (size_t i = 0; i < k; i++) {
		uint64_t t0 = it[i].t0;
		td_fs_req *r = it[i].r;
		if (err) {
			td_fs_reply_read(r, NULL, 0, err);
		} else {
			uint64_t s = r->off - start;
			size_t n = 0;
			if (s < got)
				n = got - (size_t)s < r->size ? got - (size_t)s : r->size;
			td_fs_reply_read(r, buf + (s < got ? s : 0), n, TD_OK);
		}
		done(b, t0);
	}
	if (k > 1)
		atomic_fetch_add_explicit(&b->st.merged, k - 1, memory_order_relaxed);
}

/* Move the reads of it[0..n) to the front, sorted by cmp_read; their count. */
static size_t reads_first(bitem *it, size_t n)
{
	size_t nr = 0;
	for (size_t i = 0; i < n; i++) {
		if (it[i].cls == CLS_READ) {
			bitem t = it[nr];
			it[nr++] = it[i];
			it[i] = t;
		}
	}
	if (nr > 1)
		qsort(it, nr, sizeof *it, cmp_read);
	return nr;
}

/* Serve items on this thread: reads sorted and merged, then read through
 * the first open file's cursor; everything else through td_fs_req_run. */
static void run_cpu(td_fs_batch *b, bitem *it, size_t n, tbuf *buf)
{
	size_t nr = reads_first(it, n);
	for (size_t i = 0; i < nr;) {
		uint64_t end;
		size_t k = read_run(it + i, nr - i, &end);
		td_fs_req *f = it[i].r;
		size_t len = (size_t)(end - f->off);
		void *p = tbuf_get(buf, len);
		size_t got = 0;
		int err = p ? td_fs_file_read(b->fs, f->file, f->e, f->off, p, len, &got) : TD_ENOMEM;
		reply_run(b, it + i, k, f->off, p, got, err);
		i += k;
	}
	for (size_t i = nr; i < n; i++) {
		uint64_t t0 = it[i].t0;
		td_fs_req_run(it[i].r);
		done(b, t0);
	}
}

/* Raise the calling thread (the batcher or a worker) b->raise nice steps
 * above the daemon, once, when a GPU is in use (*raised: this thread's
 * flag; each thread calls this as it takes work). With a GPU these threads hand batches to it and the
 * replies back to the kernel while every core runs FUSE threads: each of
 * their wake-ups waited for a time slice (what it measured:
 * contrib/bench/NOTES.md, "Batcher").
 * Lowering a nice value needs root or CAP_SYS_NICE; without, the threads
 * stay as they are and one line is logged. */
static void raise_thread(td_fs_batch *b, int *raised)
{
	/* only once a GPU is in use (never, when it does not open) */
	if (*raised || !b->raise || atomic_load_explicit(&b->gpu_state, memory_order_relaxed) != GPU_READY)
		return;
	*raised = 1;
	errno = 0;
	int now = getpriority(PRIO_PROCESS, 0);
	if (errno)
		now = 0;
	int want = now - (int)b->raise < -20 ? -20 : now - (int)b->raise;
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), want) != 0 &&
	    atomic_exchange(&b->raise_denied, 1) == 0)
		td_fs_log(TD_CONF_LOG_INFO, "batcher: batch_priority=%u not applied (%s): its threads keep the daemon's priority",
			  b->raise, strerror(errno));
}

static void *worker_main(void *arg)
{
	td_fs_batch *b = arg;
	tbuf buf = { 0 };
	int raised = 0;
	pthread_mutex_lock(&b->mu);
	for (;;) {
		while (!b->jobs && !b->wstop)
			pthread_cond_wait(&b->cv_workers, &b->mu);
		bjob *j = b->jobs;
		if (!j)
			break;
		raise_thread(b, &raised);
		b->jobs = j->next;
		if (!b->jobs)
			b->jobs_tail = NULL;
		b->njobs--;
		b->busy++;
		pthread_mutex_unlock(&b->mu);
		if (j->g)
			gres_reply(b, j->g, j->r0, j->r1, j->c0, j->c1);
		else
			run_cpu(b, j->it, j->n, &buf);
		free(j);
		pthread_mutex_lock(&b->mu);
		b->busy--;
		if (b->wait_worker)
			pthread_cond_signal(&b->cv_batcher);
	}
	pthread_mutex_unlock(&b->mu);
	free(buf.p);
	return NULL;
}

/* --- GPU side --- */

static void gpu_opts(const td_conf *c, unsigned nworkers, td_gpu_opts *o)
{
	td_gpu_opts_default(o);
	o->device = c->gpu_device;
	/* gpu_devices (default all) spreads a version 5 archive's shards; a
	 * gpu_device given alone keeps it on that device */
	o->devices = c->gpu_devices ? c->gpu_devices
		     : c->origin[TD_CONF_KEY_GPU_DEVICE].src != TD_CONF_SRC_DEFAULT ? 0 : TD_GPU_DEVICES_ALL;
	o->mem_cap = c->gpu_mem_cap;
	o->cpu_threads = nworkers;
	o->blocking_sync = 1; /* the batcher sleeps while a batch runs: the FUSE threads need the cores */
	/* benchmark knob (contrib/bench/batcher.sh experiments): spin, yield
	 * or sleep while a batch runs (td_gpu_opts.blocking_sync) */
	const char *w = getenv("TADOCFS_GPU_WAIT");
	if (w)
		o->blocking_sync = strcmp(w, "spin") == 0 ? 0 : strcmp(w, "yield") == 0 ? 2 : 1;
}

static void gpu_open(td_fs_batch *b)
{
	const td_conf *c = &b->fs->conf;
	td_gpu_opts o;
	gpu_opts(c, b->nworkers, &o);
	const char *emu = getenv("TADOCFS_GPU_EMULATE");
	if (emu && strcmp(emu, "1") == 0) {
		/* For tests of the GPU dispatch where no GPU is: the same batch
		 * calls of the CPU engine (identical results by contract). */
		b->gpu_emulated = 1;
		snprintf(b->gpu_name, sizeof b->gpu_name, "emulated by the CPU engine");
		td_fs_log(TD_CONF_LOG_WARN, "gpu: TADOCFS_GPU_EMULATE=1: GPU batches run on the CPU engine");
		atomic_store(&b->gpu_state, GPU_READY);
		return;
	}
	td_gpu *g = NULL;
	/* No device: say so before td_gpu_open, which checks the archive's
	 * data first (format 5: every shard), work no one would use. */
	int err = td_gpu_available() ? td_gpu_open(b->fs->a, &o, &g)
				     : td_fail(TD_ENOGPU, "no GPU: no CUDA device, or built without CUDA");
	if (err) {
		const char *d = td_errdetail();
		snprintf(b->gpu_name, sizeof b->gpu_name, "unavailable");
		td_fs_log(c->gpu == TD_CONF_GPU_ON ? TD_CONF_LOG_ERROR : TD_CONF_LOG_INFO,
			  "gpu: %s%s%s; reads are served by the CPU", td_strerror(err), d && *d ? ": " : "",
			  d && *d ? d : "");
		atomic_store(&b->gpu_state, GPU_OFF);
		return;
	}
	if (!td_gpu_resident(g)) {
		td_gpu_close(g);
		snprintf(b->gpu_name, sizeof b->gpu_name, "not resident");
		td_fs_log(c->gpu == TD_CONF_GPU_ON ? TD_CONF_LOG_ERROR : TD_CONF_LOG_INFO,
			  "gpu: the archive does not fit device %d (gpu_mem_cap); reads are served by the CPU",
			  c->gpu_device);
		atomic_store(&b->gpu_state, GPU_OFF);
		return;
	}
	b->gpu = g;
	snprintf(b->gpu_name, sizeof b->gpu_name, "%s", td_gpu_device_name(g));
	td_fs_log(TD_CONF_LOG_INFO, "gpu: %s ready (%.2f s upload); batches of %u reads or %u counts go there",
		  b->gpu_name, td_gpu_open_seconds(g), b->gpu_min_read, b->gpu_min_count);
	atomic_store(&b->gpu_state, GPU_READY);
}

static void reply_count(td_fs_batch *b, bitem *x, const td_count_req *c)
{
	if (c->err) {
		td_fs_reply_err(x->r, td_err_errno(c->err));
	} else {
		char v[24];
		int n = snprintf(v, sizeof v, "%llu", (unsigned long long)c->count);
		td_fs_reply_xattr(x->r, v, (size_t)n);
	}
	done(b, x->t0);
}

/* Answer x with a list value (rc < 0: that errno), free val. */
static void reply_list(td_fs_batch *b, bitem *x, int rc, char *val, size_t len)
{
	if (rc < 0)
		td_fs_reply_err(x->r, -rc);
	else
		td_fs_reply_xattr(x->r, val, len);
	free(val);
	done(b, x->t0);
}

/* A result arena of at least `bytes`: a pooled one if one is big enough
 * (else the largest free one is regrown), else a new one. Pinned memory is
 * slow to allocate: sizes grow in powers of two and are kept. */
static char *arena_get(td_fs_batch *b, size_t bytes, size_t *cap)
{
	arena a = { 0 };
	pthread_mutex_lock(&b->amu);
	unsigned best = b->npool;
	for (unsigned i = 0; i < b->npool; i++)
		if (best == b->npool || (b->pool[best].cap < bytes ? b->pool[i].cap > b->pool[best].cap :
				         b->pool[i].cap >= bytes && b->pool[i].cap < b->pool[best].cap))
			best = i;
	if (best < b->npool) {
		a = b->pool[best];
		b->pool[best] = b->pool[--b->npool];
	}
	pthread_mutex_unlock(&b->amu);
	if (a.p && a.cap >= bytes) {
		*cap = a.cap;
		return a.p;
	}
	td_gpu_host_free(b->gpu, a.p);
	size_t c = ARENA_MIN;
	while (c < bytes && c < SIZE_MAX / 2)
		c *= 2;
	*cap = c;
	return td_gpu_host_alloc(b->gpu, c);
}

static void arena_put(td_fs_batch *b, char *p, size_t cap)
{
	if (!p)
		return;
	pthread_mutex_lock(&b->amu);
	if (b->npool < ARENA_POOL) {
		b->pool[b->npool++] = (arena){ p, cap };
		p = NULL;
	}
	pthread_mutex_unlock(&b->amu);
	td_gpu_host_free(b->gpu, p);
}

static void gres_free(td_fs_batch *b, gres *g)
{
	free(g->xr);
	free(g->runstart);
	free(g->runlen);
	free(g->cr);
	arena_put(b, g->arena, g->arena_cap);
	free(g->job);
	free(g);
}

/* Answer runs [r0, r1) and counts [c0, c1) of g; the last caller frees g. */
static void gres_reply(td_fs_batch *b, gres *g, size_t r0, size_t r1, size_t c0, size_t c1)
{
	bitem *it = g->job->it;
	for (size_t ri = r0; ri < r1; ri++)
		reply_run(b, it + g->runstart[ri], g->runlen[ri], g->xr[ri].off, g->xr[ri].buf, g->xr[ri].got,
			  g->xr[ri].err);
	for (size_t i = c0; i < c1; i++)
		reply_count(b, &it[g->nr + i], &g->cr[i]);
	if (atomic_fetch_sub(&g->refs, 1) == 1)
		gres_free(b, g);
}

static void push_reply_jobs(td_fs_batch *b, bjob **jobs, size_t k);

/* Replies of a GPU batch: one reply per request, each a system call that
 * copies the read's bytes into the kernel. Spread them over the CPU workers
 * (so the batcher takes the next batch at once) unless the batch is small:
 * a job holds at most REPLY_CHUNK replies and about REPLY_BYTES of read
 * bytes, so a batch of 64 KiB reads goes out two at a time on as many
 * workers, not sixteen after each other on a few (the last reader of a
 * chunk waited for fifteen 64 KiB copies). */
#define REPLY_CHUNK 16u
#define REPLY_BYTES (128u * 1024u)

static void gres_dispatch(td_fs_batch *b, gres *g)
{
	size_t total = g->nruns + g->nc, bytes = 0;
	for (size_t ri = 0; ri < g->nruns; ri++)
		bytes += g->xr[ri].got;
	size_t k = total / REPLY_CHUNK;
	if (bytes / REPLY_BYTES > k)
		k = bytes / REPLY_BYTES;
	if (k > total)
		k = total;
	if (k > b->nworkers)
		k = b->nworkers;
	bjob *jobs[64];
	if (k > 64)
		k = 64;
	size_t made = 0;
	if (k >= 2) {
		for (; made < k; made++) {
			if (!(jobs[made] = job_new(0)))
				break;
		}
	}
	if (made < 2) {
		for (size_t i = 0; i < made; i++)
			free(jobs[i]);
		atomic_store(&g->refs, 1);
		gres_reply(b, g, 0, g->nruns, 0, g->nc);
		return;
	}
	atomic_store(&g->refs, (unsigned)made);
	for (size_t i = 0; i < made; i++) {
		bjob *j = jobs[i];
		j->g = g;
		j->r0 = g->nruns * i / made;
		j->r1 = g->nruns * (i + 1) / made;
		j->c0 = g->nc * i / made;
		j->c1 = g->nc * (i + 1) / made;
	}
	push_reply_jobs(b, jobs, made);
}

/* One GPU batch of reads and counts (items of other classes were sent to
 * the CPU workers). Takes ownership of j. Falls back to the CPU when a
 * launch fails. */
/* The list items it[0..n) (CLS_LIST): one batch a kind (top, vector,
 * n-grams, fuzzy, files) on the GPU, then each value formatted from its answer and
 * replied on this thread. A batch the GPU cannot run is answered by the
 * CPU workers' code here. */
static void run_lists(td_fs_batch *b, bitem *it, size_t n, tbuf *buf)
{
	/* lists the mount's list cache holds: answered from it, here */
	for (size_t i = 0; i < n;) {
		char *val = NULL;
		size_t len = 0;
		int rc = td_fs_xattr_list_kept(b->fs, it[i].r->e, it[i].r->name, &val, &len);
		if (rc == 1) {
			i++;
			continue;
		}
		reply_list(b, &it[i], rc, val, len);
		it[i] = it[--n];
	}
	if (!n)
		return;
	td_words_req *wq = calloc(n, sizeof *wq);
	td_fuzzy_req *fq = calloc(n, sizeof *fq);
	td_files_req *lq = calloc(n, sizeof *lq);
	td_ngram_req *gq = calloc(n, sizeof *gq);
	size_t *kind = calloc(n, sizeof *kind), *at = calloc(n, sizeof *at);
	if (!wq || !fq || !lq || !gq || !kind || !at) {
		run_cpu(b, it, n, buf);
		goto out;
	}
	/* requests by kind: top words first in wq, then vectors */
	size_t nk[5] = { 0 };
	td_fs_xname x;
	for (size_t i = 0; i < n; i++) {
		td_fs_xattr_parse(it[i].r->name, &x);
		kind[i] = x.kind == TD_FS_XTOP ? 0 : x.kind == TD_FS_XVECTOR ? 1 : x.kind == TD_FS_XFUZZY ? 2
			: x.kind == TD_FS_XFILES ? 3 : 4;
		nk[kind[i]]++;
	}
	size_t next[5] = { 0, nk[0], 0, 0, 0 };
	for (size_t i = 0; i < n; i++) {
		td_fs_xattr_parse(it[i].r->name, &x);
		td_entry e = it[i].r->e;
		size_t k = at[i] = next[kind[i]]++;
		if (kind[i] <= 1)
			wq[k] = (td_words_req){ .scope = e, .n = kind[i] == 0 ? x.n : 0 };
		else if (kind[i] == 2)
			fq[k] = (td_fuzzy_req){ .word = x.word, .len = x.wlen, .k = (unsigned)x.n, .scope = e };
		else if (kind[i] == 3)
			lq[k] = (td_files_req){ .word = x.word, .len = x.wlen, .scope = e };
		else
			gq[k] = (td_ngram_req){ .scope = e, .len = x.len, .top = x.n };
	}
	const td_archive *a = b->fs->a;
	int err = TD_OK;
	uint64_t t0 = now_ns();
	if (b->gpu_emulated) { /* on this thread alone, as run_gpu's counts */
		err = td_top_batch(a, wq, nk[0], 1);
		err = err ? err : td_vector_batch(a, wq + nk[0], nk[1], 1);
		err = err ? err : td_fuzzy_batch(a, fq, nk[2], 1);
		err = err ? err : td_files_batch(a, lq, nk[3], 1);
		err = err ? err : td_ngram_batch(a, gq, nk[4], 1);
	} else {
		err = nk[0] ? td_gpu_top_batch(b->gpu, wq, nk[0]) : TD_OK;
		err = err || !nk[1] ? err : td_gpu_vector_batch(b->gpu, wq + nk[0], nk[1]);
		err = err || !nk[2] ? err : td_gpu_fuzzy_batch(b->gpu, fq, nk[2]);
		err = err || !nk[3] ? err : td_gpu_files_batch(b->gpu, lq, nk[3]);
		err = err || !nk[4] ? err : td_gpu_ngram_batch(b->gpu, gq, nk[4]);
	}
	atomic_fetch_add_explicit(&b->st.gpu_ns, now_ns() - t0, memory_order_relaxed);
	if (err) {
		td_fs_log(TD_CONF_LOG_WARN, "gpu: list batch failed (%s); answered by the CPU", td_strerror(err));
		run_cpu(b, it, n, buf);
		goto out;
	}
	atomic_fetch_add_explicit(&b->st.gpu_reqs, n, memory_order_relaxed);
	for (size_t i = 0; i < n; i++) {
		const void *given = kind[i] <= 1   ? (const void *)&wq[at[i]]
				    : kind[i] == 2 ? (const void *)&fq[at[i]]
				    : kind[i] == 3 ? (const void *)&lq[at[i]]
						   : (const void *)&gq[at[i]];
		char *val = NULL;
		size_t len = 0;
		int rc = td_fs_xattr_given(b->fs, it[i].r->e, it[i].r->name, given, &val, &len);
		reply_list(b, &it[i], rc, val, len);
	}
out:
	for (size_t i = 0; wq && fq && lq && gq && i < n; i++) {
		td_words_req_free(&wq[i]);
		td_fuzzy_req_free(&fq[i]);
		free(lq[i].files);
		td_ngram_req_free(&gq[i]);
	}
	free(wq);
	free(fq);
	free(lq);
	free(gq);
	free(kind);
	free(at);
}

static void run_gpu(td_fs_batch *b, bjob *j, tbuf *buf)
{
	bitem *it = j->it;
	size_t n = j->n, nr = reads_first(it, n);
	/* the lists to the end, out of the job (which its replies free) */
	size_t nl = 0;
	for (size_t i = n; i-- > nr;) {
		if (it[i].cls == CLS_LIST) {
			bitem t = it[n - 1 - nl];
			it[n - 1 - nl] = it[i];
			it[i] = t;
			nl++;
		}
	}
	bitem *lists = nl ? malloc(nl * sizeof *lists) : NULL;
	if (nl && !lists) {
		run_lists(b, it + n - nl, nl, buf); /* now, before the rest */
	} else if (nl) {
		memcpy(lists, it + n - nl, nl * sizeof *lists);
	}
	n -= nl;
	j->n = n;
	if (!n) {
		free(j);
		run_lists(b, lists, lists ? nl : 0, buf);
		free(lists);
		return;
	}
	run_gpu_rw(b, j, buf, n, nr);
	run_lists(b, lists, lists ? nl : 0, buf);
	free(lists);
}

/* run_gpu for reads it[0..nr) and counts it[nr..n) of j. */
static void run_gpu_rw(td_fs_batch *b, bjob *j, tbuf *buf, size_t n, size_t nr)
{
	bitem *it = j->it;
	size_t nruns = 0, bytes = 0;
	for (size_t i = 0; i < nr;) {
		uint64_t end;
		size_t k = read_run(it + i, nr - i, &end);
		bytes += (size_t)(end - it[i].r->off);
		nruns++;
		i += k;
	}
	size_t nc = n - nr;
	gres *g = calloc(1, sizeof *g);
	if (g) {
		g->job = j;
		g->nr = nr;
		g->nruns = nruns;
		g->nc = nc;
		g->xr = calloc(nruns ? nruns : 1, sizeof *g->xr);
		g->runstart = calloc(nruns ? nruns : 1, sizeof *g->runstart);
		g->runlen = calloc(nruns ? nruns : 1, sizeof *g->runlen);
		g->cr = calloc(nc ? nc : 1, sizeof *g->cr);
		g->arena = arena_get(b, bytes, &g->arena_cap);
	}
	if (!g || !g->xr || !g->runstart || !g->runlen || !g->cr || !g->arena) {
		if (g) {
			g->job = NULL;
			gres_free(b, g);
		}
		run_cpu(b, it, n, buf);
		free(j);
		return;
	}
	size_t pos = 0, ri = 0;
	for (size_t i = 0; i < nr;) {
		uint64_t end;
		size_t k = read_run(it + i, nr - i, &end);
		const td_fs_req *f = it[i].r;
		g->xr[ri] = (td_extract_req){
			.file = f->e, .off = f->off, .len = (uint32_t)(end - f->off), .buf = g->arena + pos
		};
		g->runstart[ri] = i;
		g->runlen[ri] = k;
		pos += (size_t)(end - f->off);
		ri++;
		i += k;
	}
	for (size_t i = 0; i < nc; i++) {
		td_fs_xname x;
		td_fs_xattr_parse(it[nr + i].r->name, &x);
		g->cr[i] = (td_count_req){ .word = x.word, .len = x.wlen, .scope = it[nr + i].r->e };
	}
	int xerr = TD_OK, cerr = TD_OK;
	uint64_t t0 = now_ns();
	if (b->gpu_emulated) {
		/* on this thread alone, like a device beside the CPU (no threads
		 * started per batch): what the rest costs is the hand-off's */
		xerr = nruns ? td_extract_batch(b->fs->a, g->xr, nruns, 1) : TD_OK;
		cerr = nc ? td_count_batch(b->fs->a, g->cr, nc, 1) : TD_OK;
	} else {
		xerr = nruns ? td_gpu_extract_batch(b->gpu, g->xr, nruns) : TD_OK;
		cerr = nc ? td_gpu_count_batch(b->gpu, g->cr, nc) : TD_OK;
	}
	atomic_fetch_add_explicit(&b->st.gpu_ns, now_ns() - t0, memory_order_relaxed);
	if (xerr || cerr) {
		/* Rare (a CUDA call failed): answer the whole batch here. */
		td_fs_log(TD_CONF_LOG_WARN, "gpu: batch failed (%s); answered by the CPU", td_strerror(xerr ? xerr : cerr));
		run_cpu(b, it, n, buf);
		gres_free(b, g);
		return;
	}
	atomic_fetch_add_explicit(&b->st.gpu_reqs, n, memory_order_relaxed);
	atomic_fetch_add_explicit(&b->st.gpu_batches, 1, memory_order_relaxed);
	gres_dispatch(b, g);
}

/* gpu = auto, before the session's threads start: load the CUDA driver
 * library here, once (its handle is kept, so the CUDA runtime's own dlopen
 * on the GPU thread finds it loaded), or learn that there is none. A
 * library search holds the dynamic loader's lock, which every
 * pthread_create takes: on the GPU thread it stalled the FUSE thread
 * that starts a worker for the first requests after the mount (135 ms
 * on the busy 2-core VM, contrib/bench/results/mount-ready.md). 1 if the
 * GPU may be tried (always when TADOCFS_GPU_EMULATE=1). */
static int cuda_driver_loaded(void)
{
	const char *emu = getenv("TADOCFS_GPU_EMULATE");
	if (emu && strcmp(emu, "1") == 0)
		return 1;
	return dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) != NULL;
}

/* gpu = auto: open the GPU in the background (the batcher thread runs
 * the batches once it is ready). */
static void *gpu_main(void *arg)
{
	td_fs_batch *b = arg;
	if (atomic_load(&b->gpu_state) == GPU_OPENING)
		gpu_open(b);
	return NULL;
}

/* --- the batcher thread --- */

/* An empty job with room for n items; NULL when out of memory. */
static bjob *job_new(size_t n)
{
	bjob *j = malloc(sizeof *j + n * sizeof(bitem));
	if (j) {
		j->next = NULL;
		j->g = NULL;
		j->n = 0;
	}
	return j;
}

static bitem q_pop(td_fs_batch *b)
{
	bitem x = b->q[b->qhead];
	b->qhead = (b->qhead + 1) % QUEUE_CAP;
	b->qlen--;
	atomic_fetch_sub_explicit(&b->pending, 1, memory_order_relaxed);
	if (x.cls == CLS_READ)
		b->q_reads--;
	else if (x.cls == CLS_COUNT || x.cls == CLS_LIST)
		b->q_counts--;
	return x;
}

static void push_job(td_fs_batch *b, bjob *j)
{
	if (b->jobs_tail)
		b->jobs_tail->next = j;
	else
		b->jobs = j;
	b->jobs_tail = j;
	b->njobs++;
	atomic_fetch_add_explicit(&b->st.batches, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&b->st.batched, j->n, memory_order_relaxed);
	td_fs_stats_max_batch(&b->st, j->n);
	pthread_cond_signal(&b->cv_workers);
}

/* Put reply jobs at the head of the job list: answers already computed go
 * out before new work starts. */
static void push_reply_jobs(td_fs_batch *b, bjob **jobs, size_t k)
{
	pthread_mutex_lock(&b->mu);
	for (size_t i = k; i-- > 0;) {
		jobs[i]->next = b->jobs;
		b->jobs = jobs[i];
		if (!b->jobs_tail)
			b->jobs_tail = jobs[i];
		b->njobs++;
		pthread_cond_signal(&b->cv_workers); /* one worker per job, not all */
	}
	pthread_mutex_unlock(&b->mu);
}

/* Out of memory for a job: answer the items inline on this thread. */
static void run_now(td_fs_batch *b, size_t n)
{
	tbuf buf = { 0 };
	while (n--) {
		bitem x = q_pop(b);
		pthread_mutex_unlock(&b->mu);
		run_cpu(b, &x, 1, &buf);
		pthread_mutex_lock(&b->mu);
	}
	free(buf.p);
}

/* Take up to batch_max queued items: reads and counts become one GPU batch,
 * run on this (the batcher's) thread with mu released, so no other thread
 * is woken for it and what arrives meanwhile forms the next batch; any
 * other items go to the CPU workers first. */
static void dispatch_gpu(td_fs_batch *b, tbuf *buf)
{
	size_t n = b->qlen < b->batch_max ? b->qlen : b->batch_max;
	bjob *g = job_new(n), *c = job_new(n);
	if (!g || !c) {
		free(g);
		free(c);
		run_now(b, n);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		bitem x = q_pop(b);
		if (x.cls != CLS_OTHER)
			g->it[g->n++] = x;
		else
			c->it[c->n++] = x;
	}
	atomic_fetch_add_explicit(&b->st.batches, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&b->st.batched, g->n, memory_order_relaxed);
	td_fs_stats_max_batch(&b->st, g->n);
	if (c->n)
		push_job(b, c);
	else
		free(c);
	pthread_mutex_unlock(&b->mu);
	run_gpu(b, g, buf);
	pthread_mutex_lock(&b->mu);
}

static void dispatch_cpu(td_fs_batch *b, unsigned free_workers)
{
	/* Share the queue between the workers: a batch is at most 1/nworkers
	 * of it, so the next free worker finds the rest. */
	size_t per = (b->qlen + b->nworkers - 1) / b->nworkers;
	if (per > b->batch_max)
		per = b->batch_max;
	if (per == 0)
		per = 1;
	while (free_workers-- > 0 && b->qlen) {
		size_t n = b->qlen < per ? b->qlen : per;
		bjob *j = job_new(n);
		if (!j) {
			run_now(b, n);
			continue;
		}
		for (size_t i = 0; i < n; i++)
			j->it[j->n++] = q_pop(b);
		push_job(b, j);
	}
}

/* Enough queued reads or counts for a GPU batch (caller holds mu). */
static int gpu_due(const td_fs_batch *b)
{
	return b->q_reads >= b->gpu_min_read || b->q_counts >= b->gpu_min_count;
}

/* Take everything handed in since the last call into the ring, oldest
 * first (the batcher's thread; the ring has room: pending <= QUEUE_CAP). */
static void drain(td_fs_batch *b)
{
	if (!atomic_load_explicit(&b->inbox, memory_order_relaxed))
		return;
	td_fs_req *r = atomic_exchange_explicit(&b->inbox, NULL, memory_order_acquire), *old = NULL;
	long n = 0;
	while (r) { /* newest first: reverse */
		td_fs_req *nx = r->qnext;
		r->qnext = old;
		old = r;
		r = nx;
		n++;
	}
	atomic_fetch_sub_explicit(&b->inbox_n, n, memory_order_relaxed);
	for (r = old; r; r = r->qnext) {
		assert(b->qlen < QUEUE_CAP);
		b->q[(b->qhead + b->qlen) % QUEUE_CAP] = (bitem){ .r = r, .t0 = r->qt0, .cls = r->qcls };
		b->qlen++;
		if (r->qcls == CLS_READ)
			b->q_reads++;
		else if (r->qcls == CLS_COUNT || r->qcls == CLS_LIST)
			b->q_counts++;
		if (b->last_arrival) {
			uint64_t dt = r->qt0 > b->last_arrival ? r->qt0 - b->last_arrival : 0;
			b->ia_ewma = b->ia_ewma ? (b->ia_ewma * 7 + dt) / 8 : dt + 1;
		}
		if (r->qt0 > b->last_arrival)
			b->last_arrival = r->qt0;
	}
}

/* Sleep (mu held) until `need` more requests were handed in, `until`
 * (CLOCK_REALTIME; NULL: no limit) passes, or stop. A handler wakes us
 * only when it sees `sleeping` and the count reached: the stores and loads
 * of sleeping and inbox_n are sequentially consistent, so one side always
 * sees the other. */
static void sleep_for(td_fs_batch *b, long need, const struct timespec *until)
{
	atomic_store(&b->wake_at, need);
	atomic_store(&b->sleeping, 1);
	if (atomic_load(&b->inbox_n) < need && !atomic_load(&b->stopping)) {
		if (until)
			pthread_cond_timedwait(&b->cv_batcher, &b->mu, until);
		else
			pthread_cond_wait(&b->cv_batcher, &b->mu);
	}
	atomic_store(&b->sleeping, 0);
	atomic_store(&b->wake_at, LONG_MAX);
}

static void *batcher_main(void *arg)
{
	td_fs_batch *b = arg;
	tbuf buf = { 0 }; /* run_gpu's CPU fallback */
	int raised = 0;
	pthread_mutex_lock(&b->mu);
	for (;;) {
		raise_thread(b, &raised);
		drain(b);
		if (b->qlen == 0) {
			if (atomic_load(&b->stopping))
				break;
			sleep_for(b, 1, NULL);
			continue;
		}
		int gpu = atomic_load(&b->gpu_state) == GPU_READY;
		if (gpu && !gpu_due(b) && b->qlen < b->batch_max && b->window_us && !atomic_load(&b->stopping)) {
			/* Below the crossover: wait for more only while requests
			 * arrive fast enough to reach it before the oldest queued
			 * one has waited batch_window_us. */
			uint64_t now = now_ns(), deadline = b->q[b->qhead].t0 + (uint64_t)b->window_us * 1000u;
			size_t need_r = b->gpu_min_read - b->q_reads, need_c = b->gpu_min_count - b->q_counts;
			size_t need = need_r < need_c ? need_r : need_c;
			if (now < deadline && b->ia_ewma > 0 && b->ia_ewma * need <= deadline - now) {
				struct timespec ts;
				clock_gettime(CLOCK_REALTIME, &ts);
				uint64_t wait = deadline - now;
				ts.tv_sec += (time_t)(wait / 1000000000u);
				ts.tv_nsec += (long)(wait % 1000000000u);
				if (ts.tv_nsec >= 1000000000L) {
					ts.tv_sec++;
					ts.tv_nsec -= 1000000000L;
				}
				sleep_for(b, (long)need, &ts);
				drain(b);
				if (!gpu_due(b) && now_ns() < deadline && b->qlen < b->batch_max)
					continue;
			}
		}
		if (gpu && gpu_due(b)) {
			dispatch_gpu(b, &buf);
			continue;
		}
		long free_workers = (long)b->nworkers - (long)b->busy - (long)b->njobs;
		if (free_workers <= 0) {
			/* Every worker has work: requests pile up into the next,
			 * larger batch meanwhile. */
			b->wait_worker = 1;
			pthread_cond_wait(&b->cv_batcher, &b->mu);
			b->wait_worker = 0;
			continue;
		}
		dispatch_cpu(b, (unsigned)free_workers);
	}
	pthread_mutex_unlock(&b->mu);
	free(buf.p);
	return NULL;
}

/* Requests in flight for the mount: the kernel's count (fusectl's
 * "waiting": queued there or being answered here), read at most every
 * WAIT_SAMPLE_NS by whichever thread finds it stale, or this daemon's own
 * count `others` when fusectl is not there (which sees no more requests
 * than FUSE threads, so deep queues then never reach the GPU). */
#define WAIT_SAMPLE_NS 1000000u

static long load_depth(td_fs_batch *b, unsigned others)
{
	if (!b->wait_path[0])
		return others;
	uint64_t now = now_ns(), t = atomic_load_explicit(&b->wait_t, memory_order_relaxed);
	if (now - t > WAIT_SAMPLE_NS && atomic_compare_exchange_strong(&b->wait_t, &t, now)) {
		/* fusectl files cannot seek (no pread): open, read, close */
		char buf[32];
		int fd = open(b->wait_path, O_RDONLY | O_CLOEXEC);
		ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
		if (fd >= 0)
			close(fd);
		if (n > 0) {
			buf[n] = '\0';
			atomic_store_explicit(&b->wait_n, strtol(buf, NULL, 10), memory_order_relaxed);
		}
	}
	long w = atomic_load_explicit(&b->wait_n, memory_order_relaxed);
	return w > (long)others ? w : (long)others;
}

/* --- the executor FUSE handlers call --- */

static void run_inline(td_fs_batch *b, td_fs_req *r, uint64_t t0)
{
	atomic_fetch_add_explicit(&b->st.inline_reqs, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&b->cpu_busy, 1, memory_order_relaxed);
	r->in_fuse = 1;
	td_fs_req_run(r);
	atomic_fetch_sub_explicit(&b->cpu_busy, 1, memory_order_relaxed);
	done(b, t0);
}

static int batch_submit(void *ctx, td_fs_req *r)
{
	td_fs_batch *b = ctx;
	uint64_t t0 = now_ns();
	atomic_fetch_add_explicit(r->kind == TD_FS_READ ? &b->st.reads : &b->st.xattrs, 1, memory_order_relaxed);
	unsigned others = atomic_fetch_add_explicit(&b->active, 1, memory_order_relaxed);
	int seq = 0;
	if (r->kind == TD_FS_READ && r->file) {
		/* seq_next: where this file's last read ended, with SEQ_STREAK
		 * set when that read continued the one before. */
		uint64_t prev = atomic_load_explicit(&r->file->seq_next, memory_order_relaxed);
		int cont = (prev & ~SEQ_STREAK) == r->off;
		atomic_store_explicit(&r->file->seq_next, (r->off + r->size) | (cont ? SEQ_STREAK : 0),
				      memory_order_relaxed);
		/* A sequential reader (kernel readahead sends >= 16 KiB; smaller
		 * reads must continue twice in a row, so that random readers
		 * sharing a descriptor rarely qualify): its cursor continues
		 * without a descent, which no batch does better. */
		seq = cont && (r->size >= SEQ_MIN || (prev & SEQ_STREAK));
	}
	if (b->inline_only) {
		run_inline(b, r, t0);
		return 0;
	}
	if (seq && others > 0)
		atomic_fetch_add_explicit(&b->st.sequential, 1, memory_order_relaxed);
	/* Queue a request only where a batch can do better than this FUSE
	 * thread (batcher.h): with a GPU ready, the reads and counts beyond
	 * what the CPU has room for (below), and a count alone; never a read
	 * continuing a sequential reader (its cursor beats any batch), nor
	 * search/words; only kinds whose crossover is within QUEUE_REACH (one
	 * request per concurrent reader), so gpu_min_reads=10000 keeps reads
	 * here. Without a GPU nothing is queued: the FUSE threads answering
	 * inline beat the hand-off to CPU workers (contrib/bench/batcher.sh),
	 * unless TADOCFS_BATCH_CPU=1 asks for the workers (then: whenever
	 * another request is in flight). */
	int cls = classify(b, r), queue = 0;
	if (atomic_load_explicit(&b->gpu_state, memory_order_relaxed) == GPU_READY) {
		/* Hybrid split: the FUSE threads keep answering while fewer than
		 * cpu_slots requests are being answered inline (the CPU has room;
		 * the GPU would only add latency); the requests beyond that,
		 * which would otherwise wait for a core, go to the GPU queue,
		 * but only once that wait is longer than the GPU's round trip:
		 * with A requests in flight on N cores a request waits about
		 * A / N times its CPU cost for a core, while a GPU batch plus
		 * its hand-off took 0.4-0.6 ms on the H100 host (16 cores).
		 * A 64 KiB read costs a core about 80 us (FUSE copy and
		 * extraction), so reads go once A >= 8 N (DEPTH_READ); a count
		 * about 0.5 ms, so counts once A >= 2 N (DEPTH_COUNT). Measured
		 * there (contrib/bench/batcher.sh, sotu): splitting at a
		 * shallower depth served 64 KiB reads at 0.74-0.82x of the
		 * CPU-only mount with 16 readers and 0.89-1.00x with 64, counts
		 * 0.71-0.76x with 16; deeper than that the GPU gained (64 KiB
		 * reads 1.22-1.34x at 256 readers, counts 1.3-1.6x at 64).
		 * Counts also go there when alone (the GPU wins from one count). */
		int cpu_full = atomic_load_explicit(&b->cpu_busy, memory_order_relaxed) >= b->cpu_slots;
		if (cls == CLS_COUNT || cls == CLS_LIST)
			queue = b->gpu_min_count <= QUEUE_REACH &&
				((cpu_full && load_depth(b, others) >= (long)b->depth_count) ||
				 (others == 0 && b->gpu_min_count <= 1));
		else if (cls == CLS_READ)
			queue = b->gpu_min_read <= QUEUE_REACH && others > 0 && !seq && cpu_full &&
				r->size >= b->gpu_min_read_size && load_depth(b, others) >= (long)b->depth_read;
	} else if (b->cpu_queue) {
		queue = others > 0 && !seq;
	}
	if (queue && atomic_fetch_add_explicit(&b->pending, 1, memory_order_relaxed) >= QUEUE_CAP) {
		atomic_fetch_sub_explicit(&b->pending, 1, memory_order_relaxed);
		queue = 0;
	}
	if (!queue || atomic_load_explicit(&b->stopping, memory_order_relaxed)) {
		if (queue)
			atomic_fetch_sub_explicit(&b->pending, 1, memory_order_relaxed);
		run_inline(b, r, t0);
		return 0;
	}
	r->qt0 = t0;
	r->qcls = cls;
	td_fs_req *head = atomic_load_explicit(&b->inbox, memory_order_relaxed);
	do
		r->qnext = head;
	while (!atomic_compare_exchange_weak_explicit(&b->inbox, &head, r, memory_order_release, memory_order_relaxed));
	long n = atomic_fetch_add(&b->inbox_n, 1) + 1;
	if (atomic_load(&b->sleeping) && n >= atomic_load(&b->wake_at)) {
		pthread_mutex_lock(&b->mu);
		pthread_cond_signal(&b->cv_batcher);
		pthread_mutex_unlock(&b->mu);
	}
	return 0;
}

/* --- start, stop, stats --- */

static void sigusr1(void *ctx);

static unsigned online_cpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1u;
}

static void batch_free(td_fs_batch *b)
{
	for (unsigned i = 0; i < b->npool; i++)
		td_gpu_host_free(b->gpu, b->pool[i].p);
	pthread_mutex_destroy(&b->amu);
	pthread_mutex_destroy(&b->mu);
	pthread_cond_destroy(&b->cv_batcher);
	pthread_cond_destroy(&b->cv_workers);
	td_gpu_close(b->gpu);
	free(b->workers);
	free(b->q);
	free(b);
}

static void stop_threads(td_fs_batch *b)
{
	pthread_mutex_lock(&b->mu);
	atomic_store(&b->stopping, 1);
	pthread_cond_broadcast(&b->cv_batcher);
	pthread_mutex_unlock(&b->mu);
	if (b->has_batcher)
		pthread_join(b->batcher, NULL);
	/* an open still under way (gpu = auto) */
	if (b->has_gthread)
		pthread_join(b->gthread, NULL);
	/* the workers last: the batcher's last GPU batch handed them replies */
	pthread_mutex_lock(&b->mu);
	b->wstop = 1;
	pthread_cond_broadcast(&b->cv_workers);
	pthread_mutex_unlock(&b->mu);
	for (unsigned i = 0; i < b->nstarted; i++)
		pthread_join(b->workers[i], NULL);
}

int td_fs_batch_start(td_fs *fs)
{
	const td_conf *c = &fs->conf;
	td_fs_batch *b = calloc(1, sizeof *b);
	if (!b)
		return -ENOMEM;
	b->fs = fs;
	td_fs_stats_init(&b->st);
	b->nworkers = c->cpu_workers ? c->cpu_workers : online_cpus();
	b->batch_max = c->batch_max ? c->batch_max : 1;
	b->window_us = c->batch_window_us;
	b->gpu_min_read = c->gpu_min_reads ? c->gpu_min_reads : TD_FS_GPU_MIN_READS;
	b->gpu_min_read_size = c->gpu_min_read_size ? c->gpu_min_read_size : TD_FS_GPU_MIN_READ_SIZE;
	b->gpu_min_count = c->gpu_min_counts ? c->gpu_min_counts : TD_FS_GPU_MIN_COUNTS;
	/* An edit overlay (overlay.h) answers through its own handlers: any
	 * request reaching us there takes the direct path. */
	b->inline_only = b->batch_max <= 1 || fs->rw != NULL;
	const char *cq = getenv("TADOCFS_BATCH_CPU");
	b->cpu_queue = cq && strcmp(cq, "1") == 0;
	b->raise = c->gpu != TD_CONF_GPU_OFF ? c->batch_priority : 0;
	atomic_init(&b->raise_denied, 0);
	atomic_init(&b->wake_at, LONG_MAX);
	atomic_init(&b->inbox, NULL);
	atomic_init(&b->inbox_n, 0);
	atomic_init(&b->sleeping, 0);
	atomic_init(&b->pending, 0);
	atomic_init(&b->cpu_busy, 0);
	atomic_init(&b->stopping, 0);
	/* Half the cores: the other half is what the FUSE round trips themselves
	 * (kernel, libfuse, the reader) cost, measured as the no-op ceiling. */
	b->cpu_slots = b->nworkers / 2 ? b->nworkers / 2 : 1;
	b->depth_count = DEPTH_COUNT * b->nworkers;
	b->depth_read = DEPTH_READ * b->nworkers;
	atomic_init(&b->wait_t, 0);
	atomic_init(&b->wait_n, 0);
	if (c->gpu != TD_CONF_GPU_OFF && !b->inline_only) {
		if (td_fs_waiting_path(fs, b->wait_path, sizeof b->wait_path) != 0)
			td_fs_log(TD_CONF_LOG_INFO, "batcher: no fusectl request count for %s (is fusectl mounted on "
						    "/sys/fs/fuse/connections?): the GPU split sees only the daemon's requests",
				  fs->mountpoint ? fs->mountpoint : "the mount");
	}
	/* benchmark knob (contrib/bench/batcher.sh experiments): requests
	 * answered inline before the GPU takes the rest; 0 queues every read
	 * that finds another in flight */
	const char *cs = getenv("TADOCFS_CPU_SLOTS");
	if (cs && *cs >= '0' && *cs <= '9')
		b->cpu_slots = (unsigned)strtoul(cs, NULL, 10);
	atomic_init(&b->active, 0);
	atomic_init(&b->gpu_state, GPU_OFF);
	snprintf(b->gpu_name, sizeof b->gpu_name, "off");
	pthread_mutex_init(&b->mu, NULL);
	pthread_mutex_init(&b->amu, NULL);
	pthread_cond_init(&b->cv_batcher, NULL);
	pthread_cond_init(&b->cv_workers, NULL);
	int rc = 0;
	if (!b->inline_only) {
		b->q = malloc(QUEUE_CAP * sizeof *b->q);
		b->workers = calloc(b->nworkers, sizeof *b->workers);
		if (!b->q || !b->workers) {
			batch_free(b);
			return -ENOMEM;
		}
		if (c->gpu != TD_CONF_GPU_OFF) {
			if (c->gpu == TD_CONF_GPU_ON) {
				gpu_open(b); /* gpu = on: the mount fails without it */
				if (atomic_load(&b->gpu_state) != GPU_READY) {
					batch_free(b);
					return -ENODEV;
				}
			} else if (!cuda_driver_loaded()) {
				snprintf(b->gpu_name, sizeof b->gpu_name, "unavailable");
				b->raise = 0; /* no GPU: the threads keep the daemon's priority */
				td_fs_log(TD_CONF_LOG_INFO, "gpu: no CUDA driver (libcuda.so.1); reads are served by the CPU");
			} else {
				snprintf(b->gpu_name, sizeof b->gpu_name, "opening");
				atomic_store(&b->gpu_state, GPU_OPENING);
			}
		}
		for (; b->nstarted < b->nworkers; b->nstarted++) {
			if ((rc = pthread_create(&b->workers[b->nstarted], NULL, worker_main, b)) != 0)
				break;
		}
		if (!rc && (rc = pthread_create(&b->batcher, NULL, batcher_main, b)) == 0)
			b->has_batcher = 1;
		if (!rc && c->gpu != TD_CONF_GPU_OFF) {
			if ((rc = pthread_create(&b->gthread, NULL, gpu_main, b)) == 0)
				b->has_gthread = 1;
			else
				atomic_store(&b->gpu_state, GPU_OFF);
		}
		if (rc) {
			stop_threads(b);
			batch_free(b);
			return -rc;
		}
	} else if (c->gpu == TD_CONF_GPU_ON) {
		td_fs_log(TD_CONF_LOG_WARN, "gpu=on has no effect with batch_max=1 (no batches)");
	}
	fs->batch = b;
	fs->exec.ctx = b;
	fs->exec.submit = batch_submit;
	if ((rc = td_fs_stats_sigwatch_start(sigusr1, fs)) != 0)
		td_fs_log(TD_CONF_LOG_WARN, "SIGUSR1 stats: %s", strerror(-rc));
	td_fs_log(TD_CONF_LOG_INFO, "batcher: %s, %u CPU workers, batch_max %u, window %u us, gpu %s",
		  b->inline_only ? (fs->rw ? "off (edit overlay)" : "off (batch_max=1)") : "on", b->nworkers, b->batch_max, b->window_us,
		  c->gpu == TD_CONF_GPU_OFF ? "off" : td_conf_gpu_name(c->gpu));
	return 0;
}

unsigned td_fs_batch_fuse_threads(const td_fs *fs, unsigned dflt)
{
	const td_fs_batch *b = fs->batch;
	if (!b || b->inline_only || fs->conf.gpu == TD_CONF_GPU_OFF)
		return dflt;
	return 2 * b->cpu_slots > dflt ? 2 * b->cpu_slots : dflt;
}

void td_fs_batch_stop(td_fs *fs)
{
	td_fs_batch *b = fs->batch;
	if (!b)
		return;
	td_fs_stats_sigwatch_stop();
	fs->exec.submit = NULL;
	fs->exec.ctx = NULL;
	if (!b->inline_only)
		stop_threads(b);
	fs->batch = NULL;
	batch_free(b);
}

void td_fs_batch_replying(const td_fs_req *r, size_t bytes)
{
	td_fs_batch *b = r->fs->batch;
	if (!b || !r->heap)
		return;
	atomic_fetch_sub_explicit(&b->active, 1, memory_order_relaxed);
	if (bytes)
		atomic_fetch_add_explicit(&b->st.bytes, bytes, memory_order_relaxed);
}

static int format_stats(td_fs_batch *b, int oneline, char **out, size_t *len)
{
	td_fs_stats_info info = {
		.cpu_workers = b->inline_only ? 0 : b->nworkers,
		.batch_max = b->batch_max,
		.batch_window_us = b->window_us,
		.gpu_min_reads = b->gpu_min_read,
		.gpu_min_read_size = b->gpu_min_read_size,
		.gpu_min_counts = b->gpu_min_count,
		/* what the threads run at once a GPU is in use: 0 when refused
		 * or when no GPU is used */
		.batch_priority = atomic_load(&b->raise_denied) || atomic_load(&b->gpu_state) != GPU_READY ? 0 : b->raise,
		/* gpu_name is final once the state left GPU_OPENING */
		.gpu = atomic_load(&b->gpu_state) == GPU_OPENING ? "opening" : b->gpu_name,
	};
	char tmp[2048];
	int n = td_fs_stats_format(&b->st, &info, oneline, tmp, sizeof tmp);
	if (n < 0)
		return -EIO;
	size_t l = (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1;
	char *p = malloc(l + 1);
	if (!p)
		return -ENOMEM;
	memcpy(p, tmp, l + 1);
	*out = p;
	*len = l;
	return 0;
}

uint64_t td_fs_batch_clock(void)
{
	return now_ns();
}

void td_fs_batch_record(td_fs *fs, int is_read, uint64_t t0, size_t bytes)
{
	td_fs_batch *b = fs->batch;
	if (!b)
		return;
	atomic_fetch_add_explicit(is_read ? &b->st.reads : &b->st.xattrs, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&b->st.inline_reqs, 1, memory_order_relaxed);
	if (bytes)
		atomic_fetch_add_explicit(&b->st.bytes, bytes, memory_order_relaxed);
	done(b, t0);
}

void td_fs_batch_stored(td_fs *fs, size_t bytes)
{
	td_fs_batch *b = fs->batch;
	if (!b)
		return;
	atomic_fetch_add_explicit(&b->st.stored, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&b->st.stored_bytes, bytes, memory_order_relaxed);
}

int td_fs_batch_stats(td_fs *fs, char **val, size_t *len)
{
	if (!fs->batch)
		return -ENODATA;
	return format_stats(fs->batch, 0, val, len);
}

void td_fs_batch_log_stats(td_fs *fs)
{
	char *s = NULL;
	size_t len = 0;
	if (!fs->batch || format_stats(fs->batch, 1, &s, &len) != 0)
		return;
	td_fs_log_always("stats: %s", s);
	free(s);
}

static void sigusr1(void *ctx)
{
	td_fs_batch_log_stats(ctx);
}

int td_fs_batch_gpu_probe(const td_fs *fs, char *msg, size_t len)
{
	int fds[2];
	if (pipe(fds) != 0) {
		snprintf(msg, len, "cannot probe the GPU: %s", strerror(errno));
		return 0;
	}
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(msg, len, "cannot probe the GPU: %s", strerror(errno));
		close(fds[0]);
		close(fds[1]);
		return 0;
	}
	if (pid == 0) {
		/* The child opens the GPU exactly as the daemon will, says why
		 * not if it cannot, and exits: no CUDA state reaches the parent. */
		close(fds[0]);
		char why[256] = "";
		td_gpu_opts o;
		gpu_opts(&fs->conf, fs->conf.cpu_workers, &o);
		td_gpu *g = NULL;
		int err = td_gpu_open(fs->a, &o, &g);
		if (err) {
			const char *d = td_errdetail(), *s = td_strerror(err);
			if (d && !strncmp(d, s, strlen(s))) /* "no GPU: ..." says it already */
				snprintf(why, sizeof why, "%s", d);
			else
				snprintf(why, sizeof why, "%s%s%s", s, d && *d ? ": " : "", d && *d ? d : "");
		} else if (!td_gpu_resident(g)) {
			snprintf(why, sizeof why, "the archive does not fit device %d (see gpu_mem_cap)", o.device);
		}
		td_gpu_close(g);
		ssize_t w = write(fds[1], why, strlen(why));
		(void)w;
		_exit(why[0] ? 1 : 0);
	}
	close(fds[1]);
	char buf[256];
	size_t got = 0;
	ssize_t n;
	while (got < sizeof buf - 1 && (n = read(fds[0], buf + got, sizeof buf - 1 - got)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
	close(fds[0]);
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
	if (!ok)
		snprintf(msg, len, "%s", got ? buf : "the GPU probe failed");
	return ok;
}
