/* cmd_read: `tadoc ls`, `tadoc cat` and `tadoc extract`: reading an archive to stdout. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "td_err.h"
#include "td_extract.h"
#include "td_format.h"

static const char ls_help[] =
	"Usage: tadoc ls [-l] ARCHIVE [PATH]\n"
	"\n"
	"List every path in the archive, one per line, depth first with names in\n"
	"byte order (like 'find'). Paths are relative to the archive root, which\n"
	"itself is not listed. With PATH, list PATH and, for a directory,\n"
	"everything below it.\n"
	"\n"
	"Options:\n"
	"  -l, --long   also show mode, size in bytes and modification time\n"
	"               (local time, nanoseconds); symlinks show '-> TARGET'\n"
	"  -h, --help   show this help\n";

static const char cat_help[] =
	"Usage: tadoc cat ARCHIVE PATH...\n"
	"\n"
	"Write the archived files to standard output, one after another.\n"
	"Symlinks inside the archive are followed; a directory is an error.\n"
	"\n"
	"Options:\n"
	"  -h, --help   show this help\n";

static const char extract_help[] =
	"Usage: tadoc extract ARCHIVE PATH OFFSET LENGTH\n"
	"\n"
	"Write LENGTH bytes of the archived file PATH, starting at byte OFFSET,\n"
	"to standard output, raw. OFFSET and LENGTH are decimal numbers. Fewer\n"
	"bytes are written when the file ends first; none when OFFSET is at or\n"
	"past the end. Symlinks inside the archive are followed.\n"
	"\n"
	"Options:\n"
	"  -h, --help   show this help\n";

/* --- streaming --- */

/* Write bytes [off, off+len) of entry e (clamped to its size) to stdout. */
static int stream(td_cursor *cur, td_entry e, uint64_t size, uint64_t off, uint64_t len, char *buf)
{
	if (off >= size)
		return TD_OK;
	uint64_t end = size - off < len ? size : off + len;
	while (off < end) {
		size_t want = end - off < TD_CLI_CHUNK ? (size_t)(end - off) : TD_CLI_CHUNK;
		size_t got = 0;
		/* a short piece straight into the output buffer, a long one
		 * through buf (td_cli_out writes that without a copy) */
		char *room = td_cli_out_room(want);
		int err = td_cursor_read(cur, e, off, room ? room : buf, want, &got);
		if (err)
			return err;
		if (got == 0)
			return td_fail(TD_ECORRUPT, "file text ends at byte %llu, before its size %llu",
				       (unsigned long long)off, (unsigned long long)size);
		if (room)
			td_cli_out_commit(got);
		else
			td_cli_out(buf, got);
		off += got;
	}
	return TD_OK;
}

/* Stream [off, off+len) of entry e (PATH, resolved: a non-directory of
 * size `size`). Prints its own message; returns the exit status. */
static int cat_entry(const td_archive *a, const char *archive, const char *path, td_entry e, uint64_t size,
		     td_cursor *cur, char *buf, uint64_t off, uint64_t len)
{
	td_cli_clear_detail();
	if (off < size) /* a long extract gets the rule cache filled first; damage is the read's to report */
		(void)td_archive_will_read(a, size - off < len ? size - off : len);
	int err = stream(cur, e, size, off, len, buf);
	if (err)
		return td_cli_error_in(archive, path, err);
	return TD_CLI_OK;
}

/* PATH resolved (following symlinks) to a regular file: TD_OK with *e and
 * *st, or the error (TD_EISDIR for a directory). */
static int resolve_file(const td_archive *a, const char *path, td_entry *e, td_stat *st)
{
	int err = td_cli_resolve(a, path, 1, e);
	if (!err)
		err = td_archive_stat(a, *e, st);
	if (!err && S_ISDIR(st->mode))
		err = TD_EISDIR;
	return err;
}

/* Resolve PATH, require a non-directory and stream [off, off+len) of it.
 * Prints its own message; returns the exit status. */
static int cat_one(const td_archive *a, const char *archive, const char *path, td_cursor *cur, char *buf,
		   uint64_t off, uint64_t len)
{
	td_entry e;
	td_stat st;
	td_cli_clear_detail();
	int err = resolve_file(a, path, &e, &st);
	if (err)
		return td_cli_error_in(archive, path, err);
	return cat_entry(a, archive, path, e, st.size, cur, buf, off, len);
}

int td_cmd_cat(int argc, char **argv)
{
	int first;
	int st = td_cli_simple_opts(argc, argv, cat_help, &first);
	if (st >= 0)
		return st;
	if (argc - first < 1)
		return td_cli_usage(argv[0], "missing ARCHIVE");
	if (argc - first < 2)
		return td_cli_usage(argv[0], "missing PATH");
	const char *archive = argv[first];
	td_archive *a = td_cli_open(archive, 0);
	if (!a)
		return TD_CLI_FAIL;
	td_cli_journal_note(archive);
	td_cursor *cur = td_cursor_new(a);
	char *buf = malloc(TD_CLI_CHUNK);
	const int n = argc - first - 1;
	td_entry *ents = malloc((size_t)n * sizeof *ents);
	uint64_t *sizes = malloc((size_t)n * sizeof *sizes);
	int status = TD_CLI_OK;
	if (!cur || !buf || !ents || !sizes) {
		status = td_cli_errorf(archive, "out of memory");
	} else {
		/* Every path resolved once, and one hint for all the bytes to
		 * come (td_archive_will_read): a long read gets the rule cache
		 * filled first. A path that does not resolve (UINT64_MAX
		 * below) is resolved again where its turn comes, to report
		 * it; damage is reported by the reads (an undamaged file
		 * still reads). */
		uint64_t total = 0;
		for (int i = 0; i < n; i++) {
			td_stat st;
			sizes[i] = UINT64_MAX;
			if (resolve_file(a, argv[first + 1 + i], &ents[i], &st) == TD_OK) {
				sizes[i] = st.size;
				total += st.size;
			}
		}
		(void)td_archive_will_read(a, total);
		for (int i = 0; i < n; i++) {
			const char *path = argv[first + 1 + i];
			int r = sizes[i] == UINT64_MAX
					? cat_one(a, archive, path, cur, buf, 0, UINT64_MAX)
					: cat_entry(a, archive, path, ents[i], sizes[i], cur, buf, 0, UINT64_MAX);
			if (r != TD_CLI_OK)
				status = TD_CLI_FAIL;
		}
	}
	free(sizes);
	free(ents);
	free(buf);
	td_cursor_free(cur);
	td_archive_close(a);
	return status;
}

int td_cmd_extract(int argc, char **argv)
{
	int first;
	int st = td_cli_simple_opts(argc, argv, extract_help, &first);
	if (st >= 0)
		return st;
	if (argc - first != 4)
		return td_cli_usage(argv[0], argc - first < 4 ? "expected ARCHIVE PATH OFFSET LENGTH"
								: "too many arguments");
	uint64_t off, len;
	if (td_cli_parse_u64(argv[first + 2], &off))
		return td_cli_usage(argv[0], "OFFSET '%s' is not a decimal number below 2^64", argv[first + 2]);
	if (td_cli_parse_u64(argv[first + 3], &len))
		return td_cli_usage(argv[0], "LENGTH '%s' is not a decimal number below 2^64", argv[first + 3]);
	const char *archive = argv[first];
	td_archive *a = td_cli_open(archive, 0);
	if (!a)
		return TD_CLI_FAIL;
	td_cli_journal_note(archive);
	td_cursor *cur = td_cursor_new(a);
	char *buf = malloc(TD_CLI_CHUNK);
	int status;
	if (!cur || !buf)
		status = td_cli_errorf(archive, "out of memory");
	else
		status = cat_one(a, archive, argv[first + 1], cur, buf, off, len);
	free(buf);
	td_cursor_free(cur);
	td_archive_close(a);
	return status;
}

/* --- ls --- */

static void mode_string(mode_t m, char s[11])
{
	s[0] = S_ISDIR(m) ? 'd' : S_ISLNK(m) ? 'l' : S_ISREG(m) ? '-' : '?';
	const char *rwx = "rwxrwxrwx";
	for (int i = 0; i < 9; i++)
		s[1 + i] = (m & (0400u >> i)) ? rwx[i] : '-';
	if (m & S_ISUID)
		s[3] = (m & S_IXUSR) ? 's' : 'S';
	if (m & S_ISGID)
		s[6] = (m & S_IXGRP) ? 's' : 'S';
	if (m & S_ISVTX)
		s[9] = (m & S_IXOTH) ? 't' : 'T';
	s[10] = '\0';
}

static int print_entry(const td_archive *a, td_entry e, const char *path, size_t plen, int lng)
{
	if (!lng) {
		td_cli_out(path, plen);
		td_cli_out("\n", 1);
		return TD_OK;
	}
	td_stat st;
	int err = td_archive_stat(a, e, &st);
	if (err)
		return err;
	char ms[11], tbuf[64] = "?";
	mode_string(st.mode, ms);
	time_t t = (time_t)st.mtime_sec;
	struct tm tm;
	if (localtime_r(&t, &tm)) {
		char date[40], zone[8];
		strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S", &tm);
		strftime(zone, sizeof zone, "%z", &tm);
		snprintf(tbuf, sizeof tbuf, "%s.%09u %s", date, st.mtime_nsec, zone);
	}
	td_cli_outf("%s %12llu %s ", ms, (unsigned long long)st.size, tbuf);
	td_cli_out(path, plen);
	if (S_ISLNK(st.mode)) {
		char target[TD_MAXPATH + 1];
		size_t got = 0;
		size_t want = st.size < TD_MAXPATH ? (size_t)st.size : TD_MAXPATH;
		err = td_extract(a, e, 0, target, want, &got);
		if (err)
			return err;
		td_cli_out(" -> ", 4);
		td_cli_out(target, got);
	}
	td_cli_out("\n", 1);
	return TD_OK;
}

struct level {
	td_entry next, end;
	size_t plen; /* path length of the directory this level lists */
};

/* Push the children of directory `dir`, whose path has length plen. */
static int push_level(const td_archive *a, td_entry dir, size_t plen, struct level **stack, size_t *depth,
		      size_t *cap)
{
	td_entry first;
	uint32_t count;
	int err = td_archive_children(a, dir, &first, &count);
	if (err)
		return err;
	if (*depth == *cap) {
		size_t ncap = *cap ? *cap * 2 : 16;
		struct level *ns = realloc(*stack, ncap * sizeof *ns);
		if (!ns)
			return TD_ENOMEM;
		*stack = ns;
		*cap = ncap;
	}
	(*stack)[*depth] = (struct level){ first, first + count, plen };
	(*depth)++;
	return TD_OK;
}

/* List the subtree below directory `dir` whose path is path[0..plen),
 * depth first (path has room for TD_MAXPATH + 1 bytes). */
static int list_below(const td_archive *a, td_entry dir, char *path, size_t plen, int lng)
{
	struct level *stack = NULL;
	size_t depth = 0, cap = 0;
	int err = push_level(a, dir, plen, &stack, &depth, &cap);
	while (!err && depth > 0) {
		struct level *l = &stack[depth - 1];
		if (l->next == l->end) {
			depth--;
			continue;
		}
		td_entry e = l->next++;
		size_t nlen;
		const char *name = td_archive_name(a, e, &nlen);
		if (!name) {
			err = td_fail(TD_ECORRUPT, "entry %u has no name", e);
			break;
		}
		size_t at = l->plen ? l->plen + 1 : 0;
		if (at + nlen > TD_MAXPATH) {
			err = td_fail(TD_ECORRUPT, "path of entry %u is longer than %u bytes", e, TD_MAXPATH);
			break;
		}
		if (l->plen)
			path[l->plen] = '/';
		memcpy(path + at, name, nlen);
		path[at + nlen] = '\0';
		if ((err = print_entry(a, e, path, at + nlen, lng)))
			break;
		td_stat st;
		if ((err = td_archive_stat(a, e, &st)))
			break;
		if (S_ISDIR(st.mode))
			err = push_level(a, e, at + nlen, &stack, &depth, &cap);
	}
	free(stack);
	return err;
}

int td_cmd_ls(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "long", no_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int lng = 0, c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":lh", longopts, NULL)) != -1) {
		switch (c) {
		case 'l':
			lng = 1;
			break;
		case 'h':
			td_cli_out(ls_help, sizeof ls_help - 1);
			return TD_CLI_OK;
		default:
			return td_cli_bad_option(argv[0], c, argv);
		}
	}
	int n = argc - optind;
	if (n < 1)
		return td_cli_usage(argv[0], "missing ARCHIVE");
	if (n > 2)
		return td_cli_usage(argv[0], "too many arguments");
	const char *archive = argv[optind];
	const char *want = n == 2 ? argv[optind + 1] : "";
	td_archive *a = td_cli_open(archive, 0);
	if (!a)
		return TD_CLI_FAIL;
	td_cli_journal_note(archive);

	char path[TD_MAXPATH + 2];
	td_entry e;
	td_stat st;
	td_cli_clear_detail();
	int err = td_cli_resolve(a, want, 0, &e);
	if (!err)
		err = td_archive_stat(a, e, &st);
	int plen = 0;
	if (!err && e != TD_ROOT) {
		plen = td_archive_path(a, e, path, sizeof path);
		if (plen < 0)
			err = plen;
		else
			err = print_entry(a, e, path, (size_t)plen, lng);
	}
	if (!err && S_ISDIR(st.mode))
		err = list_below(a, e, path, e == TD_ROOT ? 0 : (size_t)plen, lng);
	int status = TD_CLI_OK;
	if (err)
		status = n == 2 ? td_cli_error_in(archive, want, err) : td_cli_error_td(archive, err);
	td_archive_close(a);
	return status;
}
