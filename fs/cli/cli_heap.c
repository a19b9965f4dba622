/* cli_heap: a one-shot query's heap on transparent huge pages (fs/README.md, "Start-up"). */
#include "cli.h"

#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

enum { HUGE = 2 << 20 };

static void *volatile below; /* the heap below the first huge block, kept to the end */

void td_cli_heap_huge(void)
{
#if defined(MADV_HUGEPAGE) && defined(M_TOP_PAD) && !defined(__SANITIZE_ADDRESS__)
	/* Big arrays from the heap, not a fresh mmap each (each page of which
	 * faults alone); the heap grown 2 MiB at a time and never trimmed. */
	if (!mallopt(M_MMAP_THRESHOLD, 32 << 20) || !mallopt(M_TOP_PAD, HUGE) || !mallopt(M_TRIM_THRESHOLD, 64 << 20))
		return;
	/* grow the heap by 6 MiB (untouched: a block from the top is not
	 * cleared) and mark its aligned 2 MiB blocks: a fault each, not 512 */
	char *p = malloc(3 * HUGE);
	if (!p)
		return;
	uintptr_t lo = ((uintptr_t)p + HUGE - 1) & ~(uintptr_t)(HUGE - 1);
	uintptr_t hi = ((uintptr_t)p + 3 * HUGE) & ~(uintptr_t)(HUGE - 1);
	if (hi <= lo || madvise((void *)lo, hi - lo, MADV_HUGEPAGE)) {
		free(p);
		return;
	}
	/* and start the next blocks there: the bytes below it stay a block of
	 * the process, never touched past its header */
	uintptr_t at = (uintptr_t)p;
	free(p);
	if (lo - at > 64)
		below = malloc(lo - at - 32);
	td_cli_out_on_heap();
#endif
}
