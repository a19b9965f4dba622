/* gpu_edit_check: a GPU edit-batch resolver against the CPU one (same records, same order) and against the byte-array model; shared by gpu_edit.c and gpu_edit_emu.cu. */
#ifndef GPU_EDIT_CHECK_H
#define GPU_EDIT_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "edit_batch_model.h"
#include "td_archive.h"
#include "td_edit.h"
#include "td_edit_batch.h"
#include "td_err.h"
#include "td_writer.h"

typedef int (*gec_resolve_fn)(void *ctx, const td_edit *ed, const td_edit_rec *recs, size_t n, int mode,
			      td_edit_rec *out, uint32_t *perm);

static int gec_failures;

#define GEC_FAIL(...)                                       \
	do {                                                \
		fprintf(stderr, "MISMATCH: " __VA_ARGS__);  \
		fputc('\n', stderr);                        \
		gec_failures++;                             \
	} while (0)

static const char *gec_mode(int mode)
{
	return mode == TD_BATCH_SEQUENCE ? "in sequence" : mode == TD_BATCH_SNAPSHOT ? "in batch" : "mixed";
}

static int gec_same(const td_edit_rec *a, const td_edit_rec *b)
{
	return a->type == b->type && a->flags == b->flags && a->node == b->node && a->off == b->off &&
	       a->data == b->data && a->data_len == b->data_len && a->time_sec == b->time_sec &&
	       a->time_nsec == b->time_nsec;
}

static void gec_check_files(const td_edit *ed, const ebm *m, const char *what)
{
	for (size_t i = 0; i < m->nf; i++) {
		const ebm_file *f = &m->f[i];
		uint8_t *buf = (uint8_t *)malloc(f->n + 16);
		size_t got = 0;
		int err = td_edit_read(ed, f->node, 0, buf, f->n + 16, &got, NULL);
		if (err || got != f->n || memcmp(buf, f->b, f->n))
			GEC_FAIL("%s: file %zu differs from the model (%zu vs %zu bytes)", what, i, got, f->n);
		free(buf);
	}
}

/* Random batches of every meaning and size up to maxbatch, on many files
 * and on one hot file: resolved by fn and by the CPU, compared record by
 * record, applied, compared with the model. Returns the failures. */
static int gec_run(gec_resolve_fn fn, void *ctx, size_t maxbatch)
{
	char dir[] = "/tmp/td_gpu_editXXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	char path[128];
	snprintf(path, sizeof path, "%s/e.tadoc", dir);
	enum { NF = 40 };
	ebm m;
	ebm_init(&m, 77, NF);
	td_writer *w = td_writer_new(NULL);
	uint8_t *buf = (uint8_t *)malloc(20000);
	for (int i = 0; i < NF; i++) {
		char name[32];
		snprintf(name, sizeof name, "d%d/f%d", i % 3, i);
		size_t len = i == 0 ? 0 : (size_t)(ebm_rand(&m) % (i % 7 ? 2000 : 20000));
		for (size_t k = 0; k < len; k++)
			buf[k] = m.pool[ebm_rand(&m) % sizeof m.pool];
		td_writer_add_file(w, name, 0644, 1, 0, buf, len);
		ebm_set(&m, (size_t)i, 0, buf, len);
	}
	free(buf);
	td_archive *a = NULL;
	td_edit *ed = NULL;
	int err = td_writer_finish(w, path);
	if (!err)
		err = td_archive_open(path, 0, &a);
	if (!err)
		err = td_edit_new(a, &ed);
	for (int i = 0; i < NF && !err; i++) {
		char name[32];
		snprintf(name, sizeof name, "d%d/f%d", i % 3, i);
		err = td_edit_lookup_path(ed, name, &m.f[i].node);
	}
	if (err) {
		fprintf(stderr, "setting up: %s (%s)\n", td_strerror(err), td_errdetail());
		return 1;
	}
	static const size_t sizes[] = {1, 2, 10, 100, 1000, 10000, 100000};
	td_edit_rec *recs = (td_edit_rec *)malloc(maxbatch * sizeof *recs);
	td_edit_rec *o1 = (td_edit_rec *)malloc(maxbatch * sizeof *o1), *o2 = (td_edit_rec *)malloc(maxbatch * sizeof *o2);
	uint32_t *p1 = (uint32_t *)malloc(maxbatch * 4), *p2 = (uint32_t *)malloc(maxbatch * 4);
	for (int mode = 0; mode < 3; mode++) {
		for (size_t s = 0; s < sizeof sizes / sizeof sizes[0] && sizes[s] <= maxbatch; s++) {
			for (int hot = 0; hot < 2; hot++) {
				size_t n = sizes[s];
				/* the model's snapshot scans make one file of 100k
				 * mixed records slow (minutes); the resolvers are
				 * O(k log k) (engine_edit_batch checks 20k against
				 * the quadratic walk) */
				if (hot && mode == TD_BATCH_MIXED && n > 10000)
					continue;
				char what[96];
				snprintf(what, sizeof what, "%s, %zu records%s", gec_mode(mode), n, hot ? ", one file" : "");
				ebm_gen(&m, recs, n, mode, hot ? 1 : 0);
				int e1 = td_edit_batch_resolve(ed, recs, n, mode, o1, p1);
				int e2 = fn(ctx, ed, recs, n, mode, o2, p2);
				if (e1 || e2) {
					GEC_FAIL("%s: cpu %s, gpu %s (%s)", what, td_strerror(e1), td_strerror(e2), td_errdetail());
					continue;
				}
				size_t bad = n;
				for (size_t k = 0; k < n && bad == n; k++)
					if (p1[k] != p2[k] || !gec_same(&o1[k], &o2[k]))
						bad = k;
				if (bad < n) {
					GEC_FAIL("%s: record %zu: cpu %u@%llu (from %u), gpu %u@%llu (from %u)", what, bad, o1[bad].node,
						 (unsigned long long)o1[bad].off, p1[bad], o2[bad].node,
						 (unsigned long long)o2[bad].off, p2[bad]);
					continue;
				}
				size_t applied = 0;
				if ((err = td_edit_apply_resolved(ed, o2, n, &applied))) {
					GEC_FAIL("%s: applying: %s (%s)", what, td_strerror(err), td_errdetail());
					continue;
				}
				ebm_apply_batch(&m, recs, n, mode);
				gec_check_files(ed, &m, what);
				printf("%-40s %s\n", what, gec_failures ? "DIFFER" : "equal (cpu, gpu, model)");
			}
		}
		/* one offset past its end: both refuse, naming the same record */
		size_t n = maxbatch < 50 ? maxbatch : 50;
		ebm_gen(&m, recs, n, mode, 0);
		recs[n / 2].off = ebm_find(&m, recs[n / 2].node)->n + 1000000;
		int e1 = td_edit_batch_resolve(ed, recs, n, mode, o1, p1);
		char d1[256];
		snprintf(d1, sizeof d1, "%s", td_errdetail());
		int e2 = fn(ctx, ed, recs, n, mode, o2, p2);
		if (e1 != TD_EINVAL || e2 != TD_EINVAL || strcmp(d1, td_errdetail()))
			GEC_FAIL("%s, bad offset: cpu %s (%s), gpu %s (%s)", gec_mode(mode), td_strerror(e1), d1,
				 td_strerror(e2), td_errdetail());
	}
	free(recs);
	free(o1);
	free(o2);
	free(p1);
	free(p2);
	td_edit_free(ed);
	td_archive_close(a);
	ebm_free(&m);
	unlink(path);
	rmdir(dir);
	return gec_failures;
}

#endif
