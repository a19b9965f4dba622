/* td_extract: seek by lengths, then stream terminals from the grammar. */
#include "td_extract.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "td_rcache.h"
#include "td_walk.h"

static int corrupt(const td_walk *w, const char *what)
{
	return td_fail(TD_ECORRUPT, "entry %u: %s", w->e, what);
}

/* Load terminal s as the current token. */
static int load_term(td_walk *w, uint64_t s)
{
	int space;
	const uint8_t *p = td_term_bytes(w->a, s, &w->tok_len, &space);
	if (!p)
		return corrupt(w, "token bytes out of bounds");
	w->tok = p;
	w->tok_total = w->tok_len + (uint32_t)space;
	w->tok_off = 0;
	return TD_OK;
}

static int push_rule(td_walk *w, uint64_t s)
{
	uint64_t start;
	uint32_t len;
	if (w->depth >= TD_MAXDEPTH || td_rule_rhs(w->a, s - w->a->T, &start, &len))
		return corrupt(w, "rule nesting or rule table broken");
	w->st[w->depth].at = start;
	w->st[w->depth].end = start + len;
	w->depth++;
	return TD_OK;
}

/* Make rule s's cached expansion the current token, from byte `off`.
 * Returns 1 when the cache had (or could build) it. */
static int use_cached(td_walk *w, uint64_t s, uint64_t off)
{
	const uint8_t *p = td_rcache_get(w->a, s - w->a->T);
	if (!p)
		return 0;
	w->tok = p;
	w->tok_len = w->tok_total = (uint32_t)td_sym_len(w->a, s);
	w->tok_off = (uint32_t)off;
	return 1;
}

/* Advance to the next terminal in expansion order; 1 at end of the entry. */
static int next_term(td_walk *w)
{
	const td_archive *a = w->a;
	for (;;) {
		uint64_t s;
		if (w->depth) {
			if (w->st[w->depth - 1].at == w->st[w->depth - 1].end) {
				w->depth--;
				continue;
			}
			s = td_rule_sym(a, w->st[w->depth - 1].at++);
		} else {
			if (w->root_i >= w->root_end)
				return 1;
			s = td_pack_get(&a->root_syms, w->root_i++);
		}
		if (s < a->T)
			return load_term(w, s);
		if (s >= a->T + a->R)
			return corrupt(w, "symbol out of range");
		if (use_cached(w, s, 0))
			return TD_OK;
		int err = push_rule(w, s);
		if (err)
			return err;
	}
}

int td_walk_seek(td_walk *w, const td_archive *a, td_entry e, uint64_t off)
{
	memset(w, 0, offsetof(td_walk, st));
	td_flat_build(a);
	w->a = a;
	w->e = e;
	if (e >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no entry %u", e);
	if (S_ISDIR(td_pack_get(&a->e_mode, e)))
		return TD_EISDIR;
	w->size = td_pack_get(&a->e_size, e);
	uint64_t rs = td_pack_get(&a->e_root, e), re = td_pack_get(&a->e_root, e + 1);
	uint64_t g0 = td_pack_get(&a->e_gstart, e);
	if (rs > re || re > a->meta.nroot)
		return corrupt(w, "root range out of bounds");
	w->root_end = re;
	w->pos = off;
	if (off >= w->size) {
		w->root_i = re;
		w->valid = 1;
		return TD_OK;
	}
	/* Last sample at or before the target, not before the file's start. */
	uint64_t target = g0 + off;
	uint64_t lo = rs >> a->shift, hi = ((re - 1) >> a->shift) + 1;
	if (hi > a->root_samples.n)
		return corrupt(w, "root samples out of bounds");
	while (hi - lo > 1) {
		uint64_t mid = (lo + hi) / 2;
		if (td_pack_get(&a->root_samples, mid) <= target)
			lo = mid;
		else
			hi = mid;
	}
	uint64_t i = lo << a->shift, cum;
	if (i < rs) {
		i = rs;
		cum = g0;
	} else {
		cum = td_pack_get(&a->root_samples, lo);
	}
	/* Walk root elements to the one holding the target. */
	uint64_t s, l;
	for (;;) {
		if (i >= re)
			return corrupt(w, "file shorter than its size");
		s = td_pack_get(&a->root_syms, i);
		if (s >= a->T + a->R)
			return corrupt(w, "symbol out of range");
		l = td_sym_len(a, s);
		if (cum + l > target)
			break;
		cum += l;
		i++;
	}
	w->root_i = i + 1;
	uint64_t rel = target - cum;
	/* Descend, stopping at a rule whose expansion is cached. */
	while (s >= a->T) {
		if (use_cached(w, s, rel)) {
			w->valid = 1;
			return TD_OK;
		}
		int err = push_rule(w, s);
		if (err)
			return err;
		/* Long rule: jump to the sampled block holding rel. */
		uint64_t first, ns = td_rule_samples(a, s - a->T, (uint32_t)(w->st[w->depth - 1].end -
									      w->st[w->depth - 1].at), &first);
		if (ns) {
			uint64_t lo = 0, hi = ns;
			while (hi - lo > 1) {
				uint64_t mid = (lo + hi) / 2;
				if (td_pack_get(&a->rule_samples, first + mid) <= rel)
					lo = mid;
				else
					hi = mid;
			}
			uint64_t base = td_pack_get(&a->rule_samples, first + lo);
			if (base > rel)
				return corrupt(w, "rule samples out of order");
			rel -= base;
			w->st[w->depth - 1].at += lo << a->shift;
		}
		for (;;) {
			uint64_t *at = &w->st[w->depth - 1].at;
			if (*at >= w->st[w->depth - 1].end)
				return corrupt(w, "rule shorter than its length");
			s = td_rule_sym(a, (*at)++);
			if (s >= a->T + a->R)
				return corrupt(w, "symbol out of range");
			l = td_sym_len(a, s);
			if (rel < l)
				break;
			rel -= l;
		}
	}
	int err = load_term(w, s);
	if (err)
		return err;
	if (rel >= w->tok_total)
		return corrupt(w, "token shorter than expected");
	w->tok_off = (uint32_t)rel;
	w->valid = 1;
	return TD_OK;
}

/* memcpy for the short copies of most tokens, inlined without over-reading:
 * two possibly overlapping fixed-size moves cover any length in a range. */
static inline void copy_bytes(uint8_t *d, const uint8_t *s, size_t n)
{
	if (n >= 8 && n <= 16) {
		uint64_t x, y;
		memcpy(&x, s, 8);
		memcpy(&y, s + n - 8, 8);
		memcpy(d, &x, 8);
		memcpy(d + n - 8, &y, 8);
	} else if (n >= 4 && n < 8) {
		uint32_t x, y;
		memcpy(&x, s, 4);
		memcpy(&y, s + n - 4, 4);
		memcpy(d, &x, 4);
		memcpy(d + n - 4, &y, 4);
	} else if (n < 4) {
		for (size_t i = 0; i < n; i++)
			d[i] = s[i];
	} else {
		memcpy(d, s, n);
	}
}

int td_walk_read(td_walk *w, uint8_t *buf, size_t len, size_t *got)
{
	size_t n = 0;
	if (w->pos + len > w->size)
		len = w->pos < w->size ? (size_t)(w->size - w->pos) : 0;
	while (n < len) {
		if (w->tok_off == w->tok_total) {
			int r = next_term(w);
			if (r) {
				*got = n;
				w->pos += n;
				w->valid = 0;
				return r < 0 ? r : corrupt(w, "file shorter than its size");
			}
		}
		uint32_t have = w->tok_total - w->tok_off;
		size_t k = len - n < have ? len - n : have;
		uint32_t from = w->tok_off;
		if (from < w->tok_len) {
			size_t c = w->tok_len - from < k ? w->tok_len - from : k;
			copy_bytes(buf + n, w->tok + from, c);
			if (c < k)
				buf[n + c] = ' ';
		} else {
			buf[n] = ' ';
		}
		w->tok_off += (uint32_t)k;
		n += k;
	}
	w->pos += n;
	*got = n;
	return TD_OK;
}

int td_extract(const td_archive *a, td_entry e, uint64_t off, void *buf, size_t len, size_t *got)
{
	td_walk w;
	*got = 0;
	int err = td_walk_seek(&w, a, e, off);
	if (err)
		return err;
	return td_walk_read(&w, buf, len, got);
}

struct td_cursor {
	td_walk w;
	const td_archive *a;
};

td_cursor *td_cursor_new(const td_archive *a)
{
	td_cursor *c = calloc(1, sizeof *c);
	if (c)
		c->a = a;
	return c;
}

void td_cursor_free(td_cursor *c)
{
	free(c);
}

int td_cursor_read(td_cursor *c, td_entry e, uint64_t off, void *buf, size_t len, size_t *got)
{
	*got = 0;
	if (!c->w.valid || c->w.e != e || c->w.pos != off) {
		int err = td_walk_seek(&c->w, c->a, e, off);
		if (err)
			return err;
	}
	int err = td_walk_read(&c->w, buf, len, got);
	if (err)
		c->w.valid = 0;
	return err;
}
