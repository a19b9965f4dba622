/* cmd_compact: `tadoc compact ARCHIVE`: fold the journal of edits into a new archive. */
#include "cli.h"

#include <errno.h>
#include <sys/stat.h>

#include "td_compact.h"
#include "td_err.h"
#include "td_gpu.h"

static const char compact_help[] =
	"Usage: tadoc compact ARCHIVE\n"
	"\n"
	"Fold the edits recorded in ARCHIVE.journal (the changes made on a\n"
	"writable tadocfs mount) into a new archive and replace ARCHIVE with it\n"
	"atomically (temporary file, fsync, rename, directory fsync); then empty\n"
	"the journal. A crash at any point leaves either the old archive with its\n"
	"journal or the new archive: never a loss. Fails while the archive is\n"
	"mounted (writable or read-only). When the journal holds no changes,\n"
	"nothing is rewritten.\n"
	"\n"
	"A damaged journal tail is reported, kept in ARCHIVE.journal.damaged-OFFSET,\n"
	"and dropped; every record before it is folded in. Temporary files that an\n"
	"interrupted compaction left (ARCHIVE.*.tmp.PID of a process that no\n"
	"longer runs) are removed first, and named.\n"
	"\n"
	"Options:\n"
	"  -h, --help   show this help\n";

int td_cmd_compact(int argc, char **argv)
{
	int first;
	int st = td_cli_simple_opts(argc, argv, compact_help, &first);
	if (st >= 0)
		return st;
	if (argc - first != 1)
		return td_cli_usage(argv[0], argc - first < 1 ? "missing ARCHIVE" : "too many arguments");
	const char *archive = argv[first];
	struct stat before, after;
	if (stat(archive, &before) != 0)
		return td_cli_error_sys(archive, errno);
	td_journal_report rep = { 0 };
	int rewritten = 0;
	td_writer_opts wo = { 0 };
	td_gpu_writer_opts(&wo); /* indexes built on the GPU when there is one */
	int err = td_compact_path(archive, &wo, &rep, &rewritten);
	if (rep.swept_msg[0])
		td_cli_errorf(archive, "%s", rep.swept_msg);
	if (rep.msg[0])
		td_cli_errorf(archive, "%s", rep.msg);
	if (err)
		return td_cli_error_td(archive, err);
	if (!rewritten) {
		td_cli_outf("%s: nothing to compact\n", archive);
		return TD_CLI_OK;
	}
	if (stat(archive, &after) != 0)
		return td_cli_error_sys(archive, errno);
	td_cli_outf("%s: folded %llu journal records in; %llu -> %llu bytes\n", archive,
		    (unsigned long long)rep.records, (unsigned long long)before.st_size,
		    (unsigned long long)after.st_size);
	return TD_CLI_OK;
}
