/* td_extract: read any byte range of an archived file straight from the grammar. */
#ifndef TD_EXTRACT_H
#define TD_EXTRACT_H

#include <stddef.h>
#include <stdint.h>

#include "td_archive.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Copy up to `len` bytes of entry e's text starting at byte `off` into buf.
 * *got receives the bytes copied: min(len, size - off), 0 at or past EOF.
 * Descends root -> rule -> token (decision 4); never expands the archive.
 * Works for files and symlinks (the target); directories give TD_EISDIR.
 * Errors: TD_EINVAL, TD_EISDIR, TD_ECORRUPT (the grammar does not add up).
 * Thread-safe; allocates nothing. */
int td_extract(const td_archive *a, td_entry e, uint64_t off, void *buf, size_t len, size_t *got);

/* The target of symlink e into buf (NUL-terminated; cap > TD_MAXPATH
 * always suffices), its length in *len. The target must have the size the
 * archive states (1..TD_MAXPATH bytes) and hold no NUL byte.
 * Errors: TD_EINVAL (e is not a symlink, or cap too small), TD_ECORRUPT
 * (a target that breaks those rules: the detail names the entry).
 * Thread-safe. */
int td_archive_readlink(const td_archive *a, td_entry e, char *buf, size_t cap, size_t *len);

/* A cursor remembers where the last read of a file ended, so the next read
 * at exactly that offset continues without descending from the root again.
 * Any other offset re-seeks. One cursor per reader (not thread-safe); many
 * cursors may share an archive. */
typedef struct td_cursor td_cursor;

/* New cursor on `a` (no file yet). NULL on out of memory. */
td_cursor *td_cursor_new(const td_archive *a);
void td_cursor_free(td_cursor *c);

/* Like td_extract, continuing from the cursor's position when e and off
 * match where the previous read ended. */
int td_cursor_read(td_cursor *c, td_entry e, uint64_t off, void *buf, size_t len, size_t *got);

/* One request of a batch: inputs file/off/len/buf, outputs got/err. */
typedef struct td_extract_req {
	td_entry file;
	uint64_t off;
	uint32_t len;
	void *buf;                /* at least len bytes, owned by the caller */
	uint32_t got;             /* out: bytes copied */
	int err;                  /* out: td_err for this request */
} td_extract_req;

/* Serve n independent requests with `nthreads` CPU threads (0 = one per
 * online core, 1 = the calling thread only). Per-request errors go to
 * reqs[i].err; the return value is TD_OK unless threads could not start.
 * gpu/ offers the same call (td_gpu_extract_batch) with identical results. */
int td_extract_batch(const td_archive *a, td_extract_req *reqs, size_t n, unsigned nthreads);

#ifdef __cplusplus
}
#endif
#endif
