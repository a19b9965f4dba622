/* td_mem: large tables in mappings of their own, advised into huge pages. */
#include "td_mem.h"

#include <malloc.h>

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

/* Under AddressSanitizer every table comes from calloc, at its exact size,
 * so a read past its end is reported instead of landing in the rest of a
 * 2 MiB mapping. */
#if TD_ASAN
#define BIG_MIN SIZE_MAX
#else
#define BIG_MIN TD_BIG_MIN
#endif

static size_t big_len(size_t n)
{
	return (n + TD_BIG_PAGE - 1) & ~(TD_BIG_PAGE - 1);
}

static void *big_map(size_t n, int huge)
{
	if (n < BIG_MIN)
		return calloc(1, n);
	if (n > SIZE_MAX - 2 * TD_BIG_PAGE)
		return NULL;
	size_t len = big_len(n);
	uint8_t *m = mmap(NULL, len + TD_BIG_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	uint8_t *p = (uint8_t *)(((uintptr_t)m + TD_BIG_PAGE - 1) & ~(uintptr_t)(TD_BIG_PAGE - 1));
	if (p > m)
		munmap(m, (size_t)(p - m));
	if (m + len + TD_BIG_PAGE > p + len)
		munmap(p + len, (size_t)(m + TD_BIG_PAGE - p));
	if (huge)
		madvise(p, len, MADV_HUGEPAGE); /* advice: where it is refused, 4 KiB pages */
	return p;
}

void *td_big_alloc(size_t n)
{
	return big_map(n, 1);
}

void *td_big_alloc_sparse(size_t n)
{
	return big_map(n, 0);
}

void td_big_huge(void *p, size_t n)
{
	if (p && n >= BIG_MIN)
		madvise(p, big_len(n), MADV_HUGEPAGE);
}

void td_big_free(const void *p, size_t n)
{
	if (!p)
		return;
	if (n < BIG_MIN)
		free((void *)p);
	else
		munmap((void *)p, big_len(n));
}

void td_mem_trim(void)
{
#if defined(__GLIBC__) && !TD_ASAN
	malloc_trim(0);
#endif
}
