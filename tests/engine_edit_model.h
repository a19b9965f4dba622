/* engine_edit_model: a plain in-memory tree used as the shadow of td_edit in the edit/journal tests. */
#ifndef ENGINE_EDIT_MODEL_H
#define ENGINE_EDIT_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "td_archive.h"
#include "td_edit.h"

/* One entry: path relative to the root ("" is the root), type 'f', 'd' or
 * 'l', permission bits, and the bytes (file text or symlink target). */
typedef struct mnode {
	char *path;
	int type;
	mode_t perm;
	uint8_t *data;
	size_t len;
} mnode;

typedef struct model {
	mnode *v;
	size_t n, cap;
} model;

uint64_t em_rand(uint64_t *s);

/* Random text of n bytes built from words (ASCII, Latin, CJK, a long word),
 * separators, emoji, invalid and truncated UTF-8. */
void em_text(uint64_t *rs, uint8_t *out, size_t n);

/* Model operations; they mirror POSIX and td_edit semantics. */
void em_init(model *m);
void em_free(model *m);
mnode *em_find(model *m, const char *path);
mnode *em_add(model *m, const char *path, int type, mode_t perm, const void *data, size_t len);
void em_remove(model *m, const char *path);
void em_splice(mnode *f, size_t off, size_t del, const void *ins, size_t inslen);
void em_rename(model *m, const char *from, const char *to);
int em_has_children(model *m, const char *dir);
char *em_join(const char *dir, const char *name);

/* Build an archive at `path` holding the model's tree. Returns td_err. */
int em_write_archive(const model *m, const char *path);

/* Compare the edited tree with the model (Criterion asserts): every entry,
 * type, permission bits, size, whole text, random reads, and lookups. */
void em_compare(const td_edit *ed, const model *m, uint64_t *rs);

/* Compare a plain archive (no edits) with the model. */
void em_compare_archive(const td_archive *a, const model *m);

/* Naive word list of data: offsets and lengths of maximal word runs. */
size_t em_words(const uint8_t *d, size_t n, size_t **offs, size_t **lens);

/* Check nwords / count / search of the file `f` (node), of a directory and
 * of the root against a naive recount of the model, with each counting
 * strategy of td_edit. */
void em_check_words(td_edit *ed, const model *m, const mnode *f, td_node node, uint64_t *rs);

/* A fresh temporary directory (malloc'd path). */
char *em_tmpdir(void);

/* rm -rf dir and free the string. */
void em_rmdir(char *dir);

#endif
