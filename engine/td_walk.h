/* td_walk: the engine-internal grammar walker behind extract and cursors. */
#ifndef TD_WALK_H
#define TD_WALK_H

#include "td_archive_int.h"

/* Root symbols a walker holds decoded ahead (a power of two), decoded
 * TD_WALK_FILL at a time (whole tiles at a time instead of one look-up
 * per symbol). A read shorter than TD_WALK_AHEAD_MIN keeps more than
 * TD_WALK_FILL and at most 2 * TD_WALK_FILL decoded ahead; a longer one
 * keeps more than TD_WALK_RING - 2 * TD_WALK_FILL (129-192 after a seek),
 * so its prefetches can reach far enough. */
#define TD_WALK_RING 256u
#define TD_WALK_FILL 64u
_Static_assert(TD_WALK_RING % TD_WALK_FILL == 0, "fills never wrap around the ring");

/* How far ahead in the ring a long read prefetches symbol table entries
 * (and, half as far, the bytes they point at): their cache misses then
 * overlap the copies before them (the distances measured:
 * contrib/bench/NOTES.md, "Read path"). */
#define TD_WALK_AHEAD 64u
_Static_assert(TD_WALK_AHEAD < TD_WALK_RING - 2 * TD_WALK_FILL, "prefetch within what a long read keeps decoded");
/* Reads shorter than this (bytes) do not prefetch: short random reads are
 * slower with it, longer ones faster (contrib/bench/NOTES.md). */
#define TD_WALK_AHEAD_MIN 1024u

/* Position inside one entry's expansion: a stack of rule frames over the
 * root range, and the current terminal partly consumed. */
typedef struct td_walk {
	const td_archive *a;
	td_entry e;
	uint64_t pos;            /* file offset of the next byte produced */
	uint64_t size;           /* file size */
	uint64_t root_i, root_end;
	uint32_t depth;
	struct {
		uint64_t at, end;  /* next / end symbol index in RULE_SYMS */
	} st[TD_MAXDEPTH + 1];
	const uint8_t *tok;      /* current terminal's bytes (without space) */
	uint32_t tok_len;        /* bytes of tok */
	uint32_t tok_total;      /* tok_len + trailing space */
	uint32_t tok_off;        /* bytes of the current terminal already produced */
	int valid;
	uint64_t root_fill;      /* root symbols [root_i, root_fill) are decoded in ring */
	uint64_t ring[TD_WALK_RING]; /* root symbol i at ring[i % TD_WALK_RING] */
} td_walk;

/* Position w at byte `off` of entry e (off < size). TD_OK, TD_EINVAL,
 * TD_EISDIR, TD_ECORRUPT. */
int td_walk_seek(td_walk *w, const td_archive *a, td_entry e, uint64_t off);

/* Produce up to len bytes into buf from the walker's position; *got is the
 * count (short only at EOF). TD_OK or TD_ECORRUPT. */
int td_walk_read(td_walk *w, uint8_t *buf, size_t len, size_t *got);

#endif
