/* td_gpu_multi: a version 5 archive on the GPUs: shards resident one by one over the devices, batches split by shard and merged in request order. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "td_err.h"
#include "td_format.h"
#include "td_gpu.h"
#include "td_gpu_int.h"

#define TD_MIB (UINT64_C(1) << 20)
#define TD_UNIT_WS_MIN (64 * TD_MIB)    /* batch buffers of a shard at least */
#define TD_UNIT_WS_MAX (1536 * TD_MIB)  /* ... and at most (3 extract rounds) */
#define TD_DEV_THREADS 2u               /* host threads driving one device's shards */

/* One shard: its archive and, when resident, its handle. */
typedef struct td_unit {
	const td_archive *a;
	td_gpu *g;                /* NULL: served by the CPU engine */
	int slot;                 /* device slot, or -1 (CPU) */
	uint64_t bytes;           /* image size, for the placement */
} td_unit;

struct td_gmulti {
	const td_archive *a;
	td_gpu_opts o;
	uint32_t n;
	td_unit *u;
	unsigned ndev;
	int dev[64];
	uint32_t nres;
	unsigned used;            /* devices holding a shard */
	char name[256];
	pthread_mutex_t lock;     /* one batch at a time */
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
	if (!order || !m->u) {
		free(order);
		td_gmulti_close(m);
		return td_fail(TD_ENOMEM, "gpu: shards");
	}
	int r = TD_OK;
	for (uint32_t i = 0; i < m->n && r == TD_OK; i++) {
		td_shard_info si;
		m->u[i].slot = -1;
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
	uint64_t used_mask = 0;
	for (uint32_t k = 0; k < m->n && r == TD_OK; k++) {
		td_unit *u = &m->u[order[k].i];
		unsigned best = 0;
		for (unsigned d = 1; d < m->ndev; d++)
			if (left[d] > left[best])
				best = d;
		if (!m->ndev || left[best] < u->bytes + TD_UNIT_WS_MIN)
			continue; /* not on the emptiest device: the CPU serves it */
		uint64_t ws = left[best] / (4 * (uint64_t)(per_dev ? per_dev : 1));
		ws = ws < TD_UNIT_WS_MIN ? TD_UNIT_WS_MIN : ws > TD_UNIT_WS_MAX ? TD_UNIT_WS_MAX : ws;
		td_gpu_opts so = *o;
		so.device = m->dev[best];
		so.devices = 0;
		uint64_t used = 0;
		td_gpu *g = NULL;
		if ((r = td_gpu_open_dev(u->a, &so, left[best], ws, &g, &used)))
			break;
		if (!td_gpu_resident(g)) {
			td_gpu_close(g);
			continue;
		}
		u->g = g;
		u->slot = (int)best;
		left[best] -= used < left[best] ? used : left[best];
		m->nres++;
		if (!(used_mask >> best & 1)) {
			used_mask |= UINT64_C(1) << best;
			m->used++;
		}
		if (m->nres == 1)
			snprintf(m->name, sizeof m->name, "%s", td_gpu_device_name(g));
	}
	free(order);
	if (r) {
		td_gmulti_close(m);
		return r;
	}
	*out = m;
	return TD_OK;
}

void td_gmulti_close(td_gmulti *m)
{
	if (!m)
		return;
	for (uint32_t i = 0; m->u && i < m->n; i++)
		td_gpu_close(m->u[i].g);
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

/* The requests of one kind sent to shard u: reqs (elements of the kind's
 * size), n of them. */
typedef struct td_sub {
	char *reqs;
	size_t n, cap;
} td_sub;

/* Request i's parts: part[pbeg[i] .. pbeg[i+1]), each (shard, index in its
 * td_sub), in piece order. pbeg[i] == pbeg[i+1]: the CPU engine answers
 * request i on the whole archive. */
typedef struct td_part {
	uint32_t unit;
	uint32_t idx;
} td_part;

typedef struct td_split {
	size_t size;              /* bytes of one request of this kind */
	td_sub *sub;              /* per shard */
	td_part *part;
	size_t npart, cap_part;
	size_t *pbeg;             /* n + 1 */
} td_split;

static int td_split_init(td_split *s, uint32_t units, size_t n, size_t size)
{
	memset(s, 0, sizeof *s);
	s->size = size;
	s->sub = calloc(units + 1, sizeof *s->sub);
	s->pbeg = malloc((n + 1) * sizeof *s->pbeg);
	s->cap_part = n + 16;
	s->part = malloc(s->cap_part * sizeof *s->part);
	if (!s->sub || !s->pbeg || !s->part)
		return td_fail(TD_ENOMEM, "gpu: splitting a batch of %zu by shard", n);
	return TD_OK;
}

static void td_split_free(td_split *s, uint32_t units)
{
	for (uint32_t i = 0; s->sub && i < units; i++)
		free(s->sub[i].reqs);
	free(s->sub);
	free(s->part);
	free(s->pbeg);
}

/* Add request `req` (s->size bytes) for shard `unit` as the next part of
 * the request being split. */
static int td_split_add(td_split *s, uint32_t unit, const void *req)
{
	td_sub *b = &s->sub[unit];
	if (b->n == b->cap) {
		size_t c = b->cap ? 2 * b->cap : 64;
		char *p = realloc(b->reqs, c * s->size);
		if (!p)
			return td_fail(TD_ENOMEM, "gpu: shard requests");
		b->reqs = p;
		b->cap = c;
	}
	if (s->npart == s->cap_part) {
		size_t c = 2 * s->cap_part;
		td_part *p = realloc(s->part, c * sizeof *p);
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

static inline void *td_part_req(const td_split *s, const td_part *p)
{
	return s->sub[p->unit].reqs + (size_t)p->idx * s->size;
}

/* ---- running the shards' batches: a few host threads per device, one for the CPU ---- */

typedef int (*td_run_fn)(td_gpu *g, const td_archive *a, void *reqs, size_t n, unsigned cpu_threads);

typedef struct td_worker {
	td_gmulti *m;
	td_split *s;
	td_run_fn run;
	int slot;                 /* device slot, -1: the shards on the CPU */
	atomic_uint *next;        /* the slot's next shard to take */
	int err;
	pthread_t th;
	int started;
} td_worker;

static void *td_worker_run(void *arg)
{
	td_worker *w = arg;
	td_gmulti *m = w->m;
	for (;;) {
		unsigned i = atomic_fetch_add(w->next, 1);
		if (i >= m->n)
			break;
		td_unit *u = &m->u[i];
		td_sub *b = &w->s->sub[i];
		if (u->slot != w->slot || !b->n)
			continue;
		int r = w->run(u->g, u->a, b->reqs, b->n, m->o.cpu_threads);
		if (r && !w->err)
			w->err = r;
	}
	return NULL;
}

/* Run every shard's requests: each device's shards on TD_DEV_THREADS
 * threads of their own, the CPU's on one, all at once. */
static int td_run_all(td_gmulti *m, td_split *s, td_run_fn run)
{
	enum { MAXW = 64 * TD_DEV_THREADS + 1 };
	td_worker w[MAXW];
	atomic_uint next[65];
	unsigned nw = 0;
	for (int slot = -1; slot < (int)m->ndev; slot++) {
		atomic_init(&next[slot + 1], 0);
		size_t busy = 0;
		for (uint32_t i = 0; i < m->n; i++)
			busy += m->u[i].slot == slot && s->sub[i].n;
		unsigned nt = slot < 0 ? 1 : TD_DEV_THREADS;
		if (busy < nt)
			nt = (unsigned)busy;
		for (unsigned t = 0; t < nt && nw < MAXW; t++)
			w[nw++] = (td_worker){m, s, run, slot, &next[slot + 1], TD_OK, 0, 0};
	}
	for (unsigned k = 1; k < nw; k++)
		w[k].started = pthread_create(&w[k].th, NULL, td_worker_run, &w[k]) == 0;
	if (nw)
		td_worker_run(&w[0]);
	int err = nw ? w[0].err : TD_OK;
	for (unsigned k = 1; k < nw; k++) {
		if (w[k].started)
			pthread_join(w[k].th, NULL);
		else
			td_worker_run(&w[k]);
		if (!err)
			err = w[k].err;
	}
	return err;
}

/* Close the part list of a batch of n split by shard, run every shard's
 * requests, and give *cpu room for the requests the whole archive answers. */
static int td_split_run(td_gmulti *m, td_split *s, size_t n, td_run_fn run, size_t **cpu)
{
	*cpu = NULL;
	s->pbeg[n] = s->npart;
	pthread_mutex_lock(&m->lock);
	int r = td_run_all(m, s, run);
	pthread_mutex_unlock(&m->lock);
	if (r == TD_OK && !(*cpu = malloc((n + 1) * sizeof **cpu)))
		r = td_fail(TD_ENOMEM, "gpu: a batch of %zu", n);
	return r;
}

/* ---- extract ---- */

static int td_run_extract(td_gpu *g, const td_archive *a, void *reqs, size_t n, unsigned threads)
{
	return g ? td_gpu_extract_batch(g, reqs, n) : td_gpu_cpu_extracts(a, reqs, n, threads);
}


/* Split request q into one request per piece of its file it reads
 * (nothing for what the whole archive answers best: errors, empty reads,
 * anything but a regular file). */
static int td_split_extract(td_gmulti *m, td_split *s, const td_extract_req *q)
{
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
		if (pc[k].start > off || pend > st.size || pc[k].shard >= m->n) {
			s->npart = first; /* out of order: the whole archive says what is wrong */
			return TD_OK;
		}
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
	if (off < end)
		s->npart = first;
	return TD_OK;
}

int td_gmulti_extract(td_gmulti *m, td_extract_req *reqs, size_t n)
{
	td_split s;
	int r = td_split_init(&s, m->n, n, sizeof(td_extract_req));
	for (size_t i = 0; i < n && r == TD_OK; i++) {
		s.pbeg[i] = s.npart;
		r = td_split_extract(m, &s, &reqs[i]);
	}
	size_t *cpu = NULL, nc = 0;
	if (r == TD_OK)
		r = td_split_run(m, &s, n, td_run_extract, &cpu);
	for (size_t i = 0; i < n && !r; i++) {
		td_extract_req *q = &reqs[i];
		uint64_t got = 0;
		int ok = s.pbeg[i + 1] > s.pbeg[i];
		for (size_t k = s.pbeg[i]; k < s.pbeg[i + 1] && ok; k++) {
			const td_extract_req *p = td_part_req(&s, &s.part[k]);
			ok = p->err == TD_OK && p->got == p->len;
			got += p->got;
		}
		if (ok) {
			q->got = (uint32_t)got;
			q->err = TD_OK;
		} else {
			cpu[nc++] = i;
		}
	}
	if (!r)
		r = td_gpu_cpu_rest(m->a, m->o.cpu_threads, reqs, sizeof *reqs, cpu, nc, td_gpu_cpu_extracts);
	free(cpu);
	td_split_free(&s, m->n);
	return r;
}

/* ---- count and search ---- */

/* The pieces a count or search of (word, len) over scope reads, or 0 when
 * the whole archive answers it (not a word, a bad scope, a symbolic link,
 * an empty directory). */
static uint64_t td_query_pieces(const td_gmulti *m, const char *word, size_t len, td_entry scope,
				const td_disk_piece **pc)
{
	td_stat st;
	uint64_t np = 0;
	if (!td_is_word(word, len) || td_archive_stat(m->a, scope, &st) || S_ISLNK(st.mode) ||
	    td_archive_pieces(m->a, scope, pc, &np))
		return 0;
	for (uint64_t k = 0; k < np; k++)
		if ((*pc)[k].shard >= m->n)
			return 0;
	return np;
}

/* One part of a count or search request q for the piece's entry `local`
 * (written to out when not NULL); the request's word and scope. */
typedef void (*td_part_fn)(const void *q, td_entry local, void *out, const char **w, size_t *len, td_entry *scope);

/* Split reqs[0..n) (elements of `size` bytes) into one request per piece
 * of each scope. */
static int td_split_queries(td_gmulti *m, td_split *s, const void *reqs, size_t n, size_t size, td_part_fn part)
{
	int r = td_split_init(s, m->n, n, size);
	char tmp[sizeof(td_search_req) > sizeof(td_count_req) ? sizeof(td_search_req) : sizeof(td_count_req)];
	for (size_t i = 0; i < n && r == TD_OK; i++) {
		const void *q = (const char *)reqs + i * size;
		const char *w;
		size_t len;
		td_entry scope;
		part(q, 0, NULL, &w, &len, &scope);
		const td_disk_piece *pc = NULL;
		uint64_t np = td_query_pieces(m, w, len, scope, &pc);
		s->pbeg[i] = s->npart;
		for (uint64_t k = 0; k < np && r == TD_OK; k++) {
			part(q, pc[k].local, tmp, &w, &len, &scope);
			r = td_split_add(s, pc[k].shard, tmp);
		}
	}
	return r;
}

static int td_run_count(td_gpu *g, const td_archive *a, void *reqs, size_t n, unsigned threads)
{
	return g ? td_gpu_count_batch(g, reqs, n) : td_gpu_cpu_counts(a, reqs, n, threads);
}

static void td_count_part(const void *q, td_entry local, void *out, const char **w, size_t *len, td_entry *scope)
{
	const td_count_req *c = q;
	*w = c->word;
	*len = c->len;
	*scope = c->scope;
	if (out)
		*(td_count_req *)out = (td_count_req){c->word, c->len, local, 0, 0};
}

int td_gmulti_count(td_gmulti *m, td_count_req *reqs, size_t n)
{
	td_split s;
	size_t *cpu = NULL, nc = 0;
	int r = td_split_queries(m, &s, reqs, n, sizeof *reqs, td_count_part);
	if (r == TD_OK)
		r = td_split_run(m, &s, n, td_run_count, &cpu);
	for (size_t i = 0; i < n && !r; i++) {
		uint64_t sum = 0;
		int ok = s.pbeg[i + 1] > s.pbeg[i];
		for (size_t k = s.pbeg[i]; k < s.pbeg[i + 1] && ok; k++) {
			const td_count_req *p = td_part_req(&s, &s.part[k]);
			ok = p->err == TD_OK;
			sum += p->count;
		}
		if (ok) {
			reqs[i].count = sum;
			reqs[i].err = TD_OK;
		} else {
			cpu[nc++] = i;
		}
	}
	if (!r)
		r = td_gpu_cpu_rest(m->a, m->o.cpu_threads, reqs, sizeof *reqs, cpu, nc, td_gpu_cpu_counts);
	free(cpu);
	td_split_free(&s, m->n);
	return r;
}

static int td_run_search(td_gpu *g, const td_archive *a, void *reqs, size_t n, unsigned threads)
{
	return g ? td_gpu_search_batch(g, reqs, n) : td_gpu_cpu_searches(a, reqs, n, threads);
}

static void td_search_part(const void *q, td_entry local, void *out, const char **w, size_t *len, td_entry *scope)
{
	const td_search_req *c = q;
	*w = c->word;
	*len = c->len;
	*scope = c->scope;
	if (out)
		*(td_search_req *)out = (td_search_req){c->word, c->len, local, {NULL, 0, 0}, 0};
}

int td_gmulti_search(td_gmulti *m, td_search_req *reqs, size_t n)
{
	td_split s;
	size_t *cpu = NULL, nc = 0;
	int r = td_split_queries(m, &s, reqs, n, sizeof *reqs, td_search_part);
	if (r == TD_OK)
		r = td_split_run(m, &s, n, td_run_search, &cpu);
	size_t maxp = 1;
	for (size_t i = 0; i < n && !r; i++)
		if (s.pbeg[i + 1] - s.pbeg[i] > maxp)
			maxp = s.pbeg[i + 1] - s.pbeg[i];
	td_hits *per = r ? NULL : malloc(maxp * sizeof *per);
	if (!r && !per)
		r = td_fail(TD_ENOMEM, "gpu: search batch");
	for (size_t i = 0; i < n && !r; i++) {
		td_search_req *q = &reqs[i];
		size_t np = s.pbeg[i + 1] - s.pbeg[i];
		int ok = np > 0;
		for (size_t k = 0; k < np && ok; k++) {
			const td_search_req *p = td_part_req(&s, &s.part[s.pbeg[i] + k]);
			ok = p->err == TD_OK;
			per[k] = p->hits;
		}
		if (ok) {
			q->err = td_archive_search_merge(m->a, q->scope, per, np, &q->hits);
			if (q->err == TD_ENOMEM)
				r = TD_ENOMEM;
		} else {
			cpu[nc++] = i;
		}
	}
	if (!r)
		r = td_gpu_cpu_rest(m->a, m->o.cpu_threads, reqs, sizeof *reqs, cpu, nc, td_gpu_cpu_searches);
	for (uint32_t u = 0; u < m->n; u++)
		for (size_t k = 0; s.sub && k < s.sub[u].n; k++)
			td_hits_free(&((td_search_req *)(s.sub[u].reqs + k * s.size))->hits);
	free(per);
	free(cpu);
	td_split_free(&s, m->n);
	return r;
}
