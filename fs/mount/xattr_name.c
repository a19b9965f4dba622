/* xattr_name: parse user.tadoc.* names and build their values, for both kinds of mount. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xattr_name.h"
#include "td_analytics.h"
#include "td_err.h"
#include "td_format.h"

#define PREFIX TD_FS_XATTR_PREFIX
#define PREFIX_LEN (sizeof PREFIX - 1)
#define SEARCH_NAME PREFIX "search."
#define MORE_TAG "#more "

size_t fs_u64dec(uint64_t v, char *out)
{
	char tmp[20];
	size_t n = 0;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (size_t i = 0; i < n; i++)
		out[i] = tmp[n - 1 - i];
	return n;
}

int fs_value_u64(uint64_t v, char **val, size_t *len)
{
	char *p = malloc(21);
	if (!p)
		return -ENOMEM;
	*len = fs_u64dec(v, p);
	*val = p;
	return 0;
}

int td_fs_xattr_dec(const char *s, size_t n, uint64_t *out)
{
	/* any u64, as tadoc's -n, --top and -k take (td_cli_parse_u64), so
	 * that top.N is `tadoc top -n N` for every N the command takes */
	if (n == 0)
		return -EINVAL;
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		unsigned d = (unsigned)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -EINVAL; /* past 2^64 - 1 */
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

/* N of a continuation name (user.tadoc.search.WORD@N): decimal digits
 * without leading zeros (one name per part); a number past 2^64 - 1 reads
 * as UINT64_MAX, past every hit count (ENODATA, as any N past the end).
 * 0 or -EINVAL. */
static int parse_hit_index(const char *s, uint64_t *out)
{
	size_t n = strlen(s);
	if (n == 0 || (n > 1 && s[0] == '0'))
		return -EINVAL;
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		unsigned d = (unsigned)(s[i] - '0');
		v = v > (UINT64_MAX - d) / 10 ? UINT64_MAX : v * 10 + d; /* past any count */
	}
	*out = v;
	return 0;
}

/* Does name start with the attribute family `fam` ("count.")? Then *arg is
 * what follows it. */
static int family(const char *rest, const char *fam, const char **arg)
{
	size_t n = strlen(fam);
	if (strncmp(rest, fam, n) != 0)
		return 0;
	*arg = rest + n;
	return 1;
}

/* The "@N" tail of a list name: x->num (0 without one) and x->blen; the
 * length of arg before it. */
static size_t list_tail(td_fs_xname *x, const char *name, const char *arg)
{
	const char *at = strrchr(arg, '@');
	size_t n = at ? (size_t)(at - arg) : strlen(arg);
	x->blen = (size_t)(arg - name) + n;
	if (at && parse_hit_index(at + 1, &x->num))
		x->err = -EINVAL;
	return n;
}

/* x->word = a phrase of n bytes at p (EINVAL unless one). */
static void phrase(td_fs_xname *x, const char *p, size_t n)
{
	x->word = p;
	x->wlen = n;
	x->nwords = td_phrase_words(p, n);
	if (!x->nwords)
		x->err = -EINVAL;
}

/* The decimal number of n bytes at s into *out (no digits, a sign or any
 * other byte: EINVAL). */
static void number(td_fs_xname *x, const char *s, size_t n, uint64_t *out)
{
	if (td_fs_xattr_dec(s, n, out))
		x->err = -EINVAL;
}

void td_fs_xattr_parse(const char *name, td_fs_xname *x)
{
	memset(x, 0, sizeof *x);
	if (strncmp(name, PREFIX, PREFIX_LEN) != 0)
		return;
	const char *rest = name + PREFIX_LEN, *arg;
	size_t n;
	if (strcmp(rest, "stats") == 0) {
		x->kind = TD_FS_XSTATS;
	} else if (strcmp(rest, "words") == 0) {
		x->kind = TD_FS_XWORDS;
	} else if (family(rest, "count.", &arg)) {
		x->kind = TD_FS_XCOUNT;
		phrase(x, arg, strlen(arg));
	} else if (family(rest, "search.", &arg)) {
		x->kind = TD_FS_XSEARCH;
		n = list_tail(x, name, arg);
		phrase(x, arg, n);
	} else if (family(rest, "files.", &arg)) {
		x->kind = TD_FS_XFILES;
		n = list_tail(x, name, arg);
		phrase(x, arg, n);
	} else if (family(rest, "top.", &arg)) {
		x->kind = TD_FS_XTOP;
		n = list_tail(x, name, arg);
		number(x, arg, n, &x->n);
	} else if (strcmp(rest, "vector") == 0 || strncmp(rest, "vector@", 7) == 0) {
		x->kind = TD_FS_XVECTOR;
		list_tail(x, name, rest + 6);
	} else if (family(rest, "ngrams.", &arg)) {
		/* LEN.K */
		x->kind = TD_FS_XNGRAMS;
		n = list_tail(x, name, arg);
		const char *dot = memchr(arg, '.', n);
		uint64_t len = 0;
		number(x, arg, dot ? (size_t)(dot - arg) : n, &len);
		number(x, dot ? dot + 1 : arg, dot ? n - (size_t)(dot + 1 - arg) : 0, &x->n);
		if (len < 2 || len > TD_PHRASE_MAX)
			x->err = -EINVAL;
		x->len = (unsigned)len;
	} else if (family(rest, "fuzzy.", &arg)) {
		/* K.WORD */
		x->kind = TD_FS_XFUZZY;
		n = list_tail(x, name, arg);
		const char *dot = memchr(arg, '.', n);
		number(x, arg, dot ? (size_t)(dot - arg) : n, &x->n);
		if (x->n > TD_FUZZY_MAXK)
			x->err = -EINVAL;
		x->word = dot ? dot + 1 : arg + n;
		x->wlen = dot ? n - (size_t)(dot + 1 - arg) : 0;
		x->nwords = 1;
		if (!td_is_word(x->word, x->wlen))
			x->err = -EINVAL;
	} else if (family(rest, "insert.", &arg) || family(rest, "delete.", &arg)) {
		x->kind = rest[0] == 'i' ? TD_FS_XINSERT : TD_FS_XDELETE;
		x->err = td_fs_xattr_dec(arg, strlen(arg), &x->num);
	}
}

int td_fs_lines_init(td_fs_lines *l, const char *name, size_t nlen, uint64_t first)
{
	memset(l, 0, sizeof *l);
	l->out = malloc(TD_FS_XATTR_MAX);
	if (!l->out)
		return -ENOMEM;
	l->name = name;
	l->nlen = nlen;
	l->first = l->safe_next = first;
	/* room kept for the continuation line: tag, name, '@', 20 digits, '\n' */
	l->reserve = (sizeof MORE_TAG - 1) + nlen + 1 + 20 + 1;
	return 0;
}

int td_fs_lines_add(td_fs_lines *l, const char *line, size_t len)
{
	if (l->full)
		return 1;
	if (l->i++ < l->first)
		return 0;
	if (l->pos + len > TD_FS_XATTR_MAX) {
		l->full = 1;
		return 1;
	}
	memcpy(l->out + l->pos, line, len);
	l->pos += len;
	if (l->pos + l->reserve <= TD_FS_XATTR_MAX) {
		l->safe_pos = l->pos;
		l->safe_next = l->i;
	}
	return 0;
}

int td_fs_lines_end(td_fs_lines *l, char **val, size_t *len)
{
	*val = NULL;
	*len = 0;
	int rc = 0;
	if (!l->full && l->i < l->first) {
		rc = -ENODATA;
	} else if (l->full && l->safe_next == l->first) {
		rc = -E2BIG; /* not even one line fits */
	} else if (l->full) {
		/* cut at the last line that leaves room for the continuation
		 * line, and name the part that follows */
		size_t pos = l->safe_pos;
		memcpy(l->out + pos, MORE_TAG, sizeof MORE_TAG - 1);
		pos += sizeof MORE_TAG - 1;
		memcpy(l->out + pos, l->name, l->nlen);
		pos += l->nlen;
		l->out[pos++] = '@';
		pos += fs_u64dec(l->safe_next, l->out + pos);
		l->out[pos++] = '\n';
		l->pos = pos;
	}
	if (rc == 0 && l->pos > 0) {
		*val = l->out;
		*len = l->pos;
		l->out = NULL;
	}
	free(l->out);
	l->out = NULL;
	return rc;
}

int td_fs_xattr_search_value(const td_hits *h, uint64_t first, const char *w, size_t wlen, td_fs_xpath_fn pathf,
			     const void *ctx, char **val, size_t *len)
{
	*val = NULL;
	*len = 0;
	if (first > h->n)
		return -ENODATA;
	int is_dir = pathf != NULL;
	size_t nlen = sizeof SEARCH_NAME - 1 + wlen;
	char *name = malloc(nlen);
	char *path = is_dir ? malloc(TD_MAXPATH + 1) : NULL;
	char *line = malloc(2 * (TD_MAXPATH + 1) + 24);
	td_fs_lines l = { 0 };
	int rc = 0;
	if (!name || (is_dir && !path) || !line || td_fs_lines_init(&l, name, nlen, first)) {
		rc = -ENOMEM;
		goto out;
	}
	memcpy(name, SEARCH_NAME, sizeof SEARCH_NAME - 1);
	memcpy(name + sizeof SEARCH_NAME - 1, w, wlen);
	/* lines before `first` are counted, not built */
	l.i = first;
	uint32_t path_of = UINT32_MAX;
	size_t plen = 0;
	for (uint64_t i = first; i < h->n && !l.full; i++) {
		size_t ll = 0;
		if (is_dir) {
			if (h->v[i].file != path_of) {
				int n = pathf(ctx, h->v[i].file, path, TD_MAXPATH + 1);
				if (n < 0) {
					rc = -td_err_errno(n);
					break;
				}
				plen = (size_t)n;
				path_of = h->v[i].file;
			}
			ll = td_path_escape(path, plen, line);
			line[ll++] = ':';
		}
		ll += fs_u64dec(h->v[i].off, line + ll);
		line[ll++] = '\n';
		td_fs_lines_add(&l, line, ll);
	}
out:
	if (rc == 0 && l.out)
		rc = td_fs_lines_end(&l, val, len);
	free(l.out);
	free(name);
	free(path);
	free(line);
	return rc;
}
