/* batcher: the background batcher: a request queue drained into CPU-worker or GPU batches. */
#ifndef TD_FS_BATCH_H
#define TD_FS_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "ctx.h"

/*
 * Reads and user.tadoc.* queries reach the batcher through fs->exec
 * (ctx.h). Each one is either
 *   - queued, where a batch can do better than the FUSE thread that
 *     received it. With a GPU ready (hybrid split): a count, or a read of
 *     at least gpu_min_read_size bytes, that finds half of cpu_workers (at
 *     least 1) requests already being answered inline by FUSE threads (the
 *     CPU is full: it would wait for a core; the other half of the cores
 *     goes to the FUSE round trips themselves) while the mount's queue is
 *     deep (the kernel's request count from fusectl, sampled every
 *     millisecond: at least 2 requests a worker for counts, 8 for reads,
 *     where waiting for a core costs more than a GPU round trip), and a
 *     count that finds nothing else in flight (the GPU wins from one
 *     count), except counts the engine answers with a look-up or its
 *     query index (td_query_fast: the corpus, large directories and
 *     files); the list queries top.N, vector, fuzzy.K.WORD and
 *     files.PHRASE of a scope hiding nothing from the caller queue as
 *     counts do (and count toward gpu_min_counts), and go out as one
 *     td_gpu_top/vector/fuzzy/files_batch call a kind, their values made
 *     from the answers by td_fs_xattr_given on the batcher thread; the
 *     FUSE threads keep answering everything else themselves,
 *     so the CPU serves at full rate while the GPU takes the excess. Only
 *     kinds whose crossover (gpu_min_reads, gpu_min_counts) is at most
 *     4096 queue, so gpu_min_reads=10000 keeps every read on the CPU.
 *     Without a GPU, nothing (the FUSE threads answering inline were
 *     measured faster than the hand-off to workers), unless
 *     TADOCFS_BATCH_CPU=1 queues every request that finds others in flight;
 *   - or answered inline in the FUSE thread: everything else, in particular
 *     a read that finds no other request in flight (an idle daemon adds no
 *     queueing and no wait: a lone reader pays nothing), a read continuing
 *     a sequential reader (its cursor beats any batch), search and words
 *     queries, everything with batch_max = 1, and every request on a mount
 *     with an edit overlay (fs->rw: the direct path, so a read after an
 *     acknowledged write sees it).
 * Hand-off: a handler pushes the request onto a lock-free stack and wakes
 * the batcher thread only when it sleeps waiting for that many requests
 * (an idle batcher, or one waiting out the window); the batcher takes the
 * whole stack at once. It drains the queue into batches of at most
 * batch_max requests: when a GPU is ready and the queue holds a
 * crossover's worth of reads or counts, the batcher thread itself makes
 * them one td_gpu_extract_batch / td_gpu_count_batch call (no thread is
 * woken for it; it replies itself to small batches; larger ones' replies
 * are spread over the CPU workers so the next batch launches at once;
 * requests arriving meanwhile form the next batch); everything else goes
 * to cpu_workers worker threads (a thread started with gpu = auto only
 * opens the GPU). Below
 * the crossover the batcher waits up to batch_window_us for more requests,
 * but only while requests keep arriving fast enough to reach it inside
 * that window (an idle or slow queue never waits). Reads of one file whose
 * byte ranges overlap or touch are extracted once and each is answered
 * from the shared bytes. Replies are sent from worker threads or the
 * batcher thread (decision 7). The GPU is opened with blocking
 * synchronisation: the batcher sleeps while a batch runs instead of
 * spinning on a core the FUSE threads need.
 *
 * gpu = off: no GPU. auto: the GPU is opened in the background when one is
 * usable and the archive fits it (td_gpu_resident); everything stays on the
 * CPU until it is ready. on: as auto, but a failure to open it ends the
 * mount (check beforehand with td_fs_batch_gpu_probe).
 * Crossovers (the configuration keys gpu_min_reads and gpu_min_counts
 * override them; 0 keeps these): the hybrid split already sends the GPU
 * only requests the CPU has no room for, so a queued read or count goes to
 * the GPU as soon as it is free (1). gpu_min_read_size (32 KiB) keeps
 * smaller reads on the CPU: the GPU saves a read's extraction, in
 * proportion to its bytes, while its hand-off costs about the same for any
 * read. (What these defaults and the alternatives measured:
 * contrib/bench/NOTES.md, "Batcher"; contrib/bench/results/batcher.md.)
 * gpu_bench's batch crossover (CPU threads with nothing else to do
 * against the GPU) does not apply to a daemon whose cores are busy with
 * FUSE.
 */
#define TD_FS_GPU_MIN_READS 1
#define TD_FS_GPU_MIN_COUNTS 1
#define TD_FS_GPU_MIN_READ_SIZE 32768

typedef struct td_fs_batch td_fs_batch;

/* Start the batcher of fs with the configuration in fs->conf: sets fs->batch
 * and installs fs->exec. Starts threads (workers, batcher, GPU), so call it
 * after fuse_daemonize: threads and CUDA contexts do not survive fork.
 * Returns 0 or -errno (nothing installed then: requests run inline). */
int td_fs_batch_start(td_fs *fs);

/* FUSE threads to start when -o max_threads is not given: dflt, or with a
 * GPU in use at least twice the requests the FUSE threads answer at once
 * (half of cpu_workers), so that threads are free to take requests beyond
 * them for the GPU. */
unsigned td_fs_batch_fuse_threads(const td_fs *fs, unsigned dflt);

/* Answer everything still queued, join the threads, close the GPU, and
 * uninstall fs->exec. Call after the FUSE session loop ended. No-op when
 * fs->batch is NULL. */
void td_fs_batch_stop(td_fs *fs);

/* Called by the td_fs_reply_*() functions of req.h just before r is
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

/* Count one store ahead into the page cache of `bytes` bytes (store_ahead.h),
 * which the kernel took. No-op when fs->batch is NULL. */
void td_fs_batch_stored(td_fs *fs, size_t bytes);

/* The value of user.tadoc.stats (stats.h format, one key=value per
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
