/* conf_config: Criterion tests of conf/ — every key, every error class with
 * its FILE:LINE, file search order and the precedence of -o overrides. */
#include <criterion/criterion.h>

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "td_conf.h"

static char dir[512];

static int rm_entry(const char *path, const struct stat *st, int flag,
		    struct FTW *ftw)
{
	(void)st; (void)flag; (void)ftw;
	chmod(path, 0700);
	return remove(path);
}

static void setup(void)
{
	const char *t = getenv("TMPDIR");
	snprintf(dir, sizeof dir, "%s/tdconf.XXXXXX", t && *t ? t : "/tmp");
	cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
	/* Keep the default search inside the temp dir. */
	setenv("XDG_CONFIG_HOME", dir, 1);
	setenv("HOME", dir, 1);
}

static void teardown(void)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(conf, .init = setup, .fini = teardown);

/* mkdir -p of every parent of `path`. */
static void mkparents(const char *path)
{
	char tmp[1024];
	snprintf(tmp, sizeof tmp, "%s", path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p == '/') {
			*p = '\0';
			mkdir(tmp, 0700);
			*p = '/';
		}
	}
}

/* Write `len` bytes of `text` to dir/rel; the full path goes to out. */
static const char *put_n(char *out, size_t outlen, const char *rel,
			 const char *text, size_t len)
{
	snprintf(out, outlen, "%s/%s", dir, rel);
	mkparents(out);
	FILE *f = fopen(out, "wb");
	cr_assert_not_null(f, "fopen %s: %s", out, strerror(errno));
	cr_assert_eq(fwrite(text, 1, len, f), len);
	cr_assert_eq(fclose(f), 0);
	return out;
}

static const char *put(char *out, size_t outlen, const char *rel, const char *text)
{
	return put_n(out, outlen, rel, text, strlen(text));
}

/* Load `text` as an explicit file; expect failure with exactly
 * "<file>:<line>: <msg>". */
static void expect_file_error(const char *text, unsigned line, const char *msg)
{
	char path[1024], want[2048], err[1024];
	td_conf c;
	put(path, sizeof path, "bad.conf", text);
	int rc = td_conf_load(&c, path, NULL, 0, err, sizeof err);
	cr_assert_eq(rc, -1, "accepted: %s", text);
	snprintf(want, sizeof want, "%s:%u: %s", path, line, msg);
	cr_assert_str_eq(err, want);
}

/* Load `text` as an explicit file; expect success. */
static void load_ok(td_conf *c, const char *text, char *path, size_t pathlen)
{
	char err[1024] = "";
	put(path, pathlen, "ok.conf", text);
	int rc = td_conf_load(c, path, NULL, 0, err, sizeof err);
	cr_assert_eq(rc, 0, "rejected: %s", err);
	cr_assert_str_eq(c->file, path);
}

static void expect_origin(const td_conf *c, td_conf_key k, td_conf_src src,
			  unsigned line)
{
	cr_assert_eq(c->origin[k].src, src, "%s: source %d, want %d",
		     td_conf_key_name(k), c->origin[k].src, src);
	cr_assert_eq(c->origin[k].line, line, "%s: line %u, want %u",
		     td_conf_key_name(k), c->origin[k].line, line);
}

/* ---- defaults and search order ---------------------------------------- */

Test(conf, defaults)
{
	td_conf c;
	td_conf_defaults(&c);
	cr_assert_eq(c.gpu, TD_CONF_GPU_AUTO);
	cr_assert_eq(c.gpu_device, 0);
	cr_assert_eq(c.gpu_mem_cap, 0);
	cr_assert_eq(c.batch_window_us, 200);
	cr_assert_eq(c.batch_max, 1024);
	cr_assert_eq(c.gpu_min_reads, 0);
	cr_assert_eq(c.gpu_min_counts, 0);
	cr_assert_eq(c.gpu_min_read_size, 0);
	cr_assert_eq(c.cpu_workers, 0);
	cr_assert_eq(c.batch_priority, 10);
	cr_assert_eq(c.cache_size, 512ull << 20);
	cr_assert(c.cache_warm);
	cr_assert_eq(c.read_ahead, 8ull << 20);
	cr_assert(c.store_ahead);
	cr_assert_eq(c.journal_sync, TD_CONF_SYNC_FSYNC);
	cr_assert_eq(c.compact_threshold, 0);
	cr_assert_eq(c.log_level, TD_CONF_LOG_WARN);
	cr_assert_str_eq(c.file, "");
	for (int k = 0; k < TD_CONF_NKEYS; k++)
		expect_origin(&c, (td_conf_key)k, TD_CONF_SRC_DEFAULT, 0);
}

Test(conf, no_file_gives_defaults)
{
	struct stat st;
	if (stat(TD_CONF_SYSTEM_FILE, &st) == 0)
		cr_skip_test("%s exists on this machine", TD_CONF_SYSTEM_FILE);
	td_conf c, d;
	char err[256] = "x";
	cr_assert_eq(td_conf_load(&c, NULL, NULL, 0, err, sizeof err), 0, "%s", err);
	cr_assert_str_eq(err, "");
	td_conf_defaults(&d);
	cr_assert_eq(memcmp(&c, &d, sizeof c), 0);
	char buf[TD_CONF_PATH_MAX];
	cr_assert_eq(td_conf_find_file(buf, sizeof buf), 0);
	cr_assert_str_eq(buf, "");
}

Test(conf, xdg_path_used)
{
	char path[1024], found[TD_CONF_PATH_MAX], err[1024];
	put(path, sizeof path, "tadoc/tadocfs.conf", "# user file\nbatch_max = 7\n");
	/* A HOME file must lose against the XDG one. */
	char other[1024];
	put(other, sizeof other, "home/.config/tadoc/tadocfs.conf", "batch_max = 9\n");
	char home[1024];
	snprintf(home, sizeof home, "%s/home", dir);
	setenv("HOME", home, 1);

	cr_assert_eq(td_conf_find_file(found, sizeof found), 1);
	cr_assert_str_eq(found, path);
	td_conf c;
	cr_assert_eq(td_conf_load(&c, NULL, NULL, 0, err, sizeof err), 0, "%s", err);
	cr_assert_str_eq(c.file, path);
	cr_assert_eq(c.batch_max, 7);
	expect_origin(&c, TD_CONF_KEY_BATCH_MAX, TD_CONF_SRC_FILE, 2);
}

Test(conf, home_config_when_xdg_unset_or_relative)
{
	char path[1024], found[TD_CONF_PATH_MAX], err[1024];
	put(path, sizeof path, ".config/tadoc/tadocfs.conf", "cpu_workers = 3\n");
	const char *xdg[] = {NULL, "", "relative/dir"};
	for (int i = 0; i < 3; i++) {
		if (xdg[i])
			setenv("XDG_CONFIG_HOME", xdg[i], 1);
		else
			unsetenv("XDG_CONFIG_HOME");
		cr_assert_eq(td_conf_find_file(found, sizeof found), 1);
		cr_assert_str_eq(found, path);
		td_conf c;
		cr_assert_eq(td_conf_load(&c, NULL, NULL, 0, err, sizeof err), 0, "%s", err);
		cr_assert_eq(c.cpu_workers, 3);
		cr_assert_str_eq(c.file, path);
	}
}

Test(conf, explicit_file_replaces_default_file)
{
	char user[1024], path[1024], err[1024];
	put(user, sizeof user, "tadoc/tadocfs.conf", "gpu = on\nbatch_max = 5\n");
	put(path, sizeof path, "explicit.conf", "\n\nbatch_max = 6\n");
	td_conf c;
	cr_assert_eq(td_conf_load(&c, path, NULL, 0, err, sizeof err), 0, "%s", err);
	cr_assert_str_eq(c.file, path);
	cr_assert_eq(c.batch_max, 6);
	cr_assert_eq(c.gpu, TD_CONF_GPU_AUTO, "the user file must not be read");
	expect_origin(&c, TD_CONF_KEY_BATCH_MAX, TD_CONF_SRC_FILE, 3);
	expect_origin(&c, TD_CONF_KEY_GPU, TD_CONF_SRC_DEFAULT, 0);
}

/* ---- every key -------------------------------------------------------- */

Test(conf, every_key_parsed)
{
	td_conf c;
	char path[1024];
	load_ok(&c,
		"; all keys\n"
		"gpu = off\n"
		"gpu_device = 3\n"
		"gpu_devices = 1:2\n"
		"gpu_mem_cap = 2G\n"
		"batch_window_us = 500\n"
		"batch_max = 100000\n"
		"gpu_min_reads = 64\n"
		"gpu_min_counts = 8\n"
		"gpu_min_read_size = 48K\n"
		"cpu_workers = 12\n"
		"batch_priority = 0\n"
		"cache_size = 256M\n"
		"cache_warm = off\n"
		"read_ahead = 4M\n"
		"store_ahead = off\n"
		"journal_sync = always\n"
		"compact_threshold = 1T\n"
		"log_level = debug\n",
		path, sizeof path);
	cr_assert_eq(c.gpu, TD_CONF_GPU_OFF);
	cr_assert_eq(c.gpu_device, 3);
	cr_assert_eq(c.gpu_devices, 6);
	cr_assert_eq(c.gpu_mem_cap, 2ull << 30);
	cr_assert_eq(c.batch_window_us, 500);
	cr_assert_eq(c.batch_max, 100000);
	cr_assert_eq(c.gpu_min_reads, 64);
	cr_assert_eq(c.gpu_min_counts, 8);
	cr_assert_eq(c.gpu_min_read_size, 48ull << 10);
	cr_assert_eq(c.cpu_workers, 12);
	cr_assert_eq(c.batch_priority, 0);
	cr_assert_eq(c.cache_size, 256ull << 20);
	cr_assert(!c.cache_warm);
	cr_assert_eq(c.read_ahead, 4ull << 20);
	cr_assert(!c.store_ahead);
	cr_assert_eq(c.journal_sync, TD_CONF_SYNC_ALWAYS);
	cr_assert_eq(c.compact_threshold, 1ull << 40);
	cr_assert_eq(c.log_level, TD_CONF_LOG_DEBUG);
	for (int k = 0; k < TD_CONF_NKEYS; k++)
		expect_origin(&c, (td_conf_key)k, TD_CONF_SRC_FILE, (unsigned)k + 2);
}

Test(conf, enum_values)
{
	static const struct { const char *key, *val; int want; } t[] = {
		{"gpu", "auto", TD_CONF_GPU_AUTO}, {"gpu", "on", TD_CONF_GPU_ON},
		{"gpu", "off", TD_CONF_GPU_OFF}, {"gpu", "ON", TD_CONF_GPU_ON},
		{"gpu", "yes", TD_CONF_GPU_ON}, {"gpu", "true", TD_CONF_GPU_ON},
		{"gpu", "1", TD_CONF_GPU_ON}, {"gpu", "no", TD_CONF_GPU_OFF},
		{"gpu", "false", TD_CONF_GPU_OFF}, {"gpu", "0", TD_CONF_GPU_OFF},
		{"journal_sync", "none", TD_CONF_SYNC_NONE},
		{"journal_sync", "fsync", TD_CONF_SYNC_FSYNC},
		{"journal_sync", "Always", TD_CONF_SYNC_ALWAYS},
		{"log_level", "error", TD_CONF_LOG_ERROR},
		{"log_level", "warn", TD_CONF_LOG_WARN},
		{"log_level", "info", TD_CONF_LOG_INFO},
		{"log_level", "DEBUG", TD_CONF_LOG_DEBUG},
		{"cache_warm", "off", 0}, {"cache_warm", "on", 1}, {"cache_warm", "No", 0},
		{"cache_warm", "yes", 1}, {"cache_warm", "false", 0}, {"cache_warm", "TRUE", 1},
		{"cache_warm", "0", 0}, {"cache_warm", "1", 1},
		{"store_ahead", "off", 0}, {"store_ahead", "on", 1},
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		td_conf c;
		char msg[256];
		td_conf_defaults(&c);
		td_conf_origin o = {TD_CONF_SRC_OPTION, 1};
		cr_assert_eq(td_conf_set(&c, t[i].key, t[i].val, o, msg, sizeof msg), 0,
			     "%s=%s: %s", t[i].key, t[i].val, msg);
		int got = !strcmp(t[i].key, "gpu") ? (int)c.gpu
			: !strcmp(t[i].key, "journal_sync") ? (int)c.journal_sync
			: !strcmp(t[i].key, "cache_warm") ? (int)c.cache_warm
			: !strcmp(t[i].key, "store_ahead") ? (int)c.store_ahead
			: (int)c.log_level;
		cr_assert_eq(got, t[i].want, "%s=%s", t[i].key, t[i].val);
	}
}

Test(conf, integer_ranges)
{
	static const struct { const char *key; unsigned long long min, max; } t[] = {
		{"gpu_device", 0, 2147483647ull},
		{"batch_window_us", 0, 1000000},
		{"batch_max", 1, 1000000},
		{"gpu_min_reads", 0, 1000000},
		{"gpu_min_counts", 0, 1000000},
		{"cpu_workers", 0, 1024},
		{"batch_priority", 0, 39},
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		char text[256], msg[256];
		td_conf c;
		char path[1024];
		snprintf(text, sizeof text, "%s = %llu\n", t[i].key, t[i].min);
		load_ok(&c, text, path, sizeof path);
		snprintf(text, sizeof text, "[tadocfs]\n%s = %llu\n", t[i].key, t[i].max);
		load_ok(&c, text, path, sizeof path);
		char buf[64];
		int k = td_conf_key_find(t[i].key);
		cr_assert_geq(k, 0);
		td_conf_format(&c, (td_conf_key)k, buf, sizeof buf);
		snprintf(text, sizeof text, "%llu", t[i].max);
		cr_assert_str_eq(buf, text);

		snprintf(text, sizeof text, "\n%s = %llu\n", t[i].key, t[i].max + 1);
		snprintf(msg, sizeof msg, "%s: value %llu out of range %llu..%llu",
			 t[i].key, t[i].max + 1, t[i].min, t[i].max);
		expect_file_error(text, 2, msg);
		if (t[i].min > 0) {
			snprintf(text, sizeof text, "%s=%llu\n", t[i].key, t[i].min - 1);
			snprintf(msg, sizeof msg, "%s: value %llu out of range %llu..%llu",
				 t[i].key, t[i].min - 1, t[i].min, t[i].max);
			expect_file_error(text, 1, msg);
		}
		static const char *const bad[] = {"-1", "+3", "1.5", "12abc", "0x10", "1 2", "ten"};
		for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
			snprintf(text, sizeof text, "%s = %s\n", t[i].key, bad[j]);
			snprintf(msg, sizeof msg,
				 "%s: invalid value '%s' (expected a decimal integer)",
				 t[i].key, bad[j]);
			expect_file_error(text, 1, msg);
		}
		snprintf(text, sizeof text, "%s = 99999999999999999999999\n", t[i].key);
		snprintf(msg, sizeof msg,
			 "%s: value 99999999999999999999999 out of range %llu..%llu",
			 t[i].key, t[i].min, t[i].max);
		expect_file_error(text, 1, msg);
	}
}

Test(conf, sizes)
{
	static const struct { const char *s; unsigned long long v; } ok[] = {
		{"0", 0}, {"4096", 4096}, {"1B", 1}, {"1b", 1}, {"1K", 1024},
		{"1k", 1024}, {"3KB", 3072}, {"3KiB", 3072}, {"3kib", 3072},
		{"5M", 5ull << 20}, {"5MiB", 5ull << 20}, {"7G", 7ull << 30},
		{"7 GB", 7ull << 30}, {"2T", 2ull << 40}, {"16777215T", 16777215ull << 40},
		{"18446744073709551615", 18446744073709551615ull},
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		uint64_t v = 1234;
		cr_assert_eq(td_conf_parse_size(ok[i].s, &v), 0, "%s", ok[i].s);
		cr_assert_eq(v, ok[i].v, "%s", ok[i].s);
	}
	static const char *const bad[] = {
		"", "K", "-1", "+1", "1.5G", "1P", "1E", "1KK", "1KiBB", "1Ki",
		"1 K B", "16777216T", "18446744073709551616", "0x10", "1G extra",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint64_t v;
		cr_assert_eq(td_conf_parse_size(bad[i], &v), -1, "accepted '%s'", bad[i]);
	}
	static const char *const size_keys[] = {"gpu_mem_cap", "gpu_min_read_size", "cache_size", "read_ahead",
						"compact_threshold"};
	for (size_t i = 0; i < sizeof size_keys / sizeof size_keys[0]; i++) {
		char text[128], msg[256];
		snprintf(text, sizeof text, "%s = 12X\n", size_keys[i]);
		snprintf(msg, sizeof msg,
			 "%s: invalid size '12X' (expected bytes, optionally with K, M, G or T)",
			 size_keys[i]);
		expect_file_error(text, 1, msg);
		snprintf(text, sizeof text, "%s = 0\n", size_keys[i]);
		td_conf c;
		char path[1024];
		load_ok(&c, text, path, sizeof path);
	}
}

/* Size keys bounded at 1G: the message names the key and the value. */
Test(conf, size_bounds)
{
	static const struct { const char *key, *big, *msg; } t[] = {
		{"read_ahead", "2G", "read_ahead: '2G' is more than 1G"},
		{"gpu_min_read_size", "1025M", "gpu_min_read_size: '1025M' is more than 1G"},
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		char text[128], path[1024];
		snprintf(text, sizeof text, "\n%s = %s\n", t[i].key, t[i].big);
		expect_file_error(text, 2, t[i].msg);
		snprintf(text, sizeof text, "%s = 1G\n", t[i].key);
		td_conf c;
		load_ok(&c, text, path, sizeof path);
		cr_assert_eq(i ? c.gpu_min_read_size : c.read_ahead, 1ull << 30);
	}
}

Test(conf, format_sizes)
{
	td_conf c;
	char buf[64];
	td_conf_defaults(&c);
	static const struct { uint64_t v; const char *s; } t[] = {
		{0, "0"}, {1000, "1000"}, {1024, "1K"}, {1536, "1536"},
		{64ull << 20, "64M"}, {3ull << 30, "3G"}, {5ull << 40, "5T"},
		{1ull << 50, "1024T"},
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		c.cache_size = t[i].v;
		td_conf_format(&c, TD_CONF_KEY_CACHE_SIZE, buf, sizeof buf);
		cr_assert_str_eq(buf, t[i].s);
	}
	cr_assert_eq(td_conf_format(&c, TD_CONF_NKEYS, buf, sizeof buf), -1);
}

/* ---- file syntax ------------------------------------------------------ */

Test(conf, syntax_features)
{
	td_conf c;
	char path[1024];
	load_ok(&c,
		"\xEF\xBB\xBF# BOM, comments, blanks, CRLF, inline comments\r\n"
		"; semicolon comment\r\n"
		"\r\n"
		"gpu = on ; inline\r\n"
		"   gpu_device=2   # hash inline\r\n"
		"[ tadocfs ]   ; section with blanks\r\n"
		"\tbatch_max : 33\r\n"
		"batch_max = 44\r\n"
		"log_level = info",
		path, sizeof path);
	cr_assert_eq(c.gpu, TD_CONF_GPU_ON);
	cr_assert_eq(c.gpu_device, 2);
	cr_assert_eq(c.batch_max, 44, "the last of duplicate keys wins");
	cr_assert_eq(c.log_level, TD_CONF_LOG_INFO);
	expect_origin(&c, TD_CONF_KEY_GPU, TD_CONF_SRC_FILE, 4);
	expect_origin(&c, TD_CONF_KEY_GPU_DEVICE, TD_CONF_SRC_FILE, 5);
	expect_origin(&c, TD_CONF_KEY_BATCH_MAX, TD_CONF_SRC_FILE, 8);
	expect_origin(&c, TD_CONF_KEY_LOG_LEVEL, TD_CONF_SRC_FILE, 9);
}

Test(conf, indented_line_is_not_a_continuation)
{
	td_conf c;
	char path[1024];
	expect_file_error("gpu = on\n   off\n", 2,
			  "syntax error (expected 'key = value', '[tadocfs]' or a comment)");
	load_ok(&c, "gpu = on\n   cpu_workers = 2\n", path, sizeof path);
	cr_assert_eq(c.gpu, TD_CONF_GPU_ON);
	cr_assert_eq(c.cpu_workers, 2);
}

Test(conf, empty_file)
{
	td_conf c, d;
	char path[1024];
	load_ok(&c, "", path, sizeof path);
	td_conf_defaults(&d);
	strcpy(d.file, path);
	cr_assert_eq(memcmp(&c, &d, sizeof c), 0);
}

/* ---- error classes ---------------------------------------------------- */

Test(conf, unknown_key)
{
	expect_file_error("gpu = on\n\nread_only = 1\n", 3, "unknown key 'read_only'");
	expect_file_error("[tadocfs]\nGPU = on\n", 2, "unknown key 'GPU'");
	expect_file_error("= on\n", 1, "unknown key ''");
}

Test(conf, gpu_devices)
{
	td_conf c;
	char path[1024], buf[300], want[1100];
	td_conf_defaults(&c);
	cr_assert_eq(c.gpu_devices, 0); /* all */
	cr_assert_eq(td_conf_format(&c, TD_CONF_KEY_GPU_DEVICES, buf, sizeof buf), 3);
	cr_assert_str_eq(buf, "all");
	td_conf_where(&c, TD_CONF_KEY_GPU_DEVICES, buf, sizeof buf);
	cr_assert_str_eq(buf, "default");
	load_ok(&c, "gpu = on\n\ngpu_devices = 0,2:63\n", path, sizeof path);
	cr_assert_eq(c.gpu_devices, (1ull << 0) | (1ull << 2) | (1ull << 63));
	td_conf_format(&c, TD_CONF_KEY_GPU_DEVICES, buf, sizeof buf);
	cr_assert_str_eq(buf, "0:2:63");
	td_conf_where(&c, TD_CONF_KEY_GPU_DEVICES, buf, sizeof buf);
	snprintf(want, sizeof want, "%s:3", path);
	cr_assert_str_eq(buf, want);
	load_ok(&c, "gpu_devices = ALL\n", path, sizeof path);
	cr_assert_eq(c.gpu_devices, 0);
	const char *msg = "gpu_devices: invalid value '%s' (expected all, or device numbers 0..63 separated by ':')";
	static const char *const bad[] = {"64", "0:", ":1", "1 2", "-1", "some", "0,,1", "99999999999999999999"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char text[128], m[256];
		snprintf(text, sizeof text, "gpu_devices = %s\n", bad[i]);
		snprintf(m, sizeof m, msg, bad[i]);
		expect_file_error(text, 1, m);
	}
}

Test(conf, bad_values)
{
	expect_file_error("gpu = maybe\n", 1,
			  "gpu: invalid value 'maybe' (expected auto, on or off)");
	expect_file_error("\njournal_sync = sometimes\n", 2,
			  "journal_sync: invalid value 'sometimes' (expected none, fsync or always)");
	expect_file_error("\n\nlog_level = verbose\n", 3,
			  "log_level: invalid value 'verbose' (expected error, warn, info or debug)");
	expect_file_error("gpu = on # comment\ncache_size =\n", 2, "cache_size: empty value");
	expect_file_error("gpu_device = 1 2\n", 1,
			  "gpu_device: invalid value '1 2' (expected a decimal integer)");
	expect_file_error("\ncache_warm = later\n", 2, "cache_warm: invalid value 'later' (expected on or off)");
}

Test(conf, syntax_errors)
{
	const char *msg = "syntax error (expected 'key = value', '[tadocfs]' or a comment)";
	expect_file_error("gpu = on\ngpu on\n", 2, msg);
	expect_file_error("[tadocfs\ngpu = on\n", 1, msg);
	/* The first problem wins, whichever kind it is. */
	expect_file_error("\nnot a pair\ngpu = maybe\n", 2, msg);
	expect_file_error("gpu = maybe\nnot a pair\n", 1,
			  "gpu: invalid value 'maybe' (expected auto, on or off)");
}

Test(conf, sections)
{
	expect_file_error("gpu = on\n[fuse]\nbatch_max = 3\n", 2,
			  "unknown section [fuse] (keys go at top level or in [tadocfs])");
	expect_file_error("[]\n", 1,
			  "unknown section [] (keys go at top level or in [tadocfs])");
	expect_file_error("[tadocfs] gpu = on\n", 1, "unexpected text after section header");
	expect_file_error("[TADOCFS]\n", 1,
			  "unknown section [TADOCFS] (keys go at top level or in [tadocfs])");
}

Test(conf, nul_byte_and_long_line)
{
	char path[1024], want[2048], err[1024];
	td_conf c;
	static const char nul[] = "gpu = on\nbatch_max = 1\0002\n";
	put_n(path, sizeof path, "nul.conf", nul, sizeof nul - 1);
	cr_assert_eq(td_conf_load(&c, path, NULL, 0, err, sizeof err), -1);
	snprintf(want, sizeof want, "%s:2: NUL byte in line", path);
	cr_assert_str_eq(err, want);

	char text[4096];
	memset(text, ' ', sizeof text);
	memcpy(text, "gpu = on\n; ", 11);
	text[sizeof text - 2] = 'x';
	text[sizeof text - 1] = '\n';
	put_n(path, sizeof path, "long.conf", text, sizeof text);
	cr_assert_eq(td_conf_load(&c, path, NULL, 0, err, sizeof err), -1);
	snprintf(want, sizeof want, "%s:2: line too long (at most ", path);
	cr_assert_eq(strncmp(err, want, strlen(want)), 0, "got %s", err);
}

Test(conf, missing_explicit_file)
{
	char path[1024], want[2048], err[1024];
	td_conf c;
	snprintf(path, sizeof path, "%s/nope.conf", dir);
	cr_assert_eq(td_conf_load(&c, path, NULL, 0, err, sizeof err), -1);
	snprintf(want, sizeof want, "config file %s: cannot open: %s", path, strerror(ENOENT));
	cr_assert_str_eq(err, want);
	cr_assert_eq(td_conf_load(&c, "", NULL, 0, err, sizeof err), -1);
	cr_assert_str_eq(err, "option -o config: empty file name");
}

Test(conf, directory_is_an_error)
{
	char path[1024], want[2048], err[1024];
	td_conf c;
	snprintf(path, sizeof path, "%s/tadoc/tadocfs.conf", dir);
	mkparents(path);
	cr_assert_eq(mkdir(path, 0700), 0);
	snprintf(want, sizeof want, "config file %s: is a directory", path);
	/* Explicit, and found by the default search: both are errors. */
	cr_assert_eq(td_conf_load(&c, path, NULL, 0, err, sizeof err), -1);
	cr_assert_str_eq(err, want);
	cr_assert_eq(td_conf_load(&c, NULL, NULL, 0, err, sizeof err), -1);
	cr_assert_str_eq(err, want);
}

Test(conf, unreadable_file)
{
	if (geteuid() == 0)
		cr_skip_test("root reads files whatever their mode");
	char path[1024], want[2048], err[1024];
	td_conf c;
	put(path, sizeof path, "tadoc/tadocfs.conf", "gpu = on\n");
	cr_assert_eq(chmod(path, 0), 0);
	snprintf(want, sizeof want, "config file %s: cannot open: %s", path, strerror(EACCES));
	cr_assert_eq(td_conf_load(&c, NULL, NULL, 0, err, sizeof err), -1);
	cr_assert_str_eq(err, want);
}

Test(conf, error_buffer_truncates_safely)
{
	char path[1024], err[8];
	td_conf c;
	put(path, sizeof path, "x.conf", "gpu = maybe\n");
	cr_assert_eq(td_conf_load(&c, path, NULL, 0, err, sizeof err), -1);
	cr_assert_eq(strlen(err), sizeof err - 1);
	cr_assert_eq(td_conf_load(&c, path, NULL, 0, NULL, 0), -1);
}

/* ---- overrides -------------------------------------------------------- */

Test(conf, overrides_win_over_file)
{
	char path[1024], err[1024];
	put(path, sizeof path, "f.conf",
	    "gpu = off\nbatch_max = 10\ncache_size = 1G\n");
	const char *ov[] = {"batch_max=20", "gpu = on", "batch_max=30", "log_level=debug"};
	td_conf c;
	cr_assert_eq(td_conf_load(&c, path, ov, 4, err, sizeof err), 0, "%s", err);
	cr_assert_eq(c.gpu, TD_CONF_GPU_ON);
	cr_assert_eq(c.batch_max, 30, "the later override wins");
	cr_assert_eq(c.cache_size, 1ull << 30);
	cr_assert_eq(c.log_level, TD_CONF_LOG_DEBUG);
	expect_origin(&c, TD_CONF_KEY_GPU, TD_CONF_SRC_OPTION, 2);
	expect_origin(&c, TD_CONF_KEY_BATCH_MAX, TD_CONF_SRC_OPTION, 3);
	expect_origin(&c, TD_CONF_KEY_CACHE_SIZE, TD_CONF_SRC_FILE, 3);
	expect_origin(&c, TD_CONF_KEY_LOG_LEVEL, TD_CONF_SRC_OPTION, 4);
	expect_origin(&c, TD_CONF_KEY_CPU_WORKERS, TD_CONF_SRC_DEFAULT, 0);
}

Test(conf, overrides_without_file)
{
	char err[1024];
	const char *ov[] = {"cpu_workers=1024", "gpu_mem_cap=512M"};
	td_conf c;
	cr_assert_eq(td_conf_load(&c, NULL, ov, 2, err, sizeof err), 0, "%s", err);
	cr_assert_eq(c.cpu_workers, 1024);
	cr_assert_eq(c.gpu_mem_cap, 512ull << 20);
}

/* -o sync=MODE, the mount option (tadocfs(8)), is journal_sync=MODE for
 * every reader of -o (tadocfs and tadoc config --print alike). */
Test(conf, sync_override_is_journal_sync)
{
	char err[1024];
	const char *ov[] = {"sync=always"};
	td_conf c;
	cr_assert_eq(td_conf_load(&c, NULL, ov, 1, err, sizeof err), 0, "%s", err);
	cr_assert_eq(c.journal_sync, TD_CONF_SYNC_ALWAYS);
	const char *bad[] = {"sync=sometimes"};
	cr_assert_neq(td_conf_load(&c, NULL, bad, 1, err, sizeof err), 0);
	cr_assert(strstr(err, "journal_sync: invalid value 'sometimes'"), "%s", err);
}

Test(conf, override_errors)
{
	static const struct { const char *ov[3]; const char *want; } t[] = {
		{{"gpu=on", "foo=1"}, "option -o foo: unknown key"},
		{{"foo"}, "option -o foo: expected key=value"},
		{{"gpu"}, "option -o gpu: missing value (use gpu=VALUE)"},
		{{"gpu=on", "batch_max=", "x"}, "option -o batch_max: empty value"},
		{{"batch_max=0"}, "option -o batch_max: value 0 out of range 1..1000000"},
		{{"a", "b", "cpu_workers=many"},
		 "option -o a: expected key=value"},
		{{"gpu=on", "log_level=loud"},
		 "option -o log_level: invalid value 'loud' (expected error, warn, info or debug)"},
		{{"cache_size=lots"},
		 "option -o cache_size: invalid size 'lots' (expected bytes, optionally with K, M, G or T)"},
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		size_t n = 0;
		while (n < 3 && t[i].ov[n])
			n++;
		char err[1024];
		td_conf c;
		cr_assert_eq(td_conf_load(&c, NULL, t[i].ov, n, err, sizeof err), -1);
		cr_assert_str_eq(err, t[i].want);
	}
}

Test(conf, file_error_reported_before_overrides)
{
	char path[1024], want[2048], err[1024];
	put(path, sizeof path, "f.conf", "gpu = on\nbatch_max = 0\n");
	const char *ov[] = {"batch_max=5"};
	td_conf c;
	cr_assert_eq(td_conf_load(&c, path, ov, 1, err, sizeof err), -1);
	snprintf(want, sizeof want, "%s:2: batch_max: value 0 out of range 1..1000000", path);
	cr_assert_str_eq(err, want);
}

Test(conf, key_find)
{
	cr_assert_eq(td_conf_key_find("gpu"), TD_CONF_KEY_GPU);
	cr_assert_eq(td_conf_key_find("gpu=on"), TD_CONF_KEY_GPU);
	cr_assert_eq(td_conf_key_find("gpu_device=1"), TD_CONF_KEY_GPU_DEVICE);
	cr_assert_eq(td_conf_key_find("log_level"), TD_CONF_KEY_LOG_LEVEL);
	cr_assert_eq(td_conf_key_find("gp"), -1);
	cr_assert_eq(td_conf_key_find("ro"), -1);
	cr_assert_eq(td_conf_key_find("config=x"), -1);
	cr_assert_eq(td_conf_key_find("allow_other"), -1);
	cr_assert_eq(td_conf_key_find(NULL), -1);
	for (int k = 0; k < TD_CONF_NKEYS; k++)
		cr_assert_eq(td_conf_key_find(td_conf_key_name((td_conf_key)k)), k);
	cr_assert_null(td_conf_key_name(TD_CONF_NKEYS));
}

/* ---- printing --------------------------------------------------------- */

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f);
	static char buf[16384];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

Test(conf, print_shows_sources_and_round_trips)
{
	char path[1024], out[1024], err[1024], line[2048];
	put(path, sizeof path, "f.conf", "[tadocfs]\ncache_size = 3G\n\ngpu = off\n");
	const char *ov[] = {"batch_max=77"};
	td_conf c;
	cr_assert_eq(td_conf_load(&c, path, ov, 1, err, sizeof err), 0, "%s", err);

	snprintf(out, sizeof out, "%s/printed.conf", dir);
	FILE *f = fopen(out, "w");
	cr_assert_not_null(f);
	cr_assert_eq(td_conf_print(&c, f), 0);
	fclose(f);
	char *text = slurp(out);
	snprintf(line, sizeof line, "# config file: %s\n", path);
	cr_assert_not_null(strstr(text, line), "%s", text);
	snprintf(line, sizeof line, "cache_size        = 3G       ; %s:2\n", path);
	cr_assert_not_null(strstr(text, line), "%s", text);
	snprintf(line, sizeof line, "gpu               = off      ; %s:4\n", path);
	cr_assert_not_null(strstr(text, line), "%s", text);
	cr_assert_not_null(strstr(text, "batch_max         = 77       ; -o\n"), "%s", text);
	cr_assert_not_null(strstr(text, "journal_sync      = fsync    ; default\n"), "%s", text);
	for (int k = 0; k < TD_CONF_NKEYS; k++) {
		snprintf(line, sizeof line, k == TD_CONF_KEY_GPU_DEVICE ? "\n# %s " : "\n%s ",
			 td_conf_key_name((td_conf_key)k));
		cr_assert_not_null(strstr(text, line), "missing %s", line);
	}
	cr_assert_not_null(strstr(text, "\n# gpu_device        = 0        ; default, not set\n"), "%s", text);

	/* The printed text is itself a valid config with the same values. */
	td_conf d;
	cr_assert_eq(td_conf_load(&d, out, NULL, 0, err, sizeof err), 0, "%s", err);
	cr_assert_eq(d.gpu, c.gpu);
	cr_assert_eq(d.gpu_device, c.gpu_device);
	cr_assert_eq(d.gpu_mem_cap, c.gpu_mem_cap);
	cr_assert_eq(d.batch_window_us, c.batch_window_us);
	cr_assert_eq(d.batch_max, c.batch_max);
	cr_assert_eq(d.cpu_workers, c.cpu_workers);
	cr_assert_eq(d.batch_priority, c.batch_priority);
	cr_assert_eq(d.cache_size, c.cache_size);
	cr_assert_eq(d.journal_sync, c.journal_sync);
	cr_assert_eq(d.compact_threshold, c.compact_threshold);
	cr_assert_eq(d.log_level, c.log_level);
	/* a default gpu_device read back is still not given (the daemon
	 * reads a given one, even 0, as "keep the shards on it") */
	cr_assert_eq(d.origin[TD_CONF_KEY_GPU_DEVICE].src, TD_CONF_SRC_DEFAULT);

	/* Independent oracle: Python's configparser reads the same values. */
	char cmd[4096];
	snprintf(cmd, sizeof cmd,
		 "python3 -c 'import configparser,sys\n"
		 "p=configparser.ConfigParser(inline_comment_prefixes=(\";\",))\n"
		 "p.read(sys.argv[1])\n"
		 "s=p[\"tadocfs\"]\n"
		 "assert s[\"gpu\"]==\"off\", s[\"gpu\"]\n"
		 "assert s[\"cache_size\"]==\"3G\"\n"
		 "assert s[\"batch_max\"]==\"77\"\n"
		 "assert s[\"log_level\"]==\"warn\"\n"
		 "assert len(s)==%d, len(s)' '%s'",
		 TD_CONF_NKEYS - 1, out); /* gpu_device: a comment */
	cr_assert_eq(system(cmd), 0, "configparser disagrees");
}

Test(conf, print_without_file)
{
	td_conf c;
	td_conf_defaults(&c);
	char out[1024];
	snprintf(out, sizeof out, "%s/p.conf", dir);
	FILE *f = fopen(out, "w");
	cr_assert_eq(td_conf_print(&c, f), 0);
	fclose(f);
	char *text = slurp(out);
	cr_assert_not_null(strstr(text, "# config file: (none)\n"));
	cr_assert_not_null(strstr(text, "gpu               = auto     ; default\n"));
	cr_assert_not_null(strstr(text, "cache_size        = 512M     ; default\n"));
}

/* The example file in contrib/ is valid and lists every default. */
Test(conf, example_file_matches_defaults)
{
	const char *src = getenv("TESTS_DIR");
	if (!src)
		cr_skip_test("TESTS_DIR not set");
	char path[1024], err[1024];
	snprintf(path, sizeof path, "%s/../contrib/tadocfs.conf.example", src);
	td_conf c, d;
	cr_assert_eq(td_conf_load(&c, path, NULL, 0, err, sizeof err), 0, "%s", err);
	td_conf_defaults(&d);
	strcpy(d.file, c.file);
	for (int k = 0; k < TD_CONF_NKEYS; k++) {
		cr_assert_eq(c.origin[k].src, TD_CONF_SRC_DEFAULT,
			     "%s is set (uncommented) in the example",
			     td_conf_key_name((td_conf_key)k));
	}
	cr_assert_eq(memcmp(&c, &d, sizeof c), 0);
	/* Every key appears as a commented "#key = default" line. */
	char *text = slurp(path);
	for (int k = 0; k < TD_CONF_NKEYS; k++) {
		char want[128], val[64];
		td_conf_format(&d, (td_conf_key)k, val, sizeof val);
		snprintf(want, sizeof want, "\n#%s = %s\n", td_conf_key_name((td_conf_key)k), val);
		cr_assert_not_null(strstr(text, want), "example lacks '%s'", want + 1);
	}
}

/* ---- found by fuzzing the configuration ------------------------------- */

/* A BOM before the first line's section header must not skip its check. */
Test(conf, bom_before_section_header)
{
	td_conf c;
	char path[1024];
	expect_file_error("\xEF\xBB\xBF[bogus]\nbatch_max = 7\n", 1,
			  "unknown section [bogus] (keys go at top level or in [tadocfs])");
	expect_file_error("\xEF\xBB\xBF[tadocfs] junk\n", 1, "unexpected text after section header");
	load_ok(&c, "\xEF\xBB\xBF  [tadocfs]\nbatch_max = 7\n", path, sizeof path);
	cr_assert_eq(c.batch_max, 7);
}

/* A FIFO is refused at once (opening one used to wait for a writer for ever),
 * and a device without newlines is refused at its first NUL byte. */
Test(conf, fifo_and_endless_device, .timeout = 10)
{
	char path[1024], want[2048], err[1024];
	td_conf c;
	snprintf(path, sizeof path, "%s/fifo.conf", dir);
	cr_assert_eq(mkfifo(path, 0600), 0);
	cr_assert_eq(td_conf_load(&c, path, NULL, 0, err, sizeof err), -1);
	snprintf(want, sizeof want, "config file %s: not a regular file", path);
	cr_assert_str_eq(err, want);
	cr_assert_eq(td_conf_load(&c, "/dev/zero", NULL, 0, err, sizeof err), -1);
	cr_assert_str_eq(err, "/dev/zero:1: NUL byte in line");
	cr_assert_eq(td_conf_load(&c, "/dev/null", NULL, 0, err, sizeof err), 0, "%s", err);
}

/* An override value longer than the loader keeps is an error, not cut. */
Test(conf, override_value_too_long)
{
	char ov[1200], err[1024];
	td_conf c;
	int n = snprintf(ov, sizeof ov, "gpu_devices=");
	for (int i = 0; i < 255; i++)
		n += snprintf(ov + n, sizeof ov - (size_t)n, "0:");
	snprintf(ov + n, sizeof ov - (size_t)n, "0:64"); /* 64: invalid, past byte 511 */
	const char *o[] = {ov};
	cr_assert_eq(td_conf_load(&c, NULL, o, 1, err, sizeof err), -1);
	cr_assert_str_eq(err, "option -o gpu_devices: value too long (at most 511 bytes)");
}
