/* gpu_emu: runs the GPU kernels' code on the host (32 coroutines emulate a warp) against the CPU engine; needs no GPU. */
/*
 * Usage: gpu_emu [ARCHIVE]   (no archive: builds an adversarial one)
 * $TD_EMU_SAMPLES_DIV=N checks 1/N of the usual random requests (at least 50 a kind):
 * contrib/test-all.sh sets it under the sanitizers, where every coroutine switch is slow.
 * The per-thread and per-warp functions of gpu/td_gpu_kernels.cu are
 * __host__ __device__; here the 32 lanes of a warp are coroutines and
 * every warp collective (shuffle, ballot) is a barrier among them, so the same code paths, lane splits and
 * scans that run on the GPU are checked for identical results. Exit 0 when
 * all match, 1 otherwise.
 */
#define TD_GPU_EMU 1
#include <functional>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <ucontext.h>
#include <unistd.h>

#include "td_gpu_kernels.cu"

#include "td_extract.h"
#include "td_writer.h"

#include "gpu_warp_emu.h"

#ifndef __CUDA_ARCH__
/* ---- the archive as the kernels see it, in host memory ---- */

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd()
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}
static uint64_t below(uint64_t n)
{
	return n ? rnd() % n : 0;
}

static int failures;
#define FAIL(...)                                          \
	do {                                               \
		fprintf(stderr, "MISMATCH: " __VA_ARGS__); \
		fputc('\n', stderr);                       \
		if (++failures > 20)                       \
			exit(1);                           \
	} while (0)

/* Everything the emulated device holds, freed at exit (LeakSanitizer). */
static std::vector<void *> g_allocs;

/* Copy a section with 16 bytes of slack, 8-aligned, as on the device. */
static const uint8_t *sec_copy(const td_archive *a, unsigned id, uint64_t *size)
{
	uint64_t sz = 0;
	const void *p = td_archive_bytes(a, id, &sz);
	uint8_t *c = (uint8_t *)aligned_alloc(256, (sz + 16 + 255) & ~(uint64_t)255);
	memset(c, 0, (sz + 16 + 255) & ~(uint64_t)255);
	if (p && sz)
		memcpy(c, p, sz);
	*size = sz;
	g_allocs.push_back(c);
	return c;
}

static void view(const td_archive *a, unsigned id, td_pack *out)
{
	uint64_t sz;
	const uint8_t *c = sec_copy(a, id, &sz);
	if (td_pack_view(out, c, sz)) {
		fprintf(stderr, "section %u: bad packed array\n", id);
		exit(1);
	}
}

static void gdev_build(const td_archive *a, td_gdev *d)
{
	uint64_t sz;
	const td_disk_meta *m = (const td_disk_meta *)td_archive_section(a, TD_SEC_META, &sz);
	memset(d, 0, sizeof *d);
	d->nentries = m->nentries;
	d->nwords = m->nwords;
	d->nother = m->nother;
	d->nrules = m->nrules;
	d->ngroups = m->ngroups;
	d->nroot = m->nroot;
	d->sample_shift = m->sample_shift;
	d->nsamples = m->nsamples;
	view(a, TD_SEC_E_MODE, &d->e_mode);
	view(a, TD_SEC_E_SIZE, &d->e_size);
	view(a, TD_SEC_E_ROOT, &d->e_root);
	view(a, TD_SEC_E_GSTART, &d->e_gstart);
	view(a, TD_SEC_E_CHILD, &d->e_child);
	view(a, TD_SEC_WORD_OFF, &d->word_off);
	view(a, TD_SEC_WORD_FREQ, &d->word_freq);
	view(a, TD_SEC_OTHER_OFF, &d->other_off);
	view(a, TD_SEC_RULE_SYMS, &d->rule_syms);
	view(a, TD_SEC_RULE_LEN, &d->rule_len);
	view(a, TD_SEC_ROOT_SYMS, &d->root_syms);
	view(a, TD_SEC_ROOT_SAMPLES, &d->root_samples);
	view(a, TD_SEC_RULE_SAMPLES, &d->rule_samples);
	d->words = sec_copy(a, TD_SEC_WORDS, &d->words_size);
	d->other = sec_copy(a, TD_SEC_OTHER, &d->other_size);
	d->groups = (const td_disk_group *)sec_copy(a, TD_SEC_RULE_GROUPS, &sz);
	uint64_t *mask = (uint64_t *)calloc(TD_MASK_W * (d->nrules + 1), sizeof *mask);
	d->rule_mask = mask;
	g_allocs.push_back(mask);
	int changed = 1, passes = 0;
	while (changed) {
		changed = 0;
		for (uint64_t r = 0; r < d->nrules; r++)
			td_mask_rule(*d, mask, &changed, r);
		if (++passes > 200) {
			fprintf(stderr, "rule signatures do not converge\n");
			exit(1);
		}
	}
	uint32_t *files = (uint32_t *)malloc(12 * d->nentries);
	if (td_gpu_file_order(a, (uint32_t)d->nentries, files, files + d->nentries)) {
		fprintf(stderr, "file order: %s\n", td_errdetail());
		exit(1);
	}
	d->dfs_files = files;
	d->sub = files + d->nentries;
	g_allocs.push_back(files);
	/* every root symbol's offset, as td_gk_root_pos builds it */
	uint64_t *pos = (uint64_t *)calloc(d->nroot + 1, sizeof *pos);
	int pbad = 0;
	if (td_gk_root_pos(d, pos, &pbad, NULL) || pbad) {
		fprintf(stderr, "root offsets: a root symbol is not a symbol\n");
		exit(1);
	}
	d->root_pos = pos;
	g_allocs.push_back(pos);
	/* the rule groups' jump table, as the host builds it at open */
	uint32_t *jt = (uint32_t *)malloc(4 * td_rule_jumps_n(d->nrules));
	g_allocs.push_back(jt);
	if (td_rule_jumps(d->groups, d->ngroups, d->nrules, jt)) {
		fprintf(stderr, "rule groups: not in rule order\n");
		exit(1);
	}
	d->rjt = jt;
	/* and every rule's right-hand side in one word */
	uint64_t *rw = (uint64_t *)malloc(8 * (d->nrules + 1));
	g_allocs.push_back(rw);
	if (td_rule_rhs_words(d->groups, d->ngroups, d->nrules, d->rule_syms.n, rw) == 0)
		d->rrhs = rw;
	else /* a rule of 2^24 symbols or more: td_rhs by the groups, as on the device */
		printf("rule right-hand sides: not in words (a rule too long)\n");
	printf("archive: %llu entries, %llu words, %llu rules; signatures in %d passes\n",
	       (unsigned long long)d->nentries, (unsigned long long)d->nwords, (unsigned long long)d->nrules, passes);
}

/* ---- checks ---- */

static void check_extract(const td_archive *a, const td_gdev &d, size_t n)
{
	std::vector<td_gx_req> q(n);
	std::vector<td_gx_res> res(n);
	std::vector<std::vector<uint8_t>> want(n);
	std::vector<int> werr(n);
	std::vector<size_t> wgot(n);
	uint64_t bytes = 0;
	uint32_t items = 0;
	uint32_t nent = td_archive_nentries(a);
	for (size_t i = 0; i < n; i++) {
		uint64_t r = below(100);
		td_entry e = r < 3 ? (td_entry)(nent + below(3)) : (td_entry)below(nent);
		td_stat st;
		uint64_t size = td_archive_stat(a, e, &st) == TD_OK ? st.size : 0;
		uint32_t len = r < 40 ? 64 : r < 70 ? 4096 : r < 80 ? (uint32_t)below(20000) : r < 85 ? 0 : (uint32_t)(size + 3);
		uint64_t off = r % 5 == 0 && size > len ? size - len / 2 : below(size + 2);
		q[i].file = e;
		q[i].off = off;
		q[i].len = len;
		q[i].outoff = bytes;
		q[i].item0 = items;
		uint32_t chunk = d.xchunk ? d.xchunk : TD_GX_CHUNK;
		uint32_t c = (len + chunk - 1) / chunk;
		items += c ? c : 1;
		bytes += len;
		want[i].resize(len + 1);
		werr[i] = td_extract(a, e, off, want[i].data(), len, &wgot[i]);
	}
	std::vector<uint8_t> out(bytes + 1, 0xA5);
	for (uint32_t w = 0; w < items; w += 32)
		warp_run([&](uint32_t lane) {
			td_extract_warp(d, q.data(), (uint32_t)n, items, w + lane, out.data(), res.data());
		});
	/* every request again, walked by whole warps (td_xc_warp), one per
	 * d.xseg bytes (at least one, so empty reads report too) */
	std::vector<td_gx_res> cres(n);
	std::vector<uint8_t> cout(bytes + 1, 0xA5);
	uint32_t warps = 0, seg = d.xseg ? d.xseg : TD_GX_SEG;
	for (size_t i = 0; i < n; i++) {
		q[i].warp0 = warps;
		warps += q[i].len ? (q[i].len + seg - 1) / seg : 1;
	}
	for (uint32_t w = 0; w < warps; w++)
		warp_run([&](uint32_t) { td_xc_warp(d, q.data(), (uint32_t)n, w, cout.data(), cres.data()); });
	for (int coop = 0; coop < 2; coop++) {
		const std::vector<td_gx_res> &rs = coop ? cres : res;
		const std::vector<uint8_t> &o = coop ? cout : out;
		const char *how = coop ? "warp-walked" : "lane-walked";
		for (size_t i = 0; i < n; i++) {
			if (rs[i].err != werr[i] || rs[i].got != wgot[i])
				FAIL("%s extract file %u off %llu len %u: cpu err %d got %zu, kernel err %d got %u", how,
				     q[i].file, (unsigned long long)q[i].off, q[i].len, werr[i], wgot[i], rs[i].err,
				     rs[i].got);
			else if (memcmp(want[i].data(), o.data() + q[i].outoff, wgot[i]))
				FAIL("%s extract file %u off %llu len %u: bytes differ", how, q[i].file,
				     (unsigned long long)q[i].off, q[i].len);
		}
	}
}

/* qbig > 0: every request over a regular file is marked big and walked
 * as td_k_count_big / td_k_search_big do (root symbols over qbig bytes by
 * the whole warp); 0: the usual kernels. */
static void check_query(const td_archive *a, const td_gdev &d, size_t n, uint64_t qbig = 0)
{
	uint32_t nent = td_archive_nentries(a);
	std::vector<td_gq_req> q(n);
	std::string words;
	std::vector<std::string> w(n);
	static const char *odd[] = {"absentword", "zzzz", "q"};
	for (size_t i = 0; i < n; i++) {
		if (below(10) < 8 && d.nwords) {
			uint64_t k = below(d.nwords);
			uint64_t o0 = td_pget(d.word_off, k), o1 = td_pget(d.word_off, k + 1);
			w[i].assign((const char *)d.words + o0, o1 - o0);
		} else {
			w[i] = odd[below(3)];
		}
		q[i].woff = words.size();
		q[i].wlen = (uint32_t)w[i].size();
		q[i].scope = below(8) == 0 ? TD_ROOT : (uint32_t)below(nent);
		q[i].big = qbig && (td_pget(d.e_mode, q[i].scope) & TD_S_IFMT) == TD_S_IFREG;
		words += w[i];
	}
	std::vector<uint64_t> cnt(n), scnt(n), base(n + 1);
	const uint8_t *qw = (const uint8_t *)words.data();
	warp_run([&](uint32_t) {
		for (uint32_t i = 0; i < n; i++) {
			if (q[i].big) {
				td_count_big_one(d, qw, q.data(), i, 0, qbig, cnt.data());
				td_count_big_one(d, qw, q.data(), i, 1, qbig, scnt.data());
				continue;
			}
			td_count_one(d, qw, q.data(), i, 0, cnt.data());
			td_count_one(d, qw, q.data(), i, 1, scnt.data());
		}
	});
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		base[i] = total;
		if (scnt[i] != TD_GQ_NOTFOUND)
			total += scnt[i];
	}
	std::vector<td_hit> hits(total + 1);
	warp_run([&](uint32_t) {
		for (uint32_t i = 0; i < n; i++)
			if (scnt[i] != TD_GQ_NOTFOUND && q[i].big)
				td_search_big_one(d, qw, q.data(), i, qbig, base.data(), hits.data());
			else if (scnt[i] != TD_GQ_NOTFOUND)
				td_search_one(d, qw, q.data(), i, base.data(), hits.data());
	});
	for (size_t i = 0; i < n; i++) {
		uint64_t c = 0;
		int err = td_count(a, w[i].data(), w[i].size(), q[i].scope, &c);
		td_hits h = {};
		int serr = td_search(a, w[i].data(), w[i].size(), q[i].scope, &h);
		if (cnt[i] == TD_GQ_NOTFOUND) {
			if (err == TD_OK && c != 0)
				FAIL("count '%s' scope %u: kernel says not found, cpu counts %llu", w[i].c_str(), q[i].scope,
				     (unsigned long long)c);
		} else if (err != TD_OK || c != cnt[i]) {
			FAIL("count '%s' scope %u: cpu err %d count %llu, kernel %llu", w[i].c_str(), q[i].scope, err,
			     (unsigned long long)c, (unsigned long long)cnt[i]);
		}
		if (scnt[i] != TD_GQ_NOTFOUND) {
			if (serr != TD_OK || h.n != scnt[i])
				FAIL("search '%s' scope %u: cpu err %d hits %zu, kernel %llu", w[i].c_str(), q[i].scope, serr,
				     h.n, (unsigned long long)scnt[i]);
			else
				for (size_t k = 0; k < h.n; k++)
					if (h.v[k].file != hits[base[i] + k].file || h.v[k].off != hits[base[i] + k].off) {
						FAIL("search '%s' scope %u: hit %zu cpu %u:%llu kernel %u:%llu", w[i].c_str(),
						     q[i].scope, k, h.v[k].file, (unsigned long long)h.v[k].off,
						     hits[base[i] + k].file, (unsigned long long)hits[base[i] + k].off);
						break;
					}
		}
		td_hits_free(&h);
	}
}

/* ---- a small adversarial archive ---- */

static const char *vocab[] = {"the", "of", "and", "a", "rule", "grammar", "Ünïcödé", "日本語", "x1", "_", "42", "naïve"};

static size_t gen(uint8_t *b, size_t n)
{
	size_t i = 0;
	while (i < n) {
		const char *w = vocab[below(sizeof vocab / sizeof vocab[0])];
		size_t l = strlen(w) < n - i ? strlen(w) : n - i;
		memcpy(b + i, w, l);
		i += l;
		if (i < n)
			b[i++] = " \n,\0"[below(4) ? 0 : below(4)];
	}
	return n;
}

static int build(const char *path)
{
	td_writer *w = td_writer_new(NULL);
	std::vector<uint8_t> b(1 << 20);
	int err = 0;
	err |= td_writer_add_file(w, "empty", 0644, 1, 0, "", 0);
	err |= td_writer_add_file(w, "big", 0644, 1, 0, b.data(), gen(b.data(), 600000));
	memset(b.data(), 'z', 700);
	err |= td_writer_add_file(w, "long", 0644, 1, 0, b.data(), 700);
	/* a passage of distinct words, three times: one long rule (its inner
	 * rules are used once and inlined), so seeks use RULE_SAMPLES */
	std::string rep;
	for (int k = 0; k < 3; k++)
		for (int i = 0; i < 400; i++)
			rep += "u" + std::to_string(i) + (i % 17 ? " " : ",\n");
	err |= td_writer_add_file(w, "rep", 0644, 1, 0, rep.data(), rep.size());
	err |= td_writer_add_symlink(w, "ln", 1, 0, "the rule of the grammar");
	err |= td_writer_add_dir(w, "d/empty", 0755, 1, 0);
	for (int i = 0; i < 300; i++) {
		char name[64];
		snprintf(name, sizeof name, "d/%c/%c/f%03d", 'a' + i % 3, 'a' + i % 5, i);
		err |= td_writer_add_file(w, name, 0644, 1, 0, b.data(), gen(b.data(), below(i % 50 ? 2000 : 40000)));
	}
	if (err) {
		td_writer_abort(w);
		return err;
	}
	return td_writer_finish(w, path);
}

int main(int argc, char **argv)
{
	char dir[] = "/tmp/td_gpu_emuXXXXXX";
	std::string path;
	if (argc > 1) {
		path = argv[1];
	} else {
		if (!mkdtemp(dir)) {
			perror("mkdtemp");
			return 1;
		}
		path = std::string(dir) + "/emu.tadoc";
		int r = build(path.c_str());
		if (r) {
			fprintf(stderr, "build: %s (%s)\n", td_strerror(r), td_errdetail());
			return 1;
		}
	}
	td_archive *a = NULL;
	int r = td_archive_open(path.c_str(), 0, &a);
	if (r) {
		fprintf(stderr, "%s: %s (%s)\n", path.c_str(), td_strerror(r), td_errdetail());
		return 1;
	}
	size_t div = 1;
	if (const char *e = getenv("TD_EMU_SAMPLES_DIV"))
		div = strtoul(e, NULL, 10);
	div = div ? div : 1;
	auto n_of = [div](size_t n) { return n / div > 50 ? n / div : 50; };
	td_gdev d;
	gdev_build(a, &d);
	/* $TD_EMU_QUERY_ONLY=1: counts and searches only (the extract checks
	 * take most of the run on a small machine) */
	const char *qo = getenv("TD_EMU_QUERY_ONLY");
	if (!qo || *qo != '1') {
		check_extract(a, d, n_of(3000));
		printf("extract, lane-walked and warp-walked, seeking by root offsets: %s\n", failures ? "DIFFER" : "equal");
		const uint64_t *root_pos = d.root_pos;
		d.root_pos = NULL;
		check_extract(a, d, n_of(1500));
		printf("extract, lane-walked and warp-walked, seeking by samples: %s\n", failures ? "DIFFER" : "equal");
		d.root_pos = root_pos;
		/* other lane widths (td_gpu_opts.xchunk): one odd, one a whole 4 KiB read */
		/* and of warp-walked reads (xseg): one odd, one a whole 4 KiB read */
		static const uint32_t chunks[] = {1000, 4096};
		for (uint32_t ch : chunks) {
			d.xchunk = d.xseg = ch;
			check_extract(a, d, n_of(1000));
			printf("extract, %u bytes a lane or warp: %s\n", ch, failures ? "DIFFER" : "equal");
		}
		d.xchunk = d.xseg = 0;
	}
	int before = failures;
	check_query(a, d, n_of(300));
	printf("count, search: %s\n", failures > before ? "DIFFER" : "equal");
	/* requests marked big: root symbols over 16 bytes walked by the whole
	 * warp, by 1/32 of their bytes a lane (td_k_count_big, td_k_search_big) */
	before = failures;
	check_query(a, d, n_of(300), 16);
	printf("count, search, large root symbols by the warp: %s\n", failures > before ? "DIFFER" : "equal");
	/* rules found through the jump table (no right-hand side words), then
	 * by a search of every group */
	const uint64_t *rw = d.rrhs;
	d.rrhs = NULL;
	before = failures;
	check_query(a, d, n_of(150));
	printf("count, search, rules through the groups' jump table: %s\n", failures > before ? "DIFFER" : "equal");
	before = failures;
	const uint32_t *jt = d.rjt;
	d.rjt = NULL;
	check_query(a, d, n_of(150));
	d.rjt = jt;
	d.rrhs = rw;
	printf("count, search, rule groups searched whole: %s\n", failures > before ? "DIFFER" : "equal");
	td_archive_close(a);
	for (void *p : g_allocs)
		free(p);
	g_allocs.clear();
	if (argc <= 1) {
		unlink(path.c_str());
		rmdir(dir);
	}
	return failures ? 1 : 0;
}
#endif
