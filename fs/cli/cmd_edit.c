/* cmd_edit: `tadoc insert` and `tadoc delete`: true insertion and deletion in a file on a writable mount. */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

/* Largest value setxattr(2) passes (XATTR_SIZE_MAX): longer text goes in
 * several inserts, each after the previous one. */
#define CHUNK 65536u

static const char insert_help[] =
	"Usage: tadoc insert FILE OFFSET [TEXT]\n"
	"\n"
	"Insert TEXT (or, without TEXT or with '-', standard input) before byte\n"
	"OFFSET of FILE, a file on a writable tadocfs mount, shifting the rest of\n"
	"the file; OFFSET may be the size (an append). The same as\n"
	"  setfattr -n user.tadoc.insert.OFFSET -v TEXT FILE\n"
	"with text of any length (sent in 64 KiB parts, each after the last).\n"
	"The change is in the mount's journal when the command returns.\n"
	"\n"
	"Options:\n"
	"  -h, --help   show this help\n";

static const char delete_help[] =
	"Usage: tadoc delete FILE OFFSET LENGTH\n"
	"\n"
	"Remove LENGTH bytes at byte OFFSET of FILE, a file on a writable tadocfs\n"
	"mount, shifting the rest of the file (a range past the end is cut at the\n"
	"end). The same as\n"
	"  setfattr -n user.tadoc.delete.OFFSET -v LENGTH FILE\n"
	"The change is in the mount's journal when the command returns.\n"
	"\n"
	"Options:\n"
	"  -h, --help   show this help\n";

/* Explain a failed setxattr on FILE. */
static int edit_error(const char *file, int e)
{
	switch (e) {
	case ENOTSUP:
		return td_cli_errorf(file, "not a file on a writable tadocfs mount");
	case EROFS:
		return td_cli_errorf(file, "the tadocfs mount is read-only (mount it with -o rw)");
	case EINVAL:
		return td_cli_errorf(file, "offset past the end of the file");
	case EISDIR:
		return td_cli_errorf(file, "is a directory");
	default:
		return td_cli_error_sys(file, e);
	}
}

static int set_edit(const char *file, const char *op, uint64_t off, const void *val, size_t len)
{
	/* Elsewhere (ext4, tmpfs) the name would simply be stored as an
	 * attribute: make sure FILE is on tadocfs, whose files all answer
	 * user.tadoc.words. */
	if (getxattr(file, "user.tadoc.words", NULL, 0) < 0) {
		int e = errno;
		if (e == ENODATA || e == ENOTSUP)
			return td_cli_errorf(file, "not a file on a tadocfs mount");
		return td_cli_error_sys(file, e);
	}
	char name[64];
	snprintf(name, sizeof name, "user.tadoc.%s.%llu", op, (unsigned long long)off);
	if (setxattr(file, name, val, len, 0) != 0)
		return edit_error(file, errno);
	return TD_CLI_OK;
}

/* Read all of standard input. NULL on failure (message printed). */
static char *read_stdin(size_t *len)
{
	size_t cap = 65536, n = 0;
	char *buf = malloc(cap);
	if (!buf) {
		td_cli_error_sys("standard input", ENOMEM);
		return NULL;
	}
	for (;;) {
		if (n == cap) {
			char *nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				td_cli_error_sys("standard input", ENOMEM);
				return NULL;
			}
			buf = nb;
			cap *= 2;
		}
		ssize_t r = read(STDIN_FILENO, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			td_cli_error_sys("standard input", errno);
			free(buf);
			return NULL;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	*len = n;
	return buf;
}

int td_cmd_insert(int argc, char **argv)
{
	int first;
	int st = td_cli_simple_opts(argc, argv, insert_help, &first);
	if (st >= 0)
		return st;
	int nargs = argc - first;
	if (nargs < 2)
		return td_cli_usage(argv[0], nargs < 1 ? "missing FILE" : "missing OFFSET");
	if (nargs > 3)
		return td_cli_usage(argv[0], "too many arguments");
	const char *file = argv[first];
	uint64_t off;
	if (td_cli_parse_u64(argv[first + 1], &off))
		return td_cli_usage(argv[0], "OFFSET '%s' is not a decimal byte offset", argv[first + 1]);
	char *owned = NULL;
	const char *text;
	size_t len;
	if (nargs == 2 || strcmp(argv[first + 2], "-") == 0) {
		if (!(owned = read_stdin(&len)))
			return TD_CLI_FAIL;
		text = owned;
	} else {
		text = argv[first + 2];
		len = strlen(text);
	}
	int rc = TD_CLI_OK;
	/* Each part goes right after the previous one: offsets are "in
	 * sequence", every edit sees the ones before it. */
	for (size_t done = 0; done < len && rc == TD_CLI_OK; done += CHUNK) {
		size_t part = len - done < CHUNK ? len - done : CHUNK;
		rc = set_edit(file, "insert", off + done, text + done, part);
	}
	free(owned);
	return rc;
}

int td_cmd_delete(int argc, char **argv)
{
	int first;
	int st = td_cli_simple_opts(argc, argv, delete_help, &first);
	if (st >= 0)
		return st;
	int nargs = argc - first;
	if (nargs != 3)
		return td_cli_usage(argv[0], nargs < 3 ? "expected FILE OFFSET LENGTH" : "too many arguments");
	const char *file = argv[first];
	uint64_t off, len;
	if (td_cli_parse_u64(argv[first + 1], &off))
		return td_cli_usage(argv[0], "OFFSET '%s' is not a decimal byte offset", argv[first + 1]);
	if (td_cli_parse_u64(argv[first + 2], &len))
		return td_cli_usage(argv[0], "LENGTH '%s' is not a decimal byte count", argv[first + 2]);
	char val[24];
	int n = snprintf(val, sizeof val, "%llu", (unsigned long long)len);
	return set_edit(file, "delete", off, val, (size_t)n);
}
