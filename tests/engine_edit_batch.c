/* engine_edit_batch: insert/append batches in sequence, in batch and mixed equal a byte-array model; the logged records replay to the same files. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "edit_batch_model.h"
#include "td_archive.h"
#include "td_edit.h"
#include "td_edit_batch.h"
#include "td_writer.h"

#define NFILES 6

typedef struct fixture {
	char dir[64];
	char path[128];
	td_archive *a;
	td_edit *ed;
	ebm m;
} fixture;

/* An archive of NFILES files (one empty) plus a directory, its edit state,
 * and the model holding the same bytes. */
static void fx_open(fixture *fx, uint64_t seed)
{
	strcpy(fx->dir, "/tmp/td_ebatchXXXXXX");
	cr_assert_not_null(mkdtemp(fx->dir));
	snprintf(fx->path, sizeof fx->path, "%s/a.tadoc", fx->dir);
	ebm_init(&fx->m, seed, NFILES);
	td_writer *w = td_writer_new(NULL);
	cr_assert_not_null(w);
	cr_assert_eq(td_writer_add_dir(w, "sub", 0755, 1, 0), TD_OK);
	uint8_t buf[5000];
	size_t len[NFILES];
	for (int i = 0; i < NFILES; i++) {
		char name[16];
		snprintf(name, sizeof name, "f%d", i);
		len[i] = i == 0 ? 0 : (size_t)(ebm_rand(&fx->m) % (i == 1 ? 40 : 4000));
		for (size_t k = 0; k < len[i]; k++)
			buf[k] = fx->m.pool[ebm_rand(&fx->m) % sizeof fx->m.pool];
		cr_assert_eq(td_writer_add_file(w, name, 0644, 1, 0, buf, len[i]), TD_OK);
		ebm_set(&fx->m, (size_t)i, 0, buf, len[i]);
	}
	cr_assert_eq(td_writer_finish(w, fx->path), TD_OK, "%s", td_errdetail());
	cr_assert_eq(td_archive_open(fx->path, 0, &fx->a), TD_OK);
	cr_assert_eq(td_edit_new(fx->a, &fx->ed), TD_OK);
	for (int i = 0; i < NFILES; i++) {
		char name[16];
		snprintf(name, sizeof name, "f%d", i);
		cr_assert_eq(td_edit_lookup_path(fx->ed, name, &fx->m.f[i].node), TD_OK);
	}
}

static void fx_close(fixture *fx)
{
	td_edit_free(fx->ed);
	td_archive_close(fx->a);
	ebm_free(&fx->m);
	unlink(fx->path);
	rmdir(fx->dir);
}

/* Every file of ed equals the model. */
static void check_files(const td_edit *ed, const ebm *m, const char *what)
{
	for (size_t i = 0; i < m->nf; i++) {
		const ebm_file *f = &m->f[i];
		uint8_t *buf = malloc(f->n + 16);
		size_t got = 0;
		cr_assert_eq(td_edit_read(ed, f->node, 0, buf, f->n + 16, &got, NULL), TD_OK);
		cr_assert_eq(got, f->n, "%s: file %zu has %zu bytes, the model %zu", what, i, got, f->n);
		cr_assert(memcmp(buf, f->b, f->n) == 0, "%s: file %zu differs from the model", what, i);
		free(buf);
	}
}

typedef struct logbuf {
	td_edit_rec *v;
	size_t n, cap;
} logbuf;

static int log_rec(void *ctx, const td_edit_rec *r)
{
	logbuf *l = ctx;
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 256;
		l->v = realloc(l->v, l->cap * sizeof *l->v);
	}
	l->v[l->n++] = *r;
	return TD_OK;
}

static const char *mode_name(int mode)
{
	return mode == TD_BATCH_SEQUENCE ? "in sequence" : mode == TD_BATCH_SNAPSHOT ? "in batch" : "mixed";
}

/* Random batches of every meaning, applied one after the other. */
static void random_batches(int mode, uint64_t seed)
{
	fixture fx;
	fx_open(&fx, seed);
	logbuf lb = { 0 };
	td_edit_set_log(fx.ed, log_rec, &lb);
	static const size_t sizes[] = { 1, 2, 3, 7, 30, 200, 1000 };
	td_edit_rec *recs = malloc(1000 * sizeof *recs);
	for (int round = 0; round < 40; round++) {
		size_t n = sizes[ebm_rand(&fx.m) % 7];
		size_t hot = ebm_rand(&fx.m) % 3 == 0 ? 1 : 0;
		ebm_gen(&fx.m, recs, n, mode, hot);
		size_t applied = 0;
		int err = td_edit_apply_batch(fx.ed, recs, n, mode, &applied);
		cr_assert_eq(err, TD_OK, "%s round %d: %s (%s)", mode_name(mode), round, td_strerror(err), td_errdetail());
		cr_assert_eq(applied, n);
		ebm_apply_batch(&fx.m, recs, n, mode);
		char what[64];
		snprintf(what, sizeof what, "%s round %d (%zu records)", mode_name(mode), round, n);
		check_files(fx.ed, &fx.m, what);
	}
	/* the journal got plain in-sequence inserts that replay to the same files */
	td_edit *re;
	cr_assert_eq(td_edit_new(fx.a, &re), TD_OK);
	for (size_t i = 0; i < lb.n; i++) {
		cr_assert_eq(lb.v[i].type, TD_REC_INSERT);
		cr_assert_eq(lb.v[i].flags, 0u);
		cr_assert_neq(lb.v[i].off, TD_OFF_END);
		cr_assert_eq(td_edit_replay(re, &lb.v[i]), TD_OK, "replay %zu: %s", i, td_errdetail());
	}
	check_files(re, &fx.m, "replayed journal");
	td_edit_free(re);
	free(lb.v);
	free(recs);
	fx_close(&fx);
}

Test(edit_batch, in_sequence_equals_model)
{
	random_batches(TD_BATCH_SEQUENCE, 1);
}

Test(edit_batch, in_batch_equals_model)
{
	random_batches(TD_BATCH_SNAPSHOT, 2);
}

Test(edit_batch, mixed_equals_model)
{
	random_batches(TD_BATCH_MIXED, 3);
}

/* Small hand-worked batches on "abc". */
static void hand(const char *const *ops, size_t n, int mode, const char *want)
{
	fixture fx;
	fx_open(&fx, 9);
	td_node f1 = fx.m.f[1].node;
	cr_assert_eq(td_edit_truncate(fx.ed, f1, 0), TD_OK);
	cr_assert_eq(td_edit_insert(fx.ed, f1, 0, "abc", 3), TD_OK);
	td_edit_rec r[8];
	memset(r, 0, sizeof r);
	for (size_t i = 0; i < n; i++) {
		/* "s3Y": in batch at 3, "q1X": in sequence at 1, "e": end */
		const char *o = ops[i];
		r[i].type = TD_REC_INSERT;
		r[i].node = f1;
		r[i].flags = o[0] == 's' ? TD_EDIT_SNAPSHOT : 0;
		r[i].off = o[1] == 'e' ? TD_OFF_END : (uint64_t)(o[1] - '0');
		r[i].data = o + 2;
		r[i].data_len = strlen(o + 2);
	}
	cr_assert_eq(td_edit_apply_batch(fx.ed, r, n, mode, NULL), TD_OK, "%s", td_errdetail());
	char buf[64] = { 0 };
	size_t got = 0;
	cr_assert_eq(td_edit_read(fx.ed, f1, 0, buf, sizeof buf - 1, &got, NULL), TD_OK);
	cr_assert_str_eq(buf, want, "%s: got '%s', want '%s'", mode_name(mode), buf, want);
	fx_close(&fx);
}

Test(edit_batch, hand_worked)
{
	const char *a[] = { "q1X", "q2Y" };
	hand(a, 2, TD_BATCH_SEQUENCE, "aXYbc");
	hand(a, 2, TD_BATCH_SNAPSHOT, "aXbYc");
	const char *b[] = { "s1X", "q2Y" };
	hand(b, 2, TD_BATCH_MIXED, "aXYbc");
	const char *c[] = { "q1X", "s2Y" };
	hand(c, 2, TD_BATCH_MIXED, "aXbYc");
	const char *d[] = { "qe1", "q02", "qe3" };
	hand(d, 3, TD_BATCH_SEQUENCE, "2abc13");
	hand(d, 3, TD_BATCH_SNAPSHOT, "2abc13");
	const char *e[] = { "s1X", "s1Y", "s0Z", "s3W" };
	hand(e, 4, TD_BATCH_SNAPSHOT, "ZaXYbcW");
	hand(e, 4, TD_BATCH_MIXED, "ZaXYbcW");
	/* in sequence into the middle of bytes the batch inserted earlier */
	const char *f[] = { "s1XYZ", "q2-", "s1+" };
	hand(f, 3, TD_BATCH_MIXED, "aX-YZ+bc");
}

Test(edit_batch, errors_leave_the_state_untouched)
{
	fixture fx;
	fx_open(&fx, 5);
	td_node f1 = fx.m.f[1].node, f2 = fx.m.f[2].node;
	uint64_t n1 = fx.m.f[1].n;
	td_edit_rec r[3];
	memset(r, 0, sizeof r);
	for (int i = 0; i < 3; i++) {
		r[i].type = TD_REC_INSERT;
		r[i].node = f1;
		r[i].data = "xy";
		r[i].data_len = 2;
	}
	/* in sequence: the second may go to n1 + 2, not further */
	r[1].off = n1 + 2;
	cr_assert_eq(td_edit_apply_batch(fx.ed, r, 2, TD_BATCH_SEQUENCE, NULL), TD_OK);
	n1 += 4;
	r[1].off = n1 + 3;
	size_t applied = 7;
	cr_assert_eq(td_edit_apply_batch(fx.ed, r, 2, TD_BATCH_SEQUENCE, &applied), TD_EINVAL);
	cr_assert_eq(applied, 0u);
	cr_assert(strstr(td_errdetail(), "record 1") != NULL, "%s", td_errdetail());
	/* in batch: offsets refer to the snapshot */
	r[1].off = n1 + 1;
	cr_assert_eq(td_edit_apply_batch(fx.ed, r, 2, TD_BATCH_SNAPSHOT, NULL), TD_EINVAL);
	r[1].off = n1;
	r[2].node = f2;
	r[2].off = fx.m.f[2].n + 1;
	cr_assert_eq(td_edit_apply_batch(fx.ed, r, 3, TD_BATCH_SNAPSHOT, NULL), TD_EINVAL);
	cr_assert(strstr(td_errdetail(), "record 2") != NULL, "%s", td_errdetail());
	td_stat st;
	cr_assert_eq(td_edit_stat(fx.ed, f1, &st), TD_OK);
	cr_assert_eq(st.size, n1, "failed batches changed the file");
	/* not an insert, a directory, an unknown mode or flag */
	r[0].type = TD_REC_WRITE;
	cr_assert_eq(td_edit_apply_batch(fx.ed, r, 1, TD_BATCH_SEQUENCE, NULL), TD_EINVAL);
	r[0].type = TD_REC_INSERT;
	td_node sub;
	cr_assert_eq(td_edit_lookup_path(fx.ed, "sub", &sub), TD_OK);
	r[0].node = sub;
	cr_assert_eq(td_edit_apply_batch(fx.ed, r, 1, TD_BATCH_SEQUENCE, NULL), TD_EISDIR);
	r[0].node = f1;
	cr_assert_eq(td_edit_apply_batch(fx.ed, r, 1, 7, NULL), TD_EINVAL);
	r[0].flags = 0x1000;
	cr_assert_eq(td_edit_apply_batch(fx.ed, r, 1, TD_BATCH_MIXED, NULL), TD_EINVAL);
	cr_assert_eq(td_edit_apply_batch(fx.ed, r, 0, TD_BATCH_MIXED, NULL), TD_OK);
	fx_close(&fx);
}

/* In batch, the resolved records come sorted by (file, offset) and each is
 * shifted by the bytes before it: a prefix sum. */
Test(edit_batch, in_batch_resolution_is_sorted_prefix_sums)
{
	fixture fx;
	fx_open(&fx, 11);
	td_edit_rec r[200], out[200];
	uint32_t perm[200];
	ebm_gen(&fx.m, r, 200, TD_BATCH_SNAPSHOT, 0);
	cr_assert_eq(td_edit_batch_resolve(fx.ed, r, 200, TD_BATCH_SNAPSHOT, out, perm), TD_OK);
	uint64_t shift = 0;
	for (size_t k = 0; k < 200; k++) {
		const td_edit_rec *in = &r[perm[k]];
		uint64_t p = in->off == TD_OFF_END ? ebm_find(&fx.m, in->node)->n : in->off;
		if (k && out[k].node != out[k - 1].node)
			shift = 0;
		if (k && out[k].node == out[k - 1].node)
			cr_assert(out[k - 1].off <= out[k].off);
		cr_assert_eq(out[k].off, p + shift);
		cr_assert_eq(out[k].data, in->data);
		shift += in->data_len;
	}
	fx_close(&fx);
}

/* The threaded resolver gives the same records, order and errors. */
Test(edit_batch, threads_give_the_same_records)
{
	fixture fx;
	fx_open(&fx, 13);
	size_t n = 20000;
	td_edit_rec *r = malloc(n * sizeof *r), *o1 = malloc(n * sizeof *o1), *o2 = malloc(n * sizeof *o2);
	uint32_t *p1 = malloc(n * 4), *p2 = malloc(n * 4);
	for (int mode = 0; mode < 3; mode++) {
		ebm_gen(&fx.m, r, n, mode, 0);
		cr_assert_eq(td_edit_batch_resolve(fx.ed, r, n, mode, o1, p1), TD_OK);
		cr_assert_eq(td_edit_batch_resolve_mt(fx.ed, r, n, mode, o2, p2, 4), TD_OK);
		for (size_t k = 0; k < n; k++) {
			cr_assert_eq(p1[k], p2[k], "%s: order differs at %zu", mode_name(mode), k);
			cr_assert_eq(o1[k].off, o2[k].off, "%s: offset differs at %zu", mode_name(mode), k);
			cr_assert_eq(o1[k].node, o2[k].node);
		}
		r[n - 3].off = 1u << 30;
		cr_assert_eq(td_edit_batch_resolve(fx.ed, r, n, mode, o1, p1), TD_EINVAL);
		char d1[256];
		snprintf(d1, sizeof d1, "%s", td_errdetail());
		cr_assert_eq(td_edit_batch_resolve_mt(fx.ed, r, n, mode, o2, p2, 4), TD_EINVAL);
		cr_assert_str_eq(td_errdetail(), d1);
	}
	free(r);
	free(o1);
	free(o2);
	free(p1);
	free(p2);
	fx_close(&fx);
}

/* The mixed walk as first written: the anchors in a sorted array, each step
 * a linear scan (O(k^2) per file). The treap (td_bt_*) must give the same
 * offsets. */
static void quadratic_mixed(const td_edit_rec *r, size_t n, uint64_t snap, uint64_t *at)
{
	uint64_t *anchor = malloc((n + 1) * sizeof *anchor), *alen = malloc((n + 1) * sizeof *alen);
	uint64_t cur = snap;
	for (size_t k = 0; k < n; k++) {
		uint64_t a, q;
		if (r[k].flags & TD_EDIT_SNAPSHOT) {
			a = r[k].off == TD_OFF_END ? snap : r[k].off;
			q = a;
			for (size_t j = 0; j < k && anchor[j] <= a; j++)
				q += alen[j];
		} else {
			q = r[k].off == TD_OFF_END ? cur : r[k].off;
			/* the least a with a + (lengths anchored at or before a) >= q */
			uint64_t sum = 0;
			size_t j = 0;
			for (;;) {
				uint64_t lo = j ? anchor[j - 1] : 0;
				a = q > sum ? q - sum : 0;
				if (a < lo)
					a = lo;
				if (j == k || a < anchor[j])
					break;
				uint64_t v = anchor[j];
				while (j < k && anchor[j] == v)
					sum += alen[j++];
				if (v + sum >= q) {
					a = v;
					break;
				}
			}
		}
		at[k] = q;
		size_t j = k;
		for (; j > 0 && anchor[j - 1] > a; j--) {
			anchor[j] = anchor[j - 1];
			alen[j] = alen[j - 1];
		}
		anchor[j] = a;
		alen[j] = r[k].data_len;
		cur += r[k].data_len;
	}
	free(anchor);
	free(alen);
}

/* Mixed batches of many records on one file: the resolver's treap gives the
 * offsets of the quadratic walk, on a long file (few equal anchors), a
 * 40-byte one (many) and with rising snapshot offsets (sorted keys), and
 * stays O(k log k) (20000 records in well under a second). */
Test(edit_batch, mixed_one_file_equals_quadratic_walk)
{
	fixture fx;
	fx_open(&fx, 13);
	enum { K = 20000 };
	td_edit_rec *r = malloc(K * sizeof *r), *out = malloc(K * sizeof *out);
	uint64_t *at = malloc(K * sizeof *at);
	for (int round = 0; round < 3; round++) {
		/* file 1 (40 bytes), file 2 (up to 4000), then file 2 again with
		 * rising snapshot offsets between appends (sorted keys) */
		int hot = round ? 2 : 1;
		ebm_file tmp = fx.m.f[0];
		fx.m.f[0] = fx.m.f[hot];
		ebm_gen(&fx.m, r, K, TD_BATCH_MIXED, 1);
		fx.m.f[hot] = fx.m.f[0];
		fx.m.f[0] = tmp;
		for (size_t k = 0; round == 2 && k < K; k++) {
			r[k].flags = k % 2 ? 0 : TD_EDIT_SNAPSHOT;
			r[k].off = k % 2 ? TD_OFF_END : fx.m.f[hot].n * k / K;
		}
		cr_assert_eq(td_edit_batch_resolve(fx.ed, r, K, TD_BATCH_MIXED, out, NULL), TD_OK, "%s", td_errdetail());
		quadratic_mixed(r, K, fx.m.f[hot].n, at);
		for (size_t k = 0; k < K; k++)
			cr_assert_eq(out[k].off, at[k], "file %d, record %zu: %llu, the quadratic walk %llu", hot, k,
				     (unsigned long long)out[k].off, (unsigned long long)at[k]);
	}
	free(r);
	free(out);
	free(at);
	fx_close(&fx);
}
