/* td_query: count and search whole words by walking only rules that hold them. */
#include "td_query_int.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "td_archive_int.h"
#include "td_extract.h"
#include "td_rcache.h"
#include "td_shard.h"
#include "td_tokenize.h"

int td_is_word(const char *word, size_t len)
{
	const uint8_t *s = (const uint8_t *)word;
	if (len == 0)
		return 0;
	size_t i = 0;
	while (i < len) {
		unsigned k = td_word_char(s + i, len - i);
		if (!k)
			return 0;
		i += k;
	}
	return 1;
}

int64_t td_word_id(const td_archive *a, const char *word, size_t len)
{
	return td_sharded(a) ? -1 : td_find_word(a, word, len);
}

int64_t td_find_word(const td_archive *a, const char *word, size_t len)
{
	uint64_t lo = 0, hi = a->W;
	const uint8_t *words = td_words(a);
	if (!words)
		return -2;
	if (len > TD_MAXTOK)
		return -1;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		uint64_t o0 = td_pack_get(&a->word_off, mid), o1 = td_pack_get(&a->word_off, mid + 1);
		if (o0 > o1 || o1 > a->bytes_size[TD_SEC_WORDS])
			return -1;
		size_t ml = (size_t)(o1 - o0);
		int c = memcmp(words + o0, word, ml < len ? ml : len);
		if (c == 0)
			c = (ml > len) - (ml < len);
		if (c == 0)
			return (int64_t)mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* Per-query memo: rule -> occurrences of the word in its expansion. A
 * query over a large scope keeps them in a flat array (one slot per rule,
 * no hashing); a small one in a hash table that grows with the rules it
 * meets (a flat array would touch a page per rule met). */
typedef struct memo {
	uint64_t *key;  /* rule + 1; 0 = empty */
	uint64_t *val;
	uint64_t mask, used;
} memo;

/* Flat memo value: 0 = not known yet, FLAT_BIG = in the hash table (too
 * large for 32 bits), else occurrences + 1. */
#define FLAT_BIG UINT32_MAX

typedef struct qctx {
	const td_archive *a;
	uint64_t w;        /* word id */
	uint32_t *flat;    /* R slots, or NULL: everything in m */
	const uint64_t *hold; /* with the index: a bit per rule that holds the word */
	const uint64_t *roots; /* with the index: a bit per root position to visit */
	const char *word;  /* the query, for words stored as pieces (scan_long) */
	size_t len;
	memo m;
	int err;
	td_hits *out;
} qctx;

static uint64_t hmix(uint64_t k)
{
	k *= UINT64_C(0x9E3779B97F4A7C15);
	return k ^ (k >> 29);
}

static int memo_grow(memo *m)
{
	uint64_t cap = m->mask ? (m->mask + 1) * 2 : 1024;
	uint64_t *k = calloc(cap, sizeof *k), *v = malloc(cap * sizeof *v);
	if (!k || !v) {
		free(k);
		free(v);
		return TD_ENOMEM;
	}
	for (uint64_t i = 0; m->mask && i <= m->mask; i++)
		if (m->key[i]) {
			uint64_t h = hmix(m->key[i]) & (cap - 1);
			while (k[h])
				h = (h + 1) & (cap - 1);
			k[h] = m->key[i];
			v[h] = m->val[i];
		}
	free(m->key);
	free(m->val);
	m->key = k;
	m->val = v;
	m->mask = cap - 1;
	return TD_OK;
}

/* Rule r's slot in m: its own, or the empty one it would take. */
static uint64_t memo_at(const memo *m, uint64_t r)
{
	uint64_t h = hmix(r + 1) & m->mask;
	while (m->key[h] && m->key[h] != r + 1)
		h = (h + 1) & m->mask;
	return h;
}

/* The memoised count of rule r into *v: 1, or 0 when not known yet. */
static int memo_get(const qctx *q, uint64_t r, uint64_t *v)
{
	*v = 0;
	if (q->flat && q->flat[r] != FLAT_BIG) {
		*v = q->flat[r] ? (uint64_t)q->flat[r] - 1 : 0;
		return q->flat[r] != 0;
	}
	if (!q->m.mask)
		return 0;
	uint64_t h = memo_at(&q->m, r);
	if (!q->m.key[h])
		return 0;
	*v = q->m.val[h];
	return 1;
}

static void memo_put(qctx *q, uint64_t r, uint64_t v)
{
	if (q->flat && v < FLAT_BIG - 1) {
		q->flat[r] = (uint32_t)(v + 1);
		return;
	}
	if (q->m.used * 2 >= q->m.mask && memo_grow(&q->m)) {
		q->err = TD_ENOMEM;
		return;
	}
	if (q->flat)
		q->flat[r] = FLAT_BIG;
	uint64_t h = memo_at(&q->m, r);
	if (!q->m.key[h]) {
		q->m.key[h] = r + 1;
		q->m.used++;
	}
	q->m.val[h] = v;
}

/* Occurrences of the word in the expansion of symbol s. */
static uint64_t count_sym(qctx *q, uint64_t s, unsigned depth)
{
	const td_archive *a = q->a;
	if (s < a->T)
		return s < 2 * a->W && (s >> 1) == q->w;
	if (s >= a->T + a->R || depth > TD_MAXDEPTH) {
		q->err = td_fail(TD_ECORRUPT, "symbol out of range or rules nest too deep");
		return 0;
	}
	uint64_t sum;
	if (q->hold && !(q->hold[(s - a->T) >> 6] >> ((s - a->T) & 63) & 1))
		return 0;
	if (memo_get(q, s - a->T, &sum))
		return sum;
	uint64_t start;
	uint32_t len;
	if (td_rule_rhs(a, s - a->T, &start, &len)) {
		q->err = td_fail(TD_ECORRUPT, "rule table broken");
		return 0;
	}
	sum = 0;
	for (uint32_t i = 0; i < len && !q->err; i++)
		sum += count_sym(q, td_rule_sym(a, start + i), depth + 1);
	memo_put(q, s - a->T, sum);
	return sum;
}

static int is_file(const td_archive *a, td_entry e)
{
	return S_ISREG(td_pack_get(&a->e_mode, e));
}

int td_hits_push(td_hits *h, td_entry e, uint64_t off)
{
	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 64;
		td_hit *v = realloc(h->v, cap * sizeof *v);
		if (!v)
			return TD_ENOMEM;
		h->v = v;
		h->cap = cap;
	}
	h->v[h->n].file = e;
	h->v[h->n].off = off;
	h->n++;
	return TD_OK;
}

/* Report occurrences inside symbol s starting at file offset `base`. */
static void search_sym(qctx *q, td_entry e, uint64_t s, uint64_t base, unsigned depth)
{
	const td_archive *a = q->a;
	if (s < a->T) {
		if (s < 2 * a->W && (s >> 1) == q->w && td_hits_push(q->out, e, base))
			q->err = TD_ENOMEM;
		return;
	}
	if (!count_sym(q, s, depth) || q->err)
		return;
	uint64_t start;
	uint32_t len;
	if (td_rule_rhs(a, s - a->T, &start, &len)) {
		q->err = td_fail(TD_ECORRUPT, "rule table broken");
		return;
	}
	for (uint32_t i = 0; i < len && !q->err; i++) {
		uint64_t c = td_rule_sym(a, start + i);
		if (c >= a->T + a->R) {
			q->err = td_fail(TD_ECORRUPT, "symbol out of range");
			return;
		}
		search_sym(q, e, c, base, depth + 1);
		base += td_sym_len(a, c);
	}
}

int td_text_words(const td_archive *a, td_entry e, td_text_fn fn, void *ctx)
{
	uint64_t size = td_pack_get(&a->e_size, e);
	uint8_t *buf = malloc(size ? size : 1);
	if (!buf)
		return TD_ENOMEM;
	size_t got;
	int err = td_extract(a, e, 0, buf, size, &got);
	for (size_t i = 0; !err && i < got;) {
		unsigned k = td_word_char(buf + i, got - i);
		if (!k) {
			i++;
			continue;
		}
		size_t j = i;
		while (j < got && (k = td_word_char(buf + j, got - j)))
			j += k;
		err = fn(ctx, buf + i, j - i, i);
		i = j;
	}
	free(buf);
	return err;
}

typedef struct long_scan {
	const char *word;
	size_t len;
	uint64_t *count;
	td_hits *out;
	td_entry e;
} long_scan;

static int long_fn(void *ctx, const uint8_t *w, size_t len, uint64_t off)
{
	long_scan *l = ctx;
	if (len != l->len || memcmp(w, l->word, len))
		return TD_OK;
	(*l->count)++;
	return l->out ? td_hits_push(l->out, l->e, off) : TD_OK;
}

/* Slow path for words longer than TD_MAXTOK (stored as pieces): scan the
 * file's text for maximal word runs equal to the query. */
static int scan_long(const td_archive *a, td_entry e, const char *word, size_t len, uint64_t *count,
		     td_hits *out)
{
	if (td_pack_get(&a->e_size, e) < len)
		return TD_OK;
	long_scan l = { word, len, count, out, e };
	return td_text_words(a, e, long_fn, &l);
}

/* Root symbols read at a time. */
#define QCHUNK 256u

/* Count (and with q->out, list) the word in one file. Its root symbols go
 * one sample block (2^shift symbols, ROOT_SAMPLES) at a time, counted
 * first: a search adds up symbol lengths only in the blocks that hold the
 * word (a later block's offset is its sample). */
static int file_query(qctx *q, td_entry e, uint64_t *count)
{
	const td_archive *a = q->a;
	if (q->len > TD_MAXTOK)
		return scan_long(a, e, q->word, q->len, count, q->out);
	uint64_t rs = td_pack_get(&a->e_root, e), re = td_pack_get(&a->e_root, e + 1);
	uint64_t g0 = td_pack_get(&a->e_gstart, e);
	if (rs > re || re > a->meta.nroot)
		return td_fail(TD_ECORRUPT, "entry %u: root range out of bounds", e);
	if (rs < re && ((re - 1) >> a->shift) >= a->root_samples.n)
		return td_fail(TD_ECORRUPT, "entry %u: root samples out of bounds", e);
	const uint64_t TR = a->T + a->R;
	uint64_t sym[QCHUNK];
	for (uint64_t b = rs, be; b < re && !q->err; b = be) {
		be = ((b >> a->shift) + 1) << a->shift;
		if (be > re || be <= b)
			be = re;
		uint64_t n = 0;
		for (uint64_t i = b; i < be && !q->err;) {
			uint64_t k = be - i < QCHUNK ? be - i : QCHUNK;
			td_root_range(a, i, k, sym);
			for (uint64_t j = 0; j < k; j++) {
				/* inline: a terminal, or a rule whose count is known */
				uint64_t c = sym[j];
				uint32_t v = c >= a->T && c < TR && q->flat ? q->flat[c - a->T] : 0;
				if (c < a->T)
					n += c >> 1 == q->w && c < 2 * a->W;
				else if (v && v != FLAT_BIG)
					n += v - 1;
				else if (c < TR)
					n += count_sym(q, c, 0);
				else
					return td_fail(TD_ECORRUPT, "entry %u: symbol out of range", e);
			}
			i += k;
		}
		if (!q->out) {
			*count += n;
			continue;
		}
		if (!n || q->err)
			continue;
		uint64_t off = 0;
		if (b > rs) {
			uint64_t g = td_pack_get(&a->root_samples, b >> a->shift);
			if (g < g0)
				return td_fail(TD_ECORRUPT, "entry %u: root samples out of order", e);
			off = g - g0;
		}
		for (uint64_t i = b; i < be && !q->err;) {
			uint64_t k = be - i < QCHUNK ? be - i : QCHUNK;
			td_root_range(a, i, k, sym);
			for (uint64_t j = 0; j < k && !q->err; j++) {
				search_sym(q, e, sym[j], off, 0);
				off += td_sym_len(a, sym[j]);
			}
			i += k;
		}
	}
	if (q->out && !q->err)
		*count = q->out->n;
	return q->err;
}

/* Root symbols of the files under e: from a table of every entry's, built
 * by the first call in one pass from the last entry (a directory's
 * children come after it, td_archive_children). */
static uint64_t scope_size(const td_archive *a, td_entry e)
{
	uint64_t *t = atomic_load_explicit(&a->scope_roots, memory_order_acquire);
	const uint64_t ne = a->meta.nentries;
	if (!t && (t = calloc(ne ? ne : 1, sizeof *t))) {
		for (uint64_t i = ne; i-- > 0;) {
			td_entry first;
			uint32_t n;
			if (is_file(a, (td_entry)i)) {
				uint64_t rs = td_pack_get(&a->e_root, i), re = td_pack_get(&a->e_root, i + 1);
				t[i] = rs < re ? re - rs : 0;
			} else if (td_archive_children(a, (td_entry)i, &first, &n) == TD_OK) {
				for (uint32_t c = 0; c < n; c++)
					t[i] += t[first + c];
			}
		}
		uint64_t *expected = NULL;
		td_archive *m = (td_archive *)a; /* a cache of what the entries say */
		if (!atomic_compare_exchange_strong(&m->scope_roots, &expected, t)) {
			free(t);
			t = expected;
		}
	}
	/* out of memory: taken as large (the query index is then tried) */
	return t ? (e < ne ? t[e] : 0) : a->meta.nroot;
}

/* Whether a scope of `roots` root symbols is large: a sixteenth of the
 * root or more, where the query index pays (td_query.h). */
static int large_scope(const td_archive *a, uint64_t roots)
{
	return roots >= a->meta.nroot / 16;
}

/* Offset in its file of root symbol p, which starts a block at or after
 * the file's first symbol rs or follows the last one placed (*at, at
 * offset *off) in its block. */
static int root_offset(const td_archive *a, td_entry e, uint64_t rs, uint64_t g0, uint64_t p, uint64_t *at,
		       uint64_t *off)
{
	uint64_t b = p >> a->shift << a->shift;
	if (*at == UINT64_MAX || *at < b || *at > p) {
		if (b <= rs) {
			*at = rs;
			*off = 0;
		} else {
			uint64_t g = td_pack_get(&a->root_samples, p >> a->shift);
			if (g < g0)
				return td_fail(TD_ECORRUPT, "entry %u: root samples out of order", e);
			*at = b;
			*off = g - g0;
		}
	}
	for (; *at < p; ++*at)
		*off += td_sym_len(a, td_root_sym(a, *at));
	return TD_OK;
}

/* One file through the index: only the root positions marked in q->roots
 * are visited. */
static int index_file(qctx *q, td_entry e, uint64_t *count)
{
	const td_archive *a = q->a;
	uint64_t rs = td_pack_get(&a->e_root, e), re = td_pack_get(&a->e_root, e + 1);
	uint64_t g0 = td_pack_get(&a->e_gstart, e), at = UINT64_MAX, off = 0;
	if (rs > re || re > a->meta.nroot)
		return td_fail(TD_ECORRUPT, "entry %u: root range out of bounds", e);
	if (rs < re && ((re - 1) >> a->shift) >= a->root_samples.n)
		return td_fail(TD_ECORRUPT, "entry %u: root samples out of bounds", e);
	for (uint64_t wi = rs >> 6; wi << 6 < re && !q->err; wi++) {
		uint64_t bits = q->roots[wi];
		while (bits && !q->err) {
			uint64_t p = wi << 6 | (uint64_t)__builtin_ctzll(bits);
			bits &= bits - 1;
			if (p < rs || p >= re)
				continue;
			uint64_t s = td_root_sym(a, p);
			if (!q->out) {
				*count += count_sym(q, s, 0);
				continue;
			}
			int err = root_offset(a, e, rs, g0, p, &at, &off);
			if (err)
				return err;
			search_sym(q, e, s, off, 0);
		}
	}
	return q->err;
}

/* Every file under e in path order, through the index (q->roots) or by
 * walking its root (file_query). */
static int tree_query(qctx *q, td_entry e, uint64_t *count, unsigned depth)
{
	const td_archive *a = q->a;
	if (is_file(a, e))
		return q->roots ? index_file(q, e, count) : file_query(q, e, count);
	td_entry first;
	uint32_t n;
	if (depth > 4096)
		return TD_OK;
	/* a symlink counts nothing; a directory that does not check (a
	 * damaged tree, met lazily) is an error, not an empty directory */
	int cerr = td_archive_children(a, e, &first, &n);
	if (cerr)
		return cerr == TD_ENOTDIR ? TD_OK : cerr;
	for (uint32_t i = 0; i < n; i++) {
		int err = tree_query(q, first + i, count, depth + 1);
		if (err)
			return err;
	}
	return TD_OK;
}

/* Mark for the index: q->hold gets a bit per rule that holds the word
 * (the word's ancestors through x->par, only they are counted), q->roots
 * one per root position to visit (those of the word and of those rules);
 * q->flat when the rules are many. The caller frees hold and roots. */
static int index_mark(qctx *q, const td_qindex *x)
{
	const td_archive *a = q->a;
	uint64_t *hold = calloc(a->R / 64 + 1, sizeof *hold);
	uint64_t *roots = calloc(a->meta.nroot / 64 + 1, sizeof *roots);
	uint32_t *list = malloc(2 * sizeof *list), cap = 2, n = 2;
	int err = TD_OK;
	q->hold = hold;
	q->roots = roots;
	if (!hold || !roots || !list) {
		err = TD_ENOMEM;
		goto out;
	}
	list[0] = (uint32_t)(2 * q->w);
	list[1] = (uint32_t)(2 * q->w + 1);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t s = list[i];
		for (uint32_t k = x->pos_at[s]; k < x->pos_at[s + 1]; k++)
			roots[x->pos[k] >> 6] |= UINT64_C(1) << (x->pos[k] & 63);
		for (uint32_t k = x->par_at[s]; k < x->par_at[s + 1]; k++) {
			uint32_t r = x->par[k];
			if (hold[r >> 6] >> (r & 63) & 1)
				continue;
			hold[r >> 6] |= UINT64_C(1) << (r & 63);
			if (n == cap) {
				uint32_t *l = cap > UINT32_MAX / 2 ? NULL : realloc(list, 2 * (size_t)cap * sizeof *l);
				if (!l) {
					err = TD_ENOMEM;
					goto out;
				}
				list = l;
				cap *= 2;
			}
			list[n++] = (uint32_t)(a->T + r);
		}
	}
	if (a->R && n - 2 >= a->R / 16)
		q->flat = calloc(a->R, sizeof *q->flat); /* NULL: the hash table serves */
out:
	free(list);
	return err;
}

static void index_unmark(qctx *q)
{
	free((void *)q->hold);
	free((void *)q->roots);
	q->hold = q->roots = NULL;
}

/* Count or search with the index (index_mark). */
static int index_query(qctx *q, const td_qindex *x, td_entry scope, uint64_t *count)
{
	int err = index_mark(q, x);
	if (!err)
		err = tree_query(q, scope, count, 0);
	index_unmark(q);
	return err;
}

static int query(const td_archive *a, const char *word, size_t len, td_entry scope, uint64_t *count, td_hits *out)
{
	*count = 0;
	if (!td_is_word(word, len))
		return td_fail(TD_ENOTWORD, "'%.*s' is not a single word", (int)(len > 64 ? 64 : len), word);
	if (scope >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no entry %u", scope);
	int err = td_data_check(a);
	if (err)
		return err;
	qctx q = { .a = a, .out = out, .word = word, .len = len };
	if (len <= TD_MAXTOK) {
		int64_t w = td_find_word(a, word, len);
		if (w == -2)
			return TD_ECORRUPT;
		if (w < 0)
			return TD_OK;
		q.w = (uint64_t)w;
		if (scope == TD_ROOT && !out) {
			const td_pack *wf = td_word_freq(a);
			if (!wf)
				return TD_ECORRUPT;
			*count = td_pack_get(wf, q.w);
			return TD_OK;
		}
	}
	td_flat_build(a); /* a walk reads rule and (version 4) root symbols at every step */
	/* A walk over much of the corpus decodes the coded sequences whole
	 * (cheaper than tile by tile, and kept for the next query) and keeps
	 * its rule counts in a flat array. */
	uint64_t roots = scope_size(a, scope);
	const td_qindex *x = len <= TD_MAXTOK && large_scope(a, roots) ? td_qindex_get(a) : NULL;
	if (x) {
		err = index_query(&q, x, scope, count);
	} else {
		if (large_scope(a, roots))
			td_syms_build_part(a, 1, roots >= a->meta.nroot / 2);
		if (a->R && roots >= a->R / 16)
			q.flat = calloc(a->R, sizeof *q.flat); /* NULL: the hash table serves */
		err = tree_query(&q, scope, count, 0);
	}
	if (out && !err)
		*count = out->n;
	free(q.flat);
	free(q.m.key);
	free(q.m.val);
	return err;
}

int td_word_file_counts(const td_archive *a, const char *word, size_t len, const td_entry *files, size_t nfiles,
			uint64_t *counts)
{
	memset(counts, 0, nfiles * sizeof *counts);
	if (len > TD_MAXTOK || !td_is_word(word, len))
		return td_fail(TD_EINVAL, "'%.*s' is not a word of at most %u bytes", (int)(len > 64 ? 64 : len), word,
			       (unsigned)TD_MAXTOK);
	int err = td_data_check(a);
	if (err)
		return err;
	int64_t w = td_find_word(a, word, len);
	if (w == -2)
		return TD_ECORRUPT;
	if (w < 0 || !nfiles)
		return TD_OK;
	qctx q = { .a = a, .w = (uint64_t)w, .word = word, .len = len };
	uint64_t roots = 0;
	for (size_t f = 0; f < nfiles; f++) {
		uint64_t rs = td_pack_get(&a->e_root, files[f]), re = td_pack_get(&a->e_root, files[f] + 1);
		roots += rs < re ? re - rs : 0;
	}
	td_flat_build(a);
	const td_qindex *x = large_scope(a, roots) ? td_qindex_get(a) : NULL;
	if (x) {
		err = index_mark(&q, x);
	} else {
		if (large_scope(a, roots))
			td_syms_build_part(a, 1, roots >= a->meta.nroot / 2);
		if (a->R && roots >= a->R / 16)
			q.flat = calloc(a->R, sizeof *q.flat); /* NULL: the hash table serves */
	}
	for (size_t f = 0; f < nfiles && !err; f++)
		err = x ? index_file(&q, files[f], &counts[f]) : file_query(&q, files[f], &counts[f]);
	index_unmark(&q);
	free(q.flat);
	free(q.m.key);
	free(q.m.val);
	if (err)
		memset(counts, 0, nfiles * sizeof *counts);
	return err;
}

int td_query_fast(const td_archive *a, td_entry scope)
{
	if (td_sharded(a))
		return td_shard_query_fast(a, scope);
	if (scope == TD_ROOT)
		return 1;
	if (scope >= a->meta.nentries || atomic_load_explicit(&a->qindex_state, memory_order_acquire) == 2)
		return 0;
	return large_scope(a, scope_size(a, scope));
}

int td_count(const td_archive *a, const char *word, size_t len, td_entry scope, uint64_t *count)
{
	int err = td_sharded(a) ? td_shard_count(a, word, len, scope, count) : query(a, word, len, scope, count, NULL);
	if (err)
		*count = 0; /* td_query.h */
	return err;
}

int td_search(const td_archive *a, const char *word, size_t len, td_entry scope, td_hits *out)
{
	if (td_sharded(a))
		return td_shard_search(a, word, len, scope, out);
	uint64_t n;
	size_t before = out->n;
	int err = query(a, word, len, scope, &n, out);
	if (err)
		out->n = before;
	return err;
}

int td_path_needs_escape(const char *p, size_t n)
{
	return td_span_find2(p, n, '\\', '\n') < n;
}

size_t td_path_escape(const char *p, size_t n, char *out)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '\\') {
			out[o++] = '\\';
			out[o++] = '\\';
		} else if (p[i] == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else {
			out[o++] = p[i];
		}
	}
	return o;
}

int td_dir_paths_init(td_dir_paths *m, const td_archive *a)
{
	*m = (td_dir_paths){ 0 };
	const uint64_t ne = td_archive_nentries(a);
	m->at = calloc(ne ? ne : 1, sizeof *m->at);
	return m->at ? TD_OK : TD_ENOMEM;
}

int td_dir_path(const td_archive *a, td_dir_paths *m, td_entry d, const char **p, size_t *n)
{
	if (d >= td_archive_nentries(a))
		return td_fail(TD_EINVAL, "no entry %u", d);
	if (!m->at[d]) {
		char path[TD_MAXPATH + 2];
		int pl = d == TD_ROOT ? 0 : td_archive_path(a, d, path, sizeof path);
		if (pl < 0)
			return pl;
		const size_t need = 2 * (size_t)pl + 1 + sizeof(uint32_t);
		if (m->len + need > m->cap) { /* offsets + 1 fit 32 bits */
			size_t cap = 2 * (m->len + need) + 4096;
			cap = cap < UINT32_MAX ? cap : UINT32_MAX - 1;
			char *nb = m->len + need <= cap ? realloc(m->buf, cap) : NULL;
			if (!nb)
				return TD_ENOMEM;
			m->buf = nb;
			m->cap = cap;
		}
		/* the length, then the escaped path and its '/' */
		char *q = m->buf + m->len + sizeof(uint32_t);
		uint32_t el = (uint32_t)td_path_escape(path, (size_t)pl, q);
		if (pl)
			q[el++] = '/';
		memcpy(m->buf + m->len, &el, sizeof el);
		m->at[d] = (uint32_t)m->len + 1;
		m->len += sizeof el + el;
	}
	uint32_t el;
	memcpy(&el, m->buf + m->at[d] - 1, sizeof el);
	*p = m->buf + m->at[d] - 1 + sizeof el;
	*n = el;
	return TD_OK;
}

void td_dir_paths_free(td_dir_paths *m)
{
	free(m->at);
	free(m->buf);
	*m = (td_dir_paths){ 0 };
}

void td_hits_free(td_hits *h)
{
	free(h->v);
	h->v = NULL;
	h->n = h->cap = 0;
}

static int words_tree(const td_archive *a, td_entry e, unsigned depth, uint64_t *sum)
{
	if (is_file(a, e)) {
		*sum += td_pack_get(&a->e_nwords, e);
		return TD_OK;
	}
	td_entry first;
	uint32_t n;
	if (depth > 4096)
		return TD_OK;
	int err = td_archive_children(a, e, &first, &n);
	if (err)
		return err == TD_ENOTDIR ? TD_OK : err; /* a damaged directory is an error */
	for (uint32_t i = 0; i < n && !err; i++)
		err = words_tree(a, first + i, depth + 1, sum);
	return err;
}

int td_word_total(const td_archive *a, td_entry scope, uint64_t *n)
{
	if (scope >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no entry %u", scope);
	*n = 0;
	if (scope == TD_ROOT) {
		*n = a->meta.total_words;
		return TD_OK;
	}
	return words_tree(a, scope, 0, n);
}
