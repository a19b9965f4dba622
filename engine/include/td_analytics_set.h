/* td_analytics_set: td_analytics.h's analytics over a given set of files: archive entries and texts the caller reads. */
#ifndef TD_ANALYTICS_SET_H
#define TD_ANALYTICS_SET_H

#include <stddef.h>
#include <stdint.h>

#include "td_analytics.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A scope is a file, a directory or the corpus; a set is any list of files:
 * a scope less the files a caller may not read, or the files of an edited
 * tree, where an unchanged file is still its archive entry (computed on the
 * grammar) and a changed one is a text the caller supplies (its current
 * bytes, tokenized). Every answer is the one td_analytics.h would give for
 * a corpus holding exactly these files with these texts: same words, same
 * orders, same ties.
 *
 * Version 5 archives (shards) give the same answers. Thread-safety as
 * td_analytics.h; `read` is called from the calling thread only. Errors:
 * those of td_analytics.h, TD_EINVAL (an entry that is not a regular file),
 * and any error `read` returns.
 */

/* Read up to len bytes of text `id` at off into buf, *got the bytes read
 * (fewer only at the end). TD_OK or a td_err. */
typedef int (*td_set_read_fn)(void *ctx, uint32_t id, uint64_t off, void *buf, size_t len, size_t *got);

/* One file of a set. */
typedef struct td_set_file {
	uint32_t id;          /* the caller's name for it, reported in hits and ranked files */
	td_entry entry;       /* the archive entry whose text it has, or TD_NOENTRY: read it */
	uint64_t size;        /* TD_NOENTRY: its size in bytes */
} td_set_file;

typedef struct td_fileset {
	const td_set_file *f; /* each file once */
	size_t n;
	td_set_read_fn read;  /* for the TD_NOENTRY files */
	void *rctx;
} td_fileset;

/* As td_top_words, td_term_vector, td_ngrams and td_fuzzy (nthreads 0). */
int td_set_top_words(const td_archive *a, const td_fileset *s, uint64_t n, td_word_fn fn, void *ctx);
int td_set_term_vector(const td_archive *a, const td_fileset *s, td_word_fn fn, void *ctx);
int td_set_ngrams(const td_archive *a, const td_fileset *s, unsigned n, uint64_t top, td_ngram_fn fn, void *ctx);
int td_set_fuzzy(const td_archive *a, const td_fileset *s, const char *word, size_t len, unsigned k, td_fuzzy_fn fn,
		 void *ctx);

/* As td_phrase_count. */
int td_set_phrase_count(const td_archive *a, const td_fileset *s, const char *p, size_t len, uint64_t *count);

/* As td_phrase_search, with td_hit.file the file's id; files in set order,
 * offsets ascending. On error *out is as before. */
int td_set_phrase_search(const td_archive *a, const td_fileset *s, const char *p, size_t len, td_hits *out);

/* Path of file `id` (any form that sorts like the CLI's paths) into buf
 * (cap bytes with the NUL): its length, or a negative td_err. */
typedef int (*td_set_path_fn)(const void *ctx, uint32_t id, char *buf, size_t cap);

/* As td_phrase_files, with td_file_count.file the file's id; ties broken
 * by path() bytes ascending (called for the files that hold the phrase). */
int td_set_phrase_files(const td_archive *a, const td_fileset *s, const char *p, size_t len, td_set_path_fn path,
			const void *pctx, td_file_count **out, size_t *n);

#ifdef __cplusplus
}
#endif
#endif
