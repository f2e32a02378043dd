"""Builds the `pstrain` package with the repository's CMake.

    /usr/bin/python3 -m pip install --no-build-isolation ./python

The extension (_pstrain) is built by `cmake --build` in PSTRAIN_BUILD_DIR
(default: the repository's build/, so an existing `make build` is reused)
and copied into the wheel beside the pure-Python modules.
"""

import glob
import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.path.abspath(os.environ.get("PSTRAIN_BUILD_DIR", os.path.join(ROOT, "build")))
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build_dir,
                                   "-DCMAKE_BUILD_TYPE=RelWithDebInfo"])
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "_pstrain",
                               "-j", str(os.cpu_count() or 1)])
        built = glob.glob(os.path.join(build_dir, "python", "pstrain", "_pstrain*.so"))
        if not built:
            raise RuntimeError(f"cmake built no _pstrain extension in {build_dir} "
                               "(are python3-dev and pybind11-dev installed?)")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)


setup(
    packages=["pstrain"],
    package_dir={"pstrain": "pstrain"},
    ext_modules=[Extension("pstrain._pstrain", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
)
