/* td_compact: rewrite an archive with its edits folded in, crash-safely (see td_compact.h). */
#include "td_compact.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "td_archive_int.h"
#include "td_build.h"
#include "td_edit_int.h"
#include "td_format.h"
#include "td_lock.h"
#include "td_shard.h"
#include "td_tmpfile.h"

#define CHUNK_BYTES (1u << 20)

typedef struct walk {
	const td_edit *ed;
	td_build *w;
	td_cursor *cur;
	uint8_t *buf;
	char path[TD_MAXPATH + 2];
	/* per-shard compaction of a version 5 archive (NULL: feed everything) */
	const td_archive *a;
	uint8_t *keep_ent;        /* per base entry: reused as it is (its shards kept) */
	uint8_t *dirty;           /* per base shard: rebuilt */
	uint8_t *keep_sh;         /* per base shard: !dirty (td_build_opts.keep) */
	uint32_t nshards;
	int marking;              /* first walk: find what changed, feed nothing */
} walk;

static int feed_file(walk *k, td_node node, const td_stat *st)
{
	int err = td_build_file_begin(k->w, k->path, st->mode & 07777, st->mtime_sec, st->mtime_nsec);
	if (err)
		return err;
	for (uint64_t off = 0; off < st->size;) {
		size_t got = 0;
		size_t want = st->size - off < CHUNK_BYTES ? (size_t)(st->size - off) : CHUNK_BYTES;
		if ((err = td_edit_read(k->ed, node, off, k->buf, want, &got, k->cur)))
			return err;
		if (got != want)
			return td_fail(TD_ECORRUPT, "%s: text shorter than its size", k->path);
		if ((err = td_build_file_data(k->w, k->buf, got)))
			return err;
		off += got;
	}
	return td_build_file_end(k->w);
}

static int feed_symlink(walk *k, td_node node, const td_stat *st)
{
	if (st->size > TD_MAXPATH)
		return td_fail(TD_ELIMIT, "%s: symlink target too long", k->path);
	char target[TD_MAXPATH + 1];
	size_t got = 0;
	int err = td_edit_read(k->ed, node, 0, target, (size_t)st->size, &got, NULL);
	if (err)
		return err;
	target[got] = '\0';
	return td_build_add_symlink(k->w, k->path, st->mtime_sec, st->mtime_nsec, target);
}

/* The base entry a node shows (TD_NOENTRY for a node made by an edit). */
static td_entry node_base(const walk *k, td_node n)
{
	const tnode *tn = td_edit_node(k->ed, n);
	if (tn)
		return tn->base;
	return n < td_archive_nentries(k->a) ? n : TD_NOENTRY;
}

/* First walk, for each child: a file or symlink that is still where the
 * base had it (same parent chain), with its base text, is marked reusable
 * in keep_ent; every other base entry's shards will be rebuilt. */
static void mark_child(walk *k, td_node child, const td_stat *st, int in_place, td_entry be)
{
	if (!in_place || S_ISDIR(st->mode))
		return;
	if (S_ISREG(st->mode)) {
		const td_piece *p;
		size_t n;
		td_entry base;
		if (td_edit_pieces(k->ed, child, &p, &n, &base) || base != be)
			return;
	}
	k->keep_ent[be] = 1;
}

/* Whether base entry e has a piece in a kept shard. */
static int kept_some(const walk *k, td_entry e)
{
	const td_disk_piece *p;
	uint64_t np;
	if (td_shard_pieces(k->a, e, &p, &np))
		return 0;
	for (uint64_t i = 0; i < np; i++)
		if (p[i].shard < k->nshards && !k->dirty[p[i].shard])
			return 1;
	return 0;
}

/* A file or symlink unchanged at its place, with a piece in a kept shard:
 * its pieces there are kept, and each run of its pieces in shards to
 * rebuild is fed again (its bytes there) as a part of it. */
static int feed_kept(walk *k, td_node node, td_entry be, const td_stat *st)
{
	int err = td_build_add_kept(k->w, k->path, st->mode, st->mtime_sec, st->mtime_nsec, be);
	const td_disk_piece *p;
	uint64_t np;
	if (err || (err = td_shard_pieces(k->a, be, &p, &np)))
		return err;
	for (uint64_t i = 0; i < np && !err;) {
		if (!k->dirty[p[i].shard]) {
			i++;
			continue;
		}
		uint64_t from = p[i].start;
		while (i < np && k->dirty[p[i].shard])
			i++;
		uint64_t to = i < np ? p[i].start : st->size;
		if ((err = td_build_file_part(k->w, k->path, from)))
			break;
		for (uint64_t off = from; off < to && !err;) {
			size_t got = 0, want = to - off < CHUNK_BYTES ? (size_t)(to - off) : CHUNK_BYTES;
			if (!(err = td_edit_read(k->ed, node, off, k->buf, want, &got, k->cur)) && got != want)
				err = td_fail(TD_ECORRUPT, "%s: text shorter than its size", k->path);
			if (!err)
				err = td_build_file_data(k->w, k->buf, got);
			off += got;
		}
		if (!err)
			err = td_build_file_end(k->w);
	}
	return err;
}

/* Add the children of dir (whose path is k->path[0..plen)) depth-first,
 * parents before children. in_place: dir is a base directory at its base
 * place (every ancestor too), so its base children may keep their
 * shards. */
static int feed_dir(walk *k, td_node dir, size_t plen, unsigned depth, int in_place)
{
	if (depth > TD_MAXPATH)
		return TD_ECORRUPT;
	td_entry dbase = k->a && in_place ? node_base(k, dir) : TD_NOENTRY;
	uint64_t cookie = 0;
	for (;;) {
		td_node child;
		const char *name;
		size_t nl;
		int err = td_edit_dir_next(k->ed, dir, &cookie, &child, &name, &nl);
		if (err == TD_ENOENT)
			return TD_OK;
		if (err)
			return err;
		size_t len = plen + (plen ? 1 : 0) + nl;
		if (len > TD_MAXPATH)
			return td_fail(TD_ELIMIT, "path longer than %u bytes under '%.*s'", TD_MAXPATH, (int)plen,
				       k->path);
		if (plen)
			k->path[plen] = '/';
		memcpy(k->path + plen + (plen ? 1 : 0), name, nl);
		k->path[len] = '\0';
		td_stat st;
		if ((err = td_edit_stat(k->ed, child, &st)))
			return err;
		/* the child is at its base place: a base entry whose base
		 * parent is dir's base entry */
		td_entry be = TD_NOENTRY;
		int here = 0;
		if (dbase != TD_NOENTRY && (be = node_base(k, child)) != TD_NOENTRY) {
			td_stat bs;
			here = td_archive_stat(k->a, be, &bs) == TD_OK && bs.parent == dbase &&
			       (bs.mode & S_IFMT) == (st.mode & S_IFMT);
		}
		if (k->marking) {
			mark_child(k, child, &st, here, be);
			if (S_ISDIR(st.mode))
				err = feed_dir(k, child, len, depth + 1, here);
		} else if (S_ISDIR(st.mode)) {
			err = here ? td_build_add_kept(k->w, k->path, st.mode, st.mtime_sec, st.mtime_nsec, be)
				   : td_build_add_dir(k->w, k->path, st.mode & 07777, st.mtime_sec, st.mtime_nsec);
			if (!err)
				err = feed_dir(k, child, len, depth + 1, here);
		} else if (here && k->keep_ent[be] && kept_some(k, be)) {
			err = feed_kept(k, child, be, &st);
		} else if (S_ISLNK(st.mode)) {
			err = feed_symlink(k, child, &st);
		} else {
			err = feed_file(k, child, &st);
		}
		if (err)
			return err;
		k->path[plen] = '\0';
	}
}

/* Which shards of version 5 archive k->a to rebuild: those holding a
 * piece of a base file or symlink that is not reused as it is (edited,
 * deleted, moved to another directory). Fills keep_ent and dirty. A file
 * reused as it is but with a piece in such a shard keeps its other
 * pieces; that piece's bytes are built again (feed_kept). */
static int plan_shards(walk *k)
{
	uint32_t ne = td_archive_nentries(k->a);
	td_shard_table(k->a, &k->nshards);
	k->keep_ent = calloc(ne + 1, 1);
	k->dirty = calloc(k->nshards + 1, 1);
	if (!k->keep_ent || !k->dirty)
		return TD_ENOMEM;
	k->marking = 1;
	k->path[0] = '\0';
	int err = feed_dir(k, TD_ROOT, 0, 0, 1);
	k->marking = 0;
	k->path[0] = '\0';
	for (td_entry e = 1; e < ne && !err; e++) {
		td_stat st;
		const td_disk_piece *p;
		uint64_t np;
		if ((err = td_archive_stat(k->a, e, &st)) || (err = td_shard_pieces(k->a, e, &p, &np)))
			break;
		if (S_ISDIR(st.mode) || k->keep_ent[e])
			continue;
		for (uint64_t i = 0; i < np; i++)
			if (p[i].shard < k->nshards)
				k->dirty[p[i].shard] = 1;
	}
	return err;
}

static int sync_dir_of(const char *path)
{
	char *copy = strdup(path);
	if (!copy)
		return TD_ENOMEM;
	int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int err = TD_OK;
	if (fd < 0 || fsync(fd) != 0)
		err = td_fail(TD_EIO, "%s: cannot sync its directory: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	free(copy);
	return err;
}

int td_compact_build(const td_archive *a, const td_edit *ed, td_journal *j, const char *archive_path,
		     const td_compact_opts *opts, td_compact_stats *stats, int *lock_fd)
{
	if (stats)
		memset(stats, 0, sizeof *stats);
	size_t cap = strlen(archive_path) + 64;
	char *tmp = malloc(cap);
	if (!tmp)
		return TD_ENOMEM;
	/* the name of earlier versions, left over from an interrupted compaction */
	snprintf(tmp, cap, "%s.compact", archive_path);
	unlink(tmp);
	int err = td_tmp_path(archive_path, "compact", tmp, cap);
	if (err) {
		free(tmp);
		return err;
	}
	walk *k = calloc(1, sizeof(*k));
	if (k)
		k->buf = malloc(CHUNK_BYTES);
	if (k)
		k->cur = td_cursor_new(td_edit_archive(ed));
	if (!k || !k->buf || !k->cur) {
		err = TD_ENOMEM;
		goto out;
	}
	k->ed = ed;
	/* the format asked for, else the archive's: version 5 stays sharded */
	td_build_opts bo;
	if (opts) {
		bo = opts->build;
	} else {
		td_build_opts_init(&bo);
		bo.format = 0;
		bo.shard_size = 0;
	}
	uint64_t pbytes;
	uint32_t pwith, pn;
	td_archive_postings(a, &pbytes, &pwith, &pn);
	if (pwith) /* postings stay */
		bo.writer.postings = 1;
	if (!bo.shard_size) /* the archive's, else the default */
		bo.shard_size = td_archive_shard_size(a) ? td_archive_shard_size(a) : TD_BUILD_SHARD_DEFAULT;
	unsigned fmt = bo.format ? bo.format : td_archive_version(a);
	bo.format = fmt >= TD_VERSION_SHARDED ? TD_VERSION_SHARDED : fmt == 3 ? 3 : TD_VERSION;
	bo.base = NULL;
	bo.keep_from = NULL;
	bo.keep = NULL;
	bo.fuzzy_index = bo.fuzzy_index || a->sec_fz; /* kept, rebuilt over the new shards */
	bo.root_vector = bo.root_vector || a->sec_vt; /* the same */
	uint64_t atb, atw, atn; /* so are the top n-grams */
	if (!bo.top_ngrams && td_archive_tables(a, &atb, &atw, &atn) == 1)
		bo.top_ngrams = atn;
	int v5 = bo.format == TD_VERSION_SHARDED && td_archive_version(a) == TD_VERSION_SHARDED && td_sharded(a);
	if (v5 && stats)
		stats->shards_before = td_archive_nshards(a);
	if (v5 && !(opts && opts->full)) {
		/* per shard: keep the shards no edit touched, byte for byte */
		k->a = a;
		if ((err = plan_shards(k)))
			goto out;
		if (!(k->keep_sh = malloc(k->nshards + 1))) {
			err = TD_ENOMEM;
			goto out;
		}
		for (uint32_t i = 0; i < k->nshards; i++)
			k->keep_sh[i] = !k->dirty[i];
		bo.keep_from = a;
		bo.keep = k->keep_sh;
		for (uint32_t i = 0; stats && i < k->nshards; i++)
			stats->shards_kept += k->keep_sh[i];
	}
	char *dir = strdup(archive_path);
	if (!dir) {
		err = TD_ENOMEM;
		goto out;
	}
	char *slash = strrchr(dir, '/');
	bo.tmp_dir = slash ? (slash == dir ? "/" : (*slash = 0, dir)) : ".";
	bo.tmp_target = archive_path;
	err = td_build_new(&bo, &k->w);
	free(dir);
	if (err)
		goto out;
	/* 1. the new archive, complete and durable, beside the old one */
	td_stat rs;
	if ((err = td_edit_stat(ed, TD_ROOT, &rs)))
		goto out;
	err = k->a ? td_build_add_kept(k->w, "", rs.mode, rs.mtime_sec, rs.mtime_nsec, 0)
		   : td_build_add_dir(k->w, "", rs.mode & 07777, rs.mtime_sec, rs.mtime_nsec);
	if (err || (err = feed_dir(k, TD_ROOT, 0, 0, k->a != NULL)))
		goto out;
	err = td_build_finish(k->w, tmp);
	k->w = NULL;
	if (err)
		goto out;
	if (stats && stats->shards_before) {
		td_archive *na;
		if (td_archive_open(tmp, 0, &na) == TD_OK) {
			uint32_t n = td_archive_nshards(na);
			stats->shards_built = n > stats->shards_kept ? n - stats->shards_kept : 0;
			td_archive_close(na);
		}
	}

	/* 2. lock it (the lock moves with the file) and name it in the journal */
	int nfd = open(tmp, O_RDONLY | O_CLOEXEC);
	if (nfd < 0) {
		err = td_fail(TD_EIO, "%s: %s", tmp, strerror(errno));
		goto out;
	}
	if (flock(nfd, LOCK_EX | LOCK_NB) != 0) {
		err = td_fail(TD_EBUSY, "%s: locked by another process", tmp);
		close(nfd);
		goto out;
	}
	uint64_t nsize, nsum;
	if ((err = td_journal_archive_id(tmp, &nsize, &nsum))) {
		close(nfd);
		goto out;
	}
	if (j) {
		td_edit_rec r = { .type = TD_REC_COMPACT, .off = nsize, .len = nsum };
		if ((err = td_journal_log(j, &r)) || (err = td_journal_sync(j))) {
			close(nfd);
			goto out;
		}
	}
	/* 3. install it */
	if (rename(tmp, archive_path) != 0) {
		err = td_fail(TD_EIO, "%s: cannot replace the archive: %s", archive_path, strerror(errno));
		close(nfd);
		goto out;
	}
	td_unlock_archive(*lock_fd);
	*lock_fd = nfd;
	if ((err = sync_dir_of(archive_path)))
		goto out;
	/* 4. empty the journal, tied to the new archive */
	if (j)
		err = td_journal_reset(j, nsize, nsum);
out:
	if (k) {
		td_build_abort(k->w);
		td_cursor_free(k->cur);
		free(k->buf);
		free(k->keep_ent);
		free(k->dirty);
		free(k->keep_sh);
		free(k);
	}
	if (err)
		unlink(tmp);
	free(tmp);
	return err;
}

/* The options of a compaction asked for with writer options. */
static void compact_opts_of(const td_writer_opts *opts, td_compact_opts *co)
{
	memset(co, 0, sizeof *co);
	td_build_opts_init(&co->build);
	co->build.format = 0;
	co->build.shard_size = 0;
	if (opts) {
		co->build.writer = *opts;
		co->build.format = opts->format;
		co->build.build_time = opts->build_time;
	}
}

int td_compact(const td_archive *a, const td_edit *ed, td_journal *j, const char *archive_path,
	       const td_writer_opts *opts, int *lock_fd)
{
	td_compact_opts co;
	compact_opts_of(opts, &co);
	return td_compact_build(a, ed, j, archive_path, &co, NULL, lock_fd);
}

int td_compact_path_build(const char *archive_path, const td_compact_opts *opts, td_journal_report *rep,
			  int *rewritten, td_compact_stats *stats)
{
	int lock = -1;
	td_archive *a = NULL;
	td_edit *ed = NULL;
	td_journal *j = NULL;
	if (rewritten)
		*rewritten = 0;
	if (stats)
		memset(stats, 0, sizeof *stats);
	unsigned fmt = opts ? opts->build.format : 0;
	int err = td_lock_archive(archive_path, 1, TD_LOCK_WAIT_MS, &lock);
	if (err)
		return err;
	if ((err = td_archive_open(archive_path, 0, &a)) || (err = td_edit_new(a, &ed)) ||
	    (err = td_journal_open(archive_path, ed, 0, &j, rep)))
		goto out;
	if (td_journal_seq(j) == 0 && !td_edit_changed(ed) && !(opts && opts->full) &&
	    !(fmt && (fmt >= TD_VERSION_SHARDED) != (td_archive_version(a) >= TD_VERSION_SHARDED)))
		goto out; /* nothing to fold in, and no change of format or repack asked for */
	err = td_compact_build(a, ed, j, archive_path, opts, stats, &lock);
	if (!err && rewritten)
		*rewritten = 1;
out:
	td_journal_close(j);
	td_edit_free(ed);
	td_archive_close(a);
	td_unlock_archive(lock);
	return err;
}

int td_compact_path(const char *archive_path, const td_writer_opts *opts, td_journal_report *rep,
		    int *rewritten)
{
	td_compact_opts co;
	compact_opts_of(opts, &co);
	return td_compact_path_build(archive_path, &co, rep, rewritten, NULL);
}
