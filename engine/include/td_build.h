/* td_build: build an archive on several threads in bounded memory: format 5 shards (or one format 4 grammar). */
#ifndef TD_BUILD_H
#define TD_BUILD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "td_archive.h"
#include "td_err.h"
#include "td_writer.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A builder takes entries in input order, like td_writer (the same add
 * calls, the same path rules and errors), and cuts the files' text into
 * shards of about shard_size bytes: a shard is a td_writer over the files
 * (and symlinks) given to it (named by number: td_format.h), built on a worker
 * thread while the next shard fills; a file larger than what is left of a
 * shard continues in the next one (cut after an ASCII byte that is not a
 * word character, at most 1 MiB past the size, so words and UTF-8
 * sequences never straddle a cut). Finished shards wait in temporary files
 * beside the output (never in memory); finish() writes the version 5
 * container (td_format.h) with the whole tree and the shards.
 *
 * The archive's bytes depend only on the entries, their order, shard_size,
 * the writer options and build_time: any number of jobs writes the same
 * bytes.
 *
 * Memory: each shard in flight (filling, queued: its text; being built:
 * the writer's peak) costs at most about
 * TD_BUILD_BYTES_PER_BYTE times shard_size plus
 * TD_BUILD_SHARD_FIXED; at most (memory - TD_BUILD_BASE) / that many are
 * in flight (the adding thread waits for a worker to finish), and memory
 * must hold one (td_build_memory_min).
 *
 * With format 3 or 4 the builder is one td_writer (no threads, no bound):
 * the archive is exactly td_writer's.
 */

#define TD_BUILD_SHARD_DEFAULT (UINT64_C(64) << 20)
/* A writer's peak memory per byte of text, rounded up from measurements
 * (contrib/bench/results/compress.md), plus a fixed part per shard. Text
 * only: input where nearly every two adjacent tokens differ (random bytes)
 * peaks at up to about 15 bytes a byte (engine/README.md, "Memory bound"). */
#define TD_BUILD_BYTES_PER_BYTE 7u
#define TD_BUILD_SHARD_FIXED (UINT64_C(16) << 20)
/* And the process itself (libraries, the tree, threads' arenas, writing
 * the container). */
#define TD_BUILD_BASE (UINT64_C(8) << 20)

typedef struct td_build_opts {
	td_writer_opts writer;    /* every shard's writer (format ignored; its progress is not called) */
	unsigned format;          /* TD_VERSION_SHARDED (5), or 3 or 4: one td_writer */
	unsigned jobs;            /* threads building shards; 0 = one per online core */
	uint64_t shard_size;      /* text bytes per shard; 0: the one base or keep_from
	                             records (td_archive_shard_size), else the default.
	                             The container records it. */
	uint64_t memory;          /* bound on the shards in flight, bytes; 0 = half the RAM */
	int64_t build_time;       /* written as every shard's build time and root mtime; 0 = now */
	uint64_t total_bytes;     /* the text to come, for progress (0 = unknown) */
	/* Where finished shards wait until finish (put it on the output's
	 * file system: td_build_paths uses the output's directory); NULL =
	 * $TMPDIR or /tmp. */
	const char *tmp_dir;
	/* Or (first) beside this file, the output or the archive compacted or
	 * added to: shard N waits in TMP_TARGET.shardX.N.tmp.PID (td_tmpfile.h),
	 * which td_tmp_sweep removes after a crash. */
	const char *tmp_target;
	/* A version 5 archive to add to (tadoc add): the new archive holds its
	 * tree and its shards, byte for byte, then the shards of the added
	 * entries; adding a path the base has is TD_EEXIST naming it. The
	 * base must stay open until finish. NULL: a new archive. */
	const td_archive *base;
	/* A version 5 archive whose shards flagged in keep (one byte per
	 * shard; NULL = all) the new archive holds byte for byte, in their
	 * order, before the shards built here (per-shard compaction,
	 * td_compact.h); entries reach them through td_build_add_kept. Must
	 * stay open until finish; exclusive with base. */
	const td_archive *keep_from;
	const uint8_t *keep;
	/* 1: write a fuzzy index (format 5: section TD_SEC5_FUZZY, the whole
	 * archive's vocabulary and counts for td_fuzzy over the root, about
	 * the size of the dictionary again); 0 (default): none, unless base or
	 * keep_from has one (adding to or compacting an archive keeps it). */
	int fuzzy_index;
	/* The analytics tables (format 5: section TD_SEC5_ATAB, answers over
	 * the root read as a prefix): the root's top 1000 words (a few KiB;
	 * 100 when those take over 0.1% of the archive) when top_words is 1
	 * or top_ngrams > 0 (0, the default: none, unless base or keep_from
	 * has them; computing them reopens the finished archive after the
	 * shards, its every dictionary and a merge: about 5 s of CPU and
	 * 0.7 GB on linux-source, a serial tail, so not by default); its top top_ngrams n-grams of every
	 * length 2 .. TD_PHRASE_MAX when top_ngrams > 0 (at most 2^20; 0,
	 * the default: none, unless base or keep_from has them, whose count
	 * is then taken; seven n-gram walks of the whole archive at build). */
	int top_words;
	uint64_t top_ngrams;
	/* 1: also store the root's term vector (format 5: section
	 * TD_SEC5_VECTOR, td_vtab.h), so td_term_vector of the root streams
	 * it instead of merging every shard's vocabulary (about 9% of a source
	 * tree's archive; computing it reopens the finished archive: ~3 s of
	 * CPU and 0.7 GB on linux-source, made whatever `memory` says); 0
	 * (default): none, unless base or keep_from has one. */
	int root_vector;
	/* Called from the adding thread: phase "compress", the text bytes of
	 * the finished shards and total_bytes. May be NULL. */
	td_progress_fn progress;
	void *progress_ctx;
} td_build_opts;

/* Defaults: format 5, jobs 0, shard_size TD_BUILD_SHARD_DEFAULT, memory 0. */
void td_build_opts_init(td_build_opts *o);

/* The memory a build may use by default (memory 0), and the least it
 * needs: TD_BUILD_BASE and one shard in flight. */
uint64_t td_build_memory_default(void);
uint64_t td_build_memory_min(uint64_t shard_size);

typedef struct td_build td_build;

/* New builder; NULL opts = defaults. TD_OK, TD_EINVAL (a format other
 * than 3-5, memory below td_build_memory_min, or a base that
 * is not version 5: detail says so), TD_ENOMEM, TD_ECORRUPT (the base's
 * tree), or TD_EIO (a worker thread did not start). Not
 * thread-safe: one thread adds; workers are internal. */
int td_build_new(const td_build_opts *opts, td_build **out);

/* As td_writer_add_dir / _add_file / _add_symlink / _file_begin /
 * _file_data / _file_end, with the same errors; the adding thread may wait
 * while the shards in flight fill the memory bound, and a worker's failure
 * (TD_ENOMEM, TD_EIO, TD_ELIMIT: detail names the shard) is returned by
 * the next call. */
int td_build_add_dir(td_build *b, const char *path, mode_t mode, int64_t mtime_sec, uint32_t mtime_nsec);
int td_build_add_file(td_build *b, const char *path, mode_t mode, int64_t mtime_sec, uint32_t mtime_nsec,
		      const void *data, size_t len);
int td_build_add_symlink(td_build *b, const char *path, int64_t mtime_sec, uint32_t mtime_nsec,
			 const char *target);
int td_build_file_begin(td_build *b, const char *path, mode_t mode, int64_t mtime_sec, uint32_t mtime_nsec);
int td_build_file_data(td_build *b, const void *data, size_t len);
int td_build_file_end(td_build *b);

/* Where up to `len` next bytes of the open file may be read in place (into
 * the shard's writer, td_writer_file_room): *p gets the pointer and *room
 * their number (1..len), valid until the next call on the builder; *p NULL
 * where this builder copies instead (format 3/4, the file reaching the
 * shard's cut: use td_build_file_data). td_build_file_wrote(b, n) then
 * adds the first n <= *room of them, as td_build_file_data would (the same
 * archive bytes). Errors as td_build_file_data's. Not thread-safe. */
int td_build_file_room(td_build *b, size_t len, void **p, size_t *room);
int td_build_file_wrote(td_build *b, size_t len);

/* As td_writer_add_copy (a hard link of a tar stream): a regular file at
 * path with the bytes of the regular file `target` added earlier, read
 * back from its pieces (the shard filling, or a built shard's file once
 * its worker is done: the adding thread may wait) and added as if given
 * again: the archive is the one adding those bytes gives. The target's
 * text is held in memory meanwhile. Errors as td_build_add_file, and
 * TD_ENOENT (no such regular file added). */
int td_build_add_copy(td_build *b, const char *path, mode_t mode, int64_t mtime_sec, uint32_t mtime_nsec,
		      const char *target);

/* Add entry `from` of opts.keep_from at path (or the root, path ""),
 * with mode's permission bits and the mtime given (its type is from's),
 * without its text: its pieces in the kept shards are kept (a symlink's
 * one piece must be). A file has from's size; each range of it whose
 * pieces were in shards not kept must then be given again, in any order,
 * with td_build_file_part (the archive does not verify otherwise). A
 * directory's pieces in other shards are dropped; files added below it
 * later give it more. Errors as the add calls, TD_EINVAL (no keep_from, a
 * type that differs, a symlink in a shard not kept: detail names the
 * path), TD_ECORRUPT (from's pieces). */
int td_build_add_kept(td_build *b, const char *path, mode_t mode, int64_t mtime_sec, uint32_t mtime_nsec,
		      td_entry from);

/* Feed bytes of file `path` (added with td_build_add_kept) from byte
 * `start` up to the start of its next kept piece or its end, as
 * td_build_file_data / td_build_file_end do for a file begun with
 * file_begin: they become new pieces of it (never two in one shard).
 * TD_EINVAL (no such kept file, start past its size, a file open). */
int td_build_file_part(td_build *b, const char *path, uint64_t start);

/* Wait for every shard and write the archive to out_path atomically (a
 * temporary file in the same directory, fsync, rename, fsync of the
 * directory); the temporary shard files are removed whatever happens. The
 * builder is consumed. TD_EIO (detail names the file), TD_ENOMEM,
 * TD_ELIMIT. */
int td_build_finish(td_build *b, const char *out_path);

/* Stop the workers, remove temporary files, free. NULL accepted. */
void td_build_abort(td_build *b);

/* Add each of inputs (file, directory or symlink on disk, walked as
 * td_compress_paths walks them, directories in name order) under its base
 * name, below `to` ("" or NULL: the top level; its missing parents are
 * created; its empty and '.' components are left out, a '..' one is
 * TD_EINVAL). skip (may be NULL) is a file to leave out when met (the
 * archive being written). Errors as the add calls, with the disk path. */
int td_build_add_paths(td_build *b, const char *const *inputs, size_t ninputs, const char *to, const char *skip);

/* td_compress_paths (td_writer.h) through a builder. */
int td_build_paths(const char *out_path, const char *const *inputs, size_t ninputs, const td_build_opts *opts);

#ifdef __cplusplus
}
#endif
#endif
