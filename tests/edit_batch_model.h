/* edit_batch_model: a plain byte-array model of insert/append batches (both offset meanings, mixed) and a random batch generator, for the CPU and GPU batch tests. */
#ifndef EDIT_BATCH_MODEL_H
#define EDIT_BATCH_MODEL_H

/*
 * The model keeps every file as bytes, each tagged with its index in the
 * file's snapshot (the state before the current batch) or -1 for bytes the
 * batch inserted. Records are applied one by one in batch order by string
 * insertion:
 *   in sequence  at index q of the current bytes (TD_OFF_END: the end);
 *   in batch     just before the byte tagged p (p = snapshot size, or
 *                TD_OFF_END: the end).
 * That is the definition in td_edit_batch.h, computed without offsets
 * arithmetic, so it checks the resolvers independently.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "td_edit_batch.h"

typedef struct ebm_file {
	uint8_t *b;
	int64_t *tag;
	size_t n, cap;
	uint64_t snap;
	td_node node;
} ebm_file;

typedef struct ebm {
	ebm_file *f;
	size_t nf;
	uint8_t pool[4096];         /* inserted bytes point in here */
	uint64_t rng;
} ebm;

static uint64_t ebm_rand(ebm *m)
{
	uint64_t z = (m->rng += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static void ebm_init(ebm *m, uint64_t seed, size_t nf)
{
	memset(m, 0, sizeof *m);
	m->rng = seed;
	m->nf = nf;
	m->f = (ebm_file *)calloc(nf, sizeof *m->f);
	static const char alpha[] = "the rule of grammar, \n\r\xc3\xbc\x00_42 ";
	for (size_t i = 0; i < sizeof m->pool; i++)
		m->pool[i] = (uint8_t)alpha[ebm_rand(m) % (sizeof alpha - 1)];
}

static void ebm_free(ebm *m)
{
	for (size_t i = 0; i < m->nf; i++) {
		free(m->f[i].b);
		free(m->f[i].tag);
	}
	free(m->f);
}

static void ebm_set(ebm *m, size_t fi, td_node node, const void *data, size_t n)
{
	ebm_file *f = &m->f[fi];
	f->node = node;
	f->cap = n + 64;
	f->b = (uint8_t *)realloc(f->b, f->cap);
	f->tag = (int64_t *)realloc(f->tag, f->cap * sizeof *f->tag);
	memcpy(f->b, data, n);
	f->n = n;
}

/* Start a batch: the current bytes become the snapshot. */
static void ebm_snapshot(ebm *m)
{
	for (size_t i = 0; i < m->nf; i++) {
		ebm_file *f = &m->f[i];
		for (size_t k = 0; k < f->n; k++)
			f->tag[k] = (int64_t)k;
		f->snap = f->n;
	}
}

static ebm_file *ebm_find(ebm *m, td_node node)
{
	for (size_t i = 0; i < m->nf; i++)
		if (m->f[i].node == node)
			return &m->f[i];
	return NULL;
}

/* Apply one batch record with its meaning (snapshot != 0: in batch). */
static void ebm_apply(ebm *m, const td_edit_rec *r, int snapshot)
{
	ebm_file *f = ebm_find(m, r->node);
	size_t at;
	if (r->off == TD_OFF_END) {
		at = f->n;
	} else if (snapshot) {
		at = f->n; /* p == snapshot size: the end */
		for (size_t k = 0; k < f->n; k++)
			if (f->tag[k] == (int64_t)r->off) {
				at = k;
				break;
			}
	} else {
		at = (size_t)r->off;
	}
	size_t len = (size_t)r->data_len;
	if (f->n + len > f->cap) {
		f->cap = (f->n + len) * 2;
		f->b = (uint8_t *)realloc(f->b, f->cap);
		f->tag = (int64_t *)realloc(f->tag, f->cap * sizeof *f->tag);
	}
	memmove(f->b + at + len, f->b + at, f->n - at);
	memmove(f->tag + at + len, f->tag + at, (f->n - at) * sizeof *f->tag);
	memcpy(f->b + at, r->data, len);
	for (size_t k = 0; k < len; k++)
		f->tag[at + k] = -1;
	f->n += len;
}

/* 1 if record r of a batch in `mode` has the in-batch meaning. */
static int ebm_is_snapshot(const td_edit_rec *r, int mode)
{
	return mode == TD_BATCH_SNAPSHOT || (mode == TD_BATCH_MIXED && (r->flags & TD_EDIT_SNAPSHOT));
}

/* Apply a whole batch to the model. */
static void ebm_apply_batch(ebm *m, const td_edit_rec *recs, size_t n, int mode)
{
	ebm_snapshot(m);
	for (size_t i = 0; i < n; i++)
		ebm_apply(m, &recs[i], ebm_is_snapshot(&recs[i], mode));
}

/* A random valid batch of n records over the model's files (`hot` > 0: all
 * records on the first `hot` files). Offsets are valid for their meaning:
 * the generator follows each file's size through the batch. */
static void ebm_gen(ebm *m, td_edit_rec *recs, size_t n, int mode, size_t hot)
{
	uint64_t *cur = (uint64_t *)calloc(m->nf, sizeof *cur);
	for (size_t i = 0; i < m->nf; i++)
		cur[i] = m->f[i].n;
	size_t nf = hot && hot < m->nf ? hot : m->nf;
	for (size_t i = 0; i < n; i++) {
		size_t fi = (size_t)(ebm_rand(m) % nf);
		td_edit_rec *r = &recs[i];
		memset(r, 0, sizeof *r);
		r->type = TD_REC_INSERT;
		r->node = m->f[fi].node;
		r->time_sec = 1700000000 + (int64_t)i;
		if (mode == TD_BATCH_MIXED && ebm_rand(m) % 2)
			r->flags = TD_EDIT_SNAPSHOT;
		uint64_t lim = ebm_is_snapshot(r, mode) ? m->f[fi].n : cur[fi];
		uint64_t pick = ebm_rand(m) % 100;
		if (pick < 8)
			r->off = TD_OFF_END;
		else if (pick < 14)
			r->off = lim;
		else if (pick < 20)
			r->off = 0;
		else
			r->off = ebm_rand(m) % (lim + 1);
		r->data_len = ebm_rand(m) % 10 == 0 ? 0 : 1 + ebm_rand(m) % 12;
		r->data = m->pool + ebm_rand(m) % (sizeof m->pool - 16);
		cur[fi] += r->data_len;
	}
	free(cur);
}

#endif
