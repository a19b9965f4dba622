/* mount_main: mount a tadoc archive with FUSE (options, checks, session, signals). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store_ahead.h"
#include "ctx.h"
#include "kernel_tune.h"
#include "batcher.h"
#include "fuse_api.h"
#include "log.h"
#include "ops.h"
#include "opts.h"
#include "overlay.h"
#include "stats.h"
#include "td_archive.h"
#include "td_conf.h"
#include "td_err.h"
#include "td_gpu.h"

#ifndef TADOC_VERSION
#define TADOC_VERSION "0.1.0"
#endif

#define DEFAULT_THREADS 16

/* One line on stderr: "tadocfs: WHAT: PROBLEM". */
static int fail(const char *what, const char *problem)
{
	fprintf(stderr, "tadocfs: %s: %s\n", what, problem);
	return TD_FS_EXIT_FAIL;
}

static int open_archive(const char *path, const td_fs_opts *o, char **abs, td_archive **out)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return fail(path, strerror(errno));
	if (S_ISDIR(st.st_mode))
		return fail(path, strerror(EISDIR));
	*abs = realpath(path, NULL);
	if (!*abs)
		return fail(path, strerror(errno));
	int err = td_archive_open(*abs, 0, out);
	if (err)
		return td_fs_fail_td(path, err);
	/* Opening checks the header, the section table, the small sections
	 * and the entry tree: O(files), nothing that grows with the text. The
	 * large sections (format 5: each shard) are checked before their first
	 * use, and all of them by a background thread right after the mount
	 * (td_fs_warm_start; not with -o noverify), so a damaged part reads as
	 * EIO, never as wrong bytes. -o verify checks every checksum and
	 * invariant here, before mounting, and refuses a damaged archive. */
	if (o->verify && (err = td_archive_verify(*out)) != 0)
		return td_fs_fail_td(path, err);
	return TD_FS_EXIT_OK;
}

/* Is a file system mounted on directory mnt (st: its stat)? Its device
 * differs from its parent's, or /proc/self/mountinfo lists it (a bind mount
 * of the same file system). */
static int is_mountpoint(const char *mnt, const struct stat *st)
{
	char *up = malloc(strlen(mnt) + 4);
	struct stat pst;
	int differs = 0;
	if (up) {
		sprintf(up, "%s/..", mnt);
		differs = stat(up, &pst) == 0 && pst.st_dev != st->st_dev;
		free(up);
	}
	if (differs)
		return 1;
	char *abs = realpath(mnt, NULL);
	FILE *f = abs ? fopen("/proc/self/mountinfo", "r") : NULL;
	int found = 0;
	if (f) {
		char line[4096], point[4096];
		while (!found && fgets(line, sizeof line, f)) {
			/* ID PARENT MAJ:MIN ROOT MOUNTPOINT ...; octal escapes (\040) in paths */
			if (sscanf(line, "%*s %*s %*s %*s %4095s", point) != 1)
				continue;
			char *w = point;
			for (const char *r = point; *r; w++) {
				if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' && r[3] >= '0' &&
				    r[3] <= '7') {
					*w = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
					r += 4;
				} else {
					*w = *r++;
				}
			}
			*w = '\0';
			found = strcmp(point, abs) == 0;
		}
		fclose(f);
	}
	free(abs);
	return found;
}

static int check_mountpoint(const td_fs_opts *o)
{
	const char *mnt = o->mountpoint;
	int nonempty = o->nonempty;
	/* mount.fuse3 may hand over an opened /dev/fuse as /dev/fd/N
	 * (drop_privileges): it made the mount with the options it passes us,
	 * so ours (default_permissions above all) never reach the kernel.
	 * Without default_permissions nothing checks the archived modes. */
	if (strncmp(mnt, "/dev/fd/", 8) == 0) {
		for (size_t i = 0; i < o->nfuse; i++)
			if (strcmp(o->fuse_opts[i], "default_permissions") == 0)
				return TD_FS_EXIT_OK;
		fprintf(stderr, "tadocfs: %s: mounted by mount.fuse3 without default_permissions "
			"(add -o default_permissions)\n", mnt);
		return TD_FS_EXIT_USAGE;
	}
	struct stat st;
	if (stat(mnt, &st) != 0)
		return fail(mnt, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return fail(mnt, strerror(ENOTDIR));
	if (nonempty)
		return TD_FS_EXIT_OK;
	DIR *d = opendir(mnt);
	if (!d)
		return fail(mnt, strerror(errno));
	struct dirent *de;
	int empty = 1;
	errno = 0;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
			empty = 0;
			break;
		}
	}
	int rerr = errno;
	closedir(d);
	if (empty && rerr)
		return fail(mnt, strerror(rerr));
	/* Also when empty: a mount whose root lists nothing (an archive of an
	 * empty directory, an empty tmpfs) is still a mount, and mounting on
	 * it stacks a second file system over the first. */
	if (is_mountpoint(mnt, &st))
		return fail(mnt, "already mounted (unmount it first: fusermount3 -u MOUNTPOINT)");
	if (!empty)
		return fail(mnt, "mountpoint is not empty (use -o nonempty to mount over it)");
	return TD_FS_EXIT_OK;
}

static int check_dev_fuse(void)
{
	int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return fail("/dev/fuse", strerror(errno));
	close(fd);
	return TD_FS_EXIT_OK;
}

/* The number of visible CUDA devices, asked in a child process (CUDA must
 * not be set up in this one before fuse_daemonize forks); -1 when it cannot
 * be asked. */
static int gpu_count_probe(void)
{
	int fds[2];
	if (pipe(fds) != 0)
		return -1;
	pid_t pid = fork();
	if (pid < 0) {
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	if (pid == 0) {
		close(fds[0]);
		int n = td_gpu_device_count();
		ssize_t w = write(fds[1], &n, sizeof n);
		(void)w;
		_exit(0);
	}
	close(fds[1]);
	int n = -1;
	ssize_t r;
	do
		r = read(fds[0], &n, sizeof n);
	while (r < 0 && errno == EINTR);
	close(fds[0]);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	return r == (ssize_t)sizeof n ? n : -1;
}

/* Defaults, then the config file (-o config=FILE or the default places),
 * then -o KEY=VALUE overrides. Errors print "tadocfs: " and the message of td_conf.h. */
static int load_config(const td_fs_opts *o, td_conf *c)
{
	char err[TD_CONF_PATH_MAX + 256];
	if (td_conf_load(c, o->config, (const char *const *)o->conf_keys, o->nconf, err, sizeof err) != 0) {
		fprintf(stderr, "tadocfs: %s\n", err);
		return TD_FS_EXIT_USAGE;
	}
	/* a device gpu_devices names must exist (td_conf cannot know which do) */
	if (c->gpu != TD_CONF_GPU_OFF && c->gpu_devices) {
		int n = gpu_count_probe();
		for (unsigned d = 0; d < 64 && n >= 0; d++)
			if ((c->gpu_devices >> d & 1) && (int)d >= n) {
				td_conf_where(c, TD_CONF_KEY_GPU_DEVICES, err, sizeof err);
				fprintf(stderr, "tadocfs: %s: %sdevice %u does not exist (%d found)\n", err,
					c->origin[TD_CONF_KEY_GPU_DEVICES].src == TD_CONF_SRC_FILE ? "gpu_devices: " : "", d, n);
				return TD_FS_EXIT_USAGE;
			}
	}
	return TD_FS_EXIT_OK;
}

static int build_fuse_args(const td_fs_opts *o, const char *argv0, const char *abs_archive,
			   struct fuse_args *args)
{
	char *optstr = NULL;
	int rc = 0;
	rc |= fuse_opt_add_arg(args, argv0);
	/* Read-only at the VFS unless -o rw: writes fail with EROFS before
	 * reaching us. */
	if (!o->rw)
		rc |= fuse_opt_add_opt(&optstr, "ro");
	rc |= fuse_opt_add_opt(&optstr, "default_permissions");
	if (!o->has_subtype)
		rc |= fuse_opt_add_opt(&optstr, "subtype=tadocfs");
	if (!o->has_fsname) {
		size_t n = strlen(abs_archive) + 8;
		char *fsname = malloc(n);
		if (!fsname)
			return -1;
		snprintf(fsname, n, "fsname=%s", abs_archive);
		rc |= fuse_opt_add_opt_escaped(&optstr, fsname);
		free(fsname);
	}
	for (size_t i = 0; i < o->nfuse; i++)
		rc |= fuse_opt_add_opt_escaped(&optstr, o->fuse_opts[i]);
	rc |= fuse_opt_add_arg(args, "-o");
	rc |= fuse_opt_add_arg(args, optstr);
	if (o->debug)
		rc |= fuse_opt_add_arg(args, "-d");
	free(optstr);
	return rc ? -1 : 0;
}

/* SIGHUP, SIGINT, SIGTERM end the session, and the long queries running
 * (libfuse's loop waits for its busy threads). libfuse's own handler only sets
 * the session's exit flag, which its loop reads when its main thread's
 * wait is interrupted or a request comes: a signal that lands on another
 * thread of ours (the batcher's, the warm-up's, a pool's) left the daemon
 * mounted until the next request. This handler also passes the signal on
 * to the main thread, whose wait it interrupts. */
static struct fuse_session *exit_se;
static td_fs *exit_fs;
static pthread_t main_thread;
static volatile sig_atomic_t main_known;

static void on_exit_signal(int sig)
{
	if (exit_fs)
		exit_fs->stopping = 1; /* queries running end now (td_fs_cancel_begin) */
	if (exit_se)
		fuse_session_exit(exit_se);
	if (main_known && !pthread_equal(pthread_self(), main_thread))
		pthread_kill(main_thread, sig); /* async-signal-safe */
}

static int exit_signals(struct fuse_session *se, td_fs *fs)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = se ? on_exit_signal : SIG_DFL;
	sigemptyset(&sa.sa_mask);
	exit_se = se;
	exit_fs = fs;
	return sigaction(SIGHUP, &sa, NULL) || sigaction(SIGINT, &sa, NULL) || sigaction(SIGTERM, &sa, NULL) ? -1 : 0;
}

static int run_loop(struct fuse_session *se, const td_fs_opts *o, td_fs *fs)
{
	if (o->single_thread)
		return fuse_session_loop(se);
	unsigned threads = o->max_threads ? o->max_threads : td_fs_batch_fuse_threads(fs, DEFAULT_THREADS);
	td_fs_ahead_setup(fs, threads);
#if FUSE_USE_VERSION >= 312
	struct fuse_loop_config *cfg = fuse_loop_cfg_create();
	if (!cfg)
		return -ENOMEM;
	fuse_loop_cfg_set_clone_fd(cfg, (unsigned)o->clone_fd);
	fuse_loop_cfg_set_max_threads(cfg, threads);
	fuse_loop_cfg_set_idle_threads(cfg, threads);
	int rc = fuse_session_loop_mt(se, cfg);
	fuse_loop_cfg_destroy(cfg);
	return rc;
#else
	struct fuse_loop_config cfg = { .clone_fd = o->clone_fd, .max_idle_threads = threads };
	return fuse_session_loop_mt(se, &cfg);
#endif
}

int main(int argc, char **argv)
{
	td_fs_opts o;
	int rc = td_fs_opts_parse(argc, argv, &o);
	if (rc) {
		td_fs_opts_free(&o); /* what was parsed before the error */
		return rc;
	}
	if (o.help || o.version) {
		if (o.help)
			td_fs_opts_usage("tadocfs");
		else
			printf("tadocfs %s (libfuse %s)\n", TADOC_VERSION, fuse_pkgversion());
		td_fs_opts_free(&o);
		/* a full disk or a closed pipe is an error, as for any tool */
		if (fflush(stdout) || ferror(stdout))
			return fail("standard output", strerror(errno));
		return TD_FS_EXIT_OK;
	}
	static td_conf conf;
	if ((rc = load_config(&o, &conf))) {
		td_fs_opts_free(&o);
		return rc;
	}
	/* SIGUSR1 (log the stats) waits for its thread instead of killing. */
	td_fs_stats_block_signal();
	td_fs_log_setup(o.debug ? TD_CONF_LOG_DEBUG : conf.log_level);

	/* Everything is checked before anything is mounted. */
	char *abs = NULL;
	td_archive *a = NULL;
	if ((rc = open_archive(o.archive, &o, &abs, &a)) || (rc = check_mountpoint(&o)) ||
	    (rc = check_dev_fuse())) {
		td_archive_close(a);
		free(abs);
		td_fs_opts_free(&o);
		return rc;
	}

	static td_fs fs;
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_session *se = NULL;
	int lock_fd = -1;
	int ferr = td_fs_init(&fs, a, abs, &conf);
	if (ferr) {
		rc = fail(o.archive, strerror(-ferr));
		goto out_fs;
	}
	/* Lock the archive (exclusive for -o rw) and replay its journal. */
	if ((rc = td_fs_rw_open(&fs, o.rw, &lock_fd)) != 0)
		goto out_fs;
	td_archive_set_cache(fs.a, conf.cache_size);
	fs.bg_verify = !o.noverify && !o.verify; /* -o verify checked them all */
	char gmsg[512];
	if (conf.gpu == TD_CONF_GPU_ON && conf.batch_max > 1 && !fs.rw && !td_fs_batch_gpu_probe(&fs, gmsg, sizeof gmsg)) {
		rc = fail("gpu=on", gmsg);
		goto out_fs;
	}

	if (build_fuse_args(&o, argv[0], abs, &args)) {
		rc = fail("tadocfs", strerror(ENOMEM));
		goto out_args;
	}
	struct fuse_lowlevel_ops ops;
	td_fs_ops_fill(&ops);
	if (fs.rw)
		td_fs_rw_ops(&ops);
	fs.debug = o.debug;
	fs.max_read = o.max_read;
	fs.max_background = o.max_background ? o.max_background : TD_FS_MAX_BACKGROUND;
	se = fuse_session_new(&args, &ops, sizeof ops, &fs);
	if (!se) {
		rc = fail(o.mountpoint, "cannot create the FUSE session");
		goto out_args;
	}
	fs.se = se;
	if (fuse_set_signal_handlers(se) != 0 || exit_signals(se, &fs) != 0) { /* libfuse's SIGPIPE, then ours */
		rc = fail("tadocfs", "cannot install signal handlers");
		goto out_session;
	}
	/* The daemon leaves the working directory: keep an absolute path so
	 * the unmount at exit (after a signal) finds the mountpoint. */
	char *abs_mnt = strncmp(o.mountpoint, "/dev/fd/", 8) == 0 ? strdup(o.mountpoint) : realpath(o.mountpoint, NULL);
	if (!abs_mnt) {
		rc = fail(o.mountpoint, strerror(errno));
		goto out_signals;
	}
	int mrc = fuse_session_mount(se, abs_mnt);
	if (strncmp(abs_mnt, "/dev/fd/", 8) != 0)
		fs.mountpoint = abs_mnt; /* freed by td_fs_fini */
	else
		free(abs_mnt);
	if (mrc != 0) {
		rc = fail(o.mountpoint, "mount failed");
		goto out_signals;
	}
	if (fuse_daemonize(o.foreground) != 0) {
		rc = fail("tadocfs", "cannot detach from the terminal");
		fuse_session_unmount(se);
		goto out_signals;
	}
	main_thread = pthread_self(); /* the daemon's (fuse_daemonize forked) */
	main_known = 1;
	if (!o.foreground && !o.debug)
		td_fs_log_detached();
	int berr = td_fs_batch_start(&fs);
	if (berr == -ENODEV) { /* gpu=on and the GPU did not open: logged */
		rc = TD_FS_EXIT_FAIL;
		fuse_session_unmount(se);
		goto out_signals;
	}
	if (berr)
		td_fs_log(TD_CONF_LOG_WARN, "batcher: %s; requests are answered inline", strerror(-berr));
	td_fs_warm_start(&fs);
	int lrc = run_loop(se, &o, &fs);
	td_fs_warm_stop(&fs);
	td_fs_batch_stop(&fs); /* answers what is still queued */
	td_fs_rw_inval_stop(&fs); /* and the edits waiting for an invalidation */
	fuse_session_unmount(se);
	/* A signal (positive) or an unmount (0) is a clean end. */
	rc = lrc < 0 ? TD_FS_EXIT_FAIL : TD_FS_EXIT_OK;
	if (lrc < 0)
		fprintf(stderr, "tadocfs: %s: session ended: %s\n", o.mountpoint, strerror(-lrc));
out_signals:
	main_known = 0;
	exit_signals(NULL, NULL);
	fuse_remove_signal_handlers(se);
out_session:
	fuse_session_destroy(se);
out_args:
	fuse_opt_free_args(&args);
out_fs:
	if (td_fs_rw_close(&fs, lock_fd) != 0 && rc == TD_FS_EXIT_OK)
		rc = TD_FS_EXIT_FAIL;
	td_fs_fini(&fs);
	free(abs);
	td_fs_opts_free(&o);
	return rc;
}
