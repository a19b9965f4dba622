/* xattr_name: parse user.tadoc.* names and build their values, for both kinds of mount. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xattr_name.h"
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
	if (n == 0 || n > 19)
		return -EINVAL;
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(s[i] - '0');
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

void td_fs_xattr_parse(const char *name, td_fs_xname *x)
{
	memset(x, 0, sizeof *x);
	if (strncmp(name, PREFIX, PREFIX_LEN) != 0)
		return;
	const char *rest = name + PREFIX_LEN, *arg;
	if (strcmp(rest, "stats") == 0) {
		x->kind = TD_FS_XSTATS;
	} else if (strcmp(rest, "words") == 0) {
		x->kind = TD_FS_XWORDS;
	} else if (family(rest, "count.", &arg)) {
		x->kind = TD_FS_XCOUNT;
		x->word = arg;
		x->wlen = strlen(arg);
		if (x->wlen == 0 || !td_is_word(arg, x->wlen))
			x->err = -EINVAL;
	} else if (family(rest, "search.", &arg)) {
		x->kind = TD_FS_XSEARCH;
		const char *at = strrchr(arg, '@');
		x->word = arg;
		x->wlen = at ? (size_t)(at - arg) : strlen(arg);
		if ((at && parse_hit_index(at + 1, &x->num)) || x->wlen == 0 || !td_is_word(arg, x->wlen))
			x->err = -EINVAL;
	} else if (family(rest, "insert.", &arg) || family(rest, "delete.", &arg)) {
		x->kind = rest[0] == 'i' ? TD_FS_XINSERT : TD_FS_XDELETE;
		x->err = td_fs_xattr_dec(arg, strlen(arg), &x->num);
	}
}

int td_fs_xattr_search_value(const td_hits *h, uint64_t first, const char *w, size_t wlen, td_fs_xpath_fn pathf,
			     const void *ctx, char **val, size_t *len)
{
	*val = NULL;
	*len = 0;
	if (first > h->n)
		return -ENODATA;
	int is_dir = pathf != NULL;
	/* Room kept for the continuation line: tag, name, '@', 20 digits, '\n'. */
	const size_t reserve = (sizeof MORE_TAG - 1) + (sizeof SEARCH_NAME - 1) + wlen + 1 + 20 + 1;
	char *out = malloc(TD_FS_XATTR_MAX);
	char *path = is_dir ? malloc(TD_MAXPATH + 1) : NULL;
	char *line = malloc(2 * (TD_MAXPATH + 1) + 24);
	int rc = 0;
	if (!out || (is_dir && !path) || !line) {
		rc = -ENOMEM;
		goto out;
	}
	size_t pos = 0, safe_pos = 0;
	uint64_t safe_next = first, i = first;
	uint32_t path_of = UINT32_MAX;
	size_t plen = 0;
	for (; i < h->n; i++) {
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
		if (pos + ll > TD_FS_XATTR_MAX)
			break;
		memcpy(out + pos, line, ll);
		pos += ll;
		if (pos + reserve <= TD_FS_XATTR_MAX) {
			safe_pos = pos;
			safe_next = i + 1;
		}
	}
	if (rc == 0 && i < h->n) {
		/* Does not fit: cut at the last line that leaves room for the
		 * continuation line, and name the part that follows. */
		pos = safe_pos;
		memcpy(out + pos, MORE_TAG SEARCH_NAME, sizeof MORE_TAG SEARCH_NAME - 1);
		pos += sizeof MORE_TAG SEARCH_NAME - 1;
		memcpy(out + pos, w, wlen);
		pos += wlen;
		out[pos++] = '@';
		pos += fs_u64dec(safe_next, out + pos);
		out[pos++] = '\n';
	}
	if (rc == 0 && pos > 0) {
		*val = out;
		*len = pos;
		out = NULL;
	}
out:
	free(out);
	free(path);
	free(line);
	return rc;
}
