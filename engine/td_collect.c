/* td_collect: the analytics' word lists gathered into flat arrays (td_collect.h). */
#include "td_collect.h"

#include <stdlib.h>
#include <string.h>

#include "td_analytics.h"
#include "td_err.h"

typedef struct collect {
	td_word_counts *out;
	size_t wcap, ccap;
} collect;

static int add_word(void *ctx, const char *word, size_t len, uint64_t count)
{
	collect *c = ctx;
	td_word_counts *o = c->out;
	if (o->len + len + 1 > c->wcap) {
		size_t cap = c->wcap ? c->wcap : 4096;
		while (cap < o->len + len + 1)
			cap *= 2;
		char *w = realloc(o->words, cap);
		if (!w)
			return TD_ENOMEM;
		o->words = w;
		c->wcap = cap;
	}
	if (o->n == c->ccap) {
		size_t cap = c->ccap ? 2 * c->ccap : 1024;
		uint64_t *v = realloc(o->count, cap * sizeof *v);
		if (!v)
			return TD_ENOMEM;
		o->count = v;
		c->ccap = cap;
	}
	memcpy(o->words + o->len, word, len);
	o->words[o->len + len] = '\n';
	o->len += len + 1;
	o->count[o->n++] = count;
	return 0;
}

/* Return err, leaving *out empty when it is an error. */
static int finish(td_word_counts *out, int err)
{
	if (err)
		td_word_counts_free(out);
	return err;
}

int td_top_words_collect(const td_archive *a, td_entry scope, uint64_t n, td_word_counts *out)
{
	memset(out, 0, sizeof *out);
	collect c = { out, 0, 0 };
	return finish(out, td_top_words(a, scope, n, add_word, &c));
}

int td_term_vector_collect(const td_archive *a, td_entry scope, td_word_counts *out)
{
	memset(out, 0, sizeof *out);
	collect c = { out, 0, 0 };
	return finish(out, td_term_vector(a, scope, add_word, &c));
}

void td_word_counts_free(td_word_counts *out)
{
	if (!out)
		return;
	free(out->words);
	free(out->count);
	memset(out, 0, sizeof *out);
}
