/* td_edit_words: exact word totals, counts and search over edited files (see td_edit.h). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "td_edit_int.h"
#include "td_format.h"
#include "td_tokenize.h"

/* A word is a maximal run of word characters, of any length: counts,
 * search and word totals all match td_count and td_stat.nwords. */
static int is_token_word(size_t len)
{
	return len > 0;
}

/* An ASCII byte that is not a word character: a complete character in any
 * context, so no word and no UTF-8 sequence crosses it. */
static int is_sep(uint8_t b)
{
	if (b >= 0x80)
		return 0;
	return !((b >= '0' && b <= '9') || (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z') || b == '_');
}

/* Bytes of sequential scanning that one base run of an edited file is
 * worth (its boundary look-ups re-seek): below that, scan the whole file. */
#define TD_EDIT_RUN_COST (UINT64_C(64) << 10)

/* ---------- readers ---------- */

typedef struct reader {
	const td_edit *ed;        /* set: read the node's current text */
	td_node node;
	const td_archive *a;      /* else: read base entry e */
	td_entry e;
	td_cursor *cur;           /* may be NULL */
} reader;

static int rd(const reader *r, uint64_t off, void *buf, size_t len)
{
	size_t got = 0;
	int err = r->ed ? td_edit_read(r->ed, r->node, off, buf, len, &got, r->cur)
		  : r->cur ? td_cursor_read(r->cur, r->e, off, buf, len, &got)
			   : td_extract(r->a, r->e, off, buf, len, &got);
	if (err)
		return err;
	if (got != len)
		return td_fail(TD_ECORRUPT, "short read while counting words");
	return TD_OK;
}

/* ---------- what to do with each word ---------- */

typedef struct sink {
	const char *w;            /* NULL: count every word */
	size_t wlen;
	uint64_t n;
	td_hits *hits;            /* non-NULL: record matches */
	td_node file;
	int err;
} sink;

static int hit_push(td_hits *h, td_node file, uint64_t off)
{
	if (h->n == h->cap) {
		size_t n = h->cap ? h->cap * 2 : 16;
		td_hit *v = realloc(h->v, n * sizeof(*v));
		if (!v)
			return TD_ENOMEM;
		h->v = v;
		h->cap = n;
	}
	h->v[h->n++] = (td_hit){ file, off };
	return TD_OK;
}

static int emit(sink *s, uint64_t off, const uint8_t *w, size_t len)
{
	if (!s->w && !is_token_word(len))
		return TD_OK;
	if (s->w && (len != s->wlen || memcmp(w, s->w, len) != 0))
		return TD_OK;
	s->n++;
	return s->hits ? hit_push(s->hits, s->file, off) : TD_OK;
}

/* Tokenize bytes [start, end) of r on their own and feed the words to s.
 * Exact for the whole text when start and end are file ends or positions
 * next to a separator byte (is_sep). */
static int scan(const reader *r, uint64_t start, uint64_t end, sink *s)
{
	if (start >= end)
		return TD_OK;
	size_t cap = 65536;
	uint8_t *buf = malloc(cap);
	if (!buf)
		return TD_ENOMEM;
	uint64_t boff = start; /* file offset of buf[0] */
	size_t have = 0;
	int err = TD_OK;
	for (;;) {
		uint64_t want = end - (boff + have);
		if (want > cap - have)
			want = cap - have;
		if (want) {
			if ((err = rd(r, boff + have, buf + have, (size_t)want)))
				break;
			have += (size_t)want;
		}
		int final = boff + have == end;
		size_t pos = 0;
		while (pos < have) {
			/* A character needs up to 4 bytes to be recognised. */
			if (!final && have - pos < 4)
				break;
			unsigned k = td_word_char(buf + pos, have - pos);
			if (!k) {
				uint32_t cp;
				unsigned d = td_utf8_decode(buf + pos, have - pos, &cp);
				pos += d ? d : 1;
				continue;
			}
			size_t i = pos;
			int need = 0;
			for (;;) {
				if (i == have || (!final && have - i < 4)) {
					need = !final;
					break;
				}
				k = td_word_char(buf + i, have - i);
				if (!k)
					break;
				i += k;
			}
			if (need)
				break;
			if ((err = emit(s, boff + pos, buf + pos, i - pos)))
				goto out;
			pos = i;
		}
		if (final && pos >= have)
			break;
		memmove(buf, buf + pos, have - pos);
		boff += pos;
		have -= pos;
		if (have == cap) {
			uint8_t *nb = realloc(buf, cap * 2);
			if (!nb) {
				err = TD_ENOMEM;
				break;
			}
			buf = nb;
			cap *= 2;
		}
	}
out:
	free(buf);
	return err;
}

/* ---------- interiors of base runs ---------- */

typedef struct ival {
	uint64_t t0;              /* file offset where the base run starts */
	uint64_t a;               /* base offset of the run start */
	uint64_t xl, xr;          /* interior, base offsets, a <= xl < xr */
	td_entry e;
} ival;

/* Position of the first (fwd) or last separator byte in base [a, b):
 * returns 1 and sets *pos when there is one, 0 otherwise (or on a read
 * error, then *err is set). */
static int find_sep(const reader *base, uint64_t a, uint64_t b, int fwd, uint64_t *pos, int *err)
{
	uint8_t buf[4096];
	const reader r = *base;
	/* Text has a separator every few bytes: look at a little first. */
	size_t step = 64;
	if (fwd) {
		for (uint64_t p = a; p < b; step = sizeof buf) {
			size_t n = (size_t)(b - p < step ? b - p : step);
			if ((*err = rd(&r, p, buf, n)))
				return 0;
			for (size_t i = 0; i < n; i++)
				if (is_sep(buf[i])) {
					*pos = p + i;
					return 1;
				}
			p += n;
		}
	} else {
		for (uint64_t p = b; p > a; step = sizeof buf) {
			size_t n = (size_t)(p - a < step ? p - a : step);
			if ((*err = rd(&r, p - n, buf, n)))
				return 0;
			for (size_t i = n; i-- > 0;)
				if (is_sep(buf[i])) {
					*pos = p - n + i;
					return 1;
				}
			p -= n;
		}
	}
	return 0;
}

/* Interiors of the maximal base runs of t, in file order. */
static int interiors(const tnode *t, const reader *base, ival **out, size_t *nout)
{
	ival *v = NULL;
	size_t n = 0, cap = 0;
	int err = TD_OK;
	for (size_t k = 0; k < t->npc;) {
		const td_piece *p = &t->pc[k];
		if (p->kind != TD_PIECE_BASE) {
			k++;
			continue;
		}
		uint64_t a = p->src, b = p->src + p->len, t0 = p->off;
		size_t m = k + 1;
		while (m < t->npc && t->pc[m].kind == TD_PIECE_BASE && t->pc[m].entry == p->entry &&
		       t->pc[m].src == b) {
			b += t->pc[m].len;
			m++;
		}
		k = m;
		uint64_t l, rr;
		reader br = *base;
		br.e = p->entry;
		if (!find_sep(&br, a, b, 1, &l, &err)) {
			if (err)
				break;
			continue;
		}
		if (!find_sep(&br, l, b, 0, &rr, &err)) {
			if (err)
				break;
			continue;
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			ival *nv = realloc(v, cap * sizeof(*nv));
			if (!nv) {
				err = TD_ENOMEM;
				break;
			}
			v = nv;
		}
		v[n++] = (ival){ .t0 = t0, .a = a, .xl = l, .xr = rr + 1, .e = p->entry };
	}
	if (err) {
		free(v);
		return err;
	}
	*out = v;
	*nout = n;
	return TD_OK;
}

/* ---------- one file ---------- */

static size_t lower_bound(const td_hits *h, uint64_t off)
{
	size_t lo = 0, hi = h->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (h->v[mid].off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Words of an edited file into s: all of them (s->w == NULL, total only)
 * or the matches of s->w. */
static int file_words(const td_edit *ed, td_node node, const tnode *t, sink *s)
{
	td_cursor *c1 = td_cursor_new(ed->a), *c2 = td_cursor_new(ed->a);
	reader cur = { .ed = ed, .node = node, .cur = c1 };
	reader base = { .a = ed->a, .e = t->base, .cur = c2 };
	ival *iv = NULL;
	size_t niv = 0;
	int err = TD_OK;
	if (!c1 || !c2) {
		err = TD_ENOMEM;
		goto out;
	}
	/* Each base run costs a few re-seeks (descents from the root); with
	 * many runs a sequential scan of the whole file is cheaper. */
	size_t nruns = 0;
	for (size_t k = 0; k < t->npc; k++)
		nruns += t->pc[k].kind == TD_PIECE_BASE &&
			 (k == 0 || !(t->pc[k - 1].kind == TD_PIECE_BASE && t->pc[k - 1].entry == t->pc[k].entry &&
				      t->pc[k - 1].src + t->pc[k - 1].len == t->pc[k].src));
	int windows = ed->words_strategy == TD_WORDS_WINDOWS ||
		      (ed->words_strategy == TD_WORDS_AUTO && (uint64_t)nruns * TD_EDIT_RUN_COST < t->size);
	if (windows && (err = interiors(t, &base, &iv, &niv)))
		goto out;
	/* All base pieces of a file come from its own entry, in order; check it
	 * rather than trust it, and fall back to a full scan otherwise. */
	for (size_t i = 0; i < niv; i++)
		if (iv[i].e != t->base || (i && iv[i - 1].xr > iv[i].xl))
			niv = 0;
	if (niv == 0) {
		err = scan(&cur, 0, t->size, s);
		goto out;
	}
	td_entry e = t->base;
	if (!s->w) {
		/* Total: base total - base words outside the interiors + words of
		 * the current windows, unless the base outside is the bigger job. */
		td_stat bs;
		if ((err = td_archive_stat(ed->a, e, &bs)))
			goto out;
		uint64_t outside = iv[0].xl + (bs.size - iv[niv - 1].xr);
		for (size_t i = 1; i < niv; i++)
			outside += iv[i].xl - iv[i - 1].xr;
		if (outside > t->size && ed->words_strategy != TD_WORDS_WINDOWS) {
			err = scan(&cur, 0, t->size, s);
			goto out;
		}
		sink bo = { 0 };
		uint64_t prev = 0;
		for (size_t i = 0; i < niv && !err; i++) {
			err = scan(&base, prev, iv[i].xl, &bo);
			prev = iv[i].xr;
		}
		if (!err)
			err = scan(&base, prev, bs.size, &bo);
		uint64_t tp = 0;
		for (size_t i = 0; i < niv && !err; i++) {
			err = scan(&cur, tp, iv[i].t0 + (iv[i].xl - iv[i].a), s);
			tp = iv[i].t0 + (iv[i].xr - iv[i].a);
		}
		if (!err)
			err = scan(&cur, tp, t->size, s);
		if (!err) {
			if (bo.n > bs.nwords) {
				err = td_fail(TD_ECORRUPT, "entry %u: word total below its words", (unsigned)e);
				goto out;
			}
			s->n += bs.nwords - bo.n;
		}
		goto out;
	}
	/* Matches: archive hits inside the interiors, re-tokenized windows. */
	td_hits bh = { 0 };
	if ((err = td_search(ed->a, s->w, s->wlen, e, &bh)))
		goto out;
	uint64_t tp = 0;
	for (size_t i = 0; i < niv && !err; i++) {
		err = scan(&cur, tp, iv[i].t0 + (iv[i].xl - iv[i].a), s);
		for (size_t h = lower_bound(&bh, iv[i].xl); !err && h < bh.n && bh.v[h].off < iv[i].xr; h++) {
			s->n++;
			if (s->hits)
				err = hit_push(s->hits, node, iv[i].t0 + (bh.v[h].off - iv[i].a));
		}
		tp = iv[i].t0 + (iv[i].xr - iv[i].a);
	}
	if (!err)
		err = scan(&cur, tp, t->size, s);
	td_hits_free(&bh);
out:
	free(iv);
	td_cursor_free(c1);
	td_cursor_free(c2);
	return err;
}

/* ---------- scopes ---------- */

static int tree(const td_edit *ed, td_node node, sink *s, unsigned depth)
{
	td_stat st;
	const tnode *t;
	int err = td_edit_attr(ed, node, &st, &t);
	if (err)
		return err;
	if (depth > TD_MAXPATH)
		return TD_ECORRUPT;
	if (S_ISLNK(st.mode))
		return TD_OK;
	td_entry base = t ? t->base : node;
	int clean = !t || (!t->dirty && base != TD_NOENTRY);
	if (S_ISREG(st.mode)) {
		if (t && t->content_edited) {
			s->file = node;
			return file_words(ed, node, t, s);
		}
		if (!s->w) {
			s->n += st.nwords;
			return TD_OK;
		}
		clean = 1; /* unchanged text: the archive answers */
	}
	if (clean && s->w) {
		/* The archive's answer for this unchanged subtree. */
		if (s->hits) {
			size_t before = s->hits->n;
			err = td_search(ed->a, s->w, s->wlen, base, s->hits);
			if (!err)
				s->n += s->hits->n - before;
			return err;
		}
		uint64_t c = 0;
		err = td_count(ed->a, s->w, s->wlen, base, &c);
		s->n += c;
		return err;
	}
	if (S_ISREG(st.mode))
		return TD_OK;
	uint64_t cookie = 0;
	for (;;) {
		td_node child;
		const char *nm;
		size_t nl;
		err = td_edit_dir_next(ed, node, &cookie, &child, &nm, &nl);
		if (err == TD_ENOENT)
			return TD_OK;
		if (err || (err = tree(ed, child, s, depth + 1)))
			return err;
	}
}

int td_edit_nwords(const td_edit *ed, td_node node, uint64_t *n)
{
	if (!td_edit_valid(ed, node))
		return TD_EINVAL;
	sink s = { 0 };
	int err = tree(ed, node, &s, 0);
	*n = s.n;
	return err;
}

int td_edit_count(const td_edit *ed, const char *word, size_t len, td_node scope, uint64_t *count)
{
	*count = 0;
	if (!td_edit_valid(ed, scope))
		return TD_EINVAL;
	if (!td_is_word(word, len))
		return TD_ENOTWORD;
	sink s = { .w = word, .wlen = len };
	int err = tree(ed, scope, &s, 0);
	*count = s.n;
	return err;
}

static int hit_cmp(const void *x, const void *y)
{
	const td_hit *a = x, *b = y;
	if (a->file != b->file)
		return a->file < b->file ? -1 : 1;
	return a->off < b->off ? -1 : a->off > b->off;
}

int td_edit_search(const td_edit *ed, const char *word, size_t len, td_node scope, td_hits *out)
{
	if (!td_edit_valid(ed, scope))
		return TD_EINVAL;
	if (!td_is_word(word, len))
		return TD_ENOTWORD;
	size_t before = out->n;
	sink s = { .w = word, .wlen = len, .hits = out };
	int err = tree(ed, scope, &s, 0);
	if (!err && out->n - before > 1)
		qsort(out->v + before, out->n - before, sizeof(td_hit), hit_cmp);
	return err;
}
