/* td_scan: walk directories and files on disk into a td_build (one td_writer, or format 5 shards). */
#include <dirent.h>
#include <ftw.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "td_format.h"
#include "td_build.h"
#include "td_writer.h"
#include "td_trace.h"

#define CHUNK (1u << 20)

/* Prefix this thread's error detail with the on-disk path. */
static int fail_at(int err, const char *disk)
{
	char why[1024]; /* as long as any detail (td_err.c) */
	snprintf(why, sizeof why, "%s", td_errdetail());
	return td_fail(err, "%s: %s", disk, why[0] ? why : td_strerror(err));
}

/* Read-ahead: the walk (this thread) queues what it finds, in order, as
 * ops; reader threads read the files' bytes ahead of time while this
 * thread adds the ops to the builder in the same order as before, so the
 * archive is the same bytes. Files larger than PRE_FILE_MAX (and every
 * file when there are no readers) are read by this thread in CHUNKs when
 * their turn comes; readers stop while `ahead_max` bytes are read and not
 * yet added (PRE_BYTES, at most a 32nd of the build's memory bound: no
 * readers where that is under PRE_FILE_MAX), and the queue holds PRE_OPS
 * ops. Buffers of PRE_MMAP bytes or more are mapped, not malloc'd, so the
 * readers' malloc arenas do not keep them. */
#define PRE_FILE_MAX (8u << 20)
#define PRE_BYTES (UINT64_C(32) << 20)
#define PRE_MMAP (UINT64_C(128) << 10)
#define PRE_OPS 4096u
#define PRE_READERS_MAX 4u

enum { OP_DIR, OP_LINK, OP_FILE };
/* a file op's state: queued, being read by a reader, read, or for the
 * adding thread to read itself */
enum { F_WAIT, F_TAKEN, F_READY, F_SELF };

typedef struct op {
	uint8_t kind, state;
	int rerr;                 /* the reader's errno (F_READY) */
	char *disk, *rel;
	char *target;             /* OP_LINK */
	struct stat st;
	uint8_t *data;            /* F_READY: the file's bytes (pre_alloc) */
	size_t len, cap;
} op;

typedef struct scan {
	td_build *w;
	uint8_t *buf;
	dev_t out_dev;
	ino_t out_ino;
	int have_out;
	/* the queue: ops [head, tail) in ring[i % PRE_OPS]; readers look for
	 * files from `next` on */
	op *ring;
	uint64_t head, tail, next;
	uint64_t ahead;           /* bytes taken by readers and not yet added */
	uint64_t ahead_max;
	unsigned nrd;             /* reader threads */
	int quit;
	pthread_t rd[PRE_READERS_MAX];
	pthread_mutex_t mu;
	pthread_cond_t rcv, mcv;  /* readers wait on rcv, the adding thread on mcv */
} scan;

static int add_file(scan *s, int fd, const char *disk, const char *rel, const struct stat *st)
{
	int err = td_build_file_begin(s->w, rel, st->st_mode, st->st_mtim.tv_sec, (uint32_t)st->st_mtim.tv_nsec);
	if (err)
		return fail_at(err, disk);
	for (;;) {
		ssize_t k = read(fd, s->buf, CHUNK);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			td_build_file_end(s->w);
			return td_fail(TD_EIO, "%s: %s", disk, strerror(errno));
		}
		if (k == 0)
			break;
		if ((err = td_build_file_data(s->w, s->buf, (size_t)k)))
			return fail_at(err, disk);
	}
	return td_build_file_end(s->w);
}

static uint8_t *pre_alloc(size_t n)
{
	if (n < PRE_MMAP)
		return malloc(n);
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void pre_free(uint8_t *p, size_t n)
{
	if (n < PRE_MMAP)
		free(p);
	else if (p)
		munmap(p, n);
}

/* A reader's work: the whole file at `disk` (about `size` bytes) into
 * *data (pre_alloc of *cap bytes); returns 0 or an errno. */
static int read_whole(const char *disk, uint64_t size, uint8_t **data, size_t *len, size_t *capp)
{
	int fd = open(disk, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return errno;
	size_t cap = (size_t)size + 1, n = 0; /* +1: EOF seen without growing */
	uint8_t *p = pre_alloc(cap);
	int e = p ? 0 : ENOMEM;
	while (!e) {
		if (n == cap) { /* the file grew since its stat */
			uint8_t *q = pre_alloc(2 * cap);
			if (!q) {
				e = ENOMEM;
				break;
			}
			memcpy(q, p, n);
			pre_free(p, cap);
			p = q;
			cap *= 2;
		}
		ssize_t k = read(fd, p + n, cap - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			e = errno;
		else if (k == 0)
			break;
		else
			n += (size_t)k;
	}
	close(fd);
	if (e) {
		pre_free(p, cap);
		return e;
	}
	*data = p;
	*len = n;
	*capp = cap;
	return 0;
}

static void *reader(void *arg)
{
	scan *s = arg;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (s->next < s->tail) { /* what the readers leave alone */
			const op *o = &s->ring[s->next % PRE_OPS];
			if (o->kind == OP_FILE && o->state == F_WAIT)
				break;
			s->next++;
		}
		if (s->quit)
			break;
		/* the next file in order, once it fits */
		if (s->next == s->tail ||
		    (s->ahead && s->ahead + (uint64_t)s->ring[s->next % PRE_OPS].st.st_size > s->ahead_max)) {
			pthread_cond_wait(&s->rcv, &s->mu);
			continue;
		}
		op *o = &s->ring[s->next++ % PRE_OPS];
		o->state = F_TAKEN;
		s->ahead += (uint64_t)o->st.st_size;
		pthread_mutex_unlock(&s->mu);
		uint8_t *data = NULL;
		size_t len = 0, cap = 0;
		int e = read_whole(o->disk, (uint64_t)o->st.st_size, &data, &len, &cap);
		pthread_mutex_lock(&s->mu);
		o->data = data;
		o->len = len;
		o->cap = cap;
		o->rerr = e;
		o->state = F_READY;
		pthread_cond_signal(&s->mcv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static void op_free(op *o)
{
	free(o->disk);
	free(o->rel);
	free(o->target);
	pre_free(o->data, o->cap);
	memset(o, 0, sizeof *o);
}

/* Add the op at the head of the queue to the builder. block 0: only if it
 * needs no waiting (returns 1 when it would). */
static int apply_one(scan *s, int block)
{
	pthread_mutex_lock(&s->mu);
	op *o = &s->ring[s->head % PRE_OPS];
	if (o->kind == OP_FILE && o->state != F_READY && o->state != F_SELF) {
		if (!block) {
			pthread_mutex_unlock(&s->mu);
			return 1;
		}
		if (o->state == F_WAIT) /* no reader took it: read it here */
			o->state = F_SELF;
		while (o->state == F_TAKEN)
			pthread_cond_wait(&s->mcv, &s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	int err = TD_OK;
	const struct stat *st = &o->st;
	if (o->kind == OP_DIR) {
		err = td_build_add_dir(s->w, o->rel, st->st_mode, st->st_mtim.tv_sec, (uint32_t)st->st_mtim.tv_nsec);
		if (err)
			err = fail_at(err, o->disk);
	} else if (o->kind == OP_LINK) {
		err = td_build_add_symlink(s->w, o->rel, st->st_mtim.tv_sec, (uint32_t)st->st_mtim.tv_nsec, o->target);
		if (err)
			err = fail_at(err, o->disk);
	} else if (o->state == F_SELF) {
		int fd = open(o->disk, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			err = td_fail(TD_EIO, "%s: %s", o->disk, strerror(errno));
		else {
			err = add_file(s, fd, o->disk, o->rel, st);
			close(fd);
		}
	} else if (o->rerr) {
		err = o->rerr == ENOMEM ? TD_ENOMEM : td_fail(TD_EIO, "%s: %s", o->disk, strerror(o->rerr));
	} else if ((err = td_build_file_begin(s->w, o->rel, st->st_mode, st->st_mtim.tv_sec,
					      (uint32_t)st->st_mtim.tv_nsec))) {
		err = fail_at(err, o->disk);
	} else {
		/* in CHUNKs, as add_file feeds it */
		for (size_t at = 0; at < o->len && !err; at += CHUNK)
			err = td_build_file_data(s->w, o->data + at, o->len - at < CHUNK ? o->len - at : CHUNK);
		err = err ? fail_at(err, o->disk) : td_build_file_end(s->w);
	}
	pthread_mutex_lock(&s->mu);
	if (o->kind == OP_FILE && o->state == F_READY) {
		s->ahead -= (uint64_t)o->st.st_size;
		pthread_cond_broadcast(&s->rcv);
	}
	op_free(o);
	s->head++;
	pthread_mutex_unlock(&s->mu);
	return err;
}

/* Add the queued ops in order: all of them (block 1), or those ready. */
static int drain(scan *s, int block)
{
	while (s->head < s->tail) {
		int r = apply_one(s, block);
		if (r == 1)
			return TD_OK;
		if (r)
			return r;
	}
	return TD_OK;
}

/* Queue an op (its strings are the queue's from here on, even on error). */
static int push(scan *s, op *o)
{
	int err = TD_OK;
	while (s->tail - s->head >= PRE_OPS && !err)
		err = apply_one(s, 1);
	if (err) {
		op_free(o);
		return err;
	}
	if (o->kind == OP_FILE)
		o->state = s->nrd && (uint64_t)o->st.st_size <= PRE_FILE_MAX ? F_WAIT : F_SELF;
	pthread_mutex_lock(&s->mu);
	s->ring[s->tail++ % PRE_OPS] = *o;
	if (o->state == F_WAIT)
		pthread_cond_signal(&s->rcv);
	pthread_mutex_unlock(&s->mu);
	/* without readers every op is added at once, as it is met */
	return drain(s, s->nrd == 0);
}

static int op_new(scan *s, int kind, const char *disk, const char *rel, const struct stat *st, const char *target)
{
	op o = { .kind = (uint8_t)kind, .st = *st };
	o.disk = strdup(disk);
	o.rel = strdup(rel);
	o.target = target ? strdup(target) : NULL;
	if (!o.disk || !o.rel || (target && !o.target)) {
		op_free(&o);
		return TD_ENOMEM;
	}
	return push(s, &o);
}

/* The queue and `readers` reader threads (fewer if they cannot start). */
static int scan_start(scan *s, unsigned readers)
{
	if (!(s->buf = malloc(CHUNK)) || !(s->ring = calloc(PRE_OPS, sizeof *s->ring))) {
		free(s->buf);
		return TD_ENOMEM;
	}
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->rcv, NULL);
	pthread_cond_init(&s->mcv, NULL);
	if (readers > PRE_READERS_MAX)
		readers = PRE_READERS_MAX;
	for (s->nrd = 0; s->nrd < readers; s->nrd++)
		if (pthread_create(&s->rd[s->nrd], NULL, reader, s))
			break;
	return TD_OK;
}

/* Readers for build b: a quarter of its jobs, 1 to PRE_READERS_MAX; none
 * for one job or where the memory bound leaves too little to read ahead. */
static unsigned readers_for(scan *s, const td_build *b)
{
	uint64_t mem = td_build_memory(b);
	unsigned jobs = td_build_jobs(b);
	s->ahead_max = mem && mem / 32 < PRE_BYTES ? mem / 32 : PRE_BYTES;
	if (s->ahead_max < PRE_FILE_MAX)
		return 0;
#ifdef TD_WRITER_TRACE
	if (getenv("TD_TRACE_READERS")) /* benchmarks: another count (0: none, as before) */
		return (unsigned)atoi(getenv("TD_TRACE_READERS"));
#endif
	return jobs < 2 ? 0 : jobs / 4 < 1 ? 1 : jobs / 4 < PRE_READERS_MAX ? jobs / 4 : PRE_READERS_MAX;
}

/* Add what is queued (err == TD_OK), stop the readers, free the queue. */
static int scan_stop(scan *s, int err)
{
	if (!err)
		err = drain(s, 1);
	pthread_mutex_lock(&s->mu);
	s->quit = 1;
	pthread_cond_broadcast(&s->rcv);
	pthread_mutex_unlock(&s->mu);
	for (unsigned i = 0; i < s->nrd; i++)
		pthread_join(s->rd[i], NULL);
	for (; s->head < s->tail; s->head++)
		op_free(&s->ring[s->head % PRE_OPS]);
	td_trace("input added (%u readers)", s->nrd);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->rcv);
	pthread_cond_destroy(&s->mcv);
	free(s->ring);
	free(s->buf);
	return err;
}

static int walk(scan *s, int pfd, const char *name, const char *disk, const char *rel, int depth);

static int add_path(scan *s, int pfd, const char *name, const char *disk, const char *rel, int depth)
{
	struct stat st;
	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW))
		return td_fail(TD_EIO, "%s: %s", disk, strerror(errno));
	if (s->have_out && st.st_dev == s->out_dev && st.st_ino == s->out_ino)
		return TD_OK; /* the archive being written */
	if (S_ISDIR(st.st_mode)) {
		int err = op_new(s, OP_DIR, disk, rel, &st, NULL);
		return err ? err : walk(s, pfd, name, disk, rel, depth + 1);
	}
	if (S_ISLNK(st.st_mode)) {
		char target[TD_MAXPATH + 2];
		ssize_t k = readlinkat(pfd, name, target, sizeof target - 1);
		if (k < 0)
			return td_fail(TD_EIO, "%s: %s", disk, strerror(errno));
		if ((size_t)k >= sizeof target - 1)
			return td_fail(TD_ELIMIT, "%s: symlink target too long", disk);
		target[k] = 0;
		return op_new(s, OP_LINK, disk, rel, &st, target);
	}
	if (!S_ISREG(st.st_mode))
		return td_fail(TD_EUNSUPP, "%s: not a regular file, directory or symlink", disk);
	return op_new(s, OP_FILE, disk, rel, &st, NULL);
}

static char *join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *p = malloc(la + lb + 2);
	if (!p)
		return NULL;
	memcpy(p, a, la);
	size_t at = la;
	if (la && a[la - 1] != '/')
		p[at++] = '/';
	memcpy(p + at, b, lb + 1);
	if (!la)
		memcpy(p, b, lb + 1);
	return p;
}

static int cmp_str(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

/* Entries are added in name order (bytewise), whatever order the file
 * system lists them in: the archive's bytes (and the shards' cuts) do not
 * depend on the directory's hash order, and files of a directory sit side
 * by side. */
static int walk(scan *s, int pfd, const char *name, const char *disk, const char *rel, int depth)
{
	if (depth > 1000)
		return td_fail(TD_ELIMIT, "%s: directory tree too deep", disk);
	int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return td_fail(TD_EIO, "%s: %s", disk, strerror(errno));
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return td_fail(TD_EIO, "%s: %s", disk, strerror(errno));
	}
	int err = TD_OK;
	struct dirent *de;
	char **names = NULL;
	size_t n = 0, cap = 0;
	errno = 0;
	while (!err && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (n == cap) {
			size_t nc = cap ? 2 * cap : 64;
			char **v = realloc(names, nc * sizeof *v);
			if (!v) {
				err = TD_ENOMEM;
				break;
			}
			names = v;
			cap = nc;
		}
		if (!(names[n] = strdup(de->d_name)))
			err = TD_ENOMEM;
		else
			n++;
		errno = 0;
	}
	if (!err && errno)
		err = td_fail(TD_EIO, "%s: %s", disk, strerror(errno));
	if (!err && n > 1)
		qsort(names, n, sizeof *names, cmp_str);
	for (size_t i = 0; i < n && !err; i++) {
		char *cdisk = join(disk, names[i]), *crel = join(rel, names[i]);
		if (!cdisk || !crel)
			err = TD_ENOMEM;
		else if (strlen(crel) > TD_MAXPATH)
			err = td_fail(TD_ELIMIT, "%s: path longer than %u bytes", cdisk, TD_MAXPATH);
		else
			err = add_path(s, dirfd(d), names[i], cdisk, crel, depth);
		free(cdisk);
		free(crel);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	closedir(d);
	return err;
}

static __thread uint64_t g_total;

static int sum_file(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)path;
	(void)f;
	if (flag == FTW_F && S_ISREG(st->st_mode))
		g_total += (uint64_t)st->st_size;
	return 0;
}

/* Bytes of the regular files under the inputs (for the progress bar). */
static uint64_t input_bytes(const char *const *inputs, size_t ninputs)
{
	g_total = 0;
	for (size_t i = 0; i < ninputs; i++)
		nftw(inputs[i], sum_file, 32, FTW_PHYS);
	return g_total;
}

int td_build_add_paths(td_build *b, const char *const *inputs, size_t ninputs, const char *to, const char *skip)
{
	scan s = { 0 };
	s.w = b;
	struct stat ost;
	if (skip && stat(skip, &ost) == 0) {
		s.have_out = 1;
		s.out_dev = ost.st_dev;
		s.out_ino = ost.st_ino;
	}
	while (to && *to == '/')
		to++;
	size_t tl = to ? strlen(to) : 0;
	while (tl && to[tl - 1] == '/')
		tl--;
	int err = scan_start(&s, readers_for(&s, b));
	if (err)
		return err;
	for (size_t i = 0; i < ninputs && !err; i++) {
		char *copy = strdup(inputs[i]), *rel = NULL;
		if (!copy) {
			err = TD_ENOMEM;
			break;
		}
		size_t l = strlen(copy);
		while (l > 1 && copy[l - 1] == '/')
			copy[--l] = 0;
		const char *base = strrchr(copy, '/');
		base = base ? base + 1 : copy;
		if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
			err = td_fail(TD_EINVAL, "%s: cannot name an archive entry after this path", inputs[i]);
		else if (!(rel = malloc(tl + strlen(base) + 2)))
			err = TD_ENOMEM;
		else {
			sprintf(rel, "%.*s%s%s", (int)tl, tl ? to : "", tl ? "/" : "", base);
			err = add_path(&s, AT_FDCWD, inputs[i], inputs[i], rel, 0);
		}
		free(rel);
		free(copy);
	}
	return scan_stop(&s, err);
}

int td_build_paths(const char *out_path, const char *const *inputs, size_t ninputs, const td_build_opts *opts)
{
	if (ninputs == 0)
		return td_fail(TD_EINVAL, "no input given");
	td_build_opts o;
	if (opts)
		o = *opts;
	else
		td_build_opts_init(&o);
	char *odir = strdup(out_path);
	if (!odir)
		return TD_ENOMEM;
	char *slash = strrchr(odir, '/');
	if (!o.tmp_dir)
		o.tmp_dir = slash ? (slash == odir ? "/" : (*slash = 0, odir)) : ".";
	if (!o.tmp_target)
		o.tmp_target = out_path;
	if (o.progress && !o.total_bytes)
		o.total_bytes = input_bytes(inputs, ninputs);
	scan s = { 0 };
	int err = td_build_new(&o, &s.w);
	free(odir); /* the builder made its temporary names */
	if (err)
		return err;
	struct stat ost;
	if (stat(out_path, &ost) == 0) {
		s.have_out = 1;
		s.out_dev = ost.st_dev;
		s.out_ino = ost.st_ino;
	}
	struct stat st;
	if (ninputs == 1 && stat(inputs[0], &st) == 0 && S_ISDIR(st.st_mode)) {
		/* DIR's contents are the archive's root; DIR itself may be a
		 * symlink to a directory (as for mksquashfs), so open it
		 * following links and walk the tree below without. */
		int dfd = open(inputs[0], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0)
			err = td_fail(TD_EIO, "%s: %s", inputs[0], strerror(errno));
		else if (!(err = scan_start(&s, readers_for(&s, s.w)))) {
			err = scan_stop(&s, add_path(&s, dfd, ".", inputs[0], "", 0));
		}
		if (dfd >= 0)
			close(dfd);
	} else {
		err = td_build_add_paths(s.w, inputs, ninputs, NULL, out_path);
	}
	if (err) {
		td_build_abort(s.w);
		return err;
	}
	return td_build_finish(s.w, out_path);
}

int td_compress_paths(const char *out_path, const char *const *inputs, size_t ninputs, const td_writer_opts *opts)
{
	td_build_opts o;
	td_build_opts_init(&o);
	if (opts)
		o.writer = *opts;
	o.format = opts && opts->format == 3 ? 3 : TD_VERSION;
	return td_build_paths(out_path, inputs, ninputs, &o);
}
