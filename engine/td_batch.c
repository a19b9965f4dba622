/* td_batch: the batched CPU forms of extract, count and search. */
#include <stdlib.h>
#include <string.h>

#include "td_analytics_int.h"
#include "td_extract.h"
#include "td_par.h"
#include "td_query.h"

typedef struct bctx {
	const td_archive *a;
	void *reqs;
	td_fuzzy_find_fn find;
	void *fctx;
} bctx;

static void do_extract(void *p, size_t i)
{
	bctx *c = p;
	td_extract_req *r = &((td_extract_req *)c->reqs)[i];
	size_t got = 0;
	r->err = td_extract(c->a, r->file, r->off, r->buf, r->len, &got);
	r->got = (uint32_t)got;
}

static void do_count(void *p, size_t i)
{
	bctx *c = p;
	td_count_req *r = &((td_count_req *)c->reqs)[i];
	r->err = td_count(c->a, r->word, r->len, r->scope, &r->count);
}

static void do_search(void *p, size_t i)
{
	bctx *c = p;
	td_search_req *r = &((td_search_req *)c->reqs)[i];
	r->err = td_search(c->a, r->word, r->len, r->scope, &r->hits);
}

int td_extract_batch(const td_archive *a, td_extract_req *reqs, size_t n, unsigned nthreads)
{
	bctx c = { a, reqs, NULL, NULL };
	return td_par_for(n, nthreads, do_extract, &c);
}

int td_count_batch(const td_archive *a, td_count_req *reqs, size_t n, unsigned nthreads)
{
	bctx c = { a, reqs, NULL, NULL };
	return td_par_for(n, nthreads, do_count, &c);
}

int td_search_batch(const td_archive *a, td_search_req *reqs, size_t n, unsigned nthreads)
{
	bctx c = { a, reqs, NULL, NULL };
	return td_par_for(n, nthreads, do_search, &c);
}

typedef struct fbctx {
	const td_archive *a;
	td_files_req *reqs;
	td_files_find_fn find;
	void *fctx;
} fbctx;

static void do_files(void *p, size_t i)
{
	fbctx *c = p;
	td_files_req *r = &c->reqs[i];
	const td_hits *h = NULL;
	r->files = NULL;
	r->nfiles = 0;
	if (c->find && c->find(c->fctx, i, &h) == TD_OK)
		r->err = td_hits_files(c->a, h, &r->files, &r->nfiles);
	else
		r->err = td_phrase_files(c->a, r->word, r->len, r->scope, &r->files, &r->nfiles);
}

int td_files_batch_given(const td_archive *a, td_files_req *reqs, size_t n, unsigned nthreads, td_files_find_fn find,
			 void *fctx)
{
	fbctx c = { a, reqs, find, fctx };
	return td_par_for(n, nthreads, do_files, &c);
}

int td_files_batch(const td_archive *a, td_files_req *reqs, size_t n, unsigned nthreads)
{
	return td_files_batch_given(a, reqs, n, nthreads, NULL, NULL);
}

void td_fuzzy_req_free(td_fuzzy_req *r)
{
	if (!r)
		return;
	free(r->hits);
	free(r->words);
	r->hits = NULL;
	r->words = NULL;
	r->nhits = r->nbytes = 0;
}

/* Capacity of a buffer grown by the *_req_add calls holding n items: 0,
 * or the least power of two >= n and >= least. */
static size_t fz_cap(size_t n, size_t least)
{
	if (!n)
		return 0;
	size_t c = least;
	while (c < n)
		c *= 2;
	return c;
}

/* Room for one more item of `size` bytes in *v (holding n), and len more
 * bytes in *b (holding nb). TD_OK or TD_ENOMEM (nothing changed). */
static int req_room(void **v, size_t n, size_t size, char **b, size_t nb, size_t len)
{
	if (n == fz_cap(n, 8)) {
		void *h = realloc(*v, fz_cap(n + 1, 8) * size);
		if (!h)
			return TD_ENOMEM;
		*v = h;
	}
	if (nb + len > fz_cap(nb, 64)) {
		char *w = realloc(*b, fz_cap(nb + len, 64));
		if (!w)
			return TD_ENOMEM;
		*b = w;
	}
	return TD_OK;
}

int td_fuzzy_req_add(void *ctx, unsigned dist, const char *word, size_t len, uint64_t count)
{
	td_fuzzy_req *r = ctx;
	if (req_room((void **)&r->hits, r->nhits, sizeof *r->hits, &r->words, r->nbytes, len))
		return TD_ENOMEM;
	if (len)
		memcpy(r->words + r->nbytes, word, len);
	r->hits[r->nhits++] = (td_fuzzy_hit){ r->nbytes, (uint32_t)len, dist, count };
	r->nbytes += len;
	return TD_OK;
}

void td_words_req_free(td_words_req *r)
{
	if (!r)
		return;
	free(r->words);
	free(r->bytes);
	r->words = NULL;
	r->bytes = NULL;
	r->nwords = r->nbytes = 0;
}

int td_words_req_add(void *ctx, const char *word, size_t len, uint64_t count)
{
	td_words_req *r = ctx;
	if (req_room((void **)&r->words, r->nwords, sizeof *r->words, &r->bytes, r->nbytes, len))
		return TD_ENOMEM;
	if (len)
		memcpy(r->bytes + r->nbytes, word, len);
	r->words[r->nwords++] = (td_word_count){ r->nbytes, count, (uint32_t)len };
	r->nbytes += len;
	return TD_OK;
}

/* A top or vector request: its answer, or its error and nothing. */
static void words_done(td_words_req *r, int err)
{
	r->err = err;
	if (err)
		td_words_req_free(r);
}

typedef struct wbctx {
	const td_archive *a;
	td_words_req *reqs;
	td_words_find_fn find; /* NULL unless version 5 */
	void *fctx;
} wbctx;

static void words_one(wbctx *c, size_t i, int top)
{
	td_words_req *r = &c->reqs[i];
	r->words = NULL;
	r->bytes = NULL;
	r->nwords = r->nbytes = 0;
	int err;
	if (c->find)
		err = td_shard_words_given(c->a, r->scope, top, r->n, c->find, c->fctx, i, td_words_req_add, r);
	else if (top)
		err = td_top_words(c->a, r->scope, r->n, td_words_req_add, r);
	else
		err = td_term_vector(c->a, r->scope, td_words_req_add, r);
	words_done(r, err);
}

static void do_top(void *p, size_t i)
{
	words_one(p, i, 1);
}

static void do_vector(void *p, size_t i)
{
	words_one(p, i, 0);
}

int td_top_batch_given(const td_archive *a, td_words_req *reqs, size_t n, unsigned nthreads, td_words_find_fn find,
		       void *fctx)
{
	wbctx c = { a, reqs, td_sharded(a) ? find : NULL, fctx };
	return td_par_for(n, nthreads, do_top, &c);
}

int td_vector_batch_given(const td_archive *a, td_words_req *reqs, size_t n, unsigned nthreads,
			  td_words_find_fn find, void *fctx)
{
	wbctx c = { a, reqs, td_sharded(a) ? find : NULL, fctx };
	return td_par_for(n, nthreads, do_vector, &c);
}

int td_top_batch(const td_archive *a, td_words_req *reqs, size_t n, unsigned nthreads)
{
	return td_top_batch_given(a, reqs, n, nthreads, NULL, NULL);
}

int td_vector_batch(const td_archive *a, td_words_req *reqs, size_t n, unsigned nthreads)
{
	return td_vector_batch_given(a, reqs, n, nthreads, NULL, NULL);
}

void td_ngram_req_free(td_ngram_req *r)
{
	if (!r)
		return;
	free(r->grams);
	free(r->bytes);
	r->grams = NULL;
	r->bytes = NULL;
	r->ngrams = r->nbytes = 0;
}

/* A td_ngram_fn appending the run, words joined by spaces, to the td_ngram_req ctx. */
static int ngram_req_add(void *ctx, const char *const *words, const size_t *lens, unsigned nwords, uint64_t count)
{
	td_ngram_req *r = ctx;
	size_t len = nwords ? nwords - 1 : 0;
	for (unsigned k = 0; k < nwords; k++)
		len += lens[k];
	if (req_room((void **)&r->grams, r->ngrams, sizeof *r->grams, &r->bytes, r->nbytes, len))
		return TD_ENOMEM;
	char *o = r->bytes + r->nbytes;
	for (unsigned k = 0; k < nwords; k++) {
		if (k)
			*o++ = ' ';
		memcpy(o, words[k], lens[k]);
		o += lens[k];
	}
	r->grams[r->ngrams++] = (td_word_count){ r->nbytes, count, (uint32_t)len };
	r->nbytes += len;
	return TD_OK;
}

static void do_ngram(void *p, size_t i)
{
	bctx *c = p;
	td_ngram_req *r = &((td_ngram_req *)c->reqs)[i];
	r->grams = NULL;
	r->bytes = NULL;
	r->ngrams = r->nbytes = 0;
	r->err = td_ngrams(c->a, r->scope, r->len, r->top, ngram_req_add, r);
	if (r->err)
		td_ngram_req_free(r);
}

int td_ngram_batch(const td_archive *a, td_ngram_req *reqs, size_t n, unsigned nthreads)
{
	bctx c = { a, reqs, NULL, NULL };
	return td_par_for(n, nthreads, do_ngram, &c);
}

static void do_fuzzy(void *p, size_t i)
{
	bctx *c = p;
	td_fuzzy_req *r = &((td_fuzzy_req *)c->reqs)[i];
	r->hits = NULL;
	r->words = NULL;
	r->nhits = r->nbytes = 0;
	r->err = td_fuzzy_given(c->a, r->word, r->len, r->k, r->scope, c->find, c->fctx, i, td_fuzzy_req_add, r);
}

int td_fuzzy_batch_given(const td_archive *a, td_fuzzy_req *reqs, size_t n, unsigned nthreads, td_fuzzy_find_fn find,
			 void *fctx)
{
	bctx c = { a, reqs, find, fctx };
	return td_par_for(n, nthreads, do_fuzzy, &c);
}

int td_fuzzy_batch(const td_archive *a, td_fuzzy_req *reqs, size_t n, unsigned nthreads)
{
	return td_fuzzy_batch_given(a, reqs, n, nthreads, NULL, NULL);
}
