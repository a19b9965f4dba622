/* gpu_index: archives whose indexes the GPU built equal those the CPU built, byte for byte. */
/*
 * Usage: gpu_index [DIR...]   (also $TD_GPU_CORPORA, ':'-separated)
 * Builds the adversarial corpus (gpu_index_check.h) under several sample
 * shifts and every directory given, once with the CPU index builder and
 * once with td_gpu_build_indexes in strict mode (a fallback to the CPU would
 * be an error here), and compares the archives section by section; then a
 * format 5 archive of small shards built on 4 threads through
 * td_gpu_build_indexes_shared against the CPU-built one, byte for byte
 * (at least one shard's indexes must come from the GPU). Exits 77
 * with a "no GPU" line when no CUDA device is usable.
 */
#include "gpu_index_check.h"
#include "gpu_test_start.h"
#include "td_gpu.h"

int main(int argc, char **argv)
{
	gpu_test_start st;
	char dir[] = "/tmp/td_gidxXXXXXX";
	int rc = gpu_test_begin("gpu_index", argc, argv, &st, dir);
	if (rc >= 0)
		return rc;
	char **dirs = st.dirs;
	int nd = st.nd;
	td_gpu_run c = {.device = 0, .strict = 1, .ran_on_gpu = 0};
	int bad = gic_run(td_gpu_build_indexes, &c, dir, dirs, nd);
	if (!c.ran_on_gpu) {
		fprintf(stderr, "gpu_index: the last build did not run on the GPU\n");
		bad++;
	}
	int before = gic_failures;
	bad += gic_run_sharded(td_gpu_build_indexes_shared, NULL, dir) - before; /* counts are cumulative */
	rmdir(dir);
	uint64_t on_gpu = 0, on_cpu = 0;
	td_gpu_build_counts(&on_gpu, &on_cpu);
	printf("format 5 shards: %llu index builds on the GPU, %llu on CPU threads\n", (unsigned long long)on_gpu,
	       (unsigned long long)on_cpu);
	if (on_gpu == 0) {
		fprintf(stderr, "gpu_index: no shard's indexes were built on the GPU\n");
		bad++;
	}
	free(st.env);
	printf("gpu_index: %s\n", bad ? "DIFFER" : "all identical");
	return bad ? 1 : 0;
}
