"""The package installs with pip from the repository (Debian's pip and
setuptools, no network) and imports from where it was installed."""

import os
import subprocess

from conftest import BIN, PYTHON, REPO


def test_pip_installs_a_working_package(tmp_path):
    target = tmp_path / "site"
    env = dict(os.environ, PSTRAIN_BUILD_DIR=os.path.dirname(os.path.abspath(BIN)))
    env.pop("PYTHONPATH", None)
    subprocess.run([PYTHON, "-m", "pip", "install", "--quiet", "--no-build-isolation",
                    "--no-deps", "--no-index", "--target", str(target),
                    os.path.join(REPO, "python")],
                   check=True, env=env, cwd=tmp_path, timeout=600)
    probe = ("import pstrain, pstrain.torch, pstrain._pstrain as ext; "
             "print(pstrain.__file__); print(ext.__file__)")
    # Only the install on the path for pstrain; other entries (make tsan's
    # sanitizer start-up, python/tsan) stay.
    others = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
              if p and not os.path.isdir(os.path.join(p, "pstrain"))]
    out = subprocess.run([PYTHON, "-c", probe],
                         env=dict(env, PYTHONPATH=os.pathsep.join([str(target), *others])),
                         cwd=tmp_path, check=True, capture_output=True, text=True).stdout
    files = out.split()
    assert len(files) == 2 and all(f.startswith(str(target)) for f in files), out
