// Reads gradient workload files; converts tensor elements to and from doubles (see workload.h).
#include "workload.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "ranktime/half.h"

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

std::vector<WorkloadTensor> read_workload_or_exit(const std::string& path, const char* program) {
  try {
    return read_workload(path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s (--workload; paths are relative to the current directory)\n",
                 program, e.what());
    std::exit(2);
  }
}

std::vector<WorkloadTensor> synthetic_workload(int count, int64_t elements) {
  std::vector<WorkloadTensor> out;
  for (int i = 0; i < count; ++i)
    out.push_back({"small." + std::to_string(i), {elements}, elements});
  return out;
}

void scale_workload(std::vector<WorkloadTensor>* tensors, double factor) {
  for (WorkloadTensor& t : *tensors) {
    t.elements = std::max<int64_t>(1, std::llround(static_cast<double>(t.elements) * factor));
    t.shape = {t.elements};
  }
}

double element(const uint8_t* p, DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
      return *p;
    case DataType::kInt8:
      return *reinterpret_cast<const int8_t*>(p);
    case DataType::kInt16:
      return *reinterpret_cast<const int16_t*>(p);
    case DataType::kInt32:
      return *reinterpret_cast<const int32_t*>(p);
    case DataType::kInt64:
      return static_cast<double>(*reinterpret_cast<const int64_t*>(p));
    case DataType::kFloat16:
      return half_to_float(*reinterpret_cast<const uint16_t*>(p));
    case DataType::kBFloat16:
      return bfloat16_to_float(*reinterpret_cast<const uint16_t*>(p));
    case DataType::kFloat32:
      return *reinterpret_cast<const float*>(p);
    case DataType::kFloat64:
      return *reinterpret_cast<const double*>(p);
  }
  return 0;
}

void set_element(double v, uint8_t* p, DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
      *p = static_cast<uint8_t>(v);
      break;
    case DataType::kInt8:
      *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(v);
      break;
    case DataType::kInt16:
      *reinterpret_cast<int16_t*>(p) = static_cast<int16_t>(v);
      break;
    case DataType::kInt32:
      *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v);
      break;
    case DataType::kInt64:
      *reinterpret_cast<int64_t*>(p) = static_cast<int64_t>(v);
      break;
    case DataType::kFloat16:
      *reinterpret_cast<uint16_t*>(p) = float_to_half(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      *reinterpret_cast<uint16_t*>(p) = float_to_bfloat16(static_cast<float>(v));
      break;
    case DataType::kFloat32:
      *reinterpret_cast<float*>(p) = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      *reinterpret_cast<double*>(p) = v;
      break;
  }
}

}  // namespace ranktime::examples
