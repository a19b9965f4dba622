/* gpu_edit: insert/append batches resolved on the GPU equal the CPU resolver's records and the byte-array model. */
/*
 * Usage: gpu_edit [MAXBATCH]   (default 100000; $TD_GPU_MAXBATCH also caps)
 * Every meaning (in sequence, in batch, mixed), batch sizes 1 to 100k over
 * 40 files and over one file; td_gpu_edit_resolve runs strict (no CPU
 * fallback). Exits 77 with a "no GPU" line when no CUDA device is usable.
 */
#include "gpu_edit_check.h"
#include "td_gpu.h"

/* Valid batches resolved, and those of them the GPU did not run. (A batch
 * with a bad offset is redone by the CPU on purpose, so that the error names
 * the same record: it does not count.) */
static size_t g_ok, g_on_cpu;

static int resolve_counted(void *ctx, const td_edit *ed, const td_edit_rec *recs, size_t n, int mode,
			   td_edit_rec *out, uint32_t *perm)
{
	int err = td_gpu_edit_resolve(ctx, ed, recs, n, mode, out, perm);
	if (err == TD_OK) {
		g_ok++;
		g_on_cpu += !((td_gpu_run *)ctx)->ran_on_gpu;
	}
	return err;
}

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
	int bad = gec_run(resolve_counted, &c, maxbatch ? maxbatch : 1);
	if (g_on_cpu || !g_ok) {
		fprintf(stderr, "gpu_edit: %zu of %zu valid batches did not run on the GPU\n", g_on_cpu, g_ok);
		bad++;
	}
	printf("gpu_edit: %s\n", bad ? "DIFFER" : "all equal");
	return bad ? 1 : 0;
}
