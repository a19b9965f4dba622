/* td_analytics_int: what td_analytics.c shares with td_fuzzy.c (engine-internal). */
#ifndef TD_ANALYTICS_INT_H
#define TD_ANALYTICS_INT_H

#include "td_analytics.h"
#include "td_analytics_set.h"
#include "td_archive_int.h"
#include "td_query_int.h"

#include <string.h>

/* A word's first 8 bytes as one big-endian number, zeros past its end:
 * keys in order are words in byte order (memcmp, then the shorter first);
 * equal keys need the bytes. */
static inline uint64_t td_word_key(const char *w, size_t len)
{
	uint64_t k = 0;
	for (size_t j = 0; j < 8; j++)
		k = k << 8 | (j < len ? (uint8_t)w[j] : 0);
	return k;
}

/* Words without a word id met in a scope: longer than TD_MAXTOK bytes
 * (stored as pieces), or in a text a set supplies (td_analytics_set.h):
 * their bytes and counts, found through a hash table. */
typedef struct td_longw {
	char **w;
	size_t *len;
	uint64_t *count;
	size_t n, cap;
	uint64_t *slot;    /* hash table: index + 1 per slot, 0 empty; hmask + 1 slots */
	size_t hmask;
} td_longw;

/* Word counts of a scope: cnt[w] for every word id (0 when absent), the
 * long words, and whether every id may be non-zero (dense) or only those
 * in `touched` (each once). */
typedef struct td_counts {
	uint64_t *cnt;
	uint32_t *touched;
	uint64_t ntouched, cap;
	int dense;
	td_longw lw;
} td_counts;

/* Count every word of `scope` on the grammar. TD_OK or an error of
 * td_analytics.h; free with td_counts_free either way. */
int td_scope_counts(const td_archive *a, td_entry scope, td_counts *c);
void td_counts_free(td_counts *c);

/* The same over the regular files list[0..nlist) instead (list NULL: the
 * scope). Not for sharded archives. */
int td_list_counts(const td_archive *a, td_entry scope, const td_entry *list, size_t nlist, td_counts *c);

/* Add n to word id w's count. TD_OK or TD_ENOMEM. */
int td_counts_add(td_counts *c, uint64_t w, uint64_t n);

/* Index of word w (any length) among c's long words, added with count 0
 * when new; <0 (TD_ENOMEM) on failure. For words without a word id. */
int64_t td_counts_extra(td_counts *c, const uint8_t *w, size_t len);

/* td_top_words / td_term_vector / td_fuzzy over given counts; they take
 * *c over (freed and zeroed when they return). */
int td_counts_top(const td_archive *a, td_counts *c, uint64_t n, td_word_fn fn, void *ctx);
int td_counts_vector(const td_archive *a, td_counts *c, td_word_fn fn, void *ctx);
/* td_fuzzy (one thread) of request `req` of a batch, its dictionary
 * matches from find when not NULL (td_fuzzy_batch_given). */
int td_fuzzy_given(const td_archive *a, const char *word, size_t len, unsigned k, td_entry scope,
		   td_fuzzy_find_fn find, void *fctx, size_t req, td_fuzzy_fn fn, void *ctx);
int td_counts_fuzzy(const td_archive *a, td_counts *c, const char *word, size_t len, unsigned k, unsigned nthreads,
		    td_fuzzy_fn fn, void *ctx);

/* Texts the caller supplies (an edited file's current bytes): words(ctx,
 * i, fn, fctx) calls fn with every word of text i, in order. */
typedef struct td_texts {
	size_t n;
	int (*words)(void *ctx, size_t i, td_text_fn fn, void *fctx);
	void *ctx;
} td_texts;

/* td_ngrams over the files list[0..nlist) (NULL: the scope) and texts. */
int td_ngrams_list(const td_archive *a, td_entry scope, const td_entry *list, size_t nlist, const td_texts *texts,
		   unsigned n, uint64_t top, td_ngram_fn fn, void *ctx);

/* Occurrences of phrase p in each of the files list[0..nlist) and then
 * each text, into counts[0 .. nlist + texts->n); with out, every hit is
 * appended with td_hit.file = that index, in index order, offsets
 * ascending. */
int td_phrase_list(const td_archive *a, const char *p, size_t len, const td_entry *list, size_t nlist,
		   const td_texts *texts, uint64_t *counts, td_hits *out);

/* Occurrences of phrase p (matched by bytes) in each text into
 * counts[0 .. texts->n); with out, every hit is appended with td_hit.file
 * = first + the text's index, in that order, offsets ascending. Errors:
 * TD_ENOTWORD (not a phrase), TD_ENOMEM, the texts' read errors. */
int td_phrase_texts(const char *p, size_t len, const td_texts *texts, size_t first, uint64_t *counts, td_hits *out);

/* A hash table of runs of m word items -> count (0: an empty slot).
 * Slot i (0..mask) holds the count in two u32s, then the m items. */
typedef struct td_gtab {
	unsigned m, stride;
	uint32_t *slot;
	uint64_t mask, used;
} td_gtab;

static inline uint64_t td_gtab_val(const td_gtab *t, uint64_t i)
{
	uint64_t v;
	memcpy(&v, t->slot + i * t->stride, sizeof v);
	return v;
}

static inline const uint32_t *td_gtab_key(const td_gtab *t, uint64_t i)
{
	return t->slot + i * t->stride + 2;
}

/* Every run of m (2..TD_PHRASE_MAX) words of `scope` of a format 1-4
 * archive (or of the regular files list[0..nlist) when list is not NULL)
 * into t (items: word ids of a, or a->W + j for long word j of lw, which
 * the caller frees); with ok (a->W flags, NULL: every run), only the runs
 * whose word ids w < a->W all have ok[w] set (long words always pass).
 * Errors as td_ngrams. Free t with td_gtab_free. */
int td_list_gtab(const td_archive *a, td_entry scope, const td_entry *list, size_t nlist, unsigned m,
		 const uint8_t *ok, td_gtab *t, td_longw *lw);

/* Free t's slots (t->slot NULL: nothing). */
void td_gtab_free(td_gtab *t);

/* Add n to run g of t (t zeroed with m set, or filled before; n > 0).
 * TD_OK or TD_ENOMEM. */
int td_gtab_add(td_gtab *t, const uint32_t *g, uint64_t n);

/* Slot of run g, or -1. */
int64_t td_gtab_find(const td_gtab *t, const uint32_t *g);

/* Set slot i's count (0 empties it: only once no more finds follow). */
void td_gtab_set(td_gtab *t, uint64_t i, uint64_t v);

/* Sort v[0..k) by count descending, then path ascending (a ranked
 * inverted index). TD_OK, TD_ENOMEM, TD_ECORRUPT. */
int td_rank_files(const td_archive *a, td_file_count *v, size_t k);

/* The ranked files of a word from its td_search hits (files in path
 * order): each file's number of hits, ranked as td_phrase_files ranks.
 * *out malloc'd (NULL when *n is 0). TD_OK, TD_ENOMEM, TD_ECORRUPT. */
int td_hits_files(const td_archive *a, const td_hits *h, td_file_count **out, size_t *n);

/* Index of w[0..len) in l (added with count 0 when new), or a negative
 * td_err; td_longw_free frees the list. */
int64_t td_longw_intern(td_longw *l, const char *w, size_t len);
/* Index of w[0..len) in l, or -1 when absent. */
int64_t td_longw_find(const td_longw *l, const char *w, size_t len);
void td_longw_free(td_longw *l);

/* The version 5 forms of td_analytics.h's calls (td_shard_an.c):
 * per-shard answers merged by word bytes, with the runs across the cuts
 * of files split over shards added. */
int td_shard_top_words(const td_archive *a, td_entry scope, uint64_t n, td_word_fn fn, void *ctx);
int td_shard_term_vector(const td_archive *a, td_entry scope, td_word_fn fn, void *ctx);
/* Either of them (top: td_shard_top_words with n, else td_shard_term_vector)
 * with the word counts of the scope's pieces (scope over several pieces)
 * asked of find for request `req` first (find NULL: none). */
int td_shard_words_given(const td_archive *a, td_entry scope, int top, uint64_t n, td_words_find_fn find,
			 void *fctx, size_t req, td_word_fn fn, void *ctx);
int td_shard_ngrams(const td_archive *a, td_entry scope, unsigned n, uint64_t top, td_ngram_fn fn, void *ctx);
int td_shard_phrase_count(const td_archive *a, const char *p, size_t len, td_entry scope, uint64_t *count);
int td_shard_phrase_search(const td_archive *a, const char *p, size_t len, td_entry scope, td_hits *out);
int td_shard_phrase_files(const td_archive *a, const char *p, size_t len, td_entry scope, td_file_count **out,
			  size_t *n);

/* The first (from_end 0) or last (1) min(k, words) words of regular file
 * e of a (format 1-4, or a shard), in text order, as word ids of a
 * (UINT32_MAX for a piece of a word longer than TD_MAXTOK), into ids[];
 * their number in *n. Reads the root symbols at that edge of the file and
 * the rules under them, not the dictionary (the grammar's checksums are
 * checked). TD_OK, TD_EINVAL, TD_ECORRUPT. */
int td_edge_words(const td_archive *a, td_entry e, int from_end, unsigned k, uint32_t *ids, unsigned *n);

/* A word of the scope met where a shard's own answer is wrong (td_shard_an.c):
 * sign +1 for a word of the file that no shard holds whole, -1 for the
 * fragments the shards count instead. */
typedef int (*td_cutword_fn)(void *ctx, const char *w, size_t len, int sign);
/* Every such word of the files of `scope` split over shards mid-word. */
int td_shard_cut_words(const td_archive *a, td_entry scope, td_cutword_fn fn, void *ctx);

/* The version 5 forms of td_analytics_set.c's calls over the regular
 * files list[0..nlist) (global entries) and the texts (may be NULL), as
 * td_shard_top_words etc. do over a scope: each shard's answer over its
 * pieces of those files merged by word bytes, the runs across the cuts of
 * the files split over shards added, the texts' words read. Answers and
 * errors as td_analytics_set.h's; td_shard_set_phrase fills counts and
 * hits as td_phrase_list does (texts after the files). */
int td_shard_set_top(const td_archive *a, const td_entry *list, size_t nlist, const td_texts *texts, uint64_t n,
		     td_word_fn fn, void *ctx);
int td_shard_set_vector(const td_archive *a, const td_entry *list, size_t nlist, const td_texts *texts,
			td_word_fn fn, void *ctx);
int td_shard_set_ngrams(const td_archive *a, const td_entry *list, size_t nlist, const td_texts *texts, unsigned n,
			uint64_t top, td_ngram_fn fn, void *ctx);
int td_shard_set_phrase(const td_archive *a, const char *p, size_t len, const td_entry *list, size_t nlist,
			const td_texts *texts, uint64_t *counts, td_hits *out);
/* td_set_fuzzy's version 5 form (td_fuzzy.c; word and k checked by the caller). */
int td_shard_set_fuzzy(const td_archive *a, const td_entry *list, size_t nlist, const td_texts *texts,
		       const char *word, size_t len, unsigned k, td_fuzzy_fn fn, void *ctx);

/* For td_shard_set_fuzzy: fn(ctx, shard, c) with the word counts of the
 * pieces of list[0..nlist) in each shard holding any (c taken over by fn),
 * then cut() with every word at a cut inside a word of those files (as
 * td_shard_cut_words). TD_OK, the first error of fn or cut, or an error
 * of td_list_counts. */
typedef int (*td_shard_counts_fn)(void *ctx, const td_archive *s, td_counts *c);
int td_shard_set_counts(const td_archive *a, const td_entry *list, size_t nlist, td_shard_counts_fn fn,
			td_cutword_fn cut, void *ctx);

/* Bytes of word id w (< W), its length in *len. WORDS must be decoded
 * (td_scope_counts does it). */
static inline const char *td_word_at(const td_archive *a, uint64_t w, size_t *len)
{
	uint64_t o0 = TD_FLAT(a, f_word_off, word_off, w), o1 = TD_FLAT(a, f_word_off, word_off, w + 1);
	*len = (size_t)(o1 - o0);
	return (const char *)td_words(a) + o0;
}

/* The files with a non-zero counts[i] (file ids[i]) ranked: count
 * descending, ties by path() bytes. *out malloc'd (NULL when *n is 0). */
int td_rank_counts(const uint64_t *counts, const uint32_t *ids, size_t nfiles, td_set_path_fn path, const void *pctx,
		   td_file_count **out, size_t *n);

#endif
