/* td_pathtab: path -> entry index and entry creation with implicit parents. */
#include "td_pathtab.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "td_err.h"

int td_pathtab_init(td_pathtab *t)
{
	t->slot = calloc(1024, sizeof *t->slot);
	t->mask = 1023;
	return t->slot ? TD_OK : TD_ENOMEM;
}

void td_pathtab_free(td_pathtab *t)
{
	free(t->slot);
	t->slot = NULL;
}

uint32_t *td_pathtab_find(const td_pathtab *t, const char *path, size_t len, const td_pathtab_ops *ops, void *ctx)
{
	uint64_t h = XXH3_64bits(path, len) & t->mask;
	for (;;) {
		uint32_t *s = &t->slot[h];
		if (!*s)
			return s;
		const char *p = ops->path(ctx, *s - 1);
		if (strlen(p) == len && !memcmp(p, path, len))
			return s;
		h = (h + 1) & t->mask;
	}
}

int td_pathtab_grow(td_pathtab *t, const td_pathtab_ops *ops, void *ctx)
{
	uint64_t oldcap = t->mask + 1;
	uint32_t *old = t->slot;
	if (!(t->slot = calloc(2 * oldcap, sizeof *old))) {
		t->slot = old;
		return TD_ENOMEM;
	}
	t->mask = 2 * oldcap - 1;
	for (uint64_t i = 0; i < oldcap; i++)
		if (old[i]) {
			const char *p = ops->path(ctx, old[i] - 1);
			*td_pathtab_find(t, p, strlen(p), ops, ctx) = old[i];
		}
	free(old);
	return TD_OK;
}

int td_pathtab_get(td_pathtab *t, const td_pathtab_ops *ops, void *ctx, const char *path, size_t len, int type,
		   uint32_t *out, int *created)
{
	*created = 0;
	if (len == 0) {
		*out = 0;
		return TD_OK;
	}
	uint32_t *s = td_pathtab_find(t, path, len, ops, ctx);
	if (*s) {
		*out = *s - 1;
		return TD_OK;
	}
	uint32_t parent;
	int pc;
	const char *slash = memrchr(path, '/', len);
	int err = td_pathtab_get(t, ops, ctx, path, slash ? (size_t)(slash - path) : 0, ops->dir_type, &parent, &pc);
	if (err)
		return err;
	if (!ops->is_dir(ctx, parent))
		return td_fail(TD_ENOTDIR, "parent of '%.*s' is not a directory", (int)len, path);
	uint32_t n = ops->count(ctx);
	if ((uint64_t)n * 2 >= t->mask && td_pathtab_grow(t, ops, ctx))
		return TD_ENOMEM;
	if ((err = ops->add(ctx, path, len, parent, type)))
		return err;
	*td_pathtab_find(t, path, len, ops, ctx) = n + 1;
	*out = n;
	*created = 1;
	return TD_OK;
}
