/* engine_fixture: shared set-up of the engine Criterion tests (see engine_fixture.h). */
#include "engine_fixture.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "td_build.h"
#include "td_writer.h"

#ifndef TDT_TESTS_DIR
#define TDT_TESTS_DIR "tests"
#endif

static const char *tests_dir(void)
{
	const char *d = getenv("TESTS_DIR");
	return d && *d ? d : TDT_TESTS_DIR;
}

static const char *python(void)
{
	const char *p = getenv("PYTHON");
	return p && *p ? p : "python3";
}

int tdt_heavy(void)
{
	const char *h = getenv("TD_TEST_HEAVY");
	return h && *h && strcmp(h, "0") != 0;
}

const char *tdt_path(const char *name)
{
	static _Thread_local char buf[8][4096];
	static _Thread_local unsigned k;
	char *b = buf[k++ % 8];
	const char *dir = getenv("TDT_DIR");
	snprintf(b, sizeof buf[0], "%s/%s", dir ? dir : ".", name);
	return b;
}

void *tdt_slurp(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	struct stat st;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return NULL;
	}
	size_t cap = (size_t)st.st_size + 1, n = 0;
	char *p = malloc(cap);
	while (p) {
		if (n + 1 >= cap) {
			char *q = realloc(p, cap * 2);
			if (!q) {
				free(p);
				p = NULL;
				break;
			}
			p = q;
			cap *= 2;
		}
		ssize_t r = read(fd, p + n, cap - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			free(p);
			p = NULL;
			break;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	if (p) {
		p[n] = 0;
		*len = n;
	}
	return p;
}

int tdt_spit(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	const char *p = data;
	while (len) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			close(fd);
			return -1;
		}
		p += w;
		len -= (size_t)w;
	}
	return close(fd);
}

int tdt_system(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof cmd)
		return -1;
	int st = system(cmd);
	if (st == -1 || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

uint64_t tdt_rand(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

td_archive *tdt_open(const char *name, unsigned flags)
{
	td_archive *a = NULL;
	int err = td_archive_open(tdt_path(name), flags, &a);
	cr_assert_eq(err, TD_OK, "open %s: %s (%s)", name, td_strerror(err), td_errdetail());
	cr_assert_not_null(a);
	return a;
}

typedef struct tdt_thread {
	pthread_barrier_t *go;
	void (*fn)(void *);
	void *job;
} tdt_thread;

static void *tdt_thread_main(void *arg)
{
	tdt_thread *t = arg;
	pthread_barrier_wait(t->go);
	t->fn(t->job);
	return NULL;
}

void tdt_threads(unsigned n, void (*fn)(void *job), void *jobs, size_t size)
{
	pthread_barrier_t go;
	pthread_t *tid = calloc(n, sizeof *tid);
	tdt_thread *t = calloc(n, sizeof *t);
	cr_assert(tid && t && n > 0);
	pthread_barrier_init(&go, NULL, n);
	for (unsigned i = 0; i < n; i++) {
		t[i] = (tdt_thread){ &go, fn, (char *)jobs + i * size };
		cr_assert_eq(pthread_create(&tid[i], NULL, tdt_thread_main, &t[i]), 0);
	}
	for (unsigned i = 0; i < n; i++)
		pthread_join(tid[i], NULL);
	pthread_barrier_destroy(&go);
	free(tid);
	free(t);
}

struct td_build *tdt_build_new(uint64_t shard_size)
{
	td_build_opts o;
	td_build_opts_init(&o);
	o.shard_size = shard_size;
	o.jobs = 2;
	o.build_time = 1700000000;
	o.tmp_dir = tdt_path("");
	td_build *b;
	cr_assert_eq(td_build_new(&o, &b), TD_OK, "%s", td_errdetail());
	return b;
}

void tdt_build_finish(struct td_build *b, const char *out)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.%d", out, (int)getpid());
	cr_assert_eq(td_build_finish(b, tmp), TD_OK, "%s", td_errdetail());
	cr_assert_eq(rename(tmp, out), 0);
}

/* ---- the td_writer archive: same tree, other order, streamed ---- */

typedef struct wentry {
	char *rel;
	struct stat st;
} wentry;

static wentry *g_went;
static size_t g_nwent, g_capwent;
static size_t g_rootlen;

static int collect(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)flag;
	if (ftw->level == 0)
		return 0;
	if (g_nwent == g_capwent) {
		g_capwent = g_capwent ? 2 * g_capwent : 1024;
		g_went = realloc(g_went, g_capwent * sizeof *g_went);
		if (!g_went)
			return -1;
	}
	g_went[g_nwent].rel = strdup(path + g_rootlen + 1);
	g_went[g_nwent].st = *st;
	g_nwent++;
	return 0;
}

static int build_writer_archive(const char *tree, const char *out)
{
	g_rootlen = strlen(tree);
	if (nftw(tree, collect, 64, FTW_PHYS) != 0) {
		fprintf(stderr, "fixture: walking %s failed\n", tree);
		return -1;
	}
	/* format 3, so the tests read both layouts (paths.tadoc is format 4) */
	td_writer_opts o = {.format = 3};
	td_writer *w = td_writer_new(&o);
	if (!w)
		return -1;
	uint64_t rs = 99;
	int err = TD_OK;
	const char *what = "";
	/* Directories first, in walk order. */
	for (size_t i = 0; i < g_nwent && !err; i++) {
		const wentry *e = &g_went[i];
		if (S_ISDIR(e->st.st_mode)) {
			what = e->rel;
			err = td_writer_add_dir(w, e->rel, e->st.st_mode & 07777, e->st.st_mtim.tv_sec,
						(uint32_t)e->st.st_mtim.tv_nsec);
		}
	}
	/* Then files and symlinks in reverse order, streamed in random chunks. */
	for (size_t k = g_nwent; k-- > 0 && !err;) {
		const wentry *e = &g_went[k];
		char full[8192];
		snprintf(full, sizeof full, "%s/%s", tree, e->rel);
		what = e->rel;
		if (S_ISLNK(e->st.st_mode)) {
			char tgt[4096];
			ssize_t n = readlink(full, tgt, sizeof tgt - 1);
			if (n < 0) {
				err = TD_EIO;
				break;
			}
			tgt[n] = 0;
			err = td_writer_add_symlink(w, e->rel, e->st.st_mtim.tv_sec, (uint32_t)e->st.st_mtim.tv_nsec, tgt);
		} else if (S_ISREG(e->st.st_mode)) {
			int whole = (k % 3) == 0;
			size_t len;
			char *data = tdt_slurp(full, &len);
			if (!data) {
				err = TD_EIO;
				break;
			}
			if (whole) {
				err = td_writer_add_file(w, e->rel, e->st.st_mode & 07777, e->st.st_mtim.tv_sec,
							 (uint32_t)e->st.st_mtim.tv_nsec, data, len);
			} else {
				err = td_writer_file_begin(w, e->rel, e->st.st_mode & 07777, e->st.st_mtim.tv_sec,
							   (uint32_t)e->st.st_mtim.tv_nsec);
				int tiny = (k % 7) == 1 && len < (1 << 20);
				for (size_t at = 0; at < len && !err;) {
					size_t c = tiny ? 1 + tdt_rand(&rs) % 3 : 1 + tdt_rand(&rs) % 70000;
					if (c > len - at)
						c = len - at;
					err = td_writer_file_data(w, data + at, c);
					at += c;
				}
				if (!err)
					err = td_writer_file_end(w);
			}
			free(data);
		}
	}
	if (err) {
		fprintf(stderr, "fixture: td_writer on %s: %s (%s)\n", what, td_strerror(err), td_errdetail());
		td_writer_abort(w);
		return -1;
	}
	err = td_writer_finish(w, out);
	if (err) {
		fprintf(stderr, "fixture: td_writer_finish: %s (%s)\n", td_strerror(err), td_errdetail());
		return -1;
	}
	for (size_t i = 0; i < g_nwent; i++)
		free(g_went[i].rel);
	free(g_went);
	g_went = NULL;
	g_nwent = g_capwent = 0;
	return 0;
}

/* ---- the small tree written from C ---- */

static int build_small(void)
{
	char p[4096];
	snprintf(p, sizeof p, "%s", tdt_path("small"));
	if (mkdir(p, 0755) < 0)
		return -1;
	snprintf(p, sizeof p, "%s", tdt_path("small/sub"));
	if (mkdir(p, 0750) < 0)
		return -1;
	char text[16384];
	size_t n = 0;
	static const char *const s[] = {"the cat sat on the mat\n", "naïve café 日本語 words_with_under 42\r\n",
					"one two three two one\n", "\xff\xfe broken \xc3 utf8\n"};
	for (int i = 0; n + 64 < sizeof text; i++) {
		const char *t = s[(i * 7 + i / 3) % 4];
		memcpy(text + n, t, strlen(t));
		n += strlen(t);
	}
	if (tdt_spit(tdt_path("small/a.txt"), text, n) < 0 || tdt_spit(tdt_path("small/sub/b.txt"), text + 100, n / 2) < 0 ||
	    tdt_spit(tdt_path("small/empty"), "", 0) < 0 || tdt_spit(tdt_path("small/sub/bin"), "\0\1\2\3\377", 5) < 0 ||
	    symlink("a.txt", tdt_path("small/link")) < 0)
		return -1;
	const char *in[] = {tdt_path("small")};
	int err = td_compress_paths(tdt_path("small.tadoc"), in, 1, NULL);
	if (err) {
		fprintf(stderr, "fixture: compressing the small tree: %s (%s)\n", td_strerror(err), td_errdetail());
		return -1;
	}
	return 0;
}

static int setup(unsigned need)
{
	if (need & (TDT_ARCHIVE | TDT_WRITER | TDT_ORACLE))
		need |= TDT_TREE;
	if (need & TDT_TREE) {
		if (tdt_system("'%s' '%s/gen_adversarial.py' %s '%s'", python(), tests_dir(), tdt_heavy() ? "--heavy" : "",
			       tdt_path("tree")) != 0) {
			fprintf(stderr, "fixture: gen_adversarial.py failed\n");
			return -1;
		}
	}
	if (need & TDT_ARCHIVE) {
		const char *in[] = {tdt_path("tree")};
		int err = td_compress_paths(tdt_path("paths.tadoc"), in, 1, NULL);
		if (err) {
			fprintf(stderr, "fixture: td_compress_paths: %s (%s)\n", td_strerror(err), td_errdetail());
			return -1;
		}
	}
	if ((need & TDT_WRITER) && build_writer_archive(tdt_path("tree"), tdt_path("writer.tadoc")) < 0)
		return -1;
	if (need & TDT_ORACLE) {
		if (tdt_system("'%s' '%s/oracle.py' queries '%s' -o '%s'", python(), tests_dir(), tdt_path("tree"),
			       tdt_path("oracle.txt")) != 0) {
			fprintf(stderr, "fixture: oracle.py failed\n");
			return -1;
		}
	}
	if ((need & TDT_SMALL) && build_small() < 0) {
		fprintf(stderr, "fixture: small tree failed: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

int tdt_main(int argc, char **argv, unsigned need)
{
	struct criterion_test_set *tests = criterion_initialize();
	const char *tmp = getenv("TMPDIR");
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/tdtest.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	setenv("TDT_DIR", dir, 1);
	int result = 1;
	if (setup(need) == 0) {
		result = 0;
		if (criterion_handle_args(argc, argv, true))
			result = !criterion_run_all_tests(tests);
	}
	criterion_finalize(tests);
	const char *keep = getenv("TDT_KEEP");
	if (keep && *keep == '1')
		fprintf(stderr, "fixture kept in %s\n", dir);
	else
		tdt_system("chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s'", dir, dir);
	return result;
}

/* ---- oracle file ---- */

static char *unhex(const char *h, size_t hl, size_t *outlen)
{
	if (hl == 1 && h[0] == '-')
		hl = 0;
	char *o = malloc(hl / 2 + 1);
	cr_assert_not_null(o);
	for (size_t i = 0; i + 1 < hl; i += 2) {
		unsigned v;
		cr_assert_eq(sscanf(h + i, "%2x", &v), 1, "bad hex in oracle file");
		o[i / 2] = (char)v;
	}
	o[hl / 2] = 0;
	if (outlen)
		*outlen = hl / 2;
	return o;
}

static char *field(char **s, size_t *len)
{
	char *p = *s;
	while (*p == ' ')
		p++;
	char *b = p;
	while (*p && *p != ' ' && *p != '\n')
		p++;
	*len = (size_t)(p - b);
	*s = p;
	return b;
}

tdt_oracle *tdt_oracle_load(void)
{
	size_t len;
	char *text = tdt_slurp(tdt_path("oracle.txt"), &len);
	cr_assert_not_null(text, "cannot read oracle.txt");
	tdt_oracle *o = calloc(1, sizeof *o);
	size_t capq = 0, cape = 0;
	char *line = text;
	while (*line) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = 0;
		char *p = line;
		size_t fl;
		char *tag = field(&p, &fl);
		if (fl == 1 && *tag == 'T') {
			o->total_bytes = strtoull(p, &p, 10);
			o->total_words = strtoull(p, &p, 10);
		} else if (fl == 1 && *tag == 'E') {
			if (o->ne == cape) {
				cape = cape ? cape * 2 : 1024;
				o->e = realloc(o->e, cape * sizeof *o->e);
			}
			tdt_entry *e = &o->e[o->ne++];
			char *h = field(&p, &fl);
			e->path = unhex(h, fl, NULL);
			e->kind = *field(&p, &fl);
			e->size = strtoull(p, &p, 10);
			e->nwords = strtoull(p, &p, 10);
			e->maxword = strtoull(p, &p, 10);
		} else if (fl == 2 && *tag == 'Q') {
			if (o->nq == capq) {
				capq = capq ? capq * 2 : 1024;
				o->q = realloc(o->q, capq * sizeof *o->q);
			}
			tdt_query *q = &o->q[o->nq++];
			q->dir = tag[1] == 'D';
			char *h = field(&p, &fl);
			q->scope = unhex(h, fl, NULL);
			h = field(&p, &fl);
			q->word = unhex(h, fl, &q->wlen);
			q->count = strtoull(p, &p, 10);
			q->hits = calloc(q->count + 1, sizeof *q->hits);
			uint64_t k = 0;
			if (!q->dir) {
				for (; k < q->count; k++) {
					q->hits[k].path = q->scope;
					q->hits[k].off = strtoull(p, &p, 10);
				}
			} else {
				while (k < q->count) {
					char *g = field(&p, &fl);
					char *colon = memchr(g, ':', fl);
					cr_assert_not_null(colon, "bad QD group in oracle file");
					char *path = unhex(g, (size_t)(colon - g), NULL);
					char *q2 = colon + 1;
					do {
						cr_assert_lt(k, q->count, "oracle QD has more hits than its count");
						q->hits[k].path = path;
						q->hits[k].off = strtoull(q2, &q2, 10);
						k++;
					} while (*q2++ == ',');
					p = q2 - 1;
				}
			}
		}
		if (!nl)
			break;
		line = nl + 1;
	}
	free(text);
	return o;
}

void tdt_oracle_free(tdt_oracle *o)
{
	if (!o)
		return;
	for (size_t i = 0; i < o->ne; i++)
		free(o->e[i].path);
	for (size_t i = 0; i < o->nq; i++) {
		tdt_query *q = &o->q[i];
		if (q->dir) {
			const char *last = NULL;
			for (uint64_t k = 0; k < q->count; k++) {
				if (q->hits[k].path != last)
					free((char *)q->hits[k].path);
				last = q->hits[k].path;
			}
		}
		free(q->scope);
		free(q->word);
		free(q->hits);
	}
	free(o->e);
	free(o->q);
	free(o);
}
