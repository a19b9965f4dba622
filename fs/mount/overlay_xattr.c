/* overlay_xattr: user.tadoc.* through the edit overlay: counts and search over edits, insert and delete. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "batcher.h"
#include "overlay.h"
#include "req.h"
#include "xattr.h"
#include "xattr_name.h"
#include "xattr_perm.h"
#include "xattr_value.h"
#include "td_err.h"
#include "td_format.h"
#include "td_query.h"

#define FS(req) ((td_fs *)fuse_req_userdata(req))
#define PREFIX TD_FS_XATTR_PREFIX
#define PREFIX_LEN (sizeof PREFIX - 1)

/* The read names are those of xattr_name.h, computed over the edited text;
 * directory search lists hits in path order (depth-first, names bytewise),
 * as the read-only mount does, new files included.
 * insert.OFFSET inserts the value before OFFSET (0 <= OFFSET <= size; the
 * rest shifts right); delete.OFFSET removes [OFFSET, OFFSET+LENGTH) clamped
 * to the size (OFFSET <= size; the rest shifts left). */

static int edit_path(const void *ed, uint32_t file, char *buf, size_t cap)
{
	return td_edit_path(ed, file, buf, cap);
}

/* The edited tree for xattr_perm.h (modes as chmod left them); ctx is the td_edit. */
static int ev_mode(const void *ctx, uint32_t n, mode_t *mode)
{
	td_stat st;
	int err = td_edit_stat(ctx, n, &st);
	*mode = st.mode;
	return err;
}

static int ev_next(const void *ctx, uint32_t dir, uint64_t *cookie, uint32_t *child)
{
	const char *name;
	size_t len;
	td_node c;
	int err = td_edit_dir_next(ctx, dir, cookie, &c, &name, &len);
	*child = c;
	return err;
}

/* 1 + the journal's sequence number: changes with every change (read
 * under the read lock, it names the state the query sees). */
static uint64_t rw_gen(const td_fs_rw *rw)
{
	return (rw->j ? td_journal_seq(rw->j) : 0) + 1;
}

/* 1 when the whole edited tree hides nothing from class who: found by one
 * walk per change (the journal's sequence number), so that while nothing
 * is restricted, queries do not walk the tree. Caller holds the read lock. */
static int open_to(td_fs *fs, const td_fs_tview *v, int who)
{
	if (who == TD_FS_WHO_ALL)
		return 1;
	td_fs_rw *rw = fs->rw;
	uint64_t gen = rw_gen(rw);
	if (atomic_load(&rw->open_at[who - 1]) == gen)
		return 1;
	td_fs_hidden h;
	if (td_fs_hidden_find(v, TD_ROOT, who, &h))
		return 0;
	int open = !h.all && h.n == 0;
	td_fs_hidden_free(&h);
	if (open)
		atomic_store(&rw->open_at[who - 1], gen);
	return open;
}

/* A directory's words or count of x's word (x NULL: words), less those of
 * the hidden roots. */
static int dir_total(const td_edit *ed, td_node n, const td_fs_xname *x, const td_fs_hidden *hid, uint64_t *out)
{
	*out = 0;
	if (hid->all)
		return 0;
	uint64_t total = 0, part = 0;
	for (size_t i = 0; i <= hid->n; i++) {
		td_node s = i == 0 ? n : hid->roots[i - 1];
		int err = x ? td_edit_count(ed, x->word, x->wlen, s, &part) : td_edit_nwords(ed, s, &part);
		if (err)
			return -td_err_errno(err);
		total = i == 0 ? part : total - part;
	}
	*out = total;
	return 0;
}

/* Current text of a changed file, for the engine (td_set_read_fn); ctx is
 * an rtext. */
typedef struct rtext {
	const td_edit *ed;
	td_cursor *cur;
} rtext;

static int read_text(void *ctx, uint32_t id, uint64_t off, void *buf, size_t len, size_t *got)
{
	const rtext *r = ctx;
	return td_edit_read(r->ed, id, off, buf, len, got, r->cur);
}

static int hit_cmp(const void *p, const void *q)
{
	const td_hit *u = p, *w = q;
	if (u->file != w->file)
		return (u->file > w->file) - (u->file < w->file);
	return (u->off > w->off) - (u->off < w->off);
}

/* Put h (td_edit_search's hits: node order, which new files break) in
 * path order, offsets ascending: each file's rank among the visible files
 * of n (td_fs_visible_files walks in path order) replaces its id for the
 * sort. */
static int hits_path_order(const td_fs_tview *v, td_node n, const td_fs_hidden *hid, td_hits *h)
{
	if (h->n < 2)
		return 0; /* no hit or one */
	size_t i = 1;
	while (i < h->n && h->v[i].file == h->v[0].file)
		i++;
	if (i == h->n)
		return 0; /* one file */
	uint32_t *ids = NULL, *rank = NULL;
	size_t nf = 0;
	int rc = td_fs_visible_files(v, n, hid, &ids, &nf);
	if (!rc && !(rank = malloc(((size_t)v->nids + 1) * sizeof *rank)))
		rc = -ENOMEM;
	if (!rc) {
		for (i = 0; i < v->nids; i++)
			rank[i] = UINT32_MAX;
		for (i = 0; i < nf; i++)
			if (ids[i] < v->nids)
				rank[ids[i]] = (uint32_t)i;
		for (i = 0; i < h->n && !rc; i++)
			if (h->v[i].file >= v->nids || rank[h->v[i].file] == UINT32_MAX)
				rc = -EIO; /* a hit outside the visible files */
			else
				h->v[i].file = rank[h->v[i].file];
		if (!rc) {
			qsort(h->v, h->n, sizeof *h->v, hit_cmp);
			for (i = 0; i < h->n; i++)
				h->v[i].file = ids[h->v[i].file];
		}
	}
	free(rank);
	free(ids);
	return rc;
}

/* Phrases, top, vector, files, ngrams, fuzzy: over the files of n's
 * subtree the caller sees, as they read now: an unchanged file is its
 * archive entry, a changed one its current text. Files go in path order
 * (td_fs_visible_files), as the read-only mount lists them and ranks
 * ties. */
static int value_set(const td_edit *ed, const td_fs_tview *v, td_node n, int is_dir, const td_fs_xname *x,
		     const char *name, const td_fs_hidden *hid, char **val, size_t *len)
{
	uint32_t *ids = NULL;
	size_t nf = 0;
	int rc = td_fs_visible_files(v, n, hid, &ids, &nf);
	td_set_file *f = rc ? NULL : malloc((nf ? nf : 1) * sizeof *f);
	rtext rt = { ed, td_cursor_new(td_edit_archive(ed)) };
	if (!rc && (!f || !rt.cur))
		rc = -ENOMEM;
	for (size_t i = 0; !rc && i < nf; i++) {
		const td_piece *pc;
		size_t np;
		td_entry base;
		td_stat st;
		int err = td_edit_pieces(ed, ids[i], &pc, &np, &base);
		if (!err)
			err = td_edit_stat(ed, ids[i], &st);
		if (err) {
			rc = -td_err_errno(err);
			break;
		}
		f[i] = (td_set_file){ .id = ids[i], .entry = np == 0 ? base : TD_NOENTRY, .size = st.size };
	}
	td_fileset set = { .f = f, .n = nf, .read = read_text, .rctx = &rt };
	td_fs_xsrc src = { .a = td_edit_archive(ed), .set = &set, .path = edit_path, .pctx = ed };
	if (!rc)
		rc = td_fs_xattr_value(&src, x, name, is_dir, val, len);
	td_cursor_free(rt.cur);
	free(f);
	free(ids);
	return rc;
}

/* 1 when node n reads as its archive entry (td_edit_clean) at the same
 * path: then every answer over it is the archive's, and the read-only
 * mount's code gives it (stored postings, the fuzzy index, whole-corpus
 * tables, its caches). Caller holds the read lock. */
static int scope_clean(const td_fs *fs, const td_edit *ed, td_node n)
{
	if (!td_edit_clean(ed, n))
		return 0;
	if (n == TD_ROOT)
		return 1;
	const size_t cap = TD_MAXPATH + 2;
	char *p = malloc(2 * cap);
	if (!p)
		return 0;
	int l1 = td_edit_path(ed, n, p, cap), l2 = td_archive_path(fs->a, n, p + cap, cap);
	int same = l1 >= 0 && l1 == l2 && memcmp(p, p + cap, (size_t)l1) == 0;
	free(p);
	return same;
}

/* The kept value of `name` on n for class who at generation gen into *val
 * (a copy): 1 when there, else 0. */
static int val_kept(td_fs_rw *rw, uint64_t gen, td_node n, int who, const char *name, char **val, size_t *len)
{
	int found = 0;
	pthread_mutex_lock(&rw->vmu);
	for (int i = 0; i < TD_FS_RW_VALS && !found; i++) {
		td_fs_rwval *k = &rw->vals[i];
		if (k->gen == gen && k->n == n && k->who == who && strcmp(k->name, name) == 0) {
			char *v = malloc(k->len ? k->len : 1);
			if (v) {
				if (k->len)
					memcpy(v, k->val, k->len);
				*val = v;
				*len = k->len;
				k->used = ++rw->vclock;
				found = 1;
			}
		}
	}
	pthread_mutex_unlock(&rw->vmu);
	return found;
}

/* Keep a copy of the value (the least recently used slot, or one of an
 * older generation, goes). */
static void val_keep(td_fs_rw *rw, uint64_t gen, td_node n, int who, const char *name, const char *val, size_t len)
{
	size_t nl = strlen(name) + 1;
	char *nm = malloc(nl), *v = malloc(len ? len : 1);
	if (!nm || !v) {
		free(nm);
		free(v);
		return;
	}
	memcpy(nm, name, nl);
	if (len) /* val is NULL for an empty value */
		memcpy(v, val, len);
	pthread_mutex_lock(&rw->vmu);
	int s = 0;
	for (int i = 1; i < TD_FS_RW_VALS; i++)
		if ((rw->vals[i].gen != gen) > (rw->vals[s].gen != gen) ||
		    ((rw->vals[i].gen != gen) == (rw->vals[s].gen != gen) && rw->vals[i].used < rw->vals[s].used))
			s = i;
	td_fs_rwval *k = &rw->vals[s];
	free(k->name);
	free(k->val);
	*k = (td_fs_rwval){ gen, ++rw->vclock, n, who, nm, v, len };
	pthread_mutex_unlock(&rw->vmu);
}

void td_fs_rw_vals_free(td_fs_rw *rw)
{
	for (int i = 0; i < TD_FS_RW_VALS; i++) {
		free(rw->vals[i].name);
		free(rw->vals[i].val);
		rw->vals[i] = (td_fs_rwval){ 0 };
	}
}

/* Value of a read name as class `who` sees it (xattr_perm.h); caller holds
 * the read lock. */
static int xattr_get(td_fs *fs, td_node n, const td_fs_xname *x, const char *name, int who, char **val,
		     size_t *len)
{
	*val = NULL;
	*len = 0;
	td_edit *ed = fs->rw->ed;
	td_stat st;
	int err = td_edit_stat(ed, n, &st);
	if (err)
		return err == TD_EINVAL ? -ENOENT : -td_err_errno(err);
	int is_dir = S_ISDIR(st.mode);
	if (!is_dir && !S_ISREG(st.mode))
		return -ENODATA;
	if (x->kind == TD_FS_XINSERT || x->kind == TD_FS_XDELETE)
		return -ENODATA;
	if (x->err)
		return x->err;
	if (x->kind < TD_FS_XWORDS)
		return -ENODATA;
	if (!is_dir && !td_fs_who_may(who, st.mode))
		return -EACCES; /* as the kernel says with default_permissions */
	td_fs_tview v = { .ctx = ed, .nids = td_edit_next_node(ed), .mode = ev_mode, .next = ev_next };
	td_fs_hidden hid = { 0 };
	int rc = is_dir && !open_to(fs, &v, who) ? td_fs_hidden_find(&v, n, who, &hid) : 0;
	if (rc)
		return rc;
	if (x->kind != TD_FS_XWORDS && !hid.all && !hid.n && scope_clean(fs, ed, n)) {
		td_fs_hidden_free(&hid);
		return td_fs_xattr_whole(fs, n, is_dir, x, name, val, len);
	}
	/* getfattr asks for the size, then the value: computed once */
	uint64_t gen = rw_gen(fs->rw);
	int keep = x->kind != TD_FS_XWORDS && fs->conf.cache_size;
	if (keep && val_kept(fs->rw, gen, n, who, name, val, len)) {
		td_fs_hidden_free(&hid);
		return 0;
	}
	uint64_t total = 0;
	int edit_words = x->kind == TD_FS_XWORDS || ((x->kind == TD_FS_XCOUNT || x->kind == TD_FS_XSEARCH) && x->nwords == 1);
	if (!edit_words) {
		rc = value_set(ed, &v, n, is_dir, x, name, &hid, val, len);
	} else if (x->kind == TD_FS_XSEARCH) {
		td_hits h = { 0 };
		err = td_edit_search(ed, x->word, x->wlen, n, &h);
		rc = err ? -td_err_errno(err) : td_fs_hidden_filter(&v, &hid, &h);
		if (!rc && is_dir)
			rc = hits_path_order(&v, n, &hid, &h);
		if (!rc)
			rc = td_fs_xattr_search_value(&h, x->num, x->word, x->wlen, is_dir ? edit_path : NULL, ed, val,
						      len);
		td_hits_free(&h);
	} else if (!(rc = dir_total(ed, n, x->kind == TD_FS_XCOUNT ? x : NULL, &hid, &total))) {
		rc = fs_value_u64(total, val, len);
	}
	td_fs_hidden_free(&hid);
	if (!rc && keep)
		val_keep(fs->rw, gen, n, who, name, *val, *len);
	return rc;
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	td_fs *fs = FS(req);
	td_fs_xname x;
	td_fs_xattr_parse(name, &x);
	if (strncmp(name, PREFIX, PREFIX_LEN) != 0) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	char *val = NULL;
	size_t len = 0;
	uint64_t t0 = td_fs_batch_clock();
	int rc;
	if (x.kind == TD_FS_XSTATS) { /* the request counters, on the root only */
		rc = td_fs_rw_node(ino) == TD_ROOT ? td_fs_batch_stats(fs, &val, &len) : -ENODATA;
	} else {
		volatile int intr;
		td_fs_cancel_begin(fs, req, &intr);
		td_fs_rw_rdlock(fs);
		rc = xattr_get(fs, td_fs_rw_node(ino), &x, name, td_fs_who(fs, req), &val, &len);
		td_fs_rw_unlock(fs);
		td_fs_cancel_end(req);
		td_fs_batch_record(fs, 0, t0, 0);
	}
	if (rc)
		fuse_reply_err(req, -rc);
	else if (size == 0)
		fuse_reply_xattr(req, len);
	else if (len > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, val, len);
	free(val);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
			int flags)
{
	(void)flags;
	td_fs *fs = FS(req);
	td_node n = td_fs_rw_node(ino);
	td_fs_xname x;
	td_fs_xattr_parse(name, &x);
	int insert = x.kind == TD_FS_XINSERT, del = x.kind == TD_FS_XDELETE;
	if (!insert && !del) {
		/* Other names are not stored (cp --preserve=xattr skips them). */
		fuse_reply_err(req, strncmp(name, PREFIX, PREFIX_LEN) == 0 ? EPERM : EOPNOTSUPP);
		return;
	}
	uint64_t off = x.num, dlen = 0;
	if (x.err || (del && td_fs_xattr_dec(value, size, &dlen))) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	int rc = td_fs_rw_begin(fs);
	if (rc == 0) {
		td_stat st;
		int err = td_edit_stat(fs->rw->ed, n, &st);
		if (err)
			rc = err == TD_EINVAL ? -ENOENT : -td_err_errno(err);
		else if (!S_ISREG(st.mode))
			rc = S_ISDIR(st.mode) ? -EISDIR : -EINVAL;
		else if (off > st.size)
			rc = -EINVAL; /* insert/delete start at most at the end */
		else if (insert ? size == 0 : dlen == 0 || off == st.size)
			rc = 1; /* nothing changes: no record */
	}
	if (rc == 0)
		rc = td_fs_rw_status(fs, insert ? td_edit_insert(fs->rw->ed, n, off, value, size)
						: td_edit_delete(fs->rw->ed, n, off, dlen));
	td_fs_rw_unlock(fs);
	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	/* The bytes moved behind the kernel's page cache: drop it (and the
	 * size) before answering, so the caller's next read sees the change;
	 * the invalidation thread answers (td_fs_rw_inval). */
	if (rc == 0)
		td_fs_rw_inval(fs, n, req);
	else
		fuse_reply_err(req, 0);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	static const char names[] = PREFIX "words";
	td_fs *fs = FS(req);
	td_stat st;
	td_fs_rw_rdlock(fs);
	int err = td_edit_stat(fs->rw->ed, td_fs_rw_node(ino), &st);
	td_fs_rw_unlock(fs);
	if (err) {
		fuse_reply_err(req, err == TD_EINVAL ? ENOENT : td_err_errno(err));
		return;
	}
	size_t n = S_ISDIR(st.mode) || S_ISREG(st.mode) ? sizeof names : 0;
	if (size == 0)
		fuse_reply_xattr(req, n);
	else if (n > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, names, n);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	(void)ino;
	td_fs *fs = FS(req);
	if (!fs->writable)
		fuse_reply_err(req, EROFS);
	else
		fuse_reply_err(req, strncmp(name, PREFIX, PREFIX_LEN) == 0 ? EPERM : ENODATA);
}

void td_fs_rw_ops_xattr(struct fuse_lowlevel_ops *ops)
{
	ops->getxattr = op_getxattr;
	ops->setxattr = op_setxattr;
	ops->listxattr = op_listxattr;
	ops->removexattr = op_removexattr;
}
