#!/usr/bin/env bash
# The long soak (a few minutes; not part of scripts/test.sh): 8 ranks oversubscribed, thousands of
# random tensors per step in random orders, timeline on; then the timeline at scale (a window, a
# size budget). Prints the figures for docs/reliability.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
B=${BUILD_DIR:-build}
/usr/bin/python3 tests/soak/check_soak.py "$B/tests/soak/soak" "${RANKS:-8}" "${STEPS:-30}" "${TENSORS:-3000}"
# The timeline at scale (issue 17): 8 ranks, 2,000 BERT steps, a capture window and a 50 MiB budget
# (SCALE=0.001: BERT's tensors and batches at a thousandth of the bytes, minutes instead of hours).
/usr/bin/python3 tests/soak/check_scale.py "$B" --ranks "${RANKS:-8}" --steps "${SCALE_STEPS:-2000}" \
  --scale "${SCALE:-1}"
