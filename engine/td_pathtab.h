/* td_pathtab: the path -> entry index of an archive tree being built, and
 * find-or-create of an entry with its implicit parent directories (internal,
 * shared by td_writer and td_build). */
#ifndef TD_PATHTAB_H
#define TD_PATHTAB_H

#include <stddef.h>
#include <stdint.h>

/* Open addressing over XXH3 of the path; a slot holds entry index + 1, 0 is
 * free. The entries themselves live in the caller's array. */
typedef struct td_pathtab {
	uint32_t *slot;
	uint64_t mask;    /* slots - 1, a power of two */
} td_pathtab;

/* How td_pathtab_get reaches the caller's entries (ctx is passed back). */
typedef struct td_pathtab_ops {
	const char *(*path)(void *ctx, uint32_t e);   /* entry e's path, NUL-terminated */
	int (*is_dir)(void *ctx, uint32_t e);
	uint32_t (*count)(void *ctx);                 /* entries so far */
	/* Append an implicit entry of `type` for path (len bytes, not
	 * NUL-terminated: copy it) under `parent`; it gets index count().
	 * Returns TD_OK or TD_ENOMEM (then nothing is appended). */
	int (*add)(void *ctx, const char *path, size_t len, uint32_t parent, int type);
	int dir_type;                                 /* the type given to implicit parents */
} td_pathtab_ops;

/* 1024 empty slots. Returns TD_OK or TD_ENOMEM. */
int td_pathtab_init(td_pathtab *t);
void td_pathtab_free(td_pathtab *t);

/* The slot of `path` (len bytes): holding its entry + 1, or 0 (free) where
 * it is absent, to be filled with the new entry's index + 1. */
uint32_t *td_pathtab_find(const td_pathtab *t, const char *path, size_t len, const td_pathtab_ops *ops, void *ctx);

/* Double the slots and re-insert every entry. Returns TD_OK or TD_ENOMEM
 * (then the table is unchanged). */
int td_pathtab_grow(td_pathtab *t, const td_pathtab_ops *ops, void *ctx);

/* Find `path` (len bytes; "" is entry 0, the root) or create it with
 * ops->add, creating its missing parents first as directories. *out gets the
 * entry, *created 1 where `path` itself was created. Errors: TD_ENOTDIR where
 * a parent is not a directory, TD_ENOMEM. Not thread-safe. */
int td_pathtab_get(td_pathtab *t, const td_pathtab_ops *ops, void *ctx, const char *path, size_t len, int type,
		   uint32_t *out, int *created);

#endif
