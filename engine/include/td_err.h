/* td_err: the single error enum of tadoc, its messages and errno mapping. */
#ifndef TD_ERR_H
#define TD_ERR_H

#ifdef __cplusplus
extern "C" {
#endif

/* Every fallible engine function returns one of these. TD_OK is 0; errors
 * are negative so `if (err)` and `if (err < 0)` both work. */
typedef enum td_err {
	TD_OK = 0,
	TD_EIO = -1,          /* a system call failed; errno-level detail in td_errdetail() */
	TD_ENOMEM = -2,       /* allocation failed */
	TD_EINVAL = -3,       /* bad argument (malformed offset, name, request) */
	TD_ENOENT = -4,       /* no such path, file or word */
	TD_EFORMAT = -5,      /* not a tadoc archive (bad magic) */
	TD_EVERSION = -6,     /* a tadoc archive of a version this build cannot read */
	TD_ETRUNC = -7,       /* archive shorter than its header says */
	TD_ECORRUPT = -8,     /* checksum mismatch or broken invariant */
	TD_ENOTDIR = -9,      /* a directory was needed */
	TD_EISDIR = -10,      /* a regular file was needed */
	TD_ENOTWORD = -11,    /* query is not a single word (decision 2) */
	TD_ERANGE = -12,      /* value out of the representable range */
	TD_ELIMIT = -13,      /* over a format limit (name length, file count, ...) */
	TD_EUNSUPP = -14,     /* unsupported input (device node, socket, fifo) */
	TD_ENOGPU = -15,      /* no usable GPU (or built without CUDA) */
	TD_EEXIST = -16,      /* already exists */
	TD_EBUSY = -17,       /* locked by another process */
	TD_EROFS = -18,       /* read-only */
	TD_ENOTEMPTY = -19,   /* directory not empty */
	TD_EPERM = -20,       /* operation not permitted */
	TD_EFBIG = -21,       /* a file would grow past the largest size (2^62 bytes) */
	TD_ECANCELED = -22    /* stopped early: a flag the calling thread watches was set (td_cancel.h) */
} td_err;

/* Static English description of an error code; never NULL. */
const char *td_strerror(int err);

/* The errno value a filesystem should report for `err` (EIO for corruption). */
int td_err_errno(int err);

/* Detail of the last error raised on this thread, e.g.
 * "section 'rules': checksum mismatch". Empty string when none. The pointer
 * is valid until the next engine call on this thread. Thread-safe. */
const char *td_errdetail(void);

/* Set this thread's error detail (printf-style) and return `err`. Engine
 * internal, exported for gpu/ and fs/ so their messages look alike. */
int td_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
