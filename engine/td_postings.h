/* td_postings: the stored ranked inverted index (td_format.h: TD_SEC_POSTINGS), built and read. */
#ifndef TD_POSTINGS_H
#define TD_POSTINGS_H

#include <stddef.h>
#include <stdint.h>

#include "td_analytics.h"
#include "td_archive.h"
#include "td_pack.h"

/* ---- building (td_writer.c) ---- */

/* The pairs of a writer's files, gathered before the grammar consumes the
 * token sequence, written once the entries have their final numbers. */
typedef struct td_post_build {
	uint64_t W;
	td_buf words;        /* word w: one length byte, then its bytes */
	uint64_t *woff;      /* W + 1 offsets into words */
	uint64_t nw;         /* words given so far */
	uint32_t *pair;      /* (word, count) pairs, file after file */
	uint64_t npair, cap;
	uint64_t *fstart;    /* per writer entry: its pairs [fstart, fend) */
	uint64_t *fend;
	uint32_t nent;
	uint32_t *cnt;       /* W scratch counters */
	uint8_t *omid;       /* per other token (S): its last byte is no cut byte */
	uint64_t S;
	uint8_t *emid;       /* per writer entry: its text ends inside a word */
} td_post_build;

/* Start for a writer of nent entries and W words. TD_OK or TD_ENOMEM. */
int td_post_begin(td_post_build *pb, uint64_t W, uint32_t nent);

/* Other token k (0..S-1, after td_post_begin): its last byte. TD_OK or TD_ENOMEM. */
int td_post_other(td_post_build *pb, uint64_t S, uint64_t k, uint8_t last);

/* Word w (given in id order, 0..W-1): its bytes. TD_OK or TD_ENOMEM. */
int td_post_word(td_post_build *pb, const uint8_t *bytes, size_t len);

/* Writer entry `ent` (a regular file) has the tokens seq[0..n) (final
 * symbol ids: s < 2W is word s/2). TD_OK or TD_ENOMEM. */
int td_post_file(td_post_build *pb, uint32_t ent, const uint32_t *seq, uint64_t n);

/* The section's bytes into out, entries numbered entry[k] = writer
 * entry of archive entry k (k < ne). TD_OK or TD_ENOMEM. */
int td_post_encode(td_post_build *pb, const uint32_t *entry, uint32_t ne, td_buf *out);

void td_post_free(td_post_build *pb);

/* ---- reading ---- */

/* 1 when the archive (format 4, or a shard) has a postings section. */
int td_post_has(const td_archive *a);

/* Answer td_phrase_files(a, w, len, scope) from the postings when they
 * can (a has them and w is one dictionary-length word): *done = 1 and
 * the answer in *out / *n (ranked when `rank`, else in entry order);
 * *done = 0 (and TD_OK) when they cannot. Errors: TD_EINVAL (no entry
 * scope), TD_ENOMEM, TD_ECORRUPT (a damaged section: one message naming
 * the section). Thread-safe. */
int td_post_files(const td_archive *a, const char *w, size_t len, td_entry scope, int rank, td_file_count **out,
		  size_t *n, int *done);

/* Word w[0..len) in a's postings (a format 4 archive or a shard; none, or
 * a word longer than TD_MAXTOK: *df = 0): *df the number of files holding
 * it (0: none), and with ents the entries of those files, ascending, in
 * *ents (malloc'd, caller frees; NULL when *df is 0). Reads only the
 * word's block (bisected by its bytes, the groups it meets checked), not
 * the grammar. TD_OK, TD_ENOMEM, TD_ECORRUPT. Thread-safe. */
int td_post_lookup(const td_archive *a, const char *w, size_t len, uint64_t *df, td_entry **ents);

/* Word w[0..len)'s id in a's dictionary from the postings (a block a
 * word id, bisected by their bytes): *id, or -1 when the word is not
 * there, a has no postings, or w is longer than TD_MAXTOK. Reads neither
 * the dictionary nor the grammar. TD_OK, TD_ECORRUPT. Thread-safe. */
int td_post_word_id(const td_archive *a, const char *w, size_t len, int64_t *id);

/* Whether a's postings list entry e under word w[0..len): 1 or 0 (also
 * without postings, or for a word longer than TD_MAXTOK), or
 * TD_ECORRUPT / TD_ENOMEM. Reads the word's block up to e. Thread-safe. */
int td_post_holds(const td_archive *a, const char *w, size_t len, td_entry e);

/* Check the whole section against the grammar's counts: bounds, block
 * words equal to the dictionary's, entries ascending and regular files,
 * each word's counts adding up to its count in the archive, each file's
 * to at most its word count. TD_OK (also when absent) or TD_ECORRUPT. */
int td_post_verify(const td_archive *a);

/* Whether entry e's text ends inside a word (its last byte is not an
 * ASCII non-word byte, td_shard.h: td_cut_byte): 1 or 0, or -1 when the
 * archive has no (intact) postings to say. */
int td_post_ends_mid(const td_archive *a, td_entry e);

/* Bytes of the section (0 when absent). */
uint64_t td_post_bytes(const td_archive *a);

#endif
