"""ThreadSanitizer's runtime for every Python process of python_tests, but
for none of the shells between them (`make tsan` only).

A TSan-built extension loads only into an interpreter that loaded TSan's
runtime first, which takes LD_PRELOAD at start. But an inherited preload
kills /bin/sh (dash and bash crash at start under libtsan with GCC 12), and
`pstrain local` starts every Python worker through /bin/sh. So the preload
travels under another name, PST_TSAN_RUNTIME: an interpreter started
without the runtime starts itself again with it preloaded, and one that has
it takes LD_PRELOAD out of what its children inherit. python_tests puts
this file's folder on PYTHONPATH, so Python imports it at start-up.
"""

import os
import sys


def _runtime_loaded(runtime):
    with open("/proc/self/maps") as maps:
        return any(line.rstrip().endswith(runtime) for line in maps)


def _preload_tsan():
    runtime = os.environ.get("PST_TSAN_RUNTIME")
    if not runtime:
        return
    if _runtime_loaded(runtime):
        os.environ.pop("LD_PRELOAD", None)
        return
    if os.environ.get("LD_PRELOAD") == runtime:
        # Preloaded, yet not loaded: starting again would loop.
        raise RuntimeError(f"PST_TSAN_RUNTIME={runtime} was preloaded but did not load")
    env = dict(os.environ, LD_PRELOAD=runtime)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)


_preload_tsan()
