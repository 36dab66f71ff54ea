#!/usr/bin/env bash
# CI job: `pip install .` as a Python user runs it, CMake build included (the README's tests
# package the existing ./build instead, to stay fast): docs/python.md's examples, whose
# venv block installs the package and runs its `ranktime` command on 2 ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null  # packages, and ./build for the page's build-tree examples
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset RANKTIME_CMAKE_BUILD_DIR
BUILD_DIR=${BUILD_DIR:-build}
/usr/bin/python3 tests/docs/doc_blocks.py --source . --build "$BUILD_DIR" \
    --work "$BUILD_DIR/ci-pip" docs/python.md
