/* td_compact: rewrite an archive with its edits folded in, crash-safely (see td_compact.h). */
#include "td_compact.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "td_format.h"
#include "td_lock.h"
#include "td_tmpfile.h"

#define CHUNK_BYTES (1u << 20)

typedef struct walk {
	const td_edit *ed;
	td_writer *w;
	td_cursor *cur;
	uint8_t *buf;
	char path[TD_MAXPATH + 2];
} walk;

static int feed_file(walk *k, td_node node, const td_stat *st)
{
	int err = td_writer_file_begin(k->w, k->path, st->mode & 07777, st->mtime_sec, st->mtime_nsec);
	if (err)
		return err;
	for (uint64_t off = 0; off < st->size;) {
		size_t got = 0;
		size_t want = st->size - off < CHUNK_BYTES ? (size_t)(st->size - off) : CHUNK_BYTES;
		if ((err = td_edit_read(k->ed, node, off, k->buf, want, &got, k->cur)))
			return err;
		if (got != want)
			return td_fail(TD_ECORRUPT, "%s: text shorter than its size", k->path);
		if ((err = td_writer_file_data(k->w, k->buf, got)))
			return err;
		off += got;
	}
	return td_writer_file_end(k->w);
}

static int feed_symlink(walk *k, td_node node, const td_stat *st)
{
	if (st->size > TD_MAXPATH)
		return td_fail(TD_ELIMIT, "%s: symlink target too long", k->path);
	char target[TD_MAXPATH + 1];
	size_t got = 0;
	int err = td_edit_read(k->ed, node, 0, target, (size_t)st->size, &got, NULL);
	if (err)
		return err;
	target[got] = '\0';
	return td_writer_add_symlink(k->w, k->path, st->mtime_sec, st->mtime_nsec, target);
}

/* Add the children of dir (whose path is k->path[0..plen)) depth-first,
 * parents before children. */
static int feed_dir(walk *k, td_node dir, size_t plen, unsigned depth)
{
	if (depth > TD_MAXPATH)
		return TD_ECORRUPT;
	uint64_t cookie = 0;
	for (;;) {
		td_node child;
		const char *name;
		size_t nl;
		int err = td_edit_dir_next(k->ed, dir, &cookie, &child, &name, &nl);
		if (err == TD_ENOENT)
			return TD_OK;
		if (err)
			return err;
		size_t len = plen + (plen ? 1 : 0) + nl;
		if (len > TD_MAXPATH)
			return td_fail(TD_ELIMIT, "path longer than %u bytes under '%.*s'", TD_MAXPATH, (int)plen,
				       k->path);
		if (plen)
			k->path[plen] = '/';
		memcpy(k->path + plen + (plen ? 1 : 0), name, nl);
		k->path[len] = '\0';
		td_stat st;
		if ((err = td_edit_stat(k->ed, child, &st)))
			return err;
		if (S_ISDIR(st.mode)) {
			err = td_writer_add_dir(k->w, k->path, st.mode & 07777, st.mtime_sec, st.mtime_nsec);
			if (!err)
				err = feed_dir(k, child, len, depth + 1);
		} else if (S_ISLNK(st.mode)) {
			err = feed_symlink(k, child, &st);
		} else {
			err = feed_file(k, child, &st);
		}
		if (err)
			return err;
		k->path[plen] = '\0';
	}
}

static int sync_dir_of(const char *path)
{
	char *copy = strdup(path);
	if (!copy)
		return TD_ENOMEM;
	int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int err = TD_OK;
	if (fd < 0 || fsync(fd) != 0)
		err = td_fail(TD_EIO, "%s: cannot sync its directory: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	free(copy);
	return err;
}

int td_compact(const td_archive *a, const td_edit *ed, td_journal *j, const char *archive_path,
	       const td_writer_opts *opts, int *lock_fd)
{
	(void)a;
	size_t cap = strlen(archive_path) + 64;
	char *tmp = malloc(cap);
	if (!tmp)
		return TD_ENOMEM;
	/* the name of earlier versions, left over from an interrupted compaction */
	snprintf(tmp, cap, "%s.compact", archive_path);
	unlink(tmp);
	int err = td_tmp_path(archive_path, "compact", tmp, cap);
	if (err) {
		free(tmp);
		return err;
	}
	walk *k = calloc(1, sizeof(*k));
	if (k)
		k->buf = malloc(CHUNK_BYTES);
	if (k)
		k->cur = td_cursor_new(td_edit_archive(ed));
	if (k)
		k->w = td_writer_new(opts);
	if (!k || !k->buf || !k->cur || !k->w) {
		err = TD_ENOMEM;
		goto out;
	}
	k->ed = ed;
	/* 1. the new archive, complete and durable, beside the old one */
	td_stat rs;
	if ((err = td_edit_stat(ed, TD_ROOT, &rs)) ||
	    (err = td_writer_add_dir(k->w, "", rs.mode & 07777, rs.mtime_sec, rs.mtime_nsec)))
		goto out;
	err = feed_dir(k, TD_ROOT, 0, 0);
	if (err)
		goto out;
	err = td_writer_finish(k->w, tmp);
	k->w = NULL;
	if (err)
		goto out;

	/* 2. lock it (the lock moves with the file) and name it in the journal */
	int nfd = open(tmp, O_RDONLY | O_CLOEXEC);
	if (nfd < 0) {
		err = td_fail(TD_EIO, "%s: %s", tmp, strerror(errno));
		goto out;
	}
	if (flock(nfd, LOCK_EX | LOCK_NB) != 0) {
		err = td_fail(TD_EBUSY, "%s: locked by another process", tmp);
		close(nfd);
		goto out;
	}
	uint64_t nsize, nsum;
	if ((err = td_journal_archive_id(tmp, &nsize, &nsum))) {
		close(nfd);
		goto out;
	}
	if (j) {
		td_edit_rec r = { .type = TD_REC_COMPACT, .off = nsize, .len = nsum };
		if ((err = td_journal_log(j, &r)) || (err = td_journal_sync(j))) {
			close(nfd);
			goto out;
		}
	}
	/* 3. install it */
	if (rename(tmp, archive_path) != 0) {
		err = td_fail(TD_EIO, "%s: cannot replace the archive: %s", archive_path, strerror(errno));
		close(nfd);
		goto out;
	}
	td_unlock_archive(*lock_fd);
	*lock_fd = nfd;
	if ((err = sync_dir_of(archive_path)))
		goto out;
	/* 4. empty the journal, tied to the new archive */
	if (j)
		err = td_journal_reset(j, nsize, nsum);
out:
	if (k) {
		td_writer_abort(k->w);
		td_cursor_free(k->cur);
		free(k->buf);
		free(k);
	}
	if (err)
		unlink(tmp);
	free(tmp);
	return err;
}

int td_compact_path(const char *archive_path, const td_writer_opts *opts, td_journal_report *rep,
		    int *rewritten)
{
	int lock = -1;
	td_archive *a = NULL;
	td_edit *ed = NULL;
	td_journal *j = NULL;
	if (rewritten)
		*rewritten = 0;
	int err = td_lock_archive(archive_path, 1, TD_LOCK_WAIT_MS, &lock);
	if (err)
		return err;
	if ((err = td_archive_open(archive_path, 0, &a)) || (err = td_edit_new(a, &ed)) ||
	    (err = td_journal_open(archive_path, ed, 0, &j, rep)))
		goto out;
	if (td_journal_seq(j) == 0 && !td_edit_changed(ed))
		goto out;
	err = td_compact(a, ed, j, archive_path, opts, &lock);
	if (!err && rewritten)
		*rewritten = 1;
out:
	td_journal_close(j);
	td_edit_free(ed);
	td_archive_close(a);
	td_unlock_archive(lock);
	return err;
}
