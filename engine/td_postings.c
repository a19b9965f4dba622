/* td_postings: the stored ranked inverted index, built by the writer and read by ranked-files queries. */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "td_analytics_int.h"
#include "td_archive_int.h"
#include "td_err.h"
#include "td_format.h"
#include "td_postings.h"
#include "td_shard.h"

/* ---------- building ---------- */

int td_post_begin(td_post_build *pb, uint64_t W, uint32_t nent)
{
	memset(pb, 0, sizeof *pb);
	pb->W = W;
	pb->nent = nent;
	pb->woff = malloc((W + 1) * sizeof *pb->woff);
	pb->cnt = calloc(W ? W : 1, sizeof *pb->cnt);
	pb->fstart = calloc(nent ? nent : 1, sizeof *pb->fstart);
	pb->fend = calloc(nent ? nent : 1, sizeof *pb->fend);
	pb->emid = calloc(nent ? nent : 1, 1);
	if (!pb->woff || !pb->cnt || !pb->fstart || !pb->fend || !pb->emid) {
		td_post_free(pb);
		return TD_ENOMEM;
	}
	pb->woff[0] = 0;
	return TD_OK;
}

int td_post_other(td_post_build *pb, uint64_t S, uint64_t k, uint8_t last)
{
	if (!pb->omid) {
		if (!(pb->omid = calloc(S ? S : 1, 1)))
			return TD_ENOMEM;
		pb->S = S;
	}
	pb->omid[k] = !td_cut_byte(last);
	return TD_OK;
}

int td_post_word(td_post_build *pb, const uint8_t *bytes, size_t len)
{
	uint8_t l = (uint8_t)len;
	int err = td_buf_put(&pb->words, &l, 1);
	if (!err)
		err = td_buf_put(&pb->words, bytes, len);
	if (!err)
		pb->woff[++pb->nw] = pb->words.len;
	return err;
}

int td_post_file(td_post_build *pb, uint32_t ent, const uint32_t *seq, uint64_t n)
{
	uint64_t W2 = 2 * pb->W, start = pb->npair;
	for (uint64_t i = 0; i < n; i++) {
		if (seq[i] >= W2)
			continue;
		uint32_t w = seq[i] >> 1;
		if (pb->cnt[w]++)
			continue;
		if (pb->npair + 2 > pb->cap) {
			uint64_t cap = pb->cap ? 2 * pb->cap : 4096;
			uint32_t *v = realloc(pb->pair, cap * sizeof *v);
			if (!v)
				return TD_ENOMEM;
			pb->pair = v;
			pb->cap = cap;
		}
		pb->pair[pb->npair] = w;
		pb->npair += 2;
	}
	for (uint64_t k = start; k < pb->npair; k += 2) {
		uint32_t w = pb->pair[k];
		pb->pair[k + 1] = pb->cnt[w];
		pb->cnt[w] = 0;
	}
	pb->fstart[ent] = start;
	pb->fend[ent] = pb->npair;
	if (n) { /* a word token ends in a word character unless it took its space */
		uint64_t last = seq[n - 1];
		pb->emid[ent] = last < W2 ? !(last & 1) : last - W2 < pb->S && pb->omid[last - W2];
	}
	return TD_OK;
}

static size_t put_varint(uint8_t *p, uint64_t v)
{
	size_t n = 0;
	while (v >= 0x80) {
		p[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (uint8_t)v;
	return n;
}

/* A group's checksum (td_format.h): off[0 .. last - first] are the
 * offsets of words first .. last. */
static uint64_t td_post_group_sum(const uint64_t *off, uint64_t last, uint64_t first, const uint8_t *data)
{
	uint64_t seed = XXH3_64bits(off, (last - first + 1) * sizeof *off);
	return XXH3_64bits_withSeed(data + off[0], off[last - first] - off[0], seed);
}

int td_post_encode(td_post_build *pb, const uint32_t *entry, uint32_t ne, td_buf *out)
{
	const uint64_t W = pb->W;
	uint64_t nitems = pb->npair / 2;
	int err = TD_OK;
	uint64_t *at = calloc(W + 1, sizeof *at); /* word's first item, then a cursor */
	uint32_t *ife = malloc((nitems ? nitems : 1) * sizeof *ife);
	uint32_t *ict = malloc((nitems ? nitems : 1) * sizeof *ict);
	uint64_t *off = malloc((W + 1) * sizeof *off);
	td_buf data = { 0 };
	if (!at || !ife || !ict || !off || pb->nw != W) {
		err = TD_ENOMEM;
		goto out;
	}
	for (uint64_t k = 0; k < pb->npair; k += 2)
		at[pb->pair[k] + 1]++;
	for (uint64_t w = 0; w < W; w++)
		at[w + 1] += at[w];
	/* entries ascending within each word */
	for (uint32_t k = 0; k < ne; k++) {
		uint32_t e = entry[k];
		if (e == UINT32_MAX)
			continue;
		for (uint64_t j = pb->fstart[e]; j < pb->fend[e]; j += 2) {
			uint64_t i = at[pb->pair[j]]++;
			ife[i] = k;
			ict[i] = pb->pair[j + 1];
		}
	}
	/* at[w] is now the end of word w's items (the start of w + 1's) */
	uint8_t tmp[TD_MAXTOK + 32];
	for (uint64_t w = 0, i = 0; w < W && !err; w++) {
		off[w] = data.len;
		uint64_t len = pb->woff[w + 1] - pb->woff[w];
		err = td_buf_put(&data, pb->words.p + pb->woff[w], len);
		size_t m = put_varint(tmp, at[w] - i);
		if (!err)
			err = td_buf_put(&data, tmp, m);
		for (uint32_t prev = 0; i < at[w] && !err; i++) {
			m = put_varint(tmp, ((uint64_t)(ife[i] - prev) << 1) | (ict[i] == 1));
			if (ict[i] > 1)
				m += put_varint(tmp + m, ict[i] - 2u);
			prev = ife[i];
			err = td_buf_put(&data, tmp, m);
		}
	}
	off[W] = data.len;
	const unsigned sh = TD_POSTINGS_GROUP_SHIFT;
	uint64_t ng = (W + (UINT64_C(1) << sh) - 1) >> sh;
	uint64_t *gsum = malloc((ng ? ng : 1) * sizeof *gsum);
	if (!gsum)
		err = TD_ENOMEM;
	for (uint64_t g = 0; g < ng && !err; g++)
		gsum[g] = td_post_group_sum(off + (g << sh), (g + 1) << sh < W ? (g + 1) << sh : W, g << sh,
					    data.p);
	uint64_t nm = ((uint64_t)ne + 63) / 64;
	uint64_t *mid = calloc(nm ? nm : 1, sizeof *mid);
	if (!mid)
		err = TD_ENOMEM;
	for (uint32_t k = 0; k < ne && mid; k++)
		if (entry[k] != UINT32_MAX && pb->emid[entry[k]])
			mid[k >> 6] |= UINT64_C(1) << (k & 63);
	td_disk_postings h = { .version = TD_POSTINGS_VERSION, .group_shift = sh, .nwords = W, .nitems = nitems,
			       .ngroups = ng, .nentries = ne };
	td_buf offs = { 0 };
	if (!err)
		err = td_pack_encode(off, W + 1, &offs);
	if (!err) {
		td_buf_align(&offs, 8);
		h.off_size = offs.len;
		h.sums_sum = XXH3_64bits_withSeed(mid, nm * sizeof *mid, XXH3_64bits(gsum, ng * sizeof *gsum));
		h.header_sum = XXH3_64bits(&h, offsetof(td_disk_postings, header_sum));
		err = td_buf_put(out, &h, sizeof h);
	}
	if (!err)
		err = td_buf_put(out, offs.p, offs.len);
	if (!err)
		err = td_buf_put(out, gsum, ng * sizeof *gsum);
	if (!err)
		err = td_buf_put(out, mid, nm * sizeof *mid);
	if (!err)
		err = td_buf_put(out, data.p, data.len);
	free(gsum);
	free(mid);
	td_buf_free(&offs);
out:
	td_buf_free(&data);
	free(at);
	free(ife);
	free(ict);
	free(off);
	return err;
}

void td_post_free(td_post_build *pb)
{
	td_buf_free(&pb->words);
	free(pb->woff);
	free(pb->pair);
	free(pb->fstart);
	free(pb->fend);
	free(pb->cnt);
	free(pb->omid);
	free(pb->emid);
	memset(pb, 0, sizeof *pb);
}

/* ---------- reading ---------- */

int td_post_has(const td_archive *a)
{
	return a->post != NULL;
}

uint64_t td_post_bytes(const td_archive *a)
{
	return a->post ? a->post->size : 0;
}

void td_archive_postings(const td_archive *a, uint64_t *bytes, uint32_t *nwith, uint32_t *ngrammars)
{
	*bytes = 0;
	*nwith = 0;
	*ngrammars = 1;
	if (!td_sharded(a)) {
		*bytes = td_post_bytes(a);
		*nwith = a->post != NULL;
		return;
	}
	uint32_t n;
	td_shard_table(a, &n);
	*ngrammars = n;
	for (uint32_t i = 0; i < n; i++) {
		td_archive *s;
		if (td_shard_sub(a, i, &s))
			continue;
		*bytes += td_post_bytes(s);
		*nwith += s->post != NULL;
	}
}

static int post_bad(const char *what)
{
	return td_fail(TD_ECORRUPT, "section 'postings': %s", what);
}

/* The section's header, offsets and group sums, once (O(W / 128 + groups)). */
static int post_open(const td_archive *a)
{
	int st = atomic_load_explicit(&a->post_state, memory_order_acquire);
	if (st == 0) {
		td_archive *m = (td_archive *)a; /* the result is a cache */
		pthread_mutex_lock(&m->check_mu);
		st = atomic_load_explicit(&a->post_state, memory_order_relaxed);
		if (st == 0) {
			const td_disk_section *s = a->post;
			const uint8_t *p = a->map + s->off;
			td_disk_postings h;
			st = -1;
			if (s->size >= sizeof h) {
				memcpy(&h, p, sizeof h);
				uint64_t rest = s->size - sizeof h, G = UINT64_C(1) << (h.group_shift & 31);
				uint64_t nm = (a->meta.nentries + 63) / 64;
				if (h.header_sum == XXH3_64bits(&h, offsetof(td_disk_postings, header_sum)) &&
				    h.version == TD_POSTINGS_VERSION && h.group_shift >= 1 && h.group_shift <= 20 &&
				    h.nwords == a->W && h.ngroups == (a->W + G - 1) / G && h.off_size <= rest &&
				    !(h.off_size & 7) && /* gsum[] and mid[] are read as u64 in place */
				    h.nentries == a->meta.nentries && h.ngroups <= (rest - h.off_size) / 8 &&
				    nm <= (rest - h.off_size) / 8 - h.ngroups &&
				    !td_pack_view(&m->post_off, p + sizeof h, h.off_size) && m->post_off.n == a->W + 1) {
					m->post_gsum = (const uint64_t *)(p + sizeof h + h.off_size);
					m->post_mid = m->post_gsum + h.ngroups;
					m->post_shift = h.group_shift;
					m->post_data = p + sizeof h + h.off_size + 8 * (h.ngroups + nm);
					m->post_dsize = rest - h.off_size - 8 * (h.ngroups + nm);
					m->post_nitems = h.nitems;
					if (XXH3_64bits_withSeed(m->post_mid, 8 * nm, XXH3_64bits(m->post_gsum, 8 * h.ngroups)) ==
						    h.sums_sum &&
					    td_pack_get(&m->post_off, a->W) <= m->post_dsize)
						st = 1;
				}
			}
			atomic_store_explicit(&m->post_state, st, memory_order_release);
		}
		pthread_mutex_unlock(&m->check_mu);
	}
	return st == 1 ? TD_OK : post_bad("damaged (header, offsets or group checksums)");
}

/* Check group g (its offsets and bytes against its checksum). */
static int group_check(const td_archive *a, uint64_t g)
{
	uint64_t first = g << a->post_shift, last = first + (UINT64_C(1) << a->post_shift);
	if (last > a->W)
		last = a->W;
	uint64_t off[257], *o = off;
	uint64_t n = last - first + 1;
	uint64_t *heap = NULL;
	if (n > 257 && !(o = heap = malloc(n * sizeof *o)))
		return TD_ENOMEM;
	for (uint64_t i = 0; i < n; i++)
		o[i] = td_pack_get(&a->post_off, first + i);
	int ok = 1;
	for (uint64_t i = 0; i + 1 < n; i++)
		ok &= o[i] <= o[i + 1];
	ok = ok && o[n - 1] <= a->post_dsize && td_post_group_sum(o, last, first, a->post_data) == a->post_gsum[g];
	free(heap);
	return ok ? TD_OK
		  : td_fail(TD_ECORRUPT, "section 'postings': words %llu..%llu: checksum mismatch",
			    (unsigned long long)first, (unsigned long long)last - 1);
}

int td_post_ends_mid(const td_archive *a, td_entry e)
{
	if (!a->post || e >= a->meta.nentries || post_open(a))
		return -1;
	return (int)(a->post_mid[e >> 6] >> (e & 63) & 1);
}

/* Read a varint at *p (< end). 0, or -1 past end or too long. */
static int get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	uint64_t x = 0;
	for (unsigned sh = 0; sh < 64; sh += 7) {
		if (*p >= end)
			return -1;
		uint8_t b = *(*p)++;
		x |= (uint64_t)(b & 0x7f) << sh;
		if (!(b & 0x80)) {
			*v = x;
			return 0;
		}
	}
	return -1;
}

/* One word's block: its bytes, then its items. */
typedef struct pblock {
	const uint8_t *word, *p, *end;
	unsigned wlen;
	uint64_t df;
} pblock;

static int block_at(const td_archive *a, uint64_t w, pblock *b)
{
	uint64_t lo = td_pack_get(&a->post_off, w), hi = td_pack_get(&a->post_off, w + 1);
	if (lo >= hi || hi > a->post_dsize)
		return post_bad("block offsets out of order");
	const uint8_t *p = a->post_data + lo, *end = a->post_data + hi;
	b->wlen = p[0];
	if (!b->wlen || (uint64_t)b->wlen + 1 > hi - lo)
		return post_bad("word out of its block");
	b->word = p + 1;
	b->p = p + 1 + b->wlen;
	b->end = end;
	if (get_varint(&b->p, end, &b->df)) /* 0: the word is only in symlink targets */
		return post_bad("bad file count");
	return TD_OK;
}

/* The next item of a block: entry and count. 1, 0 at its end, or an error. */
static int block_next(pblock *b, uint64_t *prev, uint64_t *count)
{
	if (!b->df)
		return b->p == b->end ? 0 : post_bad("bytes after a word's files");
	uint64_t v, c = 0;
	if (get_varint(&b->p, b->end, &v) || v < 2 || (!(v & 1) && get_varint(&b->p, b->end, &c)))
		return post_bad("bad item");
	*prev += v >> 1;
	*count = (v & 1) ? 1 : c + 2;
	if (*count < c)
		return post_bad("bad item");
	b->df--;
	return 1;
}

static int wcmp(const uint8_t *x, size_t lx, const uint8_t *y, size_t ly)
{
	int c = memcmp(x, y, lx < ly ? lx : ly);
	return c ? c : (lx > ly) - (lx < ly);
}

/* Find word w[0..len): TD_OK with *found (and the block, and its word id
 * in *at), or an error. The bisection reads blocks before their groups are
 * checked, then checks what the answer rests on: a word found is its
 * block's bytes, so its group alone (its sum covers the group's offsets, so
 * the block's bounds too); a word not found, or a block that does not
 * parse, rests on every group the bisection read, checked then (a damaged
 * one gets the checksum's message). A group of 64 words is 1-11 KB on
 * linuxdoc and a bisection reads about a dozen, so a word found hashes one
 * group instead of them all. block_at bounds every read by the section. */
static int post_find_at(const td_archive *a, const uint8_t *w, size_t len, pblock *b, int *found, uint64_t *at)
{
	*found = 0;
	uint64_t lo = 0, hi = a->W, seen[64];
	unsigned ns = 0;
	int err = TD_OK;
	while (lo < hi && !err) {
		uint64_t mid = lo + (hi - lo) / 2, g = mid >> a->post_shift;
		if (!ns || seen[ns - 1] != g)
			seen[ns++] = g; /* at most 64 steps: W < 2^64 */
		if ((err = block_at(a, mid, b)))
			break;
		int c = wcmp(b->word, b->wlen, w, len);
		if (c == 0) {
			if ((err = group_check(a, g)))
				return err;
			*found = 1;
			*at = mid;
			return TD_OK;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* not found, or a block that does not parse: every group read */
	for (unsigned i = 0; i < ns; i++) {
		unsigned j = 0;
		while (j < i && seen[j] != seen[i])
			j++;
		int gerr = j < i ? TD_OK : group_check(a, seen[i]); /* each group once */
		if (gerr)
			return gerr;
	}
	return err;
}

static int post_find(const td_archive *a, const uint8_t *w, size_t len, pblock *b, int *found)
{
	uint64_t at;
	return post_find_at(a, w, len, b, found, &at);
}

/* Whether entry e lies under directory d (ancestors have smaller numbers;
 * a parent that does not is a damaged tree, which a lazily checked one
 * may not have met yet): 1, 0, or TD_ECORRUPT. */
static int under(const td_archive *a, td_entry e, td_entry d)
{
	while (e > d) {
		td_entry p = (td_entry)td_pack_get(&a->e_parent, e);
		if (p >= e)
			return td_fail(TD_ECORRUPT, "entry %u: parent %u does not list it", e, p);
		e = p;
	}
	return e == d;
}

int td_post_files(const td_archive *a, const char *w, size_t len, td_entry scope, int rank, td_file_count **out,
		  size_t *n, int *done)
{
	*out = NULL;
	*n = 0;
	*done = 0;
	if (!a->post || len == 0 || len > TD_MAXTOK || td_phrase_words(w, len) != 1)
		return TD_OK;
	if (scope >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no entry %u", scope);
	int err = post_open(a);
	if (err)
		return err;
	*done = 1;
	pblock b;
	int found;
	if ((err = post_find(a, (const uint8_t *)w, len, &b, &found)) || !found)
		return err;
	uint64_t mode = td_pack_get(&a->e_mode, scope);
	int dir = S_ISDIR(mode);
	if (!dir && !S_ISREG(mode))
		return TD_OK;
	td_file_count *v = malloc((dir ? b.df : 1) * sizeof *v);
	if (!v)
		return TD_ENOMEM;
	size_t k = 0;
	uint64_t e = 0, c;
	int r;
	while ((r = block_next(&b, &e, &c)) == 1) {
		if (e >= a->meta.nentries || !S_ISREG(td_pack_get(&a->e_mode, e))) {
			r = post_bad("an item names no regular file");
			break;
		}
		int in = dir ? (scope == 0 || under(a, (td_entry)e, scope)) : e == scope;
		if (in < 0) {
			r = in;
			break;
		}
		if (in)
			v[k++] = (td_file_count){ (td_entry)e, c };
	}
	err = r < 0 ? r : TD_OK;
	if (!err && rank && k > 1)
		err = td_rank_files(a, v, k);
	if (err || !k) {
		free(v);
		return err;
	}
	*out = v;
	*n = k;
	return TD_OK;
}

int td_post_lookup(const td_archive *a, const char *w, size_t len, uint64_t *df, td_entry **ents)
{
	*df = 0;
	if (ents)
		*ents = NULL;
	if (!a->post || len == 0 || len > TD_MAXTOK)
		return TD_OK;
	int err = post_open(a);
	pblock b;
	int found = 0;
	if (err || (err = post_find(a, (const uint8_t *)w, len, &b, &found)) || !found)
		return err;
	*df = b.df;
	if (!ents || !b.df)
		return TD_OK;
	td_entry *v = malloc(b.df * sizeof *v);
	if (!v)
		return TD_ENOMEM;
	uint64_t e = 0, c, k = 0, want = b.df;
	int r;
	while ((r = block_next(&b, &e, &c)) == 1) {
		if (e >= a->meta.nentries || (k && e <= v[k - 1])) {
			r = post_bad("an item names no regular file");
			break;
		}
		v[k++] = (td_entry)e;
	}
	if (r < 0 || k != want) {
		free(v);
		*df = 0;
		return r < 0 ? r : post_bad("bad file count");
	}
	*ents = v;
	return TD_OK;
}

int td_post_word_id(const td_archive *a, const char *w, size_t len, int64_t *id)
{
	*id = -1;
	if (!a->post || len == 0 || len > TD_MAXTOK)
		return TD_OK;
	int err = post_open(a);
	pblock b;
	int found = 0;
	uint64_t at = 0;
	if (err || (err = post_find_at(a, (const uint8_t *)w, len, &b, &found, &at)) || !found)
		return err;
	*id = (int64_t)at;
	return TD_OK;
}

int td_post_holds(const td_archive *a, const char *w, size_t len, td_entry e)
{
	if (!a->post || len == 0 || len > TD_MAXTOK)
		return 0;
	int err = post_open(a);
	pblock b;
	int found = 0;
	if (err || (err = post_find(a, (const uint8_t *)w, len, &b, &found)) || !found)
		return err ? err : 0;
	uint64_t at = 0, c;
	int r;
	while ((r = block_next(&b, &at, &c)) == 1 && at < e)
		;
	return r < 0 ? r : r == 1 && at == e;
}

int td_post_verify(const td_archive *a)
{
	if (!a->post)
		return TD_OK;
	int err = post_open(a);
	if (!err)
		err = td_data_check(a);
	if (err)
		return err;
	if (XXH3_64bits(a->map + a->post->off, a->post->size) != a->post->sum)
		return post_bad("checksum mismatch");
	for (uint64_t g = 0; g << a->post_shift < a->W; g++)
		if ((err = group_check(a, g)))
			return err;
	const td_pack *freq = td_word_freq(a);
	if (!td_words(a) || !freq)
		return TD_ECORRUPT;
	uint64_t ne = a->meta.nentries, items = 0;
	uint64_t *fsum = calloc(ne ? ne : 1, sizeof *fsum);
	if (!fsum)
		return TD_ENOMEM;
	for (uint64_t w = 0; w < a->W && !err; w++) {
		pblock b;
		if ((err = block_at(a, w, &b)))
			break;
		uint32_t dl;
		int sp;
		const uint8_t *dw = td_term_bytes(a, 2 * w, &dl, &sp);
		if (!dw || wcmp(dw, dl, b.word, b.wlen)) {
			err = td_fail(TD_ECORRUPT, "section 'postings': word %llu's block names another word",
				      (unsigned long long)w);
			break;
		}
		uint64_t e = 0, c, sum = 0, last = 0;
		int r;
		while ((r = block_next(&b, &e, &c)) == 1) {
			if (e >= ne || !S_ISREG(td_pack_get(&a->e_mode, e)) || (last && e <= last)) {
				r = post_bad("an item names no regular file");
				break;
			}
			last = e;
			sum += c;
			fsum[e] += c;
			items++;
		}
		if (r < 0) {
			err = r;
			break;
		}
		uint64_t want = td_pack_get(freq, w);
		if (sum != want)
			err = td_fail(TD_ECORRUPT, "section 'postings': word '%.*s' adds up to %llu, the grammar counts %llu",
				      (int)b.wlen, (const char *)b.word, (unsigned long long)sum, (unsigned long long)want);
	}
	if (!err && items != a->post_nitems)
		err = post_bad("item count differs from the header's");
	for (uint64_t e = 0; e < ne && !err; e++)
		if (fsum[e] > td_pack_get(&a->e_nwords, e) ||
		    (!a->meta.nlongwords && S_ISREG(td_pack_get(&a->e_mode, e)) && fsum[e] != td_pack_get(&a->e_nwords, e)))
			err = td_fail(TD_ECORRUPT, "section 'postings': entry %llu's counts add up to %llu, it has %llu words",
				      (unsigned long long)e, (unsigned long long)fsum[e],
				      (unsigned long long)td_pack_get(&a->e_nwords, e));
	free(fsum);
	return err;
}
