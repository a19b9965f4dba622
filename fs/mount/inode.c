/* inode: entry attributes for the kernel, and the subtree totals. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "inode.h"
#include "xattr_perm.h"
#include "td_err.h"

static void tree_pass(td_fs *fs, td_fs_tree *t)
{
	uint32_t n = fs->nentries;
	t->words = calloc(n, sizeof *t->words);
	t->subdirs = calloc(n, sizeof *t->subdirs);
	for (int c = 0; c < 3; c++)
		t->denied[c] = calloc(n, sizeof *t->denied[c]);
	if (!t->words || !t->subdirs || !t->denied[0] || !t->denied[1] || !t->denied[2]) {
		t->err = -ENOMEM;
		return;
	}
	/* Entries are numbered breadth-first, so every child has a larger
	 * index than its parent: one descending pass folds each subtree into
	 * its parent after the subtree is complete. */
	for (uint32_t i = n; i-- > 0;) {
		td_stat st;
		int err = td_archive_stat(fs->a, i, &st);
		if (err) {
			t->err = -td_err_errno(err);
			return;
		}
		if (S_ISREG(st.mode))
			t->words[i] += st.nwords;
		for (int c = 0; c < 3; c++)
			t->denied[c][i] += !td_fs_who_may(c + 1, st.mode);
		if (i == TD_ROOT)
			break;
		if (st.parent >= i) {
			t->err = -EIO;      /* not breadth-first: a broken archive */
			return;
		}
		t->words[st.parent] += t->words[i];
		for (int c = 0; c < 3; c++)
			t->denied[c][st.parent] += t->denied[c][i];
		if (S_ISDIR(st.mode))
			t->subdirs[st.parent]++;
	}
}

int td_fs_tree_get(td_fs *fs, const td_fs_tree **out)
{
	if (!atomic_load_explicit(&fs->tree.done, memory_order_acquire)) {
		pthread_mutex_lock(&fs->tree.mu);
		if (!atomic_load_explicit(&fs->tree.done, memory_order_relaxed)) {
			tree_pass(fs, &fs->tree);
			atomic_store_explicit(&fs->tree.done, 1, memory_order_release);
		}
		pthread_mutex_unlock(&fs->tree.mu);
	}
	if (fs->tree.err)
		return fs->tree.err;
	*out = &fs->tree;
	return 0;
}

/* Subdirectories directly under directory e: from the subtree totals once
 * they are built (or for a directory of more than SUBDIR_SCAN_MAX
 * children), else by a look at e's children (O(children)): the first
 * `ls -l` after the mount does not wait for the pass over every entry
 * (O(entries), 83k on linux-source), which only the xattrs need. */
#define SUBDIR_SCAN_MAX 65536u
static int subdirs_of(td_fs *fs, td_entry e, nlink_t *n)
{
	if (atomic_load_explicit(&fs->tree.done, memory_order_acquire)) {
		if (fs->tree.err)
			return fs->tree.err;
		*n = fs->tree.subdirs[e];
		return 0;
	}
	td_entry first;
	uint32_t count;
	int err = td_archive_children(fs->a, e, &first, &count);
	if (err)
		return -td_err_errno(err);
	if (count > SUBDIR_SCAN_MAX) { /* the pass pays for itself */
		const td_fs_tree *t;
		int rc = td_fs_tree_get(fs, &t);
		if (rc)
			return rc;
		*n = t->subdirs[e];
		return 0;
	}
	nlink_t k = 0;
	for (uint32_t i = 0; i < count; i++) {
		td_stat cs;
		if ((err = td_archive_stat(fs->a, first + i, &cs)) != 0)
			return -td_err_errno(err);
		k += S_ISDIR(cs.mode) != 0;
	}
	*n = k;
	return 0;
}

int td_fs_getattr(td_fs *fs, td_entry e, struct stat *st)
{
	td_stat ts;
	if (e == TD_NOENTRY || e >= fs->nentries)
		return -ENOENT;
	int err = td_archive_stat(fs->a, e, &ts);
	if (err)
		return -td_err_errno(err);
	nlink_t nlink = 1;
	if (S_ISDIR(ts.mode)) {
		int rc = subdirs_of(fs, e, &nlink);
		if (rc == -EIO) /* its listing is damaged (a large tree, checked when */
			nlink = 1; /* listed: engine/README.md): "not counted", and the */
		else if (rc)    /* listing itself gives the error, not its parent's */
			return rc;
		else
			nlink += 2;
	}
	td_fs_stat_fill(fs, td_fs_ino(e), &ts, nlink, st);
	return 0;
}

void td_fs_stat_fill(const td_fs *fs, fuse_ino_t ino, const td_stat *ts, nlink_t nlink, struct stat *st)
{
	memset(st, 0, sizeof *st);
	st->st_ino = (ino_t)ino;
	st->st_mode = ts->mode;
	st->st_nlink = nlink;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_size = (off_t)ts->size;
	st->st_blksize = 4096;
	st->st_blocks = (blkcnt_t)((ts->size + 511) / 512);
	st->st_mtim.tv_sec = ts->mtime_sec;
	st->st_mtim.tv_nsec = ts->mtime_nsec;
	st->st_atim = st->st_mtim;
	st->st_ctim = st->st_mtim;
}

void td_fs_entry_fill(const td_fs *fs, fuse_ino_t ino, struct fuse_entry_param *ep)
{
	ep->ino = ino;
	ep->generation = 1;
	ep->attr_timeout = fs->attr_timeout;
	ep->entry_timeout = fs->entry_timeout;
}

int td_fs_entry_param(td_fs *fs, td_entry e, struct fuse_entry_param *ep)
{
	memset(ep, 0, sizeof *ep);
	int rc = td_fs_getattr(fs, e, &ep->attr);
	if (rc)
		return rc;
	td_fs_entry_fill(fs, td_fs_ino(e), ep);
	return 0;
}
