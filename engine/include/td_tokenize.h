/* td_tokenize: split bytes into word and other tokens losslessly (decisions 1, 2). */
#ifndef TD_TOKENIZE_H
#define TD_TOKENIZE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if Unicode code point cp is a word character: general category L* or
 * N*, or '_' (Python 3's str `\w`). */
int td_is_word_cp(uint32_t cp);

/* Decode one strictly valid UTF-8 character at s[0..n) (no overlongs, no
 * surrogates, <= U+10FFFF). Returns its length 1..4 and sets *cp, or 0 when
 * the bytes are invalid or incomplete (then s[0] counts as one non-word
 * byte, like Python's surrogateescape). */
unsigned td_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* Length in bytes of the word character at s (1..4), or 0 when s[0..n)
 * does not start with a word character. */
unsigned td_word_char(const uint8_t *s, size_t n);

enum td_tok_kind { TD_TOK_WORD = 0, TD_TOK_OTHER = 1 };

typedef struct td_token {
	uint32_t len;      /* bytes, 1..TD_MAXTOK+1 */
	uint32_t wordlen;  /* WORD: bytes of the word (len or len-1 with ' ') */
	int kind;          /* td_tok_kind */
	int long_start;    /* OTHER: first piece of a word longer than TD_MAXTOK */
} td_token;

/* Tokenizer state across calls: remembers that a word longer than
 * TD_MAXTOK is being cut into pieces (pieces are OTHER tokens and are not
 * words of their own). Zero-initialise before the first token of a file. */
typedef struct td_tokenizer {
	int in_long_word;
} td_tokenizer;

/* Next token at s[0..n), n > 0. `final` says no bytes follow s[n-1] in this
 * file; when 0 and the token might continue past n, returns 0 (feed more).
 * Otherwise returns tok->len (> 0). Tokens never exceed TD_MAXTOK+1 bytes:
 * a word of more than TD_MAXTOK bytes becomes OTHER pieces cut at character
 * boundaries, and so do long non-word runs. */
size_t td_next_token(td_tokenizer *st, const uint8_t *s, size_t n, int final, td_token *tok);

#ifdef __cplusplus
}
#endif
#endif
