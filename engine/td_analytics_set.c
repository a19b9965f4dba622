/* td_analytics_set: analytics over a given set of archive files and caller-read texts (see td_analytics_set.h). */
#include "td_analytics_set.h"
#include "td_analytics_int.h"

#include <stdlib.h>
#include <string.h>

#include "td_shard.h"
#include "td_tokenize.h"

/* A set split in two: its archive entries (list, with their places in the
 * set) and its texts (places in the set). */
typedef struct split {
	const td_archive *a;
	const td_fileset *s;
	td_entry *list;
	size_t *lpos, nlist;
	size_t *tpos, ntext;
	size_t *where;            /* set file i: its index in the list, or nlist + its text index */
	td_texts texts;
} split;

/* Bytes read from a text at a time; a word longer than this grows the
 * buffer. */
#define TEXT_CHUNK 65536u

/* Every word of text i (set file tpos[i]), in order, with its offset. The
 * text is read TEXT_CHUNK bytes at a time: a character is decided only
 * with 4 bytes in view (or at the end), a word only when it ends. */
static int text_words(void *ctx, size_t i, td_text_fn fn, void *fctx)
{
	const split *sp = ctx;
	const td_set_file *f = &sp->s->f[sp->tpos[i]];
	size_t cap = TEXT_CHUNK, have = 0;
	uint8_t *buf = malloc(cap);
	uint64_t boff = 0; /* text offset of buf[0] */
	int err = buf ? TD_OK : TD_ENOMEM;
	while (!err) {
		uint64_t want = f->size - (boff + have);
		if (want > cap - have)
			want = cap - have;
		if (want) {
			size_t got = 0;
			if ((err = sp->s->read(sp->s->rctx, f->id, boff + have, buf + have, (size_t)want, &got)))
				break;
			if (got != want) {
				err = td_fail(TD_ECORRUPT, "text %u: short read", (unsigned)f->id);
				break;
			}
			have += got;
		}
		int final = boff + have == f->size;
		size_t pos = 0;
		while (pos < have && !err) {
			if (!final && have - pos < 4)
				break;
			unsigned k = td_word_char(buf + pos, have - pos);
			if (!k) {
				pos++;
				continue;
			}
			size_t j = pos;
			int more = 0;
			while (j < have) {
				if (!final && have - j < 4) {
					more = 1;
					break;
				}
				if (!(k = td_word_char(buf + j, have - j)))
					break;
				j += k;
			}
			if (more || (j == have && !final))
				break;
			err = fn(fctx, buf + pos, j - pos, boff + pos);
			pos = j;
		}
		if (err || (final && pos >= have))
			break;
		memmove(buf, buf + pos, have - pos);
		boff += pos;
		have -= pos;
		if (have == cap) {
			uint8_t *nb = realloc(buf, 2 * cap);
			if (!nb) {
				err = TD_ENOMEM;
				break;
			}
			buf = nb;
			cap *= 2;
		}
	}
	free(buf);
	return err;
}

static void split_free(split *sp)
{
	free(sp->list);
	free(sp->lpos);
	free(sp->tpos);
	free(sp->where);
}

static int split_init(split *sp, const td_archive *a, const td_fileset *s)
{
	memset(sp, 0, sizeof *sp);
	sp->a = a;
	sp->s = s;
	size_t n = s->n ? s->n : 1;
	sp->list = malloc(n * sizeof *sp->list);
	sp->lpos = malloc(n * sizeof *sp->lpos);
	sp->tpos = malloc(n * sizeof *sp->tpos);
	sp->where = malloc(n * sizeof *sp->where);
	if (!sp->list || !sp->lpos || !sp->tpos || !sp->where) {
		split_free(sp);
		return TD_ENOMEM;
	}
	for (size_t i = 0; i < s->n; i++) {
		if (s->f[i].entry != TD_NOENTRY) {
			sp->lpos[sp->nlist] = i;
			sp->list[sp->nlist++] = s->f[i].entry;
		} else {
			if (!s->read) {
				split_free(sp);
				return td_fail(TD_EINVAL, "a text without a read function");
			}
			sp->tpos[sp->ntext++] = i;
		}
	}
	for (size_t i = 0, l = 0, t = 0; i < s->n; i++)
		sp->where[i] = s->f[i].entry != TD_NOENTRY ? l++ : sp->nlist + t++;
	sp->texts = (td_texts){ sp->ntext, text_words, sp };
	return TD_OK;
}

typedef struct cctx {
	td_counts *c;
	const td_archive *a;
} cctx;

/* Words of the texts into the counts: a word id, or an extra word. */
static int count_fn(void *ctx, const uint8_t *w, size_t len, uint64_t off)
{
	(void)off;
	td_counts *c = ((cctx *)ctx)->c;
	const td_archive *a = ((cctx *)ctx)->a;
	int64_t id = td_find_word(a, (const char *)w, len);
	if (id < -1)
		return (int)TD_ECORRUPT;
	if (id >= 0)
		return td_counts_add(c, (uint64_t)id, 1);
	int64_t i = td_counts_extra(c, w, len);
	if (i < 0)
		return (int)i;
	c->lw.count[i]++;
	return TD_OK;
}

/* The set's word counts: the entries' on the grammar, the texts' words. */
static int set_counts(const td_archive *a, const td_fileset *s, td_counts *c)
{
	split sp;
	memset(c, 0, sizeof *c);
	int err = split_init(&sp, a, s);
	if (err)
		return err;
	err = td_list_counts(a, TD_ROOT, sp.list, sp.nlist, c);
	cctx cc = { c, a };
	for (size_t i = 0; !err && i < sp.ntext; i++)
		err = text_words(&sp, i, count_fn, &cc);
	split_free(&sp);
	return err;
}

/* A version 5 archive's answers come from td_shard_an.c (and td_fuzzy.c),
 * over the split set: shard by shard, merged by word bytes. */
enum { SH_TOP, SH_VECTOR, SH_FUZZY, SH_NGRAMS };

typedef struct shq {
	int what;
	uint64_t n;            /* top: N; ngrams: K */
	unsigned len;          /* ngrams: run length; fuzzy: K */
	const char *word;      /* fuzzy */
	size_t wlen;
	td_word_fn wfn;        /* top, vector */
	td_fuzzy_fn ffn;
	td_ngram_fn nfn;
	void *ctx;
} shq;

static int sharded(const td_archive *a, const td_fileset *s, const shq *q)
{
	split sp;
	int err = split_init(&sp, a, s);
	if (err)
		return err;
	switch (q->what) {
	case SH_TOP:
		err = td_shard_set_top(a, sp.list, sp.nlist, &sp.texts, q->n, q->wfn, q->ctx);
		break;
	case SH_VECTOR:
		err = td_shard_set_vector(a, sp.list, sp.nlist, &sp.texts, q->wfn, q->ctx);
		break;
	case SH_FUZZY:
		err = td_shard_set_fuzzy(a, sp.list, sp.nlist, &sp.texts, q->word, q->wlen, q->len, q->ffn,
					 q->ctx);
		break;
	default:
		err = td_shard_set_ngrams(a, sp.list, sp.nlist, &sp.texts, q->len, q->n, q->nfn, q->ctx);
	}
	split_free(&sp);
	return err;
}

int td_set_top_words(const td_archive *a, const td_fileset *s, uint64_t n, td_word_fn fn, void *ctx)
{
	if (td_sharded(a))
		return sharded(a, s, &(shq){ .what = SH_TOP, .n = n, .wfn = fn, .ctx = ctx });
	td_counts c;
	int err = set_counts(a, s, &c);
	if (err) {
		td_counts_free(&c);
		return err;
	}
	return td_counts_top(a, &c, n, fn, ctx);
}

int td_set_term_vector(const td_archive *a, const td_fileset *s, td_word_fn fn, void *ctx)
{
	if (td_sharded(a))
		return sharded(a, s, &(shq){ .what = SH_VECTOR, .wfn = fn, .ctx = ctx });
	td_counts c;
	int err = set_counts(a, s, &c);
	if (err) {
		td_counts_free(&c);
		return err;
	}
	return td_counts_vector(a, &c, fn, ctx);
}

int td_set_fuzzy(const td_archive *a, const td_fileset *s, const char *word, size_t len, unsigned k, td_fuzzy_fn fn,
		 void *ctx)
{
	if (!td_is_word(word, len))
		return td_fail(TD_ENOTWORD, "'%.*s' is not a single word", (int)(len > 64 ? 64 : len), word);
	if (k > TD_FUZZY_MAXK)
		return td_fail(TD_EINVAL, "edit distance %u over %u", k, TD_FUZZY_MAXK);
	if (td_sharded(a))
		return sharded(a, s,
			       &(shq){ .what = SH_FUZZY, .len = k, .word = word, .wlen = len, .ffn = fn, .ctx = ctx });
	td_counts c;
	int err = set_counts(a, s, &c);
	if (err) {
		td_counts_free(&c);
		return err;
	}
	return td_counts_fuzzy(a, &c, word, len, k, 0, fn, ctx);
}

int td_set_ngrams(const td_archive *a, const td_fileset *s, unsigned n, uint64_t top, td_ngram_fn fn, void *ctx)
{
	if (td_sharded(a))
		return sharded(a, s, &(shq){ .what = SH_NGRAMS, .n = top, .len = n, .nfn = fn, .ctx = ctx });
	split sp;
	int err = split_init(&sp, a, s);
	if (err)
		return err;
	err = td_ngrams_list(a, TD_ROOT, sp.list, sp.nlist, &sp.texts, n, top, fn, ctx);
	split_free(&sp);
	return err;
}

static int fc_file_cmp(const void *p, const void *q)
{
	const td_file_count *u = p, *v = q;
	return (u->file > v->file) - (u->file < v->file);
}

/* Sets of fewer archive entries than this are walked: the archive-wide
 * answer below costs about what a few files' walk does. */
#define POST_MIN_LIST 32

/* A single word over list[0..n) of an archive whose every grammar has
 * stored postings: each entry's count from the archive's ranked files of
 * the word (td_phrase_files over the root: the postings, the cuts between
 * shards added), not from a walk of the entries' grammar. *done = 1 with
 * c[0..n) filled, or 0 (nothing done) when the postings cannot answer. */
static int post_counts(const td_archive *a, const char *p, size_t len, const td_entry *list, size_t n, uint64_t *c,
		       int *done)
{
	*done = 0;
	uint64_t bytes;
	uint32_t nwith, ng;
	td_archive_postings(a, &bytes, &nwith, &ng);
	if (n < POST_MIN_LIST || !ng || nwith != ng || len > TD_MAXTOK || !td_is_word(p, len))
		return TD_OK;
	td_file_count *v = NULL;
	size_t k = 0;
	int err = td_phrase_files(a, p, len, TD_ROOT, &v, &k);
	if (err)
		return err;
	if (k > 1)
		qsort(v, k, sizeof *v, fc_file_cmp);
	for (size_t i = 0; i < n; i++) {
		td_file_count key = { list[i], 0 };
		const td_file_count *f = k ? bsearch(&key, v, k, sizeof *v, fc_file_cmp) : NULL;
		c[i] = f ? f->count : 0;
	}
	free(v);
	*done = 1;
	return TD_OK;
}

/* Occurrences of the phrase per set file (counts[i] for s->f[i]); with out,
 * the hits (td_hit.file = the file's id), set order. */
static int set_phrase(const td_archive *a, const td_fileset *s, const char *p, size_t len, uint64_t **counts,
		      td_hits *out)
{
	split sp;
	*counts = NULL;
	int err = split_init(&sp, a, s);
	if (err)
		return err;
	uint64_t *c = calloc(s->n ? s->n : 1, sizeof *c), *byset = calloc(s->n ? s->n : 1, sizeof *byset);
	td_hits h = { 0 };
	if (!c || !byset)
		err = TD_ENOMEM;
	int done = 0;
	if (!err && !out) /* counts only: a word's from the stored postings */
		err = post_counts(a, p, len, sp.list, sp.nlist, c, &done);
	if (!err && done)
		err = td_phrase_texts(p, len, &sp.texts, sp.nlist, c + sp.nlist, NULL);
	else if (!err)
		err = (td_sharded(a) ? td_shard_set_phrase : td_phrase_list)(a, p, len, sp.list, sp.nlist, &sp.texts, c,
									      out ? &h : NULL);
	for (size_t f = 0; !err && f < s->n; f++)
		byset[f] = c[sp.where[f]];
	/* hits come by list index, then text index: put them in set order */
	if (!err && out && h.n) {
		size_t m = sp.nlist + sp.ntext, before = out->n;
		size_t *first = calloc(m + 1, sizeof *first);
		if (!first)
			err = TD_ENOMEM;
		for (size_t i = 0; !err && i < h.n; i++)
			first[h.v[i].file + 1]++;
		for (size_t i = 0; !err && i < m; i++)
			first[i + 1] += first[i];
		for (size_t f = 0; !err && f < s->n; f++)
			for (size_t k = first[sp.where[f]]; !err && k < first[sp.where[f] + 1]; k++)
				err = td_hits_push(out, s->f[f].id, h.v[k].off);
		if (err)
			out->n = before;
		free(first);
	}
	td_hits_free(&h);
	free(c);
	split_free(&sp);
	if (err)
		free(byset);
	else
		*counts = byset;
	return err;
}

int td_set_phrase_count(const td_archive *a, const td_fileset *s, const char *p, size_t len, uint64_t *count)
{
	uint64_t *c;
	*count = 0;
	int err = set_phrase(a, s, p, len, &c, NULL);
	for (size_t i = 0; !err && i < s->n; i++)
		*count += c[i];
	if (!err)
		free(c);
	return err;
}

int td_set_phrase_search(const td_archive *a, const td_fileset *s, const char *p, size_t len, td_hits *out)
{
	uint64_t *c;
	int err = set_phrase(a, s, p, len, &c, out);
	if (!err)
		free(c);
	return err;
}

int td_set_phrase_files(const td_archive *a, const td_fileset *s, const char *p, size_t len, td_set_path_fn path,
			const void *pctx, td_file_count **out, size_t *n)
{
	uint64_t *c;
	*out = NULL;
	*n = 0;
	int err = set_phrase(a, s, p, len, &c, NULL);
	if (err)
		return err;
	uint32_t *ids = malloc((s->n ? s->n : 1) * sizeof *ids);
	if (!ids)
		err = TD_ENOMEM;
	for (size_t f = 0; !err && f < s->n; f++)
		ids[f] = s->f[f].id;
	if (!err)
		err = td_rank_counts(c, ids, s->n, path, pctx, out, n);
	free(ids);
	free(c);
	return err;
}
