/* stats: counters, latency quantiles, their text form, and the SIGUSR1 watcher. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "stats.h"

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

void td_fs_stats_init(td_fs_stats *s)
{
	memset(s, 0, sizeof *s); /* atomics of integer type: all-zero is 0 */
}

static unsigned lat_bucket(uint64_t v)
{
	if (v < TD_FS_LAT_SUB)
		return (unsigned)v;
	unsigned msb = 63u - (unsigned)__builtin_clzll(v);
	if (msb > 40) {
		msb = 40;
		v = (UINT64_C(1) << 41) - 1;
	}
	return (msb - 3) * TD_FS_LAT_SUB + (unsigned)((v >> (msb - 4)) & (TD_FS_LAT_SUB - 1));
}

/* Upper edge (exclusive) of bucket i, in ns. */
static uint64_t lat_upper(unsigned i)
{
	if (i < TD_FS_LAT_SUB)
		return i + 1;
	unsigned msb = i / TD_FS_LAT_SUB + 3, sub = i % TD_FS_LAT_SUB;
	return (uint64_t)(TD_FS_LAT_SUB + 1 + sub) << (msb - 4);
}

void td_fs_stats_latency(td_fs_stats *s, uint64_t ns)
{
	atomic_fetch_add_explicit(&s->lat[lat_bucket(ns)], 1, memory_order_relaxed);
}

void td_fs_stats_max_batch(td_fs_stats *s, uint64_t n)
{
	uint_fast64_t cur = LOAD(s->max_batch);
	while (cur < n && !atomic_compare_exchange_weak(&s->max_batch, &cur, n))
		;
}

uint64_t td_fs_stats_quantile(const td_fs_stats *s, double q)
{
	uint64_t counts[TD_FS_LAT_BUCKETS], total = 0;
	for (unsigned i = 0; i < TD_FS_LAT_BUCKETS; i++) {
		counts[i] = LOAD(s->lat[i]);
		total += counts[i];
	}
	if (total == 0)
		return 0;
	/* rank of the q-quantile, 1-based: ceil(q * total) */
	double r = q * (double)total;
	uint64_t rank = (uint64_t)r;
	if ((double)rank < r)
		rank++;
	if (rank < 1)
		rank = 1;
	uint64_t seen = 0;
	for (unsigned i = 0; i < TD_FS_LAT_BUCKETS; i++) {
		seen += counts[i];
		if (seen >= rank)
			return lat_upper(i);
	}
	return lat_upper(TD_FS_LAT_BUCKETS - 1);
}

int td_fs_stats_format(const td_fs_stats *s, const td_fs_stats_info *info, int oneline, char *buf, size_t cap)
{
	uint64_t req = LOAD(s->requests), batches = LOAD(s->batches), batched = LOAD(s->batched);
	uint64_t gpu = LOAD(s->gpu_reqs);
	double mean = batches ? (double)batched / (double)batches : 0.0;
	double gshare = req ? (double)gpu / (double)req : 0.0;
	uint64_t gb = LOAD(s->gpu_batches);
	double gmean = gb ? (double)LOAD(s->gpu_ns) / (double)gb / 1000.0 : 0.0;
	double p50 = (double)td_fs_stats_quantile(s, 0.50) / 1000.0;
	double p99 = (double)td_fs_stats_quantile(s, 0.99) / 1000.0;
	const char sep = oneline ? ' ' : '\n';
	int n = snprintf(buf, cap,
			 "requests=%llu%creads=%llu%cxattrs=%llu%cinline=%llu%csequential=%llu%c"
			 "batches=%llu%cbatched=%llu%cmean_batch=%.2f%cmax_batch=%llu%cmerged=%llu%c"
			 "gpu_requests=%llu%cgpu_batches=%llu%cgpu_batch_us=%.1f%ccpu_requests=%llu%c"
			 "gpu_share=%.4f%ccpu_share=%.4f%c"
			 "p50_us=%.1f%cp99_us=%.1f%cbytes_served=%llu%cstored_ahead=%llu%cstored_ahead_bytes=%llu%c"
			 "gpu=%s%ccpu_workers=%u%cbatch_max=%u%cbatch_window_us=%u%cgpu_min_reads=%u%c"
			 "gpu_min_counts=%u%cgpu_min_read_size=%llu%cbatch_priority=%u%s",
			 (unsigned long long)req, sep, (unsigned long long)LOAD(s->reads), sep,
			 (unsigned long long)LOAD(s->xattrs), sep, (unsigned long long)LOAD(s->inline_reqs), sep,
			 (unsigned long long)LOAD(s->sequential), sep, (unsigned long long)batches, sep,
			 (unsigned long long)batched, sep, mean, sep, (unsigned long long)LOAD(s->max_batch), sep,
			 (unsigned long long)LOAD(s->merged), sep, (unsigned long long)gpu, sep,
			 (unsigned long long)gb, sep, gmean, sep, (unsigned long long)(req - gpu), sep,
			 gshare, sep, req ? 1.0 - gshare : 0.0, sep, p50, sep, p99, sep,
			 (unsigned long long)LOAD(s->bytes), sep, (unsigned long long)LOAD(s->stored), sep,
			 (unsigned long long)LOAD(s->stored_bytes), sep, info->gpu, sep, info->cpu_workers, sep,
			 info->batch_max, sep, info->batch_window_us, sep, info->gpu_min_reads, sep,
			 info->gpu_min_counts, sep, (unsigned long long)info->gpu_min_read_size, sep,
			 info->batch_priority, oneline ? "" : "\n");
	return n;
}

/* --- SIGUSR1 --- */

static pthread_t sig_thread;
static int sig_started;
static atomic_int sig_stop;
static void (*sig_fn)(void *);
static void *sig_ctx;

void td_fs_stats_block_signal(void)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
}

static void *sig_main(void *arg)
{
	(void)arg;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	for (;;) {
		int sig = 0;
		if (sigwait(&set, &sig) != 0)
			continue;
		if (atomic_load(&sig_stop))
			break;
		sig_fn(sig_ctx);
	}
	return NULL;
}

int td_fs_stats_sigwatch_start(void (*fn)(void *ctx), void *ctx)
{
	if (sig_started)
		return -EBUSY;
	td_fs_stats_block_signal();
	sig_fn = fn;
	sig_ctx = ctx;
	atomic_store(&sig_stop, 0);
	int rc = pthread_create(&sig_thread, NULL, sig_main, NULL);
	if (rc)
		return -rc;
	sig_started = 1;
	return 0;
}

void td_fs_stats_sigwatch_stop(void)
{
	if (!sig_started)
		return;
	atomic_store(&sig_stop, 1);
	pthread_kill(sig_thread, SIGUSR1);
	pthread_join(sig_thread, NULL);
	sig_started = 0;
}
