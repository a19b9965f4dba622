/* noopfs: a no-op FUSE filesystem (low-level API, multi-threaded) serving N
 * constant-filled files from memory — the FUSE ceiling for read benchmarks.
 *
 * Usage: noopfs [-o files=N,size=BYTES,fill=BYTE] MOUNTPOINT [-f] [-s] [-d]
 *
 * The root directory holds files f000000 .. f<N-1>, each `size` bytes of the
 * byte `fill` (default 'a', so text tools see text). Every request is
 * answered straight from a static buffer: no allocation, no copying beyond
 * what libfuse itself does, no locks. Attributes and entries are cached by
 * the kernel "forever" and the page cache is kept across opens, the way a
 * read-only archive filesystem would configure itself.
 */
#define FUSE_USE_VERSION 312

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NOOP_NAME_LEN 7               /* "f" + 6 digits */
#define NOOP_BUF_MAX (8u << 20)       /* largest read reply we serve */
#define NOOP_TIMEOUT 86400.0

struct noop_opts {
	unsigned files;
	unsigned long size;
	unsigned fill;
};

static struct noop_opts g_opts = { .files = 1000, .size = 65536, .fill = 'a' };
static char *g_buf;                   /* NOOP_BUF_MAX bytes of g_opts.fill */

static const struct fuse_opt noop_opt_spec[] = {
	{ "files=%u", offsetof(struct noop_opts, files), 0 },
	{ "size=%lu", offsetof(struct noop_opts, size), 0 },
	{ "fill=%u", offsetof(struct noop_opts, fill), 0 },
	FUSE_OPT_END
};

/* Inode 1 is the root; file i has inode i + 2. */
static int noop_fill_stat(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof *st);
	st->st_ino = ino;
	if (ino == FUSE_ROOT_ID) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		return 0;
	}
	if (ino < 2 || ino - 2 >= g_opts.files)
		return -1;
	st->st_mode = S_IFREG | 0444;
	st->st_nlink = 1;
	st->st_size = (off_t)g_opts.size;
	st->st_blocks = (blkcnt_t)((g_opts.size + 511) / 512);
	st->st_blksize = 4096;
	return 0;
}

/* Parse "f%06u" exactly; returns the file index or -1. */
static long noop_parse_name(const char *name)
{
	if (name[0] != 'f' || strlen(name) != NOOP_NAME_LEN)
		return -1;
	long v = 0;
	for (int i = 1; i < NOOP_NAME_LEN; i++) {
		if (name[i] < '0' || name[i] > '9')
			return -1;
		v = v * 10 + (name[i] - '0');
	}
	return v < (long)g_opts.files ? v : -1;
}

static void noop_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	long idx = parent == FUSE_ROOT_ID ? noop_parse_name(name) : -1;
	if (idx < 0) {
		fuse_reply_err(req, parent == FUSE_ROOT_ID ? ENOENT : ENOTDIR);
		return;
	}
	struct fuse_entry_param e;
	memset(&e, 0, sizeof e);
	e.ino = (fuse_ino_t)idx + 2;
	e.attr_timeout = NOOP_TIMEOUT;
	e.entry_timeout = NOOP_TIMEOUT;
	noop_fill_stat(e.ino, &e.attr);
	fuse_reply_entry(req, &e);
}

static void noop_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)fi;
	struct stat st;
	if (noop_fill_stat(ino, &st) < 0)
		fuse_reply_err(req, ENOENT);
	else
		fuse_reply_attr(req, &st, NOOP_TIMEOUT);
}

static void noop_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino == FUSE_ROOT_ID) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EROFS);
		return;
	}
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void noop_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		      struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	uint64_t fsize = g_opts.size;
	size_t n = 0;
	if ((uint64_t)off < fsize) {
		n = (size_t)(fsize - (uint64_t)off);
		if (n > size)
			n = size;
		if (n > NOOP_BUF_MAX)
			n = NOOP_BUF_MAX;
	}
	fuse_reply_buf(req, g_buf, n);
}

static void noop_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			 struct fuse_file_info *fi)
{
	(void)fi;
	if (ino != FUSE_ROOT_ID) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	char *buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	/* Entry k: 0 ".", 1 "..", k >= 2 file k - 2. The offset passed back is
	 * the index of the next entry. */
	size_t used = 0;
	uint64_t total = (uint64_t)g_opts.files + 2;
	for (uint64_t k = (uint64_t)off; k < total; k++) {
		struct stat st;
		memset(&st, 0, sizeof st);
		char name[24];
		if (k == 0) {
			strcpy(name, ".");
			st.st_ino = FUSE_ROOT_ID;
			st.st_mode = S_IFDIR;
		} else if (k == 1) {
			strcpy(name, "..");
			st.st_ino = FUSE_ROOT_ID;
			st.st_mode = S_IFDIR;
		} else {
			snprintf(name, sizeof name, "f%06" PRIu64, k - 2);
			st.st_ino = (ino_t)k;
			st.st_mode = S_IFREG;
		}
		size_t need = fuse_add_direntry(req, buf + used, size - used, name, &st, (off_t)(k + 1));
		if (need > size - used)
			break;
		used += need;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void noop_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino != FUSE_ROOT_ID) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void noop_statfs(fuse_req_t req, fuse_ino_t ino)
{
	(void)ino;
	struct statvfs sv;
	memset(&sv, 0, sizeof sv);
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = ((uint64_t)g_opts.files * g_opts.size + 4095) / 4096;
	sv.f_files = (fsfilcnt_t)g_opts.files + 1;
	sv.f_namemax = 255;
	fuse_reply_statfs(req, &sv);
}

/* The same background-request window as tadocfs (its -o max_background
 * default), so the ceiling is measured under the same kernel limit. */
static void noop_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	conn->max_background = 256;
	conn->congestion_threshold = 192;
}

static const struct fuse_lowlevel_ops noop_ops = {
	.init = noop_init,
	.lookup = noop_lookup,
	.getattr = noop_getattr,
	.open = noop_open,
	.read = noop_read,
	.opendir = noop_opendir,
	.readdir = noop_readdir,
	.statfs = noop_statfs,
};

static void noop_usage(const char *prog)
{
	printf("usage: %s [-o files=N,size=BYTES,fill=BYTE] MOUNTPOINT [options]\n"
	       "A no-op read-only FUSE filesystem: N files f000000.. of BYTES bytes of\n"
	       "the byte value FILL, answered from memory (the FUSE ceiling).\n\n", prog);
	fuse_cmdline_help();
	fuse_lowlevel_help();
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts opts;
	int ret = 1;

	if (fuse_opt_parse(&args, &g_opts, noop_opt_spec, NULL) == -1)
		return 1;
	if (fuse_parse_cmdline(&args, &opts) != 0)
		return 1;
	if (opts.show_help) {
		noop_usage(argv[0]);
		ret = 0;
		goto out_args;
	}
	if (opts.show_version) {
		printf("FUSE library version %s\n", fuse_pkgversion());
		ret = 0;
		goto out_args;
	}
	if (!opts.mountpoint) {
		fprintf(stderr, "noopfs: no mountpoint given (try --help)\n");
		goto out_args;
	}
	if (g_opts.files > 999999 || g_opts.fill > 255) {
		fprintf(stderr, "noopfs: files must be <= 999999 and fill a byte value\n");
		goto out_args;
	}
	g_buf = malloc(NOOP_BUF_MAX);
	if (!g_buf) {
		fprintf(stderr, "noopfs: out of memory\n");
		goto out_args;
	}
	memset(g_buf, (int)g_opts.fill, NOOP_BUF_MAX);

	struct fuse_session *se = fuse_session_new(&args, &noop_ops, sizeof noop_ops, NULL);
	if (!se)
		goto out_buf;
	if (fuse_set_signal_handlers(se) != 0)
		goto out_session;
	if (fuse_session_mount(se, opts.mountpoint) != 0)
		goto out_signals;
	fuse_daemonize(opts.foreground);

	if (opts.singlethread) {
		ret = fuse_session_loop(se);
	} else {
		struct fuse_loop_config *cfg = fuse_loop_cfg_create();
		if (!cfg) {
			ret = 1;
		} else {
			fuse_loop_cfg_set_clone_fd(cfg, (unsigned)opts.clone_fd);
			fuse_loop_cfg_set_idle_threads(cfg, opts.max_idle_threads);
			fuse_loop_cfg_set_max_threads(cfg, opts.max_threads);
			ret = fuse_session_loop_mt(se, cfg);
			fuse_loop_cfg_destroy(cfg);
		}
	}
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out_session:
	fuse_session_destroy(se);
out_buf:
	free(g_buf);
out_args:
	free(opts.mountpoint);
	fuse_opt_free_args(&args);
	return ret ? 1 : 0;
}
