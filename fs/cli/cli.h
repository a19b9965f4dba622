/* cli: shared pieces of the tadoc command-line tool (messages, output, parsing, commands). */
#ifndef TADOC_CLI_H
#define TADOC_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "td_archive.h"
#include "td_build.h"
#include "td_gpu.h"

/* Exit statuses of tadoc, documented in tadoc(1). */
enum td_cli_exit {
	TD_CLI_OK = 0,      /* success */
	TD_CLI_FAIL = 1,    /* runtime failure: I/O, corrupt archive, not found */
	TD_CLI_USAGE = 2,   /* bad arguments or configuration */
};

/* Size of the chunks cat, extract and unpack read and write. */
#define TD_CLI_CHUNK ((size_t)1 << 20)

/* --- messages (always exactly one line on stderr) --- */

/* Print "tadoc: SUBJECT: MESSAGE" (printf-style message). Returns TD_CLI_FAIL. */
int td_cli_errorf(const char *subject, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Print "tadoc: SUBJECT: <td_strerror(err)>[: <td_errdetail()>]" for an
 * engine error just returned. The detail is left out when empty and its
 * prefix is dropped when it repeats SUBJECT. Returns td_cli_status(err). */
int td_cli_error_td(const char *subject, int err);

/* Print "tadoc: SUBJECT: <strerror(errnum)>". Returns TD_CLI_FAIL. */
int td_cli_error_sys(const char *subject, int errnum);

/* Print a usage error "tadoc: CMD: MESSAGE (see 'tadoc CMD --help')" (CMD may
 * be NULL for the top level). Returns TD_CLI_USAGE. */
int td_cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Exit status for an engine error: TD_CLI_USAGE for errors caused by the
 * arguments (TD_ENOTWORD), TD_CLI_FAIL otherwise, TD_CLI_OK for TD_OK. */
int td_cli_status(int err);

/* Forget any stale engine error detail on this thread. */
void td_cli_clear_detail(void);

/* --- checked, buffered standard output --- */

/* Before a one-shot query: large blocks from the heap, freed memory kept,
 * and the heap on transparent huge pages where the kernel allows (madvise
 * mode): all of it where a page fault costs more than 6 us (timed on two
 * fresh heap pages: a VM whose hypervisor takes each fault), so the
 * process takes a few page faults instead of hundreds; elsewhere past its
 * first MiB (a small query's heap in 4 KiB pages, cheaper than clearing a
 * 2 MiB page). Best effort. */
void td_cli_heap_huge(void);

/* The output buffer from the heap (after td_cli_heap_huge: its pages are
 * then in the huge block), not the static one; before any output. */
void td_cli_out_on_heap(void);

/* Append bytes to stdout. On a write error the process exits with status 1:
 * quietly for EPIPE (the reader went away), with one message otherwise. */
void td_cli_out(const void *buf, size_t len);

/* Room for len bytes at the end of the stdout buffer (written out first
 * when they do not fit), or NULL when len is more than it holds. Bytes
 * written there go out once td_cli_out_commit(n) counts the first n of
 * them (n <= len), before any other output call; a reader that fills the
 * room itself saves td_cli_out's copy. */
void *td_cli_out_room(size_t len);
void td_cli_out_commit(size_t len);

/* printf-style td_cli_out. */
void td_cli_outf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* td_cli_out of v in decimal, then the byte `sep` (a list's count and
 * its tab, without printf's cost on every line). */
void td_cli_out_u64(uint64_t v, char sep);

/* v in decimal, then `sep`, written at the end of b; returns where in b it
 * starts (it is b[start, TD_CLI_U64_LEN)). No failure. */
enum { TD_CLI_U64_LEN = 24 };
size_t td_cli_fmt_u64(char b[TD_CLI_U64_LEN], uint64_t v, char sep);

/* Write out everything buffered (same error handling as td_cli_out). */
void td_cli_flush(void);

/* Flush and close stdout, reporting a failure; returns `status`, or
 * TD_CLI_FAIL when closing failed. Then, when the command succeeded, the
 * note of td_cli_note_at_exit on stderr (a failure prints its one error
 * line only). Called once, at exit. */
int td_cli_finish(int status);

/* Keep `line` (malloc'ed, newline-terminated; ownership passes, NULL
 * drops it) for td_cli_finish. Not thread-safe. */
void td_cli_note_at_exit(char *line);

/* --- parsing --- */

/* Strict unsigned decimal: one or more ASCII digits, nothing else, no
 * overflow. Returns 0 and sets *out, or -1. */
int td_cli_parse_u64(const char *s, uint64_t *out);

/* One option of the sharded builder given to CMD: which is 'j' (-j THREADS,
 * 1 to 4096), 's' (--shard-size SIZE) or 'm' (--memory SIZE), sizes above 0
 * as td_conf_parse_size reads them. Sets the field of *bo and returns
 * TD_CLI_OK, or prints the usage error and returns TD_CLI_USAGE. */
int td_cli_build_opt(const char *cmd, int which, const char *arg, td_build_opts *bo);

/* With no --shard-size given (bo->shard_size 0): the size `archive`
 * records (td_archive_shard_size), else TD_BUILD_SHARD_DEFAULT (also when
 * it does not open: that is reported where it is used). */
void td_cli_shard_size_of(const char *archive, td_build_opts *bo);

/* Before reading any input: --memory (bo->memory, 0 = the default) must
 * hold one shard of bo->shard_size; otherwise print the usage error
 * (both numbers and what to change) and return TD_CLI_USAGE; TD_CLI_OK
 * otherwise. */
int td_cli_build_check(const char *cmd, const td_build_opts *bo);

/* SOURCE_DATE_EPOCH (reproducible builds: the one time written into an
 * archive) when set to a valid number of seconds, else 0 (= now). */
int64_t td_cli_source_date(void);

/* --gpu WORD given to CMD (auto, on or off): sets *use and returns
 * TD_CLI_OK, or prints the usage error and returns TD_CLI_USAGE. */
int td_cli_gpu_opt(const char *cmd, const char *arg, td_gpu_use *use);

/* Set wo's index builder for `use` (td_gpu_writer_use). TD_CLI_OK, or,
 * with --gpu on and no usable GPU, prints "tadoc: CMD: --gpu on: ..." and
 * returns TD_CLI_FAIL. */
int td_cli_gpu_setup(const char *cmd, td_writer_opts *wo, td_gpu_use use);

/* After a build with --gpu on: two lines on stderr saying how many index
 * builds and how many grammars' rounds ran on the GPU and how many on CPU
 * threads. Nothing otherwise. */
void td_cli_gpu_report(td_gpu_use use);

/* --- archives --- */

/* Open `path` (flags as td_archive_open); on failure print the message and
 * return NULL. */
td_archive *td_cli_open(const char *path, unsigned flags);

/* Before ARCHIVE (open as `a`) is replaced: 1 when ARCHIVE.journal holds
 * edits not yet folded in (message printed), -1 on error (printed), 0
 * otherwise; an empty journal is removed, since it names the archive that
 * is being replaced and would keep the new one from mounting (add and
 * compress -o over an archive). */
int td_cli_pending_edits(const char *archive, const td_archive *a);

/* Resolve `path` inside the archive to an entry, following symbolic links
 * that stay inside the archive (relative targets; at most 40 hops) in the
 * middle of the path, and at its end when follow_last is nonzero.
 * Returns TD_OK, or TD_ENOENT, TD_ENOTDIR, TD_EINVAL (path or a link target
 * leaves the archive), TD_ELIMIT (too many links), TD_ECORRUPT, TD_ENOMEM;
 * the detail says which component failed. */
int td_cli_resolve(const td_archive *a, const char *path, int follow_last, td_entry *out);

/* When ARCHIVE.journal beside `archive` holds edits (a writable mount's,
 * not yet compacted), note on stderr at exit, when the command succeeds,
 * that its answer is the archive as built, without them
 * (td_cli_note_at_exit; td_journal_pending decides: two headers read). */
void td_cli_journal_note(const char *archive);

/* Print "tadoc: ARCHIVE: PATH: problem" for an engine error about a path in
 * an archive. Returns td_cli_status(err). */
int td_cli_error_in(const char *archive, const char *path, int err);

/* --- commands: argv[0] is the command name; return the exit status --- */

int td_cmd_compress(int argc, char **argv);
int td_cmd_ls(int argc, char **argv);
int td_cmd_cat(int argc, char **argv);
int td_cmd_extract(int argc, char **argv);
int td_cmd_unpack(int argc, char **argv);
int td_cmd_count(int argc, char **argv);
int td_cmd_search(int argc, char **argv);
int td_cmd_top(int argc, char **argv);     /* cmd_analytics.c */
int td_cmd_vector(int argc, char **argv);
int td_cmd_files(int argc, char **argv);
int td_cmd_ngrams(int argc, char **argv);
int td_cmd_fuzzy(int argc, char **argv);
int td_cmd_info(int argc, char **argv);
int td_cmd_verify(int argc, char **argv);
int td_cmd_mount(int argc, char **argv);
int td_cmd_config(int argc, char **argv);
int td_cmd_insert(int argc, char **argv);  /* cmd_edit.c */
int td_cmd_delete(int argc, char **argv);
int td_cmd_compact(int argc, char **argv); /* cmd_compact.c */
int td_cmd_add(int argc, char **argv);     /* cmd_add.c */

/* Parse the options of a command that takes only -h/--help. Returns -1 when
 * the command should go on with positional arguments from argv[*first], or
 * an exit status (help printed, or a usage error). */
int td_cli_simple_opts(int argc, char **argv, const char *help, int *first);

/* Report the option getopt_long() just rejected (c is '?' or ':') as a
 * usage error of command `cmd`. Returns TD_CLI_USAGE. */
int td_cli_bad_option(const char *cmd, int c, char **argv);

#endif
