/* td_edit: the in-memory edit state of a writable mount: a piece table per file over an archive. */
#ifndef TD_EDIT_H
#define TD_EDIT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "td_archive.h"
#include "td_extract.h"
#include "td_query.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Decision 6: edits never rewrite the grammar. A td_edit overlays one open
 * archive with
 *   - nodes: every base entry keeps its entry number as node id; nodes made
 *     by create/mkdir/symlink get fresh ids nentries, nentries+1, ... in
 *     creation order (the id is part of the create record, so replay gives
 *     the same ids). Ids are never reused until compaction; an unlinked node
 *     stays readable (open descriptors) with parent TD_NOENTRY.
 *   - per file a piece table: the file's bytes are the concatenation of
 *     pieces, each one a range of the base entry's text (read with
 *     td_extract / td_cursor_read), a range of the append buffer (all bytes
 *     ever written, in write order), or a run of zero bytes (holes, extending
 *     truncates). An untouched file has no table and reads straight from the
 *     archive.
 *   - per changed directory a sorted child list (copied from the archive on
 *     its first change; untouched directories answer from the archive).
 *
 * Every change is one record (td_edit_rec). A record is checked, then handed
 * to the log hook (the journal: td_journal_log), and only applied when the
 * hook succeeded, so what the state shows is always what the journal holds.
 * Replaying the same records on the same archive gives the same state, node
 * ids included.
 *
 * Content edits are "in sequence" (the GPU random-access paper's term): each
 * record's offset is interpreted in the file as left by all earlier records.
 *
 * Thread safety: a td_edit is not locked. Readers (lookup, stat, read, dir,
 * count, search, pieces) only read the state and may run concurrently with
 * each other; a change must exclude all other calls (a rwlock in fs/).
 */

/* Node id: a base entry number, or a node created by an edit. */
typedef uint32_t td_node;

typedef struct td_edit td_edit;

/* Record types. Values are stored in the journal: never renumber. */
typedef enum td_rec_type {
	TD_REC_WRITE = 1,     /* node, off, data: pwrite (a gap before off reads as zeros) */
	TD_REC_INSERT = 2,    /* node, off, data: insert before byte off (off <= size), shift the rest */
	TD_REC_DELETE = 3,    /* node, off, len: remove [off, off+len) (clamped to the size), shift the rest */
	TD_REC_TRUNCATE = 4,  /* node, off = new size: cut, or extend with zeros */
	TD_REC_CREATE = 5,    /* dir, name, node = new id, mode (S_IFREG/S_IFDIR/S_IFLNK|perm),
	                         data = symlink target */
	TD_REC_UNLINK = 6,    /* dir, name: remove a file or symlink */
	TD_REC_RMDIR = 7,     /* dir, name: remove an empty directory */
	TD_REC_RENAME = 8,    /* dir, name -> dir2, name2; flags TD_RENAME_NOREPLACE */
	TD_REC_CHMOD = 9,     /* node, mode (permission bits; the type is kept) */
	TD_REC_UTIMES = 10,   /* node, time = new mtime */
	TD_REC_COMPACT = 11   /* journal only: off = size, len = header checksum of the
	                         archive a compaction is about to install (td_compact.h) */
} td_rec_type;

#define TD_RENAME_NOREPLACE 1u

/* One edit record: the single representation of a change, used by the
 * journal (the same fields, little-endian, see td_journal.h) and meant for
 * the GPU batch-edit path too (an array of content records of one file,
 * applied in order). Unused fields are zero. `time` is the change time the
 * record sets: the file's mtime for content records, the mtime of the
 * directories a namespace record changes (and of a created node), the new
 * mtime for TD_REC_UTIMES; chmod sets no time. Pointers are borrowed: the
 * state copies what it keeps. */
typedef struct td_edit_rec {
	uint32_t type;            /* td_rec_type */
	uint32_t flags;           /* TD_RENAME_* */
	td_node node;
	td_node dir;
	td_node dir2;
	uint32_t mode;
	uint64_t off;
	uint64_t len;
	int64_t time_sec;
	uint32_t time_nsec;
	uint32_t name_len;
	uint32_t name2_len;
	const char *name;
	const char *name2;
	const void *data;
	uint64_t data_len;
} td_edit_rec;

/* Piece kinds of a file's piece table. */
enum td_piece_kind {
	TD_PIECE_BASE = 0,    /* bytes [src, src+len) of base entry `entry` */
	TD_PIECE_BUF = 1,     /* bytes [src, src+len) of the append buffer */
	TD_PIECE_ZERO = 2     /* len zero bytes */
};

/* One piece: file bytes [off, off+len). Pieces are sorted by off, adjacent,
 * non-empty. */
typedef struct td_piece {
	uint64_t off;
	uint64_t len;
	uint64_t src;
	uint32_t kind;            /* td_piece_kind */
	td_entry entry;           /* TD_PIECE_BASE only */
} td_piece;

/* Hook that makes a checked record durable before it is applied (the
 * journal). Return TD_OK to let the change happen, or an error that the
 * change call then returns unchanged. */
typedef int (*td_edit_log_fn)(void *ctx, const td_edit_rec *rec);

/* New, empty edit state over `a` (borrowed; must outlive the state). O(1).
 * TD_OK or TD_ENOMEM. */
int td_edit_new(const td_archive *a, td_edit **out);

/* Free the state. NULL accepted. */
void td_edit_free(td_edit *ed);

/* The archive the state overlays. */
const td_archive *td_edit_archive(const td_edit *ed);

/* Install the log hook (NULL: changes are not logged). */
void td_edit_set_log(td_edit *ed, td_edit_log_fn fn, void *ctx);

/* Check `rec`, log it through the hook, apply it. TD_OK, or the error of
 * the check (state and journal unchanged), of the hook (state unchanged) or
 * TD_ENOMEM while applying (the record is logged but the state may be
 * partly changed: the caller must stop taking changes and remount, which
 * replays the journal). A create must carry node ==
 * td_edit_next_node(). Errors of the check: TD_ENOENT, TD_EEXIST,
 * TD_ENOTDIR, TD_EISDIR, TD_ENOTEMPTY, TD_EINVAL (bad name, offset past the
 * end for insert, rename of a directory into itself, wrong type for the
 * operation), TD_EPERM, TD_EUNSUPP (file type), TD_ELIMIT (name or path too
 * long), TD_EFBIG (a size over 2^62 bytes). */
int td_edit_apply(td_edit *ed, const td_edit_rec *rec);

/* Apply without logging (journal replay). Same checks. */
int td_edit_replay(td_edit *ed, const td_edit_rec *rec);

/* Id the next create will get. */
td_node td_edit_next_node(const td_edit *ed);

/* Convenience wrappers: build the record (time = now, CLOCK_REALTIME) and
 * td_edit_apply() it. Errors as td_edit_apply. */
int td_edit_write(td_edit *ed, td_node node, uint64_t off, const void *data, size_t len);
int td_edit_insert(td_edit *ed, td_node node, uint64_t off, const void *data, size_t len);
int td_edit_delete(td_edit *ed, td_node node, uint64_t off, uint64_t len);
int td_edit_truncate(td_edit *ed, td_node node, uint64_t size);
/* mode's type picks file, directory or symlink (target required for
 * symlinks, ignored otherwise). *out receives the new node (may be NULL). */
int td_edit_create(td_edit *ed, td_node dir, const char *name, size_t len, mode_t mode,
		   const char *target, td_node *out);
int td_edit_unlink(td_edit *ed, td_node dir, const char *name, size_t len);
int td_edit_rmdir(td_edit *ed, td_node dir, const char *name, size_t len);
int td_edit_rename(td_edit *ed, td_node dir, const char *name, size_t len, td_node dir2,
		   const char *name2, size_t len2, unsigned flags);
int td_edit_chmod(td_edit *ed, td_node node, mode_t mode);
int td_edit_utimes(td_edit *ed, td_node node, int64_t sec, uint32_t nsec);

/* --- reading the edited tree (all O(1) or O(log) unless stated) --- */

/* 1 if any change was applied. */
int td_edit_changed(const td_edit *ed);

/* 1 when node is an archive entry that reads exactly as in the archive: a
 * file with its archive text, a directory whose whole subtree (names,
 * files, texts) is the archive's; its modes and times aside, and its own
 * name and place aside (compare td_edit_path with td_archive_path). 0
 * otherwise: a created, unlinked or changed node, a directory with a
 * change below it, no such node. Once 0, it stays 0 (until compaction
 * makes a new archive). O(1). */
int td_edit_clean(const td_edit *ed, td_node node);

/* Bytes held by the append buffer (the auto-compaction measure). */
uint64_t td_edit_buffer_bytes(const td_edit *ed);

/* Child `name` of directory `dir`. TD_OK, TD_ENOENT, TD_ENOTDIR, TD_EINVAL. */
int td_edit_lookup(const td_edit *ed, td_node dir, const char *name, size_t len, td_node *out);

/* Resolve a '/'-separated relative path like td_archive_lookup_path. */
int td_edit_lookup_path(const td_edit *ed, const char *path, td_node *out);

/* Attributes of a node: mode, size, mtime, parent (TD_NOENTRY once
 * unlinked; the root's parent is 0). nwords is the archive's value for an
 * unchanged file and 0 otherwise: use td_edit_nwords. TD_OK or TD_EINVAL
 * (no such node). */
int td_edit_stat(const td_edit *ed, td_node node, td_stat *st);

/* Name of a linked node (not NUL-terminated); NULL for unlinked or bad
 * nodes. The pointer lives until the next change. */
const char *td_edit_name(const td_edit *ed, td_node node, size_t *len);

/* Relative path of a linked node into buf (NUL-terminated); returns the
 * length, TD_ERANGE (cap too small), TD_EINVAL, TD_ENOENT (unlinked). */
int td_edit_path(const td_edit *ed, td_node node, char *buf, size_t cap);

/* Directory listing: children in bytewise name order. Start with
 * *cookie = 0; each TD_OK call returns one child and advances *cookie;
 * TD_ENOENT at the end. The name pointer lives until the next change.
 * Errors: TD_ENOTDIR, TD_EINVAL. */
int td_edit_dir_next(const td_edit *ed, td_node dir, uint64_t *cookie, td_node *child,
		     const char **name, size_t *len);

/* Copy up to len bytes of the node's text (file bytes, symlink target) at
 * off into buf; *got = min(len, size - off), 0 past the end. `cur` may be
 * NULL; given, base pieces are read through it (a cursor is per reader),
 * and small deleted gaps between pieces are read through too, so a read
 * re-seeks at most once instead of once per piece: pass a cursor for
 * sequential reads of edited files.
 * Errors: TD_EISDIR, TD_EINVAL, and those of td_extract. */
int td_edit_read(const td_edit *ed, td_node node, uint64_t off, void *buf, size_t len, size_t *got,
		 td_cursor *cur);

/* The piece table of a file: *pieces and *n (NULL/0 and *base = the entry when
 * the file is unchanged and reads as a whole base entry; *base =
 * TD_NOENTRY otherwise). Valid until the next change. For the GPU path. */
int td_edit_pieces(const td_edit *ed, td_node node, const td_piece **pieces, size_t *n, td_entry *base);

/* Bytes of the append buffer [off, off+len) (a TD_PIECE_BUF piece). */
const uint8_t *td_edit_buffer(const td_edit *ed, uint64_t off, uint64_t len);

/*
 * Word counts and search over edited files stay exact (decision 2, with the
 * engine's td_query word definition). The method: a byte that is an ASCII
 * non-word character (< 0x80, not [0-9A-Za-z_]) is a complete character in
 * any context, so no word and no UTF-8 sequence crosses it. For each run of
 * base bytes in a file the *interior* reaches from its first to just past
 * its last such separator byte; inside it, words are exactly the base
 * file's words there, so they are taken from the archive (td_search hits,
 * or the base word total minus the words outside the interiors). Everything
 * else - edited bytes plus the few base bytes up to the nearest separator on
 * each side of every edit - is re-tokenized from the file's current bytes.
 * A word spanning a piece boundary therefore lands in a re-tokenized window.
 * Cost: O(edited bytes + boundary margins) plus the archive query; when the
 * windows would outweigh the file, the file is simply scanned.
 */

/* How counts over edited files are computed: TD_WORDS_AUTO picks by cost;
 * TD_WORDS_WINDOWS always takes the archive's answer for the interiors;
 * TD_WORDS_SCAN always re-tokenizes the whole file. All give the same
 * numbers; the choice exists for tests and benchmarks. Call before any
 * concurrent reader (not synchronised). */
enum td_words_strategy { TD_WORDS_AUTO = 0, TD_WORDS_WINDOWS = 1, TD_WORDS_SCAN = 2 };
void td_edit_set_words_strategy(td_edit *ed, int strategy);

/* Word tokens in a file's current text, counted like td_stat.nwords (words
 * of at most TD_MAXTOK bytes; longer runs are not word tokens): exactly the
 * nwords a compaction would store. 0 for symlinks; a directory sums its
 * subtree. Errors: TD_EINVAL, TD_ENOMEM, TD_ECORRUPT. */
int td_edit_nwords(const td_edit *ed, td_node node, uint64_t *n);

/* Occurrences of `word` (any length, like td_count) in scope (file: its
 * text; directory: its subtree). Errors as td_count. */
int td_edit_count(const td_edit *ed, const char *word, size_t len, td_node scope, uint64_t *count);

/* Append the occurrences of `word` in scope to *out (td_hit.file is the
 * node id), ordered by node id then offset. Errors as td_search. */
int td_edit_search(const td_edit *ed, const char *word, size_t len, td_node scope, td_hits *out);

#ifdef __cplusplus
}
#endif
#endif
