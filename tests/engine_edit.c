/* engine_edit: td_edit against a shadow model, journal replay, compaction, exact counts over edits. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine_edit_model.h"
#include "td_compact.h"
#include "td_edit.h"
#include "td_journal.h"
#include "td_lock.h"
#include "td_query.h"

/* A starting tree: a few directories, files of random text, a symlink, an
 * empty directory, an empty file. */
static void base_tree(model *m, uint64_t *rs, int nfiles)
{
	em_init(m);
	em_add(m, "docs", 'd', 0755, NULL, 0);
	em_add(m, "docs/old", 'd', 0750, NULL, 0);
	em_add(m, "empty", 'd', 0700, NULL, 0);
	em_add(m, "src", 'd', 0755, NULL, 0);
	em_add(m, "link", 'l', 0777, "docs/f0", 7);
	em_add(m, "zero", 'f', 0644, NULL, 0);
	static const char *const dirs[] = { "", "docs", "docs/old", "src" };
	for (int i = 0; i < nfiles; i++) {
		char name[64];
		snprintf(name, sizeof name, "f%d", i);
		char *p = em_join(dirs[i % 4], name);
		size_t n = em_rand(rs) % 3000;
		uint8_t *d = malloc(n + 1);
		em_text(rs, d, n);
		em_add(m, p, 'f', i % 3 ? 0644 : 0600, d, n);
		free(d);
		free(p);
	}
}

static const char *const names[] = { "a", "b", "c.txt", "d e", "\xc3\xbc", "f1", "f2", "x" };

/* A random entry of the given types ("f", "d", "fl", ...); NULL if none. */
static mnode *pick(model *m, uint64_t *rs, const char *types, int allow_root)
{
	for (int tries = 0; tries < 64; tries++) {
		mnode *x = &m->v[em_rand(rs) % m->n];
		if (!allow_root && !x->path[0])
			continue;
		if (strchr(types, x->type))
			return x;
	}
	return NULL;
}

static td_node node_of(const td_edit *ed, const char *path)
{
	td_node n;
	cr_assert_eq(td_edit_lookup_path(ed, path, &n), TD_OK, "lookup '%s'", path);
	return n;
}

/* Split a path into its directory node and its last name. */
static td_node parent_of(const td_edit *ed, const char *path, const char **name)
{
	const char *s = strrchr(path, '/');
	if (!s) {
		*name = path;
		return TD_ROOT;
	}
	char *d = strndup(path, (size_t)(s - path));
	td_node n = node_of(ed, d);
	free(d);
	*name = s + 1;
	return n;
}

/* One random operation on both the edit state and the model. */
static void random_op(td_edit *ed, model *m, uint64_t *rs)
{
	uint8_t data[700];
	uint64_t r = em_rand(rs);
	unsigned op = r % 100;
	mnode *f;
	if (op < 60) {
		/* content edits on a file */
		if (!(f = pick(m, rs, "f", 0)))
			return;
		td_node node = node_of(ed, f->path);
		size_t len = em_rand(rs) % 200;
		if (em_rand(rs) % 20 == 0)
			len = 600;
		em_text(rs, data, len);
		unsigned kind = (unsigned)(em_rand(rs) % 6);
		size_t off = f->len ? em_rand(rs) % (f->len + 1) : 0;
		switch (kind) {
		case 0: /* overwrite inside, maybe extending */
			cr_assert_eq(td_edit_write(ed, node, off, data, len), TD_OK);
			em_splice(f, off, len, data, len);
			break;
		case 1: /* write past the end: a hole of zeros */
			off = f->len + em_rand(rs) % 50;
			cr_assert_eq(td_edit_write(ed, node, off, data, len), TD_OK);
			em_splice(f, off, len, data, len);
			break;
		case 2: /* append */
			cr_assert_eq(td_edit_write(ed, node, f->len, data, len), TD_OK);
			em_splice(f, f->len, 0, data, len);
			break;
		case 3: { /* truncate */
			size_t ns = em_rand(rs) % (f->len + 100);
			cr_assert_eq(td_edit_truncate(ed, node, ns), TD_OK);
			if (ns < f->len)
				em_splice(f, ns, f->len - ns, NULL, 0);
			else
				em_splice(f, ns, 0, NULL, 0);
			break;
		}
		case 4: /* true insertion */
			cr_assert_eq(td_edit_insert(ed, node, off, data, len), TD_OK);
			em_splice(f, off, 0, data, len);
			break;
		default: { /* true deletion */
			size_t del = em_rand(rs) % 300;
			cr_assert_eq(td_edit_delete(ed, node, off, del), TD_OK);
			em_splice(f, off, del, NULL, 0);
			break;
		}
		}
		return;
	}
	if (op < 72) {
		/* create a file, directory or symlink */
		mnode *d = pick(m, rs, "d", 1);
		if (!d)
			return;
		const char *nm = names[em_rand(rs) % (sizeof names / sizeof *names)];
		char *p = em_join(d->path, nm);
		td_node dn = node_of(ed, d->path);
		unsigned kind = (unsigned)(em_rand(rs) % 4);
		mode_t mode = kind == 1 ? (S_IFDIR | 0755) : kind == 2 ? (S_IFLNK | 0777) : (S_IFREG | 0640);
		const char *target = "../some/target";
		int err = td_edit_create(ed, dn, nm, strlen(nm), mode, target, NULL);
		if (em_find(m, p)) {
			cr_assert_eq(err, TD_EEXIST, "create '%s' over an entry: %d", p, err);
		} else {
			cr_assert_eq(err, TD_OK, "create '%s': %s", p, td_strerror(err));
			if (kind == 1)
				em_add(m, p, 'd', 0755, NULL, 0);
			else if (kind == 2)
				em_add(m, p, 'l', 0777, target, strlen(target));
			else
				em_add(m, p, 'f', 0640, NULL, 0);
		}
		free(p);
		return;
	}
	if (op < 78) {
		/* unlink a file or symlink */
		if (!(f = pick(m, rs, "fl", 0)))
			return;
		const char *nm;
		td_node dn = parent_of(ed, f->path, &nm);
		cr_assert_eq(td_edit_unlink(ed, dn, nm, strlen(nm)), TD_OK);
		em_remove(m, f->path);
		return;
	}
	if (op < 83) {
		/* rmdir */
		if (!(f = pick(m, rs, "d", 0)))
			return;
		const char *nm;
		td_node dn = parent_of(ed, f->path, &nm);
		int err = td_edit_rmdir(ed, dn, nm, strlen(nm));
		if (em_has_children(m, f->path)) {
			cr_assert_eq(err, TD_ENOTEMPTY, "rmdir '%s': %d", f->path, err);
		} else {
			cr_assert_eq(err, TD_OK, "rmdir '%s': %s", f->path, td_strerror(err));
			em_remove(m, f->path);
		}
		return;
	}
	if (op < 95) {
		/* rename, over existing entries too */
		mnode *s = pick(m, rs, "fdl", 0);
		mnode *d = pick(m, rs, "d", 1);
		if (!s || !d)
			return;
		char *src = strdup(s->path);
		const char *nm = em_rand(rs) % 3 ? names[em_rand(rs) % (sizeof names / sizeof *names)]
						 : strrchr(src, '/') ? strrchr(src, '/') + 1 : src;
		char *dst = em_join(d->path, nm);
		unsigned flags = em_rand(rs) % 5 == 0 ? TD_RENAME_NOREPLACE : 0;
		const char *sn;
		td_node sd = parent_of(ed, src, &sn);
		td_node dd = node_of(ed, d->path);
		int err = td_edit_rename(ed, sd, sn, strlen(sn), dd, nm, strlen(nm), flags);
		int stype = s->type;
		mnode *t = em_find(m, dst);
		size_t sl = strlen(src);
		int expect;
		if (stype == 'd' && !strncmp(dst, src, sl) && (dst[sl] == '/' || dst[sl] == 0) && strcmp(dst, src))
			expect = TD_EINVAL;
		else if (t && flags)
			expect = TD_EEXIST;
		else if (t && !strcmp(dst, src))
			expect = TD_OK;
		else if (t && t->type == 'd' && stype != 'd')
			expect = TD_EISDIR;
		else if (t && t->type != 'd' && stype == 'd')
			expect = TD_ENOTDIR;
		else if (t && t->type == 'd' && em_has_children(m, dst))
			expect = TD_ENOTEMPTY;
		else
			expect = TD_OK;
		cr_assert_eq(err, expect, "rename '%s' -> '%s' (flags %u): %s, expected %s", src, dst, flags,
			     td_strerror(err), td_strerror(expect));
		if (!err && strcmp(dst, src)) {
			if (t)
				em_remove(m, dst);
			em_rename(m, src, dst);
		}
		free(src);
		free(dst);
		return;
	}
	/* chmod */
	if (!(f = pick(m, rs, "fd", 1)))
		return;
	mode_t perm = (mode_t)(0600 | (em_rand(rs) % 0200));
	cr_assert_eq(td_edit_chmod(ed, node_of(ed, f->path), perm), TD_OK);
	f->perm = perm;
}

/* Word checks on a few files of the model. */
static void check_some_words(td_edit *ed, model *m, uint64_t *rs, int n)
{
	for (int i = 0; i < n; i++) {
		mnode *f = pick(m, rs, "f", 0);
		if (f)
			em_check_words(ed, m, f, node_of(ed, f->path), rs);
	}
}

/* python3 tests/oracle.py count over the model written to a directory must
 * equal td_edit_count on the root (an oracle independent of the engine). */
static void python_oracle(td_edit *ed, const model *m, const char *tmp)
{
	const char *tests = getenv("TESTS_DIR");
	if (!tests)
		return; /* only under meson test */
	char dir[4200], cmd[9000];
	snprintf(dir, sizeof dir, "%s/shadow", tmp);
	cr_assert_eq(mkdir(dir, 0755), 0);
	/* Directories parents first: by number of components. */
	for (int depth = 0, made = 1; made; depth++) {
		made = 0;
		for (size_t i = 0; i < m->n; i++) {
			const mnode *x = &m->v[i];
			if (!x->path[0] || x->type != 'd')
				continue;
			int c = 0;
			for (const char *q = x->path; *q; q++)
				c += *q == '/';
			if (c < depth)
				continue;
			made = 1;
			if (c > depth)
				continue;
			char p[8400];
			snprintf(p, sizeof p, "%s/%s", dir, x->path);
			cr_assert_eq(mkdir(p, 0755), 0, "%s", p);
		}
	}
	for (size_t i = 0; i < m->n; i++) {
		const mnode *x = &m->v[i];
		char p[8400];
		snprintf(p, sizeof p, "%s/%s", dir, x->path);
		if (x->type == 'f') {
			FILE *fp = fopen(p, "wb");
			cr_assert(fp, "%s", p);
			fwrite(x->data, 1, x->len, fp);
			fclose(fp);
		} else if (x->type == 'l') {
			char *t = strndup((const char *)x->data, x->len);
			cr_assert_eq(symlink(t, p), 0);
			free(t);
		}
	}
	static const char *const words[] = { "the", "cat", "mat42", "h\xc3\xa9llo", "\xe4\xb8\xad\xe6\x96\x87", "x_y", "42" };
	for (size_t w = 0; w < sizeof words / sizeof *words; w++) {
		snprintf(cmd, sizeof cmd, "python3 '%s/oracle.py' count '%s' '%s'", tests, dir, words[w]);
		FILE *p = popen(cmd, "r");
		cr_assert(p);
		unsigned long long want = 0;
		cr_assert_eq(fscanf(p, "%llu", &want), 1, "oracle output");
		cr_assert_eq(pclose(p), 0);
		uint64_t c;
		cr_assert_eq(td_edit_count(ed, words[w], strlen(words[w]), TD_ROOT, &c), TD_OK);
		cr_assert_eq(c, want, "count '%s': %llu, python oracle %llu", words[w], (unsigned long long)c, want);
	}
}

static char *archive_in(const char *dir)
{
	char *p = malloc(strlen(dir) + 16);
	sprintf(p, "%s/a.tadoc", dir);
	return p;
}

Test(edit, model_random_replay_compact)
{
	uint64_t rs = 0x5eed1234;
	char *tmp = em_tmpdir();
	char *ap = archive_in(tmp);
	model m;
	base_tree(&m, &rs, 24);
	cr_assert_eq(em_write_archive(&m, ap), TD_OK, "write archive: %s", td_errdetail());

	int lock;
	cr_assert_eq(td_lock_archive(ap, 1, 0, &lock), TD_OK);
	td_archive *a;
	td_edit *ed;
	td_journal *j;
	cr_assert_eq(td_archive_open(ap, 0, &a), TD_OK);
	cr_assert_eq(td_edit_new(a, &ed), TD_OK);
	cr_assert_eq(td_journal_open(ap, ed, 0, &j, NULL), TD_OK, "%s", td_errdetail());
	td_edit_set_log(ed, td_journal_log, j);
	em_compare(ed, &m, &rs);

	const int batches = 30, per = 100;
	for (int b = 0; b < batches; b++) {
		for (int i = 0; i < per; i++)
			random_op(ed, &m, &rs);
		em_compare(ed, &m, &rs);
		check_some_words(ed, &m, &rs, 4);
		if (b == batches / 2) {
			/* Remount half-way: replay must rebuild the same state, and
			 * writing must go on after a replay. */
			td_journal_close(j);
			td_edit_free(ed);
			cr_assert_eq(td_edit_new(a, &ed), TD_OK);
			td_journal_report rep;
			cr_assert_eq(td_journal_open(ap, ed, 0, &j, &rep), TD_OK, "%s", td_errdetail());
			cr_assert_eq(rep.damaged_off, 0);
			cr_assert_str_empty(rep.msg);
			td_edit_set_log(ed, td_journal_log, j);
			em_compare(ed, &m, &rs);
		}
	}
	cr_assert_eq(td_journal_sync(j), TD_OK);
	/* Reopen via journal replay. */
	td_journal_close(j);
	td_edit_free(ed);
	cr_assert_eq(td_edit_new(a, &ed), TD_OK);
	td_journal_report rep;
	cr_assert_eq(td_journal_open(ap, ed, 0, &j, &rep), TD_OK, "%s", td_errdetail());
	cr_assert_gt(rep.records, 1000);
	td_edit_set_log(ed, td_journal_log, j);
	em_compare(ed, &m, &rs);
	check_some_words(ed, &m, &rs, 10);
	python_oracle(ed, &m, tmp);

	/* Compact, then compare with a fresh open of the new archive. */
	cr_assert_eq(td_compact(a, ed, j, ap, NULL, &lock), TD_OK, "compact: %s", td_errdetail());
	td_journal_close(j);
	td_edit_free(ed);
	td_archive_close(a);
	cr_assert_eq(td_archive_open(ap, 0, &a), TD_OK, "%s", td_errdetail());
	cr_assert_eq(td_archive_verify(a), TD_OK, "%s", td_errdetail());
	em_compare_archive(a, &m);
	cr_assert_eq(td_edit_new(a, &ed), TD_OK);
	cr_assert_eq(td_journal_open(ap, ed, 0, &j, &rep), TD_OK, "%s", td_errdetail());
	cr_assert_eq(rep.records, 0);
	cr_assert_eq(td_edit_changed(ed), 0);
	em_compare(ed, &m, &rs);
	check_some_words(ed, &m, &rs, 6);
	/* The lock moved to the new archive. */
	int other;
	cr_assert_eq(td_lock_archive(ap, 0, 0, &other), TD_EBUSY);
	td_journal_close(j);
	td_edit_free(ed);
	td_archive_close(a);
	td_unlock_archive(lock);
	em_free(&m);
	free(ap);
	em_rmdir(tmp);
}

/* Words that straddle piece boundaries, split UTF-8 characters, deleted
 * separators that join words: each against a naive recount. */
Test(edit, words_across_boundaries)
{
	uint64_t rs = 77;
	char *tmp = em_tmpdir();
	char *ap = archive_in(tmp);
	model m;
	em_init(&m);
	const char *text = "hello world, caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 the cat sat. mat42 zebra\n"
			   "the end of the text, hello again";
	em_add(&m, "t", 'f', 0644, text, strlen(text));
	cr_assert_eq(em_write_archive(&m, ap), TD_OK);
	td_archive *a;
	td_edit *ed;
	cr_assert_eq(td_archive_open(ap, 0, &a), TD_OK);
	cr_assert_eq(td_edit_new(a, &ed), TD_OK);
	td_node n = node_of(ed, "t");
	mnode *f = em_find(&m, "t");
	struct {
		int kind;
		size_t off, len;
		const char *s;
	} steps[] = {
		{ 0, 2, 0, "XX" },            /* inside "hello": one word still */
		{ 1, 7, 1, NULL },            /* delete the ' ' -> "heXXllowworld"? joins words */
		{ 0, 19, 0, "\xe4" },         /* split the CJK character */
		{ 1, 0, 3, NULL },            /* delete at the start */
		{ 0, 30, 0, "_" },            /* underscore joins */
		{ 2, 0, 0, " tail" },         /* append */
		{ 1, 10, 40, NULL },          /* a long deletion */
		{ 0, 5, 0, "\xc3" },          /* a lone lead byte */
		{ 0, 6, 0, "\xa9" },          /* ... completed by the next insertion? no: separate */
	};
	for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
		size_t off = steps[i].off > f->len ? f->len : steps[i].off;
		if (steps[i].kind == 0) {
			cr_assert_eq(td_edit_insert(ed, n, off, steps[i].s, strlen(steps[i].s)), TD_OK);
			em_splice(f, off, 0, steps[i].s, strlen(steps[i].s));
		} else if (steps[i].kind == 1) {
			cr_assert_eq(td_edit_delete(ed, n, off, steps[i].len), TD_OK);
			em_splice(f, off, steps[i].len, NULL, 0);
		} else {
			cr_assert_eq(td_edit_write(ed, n, f->len, steps[i].s, strlen(steps[i].s)), TD_OK);
			em_splice(f, f->len, 0, steps[i].s, strlen(steps[i].s));
		}
		em_compare(ed, &m, &rs);
		for (int k = 0; k < 5; k++)
			em_check_words(ed, &m, f, n, &rs);
	}
	/* Thousands of tiny random edits on one file, words checked often. */
	for (int i = 0; i < 3000; i++) {
		uint8_t d[8];
		size_t len = em_rand(&rs) % 4;
		em_text(&rs, d, len);
		size_t off = f->len ? em_rand(&rs) % (f->len + 1) : 0;
		if (em_rand(&rs) % 3 == 0) {
			cr_assert_eq(td_edit_delete(ed, n, off, len), TD_OK);
			em_splice(f, off, len, NULL, 0);
		} else {
			cr_assert_eq(td_edit_insert(ed, n, off, d, len), TD_OK);
			em_splice(f, off, 0, d, len);
		}
		if (i % 50 == 0) {
			em_compare(ed, &m, &rs);
			em_check_words(ed, &m, f, n, &rs);
		}
	}
	td_edit_free(ed);
	td_archive_close(a);
	em_free(&m);
	free(ap);
	em_rmdir(tmp);
}

/* A large base file with few edits: the window method must agree with a
 * full recount (and a separator-free region forces the fallback). */
Test(edit, words_large_file_few_edits)
{
	uint64_t rs = 99;
	char *tmp = em_tmpdir();
	char *ap = archive_in(tmp);
	model m;
	em_init(&m);
	size_t n = 400000;
	uint8_t *d = malloc(n);
	em_text(&rs, d, n);
	em_add(&m, "big", 'f', 0644, d, n);
	/* 3000 bytes of CJK without any ASCII byte */
	uint8_t cjk[3000];
	for (size_t i = 0; i < sizeof cjk; i += 3)
		memcpy(cjk + i, "\xe5\xad\x97", 3);
	em_add(&m, "cjk", 'f', 0644, cjk, sizeof cjk);
	free(d);
	cr_assert_eq(em_write_archive(&m, ap), TD_OK);
	td_archive *a;
	td_edit *ed;
	cr_assert_eq(td_archive_open(ap, 0, &a), TD_OK);
	cr_assert_eq(td_edit_new(a, &ed), TD_OK);
	for (int round = 0; round < 20; round++) {
		mnode *f = em_find(&m, round % 2 ? "cjk" : "big");
		td_node node = node_of(ed, f->path);
		uint8_t ins[40];
		size_t len = em_rand(&rs) % sizeof ins;
		em_text(&rs, ins, len);
		size_t off = em_rand(&rs) % (f->len + 1);
		cr_assert_eq(td_edit_insert(ed, node, off, ins, len), TD_OK);
		em_splice(f, off, 0, ins, len);
		off = em_rand(&rs) % (f->len + 1);
		cr_assert_eq(td_edit_delete(ed, node, off, 7), TD_OK);
		em_splice(f, off, 7, NULL, 0);
		em_check_words(ed, &m, f, node, &rs);
	}
	em_compare(ed, &m, &rs);
	td_edit_free(ed);
	td_archive_close(a);
	em_free(&m);
	free(ap);
	em_rmdir(tmp);
}

/* Namespace rules: errors of the checks leave the state unchanged. */
Test(edit, namespace_errors)
{
	uint64_t rs = 5;
	char *tmp = em_tmpdir();
	char *ap = archive_in(tmp);
	model m;
	base_tree(&m, &rs, 4);
	cr_assert_eq(em_write_archive(&m, ap), TD_OK);
	td_archive *a;
	td_edit *ed;
	cr_assert_eq(td_archive_open(ap, 0, &a), TD_OK);
	cr_assert_eq(td_edit_new(a, &ed), TD_OK);
	td_node docs = node_of(ed, "docs"), f0 = node_of(ed, "f0");
	cr_assert_eq(td_edit_create(ed, TD_ROOT, "docs", 4, S_IFDIR | 0755, NULL, NULL), TD_EEXIST);
	cr_assert_eq(td_edit_create(ed, TD_ROOT, "..", 2, S_IFREG | 0644, NULL, NULL), TD_EINVAL);
	cr_assert_eq(td_edit_create(ed, TD_ROOT, "a/b", 3, S_IFREG | 0644, NULL, NULL), TD_EINVAL);
	cr_assert_eq(td_edit_create(ed, TD_ROOT, "p", 1, S_IFIFO | 0644, NULL, NULL), TD_EUNSUPP);
	cr_assert_eq(td_edit_create(ed, f0, "x", 1, S_IFREG | 0644, NULL, NULL), TD_ENOTDIR);
	cr_assert_eq(td_edit_rmdir(ed, TD_ROOT, "docs", 4), TD_ENOTEMPTY);
	cr_assert_eq(td_edit_rmdir(ed, TD_ROOT, "f0", 2), TD_ENOTDIR);
	cr_assert_eq(td_edit_unlink(ed, TD_ROOT, "docs", 4), TD_EISDIR);
	cr_assert_eq(td_edit_unlink(ed, TD_ROOT, "nope", 4), TD_ENOENT);
	cr_assert_eq(td_edit_rename(ed, TD_ROOT, "docs", 4, node_of(ed, "docs/old"), "x", 1, 0), TD_EINVAL);
	cr_assert_eq(td_edit_rename(ed, TD_ROOT, "f0", 2, TD_ROOT, "docs", 4, 0), TD_EISDIR);
	cr_assert_eq(td_edit_rename(ed, TD_ROOT, "docs", 4, TD_ROOT, "f0", 2, 0), TD_ENOTDIR);
	cr_assert_eq(td_edit_rename(ed, TD_ROOT, "zero", 4, TD_ROOT, "f0", 2, TD_RENAME_NOREPLACE), TD_EEXIST);
	cr_assert_eq(td_edit_insert(ed, f0, 1u << 30, "x", 1), TD_EINVAL);
	cr_assert_eq(td_edit_write(ed, docs, 0, "x", 1), TD_EISDIR);
	cr_assert_eq(td_edit_changed(ed), 0);
	em_compare(ed, &m, &rs);
	/* A write of nothing past the end does not extend the file. */
	td_stat st0;
	cr_assert_eq(td_edit_stat(ed, f0, &st0), TD_OK);
	cr_assert_eq(td_edit_write(ed, f0, st0.size + 100, "", 0), TD_OK);
	em_compare(ed, &m, &rs);
	/* An unlinked file stays readable by node; its name is gone. */
	mnode *f = em_find(&m, "f0");
	size_t len = f->len;
	uint8_t *copy = malloc(len + 1);
	memcpy(copy, f->data, len);
	cr_assert_eq(td_edit_unlink(ed, TD_ROOT, "f0", 2), TD_OK);
	em_remove(&m, "f0");
	uint8_t *buf = malloc(len + 1);
	size_t got;
	cr_assert_eq(td_edit_read(ed, f0, 0, buf, len, &got, NULL), TD_OK);
	cr_assert_eq(got, len);
	cr_assert(!memcmp(buf, copy, len));
	td_stat st;
	cr_assert_eq(td_edit_stat(ed, f0, &st), TD_OK);
	cr_assert_eq(st.parent, TD_NOENTRY);
	/* utimes sets the mtime exactly. */
	cr_assert_eq(td_edit_utimes(ed, docs, 1234567890, 42), TD_OK);
	cr_assert_eq(td_edit_stat(ed, docs, &st), TD_OK);
	cr_assert_eq(st.mtime_sec, 1234567890);
	cr_assert_eq(st.mtime_nsec, 42);
	em_compare(ed, &m, &rs);
	free(buf);
	free(copy);
	td_edit_free(ed);
	td_archive_close(a);
	em_free(&m);
	free(ap);
	em_rmdir(tmp);
}

Test(edit, locks)
{
	char *tmp = em_tmpdir();
	char *ap = archive_in(tmp);
	model m;
	em_init(&m);
	cr_assert_eq(em_write_archive(&m, ap), TD_OK);
	int a, b;
	cr_assert_eq(td_lock_archive(ap, 1, 0, &a), TD_OK);
	cr_assert_eq(td_lock_archive(ap, 1, 0, &b), TD_EBUSY);
	cr_assert_eq(td_lock_archive(ap, 0, 0, &b), TD_EBUSY);
	cr_assert(strstr(td_errdetail(), ap), "message names the archive: %s", td_errdetail());
	td_unlock_archive(a);
	cr_assert_eq(td_lock_archive(ap, 0, 0, &a), TD_OK);
	cr_assert_eq(td_lock_archive(ap, 0, 0, &b), TD_OK);
	int c;
	cr_assert_eq(td_lock_archive(ap, 1, 0, &c), TD_EBUSY);
	td_unlock_archive(a);
	td_unlock_archive(b);
	/* td_compact_path refuses while a writer holds the archive. */
	cr_assert_eq(td_lock_archive(ap, 1, 0, &a), TD_OK);
	cr_assert_eq(td_compact_path(ap, NULL, NULL, NULL), TD_EBUSY);
	td_unlock_archive(a);
	/* ... but waits for a lock that another process (a mount's daemon
	 * finishing after fusermount3 -u) releases within TD_LOCK_WAIT_MS. */
	int pfd[2];
	cr_assert_eq(pipe(pfd), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int l;
		if (td_lock_archive(ap, 1, 0, &l) != TD_OK || write(pfd[1], "x", 1) != 1)
			_exit(1);
		usleep(300 * 1000);
		_exit(0);
	}
	char x;
	cr_assert_eq(read(pfd[0], &x, 1), 1);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	cr_assert_eq(td_lock_archive(ap, 1, TD_LOCK_WAIT_MS, &c), TD_OK, "%s", td_errdetail());
	clock_gettime(CLOCK_MONOTONIC, &t1);
	cr_assert_gt((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000, 100, "took the lock while held");
	td_unlock_archive(c);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(pfd[0]);
	close(pfd[1]);
	int rewritten = 1;
	cr_assert_eq(td_compact_path(ap, NULL, NULL, &rewritten), TD_OK);
	cr_assert_eq(rewritten, 0);
	em_free(&m);
	free(ap);
	em_rmdir(tmp);
}
