/* td_index: the indexes an archive derives from its grammar, and the builder hook that computes them. */
#ifndef TD_INDEX_H
#define TD_INDEX_H

#include <stdint.h>

#include "td_format.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * td_writer_finish() lays out the grammar (final symbol ids, RULE_GROUPS,
 * RULE_SYMS, ROOT_SYMS in entry order, E_ROOT) and then asks an index
 * builder for everything that is a pure function of that layout:
 *   RULE_LEN      expanded byte length of every rule;
 *   RULE_SAMPLES  offset samples of the long rules (td_disk_group);
 *   ROOT_SAMPLES  corpus offset of root element k << sample_shift, then the
 *                 corpus size (nroot >> sample_shift) + 1 values in all;
 *   E_GSTART      corpus offset where each entry's text starts (+ the end);
 *   WORD_FREQ     occurrences of each word in regular files' texts;
 *   E_NWORDS      words of each regular file (0 for other entries).
 * The CPU builder (td_index_build_cpu) walks the rules in topological order;
 * the GPU builder (gpu/td_gpu.h, td_gpu_build_indexes) goes level by level.
 * Both must give identical arrays: the archive bytes do not depend on which
 * one ran.
 */

/* What a builder reads. All arrays are borrowed for the call. */
typedef struct td_index_in {
	uint64_t nwords;             /* W: symbols < 2W are words (word s/2) */
	uint64_t nterm;              /* T = 2W + S terminals */
	const uint16_t *term_len;    /* T byte lengths of the terminals */
	uint32_t nrules;             /* R: rule r is symbol T + r */
	uint64_t nrulesyms;
	const uint32_t *rule_syms;   /* right-hand sides, laid out by `groups` */
	uint64_t ngroups;
	const td_disk_group *groups; /* first_sample already assigned */
	uint64_t nrulesamples;       /* values RULE_SAMPLES will hold */
	const uint32_t *topo;        /* the R rules, each after the rules it names */
	uint32_t depth;              /* deepest rule nesting (a hint; 0 = none) */
	uint64_t nroot;
	const uint32_t *root;        /* root symbols of all entries, entry order */
	uint32_t nentries;
	const uint64_t *e_root;      /* nentries + 1: entry i owns root[e_root[i], e_root[i+1]) */
	const uint8_t *e_isfile;     /* 1 for regular files (their words count) */
	const uint64_t *e_longwords; /* words longer than TD_MAXTOK per entry: stored
	                                as pieces, so not visible as word symbols */
	unsigned sample_shift;
} td_index_in;

/* What a builder fills (arrays allocated by the caller, sizes as above). */
typedef struct td_index_out {
	uint64_t *rule_len;          /* nrules */
	uint64_t *rule_samples;      /* nrulesamples */
	uint64_t *root_samples;      /* (nroot >> sample_shift) + 1 */
	uint64_t *e_gstart;          /* nentries + 1 */
	uint64_t *word_freq;         /* nwords */
	uint64_t *e_nwords;          /* nentries */
} td_index_out;

/* A builder: fills *out from *in. Returns TD_OK, TD_ENOMEM, or another
 * td_err with a detail (a GPU builder that cannot run should fall back to
 * td_index_build_cpu itself rather than fail). `ctx` is the builder's own. */
typedef int (*td_index_fn)(void *ctx, const td_index_in *in, td_index_out *out);

/* The CPU builder: one pass over the rules in topological order (lengths,
 * word counts per rule), one in reverse (rule frequencies in files, hence
 * WORD_FREQ), one over the root sequence (offsets, samples, E_NWORDS).
 * ctx is unused. TD_OK or TD_ENOMEM. Thread-safe (no shared state). */
int td_index_build_cpu(void *ctx, const td_index_in *in, td_index_out *out);

/* Number of ROOT_SAMPLES values for `nroot` root symbols. */
static inline uint64_t td_index_nroot_samples(uint64_t nroot, unsigned shift)
{
	return (nroot >> shift) + 1;
}

#ifdef __cplusplus
}
#endif
#endif
