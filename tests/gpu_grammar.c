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
#include "td_gpu.h"

int main(int argc, char **argv)
{
	if (!td_gpu_available()) {
		printf("no GPU: gpu_grammar skipped (no usable CUDA device, or built without CUDA)\n");
		return 77;
	}
	char *dirs[64];
	int nd = 0;
	for (int i = 1; i < argc && nd < 64; i++)
		dirs[nd++] = argv[i];
	char *env = getenv("TD_GPU_CORPORA") ? strdup(getenv("TD_GPU_CORPORA")) : NULL;
	for (char *t = env ? strtok(env, ":") : NULL; t && nd < 64; t = strtok(NULL, ":"))
		dirs[nd++] = t;
	char dir[] = "/tmp/td_ggrXXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
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
	free(env);
	printf("gpu_grammar: %s\n", bad ? "DIFFER" : "all identical");
	return bad ? 1 : 0;
}
