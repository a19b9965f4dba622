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

struct td_fs_xcache {
	pthread_mutex_t mu;
	uint64_t clock;
	xresult *slot[XCACHE_SLOTS];
	uint64_t used[XCACHE_SLOTS];
	uint64_t bytes;           /* hit bytes held by the slots */
	uint64_t budget;          /* most hit bytes the slots may hold */
};

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

int td_fs_xattr_init(td_fs *fs)
{
	td_fs_xcache *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->mu, NULL);
	c->budget = fs->conf.cache_size;
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
	int err = td_search(fs->a, w, wlen, scope, &r->hits);
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
		/* Evict least recently used slots until one is free and the new
		 * result fits the budget. */
		for (;;) {
			int victim = -1, empty = -1;
			for (int i = 0; i < XCACHE_SLOTS; i++) {
				if (!c->slot[i])
					empty = i;
				else if (victim < 0 || c->used[i] < c->used[victim])
					victim = i;
			}
			if (empty >= 0 && c->bytes + need <= c->budget) {
				c->slot[empty] = r;
				c->used[empty] = ++c->clock;
				c->bytes += need;
				r->refs++;
				break;
			}
			c->bytes -= xresult_bytes(c->slot[victim]);
			xresult_put(c->slot[victim]);
			c->slot[victim] = NULL;
		}
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

static int value_search(td_fs *fs, td_entry e, int is_dir, const td_fs_xname *x, char **val, size_t *len)
{
	int rc = 0;
	xresult *r = search_cached(fs, e, x->word, x->wlen, &rc);
	if (!r)
		return rc;
	rc = td_fs_xattr_search_value(&r->hits, x->num, x->word, x->wlen, is_dir ? archive_path : NULL, fs->a, val,
				      len);
	search_release(fs, r);
	return rc;
}

int td_fs_xattr_get(td_fs *fs, td_entry e, const char *name, char **val, size_t *len)
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

	switch (x.kind) {
	case TD_FS_XWORDS: {
		if (!is_dir)
			return fs_value_u64(st.nwords, val, len);
		const td_fs_tree *t;
		int rc = td_fs_tree_get(fs, &t);
		if (rc)
			return rc;
		return fs_value_u64(t->words[e], val, len);
	}
	case TD_FS_XCOUNT: {
		uint64_t n = 0;
		err = td_count(fs->a, x.word, x.wlen, e, &n);
		if (err)
			return -td_err_errno(err);
		return fs_value_u64(n, val, len);
	}
	case TD_FS_XSEARCH:
		return value_search(fs, e, is_dir, &x, val, len);
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
