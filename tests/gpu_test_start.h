/* gpu_test_start: the start-up gpu_index and gpu_grammar share: the "no GPU" skip, the corpus directories, a scratch directory. */
#ifndef TD_GPU_TEST_START_H
#define TD_GPU_TEST_START_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td_gpu.h"

#define GPU_TEST_MAXDIRS 64

/* The run's inputs: directories from argv[1..] and $TD_GPU_CORPORA
 * (':'-separated; env holds its copy), a scratch directory made from
 * dir's XXXXXX template. */
typedef struct gpu_test_start {
	char *dirs[GPU_TEST_MAXDIRS];
	int nd;
	char *env;
} gpu_test_start;

/* Skip (status 77, a "no GPU" line naming `name`) without a usable device;
 * else fill s and make the scratch directory `dir` (a mkdtemp template).
 * Returns -1 to go on, or the exit status. Free s->env when done. */
static inline int gpu_test_begin(const char *name, int argc, char **argv, gpu_test_start *s, char *dir)
{
	if (!td_gpu_available()) {
		printf("no GPU: %s skipped (no usable CUDA device, or built without CUDA)\n", name);
		return 77;
	}
	s->nd = 0;
	for (int i = 1; i < argc && s->nd < GPU_TEST_MAXDIRS; i++)
		s->dirs[s->nd++] = argv[i];
	s->env = getenv("TD_GPU_CORPORA") ? strdup(getenv("TD_GPU_CORPORA")) : NULL;
	for (char *t = s->env ? strtok(s->env, ":") : NULL; t && s->nd < GPU_TEST_MAXDIRS; t = strtok(NULL, ":"))
		s->dirs[s->nd++] = t;
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		free(s->env);
		return 1;
	}
	return -1;
}

#endif
