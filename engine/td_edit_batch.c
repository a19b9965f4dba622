/* td_edit_batch: the CPU resolver of insert/append batches (in sequence, in batch, mixed) and their application. */
#include "td_edit_batch.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

/* ---- grouping by file, then one file at a time ---- */

typedef struct bkey {
	td_node node;
	uint32_t idx;
	uint64_t off;             /* snapshot offset (in batch) */
} bkey;

static int cmp_node_idx(const void *x, const void *y)
{
	const bkey *a = x, *b = y;
	if (a->node != b->node)
		return a->node < b->node ? -1 : 1;
	return (a->idx > b->idx) - (a->idx < b->idx);
}

static int cmp_off_idx(const void *x, const void *y)
{
	const bkey *a = x, *b = y;
	if (a->off != b->off)
		return a->off < b->off ? -1 : 1;
	return (a->idx > b->idx) - (a->idx < b->idx);
}

uint32_t td_edit_batch_seed(size_t n)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint32_t)ts.tv_nsec ^ (uint32_t)ts.tv_sec * 0x9E3779B1u ^ (uint32_t)n;
}

static int past_end(size_t i, uint64_t off, uint64_t size, const char *what)
{
	return td_fail(TD_EINVAL, "batch record %zu: offset %llu past the end of the file %s (%llu bytes)", i,
		       (unsigned long long)off, what, (unsigned long long)size);
}

/* What every file's resolution reads and writes. */
typedef struct bjob {
	const td_edit_rec *recs;
	int mode;
	const uint64_t *sizes;
	bkey *k;                  /* grouped by file, batch order inside */
	uint64_t *res;            /* in sequence, mixed: by batch index */
	td_bnode *tree;           /* mixed: n + files nodes, file s at seg[s] + s */
	uint32_t seed;            /* mixed: treap priorities */
	td_edit_rec *out;
	uint32_t *perm;
	const size_t *seg;        /* file groups: k[seg[j], seg[j+1]) */
	size_t s0, s1;            /* this worker's groups */
	int err;
} bjob;

/* Resolve one file's records k[t0, t1), file number seg_no. Sets an error
 * detail on failure. */
static int resolve_file(bjob *j, size_t seg_no, size_t t0, size_t t1)
{
	const td_edit_rec *recs = j->recs;
	bkey *k = j->k;
	uint64_t snap = j->sizes[k[t0].idx];
	if (j->mode == TD_BATCH_SNAPSHOT) {
		/* sorted by (snapshot offset, batch index); each record moves by
		 * the bytes the file's earlier records inserted: a prefix sum */
		qsort(k + t0, t1 - t0, sizeof *k, cmp_off_idx);
		uint64_t shift = 0;
		for (size_t t = t0; t < t1; t++) {
			uint32_t i = k[t].idx;
			if (k[t].off > snap)
				return past_end(i, k[t].off, snap, "before the batch");
			j->out[t] = recs[i];
			j->out[t].flags = 0;
			j->out[t].off = k[t].off + shift;
			if (j->perm)
				j->perm[t] = i;
			shift += recs[i].data_len;
		}
		return TD_OK;
	}
	uint64_t cur = snap; /* the size so far */
	/* mixed: the file's anchors, nodes 1..t1-t0 (slice t0 + file number) */
	td_bnode *tree = j->tree ? j->tree + t0 + seg_no : NULL;
	if (tree)
		td_bt_init(tree, j->seed);
	for (size_t t = t0; t < t1; t++) {
		uint32_t i = k[t].idx;
		const td_edit_rec *r = &recs[i];
		uint64_t at;
		uint32_t node = (uint32_t)(t - t0 + 1);
		if (j->mode == TD_BATCH_MIXED && (r->flags & TD_EDIT_SNAPSHOT)) {
			uint64_t a = r->off == TD_OFF_END ? snap : r->off;
			if (a > snap)
				return past_end(i, a, snap, "before the batch");
			at = td_bt_snap_to_cur(tree, a);
			td_bt_add(tree, node, a, r->data_len);
		} else {
			at = r->off == TD_OFF_END ? cur : r->off;
			if (at > cur)
				return past_end(i, at, cur, "at that point of the batch");
			if (tree)
				td_bt_add(tree, node, td_bt_cur_to_anchor(tree, at), r->data_len);
		}
		j->res[i] = at;
		cur += r->data_len;
	}
	return TD_OK;
}

static void *resolve_worker(void *arg)
{
	bjob *j = arg;
	for (size_t s = j->s0; s < j->s1 && !j->err; s++)
		j->err = resolve_file(j, s, j->seg[s], j->seg[s + 1]);
	return NULL;
}

/* Group k[0..n) by file, batch order inside: a counting sort when the node
 * ids are few for the batch, else a comparison sort. */
static int group_by_file(const td_edit *ed, bkey *k, size_t n)
{
	uint64_t nn = td_edit_next_node(ed);
	if (nn > 8 * (uint64_t)n + 4096) {
		qsort(k, n, sizeof *k, cmp_node_idx);
		return TD_OK;
	}
	uint32_t *cnt = calloc(nn + 1, sizeof *cnt);
	bkey *tmp = malloc(n * sizeof *tmp);
	if (!cnt || !tmp) {
		free(cnt);
		free(tmp);
		return td_fail(TD_ENOMEM, "batch of %zu records", n);
	}
	for (size_t i = 0; i < n; i++)
		cnt[k[i].node + 1]++;
	for (uint64_t v = 0; v < nn; v++)
		cnt[v + 1] += cnt[v];
	for (size_t i = 0; i < n; i++)
		tmp[cnt[k[i].node]++] = k[i];
	memcpy(k, tmp, n * sizeof *k);
	free(cnt);
	free(tmp);
	return TD_OK;
}

int td_edit_batch_resolve_mt(const td_edit *ed, const td_edit_rec *recs, size_t n, int mode, td_edit_rec *out,
			     uint32_t *perm, unsigned nthreads)
{
	if (n == 0)
		return TD_OK;
	if (nthreads == 0) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);
		nthreads = c > 0 ? (unsigned)c : 1;
	}
	if (n < 4096)
		nthreads = 1;
	uint64_t *sizes = malloc(n * sizeof *sizes);
	uint64_t *res = malloc(n * sizeof *res);
	bkey *k = malloc(n * sizeof *k);
	size_t *seg = malloc((n + 1) * sizeof *seg);
	td_bnode *tree = NULL;
	int err = TD_OK;
	if (!sizes || !res || !k || !seg) {
		err = td_fail(TD_ENOMEM, "batch of %zu records", n);
		goto out;
	}
	if ((err = td_edit_batch_sizes(ed, recs, n, mode, sizes)))
		goto out;
	if (mode == TD_BATCH_MIXED) {
		tree = malloc(2 * n * sizeof *tree); /* n records + at most n files */
		if (!tree) {
			err = td_fail(TD_ENOMEM, "batch of %zu records", n);
			goto out;
		}
	}
	for (size_t i = 0; i < n; i++) {
		k[i].node = recs[i].node;
		k[i].idx = (uint32_t)i;
		k[i].off = recs[i].off == TD_OFF_END ? sizes[i] : recs[i].off;
	}
	if ((err = group_by_file(ed, k, n)))
		goto out;
	size_t nseg = 0;
	for (size_t t = 0; t < n; t++)
		if (t == 0 || k[t].node != k[t - 1].node)
			seg[nseg++] = t;
	seg[nseg] = n;
	bjob base = { .recs = recs, .mode = mode, .sizes = sizes, .k = k, .res = res, .tree = tree,
		      .seed = td_edit_batch_seed(n), .out = out, .perm = perm, .seg = seg, .s0 = 0, .s1 = nseg,
		      .err = TD_OK };
	if (nthreads > nseg)
		nthreads = (unsigned)nseg;
	if (nthreads <= 1) {
		resolve_worker(&base);
		err = base.err;
	} else {
		/* contiguous runs of files with about n / nthreads records each */
		bjob *jobs = calloc(nthreads, sizeof *jobs);
		pthread_t *th = calloc(nthreads, sizeof *th);
		unsigned started = 0;
		if (!jobs || !th) {
			free(jobs);
			free(th);
			err = td_fail(TD_ENOMEM, "batch threads");
			goto out;
		}
		size_t s = 0;
		for (unsigned w = 0; w < nthreads; w++) {
			jobs[w] = base;
			jobs[w].s0 = s;
			size_t goal = n * (w + 1) / nthreads;
			while (s < nseg && (w == nthreads - 1 || seg[s + 1] <= goal || s == jobs[w].s0))
				s++;
			jobs[w].s1 = s;
		}
		for (unsigned w = 1; w < nthreads; w++)
			if (pthread_create(&th[w], NULL, resolve_worker, &jobs[w]) == 0)
				started = w;
			else
				break;
		resolve_worker(&jobs[0]);
		for (unsigned w = started + 1; w < nthreads; w++) /* not started: here */
			resolve_worker(&jobs[w]);
		for (unsigned w = 1; w <= started; w++)
			pthread_join(th[w], NULL);
		for (unsigned w = 0; w < nthreads && !err; w++)
			err = jobs[w].err;
		free(jobs);
		free(th);
		if (err) { /* the error detail lives on the worker's thread: redo here */
			free(sizes);
			free(res);
			free(k);
			free(seg);
			free(tree);
			return td_edit_batch_resolve_mt(ed, recs, n, mode, out, perm, 1);
		}
	}
	if (err || mode == TD_BATCH_SNAPSHOT)
		goto out;
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
	free(seg);
	free(tree);
	return err;
}

int td_edit_batch_resolve(const td_edit *ed, const td_edit_rec *recs, size_t n, int mode, td_edit_rec *out,
			  uint32_t *perm)
{
	return td_edit_batch_resolve_mt(ed, recs, n, mode, out, perm, 1);
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
