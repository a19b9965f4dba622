/* td_build: cut the input into shards, build them on worker threads in bounded memory, write format 5. */
#include "td_build.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "td_archive_int.h"
#include "td_format.h"
#include "td_atab.h"
#include "td_vtab.h"
#include "td_fzix.h"
#include "td_grammar.h"
#include "td_mem.h"
#include "td_out.h"
#include "td_pack.h"
#include "td_pathtab.h"
#include "td_scode.h"
#include "td_shard.h"
#include "td_trace.h"

/* A big file is cut at most this far past the shard size (the first
 * ASCII byte that is not a word character, or here). */
#define CUT_SLACK (UINT64_C(1) << 20)

enum { G_DIR, G_FILE, G_LINK };

typedef struct gent {
	char *path;               /* relative ("" for the root) */
	uint32_t parent;
	uint8_t type;
	uint8_t explicit_;
	uint32_t mode;
	int64_t mtime;
	uint32_t nsec;
	uint64_t size;
	uint32_t last_shard;      /* directories: the last shard given a piece, UINT32_MAX none */
	uint8_t from_base;        /* in opts.base (tadoc add) */
	uint64_t first_pc;        /* files: the index of its first piece in td_build.pc */
	uint64_t base_words;      /* its word count there */
} gent;

typedef struct piece {
	uint32_t e;               /* global entry (index into ent) */
	uint32_t shard;
	uint32_t local;           /* the entry in the shard (from the worker) */
	uint64_t start;
	uint64_t size;
	uint64_t nwords;          /* (from the worker) */
} piece;

/* One shard: filled by the adding thread, built by a worker. */
typedef struct job {
	uint32_t idx;
	td_writer *w;
	char *tmp;                /* the shard's archive until finish */
	char **paths;             /* its pieces' paths, in piece order */
	uint64_t *pidx;           /* their indexes in td_build.pc */
	uint64_t npaths, cappaths;
	uint32_t *local;          /* out: entry in the shard, per path */
	uint64_t *nwords;         /* out: its words */
	uint64_t size, sum, nfiles, input_bytes;
	int err;
	int done;                 /* built (or failed): under td_build.mu */
	char why[600];
	struct job *next;         /* the queue */
} job;

struct td_build {
	td_build_opts o;
	td_writer *one;           /* formats 3 and 4: everything goes here */
	gent *ent;
	uint32_t nent, capent;
	td_pathtab pt;            /* path -> entry */
	piece *pc;
	uint64_t npc, cappc;
	job **jobs;               /* every shard, in order */
	uint32_t njobs, capjobs;
	job *cur;                 /* the shard filling */
	uint64_t cur_bytes;
	/* the open file */
	int in_file;
	uint32_t fe;
	uint64_t fpos;            /* bytes of it so far */
	int fopen_in_shard;       /* a piece of it is open in cur's writer */
	int fpart;                /* a part of a kept file (td_build_file_part) */
	uint64_t over;            /* bytes past the shard size in this piece */
	/* workers */
	pthread_t *th;
	unsigned nth;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	job *qhead, *qtail;
	unsigned inflight, max_inflight;
	int quit;
	/* cores no worker is building on, lent to the grammar rounds of the
	 * shards being built (td_grammar_cores); may go below 0 when a worker
	 * starts while its core is lent */
	int spare;
	td_grammar_cores cores;
	uint64_t done_bytes;      /* text of finished shards (under mu) */
	int werr;                 /* first worker failure seen (under mu) */
	char *tmpbase;
	/* shards kept from another archive (opts.base or opts.keep_from),
	 * byte for byte: shard i of the new archive is src's keep_src[i]
	 * (i < base_n); new ones follow */
	const td_archive *src;
	uint32_t base_n;
	uint32_t *keep_src;       /* new index -> src's */
	uint32_t *keep_map;       /* src's index -> new, UINT32_MAX dropped */
	uint32_t src_n;           /* src's shards */
	/* the tree order and NAMES, made while the last shards build
	 * (tree_early); NULL / empty: not made */
	uint32_t *pre_bfs, *pre_nchild;
	td_buf pre_names;
	/* the container's temporary file, filled with the shard images in
	 * order as they are built (td_build_finish); open while copen */
	int copen, cfd;
	char *ctmp;
	td_disk_shard *ctab;      /* the shard table being filled */
	uint64_t coff;            /* its end */
	uint32_t cnext;           /* the next new shard to append */
	/* shards' text buffers (td_writer_opts.raw_get): those tokenized,
	 * kept for the next shards (their pages already faulted in) */
	pthread_mutex_t pool_mu;
	void *pool[4];
	unsigned npool, pool_cap;
};

void td_build_opts_init(td_build_opts *o)
{
	memset(o, 0, sizeof *o);
	o->format = TD_VERSION_SHARDED;
	o->shard_size = TD_BUILD_SHARD_DEFAULT;
}

uint64_t td_build_memory_default(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	if (pages <= 0 || psz <= 0)
		return UINT64_C(2) << 30;
	return (uint64_t)pages * (uint64_t)psz / 2;
}

uint64_t td_build_memory_min(uint64_t shard_size)
{
	return TD_BUILD_BASE + shard_size * TD_BUILD_BYTES_PER_BYTE + TD_BUILD_SHARD_FIXED;
}

/* ------------------------------------------------------------ workers */

static int job_push_path(job *j, const char *path, uint64_t pidx)
{
	if (j->npaths == j->cappaths) {
		uint64_t cap = j->cappaths ? 2 * j->cappaths : 64;
		char **p = realloc(j->paths, cap * sizeof *p);
		if (p)
			j->paths = p;
		uint64_t *x = realloc(j->pidx, cap * sizeof *x);
		if (x)
			j->pidx = x;
		if (!p || !x)
			return TD_ENOMEM;
		j->cappaths = cap;
	}
	if (!(j->paths[j->npaths] = strdup(path)))
		return TD_ENOMEM;
	j->pidx[j->npaths++] = pidx;
	return TD_OK;
}

static void job_free(job *j)
{
	if (!j)
		return;
	td_writer_abort(j->w);
	if (j->tmp)
		unlink(j->tmp);
	free(j->tmp);
	for (uint64_t i = 0; i < j->npaths; i++)
		free(j->paths[i]);
	free(j->paths);
	free(j->pidx);
	free(j->local);
	free(j->nwords);
	free(j);
}

/* Build shard j into its file, then read back where each piece landed. */
static int job_run(job *j)
{
	int err = td_writer_finish(j->w, j->tmp);
	j->w = NULL;
	if (err)
		return err;
	td_archive *a;
	if ((err = td_archive_open(j->tmp, 0, &a)))
		return err;
	j->local = malloc((j->npaths + 1) * sizeof *j->local);
	j->nwords = malloc((j->npaths + 1) * sizeof *j->nwords);
	if (!j->local || !j->nwords) {
		td_archive_close(a);
		return TD_ENOMEM;
	}
	for (uint64_t i = 0; i < j->npaths && !err; i++) {
		td_entry e;
		td_stat st;
		if ((err = td_archive_lookup_path(a, j->paths[i], &e)) || (err = td_archive_stat(a, e, &st))) {
			err = td_fail(TD_EIO, "'%s' is not in its shard", j->paths[i]);
			break;
		}
		j->local[i] = e;
		j->nwords[i] = st.nwords;
		if (!S_ISDIR(st.mode)) {
			j->nfiles++;
			j->input_bytes += st.size;
		}
	}
	j->size = a->size;
	j->sum = XXH3_64bits(a->map, a->size);
	td_archive_close(a);
	return err;
}

static void *worker(void *p)
{
	td_build *b = p;
#ifdef TD_WRITER_TRACE
	/* benchmarks: the workers (and the helpers they start) below the
	 * adding thread's priority */
	if (getenv("TD_TRACE_WORKER_NICE"))
		setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), atoi(getenv("TD_TRACE_WORKER_NICE")));
#endif
	pthread_mutex_lock(&b->mu);
	for (;;) {
		while (!b->qhead && !b->quit)
			pthread_cond_wait(&b->cv, &b->mu);
		if (!b->qhead)
			break;
		job *j = b->qhead;
		b->qhead = j->next;
		if (!b->qhead)
			b->qtail = NULL;
		pthread_mutex_unlock(&b->mu);
		__atomic_fetch_sub(&b->spare, 1, __ATOMIC_RELAXED);
		td_trace("shard %u taken", j->idx);
		int err = job_run(j);
		/* the writer's tables were freed into this thread's arena (and
		 * its helpers'): give them back, so the bound holds for the
		 * process's RSS */
		td_mem_trim();
		td_trace("shard %u built", j->idx);
		if (err)
			snprintf(j->why, sizeof j->why, "shard %u: %s", j->idx, td_errdetail()[0] ? td_errdetail() : td_strerror(err));
		__atomic_fetch_add(&b->spare, 1, __ATOMIC_RELAXED);
		pthread_mutex_lock(&b->mu);
		j->err = err;
		j->done = 1;
		if (err && !b->werr)
			b->werr = err;
		b->inflight--;
		b->done_bytes += j->input_bytes;
		pthread_cond_broadcast(&b->cv);
	}
	pthread_mutex_unlock(&b->mu);
	return NULL;
}

/* A shard's text buffer: one a tokenized shard gave back, else a new
 * mapping. */
static void *raw_get(void *ctx, size_t size)
{
	td_build *b = ctx;
	void *p = NULL;
	pthread_mutex_lock(&b->pool_mu);
	if (b->npool)
		p = b->pool[--b->npool];
	pthread_mutex_unlock(&b->pool_mu);
	return p ? p : td_big_alloc(size);
}

/* Kept for the next shard while the pool has room (pool_cap: 0 where the
 * memory bound limits the shards in flight), else unmapped. */
static void raw_put(void *ctx, void *p, size_t size)
{
	td_build *b = ctx;
	pthread_mutex_lock(&b->pool_mu);
	if (b->npool < b->pool_cap) {
		b->pool[b->npool++] = p;
		p = NULL;
	}
	pthread_mutex_unlock(&b->pool_mu);
	td_big_free(p, size);
}

/* td_grammar_cores over the workers' idle cores: a shard's grammar rounds
 * borrow those with no shard to build (the tail of a build, a corpus of
 * fewer shards than cores). */
static unsigned cores_take(void *ctx, unsigned want)
{
	td_build *b = ctx;
	int have = __atomic_load_n(&b->spare, __ATOMIC_RELAXED);
	for (;;) {
		if (have <= 0)
			return 0;
		int k = have < (int)want ? have : (int)want;
		if (__atomic_compare_exchange_n(&b->spare, &have, have - k, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			return (unsigned)k;
	}
}

static void cores_give(void *ctx, unsigned k)
{
	td_build *b = ctx;
	__atomic_fetch_add(&b->spare, (int)k, __ATOMIC_RELAXED);
}

static void cores_reclaim(void *ctx, unsigned k)
{
	td_build *b = ctx;
	__atomic_fetch_sub(&b->spare, (int)k, __ATOMIC_RELAXED);
}

/* The first worker failure, as this thread's error. */
static int worker_err(td_build *b)
{
	if (!b->werr)
		return TD_OK;
	for (uint32_t i = 0; i < b->njobs; i++)
		if (b->jobs[i]->err)
			return td_fail(b->jobs[i]->err, "%s", b->jobs[i]->why);
	return td_fail(b->werr, "a shard failed");
}

static void report(td_build *b)
{
	if (b->o.progress)
		b->o.progress(b->o.progress_ctx, "compress", b->done_bytes, b->o.total_bytes);
}

/* ------------------------------------------------------------ shards */

/* With mu held: wait up to 200 ms for a worker's signal, then report
 * progress (mu released meanwhile); mu is held again on return. */
static void wait_report(td_build *b)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 200000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(&b->cv, &b->mu, &ts);
	pthread_mutex_unlock(&b->mu);
	report(b);
	pthread_mutex_lock(&b->mu);
}

static int shard_start(td_build *b)
{
	pthread_mutex_lock(&b->mu);
	while (b->inflight >= b->max_inflight && !b->werr) {
		wait_report(b);
	}
	int err = b->werr;
	if (!err)
		b->inflight++;
	pthread_mutex_unlock(&b->mu);
	if (err)
		return worker_err(b);
	if (b->njobs == b->capjobs) {
		uint32_t cap = b->capjobs ? 2 * b->capjobs : 16;
		job **v = realloc(b->jobs, cap * sizeof *v);
		if (!v)
			goto nomem;
		b->jobs = v;
		b->capjobs = cap;
	}
	job *j = calloc(1, sizeof *j);
	if (!j)
		goto nomem;
	j->idx = b->base_n + b->njobs;
	td_writer_opts wo = b->o.writer;
	wo.format = TD_VERSION;
	if (wo.words_split == TD_WORDS_RECORDS) /* each shard's words pick */
		wo.words_split = TD_WORDS_TEST;
	wo.progress = NULL;
	wo.build_time = b->o.build_time;
	wo.defer_tokenize = 1; /* the worker tokenizes, not this thread */
	wo.temp_output = 1;    /* finish() copies it into the synced archive */
	wo.grammar_cores = &b->cores;
	wo.raw_hint = b->o.shard_size + CUT_SLACK + (UINT64_C(1) << 20);
	wo.raw_get = raw_get;
	wo.raw_put = raw_put;
	wo.raw_ctx = b;
	j->w = td_writer_new(&wo);
	j->tmp = malloc(strlen(b->tmpbase) + 48);
	if (!j->w || !j->tmp) {
		job_free(j);
		goto nomem;
	}
	if (b->o.tmp_target) /* td_tmpfile.h's shape: td_tmp_sweep removes it once this process is gone */
		sprintf(j->tmp, "%s%u.tmp.%ld", b->tmpbase, j->idx, (long)getpid());
	else
		sprintf(j->tmp, "%s%u", b->tmpbase, j->idx);
	int e = td_writer_add_dir(j->w, "", 0755, b->o.build_time, 0);
	if (e) {
		job_free(j);
		pthread_mutex_lock(&b->mu);
		b->inflight--;
		pthread_mutex_unlock(&b->mu);
		return e;
	}
	b->jobs[b->njobs++] = j;
	b->cur = j;
	b->cur_bytes = 0;
	return TD_OK;
nomem:
	pthread_mutex_lock(&b->mu);
	b->inflight--;
	pthread_mutex_unlock(&b->mu);
	return TD_ENOMEM;
}

static void shard_close(td_build *b)
{
	job *j = b->cur;
	if (!j)
		return;
	b->cur = NULL;
	pthread_mutex_lock(&b->mu);
	j->next = NULL;
	if (b->qtail)
		b->qtail->next = j;
	else
		b->qhead = j;
	b->qtail = j;
	pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mu);
	report(b);
}

/* Entry e's path in a shard: every component is the number of its entry
 * here, in hex (td_format.h: shards do not store the real names again). */
static const char *shard_path(td_build *b, uint32_t e)
{
	static _Thread_local char buf[TD_MAXPATH + 1024];
	uint32_t chain[1100];
	unsigned n = 0;
	for (uint32_t d = e; d != 0 && n < 1100; d = b->ent[d].parent)
		chain[n++] = d;
	size_t at = 0;
	while (n-- > 0 && at + 16 < sizeof buf)
		at += (size_t)sprintf(buf + at, at ? "/%x" : "%x", chain[n]);
	buf[at] = 0;
	return buf;
}

static int pc_push(td_build *b, piece p)
{
	if (b->npc == b->cappc) {
		uint64_t cap = b->cappc ? 2 * b->cappc : 1024;
		piece *v = realloc(b->pc, cap * sizeof *v);
		if (!v)
			return TD_ENOMEM;
		b->pc = v;
		b->cappc = cap;
	}
	b->pc[b->npc++] = p;
	return TD_OK;
}

static int piece_add(td_build *b, uint32_t e, uint64_t start)
{
	int err = pc_push(b, (piece){ e, b->cur->idx, 0, start, 0, 0 });
	return err ? err : job_push_path(b->cur, shard_path(b, e), b->npc - 1);
}

/* A piece of file or symlink e starting at byte `start` goes to the
 * current shard; its directories get a piece of it there too. */
static int piece_open(td_build *b, uint32_t e, uint64_t start)
{
	int err;
	if (!b->cur && (err = shard_start(b)))
		return err;
	if ((err = piece_add(b, e, start)))
		return err;
	uint32_t d = e;
	do {
		d = b->ent[d].parent;
		if (b->ent[d].last_shard == b->cur->idx)
			break;
		b->ent[d].last_shard = b->cur->idx;
		if ((err = piece_add(b, d, 0)))
			return err;
	} while (d != 0);
	return TD_OK;
}

/* ------------------------------------------------------------ the tree */

static const char *gent_path(void *ctx, uint32_t e)
{
	return ((td_build *)ctx)->ent[e].path;
}

static int gent_is_dir(void *ctx, uint32_t e)
{
	return ((td_build *)ctx)->ent[e].type == G_DIR;
}

static uint32_t gent_count(void *ctx)
{
	return ((td_build *)ctx)->nent;
}

/* An implicit parent, as td_writer makes one. */
static int gent_add(void *ctx, const char *path, size_t len, uint32_t parent, int type)
{
	td_build *b = ctx;
	if (b->nent == b->capent) {
		gent *v = realloc(b->ent, 2 * b->capent * sizeof *v);
		if (!v)
			return TD_ENOMEM;
		b->ent = v;
		b->capent *= 2;
	}
	gent *e = &b->ent[b->nent];
	memset(e, 0, sizeof *e);
	if (!(e->path = strndup(path, len)))
		return TD_ENOMEM;
	e->parent = parent;
	e->type = (uint8_t)type;
	e->mode = S_IFDIR | 0755;
	e->mtime = b->ent[parent].mtime;
	e->last_shard = UINT32_MAX;
	b->nent++;
	return TD_OK;
}

static const td_pathtab_ops gent_ops = {gent_path, gent_is_dir, gent_count, gent_add, G_DIR};

static int add_entry(td_build *b, const char *path, int type, uint32_t mode, int64_t mtime, uint32_t nsec,
		     uint32_t *out)
{
	if (b->in_file)
		return td_fail(TD_EINVAL, "a file is still open in the builder");
	int err = td_writer_check_path(path), created;
	uint32_t id;
	if (err || (err = td_pathtab_get(&b->pt, &gent_ops, b, path, strlen(path), type, &id, &created)))
		return err;
	gent *e = &b->ent[id];
	if (!created && e->from_base)
		return td_fail(TD_EEXIST, "'%s' is already in the archive", path);
	if (!created && (e->explicit_ || e->type != G_DIR || type != G_DIR))
		return td_fail(TD_EEXIST, "'%s' added twice", path);
	e->explicit_ = 1;
	e->type = (uint8_t)type;
	e->mode = mode;
	e->mtime = mtime;
	e->nsec = nsec;
	*out = id;
	return TD_OK;
}

/* ------------------------------------------------------------ API */

/* Keep the shards of src flagged in keep (NULL: all of them), in order,
 * as the new archive's first shards. */
static int keep_setup(td_build *b, const td_archive *src, const uint8_t *keep)
{
	if (td_archive_version(src) != TD_VERSION_SHARDED || !td_sharded(src))
		return td_fail(TD_EINVAL, "format %u: keeping shards needs a format 5 archive", td_archive_version(src));
	b->src = src;
	td_shard_table(src, &b->src_n);
	b->keep_map = malloc((b->src_n + 1) * sizeof *b->keep_map);
	b->keep_src = malloc((b->src_n + 1) * sizeof *b->keep_src);
	if (!b->keep_map || !b->keep_src)
		return TD_ENOMEM;
	b->base_n = 0;
	for (uint32_t i = 0; i < b->src_n; i++) {
		b->keep_map[i] = UINT32_MAX;
		if (!keep || keep[i]) {
			b->keep_map[i] = b->base_n;
			b->keep_src[b->base_n++] = i;
		}
	}
	return TD_OK;
}

/* Entry e (named path) gets the pieces of src's entry `from` that lie in
 * kept shards; with all, every piece must. *dropped (may be NULL) gets
 * whether some were not kept, and *words (may be NULL) the words of the
 * kept ones then (their shards' counts). */
static int kept_pieces(td_build *b, uint32_t e, td_entry from, int all, const char *path, int *dropped,
		       uint64_t *words)
{
	const td_disk_piece *p;
	uint64_t np, w = 0;
	int err = td_shard_pieces(b->src, from, &p, &np), drop = 0;
	for (uint64_t k = 0; k < np && !err; k++) {
		if (p[k].shard >= b->src_n)
			return td_fail(TD_ECORRUPT, "entry %u: piece in no shard", from);
		uint32_t ns = b->keep_map[p[k].shard];
		if (ns == UINT32_MAX) {
			if (all)
				return td_fail(TD_EINVAL, "'%s': its text is in shard %u, which is not kept", path,
					       p[k].shard);
			drop = 1;
			continue;
		}
		err = pc_push(b, (piece){ e, ns, p[k].local, p[k].start, 0, 0 });
	}
	if (!err && drop && words) {
		/* the words of the kept pieces: each one's count in its shard */
		for (uint64_t k = 0; k < np && !err; k++) {
			td_archive *sub;
			td_stat st;
			if (b->keep_map[p[k].shard] == UINT32_MAX)
				continue;
			if (!(err = td_shard_sub(b->src, p[k].shard, &sub)) && !(err = td_archive_stat(sub, p[k].local, &st)))
				w += st.nwords;
		}
		*words = w;
	}
	if (dropped)
		*dropped = drop;
	return err;
}

/* The base archive's tree, its pieces and the slot index: entry e of the
 * base is entry e here (breadth-first, so parents come first). */
static int load_base(td_build *b, const td_archive *a)
{
	if (td_archive_version(a) != TD_VERSION_SHARDED || !td_sharded(a))
		return td_fail(TD_EINVAL, "format %u: adding needs a format 5 archive", td_archive_version(a));
	int err = keep_setup(b, a, NULL);
	if (err)
		return err;
	uint32_t ne = td_archive_nentries(a), cap = 64;
	while (cap < ne + 64)
		cap *= 2;
	gent *v = realloc(b->ent, cap * sizeof *v);
	if (!v)
		return TD_ENOMEM;
	b->ent = v;
	b->capent = cap;
	while (b->pt.mask < 2 * (uint64_t)ne)
		if (td_pathtab_grow(&b->pt, &gent_ops, b))
			return TD_ENOMEM;
	char *buf = malloc(TD_MAXPATH + 2);
	if (!buf)
		return TD_ENOMEM;
	for (td_entry e = 0; e < ne && !err; e++) {
		td_stat st;
		int len = td_archive_path(a, e, buf, TD_MAXPATH + 2);
		if (len < 0 || (err = td_archive_stat(a, e, &st))) {
			err = err ? err : td_fail(TD_ECORRUPT, "entry %u: no path", e);
			break;
		}
		gent *g = &b->ent[e];
		if (e == 0) {
			free(g->path);
			g->path = NULL;
		}
		memset(g, 0, sizeof *g);
		if (!(g->path = strdup(buf))) {
			err = TD_ENOMEM;
			break;
		}
		b->nent = e + 1;
		g->parent = e ? st.parent : 0;
		g->type = S_ISDIR(st.mode) ? G_DIR : S_ISLNK(st.mode) ? G_LINK : G_FILE;
		g->explicit_ = 1;
		g->from_base = 1;
		g->mode = st.mode;
		g->mtime = st.mtime_sec;
		g->nsec = st.mtime_nsec;
		g->size = S_ISDIR(st.mode) ? 0 : st.size;
		g->base_words = st.nwords;
		g->last_shard = UINT32_MAX;
		if (e && (g->parent >= e || b->ent[g->parent].type != G_DIR)) {
			err = td_fail(TD_ECORRUPT, "entry %u: bad parent", e);
			break;
		}
		if (e)
			*td_pathtab_find(&b->pt, g->path, strlen(g->path), &gent_ops, b) = e + 1;
		err = kept_pieces(b, e, e, 1, buf, NULL, NULL);
	}
	free(buf);
	return err;
}

int td_build_new(const td_build_opts *opts, td_build **out)
{
	*out = NULL;
	td_build_opts o;
	if (opts)
		o = *opts;
	else
		td_build_opts_init(&o);
	if (o.format == 0)
		o.format = TD_VERSION_SHARDED;
	if (o.format < 3 || o.format > TD_VERSION_SHARDED)
		return td_fail(TD_EINVAL, "format %u: expected 3, 4 or 5", o.format);
	/* an archive with postings keeps them in the shards built for it */
	const td_archive *from = o.base ? o.base : o.keep_from;
	if (from && !o.writer.postings) {
		uint64_t pbytes;
		uint32_t pwith, pn;
		td_archive_postings(from, &pbytes, &pwith, &pn);
		o.writer.postings = pwith != 0;
	}
	/* and its analytics tables: the top words, the top n-grams at the same count */
	uint64_t atb, atw, atn;
	if (from && from->sec_vt)
		o.root_vector = 1;
	if (from && td_archive_tables(from, &atb, &atw, &atn) == 1) {
		if (!o.top_ngrams)
			o.top_ngrams = atn;
		if (atw)
			o.top_words = 1;
	}
	td_build *b = calloc(1, sizeof *b);
	if (!b)
		return TD_ENOMEM;
	pthread_mutex_init(&b->mu, NULL);
	pthread_mutex_init(&b->pool_mu, NULL);
	pthread_cond_init(&b->cv, NULL);
	if (o.format != TD_VERSION_SHARDED) {
		td_writer_opts wo = o.writer;
		wo.format = o.format;
		if (!wo.build_time)
			wo.build_time = o.build_time; /* SOURCE_DATE_EPOCH: format 4 as well */
		if (!wo.progress) {
			wo.progress = o.progress;
			wo.progress_ctx = o.progress_ctx;
		}
		/* one grammar: its rounds may use the other cores */
		long c = sysconf(_SC_NPROCESSORS_ONLN);
		b->spare = (o.jobs ? (int)o.jobs : c > 0 ? (int)c : 1) - 1;
		b->cores = (td_grammar_cores){ cores_take, cores_give, b, cores_reclaim };
		wo.grammar_cores = &b->cores;
		b->o = o;
		if (!(b->one = td_writer_new(&wo))) {
			td_build_abort(b);
			return TD_ENOMEM;
		}
		*out = b;
		return TD_OK;
	}
	if (o.shard_size == 0) { /* the base's, else the default */
		const td_archive *from = o.base ? o.base : o.keep_from;
		o.shard_size = from ? td_archive_shard_size(from) : 0;
		if (!o.shard_size)
			o.shard_size = TD_BUILD_SHARD_DEFAULT;
	}
	if (o.memory == 0)
		o.memory = td_build_memory_default();
	if (o.shard_size > o.memory || o.memory < td_build_memory_min(o.shard_size)) {
		uint64_t need = td_build_memory_min(o.shard_size);
		td_build_abort(b);
		return td_fail(TD_EINVAL, "memory bound of %llu MiB is too small: one shard of %llu MiB needs about %llu MiB",
			       (unsigned long long)(o.memory >> 20), (unsigned long long)(o.shard_size >> 20),
			       (unsigned long long)((need + (1 << 20) - 1) >> 20));
	}
	if (o.jobs == 0) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);
		o.jobs = c > 0 ? (unsigned)c : 1;
	}
	if (o.build_time == 0)
		o.build_time = (int64_t)time(NULL);
	td_trace("build start");
	b->o = o;
	b->spare = (int)o.jobs;
	b->cores = (td_grammar_cores){ cores_take, cores_give, b, cores_reclaim };
	int err;
	uint64_t per = td_build_memory_min(o.shard_size) - TD_BUILD_BASE, m = (o.memory - TD_BUILD_BASE) / per;
	b->max_inflight = m > o.jobs + 1 ? o.jobs + 1 : (unsigned)m;
	/* spare text buffers only where memory does not bound the shards in
	 * flight (each holds one until it is tokenized) */
	b->pool_cap = m > o.jobs + 1 ? (o.jobs < 4 ? o.jobs : 4) : 0;
#ifdef TD_WRITER_TRACE
	if (getenv("TD_TRACE_POOL")) /* benchmarks: another number kept */
		b->pool_cap = (unsigned)atoi(getenv("TD_TRACE_POOL")) < 4 ? (unsigned)atoi(getenv("TD_TRACE_POOL")) : 4;
#endif
	const char *dir = o.tmp_dir ? o.tmp_dir : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	b->tmpbase = malloc(strlen(o.tmp_target ? o.tmp_target : dir) + 64);
	b->ent = calloc(64, sizeof *b->ent);
	b->th = calloc(o.jobs, sizeof *b->th);
	if (!b->tmpbase || !b->ent || td_pathtab_init(&b->pt) || !b->th || !(b->ent[0].path = strdup(""))) {
		td_build_abort(b);
		return TD_ENOMEM;
	}
	if (o.tmp_target)
		sprintf(b->tmpbase, "%s.shard%p.", o.tmp_target, (void *)b);
	else
		sprintf(b->tmpbase, "%s/.tadoc-shard.%d.%p.", dir, (int)getpid(), (void *)b);
	b->capent = 64;
	b->ent[0].type = G_DIR;
	b->ent[0].mode = S_IFDIR | 0755;
	b->ent[0].mtime = o.build_time;
	b->ent[0].last_shard = UINT32_MAX;
	b->nent = 1;
	if (o.base && o.keep_from) {
		td_build_abort(b);
		return td_fail(TD_EINVAL, "base and keep_from are exclusive");
	}
	if ((o.base && (err = load_base(b, o.base))) || (o.keep_from && (err = keep_setup(b, o.keep_from, o.keep)))) {
		td_build_abort(b);
		return err;
	}
	for (; b->nth < o.jobs; b->nth++)
		if (pthread_create(&b->th[b->nth], NULL, worker, b)) {
			td_build_abort(b);
			return td_fail(TD_EIO, "cannot start a worker thread");
		}
	*out = b;
	return TD_OK;
}

int td_build_add_dir(td_build *b, const char *path, mode_t mode, int64_t mtime_sec, uint32_t mtime_nsec)
{
	if (b->one)
		return td_writer_add_dir(b->one, path, mode, mtime_sec, mtime_nsec);
	if (path[0] == '\0') {
		b->ent[0].mode = S_IFDIR | (mode & 07777);
		b->ent[0].mtime = mtime_sec;
		b->ent[0].nsec = mtime_nsec;
		return TD_OK;
	}
	uint32_t id;
	return add_entry(b, path, G_DIR, S_IFDIR | (mode & 07777), mtime_sec, mtime_nsec, &id);
}

int td_build_file_begin(td_build *b, const char *path, mode_t mode, int64_t mtime_sec, uint32_t mtime_nsec)
{
	if (b->one)
		return td_writer_file_begin(b->one, path, mode, mtime_sec, mtime_nsec);
	uint32_t id;
	int err = worker_err(b);
	if (err || (err = add_entry(b, path, G_FILE, S_IFREG | (mode & 07777), mtime_sec, mtime_nsec, &id)))
		return err;
	/* a shard that is full takes no more files */
	if (b->cur && b->cur_bytes >= b->o.shard_size)
		shard_close(b);
	b->in_file = 1;
	b->fpart = 0;
	b->fe = id;
	b->fpos = 0;
	b->fopen_in_shard = 0;
	b->over = 0;
	return TD_OK;
}

/* Open the current file's next piece in the current shard. */
static int fpiece_begin(td_build *b)
{
	if (b->fpos == 0 && !b->fpart)
		b->ent[b->fe].first_pc = b->npc;
	int err = piece_open(b, b->fe, b->fpos);
	if (!err)
		err = td_writer_file_begin(b->cur->w, shard_path(b, b->fe), 0644, b->o.build_time, 0);
	if (err)
		return err;
	b->ent[b->fe].last_shard = b->cur->idx;
	b->fopen_in_shard = 1;
	b->over = 0;
	return TD_OK;
}

static int fpiece_feed(td_build *b, const uint8_t *p, size_t n)
{
	int err = td_writer_file_data(b->cur->w, p, n);
	b->cur_bytes += n;
	b->fpos += n;
	return err;
}

int td_build_file_data(td_build *b, const void *data, size_t len)
{
	if (b->one)
		return td_writer_file_data(b->one, data, len);
	if (!b->in_file)
		return td_fail(TD_EINVAL, "no file open in the builder");
	const uint8_t *p = data;
	int err = TD_OK;
	while (len && !err) {
		if (!b->fopen_in_shard && (err = fpiece_begin(b)))
			break;
		uint64_t room = b->o.shard_size > b->cur_bytes ? b->o.shard_size - b->cur_bytes : 0;
		if (len <= room) {
			err = fpiece_feed(b, p, len);
			break;
		}
		/* the shard fills inside this chunk: cut after the first cut
		 * byte from there, or CUT_SLACK past the size */
		uint64_t lim = room + (CUT_SLACK - b->over);
		size_t i = (size_t)room, end = lim < len ? (size_t)lim : len;
		while (i < end && !td_cut_byte(p[i]))
			i++;
		if (i == end && end == len) { /* no cut in this chunk yet */
			b->over += len - room;
			err = fpiece_feed(b, p, len);
			break;
		}
		size_t take = i < end ? i + 1 : end;
		if ((err = fpiece_feed(b, p, take)) || (err = td_writer_file_end(b->cur->w)))
			break;
		b->fopen_in_shard = 0;
		shard_close(b);
		p += take;
		len -= take;
	}
	if (err)
		b->in_file = 0;
	return err;
}

int td_build_file_room(td_build *b, size_t len, void **p, size_t *room)
{
	*p = NULL;
	*room = 0;
	if (b->one)
		return TD_OK;
	if (!b->in_file)
		return td_fail(TD_EINVAL, "no file open in the builder");
	int err;
	if (!b->fopen_in_shard && (err = fpiece_begin(b))) {
		b->in_file = 0;
		return err;
	}
	/* up to the shard's size: past it td_build_file_data finds the cut */
	uint64_t left = b->o.shard_size > b->cur_bytes ? b->o.shard_size - b->cur_bytes : 0;
	if (left < len)
		len = (size_t)left;
	if (len && (*p = td_writer_file_room(b->cur->w, len)))
		*room = len;
	return TD_OK;
}

int td_build_file_wrote(td_build *b, size_t len)
{
	if (b->one || !b->in_file || !b->fopen_in_shard)
		return td_fail(TD_EINVAL, "no room given in the builder");
	int err = td_writer_file_wrote(b->cur->w, len);
	if (err) {
		b->in_file = 0;
		return err;
	}
	b->cur_bytes += len;
	b->fpos += len;
	return TD_OK;
}

int td_build_file_end(td_build *b)
{
	if (b->one)
		return td_writer_file_end(b->one);
	if (!b->in_file)
		return td_fail(TD_EINVAL, "no file open in the builder");
	int err = TD_OK;
	/* an empty file (or one whose last cut ended it) still has a piece */
	if (!b->fopen_in_shard && b->fpos == 0)
		err = fpiece_begin(b);
	if (!err && b->fopen_in_shard)
		err = td_writer_file_end(b->cur->w);
	b->fopen_in_shard = 0;
	b->in_file = 0;
	if (!b->fpart)
		b->ent[b->fe].size = b->fpos;
	b->fpart = 0;
	return err;
}

int td_build_add_file(td_build *b, const char *path, mode_t mode, int64_t mtime_sec, uint32_t mtime_nsec,
		      const void *data, size_t len)
{
	if (b->one)
		return td_writer_add_file(b->one, path, mode, mtime_sec, mtime_nsec, data, len);
	int err = td_build_file_begin(b, path, mode, mtime_sec, mtime_nsec);
	if (!err)
		err = td_build_file_data(b, data, len);
	if (!err)
		err = td_build_file_end(b);
	return err;
}

int td_build_add_symlink(td_build *b, const char *path, int64_t mtime_sec, uint32_t mtime_nsec, const char *target)
{
	if (b->one)
		return td_writer_add_symlink(b->one, path, mtime_sec, mtime_nsec, target);
	uint32_t id;
	int err = worker_err(b);
	if (err || (err = add_entry(b, path, G_LINK, S_IFLNK | 0777, mtime_sec, mtime_nsec, &id)))
		return err;
	if (b->cur && b->cur_bytes >= b->o.shard_size)
		shard_close(b);
	if ((err = piece_open(b, id, 0)) ||
	    (err = td_writer_add_symlink(b->cur->w, shard_path(b, id), b->o.build_time, 0, target)))
		return err;
	b->ent[id].size = strlen(target);
	b->cur_bytes += b->ent[id].size;
	return TD_OK;
}

int td_build_add_kept(td_build *b, const char *path, mode_t mode, int64_t mtime_sec, uint32_t mtime_nsec, td_entry from)
{
	if (b->one || !b->src || b->o.base)
		return td_fail(TD_EINVAL, "'%s': the builder keeps no shards", path);
	td_stat st;
	int err = worker_err(b);
	if (err || (err = td_archive_stat(b->src, from, &st)))
		return err;
	if ((mode & S_IFMT) != (st.mode & S_IFMT))
		return td_fail(TD_EINVAL, "'%s': not of the type of entry %u", path, from);
	int type = S_ISDIR(st.mode) ? G_DIR : S_ISLNK(st.mode) ? G_LINK : G_FILE;
	uint32_t id = 0;
	mode_t m = type == G_LINK ? S_IFLNK | 0777 : (st.mode & S_IFMT) | (mode & 07777);
	if (path[0] == '\0') {
		if (type != G_DIR || b->ent[0].explicit_)
			return td_fail(TD_EINVAL, "the root kept twice, or from a file");
		b->ent[0].explicit_ = 1;
		b->ent[0].mode = m;
		b->ent[0].mtime = mtime_sec;
		b->ent[0].nsec = mtime_nsec;
	} else if ((err = add_entry(b, path, type, m, mtime_sec, mtime_nsec, &id))) {
		return err;
	}
	int dropped = 0;
	uint64_t words = st.nwords;
	if ((err = kept_pieces(b, id, from, type == G_LINK, path, &dropped, &words)))
		return err;
	if (type != G_DIR) {
		b->ent[id].size = st.size;
		b->ent[id].base_words = words;
	}
	return TD_OK;
}

int td_build_file_part(td_build *b, const char *path, uint64_t start)
{
	if (b->one || b->in_file)
		return td_fail(TD_EINVAL, "'%s': no part of a kept file can be added here", path);
	int err = worker_err(b);
	if (err)
		return err;
	uint32_t *slot = path[0] ? td_pathtab_find(&b->pt, path, strlen(path), &gent_ops, b) : NULL;
	if (!slot || !*slot || b->ent[*slot - 1].type != G_FILE || b->ent[*slot - 1].from_base ||
	    start >= b->ent[*slot - 1].size)
		return td_fail(TD_EINVAL, "'%s': no kept file with a byte %llu", path, (unsigned long long)start);
	uint32_t id = *slot - 1;
	/* a file's pieces are in distinct shards; a full shard takes no more */
	if (b->cur && (b->cur_bytes >= b->o.shard_size || b->ent[id].last_shard == b->cur->idx))
		shard_close(b);
	b->in_file = 1;
	b->fpart = 1;
	b->fe = id;
	b->fpos = start;
	b->fopen_in_shard = 0;
	b->over = 0;
	return TD_OK;
}

/* The text of piece i (of file t) into buf (cap bytes), *len its size:
 * from the filling shard's writer, or from a built shard's file once its
 * worker is done. */
static int piece_text(td_build *b, uint64_t i, uint8_t *buf, uint64_t cap, uint64_t *len)
{
	const piece *p = &b->pc[i];
	job *j = b->jobs[p->shard - b->base_n];
	const char *sp = shard_path(b, p->e);
	if (j == b->cur)
		return td_writer_file_text(j->w, sp, buf, cap, len);
	pthread_mutex_lock(&b->mu);
	while (!j->done)
		wait_report(b);
	int err = j->err;
	pthread_mutex_unlock(&b->mu);
	if (err)
		return worker_err(b);
	td_archive *a;
	td_entry e;
	td_stat st;
	size_t got = 0;
	if ((err = td_archive_open(j->tmp, 0, &a)))
		return err;
	if (!(err = td_archive_lookup_path(a, sp, &e)) && !(err = td_archive_stat(a, e, &st))) {
		if (st.size > cap)
			err = td_fail(TD_ECORRUPT, "shard %u: a piece larger than its file", j->idx);
		else if (!(err = td_extract(a, e, 0, buf, (size_t)st.size, &got)) && got != st.size)
			err = td_fail(TD_ECORRUPT, "shard %u: a piece shorter than it says", j->idx);
	}
	td_archive_close(a);
	*len = got;
	return err;
}

int td_build_add_copy(td_build *b, const char *path, mode_t mode, int64_t mtime_sec, uint32_t mtime_nsec,
		      const char *target)
{
	if (b->one)
		return td_writer_add_copy(b->one, path, mode, mtime_sec, mtime_nsec, target);
	if (b->in_file)
		return td_fail(TD_EINVAL, "a file is still open in the builder");
	size_t tl = strlen(target);
	uint32_t *slot = tl ? td_pathtab_find(&b->pt, target, tl, &gent_ops, b) : NULL;
	if (!slot || !*slot || b->ent[*slot - 1].type != G_FILE || !b->ent[*slot - 1].explicit_ ||
	    b->ent[*slot - 1].from_base || b->ent[*slot - 1].first_pc >= b->npc)
		return td_fail(TD_ENOENT, "'%s': no regular file of that name was added before", target);
	uint32_t t = *slot - 1;
	uint64_t size = b->ent[t].size, got = 0;
	/* the whole file at once (a hard link's target is held, never the
	 * corpus): its pieces, in order, from first_pc (only directories'
	 * pieces come between them) */
	uint8_t *buf = malloc(size ? size : 1);
	if (!buf)
		return TD_ENOMEM;
	int err = TD_OK;
	for (uint64_t i = b->ent[t].first_pc; i < b->npc && got < size && !err; i++) {
		uint64_t n = 0;
		if (b->pc[i].e != t)
			continue;
		err = piece_text(b, i, buf + got, size - got, &n);
		got += n;
	}
	if (!err && got != size)
		err = td_fail(TD_ECORRUPT, "'%s': its pieces hold %llu of its %llu bytes", target,
			      (unsigned long long)got, (unsigned long long)size);
	if (!err)
		err = td_build_add_file(b, path, mode, mtime_sec, mtime_nsec, buf, (size_t)size);
	free(buf);
	return err;
}

static void stop_workers(td_build *b)
{
	pthread_mutex_lock(&b->mu);
	b->quit = 1;
	pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mu);
	for (unsigned i = 0; i < b->nth; i++)
		pthread_join(b->th[i], NULL);
	b->nth = 0;
}

void td_build_abort(td_build *b)
{
	if (!b)
		return;
	b->cur = NULL; /* every job, queued or not, is freed below */
	pthread_mutex_lock(&b->mu);
	b->qhead = b->qtail = NULL; /* workers take no more */
	pthread_mutex_unlock(&b->mu);
	stop_workers(b);
	td_writer_abort(b->one);
	for (uint32_t i = 0; i < b->njobs; i++)
		job_free(b->jobs[i]);
	free(b->jobs);
	while (b->npool)
		td_big_free(b->pool[--b->npool], b->o.shard_size + CUT_SLACK + (UINT64_C(1) << 20));
	for (uint32_t i = 0; i < b->nent; i++)
		free(b->ent[i].path);
	free(b->ent);
	td_pathtab_free(&b->pt);
	free(b->pc);
	free(b->th);
	free(b->tmpbase);
	free(b->keep_src);
	free(b->keep_map);
	free(b->pre_bfs);
	free(b->pre_nchild);
	td_buf_free(&b->pre_names);
	if (b->copen) { /* not written: the temporary goes */
		close(b->cfd);
		unlink(b->ctmp);
	}
	free(b->ctmp);
	free(b->ctab);
	pthread_mutex_destroy(&b->mu);
	pthread_mutex_destroy(&b->pool_mu);
	pthread_cond_destroy(&b->cv);
	free(b);
}

/* ------------------------------------------------------------ the container */

typedef struct sec {
	unsigned id;
	unsigned flags;
	td_buf b;
} sec;

/* Append file `path` to fd at *off (8-byte aligned after it). */
static int append_file(int fd, const char *path, uint64_t size, uint64_t *off)
{
	int in = open(path, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -1;
	uint64_t left = size;
	while (left) {
		ssize_t k = copy_file_range(in, NULL, fd, NULL, left, 0);
		if (k < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
			static __thread uint8_t buf[1 << 16];
			k = read(in, buf, sizeof buf);
			if (k > 0 && td_write_all(fd, buf, (size_t)k))
				k = -1;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			close(in);
			return -1;
		}
		left -= (uint64_t)k;
	}
	close(in);
	*off += size;
	static const uint8_t zero[8];
	size_t pad = (size_t)((8 - (*off & 7)) & 7);
	if (pad && td_write_all(fd, zero, pad))
		return -1;
	*off += pad;
	return 0;
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

static _Thread_local const gent *g_ents;

static int cmp_name(const void *x, const void *y)
{
	return strcmp(base_name(g_ents[*(const uint32_t *)x].path), base_name(g_ents[*(const uint32_t *)y].path));
}

static int put_u64s(td_buf *out, const uint64_t *v, uint64_t n)
{
	return td_pack_encode(v, n, out);
}

/* The tree in breadth-first order, children by name: *bfs (entry at
 * each position) and *nchild (children of each entry), both the caller's
 * to free. TD_OK or TD_ENOMEM. */
static int tree_bfs(const td_build *b, uint32_t **bfs_out, uint32_t **nchild_out)
{
	uint32_t ne = b->nent;
	uint32_t *nchild = calloc(ne, sizeof *nchild), *bfs = malloc(ne * sizeof *bfs),
		 *kid = malloc(ne * sizeof *kid), *kstart = calloc(ne + 1, sizeof *kstart);
	if (!nchild || !bfs || !kid || !kstart) {
		free(nchild);
		free(bfs);
		free(kid);
		free(kstart);
		return TD_ENOMEM;
	}
	for (uint32_t i = 1; i < ne; i++)
		nchild[b->ent[i].parent]++;
	for (uint32_t i = 0; i < ne; i++)
		kstart[i + 1] = kstart[i] + nchild[i];
	memset(nchild, 0, ne * sizeof *nchild);
	for (uint32_t i = 1; i < ne; i++) {
		uint32_t p = b->ent[i].parent;
		kid[kstart[p] + nchild[p]++] = i;
	}
	g_ents = b->ent;
	uint32_t head = 0, tail = 0;
	bfs[tail++] = 0;
	while (head < tail) {
		uint32_t e = bfs[head++];
		if (nchild[e] > 1)
			qsort(kid + kstart[e], nchild[e], sizeof *kid, cmp_name);
		for (uint32_t k = 0; k < nchild[e]; k++)
			bfs[tail++] = kid[kstart[e] + k];
	}
	free(kid);
	free(kstart);
	*bfs_out = bfs;
	*nchild_out = nchild;
	return TD_OK;
}

/* The NAMES section (every entry's base name in tree order, stored
 * plain: a query's tree checks and paths read the names of the
 * directories they reach straight from the mapping, where a zstd frame
 * had to be decoded up to the last of them) into *out, for the tree
 * order bfs. */
static int names_section(const td_build *b, const uint32_t *bfs, td_buf *out)
{
	int err = TD_OK;
	for (uint32_t k = 0; k < b->nent && !err; k++) {
		const char *nm = k ? base_name(b->ent[bfs[k]].path) : "";
		err = td_buf_put(out, nm, strlen(nm));
	}
	return err;
}

/* The tree order and the NAMES section, made on a thread of their own
 * while the shards build: the tree is whole once the input has ended. */
static void *tree_early(void *p)
{
	td_build *b = p;
	if (tree_bfs(b, &b->pre_bfs, &b->pre_nchild) == TD_OK &&
	    names_section(b, b->pre_bfs, &b->pre_names) != TD_OK) {
		td_buf_free(&b->pre_names);
		free(b->pre_bfs);
		free(b->pre_nchild);
		b->pre_bfs = b->pre_nchild = NULL; /* tree_sections makes them */
	}
	return NULL;
}

/* The container's sections: the tree in breadth-first order, empty
 * grammar sections (NAMES compressed), the shard table and the piece
 * map. */
static int tree_sections(td_build *b, sec *s, const td_disk_shard *tab)
{
	uint32_t ne = b->nent;
	int err = TD_OK, early = b->pre_bfs != NULL;
	uint32_t *nchild = b->pre_nchild, *bfs = b->pre_bfs, *newidx = malloc(ne * sizeof *newidx);
	b->pre_bfs = b->pre_nchild = NULL;
	uint64_t *col = malloc((ne + 2) * sizeof *col), *pstart = calloc(ne + 1, sizeof *pstart);
	piece *sorted = malloc((b->npc + 1) * sizeof *sorted);
	if (!early && tree_bfs(b, &bfs, &nchild))
		bfs = nchild = NULL;
	if (!nchild || !bfs || !newidx || !col || !pstart || !sorted) {
		err = TD_ENOMEM;
		goto out;
	}
	for (uint32_t k = 0; k < ne; k++)
		newidx[bfs[k]] = k;
	/* per-entry words and the pieces, grouped by entry in tree order */
	uint64_t total_bytes = 0, total_words = 0;
	uint64_t *words = calloc(ne, sizeof *words);
	if (!words) {
		err = TD_ENOMEM;
		goto out;
	}
	for (uint32_t e = 0; e < ne; e++)
		words[e] = b->ent[e].base_words;
	for (uint64_t i = 0; i < b->npc; i++) {
		pstart[newidx[b->pc[i].e] + 1]++;
		if (b->ent[b->pc[i].e].type != G_DIR)
			words[b->pc[i].e] += b->pc[i].nwords;
	}
	for (uint32_t k = 0; k < ne; k++)
		pstart[k + 1] += pstart[k];
	{
		uint64_t *fill = calloc(ne + 1, sizeof *fill);
		if (!fill) {
			free(words);
			err = TD_ENOMEM;
			goto out;
		}
		for (uint64_t i = 0; i < b->npc; i++) { /* creation order: ascending shards, file pieces in order */
			uint32_t k = newidx[b->pc[i].e];
			sorted[pstart[k] + fill[k]++] = b->pc[i];
		}
		free(fill);
		/* a compacted file's kept pieces came first, its rebuilt parts
		 * later: a file's pieces go in the order of their bytes */
		for (uint32_t k = 0; k < ne; k++)
			if (b->ent[bfs[k]].type != G_DIR)
				for (uint64_t i = pstart[k] + 1; i < pstart[k + 1]; i++)
					for (uint64_t j = i; j > pstart[k] && sorted[j - 1].start > sorted[j].start; j--) {
						piece t = sorted[j];
						sorted[j] = sorted[j - 1];
						sorted[j - 1] = t;
					}
	}
	for (uint32_t e = 0; e < ne; e++)
		if (b->ent[e].type == G_FILE) {
			total_bytes += b->ent[e].size;
			total_words += words[e];
		}
	/* names */
	uint64_t at = 0;
	for (uint32_t k = 0; k < ne; k++) {
		col[k] = at;
		at += k ? strlen(base_name(b->ent[bfs[k]].path)) : 0;
	}
	col[ne] = at;
	if (early) {
		s[TD_SEC_NAMES].b = b->pre_names;
		memset(&b->pre_names, 0, sizeof b->pre_names);
	} else if ((err = names_section(b, bfs, &s[TD_SEC_NAMES].b))) {
		goto words_out;
	}
	if ((err = put_u64s(&s[TD_SEC_E_NAMEOFF].b, col, ne + 1)))
		goto words_out;
#define COLUMN(id, expr)                                              \
	do {                                                          \
		for (uint32_t k = 0; k < ne; k++) {                   \
			const gent *E = &b->ent[bfs[k]];              \
			(void)E;                                      \
			col[k] = (expr);                              \
		}                                                     \
		if ((err = put_u64s(&s[id].b, col, ne)))              \
			goto words_out;                               \
	} while (0)
	COLUMN(TD_SEC_E_PARENT, k ? newidx[E->parent] : 0);
	COLUMN(TD_SEC_E_MODE, E->mode);
	COLUMN(TD_SEC_E_MTIME, (uint64_t)(E->mtime + TD_MTIME_BIAS));
	COLUMN(TD_SEC_E_MTIMENS, E->nsec);
	COLUMN(TD_SEC_E_SIZE, E->type == G_DIR ? 0 : E->size);
	COLUMN(TD_SEC_E_NWORDS, E->type == G_DIR ? 0 : words[bfs[k]]);
#undef COLUMN
	at = 1;
	for (uint32_t k = 0; k < ne; k++) {
		col[k] = at;
		at += b->ent[bfs[k]].type == G_DIR ? nchild[bfs[k]] : 0;
	}
	col[ne] = at;
	if ((err = put_u64s(&s[TD_SEC_E_CHILD].b, col, ne + 1)))
		goto words_out;
	memset(col, 0, (ne + 2) * sizeof *col);
	if ((err = put_u64s(&s[TD_SEC_E_ROOT].b, col, ne + 1)) || (err = put_u64s(&s[TD_SEC_E_GSTART].b, col, ne + 1)) ||
	    (err = put_u64s(&s[TD_SEC_WORD_FREQ].b, col, 0)) || (err = put_u64s(&s[TD_SEC_OTHER_OFF].b, col, 1)) ||
	    (err = put_u64s(&s[TD_SEC_RULE_LEN].b, col, 0)) || (err = put_u64s(&s[TD_SEC_ROOT_SAMPLES].b, col, 0)) ||
	    (err = put_u64s(&s[TD_SEC_RULE_SAMPLES].b, col, 0)) ||
	    (err = td_scode_encode(NULL, 0, 1, 0, 0, TD_RULE_TILE_SHIFT, &s[TD_SEC_RULE_SYMS].b)) ||
	    (err = td_scode_encode(NULL, 0, 1, 0, 0, TD_ROOT_TILE_SHIFT, &s[TD_SEC_ROOT_SYMS].b)))
		goto words_out;
	td_disk_meta m;
	memset(&m, 0, sizeof m);
	m.nentries = ne;
	m.sample_shift = 5;
	m.total_bytes = total_bytes;
	m.total_words = total_words;
	m.build_time = (uint64_t)b->o.build_time;
	m.shard_size = b->o.shard_size;
	if ((err = td_buf_put(&s[TD_SEC_META].b, &m, sizeof m)))
		goto words_out;
	/* version 5 */
	if ((err = td_buf_put(&s[TD_SEC_MAX + 0].b, tab, (b->base_n + b->njobs) * sizeof *tab)) ||
	    (err = put_u64s(&s[TD_SEC_MAX + 1].b, pstart, ne + 1)))
		goto words_out;
	{
		uint64_t *v = malloc((b->npc + 1) * sizeof *v);
		if (!v) {
			err = TD_ENOMEM;
			goto words_out;
		}
		for (unsigned c = 0; c < 3 && !err; c++) {
			for (uint64_t i = 0; i < b->npc; i++)
				v[i] = c == 0 ? sorted[i].shard : c == 1 ? sorted[i].local : sorted[i].start;
			err = put_u64s(&s[TD_SEC_MAX + 2 + c].b, v, b->npc);
		}
		free(v);
	}
words_out:
	free(words);
out:
	free(nchild);
	free(bfs);
	free(newidx);
	free(col);
	free(pstart);
	free(sorted);
	return err;
}

/* Open the container's temporary file beside out_path: room for the
 * header, then the kept shards byte for byte. */
static int container_open(td_build *b, const char *out_path)
{
	b->ctab = calloc(b->base_n + b->njobs + 1, sizeof *b->ctab);
	b->ctmp = malloc(strlen(out_path) + 32);
	if (!b->ctab || !b->ctmp)
		return TD_ENOMEM;
	sprintf(b->ctmp, "%s.tmp.%d", out_path, (int)getpid());
	if ((b->cfd = open(b->ctmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
		return td_fail(TD_EIO, "%s: %s", out_path, strerror(errno));
	b->copen = 1;
	td_disk_header h;
	memset(&h, 0, sizeof h);
	if (td_write_all(b->cfd, &h, sizeof h))
		return td_fail(TD_EIO, "%s: %s", out_path, strerror(errno));
	uint64_t off = sizeof h;
	if (b->base_n) { /* the base's shards, byte for byte */
		uint32_t n;
		const td_disk_shard *bt = td_shard_table(b->src, &n);
		static const uint8_t zero[8];
		for (uint32_t i = 0; i < b->base_n; i++) {
			const td_disk_shard *o = &bt[b->keep_src[i]];
			b->ctab[i] = *o;
			b->ctab[i].off = off;
			size_t pad = (size_t)((8 - (o->size & 7)) & 7);
			if (td_write_all(b->cfd, b->src->map + o->off, o->size) || td_write_all(b->cfd, zero, pad))
				return td_fail(TD_EIO, "%s: %s", out_path, strerror(errno));
			off += o->size + pad;
		}
	}
	b->coff = off;
	return TD_OK;
}

/* Append the next new shard's image (built) to the container and start
 * writing it back, so the final fsync has only the last ones left. */
static int container_append(td_build *b, const char *out_path)
{
	const job *j = b->jobs[b->cnext];
	uint64_t at = b->coff;
	b->ctab[b->base_n + b->cnext] = (td_disk_shard){ at, j->size, j->sum, j->nfiles, j->input_bytes, 0 };
	if (append_file(b->cfd, j->tmp, j->size, &b->coff))
		return td_fail(TD_EIO, "%s: %s", out_path, strerror(errno));
	unlink(j->tmp);
	sync_file_range(b->cfd, (off64_t)at, (off64_t)(b->coff - at), SYNC_FILE_RANGE_WRITE);
	b->cnext++;
	return TD_OK;
}

/* Finish the container (container_open, then container_append of the
 * shards not appended yet): the tree and piece sections, the section
 * table, the header; fsync, rename, fsync of the directory. */
static int write_container(td_build *b, const char *out_path)
{
	enum { NSEC = TD_SEC_MAX + TD_SEC5_N };
	sec s[NSEC];
	memset(s, 0, sizeof s);
	for (unsigned id = 1; id < TD_SEC_MAX; id++)
		s[id].id = id;
	s[TD_SEC_MAX + 0].id = TD_SEC5_SHARDS;
	s[TD_SEC_MAX + 1].id = TD_SEC5_PIECE_OFF;
	s[TD_SEC_MAX + 2].id = TD_SEC5_P_SHARD;
	s[TD_SEC_MAX + 3].id = TD_SEC5_P_LOCAL;
	s[TD_SEC_MAX + 4].id = TD_SEC5_P_START;
	char *dcopy = strdup(out_path);
	int err = TD_OK;
	if (!dcopy) {
		err = TD_ENOMEM;
		goto out;
	}
	if (!b->copen && (err = container_open(b, out_path)))
		goto out;
	while (b->cnext < b->njobs)
		if ((err = container_append(b, out_path)))
			goto out;
	int fd = b->cfd;
	uint64_t off = b->coff;
	td_disk_header h;
	memset(&h, 0, sizeof h);
	if ((err = tree_sections(b, s, b->ctab)))
		goto out;
	td_disk_section dtab[NSEC];
	uint32_t ns = 0;
	for (unsigned i = 1; i < NSEC; i++) {
		if ((err = td_buf_align(&s[i].b, 8)))
			goto out;
		dtab[ns++] = (td_disk_section){ s[i].id, s[i].flags, off, s[i].b.len, XXH3_64bits(s[i].b.p, s[i].b.len) };
		if (td_write_all(fd, s[i].b.p, s[i].b.len))
			goto ioerr;
		off += s[i].b.len;
	}
	memcpy(h.magic, TD_MAGIC, TD_MAGIC_LEN);
	h.version = TD_VERSION_SHARDED;
	h.header_size = sizeof h;
	h.nsections = ns;
	h.sectab_off = off;
	h.sectab_sum = XXH3_64bits(dtab, ns * sizeof *dtab);
	h.file_size = off + ns * sizeof *dtab;
	h.header_sum = XXH3_64bits(&h, offsetof(td_disk_header, header_sum));
	if (td_write_all(fd, dtab, ns * sizeof *dtab) || pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || fsync(fd))
		goto ioerr;
	b->copen = 0;
	if (close(fd)) {
		unlink(b->ctmp);
		err = td_fail(TD_EIO, "%s: %s", out_path, strerror(errno));
		goto out;
	}
	if ((b->o.fuzzy_index || (b->o.base && b->o.base->sec_fz) || (b->o.keep_from && b->o.keep_from->sec_fz)) &&
	    (err = td_fzix_append(b->ctmp, out_path))) {
		unlink(b->ctmp);
		goto out;
	}
	/* the tables reopen the finished archive: every shard's dictionary and a
	 * merge (a serial tail), only when asked for */
	if ((err = td_atab_append(b->ctmp, out_path, b->o.top_words || b->o.top_ngrams ? TD_ATAB_WORDS_K : 0,
				  b->o.top_ngrams))) {
		unlink(b->ctmp);
		goto out;
	}
	if (b->o.root_vector && (err = td_vtab_append(b->ctmp, out_path))) {
		unlink(b->ctmp);
		goto out;
	}
	if (rename(b->ctmp, out_path)) {
		unlink(b->ctmp);
		err = td_fail(TD_EIO, "%s: %s", out_path, strerror(errno));
		goto out;
	}
	int dfd = open(dirname(dcopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	goto out;
ioerr:
	err = td_fail(TD_EIO, "%s: %s", out_path, strerror(errno));
out: /* on an error td_build_abort removes the temporary */
	for (unsigned i = 0; i < NSEC; i++)
		td_buf_free(&s[i].b);
	free(dcopy);
	return err;
}

int td_build_finish(td_build *b, const char *out_path)
{
	if (b->one) {
		/* the writer's grammar borrows the idle workers (b->cores):
		 * finish it before the builder and its workers go */
		td_writer *w = b->one;
		b->one = NULL;
		int err = td_writer_finish(w, out_path);
		td_build_abort(b);
		return err;
	}
	int err = TD_OK;
	if (b->in_file)
		err = td_fail(TD_EINVAL, "a file is still open in the builder");
	if (!err)
		shard_close(b);
	td_trace("input read");
	pthread_t tt;
	int early = !err && pthread_create(&tt, NULL, tree_early, b) == 0;
	/* wait for every shard, reporting progress meanwhile, and put each
	 * one built into the container as soon as those before it are */
	if (!err)
		err = container_open(b, out_path);
	pthread_mutex_lock(&b->mu);
	for (;;) {
		while (!err && b->cnext < b->njobs && b->jobs[b->cnext]->done && !b->jobs[b->cnext]->err) {
			pthread_mutex_unlock(&b->mu);
			err = container_append(b, out_path);
			pthread_mutex_lock(&b->mu);
		}
		if (err || b->inflight == 0)
			break;
		wait_report(b);
	}
	pthread_mutex_unlock(&b->mu);
	stop_workers(b);
	if (early)
		pthread_join(tt, NULL);
	td_trace("shards built");
	if (!err)
		err = worker_err(b);
	if (!err) {
		/* where each piece landed */
		for (uint32_t i = 0; i < b->njobs; i++) {
			const job *j = b->jobs[i];
			for (uint64_t k = 0; k < j->npaths; k++) {
				b->pc[j->pidx[k]].local = j->local[k];
				b->pc[j->pidx[k]].nwords = j->nwords[k];
			}
		}
		err = write_container(b, out_path);
	}
	td_trace("container written");
	td_build_abort(b);
	return err;
}
