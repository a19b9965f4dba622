/* td_trace: phase timers for the archive build, compiled in only with -DTD_WRITER_TRACE. */
#ifndef TD_TRACE_H
#define TD_TRACE_H

#ifdef TD_WRITER_TRACE
#include <stdarg.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

extern _Thread_local double td_trace_wall, td_trace_cpu; /* defined in td_writer.c */
extern double td_trace_t0;                                 /* the process's first mark; there too */

/* Print to stderr the wall and CPU seconds since this thread's previous
 * mark, the process's peak RSS so far, the wall seconds since the
 * process's first mark and this thread's id (a timeline per thread), and
 * `fmt`. */
static inline void td_trace(const char *fmt, ...)
{
	struct timespec a, b;
	struct rusage u;
	clock_gettime(CLOCK_MONOTONIC, &a);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
	getrusage(RUSAGE_SELF, &u);
	double w = (double)a.tv_sec + a.tv_nsec / 1e9, c = (double)b.tv_sec + b.tv_nsec / 1e9;
	/* one write a line: shard threads trace at the same time */
	char line[512];
	double z = 0;
	if (!__atomic_compare_exchange(&td_trace_t0, &z, &w, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		z = td_trace_t0;
	else
		z = w;
	int n = snprintf(line, sizeof line, "trace %8.3f s wall %8.3f s cpu %6ld MB peak at %8.3f s tid %ld  ",
			 td_trace_wall ? w - td_trace_wall : 0, td_trace_cpu ? c - td_trace_cpu : 0, u.ru_maxrss / 1024,
			 w - z, (long)syscall(SYS_gettid));
	if (n < 0 || (size_t)n >= sizeof line)
		n = 0;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", line);
	td_trace_wall = w;
	td_trace_cpu = c;
}
#else
static inline void td_trace(const char *fmt, ...)
{
	(void)fmt;
}
#endif

#endif
