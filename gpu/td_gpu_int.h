/* td_gpu_int: what the host side (td_gpu.c) and the kernels (td_gpu_*.cu) share. */
#ifndef TD_GPU_INT_H
#define TD_GPU_INT_H

#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <time.h>

#include "td_format.h"
#include "td_pack.h"
#include "td_archive.h"
#include "td_query.h"
#include "td_extract.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The archive as the kernels see it: td_pack views whose pointers are
 * device addresses (same layout as on disk), plus the meta counts. Passed to
 * every kernel by value. */
typedef struct td_gdev {
	td_pack e_mode, e_size, e_root, e_gstart, e_child;
	td_pack word_off, word_freq, other_off;
	td_pack rule_syms, rule_len, root_syms, root_samples, rule_samples;
	const uint8_t *words, *other;
	uint64_t words_size, other_size;
	const td_disk_group *groups;
	const uint64_t *rule_mask;   /* TD_MASK_W words per rule: word signature */
	/* Regular files in the order td_search reports them (depth-first from
	 * the root, children in entry order); the files under entry e are
	 * dfs_files[sub[2e], sub[2e+1]). Built on the host at open. */
	const uint32_t *dfs_files;
	const uint32_t *sub;
	uint64_t nentries, nwords, nother, nrules, ngroups, nroot;
	uint64_t sample_shift, nsamples;
	uint32_t xchunk;             /* extract output bytes per work item
	                                (one lane); 0 = TD_GX_CHUNK */
	uint32_t xcoop;              /* reads of at least this many bytes are
	                                walked by whole warps (td_xc_warp), one
	                                per xseg bytes, and get no work items;
	                                0 = none */
	uint32_t xseg;               /* 0 = TD_GX_SEG */
	/* Expansions of short rules (at most TD_RX_MAX bytes; built at open
	 * by td_gk_rx_fill): rule r's text is rx_pool[rx_off[r],
	 * rx_off[r+1]), kept iff that range is not empty; extract copies it
	 * instead of walking the rule. rx_off NULL: none kept. */
	const uint32_t *rx_off;
	const uint8_t *rx_pool;
	/* root_pos[k] = bytes the root symbols before k expand to (nroot + 1
	 * values, built at open by td_gk_root_pos when they fit): a read
	 * finds the root symbol holding its offset by one binary search of
	 * its file's range. NULL: by ROOT_SAMPLES and a scan of the root. */
	const uint64_t *root_pos;
	/* Rule groups by rule number (built on the host at open when the
	 * groups are in rule order): the group of rule r lies in
	 * [rjt[r >> TD_RJT_SHIFT], rjt[(r >> TD_RJT_SHIFT) + 1]], so td_rhs
	 * searches a few groups, not all of them. NULL: the whole table. */
	const uint32_t *rjt;
	/* Every rule's right-hand side as one word, first symbol << 24 | length
	 * (built on the host at open when every rule is shorter than 2^24
	 * symbols and RULE_SYMS than 2^40, and it fits): a walk loads it
	 * beside the rule's signature, so entering a rule costs one load, not
	 * the jump table's and the group's after it. NULL: td_rhs by groups. */
	const uint64_t *rrhs;
} td_gdev;

/* td_gdev.rrhs: a rule's first symbol and length in one word. */
#define TD_RRHS_LENBITS 24u

/* 1 when td_rule_rhs_words can fit every rule of the ngroups groups over
 * nsyms rule symbols in a word (each shorter than 2^24 symbols, nsyms
 * under 2^40); it still checks that the groups cover the rules. */
static inline int td_rule_rhs_fit(const td_disk_group *grp, uint64_t ngroups, uint64_t nsyms)
{
	if (!grp || ngroups == 0 || nsyms >= (UINT64_C(1) << (64 - TD_RRHS_LENBITS)))
		return 0;
	for (uint64_t g = 0; g < ngroups; g++)
		if (grp[g].len >= (UINT64_C(1) << TD_RRHS_LENBITS))
			return 0;
	return 1;
}

/* Fill w[nrules] (td_gdev.rrhs) from the ngroups groups (in rule order
 * from rule 0, as the CPU engine checks them at open) over nsyms rule
 * symbols. Returns 0, or -1 (w unusable) when a rule is 2^24 symbols or
 * longer, a symbol index reaches 2^40, or the groups do not cover the rules. */
static inline int td_rule_rhs_words(const td_disk_group *grp, uint64_t ngroups, uint64_t nrules, uint64_t nsyms,
				    uint64_t *w)
{
	if (!td_rule_rhs_fit(grp, ngroups, nsyms) || grp[0].first_rule != 0)
		return -1;
	for (uint64_t g = 0; g < ngroups; g++) {
		uint64_t fr = grp[g].first_rule, end = g + 1 < ngroups ? grp[g + 1].first_rule : nrules;
		uint64_t len = grp[g].len, first = grp[g].first_sym;
		if (end <= fr || end > nrules || len == 0 || first > nsyms || (end - fr) > (nsyms - first) / len)
			return -1;
		for (uint64_t r = fr; r < end; r++, first += len)
			w[r] = first << TD_RRHS_LENBITS | len;
	}
	return grp[ngroups - 1].first_rule < nrules ? 0 : -1;
}

/* 64-bit words of a rule's word signature (one bit a word, hashed; a
 * rule's is the OR of its symbols'): 2, 4 or 8. */
#ifndef TD_MASK_W
#define TD_MASK_W 2u
#endif
#if TD_MASK_W != 2u && TD_MASK_W != 4u && TD_MASK_W != 8u
#error "TD_MASK_W must be 2, 4 or 8"
#endif
#define TD_MASK_LOG2 (TD_MASK_W == 8u ? 9u : TD_MASK_W == 4u ? 8u : 7u)

/* Rules a jump-table entry (td_gdev.rjt). */
#define TD_RJT_SHIFT 8u

/* Entries of the jump table of nrules rules. */
static inline uint64_t td_rule_jumps_n(uint64_t nrules)
{
	return (nrules >> TD_RJT_SHIFT) + 2;
}

/* Fill jt[td_rule_jumps_n(nrules)]: jt[k] = the last of the ngroups groups
 * starting at or before rule k << TD_RJT_SHIFT. Returns 0, or -1 (jt
 * unusable) when there are no groups or over UINT32_MAX, or they are not
 * in rule order from rule 0. */
static inline int td_rule_jumps(const td_disk_group *grp, uint64_t ngroups, uint64_t nrules, uint32_t *jt)
{
	if (ngroups == 0 || ngroups > UINT32_MAX || grp[0].first_rule != 0)
		return -1;
	for (uint64_t i = 1; i < ngroups; i++)
		if (grp[i].first_rule <= grp[i - 1].first_rule)
			return -1;
	uint64_t gi = 0, n = td_rule_jumps_n(nrules);
	for (uint64_t k = 0; k < n; k++) {
		uint64_t r = k << TD_RJT_SHIFT;
		while (gi + 1 < ngroups && grp[gi + 1].first_rule <= r)
			gi++;
		jt[k] = (uint32_t)gi;
	}
	return 0;
}

/* Longest rule expansion kept whole on the device, and the most bytes
 * all of them may take. */
#define TD_RX_MAX 128u
#define TD_RX_CAP (UINT64_C(1) << 30)

/* One extract request as the kernel reads it (host packs these). */
typedef struct td_gx_req {
	uint64_t off;
	uint32_t outoff;             /* where its bytes go in the output buffer
	                                (a round holds at most 512 MiB) */
	uint32_t file;
	uint32_t len;
	uint32_t item0;              /* first work item (prefix sum) */
	uint32_t warp0;              /* first warp of a warp-walked read (prefix sum) */
	uint32_t tag;                /* host bookkeeping; kernels ignore it */
} td_gx_req;

/* Result of one extract request. */
typedef struct td_gx_res {
	uint32_t got;
	int32_t err;
} td_gx_res;

/* One count/search request as the kernels read it: the query word is
 * qwords[woff, woff+wlen) (0 < wlen <= TD_MAXTOK) and scope < nentries
 * (the host sends everything else to the CPU engine). A long request is
 * sent as several parts, one warp each (td_gpu.c): `part` says which
 * share of the scope this one walks. The parts' counts add up to the
 * request's, and their hit lists, in part order, are its hit list. */
typedef struct td_gq_req {
	uint64_t woff;
	uint32_t wlen;
	uint32_t scope;
	uint32_t part;               /* TD_GQ_WHOLE, TD_GQ_FILES, TD_GQ_SLICE */
	uint32_t big;                /* nonzero: scope is a regular file holding a
	                                root symbol over qbig bytes (marked at open
	                                by the host); walked by td_k_count_big /
	                                td_k_search_big, not the usual kernels */
	uint64_t a, b;               /* the part's range, see below */
} td_gq_req;

/* td_gq_req.part: the whole scope; files dfs_files[a, b) of directory
 * `scope` (inside its range); root symbols [a, b) of regular file `scope`,
 * where a is the file's first root symbol or a multiple of
 * 2^sample_shift (its file offset is ROOT_SAMPLES' less E_GSTART's). */
#define TD_GQ_WHOLE 0u
#define TD_GQ_FILES 1u
#define TD_GQ_SLICE 2u

/* Count result meaning "the word is not in the dictionary": the host asks
 * the CPU engine (which decides between 0 and TD_ENOTWORD). */
#define TD_GQ_NOTFOUND UINT64_MAX

/* Fill files[] with the regular files in td_search's order (depth-first
 * from the root, children in entry order; symlinks and unreadable
 * directories hold nothing) and sub[2e], sub[2e+1] with the range of
 * files[] under entry e. files has nent slots, sub 2 * nent. TD_OK,
 * TD_ENOMEM, TD_ECORRUPT (an entry reached twice). (td_gpu_order.c) */
int td_gpu_file_order(const td_archive *a, uint32_t nent, uint32_t *files, uint32_t *sub);

/* Bytes of extract output handled by one GPU thread unless td_gdev.xchunk
 * says otherwise (td_gpu_opts.xchunk). */
#define TD_GX_CHUNK 256u

/* Reads of at least this many bytes are walked by a whole warp together
 * unless td_gpu_opts.xcoop says otherwise. */
#define TD_GX_COOP 1024u
/* Output bytes of a warp-walked read per warp (each seeks on its own),
 * unless td_gpu_opts.xseg says otherwise; adaptive (xseg 0): halved down
 * to TD_GX_SEG_MIN while a round gives fewer than TD_GX_WARPS_SM warps a
 * multiprocessor. */
#define TD_GX_SEG 8192u
#define TD_GX_SEG_MIN 512u
#define TD_GX_WARPS_SM 16u

/* Work units: a request of len bytes on d takes ceil(len / xseg) warps
 * (at least one) when d->xcoop && len >= d->xcoop, else ceil(len / xchunk)
 * work items (at least one); a request's units are numbered after those
 * of the requests before it (td_units_next in td_gpu.c). */

/* Launchers (td_gpu_kernels.cu). Each returns 0 or a cudaError_t value;
 * `stream` is a cudaStream_t. All are asynchronous on `stream`. */
int td_gk_build_masks(const td_gdev *d, uint64_t *mask, int *changed, void *stream);
/* TD_MASK_W as the kernels were compiled with it (the host checks it
 * against its own at open). */
unsigned td_gk_mask_w(void);
/* Write every kept rule's expansion into pool (td_gdev.rx_off); *bad = 1
 * when one does not add up (a corrupt grammar: drop them all). */
int td_gk_rx_fill(const td_gdev *d, uint8_t *pool, int *bad, void *stream);
/* pos[k] = bytes root symbols [0, k) expand to, k = 0 .. d->nroot (a
 * prefix sum of their lengths); *bad = 1 if a root symbol is not a
 * symbol. pos has d->nroot + 1 slots. */
int td_gk_root_pos(const td_gdev *d, uint64_t *pos, int *bad, void *stream);
/* Requests with len >= d->xcoop run on warps [warp0, warp0 + nwarps) of
 * the numbering in req[].warp0 (their prefix sum, see "Work units"); the
 * others on work items [item0, item0 + nitems) of req[].item0. Each kind
 * counts none of the other's; req[0] is the first request of both ranges. */
int td_gk_extract(const td_gdev *d, const td_gx_req *req, uint32_t nreq, uint32_t item0, uint32_t nitems,
		  uint32_t warp0, uint32_t nwarps, uint8_t *out, td_gx_res *res, void *stream);
/* The requests marked big (td_gq_req.big) of a count or search launch:
 * the usual kernels leave them out, and a kernel of their own walks them
 * (a root symbol over qbig bytes that holds the word's signature bit by
 * the whole warp, each lane over 1/32 of its bytes), one warp each, on
 * `stream`, forked from the launch's stream by event `fork` after what it
 * holds and joined back by `join` before what it gets next. NULL or n = 0:
 * none (no second kernel). */
typedef struct td_gk_big {
	const uint32_t *idx;         /* device: their indices in req[] */
	uint32_t n;
	uint64_t qbig;               /* td_gpu.c: $TD_GPU_QBIG, TD_GQ_BIG */
	void *stream, *fork, *join;  /* cudaStream_t, cudaEvent_t */
} td_gk_big;

/* Default qbig in bytes ($TD_GPU_QBIG=B overrides; 0: nothing is marked). */
#define TD_GQ_BIG 4096u

/* count[i] = occurrences of the word of req[i] in its scope, or
 * TD_GQ_NOTFOUND. `search` = 1 counts what td_search reports (the root
 * scope walks the tree), 0 what td_count reports (the root scope reads
 * WORD_FREQ). Requests marked big are counted by big's kernel (each of
 * them must be in big->idx). */
int td_gk_count(const td_gdev *d, const uint8_t *qwords, const td_gq_req *req, uint32_t nreq,
		int search, uint64_t *count, void *stream, const td_gk_big *big);
/* Write the hits of request i at hits + base[i], in td_search order; base[i]
 * comes from the counts of td_gk_count(search = 1); requests with
 * skip[i] != 0 are left out; those marked big are filled by big's kernel
 * (each of them with skip 0 must be in big->idx). */
int td_gk_search(const td_gdev *d, const uint8_t *qwords, const td_gq_req *req, uint32_t nreq,
		 const uint64_t *base, const uint8_t *skip, td_hit *hits, void *stream, const td_gk_big *big);

/* ---- fuzzy search (td_gpu_fuzzy.cu, td_gpu_fuzzy.c) ---- */

/* A unit's vocabulary on the device, sorted by length in code points
 * (stable, so by word id within a length): word x is WORDS id id[x], its
 * code points cps[cpoff[x], cpoff[x+1]) (invalid UTF-8 bytes as byte |
 * 0x800000, as engine/td_fuzzy.c reads them), mask[x] its character
 * filter (td_gfz_mask of each code point). */
typedef struct td_gfz_dev {
	const uint32_t *id;
	const uint64_t *mask;
	const uint32_t *cpoff;
	const uint32_t *cps;
} td_gfz_dev;

/* Words a warp of the fuzzy kernel takes. */
#define TD_GFZ_SEG 2048u

/* One fuzzy query as the kernel reads it: code points qcps[qoff, qoff+m),
 * distance k <= 3, the run [lo, hi) of words within k code points of m,
 * warps [seg0, seg0 + ceil((hi - lo) / TD_GFZ_SEG)) of the launch (seg0
 * ascending over the queries), its matches at out[base, base + cap). */
typedef struct td_gfz_q {
	uint64_t mask;
	uint32_t qoff, m, k, lo, hi, seg0, base, cap;
} td_gfz_q;

/* The filter bit of code point c: ASCII letters, digits and '_' each
 * their own of 63 bits, everything else hashed. */
static inline uint64_t td_gfz_bit(uint32_t c)
{
	if (c >= 'a' && c <= 'z')
		return UINT64_C(1) << (c - 'a');
	if (c >= 'A' && c <= 'Z')
		return UINT64_C(1) << (26 + c - 'A');
	if (c >= '0' && c <= '9')
		return UINT64_C(1) << (52 + c - '0');
	if (c == '_')
		return UINT64_C(1) << 62;
	return UINT64_C(1) << ((c * 2654435761u) >> 26);
}

/* Match counts of q[i] in cnt[i] (zeroed by the caller), matches (word id
 * << 2 | distance) in out at q[i].base + their slot while the slot is below
 * q[i].cap; nwarps = the segments of all queries. 0 or a cudaError_t. */
int td_gk_fuzzy(const td_gfz_dev *z, const td_gfz_q *q, uint32_t nq, uint32_t nwarps, const uint32_t *qcps,
		uint32_t *cnt, uint32_t *out, void *stream);

/* What td_gpu_fuzzy.c reads of a resident handle of one unit (td_gpu.c). */
struct td_gfz;
typedef struct td_gunit {
	const td_archive *a;
	uint64_t nwords;              /* WORDS entries */
	int device;
	void *stream;                 /* a cudaStream_t of the handle */
	pthread_mutex_t *lock;        /* the handle's: one batch at a time */
	struct td_gfz **fz;           /* its fuzzy vocabulary (NULL until built;
	                                 td_gpu_close calls td_gfz_free) */
	struct td_gwd **wd;           /* its flat grammar for top words and term
	                                 vectors (NULL until built; td_gpu_close
	                                 calls td_gwd_free) */
	const uint32_t *files, *sub;  /* host copies of td_gdev.dfs_files, .sub */
	struct td_gpost **post;       /* its ranked inverted index (NULL until
	                                 built; td_gpu_close calls td_gpost_free) */
} td_gunit;
struct td_gpu;
/* The format 5 handle's file map for the shards' inverted indexes (NULL
 * until built; td_gpu_close calls td_gpostg_free), or NULL for others. */
struct td_gpostg **td_gpu_postg(struct td_gpu *g);
struct td_gpu;
/* 1 and *u for a resident handle of one unit, else 0. */
int td_gpu_unit(struct td_gpu *g, td_gunit *u);
/* The shards of a resident version 5 handle, else NULL. */
struct td_gmulti *td_gpu_multi(struct td_gpu *g);
unsigned td_gpu_cpu_threads(const struct td_gpu *g);
const td_archive *td_gpu_archive(const struct td_gpu *g);
/* Free a fuzzy vocabulary (device memory on the current device). */
void td_gfz_free(struct td_gfz *z);

/* ---- top words and term vectors (td_gpu_words.cu, td_gpu_words.c) ---- */

/* A unit's grammar, flat, on the device: root symbols, each rule's right
 * side (rsyms[rstart[r], rstart[r+1])) and its number of word tokens. The
 * host builds the arrays (td_gpu_words.c) and has checked them: every
 * symbol < T + R, rules acyclic and at most TD_MAXDEPTH deep, every
 * expansion's word tokens counted in rnw. */
typedef struct td_gwd_in {
	const uint32_t *roots, *rstart, *rsyms, *rnw;
	uint64_t nroot, nrules, nrsyms;
	uint64_t w2, t;                 /* 2W (word tokens below) and T (rules from) */
} td_gwd_in;

/* A span of a batch: root symbols [rs, re) of one file of request `req`
 * (of the round), its tasks (a root symbol each) numbered from t0
 * (ascending over the spans). */
typedef struct td_gwd_span {
	uint64_t rs, t0;
	uint32_t req, n;
} td_gwd_span;

/* A round's answers: runs (word id, count) of every request, request by
 * request; request i's are [start[i], start[i + 1]). With top, each
 * request's are count descending then word id ascending, at most topn[i]
 * (0: all); else word id ascending. */
typedef struct td_gwd_out {
	uint32_t *wid, *cnt;            /* malloc'd by td_gwd_round */
	uint64_t *start;                /* nreq + 1, malloc'd */
	uint64_t nruns;
} td_gwd_out;

struct td_gwdev;
/* Upload in (on the current device); TD_OK, TD_ENOGPU (no device memory
 * or a CUDA error), TD_ENOMEM. */
int td_gwdev_upload(const td_gwd_in *in, struct td_gwdev **out);
/* Free (device memory on the current device). NULL accepted. */
void td_gwdev_free(struct td_gwdev *z);
/* The unit's structure (host and device parts, td_gpu_words.c). NULL accepted. */
struct td_gwd;
void td_gwd_free(struct td_gwd *w);
/* One round: spans sp[0..nsp) of requests 0..nreq-1 expanding to nwords
 * word tokens in all (< 2^32 each request), on `stream`. TD_OK, TD_ENOGPU,
 * TD_ENOMEM; on error o holds nothing. */
int td_gwdev_round(struct td_gwdev *z, void *stream, const td_gwd_span *sp, uint32_t nsp, uint32_t nreq,
		 uint64_t ntasks, uint64_t nwords, int top, const uint64_t *topn, td_gwd_out *o);

/* A round's n-grams: runs of len words of every request, request by
 * request ([start[i], start[i + 1]) are request i's), count descending,
 * then by their words, at most topn[i] (0: all); run j's words are
 * wid[j * len, (j + 1) * len). */
typedef struct td_gng_out {
	uint32_t *wid, *cnt;            /* malloc'd by td_gngdev_round */
	uint64_t *start;                /* nreq + 1, malloc'd */
	uint64_t nruns;
} td_gng_out;

/* One n-gram round over the spans of td_gwdev_round (len in 2..8). TD_OK,
 * TD_ENOGPU, TD_ENOMEM; on error o holds nothing. */
int td_gngdev_round(struct td_gwdev *z, void *stream, const td_gwd_span *sp, uint32_t nsp, uint32_t nreq,
		    uint64_t ntasks, uint64_t nwords, unsigned len, const uint64_t *topn, td_gng_out *o);

/* A scope's word counts as the device found them (word id ascending):
 * wid[0..n) then cnt[0..n) in v (malloc'd); ok = 0 where the device did
 * not take the scope (words longer than TD_MAXTOK, a symbolic link, too
 * large for a round, the corpus root, a failed round). */
typedef struct td_gwd_raw {
	uint32_t *v;
	size_t n;
	int ok;
} td_gwd_raw;
/* The word counts of scopes[0..n) of unit u into out[0..n) (the flat
 * grammar built first if need be; takes u's lock), answers copied out on
 * `threads` threads. TD_OK or TD_ENOMEM (then out holds nothing). */
int td_gwd_counts(const td_gunit *u, unsigned threads, const td_entry *scopes, size_t n, td_gwd_raw *out);
/* Word id of p[0..len) in unit u's dictionary, or -1. Thread-safe. */
int64_t td_gwd_word(const td_gunit *u, const char *p, size_t len);

/* ---- ranked files from an inverted index made on the device (td_gpu_post.c) ---- */

/* A unit's ranked inverted index (NULL accepted). */
struct td_gpost;
struct td_files_req;
void td_gpost_free(struct td_gpost *p);
/* The format 5 handle's map of the shards' files to the archive's. */
struct td_gpostg;
void td_gpostg_free(struct td_gpostg *p);
/* Answer the single-word requests of reqs[0..n) that the index can (built
 * at the first call: every file's word counts on the device, ranked by
 * count and path); the others' indices go to rest[0..*nrest) (rest holds
 * n). TD_OK or TD_ENOMEM (then nothing is answered). */
int td_gpost_files(struct td_gpu *g, struct td_files_req *reqs, size_t n, size_t *rest, size_t *nrest);
/* 0 when environment variable name is "0" (a path turned off, for
 * measuring), else 1. Thread safe as getenv is. */
int td_gpu_env_on(const char *name);

/* ---- shards and devices (td_gpu_multi.c) ---- */

struct td_gpu;
struct td_gpu_opts;
typedef struct td_gmulti td_gmulti;

/* Device bytes a handle may use on device dev under o (mem_cap, or free
 * memory less the reserve); 0 when the device cannot say. (td_gpu.c) */
uint64_t td_gpu_avail(const struct td_gpu_opts *o, int dev);

/* Open a handle of one unit (a version 1-4 archive, or one shard) on
 * device o->device within avail device bytes (UINT64_MAX: td_gpu_avail),
 * keeping at most ws bytes (0: all that is left) for batch buffers; *used:
 * the device bytes it may take (0 when not resident). o is normalised.
 * Errors as td_gpu_open. (td_gpu.c) */
int td_gpu_open_dev(const td_archive *a, const struct td_gpu_opts *o, uint64_t avail, uint64_t ws,
		    struct td_gpu **out, uint64_t *used);

/* Requests idx[0..nc) of reqs (elements of `size` bytes) through the CPU
 * engine's batch call `run` on archive a with `threads` threads, moved out
 * and back (a search's hit list moves with its request). TD_OK or
 * TD_ENOMEM (other errors are the requests' own). (td_gpu.c) */
int td_gpu_cpu_rest(const td_archive *a, unsigned threads, void *reqs, size_t size, const size_t *idx, size_t nc,
		    int (*run)(const td_archive *, void *, size_t, unsigned));
/* td_extract_batch, td_count_batch, td_search_batch in that form. */
int td_gpu_cpu_extracts(const td_archive *a, void *reqs, size_t n, unsigned threads);
int td_gpu_cpu_counts(const td_archive *a, void *reqs, size_t n, unsigned threads);
int td_gpu_cpu_searches(const td_archive *a, void *reqs, size_t n, unsigned threads);

/* A count (search 0) or search (1) batch on the resident handle g of one
 * unit (not a version 5 archive's own handle) in steps, so that one host
 * thread keeps several handles' batches in flight: td_gpu_query_begin
 * locks g, packs reqs (td_count_req or td_search_req) and launches their
 * kernels without waiting for them; td_gpu_query_end takes the next step
 * (a count: all of the rest; a search: the counts, then each round of
 * hits), setting *more to 1 while a step is left (call it again later)
 * and to 0 when the batch is answered as td_gpu_count_batch /
 * td_gpu_search_batch would answer it and g is unlocked (on an error
 * too). Every begin, failed or not, must be followed by ends on the same
 * thread with the same reqs and n until *more is 0; the first end returns
 * begin's error if it had one. Until then reqs must stay in place and g
 * must not be used by this thread. Returns TD_OK or the error met. (td_gpu.c) */
int td_gpu_query_begin(struct td_gpu *g, int search, void *reqs, size_t n);
int td_gpu_query_end(struct td_gpu *g, void *reqs, size_t n, int *more);

/* Run fn(ctx, c) for every c < nt at once (c = 0 on the calling thread,
 * the others on threads of a pool kept between calls, one a task, or on
 * the calling thread when none can start); returns when all are done.
 * Thread-safe, and fn may call it again. (td_gpu_pool.c) */
void td_gpu_par(unsigned nt, void (*fn)(void *, unsigned), void *ctx);

/* The shards of version 5 archive a over devices devs[0..ndev) (distinct
 * ordinals): each shard resident on one of them while it fits, the others
 * served by the CPU engine. TD_OK, or an error of td_gpu_open. */
int td_gmulti_open(const td_archive *a, const struct td_gpu_opts *o, const int *devs, unsigned ndev,
		   td_gmulti **out);
void td_gmulti_close(td_gmulti *m);
/* Shards resident, shards, devices holding at least one (NULL: skip). */
void td_gmulti_residency(const td_gmulti *m, uint32_t *resident, uint32_t *units, unsigned *ndev);
/* The name of the first device holding a shard, or "cpu fallback". */
const char *td_gmulti_name(const td_gmulti *m);
/* The batch calls over the shards: contracts of td_gpu_*_batch. */
int td_gmulti_extract(td_gmulti *m, td_extract_req *reqs, size_t n);
int td_gmulti_count(td_gmulti *m, td_count_req *reqs, size_t n);
int td_gmulti_search(td_gmulti *m, td_search_req *reqs, size_t n);
/* Shards, and shard i's handle (NULL: served by the CPU engine). */
uint32_t td_gmulti_units(const td_gmulti *m);
struct td_gpu *td_gmulti_handle(td_gmulti *m, uint32_t i);

/* Where a handle's count and search batches spend their time, summed over
 * batches (kept only while $TD_GPU_PHASES is set, read by td_gmulti_close's
 * report): seconds on the host packing the requests into parts, waiting
 * for the upload + kernels + download of the counts (host wall), the
 * device's own time for them (CUDA events, the longest stream), search's
 * fill rounds (host wall), turning parts back into answers, and the CPU
 * engine's share (nrest requests). kind 0: count, 1: search. */
typedef struct td_gphase {
	double pack, wait, dev, fill, unpack, rest;
	uint64_t batches, reqs, parts, nrest;
} td_gphase;
/* Whether $TD_GPU_PHASES is set (read once). */
int td_gpu_phases_on(void);
/* Handle g's sums for kind k (0 count, 1 search). */
void td_gpu_phases_get(const struct td_gpu *g, int k, td_gphase *out);

/* $TD_GPU_TRACE: handle g's last count or search batch: when its packing
 * began, its size pass ended, its packing ended, its CPU share began and
 * ended, its streams were synced, its answers were unpacked (td_now). */
void td_gpu_qtrace(const struct td_gpu *g, double out[7]);

/* Monotonic seconds, for open and link timings. */
static inline double td_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#ifdef __cplusplus
}
#endif
#endif
