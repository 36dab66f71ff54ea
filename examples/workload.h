// Gradient workload files (examples/workloads/*.tsv): `name<TAB>shape<TAB>elements` per line,
// `#` comments; and tensor elements of any dtype as doubles. Shared by ranktime-synth, the
// benchmarks and tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ranktime/ranktime.h"

namespace ranktime::examples {

struct WorkloadTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t elements = 0;
};

// Throws std::runtime_error naming the file and line on malformed input.
std::vector<WorkloadTensor> read_workload(const std::string& path);
// read_workload() for a program's --workload option: on error prints "<program>: <what>
// (--workload; paths are relative to the current directory)" to stderr and exits with status 2.
// Call it before MPI starts, so that a wrong path is one message, not an abort on every rank.
std::vector<WorkloadTensor> read_workload_or_exit(const std::string& path, const char* program);
// `count` tensors of `elements` each, named small.<i>: the many-small-tensors case.
std::vector<WorkloadTensor> synthetic_workload(int count, int64_t elements);
// Multiplies every tensor's elements by `factor` (rounded, at least 1), its shape flattened.
void scale_workload(std::vector<WorkloadTensor>* tensors, double factor);

// The element of `dtype` at p as a double, and a double stored as one (exact for the small
// integers workloads and tests use; 16-bit floats round to nearest even).
double element(const uint8_t* p, DataType dtype);
void set_element(double v, uint8_t* p, DataType dtype);

}  // namespace ranktime::examples
