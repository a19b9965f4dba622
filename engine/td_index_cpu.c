/* td_index_cpu: the CPU index builder (rule lengths, samples, offsets, word counts) over a laid-out grammar. */
#include "td_index.h"

#include <stdlib.h>
#include <string.h>

#include "td_err.h"

int td_index_build_cpu(void *ctx, const td_index_in *in, td_index_out *out)
{
	(void)ctx;
	const uint64_t T = in->nterm, W2 = 2 * in->nwords;
	const uint32_t R = in->nrules;
	const uint64_t step = UINT64_C(1) << in->sample_shift;
	uint64_t *rfirst = malloc(((uint64_t)R + 1) * sizeof *rfirst);
	uint32_t *rn = malloc(((uint64_t)R + 1) * sizeof *rn);
	uint64_t *wc = malloc(((uint64_t)R + 1) * sizeof *wc);
	uint64_t *freq = calloc((uint64_t)R + 1, sizeof *freq);
	if (!rfirst || !rn || !wc || !freq) {
		free(rfirst);
		free(rn);
		free(wc);
		free(freq);
		return td_fail(TD_ENOMEM, "out of memory while building the indexes");
	}
	/* right-hand side of every rule, from the groups */
	for (uint64_t g = 0; g < in->ngroups; g++) {
		const td_disk_group *gr = &in->groups[g];
		uint32_t end = g + 1 < in->ngroups ? in->groups[g + 1].first_rule : R;
		for (uint32_t r = gr->first_rule; r < end; r++) {
			rfirst[r] = gr->first_sym + (uint64_t)(r - gr->first_rule) * gr->len;
			rn[r] = gr->len;
		}
	}
	/* 1. bottom up: lengths and word counts */
	for (uint32_t i = 0; i < R; i++) {
		uint32_t r = in->topo[i];
		uint64_t len = 0, words = 0;
		const uint32_t *rhs = in->rule_syms + rfirst[r];
		for (uint32_t j = 0; j < rn[r]; j++) {
			uint32_t s = rhs[j];
			if (s < T) {
				len += in->term_len[s];
				words += s < W2;
			} else {
				len += out->rule_len[s - T];
				words += wc[s - T];
			}
		}
		out->rule_len[r] = len;
		wc[r] = words;
	}
	/* 2. offset samples of long rules */
	for (uint64_t g = 0; g < in->ngroups; g++) {
		const td_disk_group *gr = &in->groups[g];
		if (gr->first_sample == UINT64_MAX)
			continue;
		uint32_t end = g + 1 < in->ngroups ? in->groups[g + 1].first_rule : R;
		uint64_t at = gr->first_sample;
		for (uint32_t r = gr->first_rule; r < end; r++) {
			const uint32_t *rhs = in->rule_syms + rfirst[r];
			uint64_t cum = 0;
			for (uint32_t j = 0; j < gr->len; j++) {
				if ((j & (step - 1)) == 0)
					out->rule_samples[at++] = cum;
				uint32_t s = rhs[j];
				cum += s < T ? in->term_len[s] : out->rule_len[s - T];
			}
		}
	}
	/* 3. the root sequence: offsets, samples, words per file, and how
	 * often files use each rule and word directly */
	memset(out->word_freq, 0, in->nwords * sizeof *out->word_freq);
	uint64_t gpos = 0;
	for (uint32_t e = 0; e < in->nentries; e++) {
		out->e_gstart[e] = gpos;
		int file = in->e_isfile[e];
		uint64_t words = 0;
		for (uint64_t k = in->e_root[e]; k < in->e_root[e + 1]; k++) {
			uint32_t s = in->root[k];
			if ((k & (step - 1)) == 0)
				out->root_samples[k >> in->sample_shift] = gpos;
			if (s < T) {
				gpos += in->term_len[s];
				if (s < W2) {
					words++;
					if (file)
						out->word_freq[s >> 1]++;
				}
			} else {
				gpos += out->rule_len[s - T];
				words += wc[s - T];
				freq[s - T] += file;
			}
		}
		out->e_nwords[e] = file ? words + in->e_longwords[e] : 0;
	}
	out->e_gstart[in->nentries] = gpos;
	if ((in->nroot & (step - 1)) == 0)
		out->root_samples[in->nroot >> in->sample_shift] = gpos;
	/* 4. top down: a rule's uses pass on to what it names */
	for (uint32_t i = R; i-- > 0;) {
		uint32_t r = in->topo[i];
		uint64_t f = freq[r];
		if (!f)
			continue;
		const uint32_t *rhs = in->rule_syms + rfirst[r];
		for (uint32_t j = 0; j < rn[r]; j++) {
			uint32_t s = rhs[j];
			if (s < W2)
				out->word_freq[s >> 1] += f;
			else if (s >= T)
				freq[s - T] += f;
		}
	}
	free(rfirst);
	free(rn);
	free(wc);
	free(freq);
	return TD_OK;
}
