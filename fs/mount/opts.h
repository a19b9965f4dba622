/* opts: the tadocfs command line, in its own and in mount.fuse3's form. */
#ifndef TD_FS_OPTS_H
#define TD_FS_OPTS_H

#include <stddef.h>

/* Exit statuses of tadocfs (documented in tadocfs(8)). */
enum td_fs_exit {
	TD_FS_EXIT_OK = 0,
	TD_FS_EXIT_FAIL = 1,      /* archive, mountpoint, /dev/fuse or mount failure */
	TD_FS_EXIT_USAGE = 2,     /* bad command line or configuration */
};

typedef struct td_fs_opts {
	const char *archive;      /* first operand */
	const char *mountpoint;   /* second operand */
	int foreground;           /* -f */
	int debug;                /* -d, -o debug (implies -f) */
	int single_thread;        /* -s */
	int help, version;        /* -h/--help, -V/--version */
	int rw;                   /* -o rw: writable mount (overlay.h) */
	int nonempty;             /* -o nonempty: allow a non-empty mountpoint */
	int noverify;             /* -o noverify: no background checksum pass after mounting */
	int verify;               /* -o verify: every checksum and invariant before mounting */
	int clone_fd;             /* -o clone_fd */
	unsigned max_threads;     /* -o max_threads=N (0: default) */
	unsigned max_read;        /* -o max_read=BYTES, largest read request (0: libfuse's 1 MiB) */
	unsigned max_background;  /* -o max_background=N (0: TD_FS_MAX_BACKGROUND) */
	int has_fsname, has_subtype;
	char *config;             /* -o config=FILE, or NULL */
	char **fuse_opts;         /* options passed on to libfuse's mount */
	size_t nfuse;
	char **conf_keys;         /* configuration keys (td_conf_key_find), in order */
	size_t nconf;
} td_fs_opts;

/* Parse argv into *o (zeroed first). Accepts
 *   tadocfs ARCHIVE MOUNTPOINT [-o OPT[,OPT...]]... [-f] [-d] [-s]
 * with options before, between or after the operands (mount.fuse3 runs
 * `tadocfs ARCHIVE DIR -o OPTS`), "-oOPTS" glued, "--" ending options, and
 * '\,' for a literal comma inside a value. fstab-only options (defaults,
 * auto, noauto, user, users, nouser, owner, group, _netdev, nofail, x-*,
 * comment=*) are ignored; an option that is neither tadocfs's, libfuse's
 * nor a configuration key is an error. Returns TD_FS_EXIT_OK, or TD_FS_EXIT_USAGE after
 * printing one "tadocfs: ..." line to stderr. */
int td_fs_opts_parse(int argc, char **argv, td_fs_opts *o);

/* Parse one -o list (what follows -o) into *o, which must be zeroed or
 * filled by earlier calls: the same splitting, escapes and checks as
 * td_fs_opts_parse. Returns TD_FS_EXIT_OK or TD_FS_EXIT_USAGE after
 * printing one "PROG: ..." line (PROG: td_fs_opts_prog). */
int td_fs_opts_list(td_fs_opts *o, const char *list);

/* The program name usage errors start with ("tadocfs"). */
extern const char *td_fs_opts_prog;

/* Free what td_fs_opts_parse allocated. */
void td_fs_opts_free(td_fs_opts *o);

/* The usage text (for -h and the man page's synopsis). */
void td_fs_opts_usage(const char *prog);

#endif
