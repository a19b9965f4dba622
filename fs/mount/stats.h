/* stats: request counters and a latency histogram of one mount (user.tadoc.stats, SIGUSR1). */
#ifndef TD_FS_STATS_H
#define TD_FS_STATS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Latencies are kept in log-linear buckets: 16 per power of two of
 * nanoseconds (at most 1/16 = 6% above the true value), up to 2^40 ns. */
#define TD_FS_LAT_SUB 16
#define TD_FS_LAT_BUCKETS (41 * TD_FS_LAT_SUB)

/* All counters are updated with relaxed atomics from any thread. */
typedef struct td_fs_stats {
	atomic_uint_fast64_t requests;   /* reads + xattr queries answered */
	atomic_uint_fast64_t reads;
	atomic_uint_fast64_t xattrs;
	atomic_uint_fast64_t inline_reqs; /* answered in the FUSE thread */
	atomic_uint_fast64_t sequential; /* of those: continued a sequential read */
	atomic_uint_fast64_t batches;    /* batches dispatched (CPU or GPU) */
	atomic_uint_fast64_t batched;    /* requests in those batches */
	atomic_uint_fast64_t max_batch;
	atomic_uint_fast64_t merged;     /* reads answered from another read's bytes */
	atomic_uint_fast64_t gpu_reqs;   /* answered from a GPU launch */
	atomic_uint_fast64_t gpu_batches;
	atomic_uint_fast64_t gpu_ns;     /* wall time inside those launches */
	atomic_uint_fast64_t bytes;      /* read bytes sent to the kernel */
	atomic_uint_fast64_t stored;     /* stores ahead into the page cache (store_ahead.h) */
	atomic_uint_fast64_t stored_bytes;
	atomic_uint_fast64_t lat[TD_FS_LAT_BUCKETS];
} td_fs_stats;

/* How the batcher is configured, printed with the counters. */
typedef struct td_fs_stats_info {
	unsigned cpu_workers;
	unsigned batch_max;
	unsigned batch_window_us;
	unsigned gpu_min_reads;          /* CPU/GPU crossovers in requests */
	unsigned gpu_min_counts;
	uint64_t gpu_min_read_size;      /* smaller reads stay on the CPU */
	unsigned batch_priority;         /* nice steps the batcher's threads run
	                                    above the FUSE threads (0: not
	                                    raised, or not allowed to be) */
	const char *gpu;                 /* "off", "opening", device name, ... */
} td_fs_stats_info;

/* Zero every counter. */
void td_fs_stats_init(td_fs_stats *s);

/* Count one answered request that took `ns` nanoseconds in the daemon. */
void td_fs_stats_latency(td_fs_stats *s, uint64_t ns);

/* Raise s->max_batch to n if it is lower. */
void td_fs_stats_max_batch(td_fs_stats *s, uint64_t n);

/* Latency in ns below which a fraction q (0..1) of the requests fell (the
 * upper edge of the bucket holding that rank); 0 when nothing was counted. */
uint64_t td_fs_stats_quantile(const td_fs_stats *s, double q);

/* Render the counters: with `oneline` as space-separated key=value pairs,
 * otherwise one "key=value" per line. Returns the length snprintf would
 * write (the output is cut at cap - 1 bytes, NUL-terminated when cap > 0). */
int td_fs_stats_format(const td_fs_stats *s, const td_fs_stats_info *info, int oneline, char *buf, size_t cap);

/* Block SIGUSR1 in the calling thread (threads created later inherit
 * the mask), so that it waits for td_fs_stats_sigwatch_start instead of
 * ending the process. Call early in main, before any thread exists. */
void td_fs_stats_block_signal(void);

/* Run fn(ctx) in a background thread each time the process receives
 * SIGUSR1 (blocked first, as td_fs_stats_block_signal). Start it after any
 * fork (threads do not survive fork). Returns 0 or -errno. */
int td_fs_stats_sigwatch_start(void (*fn)(void *ctx), void *ctx);

/* Stop and join the SIGUSR1 thread (no-op when it was not started). */
void td_fs_stats_sigwatch_stop(void);

#endif
