/* td_tokenize: lossless word/other tokenizer over raw bytes. */
#include "td_tokenize.h"

#include <utf8proc.h>

#include "td_format.h"

static const uint8_t ascii_word[128] = {
	['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
	['8'] = 1, ['9'] = 1, ['_'] = 1,
	['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1,
	['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1,
	['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
	['Y'] = 1, ['Z'] = 1,
	['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1,
	['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1,
	['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
	['y'] = 1, ['z'] = 1,
};

/* Letters and numbers added in Unicode 15.0. The reference definition is
 * Python 3 `\w` as shipped by Debian 12 (Python 3.11, Unicode 14.0), which
 * does not know them, while libutf8proc 2.8 (Unicode 15.0) does: they are
 * not word characters here, so counts equal the reference exactly. */
static const uint32_t unicode15_words[][2] = {
	{ 0x1123F, 0x11240 }, { 0x11F02, 0x11F02 }, { 0x11F04, 0x11F10 }, { 0x11F12, 0x11F33 },
	{ 0x11F50, 0x11F59 }, { 0x1342F, 0x1342F }, { 0x13441, 0x13446 }, { 0x1B132, 0x1B132 },
	{ 0x1B155, 0x1B155 }, { 0x1D2C0, 0x1D2D3 }, { 0x1DF25, 0x1DF2A }, { 0x1E030, 0x1E06D },
	{ 0x1E4D0, 0x1E4EB }, { 0x1E4F0, 0x1E4F9 }, { 0x2B739, 0x2B739 }, { 0x31350, 0x323AF },
};

int td_is_word_cp(uint32_t cp)
{
	if (cp < 128)
		return ascii_word[cp];
	if (cp >= 0x11000)
		for (size_t i = 0; i < sizeof unicode15_words / sizeof *unicode15_words; i++)
			if (cp >= unicode15_words[i][0] && cp <= unicode15_words[i][1])
				return 0;
	switch (utf8proc_category((utf8proc_int32_t)cp)) {
	case UTF8PROC_CATEGORY_LU:
	case UTF8PROC_CATEGORY_LL:
	case UTF8PROC_CATEGORY_LT:
	case UTF8PROC_CATEGORY_LM:
	case UTF8PROC_CATEGORY_LO:
	case UTF8PROC_CATEGORY_ND:
	case UTF8PROC_CATEGORY_NL:
	case UTF8PROC_CATEGORY_NO:
		return 1;
	default:
		return 0;
	}
}

static int cont(uint8_t b)
{
	return (b & 0xC0) == 0x80;
}

unsigned td_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
	uint8_t b = s[0];
	if (b < 0x80) {
		*cp = b;
		return 1;
	}
	if (b >= 0xC2 && b <= 0xDF) {
		if (n < 2 || !cont(s[1]))
			return 0;
		*cp = ((uint32_t)(b & 0x1F) << 6) | (s[1] & 0x3F);
		return 2;
	}
	if (b >= 0xE0 && b <= 0xEF) {
		if (n < 3 || !cont(s[1]) || !cont(s[2]))
			return 0;
		if ((b == 0xE0 && s[1] < 0xA0) || (b == 0xED && s[1] > 0x9F))
			return 0;
		*cp = ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
		return 3;
	}
	if (b >= 0xF0 && b <= 0xF4) {
		if (n < 4 || !cont(s[1]) || !cont(s[2]) || !cont(s[3]))
			return 0;
		if ((b == 0xF0 && s[1] < 0x90) || (b == 0xF4 && s[1] > 0x8F))
			return 0;
		*cp = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
		      ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
		return 4;
	}
	return 0;
}

unsigned td_word_char(const uint8_t *s, size_t n)
{
	if (s[0] < 0x80)
		return ascii_word[s[0]];
	uint32_t cp;
	unsigned k = td_utf8_decode(s, n, &cp);
	return k && td_is_word_cp(cp) ? k : 0;
}

/* A multi-byte character cut by the end of the buffer may still become a
 * word character once more bytes arrive. */
static int maybe_incomplete(const uint8_t *s, size_t n)
{
	static const uint8_t need[16] = { [12] = 2, [13] = 2, [14] = 3, [15] = 4 };
	uint8_t b = s[0];
	return b >= 0xC0 && need[b >> 4] > n;
}

/* Word run at s, stopping before `limit` bytes at a character boundary.
 * *more is set when the run is cut by the limit (a word char follows). */
static size_t word_run(const uint8_t *s, size_t n, size_t limit, int *more, int *atend)
{
	size_t i = 0;
	*more = 0;
	*atend = 0;
	while (i < n) {
		/* ASCII word bytes (most of any text) without a call */
		if (s[i] < 0x80 && ascii_word[s[i]]) {
			if (i + 1 > limit) {
				*more = 1;
				return i;
			}
			i++;
			continue;
		}
		unsigned k = td_word_char(s + i, n - i);
		if (!k) {
			if (maybe_incomplete(s + i, n - i))
				*atend = 1;
			return i;
		}
		if (i + k > limit) {
			*more = 1;
			return i;
		}
		i += k;
	}
	*atend = 1;
	return i;
}

static size_t nonword_run(const uint8_t *s, size_t n, size_t limit, int *atend)
{
	size_t i = 0;
	*atend = 0;
	while (i < n) {
		uint32_t cp;
		if (s[i] < 0x80) {
			if (ascii_word[s[i]])
				return i;
			if (i + 1 > limit)
				return i;
			i++;
			continue;
		}
		unsigned k = td_utf8_decode(s + i, n - i, &cp);
		if (k && td_is_word_cp(cp))
			return i;
		if (!k && maybe_incomplete(s + i, n - i)) {
			*atend = 1;
			return i;
		}
		if (!k)
			k = 1;
		if (i + k > limit)
			return i;
		i += k;
	}
	*atend = 1;
	return i;
}

size_t td_next_token(td_tokenizer *st, const uint8_t *s, size_t n, int final, td_token *tok)
{
	int more, atend;
	size_t r = word_run(s, n, TD_MAXTOK, &more, &atend);
	if (r > 0) {
		if (more || st->in_long_word) {
			/* A piece of a word longer than TD_MAXTOK bytes. */
			if (!more && atend && !final)
				return 0;
			tok->long_start = !st->in_long_word;
			st->in_long_word = more;
			tok->len = (uint32_t)r;
			tok->wordlen = 0;
			tok->kind = TD_TOK_OTHER;
			return r;
		}
		if (atend && !final)
			return 0; /* the word may go on */
		tok->kind = TD_TOK_WORD;
		tok->long_start = 0;
		tok->wordlen = (uint32_t)r;
		if (r < n && s[r] == ' ')
			r++;
		tok->len = (uint32_t)r;
		return r;
	}
	st->in_long_word = 0;
	r = nonword_run(s, n, TD_MAXTOK, &atend);
	if (atend && !final && r < TD_MAXTOK)
		return 0;
	if (r == 0) /* only an incomplete character left and final: a lone byte */
		r = 1;
	tok->kind = TD_TOK_OTHER;
	tok->long_start = 0;
	tok->wordlen = 0;
	tok->len = (uint32_t)r;
	return r;
}
