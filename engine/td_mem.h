/* td_mem: engine-internal large tables, each in a mapping of its own in transparent huge pages. */
#ifndef TD_MEM_H
#define TD_MEM_H

#include <stddef.h>

/* Tables of at least TD_BIG_MIN bytes (td_rcache.c: flat arrays, the symbol
 * table and its pool, decoded sequences, the rule cache's slots, arena
 * chunks; td_archive.c: version 4's words as they are rebuilt) get their
 * own 2 MiB-aligned mapping, zero-filled, advised into transparent huge
 * pages (where the system allows them for advised memory, the default).
 * Such tables are written whole once built, so faulting them in 2 MiB at a
 * time costs no memory they would not use, and they meet fewer TLB misses;
 * the slots, which readers touch here and there, get huge pages only when
 * the read hint's sweep or the mount's warm-up fills them all
 * (td_big_alloc_sparse). What it saves, and its cost on some virtual
 * machines: contrib/bench/NOTES.md ("Read path"). */
/* TD_ASAN: 1 in a build under AddressSanitizer (whose allocator replaces
 * glibc's: no malloc_trim, no big mappings of our own), else 0. */
#if defined(__SANITIZE_ADDRESS__)
#define TD_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TD_ASAN 1
#endif
#endif
#ifndef TD_ASAN
#define TD_ASAN 0
#endif

#define TD_BIG_PAGE ((size_t)2 << 20)
#define TD_BIG_MIN ((size_t)1 << 20)

/* n zero bytes: below TD_BIG_MIN from calloc, else a TD_BIG_PAGE-aligned
 * mapping of their own, advised into huge pages; NULL when out of memory.
 * (Built with AddressSanitizer: always calloc, so overruns are caught.) */
void *td_big_alloc(size_t n);

/* The same in 4 KiB pages, for a table readers touch here and there (the
 * rule cache's slots: one slot read must not commit 2 MiB); td_big_huge
 * advises it into huge pages once it is about to be filled whole (its
 * 2 MiB regions not touched yet get them). */
void *td_big_alloc_sparse(size_t n);
void td_big_huge(void *p, size_t n);

/* Free what td_big_alloc(n) or td_big_alloc_sparse(n) returned, given the
 * same n (NULL is ignored). */
void td_big_free(const void *p, size_t n);

/* Give the free memory of every malloc arena back to the system (glibc's
 * malloc_trim; a no-op elsewhere and under AddressSanitizer). A thread
 * that frees what it or another thread allocated (a build's helpers:
 * each has an arena of its own) leaves those pages resident otherwise. */
void td_mem_trim(void);

#endif
