/* td_gpu_files: ranked files (td_files_batch) in batches: single-word hits by the GPU's search kernels, counts and ranking by the engine. */
#include <stdlib.h>
#include <string.h>

#include "td_analytics.h"
#include "td_err.h"
#include "td_gpu.h"
#include "td_gpu_int.h"

/*
 * A single word's ranked files are its td_search hits counted per file: the
 * requests the search kernels serve best (a word of at most TD_MAXTOK bytes
 * over a scope the engine's query index does not answer at once,
 * td_query_fast) go to one td_gpu_search_batch; then td_files_batch_given
 * counts each request's hits per file and ranks them on the CPU threads with
 * the engine's own code. Phrases, long words, large scopes and any request
 * whose search failed are answered by td_phrase_files in the same call, so
 * every answer (and error) is the engine's.
 */

typedef struct td_gfl {
	const uint32_t *slot;     /* request -> search request + 1, 0 = none */
	const td_search_req *s;
} td_gfl;

static int td_gfl_find(void *ctx, size_t req, const td_hits **out)
{
	const td_gfl *f = ctx;
	uint32_t k = f->slot[req];
	if (!k || f->s[k - 1].err != TD_OK)
		return TD_ENOGPU;
	*out = &f->s[k - 1].hits;
	return TD_OK;
}

int td_gpu_env_on(const char *name)
{
	const char *e = getenv(name);
	return !(e && strcmp(e, "0") == 0);
}

static int td_gfl_search(td_gpu *g, td_files_req *reqs, size_t n);

int td_gpu_files_batch(td_gpu *g, td_files_req *reqs, size_t n)
{
	if (!g || (!reqs && n) || n > UINT32_MAX - 1)
		return td_fail(TD_EINVAL, "gpu: bad batch");
	if (!td_gpu_resident(g) || !td_gpu_env_on("TD_GPU_FILES_POST"))
		return td_gfl_search(g, reqs, n);
	/* the inverted index first, the search kernels and the engine for the rest */
	size_t *rest = malloc((n + 1) * sizeof *rest), nrest = 0;
	if (!rest)
		return td_fail(TD_ENOMEM, "gpu: files batch");
	int r = td_gpost_files(g, reqs, n, rest, &nrest);
	td_files_req *sub = !r && nrest ? malloc(nrest * sizeof *sub) : NULL;
	if (!r && nrest && !sub)
		r = td_fail(TD_ENOMEM, "gpu: files batch");
	if (!r && nrest) {
		for (size_t k = 0; k < nrest; k++)
			sub[k] = reqs[rest[k]];
		r = td_gfl_search(g, sub, nrest);
		for (size_t k = 0; k < nrest; k++)
			reqs[rest[k]] = sub[k];
	}
	free(sub);
	free(rest);
	return r;
}

/* Single words by the search kernels, the rest by the engine. */
static int td_gfl_search(td_gpu *g, td_files_req *reqs, size_t n)
{
	const td_archive *a = td_gpu_archive(g);
	const unsigned threads = td_gpu_cpu_threads(g);
	if (!td_gpu_resident(g))
		return td_files_batch(a, reqs, n, threads);
	uint32_t *slot = calloc(n + 1, sizeof *slot);
	td_search_req *s = malloc((n + 1) * sizeof *s);
	if (!slot || !s) {
		free(slot);
		free(s);
		return td_fail(TD_ENOMEM, "gpu: files batch");
	}
	const uint32_t nent = td_archive_nentries(a);
	size_t ns = 0;
	for (size_t i = 0; i < n; i++) {
		const td_files_req *q = &reqs[i];
		if (q->word && q->len && q->len <= TD_MAXTOK && q->scope < nent && td_is_word(q->word, q->len) &&
		    !td_query_fast(a, q->scope)) {
			s[ns] = (td_search_req){ .word = q->word, .len = q->len, .scope = q->scope };
			slot[i] = (uint32_t)++ns;
		}
	}
	int r = ns ? td_gpu_search_batch(g, s, ns) : TD_OK;
	if (r) /* the GPU could not run the batch: all on the CPU */
		memset(slot, 0, (n + 1) * sizeof *slot);
	td_gfl f = { slot, s };
	r = td_files_batch_given(a, reqs, n, threads, td_gfl_find, &f);
	for (size_t k = 0; k < ns; k++)
		td_hits_free(&s[k].hits);
	free(slot);
	free(s);
	return r;
}
