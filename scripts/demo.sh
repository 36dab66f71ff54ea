#!/usr/bin/env bash
# The README's demo: 4 ranks train on the ResNet-50 gradient set, rank 2 is 20 ms late each step;
# the timeline is written to timeline.json and summarised.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
B=${BUILD_DIR:-build}
"$B/ranktime" run -np 4 --timeline-filename timeline.json --timeline-mark-cycles -- \
  "$B/ranktime-synth" --workload examples/workloads/resnet50.tsv --steps 20 --slow-rank 2 --delay-ms 20 \
  --slow-region data
"$B/ranktime" summary timeline.json
