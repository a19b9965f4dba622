/* xattr_value: analytics values from the engine, one `tadoc` output line at a time (see xattr_value.h). */
#include "xattr_value.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "td_cancel.h"
#include "td_err.h"
#include "td_format.h"

/* A line under construction, and the value it goes to: a part (l), or,
 * with all, the whole list (every line kept while it stays within limit). */
typedef struct vctx {
	td_fs_lines l;
	char *b;
	size_t n, cap;
	int err;                  /* -ENOMEM while building a line */
	td_fs_xlist *all;
	uint64_t limit, scap;
	size_t tcap;
	int over;                 /* the list outgrew limit */
} vctx;

/* Returned to the engine to stop a walk once the value is full. */
#define STOP 1

static int put(vctx *v, const char *s, size_t n)
{
	if (v->n + n > v->cap) {
		size_t cap = v->cap ? v->cap : 256;
		while (cap < v->n + n)
			cap *= 2;
		char *b = realloc(v->b, cap);
		if (!b) {
			v->err = -ENOMEM;
			return -1;
		}
		v->b = b;
		v->cap = cap;
	}
	memcpy(v->b + v->n, s, n);
	v->n += n;
	return 0;
}

static int put_u64(vctx *v, uint64_t x)
{
	char d[20];
	return put(v, d, fs_u64dec(x, d));
}

/* Keep the line built so far in the whole list. */
static int keep(vctx *v)
{
	td_fs_xlist *a = v->all;
	if (a->len + v->n > v->limit) {
		v->over = 1;
		return STOP;
	}
	if (a->n + 2 > v->scap) {
		uint64_t cap = v->scap ? 2 * v->scap : 1024;
		uint64_t *st = realloc(a->start, cap * sizeof *st);
		if (!st)
			goto nomem;
		a->start = st;
		v->scap = cap;
	}
	if (a->len + v->n > v->tcap) {
		size_t cap = v->tcap ? v->tcap : 65536;
		while (cap < a->len + v->n)
			cap *= 2;
		char *t = realloc(a->text, cap);
		if (!t)
			goto nomem;
		a->text = t;
		v->tcap = cap;
	}
	a->start[a->n++] = a->len;
	memcpy(a->text + a->len, v->b, v->n);
	a->len += v->n;
	a->start[a->n] = a->len;
	return 0;
nomem:
	v->err = -ENOMEM;
	return STOP;
}

/* Room in the whole list for `lines` more lines of `bytes` in all (an
 * estimate: keep grows past it), so that it is not copied as it grows and
 * its pages are touched once. Nothing when the list has lines already or
 * memory is short (keep then grows it as before). */
static void reserve(vctx *v, uint64_t lines, size_t bytes)
{
	td_fs_xlist *a = v->all;
	if (!a || a->n || lines > (SIZE_MAX / 2) / sizeof *a->start)
		return;
	bytes = bytes < v->limit ? bytes : (size_t)v->limit;
	if (lines + 2 > v->scap) {
		uint64_t *st = realloc(a->start, (lines + 2) * sizeof *st);
		if (st)
			a->start = st, v->scap = lines + 2;
	}
	if (bytes > v->tcap) {
		char *t = realloc(a->text, bytes);
		if (t)
			a->text = t, v->tcap = bytes;
	}
}

/* The line built so far goes to the value. A query interrupted (its
 * caller's signal, the daemon stopping: td_fs_cancel_begin) ends here
 * too, for a long list's lines come after the engine's walk. */
static int line_end(vctx *v)
{
	if (!v->err && td_cancel_requested())
		v->err = -EINTR;
	if (v->err || put(v, "\n", 1))
		return STOP;
	int full = v->all ? keep(v) : td_fs_lines_add(&v->l, v->b, v->n);
	v->n = 0;
	return full ? STOP : 0;
}

/* COUNT<TAB>WORD */
static int word_line(void *ctx, const char *word, size_t len, uint64_t count)
{
	vctx *v = ctx;
	if (v->l.i < v->l.first) /* a line before the part: counted only */
		return td_fs_lines_add(&v->l, "", 0) ? STOP : 0;
	if (put_u64(v, count) || put(v, "\t", 1) || put(v, word, len))
		return STOP;
	return line_end(v);
}

/* COUNT<TAB>W1 W2 ... */
static int ngram_line(void *ctx, const char *const *words, const size_t *lens, unsigned nwords, uint64_t count)
{
	vctx *v = ctx;
	if (v->l.i < v->l.first)
		return td_fs_lines_add(&v->l, "", 0) ? STOP : 0;
	if (put_u64(v, count) || put(v, "\t", 1))
		return STOP;
	for (unsigned i = 0; i < nwords; i++)
		if ((i && put(v, " ", 1)) || put(v, words[i], lens[i]))
			return STOP;
	return line_end(v);
}

/* DIST<TAB>COUNT<TAB>WORD */
static int fuzzy_line(void *ctx, unsigned dist, const char *word, size_t len, uint64_t count)
{
	vctx *v = ctx;
	if (v->l.i < v->l.first)
		return td_fs_lines_add(&v->l, "", 0) ? STOP : 0;
	if (put_u64(v, dist) || put(v, "\t", 1) || put_u64(v, count) || put(v, "\t", 1) || put(v, word, len))
		return STOP;
	return line_end(v);
}

/* COUNT<TAB>PATH for each ranked file: over the archive, a block of files'
 * parents and names at once and each directory's path once (a file the
 * block stopped at through src->path, whose error says why); else each
 * path through src->path. */
static int files_lines(vctx *v, const td_fs_xsrc *src, const td_file_count *fc, size_t n)
{
	enum { BLOCK = 256 };
	char *path = malloc(TD_MAXPATH + 2), *esc = malloc(2 * (TD_MAXPATH + 2));
	const int fast = src->archive_paths;
	td_dir_paths m = { 0 };
	const int merr = fast ? td_dir_paths_init(&m, src->a) : TD_OK;
	td_entry *ent = fast ? malloc(BLOCK * sizeof *ent) : NULL;
	td_name_ref *ref = fast ? malloc(BLOCK * sizeof *ref) : NULL;
	int rc = path && esc && (!fast || (!merr && ent && ref)) ? 0 : -ENOMEM;
	size_t b = SIZE_MAX, good = 0; /* ref[j] is file b + j's, j < good (b: none yet) */
	if (n <= SIZE_MAX / 96)
		reserve(v, n, n * 96); /* a count, a tab, a path: ~43 bytes a line in linuxdoc */
	for (size_t i = 0; rc == 0 && i < n && !v->l.full; i++) {
		if (v->l.i < v->l.first) {
			td_fs_lines_add(&v->l, "", 0);
			continue;
		}
		if (fast && (i < b || i >= b + BLOCK)) {
			const size_t k = n - i < BLOCK ? n - i : BLOCK;
			for (size_t j = 0; j < k; j++)
				ent[j] = fc[i + j].file;
			b = i;
			(void)td_archive_names(src->a, ent, k, ref, &good);
		}
		if (put_u64(v, fc[i].count) || put(v, "\t", 1))
			break;
		const char *pre;
		size_t pn;
		const td_name_ref *r = fast && i - b < good ? &ref[i - b] : NULL;
		int err = r ? td_dir_path(src->a, &m, r->parent, &pre, &pn) : TD_OK;
		if (err) {
			rc = -td_err_errno(err);
			break;
		}
		if (r) {
			if (put(v, pre, pn) ||
			    (r->esc ? put(v, esc, td_path_escape(r->name, r->len, esc)) : put(v, r->name, r->len)))
				break;
		} else {
			int pl = src->path(src->pctx, fc[i].file, path, TD_MAXPATH + 2);
			if (pl < 0) {
				rc = -td_err_errno(pl);
				break;
			}
			if (put(v, esc, td_path_escape(path, (size_t)pl, esc)))
				break;
		}
		line_end(v);
	}
	td_dir_paths_free(&m);
	free(ent);
	free(ref);
	free(path);
	free(esc);
	return rc;
}

/* The lines of an answer computed already (src->given), into v. */
static int given_lines(const td_fs_xsrc *src, const td_fs_xname *x, vctx *v, int *err)
{
	int rc = 0, e = TD_OK;
	if (x->kind == TD_FS_XTOP || x->kind == TD_FS_XVECTOR) {
		const td_words_req *q = src->given;
		if (!(e = q->err))
			for (size_t i = 0; i < q->nwords && !e; i++)
				e = word_line(v, q->bytes + q->words[i].off, q->words[i].len, q->words[i].count);
	} else if (x->kind == TD_FS_XNGRAMS) {
		const td_ngram_req *q = src->given; /* each run's words joined by spaces */
		if (!(e = q->err))
			for (size_t i = 0; i < q->ngrams && !e; i++)
				e = word_line(v, q->bytes + q->grams[i].off, q->grams[i].len, q->grams[i].count);
	} else if (x->kind == TD_FS_XFUZZY) {
		const td_fuzzy_req *q = src->given;
		if (!(e = q->err))
			for (size_t i = 0; i < q->nhits && !e; i++)
				e = fuzzy_line(v, q->hits[i].dist, q->words + q->hits[i].off, q->hits[i].len,
					       q->hits[i].count);
	} else if (x->kind == TD_FS_XFILES) {
		const td_files_req *q = src->given;
		if (!(e = q->err))
			rc = files_lines(v, src, q->files, q->nfiles);
	} else {
		rc = -EINVAL;
	}
	*err = e;
	return rc;
}

/* Run the engine for list name x, its lines into v. 0 or -errno. */
static int compute(const td_fs_xsrc *src, const td_fs_xname *x, vctx *v)
{
	const td_archive *a = src->a;
	const td_fileset *s = src->set;
	int err = TD_OK, rc = 0;
	switch (src->given ? -1 : (int)x->kind) {
	case -1:
		rc = given_lines(src, x, v, &err);
		break;
	case TD_FS_XTOP:
		err = s ? td_set_top_words(a, s, x->n, word_line, v) : td_top_words(a, src->scope, x->n, word_line, v);
		break;
	case TD_FS_XVECTOR:
		if (s) {
			err = td_set_term_vector(a, s, word_line, v);
		} else {
			/* a later part (first > 0; the whole list: 0): the engine
			 * leaves the lines before it out (a stored root vector
			 * without decoding them) */
			uint64_t skipped = 0;
			v->l.i = v->l.first;
			err = td_term_vector_from(a, src->scope, v->l.first, word_line, v, &skipped);
			if (skipped < v->l.first)
				v->l.i = skipped; /* past the last line */
		}
		break;
	case TD_FS_XNGRAMS:
		err = s ? td_set_ngrams(a, s, x->len, x->n, ngram_line, v)
			: td_ngrams(a, src->scope, x->len, x->n, ngram_line, v);
		break;
	case TD_FS_XFUZZY:
		err = s ? td_set_fuzzy(a, s, x->word, x->wlen, (unsigned)x->n, fuzzy_line, v)
			: td_fuzzy(a, x->word, x->wlen, (unsigned)x->n, src->scope, 0, fuzzy_line, v);
		break;
	case TD_FS_XFILES: {
		td_file_count *fc = NULL;
		size_t n = 0;
		err = s ? td_set_phrase_files(a, s, x->word, x->wlen, src->path, src->pctx, &fc, &n)
			: td_phrase_files(a, x->word, x->wlen, src->scope, &fc, &n);
		if (!err)
			rc = files_lines(v, src, fc, n);
		free(fc);
		break;
	}
	default:
		rc = -ENODATA;
		break;
	}
	if (err != TD_OK && err != STOP)
		rc = -td_err_errno(err);
	return rc ? rc : v->err;
}

int td_fs_xattr_value(const td_fs_xsrc *src, const td_fs_xname *x, const char *name, int is_dir, char **val,
		      size_t *len)
{
	*val = NULL;
	*len = 0;
	const td_archive *a = src->a;
	const td_fileset *s = src->set;
	int err = TD_OK, rc = 0;
	if (x->kind == TD_FS_XCOUNT || x->kind == TD_FS_XSEARCH) {
		if (!s)
			return -EINVAL; /* xattr.c answers these over a scope */
		if (x->kind == TD_FS_XCOUNT) {
			uint64_t n = 0;
			err = td_set_phrase_count(a, s, x->word, x->wlen, &n);
			return err ? -td_err_errno(err) : fs_value_u64(n, val, len);
		}
		td_hits h = { 0 };
		err = td_set_phrase_search(a, s, x->word, x->wlen, &h);
		rc = err ? -td_err_errno(err)
			 : td_fs_xattr_search_value(&h, x->num, x->word, x->wlen, is_dir ? src->path : NULL, src->pctx,
						    val, len);
		td_hits_free(&h);
		return rc;
	}
	vctx v = { 0 };
	if (td_fs_lines_init(&v.l, name, x->blen, x->num))
		return -ENOMEM;
	rc = compute(src, x, &v);
	if (!rc)
		rc = td_fs_lines_end(&v.l, val, len);
	free(v.l.out);
	free(v.b);
	return rc;
}

int td_fs_xattr_list_all(const td_fs_xsrc *src, const td_fs_xname *x, uint64_t limit, td_fs_xlist *l)
{
	memset(l, 0, sizeof *l);
	if (x->kind < TD_FS_XTOP)
		return -EINVAL;
	vctx v = { .all = l, .limit = limit };
	int rc = compute(src, x, &v);
	free(v.b);
	if (!rc && !l->start) /* no line */
		rc = (l->start = calloc(1, sizeof *l->start)) ? 0 : -ENOMEM;
	if (rc || v.over) {
		td_fs_xlist_free(l);
		return rc ? rc : 1;
	}
	return 0;
}

void td_fs_xlist_free(td_fs_xlist *l)
{
	free(l->text);
	free(l->start);
	memset(l, 0, sizeof *l);
}

int td_fs_xlist_part(const td_fs_xlist *l, const char *name, size_t blen, uint64_t first, char **val, size_t *len)
{
	td_fs_lines p;
	if (td_fs_lines_init(&p, name, blen, first))
		return -ENOMEM;
	p.i = first < l->n ? first : l->n;
	for (uint64_t i = p.i; i < l->n && !p.full; i++)
		td_fs_lines_add(&p, l->text + l->start[i], (size_t)(l->start[i + 1] - l->start[i]));
	int rc = td_fs_lines_end(&p, val, len);
	free(p.out);
	return rc;
}
