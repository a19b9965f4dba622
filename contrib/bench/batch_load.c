/* batch_load: N concurrent readers doing random reads or count xattrs on a mount: ops/s and latency.
 *
 * Usage: batch_load [-t THREADS] [-d SECONDS] [-s SIZE] [-m read|count]
 *                   [-w WORDS] [-c] [-S SEED] [-C DIR] LIST
 *
 * LIST holds one path per line ("-" reads stdin), relative to DIR with -C.
 * Every file is opened once before timing starts.
 * -m read   (default) each op preads SIZE bytes (default 4096) at a random
 *           SIZE-aligned offset of a file picked with probability
 *           proportional to its size. Files are opened O_DIRECT, so every
 *           read reaches the filesystem instead of the page cache (FUSE
 *           accepts any alignment); -c opens them without O_DIRECT.
 * -m count  each op is getxattr(FILE, "user.tadoc.count.WORD") for a random
 *           file of LIST and a random word of the file WORDS (one per line).
 * The threads start together (a barrier) and stop after SECONDS (default
 * 5). Prints one line of key=value pairs: threads, ops, ops/s, MB/s,
 * p50/p99 latency in microseconds, errors.
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
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

typedef struct bl_file {
	char *path;
	int fd;
	uint64_t size;
	uint64_t cum;                 /* bytes of the files before this one */
} bl_file;

typedef struct bl_thread {
	pthread_t tid;
	uint64_t rng;
	uint32_t *lat;                /* ns, saturated at 4.29 s */
	size_t nlat, cap;
	uint64_t bytes, errors;
} bl_thread;

static bl_file *g_files;
static size_t g_nfiles;
static uint64_t g_total;
static char **g_words;
static size_t g_nwords;
static size_t g_size = 4096;
static double g_secs = 5.0;
static int g_count;
static pthread_barrier_t g_barrier;
static atomic_int g_stop;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(uint64_t *s)
{
	/* splitmix64 */
	uint64_t z = (*s += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

static void die(const char *what)
{
	fprintf(stderr, "batch_load: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* File whose byte range holds byte b of the concatenation. */
static const bl_file *pick(uint64_t b)
{
	size_t lo = 0, hi = g_nfiles;
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;
		if (g_files[mid].cum <= b)
			lo = mid;
		else
			hi = mid;
	}
	return &g_files[lo];
}

static void note(bl_thread *t, uint64_t ns)
{
	if (t->nlat == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 65536;
		t->lat = realloc(t->lat, t->cap * sizeof *t->lat);
		if (!t->lat)
			die("realloc");
	}
	t->lat[t->nlat++] = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
}

static void *run(void *arg)
{
	bl_thread *t = arg;
	char *buf = aligned_alloc(4096, (g_size + 4095) / 4096 * 4096);
	char name[512], val[64];
	if (!buf)
		die("aligned_alloc");
	pthread_barrier_wait(&g_barrier);
	while (!atomic_load_explicit(&g_stop, memory_order_relaxed)) {
		uint64_t t0, t1;
		if (g_count) {
			const bl_file *f = &g_files[rnd(&t->rng) % g_nfiles];
			const char *w = g_words[rnd(&t->rng) % g_nwords];
			snprintf(name, sizeof name, "user.tadoc.count.%s", w);
			t0 = now_ns();
			ssize_t n = getxattr(f->path, name, val, sizeof val);
			t1 = now_ns();
			if (n < 0)
				t->errors++;
		} else {
			const bl_file *f = pick(rnd(&t->rng) % g_total);
			uint64_t blocks = (f->size + g_size - 1) / g_size;
			uint64_t off = (rnd(&t->rng) % (blocks ? blocks : 1)) * g_size;
			t0 = now_ns();
			ssize_t n = pread(f->fd, buf, g_size, (off_t)off);
			t1 = now_ns();
			if (n < 0)
				t->errors++;
			else
				t->bytes += (uint64_t)n;
		}
		note(t, t1 - t0);
	}
	free(buf);
	return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static char **read_lines(const char *path, size_t *n)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
	if (!f)
		die(path);
	char **v = NULL;
	size_t cap = 0;
	*n = 0;
	char *line = NULL;
	size_t lcap = 0;
	ssize_t len;
	while ((len = getline(&line, &lcap, f)) > 0) {
		if (line[len - 1] == '\n')
			line[--len] = '\0';
		if (len == 0)
			continue;
		if (*n == cap) {
			cap = cap ? cap * 2 : 256;
			v = realloc(v, cap * sizeof *v);
			if (!v)
				die("realloc");
		}
		v[(*n)++] = strdup(line);
	}
	free(line);
	if (f != stdin)
		fclose(f);
	return v;
}

int main(int argc, char **argv)
{
	unsigned nthreads = 1;
	uint64_t seed = 1;
	const char *dir = NULL, *words = NULL;
	int cached = 0, opt;
	while ((opt = getopt(argc, argv, "t:d:s:m:w:cS:C:")) != -1) {
		switch (opt) {
		case 't': nthreads = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'd': g_secs = strtod(optarg, NULL); break;
		case 's': g_size = (size_t)strtoull(optarg, NULL, 10); break;
		case 'm': g_count = strcmp(optarg, "count") == 0; break;
		case 'w': words = optarg; break;
		case 'c': cached = 1; break;
		case 'S': seed = strtoull(optarg, NULL, 10); break;
		case 'C': dir = optarg; break;
		default:
			fprintf(stderr, "usage: batch_load [-t THREADS] [-d SECONDS] [-s SIZE] [-m read|count] "
					"[-w WORDS] [-c] [-S SEED] [-C DIR] LIST\n");
			return 2;
		}
	}
	if (optind != argc - 1 || nthreads == 0 || g_size == 0 || (g_count && !words)) {
		fprintf(stderr, "batch_load: need one LIST (and -w WORDS with -m count)\n");
		return 2;
	}
	/* 256 threads x open files: raise the descriptor limit if we can. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	size_t n;
	char **paths = read_lines(argv[optind], &n);
	if (g_count) {
		g_words = read_lines(words, &g_nwords);
		if (g_nwords == 0) {
			fprintf(stderr, "batch_load: %s: no words\n", words);
			return 2;
		}
	}
	if (dir && chdir(dir) != 0)
		die(dir);
	g_files = calloc(n ? n : 1, sizeof *g_files);
	for (size_t i = 0; i < n; i++) {
		struct stat st;
		if (stat(paths[i], &st) != 0)
			die(paths[i]);
		if (!S_ISREG(st.st_mode) || st.st_size == 0)
			continue;
		bl_file *f = &g_files[g_nfiles++];
		f->path = paths[i];
		f->size = (uint64_t)st.st_size;
		f->cum = g_total;
		g_total += f->size;
		f->fd = -1;
		if (!g_count) {
			f->fd = open(paths[i], O_RDONLY | (cached ? 0 : O_DIRECT));
			if (f->fd < 0 && !cached && errno == EINVAL)
				f->fd = open(paths[i], O_RDONLY); /* no O_DIRECT there */
			if (f->fd < 0)
				die(paths[i]);
		}
	}
	if (g_nfiles == 0 || g_total == 0) {
		fprintf(stderr, "batch_load: no non-empty regular file in the list\n");
		return 2;
	}
	bl_thread *th = calloc(nthreads, sizeof *th);
	pthread_barrier_init(&g_barrier, NULL, nthreads + 1);
	for (unsigned i = 0; i < nthreads; i++) {
		th[i].rng = seed * 1000003u + i;
		if (pthread_create(&th[i].tid, NULL, run, &th[i]) != 0)
			die("pthread_create");
	}
	pthread_barrier_wait(&g_barrier);
	uint64_t start = now_ns();
	struct timespec ts = { (time_t)g_secs, (long)((g_secs - (double)(time_t)g_secs) * 1e9) };
	nanosleep(&ts, NULL);
	atomic_store(&g_stop, 1);
	uint64_t ops = 0, bytes = 0, errors = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		pthread_join(th[i].tid, NULL);
		ops += th[i].nlat;
		bytes += th[i].bytes;
		errors += th[i].errors;
	}
	double secs = (double)(now_ns() - start) / 1e9;
	uint32_t *all = malloc((ops ? ops : 1) * sizeof *all);
	size_t k = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		memcpy(all + k, th[i].lat, th[i].nlat * sizeof *all);
		k += th[i].nlat;
		free(th[i].lat);
	}
	qsort(all, k, sizeof *all, cmp_u32);
	double p50 = k ? all[(size_t)(0.50 * (double)(k - 1))] / 1e3 : 0;
	double p99 = k ? all[(size_t)(0.99 * (double)(k - 1))] / 1e3 : 0;
	printf("threads=%u mode=%s size=%zu ops=%" PRIu64 " ops_per_s=%.0f mb_per_s=%.1f p50_us=%.1f p99_us=%.1f "
	       "errors=%" PRIu64 "\n",
	       nthreads, g_count ? "count" : "read", g_count ? (size_t)0 : g_size, ops, (double)ops / secs,
	       (double)bytes / secs / 1e6, p50, p99, errors);
	return errors ? 1 : 0;
}
