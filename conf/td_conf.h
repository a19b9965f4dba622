/* td_conf: tadocfs configuration — keys, defaults, validation, loading, printing. */
#ifndef TD_CONF_H
#define TD_CONF_H

/*
 * Where values come from, lowest to highest precedence:
 *   1. built-in defaults (td_conf_defaults());
 *   2. ONE config file: the explicit file (`-o config=FILE`) if given, else
 *      $XDG_CONFIG_HOME/tadoc/tadocfs.conf (~/.config/tadoc/tadocfs.conf when
 *      XDG_CONFIG_HOME is unset, empty or relative), else
 *      /etc/tadoc/tadocfs.conf; the first default candidate that exists is
 *      read, none existing is fine; a missing explicit file is an error;
 *   3. `key=value` overrides (`-o key=value`), later ones win.
 *
 * File syntax (parsed with inih): `key = value` lines, either at top level or
 * inside a `[tadocfs]` section (both are accepted; any other section is an
 * error). Comments are lines starting with `#` or `;`, and text after ` ;`
 * or ` #` on a value line. Keys are lower case; a key given twice takes its
 * last value. Enumerated values are case-insensitive.
 *
 * Errors are single lines: `FILE:LINE: message` for a line of the file,
 * `config file FILE: message` for the file as a whole (cannot open, is a
 * directory), and `option -o KEY: message` for an override. Front ends
 * print the message after their name and exit with status 2.
 *
 * Value syntax: integers are plain decimal digits; sizes are decimal digits
 * optionally followed by a unit K, M, G or T (also KB/KiB, ...; any case;
 * powers of 1024), or B for bytes.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The system-wide config file, read when no per-user file exists. */
#define TD_CONF_SYSTEM_FILE "/etc/tadoc/tadocfs.conf"
/* Per-user file, relative to $XDG_CONFIG_HOME (or ~/.config). */
#define TD_CONF_USER_FILE "tadoc/tadocfs.conf"
/* Longest file path td_conf keeps (including the NUL). */
#define TD_CONF_PATH_MAX 4096

/* gpu: whether reads may be served by the GPU. */
typedef enum td_conf_gpu {
	TD_CONF_GPU_AUTO = 0, /* use the GPU when one is usable and a batch pays */
	TD_CONF_GPU_ON = 1,   /* require the GPU: mounting fails without one */
	TD_CONF_GPU_OFF = 2,  /* CPU only */
} td_conf_gpu;

/* journal_sync: when the edit journal is flushed to stable storage. */
typedef enum td_conf_sync {
	TD_CONF_SYNC_NONE = 0,   /* never fsync (fast, edits can be lost on crash) */
	TD_CONF_SYNC_FSYNC = 1,  /* when an application calls fsync()/fdatasync() */
	TD_CONF_SYNC_ALWAYS = 2, /* after every write, before the reply */
} td_conf_sync;

/* log_level: most verbose messages logged. Ordered: a message of level L
 * is logged when L <= the configured level. */
typedef enum td_conf_log {
	TD_CONF_LOG_ERROR = 0,
	TD_CONF_LOG_WARN = 1,
	TD_CONF_LOG_INFO = 2,
	TD_CONF_LOG_DEBUG = 3,
} td_conf_log;

/* One enumerator per key, in the order td_conf_print() lists them. */
typedef enum td_conf_key {
	TD_CONF_KEY_GPU = 0,
	TD_CONF_KEY_GPU_DEVICE,
	TD_CONF_KEY_GPU_DEVICES,
	TD_CONF_KEY_GPU_MEM_CAP,
	TD_CONF_KEY_BATCH_WINDOW_US,
	TD_CONF_KEY_BATCH_MAX,
	TD_CONF_KEY_GPU_MIN_READS,
	TD_CONF_KEY_GPU_MIN_COUNTS,
	TD_CONF_KEY_GPU_MIN_READ_SIZE,
	TD_CONF_KEY_CPU_WORKERS,
	TD_CONF_KEY_BATCH_PRIORITY,
	TD_CONF_KEY_CACHE_SIZE,
	TD_CONF_KEY_CACHE_WARM,
	TD_CONF_KEY_READ_AHEAD,
	TD_CONF_KEY_STORE_AHEAD,
	TD_CONF_KEY_JOURNAL_SYNC,
	TD_CONF_KEY_COMPACT_THRESHOLD,
	TD_CONF_KEY_LOG_LEVEL,
	TD_CONF_NKEYS
} td_conf_key;

/* Where a value came from. */
typedef enum td_conf_src {
	TD_CONF_SRC_DEFAULT = 0, /* built-in default */
	TD_CONF_SRC_FILE = 1,    /* td_conf.file, line td_conf_origin.line */
	TD_CONF_SRC_OPTION = 2,  /* override number td_conf_origin.line (1-based) */
} td_conf_src;

typedef struct td_conf_origin {
	td_conf_src src;
	unsigned line; /* file line, or override position; 0 for defaults */
} td_conf_origin;

/* The effective configuration. Plain data: copy it freely. */
typedef struct td_conf {
	td_conf_gpu gpu;            /* gpu = auto|on|off            (auto) */
	int gpu_device;             /* gpu_device = 0..2147483647   (0): the device
	                               of a version 1-4 archive */
	uint64_t gpu_devices;       /* gpu_devices = all | N[:N...] (all): the devices
	                               a version 5 archive's shards spread over,
	                               N in 0..63 (',' also separates, except in
	                               -o); bit N = device N, 0 = all visible */
	uint64_t gpu_mem_cap;       /* gpu_mem_cap = size, 0 = no cap (0) */
	uint32_t batch_window_us;   /* batch_window_us = 0..1000000 (200) */
	uint32_t batch_max;         /* batch_max = 1..1000000       (1024) */
	uint32_t gpu_min_reads;     /* gpu_min_reads = 0..1000000, 0 = measured default (0) */
	uint32_t gpu_min_counts;    /* gpu_min_counts = 0..1000000, 0 = measured default (0) */
	uint64_t gpu_min_read_size; /* gpu_min_read_size = size up to 1G: smaller reads
	                               never go to the GPU; 0 = measured default (0) */
	uint32_t cpu_workers;       /* cpu_workers = 0 (one per core) or 1..1024 (0) */
	uint32_t batch_priority;    /* batch_priority = 0..39: nice steps the batcher
	                               thread and the CPU workers are raised above
	                               the FUSE threads while a GPU is in use,
	                               0 = not raised (10) */
	uint64_t cache_size;        /* cache_size = size, 0 = no cache (512M) */
	bool cache_warm;            /* cache_warm = on|off: fill the cache at mount (on) */
	uint64_t read_ahead;        /* read_ahead = size, 0 = the kernel's (8M) */
	bool store_ahead;           /* store_ahead = on|off: read-only mounts put small
	                               files, and the next files of a directory read
	                               in order, in the page cache ahead (on) */
	td_conf_sync journal_sync;  /* journal_sync = none|fsync|always (fsync) */
	uint64_t compact_threshold; /* compact_threshold = size, 0 = off (0) */
	td_conf_log log_level;      /* log_level = error|warn|info|debug (warn) */

	/* The config file that was read; "" when none was. */
	char file[TD_CONF_PATH_MAX];
	/* Origin of each value, indexed by td_conf_key. */
	td_conf_origin origin[TD_CONF_NKEYS];
} td_conf;

/* Fill *c with the built-in defaults, every origin TD_CONF_SRC_DEFAULT and
 * c->file empty. Never fails. */
void td_conf_defaults(td_conf *c);

/* Name of a key ("batch_max"); NULL when `k` is out of range. */
const char *td_conf_key_name(td_conf_key k);

/* The key called `name`; or, when `name` is "key=value", the key before the
 * '='. Returns -1 when it is not a configuration key (e.g. "ro", "config",
 * "allow_other"): front ends use this to split mount options into config
 * overrides and FUSE options. */
int td_conf_key_find(const char *name);

/* Parse and validate `value` for `key` and store it in *c with origin
 * `origin`. Returns 0; or -1 with a message without location, like
 * "batch_max: value 0 out of range 1..1000000", in msg (when msglen > 0),
 * leaving *c unchanged. Unknown keys give "unknown key 'foo'". */
int td_conf_set(td_conf *c, const char *key, const char *value,
		td_conf_origin origin, char *msg, size_t msglen);

/* Write the current value of `k` in config-file syntax (e.g. "auto", "64M",
 * "1000") into buf. Returns the length snprintf would write, or -1 for a bad
 * key. Sizes print with the largest exact unit. */
int td_conf_format(const td_conf *c, td_conf_key k, char *buf, size_t len);

/* Where the value of `k` came from, for messages: "FILE:LINE",
 * "option -o KEY" or "default" into buf. Returns snprintf's length. */
int td_conf_where(const td_conf *c, td_conf_key k, char *buf, size_t len);

/* Parse a size ("4096", "64K", "1GiB", "2t") into *out. Returns 0, or -1 when
 * the syntax is wrong or the value does not fit in 64 bits. */
int td_conf_parse_size(const char *s, uint64_t *out);

/* The default config file to read: the per-user path when that exists
 * (or exists but cannot be examined), else the system path when it exists.
 * Writes the path into buf and returns 1; returns 0 with buf = "" when no
 * default file exists; -1 when the path does not fit in len. Reads the
 * environment (XDG_CONFIG_HOME, HOME); not thread-safe against setenv(). */
int td_conf_find_file(char *buf, size_t len);

/* Build the effective configuration: defaults, then the config file
 * (`explicit_file` if non-NULL, else td_conf_find_file()), then `n`
 * overrides "key=value" in order (`overrides` may be NULL when n is 0).
 * Returns 0 with *c filled; or -1 with a one-line message of the forms
 * above in err (when errlen > 0); *c is then unspecified.
 * Errors: explicit file missing; file unreadable, a directory, neither a
 * regular file nor a character device (a FIFO: never waited on), containing
 * a NUL byte or an over-long line; an override value over 511 bytes; INI
 * syntax error; unknown section; unknown key; bad value; override without
 * '='. */
int td_conf_load(td_conf *c, const char *explicit_file,
		 const char *const *overrides, size_t n, char *err, size_t errlen);

/* Print the effective configuration to `out` as a valid config file: a
 * header naming the file that was read, then one `key = value` line per key
 * with a comment giving its source ("default", "FILE:LINE" or "-o"). A
 * default gpu_device is printed as a comment ("# gpu_device = 0 ; default,
 * not set"): given, even as 0, it keeps a version 5 archive's shards on
 * that device, so the printed file, read back, acts as the configuration
 * printed.
 * Returns 0, or -1 when writing failed (errno set). Used by
 * `tadoc config --print`. */
int td_conf_print(const td_conf *c, FILE *out);

/* Names of enumerated values ("auto", "fsync", "warn"); "?" if out of range. */
const char *td_conf_gpu_name(td_conf_gpu g);
const char *td_conf_sync_name(td_conf_sync s);
const char *td_conf_log_name(td_conf_log l);

#ifdef __cplusplus
}
#endif
#endif
