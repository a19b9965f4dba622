/* td_gpu_stub: the GPU engine of a build without CUDA: every call says "no GPU". */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "td_err.h"
#include "td_gpu.h"

void td_gpu_opts_default(td_gpu_opts *o)
{
	memset(o, 0, sizeof *o);
	o->nstreams = 4;
	o->xchunk = 256;
	o->xcoop = 1024;
	o->piece_bytes = UINT64_C(32) << 20;
	o->devices = TD_GPU_DEVICES_ALL;
	o->qpart = 2048;
}

int td_gpu_device_count(void)
{
	return 0;
}

void td_gpu_residency(const td_gpu *g, uint32_t *resident, uint32_t *units, unsigned *ndevices)
{
	(void)g;
	if (resident)
		*resident = 0;
	if (units)
		*units = 0;
	if (ndevices)
		*ndevices = 0;
}

int td_gpu_link_measure(int device, uint64_t bytes, unsigned host_threads, td_gpu_link *out)
{
	(void)device;
	(void)bytes;
	(void)host_threads;
	memset(out, 0, sizeof *out);
	return td_fail(TD_ENOGPU, "no GPU: tadoc was built without CUDA (-Dgpu=disabled or nvcc not found)");
}

void td_gpu_warm_start(void)
{
}

int td_gpu_available(void)
{
	return 0;
}

int td_gpu_open(const td_archive *a, const td_gpu_opts *opts, td_gpu **out)
{
	(void)a;
	(void)opts;
	if (out)
		*out = NULL;
	return td_fail(TD_ENOGPU, "no GPU: tadoc was built without CUDA (-Dgpu=disabled or nvcc not found)");
}

void td_gpu_close(td_gpu *g)
{
	(void)g;
}

int td_gpu_resident(const td_gpu *g)
{
	(void)g;
	return 0;
}

const char *td_gpu_device_name(const td_gpu *g)
{
	(void)g;
	return "no GPU";
}

double td_gpu_open_seconds(const td_gpu *g)
{
	(void)g;
	return 0.0;
}

int td_gpu_extract_batch(td_gpu *g, td_extract_req *reqs, size_t n)
{
	(void)g;
	(void)reqs;
	(void)n;
	return td_fail(TD_ENOGPU, "no GPU: tadoc was built without CUDA");
}

void *td_gpu_host_alloc(td_gpu *g, size_t bytes)
{
	(void)g;
	return malloc(bytes ? bytes : 1);
}

void td_gpu_host_free(td_gpu *g, void *p)
{
	(void)g;
	free(p);
}

int td_gpu_count_batch(td_gpu *g, td_count_req *reqs, size_t n)
{
	(void)g;
	(void)reqs;
	(void)n;
	return td_fail(TD_ENOGPU, "no GPU: tadoc was built without CUDA");
}

int td_gpu_fuzzy_batch(td_gpu *g, td_fuzzy_req *reqs, size_t n)
{
	(void)g;
	(void)reqs;
	(void)n;
	return td_fail(TD_ENOGPU, "no GPU: tadoc was built without CUDA");
}

int td_gpu_files_batch(td_gpu *g, td_files_req *reqs, size_t n)
{
	(void)g;
	(void)reqs;
	(void)n;
	return td_fail(TD_ENOGPU, "no GPU: tadoc was built without CUDA");
}

int td_gpu_top_batch(td_gpu *g, td_words_req *reqs, size_t n)
{
	(void)g;
	(void)reqs;
	(void)n;
	return td_fail(TD_ENOGPU, "no GPU: tadoc was built without CUDA");
}

int td_gpu_vector_batch(td_gpu *g, td_words_req *reqs, size_t n)
{
	(void)g;
	(void)reqs;
	(void)n;
	return td_fail(TD_ENOGPU, "no GPU: tadoc was built without CUDA");
}

int td_gpu_ngram_batch(td_gpu *g, td_ngram_req *reqs, size_t n)
{
	(void)g;
	(void)reqs;
	(void)n;
	return td_fail(TD_ENOGPU, "no GPU: tadoc was built without CUDA");
}

int td_gpu_search_batch(td_gpu *g, td_search_req *reqs, size_t n)
{
	(void)g;
	(void)reqs;
	(void)n;
	return td_fail(TD_ENOGPU, "no GPU: tadoc was built without CUDA");
}

int td_gpu_build_indexes(void *ctx, const td_index_in *in, td_index_out *out)
{
	td_gpu_run *c = ctx;
	if (c)
		c->ran_on_gpu = 0;
	if (c && c->strict)
		return td_fail(TD_ENOGPU, "no GPU: tadoc was built without CUDA");
	return td_index_build_cpu(NULL, in, out);
}


int td_gpu_edit_resolve(void *ctx, const td_edit *ed, const td_edit_rec *recs, size_t n, int mode,
			td_edit_rec *out, uint32_t *perm)
{
	td_gpu_run *c = ctx;
	if (c)
		c->ran_on_gpu = 0;
	if (c && c->strict)
		return td_fail(TD_ENOGPU, "no GPU: tadoc was built without CUDA");
	return td_edit_batch_resolve(ed, recs, n, mode, out, perm);
}

int td_gpu_edit_apply_batch(void *ctx, td_edit *ed, const td_edit_rec *recs, size_t n, int mode,
			    size_t *napplied)
{
	td_gpu_run *c = ctx;
	if (c && c->strict) {
		if (napplied)
			*napplied = 0;
		c->ran_on_gpu = 0;
		return td_fail(TD_ENOGPU, "no GPU: tadoc was built without CUDA");
	}
	return td_edit_apply_batch(ed, recs, n, mode, napplied);
}

int td_gpu_digram_count(const uint32_t *seq, uint64_t n, uint64_t **keys, uint32_t **counts, uint64_t *ndistinct)
{
	(void)seq;
	(void)n;
	*keys = NULL;
	*counts = NULL;
	*ndistinct = 0;
	return td_fail(TD_ENOGPU, "no GPU: tadoc was built without CUDA");
}

void td_gpu_grammar_release(void)
{
}

int td_gpu_grammar_rounds(void *ctx, uint32_t *seq, uint64_t *n, uint32_t nterm, unsigned max_depth,
			  td_progress_fn progress, void *progress_ctx, uint32_t **pairs, uint64_t *nrules)
{
	td_gpu_run *c = ctx;
	(void)seq, (void)n, (void)nterm, (void)max_depth, (void)progress, (void)progress_ctx;
	if (c)
		c->ran_on_gpu = 0;
	*pairs = NULL;
	*nrules = 0;
	return td_fail(TD_ENOGPU, "no GPU: tadoc was built without CUDA");
}
