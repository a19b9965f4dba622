/* td_extract: seek by lengths, then stream terminals from the grammar. */
#include "td_extract.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "td_rcache.h"
#include "td_shard.h"
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

int td_walk_seek(td_walk *w, const td_archive *a, td_entry e, uint64_t off)
{
	memset(w, 0, offsetof(td_walk, st));
	w->a = a;
	w->e = e;
	if (e >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no entry %u", e);
	int err = td_data_check(a);
	if (err)
		return err;
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
		w->root_i = w->root_fill = re;
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
		s = td_root_sym(a, i);
		if (s >= a->T + a->R)
			return corrupt(w, "symbol out of range");
		l = td_sym_len(a, s);
		if (cum + l > target)
			break;
		cum += l;
		i++;
	}
	w->root_i = w->root_fill = i + 1;
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
	err = load_term(w, s);
	if (err)
		return err;
	if (rel >= w->tok_total)
		return corrupt(w, "token shorter than expected");
	w->tok_off = (uint32_t)rel;
	w->valid = 1;
	return TD_OK;
}

/* Top up the ring of decoded root symbols, TD_WALK_FILL at a time, until
 * more than `keep` (<= TD_WALK_RING - 2 * TD_WALK_FILL) lie ahead or the range
 * ends. */
static void ring_refill(td_walk *w, uint64_t keep)
{
	td_syms_poll(w->a); /* a long read may make decoding the sequences whole pay */
	while (w->root_fill < w->root_end && w->root_fill - w->root_i <= keep) {
		uint64_t k = TD_WALK_FILL - (w->root_fill & (TD_WALK_FILL - 1));
		if (k > w->root_end - w->root_fill)
			k = w->root_end - w->root_fill;
		td_root_range(w->a, w->root_fill, k, &w->ring[w->root_fill % TD_WALK_RING]);
		w->root_fill += k;
	}
}

/* Next root symbol (caller checked root_i < root_end). */
static inline uint64_t root_next(td_walk *w)
{
	ring_refill(w, TD_WALK_FILL);
	return w->ring[w->root_i++ % TD_WALK_RING];
}

/* The bulk of a long read: root symbols that are terminals or cached rules
 * that fit, while TD_SYM_PAD bytes of room remain, with the loop state in
 * locals (a store through buf may alias anything in memory, so fields read
 * through w or a would be reloaded after every token). One symbol table
 * look-up each (td_sym_entry): most are one 32-byte move, with no branch
 * on what kind of symbol it is. Returns the new n; leaves any other symbol
 * to the caller. The current token must be used up. */
static size_t stream_root(td_walk *w, uint8_t *buf, size_t n, size_t len)
{
	const td_archive *a = w->a;
	if (!td_fsym_ready(a) || len < TD_SYM_PAD)
		return n;
	const uint64_t TR = a->T + a->R;
	const size_t stop = len - TD_SYM_PAD;
	const int ahead = n + TD_WALK_AHEAD_MIN <= stop; /* a short read uses few of the symbols ahead */
	uint64_t i = w->root_i;
	while (n <= stop) {
		w->root_i = i;
		ring_refill(w, ahead ? TD_WALK_RING - 2 * TD_WALK_FILL : TD_WALK_FILL);
		const uint64_t end = w->root_fill;
		if (i == end)
			break;
		/* A long read stops TD_WALK_AHEAD short of the decoded end while
		 * more root symbols follow, so the ring is topped up first and
		 * every symbol gets its prefetch (a refill leaves more than
		 * TD_WALK_RING - 2 * TD_WALK_FILL ahead, so this goes on). */
		const uint64_t lim = ahead && end < w->root_end && end - i > TD_WALK_AHEAD ? end - TD_WALK_AHEAD : end;
		for (; i < lim && n <= stop; i++) {
			if (ahead && i + TD_WALK_AHEAD < end) {
				/* the entry TD_WALK_AHEAD symbols on, and the bytes
				 * of the one half as far (its entry fetched by now) */
				uint64_t s2 = w->ring[(i + TD_WALK_AHEAD) % TD_WALK_RING];
				uint64_t s3 = w->ring[(i + TD_WALK_AHEAD / 2) % TD_WALK_RING];
				if (s2 < TR)
					__builtin_prefetch(&a->f_sym[s2]);
				if (s3 < TR)
					__builtin_prefetch(td_sym_eptr(td_sym_entry(a, s3)));
			}
			uint64_t s = w->ring[i % TD_WALK_RING];
			if (s >= TR)
				goto out;
			uint64_t e = td_sym_entry(a, s);
			uint32_t l = td_sym_elen(e), sp = td_sym_espace(e);
			const uint8_t *p = td_sym_eptr(e);
			if (l - 1 < TD_SYM_PAD - 1) {
				/* 1..31 bytes: n + l < len */
				memcpy(buf + n, p, TD_SYM_PAD); /* readable: see TD_SYM_PAD */
				buf[n + l] = ' ';        /* its space, or overwritten next */
				n += l + sp;
				continue;
			}
			if (l == 0 && s >= a->T) {
				/* a rule not cached yet: expanded here (and cached) */
				uint64_t rl = a->f_rule_len[s - a->T];
				if (rl > len - n || td_rcache_expand(a, s - a->T, buf + n, len - n))
					goto out; /* no room, or the caller reports the damage */
				n += rl;
				continue;
			}
			if (l == 0 || l + sp > len - n)
				goto out; /* a damaged token, or no room */
			if (l < 2 * TD_SYM_PAD && 2 * TD_SYM_PAD <= len - n)
				memcpy(buf + n, p, 2 * TD_SYM_PAD); /* fixed moves, not a call */
			else
				memcpy(buf + n, p, l);
			if (sp)
				buf[n + l] = ' ';
			n += l + sp;
		}
	}
out:
	w->root_i = i;
	return n;
}

/* Copy up to len bytes of the current token from its offset; the count. */
static size_t take(td_walk *w, uint8_t *buf, size_t len)
{
	uint32_t have = w->tok_total - w->tok_off;
	size_t k = len < have ? len : have;
	uint32_t from = w->tok_off;
	if (from < w->tok_len) {
		size_t c = w->tok_len - from < k ? w->tok_len - from : k;
		td_copy(buf, w->tok + from, c);
		if (c < k)
			buf[c] = ' ';
	} else if (k) {
		buf[0] = ' ';
	}
	w->tok_off += (uint32_t)k;
	return k;
}

/* Stream symbols: each one that fits the rest of the buffer is written
 * whole (a terminal's bytes, a rule's cached or recursively expanded
 * bytes) with no walker state; only the one crossing the buffer's end is
 * entered (rule frames, or a partly consumed token). */
int td_walk_read(td_walk *w, uint8_t *buf, size_t len, size_t *got)
{
	const td_archive *a = w->a;
	size_t n = 0;
	int err = TD_OK;
	/* not pos + len > size: that wraps for an offset near 2^64 (then len
	 * stayed unclamped and a walk seeked past the end read garbage) */
	if (w->pos >= w->size)
		len = 0;
	else if (len > w->size - w->pos)
		len = (size_t)(w->size - w->pos);
	if (!atomic_load_explicit(&a->flat, memory_order_acquire))
		td_flat_after(a, len);
	if (len && w->tok_off < w->tok_total)
		n = take(w, buf, len);
	while (n < len) {
		uint64_t s;
		if (w->depth) {
			if (w->st[w->depth - 1].at == w->st[w->depth - 1].end) {
				w->depth--;
				continue;
			}
			s = td_rule_sym(a, w->st[w->depth - 1].at++);
		} else {
			n = stream_root(w, buf, n, len);
			if (n == len)
				break;
			if (w->root_i >= w->root_end) {
				err = corrupt(w, "file shorter than its size");
				break;
			}
			s = root_next(w);
		}
		size_t room = len - n;
		if (td_fsym_ready(a) && s < a->T + a->R) {
			/* a terminal, or a rule cached already: one look-up */
			uint64_t e = td_sym_entry(a, s);
			if (td_sym_elen(e) && td_sym_elen(e) + td_sym_espace(e) <= room) {
				n += td_sym_write(buf + n, room, e);
				continue;
			}
		}
		if (s < a->T) {
			uint32_t tl;
			int space;
			const uint8_t *p = td_term_bytes(a, s, &tl, &space);
			if (!p) {
				err = corrupt(w, "token bytes out of bounds");
				break;
			}
			if (room > 16 && tl <= 16 && td_load16_ok(a, p)) {
				/* Fixed 16-byte move; the byte after the token is
				 * its space or is overwritten by what follows. */
				memcpy(buf + n, p, 16);
				buf[n + tl] = ' ';
				n += tl + (unsigned)space;
				continue;
			}
			if (tl + (unsigned)space <= room) {
				td_copy(buf + n, p, tl);
				if (space)
					buf[n + tl] = ' ';
				n += tl + (unsigned)space;
				continue;
			}
			w->tok = p;
			w->tok_len = tl;
			w->tok_total = tl + (uint32_t)space;
			w->tok_off = 0;
			n += take(w, buf + n, room);
			continue;
		}
		if (s >= a->T + a->R) {
			err = corrupt(w, "symbol out of range");
			break;
		}
		uint64_t l = td_sym_len(a, s);
		if (l <= room) {
			const uint8_t *p = td_rcache_peek(a, s - a->T);
			if (p && l <= TD_RCACHE_PAD && room >= TD_RCACHE_PAD) {
				memcpy(buf + n, p, TD_RCACHE_PAD); /* readable: see TD_RCACHE_PAD */
				n += l;
				continue;
			}
			if (p) {
				memcpy(buf + n, p, l);
			} else if (td_rcache_expand(a, s - a->T, buf + n, room)) {
				err = corrupt(w, "rule lengths do not add up");
				break;
			}
			n += l;
			continue;
		}
		if (use_cached(w, s, 0)) {
			n += take(w, buf + n, room);
			continue;
		}
		err = push_rule(w, s);
		if (err)
			break;
	}
	w->pos += n;
	*got = n;
	if (err)
		w->valid = 0;
	return err;
}

int td_extract(const td_archive *a, td_entry e, uint64_t off, void *buf, size_t len, size_t *got)
{
	td_walk w;
	*got = 0;
	if (td_sharded(a))
		return td_shard_read(a, e, off, buf, len, got, NULL);
	int err = td_walk_seek(&w, a, e, off);
	if (err)
		return err;
	return td_walk_read(&w, buf, len, got);
}

struct td_cursor {
	td_walk w;
	const td_archive *a;
	td_shard_cur sh;          /* version 5: the shard and piece read last */
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
	if (c)
		td_cursor_free(c->sh.sub);
	free(c);
}

void td_cursor_bind(td_cursor *c, const td_archive *a)
{
	c->a = a;
	c->w.valid = 0;
}

int td_cursor_read(td_cursor *c, td_entry e, uint64_t off, void *buf, size_t len, size_t *got)
{
	*got = 0;
	if (td_sharded(c->a))
		return td_shard_read(c->a, e, off, buf, len, got, &c->sh);
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

int td_archive_readlink(const td_archive *a, td_entry e, char *buf, size_t cap, size_t *len)
{
	td_stat st;
	int err = td_archive_stat(a, e, &st);
	if (err)
		return err;
	if (!S_ISLNK(st.mode))
		return td_fail(TD_EINVAL, "entry %u is not a symlink", e);
	char path[TD_MAXPATH + 1];
	if (st.size == 0 || st.size > TD_MAXPATH)
		return td_fail(TD_ECORRUPT, "entry %u '%s': symlink target of %llu bytes", e,
			       td_archive_path(a, e, path, sizeof path) >= 0 ? path : "?", (unsigned long long)st.size);
	if (cap <= st.size)
		return td_fail(TD_EINVAL, "symlink target of %llu bytes does not fit", (unsigned long long)st.size);
	size_t got = 0;
	if ((err = td_extract(a, e, 0, buf, (size_t)st.size, &got)))
		return err;
	if (got != st.size || memchr(buf, '\0', got))
		return td_fail(TD_ECORRUPT, "entry %u '%s': symlink target %s", e,
			       td_archive_path(a, e, path, sizeof path) >= 0 ? path : "?",
			       got != st.size ? "shorter than its size" : "holds a NUL byte");
	buf[got] = '\0';
	*len = got;
	return TD_OK;
}
