/* td_collect: the analytics' word lists gathered into flat arrays (td_collect.h). */
#include "td_collect.h"

#include <stdlib.h>
#include <string.h>

#include "td_analytics.h"
#include "td_err.h"
#include "td_format.h"

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

/* The pieces scope is split into, or *n = 0 when it is one part. */
static int vector_pieces(const td_archive *a, td_entry scope, const td_disk_piece **p, uint64_t *n)
{
	*p = NULL;
	*n = 0;
	if (scope >= td_archive_nentries(a))
		return td_fail(TD_EINVAL, "no entry %u", scope);
	if (!td_archive_nshards(a))
		return TD_OK;
	int err = td_archive_pieces(a, scope, p, n);
	if (err)
		return err;
	if (*n > UINT32_MAX)
		return td_fail(TD_ECORRUPT, "%llu pieces in one entry", (unsigned long long)*n);
	if (*n < 2 || td_archive_cut_in_word(a, scope))
		*n = 0;
	return TD_OK;
}

int td_term_vector_nparts(const td_archive *a, td_entry scope, uint32_t *nparts)
{
	const td_disk_piece *p;
	uint64_t n;
	*nparts = 1;
	int err = vector_pieces(a, scope, &p, &n);
	if (!err && n)
		*nparts = (uint32_t)n;
	return err;
}

int td_term_vector_part_collect(const td_archive *a, td_entry scope, uint32_t part, td_word_counts *out)
{
	memset(out, 0, sizeof *out);
	const td_disk_piece *p;
	uint64_t n;
	int err = vector_pieces(a, scope, &p, &n);
	if (err)
		return err;
	if (part >= (n ? n : 1))
		return td_fail(TD_EINVAL, "part %u of %llu", part, (unsigned long long)(n ? n : 1));
	if (!n)
		return td_term_vector_collect(a, scope, out);
	const td_archive *s;
	if ((err = td_archive_shard(a, p[part].shard, &s)))
		return err;
	return td_term_vector_collect(s, p[part].local, out);
}

/* A cursor over one input of td_word_counts_merge. */
typedef struct wcur {
	const td_word_counts *in;
	size_t pos, i;   /* the current word: words[pos..pos+len), count[i] */
	size_t len;
} wcur;

/* Find the current word's end; 0, or TD_EINVAL when the list is malformed. */
static int wcur_load(wcur *c)
{
	const char *w = c->in->words + c->pos, *e = memchr(w, '\n', c->in->len - c->pos);
	if (!e)
		return td_fail(TD_EINVAL, "word list: word %zu has no newline", c->i);
	c->len = (size_t)(e - w);
	return TD_OK;
}

static int wcur_cmp(const wcur *x, const wcur *y)
{
	size_t l = x->len < y->len ? x->len : y->len;
	int d = memcmp(x->in->words + x->pos, y->in->words + y->pos, l);
	return d ? d : (x->len > y->len) - (x->len < y->len);
}

static void wheap_down(wcur *c, size_t *h, size_t nh, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		if (l < nh && wcur_cmp(&c[h[l]], &c[h[m]]) < 0)
			m = l;
		if (l + 1 < nh && wcur_cmp(&c[h[l + 1]], &c[h[m]]) < 0)
			m = l + 1;
		if (m == i)
			return;
		size_t t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

int td_word_counts_merge(const td_word_counts *in, size_t n, td_word_counts *out)
{
	memset(out, 0, sizeof *out);
	size_t len = 0, nw = 0, nh = 0;
	for (size_t k = 0; k < n; k++) {
		if ((in[k].n && !in[k].len) || (in[k].len && (!in[k].n || in[k].words[in[k].len - 1] != '\n')))
			return td_fail(TD_EINVAL, "word list %zu: %zu bytes for %zu words", k, in[k].len, in[k].n);
		len += in[k].len;
		nw += in[k].n;
	}
	wcur *c = calloc(n ? n : 1, sizeof *c);
	size_t *h = malloc((n ? n : 1) * sizeof *h);
	out->words = malloc(len ? len : 1);
	out->count = malloc((nw ? nw : 1) * sizeof *out->count);
	int err = c && h && out->words && out->count ? TD_OK : TD_ENOMEM;
	for (size_t k = 0; k < n && !err; k++) {
		c[k].in = &in[k];
		if (in[k].n && !(err = wcur_load(&c[k])))
			h[nh++] = k;
	}
	for (size_t i = nh / 2; !err && i-- > 0;)
		wheap_down(c, h, nh, i);
	size_t last = 0, lastlen = 0; /* the last word written: out->words[last..last+lastlen) */
	while (nh && !err) {
		wcur *t = &c[h[0]];
		const char *w = t->in->words + t->pos;
		if (out->n && lastlen == t->len && !memcmp(out->words + last, w, t->len)) {
			out->count[out->n - 1] += t->in->count[t->i];
		} else {
			last = out->len;
			lastlen = t->len;
			memcpy(out->words + out->len, w, t->len + 1);
			out->len += t->len + 1;
			out->count[out->n++] = t->in->count[t->i];
		}
		wcur prev = *t;
		t->pos += t->len + 1;
		if (++t->i == t->in->n) {
			if (t->pos != t->in->len)
				err = td_fail(TD_EINVAL, "word list: %zu bytes for %zu words", t->in->len, t->in->n);
			h[0] = h[--nh];
		} else if (t->pos >= t->in->len) {
			err = td_fail(TD_EINVAL, "word list: %zu bytes for %zu words", t->in->len, t->in->n);
		} else if (!(err = wcur_load(t)) && wcur_cmp(&prev, t) >= 0) {
			err = td_fail(TD_EINVAL, "word list: words not in ascending byte order at word %zu", t->i);
		}
		if (!err)
			wheap_down(c, h, nh, 0);
	}
	free(c);
	free(h);
	return finish(out, err);
}

/* A word of td_word_counts_top: where it starts, its length, its count. */
typedef struct tword {
	const char *w;
	size_t len;
	uint64_t count;
} tword;

/* < 0 when x ranks before y: count descending, then bytes ascending. */
static int tword_cmp(const void *p, const void *q)
{
	const tword *x = p, *y = q;
	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	size_t l = x->len < y->len ? x->len : y->len;
	int d = memcmp(x->w, y->w, l);
	return d ? d : (x->len > y->len) - (x->len < y->len);
}

/* A heap of the best k so far, the worst of them on top. */
static void theap_down(tword *h, size_t nh, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		if (l < nh && tword_cmp(&h[l], &h[m]) > 0)
			m = l;
		if (l + 1 < nh && tword_cmp(&h[l + 1], &h[m]) > 0)
			m = l + 1;
		if (m == i)
			return;
		tword t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

int td_word_counts_top(const td_word_counts *in, uint64_t n, td_word_counts *out)
{
	memset(out, 0, sizeof *out);
	if ((in->n && !in->len) || (in->len && (!in->n || in->words[in->len - 1] != '\n')))
		return td_fail(TD_EINVAL, "word list: %zu bytes for %zu words", in->len, in->n);
	size_t k = !n || n > in->n ? in->n : (size_t)n, nh = 0, pos = 0;
	tword *h = malloc((k ? k : 1) * sizeof *h);
	if (!h)
		return TD_ENOMEM;
	int err = TD_OK;
	for (size_t i = 0; i < in->n && !err; i++) {
		const char *e = pos < in->len ? memchr(in->words + pos, '\n', in->len - pos) : NULL;
		if (!e) {
			err = td_fail(TD_EINVAL, "word list: %zu bytes for %zu words", in->len, in->n);
			break;
		}
		tword t = { in->words + pos, (size_t)(e - (in->words + pos)), in->count[i] };
		pos += t.len + 1;
		if (nh < k) {
			h[nh++] = t;
			if (nh == k && k < in->n)
				for (size_t j = nh / 2; j-- > 0;)
					theap_down(h, nh, j);
		} else if (tword_cmp(&t, &h[0]) < 0) {
			h[0] = t;
			theap_down(h, nh, 0);
		}
	}
	if (!err && pos != in->len)
		err = td_fail(TD_EINVAL, "word list: %zu bytes for %zu words", in->len, in->n);
	if (!err && nh > 1)
		qsort(h, nh, sizeof *h, tword_cmp);
	size_t len = 0;
	for (size_t i = 0; i < nh && !err; i++)
		len += h[i].len + 1;
	if (!err && (!(out->words = malloc(len ? len : 1)) || !(out->count = malloc((nh ? nh : 1) * sizeof *out->count))))
		err = TD_ENOMEM;
	for (size_t i = 0; i < nh && !err; i++) {
		memcpy(out->words + out->len, h[i].w, h[i].len);
		out->words[out->len + h[i].len] = '\n';
		out->len += h[i].len + 1;
		out->count[out->n++] = h[i].count;
	}
	free(h);
	return finish(out, err);
}

void td_word_counts_free(td_word_counts *out)
{
	if (!out)
		return;
	free(out->words);
	free(out->count);
	memset(out, 0, sizeof *out);
}
