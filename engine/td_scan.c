/* td_scan: walk directories and files on disk into a td_build (one td_writer, or format 5 shards). */
#include <dirent.h>
#include <ftw.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "td_format.h"
#include "td_build.h"
#include "td_writer.h"

#define CHUNK (1u << 20)

/* Prefix this thread's error detail with the on-disk path. */
static int fail_at(int err, const char *disk)
{
	char why[1024]; /* as long as any detail (td_err.c) */
	snprintf(why, sizeof why, "%s", td_errdetail());
	return td_fail(err, "%s: %s", disk, why[0] ? why : td_strerror(err));
}

typedef struct scan {
	td_build *w;
	uint8_t *buf;
	dev_t out_dev;
	ino_t out_ino;
	int have_out;
	/* the output's directory and the names of this process's temporaries
	 * there (TARGET.*.tmp.PID: the shards written while the walk goes on),
	 * never taken as input when the output lies inside an input tree */
	int have_tdir;
	dev_t tdir_dev;
	ino_t tdir_ino;
	char *tpre;      /* "BASE." */
	char tsuf[32];   /* ".tmp.PID" */
} scan;

static void skip_temps_of(scan *s, const char *target)
{
	const char *slash = strrchr(target, '/');
	char *dir = slash ? strndup(target, slash == target ? 1 : (size_t)(slash - target)) : strdup(".");
	const char *base = slash ? slash + 1 : target;
	struct stat st;
	if (dir && *base && stat(dir, &st) == 0 && (s->tpre = malloc(strlen(base) + 2))) {
		sprintf(s->tpre, "%s.", base);
		snprintf(s->tsuf, sizeof s->tsuf, ".tmp.%ld", (long)getpid());
		s->tdir_dev = st.st_dev;
		s->tdir_ino = st.st_ino;
		s->have_tdir = 1;
	}
	free(dir);
}

/* 1 when `name`, in the directory `fd`, is one of this process's temporaries */
static int own_temp(const scan *s, int in_tdir, const char *name)
{
	if (!in_tdir)
		return 0;
	size_t n = strlen(name), pl = strlen(s->tpre), sl = strlen(s->tsuf);
	return n > pl + sl && !strncmp(name, s->tpre, pl) && !strcmp(name + n - sl, s->tsuf);
}

static int add_file(scan *s, int fd, const char *disk, const char *rel, const struct stat *st)
{
	int err = td_build_file_begin(s->w, rel, st->st_mode, st->st_mtim.tv_sec, (uint32_t)st->st_mtim.tv_nsec);
	if (err)
		return fail_at(err, disk);
	for (;;) {
		/* straight into the shard where it takes them (no copy) */
		void *at;
		size_t room;
		if ((err = td_build_file_room(s->w, CHUNK, &at, &room)))
			return fail_at(err, disk);
#ifdef TD_WRITER_TRACE
		if (getenv("TD_TRACE_COPY")) /* benchmarks: read and copy */
			at = NULL;
#endif
		ssize_t k = read(fd, at ? at : s->buf, at ? room : CHUNK);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			td_build_file_end(s->w);
			return td_fail(TD_EIO, "%s: %s", disk, strerror(errno));
		}
		if (k == 0)
			break;
		if ((err = at ? td_build_file_wrote(s->w, (size_t)k) : td_build_file_data(s->w, s->buf, (size_t)k)))
			return fail_at(err, disk);
	}
	return td_build_file_end(s->w);
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
		int err = rel[0] ? td_build_add_dir(s->w, rel, st.st_mode, st.st_mtim.tv_sec,
						     (uint32_t)st.st_mtim.tv_nsec)
				 : td_build_add_dir(s->w, "", st.st_mode, st.st_mtim.tv_sec,
						     (uint32_t)st.st_mtim.tv_nsec);
		if (err)
			return fail_at(err, disk);
		return walk(s, pfd, name, disk, rel, depth + 1);
	}
	if (S_ISLNK(st.st_mode)) {
		char target[TD_MAXPATH + 2];
		ssize_t k = readlinkat(pfd, name, target, sizeof target - 1);
		if (k < 0)
			return td_fail(TD_EIO, "%s: %s", disk, strerror(errno));
		if ((size_t)k >= sizeof target - 1)
			return td_fail(TD_ELIMIT, "%s: symlink target too long", disk);
		target[k] = 0;
		int err = td_build_add_symlink(s->w, rel, st.st_mtim.tv_sec, (uint32_t)st.st_mtim.tv_nsec, target);
		return err ? fail_at(err, disk) : TD_OK;
	}
	if (!S_ISREG(st.st_mode))
		return td_fail(TD_EUNSUPP, "%s: not a regular file, directory or symlink", disk);
	/* O_NONBLOCK: the name may have become a FIFO since the fstatat above,
	 * whose open would wait for a writer forever; what is opened is
	 * checked again (and its own attributes are stored). */
	int fd = openat(pfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return td_fail(TD_EIO, "%s: %s", disk, strerror(errno));
	if (fstat(fd, &st)) {
		int e = errno;
		close(fd);
		return td_fail(TD_EIO, "%s: %s", disk, strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return td_fail(TD_EUNSUPP, "%s: not a regular file, directory or symlink", disk);
	}
	int err = add_file(s, fd, disk, rel, &st);
	close(fd);
	return err;
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
	struct stat dst;
	int in_tdir = s->have_tdir && fstat(fd, &dst) == 0 && dst.st_dev == s->tdir_dev && dst.st_ino == s->tdir_ino;
	errno = 0;
	while (!err && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (own_temp(s, in_tdir, de->d_name))
			continue; /* written by this build while it walks */
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
	/* `to` as archive paths are read: empty and '.' components left out */
	char *tn = malloc(to ? strlen(to) + 1 : 1);
	if (!tn)
		return TD_ENOMEM;
	size_t tl = 0;
	for (const char *c = to; c && *c;) {
		const char *e = strchr(c, '/');
		size_t n = e ? (size_t)(e - c) : strlen(c);
		if (n == 2 && c[0] == '.' && c[1] == '.') {
			free(tn);
			return td_fail(TD_EINVAL, "--to %s: a '..' component", to);
		}
		if (n && !(n == 1 && c[0] == '.')) {
			if (tl)
				tn[tl++] = '/';
			memcpy(tn + tl, c, n);
			tl += n;
		}
		c += n + (e != NULL);
	}
	tn[tl] = 0;
	to = tn;
	if (!(s.buf = malloc(CHUNK))) {
		free(tn);
		return TD_ENOMEM;
	}
	if (skip)
		skip_temps_of(&s, skip);
	int err = TD_OK;
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
	free(s.buf);
	free(s.tpre);
	free(tn);
	return err;
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
	s.buf = malloc(CHUNK);
	int err = s.buf ? td_build_new(&o, &s.w) : TD_ENOMEM;
	free(odir); /* the builder made its temporary names */
	if (err) {
		free(s.buf);
		return err;
	}
	struct stat ost;
	if (stat(out_path, &ost) == 0) {
		s.have_out = 1;
		s.out_dev = ost.st_dev;
		s.out_ino = ost.st_ino;
	}
	skip_temps_of(&s, o.tmp_target);
	struct stat st;
	if (ninputs == 1 && stat(inputs[0], &st) == 0 && S_ISDIR(st.st_mode)) {
		/* DIR's contents are the archive's root; DIR itself may be a
		 * symlink to a directory (as for mksquashfs), so open it
		 * following links and walk the tree below without. */
		int dfd = open(inputs[0], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0)
			err = td_fail(TD_EIO, "%s: %s", inputs[0], strerror(errno));
		else {
			err = add_path(&s, dfd, ".", inputs[0], "", 0);
			close(dfd);
		}
	} else {
		err = td_build_add_paths(s.w, inputs, ninputs, NULL, out_path);
	}
	free(s.buf);
	free(s.tpre);
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
