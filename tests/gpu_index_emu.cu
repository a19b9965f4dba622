/* gpu_index_emu: the GPU index builder's own code (kernels and host steps) run on the host, against the CPU builder; needs no GPU. */
/*
 * Usage: gpu_index_emu [DIR...]
 * gpu/td_gpu_index.cu is compiled here with TD_GPU_EMU: every kernel
 * functor runs in a host loop, scans are sequential, device memory is host
 * memory (gpu/td_gpu_dev.cuh), and everything else - the level-by-level
 * launches, the pending check, the prefix sums, the sample look-ups - is the
 * builder's own code. Archives built through it must equal those of the CPU
 * builder section by section (gpu_index_check.h), and a format 5 archive
 * whose 4 shard threads share it through td_gpu_build_indexes_shared must
 * equal the CPU-built one byte for byte. Exit 0 when all match.
 */
#define TD_GPU_EMU 1
#include "td_gpu_index.cu"
/* the shared builder (one GPU build at a time, the other shard threads on
 * the CPU) over the emulated builder, as `tadoc compress -j N` uses it */
#include "td_gpu_wopts.c"

#include "gpu_index_check.h"

extern "C" int td_gpu_available(void)
{
	return 1; /* the emulated device */
}

/* td_gpu_wopts.c's grammar rounds are not under test here (gpu_grammar_emu): declined */
extern "C" int td_gpu_grammar_rounds(void *, uint32_t *, uint64_t *, uint32_t, unsigned, td_progress_fn, void *,
				     uint32_t **pairs, uint64_t *nrules)
{
	*pairs = NULL;
	*nrules = 0;
	return TD_ENOGPU;
}

extern "C" void td_gpu_grammar_release(void)
{
}

int main(int argc, char **argv)
{
	char dir[] = "/tmp/td_gidx_emuXXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	int bad = gic_run(td_gpu_build_indexes, NULL, dir, argv + 1, argc - 1);
	bad = gic_run_sharded(td_gpu_build_indexes_shared, NULL, dir); /* counts are cumulative */
	uint64_t on_gpu = 0, on_cpu = 0;
	td_gpu_build_counts(&on_gpu, &on_cpu);
	printf("format 5 shards: %llu index builds on the emulated GPU, %llu on CPU threads\n",
	       (unsigned long long)on_gpu, (unsigned long long)on_cpu);
	if (on_gpu == 0) {
		fprintf(stderr, "gpu_index_emu: no shard's indexes went through the GPU builder\n");
		bad++;
	}
	rmdir(dir);
	printf("gpu_index_emu: %s\n", bad ? "DIFFER" : "all identical");
	return bad ? 1 : 0;
}
