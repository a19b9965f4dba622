/* cmd_info: `tadoc info` (sizes and statistics) and `tadoc verify` (full integrity check). */
#include "cli.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "td_err.h"
#include "td_format.h"

static const char info_help[] =
	"Usage: tadoc info ARCHIVE\n"
	"\n"
	"Show the archive's format version, its size and the size of each\n"
	"section, the compression ratio (original bytes / archive bytes, every\n"
	"index included), the numbers of files, directories, symlinks, grammar\n"
	"rules and rule symbols, the grammar depth, the vocabulary (distinct\n"
	"words) and the number of word tokens. A format 5 archive also shows the\n"
	"shard size it was cut at (which 'tadoc add' and 'tadoc compact' reuse)\n"
	"and lists its shards: files, input bytes, archive bytes, ratio and image\n"
	"checksum (XXH3-64) of each (the grammar figures are summed over the shards).\n"
	"The optional indexes are named with their sizes: the postings ('tadoc\n"
	"compress --postings', for 'tadoc files') and, in format 5, the fuzzy index\n"
	"('--fuzzy-index', for 'tadoc fuzzy' over the whole archive) with its words,\n"
	"and the analytics tables (the root's top words, '--top-words', and its top\n"
	"n-grams, '--top-ngrams', read as a prefix by 'tadoc top' and 'ngrams').\n"
	"\n"
	"Options:\n"
	"  -h, --help   show this help\n";

static const char verify_help[] =
	"Usage: tadoc verify ARCHIVE\n"
	"\n"
	"Check every section checksum and every structural invariant of the\n"
	"archive (symbol ranges, rule lengths, depth bound, file sizes, tree\n"
	"shape, name order). Prints 'ARCHIVE: OK' and exits 0, or prints the\n"
	"problem on standard error and exits 1. Takes time proportional to the\n"
	"archive size.\n"
	"\n"
	"Options:\n"
	"  -h, --help   show this help\n";

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* One line of `tadoc info` for an optional format 5 section (the fuzzy index,
 * the analytics tables): LABEL padded as the other lines, then "none (format
 * 5 only)", NONE when the archive has no such section, its size and share
 * followed by WHAT when it is usable (state 1), "MADE for other shards:
 * unused" (state 0), or "damaged: " and the engine's detail (an error). */
static void stored_line(const td_archive *a, const char *label, const char *none, const char *made, uint64_t bytes,
			int state, const char *what, uint64_t archive_bytes)
{
	if (td_archive_version(a) < TD_VERSION_SHARDED)
		td_cli_outf("%-16s none (format 5 only)\n", label);
	else if (!bytes)
		td_cli_outf("%-16s %s\n", label, none);
	else if (state == 1)
		td_cli_outf("%-16s %llu bytes (%.2f%%)%s\n", label, (unsigned long long)bytes, pct(bytes, archive_bytes),
			    what);
	else if (state == 0)
		td_cli_outf("%-16s %llu bytes (%.2f%%), %s for other shards: unused\n", label, (unsigned long long)bytes,
			    pct(bytes, archive_bytes), made);
	else {
		const char *d = td_errdetail();
		td_cli_outf("%-16s %llu bytes (%.2f%%), damaged: %s\n", label, (unsigned long long)bytes,
			    pct(bytes, archive_bytes), d && *d ? d : td_strerror(state));
		td_cli_clear_detail();
	}
}

int td_cmd_info(int argc, char **argv)
{
	int first;
	int st = td_cli_simple_opts(argc, argv, info_help, &first);
	if (st >= 0)
		return st;
	if (argc - first != 1)
		return td_cli_usage(argv[0], argc - first < 1 ? "missing ARCHIVE" : "too many arguments");
	const char *archive = argv[first];
	td_archive *a = td_cli_open(archive, 0);
	if (!a)
		return TD_CLI_FAIL;
	td_info in;
	memset(&in, 0, sizeof in);
	td_archive_info(a, &in);

	td_cli_outf("archive          %s\n", archive);
	td_cli_outf("format           %u\n", td_archive_version(a));
	td_cli_outf("archive bytes    %llu\n", (unsigned long long)in.archive_bytes);
	td_cli_outf("original bytes   %llu\n", (unsigned long long)in.total_bytes);
	if (in.total_bytes == 0)
		td_cli_outf("ratio            n/a (no data)\n");
	else if (in.archive_bytes)
		td_cli_outf("ratio            %.3f\n", (double)in.total_bytes / (double)in.archive_bytes);
	else
		td_cli_outf("ratio            -\n");
	td_cli_outf("entries          %llu\n", (unsigned long long)in.nentries);
	td_cli_outf("files            %llu\n", (unsigned long long)in.nfiles);
	td_cli_outf("directories      %llu\n", (unsigned long long)in.ndirs);
	td_cli_outf("symlinks         %llu\n", (unsigned long long)in.nsymlinks);
	td_cli_outf("rules            %llu\n", (unsigned long long)in.nrules);
	td_cli_outf("rule symbols     %llu\n", (unsigned long long)in.nrulesyms);
	td_cli_outf("root symbols     %llu\n", (unsigned long long)in.nroot);
	td_cli_outf("depth            %llu\n", (unsigned long long)in.max_depth);
	td_cli_outf("vocabulary       %llu\n", (unsigned long long)in.nwords);
	td_cli_outf("other tokens     %llu\n", (unsigned long long)in.nother);
	td_cli_outf("word tokens      %llu\n", (unsigned long long)in.total_words);
	uint64_t pbytes;
	uint32_t pwith, pn;
	td_archive_postings(a, &pbytes, &pwith, &pn);
	if (!pwith)
		td_cli_outf("postings         none (tadoc compress --postings stores them)\n");
	else if (td_archive_nshards(a))
		td_cli_outf("postings         %llu bytes (%.2f%%), in %u of %u shards\n", (unsigned long long)pbytes,
			    pct(pbytes, in.archive_bytes), pwith, pn);
	else
		td_cli_outf("postings         %llu bytes (%.2f%%)\n", (unsigned long long)pbytes,
			    pct(pbytes, in.archive_bytes));
	uint64_t fzbytes, fzwords;
	int fz = td_archive_fuzzy_index(a, &fzbytes, &fzwords);
	char what[96];
	snprintf(what, sizeof what, ", %llu words", (unsigned long long)fzwords);
	stored_line(a, "fuzzy index", "none (tadoc compress --fuzzy-index stores it)", "built", fzbytes, fz, what,
		    in.archive_bytes);
	uint64_t atbytes, atw, atn;
	int at = td_archive_tables(a, &atbytes, &atw, &atn);
	snprintf(what, sizeof what, ": top %llu words, top %llu n-grams", (unsigned long long)atw,
		 (unsigned long long)atn);
	stored_line(a, "tables", "none", "made", atbytes, at, what, in.archive_bytes);
	uint64_t vtbytes, vtwords;
	int vt = td_archive_root_vector(a, &vtbytes, &vtwords);
	snprintf(what, sizeof what, ", %llu words", (unsigned long long)vtwords);
	stored_line(a, "root vector", "none (tadoc compress --root-vector stores it)", "made", vtbytes, vt, what,
		    in.archive_bytes);
	if (in.build_time) {
		time_t t = (time_t)in.build_time;
		struct tm tm;
		char date[64];
		if (gmtime_r(&t, &tm) && strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", &tm))
			td_cli_outf("built            %s\n", date);
	}
	uint32_t nsh = td_archive_nshards(a);
	if (nsh) {
		td_cli_outf("shards           %u\n", nsh);
		uint64_t ss = td_archive_shard_size(a);
		if (ss)
			td_cli_outf("shard size       %llu\n", (unsigned long long)ss);
		else
			td_cli_outf("shard size       not recorded (add and compact use %llu)\n",
				    (unsigned long long)TD_BUILD_SHARD_DEFAULT);
		for (uint32_t i = 0; i < nsh; i++) {
			td_shard_info si;
			if (td_archive_shard_info(a, i, &si))
				continue;
			td_cli_outf("  shard %-6u files %-8llu input %-12llu archive %-12llu ratio %-7.3f sum %016llx\n",
				    i, (unsigned long long)si.nfiles, (unsigned long long)si.input_bytes,
				    (unsigned long long)si.archive_bytes,
				    si.archive_bytes ? (double)si.input_bytes / (double)si.archive_bytes : 0.0,
				    (unsigned long long)si.checksum);
		}
	}
	td_cli_outf("sections (bytes, share of the archive; shards: summed)\n");
	uint64_t sum = 0;
	size_t nsec = sizeof in.section_bytes / sizeof in.section_bytes[0];
	for (unsigned id = 0; id < nsec; id++) {
		uint64_t b = in.section_bytes[id];
		if (b == 0 && (id == 0 || id >= TD_SEC_MAX))
			continue;
		const char *name = td_section_name(id);
		sum += b;
		if (name && *name)
			td_cli_outf("  %-20s %12llu %6.2f%%\n", name, (unsigned long long)b, pct(b, in.archive_bytes));
		else
			td_cli_outf("  section %-12u %12llu %6.2f%%\n", id, (unsigned long long)b,
				    pct(b, in.archive_bytes));
	}
	if (pbytes) {
		sum += pbytes;
		td_cli_outf("  %-20s %12llu %6.2f%%\n", "postings", (unsigned long long)pbytes, pct(pbytes, in.archive_bytes));
	}
	if (fzbytes) {
		sum += fzbytes;
		td_cli_outf("  %-20s %12llu %6.2f%%\n", "fuzzy-index", (unsigned long long)fzbytes,
			    pct(fzbytes, in.archive_bytes));
	}
	if (in.archive_bytes >= sum)
		td_cli_outf("  %-20s %12llu %6.2f%%\n", "header+table", (unsigned long long)(in.archive_bytes - sum),
			    pct(in.archive_bytes - sum, in.archive_bytes));
	td_archive_close(a);
	return TD_CLI_OK;
}

int td_cmd_verify(int argc, char **argv)
{
	int first;
	int st = td_cli_simple_opts(argc, argv, verify_help, &first);
	if (st >= 0)
		return st;
	if (argc - first != 1)
		return td_cli_usage(argv[0], argc - first < 1 ? "missing ARCHIVE" : "too many arguments");
	const char *archive = argv[first];
	td_archive *a = td_cli_open(archive, TD_OPEN_VERIFY);
	if (!a)
		return TD_CLI_FAIL;
	td_cli_clear_detail();
	int err = td_archive_verify(a);
	td_archive_close(a);
	if (err)
		return td_cli_error_td(archive, err);
	td_cli_outf("%s: OK\n", archive);
	return TD_CLI_OK;
}
