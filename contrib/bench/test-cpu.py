#!/usr/bin/env python3
"""CPU of one meson test, every process under it included (daemons that
detach too): a meson test wrapper that runs the test as a child subreaper,
reaps every descendant, and appends "user sys wall status TD_TEST_HEAVY
command" to $TEST_CPU_LOG (default test-cpu.log in the working directory).

    meson test -C build --num-processes 2 --wrapper "$PWD/contrib/bench/test-cpu.py"

contrib/bench/results/ci.md reads these figures (CPU, not wall, on a shared VM).
"""
import ctypes
import os
import resource
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
t0 = time.time()
rc = subprocess.Popen(sys.argv[1:]).wait()
while True:  # the orphans reparented to us: their CPU counts once reaped
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        break
r = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(os.environ.get("TEST_CPU_LOG", "test-cpu.log"), "a") as f:
    f.write("%.1f %.1f %.1f %d %s %s\n" % (r.ru_utime, r.ru_stime, time.time() - t0, rc,
                                          os.environ.get("TD_TEST_HEAVY", "-"), " ".join(sys.argv[1:])))
sys.exit(rc)
