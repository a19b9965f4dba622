/* td_journal: append, sync, replay and repair the edit journal of an archive. */
#include "td_journal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "td_format.h"
#include "td_tmpfile.h"

#define J_MAGIC "TDJRNL\0\1"
#define J_VERSION 1u
#define J_HDR 64u
#define R_HEAD 16u                /* rec_size, zero, seq */
#define R_BODY 72u                /* the fixed td_edit_rec fields */
#define R_MIN (R_HEAD + R_BODY + 8u)

struct td_journal {
	int fd;
	unsigned flags;
	char *path;
	uint64_t end;             /* bytes of valid journal */
	uint64_t seq;             /* last sequence number */
	uint8_t *wbuf;            /* record assembly buffer */
	size_t wcap;
};

/* ---------- little-endian helpers ---------- */

static void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}
static void put64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}
static uint32_t get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}
static uint64_t get64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

/* ---------- file helpers ---------- */

static int full_pread(int fd, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;
	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

static int full_pwrite(int fd, const void *buf, size_t len, uint64_t off)
{
	const uint8_t *p = buf;
	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* fsync the directory holding `path`. */
static int sync_dir(const char *path)
{
	char *copy = strdup(path);
	if (!copy)
		return TD_ENOMEM;
	int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int err = TD_OK;
	if (fd < 0 || fsync(fd) != 0)
		err = td_fail(TD_EIO, "%s: cannot sync directory: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	free(copy);
	return err;
}

static char *cat(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *s = malloc(la + lb + 1);
	if (s) {
		memcpy(s, a, la);
		memcpy(s + la, b, lb + 1);
	}
	return s;
}

/* td_journal_archive_id without a message: 0, or 1 (cannot open: errno),
 * 2 (header unreadable), 3 (not a tadoc archive). */
static int archive_id(const char *archive_path, uint64_t *size, uint64_t *sum)
{
	int fd = open(archive_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 1;
	td_disk_header h;
	struct stat st;
	int r = 0;
	if (fstat(fd, &st) != 0 || full_pread(fd, &h, sizeof h, 0) != 0)
		r = 2;
	else if (memcmp(h.magic, TD_MAGIC, TD_MAGIC_LEN) != 0)
		r = 3;
	close(fd);
	if (!r) {
		*size = (uint64_t)st.st_size;
		*sum = h.header_sum;
	}
	return r;
}

int td_journal_archive_id(const char *archive_path, uint64_t *size, uint64_t *sum)
{
	switch (archive_id(archive_path, size, sum)) {
	case 0:
		return TD_OK;
	case 1:
		return td_fail(TD_EIO, "%s: %s", archive_path, strerror(errno));
	case 2:
		return td_fail(TD_EFORMAT, "%s: cannot read the archive header", archive_path);
	default:
		return td_fail(TD_EFORMAT, "%s: not a tadoc archive", archive_path);
	}
}

/* A journal header (J_HDR bytes) of this version, its checksum matching. */
static int header_sound(const uint8_t *h)
{
	return memcmp(h, J_MAGIC, 8) == 0 && get32(h + 8) == J_VERSION && get32(h + 12) == J_HDR &&
	       XXH3_64bits(h, 56) == get64(h + 56);
}

int td_journal_pending(const char *archive_path)
{
	char jpath[4096];
	if ((size_t)snprintf(jpath, sizeof jpath, "%s.journal", archive_path) >= sizeof jpath)
		return 0;
	int fd = open(jpath, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	struct stat st;
	uint8_t h[J_HDR];
	int ok = fstat(fd, &st) == 0 && (uint64_t)st.st_size >= J_HDR + R_MIN && full_pread(fd, h, J_HDR, 0) == 0 &&
		 header_sound(h);
	close(fd);
	/* tied to this archive (not the one a compaction replaced, nor an
	 * archive written over this path since) */
	uint64_t asize, asum;
	return ok && archive_id(archive_path, &asize, &asum) == 0 && get64(h + 16) == asize && get64(h + 24) == asum;
}

static void make_header(uint8_t h[J_HDR], uint64_t size, uint64_t sum)
{
	memset(h, 0, J_HDR);
	memcpy(h, J_MAGIC, 8);
	put32(h + 8, J_VERSION);
	put32(h + 12, J_HDR);
	put64(h + 16, size);
	put64(h + 24, sum);
	put64(h + 56, XXH3_64bits(h, 56));
}

/* Write a journal holding only a header at `path`, atomically. */
static int write_fresh(const char *path, uint64_t size, uint64_t sum)
{
	char *tmp = cat(path, ".tmp");
	if (!tmp)
		return TD_ENOMEM;
	uint8_t h[J_HDR];
	make_header(h, size, sum);
	int err = TD_OK;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || full_pwrite(fd, h, J_HDR, 0) != 0 || fsync(fd) != 0)
		err = td_fail(TD_EIO, "%s: cannot write journal: %s", tmp, strerror(errno));
	if (fd >= 0)
		close(fd);
	if (!err && rename(tmp, path) != 0)
		err = td_fail(TD_EIO, "%s: cannot install journal: %s", path, strerror(errno));
	if (err)
		unlink(tmp);
	else
		err = sync_dir(path);
	free(tmp);
	return err;
}

/* ---------- record encoding ---------- */

static uint64_t rec_size(const td_edit_rec *r)
{
	uint64_t var = (uint64_t)r->name_len + r->name2_len + r->data_len;
	return R_HEAD + R_BODY + ((var + 7) & ~UINT64_C(7)) + 8;
}

static void enc_body(uint8_t *b, const td_edit_rec *r)
{
	put32(b + 0, r->type);
	put32(b + 4, r->flags);
	put32(b + 8, r->node);
	put32(b + 12, r->dir);
	put32(b + 16, r->dir2);
	put32(b + 20, r->mode);
	put64(b + 24, r->off);
	put64(b + 32, r->len);
	put64(b + 40, (uint64_t)r->time_sec);
	put32(b + 48, r->time_nsec);
	put32(b + 52, r->name_len);
	put32(b + 56, r->name2_len);
	put32(b + 60, 0);
	put64(b + 64, r->data_len);
}

/* Decode a checked record; pointers go into `b`. 0 or -1 (sizes disagree). */
static int dec_body(const uint8_t *b, uint64_t size, td_edit_rec *r)
{
	memset(r, 0, sizeof(*r));
	r->type = get32(b + 0);
	r->flags = get32(b + 4);
	r->node = get32(b + 8);
	r->dir = get32(b + 12);
	r->dir2 = get32(b + 16);
	r->mode = get32(b + 20);
	r->off = get64(b + 24);
	r->len = get64(b + 32);
	r->time_sec = (int64_t)get64(b + 40);
	r->time_nsec = get32(b + 48);
	r->name_len = get32(b + 52);
	r->name2_len = get32(b + 56);
	r->data_len = get64(b + 64);
	if (r->data_len > size || rec_size(r) != size)
		return -1;
	const uint8_t *v = b + R_BODY;
	r->name = (const char *)v;
	r->name2 = (const char *)v + r->name_len;
	r->data = v + r->name_len + r->name2_len;
	return 0;
}

int td_journal_log(void *jp, const td_edit_rec *rec)
{
	td_journal *j = jp;
	if (!j || j->fd < 0 || (j->flags & TD_JOURNAL_READONLY))
		return TD_EROFS;
	uint64_t size = rec_size(rec);
	if (size > SIZE_MAX / 2)
		return TD_ERANGE;
	if (size > j->wcap) {
		size_t n = j->wcap ? j->wcap : 4096;
		while (n < size)
			n *= 2;
		uint8_t *b = realloc(j->wbuf, n);
		if (!b)
			return TD_ENOMEM;
		j->wbuf = b;
		j->wcap = n;
	}
	uint8_t *b = j->wbuf;
	memset(b, 0, (size_t)size);
	put32(b, (uint32_t)size);
	put64(b + 8, j->seq + 1);
	enc_body(b + R_HEAD, rec);
	uint8_t *v = b + R_HEAD + R_BODY;
	if (rec->name_len)
		memcpy(v, rec->name, rec->name_len);
	if (rec->name2_len)
		memcpy(v + rec->name_len, rec->name2, rec->name2_len);
	if (rec->data_len)
		memcpy(v + rec->name_len + rec->name2_len, rec->data, (size_t)rec->data_len);
	put64(b + size - 8, XXH3_64bits(b, (size_t)size - 8));
	if (size > UINT32_MAX)
		return td_fail(TD_ELIMIT, "edit record of %" PRIu64 " bytes is too large", size);
	int bad = full_pwrite(j->fd, b, (size_t)size, j->end);
	if (!bad && (j->flags & TD_JOURNAL_SYNC))
		bad = fdatasync(j->fd);
	if (bad) {
		int e = errno;
		/* Leave no partial record behind. */
		if (ftruncate(j->fd, (off_t)j->end) != 0) {
			/* A torn tail is still detected on replay. */
		}
		return td_fail(TD_EIO, "%s: cannot append to the journal: %s", j->path, strerror(e));
	}
	j->end += size;
	j->seq++;
	return TD_OK;
}

int td_journal_sync(td_journal *j)
{
	if (!j || j->fd < 0)
		return TD_OK;
	if (fdatasync(j->fd) != 0)
		return td_fail(TD_EIO, "%s: cannot sync the journal: %s", j->path, strerror(errno));
	return TD_OK;
}

uint64_t td_journal_bytes(const td_journal *j)
{
	return j ? j->end : 0;
}

uint64_t td_journal_seq(const td_journal *j)
{
	return j ? j->seq : 0;
}

const char *td_journal_path(const td_journal *j)
{
	return j ? j->path : "";
}

void td_journal_close(td_journal *j)
{
	if (!j)
		return;
	if (j->fd >= 0)
		close(j->fd);
	free(j->wbuf);
	free(j->path);
	free(j);
}

int td_journal_reset(td_journal *j, uint64_t size, uint64_t sum)
{
	int err = write_fresh(j->path, size, sum);
	if (err)
		return err;
	int fd = open(j->path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return td_fail(TD_EIO, "%s: %s", j->path, strerror(errno));
	if (j->fd >= 0)
		close(j->fd);
	j->fd = fd;
	j->end = J_HDR;
	j->seq = 0;
	return TD_OK;
}

/* ---------- replay ---------- */

/* Report line (cut to fit; paths can be long). */
static void __attribute__((format(printf, 3, 4))) say(char *dst, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(dst, cap, fmt, ap);
	va_end(ap);
}

/* Read the record at pos. Returns 1 with *rec filled (pointers into *buf),
 * 0 at a clean end, -1 on damage (why = reason), or a negative td_err - 1
 * through *err for I/O failures. */
static int next_rec(int fd, uint64_t fsize, uint64_t pos, uint64_t expect_seq, uint8_t **buf, size_t *cap,
		    td_edit_rec *rec, uint64_t *size, const char **why, int *err)
{
	*err = TD_OK;
	if (pos == fsize)
		return 0;
	if (fsize - pos < R_HEAD) {
		*why = "record header cut short (torn write)";
		return -1;
	}
	uint8_t h[R_HEAD];
	if (full_pread(fd, h, R_HEAD, pos) != 0) {
		*err = TD_EIO;
		return -1;
	}
	uint64_t sz = get32(h);
	if (sz < R_MIN || (sz & 7) || get32(h + 4) != 0) {
		*why = "impossible record size";
		return -1;
	}
	if (sz > fsize - pos) {
		*why = "record cut short (torn write)";
		return -1;
	}
	if (sz > *cap) {
		uint8_t *nb = realloc(*buf, (size_t)sz);
		if (!nb) {
			*err = TD_ENOMEM;
			return -1;
		}
		*buf = nb;
		*cap = (size_t)sz;
	}
	if (full_pread(fd, *buf, (size_t)sz, pos) != 0) {
		*err = TD_EIO;
		return -1;
	}
	if (XXH3_64bits(*buf, (size_t)sz - 8) != get64(*buf + sz - 8)) {
		*why = "checksum mismatch";
		return -1;
	}
	if (get64(*buf + 8) != expect_seq) {
		*why = "sequence number out of order";
		return -1;
	}
	if (dec_body(*buf + R_HEAD, sz, rec) != 0) {
		*why = "record fields disagree with its size";
		return -1;
	}
	*size = sz;
	return 1;
}

/* Copy journal bytes [from, fsize) to a new file PATH.damaged-FROM, or,
 * when an earlier damage at the same offset was saved there, to the first
 * free PATH.damaged-FROM.N (N = 1, 2, ...): a saved tail is never
 * overwritten. `name` gets the name used. */
static int save_tail(int fd, const char *path, uint64_t from, uint64_t fsize, char *name, size_t cap)
{
	int out = -1;
	for (unsigned seq = 0; out < 0; seq++) {
		if (seq == 0)
			snprintf(name, cap, "%s.damaged-%" PRIu64, path, from);
		else
			snprintf(name, cap, "%s.damaged-%" PRIu64 ".%u", path, from, seq);
		out = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (out < 0 && (errno != EEXIST || seq >= 100000))
			return td_fail(TD_EIO, "%s: %s", name, strerror(errno));
	}
	uint8_t buf[65536];
	int err = TD_OK;
	for (uint64_t p = from; p < fsize && !err;) {
		size_t n = (size_t)(fsize - p < sizeof buf ? fsize - p : sizeof buf);
		if (full_pread(fd, buf, n, p) != 0 || full_pwrite(out, buf, n, p - from) != 0)
			err = td_fail(TD_EIO, "%s: cannot save the damaged journal tail: %s", name, strerror(errno));
		p += n;
	}
	if (!err && fsync(out) != 0)
		err = td_fail(TD_EIO, "%s: %s", name, strerror(errno));
	close(out);
	if (!err)
		err = sync_dir(name);
	return err;
}

/* Phase 1 of td_journal_open: open (or, writable, create) j->path and
 * check its header. *size gets the file size, *mine 1 when the header
 * names this archive. Returns TD_OK with j->fd < 0 when a read-only open
 * finds no journal. */
static int open_checked(td_journal *j, int ro, uint64_t asize, uint64_t asum, uint64_t *size, int *mine,
			uint8_t h[J_HDR])
{
	int err;
	j->fd = open(j->path, (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC);
	if (j->fd < 0 && errno == ENOENT) {
		if (ro)
			return TD_OK;
		if ((err = write_fresh(j->path, asize, asum)))
			return err;
		j->fd = open(j->path, O_RDWR | O_CLOEXEC);
	}
	if (j->fd < 0)
		return td_fail(TD_EIO, "%s: %s", j->path, strerror(errno));
	struct stat st;
	if (fstat(j->fd, &st) != 0)
		return td_fail(TD_EIO, "%s: %s", j->path, strerror(errno));
	*size = (uint64_t)st.st_size;
	if (*size < J_HDR || full_pread(j->fd, h, J_HDR, 0) != 0)
		return td_fail(TD_ECORRUPT, "journal '%s': header cut short (%" PRIu64 " bytes); "
			       "move the file away to mount without it", j->path, *size);
	if (!header_sound(h))
		return td_fail(TD_ECORRUPT, "journal '%s': bad header (magic, version or checksum at byte 0)",
			       j->path);
	*mine = get64(h + 16) == asize && get64(h + 24) == asum;
	return TD_OK;
}

/* What the replay of a journal's records found. */
typedef struct replay_end {
	uint64_t pos, seq;        /* end of the intact records; their count */
	int r;                    /* next_rec's last answer: 0 clean end, -1 damage */
	const char *why;          /* the damage, when r < 0 */
	td_edit_rec last;         /* the last intact record */
} replay_end;

/* Phase 2: read every intact record in order, applying each to ed when
 * `apply`. TD_OK, TD_ECORRUPT (a record that does not apply), TD_EIO,
 * TD_ENOMEM. */
static int replay(td_journal *j, td_edit *ed, uint64_t fsize, int apply, replay_end *re)
{
	uint8_t *buf = NULL;
	size_t cap = 0;
	int err = TD_OK;
	td_edit_rec rec;
	memset(re, 0, sizeof *re);
	re->pos = J_HDR;
	while ((re->r = next_rec(j->fd, fsize, re->pos, re->seq + 1, &buf, &cap, &rec, &(uint64_t){ 0 }, &re->why,
				 &err)) == 1) {
		uint64_t sz = get32(buf);
		if (apply) {
			int e = td_edit_replay(ed, &rec);
			if (e) {
				err = td_fail(TD_ECORRUPT,
					      "journal '%s': record %" PRIu64 " at byte offset %" PRIu64
					      " does not apply to the archive (%s); nothing was changed",
					      j->path, re->seq + 1, re->pos, td_strerror(e));
				break;
			}
		}
		re->last = rec;
		re->pos += sz;
		re->seq++;
	}
	free(buf);
	return err;
}

/* Phase 3, for a journal whose header names another archive: fine only
 * when it was compacted into this one (its last record is a COMPACT naming
 * this archive); then, writable, it is emptied. *keep is 1 when the
 * caller hands j out. */
static int foreign(td_journal *j, int ro, const replay_end *re, const uint8_t h[J_HDR], const char *archive_path,
		   uint64_t asize, uint64_t asum, td_journal_report *rep, int *keep)
{
	int err;
	*keep = 0;
	if (re->r == 0 && re->seq > 0 && re->last.type == TD_REC_COMPACT && re->last.off == asize &&
	    re->last.len == asum) {
		if (ro)
			return TD_OK; /* already folded in, nothing to replay */
		if ((err = td_journal_reset(j, asize, asum)))
			return err;
		rep->reset = 1;
		say(rep->msg, sizeof rep->msg,
		    "journal '%s': its %" PRIu64 " records were already compacted into the archive; "
		    "started a new journal", j->path, re->seq - 1);
		rep->bytes = J_HDR;
		*keep = 1;
		return TD_OK;
	}
	return td_fail(TD_ECORRUPT,
		       "journal '%s' belongs to another archive (size %" PRIu64 ", checksum %016" PRIx64
		       ") than '%s' (size %" PRIu64 ", checksum %016" PRIx64
		       "); move the journal away to mount without its edits",
		       j->path, get64(h + 16), get64(h + 24), archive_path, asize, asum);
}

/* Phase 4, for damage after the intact records: read-only, report it;
 * writable, save the tail (save_tail), cut it off and report both. */
static int repair_tail(td_journal *j, int ro, const replay_end *re, uint64_t fsize, td_journal_report *rep)
{
	rep->damaged_off = re->pos;
	rep->dropped = fsize - re->pos;
	if (ro) {
		say(rep->msg, sizeof rep->msg,
		    "journal '%s': %s at byte offset %" PRIu64 "; replayed the %" PRIu64
		    " records before it, ignored the last %" PRIu64 " bytes",
		    j->path, re->why, re->pos, re->seq, fsize - re->pos);
		return TD_OK;
	}
	char saved[4200];
	int err = save_tail(j->fd, j->path, re->pos, fsize, saved, sizeof saved);
	if (err)
		return err;
	if (ftruncate(j->fd, (off_t)re->pos) != 0 || fsync(j->fd) != 0)
		return td_fail(TD_EIO, "%s: cannot truncate the damaged tail: %s", j->path, strerror(errno));
	say(rep->msg, sizeof rep->msg,
	    "journal '%s': %s at byte offset %" PRIu64 "; kept the %" PRIu64
	    " records before it, cut off the last %" PRIu64 " bytes (saved in '%s')",
	    j->path, re->why, re->pos, re->seq, fsize - re->pos, saved);
	return TD_OK;
}

int td_journal_open(const char *archive_path, td_edit *ed, unsigned flags, td_journal **out,
		    td_journal_report *rep)
{
	td_journal_report dummy;
	if (!rep)
		rep = &dummy;
	memset(rep, 0, sizeof(*rep));
	*out = NULL;
	uint64_t asize, asum;
	int err = td_journal_archive_id(archive_path, &asize, &asum);
	if (err)
		return err;
	td_journal *j = calloc(1, sizeof(*j));
	if (!j || !(j->path = cat(archive_path, ".journal"))) {
		free(j);
		return TD_ENOMEM;
	}
	j->flags = flags;
	j->fd = -1;
	int ro = (flags & TD_JOURNAL_READONLY) != 0, mine = 0, keep = 0;
	uint64_t fsize = 0;
	uint8_t h[J_HDR];
	replay_end re;
	if (!ro && (err = td_tmp_sweep(archive_path, &rep->swept, rep->swept_msg, sizeof rep->swept_msg)))
		goto done;
	if ((err = open_checked(j, ro, asize, asum, &fsize, &mine, h)) || j->fd < 0 ||
	    (err = replay(j, ed, fsize, mine, &re)))
		goto done;
	if (!mine) {
		err = foreign(j, ro, &re, h, archive_path, asize, asum, rep, &keep);
		goto done;
	}
	rep->records = re.seq;
	rep->bytes = re.pos;
	j->end = re.pos;
	j->seq = re.seq;
	if (re.r < 0 && (err = repair_tail(j, ro, &re, fsize, rep)))
		goto done;
	keep = !ro;
done:
	if (err || !keep) {
		td_journal_close(j);
		return err;
	}
	*out = j;
	return TD_OK;
}
