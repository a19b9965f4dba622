/* td_journal: the append-only, checksummed journal of edit records beside an archive. */
#ifndef TD_JOURNAL_H
#define TD_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "td_edit.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The journal of archive A is the file "A.journal" beside it (decision 6).
 * Layout, little-endian:
 *
 *   header (64 bytes)
 *     char magic[8]      "TDJRNL\0\1"
 *     u32  version       1
 *     u32  header_size   64
 *     u64  archive_size  size of the archive the records apply to
 *     u64  archive_sum   that archive's header checksum (td_disk_header.header_sum)
 *     u64  reserved[3]
 *     u64  header_xxh3   XXH3-64 of bytes [0, 56)
 *   records, back to back:
 *     u32  rec_size      bytes of the whole record, 8-aligned, >= 96
 *     u32  zero
 *     u64  seq           1, 2, 3, ... (each record the previous one + 1)
 *     u32  type, flags, node, dir, dir2, mode          (td_edit_rec)
 *     u64  off, len
 *     i64  time_sec
 *     u32  time_nsec, name_len, name2_len, zero
 *     u64  data_len
 *     u8   name[name_len] name2[name2_len] data[data_len], zero padding to 8
 *     u64  xxh3          XXH3-64 of every byte of the record before it
 *
 * The header ties the journal to one archive: records are only replayed
 * onto the archive whose size and header checksum it names, so a journal is
 * never replayed onto the archive a compaction wrote from it.
 *
 * Recovery. Replay reads records in order and stops at the first one that
 * is cut short (torn write), fails its checksum, has an impossible size or
 * an out-of-order sequence number. Everything before it is kept and
 * replayed; the bytes from it to the end are copied to
 * "A.journal.damaged-OFFSET", or "A.journal.damaged-OFFSET.N" (the first
 * free N from 1) when an earlier damage at the same offset was saved
 * there (nothing is thrown away unseen, no saved tail overwritten), the journal is
 * truncated there, and the report says which file, which byte offset and
 * why. A record that is intact but does not apply (it names a node or file
 * that does not exist) means the journal does not belong to this archive
 * state: open fails with TD_ECORRUPT and touches nothing.
 *
 * Compaction (td_compact.h) appends a TD_REC_COMPACT record naming the new
 * archive before it renames the new archive into place; a journal whose
 * header names another archive but whose last record is a COMPACT naming
 * the current one is recognised as already folded in, and emptied.
 */

typedef struct td_journal td_journal;

enum td_journal_flags {
	TD_JOURNAL_SYNC = 1u << 0,     /* fdatasync after every append (-o sync=always) */
	TD_JOURNAL_READONLY = 1u << 1  /* replay only: never create, repair or append */
};

/* What open found, for the mount's log. */
typedef struct td_journal_report {
	uint64_t records;         /* records replayed */
	uint64_t bytes;           /* valid journal bytes (header included) */
	uint64_t damaged_off;     /* byte offset of the damage; 0 when none */
	uint64_t dropped;         /* bytes cut off at damaged_off */
	int reset;                /* 1: an already-compacted journal was emptied */
	char msg[512];            /* one line for the user; empty when clean */
	unsigned swept;           /* stale temporaries removed (writable opens) */
	char swept_msg[512];      /* one line naming them; empty when none */
} td_journal_report;

/* Open (or create) the journal of the archive file `archive_path` and replay
 * its records into `ed` (which must be a fresh state over that archive),
 * repairing a damaged tail as described above. On success *out appends
 * further records; install it with td_edit_set_log(ed, td_journal_log,
 * *out). A writable open is where a writer takes the archive over (the
 * caller holds its exclusive lock, td_lock.h), so it first removes the
 * temporaries that crashed writers of the archive left (td_tmp_sweep:
 * those of processes that no longer run) and reports them in
 * rep->swept_msg. With TD_JOURNAL_READONLY the journal (if any) is only replayed,
 * never created or repaired, and *out is NULL. rep may be NULL; rep->msg
 * is the line to show the user when not empty.
 * Errors: TD_EIO (detail names the file), TD_EFORMAT (archive header
 * unreadable), TD_ECORRUPT (bad journal header, journal of another
 * archive, record that does not apply: detail names the file and byte
 * offset; the journal is left untouched), TD_ENOMEM. */
int td_journal_open(const char *archive_path, td_edit *ed, unsigned flags, td_journal **out,
		    td_journal_report *rep);

/* Close the file. NULL accepted. Does not sync. */
void td_journal_close(td_journal *j);

/* Append one record (td_edit_log_fn): a single write at the end; with
 * TD_JOURNAL_SYNC also fdatasync. On failure the journal is cut back to its
 * previous end and TD_EIO is returned (detail: file and strerror). */
int td_journal_log(void *j, const td_edit_rec *rec);

/* Make every appended record durable (fdatasync). TD_OK or TD_EIO. May be
 * called from any thread, also while another thread appends. */
int td_journal_sync(td_journal *j);

/* Journal size in bytes (header included). */
uint64_t td_journal_bytes(const td_journal *j);

/* Sequence number of the last record (0 when empty). */
uint64_t td_journal_seq(const td_journal *j);

/* Path of the journal file. */
const char *td_journal_path(const td_journal *j);

/* Identity of an archive file: its size and header checksum, read from the
 * file. TD_OK, TD_EIO, TD_EFORMAT. */
int td_journal_archive_id(const char *archive_path, uint64_t *size, uint64_t *sum);

/* 1 when "ARCHIVE.journal" beside archive_path holds at least one record
 * and its header is sound and names this archive (its size and header
 * checksum): edits a writable mount made that no compaction folded in yet.
 * 0 otherwise, also when a file cannot be read (the records themselves are
 * not read: a torn or damaged first record still counts). Reads two
 * headers; sets no error detail. Thread-safe. */
int td_journal_pending(const char *archive_path);

/* Replace the journal by an empty one tied to the archive identity
 * (size, sum): written to a temporary file, fsynced and renamed over, with
 * the directory fsynced. Used by compaction. TD_OK or TD_EIO. */
int td_journal_reset(td_journal *j, uint64_t size, uint64_t sum);

#ifdef __cplusplus
}
#endif
#endif
