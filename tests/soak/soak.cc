// Soak workload: many tensors of random sizes per step, submitted in a different random order on
// every rank, results verified, resident memory sampled. check_soak.py then counts the timeline's
// events against the operations this program reports.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "ranktime/ranktime.h"

namespace {

int64_t rss_kib() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ranktime soak workload"};
  int steps = 20, tensors = 2000;
  int64_t max_elements = 20000;
  app.add_option("--steps", steps)->capture_default_str();
  app.add_option("--tensors", tensors, "tensors per step")->capture_default_str();
  app.add_option("--max-elements", max_elements)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  ranktime::init();
  const int rank = ranktime::rank(), size = ranktime::size();
  std::mt19937 shared(2026);      // the tensor set: same everywhere
  std::mt19937 local(99 + rank);  // submission order: differs per rank
  std::vector<int64_t> sizes(tensors);
  std::vector<std::vector<float>> data(tensors);
  std::vector<ranktime::Handle> handles(tensors);
  std::vector<int> order(tensors);
  std::iota(order.begin(), order.end(), 0);
  int64_t operations = 0, wrong = 0, failed = 0;
  std::vector<int64_t> rss;
  const float rank_sum = size * (size + 1) / 2.0f;
  for (int step = 0; step < steps; ++step) {
    for (int t = 0; t < tensors; ++t) {
      sizes[t] = std::uniform_int_distribution<int64_t>(0, max_elements)(shared);
      data[t].assign(sizes[t], static_cast<float>(rank + 1));
    }
    std::shuffle(order.begin(), order.end(), local);
    for (int t : order) {
      handles[t] = ranktime::allreduce_async(
          {data[t].data(), ranktime::DataType::kFloat32, {sizes[t]}}, "soak." + std::to_string(t));
    }
    for (int t = 0; t < tensors; ++t) {
      ranktime::Status s = handles[t].wait();
      if (!s.ok()) {
        if (failed++ < 3) std::fprintf(stderr, "rank %d: %s\n", rank, s.message().c_str());
        continue;
      }
      ++operations;
      for (float v : data[t]) wrong += v != rank_sum;
    }
    rss.push_back(rss_kib());
  }
  int64_t totals[3] = {operations, wrong, failed};
  ranktime::shutdown();
  // Each rank reports its own counts; the checker adds them up.
  std::printf(
      "SOAK rank=%d operations=%lld wrong=%lld failed=%lld rss_kib_first=%lld rss_kib_mid=%lld "
      "rss_kib_last=%lld\n",
      rank, static_cast<long long>(totals[0]), static_cast<long long>(totals[1]),
      static_cast<long long>(totals[2]), static_cast<long long>(rss.front()),
      static_cast<long long>(rss[rss.size() / 2]), static_cast<long long>(rss.back()));
  return wrong || failed ? 1 : 0;
}
