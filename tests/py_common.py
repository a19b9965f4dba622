"""Shared set-up of the Python package tests (py_archive.py, py_fsspec.py, py_dask.py).

The package is imported from the source tree (python/) over the built
library ($TADOC_LIB = build/libtadoc.so), as tests/meson.build arranges;
archives are built with the tadoc CLI ($TADOC); answers come from the
original files and tests/oracle.py, never from the code under test.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oracle  # noqa: E402

TADOC = os.environ.get("TADOC") or sys.exit("set TADOC to the tadoc binary")
CORPORA = os.environ.get("TADOC_CORPORA") or os.path.expanduser("~/.cache/tadoc-corpora")

failures = []
checks = 0


def log(msg):
    print(msg, flush=True)


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        log("FAIL: " + what)
    return cond


def same(got, want, what):
    ok = got == want
    if not ok:
        g, w = (got[:3], want[:3]) if isinstance(got, list) and isinstance(want, list) else (got, want)
        what = "%s: got %r%s, want %r%s" % (what, g, "..." if g is not got else "", w, "..." if w is not want else "")
    return check(ok, what)


def raises(fn, exc, errno_=None, text=(), what=""):
    """fn() raises exc (with errno errno_ and every string of text in its message)."""
    try:
        fn()
    except exc as e:
        msg = str(e)
        ok = (errno_ is None or getattr(e, "errno", None) == errno_) and all(t in msg for t in text)
        return check(ok, "%s: %s (errno %s) %r, want errno %s and %r" % (what, type(e).__name__,
                                                                        getattr(e, "errno", None), msg, errno_, text))
    except Exception as e:  # noqa: BLE001 (the wrong exception is a failure, not a crash)
        return check(False, "%s: raised %s %r, want %s" % (what, type(e).__name__, e, exc.__name__))
    return check(False, "%s: no exception, want %s" % (what, exc.__name__))


def compress(src, out, *opts):
    env = dict(os.environ, SOURCE_DATE_EPOCH="1700000000")
    r = subprocess.run([TADOC, "compress", "-q", "-o", out, *opts, src], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=env)
    if r.returncode:
        sys.exit("compress %s: %s" % (src, r.stderr.decode(errors="replace")))
    return out


def adversarial(work):
    """The generated adversarial tree (tests/gen_adversarial.py, light size)."""
    d = os.path.join(work, "adv")
    subprocess.run([sys.executable, os.path.join(HERE, "gen_adversarial.py"), d], check=True)
    return d


def corpus(name):
    d = os.path.join(CORPORA, name)
    return d if os.path.isdir(d) else None


def finish(name):
    if failures:
        log("%s: %d of %d checks failed" % (name, len(failures), checks))
        sys.exit(1)
    log("%s: all %d checks passed" % (name, checks))
    sys.exit(0)
