/* fs_batch: the background batcher: a request queue drained into CPU-worker or GPU batches. */
#ifndef TD_FS_BATCH_H
#define TD_FS_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "fs_ctx.h"

/*
 * Reads and user.tadoc.* queries reach the batcher through fs->exec
 * (fs_ctx.h). Each one is either
 *   - queued, where a batch can do better than the FUSE thread that
 *     received it: with a GPU ready, a count query while other requests
 *     are in flight (always, with the default count crossover of 1: the
 *     GPU wins from one count on), a read while others are in flight; but
 *     only kinds whose crossover is at most 4096 (a batch the daemon can
 *     gather): the default read crossover is 10,000 (below that the CPU
 *     engine beats a GPU extract batch), so by default reads are never
 *     queued;
 *     without a GPU, nothing (the FUSE threads answering inline were
 *     measured faster than the hand-off to workers), unless
 *     TADOCFS_BATCH_CPU=1 queues every request that finds others in flight;
 *   - or answered inline in the FUSE thread: everything else, in particular
 *     a read that finds no other request in flight (an idle daemon adds no
 *     queueing and no wait: a lone reader pays nothing), a read continuing
 *     a sequential reader (its cursor beats any batch), search and words
 *     queries, everything with batch_max = 1, and every request on a mount
 *     with an edit overlay (fs->rw: the direct path, so a read after an
 *     acknowledged write sees it).
 * One batcher thread drains the queue into batches of at most batch_max
 * requests: when a GPU is ready and the queue holds a crossover's worth of
 * reads or counts, those go to the GPU as one td_gpu_extract_batch /
 * td_gpu_count_batch call (the replies are then spread over the CPU
 * workers); everything else goes to cpu_workers worker threads. Below the
 * crossover the batcher waits up to batch_window_us for more requests, but
 * only while requests keep arriving fast enough to reach it inside that
 * window (an idle or slow queue never waits). Reads of one file whose byte
 * ranges overlap or touch are extracted once and each is answered from the
 * shared bytes. Replies are sent from worker threads (decision 7).
 *
 * gpu = off: no GPU. auto: the GPU is opened in the background when one is
 * usable and the archive fits it (td_gpu_resident); everything stays on the
 * CPU until it is ready. on: as auto, but a failure to open it ends the
 * mount (check beforehand with td_fs_batch_gpu_probe).
 * The crossovers come from contrib/gpu's gpu_bench on an H200 (4 KiB
 * extract: the CPU wins below batches of 10,000; count: the GPU wins from
 * 1); the configuration keys gpu_min_reads and gpu_min_counts override
 * them (0 keeps these).
 */
#define TD_FS_GPU_MIN_READS 10000
#define TD_FS_GPU_MIN_COUNTS 1

typedef struct td_fs_batch td_fs_batch;

/* Start the batcher of fs with the configuration in fs->conf: sets fs->batch
 * and installs fs->exec. Starts threads (workers, batcher, GPU), so call it
 * after fuse_daemonize: threads and CUDA contexts do not survive fork.
 * Returns 0 or -errno (nothing installed then: requests run inline). */
int td_fs_batch_start(td_fs *fs);

/* Answer everything still queued, join the threads, close the GPU, and
 * uninstall fs->exec. Call after the FUSE session loop ended. No-op when
 * fs->batch is NULL. */
void td_fs_batch_stop(td_fs *fs);

/* Called by the td_fs_reply_*() functions of fs_req.h just before r is
 * answered, with the read bytes sent (0 for errors and xattrs): the request
 * stops counting as in flight (so the caller's next request, which may
 * arrive before this thread runs again, finds the daemon idle) and its
 * bytes are counted. No-op when fs->batch is NULL or r did not come
 * through the batcher (r->heap == 0). */
struct td_fs_req;
void td_fs_batch_replying(const struct td_fs_req *r, size_t bytes);

/* A read (is_read) or xattr query answered by a writable mount's own
 * handlers, which bypass the batcher: counted like an inline request, with
 * its latency since t0 (td_fs_batch_clock) and the read bytes sent. No-op
 * when fs->batch is NULL. */
uint64_t td_fs_batch_clock(void);
void td_fs_batch_record(td_fs *fs, int is_read, uint64_t t0, size_t bytes);

/* The value of user.tadoc.stats (fs_stats.h format, one key=value per
 * line) into *val (malloc'd; caller frees). 0, -ENODATA (no batcher) or
 * -ENOMEM. */
int td_fs_batch_stats(td_fs *fs, char **val, size_t *len);

/* Write the same counters as one log line (td_fs_log_always). */
void td_fs_batch_log_stats(td_fs *fs);

/* For gpu = on, before mounting: whether the GPU opens on fs->a with
 * fs->conf and holds the archive, tried in a short-lived child process so
 * that this process starts no CUDA context before fuse_daemonize forks.
 * Returns 1, or 0 with the reason in msg. */
int td_fs_batch_gpu_probe(const td_fs *fs, char *msg, size_t len);

#endif
