/* td_gpu_index: the archive's derived indexes built on the GPU, level by level, identical to td_index_build_cpu. */
#include <stdlib.h>
#include <string.h>

#include "td_err.h"
#include "td_gpu.h"
#include "td_gpu_dev.cuh"
#include "td_index.h"

/*
 * Two phases, as in the TPDS'23 random-access paper:
 *
 * 1. Over the rule DAG, level by level (a rule's level is its nesting depth:
 *    1 + the deepest rule it names). Launch k finishes exactly the rules of
 *    level k: a rule is ready once every rule it names finished in an
 *    earlier launch, and then gets its expanded length and word count
 *    (bottom up). Going back down, launch k passes the number of times each
 *    level-k rule is used inside regular files on to the rules and words it
 *    names (top down, integer atomics), which gives WORD_FREQ.
 * 2. Over the root sequence, in order: exclusive prefix sums of the root
 *    elements' lengths and word counts give E_GSTART, ROOT_SAMPLES and
 *    E_NWORDS; one more prefix sum over the rules' symbols gives the offset
 *    samples of long rules.
 * Every value is an integer sum, so the result does not depend on thread
 * order and equals the CPU builder's bit for bit.
 */

typedef unsigned long long u64;

/* Everything the kernels read and write, as device pointers. */
struct td_ix {
	uint64_t W2, T, R, nsyms, ngroups, nroot, ne, nlong, nrsamp, nsamp;
	uint32_t shift;
	const uint32_t *syms;
	const td_disk_group *groups;
	const uint16_t *term;
	const uint32_t *root;
	const uint64_t *eroot;
	const uint8_t *isfile;
	const uint64_t *elong;
	const td_disk_group *lg;   /* the long groups only */
	uint64_t *rfirst;
	uint32_t *rn;
	uint32_t *level;           /* 0 until the rule is done */
	uint64_t *len, *wc, *freq, *wfreq;
	uint64_t *rootlen, *rootwc; /* nroot + 1, scanned in place */
	uint64_t *symlen;          /* nsyms + 1, scanned in place */
	uint64_t *rsamp, *rootsamp, *gstart, *enw;
	uint64_t *pending;
};

/* rfirst/rn of rule r, from the groups. */
struct td_f_rhs {
	td_ix x;
	TD_HD void operator()(uint64_t r) const
	{
		uint64_t lo = 0, hi = x.ngroups;
		while (hi - lo > 1) {
			uint64_t mid = (lo + hi) >> 1;
			if (x.groups[mid].first_rule <= r)
				lo = mid;
			else
				hi = mid;
		}
		const td_disk_group g = x.groups[lo];
		x.rfirst[r] = g.first_sym + (r - g.first_rule) * g.len;
		x.rn[r] = g.len;
		x.level[r] = 0;
	}
};

/* Bottom up, launch `it`: finish the rules whose children all finished in
 * launches before `it`. */
struct td_f_up {
	td_ix x;
	uint32_t it;
	TD_HD void operator()(uint64_t r) const
	{
		if (x.level[r])
			return;
		const uint32_t *rhs = x.syms + x.rfirst[r];
		uint32_t n = x.rn[r];
		uint64_t len = 0, words = 0;
		for (uint32_t j = 0; j < n; j++) {
			uint64_t s = rhs[j];
			if (s < x.T) {
				len += x.term[s];
				words += s < x.W2;
				continue;
			}
			uint32_t lv = x.level[s - x.T];
			if (lv == 0 || lv >= it)
				return; /* not ready: a later launch */
			len += x.len[s - x.T];
			words += x.wc[s - x.T];
		}
		x.len[r] = len;
		x.wc[r] = words;
		x.level[r] = it;
	}
};

struct td_f_count_pending {
	td_ix x;
	TD_HD void operator()(uint64_t r) const
	{
		if (!x.level[r])
			td_atomic_add(x.pending, 1);
	}
};

/* Root element k: its length and word count (for the scans), and the uses
 * of rules and words directly in regular files. */
struct td_f_root {
	td_ix x;
	TD_HD void operator()(uint64_t k) const
	{
		/* the entry owning k: last e with eroot[e] <= k (empty ranges skipped) */
		uint64_t lo = 0, hi = x.ne;
		while (hi - lo > 1) {
			uint64_t mid = (lo + hi) >> 1;
			if (x.eroot[mid] <= k)
				lo = mid;
			else
				hi = mid;
		}
		bool file = x.isfile[lo] != 0;
		uint64_t s = x.root[k];
		if (s < x.T) {
			x.rootlen[k] = x.term[s];
			x.rootwc[k] = s < x.W2;
			if (file && s < x.W2)
				td_atomic_add(&x.wfreq[s >> 1], 1);
		} else {
			x.rootlen[k] = x.len[s - x.T];
			x.rootwc[k] = x.wc[s - x.T];
			if (file)
				td_atomic_add(&x.freq[s - x.T], 1);
		}
	}
};

/* Top down, level `lv`: a finished rule frequency flows to its children. */
struct td_f_down {
	td_ix x;
	uint32_t lv;
	TD_HD void operator()(uint64_t r) const
	{
		if (x.level[r] != lv)
			return;
		uint64_t f = x.freq[r];
		if (!f)
			return;
		const uint32_t *rhs = x.syms + x.rfirst[r];
		uint32_t n = x.rn[r];
		for (uint32_t j = 0; j < n; j++) {
			uint64_t s = rhs[j];
			if (s < x.W2)
				td_atomic_add(&x.wfreq[s >> 1], f);
			else if (s >= x.T)
				td_atomic_add(&x.freq[s - x.T], f);
		}
	}
};

/* Per entry, after the scans: start offset and words. */
struct td_f_entry {
	td_ix x;
	TD_HD void operator()(uint64_t e) const
	{
		uint64_t a = x.eroot[e];
		x.gstart[e] = x.rootlen[a];
		if (e == x.ne)
			return;
		uint64_t b = x.eroot[e + 1];
		x.enw[e] = x.isfile[e] ? x.rootwc[b] - x.rootwc[a] + x.elong[e] : 0;
	}
};

struct td_f_rootsamp {
	td_ix x;
	TD_HD void operator()(uint64_t j) const
	{
		x.rootsamp[j] = x.rootlen[j << x.shift];
	}
};

/* Length of every rule symbol position (for the long rules' samples). */
struct td_f_symlen {
	td_ix x;
	TD_HD void operator()(uint64_t p) const
	{
		uint64_t s = x.syms[p];
		x.symlen[p] = s < x.T ? x.term[s] : x.len[s - x.T];
	}
};

/* Sample q of RULE_SAMPLES: find its long group, rule and symbol. */
struct td_f_rulesamp {
	td_ix x;
	uint64_t nlg;
	TD_HD void operator()(uint64_t q) const
	{
		uint64_t lo = 0, hi = nlg;
		while (hi - lo > 1) {
			uint64_t mid = (lo + hi) >> 1;
			if (x.lg[mid].first_sample <= q)
				lo = mid;
			else
				hi = mid;
		}
		const td_disk_group g = x.lg[lo];
		uint64_t per = ((uint64_t)g.len + (UINT64_C(1) << x.shift) - 1) >> x.shift;
		uint64_t k = (q - g.first_sample) / per, j = (q - g.first_sample) % per;
		uint64_t first = g.first_sym + k * g.len;
		x.rsamp[q] = x.symlen[first + (j << x.shift)] - x.symlen[first];
	}
};

#define TD_IXCK(call)                          \
	do {                                   \
		if ((ce = (call)) != cudaSuccess) \
			goto fail;             \
	} while (0)

#ifndef TD_GPU_EMU
/* Pick the device: 0 to go on, 1 to let the CPU build (no device, too
 * little free memory), or an error for strict callers. */
static int td_ix_device(const td_gpu_run *c, const td_index_in *in)
{
	int device = c ? c->device : 0;
	int ndev = 0;
	int strict = c && c->strict;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || device < 0 || device >= ndev)
		return strict ? td_fail(TD_ENOGPU, "no GPU: no CUDA device %d", device) : 1;
	cudaError_t ce = cudaSetDevice(device);
	size_t fre = 0, tot = 0;
	if (ce == cudaSuccess)
		ce = cudaMemGetInfo(&fre, &tot);
	if (ce != cudaSuccess)
		return strict ? td_fail(TD_EIO, "gpu index build: CUDA: %s", cudaGetErrorString(ce)) : 1;
	/* device bytes, roughly; more than is free: the CPU */
	uint64_t need = in->nrulesyms * 12 + (uint64_t)in->nrules * 40 + in->nroot * 20 + (uint64_t)in->nentries * 40 +
			in->nwords * 8 + in->nrulesamples * 8 + in->nterm * 2 + (UINT64_C(64) << 20);
	if (need > fre)
		return strict ? td_fail(TD_ENOMEM, "gpu index build: %llu device bytes needed, %zu free",
					(unsigned long long)need, fre) : 1;
	return 0;
}
#endif

/* The counts of x and the long groups (malloc'd into *hlg, *nlg of them).
 * TD_OK or TD_ENOMEM. */
static int td_ix_setup(const td_index_in *in, td_ix *x, td_disk_group **hlg, size_t *nlg)
{
	memset(x, 0, sizeof *x);
	x->W2 = 2 * in->nwords;
	x->T = in->nterm;
	x->R = in->nrules;
	x->nsyms = in->nrulesyms;
	x->ngroups = in->ngroups;
	x->nroot = in->nroot;
	x->ne = in->nentries;
	x->nrsamp = in->nrulesamples;
	x->nsamp = td_index_nroot_samples(in->nroot, in->sample_shift);
	x->shift = in->sample_shift;
	*nlg = 0;
	*hlg = (td_disk_group *)malloc((in->ngroups + 1) * sizeof **hlg);
	if (!*hlg)
		return td_fail(TD_ENOMEM, "gpu index build: host memory");
	for (uint64_t g = 0; g < in->ngroups; g++)
		if (in->groups[g].first_sample != UINT64_MAX)
			(*hlg)[(*nlg)++] = in->groups[g];
	return TD_OK;
}

/* One device block (*blk), carved into x's arrays (256-byte aligned). */
static cudaError_t td_ix_alloc(const td_index_in *in, size_t nlg, td_ix *x, void **blk)
{
	const uint64_t R = x->R, ne = x->ne, nsamp = x->nsamp;
	uint64_t boff = 0;
	uint8_t *base = NULL;
#define TD_IXARRAYS(X)                                                  \
	X(syms, uint32_t, in->nrulesyms)                                \
	X(groups, td_disk_group, in->ngroups)                           \
	X(term, uint16_t, in->nterm)                                    \
	X(root, uint32_t, in->nroot)                                    \
	X(eroot, uint64_t, ne + 1)                                      \
	X(isfile, uint8_t, ne + 1)                                      \
	X(elong, uint64_t, ne + 1)                                      \
	X(lg, td_disk_group, nlg + 1)                                   \
	X(rfirst, uint64_t, R + 1)                                      \
	X(rn, uint32_t, R + 1)                                          \
	X(level, uint32_t, R + 1)                                       \
	X(len, uint64_t, R + 1)                                         \
	X(wc, uint64_t, R + 1)                                          \
	X(freq, uint64_t, R + 1)                                        \
	X(wfreq, uint64_t, in->nwords + 1)                              \
	X(rootlen, uint64_t, in->nroot + 1)                             \
	X(rootwc, uint64_t, in->nroot + 1)                              \
	X(symlen, uint64_t, in->nrulesamples ? in->nrulesyms + 1 : 1)   \
	X(rsamp, uint64_t, in->nrulesamples + 1)                        \
	X(rootsamp, uint64_t, nsamp)                                    \
	X(gstart, uint64_t, ne + 1)                                     \
	X(enw, uint64_t, ne + 1)                                        \
	X(pending, uint64_t, 1)
#define TD_IXSIZE(field, type, count) boff += ((uint64_t)(count) * sizeof(type) + 255) & ~UINT64_C(255);
#define TD_IXCARVE(field, type, count)                                  \
	x->field = (type *)(base + boff);                               \
	boff += ((uint64_t)(count) * sizeof(type) + 255) & ~UINT64_C(255);
	TD_IXARRAYS(TD_IXSIZE)
	cudaError_t ce = td_dalloc(blk, boff);
	if (ce != cudaSuccess)
		return ce;
	base = (uint8_t *)*blk;
	boff = 0;
	TD_IXARRAYS(TD_IXCARVE)
#undef TD_IXSIZE
#undef TD_IXCARVE
#undef TD_IXARRAYS
	return cudaSuccess;
}

/* The inputs up to the device, the sums zeroed, each rule's symbols found. */
static cudaError_t td_ix_upload(const td_ix &x, const td_index_in *in, const td_disk_group *hlg, size_t nlg,
				cudaStream_t st)
{
	cudaError_t ce = cudaSuccess;
	const uint64_t R = x.R, ne = x.ne;
	TD_IXCK(td_h2d((void *)x.syms, in->rule_syms, in->nrulesyms * 4, st));
	TD_IXCK(td_h2d((void *)x.groups, in->groups, in->ngroups * sizeof(td_disk_group), st));
	TD_IXCK(td_h2d((void *)x.term, in->term_len, in->nterm * 2, st));
	TD_IXCK(td_h2d((void *)x.root, in->root, in->nroot * 4, st));
	TD_IXCK(td_h2d((void *)x.eroot, in->e_root, (ne + 1) * 8, st));
	TD_IXCK(td_h2d((void *)x.isfile, in->e_isfile, ne, st));
	TD_IXCK(td_h2d((void *)x.elong, in->e_longwords, ne * 8, st));
	TD_IXCK(td_h2d((void *)x.lg, hlg, nlg * sizeof(td_disk_group), st));
	TD_IXCK(td_dzero(x.freq, R * 8, st));
	TD_IXCK(td_dzero(x.wfreq, in->nwords * 8, st));
	TD_IXCK(td_dzero(x.rootlen + in->nroot, 8, st));
	TD_IXCK(td_dzero(x.rootwc + in->nroot, 8, st));
	TD_IXCK(td_each(R, td_f_rhs{x}, st));
fail:
	return ce;
}

/* Phase 1, bottom up: launch `it` finishes the level-`it` rules; the
 * grammar's depth says how many launches to queue before the first look at
 * what is left. *levels = the launches made; *too_deep = 1 when rules
 * nest deeper than TD_MAXDEPTH or refer to themselves. */
static cudaError_t td_ix_levels_up(const td_ix &x, uint32_t depth, cudaStream_t st, uint32_t *levels, int *too_deep)
{
	cudaError_t ce = cudaSuccess;
	uint32_t it = 0;
	uint64_t pending = x.R;
	*too_deep = 0;
	while (pending) {
		uint32_t batch = it < depth ? depth - it : 1;
		for (uint32_t b = 0; b < batch; b++)
			TD_IXCK(td_each(x.R, td_f_up{x, ++it}, st));
		TD_IXCK(td_dzero(x.pending, 8, st));
		TD_IXCK(td_each(x.R, td_f_count_pending{x}, st));
		TD_IXCK(td_d2h(&pending, x.pending, 8, st));
		TD_IXCK(td_dsync(st));
		if (it > TD_MAXDEPTH + 2 && pending) {
			*too_deep = 1;
			break;
		}
	}
	*levels = it;
fail:
	return ce;
}

/* Phase 2 over the root, phase 1 top down, then the prefix sums that give
 * offsets, samples and words per file. */
static cudaError_t td_ix_down_and_sums(const td_ix &x, const td_index_in *in, uint32_t levels, size_t nlg,
				       cudaStream_t st)
{
	cudaError_t ce = cudaSuccess;
	/* phase 2: the root sequence (lengths, words, direct uses) */
	TD_IXCK(td_each(in->nroot, td_f_root{x}, st));
	/* phase 1, top down: uses flow from level `lv` to the levels below */
	for (uint32_t lv = levels; lv >= 1; lv--)
		TD_IXCK(td_each(x.R, td_f_down{x, lv}, st));
	/* phase 2: prefix sums -> offsets, samples, words per file */
	TD_IXCK(td_dscan(x.rootlen, x.rootlen, in->nroot + 1, st));
	TD_IXCK(td_dscan(x.rootwc, x.rootwc, in->nroot + 1, st));
	TD_IXCK(td_each(x.ne + 1, td_f_entry{x}, st));
	TD_IXCK(td_each(x.nsamp, td_f_rootsamp{x}, st));
	if (in->nrulesamples) {
		TD_IXCK(td_dzero(x.symlen + in->nrulesyms, 8, st));
		TD_IXCK(td_each(in->nrulesyms, td_f_symlen{x}, st));
		TD_IXCK(td_dscan(x.symlen, x.symlen, in->nrulesyms + 1, st));
		TD_IXCK(td_each(in->nrulesamples, td_f_rulesamp{x, nlg}, st));
	}
fail:
	return ce;
}

/* The indexes back to the host, into out. */
static cudaError_t td_ix_download(const td_ix &x, const td_index_in *in, td_index_out *out, cudaStream_t st)
{
	cudaError_t ce = cudaSuccess;
	const uint64_t ne = x.ne;
	TD_IXCK(td_d2h(out->rule_len, x.len, x.R * 8, st));
	TD_IXCK(td_d2h(out->rule_samples, x.rsamp, in->nrulesamples * 8, st));
	TD_IXCK(td_d2h(out->root_samples, x.rootsamp, x.nsamp * 8, st));
	TD_IXCK(td_d2h(out->e_gstart, x.gstart, (ne + 1) * 8, st));
	TD_IXCK(td_d2h(out->word_freq, x.wfreq, in->nwords * 8, st));
	TD_IXCK(td_d2h(out->e_nwords, x.enw, ne * 8, st));
	TD_IXCK(td_dsync(st));
fail:
	return ce;
}

/* The GPU builder; see gpu/td_gpu.h. */
extern "C" int td_gpu_build_indexes(void *ctx, const td_index_in *in, td_index_out *out)
{
	cudaStream_t st = 0;
	cudaError_t ce = cudaSuccess;
	td_gpu_run *c = (td_gpu_run *)ctx;
	if (c)
		c->ran_on_gpu = 0;
#ifndef TD_GPU_EMU
	int dv = td_ix_device(c, in);
	if (dv < 0)
		return dv;
	if (dv > 0)
		return td_index_build_cpu(NULL, in, out);
#endif
	td_ix x;
	td_disk_group *hlg = NULL;
	size_t nlg = 0;
	int r = td_ix_setup(in, &x, &hlg, &nlg);
	if (r)
		return r;
	void *blk = NULL;
	uint32_t levels = 0;
	int too_deep = 0;
	TD_IXCK(td_ix_alloc(in, nlg, &x, &blk));
	TD_IXCK(td_ix_upload(x, in, hlg, nlg, st));
	TD_IXCK(td_ix_levels_up(x, in->depth, st, &levels, &too_deep));
	if (too_deep) {
		free(hlg);
		td_dfree(blk);
		return td_fail(TD_ECORRUPT, "gpu index build: rules nest deeper than %u levels or refer to themselves",
			       TD_MAXDEPTH);
	}
	TD_IXCK(td_ix_down_and_sums(x, in, levels, nlg, st));
	TD_IXCK(td_ix_download(x, in, out, st));
	free(hlg);
	td_dfree(blk);
	if (c)
		c->ran_on_gpu = 1;
	return TD_OK;
fail:
	free(hlg);
	td_dfree(blk);
	/* a CUDA failure is not the caller's problem: the CPU builds them */
	(void)cudaGetLastError();
	if (c && c->strict)
		return td_fail(TD_EIO, "gpu index build: CUDA: %s", cudaGetErrorString(ce));
	return td_index_build_cpu(NULL, in, out);
}
