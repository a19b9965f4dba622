/* td_shard: version 5 archives: the global tree dispatches every grammar question to its shards. */
#include "td_shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "td_analytics_int.h"
#include "td_postings.h"
#include "td_query_int.h"

/* Where a shard's local file entry lies in the global tree. */
typedef struct rev_ent {
	uint32_t e;               /* global entry, TD_NOENTRY if none */
	uint64_t start;           /* the piece's first byte in the global file */
} rev_ent;

typedef struct rev_map {
	uint64_t *base;           /* shard i's locals start at ents[base[i]] */
	uint32_t *nloc;           /* and number nloc[i] */
	rev_ent *ents;
} rev_map;

typedef struct td_shards td_shards;
struct td_shards {
	uint32_t n;
	const td_disk_shard *tab;
	td_pack piece_off;
	/* The piece columns, decoded into pieces[] a chunk of PIECE_CHUNK at a
	 * time on first use (pieces_ready): opening a many-file archive
	 * decodes none; piece_ok[c] is 1 once chunk c is decoded and checked
	 * (acquire/release; piece_mu serialises the decodes). */
	td_pack p_shard, p_local, p_start;
	td_disk_piece *pieces;
	uint64_t npieces;
	atomic_uchar *piece_ok;
	pthread_mutex_t piece_mu;
	uint64_t all_bytes;       /* sum of the shard images */
	_Atomic(td_archive *) *sub;
	/* open_mu[i] serialises the first touches of shard i alone (one open
	 * per shard; a reader of another shard never waits for it); img_ok[i]
	 * is 1 once shard i's whole image matched its sum in the table
	 * (td_shard_check_sums, lock-free): its sections need no check. */
	pthread_mutex_t *open_mu;
	atomic_uchar *img_ok;
	pthread_mutex_t mu;       /* the reverse map's build */
	uint64_t budget;
	_Atomic(rev_map *) rev;
	atomic_uint rev_asks;     /* td_shard_globals calls: the map from the second on */
	_Atomic(uint32_t *) rank; /* global entry -> position in path order (rank_get) */
	_Atomic(struct splits *) splits;
};

typedef struct splits splits;
static void splits_free(splits *x);

static int bad5(const char *what)
{
	return td_fail(TD_ECORRUPT, "shard table: %s", what);
}

#define PIECE_CHUNK 1024u

/* Decode and check the pieces [lo, hi) (every chunk they touch), once;
 * TD_OK, or TD_ECORRUPT on every call for a piece that names no shard. */
static int pieces_ready(const td_shards *sh, uint64_t lo, uint64_t hi)
{
	if (hi <= lo)
		return TD_OK;
	td_shards *m = (td_shards *)sh; /* the decoded pieces are a cache */
	for (uint64_t c = lo / PIECE_CHUNK; c <= (hi - 1) / PIECE_CHUNK; c++) {
		if (atomic_load_explicit(&sh->piece_ok[c], memory_order_acquire))
			continue;
		int err = TD_OK;
		pthread_mutex_lock(&m->piece_mu);
		if (!atomic_load_explicit(&sh->piece_ok[c], memory_order_relaxed)) {
			uint64_t b = c * PIECE_CHUNK, n = sh->npieces - b < PIECE_CHUNK ? sh->npieces - b : PIECE_CHUNK;
			uint64_t v[3][PIECE_CHUNK];
			td_pack_get_range(&sh->p_shard, b, n, v[0]);
			td_pack_get_range(&sh->p_local, b, n, v[1]);
			td_pack_get_range(&sh->p_start, b, n, v[2]);
			for (uint64_t i = 0; i < n && !err; i++) {
				if (v[0][i] >= sh->n || v[1][i] >= UINT32_MAX)
					err = td_fail(TD_ECORRUPT, "shard table: piece %llu names no shard (%llu of %u)",
						      (unsigned long long)(b + i), (unsigned long long)v[0][i], sh->n);
				m->pieces[b + i] = (td_disk_piece){ (uint32_t)v[0][i], (uint32_t)v[1][i], v[2][i] };
			}
			if (!err)
				atomic_store_explicit(&m->piece_ok[c], 1, memory_order_release);
		}
		pthread_mutex_unlock(&m->piece_mu);
		if (err)
			return err;
	}
	return TD_OK;
}

int td_shard_setup(td_archive *a, unsigned flags)
{
	if (a->W || a->S || a->R || a->meta.nroot)
		return bad5("a version 5 container holds a grammar of its own");
	for (unsigned i = 0; i < TD_SEC5_N; i++) {
		const td_disk_section *s = a->sec5[i];
		if (!s)
			return bad5("a shard section is missing");
		if (XXH3_64bits(a->map + s->off, s->size) != s->sum)
			return td_fail(TD_ECORRUPT, "shard section %u: checksum mismatch", s->id);
	}
	td_shards *sh = calloc(1, sizeof *sh);
	if (!sh)
		return TD_ENOMEM;
	pthread_mutex_init(&sh->mu, NULL);
	pthread_mutex_init(&sh->piece_mu, NULL);
	sh->budget = a->rcache_budget;
	a->sh = sh;
	const td_disk_section *st = a->sec5[0], *po = a->sec5[1];
	if (st->size % sizeof(td_disk_shard) || st->size / sizeof(td_disk_shard) >= UINT32_MAX / 2)
		return bad5("wrong size");
	sh->n = (uint32_t)(st->size / sizeof(td_disk_shard));
	sh->tab = (const td_disk_shard *)(a->map + st->off);
	for (uint32_t i = 0; i < sh->n; i++) {
		const td_disk_shard *d = &sh->tab[i];
		if ((d->off & 7) || d->off < sizeof(td_disk_header) || d->off > a->size ||
		    d->size > a->size - d->off || d->size < sizeof(td_disk_header))
			return td_fail(TD_ECORRUPT, "shard %u: out of bounds", i);
		sh->all_bytes += d->size;
	}
	td_pack *ps = &sh->p_shard, *pl = &sh->p_local, *pst = &sh->p_start;
	if (td_pack_view(ps, a->map + a->sec5[2]->off, a->sec5[2]->size) ||
	    td_pack_view(pl, a->map + a->sec5[3]->off, a->sec5[3]->size) ||
	    td_pack_view(pst, a->map + a->sec5[4]->off, a->sec5[4]->size) || ps->n != pl->n || ps->n != pst->n)
		return bad5("malformed piece columns");
	sh->npieces = ps->n;
	/* decoded on first use (pieces_ready); the pages stay untouched */
	if (!(sh->pieces = malloc((sh->npieces + 1) * sizeof *sh->pieces)) ||
	    !(sh->piece_ok = calloc(sh->npieces / PIECE_CHUNK + 1, sizeof *sh->piece_ok)))
		return TD_ENOMEM;
	/* TD_OPEN_VERIFY: every piece now */
	int perr = (flags & TD_OPEN_VERIFY) ? pieces_ready(sh, 0, sh->npieces) : TD_OK;
	if (perr)
		return perr;
	if (td_pack_view(&sh->piece_off, a->map + po->off, po->size) || sh->piece_off.n != a->meta.nentries + 1 ||
	    td_pack_get(&sh->piece_off, 0) != 0 || td_pack_get(&sh->piece_off, a->meta.nentries) != sh->npieces)
		return bad5("piece offsets do not cover the piece table");
	sh->sub = calloc(sh->n ? sh->n : 1, sizeof *sh->sub);
	sh->img_ok = calloc(sh->n ? sh->n : 1, sizeof *sh->img_ok);
	sh->open_mu = malloc((sh->n ? sh->n : 1) * sizeof *sh->open_mu);
	if (!sh->sub || !sh->img_ok || !sh->open_mu) {
		free(sh->open_mu);
		sh->open_mu = NULL;
		return TD_ENOMEM;
	}
	for (uint32_t i = 0; i < sh->n; i++)
		pthread_mutex_init(&sh->open_mu[i], NULL);
	return TD_OK;
}

void td_shard_free(td_archive *a)
{
	td_shards *sh = a->sh;
	if (!sh)
		return;
	for (uint32_t i = 0; sh->sub && i < sh->n; i++)
		td_archive_close(atomic_load(&sh->sub[i]));
	free(sh->sub);
	free(sh->img_ok);
	for (uint32_t i = 0; sh->open_mu && i < sh->n; i++)
		pthread_mutex_destroy(&sh->open_mu[i]);
	free(sh->open_mu);
	free(sh->pieces);
	free(sh->piece_ok);
	pthread_mutex_destroy(&sh->piece_mu);
	splits_free(atomic_load(&sh->splits));
	rev_map *r = atomic_load(&sh->rev);
	if (r) {
		free(r->base);
		free(r->nloc);
		free(r->ents);
		free(r);
	}
	free(atomic_load(&sh->rank));
	pthread_mutex_destroy(&sh->mu);
	free(sh);
	a->sh = NULL;
}

/* The cache budget of shard i: its share of the archive's by image size,
 * but at least min(budget, 64 MiB), so a read of one shard keeps its read
 * tables (engine/README.md: Format 5). */
static uint64_t shard_budget(const td_shards *sh, uint32_t i)
{
	uint64_t floor = sh->budget < (UINT64_C(64) << 20) ? sh->budget : UINT64_C(64) << 20;
	uint64_t share = sh->all_bytes ? (uint64_t)((double)sh->budget * (double)sh->tab[i].size / (double)sh->all_bytes)
				       : sh->budget;
	return share > floor ? share : floor;
}

int td_shard_sub(const td_archive *a, uint32_t i, td_archive **out)
{
	td_shards *sh = a->sh;
	if (i >= sh->n)
		return td_fail(TD_ECORRUPT, "piece names shard %u of %u", i, sh->n);
	td_archive *s = atomic_load_explicit(&sh->sub[i], memory_order_acquire);
	if (s) {
		*out = s;
		return TD_OK;
	}
	int err = TD_OK;
	pthread_mutex_lock(&sh->open_mu[i]);
	s = atomic_load_explicit(&sh->sub[i], memory_order_relaxed);
	if (!s) {
		const td_disk_shard *d = &sh->tab[i];
		/* the shard's tree a directory at a time: most questions reach
		 * a few of its entries, or none (its files by number) */
		err = td_archive_open_mem(a->map + d->off, d->size, TD_OPEN_LAZY_TREE, &s);
		if (err) {
			char why[512];
			snprintf(why, sizeof why, "%s", td_errdetail());
			err = td_fail(err, "shard %u: %s", i, why);
		} else {
			td_archive_set_cache(s, shard_budget(sh, i));
			/* publish, then look (td_shard_check_sums stores img_ok,
			 * then looks at sub[i]; both sequentially consistent): one
			 * of the two sets sums_ok once the image has matched */
			atomic_store(&sh->sub[i], s);
			if (atomic_load(&sh->img_ok[i]))
				atomic_store(&s->sums_ok, 1);
		}
	}
	pthread_mutex_unlock(&sh->open_mu[i]);
	*out = s;
	return err;
}

/* Entry e's pieces: sh->pieces[*first, *first + *n). */
static int pieces_of(const td_archive *a, td_entry e, uint64_t *first, uint64_t *n)
{
	const td_shards *sh = a->sh;
	uint64_t lo = td_pack_get(&sh->piece_off, e), hi = td_pack_get(&sh->piece_off, e + 1);
	if (lo > hi || hi > sh->npieces)
		return td_fail(TD_ECORRUPT, "entry %u: bad piece range", e);
	int err = pieces_ready(sh, lo, hi);
	if (err)
		return err;
	*first = lo;
	*n = hi - lo;
	return TD_OK;
}

/* Piece (shard, local) bytes [at, at + want) into buf: with sc through
 * its cursor, bound to that shard first (in place, once one exists). */
static int piece_read(td_archive *s, uint32_t shard, td_entry local, uint64_t at, uint8_t *buf, size_t want,
		      size_t *g, td_shard_cur *sc)
{
	if (!sc)
		return td_extract(s, local, at, buf, want, g);
	if (!sc->sub) {
		if (!(sc->sub = td_cursor_new(s)))
			return TD_ENOMEM;
		sc->shard = shard;
	} else if (sc->shard != shard) {
		td_cursor_bind(sc->sub, s);
		sc->shard = shard;
	}
	return td_cursor_read(sc->sub, local, at, buf, want, g);
}

static int piece_short(td_entry e, uint64_t k, uint32_t shard)
{
	return td_fail(TD_ECORRUPT, "entry %u: piece %llu in shard %u is shorter than the file says", e,
		       (unsigned long long)k, shard);
}

int td_shard_read(const td_archive *a, td_entry e, uint64_t off, void *buf, size_t len, size_t *got,
		  td_shard_cur *sc)
{
	*got = 0;
	size_t done = 0;
	int err = TD_OK;
	/* a read inside the piece this cursor read last: no look-up */
	if (sc && sc->have && sc->e == e && off >= sc->lo && off < sc->hi && len) {
		size_t want = (size_t)(sc->hi - off < len ? sc->hi - off : len);
		if ((err = td_cursor_read(sc->sub, sc->local, off - sc->lo, buf, want, &done)) ||
		    (done != want && (err = piece_short(e, sc->piece, sc->shard)))) {
			sc->have = 0;
			return err;
		}
		off += done;
		if (done == len) {
			*got = done;
			return TD_OK;
		}
	}
	if (e >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no entry %u", e);
	uint64_t size = td_pack_get(&a->e_size, e);
	if (S_ISDIR(td_pack_get(&a->e_mode, e)))
		return TD_EISDIR;
	if (off >= size || len == 0) {
		*got = done;
		return TD_OK;
	}
	uint64_t first = 0, n = 0;
	if ((err = pieces_of(a, e, &first, &n)))
		return err;
	if (n == 0)
		return td_fail(TD_ECORRUPT, "entry %u: a file without pieces", e);
	const td_disk_piece *pc = a->sh->pieces + first;
	uint64_t lo = 0, hi = n; /* the last piece starting at or before off */
	while (hi - lo > 1) {
		uint64_t mid = (lo + hi) / 2;
		if (pc[mid].start <= off)
			lo = mid;
		else
			hi = mid;
	}
	for (uint64_t k = lo; k < n && done < len && off < size; k++) {
		uint64_t end = k + 1 < n ? pc[k + 1].start : size;
		if (pc[k].start > off || end < pc[k].start || end > size) {
			err = td_fail(TD_ECORRUPT, "entry %u: pieces out of order", e);
			break;
		}
		if (off >= end)
			continue;
		td_archive *s;
		if ((err = td_shard_sub(a, pc[k].shard, &s)))
			break;
		size_t want = (size_t)(end - off < len - done ? end - off : len - done), g = 0;
		if ((err = piece_read(s, pc[k].shard, pc[k].local, off - pc[k].start, (uint8_t *)buf + done, want, &g,
				      sc)))
			break;
		if (g != want) {
			err = piece_short(e, k, pc[k].shard);
			break;
		}
		if (sc)
			*sc = (td_shard_cur){ sc->sub, sc->shard, 1, e, pc[k].local, pc[k].start, end, k };
		done += g;
		off += g;
	}
	if (err && sc)
		sc->have = 0;
	*got = done;
	return err;
}

int td_shard_count(const td_archive *a, const char *word, size_t len, td_entry scope, uint64_t *count)
{
	*count = 0;
	if (!td_is_word(word, len))
		return TD_ENOTWORD;
	return td_shard_phrase_count(a, word, len, scope, count); /* with the words cut in two */
}

/* Why rev_get gave NULL: a piece that names no shard, or memory. */
/* The first piece whose entry in its shard is past any shard's entries
 * (a shard holds at most the container's entries and pieces), or npieces;
 * the pieces are ready. */
static uint64_t local_past(const td_archive *a)
{
	const td_shards *sh = a->sh;
	uint64_t i = 0;
	while (i < sh->npieces && sh->pieces[i].local < a->meta.nentries + sh->npieces)
		i++;
	return i;
}

static int rev_err(const td_archive *a)
{
	int err = pieces_ready(a->sh, 0, a->sh->npieces);
	uint64_t bad = err ? 0 : local_past(a);
	if (!err && bad < a->sh->npieces)
		err = td_fail(TD_ECORRUPT, "shard table: piece %llu: entry %u past its shard's entries",
			      (unsigned long long)bad, (unsigned)a->sh->pieces[bad].local);
	return err ? err : td_fail(TD_ENOMEM, "the shards' entry map");
}

/* The map from each shard's file entries to the global ones, built on
 * the first question that needs it (a directory's hits or files): one pass
 * over the entries' piece ranges and modes, a chunk of them decoded at a
 * time; no entry is stat'ed, so the tree is checked only where an answer
 * is read (td_archive_path, td_archive_stat of what it names). */
#define REV_CHUNK 512u

static const rev_map *rev_get(const td_archive *a)
{
	td_shards *sh = a->sh;
	rev_map *r = atomic_load_explicit(&sh->rev, memory_order_acquire);
	if (r)
		return r;
	pthread_mutex_lock(&sh->mu);
	r = atomic_load_explicit(&sh->rev, memory_order_relaxed);
	if (r)
		goto out;
	uint64_t ne = a->meta.nentries, total = 0;
	r = calloc(1, sizeof *r);
	if (!r || !(r->base = calloc(sh->n + 1, sizeof *r->base)) || !(r->nloc = calloc(sh->n + 1, sizeof *r->nloc)))
		goto fail;
	if (pieces_ready(sh, 0, sh->npieces) || local_past(a) < sh->npieces)
		goto fail;
	for (uint64_t i = 0; i < sh->npieces; i++)
		if (sh->pieces[i].shard < sh->n && sh->pieces[i].local + 1 > r->nloc[sh->pieces[i].shard])
			r->nloc[sh->pieces[i].shard] = sh->pieces[i].local + 1;
	for (uint32_t i = 0; i < sh->n; i++) {
		r->base[i] = total;
		total += r->nloc[i];
	}
	if (!(r->ents = malloc((total ? total : 1) * sizeof *r->ents)))
		goto fail;
	for (uint64_t i = 0; i < total; i++)
		r->ents[i].e = TD_NOENTRY;
	/* each file's pieces (a directory has none; a range out of order
	 * or past the pieces maps nothing, as pieces_of refuses it) */
	for (uint64_t e0 = 0; e0 < ne; e0 += REV_CHUNK) {
		uint64_t off[REV_CHUNK + 1], mode[REV_CHUNK], m = ne - e0 < REV_CHUNK ? ne - e0 : REV_CHUNK;
		td_pack_get_range(&sh->piece_off, e0, m + 1, off);
		td_pack_get_range(&a->e_mode, e0, m, mode);
		for (uint64_t i = 0; i < m; i++) {
			if (S_ISDIR(mode[i]) || off[i] > off[i + 1] || off[i + 1] > sh->npieces)
				continue;
			for (uint64_t k = off[i]; k < off[i + 1]; k++) {
				const td_disk_piece *p = &sh->pieces[k];
				if (p->shard < sh->n)
					r->ents[r->base[p->shard] + p->local] = (rev_ent){ (uint32_t)(e0 + i), p->start };
			}
		}
	}
	atomic_store_explicit(&sh->rev, r, memory_order_release);
	goto out;
fail:
	if (r) {
		free(r->base);
		free(r->nloc);
		free(r);
	}
	r = NULL;
out:
	pthread_mutex_unlock(&sh->mu);
	return r;
}

/* Path order (depth-first, names sorted) of the global tree: entry ->
 * position; built on the first search of a directory over several
 * files. NULL when out of memory. */
static const uint32_t *rank_get(const td_archive *a)
{
	td_shards *sh = a->sh;
	uint32_t *rank = atomic_load_explicit(&sh->rank, memory_order_acquire);
	if (rank)
		return rank;
	pthread_mutex_lock(&sh->mu);
	rank = atomic_load_explicit(&sh->rank, memory_order_relaxed);
	if (!rank) {
		uint64_t ne = a->meta.nentries;
		uint32_t *stack = malloc(ne * sizeof *stack);
		rank = malloc(ne * sizeof *rank);
		if (stack && rank) {
			/* a depth-first walk, children pushed in reverse */
			uint64_t top = 0, at = 0;
			stack[top++] = TD_ROOT;
			while (top) {
				td_entry e = stack[--top];
				rank[e] = (uint32_t)at++;
				td_entry c0;
				uint32_t nc;
				if (td_archive_children(a, e, &c0, &nc) == TD_OK)
					for (uint32_t i = nc; i-- > 0 && top < ne;)
						stack[top++] = c0 + i;
			}
			atomic_store_explicit(&sh->rank, rank, memory_order_release);
		} else {
			free(rank);
			rank = NULL;
		}
		free(stack);
	}
	pthread_mutex_unlock(&sh->mu);
	return rank;
}

typedef struct rhit {
	uint32_t rank;
	uint32_t e;
	uint64_t off;
} rhit;

static int cmp_rhit(const void *x, const void *y)
{
	const rhit *a = x, *b = y;
	if (a->rank != b->rank)
		return a->rank < b->rank ? -1 : 1;
	return (a->off > b->off) - (a->off < b->off);
}

static int cmp_hit_off(const void *x, const void *y)
{
	const td_hit *a = x, *b = y;
	return (a->off > b->off) - (a->off < b->off);
}

int td_shard_global(const td_archive *a, uint32_t shard, td_entry local, td_entry *e, uint64_t *start)
{
	const rev_map *r = rev_get(a);
	if (!r)
		return rev_err(a);
	rev_ent x = { TD_NOENTRY, 0 };
	if (shard < a->sh->n && local < r->nloc[shard])
		x = r->ents[r->base[shard] + local];
	if (x.e == TD_NOENTRY)
		return td_fail(TD_ECORRUPT, "shard %u: entry %u is in no file's pieces", shard, local);
	*e = x.e;
	*start = x.start;
	return TD_OK;
}

/* A packed column read in order, a chunk at a time. */
typedef struct col_cur {
	const td_pack *p;
	uint64_t total, base, n;
	uint64_t v[512];
} col_cur;

static inline uint64_t col_at(col_cur *c, uint64_t i)
{
	if (i < c->base || i - c->base >= c->n) {
		c->base = i;
		c->n = c->total - i < 512 ? c->total - i : 512;
		td_pack_get_range(c->p, i, c->n, c->v);
	}
	return c->v[i - c->base];
}

/* From e (< ne, or ne), the first entry e' with e' == ne or column c's
 * value e' + 1 above k (c ascending: the entry whose piece range holds
 * piece k), a chunk at a time. */
static uint64_t walk_to(col_cur *c, uint64_t e, uint64_t ne, uint64_t k)
{
	while (e < ne) {
		(void)col_at(c, e + 1); /* its chunk loaded */
		const uint64_t end = c->base + c->n;
		while (e + 1 < end && c->v[e + 1 - c->base] <= k)
			e++;
		if (e + 1 < end)
			break;
	}
	return e;
}

/* td_shard_globals without the map: one pass over the piece columns and
 * the entries' piece offsets, in order, picking the pieces asked for. */
static int globals_pass(const td_archive *a, td_shard_loc *v, size_t n)
{
	const td_shards *sh = a->sh;
	const uint64_t np = sh->npieces, ne = a->meta.nentries;
	/* slot[at[s] + l]: 1 + the index in v of (s, l) */
	uint64_t *at = calloc(sh->n + 1, sizeof *at);
	if (!at)
		return TD_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (v[i].shard >= sh->n) {
			free(at);
			return td_fail(TD_ECORRUPT, "shard %u: entry %u is in no file's pieces", v[i].shard, v[i].local);
		}
		if ((uint64_t)v[i].local + 1 > at[v[i].shard + 1])
			at[v[i].shard + 1] = (uint64_t)v[i].local + 1;
		v[i].e = TD_NOENTRY;
	}
	for (uint32_t s = 0; s < sh->n; s++)
		at[s + 1] += at[s];
	uint32_t *slot = calloc(at[sh->n] + 1, sizeof *slot);
	col_cur *c = malloc(3 * sizeof *c);
	if (!slot || !c) {
		free(at), free(slot), free(c);
		return TD_ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		slot[at[v[i].shard] + v[i].local] = (uint32_t)i + 1;
	/* c[0].v, c[1].v: a chunk of the shard and local columns (below);
	 * c[2]: the entries' piece offsets, read in order */
	c[2] = (col_cur){ .p = &sh->piece_off, .total = ne + 1 };
	uint64_t e = 0;
	const uint64_t nsh = sh->n, none = at[nsh]; /* slot[none]: 0, for a piece not asked for */
	uint64_t hk[512];
	uint32_t hs[512];
	/* the two piece columns a chunk at a time; the pieces asked for
	 * gathered without a branch a piece, then each one's file */
	for (uint64_t b = 0; b < np; b += 512) {
		const uint64_t m = np - b < 512 ? np - b : 512;
		td_pack_get_range(&sh->p_shard, b, m, c[0].v);
		td_pack_get_range(&sh->p_local, b, m, c[1].v);
		size_t nh = 0;
		for (uint64_t j = 0; j < m; j++) {
			const uint64_t ps = c[0].v[j], pl = c[1].v[j];
			const uint64_t s0 = ps < nsh ? ps : 0;
			const uint64_t si = ps < nsh && pl < at[s0 + 1] - at[s0] ? at[s0] + pl : none;
			hk[nh] = b + j;
			hs[nh] = slot[si];
			nh += hs[nh] != 0;
		}
		for (size_t h = 0; h < nh; h++) {
			const uint64_t k = hk[h];
			/* its file: the entry whose piece range holds k (offsets ascend) */
			e = walk_to(&c[2], e, ne, k);
			if (e >= ne || col_at(&c[2], e) > k || S_ISDIR(td_pack_get(&a->e_mode, e)))
				continue; /* offsets out of order: as the map, nothing */
			v[hs[h] - 1].e = (td_entry)e;
		}
	}
	int err = TD_OK;
	for (size_t i = 0; i < n && !err; i++)
		if (v[i].e == TD_NOENTRY)
			err = td_fail(TD_ECORRUPT, "shard %u: entry %u is in no file's pieces", v[i].shard, v[i].local);
	free(at), free(slot), free(c);
	return err;
}

int td_shard_globals(const td_archive *a, td_shard_loc *v, size_t n)
{
	td_shards *sh = a->sh;
	if (!n)
		return TD_OK;
	if (!atomic_load_explicit(&sh->rev, memory_order_acquire) && atomic_fetch_add(&sh->rev_asks, 1) == 0)
		return globals_pass(a, v, n);
	uint64_t start;
	for (size_t i = 0; i < n; i++) {
		int err = td_shard_global(a, v[i].shard, v[i].local, &v[i].e, &start);
		if (err)
			return err;
	}
	return TD_OK;
}

int td_shard_sort_hits(const td_archive *a, td_hits *out, size_t before)
{
	if (out->n - before < 2)
		return TD_OK;
	size_t m = out->n - before, same = 1;
	for (size_t i = before + 1; i < out->n && same; i++)
		same = out->v[i].file == out->v[before].file;
	if (same) { /* one file: by offset, without the tree's path order */
		qsort(out->v + before, m, sizeof *out->v, cmp_hit_off);
		return TD_OK;
	}
	const uint32_t *rank = rank_get(a);
	if (!rank)
		return td_fail(TD_ENOMEM, "the tree's path order");
	rhit *t = malloc(m * sizeof *t);
	if (!t)
		return TD_ENOMEM;
	for (size_t i = 0; i < m; i++)
		t[i] = (rhit){ rank[out->v[before + i].file], out->v[before + i].file, out->v[before + i].off };
	qsort(t, m, sizeof *t, cmp_rhit);
	for (size_t i = 0; i < m; i++)
		out->v[before + i] = (td_hit){ t[i].e, t[i].off };
	free(t);
	return TD_OK;
}

/* Append the hits of scope's pieces pc[0..n) (per[k]: td_search of piece
 * k on its shard) to out as td_search reports them; dir: scope is a
 * directory. On error out is as before. */
static int search_merge(const td_archive *a, td_entry scope, int dir, const td_disk_piece *pc, const td_hits *per,
			uint64_t n, td_hits *out)
{
	size_t before = out->n;
	int err = TD_OK;
	for (uint64_t k = 0; k < n && !err; k++) {
		const td_disk_piece *p = &pc[k];
		const td_hits *h = &per[k];
		for (size_t i = 0; i < h->n && !err; i++) {
			td_entry e = scope;
			uint64_t start = p->start;
			if (dir)
				err = td_shard_global(a, p->shard, h->v[i].file, &e, &start);
			if (!err)
				err = td_hits_push(out, e, h->v[i].off + start);
		}
	}
	/* shards name their entries by number, not by name: put the hits in
	 * the tree's path order */
	if (!err && dir)
		err = td_shard_sort_hits(a, out, before);
	if (err)
		out->n = before;
	return err;
}

int td_shard_hits(const td_archive *a, td_entry scope, td_piece_search_fn fn, void *ctx, td_hits *out)
{
	td_stat st;
	uint64_t first = 0, n = 0;
	int err = td_archive_stat(a, scope, &st);
	if (err || S_ISLNK(st.mode))
		return err;
	if ((err = pieces_of(a, scope, &first, &n)))
		return err;
	td_hits *per = calloc(n ? n : 1, sizeof *per);
	if (!per)
		return td_fail(TD_ENOMEM, "search: hits per shard");
	const td_disk_piece *pc = a->sh->pieces + first;
	for (uint64_t k = 0; k < n && !err; k++) {
		td_archive *s;
		if (!(err = td_shard_sub(a, pc[k].shard, &s)))
			err = fn(ctx, s, pc[k].local, &per[k]);
	}
	if (!err)
		err = search_merge(a, scope, S_ISDIR(st.mode), pc, per, n, out);
	for (uint64_t k = 0; k < n; k++)
		td_hits_free(&per[k]);
	free(per);
	return err;
}

int td_shard_search(const td_archive *a, const char *word, size_t len, td_entry scope, td_hits *out)
{
	if (!td_is_word(word, len))
		return TD_ENOTWORD;
	return td_shard_phrase_search(a, word, len, scope, out); /* with the words cut in two */
}

int td_archive_search_merge(const td_archive *a, td_entry scope, const td_hits *per, uint64_t n, td_hits *out)
{
	if (!a->sh)
		return td_fail(TD_EINVAL, "search merge: not a version 5 archive");
	td_stat st;
	uint64_t first = 0, np = 0;
	int err = td_archive_stat(a, scope, &st);
	if (!err)
		err = pieces_of(a, scope, &first, &np);
	if (err)
		return err;
	if (np != n)
		return td_fail(TD_EINVAL, "search merge: %llu answers for %llu pieces", (unsigned long long)n,
			       (unsigned long long)np);
	return search_merge(a, scope, S_ISDIR(st.mode), a->sh->pieces + first, per, n, out);
}

/* The files split over several shards, and those of them cut inside a
 * word (found on first use: one byte read at each cut). */
struct splits {
	td_entry *all, *mid;
	size_t nall, nmid;
};

static void splits_free(splits *x)
{
	if (x) {
		free(x->all);
		free(x->mid);
		free(x);
	}
}

static int splits_get(const td_archive *a, const splits **out)
{
	td_shards *sh = a->sh;
	splits *x = atomic_load_explicit(&sh->splits, memory_order_acquire);
	if (x) {
		*out = x;
		return TD_OK;
	}
	/* built outside the lock (reads open shards, which takes it) */
	int err = TD_OK;
	size_t cap = 0;
	if (!(x = calloc(1, sizeof *x)))
		return TD_ENOMEM;
	for (td_entry e = 0; e < a->meta.nentries && !err; e++) {
		uint64_t lo = td_pack_get(&sh->piece_off, e), hi = td_pack_get(&sh->piece_off, e + 1);
		if (hi <= lo + 1 || hi > sh->npieces || !S_ISREG(td_pack_get(&a->e_mode, e)))
			continue;
		if ((err = pieces_ready(sh, lo, hi)))
			break;
		if (x->nall == cap) {
			cap = cap ? 2 * cap : 16;
			td_entry *v = realloc(x->all, cap * sizeof *v), *w = v ? realloc(x->mid, cap * sizeof *w) : NULL;
			if (v)
				x->all = v;
			if (w)
				x->mid = w;
			if (!v || !w) {
				err = TD_ENOMEM;
				break;
			}
		}
		x->all[x->nall++] = e;
		int mid = 0;
		for (uint64_t k = lo + 1; k < hi && !mid && !err; k++) {
			uint8_t b;
			size_t got;
			uint64_t c = sh->pieces[k].start;
			/* the piece before says, when its shard stores postings
			 * (td_postings.h); else read the byte (a data check of
			 * that shard: its sections hashed, its words decoded) */
			const td_disk_piece *pp = &sh->pieces[k - 1];
			td_archive *ps;
			int known = td_shard_sub(a, pp->shard, &ps) ? -1 : td_post_ends_mid(ps, pp->local);
			if (known >= 0)
				mid = c && known;
			else if (c && !(err = td_shard_read(a, e, c - 1, &b, 1, &got, NULL)))
				mid = got == 1 && !td_cut_byte(b);
		}
		if (mid)
			x->mid[x->nmid++] = e;
	}
	if (err) {
		splits_free(x);
		return err;
	}
	splits *none = NULL;
	if (!atomic_compare_exchange_strong(&sh->splits, &none, x)) {
		splits_free(x);
		x = none;
	}
	*out = x;
	return TD_OK;
}

/* 1 when e is scope or under it, 0 when not, or an error (< 0) when an
 * entry on the way up does not stat (a damaged tree): the caller reports it
 * rather than leave e's cuts out of the answer. */
static int in_scope(const td_archive *a, td_entry e, td_entry scope)
{
	unsigned depth = 0;
	if (scope == TD_ROOT)
		return 1;
	while (e != scope && e != TD_ROOT && depth++ < 4096) {
		td_stat st;
		int err = td_archive_stat(a, e, &st);
		if (err)
			return err;
		e = st.parent;
	}
	return e == scope;
}

int td_shard_split_files(const td_archive *a, td_entry scope, int midword, td_entry **out, size_t *nout)
{
	*out = NULL;
	*nout = 0;
	if (scope >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no entry %u", scope);
	const splits *x;
	int err = splits_get(a, &x);
	if (err)
		return err;
	const td_entry *src = midword ? x->mid : x->all;
	size_t ns = midword ? x->nmid : x->nall, n = 0;
	td_entry *v = ns ? malloc(ns * sizeof *v) : NULL;
	if (ns && !v)
		return TD_ENOMEM;
	for (size_t i = 0; i < ns; i++) {
		int in = in_scope(a, src[i], scope);
		if (in < 0) {
			free(v);
			return in;
		}
		if (in)
			v[n++] = src[i];
	}
	if (!n) {
		free(v);
		v = NULL;
	}
	*out = v;
	*nout = n;
	return TD_OK;
}

int td_archive_cut_in_word(const td_archive *a, td_entry scope)
{
	const splits *x;
	if (!a->sh || scope >= a->meta.nentries || splits_get(a, &x))
		return 0;
	for (size_t i = 0; i < x->nmid; i++)
		if (in_scope(a, x->mid[i], scope))
			return 1;
	return 0;
}

int td_shard_query_fast(const td_archive *a, td_entry scope)
{
	if (scope == TD_ROOT)
		return 1;
	uint64_t first = 0, n = 0;
	if (scope >= a->meta.nentries || pieces_of(a, scope, &first, &n))
		return 0;
	for (uint64_t k = 0; k < n; k++) {
		const td_disk_piece *p = &a->sh->pieces[first + k];
		td_archive *s;
		if (td_shard_sub(a, p->shard, &s) || !td_query_fast(s, p->local))
			return 0;
	}
	return 1;
}

int td_shard_warm(const td_archive *a, const volatile int *stop, uint64_t *bytes)
{
	uint64_t sum = 0;
	int err = TD_OK;
	for (uint32_t i = 0; i < a->sh->n && !err; i++) {
		if (stop && __atomic_load_n(stop, __ATOMIC_RELAXED))
			break;
		td_archive *s;
		uint64_t b = 0;
		if (!(err = td_shard_sub(a, i, &s)))
			err = td_archive_warm(s, stop, &b);
		sum += b;
	}
	if (bytes)
		*bytes = sum;
	return err;
}

int td_shard_will_read(const td_archive *a, uint64_t bytes)
{
	/* a hint that covers a shard's whole text goes to it: a pass over
	 * many files reads each shard through */
	int err = TD_OK;
	for (uint32_t i = 0; i < a->sh->n && !err; i++) {
		td_archive *s;
		if (bytes < a->sh->tab[i].input_bytes)
			continue;
		if (!(err = td_shard_sub(a, i, &s)))
			err = td_archive_will_read(s, a->sh->tab[i].input_bytes);
	}
	return err;
}

int td_shard_check_data(const td_archive *a)
{
	for (uint32_t i = 0; i < a->sh->n; i++) {
		td_archive *s;
		int err = td_shard_sub(a, i, &s);
		if (!err && (err = td_archive_check_data(s))) {
			char why[512];
			snprintf(why, sizeof why, "%s", td_errdetail());
			err = td_fail(err, "shard %u: %s", i, why);
		}
		if (err)
			return err;
	}
	return TD_OK;
}

/* Shard i's image does not match its checksum (td_shard_verify): the
 * message names the damaged section when the shard's own checks find it
 * (else the image: bytes no section covers). Always TD_ECORRUPT. */
static int shard_sum_fail(const td_archive *a, uint32_t i)
{
	char why[512];
	td_archive *s;
	if (td_shard_sub(a, i, &s) != TD_OK) { /* its header or table damaged: "shard i: why" */
		char pre[32];
		const char *d = td_errdetail();
		const size_t pl = (size_t)snprintf(pre, sizeof pre, "shard %u: ", i);
		snprintf(why, sizeof why, "%s", strncmp(d, pre, pl) ? d : d + pl);
		return td_fail(TD_ECORRUPT, "shard %u: checksum mismatch (%s)", i, why);
	}
	if (td_archive_verify(s) != TD_ECORRUPT)
		return td_fail(TD_ECORRUPT, "shard %u: checksum mismatch", i);
	snprintf(why, sizeof why, "%s", td_errdetail());
	return td_fail(TD_ECORRUPT, "shard %u: %s", i, why);
}

int td_shard_check_sums(const td_archive *a, const volatile int *stop)
{
	td_shards *sh = a->sh;
	for (uint32_t i = 0; i < sh->n; i++) {
		if (atomic_load(&sh->img_ok[i]))
			continue;
		const td_disk_shard *d = &sh->tab[i];
		uint64_t sum;
		if (td_hash_stoppable(a->map + d->off, d->size, stop, &sum))
			return TD_STOPPED;
		if (sum != d->sum)
			return td_fail(TD_ECORRUPT, "shard %u: checksum mismatch", i);
		/* store, then look (td_shard_sub publishes, then looks) */
		atomic_store(&sh->img_ok[i], 1);
		td_archive *s = atomic_load(&sh->sub[i]);
		if (s)
			atomic_store(&s->sums_ok, 1);
	}
	return TD_OK;
}

void td_shard_set_cache(td_archive *a, uint64_t bytes)
{
	a->sh->budget = bytes;
	for (uint32_t i = 0; i < a->sh->n; i++) {
		td_archive *s = atomic_load(&a->sh->sub[i]);
		if (s)
			td_archive_set_cache(s, shard_budget(a->sh, i));
	}
}

void td_shard_fill_info(const td_archive *a, td_info *o)
{
	o->nwords = o->nother = o->nrules = o->nrulesyms = o->nroot = o->max_depth = 0;
	for (uint32_t i = 0; i < a->sh->n; i++) {
		td_archive *s;
		if (td_shard_sub(a, i, &s))
			continue;
		td_info x;
		td_archive_info(s, &x);
		o->nwords += x.nwords;
		o->nother += x.nother;
		o->nrules += x.nrules;
		o->nrulesyms += x.nrulesyms;
		o->nroot += x.nroot;
		o->max_depth = x.max_depth > o->max_depth ? x.max_depth : o->max_depth;
		for (unsigned id = 1; id < TD_SEC_MAX; id++)
			o->section_bytes[id] += x.section_bytes[id];
	}
}

const td_disk_shard *td_shard_table(const td_archive *a, uint32_t *n)
{
	*n = a->sh->n;
	return a->sh->tab;
}

int td_shard_pieces(const td_archive *a, td_entry e, const td_disk_piece **p, uint64_t *n)
{
	uint64_t first = 0;
	int err = pieces_of(a, e, &first, n);
	*p = err ? NULL : a->sh->pieces + first;
	return err;
}

int td_archive_shard(const td_archive *a, uint32_t i, const td_archive **out)
{
	*out = NULL;
	if (!a->sh || i >= a->sh->n)
		return td_fail(TD_EINVAL, "no shard %u", i);
	td_archive *s = NULL;
	int err = td_shard_sub(a, i, &s);
	*out = s;
	return err;
}

int td_archive_pieces(const td_archive *a, td_entry e, const td_disk_piece **p, uint64_t *n)
{
	*p = NULL;
	*n = 0;
	if (!a->sh || e >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no pieces of entry %u", e);
	return td_shard_pieces(a, e, p, n);
}

uint32_t td_archive_nshards(const td_archive *a)
{
	return a->sh ? a->sh->n : 0;
}

int td_archive_shard_info(const td_archive *a, uint32_t i, td_shard_info *out)
{
	if (!a->sh || i >= a->sh->n)
		return td_fail(TD_EINVAL, "no shard %u", i);
	const td_disk_shard *d = &a->sh->tab[i];
	out->nfiles = d->nfiles;
	out->input_bytes = d->input_bytes;
	out->archive_bytes = d->size;
	out->checksum = d->sum;
	return TD_OK;
}

/* Entry e's path in archive x, for messages and checks. */
static int path_of(const td_archive *x, td_entry e, char *buf, size_t cap)
{
	return td_archive_path(x, e, buf, cap) < 0 ? -1 : 0;
}

/* The local entry of directory d in shard s (from d's pieces), or
 * TD_NOENTRY. */
static td_entry dir_local(const td_archive *a, td_entry d, uint32_t s)
{
	uint64_t first = 0, n = 0;
	if (pieces_of(a, d, &first, &n))
		return TD_NOENTRY;
	for (uint64_t k = 0; k < n; k++)
		if (a->sh->pieces[first + k].shard == s)
			return a->sh->pieces[first + k].local;
	return TD_NOENTRY;
}

int td_shard_verify(const td_archive *a)
{
	const td_shards *sh = a->sh;
	uint64_t *files = calloc(sh->n + 1, sizeof *files), *bytes = calloc(sh->n + 1, sizeof *bytes);
	char *p1 = malloc(TD_MAXPATH + 2);
	int err = TD_OK;
	if (!files || !bytes || !p1) {
		err = TD_ENOMEM;
		goto out;
	}
	/* every piece, referenced or not */
	if (!err)
		err = pieces_ready(sh, 0, sh->npieces);
	for (uint32_t i = 0; i < sh->n && !err; i++) {
		const td_disk_shard *d = &sh->tab[i];
		td_archive *s;
		if (XXH3_64bits(a->map + d->off, d->size) != d->sum)
			err = shard_sum_fail(a, i);
		else if (!(err = td_shard_sub(a, i, &s)) && (err = td_archive_verify(s))) {
			snprintf(p1, TD_MAXPATH, "%s", td_errdetail());
			err = td_fail(err, "shard %u: %s", i, p1);
		}
	}
	for (td_entry e = 0; e < a->meta.nentries && !err; e++) {
		td_stat st;
		uint64_t first = 0, n = 0, at = 0, words = 0;
		if ((err = td_archive_stat(a, e, &st)) || (err = pieces_of(a, e, &first, &n)))
			break;
		if (!S_ISDIR(st.mode) && n == 0) {
			err = td_fail(TD_ECORRUPT, "entry %u: a file without pieces", e);
			break;
		}
		if (path_of(a, e, p1, TD_MAXPATH + 2)) {
			err = td_fail(TD_ECORRUPT, "entry %u: bad path", e);
			break;
		}
		for (uint64_t k = 0; k < n && !err; k++) {
			const td_disk_piece *p = &sh->pieces[first + k];
			td_archive *s;
			td_stat ls;
			if ((err = td_shard_sub(a, p->shard, &s)))
				break;
			/* the same type, under the same directory there (a shard
			 * names its entries by number: its shape is checked) */
			if (td_archive_stat(s, p->local, &ls) || (ls.mode & S_IFMT) != (st.mode & S_IFMT) ||
			    (e == TD_ROOT ? p->local != TD_ROOT
					  : p->local == TD_ROOT || dir_local(a, st.parent, p->shard) != ls.parent)) {
				err = td_fail(TD_ECORRUPT, "entry %u ('%s'): piece %llu is not the same entry in shard %u",
					      e, p1, (unsigned long long)k, p->shard);
				break;
			}
			if (S_ISDIR(st.mode)) {
				if (k && p->shard <= sh->pieces[first + k - 1].shard)
					err = td_fail(TD_ECORRUPT, "entry %u: directory pieces out of order", e);
				continue;
			}
			/* in the order of their bytes, each in another shard than
			 * the one before (a per-shard compaction puts a kept
			 * file's rebuilt parts after its kept shards) */
			if (p->start != at || (k && p->shard == sh->pieces[first + k - 1].shard)) {
				err = td_fail(TD_ECORRUPT, "entry %u ('%s'): pieces do not follow each other", e, p1);
				break;
			}
			at += ls.size;
			words += ls.nwords;
			files[p->shard]++;
			bytes[p->shard] += ls.size;
		}
		if (!err && !S_ISDIR(st.mode) && (at != st.size || words != st.nwords))
			err = td_fail(TD_ECORRUPT, "entry %u ('%s'): pieces do not add up to its size or words", e, p1);
	}
	for (uint32_t i = 0; i < sh->n && !err; i++) {
		td_archive *s;
		td_info x;
		if ((err = td_shard_sub(a, i, &s)))
			break;
		td_archive_info(s, &x);
		if (files[i] != sh->tab[i].nfiles || files[i] != x.nfiles + x.nsymlinks ||
		    bytes[i] != sh->tab[i].input_bytes)
			err = td_fail(TD_ECORRUPT, "shard %u: its files are not the pieces the tree names", i);
	}
out:
	free(files);
	free(bytes);
	free(p1);
	return err;
}
