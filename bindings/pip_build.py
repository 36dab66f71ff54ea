"""`pip install .` for ranktime, called from the repository's setup.py: configures the project
with CMake, builds the extension (target ranktime_python) and the `ranktime` command (target
ranktime_cli), and packages the extension with libranktime.so next to it, where the extension's
$ORIGIN run path finds it, and the command as ranktime/_bin/ranktime, which the console command
`ranktime` (ranktime/_cli.py) runs. Needs no network: setuptools and wheel come from the system
(Debian: python3-setuptools, python3-wheel).

The build is a unity build (each target's sources compiled as one: half the time of one object
per source, 146 s against 302 s on the 2-core VM; CMAKE_ARGS=-DCMAKE_UNITY_BUILD=OFF undoes it).
CMAKE_ARGS in the environment is passed to the CMake configure step. RANKTIME_CMAKE_BUILD_DIR
names an existing build directory (configured for this interpreter, both targets built) to
package instead of configuring and building one; the doc tests use it to skip a second build.
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
        build_dir = os.environ.get("RANKTIME_CMAKE_BUILD_DIR")
        if not build_dir:
            build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
            configure = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                         "-DPython_EXECUTABLE=" + sys.executable, "-DRANKTIME_BUILD_TESTS=OFF",
                         "-DCMAKE_UNITY_BUILD=ON"]
            if shutil.which("ninja"):
                configure += ["-G", "Ninja"]
            configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))
            subprocess.check_call(configure)
            subprocess.check_call(["cmake", "--build", build_dir, "--target", "ranktime_python",
                                   "ranktime_cli", "-j", str(os.cpu_count() or 1)])

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
        os.makedirs(os.path.join(os.path.dirname(target), "_bin"), exist_ok=True)
        shutil.copy2(os.path.join(build_dir, "ranktime"),
                     os.path.join(os.path.dirname(target), "_bin", "ranktime"))


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
        entry_points={"console_scripts": ["ranktime = ranktime._cli:main"]},
        zip_safe=False,
        # Not ./build: that is the project's usual CMake build directory.
        options={"build": {"build_base": os.path.relpath(os.path.join(ROOT, "build-pip"))}},
    )
