// What one region costs (ranktime::Region, begin and end) on the thread that marks it, against an
// empty loop in the same run, with the timeline off and on; and what it weighs in the trace, text
// and gzip. One rank (run it plainly or under `mpirun -np 1`).
//   build/bench/region_bench [--regions N] [--dir DIR]
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_util.h"
#include "ranktime/ranktime.h"

namespace {

using ranktime::bench::median;
using ranktime::bench::now_s;

const char* const kNames[] = {"data", "forward", "backward", "optimizer"};

// ns per iteration of `n` iterations of `body`, the median of 5 rounds.
template <typename Body>
double ns_per(int n, Body body) {
  std::vector<double> rounds;
  for (int round = 0; round < 5; ++round) {
    const double t0 = now_s();
    for (int i = 0; i < n; ++i) body(i);
    rounds.push_back((now_s() - t0) * 1e9 / n);
  }
  return median(rounds);
}

uint64_t file_bytes(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// Records `regions` regions (four names, one nested in a "step" every fourth) paced so that none
// is dropped, into `path`; returns the file's size.
uint64_t trace_with(const std::string& path, int regions) {
  setenv("TIMELINE_FILENAME", path.c_str(), 1);
  ranktime::init();
  for (int i = 0; i < regions; i += 4) {
    ranktime::Region step("step");
    for (int k = 1; k < 4 && i + k < regions; ++k) ranktime::Region r(kNames[k]);
    if (i % 1000 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // shipping
  }
  ranktime::shutdown();
  return file_bytes(path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"region_bench: the cost and bytes of one ranktime region"};
  int n = 200000, regions = 20000;
  std::string dir = "/tmp";
  app.add_option("--iterations", n, "regions per timed round")->capture_default_str();
  app.add_option("--regions", regions, "regions in the traces measured for bytes")
      ->capture_default_str();
  app.add_option("--dir", dir, "where the traces go")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  volatile int sink = 0;
  const double empty = ns_per(n, [&](int i) { sink = sink + i; });
  unsetenv("TIMELINE_FILENAME");
  ranktime::init();
  const double off = ns_per(n, [&](int i) {
    ranktime::Region r(kNames[i & 3]);
    sink = sink + i;
  });
  ranktime::shutdown();
  const std::string timed = dir + "/region_bench_timed.json";
  setenv("TIMELINE_FILENAME", timed.c_str(), 1);
  ranktime::init();
  const double on = ns_per(n, [&](int i) {
    ranktime::Region r(kNames[i & 3]);
    sink = sink + i;
  });
  ranktime::shutdown();  // a tight loop outruns shipping: most of these are dropped (counted)
  std::printf("region_bench: empty loop %.1f ns/iteration\n", empty);
  std::printf("  timeline off: %.1f ns/region (%.1f above the empty loop)\n", off, off - empty);
  std::printf("  timeline on:  %.1f ns/region (%.1f above the empty loop, %.2fx the off case)\n",
              on, on - empty, on / off);

  // Bytes: the same run with and without regions, text and gzip.
  const std::string base = dir + "/region_bench_none", with = dir + "/region_bench_regions";
  for (const char* ext : {".json", ".json.gz"}) {
    const uint64_t without_bytes = trace_with(base + ext, 0);
    const uint64_t with_bytes = trace_with(with + ext, regions);
    std::printf("  %-8s %d regions: %.1f bytes/region (%llu bytes against %llu without)\n", ext,
                regions, static_cast<double>(with_bytes - without_bytes) / regions,
                static_cast<unsigned long long>(with_bytes),
                static_cast<unsigned long long>(without_bytes));
  }
  std::ifstream in(with + ".json");
  std::stringstream text;
  text << in.rdbuf();
  const std::string t = text.str();
  const size_t dropped_at = t.find("\"regions_dropped\"");
  std::printf("  regions dropped in the paced run: %s\n",
              dropped_at == std::string::npos ? "none" : t.substr(dropped_at, 30).c_str());
  return sink == -1;
}
