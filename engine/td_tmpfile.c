/* td_tmpfile: temporary names beside a target and the sweep of dead processes' ones (see td_tmpfile.h). */
#include "td_tmpfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int td_tmp_path(const char *target, const char *tag, char *buf, size_t cap)
{
	if (tag) {
		size_t n = strlen(tag);
		if (n == 0 || n > 16 || strspn(tag, "abcdefghijklmnopqrstuvwxyz") != n)
			return td_fail(TD_EINVAL, "bad temporary tag '%s'", tag);
	}
	int n = snprintf(buf, cap, "%s%s%s.tmp.%ld", target, tag ? "." : "", tag ? tag : "", (long)getpid());
	if (n < 0 || (size_t)n >= cap)
		return td_fail(TD_ERANGE, "%s: name too long for a temporary", target);
	return TD_OK;
}

/* The PID at the end of a temporary's name ("....tmp.PID"), or 0. */
static long tmp_pid(const char *name)
{
	const char *t = strrchr(name, '.');
	if (!t || t - name < 4 || memcmp(t - 4, ".tmp", 4) != 0 || !t[1] || strspn(t + 1, "0123456789") != strlen(t + 1) ||
	    strlen(t + 1) > 9)
		return 0;
	return strtol(t + 1, NULL, 10);
}

static void add_name(char *msg, size_t cap, size_t *at, const char *dir, const char *name, long pid)
{
	if (!msg || *at >= cap)
		return;
	int n = snprintf(msg + *at, cap - *at, "%s'%s%s%s' (process %ld)", *at ? ", " : "removed temporaries of processes that no longer run: ",
			 dir, *dir ? "/" : "", name, pid);
	if (n > 0)
		*at += (size_t)n;
}

int td_tmp_sweep(const char *target, unsigned *removed, char *msg, size_t cap)
{
	unsigned count = 0;
	size_t at = 0;
	if (removed)
		*removed = 0;
	if (msg && cap)
		msg[0] = '\0';
	const char *slash = strrchr(target, '/');
	size_t dlen = slash ? (size_t)(slash - target) : 0;
	char *dir = strndup(target, dlen);
	if (!dir)
		return TD_ENOMEM;
	const char *base = slash ? slash + 1 : target;
	size_t blen = strlen(base);
	DIR *d = opendir(slash ? (dlen ? dir : "/") : ".");
	if (!d) {
		int err = td_fail(TD_EIO, "%s: cannot read its directory: %s", target, strerror(errno));
		free(dir);
		return err;
	}
	int dfd = dirfd(d), err = TD_OK;
	struct dirent *de;
	while ((de = readdir(d))) {
		const char *nm = de->d_name;
		if (strncmp(nm, base, blen) != 0 || nm[blen] != '.')
			continue;
		long pid = tmp_pid(nm + blen);
		if (pid <= 0 || pid == (long)getpid())
			continue;
		if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue; /* running (or not ours to signal): keep */
		if (unlinkat(dfd, nm, 0) != 0) {
			if (errno != ENOENT && !err)
				err = td_fail(TD_EIO, "%s%s%s: cannot remove a stale temporary: %s", dir, dlen ? "/" : "", nm,
					      strerror(errno));
			continue;
		}
		count++;
		add_name(msg, cap, &at, dir, nm, pid);
	}
	closedir(d);
	free(dir);
	if (removed)
		*removed = count;
	return err;
}
