/* cmd_compress: `tadoc compress`, with a progress bar on a terminal. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "td_build.h"
#include "td_conf.h"
#include "td_err.h"
#include "td_format.h"
#include "td_gpu.h"
#include "td_lock.h"
#include "td_writer.h"
#include "tar_input.h"

static const char help[] =
	"Usage: tadoc compress [-j N] [--shard-size SIZE] [--memory SIZE] [--format 3|4|5]\n"
	"                      [--gpu auto|on|off] [--postings] [OPTIONS] -o OUT.tadoc DIR|FILE...\n"
	"       tadoc compress [OPTIONS] -o OUT.tadoc -\n"
	"\n"
	"Compress files and directories into one archive. A single directory\n"
	"argument becomes the archive root (its contents at the top level, like\n"
	"mksquashfs); otherwise each argument appears at the top level under its\n"
	"base name. Regular files, directories and symlinks are stored with their\n"
	"modes and mtimes; any other file type is an error. OUT is written\n"
	"atomically (temporary file, fsync, rename).\n"
	"\n"
	"With '-' as the only input, a tar archive is read from standard input\n"
	"(GNU, POSIX ustar or pax; plain or gzip/bzip2/xz/zstd-compressed), e.g.\n"
	"`tar -C DIR -cf - . | tadoc compress -o OUT -`. Entries keep their tar\n"
	"names less a leading '/' or './' ('./' itself is the root); a name with\n"
	"a '..' component is an error; hard links become regular files. File data\n"
	"streams into the builder (any format; format 5 in shards within\n"
	"--memory), and the archive is the one compressing the directory gives\n"
	"when the tar lists it in name order (`tar --sort=name`).\n"
	"\n"
	"Options:\n"
	"  -o, --output FILE     archive to write (required)\n"
	"      --max-depth N     bound on grammar rule nesting (1..64, default 32)\n"
	"      --sample-shift K  root offset sample every 2^K elements (1..16, default 5)\n"
	"      --format N        archive format to write: 5 (default), shards of\n"
	"                        --shard-size built in parallel in bounded memory,\n"
	"                        to which 'tadoc add' adds; 4, one grammar over the\n"
	"                        whole corpus in one thread, with no memory bound\n"
	"                        (-j, --shard-size and --memory do not apply); or 3,\n"
	"                        which tadoc releases before format 4 read (10-20%\n"
	"                        larger than 4)\n"
	"  -j, --jobs N          threads building shards (default: online cores)\n"
	"      --shard-size SIZE text bytes per shard (K/M/G suffixes; default 64M)\n"
	"      --memory SIZE     bound on the shards in flight (default: half the RAM;\n"
	"                        one shard needs about 7 times its size plus 24M)\n"
"      --gpu auto|on|off grammar rounds and index builds on the GPU: auto\n"
	"                        (default) when one is usable, on (an error without\n"
	"                        one), off (CPU only); the archive's bytes are the\n"
	"                        same either way\n"
	"      --postings        also store each word's files and counts (the ranked\n"
	"                        inverted index), so `tadoc files ARCHIVE WORD` reads\n"
	"                        one list instead of walking the grammar; 'tadoc add'\n"
	"                        and compaction keep them (see `tadoc info`)\n"
	"      --fuzzy-index     (format 5) also store the whole archive's vocabulary\n"
	"                        with its counts, by length, so that `tadoc fuzzy`\n"
	"                        over the whole archive opens no shard (about the\n"
	"                        dictionary's size again: 10-15% of a source tree's\n"
	"                        archive); 'tadoc add' and 'tadoc compact' keep it\n"
	"      --top-words       (format 5) also store the root's 1000 most frequent\n"
	"                        words (a few KiB; 100 when 1000 would take over 0.1%\n"
	"                        of a small archive), so `tadoc top` of the root up to\n"
	"                        that many reads a prefix instead of merging every\n"
	"                        shard's counts\n"
	"                        (at build: the finished archive reopened, every\n"
	"                        dictionary and a merge: ~5 s of CPU and 0.7 GB on\n"
	"                        a 1.3 GB source tree); 'tadoc add' and 'tadoc\n"
	"                        compact' keep it\n"
	"      --top-ngrams[=K]  (format 5) --top-words, and also the whole archive's\n"
	"                        K most frequent n-grams of every length 2..8\n"
	"                        (default K 1000), so `tadoc ngrams` of the root with\n"
	"                        --top K or less reads a prefix instead of walking\n"
	"                        every shard (seven n-gram walks at build: about 4\n"
	"                        times the build's CPU on a source tree; a few hundred\n"
	"                        KiB); 'tadoc add' and 'tadoc compact' keep it\n"
	"      --root-vector     (format 5) also store the root's term vector (every\n"
	"                        word with its count, in byte order), so `tadoc\n"
	"                        vector ARCHIVE /` streams it instead of merging\n"
	"                        every shard's vocabulary (about 9% of a source\n"
	"                        tree's archive; at build: ~3 s of CPU and 0.7 GB\n"
	"                        on a 1.3 GB source tree); 'tadoc add' and 'tadoc\n"
	"                        compact' keep it\n"
	"  -q, --quiet           no progress bar\n"
	"  -h, --help            show this help\n"
	"\n"
	"A progress bar (bytes done, MB/s, time left) is drawn on standard error\n"
	"when it is a terminal. The archive's bytes do not depend on -j.\n";

struct progress {
	int cols;
	double last;
	char phase[32];
	int drawn;
	double start;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void put_err(const char *s, size_t n)
{
	while (n > 0) {
		ssize_t w = write(STDERR_FILENO, s, n);
		if (w <= 0)
			return; /* a progress bar is not worth failing over */
		s += w;
		n -= (size_t)w;
	}
}

static void progress_draw(void *ctx, const char *phase, uint64_t done, uint64_t total)
{
	struct progress *p = ctx;
	if (!phase)
		phase = "";
	double t = now();
	int same_phase = strncmp(p->phase, phase, sizeof p->phase - 1) == 0;
	if (same_phase && done != total && t - p->last < 0.1)
		return;
	p->last = t;
	snprintf(p->phase, sizeof p->phase, "%s", phase);

	char line[160];
	int n;
	if (total == 0) {
		/* Unknown total (reading input): show the amount done. */
		n = snprintf(line, sizeof line, "\r%-10.10s %.1f MiB\033[K", p->phase, (double)done / 1048576.0);
		if (n > 0)
			put_err(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
		p->drawn = 1;
		return;
	}
	int pct = (int)(done >= total ? 100 : done * 100 / total);
	int width = p->cols - 64;
	if (width > 50)
		width = 50;
	if (width < 10)
		width = 10;
	char bar[64];
	int fill = (int)((double)width * (double)(done > total ? total : done) / (double)total);
	for (int i = 0; i < width; i++)
		bar[i] = i < fill ? '#' : '-';
	bar[width] = '\0';
	double el = t - p->start, rate = el > 0 ? (double)done / el : 0;
	char eta[32] = "";
	if (rate > 0 && done < total) {
		unsigned long s = (unsigned long)((double)(total - done) / rate);
		snprintf(eta, sizeof eta, " ETA %lu:%02lu", s / 60, s % 60);
	}
	n = snprintf(line, sizeof line, "\r%-10.10s [%s] %3d%% %.0f/%.0f MB %.1f MB/s%s\033[K", p->phase, bar, pct,
		     (double)done / 1e6, (double)total / 1e6, rate / 1e6, eta);
	if (n > 0)
		put_err(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
	p->drawn = 1;
}

static void progress_clear(struct progress *p)
{
	if (p->drawn)
		put_err("\r\033[K", 4);
	p->drawn = 0;
}

/* 1 if `detail` starts with `path` followed by ':' or '/'. */
static int names_path(const char *detail, const char *path)
{
	size_t l = strlen(path);
	while (l > 1 && path[l - 1] == '/')
		l--;
	return l > 0 && strncmp(detail, path, l) == 0 && (detail[l] == ':' || detail[l] == '/' || detail[l] == '.');
}

/* The engine's detail names the failing input ("DISKPATH: problem") when
 * there is one: then that path is the subject. Otherwise the output is. */
static int report(const char *out, const char *const *inputs, size_t n, int err)
{
	const char *detail = td_errdetail();
	int named = detail && names_path(detail, out);
	for (size_t i = 0; i < n && detail && !named; i++)
		named = names_path(detail, inputs[i]);
	if (!named)
		return td_cli_error_td(out, err);
	td_cli_errorf(NULL, "%s", detail);
	td_cli_clear_detail();
	return td_cli_status(err);
}

int td_cmd_compress(int argc, char **argv)
{
	enum { OPT_DEPTH = 256, OPT_SHIFT, OPT_FORMAT, OPT_SHARD, OPT_MEMORY, OPT_GPU, OPT_POSTINGS, OPT_FZIX, OPT_TOPNG, OPT_TOPW, OPT_VEC };
	static const struct option longopts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "max-depth", required_argument, NULL, OPT_DEPTH },
		{ "sample-shift", required_argument, NULL, OPT_SHIFT },
		{ "format", required_argument, NULL, OPT_FORMAT },
		{ "jobs", required_argument, NULL, 'j' },
		{ "shard-size", required_argument, NULL, OPT_SHARD },
		{ "memory", required_argument, NULL, OPT_MEMORY },
		{ "gpu", required_argument, NULL, OPT_GPU },
		{ "postings", no_argument, NULL, OPT_POSTINGS },
		{ "fuzzy-index", no_argument, NULL, OPT_FZIX },
		{ "top-ngrams", optional_argument, NULL, OPT_TOPNG },
		{ "top-words", no_argument, NULL, OPT_TOPW },
		{ "root-vector", no_argument, NULL, OPT_VEC },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *out = NULL;
	uint64_t v;
	int quiet = 0;
	td_build_opts bo;
	td_build_opts_init(&bo); /* format 5 unless --format says otherwise */
	td_writer_opts opts;
	memset(&opts, 0, sizeof opts);
	td_gpu_use gpu = TD_GPU_USE_AUTO;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":o:j:qh", longopts, NULL)) != -1) {
		switch (c) {
		case 'o':
			out = optarg;
			break;
		case 'q':
			quiet = 1;
			break;
		case OPT_POSTINGS:
			opts.postings = 1;
			break;
		case OPT_FZIX:
			bo.fuzzy_index = 1;
			break;
		case OPT_TOPNG:
			bo.top_ngrams = 1000;
			if (optarg && (td_cli_parse_u64(optarg, &v) || v < 1 || v > (UINT64_C(1) << 20)))
				return td_cli_usage(argv[0], "--top-ngrams '%s': expected a number from 1 to %llu",
						    optarg, (unsigned long long)(UINT64_C(1) << 20));
			if (optarg)
				bo.top_ngrams = v;
			break;
		case OPT_TOPW:
			bo.top_words = 1;
			break;
		case OPT_VEC:
			bo.root_vector = 1;
			break;
		case OPT_GPU:
			if (td_cli_gpu_opt(argv[0], optarg, &gpu))
				return TD_CLI_USAGE;
			break;
		case OPT_DEPTH:
			if (td_cli_parse_u64(optarg, &v) || v < 1 || v > TD_MAXDEPTH)
				return td_cli_usage(argv[0], "--max-depth '%s': expected a number from 1 to %u",
						    optarg, TD_MAXDEPTH);
			opts.max_depth = (unsigned)v;
			break;
		case OPT_SHIFT:
			if (td_cli_parse_u64(optarg, &v) || v < 1 || v > 16)
				return td_cli_usage(argv[0], "--sample-shift '%s': expected a number from 1 to 16",
						    optarg);
			opts.sample_shift = (unsigned)v;
			break;
		case OPT_FORMAT:
			if (td_cli_parse_u64(optarg, &v) || v < 3 || v > TD_VERSION_SHARDED)
				return td_cli_usage(argv[0], "--format '%s': expected 3, 4 or 5", optarg);
			bo.format = (unsigned)v;
			break;
		case 'j':
		case OPT_SHARD:
		case OPT_MEMORY:
			if (td_cli_build_opt(argv[0], c == 'j' ? 'j' : c == OPT_SHARD ? 's' : 'm', optarg, &bo))
				return TD_CLI_USAGE;
			break;
		case 'h':
			td_cli_out(help, sizeof help - 1);
			return TD_CLI_OK;
		default:
			return td_cli_bad_option(argv[0], c, argv);
		}
	}
	if (!out)
		return td_cli_usage(argv[0], "missing -o OUT.tadoc");
	if (opts.postings && bo.format == 3)
		return td_cli_usage(argv[0], "--postings needs format 4 or 5");
	if (bo.fuzzy_index && bo.format != TD_VERSION_SHARDED)
		return td_cli_usage(argv[0], "--fuzzy-index needs format 5");
	if (bo.top_ngrams && bo.format != TD_VERSION_SHARDED)
		return td_cli_usage(argv[0], "--top-ngrams needs format 5");
	if (bo.top_words && bo.format != TD_VERSION_SHARDED)
		return td_cli_usage(argv[0], "--top-words needs format 5");
	if (bo.root_vector && bo.format != TD_VERSION_SHARDED)
		return td_cli_usage(argv[0], "--root-vector needs format 5");
	if (bo.format == TD_VERSION_SHARDED && td_cli_build_check(argv[0], &bo))
		return TD_CLI_USAGE;
	bo.build_time = td_cli_source_date();
	if (!*out)
		return td_cli_usage(argv[0], "empty output file name");
	if (optind >= argc)
		return td_cli_usage(argv[0], "no input files or directories");
	int from_tar = 0;
	for (int i = optind; i < argc; i++) {
		if (!*argv[i])
			return td_cli_usage(argv[0], "empty input path");
		if (strcmp(argv[i], "-") == 0)
			from_tar = 1;
	}
	if (from_tar && argc - optind > 1)
		return td_cli_usage(argv[0], "'-' (a tar archive on standard input) must be the only input");
	if (from_tar && isatty(STDIN_FILENO))
		return td_cli_errorf("-", "standard input is a terminal: pipe a tar archive into it");
	if (td_cli_gpu_setup(argv[0], &opts, gpu))
		return TD_CLI_FAIL;
	/* Before hours of compressing: can OUT be written where it goes? */
	char *dir = strdup(out);
	if (!dir)
		return td_cli_error_td(out, TD_ENOMEM);
	char *slash = strrchr(dir, '/');
	const char *d = slash ? (slash == dir ? "/" : (*slash = 0, dir)) : ".";
	struct stat dst;
	int derr = stat(d, &dst) ? errno : !S_ISDIR(dst.st_mode) ? ENOTDIR : access(d, W_OK | X_OK) ? errno : 0;
	if (derr) {
		free(dir);
		return td_cli_error_sys(out, derr);
	}

	/* Replacing an archive: not while a writable mount or a compaction
	 * holds it (a shared lock: read-only mounts keep the old file, as
	 * before), nor while its journal holds edits (they would be lost with
	 * it); an empty journal names the old archive and would keep the new
	 * one from mounting, so it goes (as in 'tadoc add'). */
	int lock = -1;
	struct stat ost;
	/* OUT is replaced by rename(2): never a device, FIFO, socket or
	 * directory that happens to have its name (-o /dev/null as root would
	 * otherwise put a regular file in its place) */
	int exists = stat(out, &ost) == 0;
	if (exists && !S_ISREG(ost.st_mode)) {
		free(dir);
		return td_cli_errorf(out, "not a regular file: not replaced");
	}
	if (exists) {
		td_cli_clear_detail();
		int lerr = td_lock_archive(out, 0, TD_LOCK_WAIT_MS, &lock);
		if (lerr == TD_EBUSY) {
			free(dir);
			return td_cli_errorf(out, "in use (mounted writable or being compacted): unmount it first");
		}
		lock = lerr ? -1 : lock;
		td_archive *old = NULL;
		int pe = td_archive_open(out, 0, &old) == TD_OK ? td_cli_pending_edits(out, old) : 0;
		td_archive_close(old);
		td_cli_clear_detail();
		if (pe) {
			free(dir);
			td_unlock_archive(lock);
			return TD_CLI_FAIL;
		}
	}

	struct progress prog;
	memset(&prog, 0, sizeof prog);
	prog.last = -1;
	if (!quiet && isatty(STDERR_FILENO)) {
		struct winsize ws;
		prog.cols = ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 80;
		prog.start = now();
		opts.progress = progress_draw;
		opts.progress_ctx = &prog;
		bo.progress = progress_draw;
		bo.progress_ctx = &prog;
	}

	td_cli_clear_detail();
	if (bo.format != TD_VERSION_SHARDED)
		opts.format = bo.format;
	else
		opts.progress = NULL; /* shards: the builder's progress */
	bo.writer = opts;
	bo.tmp_dir = d; /* shards wait beside the output */
	bo.tmp_target = out;
	int err = from_tar ? td_cli_tar_compress(STDIN_FILENO, "-", out, &bo)
			   : td_build_paths(out, (const char *const *)(argv + optind), (size_t)(argc - optind), &bo);
	free(dir);
	td_unlock_archive(lock);
	progress_clear(&prog);
	if (!err && !quiet)
		td_cli_gpu_report(gpu);
	if (err)
		return report(out, (const char *const *)(argv + optind), (size_t)(argc - optind), err);
	return TD_CLI_OK;
}
