/* cmd_config: `tadoc config --print`: the effective tadocfs configuration and its sources. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td_conf.h"
#include "fs/mount/opts.h"

static const char help[] =
	"Usage: tadoc config --print [-c FILE] [-o KEY=VALUE[,KEY=VALUE...]]...\n"
	"\n"
	"Print the configuration tadocfs would use, as a valid config file, with\n"
	"a comment giving where each value came from (default, FILE:LINE or -o).\n"
	"The file read is FILE (-c, or -o config=FILE), else\n"
	"$XDG_CONFIG_HOME/tadoc/tadocfs.conf, else /etc/tadoc/tadocfs.conf.\n"
	"-o values override the file, later ones winning, as with tadocfs -o: the\n"
	"same lists ('\\,' a literal comma), whose mount options (ro, rw,\n"
	"allow_other, ...) are accepted and ignored here.\n"
	"An unknown key, a bad value or an unreadable file is reported as\n"
	"'FILE:LINE: message' and exits with status 2. What needs the hardware is\n"
	"checked by tadocfs when it starts, not here: that the gpu_devices named\n"
	"exist. A value of 0 for gpu_min_reads, gpu_min_counts or\n"
	"gpu_min_read_size means the built-in default (user.tadoc.stats on a\n"
	"mount shows the value in use).\n"
	"\n"
	"Options:\n"
	"  -p, --print          print the effective configuration\n"
	"  -c, --config FILE    read FILE instead of the default config file\n"
	"  -o KEY=VALUE,...     override keys (comma-separated)\n"
	"  -h, --help           show this help\n";

int td_cmd_config(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "print", no_argument, NULL, 'p' },
		{ "config", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int print = 0, c;
	/* The -o lists, split and checked as tadocfs splits them (opts.c). */
	td_fs_opts fo;
	memset(&fo, 0, sizeof fo);
	td_fs_opts_prog = "tadoc config";
	int status = TD_CLI_OK;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":pc:o:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			print = 1;
			break;
		case 'c':
			free(fo.config);
			if (!(fo.config = strdup(optarg))) {
				status = td_cli_errorf("config", "out of memory");
				goto out;
			}
			break;
		case 'o':
			if (td_fs_opts_list(&fo, optarg) != 0) {
				status = TD_CLI_USAGE;
				goto out;
			}
			break;
		case 'h':
			td_cli_out(help, sizeof help - 1);
			goto out;
		default:
			status = td_cli_bad_option(argv[0], c, argv);
			goto out;
		}
	}
	if (optind < argc) {
		status = td_cli_usage(argv[0], "unexpected argument '%s'", argv[optind]);
		goto out;
	}
	if (!print) {
		status = td_cli_usage(argv[0], "missing --print");
		goto out;
	}

	static td_conf conf;
	char err[1024];
	if (td_conf_load(&conf, fo.config, (const char *const *)fo.conf_keys, fo.nconf, err, sizeof err) != 0) {
		td_cli_errorf(NULL, "%s", err);
		status = TD_CLI_USAGE;
		goto out;
	}
	char *text = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&text, &len);
	int bad = !mem;
	if (mem) {
		bad = td_conf_print(&conf, mem) != 0;
		if (fclose(mem) != 0)
			bad = 1;
	}
	if (bad) {
		status = td_cli_errorf("config", "cannot format the configuration");
		free(text);
		goto out;
	}
	td_cli_out(text, len);
	free(text);
out:
	td_fs_opts_free(&fo);
	return status;
}
