/* td_verify: full checksum and invariant check of an open archive. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "td_archive_int.h"
#include "td_query.h"
#include "td_shard.h"

#define FAIL(...) td_fail(TD_ECORRUPT, __VA_ARGS__)

/* Depth of rule r (1 = only terminals), memoised in d[]; 0 = not yet,
 * UINT8_MAX = on the stack (a cycle). Returns 0 on corruption. */
static unsigned rule_depth(const td_archive *a, uint64_t r, uint8_t *d, unsigned level)
{
	if (d[r] == UINT8_MAX || level > TD_MAXDEPTH)
		return 0;
	if (d[r])
		return d[r];
	d[r] = UINT8_MAX;
	uint64_t start;
	uint32_t len;
	unsigned deepest = 0;
	if (td_rule_rhs(a, r, &start, &len))
		return 0;
	for (uint32_t i = 0; i < len; i++) {
		uint64_t s = td_rule_sym(a, start + i);
		if (s >= a->T + a->R)
			return 0;
		if (s >= a->T) {
			unsigned c = rule_depth(a, s - a->T, d, level + 1);
			if (!c)
				return 0;
			deepest = c > deepest ? c : deepest;
		}
	}
	d[r] = (uint8_t)(deepest + 1);
	return deepest + 1;
}

static int check_offsets(const td_pack *p, uint64_t limit, const char *what)
{
	for (uint64_t i = 0; i + 1 < p->n; i++)
		if (td_pack_get(p, i) > td_pack_get(p, i + 1))
			return FAIL("%s offsets decrease at %llu", what, (unsigned long long)i);
	if (p->n && td_pack_get(p, p->n - 1) > limit)
		return FAIL("%s offsets run past their data", what);
	return TD_OK;
}

int td_archive_verify(const td_archive *a)
{
	for (unsigned id = 1; id < TD_SEC_MAX; id++) {
		const td_disk_section *s = a->sec[id];
		if (XXH3_64bits(a->map + s->off, s->size) != s->sum)
			return FAIL("section '%s': checksum mismatch", td_section_name(id));
	}
	const td_pack *wf = td_word_freq(a);
	/* the words first: a version 4 archive derives their offsets from them */
	const uint8_t *wb = td_words(a);
	if (!wf || !wb || !td_other(a))
		return FAIL("%s", td_errdetail());
	const td_pack *packs[] = { &a->e_nameoff, &a->e_parent,  &a->e_mode,   &a->e_mtime,       &a->e_mtimens,
				   &a->e_size,    &a->e_child,   &a->e_root,   &a->e_gstart,      &a->e_nwords,
				   &a->word_off,  wf,            &a->other_off, &a->rule_len,     &a->root_samples,
				   &a->rule_samples };
	for (size_t i = 0; i < sizeof packs / sizeof *packs; i++)
		if (td_pack_check(packs[i]))
			return FAIL("%s", td_errdetail());
	const td_syms *syms[] = { &a->rule_syms, &a->root_syms };
	for (size_t i = 0; i < 2; i++)
		if (syms[i]->coded ? td_scode_check(&syms[i]->c) : td_pack_check(&syms[i]->p))
			return FAIL("section '%s': %s", td_section_name(i ? TD_SEC_ROOT_SYMS : TD_SEC_RULE_SYMS),
				    td_errdetail());
	int err;
	if ((err = check_offsets(&a->word_off, a->bytes_size[TD_SEC_WORDS], "word")) ||
	    (err = check_offsets(&a->other_off, a->bytes_size[TD_SEC_OTHER], "other-token")) ||
	    (err = check_offsets(&a->e_nameoff, a->bytes_size[TD_SEC_NAMES], "name")) ||
	    (err = check_offsets(&a->e_root, a->meta.nroot, "root range")) ||
	    (err = check_offsets(&a->e_gstart, a->meta.total_bytes, "entry offset")) ||
	    (err = check_offsets(&a->e_child, a->meta.nentries, "children")))
		return err;
	/* Dictionary: words are words, sorted and distinct. */
	for (uint64_t w = 0; w < a->W; w++) {
		uint64_t o0 = td_pack_get(&a->word_off, w), o1 = td_pack_get(&a->word_off, w + 1);
		if (o1 - o0 > TD_MAXTOK || !td_is_word((const char *)wb + o0, o1 - o0))
			return FAIL("word %llu is not a word", (unsigned long long)w);
		if (w) {
			uint64_t p0 = td_pack_get(&a->word_off, w - 1);
			size_t lp = o0 - p0, lw = o1 - o0;
			int c = memcmp(wb + p0, wb + o0, lp < lw ? lp : lw);
			if (c > 0 || (c == 0 && lp >= lw))
				return FAIL("words not sorted at %llu", (unsigned long long)w);
		}
	}
	/* Rules: symbols in range, acyclic, bounded depth, lengths add up. */
	uint8_t *d = calloc(a->R + 1, 1);
	if (!d)
		return TD_ENOMEM;
	unsigned maxd = 0;
	for (uint64_t r = 0; r < a->R; r++) {
		unsigned k = rule_depth(a, r, d, 1);
		if (!k) {
			free(d);
			return FAIL("rule %llu: bad symbol, cycle or nesting deeper than %u", (unsigned long long)r,
				    TD_MAXDEPTH);
		}
		maxd = k > maxd ? k : maxd;
		uint64_t start = 0, sum = 0;
		uint32_t len = 0;
		td_rule_rhs(a, r, &start, &len);
		uint64_t first, ns = td_rule_samples(a, r, len, &first);
		for (uint32_t i = 0; i < len; i++) {
			if (ns && (i & ((UINT32_C(1) << a->shift) - 1)) == 0 &&
			    td_pack_get(&a->rule_samples, first + (i >> a->shift)) != sum) {
				free(d);
				return FAIL("rule %llu: offset sample %u is wrong", (unsigned long long)r,
					    i >> a->shift);
			}
			sum += td_sym_len(a, td_rule_sym(a, start + i));
		}
		if (sum != td_pack_get(&a->rule_len, r)) {
			free(d);
			return FAIL("rule %llu: stored length differs from its expansion", (unsigned long long)r);
		}
	}
	free(d);
	if (maxd != a->meta.max_depth)
		return FAIL("rule depth %u differs from the header's %llu", maxd,
			    (unsigned long long)a->meta.max_depth);
	/* Root: symbols in range, samples agree with lengths. */
	uint64_t g = 0, words = 0;
	for (uint64_t i = 0; i < a->meta.nroot; i++) {
		uint64_t s = td_syms_get(&a->root_syms, i);
		if (s >= a->T + a->R)
			return FAIL("root symbol %llu out of range", (unsigned long long)i);
		if ((i & ((UINT64_C(1) << a->shift) - 1)) == 0 && td_pack_get(&a->root_samples, i >> a->shift) != g)
			return FAIL("root sample %llu is wrong", (unsigned long long)(i >> a->shift));
		g += td_sym_len(a, s);
	}
	if (g != a->meta.total_bytes && !td_sharded(a))
		return FAIL("root expands to %llu bytes, header says %llu", (unsigned long long)g,
			    (unsigned long long)a->meta.total_bytes);
	/* Tree: parents first, children ranges, sorted valid names, sizes. */
	for (uint64_t e = 0; e < a->meta.nentries; e++) {
		mode_t m = (mode_t)td_pack_get(&a->e_mode, e);
		if (!S_ISDIR(m) && !S_ISREG(m) && !S_ISLNK(m))
			return FAIL("entry %llu: bad type", (unsigned long long)e);
		if (e == 0 && !S_ISDIR(m))
			return FAIL("root is not a directory");
		size_t nl;
		if (!td_archive_name(a, (td_entry)e, &nl))
			return FAIL("entry %llu: bad name", (unsigned long long)e);
		uint64_t c0 = td_pack_get(&a->e_child, e), c1 = td_pack_get(&a->e_child, e + 1);
		if (c1 > c0 && (!S_ISDIR(m) || c0 <= e))
			return FAIL("entry %llu: bad children range", (unsigned long long)e);
		for (uint64_t c = c0; c < c1; c++) {
			if (td_pack_get(&a->e_parent, c) != e)
				return FAIL("entry %llu: parent does not match", (unsigned long long)c);
			if (c > c0) {
				size_t l0, l1;
				const char *n0 = td_archive_name(a, (td_entry)(c - 1), &l0);
				const char *n1 = td_archive_name(a, (td_entry)c, &l1);
				int k = n0 && n1 ? memcmp(n0, n1, l0 < l1 ? l0 : l1) : 1;
				if (k > 0 || (k == 0 && l0 >= l1))
					return FAIL("entry %llu: names not sorted or duplicated", (unsigned long long)c);
			}
		}
		if (S_ISREG(m))
			words += td_pack_get(&a->e_nwords, e);
		if (td_sharded(a)) /* sizes come from the pieces: td_shard_verify */
			continue;
		uint64_t rs = td_pack_get(&a->e_root, e), re = td_pack_get(&a->e_root, e + 1), len = 0;
		for (uint64_t i = rs; i < re; i++)
			len += td_sym_len(a, td_syms_get(&a->root_syms, i));
		if (S_ISDIR(m) ? re != rs : len != td_pack_get(&a->e_size, e))
			return FAIL("entry %llu: size differs from its text", (unsigned long long)e);
		if (td_pack_get(&a->e_gstart, e + 1) - td_pack_get(&a->e_gstart, e) != len)
			return FAIL("entry %llu: offset table is wrong", (unsigned long long)e);
	}
	if (words != a->meta.total_words)
		return FAIL("per-file word counts do not add up to the corpus total");
	if (td_sharded(a)) {
		for (unsigned i = 0; i < TD_SEC5_N; i++) {
			const td_disk_section *s = a->sec5[i];
			if (XXH3_64bits(a->map + s->off, s->size) != s->sum)
				return FAIL("shard section %u: checksum mismatch", s->id);
		}
		return td_shard_verify(a);
	}
	uint64_t freq = 0;
	for (uint64_t w = 0; w < a->W; w++)
		freq += td_pack_get(wf, w);
	if (freq + a->meta.nlongwords != words)
		return FAIL("word counts do not add up");
	return TD_OK;
}
