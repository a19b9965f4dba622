/* td_compact: fold a mount's edits into a new archive and replace the old one atomically. */
#ifndef TD_COMPACT_H
#define TD_COMPACT_H

#include "td_archive.h"
#include "td_edit.h"
#include "td_journal.h"
#include "td_writer.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Steps, and what a crash after each leaves (never a loss):
 *  1. every live entry of the edited tree is fed to a td_writer (files in
 *     1 MiB chunks through td_edit_read), which writes
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
 * again by path). opts may be NULL.
 * Errors: those of td_writer (TD_EIO naming the file, TD_ENOMEM,
 * TD_ELIMIT), of td_edit_read, of the journal; on error the old archive and
 * journal stay in force. */
int td_compact(const td_archive *a, const td_edit *ed, td_journal *j, const char *archive_path,
	       const td_writer_opts *opts, int *lock_fd);

/* `tadoc compact ARCHIVE`: take the exclusive lock (TD_EBUSY while a
 * writable mount holds it), open the archive, replay its journal (rep, which
 * may be NULL, gets the replay report), compact, release everything. When
 * there is nothing to fold in (no journal records), nothing is rewritten and
 * *rewritten (may be NULL) is 0. */
int td_compact_path(const char *archive_path, const td_writer_opts *opts, td_journal_report *rep,
		    int *rewritten);

#ifdef __cplusplus
}
#endif
#endif
