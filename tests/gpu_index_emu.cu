/* gpu_index_emu: the GPU index builder's own code (kernels and host steps) run on the host, against the CPU builder; needs no GPU. */
/*
 * Usage: gpu_index_emu [DIR...]
 * gpu/td_gpu_index.cu is compiled here with TD_GPU_EMU: every kernel
 * functor runs in a host loop, scans are sequential, device memory is host
 * memory (gpu/td_gpu_dev.cuh), and everything else - the level-by-level
 * launches, the pending check, the prefix sums, the sample look-ups - is the
 * builder's own code. Archives built through it must equal those of the CPU
 * builder section by section (gpu_index_check.h). Exit 0 when all match.
 */
#define TD_GPU_EMU 1
#include "td_gpu_index.cu"

#include "gpu_index_check.h"

int main(int argc, char **argv)
{
	char dir[] = "/tmp/td_gidx_emuXXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	int bad = gic_run(td_gpu_build_indexes, NULL, dir, argv + 1, argc - 1);
	rmdir(dir);
	printf("gpu_index_emu: %s\n", bad ? "DIFFER" : "all identical");
	return bad ? 1 : 0;
}
