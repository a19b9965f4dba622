/* cmd_mount: `tadoc mount`: run the tadocfs daemon that sits next to tadoc, or from PATH. */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char help[] =
	"Usage: tadoc mount ARCHIVE DIR [TADOCFS OPTIONS...]\n"
	"\n"
	"Mount ARCHIVE on the directory DIR by running the tadocfs daemon with\n"
	"the same arguments (e.g. -o ro,config=FILE, -f, -d). tadocfs is looked\n"
	"for next to the tadoc binary, then in ../sbin relative to it, then in\n"
	"PATH. See tadocfs(8) for its options; unmount with 'fusermount3 -u DIR'.\n"
	"\n"
	"Options:\n"
	"  -h, --help   show this help\n";

/* Try `dir`/`rel` (dir is the directory of our own executable). */
static void try_exec(const char *dir, const char *rel, char **args)
{
	char path[PATH_MAX];
	int n = snprintf(path, sizeof path, "%s/%s", dir, rel);
	if (n <= 0 || (size_t)n >= sizeof path || access(path, X_OK) != 0)
		return;
	execv(path, args);
}

int td_cmd_mount(int argc, char **argv)
{
	if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
		td_cli_out(help, sizeof help - 1);
		return TD_CLI_OK;
	}
	if (argc < 3)
		return td_cli_usage(argv[0], argc < 2 ? "missing ARCHIVE and DIR" : "missing DIR");

	char **args = calloc((size_t)argc + 1, sizeof *args);
	if (!args)
		return td_cli_errorf("mount", "out of memory");
	args[0] = "tadocfs";
	for (int i = 1; i < argc; i++)
		args[i] = argv[i];
	args[argc] = NULL;
	td_cli_flush();

	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n > 0) {
		self[n] = '\0';
		char *slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			try_exec(self, "tadocfs", args);
			try_exec(self, "../sbin/tadocfs", args);
		}
	}
	execvp("tadocfs", args);
	int e = errno;
	free(args);
	return td_cli_errorf("tadocfs", "cannot run: %s", strerror(e));
}
