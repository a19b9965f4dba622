/* td_edit_batch: insert/append batches with both offset meanings, resolved into the in-sequence records td_edit applies. */
#ifndef TD_EDIT_BATCH_H
#define TD_EDIT_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "td_edit.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A batch is an array of TD_REC_INSERT records (td_edit_rec: node, off,
 * data, data_len, time), over any number of files. The GPU random-access
 * paper gives an offset two meanings:
 *
 *   in sequence  the offset sees the earlier records of the batch (the file
 *                as left by them): td_edit's own meaning;
 *   in batch     the offset refers to the file as it was before the batch
 *                (its snapshot); inserts at the same snapshot offset keep
 *                batch order (the earlier record's bytes come first).
 *
 * A mixed batch says per record which meaning it has (TD_EDIT_SNAPSHOT in
 * flags = in batch). There, a snapshot offset p stands for "just before
 * snapshot byte p" (p = the snapshot size: the end): the record goes after
 * every byte inserted before that byte so far, whichever meaning put it there.
 * An offset of TD_OFF_END appends: the end of the file as the record's
 * meaning sees it (in sequence: after the earlier records' bytes; in batch:
 * the snapshot's end, which is the current end too).
 *
 * Resolving turns a batch into ordinary in-sequence records (concrete
 * offsets, flags cleared) whose application in order gives the batch's
 * meaning; those are what td_edit applies and the journal stores: one
 * representation. The order: in sequence and mixed keep batch order; in
 * batch sorts by (node, snapshot offset, batch index), so each record is
 * shifted by the records before it of the same file, a prefix sum (the GPU
 * resolver in gpu/td_gpu.h computes the same records in parallel).
 *
 * Costs: in sequence and in batch O(n log n); mixed O(k log k) expected per
 * file of k records (a sequential walk per file over a treap, td_bt_add).
 * Reads the state only: a resolve may run beside other readers.
 */

#define TD_OFF_END UINT64_MAX      /* batch offset: the end of the file (append) */

/* The per-file helpers below also run on the GPU: a CUDA file defines
 * TD_BATCH_HD as __host__ __device__ before including this header. */
#ifndef TD_BATCH_HD
#define TD_BATCH_HD
#endif
#define TD_EDIT_SNAPSHOT 0x100u    /* record flag, mixed batches: off is a snapshot offset */

enum td_batch_mode {
	TD_BATCH_SEQUENCE = 0,     /* every offset in sequence */
	TD_BATCH_SNAPSHOT = 1,     /* every offset in batch */
	TD_BATCH_MIXED = 2         /* per record: TD_EDIT_SNAPSHOT set = in batch */
};

/* Check the batch and give each record its file's size before the batch
 * (sizes[i], n values). Errors, detail naming the record: TD_EINVAL (not
 * TD_REC_INSERT, bad mode, data_len > 0 without data, unknown flags, a
 * node that is not a file), TD_EISDIR, TD_ERANGE (sizes over 2^62). */
int td_edit_batch_sizes(const td_edit *ed, const td_edit_rec *recs, size_t n, int mode, uint64_t *sizes);

/* Resolve the batch recs[0..n) into out[0..n) (see above; out must not
 * alias recs; data pointers are shared). perm (may be NULL) receives, for
 * each out[k], the index of the record it came from. Errors: those of
 * td_edit_batch_sizes, TD_EINVAL for an offset past the end it refers to
 * (detail names the record), TD_ENOMEM. */
int td_edit_batch_resolve(const td_edit *ed, const td_edit_rec *recs, size_t n, int mode, td_edit_rec *out,
			  uint32_t *perm);

/* td_edit_batch_resolve on `nthreads` threads (0: one per core): records
 * are grouped by file, and the files' groups are split among the threads.
 * Same out[], perm[] and errors. Small batches run on the calling thread. */
int td_edit_batch_resolve_mt(const td_edit *ed, const td_edit_rec *recs, size_t n, int mode, td_edit_rec *out,
			     uint32_t *perm, unsigned nthreads);

/* Resolve, then td_edit_apply() the records in order (each one is logged
 * by the journal hook first). Nothing is applied when resolving fails.
 * *napplied (may be NULL) receives how many records were applied: on an
 * error of td_edit_apply the first *napplied are applied and logged. */
int td_edit_apply_batch(td_edit *ed, const td_edit_rec *recs, size_t n, int mode, size_t *napplied);

/* Apply already resolved records (from td_edit_batch_resolve or the GPU
 * resolver) in order; *napplied as above. */
int td_edit_apply_resolved(td_edit *ed, const td_edit_rec *out, size_t n, size_t *napplied);

/*
 * Snapshot resolution of one file's mixed records, shared with the GPU
 * resolver's per-file walk (gpu/td_gpu_edit.cu runs the same steps). The
 * state is a multiset of anchors: each earlier record of the file is
 * anchored just before a snapshot byte a (0 <= a <= snapshot size) and holds
 * its length; S(a) is the sum of the lengths anchored at or before a. A
 * snapshot record at p lands at current offset p + S(p) (after every byte
 * inserted before snapshot byte p so far) and is anchored at p; an
 * in-sequence record at current offset q is anchored at the least a with
 * a + S(a) >= q (the number of snapshot bytes before q).
 *
 * The anchors live in a treap keyed by anchor with subtree sums of the
 * lengths, so each step is O(log k) expected (k records of the file so far):
 * O(k log k) per file. The heap priorities are a hash of the record number
 * and a seed the resolver draws per call, so no batch can be built to
 * unbalance the tree; the shape never changes the results. Node j (1..k) of
 * a file is t[j]; t[0] is the empty node (sum 0), holds the root in t[0].r
 * and the seed in t[0].key.
 */
typedef struct td_bnode {
	uint64_t key;              /* snapshot anchor */
	uint64_t len;              /* the record's length */
	uint64_t sum;              /* lengths in this subtree */
	uint32_t l, r;             /* children (0: none) */
} td_bnode;

/* A seed for the treaps' priorities, different from call to call (the
 * clock and n). */
uint32_t td_edit_batch_seed(size_t n);

/* Empty tree with priority seed `seed` (t has room for the file's records
 * plus one). */
TD_BATCH_HD static inline void td_bt_init(td_bnode *t, uint32_t seed)
{
	t[0].key = seed;
	t[0].len = t[0].sum = 0;
	t[0].l = t[0].r = 0;
}

/* Whether node x sits above node y: a mix of the number and the seed, ties
 * broken by the number. */
TD_BATCH_HD static inline int td_bt_above(const td_bnode *t, uint32_t x, uint32_t y)
{
	uint32_t s = (uint32_t)t[0].key;
	uint32_t hx = (x ^ s) * 0x9E3779B1u, hy = (y ^ s) * 0x9E3779B1u;
	hx ^= hx >> 15;
	hy ^= hy >> 15;
	hx *= 0x85EBCA77u;
	hy *= 0x85EBCA77u;
	hx ^= hx >> 13;
	hy ^= hy >> 13;
	return hx != hy ? hx > hy : x < y;
}

/* S(p): the lengths anchored at or before p (le = 1), or before p (le = 0). */
TD_BATCH_HD static inline uint64_t td_bt_sum(const td_bnode *t, uint64_t p, int le)
{
	uint64_t s = 0;
	for (uint32_t x = t[0].r; x;) {
		if (t[x].key < p || (le && t[x].key == p)) {
			s += t[t[x].l].sum + t[x].len;
			x = t[x].r;
		} else {
			x = t[x].l;
		}
	}
	return s;
}

/* For a snapshot record at p: the current offset just before snapshot byte p. */
TD_BATCH_HD static inline uint64_t td_bt_snap_to_cur(const td_bnode *t, uint64_t p)
{
	return p + td_bt_sum(t, p, 1);
}

/* For an in-sequence record at current offset q (q <= snapshot size plus
 * every earlier length): the least anchor a with a + S(a) >= q. In key
 * order, key + (lengths up to and including the node) never decreases: find
 * the first node v where it reaches q; the answer lies after the anchors
 * before v, at q - S(< v), or at v itself. */
TD_BATCH_HD static inline uint64_t td_bt_cur_to_anchor(const td_bnode *t, uint64_t q)
{
	uint64_t acc = 0, v = 0;
	int found = 0;
	for (uint32_t x = t[0].r; x;) {
		uint64_t upto = acc + t[t[x].l].sum + t[x].len;
		if (t[x].key + upto >= q) {
			v = t[x].key;
			found = 1;
			x = t[x].l;
		} else {
			acc = upto;
			x = t[x].r;
		}
	}
	if (!found)
		return q - acc; /* acc: every length */
	uint64_t a = q - td_bt_sum(t, v, 0);
	return a < v ? a : v;
}

/* Add node j (the file's j-th record, 1-based, nodes 1..j-1 already in)
 * anchored at a with length len: top down, no stack. Down to where j's
 * priority belongs, adding len to the sums on the way; there the subtree is
 * split into anchors <= a (left of j: equal anchors keep batch order) and
 * > a, each split node's sum set from what is left of its side's total. */
TD_BATCH_HD static inline void td_bt_add(td_bnode *t, uint32_t j, uint64_t a, uint64_t len)
{
	uint32_t *link = &t[0].r;
	while (*link && td_bt_above(t, *link, j)) {
		uint32_t y = *link;
		t[y].sum += len;
		link = a < t[y].key ? &t[y].l : &t[y].r;
	}
	uint32_t s = *link;
	uint64_t total = t[s].sum;
	uint64_t lrem = 0;
	for (uint32_t x = s; x;) {
		if (t[x].key <= a) {
			lrem += t[t[x].l].sum + t[x].len;
			x = t[x].r;
		} else {
			x = t[x].l;
		}
	}
	uint64_t rrem = total - lrem;
	uint32_t *lp = &t[j].l, *rp = &t[j].r;
	for (uint32_t x = s; x;) {
		if (t[x].key <= a) {
			*lp = x;
			t[x].sum = lrem;
			lrem -= t[t[x].l].sum + t[x].len;
			lp = &t[x].r;
			x = t[x].r;
		} else {
			*rp = x;
			t[x].sum = rrem;
			rrem -= t[t[x].r].sum + t[x].len;
			rp = &t[x].l;
			x = t[x].l;
		}
	}
	*lp = 0;
	*rp = 0;
	t[j].key = a;
	t[j].len = len;
	t[j].sum = total + len;
	*link = j;
}

#ifdef __cplusplus
}
#endif
#endif
