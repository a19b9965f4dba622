/* td_gpu_wopts: hand the GPU index builder to a writer when a GPU is present. */
#include "td_gpu.h"

int td_gpu_writer_opts(td_writer_opts *opts)
{
	if (!opts || !td_gpu_available())
		return 0;
	opts->index_build = td_gpu_build_indexes;
	opts->index_ctx = NULL;
	return 1;
}
