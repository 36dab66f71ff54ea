#!/bin/bash
# Runs one rank with its own RANKTIME_TEST_CLOCK_SKEW_US, picked by rank from a list:
#   mpirun ... skew_exec.sh "0,50000,-50000,50000" ranktime-synth ...
set -euo pipefail
IFS=, read -ra skews <<< "$1"
shift
rank=${OMPI_COMM_WORLD_RANK:?skew_exec.sh runs under Open MPI\'s mpirun}
export RANKTIME_TEST_CLOCK_SKEW_US=${skews[$rank]:?no skew for rank $rank}
exec "$@"
