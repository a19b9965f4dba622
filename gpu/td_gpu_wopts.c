/* td_gpu_wopts: hand the GPU index builder and grammar rounds to writers
 * (--gpu auto|on|off), one GPU build at a time whatever the number of shard threads. */
#include "td_gpu.h"

#include <pthread.h>
#include <string.h>

#include "td_err.h"

/* One index build on the GPU at a time: the shard threads of a format 5
 * build share one CUDA context and one device's memory, and two builds at
 * once would only queue on it (or run it out of memory). A thread that
 * finds the GPU busy builds on its own core: the bytes are the same. */
static pthread_mutex_t td_gix_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t td_gix_gpu, td_gix_cpu; /* __atomic builtins: the emulation test compiles this as C++ */

int td_gpu_build_indexes_shared(void *ctx, const td_index_in *in, td_index_out *out)
{
	(void)ctx;
	if (pthread_mutex_trylock(&td_gix_lock) != 0) {
		__atomic_fetch_add(&td_gix_cpu, 1, __ATOMIC_RELAXED);
		return td_index_build_cpu(NULL, in, out);
	}
	td_gpu_run run = { 0 };
	int err = td_gpu_build_indexes(&run, in, out);
	pthread_mutex_unlock(&td_gix_lock);
	__atomic_fetch_add(run.ran_on_gpu ? &td_gix_gpu : &td_gix_cpu, 1, __ATOMIC_RELAXED);
	return err;
}

static uint64_t td_ggr_gpu, td_ggr_cpu;

int td_gpu_grammar_rounds_shared(void *ctx, uint32_t *seq, uint64_t *n, uint32_t nterm, unsigned max_depth,
				 td_progress_fn progress, void *progress_ctx, uint32_t **pairs, uint64_t *nrules)
{
	(void)ctx;
	*pairs = NULL;
	*nrules = 0;
	if (pthread_mutex_trylock(&td_gix_lock) != 0) {
		__atomic_fetch_add(&td_ggr_cpu, 1, __ATOMIC_RELAXED);
		return TD_ENOGPU; /* the writer runs the CPU rounds */
	}
	td_gpu_run run = { 0 };
	int err = td_gpu_grammar_rounds(&run, seq, n, nterm, max_depth, progress, progress_ctx, pairs, nrules);
	pthread_mutex_unlock(&td_gix_lock);
	__atomic_fetch_add(run.ran_on_gpu ? &td_ggr_gpu : &td_ggr_cpu, 1, __ATOMIC_RELAXED);
	return err;
}

void td_gpu_grammar_counts(uint64_t *on_gpu, uint64_t *on_cpu)
{
	if (on_gpu)
		*on_gpu = __atomic_load_n(&td_ggr_gpu, __ATOMIC_RELAXED);
	if (on_cpu)
		*on_cpu = __atomic_load_n(&td_ggr_cpu, __ATOMIC_RELAXED);
}

void td_gpu_build_counts(uint64_t *on_gpu, uint64_t *on_cpu)
{
	if (on_gpu)
		*on_gpu = __atomic_load_n(&td_gix_gpu, __ATOMIC_RELAXED);
	if (on_cpu)
		*on_cpu = __atomic_load_n(&td_gix_cpu, __ATOMIC_RELAXED);
}

int td_gpu_use_parse(const char *s, td_gpu_use *use)
{
	static const char *const names[] = { "auto", "on", "off" };
	for (int i = 0; i < 3; i++)
		if (s && strcmp(s, names[i]) == 0) {
			*use = (td_gpu_use)i;
			return 0;
		}
	return -1;
}

int td_gpu_writer_use(td_writer_opts *opts, td_gpu_use use)
{
	if (use == TD_GPU_USE_OFF)
		return TD_OK;
	if (!td_gpu_available()) {
		if (use == TD_GPU_USE_AUTO)
			return TD_OK;
#ifdef TD_GPU_STUB
		return td_fail(TD_ENOGPU, "--gpu on: no GPU: tadoc was built without CUDA (use --gpu auto or off)");
#else
		return td_fail(TD_ENOGPU, "--gpu on: no usable CUDA device (no driver or no GPU; use --gpu auto or off)");
#endif
	}
	opts->index_build = td_gpu_build_indexes_shared;
	opts->index_ctx = NULL;
	/* and the grammar rounds (auto too: faster than CPU rounds beside GPU
	 * indexes in every measured case but many small shards on many cores,
	 * within 0.1 s there: contrib/bench/results/compress.md) */
	opts->grammar_rounds = td_gpu_grammar_rounds_shared;
	opts->grammar_ctx = NULL;
	return TD_OK;
}

int td_gpu_writer_opts(td_writer_opts *opts)
{
	if (!opts || !td_gpu_available())
		return 0;
	td_gpu_writer_use(opts, TD_GPU_USE_AUTO);
	return 1;
}
