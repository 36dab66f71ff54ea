"""`pip install .` for ranktime, called from the repository's setup.py: configures the project
with CMake, builds the extension (target ranktime_python), and packages it with libranktime.so
next to it, where the extension's $ORIGIN run path finds it. Needs no network: setuptools and
wheel come from the system (Debian: python3-setuptools, python3-wheel).

CMAKE_ARGS in the environment is passed to the CMake configure step.
"""

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(ranktime VERSION ([0-9.]+)", f.read()).group(1)


class BuildWithCMake(build_ext):
    def build_extension(self, ext):
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        configure = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                     "-DPython_EXECUTABLE=" + sys.executable, "-DRANKTIME_BUILD_TESTS=OFF"]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "ranktime_python",
                               "-j", str(os.cpu_count() or 1)])

        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        built = glob.glob(os.path.join(build_dir, "python", "ranktime", "_core*.so"))
        if len(built) != 1:
            raise RuntimeError("expected one ranktime/_core*.so in %s, found %s"
                               % (build_dir, built))
        shutil.copy2(built[0], target)
        # The torch.distributed backend, where it was built (bindings/c10d).
        for backend in glob.glob(os.path.join(build_dir, "python", "ranktime", "_c10d*.so")):
            shutil.copy2(backend, os.path.dirname(target))
        for library in glob.glob(os.path.join(build_dir, "collective", "libranktime.so*")):
            shutil.copy2(library, os.path.dirname(target))


def setup_ranktime():
    setup(
        name="ranktime",
        version=project_version(),
        description="Horovod-style collectives with a distributed timeline",
        packages=["ranktime"],
        package_dir={"ranktime": os.path.relpath(os.path.join(ROOT, "bindings", "ranktime"))},
        ext_modules=[Extension("ranktime._core", sources=[])],
        cmdclass={"build_ext": BuildWithCMake},
        python_requires=">=3.8",
        install_requires=["numpy"],
        zip_safe=False,
        # Not ./build: that is the project's usual CMake build directory.
        options={"build": {"build_base": os.path.relpath(os.path.join(ROOT, "build-pip"))}},
    )
