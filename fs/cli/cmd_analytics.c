/* cmd_analytics: `tadoc top`, `vector`, `files`, `ngrams` and `fuzzy`: text analytics on the grammar. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td_analytics.h"
#include "td_err.h"
#include "td_format.h"
#include "td_gpu.h"

static const char top_help[] =
	"Usage: tadoc top [-n N] ARCHIVE [PATH]\n"
	"\n"
	"Print the N most frequent words (default 20; 0 = all) of the file PATH,\n"
	"of every file below the directory PATH, or of the whole corpus, as\n"
	"'COUNT<TAB>WORD' lines, count descending, ties by word bytes ascending.\n"
	"Words are as for 'tadoc count'. Computed on the grammar.\n"
	"\n"
	"Options:\n"
	"  -n N         how many words (0 = all)\n"
	"  -h, --help   show this help\n";

static const char vector_help[] =
	"Usage: tadoc vector ARCHIVE PATH\n"
	"\n"
	"Print every word of the file PATH, or of every file below the directory\n"
	"PATH ('.' for the corpus), with its count, as 'COUNT<TAB>WORD' lines\n"
	"sorted by word bytes (the term vector). The output is streamed.\n"
	"\n"
	"Options:\n"
	"  -h, --help   show this help\n";

static const char files_help[] =
	"Usage: tadoc files [-n N] ARCHIVE WORD [PATH]\n"
	"       tadoc files [-n N] [--gpu auto|on|off] -f WORDS ARCHIVE [PATH]\n"
	"\n"
	"Print 'COUNT<TAB>PATH' for each file (below the directory PATH, or in the\n"
	"corpus) that holds WORD, count descending, ties by path bytes ascending:\n"
	"a ranked inverted index. WORD may be a phrase: words separated by single\n"
	"spaces, matched consecutively (whatever non-word bytes lie between). In\n"
	"PATH a '\\' is written '\\\\' and a newline '\\n'.\n"
	"\n"
	"With -f, the queries are the lines of the file WORDS ('-': standard\n"
	"input), one word or phrase a line, answered as one batch; each answer\n"
	"line is 'QUERY<TAB>COUNT<TAB>PATH', queries in the order given.\n"
	"\n"
	"Options:\n"
	"  -n N         print the first N files only (default 0 = all)\n"
	"  -f WORDS     a batch of query words or phrases, one a line\n"
	"  --gpu auto|on|off\n"
	"               where a batch runs: auto (default) on the GPU when one is\n"
	"               usable, the batch has 4000 queries or more and PATH is a\n"
	"               file or a directory small against the corpus (the corpus\n"
	"               and large directories are answered from the CPU's query\n"
	"               index), else on every core; on: the GPU (none usable is\n"
	"               an error); off: the CPU. The answers are the same.\n"
	"  -h, --help   show this help\n";

static const char ngrams_help[] =
	"Usage: tadoc ngrams [-n LEN] [--top K] ARCHIVE [PATH]\n"
	"\n"
	"Print the K most frequent runs of LEN consecutive words (LEN 2..8,\n"
	"default 3; K default 20, 0 = all) of the file PATH, the directory PATH\n"
	"or the corpus, as 'COUNT<TAB>W1 W2 W3' lines, count descending, ties\n"
	"by the words bytes ascending. Consecutive words are adjacent in a file's\n"
	"sequence of words, whatever non-word bytes lie between; no run spans\n"
	"two files.\n"
	"\n"
	"Options:\n"
	"  -n LEN       words per run (2..8)\n"
	"  --top K      how many runs (0 = all)\n"
	"  -h, --help   show this help\n";

static const char fuzzy_help[] =
	"Usage: tadoc fuzzy [-k K] ARCHIVE WORD [PATH]\n"
	"       tadoc fuzzy [-k K] [--gpu auto|on|off] -f WORDS ARCHIVE [PATH]\n"
	"\n"
	"Print 'DIST<TAB>COUNT<TAB>WORD' for every distinct word of the file PATH,\n"
	"the directory PATH or the corpus whose Levenshtein distance to WORD\n"
	"(over Unicode code points) is at most K (0..3, default 1), by distance,\n"
	"then count descending, then word bytes.\n"
	"\n"
	"With -f, the queries are the lines of the file WORDS ('-': standard\n"
	"input), one word a line, answered as one batch; each answer line is\n"
	"'QUERY<TAB>DIST<TAB>COUNT<TAB>WORD', queries in the order given.\n"
	"\n"
	"Options:\n"
	"  -k K         largest edit distance (0..3)\n"
	"  -f WORDS     a batch of query words, one a line\n"
	"  --gpu auto|on|off\n"
	"               where a batch runs: auto (default) on the GPU when one is\n"
	"               usable and the batch has 4000 queries or more, else on\n"
	"               every core; on: the GPU (none usable is an error); off:\n"
	"               the CPU. The answers are the same.\n"
	"  -h, --help   show this help\n";

/* What a command takes after its options: ARCHIVE, then WORD when `word`
 * (1: a single word, 2: a word or phrase), then PATH (required when
 * `path`, else optional), and the range of its -n/-k value. */
typedef struct spec {
	const char *help, *shortopts;
	int word, path;
	uint64_t nmin, nmax; /* range of the -n/-k value (nmax 0: any) */
} spec;

/* The parsed command line: -n/-k value, --top value, the open archive
 * and scope. */
typedef struct args {
	uint64_t n, top;
	const char *wfile;        /* fuzzy/files -f */
	td_gpu_use gpu;           /* fuzzy/files --gpu */
	int argc, archi, pathi;
	char **argv;
	const char *word;
	td_archive *a;
	td_entry scope;
} args;

/* Parse options and arguments, open ARCHIVE, resolve PATH. Returns -1 to
 * go on, or an exit status (help printed, or the error reported). */
static int prepare(int argc, char **argv, const spec *sp, args *ar)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "top", required_argument, NULL, 't' },
		{ "gpu", required_argument, NULL, 'G' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, sp->shortopts, longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			td_cli_out(sp->help, strlen(sp->help));
			return TD_CLI_OK;
		case 'n':
		case 'k':
			if (td_cli_parse_u64(optarg, &ar->n))
				return td_cli_usage(argv[0], "-%c needs a non-negative integer, not '%s'", c, optarg);
			break;
		case 't':
			if (!strchr(sp->shortopts, 'n') || !sp->nmax) /* ngrams only: -n LEN and --top K */
				return td_cli_usage(argv[0], "unknown option '--top' (an option of 'tadoc ngrams')");
			if (td_cli_parse_u64(optarg, &ar->top))
				return td_cli_usage(argv[0], "--top needs a non-negative integer, not '%s'", optarg);
			break;
		case 'f':
			ar->wfile = optarg;
			break;
		case 'G':
			if (!strchr(sp->shortopts, 'f'))
				return td_cli_bad_option(argv[0], c, argv);
			if (td_cli_gpu_opt(argv[0], optarg, &ar->gpu))
				return TD_CLI_USAGE;
			break;
		default:
			return td_cli_bad_option(argv[0], c, argv);
		}
	}
	if (sp->nmax && (ar->n < sp->nmin || ar->n > sp->nmax))
		return td_cli_usage(argv[0], "%s must be %llu..%llu, not %llu", strchr(sp->shortopts, 'k') ? "K" : "LEN",
				    (unsigned long long)sp->nmin, (unsigned long long)sp->nmax, (unsigned long long)ar->n);
	const int word = sp->word && !ar->wfile;
	int first = optind, np = argc - first, need = 1 + word + sp->path;
	if (np < need)
		return td_cli_usage(argv[0], "missing %s", np < 1 ? "ARCHIVE" : np < 1 + word ? "WORD" : "PATH");
	if (np > need + !sp->path)
		return td_cli_usage(argv[0], "too many arguments");
	ar->argc = argc;
	ar->argv = argv;
	ar->archi = first;
	ar->pathi = first + 1 + word;
	if (word) {
		ar->word = argv[first + 1];
		size_t wl = strlen(ar->word);
		if (sp->word == 1 && !td_is_word(ar->word, wl))
			return td_cli_usage(argv[0], "'%s' is not a single word (letters, digits, underscore)", ar->word);
		if (sp->word == 2 && !td_phrase_words(ar->word, wl))
			return td_cli_usage(argv[0], "'%s' is not a word or a phrase (words separated by single spaces)",
					    ar->word);
	}
	/* one query: the tree checked where it is reached */
	ar->a = td_cli_open(argv[first], TD_OPEN_LAZY_TREE);
	if (!ar->a)
		return TD_CLI_FAIL;
	td_cli_journal_note(argv[first]);
	ar->scope = TD_ROOT;
	if (ar->pathi < argc) {
		td_cli_clear_detail();
		int err = td_cli_resolve(ar->a, argv[ar->pathi], 1, &ar->scope);
		if (err) {
			int st = td_cli_error_in(argv[first], argv[ar->pathi], err);
			td_archive_close(ar->a);
			return st;
		}
	}
	td_cli_clear_detail();
	return -1;
}

/* Report err (if any) and close the archive; the exit status. */
static int finish(args *ar, int err)
{
	int st = TD_CLI_OK;
	if (err)
		st = ar->pathi < ar->argc ? td_cli_error_in(ar->argv[ar->archi], ar->argv[ar->pathi], err)
					  : td_cli_error_td(ar->argv[ar->archi], err);
	td_archive_close(ar->a);
	return st;
}

static int print_word(void *ctx, const char *word, size_t len, uint64_t count)
{
	(void)ctx;
	td_cli_out_u64(count, '\t');
	td_cli_out(word, len);
	td_cli_out("\n", 1);
	return 0;
}

int td_cmd_top(int argc, char **argv)
{
	static const spec sp = { top_help, "+:hn:", 0, 0, 0, 0 };
	args ar = { .n = 20 };
	int st = prepare(argc, argv, &sp, &ar);
	return st >= 0 ? st : finish(&ar, td_top_words(ar.a, ar.scope, ar.n, print_word, NULL));
}

int td_cmd_vector(int argc, char **argv)
{
	static const spec sp = { vector_help, "+:h", 0, 1, 0, 0 };
	args ar = { 0 };
	int st = prepare(argc, argv, &sp, &ar);
	return st >= 0 ? st : finish(&ar, td_term_vector(ar.a, ar.scope, print_word, NULL));
}

static int print_files(const args *ar, const char *query, size_t qlen, const td_file_count *v, size_t k);
static int files_batch(args *ar);

int td_cmd_files(int argc, char **argv)
{
	static const spec sp = { files_help, "+:hn:f:", 2, 0, 0, 0 };
	args ar = { 0 };
	int st = prepare(argc, argv, &sp, &ar);
	if (st >= 0)
		return st;
	if (ar.wfile)
		return files_batch(&ar);
	td_file_count *v = NULL;
	size_t k = 0;
	int err = td_phrase_files(ar.a, ar.word, strlen(ar.word), ar.scope, &v, &k);
	if (!err)
		err = print_files(&ar, NULL, 0, v, k);
	free(v);
	return finish(&ar, err);
}

static int print_ngram(void *ctx, const char *const *words, const size_t *lens, unsigned nwords, uint64_t count)
{
	(void)ctx;
	td_cli_outf("%llu\t", (unsigned long long)count);
	for (unsigned i = 0; i < nwords; i++) {
		if (i)
			td_cli_out(" ", 1);
		td_cli_out(words[i], lens[i]);
	}
	td_cli_out("\n", 1);
	return 0;
}

int td_cmd_ngrams(int argc, char **argv)
{
	static const spec sp = { ngrams_help, "+:hn:", 0, 0, 2, TD_PHRASE_MAX };
	args ar = { .n = 3, .top = 20 };
	int st = prepare(argc, argv, &sp, &ar);
	if (st >= 0)
		return st;
	return finish(&ar, td_ngrams(ar.a, ar.scope, (unsigned)ar.n, ar.top, print_ngram, NULL));
}

static int print_fuzzy(void *ctx, unsigned dist, const char *word, size_t len, uint64_t count)
{
	(void)ctx;
	td_cli_outf("%u\t%llu\t", dist, (unsigned long long)count);
	td_cli_out(word, len);
	td_cli_out("\n", 1);
	return 0;
}

/* Batches of this many queries or more go to the GPU under --gpu auto:
 * below, opening the GPU (the archive's upload) costs more than the
 * batch takes on every core. */
#define BATCH_GPU_MIN 4000u

/* The lines of `path` ('-': standard input) into *buf (malloc'd) and
 * their starts and lengths into *w / *wl (malloc'd); their number, or -1
 * with the error reported. */
static long read_lines(const char *cmd, const char *path, char **buf, char ***w, size_t **wl)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
	if (!f)
		return td_cli_usage(cmd, "-f %s: %s", path, strerror(errno)), -1;
	size_t n = 0, cap = 1 << 16;
	char *b = malloc(cap);
	for (size_t got; b && (got = fread(b + n, 1, cap - n, f)) > 0;) {
		n += got;
		if (n == cap) {
			char *nb = realloc(b, cap *= 2);
			if (!nb)
				free(b);
			b = nb;
		}
	}
	int rerr = ferror(f);
	if (f != stdin)
		fclose(f);
	if (!b || rerr) {
		const char *why = b ? "read error" : "out of memory";
		free(b);
		return td_cli_usage(cmd, "-f %s: %s", path, why), -1;
	}
	size_t nl = 0;
	for (size_t i = 0; i < n; i++)
		nl += b[i] == '\n';
	nl += n && b[n - 1] != '\n';
	*w = malloc((nl + 1) * sizeof **w);
	*wl = malloc((nl + 1) * sizeof **wl);
	if (!*w || !*wl) {
		free(*w);
		free(*wl);
		free(b);
		return td_cli_usage(cmd, "-f %s: out of memory", path), -1;
	}
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		size_t j = i;
		while (j < n && b[j] != '\n')
			j++;
		(*w)[k] = b + i;
		(*wl)[k++] = j - i;
		i = j + 1;
	}
	*buf = b;
	return (long)k;
}

/* A batch's queries: the lines of -f WORDS. */
typedef struct batch {
	char *buf, **w;
	size_t *wl, n;
	td_gpu *g;
} batch;

static void batch_free(batch *b)
{
	td_gpu_close(b->g);
	free(b->buf);
	free(b->w);
	free(b->wl);
}

/* Read -f WORDS into b, each line a single word (phrase 0) or a word or
 * phrase (1), and open the GPU when --gpu says so (auto: only when `helps`,
 * the GPU taking part of this batch). Returns -1 to go on, or the exit
 * status (archive closed, error reported). *err: TD_OK, or a GPU error
 * under --gpu on. */
static int batch_open(args *ar, int phrase, int helps, batch *b, int *err)
{
	const char *cmd = ar->argv[0];
	long nl = read_lines(cmd, ar->wfile, &b->buf, &b->w, &b->wl);
	if (nl < 0) {
		td_archive_close(ar->a);
		return TD_CLI_USAGE;
	}
	b->n = (size_t)nl;
	for (size_t i = 0; i < b->n; i++)
		if (phrase ? !td_phrase_words(b->w[i], b->wl[i]) : !td_is_word(b->w[i], b->wl[i])) {
			td_cli_usage(cmd, "-f %s: line %zu: '%.*s' is not %s", ar->wfile, i + 1,
				     (int)(b->wl[i] > 64 ? 64 : b->wl[i]), b->w[i],
				     phrase ? "a word or a phrase (words separated by single spaces)"
					    : "a single word (letters, digits, underscore)");
			batch_free(b);
			td_archive_close(ar->a);
			return TD_CLI_USAGE;
		}
	*err = TD_OK;
	int want = ar->gpu == TD_GPU_USE_ON ||
		   (ar->gpu == TD_GPU_USE_AUTO && helps && b->n >= BATCH_GPU_MIN && td_gpu_available());
	if (want) {
		int gerr = td_gpu_available() ? td_gpu_open(ar->a, NULL, &b->g) : TD_ENOGPU;
		if (gerr && ar->gpu == TD_GPU_USE_ON)
			*err = gerr;
	}
	return -1;
}

/* tadoc fuzzy -f WORDS: one batch, on the GPU or every core. */
static int fuzzy_batch(args *ar)
{
	batch b = { 0 };
	int err, st = batch_open(ar, 0, 1, &b, &err);
	if (st >= 0)
		return st;
	size_t n = b.n;
	td_fuzzy_req *q = calloc(n + 1, sizeof *q);
	if (!err && !q)
		err = TD_ENOMEM;
	for (size_t i = 0; i < n && q; i++)
		q[i] = (td_fuzzy_req){ .word = b.w[i], .len = b.wl[i], .k = (unsigned)ar->n, .scope = ar->scope };
	if (!err)
		err = b.g ? td_gpu_fuzzy_batch(b.g, q, n) : td_fuzzy_batch(ar->a, q, n, 0);
	for (size_t i = 0; i < n && !err; i++) {
		if ((err = q[i].err))
			break;
		for (size_t h = 0; h < q[i].nhits; h++) {
			td_cli_out(q[i].word, q[i].len);
			td_cli_outf("\t%u\t%llu\t", q[i].hits[h].dist, (unsigned long long)q[i].hits[h].count);
			td_cli_out(q[i].words + q[i].hits[h].off, q[i].hits[h].len);
			td_cli_out("\n", 1);
		}
	}
	for (size_t i = 0; i < n && q; i++)
		td_fuzzy_req_free(&q[i]);
	free(q);
	batch_free(&b);
	return finish(ar, err);
}

/* memcpy(d, s, n) for the short pieces of a line (a count, a prefix, a
 * name): overlapping word moves inside both spans, no call. */
static inline void copy_short(char *d, const char *s, size_t n)
{
	uint64_t w[4];
	if (n > 32) {
		memcpy(d, s, n);
	} else if (n >= 16) {
		memcpy(&w[0], s, 16), memcpy(&w[2], s + n - 16, 16);
		memcpy(d, &w[0], 16), memcpy(d + n - 16, &w[2], 16);
	} else if (n >= 8) {
		memcpy(&w[0], s, 8), memcpy(&w[1], s + n - 8, 8);
		memcpy(d, &w[0], 8), memcpy(d + n - 8, &w[1], 8);
	} else if (n >= 4) {
		uint32_t x, y;
		memcpy(&x, s, 4), memcpy(&y, s + n - 4, 4);
		memcpy(d, &x, 4), memcpy(d + n - 4, &y, 4);
	} else if (n) {
		const char a = s[0], b = s[n / 2], c = s[n - 1];
		d[0] = a, d[n / 2] = b, d[n - 1] = c;
	}
}

/* Print files v[0..k) (the first N of them with -n), each line after
 * 'QUERY<TAB>' when query is not NULL. Each directory's path is built
 * and escaped once; parents and names come a block of files at a time
 * (td_archive_names), a file the block stopped at through the calls of
 * one entry, whose errors say why. */
static int print_files(const args *ar, const char *query, size_t qlen, const td_file_count *v, size_t k)
{
	enum { BLOCK = 256 };
	if (ar->n && k > ar->n)
		k = ar->n;
	if (!k)
		return TD_OK;
	td_dir_paths m;
	const int merr = td_dir_paths_init(&m, ar->a);
	td_entry *ent = malloc(BLOCK * sizeof *ent);
	td_name_ref *ref = malloc(BLOCK * sizeof *ref);
	int err = !merr && ent && ref ? TD_OK : TD_ENOMEM;
	for (size_t b = 0; b < k && !err; b += BLOCK) {
		const size_t nb = k - b < BLOCK ? k - b : BLOCK;
		size_t good;
		for (size_t j = 0; j < nb; j++)
			ent[j] = v[b + j].file;
		(void)td_archive_names(ar->a, ent, nb, ref, &good);
		for (size_t j = 0; j < nb && !err; j++) {
			const td_entry e = ent[j];
			td_entry d;
			const char *pre, *nm;
			size_t pn, nl;
			int escn;
			if (j < good)
				d = ref[j].parent;
			else if ((err = td_archive_parent(ar->a, e, &d)))
				break;
			if (d >= e) {
				err = td_fail(TD_ECORRUPT, "entry %u: parent %u does not come first", e, d);
				break;
			}
			if ((err = td_dir_path(ar->a, &m, d, &pre, &pn)))
				break;
			if (j < good) {
				nm = ref[j].name, nl = ref[j].len, escn = ref[j].esc;
			} else if ((nm = td_archive_name(ar->a, e, &nl))) {
				escn = td_path_needs_escape(nm, nl);
			} else {
				err = TD_ECORRUPT;
				break;
			}
			/* the line at once into the output buffer (one longer than
			 * it: into a buffer of its own) */
			char num[TD_CLI_U64_LEN];
			const size_t n0 = td_cli_fmt_u64(num, v[b + j].count, '\t'), nw = sizeof num - n0;
			const size_t len = (query ? qlen + 1 : 0) + nw + pn + (escn ? 2 * nl : nl) + 1;
			char *big = NULL, *o = td_cli_out_room(len);
			if (!o && !(o = big = malloc(len))) {
				err = TD_ENOMEM;
				break;
			}
			char *at = o;
			if (query) {
				memcpy(at, query, qlen);
				at += qlen;
				*at++ = '\t';
			}
			memcpy(at, num + n0, nw);
			at += nw;
			copy_short(at, pre, pn);
			at += pn;
			if (escn) {
				at += td_path_escape(nm, nl, at);
			} else { /* nothing to escape, the common case */
				copy_short(at, nm, nl);
				at += nl;
			}
			*at++ = '\n';
			if (big) {
				td_cli_out(big, (size_t)(at - big));
				free(big);
			} else {
				td_cli_out_commit((size_t)(at - o));
			}
		}
	}
	free(ent);
	free(ref);
	td_dir_paths_free(&m);
	return err;
}

/* tadoc files -f WORDS: one batch, on the GPU or every core. */
static int files_batch(args *ar)
{
	batch b = { 0 };
	/* the corpus and large directories: the engine's query index, on the
	 * CPU whatever the flag (td_gpu_files_batch) */
	int err, st = batch_open(ar, 1, !td_query_fast(ar->a, ar->scope), &b, &err);
	if (st >= 0)
		return st;
	size_t n = b.n;
	td_files_req *q = calloc(n + 1, sizeof *q);
	if (!err && !q)
		err = TD_ENOMEM;
	for (size_t i = 0; i < n && q; i++)
		q[i] = (td_files_req){ .word = b.w[i], .len = b.wl[i], .scope = ar->scope };
	if (!err)
		err = b.g ? td_gpu_files_batch(b.g, q, n) : td_files_batch(ar->a, q, n, 0);
	for (size_t i = 0; i < n && !err; i++)
		if (!(err = q[i].err))
			err = print_files(ar, q[i].word, q[i].len, q[i].files, q[i].nfiles);
	for (size_t i = 0; i < n && q; i++)
		free(q[i].files);
	free(q);
	batch_free(&b);
	return finish(ar, err);
}

int td_cmd_fuzzy(int argc, char **argv)
{
	static const spec sp = { fuzzy_help, "+:hk:f:", 1, 0, 0, TD_FUZZY_MAXK };
	args ar = { .n = 1 };
	int st = prepare(argc, argv, &sp, &ar);
	if (st >= 0)
		return st;
	if (ar.wfile)
		return fuzzy_batch(&ar);
	return finish(&ar, td_fuzzy(ar.a, ar.word, strlen(ar.word), (unsigned)ar.n, ar.scope, 0, print_fuzzy, NULL));
}
