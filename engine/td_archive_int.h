/* td_archive_int: the open-archive structure shared by engine readers (not public). */
#ifndef TD_ARCHIVE_INT_H
#define TD_ARCHIVE_INT_H

#include "td_archive.h"
#include "td_format.h"
#include "td_pack.h"
#include "td_scode.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

struct td_rcache;
struct td_qindex;

/* A symbol sequence (ROOT_SYMS, RULE_SYMS): FOR tiles (versions 1-3) or
 * entropy-coded tiles (version 4, td_scode.h). Read it through
 * td_syms_get / td_syms_range; a coded one decodes a tile a time. */
typedef struct td_syms {
	uint64_t n;
	int coded;
	td_pack p;
	td_scode c;
} td_syms;

/* Symbol i (< n); a coded array gives its alphabet (T + R, out of range)
 * for a symbol that does not decode. */
static inline uint64_t td_syms_get(const td_syms *s, uint64_t i)
{
	return s->coded ? td_scode_get(&s->c, i) : td_pack_get(&s->p, i);
}

/* Symbols [i, i + count) into out. */
static inline void td_syms_range(const td_syms *s, uint64_t i, uint64_t count, uint64_t *out)
{
	if (s->coded)
		td_scode_range(&s->c, i, count, out);
	else
		td_pack_get_range(&s->p, i, count, out);
}

struct td_archive {
	int fd;
	const uint8_t *map;
	uint64_t size;
	const td_disk_section *sec[TD_SEC_MAX];
	td_disk_meta meta;
	td_pack e_nameoff, e_parent, e_mode, e_mtime, e_mtimens, e_size, e_child, e_root, e_gstart, e_nwords;
	td_pack word_off, other_off;
	/* Version 4: word_off's data when they are the W + 1 offsets as plain
	 * uint32_t (a wide packed array with frames 0: td_archive.c, unfront),
	 * which td_flat_build adopts instead of copying; else NULL. */
	const uint32_t *word_off32;
	td_pack rule_len, root_samples, rule_samples;
	td_syms rule_syms, root_syms;
	uint32_t version;                    /* the header's format version */
	void *pack_owned[TD_SEC_MAX];        /* versions 1-2: converted tile tables */
	/* Logical bytes of each section: into the mapping, or for one stored
	 * compressed (TD_SECF_ZSTD) NULL until td_archive_bytes() decodes it
	 * into a heap buffer owned here (under lazy_mu); and their count. Read
	 * through td_archive_bytes(), td_words(), td_other(), td_word_freq(). */
	_Atomic(const uint8_t *) bytes[TD_SEC_MAX];
	uint64_t bytes_size[TD_SEC_MAX];
	pthread_mutex_t lazy_mu;
	/* WORD_FREQ, viewed once its bytes are there (word_freq_ready). */
	td_pack word_freq;
	atomic_int word_freq_ready;
	const td_disk_group *groups;
	uint64_t ngroups;
	uint64_t W, S, R, T;
	unsigned shift;
	_Atomic(struct td_rcache *) rcache; /* see td_rcache.h */
	/* Flat u32 copies of the arrays every token visit reads (see
	 * td_rcache.h: td_flat_get); NULL until built. */
	_Atomic(const uint32_t *) flat;
	const uint32_t *f_word_off, *f_other_off, *f_rule_len;
	/* Flat rule symbols, valid once syms_flat is 1, and (version 4) root
	 * symbols, valid once root_flat is 1 (each: 0 not yet, 1 built, 2 over
	 * the budget). A FOR-packed archive flattens its rule symbols with the
	 * rest at the first read; a coded one decodes tiles where they are
	 * read until tiles decoded a second time add up to an eighth of the
	 * rule symbols or half of the root symbols (td_scode.redecoded), or a
	 * mount warms up (td_syms_build): a one-off read of a small file
	 * decodes only what it reads; a pass in order decodes the root once,
	 * at the speed of a whole decode (four tiles at a time), while the
	 * rules, read at random, are flattened early in it; reading files out
	 * of the archive's order decodes the tiles two files share twice. */
	const uint32_t *f_rule_syms, *f_root_syms;
	atomic_int syms_flat, root_flat;
	/* Symbol table (td_sym_entry): symbol s (< T + R) in one word, the
	 * address and count of its bytes and whether a space follows them (a
	 * word token with its space). Terminals point at their bytes in WORDS
	 * or OTHER, except the words most tokens are, which are copied into
	 * f_sym_pool in order of how often they occur (their lines stay in
	 * cache); a rule's entry is 0 until its expansion is cached
	 * (td_rcache.h), then points at it. One load gives any short symbol,
	 * with no test of what kind it is. NULL when not built (over the cache
	 * budget). */
	_Atomic(uint64_t) *f_sym;
	uint8_t *f_sym_pool;
	/* Where each symbol occurs (td_rcache.h: td_qindex_get), or NULL;
	 * qindex_state 0 not tried yet, 1 built, 2 not possible. */
	_Atomic(const struct td_qindex *) qindex;
	atomic_int qindex_state;
	/* The vocabulary's tree for fuzzy search (td_fuzzy.c), or NULL until
	 * built; td_fuzzy_free frees it at close. */
	_Atomic(void *) fuzzy;
	/* Root symbols under each entry (td_query.c), or NULL until built. */
	_Atomic(uint64_t *) scope_roots;
	uint64_t rcache_budget;              /* bytes; 0 disables */
	atomic_uint_fast64_t walk_bytes;     /* asked of walks before the tables (td_flat_after) */
	/* td_archive_will_read: the fewest bytes that make it sweep the rules
	 * (0 until computed, UINT64_MAX when they do not fit the budget);
	 * swept is 1 once a sweep or td_archive_warm has started, -1 when a
	 * sweep found rule sweep_bad's lengths not adding up. */
	atomic_uint_fast64_t sweep_min;
	atomic_int swept;
	uint64_t sweep_bad;
	/* The large sections read in place (root, rules, offsets) are
	 * checksummed once, before the first read or query that uses them
	 * (td_data_check): 0 not yet, 1 good, -1 damaged (data_bad names it).
	 * The first readers wait on check_mu for one check (never on lazy_mu,
	 * which they take only for the dictionary's build after it). */
	atomic_int data_state;
	unsigned data_bad;
	pthread_mutex_t check_mu;
	pthread_mutex_t flat_mu;             /* td_rcache.c's table builds */
	/* Bit id set once section id's checksum matched (by td_data_check or,
	 * lock-free, td_archive_check_sums on a background thread): a check
	 * skips it. */
	_Atomic(uint32_t) sec_ok;
	/* The mapping belongs to a parent (a shard inside a version 5
	 * container, td_archive_open_mem): close leaves it and fd alone. */
	int borrowed;
	const td_disk_section *sec5[TD_SEC5_N]; /* TD_SEC5_SHARDS .. TD_SEC5_P_START */
	const td_disk_section *sec_fz;       /* TD_SEC5_FUZZY, or NULL (td_fzix.h) */
	const td_disk_section *sec_at;       /* TD_SEC5_ATAB, or NULL (td_atab.h) */
	const td_disk_section *sec_vt;       /* TD_SEC5_VECTOR, or NULL (td_vtab.h) */
	/* Version 5 (td_shard.c): the container's shards, opened on first
	 * touch; NULL in versions 1-4. */
	struct td_shards *sh;
	/* 1 once every section's checksum is known right (td_archive_check_sums,
	 * or a shard whose whole image matched its sum in the container's
	 * table): td_data_check then only builds what it builds. */
	atomic_int sums_ok;
	/* A large tree is checked a directory at a time (td_verify.c,
	 * td_tree_vouch): tree_lazy is 1 then, and dir_ok[d] gets TD_DIR_CHECKED
	 * once directory d's children passed, each of those children
	 * TD_DIR_LISTED (vouched for: listed by a checked directory); lock-free:
	 * a check reads only the mapping, so two threads checking one
	 * directory agree. */
	int tree_lazy;
	atomic_uchar *dir_ok;
#define TD_DIR_CHECKED 1u
#define TD_DIR_LISTED 2u
	/* NAMES stored compressed, decoded as far as readers have asked
	 * (td_names; entries are numbered breadth-first, so the first
	 * listings need the first names only): names_buf[0, names_done) is
	 * decoded (acquire/release); the rest decodes under lazy_mu through
	 * names_ds, names_in bytes of the frame consumed. Once all of it is
	 * decoded, bytes[TD_SEC_NAMES] = names_buf. names_bad: the frame
	 * failed to decode (every later call fails). */
	uint8_t *names_buf;
	void *names_ds;
	uint64_t names_in;
	uint64_t names_fsz;                  /* the frame's bytes (frame_ok), once names_buf is set */
	atomic_uint_fast64_t names_done;
	int names_bad;
	/* The stored ranked inverted index (td_postings.c), or NULL; checked
	 * (checksum, header, offsets) once, under check_mu, at first use:
	 * post_state 0 not yet, 1 good, -1 damaged. */
	const td_disk_section *post;
	atomic_int post_state;
	td_pack post_off;
	const uint64_t *post_gsum;           /* a checksum a group of 2^post_shift words */
	const uint64_t *post_mid;            /* a bit an entry: its text ends inside a word */
	unsigned post_shift;
	const uint8_t *post_data;
	uint64_t post_dsize, post_nitems;
};

/* Open the archive image map[0, size) inside a mapping the caller keeps
 * for the archive's lifetime (a shard of a version 5 container), with the
 * checks of td_archive_open. Errors as td_archive_open. */
int td_archive_open_mem(const uint8_t *map, uint64_t size, unsigned flags, td_archive **out);

/* 1 for a version 5 container (reads go through td_shard.h). */
static inline int td_sharded(const td_archive *a)
{
	return a->sh != NULL;
}

void td_fuzzy_free(td_archive *a);

/* TD_OK once every section read in place has matched its checksum (the
 * first call checks them: O(archive size), once per open), else
 * TD_ECORRUPT naming the damaged section, on every call. Readers call it
 * before they descend into the grammar, so damage is an error, never wrong
 * bytes. */
int td_data_check_slow(const td_archive *a);

/* td_data_check's checksums of the sections read in place, without the
 * dictionary's build (for a reader that needs no word bytes nor word
 * offsets: e.g. a phrase count whose word ids come from the postings):
 * TD_OK, or TD_ECORRUPT naming the damaged section. Thread-safe. */
int td_data_check_sums(const td_archive *a);

/* XXH3-64 of p[0, n) into *sum and 0, or 1 without a sum once *stop
 * (may be NULL; relaxed loads) is nonzero, looked at every 16 MiB. */
int td_hash_stoppable(const uint8_t *p, uint64_t n, const volatile int *stop, uint64_t *sum);

/* Record that section id's checksum matched (lock-free; any thread). */
void td_sec_mark_ok(const td_archive *a, unsigned id);
static inline int td_data_check(const td_archive *a)
{
	if (atomic_load_explicit(&a->data_state, memory_order_acquire) == 1)
		return TD_OK;
	return td_data_check_slow(a);
}

/* Check the entry tree, O(entries), once at open (td_verify.c): names
 * (not empty, '.' or '..', no '/' or NUL, at most TD_MAXNAME bytes,
 * sorted and distinct within a directory, as lookup's bisection needs),
 * types, parents before children and listing them, children ranges, text
 * ranges against sizes (none for directories; 1..TD_MAXPATH bytes for a
 * symlink target). Decodes NAMES. TD_OK or TD_ECORRUPT with a detail
 * naming the entry (number and path). */
int td_tree_check(const td_archive *a);

/* Trees of more entries than this are checked lazily: at open only what
 * holds the whole tree together (the root, the children ranges' ends, the
 * texts' ends), then each directory's children the first time the
 * directory is listed or an entry under it is reached (td_tree_vouch). A
 * variable so tests can make a small archive lazy. */
extern uint32_t td_tree_eager_max;

/* Open's part of the tree check for a lazy tree (O(1)); sets tree_lazy
 * and dir_ok. TD_OK, TD_ECORRUPT, TD_ENOMEM. */
int td_tree_lazy_setup(td_archive *a);

/* For a lazy tree: TD_OK once entry e is known to be listed by its parent
 * and every directory from the root down to that parent has had its
 * children checked as td_tree_check checks them (each directory once);
 * TD_ECORRUPT with td_tree_check's message otherwise (on every call).
 * TD_OK at once for an eagerly checked tree. Thread-safe. */
int td_tree_vouch(const td_archive *a, td_entry e);

/* td_tree_vouch, its common answer inline: e (< nentries) listed by a
 * checked directory already. */
static inline int td_tree_vouched(const td_archive *a, td_entry e)
{
	if (!a->tree_lazy || (atomic_load_explicit(&a->dir_ok[e], memory_order_acquire) & TD_DIR_LISTED))
		return TD_OK;
	return td_tree_vouch(a, e);
}

/* For a lazy tree: td_tree_vouch(d), then directory d's children
 * checked (once). TD_OK at once for an eagerly checked tree. */
int td_tree_dir(const td_archive *a, td_entry d);

/* The entry names (NAMES' logical bytes, *nb of them), decoded at least
 * up to byte `hi` (all of them when hi >= *nb): a compressed NAMES frame
 * is checksummed on the first call and then decoded only as far as asked.
 * NULL with td_fail's detail when it is damaged. Thread-safe. */
const char *td_names(const td_archive *a, uint64_t hi, uint64_t *nb);

/* td_archive_path without td_tree_vouch (for the checker's messages). */
int td_path_raw(const td_archive *a, td_entry e, char *buf, size_t cap);

/* memcpy for the short copies of most tokens, inlined without over-reading:
 * two possibly overlapping fixed-size moves cover any length in a range. */
static inline void td_copy(uint8_t *d, const uint8_t *s, size_t n)
{
	if (n >= 8 && n <= 16) {
		uint64_t x, y;
		memcpy(&x, s, 8);
		memcpy(&y, s + n - 8, 8);
		memcpy(d, &x, 8);
		memcpy(d + n - 8, &y, 8);
	} else if (n >= 4 && n < 8) {
		uint32_t x, y;
		memcpy(&x, s, 4);
		memcpy(&y, s + n - 4, 4);
		memcpy(d, &x, 4);
		memcpy(d + n - 4, &y, 4);
	} else if (n < 4) {
		for (size_t i = 0; i < n; i++)
			d[i] = s[i];
	} else {
		memcpy(d, s, n);
	}
}

/* An f_sym entry: the address in bits 0-47, the byte count in bits 48-62
 * (0: no entry; take the checked path), bit 63 set when a space follows
 * (it is not among the bytes). The bytes may be read TD_SYM_PAD bytes past
 * their start, or their end if it is later, so readers copy short symbols
 * with fixed-size moves. */
#define TD_SYM_PAD 32u
#define TD_SYM_ADDR_BITS 48u
#define TD_SYM_MAXLEN 0x7fffu

/* Copy TD_SYM_PAD bytes from s to d, which may overlap (a symbol's bytes
 * read past their end may run into the expansion being written): every
 * load before any store, as an inlined memcpy of this size does anyway. */
static inline void td_sym_move(uint8_t *d, const uint8_t *s)
{
	uint8_t t[TD_SYM_PAD];
	memcpy(t, s, TD_SYM_PAD);
	memcpy(d, t, TD_SYM_PAD);
}

static inline uint64_t td_sym_entry(const td_archive *a, uint64_t s)
{
	return atomic_load_explicit(&a->f_sym[s], memory_order_acquire);
}

/* Non-zero once a->f_sym is published: the table's builder stores it with
 * release after its entries and pool are written (td_rcache.c), so a reader
 * that finds it set with this acquire load sees them (a plain load is a
 * data race: on weaker memory orders than x86's, stale pool bytes). A
 * thread that has seen it set may then use a->f_sym directly. */
static inline int td_fsym_ready(const td_archive *a)
{
	return __atomic_load_n(&a->f_sym, __ATOMIC_ACQUIRE) != NULL;
}

static inline uint32_t td_sym_elen(uint64_t e)
{
	return (uint32_t)(e >> TD_SYM_ADDR_BITS) & TD_SYM_MAXLEN;
}

static inline uint32_t td_sym_espace(uint64_t e)
{
	return (uint32_t)(e >> 63);
}

static inline const uint8_t *td_sym_eptr(uint64_t e)
{
	return (const uint8_t *)(uintptr_t)(e & ((UINT64_C(1) << TD_SYM_ADDR_BITS) - 1));
}

/* Write the symbol of entry e (its bytes, then its space) at d, where
 * room bytes, at least its length with the space, may be written (bytes
 * past the symbol are scratch: with TD_SYM_PAD of room, a short one is one
 * fixed-size move). Returns its length with the space. */
static inline uint32_t td_sym_write(uint8_t *d, size_t room, uint64_t e)
{
	uint32_t l = td_sym_elen(e), sp = td_sym_espace(e);
	if (l < TD_SYM_PAD && room >= TD_SYM_PAD) {
		td_sym_move(d, td_sym_eptr(e)); /* readable: see TD_SYM_PAD */
		d[l] = ' ';                     /* its space, or overwritten next */
	} else {
		td_copy(d, td_sym_eptr(e), l);
		if (sp)
			d[l] = ' ';
	}
	return l + sp;
}

/* The entry for len (1..TD_SYM_MAXLEN) bytes at p, then a space when
 * space is 1; 0 when they do not fit one (an address over 48 bits). */
static inline uint64_t td_sym_make(const uint8_t *p, uint64_t len, unsigned space)
{
	uint64_t x = (uint64_t)(uintptr_t)p;
	if (x >> TD_SYM_ADDR_BITS || len == 0 || len > TD_SYM_MAXLEN)
		return 0;
	return x | len << TD_SYM_ADDR_BITS | (uint64_t)(space & 1u) << 63;
}

/* Value i of a packed array, through its flat copy when one is built. */
#define TD_FLAT(a, flatp, pack, i) ((a)->flat ? (uint64_t)(a)->flatp[i] : td_pack_get(&(a)->pack, (i)))

/* Expanded byte length of symbol s (s < T + R, checked by callers). */
static inline uint64_t td_sym_len(const td_archive *a, uint64_t s)
{
	if (s < 2 * a->W)
		return TD_FLAT(a, f_word_off, word_off, (s >> 1) + 1) - TD_FLAT(a, f_word_off, word_off, s >> 1) +
		       (s & 1);
	if (s < a->T)
		return TD_FLAT(a, f_other_off, other_off, s - 2 * a->W + 1) -
		       TD_FLAT(a, f_other_off, other_off, s - 2 * a->W);
	return TD_FLAT(a, f_rule_len, rule_len, s - a->T);
}

static inline int td_syms_flat(const td_archive *a)
{
	return atomic_load_explicit(&a->syms_flat, memory_order_acquire) == 1;
}

static inline int td_root_flat(const td_archive *a)
{
	return atomic_load_explicit(&a->root_flat, memory_order_acquire) == 1;
}

/* Root symbol i (< nroot), through its flat copy when one is built. */
static inline uint64_t td_root_sym(const td_archive *a, uint64_t i)
{
	return td_root_flat(a) ? a->f_root_syms[i] : td_syms_get(&a->root_syms, i);
}

/* Root symbols [i, i + count) into out. */
static inline void td_root_range(const td_archive *a, uint64_t i, uint64_t count, uint64_t *out)
{
	if (td_root_flat(a))
		for (uint64_t k = 0; k < count; k++)
			out[k] = a->f_root_syms[i + k];
	else
		td_syms_range(&a->root_syms, i, count, out);
}

/* Symbol i of RULE_SYMS. */
static inline uint64_t td_rule_sym(const td_archive *a, uint64_t i)
{
	return td_syms_flat(a) ? a->f_rule_syms[i] : td_syms_get(&a->rule_syms, i);
}

/* Decoded copies of compressed sections end with this many zero bytes, so
 * a reader may load 16 bytes (TD_SYM_PAD for f_sym) from any byte of them. */
#define TD_BYTES_PAD 32u

/* 1 if 16 bytes may be loaded from p, which points into a section's bytes
 * (the mapping, or a padded decoded copy). */
static inline int td_load16_ok(const td_archive *a, const uint8_t *p)
{
	if (p >= a->map && p < a->map + a->size)
		return p + 16 <= a->map + a->size;
	return 1;
}

/* Logical bytes of WORDS / OTHER (decoded on first use); NULL if a
 * compressed section does not decode (td_fail has the detail). */
static inline const uint8_t *td_words(const td_archive *a)
{
	const uint8_t *p = atomic_load_explicit(&a->bytes[TD_SEC_WORDS], memory_order_acquire);
	uint64_t n;
	return p ? p : (const uint8_t *)td_archive_bytes(a, TD_SEC_WORDS, &n);
}

static inline const uint8_t *td_other(const td_archive *a)
{
	const uint8_t *p = atomic_load_explicit(&a->bytes[TD_SEC_OTHER], memory_order_acquire);
	uint64_t n;
	return p ? p : (const uint8_t *)td_archive_bytes(a, TD_SEC_OTHER, &n);
}

/* WORD_FREQ (its view is set up on first use when stored compressed);
 * NULL if it does not decode (td_fail has the detail). */
const td_pack *td_word_freq_load(const td_archive *a);
static inline const td_pack *td_word_freq(const td_archive *a)
{
	if (atomic_load_explicit(&a->word_freq_ready, memory_order_acquire))
		return &a->word_freq;
	return td_word_freq_load(a);
}

/* Bytes of terminal t (< T): pointer and length; NULL if out of bounds. A
 * word token with a space has its ' ' reported via *space = 1 (the space is
 * not stored in WORDS). */
static inline const uint8_t *td_term_bytes(const td_archive *a, uint64_t t, uint32_t *len, int *space)
{
	uint64_t lo, hi;
	if (t < 2 * a->W) {
		lo = TD_FLAT(a, f_word_off, word_off, t >> 1);
		hi = TD_FLAT(a, f_word_off, word_off, (t >> 1) + 1);
		*space = (int)(t & 1);
		const uint8_t *w = td_words(a);
		if (!w || lo > hi || hi > a->bytes_size[TD_SEC_WORDS] || hi - lo > TD_MAXTOK)
			return NULL;
		*len = (uint32_t)(hi - lo);
		return w + lo;
	}
	lo = TD_FLAT(a, f_other_off, other_off, t - 2 * a->W);
	hi = TD_FLAT(a, f_other_off, other_off, t - 2 * a->W + 1);
	*space = 0;
	const uint8_t *o = td_other(a);
	if (!o || lo > hi || hi > a->bytes_size[TD_SEC_OTHER] || hi - lo > TD_MAXTOK + 1)
		return NULL;
	*len = (uint32_t)(hi - lo);
	return o + lo;
}

/* Right-hand side of rule r (< R): symbols [*start, *start + *len) of
 * RULE_SYMS. Returns 0, or -1 when the group table is inconsistent. */
static inline int td_rule_rhs(const td_archive *a, uint64_t r, uint64_t *start, uint32_t *len)
{
	uint64_t lo = 0, hi = a->ngroups;
	while (hi - lo > 1) {
		uint64_t mid = (lo + hi) / 2;
		if (a->groups[mid].first_rule <= r)
			lo = mid;
		else
			hi = mid;
	}
	const td_disk_group *g = &a->groups[lo];
	if (g->first_rule > r)
		return -1;
	/* No wrap-around here: setup() checked every group's rules against
	 * RULE_SYMS without overflow (this runs at every rule descent, so it
	 * stays a multiply and a compare). */
	*start = g->first_sym + (r - g->first_rule) * g->len;
	*len = g->len;
	if (*start + *len > a->rule_syms.n)
		return -1;
	return 0;
}

/* For a rule longer than 2^shift symbols: index of its first offset sample
 * in RULE_SAMPLES and the number of samples; 0 samples for short rules. */
static inline uint64_t td_rule_samples(const td_archive *a, uint64_t r, uint32_t len, uint64_t *first)
{
	if (len <= (UINT32_C(1) << a->shift))
		return 0;
	uint64_t lo = 0, hi = a->ngroups;
	while (hi - lo > 1) {
		uint64_t mid = (lo + hi) / 2;
		if (a->groups[mid].first_rule <= r)
			lo = mid;
		else
			hi = mid;
	}
	uint64_t per = ((uint64_t)len + (UINT64_C(1) << a->shift) - 1) >> a->shift;
	*first = a->groups[lo].first_sample + (r - a->groups[lo].first_rule) * per;
	return per;
}

/* The bytes of w equal to a or b (each repeated in every byte): the
 * lowest set bit marks the first such byte exactly (bits above it may be
 * false: a borrow runs up from an equal byte, never from another one). */
static inline uint64_t td_span_hits(uint64_t w, uint64_t a, uint64_t b)
{
	const uint64_t ones = UINT64_C(0x0101010101010101), highs = UINT64_C(0x8080808080808080);
	const uint64_t x = w ^ a, y = w ^ b;
	return ((x - ones) & ~x & highs) | ((y - ones) & ~y & highs);
}

/* The index of the first byte of p[0..n) equal to a or b, or n, reading
 * only p[0..n): eight bytes at a time, the last eight overlapping the
 * ones before; a short span as two overlapping halves (names are short:
 * no loop a byte, cheaper than two memchr calls). */
static inline size_t td_span_find2(const char *p, size_t n, char a, char b)
{
	const uint64_t ones = UINT64_C(0x0101010101010101);
	const uint64_t ra = ones * (uint8_t)a, rb = ones * (uint8_t)b;
	uint64_t w, m;
	if (n >= 8) {
		size_t i = 0;
		for (; i + 8 <= n; i += 8) {
			memcpy(&w, p + i, 8);
			if ((m = td_span_hits(w, ra, rb)))
				return i + (size_t)__builtin_ctzll(m) / 8;
		}
		if (i == n)
			return n;
		memcpy(&w, p + n - 8, 8); /* its first bytes were clear above */
		m = td_span_hits(w, ra, rb);
		return m ? n - 8 + (size_t)__builtin_ctzll(m) / 8 : n;
	}
	if (n >= 4) { /* [0, 4) in the low half, [n - 4, n) in the high */
		uint32_t lo, hi;
		memcpy(&lo, p, 4);
		memcpy(&hi, p + n - 4, 4);
		m = td_span_hits(lo | (uint64_t)hi << 32, ra, rb);
		if (m & UINT64_C(0xffffffff))
			return (size_t)__builtin_ctzll(m) / 8;
		return m ? n - 4 + ((size_t)__builtin_ctzll(m) - 32) / 8 : n;
	}
	for (size_t i = 0; i < n; i++)
		if (p[i] == a || p[i] == b)
			return i;
	return n;
}

#endif
