/* td_grammar: build one bounded-depth pair grammar (Re-Pair family) over token ids. */
#ifndef TD_GRAMMAR_H
#define TD_GRAMMAR_H

#include <stdint.h>

#include "td_writer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TD_SPLIT UINT32_MAX /* ends every file in the input sequence */

/* A grammar in creation order: rule k has id nterm + k and its right-hand
 * side only names terminals (< nterm) and older rules, so a pass in id order
 * is a topological pass. Root segments are per file, in input order. */
typedef struct td_grammar {
	uint32_t nterm;
	uint32_t nrules;
	uint64_t *rule_off;   /* nrules + 1 offsets into rule_syms */
	uint32_t *rule_syms;
	uint32_t *root;       /* all files' root symbols, no splitters */
	uint64_t *file_root;  /* nfiles + 1 offsets into root */
	uint64_t nfiles;
	uint32_t depth;       /* deepest nesting, 0 when there are no rules */
} td_grammar;

/* Build a grammar from seq[0..n): terminal ids < nterm, each file's tokens
 * followed by one TD_SPLIT, so no rule crosses a file. Each round replaces
 * the digrams that occur at least max(2, most frequent / 2) times (preferring
 * the more frequent of two overlapping digrams) by new rules, never nesting
 * deeper than `max_depth`; rounds go on until no digram repeats. Rules then
 * used once are inlined and unused ones dropped. `seq` is consumed (used as scratch and freed by the caller).
 * Returns TD_OK or TD_ENOMEM / TD_ELIMIT (more than 2^32 - nterm symbols). */
int td_grammar_build(uint32_t *seq, uint64_t n, uint32_t nterm, unsigned max_depth,
		     td_progress_fn progress, void *ctx, td_grammar *g);

/* Cores a build may borrow for a while (td_grammar_build_mt): take(ctx,
 * want) returns how many threads (0..want) may run beside the caller now;
 * give(ctx, k) returns k of them. A building thread about to wait (on the
 * GPU: td_writer) may also lend its own core: give(ctx, 1), then
 * reclaim(ctx, 1) when it runs again, which takes it back at once even
 * where others hold every core for the moment (may be NULL: then it does
 * not lend). All are called from the building thread only, must be
 * thread-safe against other builds sharing ctx, and never block for
 * long. */
typedef struct td_grammar_cores {
	unsigned (*take)(void *ctx, unsigned want);
	void (*give)(void *ctx, unsigned k);
	void *ctx;
	void (*reclaim)(void *ctx, unsigned k);
} td_grammar_cores;

/* td_grammar_build, with the table work of each round (digram counts, the
 * pick of the digrams that get a rule) spread over threads borrowed from
 * `cores` (NULL: none). The grammar is the same whatever the threads. */
int td_grammar_build_mt(uint32_t *seq, uint64_t n, uint32_t nterm, unsigned max_depth, td_progress_fn progress,
			void *ctx, const td_grammar_cores *cores, td_grammar *g);

/* The finishing steps of td_grammar_build, for a builder that ran the
 * rounds itself (td_writer_opts.grammar_rounds): seq[0..n) is the sequence
 * after the last round, pairs[2k], pairs[2k + 1] the right-hand side of
 * round rule k (id nterm + k, in creation order). Rules used once are
 * inlined, unused ones dropped, the rest renumbered in creation order;
 * fills *g as td_grammar_build does. Inputs are only read. Returns TD_OK
 * or TD_ENOMEM (then *g is zeroed). */
int td_grammar_finish(const uint32_t *seq, uint64_t n, uint32_t nterm, const uint32_t *pairs, uint64_t nrules,
		      td_grammar *g);

/* Free g's arrays and zero *g (g itself is the caller's). */
void td_grammar_free(td_grammar *g);

#ifdef __cplusplus
}
#endif
#endif
