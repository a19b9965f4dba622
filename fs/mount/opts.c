/* opts: split the command line into tadocfs, libfuse and configuration options. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opts.h"
#include "td_conf.h"

/* Flags and key= prefixes that libfuse's mount understands. */
static const char *const fuse_flags[] = {
	"allow_other", "allow_root", "auto_unmount", "default_permissions",
	"suid", "nosuid", "dev", "nodev", "exec", "noexec", "async", "sync",
	"dirsync", "atime", "noatime", NULL,
};
static const char *const fuse_keys[] = {
	"fsname=", "subtype=", "context=", "fscontext=", "defcontext=", "rootcontext=", NULL,
};
/* Options meaningful to mount(8) or fstab only, and access-time policies
 * that libfuse does not pass on (a file's atime here is its mtime, never
 * updated), so that an fstab line such as "ro,relatime" mounts. */
static const char *const ignored_flags[] = {
	"defaults", "auto", "noauto", "user", "users", "nouser", "owner", "group",
	"_netdev", "nofail", "nodiratime", "diratime", "relatime", "norelatime",
	"strictatime", "nostrictatime", "lazytime", "nolazytime", NULL,
};

static int in_list(const char *const *list, const char *s)
{
	for (size_t i = 0; list[i]; i++)
		if (strcmp(list[i], s) == 0)
			return 1;
	return 0;
}

static int has_prefix_in(const char *const *list, const char *s)
{
	for (size_t i = 0; list[i]; i++)
		if (strncmp(s, list[i], strlen(list[i])) == 0)
			return 1;
	return 0;
}

const char *td_fs_opts_prog = "tadocfs";

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "%s: ", td_fs_opts_prog);
	fprintf(stderr, fmt, arg);
	fputs(" (see tadocfs -h)\n", stderr);
	return TD_FS_EXIT_USAGE;
}

static int push(char ***v, size_t *n, const char *s)
{
	char **nv = realloc(*v, (*n + 1) * sizeof **v);
	if (!nv)
		return -1;
	*v = nv;
	if (!(nv[*n] = strdup(s)))
		return -1;
	(*n)++;
	return 0;
}

/* A decimal from 1 to max. */
static int parse_uint(const char *s, unsigned long max, unsigned *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v == 0 || v > max || s[0] == '-' || s[0] == '+')
		return -1;
	*out = (unsigned)v;
	return 0;
}

/* One option of a -o list (escapes already resolved). */
static int one_opt(td_fs_opts *o, const char *opt)
{
	if (*opt == '\0')
		return 0;
	if (in_list(ignored_flags, opt) || strncmp(opt, "x-", 2) == 0 || strncmp(opt, "comment=", 8) == 0)
		return 0;
	if (strcmp(opt, "ro") == 0) {
		o->rw = 0;
		return 0;
	}
	if (strcmp(opt, "rw") == 0) {
		o->rw = 1;
		return 0;
	}
	if (strcmp(opt, "debug") == 0) {
		o->debug = 1;
		return 0;
	}
	if (strcmp(opt, "nonempty") == 0) {
		o->nonempty = 1;
		return 0;
	}
	if (strcmp(opt, "verify") == 0) {
		o->verify = 1;
		o->noverify = 0;
		return 0;
	}
	if (strcmp(opt, "noverify") == 0) {
		o->noverify = 1;
		o->verify = 0;
		return 0;
	}
	if (strcmp(opt, "clone_fd") == 0) {
		o->clone_fd = 1;
		return 0;
	}
	if (strncmp(opt, "max_threads=", 12) == 0) {
		if (parse_uint(opt + 12, 100000, &o->max_threads))
			return usage_error("-o %s: expected a thread count from 1 to 100000", opt);
		return 0;
	}
	if (strncmp(opt, "max_background=", 15) == 0) {
		if (parse_uint(opt + 15, 65535, &o->max_background))
			return usage_error("-o %s: expected a request count from 1 to 65535", opt);
		return 0;
	}
	if (strncmp(opt, "max_read=", 9) == 0) {
		/* Also told to the kernel at INIT (op_init): libfuse ends the
		 * session when the mount option and INIT disagree. */
		if (parse_uint(opt + 9, UINT32_C(1) << 20, &o->max_read) || o->max_read % 4096)
			return usage_error("-o %s: expected a multiple of 4096 from 4096 to 1048576 bytes", opt);
		if (push(&o->fuse_opts, &o->nfuse, opt))
			return usage_error("%s: out of memory", opt);
		return 0;
	}
	if (strncmp(opt, "config=", 7) == 0) {
		if (opt[7] == '\0')
			return usage_error("-o %s: empty file name", opt);
		free(o->config);
		if (!(o->config = strdup(opt + 7)))
			return usage_error("%s: out of memory", opt);
		return 0;
	}
	if (in_list(fuse_flags, opt) || has_prefix_in(fuse_keys, opt)) {
		/* an empty value: the kernel refuses the mount ("Invalid
		 * argument") after every check passed; say so here */
		const char *eq = strchr(opt, '=');
		if (eq && eq[1] == '\0')
			return usage_error("-o %s: empty value", opt);
		if (strncmp(opt, "fsname=", 7) == 0)
			o->has_fsname = 1;
		if (strncmp(opt, "subtype=", 8) == 0)
			o->has_subtype = 1;
		if (push(&o->fuse_opts, &o->nfuse, opt))
			return usage_error("%s: out of memory", opt);
		return 0;
	}
	/* the configuration's keys, and sync=MODE, which the loader reads as
	 * journal_sync (tadocfs(8)) */
	if (td_conf_key_find(opt) >= 0 || strncmp(opt, "sync=", 5) == 0) {
		if (push(&o->conf_keys, &o->nconf, opt))
			return usage_error("%s: out of memory", opt);
		return 0;
	}
	return usage_error("-o %s: unknown option", opt);
}

/* Split an -o list at unescaped commas; '\,' and '\\' are literal. */
int td_fs_opts_list(td_fs_opts *o, const char *list)
{
	size_t n = strlen(list);
	char *buf = malloc(n + 1);
	if (!buf)
		return usage_error("%s: out of memory", list);
	size_t b = 0;
	int rc = 0;
	for (size_t i = 0; i <= n && rc == 0; i++) {
		char c = list[i];
		if (c == '\\' && i + 1 < n) {
			buf[b++] = list[++i];
		} else if (c == ',' || c == '\0') {
			buf[b] = '\0';
			rc = one_opt(o, buf);
			b = 0;
		} else {
			buf[b++] = c;
		}
	}
	free(buf);
	return rc;
}

int td_fs_opts_parse(int argc, char **argv, td_fs_opts *o)
{
	memset(o, 0, sizeof *o);
	int nopers = 0, only_operands = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int rc = 0;
		if (!only_operands && a[0] == '-' && a[1] != '\0') {
			if (strcmp(a, "--") == 0)
				only_operands = 1;
			else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
				o->help = 1;
			else if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0)
				o->version = 1;
			else if (strcmp(a, "-f") == 0)
				o->foreground = 1;
			else if (strcmp(a, "-d") == 0 || strcmp(a, "--debug") == 0)
				o->debug = 1;
			else if (strcmp(a, "-s") == 0)
				o->single_thread = 1;
			else if (strcmp(a, "-o") == 0) {
				if (i + 1 >= argc)
					return usage_error("%s: missing option list", a);
				rc = td_fs_opts_list(o, argv[++i]);
			} else if (strncmp(a, "-o", 2) == 0)
				rc = td_fs_opts_list(o, a + 2);
			else
				return usage_error("%s: unknown option", a);
			if (rc)
				return rc;
			continue;
		}
		if (nopers == 0)
			o->archive = a;
		else if (nopers == 1)
			o->mountpoint = a;
		else
			return usage_error("%s: unexpected argument (give ARCHIVE and MOUNTPOINT once)", a);
		nopers++;
	}
	if (o->help || o->version)
		return TD_FS_EXIT_OK;
	if (nopers == 0)
		return usage_error("%s", "missing ARCHIVE and MOUNTPOINT");
	if (nopers == 1)
		return usage_error("%s", "missing MOUNTPOINT");
	if (o->archive[0] == '\0')
		return usage_error("%s", "empty ARCHIVE name");
	if (o->mountpoint[0] == '\0')
		return usage_error("%s", "empty MOUNTPOINT name");
	if (o->debug)
		o->foreground = 1;
	return TD_FS_EXIT_OK;
}

void td_fs_opts_free(td_fs_opts *o)
{
	for (size_t i = 0; i < o->nfuse; i++)
		free(o->fuse_opts[i]);
	for (size_t i = 0; i < o->nconf; i++)
		free(o->conf_keys[i]);
	free(o->fuse_opts);
	free(o->conf_keys);
	free(o->config);
	memset(o, 0, sizeof *o);
}

void td_fs_opts_usage(const char *prog)
{
	printf("usage: %s ARCHIVE MOUNTPOINT [-o OPT[,OPT...]] [-f] [-d] [-s]\n"
	       "\n"
	       "Mount a tadoc archive (read-only unless -o rw): every archived file reads as itself,\n"
	       "and user.tadoc.* extended attributes give word counts and search hits.\n"
	       "\n"
	       "  -f                 stay in the foreground\n"
	       "  -d, -o debug       print every FUSE request (implies -f)\n"
	       "  -s                 single-threaded session\n"
	       "  -h, --help         this text\n"
	       "  -V, --version      version\n"
	       "  -o ro              read-only (the default)\n"
	       "  -o rw              writable: changes go to the journal ARCHIVE.journal\n"
	       "  -o sync=MODE       journal sync: none, fsync (default: on fsync), always\n"
	       "  -o nonempty        allow a non-empty mountpoint\n"
	       "  -o noverify        no background check of every checksum after mounting\n"
	       "  -o verify          check every checksum and invariant before mounting (as tadoc verify)\n"
	       "  -o max_threads=N   FUSE worker threads (default 16)\n"
	       "  -o max_read=BYTES  largest read request, 4096..1048576 (default 1048576)\n"
	       "  -o max_background=N  reads the kernel may have in flight at once (default 256)\n"
	       "  -o clone_fd        one /dev/fuse descriptor per worker thread\n"
	       "  -o config=FILE     tadocfs configuration file\n"
	       "  -o KEY=VALUE       any configuration key (see tadocfs(8))\n"
	       "  -o allow_other, default_permissions, fsname=, nosuid, ... as for FUSE\n"
	       "\n"
	       "Unmount with `fusermount3 -u MOUNTPOINT` or `umount MOUNTPOINT`.\n",
	       prog);
}
