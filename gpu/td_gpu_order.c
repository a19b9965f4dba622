/* td_gpu_order: the order td_search reports files in, as arrays the kernels index. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "td_err.h"
#include "td_gpu_int.h"

/* Regular files in td_search's order (depth-first from the root, children
 * in entry order; symlinks and unreadable directories hold nothing) and,
 * per entry, the range of that list under it. files has nentries slots,
 * sub 2 * nentries. */
int td_gpu_file_order(const td_archive *a, uint32_t nent, uint32_t *files, uint32_t *sub)
{
	typedef struct {
		uint32_t e, next, end;
	} frame;
	frame *st = malloc(((size_t)nent + 1) * sizeof *st);
	if (!st)
		return td_fail(TD_ENOMEM, "gpu: file order");
	memset(sub, 0, 2 * (size_t)nent * sizeof *sub);
	uint32_t nf = 0, depth = 0;
	uint32_t e = TD_ROOT;
	for (;;) {
		/* visit e */
		td_stat stt;
		td_entry first;
		uint32_t cnt;
		sub[2 * e] = nf;
		if (td_archive_stat(a, e, &stt) == TD_OK && S_ISREG(stt.mode)) {
			if (nf == nent) { /* an entry reached twice: broken tree */
				free(st);
				return td_fail(TD_ECORRUPT, "entry %u: reached twice in the tree", e);
			}
			files[nf++] = e;
			sub[2 * e + 1] = nf;
		} else if (depth < nent && td_archive_children(a, e, &first, &cnt) == TD_OK) {
			st[depth].e = e;
			st[depth].next = first;
			st[depth].end = first + cnt;
			depth++;
		} else {
			sub[2 * e + 1] = nf;
		}
		/* next entry to visit */
		e = UINT32_MAX;
		while (depth) {
			frame *f = &st[depth - 1];
			if (f->next < f->end) {
				e = f->next++;
				break;
			}
			sub[2 * f->e + 1] = nf;
			depth--;
		}
		if (e == UINT32_MAX)
			break;
	}
	free(st);
	return TD_OK;
}
