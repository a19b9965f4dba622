/* td_par: engine-internal thread pools for one call's work (analytics, batches, decoding). */
#ifndef TD_PAR_H
#define TD_PAR_H

#include <stddef.h>
#include <stdint.h>

/* Threads for `work` units of which each thread should get at least
 * `grain`: min(cores, work / grain), at least 1. TADOC_THREADS=N in the
 * environment caps it at N, and, set, ignores the grain (tests force
 * several threads on small inputs). Inside td_par_for's workers it is 1
 * (no nested pools). Thread-safe. */
unsigned td_par_threads(uint64_t work, uint64_t grain);

/* Run fn(ctx, i) for every i in [0, n) on up to nthreads threads (0: one
 * per core), each taking the next i in turn; the caller's thread is one of
 * them. Returns TD_OK, TD_ENOMEM when no thread could be started (then
 * nothing ran), or TD_ECANCELED when a flag the caller watches
 * (td_cancel.h) is set by the end (some i may not have run, or ended
 * early; the workers watch the caller's flags too). An fn may leave its
 * part undone once td_cancel_requested() says so. fn must be thread-safe for distinct i;
 * with more than one thread, td_par_threads inside fn gives 1. */
int td_par_for(size_t n, unsigned nthreads, void (*fn)(void *ctx, size_t i), void *ctx);

/* td_par_for that runs every i whatever the watched flags (work shared by
 * other callers, such as a cache's fill); TD_OK or TD_ENOMEM. */
int td_par_for_all(size_t n, unsigned nthreads, void (*fn)(void *ctx, size_t i), void *ctx);

/* Inside td_par_for's fn: the index of the thread running it, 0 ..
 * nthreads - 1 (distinct among the call's threads); 0 outside. */
unsigned td_par_self(void);

/* The first error of a call's threads with its detail (td_errdetail is
 * per thread): zero it, td_par_err_set in a worker, td_par_err_get in the
 * caller after td_par_for. */
typedef struct td_par_err {
	int err, claimed;
	char detail[256];
} td_par_err;

/* Record err (not TD_OK) and this thread's td_errdetail(), unless an
 * error is recorded already. Thread-safe. */
void td_par_err_set(td_par_err *e, int err);

/* TD_OK, or the recorded error with its detail set again in the calling
 * thread. */
int td_par_err_get(const td_par_err *e);

/* Spin-wait hint for a short wait on another thread's store. */
static inline void td_par_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* A stage of work inside one td_par_for whose tasks each run every stage
 * in turn (a barrier between stages without a pool per stage): zeroed,
 * then each thread calls td_par_stage on it with the same n. */
typedef struct td_par_gate {
	size_t next, done;
} td_par_gate;

/* Run fn(ctx, i) for the i of [0, n) this thread claims, then wait until
 * every i has run (on any thread). A thread only waits once every i is
 * claimed, so any number of threads (one too) finishes. Once a watched
 * flag is set (td_cancel.h) the rest are skipped, and the enclosing
 * td_par_for returns TD_ECANCELED. Thread-safe. */
void td_par_stage(td_par_gate *st, size_t n, void (*fn)(void *ctx, size_t i), void *ctx);

#endif
