/* cmd_compact: `tadoc compact ARCHIVE`: fold the journal of edits into a new archive. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <string.h>
#include <sys/stat.h>

#include "td_compact.h"
#include "td_err.h"
#include "td_format.h"
#include "td_gpu.h"

static const char compact_help[] =
	"Usage: tadoc compact [--format 4|5] [--full] [-j N] [--shard-size SIZE] [--memory SIZE]\n"
	"                     [--gpu auto|on|off] ARCHIVE\n"
	"\n"
	"Fold the edits recorded in ARCHIVE.journal (the changes made on a\n"
	"writable tadocfs mount) into a new archive and replace ARCHIVE with it\n"
	"atomically (temporary file, fsync, rename, directory fsync); then empty\n"
	"the journal. A crash at any point leaves either the old archive with its\n"
	"journal or the new archive: never a loss. Fails while the archive is\n"
	"mounted (writable or read-only). When the journal holds no changes,\n"
	"nothing is rewritten, unless --format asks for another format or --full\n"
	"for a repack.\n"
	"The archive keeps its format unless --format asks for another. A\n"
	"format 5 archive (shards, the default of 'tadoc compress') is compacted\n"
	"per shard: only the shards holding text of edited, deleted or moved\n"
	"files are rebuilt (on -j threads, at the shard size the archive\n"
	"records); the others are copied byte for byte. Formats 3 and 4 stay\n"
	"as they are; formats 1 and 2 become format 4.\n"
	"\n"
	"A damaged journal tail is reported, kept in ARCHIVE.journal.damaged-OFFSET,\n"
	"and dropped; every record before it is folded in. Temporary files that an\n"
	"interrupted compaction left (ARCHIVE.*.tmp.PID of a process that no\n"
	"longer runs) are removed first, and named.\n"
	"\n"
	"Options:\n"
	"      --format N        write format N: 5 (shards) or 4 (one grammar);\n"
	"                        converts the archive even when there are no edits\n"
	"      --full            rebuild every shard (repack at --shard-size: merges\n"
	"                        the small shards compactions leave); also without edits\n"
	"  -j, --jobs N          threads building shards (default: online cores)\n"
	"      --shard-size SIZE text bytes per new shard (default: the size the\n"
	"                        archive records, see 'tadoc info'; else 64M)\n"
	"      --memory SIZE     bound on the shards in flight (default: half the RAM)\n"
	"      --gpu WORD        grammar rounds and index builds on the GPU: auto\n"
	"                        (default) when one is usable, on (an error without\n"
	"                        one), off (CPU only); the archive's bytes are the\n"
	"                        same either way\n"
	"  -h, --help            show this help\n";

int td_cmd_compact(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "format", required_argument, NULL, 'F' },
		{ "full", no_argument, NULL, 'f' },
		{ "jobs", required_argument, NULL, 'j' },
		{ "shard-size", required_argument, NULL, 'S' },
		{ "memory", required_argument, NULL, 'M' },
		{ "gpu", required_argument, NULL, 'G' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	td_writer_opts wo = { 0 };
	td_compact_opts co;
	memset(&co, 0, sizeof co);
	td_build_opts bo;
	td_build_opts_init(&bo);
	bo.format = 0; /* the archive's */
	bo.shard_size = 0; /* the archive's, unless --shard-size */
	td_gpu_use gpu = TD_GPU_USE_AUTO;
	uint64_t v;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":j:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			td_cli_out(compact_help, strlen(compact_help));
			return TD_CLI_OK;
		case 'F':
			if (td_cli_parse_u64(optarg, &v) || (v != TD_VERSION && v != TD_VERSION_SHARDED))
				return td_cli_usage(argv[0], "--format '%s': expected 4 or 5", optarg);
			bo.format = (unsigned)v;
			break;
		case 'f':
			co.full = 1;
			break;
		case 'j':
		case 'S':
		case 'M':
			if (td_cli_build_opt(argv[0], c == 'j' ? 'j' : c == 'S' ? 's' : 'm', optarg, &bo))
				return TD_CLI_USAGE;
			break;
		case 'G':
			if (td_cli_gpu_opt(argv[0], optarg, &gpu))
				return TD_CLI_USAGE;
			break;
		default:
			return td_cli_bad_option(argv[0], c, argv);
		}
	}
	int first = optind;
	if (argc - first != 1)
		return td_cli_usage(argv[0], argc - first < 1 ? "missing ARCHIVE" : "too many arguments");
	td_cli_shard_size_of(argv[first], &bo);
	if (td_cli_build_check(argv[0], &bo))
		return TD_CLI_USAGE;
	bo.build_time = td_cli_source_date();
	const char *archive = argv[first];
	struct stat before, after;
	if (stat(archive, &before) != 0)
		return td_cli_error_sys(archive, errno);
	td_journal_report rep = { 0 };
	int rewritten = 0;
	if (td_cli_gpu_setup(argv[0], &wo, gpu))
		return TD_CLI_FAIL;
	bo.writer = wo;
	co.build = bo;
	td_compact_stats cs;
	int err = td_compact_path_build(archive, &co, &rep, &rewritten, &cs);
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
	td_cli_gpu_report(gpu);
	td_cli_outf("%s: folded %llu journal records in; %llu -> %llu bytes\n", archive,
		    (unsigned long long)rep.records, (unsigned long long)before.st_size,
		    (unsigned long long)after.st_size);
	if (cs.shards_before)
		td_cli_outf("%s: shards: %u kept of %u, %u built\n", archive, cs.shards_kept, cs.shards_before,
			    cs.shards_built);
	return TD_CLI_OK;
}
