/* cli_out: one-line error messages, checked buffered stdout, strict number parsing. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "td_conf.h"
#include "td_err.h"

enum { OUT_CAP = 1 << 16 };
static char out_static[OUT_CAP];
static char *out_buf = out_static; /* or a heap block: td_cli_out_on_heap */
static size_t out_len;

/* Append s to o with its newlines and carriage returns as "\\n" and
 * "\\r", so that a name holding one still gives a message of one line;
 * returns the new end. */
static char *put_one_line(char *o, const char *s)
{
	for (; *s; s++) {
		if (*s == '\n' || *s == '\r') {
			*o++ = '\\';
			*o++ = *s == '\n' ? 'n' : 'r';
		} else {
			*o++ = *s;
		}
	}
	return o;
}

static void print_line(const char *subject, const char *msg)
{
	size_t sl = subject ? strlen(subject) : 0, ml = strlen(msg);
	char *line = malloc(2 * (sl + ml) + 16);
	if (!line) {
		fprintf(stderr, "tadoc: %s%s%s\n", subject ? subject : "", subject ? ": " : "", msg);
		return;
	}
	char *o = put_one_line(line, "tadoc: ");
	if (subject) {
		o = put_one_line(o, subject);
		o = put_one_line(o, ": ");
	}
	o = put_one_line(o, msg);
	*o++ = '\n';
	/* one write, so the line is written in one piece */
	fwrite(line, 1, (size_t)(o - line), stderr);
	free(line);
}

int td_cli_errorf(const char *subject, const char *fmt, ...)
{
	char msg[8192]; /* room for a detail naming a path of TD_MAXPATH bytes */
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	print_line(subject, msg);
	return TD_CLI_FAIL;
}

int td_cli_status(int err)
{
	if (err == TD_OK)
		return TD_CLI_OK;
	if (err == TD_ENOTWORD)
		return TD_CLI_USAGE;
	return TD_CLI_FAIL;
}

void td_cli_clear_detail(void)
{
	td_fail(TD_OK, "%s", "");
}

int td_cli_error_td(const char *subject, int err)
{
	const char *detail = td_errdetail();
	if (detail && subject) {
		/* Drop a leading "SUBJECT: " (or "'SUBJECT': ") the engine already put. */
		size_t sl = strlen(subject);
		if (strncmp(detail, subject, sl) == 0 && detail[sl] == ':' && detail[sl + 1] == ' ')
			detail += sl + 2;
		else if (detail[0] == '\'' && strncmp(detail + 1, subject, sl) == 0 &&
			 detail[sl + 1] == '\'' && detail[sl + 2] == ':' && detail[sl + 3] == ' ')
			detail += sl + 4;
	}
	const char *what = td_strerror(err);
	/* Leave out a detail that only repeats the generic message. */
	if (detail && (detail[0] == '\0' || strcmp(detail, what) == 0))
		detail = NULL;
	if (detail)
		td_cli_errorf(subject, "%s: %s", what, detail);
	else
		td_cli_errorf(subject, "%s", what);
	td_cli_clear_detail();
	return td_cli_status(err);
}

int td_cli_error_sys(const char *subject, int errnum)
{
	return td_cli_errorf(subject, "%s", strerror(errnum));
}

int td_cli_usage(const char *cmd, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	/* through print_line: a word or path with a newline in it (an
	 * argument, a line of -f FILE) still gives one line */
	char line[1200];
	if (cmd)
		snprintf(line, sizeof line, "%s: %s (see 'tadoc %s --help')", cmd, msg, cmd);
	else
		snprintf(line, sizeof line, "%s (see 'tadoc --help')", msg);
	print_line(NULL, line);
	return TD_CLI_USAGE;
}

static void write_all(const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(STDOUT_FILENO, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EPIPE)
				exit(TD_CLI_FAIL);
			td_cli_error_sys("standard output", errno);
			exit(TD_CLI_FAIL);
		}
		p += w;
		n -= (size_t)w;
	}
}

void td_cli_out_on_heap(void)
{
	char *b = out_len || out_buf != out_static ? NULL : malloc(OUT_CAP);
	if (b)
		out_buf = b; /* kept to the end */
}

void td_cli_flush(void)
{
	size_t n = out_len;
	out_len = 0;
	write_all(out_buf, n);
}

void td_cli_out(const void *buf, size_t len)
{
	if (len >= OUT_CAP) {
		td_cli_flush();
		write_all(buf, len);
		return;
	}
	if (out_len + len > OUT_CAP)
		td_cli_flush();
	memcpy(out_buf + out_len, buf, len);
	out_len += len;
}

void *td_cli_out_room(size_t len)
{
	if (len > OUT_CAP)
		return NULL;
	if (out_len + len > OUT_CAP)
		td_cli_flush();
	return out_buf + out_len;
}

void td_cli_out_commit(size_t len)
{
	out_len += len; /* within the room td_cli_out_room gave */
}

size_t td_cli_fmt_u64(char b[TD_CLI_U64_LEN], uint64_t v, char sep)
{
	size_t at = TD_CLI_U64_LEN;
	b[--at] = sep;
	do
		b[--at] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	return at;
}

void td_cli_out_u64(uint64_t v, char sep)
{
	char b[TD_CLI_U64_LEN];
	const size_t at = td_cli_fmt_u64(b, v, sep);
	td_cli_out(b + at, sizeof b - at);
}

void td_cli_outf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	size_t room = OUT_CAP - out_len;
	int n = vsnprintf(out_buf + out_len, room, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n < room) {
		out_len += (size_t)n;
		return;
	}
	/* Did not fit: format into a heap buffer of the right size. */
	char *tmp = malloc((size_t)n + 1);
	if (!tmp) {
		td_cli_errorf("standard output", "out of memory");
		exit(TD_CLI_FAIL);
	}
	va_start(ap, fmt);
	vsnprintf(tmp, (size_t)n + 1, fmt, ap);
	va_end(ap);
	td_cli_out(tmp, (size_t)n);
	free(tmp);
}

static char *exit_note;

void td_cli_note_at_exit(char *line)
{
	free(exit_note);
	exit_note = line;
}

int td_cli_finish(int status)
{
	td_cli_flush();
	if (close(STDOUT_FILENO) != 0 && errno != EBADF && errno != EINTR) {
		td_cli_error_sys("standard output", errno);
		status = TD_CLI_FAIL;
	}
	if (exit_note && status == TD_CLI_OK)
		fputs(exit_note, stderr);
	free(exit_note);
	exit_note = NULL;
	return status;
}

int td_cli_parse_u64(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	if (!s || !*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

int td_cli_build_opt(const char *cmd, int which, const char *arg, td_build_opts *bo)
{
	uint64_t v;
	if (which == 'j') {
		if (td_cli_parse_u64(arg, &v) || v < 1 || v > 4096)
			return td_cli_usage(cmd, "-j '%s': expected a number of threads from 1 to 4096", arg);
		bo->jobs = (unsigned)v;
	} else if (which == 's') {
		if (td_conf_parse_size(arg, &v) || v == 0)
			return td_cli_usage(cmd, "--shard-size '%s': expected a size above 0 (e.g. 64M)", arg);
		bo->shard_size = v;
	} else {
		if (td_conf_parse_size(arg, &v) || v == 0)
			return td_cli_usage(cmd, "--memory '%s': expected a size above 0 (e.g. 4G)", arg);
		bo->memory = v;
	}
	return TD_CLI_OK;
}

int64_t td_cli_source_date(void)
{
	uint64_t v;
	const char *sde = getenv("SOURCE_DATE_EPOCH");
	if (sde && !td_cli_parse_u64(sde, &v) && v > 0 && v < (UINT64_C(1) << 40))
		return (int64_t)v;
	return 0;
}

void td_cli_shard_size_of(const char *archive, td_build_opts *bo)
{
	td_archive *a = NULL;
	if (bo->shard_size)
		return;
	if (td_archive_open(archive, 0, &a) == TD_OK) {
		bo->shard_size = td_archive_shard_size(a);
		td_archive_close(a);
	}
	td_cli_clear_detail(); /* a bad archive is reported where it is used */
	if (!bo->shard_size)
		bo->shard_size = TD_BUILD_SHARD_DEFAULT;
}

int td_cli_build_check(const char *cmd, const td_build_opts *bo)
{
	uint64_t mem = bo->memory ? bo->memory : td_build_memory_default();
	if (mem < td_build_memory_min(bo->shard_size))
		return td_cli_usage(cmd,
				    "--memory %llu MiB is too small for shards of %llu MiB: one needs about %llu MiB "
				    "(lower --shard-size or raise --memory)",
				    (unsigned long long)(mem >> 20), (unsigned long long)(bo->shard_size >> 20),
				    (unsigned long long)((td_build_memory_min(bo->shard_size) + (1 << 20) - 1) >> 20));
	return TD_CLI_OK;
}

int td_cli_gpu_opt(const char *cmd, const char *arg, td_gpu_use *use)
{
	if (td_gpu_use_parse(arg, use))
		return td_cli_usage(cmd, "--gpu '%s': expected auto, on or off", arg);
	return TD_CLI_OK;
}

int td_cli_gpu_setup(const char *cmd, td_writer_opts *wo, td_gpu_use use)
{
	td_cli_clear_detail();
	if (td_gpu_writer_use(wo, use) != TD_OK)
		return td_cli_errorf(cmd, "%s", td_errdetail());
	if (wo->grammar_rounds || wo->index_build)
		td_gpu_warm_start(); /* the CUDA context while the input is read */
	return TD_CLI_OK;
}

void td_cli_gpu_report(td_gpu_use use)
{
	uint64_t on_gpu, on_cpu;
	if (use != TD_GPU_USE_ON)
		return;
	td_gpu_build_counts(&on_gpu, &on_cpu);
	fprintf(stderr, "tadoc: --gpu on: %llu of %llu index builds ran on the GPU, the others on CPU threads\n",
		(unsigned long long)on_gpu, (unsigned long long)(on_gpu + on_cpu));
	td_gpu_grammar_counts(&on_gpu, &on_cpu);
	fprintf(stderr, "tadoc: --gpu on: %llu of %llu grammars' rounds ran on the GPU, the others on CPU threads\n",
		(unsigned long long)on_gpu, (unsigned long long)(on_gpu + on_cpu));
}
