/* gpu_digram: digram counts made on the GPU equal a plain CPU count, key for key and count for count. */
/*
 * The cases of gpu_digram_check.h through td_gpu_digram_count on device 0.
 * Exits 77 with a "no GPU" line when no CUDA device is usable.
 */
#include "gpu_digram_check.h"
#include "td_gpu.h"

int main(void)
{
	if (!td_gpu_available()) {
		printf("no GPU: gpu_digram skipped (no usable CUDA device, or built without CUDA)\n");
		return 77;
	}
	int bad = gdc_run(td_gpu_digram_count);
	printf("gpu_digram: %s\n", bad ? "DIFFER" : "all identical");
	return bad ? 1 : 0;
}
