/* gpu_edit: insert/append batches resolved on the GPU equal the CPU resolver's records and the byte-array model. */
/*
 * Usage: gpu_edit [MAXBATCH]   (default 100000; $TD_GPU_MAXBATCH also caps)
 * Every meaning (in sequence, in batch, mixed), batch sizes 1 to 100k over
 * 40 files and over one file; td_gpu_edit_resolve runs strict (no CPU
 * fallback). Exits 77 with a "no GPU" line when no CUDA device is usable.
 */
#include "gpu_edit_check.h"
#include "td_gpu.h"

int main(int argc, char **argv)
{
	if (!td_gpu_available()) {
		printf("no GPU: gpu_edit skipped (no usable CUDA device, or built without CUDA)\n");
		return 77;
	}
	size_t maxbatch = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 100000;
	const char *cap = getenv("TD_GPU_MAXBATCH");
	if (cap && strtoull(cap, NULL, 10) && strtoull(cap, NULL, 10) < maxbatch)
		maxbatch = (size_t)strtoull(cap, NULL, 10);
	td_gpu_run c = {.device = 0, .strict = 1, .ran_on_gpu = 0};
	int bad = gec_run(td_gpu_edit_resolve, &c, maxbatch ? maxbatch : 1);
	if (!c.ran_on_gpu) {
		fprintf(stderr, "gpu_edit: the last batch did not run on the GPU\n");
		bad++;
	}
	printf("gpu_edit: %s\n", bad ? "DIFFER" : "all equal");
	return bad ? 1 : 0;
}
