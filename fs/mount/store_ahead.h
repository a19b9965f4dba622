/* store_ahead: reading ahead into the kernel's page cache on read-only mounts (FUSE_NOTIFY_STORE). */
#ifndef TD_FS_AHEAD_H
#define TD_FS_AHEAD_H

#include <stddef.h>

#include "ctx.h"
#include "req.h"

/*
 * The kernel reads a file ahead in steps (the first one 32 KiB for a
 * reader such as `cat` or `tar`), each step a READ round trip, and reads
 * each file of a tree on its own. On a read-only mount, whose bytes never
 * change, the daemon can do better than wait to be asked:
 *
 *   - within a file: the first read of a file (offset 0, more than one
 *     page: readahead at work, not a random reader; never for O_DIRECT
 *     readers, who bypass the page cache) extracts the whole
 *     file when it is at most 1 MiB and fits the readahead window
 *     (conf.read_ahead, 8 MiB by default) and stores the bytes past the
 *     request in the page cache before replying, so the next step finds
 *     them there: one round trip for the file;
 *   - across files: when two files that follow each other in a directory
 *     (entry order, the order readdir gives) were read whole this way in a
 *     row, the next files of that directory are extracted and stored too,
 *     up to one window of bytes: half before the reply (so the reader
 *     does not race the run), half after it (overlapping the reader's own
 *     work); the next miss of the reader (the file after them) continues
 *     the run. A reader going through a tree then waits for about one
 *     round trip a window instead of one a file.
 *
 * Configuration key store_ahead (on by default) turns both off. Stores go
 * only from FUSE threads (requests answered where they came in), from at
 * most half of them at once and at most half the cores (td_fs_ahead_setup),
 * and only with two FUSE threads or more: a store waits for the page locks
 * of any READ in flight on the same pages, which another thread answers.
 * Every reader that meets the end of a run, or gets ahead of it, joins it
 * after its reply: the threads claim the run's next files one by one, so
 * on many cores they keep ahead of a reader that reads cached files faster
 * than one thread extracts them. A store the kernel refuses (the inode is
 * not in its cache: a file nobody looked up or listed) ends that thread's
 * part. Writable mounts never store (the edit overlay answers reads
 * itself).
 */

/* Before the session loop starts, with its number of FUSE threads (0:
 * single-threaded): how many may store at once, half of them and at most
 * half the cores (at least 1), or none below two threads. */
void td_fs_ahead_setup(td_fs *fs, unsigned fuse_threads);

/* For a READ r about to be extracted: the bytes of its file past the
 * request to extract with it (0: none), and in *whole whether r, so
 * extended, reads the file from its start to its end. */
size_t td_fs_ahead_want(const td_fs *fs, const td_fs_req *r, int *whole);

/* Store tail[0..len), the bytes of r's file right after its request, in
 * the page cache. Call before replying to r (the kernel then finds them
 * when the reader gets there). Skipped while the storers' places are all
 * taken. */
void td_fs_ahead_tail(td_fs *fs, const td_fs_req *r, const void *tail, size_t len);

/* After a read of entry e that *whole said reads it whole: whether it
 * starts a run (the entry before e was the last one read whole) or
 * continues one (e is near the next file the run would store). Call once
 * per such read. */
int td_fs_ahead_begin(td_fs *fs, td_entry e);

/* For a read of e that continues a run: store the next files of e's
 * directory not claimed yet, half a window of bytes before replying to it
 * (before_reply = 1: the reader waits for them instead of racing the run),
 * then a window after (before_reply = 0). Skipped while the storers'
 * places are all taken. */
void td_fs_ahead_next(td_fs *fs, td_entry e, int before_reply);

#endif
