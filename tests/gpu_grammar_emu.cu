/* gpu_grammar_emu: the GPU grammar rounds' own code (kernels and host steps) run on the host, against the CPU grammar builder; needs no GPU. */
/*
 * Usage: gpu_grammar_emu [DIR...]   (also $TD_GPU_CORPORA, ':'-separated)
 * gpu/td_gpu_grammar.cu compiled with TD_GPU_EMU (gpu/td_gpu_dev.cuh: every
 * kernel functor in a host loop, sequential scans and sorts, host memory as
 * device memory). Grammars and archives must equal the CPU builder's
 * (gpu_grammar_check.h); the format 5 build shares the emulated rounds
 * through td_gpu_grammar_rounds_shared. Exit 0 when all match.
 */
#define TD_GPU_EMU 1
#include "td_gpu_grammar.cu"
/* the shared rounds (one GPU build at a time) over the emulated ones */
#include "td_gpu_wopts.c"

#include "gpu_grammar_check.h"

extern "C" int td_gpu_available(void)
{
	return 1; /* the emulated device */
}

/* td_gpu_wopts.c's index builder is not under test here: the CPU's */
extern "C" int td_gpu_build_indexes(void *ctx, const td_index_in *in, td_index_out *out)
{
	(void)ctx;
	return td_index_build_cpu(NULL, in, out);
}

int main(int argc, char **argv)
{
	char *dirs[64];
	int nd = 0;
	for (int i = 1; i < argc && nd < 64; i++)
		dirs[nd++] = argv[i];
	char *env = getenv("TD_GPU_CORPORA") ? strdup(getenv("TD_GPU_CORPORA")) : NULL;
	for (char *t = env ? strtok(env, ":") : NULL; t && nd < 64; t = strtok(NULL, ":"))
		dirs[nd++] = t;
	char dir[] = "/tmp/td_ggr_emuXXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	td_gpu_run c = {0, 1, 0};
	ggc_sequences(td_gpu_grammar_rounds, &c);
	int bad = ggc_archives(td_gpu_grammar_rounds, &c, td_gpu_grammar_rounds_shared, dir, dirs, nd);
	uint64_t on_gpu = 0, on_cpu = 0;
	td_gpu_grammar_counts(&on_gpu, &on_cpu);
	printf("format 5 shards: %llu grammars on the emulated GPU, %llu on CPU threads\n", (unsigned long long)on_gpu,
	       (unsigned long long)on_cpu);
	if (on_gpu == 0) {
		fprintf(stderr, "gpu_grammar_emu: no shard's grammar went through the GPU rounds\n");
		bad++;
	}
	rmdir(dir);
	free(env);
	printf("gpu_grammar_emu: %s\n", bad ? "DIFFER" : "all identical");
	return bad ? 1 : 0;
}
