/* td_err: messages, errno mapping and per-thread error detail. */
#include "td_err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longer details keep their start and their end (where the problem is
 * named, after the path), with " ... " between. */
#define DETAIL_MAX 1024
#define DETAIL_HEAD 400
static _Thread_local char detail[DETAIL_MAX];

const char *td_strerror(int err)
{
	switch (err) {
	case TD_OK: return "success";
	case TD_EIO: return "input/output error";
	case TD_ENOMEM: return "out of memory";
	case TD_EINVAL: return "invalid argument";
	case TD_ENOENT: return "not found";
	case TD_EFORMAT: return "not a tadoc archive";
	case TD_EVERSION: return "unsupported archive version";
	case TD_ETRUNC: return "archive is truncated";
	case TD_ECORRUPT: return "archive is corrupt";
	case TD_ENOTDIR: return "not a directory";
	case TD_EISDIR: return "is a directory";
	case TD_ENOTWORD: return "not a single word";
	case TD_ERANGE: return "value out of range";
	case TD_ELIMIT: return "over a format limit";
	case TD_EUNSUPP: return "unsupported file type";
	case TD_ENOGPU: return "no GPU";
	case TD_EEXIST: return "already exists";
	case TD_EBUSY: return "locked by another process";
	case TD_EROFS: return "read-only";
	case TD_ENOTEMPTY: return "directory not empty";
	case TD_EPERM: return "operation not permitted";
	case TD_EFBIG: return "file too large";
	case TD_ECANCELED: return "interrupted";
	}
	return "unknown error";
}

int td_err_errno(int err)
{
	switch (err) {
	case TD_OK: return 0;
	case TD_ENOMEM: return ENOMEM;
	case TD_EINVAL: return EINVAL;
	case TD_ENOENT: return ENOENT;
	case TD_ENOTDIR: return ENOTDIR;
	case TD_EISDIR: return EISDIR;
	case TD_ENOTWORD: return EINVAL;
	case TD_ERANGE: return ERANGE;
	case TD_ELIMIT: return ENAMETOOLONG;
	case TD_EUNSUPP: return EOPNOTSUPP;
	case TD_ENOGPU: return ENODEV;
	case TD_EEXIST: return EEXIST;
	case TD_EBUSY: return EBUSY;
	case TD_EROFS: return EROFS;
	case TD_ENOTEMPTY: return ENOTEMPTY;
	case TD_EPERM: return EPERM;
	case TD_EFBIG: return EFBIG;
	case TD_ECANCELED: return EINTR;
	default: return EIO;
	}
}

const char *td_errdetail(void)
{
	return detail;
}

int td_fail(int err, const char *fmt, ...)
{
	va_list ap, ap2;
	va_start(ap, fmt);
	va_copy(ap2, ap);
	int n = vsnprintf(detail, sizeof detail, fmt, ap);
	va_end(ap);
	char *all;
	if (n >= (int)sizeof detail && (all = malloc((size_t)n + 1))) {
		vsnprintf(all, (size_t)n + 1, fmt, ap2);
		size_t tail = sizeof detail - DETAIL_HEAD - 6;
		memcpy(detail, all, DETAIL_HEAD);
		memcpy(detail + DETAIL_HEAD, " ... ", 5);
		memcpy(detail + DETAIL_HEAD + 5, all + n - tail, tail + 1);
		free(all);
	}
	va_end(ap2);
	return err;
}
