// Rank 0's negotiation cost at many ranks, no MPI: simulated ranks send one message per step (a
// workload's tensors in a random order per rank); rank 0 decodes each, puts its ready times on its
// clock and feeds the Coordinator, then takes the step's responses (validation, fusion). Prints
// rank 0's CPU time per step (median) and the bytes it receives per rank per tensor, with and
// without the response cache (docs/benchmarks.md).

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_util.h"
#include "core/clock.h"
#include "core/wire.h"
#include "negotiation/coordinator.h"
#include "negotiation/response_cache.h"
#include "ranktime/timeline/string_table.h"
#include "recording/timeline_recorder.h"
#include "workload.h"

namespace {

using ranktime::bench::median;
using ranktime::bench::now_s;
using namespace ranktime;

constexpr int kOrders = 16;  // distinct per-rank readiness orders drawn from

// This thread's CPU time in seconds: what rank 0's background thread spends (core/clock.h).
double thread_cpu_s() { return static_cast<double>(thread_cpu_ns()) * 1e-9; }

struct Result {
  double step_us;
  double bytes_per_rank_tensor;
};

// One configuration: `ranks` simulated ranks, `cache` capacity (0: off).
Result run(const std::vector<Request>& tensors, int ranks, size_t cache, double min_seconds,
           int min_steps) {
  std::mt19937_64 rng(ranks * 7919 + cache);
  timeline::StringTable strings;
  StringTableIds ids(&strings);
  Coordinator coordinator(ranks, &ids, cache);
  const FusionOptions fusion;
  std::vector<Negotiation> negotiations;

  // The workers' cache: every simulated rank submits the same tensors, so one stands for all.
  WorkerCache worker_cache;
  std::vector<std::vector<uint8_t>> messages(kOrders);
  std::vector<std::vector<Request>> orders(kOrders, tensors);
  auto encode_messages = [&] {
    for (int o = 0; o < kOrders; ++o) {
      std::shuffle(orders[o].begin(), orders[o].end(), rng);
      for (size_t i = 0; i < orders[o].size(); ++i) orders[o][i].ready_ns = 1000 * (i + 1);
      WorkerMessage m;
      m.requests = orders[o];
      worker_cache.split(&m.requests, &m);
      encode(m, &messages[o]);
    }
  };
  std::vector<int> order_of(ranks);
  WorkerMessage incoming;
  std::vector<double> step_s;
  double bytes = 0;
  int64_t messages_received = 0;
  const double start = now_s();
  for (int step = 0;
       step < 2 || now_s() - start < min_seconds || static_cast<int>(step_s.size()) < min_steps;
       ++step) {
    if (step < 2) encode_messages();  // the second step's messages hit the cache (if on)
    for (int& o : order_of) o = static_cast<int>(rng() % kOrders);
    const double t0 = thread_cpu_s();
    for (int r = 1; r < ranks; ++r) {
      const std::vector<uint8_t>& bytes_in = messages[order_of[r]];
      decode_worker_message_into(bytes_in.data(), bytes_in.size(), &incoming);
      const int64_t offset = r;  // to rank 0's clock, as CoordinatorMessages does
      for (Request& q : incoming.requests) {
        q.ready_ns += offset;
        coordinator.add(r, std::move(q));
      }
      for (size_t i = 0; i < incoming.cached_ids.size(); ++i) {
        coordinator.add_cached(r, incoming.cached_ids[i], incoming.cached_ready_ns[i] + offset,
                               incoming.evictions_seen);
      }
      bytes += bytes_in.size();
      ++messages_received;
    }
    for (const Request& q : orders[order_of[0]]) {
      if (uint32_t id = coordinator.cached_id(q)) {
        coordinator.add_cached(0, id, q.ready_ns, 0);
      } else {
        coordinator.add(0, q);
      }
    }
    negotiations.clear();
    std::vector<Response> responses = coordinator.take_ready(fusion, &negotiations);
    const double t1 = thread_cpu_s();
    if (negotiations.size() != tensors.size()) {
      std::fprintf(stderr, "coordinator_bench: %zu of %zu tensors negotiated\n",
                   negotiations.size(), tensors.size());
      std::exit(1);
    }
    for (const Response& s : responses) {
      if (!s.error.empty()) {
        std::fprintf(stderr, "coordinator_bench: %s\n", s.error.c_str());
        std::exit(1);
      }
      for (size_t i = 0; i < s.names.size(); ++i) {
        auto it = std::find_if(tensors.begin(), tensors.end(),
                               [&](const Request& q) { return q.name == s.names[i]; });
        if (step == 0) worker_cache.learn(*it, s.cache_ids.empty() ? 0 : s.cache_ids[i]);
      }
    }
    if (step >= 1) step_s.push_back(t1 - t0);  // the first is every cache's first negotiation
    if (step == 0) {
      bytes = 0;
      messages_received = 0;
    }
  }
  return {median(step_s) * 1e6,
          bytes / static_cast<double>(messages_received) / static_cast<double>(tensors.size())};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rank 0's negotiation cost per step at many simulated ranks"};
  std::string workload = "examples/workloads/resnet50.tsv";
  std::vector<int> ranks{64, 1024, 4096};
  std::string cache = "off,on";
  int64_t capacity = 1024;
  double seconds = 2;
  int min_steps = 5;
  app.add_option("--workload", workload)->capture_default_str();
  app.add_option("--ranks", ranks)->delimiter(',')->capture_default_str();
  app.add_option("--cache", cache, "off, on or off,on")->capture_default_str();
  app.add_option("--cache-capacity", capacity, "the cache's capacity when on")
      ->capture_default_str();
  app.add_option("--seconds", seconds, "least time per configuration")->capture_default_str();
  app.add_option("--min-steps", min_steps)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::vector<Request> tensors;
  for (const auto& t : examples::read_workload_or_exit(workload, "coordinator_bench")) {
    Request q;
    q.name = t.name;
    q.shape = t.shape;
    tensors.push_back(std::move(q));
  }
  for (int n : ranks) {
    for (const char* mode : {"off", "on"}) {
      if (cache.find(mode) == std::string::npos) continue;
      const bool on = std::string(mode) == "on";
      Result r = run(tensors, n, on ? static_cast<size_t>(capacity) : 0, seconds, min_steps);
      std::printf(
          "coordinator ranks=%d tensors=%zu cache=%s step_us=%.0f bytes_per_rank_tensor=%.1f\n", n,
          tensors.size(), mode, r.step_us, r.bytes_per_rank_tensor);
      std::fflush(stdout);
    }
  }
  return 0;
}
