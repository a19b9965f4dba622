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
#define PREFIX_LEN (sizeof PREFIX - 1)
#define SEARCH_NAME PREFIX "search."
#define MORE_TAG "#more "

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

/* Decimal digits of v into out (no NUL); returns the length (<= 20). */
size_t fs_u64dec(uint64_t v, char *out)
{
	char tmp[20];
	size_t n = 0;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (size_t i = 0; i < n; i++)
		out[i] = tmp[n - 1 - i];
	return n;
}

int fs_value_u64(uint64_t v, char **val, size_t *len)
{
	char *p = malloc(21);
	if (!p)
		return -ENOMEM;
	*len = fs_u64dec(v, p);
	*val = p;
	return 0;
}

/* Parse a part number: 1..19 decimal digits. 0 or -EINVAL. */
int fs_parse_hit_index(const char *s, uint64_t *out)
{
	size_t n = strlen(s);
	if (n == 0 || (n > 1 && s[0] == '0'))
		return -EINVAL;
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		unsigned d = (unsigned)(s[i] - '0');
		v = v > (UINT64_MAX - d) / 10 ? UINT64_MAX : v * 10 + d; /* past any count */
	}
	*out = v;
	return 0;
}

static int value_search(td_fs *fs, td_entry e, int is_dir, const char *w, size_t wlen, uint64_t first,
			char **val, size_t *len)
{
	int rc = 0;
	xresult *r = search_cached(fs, e, w, wlen, &rc);
	if (!r)
		return rc;
	const td_hits *h = &r->hits;
	if (first > h->n) {
		search_release(fs, r);
		return -ENODATA;
	}
	/* Room kept for the continuation line: tag, name, '@', 20 digits, '\n'. */
	const size_t reserve = (sizeof MORE_TAG - 1) + (sizeof SEARCH_NAME - 1) + wlen + 1 + 20 + 1;
	char *out = malloc(TD_FS_XATTR_MAX);
	char *path = is_dir ? malloc(TD_MAXPATH + 1) : NULL;
	char *line = malloc(2 * (TD_MAXPATH + 1) + 24);
	if (!out || (is_dir && !path) || !line) {
		free(out);
		free(path);
		free(line);
		search_release(fs, r);
		return -ENOMEM;
	}
	size_t pos = 0, safe_pos = 0;
	uint64_t safe_next = first, i = first;
	td_entry path_of = TD_NOENTRY;
	size_t plen = 0;
	for (; i < h->n; i++) {
		size_t ll = 0;
		if (is_dir) {
			if (h->v[i].file != path_of) {
				int n = td_archive_path(fs->a, h->v[i].file, path, TD_MAXPATH + 1);
				if (n < 0) {
					rc = -td_err_errno(n);
					break;
				}
				plen = (size_t)n;
				path_of = h->v[i].file;
			}
			ll = td_path_escape(path, plen, line);
			line[ll++] = ':';
		}
		ll += fs_u64dec(h->v[i].off, line + ll);
		line[ll++] = '\n';
		if (pos + ll > TD_FS_XATTR_MAX)
			break;
		memcpy(out + pos, line, ll);
		pos += ll;
		if (pos + reserve <= TD_FS_XATTR_MAX) {
			safe_pos = pos;
			safe_next = i + 1;
		}
	}
	if (rc == 0 && i < h->n) {
		/* Does not fit: cut at the last line that leaves room for the
		 * continuation line, and name the part that follows. */
		pos = safe_pos;
		memcpy(out + pos, MORE_TAG SEARCH_NAME, sizeof MORE_TAG SEARCH_NAME - 1);
		pos += sizeof MORE_TAG SEARCH_NAME - 1;
		memcpy(out + pos, w, wlen);
		pos += wlen;
		out[pos++] = '@';
		pos += fs_u64dec(safe_next, out + pos);
		out[pos++] = '\n';
	}
	free(path);
	free(line);
	search_release(fs, r);
	if (rc) {
		free(out);
		return rc;
	}
	if (pos == 0) {
		free(out);
		out = NULL;
	}
	*val = out;
	*len = pos;
	return 0;
}

int td_fs_xattr_get(td_fs *fs, td_entry e, const char *name, char **val, size_t *len)
{
	*val = NULL;
	*len = 0;
	if (strncmp(name, PREFIX, PREFIX_LEN) != 0)
		return -ENODATA;
	const char *rest = name + PREFIX_LEN;
	if (strcmp(rest, "stats") == 0) /* the batcher's counters, on the root only */
		return e == TD_ROOT ? td_fs_batch_stats(fs, val, len) : -ENODATA;

	td_stat st;
	int err = td_archive_stat(fs->a, e, &st);
	if (err)
		return -td_err_errno(err);
	int is_dir = S_ISDIR(st.mode);
	if (!is_dir && !S_ISREG(st.mode))
		return -ENODATA;

	if (strcmp(rest, "words") == 0) {
		if (!is_dir)
			return fs_value_u64(st.nwords, val, len);
		const td_fs_tree *t;
		int rc = td_fs_tree_get(fs, &t);
		if (rc)
			return rc;
		return fs_value_u64(t->words[e], val, len);
	}
	if (strncmp(rest, "count.", 6) == 0) {
		const char *w = rest + 6;
		size_t wlen = strlen(w);
		if (wlen == 0 || !td_is_word(w, wlen))
			return -EINVAL;
		uint64_t n = 0;
		err = td_count(fs->a, w, wlen, e, &n);
		if (err)
			return -td_err_errno(err);
		return fs_value_u64(n, val, len);
	}
	if (strncmp(rest, "search.", 7) == 0) {
		const char *w = rest + 7;
		const char *at = strrchr(w, '@');
		size_t wlen = at ? (size_t)(at - w) : strlen(w);
		uint64_t first = 0;
		if (at && fs_parse_hit_index(at + 1, &first))
			return -EINVAL;
		if (wlen == 0 || !td_is_word(w, wlen))
			return -EINVAL;
		return value_search(fs, e, is_dir, w, wlen, first, val, len);
	}
	return -ENODATA;
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
