/* td_gpu_post: ranked files (td_files_batch) from an inverted index whose counts the GPU makes: every file's word counts on the device, ranked by count and path on the host once, then a look-up a request. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "td_analytics.h"
#include "td_err.h"
#include "td_format.h"
#include "td_gpu.h"
#include "td_gpu_int.h"
#include "td_tokenize.h"

/*
 * A single word's ranked files over a scope are, for each regular file
 * under the scope holding the word, its number of occurrences (the word's
 * count in the file's term vector), count descending, path ascending. So
 * the index is built once a unit (the archive, or each shard): the term
 * vector of every file on the device (td_gwd_counts: the files' root
 * symbols expanded, a sort of (file, word) keys and their runs), then, on
 * the host, each word's (file, count) pairs ordered by count descending
 * and by the file's path (strcmp, as td_rank_files), files numbered in
 * the unit's depth-first order so that a scope is a range of them. A
 * request is then a binary search for the word and a walk of its list,
 * keeping the files in the scope's range; the list is already in the
 * answer's order. In a format 5 archive each shard has its index, its
 * files numbered by the archive's paths; a scope's pieces' lists are
 * gathered, a file cut between shards summed, and the result sorted the
 * same way. Files the device did not take (words longer than TD_MAXTOK),
 * words not in a unit's dictionary, scopes with a file cut inside a word,
 * symbolic links and bad entries go to the engine. The requests are
 * answered on cpu_threads threads (0: every core), a contiguous share each.
 */

struct td_gpost {
	uint64_t nw;                   /* words */
	uint32_t nf;                   /* files, depth-first */
	uint64_t *wstart;              /* word w's pairs: [wstart[w], wstart[w + 1]) */
	uint32_t *pd, *pc;             /* a pair: the file (depth-first index), its count */
	uint32_t *gent, *grank;        /* depth-first index -> archive entry, path rank */
	uint32_t *cumbad;              /* files not counted (long words) before each index */
};

struct td_gpostg {
	uint32_t nent;
	uint32_t *grank;               /* archive entry -> path rank (UINT32_MAX: no file) */
	uint32_t **l2g;                /* shard, shard entry -> archive entry (UINT32_MAX: none) */
	uint32_t nshards;
	/* the indexed shards' dictionaries merged: word i (bytes vw[i], vl[i],
	 * in byte order) has id vid[k] in shard vsh[k] for k in [vstart[i],
	 * vstart[i + 1]); vdone once made */
	int vdone;
	uint64_t nv;
	const uint8_t **vw;
	uint32_t *vl, *vsh, *vid;
	uint64_t *vstart;
};

static pthread_mutex_t td_gpost_mu = PTHREAD_MUTEX_INITIALIZER;

void td_gpost_free(struct td_gpost *p)
{
	if (!p)
		return;
	free(p->wstart);
	free(p->pd);
	free(p->pc);
	free(p->gent);
	free(p->grank);
	free(p->cumbad);
	free(p);
}

void td_gpostg_free(struct td_gpostg *p)
{
	if (!p)
		return;
	for (uint32_t s = 0; p->l2g && s < p->nshards; s++)
		free(p->l2g[s]);
	free(p->l2g);
	free(p->grank);
	free(p->vw);
	free(p->vl);
	free(p->vsh);
	free(p->vid);
	free(p->vstart);
	free(p);
}

/* ---- building ---- */

typedef struct td_gpath {
	char *path;
	uint32_t e;
} td_gpath;

static int td_gpath_cmp(const void *x, const void *y)
{
	return strcmp(((const td_gpath *)x)->path, ((const td_gpath *)y)->path);
}

/* rank[e] for the regular files among entries[0..n) of a (by path,
 * strcmp); the array has nent values, UINT32_MAX elsewhere. */
static int td_gpost_ranks(const td_archive *a, const uint32_t *entries, size_t n, uint32_t nent, uint32_t **out)
{
	uint32_t *rank = malloc((nent + 1) * sizeof *rank);
	td_gpath *v = calloc(n + 1, sizeof *v);
	int r = rank && v ? TD_OK : TD_ENOMEM;
	if (rank)
		memset(rank, 0xff, (nent + 1) * sizeof *rank);
	size_t k = 0;
	for (size_t i = 0; !r && i < n; i++) {
		char buf[TD_MAXPATH + 2];
		int pl = td_archive_path(a, entries[i], buf, sizeof buf);
		if (pl < 0)
			r = pl;
		else if (!(v[k].path = strdup(buf)))
			r = TD_ENOMEM;
		else
			v[k++].e = entries[i];
	}
	if (!r) {
		qsort(v, k, sizeof *v, td_gpath_cmp);
		for (size_t i = 0; i < k; i++)
			if (v[i].e < nent)
				rank[v[i].e] = (uint32_t)i;
	}
	for (size_t i = 0; v && i < k; i++)
		free(v[i].path);
	free(v);
	if (r) {
		free(rank);
		return r;
	}
	*out = rank;
	return TD_OK;
}

typedef struct td_gpair {
	uint32_t d, c, rank;
} td_gpair;

static int td_gpair_cmp(const void *x, const void *y)
{
	const td_gpair *p = x, *q = y;
	if (p->c != q->c)
		return p->c > q->c ? -1 : 1;
	return (p->rank > q->rank) - (p->rank < q->rank);
}

/* Unit u's index: gent[d] / grank[d] give each depth-first file's archive
 * entry and path rank (taken over). TD_OK, TD_ENOMEM, TD_ENOGPU (not
 * built: the engine answers). */
static int td_gpost_build(const td_gunit *u, unsigned threads, uint32_t *gent, uint32_t *grank, struct td_gpost **out)
{
	const uint32_t nf = u->sub[2 * TD_ROOT + 1] - u->sub[2 * TD_ROOT];
	struct td_gpost *p = calloc(1, sizeof *p);
	td_gwd_raw *raw = calloc(nf + 1, sizeof *raw);
	int r = p && raw ? TD_OK : TD_ENOMEM;
	if (p) {
		p->gent = gent;
		p->grank = grank;
		p->nf = nf;
	} else {
		free(gent);
		free(grank);
	}
	if (!r)
		r = td_gwd_counts(u, threads, u->files + u->sub[2 * TD_ROOT], nf, raw);
	const uint64_t W = u->nwords;
	uint64_t npairs = 0;
	for (uint32_t d = 0; !r && d < nf; d++)
		npairs += raw[d].ok ? raw[d].n : 0;
	if (!r && npairs > UINT32_MAX)
		r = TD_ENOGPU;
	if (!r && (!(p->wstart = calloc(W + 2, sizeof *p->wstart)) || !(p->pd = malloc((npairs + 1) * 4)) ||
		   !(p->pc = malloc((npairs + 1) * 4)) || !(p->cumbad = calloc(nf + 1, 4))))
		r = TD_ENOMEM;
	for (uint32_t d = 0; !r && d < nf; d++) {
		p->cumbad[d + 1] = p->cumbad[d] + (!raw[d].ok || grank[d] == UINT32_MAX);
		for (size_t j = 0; raw[d].ok && j < raw[d].n && !r; j++)
			if (raw[d].v[j] >= W)
				r = TD_ENOGPU;
			else
				p->wstart[raw[d].v[j] + 1]++;
	}
	for (uint64_t w = 0; !r && w < W; w++)
		p->wstart[w + 1] += p->wstart[w];
	uint64_t *at = !r ? malloc((W + 1) * sizeof *at) : NULL;
	if (!r && !at)
		r = TD_ENOMEM;
	if (!r)
		memcpy(at, p->wstart, (W + 1) * sizeof *at);
	for (uint32_t d = 0; !r && d < nf; d++)
		for (size_t j = 0; raw[d].ok && grank[d] != UINT32_MAX && j < raw[d].n; j++) {
			uint64_t k = at[raw[d].v[j]]++;
			p->pd[k] = d;
			p->pc[k] = raw[d].v[raw[d].n + j];
		}
	free(at);
	/* each word's pairs: count descending, path ascending */
	td_gpair *tmp = NULL;
	size_t tcap = 0;
	for (uint64_t w = 0; !r && w < W; w++) {
		uint64_t s = p->wstart[w], e = p->wstart[w + 1];
		if (e - s < 2)
			continue;
		if (e - s > tcap) {
			free(tmp);
			tcap = (size_t)(e - s) * 2;
			if (!(tmp = malloc(tcap * sizeof *tmp))) {
				r = TD_ENOMEM;
				break;
			}
		}
		for (uint64_t k = s; k < e; k++)
			tmp[k - s] = (td_gpair){ p->pd[k], p->pc[k], grank[p->pd[k]] };
		qsort(tmp, (size_t)(e - s), sizeof *tmp, td_gpair_cmp);
		for (uint64_t k = s; k < e; k++) {
			p->pd[k] = tmp[k - s].d;
			p->pc[k] = tmp[k - s].c;
		}
	}
	free(tmp);
	for (uint32_t d = 0; raw && d < nf; d++)
		free(raw[d].v);
	free(raw);
	if (r) {
		td_gpost_free(p);
		return r;
	}
	p->nw = W;
	*out = p;
	return TD_OK;
}

/* Format 1-4: the unit's own entries and ranks. */
static int td_gpost_build1(const td_gunit *u, unsigned threads, struct td_gpost **out)
{
	const uint32_t f0 = u->sub[2 * TD_ROOT], nf = u->sub[2 * TD_ROOT + 1] - f0;
	const uint32_t nent = td_archive_nentries(u->a);
	uint32_t *rank = NULL, *gent = malloc((nf + 1) * 4), *grank = malloc((nf + 1) * 4);
	int r = gent && grank ? td_gpost_ranks(u->a, u->files + f0, nf, nent, &rank) : TD_ENOMEM;
	for (uint32_t d = 0; !r && d < nf; d++) {
		gent[d] = u->files[f0 + d];
		grank[d] = gent[d] < nent ? rank[gent[d]] : UINT32_MAX;
	}
	free(rank);
	if (r) {
		free(gent);
		free(grank);
		return r;
	}
	return td_gpost_build(u, threads, gent, grank, out);
}

/* Format 5: the archive's files ranked, the shards' entries mapped to
 * them. */
static int td_gpostg_build(const td_archive *a, uint32_t nshards, struct td_gpostg **out)
{
	const uint32_t nent = td_archive_nentries(a);
	struct td_gpostg *g = calloc(1, sizeof *g);
	uint32_t *files = malloc((nent + 1) * 4), nfiles = 0;
	int r = g && files ? TD_OK : TD_ENOMEM;
	if (!r) {
		g->nent = nent;
		g->nshards = nshards;
		if (!(g->l2g = calloc(nshards + 1, sizeof *g->l2g)))
			r = TD_ENOMEM;
	}
	for (uint32_t e = 0; !r && e < nent; e++) {
		td_stat st;
		if (td_archive_stat(a, e, &st) == TD_OK && S_ISREG(st.mode))
			files[nfiles++] = e;
	}
	if (!r)
		r = td_gpost_ranks(a, files, nfiles, nent, &g->grank);
	for (uint32_t s = 0; !r && s < nshards; s++) {
		const td_archive *sa = NULL;
		if (td_archive_shard(a, s, &sa) || !sa)
			continue;
		uint32_t sn = td_archive_nentries(sa);
		if (!(g->l2g[s] = malloc((sn + 1) * 4)))
			r = TD_ENOMEM;
		else
			memset(g->l2g[s], 0xff, (sn + 1) * 4);
	}
	for (uint32_t i = 0; !r && i < nfiles; i++) {
		const td_disk_piece *pc = NULL;
		uint64_t np = 0;
		if (td_archive_pieces(a, files[i], &pc, &np))
			continue;
		for (uint64_t k = 0; k < np; k++) {
			const td_archive *sa = NULL;
			if (pc[k].shard < nshards && g->l2g[pc[k].shard] && !td_archive_shard(a, pc[k].shard, &sa) &&
			    pc[k].local < td_archive_nentries(sa))
				g->l2g[pc[k].shard][pc[k].local] = files[i];
		}
	}
	free(files);
	if (r) {
		td_gpostg_free(g);
		return r;
	}
	*out = g;
	return TD_OK;
}

/* Shard s's index over the archive's map. */
static int td_gpost_build5(const td_gunit *u, unsigned threads, const struct td_gpostg *gg, uint32_t s,
			   struct td_gpost **out)
{
	const uint32_t f0 = u->sub[2 * TD_ROOT], nf = u->sub[2 * TD_ROOT + 1] - f0;
	const uint32_t sn = td_archive_nentries(u->a);
	uint32_t *gent = malloc((nf + 1) * 4), *grank = malloc((nf + 1) * 4);
	if (!gent || !grank || s >= gg->nshards || !gg->l2g[s]) {
		free(gent);
		free(grank);
		return gent && grank ? TD_ENOGPU : TD_ENOMEM;
	}
	for (uint32_t d = 0; d < nf; d++) {
		uint32_t l = u->files[f0 + d];
		gent[d] = l < sn ? gg->l2g[s][l] : UINT32_MAX;
		grank[d] = gent[d] < gg->nent ? gg->grank[gent[d]] : UINT32_MAX;
	}
	return td_gpost_build(u, threads, gent, grank, out);
}

/* A shard's dictionary as a merge source: its words [i, n). */
typedef struct td_gvsrc {
	const uint8_t *words;
	td_pack off;
	uint64_t i, n;
	uint32_t sh;
	const uint8_t *w;              /* word i's bytes */
	uint32_t len;
} td_gvsrc;

static void td_gvsrc_load(td_gvsrc *v)
{
	uint64_t o0 = td_pack_get(&v->off, v->i), o1 = td_pack_get(&v->off, v->i + 1);
	v->w = v->words + o0;
	v->len = (uint32_t)(o1 - o0);
}

static int td_gv_cmp(const uint8_t *p, size_t pl, const uint8_t *q, size_t ql)
{
	int c = memcmp(p, q, pl < ql ? pl : ql);
	return c ? c : (pl > ql) - (pl < ql);
}

static int td_gvsrc_less(const td_gvsrc *x, const td_gvsrc *y)
{
	int c = td_gv_cmp(x->w, x->len, y->w, y->len);
	return c ? c < 0 : x->sh < y->sh;
}

static void td_gv_down(td_gvsrc *src, uint32_t *h, size_t n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		if (l < n && td_gvsrc_less(&src[h[l]], &src[h[m]]))
			m = l;
		if (l + 1 < n && td_gvsrc_less(&src[h[l + 1]], &src[h[m]]))
			m = l + 1;
		if (m == i)
			return;
		uint32_t t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

/* Merge the dictionaries of the shards with an index (units[s].post set)
 * into g's vocabulary (one k-way merge by bytes). TD_OK, TD_ENOMEM,
 * TD_ENOGPU (a dictionary not readable: the look-ups stay per shard). */
static int td_gpostg_vocab(struct td_gpostg *g, const td_gunit *units, uint32_t nu)
{
	td_gvsrc *src = calloc(nu + 1, sizeof *src);
	uint32_t *h = malloc((nu + 1) * sizeof *h);
	uint64_t total = 0;
	size_t nh = 0;
	int r = src && h ? TD_OK : TD_ENOMEM;
	for (uint32_t s = 0; !r && s < nu; s++) {
		if (!units[s].post || !*units[s].post)
			continue;
		uint64_t wsz = 0, osz = 0;
		const uint8_t *words = td_archive_bytes(units[s].a, TD_SEC_WORDS, &wsz);
		const void *ob = td_archive_bytes(units[s].a, TD_SEC_WORD_OFF, &osz);
		td_gvsrc *v = &src[s];
		v->n = units[s].nwords;
		v->sh = s;
		v->words = words;
		if (!ob || td_pack_view(&v->off, ob, osz) || v->off.n < v->n + 1 || (v->n && !words) ||
		    td_pack_get(&v->off, v->n) > wsz)
			r = TD_ENOGPU;
		else if (v->n) {
			td_gvsrc_load(v);
			h[nh++] = s;
			total += v->n;
		}
	}
	if (!r && (!(g->vw = malloc((total + 1) * sizeof *g->vw)) || !(g->vl = malloc((total + 1) * 4)) ||
		   !(g->vsh = malloc((total + 1) * 4)) || !(g->vid = malloc((total + 1) * 4)) ||
		   !(g->vstart = malloc((total + 2) * 8))))
		r = TD_ENOMEM;
	for (size_t i = nh / 2; !r && i-- > 0;)
		td_gv_down(src, h, nh, i);
	uint64_t nv = 0, k = 0;
	while (!r && nh) {
		td_gvsrc *v = &src[h[0]];
		if (!nv || td_gv_cmp(g->vw[nv - 1], g->vl[nv - 1], v->w, v->len)) {
			g->vw[nv] = v->w;
			g->vl[nv] = v->len;
			g->vstart[nv++] = k;
		}
		g->vsh[k] = v->sh;
		g->vid[k++] = (uint32_t)v->i;
		if (++v->i == v->n)
			h[0] = h[--nh];
		else
			td_gvsrc_load(v);
		td_gv_down(src, h, nh, 0);
	}
	if (!r) {
		g->vstart[nv] = k;
		g->nv = nv;
	} else {
		free(g->vw);
		free(g->vl);
		free(g->vsh);
		free(g->vid);
		free(g->vstart);
		g->vw = NULL;
		g->vl = g->vsh = g->vid = NULL;
		g->vstart = NULL;
	}
	free(src);
	free(h);
	return r;
}

/* Index of p[0..len) in g's vocabulary, or -1. */
static int64_t td_gpostg_word(const struct td_gpostg *g, const char *p, size_t len)
{
	uint64_t lo = 0, hi = g->nv;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		int c = td_gv_cmp(g->vw[mid], g->vl[mid], (const uint8_t *)p, len);
		if (!c)
			return (int64_t)mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* ---- answering ---- */

/* The answer of a request in one unit: its files in [d0, d1) holding word
 * id w, in the list's order, appended to v. */
static int td_gpost_take(const struct td_gpost *p, uint64_t w, uint32_t d0, uint32_t d1, td_file_count **v, size_t *n,
			 size_t *cap)
{
	for (uint64_t k = p->wstart[w]; k < p->wstart[w + 1]; k++) {
		uint32_t d = p->pd[k];
		if (d < d0 || d >= d1)
			continue;
		if (*n == *cap) {
			size_t c = *cap ? 2 * *cap : 16;
			td_file_count *x = realloc(*v, c * sizeof *x);
			if (!x)
				return TD_ENOMEM;
			*v = x;
			*cap = c;
		}
		(*v)[(*n)++] = (td_file_count){ p->gent[d], p->pc[k] };
	}
	return TD_OK;
}

/* Scope e of unit u as its range of depth-first files; 0 when the index
 * cannot answer it (not a file or directory, not counted whole). */
static int td_gpost_range(const struct td_gpost *p, const td_gunit *u, td_entry e, uint32_t *d0, uint32_t *d1)
{
	td_stat st;
	if (e >= td_archive_nentries(u->a) || td_archive_stat(u->a, e, &st) ||
	    !(S_ISREG(st.mode) || S_ISDIR(st.mode)))
		return 0;
	uint32_t f0 = u->sub[2 * TD_ROOT], a0 = u->sub[2 * (uint64_t)e], a1 = u->sub[2 * (uint64_t)e + 1];
	if (a0 < f0 || a1 < a0 || a1 - f0 > p->nf)
		return 0;
	if (S_ISREG(st.mode) && (a1 != a0 + 1 || u->files[a0] != e))
		return 0;
	*d0 = a0 - f0;
	*d1 = a1 - f0;
	return p->cumbad[*d1] == p->cumbad[*d0];
}

typedef struct td_gpq {
	td_gpu *g;
	td_files_req *reqs;
	size_t n;
	/* format 1-4 */
	const td_gunit *u;
	const struct td_gpost *p;
	/* format 5 */
	td_gmulti *m;
	const struct td_gpostg *gg;
	const td_gunit *units;         /* a shard each (.post NULL: none) */
	uint32_t nu;
	uint8_t *skip;                 /* request -> the engine answers */
	int small5;                    /* format 5 small scopes here too */
	unsigned nt;
	int err;
} td_gpq;

static int td_gfc_cmp_entry(const void *x, const void *y)
{
	const td_file_count *p = x, *q = y;
	return (p->file > q->file) - (p->file < q->file);
}

static int td_gfc_cmp_rank(const void *x, const void *y, void *ctx)
{
	const uint32_t *rank = ctx;
	const td_file_count *p = x, *q = y;
	if (p->count != q->count)
		return p->count > q->count ? -1 : 1;
	return (rank[p->file] > rank[q->file]) - (rank[p->file] < rank[q->file]);
}

/* Request q on a format 5 archive: 1 answered, 0 for the engine, <0 an error. */
static int td_gpq_one5(const td_gpq *c, td_files_req *q)
{
	const td_archive *a = td_gpu_archive(c->g);
	const td_disk_piece *pc = NULL;
	uint64_t np = 0;
	if (q->scope >= td_archive_nentries(a) || td_archive_pieces(a, q->scope, &pc, &np) || np == 0)
		return 0;
	if (np > 1 && td_archive_cut_in_word(a, q->scope))
		return 0;
	const int merged = c->gg->vdone == 1;
	int64_t gw = merged ? td_gpostg_word(c->gg, q->word, q->len) : 0;
	if (gw < 0)
		return 0; /* in no indexed shard: the engine */
	uint32_t st0[64], st1[64], *d0 = np <= 64 ? st0 : malloc(np * 4), *d1 = np <= 64 ? st1 : malloc(np * 4);
	td_file_count *v = NULL;
	size_t n = 0, cap = 0;
	int found = merged, r = d0 && d1 ? TD_OK : TD_ENOMEM;
	/* every piece's shard indexed, and its files counted whole */
	for (uint64_t k = 0; k < np && !r; k++) {
		uint32_t s = pc[k].shard;
		if (s >= c->nu || !c->units[s].post || !*c->units[s].post ||
		    !td_gpost_range(*c->units[s].post, &c->units[s], pc[k].local, &d0[k], &d1[k]))
			r = 1;
	}
	if (!r && merged) { /* the word's shards, from the merged vocabulary */
		for (uint64_t e = c->gg->vstart[gw]; e < c->gg->vstart[gw + 1] && !r; e++)
			for (uint64_t k = 0; k < np && !r; k++)
				if (pc[k].shard == c->gg->vsh[e])
					r = td_gpost_take(*c->units[pc[k].shard].post, c->gg->vid[e], d0[k], d1[k], &v, &n,
							  &cap);
	}
	for (uint64_t k = 0; k < np && !r && !merged; k++) {
		const td_gunit *u = &c->units[pc[k].shard];
		int64_t w = td_gwd_word(u, q->word, q->len);
		if (w < 0)
			continue;
		found = 1;
		r = td_gpost_take(*u->post, (uint64_t)w, d0[k], d1[k], &v, &n, &cap);
	}
	if (d0 != st0)
		free(d0);
	if (d1 != st1)
		free(d1);
	if (r || !found) {
		free(v);
		return r == TD_ENOMEM ? -TD_ENOMEM : 0;
	}
	if (np > 1 && n > 1) { /* several shards' lists: a file cut between shards summed, ranked again */
		qsort(v, n, sizeof *v, td_gfc_cmp_entry);
		size_t j = 0;
		for (size_t i = 0; i < n; i++) {
			if (j && v[j - 1].file == v[i].file)
				v[j - 1].count += v[i].count;
			else
				v[j++] = v[i];
		}
		n = j;
		qsort_r(v, n, sizeof *v, td_gfc_cmp_rank, c->gg->grank);
	}
	q->files = n ? v : NULL;
	q->nfiles = n;
	q->err = TD_OK;
	if (!n)
		free(v);
	return 1;
}

/* Request q on a unit: 1 answered, 0 for the engine, <0 an error. */
static int td_gpq_one1(const td_gpq *c, td_files_req *q)
{
	uint32_t d0, d1;
	if (!td_gpost_range(c->p, c->u, q->scope, &d0, &d1))
		return 0;
	int64_t w = td_gwd_word(c->u, q->word, q->len);
	if (w < 0)
		return 0;
	td_file_count *v = NULL;
	size_t n = 0, cap = 0;
	if (td_gpost_take(c->p, (uint64_t)w, d0, d1, &v, &n, &cap)) {
		free(v);
		return -TD_ENOMEM;
	}
	q->files = n ? v : NULL;
	q->nfiles = n;
	q->err = TD_OK;
	if (!n)
		free(v);
	return 1;
}

static void td_gpq_run(void *ctx, unsigned t)
{
	td_gpq *c = ctx;
	const td_archive *a = td_gpu_archive(c->g);
	/* a contiguous share a thread: no two threads write the same lines of
	 * reqs and skip */
	const size_t i0 = c->n * t / c->nt, i1 = c->n * (t + 1) / c->nt;
	for (size_t i = i0; i < i1; i++) {
		td_files_req *q = &c->reqs[i];
		/* single words only; format 5 small scopes unless
		 * TD_GPU_FILES_SMALL5=0 leaves them to the search kernels */
		c->skip[i] = !q->word || !q->len || q->len > TD_MAXTOK || !td_is_word(q->word, q->len) ||
			     (c->m && !c->small5 &&
			      (q->scope >= td_archive_nentries(a) || !td_query_fast(a, q->scope)));
		if (c->skip[i])
			continue;
		q->files = NULL;
		q->nfiles = 0;
		int r = c->m ? td_gpq_one5(c, q) : td_gpq_one1(c, q);
		if (r < 0)
			c->err = -r;
		c->skip[i] = r != 1;
	}
}

/* Threads answering n requests: cpu_threads (0: the cores), at most 64,
 * and about 512 requests a thread or more. */
static unsigned td_gpq_threads(unsigned threads, size_t n)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	size_t nt = threads ? threads : cores > 0 ? (size_t)cores : 1;
	if (nt > 64)
		nt = 64;
	if (nt > n / 512)
		nt = n / 512;
	return nt ? (unsigned)nt : 1;
}

int td_gpost_files(td_gpu *g, td_files_req *reqs, size_t n, size_t *rest, size_t *nrest)
{
	*nrest = 0;
	const td_archive *a = td_gpu_archive(g);
	const unsigned threads = td_gpu_cpu_threads(g);
	td_gpq c = { .g = g, .reqs = reqs, .n = n, .nt = td_gpq_threads(threads, n) };
	td_gunit one;
	td_gunit *units = NULL;
	int r = TD_OK;
	pthread_mutex_lock(&td_gpost_mu);
	if ((c.m = td_gpu_multi(g))) {
		struct td_gpostg **gg = td_gpu_postg(g);
		c.nu = td_gmulti_units(c.m);
		if (!(units = calloc(c.nu + 1, sizeof *units)))
			r = TD_ENOMEM;
		if (!r && gg && !*gg)
			r = td_gpostg_build(a, c.nu, gg);
		c.gg = gg ? *gg : NULL;
		for (uint32_t s = 0; !r && c.gg && s < c.nu; s++) {
			td_gpu *h = td_gmulti_handle(c.m, s);
			if (!h || !td_gpu_unit(h, &units[s])) {
				units[s].post = NULL;
				continue;
			}
			if (!*units[s].post) {
				int e = td_gpost_build5(&units[s], td_gpu_cpu_threads(h), c.gg, s, units[s].post);
				if (e == TD_ENOMEM)
					r = e;
			}
		}
		if (!r && gg && *gg && !(*gg)->vdone) {
			int e = td_gpostg_vocab(*gg, units, c.nu);
			if (e == TD_ENOMEM)
				r = e;
			else
				(*gg)->vdone = e ? 2 : 1; /* 2: look-ups shard by shard */
		}
		c.units = units;
		if (!c.gg)
			r = r ? r : TD_ENOGPU;
	} else if (td_gpu_unit(g, &one)) {
		if (!*one.post)
			r = td_gpost_build1(&one, threads, one.post);
		c.u = &one;
		c.p = *one.post;
		if (!c.p)
			r = r ? r : TD_ENOGPU;
	} else {
		r = TD_ENOGPU;
	}
	pthread_mutex_unlock(&td_gpost_mu);
	if (r == TD_ENOMEM) {
		free(units);
		return td_fail(TD_ENOMEM, "gpu: ranked files index");
	}
	if (!(c.skip = malloc(n + 1))) {
		free(units);
		return td_fail(TD_ENOMEM, "gpu: ranked files");
	}
	/* format 5 small scopes too, unless TD_GPU_FILES_SMALL5=0 leaves them
	 * to the search kernels (for comparing the two) */
	c.small5 = td_gpu_env_on("TD_GPU_FILES_SMALL5");
	if (!r)
		td_gpu_par(c.nt, td_gpq_run, &c);
	else
		memset(c.skip, 1, n);
	if (c.err) {
		for (size_t i = 0; i < n; i++)
			if (!c.skip[i]) {
				free(reqs[i].files);
				reqs[i].files = NULL;
				reqs[i].nfiles = 0;
			}
		free(c.skip);
		free(units);
		return td_fail(TD_ENOMEM, "gpu: ranked files");
	}
	for (size_t i = 0; i < n; i++)
		if (c.skip[i])
			rest[(*nrest)++] = i;
	free(c.skip);
	free(units);
	return TD_OK;
}
