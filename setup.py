# `pip install .` builds the Python package with CMake; the logic is in bindings/pip_build.py.
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bindings"))
from pip_build import setup_ranktime  # noqa: E402

setup_ranktime()
