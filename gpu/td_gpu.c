/* td_gpu: host side of the GPU engine: upload, buffers, streams, batches, CPU fallback. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/stat.h>

#include <cuda_runtime_api.h>

#include "td_err.h"
#include "td_gpu.h"
#include "td_gpu_int.h"

#define TD_GPU_MAXSTREAMS 16u
#define TD_MIB (UINT64_C(1) << 20)
#define TD_RESERVE (256 * TD_MIB)      /* left free on the device by default */
#define TD_WORKSPACE (64 * TD_MIB)     /* least room kept for batch buffers */
#define TD_ROUND_MAXREQ (1u << 20)     /* extract requests per launch round */
#define TD_ROUND_MAXBYTES (512 * TD_MIB) /* extract output bytes per round at most
                                          (td_gx_req.outoff is 32 bits) */
#define TD_GPU_MAXPIECES 64u           /* launches per extract round */
#define TD_PIECE_BYTES (32 * TD_MIB)   /* default output per launch in large rounds */
#define TD_ZC_BYTES (4 * TD_MIB)       /* default td_gpu_opts.zc_bytes */
#define TD_QPART 2048u                 /* default td_gpu_opts.qpart */
#define TD_ZC_MEANLEN 512u             /* zero copy for more reads than the
                                          device has warps at once only when
                                          they average this many bytes */

typedef struct td_gbuf {
	void *p;
	size_t cap;
} td_gbuf;

/* A count or search request of either kind, as the packing reads it. */
typedef struct td_qview {
	const char *word;
	size_t len;
	td_entry scope;
} td_qview;

/* One stream's share of a count or search batch: requests [i0, i1), their
 * parts (np, from k0), word bytes (wb, from w0) and requests the kernels
 * do not take (nc, from r0 in g->rest). */
typedef struct td_qshare {
	td_gpu *g;
	const td_qview *(*get)(const void *, size_t, td_qview *);
	const void *reqs;
	int search;
	unsigned s;
	size_t i0, i1, np, nc, k0, r0;
	uint64_t wb, w0;
	int err;
} td_qshare;

struct td_gpu {
	const td_archive *a;
	td_gpu_opts o;
	int resident;
	char name[256];
	unsigned nsm;                  /* multiprocessors of the device */
	int zc;                        /* zero-copy rounds are on: kernels can write
	                                  pinned host memory at its host address
	                                  (unified addressing) and zc_bytes is
	                                  not UINT64_MAX (never) */
	double open_s;
	pthread_mutex_t lock;
	td_gdev d;
	uint8_t *dsec;                 /* device: sections, then rule masks */
	uint64_t sec_bytes;            /* bytes of dsec */
	td_gmulti *multi;              /* a version 5 archive: its shards' handles */
	uint64_t budget;               /* device bytes left for batch buffers */
	uint64_t round_bytes;          /* extract output bytes per round */
	uint64_t round_hits;           /* search hits per round */
	cudaStream_t st[TD_GPU_MAXSTREAMS];
	unsigned nst;
	cudaEvent_t ev[TD_GPU_MAXPIECES]; /* end of each extract piece */
	unsigned nev;
	cudaEvent_t pev[2 * TD_GPU_MAXSTREAMS]; /* $TD_GPU_PHASES: each stream's start and end */
	unsigned npev;
	/* the kernels of requests marked big (td_gk_big): a side stream for
	 * each stream, its fork and join events (created when g->hbig is) */
	cudaStream_t sb[TD_GPU_MAXSTREAMS];
	unsigned nsb;
	cudaEvent_t bev[2 * TD_GPU_MAXSTREAMS];
	unsigned nbev;
	td_gphase ph[2];               /* $TD_GPU_PHASES: count, search */
	/* a count or search batch begun (td_query_begin) and not yet ended:
	 * its shares, parts, requests left to the CPU, begin's error, its
	 * kind and when its packing began and ended */
	td_qshare qsh[TD_GPU_MAXSTREAMS];
	unsigned qns;
	size_t qnp, qnc;
	int qerr, qsearch;
	double qt0, qt1;
	double qtr[5];                 /* $TD_GPU_TRACE: size pass done, CPU share begun and
	                                  done, streams synced, answers unpacked */
	/* a search batch's steps after its counts (td_search_step): the
	 * stage (0: counts not yet waited for), its parts, the next part
	 * to put in a round, the round in flight */
	int qstage, pempty;
	size_t qm, sk, pk0, pk1;
	/* growable buffers: h* pinned host, d* device */
	td_gbuf hreq, dreq, hres, dres, hout, dout;
	td_gbuf hq, dq, hw, dw, hcnt, dcnt, hbase, dbase, hskip, dskip, hhits, dhits;
	td_gbuf hbi, dbi;              /* indices of the parts marked big (td_gk_big.idx) */
	td_gbuf map;                   /* plain host: packed index -> request */
	td_gbuf rest;                  /* plain host: requests the kernels do not take */
	/* cutting long counts and searches into parts (td_split_query) */
	td_pack he_root;               /* host view of E_ROOT */
	uint32_t *hfiles, *hsub;       /* host copies of d.dfs_files, d.sub */
	uint8_t *hheavy;               /* per entry: the CPU engine answers its
	                                  counts and searches (td_mark_heavy;
	                                  NULL: none) */
	uint8_t *hbig;                 /* per entry: a regular file holding a root
	                                  symbol over qbig bytes, its requests
	                                  marked big (td_gq_req.big; NULL: none) */
	uint64_t qbig;                 /* $TD_GPU_QBIG, else TD_GQ_BIG; 0: off */
	uint64_t *hcum;                /* hcum[i]: root symbols + 1 of each of
	                                  hfiles[0, i) (nentries + 1 values) */
	struct td_gfz *fz;             /* fuzzy search's vocabulary, built at first use */
	struct td_gwd *wd;             /* top words' and term vectors' grammar, built at first use */
	struct td_gpost *post;         /* ranked files' inverted index, built at first use */
	struct td_gpostg *postg;       /* format 5: the shards' files in the archive's, built at first use */
	/* blocks from td_gpu_host_alloc (pinned), under hlock */
	pthread_mutex_t hlock;
	td_gbuf *hblk;
	size_t nhblk, cap_hblk;
};

static int td_cuda_fail(cudaError_t e, const char *what)
{
	return td_fail(TD_EIO, "CUDA %s: %s", what, cudaGetErrorString(e));
}

#define CK(call)                                               \
	do {                                                   \
		cudaError_t ck_e_ = (call);                    \
		if (ck_e_ != cudaSuccess)                      \
			return td_cuda_fail(ck_e_, #call);     \
	} while (0)

void td_gpu_opts_default(td_gpu_opts *o)
{
	memset(o, 0, sizeof *o);
	o->device = 0;
	o->devices = TD_GPU_DEVICES_ALL;
	o->mem_cap = 0;
	o->cpu_threads = 0;
	o->nstreams = 4;
	o->xchunk = TD_GX_CHUNK;
	o->xcoop = TD_GX_COOP;
	o->piece_bytes = TD_PIECE_BYTES;
	o->zc_bytes = TD_ZC_BYTES;
	o->qpart = TD_QPART;
}

static int td_avail_cached = -1;
static pthread_once_t td_avail_once = PTHREAD_ONCE_INIT;

static void td_avail_probe(void)
{
	int n = 0;
	td_avail_cached = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

static pthread_t td_warm_th;
static int td_warm_on;
static pthread_once_t td_warm_once = PTHREAD_ONCE_INIT;

static void *td_warm_thread(void *arg)
{
	(void)arg;
	if (cudaSetDevice(0) == cudaSuccess)
		cudaFree(0); /* creates the primary context, shared by every thread */
	return NULL;
}

/* Registered before the thread starts CUDA (whose own exit handler comes
 * later, so runs earlier): the context is made before it is torn down. */
static void td_warm_join(void)
{
	if (td_warm_on)
		pthread_join(td_warm_th, NULL);
	td_warm_on = 0;
}

static void td_warm_begin(void)
{
	if (atexit(td_warm_join) == 0)
		td_warm_on = pthread_create(&td_warm_th, NULL, td_warm_thread, NULL) == 0;
}

void td_gpu_warm_start(void)
{
	pthread_once(&td_warm_once, td_warm_begin);
}

int td_gpu_available(void)
{
	pthread_once(&td_avail_once, td_avail_probe);
	return td_avail_cached;
}

int td_gpu_unit(td_gpu *g, td_gunit *u)
{
	if (!g || !g->resident || g->multi)
		return 0;
	u->a = g->a;
	u->nwords = g->d.nwords;
	u->device = g->o.device;
	u->stream = g->st[0];
	u->lock = &g->lock;
	u->fz = &g->fz;
	u->wd = &g->wd;
	u->post = &g->post;
	u->files = g->hfiles;
	u->sub = g->hsub;
	return 1;
}

struct td_gpostg **td_gpu_postg(td_gpu *g)
{
	return g && g->resident && g->multi ? &g->postg : NULL;
}

td_gmulti *td_gpu_multi(td_gpu *g)
{
	return g && g->resident ? g->multi : NULL;
}

unsigned td_gpu_cpu_threads(const td_gpu *g)
{
	return g->o.cpu_threads;
}

const td_archive *td_gpu_archive(const td_gpu *g)
{
	return g->a;
}

int td_gpu_resident(const td_gpu *g)
{
	return g && g->resident;
}

const char *td_gpu_device_name(const td_gpu *g)
{
	return g && g->resident ? g->name : "cpu fallback";
}

double td_gpu_open_seconds(const td_gpu *g)
{
	return g ? g->open_s : 0.0;
}

/* Make b hold at least `need` bytes (contents are not kept). */
static int td_grow(td_gbuf *b, size_t need, int kind)
{
	if (need <= b->cap)
		return TD_OK;
	size_t cap = b->cap * 2 > need ? b->cap * 2 : need;
	if (cap < 4096)
		cap = 4096;
	void *p = NULL;
	if (kind == 0) { /* pinned host */
		if (b->p)
			cudaFreeHost(b->p);
		b->p = NULL;
		b->cap = 0;
		CK(cudaHostAlloc(&p, cap, cudaHostAllocMapped));
	} else if (kind == 1) { /* device */
		if (b->p)
			cudaFree(b->p);
		b->p = NULL;
		b->cap = 0;
		CK(cudaMalloc(&p, cap));
	} else { /* plain host */
		free(b->p);
		b->p = NULL;
		b->cap = 0;
		p = malloc(cap);
		if (!p)
			return td_fail(TD_ENOMEM, "gpu: host buffer of %zu bytes", cap);
	}
	b->p = p;
	b->cap = cap;
	return TD_OK;
}

static void td_gbuf_free(td_gbuf *b, int kind)
{
	if (b->p) {
		if (kind == 0)
			cudaFreeHost(b->p);
		else if (kind == 1)
			cudaFree(b->p);
		else
			free(b->p);
	}
	b->p = NULL;
	b->cap = 0;
}

/* ---- open / close ---- */

typedef struct td_secplan {
	unsigned id;
	int packed;
	td_pack *dev;                  /* where the device view goes (packed) */
	const void *host;
	uint64_t size;
	uint64_t off;                  /* offset in the device block */
	td_pack hview;
} td_secplan;

static int td_need(const td_pack *p, uint64_t n, const char *what)
{
	if (p->n < n)
		return td_fail(TD_ECORRUPT, "section '%s': %llu values, %llu needed", what,
			       (unsigned long long)p->n, (unsigned long long)n);
	return TD_OK;
}

/* Build d.root_pos at pos (td_gk_root_pos); a root that does not add up
 * leaves it NULL (extract then seeks by the samples and reports). */
static int td_build_root_pos(td_gpu *g, uint64_t *pos)
{
	int bad = 0, *dbad = NULL;
	cudaError_t e = cudaMalloc((void **)&dbad, sizeof(int));
	if (e == cudaSuccess)
		e = cudaMemset(dbad, 0, sizeof(int));
	if (e == cudaSuccess)
		e = (cudaError_t)td_gk_root_pos(&g->d, pos, dbad, NULL);
	if (e == cudaSuccess)
		e = cudaMemcpy(&bad, dbad, sizeof(int), cudaMemcpyDeviceToHost);
	cudaFree(dbad);
	if (e != cudaSuccess)
		return td_cuda_fail(e, "root offsets");
	if (!bad)
		g->d.root_pos = pos;
	return TD_OK;
}

/* Sections uploaded, in this order; the PL_* names index the plan. */
enum {
	PL_E_MODE, PL_E_SIZE, PL_E_ROOT, PL_E_GSTART, PL_E_CHILD, PL_WORD_OFF, PL_WORD_FREQ, PL_OTHER_OFF,
	PL_RULE_SYMS, PL_RULE_LEN, PL_ROOT_SYMS, PL_ROOT_SAMPLES, PL_RULE_SAMPLES, PL_WORDS, PL_OTHER,
	PL_RULE_GROUPS, PL_N
};

/* Where each part of the device block goes (offsets in g->dsec). */
typedef struct td_layout {
	td_secplan plan[PL_N];
	uint64_t mask_off, dfs_off;    /* rule signatures, file order */
	uint64_t rjt_off;              /* rule groups by rule number; 0: none */
	uint64_t rrhs_off;             /* every rule's right-hand side; 0: none */
	uint32_t *rxo;                 /* host: short rules' expansion offsets; NULL: none kept */
	uint64_t rx_off_at, rx_pool_at;
	uint64_t pos_at;               /* root offsets; 0: not kept */
	uint64_t total;
} td_layout;

/* Phase 1: the meta counts into g->d. TD_OK, 1 (an archive version the
 * kernels do not read: CPU fallback), or an error. */
static int td_upload_meta(td_gpu *g, const td_archive *a)
{
	uint64_t msz = 0;
	const td_disk_meta *m = td_archive_section(a, TD_SEC_META, &msz);
	if (!m || msz < sizeof *m)
		return td_fail(TD_ECORRUPT, "section 'meta': missing or short");
	td_gdev *d = &g->d;
	d->xchunk = g->o.xchunk;
	d->xcoop = g->o.xcoop == UINT32_MAX ? 0 : g->o.xcoop;
	d->nentries = m->nentries;
	d->nwords = m->nwords;
	d->nother = m->nother;
	d->nrules = m->nrules;
	d->ngroups = m->ngroups;
	d->nroot = m->nroot;
	d->sample_shift = m->sample_shift;
	d->nsamples = m->nsamples;
	if (d->nentries == 0 || d->nentries > UINT32_MAX || d->nrules > UINT32_MAX)
		return td_fail(TD_ECORRUPT, "section 'meta': bad counts");
	if (td_archive_version(a) < 3)
		return 1; /* 16-byte tiles the kernels do not read: CPU fallback */
	if (td_archive_version(a) >= TD_VERSION_SHARDED)
		return 1; /* shards (td_format.h): the CPU engine serves them for now */
	return TD_OK;
}

/* Phase 2: the sections' host views, their checks against the meta counts,
 * and their places in the device block (L->total so far). */
static int td_plan_sections(td_gdev *d, const td_archive *a, td_layout *L)
{
	static const unsigned ids[PL_N] = {
		TD_SEC_E_MODE, TD_SEC_E_SIZE, TD_SEC_E_ROOT, TD_SEC_E_GSTART, TD_SEC_E_CHILD,
		TD_SEC_WORD_OFF, TD_SEC_WORD_FREQ, TD_SEC_OTHER_OFF, TD_SEC_RULE_SYMS, TD_SEC_RULE_LEN,
		TD_SEC_ROOT_SYMS, TD_SEC_ROOT_SAMPLES, TD_SEC_RULE_SAMPLES, TD_SEC_WORDS, TD_SEC_OTHER,
		TD_SEC_RULE_GROUPS,
	};
	td_pack *dev[PL_N] = {
		&d->e_mode, &d->e_size, &d->e_root, &d->e_gstart, &d->e_child, &d->word_off, &d->word_freq,
		&d->other_off, &d->rule_syms, &d->rule_len, &d->root_syms, &d->root_samples, &d->rule_samples,
		NULL, NULL, NULL,
	};
	for (size_t i = 0; i < PL_N; i++) {
		td_secplan *s = &L->plan[i];
		*s = (td_secplan){ .id = ids[i], .packed = dev[i] != NULL, .dev = dev[i] };
		/* sections go up decoded (some may be stored as zstd frames) */
		s->host = td_archive_bytes(a, s->id, &s->size);
		if (!s->host) {
			if (s->packed)
				return td_fail(TD_ECORRUPT, "section '%s' is missing", td_section_name(s->id));
			s->size = 0;
		}
		if (s->packed) {
			int r = td_pack_view(&s->hview, s->host, s->size);
			if (r)
				return r;
		}
		s->off = L->total;
		L->total += (s->size + 16 + 255) & ~UINT64_C(255);
	}
	const td_secplan *p = L->plan;
	int r;
	if ((r = td_need(&p[PL_E_MODE].hview, d->nentries, "e_mode")) ||
	    (r = td_need(&p[PL_E_SIZE].hview, d->nentries, "e_size")) ||
	    (r = td_need(&p[PL_E_ROOT].hview, d->nentries + 1, "e_root")) ||
	    (r = td_need(&p[PL_E_GSTART].hview, d->nentries, "e_gstart")) ||
	    (r = td_need(&p[PL_E_CHILD].hview, d->nentries + 1, "e_child")) ||
	    (r = td_need(&p[PL_WORD_OFF].hview, d->nwords + 1, "word_off")) ||
	    (r = td_need(&p[PL_WORD_FREQ].hview, d->nwords, "word_freq")) ||
	    (r = td_need(&p[PL_OTHER_OFF].hview, d->nother + 1, "other_off")) ||
	    (r = td_need(&p[PL_RULE_LEN].hview, d->nrules, "rule_len")))
		return r;
	if (p[PL_RULE_GROUPS].size < d->ngroups * sizeof(td_disk_group))
		return td_fail(TD_ECORRUPT, "section 'rule_groups': shorter than %llu groups",
			       (unsigned long long)d->ngroups);
	return TD_OK;
}

/* Phase 3: room for what is built on the device beside the sections (rule
 * signatures, file order; short rules' expansions and root offsets when
 * they fit in avail). TD_OK, 1 (the required parts do not fit: CPU
 * fallback). L->rxo is malloc'd when expansions are kept. */
static int td_plan_extras(const td_gpu *g, td_layout *L, uint64_t avail)
{
	const td_gdev *d = &g->d;
	if (td_gk_mask_w() != TD_MASK_W) /* one header, two compilers: a -D that reached only one */
		return td_fail(TD_EINVAL, "GPU build: the kernels' signatures are %u words, the host's %u",
			       td_gk_mask_w(), (unsigned)TD_MASK_W);
	L->mask_off = L->total;
	L->total += (8 * TD_MASK_W * d->nrules + 256) & ~UINT64_C(255);
	L->dfs_off = L->total;
	L->total += (12 * d->nentries + 256) & ~UINT64_C(255);
	if (L->total + TD_WORKSPACE > avail)
		return 1; /* does not fit: CPU fallback */
	/* expansions of short rules, if they fit beside the rest */
	uint32_t *rxo = malloc(4 * (d->nrules + 1));
	uint64_t rx_bytes = 0;
	if (rxo) {
		const td_pack *rule_len = &L->plan[PL_RULE_LEN].hview;
		for (uint64_t i = 0; i < d->nrules; i++) {
			uint64_t l = td_pack_get(rule_len, i);
			rxo[i] = (uint32_t)rx_bytes;
			if (l <= TD_RX_MAX && rx_bytes + l <= TD_RX_CAP)
				rx_bytes += l;
		}
		rxo[d->nrules] = (uint32_t)rx_bytes;
		uint64_t off_bytes = (4 * (d->nrules + 1) + 256) & ~UINT64_C(255);
		uint64_t need = off_bytes + ((rx_bytes + 256) & ~UINT64_C(255));
		if (rx_bytes && L->total + need + TD_WORKSPACE <= avail) {
			L->rx_off_at = L->total;
			L->rx_pool_at = L->total + off_bytes;
			L->total += need;
			L->rxo = rxo;
		} else {
			free(rxo);
		}
	}

	/* every root symbol's offset, if it fits beside the rest (and the
	 * root holds the symbols the meta counts: reads index it by the
	 * file's root range, which is checked against ROOT_SYMS) */
	if (g->o.seek_index >= 0 && L->plan[PL_ROOT_SYMS].hview.n == d->nroot &&
	    L->total + 8 * (d->nroot + 1) + 256 + TD_WORKSPACE <= avail) {
		L->pos_at = L->total;
		L->total += (8 * (d->nroot + 1) + 256) & ~UINT64_C(255);
	}

	/* the rule index (td_upload_rule_index), last: what fits of it */
	uint64_t rjt_bytes = 4 * td_rule_jumps_n(d->nrules);
	if (!getenv("TD_GPU_NORJT") && L->total + rjt_bytes + 256 + TD_WORKSPACE <= avail) {
		L->rjt_off = L->total;
		L->total += (rjt_bytes + 256) & ~UINT64_C(255);
	}
	if (!getenv("TD_GPU_NORRHS") && d->nrules &&
	    td_rule_rhs_fit(L->plan[PL_RULE_GROUPS].host, d->ngroups, L->plan[PL_RULE_SYMS].hview.n) &&
	    L->total + 8 * d->nrules + 256 + TD_WORKSPACE <= avail) {
		L->rrhs_off = L->total;
		L->total += (8 * d->nrules + 256) & ~UINT64_C(255);
	}
	return TD_OK;
}

/* Part of phase 4: the rule groups' jump table (td_gdev.rjt) and every
 * rule's right-hand side (td_gdev.rrhs), where L places them and the
 * groups allow (the CPU engine checked them at open; a table the helpers
 * refuse stays NULL: td_rhs then searches the groups). */
static int td_upload_rule_index(td_gpu *g, const td_layout *L)
{
	td_gdev *d = &g->d;
	const td_disk_group *grp = L->plan[PL_RULE_GROUPS].host;
	cudaError_t e = cudaSuccess;
	uint64_t n = td_rule_jumps_n(d->nrules);
	uint32_t *jt = L->rjt_off && grp ? malloc(4 * n) : NULL;
	if (jt && td_rule_jumps(grp, d->ngroups, d->nrules, jt) == 0) {
		e = cudaMemcpy(g->dsec + L->rjt_off, jt, 4 * n, cudaMemcpyHostToDevice);
		if (e == cudaSuccess)
			d->rjt = (const uint32_t *)(g->dsec + L->rjt_off);
	}
	free(jt);
	if (e != cudaSuccess)
		return td_cuda_fail(e, "rule jump table");
	uint64_t *w = L->rrhs_off && grp && d->nrules ? malloc(8 * d->nrules) : NULL;
	if (w && td_rule_rhs_words(grp, d->ngroups, d->nrules, d->rule_syms.n, w) == 0) {
		e = cudaMemcpy(g->dsec + L->rrhs_off, w, 8 * d->nrules, cudaMemcpyHostToDevice);
		if (e == cudaSuccess)
			d->rrhs = (const uint64_t *)(g->dsec + L->rrhs_off);
	}
	free(w);
	return e == cudaSuccess ? TD_OK : td_cuda_fail(e, "rule right-hand sides");
}

/* Phase 4: allocate the device block (g->dsec), copy the sections up and
 * point the device views at them. */
static int td_copy_sections(td_gpu *g, const td_layout *L)
{
	void *dp = NULL;
	cudaError_t me = cudaMalloc(&dp, L->total);
	if (me != cudaSuccess)
		return td_cuda_fail(me, "cudaMalloc");
	g->dsec = dp;
	CK(cudaMemset(dp, 0, L->total));
	for (size_t i = 0; i < PL_N; i++) {
		const td_secplan *s = &L->plan[i];
		uint8_t *dst = g->dsec + s->off;
		if (s->size)
			CK(cudaMemcpy(dst, s->host, s->size, cudaMemcpyHostToDevice));
		if (s->packed) {
			td_pack v = s->hview;
			v.tiles = (const uint64_t *)(dst + ((const uint8_t *)s->hview.tiles - (const uint8_t *)s->host));
			v.groups = (const uint32_t *)(dst + ((const uint8_t *)s->hview.groups - (const uint8_t *)s->host));
			v.data = dst + (s->hview.data - (const uint8_t *)s->host);
			*s->dev = v;
		}
	}
	td_gdev *d = &g->d;
	d->words = g->dsec + L->plan[PL_WORDS].off;
	d->words_size = L->plan[PL_WORDS].size;
	d->other = g->dsec + L->plan[PL_OTHER].off;
	d->other_size = L->plan[PL_OTHER].size;
	d->groups = (const td_disk_group *)(g->dsec + L->plan[PL_RULE_GROUPS].off);
	d->rule_mask = (const uint64_t *)(g->dsec + L->mask_off);
	d->rx_off = NULL;
	d->rx_pool = NULL;
	d->root_pos = NULL;
	d->rjt = NULL;
	d->rrhs = NULL;
	return td_upload_rule_index(g, L);
}

/* Phase 5: the short rules' expansions (L->rxo, when kept), written by the
 * device; a grammar that does not add up keeps none. */
static int td_build_rule_expansions(td_gpu *g, const td_layout *L)
{
	if (!L->rxo)
		return TD_OK;
	td_gdev *d = &g->d;
	cudaError_t e = cudaMemcpy(g->dsec + L->rx_off_at, L->rxo, 4 * (d->nrules + 1), cudaMemcpyHostToDevice);
	if (e != cudaSuccess)
		return td_cuda_fail(e, "rule expansions");
	int *dbad = NULL, bad = 0;
	CK(cudaMalloc((void **)&dbad, sizeof(int)));
	d->rx_off = (const uint32_t *)(g->dsec + L->rx_off_at);
	d->rx_pool = g->dsec + L->rx_pool_at;
	e = cudaMemset(dbad, 0, sizeof(int));
	if (e == cudaSuccess)
		e = (cudaError_t)td_gk_rx_fill(d, g->dsec + L->rx_pool_at, dbad, NULL);
	if (e == cudaSuccess)
		e = cudaMemcpy(&bad, dbad, sizeof(int), cudaMemcpyDeviceToHost);
	cudaFree(dbad);
	if (e != cudaSuccess)
		return td_cuda_fail(e, "rule expansions");
	if (bad) { /* a grammar that does not add up: extract walks it and reports */
		d->rx_off = NULL;
		d->rx_pool = NULL;
	}
	return TD_OK;
}

/* Phase 6: the regular files in td_search order, built on the host. */
static int td_upload_file_order(td_gpu *g, const td_archive *a, uint64_t dfs_off)
{
	td_gdev *d = &g->d;
	uint32_t *files = malloc(12 * d->nentries);
	if (!files)
		return td_fail(TD_ENOMEM, "gpu: file order");
	uint32_t *sub = files + d->nentries;
	int r = td_gpu_file_order(a, (uint32_t)d->nentries, files, sub);
	if (r) {
		free(files);
		return r;
	}
	cudaError_t ce = cudaMemcpy(g->dsec + dfs_off, files, 12 * d->nentries, cudaMemcpyHostToDevice);
	if (ce != cudaSuccess) {
		free(files);
		return td_cuda_fail(ce, "file order upload");
	}
	/* kept on the host to cut long requests into parts */
	uint64_t *cum = malloc(8 * (d->nentries + 1));
	if (!cum) {
		free(files);
		return td_fail(TD_ENOMEM, "gpu: file order");
	}
	uint32_t nf = sub[2 * TD_ROOT + 1];
	cum[0] = 0;
	for (uint32_t i = 0; i < d->nentries; i++) {
		uint64_t roots = 0;
		if (i < nf) {
			uint64_t lo = td_pack_get(&g->he_root, files[i]), hi = td_pack_get(&g->he_root, (uint64_t)files[i] + 1);
			roots = hi > lo ? hi - lo : 0;
		}
		cum[i + 1] = cum[i] + (i < nf ? roots + 1 : 0);
	}
	g->hfiles = files;
	g->hsub = sub;
	g->hcum = cum;
	d->dfs_files = (const uint32_t *)(g->dsec + dfs_off);
	d->sub = (const uint32_t *)(g->dsec + dfs_off) + d->nentries;
	return TD_OK;
}

/* Phase 7: rule signatures: OR of the children's, iterated to the fixpoint
 * (at most max_depth + 1 passes on a well-formed grammar). */
static int td_build_rule_masks(td_gpu *g, uint64_t mask_off)
{
	int *dchanged = NULL, changed = 1;
	CK(cudaMalloc((void **)&dchanged, sizeof(int)));
	unsigned pass = 0;
	int err = TD_OK;
	while (changed && err == TD_OK) {
		if (pass++ > 4 * TD_MAXDEPTH + 8) {
			err = td_fail(TD_ECORRUPT, "rules nest deeper than %u levels", TD_MAXDEPTH);
			break;
		}
		cudaError_t e = cudaMemset(dchanged, 0, sizeof(int));
		if (e == cudaSuccess)
			e = (cudaError_t)td_gk_build_masks(&g->d, (uint64_t *)(g->dsec + mask_off), dchanged, NULL);
		if (e == cudaSuccess)
			e = cudaMemcpy(&changed, dchanged, sizeof(int), cudaMemcpyDeviceToHost);
		if (e != cudaSuccess)
			err = td_cuda_fail(e, "rule signatures");
	}
	cudaFree(dchanged);
	return err;
}

/* The regular files of which a root symbol expands to more than B bytes
 * (B > 0), marked in a new array of one byte an entry at *out (left NULL
 * when none is). td_mark_heavy: $TD_GPU_HEAVY=B (bytes; unset or 0: off)
 * marks them in g->hheavy, and the CPU engine answers counts and searches
 * over them (td_gpu_takes); and those over g->qbig bytes in g->hbig,
 * whose requests are marked big (td_gq_req.big): their own kernel walks
 * such a symbol with the whole warp instead of one lane. */
static int td_mark_files_over(td_gpu *g, const td_layout *L, uint64_t B, uint8_t **out)
{
	const td_gdev *d = &g->d;
	const td_pack *rs = &L->plan[PL_ROOT_SYMS].hview, *rl = &L->plan[PL_RULE_LEN].hview;
	if (!B || rs->n != d->nroot)
		return TD_OK;
	uint8_t *m = calloc(d->nentries ? d->nentries : 1, 1);
	if (!m)
		return td_fail(TD_ENOMEM, "gpu: files with large root symbols");
	const uint64_t t = 2 * d->nwords + d->nother;
	size_t any = 0;
	for (uint32_t e = 0; e < d->nentries; e++) {
		uint64_t lo = td_pack_get(&g->he_root, e), hi = td_pack_get(&g->he_root, (uint64_t)e + 1);
		uint32_t mode = (uint32_t)td_pack_get(&L->plan[PL_E_MODE].hview, e);
		if ((mode & S_IFMT) != S_IFREG || hi > d->nroot)
			continue;
		for (uint64_t k = lo; k < hi && !m[e]; k++) {
			uint64_t sy = td_pack_get(rs, k);
			m[e] = sy >= t && sy - t < d->nrules && td_pack_get(rl, sy - t) > B;
		}
		any += m[e];
	}
	if (!any) {
		free(m);
		m = NULL;
	}
	*out = m;
	return TD_OK;
}

static int td_mark_heavy(td_gpu *g, const td_layout *L)
{
	const char *s = getenv("TD_GPU_HEAVY");
	int r = td_mark_files_over(g, L, s && *s ? strtoull(s, NULL, 10) : 0, &g->hheavy);
	s = getenv("TD_GPU_QBIG");
	g->qbig = s && *s ? strtoull(s, NULL, 10) : TD_GQ_BIG;
	return r ? r : td_mark_files_over(g, L, g->qbig, &g->hbig);
}

/* Make archive a resident on the device within avail bytes: TD_OK, 1 (it
 * cannot be: CPU fallback, not an error), or an error (g->dsec may then be
 * set; td_gpu_close frees it). */
static int td_gpu_upload(td_gpu *g, const td_archive *a, uint64_t avail)
{
	td_layout L;
	memset(&L, 0, sizeof L);
	int r = td_upload_meta(g, a);
	if (r == TD_OK)
		r = td_plan_sections(&g->d, a, &L);
	if (r == TD_OK) {
		g->he_root = L.plan[PL_E_ROOT].hview;
		r = td_plan_extras(g, &L, avail);
	}
	if (r == TD_OK)
		r = td_copy_sections(g, &L);
	if (r == TD_OK) {
		g->sec_bytes = L.total;
		g->budget = avail - L.total;
		r = td_build_rule_expansions(g, &L);
	}
	free(L.rxo);
	if (r == TD_OK && L.pos_at)
		r = td_build_root_pos(g, (uint64_t *)(g->dsec + L.pos_at));
	if (r == TD_OK)
		r = td_upload_file_order(g, a, L.dfs_off);
	if (r == TD_OK)
		r = td_build_rule_masks(g, L.mask_off);
	if (r == TD_OK)
		r = td_mark_heavy(g, &L);
	return r;
}

/* Defaults and bounds applied to the caller's options. */
static void td_opts_norm(const td_gpu_opts *opts, td_gpu_opts *o)
{
	if (opts)
		*o = *opts;
	else
		td_gpu_opts_default(o);
	if (o->nstreams == 0)
		o->nstreams = 4;
	if (o->nstreams > TD_GPU_MAXSTREAMS)
		o->nstreams = TD_GPU_MAXSTREAMS;
	if (o->xchunk == 0)
		o->xchunk = TD_GX_CHUNK;
	o->xchunk = o->xchunk < 16 ? 16 : o->xchunk > TD_MIB ? (uint32_t)TD_MIB : o->xchunk;
	if (o->xcoop == 0)
		o->xcoop = TD_GX_COOP;
	if (o->xseg) { /* a power of two in [TD_GX_SEG_MIN, 1 MiB] */
		uint32_t s = TD_GX_SEG_MIN;
		while (s < o->xseg && s < TD_MIB)
			s <<= 1;
		o->xseg = s;
	}
	if (o->piece_bytes == 0)
		o->piece_bytes = TD_PIECE_BYTES;
	if (o->zc_bytes == 0)
		o->zc_bytes = TD_ZC_BYTES;
	if (o->qpart == 0)
		o->qpart = TD_QPART;
}

int td_gpu_device_count(void)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return n;
}

uint64_t td_gpu_avail(const td_gpu_opts *o, int dev)
{
	size_t fre = 0, tot = 0;
	if (cudaSetDevice(dev) != cudaSuccess || cudaMemGetInfo(&fre, &tot) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return o->mem_cap ? (o->mem_cap < fre ? o->mem_cap : fre) : (fre > TD_RESERVE ? fre - TD_RESERVE : 0);
}

int td_gpu_open_dev(const td_archive *a, const td_gpu_opts *o, uint64_t avail, uint64_t ws, td_gpu **out,
		    uint64_t *used)
{
	double t0 = td_now();
	*out = NULL;
	if (used)
		*used = 0;
	cudaError_t e;
	CK(cudaSetDevice(o->device));
	/* best effort: a context made earlier in this process may keep its
	 * mode (the blocking events below still sleep); a refusal must not
	 * linger as the thread's last error, which the launchers return */
	if (o->blocking_sync &&
	    cudaSetDeviceFlags(o->blocking_sync == 1 ? cudaDeviceScheduleBlockingSync : cudaDeviceScheduleYield) != cudaSuccess)
		(void)cudaGetLastError();

	td_gpu *g = calloc(1, sizeof *g);
	if (!g)
		return td_fail(TD_ENOMEM, "gpu: handle");
	g->a = a;
	g->o = *o;
	pthread_mutex_init(&g->lock, NULL);
	pthread_mutex_init(&g->hlock, NULL);
	struct cudaDeviceProp prop;
	int r = TD_OK;
	if ((e = cudaGetDeviceProperties(&prop, o->device)) != cudaSuccess) {
		r = td_cuda_fail(e, "device properties");
		goto fail;
	}
	memcpy(g->name, prop.name, sizeof g->name - 1);
	g->nsm = prop.multiProcessorCount > 0 ? (unsigned)prop.multiProcessorCount : 1;
	g->zc = prop.unifiedAddressing && prop.canMapHostMemory && o->zc_bytes != UINT64_MAX;
	if (avail == UINT64_MAX) {
		size_t fre = 0, tot = 0;
		if ((e = cudaMemGetInfo(&fre, &tot)) != cudaSuccess) {
			r = td_cuda_fail(e, "memory info");
			goto fail;
		}
		avail = o->mem_cap ? (o->mem_cap < fre ? o->mem_cap : fre) : (fre > TD_RESERVE ? fre - TD_RESERVE : 0);
	}
	r = td_gpu_upload(g, a, avail);
	if (r < 0)
		goto fail;
	if (r > 0) { /* too large: CPU fallback, not an error */
		g->resident = 0;
		g->open_s = td_now() - t0;
		*out = g;
		return TD_OK;
	}
	g->resident = 1;
	if (ws && g->budget > ws)
		g->budget = ws;
	g->nst = o->nstreams;
	for (unsigned i = 0; i < g->nst; i++)
		if ((e = cudaStreamCreateWithFlags(&g->st[i], cudaStreamNonBlocking)) != cudaSuccess) {
			g->nst = i;
			r = td_cuda_fail(e, "stream");
			goto fail;
		}
	for (unsigned i = 0; i < TD_GPU_MAXPIECES; i++)
		if ((e = cudaEventCreateWithFlags(&g->ev[i], cudaEventDisableTiming | (o->blocking_sync == 1 ? cudaEventBlockingSync : 0))) != cudaSuccess) {
			g->nev = i;
			r = td_cuda_fail(e, "event");
			goto fail;
		}
	g->nev = TD_GPU_MAXPIECES;
	for (unsigned i = 0; g->hbig && i < g->nst; i++) {
		if ((e = cudaStreamCreateWithFlags(&g->sb[i], cudaStreamNonBlocking)) != cudaSuccess) {
			r = td_cuda_fail(e, "stream");
			goto fail;
		}
		g->nsb = i + 1;
	}
	for (unsigned i = 0; g->hbig && i < 2 * g->nst; i++) {
		if ((e = cudaEventCreateWithFlags(&g->bev[i], cudaEventDisableTiming)) != cudaSuccess) {
			r = td_cuda_fail(e, "event");
			goto fail;
		}
		g->nbev = i + 1;
	}
	for (unsigned i = 0; td_gpu_phases_on() && i < 2 * g->nst; i++) {
		if ((e = cudaEventCreate(&g->pev[i])) != cudaSuccess) {
			r = td_cuda_fail(e, "event");
			goto fail;
		}
		g->npev = i + 1;
	}
	/* per-round caps: output bytes (pinned + device copies) and hits */
	g->round_bytes = g->budget / 3 < TD_ROUND_MAXBYTES ? g->budget / 3 : TD_ROUND_MAXBYTES;
	g->round_hits = g->budget / 4 / sizeof(td_hit);
	if (g->round_hits > (UINT64_C(1) << 25))
		g->round_hits = UINT64_C(1) << 25;
	const char *rh = getenv("TD_GPU_ROUND_HITS"); /* the tests: smaller rounds */
	if (rh && *rh && strtoull(rh, NULL, 10) > 0 && strtoull(rh, NULL, 10) < g->round_hits)
		g->round_hits = strtoull(rh, NULL, 10);
	if (used)
		*used = g->sec_bytes + g->budget;
	g->open_s = td_now() - t0;
	*out = g;
	return TD_OK;
fail:
	td_gpu_close(g);
	return r;
}

int td_gpu_open(const td_archive *a, const td_gpu_opts *opts, td_gpu **out)
{
	double t0 = td_now();
	*out = NULL;
	if (!a)
		return td_fail(TD_EINVAL, "gpu: no archive");
	int cerr = td_archive_check_data(a); /* what is uploaded must be what was written */
	if (cerr)
		return cerr;
	td_gpu_opts o;
	td_opts_norm(opts, &o);
	int ndev = 0;
	cudaError_t e = cudaGetDeviceCount(&ndev);
	if (e != cudaSuccess)
		return td_fail(TD_ENOGPU, "no GPU: %s", cudaGetErrorString(e));
	if (ndev == 0)
		return td_fail(TD_ENOGPU, "no GPU: no CUDA device");
	/* the devices to use, ascending */
	int devs[64];
	unsigned nd = 0;
	if (o.devices == 0) {
		if (o.device < 0 || o.device >= ndev)
			return td_fail(TD_EINVAL, "gpu: device %d does not exist (%d found)", o.device, ndev);
		devs[nd++] = o.device;
	} else {
		for (int d = 0; d < 64; d++) {
			if (!(o.devices >> d & 1))
				continue;
			if (d >= ndev) {
				if (o.devices == TD_GPU_DEVICES_ALL)
					break;
				return td_fail(TD_EINVAL, "gpu: device %d does not exist (%d found)", d, ndev);
			}
			devs[nd++] = d;
		}
	}
	int first = devs[0];
	for (unsigned i = 0; i < nd; i++)
		if (devs[i] == o.device)
			first = o.device;
	o.device = first;
	if (td_archive_version(a) < TD_VERSION_SHARDED) { /* one unit: on `device` if chosen, else the first */
		int r = td_gpu_open_dev(a, &o, UINT64_MAX, 0, out, NULL);
		if (r == TD_OK)
			(*out)->open_s = td_now() - t0;
		return r;
	}
	/* shards: a handle of its own over one sub-handle per resident shard */
	td_gpu *g = calloc(1, sizeof *g);
	if (!g)
		return td_fail(TD_ENOMEM, "gpu: handle");
	g->a = a;
	g->o = o;
	pthread_mutex_init(&g->lock, NULL);
	pthread_mutex_init(&g->hlock, NULL);
	int r = td_gmulti_open(a, &o, devs, nd, &g->multi);
	if (r) {
		td_gpu_close(g);
		return r;
	}
	uint32_t res = 0;
	unsigned used = 0;
	td_gmulti_residency(g->multi, &res, NULL, &used);
	g->resident = res > 0;
	if (used > 1)
		snprintf(g->name, sizeof g->name, "%u x %s", used, td_gmulti_name(g->multi));
	else
		snprintf(g->name, sizeof g->name, "%s", td_gmulti_name(g->multi));
	g->open_s = td_now() - t0;
	*out = g;
	return TD_OK;
}

void td_gpu_residency(const td_gpu *g, uint32_t *resident, uint32_t *units, unsigned *ndevices)
{
	uint32_t r = g && g->resident, u = g ? 1 : 0;
	unsigned nd = r;
	if (g && g->multi)
		td_gmulti_residency(g->multi, &r, &u, &nd);
	if (resident)
		*resident = r;
	if (units)
		*units = u;
	if (ndevices)
		*ndevices = nd;
}

void td_gpu_close(td_gpu *g)
{
	if (!g)
		return;
	td_gmulti_close(g->multi);
	if (g->resident || g->dsec)
		cudaSetDevice(g->o.device);
	td_gfz_free(g->fz);
	td_gwd_free(g->wd);
	td_gpost_free(g->post);
	td_gpostg_free(g->postg);
	for (unsigned i = 0; i < g->nst; i++)
		cudaStreamDestroy(g->st[i]);
	for (unsigned i = 0; i < g->nev; i++)
		cudaEventDestroy(g->ev[i]);
	for (unsigned i = 0; i < g->npev; i++)
		cudaEventDestroy(g->pev[i]);
	for (unsigned i = 0; i < g->nsb; i++)
		cudaStreamDestroy(g->sb[i]);
	for (unsigned i = 0; i < g->nbev; i++)
		cudaEventDestroy(g->bev[i]);
	td_gbuf *pin[] = {&g->hreq, &g->hres, &g->hout, &g->hq, &g->hw, &g->hcnt, &g->hbase, &g->hskip, &g->hhits, &g->hbi};
	td_gbuf *dev[] = {&g->dreq, &g->dres, &g->dout, &g->dq, &g->dw, &g->dcnt, &g->dbase, &g->dskip, &g->dhits, &g->dbi};
	for (size_t i = 0; i < sizeof pin / sizeof pin[0]; i++)
		td_gbuf_free(pin[i], 0);
	for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
		td_gbuf_free(dev[i], 1);
	td_gbuf_free(&g->map, 2);
	td_gbuf_free(&g->rest, 2);
	free(g->hfiles);
	free(g->hcum);
	free(g->hheavy);
	free(g->hbig);
	if (g->dsec)
		cudaFree(g->dsec);
	for (size_t i = 0; i < g->nhblk; i++)
		cudaFreeHost(g->hblk[i].p);
	free(g->hblk);
	pthread_mutex_destroy(&g->hlock);
	pthread_mutex_destroy(&g->lock);
	free(g);
}

/* ---- host memory for results ---- */

void *td_gpu_host_alloc(td_gpu *g, size_t bytes)
{
	if (!bytes)
		bytes = 1;
	if (!g || !g->resident)
		return malloc(bytes);
	void *p = NULL;
	pthread_mutex_lock(&g->hlock);
	if (g->nhblk == g->cap_hblk) {
		size_t c = g->cap_hblk ? 2 * g->cap_hblk : 8;
		td_gbuf *nb = realloc(g->hblk, c * sizeof *nb);
		if (!nb)
			goto out;
		g->hblk = nb;
		g->cap_hblk = c;
	}
	cudaSetDevice(g->o.device);
	if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) {
		(void)cudaGetLastError(); /* not the launchers' business */
		p = NULL;
		goto out;
	}
	g->hblk[g->nhblk++] = (td_gbuf){p, bytes};
out:
	pthread_mutex_unlock(&g->hlock);
	return p;
}

void td_gpu_host_free(td_gpu *g, void *p)
{
	if (!p)
		return;
	if (g && g->resident) {
		pthread_mutex_lock(&g->hlock);
		for (size_t i = 0; i < g->nhblk; i++)
			if (g->hblk[i].p == p) {
				g->hblk[i] = g->hblk[--g->nhblk];
				pthread_mutex_unlock(&g->hlock);
				cudaFreeHost(p);
				return;
			}
		pthread_mutex_unlock(&g->hlock);
	}
	free(p);
}

/* What the packing pass learns about a round of m requests, so the round
 * itself never loops over them again before its launches (at 100k short
 * reads each extra pass cost some 50-200 us of host time a batch). */
typedef struct td_round {
	size_t m;
	uint64_t bytes;                /* output bytes, all requests */
	uintptr_t base;                /* request k's buffer is base + outoff */
	int contiguous;                /* ... for every k (see td_direct_base) */
	uint64_t want;                 /* warps a round should give the device */
	uint64_t coop_reads, coop_bytes; /* of the first `want` reads of at
	                                    least xcoop bytes */
	uint64_t head_reads, head_bytes; /* of the first `want` reads that
	                                    are not empty */
	uint32_t items, warps;         /* work units as numbered while packing
	                                  (td_pack_units) */
} td_round;

/* The direct path of a round: if the buffers of its packed requests lie
 * exactly as the device output (request k's at base + outoff) inside one
 * td_gpu_host_alloc block, the downloads can land in them; return base,
 * else NULL. */
static uint8_t *td_direct_base(td_gpu *g, const td_round *rd)
{
	if (!rd->contiguous)
		return NULL;
	uint8_t *r = NULL;
	pthread_mutex_lock(&g->hlock);
	for (size_t i = 0; i < g->nhblk && !r; i++) {
		uintptr_t b0 = (uintptr_t)g->hblk[i].p, b1 = b0 + g->hblk[i].cap;
		if (rd->base >= b0 && rd->base <= b1 && rd->bytes <= b1 - rd->base)
			r = (uint8_t *)rd->base;
	}
	pthread_mutex_unlock(&g->hlock);
	return r;
}

/* ---- extract ---- */

#define TD_PIECE_MIN (2 * TD_MIB)      /* below this a round is one launch */
#define TD_SCATTER_MAX 16u             /* threads copying results out */
#define TD_SCATTER_MIN (1 * TD_MIB)    /* below this one thread copies */

/* Copying one round's results out of pinned memory: worker t of nt takes
 * its share of every piece, in piece order, as soon as the piece is done so the copies overlap the later pieces' kernels and downloads. */
typedef struct td_scatter {
	td_gpu *g;
	td_extract_req *reqs;
	const size_t *bounds;          /* piece p holds packed [bounds[p], bounds[p+1]) */
	const uint8_t *out;            /* the round's results: pinned staging, or
	                                  the callers' buffers (direct) */
	int direct;
	unsigned np, t, nt;
	cudaError_t err;
} td_scatter;

static void *td_scatter_run(void *arg)
{
	td_scatter *w = arg;
	td_gpu *g = w->g;
	const td_gx_req *hq = g->hreq.p;
	const td_gx_res *hr = g->hres.p;
	const uint8_t *ho = w->out;
	if (w->t)
		cudaSetDevice(g->o.device);
	for (unsigned p = 0; p < w->np; p++) {
		cudaError_t e = cudaEventSynchronize(g->ev[p]);
		if (e != cudaSuccess) {
			w->err = e;
			return NULL;
		}
		size_t b0 = w->bounds[p], n = w->bounds[p + 1] - b0;
		for (size_t k = b0 + n * w->t / w->nt; k < b0 + n * (w->t + 1) / w->nt; k++) {
			td_extract_req *q = &w->reqs[hq[k].tag];
			if (hr[k].err == TD_ECORRUPT) {
				/* let the CPU engine say exactly what it says */
				size_t got = 0;
				q->err = td_extract(g->a, q->file, q->off, q->buf, q->len, &got);
				q->got = (uint32_t)got;
				continue;
			}
			q->got = hr[k].got;
			q->err = hr[k].err;
			if (q->got && !w->direct)
				memcpy(q->buf, ho + hq[k].outoff, q->got);
		}
	}
	return NULL;
}

/* Threads for copying `bytes` of results of m requests out. */
static unsigned td_scatter_threads(const td_gpu *g, size_t m, uint64_t bytes)
{
	if (bytes < TD_SCATTER_MIN && m < 8192)
		return 1;
	long c = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned nt = g->o.cpu_threads ? g->o.cpu_threads : c > 0 ? (unsigned)c : 1;
	return nt < TD_SCATTER_MAX ? nt : TD_SCATTER_MAX;
}

/* Output bytes a warp walks of this round's warp-walked reads: the fixed
 * option, or TD_GX_SEG halved (down to TD_GX_SEG_MIN) while the round
 * gives fewer than TD_GX_WARPS_SM warps an SM. A small batch of long reads
 * then finishes in the walk of a short segment instead of an 8 KiB one;
 * large batches keep long segments (fewer seeks). `all`: every read is
 * warp-walked (zero copy), else those of at least xcoop bytes. */
static uint32_t td_round_seg(const td_gpu *g, const td_round *rd, int all)
{
	if (g->o.xseg)
		return g->o.xseg;
	uint64_t reads = all ? rd->head_reads : rd->coop_reads;
	uint64_t bytes = all ? rd->head_bytes : rd->coop_bytes;
	uint32_t seg = TD_GX_SEG;
	/* warps at seg: at least bytes / seg, and one a read */
	while (seg > TD_GX_SEG_MIN && reads < rd->want && bytes / seg < rd->want)
		seg >>= 1;
	return seg;
}

/* How a round numbers its work ("Work units", td_gpu_int.h): reads of at least xcoop
 * bytes take a warp per per_w bytes, the others an item per per_i;
 * shifts where both are powers of two. */
typedef struct td_units {
	uint32_t xcoop, per_i, per_w;
	unsigned si, sw;
	int pow2;
} td_units;

static td_units td_units_of(const td_gdev *d)
{
	td_units u;
	u.xcoop = d->xcoop ? d->xcoop : UINT32_MAX;
	u.per_i = d->xchunk ? d->xchunk : TD_GX_CHUNK;
	u.per_w = d->xseg ? d->xseg : TD_GX_SEG;
	u.pow2 = (u.per_i & (u.per_i - 1)) == 0 && (u.per_w & (u.per_w - 1)) == 0;
	u.si = (unsigned)__builtin_ctz(u.per_i);
	u.sw = (unsigned)__builtin_ctz(u.per_w);
	return u;
}

/* Give request q its first item and warp (*ni, *nw) and count its own. */
static inline void td_units_next(const td_units *u, td_gx_req *q, uint32_t *ni, uint32_t *nw)
{
	const uint64_t len = q->len;
	const int coop = len >= u->xcoop;
	const uint32_t per = coop ? u->per_w : u->per_i;
	uint32_t c = (uint32_t)(u->pow2 ? (len + per - 1) >> (coop ? u->sw : u->si) : (len + per - 1) / per);
	q->item0 = *ni;
	q->warp0 = *nw;
	*(coop ? nw : ni) += c ? c : 1;
}

/* The numbering the packing pass uses: as a round without zero copy and
 * with long warp segments (unless fixed) runs it; td_extract_round
 * renumbers the others. */
static td_units td_pack_units(const td_gpu *g)
{
	td_gdev d = g->d;
	d.xseg = g->o.xseg ? g->o.xseg : TD_GX_SEG;
	return td_units_of(&d);
}

/* Number the work items and warps of packed requests [0, m) (see
 * "Work units"). *items, *warps: their totals. */
static void td_number_units(const td_gdev *d, td_gx_req *hq, size_t m, uint32_t *items, uint32_t *warps)
{
	const td_units u = td_units_of(d);
	uint32_t ni = 0, nw = 0;
	for (size_t k = 0; k < m; k++)
		td_units_next(&u, &hq[k], &ni, &nw);
	*items = ni;
	*warps = nw;
}

/* The first of packed requests [k, m) whose output starts at `want` or
 * later (outoff ascending). */
static size_t td_first_at(const td_gx_req *hq, size_t k, size_t m, uint64_t want)
{
	while (k < m) {
		size_t mid = k + (m - k) / 2;
		if (hq[mid].outoff < want)
			k = mid + 1;
		else
			m = mid;
	}
	return k;
}

/* Launch one round: the m requests packed in hreq (tags index reqs), in
 * pieces of about TD_PIECE_BYTES spread round robin over the streams; each
 * piece uploads its requests, runs its kernel and downloads its results
 * while the others do the same. A zero-copy round (direct, at most
 * zc_bytes) is one piece whose kernel writes the callers' buffers and the
 * pinned results itself: nothing is downloaded after it. */
static int td_extract_round(td_gpu *g, td_extract_req *reqs, const td_round *rd, uint8_t *direct)
{
	const size_t m = rd->m;
	const uint64_t bytes = rd->bytes;
	td_gx_req *hq = g->hreq.p;
	td_gx_req *dq = g->dreq.p;
	td_gx_res *hr = g->hres.p, *dr = g->dres.p;
	uint8_t *ho = direct ? direct : g->hout.p, *dout = g->dout.p;
	/* zero copy walks every read by a warp: not for many short reads,
	 * which the lanes walk 32 to a warp */
	const int zc = direct && g->zc && bytes <= g->o.zc_bytes &&
		       (m <= (size_t)g->nsm * TD_GX_WARPS_SM || bytes >= (uint64_t)m * TD_ZC_MEANLEN);
	td_gdev d = g->d; /* this round's launch parameters */
	if (zc) {
		/* unified addressing: the host addresses are the device's */
		dr = hr;
		dout = direct;
		memset(hr, 0, m * sizeof *hr);
		d.xcoop = 1; /* every read warp-walked: coalesced stores */
	}
	d.xseg = td_round_seg(g, rd, zc);
	/* the packing numbered the units for the usual case */
	uint32_t items = rd->items, warps = rd->warps;
	if (d.xcoop != g->d.xcoop || d.xseg != td_pack_units(g).per_w)
		td_number_units(&d, hq, m, &items, &warps);
	/* small rounds: one launch (latency); large: enough pieces to pipeline */
	uint64_t pb = g->o.piece_bytes;
	uint64_t np = zc || bytes < TD_PIECE_MIN ? 1 : bytes / pb > g->nst ? bytes / pb : g->nst;
	if (np > TD_GPU_MAXPIECES)
		np = TD_GPU_MAXPIECES;
	if (np > m)
		np = m;
	size_t bounds[TD_GPU_MAXPIECES + 1];
	size_t k0 = 0;
	for (unsigned p = 0; p < np; p++) {
		/* split by output bytes so large reads spread evenly */
		size_t k1 = p + 1 == np ? m : td_first_at(hq, k0, m, bytes * (p + 1) / np);
		bounds[p] = k0;
		if (k1 > k0) {
			uint32_t i1 = k1 < m ? hq[k1].item0 : items, w1 = k1 < m ? hq[k1].warp0 : warps;
			uint64_t ob0 = hq[k0].outoff, ob1 = k1 < m ? hq[k1].outoff : bytes;
			cudaStream_t st = g->st[p % g->nst];
			CK(cudaMemcpyAsync(dq + k0, hq + k0, (k1 - k0) * sizeof *hq, cudaMemcpyHostToDevice, st));
			if (!zc)
				CK(cudaMemsetAsync(dr + k0, 0, (k1 - k0) * sizeof *dr, st));
			CK((cudaError_t)td_gk_extract(&d, dq + k0, (uint32_t)(k1 - k0), hq[k0].item0, i1 - hq[k0].item0,
						      hq[k0].warp0, w1 - hq[k0].warp0, dout, dr + k0, st));
			if (!zc) {
				CK(cudaMemcpyAsync(hr + k0, dr + k0, (k1 - k0) * sizeof *hr, cudaMemcpyDeviceToHost, st));
				if (ob1 > ob0)
					CK(cudaMemcpyAsync(ho + ob0, dout + ob0, ob1 - ob0, cudaMemcpyDeviceToHost, st));
			}
		}
		CK(cudaEventRecord(g->ev[p], g->st[p % g->nst]));
		k0 = k1;
	}
	bounds[np] = m;
	/* copy results out piece by piece while later pieces still run */
	unsigned nt = direct ? 1 : td_scatter_threads(g, m, bytes);
	td_scatter w[TD_SCATTER_MAX];
	pthread_t th[TD_SCATTER_MAX];
	unsigned started = 1;
	for (unsigned t = 0; t < nt; t++)
		w[t] = (td_scatter){g, reqs, bounds, ho, direct != NULL, (unsigned)np, t, nt, cudaSuccess};
	for (unsigned t = 1; t < nt; t++) {
		if (pthread_create(&th[t], NULL, td_scatter_run, &w[t]))
			break;
		started++;
	}
	td_scatter_run(&w[0]);
	for (unsigned t = started; t < nt; t++) /* threads that did not start */
		td_scatter_run(&w[t]);
	cudaError_t e = cudaSuccess;
	for (unsigned t = started; t < nt; t++)
		if (e == cudaSuccess)
			e = w[t].err;
	if (e == cudaSuccess)
		e = w[0].err;
	for (unsigned t = 1; t < started; t++) {
		pthread_join(th[t], NULL);
		if (e == cudaSuccess)
			e = w[t].err;
	}
	if (e != cudaSuccess)
		return td_cuda_fail(e, "extract round");
	return TD_OK;
}

static int td_gpu_extract_locked(td_gpu *g, td_extract_req *reqs, size_t n)
{
	const td_units u = td_pack_units(g);
	size_t i = 0;
	while (i < n) {
		td_round rd = {0, 0, 0, 1, (uint64_t)g->nsm * TD_GX_WARPS_SM, 0, 0, 0, 0, 0, 0};
		size_t cap = n - i < TD_ROUND_MAXREQ ? n - i : TD_ROUND_MAXREQ;
		int r;
		if ((r = td_grow(&g->hreq, cap * sizeof(td_gx_req), 0)) || (r = td_grow(&g->dreq, cap * sizeof(td_gx_req), 1)) ||
		    (r = td_grow(&g->hres, cap * sizeof(td_gx_res), 0)) || (r = td_grow(&g->dres, cap * sizeof(td_gx_res), 1)))
			return r;
		td_gx_req *hq = g->hreq.p;
		size_t m = 0;
		uint64_t bytes = 0;
		for (; i < n && m < cap; i++) {
			td_extract_req *q = &reqs[i];
			if (q->len > g->round_bytes) { /* one huge read: the CPU */
				size_t got = 0;
				q->err = td_extract(g->a, q->file, q->off, q->buf, q->len, &got);
				q->got = (uint32_t)got;
				continue;
			}
			if (bytes + q->len > g->round_bytes)
				break;
			if (m == 0)
				rd.base = (uintptr_t)q->buf;
			else if ((uintptr_t)q->buf != rd.base + bytes)
				rd.contiguous = 0;
			if (q->len && rd.head_reads < rd.want) {
				rd.head_reads++;
				rd.head_bytes += q->len;
			}
			if (q->len >= u.xcoop && rd.coop_reads < rd.want) {
				rd.coop_reads++;
				rd.coop_bytes += q->len;
			}
			hq[m] = (td_gx_req){q->off, (uint32_t)bytes, q->file, q->len, 0, 0, (uint32_t)i};
			td_units_next(&u, &hq[m], &rd.items, &rd.warps);
			bytes += q->len;
			m++;
		}
		if (m == 0)
			continue;
		rd.m = m;
		rd.bytes = bytes;
		uint8_t *direct = td_direct_base(g, &rd);
		if ((!direct && (r = td_grow(&g->hout, bytes + 1, 0))) || (r = td_grow(&g->dout, bytes + 1, 1)))
			return r;
		/* tags are absolute request indexes; the round reads reqs directly */
		if ((r = td_extract_round(g, reqs, &rd, direct)))
			return r;
	}
	return TD_OK;
}

int td_gpu_extract_batch(td_gpu *g, td_extract_req *reqs, size_t n)
{
	if (!g || (!reqs && n))
		return td_fail(TD_EINVAL, "gpu: bad batch");
	if (!g->resident)
		return td_extract_batch(g->a, reqs, n, g->o.cpu_threads);
	if (g->multi)
		return td_gmulti_extract(g->multi, reqs, n);
	pthread_mutex_lock(&g->lock);
	cudaSetDevice(g->o.device);
	int r = td_gpu_extract_locked(g, reqs, n);
	pthread_mutex_unlock(&g->lock);
	return r;
}

/* ---- count and search ---- */

static int td_phases_cached = -1;
static pthread_once_t td_phases_once = PTHREAD_ONCE_INIT;

static void td_phases_probe(void)
{
	const char *e = getenv("TD_GPU_PHASES");
	td_phases_cached = e && *e && strcmp(e, "0") != 0;
}

int td_gpu_phases_on(void)
{
	pthread_once(&td_phases_once, td_phases_probe);
	return td_phases_cached;
}

void td_gpu_qtrace(const td_gpu *g, double out[7])
{
	out[0] = g->qt0;
	out[1] = g->qtr[0];
	out[2] = g->qt1;
	memcpy(out + 3, g->qtr + 1, 4 * sizeof *out);
}

/* $TD_GPU_NOKERNEL=1 (measurement only): count and search launch no
 * kernel, every part counts 0, so a batch's time is its host steps and
 * copies alone (the answers are wrong) */
static int td_nokernel(void)
{
	static int v = -1;
	if (v < 0) {
		const char *e = getenv("TD_GPU_NOKERNEL");
		v = e && *e == '1';
	}
	return v;
}

void td_gpu_phases_get(const td_gpu *g, int k, td_gphase *out)
{
	memset(out, 0, sizeof *out);
	if (g && k >= 0 && k < 2)
		*out = g->ph[k];
}

/* Whether the kernels take request v: a word they can look up in a valid
 * scope, except the large scopes the CPU engine answers from its query
 * index (td_query_fast) while a warp would walk all of it; a whole-corpus
 * count stays here (one look-up in the kernel too). */
static int td_gpu_takes(const td_gpu *g, const td_qview *v, int search)
{
	if (!(v->word && v->len >= 1 && v->len <= TD_MAXTOK && v->scope < g->d.nentries))
		return 0;
	if (g->hheavy && g->hheavy[v->scope])
		return 0;
	return !((search || v->scope != TD_ROOT) && td_query_fast(g->a, v->scope));
}

int td_gpu_cpu_rest(const td_archive *a, unsigned threads, void *reqs, size_t size, const size_t *idx, size_t nc,
		    int (*run)(const td_archive *, void *, size_t, unsigned))
{
	if (!nc)
		return TD_OK;
	char *tmp = malloc(nc * size);
	if (!tmp)
		return td_fail(TD_ENOMEM, "gpu: requests for the CPU");
	for (size_t j = 0; j < nc; j++)
		memcpy(tmp + j * size, (char *)reqs + idx[j] * size, size);
	int r = run(a, tmp, nc, threads);
	for (size_t j = 0; j < nc; j++)
		memcpy((char *)reqs + idx[j] * size, tmp + j * size, size);
	free(tmp);
	return r == TD_ENOMEM ? r : TD_OK; /* other errors are the requests' own */
}

/* td_gpu_cpu_rest's requests on the pool's threads, one request a call
 * of `run` (a unit's count or search does not spread over threads
 * itself), instead of threads started for each call. */
typedef struct td_rest_job {
	const td_archive *a;
	char *tmp;
	size_t size, nc;
	atomic_size_t next;
	atomic_int nomem;
	int (*run)(const td_archive *, void *, size_t, unsigned);
} td_rest_job;

static void td_rest_task(void *ctx, unsigned c)
{
	td_rest_job *j = ctx;
	(void)c;
	for (size_t i; (i = atomic_fetch_add(&j->next, 1)) < j->nc;)
		if (j->run(j->a, j->tmp + i * j->size, 1, 1) == TD_ENOMEM)
			atomic_store(&j->nomem, 1);
}

/* td_gpu_cpu_rest for handle g of one unit (a version 1-4 archive or a
 * shard: never a version 5 archive's own handle) on up to
 * g->o.cpu_threads (0: the cores) pool threads. */
static int td_rest_pooled(td_gpu *g, void *reqs, size_t size, const size_t *idx, size_t nc,
			  int (*run)(const td_archive *, void *, size_t, unsigned))
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned nt = g->o.cpu_threads ? g->o.cpu_threads : cores > 0 ? (unsigned)cores : 1;
	if (nc < 2 || nt < 2)
		return td_gpu_cpu_rest(g->a, 1, reqs, size, idx, nc, run);
	if (nt > nc)
		nt = (unsigned)nc;
	td_rest_job j = {.a = g->a, .tmp = malloc(nc * size), .size = size, .nc = nc, .run = run};
	if (!j.tmp)
		return td_fail(TD_ENOMEM, "gpu: requests for the CPU");
	atomic_init(&j.next, 0);
	atomic_init(&j.nomem, 0);
	for (size_t i = 0; i < nc; i++)
		memcpy(j.tmp + i * size, (char *)reqs + idx[i] * size, size);
	td_gpu_par(nt, td_rest_task, &j);
	for (size_t i = 0; i < nc; i++)
		memcpy((char *)reqs + idx[i] * size, j.tmp + i * size, size);
	free(j.tmp);
	return atomic_load(&j.nomem) ? td_fail(TD_ENOMEM, "gpu: requests for the CPU") : TD_OK;
}

int td_gpu_cpu_extracts(const td_archive *a, void *reqs, size_t n, unsigned threads)
{
	return td_extract_batch(a, reqs, n, threads);
}

int td_gpu_cpu_counts(const td_archive *a, void *reqs, size_t n, unsigned threads)
{
	return td_count_batch(a, reqs, n, threads);
}

int td_gpu_cpu_searches(const td_archive *a, void *reqs, size_t n, unsigned threads)
{
	return td_search_batch(a, reqs, n, threads);
}

/* The parts of a count or search request r (word, scope; part
 * TD_GQ_WHOLE) into out[0..] (NULL: only counted); returns how many. A
 * file of more than qpart root symbols is cut at multiples of qpart
 * (rounded up to a multiple of the samples' 2^sample_shift), a directory's
 * files into runs of about qpart root symbols, its large files cut the same
 * way, so the warps of a batch get about the same work. A whole-corpus
 * count (one look-up in WORD_FREQ) and anything out of range stay whole
 * (the kernel reports what is wrong). */
static size_t td_split_query(const td_gpu *g, const td_gq_req *r, int search, td_gq_req *out)
{
	const td_gdev *d = &g->d;
	uint64_t step = UINT64_C(1) << d->sample_shift, P = g->o.qpart;
	if (P == UINT32_MAX || !g->hcum)
		P = UINT64_MAX;
	else
		P = (P + step - 1) / step * step;
	size_t n = 0;
	uint64_t a = g->hsub ? g->hsub[2 * (uint64_t)r->scope] : 0, b = g->hsub ? g->hsub[2 * (uint64_t)r->scope + 1] : 0;
	const int dir = b > a + 1 || (b == a + 1 && g->hfiles[a] != r->scope);
	if (P == UINT64_MAX || (!search && r->scope == TD_ROOT) || b <= a || b > d->nentries ||
	    g->hcum[b] - g->hcum[a] <= P + 1) {
		if (out)
			out[0] = *r;
		return 1;
	}
	uint64_t i = a;
	while (i < b) {
		/* the longest run of whole files from i within P */
		uint64_t lo = i, hi = b;
		while (lo < hi) {
			uint64_t mid = lo + (hi - lo + 1) / 2;
			if (g->hcum[mid] - g->hcum[i] <= P + 1)
				lo = mid;
			else
				hi = mid - 1;
		}
		if (lo > i) {
			if (out) {
				out[n] = *r;
				if (dir || lo - i > 1) { /* files [i, lo) of the directory */
					out[n].part = TD_GQ_FILES;
					out[n].a = i;
					out[n].b = lo;
				}
			}
			n++;
			i = lo;
			continue;
		}
		/* file i alone is over P: slices at multiples of P */
		uint32_t e = g->hfiles[i];
		uint64_t rlo = td_pack_get(&g->he_root, e), rhi = td_pack_get(&g->he_root, (uint64_t)e + 1);
		for (uint64_t k = rlo; k < rhi;) {
			uint64_t next = (k / P + 1) * P;
			if (next > rhi)
				next = rhi;
			if (out) {
				out[n] = *r;
				out[n].scope = e;
				out[n].part = TD_GQ_SLICE;
				out[n].big = g->hbig && g->hbig[e];
				out[n].a = k;
				out[n].b = next;
			}
			n++;
			k = next;
		}
		i++;
	}
	return n;
}

/* Pass 1 of share c: its parts, word bytes and requests not taken. */
static void td_qshare_size(void *ctx, unsigned c)
{
	td_qshare *q = (td_qshare *)ctx + c;
	td_qview tmp;
	q->np = q->nc = 0;
	q->wb = 0;
	for (size_t i = q->i0; i < q->i1; i++) {
		const td_qview *v = q->get(q->reqs, i, &tmp);
		if (td_gpu_takes(q->g, v, q->search)) {
			td_gq_req r = {.scope = v->scope};
			q->wb += v->len;
			q->np += td_split_query(q->g, &r, q->search, NULL);
		} else {
			q->nc++;
		}
	}
}

/* Pass 2 of share q: pack its parts at k0 (words at w0, requests not taken
 * at r0), then upload, count and download them on its stream. */
static int td_qshare_launch(td_qshare *q)
{
	td_gpu *g = q->g;
	td_gq_req *hq = g->hq.p, *dq = g->dq.p;
	uint32_t *map = g->map.p;
	uint8_t *hw = g->hw.p, *dw = g->dw.p;
	uint64_t *hc = g->hcnt.p, *dc = g->dcnt.p;
	size_t *rest = g->rest.p, k = q->k0, rc = q->r0;
	uint64_t wb = q->w0;
	td_qview tmp;
	for (size_t i = q->i0; i < q->i1; i++) {
		const td_qview *v = q->get(q->reqs, i, &tmp);
		if (!td_gpu_takes(g, v, q->search)) {
			rest[rc++] = i;
			continue;
		}
		memcpy(hw + wb, v->word, v->len);
		td_gq_req r = {.woff = wb, .wlen = (uint32_t)v->len, .scope = v->scope, .part = TD_GQ_WHOLE,
			       .big = g->hbig && g->hbig[v->scope]};
		size_t c = td_split_query(g, &r, q->search, hq + k);
		for (size_t j = 0; j < c; j++)
			map[k + j] = (uint32_t)i;
		k += c;
		wb += v->len;
	}
	if (k == q->k0)
		return TD_OK;
	td_gk_big big = {0};
	if (g->nsb > q->s && g->nbev > 2 * q->s + 1) {
		uint32_t *hbi = (uint32_t *)g->hbi.p + q->k0;
		for (size_t j = q->k0; j < k; j++)
			if (hq[j].big)
				hbi[big.n++] = (uint32_t)(j - q->k0);
		big = (td_gk_big){.idx = (const uint32_t *)g->dbi.p + q->k0, .n = big.n, .qbig = g->qbig,
				  .stream = g->sb[q->s], .fork = g->bev[2 * q->s], .join = g->bev[2 * q->s + 1]};
	}
	cudaStream_t st = g->st[q->s];
	CK(cudaSetDevice(g->o.device)); /* this thread may be new */
	if (g->npev)
		CK(cudaEventRecord(g->pev[2 * q->s], st));
	CK(cudaMemcpyAsync(dw + q->w0, hw + q->w0, wb - q->w0, cudaMemcpyHostToDevice, st));
	CK(cudaMemcpyAsync(dq + q->k0, hq + q->k0, (k - q->k0) * sizeof *hq, cudaMemcpyHostToDevice, st));
	if (big.n)
		CK(cudaMemcpyAsync((uint32_t *)g->dbi.p + q->k0, (uint32_t *)g->hbi.p + q->k0, big.n * sizeof(uint32_t),
				   cudaMemcpyHostToDevice, st));
	if (td_nokernel())
		CK(cudaMemsetAsync(dc + q->k0, 0, (k - q->k0) * sizeof *dc, st));
	else
		CK((cudaError_t)td_gk_count(&g->d, dw, dq + q->k0, (uint32_t)(k - q->k0), q->search, dc + q->k0, st, &big));
	CK(cudaMemcpyAsync(hc + q->k0, dc + q->k0, (k - q->k0) * sizeof *hc, cudaMemcpyDeviceToHost, st));
	if (g->npev)
		CK(cudaEventRecord(g->pev[2 * q->s + 1], st));
	return TD_OK;
}

static void td_qshare_run(void *ctx, unsigned c)
{
	td_qshare *q = (td_qshare *)ctx + c;
	q->err = td_qshare_launch(q);
}

#define TD_QSHARE_PAR 4096u /* requests in a batch at least for a thread a share (pool threads: a wake-up each) */

/* The counts of the requests the kernels take (td_gpu_takes), cut into
 * parts (td_split_query), in two steps. td_query_begin: the batch is cut
 * into one share of requests per stream; each share is sized, then packed
 * and launched (upload, kernel, download) on its stream, on a thread of
 * its own when the batch is large, so packing runs in parallel and
 * overlaps the kernels; returns without waiting for them (g->qnp parts,
 * g->qnc requests the kernels do not take, g->qerr). td_query_end: the
 * requests the kernels do not take (they have no parts) are answered by
 * the CPU engine (`cpu`) while the kernels run, then it waits for the
 * streams: *m parts, their counts in g->hcnt; map[k] = the request of part
 * k (a request's parts are consecutive, in request order); the words in
 * g->hw. Phase times into ph when kept. Between the two, nothing else may
 * use g's batch buffers or streams (g->lock is held). */
static void td_query_begin(td_gpu *g, const td_qview *(*get)(const void *, size_t, td_qview *), void *reqs, size_t n,
			   int search)
{
	int r;
	g->qt0 = td_now();
	g->qsearch = search;
	g->qstage = 0;
	g->qnp = g->qnc = 0;
	unsigned ns = n < 4096 ? 1 : g->nst, par = n >= TD_QSHARE_PAR;
	td_qshare *sh = g->qsh;
	g->qns = 0;
	for (unsigned s = 0; s < ns; s++)
		sh[s] = (td_qshare){.g = g, .get = get, .reqs = reqs, .search = search, .s = s, .i0 = n * s / ns,
				    .i1 = n * (s + 1) / ns};
	if (par)
		td_gpu_par(ns, td_qshare_size, sh);
	else
		for (unsigned s = 0; s < ns; s++)
			td_qshare_size(sh, s);
	g->qtr[0] = td_now();
	size_t np = 0, nc = 0;
	uint64_t wb = 0;
	for (unsigned s = 0; s < ns; s++) {
		sh[s].k0 = np;
		sh[s].r0 = nc;
		sh[s].w0 = wb;
		np += sh[s].np;
		nc += sh[s].nc;
		wb += sh[s].wb;
	}
	if ((r = td_grow(&g->rest, (nc + 1) * sizeof(size_t), 2)) || (r = td_grow(&g->hq, (np + 1) * sizeof(td_gq_req), 0)) ||
	    (r = td_grow(&g->map, (np + 1) * sizeof(uint32_t), 2)) || (r = td_grow(&g->hw, wb + 1, 0)) ||
	    (r = td_grow(&g->dq, (np + 1) * sizeof(td_gq_req), 1)) || (r = td_grow(&g->dw, wb + 1, 1)) ||
	    (r = td_grow(&g->hcnt, (np + 1) * sizeof(uint64_t), 0)) || (r = td_grow(&g->dcnt, (np + 1) * sizeof(uint64_t), 1)) ||
	    (g->nsb && ((r = td_grow(&g->hbi, (np + 1) * sizeof(uint32_t), 0)) ||
			(r = td_grow(&g->dbi, (np + 1) * sizeof(uint32_t), 1))))) {
		g->qerr = r;
		g->qt1 = td_now();
		return;
	}
	g->qns = ns; /* from here on the streams may hold work */
	if (par)
		td_gpu_par(ns, td_qshare_run, sh);
	else
		for (unsigned s = 0; s < ns; s++)
			td_qshare_run(sh, s);
	g->qt1 = td_now();
	for (unsigned s = 0; s < ns && r == TD_OK; s++)
		r = sh[s].err;
	g->qnp = np;
	g->qnc = nc;
	g->qerr = r;
}

static int td_query_end(td_gpu *g, void *reqs, size_t size, int (*cpu)(const td_archive *, void *, size_t, unsigned),
			size_t *m, td_gphase *ph)
{
	int r = g->qerr;
	/* the requests the kernels do not take, on the CPU meanwhile */
	double t1 = td_now();
	if (r == TD_OK)
		r = td_rest_pooled(g, reqs, size, g->rest.p, g->qnc, cpu);
	double t2 = td_now();
	const double tw = td_now();
	for (unsigned s = 0; s < g->qns; s++) {
		cudaError_t e = cudaStreamSynchronize(g->st[s]);
		if (e != cudaSuccess && r == TD_OK)
			r = td_cuda_fail(e, "cudaStreamSynchronize(g->st[s])");
	}
	g->qtr[1] = t1;
	g->qtr[2] = t2;
	g->qtr[3] = td_now();
	if (r)
		return r;
	*m = g->qnp;
	if (g->npev) { /* the device's time: the longest stream */
		float most = 0, ms = 0;
		for (unsigned s = 0; s < g->qns; s++)
			if (g->qsh[s].np && cudaEventElapsedTime(&ms, g->pev[2 * s], g->pev[2 * s + 1]) == cudaSuccess &&
			    ms > most)
				most = ms;
		(void)cudaGetLastError();
		ph->dev += most * 1e-3;
		ph->pack += g->qt1 - g->qt0;
		ph->rest += g->qtr[2] - g->qtr[1];
		ph->wait += td_now() - tw;
		ph->nrest += g->qnc;
	}
	return r;
}

static const td_qview *td_count_view(const void *reqs, size_t i, td_qview *v)
{
	const td_count_req *q = (const td_count_req *)reqs + i;
	v->word = q->word;
	v->len = q->len;
	v->scope = q->scope;
	return v;
}

static const td_qview *td_search_view(const void *reqs, size_t i, td_qview *v)
{
	const td_search_req *q = (const td_search_req *)reqs + i;
	v->word = q->word;
	v->len = q->len;
	v->scope = q->scope;
	return v;
}

/* The end of a count batch begun by td_query_begin: its parts' counts
 * added up into the requests, the rest answered by the CPU engine. */
static int td_count_finish(td_gpu *g, td_count_req *reqs, size_t n)
{
	size_t m = 0;
	int r;
	td_gphase *ph = &g->ph[0];
	if ((r = td_query_end(g, reqs, sizeof *reqs, td_gpu_cpu_counts, &m, ph)))
		return r;
	double t2 = td_now(), t3;
	const uint32_t *map = g->map.p;
	const uint64_t *hc = g->hcnt.p;
	/* requests the kernels did not take or answer: one CPU engine batch */
	size_t *cpu = malloc((n + 1) * sizeof *cpu), nc = 0, k = 0;
	if (!cpu)
		return td_fail(TD_ENOMEM, "gpu: count batch");
	for (size_t i = 0; i < n; i++) {
		td_count_req *q = &reqs[i];
		/* its parts' counts add up; one not answered sends it to the CPU
		 * (a request without parts was answered there already) */
		if (k >= m || map[k] != i)
			continue;
		int any = 0, ok = 1;
		uint64_t sum = 0;
		for (; k < m && map[k] == i; k++) {
			any = 1;
			if (hc[k] == TD_GQ_NOTFOUND)
				ok = 0;
			else
				sum += hc[k];
		}
		if (any && ok) {
			q->count = sum;
			q->err = TD_OK;
		} else {
			cpu[nc++] = i;
		}
	}
	t3 = td_now();
	r = td_rest_pooled(g, reqs, sizeof *reqs, cpu, nc, td_gpu_cpu_counts);
	free(cpu);
	g->qtr[4] = td_now();
	if (g->npev) {
		ph->unpack += t3 - t2;
		ph->rest += td_now() - t3;
		ph->batches++;
		ph->reqs += n;
		ph->parts += m;
		ph->nrest += nc;
	}
	return r;
}

static int td_gpu_count_locked(td_gpu *g, td_count_req *reqs, size_t n)
{
	td_query_begin(g, td_count_view, reqs, n, 0);
	return td_count_finish(g, reqs, n);
}

int td_gpu_count_batch(td_gpu *g, td_count_req *reqs, size_t n)
{
	if (!g || (!reqs && n))
		return td_fail(TD_EINVAL, "gpu: bad batch");
	if (!g->resident)
		return td_count_batch(g->a, reqs, n, g->o.cpu_threads);
	if (g->multi)
		return td_gmulti_count(g->multi, reqs, n);
	pthread_mutex_lock(&g->lock);
	cudaSetDevice(g->o.device);
	int r = td_gpu_count_locked(g, reqs, n);
	pthread_mutex_unlock(&g->lock);
	return r;
}

static int td_hits_append(td_hits *h, const td_hit *v, size_t c)
{
	if (!c)
		return TD_OK;
	if (h->n + c > h->cap) {
		size_t cap = h->cap * 2 > h->n + c ? h->cap * 2 : h->n + c;
		if (cap < 16)
			cap = 16;
		td_hit *p = realloc(h->v, cap * sizeof *p);
		if (!p)
			return td_fail(TD_ENOMEM, "search hits");
		h->v = p;
		h->cap = cap;
	}
	memcpy(h->v + h->n, v, c * sizeof *v);
	h->n += c;
	return TD_OK;
}

/* Launch the fill of the hits of packed parts [k0, k1) (those with skip
 * 0; total hits) on stream 0, without waiting; a round without hits is
 * not launched (g->pempty). */
static int td_search_launch(td_gpu *g, size_t k0, size_t k1, uint64_t total)
{
	int r;
	g->pempty = total == 0;
	if (g->pempty)
		return TD_OK;
	if ((r = td_grow(&g->hhits, (total + 1) * sizeof(td_hit), 0)) || (r = td_grow(&g->dhits, (total + 1) * sizeof(td_hit), 1)))
		return r;
	uint64_t *hb = g->hbase.p;
	uint8_t *hs = g->hskip.p;
	cudaStream_t st = g->st[0];
	CK(cudaMemcpyAsync((uint64_t *)g->dbase.p + k0, hb + k0, (k1 - k0) * sizeof *hb, cudaMemcpyHostToDevice, st));
	CK(cudaMemcpyAsync((uint8_t *)g->dskip.p + k0, hs + k0, (k1 - k0), cudaMemcpyHostToDevice, st));
	td_gk_big big = {0};
	if (g->nsb && g->nbev >= 2) { /* the parts marked big with hits to write */
		const td_gq_req *hq = g->hq.p;
		uint32_t *hbi = (uint32_t *)g->hbi.p + k0;
		for (size_t k = k0; k < k1; k++)
			if (hq[k].big && !hs[k])
				hbi[big.n++] = (uint32_t)(k - k0);
		big = (td_gk_big){.idx = (const uint32_t *)g->dbi.p + k0, .n = big.n, .qbig = g->qbig, .stream = g->sb[0],
				  .fork = g->bev[0], .join = g->bev[1]};
		if (big.n)
			CK(cudaMemcpyAsync((uint32_t *)g->dbi.p + k0, hbi, big.n * sizeof(uint32_t), cudaMemcpyHostToDevice, st));
	}
	CK((cudaError_t)td_gk_search(&g->d, g->dw.p, (const td_gq_req *)g->dq.p + k0, (uint32_t)(k1 - k0),
				     (const uint64_t *)g->dbase.p + k0, (const uint8_t *)g->dskip.p + k0, g->dhits.p, st,
				     &big));
	if (total)
		CK(cudaMemcpyAsync(g->hhits.p, g->dhits.p, total * sizeof(td_hit), cudaMemcpyDeviceToHost, st));
	return TD_OK;
}

/* Wait for the fill launched for parts [k0, k1), then append their hits
 * to their requests. */
static int td_search_collect(td_gpu *g, td_search_req *reqs, size_t k0, size_t k1)
{
	if (!g->pempty)
		CK(cudaStreamSynchronize(g->st[0]));
	const uint32_t *map = g->map.p;
	const uint64_t *hc = g->hcnt.p, *hb = g->hbase.p;
	const uint8_t *hs = g->hskip.p;
	const td_hit *hh = g->hhits.p;
	double t0 = g->npev ? td_now() : 0;
	for (size_t k = k0; k < k1; k++) {
		if (hs[k] == 1)
			continue;
		td_search_req *q = &reqs[map[k]];
		if (k == 0 || map[k - 1] != map[k]) /* its first part */
			q->err = TD_OK;
		if (hs[k])
			continue; /* no hits */
		int e = td_hits_append(&q->hits, hh + hb[k], hc[k]);
		if (e)
			q->err = e;
	}
	if (g->npev)
		g->ph[1].unpack += td_now() - t0;
	return TD_OK;
}

/* The next round of consecutive packed parts from g->sk (those of skip
 * 0 taking part: 1 marks a request the CPU answers, 2 a part without
 * hits, which the kernel does not walk again) whose hits fit
 * round_hits (a request's parts may fall in two rounds: their hits are
 * appended in part order either way): [*k0, *k1), their bases in hbase;
 * 0 when no part is left. */
static int td_search_next(td_gpu *g, size_t *k0, size_t *k1, uint64_t *total)
{
	size_t k = g->sk, m = g->qm;
	if (k >= m)
		return 0;
	const uint64_t *hc = g->hcnt.p;
	uint64_t *hb = g->hbase.p, t = 0;
	const uint8_t *hs = g->hskip.p;
	*k0 = k;
	for (; k < m; k++) {
		if (hs[k])
			continue;
		if (t + hc[k] > g->round_hits && k > *k0)
			break;
		hb[k] = t;
		t += hc[k];
	}
	*k1 = g->sk = k;
	*total = t;
	return 1;
}

/* A search batch begun by td_query_begin, one step at a time (*more: 1
 * when another step is left): first its counts are waited for and the
 * first fill round launched, then each step collects a round and
 * launches the next; the last answers what is left by the CPU engine. */
static int td_search_step(td_gpu *g, td_search_req *reqs, size_t n, int *more)
{
	int r;
	td_gphase *ph = &g->ph[1];
	*more = 0;
	if (g->qstage == 0) {
		size_t m = 0;
		if ((r = td_query_end(g, reqs, sizeof *reqs, td_gpu_cpu_searches, &m, ph)))
			return r;
		g->qm = m;
		g->sk = 0;
		g->pk0 = g->pk1 = 0;
		if ((r = td_grow(&g->hbase, (m + 1) * sizeof(uint64_t), 0)) ||
		    (r = td_grow(&g->dbase, (m + 1) * sizeof(uint64_t), 1)) || (r = td_grow(&g->hskip, m + 1, 0)) ||
		    (r = td_grow(&g->dskip, m + 1, 1)))
			return r;
		const uint64_t *hc = g->hcnt.p;
		const uint32_t *pmap = g->map.p;
		uint8_t *hs = g->hskip.p;
		/* a request with a part not found, or more hits than a round
		 * holds, goes to the CPU whole: all its parts skipped */
		for (size_t k = 0; k < m;) {
			size_t j = k;
			uint64_t sum = 0;
			int skip = 0;
			for (; j < m && pmap[j] == pmap[k]; j++) {
				if (hc[j] == TD_GQ_NOTFOUND)
					skip = 1;
				else
					sum += hc[j];
			}
			if (sum > g->round_hits)
				skip = 1;
			/* 1: the CPU answers the request; 2: a part without
			 * hits, not walked again */
			for (; k < j; k++)
				hs[k] = (uint8_t)(skip ? 1 : hc[k] == 0 ? 2 : 0);
		}
		g->qstage = 1;
	} else {
		double t0 = td_now(), app0 = ph->unpack;
		r = td_search_collect(g, reqs, g->pk0, g->pk1);
		if (g->npev)
			ph->fill += td_now() - t0 - (ph->unpack - app0);
		if (r)
			return r;
	}
	uint64_t total;
	double t0 = td_now();
	if (td_search_next(g, &g->pk0, &g->pk1, &total)) {
		r = td_search_launch(g, g->pk0, g->pk1, total);
		if (g->npev)
			ph->fill += td_now() - t0;
		*more = r == TD_OK;
		return r;
	}
	/* everything else: one CPU engine batch */
	double t3 = td_now();
	size_t m = g->qm;
	const uint32_t *map = g->map.p;
	const uint8_t *hs = g->hskip.p;
	size_t *cpu = malloc((n + 1) * sizeof *cpu), nc = 0, k = 0;
	if (!cpu)
		return td_fail(TD_ENOMEM, "gpu: search batch");
	for (size_t i = 0; i < n; i++) {
		if (k >= m || map[k] != i)
			continue; /* no parts: answered by the CPU already */
		int gpu = hs[k] != 1;
		while (k < m && map[k] == i)
			k++;
		if (!gpu)
			cpu[nc++] = i;
	}
	double t4 = td_now();
	r = td_rest_pooled(g, reqs, sizeof *reqs, cpu, nc, td_gpu_cpu_searches);
	free(cpu);
	g->qtr[4] = td_now();
	if (g->npev) {
		ph->unpack += t4 - t3;
		ph->rest += td_now() - t4;
		ph->batches++;
		ph->reqs += n;
		ph->parts += m;
		ph->nrest += nc;
	}
	return r;
}

/* The end of a search batch begun by td_query_begin, all of its steps. */
static int td_search_finish(td_gpu *g, td_search_req *reqs, size_t n)
{
	int r, more = 1;
	while (more)
		if ((r = td_search_step(g, reqs, n, &more)))
			return r;
	return TD_OK;
}

static int td_gpu_search_locked(td_gpu *g, td_search_req *reqs, size_t n)
{
	td_query_begin(g, td_search_view, reqs, n, 1);
	return td_search_finish(g, reqs, n);
}

int td_gpu_search_batch(td_gpu *g, td_search_req *reqs, size_t n)
{
	if (!g || (!reqs && n))
		return td_fail(TD_EINVAL, "gpu: bad batch");
	if (!g->resident)
		return td_search_batch(g->a, reqs, n, g->o.cpu_threads);
	if (g->multi)
		return td_gmulti_search(g->multi, reqs, n);
	pthread_mutex_lock(&g->lock);
	cudaSetDevice(g->o.device);
	int r = td_gpu_search_locked(g, reqs, n);
	pthread_mutex_unlock(&g->lock);
	return r;
}

int td_gpu_query_begin(td_gpu *g, int search, void *reqs, size_t n)
{
	pthread_mutex_lock(&g->lock);
	cudaSetDevice(g->o.device);
	td_query_begin(g, search ? td_search_view : td_count_view, reqs, n, search);
	return g->qerr;
}

int td_gpu_query_end(td_gpu *g, void *reqs, size_t n, int *more)
{
	cudaSetDevice(g->o.device);
	int r;
	*more = 0;
	if (g->qsearch)
		r = td_search_step(g, reqs, n, more);
	else
		r = td_count_finish(g, reqs, n);
	if (r || !*more) {
		*more = 0;
		pthread_mutex_unlock(&g->lock);
	}
	return r;
}
