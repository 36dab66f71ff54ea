// Gradient workload files (examples/workloads/*.tsv): `name<TAB>shape<TAB>elements` per line,
// `#` comments. Shared by ranktime-synth and the benchmarks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ranktime::examples {

struct WorkloadTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t elements = 0;
};

// Throws std::runtime_error naming the file and line on malformed input.
std::vector<WorkloadTensor> read_workload(const std::string& path);
// `count` tensors of `elements` each, named small.<i>: the many-small-tensors case.
std::vector<WorkloadTensor> synthetic_workload(int count, int64_t elements);

}  // namespace ranktime::examples
