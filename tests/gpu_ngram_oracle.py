#!/usr/bin/env python3
"""gpu_ngram_oracle: td_gpu_ngram_batch on a format 5 archive whose files are split
across shards equals the independent oracle (tests/oracle.py: collections.Counter over
re.findall(r'\\w+')) and the CPU engine (td_ngram_batch), run by run.

The generated adversarial tree is compressed as format 5 with 64 KiB shards (files cut
between consecutive shards), and every regular file, every directory and the corpus is
asked for its n-grams of lengths 2, 3 and 5 (top 0 = all, 20, 5), each twice, as one batch through
GPU_BATCH --ngrams ARCHIVE (tests/gpu_batch.c over the emulated device of
gpu_host_emu, or a real one), which also compares each answer with td_ngram_batch's.
The scopes over several shards (files cut at a cut, directories across one) must be
among them.

Usage: gpu_ngram_oracle.py GPU_BATCH   (env TADOC: the tadoc binary; exit 77 without a GPU)
"""
import importlib.util
import os
import subprocess
import sys
import tempfile

TADOC = os.environ.get("TADOC") or sys.exit("set TADOC to the tadoc binary")
TESTS = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("oracle", os.path.join(TESTS, "oracle.py"))
oracle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oracle)

SHAPES = ((2, 0), (3, 20), (5, 5))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gpu_ngram_oracle.py GPU_BATCH")
    gpu_batch = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="td_gpu_ngram_") as work:
        tree = os.path.join(work, "adv")
        subprocess.run([sys.executable, os.path.join(TESTS, "gen_adversarial.py"), tree], check=True,
                       stdout=subprocess.DEVNULL)
        arch = os.path.join(work, "adv5.tadoc")
        subprocess.run([TADOC, "compress", "-q", "--format", "5", "--shard-size", "64K", "-o", arch, tree],
                       check=True)
        c = oracle.Corpus(tree)
        scopes = [b""] + [rel for rel, _ in c.entries
                          if rel and c.kind[rel] in "fd" and b"\n" not in rel and b"\t" not in rel]
        queries = [(n, top, s) for s in scopes for n, top in SHAPES]
        queries += queries  # each question twice: the engine answers a repeated one once

        stdin = b"".join(b"%d\t%d\t%s\n" % q for q in queries)
        r = subprocess.run([gpu_batch, "--ngrams", arch], input=stdin, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        sys.stderr.write(r.stderr.decode(errors="replace"))
        if r.returncode == 77:
            print("no GPU: skipped")
            return 77
        if r.returncode:
            print("FAIL: gpu_batch --ngrams exited %d (an answer differs from td_ngram_batch's)" % r.returncode)
            return 1
        # the answers: "= PIECES ERR" then the runs, a block a request
        blocks, cur = [], None
        for line in r.stdout.split(b"\n")[:-1]:
            if line.startswith(b"= "):
                _, pieces, err = line.split(b" ")
                cur = [int(pieces), int(err), b""]
                blocks.append(cur)
            else:
                cur[2] += line + b"\n"
        if len(blocks) != len(queries):
            print("FAIL: %d answers for %d requests" % (len(blocks), len(queries)))
            return 1
        bad = split_files = split_dirs = 0
        wants = {}
        for (n, top, s), (pieces, err, got) in zip(queries, blocks):
            if (n, top, s) not in wants:
                wants[(n, top, s)] = oracle.render("ngrams", c, {"path": s, "len": n, "top": top})
            want = wants[(n, top, s)]
            if pieces > 1 and want:
                if c.kind.get(s) == "f":
                    split_files += 1
                else:
                    split_dirs += 1
            if err or got != want:
                bad += 1
                if bad <= 5:
                    print("FAIL %r -n %d --top %d (%d pieces): err %d, %d lines, oracle %d lines"
                          % (s, n, top, pieces, err, got.count(b"\n"), want.count(b"\n")))
        print("%d requests (%d over files split across shards, %d over directories across a cut): %d differ"
              % (len(queries), split_files, split_dirs, bad))
        if not split_files or not split_dirs:
            print("FAIL: the archive has no file or directory split across shards")
            return 1
        return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
