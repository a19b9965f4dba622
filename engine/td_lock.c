/* td_lock: flock-based archive locks with a check against renames. */
#include "td_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* flock(fd, op | LOCK_NB), retried every 10 ms for up to wait_ms while
 * another process holds a conflicting lock. 0 or -1 with errno. */
static int lock_wait(int fd, int op, unsigned wait_ms)
{
	for (int waited = 0;; waited += 10) {
		int r;
		do
			r = flock(fd, op | LOCK_NB);
		while (r != 0 && errno == EINTR);
		if (r == 0 || errno != EWOULDBLOCK || (unsigned)waited >= wait_ms)
			return r;
		nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
	}
}

int td_lock_archive(const char *path, int exclusive, unsigned wait_ms, int *out)
{
	for (int tries = 0; tries < 64; tries++) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return td_fail(TD_EIO, "%s: %s", path, strerror(errno));
		if (lock_wait(fd, exclusive ? LOCK_EX : LOCK_SH, wait_ms) != 0) {
			int e = errno;
			close(fd);
			if (e == EWOULDBLOCK)
				return td_fail(TD_EBUSY, "%s: %s", path,
					       exclusive ? "already mounted or being compacted by another process"
							 : "mounted writable or being compacted by another process");
			return td_fail(TD_EIO, "%s: cannot lock: %s", path, strerror(e));
		}
		struct stat a, b;
		if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
			*out = fd;
			return TD_OK;
		}
		close(fd); /* replaced while we locked it: lock the new file */
	}
	return td_fail(TD_EBUSY, "%s: keeps being replaced; cannot lock it", path);
}

void td_unlock_archive(int fd)
{
	if (fd >= 0)
		close(fd);
}
