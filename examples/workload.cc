// Reads gradient workload files (see workload.h).
#include "workload.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ranktime::examples {

std::vector<WorkloadTensor> read_workload(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open workload file '" + path + "'");
  std::vector<WorkloadTensor> out;
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (line.empty() || line[0] == '#') continue;
    auto bad = [&](const std::string& why) {
      return std::runtime_error(path + ":" + std::to_string(lineno) + ": " + why + ": '" + line +
                                "'");
    };
    std::istringstream fields(line);
    WorkloadTensor t;
    std::string shape, elements;
    if (!std::getline(fields, t.name, '\t') || !std::getline(fields, shape, '\t') ||
        !std::getline(fields, elements, '\t')) {
      throw bad("expected name<TAB>shape<TAB>elements");
    }
    std::istringstream dims(shape);
    std::string d;
    int64_t product = 1;
    while (std::getline(dims, d, 'x')) {
      try {
        t.shape.push_back(std::stoll(d));
      } catch (const std::exception&) {
        throw bad("bad dimension '" + d + "'");
      }
      product *= t.shape.back();
    }
    try {
      t.elements = std::stoll(elements);
    } catch (const std::exception&) {
      throw bad("bad element count");
    }
    if (t.shape.empty() || product != t.elements) throw bad("shape does not match element count");
    out.push_back(std::move(t));
  }
  if (out.empty()) throw std::runtime_error("workload file '" + path + "' lists no tensors");
  return out;
}

std::vector<WorkloadTensor> synthetic_workload(int count, int64_t elements) {
  std::vector<WorkloadTensor> out;
  for (int i = 0; i < count; ++i)
    out.push_back({"small." + std::to_string(i), {elements}, elements});
  return out;
}

}  // namespace ranktime::examples
