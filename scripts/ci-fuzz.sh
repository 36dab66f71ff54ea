#!/usr/bin/env bash
# CI job (issue 7): builds the libFuzzer targets with clang (+ ASan/UBSan) and runs each for a
# bounded time (FUZZ_SECONDS, default 60) from a copy of its checked-in seed corpus. The seed is
# fixed (FUZZ_SEED, default 1) so that a CI run is repeatable; explore with other seeds by hand,
# and add what they find to tests/fuzz/corpus/ as regression seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null  # packages; the fuzz build itself is separate
command -v clang++ >/dev/null || { apt-get install -y -qq clang >/dev/null; }
B=${FUZZ_BUILD_DIR:-build-fuzz}
if [ ! -f "$B/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRANKTIME_FUZZ=ON \
    -DRANKTIME_SANITIZE=address,undefined -DRANKTIME_BUILD_PYTHON=OFF -DRANKTIME_WITH_CUDA=OFF \
    -DCMAKE_UNITY_BUILD=ON >/dev/null
fi
cmake --build "$B" --target fuzz_wire fuzz_trace_reader -j "$(nproc)"
for target in wire trace_reader; do
  corpus=$(mktemp -d)
  seeds=tests/fuzz/corpus/${target%_reader}
  [ "$target" = trace_reader ] && seeds=tests/fuzz/corpus/trace
  echo "fuzz_$target: ${FUZZ_SECONDS:-60} s from $(ls "$seeds" | wc -l) seeds"
  log=$(mktemp)
  status=0
  "$B/tests/fuzz/fuzz_$target" -max_total_time="${FUZZ_SECONDS:-60}" -seed="${FUZZ_SEED:-1}" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 "$corpus" "$seeds" >"$log" 2>&1 || status=$?
  grep -E "^(stat::number_of_executed_units|stat::new_units_added|==|SUMMARY|Done)" "$log" || true
  [ "$status" -eq 0 ] || tail -40 "$log"
  rm -f "$log"
  rm -rf "$corpus"
  [ "$status" -eq 0 ] || { echo "fuzz_$target found a crash"; exit 1; }
done
echo "fuzzing: 2 passed, 0 failed"
