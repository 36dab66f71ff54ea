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
# Both fuzzers at once (each is one process on one core): each still gets its full minute.
fuzz() {  # fuzz TARGET SEEDS LOG: runs one fuzzer; its exit status is the fuzzer's
  local corpus status=0
  corpus=$(mktemp -d)
  "$B/tests/fuzz/fuzz_$1" -max_total_time="${FUZZ_SECONDS:-60}" -seed="${FUZZ_SEED:-1}" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 "$corpus" "$2" >"$3" 2>&1 || status=$?
  rm -rf "$corpus"
  return $status
}
declare -A seeds=([wire]=tests/fuzz/corpus/wire [trace_reader]=tests/fuzz/corpus/trace)
declare -A pids logs
for target in "${!seeds[@]}"; do
  echo "fuzz_$target: ${FUZZ_SECONDS:-60} s from $(ls "${seeds[$target]}" | wc -l) seeds"
  logs[$target]=$(mktemp)
  fuzz "$target" "${seeds[$target]}" "${logs[$target]}" &
  pids[$target]=$!
done
failed=0
for target in "${!seeds[@]}"; do
  status=0
  wait "${pids[$target]}" || status=$?
  echo "fuzz_$target:"
  grep -E "^(stat::number_of_executed_units|stat::new_units_added|==|SUMMARY|Done)" "${logs[$target]}" || true
  if [ "$status" -ne 0 ]; then
    tail -40 "${logs[$target]}"
    echo "fuzz_$target found a crash"
    failed=$((failed + 1))
  fi
  rm -f "${logs[$target]}"
done
echo "fuzzing: $((${#seeds[@]} - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
