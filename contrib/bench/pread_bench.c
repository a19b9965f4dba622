/* pread_bench: random fixed-size pread() rate and latency over a list of files.
 *
 * Usage: pread_bench [-t THREADS] [-d SECONDS] [-s SIZE] [-n MAXOPS] [-u] [-D]
 *                    [-R] [-S SEED] [-C DIR] LIST
 *
 * LIST holds one path per line ("-" reads stdin); paths are opened relative
 * to DIR when -C is given. Every file is opened once before timing starts.
 * A read picks a SIZE-aligned block uniformly over all blocks of all files
 * (so files are weighted by size) and preads SIZE bytes there (less at EOF).
 * -u   visit each block at most once (a random permutation, shared by the
 *      threads): with -D every read is then a page-cache miss unless the
 *      filesystem itself filled neighbouring pages.
 * -D   after opening, sync and write 3 to /proc/sys/vm/drop_caches (root).
 * -R   keep kernel readahead (default: POSIX_FADV_RANDOM on every file, so
 *      a 4 KiB read asks the filesystem for about 4 KiB).
 * Stops after SECONDS (default 5), MAXOPS reads, or when -u runs out.
 * Prints one line of key=value pairs: reads/s, MB/s, p50/p99 latency in us.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct pb_file {
	int fd;
	uint64_t size;
	uint64_t first_block;         /* prefix sum of blocks before this file */
};

struct pb_thread {
	pthread_t tid;
	unsigned idx;
	uint64_t rng;
	uint32_t *lat;                /* latencies in ns */
	size_t nlat, caplat;
	uint64_t bytes, errors;
};

static struct pb_file *g_files;
static size_t g_nfiles;
static uint64_t g_nblocks;
static uint64_t *g_perm;             /* -u: block order */
static _Atomic uint64_t g_next;      /* next op index (shared) */
static uint64_t g_maxops = UINT64_MAX;
static size_t g_size = 4096;
static double g_secs = 5.0;
static int g_unique;
static pthread_barrier_t g_barrier;
static struct timespec g_start;
static atomic_int g_stop;

static double pb_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t pb_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: a small per-thread generator. */
static uint64_t pb_rand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* File holding global block b (binary search over first_block). */
static size_t pb_file_of(uint64_t b)
{
	size_t lo = 0, hi = g_nfiles;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (g_files[mid].first_block <= b)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

static void *pb_worker(void *arg)
{
	struct pb_thread *t = arg;
	char *buf = aligned_alloc(4096, (g_size + 4095) / 4096 * 4096);
	if (!buf) {
		fprintf(stderr, "pread_bench: out of memory\n");
		exit(1);
	}
	pthread_barrier_wait(&g_barrier);
	double deadline = (double)g_start.tv_sec + (double)g_start.tv_nsec * 1e-9 + g_secs;
	for (uint64_t iter = 0;; iter++) {
		if (atomic_load_explicit(&g_stop, memory_order_relaxed))
			break;
		uint64_t op = atomic_fetch_add_explicit(&g_next, 1, memory_order_relaxed);
		if (op >= g_maxops || (g_unique && op >= g_nblocks)) {
			atomic_store(&g_stop, 1);
			break;
		}
		if ((iter & 63) == 0 && pb_now() >= deadline) {
			atomic_store(&g_stop, 1);
			break;
		}
		uint64_t b = g_unique ? g_perm[op] : pb_rand(&t->rng) % g_nblocks;
		const struct pb_file *f = &g_files[pb_file_of(b)];
		uint64_t off = (b - f->first_block) * g_size;
		size_t want = f->size - off < g_size ? (size_t)(f->size - off) : g_size;
		uint64_t t0 = pb_ns();
		ssize_t got = pread(f->fd, buf, g_size, (off_t)off);
		uint64_t dt = pb_ns() - t0;
		if (got != (ssize_t)want)
			t->errors++;
		else
			t->bytes += (uint64_t)got;
		if (t->nlat == t->caplat) {
			size_t cap = t->caplat ? t->caplat * 2 : 65536;
			uint32_t *p = realloc(t->lat, cap * sizeof *p);
			if (!p) {
				fprintf(stderr, "pread_bench: out of memory\n");
				exit(1);
			}
			t->lat = p;
			t->caplat = cap;
		}
		t->lat[t->nlat++] = dt > UINT32_MAX ? UINT32_MAX : (uint32_t)dt;
	}
	free(buf);
	return NULL;
}

static int pb_cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

static void pb_usage(FILE *out)
{
	fprintf(out, "usage: pread_bench [-t THREADS] [-d SECONDS] [-s SIZE] [-n MAXOPS] [-u] [-D] [-R]\n"
		     "                   [-S SEED] [-C DIR] LIST\n"
		     "Random SIZE-aligned preads over the files listed in LIST (one path per line,\n"
		     "'-' = stdin); prints reads/s, MB/s and p50/p99 latency.\n");
}

/* Read the file list and open every non-empty regular file. */
static int pb_open_all(const char *list, int keep_ra)
{
	FILE *in = strcmp(list, "-") == 0 ? stdin : fopen(list, "r");
	if (!in) {
		fprintf(stderr, "pread_bench: %s: %s\n", list, strerror(errno));
		return -1;
	}
	size_t cap = 0;
	char *line = NULL;
	size_t lcap = 0;
	ssize_t n;
	while ((n = getline(&line, &lcap, in)) > 0) {
		if (line[n - 1] == '\n')
			line[--n] = '\0';
		if (n == 0)
			continue;
		int fd = open(line, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			fprintf(stderr, "pread_bench: %s: %s\n", line, strerror(errno));
			return -1;
		}
		struct stat st;
		if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
			close(fd);
			continue;
		}
		if (!keep_ra)
			posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
		if (g_nfiles == cap) {
			cap = cap ? cap * 2 : 1024;
			struct pb_file *p = realloc(g_files, cap * sizeof *p);
			if (!p)
				return -1;
			g_files = p;
		}
		uint64_t blocks = ((uint64_t)st.st_size + g_size - 1) / g_size;
		g_files[g_nfiles++] = (struct pb_file){ fd, (uint64_t)st.st_size, g_nblocks };
		g_nblocks += blocks;
	}
	free(line);
	if (in != stdin)
		fclose(in);
	return 0;
}

int main(int argc, char **argv)
{
	unsigned nthreads = 1;
	int drop = 0, keep_ra = 0;
	uint64_t seed = 42;
	const char *dir = NULL;
	int c;
	while ((c = getopt(argc, argv, "t:d:s:n:uDRS:C:h")) != -1) {
		switch (c) {
		case 't': nthreads = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'd': g_secs = strtod(optarg, NULL); break;
		case 's': g_size = (size_t)strtoull(optarg, NULL, 10); break;
		case 'n': g_maxops = strtoull(optarg, NULL, 10); break;
		case 'u': g_unique = 1; break;
		case 'D': drop = 1; break;
		case 'R': keep_ra = 1; break;
		case 'S': seed = strtoull(optarg, NULL, 10); break;
		case 'C': dir = optarg; break;
		case 'h': pb_usage(stdout); return 0;
		default: pb_usage(stderr); return 2;
		}
	}
	if (optind != argc - 1 || nthreads == 0 || nthreads > 1024 || g_size == 0 || g_secs <= 0) {
		pb_usage(stderr);
		return 2;
	}
	const char *list = argv[optind];
	FILE *probe = NULL;
	if (strcmp(list, "-") != 0 && (probe = fopen(list, "r")) == NULL) {
		fprintf(stderr, "pread_bench: %s: %s\n", list, strerror(errno));
		return 1;
	}
	if (probe)
		fclose(probe);
	/* Resolve the list before changing directory. */
	char *list_abs = strcmp(list, "-") == 0 ? strdup("-") : realpath(list, NULL);
	if (!list_abs) {
		fprintf(stderr, "pread_bench: %s: %s\n", list, strerror(errno));
		return 1;
	}
	if (dir && chdir(dir) != 0) {
		fprintf(stderr, "pread_bench: %s: %s\n", dir, strerror(errno));
		return 1;
	}
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (pb_open_all(list_abs, keep_ra) != 0)
		return 1;
	free(list_abs);
	if (g_nblocks == 0) {
		fprintf(stderr, "pread_bench: no non-empty regular files in the list\n");
		return 1;
	}
	uint64_t rs = seed * 0x9E3779B97F4A7C15ULL + 1;
	if (g_unique) {
		g_perm = malloc(g_nblocks * sizeof *g_perm);
		if (!g_perm) {
			fprintf(stderr, "pread_bench: out of memory\n");
			return 1;
		}
		for (uint64_t i = 0; i < g_nblocks; i++)
			g_perm[i] = i;
		for (uint64_t i = g_nblocks - 1; i > 0; i--) {
			uint64_t j = pb_rand(&rs) % (i + 1);
			uint64_t tmp = g_perm[i];
			g_perm[i] = g_perm[j];
			g_perm[j] = tmp;
		}
	}
	if (drop) {
		sync();
		int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
		if (fd < 0 || write(fd, "3\n", 2) != 2) {
			fprintf(stderr, "pread_bench: cannot drop caches: %s\n", strerror(errno));
			return 1;
		}
		close(fd);
	}

	struct pb_thread *th = calloc(nthreads, sizeof *th);
	if (!th)
		return 1;
	pthread_barrier_init(&g_barrier, NULL, nthreads + 1);
	for (unsigned i = 0; i < nthreads; i++) {
		th[i].idx = i;
		th[i].rng = (seed + i + 1) * 0xD1B54A32D192ED03ULL | 1;
		if (pthread_create(&th[i].tid, NULL, pb_worker, &th[i]) != 0) {
			fprintf(stderr, "pread_bench: cannot start threads\n");
			return 1;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &g_start);
	double t0 = pb_now();
	pthread_barrier_wait(&g_barrier);
	for (unsigned i = 0; i < nthreads; i++)
		pthread_join(th[i].tid, NULL);
	double secs = pb_now() - t0;

	size_t total = 0;
	uint64_t bytes = 0, errors = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		total += th[i].nlat;
		bytes += th[i].bytes;
		errors += th[i].errors;
	}
	uint32_t *all = malloc((total ? total : 1) * sizeof *all);
	if (!all)
		return 1;
	size_t k = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		memcpy(all + k, th[i].lat, th[i].nlat * sizeof *all);
		k += th[i].nlat;
		free(th[i].lat);
	}
	qsort(all, total, sizeof *all, pb_cmp_u32);
	double p50 = total ? all[total / 2] / 1e3 : 0, p99 = total ? all[total * 99 / 100] / 1e3 : 0;
	printf("threads=%u size=%zu files=%zu blocks=%" PRIu64 " ops=%zu secs=%.3f reads_per_s=%.0f "
	       "MB_per_s=%.1f p50_us=%.1f p99_us=%.1f errors=%" PRIu64 "\n",
	       nthreads, g_size, g_nfiles, g_nblocks, total, secs, total / secs,
	       bytes / secs / 1e6, p50, p99, errors);
	free(all);
	free(th);
	free(g_perm);
	for (size_t i = 0; i < g_nfiles; i++)
		close(g_files[i].fd);
	free(g_files);
	return errors ? 1 : 0;
}
