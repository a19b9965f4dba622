/* td_shard: the reader side of version 5 archives (a container of format 4 shards); engine-internal. */
#ifndef TD_SHARD_H
#define TD_SHARD_H

#include "td_archive_int.h"
#include "td_extract.h"
#include "td_query.h"

/* The bytes td_build cuts a file after: ASCII, not a word character. From
 * right after one the text tokenizes the same whatever came before. */
static inline int td_cut_byte(uint8_t c)
{
	return c < 0x80 && !(c >= '0' && c <= '9') && !(c >= 'A' && c <= 'Z') && !(c >= 'a' && c <= 'z') && c != '_';
}

/* Called by setup() for a version 5 container once its tree is viewed:
 * checks the shard table and the piece map's checksums and shape, and sets
 * a->sh. Each piece is decoded and checked (names a shard) on first use,
 * or here for every piece when flags has TD_OPEN_VERIFY. Shards are
 * opened on first touch. TD_OK, TD_ECORRUPT (detail names the section),
 * TD_ENOMEM. */
int td_shard_setup(td_archive *a, unsigned flags);

/* Close every opened shard and free a->sh (NULL accepted). */
void td_shard_free(td_archive *a);

/* Shard i of the container, opened (small checks only) on first call;
 * thread-safe. TD_OK, or the open's error with detail naming the shard. */
int td_shard_sub(const td_archive *a, uint32_t i, td_archive **out);

/* A version 5 cursor's state (inside td_cursor): a cursor on the shard
 * read last, and the piece read last, so a read that continues in that
 * piece goes straight to the shard's cursor. Zeroed = empty. */
typedef struct td_shard_cur {
	td_cursor *sub;           /* on shard `shard`; made on first use, then rebound */
	uint32_t shard;
	int have;                 /* the piece below is set */
	td_entry e, local;        /* global entry e's bytes [lo, hi) are local's from 0 */
	uint64_t lo, hi, piece;   /* piece: its index among e's pieces (for messages) */
} td_shard_cur;

/* Read entry e's bytes [off, off + len) across its pieces. With sc, the
 * read goes through a cursor on the piece's shard, kept in sc (one cursor,
 * rebound without allocation when another shard is read); sc belongs to
 * one thread at a time. */
int td_shard_read(const td_archive *a, td_entry e, uint64_t off, void *buf, size_t len, size_t *got,
		  td_shard_cur *sc);

/* Bind cursor c (of a version 4 archive or shard) to archive a instead,
 * forgetting its position (td_extract.c). */
void td_cursor_bind(td_cursor *c, const td_archive *a);

/* The container's shard table (*n entries) and entry e's pieces (td_build
 * reuses them when it adds to an archive). TD_OK or TD_ECORRUPT. */
const td_disk_shard *td_shard_table(const td_archive *a, uint32_t *n);
int td_shard_pieces(const td_archive *a, td_entry e, const td_disk_piece **p, uint64_t *n);

/* The global entry of shard `shard`'s file entry `local`, and the byte of
 * that global file where the piece starts. TD_OK, TD_ECORRUPT (no file
 * has that piece), TD_ENOMEM (the map is built on first use). */
int td_shard_global(const td_archive *a, uint32_t shard, td_entry local, td_entry *e, uint64_t *start);

/* The global entries of shards' file entries, v[i].e for each distinct
 * (v[i].shard, v[i].local), as td_shard_global gives them. The first call
 * on an archive reads the piece columns once in order and keeps nothing
 * (a one-shot query needs no more); later calls build and use the map.
 * TD_OK, TD_ECORRUPT (an entry in no file's pieces), TD_ENOMEM. */
typedef struct td_shard_loc {
	uint32_t shard;
	td_entry local;
	td_entry e;
} td_shard_loc;
int td_shard_globals(const td_archive *a, td_shard_loc *v, size_t n);

/* Put hits out->v[before..] (global entries) in path order, offsets
 * ascending within a file. TD_OK or TD_ENOMEM. */
int td_shard_sort_hits(const td_archive *a, td_hits *out, size_t before);

/* Hits over `scope` gathered from its pieces: fn(ctx, shard, local scope,
 * hits) appends a shard's hits (local entries, piece offsets), which are
 * mapped to global entries and file offsets and put in path order.
 * Nothing for a symbolic link. On error out is as before. */
typedef int (*td_piece_search_fn)(void *ctx, const td_archive *s, td_entry local, td_hits *h);
int td_shard_hits(const td_archive *a, td_entry scope, td_piece_search_fn fn, void *ctx, td_hits *out);

/* The regular files of `scope` (itself, or under it) that are split over
 * several shards (midword: only those cut inside a word somewhere): *out
 * (malloc'd, caller frees; NULL when none) holds *n. The archive's lists
 * are found on first use (O(entries), a byte read at each cut), then a
 * call costs a walk up the tree per split file. TD_OK, TD_EINVAL,
 * TD_ENOMEM, or a read's error. */
int td_shard_split_files(const td_archive *a, td_entry scope, int midword, td_entry **out, size_t *n);

/* The version 5 forms of the public calls of the same names. */
int td_shard_count(const td_archive *a, const char *word, size_t len, td_entry scope, uint64_t *count);
int td_shard_search(const td_archive *a, const char *word, size_t len, td_entry scope, td_hits *out);
int td_shard_query_fast(const td_archive *a, td_entry scope);
int td_shard_warm(const td_archive *a, const volatile int *stop, uint64_t *bytes);
int td_shard_will_read(const td_archive *a, uint64_t bytes);
int td_shard_check_data(const td_archive *a);
/* Hash every shard's whole image against its sum in the shard table
 * (O(archive size), no shard opened, no lock held): a shard whose image
 * matched needs no section check when it is read. Stops soon after *stop
 * (may be NULL) becomes nonzero, returning TD_STOPPED. Thread-safe with
 * reads. TD_OK, TD_STOPPED or TD_ECORRUPT ("shard N: checksum mismatch",
 * the first one). */
#define TD_STOPPED 1
int td_shard_check_sums(const td_archive *a, const volatile int *stop);
int td_shard_verify(const td_archive *a);
void td_shard_set_cache(td_archive *a, uint64_t bytes);
void td_shard_fill_info(const td_archive *a, td_info *o);

#endif
