/* xattr_perm: which files a caller may see in a directory-scope answer (see xattr_perm.h). */
#include "xattr_perm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "td_err.h"

#define MAX_GROUPS 256

int td_fs_who(const td_fs *fs, fuse_req_t req)
{
	const struct fuse_ctx *c = fuse_req_ctx(req);
	if (c->uid == 0)
		return TD_FS_WHO_ALL;
	if (c->uid == fs->uid)
		return TD_FS_WHO_OWNER;
	if (c->gid == fs->gid)
		return TD_FS_WHO_GROUP;
	gid_t groups[MAX_GROUPS];
	int n = fuse_req_getgroups(req, MAX_GROUPS, groups);
	for (int i = 0; i < n && i < MAX_GROUPS; i++)
		if (groups[i] == fs->gid)
			return TD_FS_WHO_GROUP;
	return TD_FS_WHO_OTHER;
}

int td_fs_who_may(int who, mode_t mode)
{
	if (who == TD_FS_WHO_ALL)
		return 1;
	unsigned shift = who == TD_FS_WHO_OWNER ? 6 : who == TD_FS_WHO_GROUP ? 3 : 0;
	unsigned bits = (unsigned)(mode >> shift) & 7u;
	if (S_ISREG(mode))
		return (bits & 4u) != 0;
	if (S_ISDIR(mode))
		return (bits & 5u) == 5u;
	return 1;
}

static int push(td_fs_hidden *h, uint32_t n)
{
	if (h->n == h->cap) {
		size_t cap = h->cap ? 2 * h->cap : 16;
		uint32_t *r = realloc(h->roots, cap * sizeof *r);
		if (!r)
			return -ENOMEM;
		h->roots = r;
		h->cap = cap;
	}
	h->roots[h->n++] = n;
	return 0;
}

/* A stack of directories still to walk. */
typedef struct idstack {
	uint32_t *v;
	size_t n, cap;
} idstack;

static int spush(idstack *s, uint32_t x)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		uint32_t *v = realloc(s->v, cap * sizeof *v);
		if (!v)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = x;
	return 0;
}

int td_fs_hidden_find(const td_fs_tview *v, uint32_t scope, int who, td_fs_hidden *h)
{
	memset(h, 0, sizeof *h);
	if (who == TD_FS_WHO_ALL || (v->clean && v->clean(v->ctx, who, scope)))
		return 0;
	mode_t m;
	int err = v->mode(v->ctx, scope, &m);
	if (err)
		return -td_err_errno(err);
	if (!td_fs_who_may(who, m)) {
		h->all = 1;
		return 0;
	}
	if (!S_ISDIR(m))
		return 0;
	idstack s = { 0 };
	int rc = spush(&s, scope);
	while (rc == 0 && s.n) {
		uint32_t dir = s.v[--s.n], child;
		uint64_t cookie = 0;
		while (rc == 0 && (err = v->next(v->ctx, dir, &cookie, &child)) == 0) {
			if (v->clean && v->clean(v->ctx, who, child))
				continue;
			if ((err = v->mode(v->ctx, child, &m))) {
				rc = -td_err_errno(err);
				break;
			}
			if (!td_fs_who_may(who, m))
				rc = push(h, child);
			else if (S_ISDIR(m))
				rc = spush(&s, child);
		}
		if (rc == 0 && err != TD_ENOENT)
			rc = -td_err_errno(err);
	}
	free(s.v);
	if (rc)
		td_fs_hidden_free(h);
	return rc;
}

void td_fs_hidden_free(td_fs_hidden *h)
{
	free(h->roots);
	memset(h, 0, sizeof *h);
}

int td_fs_hidden_filter(const td_fs_tview *v, const td_fs_hidden *h, td_hits *hits)
{
	if (h->all) {
		hits->n = 0;
		return 0;
	}
	if (h->n == 0 || hits->n == 0)
		return 0;
	/* every id under a hidden root, marked */
	uint8_t *hid = calloc(((size_t)v->nids + 7) / 8, 1);
	idstack s = { 0 };
	int rc = hid ? 0 : -ENOMEM;
	for (size_t i = 0; i < h->n && rc == 0; i++)
		rc = spush(&s, h->roots[i]);
	while (rc == 0 && s.n) {
		uint32_t x = s.v[--s.n], child;
		if (x >= v->nids)
			continue;
		hid[x / 8] |= (uint8_t)(1u << (x % 8));
		mode_t m;
		if (v->mode(v->ctx, x, &m) || !S_ISDIR(m))
			continue;
		uint64_t cookie = 0;
		while (rc == 0 && v->next(v->ctx, x, &cookie, &child) == 0)
			rc = spush(&s, child);
	}
	if (rc == 0) {
		size_t k = 0;
		for (size_t i = 0; i < hits->n; i++) {
			uint32_t f = hits->v[i].file;
			if (f < v->nids && (hid[f / 8] >> (f % 8) & 1u))
				continue;
			hits->v[k++] = hits->v[i];
		}
		hits->n = k;
	}
	free(s.v);
	free(hid);
	return rc;
}

/* A directory being walked and where its listing stands. */
typedef struct frame {
	uint32_t dir;
	uint64_t cookie;
} frame;

int td_fs_visible_files(const td_fs_tview *v, uint32_t scope, const td_fs_hidden *h, uint32_t **ids, size_t *n)
{
	*ids = NULL;
	*n = 0;
	if (h->all)
		return 0;
	mode_t m;
	int err = v->mode(v->ctx, scope, &m);
	if (err)
		return -td_err_errno(err);
	idstack out = { 0 };
	if (!S_ISDIR(m)) {
		int rc = S_ISREG(m) ? spush(&out, scope) : 0;
		*ids = out.v;
		*n = out.n;
		return rc;
	}
	uint8_t *hid = calloc(((size_t)v->nids + 7) / 8, 1);
	frame *st = malloc(64 * sizeof *st);
	size_t depth = 0, cap = 64;
	int rc = hid && st ? 0 : -ENOMEM;
	for (size_t i = 0; rc == 0 && i < h->n; i++)
		if (h->roots[i] < v->nids)
			hid[h->roots[i] / 8] |= (uint8_t)(1u << (h->roots[i] % 8));
	if (rc == 0)
		st[depth++] = (frame){ scope, 0 };
	while (rc == 0 && depth) {
		uint32_t child;
		err = v->next(v->ctx, st[depth - 1].dir, &st[depth - 1].cookie, &child);
		if (err == TD_ENOENT) {
			depth--;
			continue;
		}
		if (err || (err = v->mode(v->ctx, child, &m))) {
			rc = -td_err_errno(err);
			break;
		}
		if (child < v->nids && (hid[child / 8] >> (child % 8) & 1u))
			continue;
		if (S_ISREG(m)) {
			rc = spush(&out, child);
		} else if (S_ISDIR(m)) {
			if (depth == cap) {
				frame *ns = realloc(st, 2 * cap * sizeof *ns);
				if (!ns) {
					rc = -ENOMEM;
					break;
				}
				st = ns;
				cap *= 2;
			}
			st[depth++] = (frame){ child, 0 };
		}
	}
	free(st);
	free(hid);
	if (rc) {
		free(out.v);
		return rc;
	}
	*ids = out.v;
	*n = out.n;
	return 0;
}
