/* engine_edit_model: shadow tree, random text, comparisons for the edit and journal tests. */
#include "engine_edit_model.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "td_extract.h"
#include "td_format.h"
#include "td_query.h"
#include "td_tokenize.h"
#include "td_writer.h"

uint64_t em_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static const char *const vocab[] = {
	"the", "cat", "sat", "on", "mat", "zebra", "h\xc3\xa9llo", "\xe4\xb8\xad\xe6\x96\x87", "x_y", "42",
	"a", "caf\xc3\xa9", "na\xc3\xafve", "\xce\xb1\xce\xb2\xce\xb3", "mat42",
};
static const char *const seps[] = {
	" ", " ", " ", "\n", ", ", ".", "\t", "\r\n", "\xf0\x9f\x98\x80", /* emoji: not a word char */
	"\xff", "\xe4\xb8", /* truncated CJK */ "\xc3", "-", "\xe2\x80\x94", /* em dash */
};

void em_text(uint64_t *rs, uint8_t *out, size_t n)
{
	size_t i = 0;
	while (i < n) {
		uint64_t r = em_rand(rs);
		const char *s;
		char longw[300];
		switch (r % 16) {
		case 0:
			/* a word longer than TD_MAXTOK (rare) or a CJK run without ASCII */
			if ((r >> 8) % 16 == 0) {
				memset(longw, 'q', 299);
				longw[299] = 0;
				s = longw;
			} else {
				s = "\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97\xe4\xb8\xad\xe6\x96\x87";
			}
			break;
		case 1: case 2: case 3: case 4: case 5:
			s = seps[(r >> 8) % (sizeof seps / sizeof *seps)];
			break;
		default:
			s = vocab[(r >> 8) % (sizeof vocab / sizeof *vocab)];
			break;
		}
		size_t l = strlen(s);
		if (l > n - i)
			l = n - i;
		memcpy(out + i, s, l);
		i += l;
	}
}

void em_init(model *m)
{
	memset(m, 0, sizeof(*m));
	em_add(m, "", 'd', 0755, NULL, 0);
}

void em_free(model *m)
{
	for (size_t i = 0; i < m->n; i++) {
		free(m->v[i].path);
		free(m->v[i].data);
	}
	free(m->v);
	memset(m, 0, sizeof(*m));
}

mnode *em_find(model *m, const char *path)
{
	for (size_t i = 0; i < m->n; i++)
		if (!strcmp(m->v[i].path, path))
			return &m->v[i];
	return NULL;
}

mnode *em_add(model *m, const char *path, int type, mode_t perm, const void *data, size_t len)
{
	if (m->n == m->cap) {
		m->cap = m->cap ? m->cap * 2 : 64;
		m->v = realloc(m->v, m->cap * sizeof(mnode));
		cr_assert(m->v);
	}
	mnode *x = &m->v[m->n++];
	x->path = strdup(path);
	x->type = type;
	x->perm = perm;
	x->data = malloc(len ? len : 1);
	if (len)
		memcpy(x->data, data, len);
	x->len = len;
	return x;
}

void em_remove(model *m, const char *path)
{
	mnode *x = em_find(m, path);
	cr_assert(x, "model has no %s", path);
	free(x->path);
	free(x->data);
	*x = m->v[--m->n];
}

void em_splice(mnode *f, size_t off, size_t del, const void *ins, size_t inslen)
{
	if (off > f->len) {
		f->data = realloc(f->data, off + 1);
		memset(f->data + f->len, 0, off - f->len);
		f->len = off;
	}
	if (off + del > f->len)
		del = f->len - off;
	size_t nl = f->len - del + inslen;
	uint8_t *d = malloc(nl ? nl : 1);
	memcpy(d, f->data, off);
	if (inslen)
		memcpy(d + off, ins, inslen);
	memcpy(d + off + inslen, f->data + off + del, f->len - off - del);
	free(f->data);
	f->data = d;
	f->len = nl;
}

char *em_join(const char *dir, const char *name)
{
	size_t dl = strlen(dir), nl = strlen(name);
	char *p = malloc(dl + nl + 2);
	if (dl) {
		memcpy(p, dir, dl);
		p[dl] = '/';
		memcpy(p + dl + 1, name, nl + 1);
	} else {
		memcpy(p, name, nl + 1);
	}
	return p;
}

static int under(const char *path, const char *dir)
{
	size_t dl = strlen(dir);
	if (dl == 0)
		return 1;
	return !strncmp(path, dir, dl) && (path[dl] == '/' || path[dl] == 0);
}

void em_rename(model *m, const char *from, const char *to)
{
	char *f = strdup(from), *t = strdup(to);
	size_t fl = strlen(f);
	for (size_t i = 0; i < m->n; i++) {
		mnode *x = &m->v[i];
		if (!under(x->path, f))
			continue;
		size_t rest = strlen(x->path) - fl;
		char *np = malloc(strlen(t) + rest + 1);
		memcpy(np, t, strlen(t));
		memcpy(np + strlen(t), x->path + fl, rest + 1);
		free(x->path);
		x->path = np;
	}
	free(f);
	free(t);
}

int em_has_children(model *m, const char *dir)
{
	for (size_t i = 0; i < m->n; i++)
		if (strcmp(m->v[i].path, dir) && under(m->v[i].path, dir) && m->v[i].path[0])
			return 1;
	return 0;
}

int em_write_archive(const model *m, const char *path)
{
	td_writer *w = td_writer_new(NULL);
	if (!w)
		return TD_ENOMEM;
	for (size_t i = 0; i < m->n; i++) {
		const mnode *x = &m->v[i];
		int err = TD_OK;
		if (!x->path[0])
			continue;
		if (x->type == 'd')
			err = td_writer_add_dir(w, x->path, x->perm, 1000000000, 5);
		else if (x->type == 'f')
			err = td_writer_add_file(w, x->path, x->perm, 1000000000, 7, x->data, x->len);
		else {
			char *t = strndup((const char *)x->data, x->len);
			err = td_writer_add_symlink(w, x->path, 1000000000, 9, t);
			free(t);
		}
		if (err) {
			td_writer_abort(w);
			return err;
		}
	}
	return td_writer_finish(w, path);
}

/* ---------- comparisons ---------- */

static void check_node(const td_edit *ed, const model *m, const char *path, td_node node, uint64_t *rs)
{
	mnode *x = em_find((model *)m, path);
	cr_assert(x, "edited tree has '%s', the model does not", path);
	td_stat st;
	cr_assert_eq(td_edit_stat(ed, node, &st), TD_OK);
	int type = S_ISDIR(st.mode) ? 'd' : S_ISLNK(st.mode) ? 'l' : 'f';
	cr_assert_eq(type, x->type, "'%s': type %c, model %c", path, type, x->type);
	if (type != 'l')
		cr_assert_eq(st.mode & 07777, x->perm, "'%s': mode %o, model %o", path, st.mode & 07777, x->perm);
	td_node again;
	cr_assert_eq(td_edit_lookup_path(ed, path, &again), TD_OK, "lookup '%s'", path);
	cr_assert_eq(again, node);
	if (type == 'd')
		return;
	cr_assert_eq(st.size, x->len, "'%s': size %llu, model %zu", path, (unsigned long long)st.size, x->len);
	uint8_t *buf = malloc(x->len + 16);
	size_t got = 0;
	cr_assert_eq(td_edit_read(ed, node, 0, buf, x->len + 16, &got, NULL), TD_OK);
	cr_assert_eq(got, x->len);
	cr_assert(!memcmp(buf, x->data, x->len), "'%s': content differs", path);
	for (int k = 0; k < 3 && x->len; k++) {
		size_t off = em_rand(rs) % (x->len + 4), len = em_rand(rs) % 300;
		size_t want = off >= x->len ? 0 : (x->len - off < len ? x->len - off : len);
		cr_assert_eq(td_edit_read(ed, node, off, buf, len > x->len + 16 ? x->len + 16 : len, &got, NULL), TD_OK);
		if (len <= x->len + 16) {
			cr_assert_eq(got, want);
			cr_assert(!memcmp(buf, x->data + off, got), "'%s': read at %zu differs", path, off);
		}
	}
	free(buf);
}

static size_t walk(const td_edit *ed, const model *m, const char *path, td_node dir, uint64_t *rs)
{
	size_t seen = 0;
	uint64_t cookie = 0;
	td_node child;
	const char *name;
	size_t nl;
	char *prev = NULL;
	while (td_edit_dir_next(ed, dir, &cookie, &child, &name, &nl) == TD_OK) {
		char *nm = strndup(name, nl);
		if (prev)
			cr_assert(strcmp(prev, nm) < 0, "listing not sorted: '%s' then '%s'", prev, nm);
		free(prev);
		prev = strdup(nm);
		char *p = em_join(path, nm);
		free(nm);
		check_node(ed, m, p, child, rs);
		seen++;
		td_stat st;
		td_edit_stat(ed, child, &st);
		if (S_ISDIR(st.mode))
			seen += walk(ed, m, p, child, rs);
		free(p);
	}
	free(prev);
	return seen;
}

void em_compare(const td_edit *ed, const model *m, uint64_t *rs)
{
	size_t seen = walk(ed, m, "", TD_ROOT, rs);
	cr_assert_eq(seen + 1, m->n, "edited tree has %zu entries, the model %zu", seen + 1, m->n);
}

void em_compare_archive(const td_archive *a, const model *m)
{
	cr_assert_eq(td_archive_nentries(a), m->n, "archive has %u entries, model %zu", td_archive_nentries(a),
		     m->n);
	for (size_t i = 0; i < m->n; i++) {
		const mnode *x = &m->v[i];
		td_entry e;
		cr_assert_eq(td_archive_lookup_path(a, x->path, &e), TD_OK, "archive lacks '%s'", x->path);
		td_stat st;
		cr_assert_eq(td_archive_stat(a, e, &st), TD_OK);
		int type = S_ISDIR(st.mode) ? 'd' : S_ISLNK(st.mode) ? 'l' : 'f';
		cr_assert_eq(type, x->type, "'%s'", x->path);
		if (type != 'l')
			cr_assert_eq(st.mode & 07777, x->perm, "'%s': mode %o vs %o", x->path, st.mode & 07777, x->perm);
		if (type == 'd')
			continue;
		cr_assert_eq(st.size, x->len, "'%s'", x->path);
		uint8_t *buf = malloc(x->len + 1);
		size_t got;
		cr_assert_eq(td_extract(a, e, 0, buf, x->len, &got), TD_OK);
		cr_assert_eq(got, x->len);
		cr_assert(!memcmp(buf, x->data, x->len), "'%s': archive text differs", x->path);
		if (type == 'f') {
			size_t *o, *l;
			size_t nw = em_words(x->data, x->len, &o, &l), tok = 0;
			for (size_t k = 0; k < nw; k++)
				tok += 1;
			cr_assert_eq(st.nwords, tok, "'%s': archive nwords %llu, naive %zu", x->path,
				     (unsigned long long)st.nwords, tok);
			free(o);
			free(l);
		}
		free(buf);
	}
}

/* ---------- words ---------- */

size_t em_words(const uint8_t *d, size_t n, size_t **offs, size_t **lens)
{
	size_t cap = 16, c = 0;
	*offs = malloc(cap * sizeof(size_t));
	*lens = malloc(cap * sizeof(size_t));
	for (size_t i = 0; i < n;) {
		unsigned k = td_word_char(d + i, n - i);
		if (!k) {
			i++;
			continue;
		}
		size_t j = i;
		while (j < n && (k = td_word_char(d + j, n - j)))
			j += k;
		if (c == cap) {
			cap *= 2;
			*offs = realloc(*offs, cap * sizeof(size_t));
			*lens = realloc(*lens, cap * sizeof(size_t));
		}
		(*offs)[c] = i;
		(*lens)[c] = j - i;
		c++;
		i = j;
	}
	return c;
}

static uint64_t naive_count(const model *m, const char *scope, const char *w, size_t wl)
{
	uint64_t c = 0;
	for (size_t i = 0; i < m->n; i++) {
		const mnode *x = &m->v[i];
		if (x->type != 'f' || !under(x->path, scope))
			continue;
		size_t *o, *l;
		size_t nw = em_words(x->data, x->len, &o, &l);
		for (size_t k = 0; k < nw; k++)
			c += l[k] == wl && !memcmp(x->data + o[k], w, wl);
		free(o);
		free(l);
	}
	return c;
}

static void check_words_once(const td_edit *ed, const model *m, const mnode *f, td_node node, uint64_t *rs)
{
	size_t *o, *l;
	size_t nw = em_words(f->data, f->len, &o, &l), tok = 0;
	for (size_t k = 0; k < nw; k++)
		tok += 1;
	uint64_t n = 0;
	cr_assert_eq(td_edit_nwords(ed, node, &n), TD_OK);
	cr_assert_eq(n, tok, "'%s': nwords %llu, naive %zu", f->path, (unsigned long long)n, tok);
	/* Queries: two words of the file (if any) and one vocabulary word. */
	for (int q = 0; q < 3; q++) {
		char w[512];
		size_t wl;
		if (q < 2 && nw) {
			size_t k = em_rand(rs) % nw;
			wl = l[k] < sizeof w ? l[k] : 0;
			memcpy(w, f->data + o[k], wl);
		} else {
			const char *v = vocab[em_rand(rs) % (sizeof vocab / sizeof *vocab)];
			wl = strlen(v);
			memcpy(w, v, wl);
		}
		if (!wl)
			continue;
		uint64_t c = 0;
		cr_assert_eq(td_edit_count(ed, w, wl, node, &c), TD_OK);
		td_hits h = { 0 };
		cr_assert_eq(td_edit_search(ed, w, wl, node, &h), TD_OK);
		size_t expect = 0;
		for (size_t k = 0; k < nw; k++) {
			if (l[k] != wl || memcmp(f->data + o[k], w, wl))
				continue;
			cr_assert(expect < h.n, "'%s': search '%.*s' misses offset %zu", f->path, (int)wl, w, o[k]);
			cr_assert_eq(h.v[expect].off, o[k], "'%s': search '%.*s' hit %zu at %llu, naive %zu", f->path,
				     (int)wl, w, expect, (unsigned long long)h.v[expect].off, o[k]);
			cr_assert_eq(h.v[expect].file, node);
			expect++;
		}
		cr_assert_eq(h.n, expect, "'%s': search '%.*s' %zu hits, naive %zu", f->path, (int)wl, w, h.n, expect);
		cr_assert_eq(c, expect, "'%s': count '%.*s' %llu, naive %zu", f->path, (int)wl, w,
			     (unsigned long long)c, expect);
		td_hits_free(&h);
		/* Whole tree. */
		cr_assert_eq(td_edit_count(ed, w, wl, TD_ROOT, &c), TD_OK);
		uint64_t all = naive_count(m, "", w, wl);
		cr_assert_eq(c, all, "root count '%.*s' %llu, naive %llu", (int)wl, w, (unsigned long long)c,
			     (unsigned long long)all);
		/* A directory of the model (its subtree). */
		for (int tries = 0; tries < 16; tries++) {
			const mnode *d = &m->v[em_rand(rs) % m->n];
			if (d->type != 'd')
				continue;
			td_node dn;
			cr_assert_eq(td_edit_lookup_path(ed, d->path, &dn), TD_OK);
			cr_assert_eq(td_edit_count(ed, w, wl, dn, &c), TD_OK);
			uint64_t sub = naive_count(m, d->path, w, wl);
			cr_assert_eq(c, sub, "count '%.*s' in '%s': %llu, naive %llu", (int)wl, w, d->path,
				     (unsigned long long)c, (unsigned long long)sub);
			break;
		}
		td_hits hr = { 0 };
		cr_assert_eq(td_edit_search(ed, w, wl, TD_ROOT, &hr), TD_OK);
		cr_assert_eq(hr.n, all);
		for (size_t k = 1; k < hr.n; k++)
			cr_assert(hr.v[k - 1].file < hr.v[k].file ||
				  (hr.v[k - 1].file == hr.v[k].file && hr.v[k - 1].off < hr.v[k].off));
		td_hits_free(&hr);
	}
	free(o);
	free(l);
	/* The whole tree's word tokens. */
	uint64_t total = 0, naive = 0;
	for (size_t i = 0; i < m->n; i++) {
		if (m->v[i].type != 'f')
			continue;
		size_t nn = em_words(m->v[i].data, m->v[i].len, &o, &l);
		for (size_t k = 0; k < nn; k++)
			naive += 1;
		free(o);
		free(l);
	}
	cr_assert_eq(td_edit_nwords(ed, TD_ROOT, &total), TD_OK);
	cr_assert_eq(total, naive, "root nwords %llu, naive %llu", (unsigned long long)total,
		     (unsigned long long)naive);
}

void em_check_words(td_edit *ed, const model *m, const mnode *f, td_node node, uint64_t *rs)
{
	static const int strategies[] = { TD_WORDS_AUTO, TD_WORDS_WINDOWS, TD_WORDS_SCAN };
	for (size_t i = 0; i < 3; i++) {
		td_edit_set_words_strategy(ed, strategies[i]);
		check_words_once(ed, m, f, node, rs);
	}
	td_edit_set_words_strategy(ed, TD_WORDS_AUTO);
}

char *em_tmpdir(void)
{
	const char *t = getenv("TMPDIR");
	char *p = malloc(4096);
	snprintf(p, 4096, "%s/td_edit_XXXXXX", t && *t ? t : "/tmp");
	cr_assert(mkdtemp(p), "mkdtemp");
	return p;
}

void em_rmdir(char *dir)
{
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
	free(dir);
}
