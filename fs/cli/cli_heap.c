/* cli_heap: a one-shot query's heap, on transparent huge pages where a page fault is dear (fs/README.md, "Start-up"). */
#include "cli.h"

#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

enum { HUGE = 2 << 20, PLAIN = 1 << 20 };

static void *volatile below; /* the heap below the first huge block, kept to the end */

#if defined(MADV_HUGEPAGE) && defined(M_TOP_PAD) && !defined(__SANITIZE_ADDRESS__)
/* The cheaper of two first touches of fresh heap pages, in ns (what a
 * fault costs here: 1-4 us on bare metal or a plain VM, 10-20 us where
 * the hypervisor takes each one), or -1; the pages stay the heap's. */
static long fault_ns(void)
{
	char *p = malloc(3 * 4096);
	if (!p)
		return -1;
	volatile char *q = (volatile char *)(((uintptr_t)p + 4095) & ~(uintptr_t)4095);
	struct timespec t[3];
	clock_gettime(CLOCK_MONOTONIC, &t[0]);
	q[0] = 1;
	clock_gettime(CLOCK_MONOTONIC, &t[1]);
	q[4096] = 1;
	clock_gettime(CLOCK_MONOTONIC, &t[2]);
	free(p);
	long d[2];
	for (int i = 0; i < 2; i++)
		d[i] = (t[i + 1].tv_sec - t[i].tv_sec) * 1000000000L + (t[i + 1].tv_nsec - t[i].tv_nsec);
	return d[0] < d[1] ? d[0] : d[1];
}

#endif

void td_cli_heap_huge(void)
{
#if defined(MADV_HUGEPAGE) && defined(M_TOP_PAD) && !defined(__SANITIZE_ADDRESS__)
	/* Big arrays from the heap, not a fresh mmap each (each page of which
	 * faults alone), and freed memory kept for the next ones. */
	if (!mallopt(M_MMAP_THRESHOLD, 32 << 20) || !mallopt(M_TRIM_THRESHOLD, 64 << 20))
		return;
	/* Where a fault is dear (over 6 us: a VM whose hypervisor takes each
	 * one), the whole heap on huge pages; where it is cheap, only past the
	 * heap's first MiB: a small query's few hundred KB of fresh heap in
	 * 4 KiB pages (50-100 faults, less than clearing one 2 MiB page), a
	 * large one's bulk in huge pages. */
	const int dear = fault_ns() >= 6000;
	const size_t plain = dear ? 0 : PLAIN;
	if (!mallopt(M_TOP_PAD, HUGE))
		return;
	/* grow the heap by 6 MiB past that (untouched: a block from the top is
	 * not cleared) and mark its aligned 2 MiB blocks: a fault each, not
	 * 512 */
	char *p = malloc(plain + 3 * HUGE);
	if (!p)
		return;
	uintptr_t lo = ((uintptr_t)p + plain + HUGE - 1) & ~(uintptr_t)(HUGE - 1);
	uintptr_t hi = ((uintptr_t)p + plain + 3 * HUGE) & ~(uintptr_t)(HUGE - 1);
	if (hi <= lo || madvise((void *)lo, hi - lo, MADV_HUGEPAGE)) {
		free(p);
		return;
	}
	uintptr_t at = (uintptr_t)p;
	free(p);
	if (!dear)
		return; /* the next blocks from p: plain pages, then the huge ones */
	/* the next blocks from the first huge one: the bytes below it stay a
	 * block of the process, never touched past its header */
	if (lo - at > 64)
		below = malloc(lo - at - 32);
	td_cli_out_on_heap();
#endif
}
