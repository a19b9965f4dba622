/* kernel_tune: the mount's kernel readahead window (read_ahead config key), its
 * background-request window (-o max_background), its fusectl request count
 * and the rule-cache warm-up at mount (cache_warm). */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ctx.h"
#include "kernel_tune.h"
#include "fuse_api.h"
#include "log.h"

void td_fs_set_background(const td_fs *fs, struct fuse_conn_info *conn)
{
	if (!fs->max_background)
		return;
	conn->max_background = fs->max_background;
	conn->congestion_threshold = fs->max_background * 3 / 4 ? fs->max_background * 3 / 4 : 1;
}

/* Undo mountinfo's octal escapes (\040 for a space, \011, \012, \134) in
 * place. */
static void unescape(char *s)
{
	char *w = s;
	for (char *r = s; *r; r++) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' && r[3] >= '0' &&
		    r[3] <= '7') {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
			r += 3;
		} else
			*w++ = *r;
	}
	*w = '\0';
}

/* The device number ("0:52") of the last FUSE mount on `mnt` listed in
 * /proc/self/mountinfo, into dev; 0 if found. */
static int mount_dev(const char *mnt, char *dev, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	if (!f)
		return -1;
	char *line = NULL;
	size_t cap = 0;
	int found = -1;
	while (getline(&line, &cap, f) > 0) {
		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS...] - FSTYPE ... */
		char *save = NULL, *fld[5];
		int n = 0;
		for (char *t = strtok_r(line, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
			fld[n++] = t;
			if (n == 5)
				break; /* save: the rest, from OPTIONS on */
		}
		if (n < 5)
			continue;
		char *sep = strstr(save ? save : "", " - ");
		if (!sep || strncmp(sep + 3, "fuse", 4) != 0)
			continue;
		unescape(fld[4]);
		if (strcmp(fld[4], mnt) == 0 && strlen(fld[2]) < len) {
			strcpy(dev, fld[2]);
			found = 0;
		}
	}
	free(line);
	fclose(f);
	return found;
}

void td_fs_tune_readahead(td_fs *fs)
{
	if (atomic_load_explicit(&fs->ra_tuned, memory_order_relaxed) ||
	    atomic_exchange_explicit(&fs->ra_tuned, 1, memory_order_relaxed))
		return;
	uint64_t kb = fs->conf.read_ahead >> 10;
	if (kb == 0 || !fs->mountpoint)
		return; /* 0: the kernel's default */
	char dev[64], path[128];
	if (mount_dev(fs->mountpoint, dev, sizeof dev)) {
		td_fs_log(TD_CONF_LOG_INFO, "read_ahead: %s not found in /proc/self/mountinfo; kernel default kept",
			  fs->mountpoint);
		return;
	}
	snprintf(path, sizeof path, "/sys/class/bdi/%s/read_ahead_kb", dev);
	FILE *f = fopen(path, "w");
	int ok = f && fprintf(f, "%llu\n", (unsigned long long)kb) > 0;
	if (f && fclose(f) != 0)
		ok = 0;
	td_fs_log(ok ? TD_CONF_LOG_INFO : TD_CONF_LOG_WARN, "read_ahead: %s %s %llu KiB%s", path,
		  ok ? "set to" : "could not be set to", (unsigned long long)kb,
		  ok ? "" : " (it takes root); kernel default kept");
}

int td_fs_waiting_path(const td_fs *fs, char *path, size_t len)
{
	char dev[64];
	unsigned maj = 0, min = 0;
	path[0] = '\0';
	if (!fs->mountpoint || mount_dev(fs->mountpoint, dev, sizeof dev) || sscanf(dev, "%u:%u", &maj, &min) != 2)
		return -1;
	/* fusectl names a connection by the kernel's dev_t: major << 20 | minor */
	int n = snprintf(path, len, "/sys/fs/fuse/connections/%lu/waiting", ((unsigned long)maj << 20) | min);
	if (n < 0 || (size_t)n >= len || access(path, R_OK) != 0) {
		path[0] = '\0';
		return -1;
	}
	return 0;
}

static double ms_since(const struct timespec *t0)
{
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Every checksum, without any lock a reader takes (td_archive_check_sums
 * marks what matched, so the readers' own checks skip it): damage is
 * logged soon after the mount, and reads of the damaged part give EIO
 * (they check before they read) either way. */
static void bg_verify(td_fs *fs)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int err = td_archive_check_sums(fs->a, 1, &fs->warm_stop);
	if (__atomic_load_n(&fs->warm_stop, __ATOMIC_RELAXED))
		return; /* unmounting: part checked, nothing to say */
	if (err)
		td_fs_log(TD_CONF_LOG_WARN, "verify: %s: %s (%s); reads of the damaged part give EIO", fs->archive_path,
			  td_strerror(err), td_errdetail());
	else
		td_fs_log(TD_CONF_LOG_INFO, "verify: every checksum matches (checked in %.1f ms)", ms_since(&t0));
}

/* The background work starts once no request has come for QUIET_MS: the
 * burst of requests right after a mount (an automount's first `ls`, a
 * script's first `cat`) does not share the CPU, the memory map's lock
 * (page faults, mmap) and the disk with an O(archive) pass; readers check
 * what they read themselves meanwhile. Measured on the busy 2-core VM:
 * contrib/bench/results/mount-ready.md. */
#define QUIET_MS 50

/* 0 once the mount has been quiet for QUIET_MS, 1 when stopped first. */
static int wait_quiet(td_fs *fs)
{
	struct timespec nap = {.tv_sec = 0, .tv_nsec = 10 * 1000 * 1000};
	while (!__atomic_load_n(&fs->warm_stop, __ATOMIC_RELAXED)) {
		uint64_t last = atomic_load_explicit(&fs->last_op_ms, memory_order_relaxed);
		if (td_fs_coarse_ms() - last >= QUIET_MS)
			return 0;
		nanosleep(&nap, NULL);
	}
	return 1;
}

static void *warm_main(void *arg)
{
	td_fs *fs = arg;
	int warm = fs->conf.cache_warm && fs->conf.cache_size != 0;
	pthread_setname_np(pthread_self(), "tadocfs-warm"); /* top -H, ps -L, benchmarks */
	if (wait_quiet(fs))
		return NULL;
	/* First what a reader would wait for (the large sections' checks and
	 * the dictionary: per archive or, format 5, per shard, under its
	 * lock), at the lowest normal priority: a reader that comes first
	 * does it itself; one that comes meanwhile waits for a thread that
	 * still gets some CPU. At idle priority, on a busy machine, it could
	 * wait for a thread that gets none. */
	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
	if (warm && td_archive_check_data(fs->a) != TD_OK)
		warm = 0; /* damaged: the checksum pass names it below */
	/* Then, at idle priority, only on otherwise idle cores: the checksum
	 * pass (no lock a reader takes) and the rule cache fill. */
	struct sched_param sp = {.sched_priority = 0};
	pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
	if (fs->bg_verify)
		bg_verify(fs);
	if (!warm || __atomic_load_n(&fs->warm_stop, __ATOMIC_RELAXED))
		return NULL;
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	uint64_t bytes = 0;
	int err = td_archive_warm(fs->a, &fs->warm_stop, &bytes);
	double ms = ms_since(&t0);
	if (err)
		td_fs_log(TD_CONF_LOG_WARN, "cache_warm: %s: %s: %s", fs->archive_path, td_strerror(err), td_errdetail());
	else if (bytes)
		td_fs_log(TD_CONF_LOG_INFO, "cache_warm: %" PRIu64 " bytes of rule expansions cached in %.1f ms%s",
			  bytes, ms, __atomic_load_n(&fs->warm_stop, __ATOMIC_RELAXED) ? " (stopped)" : "");
	else
		td_fs_log(TD_CONF_LOG_INFO, "cache_warm: skipped (the expansions do not fit cache_size)");
	return NULL;
}

void td_fs_warm_start(td_fs *fs)
{
	int warm = fs->conf.cache_warm && fs->conf.cache_size != 0;
	if ((!warm && !fs->bg_verify) || fs->warm_started)
		return;
	td_fs_busy(fs); /* the mount itself: its first requests are on their way */
	__atomic_store_n(&fs->warm_stop, 0, __ATOMIC_RELAXED);
	int rc = pthread_create(&fs->warm_thread, NULL, warm_main, fs);
	if (rc)
		td_fs_log(TD_CONF_LOG_WARN, "%s: cannot start a thread: %s", warm ? "cache_warm" : "verify", strerror(rc));
	else
		fs->warm_started = 1;
}

void td_fs_warm_stop(td_fs *fs)
{
	if (!fs->warm_started)
		return;
	__atomic_store_n(&fs->warm_stop, 1, __ATOMIC_RELAXED);
	pthread_join(fs->warm_thread, NULL);
	fs->warm_started = 0;
}
