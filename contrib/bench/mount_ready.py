#!/usr/bin/env python3
"""mount_ready: time from starting a mount command until the mount point answers stat().

Usage: mount_ready.py MOUNTPOINT CMD [ARGS...]

Starts CMD, then polls os.stat(MOUNTPOINT) until its st_dev differs from the
st_dev it had before (a filesystem is mounted there and answered the stat).
Prints the milliseconds elapsed (3 decimals) on stdout. Waits up to 10 s for
a daemonizing CMD to exit; exits 1 if nothing got mounted within 30 s or CMD
failed first.
"""
import os
import subprocess
import sys
import time


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    mnt, cmd = sys.argv[1], sys.argv[2:]
    before = os.stat(mnt).st_dev
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    while True:
        try:
            if os.stat(mnt).st_dev != before:
                break
        except OSError:
            pass
        if proc.poll() not in (None, 0):
            print(f"mount_ready: {cmd[0]} exited with {proc.returncode}", file=sys.stderr)
            return 1
        if time.perf_counter() - t0 > 30:
            print("mount_ready: nothing mounted after 30 s", file=sys.stderr)
            return 1
        time.sleep(0.0001)
    ms = (time.perf_counter() - t0) * 1e3
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    print(f"{ms:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
