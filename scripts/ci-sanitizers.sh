#!/usr/bin/env bash
# CI jobs (issue 7): an AddressSanitizer + UndefinedBehaviorSanitizer build running the unit,
# in-process and multi-rank tests, and a ThreadSanitizer build running the multi-rank tests of the
# runtime's threads (background loop, trace writer, signal watcher, user threads), the in-process
# protocol tests (up to 16 runtimes in one process) and the trace writer's own tests (its thread
# against producers, flushes and signals).
#
# What each job leaves out, to keep CI well under an hour (README tests run everything anyway):
# - ASan: the emulated-host tests other than multihost.hierarchical (the only one that runs code
#   of its own, the host-aware allreduce), and two of that test's four runs; the others test the
#   launcher and link faults, whose runtime paths (lost peer, doomed job) mpi_faults covers on
#   one host. And the collectives at the default settings (mpi_collectives_2, _4): their fused
#   copies run in mpi_collectives_chunked_3 and small_batches_3, the unfused path at 4 ranks in
#   unfused_4.
# - TSan: one rank count and one fusion setting per multi-rank test. Every rank is a process of
#   its own, so its threads are the same at 2 ranks as at 4, and fused, unfused, chunked and small
#   batches differ in what the background thread copies (ASan's job), not in which threads meet.
# Both builds are unity builds (a target's sources compiled as one: about a quarter less compile
# time); the README's build keeps one object per source, so a missing #include still shows there.
# Tests without MPI run two at a time (each is one process; the multi-rank ones stay serial).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null  # packages
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common="-DCMAKE_BUILD_TYPE=Debug -DRANKTIME_BUILD_PYTHON=OFF -DRANKTIME_WITH_CUDA=OFF -DPython_EXECUTABLE=/usr/bin/python3 -DCMAKE_UNITY_BUILD=ON"

# --- ASan + UBSan ---
A=${ASAN_BUILD_DIR:-build-asan}
[ -f "$A/build.ninja" ] || cmake -S . -B "$A" -G Ninja $common -DRANKTIME_SANITIZE=address,undefined >/dev/null
cmake --build "$A" -j "$(nproc)"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# Tests without MPI run with leak detection on.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 ctest --test-dir "$A" --output-on-failure -LE "mpi|large" -j "$(nproc)"
# Multi-rank tests: leak detection off. Open MPI's dlopen'ed components allocate for the life of
# the process and are unloaded at MPI_Finalize, so their allocations show up as unattributable
# leaks that no suppression can name. Memory errors and undefined behaviour are still fatal.
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 ctest --test-dir "$A" --output-on-failure -L mpi -LE "soak" \
  -E "^(multihost\.(harness|jobs|clocks|cut|cleanup|hierarchical)|mpi_collectives_[24])$"
# The host-aware allreduce: uneven hosts unfused, and the pipeline of many small chunks (the two
# fused runs at the default chunk size take the same code paths with other sizes).
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 PYTEST_ADDOPTS='-k "uneven_unfused or small_chunks"' \
  ctest --test-dir "$A" --output-on-failure -R "^multihost\.hierarchical$"

# .ci/run sets this: the CI machine's shared disk need not hold both sanitizer builds at once.
[ -z "${RANKTIME_CI_DISCARD_BUILDS:-}" ] || rm -rf "$A"

# --- TSan ---
T=${TSAN_BUILD_DIR:-build-tsan}
[ -f "$T/build.ninja" ] || cmake -S . -B "$T" -G Ninja $common -DRANKTIME_SANITIZE=thread >/dev/null
cmake --build "$T" --target collectives_test lifecycle_test tl-api-tests fault_injection ranktime-synth test_trace_writer test_caller_steps test_inprocess test_inprocess_scatter scatter_groups_test -j "$(nproc)"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp"
ctest --test-dir "$T" --output-on-failure -R "^(mpi_collectives_2|mpi_scatter_groups_2|mpi_lifecycle_2|tl_api_.*_np2|TraceWriter|CallerSteps)"
ctest --test-dir "$T" --output-on-failure -L inprocess -j "$(nproc)"
