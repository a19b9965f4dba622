#!/usr/bin/env python3
"""Load generator of contrib/bench/writes.sh (writable mounts, issue 4).

  writes_load.py append DIR MB          append MB MiB in 1 MiB writes to a new
                                        file (O_APPEND), fsync; prints MB/s
  writes_load.py overwrite FILE N       N random 100-byte pwrites inside FILE,
                                        fsync at the end; prints ops/s
  writes_load.py read DIR               read every file (1 MiB reads); prints
                                        "BYTES SECONDS MB/s"
  writes_load.py edit DIR N SEED        N random small edits (overwrite,
                                        insert, delete of 1..64 bytes) over the
                                        files, weighted by size; prints ops/s
Sizes are MB = 10^6 bytes in the output.
"""
import os
import random
import sys
import time


def append(d, mb):
    buf = os.urandom(1 << 20)
    p = os.path.join(d, "append.bin")
    t = time.perf_counter()
    fd = os.open(p, os.O_CREAT | os.O_TRUNC | os.O_WRONLY | os.O_APPEND, 0o644)
    for _ in range(mb):
        os.write(fd, buf)
    os.fsync(fd)
    os.close(fd)
    dt = time.perf_counter() - t
    os.unlink(p)
    print("%.1f" % (mb * (1 << 20) / 1e6 / dt))


def overwrite(p, n):
    size = os.path.getsize(p)
    rng = random.Random(1)
    data = b"x" * 100
    offs = [rng.randrange(max(size - 100, 1)) for _ in range(n)]
    fd = os.open(p, os.O_WRONLY)
    t = time.perf_counter()
    for off in offs:
        os.pwrite(fd, data, off)
    os.fsync(fd)
    dt = time.perf_counter() - t
    os.close(fd)
    print("%.0f" % (n / dt))


def files_of(d):
    out = []
    for root, _, fs in os.walk(d):
        for f in fs:
            p = os.path.join(root, f)
            if os.path.isfile(p) and not os.path.islink(p):
                out.append(p)
    return sorted(out)


def read(d):
    total = 0
    t = time.perf_counter()
    for p in files_of(d):
        fd = os.open(p, os.O_RDONLY)
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            total += len(b)
        os.close(fd)
    dt = time.perf_counter() - t
    print("%d %.3f %.1f" % (total, dt, total / 1e6 / dt))


def edit(d, n, seed):
    rng = random.Random(seed)
    files = [(p, os.path.getsize(p)) for p in files_of(d)]
    files = [f for f in files if f[1] > 200]
    weights = [s for _, s in files]
    picks = rng.choices(range(len(files)), weights, k=n)
    sizes = {i: files[i][1] for i in set(picks)}
    t = time.perf_counter()
    for i in picks:
        p = files[i][0]
        size = sizes[i]
        k = rng.randint(1, 64)
        off = rng.randrange(max(size - k, 1))
        r = rng.random()
        if r < 0.4:
            fd = os.open(p, os.O_WRONLY)
            os.pwrite(fd, b"e" * k, off)
            os.close(fd)
        elif r < 0.7:
            os.setxattr(p, "user.tadoc.insert.%d" % off, b"i" * k)
            sizes[i] = size + k
        else:
            os.setxattr(p, "user.tadoc.delete.%d" % off, str(k).encode())
            sizes[i] = size - k
    dt = time.perf_counter() - t
    print("%.0f" % (n / dt))


def main():
    a = sys.argv[1:]
    if not a or a[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if a else 2
    cmd = a[0]
    if cmd == "append":
        append(a[1], int(a[2]))
    elif cmd == "overwrite":
        overwrite(a[1], int(a[2]))
    elif cmd == "read":
        read(a[1])
    elif cmd == "edit":
        edit(a[1], int(a[2]), int(a[3]))
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
