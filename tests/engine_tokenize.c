/* engine_tokenize: tokens cover every byte, words are exactly Python's \w+ runs, streaming equals one-shot. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_fixture.h"
#include "td_format.h"
#include "td_tokenize.h"

static const char *py(void)
{
	const char *p = getenv("PYTHON");
	return p && *p ? p : "python3";
}

static const char *tests_dir(void)
{
	const char *d = getenv("TESTS_DIR");
	return d && *d ? d : "tests";
}

/* td_is_word_cp agrees with Python's \w on every assigned code point
 * (unassigned ones may differ between Unicode versions). */
Test(tokenize, word_cp_matches_python)
{
	char cmd[4096];
	snprintf(cmd, sizeof cmd,
		 "'%s' -c \"import re,unicodedata as u\n"
		 "w=re.compile(r'\\\\w');p=None;s=0\n"
		 "for c in range(0x110000):\n"
		 "  k='u' if u.category(chr(c))=='Cn' else 'w' if w.match(chr(c)) else 'n'\n"
		 "  if k!=p:\n"
		 "    if p: print(p,s,c-1)\n"
		 "    p=k;s=c\n"
		 "print(p,s,0x10ffff)\"",
		 py());
	FILE *f = popen(cmd, "r");
	cr_assert_not_null(f);
	char k;
	unsigned lo, hi, nranges = 0, nword = 0, bad = 0;
	while (fscanf(f, " %c %u %u", &k, &lo, &hi) == 3) {
		nranges++;
		if (k == 'u')
			continue;
		for (unsigned cp = lo; cp <= hi; cp++) {
			int want = k == 'w';
			nword += want;
			if (td_is_word_cp(cp) != want && bad++ < 20)
				cr_log_error("U+%04X: td_is_word_cp %d, Python %d", cp, !want, want);
		}
	}
	cr_assert_eq(pclose(f), 0, "python failed");
	cr_assert_gt(nranges, 1000u);
	cr_assert_gt(nword, 100000u);
	cr_assert_eq(bad, 0u, "%u code points disagree with Python", bad);
}

/* Length of the word-character run at s[0..n), built on td_word_char. */
static size_t word_run(const uint8_t *s, size_t n)
{
	size_t i = 0;
	unsigned l;
	while (i < n && (l = td_word_char(s + i, n - i)) > 0)
		i += l;
	return i;
}

/* Length of the non-word run at s[0..n). */
static size_t nonword_run(const uint8_t *s, size_t n)
{
	size_t i = 0;
	while (i < n && td_word_char(s + i, n - i) == 0) {
		uint32_t cp;
		unsigned l = td_utf8_decode(s + i, n - i, &cp);
		i += l ? l : 1;
	}
	return i;
}

typedef struct tok {
	size_t off;
	td_token t;
} tok;

static size_t tokenize_all(const uint8_t *s, size_t n, tok *out)
{
	size_t at = 0, k = 0;
	td_tokenizer st = {0};
	while (at < n) {
		td_token t;
		size_t l = td_next_token(&st, s + at, n - at, 1, &t);
		cr_assert_gt(l, 0u, "no progress at %zu of %zu", at, n);
		cr_assert_eq(l, t.len);
		cr_assert_leq(l, TD_MAXTOK + (t.kind == TD_TOK_WORD), "token of %zu bytes at %zu", l, at);
		out[k].off = at;
		out[k].t = t;
		k++;
		at += l;
	}
	cr_assert_eq(at, n, "tokens cover %zu of %zu bytes", at, n);
	return k;
}

/* Pieces that make tokenizers stumble. */
static const char *const frags[] = {
	"the", "The", " ", " ", "  ", "\n", "\r\n", "\t", ".", ", ", "_", "x86_64", "naïve", "日本語", "٣٤",
	"e\xcc\x81", "\xcc\x81", "\xff", "\xfe", "\xc0\xaf", "\xed\xa0\x80", "\xe4\xb8", "\xf0\x9f\x98", "\xc3",
	"\x80", "\xf4\x90\x80\x80", "😀", "\xc2\xa0", "\0", "²", "Ⅻ", "𝔘", "ǅ", "ﬁ", "a", "-", "'",
};

static size_t make_buffer(uint64_t *rs, uint8_t *b, size_t cap)
{
	size_t n = 0;
	size_t target = tdt_rand(rs) % cap;
	while (n < target) {
		uint64_t r = tdt_rand(rs);
		if (r % 50 == 0 && n + 1200 < cap) { /* a long run: word chars or separators */
			const char *unit = (r >> 8) % 4 == 0 ? "é" : (r >> 8) % 4 == 1 ? "w" : (r >> 8) % 4 == 2 ? " " : "日";
			size_t ul = strlen(unit), cnt = 100 + (r >> 16) % 300;
			for (size_t i = 0; i < cnt && n + ul < cap; i++, n += ul)
				memcpy(b + n, unit, ul);
			continue;
		}
		const char *f = frags[r % (sizeof frags / sizeof *frags)];
		size_t l = f[0] ? strlen(f) : 1;
		if (n + l > cap)
			break;
		memcpy(b + n, f, l);
		n += l;
	}
	return n;
}

/* Coverage, token shapes, and the exact match with Python's words. */
Test(tokenize, tokens_cover_bytes_and_match_python_words)
{
	enum { ROUNDS = 60 };
	uint64_t rs = 42;
	size_t cap = 40000;
	uint8_t *bufs[ROUNDS];
	size_t lens[ROUNDS];
	char cmd[16384];
	int at = snprintf(cmd, sizeof cmd, "'%s' '%s/oracle.py' words", py(), tests_dir());
	for (int r = 0; r < ROUNDS; r++) {
		bufs[r] = malloc(cap);
		lens[r] = make_buffer(&rs, bufs[r], cap);
		char name[32];
		snprintf(name, sizeof name, "tok%d.bin", r);
		cr_assert_eq(tdt_spit(tdt_path(name), bufs[r], lens[r]), 0);
		at += snprintf(cmd + at, sizeof cmd - (size_t)at, " '%s'", tdt_path(name));
		cr_assert_lt((size_t)at, sizeof cmd);
	}
	/* Python's words, from the oracle, all buffers in one run. */
	FILE *f = popen(cmd, "r");
	cr_assert_not_null(f);
	tok *t = malloc(cap * sizeof *t);
	uint8_t *isstart = malloc(cap + 2);
	int idx;
	cr_assert_eq(fscanf(f, " = %d", &idx), 1);
	for (int round = 0; round < ROUNDS; round++) {
		cr_assert_eq(idx, round);
		const uint8_t *b = bufs[round];
		size_t n = lens[round];
		size_t nt = tokenize_all(b, n, t);
		memset(isstart, 0, n + 2);
		for (size_t k = 0; k < nt; k++) {
			const td_token *x = &t[k].t;
			const uint8_t *s = b + t[k].off;
			isstart[t[k].off] = 1;
			if (x->kind == TD_TOK_WORD) {
				cr_assert(x->wordlen == x->len || (x->wordlen + 1 == x->len && s[x->wordlen] == ' '),
					  "word token shape at %zu", t[k].off);
				cr_assert_gt(x->wordlen, 0u);
				cr_assert_leq(x->wordlen, TD_MAXTOK);
				cr_assert_eq(word_run(s, x->wordlen), x->wordlen, "word token with non-word bytes at %zu",
					     t[k].off);
			} else {
				cr_assert_eq(x->kind, TD_TOK_OTHER);
			}
		}
		isstart[n] = 1;
		size_t off, len, prev_end = 0, nw = 0, tk = 0;
		idx = -1;
		char line[128];
		while (fgets(line, sizeof line, f)) {
			if (sscanf(line, " = %d", &idx) == 1)
				break;
			if (sscanf(line, "%zu %zu", &off, &len) != 2)
				continue;
			nw++;
			/* Between words there are no word characters. */
			for (size_t i = prev_end; i < off;) {
				cr_assert_eq(word_run(b + i, off - i), 0u, "a word at %zu that Python does not see", i);
				size_t r = nonword_run(b + i, off - i);
				cr_assert_gt(r, 0u);
				i += r;
			}
			size_t wr = word_run(b + off, n - off);
			cr_assert_eq(wr, len, "word at %zu: %zu bytes of word characters, Python %zu", off, wr, len);
			/* A token starts at the word; the word ends at a token end (or its ' '). */
			cr_assert(isstart[off], "no token starts at Python word %zu", off);
			int end_ok = isstart[off + len] || (off + len < n && b[off + len] == ' ' && isstart[off + len + 1]);
			cr_assert(end_ok, "no token ends at Python word end %zu", off + len);
			while (tk < nt && t[tk].off < off)
				tk++;
			size_t k = tk;
			cr_assert_lt(k, nt);
			cr_assert_eq(t[k].off, off);
			if (len <= TD_MAXTOK) {
				cr_assert_eq(t[k].t.kind, TD_TOK_WORD, "Python word at %zu is not a word token", off);
				cr_assert_eq(t[k].t.wordlen, len);
			} else {
				/* A long word is cut into OTHER pieces that are no words of their own. */
				for (; k < nt && t[k].off < off + len; k++)
					cr_assert_eq(t[k].t.kind, TD_TOK_OTHER, "piece of a %zu-byte word at %zu is a WORD", len,
						     t[k].off);
			}
			prev_end = off + len;
		}
		for (size_t i = prev_end; i < n;) {
			cr_assert_eq(word_run(b + i, n - i), 0u);
			i += nonword_run(b + i, n - i);
		}
		if (round > 5)
			cr_assert_gt(nw, 0u);
		free(bufs[round]);
	}
	cr_assert_eq(pclose(f), 0);
	free(t);
	free(isstart);
}

/* Feeding bytes a few at a time (final = 0 until the end) gives the same
 * tokens as one call over everything. */
Test(tokenize, streaming_equals_one_shot)
{
	uint64_t rs = 7;
	size_t cap = 30000;
	uint8_t *b = malloc(cap);
	tok *t = malloc(cap * sizeof *t);
	for (int round = 0; round < 100; round++) {
		size_t n = make_buffer(&rs, b, cap);
		size_t nt = tokenize_all(b, n, t);
		size_t at = 0, k = 0, avail = 0;
		td_tokenizer st = {0};
		while (at < n) {
			if (avail == at)
				avail += 1 + tdt_rand(&rs) % 20;
			if (avail > n)
				avail = n;
			td_token x;
			size_t l = td_next_token(&st, b + at, avail - at, avail == n, &x);
			if (l == 0) {
				cr_assert_lt(avail, n, "final call returned 0");
				avail += 1 + tdt_rand(&rs) % 20;
				if (avail > n)
					avail = n;
				continue;
			}
			cr_assert_leq(at + l, avail, "token past the bytes given");
			cr_assert_lt(k, nt);
			cr_assert_eq(t[k].off, at, "streaming token %zu at %zu, one-shot at %zu", k, at, t[k].off);
			cr_assert_eq(x.len, t[k].t.len, "streaming token %zu at %zu: len %u vs %u", k, at, x.len, t[k].t.len);
			cr_assert_eq(x.kind, t[k].t.kind);
			cr_assert_eq(x.wordlen, t[k].t.wordlen);
			k++;
			at += l;
		}
		cr_assert_eq(k, nt);
	}
	free(b);
	free(t);
}

/* Every byte value alone and every pair of byte values. */
Test(tokenize, all_bytes_and_pairs)
{
	uint8_t s[3];
	tok t[4];
	for (unsigned a = 0; a < 256; a++) {
		s[0] = (uint8_t)a;
		size_t nt = tokenize_all(s, 1, t);
		cr_assert_eq(nt, 1u);
		for (unsigned b = 0; b < 256; b++) {
			s[1] = (uint8_t)b;
			tokenize_all(s, 2, t);
			s[2] = ' ';
			tokenize_all(s, 3, t);
		}
	}
	cr_assert_eq(td_word_char((const uint8_t *)"", 0), 0u);
}

int main(int argc, char **argv)
{
	return tdt_main(argc, argv, 0);
}
