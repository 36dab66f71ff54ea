// ranktime vs raw MPI in the same mpirun: prints medians and ratios for the four figures of
// docs/benchmarks.md (large allreduce, ResNet-50 step, small-op latency, idle CPU).
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_util.h"
#include "core/config.h"
#include "ranktime/ranktime.h"
#include "workload.h"

namespace {

using ranktime::bench::median;
using ranktime::bench::now_s;

// Times fn() `reps` times on every rank in lockstep; returns rank 0's view of the slowest rank
// per repetition (a collective finishes when its slowest rank does).
std::vector<double> time_reps(MPI_Comm comm, int reps, const std::function<void()>& fn) {
  std::vector<double> out;
  for (int i = 0; i < reps; ++i) {
    MPI_Barrier(comm);
    double t0 = now_s();
    fn();
    double dt = now_s() - t0, worst = 0;
    MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, comm);
    out.push_back(worst);
  }
  return out;
}

// Raw MPI: `a` summed in place across comm in calls of at most `per_call` floats.
void raw_allreduce_in_calls(MPI_Comm comm, std::vector<float>& a, int64_t per_call) {
  for (int64_t done = 0; done < int64_t(a.size()); done += per_call) {
    int count = static_cast<int>(std::min<int64_t>(per_call, a.size() - done));
    MPI_Allreduce(MPI_IN_PLACE, a.data() + done, count, MPI_FLOAT, MPI_SUM, comm);
  }
}

void check(const ranktime::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "bench: %s\n", s.message().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ranktime vs raw MPI"};
  std::string workload = "examples/workloads/resnet50.tsv";
  int reps = 10, latency_reps = 2000;
  double idle_s = 5;
  bool idle_only = false;
  app.add_option("--workload", workload)->capture_default_str();
  app.add_option("--reps", reps)->capture_default_str();
  app.add_option("--latency-reps", latency_reps)->capture_default_str();
  app.add_option("--idle-seconds", idle_s)->capture_default_str();
  app.add_flag("--idle-only", idle_only, "measure only the idle CPU (figure 4)");
  std::vector<int> figures = {1, 2, 3, 4};
  bool chunk_sweep = false;
  app.add_flag("--chunk-sweep", chunk_sweep,
               "with figure 1: also time the raw 64 MiB allreduce in calls of 64 KiB to 64 MiB "
               "(what RANKTIME_ALLREDUCE_CHUNK's default is chosen from)");
  app.add_option("--figures", figures, "which figures to measure (1-4)")->check(CLI::Range(1, 4));
  CLI11_PARSE(app, argc, argv);
  if (idle_only) figures = {4};
  auto measure = [&](int figure) {
    return std::find(figures.begin(), figures.end(), figure) != figures.end();
  };

  // Read before MPI starts (a wrong path is one message and exit status 2).
  std::vector<ranktime::examples::WorkloadTensor> tensors;
  if (measure(2)) tensors = ranktime::examples::read_workload_or_exit(workload, "allreduce_bench");

  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ranktime::init();
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  auto say = [&](const char* fmt, auto... args) {
    if (rank == 0) std::printf(fmt, args...);
    std::fflush(stdout);
  };
  say("ranks=%d (processors on this host: %u)\n", size, std::thread::hardware_concurrency());

  // 1. One 64 MiB float32 tensor: raw in one call, raw in RANKTIME_ALLREDUCE_CHUNK-sized calls
  // (what ranktime does, to show what its chunking buys and what its own overhead is), ranktime.
  if (measure(1)) {
    std::vector<float> a(16 << 20, 1.0f);
    const int64_t chunk_bytes = ranktime::config_from_environment().allreduce_chunk;
    const int64_t chunk = chunk_bytes > 0 ? std::max<int64_t>(1, chunk_bytes / 4) : a.size();
    std::vector<double> raw, raw_chunked, rt;
    for (int i = 0; i < reps; ++i) {  // interleaved, so drift in machine load hits all alike
      auto r = time_reps(comm, 1, [&] {
        MPI_Allreduce(MPI_IN_PLACE, a.data(), static_cast<int>(a.size()), MPI_FLOAT, MPI_SUM, comm);
      });
      auto c = time_reps(comm, 1, [&] { raw_allreduce_in_calls(comm, a, chunk); });
      auto t = time_reps(comm, 1, [&] {
        check(ranktime::allreduce_async(
                  {a.data(), ranktime::DataType::kFloat32, {int64_t(a.size())}}, "big")
                  .wait());
      });
      raw.push_back(r[0]);
      raw_chunked.push_back(c[0]);
      rt.push_back(t[0]);
    }
    if (chunk_sweep) {
      const std::vector<int64_t> sweep = {64 << 10, 256 << 10, 1 << 20,
                                          4 << 20,  16 << 20,  64 << 20};
      std::vector<std::vector<double>> times(sweep.size());
      for (int i = 0; i < reps; ++i) {
        for (size_t s = 0; s < sweep.size(); ++s) {
          const int64_t n = sweep[s] / 4;
          times[s].push_back(time_reps(comm, 1, [&] { raw_allreduce_in_calls(comm, a, n); })[0]);
        }
      }
      say("1b. raw 64 MiB allreduce in calls of");
      for (size_t s = 0; s < sweep.size(); ++s) {
        say(" %lld KiB: %.2f ms%s", static_cast<long long>(sweep[s] >> 10), median(times[s]) * 1e3,
            s + 1 < sweep.size() ? "," : "\n");
      }
    }
    say("1. 64 MiB allreduce: raw %.2f ms, raw in %lld-byte calls %.2f ms, ranktime %.2f ms, "
        "ratio %.3f (target <= 1.05), vs the same calls raw %.3f\n",
        median(raw) * 1e3, static_cast<long long>(chunk * 4), median(raw_chunked) * 1e3,
        median(rt) * 1e3, median(rt) / median(raw), median(rt) / median(raw_chunked));
  }

  // 2. The gradient set: ranktime step vs (a) one raw call per tensor and (b) one pre-packed call.
  if (measure(2)) {
    std::vector<std::vector<float>> bufs;
    size_t total = 0;
    for (auto& t : tensors) {
      bufs.emplace_back(t.elements, 1.0f);
      total += t.elements;
    }
    std::vector<float> packed(total, 1.0f);
    std::vector<ranktime::Handle> handles(tensors.size());
    std::vector<double> a, b, rt;
    for (int i = 0; i < reps; ++i) {
      a.push_back(time_reps(comm, 1, [&] {
        for (size_t k = bufs.size(); k-- > 0;)
          MPI_Allreduce(MPI_IN_PLACE, bufs[k].data(), static_cast<int>(bufs[k].size()), MPI_FLOAT,
                        MPI_SUM, comm);
      })[0]);
      b.push_back(time_reps(comm, 1, [&] {
        MPI_Allreduce(MPI_IN_PLACE, packed.data(), static_cast<int>(packed.size()), MPI_FLOAT,
                      MPI_SUM, comm);
      })[0]);
      rt.push_back(time_reps(comm, 1, [&] {
        for (size_t k = bufs.size(); k-- > 0;) {
          handles[k] = ranktime::allreduce_async(
              {bufs[k].data(), ranktime::DataType::kFloat32, tensors[k].shape},
              "grad." + tensors[k].name);
        }
        for (auto& h : handles) check(h.wait());
      })[0]);
    }
    double best = std::min(median(a), median(b));
    say("2. %s (%zu tensors, %.1f M floats): raw per-tensor %.2f ms, raw packed %.2f ms, ranktime "
        "%.2f ms, "
        "ratio vs faster raw %.3f (target <= 1.00)\n",
        workload.c_str(), tensors.size(), total / 1e6, median(a) * 1e3, median(b) * 1e3,
        median(rt) * 1e3, median(rt) / best);
  }

  // 3. Latency of a synchronous 1-element allreduce.
  if (measure(3)) {
    float x = 1;
    const ranktime::TensorView one{&x, ranktime::DataType::kFloat32, {1}};
    std::vector<double> raw, rt, rt_async;
    MPI_Barrier(comm);
    for (int i = 0; i < latency_reps; ++i) {
      double t0 = now_s();
      MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_FLOAT, MPI_SUM, comm);
      raw.push_back(now_s() - t0);
    }
    // The synchronous call (this thread does the work), then the asynchronous one waited for at
    // once (the background thread does it).
    MPI_Barrier(comm);
    for (int i = 0; i < latency_reps; ++i) {
      double t0 = now_s();
      check(ranktime::allreduce(one, "latency"));
      rt.push_back(now_s() - t0);
    }
    MPI_Barrier(comm);
    for (int i = 0; i < latency_reps; ++i) {
      double t0 = now_s();
      check(ranktime::allreduce_async(one, "latency").wait());
      rt_async.push_back(now_s() - t0);
    }
    double m_raw = median(raw), m_rt[2] = {median(rt), median(rt_async)}, mx[2] = {0, 0};
    MPI_Reduce(m_rt, mx, 2, MPI_DOUBLE, MPI_MAX, 0, comm);
    say("3. 1-element allreduce latency: raw %.2f us, ranktime %.2f us (median of %d; target <= 6 "
        "us); allreduce_async().wait() %.2f us\n",
        m_raw * 1e6, mx[0] * 1e6, latency_reps, mx[1] * 1e6);
  }

  // 4. CPU used by an idle runtime (background thread only: this thread sleeps).
  if (measure(4)) {
    MPI_Barrier(comm);
    double c0 = cpu_seconds();
    std::this_thread::sleep_for(std::chrono::duration<double>(idle_s));
    double used = cpu_seconds() - c0, total = 0;
    MPI_Reduce(&used, &total, 1, MPI_DOUBLE, MPI_SUM, 0, comm);
    say("4. idle CPU over %.0f s, summed over %d ranks: %.3f%% of one core (target < 1%%)\n",
        idle_s, size, 100.0 * total / idle_s);
  }

  ranktime::shutdown();
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return 0;
}
