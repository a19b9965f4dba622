/* td_query: count and search whole words by walking only rules that hold them. */
#include "td_query.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "td_archive_int.h"
#include "td_extract.h"
#include "td_rcache.h"
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

/* Word id by binary search over the sorted WORDS; -1 when absent, -2 when
 * the dictionary does not decode (td_fail has the detail). */
static int64_t find_word(const td_archive *a, const char *word, size_t len)
{
	uint64_t lo = 0, hi = a->W;
	const uint8_t *words = td_words(a);
	if (!words)
		return -2;
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

/* Per-query memo: rule -> occurrences of the word in its expansion. */
typedef struct memo {
	uint64_t *key;  /* rule + 1; 0 = empty */
	uint64_t *val;
	uint64_t mask, used;
} memo;

typedef struct qctx {
	const td_archive *a;
	uint64_t w;        /* word id */
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

static uint64_t *memo_slot(memo *m, uint64_t r, int *found)
{
	uint64_t h = hmix(r + 1) & m->mask;
	while (m->key[h] && m->key[h] != r + 1)
		h = (h + 1) & m->mask;
	*found = m->key[h] != 0;
	if (!*found) {
		m->key[h] = r + 1;
		m->used++;
	}
	return &m->val[h];
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
	if (q->m.used * 2 >= q->m.mask && memo_grow(&q->m)) {
		q->err = TD_ENOMEM;
		return 0;
	}
	int found;
	uint64_t *slot = memo_slot(&q->m, s - a->T, &found);
	if (found)
		return *slot;
	uint64_t start;
	uint32_t len;
	if (td_rule_rhs(a, s - a->T, &start, &len)) {
		q->err = td_fail(TD_ECORRUPT, "rule table broken");
		return 0;
	}
	uint64_t sum = 0;
	for (uint32_t i = 0; i < len && !q->err; i++)
		sum += count_sym(q, td_rule_sym(a, start + i), depth + 1);
	/* the table may have moved while recursing */
	slot = memo_slot(&q->m, s - a->T, &found);
	*slot = sum;
	return sum;
}

static int is_file(const td_archive *a, td_entry e)
{
	return S_ISREG(td_pack_get(&a->e_mode, e));
}

static int hit_push(td_hits *h, td_entry e, uint64_t off)
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
		if (s < 2 * a->W && (s >> 1) == q->w && hit_push(q->out, e, base))
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

/* Slow path for words longer than TD_MAXTOK (stored as pieces): scan the
 * file's text for maximal word runs equal to the query. */
static int scan_long(const td_archive *a, td_entry e, const char *word, size_t len, uint64_t *count,
		     td_hits *out)
{
	uint64_t size = td_pack_get(&a->e_size, e);
	if (size < len)
		return TD_OK;
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
		if (j - i == len && !memcmp(buf + i, word, len)) {
			(*count)++;
			if (out)
				err = hit_push(out, e, i);
		}
		i = j;
	}
	free(buf);
	return err;
}

/* Count (and with q->out, list) the word in one file. */
static int file_query(qctx *q, td_entry e, const char *word, size_t len, uint64_t *count)
{
	const td_archive *a = q->a;
	if (len > TD_MAXTOK)
		return scan_long(a, e, word, len, count, q->out);
	uint64_t rs = td_pack_get(&a->e_root, e), re = td_pack_get(&a->e_root, e + 1);
	if (rs > re || re > a->meta.nroot)
		return td_fail(TD_ECORRUPT, "entry %u: root range out of bounds", e);
	uint64_t off = 0;
	for (uint64_t i = rs; i < re && !q->err; i++) {
		uint64_t s = td_root_sym(a, i);
		if (s >= a->T + a->R)
			return td_fail(TD_ECORRUPT, "entry %u: symbol out of range", e);
		if (q->out)
			search_sym(q, e, s, off, 0);
		else
			*count += count_sym(q, s, 0);
		off += td_sym_len(a, s);
	}
	if (q->out && !q->err)
		*count = q->out->n;
	return q->err;
}

static int tree_query(qctx *q, td_entry e, const char *word, size_t len, uint64_t *count, unsigned depth)
{
	const td_archive *a = q->a;
	if (is_file(a, e))
		return file_query(q, e, word, len, count);
	td_entry first;
	uint32_t n;
	if (depth > 4096 || td_archive_children(a, e, &first, &n) != TD_OK)
		return TD_OK; /* symlinks count nothing */
	for (uint32_t i = 0; i < n; i++) {
		int err = tree_query(q, first + i, word, len, count, depth + 1);
		if (err)
			return err;
	}
	return TD_OK;
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
	qctx q = { .a = a, .out = out };
	if (len <= TD_MAXTOK) {
		int64_t w = find_word(a, word, len);
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
	err = tree_query(&q, scope, word, len, count, 0);
	if (out && !err)
		*count = out->n;
	free(q.m.key);
	free(q.m.val);
	return err;
}

int td_count(const td_archive *a, const char *word, size_t len, td_entry scope, uint64_t *count)
{
	return query(a, word, len, scope, count, NULL);
}

int td_search(const td_archive *a, const char *word, size_t len, td_entry scope, td_hits *out)
{
	uint64_t n;
	size_t before = out->n;
	int err = query(a, word, len, scope, &n, out);
	if (err)
		out->n = before;
	return err;
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

void td_hits_free(td_hits *h)
{
	free(h->v);
	h->v = NULL;
	h->n = h->cap = 0;
}

static uint64_t words_tree(const td_archive *a, td_entry e, unsigned depth)
{
	if (is_file(a, e))
		return td_pack_get(&a->e_nwords, e);
	td_entry first;
	uint32_t n;
	uint64_t sum = 0;
	if (depth > 4096 || td_archive_children(a, e, &first, &n) != TD_OK)
		return 0;
	for (uint32_t i = 0; i < n; i++)
		sum += words_tree(a, first + i, depth + 1);
	return sum;
}

int td_word_total(const td_archive *a, td_entry scope, uint64_t *n)
{
	if (scope >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no entry %u", scope);
	*n = scope == TD_ROOT ? a->meta.total_words : words_tree(a, scope, 0);
	return TD_OK;
}
