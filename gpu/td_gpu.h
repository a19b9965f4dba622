/* td_gpu: batched extract, count and search, the index build and insert/append batch resolution on a CUDA GPU over the archive layout. */
#ifndef TD_GPU_H
#define TD_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "td_analytics.h"
#include "td_archive.h"
#include "td_edit_batch.h"
#include "td_extract.h"
#include "td_index.h"
#include "td_query.h"
#include "td_writer.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The GPU engine serves the same batched calls as the CPU engine
 * (td_extract_batch, td_count_batch, td_search_batch), with the same request
 * structs, and gives byte-identical results: every answer the kernels
 * cannot give exactly (a query that is not in the dictionary, a word longer
 * than TD_MAXTOK bytes, a bad scope, a search whose hits do not fit the
 * device buffers) is answered by the CPU engine inside the same call.
 *
 * Residency. td_gpu_open() uploads the sections that extract, count and
 * search read (file columns, dictionary, rules, root sequence, samples) once,
 * as they are stored: the kernels decode the packed tiles in place
 * (td_pack.h). It also builds two GPU-side indexes: a 128-bit word
 * signature per rule (TD_MASK_W in td_gpu_int.h), used to skip rules that
 * cannot contain a queried word,
 * the expanded text of every rule of at most TD_RX_MAX (128) bytes
 * (td_gpu_int.h; when it fits beside the rest), which extract copies instead
 * of descending into the rule, and the byte offset of every root symbol
 * (opts.seek_index; when it fits), where extract seeks.
 * If those bytes plus working space do not fit the device memory (or the
 * configured cap), the archive is NOT uploaded: the handle opens in CPU
 * fallback mode, td_gpu_resident() returns 0, and every batch call is served
 * by the CPU engine with opts.cpu_threads threads (same results, CPU speed).
 *
 * Shards and devices. A version 5 archive (shards, td_format.h) is made
 * resident shard by shard: each shard (a format 4 grammar with its own
 * dictionary) is uploaded on its own, to one of the devices of
 * opts.devices (largest shards first, each to the device with the most
 * room left), as long as it fits; shards that do not fit are served by the
 * CPU engine inside the same batch calls (partial residency;
 * td_gpu_residency() says how many are resident). When every shard is
 * resident, shards are also copied to the other devices that have room to
 * spare, so a large shard's requests can be shared among devices
 * ($TD_GPU_COPIES=0: no copies). A batch is split by
 * shard (a read crossing a cut between pieces of a file into one request
 * per piece, a count or search over a directory into one per shard
 * holding part of it), every device runs its part at once on its own host
 * threads while the CPU serves the shards that are not resident, and the
 * answers are put together in request order: the same bytes as one device
 * and as the CPU engine (td_extract_batch, td_count_batch,
 * td_search_batch on the whole archive). A version 1-4 archive is one
 * unit: resident on opts.device when opts.devices holds it, else on the
 * first device of opts.devices, or not at all.
 *
 * Built without CUDA (gpu/td_gpu_stub.c), td_gpu_available() returns 0 and
 * td_gpu_open() returns TD_ENOGPU ("no GPU").
 *
 * Threads: one td_gpu serves one batch at a time; concurrent calls on the
 * same handle are serialised by an internal lock. The archive must outlive
 * the handle.
 */
typedef struct td_gpu td_gpu;

typedef struct td_gpu_opts {
	int device;               /* CUDA device ordinal (default 0), used when
	                             devices is 0 */
	uint64_t devices;         /* the devices to spread shards over: bit d =
	                             device ordinal d (0..63); 0 = `device`
	                             alone; TD_GPU_DEVICES_ALL (the default) =
	                             every visible device */
	uint64_t mem_cap;         /* device bytes to use at most, on each
	                             device; 0 = free memory less a 256 MiB
	                             reserve */
	unsigned cpu_threads;     /* CPU threads for fallback work; 0 = one per core */
	unsigned nstreams;        /* copy/compute streams per batch; 0 = 4 */
	/* Extract tuning (gpu_bench sweeps both): */
	uint32_t xchunk;          /* output bytes per GPU lane: a read of len
	                             bytes is ceil(len / xchunk) lanes, each
	                             seeking on its own; 0 = 256; 16 .. 1 MiB */
	uint32_t xcoop;           /* reads of at least this many bytes are walked
	                             by a whole warp together instead (one seek,
	                             32 symbols a step, copies by all 32 lanes);
	                             0 = 1024; UINT32_MAX = never */
	uint32_t xseg;            /* output bytes a warp walks of a warp-walked
	                             read (each warp seeks on its own); 0 =
	                             adaptive: 8 KiB, halved down to 512 bytes
	                             while a round would give the device fewer
	                             than 16 warps an SM (small batches of long
	                             reads: their latency is the walk of one
	                             segment); 512 .. 1 MiB, a power of two */
	uint64_t piece_bytes;     /* output bytes per launch (one upload, kernel
	                             and download on one stream) in rounds of
	                             2 MiB or more; 0 = 32 MiB; at most 64
	                             pieces a round */
	uint64_t zc_bytes;        /* zero copy: a round of at most this many
	                             output bytes whose buffers take the direct
	                             path (td_gpu_host_alloc) is written by the
	                             kernel straight into them, and its results
	                             into pinned host memory: one upload and one
	                             launch, no download after it, the copy
	                             overlapping the walk; every read of such a
	                             round is warp-walked (their stores are
	                             32-byte runs), so a round of more reads
	                             than 16 warps an SM takes it only when
	                             they average 512 bytes or more. 0 = 4 MiB;
	                             UINT64_MAX = never (each round downloads) */
	uint32_t qpart;           /* a count or search whose scope holds more
	                             than this many root symbols (a large
	                             file, or a directory's files) is cut into
	                             parts of about this many, each walked by a
	                             warp of its own, so no request is much
	                             longer than the others; 0 = 2048;
	                             UINT32_MAX = never cut */
	int seek_index;           /* 0 (default): keep the byte offset of every
	                             root symbol on the device (8 bytes a root
	                             symbol, when that fits beside the rest), so
	                             a read finds its place by one binary search
	                             instead of the archive's samples and a scan
	                             of the root between them (short reads are
	                             mostly that seek); -1: never */
	int blocking_sync;        /* how a host thread waits for the device:
	                             0 (default): spins, lowest latency
	                             (gpu_bench); 1: sleeps
	                             (cudaDeviceScheduleBlockingSync, blocking
	                             events), for callers whose cores are busy
	                             with other work, at some tens of us more
	                             a batch (gpu_bench -l); 2: spins but
	                             yields its core between polls
	                             (cudaDeviceScheduleYield) */
} td_gpu_opts;

#define TD_GPU_DEVICES_ALL UINT64_MAX

/* Fill *o with the defaults above. */
void td_gpu_opts_default(td_gpu_opts *o);

/* 1 if this build has CUDA and at least one usable device, else 0.
 * Never fails loudly; cheap after the first call. */
int td_gpu_available(void);

/* Start creating device 0's CUDA context on a background thread, so the
 * first GPU call of a build about to start (tadoc compress, add, compact)
 * does not wait for it; the thread is joined at exit (atexit) or by a
 * later call. No-op without CUDA or after the first call. Thread-safe. */
void td_gpu_warm_start(void);

/* Number of visible CUDA devices; 0 without CUDA or without a device. */
int td_gpu_device_count(void);

/* Open the GPU engine on archive `a` (opts may be NULL: defaults).
 * Returns TD_OK and *out, TD_ENOGPU (no CUDA build or no usable device;
 * detail says which), TD_EINVAL (bad device ordinal, or opts.devices names
 * a device that does not exist; detail says which), TD_ENOMEM (host),
 * TD_ECORRUPT (a section the kernels need is malformed), TD_EIO (a CUDA
 * call failed; detail has the CUDA message). An archive too large for the
 * device is not an error: see "Residency". */
int td_gpu_open(const td_archive *a, const td_gpu_opts *opts, td_gpu **out);

/* Release device memory, streams and pinned buffers. NULL accepted. */
void td_gpu_close(td_gpu *g);

/* 1 if the archive (of a version 5 archive: at least one shard) lives on
 * a device, 0 in CPU fallback mode. */
int td_gpu_resident(const td_gpu *g);

/* Residency in units (a version 5 archive's shards; 1 for versions 1-4):
 * *resident of *units live on devices, spread over *ndevices devices (those
 * holding at least one). Any pointer may be NULL. */
void td_gpu_residency(const td_gpu *g, uint32_t *resident, uint32_t *units, unsigned *ndevices);

/* Device name ("NVIDIA H100 80GB HBM3"; "2 x NVIDIA H100 80GB HBM3" when
 * shards are spread over two), or "cpu fallback". Never NULL. */
const char *td_gpu_device_name(const td_gpu *g);

/* Seconds td_gpu_open() spent uploading sections and building the rule
 * signatures (for benchmarks). */
double td_gpu_open_seconds(const td_gpu *g);

/* Serve n extract requests: same contract and results as
 * td_extract_batch(). A round of requests (bounded by the output bytes that
 * fit in device memory) is split into pieces of about opts.piece_bytes of
 * output over the streams; each piece uploads its requests, runs its
 * kernel and downloads its results into pinned host memory, so one piece's
 * download overlaps the next pieces' kernels, and host threads copy each
 * finished piece out to the callers' buffers while later pieces run (the
 * one host copy: the buffers are the caller's, not pinned). Returns TD_OK,
 * or TD_EIO if a CUDA call failed (requests then carry undefined results),
 * TD_ENOMEM. */
int td_gpu_extract_batch(td_gpu *g, td_extract_req *reqs, size_t n);

/* Host memory the results can land in directly. td_gpu_host_alloc returns
 * `bytes` of pinned (page-locked) host memory registered with g, or plain
 * malloc memory when g is NULL or in CPU fallback mode; NULL if neither can
 * be had. Free it with td_gpu_host_free (before td_gpu_close), which takes
 * either kind. Thread-safe; an allocation costs about a millisecond per
 * few MiB, so callers keep and reuse blocks.
 *
 * The direct path. When the buffers of a round of td_gpu_extract_batch
 * requests lie back to back in one such block, in request order
 * (reqs[i+1].buf == (char *)reqs[i].buf + reqs[i].len, requests the GPU
 * serves), the results are downloaded straight into them: no pinned
 * staging and no host copy-out, so the batch runs at the device -> host
 * link's rate; a round of at most opts.zc_bytes is written into them by
 * the kernel itself (zero copy). Results are the same; on this path only,
 * the bytes of a buffer past reqs[i].got (a read crossing the end of its
 * file) are left unspecified instead of untouched. Any other layout takes
 * the copy-out path. */
void *td_gpu_host_alloc(td_gpu *g, size_t bytes);
void td_gpu_host_free(td_gpu *g, void *p);

/* Same contract and results as td_count_batch(). Requests over a large
 * scope other than the whole corpus (td_query_fast: the engine answers
 * them from its query index while a warp would walk the whole scope), and
 * any the kernels cannot answer, go to one td_count_batch() on
 * opts.cpu_threads threads. */
int td_gpu_count_batch(td_gpu *g, td_count_req *reqs, size_t n);

/* Same contract and results as td_search_batch(): hits are appended to
 * reqs[i].hits (allocated with malloc/realloc; free with td_hits_free).
 * One host round trip per batch sizes the hit buffers. Searches over a
 * large scope (td_query_fast, the whole corpus included) and those the
 * kernels cannot answer go to one td_search_batch() on the CPU. */
int td_gpu_search_batch(td_gpu *g, td_search_req *reqs, size_t n);

/* Same contract and results as td_fuzzy_batch(). Each resident unit (the
 * archive, or each resident shard) finds every query's dictionary words
 * within its distance on its device, one warp per query and run of words
 * of the right lengths; then each request is answered on opts.cpu_threads
 * threads by td_fuzzy_batch_given with those matches (the scope's counts, long
 * words, words cut between shards, order and errors are the engine's).
 * Units not resident, or that cannot take the batch, are searched by the
 * engine's tree. Returns TD_OK, TD_EINVAL, or TD_ENOMEM. */
int td_gpu_fuzzy_batch(td_gpu *g, td_fuzzy_req *reqs, size_t n);

/* Same contract and results as td_files_batch(). Single words over a
 * scope the engine's query index does not answer at once (td_query_fast)
 * are searched by one td_gpu_search_batch; each file's count is its number
 * of hits, ranked by the engine (td_files_batch_given) on opts.cpu_threads
 * threads, which also answers phrases, long words, large scopes and any
 * request whose search failed. Returns TD_OK, TD_EINVAL or TD_ENOMEM. */
int td_gpu_files_batch(td_gpu *g, td_files_req *reqs, size_t n);

/* Same contracts and results as td_top_batch() and td_vector_batch().
 * The scopes' word counts are computed on the device: every root symbol of
 * the batch's scopes a thread expanding its words, then a sort of (scope,
 * word) keys and their runs; top words sorted again by count (ties by
 * word), on the device, or on opts.cpu_threads threads with
 * $TD_GPU_TOP_HOST set. The whole corpus, scopes holding words longer
 * than TD_MAXTOK, symbolic links and scopes too large for a round are
 * answered by the engine in the same call. Returns TD_OK, TD_EINVAL or
 * TD_ENOMEM. */
int td_gpu_top_batch(td_gpu *g, td_words_req *reqs, size_t n);
int td_gpu_vector_batch(td_gpu *g, td_words_req *reqs, size_t n);

/* Same contract and results as td_ngram_batch(). Each scope's runs of len
 * words are counted on the device: the expansion of td_gpu_top_batch
 * writes every request's words in file order, each position that starts a
 * run inside its file is sorted by (request, its len words) in stable
 * radix passes, equal neighbours are counted, and the counts are ranked
 * (count descending, then the words' byte order) and cut to `top` on the
 * device; the host joins the words. A round a length. The whole corpus,
 * scopes holding words longer than TD_MAXTOK, symbolic links, bad lengths
 * and scopes too large for a round are answered by the engine in the same
 * call. Returns TD_OK, TD_EINVAL or TD_ENOMEM. */
int td_gpu_ngram_batch(td_gpu *g, td_ngram_req *reqs, size_t n);

/* The link's ceilings, for stating extract throughput against them
 * (gpu_bench): GB/s (1e9 bytes/s) of `bytes`-long copies on `device`,
 * medians of a few runs timed with device events, after a warm-up. */
typedef struct td_gpu_link {
	double d2h_pinned;        /* device -> pinned host: where extract
	                             results land, the ceiling of extract */
	double d2h_pinned_2;      /* the same split over 2 streams */
	double d2h_pageable;      /* device -> malloc'ed host */
	double h2d_pinned;        /* pinned host -> device */
	double host_copy;         /* pinned -> malloc'ed host memcpy by
	                             host_threads threads (the copy-out) */
	unsigned host_threads;
} td_gpu_link;

/* Measure *out (host_threads: threads for the host copy, 0 = 8). TD_OK,
 * TD_ENOGPU, TD_ENOMEM, TD_EIO. Built without CUDA: TD_ENOGPU. */
int td_gpu_link_measure(int device, uint64_t bytes, unsigned host_threads, td_gpu_link *out);

/* ---- index build (td_index.h) ---- */

/* Context of td_gpu_build_indexes and the edit-batch calls (NULL: device 0,
 * fall back to the CPU quietly). */
typedef struct td_gpu_run {
	int device;               /* CUDA device ordinal */
	int strict;               /* 1: return TD_ENOGPU / TD_ENOMEM / TD_EIO instead
	                             of falling back to the CPU builder */
	int ran_on_gpu;           /* out: 1 when the last build ran on the GPU */
} td_gpu_run;

/* The GPU index builder, a td_index_fn for td_writer_opts.index_build:
 * RULE_LEN, RULE_SAMPLES, ROOT_SAMPLES, E_GSTART, WORD_FREQ and E_NWORDS
 * identical to td_index_build_cpu's, computed level by level over the rule
 * DAG and by prefix sums over the root sequence (gpu/td_gpu_index.cu).
 * ctx is NULL or a td_gpu_run. Without a usable device, when the
 * arrays do not fit in free device memory, or on a CUDA error it runs the
 * CPU builder (unless ctx->strict). Built without CUDA: the CPU builder. */
int td_gpu_build_indexes(void *ctx, const td_index_in *in, td_index_out *out);

/* Make `opts` build indexes and grammar rounds on the GPU when
 * td_gpu_available() (the shared builders below); otherwise leave it
 * untouched. Returns 1 when the GPU builders were set, else 0. Same as
 * td_gpu_writer_use(opts, AUTO). */
int td_gpu_writer_opts(td_writer_opts *opts);

/* The CLI's --gpu auto|on|off (tadoc compress, compact, add). */
typedef enum td_gpu_use {
	TD_GPU_USE_AUTO = 0,      /* the GPU when one is usable, else the CPU */
	TD_GPU_USE_ON = 1,        /* the GPU; no usable GPU is an error */
	TD_GPU_USE_OFF = 2,       /* the CPU alone */
} td_gpu_use;

/* "auto", "on" or "off" into *use: 0, or -1 for any other string. */
int td_gpu_use_parse(const char *s, td_gpu_use *use);

/* Set `opts`' index builder and grammar rounds for `use`: OFF leaves opts
 * untouched (CPU), AUTO sets td_gpu_build_indexes_shared and
 * td_gpu_grammar_rounds_shared when td_gpu_available() and otherwise
 * leaves opts untouched, ON sets them or returns TD_ENOGPU (detail says
 * why: built without CUDA, or no usable device). TD_OK otherwise. */
int td_gpu_writer_use(td_writer_opts *opts, td_gpu_use use);

/* A td_index_fn for writers that may run on many threads at once (the
 * shards of td_build.h): one build at a time runs on the GPU (device 0,
 * td_gpu_build_indexes with its quiet CPU fallback); a call that finds the
 * GPU busy builds on the calling thread with td_index_build_cpu. The
 * output is identical either way. ctx: ignored (NULL). Thread-safe. */
int td_gpu_build_indexes_shared(void *ctx, const td_index_in *in, td_index_out *out);

/* How many td_gpu_build_indexes_shared calls in this process ran on the
 * GPU and on the CPU so far (either pointer may be NULL). Thread-safe. */
void td_gpu_build_counts(uint64_t *on_gpu, uint64_t *on_cpu);

/* ---- grammar rounds (td_writer.h's td_grammar_rounds_fn) ---- */

/* The grammar's rounds on the GPU, a td_grammar_rounds_fn for
 * td_writer_opts.grammar_rounds: the same rules in the same order and the
 * same final sequence as the CPU builder's rounds (so the archive is the
 * same bytes), each round counting every digram afresh, picking the hot
 * ones and replacing them by sorts, prefix sums and per-position kernels
 * (gpu/td_gpu_grammar.cu). ctx is NULL (device 0) or a td_gpu_run
 * (ran_on_gpu set on success). Declines with TD_ENOGPU, seq untouched,
 * without a usable device, when the sequence's arrays (about 60 bytes a
 * symbol) do not fit in free device memory, or on a CUDA error before the
 * result is copied back (TD_EIO after). TD_ENOMEM (host), TD_ELIMIT as the
 * CPU builder. Built without CUDA: TD_ENOGPU. Thread-safe: each call runs on
 * a CUDA stream of its own. Its device memory comes from the device's
 * default memory pool, which keeps it for the next call until
 * td_gpu_grammar_release. */
int td_gpu_grammar_rounds(void *ctx, uint32_t *seq, uint64_t *n, uint32_t nterm, unsigned max_depth,
			  td_progress_fn progress, void *progress_ctx, uint32_t **pairs, uint64_t *nrules);

/* Give the device memory that td_gpu_grammar_rounds calls freed (kept in
 * the device's memory pool for the next call) back to the driver; call it
 * when no call runs. Built without CUDA: does nothing. Thread-safe. */
void td_gpu_grammar_release(void);

/* A td_grammar_rounds_fn for writers on many threads (the shards of
 * td_build.h): runs td_gpu_grammar_rounds, two calls at a time at most
 * (each on its own stream). A call that finds both taken waits for its
 * turn while the sequences queued ahead of it would take the GPU less time
 * (estimated from the calls that ran) than its own rounds would take a
 * core, and otherwise declines (TD_ENOGPU) at once, so the writer runs the
 * CPU rounds on its own thread. Same bytes either way. The pool's memory
 * goes back (td_gpu_grammar_release) whenever no call runs or waits.
 * ctx: ignored. Thread-safe. */
int td_gpu_grammar_rounds_shared(void *ctx, uint32_t *seq, uint64_t *n, uint32_t nterm, unsigned max_depth,
				 td_progress_fn progress, void *progress_ctx, uint32_t **pairs, uint64_t *nrules);

/* How many td_gpu_grammar_rounds_shared calls in this process ran on the
 * GPU and were left to the CPU so far (either pointer may be NULL). */
void td_gpu_grammar_counts(uint64_t *on_gpu, uint64_t *on_cpu);

/* ---- digram counts (the first step of a grammar round) ---- */

/* Count every digram of `seq` (n symbols, each file ended by TD_SPLIT =
 * UINT32_MAX) on device 0 as engine/td_grammar.c's count table holds them:
 * the pair (seq[i], seq[i+1]) counts unless either is TD_SPLIT, and in a
 * run of one repeated symbol every other pair from the run's start counts.
 * On success *ndistinct digrams in ascending order of (a << 32 | b) in
 * *keys with their counts in *counts (malloc'd, the caller frees; NULL and
 * 0 when there is none). TD_OK, TD_ENOMEM (host), TD_EIO (a CUDA call
 * failed, device memory included; detail has the CUDA message), TD_ENOGPU
 * (built without CUDA). Thread-safe (each call has its own device memory). */
int td_gpu_digram_count(const uint32_t *seq, uint64_t n, uint64_t **keys, uint32_t **counts, uint64_t *ndistinct);

/* ---- insert/append batches (td_edit_batch.h) ---- */

/* Resolve an insert/append batch on the GPU: same contract, same out[] and
 * perm[] as td_edit_batch_resolve (records checked on the host first). In
 * batch: two stable radix sorts (snapshot offset, then file) and a prefix
 * sum of the inserted lengths per file; in sequence: a stable sort by file
 * and the same prefix sum (sizes so far, appends); mixed: the sort, then
 * one thread per file walks its records in batch order over a treap
 * (td_bt_add: O(k log k) for k records of a file). A batch with a bad
 * offset is handed to the CPU resolver, which names the record. ctx: NULL or
 * a td_gpu_run (strict: no CPU fallback). gpu/td_gpu_edit.cu. */
int td_gpu_edit_resolve(void *ctx, const td_edit *ed, const td_edit_rec *recs, size_t n, int mode,
			td_edit_rec *out, uint32_t *perm);

/* td_gpu_edit_resolve, then td_edit_apply_resolved: the contract of
 * td_edit_apply_batch (the journal hook sees every record). */
int td_gpu_edit_apply_batch(void *ctx, td_edit *ed, const td_edit_rec *recs, size_t n, int mode,
			    size_t *napplied);

#ifdef __cplusplus
}
#endif
#endif
