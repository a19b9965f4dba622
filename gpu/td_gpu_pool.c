/* td_gpu_pool: the host threads of the GPU engine's batches, started once and kept (td_gpu_par). */
#include <pthread.h>
#include <stdlib.h>

#include "td_gpu_int.h"

/* A call of td_gpu_par: tasks 0..nt-1, taken in order by whoever comes
 * (the caller and idle pool threads); the caller waits for all to end. */
typedef struct td_pjob {
	void (*fn)(void *, unsigned);
	void *ctx;
	unsigned nt;
	unsigned next;            /* the next task to take (under the pool's lock) */
	unsigned done;            /* tasks ended (under the pool's lock) */
	pthread_cond_t end;       /* signalled when done reaches nt */
	struct td_pjob *link;     /* the pool's list of jobs with tasks left */
} td_pjob;

#define TD_POOL_MAX 1024u       /* threads at most; past that tasks run on the callers */

/* idle: threads not running a task; pending: tasks nobody took yet. A
 * call starts threads until idle >= pending, so every task gets a thread
 * of its own at once, as when each call started its threads, without the
 * starts (about 50 us each, one after another on the caller). */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t work;      /* a job was added */
	td_pjob *jobs;            /* jobs with tasks not yet taken */
	unsigned threads, idle, pending;
} td_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0, 0};

static pthread_once_t td_pool_once = PTHREAD_ONCE_INIT;

/* $TD_GPU_POOL_SPIN: microseconds an idle thread, or a caller waiting for
 * its tasks, watches for work before it sleeps (0: sleeps at once). */
static double td_pool_spin;

/* A forked child has none of the parent's threads: an empty pool. */
static void td_pool_atfork_child(void)
{
	pthread_mutex_init(&td_pool.lock, NULL);
	pthread_cond_init(&td_pool.work, NULL);
	td_pool.jobs = NULL;
	td_pool.threads = td_pool.idle = td_pool.pending = 0;
}

static void td_pool_init(void)
{
	const char *e = getenv("TD_GPU_POOL_SPIN");
	td_pool_spin = e && *e ? atof(e) * 1e-6 : 0;
	pthread_atfork(NULL, NULL, td_pool_atfork_child);
}

/* Take a task of j (under the lock): its number, or nt when none is left;
 * j leaves the list with its last task. */
static unsigned td_pool_take(td_pjob *j)
{
	unsigned c = j->next;
	if (c >= j->nt)
		return j->nt;
	j->next = c + 1;
	td_pool.pending--;
	if (c + 1 == j->nt)
		for (td_pjob **p = &td_pool.jobs; *p; p = &(*p)->link)
			if (*p == j) {
				__atomic_store_n(p, j->link, __ATOMIC_RELEASE); /* spinners read it */
				break;
			}
	return c;
}

static void td_pool_end(td_pjob *j)
{
	if (__atomic_add_fetch(&j->done, 1, __ATOMIC_RELEASE) == j->nt)
		pthread_cond_signal(&j->end);
}

/* Spin (the pool's lock not held) until *p is non-zero, or *p reaches
 * `until` when until is non-zero, or td_pool_spin seconds have gone:
 * whether it happened. */
static int td_pool_watch(void *const *p, const unsigned *u, unsigned until)
{
	double end = td_now() + td_pool_spin;
	for (unsigned i = 0;; i++) {
		if (p ? __atomic_load_n(p, __ATOMIC_ACQUIRE) != NULL : __atomic_load_n(u, __ATOMIC_ACQUIRE) >= until)
			return 1;
		if ((i & 63) == 63 && td_now() > end)
			return 0;
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
	}
}

static void *td_pool_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&td_pool.lock);
	for (;;) {
		if (!td_pool.jobs && td_pool_spin > 0) {
			pthread_mutex_unlock(&td_pool.lock);
			td_pool_watch((void *const *)&td_pool.jobs, NULL, 0);
			pthread_mutex_lock(&td_pool.lock);
		}
		while (!td_pool.jobs)
			pthread_cond_wait(&td_pool.work, &td_pool.lock);
		td_pjob *j = td_pool.jobs;
		unsigned c = td_pool_take(j);
		if (c == j->nt)
			continue;
		td_pool.idle--;
		pthread_mutex_unlock(&td_pool.lock);
		j->fn(j->ctx, c);
		pthread_mutex_lock(&td_pool.lock);
		td_pool.idle++;
		td_pool_end(j); /* j may be gone once its caller sees done == nt */
	}
	return NULL;
}

void td_gpu_par(unsigned nt, void (*fn)(void *, unsigned), void *ctx)
{
	if (nt <= 1) {
		if (nt)
			fn(ctx, 0);
		return;
	}
	pthread_once(&td_pool_once, td_pool_init);
	td_pjob j = {.fn = fn, .ctx = ctx, .nt = nt, .next = 1}; /* task 0 is the caller's */
	pthread_cond_init(&j.end, NULL);
	pthread_mutex_lock(&td_pool.lock);
	j.link = td_pool.jobs;
	__atomic_store_n(&td_pool.jobs, &j, __ATOMIC_RELEASE);
	td_pool.pending += nt - 1;
	while (td_pool.idle < td_pool.pending && td_pool.threads < TD_POOL_MAX) {
		pthread_t th;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		int e = pthread_create(&th, &at, td_pool_thread, NULL);
		pthread_attr_destroy(&at);
		if (e)
			break; /* the caller runs what no thread takes */
		td_pool.threads++;
		td_pool.idle++;
	}
	pthread_mutex_unlock(&td_pool.lock);
	/* a wake-up a task (a broadcast would wake every idle thread of the
	 * pool, hundreds with several devices, to find nothing), made after
	 * the lock is let go: each is a system call, and the threads woken,
	 * and every other batch's calls, need the lock */
	for (unsigned c = 1; c < nt; c++)
		pthread_cond_signal(&td_pool.work);
	fn(ctx, 0);
	/* the tasks no thread took yet, then wait for the others */
	pthread_mutex_lock(&td_pool.lock);
	td_pool_end(&j);
	for (unsigned c; (c = td_pool_take(&j)) < nt;) {
		pthread_mutex_unlock(&td_pool.lock);
		fn(ctx, c);
		pthread_mutex_lock(&td_pool.lock);
		td_pool_end(&j);
	}
	if (j.done < nt && td_pool_spin > 0) {
		pthread_mutex_unlock(&td_pool.lock);
		td_pool_watch(NULL, &j.done, nt);
		pthread_mutex_lock(&td_pool.lock);
	}
	while (j.done < nt)
		pthread_cond_wait(&j.end, &td_pool.lock);
	pthread_mutex_unlock(&td_pool.lock);
	pthread_cond_destroy(&j.end);
}
