/* gpu_digram_emu: the GPU digram counter's own code (kernels and host steps) run on the host, against a plain CPU count; needs no GPU. */
/*
 * gpu/td_gpu_digram.cu compiled with TD_GPU_EMU (gpu/td_gpu_dev.cuh: every
 * kernel functor in a host loop, sequential scans and sorts, host memory as
 * device memory). Exit 0 when every count equals the reference
 * (gpu_digram_check.h).
 */
#define TD_GPU_EMU 1
#include "td_gpu_digram.cu"

#include "gpu_digram_check.h"

int main(void)
{
	int bad = gdc_run(td_gpu_digram_count);
	printf("gpu_digram_emu: %s\n", bad ? "DIFFER" : "all identical");
	return bad ? 1 : 0;
}
