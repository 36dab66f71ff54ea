// Small helpers the benchmarks share.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace ranktime::bench {

// Seconds on the monotonic clock.
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The median (the upper one for an even count); 0 for no values.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace ranktime::bench
