/* main: entry point of the tadoc command-line tool; dispatches to the commands. */
#include "cli.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "td_format.h"

#ifndef TADOC_VERSION
#define TADOC_VERSION "unknown"
#endif

struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
	int query; /* a one-shot query: td_cli_heap_huge first */
};

static const struct command commands[] = {
	{ "compress", td_cmd_compress, "compress files and directories into an archive", 0 },
	{ "ls", td_cmd_ls, "list the paths in an archive", 0 },
	{ "cat", td_cmd_cat, "write archived files to standard output", 0 },
	{ "extract", td_cmd_extract, "write a byte range of an archived file to standard output", 0 },
	{ "unpack", td_cmd_unpack, "restore the archived tree into a directory", 0 },
	{ "count", td_cmd_count, "count the occurrences of a word or phrase", 1 },
	{ "search", td_cmd_search, "list the byte offsets of a word or phrase", 1 },
	{ "top", td_cmd_top, "the most frequent words of a file, directory or corpus", 1 },
	{ "vector", td_cmd_vector, "every word of a scope with its count (term vector)", 1 },
	{ "files", td_cmd_files, "the files holding a word or phrase, most first", 1 },
	{ "ngrams", td_cmd_ngrams, "the most frequent runs of consecutive words", 1 },
	{ "fuzzy", td_cmd_fuzzy, "the words within an edit distance of a word", 1 },
	{ "info", td_cmd_info, "show section sizes, ratio and grammar statistics", 0 },
	{ "verify", td_cmd_verify, "check every checksum and invariant of an archive", 0 },
	{ "mount", td_cmd_mount, "mount an archive with tadocfs", 0 },
	{ "config", td_cmd_config, "show the effective tadocfs configuration", 0 },
	{ "insert", td_cmd_insert, "insert text into a file on a writable mount", 0 },
	{ "delete", td_cmd_delete, "delete a byte range of a file on a writable mount", 0 },
	{ "compact", td_cmd_compact, "fold the journal of edits into the archive", 0 },
	{ "add", td_cmd_add, "add files to a format 5 archive as new shards", 0 },
};

static void print_help(void)
{
	td_cli_outf("Usage: tadoc COMMAND [OPTIONS] [ARGS...]\n"
		    "       tadoc --help | --version\n"
		    "\n"
		    "Compress a corpus of text files into one TADOC archive and read any\n"
		    "part of it back without decompressing the archive.\n"
		    "\n"
		    "Commands:\n");
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		td_cli_outf("  %-9s %s\n", commands[i].name, commands[i].summary);
	td_cli_outf("\n"
		    "Run 'tadoc COMMAND --help' for the arguments of a command.\n"
		    "\n"
		    "Exit status: 0 success; 1 runtime failure (I/O error, corrupt archive,\n"
		    "path not found); 2 usage error (bad arguments or configuration).\n");
}

int td_cli_simple_opts(int argc, char **argv, const char *help, int *first)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			td_cli_out(help, strlen(help));
			return TD_CLI_OK;
		default:
			return td_cli_bad_option(argv[0], c, argv);
		}
	}
	*first = optind;
	return -1;
}

int td_cli_bad_option(const char *cmd, int c, char **argv)
{
	if (c == ':')
		return td_cli_usage(cmd, "option '%s' needs an argument", argv[optind - 1]);
	if (optopt)
		return td_cli_usage(cmd, "unknown option '-%c'", optopt);
	return td_cli_usage(cmd, "unknown option '%s'", argv[optind - 1]);
}

int main(int argc, char **argv)
{
	/* A closed pipe shows up as EPIPE on write, handled in td_cli_out. */
	signal(SIGPIPE, SIG_IGN);

	if (argc < 2)
		return td_cli_finish(td_cli_usage(NULL, "missing command"));
	const char *cmd = argv[1];
	if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
		if (strcmp(cmd, "help") == 0 && argc > 2 && strcmp(argv[2], "--help") && strcmp(argv[2], "-h")) {
			/* "tadoc help CMD" is "tadoc CMD --help". */
			char *sub[] = { argv[2], "--help", NULL };
			for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
				if (strcmp(argv[2], commands[i].name) == 0)
					return td_cli_finish(commands[i].run(2, sub));
			return td_cli_finish(td_cli_usage(NULL, "unknown command '%s'", argv[2]));
		}
		print_help();
		return td_cli_finish(TD_CLI_OK);
	}
	if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
		td_cli_outf("tadoc %s (writes archive format %u, reads formats 1 to %u)\n", TADOC_VERSION,
			    TD_VERSION_SHARDED, TD_VERSION_SHARDED);
		return td_cli_finish(TD_CLI_OK);
	}
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (strcmp(cmd, commands[i].name) == 0) {
			if (commands[i].query)
				td_cli_heap_huge();
			return td_cli_finish(commands[i].run(argc - 1, argv + 1));
		}
	if (cmd[0] == '-')
		return td_cli_finish(td_cli_usage(NULL, "unknown option '%s'", cmd));
	return td_cli_finish(td_cli_usage(NULL, "unknown command '%s'", cmd));
}
