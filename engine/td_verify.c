/* td_verify: the entry tree's check at open, and the full checksum and invariant check of an open archive. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "td_archive_int.h"
#include "td_postings.h"
#include "td_extract.h"
#include "td_atab.h"
#include "td_vtab.h"
#include "td_fzix.h"
#include "td_query.h"
#include "td_shard.h"

#define FAIL(...) td_fail(TD_ECORRUPT, __VA_ARGS__)

/* ---------- the entry tree (at open) ---------- */

/* Entry e for a message: its parent's path (parents come first and were
 * checked before e), '/', then its name with every byte outside printable
 * ASCII (and '\') written as \xNN. */
static const char *entry_label(const td_archive *a, td_entry e, td_entry parent, const char *name, size_t n,
			       char *buf, size_t cap)
{
	int at = e && parent ? td_path_raw(a, parent, buf, cap - 8) : 0;
	size_t k = at > 0 ? (size_t)at : 0;
	if (k && k < cap)
		buf[k++] = '/';
	for (size_t i = 0; i < n && k + 5 < cap; i++) {
		unsigned char c = (unsigned char)name[i];
		if (c < 0x20 || c >= 0x7f || c == '\\')
			k += (size_t)snprintf(buf + k, cap - k, "\\x%02x", c);
		else
			buf[k++] = (char)c;
	}
	buf[k < cap ? k : cap - 1] = '\0';
	return buf;
}

/* Why `name` (n bytes) cannot name an entry below the root, or NULL.
 * `clean`: its bytes are known free of '/' and NUL (chunk_clean). */
static inline const char *bad_name(const char *name, size_t n, int clean)
{
	if (n == 0)
		return "empty name";
	if (n > TD_MAXNAME)
		return "name longer than 255 bytes";
	if ((n == 1 && name[0] == '.') || (n == 2 && name[0] == '.' && name[1] == '.'))
		return "name '.' or '..'";
	size_t i = clean ? n : td_span_find2(name, n, '/', '\0');
	if (i < n)
		return name[i] == '/' ? "name contains '/'" : "name contains a NUL byte";
	return NULL;
}

/* The sign of memcmp(names + x, names + y, m) for two names inside
 * names[0..nb): the first eight bytes compared as one big-endian number,
 * memcmp only past a tie (most siblings differ early). */
static inline int name_cmp(const char *names, uint64_t nb, uint64_t x, uint64_t y, size_t m)
{
	if (m && x + 8 <= nb && y + 8 <= nb) {
		uint64_t u, v;
		memcpy(&u, names + x, 8);
		memcpy(&v, names + y, 8);
		u = __builtin_bswap64(u), v = __builtin_bswap64(v);
		if (m < 8)
			u >>= 64 - 8 * m, v >>= 64 - 8 * m;
		if (u != v)
			return u < v ? -1 : 1;
		if (m <= 8)
			return 0;
	}
	return memcmp(names + x, names + y, m);
}

/* TD_ECORRUPT with "entry E 'LABEL': WHY" (entry_label); out of line, so
 * that the checks' own frames stay small. */
__attribute__((noinline, cold, format(printf, 6, 7))) static int tree_fail(const td_archive *a, uint64_t e,
									     uint64_t p, const char *nm,
									     size_t nl, const char *fmt, ...)
{
	char label[600], why[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	return td_fail(TD_ECORRUPT, "entry %llu '%s': %s", (unsigned long long)e,
		       entry_label(a, (td_entry)e, (td_entry)p, nm, nl, label, sizeof label), why);
}
#define TREE_FAIL(e, p, nm, nl, ...) tree_fail(a, e, p, nm, nl, __VA_ARGS__)

/* Entries decoded a chunk at a time (td_pack_get_range) for the tree
 * checks; a chunk's columns (9 KiB) live on the caller's stack. */
#define TREE_CHUNK 128u

typedef struct tree_cols {
	uint64_t base, n;         /* entries [base, base + n) */
	uint64_t mode[TREE_CHUNK], parent[TREE_CHUNK], size[TREE_CHUNK];
	uint64_t name[TREE_CHUNK + 1], child[TREE_CHUNK + 1], g[TREE_CHUNK + 1], r[TREE_CHUNK + 1];
} tree_cols;

/* Whether the names of a loaded chunk's entries lie in order inside
 * names[0..nb) and hold no '/' or NUL byte: one scan of their bytes, so
 * that entry_check need not scan each name. */
static int chunk_clean(const tree_cols *t, const char *names, uint64_t nb)
{
	for (uint64_t k = 0; k < t->n; k++)
		if (t->name[k] > t->name[k + 1])
			return 0;
	if (t->name[t->n] > nb)
		return 0;
	const size_t len = (size_t)(t->name[t->n] - t->name[0]);
	return !memchr(names + t->name[0], '/', len) && !memchr(names + t->name[0], '\0', len);
}

/* Entries [base, min(base + TREE_CHUNK, end)) into t (end <= nentries). */
static void tree_load(const td_archive *a, tree_cols *t, uint64_t base, uint64_t end)
{
	t->base = base;
	t->n = end - base < TREE_CHUNK ? end - base : TREE_CHUNK;
	td_pack_get_range(&a->e_mode, base, t->n, t->mode);
	td_pack_get_range(&a->e_parent, base, t->n, t->parent);
	td_pack_get_range(&a->e_nameoff, base, t->n + 1, t->name);
	td_pack_get_range(&a->e_child, base, t->n + 1, t->child);
	if (a->version < TD_VERSION_SHARDED) { /* version 5: unused (the text is in the shards) */
		td_pack_get_range(&a->e_size, base, t->n, t->size); /* version 5: read by entry_check */
		td_pack_get_range(&a->e_gstart, base, t->n + 1, t->g);
		td_pack_get_range(&a->e_root, base, t->n + 1, t->r);
	}
}

/* The checks of entry e (columns t->...[k]) that need only e, its parent p
 * and, when e is not its directory's first child (e > first), the entry
 * before it: its name, type, place among its siblings, children range and
 * text. TD_OK or TD_ECORRUPT naming e. */
static inline __attribute__((always_inline)) int entry_check(const td_archive *a, const tree_cols *t, uint64_t k, uint64_t e, uint64_t p,
			      uint64_t first, const char *names, uint64_t nb, int clean)
{
	const uint64_t ne = a->meta.nentries;
	const int sharded = a->version >= TD_VERSION_SHARDED;
	const mode_t m = (mode_t)t->mode[k];
	const uint64_t lo = t->name[k], hi = t->name[k + 1];
	if (lo > hi || hi > nb || hi - lo > TD_MAXNAME)
		return FAIL("entry %llu: name offsets out of order or past the names", (unsigned long long)e);
	const char *nm = names + lo;
	const size_t nl = (size_t)(hi - lo);
	const char *why = e ? bad_name(nm, nl, clean) : NULL;
	if (why)
		return TREE_FAIL(e, p, nm, nl, "%s", why);
	if (!S_ISDIR(m) && !S_ISREG(m) && !S_ISLNK(m))
		return TREE_FAIL(e, p, nm, nl, "not a file, directory or symlink (mode %o)", (unsigned)m);
	if (e == 0 && !S_ISDIR(m))
		return FAIL("entry 0: the root is not a directory");
	/* names within a directory: sorted, so distinct (lookup bisects) */
	if (e && e > first) {
		const uint64_t l0 = k ? t->name[k - 1] : td_pack_get(&a->e_nameoff, e - 1);
		if (l0 > lo)
			return FAIL("entry %llu: name offsets out of order or past the names", (unsigned long long)e);
		const size_t pl = (size_t)(lo - l0);
		int c = name_cmp(names, nb, l0, lo, pl < nl ? pl : nl);
		if (c == 0 && pl == nl)
			return TREE_FAIL(e, p, nm, nl, "name repeats within its directory");
		if (c > 0 || (c == 0 && pl > nl))
			return TREE_FAIL(e, p, nm, nl, "names of its directory are not sorted");
	}
	/* children: ranges in order; only directories have any */
	const uint64_t c0 = t->child[k], c1 = t->child[k + 1];
	if (c1 < c0 || c1 > ne || (c1 > c0 && (!S_ISDIR(m) || c0 <= e)))
		return TREE_FAIL(e, p, nm, nl, "bad children range");
	/* text: a directory has none, a symlink a target of 1..TD_MAXPATH bytes */
	/* size, g, r: loaded below version 5 only; there a file's size is
	 * free (its pieces say it), a directory's or symlink's read here */
	const uint64_t size = !sharded ? t->size[k] : S_ISREG(m) ? 0 : td_pack_get(&a->e_size, e);
	const uint64_t g0 = sharded ? 0 : t->g[k], g1 = sharded ? 0 : t->g[k + 1];
	const uint64_t r0 = sharded ? 0 : t->r[k], r1 = sharded ? 0 : t->r[k + 1];
	if (sharded) {
		if (S_ISDIR(m) ? size != 0 : S_ISLNK(m) && (size == 0 || size > TD_MAXPATH))
			return TREE_FAIL(e, p, nm, nl, "size %llu for its type", (unsigned long long)size);
	} else if (g1 < g0 || r1 < r0)
		return TREE_FAIL(e, p, nm, nl, "text offsets out of order");
	else if (S_ISDIR(m) ? g1 != g0 || r1 != r0 || size != 0 : g1 - g0 != size)
		return TREE_FAIL(e, p, nm, nl, "size %llu differs from its text (%llu bytes)", (unsigned long long)size,
				 (unsigned long long)(g1 - g0));
	else if (S_ISLNK(m) && (size == 0 || size > TD_MAXPATH || r1 == r0))
		return TREE_FAIL(e, p, nm, nl, "symlink target of %llu bytes", (unsigned long long)size);
	return TD_OK;
}

/* What holds the whole tree together, O(1): version 4's texts cover the
 * corpus (version 5: the text is in the shards; E_GSTART and E_ROOT are
 * zeros, sizes are checked against the pieces by td_shard_verify). */
static int tree_ends(const td_archive *a)
{
	const uint64_t ne = a->meta.nentries;
	if (a->version < TD_VERSION_SHARDED &&
	    (td_pack_get(&a->e_gstart, 0) != 0 || td_pack_get(&a->e_gstart, ne) != a->meta.total_bytes ||
	     td_pack_get(&a->e_root, 0) != 0))
		return FAIL("section 'entry-offsets': the entries' texts do not cover the corpus");
	return TD_OK;
}

/* Entry e's columns alone into t (t->base = e, t->n = 1). */
static void tree_load_one(const td_archive *a, tree_cols *t, uint64_t e)
{
	t->base = e;
	t->n = 1;
	t->mode[0] = td_pack_get(&a->e_mode, e);
	t->parent[0] = td_pack_get(&a->e_parent, e);
	t->size[0] = td_pack_get(&a->e_size, e);
	t->name[0] = td_pack_get(&a->e_nameoff, e);
	t->name[1] = td_pack_get(&a->e_nameoff, e + 1);
	t->child[0] = td_pack_get(&a->e_child, e);
	t->child[1] = td_pack_get(&a->e_child, e + 1);
	if (a->version < TD_VERSION_SHARDED) {
		t->g[0] = td_pack_get(&a->e_gstart, e);
		t->g[1] = td_pack_get(&a->e_gstart, e + 1);
		t->r[0] = td_pack_get(&a->e_root, e);
		t->r[1] = td_pack_get(&a->e_root, e + 1);
	}
}

int td_tree_check(const td_archive *a)
{
	const uint64_t ne = a->meta.nentries;
	uint64_t nb;
	const char *names = td_archive_bytes(a, TD_SEC_NAMES, &nb);
	if (!names)
		return TD_ECORRUPT; /* the detail names the section */
	int err = tree_ends(a);
	if (err)
		return err;
	tree_cols tc, *t = &tc;
	uint64_t prev_name_end = td_pack_get(&a->e_nameoff, 0);
	uint64_t cur_p = UINT64_MAX, cur_first = 0, cur_end = 0; /* the last parent seen, its children */
	int clean = 0;
	for (uint64_t e = 0; e < ne && !err; e++) {
		if (e == 0 || e - t->base == t->n) {
			tree_load(a, t, e, ne);
			clean = chunk_clean(t, names, nb);
		}
		const uint64_t k = e - t->base;
		const uint64_t lo = t->name[k], hi = t->name[k + 1], p = e ? t->parent[k] : 0;
		if (lo != prev_name_end || lo > hi || hi > nb || hi - lo > TD_MAXNAME) {
			err = FAIL("entry %llu: name offsets out of order or past the names", (unsigned long long)e);
			break;
		}
		prev_name_end = hi;
		/* its place: the parent comes first, is a directory, and lists it */
		if (e && p != cur_p) {
			if (p >= e || !S_ISDIR(td_pack_get(&a->e_mode, p))) {
				err = FAIL("entry %llu: parent %llu does not list it", (unsigned long long)e,
					   (unsigned long long)p);
				break;
			}
			cur_p = p;
			cur_first = td_pack_get(&a->e_child, p);
			cur_end = td_pack_get(&a->e_child, p + 1);
		}
		if (e && (e < cur_first || e >= cur_end)) {
			err = FAIL("entry %llu: parent %llu does not list it", (unsigned long long)e, (unsigned long long)p);
			break;
		}
		err = entry_check(a, t, k, e, p, cur_first, names, nb, clean);
	}
	return err;
}

/* ---------- the entry tree, a directory at a time (large trees) ---------- */

uint32_t td_tree_eager_max = 32768;

static int parent_fail(uint64_t e, uint64_t p)
{
	return FAIL("entry %llu: parent %llu does not list it", (unsigned long long)e, (unsigned long long)p);
}

int td_tree_lazy_setup(td_archive *a)
{
	const uint64_t ne = a->meta.nentries;
	int err = tree_ends(a);
	if (err)
		return err;
	/* the root: a directory, its children range in order (the rest of
	 * the root's checks come with its children's) */
	const mode_t m = (mode_t)td_pack_get(&a->e_mode, 0);
	const uint64_t c1 = td_pack_get(&a->e_child, 1);
	if (!S_ISDIR(m))
		return FAIL("entry 0: the root is not a directory");
	if (c1 < 1 || c1 > ne)
		return FAIL("entry 0 '': bad children range");
	if (!(a->dir_ok = calloc(ne, sizeof *a->dir_ok))) /* untouched pages until used */
		return TD_ENOMEM;
	a->tree_lazy = 1;
	return TD_OK;
}

/* Directory d's children [c0, c1), d listed by a checked directory (or the
 * root): each named, typed and placed as td_tree_check requires. */
static int dir_check(const td_archive *a, td_entry d)
{
	if (atomic_load_explicit(&a->dir_ok[d], memory_order_acquire) & TD_DIR_CHECKED)
		return TD_OK;
	const uint64_t ne = a->meta.nentries;
	const uint64_t c0 = td_pack_get(&a->e_child, d), c1 = td_pack_get(&a->e_child, d + 1);
	if (c1 < c0 || c1 > ne || (c1 > c0 && c0 <= d))
		return FAIL("entry %llu: bad children range", (unsigned long long)d);
	/* the children's names end at the last one's end (each entry's name
	 * starts where the one before ends); the root's own name comes first */
	uint64_t nb, need = td_pack_get(&a->e_nameoff, c1);
	if (d == 0 && td_pack_get(&a->e_nameoff, 1) > need)
		need = td_pack_get(&a->e_nameoff, 1);
	const char *names = td_names(a, need, &nb);
	if (!names)
		return TD_ECORRUPT;
	tree_cols tc, *t = &tc;
	int err = TD_OK;
	if (d == 0) { /* the root's own entry: no parent checked it */
		tree_load_one(a, t, 0);
		err = entry_check(a, t, 0, 0, 0, 0, names, nb, 0);
	}
	for (uint64_t b = c0; b < c1 && !err; b += t->n) {
		tree_load(a, t, b, c1); /* this directory's children only */
		const int clean = chunk_clean(t, names, nb);
		for (uint64_t k = 0; k < t->n && !err; k++) {
			const uint64_t e = b + k;
			if (t->parent[k] != d) {
				err = parent_fail(e, t->parent[k]);
				break;
			}
			err = entry_check(a, t, k, e, d, c0, names, nb, clean);
		}
	}
	if (err)
		return err;
	/* its children are vouched for now (td_tree_vouch asks once a file):
	 * a plain store each, not a locked or (which cost more than the
	 * children's checks here); a CHECKED bit that another thread sets on
	 * a child between the load and the store can be lost, and costs only
	 * that child's check again */
	for (uint64_t e = c0; e < c1; e++) {
		const unsigned char o = atomic_load_explicit(&a->dir_ok[e], memory_order_relaxed);
		if (!(o & TD_DIR_LISTED))
			atomic_store_explicit(&a->dir_ok[e], (unsigned char)(o | TD_DIR_LISTED), memory_order_release);
	}
	atomic_fetch_or_explicit(&a->dir_ok[d], TD_DIR_CHECKED, memory_order_release);
	return TD_OK;
}

/* e (> 0) sits in the children range of its parent p, which comes first and
 * is a directory. */
static int listed(const td_archive *a, td_entry e, td_entry *p)
{
	*p = (td_entry)td_pack_get(&a->e_parent, e);
	if (*p >= e || !S_ISDIR(td_pack_get(&a->e_mode, *p)) || e < td_pack_get(&a->e_child, *p) ||
	    e >= td_pack_get(&a->e_child, *p + 1))
		return parent_fail(e, *p);
	return TD_OK;
}

int td_tree_vouch(const td_archive *a, td_entry e)
{
	if (!a->tree_lazy || e == 0)
		return TD_OK;
	if (e >= a->meta.nentries)
		return td_fail(TD_EINVAL, "no entry %u", e);
	if (atomic_load_explicit(&a->dir_ok[e], memory_order_acquire) & TD_DIR_LISTED)
		return TD_OK;
	td_entry p;
	int err = listed(a, e, &p);
	if (err || (atomic_load_explicit(&a->dir_ok[p], memory_order_acquire) & TD_DIR_CHECKED))
		return err;
	/* Check the unchecked directories above e from the top down: each
	 * time, the topmost one (its parent checked, or the root). A path
	 * holds at most TD_MAXPATH / 2 directories. */
	for (;;) {
		td_entry x = p, top = p;
		unsigned depth = 0;
		while (x != 0) {
			td_entry up;
			if ((err = listed(a, x, &up)))
				return err;
			if (++depth > TD_MAXPATH)
				return FAIL("entry %u: parent chain deeper than %u", e, TD_MAXPATH);
			if (atomic_load_explicit(&a->dir_ok[up], memory_order_acquire) & TD_DIR_CHECKED)
				break;
			top = x = up;
		}
		if ((err = dir_check(a, top)))
			return err;
		if (top == p)
			return TD_OK;
	}
}

int td_tree_dir(const td_archive *a, td_entry d)
{
	if (!a->tree_lazy || (atomic_load_explicit(&a->dir_ok[d], memory_order_acquire) & TD_DIR_CHECKED))
		return TD_OK;
	int err = td_tree_vouch(a, d);
	return err ? err : dir_check(a, d);
}

/* ---------- every checksum, in parallel ---------- */

int td_hash_stoppable(const uint8_t *p, uint64_t n, const volatile int *stop, uint64_t *sum)
{
	const uint64_t chunk = UINT64_C(16) << 20;
	if (n <= chunk || !stop) {
		*sum = XXH3_64bits(p, n);
		return 0;
	}
	XXH3_state_t *st = XXH3_createState();
	if (!st) { /* out of memory: in one go */
		*sum = XXH3_64bits(p, n);
		return 0;
	}
	XXH3_64bits_reset(st);
	int stopped = 0;
	for (uint64_t at = 0; at < n && !stopped; at += chunk)
		if (!(stopped = __atomic_load_n(stop, __ATOMIC_RELAXED) != 0))
			XXH3_64bits_update(st, p + at, n - at < chunk ? n - at : chunk);
	*sum = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	return stopped;
}

typedef struct sums_job {
	const td_archive *a;
	const volatile int *stop;
	unsigned order[TD_SEC_MAX]; /* section ids, largest first */
	unsigned n;
	atomic_uint next;
	atomic_int bad[TD_SEC_MAX];
	atomic_int stopped;
} sums_job;

static void *sums_worker(void *arg)
{
	sums_job *j = arg;
	for (unsigned k; (k = atomic_fetch_add(&j->next, 1)) < j->n;) {
		const td_disk_section *s = j->a->sec[j->order[k]];
		uint64_t sum;
		if (atomic_load(&j->a->sec_ok) >> j->order[k] & 1u)
			continue; /* a reader's check got there first */
		if (td_hash_stoppable(j->a->map + s->off, s->size, j->stop, &sum)) {
			atomic_store(&j->stopped, 1);
			break;
		}
		if (sum != s->sum)
			atomic_store(&j->bad[j->order[k]], 1);
		else
			td_sec_mark_ok(j->a, j->order[k]); /* readers' checks skip it now */
	}
	return NULL;
}

int td_archive_check_sums(const td_archive *a, unsigned threads, const volatile int *stop)
{
	sums_job *j = calloc(1, sizeof *j);
	if (!j)
		return TD_ENOMEM;
	j->a = a;
	j->stop = stop;
	for (unsigned id = 1; id < TD_SEC_MAX; id++) {
		unsigned k = j->n++;
		for (; k && a->sec[j->order[k - 1]]->size < a->sec[id]->size; k--)
			j->order[k] = j->order[k - 1];
		j->order[k] = id;
	}
	pthread_t tid[16];
	unsigned started = 0;
	threads = threads > 16 ? 16 : threads;
	while (started + 1 < threads && pthread_create(&tid[started], NULL, sums_worker, j) == 0)
		started++;
	sums_worker(j);
	for (unsigned i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	int err = TD_OK;
	for (unsigned id = 1; id < TD_SEC_MAX && !err; id++)
		if (atomic_load(&j->bad[id]))
			err = FAIL("section '%s': checksum mismatch", td_section_name(id));
	int stopped = atomic_load(&j->stopped);
	free(j);
	if (!err && stopped)
		return TD_OK; /* what was checked is marked; not the rest */
	/* version 5: the container's sections above, then each shard's image */
	if (!err && td_sharded(a) && (err = td_shard_check_sums(a, stop)) == TD_STOPPED)
		return TD_OK;
	if (!err)
		atomic_store(&((td_archive *)a)->sums_ok, 1); /* a cache of this answer */
	return err;
}

/* ---------- td_archive_verify ---------- */

/* Depth of rule r (1 = only terminals), memoised in d[]; 0 = not yet,
 * UINT8_MAX = on the stack (a cycle). Returns 0 on corruption. */
static unsigned rule_depth(const td_archive *a, uint64_t r, uint8_t *d, unsigned level)
{
	if (d[r] == UINT8_MAX || level > TD_MAXDEPTH)
		return 0;
	if (d[r])
		return d[r];
	d[r] = UINT8_MAX;
	uint64_t start;
	uint32_t len;
	unsigned deepest = 0;
	if (td_rule_rhs(a, r, &start, &len))
		return 0;
	for (uint32_t i = 0; i < len; i++) {
		uint64_t s = td_rule_sym(a, start + i);
		if (s >= a->T + a->R)
			return 0;
		if (s >= a->T) {
			unsigned c = rule_depth(a, s - a->T, d, level + 1);
			if (!c)
				return 0;
			deepest = c > deepest ? c : deepest;
		}
	}
	d[r] = (uint8_t)(deepest + 1);
	return deepest + 1;
}

static int check_offsets(const td_pack *p, uint64_t limit, const char *what)
{
	for (uint64_t i = 0; i + 1 < p->n; i++)
		if (td_pack_get(p, i) > td_pack_get(p, i + 1))
			return FAIL("%s offsets decrease at %llu", what, (unsigned long long)i);
	if (p->n && td_pack_get(p, p->n - 1) > limit)
		return FAIL("%s offsets run past their data", what);
	return TD_OK;
}

/* Phase 1: every section's checksum, then every packed array's tiles. */
static int verify_sections(const td_archive *a, const td_pack **wf_out, const uint8_t **wb_out)
{
	for (unsigned id = 1; id < TD_SEC_MAX; id++) {
		const td_disk_section *s = a->sec[id];
		if (XXH3_64bits(a->map + s->off, s->size) != s->sum)
			return FAIL("section '%s': checksum mismatch", td_section_name(id));
	}
	const td_pack *wf = td_word_freq(a);
	/* the words first: a version 4 archive derives their offsets from them */
	const uint8_t *wb = td_words(a);
	if (!wf || !wb || !td_other(a))
		return FAIL("%s", td_errdetail());
	const td_pack *packs[] = { &a->e_nameoff, &a->e_parent,  &a->e_mode,   &a->e_mtime,       &a->e_mtimens,
				   &a->e_size,    &a->e_child,   &a->e_root,   &a->e_gstart,      &a->e_nwords,
				   &a->word_off,  wf,            &a->other_off, &a->rule_len,     &a->root_samples,
				   &a->rule_samples };
	for (size_t i = 0; i < sizeof packs / sizeof *packs; i++)
		if (td_pack_check(packs[i]))
			return FAIL("%s", td_errdetail());
	const td_syms *syms[] = { &a->rule_syms, &a->root_syms };
	for (size_t i = 0; i < 2; i++)
		if (syms[i]->coded ? td_scode_check(&syms[i]->c) : td_pack_check(&syms[i]->p))
			return FAIL("section '%s': %s", td_section_name(i ? TD_SEC_ROOT_SYMS : TD_SEC_RULE_SYMS),
				    td_errdetail());
	int err;
	if ((err = check_offsets(&a->word_off, a->bytes_size[TD_SEC_WORDS], "word")) ||
	    (err = check_offsets(&a->other_off, a->bytes_size[TD_SEC_OTHER], "other-token")) ||
	    (err = check_offsets(&a->e_nameoff, a->bytes_size[TD_SEC_NAMES], "name")) ||
	    (err = check_offsets(&a->e_root, a->meta.nroot, "root range")) ||
	    (err = check_offsets(&a->e_gstart, a->meta.total_bytes, "entry offset")) ||
	    (err = check_offsets(&a->e_child, a->meta.nentries, "children")))
		return err;
	*wf_out = wf;
	*wb_out = wb;
	return TD_OK;
}

/* Phase 2: the dictionary's words are words, sorted and distinct. */
static int verify_words(const td_archive *a, const uint8_t *wb)
{
	for (uint64_t w = 0; w < a->W; w++) {
		uint64_t o0 = td_pack_get(&a->word_off, w), o1 = td_pack_get(&a->word_off, w + 1);
		if (o1 - o0 > TD_MAXTOK || !td_is_word((const char *)wb + o0, o1 - o0))
			return FAIL("word %llu is not a word", (unsigned long long)w);
		if (w) {
			uint64_t p0 = td_pack_get(&a->word_off, w - 1);
			size_t lp = o0 - p0, lw = o1 - o0;
			int c = memcmp(wb + p0, wb + o0, lp < lw ? lp : lw);
			if (c > 0 || (c == 0 && lp >= lw))
				return FAIL("words not sorted at %llu", (unsigned long long)w);
		}
	}
	return TD_OK;
}

/* Phase 3: rules: symbols in range, acyclic, bounded depth, offset
 * samples and lengths add up, the deepest nesting is the header's. */
static int verify_rules(const td_archive *a)
{
	uint8_t *d = calloc(a->R + 1, 1);
	if (!d)
		return TD_ENOMEM;
	unsigned maxd = 0;
	int err = TD_OK;
	for (uint64_t r = 0; r < a->R && !err; r++) {
		unsigned k = rule_depth(a, r, d, 1);
		if (!k) {
			err = FAIL("rule %llu: bad symbol, cycle or nesting deeper than %u", (unsigned long long)r,
				   TD_MAXDEPTH);
			break;
		}
		maxd = k > maxd ? k : maxd;
		uint64_t start = 0, sum = 0;
		uint32_t len = 0;
		td_rule_rhs(a, r, &start, &len);
		uint64_t first, ns = td_rule_samples(a, r, len, &first);
		for (uint32_t i = 0; i < len && !err; i++) {
			if (ns && (i & ((UINT32_C(1) << a->shift) - 1)) == 0 &&
			    td_pack_get(&a->rule_samples, first + (i >> a->shift)) != sum)
				err = FAIL("rule %llu: offset sample %u is wrong", (unsigned long long)r, i >> a->shift);
			sum += td_sym_len(a, td_rule_sym(a, start + i));
		}
		if (!err && sum != td_pack_get(&a->rule_len, r))
			err = FAIL("rule %llu: stored length differs from its expansion", (unsigned long long)r);
	}
	free(d);
	if (!err && maxd != a->meta.max_depth)
		err = FAIL("rule depth %u differs from the header's %llu", maxd, (unsigned long long)a->meta.max_depth);
	return err;
}

/* Phase 4: root symbols in range, samples agree with lengths, the whole
 * expands to the header's byte count. */
static int verify_root(const td_archive *a)
{
	uint64_t g = 0;
	for (uint64_t i = 0; i < a->meta.nroot; i++) {
		uint64_t s = td_syms_get(&a->root_syms, i);
		if (s >= a->T + a->R)
			return FAIL("root symbol %llu out of range", (unsigned long long)i);
		if ((i & ((UINT64_C(1) << a->shift) - 1)) == 0 && td_pack_get(&a->root_samples, i >> a->shift) != g)
			return FAIL("root sample %llu is wrong", (unsigned long long)(i >> a->shift));
		g += td_sym_len(a, s);
	}
	if (g != a->meta.total_bytes && !td_sharded(a))
		return FAIL("root expands to %llu bytes, header says %llu", (unsigned long long)g,
			    (unsigned long long)a->meta.total_bytes);
	return TD_OK;
}

/* Phase 5: the tree (td_tree_check), then every entry's text expands to
 * its size, symlink targets hold no NUL, and the word counts add up. */
static int verify_texts(const td_archive *a, const td_pack *wf)
{
	int err = td_tree_check(a);
	if (err)
		return err;
	uint64_t words = 0;
	for (uint64_t e = 0; e < a->meta.nentries; e++) {
		mode_t m = (mode_t)td_pack_get(&a->e_mode, e);
		if (td_sharded(a)) { /* sizes come from the pieces: td_shard_verify */
			if (S_ISREG(m))
				words += td_pack_get(&a->e_nwords, e);
			continue;
		}
		uint64_t rs = td_pack_get(&a->e_root, e), re = td_pack_get(&a->e_root, e + 1), len = 0;
		for (uint64_t i = rs; i < re; i++)
			len += td_sym_len(a, td_syms_get(&a->root_syms, i));
		if (!S_ISDIR(m) && len != td_pack_get(&a->e_size, e))
			return FAIL("entry %llu: size differs from its text", (unsigned long long)e);
		if (S_ISLNK(m)) {
			char target[TD_MAXPATH + 1];
			size_t got = 0;
			if ((err = td_archive_readlink(a, (td_entry)e, target, sizeof target, &got)))
				return err;
		}
		if (S_ISREG(m))
			words += td_pack_get(&a->e_nwords, e);
	}
	if (words != a->meta.total_words)
		return FAIL("per-file word counts do not add up to the corpus total");
	if (td_sharded(a)) {
		for (unsigned i = 0; i < TD_SEC5_N; i++) {
			const td_disk_section *s = a->sec5[i];
			if (XXH3_64bits(a->map + s->off, s->size) != s->sum)
				return FAIL("shard section %u: checksum mismatch", s->id);
		}
		if ((err = td_shard_verify(a)))
			return err;
		if ((err = td_fzix_verify(a)))
			return err;
		if ((err = td_atab_verify(a)))
			return err;
		return td_vtab_verify(a);
	}
	uint64_t freq = 0;
	for (uint64_t w = 0; w < a->W; w++)
		freq += td_pack_get(wf, w);
	if (freq + a->meta.nlongwords != words)
		return FAIL("word counts do not add up");
	return TD_OK;
}

int td_archive_verify(const td_archive *a)
{
	const td_pack *wf = NULL;
	const uint8_t *wb = NULL;
	int err;
	if ((err = verify_sections(a, &wf, &wb)) || (err = verify_words(a, wb)) || (err = verify_rules(a)) ||
	    (err = verify_root(a)) || (err = verify_texts(a, wf)) || (err = td_post_verify(a)))
		return err;
	return TD_OK;
}
