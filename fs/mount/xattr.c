/* xattr: user.tadoc.* values from engine counts and searches. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "batcher.h"
#include "inode.h"
#include "xattr.h"
#include "xattr_value.h"
#include "td_analytics.h"
#include "td_err.h"
#include "td_format.h"
#include "td_query.h"

#define PREFIX TD_FS_XATTR_PREFIX

/* A few recent search results, so the parts of a long list and the
 * size probe that precedes each getxattr do not search again. Their hits
 * take at most conf.cache_size bytes together (0: nothing is kept). */
#define XCACHE_SLOTS 8

typedef struct xresult {
	unsigned refs;            /* cache slot + readers; guarded by the cache mutex */
	td_entry scope;
	size_t wlen;
	char *word;
	td_hits hits;
} xresult;

/* A few recent whole analytics lists (top, vector, files, ngrams, fuzzy)
 * of scopes that hide nothing from their caller, so that the #more parts
 * of a long list are cut from it instead of computed again. They take at
 * most a quarter of conf.cache_size together; a longer list is computed
 * again for each part, holding one part at a time. */
#define LCACHE_SLOTS 4

/* A few recent counts (words or phrases) of scopes that hide nothing from
 * their caller, so that the value getfattr reads after its size probe is
 * not counted twice (a phrase over a large scope walks the grammar). Kept
 * only when conf.cache_size is not 0. */
#define CCACHE_SLOTS 8

typedef struct xcount {
	td_entry scope;
	char *word;               /* NULL: an empty slot */
	size_t wlen;
	uint64_t n;
} xcount;

typedef struct xlist {
	td_entry scope;
	char *name;               /* the name without "@N" */
	size_t nlen;
	td_fs_xlist l;
} xlist;

struct td_fs_xcache {
	pthread_mutex_t mu;
	uint64_t clock;
	void *slot[XCACHE_SLOTS];     /* xresult */
	uint64_t used[XCACHE_SLOTS];
	uint64_t bytes;           /* hit bytes held by the slots */
	uint64_t budget;          /* most hit bytes the slots may hold */
	void *lslot[LCACHE_SLOTS];    /* xlist */
	uint64_t lused[LCACHE_SLOTS];
	uint64_t lbytes, lbudget; /* list bytes held, and the most they may be */
	xcount cslot[CCACHE_SLOTS];
	uint64_t cused[CCACHE_SLOTS];
};

static uint64_t xlist_bytes(const xlist *x)
{
	return x->l.len + (x->l.n + 1) * sizeof *x->l.start + x->nlen;
}

static void xlist_free(xlist *x)
{
	if (x) {
		td_fs_xlist_free(&x->l);
		free(x->name);
		free(x);
	}
}

static uint64_t xresult_bytes(const xresult *r)
{
	return (uint64_t)r->hits.n * sizeof(td_hit);
}

static void xresult_put(xresult *r)
{
	/* caller holds the cache mutex */
	if (r && --r->refs == 0) {
		td_hits_free(&r->hits);
		free(r->word);
		free(r);
	}
}

/* Drop one kept item; its bytes. */
static uint64_t drop_result(void *p)
{
	uint64_t n = xresult_bytes(p);
	xresult_put(p);
	return n;
}

static uint64_t drop_list(void *p)
{
	uint64_t n = xlist_bytes(p);
	xlist_free(p);
	return n;
}

/* Evict the least recently used of slot[0..n) until one is free and `need`
 * more bytes fit the budget; that slot's index (marked used, its bytes
 * counted). need <= budget. Caller holds the cache mutex. */
static int lru_place(td_fs_xcache *c, void **slot, uint64_t *used, int n, uint64_t *bytes, uint64_t need,
		     uint64_t budget, uint64_t (*drop)(void *))
{
	for (;;) {
		int victim = -1, empty = -1;
		for (int i = 0; i < n; i++) {
			if (!slot[i])
				empty = i;
			else if (victim < 0 || used[i] < used[victim])
				victim = i;
		}
		if (empty >= 0 && *bytes + need <= budget) {
			used[empty] = ++c->clock;
			*bytes += need;
			return empty;
		}
		*bytes -= drop(slot[victim]);
		slot[victim] = NULL;
	}
}

int td_fs_xattr_init(td_fs *fs)
{
	td_fs_xcache *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->mu, NULL);
	c->budget = fs->conf.cache_size;
	c->lbudget = fs->conf.cache_size / 4;
	fs->xcache = c;
	return 0;
}

void td_fs_xattr_fini(td_fs *fs)
{
	td_fs_xcache *c = fs->xcache;
	if (!c)
		return;
	for (int i = 0; i < XCACHE_SLOTS; i++)
		xresult_put(c->slot[i]);
	for (int i = 0; i < LCACHE_SLOTS; i++)
		xlist_free(c->lslot[i]);
	for (int i = 0; i < CCACHE_SLOTS; i++)
		free(c->cslot[i].word);
	pthread_mutex_destroy(&c->mu);
	free(c);
	fs->xcache = NULL;
}

/* Search through the cache; returns a referenced result or NULL with *rc. */
static xresult *search_cached(td_fs *fs, td_entry scope, const char *w, size_t wlen, int *rc)
{
	td_fs_xcache *c = fs->xcache;
	pthread_mutex_lock(&c->mu);
	for (int i = 0; i < XCACHE_SLOTS; i++) {
		xresult *r = c->slot[i];
		if (r && r->scope == scope && r->wlen == wlen && memcmp(r->word, w, wlen) == 0) {
			r->refs++;
			c->used[i] = ++c->clock;
			pthread_mutex_unlock(&c->mu);
			return r;
		}
	}
	pthread_mutex_unlock(&c->mu);

	xresult *r = calloc(1, sizeof *r);
	char *word = malloc(wlen + 1);
	if (!r || !word) {
		free(r);
		free(word);
		*rc = -ENOMEM;
		return NULL;
	}
	memcpy(word, w, wlen);
	word[wlen] = '\0';
	r->word = word;
	r->wlen = wlen;
	r->scope = scope;
	r->refs = 1;
	int err = td_phrase_search(fs->a, w, wlen, scope, &r->hits);
	if (err) {
		td_hits_free(&r->hits);
		free(word);
		free(r);
		*rc = -td_err_errno(err);
		return NULL;
	}
	uint64_t need = xresult_bytes(r);
	if (need > 0 && need <= c->budget) {
		pthread_mutex_lock(&c->mu);
		int i = lru_place(c, c->slot, c->used, XCACHE_SLOTS, &c->bytes, need, c->budget, drop_result);
		c->slot[i] = r;
		r->refs++;
		pthread_mutex_unlock(&c->mu);
	}
	return r;
}

static void search_release(td_fs *fs, xresult *r)
{
	pthread_mutex_lock(&fs->xcache->mu);
	xresult_put(r);
	pthread_mutex_unlock(&fs->xcache->mu);
}

static int archive_path(const void *a, uint32_t file, char *buf, size_t cap)
{
	return td_archive_path(a, file, buf, cap);
}

/* The archive's tree for xattr_perm.h; ctx is the td_fs. */
static int tv_mode(const void *ctx, uint32_t n, mode_t *mode)
{
	td_stat st;
	int err = td_archive_stat(((const td_fs *)ctx)->a, n, &st);
	*mode = st.mode;
	return err;
}

static int tv_next(const void *ctx, uint32_t dir, uint64_t *cookie, uint32_t *child)
{
	td_entry first;
	uint32_t count;
	int err = td_archive_children(((const td_fs *)ctx)->a, dir, &first, &count);
	if (err)
		return err;
	if (*cookie >= count)
		return TD_ENOENT;
	*child = first + (uint32_t)(*cookie)++;
	return TD_OK;
}

static int tv_clean(const void *ctx, int who, uint32_t n)
{
	const td_fs_tree *t;
	return who == TD_FS_WHO_ALL || (td_fs_tree_get((td_fs *)ctx, &t) == 0 && t->denied[who - 1][n] == 0);
}

static td_fs_tview archive_view(const td_fs *fs)
{
	return (td_fs_tview){ .ctx = fs, .nids = fs->nentries, .mode = tv_mode, .next = tv_next, .clean = tv_clean };
}

int td_fs_xattr_open_to(td_fs *fs, td_entry e, int who)
{
	return tv_clean(fs, who, e);
}

static int value_search(td_fs *fs, td_entry e, int is_dir, const td_fs_xname *x, const td_fs_hidden *hid,
			char **val, size_t *len)
{
	int rc = 0;
	xresult *r = search_cached(fs, e, x->word, x->wlen, &rc);
	if (!r)
		return rc;
	const td_hits *h = &r->hits;
	td_hits mine = { 0 };
	if (hid->all || hid->n) {
		/* the cache holds the whole subtree's hits: this caller gets a
		 * copy without those it may not see */
		td_fs_tview v = archive_view(fs);
		mine.v = malloc((h->n ? h->n : 1) * sizeof *mine.v);
		if (!mine.v) {
			search_release(fs, r);
			return -ENOMEM;
		}
		if (h->n)
			memcpy(mine.v, h->v, h->n * sizeof *mine.v);
		mine.n = mine.cap = h->n;
		if ((rc = td_fs_hidden_filter(&v, hid, &mine))) {
			td_hits_free(&mine);
			search_release(fs, r);
			return rc;
		}
		h = &mine;
	}
	rc = td_fs_xattr_search_value(h, x->num, x->word, x->wlen, is_dir ? archive_path : NULL, fs->a, val, len);
	td_hits_free(&mine);
	search_release(fs, r);
	return rc;
}

/* A directory's words or count of x's phrase (x NULL: words) as `who` sees them:
 * the subtree's, less those of its hidden roots. */
static int dir_total(td_fs *fs, td_entry e, const td_fs_xname *x, const td_fs_hidden *hid, uint64_t *out)
{
	const td_fs_tree *t = NULL;
	int rc = x ? 0 : td_fs_tree_get(fs, &t);
	if (rc)
		return rc;
	*out = 0;
	if (hid->all)
		return 0;
	uint64_t total = 0, part = 0;
	for (size_t i = 0; i <= hid->n; i++) {
		td_entry s = i == 0 ? e : hid->roots[i - 1];
		int err = x ? td_phrase_count(fs->a, x->word, x->wlen, s, &part) : TD_OK;
		if (err)
			return -td_err_errno(err);
		if (!x)
			part = t->words[s];
		total = i == 0 ? part : total - part;
	}
	*out = total;
	return 0;
}

/* The count of x's phrase over scope e from the count cache into *n: 1
 * when there, else 0. */
static int count_cached(td_fs *fs, td_entry e, const td_fs_xname *x, uint64_t *n)
{
	td_fs_xcache *c = fs->xcache;
	int found = 0;
	pthread_mutex_lock(&c->mu);
	for (int i = 0; i < CCACHE_SLOTS && !found; i++) {
		const xcount *k = &c->cslot[i];
		if (k->word && k->scope == e && k->wlen == x->wlen && memcmp(k->word, x->word, x->wlen) == 0) {
			*n = k->n;
			c->cused[i] = ++c->clock;
			found = 1;
		}
	}
	pthread_mutex_unlock(&c->mu);
	return found;
}

/* Keep count n of x's phrase over e (the least recently used slot goes). */
static void count_keep(td_fs *fs, td_entry e, const td_fs_xname *x, uint64_t n)
{
	td_fs_xcache *c = fs->xcache;
	char *w = c->budget ? malloc(x->wlen ? x->wlen : 1) : NULL;
	if (!w)
		return;
	memcpy(w, x->word, x->wlen);
	pthread_mutex_lock(&c->mu);
	int v = 0;
	for (int i = 1; i < CCACHE_SLOTS; i++)
		if (c->cused[i] < c->cused[v])
			v = i;
	free(c->cslot[v].word);
	c->cslot[v] = (xcount){ e, w, x->wlen, n };
	c->cused[v] = ++c->clock;
	pthread_mutex_unlock(&c->mu);
}

/* The part `name` of a list over the open scope e when the list cache
 * holds the list: 0 or -errno; 1 when the cache keeps no lists, 2 when
 * this one is not there. */
static int list_hit(td_fs *fs, td_entry e, const td_fs_xname *x, const char *name, char **val, size_t *len)
{
	td_fs_xcache *c = fs->xcache;
	if (!c->lbudget)
		return 1;
	pthread_mutex_lock(&c->mu);
	for (int i = 0; i < LCACHE_SLOTS; i++) {
		xlist *l = c->lslot[i];
		if (l && l->scope == e && l->nlen == x->blen && memcmp(l->name, name, x->blen) == 0) {
			c->lused[i] = ++c->clock;
			int rc = td_fs_xlist_part(&l->l, name, x->blen, x->num, val, len);
			pthread_mutex_unlock(&c->mu);
			return rc;
		}
	}
	pthread_mutex_unlock(&c->mu);
	return 2;
}

/* The part `name` of a list over the open scope e from the list cache,
 * computing the whole list into it when absent (from src->given when
 * set). 1 when the list does not fit the cache (nothing done), else 0 or
 * -errno. */
static int list_cached(td_fs *fs, const td_fs_xsrc *src, td_entry e, const td_fs_xname *x, const char *name,
		       char **val, size_t *len)
{
	td_fs_xcache *c = fs->xcache;
	int hit = list_hit(fs, e, x, name, val, len);
	if (hit != 2)
		return hit;
	xlist *l = calloc(1, sizeof *l);
	if (!l || !(l->name = malloc(x->blen ? x->blen : 1))) {
		free(l);
		return -ENOMEM;
	}
	memcpy(l->name, name, x->blen);
	l->nlen = x->blen;
	l->scope = e;
	int rc = td_fs_xattr_list_all(src, x, c->lbudget, &l->l);
	if (rc == 0)
		rc = td_fs_xlist_part(&l->l, name, x->blen, x->num, val, len);
	uint64_t need = xlist_bytes(l);
	if (rc == 0 && need <= c->lbudget) {
		pthread_mutex_lock(&c->mu);
		c->lslot[lru_place(c, c->lslot, c->lused, LCACHE_SLOTS, &c->lbytes, need, c->lbudget, drop_list)] = l;
		l = NULL;
		pthread_mutex_unlock(&c->mu);
	}
	xlist_free(l);
	return rc;
}

/* top, vector, files, ngrams, fuzzy: over the entry, or, when the subtree
 * hides files from the caller, over the files it sees. */
static int value_analytics(td_fs *fs, td_entry e, int is_dir, const td_fs_xname *x, const char *name,
			   const td_fs_hidden *hid, char **val, size_t *len)
{
	td_fs_xsrc src = { .a = fs->a, .scope = e, .path = archive_path, .pctx = fs->a, .archive_paths = 1 };
	if (!hid->all && !hid->n) {
		int rc = x->kind >= TD_FS_XTOP ? list_cached(fs, &src, e, x, name, val, len) : 1;
		return rc != 1 ? rc : td_fs_xattr_value(&src, x, name, is_dir, val, len);
	}
	td_fs_tview v = archive_view(fs);
	uint32_t *ids = NULL;
	size_t n = 0;
	int rc = td_fs_visible_files(&v, e, hid, &ids, &n);
	td_set_file *f = rc ? NULL : malloc((n ? n : 1) * sizeof *f);
	if (!rc && !f)
		rc = -ENOMEM;
	for (size_t i = 0; !rc && i < n; i++)
		f[i] = (td_set_file){ .id = ids[i], .entry = ids[i] };
	td_fileset set = { .f = f, .n = n };
	src.set = &set;
	if (!rc)
		rc = td_fs_xattr_value(&src, x, name, is_dir, val, len);
	free(f);
	free(ids);
	return rc;
}

int td_fs_xattr_given(td_fs *fs, td_entry e, const char *name, const void *given, char **val, size_t *len)
{
	*val = NULL;
	*len = 0;
	td_fs_xname x;
	td_fs_xattr_parse(name, &x);
	td_stat st;
	int err = td_archive_stat(fs->a, e, &st);
	if (err)
		return -td_err_errno(err);
	if (x.err || x.kind < TD_FS_XTOP || (!S_ISDIR(st.mode) && !S_ISREG(st.mode)))
		return x.err ? x.err : -ENODATA;
	td_fs_xsrc src = { .a = fs->a, .scope = e, .path = archive_path, .pctx = fs->a, .archive_paths = 1, .given = given };
	int rc = fs->xcache ? list_cached(fs, &src, e, &x, name, val, len) : 1; /* kept for its next parts and queries */
	return rc != 1 ? rc : td_fs_xattr_value(&src, &x, name, S_ISDIR(st.mode), val, len);
}

int td_fs_xattr_list_kept(td_fs *fs, td_entry e, const char *name, char **val, size_t *len)
{
	*val = NULL;
	*len = 0;
	td_fs_xname x;
	td_fs_xattr_parse(name, &x);
	if (x.err || x.kind < TD_FS_XTOP || !fs->xcache)
		return 1;
	int rc = list_hit(fs, e, &x, name, val, len);
	return rc == 2 ? 1 : rc;
}

int td_fs_xattr_get(td_fs *fs, td_entry e, const char *name, int who, char **val, size_t *len)
{
	*val = NULL;
	*len = 0;
	td_fs_xname x;
	td_fs_xattr_parse(name, &x);
	if (x.kind == TD_FS_XNONE)
		return -ENODATA;
	if (x.kind == TD_FS_XSTATS) /* the batcher's counters, on the root only */
		return e == TD_ROOT ? td_fs_batch_stats(fs, val, len) : -ENODATA;

	td_stat st;
	int err = td_archive_stat(fs->a, e, &st);
	if (err)
		return -td_err_errno(err);
	int is_dir = S_ISDIR(st.mode);
	if (!is_dir && !S_ISREG(st.mode))
		return -ENODATA;
	if (x.err)
		return x.kind == TD_FS_XINSERT || x.kind == TD_FS_XDELETE ? -ENODATA : x.err;
	if (x.kind < TD_FS_XWORDS || x.kind == TD_FS_XINSERT || x.kind == TD_FS_XDELETE)
		return -ENODATA;
	if (!is_dir && !td_fs_who_may(who, st.mode))
		return -EACCES; /* as the kernel says with default_permissions */
	td_fs_hidden hid = { 0 };
	td_fs_tview v = archive_view(fs);
	int rc = is_dir ? td_fs_hidden_find(&v, e, who, &hid) : 0;
	if (rc)
		return rc;
	uint64_t n = 0;
	if (x.kind == TD_FS_XWORDS) {
		if (!is_dir)
			rc = fs_value_u64(st.nwords, val, len);
		else if (!(rc = dir_total(fs, e, NULL, &hid, &n)))
			rc = fs_value_u64(n, val, len);
	} else if (!hid.all && !hid.n) {
		rc = td_fs_xattr_whole(fs, e, is_dir, &x, name, val, len);
	} else if (x.kind == TD_FS_XCOUNT) {
		if (!(rc = dir_total(fs, e, &x, &hid, &n)))
			rc = fs_value_u64(n, val, len);
	} else if (x.kind == TD_FS_XSEARCH) {
		rc = value_search(fs, e, is_dir, &x, &hid, val, len);
	} else {
		rc = value_analytics(fs, e, is_dir, &x, name, &hid, val, len);
	}
	td_fs_hidden_free(&hid);
	return rc;
}

int td_fs_xattr_whole(td_fs *fs, td_entry e, int is_dir, const td_fs_xname *x, const char *name, char **val,
		      size_t *len)
{
	static const td_fs_hidden none = { 0 };
	*val = NULL;
	*len = 0;
	uint64_t n = 0;
	int rc;
	switch (x->kind) {
	case TD_FS_XCOUNT:
		if (count_cached(fs, e, x, &n))
			return fs_value_u64(n, val, len);
		if ((rc = dir_total(fs, e, x, &none, &n)))
			return rc;
		count_keep(fs, e, x, n);
		return fs_value_u64(n, val, len);
	case TD_FS_XSEARCH:
		return value_search(fs, e, is_dir, x, &none, val, len);
	case TD_FS_XTOP:
	case TD_FS_XVECTOR:
	case TD_FS_XFILES:
	case TD_FS_XNGRAMS:
	case TD_FS_XFUZZY:
		return value_analytics(fs, e, is_dir, x, name, &none, val, len);
	default:
		return -ENODATA;
	}
}

ssize_t td_fs_xattr_list(td_fs *fs, td_entry e, char *buf, size_t cap)
{
	static const char names[] = PREFIX "words";
	td_stat st;
	int err = td_archive_stat(fs->a, e, &st);
	if (err)
		return -td_err_errno(err);
	if (!S_ISDIR(st.mode) && !S_ISREG(st.mode))
		return 0;
	if (cap == 0)
		return (ssize_t)sizeof names;
	if (cap < sizeof names)
		return -ERANGE;
	memcpy(buf, names, sizeof names);
	return (ssize_t)sizeof names;
}
