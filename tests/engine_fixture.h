/* engine_fixture: shared set-up of the engine Criterion tests: adversarial tree, archives, oracle answers. */
#ifndef ENGINE_FIXTURE_H
#define ENGINE_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "td_archive.h"

/*
 * Criterion runs every test in a fresh worker process that does not inherit
 * globals, so the expensive set-up runs once in main() (tdt_main), writes
 * its results into a temporary directory and exports that directory in the
 * environment (TDT_DIR) where workers find it.
 *
 * Fixture directory contents, by need flag:
 *   TDT_TREE     tree/           tests/gen_adversarial.py output (--heavy when
 *                                TD_TEST_HEAVY=1 in the environment)
 *   TDT_ARCHIVE  paths.tadoc     td_compress_paths(tree/)
 *   TDT_WRITER   writer.tadoc    the same tree through td_writer streaming,
 *                                added in another order, random chunk sizes,
 *                                in archive format 3 (paths.tadoc: format 4)
 *   TDT_ORACLE   oracle.txt      tests/oracle.py queries tree/
 *   TDT_SMALL    small/ + small.tadoc   a tiny tree written from C
 */
enum {
	TDT_TREE = 1u << 0,
	TDT_ARCHIVE = 1u << 1,
	TDT_WRITER = 1u << 2,
	TDT_ORACLE = 1u << 3,
	TDT_SMALL = 1u << 4,
};

/* Build what `need` asks for, run the Criterion tests, remove the fixture
 * directory (kept when TDT_KEEP=1). Use as the test program's main(). */
int tdt_main(int argc, char **argv, unsigned need);

/* Path of `name` inside the fixture directory; the result lives until the
 * 8th next call on this thread. */
const char *tdt_path(const char *name);

/* 1 when the heavy members were generated. */
int tdt_heavy(void);

/* Whole file into a malloc'd buffer (+1 NUL byte, not counted); NULL on error. */
void *tdt_slurp(const char *path, size_t *len);

/* Write len bytes to path (created 0644, truncated). 0 or -1. */
int tdt_spit(const char *path, const void *data, size_t len);

/* system() of a printf-formatted command; returns the exit status or -1. */
int tdt_system(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Deterministic 64-bit generator (splitmix64). */
uint64_t tdt_rand(uint64_t *state);

/* Open an archive in the fixture directory; aborts the test on failure. */
td_archive *tdt_open(const char *name, unsigned flags);

/* A format 5 builder (td_build) with shards of shard_size bytes, 2 jobs,
 * a fixed build time and its temporary files in the fixture directory;
 * tdt_build_finish writes it to `out` (through a temporary name, then
 * rename, so concurrent test processes see it whole or not at all).
 * Both abort the test on failure. */
/* Run fn(jobs + i * size) for i < n on n threads released together (a
 * barrier), and join them. Aborts the test when a thread cannot start. */
void tdt_threads(unsigned n, void (*fn)(void *job), void *jobs, size_t size);

struct td_build;
struct td_build *tdt_build_new(uint64_t shard_size);
void tdt_build_finish(struct td_build *b, const char *out);

/* Oracle answers (tests/oracle.py queries). Strings are NUL-terminated; the
 * root directory is "". */
typedef struct tdt_entry {
	char *path;
	char kind;                /* 'f', 'd', 'l' */
	uint64_t size, nwords, maxword;
} tdt_entry;

typedef struct tdt_hit {
	const char *path;         /* points into the oracle's string storage */
	uint64_t off;
} tdt_hit;

typedef struct tdt_query {
	int dir;                  /* 1: directory scope (QD), 0: file scope (QF) */
	char *scope;
	char *word;
	size_t wlen;
	uint64_t count;
	tdt_hit *hits;            /* count of them */
} tdt_query;

typedef struct tdt_oracle {
	uint64_t total_bytes, total_words;
	tdt_entry *e;
	size_t ne;
	tdt_query *q;
	size_t nq;
} tdt_oracle;

/* Parse the fixture's oracle.txt; aborts the test on failure. */
tdt_oracle *tdt_oracle_load(void);
void tdt_oracle_free(tdt_oracle *o);

#endif
