/* engine_journal: replay, damage recovery (flipped byte, torn record, garbage) and compaction crash states. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine_edit_model.h"
#include "td_compact.h"
#include "td_edit.h"
#include "td_journal.h"
#include "td_lock.h"

#define NOPS 60

typedef struct bytes {
	uint8_t *p;
	size_t n;
} bytes;

static void put(bytes *b, const void *s, size_t n)
{
	b->p = realloc(b->p, b->n + n + 1);
	memcpy(b->p + b->n, s, n);
	b->n += n;
}

/* Serialise the whole edited tree (paths, types, modes, texts). */
static void snap_dir(const td_edit *ed, td_node dir, bytes *out)
{
	uint64_t cookie = 0;
	td_node c;
	const char *nm;
	size_t nl;
	while (td_edit_dir_next(ed, dir, &cookie, &c, &nm, &nl) == TD_OK) {
		td_stat st;
		cr_assert_eq(td_edit_stat(ed, c, &st), TD_OK);
		char hdr[64];
		int k = snprintf(hdr, sizeof hdr, "\n%o %llu ", (unsigned)st.mode, (unsigned long long)st.size);
		put(out, hdr, (size_t)k);
		put(out, nm, nl);
		put(out, ":", 1);
		if (S_ISDIR(st.mode)) {
			snap_dir(ed, c, out);
			put(out, "\n..", 3);
			continue;
		}
		uint8_t *buf = malloc(st.size + 1);
		size_t got;
		cr_assert_eq(td_edit_read(ed, c, 0, buf, st.size, &got, NULL), TD_OK);
		put(out, buf, got);
		free(buf);
	}
}

static bytes snapshot(const td_edit *ed)
{
	bytes b = { 0 };
	put(&b, "/", 1);
	snap_dir(ed, TD_ROOT, &b);
	return b;
}

static int same(bytes a, bytes b)
{
	return a.n == b.n && !memcmp(a.p, b.p, a.n);
}

static bytes slurp(const char *path)
{
	bytes b = { 0 };
	FILE *f = fopen(path, "rb");
	cr_assert(f, "%s", path);
	uint8_t buf[65536];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, f)) > 0)
		put(&b, buf, n);
	fclose(f);
	return b;
}

static void spit(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	cr_assert(f, "%s", path);
	cr_assert_eq(fwrite(p, 1, n, f), n);
	fclose(f);
}

/* Shared fixture, built per test (Criterion forks per test). */
static char *tmp, *ap, *jp;
static bytes snaps[NOPS + 1];
static uint64_t offs[NOPS + 1];
static bytes journal;

static void one_op(td_edit *ed, uint64_t *rs, int i)
{
	static const char *const files[] = { "f0", "docs/f1", "docs/old/f2", "src/f3" };
	uint8_t d[100];
	size_t len = 1 + em_rand(rs) % sizeof d;
	em_text(rs, d, len);
	if (i % 10 == 9) {
		char nm[16];
		snprintf(nm, sizeof nm, "new%d", i);
		cr_assert_eq(td_edit_create(ed, TD_ROOT, nm, strlen(nm), S_IFREG | 0644, NULL, NULL), TD_OK);
		return;
	}
	td_node n;
	cr_assert_eq(td_edit_lookup_path(ed, files[i % 4], &n), TD_OK);
	td_stat st;
	td_edit_stat(ed, n, &st);
	uint64_t off = em_rand(rs) % (st.size + 1);
	switch (i % 3) {
	case 0:
		cr_assert_eq(td_edit_insert(ed, n, off, d, len), TD_OK);
		break;
	case 1:
		cr_assert_eq(td_edit_write(ed, n, off, d, len), TD_OK);
		break;
	default:
		cr_assert_eq(td_edit_delete(ed, n, off, len), TD_OK);
		break;
	}
}

static void setup(void)
{
	uint64_t rs = 42;
	tmp = em_tmpdir();
	ap = malloc(strlen(tmp) + 16);
	sprintf(ap, "%s/a.tadoc", tmp);
	jp = malloc(strlen(ap) + 16);
	sprintf(jp, "%s.journal", ap);
	model m;
	em_init(&m);
	em_add(&m, "docs", 'd', 0755, NULL, 0);
	em_add(&m, "docs/old", 'd', 0755, NULL, 0);
	em_add(&m, "src", 'd', 0755, NULL, 0);
	static const char *const files[] = { "f0", "docs/f1", "docs/old/f2", "src/f3" };
	for (int i = 0; i < 4; i++) {
		uint8_t d[2000];
		em_text(&rs, d, sizeof d);
		em_add(&m, files[i], 'f', 0644, d, sizeof d);
	}
	cr_assert_eq(em_write_archive(&m, ap), TD_OK);
	em_free(&m);
	td_archive *a;
	td_edit *ed;
	td_journal *j;
	cr_assert_eq(td_archive_open(ap, 0, &a), TD_OK);
	cr_assert_eq(td_edit_new(a, &ed), TD_OK);
	cr_assert_eq(td_journal_open(ap, ed, TD_JOURNAL_SYNC, &j, NULL), TD_OK, "%s", td_errdetail());
	td_edit_set_log(ed, td_journal_log, j);
	snaps[0] = snapshot(ed);
	offs[0] = td_journal_bytes(j);
	cr_assert_eq(offs[0], 64);
	for (int i = 0; i < NOPS; i++) {
		one_op(ed, &rs, i);
		snaps[i + 1] = snapshot(ed);
		offs[i + 1] = td_journal_bytes(j);
		cr_assert_eq(td_journal_seq(j), (uint64_t)i + 1);
	}
	td_journal_close(j);
	td_edit_free(ed);
	td_archive_close(a);
	journal = slurp(jp);
	cr_assert_eq(journal.n, offs[NOPS]);
}

static void teardown(void)
{
	for (int i = 0; i <= NOPS; i++)
		free(snaps[i].p);
	free(journal.p);
	free(ap);
	free(jp);
	em_rmdir(tmp);
}

/* Open with the journal bytes `jb`; expect `records` replayed and damage at
 * `damage` (0: none). Checks the state, the report, the truncation, the
 * saved tail, and that appending and reopening work afterwards. */
static void recover(bytes jb, uint64_t records, uint64_t damage, const char *why)
{
	spit(jp, jb.p, jb.n);
	td_archive *a;
	td_edit *ed;
	td_journal *j;
	td_journal_report rep;
	cr_assert_eq(td_archive_open(ap, 0, &a), TD_OK);
	cr_assert_eq(td_edit_new(a, &ed), TD_OK);
	cr_assert_eq(td_journal_open(ap, ed, 0, &j, &rep), TD_OK, "%s", td_errdetail());
	cr_assert_eq(rep.records, records, "replayed %llu records, expected %llu", (unsigned long long)rep.records,
		     (unsigned long long)records);
	cr_assert_eq(rep.damaged_off, damage, "damage reported at %llu, expected %llu",
		     (unsigned long long)rep.damaged_off, (unsigned long long)damage);
	bytes s = snapshot(ed);
	cr_assert(same(s, snaps[records]), "state after recovery differs from the state after %llu changes",
		  (unsigned long long)records);
	free(s.p);
	if (damage) {
		char off[64];
		snprintf(off, sizeof off, "byte offset %llu", (unsigned long long)damage);
		cr_assert(strstr(rep.msg, jp), "message names the journal: %s", rep.msg);
		cr_assert(strstr(rep.msg, off), "message names the offset: %s", rep.msg);
		cr_assert(strstr(rep.msg, why), "message says '%s': %s", why, rep.msg);
		cr_assert_eq(rep.dropped, jb.n - damage);
		/* The journal was cut at the damage; the tail was saved. */
		struct stat st;
		cr_assert_eq(stat(jp, &st), 0);
		cr_assert_eq((uint64_t)st.st_size, damage);
		char saved[4200];
		snprintf(saved, sizeof saved, "%s.damaged-%llu", jp, (unsigned long long)damage);
		bytes t = slurp(saved);
		cr_assert_eq(t.n, jb.n - damage);
		cr_assert(!memcmp(t.p, jb.p + damage, t.n));
		free(t.p);
		unlink(saved);
	} else {
		cr_assert_str_empty(rep.msg);
	}
	/* Life goes on: one more change, reopen, everything is there. */
	td_edit_set_log(ed, td_journal_log, j);
	cr_assert_eq(td_edit_create(ed, TD_ROOT, "after", 5, S_IFDIR | 0755, NULL, NULL), TD_OK);
	bytes want = snapshot(ed);
	td_journal_close(j);
	td_edit_free(ed);
	cr_assert_eq(td_edit_new(a, &ed), TD_OK);
	cr_assert_eq(td_journal_open(ap, ed, 0, &j, &rep), TD_OK, "%s", td_errdetail());
	cr_assert_eq(rep.records, records + 1);
	cr_assert_eq(rep.damaged_off, 0);
	s = snapshot(ed);
	cr_assert(same(s, want));
	free(s.p);
	free(want.p);
	td_journal_close(j);
	td_edit_free(ed);
	td_archive_close(a);
}

TestSuite(journal, .init = setup, .fini = teardown);

Test(journal, clean_replay)
{
	recover(journal, NOPS, 0, "");
}

Test(journal, flipped_byte_in_a_record)
{
	for (int k = 1; k <= NOPS; k += 13) {
		bytes jb = { 0 };
		put(&jb, journal.p, journal.n);
		/* a byte inside the payload of record k (1-based) */
		uint64_t at = offs[k - 1] + (offs[k] - offs[k - 1]) / 2;
		jb.p[at] ^= 0x20;
		recover(jb, (uint64_t)k - 1, offs[k - 1], "checksum mismatch");
		free(jb.p);
	}
}

Test(journal, flipped_byte_in_a_size_field)
{
	bytes jb = { 0 };
	put(&jb, journal.p, journal.n);
	jb.p[offs[39] + 1] ^= 0x40; /* record 40's size: now past the end */
	recover(jb, 39, offs[39], "cut short");
	free(jb.p);
	jb = (bytes){ 0 };
	put(&jb, journal.p, journal.n);
	jb.p[offs[20]] ^= 0x01; /* record 21's size: no longer a multiple of 8 */
	recover(jb, 20, offs[20], "impossible record size");
	free(jb.p);
}

Test(journal, record_cut_in_half)
{
	bytes jb = { 0 };
	put(&jb, journal.p, offs[NOPS - 1] + (offs[NOPS] - offs[NOPS - 1]) / 2);
	recover(jb, NOPS - 1, offs[NOPS - 1], "cut short");
	free(jb.p);
	/* cut inside the 16-byte record head */
	jb = (bytes){ 0 };
	put(&jb, journal.p, offs[NOPS - 1] + 5);
	recover(jb, NOPS - 1, offs[NOPS - 1], "cut short");
	free(jb.p);
}

Test(journal, garbage_appended)
{
	bytes jb = { 0 };
	put(&jb, journal.p, journal.n);
	uint8_t g[37];
	uint64_t rs = 3;
	for (size_t i = 0; i < sizeof g; i++)
		g[i] = (uint8_t)em_rand(&rs);
	put(&jb, g, sizeof g);
	recover(jb, NOPS, offs[NOPS], "");
	free(jb.p);
	/* zeros, as a crash after a file-size update may leave */
	jb = (bytes){ 0 };
	put(&jb, journal.p, journal.n);
	uint8_t z[4096] = { 0 };
	put(&jb, z, sizeof z);
	recover(jb, NOPS, offs[NOPS], "impossible record size");
	free(jb.p);
	/* a valid record repeated: its sequence number is out of order */
	jb = (bytes){ 0 };
	put(&jb, journal.p, journal.n);
	put(&jb, journal.p + offs[NOPS - 1], offs[NOPS] - offs[NOPS - 1]);
	recover(jb, NOPS, offs[NOPS], "sequence number");
	free(jb.p);
}

Test(journal, bad_header_touches_nothing)
{
	bytes jb = { 0 };
	put(&jb, journal.p, journal.n);
	jb.p[20] ^= 1; /* archive size field: header checksum fails */
	spit(jp, jb.p, jb.n);
	td_archive *a;
	td_edit *ed;
	td_journal *j;
	cr_assert_eq(td_archive_open(ap, 0, &a), TD_OK);
	cr_assert_eq(td_edit_new(a, &ed), TD_OK);
	cr_assert_eq(td_journal_open(ap, ed, 0, &j, NULL), TD_ECORRUPT);
	cr_assert(strstr(td_errdetail(), jp), "%s", td_errdetail());
	bytes after = slurp(jp);
	cr_assert(same(after, jb), "the journal was modified");
	free(after.p);
	free(jb.p);
	td_edit_free(ed);
	td_archive_close(a);
}

Test(journal, readonly_replay_leaves_the_file)
{
	bytes jb = { 0 };
	put(&jb, journal.p, offs[30] + 11);
	spit(jp, jb.p, jb.n);
	td_archive *a;
	td_edit *ed;
	td_journal *j = (td_journal *)1;
	td_journal_report rep;
	cr_assert_eq(td_archive_open(ap, 0, &a), TD_OK);
	cr_assert_eq(td_edit_new(a, &ed), TD_OK);
	cr_assert_eq(td_journal_open(ap, ed, TD_JOURNAL_READONLY, &j, &rep), TD_OK);
	cr_assert_null(j);
	cr_assert_eq(rep.records, 30);
	cr_assert_eq(rep.damaged_off, offs[30]);
	bytes s = snapshot(ed);
	cr_assert(same(s, snaps[30]));
	free(s.p);
	bytes after = slurp(jp);
	cr_assert(same(after, jb));
	free(after.p);
	free(jb.p);
	td_edit_free(ed);
	td_archive_close(a);
}

/* The states a crash during compaction can leave, and that a journal is
 * never replayed onto the archive compacted from it. */
Test(journal, compaction_crash_states)
{
	char newp[4200], oldp[4200];
	snprintf(newp, sizeof newp, "%s/new.tadoc", tmp);
	snprintf(oldp, sizeof oldp, "%s/old.tadoc", tmp);
	bytes oldarch = slurp(ap);
	/* Compact for real; keep the result aside. */
	td_archive *a;
	td_edit *ed;
	td_journal *j;
	td_journal_report rep;
	int lock;
	cr_assert_eq(td_lock_archive(ap, 1, 0, &lock), TD_OK);
	cr_assert_eq(td_archive_open(ap, 0, &a), TD_OK);
	cr_assert_eq(td_edit_new(a, &ed), TD_OK);
	cr_assert_eq(td_journal_open(ap, ed, 0, &j, &rep), TD_OK);
	cr_assert_eq(td_compact(a, ed, j, ap, NULL, &lock), TD_OK, "%s", td_errdetail());
	td_journal_close(j);
	td_edit_free(ed);
	td_archive_close(a);
	td_unlock_archive(lock);
	bytes newarch = slurp(ap);
	bytes emptyj = slurp(jp);
	cr_assert_eq(emptyj.n, 64);
	uint64_t nsize, nsum;
	cr_assert_eq(td_journal_archive_id(ap, &nsize, &nsum), TD_OK);
	/* The journal with a COMPACT record naming the new archive. */
	spit(ap, oldarch.p, oldarch.n);
	spit(jp, journal.p, journal.n);
	cr_assert_eq(td_archive_open(ap, 0, &a), TD_OK);
	cr_assert_eq(td_edit_new(a, &ed), TD_OK);
	cr_assert_eq(td_journal_open(ap, ed, 0, &j, &rep), TD_OK);
	td_edit_rec r = { .type = TD_REC_COMPACT, .off = nsize, .len = nsum };
	cr_assert_eq(td_journal_log(j, &r), TD_OK);
	td_journal_close(j);
	td_edit_free(ed);
	td_archive_close(a);
	bytes jcompact = slurp(jp);

	/* Crash after step 2: old archive + journal ending in COMPACT. */
	cr_assert_eq(td_archive_open(ap, 0, &a), TD_OK);
	cr_assert_eq(td_edit_new(a, &ed), TD_OK);
	cr_assert_eq(td_journal_open(ap, ed, 0, &j, &rep), TD_OK, "%s", td_errdetail());
	cr_assert_eq(rep.records, NOPS + 1);
	bytes s = snapshot(ed);
	cr_assert(same(s, snaps[NOPS]));
	free(s.p);
	td_journal_close(j);
	td_edit_free(ed);
	td_archive_close(a);

	/* Crash after step 3: new archive + that journal: emptied, not replayed. */
	spit(ap, newarch.p, newarch.n);
	spit(jp, jcompact.p, jcompact.n);
	cr_assert_eq(td_archive_open(ap, 0, &a), TD_OK);
	cr_assert_eq(td_edit_new(a, &ed), TD_OK);
	cr_assert_eq(td_journal_open(ap, ed, 0, &j, &rep), TD_OK, "%s", td_errdetail());
	cr_assert_eq(rep.reset, 1);
	cr_assert_eq(td_edit_changed(ed), 0);
	s = snapshot(ed);
	cr_assert(same(s, snaps[NOPS]), "new archive differs from the edited state");
	free(s.p);
	cr_assert_eq(td_journal_bytes(j), 64);
	td_journal_close(j);
	td_edit_free(ed);
	td_archive_close(a);

	/* The old journal (no COMPACT record) beside the new archive is refused:
	 * replaying it would apply every edit twice. */
	spit(jp, journal.p, journal.n);
	cr_assert_eq(td_archive_open(ap, 0, &a), TD_OK);
	cr_assert_eq(td_edit_new(a, &ed), TD_OK);
	cr_assert_eq(td_journal_open(ap, ed, 0, &j, &rep), TD_ECORRUPT);
	cr_assert(strstr(td_errdetail(), "another archive"), "%s", td_errdetail());
	bytes after = slurp(jp);
	cr_assert(same(after, journal));
	free(after.p);
	td_edit_free(ed);
	td_archive_close(a);

	/* td_compact_path end to end: old archive + journal -> new archive. */
	spit(ap, oldarch.p, oldarch.n);
	spit(jp, journal.p, journal.n);
	int rewritten = 0;
	cr_assert_eq(td_compact_path(ap, NULL, NULL, &rewritten), TD_OK, "%s", td_errdetail());
	cr_assert_eq(rewritten, 1);
	cr_assert_eq(td_archive_open(ap, TD_OPEN_VERIFY, &a), TD_OK);
	cr_assert_eq(td_edit_new(a, &ed), TD_OK);
	cr_assert_eq(td_journal_open(ap, ed, 0, &j, &rep), TD_OK);
	cr_assert_eq(rep.records, 0);
	s = snapshot(ed);
	cr_assert(same(s, snaps[NOPS]));
	free(s.p);
	td_journal_close(j);
	td_edit_free(ed);
	td_archive_close(a);
	free(oldarch.p);
	free(newarch.p);
	free(emptyj.p);
	free(jcompact.p);
}

/* Any single flipped byte or cut anywhere: open never crashes, and either
 * refuses a broken header or replays exactly a prefix of the changes. */
Test(journal, random_damage_keeps_a_prefix)
{
	uint64_t rs = 11;
	for (int it = 0; it < 150; it++) {
		bytes jb = { 0 };
		put(&jb, journal.p, journal.n);
		uint64_t at = em_rand(&rs) % journal.n;
		if (it % 3 == 0)
			jb.n = at; /* cut */
		else
			jb.p[at] ^= (uint8_t)(1u << (em_rand(&rs) % 8));
		spit(jp, jb.p, jb.n);
		td_archive *a;
		td_edit *ed;
		td_journal *j;
		td_journal_report rep;
		cr_assert_eq(td_archive_open(ap, 0, &a), TD_OK);
		cr_assert_eq(td_edit_new(a, &ed), TD_OK);
		int err = td_journal_open(ap, ed, 0, &j, &rep);
		if (at < 64) {
			cr_assert_eq(err, TD_ECORRUPT, "damage in the header at %llu", (unsigned long long)at);
		} else {
			cr_assert_eq(err, TD_OK, "%s", td_errdetail());
			/* the first record touched by the damage and all after it go */
			uint64_t k = 0;
			while (k < NOPS && offs[k + 1] <= at)
				k++;
			cr_assert_eq(rep.records, k, "damage at %llu: %llu records kept, expected %llu",
				     (unsigned long long)at, (unsigned long long)rep.records, (unsigned long long)k);
			bytes s = snapshot(ed);
			cr_assert(same(s, snaps[k]));
			free(s.p);
			char saved[4200];
			snprintf(saved, sizeof saved, "%s.damaged-%llu", jp, (unsigned long long)rep.damaged_off);
			unlink(saved);
			td_journal_close(j);
		}
		td_edit_free(ed);
		td_archive_close(a);
		free(jb.p);
	}
}
