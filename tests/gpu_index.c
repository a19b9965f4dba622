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
#include "td_gpu.h"

int main(int argc, char **argv)
{
	if (!td_gpu_available()) {
		printf("no GPU: gpu_index skipped (no usable CUDA device, or built without CUDA)\n");
		return 77;
	}
	char *dirs[64];
	int nd = 0;
	for (int i = 1; i < argc && nd < 64; i++)
		dirs[nd++] = argv[i];
	char *env = getenv("TD_GPU_CORPORA") ? strdup(getenv("TD_GPU_CORPORA")) : NULL;
	for (char *t = env ? strtok(env, ":") : NULL; t && nd < 64; t = strtok(NULL, ":"))
		dirs[nd++] = t;
	char dir[] = "/tmp/td_gidxXXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
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
	free(env);
	printf("gpu_index: %s\n", bad ? "DIFFER" : "all identical");
	return bad ? 1 : 0;
}
