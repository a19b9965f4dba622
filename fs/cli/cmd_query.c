/* cmd_query: `tadoc count` and `tadoc search`: exact word queries over an archive. */
#include "cli.h"

#include <string.h>
#include <sys/stat.h>

#include "td_err.h"
#include "td_format.h"
#include "td_analytics.h"
#include "td_query.h"

static const char count_help[] =
	"Usage: tadoc count ARCHIVE WORD [PATH]\n"
	"\n"
	"Print the number of occurrences of WORD: in the file PATH, in every file\n"
	"below the directory PATH, or in the whole corpus without PATH. A word is\n"
	"what Python 3 re.findall(r'\\w+') finds in the UTF-8 text (letters,\n"
	"digits, underscore); matching is exact, case-sensitive and whole-word.\n"
	"Symlinks inside the archive are followed. WORD may be a phrase: words\n"
	"separated by single spaces ('of the'), matched consecutively whatever\n"
	"non-word bytes lie between them.\n"
	"\n"
	"Options:\n"
	"  -h, --help   show this help\n";

static const char search_help[] =
	"Usage: tadoc search ARCHIVE WORD [PATH]\n"
	"\n"
	"Print the byte offset of every occurrence of WORD (see 'tadoc count\n"
	"--help' for what a word is), ascending, one per line. When PATH is a\n"
	"file the lines are bare offsets; without PATH (the whole corpus) or when\n"
	"PATH is a directory, each line is 'path:offset', files depth first with\n"
	"names in byte order (a '\\' in a path is written '\\\\', a newline '\\n').\n"
	"Symlinks inside the archive are followed. WORD may be a phrase (see\n"
	"'tadoc count --help'); a hit is the offset of its first word.\n"
	"\n"
	"Options:\n"
	"  -h, --help   show this help\n";

/* Common argument handling: ARCHIVE WORD [PATH]. On success *a is open and
 * *scope resolved; otherwise returns the exit status to use. */
static int setup(int argc, char **argv, const char *help, td_archive **a, td_entry *scope, int *first_out)
{
	int first;
	int st = td_cli_simple_opts(argc, argv, help, &first);
	if (st >= 0)
		return st;
	int n = argc - first;
	if (n < 2)
		return td_cli_usage(argv[0], n < 1 ? "missing ARCHIVE and WORD" : "missing WORD");
	if (n > 3)
		return td_cli_usage(argv[0], "too many arguments");
	const char *word = argv[first + 1];
	if (!td_phrase_words(word, strlen(word)))
		return td_cli_usage(argv[0], "'%s' is not a word or a phrase (words separated by single spaces)",
				    word);
	/* one query: the tree checked where it is reached */
	*a = td_cli_open(argv[first], TD_OPEN_LAZY_TREE);
	if (!*a)
		return TD_CLI_FAIL;
	td_cli_journal_note(argv[first]);
	*scope = TD_ROOT;
	if (n == 3) {
		td_cli_clear_detail();
		int err = td_cli_resolve(*a, argv[first + 2], 1, scope);
		if (err) {
			st = td_cli_error_in(argv[first], argv[first + 2], err);
			td_archive_close(*a);
			*a = NULL;
			return st;
		}
	}
	*first_out = first;
	return -1;
}

int td_cmd_count(int argc, char **argv)
{
	td_archive *a;
	td_entry scope;
	int first = 0;
	int st = setup(argc, argv, count_help, &a, &scope, &first);
	if (st >= 0)
		return st;
	const char *word = argv[first + 1];
	uint64_t count = 0;
	td_cli_clear_detail();
	int err = td_phrase_count(a, word, strlen(word), scope, &count);
	if (err)
		st = argc - first == 3 ? td_cli_error_in(argv[first], argv[first + 2], err)
				       : td_cli_error_td(argv[first], err);
	else {
		td_cli_outf("%llu\n", (unsigned long long)count);
		st = TD_CLI_OK;
	}
	td_archive_close(a);
	return st;
}

int td_cmd_search(int argc, char **argv)
{
	td_archive *a;
	td_entry scope;
	int first = 0;
	int st = setup(argc, argv, search_help, &a, &scope, &first);
	if (st >= 0)
		return st;
	const char *word = argv[first + 1];
	td_hits hits;
	memset(&hits, 0, sizeof hits);
	td_cli_clear_detail();
	int err = td_phrase_search(a, word, strlen(word), scope, &hits);
	td_stat sst;
	if (!err)
		err = td_archive_stat(a, scope, &sst);
	if (!err) {
		int with_path = S_ISDIR(sst.mode);
		char path[TD_MAXPATH + 2], esc[2 * (TD_MAXPATH + 2)];
		int plen = 0;
		size_t elen = 0;
		td_entry last = TD_NOENTRY;
		for (size_t i = 0; i < hits.n && !err; i++) {
			if (!with_path) {
				td_cli_outf("%llu\n", (unsigned long long)hits.v[i].off);
				continue;
			}
			if (hits.v[i].file != last) {
				last = hits.v[i].file;
				plen = td_archive_path(a, last, path, sizeof path);
				if (plen < 0) {
					err = plen;
					break;
				}
				elen = td_path_escape(path, (size_t)plen, esc);
			}
			td_cli_out(esc, elen);
			td_cli_outf(":%llu\n", (unsigned long long)hits.v[i].off);
		}
	}
	td_hits_free(&hits);
	if (err)
		st = argc - first == 3 ? td_cli_error_in(argv[first], argv[first + 2], err)
				       : td_cli_error_td(argv[first], err);
	else
		st = TD_CLI_OK;
	td_archive_close(a);
	return st;
}
