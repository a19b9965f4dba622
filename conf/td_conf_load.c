/* td_conf_load: locate the config file, parse it with inih, apply -o overrides. */
#include "td_conf.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ini.h>

/* 0 when `path` names something (or something we cannot look at: the load
 * then reports why); 1 when it does not exist. */
static int absent(const char *path)
{
	struct stat st;
	if (stat(path, &st) == 0)
		return 0;
	return errno == ENOENT || errno == ENOTDIR;
}

int td_conf_find_file(char *buf, size_t len)
{
	const char *xdg = getenv("XDG_CONFIG_HOME");
	const char *home = getenv("HOME");
	int n = -1;
	if (!len)
		return -1;
	buf[0] = '\0';
	if (xdg && xdg[0] == '/') {
		n = snprintf(buf, len, "%s/%s", xdg, TD_CONF_USER_FILE);
	} else {
		if (!home || home[0] != '/') {
			struct passwd *pw = getpwuid(getuid());
			home = pw && pw->pw_dir && pw->pw_dir[0] == '/' ? pw->pw_dir : NULL;
		}
		if (home)
			n = snprintf(buf, len, "%s/.config/%s", home, TD_CONF_USER_FILE);
	}
	if (n >= 0 && (size_t)n >= len) {
		buf[0] = '\0';
		return -1;
	}
	if (n >= 0 && !absent(buf))
		return 1;
	if (!absent(TD_CONF_SYSTEM_FILE)) {
		if (strlen(TD_CONF_SYSTEM_FILE) >= len) {
			buf[0] = '\0';
			return -1;
		}
		strcpy(buf, TD_CONF_SYSTEM_FILE);
		return 1;
	}
	buf[0] = '\0';
	return 0;
}

/* State shared by the line reader and the inih handler. */
struct parse {
	td_conf *c;
	FILE *f;
	unsigned line;     /* lines handed to inih so far */
	unsigned err_line; /* line of the first error found here; 0 = none */
	char msg[512];
};

__attribute__((format(printf, 2, 3)))
static void parse_fail(struct parse *p, const char *fmt, ...)
{
	if (p->err_line)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->msg, sizeof p->msg, fmt, ap);
	va_end(ap);
	p->err_line = p->line ? p->line : 1;
}

static int is_blank(int ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f';
}

/* A section header line (leading blanks gone): accept [tadocfs] only and
 * hand inih a normalised "[tadocfs]". Returns 0, or -1 after parse_fail. A
 * header without ']' is left to inih, which reports a syntax error. */
static int check_section(struct parse *p, char *s)
{
	char *close = strchr(s, ']');
	if (!close)
		return 0;
	char *a = s + 1, *b = close;
	while (a < b && is_blank(*a))
		a++;
	while (b > a && is_blank(b[-1]))
		b--;
	const char *rest = close + 1;
	while (is_blank(*rest) || *rest == '\n')
		rest++;
	if (*rest && *rest != ';' && *rest != '#') {
		parse_fail(p, "unexpected text after section header");
		return -1;
	}
	if ((size_t)(b - a) != strlen("tadocfs") || strncmp(a, "tadocfs", 7)) {
		parse_fail(p, "unknown section [%.*s] (keys go at top level or in [tadocfs])",
			   (int)(b - a), a);
		return -1;
	}
	strcpy(s, "[tadocfs]\n");
	return 0;
}

/* inih line reader: reads one whole line, counts it, rejects NUL bytes and
 * lines longer than inih's buffer, removes leading blanks (so inih never
 * treats a line as a multi-line continuation) and checks section headers.
 * Returns NULL at end of file and after the first error. */
static char *read_line(char *str, int num, void *stream)
{
	struct parse *p = stream;
	if (p->err_line || num < 3)
		return NULL;
	size_t cap = (size_t)num - 2; /* room for '\n' and NUL */
	size_t n = 0;
	bool any = false, started = false, nul = false, too_long = false;
	int ch;
	while ((ch = getc(p->f)) != EOF) {
		any = true;
		if (ch == '\n')
			break;
		if (!started && is_blank(ch))
			continue;
		started = true;
		if (ch == '\0')
			nul = true;
		else if (n < cap)
			str[n++] = (char)ch;
		else
			too_long = true;
		if (nul || too_long)
			break; /* the line is an error: do not read on (/dev/zero has no end) */
	}
	if (ferror(p->f)) {
		int e = errno;
		p->line++;
		parse_fail(p, "read error: %s", strerror(e));
		return NULL;
	}
	if (!any)
		return NULL;
	p->line++;
	if (nul) {
		parse_fail(p, "NUL byte in line");
		return NULL;
	}
	if (too_long) {
		parse_fail(p, "line too long (at most %zu bytes)", cap);
		return NULL;
	}
	str[n++] = '\n';
	str[n] = '\0';
	/* inih drops a UTF-8 BOM on line 1 itself: drop it here first, so that
	 * a section header after it is checked like any other */
	if (p->line == 1 && !memcmp(str, "\xEF\xBB\xBF", 3)) {
		memmove(str, str + 3, n - 2);
		n -= 3;
		size_t lead = 0;
		while (is_blank(str[lead]))
			lead++;
		memmove(str, str + lead, n - lead + 1);
	}
	if (str[0] == '[' && check_section(p, str))
		return NULL;
	return str;
}

static int on_pair(void *user, const char *section, const char *name,
		   const char *value)
{
	struct parse *p = user;
	(void)section; /* "" or "tadocfs": read_line rejects every other one */
	if (p->err_line)
		return 0;
	char val[512];
	snprintf(val, sizeof val, "%s", value);
	/* Inline '#' comment (inih itself strips ' ;' comments). */
	for (char *q = val; *q; q++) {
		if (*q == '#' && q > val && is_blank(q[-1])) {
			*q = '\0';
			break;
		}
	}
	size_t len = strlen(val);
	while (len && is_blank(val[len - 1]))
		val[--len] = '\0';
	td_conf_origin o = {TD_CONF_SRC_FILE, p->line};
	if (td_conf_set(p->c, name, val, o, p->msg, sizeof p->msg)) {
		p->err_line = p->line;
		return 0;
	}
	return 1;
}

__attribute__((format(printf, 5, 6)))
static int load_fail(char *err, size_t errlen, const char *where, unsigned line,
		     const char *fmt, ...)
{
	if (err && errlen) {
		char msg[768];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(msg, sizeof msg, fmt, ap);
		va_end(ap);
		if (!where)
			snprintf(err, errlen, "option -o %s", msg);
		else if (line == 0)
			snprintf(err, errlen, "config file %s: %s", where, msg);
		else
			snprintf(err, errlen, "%s:%u: %s", where, line, msg);
	}
	return -1;
}

static int load_file(td_conf *c, const char *path, bool must_exist,
		     char *err, size_t errlen)
{
	/* O_NONBLOCK: opening a FIFO must not wait for a writer */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		if (!must_exist && (errno == ENOENT || errno == ENOTDIR))
			return 0; /* vanished since td_conf_find_file(): none */
		return load_fail(err, errlen, path, 0, "cannot open: %s", strerror(errno));
	}
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		return load_fail(err, errlen, path, 0, "cannot open: %s", strerror(e));
	}
	if (S_ISDIR(st.st_mode)) {
		close(fd);
		return load_fail(err, errlen, path, 0, "is a directory");
	}
	if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode)) {
		close(fd);
		return load_fail(err, errlen, path, 0, "not a regular file");
	}
	int fl = fcntl(fd, F_GETFL);
	FILE *f = fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0 ? NULL : fdopen(fd, "r");
	if (!f) {
		int e = errno;
		close(fd);
		return load_fail(err, errlen, path, 0, "cannot open: %s", strerror(e));
	}
	if (strlen(path) >= sizeof c->file) {
		fclose(f);
		return load_fail(err, errlen, path, 0, "path too long");
	}
	strcpy(c->file, path);

	struct parse p = {.c = c, .f = f};
	int rc = ini_parse_stream(read_line, &p, on_pair, &p);
	fclose(f);
	if (rc == -2)
		return load_fail(err, errlen, path, p.line, "out of memory");
	if (rc > 0 && (!p.err_line || (unsigned)rc < p.err_line))
		return load_fail(err, errlen, path, (unsigned)rc,
				 "syntax error (expected 'key = value', '[tadocfs]' or a comment)");
	if (p.err_line)
		return load_fail(err, errlen, path, p.err_line, "%s", p.msg);
	if (rc != 0)
		return load_fail(err, errlen, path, 0, "cannot parse (inih error %d)", rc);
	return 0;
}

static int apply_override(td_conf *c, const char *s, unsigned pos,
			  char *err, size_t errlen)
{
	char key[64];
	char msg[512];
	if (!s)
		return load_fail(err, errlen, NULL, pos, "(none): empty option");
	const char *eq = strchr(s, '=');
	if (!eq) {
		if (td_conf_key_find(s) >= 0)
			return load_fail(err, errlen, NULL, pos,
					 "%s: missing value (use %s=VALUE)", s, s);
		return load_fail(err, errlen, NULL, pos,
				 "%s: expected key=value", s);
	}
	const char *a = s, *b = eq;
	while (a < b && is_blank(*a))
		a++;
	while (b > a && is_blank(b[-1]))
		b--;
	if ((size_t)(b - a) >= sizeof key)
		return load_fail(err, errlen, NULL, pos, "%.*s: unknown key",
				 (int)(b - a), a);
	memcpy(key, a, (size_t)(b - a));
	key[b - a] = '\0';
	char val[512];
	const char *v = eq + 1;
	while (is_blank(*v))
		v++;
	if ((size_t)snprintf(val, sizeof val, "%s", v) >= sizeof val)
		return load_fail(err, errlen, NULL, pos, "%s: value too long (at most %zu bytes)", key,
				 sizeof val - 1);
	size_t len = strlen(val);
	while (len && is_blank(val[len - 1]))
		val[--len] = '\0';
	if (!strcmp(key, "sync")) /* the mount option sync= (tadocfs(8)) */
		snprintf(key, sizeof key, "journal_sync");
	if (td_conf_key_find(key) < 0)
		return load_fail(err, errlen, NULL, pos, "%s: unknown key", key);
	td_conf_origin o = {TD_CONF_SRC_OPTION, pos};
	if (td_conf_set(c, key, val, o, msg, sizeof msg))
		return load_fail(err, errlen, NULL, pos, "%s", msg);
	return 0;
}

int td_conf_load(td_conf *c, const char *explicit_file,
		 const char *const *overrides, size_t n, char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = '\0';
	td_conf_defaults(c);
	if (explicit_file) {
		if (!explicit_file[0])
			return load_fail(err, errlen, NULL, 0, "config: empty file name");
		if (load_file(c, explicit_file, true, err, errlen))
			return -1;
	} else {
		char path[TD_CONF_PATH_MAX];
		int found = td_conf_find_file(path, sizeof path);
		if (found < 0)
			return load_fail(err, errlen, "under $XDG_CONFIG_HOME or $HOME", 0,
					 "path too long");
		if (found && load_file(c, path, false, err, errlen))
			return -1;
	}
	for (size_t i = 0; i < n; i++)
		if (apply_override(c, overrides[i], (unsigned)(i + 1), err, errlen))
			return -1;
	return 0;
}
