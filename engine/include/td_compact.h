/* td_compact: fold a mount's edits into a new archive and replace the old one atomically. */
#ifndef TD_COMPACT_H
#define TD_COMPACT_H

#include "td_archive.h"
#include "td_build.h"
#include "td_edit.h"
#include "td_journal.h"
#include "td_writer.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Steps, and what a crash after each leaves (never a loss):
 *  1. every live entry of the edited tree is fed to a builder (td_build.h;
 *     files in 1 MiB chunks through td_edit_read), which writes
 *     ARCHIVE.compact.tmp.PID (td_tmpfile.h) atomically (temp file, fsync,
 *     rename, directory fsync);
 *                                   -> old archive + journal (the
 *                                      temporaries are removed by the next
 *                                      writable journal open: td_tmp_sweep)
 *  2. ARCHIVE.compact.tmp.PID is locked and a TD_REC_COMPACT record naming it (size,
 *     header checksum) is appended to the journal and fsynced;
 *                                   -> old archive + journal: the record
 *                                      names another archive, replay skips it
 *  3. ARCHIVE.compact.tmp.PID is renamed over ARCHIVE and the directory fsynced;
 *                                   -> new archive + a journal whose last
 *                                      record names it: td_journal_open
 *                                      empties it instead of replaying
 *  4. the journal is replaced by an empty one tied to the new archive.
 *                                   -> new archive + empty journal
 * The journal is never replayed onto the new archive: its header names the
 * old archive's size and header checksum.
 */

/* Compact: `a` is the open archive at archive_path, `ed` its edit state,
 * `j` its journal (may be NULL when there is none), *lock_fd the exclusive
 * lock (td_lock_archive) the caller holds; nothing may change `ed` while
 * this runs. On success *lock_fd locks the new archive (the old lock is
 * released), the journal is empty, and the caller must reopen the archive
 * and start a new td_edit: node ids of the new archive differ (look nodes up
 * again by path). opts may be NULL. The new archive has opts->format (5:
 * shards, td_build.h, with default jobs and memory bound and the shard
 * size the archive records, else the default; 3 or 4), or with 0 the old
 * archive's: version 5 stays sharded (per shard: td_compact_build),
 * version 3 stays 3, versions 1, 2 and 4 become version 4.
 * Errors: those of td_writer (TD_EIO naming the file, TD_ENOMEM,
 * TD_ELIMIT), of td_edit_read, of the journal; on error the old archive and
 * journal stay in force. */
int td_compact(const td_archive *a, const td_edit *ed, td_journal *j, const char *archive_path,
	       const td_writer_opts *opts, int *lock_fd);

/* What a compaction of a version 5 archive into version 5 did. */
typedef struct td_compact_stats {
	uint32_t shards_before;   /* the old archive's shards (0: not version 5) */
	uint32_t shards_kept;     /* of those, copied byte for byte */
	uint32_t shards_built;    /* built from the files of the others and new files */
} td_compact_stats;

/* How to compact: the builder's options (format, 0 = the archive's as
 * above; shard_size, 0 = the one the archive records (td_archive_shard_size),
 * else the default; jobs, memory, build_time, writer; base, keep_from and
 * tmp_dir are set here), and full: rebuild every shard (repack the archive
 * at shard_size, as a compress of the edited tree would). */
typedef struct td_compact_opts {
	td_build_opts build;
	int full;
} td_compact_opts;

/* td_compact with td_compact_opts (NULL: defaults, format the archive's). Version 5 into version 5 is per shard: a shard is
 * rebuilt only when it holds text of a file or symlink that was edited,
 * deleted or moved to another directory, or another piece of a file that
 * has a piece in such a shard; every other shard is copied byte for byte
 * (renames in place, chmod and utimes change the tree only). The files of
 * rebuilt shards and new files go, in tree order, into new shards after
 * the kept ones. stats may be NULL. Errors as td_compact. */
int td_compact_build(const td_archive *a, const td_edit *ed, td_journal *j, const char *archive_path,
		     const td_compact_opts *opts, td_compact_stats *stats, int *lock_fd);

/* `tadoc compact ARCHIVE`: take the exclusive lock (TD_EBUSY while a
 * writable mount holds it), open the archive, replay its journal (rep, which
 * may be NULL, gets the replay report), compact, release everything. When
 * there is nothing to fold in (no journal records) and opts asks for no
 * change between sharded and not, nothing is rewritten and *rewritten (may
 * be NULL) is 0. */
int td_compact_path(const char *archive_path, const td_writer_opts *opts, td_journal_report *rep,
		    int *rewritten);

/* td_compact_path with td_compact_opts and stats (as td_compact_build;
 * stats stays zero when nothing is rewritten). With opts->full the archive
 * is rewritten even without edits. */
int td_compact_path_build(const char *archive_path, const td_compact_opts *opts, td_journal_report *rep,
			  int *rewritten, td_compact_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
