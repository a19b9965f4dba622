/* td_writer: build a tadoc archive from files: tokenize, grammar, indexes, write. */
#ifndef TD_WRITER_H
#define TD_WRITER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "td_err.h"
#include "td_index.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Progress callback: `done` of `total` units (bytes read, then grammar
 * rounds); called from the compressing thread. */
typedef void (*td_progress_fn)(void *ctx, const char *phase, uint64_t done, uint64_t total);

/* Each grammar round replaces the digrams seen at least
 * max(2, most frequent / TD_GRAMMAR_DIV) times; CPU and GPU builders share
 * this constant (the archive bytes depend on it). */
#define TD_GRAMMAR_DIV 2u

/* A builder of the grammar's rounds (td_writer_opts.grammar_rounds), e.g.
 * the GPU's (gpu/td_gpu.h): the rounds of the CPU builder exactly (the
 * engine's td_grammar.h: round-based digram replacement, threshold
 * max(2, most frequent / TD_GRAMMAR_DIV), overlaps resolved for the more frequent, the
 * `max_depth` bound, rule ids in order of first occurrence) over
 * seq[0..*n) (terminals < nterm, each file ended by UINT32_MAX). On TD_OK
 * seq[0..*n) holds the sequence after the last round (*n updated) and
 * *pairs (malloc'd; the caller frees) the two symbols of each of the
 * *nrules rules, in creation order; the writer then inlines and lays out
 * the grammar as the CPU builder does, so the archive bytes are the same.
 * TD_ENOGPU: declined (no device, no room, a device error), seq untouched:
 * the writer runs the CPU builder. Other errors fail the build (TD_ENOMEM,
 * TD_ELIMIT as the CPU builder gives them). `max_depth` 0 or > 64 means 32. */
typedef int (*td_grammar_rounds_fn)(void *ctx, uint32_t *seq, uint64_t *n, uint32_t nterm, unsigned max_depth,
				    td_progress_fn progress, void *progress_ctx, uint32_t **pairs, uint64_t *nrules);

typedef struct td_writer_opts {
	unsigned max_depth;       /* rule nesting bound; 0 = default (32) */
	unsigned sample_shift;    /* root offset sample every 2^k elements; 0 = default (5) */
	unsigned format;          /* archive version written: TD_VERSION (0 or any other value),
	                             or 3, which tadoc releases before format 4 read */
	td_progress_fn progress;  /* may be NULL */
	void *progress_ctx;
	/* Index builder (td_index.h); NULL = td_index_build_cpu. fs/ passes
	 * the GPU one (td_gpu_build_indexes) when a GPU is present: engine/
	 * never depends on gpu/. The archive bytes are the same either way. */
	td_index_fn index_build;
	void *index_ctx;
	/* Grammar rounds builder (above); NULL = the CPU's. Same bytes. */
	td_grammar_rounds_fn grammar_rounds;
	void *grammar_ctx;
	/* The build time written into the archive, seconds since the epoch,
	 * and the root's mtime unless the root is added; 0 = now (td_build.h
	 * passes one time to every shard; the CLI takes SOURCE_DATE_EPOCH):
	 * the only time not from the input, so the same input and build time
	 * give the same bytes. */
	int64_t build_time;
	/* Nonzero: the add calls only record each file's bytes (one growing
	 * buffer) and its place; td_writer_finish tokenizes them, in the same
	 * order, on the thread that calls it (td_build.h hands that to a
	 * worker) and the idle cores it may borrow (grammar_cores). The archive bytes are the same either way; memory while
	 * adding is the text itself instead of its tokens. */
	int defer_tokenize;
	/* Idle cores the tokenizer (defer_tokenize) and the grammar rounds
	 * may borrow (td_grammar_cores, an engine-internal shape; td_build.h
	 * passes its workers' idle ones); NULL = the finishing thread alone.
	 * The archive bytes are the same. */
	const struct td_grammar_cores *grammar_cores;
	/* Nonzero: also store the postings (td_format.h, TD_SEC_POSTINGS):
	 * each word's files and counts, so a ranked-files query of one word
	 * reads its list instead of walking the grammar. Memory while
	 * finishing grows by about 16 bytes a (word, file) pair. */
	int postings;
	/* Nonzero: the output is a temporary file the caller reads back and
	 * removes (td_build.h's shards, copied into the archive that is
	 * synced): td_writer_finish skips its fsyncs. */
	int temp_output;
	/* defer_tokenize: about how many bytes of text the writer will hold
	 * (td_build: a shard's size); its buffer is sized for that at the
	 * first byte. 0: it grows from 1 MiB. The archive bytes are the same. */
	uint64_t raw_hint;
	/* defer_tokenize: where a text buffer of raw_hint bytes comes from
	 * (contents unspecified, zeroed or not) and goes back to once the
	 * text is tokenized, or when the writer is freed (td_build keeps a few
	 * for its next shards, so their pages are not faulted and zeroed
	 * again); called from the writer's thread, whichever that is. NULL:
	 * a mapping of its own. Buffers of other sizes never pass through. */
	void *(*raw_get)(void *ctx, size_t size);
	void (*raw_put)(void *ctx, void *p, size_t size);
	void *raw_ctx;
	/* Format 4 only (td_build.h's shards of a format 5 archive ask for
	 * TD_WORDS_TEST): WORDS's layout (td_format.h, TD_SECF_SPLIT).
	 * TD_WORDS_RECORDS (0), the interleaved records at zstd level 17, which
	 * every reader takes; TD_WORDS_SPLIT, the prefix lengths first and the
	 * rests after at level 12, smaller on source code's identifiers (linux
	 * 2-15% a shard) for a fifth to a third of the CPU, larger on prose
	 * (gcide +6%); TD_WORDS_TEST, the split layout where a cheap test of
	 * the words themselves says it is smaller (td_writer.c, words_zstd):
	 * the same bytes for any number of threads. Readers before branch
	 * bspeed8 refuse the split section's flag. */
int words_split;
} td_writer_opts;

enum { TD_WORDS_RECORDS = 0, TD_WORDS_TEST = 1, TD_WORDS_SPLIT = 2 };

/* A writer collects entries, tokenizing file data as it arrives (the data is
 * not kept; with defer_tokenize it is kept and tokenized in finish), then
 * builds one grammar for the corpus in td_writer_finish().
 * Memory is about 4 bytes per token plus the dictionary and the pair table.
 * Not thread-safe. */
typedef struct td_writer td_writer;

/* New writer; opts may be NULL. NULL on out of memory. */
td_writer *td_writer_new(const td_writer_opts *opts);

/* Add an entry at relative path `path` ('/'-separated, no "." or ".."
 * components, no leading '/'); parent directories are created implicitly
 * (mode 0755, mtime of the entry) if not added. Errors: TD_EINVAL (bad path,
 * detail says why), TD_ELIMIT (component > TD_MAXNAME or path >
 * TD_MAXPATH), TD_EEXIST (path added twice), TD_ENOMEM. */
int td_writer_add_dir(td_writer *w, const char *path, mode_t mode, int64_t mtime_sec, uint32_t mtime_nsec);
int td_writer_add_file(td_writer *w, const char *path, mode_t mode, int64_t mtime_sec, uint32_t mtime_nsec,
		       const void *data, size_t len);
int td_writer_add_symlink(td_writer *w, const char *path, int64_t mtime_sec, uint32_t mtime_nsec,
			  const char *target);

/* Check `path` as the add calls do: TD_OK, TD_EINVAL or TD_ELIMIT with
 * detail (td_build.h checks its tree's paths with it). */
int td_writer_check_path(const char *path);

/* Streaming variant of add_file for large files: begin, feed any number of
 * chunks (token boundaries across chunks are handled), end. */
int td_writer_file_begin(td_writer *w, const char *path, mode_t mode, int64_t mtime_sec, uint32_t mtime_nsec);
int td_writer_file_data(td_writer *w, const void *data, size_t len);
int td_writer_file_end(td_writer *w);

/* Add a regular file at `path` whose bytes are those of the regular file
 * `target` added (and ended) earlier: what a hard link in a tar stream is
 * stored as. Same result as adding the bytes again, without them.
 * Errors: those of add_file, and TD_ENOENT (no such regular file added). */
int td_writer_add_copy(td_writer *w, const char *path, mode_t mode, int64_t mtime_sec, uint32_t mtime_nsec,
		       const char *target);

/* With defer_tokenize: where the next `len` bytes of the open file may be
 * written in place (read(2) straight into the writer), valid until the
 * next call on the writer; NULL when there is no file open, no
 * defer_tokenize, or no memory. td_writer_file_wrote(w, n) then adds the
 * first n <= len of them to the file, as td_writer_file_data would (the
 * same archive bytes). TD_EINVAL when no such room was given. Not
 * thread-safe. */
void *td_writer_file_room(td_writer *w, size_t len);
int td_writer_file_wrote(td_writer *w, size_t len);

/* The bytes of the file or symlink `path` added (and ended) earlier, from
 * its tokens (defer_tokenize: its held bytes), into buf (cap bytes); *len gets their number (its size).
 * For td_build's hard links (td_build_add_copy). TD_ENOENT (no such
 * ended file), TD_ERANGE (cap below its size). Not thread-safe. */
int td_writer_file_text(const td_writer *w, const char *path, void *buf, uint64_t cap, uint64_t *len);

/* Build the grammar and write the archive to `out_path` atomically: a
 * temporary file in the same directory, fsync, rename, fsync of the
 * directory (no fsyncs with opts.temp_output). The writer is consumed (freed) whatever the result.
 * Errors: TD_EIO (detail names the file), TD_ENOMEM, TD_ELIMIT. */
int td_writer_finish(td_writer *w, const char *out_path);

/* Free a writer without writing. NULL accepted. */
void td_writer_abort(td_writer *w);

/* Compress inputs into out_path like `mksquashfs`: a single directory
 * argument becomes the archive root (its contents at top level); otherwise
 * each argument (file, directory or symlink) appears at the root under its
 * base name. Regular files, directories and symlinks are stored with mode
 * and mtime; anything else (device, fifo, socket) or an unreadable file is
 * an error naming the path (TD_EUNSUPP / TD_EIO), as is an empty input list
 * (TD_EINVAL). The output file itself is skipped if it lies in the tree. */
int td_compress_paths(const char *out_path, const char *const *inputs, size_t ninputs,
		      const td_writer_opts *opts);

#ifdef __cplusplus
}
#endif
#endif
