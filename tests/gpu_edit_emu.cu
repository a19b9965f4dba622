/* gpu_edit_emu: the GPU edit-batch resolver's own code (kernels and host steps) run on the host, against the CPU resolver and the model; needs no GPU. */
/*
 * Usage: gpu_edit_emu [MAXBATCH]   (default 100000)
 * gpu/td_gpu_edit.cu compiled with TD_GPU_EMU (gpu/td_gpu_dev.cuh): kernel
 * functors in host loops, radix sorts as stable sorts on the same key bits,
 * sequential scans. Exit 0 when every batch matched.
 */
#define TD_GPU_EMU 1
#include "td_gpu_edit.cu"

#include "gpu_edit_check.h"

int main(int argc, char **argv)
{
	size_t maxbatch = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 100000;
	int bad = gec_run(td_gpu_edit_resolve, NULL, maxbatch ? maxbatch : 1);
	printf("gpu_edit_emu: %s\n", bad ? "DIFFER" : "all equal");
	return bad ? 1 : 0;
}
