// tl-check-trace: validates the timeline a ranktime-synth job wrote (run by synth_timeline.sh
// after mpirun). Exit status 0 when every check holds, 1 otherwise (each failure on stderr).
//
//   tl-check-trace FILE --ranks N [--lanes all|rank0|R,R,...] [--timeline-ranks TEXT]
//                  [--cycles 0|1] [--tensors N]
//                  [--negotiations-per-tensor K] [--complete-lanes]
//                  [--slow-rank R --delay-ms D] [--skew-us s0,s1,...]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <CLI/CLI.hpp>

#include "tl_trace.h"

namespace {

using tltest::Negotiation;
using tltest::Trace;

// Slow-rank lag tolerance, in microseconds around the injected delay D.
//
// ranktime-synth lines the ranks up with ranktime::barrier(), then the slow rank sleeps D and
// every rank submits the same tensors in the same order. The slow rank's tick for a tensor is
// therefore D after the first rank's, plus:
//  - the sleep's overshoot: positive, tens of µs on an idle core (timer slack, wake-up), more
//    when the core is busy;
//  - the spread of the barrier's completion over the ranks: each rank learns of it from rank
//    0's response (a poll every <= 200 µs) and wakes its application thread: usually well under
//    1 ms, either sign;
//  - scheduling noise: these tests oversubscribe (4 ranks, each with a busy-polling background
//    thread, on 2 shared cores), so any rank can lose a scheduler time slice (a few ms under
//    CFS) at any point between the barrier and a submission;
//  - the clock-offset error after alignment (its uncertainty, a few µs here; under the skew test
//    the ±50 ms skew is removed by the alignment, or the lag is off by 50 ms).
// Lower side: only the barrier spread can make the lag shorter than D: allow 2 ms. Upper side:
// overshoot plus a lost time slice or two: allow 10 ms (measured here: median D + 0.15 to 0.3 ms,
// max D + 5 ms with 4 ranks on 2 idle cores; under two extra CPU hogs single steps reach D + 30
// ms, which is why the timing tests run RUN_SERIAL). Both sides are far below the 50 ms (or 100
// ms) an unaligned skew would add or remove. The window must hold on >= 90% of negotiations,
// not all, so that one preempted step (16 negotiations of 160) does not fail the test; the
// median, which one bad step cannot move, must be within [D - 1 ms, D + 5 ms].
constexpr double kLagBelowUs = 2000;
constexpr double kLagAboveUs = 10000;
constexpr double kMedianBelowUs = 1000;
constexpr double kMedianAboveUs = 5000;
constexpr double kMinFraction = 0.90;

// Clock offsets measured by min-round-trip ping-pong on one machine are within a few µs of the
// injected skew; allow 300 µs (oversubscribed ping-pongs) or three times the reported
// uncertainty, whichever is larger.
constexpr double kOffsetToleranceUs = 300;

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

bool is_internal(const std::string& name) { return name.rfind("ranktime.", 0) == 0; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tl-check-trace: validate a ranktime timeline written by a ranktime-synth job"};
  std::string path, lanes = "all", skew_list;
  bool allow_drops = false;
  int ranks = 0, cycles = 0, tensors = -1, per_tensor = -1, slow_rank = -1;
  double delay_ms = 0;
  bool complete_lanes = false;
  app.add_option("file", path, "the trace")->required();
  app.add_option("--ranks", ranks, "ranks of the job")->required();
  std::string timeline_ranks;
  app.add_option("--lanes", lanes,
                 "all: every rank's lanes; rank0: rank 0's only; R,R,...: exactly these ranks'");
  app.add_option("--timeline-ranks", timeline_ranks, "ranktime_run's timeline_ranks (as set)");
  app.add_option("--cycles", cycles, "1: CYCLE_START instants expected; 0: none");
  app.add_option("--tensors", tensors, "number of grad.* tensors expected");
  app.add_option("--negotiations-per-tensor", per_tensor, "negotiations of each grad.* tensor");
  app.add_flag("--complete-lanes", complete_lanes,
               "every negotiation has its operation slice on every expected lane");
  app.add_option("--slow-rank", slow_rank, "the rank ranktime-synth delayed");
  app.add_option("--delay-ms", delay_ms, "its delay per step");
  app.add_flag("--allow-drops", allow_drops,
               "records dropped after a signal are fine (the count must still be present)");
  app.add_option("--skew-us", skew_list,
                 "RANKTIME_TEST_CLOCK_SKEW_US of each rank, comma-separated");
  CLI11_PARSE(app, argc, argv);

  std::vector<std::string> problems;
  Trace t;
  const bool parsed = tltest::load_trace(path, &t, &problems) || t.ranks > 0;
  auto fail = [&](const std::string& what) { problems.push_back(what); };
  if (parsed) {
    if (t.ranks != ranks)
      fail("ranktime_run says ranks=" + std::to_string(t.ranks) + ", expected " +
           std::to_string(ranks));
    // Drops are allowed only where asked: records that reach rank 0 after a signal has started
    // closing the file are dropped and counted, which is the designed behaviour.
    const int64_t dropped =
        t.run_end.is_object() ? t.run_end.value("events_dropped", int64_t{-1}) : 0;
    if (dropped < 0 || (dropped > 0 && !allow_drops)) {
      fail("ranktime_run_end events_dropped = " +
           t.run_end.value("events_dropped", tltest::json()).dump());
    }

    // Lanes: every rank's (tid 1 + r), rank 0's only, or the chosen ranks' (TIMELINE_RANKS), as
    // the metadata says.
    const bool all = lanes == "all";
    std::set<int> want_ranks;
    if (all) {
      for (int r = 0; r < ranks; ++r) want_ranks.insert(r);
    } else if (lanes == "rank0") {
      want_ranks.insert(0);
    } else {
      std::stringstream list(lanes);
      for (std::string r; std::getline(list, r, ',');) want_ranks.insert(std::stoi(r));
    }
    if (t.run.value("all_ranks", !all) != all)
      fail("ranktime_run all_ranks is not " + std::string(all ? "true" : "false"));
    if (t.run.value("timeline_ranks", std::string()) != timeline_ranks)
      fail("ranktime_run timeline_ranks is " +
           t.run.value("timeline_ranks", tltest::json()).dump() + ", expected \"" + timeline_ranks +
           "\"");
    std::set<int> lane_tids, want_tids;
    for (const auto& [pid, tid] : t.threads_with_events) {
      if (pid > 0 && tid > 0) lane_tids.insert(tid);
    }
    for (int r : want_ranks) want_tids.insert(1 + r);
    if (lane_tids != want_tids) {
      std::string got, want;
      for (int x : lane_tids) got += " " + std::to_string(x);
      for (int x : want_tids) want += " " + std::to_string(x);
      fail("lanes present: tids" + got + "; expected tids" + want);
    }
    if (complete_lanes) {
      // Each error-free negotiation of a tensor has its operation slice on every expected lane.
      std::map<int, int> negotiated;
      std::map<std::pair<int, int>, int> processed;
      for (const auto& n : t.negotiations) {
        if (!n.has_error) ++negotiated[n.pid];
      }
      for (const auto& o : t.ops) ++processed[{o.pid, o.rank}];
      // And an arrow from its last tick to rank 0's operation slice.
      std::map<int, int> arrows;
      for (const auto& f : t.flows) ++arrows[f.pid];
      for (const auto& [pid, count] : negotiated) {
        if (arrows[pid] != count) {
          fail("tensor " + tltest::printable(t.process_names[pid]) + ": " + std::to_string(count) +
               " negotiations but " + std::to_string(arrows[pid]) + " arrows into rank 0's lane");
        }
      }
      for (const auto& [pid, count] : negotiated) {
        for (int r : want_ranks) {
          const int got = processed.count({pid, r}) ? processed[{pid, r}] : 0;
          if (got != count) {
            fail("tensor " + tltest::printable(t.process_names[pid]) + ": " +
                 std::to_string(count) + " negotiations but " + std::to_string(got) +
                 " operation slices on rank " + std::to_string(r) + "'s lane");
          }
        }
      }
    }

    // Cycle markers.
    if (t.run.value("mark_cycles", cycles == 0) != (cycles != 0))
      fail("ranktime_run mark_cycles disagrees with --cycles");
    if (cycles && t.cycles.empty()) fail("TIMELINE_MARK_CYCLES=1 but no CYCLE_START instant");
    if (!cycles && !t.cycles.empty())
      fail(std::to_string(t.cycles.size()) + " CYCLE_START instants without TIMELINE_MARK_CYCLES");

    // The workload's tensors, each negotiated once per step.
    std::map<int, int> grad_negotiations;
    for (const auto& [pid, name] : t.process_names) {
      if (pid > 0 && name.rfind("grad.", 0) == 0) grad_negotiations[pid] = 0;
    }
    for (const auto& n : t.negotiations) {
      if (grad_negotiations.count(n.pid)) ++grad_negotiations[n.pid];
    }
    if (tensors >= 0 && static_cast<int>(grad_negotiations.size()) != tensors) {
      fail(std::to_string(grad_negotiations.size()) + " grad.* tensors, expected " +
           std::to_string(tensors));
    }
    if (per_tensor >= 0) {
      for (const auto& [pid, count] : grad_negotiations) {
        if (count != per_tensor) {
          fail("tensor " + tltest::printable(t.process_names[pid]) + " negotiated " +
               std::to_string(count) + " times, expected " + std::to_string(per_tensor));
        }
      }
    }

    // The slow rank arrives last, D after the first rank.
    if (slow_rank >= 0) {
      const double d_us = delay_ms * 1000;
      std::vector<double> slow_lags, others_max_lag;
      int considered = 0, good = 0, not_last = 0;
      std::vector<std::string> examples;
      for (const Negotiation& n : t.negotiations) {
        // The first step pays one-time costs; the barrier's lateness is not the injected delay.
        if (n.index_for_pid == 0 || is_internal(t.process_names[n.pid]) || n.op != "ALLREDUCE")
          continue;
        const tltest::Tick* tick = n.tick_of(slow_rank);
        if (!tick) continue;  // reported by load_trace
        ++considered;
        slow_lags.push_back(tick->lag_us);
        double others = 0;
        for (const auto& k : n.ticks) {
          if (k.rank != slow_rank) others = std::max(others, k.lag_us);
        }
        others_max_lag.push_back(others);
        const bool last = n.last_rank == slow_rank;
        const bool in_range =
            tick->lag_us >= d_us - kLagBelowUs && tick->lag_us <= d_us + kLagAboveUs;
        if (!last) ++not_last;
        if (last && in_range) {
          ++good;
        } else if (examples.size() < 5) {
          examples.push_back(tltest::printable(t.process_names[n.pid]) + " at " +
                             std::to_string(n.begin) + ": last_rank " +
                             std::to_string(n.last_rank) + ", rank " + std::to_string(slow_rank) +
                             " lag " + std::to_string(tick->lag_us) + " us");
        }
      }
      const double med = median(slow_lags), others_med = median(others_max_lag);
      std::fprintf(
          stderr,
          "tl-check-trace: slow rank %d: %d negotiations considered, %d with it last and lag in "
          "[%.0f, %.0f] us, %d with another rank last; its lag median %.1f us, min %.1f, max %.1f; "
          "other ranks' largest lag median %.1f us\n",
          slow_rank, considered, good, d_us - kLagBelowUs, d_us + kLagAboveUs, not_last, med,
          slow_lags.empty() ? NAN : *std::min_element(slow_lags.begin(), slow_lags.end()),
          slow_lags.empty() ? NAN : *std::max_element(slow_lags.begin(), slow_lags.end()),
          others_med);
      if (considered < 10)
        fail("only " + std::to_string(considered) + " negotiations to judge the slow rank by");
      if (considered > 0 && good < kMinFraction * considered) {
        fail("rank " + std::to_string(slow_rank) + " is last with a lag of D=" +
             std::to_string(d_us) + " us in only " + std::to_string(good) + " of " +
             std::to_string(considered) + " negotiations; e.g. " + tltest::join(examples, "; "));
      }
      if (!(med >= d_us - kMedianBelowUs && med <= d_us + kMedianAboveUs)) {
        fail("median lag of rank " + std::to_string(slow_rank) + " is " + std::to_string(med) +
             " us, expected " + std::to_string(d_us) + " us (-" + std::to_string(kMedianBelowUs) +
             "/+" + std::to_string(kMedianAboveUs) + ")");
      }
      // The punctual ranks: close together, far from the 50 ms an unaligned skew would put them
      // apart.
      if (!(others_med <= d_us / 4)) {
        fail("the punctual ranks' median largest lag is " + std::to_string(others_med) +
             " us (over D/4)");
      }
    }

    // Clock alignment: the measured offsets are the injected skews relative to rank 0's.
    if (!skew_list.empty()) {
      std::vector<double> skew;
      std::stringstream ss(skew_list);
      for (std::string item; std::getline(ss, item, ',');) skew.push_back(std::stod(item));
      if (static_cast<int>(skew.size()) != ranks) {
        fail("--skew-us has " + std::to_string(skew.size()) + " entries for " +
             std::to_string(ranks) + " ranks");
      } else {
        for (const char* which : {"ranktime_run", "ranktime_run_end"}) {
          const tltest::json& m = std::string(which) == "ranktime_run" ? t.run : t.run_end;
          if (!m.is_object() || !m.contains("clock_offsets_us")) continue;
          for (int r = 0; r < ranks; ++r) {
            const double want = skew[r] - skew[0];
            const double got = m["clock_offsets_us"][r].get<double>();
            const double unc = m["clock_uncertainty_us"][r].get<double>();
            const double tol = std::max(kOffsetToleranceUs, 3 * unc);
            std::fprintf(
                stderr,
                "tl-check-trace: %s rank %d clock offset %.3f us (+- %.3f), injected %.0f us\n",
                which, r, got, unc, want);
            if (std::fabs(got - want) > tol) {
              fail(std::string(which) + " clock_offsets_us[" + std::to_string(r) +
                   "] = " + std::to_string(got) + ", expected " + std::to_string(want) + " +- " +
                   std::to_string(tol));
            }
          }
        }
      }
    }
  }

  if (!problems.empty()) {
    std::fprintf(stderr, "tl-check-trace: %s: %zu problem(s):\n  %s\n", path.c_str(),
                 problems.size(), tltest::join(problems).c_str());
    return 1;
  }
  std::fprintf(stderr,
               "tl-check-trace: %s: ok (%zu events, %zu negotiations, %zu operation slices)\n",
               path.c_str(), t.events.size(), t.negotiations.size(), t.ops.size());
  return 0;
}
