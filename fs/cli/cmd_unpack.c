/* cmd_unpack: `tadoc unpack`: restore the archived tree byte-exact under a directory. */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "td_err.h"
#include "td_extract.h"
#include "td_format.h"

static const char help[] =
	"Usage: tadoc unpack ARCHIVE DIR\n"
	"\n"
	"Restore the archived tree under DIR: file contents byte for byte,\n"
	"permission bits, modification times (nanoseconds), directories and\n"
	"symlinks. A directory's mode and mtime are set after its contents, and\n"
	"the archive root's are applied to DIR. DIR must be empty or not exist\n"
	"(its parent must exist). Nothing is ever written outside DIR: entries are\n"
	"created relative to their directory with O_EXCL and O_NOFOLLOW, and an\n"
	"entry name that is empty, '.', '..' or contains '/' is refused.\n"
	"Owners are not stored in archives and are not restored. Every section\n"
	"checksum is checked before anything is written.\n"
	"\n"
	"Options:\n"
	"  -h, --help   show this help\n";

struct level {
	int fd;                 /* open directory */
	td_entry dir, next, end;
	size_t plen;            /* length of its path in the output path buffer */
};

struct unpacker {
	const td_archive *a;
	const char *archive;
	td_cursor *cur;
	char *buf;              /* TD_CLI_CHUNK bytes */
	char path[PATH_MAX + TD_MAXPATH + 2]; /* DIR/relative path, for messages */
	struct level *stack;
	size_t depth, cap;
};

static int fail_sys(struct unpacker *u, const char *what)
{
	int e = errno;
	return td_cli_errorf(u->path, "%s: %s", what, strerror(e));
}

/* Mode and mtime of an entry, applied through an open descriptor. */
static int set_attrs_fd(struct unpacker *u, int fd, const td_stat *st)
{
	struct timespec ts[2];
	ts[0].tv_sec = ts[1].tv_sec = (time_t)st->mtime_sec;
	ts[0].tv_nsec = ts[1].tv_nsec = (long)st->mtime_nsec;
	if (fchmod(fd, st->mode & 07777) != 0)
		return fail_sys(u, "cannot set mode");
	if (futimens(fd, ts) != 0)
		return fail_sys(u, "cannot set modification time");
	return TD_CLI_OK;
}

static int check_name(struct unpacker *u, const char *name, size_t len)
{
	if (len == 0 || len > TD_MAXNAME || memchr(name, '/', len) || memchr(name, '\0', len) ||
	    (len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.')) {
		td_cli_errorf(u->archive, "refusing to unpack unsafe entry name '%.*s' under '%s'", (int)len,
			      name, u->path);
		return -1;
	}
	return 0;
}

static int write_file(struct unpacker *u, int pfd, const char *name, td_entry e, const td_stat *st)
{
	int fd = openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return fail_sys(u, "cannot create");
	uint64_t off = 0;
	while (off < st->size) {
		size_t want = st->size - off < TD_CLI_CHUNK ? (size_t)(st->size - off) : TD_CLI_CHUNK;
		size_t got = 0;
		int err = td_cursor_read(u->cur, e, off, u->buf, want, &got);
		if (!err && got == 0)
			err = td_fail(TD_ECORRUPT, "file text ends at byte %llu, before its size %llu",
				      (unsigned long long)off, (unsigned long long)st->size);
		if (err) {
			close(fd);
			return td_cli_error_td(u->path, err);
		}
		const char *p = u->buf;
		size_t n = got;
		while (n > 0) {
			ssize_t w = write(fd, p, n);
			if (w < 0) {
				if (errno == EINTR)
					continue;
				int st2 = fail_sys(u, "write failed");
				close(fd);
				return st2;
			}
			p += w;
			n -= (size_t)w;
		}
		off += got;
	}
	int status = set_attrs_fd(u, fd, st);
	if (close(fd) != 0 && status == TD_CLI_OK)
		status = fail_sys(u, "write failed");
	return status;
}

static int write_symlink(struct unpacker *u, int pfd, const char *name, td_entry e, const td_stat *st)
{
	char target[TD_MAXPATH + 1];
	size_t got = 0;
	int err = td_archive_readlink(u->a, e, target, sizeof target, &got);
	if (err)
		return td_cli_error_td(u->path, err);
	if (symlinkat(target, pfd, name) != 0)
		return fail_sys(u, "cannot create symlink");
	struct timespec ts[2];
	ts[0].tv_sec = ts[1].tv_sec = (time_t)st->mtime_sec;
	ts[0].tv_nsec = ts[1].tv_nsec = (long)st->mtime_nsec;
	if (utimensat(pfd, name, ts, AT_SYMLINK_NOFOLLOW) != 0)
		return fail_sys(u, "cannot set modification time");
	return TD_CLI_OK;
}

static int push(struct unpacker *u, int fd, td_entry dir, size_t plen)
{
	td_entry first;
	uint32_t count;
	int err = td_archive_children(u->a, dir, &first, &count);
	if (err) {
		close(fd);
		return td_cli_error_td(u->path, err);
	}
	if (u->depth == u->cap) {
		size_t ncap = u->cap ? u->cap * 2 : 16;
		struct level *ns = realloc(u->stack, ncap * sizeof *ns);
		if (!ns) {
			close(fd);
			return td_cli_errorf(u->path, "out of memory");
		}
		u->stack = ns;
		u->cap = ncap;
	}
	u->stack[u->depth++] = (struct level){ fd, dir, first, first + count, plen };
	return TD_CLI_OK;
}

/* Finish the top directory: its mode and mtime, after its contents. */
static int pop(struct unpacker *u)
{
	struct level *l = &u->stack[--u->depth];
	u->path[l->plen] = '\0';
	td_stat st;
	int err = td_archive_stat(u->a, l->dir, &st);
	int status = err ? td_cli_error_td(u->path, err) : set_attrs_fd(u, l->fd, &st);
	close(l->fd);
	return status;
}

static int unpack_tree(struct unpacker *u)
{
	int status = TD_CLI_OK;
	while (status == TD_CLI_OK && u->depth > 0) {
		struct level *l = &u->stack[u->depth - 1];
		if (l->next == l->end) {
			status = pop(u);
			continue;
		}
		td_entry e = l->next++;
		int pfd = l->fd;
		size_t plen = l->plen;
		u->path[plen] = '\0';
		size_t nlen;
		const char *raw = td_archive_name(u->a, e, &nlen);
		if (!raw) {
			td_fail(TD_ECORRUPT, "entry %u has no name", e);
			status = td_cli_error_td(u->archive, TD_ECORRUPT);
			break;
		}
		if (check_name(u, raw, nlen)) {
			status = TD_CLI_FAIL;
			break;
		}
		if (plen + 1 + nlen >= sizeof u->path) {
			status = td_cli_errorf(u->path, "path too long");
			break;
		}
		char name[TD_MAXNAME + 1];
		memcpy(name, raw, nlen);
		name[nlen] = '\0';
		u->path[plen] = '/';
		memcpy(u->path + plen + 1, name, nlen + 1);
		size_t clen = plen + 1 + nlen;

		td_stat st;
		int err = td_archive_stat(u->a, e, &st);
		if (err) {
			status = td_cli_error_td(u->path, err);
			break;
		}
		if (S_ISDIR(st.mode)) {
			if (mkdirat(pfd, name, 0700) != 0) {
				status = fail_sys(u, "cannot create directory");
				break;
			}
			int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (fd < 0) {
				status = fail_sys(u, "cannot open directory");
				break;
			}
			status = push(u, fd, e, clen);
		} else if (S_ISREG(st.mode)) {
			status = write_file(u, pfd, name, e, &st);
		} else if (S_ISLNK(st.mode)) {
			status = write_symlink(u, pfd, name, e, &st);
		} else {
			td_fail(TD_ECORRUPT, "entry '%s' has unknown type 0%o", name, (unsigned)(st.mode & S_IFMT));
			status = td_cli_error_td(u->archive, TD_ECORRUPT);
		}
	}
	/* On failure close whatever is still open. */
	while (u->depth > 0)
		close(u->stack[--u->depth].fd);
	return status;
}

/* Open DIR, creating it when missing; refuse a non-empty directory. */
static int open_target(const char *dir)
{
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		td_cli_error_sys(dir, errno);
		return -1;
	}
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		td_cli_error_sys(dir, errno);
		return -1;
	}
	int dfd = dup(fd);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		td_cli_error_sys(dir, errno);
		if (dfd >= 0)
			close(dfd);
		close(fd);
		return -1;
	}
	struct dirent *de;
	int empty = 1;
	errno = 0;
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
			empty = 0;
			break;
		}
	int rerr = errno;
	closedir(d);
	if (!empty || (de == NULL && rerr)) {
		if (!empty)
			td_cli_errorf(dir, "directory not empty (unpack needs an empty or new directory)");
		else
			td_cli_error_sys(dir, rerr);
		close(fd);
		return -1;
	}
	return fd;
}

int td_cmd_unpack(int argc, char **argv)
{
	int first;
	int st = td_cli_simple_opts(argc, argv, help, &first);
	if (st >= 0)
		return st;
	if (argc - first != 2)
		return td_cli_usage(argv[0], argc - first < 2 ? "expected ARCHIVE DIR" : "too many arguments");
	const char *archive = argv[first], *dir = argv[first + 1];
	if (!*dir)
		return td_cli_usage(argv[0], "empty DIR");

	static struct unpacker u; /* large path buffer: keep it off the stack */
	memset(&u, 0, sizeof u);
	u.archive = archive;
	size_t dl = strlen(dir);
	while (dl > 1 && dir[dl - 1] == '/')
		dl--;
	if (dl >= PATH_MAX)
		return td_cli_errorf(dir, "path too long");
	memcpy(u.path, dir, dl);
	u.path[dl] = '\0';
	if (dl == 1 && dir[0] == '/')
		dl = 0; /* children of "/" print as "/name" */

	/* Every byte is read anyway: check all checksums first, so a damaged
	 * archive is reported before anything is written. */
	td_archive *a = td_cli_open(archive, TD_OPEN_VERIFY);
	if (!a)
		return TD_CLI_FAIL;
	/* TD_OPEN_VERIFY checks a format 5 container's own sections only: its
	 * shards are checked when first opened, which would be after the files
	 * before them were written. Hash every shard's image now. */
	if (td_archive_version(a) >= TD_VERSION_SHARDED) {
		long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
		int serr = td_archive_check_sums(a, ncpu > 0 ? (unsigned)ncpu : 1, NULL);
		if (serr) {
			td_archive_close(a);
			return td_cli_error_td(archive, serr);
		}
	}
	td_cli_journal_note(archive);
	u.a = a;
	u.cur = td_cursor_new(a);
	u.buf = malloc(TD_CLI_CHUNK);
	int status;
	if (!u.cur || !u.buf) {
		status = td_cli_errorf(archive, "out of memory");
		goto out;
	}
	/* Deep trees keep one descriptor per level open. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	/* Every file is read once, in order: have every short rule expanded
	 * at once (td_archive_will_read); damage it meets in them is then
	 * reported before anything is written (the reads report the rest). */
	td_info info;
	td_archive_info(a, &info); /* total_bytes: every regular file's size */
	int herr = td_archive_will_read(a, info.total_bytes);
	if (herr) {
		status = td_cli_error_td(archive, herr);
		goto out;
	}
	int fd = open_target(u.path);
	if (fd < 0) {
		status = TD_CLI_FAIL;
		goto out;
	}
	status = push(&u, fd, TD_ROOT, dl);
	if (status == TD_CLI_OK)
		status = unpack_tree(&u);
out:
	free(u.stack);
	free(u.buf);
	td_cursor_free(u.cur);
	td_archive_close(a);
	return status;
}
