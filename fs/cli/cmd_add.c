/* cmd_add: `tadoc add ARCHIVE INPUT... [--to DIR]`: new shards appended to a format 5 archive. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "td_build.h"
#include "td_conf.h"
#include "td_edit.h"
#include "td_err.h"
#include "td_format.h"
#include "td_gpu.h"
#include "td_journal.h"
#include "td_lock.h"

static const char add_help[] =
	"Usage: tadoc add [--to DIR] [-j N] [--shard-size SIZE] [--memory SIZE]\n"
	"                 [--gpu auto|on|off] ARCHIVE INPUT...\n"
	"\n"
	"Add files and directories to a format 5 archive as new shards, without\n"
	"rebuilding it: the existing shards are kept byte for byte. Each INPUT\n"
	"appears at the top level under its base name, or below DIR inside the\n"
	"archive with --to (missing directories are created). A path that is\n"
	"already in the archive is an error naming it. ARCHIVE is replaced\n"
	"atomically (temporary file, fsync, rename, directory fsync): a crash\n"
	"leaves the old archive or the new one. Refused while the archive is\n"
	"mounted or compacted, and while ARCHIVE.journal holds edits not yet\n"
	"folded in (run 'tadoc compact' first). A format 4 archive must first be\n"
	"converted: 'tadoc compact --format 5 ARCHIVE' (or compress it again).\n"
	"Options may come before or after ARCHIVE and the inputs; after '--'\n"
	"every argument is an input (one whose name starts with '-').\n"
	"\n"
	"Options:\n"
	"      --to DIR          directory inside the archive to add below\n"
	"  -j, --jobs N          threads building shards (default: online cores)\n"
	"      --shard-size SIZE text bytes per new shard (default: the size the\n"
	"                        archive records, see 'tadoc info'; else 64M)\n"
	"      --memory SIZE     bound on the shards in flight (default: half the RAM)\n"
	"      --gpu auto|on|off grammar rounds and index builds on the GPU: auto\n"
	"                        (default) when one is usable, on (an error without\n"
	"                        one), off (CPU only); the archive's bytes are the\n"
	"                        same either way\n"
	"  -h, --help            show this help\n";

int td_cmd_add(int argc, char **argv)
{
	enum { OPT_TO = 256, OPT_SHARD, OPT_MEMORY, OPT_GPU };
	static const struct option longopts[] = {
		{ "to", required_argument, NULL, OPT_TO },
		{ "jobs", required_argument, NULL, 'j' },
		{ "shard-size", required_argument, NULL, OPT_SHARD },
		{ "memory", required_argument, NULL, OPT_MEMORY },
		{ "gpu", required_argument, NULL, OPT_GPU },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	td_build_opts bo;
	td_build_opts_init(&bo);
	bo.shard_size = 0; /* the archive's, unless --shard-size */
	td_writer_opts wo;
	memset(&wo, 0, sizeof wo);
	td_gpu_use gpu = TD_GPU_USE_AUTO;
	wo.progress = NULL;
	const char *to = NULL;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":j:h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_TO:
			to = optarg;
			break;
		case OPT_GPU:
			if (td_cli_gpu_opt(argv[0], optarg, &gpu))
				return TD_CLI_USAGE;
			break;
		case 'j':
		case OPT_SHARD:
		case OPT_MEMORY:
			if (td_cli_build_opt(argv[0], c == 'j' ? 'j' : c == OPT_SHARD ? 's' : 'm', optarg, &bo))
				return TD_CLI_USAGE;
			break;
		case 'h':
			td_cli_out(add_help, strlen(add_help));
			return TD_CLI_OK;
		default:
			return td_cli_bad_option(argv[0], c, argv);
		}
	}
	if (argc - optind < 2)
		return td_cli_usage(argv[0], argc - optind < 1 ? "missing ARCHIVE" : "no input files or directories");
	td_cli_shard_size_of(argv[optind], &bo);
	if (td_cli_build_check(argv[0], &bo))
		return TD_CLI_USAGE;
	bo.build_time = td_cli_source_date();
	if (td_cli_gpu_setup(argv[0], &wo, gpu))
		return TD_CLI_FAIL;
	const char *archive = argv[optind];
	const char *const *inputs = (const char *const *)(argv + optind + 1);
	size_t ninputs = (size_t)(argc - optind - 1);

	int lock = -1;
	struct stat ast;
	if (stat(archive, &ast) != 0) /* before its lock file: "No such file or directory" */
		return td_cli_error_sys(archive, errno);
	td_cli_clear_detail();
	/* wait as compaction does: a mount's daemon holds its lock a few ms
	 * after `fusermount3 -u` returns (td_lock.h) */
	int err = td_lock_archive(archive, 1, TD_LOCK_WAIT_MS, &lock);
	if (err == TD_EBUSY)
		return td_cli_errorf(archive, "in use (mounted or being compacted): unmount it first");
	if (err)
		return td_cli_error_td(archive, err);
	td_archive *a = td_cli_open(archive, 0);
	if (!a) {
		td_unlock_archive(lock);
		return TD_CLI_FAIL;
	}
	int status = TD_CLI_OK;
	if (td_archive_version(a) != TD_VERSION_SHARDED) {
		status = td_cli_errorf(archive,
				       "format %u: tadoc add needs format 5 (shards); convert it with 'tadoc compact --format 5 %s' "
				       "or compress it again",
				       td_archive_version(a), archive);
		goto out;
	}
	int pe = td_cli_pending_edits(archive, a);
	if (pe) {
		status = TD_CLI_FAIL;
		goto out;
	}
	struct stat before, after;
	if (stat(archive, &before) != 0) {
		status = td_cli_error_sys(archive, errno);
		goto out;
	}
	char *dir = strdup(archive);
	if (!dir) {
		status = td_cli_error_td(archive, TD_ENOMEM);
		goto out;
	}
	char *slash = strrchr(dir, '/');
	bo.tmp_dir = slash ? (slash == dir ? "/" : (*slash = 0, dir)) : ".";
	bo.tmp_target = archive;
	bo.writer = wo;
	bo.base = a;
	uint32_t old_shards = td_archive_nshards(a);
	td_build *b = NULL;
	td_cli_clear_detail();
	err = td_build_new(&bo, &b);
	if (!err)
		err = td_build_add_paths(b, inputs, ninputs, to, archive);
	if (!err) {
		err = td_build_finish(b, archive);
		b = NULL;
	}
	td_build_abort(b);
	free(dir);
	if (err) {
		const char *d = td_errdetail();
		if (d && d[0] && d[0] != '\'') {
			td_cli_errorf(NULL, "%s", d); /* names the input */
			td_cli_clear_detail();
			status = td_cli_status(err);
		} else {
			status = td_cli_error_td(archive, err);
		}
		goto out;
	}
	td_cli_gpu_report(gpu);
	td_archive *n = td_cli_open(archive, 0);
	if (n && stat(archive, &after) == 0)
		td_cli_outf("%s: %u new shards (%u in all); %llu -> %llu bytes\n", archive,
			    td_archive_nshards(n) - old_shards, td_archive_nshards(n), (unsigned long long)before.st_size,
			    (unsigned long long)after.st_size);
	td_archive_close(n);
out:
	td_archive_close(a);
	td_unlock_archive(lock);
	return status;
}
