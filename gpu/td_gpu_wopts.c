/* td_gpu_wopts: hand the GPU index builder and grammar rounds to writers
 * (--gpu auto|on|off), one GPU build at a time whatever the number of shard threads. */
#include "td_gpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef TD_WRITER_TRACE
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
extern double td_trace_t0; /* engine/td_writer.c: the trace lines' time origin */
#endif

#include "td_err.h"

/* One index build on the GPU at a time: the shard threads of a format 5
 * build share one CUDA context and one device's memory, and two builds at
 * once would only queue on it (or run it out of memory). A thread that
 * finds the GPU busy builds on its own core: the bytes are the same.
 * (Grammar rounds have their own queue, below; both check the device's
 * free memory before they start.) */
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

/* The GPU's queue of grammar rounds. Shards reach their rounds nearly
 * together (a build's first wave), and the GPU runs one shard's rounds
 * several times faster than a core: a call waits for its turn while the
 * work queued ahead of it would take the GPU less time than the caller's
 * own rounds would take a core, and otherwise runs them on its core
 * (declines). The writer lends its core to other shards' CPU rounds while
 * it waits (td_grammar_cores). Times are estimates per symbol of the
 * sequence: the GPU's is learnt from the calls that ran, the core's is a
 * constant (contrib/bench/results/compress.md, "Many cores"). */
static pthread_mutex_t td_ggr_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t td_ggr_cv = PTHREAD_COND_INITIALIZER;
static unsigned td_ggr_busy;      /* calls running on the GPU */
static uint64_t td_ggr_queued;    /* symbols of the calls waiting or running on the GPU */
static double td_ggr_ns = 60;     /* GPU ns a symbol, learnt */
static unsigned td_ggr_ran;       /* calls timed so far */
/* a busy core's ns a symbol: where every core builds, a shard's CPU rounds
 * take about 600 ns a symbol of wall and borrow cores the other shards'
 * tokenizing and zstd wait for, so a call declines only when the GPU's
 * queue is far longer than that */
#define TD_GGR_CPU_NS 1000.0
/* Calls running on the GPU at once, each on its own stream: a round's
 * host steps (its copies back, the decisions) leave the device to the
 * other. The emulation runs one (its kernels run on the calling thread). */
#ifdef TD_GPU_EMU
#define TD_GGR_SLOTS 1
#else
#define TD_GGR_SLOTS 2
#endif

static double ggr_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int td_gpu_grammar_rounds_shared(void *ctx, uint32_t *seq, uint64_t *n, uint32_t nterm, unsigned max_depth,
				 td_progress_fn progress, void *progress_ctx, uint32_t **pairs, uint64_t *nrules)
{
	(void)ctx;
	*pairs = NULL;
	*nrules = 0;
	uint64_t mine = *n;
	double cpu_ns = TD_GGR_CPU_NS;
	unsigned slots = TD_GGR_SLOTS;
#ifdef TD_WRITER_TRACE
	/* benchmarks: another core estimate (0: decline whenever the GPU is
	 * taken, as before the queue), another number of calls at once */
	if (getenv("TD_TRACE_GGR_CPU_NS"))
		cpu_ns = atof(getenv("TD_TRACE_GGR_CPU_NS"));
	if (getenv("TD_TRACE_GGR_SLOTS"))
		slots = (unsigned)atoi(getenv("TD_TRACE_GGR_SLOTS"));
#endif
	pthread_mutex_lock(&td_ggr_mu);
	/* the queue drains `slots` calls at a time, each at the learnt rate */
	int decline = td_ggr_busy >= slots && (double)td_ggr_queued * td_ggr_ns >= (double)mine * cpu_ns * slots;
	if (decline) {
		pthread_mutex_unlock(&td_ggr_mu);
		__atomic_fetch_add(&td_ggr_cpu, 1, __ATOMIC_RELAXED);
		return TD_ENOGPU; /* the writer runs the CPU rounds */
	}
	td_ggr_queued += mine;
#ifdef TD_WRITER_TRACE
	double tq = ggr_now();
	unsigned ahead = td_ggr_busy;
#endif
	while (td_ggr_busy >= slots) /* its turn */
		pthread_cond_wait(&td_ggr_cv, &td_ggr_mu);
	td_ggr_busy++;
	pthread_mutex_unlock(&td_ggr_mu);
	double t = ggr_now();
#ifdef TD_WRITER_TRACE
	double tr = t;
	/* benchmarks: this thread's nice value while it runs the rounds
	 * (below 0 needs privilege) */
	int onice = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
	if (getenv("TD_TRACE_GGR_NICE"))
		setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), atoi(getenv("TD_TRACE_GGR_NICE")));
#endif
	td_gpu_run run = { 0 };
	int err = td_gpu_grammar_rounds(&run, seq, n, nterm, max_depth, progress, progress_ctx, pairs, nrules);
	t = ggr_now() - t;
#ifdef TD_WRITER_TRACE
	if (getenv("TD_TRACE_GGR_NICE"))
		setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), onice);
#endif
	pthread_mutex_lock(&td_ggr_mu);
	td_ggr_busy--;
	pthread_cond_signal(&td_ggr_cv);
	td_ggr_queued -= mine;
	int idle = td_ggr_busy == 0 && td_ggr_queued == 0;
	/* the first call also starts CUDA: not a rate */
	if (run.ran_on_gpu && mine > 0 && td_ggr_ran++ > 0)
		td_ggr_ns = td_ggr_ran == 2 ? t / (double)mine : 0.5 * td_ggr_ns + 0.5 * t / (double)mine;
	pthread_mutex_unlock(&td_ggr_mu);
	__atomic_fetch_add(run.ran_on_gpu ? &td_ggr_gpu : &td_ggr_cpu, 1, __ATOMIC_RELAXED);
	if (idle) /* nothing queued: the device memory the calls kept goes back */
		td_gpu_grammar_release();
#ifdef TD_WRITER_TRACE
	fprintf(stderr, "gputrace rounds: %llu symbols %.3f s (%.1f ns a symbol, estimate now %.1f), waited %.3f s (%u running), ended at %.3f s tid %ld\n",
		(unsigned long long)mine, t / 1e9, mine ? t / (double)mine : 0, td_ggr_ns, (tr - tq) / 1e9,
		ahead, ggr_now() / 1e9 - td_trace_t0, (long)syscall(SYS_gettid));
#endif
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
