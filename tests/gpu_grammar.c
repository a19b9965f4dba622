/* gpu_grammar: grammars and archives whose rounds ran on the GPU equal the CPU-built ones, byte for byte. */
/*
 * Usage: gpu_grammar [DIR...]   (also $TD_GPU_CORPORA, ':'-separated)
 * The cases of gpu_grammar_check.h through td_gpu_grammar_rounds on device
 * 0 in strict mode (a decline would be an error here), then a format 5
 * archive of small shards built on 4 threads through
 * td_gpu_grammar_rounds_shared (at least one shard's rounds on the GPU).
 * Exits 77 with a "no GPU" line when no CUDA device is usable.
 */
#include "gpu_grammar_check.h"
#include "gpu_test_start.h"
#include "td_gpu.h"

int main(int argc, char **argv)
{
	gpu_test_start st;
	char dir[] = "/tmp/td_ggrXXXXXX";
	int rc = gpu_test_begin("gpu_grammar", argc, argv, &st, dir);
	if (rc >= 0)
		return rc;
	char **dirs = st.dirs;
	int nd = st.nd;
	td_gpu_run c = {.device = 0, .strict = 1, .ran_on_gpu = 0};
	ggc_sequences(td_gpu_grammar_rounds, &c);
	int bad = ggc_archives(td_gpu_grammar_rounds, &c, td_gpu_grammar_rounds_shared, dir, dirs, nd);
	if (!c.ran_on_gpu) {
		fprintf(stderr, "gpu_grammar: the last build did not run on the GPU\n");
		bad++;
	}
	uint64_t on_gpu = 0, on_cpu = 0;
	td_gpu_grammar_counts(&on_gpu, &on_cpu);
	printf("format 5 shards: %llu grammars on the GPU, %llu on CPU threads\n", (unsigned long long)on_gpu,
	       (unsigned long long)on_cpu);
	if (on_gpu == 0) {
		fprintf(stderr, "gpu_grammar: no shard's grammar rounds ran on the GPU\n");
		bad++;
	}
	rmdir(dir);
	free(st.env);
	printf("gpu_grammar: %s\n", bad ? "DIFFER" : "all identical");
	return bad ? 1 : 0;
}
