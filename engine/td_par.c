/* td_par: a call's work spread over threads (td_par.h). */
#include "td_par.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "td_err.h"

/* Set in td_par_for's workers: their own calls run on one thread. */
static _Thread_local int in_pool;
static _Thread_local unsigned self;

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
	void (*fn)(void *ctx, size_t i);
	void *ctx;
} job;

static void *worker(void *p)
{
	job *j = p;
	int was = in_pool;
	unsigned was_self = self;
	in_pool = 1;
	self = __atomic_fetch_add(&j->threads, 1, __ATOMIC_RELAXED);
	for (;;) {
		size_t i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
		if (i >= j->n)
			break;
		j->fn(j->ctx, i);
	}
	in_pool = was;
	self = was_self;
	return NULL;
}

int td_par_for(size_t n, unsigned nthreads, void (*fn)(void *ctx, size_t i), void *ctx)
{
	if (nthreads == 0)
		nthreads = in_pool ? 1 : cores();
	if (nthreads > n)
		nthreads = n ? (unsigned)n : 1;
	job j = { n, 0, 0, fn, ctx };
	if (nthreads <= 1) { /* no pool: the calls inside may take threads */
		unsigned was_self = self;
		self = 0;
		for (size_t i = 0; i < n; i++)
			fn(ctx, i);
		self = was_self;
		return TD_OK;
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
	return TD_OK;
}

void td_par_stage(td_par_gate *st, size_t n, void (*fn)(void *ctx, size_t i), void *ctx)
{
	size_t i;
	while ((i = __atomic_fetch_add(&st->next, 1, __ATOMIC_RELAXED)) < n) {
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
