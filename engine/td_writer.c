/* td_writer: collect entries, tokenize, build the grammar and indexes, write the archive (format 4, or 3 on request). */
#include "td_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "td_format.h"
#include "td_grammar.h"
#include "td_mem.h"
#include "td_out.h"
#include "td_pack.h"
#include "td_pathtab.h"
#include "td_postings.h"
#include "td_scode.h"
#include "td_tokenize.h"
#include "td_tmpfile.h"
#include "td_trace.h"

#ifdef TD_WRITER_TRACE
_Thread_local double td_trace_wall, td_trace_cpu;
double td_trace_t0;
#endif

enum { ENT_DIR, ENT_FILE, ENT_LINK };

typedef struct went {
	char *path;       /* relative, no leading '/' ("" for the root) */
	uint32_t parent;
	int type;
	uint32_t mode;
	int64_t mtime;
	uint32_t nsec;
	uint64_t size, nwords;
	uint64_t nlong;   /* words longer than TD_MAXTOK (stored as pieces) */
	uint64_t seqidx;  /* file/link: index among texts in input order */
	uint64_t seq0;    /* file/link: where its tokens start in the input sequence */
	uint64_t raw0;    /* defer_tokenize: where its bytes start in raw */
	int explicit_;    /* added by the caller (not an implicit parent) */
} went;

/* Token dictionary: distinct token byte strings. */
typedef struct tokdict {
	uint32_t *slot;   /* hash -> token id + 1 */
	uint64_t mask;
	td_buf bytes;
	uint64_t *off;    /* token start in bytes */
	uint16_t *len;
	uint16_t *wordlen; /* 0 for OTHER */
	uint64_t *freq;
	uint32_t n, cap;
} tokdict;

struct td_writer {
	td_writer_opts o;
	went *ent;
	uint32_t nent, capent;
	td_pathtab pi;            /* path -> entry */
	tokdict td;
	uint32_t *seq;
	uint64_t nseq, capseq;
	uint64_t ntexts;
	/* streaming file state */
	int in_file;
	uint32_t cur;
	td_buf pend;
	td_tokenizer tz;
	uint64_t bytes_in;
	uint64_t nlong;   /* words longer than TD_MAXTOK in files */
	/* defer_tokenize: the texts' bytes and their entries, in input order;
	 * raw.p from td_big_alloc(raw.cap) (raw_put, raw_free) */
	td_buf raw;
	uint32_t *texts;
	uint64_t ntext_def, captext_def;
	unsigned tok_threads;     /* threads that tokenized them (trace) */
};

static uint64_t hbytes(const void *p, size_t n)
{
	return XXH3_64bits(p, n);
}

/* Where tokens go: a dictionary and a growing sequence of its ids (the
 * writer's own, or one tokenizing thread's, tokenize_deferred). */
typedef struct tokout {
	tokdict *d;
	uint32_t **seq;
	uint64_t *nseq, *capseq;
	uint64_t *nlong;  /* words longer than TD_MAXTOK in files */
} tokout;

static int seq_push_to(const tokout *o, uint32_t v)
{
	if (*o->nseq == *o->capseq) {
		uint64_t cap = *o->capseq ? *o->capseq * 2 : 1 << 16;
		uint32_t *p = realloc(*o->seq, cap * sizeof *p);
		if (!p)
			return TD_ENOMEM;
		*o->seq = p;
		*o->capseq = cap;
	}
	(*o->seq)[(*o->nseq)++] = v;
	return TD_OK;
}

static tokout writer_out(td_writer *w)
{
	return (tokout){ &w->td, &w->seq, &w->nseq, &w->capseq, &w->nlong };
}

static int seq_push(td_writer *w, uint32_t v)
{
	tokout o = writer_out(w);
	return seq_push_to(&o, v);
}

static int dict_grow(tokdict *d)
{
	uint64_t cap = d->mask ? (d->mask + 1) * 2 : 1 << 16;
	uint32_t *slot = calloc(cap, sizeof *slot);
	if (!slot)
		return TD_ENOMEM;
	for (uint32_t i = 0; i < d->n; i++) {
		uint64_t h = hbytes(d->bytes.p + d->off[i], d->len[i]) & (cap - 1);
		while (slot[h])
			h = (h + 1) & (cap - 1);
		slot[h] = i + 1;
	}
	free(d->slot);
	d->slot = slot;
	d->mask = cap - 1;
	return TD_OK;
}

/* Find or add token s; `count` (0 or 1) adds to its corpus frequency:
 * symlink targets are stored as text but are not part of the corpus. */
static int dict_add(tokdict *d, const uint8_t *s, const td_token *t, uint32_t count, uint32_t *id)
{
	if ((uint64_t)d->n * 2 >= d->mask && dict_grow(d))
		return TD_ENOMEM;
	uint64_t h = hbytes(s, t->len) & d->mask;
	for (;;) {
		uint32_t v = d->slot[h];
		if (!v)
			break;
		/* A piece of a long word and a word can have the same bytes: the
		 * kind is part of the key. */
		if (d->len[v - 1] == t->len && d->wordlen[v - 1] == (t->kind == TD_TOK_WORD ? t->wordlen : 0) &&
		    !memcmp(d->bytes.p + d->off[v - 1], s, t->len)) {
			*id = v - 1;
			d->freq[v - 1] += count;
			return TD_OK;
		}
		h = (h + 1) & d->mask;
	}
	if (d->n == d->cap) {
		uint32_t cap = d->cap ? d->cap * 2 : 4096;
		uint64_t *off = realloc(d->off, cap * sizeof *off);
		if (off)
			d->off = off;
		uint16_t *len = realloc(d->len, cap * sizeof *len);
		if (len)
			d->len = len;
		uint16_t *wl = realloc(d->wordlen, cap * sizeof *wl);
		if (wl)
			d->wordlen = wl;
		uint64_t *fq = realloc(d->freq, cap * sizeof *fq);
		if (fq)
			d->freq = fq;
		if (!off || !len || !wl || !fq)
			return TD_ENOMEM;
		d->cap = cap;
	}
	uint32_t i = d->n++;
	d->off[i] = d->bytes.len;
	d->len[i] = (uint16_t)t->len;
	d->wordlen[i] = (uint16_t)(t->kind == TD_TOK_WORD ? t->wordlen : 0);
	d->freq[i] = count;
	if (td_buf_put(&d->bytes, s, t->len))
		return TD_ENOMEM;
	d->slot[h] = i + 1;
	*id = i;
	return TD_OK;
}

/* The dictionary is not needed once the sequence holds final ids. */
static void dict_free(tokdict *d)
{
	free(d->slot);
	td_buf_free(&d->bytes);
	free(d->off);
	free(d->len);
	free(d->wordlen);
	free(d->freq);
	memset(d, 0, sizeof *d);
}

td_writer *td_writer_new(const td_writer_opts *opts)
{
	td_writer *w = calloc(1, sizeof *w);
	if (!w)
		return NULL;
	if (opts)
		w->o = *opts;
	if (!w->o.max_depth || w->o.max_depth > TD_MAXDEPTH)
		w->o.max_depth = 32;
	if (!w->o.sample_shift || w->o.sample_shift > 16)
		w->o.sample_shift = 5;
	if (w->o.format != 3)
		w->o.format = TD_VERSION;
	/* entry 0: the root directory */
	w->ent = calloc(64, sizeof *w->ent);
	if (td_pathtab_init(&w->pi) || !w->ent) {
		td_writer_abort(w);
		return NULL;
	}
	w->capent = 64;
	w->ent[0].path = strdup("");
	w->ent[0].type = ENT_DIR;
	w->ent[0].mode = S_IFDIR | 0755;
	w->ent[0].mtime = w->o.build_time ? w->o.build_time : (int64_t)time(NULL); /* unless given */
	w->nent = 1;
	td_trace("writer start");
	if (!w->ent[0].path) {
		td_writer_abort(w);
		return NULL;
	}
	return w;
}

/* defer_tokenize's held text: one mapping in huge pages (td_big_alloc),
 * sized at first use for opts.raw_hint bytes, so filling it costs a page
 * fault every 2 MiB instead of every 4 KiB (the adding thread's time:
 * contrib/bench/NOTES.md, "Compression speed"); a text past the hint
 * moves it to a mapping twice as large. */
static void raw_unmap(td_writer *w, void *p, size_t cap)
{
	if (p && w->o.raw_put && cap == w->o.raw_hint)
		w->o.raw_put(w->o.raw_ctx, p, cap);
	else
		td_big_free(p, cap);
}

static void raw_free(td_writer *w)
{
	raw_unmap(w, w->raw.p, w->raw.cap);
	memset(&w->raw, 0, sizeof w->raw);
}

/* Room for `len` more bytes after raw.len. */
static int raw_room(td_writer *w, size_t len)
{
	if (w->raw.cap - w->raw.len >= len)
		return TD_OK;
	size_t cap = w->raw.cap ? 2 * w->raw.cap : w->o.raw_hint > TD_BIG_MIN ? w->o.raw_hint : TD_BIG_MIN;
	while (cap - w->raw.len < len)
		cap *= 2;
	uint8_t *p = w->o.raw_get && cap == w->o.raw_hint ? w->o.raw_get(w->o.raw_ctx, cap) : td_big_alloc(cap);
	if (!p)
		return TD_ENOMEM;
	if (w->raw.len)
		memcpy(p, w->raw.p, w->raw.len);
	raw_unmap(w, w->raw.p, w->raw.cap);
	w->raw.p = p;
	w->raw.cap = cap;
	return TD_OK;
}

static int raw_put(td_writer *w, const void *data, size_t len)
{
	int err = raw_room(w, len);
	if (!err && len) {
		memcpy(w->raw.p + w->raw.len, data, len);
		w->raw.len += len;
	}
	return err;
}

void td_writer_abort(td_writer *w)
{
	if (!w)
		return;
	for (uint32_t i = 0; i < w->nent; i++)
		free(w->ent[i].path);
	free(w->ent);
	td_pathtab_free(&w->pi);
	free(w->td.slot);
	td_buf_free(&w->td.bytes);
	free(w->td.off);
	free(w->td.len);
	free(w->td.wordlen);
	free(w->td.freq);
	free(w->seq);
	td_buf_free(&w->pend);
	raw_free(w);
	free(w->texts);
	free(w);
}

static const char *ent_path(void *ctx, uint32_t e)
{
	return ((td_writer *)ctx)->ent[e].path;
}

static int ent_is_dir(void *ctx, uint32_t e)
{
	return ((td_writer *)ctx)->ent[e].type == ENT_DIR;
}

static uint32_t ent_count(void *ctx)
{
	return ((td_writer *)ctx)->nent;
}

/* An implicit parent: a directory with its parent's mtime until added. */
static int ent_add(void *ctx, const char *path, size_t len, uint32_t parent, int type)
{
	td_writer *w = ctx;
	if (w->nent == w->capent) {
		went *ne = realloc(w->ent, 2 * w->capent * sizeof *ne);
		if (!ne)
			return TD_ENOMEM;
		w->ent = ne;
		w->capent *= 2;
	}
	went *e = &w->ent[w->nent];
	memset(e, 0, sizeof *e);
	e->path = strndup(path, len);
	if (!e->path)
		return TD_ENOMEM;
	e->parent = parent;
	e->type = type;
	e->mode = S_IFDIR | 0755;
	e->mtime = w->ent[parent].mtime;
	w->nent++;
	return TD_OK;
}

static const td_pathtab_ops ent_ops = {ent_path, ent_is_dir, ent_count, ent_add, ENT_DIR};

static int check_path(const char *path)
{
	size_t len = strlen(path);
	if (len == 0)
		return td_fail(TD_EINVAL, "empty path");
	if (len > TD_MAXPATH)
		return td_fail(TD_ELIMIT, "path longer than %u bytes", TD_MAXPATH);
	if (path[0] == '/')
		return td_fail(TD_EINVAL, "absolute path");
	if (path[len - 1] == '/')
		return td_fail(TD_EINVAL, "trailing '/'");
	const char *c = path;
	while (*c) {
		const char *e = strchr(c, '/');
		size_t n = e ? (size_t)(e - c) : strlen(c);
		if (n == 0)
			return td_fail(TD_EINVAL, "empty path component");
		if (n > TD_MAXNAME)
			return td_fail(TD_ELIMIT, "name longer than %u bytes", TD_MAXNAME);
		if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return td_fail(TD_EINVAL, "'.' or '..' component");
		c += n;
		if (*c == '/')
			c++;
	}
	return TD_OK;
}

int td_writer_check_path(const char *path)
{
	return check_path(path);
}

static int add_entry(td_writer *w, const char *path, int type, uint32_t mode, int64_t mtime, uint32_t nsec,
		     uint32_t *out)
{
	if (w->in_file)
		return td_fail(TD_EINVAL, "a file is still open in the writer");
	int err = check_path(path);
	if (err)
		return err;
	uint32_t id;
	int created;
	err = td_pathtab_get(&w->pi, &ent_ops, w, path, strlen(path), type, &id, &created);
	if (err)
		return err;
	went *e = &w->ent[id];
	if (!created && (e->explicit_ || e->type != ENT_DIR || type != ENT_DIR))
		return td_fail(TD_EEXIST, "'%s' added twice", path);
	e->explicit_ = 1;
	e->type = type;
	e->mode = mode;
	e->mtime = mtime;
	e->nsec = nsec;
	*out = id;
	return TD_OK;
}

int td_writer_add_dir(td_writer *w, const char *path, mode_t mode, int64_t mtime_sec, uint32_t mtime_nsec)
{
	uint32_t id;
	if (path[0] == '\0') { /* the root itself */
		w->ent[0].mode = S_IFDIR | (mode & 07777);
		w->ent[0].mtime = mtime_sec;
		w->ent[0].nsec = mtime_nsec;
		return TD_OK;
	}
	return add_entry(w, path, ENT_DIR, S_IFDIR | (mode & 07777), mtime_sec, mtime_nsec, &id);
}

/* Tokenize s[0..n) of entry e's text into o; returns bytes consumed. */
static int feed_to(const tokout *o, td_tokenizer *tz, went *e, const uint8_t *s, size_t n, int final, size_t *used)
{
	size_t i = 0;
	while (i < n) {
		td_token t;
		size_t k = td_next_token(tz, s + i, n - i, final, &t);
		if (k == 0)
			break;
		uint32_t id;
		int err = dict_add(o->d, s + i, &t, e->type == ENT_FILE, &id);
		if (!err)
			err = seq_push_to(o, id);
		if (err)
			return err;
		/* A word longer than TD_MAXTOK is stored as pieces but still is
		 * one word of the file (decision 2). */
		e->nwords += t.kind == TD_TOK_WORD || t.long_start;
		e->nlong += t.long_start != 0;
		if (t.long_start && e->type == ENT_FILE)
			(*o->nlong)++;
		i += k;
	}
	*used = i;
	return TD_OK;
}

/* Tokenize s[0..n) of the current text; returns bytes consumed. */
static int feed(td_writer *w, const uint8_t *s, size_t n, int final, size_t *used)
{
	tokout o = writer_out(w);
	return feed_to(&o, &w->tz, &w->ent[w->cur], s, n, final, used);
}

/* Start tokenizing text `id`: now, or in finish (defer_tokenize). */
static void tok_begin(td_writer *w, uint32_t id)
{
	w->cur = id;
	w->pend.len = 0;
	memset(&w->tz, 0, sizeof w->tz);
	w->ent[id].seqidx = w->ntexts++;
	w->ent[id].seq0 = w->nseq;
}

static int text_begin(td_writer *w, uint32_t id)
{
	if (!w->o.defer_tokenize) {
		w->in_file = 1;
		tok_begin(w, id);
		return TD_OK;
	}
	w->cur = id;
	w->ent[id].raw0 = w->raw.len;
	if (w->ntext_def == w->captext_def) {
		uint64_t cap = w->captext_def ? 2 * w->captext_def : 256;
		uint32_t *v = realloc(w->texts, cap * sizeof *v);
		if (!v)
			return TD_ENOMEM;
		w->texts = v;
		w->captext_def = cap;
	}
	w->texts[w->ntext_def++] = id;
	w->in_file = 1;
	return TD_OK;
}

/* One thread's share of tokenize_deferred: the recorded texts [a, b) into
 * a dictionary and sequence of its own (ids in order of first occurrence
 * there), each text's seq0 relative to its sequence. */
typedef struct tokpart {
	td_writer *w;
	uint64_t a, b;
	tokdict d;
	uint32_t *seq;
	uint64_t nseq, capseq, nlong;
	int err;
} tokpart;

static void *tok_part(void *arg)
{
	tokpart *p = arg;
	td_writer *w = p->w;
	tokout o = { &p->d, &p->seq, &p->nseq, &p->capseq, &p->nlong };
	for (uint64_t k = p->a; k < p->b && !p->err; k++) {
		went *e = &w->ent[w->texts[k]];
		td_tokenizer tz;
		memset(&tz, 0, sizeof tz);
		e->seqidx = k;
		e->seq0 = p->nseq;
		size_t used;
		if (e->size)
			p->err = feed_to(&o, &tz, e, w->raw.p + e->raw0, e->size, 1, &used);
		if (!p->err)
			p->err = seq_push_to(&o, TD_SPLIT);
	}
	return NULL;
}

/* Texts a tokenizing thread takes at least (starting more costs more than
 * it saves), and the threads one writer tokenizes on at most (the merge
 * grows with them). */
#define TOK_BYTES_PER_THREAD (UINT64_C(2) << 20)
#define TOK_MAXTHR 8

/* Put the threads' parts together as one thread tokenizing every text in
 * order makes them: a token's id is its place in order of first
 * occurrence, so the parts' dictionaries, taken in order and each in its
 * own order of first occurrence, add their new tokens to the writer's in
 * exactly that order; frequencies add up, the sequences are renumbered
 * and concatenated. */
static int tok_merge(td_writer *w, tokpart *part, unsigned np)
{
	uint64_t total = 0;
	for (unsigned t = 0; t < np; t++)
		total += part[t].nseq;
	uint32_t *map = NULL;
	int err = TD_OK;
	if (!(w->seq = malloc((total ? total : 1) * sizeof *w->seq)))
		return TD_ENOMEM;
	w->capseq = total ? total : 1;
	w->nseq = 0;
	for (unsigned t = 0; t < np && !err; t++) {
		tokpart *p = &part[t];
		uint32_t *m = realloc(map, ((uint64_t)p->d.n + 1) * sizeof *m);
		if (!m) {
			err = TD_ENOMEM;
			break;
		}
		map = m;
		for (uint32_t i = 0; i < p->d.n && !err; i++) {
			td_token tk = { .len = p->d.len[i], .wordlen = p->d.wordlen[i],
					.kind = p->d.wordlen[i] ? TD_TOK_WORD : TD_TOK_OTHER };
			err = dict_add(&w->td, p->d.bytes.p + p->d.off[i], &tk, 0, &map[i]);
			if (!err)
				w->td.freq[map[i]] += p->d.freq[i];
		}
		for (uint64_t k = p->a; k < p->b; k++)
			w->ent[w->texts[k]].seq0 += w->nseq;
		for (uint64_t i = 0; i < p->nseq && !err; i++)
			w->seq[w->nseq + i] = p->seq[i] == TD_SPLIT ? TD_SPLIT : map[p->seq[i]];
		w->nseq += p->nseq;
		w->nlong += p->nlong;
		free(p->seq);
		p->seq = NULL;
		dict_free(&p->d);
	}
	free(map);
	return err;
}

/* tokenize_deferred on the calling thread and the idle cores it may
 * borrow (grammar_cores): the texts cut into runs of whole texts of about
 * equal bytes, a thread each, merged in order (tok_merge). Returns TD_OK,
 * an error, or -1 when no core was free (nothing done). */
static int tokenize_parallel(td_writer *w)
{
	const td_grammar_cores *c = w->o.grammar_cores;
	uint64_t want = w->bytes_in / TOK_BYTES_PER_THREAD;
	if (!c || !c->take || !c->give || want < 2 || w->ntext_def < 2)
		return -1;
	uint64_t maxthr = TOK_MAXTHR;
#ifdef TD_WRITER_TRACE
	/* benchmarks: fewer threads (1: one, as before) */
	if (getenv("TD_TRACE_TOK_MAXTHR") && (uint64_t)atoi(getenv("TD_TRACE_TOK_MAXTHR")) < maxthr)
		maxthr = (uint64_t)atoi(getenv("TD_TRACE_TOK_MAXTHR"));
#endif
	if (want > maxthr)
		want = maxthr;
	if (want < 2)
		return -1;
	unsigned got = c->take(c->ctx, (unsigned)want - 1), least = 0;
#ifdef TD_WRITER_TRACE
	/* benchmarks: at least this many threads, cores free or not */
	if (getenv("TD_TRACE_TOK_MIN"))
		least = (unsigned)atoi(getenv("TD_TRACE_TOK_MIN"));
	if (least > want)
		least = (unsigned)want;
#endif
	if (got == 0 && least < 2)
		return -1;
	unsigned np = got + 1 < TOK_MAXTHR ? got + 1 : TOK_MAXTHR;
	if (np < least)
		np = least;
	w->tok_threads = np;
	tokpart part[TOK_MAXTHR];
	pthread_t th[TOK_MAXTHR];
	int started[TOK_MAXTHR] = { 0 };
	memset(part, 0, sizeof part);
	uint64_t k = 0, acc = 0;
	for (unsigned t = 0; t < np; t++) {
		part[t].w = w;
		part[t].a = k;
		/* up to the text that brings the bytes to (t + 1) / np of all */
		uint64_t goal = w->bytes_in / np * (t + 1);
		while (k < w->ntext_def && (t == np - 1 || acc < goal))
			acc += w->ent[w->texts[k++]].size;
		part[t].b = k;
	}
	for (unsigned t = 1; t < np; t++)
		started[t] = pthread_create(&th[t], NULL, tok_part, &part[t]) == 0;
	tok_part(&part[0]);
	for (unsigned t = 1; t < np; t++) {
		if (started[t])
			pthread_join(th[t], NULL);
		else
			tok_part(&part[t]);
	}
	c->give(c->ctx, got);
	int err = TD_OK;
	for (unsigned t = 0; t < np && !err; t++)
		err = part[t].err;
	raw_free(w);
	if (!err)
		err = tok_merge(w, part, np);
	for (unsigned t = 0; t < np; t++) {
		free(part[t].seq);
		dict_free(&part[t].d);
	}
	/* the runs were allocated in the threads' arenas: free them for the
	 * grammar (the memory bound counts one shard's tables at a time) */
	td_mem_trim();
	w->ntexts += w->ntext_def;
	return err;
}

/* defer_tokenize: tokenize every recorded text, in order, as adding it
 * whole (td_writer_add_file, td_writer_add_symlink) does; then drop the
 * bytes. The same sequence and dictionary on any number of threads. */
static int tokenize_deferred(td_writer *w)
{
	int err = tokenize_parallel(w);
	for (uint64_t k = 0; err < 0 && k < w->ntext_def; k++) {
		uint32_t id = w->texts[k];
		tok_begin(w, id);
		size_t used;
		int e = TD_OK;
		if (w->ent[id].size)
			e = feed(w, w->raw.p + w->ent[id].raw0, w->ent[id].size, 1, &used);
		if (!e)
			e = seq_push(w, TD_SPLIT);
		if (e)
			err = e;
	}
	if (err < 0)
		err = TD_OK;
	raw_free(w);
	free(w->texts);
	w->texts = NULL;
	w->ntext_def = w->captext_def = 0;
	return err;
}

int td_writer_file_begin(td_writer *w, const char *path, mode_t mode, int64_t mtime_sec, uint32_t mtime_nsec)
{
	uint32_t id;
	int err = add_entry(w, path, ENT_FILE, S_IFREG | (mode & 07777), mtime_sec, mtime_nsec, &id);
	return err ? err : text_begin(w, id);
}

void *td_writer_file_room(td_writer *w, size_t len)
{
	if (!w->in_file || !w->o.defer_tokenize || raw_room(w, len))
		return NULL;
	return w->raw.p + w->raw.len;
}

int td_writer_file_wrote(td_writer *w, size_t len)
{
	if (!w->in_file || !w->o.defer_tokenize || w->raw.cap - w->raw.len < len)
		return td_fail(TD_EINVAL, "no room given for %zu bytes in the writer", len);
	w->ent[w->cur].size += len;
	w->bytes_in += len;
	w->raw.len += len;
	return TD_OK;
}

int td_writer_file_data(td_writer *w, const void *data, size_t len)
{
	if (!w->in_file)
		return td_fail(TD_EINVAL, "no file open in the writer");
	w->ent[w->cur].size += len;
	w->bytes_in += len;
	if (w->o.defer_tokenize)
		return raw_put(w, data, len);
	size_t used;
	int err;
	if (w->pend.len == 0) {
		err = feed(w, data, len, 0, &used);
		if (!err && used < len)
			err = td_buf_put(&w->pend, (const uint8_t *)data + used, len - used);
		return err;
	}
	err = td_buf_put(&w->pend, data, len);
	if (!err)
		err = feed(w, w->pend.p, w->pend.len, 0, &used);
	if (!err) {
		memmove(w->pend.p, w->pend.p + used, w->pend.len - used);
		w->pend.len -= used;
	}
	return err;
}

int td_writer_file_end(td_writer *w)
{
	if (!w->in_file)
		return td_fail(TD_EINVAL, "no file open in the writer");
	int err = TD_OK;
	if (!w->o.defer_tokenize) {
		size_t used = 0;
		err = feed(w, w->pend.p, w->pend.len, 1, &used);
		w->pend.len = 0;
		if (!err)
			err = seq_push(w, TD_SPLIT);
	}
	w->in_file = 0;
	if (w->o.progress)
		w->o.progress(w->o.progress_ctx, "read", w->bytes_in, 0);
	return err;
}

int td_writer_add_copy(td_writer *w, const char *path, mode_t mode, int64_t mtime_sec, uint32_t mtime_nsec,
		       const char *target)
{
	if (w->in_file)
		return td_fail(TD_EINVAL, "a file is still open in the writer");
	size_t tl = strlen(target);
	uint32_t *slot = tl ? td_pathtab_find(&w->pi, target, tl, &ent_ops, w) : NULL;
	if (!slot || !*slot || w->ent[*slot - 1].type != ENT_FILE || !w->ent[*slot - 1].explicit_)
		return td_fail(TD_ENOENT, "'%s': no regular file of that name was added before", target);
	uint32_t src = *slot - 1;
	int err = td_writer_file_begin(w, path, mode, mtime_sec, mtime_nsec);
	if (err)
		return err;
	if (w->o.defer_tokenize) { /* the same bytes again, tokenized in finish */
		w->ent[w->cur].raw0 = w->ent[src].raw0;
		w->ent[w->cur].size = w->ent[src].size;
		w->bytes_in += w->ent[src].size;
		return td_writer_file_end(w);
	}
	/* The same tokens as feeding the same bytes again: each counted once
	 * more, as dict_add counts a file's tokens. */
	for (uint64_t i = w->ent[src].seq0; !err && w->seq[i] != TD_SPLIT; i++) {
		uint32_t tok = w->seq[i];
		err = seq_push(w, tok);
		if (!err)
			w->td.freq[tok]++;
	}
	if (err) {
		w->in_file = 0;
		return err;
	}
	went *e = &w->ent[w->cur];
	const went *t = &w->ent[src];
	e->size = t->size;
	e->nwords = t->nwords;
	e->nlong = t->nlong;
	w->nlong += t->nlong;
	w->bytes_in += t->size;
	return td_writer_file_end(w);
}

int td_writer_file_text(const td_writer *w, const char *path, void *buf, uint64_t cap, uint64_t *len)
{
	size_t pl = strlen(path);
	uint32_t *slot = pl ? td_pathtab_find(&w->pi, path, pl, &ent_ops, (void *)w) : NULL;
	if (!slot || !*slot || w->ent[*slot - 1].type == ENT_DIR || (w->in_file && w->cur == *slot - 1))
		return td_fail(TD_ENOENT, "'%s': no file of that name was added and ended", path);
	const went *e = &w->ent[*slot - 1];
	if (e->size > cap)
		return td_fail(TD_ERANGE, "'%s': %llu bytes, more than %llu", path, (unsigned long long)e->size,
			       (unsigned long long)cap);
	uint8_t *o = buf;
	if (w->o.defer_tokenize) { /* not tokenized yet: its bytes are held */
		if (e->size)
			memcpy(o, w->raw.p + e->raw0, e->size);
		*len = e->size;
		return TD_OK;
	}
	uint64_t at = 0;
	for (uint64_t i = e->seq0; i < w->nseq && w->seq[i] != TD_SPLIT; i++) {
		uint32_t tok = w->seq[i];
		if (at + w->td.len[tok] > e->size)
			return td_fail(TD_ECORRUPT, "'%s': its tokens outgrow its size", path);
		memcpy(o + at, w->td.bytes.p + w->td.off[tok], w->td.len[tok]);
		at += w->td.len[tok];
	}
	*len = at;
	return TD_OK;
}

int td_writer_add_file(td_writer *w, const char *path, mode_t mode, int64_t mtime_sec, uint32_t mtime_nsec,
		       const void *data, size_t len)
{
	int err = td_writer_file_begin(w, path, mode, mtime_sec, mtime_nsec);
	if (!err && w->o.defer_tokenize)
		err = td_writer_file_data(w, data, len);
	else if (!err) {
		size_t used;
		w->ent[w->cur].size = len;
		w->bytes_in += len;
		err = feed(w, data, len, 1, &used);
	}
	if (!err)
		err = td_writer_file_end(w);
	return err;
}

int td_writer_add_symlink(td_writer *w, const char *path, int64_t mtime_sec, uint32_t mtime_nsec, const char *target)
{
	uint32_t id;
	int err = add_entry(w, path, ENT_LINK, S_IFLNK | 0777, mtime_sec, mtime_nsec, &id);
	if (err)
		return err;
	if ((err = text_begin(w, id)))
		return err;
	size_t used, len = strlen(target);
	w->ent[id].size = len;
	if (w->o.defer_tokenize)
		err = raw_put(w, target, len);
	else
		err = feed(w, (const uint8_t *)target, len, 1, &used);
	if (!err && !w->o.defer_tokenize)
		err = seq_push(w, TD_SPLIT);
	w->in_file = 0;
	return err;
}

/* ---------------------------------------------------------------- finish */

typedef struct sorter {
	const uint8_t *bytes;
	const uint64_t *off;
	const uint16_t *len;
} sorter;

static _Thread_local const sorter *g_sort;

static int cmp_bytes(const uint8_t *a, size_t la, const uint8_t *b, size_t lb)
{
	int c = memcmp(a, b, la < lb ? la : lb);
	return c ? c : (la > lb) - (la < lb);
}

/* A token to sort: its first 8 bytes as a big-endian number (zeros past
 * its end), so most comparisons need no look-up of its bytes. */
typedef td_skey skey;

static int cmp_tok(const void *x, const void *y)
{
	const skey *p = x, *q = y;
	if (p->key != q->key)
		return p->key < q->key ? -1 : 1;
	uint32_t a = p->id, b = q->id;
	return cmp_bytes(g_sort->bytes + g_sort->off[a], g_sort->len[a], g_sort->bytes + g_sort->off[b],
			 g_sort->len[b]);
}

/* Sort ids[0..n) by their tokens' bytes under s (len: the bytes that
 * count); ties in any order. Returns TD_ENOMEM or TD_OK. */
static int sort_tokens(const sorter *s, uint32_t *ids, uint32_t n)
{
	skey *k = malloc((n ? n : 1) * sizeof *k);
	if (!k)
		return TD_ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *p = s->bytes + s->off[ids[i]];
		uint32_t len = s->len[ids[i]];
		uint64_t key = 0;
		for (uint32_t j = 0; j < 8; j++)
			key = key << 8 | (j < len ? p[j] : 0);
		k[i] = (skey){ key, ids[i] };
	}
	g_sort = s;
	/* by the first 8 bytes, then runs of one key by all their bytes */
	if (td_sort_keys(k, n)) {
		free(k);
		return TD_ENOMEM;
	}
	for (uint32_t i = 0, j; i < n; i = j) {
		for (j = i + 1; j < n && k[j].key == k[i].key;)
			j++;
		if (j - i > 1)
			qsort(k + i, j - i, sizeof *k, cmp_tok);
	}
	for (uint32_t i = 0; i < n; i++)
		ids[i] = k[i].id;
	free(k);
	return TD_OK;
}

static _Thread_local const went *g_ents;

static int cmp_name(const void *x, const void *y)
{
	const char *a = g_ents[*(const uint32_t *)x].path, *b = g_ents[*(const uint32_t *)y].path;
	const char *na = strrchr(a, '/'), *nb = strrchr(b, '/');
	na = na ? na + 1 : a;
	nb = nb ? nb + 1 : b;
	return strcmp(na, nb);
}

static _Thread_local const uint64_t *g_rlen;
static _Thread_local const uint64_t *g_xlen;

static int cmp_rulelen(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
	uint64_t la = g_rlen[a + 1] - g_rlen[a], lb = g_rlen[b + 1] - g_rlen[b];
	if (la != lb)
		return la < lb ? -1 : 1;
	if (g_xlen[a] != g_xlen[b])
		return g_xlen[a] < g_xlen[b] ? -1 : 1;
	return (a > b) - (a < b);
}

typedef struct secbuf {
	td_buf b[TD_SEC_MAX];
	td_buf post;               /* TD_SEC_POSTINGS, written when not empty */
	uint8_t zdone[TD_SEC_MAX]; /* already one zstd frame (compressed early) */
	int8_t words_split;        /* WORDS's layout: before words_zstd the request
	                            * (-1, 0, 1), after it 1 where split */
} secbuf;

/* zstd level of a TD_SECF_ZSTD section (each one frame; any level reads
 * the same): the names at 19; the dictionary sections (WORDS, OTHER,
 * WORD_FREQ: most of a GPU build's CPU time at 19) at 17, which costs
 * under a tenth of a percent of the archive for a quarter less time
 * (contrib/bench/results/compress.md); WORDS in its split layout at 12
 * (words_zstd). The level of a section is fixed, so any number of threads
 * writes the same bytes. */
static int sec_zstd_level(unsigned id)
{
	return id == TD_SEC_WORDS || id == TD_SEC_OTHER || id == TD_SEC_WORD_FREQ ? 17 : 19;
}

/* Bytes of n bytes at p as one zstd frame at level 3 (SIZE_MAX where zstd
 * fails), into z of cap >= ZSTD_compressBound(n): the layout test's scale. */
static size_t zstd_probe(ZSTD_CCtx *cc, void *z, size_t cap, const void *p, size_t n)
{
	size_t r = cc ? ZSTD_compressCCtx(cc, z, cap, p, n, 3) : 0;
	return !cc || ZSTD_isError(r) ? SIZE_MAX : r;
}

/* WORDS (front-coded records, front_code) as one zstd frame in the layout
 * that suits its words. The split layout (TD_SECF_SPLIT: the W prefix-length
 * bytes first, then every rest and its '\n') at level 12 is smaller than the
 * records at 17 on source code's identifiers (linux's shards 2-15% smaller)
 * for a fifth to a third of the CPU, but larger on prose (gcide +6%). The
 * test: both layouts at level 3, the split one taken when its frame is at
 * most 94% of the other's (calibrated on the word lists of sotu, mobydick,
 * gcide, spam, linuxdoc and linux's shards: contrib/bench/results/
 * compress-speed.md, branch bspeed9); it reads only these bytes, so any
 * number of threads and the GPU on or off write the same archive.
 * sb->words_split: -1 never split (td_writer_opts.words_split
 * TD_WORDS_RECORDS), 0 the test (TD_WORDS_TEST), 1 always (TD_WORDS_SPLIT);
 * on return, 1 where the section is split. level: the records' (17). */
static int words_zstd(secbuf *sb, td_buf *b, int level)
{
	int split = sb->words_split;
	sb->words_split = 0;
	if (split < 0 || b->len == 0)
		return td_buf_zstd(b, level);
	uint64_t W = 0;
	for (const uint8_t *p = b->p, *e = b->p + b->len; p < e; W++) {
		const uint8_t *nl = p + 1 < e ? memchr(p + 1, '\n', (size_t)(e - p - 1)) : NULL;
		if (!nl) /* not front_code's records: never here */
			return td_buf_zstd(b, level);
		p = nl + 1;
	}
	uint8_t *s = malloc(b->len);
	if (!s)
		return td_fail(TD_ENOMEM, "out of memory while building the archive");
	for (size_t at = 0, i = 0, r = W; at < b->len; i++) {
		const uint8_t *nl = memchr(b->p + at + 1, '\n', b->len - at - 1);
		const size_t rest = (size_t)(nl - (b->p + at)); /* rest and '\n' */
		s[i] = b->p[at];
		memcpy(s + r, b->p + at + 1, rest);
		r += rest;
		at += rest + 1;
	}
	if (split == 0) {
		const size_t cap = ZSTD_compressBound(b->len);
		void *z = malloc(cap);
		ZSTD_CCtx *cc = z ? ZSTD_createCCtx() : NULL;
		const size_t zi = zstd_probe(cc, z, cap, b->p, b->len);
		const size_t zs = zstd_probe(cc, z, cap, s, b->len);
		ZSTD_freeCCtx(cc);
		free(z);
		split = zs != SIZE_MAX && zi != SIZE_MAX && (uint64_t)zs * 100 <= (uint64_t)zi * 94;
		td_trace("words layout test: %zu bytes, records %zu, split %zu: %s", b->len, zi, zs,
			 split ? "split" : "records");
	}
	if (split) {
		memcpy(b->p, s, b->len);
		sb->words_split = 1;
	}
	free(s);
	return td_buf_zstd(b, split ? 12 : level);
}

/* Section id of sb as one zstd frame (WORDS: level is the records'). */
static int sec_zstd(secbuf *sb, unsigned id, int level)
{
	return id == TD_SEC_WORDS ? words_zstd(sb, &sb->b[id], level) : td_buf_zstd(&sb->b[id], level);
}

/* sync 0: out_path is a temporary its caller reads back and removes
 * (td_writer_opts.temp_output): no fsync. */
static int write_archive(secbuf *sb, unsigned version, const char *out_path, int sync)
{
	/* The sections marked TD_SECF_ZSTD (td_format.h) become one zstd
	 * frame each (those compressed early already are). */
	for (unsigned id = 1; id < TD_SEC_MAX; id++) {
		int zerr = td_sec_zstd(id) && !sb->zdone[id] ? sec_zstd(sb, id, sec_zstd_level(id)) : TD_OK;
		if (zerr)
			return zerr;
	}
	size_t cap = strlen(out_path) + 32;
	char *tmp = malloc(cap);
	char *dcopy = strdup(out_path);
	if (!tmp || !dcopy || td_tmp_path(out_path, NULL, tmp, cap)) {
		free(tmp);
		free(dcopy);
		return TD_ENOMEM;
	}
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int err = TD_OK;
	if (fd < 0) {
		err = td_fail(TD_EIO, "%s: %s", out_path, strerror(errno)); /* the temporary name is ours */
		goto out;
	}
	td_disk_header h;
	memset(&h, 0, sizeof h);
	memcpy(h.magic, TD_MAGIC, TD_MAGIC_LEN);
	h.version = version;
	h.header_size = sizeof h;
	td_disk_section tab[TD_SEC_MAX + 1];
	uint32_t ns = 0;
	uint64_t off = sizeof h;
	for (unsigned id = 1; id < TD_SEC_MAX; id++) {
		td_buf *b = &sb->b[id];
		td_buf_align(b, 8);
		tab[ns].id = id;
		tab[ns].flags = (td_sec_zstd(id) ? TD_SECF_ZSTD : 0) |
				(id == TD_SEC_WORDS && sb->words_split > 0 ? TD_SECF_SPLIT : 0);
		tab[ns].off = off;
		tab[ns].size = b->len;
		tab[ns].sum = XXH3_64bits(b->p, b->len);
		off += b->len;
		ns++;
	}
	if (sb->post.len) {
		td_buf_align(&sb->post, 8);
		tab[ns] = (td_disk_section){ .id = TD_SEC_POSTINGS, .off = off, .size = sb->post.len,
					     .sum = XXH3_64bits(sb->post.p, sb->post.len) };
		off += sb->post.len;
		ns++;
	}
	h.nsections = ns;
	h.sectab_off = off;
	h.sectab_sum = XXH3_64bits(tab, ns * sizeof *tab);
	h.file_size = off + ns * sizeof *tab;
	h.header_sum = XXH3_64bits(&h, offsetof(td_disk_header, header_sum));
	if (td_write_all(fd, &h, sizeof h))
		goto ioerr;
	for (unsigned id = 1; id < TD_SEC_MAX; id++)
		if (td_write_all(fd, sb->b[id].p, sb->b[id].len))
			goto ioerr;
	if (sb->post.len && td_write_all(fd, sb->post.p, sb->post.len))
		goto ioerr;
	if (td_write_all(fd, tab, ns * sizeof *tab) || (sync && fsync(fd)))
		goto ioerr;
	if (close(fd)) {
		fd = -1;
		goto ioerr;
	}
	fd = -1;
	if (rename(tmp, out_path)) {
		err = td_fail(TD_EIO, "%s: %s", out_path, strerror(errno));
		unlink(tmp);
		goto out;
	}
	int dfd = sync ? open(dirname(dcopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	goto out;
ioerr:
	err = td_fail(TD_EIO, "%s: %s", out_path, strerror(errno));
	if (fd >= 0)
		close(fd);
	unlink(tmp);
out:
	free(tmp);
	free(dcopy);
	return err;
}

/* Format 4's WORDS: the sorted words front-coded, each as the length of
 * the prefix it shares with the word before (one byte), the rest of its
 * bytes and '\n' (never inside a word); the reader rebuilds the offsets.
 * words_zstd may reorder them into the split layout (TD_SECF_SPLIT). */
static int front_code(td_buf *out, const tokdict *d, const uint32_t *words, uint64_t W)
{
	const uint8_t *prev = NULL;
	uint32_t plen = 0;
	int err = TD_OK;
	for (uint64_t i = 0; i < W && !err; i++) {
		const uint8_t *p = d->bytes.p + d->off[words[i]];
		uint32_t len = d->wordlen[words[i]], k = 0;
		while (k < len && k < plen && p[k] == prev[k])
			k++;
		uint8_t hdr = (uint8_t)k, nl = '\n';
		if ((err = td_buf_put(out, &hdr, 1)) || (err = td_buf_put(out, p + k, len - k)))
			break;
		err = td_buf_put(out, &nl, 1);
		prev = p;
		plen = len;
	}
	return err;
}

/* A root or rule sequence: entropy-coded tiles (format 4, td_scode.h) or
 * FOR tiles (format 3). */
static int put_syms(const td_writer *w, const uint32_t *v, uint64_t n, uint64_t W, uint64_t T, uint64_t R,
		    unsigned tile_shift, td_buf *out)
{
	if (w->o.format < 4)
		return td_pack_encode32(v, n, out);
	uint64_t alphabet = T + R ? T + R : 1;
	return td_scode_encode(v, n, alphabet, (uint32_t)(2 * W), (uint32_t)T, tile_shift, out);
}

/* What td_writer_finish builds, phase by phase; every array is freed by
 * fin_free (NULL ones too). */
typedef struct fin {
	td_writer *w;
	secbuf sb;
	td_grammar g;
	uint64_t W, S, T;      /* distinct words, other tokens, terminals (2W + S) */
	uint16_t *ulen;        /* byte length of each terminal, by final id */
	uint32_t R;            /* rules */
	uint32_t *rnew;        /* rule in creation order -> its place in the archive */
	uint32_t *rs;          /* the rules' symbols in archive order */
	uint64_t nrsamp;       /* rule offset samples */
	uint32_t ne;           /* entries */
	uint32_t *bfs;         /* entry in breadth-first order -> writer entry */
	uint32_t *nchild;      /* children of each writer entry */
	uint32_t **kids;
	uint64_t *col;         /* scratch column */
	td_post_build pb;      /* postings (w->o.postings): gathered before the grammar */
	struct zq {            /* compresses sections beside the grammar */
		pthread_t t;
		int on;           /* the thread runs (mu, cv initialised) */
		pthread_mutex_t mu;
		pthread_cond_t cv;
		unsigned id[3];   /* posted: WORDS, OTHER, WORD_FREQ */
		unsigned n, done; /* posted, compressed (under mu) */
		int closed, err;
	} zq;
	uint64_t *wfreq;       /* the words' frequencies the tokenizer counted */
	struct sjob {          /* RULE_SYMS, ROOT_SYMS coded on helper threads */
		const td_writer *w;
		const uint32_t *v;
		uint64_t n, W, T, R;
		unsigned shift;
		td_buf *out;
		pthread_t t;
		int on, err;
	} sj[2];
} fin;

/* The two coded sequences are the bulk of the finishing steps after the
 * grammar and need nothing else: each is coded on a thread of its own
 * beside the entries, the index build and the other sections (the same
 * bytes; on this thread when none can be started). */
static void *syms_thread(void *arg)
{
	struct sjob *j = arg;
	j->err = put_syms(j->w, j->v, j->n, j->W, j->T, j->R, j->shift, j->out);
	return NULL;
}

static void syms_start(struct sjob *j)
{
	j->on = pthread_create(&j->t, NULL, syms_thread, j) == 0;
	if (!j->on)
		syms_thread(j);
}

static int syms_join(struct sjob *j)
{
	if (j->on)
		pthread_join(j->t, NULL);
	j->on = 0;
	return j->err;
}

/* The dictionary sections (and the words' frequencies, which the
 * tokenizer counted) are final in fin_dictionary and are the bulk of the
 * zstd work (level 17 of a few MB: a fifth of a build's CPU time, nearly half of
 * a GPU build's): a helper thread compresses each as soon as it is final,
 * while the grammar is built, so one shard's build takes that much less
 * wall time. The bytes
 * are what write_archive would write. */
static void *zstd_sections(void *arg)
{
	fin *f = arg;
	struct zq *q = &f->zq;
	pthread_mutex_lock(&q->mu);
	for (;;) {
		while (q->done == q->n && !q->closed)
			pthread_cond_wait(&q->cv, &q->mu);
		if (q->done == q->n || q->err)
			break;
		unsigned id = q->id[q->done];
		pthread_mutex_unlock(&q->mu);
		size_t raw = f->sb.b[id].len;
		(void)raw;
		td_trace("zstd helper wait");
		int level = sec_zstd_level(id);
#ifdef TD_WRITER_TRACE
		if (getenv("TD_TRACE_ZLEVEL")) /* benchmarks: another level */
			level = atoi(getenv("TD_TRACE_ZLEVEL"));
		/* benchmarks: the helper of a smaller word list below the
		 * others' priority (the largest first) */
		if (id == TD_SEC_WORDS && getenv("TD_TRACE_ZNICE_BELOW") &&
		    raw < (size_t)atoll(getenv("TD_TRACE_ZNICE_BELOW")))
			setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 5);
#endif
		int err = sec_zstd(&f->sb, id, level);
		td_trace("zstd section %u: %zu -> %zu bytes", id, raw, f->sb.b[id].len);
		pthread_mutex_lock(&q->mu);
		if (err)
			q->err = err;
		else
			f->sb.zdone[id] = 1;
		q->done++;
	}
	pthread_mutex_unlock(&q->mu);
	return NULL;
}

/* Section `id` is final: the helper compresses it after those posted
 * before (one at a time: one zstd context, tens of MB at level 17, in
 * memory per shard while the grammar is built). Started at the first
 * post; where no thread can be started, write_archive compresses it. */
static void zstd_post(fin *f, unsigned id)
{
	struct zq *q = &f->zq;
	if (!q->on && q->n == 0) {
		pthread_mutex_init(&q->mu, NULL);
		pthread_cond_init(&q->cv, NULL);
		q->id[q->n++] = id;
		q->on = pthread_create(&q->t, NULL, zstd_sections, f) == 0;
		if (!q->on) {
			pthread_mutex_destroy(&q->mu);
			pthread_cond_destroy(&q->cv);
		}
		return;
	}
	if (!q->on || q->n == sizeof q->id / sizeof *q->id)
		return;
	pthread_mutex_lock(&q->mu);
	q->id[q->n++] = id;
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->mu);
}

static int zstd_join(fin *f)
{
	struct zq *q = &f->zq;
	if (!q->on)
		return TD_OK;
	pthread_mutex_lock(&q->mu);
	q->closed = 1;
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->mu);
	pthread_join(q->t, NULL);
	pthread_mutex_destroy(&q->mu);
	pthread_cond_destroy(&q->cv);
	q->on = 0;
	return q->err ? td_fail(q->err, "zstd of the dictionary sections failed (out of memory)") : TD_OK;
}

static void fin_free(fin *f)
{
	zstd_join(f);
	syms_join(&f->sj[0]);
	syms_join(&f->sj[1]);
	for (unsigned i = 0; i < TD_SEC_MAX; i++)
		td_buf_free(&f->sb.b[i]);
	td_buf_free(&f->sb.post);
	td_post_free(&f->pb);
	td_grammar_free(&f->g);
	if (f->kids)
		for (uint32_t i = 0; i < f->ne; i++)
			free(f->kids[i]);
	free(f->kids);
	free(f->nchild);
	free(f->bfs);
	free(f->ulen);
	free(f->rnew);
	free(f->rs);
	free(f->col);
	free(f->wfreq);
}

/* A symbol of the grammar by its id in the archive (rules renumbered). */
static inline uint32_t remap(const fin *f, uint32_t s)
{
	return s < f->T ? s : (uint32_t)(f->T + f->rnew[s - f->T]);
}

static int nomem(void)
{
	return td_fail(TD_ENOMEM, "out of memory while building the archive");
}

/* Postings are a format 4 section (format 3 readers would not know them). */
static int want_postings(const td_writer *w)
{
	return w->o.postings && w->o.format != 3;
}

/* Phase 1: the distinct words, sorted (word ids), then the other tokens,
 * sorted; their sections; terminal lengths; the sequence rewritten in
 * final ids. The dictionary is freed. */
static int fin_dictionary(fin *f)
{
	td_writer *w = f->w;
	tokdict *d = &w->td;
	uint32_t nt = d->n;
	int err = TD_OK;
	uint32_t *order = malloc((nt + 1) * sizeof *order);
	uint32_t *tokmap = malloc((nt + 1) * sizeof *tokmap);
	uint32_t *words = malloc((nt + 1) * sizeof *words); /* word id -> a token with it */
	uint64_t *off = NULL;
	if (!order || !tokmap || !words) {
		err = nomem();
		goto out;
	}
	uint32_t nw_tok = 0, no = 0;
	for (uint32_t i = 0; i < nt; i++)
		if (d->wordlen[i])
			order[nw_tok++] = i;
	for (uint32_t i = 0; i < nt; i++)
		if (!d->wordlen[i])
			order[nw_tok + no++] = i;
	/* Sort word tokens by their word bytes (then bare before spaced), so
	 * equal words are adjacent. */
	const uint16_t *wl = d->wordlen;
	sorter s_words = { d->bytes.p, d->off, wl };
	if (sort_tokens(&s_words, order, nw_tok)) {
		err = nomem();
		goto out;
	}
	uint64_t W = 0;
	for (uint32_t k = 0; k < nw_tok; k++) {
		uint32_t t = order[k];
		if (k == 0 || cmp_bytes(d->bytes.p + d->off[t], wl[t], d->bytes.p + d->off[words[W - 1]],
					wl[words[W - 1]]))
			words[W++] = t;
		tokmap[t] = (uint32_t)(2 * (W - 1) + (d->len[t] > wl[t]));
	}
	sorter s_other = { d->bytes.p, d->off, d->len };
	if (sort_tokens(&s_other, order + nw_tok, no)) {
		err = nomem();
		goto out;
	}
	uint64_t S = no, T = 2 * W + S;
	if (T >= TD_SPLIT / 2) {
		err = td_fail(TD_ELIMIT, "vocabulary too large");
		goto out;
	}
	for (uint32_t k = 0; k < no; k++)
		tokmap[order[nw_tok + k]] = (uint32_t)(2 * W + k);
	/* dictionary sections */
	if (!(off = malloc((W > S ? W : S) * sizeof *off + 2 * sizeof *off))) {
		err = nomem();
		goto out;
	}
	uint64_t at = 0;
	if (want_postings(w) && !(err = td_post_begin(&f->pb, W, w->nent)))
		for (uint64_t i = 0; i < W && !err; i++)
			err = td_post_word(&f->pb, d->bytes.p + d->off[words[i]], wl[words[i]]);
	if (err)
		goto out;
	f->sb.words_split = -1; /* format 3: plain words */
	if (w->o.format >= 4) {
		int mode = w->o.words_split;
#ifdef TD_WRITER_TRACE
		if (getenv("TD_TRACE_WORDS_SPLIT")) /* benchmarks: a TD_WORDS_* mode */
			mode = atoi(getenv("TD_TRACE_WORDS_SPLIT"));
#endif
		f->sb.words_split = (int8_t)(w->o.format != 4 || mode == TD_WORDS_RECORDS ? -1 : mode == TD_WORDS_SPLIT);
		err = front_code(&f->sb.b[TD_SEC_WORDS], d, words, W);
	} else {
		for (uint64_t i = 0; i < W && !err; i++) {
			off[i] = at;
			err = td_buf_put(&f->sb.b[TD_SEC_WORDS], d->bytes.p + d->off[words[i]], wl[words[i]]);
			at += wl[words[i]];
		}
		off[W] = at;
		if (!err)
			err = td_pack_encode(off, W + 1, &f->sb.b[TD_SEC_WORD_OFF]);
	}
	if (err)
		goto out;
	zstd_post(f, TD_SEC_WORDS); /* the largest: at once */
	at = 0;
	for (uint64_t k = 0; k < S && want_postings(w) && !err; k++) {
		uint32_t t = order[nw_tok + k];
		err = td_post_other(&f->pb, S, k, d->len[t] ? d->bytes.p[d->off[t] + d->len[t] - 1] : ' ');
	}
	if (err)
		goto out;
	for (uint64_t k = 0; k < S; k++) {
		uint32_t t = order[nw_tok + k];
		off[k] = at;
		if ((err = td_buf_put(&f->sb.b[TD_SEC_OTHER], d->bytes.p + d->off[t], d->len[t])))
			goto out;
		at += d->len[t];
	}
	off[S] = at;
	zstd_post(f, TD_SEC_OTHER);
	if ((err = td_pack_encode(off, S + 1, &f->sb.b[TD_SEC_OTHER_OFF])))
		goto out;
	/* terminal byte lengths by final id */
	if (!(f->ulen = malloc((T + 1) * sizeof *f->ulen))) {
		err = nomem();
		goto out;
	}
	for (uint32_t t = 0; t < nt; t++)
		f->ulen[tokmap[t]] = d->len[t];
	for (uint64_t i = 0; i < W; i++) { /* both variants exist as ids */
		f->ulen[2 * i] = wl[words[i]];
		f->ulen[2 * i + 1] = (uint16_t)(wl[words[i]] + 1u);
	}
	for (uint64_t i = 0; i < w->nseq; i++)
		if (w->seq[i] != TD_SPLIT)
			w->seq[i] = tokmap[w->seq[i]];
	/* WORD_FREQ now (the index builder's must agree, fin_indexes), so it
	 * is compressed beside the grammar */
	if (!(f->wfreq = calloc(W + 1, sizeof *f->wfreq))) {
		err = nomem();
		goto out;
	}
	for (uint32_t t = 0; t < nt; t++)
		if (wl[t])
			f->wfreq[tokmap[t] >> 1] += d->freq[t];
	if ((err = td_pack_encode(f->wfreq, W, &f->sb.b[TD_SEC_WORD_FREQ])))
		goto out;
	zstd_post(f, TD_SEC_WORD_FREQ);
	f->W = W;
	f->S = S;
	f->T = T;
	dict_free(d);
out:
	free(order);
	free(tokmap);
	free(words);
	free(off);
	return err;
}

/* Phase 2: the grammar over the sequence (which it consumes). */
static int fin_grammar(fin *f)
{
	td_writer *w = f->w;
	int err = TD_ENOGPU;
	if (w->o.grammar_rounds) {
		/* the rounds elsewhere (the GPU), the finishing steps here */
		uint32_t *pairs = NULL;
		uint64_t n = w->nseq, nrules = 0;
		/* this thread mostly waits meanwhile (for the GPU, or its
		 * turn on it): its core goes to other shards' CPU rounds */
		const td_grammar_cores *c = w->o.grammar_cores;
		int lend = c && c->give && c->reclaim;
		if (lend)
			c->give(c->ctx, 1);
		err = w->o.grammar_rounds(w->o.grammar_ctx, w->seq, &n, (uint32_t)f->T, w->o.max_depth, w->o.progress,
					  w->o.progress_ctx, &pairs, &nrules);
		if (lend)
			c->reclaim(c->ctx, 1);
		td_trace("gpu rounds: %s", err == TD_OK ? "ran" : "declined");
		if (err == TD_OK)
			err = td_grammar_finish(w->seq, n, (uint32_t)f->T, pairs, nrules, &f->g);
		free(pairs);
	}
	if (err == TD_ENOGPU)
		err = td_grammar_build_mt(w->seq, w->nseq, (uint32_t)f->T, w->o.max_depth, w->o.progress,
					  w->o.progress_ctx, w->o.grammar_cores, &f->g);
	free(w->seq);
	w->seq = NULL;
	return err;
}

/* Phase 3: rules ordered by right-hand-side length (the groups), then by
 * expanded byte length, so RULE_LEN ascends inside each group and packs in
 * linear frames (a few bits a rule instead of ~7); creation order stays the
 * topological order the index builder gets (through rnew). Writes the
 * groups and the rule symbols. */
static int fin_rules(fin *f)
{
	const td_grammar *g = &f->g;
	const uint64_t T = f->T;
	uint32_t R = f->R = g->nrules;
	uint64_t shift = f->w->o.sample_shift, step = UINT64_C(1) << shift, nrsamp = 0;
	int err = TD_OK;
	uint32_t *rorder = malloc((R + 1) * sizeof *rorder);
	uint64_t *xlen = malloc((R + 1) * sizeof *xlen);
	f->rnew = malloc((R + 1) * sizeof *f->rnew);
	f->rs = malloc((g->rule_off[R] + 1) * sizeof *f->rs);
	if (!rorder || !xlen || !f->rnew || !f->rs) {
		err = nomem();
		goto out;
	}
	for (uint32_t k = 0; k < R; k++) {
		rorder[k] = k;
		xlen[k] = 0;
		for (uint64_t j = g->rule_off[k]; j < g->rule_off[k + 1]; j++)
			xlen[k] += g->rule_syms[j] < T ? f->ulen[g->rule_syms[j]] : xlen[g->rule_syms[j] - T];
	}
	/* by length, then expanded length, then id: one 64-bit key where both
	 * fit (always, short of a rule of 2^24 symbols), sorted stably from
	 * id order; else the comparison */
	int keyed = 1, sorted = 0;
	for (uint32_t k = 0; k < R && keyed; k++)
		keyed = g->rule_off[k + 1] - g->rule_off[k] < (UINT64_C(1) << 24) && xlen[k] < (UINT64_C(1) << 40);
	skey *rk = keyed ? malloc((R + 1) * sizeof *rk) : NULL;
	if (rk) {
		for (uint32_t k = 0; k < R; k++)
			rk[k] = (skey){ (g->rule_off[k + 1] - g->rule_off[k]) << 40 | xlen[k], k };
		if (td_sort_keys(rk, R) == TD_OK) {
			for (uint32_t k = 0; k < R; k++)
				rorder[k] = rk[k].id;
			sorted = 1;
		}
		free(rk);
	}
	g_rlen = g->rule_off;
	g_xlen = xlen;
	if (!sorted)
		qsort(rorder, R, sizeof *rorder, cmp_rulelen);
	for (uint32_t k = 0; k < R; k++)
		f->rnew[rorder[k]] = k;
	uint64_t at = 0, prevlen = UINT64_MAX;
	td_disk_group grp;
	for (uint32_t k = 0; k < R && !err; k++) {
		uint32_t r = rorder[k];
		uint64_t len = g->rule_off[r + 1] - g->rule_off[r];
		if (len != prevlen) {
			memset(&grp, 0, sizeof grp);
			grp.first_rule = k;
			grp.len = (uint32_t)len;
			grp.first_sym = at;
			grp.first_sample = len > step ? nrsamp : UINT64_MAX;
			err = td_buf_put(&f->sb.b[TD_SEC_RULE_GROUPS], &grp, sizeof grp);
			prevlen = len;
		}
		if (len > step)
			nrsamp += (len + step - 1) >> shift;
		for (uint64_t j = g->rule_off[r]; j < g->rule_off[r + 1]; j++)
			f->rs[at++] = remap(f, g->rule_syms[j]);
	}
	f->nrsamp = nrsamp;
	if (!err)
	if (!err) {
		f->sj[0] = (struct sjob){ .w = f->w, .v = f->rs, .n = at, .W = f->W, .T = T, .R = R,
					.shift = TD_RULE_TILE_SHIFT, .out = &f->sb.b[TD_SEC_RULE_SYMS] };
		syms_start(&f->sj[0]);
	}
out:
	free(rorder);
	free(xlen);
	return err;
}

/* Phase 4: entries in breadth-first order, children sorted by name; the
 * entry table's sections. */
static int fin_entries(fin *f)
{
	const td_writer *w = f->w;
	uint32_t ne = f->ne = w->nent;
	int err = TD_OK;
	uint32_t *newidx = malloc(((uint64_t)ne + 1) * sizeof *newidx);
	f->nchild = calloc(ne, sizeof *f->nchild);
	f->kids = calloc(ne, sizeof *f->kids);
	f->bfs = malloc(ne * sizeof *f->bfs);
	f->col = malloc(((uint64_t)ne + 1) * sizeof *f->col);
	if (!newidx || !f->nchild || !f->kids || !f->bfs || !f->col) {
		err = nomem();
		goto out;
	}
	uint32_t *nchild = f->nchild, **kids = f->kids, *bfs = f->bfs;
	uint64_t *col = f->col;
	for (uint32_t i = 1; i < ne; i++)
		nchild[w->ent[i].parent]++;
	for (uint32_t i = 0; i < ne; i++)
		if (nchild[i] && !(kids[i] = malloc(nchild[i] * sizeof **kids))) {
			err = nomem();
			goto out;
		}
	memset(nchild, 0, ne * sizeof *nchild);
	for (uint32_t i = 1; i < ne; i++) {
		uint32_t p = w->ent[i].parent;
		kids[p][nchild[p]++] = i;
	}
	g_ents = w->ent;
	uint32_t head = 0, tail = 0;
	bfs[tail++] = 0;
	while (head < tail) {
		uint32_t e = bfs[head++];
		if (nchild[e] > 1)
			qsort(kids[e], nchild[e], sizeof **kids, cmp_name);
		for (uint32_t k = 0; k < nchild[e]; k++)
			bfs[tail++] = kids[e][k];
	}
	for (uint32_t k = 0; k < ne; k++)
		newidx[bfs[k]] = k;
	/* names */
	uint64_t at = 0;
	for (uint32_t k = 0; k < ne; k++) {
		const char *p = w->ent[bfs[k]].path, *nm = strrchr(p, '/');
		nm = nm ? nm + 1 : p;
		col[k] = at;
		if ((err = td_buf_put(&f->sb.b[TD_SEC_NAMES], nm, strlen(nm))))
			goto out;
		at += strlen(nm);
	}
	col[ne] = at;
	if ((err = td_pack_encode(col, ne + 1, &f->sb.b[TD_SEC_E_NAMEOFF])))
		goto out;
#define COLUMN(sec, expr)                                                 \
	do {                                                              \
		for (uint32_t k = 0; k < ne; k++) {                       \
			const went *E = &w->ent[bfs[k]];                  \
			(void)E;                                          \
			col[k] = (expr);                                  \
		}                                                         \
		if ((err = td_pack_encode(col, ne, &f->sb.b[sec])))       \
			goto out;                                         \
	} while (0)
	COLUMN(TD_SEC_E_PARENT, k ? newidx[E->parent] : 0);
	COLUMN(TD_SEC_E_MODE, E->mode);
	COLUMN(TD_SEC_E_MTIME, (uint64_t)(E->mtime + TD_MTIME_BIAS));
	COLUMN(TD_SEC_E_MTIMENS, E->nsec);
	COLUMN(TD_SEC_E_SIZE, E->type == ENT_DIR ? 0 : E->size);
#undef COLUMN
	/* children ranges: breadth-first, so the children of the k-th entry
	 * follow those of entries before it */
	at = 1;
	for (uint32_t k = 0; k < ne; k++) {
		col[k] = at;
		at += w->ent[bfs[k]].type == ENT_DIR ? nchild[bfs[k]] : 0;
	}
	col[ne] = at;
	err = td_pack_encode(col, ne + 1, &f->sb.b[TD_SEC_E_CHILD]);
out:
	free(newidx);
	return err;
}

/* Phase 5: the root sequence in entry order, the derived indexes (the CPU
 * builder or the caller's), checked against the tokenizer's word counts,
 * and their sections; the meta section. */
static int fin_indexes(fin *f)
{
	const td_writer *w = f->w;
	const td_grammar *g = &f->g;
	const uint32_t ne = f->ne, R = f->R, *bfs = f->bfs;
	const uint64_t W = f->W, T = f->T, shift = w->o.sample_shift;
	uint64_t nroot = g->file_root[g->nfiles];
	uint64_t nsamp = td_index_nroot_samples(nroot, (unsigned)shift);
	int err = TD_OK;
	uint32_t *root = malloc((nroot + 1) * sizeof *root);
	uint64_t *eroot = malloc(((uint64_t)ne + 1) * sizeof *eroot);
	uint64_t *elong = malloc(((uint64_t)ne + 1) * sizeof *elong);
	uint8_t *isfile = malloc((uint64_t)ne + 1);
	uint32_t *topo = malloc(((uint64_t)R + 1) * sizeof *topo);
	/* one block for the builder's outputs */
	uint64_t nix = (uint64_t)R + f->nrsamp + nsamp + (ne + 1) + W + ne;
	uint64_t *ix = malloc((nix + 1) * sizeof *ix);
	if (!root || !eroot || !elong || !isfile || !topo || !ix) {
		err = nomem();
		goto out;
	}
	uint64_t ri = 0;
	for (uint32_t k = 0; k < ne; k++) {
		const went *E = &w->ent[bfs[k]];
		eroot[k] = ri;
		isfile[k] = E->type == ENT_FILE;
		elong[k] = E->nlong;
		if (E->type == ENT_DIR)
			continue;
		for (uint64_t j = g->file_root[E->seqidx]; j < g->file_root[E->seqidx + 1]; j++)
			root[ri++] = remap(f, g->root[j]);
	}
	eroot[ne] = ri;
	for (uint32_t k = 0; k < R; k++)
		topo[k] = f->rnew[k];
	td_buf *sec = f->sb.b;
	td_index_in in = {
		.nwords = W, .nterm = T, .term_len = f->ulen,
		.nrules = R, .nrulesyms = g->rule_off[R], .rule_syms = f->rs,
		.ngroups = sec[TD_SEC_RULE_GROUPS].len / sizeof(td_disk_group),
		.groups = (const td_disk_group *)sec[TD_SEC_RULE_GROUPS].p,
		.nrulesamples = f->nrsamp, .topo = topo, .depth = g->depth,
		.nroot = ri, .root = root, .nentries = ne, .e_root = eroot,
		.e_isfile = isfile, .e_longwords = elong, .sample_shift = (unsigned)shift,
	};
	td_index_out io;
	io.rule_len = ix;
	io.rule_samples = io.rule_len + R;
	io.root_samples = io.rule_samples + f->nrsamp;
	io.e_gstart = io.root_samples + nsamp;
	io.word_freq = io.e_gstart + ne + 1;
	io.e_nwords = io.word_freq + W;
	/* one coder at a time (each holds tables of the whole alphabet: two
	 * at once raised a -j 2 build's peak), each beside this thread */
	if ((err = syms_join(&f->sj[0])))
		goto out;
	f->sj[1] = (struct sjob){ .w = w, .v = root, .n = ri, .W = W, .T = T, .R = R,
				.shift = TD_ROOT_TILE_SHIFT, .out = &f->sb.b[TD_SEC_ROOT_SYMS] };
	syms_start(&f->sj[1]);
	if (w->o.progress)
		w->o.progress(w->o.progress_ctx, "index", 0, 1);
	err = w->o.index_build ? w->o.index_build(w->o.index_ctx, &in, &io) : td_index_build_cpu(NULL, &in, &io);
	if (err)
		goto out;
	td_trace("index build");
	/* the tokenizer counted every file's words: a builder that disagrees
	 * is broken, and its archive would be wrong */
	for (uint32_t k = 0; k < ne; k++)
		if (isfile[k] && io.e_nwords[k] != w->ent[bfs[k]].nwords) {
			err = td_fail(TD_ECORRUPT, "index builder: '%s' has %llu words, the tokenizer counted %llu",
				      w->ent[bfs[k]].path, (unsigned long long)io.e_nwords[k],
				      (unsigned long long)w->ent[bfs[k]].nwords);
			goto out;
		}
	/* and each word's frequency (WORD_FREQ is fin_dictionary's) */
	if (W && memcmp(io.word_freq, f->wfreq, W * sizeof *f->wfreq)) {
		err = td_fail(TD_ECORRUPT, "index builder: word frequencies differ from the tokenizer's");
		goto out;
	}
	if ((err = td_pack_encode(io.rule_len, R, &sec[TD_SEC_RULE_LEN])) ||
	    (err = td_pack_encode(io.rule_samples, f->nrsamp, &sec[TD_SEC_RULE_SAMPLES])) ||
	    (err = td_pack_encode(eroot, ne + 1, &sec[TD_SEC_E_ROOT])) ||
	    (err = td_pack_encode(io.e_gstart, ne + 1, &sec[TD_SEC_E_GSTART])) ||
	    (err = td_pack_encode(io.root_samples, nsamp, &sec[TD_SEC_ROOT_SAMPLES])) ||
	    (err = td_pack_encode(io.e_nwords, ne, &sec[TD_SEC_E_NWORDS])))
		goto out;
	td_trace("index + root encode");
	td_disk_meta m;
	memset(&m, 0, sizeof m);
	m.nentries = ne;
	m.nwords = W;
	m.nother = f->S;
	m.nrules = R;
	m.nrulesyms = g->rule_off[R];
	m.ngroups = sec[TD_SEC_RULE_GROUPS].len / sizeof(td_disk_group);
	m.nrulesamples = sec[TD_SEC_RULE_SAMPLES].len ? td_pack_load64(sec[TD_SEC_RULE_SAMPLES].p) : 0;
	m.nroot = ri;
	m.sample_shift = shift;
	m.nsamples = nsamp;
	m.max_depth = g->depth;
	m.total_bytes = io.e_gstart[ne];
	for (uint32_t k = 0; k < ne; k++)
		m.total_words += io.e_nwords[k];
	m.build_time = w->o.build_time ? (uint64_t)w->o.build_time : (uint64_t)time(NULL);
	m.nlongwords = w->nlong;
	err = td_buf_put(&sec[TD_SEC_META], &m, sizeof m);
out:;
	int serr = syms_join(&f->sj[1]); /* it reads root */
	if (!err)
		err = serr;
	free(root);
	free(eroot);
	free(elong);
	free(isfile);
	free(topo);
	free(ix);
	return err;
}

/* Postings (w->o.postings), phase 1: each file's words and counts, from
 * the token sequence in final ids, before the grammar consumes it. */
static int fin_postings_collect(fin *f)
{
	const td_writer *w = f->w;
	int err = TD_OK;
	for (uint32_t i = 0; i < w->nent && !err; i++) {
		const went *E = &w->ent[i];
		if (E->type != ENT_FILE)
			continue;
		uint64_t n = 0;
		while (E->seq0 + n < w->nseq && w->seq[E->seq0 + n] != TD_SPLIT)
			n++;
		err = td_post_file(&f->pb, i, w->seq + E->seq0, n);
	}
	td_trace("postings collected: %llu pairs", (unsigned long long)f->pb.npair / 2);
	return err ? nomem() : TD_OK;
}

/* Phase 2, once entries have their numbers: the section. */
static int fin_postings_encode(fin *f)
{
	uint32_t *ent = malloc(((uint64_t)f->ne + 1) * sizeof *ent);
	if (!ent)
		return nomem();
	for (uint32_t k = 0; k < f->ne; k++)
		ent[k] = f->w->ent[f->bfs[k]].type == ENT_FILE ? f->bfs[k] : UINT32_MAX;
	int err = td_post_encode(&f->pb, ent, f->ne, &f->sb.post);
	free(ent);
	td_post_free(&f->pb);
	td_trace("postings encoded: %llu bytes", (unsigned long long)f->sb.post.len);
	return err ? nomem() : TD_OK;
}

int td_writer_finish(td_writer *w, const char *out_path)
{
	fin f;
	memset(&f, 0, sizeof f);
	f.w = w;
	int err = TD_OK;
	if (w->in_file) {
		err = td_fail(TD_EINVAL, "a file is still open in the writer");
		goto out;
	}
	if (w->o.defer_tokenize) {
		td_trace("read (deferred): %llu bytes", (unsigned long long)w->bytes_in);
		if ((err = tokenize_deferred(w)))
			goto out;
	}
	td_trace("read+tokenize: %llu bytes, %llu tokens, %u distinct, %u threads", (unsigned long long)w->bytes_in,
		 (unsigned long long)w->nseq, w->td.n, w->tok_threads ? w->tok_threads : 1);
	if ((err = fin_dictionary(&f)))
		goto out;
	td_trace("dictionary: %llu words, %llu others", (unsigned long long)f.W, (unsigned long long)f.S);
	if (want_postings(w) && (err = fin_postings_collect(&f)))
		goto out;
	if ((err = fin_grammar(&f)))
		goto out;
	td_trace("grammar total: %u rules, %llu root", f.g.nrules, (unsigned long long)f.g.file_root[f.g.nfiles]);
	if ((err = fin_rules(&f)))
		goto out;
	td_trace("rule layout + rule symbols encoded");
	if ((err = fin_entries(&f)))
		goto out;
	td_trace("entries");
	if (want_postings(w) && (err = fin_postings_encode(&f)))
		goto out;
	if ((err = fin_indexes(&f)))
		goto out;
	if (w->o.progress)
		w->o.progress(w->o.progress_ctx, "write", 1, 1);
	if (!(err = syms_join(&f.sj[0])) && !(err = zstd_join(&f)))
		err = write_archive(&f.sb, w->o.format, out_path, !w->o.temp_output);
	td_trace("zstd sections + write");
out:
	fin_free(&f);
	td_writer_abort(w);
	return err;
}
