/* req: open files, the read path, and handing requests to an executor. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_ahead.h"
#include "batcher.h"
#include "req.h"
#include "xattr.h"
#include "td_cancel.h"
#include "td_err.h"

td_fs_file *td_fs_file_new(td_fs *fs, td_entry e, int append)
{
	td_fs_file *f = calloc(1, sizeof *f);
	if (!f)
		return NULL;
	f->cur = td_cursor_new(fs->a);
	if (!f->cur) {
		free(f);
		return NULL;
	}
	f->e = e;
	f->append = append;
	pthread_mutex_init(&f->mu, NULL);
	pthread_mutex_lock(&fs->files_mu);
	f->next = fs->files;
	if (f->next)
		f->next->prev = f;
	fs->files = f;
	pthread_mutex_unlock(&fs->files_mu);
	return f;
}

void td_fs_file_free(td_fs *fs, td_fs_file *f)
{
	if (!f)
		return;
	pthread_mutex_lock(&fs->files_mu);
	if (f->prev)
		f->prev->next = f->next;
	else
		fs->files = f->next;
	if (f->next)
		f->next->prev = f->prev;
	pthread_mutex_unlock(&fs->files_mu);
	td_cursor_free(f->cur);
	pthread_mutex_destroy(&f->mu);
	free(f);
}

void td_fs_files_free_all(td_fs *fs)
{
	while (fs->files)
		td_fs_file_free(fs, fs->files);
}

/* This thread's cursor on archive a, for reads without an open handle
 * (kept per thread, freed when the thread exits); NULL on out of memory. */
typedef struct thread_cursor {
	const td_archive *a;
	td_cursor *c;
} thread_cursor;

static pthread_key_t cursor_key;
static pthread_once_t cursor_once = PTHREAD_ONCE_INIT;

static void cursor_free(void *p)
{
	thread_cursor *t = p;
	td_cursor_free(t->c);
	free(t);
}

static void cursor_init(void)
{
	pthread_key_create(&cursor_key, cursor_free);
}

static td_cursor *cursor_get(const td_archive *a)
{
	pthread_once(&cursor_once, cursor_init);
	thread_cursor *t = pthread_getspecific(cursor_key);
	if (t && t->a == a)
		return t->c;
	td_cursor *c = td_cursor_new(a);
	if (!c)
		return NULL;
	if (!t) {
		t = malloc(sizeof *t);
		if (!t) {
			td_cursor_free(c);
			return NULL;
		}
		pthread_setspecific(cursor_key, t);
	} else {
		td_cursor_free(t->c);
	}
	t->a = a;
	t->c = c;
	return c;
}

int td_fs_file_read(td_fs *fs, td_fs_file *f, td_entry e, uint64_t off, void *buf, size_t len, size_t *got)
{
	if (!f) {
		td_cursor *c = cursor_get(fs->a);
		return c ? td_cursor_read(c, e, off, buf, len, got) : td_extract(fs->a, e, off, buf, len, got);
	}
	/* Concurrent reads on one handle (readahead, threads sharing an fd)
	 * must not queue behind each other: the one that finds the cursor
	 * busy extracts from the root instead. */
	if (pthread_mutex_trylock(&f->mu) == 0) {
		int err = td_cursor_read(f->cur, e, off, buf, len, got);
		pthread_mutex_unlock(&f->mu);
		return err;
	}
	return td_extract(fs->a, e, off, buf, len, got);
}

/* Per-thread scratch buffers for inline reads (FUSE worker threads come and
 * go, so they are freed by the keys' destructor). */
static pthread_key_t scratch_key[TD_FS_SCRATCH_SLOTS];
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

typedef struct scratch {
	size_t cap;
	char buf[];
} scratch;

static void scratch_init(void)
{
	for (unsigned i = 0; i < TD_FS_SCRATCH_SLOTS; i++)
		pthread_key_create(&scratch_key[i], free);
}

void *fs_scratch_slot(unsigned slot, size_t len)
{
	pthread_once(&scratch_once, scratch_init);
	scratch *s = pthread_getspecific(scratch_key[slot]);
	if (s && s->cap >= len)
		return s->buf;
	size_t cap = len < 65536 ? 65536 : len;
	scratch *n = malloc(sizeof *n + cap);
	if (!n)
		return NULL;
	n->cap = cap;
	free(s);
	pthread_setspecific(scratch_key[slot], n);
	return n->buf;
}

void *fs_scratch_get(size_t len)
{
	return fs_scratch_slot(0, len);
}

static void req_done(td_fs_req *r)
{
	if (r->heap)
		free(r);
}

void td_fs_reply_err(td_fs_req *r, int errnum)
{
	td_fs_batch_replying(r, 0);
	fuse_reply_err(r->req, errnum);
	req_done(r);
}

void td_fs_reply_read(td_fs_req *r, const void *buf, size_t got, int err)
{
	td_fs_batch_replying(r, err ? 0 : got);
	if (err)
		fuse_reply_err(r->req, td_err_errno(err));
	else
		fuse_reply_buf(r->req, buf, got);
	req_done(r);
}

void td_fs_reply_xattr(td_fs_req *r, const void *val, size_t len)
{
	td_fs_batch_replying(r, 0);
	if (r->size == 0)
		fuse_reply_xattr(r->req, len);
	else if (len > r->size)
		fuse_reply_err(r->req, ERANGE);
	else
		fuse_reply_buf(r->req, val, len);
	req_done(r);
}

/* A read, extended on read-only mounts to the rest of a small file read
 * from its start, which is stored in the page cache (store_ahead.h). */
static void run_read(td_fs_req *r)
{
	td_fs *fs = r->fs;
	const td_entry e = r->e;
	int whole;
	size_t more = td_fs_ahead_want(fs, r, &whole);
	char *buf = fs_scratch_get(r->size + more);
	if (!buf) {
		td_fs_reply_err(r, ENOMEM);
		return;
	}
	size_t got = 0;
	int err = td_fs_file_read(fs, r->file, e, r->off, buf, r->size + more, &got);
	if (!err && got > r->size) {
		td_fs_ahead_tail(fs, r, buf + r->size, got - r->size);
		got = r->size;
	}
	int run = whole && !err && td_fs_ahead_begin(fs, e);
	if (run)
		td_fs_ahead_next(fs, e, 1);
	td_fs_reply_read(r, buf, got, err);
	if (run)
		td_fs_ahead_next(fs, e, 0);
}

static void on_interrupt(fuse_req_t req, void *data)
{
	(void)req;
	*(volatile int *)data = 1;
}

void td_fs_cancel_begin(td_fs *fs, fuse_req_t req, volatile int *flag)
{
	if (req) {
		*flag = 0;
		/* calls on_interrupt at once when req was interrupted already */
		fuse_req_interrupt_func(req, on_interrupt, (void *)flag);
	}
	td_cancel_watch(req ? flag : NULL, &fs->stopping);
}

void td_fs_cancel_end(fuse_req_t req)
{
	td_cancel_watch(NULL, NULL);
	/* libfuse calls on_interrupt under the request's lock, which this
	 * takes: once it returns, the flag is no longer written */
	if (req)
		fuse_req_interrupt_func(req, NULL, NULL);
}

static void run_getxattr(td_fs_req *r)
{
	char *val = NULL;
	size_t len = 0;
	td_fs_cancel_begin(r->fs, r->req, &r->intr);
	int rc = td_fs_xattr_get(r->fs, r->e, r->name, r->who, &val, &len);
	td_fs_cancel_end(r->req);
	if (rc)
		td_fs_reply_err(r, -rc);
	else
		td_fs_reply_xattr(r, val, len);
	free(val);
}

void td_fs_req_run(td_fs_req *r)
{
	switch (r->kind) {
	case TD_FS_READ:
		run_read(r);
		break;
	case TD_FS_GETXATTR:
		run_getxattr(r);
		break;
	default:
		td_fs_reply_err(r, ENOSYS);
		break;
	}
}

void td_fs_dispatch(td_fs *fs, const td_fs_req *r)
{
	if (fs->exec.submit) {
		size_t nlen = r->name ? strlen(r->name) + 1 : 0;
		td_fs_req *q = malloc(sizeof *q + nlen);
		if (q) {
			*q = *r;
			q->heap = 1;
			if (r->name) {
				char *n = (char *)(q + 1);
				memcpy(n, r->name, nlen);
				q->name = n;
			}
			if (fs->exec.submit(fs->exec.ctx, q) == 0)
				return;
			free(q);
		}
	}
	td_fs_req local = *r;
	local.heap = 0;
	local.in_fuse = 1;
	td_fs_req_run(&local);
}
