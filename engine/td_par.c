/* td_par: a call's work spread over threads (td_par.h). */
#include "td_par.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "td_cancel.h"
#include "td_err.h"

/* Set in td_par_for's workers: their own calls run on one thread. */
static _Thread_local int in_pool;
static _Thread_local unsigned self;
/* The flags this thread's calls watch (td_cancel.h); workers take their
 * caller's. */
static _Thread_local const volatile int *watch_a, *watch_b;

void td_cancel_watch(const volatile int *a, const volatile int *b)
{
	watch_a = a;
	watch_b = b;
}

int td_cancel_requested(void)
{
	return (watch_a && *watch_a) || (watch_b && *watch_b);
}

unsigned td_par_self(void)
{
	return self;
}

/* The cores this process may run on (its affinity mask: taskset, cgroup
 * cpusets), else those online. */
static unsigned cores(void)
{
#ifdef CPU_COUNT
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
		return (unsigned)CPU_COUNT(&set);
#endif
	long c = sysconf(_SC_NPROCESSORS_ONLN);
	return c > 0 ? (unsigned)c : 1;
}

unsigned td_par_threads(uint64_t work, uint64_t grain)
{
	if (in_pool)
		return 1;
	const char *e = getenv("TADOC_THREADS");
	unsigned n = cores();
	if (e && *e) {
		unsigned long v = strtoul(e, NULL, 10);
		if (v > 0)
			return v < 1024 ? (unsigned)v : 1024;
	}
	uint64_t by = grain ? work / grain : work;
	if (by < n)
		n = by ? (unsigned)by : 1;
	return n;
}

typedef struct job {
	size_t n;
	size_t next;      /* atomic work index */
	unsigned threads; /* atomic: workers started */
	int stopped;      /* atomic: a worker left parts undone (td_cancel.h) */
	int cancellable;
	const volatile int *wa, *wb; /* the caller's watched flags */
	void (*fn)(void *ctx, size_t i);
	void *ctx;
} job;

static void *worker(void *p)
{
	job *j = p;
	int was = in_pool;
	unsigned was_self = self;
	const volatile int *was_a = watch_a, *was_b = watch_b;
	in_pool = 1;
	watch_a = j->wa;
	watch_b = j->wb;
	self = __atomic_fetch_add(&j->threads, 1, __ATOMIC_RELAXED);
	for (;;) {
		if (j->cancellable && td_cancel_requested()) {
			__atomic_store_n(&j->stopped, 1, __ATOMIC_RELAXED);
			break;
		}
		size_t i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
		if (i >= j->n)
			break;
		j->fn(j->ctx, i);
	}
	in_pool = was;
	self = was_self;
	watch_a = was_a;
	watch_b = was_b;
	return NULL;
}

/* A call's end: TD_ECANCELED when parts were left undone, or when a
 * watched flag is set now (a part may have ended early, or a stage been
 * skipped: the flags stay set once set, so any part that saw one ends
 * here), else TD_OK. */
static int stopped(int cancellable, int undone)
{
	return undone || (cancellable && td_cancel_requested()) ? td_fail(TD_ECANCELED, "interrupted") : TD_OK;
}

static int par_for(size_t n, unsigned nthreads, void (*fn)(void *ctx, size_t i), void *ctx, int cancellable)
{
	if (nthreads == 0)
		nthreads = in_pool ? 1 : cores();
	if (nthreads > n)
		nthreads = n ? (unsigned)n : 1;
	/* the workers of a job that runs every i watch nothing either */
	job j = { .n = n,
		  .cancellable = cancellable,
		  .wa = cancellable ? watch_a : NULL,
		  .wb = cancellable ? watch_b : NULL,
		  .fn = fn,
		  .ctx = ctx };
	if (nthreads <= 1) { /* no pool: the calls inside may take threads */
		unsigned was_self = self;
		self = 0;
		size_t i = 0;
		for (; i < n && !(cancellable && td_cancel_requested()); i++)
			fn(ctx, i);
		self = was_self;
		return stopped(cancellable, i < n);
	}
	pthread_t *t = malloc((nthreads - 1) * sizeof *t);
	if (!t)
		return TD_ENOMEM;
	unsigned started = 0;
	for (; started < nthreads - 1; started++)
		if (pthread_create(&t[started], NULL, worker, &j))
			break;
	worker(&j);
	for (unsigned i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	free(t);
	return stopped(cancellable, j.stopped);
}

int td_par_for(size_t n, unsigned nthreads, void (*fn)(void *ctx, size_t i), void *ctx)
{
	return par_for(n, nthreads, fn, ctx, 1);
}

int td_par_for_all(size_t n, unsigned nthreads, void (*fn)(void *ctx, size_t i), void *ctx)
{
	return par_for(n, nthreads, fn, ctx, 0);
}

void td_par_stage(td_par_gate *st, size_t n, void (*fn)(void *ctx, size_t i), void *ctx)
{
	size_t i;
	while ((i = __atomic_fetch_add(&st->next, 1, __ATOMIC_RELAXED)) < n) {
		if (!td_cancel_requested()) /* else the enclosing td_par_for fails */
			fn(ctx, i);
		__atomic_fetch_add(&st->done, 1, __ATOMIC_RELEASE);
	}
	/* the rest are running: spin a while, then let them have the core */
	for (unsigned spin = 0; __atomic_load_n(&st->done, __ATOMIC_ACQUIRE) < n; spin++) {
		if (spin < 4096)
			td_par_relax();
		else
			sched_yield();
	}
}

void td_par_err_set(td_par_err *e, int err)
{
	if (!err || __atomic_exchange_n(&e->claimed, 1, __ATOMIC_ACQ_REL))
		return;
	snprintf(e->detail, sizeof e->detail, "%s", td_errdetail());
	__atomic_store_n(&e->err, err, __ATOMIC_RELEASE);
}

int td_par_err_get(const td_par_err *e)
{
	int err = __atomic_load_n(&e->err, __ATOMIC_ACQUIRE);
	if (!err)
		return TD_OK;
	return e->detail[0] ? td_fail(err, "%s", e->detail) : err;
}
