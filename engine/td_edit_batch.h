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
 * Costs: in sequence and in batch O(n log n); mixed O(k^2) per file of k
 * records (a sequential walk per file). Reads the state only: a resolve may
 * run beside other readers.
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

/* Snapshot resolution of one file's mixed records, shared with the GPU
 * resolver's per-file walk (gpu/td_gpu_edit.cu runs the same steps):
 * `anchor`/`alen` hold the k earlier records' snapshot anchors and lengths,
 * sorted by anchor. For a snapshot record at p: returns the current offset
 * just before snapshot byte p. */
TD_BATCH_HD static inline uint64_t td_batch_snap_to_cur(const uint64_t *anchor, const uint64_t *alen, size_t k, uint64_t p)
{
	uint64_t cur = p;
	for (size_t j = 0; j < k && anchor[j] <= p; j++)
		cur += alen[j];
	return cur;
}

/* For an in-sequence record at current offset q (q <= snapshot size plus
 * every earlier length): the least snapshot anchor a whose current offset
 * a + (lengths anchored at or before a) is >= q. */
TD_BATCH_HD static inline uint64_t td_batch_cur_to_anchor(const uint64_t *anchor, const uint64_t *alen, size_t k, uint64_t q)
{
	uint64_t sum = 0;
	size_t j = 0;
	/* between anchors: a in [prev, anchor[j]) has current offset a + sum */
	for (;;) {
		uint64_t lo = j ? anchor[j - 1] : 0;
		uint64_t a = q > sum ? q - sum : 0;
		if (a < lo)
			a = lo;
		if (j == k || a < anchor[j])
			return a;
		/* a >= anchor[j]: take every record anchored at anchor[j] */
		uint64_t v = anchor[j];
		while (j < k && anchor[j] == v)
			sum += alen[j++];
		if (v + sum >= q)
			return v;
	}
}

/* Insert (a, len) into the sorted arrays of k entries (room for k + 1). */
TD_BATCH_HD static inline void td_batch_anchor_add(uint64_t *anchor, uint64_t *alen, size_t k, uint64_t a, uint64_t len)
{
	size_t j = k;
	while (j > 0 && anchor[j - 1] > a) {
		anchor[j] = anchor[j - 1];
		alen[j] = alen[j - 1];
		j--;
	}
	anchor[j] = a;
	alen[j] = len;
}

#ifdef __cplusplus
}
#endif
#endif
