/* td_edit_int: internal layout of td_edit, shared by td_edit.c and td_edit_words.c. */
#ifndef TD_EDIT_INT_H
#define TD_EDIT_INT_H

#include "td_edit.h"

/* One child of a materialised directory; name is borrowed (archive mapping
 * or the child's own name_own). */
typedef struct dent {
	const char *name;
	uint32_t len;
	td_node node;
} dent;

/* Overlay of one node: exists once the node was touched by a change. */
typedef struct tnode {
	mode_t mode;
	int64_t mtime_sec;
	uint32_t mtime_nsec;
	td_node parent;
	td_entry base;            /* archive entry, TD_NOENTRY for created nodes */
	const char *name;         /* archive name or name_own */
	uint32_t namelen;
	char *name_own;
	uint8_t linked;           /* 0 after unlink / rmdir / rename over it */
	uint8_t dirty;            /* this subtree differs from the archive's */
	uint8_t content_edited;   /* pc/npc describe the text (else: base entry) */
	uint8_t dir_mat;          /* kids hold the listing (else: archive's) */
	uint64_t size;
	td_piece *pc;
	size_t npc, cappc;
	dent *kids;
	size_t nkids, capkids;
} tnode;

struct td_edit {
	const td_archive *a;
	uint32_t nbase;
	td_node next;
	tnode ***top;             /* two-level sparse table of overlays */
	size_t ntop;
	uint8_t *buf;             /* append buffer */
	uint64_t buflen, bufcap;
	td_edit_log_fn log;
	void *logctx;
	int changed;
	int words_strategy;       /* td_words_strategy */
};

/* Overlay of id, NULL when untouched. */
tnode *td_edit_node(const td_edit *ed, td_node id);

/* 1 if id names a node of the state. */
int td_edit_valid(const td_edit *ed, td_node id);

/* Attributes of id (overlay or archive); *tn gets the overlay or NULL. */
int td_edit_attr(const td_edit *ed, td_node id, td_stat *st, const tnode **tn);

#endif
