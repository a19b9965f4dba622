#!/usr/bin/env python3
"""xattr_time: microseconds of one getxattr() system call, without a process start.

Usage: xattr_time.py PATH NAME [REPEATS]

Prints "first=US median=US value=V": the first call (nothing cached by the
filesystem for this name yet, if it caches at all), then the median of
REPEATS (default 51) further calls.
"""
import os
import sys
import time


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    path, name = sys.argv[1], sys.argv[2]
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 51
    t = time.perf_counter()
    value = os.getxattr(path, name)
    first = (time.perf_counter() - t) * 1e6
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        os.getxattr(path, name)
        times.append((time.perf_counter() - t) * 1e6)
    times.sort()
    shown = value.decode("utf-8", "replace").strip().replace(" ", "_")[:40]
    print(f"first={first:.1f} median={times[len(times) // 2]:.1f} value={shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
