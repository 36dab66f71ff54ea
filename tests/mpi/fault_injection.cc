// A workload that misbehaves on purpose, for the fault-injection tests (test_faults.py).
// Usage: fault_injection MODE [VICTIM], where MODE is one of
//   stall-recover   rank 1 submits one tensor 3 s late; every rank still succeeds
//   stall-shutdown  rank 1 never submits one tensor; every rank must get the stall error
//   slow            rank 1 is 15 ms late every step; rank 0 checks ranktime::lateness()
//   exit-early      rank 1 returns from main without shutdown(); the others must get an error
//   kill            rank VICTIM (default 1) SIGKILLs itself after a few steps, between operations
//   kill-in-collective  rank VICTIM SIGKILLs itself while the ranks reduce a 32 MiB tensor
//   stuck-sleep, stuck-busy, stuck-mpi  rank VICTIM never comes back from its own code (a sleep,
//                   a busy loop, an MPI_Barrier on MPI_COMM_WORLD that the others never join);
//                   the stall shutdown must end the whole job (prints "PID R <pid>" first)
//   fail-local      with RANKTIME_TEST_FAIL_LOCAL=1:TENSOR: reduces agree.single alone, then
//                   agree.fused.0-3 together, then agree.after; prints "OK <name> <value>" for
//                   each success, "FAILED <name>" before each failure's ERROR line (every tensor's
//                   elements must equal the number of ranks)
// Prints "ERROR: <message> [rank R]" for every failed operation and exits 3 if any failed.
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ranktime/ranktime.h"

namespace {

int failures = 0;
int my_rank = -1;

void report(const ranktime::Status& s) {
  std::printf("ERROR: %s [rank %d]\n", s.message().c_str(), my_rank);
  std::fflush(stdout);
  ++failures;
}

bool allreduce(const std::string& name, int64_t n = 64) {
  std::vector<float> x(n, 1.0f);
  ranktime::Status s =
      ranktime::allreduce_async({x.data(), ranktime::DataType::kFloat32, {n}}, name).wait();
  if (!s.ok()) report(s);
  return s.ok();
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Two minutes in the user's own code, never calling ranktime: far past any test's bound.
void get_stuck(const std::string& kind) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  if (kind == "sleep") {
    std::this_thread::sleep_until(until);
  } else if (kind == "busy") {
    volatile uint64_t spins = 0;
    while (std::chrono::steady_clock::now() < until) ++spins;
  } else {
    MPI_Barrier(MPI_COMM_WORLD);  // the other ranks never enter it
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: fault_injection MODE [VICTIM]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const int victim = argc == 3 ? std::atoi(argv[2]) : 1;
  ranktime::init();
  const int rank = my_rank = ranktime::rank();
  if (mode == "stall-recover" || mode == "stall-shutdown") {
    allreduce("stall.a");
    std::vector<float> b(8, 1.0f);
    if (rank == 1) {
      if (mode == "stall-shutdown") {
        allreduce("stall.c");  // never matched: waits until the stall shutdown fails it
      } else {
        sleep_ms(3000);
      }
    }
    if (!(rank == 1 && mode == "stall-shutdown")) allreduce("stall.b");
  } else if (mode == "slow") {
    for (int step = 0; step < 100; ++step) {  // > 1 s: the inspector looks once a second
      if (rank == 1) sleep_ms(15);
      std::vector<ranktime::Handle> hs;
      std::vector<std::vector<float>> bufs(5, std::vector<float>(100, 1.0f));
      for (int t = 0; t < 5; ++t) {
        hs.push_back(ranktime::allreduce_async(
            {bufs[t].data(), ranktime::DataType::kFloat32, {100}}, "slow." + std::to_string(t)));
      }
      for (auto& h : hs) {
        if (!h.wait().ok()) ++failures;
      }
    }
    if (rank == 0) {
      int worst = -1;
      double worst_median = -1;
      for (const ranktime::RankLateness& s : ranktime::lateness()) {
        std::printf(
            "LATENESS rank=%d host=%s last=%llu/%llu median_ms=%.3f p95_ms=%.3f "
            "cost_per_step_ms=%.3f\n",
            s.rank, s.hostname.c_str(), static_cast<unsigned long long>(s.window_times_last),
            static_cast<unsigned long long>(s.window), s.median_lag_us / 1e3, s.p95_lag_us / 1e3,
            s.cost_per_step_us / 1e3);
        if (s.median_lag_us > worst_median) {
          worst_median = s.median_lag_us;
          worst = s.rank;
        }
      }
      std::printf("SLOWEST %d\n", worst);
    } else if (!ranktime::lateness().empty()) {
      std::printf("ERROR: lateness() should be empty on rank %d\n", rank);
      ++failures;
    }
  } else if (mode == "exit-early") {
    allreduce("early.a");
    if (rank == 1) return 0;  // no shutdown(): the atexit hook must tell the others
    sleep_ms(200);
    for (int i = 0; i < 3; ++i) allreduce("early.after." + std::to_string(i));
  } else if (mode == "kill") {
    for (int step = 0;; ++step) {
      if (rank == victim && step == 20) raise(SIGKILL);
      for (int t = 0; t < 10; ++t) allreduce("kill." + std::to_string(t), 1000);
      if (failures) break;
    }
  } else if (mode == "kill-in-collective") {
    const int64_t n = int64_t{8} << 20;
    std::vector<float> x(n, 1.0f);
    for (int step = 0; step < 1000 && !failures; ++step) {
      ranktime::Handle h = ranktime::allreduce_async({x.data(), ranktime::DataType::kFloat32, {n}},
                                                     "big." + std::to_string(step));
      // The collective takes tens of milliseconds here: 5 ms after submitting, this rank's
      // background thread is almost always inside it.
      if (rank == victim && step == 3) {
        sleep_ms(5);
        raise(SIGKILL);
      }
      ranktime::Status s = h.wait();
      if (!s.ok()) report(s);
    }
    // Later operations fail at once, with the same reason.
    if (failures) allreduce("after.failure");
  } else if (mode == "fail-local") {
    auto reduce = [&](const std::vector<std::string>& names) {
      std::vector<std::vector<float>> bufs(names.size(), std::vector<float>(16, 1.0f));
      std::vector<ranktime::Handle> hs;
      for (size_t i = 0; i < names.size(); ++i) {
        hs.push_back(ranktime::allreduce_async({bufs[i].data(), ranktime::DataType::kFloat32, {16}},
                                               names[i]));
      }
      for (size_t i = 0; i < names.size(); ++i) {
        ranktime::Status s = hs[i].wait();
        if (s.ok()) {
          std::printf("OK %s %g [rank %d]\n", names[i].c_str(), bufs[i][0], rank);
        } else {
          std::printf("FAILED %s [rank %d]\n", names[i].c_str(), rank);
          report(s);
        }
      }
    };
    reduce({"agree.single"});
    reduce({"agree.fused.0", "agree.fused.1", "agree.fused.2", "agree.fused.3"});
    reduce({"agree.after"});
  } else if (mode.rfind("stuck-", 0) == 0) {
    std::printf("PID %d %d\n", rank, static_cast<int>(getpid()));
    std::fflush(stdout);
    allreduce("stuck.a");
    if (rank == victim) get_stuck(mode.substr(6));
    allreduce("stuck.b");  // the stall shutdown fails it
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  std::fflush(stdout);
  ranktime::shutdown();
  return failures ? 3 : 0;
}
