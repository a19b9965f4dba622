/* td_tokenize: split bytes into word and other tokens losslessly (decisions 1, 2). */
#ifndef TD_TOKENIZE_H
#define TD_TOKENIZE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if Unicode code point cp is a word character: general category L* or
 * N*, or '_' (Python 3's str \w). */
int td_is_word_cp(uint32_t cp);

/* Length of the word-character run at s[0..n): 0 if s does not start with a
 * word character. Invalid UTF-8 ends a run. */
size_t td_word_run(const uint8_t *s, size_t n);

/* Length of the non-word run at s[0..n) (at least 1 when n > 0 and s does
 * not start with a word character). */
size_t td_nonword_run(const uint8_t *s, size_t n);

enum td_tok_kind { TD_TOK_WORD = 0, TD_TOK_OTHER = 1 };

typedef struct td_token {
	uint32_t len;      /* bytes, 1..TD_MAXTOK */
	uint32_t wordlen;  /* bytes of the word at its start (WORD: len or len-1) */
	int kind;          /* td_tok_kind */
} td_token;

/* Next token at s[0..n) (n > 0). `final` says no more bytes follow; when 0,
 * returns 0 if the token might continue past n (caller must feed more).
 * Returns the token length. */
size_t td_next_token(const uint8_t *s, size_t n, int final, td_token *tok);

#ifdef __cplusplus
}
#endif
#endif
