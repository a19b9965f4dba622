/* cli_path: open archives and resolve paths inside them, following in-archive symlinks. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "td_edit.h"
#include "td_err.h"
#include "td_extract.h"
#include "td_format.h"
#include "td_journal.h"

#define MAX_LINK_HOPS 40

td_archive *td_cli_open(const char *path, unsigned flags)
{
	td_archive *a = NULL;
	td_cli_clear_detail();
	int err = td_archive_open(path, flags, &a);
	if (err) {
		td_cli_error_td(path, err);
		return NULL;
	}
	return a;
}

/* Does the journal beside `archive` (ARCHIVE.journal) hold edits under
 * which `path` exists? 0 when it does not, or when anything fails. */
static int in_journal(const char *archive, const char *path, char *jpath, size_t cap)
{
	struct stat st;
	if ((size_t)snprintf(jpath, cap, "%s.journal", archive) >= cap || stat(jpath, &st) != 0 || st.st_size == 0)
		return 0;
	td_archive *a = NULL;
	td_edit *ed = NULL;
	td_journal *j = NULL;
	td_journal_report rep = { 0 };
	td_node n;
	int found = td_archive_open(archive, 0, &a) == TD_OK && td_edit_new(a, &ed) == TD_OK &&
		    td_journal_open(archive, ed, TD_JOURNAL_READONLY, &j, &rep) == TD_OK &&
		    td_edit_lookup_path(ed, path, &n) == TD_OK;
	td_journal_close(j);
	td_edit_free(ed);
	td_archive_close(a);
	return found;
}

void td_cli_journal_note(const char *archive)
{
	if (!td_journal_pending(archive))
		return;
	char *line = NULL;
	if (asprintf(&line,
		     "tadoc: note: %s.journal holds edits not yet compacted; this answer is %s as built, without them "
		     "(a writable mount shows them; `tadoc compact %s` folds them in)\n",
		     archive, archive, archive) < 0)
		line = NULL;
	td_cli_note_at_exit(line);
}

int td_cli_pending_edits(const char *archive, const td_archive *a)
{
	size_t n = strlen(archive);
	char *jp = malloc(n + sizeof ".journal");
	if (!jp)
		return td_cli_error_td(archive, TD_ENOMEM), -1;
	memcpy(jp, archive, n);
	memcpy(jp + n, ".journal", sizeof ".journal");
	int r = 0;
	if (access(jp, F_OK) == 0) {
		td_edit *ed = NULL;
		td_journal *j = NULL;
		td_journal_report rep = { 0 };
		int err = td_edit_new(a, &ed);
		if (!err)
			err = td_journal_open(archive, ed, TD_JOURNAL_READONLY, &j, &rep);
		if (err) {
			td_cli_error_td(jp, err);
			r = -1;
		} else if (rep.records || td_edit_changed(ed)) {
			td_cli_errorf(archive, "edits in %s are not folded in yet: run 'tadoc compact %s' first", jp,
				      archive);
			r = 1;
		} else if (unlink(jp) != 0) {
			td_cli_error_sys(jp, errno);
			r = -1;
		}
		td_journal_close(j);
		td_edit_free(ed);
	}
	free(jp);
	return r;
}

int td_cli_error_in(const char *archive, const char *path, int err)
{
	if (err == TD_ENOENT) {
		char saved[1100], jpath[TD_MAXPATH + 16];
		const char *d = td_errdetail();
		snprintf(saved, sizeof saved, "%s", d ? d : "");
		if (in_journal(archive, path, jpath, sizeof jpath)) {
			td_cli_clear_detail();
			td_cli_errorf(archive, "%s: not in the archive; it is in the uncompacted edits in %s "
				      "(run `tadoc compact %s` to fold them in)", path, jpath, archive);
			return td_cli_status(err);
		}
		td_fail(err, "%s", saved);
	}
	size_t n = strlen(archive) + strlen(path) + 3;
	char *subject = malloc(n);
	if (!subject)
		return td_cli_error_td(archive, err);
	snprintf(subject, n, "%s: %s", archive, path);
	int st = td_cli_error_td(subject, err);
	free(subject);
	return st;
}

/* Read the target of symlink e into a fresh NUL-terminated string. */
static int link_target(const td_archive *a, td_entry e, uint64_t size, char **out)
{
	if (size > TD_MAXPATH)
		return td_fail(TD_ECORRUPT, "symlink target longer than %u bytes", TD_MAXPATH);
	char *t = malloc((size_t)size + 1);
	if (!t)
		return TD_ENOMEM;
	size_t got = 0;
	int err = td_extract(a, e, 0, t, (size_t)size, &got);
	if (err) {
		free(t);
		return err;
	}
	if (got != size || memchr(t, '\0', got)) {
		free(t);
		return td_fail(TD_ECORRUPT, "bad symlink target");
	}
	t[got] = '\0';
	*out = t;
	return TD_OK;
}

int td_cli_resolve(const td_archive *a, const char *path, int follow_last, td_entry *out)
{
	/* `todo` holds what is left to walk; a symlink replaces its own component
	 * with its target, resolved from the directory that holds the link. */
	char *todo = strdup(path);
	if (!todo)
		return TD_ENOMEM;
	size_t pos = 0;
	td_entry cur = TD_ROOT;
	int hops = 0;
	int err = TD_OK;

	for (;;) {
		while (todo[pos] == '/')
			pos++;
		if (todo[pos] == '\0')
			break;
		size_t len = strcspn(todo + pos, "/");
		const char *name = todo + pos;
		size_t next = pos + len;
		/* A trailing slash makes a component a directory to walk into
		 * (as in POSIX path resolution), so a link there is followed. */
		int last = todo[next] == '\0';
		if (len == 1 && name[0] == '.') {
			pos = next;
			continue;
		}
		if (len == 2 && name[0] == '.' && name[1] == '.') {
			if (cur == TD_ROOT) {
				err = td_fail(TD_EINVAL, "'..' leads outside the archive");
				break;
			}
			td_stat st;
			err = td_archive_stat(a, cur, &st);
			if (err)
				break;
			cur = st.parent;
			pos = next;
			continue;
		}
		td_entry e;
		err = td_archive_lookup(a, cur, name, len, &e);
		if (err) {
			if (err == TD_ENOENT)
				td_fail(err, "no '%.*s' in the archive", (int)len, name);
			else if (err == TD_ENOTDIR)
				td_fail(err, "a path component before '%.*s' is not a directory", (int)len, name);
			break;
		}
		td_stat st;
		err = td_archive_stat(a, e, &st);
		if (err)
			break;
		if (S_ISLNK(st.mode) && (!last || follow_last)) {
			if (++hops > MAX_LINK_HOPS) {
				err = td_fail(TD_ELIMIT, "too many levels of symbolic links");
				break;
			}
			char *target = NULL;
			err = link_target(a, e, st.size, &target);
			if (err || !target)
				break;
			if (target[0] == '/') {
				err = td_fail(TD_EINVAL, "symlink '%.*s' points outside the archive (%s)",
					      (int)len, name, target);
				free(target);
				break;
			}
			size_t tl = strlen(target), rl = strlen(todo + next);
			char *nt = malloc(tl + rl + 1);
			if (!nt) {
				free(target);
				err = TD_ENOMEM;
				break;
			}
			memcpy(nt, target, tl);
			memcpy(nt + tl, todo + next, rl + 1);
			free(target);
			free(todo);
			todo = nt;
			pos = 0;
			continue;
		}
		if (!last && !S_ISDIR(st.mode) && !S_ISLNK(st.mode)) {
			err = td_fail(TD_ENOTDIR, "'%.*s' is not a directory", (int)len, name);
			break;
		}
		cur = e;
		pos = next;
	}
	free(todo);
	if (err == TD_OK)
		*out = cur;
	return err;
}
