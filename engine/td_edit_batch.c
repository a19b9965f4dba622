/* td_edit_batch: the CPU resolver of insert/append batches (in sequence, in batch, mixed) and their application. */
#include "td_edit_batch.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "td_err.h"

#define TD_BATCH_MAXSIZE (UINT64_C(1) << 62)

int td_edit_batch_sizes(const td_edit *ed, const td_edit_rec *recs, size_t n, int mode, uint64_t *sizes)
{
	if (mode != TD_BATCH_SEQUENCE && mode != TD_BATCH_SNAPSHOT && mode != TD_BATCH_MIXED)
		return td_fail(TD_EINVAL, "batch: unknown offset mode %d", mode);
	if (n > UINT32_MAX)
		return td_fail(TD_ELIMIT, "batch: more than 2^32 records");
	/* consecutive records of the same file are common: one stat each run */
	td_node last = TD_NOENTRY;
	td_stat st = { 0 };
	int lerr = TD_OK;
	for (size_t i = 0; i < n; i++) {
		const td_edit_rec *r = &recs[i];
		if (r->type != TD_REC_INSERT)
			return td_fail(TD_EINVAL, "batch record %zu: not an insert (type %u)", i, (unsigned)r->type);
		if (r->flags & ~TD_EDIT_SNAPSHOT)
			return td_fail(TD_EINVAL, "batch record %zu: unknown flags 0x%x", i, (unsigned)r->flags);
		if (r->data_len && !r->data)
			return td_fail(TD_EINVAL, "batch record %zu: %llu bytes without data", i,
				       (unsigned long long)r->data_len);
		if (r->data_len > TD_BATCH_MAXSIZE)
			return td_fail(TD_ERANGE, "batch record %zu: %llu bytes", i, (unsigned long long)r->data_len);
		if (i == 0 || r->node != last) {
			last = r->node;
			lerr = td_edit_stat(ed, r->node, &st);
			if (!lerr && S_ISDIR(st.mode))
				lerr = TD_EISDIR;
			else if (!lerr && !S_ISREG(st.mode))
				lerr = TD_EINVAL;
		}
		if (lerr)
			return td_fail(lerr, "batch record %zu: node %u is not a regular file", i, (unsigned)r->node);
		sizes[i] = st.size;
	}
	return TD_OK;
}

/* ---- sorting helpers ---- */

typedef struct bkey {
	td_node node;
	uint32_t idx;
	uint64_t off;
} bkey;

static int cmp_node_idx(const void *x, const void *y)
{
	const bkey *a = x, *b = y;
	if (a->node != b->node)
		return a->node < b->node ? -1 : 1;
	return (a->idx > b->idx) - (a->idx < b->idx);
}

static int cmp_node_off_idx(const void *x, const void *y)
{
	const bkey *a = x, *b = y;
	if (a->node != b->node)
		return a->node < b->node ? -1 : 1;
	if (a->off != b->off)
		return a->off < b->off ? -1 : 1;
	return (a->idx > b->idx) - (a->idx < b->idx);
}

static int past_end(size_t i, uint64_t off, uint64_t size, const char *what)
{
	return td_fail(TD_EINVAL, "batch record %zu: offset %llu past the end of the file %s (%llu bytes)", i,
		       (unsigned long long)off, what, (unsigned long long)size);
}

/* Mixed: one file's records k[0..m) (batch order), its snapshot size. */
static int resolve_file_mixed(const td_edit_rec *recs, const bkey *k, size_t m, uint64_t snap, uint64_t *res,
			      uint64_t *anchor, uint64_t *alen)
{
	uint64_t cur = snap;
	for (size_t t = 0; t < m; t++) {
		const td_edit_rec *r = &recs[k[t].idx];
		uint64_t a, at;
		if (r->flags & TD_EDIT_SNAPSHOT) {
			a = r->off == TD_OFF_END ? snap : r->off;
			if (a > snap)
				return past_end(k[t].idx, a, snap, "before the batch");
			at = td_batch_snap_to_cur(anchor, alen, t, a);
		} else {
			at = r->off == TD_OFF_END ? cur : r->off;
			if (at > cur)
				return past_end(k[t].idx, at, cur, "at that point of the batch");
			a = td_batch_cur_to_anchor(anchor, alen, t, at);
		}
		res[k[t].idx] = at;
		td_batch_anchor_add(anchor, alen, t, a, r->data_len);
		cur += r->data_len;
	}
	return TD_OK;
}

int td_edit_batch_resolve(const td_edit *ed, const td_edit_rec *recs, size_t n, int mode, td_edit_rec *out,
			  uint32_t *perm)
{
	if (n == 0)
		return TD_OK;
	uint64_t *sizes = malloc(n * sizeof *sizes);
	uint64_t *res = malloc(n * sizeof *res);
	bkey *k = malloc(n * sizeof *k);
	uint64_t *anchor = NULL, *alen = NULL;
	int err = TD_OK;
	if (!sizes || !res || !k) {
		err = td_fail(TD_ENOMEM, "batch of %zu records", n);
		goto out;
	}
	if ((err = td_edit_batch_sizes(ed, recs, n, mode, sizes)))
		goto out;
	for (size_t i = 0; i < n; i++) {
		k[i].node = recs[i].node;
		k[i].idx = (uint32_t)i;
		k[i].off = recs[i].off == TD_OFF_END ? sizes[i] : recs[i].off;
	}
	if (mode == TD_BATCH_SNAPSHOT) {
		/* sorted by (file, snapshot offset, batch index); each record
		 * moves by the bytes its file's earlier records inserted */
		qsort(k, n, sizeof *k, cmp_node_off_idx);
		uint64_t shift = 0;
		for (size_t t = 0; t < n; t++) {
			uint32_t i = k[t].idx;
			if (t > 0 && k[t].node != k[t - 1].node)
				shift = 0;
			if (k[t].off > sizes[i]) {
				err = past_end(i, k[t].off, sizes[i], "before the batch");
				goto out;
			}
			out[t] = recs[i];
			out[t].flags = 0;
			out[t].off = k[t].off + shift;
			if (perm)
				perm[t] = i;
			shift += recs[i].data_len;
		}
		goto out;
	}
	qsort(k, n, sizeof *k, cmp_node_idx);
	if (mode == TD_BATCH_MIXED) {
		anchor = malloc((n + 1) * sizeof *anchor);
		alen = malloc((n + 1) * sizeof *alen);
		if (!anchor || !alen) {
			err = td_fail(TD_ENOMEM, "batch of %zu records", n);
			goto out;
		}
	}
	for (size_t t0 = 0, t1; t0 < n; t0 = t1) {
		for (t1 = t0 + 1; t1 < n && k[t1].node == k[t0].node; t1++)
			;
		uint64_t snap = sizes[k[t0].idx];
		if (mode == TD_BATCH_MIXED) {
			if ((err = resolve_file_mixed(recs, k + t0, t1 - t0, snap, res, anchor, alen)))
				goto out;
			continue;
		}
		uint64_t cur = snap; /* in sequence: the size so far */
		for (size_t t = t0; t < t1; t++) {
			uint32_t i = k[t].idx;
			uint64_t at = recs[i].off == TD_OFF_END ? cur : recs[i].off;
			if (at > cur) {
				err = past_end(i, at, cur, "at that point of the batch");
				goto out;
			}
			res[i] = at;
			cur += recs[i].data_len;
		}
	}
	for (size_t i = 0; i < n; i++) {
		out[i] = recs[i];
		out[i].flags = 0;
		out[i].off = res[i];
		if (perm)
			perm[i] = (uint32_t)i;
	}
out:
	free(sizes);
	free(res);
	free(k);
	free(anchor);
	free(alen);
	return err;
}

int td_edit_apply_resolved(td_edit *ed, const td_edit_rec *out, size_t n, size_t *napplied)
{
	size_t i = 0;
	int err = TD_OK;
	for (; i < n; i++)
		if ((err = td_edit_apply(ed, &out[i])))
			break;
	if (napplied)
		*napplied = i;
	return err;
}

int td_edit_apply_batch(td_edit *ed, const td_edit_rec *recs, size_t n, int mode, size_t *napplied)
{
	if (napplied)
		*napplied = 0;
	if (n == 0)
		return TD_OK;
	td_edit_rec *out = malloc(n * sizeof *out);
	if (!out)
		return td_fail(TD_ENOMEM, "batch of %zu records", n);
	int err = td_edit_batch_resolve(ed, recs, n, mode, out, NULL);
	if (!err)
		err = td_edit_apply_resolved(ed, out, n, napplied);
	free(out);
	return err;
}
