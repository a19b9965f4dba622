/* td_conf: the key table, defaults, value parsing/validation and printing. */
#include "td_conf.h"

#include <assert.h>
#include <ctype.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>

enum kind { K_GPU, K_BOOL, K_SYNC, K_LOG, K_INT, K_SIZE, K_DEVS };

struct keydef {
	const char *name;
	enum kind kind;
	uint64_t min, max; /* K_INT only */
};

static const struct keydef keys[TD_CONF_NKEYS] = {
	[TD_CONF_KEY_GPU] = {"gpu", K_GPU, 0, 0},
	[TD_CONF_KEY_GPU_DEVICE] = {"gpu_device", K_INT, 0, 2147483647},
	[TD_CONF_KEY_GPU_DEVICES] = {"gpu_devices", K_DEVS, 0, 63},
	[TD_CONF_KEY_GPU_MEM_CAP] = {"gpu_mem_cap", K_SIZE, 0, 0},
	[TD_CONF_KEY_BATCH_WINDOW_US] = {"batch_window_us", K_INT, 0, 1000000},
	[TD_CONF_KEY_BATCH_MAX] = {"batch_max", K_INT, 1, 1000000},
	[TD_CONF_KEY_GPU_MIN_READS] = {"gpu_min_reads", K_INT, 0, 1000000},
	[TD_CONF_KEY_GPU_MIN_COUNTS] = {"gpu_min_counts", K_INT, 0, 1000000},
	[TD_CONF_KEY_GPU_MIN_READ_SIZE] = {"gpu_min_read_size", K_SIZE, 0, 0},
	[TD_CONF_KEY_CPU_WORKERS] = {"cpu_workers", K_INT, 0, 1024},
	[TD_CONF_KEY_BATCH_PRIORITY] = {"batch_priority", K_INT, 0, 39},
	[TD_CONF_KEY_CACHE_SIZE] = {"cache_size", K_SIZE, 0, 0},
	[TD_CONF_KEY_CACHE_WARM] = {"cache_warm", K_BOOL, 0, 0},
	[TD_CONF_KEY_READ_AHEAD] = {"read_ahead", K_SIZE, 0, 0},
	[TD_CONF_KEY_STORE_AHEAD] = {"store_ahead", K_BOOL, 0, 0},
	[TD_CONF_KEY_JOURNAL_SYNC] = {"journal_sync", K_SYNC, 0, 0},
	[TD_CONF_KEY_COMPACT_THRESHOLD] = {"compact_threshold", K_SIZE, 0, 0},
	[TD_CONF_KEY_LOG_LEVEL] = {"log_level", K_LOG, 0, 0},
};

static const char *const gpu_names[] = {"auto", "on", "off"};
static const char *const sync_names[] = {"none", "fsync", "always"};
static const char *const log_names[] = {"error", "warn", "info", "debug"};

void td_conf_defaults(td_conf *c)
{
	memset(c, 0, sizeof *c);
	c->gpu = TD_CONF_GPU_AUTO;
	c->gpu_device = 0;
	c->gpu_mem_cap = 0;
	c->batch_window_us = 200;
	c->batch_max = 1024;
	c->cpu_workers = 0;
	c->batch_priority = 10;
	c->cache_size = 512ull << 20;
	c->cache_warm = true;
	c->read_ahead = 8ull << 20;
	c->store_ahead = true;
	c->journal_sync = TD_CONF_SYNC_FSYNC;
	c->compact_threshold = 0; /* never: compaction at unmount is asked for */
	c->log_level = TD_CONF_LOG_WARN;
	c->file[0] = '\0';
	for (int k = 0; k < TD_CONF_NKEYS; k++)
		c->origin[k] = (td_conf_origin){TD_CONF_SRC_DEFAULT, 0};
}

const char *td_conf_key_name(td_conf_key k)
{
	if ((int)k < 0 || k >= TD_CONF_NKEYS)
		return NULL;
	return keys[k].name;
}

int td_conf_key_find(const char *name)
{
	if (!name)
		return -1;
	size_t n = strcspn(name, "=");
	for (int k = 0; k < TD_CONF_NKEYS; k++)
		if (strlen(keys[k].name) == n && !strncmp(keys[k].name, name, n))
			return k;
	return -1;
}

const char *td_conf_gpu_name(td_conf_gpu g)
{
	return (unsigned)g < 3 ? gpu_names[g] : "?";
}

const char *td_conf_sync_name(td_conf_sync s)
{
	return (unsigned)s < 3 ? sync_names[s] : "?";
}

const char *td_conf_log_name(td_conf_log l)
{
	return (unsigned)l < 4 ? log_names[l] : "?";
}

__attribute__((format(printf, 3, 4)))
static int fail(char *msg, size_t len, const char *fmt, ...)
{
	if (msg && len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(msg, len, fmt, ap);
		va_end(ap);
	}
	return -1;
}

/* Decimal digits only, no sign, no spaces; *end points after the digits. */
static int parse_u64(const char *s, uint64_t *out, const char **end)
{
	uint64_t v = 0;
	const char *p = s;
	if (!isdigit((unsigned char)*p))
		return -1;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	*end = p;
	return 0;
}

int td_conf_parse_size(const char *s, uint64_t *out)
{
	uint64_t v;
	const char *p;
	if (!s || parse_u64(s, &v, &p))
		return -1;
	while (*p == ' ' || *p == '\t')
		p++;
	unsigned shift = 0;
	switch (toupper((unsigned char)*p)) {
	case '\0':
		break;
	case 'B':
		if (p[1])
			return -1;
		p++;
		break;
	case 'K': shift = 10; break;
	case 'M': shift = 20; break;
	case 'G': shift = 30; break;
	case 'T': shift = 40; break;
	default:
		return -1;
	}
	if (shift) {
		p++;
		if (*p == 'i' || *p == 'I') {
			p++;
			if (toupper((unsigned char)*p) != 'B')
				return -1;
		}
		if (toupper((unsigned char)*p) == 'B')
			p++;
		if (*p)
			return -1;
		if (v > (UINT64_MAX >> shift))
			return -1;
		v <<= shift;
	}
	*out = v;
	return 0;
}

static int parse_enum(const char *v, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (!strcasecmp(v, names[i]))
			return i;
	return -1;
}

/* on/yes/true/1 -> 1, off/no/false/0 -> 0, else -1. */
static int parse_bool(const char *v)
{
	static const char *const yes[] = {"on", "yes", "true", "1"};
	static const char *const no[] = {"off", "no", "false", "0"};
	if (parse_enum(v, yes, 4) >= 0)
		return 1;
	if (parse_enum(v, no, 4) >= 0)
		return 0;
	return -1;
}

/* "all" (0), or device numbers 0..63 separated by ':' or ',' into a mask. */
static int parse_devs(const char *v, uint64_t *mask)
{
	*mask = 0;
	if (!strcasecmp(v, "all"))
		return 0;
	const char *p = v;
	for (;;) {
		if (!isdigit((unsigned char)*p))
			return -1;
		unsigned d = 0;
		while (isdigit((unsigned char)*p) && d < 1000)
			d = d * 10 + (unsigned)(*p++ - '0');
		if (d > 63)
			return -1;
		*mask |= UINT64_C(1) << d;
		if (!*p)
			return 0;
		if (*p != ':' && *p != ',')
			return -1;
		p++;
	}
}

static int parse_gpu(const char *v)
{
	int g = parse_enum(v, gpu_names, 3);
	if (g >= 0)
		return g;
	g = parse_bool(v);
	return g < 0 ? -1 : g ? TD_CONF_GPU_ON : TD_CONF_GPU_OFF;
}

int td_conf_set(td_conf *c, const char *key, const char *value,
		td_conf_origin origin, char *msg, size_t msglen)
{
	assert(c && key);
	int k = -1;
	for (int i = 0; i < TD_CONF_NKEYS; i++)
		if (!strcmp(keys[i].name, key))
			k = i;
	if (k < 0)
		return fail(msg, msglen, "unknown key '%s'", key);
	const struct keydef *d = &keys[k];
	if (!value || !*value)
		return fail(msg, msglen, "%s: empty value", d->name);

	int e;
	uint64_t u;
	const char *end;
	switch (d->kind) {
	case K_GPU:
		if ((e = parse_gpu(value)) < 0)
			return fail(msg, msglen,
				    "%s: invalid value '%s' (expected auto, on or off)",
				    d->name, value);
		c->gpu = (td_conf_gpu)e;
		break;
	case K_BOOL:
		if ((e = parse_bool(value)) < 0)
			return fail(msg, msglen, "%s: invalid value '%s' (expected on or off)", d->name, value);
		switch (k) {
		case TD_CONF_KEY_CACHE_WARM: c->cache_warm = e == 1; break;
		case TD_CONF_KEY_STORE_AHEAD: c->store_ahead = e == 1; break;
		default: assert(!"on/off key without a field"); break;
		}
		break;
	case K_SYNC:
		if ((e = parse_enum(value, sync_names, 3)) < 0)
			return fail(msg, msglen,
				    "%s: invalid value '%s' (expected none, fsync or always)",
				    d->name, value);
		c->journal_sync = (td_conf_sync)e;
		break;
	case K_LOG:
		if ((e = parse_enum(value, log_names, 4)) < 0)
			return fail(msg, msglen,
				    "%s: invalid value '%s' (expected error, warn, info or debug)",
				    d->name, value);
		c->log_level = (td_conf_log)e;
		break;
	case K_INT:
		if (parse_u64(value, &u, &end) || *end) {
			/* A number that only overflows is "out of range" too. */
			const char *p = value;
			while (isdigit((unsigned char)*p))
				p++;
			if (p != value && !*p)
				return fail(msg, msglen,
					    "%s: value %s out of range %llu..%llu",
					    d->name, value,
					    (unsigned long long)d->min,
					    (unsigned long long)d->max);
			return fail(msg, msglen,
				    "%s: invalid value '%s' (expected a decimal integer)",
				    d->name, value);
		}
		if (u < d->min || u > d->max)
			return fail(msg, msglen, "%s: value %s out of range %llu..%llu",
				    d->name, value, (unsigned long long)d->min,
				    (unsigned long long)d->max);
		switch (k) {
		case TD_CONF_KEY_GPU_DEVICE: c->gpu_device = (int)u; break;
		case TD_CONF_KEY_BATCH_WINDOW_US: c->batch_window_us = (uint32_t)u; break;
		case TD_CONF_KEY_BATCH_MAX: c->batch_max = (uint32_t)u; break;
		case TD_CONF_KEY_GPU_MIN_READS: c->gpu_min_reads = (uint32_t)u; break;
		case TD_CONF_KEY_GPU_MIN_COUNTS: c->gpu_min_counts = (uint32_t)u; break;
		case TD_CONF_KEY_CPU_WORKERS: c->cpu_workers = (uint32_t)u; break;
		case TD_CONF_KEY_BATCH_PRIORITY: c->batch_priority = (uint32_t)u; break;
		default: assert(!"integer key without a field"); break;
		}
		break;
	case K_DEVS:
		if (parse_devs(value, &u))
			return fail(msg, msglen,
				    "%s: invalid value '%s' (expected all, or device numbers 0..63 separated by ':')",
				    d->name, value);
		c->gpu_devices = u;
		break;
	case K_SIZE:
		if (td_conf_parse_size(value, &u))
			return fail(msg, msglen,
				    "%s: invalid size '%s' (expected bytes, optionally with K, M, G or T)",
				    d->name, value);
		switch (k) {
		case TD_CONF_KEY_GPU_MEM_CAP: c->gpu_mem_cap = u; break;
		case TD_CONF_KEY_CACHE_SIZE: c->cache_size = u; break;
		case TD_CONF_KEY_GPU_MIN_READ_SIZE:
			if (u > (1ull << 30))
				return fail(msg, msglen, "%s: '%s' is more than 1G", d->name, value);
			c->gpu_min_read_size = u;
			break;
		case TD_CONF_KEY_READ_AHEAD:
			if (u > (1ull << 30))
				return fail(msg, msglen, "%s: '%s' is more than 1G", d->name, value);
			c->read_ahead = u;
			break;
		case TD_CONF_KEY_COMPACT_THRESHOLD: c->compact_threshold = u; break;
		default: assert(!"size key without a field"); break;
		}
		break;
	}
	c->origin[k] = origin;
	return 0;
}

static int format_size(uint64_t v, char *buf, size_t len)
{
	static const char units[] = "KMGT";
	int u = -1;
	while (u < 3 && v && (v & 1023) == 0) {
		v >>= 10;
		u++;
	}
	if (u < 0)
		return snprintf(buf, len, "%llu", (unsigned long long)v);
	return snprintf(buf, len, "%llu%c", (unsigned long long)v, units[u]);
}

int td_conf_format(const td_conf *c, td_conf_key k, char *buf, size_t len)
{
	switch (k) {
	case TD_CONF_KEY_GPU: return snprintf(buf, len, "%s", td_conf_gpu_name(c->gpu));
	case TD_CONF_KEY_GPU_DEVICE: return snprintf(buf, len, "%d", c->gpu_device);
	case TD_CONF_KEY_GPU_DEVICES: {
		char list[256] = "all";
		size_t n = 0;
		for (unsigned d = 0; d < 64; d++)
			if (c->gpu_devices >> d & 1)
				n += (size_t)snprintf(list + n, sizeof list - n, "%s%u", n ? ":" : "", d);
		return snprintf(buf, len, "%s", list);
	}
	case TD_CONF_KEY_GPU_MEM_CAP: return format_size(c->gpu_mem_cap, buf, len);
	case TD_CONF_KEY_BATCH_WINDOW_US: return snprintf(buf, len, "%u", (unsigned)c->batch_window_us);
	case TD_CONF_KEY_BATCH_MAX: return snprintf(buf, len, "%u", (unsigned)c->batch_max);
	case TD_CONF_KEY_GPU_MIN_READS: return snprintf(buf, len, "%u", (unsigned)c->gpu_min_reads);
	case TD_CONF_KEY_GPU_MIN_COUNTS: return snprintf(buf, len, "%u", (unsigned)c->gpu_min_counts);
	case TD_CONF_KEY_GPU_MIN_READ_SIZE: return format_size(c->gpu_min_read_size, buf, len);
	case TD_CONF_KEY_CPU_WORKERS: return snprintf(buf, len, "%u", (unsigned)c->cpu_workers);
	case TD_CONF_KEY_BATCH_PRIORITY: return snprintf(buf, len, "%u", (unsigned)c->batch_priority);
	case TD_CONF_KEY_CACHE_SIZE: return format_size(c->cache_size, buf, len);
	case TD_CONF_KEY_CACHE_WARM: return snprintf(buf, len, "%s", c->cache_warm ? "on" : "off");
	case TD_CONF_KEY_READ_AHEAD: return format_size(c->read_ahead, buf, len);
	case TD_CONF_KEY_STORE_AHEAD: return snprintf(buf, len, "%s", c->store_ahead ? "on" : "off");
	case TD_CONF_KEY_JOURNAL_SYNC: return snprintf(buf, len, "%s", td_conf_sync_name(c->journal_sync));
	case TD_CONF_KEY_COMPACT_THRESHOLD: return format_size(c->compact_threshold, buf, len);
	case TD_CONF_KEY_LOG_LEVEL: return snprintf(buf, len, "%s", td_conf_log_name(c->log_level));
	case TD_CONF_NKEYS: break;
	}
	return -1;
}

int td_conf_where(const td_conf *c, td_conf_key k, char *buf, size_t len)
{
	if ((unsigned)k >= TD_CONF_NKEYS)
		return -1;
	switch (c->origin[k].src) {
	case TD_CONF_SRC_FILE: return snprintf(buf, len, "%s:%u", c->file, c->origin[k].line);
	case TD_CONF_SRC_OPTION: return snprintf(buf, len, "option -o %s", keys[k].name);
	default: return snprintf(buf, len, "default");
	}
}

int td_conf_print(const td_conf *c, FILE *out)
{
	if (fprintf(out, "# tadocfs effective configuration\n# config file: %s\n[tadocfs]\n",
		    c->file[0] ? c->file : "(none)") < 0)
		return -1;
	for (int k = 0; k < TD_CONF_NKEYS; k++) {
		char val[256];
		char src[TD_CONF_PATH_MAX + 32];
		td_conf_format(c, (td_conf_key)k, val, sizeof val);
		if (c->origin[k].src == TD_CONF_SRC_OPTION)
			snprintf(src, sizeof src, "-o");
		else
			td_conf_where(c, (td_conf_key)k, src, sizeof src);
		/* a default gpu_device means "not given" (td_conf_print) */
		int unset = k == TD_CONF_KEY_GPU_DEVICE && c->origin[k].src == TD_CONF_SRC_DEFAULT;
		if (fprintf(out, "%s%-17s = %-8s ; %s%s\n", unset ? "# " : "", keys[k].name, val, src,
			    unset ? ", not set" : "") < 0)
			return -1;
	}
	return fflush(out) ? -1 : 0;
}
