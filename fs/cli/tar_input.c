/* tar_input: walk a tar stream with libarchive and feed its entries to the archive builder. */
#include "tar_input.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <archive.h>
#include <archive_entry.h>

#include "td_err.h"
#include "td_format.h"

#ifndef TD_LIBARCHIVE_SONAME
#define TD_LIBARCHIVE_SONAME "libarchive.so.13"
#endif

/* libarchive is loaded when a tar stream is read, not when tadoc starts:
 * it and what it needs (libxml2, ICU, nettle, the compression libraries)
 * would otherwise be mapped and relocated by every tadoc process, most of
 * a short query's cost (fs/README.md). The functions used, by their own
 * names; the header gives their types. */
#define LA_FUNCS(X)                                                                                                   \
	X(archive_read_new) X(archive_read_free) X(archive_read_support_filter_all)                                   \
	X(archive_read_support_format_tar) X(archive_read_support_format_gnutar) X(archive_read_open_fd)              \
	X(archive_read_next_header) X(archive_read_data) X(archive_read_data_skip) X(archive_filter_bytes)            \
	X(archive_error_string) X(archive_entry_pathname) X(archive_entry_perm) X(archive_entry_mtime)                \
	X(archive_entry_mtime_is_set) X(archive_entry_mtime_nsec) X(archive_entry_hardlink)                           \
	X(archive_entry_filetype) X(archive_entry_symlink)

#define LA_FIELD(f) __typeof__(f) *f;
static struct {
	LA_FUNCS(LA_FIELD)
} la;
#undef LA_FIELD

/* Load libarchive (once a process; never unloaded). TD_OK, or TD_EUNSUPP
 * naming the library and why it could not be used. */
static int la_load(const char *name)
{
	static int loaded;
	if (loaded)
		return TD_OK;
	void *h = dlopen(TD_LIBARCHIVE_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *why = dlerror();
		return td_fail(TD_EUNSUPP, "%s: reading a tar stream needs libarchive (%s), which cannot be loaded: %s",
			       name, TD_LIBARCHIVE_SONAME, why ? why : "unknown error");
	}
#define LA_SYM(f)                                                                                                     \
	if (!(p = dlsym(h, #f))) {                                                                                    \
		dlclose(h);                                                                                           \
		return td_fail(TD_EUNSUPP, "%s: %s has no function %s (libarchive 3 is needed)", name,                \
			       TD_LIBARCHIVE_SONAME, #f);                                                             \
	}                                                                                                             \
	memcpy(&la.f, &p, sizeof p);
	void *p;
	LA_FUNCS(LA_SYM)
#undef LA_SYM
	loaded = 1;
	return TD_OK;
}

/* Bytes of file data handed to the builder at a time. */
#define TAR_CHUNK (256u << 10)

/* The builder the entries go to: td_build (format 5 shards in bounded
 * memory, or one td_writer for formats 3 and 4). */
typedef td_build tar_sink;

static tar_sink *sink_new(const td_build_opts *o, int *err)
{
	td_build *b = NULL;
	*err = td_build_new(o, &b);
	return b;
}

static int sink_dir(tar_sink *s, const char *path, mode_t mode, int64_t sec, uint32_t nsec)
{
	return td_build_add_dir(s, path, mode, sec, nsec);
}

static int sink_symlink(tar_sink *s, const char *path, int64_t sec, uint32_t nsec, const char *target)
{
	return td_build_add_symlink(s, path, sec, nsec, target);
}

static int sink_file_begin(tar_sink *s, const char *path, mode_t mode, int64_t sec, uint32_t nsec)
{
	return td_build_file_begin(s, path, mode, sec, nsec);
}

static int sink_file_data(tar_sink *s, const void *data, size_t len)
{
	return td_build_file_data(s, data, len);
}

static int sink_file_end(tar_sink *s)
{
	return td_build_file_end(s);
}

static int sink_copy(tar_sink *s, const char *path, mode_t mode, int64_t sec, uint32_t nsec, const char *target)
{
	return td_build_add_copy(s, path, mode, sec, nsec, target);
}

static int sink_finish(tar_sink *s, const char *out_path)
{
	return td_build_finish(s, out_path);
}

static void sink_abort(tar_sink *s)
{
	td_build_abort(s);
}

/* One tar stream being read. */
typedef struct tar_in {
	struct archive *ar;
	const char *name;         /* the stream, for messages */
	tar_sink *sink;
	char *buf;                /* TAR_CHUNK bytes */
	char path[TD_MAXPATH + 1]; /* the current entry, normalized */
	char link[TD_MAXPATH + 1]; /* a hard link's target, normalized */
	uint64_t nentries;        /* headers read */
	la_int64_t mark;          /* tar bytes consumed once the last entry was read whole */
} tar_in;

/* The archive path of tar name `raw` into out: no leading '/' or "./",
 * no empty or "." components, no trailing '/'; "" for the root. TD_OK, or
 * an error naming the entry (a ".." component, too long). */
static int normalize(const tar_in *t, const char *raw, char *out)
{
	size_t o = 0;
	const char *c = raw;
	while (*c) {
		while (*c == '/')
			c++;
		if (!*c)
			break;
		size_t n = strcspn(c, "/");
		if (n == 1 && c[0] == '.') {
			c += n;
			continue;
		}
		if (n == 2 && c[0] == '.' && c[1] == '.')
			return td_fail(TD_EINVAL, "%s: entry '%s': a '..' component leads outside the archive", t->name,
				       raw);
		if (o + (o > 0) + n > TD_MAXPATH)
			return td_fail(TD_ELIMIT, "%s: entry '%s': path longer than %u bytes", t->name, raw,
				       TD_MAXPATH);
		if (o > 0)
			out[o++] = '/';
		memcpy(out + o, c, n);
		o += n;
		c += n;
	}
	out[o] = '\0';
	return TD_OK;
}

/* The builder's error for the current entry, named after the stream and
 * the entry unless its detail names something already. */
static int entry_fail(const tar_in *t, int err)
{
	const char *d = td_errdetail();
	char msg[1024];
	snprintf(msg, sizeof msg, "%s", d && *d ? d : td_strerror(err));
	return td_fail(err, "%s: entry '%s': %s", t->name, t->path[0] ? t->path : ".", msg);
}

/* libarchive gave up at a header (before the first: not a tar stream) or
 * in the data of the current entry. A decompressor that runs dry may say
 * nothing: that is a cut too. */
static int stream_fail(const tar_in *t, int in_data)
{
	const char *why = la.archive_error_string(t->ar);
	int cut = !why || !*why || strstr(why, "runcated") != NULL;
	const char *at = in_data ? "at" : "after", *path = t->path[0] ? t->path : ".";
	if (t->nentries == 0 && !in_data)
		return cut ? td_fail(TD_ECORRUPT, "%s: truncated before the first tar entry%s%s%s", t->name,
				     why && *why ? " (" : "", why && *why ? why : "", why && *why ? ")" : "")
			   : td_fail(TD_ECORRUPT, "%s: not a tar archive", t->name);
	if (cut)
		return td_fail(TD_ECORRUPT, "%s: truncated tar archive %s entry %s", t->name, at, path);
	return td_fail(TD_ECORRUPT, "%s: damaged tar archive %s entry %s (%s)", t->name, at, path, why);
}

/* Stream the data of the current regular file into the builder. */
static int add_file(tar_in *t, mode_t mode, int64_t sec, uint32_t nsec)
{
	int err = sink_file_begin(t->sink, t->path, mode, sec, nsec);
	if (err)
		return entry_fail(t, err);
	for (;;) {
		la_ssize_t n = la.archive_read_data(t->ar, t->buf, TAR_CHUNK);
		if (n == 0)
			break;
		if (n < 0) {
			if (n == ARCHIVE_WARN || n == ARCHIVE_RETRY)
				continue;
			sink_file_end(t->sink);
			return stream_fail(t, 1);
		}
		if ((err = sink_file_data(t->sink, t->buf, (size_t)n)))
			return entry_fail(t, err);
	}
	err = sink_file_end(t->sink);
	return err ? entry_fail(t, err) : TD_OK;
}

/* Add the entry whose header was just read. */
static int add_entry(tar_in *t, struct archive_entry *e)
{
	const char *raw = la.archive_entry_pathname(e);
	if (!raw)
		return td_fail(TD_ECORRUPT, "%s: entry %llu has no name", t->name, (unsigned long long)t->nentries);
	int err = normalize(t, raw, t->path);
	if (err)
		return err;
	mode_t mode = la.archive_entry_perm(e);
	int64_t sec = la.archive_entry_mtime(e);
	long ns = la.archive_entry_mtime_is_set(e) ? la.archive_entry_mtime_nsec(e) : 0;
	uint32_t nsec = ns > 0 && ns < 1000000000L ? (uint32_t)ns : 0;
	const char *hard = la.archive_entry_hardlink(e);
	mode_t type = la.archive_entry_filetype(e);
	if (!t->path[0] && (hard || type != AE_IFDIR))
		return td_fail(TD_EINVAL, "%s: entry '%s': only a directory can be the root", t->name, raw);
	if (hard) {
		if ((err = normalize(t, hard, t->link)))
			return err;
		err = sink_copy(t->sink, t->path, mode, sec, nsec, t->link);
		return err ? entry_fail(t, err) : TD_OK;
	}
	switch (type) {
	case AE_IFDIR:
		err = sink_dir(t->sink, t->path, mode, sec, nsec);
		return err ? entry_fail(t, err) : TD_OK;
	case AE_IFREG:
		return add_file(t, mode, sec, nsec);
	case AE_IFLNK: {
		const char *target = la.archive_entry_symlink(e);
		err = sink_symlink(t->sink, t->path, sec, nsec, target ? target : "");
		return err ? entry_fail(t, err) : TD_OK;
	}
	default:
		return td_fail(TD_EUNSUPP, "%s: entry '%s': unsupported file type (%s)", t->name, t->path,
			       type == AE_IFIFO ? "fifo" : type == AE_IFCHR ? "character device" :
			       type == AE_IFBLK ? "block device" : type == AE_IFSOCK ? "socket" : "unknown");
	}
}

int td_cli_tar_compress(int fd, const char *name, const char *out_path, const td_build_opts *opts)
{
	tar_in t;
	memset(&t, 0, sizeof t);
	t.name = name;
	int err = la_load(name);
	if (err)
		return err;
	t.sink = sink_new(opts, &err);
	if (err)
		goto out;
	t.ar = la.archive_read_new();
	t.buf = malloc(TAR_CHUNK);
	if (!t.ar || !t.buf) {
		err = td_fail(TD_ENOMEM, "%s: out of memory", name);
		goto out;
	}
	la.archive_read_support_filter_all(t.ar);
	la.archive_read_support_format_tar(t.ar);
	la.archive_read_support_format_gnutar(t.ar);
	if (la.archive_read_open_fd(t.ar, fd, TAR_CHUNK) != ARCHIVE_OK) {
		err = stream_fail(&t, 0);
		goto out;
	}
	for (;;) {
		struct archive_entry *e;
		int r = la.archive_read_next_header(t.ar, &e);
		if (r == ARCHIVE_EOF)
			break;
		if (r == ARCHIVE_RETRY)
			continue;
		if (r < ARCHIVE_WARN) {
			err = stream_fail(&t, 0);
			goto out;
		}
		t.nentries++;
		if ((err = add_entry(&t, e)))
			goto out;
		/* the rest of the entry (a directory's or link's nothing, the
		 * padding) is consumed before the next header is read */
		if (la.archive_read_data_skip(t.ar) < ARCHIVE_WARN) {
			err = stream_fail(&t, 1);
			goto out;
		}
		t.mark = la.archive_filter_bytes(t.ar, 0);
	}
	/* libarchive accepts a stream that stops between entries; a tar
	 * archive ends with zero blocks, so one that stops there was cut. */
	if (t.nentries > 0 && la.archive_filter_bytes(t.ar, 0) == t.mark) {
		err = td_fail(TD_ECORRUPT, "%s: truncated tar archive after entry %s (no end-of-archive blocks)", name,
			      t.path[0] ? t.path : ".");
		goto out;
	}
	if (t.nentries == 0) {
		err = td_fail(TD_ECORRUPT, "%s: not a tar archive (no entries)", name);
		goto out;
	}
	err = sink_finish(t.sink, out_path);
	t.sink = NULL;
out:
	if (t.sink)
		sink_abort(t.sink);
	if (t.ar)
		la.archive_read_free(t.ar);
	free(t.buf);
	return err;
}
