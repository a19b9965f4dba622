/* td_shard: the reader side of version 5 archives (a container of format 4 shards); engine-internal. */
#ifndef TD_SHARD_H
#define TD_SHARD_H

#include "td_archive_int.h"
#include "td_extract.h"
#include "td_query.h"

/* Called by setup() for a version 5 container once its tree is viewed:
 * checks the shard table and the piece map (their checksums and bounds:
 * O(files)) and sets a->sh. Shards are opened on first touch. TD_OK,
 * TD_ECORRUPT (detail names the section), TD_ENOMEM. */
int td_shard_setup(td_archive *a);

/* Close every opened shard and free a->sh (NULL accepted). */
void td_shard_free(td_archive *a);

/* Shard i of the container, opened (small checks only) on first call;
 * thread-safe. TD_OK, or the open's error with detail naming the shard. */
int td_shard_sub(const td_archive *a, uint32_t i, td_archive **out);

/* Read entry e's bytes [off, off + len) across its pieces. With subc, the
 * read goes through a cursor on the piece's shard, kept in *subc
 * (*subshard says which shard; replaced when another one is read). */
int td_shard_read(const td_archive *a, td_entry e, uint64_t off, void *buf, size_t len, size_t *got,
		  td_cursor **subc, uint32_t *subshard);

/* The container's shard table (*n entries) and entry e's pieces (td_build
 * reuses them when it adds to an archive). TD_OK or TD_ECORRUPT. */
const td_disk_shard *td_shard_table(const td_archive *a, uint32_t *n);
int td_shard_pieces(const td_archive *a, td_entry e, const td_disk_piece **p, uint64_t *n);

/* TD_EUNSUPP with a message: the analytics (td_analytics.h: top words,
 * vectors, phrases, n-grams, fuzzy words) do not read shards yet. */
int td_shard_unsupported(const td_archive *a);

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
