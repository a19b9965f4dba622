/* td_edit: overlay nodes, piece tables and directory lists over an archive. */
#include "td_edit.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "td_edit_int.h"
#include "td_format.h"

#define CHUNK_SHIFT 10u
#define CHUNK (1u << CHUNK_SHIFT)
#define MAX_SIZE (UINT64_C(1) << 62)
/* Deleted base gaps up to this size are read through (cheap, sequential)
 * rather than skipped with a cursor re-seek (a descent from the root). */
#define TD_EDIT_SKIP (UINT64_C(64) << 10)

/* ---------- node table ---------- */

tnode *td_edit_node(const td_edit *ed, td_node id)
{
	size_t c = id >> CHUNK_SHIFT;
	if (c >= ed->ntop || !ed->top[c])
		return NULL;
	return ed->top[c][id & (CHUNK - 1)];
}

static int node_put(td_edit *ed, td_node id, tnode *t)
{
	size_t c = id >> CHUNK_SHIFT;
	if (c >= ed->ntop) {
		size_t n = ed->ntop ? ed->ntop : 16;
		while (n <= c)
			n *= 2;
		tnode ***top = realloc(ed->top, n * sizeof(*top));
		if (!top)
			return TD_ENOMEM;
		memset(top + ed->ntop, 0, (n - ed->ntop) * sizeof(*top));
		ed->top = top;
		ed->ntop = n;
	}
	if (!ed->top[c]) {
		ed->top[c] = calloc(CHUNK, sizeof(tnode *));
		if (!ed->top[c])
			return TD_ENOMEM;
	}
	ed->top[c][id & (CHUNK - 1)] = t;
	return TD_OK;
}

int td_edit_valid(const td_edit *ed, td_node id)
{
	if (id < ed->nbase)
		return 1;
	return id < ed->next && td_edit_node(ed, id) != NULL;
}

/* Overlay of node id, created from the archive on first use. */
static int touch(td_edit *ed, td_node id, tnode **out)
{
	tnode *t = td_edit_node(ed, id);
	if (t) {
		*out = t;
		return TD_OK;
	}
	if (id >= ed->nbase)
		return TD_EINVAL;
	td_stat st;
	int err = td_archive_stat(ed->a, id, &st);
	if (err)
		return err;
	t = calloc(1, sizeof(*t));
	if (!t)
		return TD_ENOMEM;
	t->mode = st.mode;
	t->mtime_sec = st.mtime_sec;
	t->mtime_nsec = st.mtime_nsec;
	t->parent = st.parent;
	t->base = id;
	t->size = st.size;
	t->linked = 1;
	size_t nl = 0;
	t->name = td_archive_name(ed->a, id, &nl);
	t->namelen = (uint32_t)nl;
	err = node_put(ed, id, t);
	if (err) {
		free(t);
		return err;
	}
	*out = t;
	return TD_OK;
}

/* Attributes of any node without creating an overlay. */
int td_edit_attr(const td_edit *ed, td_node id, td_stat *st, const tnode **tn)
{
	const tnode *t = td_edit_node(ed, id);
	if (tn)
		*tn = t;
	if (!t) {
		if (id >= ed->nbase)
			return TD_EINVAL;
		return td_archive_stat(ed->a, id, st);
	}
	memset(st, 0, sizeof(*st));
	st->mode = t->mode;
	st->size = t->size;
	st->mtime_sec = t->mtime_sec;
	st->mtime_nsec = t->mtime_nsec;
	st->parent = t->linked ? t->parent : TD_NOENTRY;
	if (!t->content_edited && t->base != TD_NOENTRY && S_ISREG(t->mode)) {
		td_stat bs;
		if (td_archive_stat(ed->a, t->base, &bs) == TD_OK)
			st->nwords = bs.nwords;
	}
	return TD_OK;
}

/* ---------- names and directories ---------- */

static int name_cmp(const char *a, size_t al, const char *b, size_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);
	if (c)
		return c;
	return al < bl ? -1 : al > bl ? 1 : 0;
}

static int name_ok(const char *name, size_t len)
{
	if (len == 0 || !name)
		return TD_EINVAL;
	if (len > TD_MAXNAME)
		return TD_ELIMIT;
	if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
		return TD_EINVAL;
	if (memchr(name, '/', len) || memchr(name, '\0', len))
		return TD_EINVAL;
	return TD_OK;
}

/* Binary search in a materialised list: index of name or insertion point. */
static size_t kid_find(const tnode *d, const char *name, size_t len, int *found)
{
	size_t lo = 0, hi = d->nkids;
	*found = 0;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = name_cmp(d->kids[mid].name, d->kids[mid].len, name, len);
		if (c == 0) {
			*found = 1;
			return mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Copy the archive's children of d into its own list (first change). */
static int materialize(td_edit *ed, tnode *d)
{
	if (d->dir_mat)
		return TD_OK;
	if (d->base != TD_NOENTRY) {
		td_entry first;
		uint32_t count;
		int err = td_archive_children(ed->a, d->base, &first, &count);
		if (err)
			return err;
		if (count) {
			d->kids = malloc((size_t)count * sizeof(*d->kids));
			if (!d->kids)
				return TD_ENOMEM;
			d->capkids = count;
		}
		for (uint32_t i = 0; i < count; i++) {
			size_t nl = 0;
			d->kids[i].name = td_archive_name(ed->a, first + i, &nl);
			d->kids[i].len = (uint32_t)nl;
			d->kids[i].node = first + i;
		}
		d->nkids = count;
	}
	d->dir_mat = 1;
	return TD_OK;
}

static int kid_insert(tnode *d, size_t at, const char *name, uint32_t len, td_node node)
{
	if (d->nkids == d->capkids) {
		size_t n = d->capkids ? d->capkids * 2 : 8;
		dent *k = realloc(d->kids, n * sizeof(*k));
		if (!k)
			return TD_ENOMEM;
		d->kids = k;
		d->capkids = n;
	}
	memmove(d->kids + at + 1, d->kids + at, (d->nkids - at) * sizeof(dent));
	d->kids[at] = (dent){ name, len, node };
	d->nkids++;
	return TD_OK;
}

static void kid_remove(tnode *d, size_t at)
{
	memmove(d->kids + at, d->kids + at + 1, (d->nkids - at - 1) * sizeof(dent));
	d->nkids--;
}

int td_edit_lookup(const td_edit *ed, td_node dir, const char *name, size_t len, td_node *out)
{
	td_stat st;
	const tnode *d;
	int err = td_edit_attr(ed, dir, &st, &d);
	if (err)
		return err;
	if (!S_ISDIR(st.mode))
		return TD_ENOTDIR;
	if (!name || len == 0)
		return TD_EINVAL;
	if (d && d->dir_mat) {
		int found;
		size_t i = kid_find(d, name, len, &found);
		if (!found)
			return TD_ENOENT;
		*out = d->kids[i].node;
		return TD_OK;
	}
	td_entry e;
	err = td_archive_lookup(ed->a, d ? d->base : dir, name, len, &e);
	if (err)
		return err;
	*out = e;
	return TD_OK;
}

int td_edit_lookup_path(const td_edit *ed, const char *path, td_node *out)
{
	td_node cur = TD_ROOT;
	const char *p = path;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		const char *q = strchr(p, '/');
		size_t len = q ? (size_t)(q - p) : strlen(p);
		if (!(len == 1 && p[0] == '.')) {
			td_node next;
			int err = td_edit_lookup(ed, cur, p, len, &next);
			if (err)
				return err;
			cur = next;
		}
		p += len;
	}
	*out = cur;
	return TD_OK;
}

int td_edit_stat(const td_edit *ed, td_node node, td_stat *st)
{
	return td_edit_attr(ed, node, st, NULL);
}

const char *td_edit_name(const td_edit *ed, td_node node, size_t *len)
{
	const tnode *t = td_edit_node(ed, node);
	if (t) {
		if (!t->linked)
			return NULL;
		*len = t->namelen;
		return t->name ? t->name : "";
	}
	if (node >= ed->nbase)
		return NULL;
	return td_archive_name(ed->a, node, len);
}

int td_edit_path(const td_edit *ed, td_node node, char *buf, size_t cap)
{
	/* Collect the chain, then write names from the root down. */
	size_t total = 0;
	td_node cur = node;
	unsigned depth = 0;
	while (cur != TD_ROOT) {
		td_stat st;
		int err = td_edit_attr(ed, cur, &st, NULL);
		if (err)
			return err;
		if (st.parent == TD_NOENTRY)
			return TD_ENOENT;
		size_t nl;
		if (!td_edit_name(ed, cur, &nl))
			return TD_ENOENT;
		total += nl + (total ? 1 : 0);
		cur = st.parent;
		if (++depth > TD_MAXPATH)
			return TD_ECORRUPT;
	}
	if (total + 1 > cap)
		return TD_ERANGE;
	buf[total] = '\0';
	size_t end = total;
	cur = node;
	while (cur != TD_ROOT) {
		td_stat st;
		td_edit_attr(ed, cur, &st, NULL);
		size_t nl;
		const char *nm = td_edit_name(ed, cur, &nl);
		end -= nl;
		memcpy(buf + end, nm, nl);
		if (end) {
			end--;
			buf[end] = '/';
		}
		cur = st.parent;
	}
	return (int)total;
}

/* Length of the path of a linked directory (0 for the root). */
static int path_len(const td_edit *ed, td_node node, size_t *len)
{
	size_t total = 0;
	unsigned depth = 0;
	while (node != TD_ROOT) {
		td_stat st;
		int err = td_edit_attr(ed, node, &st, NULL);
		if (err)
			return err;
		if (st.parent == TD_NOENTRY)
			return TD_ENOENT;
		size_t nl;
		if (!td_edit_name(ed, node, &nl))
			return TD_ENOENT;
		total += nl + 1;
		node = st.parent;
		if (++depth > TD_MAXPATH)
			return TD_ECORRUPT;
	}
	*len = total;
	return TD_OK;
}

int td_edit_dir_next(const td_edit *ed, td_node dir, uint64_t *cookie, td_node *child,
		     const char **name, size_t *len)
{
	td_stat st;
	const tnode *d;
	int err = td_edit_attr(ed, dir, &st, &d);
	if (err)
		return err;
	if (!S_ISDIR(st.mode))
		return TD_ENOTDIR;
	if (d && d->dir_mat) {
		if (*cookie >= d->nkids)
			return TD_ENOENT;
		const dent *k = &d->kids[*cookie];
		*child = k->node;
		*name = k->name;
		*len = k->len;
		(*cookie)++;
		return TD_OK;
	}
	td_entry first;
	uint32_t count;
	err = td_archive_children(ed->a, d ? d->base : dir, &first, &count);
	if (err)
		return err;
	if (*cookie >= count)
		return TD_ENOENT;
	td_entry e = first + (td_entry)*cookie;
	*child = e;
	*name = td_archive_name(ed->a, e, len);
	(*cookie)++;
	return TD_OK;
}

/* Number of children (for rmdir). */
static int dir_count(const td_edit *ed, td_node dir, uint64_t *n)
{
	const tnode *d = td_edit_node(ed, dir);
	if (d && d->dir_mat) {
		*n = d->nkids;
		return TD_OK;
	}
	td_entry first;
	uint32_t count;
	int err = td_archive_children(ed->a, d ? d->base : dir, &first, &count);
	*n = count;
	return err;
}

/* ---------- append buffer and piece tables ---------- */

static int buf_put(td_edit *ed, const void *data, uint64_t len, uint64_t *src)
{
	if (ed->buflen + len > ed->bufcap) {
		uint64_t n = ed->bufcap ? ed->bufcap : 65536;
		while (n < ed->buflen + len)
			n *= 2;
		if (n > SIZE_MAX)
			return TD_ENOMEM;
		uint8_t *b = realloc(ed->buf, (size_t)n);
		if (!b)
			return TD_ENOMEM;
		ed->buf = b;
		ed->bufcap = n;
	}
	*src = ed->buflen;
	if (len)
		memcpy(ed->buf + ed->buflen, data, (size_t)len);
	ed->buflen += len;
	return TD_OK;
}

const uint8_t *td_edit_buffer(const td_edit *ed, uint64_t off, uint64_t len)
{
	if (off > ed->buflen || len > ed->buflen - off)
		return NULL;
	return ed->buf + off;
}

uint64_t td_edit_buffer_bytes(const td_edit *ed)
{
	return ed->buflen;
}

static int pc_reserve(tnode *t, size_t extra)
{
	if (t->npc + extra <= t->cappc)
		return TD_OK;
	size_t n = t->cappc ? t->cappc : 4;
	while (n < t->npc + extra)
		n *= 2;
	td_piece *p = realloc(t->pc, n * sizeof(*p));
	if (!p)
		return TD_ENOMEM;
	t->pc = p;
	t->cappc = n;
	return TD_OK;
}

/* Give an unchanged file its table: one base piece over the whole text. */
static int ensure_pieces(tnode *t)
{
	if (t->content_edited)
		return TD_OK;
	t->content_edited = 1;
	if (t->size == 0)
		return TD_OK;
	int err = pc_reserve(t, 1);
	if (err)
		return err;
	t->pc[0] = (td_piece){ .off = 0, .len = t->size, .src = 0, .kind = TD_PIECE_BASE, .entry = t->base };
	t->npc = 1;
	return TD_OK;
}

/* Index of the piece holding byte pos (pos < size). */
static size_t pc_find(const tnode *t, uint64_t pos)
{
	size_t lo = 0, hi = t->npc;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (t->pc[mid].off <= pos)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* Make a piece start at pos; return its index (npc when pos == size). */
static int pc_split(tnode *t, uint64_t pos, size_t *at)
{
	if (pos >= t->size) {
		*at = t->npc;
		return TD_OK;
	}
	size_t k = pc_find(t, pos);
	td_piece *p = &t->pc[k];
	if (p->off == pos) {
		*at = k;
		return TD_OK;
	}
	int err = pc_reserve(t, 1);
	if (err)
		return err;
	p = &t->pc[k];
	memmove(t->pc + k + 2, t->pc + k + 1, (t->npc - k - 1) * sizeof(td_piece));
	uint64_t cut = pos - p->off;
	td_piece right = *p;
	right.off = pos;
	right.len = p->len - cut;
	if (right.kind != TD_PIECE_ZERO)
		right.src += cut;
	p->len = cut;
	t->pc[k + 1] = right;
	t->npc++;
	*at = k + 1;
	return TD_OK;
}

static int pc_joinable(const td_piece *a, const td_piece *b)
{
	if (a->kind != b->kind)
		return 0;
	if (a->kind == TD_PIECE_ZERO)
		return 1;
	if (a->kind == TD_PIECE_BASE && a->entry != b->entry)
		return 0;
	return a->src + a->len == b->src;
}

/* Merge piece i with piece i+1 when they continue each other. */
static void pc_merge(tnode *t, size_t i)
{
	if (i + 1 >= t->npc)
		return;
	if (!pc_joinable(&t->pc[i], &t->pc[i + 1]))
		return;
	t->pc[i].len += t->pc[i + 1].len;
	memmove(t->pc + i + 1, t->pc + i + 2, (t->npc - i - 2) * sizeof(td_piece));
	t->npc--;
}

/* Replace bytes [off, off+del) by a piece `ins` of ins->len bytes (len 0:
 * pure deletion). Requires off + del <= size. */
static int splice(tnode *t, uint64_t off, uint64_t del, const td_piece *ins)
{
	assert(off + del <= t->size);
	int err = pc_reserve(t, 3);
	if (err)
		return err;
	size_t i, j;
	/* Splitting at off+del never moves the piece that starts at off. */
	if ((err = pc_split(t, off, &i)) || (err = pc_split(t, off + del, &j)))
		return err;
	uint64_t ins_len = ins ? ins->len : 0;
	size_t nrem = j - i;
	size_t nins = ins_len ? 1 : 0;
	memmove(t->pc + i + nins, t->pc + j, (t->npc - j) * sizeof(td_piece));
	t->npc = t->npc - nrem + nins;
	if (nins) {
		t->pc[i] = *ins;
		t->pc[i].off = off;
	}
	for (size_t k = i + nins; k < t->npc; k++)
		t->pc[k].off = t->pc[k].off - del + ins_len;
	t->size = t->size - del + ins_len;
	/* Join what now touches: [i-1, i], [i, i+1] (or [i-1, i] after a pure
	 * deletion). */
	if (nins)
		pc_merge(t, i);
	if (i > 0)
		pc_merge(t, i - 1);
	return TD_OK;
}

int td_edit_pieces(const td_edit *ed, td_node node, const td_piece **pieces, size_t *n, td_entry *base)
{
	td_stat st;
	const tnode *t;
	int err = td_edit_attr(ed, node, &st, &t);
	if (err)
		return err;
	if (S_ISDIR(st.mode))
		return TD_EISDIR;
	if (!t || !t->content_edited) {
		*pieces = NULL;
		*n = 0;
		*base = t ? t->base : node;
		return TD_OK;
	}
	*pieces = t->pc;
	*n = t->npc;
	*base = TD_NOENTRY;
	return TD_OK;
}

int td_edit_read(const td_edit *ed, td_node node, uint64_t off, void *buf, size_t len, size_t *got,
		 td_cursor *cur)
{
	td_stat st;
	const tnode *t;
	*got = 0;
	int err = td_edit_attr(ed, node, &st, &t);
	if (err)
		return err;
	if (S_ISDIR(st.mode))
		return TD_EISDIR;
	if (!t || !t->content_edited) {
		td_entry e = t ? t->base : node;
		return cur ? td_cursor_read(cur, e, off, buf, len, got) : td_extract(ed->a, e, off, buf, len, got);
	}
	if (off >= t->size || len == 0)
		return TD_OK;
	if (len > t->size - off)
		len = (size_t)(t->size - off);
	uint8_t *out = buf;
	size_t k = pc_find(t, off);
	size_t done = 0;
	td_entry last_e = TD_NOENTRY; /* where the cursor stopped in this call */
	uint64_t last_end = 0;
	while (done < len) {
		assert(k < t->npc);
		const td_piece *p = &t->pc[k];
		uint64_t in = off + done - p->off;
		size_t n = (size_t)(p->len - in < len - done ? p->len - in : len - done);
		if (p->kind == TD_PIECE_ZERO) {
			memset(out + done, 0, n);
		} else if (p->kind == TD_PIECE_BUF) {
			memcpy(out + done, ed->buf + p->src + in, n);
		} else {
			size_t g = 0;
			uint64_t at = p->src + in;
			if (cur && last_e == p->entry && at > last_end && at - last_end <= TD_EDIT_SKIP) {
				/* A small deleted gap: read through it so the cursor
				 * continues instead of descending from the root. */
				uint8_t skip[4096];
				for (uint64_t s = last_end; s < at && !err; s += g) {
					size_t want = at - s < sizeof skip ? (size_t)(at - s) : sizeof skip;
					err = td_cursor_read(cur, p->entry, s, skip, want, &g);
					if (!err && g != want)
						err = TD_ECORRUPT;
				}
				if (err)
					return err;
			}
			err = cur ? td_cursor_read(cur, p->entry, at, out + done, n, &g)
				  : td_extract(ed->a, p->entry, at, out + done, n, &g);
			if (err)
				return err;
			last_e = p->entry;
			last_end = at + g;
			if (g != n)
				return td_fail(TD_ECORRUPT, "entry %u: base text shorter than its edit pieces",
					       (unsigned)p->entry);
		}
		done += n;
		k++;
	}
	*got = done;
	return TD_OK;
}

/* ---------- lifecycle ---------- */

int td_edit_new(const td_archive *a, td_edit **out)
{
	td_edit *ed = calloc(1, sizeof(*ed));
	if (!ed)
		return TD_ENOMEM;
	ed->a = a;
	ed->nbase = td_archive_nentries(a);
	ed->next = ed->nbase;
	*out = ed;
	return TD_OK;
}

void td_edit_free(td_edit *ed)
{
	if (!ed)
		return;
	for (size_t c = 0; c < ed->ntop; c++) {
		if (!ed->top[c])
			continue;
		for (size_t i = 0; i < CHUNK; i++) {
			tnode *t = ed->top[c][i];
			if (!t)
				continue;
			free(t->pc);
			free(t->kids);
			free(t->name_own);
			free(t);
		}
		free(ed->top[c]);
	}
	free(ed->top);
	free(ed->buf);
	free(ed);
}

const td_archive *td_edit_archive(const td_edit *ed)
{
	return ed->a;
}

void td_edit_set_log(td_edit *ed, td_edit_log_fn fn, void *ctx)
{
	ed->log = fn;
	ed->logctx = ctx;
}

td_node td_edit_next_node(const td_edit *ed)
{
	return ed->next;
}

void td_edit_set_words_strategy(td_edit *ed, int strategy)
{
	ed->words_strategy = strategy;
}

int td_edit_changed(const td_edit *ed)
{
	return ed->changed;
}

int td_edit_clean(const td_edit *ed, td_node node)
{
	if (node >= ed->nbase)
		return 0;
	const tnode *t = td_edit_node(ed, node);
	return !t || (t->linked && !t->dirty && !t->content_edited && !t->dir_mat && t->base == node);
}

/* ---------- records: check, then apply ---------- */

/* Mark node and its ancestors as differing from the archive. */
static int mark_dirty(td_edit *ed, td_node id)
{
	unsigned depth = 0;
	for (;;) {
		tnode *t;
		int err = touch(ed, id, &t);
		if (err)
			return err;
		t->dirty = 1;
		if (id == TD_ROOT || !t->linked)
			return TD_OK;
		id = t->parent;
		if (++depth > TD_MAXPATH)
			return TD_ECORRUPT;
	}
}

static int check_file(const td_edit *ed, td_node node, td_stat *st)
{
	if (!td_edit_valid(ed, node))
		return td_fail(TD_EINVAL, "no node %u", (unsigned)node);
	int err = td_edit_attr(ed, node, st, NULL);
	if (err)
		return err;
	if (S_ISDIR(st->mode))
		return TD_EISDIR;
	if (!S_ISREG(st->mode))
		return TD_EINVAL;
	return TD_OK;
}

/* dir must be a linked directory. */
static int check_dir(const td_edit *ed, td_node dir)
{
	if (!td_edit_valid(ed, dir))
		return td_fail(TD_EINVAL, "no node %u", (unsigned)dir);
	td_stat st;
	int err = td_edit_attr(ed, dir, &st, NULL);
	if (err)
		return err;
	if (!S_ISDIR(st.mode))
		return TD_ENOTDIR;
	if (st.parent == TD_NOENTRY)
		return TD_ENOENT;
	return TD_OK;
}

/* 1 if `anc` is `node` or one of its ancestors. */
static int is_ancestor(const td_edit *ed, td_node anc, td_node node)
{
	unsigned depth = 0;
	for (;;) {
		if (node == anc)
			return 1;
		if (node == TD_ROOT)
			return 0;
		td_stat st;
		if (td_edit_attr(ed, node, &st, NULL) || st.parent == TD_NOENTRY)
			return 0;
		node = st.parent;
		if (++depth > TD_MAXPATH)
			return 0;
	}
}

static int check(const td_edit *ed, const td_edit_rec *r)
{
	td_stat st, st2;
	td_node child, other;
	int err;
	switch (r->type) {
	case TD_REC_WRITE:
	case TD_REC_INSERT:
		if ((err = check_file(ed, r->node, &st)))
			return err;
		if (r->data_len && !r->data)
			return TD_EINVAL;
		if (r->off > MAX_SIZE || r->data_len > MAX_SIZE - r->off ||
		    st.size + r->data_len > MAX_SIZE)
			return td_fail(TD_EFBIG, "file would grow past %llu bytes", (unsigned long long)MAX_SIZE);
		if (r->type == TD_REC_INSERT && r->off > st.size)
			return td_fail(TD_EINVAL, "insert at %llu past the end (%llu bytes)",
				       (unsigned long long)r->off, (unsigned long long)st.size);
		return TD_OK;
	case TD_REC_DELETE:
		if ((err = check_file(ed, r->node, &st)))
			return err;
		if (r->off > st.size)
			return td_fail(TD_EINVAL, "delete at %llu past the end (%llu bytes)",
				       (unsigned long long)r->off, (unsigned long long)st.size);
		return TD_OK;
	case TD_REC_TRUNCATE:
		if ((err = check_file(ed, r->node, &st)))
			return err;
		if (r->off > MAX_SIZE)
			return td_fail(TD_EFBIG, "size %llu is past %llu bytes", (unsigned long long)r->off,
				       (unsigned long long)MAX_SIZE);
		return TD_OK;
	case TD_REC_CREATE: {
		if ((err = check_dir(ed, r->dir)) || (err = name_ok(r->name, r->name_len)))
			return err;
		if (r->node != ed->next)
			return td_fail(TD_EINVAL, "create record names node %u, expected %u", (unsigned)r->node,
				       (unsigned)ed->next);
		if (ed->next == TD_NOENTRY)
			return TD_ELIMIT;
		err = td_edit_lookup(ed, r->dir, r->name, r->name_len, &child);
		if (err == TD_OK)
			return TD_EEXIST;
		if (err != TD_ENOENT)
			return err;
		mode_t m = r->mode;
		if (S_ISLNK(m)) {
			if (!r->data || r->data_len == 0 || r->data_len > TD_MAXPATH ||
			    memchr(r->data, '\0', (size_t)r->data_len))
				return TD_EINVAL;
		} else if (!S_ISREG(m) && !S_ISDIR(m)) {
			return TD_EUNSUPP;
		}
		size_t pl;
		if ((err = path_len(ed, r->dir, &pl)))
			return err;
		if (pl + r->name_len > TD_MAXPATH)
			return TD_ELIMIT;
		return TD_OK;
	}
	case TD_REC_UNLINK:
	case TD_REC_RMDIR:
		if ((err = check_dir(ed, r->dir)) || (err = name_ok(r->name, r->name_len)))
			return err;
		if ((err = td_edit_lookup(ed, r->dir, r->name, r->name_len, &child)))
			return err;
		if ((err = td_edit_attr(ed, child, &st, NULL)))
			return err;
		if (r->type == TD_REC_UNLINK)
			return S_ISDIR(st.mode) ? TD_EISDIR : TD_OK;
		if (!S_ISDIR(st.mode))
			return TD_ENOTDIR;
		uint64_t n;
		if ((err = dir_count(ed, child, &n)))
			return err;
		return n ? TD_ENOTEMPTY : TD_OK;
	case TD_REC_RENAME: {
		if ((err = check_dir(ed, r->dir)) || (err = name_ok(r->name, r->name_len)))
			return err;
		if ((err = check_dir(ed, r->dir2)) || (err = name_ok(r->name2, r->name2_len)))
			return err;
		if (r->flags & ~TD_RENAME_NOREPLACE)
			return TD_EINVAL;
		if ((err = td_edit_lookup(ed, r->dir, r->name, r->name_len, &child)))
			return err;
		if ((err = td_edit_attr(ed, child, &st, NULL)))
			return err;
		if (S_ISDIR(st.mode) && is_ancestor(ed, child, r->dir2))
			return td_fail(TD_EINVAL, "cannot move a directory into itself");
		err = td_edit_lookup(ed, r->dir2, r->name2, r->name2_len, &other);
		if (err == TD_OK) {
			if (r->flags & TD_RENAME_NOREPLACE)
				return TD_EEXIST;
			if (other == child)
				return TD_OK;
			if ((err = td_edit_attr(ed, other, &st2, NULL)))
				return err;
			if (S_ISDIR(st2.mode)) {
				if (!S_ISDIR(st.mode))
					return TD_EISDIR;
				uint64_t n;
				if ((err = dir_count(ed, other, &n)))
					return err;
				if (n)
					return TD_ENOTEMPTY;
			} else if (S_ISDIR(st.mode)) {
				return TD_ENOTDIR;
			}
		} else if (err != TD_ENOENT) {
			return err;
		}
		size_t pl;
		if ((err = path_len(ed, r->dir2, &pl)))
			return err;
		if (pl + r->name2_len > TD_MAXPATH)
			return TD_ELIMIT;
		return TD_OK;
	}
	case TD_REC_CHMOD:
	case TD_REC_UTIMES:
		if (!td_edit_valid(ed, r->node))
			return td_fail(TD_EINVAL, "no node %u", (unsigned)r->node);
		if (r->type == TD_REC_UTIMES && r->time_nsec >= 1000000000u)
			return TD_EINVAL;
		return TD_OK;
	case TD_REC_COMPACT:
		return TD_OK;
	}
	return td_fail(TD_EINVAL, "unknown edit record type %u", (unsigned)r->type);
}

static void set_mtime(tnode *t, const td_edit_rec *r)
{
	t->mtime_sec = r->time_sec;
	t->mtime_nsec = r->time_nsec;
}

static int apply_content(td_edit *ed, const td_edit_rec *r)
{
	tnode *t;
	int err = touch(ed, r->node, &t);
	if (err || (err = ensure_pieces(t)))
		return err;
	td_piece p = { 0 };
	switch (r->type) {
	case TD_REC_WRITE:
		/* pwrite of 0 bytes changes nothing, not even past the end */
		if (r->data_len && r->off > t->size) {
			td_piece z = { .len = r->off - t->size, .kind = TD_PIECE_ZERO, .entry = TD_NOENTRY };
			if ((err = splice(t, t->size, 0, &z)))
				return err;
		}
		if (r->data_len) {
			if ((err = buf_put(ed, r->data, r->data_len, &p.src)))
				return err;
			p.len = r->data_len;
			p.kind = TD_PIECE_BUF;
			p.entry = TD_NOENTRY;
			uint64_t del = t->size - r->off < r->data_len ? t->size - r->off : r->data_len;
			if ((err = splice(t, r->off, del, &p)))
				return err;
		}
		break;
	case TD_REC_INSERT:
		if (r->data_len) {
			if ((err = buf_put(ed, r->data, r->data_len, &p.src)))
				return err;
			p.len = r->data_len;
			p.kind = TD_PIECE_BUF;
			p.entry = TD_NOENTRY;
			if ((err = splice(t, r->off, 0, &p)))
				return err;
		}
		break;
	case TD_REC_DELETE: {
		uint64_t del = t->size - r->off < r->len ? t->size - r->off : r->len;
		if (del && (err = splice(t, r->off, del, NULL)))
			return err;
		break;
	}
	case TD_REC_TRUNCATE:
		if (r->off < t->size) {
			if ((err = splice(t, r->off, t->size - r->off, NULL)))
				return err;
		} else if (r->off > t->size) {
			td_piece z = { .len = r->off - t->size, .kind = TD_PIECE_ZERO, .entry = TD_NOENTRY };
			if ((err = splice(t, t->size, 0, &z)))
				return err;
		}
		break;
	}
	set_mtime(t, r);
	return mark_dirty(ed, r->node);
}

/* Take child at index i out of directory d and mark it unlinked. */
static int detach(td_edit *ed, tnode *d, size_t i)
{
	tnode *c;
	int err = touch(ed, d->kids[i].node, &c);
	if (err)
		return err;
	c->linked = 0;
	c->parent = TD_NOENTRY;
	kid_remove(d, i);
	return TD_OK;
}

static int apply_ns(td_edit *ed, const td_edit_rec *r)
{
	tnode *d, *d2, *c;
	int err, found;
	size_t i;
	if ((err = touch(ed, r->dir, &d)) || (err = materialize(ed, d)))
		return err;
	switch (r->type) {
	case TD_REC_CREATE: {
		c = calloc(1, sizeof(*c));
		if (!c)
			return TD_ENOMEM;
		c->name_own = malloc(r->name_len ? r->name_len : 1);
		if (!c->name_own) {
			free(c);
			return TD_ENOMEM;
		}
		memcpy(c->name_own, r->name, r->name_len);
		c->name = c->name_own;
		c->namelen = r->name_len;
		c->mode = r->mode;
		set_mtime(c, r);
		c->parent = r->dir;
		c->base = TD_NOENTRY;
		c->linked = 1;
		c->dirty = 1;
		c->content_edited = 1;
		if (S_ISDIR(r->mode))
			c->dir_mat = 1;
		if (S_ISLNK(r->mode)) {
			td_piece p = { .len = r->data_len, .kind = TD_PIECE_BUF, .entry = TD_NOENTRY };
			if ((err = buf_put(ed, r->data, r->data_len, &p.src)) || (err = pc_reserve(c, 1))) {
				free(c->name_own);
				free(c);
				return err;
			}
			c->pc[0] = p;
			c->npc = 1;
			c->size = r->data_len;
		}
		if ((err = node_put(ed, r->node, c))) {
			free(c->pc);
			free(c->name_own);
			free(c);
			return err;
		}
		ed->next++;
		i = kid_find(d, r->name, r->name_len, &found);
		assert(!found);
		if ((err = kid_insert(d, i, c->name, c->namelen, r->node)))
			return err;
		break;
	}
	case TD_REC_UNLINK:
	case TD_REC_RMDIR:
		i = kid_find(d, r->name, r->name_len, &found);
		assert(found);
		if ((err = detach(ed, d, i)))
			return err;
		break;
	case TD_REC_RENAME: {
		i = kid_find(d, r->name, r->name_len, &found);
		assert(found);
		td_node node = d->kids[i].node;
		if ((err = touch(ed, r->dir2, &d2)) || (err = materialize(ed, d2)) || (err = touch(ed, node, &c)))
			return err;
		size_t j = kid_find(d2, r->name2, r->name2_len, &found);
		if (found && d2->kids[j].node == node)
			break; /* rename onto itself: nothing happens */
		char *nm = malloc(r->name2_len);
		if (!nm)
			return TD_ENOMEM;
		memcpy(nm, r->name2, r->name2_len);
		if (found && (err = detach(ed, d2, j))) {
			free(nm);
			return err;
		}
		i = kid_find(d, r->name, r->name_len, &found);
		assert(found);
		kid_remove(d, i);
		free(c->name_own);
		c->name_own = nm;
		c->name = nm;
		c->namelen = r->name2_len;
		c->parent = r->dir2;
		j = kid_find(d2, nm, r->name2_len, &found);
		assert(!found);
		if ((err = kid_insert(d2, j, c->name, c->namelen, node)))
			return err;
		set_mtime(d2, r);
		if ((err = mark_dirty(ed, r->dir2)))
			return err;
		break;
	}
	}
	set_mtime(d, r);
	return mark_dirty(ed, r->dir);
}

static int apply(td_edit *ed, const td_edit_rec *r)
{
	tnode *t;
	int err;
	ed->changed = 1;
	switch (r->type) {
	case TD_REC_WRITE:
	case TD_REC_INSERT:
	case TD_REC_DELETE:
	case TD_REC_TRUNCATE:
		return apply_content(ed, r);
	case TD_REC_CREATE:
	case TD_REC_UNLINK:
	case TD_REC_RMDIR:
	case TD_REC_RENAME:
		return apply_ns(ed, r);
	case TD_REC_CHMOD:
		if ((err = touch(ed, r->node, &t)))
			return err;
		t->mode = (t->mode & S_IFMT) | (r->mode & 07777);
		return TD_OK;
	case TD_REC_UTIMES:
		if ((err = touch(ed, r->node, &t)))
			return err;
		set_mtime(t, r);
		return TD_OK;
	case TD_REC_COMPACT:
		return TD_OK;
	}
	return TD_EINVAL;
}

int td_edit_replay(td_edit *ed, const td_edit_rec *rec)
{
	int err = check(ed, rec);
	if (err)
		return err;
	return apply(ed, rec);
}

int td_edit_apply(td_edit *ed, const td_edit_rec *rec)
{
	int err = check(ed, rec);
	if (err)
		return err;
	if (rec->type == TD_REC_COMPACT)
		return TD_EINVAL;
	if (ed->log && (err = ed->log(ed->logctx, rec)))
		return err;
	return apply(ed, rec);
}

/* ---------- convenience wrappers ---------- */

static td_edit_rec rec_now(uint32_t type)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	td_edit_rec r = { .type = type, .time_sec = ts.tv_sec, .time_nsec = (uint32_t)ts.tv_nsec };
	return r;
}

int td_edit_write(td_edit *ed, td_node node, uint64_t off, const void *data, size_t len)
{
	td_edit_rec r = rec_now(TD_REC_WRITE);
	r.node = node;
	r.off = off;
	r.data = data;
	r.data_len = len;
	return td_edit_apply(ed, &r);
}

int td_edit_insert(td_edit *ed, td_node node, uint64_t off, const void *data, size_t len)
{
	td_edit_rec r = rec_now(TD_REC_INSERT);
	r.node = node;
	r.off = off;
	r.data = data;
	r.data_len = len;
	return td_edit_apply(ed, &r);
}

int td_edit_delete(td_edit *ed, td_node node, uint64_t off, uint64_t len)
{
	td_edit_rec r = rec_now(TD_REC_DELETE);
	r.node = node;
	r.off = off;
	r.len = len;
	return td_edit_apply(ed, &r);
}

int td_edit_truncate(td_edit *ed, td_node node, uint64_t size)
{
	td_edit_rec r = rec_now(TD_REC_TRUNCATE);
	r.node = node;
	r.off = size;
	return td_edit_apply(ed, &r);
}

int td_edit_create(td_edit *ed, td_node dir, const char *name, size_t len, mode_t mode,
		   const char *target, td_node *out)
{
	if (len > UINT32_MAX)
		return TD_ELIMIT;
	td_edit_rec r = rec_now(TD_REC_CREATE);
	r.dir = dir;
	r.name = name;
	r.name_len = (uint32_t)len;
	r.mode = mode;
	r.node = ed->next;
	if (S_ISLNK(mode)) {
		if (!target)
			return TD_EINVAL;
		r.data = target;
		r.data_len = strlen(target);
	}
	int err = td_edit_apply(ed, &r);
	if (!err && out)
		*out = r.node;
	return err;
}

static int ns_rec(td_edit *ed, uint32_t type, td_node dir, const char *name, size_t len)
{
	if (len > UINT32_MAX)
		return TD_ELIMIT;
	td_edit_rec r = rec_now(type);
	r.dir = dir;
	r.name = name;
	r.name_len = (uint32_t)len;
	return td_edit_apply(ed, &r);
}

int td_edit_unlink(td_edit *ed, td_node dir, const char *name, size_t len)
{
	return ns_rec(ed, TD_REC_UNLINK, dir, name, len);
}

int td_edit_rmdir(td_edit *ed, td_node dir, const char *name, size_t len)
{
	return ns_rec(ed, TD_REC_RMDIR, dir, name, len);
}

int td_edit_rename(td_edit *ed, td_node dir, const char *name, size_t len, td_node dir2,
		   const char *name2, size_t len2, unsigned flags)
{
	if (len > UINT32_MAX || len2 > UINT32_MAX)
		return TD_ELIMIT;
	td_edit_rec r = rec_now(TD_REC_RENAME);
	r.dir = dir;
	r.name = name;
	r.name_len = (uint32_t)len;
	r.dir2 = dir2;
	r.name2 = name2;
	r.name2_len = (uint32_t)len2;
	r.flags = flags;
	return td_edit_apply(ed, &r);
}

int td_edit_chmod(td_edit *ed, td_node node, mode_t mode)
{
	td_edit_rec r = rec_now(TD_REC_CHMOD);
	r.node = node;
	r.mode = mode & 07777;
	r.time_sec = 0;
	r.time_nsec = 0;
	return td_edit_apply(ed, &r);
}

int td_edit_utimes(td_edit *ed, td_node node, int64_t sec, uint32_t nsec)
{
	td_edit_rec r = rec_now(TD_REC_UTIMES);
	r.node = node;
	r.time_sec = sec;
	r.time_nsec = nsec;
	return td_edit_apply(ed, &r);
}
