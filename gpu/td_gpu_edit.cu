/* td_gpu_edit: insert/append batches resolved on the GPU (in batch, in sequence, mixed), identical to td_edit_batch_resolve. */
#include <stdlib.h>
#include <string.h>

#define TD_BATCH_HD __host__ __device__
#include "td_edit_batch.h"
#include "td_err.h"
#include "td_gpu.h"
#include "td_gpu_dev.cuh"

/*
 * The records are checked on the host (td_edit_batch_sizes: types, flags,
 * files and their sizes before the batch); the offsets are worked out on
 * the device:
 *   in batch     stable radix sort by snapshot offset, then stable radix
 *                sort by file: the order (file, offset, batch index); an
 *                exclusive prefix sum of the inserted lengths in that order
 *                minus its value at the file's first record is each
 *                record's shift;
 *   in sequence  stable sort by file; the same prefix sum gives the file's
 *                size when the record comes (appends land there, offsets
 *                past it are errors);
 *   mixed        the sort by file, then one thread per file runs the
 *                per-file walk of td_edit_batch.h in batch order over its
 *                treap of anchors (O(k log k) for k records).
 * Any offset past its end sends the batch to the CPU resolver so that the
 * error names the same record as on the CPU.
 */

struct td_eb {
	uint64_t n;
	const uint32_t *node;      /* batch order */
	const uint64_t *off;       /* TD_OFF_END kept */
	const uint64_t *len;
	const uint64_t *size;      /* file size before the batch */
	const uint8_t *snap;       /* 1: in-batch meaning */
	uint64_t *key, *key2;      /* sort keys in / out */
	uint32_t *idx, *idx2;      /* batch indexes in / out (the order) */
	uint64_t *pre;             /* inserted lengths in sorted order, scanned */
	uint64_t *res;             /* resolved offsets */
	td_bnode *tree;            /* mixed: file h's treap at hpos[h] + h, 2n nodes */
	uint32_t seed;             /* mixed: treap priorities, per call */
	uint64_t *heads;           /* mixed: head flags, scanned */
	uint32_t *hpos;            /* mixed: first sorted position of each file */
	uint64_t *bad;             /* count of offsets past their end */
};

struct td_f_iota {
	td_eb x;
	TD_HD void operator()(uint64_t i) const
	{
		x.idx[i] = (uint32_t)i;
		x.key[i] = x.off[i] == TD_OFF_END ? x.size[i] : x.off[i];
	}
};

/* After the first sort (by offset): the file of each sorted record. */
struct td_f_nodekey {
	td_eb x;
	TD_HD void operator()(uint64_t k) const
	{
		x.key[k] = x.node[x.idx[k]];
	}
};

struct td_f_lens {
	td_eb x;
	TD_HD void operator()(uint64_t k) const
	{
		x.pre[k] = k < x.n ? x.len[x.idx2[k]] : 0;
	}
};

/* First sorted position of the file at sorted position k (keys sorted). */
TD_HD inline uint64_t td_eb_head(const td_eb &x, uint64_t k)
{
	uint64_t v = x.key2[k], lo = 0, hi = k;
	while (lo < hi) {
		uint64_t mid = (lo + hi) >> 1;
		if (x.key2[mid] < v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* In batch: sorted record k goes to its snapshot offset plus the bytes of
 * its file's records sorted before it. */
struct td_f_snapshot {
	td_eb x;
	TD_HD void operator()(uint64_t k) const
	{
		uint32_t i = x.idx2[k];
		uint64_t p = x.off[i] == TD_OFF_END ? x.size[i] : x.off[i];
		if (p > x.size[i])
			td_atomic_add(x.bad, 1);
		x.res[k] = p + x.pre[k] - x.pre[td_eb_head(x, k)];
	}
};

/* In sequence: the file's size when record i comes. */
struct td_f_sequence {
	td_eb x;
	TD_HD void operator()(uint64_t k) const
	{
		uint32_t i = x.idx2[k];
		uint64_t cur = x.size[i] + x.pre[k] - x.pre[td_eb_head(x, k)];
		uint64_t at = x.off[i] == TD_OFF_END ? cur : x.off[i];
		if (at > cur)
			td_atomic_add(x.bad, 1);
		x.res[i] = at;
	}
};

struct td_f_headflag {
	td_eb x;
	TD_HD void operator()(uint64_t k) const
	{
		x.heads[k] = k < x.n && (k == 0 || x.key2[k] != x.key2[k - 1]);
	}
};

struct td_f_headpos {
	td_eb x;
	TD_HD void operator()(uint64_t k) const
	{
		if (k == 0 || x.key2[k] != x.key2[k - 1])
			x.hpos[x.heads[k]] = (uint32_t)k;
	}
};

/* Mixed: one thread walks one file's records in batch order (the sort was
 * stable) over its own treap (td_bt_add): O(k log k) for k records. */
struct td_f_mixed {
	td_eb x;
	uint64_t nfiles;
	TD_HD void operator()(uint64_t h) const
	{
		uint64_t k0 = x.hpos[h], k1 = h + 1 < nfiles ? x.hpos[h + 1] : x.n;
		td_bnode *tree = x.tree + k0 + h;
		uint64_t snapsz = x.size[x.idx2[k0]], cur = snapsz;
		td_bt_init(tree, x.seed);
		for (uint64_t t = 0; t < k1 - k0; t++) {
			uint32_t i = x.idx2[k0 + t];
			uint64_t a, at;
			if (x.snap[i]) {
				a = x.off[i] == TD_OFF_END ? snapsz : x.off[i];
				if (a > snapsz) {
					td_atomic_add(x.bad, 1);
					return;
				}
				at = td_bt_snap_to_cur(tree, a);
			} else {
				at = x.off[i] == TD_OFF_END ? cur : x.off[i];
				if (at > cur) {
					td_atomic_add(x.bad, 1);
					return;
				}
				a = td_bt_cur_to_anchor(tree, at);
			}
			x.res[i] = at;
			td_bt_add(tree, (uint32_t)(t + 1), a, x.len[i]);
			cur += x.len[i];
		}
	}
};

static int td_bits(uint64_t v)
{
	int b = 0;
	while (v) {
		b++;
		v >>= 1;
	}
	return b ? b : 1;
}

#define TD_EBCK(call)                          \
	do {                                   \
		if ((ce = (call)) != cudaSuccess) \
			goto fail;             \
	} while (0)

#ifndef TD_GPU_EMU
/* 0: run on the device; 1: the CPU; < 0: an error for strict callers. */
static int td_eb_device(const td_gpu_run *c)
{
	int device = c ? c->device : 0, ndev = 0;
	int strict = c && c->strict;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || device < 0 || device >= ndev)
		return strict ? td_fail(TD_ENOGPU, "no GPU: no CUDA device %d", device) : 1;
	cudaError_t ce = cudaSetDevice(device);
	if (ce != cudaSuccess)
		return strict ? td_fail(TD_EIO, "gpu edit batch: CUDA: %s", cudaGetErrorString(ce)) : 1;
	return 0;
}
#endif

extern "C" int td_gpu_edit_resolve(void *ctx, const td_edit *ed, const td_edit_rec *recs, size_t n, int mode,
				   td_edit_rec *out, uint32_t *perm)
{
	td_gpu_run *c = (td_gpu_run *)ctx;
	if (c)
		c->ran_on_gpu = 0;
	if (n == 0)
		return TD_OK;
#ifndef TD_GPU_EMU
	int dv = td_eb_device(c);
	if (dv < 0)
		return dv;
	if (dv > 0)
		return td_edit_batch_resolve(ed, recs, n, mode, out, perm);
#endif
	/* host: checks, sizes, and the columns the device reads */
	size_t hb = n * (4 + 8 + 8 + 8 + 1 + 8 + 4);
	uint8_t *h = (uint8_t *)malloc(hb);
	if (!h)
		return td_fail(TD_ENOMEM, "gpu edit batch of %zu records", n);
	uint64_t *hsize = (uint64_t *)h, *hoff = hsize + n, *hlen = hoff + n, *hres = hlen + n;
	uint32_t *hnode = (uint32_t *)(hres + n), *hidx = hnode + n;
	uint8_t *hsnap = (uint8_t *)(hidx + n);
	int err = td_edit_batch_sizes(ed, recs, n, mode, hsize);
	if (err) {
		free(h);
		return err;
	}
	uint64_t maxkey = 0, maxnode = 0;
	for (size_t i = 0; i < n; i++) {
		hnode[i] = recs[i].node;
		hoff[i] = recs[i].off;
		hlen[i] = recs[i].data_len;
		hsnap[i] = mode == TD_BATCH_SNAPSHOT || (mode == TD_BATCH_MIXED && (recs[i].flags & TD_EDIT_SNAPSHOT));
		uint64_t p = recs[i].off == TD_OFF_END ? hsize[i] : recs[i].off;
		maxkey = p > maxkey ? p : maxkey;
		maxnode = recs[i].node > maxnode ? recs[i].node : maxnode;
	}
	cudaStream_t st = 0;
	cudaError_t ce = cudaSuccess;
	uint64_t bad = 0;
	td_eb x;
	memset(&x, 0, sizeof x);
	x.n = n;
	x.seed = td_edit_batch_seed(n);
	void *blk = NULL;
	{
		/* one device block: the treaps (mixed: n records + at most n
		 * files), then columns, keys, indexes */
		size_t nn = n + 1, ntree = mode == TD_BATCH_MIXED ? 2 * nn : 0;
		size_t bytes = ntree * sizeof(td_bnode) + nn * (8 * 9 + 4 * 4) + nn + 64;
		TD_EBCK(td_dalloc(&blk, bytes));
		x.tree = (td_bnode *)blk;
		uint64_t *q = (uint64_t *)(x.tree + ntree);
		x.off = q;
		x.len = q + nn;
		x.size = q + 2 * nn;
		x.key = q + 3 * nn;
		x.key2 = q + 4 * nn;
		x.pre = q + 5 * nn;
		x.res = q + 6 * nn;
		x.heads = q + 7 * nn;
		x.bad = q + 8 * nn;
		uint32_t *u = (uint32_t *)(q + 8 * nn + 1);
		x.node = u;
		x.idx = u + nn;
		x.idx2 = u + 2 * nn;
		x.hpos = u + 3 * nn;
		x.snap = (uint8_t *)(u + 4 * nn);
		TD_EBCK(td_h2d((void *)x.off, hoff, n * 8, st));
		TD_EBCK(td_h2d((void *)x.len, hlen, n * 8, st));
		TD_EBCK(td_h2d((void *)x.size, hsize, n * 8, st));
		TD_EBCK(td_h2d((void *)x.node, hnode, n * 4, st));
		TD_EBCK(td_h2d((void *)x.snap, hsnap, n, st));
		TD_EBCK(td_dzero(x.bad, 8, st));
		TD_EBCK(td_each(n, td_f_iota{x}, st));
		if (mode == TD_BATCH_SNAPSHOT) {
			/* (file, offset, index): by offset, then stably by file */
			TD_EBCK(td_dsort(x.key, x.key2, x.idx, x.idx2, n, td_bits(maxkey), st));
			td_eb y = x; /* second sort: idx2 -> idx */
			y.idx = x.idx2;
			TD_EBCK(td_each(n, td_f_nodekey{y}, st));
			TD_EBCK(td_dsort(x.key, x.key2, x.idx2, x.idx, n, td_bits(maxnode), st));
			y = x;
			y.idx2 = x.idx; /* the final order */
			TD_EBCK(td_each(n + 1, td_f_lens{y}, st));
			TD_EBCK(td_dscan(x.pre, x.pre, n + 1, st));
			TD_EBCK(td_each(n, td_f_snapshot{y}, st));
			TD_EBCK(td_d2h(hidx, x.idx, n * 4, st));
		} else {
			TD_EBCK(td_each(n, td_f_nodekey{x}, st)); /* idx is the identity */
			TD_EBCK(td_dsort(x.key, x.key2, x.idx, x.idx2, n, td_bits(maxnode), st));
			TD_EBCK(td_each(n + 1, td_f_lens{x}, st));
			TD_EBCK(td_dscan(x.pre, x.pre, n + 1, st));
			if (mode == TD_BATCH_SEQUENCE) {
				TD_EBCK(td_each(n, td_f_sequence{x}, st));
			} else {
				uint64_t nfiles = 0;
				TD_EBCK(td_each(n + 1, td_f_headflag{x}, st));
				TD_EBCK(td_dscan(x.heads, x.heads, n + 1, st));
				TD_EBCK(td_d2h(&nfiles, x.heads + n, 8, st));
				TD_EBCK(td_dsync(st));
				TD_EBCK(td_each(n, td_f_headpos{x}, st));
				TD_EBCK(td_each(nfiles, td_f_mixed{x, nfiles}, st));
			}
		}
		TD_EBCK(td_d2h(hres, x.res, n * 8, st));
		TD_EBCK(td_d2h(&bad, x.bad, 8, st));
		TD_EBCK(td_dsync(st));
	}
	td_dfree(blk);
	if (bad) { /* the CPU names the record exactly as it would */
		free(h);
		return td_edit_batch_resolve(ed, recs, n, mode, out, perm);
	}
	for (size_t k = 0; k < n; k++) {
		size_t i = mode == TD_BATCH_SNAPSHOT ? hidx[k] : k;
		out[k] = recs[i];
		out[k].flags = 0;
		out[k].off = hres[k];
		if (perm)
			perm[k] = (uint32_t)i;
	}
	free(h);
	if (c)
		c->ran_on_gpu = 1;
	return TD_OK;
fail:
	td_dfree(blk);
	free(h);
	(void)cudaGetLastError();
	if (c && c->strict)
		return td_fail(TD_EIO, "gpu edit batch: CUDA: %s", cudaGetErrorString(ce));
	return td_edit_batch_resolve(ed, recs, n, mode, out, perm);
}

extern "C" int td_gpu_edit_apply_batch(void *ctx, td_edit *ed, const td_edit_rec *recs, size_t n, int mode,
				       size_t *napplied)
{
	if (napplied)
		*napplied = 0;
	if (n == 0)
		return TD_OK;
	td_edit_rec *out = (td_edit_rec *)malloc(n * sizeof *out);
	if (!out)
		return td_fail(TD_ENOMEM, "gpu edit batch of %zu records", n);
	int err = td_gpu_edit_resolve(ctx, ed, recs, n, mode, out, NULL);
	if (!err)
		err = td_edit_apply_resolved(ed, out, n, napplied);
	free(out);
	return err;
}
