/* td_format: the on-disk layout of a tadoc archive (version 4). gpu/ reads this too. */
#ifndef TD_FORMAT_H
#define TD_FORMAT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * An archive is one little-endian file, every part 8-byte aligned:
 *
 *   td_disk_header        at offset 0 (64 bytes)
 *   sections ...          each one contiguous, in any order
 *   td_disk_section[n]    the section table, at header.sectab_off
 *
 * The header carries an XXH3-64 of its first 56 bytes and of the section
 * table; each section table entry carries the XXH3-64 of its section. Opening
 * checks the header, the table and the small sections (O(1) in corpus size);
 * `tadoc verify` checks every section and every invariant.
 *
 * Tokens. The text of every file is a sequence of tokens that covers every
 * byte (decision 1):
 *   - a word token: a maximal run of word characters (decision 2: Python 3
 *     `\w`, on strictly decoded UTF-8), optionally followed by one ' ';
 *   - an other token: a maximal run of non-word bytes (minus the ' ' a word
 *     took), or a piece of a word longer than TD_MAXTOK bytes.
 * Runs longer than TD_MAXTOK bytes are cut into TD_MAXTOK-byte pieces.
 *
 * Symbols. Grammar symbols are integers:
 *   s <  2W              word token: word s/2, plus ' ' when s is odd
 *   2W <= s < T = 2W+S   other token s-2W
 *   T  <= s < T+R        rule s-T
 * where W = distinct words (sorted bytewise, so lookup is binary search),
 * S = distinct other tokens, R = rules.
 *
 * Rules. The right-hand sides of all rules are concatenated in RULE_SYMS.
 * Rules are numbered by ascending right-hand-side length; RULE_GROUPS has one
 * td_disk_group per distinct length: rules [first_rule, next.first_rule) each
 * have `len` symbols, rule k of the group starting at first_sym + (k -
 * first_rule) * len. RULE_LEN holds each rule's expanded byte length;
 * long rules also have offset samples (RULE_SAMPLES, see td_disk_group).
 * Every rule expands to at most meta.max_depth levels.
 *
 * Compressed byte sections (version 2). A section whose table entry has
 * TD_SECF_ZSTD set holds one zstd frame (with its content size in the frame
 * header) followed by at most 7 zero bytes of alignment; its logical bytes
 * are the frame's content. Only NAMES, WORDS, OTHER (read through their
 * offset arrays, which stay bit-packed) and WORD_FREQ (a packed array read
 * only by whole-corpus counts) are written this way, and readers decode
 * them on first use (why: engine/README.md, decision 3). Version 1
 * archives (no flags) still open.
 *
 * Packed arrays (version 3). Every "packed" section is one td_pack.h
 * array: 8-byte tile headers with a group offset per 8 tiles, and a linear
 * frame for ascending arrays. Versions 1 and 2 stored 16-byte tile headers
 * (td_disk_tile_v1) and no frame line; their tile tables are converted on
 * open (O(tiles), the one exception to an O(1) open) and the GPU leaves
 * them to the CPU.
 *
 * Coded symbols and words (version 4). ROOT_SYMS and RULE_SYMS are
 * entropy-coded symbol arrays (td_scode.h): a prefix code per context
 * (the kind of the symbol before), tiles of 2^TD_ROOT_TILE_SHIFT and
 * 2^TD_RULE_TILE_SHIFT symbols with a bit offset each, alphabet T + R (1
 * when that is 0), class bounds 2W and T. WORDS holds the sorted words
 * front-coded (per word: one byte, the length of the prefix it shares with
 * the word before, then the rest of its bytes and '\n'), and WORD_OFF is
 * empty: readers rebuild the plain words and their offsets when they
 * decode WORDS. td_archive_bytes() gives every section in its version 3
 * form (plain words, FOR-packed offsets and symbols), which gpu/ uploads.
 * Readers decode tiles where they read them, and a sequence
 * whole into a flat array once that pays, within the cache budget
 * (td_rcache.h: td_syms_build); version 3 is still written on request
 * (td_writer_opts.format) and read.
 *
 * Files. Entries (directories, files, symlinks) are numbered breadth-first
 * from the root directory (entry 0); the children of a directory are
 * contiguous and sorted bytewise by name, so they are found by binary search.
 * Per entry columns are packed arrays (td_pack.h). A file's text is the root
 * symbols ROOT_SYMS[E_ROOT[i] .. E_ROOT[i+1]); a symlink's target is stored
 * the same way, as its "text". Directories have an empty root range.
 * E_GSTART[i] is the corpus-wide byte offset where entry i's text starts.
 * ROOT_SAMPLES[k] is the corpus-wide byte offset at which root element
 * k << meta.sample_shift starts, so a read seeks with one binary search and
 * at most 2^sample_shift length look-ups, instead of storing an offset for
 * every root element (a space decision: engine/README.md, decision 4).
 */

#define TD_MAGIC "TADOC\0\x1a\x01"
#define TD_MAGIC_LEN 8
#define TD_VERSION 4u        /* written by td_writer; versions 1 to 3 are still read (3 also written on request) */
#define TD_VERSION_MIN 1u
#define TD_VERSION_SHARDED 5u /* a container of format 4 shards (td_build.h), see below */
#define TD_VERSION_MAX 5u     /* newest version read */
#define TD_MAXTOK 255u       /* longest token in bytes */
#define TD_MAXNAME 255u      /* longest path component */
#define TD_MAXPATH 4095u     /* longest relative path */
#define TD_MAXDEPTH 64u      /* bound on rule nesting */
#define TD_ROOT_TILE_SHIFT 7u /* version 4: root symbols a coded tile, log2 */
#define TD_RULE_TILE_SHIFT 5u /* version 4: rule symbols a coded tile, log2 */

typedef struct td_disk_header {
	char magic[8];
	uint32_t version;
	uint32_t header_size;     /* sizeof(td_disk_header) */
	uint64_t file_size;       /* total archive bytes */
	uint32_t nsections;
	uint32_t flags;           /* 0 in version 1 */
	uint64_t sectab_off;
	uint64_t sectab_sum;      /* XXH3-64 of the section table */
	uint64_t reserved[2];
	uint64_t header_sum;      /* XXH3-64 of bytes [0, 56) */
} td_disk_header;

typedef struct td_disk_section {
	uint32_t id;              /* td_section_id */
	uint32_t flags;           /* TD_SECF_*; 0 in version 1 */
	uint64_t off;
	uint64_t size;
	uint64_t sum;             /* XXH3-64 of the section bytes */
} td_disk_section;

#define TD_SECF_ZSTD 1u     /* section bytes are one zstd frame (see above) */
/* WORDS of version 4 and later only: its front-coded records split in two
 * runs, the W prefix-length bytes first, then each word's rest and '\n'
 * (read since branch bspeed8; written by the shards of format 5 archives
 * whose words a test finds smaller in it: td_writer_opts.words_split; readers
 * before refuse the flag; without it each record is its prefix length, its
 * rest and '\n') */
#define TD_SECF_SPLIT 2u

typedef enum td_section_id {
	TD_SEC_META = 1,          /* td_disk_meta */
	TD_SEC_NAMES = 2,         /* entry names, concatenated (no separators) */
	TD_SEC_E_NAMEOFF = 3,     /* packed, nentries+1 offsets into NAMES */
	TD_SEC_E_PARENT = 4,      /* packed, parent entry (root: 0) */
	TD_SEC_E_MODE = 5,        /* packed, st_mode (type and permission bits) */
	TD_SEC_E_MTIME = 6,       /* packed, mtime seconds + 2^40 (so >= 0) */
	TD_SEC_E_MTIMENS = 7,     /* packed, mtime nanoseconds */
	TD_SEC_E_SIZE = 8,        /* packed, byte size of the text */
	TD_SEC_E_CHILD = 9,       /* packed, nentries+1: children of entry i are
	                             entries [E_CHILD[i], E_CHILD[i+1]) */
	TD_SEC_E_ROOT = 10,       /* packed, nentries+1 root ranges */
	TD_SEC_E_GSTART = 11,     /* packed, nentries+1 corpus offsets */
	TD_SEC_E_NWORDS = 12,     /* packed, word tokens in the entry's text */
	TD_SEC_WORDS = 13,        /* distinct words, sorted, concatenated */
	TD_SEC_WORD_OFF = 14,     /* packed, W+1 offsets into WORDS (version 4: empty, derived) */
	TD_SEC_WORD_FREQ = 15,    /* packed, W corpus-wide occurrence counts */
	TD_SEC_OTHER = 16,        /* other tokens, concatenated */
	TD_SEC_OTHER_OFF = 17,    /* packed, S+1 offsets into OTHER */
	TD_SEC_RULE_SYMS = 18,    /* packed (version 4: td_scode), all right-hand sides */
	TD_SEC_RULE_GROUPS = 19,  /* td_disk_group[ngroups] */
	TD_SEC_RULE_LEN = 20,     /* packed, expanded byte length per rule */
	TD_SEC_ROOT_SYMS = 21,    /* packed (version 4: td_scode), root sequence of every file */
	TD_SEC_ROOT_SAMPLES = 22, /* packed, see above */
	TD_SEC_RULE_SAMPLES = 23, /* packed, see td_disk_group */
	TD_SEC_MAX = 24
} td_section_id;

/*
 * Postings (optional, format 4 and the shards of format 5). Section id
 * TD_SEC_POSTINGS, outside 1..TD_SEC_MAX-1, so readers that do not know it
 * skip it (the section table may hold ids they do not know). It holds, for
 * every word id, the regular files of the archive whose text holds the
 * word, with the word's count there: the ranked inverted index stored
 * instead of computed. Layout (little-endian, 8-byte aligned):
 *
 *   td_disk_postings                  the header below
 *   packed array, W + 1 values        byte offset of word w's block in data
 *                                     (ascending; the last one is data's size)
 *   u64 gsum[ngroups]                 a checksum a group of 2^group_shift words
 *   u64 mid[ceil(nentries / 64)]      bit e: entry e is a file whose last byte is
 *                                     not an ASCII non-word byte (format 5: a
 *                                     cut after it would be inside a word)
 *   u8 data[]                         the blocks, word after word
 *
 * gsum[g] is XXH3-64, seeded with the XXH3-64 of the group's offsets (words
 * first .. last, last = min(W, first + 2^group_shift), as u64 values), of
 * its blocks' bytes data[off[first], off[last]): a query checks the groups
 * it reads, not the whole section (which can be larger than the rest of the
 * archive); the section table's checksum covers it all (`tadoc verify`).
 *
 * Word w's block: one byte L (1..TD_MAXTOK), the word's L bytes (so a
 * query finds its block by binary search without the dictionary), a
 * varint df (files holding it; 0 for a word only symlink targets hold), then df items in ascending entry
 * order: a varint (gap << 1 | (count == 1)), gap = entry - previous entry
 * (the previous one is 0 before the first; so gap >= 1), and for a count
 * above 1 a varint count - 2. Varints are LEB128 (7 bits a byte, low
 * first, at most 10 bytes). Words longer than TD_MAXTOK are not in the
 * dictionary and have no block; counts of a file are those of the whole
 * file (format 5: of the piece the shard holds).
 */
#define TD_SEC_POSTINGS 40u
#define TD_POSTINGS_VERSION 1u
#define TD_POSTINGS_GROUP_SHIFT 6u

typedef struct td_disk_postings {
	uint32_t version;         /* TD_POSTINGS_VERSION */
	uint32_t group_shift;     /* words a checksum group, log2 */
	uint64_t nwords;          /* W of the archive */
	uint64_t nitems;          /* (word, file) pairs */
	uint64_t off_size;        /* bytes of the packed offset array that follows */
	uint64_t ngroups;         /* ceil(W / 2^group_shift) */
	uint64_t sums_sum;        /* XXH3-64 of gsum[] and mid[] */
	uint64_t nentries;        /* entries of the archive (bits of mid[]) */
	uint64_t header_sum;      /* XXH3-64 of the 56 bytes before it */
} td_disk_postings;

/* The sections a version 2 archive stores as zstd frames (TD_SECF_ZSTD):
 * the writer compresses exactly these, readers refuse the flag elsewhere. */
static inline int td_sec_zstd(unsigned id)
{
	return id == TD_SEC_NAMES || id == TD_SEC_WORDS || id == TD_SEC_OTHER || id == TD_SEC_WORD_FREQ;
}
typedef struct td_disk_meta {
	uint64_t nentries;
	uint64_t nwords;          /* W */
	uint64_t nother;          /* S */
	uint64_t nrules;          /* R */
	uint64_t nrulesyms;       /* symbols in RULE_SYMS */
	uint64_t ngroups;
	uint64_t nroot;           /* symbols in ROOT_SYMS */
	uint64_t sample_shift;
	uint64_t nsamples;
	uint64_t max_depth;       /* deepest rule nesting (1 = rule of terminals) */
	uint64_t total_bytes;     /* sum of all entry text sizes */
	uint64_t total_words;     /* words in the corpus (long ones included) */
	uint64_t build_time;      /* seconds since the epoch */
	uint64_t nrulesamples;    /* values in RULE_SAMPLES */
	uint64_t nlongwords;      /* words longer than TD_MAXTOK (not in WORDS) */
	uint64_t shard_size;      /* version 5 container: the shard size (text bytes) its
	                             newest shards were cut at; 0 in older ones and in
	                             other versions (the field was reserved, always 0) */
} td_disk_meta;

/* Rules [first_rule, next group's first_rule) have `len` symbols each.
 * Rules longer than 2^sample_shift symbols also have offset samples, like
 * the root: rule k of the group has ceil(len / 2^shift) values in
 * RULE_SAMPLES from first_sample + (k - first_rule) * ceil(len / 2^shift),
 * value j being the byte offset, within the rule's expansion, at which its
 * symbol j << shift starts. A seek inside a long (inlined) rule is then one
 * binary search plus at most 2^shift length look-ups. */
typedef struct td_disk_group {
	uint32_t first_rule;
	uint32_t len;
	uint64_t first_sym;
	uint64_t first_sample;    /* UINT64_MAX when len <= 2^sample_shift */
} td_disk_group;

#define TD_MTIME_BIAS (INT64_C(1) << 40)

/*
 * Version 5: shards. A version 5 archive is a container, laid out like
 * version 4 (the same header, section table and checksums), whose grammar
 * sections are empty (W = S = R = 0, no root symbols) and whose entry
 * sections hold the whole tree: stat, name, children, lookup and path work
 * on it unchanged. E_SIZE and E_NWORDS hold every file's true size and word
 * count, meta.total_bytes and meta.total_words the corpus's; E_ROOT and
 * E_GSTART are all 0. The text lives in shards: each one a complete
 * version 4 archive image, stored whole inside the container (8-byte
 * aligned), over a subset of the files (parent
 * directories implied, see below). Five more sections say where:
 *
 *   TD_SEC5_SHARDS     td_disk_shard[nshards], in build order
 *   TD_SEC5_PIECE_OFF  packed, nentries+1: entry e's pieces are pieces
 *                      PIECE_OFF[e] .. PIECE_OFF[e+1]-1
 *   TD_SEC5_P_SHARD    packed, npieces: piece i's shard,
 *   TD_SEC5_P_LOCAL    packed, npieces: its entry there,
 *   TD_SEC5_P_START    packed, npieces: its start (td_disk_piece)
 *
 * A shard's tree has the shape of the part of the whole tree it holds, but
 * its names are not the real ones (those are in the container only): every
 * entry of a shard is named by a number unique in the archive build (lower
 * case hex), its files have mode 0644 and every mtime is the build time; so
 * names, modes and times are not stored twice. Readers never use a shard's
 * names, modes or times.
 *
 * A file's pieces are the parts of its text in order: piece k holds bytes
 * [start_k, start_{k+1}) (the last one up to the file's size) as entry
 * `local` of shard `shard`. A file larger than a shard is cut, after an
 * ASCII byte that is not a word character (so no word and no UTF-8
 * sequence spans a cut, and counts add up), into pieces in consecutive
 * shards. Readers only need the pieces in the order of their bytes, each
 * in another shard than the one before: a per-shard compaction
 * (td_compact.h) keeps a file's pieces in kept shards and puts the parts
 * it rebuilds in new shards after them. A symlink has one piece (its
 * target). A directory's pieces are
 * the shards that hold anything under it, each with the directory's entry
 * there (start 0), ascending by shard; an empty directory has none. The
 * root's pieces are every shard that holds a file.
 */
#define TD_SEC5_SHARDS 32u
#define TD_SEC5_PIECE_OFF 33u
#define TD_SEC5_P_SHARD 34u
#define TD_SEC5_P_LOCAL 35u
#define TD_SEC5_P_START 36u
#define TD_SEC5_N 5u          /* sections 32 .. 36 */

/*
 * Version 5, optional: the fuzzy index (section TD_SEC5_FUZZY), the whole
 * archive's vocabulary for `tadoc fuzzy` over the root, searchable without
 * opening a shard. Words longer than TD_MAXTOK bytes are not in it. It is
 * a td_disk_fzix, then the buckets: bucket L holds the words of L code
 * points (UTF-8; a byte that does not decode counts as one), in byte
 * order, as one zstd frame of `raw` bytes: for each word the bytes it
 * shares with the word before in the bucket (a byte, 0 for the first),
 * the count of the bytes after them (a byte, at least 1) and those bytes;
 * then every word's whole-archive count, LEB128, in the same order.
 * shards_sum ties the index to its shards: a reader uses it only while it
 * equals the XXH3-64 of section TD_SEC5_SHARDS.
 */
#define TD_SEC5_FUZZY 37u
#define TD_FZIX_MAGIC "TDFZIX1"
#define TD_FZIX_NB 256u       /* buckets: lengths 0 .. 255 code points */

typedef struct td_disk_fzbucket {
	uint64_t off;             /* of the frame, from the section's start */
	uint64_t size;            /* bytes of the frame (0: no words) */
	uint64_t raw;             /* bytes it decodes to */
	uint64_t nwords;
	uint64_t sum;             /* XXH3-64 of the frame */
} td_disk_fzbucket;

typedef struct td_disk_fzix {
	char magic[8];            /* TD_FZIX_MAGIC */
	uint64_t shards_sum;
	uint64_t nwords;          /* in all buckets */
	uint64_t reserved;
	td_disk_fzbucket b[TD_FZIX_NB];
	uint64_t sum;             /* XXH3-64 of the bytes before it */
} td_disk_fzix;

/*
 * Version 5, optional: the analytics tables (section TD_SEC5_ATAB), answers
 * over the root precomputed at build so a query reads a prefix. A
 * td_disk_atab, then one zstd frame a part: part 1 the root's top words
 * (td_top_words order: count descending, then bytes), part L (2 ..
 * TD_PHRASE_MAX) its top L-grams (td_ngrams order: count descending, then
 * the words joined by single spaces, bytewise); part 0 is unused, a part
 * of size 0 absent. A part's frame decodes to `raw` bytes: n items, each
 * its count (LEB128, at least 1), its length in bytes (LEB128, at least 1)
 * and its bytes (an n-gram's words joined by single spaces). The part was
 * made as the top k (n <= k); complete = 1 when it holds every item of
 * the root (n < k). The section's checksum in the section table covers it
 * all (readers hash it, a few KiB, before use). shards_sum ties it to its
 * shards: a reader uses it only while it equals the XXH3-64 of section
 * TD_SEC5_SHARDS. Older readers ignore the section.
 */
#define TD_SEC5_ATAB 40u
#define TD_ATAB_MAGIC "TDATAB1"

typedef struct td_disk_atpart {
	uint64_t off;             /* of the frame, from the section's start */
	uint64_t size;            /* bytes of the frame (0: part absent) */
	uint64_t raw;             /* bytes it decodes to */
	uint64_t n;               /* items */
	uint64_t k;               /* the top k it was made as */
	uint64_t complete;        /* 1: every item of the root (n < k) */
} td_disk_atpart;

typedef struct td_disk_atab {
	char magic[8];            /* TD_ATAB_MAGIC */
	uint64_t shards_sum;
	td_disk_atpart p[9];      /* 1: words; 2 .. 8: n-grams of that length */
} td_disk_atab;

/*
 * Version 5, optional: the root's term vector (section TD_SEC5_VECTOR,
 * `tadoc compress --root-vector`), so `tadoc vector ARCHIVE /` streams it
 * instead of merging every shard's vocabulary and counts. A td_disk_vtab,
 * nblocks td_disk_vblock, then the blocks' zstd frames. The items are the
 * root's words in td_term_vector order (bytes ascending, each once), at
 * most TD_VTAB_BLOCK a block; a block's frame decodes to `raw` bytes: n
 * items, each the bytes it shares with the block's word before (LEB128, 0
 * for a block's first word), the count of the bytes after them (LEB128, at
 * least 1), those bytes, and the word's count in the root (LEB128, at least
 * 1). Words longer than TD_MAXTOK are in it. tokens is the sum of the
 * counts. The header's sum covers its bytes before it and the block table
 * (hashed when the section is opened), each block's sum its frame (hashed
 * when the block is read), so a reader of a few blocks hashes those only;
 * the section table's checksum covers the whole section (`tadoc verify`).
 * The section is padded with zero bytes to a multiple of 8. shards_sum
 * ties it to its shards as TD_SEC5_ATAB's does. Older readers ignore it.
 */
#define TD_SEC5_VECTOR 41u
#define TD_VTAB_MAGIC "TDVECT1"
#define TD_VTAB_BLOCK 16384u  /* items a block, at most */

typedef struct td_disk_vtab {
	char magic[8];            /* TD_VTAB_MAGIC */
	uint64_t shards_sum;
	uint64_t nitems;          /* words, all blocks */
	uint64_t nblocks;
	uint64_t tokens;          /* sum of the counts */
	uint64_t raw_max;         /* the largest block's raw bytes (at most TD_VTAB_RAW_MAX) */
	uint64_t sum;             /* XXH3-64 of the bytes before it and the block table */
} td_disk_vtab;

/* The most a block may decode to: a word near this long cannot be stored. */
#define TD_VTAB_RAW_MAX (UINT64_C(64) << 20)

typedef struct td_disk_vblock {
	uint64_t off;             /* of the frame, from the section's start */
	uint64_t size;            /* bytes of the frame */
	uint64_t raw;             /* bytes it decodes to */
	uint64_t n;               /* items, 1 .. TD_VTAB_BLOCK */
	uint64_t sum;             /* XXH3-64 of the frame */
} td_disk_vblock;

typedef struct td_disk_shard {
	uint64_t off;             /* of the shard's image in the container */
	uint64_t size;            /* bytes of the image */
	uint64_t sum;             /* XXH3-64 of the image (checked by verify) */
	uint64_t nfiles;          /* file and symlink pieces in the shard */
	uint64_t input_bytes;     /* text bytes of those pieces */
	uint64_t reserved;
} td_disk_shard;

/* One piece, as the three packed sections give it. */
typedef struct td_disk_piece {
	uint32_t shard;
	uint32_t local;           /* entry in the shard */
	uint64_t start;           /* byte offset in the file where this piece starts */
} td_disk_piece;

#ifdef __cplusplus
}
#endif
#endif
