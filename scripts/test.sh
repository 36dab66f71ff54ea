#!/usr/bin/env bash
# The README's test command: set up, build, and run every test (unit, multi-rank, CLI, Python).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "${BUILD_DIR:-build}"
ctest --output-on-failure --timeout 600 "$@"
