/* td_gpu_multi: a version 5 archive on the GPUs: shards resident one by one over the devices, batches split by shard and merged in request order. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "td_err.h"
#include "td_format.h"
#include "td_gpu.h"
#include "td_gpu_int.h"

#define TD_MIB (UINT64_C(1) << 20)
#define TD_UNIT_WS_MIN (64 * TD_MIB)    /* batch buffers of a shard at least */
#define TD_UNIT_WS_MAX (1536 * TD_MIB)  /* ... and at most (3 extract rounds) */
#define TD_DEV_THREADS 8u               /* host threads driving one device's shards at most
                                           (one a shard: their kernels overlap) */
#define TD_DEV_THREADS_MAX 32u          /* ... under $TD_GPU_DEV_THREADS */

static unsigned td_dev_threads(void);

/* One shard: its archive and, when resident, its handles: the first one
 * placed, and a copy on every other device with room to spare. */
typedef struct td_unit {
	const td_archive *a;
	td_gpu *g;                /* NULL: served by the CPU engine */
	int slot;                 /* g's device slot, or -1 (CPU) */
	uint64_t bytes;           /* image size, for the placement */
	td_gpu **on;              /* [slot]: its handle on that device, or NULL */
	unsigned ncopies;         /* handles in on[] (g included) */
	double cost[3];           /* seconds a request of each kind, measured (0: not yet) */
} td_unit;

typedef struct td_batch td_batch;
static void td_batch_free(td_batch *b, uint32_t units);

struct td_gmulti {
	const td_archive *a;
	td_gpu_opts o;
	uint32_t n;
	td_unit *u;
	unsigned ndev;
	int dev[64];
	uint32_t nres;
	unsigned used;            /* devices holding a shard or a copy */
	uint64_t used_mask;       /* which (bit = slot) */
	uint32_t ncopies;         /* copies of shards beside the first handles */
	td_gpu **on;              /* the units' on[] arrays, n x ndev */
	char name[256];
	pthread_mutex_t lock;     /* one batch at a time */
	uint64_t full_mask;       /* device slots holding every shard (bit = slot) */
	/* each kind's scratch, kept between batches: [0] the whole batch's,
	 * [1 + i] the i-th device's share of requests (td_gmulti_batch) */
	td_batch *bt[3][65];
	unsigned ntrace[3];       /* $TD_GPU_TRACE: each kind's batches so far */
	/* $TD_GPU_PHASES: each kind's seconds summed over its batches (the
	 * whole call, split, run, merge, CPU engine's share), and when each
	 * device's shards (slot + 1; 0: the CPU's) were done, from the run's start */
	struct td_mphase {
		double wall, split, run, merge, rest, done[65], begun[65];
		uint64_t batches, reqs, parts, nrest;
	} ph[3];
};

/* Placement order: largest shard first, then by number. */
typedef struct td_order {
	uint64_t bytes;
	uint32_t i;
} td_order;

static int td_cmp_order(const void *x, const void *y)
{
	const td_order *a = x, *b = y;
	if (a->bytes != b->bytes)
		return a->bytes > b->bytes ? -1 : 1;
	return (a->i > b->i) - (a->i < b->i);
}

/* Open unit u's handle on device slot d within left[d] (a quarter of it
 * over `share` shards for its batch buffers), taking what it uses from
 * left[d]: *g, or NULL when it is not resident there. */
static int td_unit_open(td_gmulti *m, td_unit *u, unsigned d, uint64_t *left, uint32_t share, td_gpu **g)
{
	*g = NULL;
	uint64_t ws = left[d] / (4 * (uint64_t)(share ? share : 1));
	ws = ws < TD_UNIT_WS_MIN ? TD_UNIT_WS_MIN : ws > TD_UNIT_WS_MAX ? TD_UNIT_WS_MAX : ws;
	td_gpu_opts so = m->o;
	so.device = m->dev[d];
	so.devices = 0;
	if (!so.cpu_threads) {
		/* a shard's copy-out threads: its share of the cores, as
		 * the shards of a batch run at once (more threads than
		 * cores, all waiting on their devices, slow them all) */
		long cores = sysconf(_SC_NPROCESSORS_ONLN);
		uint32_t at_once = m->n < m->ndev * td_dev_threads() ? m->n : m->ndev * td_dev_threads();
		long sh = cores / (long)(at_once ? at_once : 1);
		so.cpu_threads = sh > 1 ? (unsigned)sh : 1;
	}
	uint64_t used = 0;
	td_gpu *h = NULL;
	int r = td_gpu_open_dev(u->a, &so, left[d], ws, &h, &used);
	if (r)
		return r;
	if (!td_gpu_resident(h)) {
		td_gpu_close(h);
		return TD_OK;
	}
	left[d] -= used < left[d] ? used : left[d];
	if (!(m->used_mask >> d & 1)) {
		m->used_mask |= UINT64_C(1) << d;
		m->used++;
	}
	u->on[d] = h;
	u->ncopies++;
	*g = h;
	return TD_OK;
}

int td_gmulti_open(const td_archive *a, const td_gpu_opts *o, const int *devs, unsigned ndev, td_gmulti **out)
{
	*out = NULL;
	td_gmulti *m = calloc(1, sizeof *m);
	if (!m)
		return td_fail(TD_ENOMEM, "gpu: shards");
	m->a = a;
	m->o = *o;
	m->n = td_archive_nshards(a);
	m->ndev = ndev > 64 ? 64 : ndev;
	memcpy(m->dev, devs, m->ndev * sizeof *devs);
	pthread_mutex_init(&m->lock, NULL);
	snprintf(m->name, sizeof m->name, "cpu fallback");
	td_order *order = malloc((m->n + 1) * sizeof *order);
	m->u = calloc(m->n + 1, sizeof *m->u);
	m->on = calloc((size_t)(m->n + 1) * (m->ndev ? m->ndev : 1), sizeof *m->on);
	if (!order || !m->u || !m->on) {
		free(order);
		td_gmulti_close(m);
		return td_fail(TD_ENOMEM, "gpu: shards");
	}
	int r = TD_OK;
	for (uint32_t i = 0; i < m->n && r == TD_OK; i++) {
		td_shard_info si;
		m->u[i].slot = -1;
		m->u[i].on = m->on + (size_t)i * (m->ndev ? m->ndev : 1);
		if ((r = td_archive_shard(a, i, &m->u[i].a)) == TD_OK && (r = td_archive_shard_info(a, i, &si)) == TD_OK)
			m->u[i].bytes = si.archive_bytes;
		order[i] = (td_order){m->u[i].bytes, i};
	}
	/* room on each device, and each shard's batch buffers: a share of it */
	uint64_t left[64];
	for (unsigned d = 0; d < m->ndev; d++)
		left[d] = td_gpu_avail(o, m->dev[d]);
	uint32_t per_dev = m->ndev ? (m->n + m->ndev - 1) / m->ndev : 1;
	/* largest shards first, each to the device with the most room left */
	qsort(order, m->n, sizeof *order, td_cmp_order);
	for (uint32_t k = 0; k < m->n && r == TD_OK; k++) {
		td_unit *u = &m->u[order[k].i];
		unsigned best = 0;
		for (unsigned d = 1; d < m->ndev; d++)
			if (left[d] > left[best])
				best = d;
		if (!m->ndev || left[best] < u->bytes + TD_UNIT_WS_MIN)
			continue; /* not on the emptiest device: the CPU serves it */
		td_gpu *g = NULL;
		if ((r = td_unit_open(m, u, best, left, per_dev, &g)))
			break;
		if (!g)
			continue;
		u->g = g;
		u->slot = (int)best;
		m->nres++;
		if (m->nres == 1)
			snprintf(m->name, sizeof m->name, "%s", td_gpu_device_name(g));
	}
	/* copies: when every shard is resident, each shard (largest first)
	 * on every other device that still has room for it and a reserve
	 * ($TD_GPU_COPIES=0: none), so a batch can give every device a share of
	 * every shard's requests instead of whole shards */
	const char *ce = getenv("TD_GPU_COPIES");
	int copies = !(ce && strcmp(ce, "0") == 0) && m->ndev > 1 && m->nres == m->n;
	for (uint32_t k = 0; copies && k < m->n && r == TD_OK; k++) {
		td_unit *u = &m->u[order[k].i];
		for (unsigned d = 0; d < m->ndev && r == TD_OK; d++) {
			if (u->on[d] || left[d] < u->bytes + TD_UNIT_WS_MIN + left[d] / 4)
				continue;
			td_gpu *g = NULL;
			if ((r = td_unit_open(m, u, d, left, m->n, &g)) == TD_OK && g)
				m->ncopies++;
		}
	}
	free(order);
	if (r) {
		td_gmulti_close(m);
		return r;
	}
	for (unsigned d = 0; d < m->ndev && m->nres == m->n && m->n; d++) {
		uint32_t i = 0;
		while (i < m->n && m->u[i].on[d])
			i++;
		if (i == m->n)
			m->full_mask |= UINT64_C(1) << d;
	}
	*out = m;
	return TD_OK;
}

/* $TD_GPU_PHASES: where the batches went, per kind, on stderr. */
static void td_phases_report(const td_gmulti *m)
{
	static const char *kname[3] = {"extract", "count", "search"};
	for (int k = 0; k < 3; k++) {
		const struct td_mphase *p = &m->ph[k];
		if (!p->batches)
			continue;
		double b = (double)p->batches, ms = 1e3 / b;
		fprintf(stderr,
			"phases: %s on %u device(s), %llu batches of %.0f, ms a batch: whole %.3f = split %.3f + run %.3f + "
			"merge %.3f + cpu rest %.3f (%.0f requests); %.0f parts; run done at",
			kname[k], m->used, (unsigned long long)p->batches, (double)p->reqs / b, p->wall * ms, p->split * ms,
			p->run * ms, p->merge * ms, p->rest * ms, (double)p->nrest / b, (double)p->parts / b);
		for (int s = 0; s <= (int)m->ndev; s++)
			if (p->done[s] > 0 && s)
				fprintf(stderr, " dev%d %.3f", s - 1, p->done[s] * ms);
			else if (p->done[s] > 0)
				fprintf(stderr, " cpu %.3f", p->done[s] * ms);
		fprintf(stderr, "; its threads' first jobs begun by");
		for (int s = 0; s <= (int)m->ndev; s++)
			if (p->done[s] > 0)
				fprintf(stderr, " %s%d %.3f", s ? "dev" : "cpu", s - 1, p->begun[s] * ms);
		fprintf(stderr, "\n");
		if (k == 0)
			continue;
		for (unsigned d = 0; d < m->ndev; d++) {
			td_gphase sum = {0}, most = {0};
			unsigned nu = 0;
			for (uint32_t i = 0; i < m->n; i++) {
				if (!m->u[i].on || !m->u[i].on[d])
					continue;
				td_gphase h;
				td_gpu_phases_get(m->u[i].on[d], k - 1, &h);
				nu++;
				double *sv = &sum.pack, *mv = &most.pack, *hv = &h.pack;
				for (int f = 0; f < 6; f++) {
					sv[f] += hv[f];
					if (hv[f] > mv[f])
						mv[f] = hv[f];
				}
				sum.parts += h.parts;
				sum.nrest += h.nrest;
			}
			if (!nu)
				continue;
			fprintf(stderr,
				"phases:   dev%u, %u shards, %.0f parts a batch; ms a batch, all shards (largest one): pack %.3f "
				"(%.3f), wait for counts %.3f (%.3f), device time %.3f (%.3f), fill %.3f (%.3f), unpack %.3f (%.3f), "
				"cpu rest %.3f (%.3f), %.0f requests\n",
				d, nu, (double)sum.parts / b, sum.pack * ms, most.pack * ms, sum.wait * ms, most.wait * ms,
				sum.dev * ms, most.dev * ms, sum.fill * ms, most.fill * ms, sum.unpack * ms, most.unpack * ms,
				sum.rest * ms, most.rest * ms, (double)sum.nrest / b);
		}
	}
}

void td_gmulti_close(td_gmulti *m)
{
	if (!m)
		return;
	if (td_gpu_phases_on())
		td_phases_report(m);
	for (uint32_t i = 0; m->u && i < m->n; i++)
		for (unsigned d = 0; d < m->ndev; d++)
			if (m->u[i].on)
				td_gpu_close(m->u[i].on[d]);
	free(m->on);
	for (int k = 0; k < 3; k++)
		for (int d = 0; d < 65; d++)
			td_batch_free(m->bt[k][d], m->n);
	free(m->u);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

void td_gmulti_residency(const td_gmulti *m, uint32_t *resident, uint32_t *units, unsigned *ndev)
{
	if (resident)
		*resident = m->nres;
	if (units)
		*units = m->n;
	if (ndev)
		*ndev = m->used;
}

const char *td_gmulti_name(const td_gmulti *m)
{
	return m->name;
}

/* ---- splitting a batch by shard ---- */

/* The requests of one kind sent to one shard: reqs (elements of the kind's
 * size), n of them. */
typedef struct td_sub {
	char *reqs;
	size_t n, cap;
	uint32_t *back;           /* the whole batch's split: the request of each */
	size_t cap_back;
} td_sub;

/* One part of a request: the shard's request at sub[unit].reqs[idx]. */
typedef struct td_part {
	uint32_t unit;
	uint32_t idx;
} td_part;

/* A batch (or a chunk of one) split by shard: request i's parts are
 * part[pbeg[i] .. pbeg[i+1]), in piece order; none: the CPU engine answers
 * request i on the whole archive. */
typedef struct td_split {
	size_t size;              /* bytes of one request of this kind */
	td_sub *sub;              /* per shard */
	td_part *part;
	size_t npart, cap_part;
	size_t *pbeg;             /* n + 1 */
	size_t cap_pbeg;
} td_split;

/* Make s an empty split of up to n requests (and about `parts` parts) of
 * `size` bytes, keeping the memory of its last use. */
static int td_split_init(td_split *s, uint32_t units, size_t n, size_t size, size_t parts)
{
	s->size = size;
	s->npart = 0;
	if (!s->sub) { /* on cache lines of its own: each chunk's thread counts in it */
		size_t bytes = ((units + 1) * sizeof *s->sub + 127) & ~(size_t)127;
		if (!(s->sub = aligned_alloc(128, bytes)))
			return td_fail(TD_ENOMEM, "gpu: splitting a batch of %zu by shard", n);
		memset(s->sub, 0, bytes);
	}
	for (uint32_t u = 0; u < units; u++)
		s->sub[u].n = 0;
	if (n + 1 > s->cap_pbeg) {
		size_t *p = realloc(s->pbeg, (n + 1) * sizeof *p);
		if (!p)
			return td_fail(TD_ENOMEM, "gpu: splitting a batch of %zu by shard", n);
		s->pbeg = p;
		s->cap_pbeg = n + 1;
	}
	if (parts > s->cap_part || !s->part) {
		td_part *p = realloc(s->part, (parts + 1) * sizeof *p);
		if (!p)
			return td_fail(TD_ENOMEM, "gpu: splitting a batch of %zu by shard", n);
		s->part = p;
		s->cap_part = parts;
	}
	return TD_OK;
}

/* Room for n requests for shard u. */
static int td_sub_room(td_split *s, uint32_t u, size_t n)
{
	td_sub *b = &s->sub[u];
	if (n <= b->cap)
		return TD_OK;
	size_t c = b->cap * 2 > n ? b->cap * 2 : n < 64 ? 64 : n;
	char *p = realloc(b->reqs, c * s->size);
	if (!p)
		return td_fail(TD_ENOMEM, "gpu: shard requests");
	b->reqs = p;
	b->cap = c;
	return TD_OK;
}

static void td_split_free(td_split *s, uint32_t units)
{
	for (uint32_t i = 0; s->sub && i < units; i++) {
		free(s->sub[i].reqs);
		free(s->sub[i].back);
	}
	free(s->sub);
	free(s->part);
	free(s->pbeg);
	memset(s, 0, sizeof *s);
}

/* Add `req` (s->size bytes) for shard `unit` as the next part of the
 * request being split. */
static int td_split_add(td_split *s, uint32_t unit, const void *req)
{
	td_sub *b = &s->sub[unit];
	int r = td_sub_room(s, unit, b->n + 1);
	if (r)
		return r;
	if (s->npart == s->cap_part) {
		size_t c = 2 * s->cap_part + 16;
		td_part *p = realloc(s->part, (c + 1) * sizeof *p);
		if (!p)
			return td_fail(TD_ENOMEM, "gpu: shard requests");
		s->part = p;
		s->cap_part = c;
	}
	memcpy(b->reqs + b->n * s->size, req, s->size);
	s->part[s->npart++] = (td_part){unit, (uint32_t)b->n};
	b->n++;
	return TD_OK;
}

static inline void *td_part_req(const td_split *s, size_t k)
{
	const td_part *p = &s->part[k];
	return s->sub[p->unit].reqs + (size_t)p->idx * s->size;
}

/* ---- a kind of request ---- */

typedef struct td_kind {
	unsigned id;              /* 0 extract, 1 count, 2 search: td_gmulti.bt */
	size_t size;
	/* Add request q's parts to s (none: the whole archive answers it). */
	int (*split)(const td_gmulti *m, td_split *s, const void *q);
	/* Put the answers of parts [k0, k1) of s into q: 1, or 0 when the CPU
	 * engine must answer q on the whole archive. */
	int (*merge)(const td_gmulti *m, const td_split *s, size_t k0, size_t k1, void *q);
	/* One shard's requests: on its handle, or (g NULL) the CPU engine. */
	int (*run)(td_gpu *g, const td_archive *a, void *reqs, size_t n, unsigned threads);
	/* The CPU engine's batch call. */
	int (*cpu)(const td_archive *a, void *reqs, size_t n, unsigned threads);
	/* Free what a part's answer holds when it is not merged (NULL: nothing). */
	void (*drop)(void *part);
	/* On a device: 0 count, 1 search through td_gpu_query_begin/end (a
	 * device thread keeps all of its jobs in flight), -1 through run. */
	int query;
} td_kind;

/* ---- host threads ---- */

#define TD_PAR_MAX 64u          /* threads splitting a batch at most */
#define TD_PAR_DEF 32u          /* ... unless $TD_GPU_SPLIT_THREADS says */
#define TD_PAR_MIN 2048u        /* requests per such thread at least */

static unsigned td_env_uint(const char *name, unsigned def, unsigned max);

/* Threads for splitting and merging a batch of n. */
static unsigned td_par_threads(size_t n)
{
	static atomic_uint most;
	unsigned mx = atomic_load_explicit(&most, memory_order_relaxed);
	if (!mx) {
		mx = td_env_uint("TD_GPU_SPLIT_THREADS", TD_PAR_DEF, TD_PAR_MAX);
		atomic_store_explicit(&most, mx, memory_order_relaxed);
	}
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	size_t nt = n / TD_PAR_MIN;
	if (cores > 0 && nt > (size_t)cores)
		nt = (size_t)cores;
	return nt < 1 ? 1 : nt > mx ? mx : (unsigned)nt;
}

static void td_merge_done(td_batch *b, const uint32_t *req, size_t n);

/* ---- running the shards' requests: a few host threads per device, one for the CPU ---- */

#define TD_SLICE_MIN 4096u      /* requests of a shard's slice for one device at least */

/* TD_SLICE_MIN, or $TD_GPU_SLICE_MIN: then every shard with copies is cut
 * into slices of that many requests or more, one a device holding it,
 * whatever its work (the tests cut small batches this way). */
static size_t td_slice_min(int *forced)
{
	static atomic_size_t v; /* the value, times 2, plus 1 when forced */
	size_t x = atomic_load_explicit(&v, memory_order_relaxed);
	if (!x) {
		const char *e = getenv("TD_GPU_SLICE_MIN");
		unsigned long l = e && *e ? strtoul(e, NULL, 10) : 0;
		x = l ? 2 * (size_t)l + 1 : 2 * (size_t)TD_SLICE_MIN;
		atomic_store_explicit(&v, x, memory_order_relaxed);
	}
	*forced = (int)(x & 1);
	return x >> 1;
}

/* A positive integer from environment variable name, else def. */
static unsigned td_env_uint(const char *name, unsigned def, unsigned max)
{
	const char *e = getenv(name);
	unsigned long v = e && *e ? strtoul(e, NULL, 10) : 0;
	return v ? (v > max ? max : (unsigned)v) : def;
}

/* Host threads a device: TD_DEV_THREADS, or $TD_GPU_DEV_THREADS. */
static unsigned td_dev_threads(void)
{
	static atomic_uint v;
	unsigned x = atomic_load_explicit(&v, memory_order_relaxed);
	if (!x) {
		x = td_env_uint("TD_GPU_DEV_THREADS", TD_DEV_THREADS, TD_DEV_THREADS_MAX);
		atomic_store_explicit(&v, x, memory_order_relaxed);
	}
	return x;
}

/* A switch that is on unless environment variable name is "0", read
 * once into *v (0: not read yet, 1: on, 2: off). */
static int td_env_on(atomic_int *v, const char *name)
{
	int x = atomic_load_explicit(v, memory_order_relaxed);
	if (!x) {
		const char *e = getenv(name);
		x = e && !strcmp(e, "0") ? 2 : 1;
		atomic_store_explicit(v, x, memory_order_relaxed);
	}
	return x == 1;
}

/* Whether a device thread keeps its jobs in flight (td_worker_run): yes,
 * unless $TD_GPU_PIPE is 0 (each job then ends before the next begins). */
static int td_pipe_on(void)
{
	static atomic_int v;
	return td_env_on(&v, "TD_GPU_PIPE");
}

/* A shard's requests [lo, hi) on the handle of one device slot (-1: the
 * CPU engine). */
typedef struct td_rjob {
	uint32_t unit;
	int slot;
	size_t lo, hi;
	double secs;
	int err;
	size_t link;              /* the next job its thread began (SIZE_MAX: none) */
	/* $TD_GPU_TRACE: its thread, when it was begun and ended, the handle's
	 * own times (td_gpu_qtrace) */
	unsigned thr;
	double tb0, tb1, te0, te1, q[7];
} td_rjob;

typedef struct td_worker {
	td_gmulti *m;
	td_batch *b;
	td_split *s;
	const td_kind *k;
	td_rjob *job;             /* the slot's jobs, largest first */
	size_t njob;
	atomic_size_t *next;      /* the slot's next job to take */
	int slot;
	double begun;             /* when it began its first job (0: none) */
	double end;               /* when it ran out of jobs */
	unsigned idx;             /* its number among the batch's threads */
} td_worker;

/* The jobs of a device slot on one of its threads: each job it takes is
 * begun (packed and launched) at once when the kind allows, so the
 * device holds all of its jobs' kernels while this thread packs the next
 * ones; then the begun jobs are ended in the order taken, a step of each
 * at a time (their CPU shares answered, their counts waited for; a
 * search's rounds of hits launched, waited for and appended), and merged.
 * A job's seconds are this thread's time in it (its begin and its
 * steps, which hold the waits for its kernels that its other jobs' steps
 * did not already cover). */
static void td_worker_run(td_worker *w)
{
	td_gmulti *m = w->m;
	size_t head = SIZE_MAX, *tail = &head;
	const int pipe = td_pipe_on();
	for (;;) {
		size_t j = atomic_fetch_add(w->next, 1);
		if (j >= w->njob)
			break;
		td_rjob *jb = &w->job[j];
		td_unit *u = &m->u[jb->unit];
		td_sub *b = &w->s->sub[jb->unit];
		double t0 = td_now();
		if (w->begun == 0)
			w->begun = t0;
		void *reqs = b->reqs + jb->lo * w->s->size;
		jb->thr = w->idx;
		jb->tb0 = jb->te0 = t0;
		if (jb->slot >= 0 && w->k->query >= 0 && pipe) {
			td_gpu_query_begin(u->on[jb->slot], w->k->query, reqs, jb->hi - jb->lo);
			jb->secs = td_now() - t0;
			jb->tb1 = t0 + jb->secs;
			jb->link = SIZE_MAX;
			*tail = j;
			tail = &jb->link;
			continue;
		}
		jb->err = w->k->run(jb->slot < 0 ? NULL : u->on[jb->slot], u->a, reqs, jb->hi - jb->lo, m->o.cpu_threads);
		jb->secs = td_now() - t0;
		jb->tb1 = jb->te1 = t0 + jb->secs;
		if (jb->slot >= 0 && w->k->query >= 0)
			td_gpu_qtrace(u->on[jb->slot], jb->q);
		if (jb->err == TD_OK)
			td_merge_done(w->b, b->back + jb->lo, jb->hi - jb->lo);
	}
	/* passes over the begun jobs, each taking one step of every job
	 * left (a search's rounds of hits are steps too), the done ones
	 * dropped from the list */
	while (head != SIZE_MAX) {
		size_t *pj = &head;
		while (*pj != SIZE_MAX) {
			td_rjob *jb = &w->job[*pj];
			td_sub *b = &w->s->sub[jb->unit];
			double t0 = td_now();
			int more = 0;
			if (jb->te0 == jb->tb0)
				jb->te0 = t0;
			jb->err = td_gpu_query_end(m->u[jb->unit].on[jb->slot], b->reqs + jb->lo * w->s->size,
						   jb->hi - jb->lo, &more);
			jb->secs += td_now() - t0;
			if (more) {
				pj = &jb->link;
				continue;
			}
			jb->te1 = td_now();
			td_gpu_qtrace(m->u[jb->unit].on[jb->slot], jb->q);
			if (jb->err == TD_OK)
				td_merge_done(w->b, b->back + jb->lo, jb->hi - jb->lo);
			*pj = jb->link;
		}
	}
	w->end = td_now();
}

static void td_worker_par(void *ctx, unsigned c)
{
	td_worker_run(&((td_worker *)ctx)[c]);
}

/* $TD_GPU_TRACE=N: which batch of each kind a handle traces (0: none). */
static unsigned td_trace_at(void)
{
	static int v = -1;
	if (v < 0) {
		const char *e = getenv("TD_GPU_TRACE");
		v = e && *e ? atoi(e) : 0;
	}
	return (unsigned)v;
}

/* The timeline of one batch on stderr, ms from its start (tr[0]; tr[1]:
 * the split's end; t0: the run's start): every job's thread, begin,
 * packing's size pass, launches done, first end step, CPU share, streams
 * synced, unpacked, merged. */
static void td_trace_print(const td_gmulti *m, const td_kind *k, const td_rjob *j, size_t n, const double *tr,
			   double t0)
{
	static const char *kname[3] = {"extract", "count", "search"};
	const double b = tr[0];
#define TD_MS(x) ((x) > 0 ? ((x) - b) * 1e3 : -1.0)
	fprintf(stderr, "trace: %s on %u device(s): split 0-%.3f, run from %.3f, %zu jobs\n", kname[k->id], m->used,
		TD_MS(tr[1]), TD_MS(t0), n);
	for (size_t i = 0; i < n; i++)
		fprintf(stderr,
			"trace:   slot %d thr %u unit %u n %zu: begin %.3f size %.3f launched %.3f | end %.3f rest %.3f-%.3f "
			"synced %.3f unpacked %.3f merged %.3f\n",
			j[i].slot, j[i].thr, j[i].unit, j[i].hi - j[i].lo, TD_MS(j[i].tb0), TD_MS(j[i].q[1]), TD_MS(j[i].tb1),
			TD_MS(j[i].te0), TD_MS(j[i].q[3]), TD_MS(j[i].q[4]), TD_MS(j[i].q[5]), TD_MS(j[i].q[6]),
			TD_MS(j[i].te1));
#undef TD_MS
}

typedef struct td_uwork {
	double work;
	uint32_t unit;
} td_uwork;

static int td_cmp_uwork(const void *x, const void *y)
{
	const td_uwork *a = x, *b = y;
	if (a->work != b->work)
		return a->work > b->work ? -1 : 1;
	return (a->unit > b->unit) - (a->unit < b->unit);
}

/* Run every shard's requests, all at once. Larger shards first, each goes
 * to the least loaded devices holding it: whole, or, when its work is more
 * than a device's share of the batch (the whole work over the devices)
 * and it has copies, cut into as many slices as it has shares (rounded
 * up; each of TD_SLICE_MIN requests or more, one a device). The work is
 * requests times the shard's measured seconds a request. Each device's
 * jobs run on up to TD_DEV_THREADS threads, the CPU's on one. pin >= 0:
 * every resident shard's requests go whole to device slot pin (which
 * holds them all), and the shards' costs are left as they are (another
 * device's share may run at once); rec: this run's phases are recorded. */
static int td_run_all(td_gmulti *m, td_batch *bt, td_split *s, const td_kind *k, const double *tr, int pin, int rec)
{
	size_t maxjobs = (size_t)m->n * (m->ndev ? m->ndev : 1) + 1;
	td_rjob *jobs = malloc(maxjobs * sizeof *jobs), *bys = malloc(maxjobs * sizeof *bys);
	td_uwork *uw = malloc((m->n + 1) * sizeof *uw);
	if (!jobs || !bys || !uw) {
		free(jobs);
		free(bys);
		free(uw);
		return td_fail(TD_ENOMEM, "gpu: shard jobs");
	}
	/* expected work of each shard's requests: a shard not measured yet
	 * counts at the mean of those measured */
	double csum = 0;
	unsigned cn = 0;
	for (uint32_t i = 0; i < m->n; i++)
		if (m->u[i].cost[k->id] > 0) {
			csum += m->u[i].cost[k->id];
			cn++;
		}
	double cdef = cn ? csum / cn : 1e-6;
	uint32_t nu = 0;
	for (uint32_t i = 0; i < m->n; i++)
		if (s->sub[i].n)
			uw[nu++] = (td_uwork){(double)s->sub[i].n * (m->u[i].cost[k->id] > 0 ? m->u[i].cost[k->id] : cdef), i};
	qsort(uw, nu, sizeof *uw, td_cmp_uwork);
	double load[65] = {0}, total = 0;
	for (uint32_t x = 0; x < nu; x++)
		if (m->u[uw[x].unit].g)
			total += uw[x].work;
	double share = m->used ? total / m->used : total; /* a device's share of the work */
	size_t nj = 0;
	for (uint32_t x = 0; x < nu; x++) {
		td_unit *u = &m->u[uw[x].unit];
		size_t n = s->sub[uw[x].unit].n;
		if (!u->g || pin >= 0) {
			jobs[nj++] = (td_rjob){.unit = uw[x].unit, .slot = u->g ? pin : -1, .lo = 0, .hi = n, .link = SIZE_MAX};
			continue;
		}
		/* its devices, least loaded first */
		unsigned cand[64], nc = 0;
		for (unsigned d = 0; d < m->ndev; d++) {
			if (!u->on[d])
				continue;
			unsigned p = nc++;
			while (p > 0 && load[cand[p - 1] + 1] > load[d + 1]) {
				cand[p] = cand[p - 1];
				p--;
			}
			cand[p] = d;
		}
		/* slices: as many as the shard has shares of a device's work
		 * (rounded up), on as many devices as hold it */
		int forced = 0;
		size_t ns = n / td_slice_min(&forced), want = share > 0 ? (size_t)(uw[x].work / share + 0.999) : 1;
		ns = ns > want && !forced ? want : ns;
		ns = ns < 1 ? 1 : ns > nc ? nc : ns;
		for (size_t j = 0; j < ns; j++) {
			size_t lo = n * j / ns, hi = n * (j + 1) / ns;
			jobs[nj++] = (td_rjob){.unit = uw[x].unit, .slot = (int)cand[j], .lo = lo, .hi = hi, .link = SIZE_MAX};
			load[cand[j] + 1] += uw[x].work * (double)(hi - lo) / (double)n;
		}
	}
	/* by slot, keeping the order (larger shards first) */
	size_t nby = 0, first[66];
	for (int slot = -1; slot < (int)m->ndev; slot++) {
		first[slot + 1] = nby;
		for (size_t j = 0; j < nj; j++)
			if (jobs[j].slot == slot)
				bys[nby++] = jobs[j];
	}
	first[m->ndev + 1] = nby;
	unsigned dth = td_dev_threads();
	td_worker *w = malloc(((size_t)m->ndev * dth + 1) * sizeof *w);
	if (!w) {
		free(jobs);
		free(bys);
		free(uw);
		return td_fail(TD_ENOMEM, "gpu: shard threads");
	}
	atomic_size_t next[65];
	unsigned nw = 0;
	for (int slot = -1; slot < (int)m->ndev; slot++) {
		atomic_init(&next[slot + 1], 0);
		size_t busy = first[slot + 2] - first[slot + 1];
		unsigned nt = slot < 0 ? 1 : dth;
		if (busy < nt)
			nt = (unsigned)busy;
		for (unsigned t = 0; t < nt; t++, nw++)
			w[nw] = (td_worker){m, bt, s, k, bys + first[slot + 1], busy, &next[slot + 1], slot, 0, 0, nw};
	}
	double t0 = td_now();
	td_gpu_par(nw, td_worker_par, w);
	if (td_gpu_phases_on() && rec) {
		double done[65] = {0}, begun[65] = {0};
		for (unsigned c = 0; c < nw; c++) {
			if (w[c].end - t0 > done[w[c].slot + 1])
				done[w[c].slot + 1] = w[c].end - t0;
			if (w[c].begun > 0 && w[c].begun - t0 > begun[w[c].slot + 1])
				begun[w[c].slot + 1] = w[c].begun - t0;
		}
		for (int i = 0; i <= (int)m->ndev; i++) {
			m->ph[k->id].done[i] += done[i];
			m->ph[k->id].begun[i] += begun[i];
		}
	}
	if (tr)
		td_trace_print(m, k, bys, nby, tr, t0);
	/* each shard's seconds a request, for the next batches' balance */
	int r = TD_OK;
	for (size_t j = 0; j < nby; j++) {
		td_rjob *jb = &bys[j];
		if (jb->err && !r)
			r = jb->err;
		if (pin < 0 && jb->hi > jb->lo && jb->secs > 0) {
			double c = jb->secs / (double)(jb->hi - jb->lo), *pc = &m->u[jb->unit].cost[k->id];
			*pc = *pc > 0 ? 0.75 * *pc + 0.25 * c : c;
		}
	}
	free(w);
	free(jobs);
	free(bys);
	free(uw);
	return r;
}

/* ---- one batch: split in chunks on several threads, run, merge ---- */

struct td_batch {
	td_gmulti *m;
	const td_kind *k;
	char *reqs;
	size_t n;
	unsigned nt;
	int merged;               /* the parts' answers were taken (merge frees them) */
	/* kept from batch to batch (td_gmulti.bt) */
	td_split cs[TD_PAR_MAX];  /* per chunk */
	int cerr[TD_PAR_MAX];
	size_t poff[TD_PAR_MAX];  /* per chunk: where its parts go */
	size_t *uoff;             /* [chunk][unit]: where its requests go */
	td_split s;               /* the whole batch */
	uint8_t *cpu;             /* per request: the CPU engine answers it */
	atomic_uint *left;        /* per request: its parts not answered yet */
	size_t *idx;
	size_t cap;               /* of cpu, left and idx */
};

static void td_chunk(const td_batch *b, unsigned c, size_t *i0, size_t *i1)
{
	*i0 = b->n * c / b->nt;
	*i1 = b->n * (c + 1) / b->nt;
}

static void td_split_chunk(void *ctx, unsigned c)
{
	td_batch *b = ctx;
	size_t i0, i1;
	td_chunk(b, c, &i0, &i1);
	/* a copy of this chunk's split: the chunks' counters share cache lines */
	td_split loc = b->cs[c], *s = &loc;
	int r = td_split_init(s, b->m->n, i1 - i0, b->k->size, (i1 - i0) + 16);
	for (size_t i = i0; i < i1 && r == TD_OK; i++) {
		s->pbeg[i - i0] = s->npart;
		r = b->k->split(b->m, s, b->reqs + i * b->k->size);
	}
	if (r == TD_OK)
		s->pbeg[i1 - i0] = s->npart;
	b->cs[c] = loc;
	b->cerr[c] = r;
}

/* Chunk c's shard requests and parts into their places in b->s. */
static void td_place_chunk(void *ctx, unsigned c)
{
	td_batch *b = ctx;
	const td_split *cs = &b->cs[c];
	const size_t *uo = b->uoff + (size_t)c * b->m->n;
	for (uint32_t u = 0; u < b->m->n; u++)
		if (cs->sub[u].n)
			memcpy(b->s.sub[u].reqs + uo[u] * b->k->size, cs->sub[u].reqs, cs->sub[u].n * b->k->size);
	for (size_t k = 0; k < cs->npart; k++)
		b->s.part[b->poff[c] + k] = (td_part){cs->part[k].unit, (uint32_t)(uo[cs->part[k].unit] + cs->part[k].idx)};
	size_t i0, i1;
	td_chunk(b, c, &i0, &i1);
	for (size_t i = i0; i < i1; i++) {
		size_t k0 = cs->pbeg[i - i0], k1 = cs->pbeg[i - i0 + 1];
		b->s.pbeg[i] = b->poff[c] + k0;
		for (size_t k = k0; k < k1; k++)
			b->s.sub[cs->part[k].unit].back[uo[cs->part[k].unit] + cs->part[k].idx] = (uint32_t)i;
		atomic_init(&b->left[i], (unsigned)(k1 - k0));
		b->cpu[i] = k1 == k0; /* no parts: the whole archive answers it */
	}
}

/* Parts req[0..n) (their requests' numbers) were answered: each request
 * whose last part this was is merged here, on the thread that ran its
 * last part, into the caller's slot (or marked for the CPU engine). */
static void td_merge_done(td_batch *b, const uint32_t *req, size_t n)
{
	for (size_t j = 0; j < n; j++) {
		size_t i = req[j];
		if (atomic_fetch_sub_explicit(&b->left[i], 1, memory_order_acq_rel) != 1)
			continue;
		b->cpu[i] = !b->k->merge(b->m, &b->s, b->s.pbeg[i], b->s.pbeg[i + 1], b->reqs + i * b->k->size);
	}
}

/* Split the batch by shard (chunks on several threads), then gather the
 * chunks' shard requests into one array per shard. */
static int td_split_batch(td_batch *b)
{
	td_gmulti *m = b->m;
	if (!b->uoff && !(b->uoff = malloc((size_t)TD_PAR_MAX * (m->n + 1) * sizeof *b->uoff)))
		return td_fail(TD_ENOMEM, "gpu: splitting a batch of %zu", b->n);
	td_gpu_par(b->nt, td_split_chunk, b);
	size_t parts = 0;
	for (unsigned c = 0; c < b->nt; c++) {
		if (b->cerr[c])
			return b->cerr[c];
		b->poff[c] = parts;
		parts += b->cs[c].npart;
	}
	int r = td_split_init(&b->s, m->n, b->n, b->k->size, parts);
	for (uint32_t u = 0; u < m->n && r == TD_OK; u++) {
		size_t tot = 0;
		for (unsigned c = 0; c < b->nt; c++) {
			b->uoff[(size_t)c * m->n + u] = tot;
			tot += b->cs[c].sub[u].n;
		}
		td_sub *su = &b->s.sub[u];
		if ((r = td_sub_room(&b->s, u, tot)) == TD_OK && tot > su->cap_back) {
			uint32_t *p = realloc(su->back, su->cap * sizeof *p);
			if (p) {
				su->back = p;
				su->cap_back = su->cap;
			} else {
				r = td_fail(TD_ENOMEM, "gpu: splitting a batch of %zu", b->n);
			}
		}
		if (r == TD_OK)
			su->n = tot;
	}
	if (r)
		return r;
	td_gpu_par(b->nt, td_place_chunk, b);
	b->s.npart = parts;
	b->s.pbeg[b->n] = parts;
	return TD_OK;
}

/* Let go of what this batch's parts hold (unless merged); keep the memory. */
static void td_batch_done(td_batch *b)
{
	for (size_t k = 0; !b->merged && b->k->drop && k < b->s.npart; k++)
		b->k->drop(td_part_req(&b->s, k));
	b->s.npart = 0;
}

static void td_batch_free(td_batch *b, uint32_t units)
{
	if (!b)
		return;
	for (unsigned c = 0; c < TD_PAR_MAX; c++)
		td_split_free(&b->cs[c], units);
	td_split_free(&b->s, units);
	free(b->uoff);
	free(b->cpu);
	free(b->left);
	free(b->idx);
	free(b);
}

/* One batch (or one device's share of one) on scratch b: split by shard
 * on nt threads, run (pin, rec: td_run_all), merged; the requests the
 * shards did not answer go to the CPU engine. trace: print its timeline. */
static int td_batch_run(td_gmulti *m, const td_kind *k, td_batch *b, void *reqs, size_t n, unsigned nt, int pin,
			int rec, int trace)
{
	b->m = m;
	b->k = k;
	b->reqs = reqs;
	b->n = n;
	b->nt = nt;
	b->merged = 0;
	b->s.npart = 0;
	int r = TD_OK;
	if (n + 1 > b->cap) {
		uint8_t *c = realloc(b->cpu, n + 1);
		if (c)
			b->cpu = c;
		atomic_uint *l = c ? realloc(b->left, (n + 1) * sizeof *l) : NULL;
		if (l)
			b->left = l;
		size_t *x = l ? realloc(b->idx, (n + 1) * sizeof *x) : NULL;
		if (x) {
			b->idx = x;
			b->cap = n + 1;
		} else {
			r = td_fail(TD_ENOMEM, "gpu: a batch of %zu", n);
		}
	}
	double t0 = td_now(), t1 = t0, t2 = t0, t3 = t0;
	if (r == TD_OK)
		r = td_split_batch(b);
	t1 = td_now();
	double tr[2] = {t0, t1};
	if (r == TD_OK)
		r = td_run_all(m, b, &b->s, k, trace ? tr : NULL, pin, rec);
	t2 = td_now();
	/* every request's parts were merged (which frees them) unless a job
	 * failed: then what was not merged is dropped below */
	b->merged = r == TD_OK;
	size_t nc = 0;
	for (size_t i = 0; i < n && r == TD_OK; i++)
		if (b->cpu[i])
			b->idx[nc++] = i;
	t3 = td_now();
	if (r == TD_OK)
		r = td_gpu_cpu_rest(m->a, m->o.cpu_threads, reqs, k->size, b->idx, nc, k->cpu);
	size_t nparts = b->s.npart;
	td_batch_done(b);
	if (td_gpu_phases_on() && rec) {
		struct td_mphase *p = &m->ph[k->id];
		double t4 = td_now();
		p->wall += t4 - t0;
		p->split += t1 - t0;
		p->run += t2 - t1;
		p->merge += t3 - t2;
		p->rest += t4 - t3;
		p->batches++;
		p->reqs += n;
		p->parts += nparts;
		p->nrest += nc;
	}
	return r;
}

/* One device's share of a batch (td_gmulti_batch). */
typedef struct td_share {
	td_gmulti *m;
	const td_kind *k;
	td_batch *b;
	char *reqs;
	size_t n;
	unsigned nt;
	int pin, trace, r;
} td_share;

static void td_share_par(void *ctx, unsigned c)
{
	td_share *h = &((td_share *)ctx)[c];
	h->r = td_batch_run(h->m, h->k, h->b, h->reqs, h->n, h->nt, h->pin, c == 0, h->trace && c == 0);
}

/* Whether a batch of n is cut into one share of requests a device
 * holding every shard ($TD_GPU_BYREQ=0: never): with two such devices or
 * more, and a slice's worth of requests (td_slice_min) for each. */
static unsigned td_byreq_shares(const td_gmulti *m, size_t n)
{
	static atomic_int v;
	unsigned nd = (unsigned)__builtin_popcountll(m->full_mask);
	int forced = 0;
	if (!td_env_on(&v, "TD_GPU_BYREQ") || nd < 2 || n < (size_t)nd * td_slice_min(&forced))
		return 0;
	return nd;
}

static int td_gmulti_batch(td_gmulti *m, const td_kind *k, void *reqs, size_t n)
{
	if (n > (size_t)UINT32_MAX) { /* parts name their requests in 32 bits */
		int r = TD_OK;
		for (size_t o = 0; o < n && r == TD_OK; o += UINT32_MAX)
			r = td_gmulti_batch(m, k, (char *)reqs + o * k->size, n - o < UINT32_MAX ? n - o : UINT32_MAX);
		return r;
	}
	pthread_mutex_lock(&m->lock);
	int trace = td_trace_at() && ++m->ntrace[k->id] == td_trace_at();
	unsigned nd = td_byreq_shares(m, n), nb = nd ? nd : 1;
	for (unsigned i = 0; i < nb; i++)
		if (!m->bt[k->id][i + (nd > 0)] && !(m->bt[k->id][i + (nd > 0)] = calloc(1, sizeof(td_batch)))) {
			pthread_mutex_unlock(&m->lock);
			return td_fail(TD_ENOMEM, "gpu: a batch of %zu", n);
		}
	int r = TD_OK;
	if (!nd) {
		r = td_batch_run(m, k, m->bt[k->id][0], reqs, n, td_par_threads(n), -1, 1, trace);
	} else {
		/* each device holding every shard splits, runs and merges its own
		 * share of the requests, all at once: the answers do not depend
		 * on where a request runs */
		td_share h[64];
		unsigned nt = td_par_threads(n) / nd, i = 0;
		for (unsigned d = 0; d < m->ndev; d++) {
			if (!(m->full_mask >> d & 1))
				continue;
			size_t lo = n * i / nd, hi = n * (i + 1) / nd;
			h[i] = (td_share){m, k, m->bt[k->id][i + 1], (char *)reqs + lo * k->size, hi - lo, nt ? nt : 1,
					  (int)d, trace, TD_OK};
			i++;
		}
		td_gpu_par(nd, td_share_par, h);
		for (i = 0; i < nd && r == TD_OK; i++)
			r = h[i].r;
	}
	pthread_mutex_unlock(&m->lock);
	return r;
}

/* ---- extract ---- */

/* Request q as one request per piece of its file that it reads (none for
 * what the whole archive answers best: errors, empty reads, anything but
 * a regular file, pieces out of order). */
static int td_split_extract(const td_gmulti *m, td_split *s, const void *req)
{
	const td_extract_req *q = req;
	td_stat st;
	if (q->len == 0 || td_archive_stat(m->a, q->file, &st) || !S_ISREG(st.mode) || q->off >= st.size)
		return TD_OK;
	const td_disk_piece *pc;
	uint64_t np = 0;
	if (td_archive_pieces(m->a, q->file, &pc, &np) || np == 0)
		return TD_OK;
	uint64_t lo = 0, hi = np; /* the last piece starting at or before off */
	while (hi - lo > 1) {
		uint64_t mid = (lo + hi) / 2;
		if (pc[mid].start <= q->off)
			lo = mid;
		else
			hi = mid;
	}
	uint64_t off = q->off, end = st.size - q->off < q->len ? st.size : q->off + q->len;
	size_t first = s->npart;
	for (uint64_t k = lo; k < np && off < end; k++) {
		uint64_t pend = k + 1 < np ? pc[k + 1].start : st.size;
		if (pc[k].start > off || pend > st.size || pc[k].shard >= m->n)
			break; /* out of order: the whole archive says what is wrong */
		if (off >= pend)
			continue;
		uint64_t e = pend < end ? pend : end;
		td_extract_req p = {.file = pc[k].local, .off = off - pc[k].start, .len = (uint32_t)(e - off),
				    .buf = (uint8_t *)q->buf + (off - q->off)};
		int r = td_split_add(s, pc[k].shard, &p);
		if (r)
			return r;
		off = e;
	}
	if (off < end) { /* not covered: drop the parts (their slots stay unused) */
		for (size_t k = first; k < s->npart; k++)
			s->sub[s->part[k].unit].n--;
		s->npart = first;
	}
	return TD_OK;
}

static int td_merge_extract(const td_gmulti *m, const td_split *s, size_t k0, size_t k1, void *req)
{
	(void)m;
	td_extract_req *q = req;
	uint64_t got = 0;
	if (k1 == k0)
		return 0;
	for (size_t k = k0; k < k1; k++) {
		const td_extract_req *p = td_part_req(s, k);
		if (p->err != TD_OK || p->got != p->len)
			return 0;
		got += p->got;
	}
	q->got = (uint32_t)got;
	q->err = TD_OK;
	return 1;
}

static int td_run_extract(td_gpu *g, const td_archive *a, void *reqs, size_t n, unsigned threads)
{
	return g ? td_gpu_extract_batch(g, reqs, n) : td_gpu_cpu_extracts(a, reqs, n, threads);
}

int td_gmulti_extract(td_gmulti *m, td_extract_req *reqs, size_t n)
{
	static const td_kind k = {0, sizeof(td_extract_req), td_split_extract, td_merge_extract, td_run_extract,
				  td_gpu_cpu_extracts, NULL, -1};
	return td_gmulti_batch(m, &k, reqs, n);
}

/* ---- count and search ---- */

/* The pieces a count or search over scope reads, or 0 when the whole
 * archive answers it (a bad scope, an empty directory). A word that is not
 * a word, or a symbolic link's piece, makes a part fail (or count nothing,
 * as the whole archive does), and a failed part sends the request to the
 * whole archive: the split stays one look-up a request. A scope with a
 * file cut inside a word goes to the whole archive too. */
static uint64_t td_query_pieces(const td_gmulti *m, const char *word, size_t len, td_entry scope,
				const td_disk_piece **pc)
{
	uint64_t np = 0;
	(void)word;
	(void)len;
	if (td_archive_pieces(m->a, scope, pc, &np))
		return 0;
	/* a word cut in two by a shard cut: the whole archive corrects it (a
	 * scope of one piece lies in one shard and holds no cut file: the
	 * look-up, a walk up from every cut file, is skipped) */
	if (np > 1 && td_archive_cut_in_word(m->a, scope))
		return 0;
	for (uint64_t k = 0; k < np; k++)
		if ((*pc)[k].shard >= m->n)
			return 0;
	return np;
}

static int td_split_count(const td_gmulti *m, td_split *s, const void *req)
{
	const td_count_req *q = req;
	const td_disk_piece *pc = NULL;
	uint64_t np = td_query_pieces(m, q->word, q->len, q->scope, &pc);
	int r = TD_OK;
	for (uint64_t k = 0; k < np && r == TD_OK; k++) {
		td_count_req p = {q->word, q->len, pc[k].local, 0, 0};
		r = td_split_add(s, pc[k].shard, &p);
	}
	return r;
}

static int td_merge_count(const td_gmulti *m, const td_split *s, size_t k0, size_t k1, void *req)
{
	(void)m;
	td_count_req *q = req;
	uint64_t sum = 0;
	if (k1 == k0)
		return 0;
	for (size_t k = k0; k < k1; k++) {
		const td_count_req *p = td_part_req(s, k);
		if (p->err != TD_OK)
			return 0;
		sum += p->count;
	}
	q->count = sum;
	q->err = TD_OK;
	return 1;
}

static int td_run_count(td_gpu *g, const td_archive *a, void *reqs, size_t n, unsigned threads)
{
	return g ? td_gpu_count_batch(g, reqs, n) : td_gpu_cpu_counts(a, reqs, n, threads);
}

int td_gmulti_count(td_gmulti *m, td_count_req *reqs, size_t n)
{
	static const td_kind k = {1, sizeof(td_count_req), td_split_count, td_merge_count, td_run_count,
				  td_gpu_cpu_counts, NULL, 0};
	return td_gmulti_batch(m, &k, reqs, n);
}

static int td_split_search(const td_gmulti *m, td_split *s, const void *req)
{
	const td_search_req *q = req;
	const td_disk_piece *pc = NULL;
	uint64_t np = td_query_pieces(m, q->word, q->len, q->scope, &pc);
	int r = TD_OK;
	for (uint64_t k = 0; k < np && r == TD_OK; k++) {
		td_search_req p = {q->word, q->len, pc[k].local, {NULL, 0, 0}, 0};
		r = td_split_add(s, pc[k].shard, &p);
	}
	return r;
}

/* The parts' hits in piece order through td_archive_search_merge; the
 * parts' hit lists are freed whatever happens. */
static int td_merge_search(const td_gmulti *m, const td_split *s, size_t k0, size_t k1, void *req)
{
	td_search_req *q = req;
	int ok = k1 > k0;
	td_hits one[8], *per = k1 - k0 <= 8 ? one : malloc((k1 - k0) * sizeof *per);
	if (!per)
		ok = 0;
	for (size_t k = k0; k < k1; k++) {
		td_search_req *p = td_part_req(s, k);
		if (p->err != TD_OK)
			ok = 0;
		if (per)
			per[k - k0] = p->hits;
	}
	if (ok && (ok = td_archive_search_merge(m->a, q->scope, per, k1 - k0, &q->hits) == TD_OK))
		q->err = TD_OK;
	for (size_t k = k0; k < k1; k++)
		td_hits_free(&((td_search_req *)td_part_req(s, k))->hits);
	if (per != one)
		free(per);
	return ok;
}

static void td_drop_search(void *part)
{
	td_hits_free(&((td_search_req *)part)->hits);
}

static int td_run_search(td_gpu *g, const td_archive *a, void *reqs, size_t n, unsigned threads)
{
	return g ? td_gpu_search_batch(g, reqs, n) : td_gpu_cpu_searches(a, reqs, n, threads);
}

int td_gmulti_search(td_gmulti *m, td_search_req *reqs, size_t n)
{
	static const td_kind k = {2, sizeof(td_search_req), td_split_search, td_merge_search, td_run_search,
				  td_gpu_cpu_searches, td_drop_search, 1};
	return td_gmulti_batch(m, &k, reqs, n);
}

uint32_t td_gmulti_units(const td_gmulti *m)
{
	return m ? m->n : 0;
}

td_gpu *td_gmulti_handle(td_gmulti *m, uint32_t i)
{
	return m && i < m->n ? m->u[i].g : NULL;
}
