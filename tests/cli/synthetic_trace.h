// Writes timelines that follow docs/timeline-format.md exactly, with known lateness, fusion and
// bandwidth, so tests can compare the analysis with the truth (and benchmarks can make big ones).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

namespace ranktime::testing {

struct SyntheticTrace {
  int ranks = 2;
  int tensors = 4;
  int steps = 3;
  int fused = 1;  // tensors per fused batch
  int slow_rank = -1;
  double delay_us = 0;         // the slow rank becomes ready this much after the others
  int64_t bytes = 4096;        // per tensor
  double collective_us = 100;  // per batch
  double step_us = 100000;     // steps start this far apart
  bool mark_cycles = false;
  bool run_end = true;  // write ranktime_run_end (a clean close)
  bool closing_bracket = true;
  // The slow rank is late only in these steps (empty: in every step).
  std::vector<int> slow_steps;
  // STEP slices on pid 0 (thread "steps rank r", tid 1 + r), written after their step's
  // negotiations, as a writer that knows a step's end only at the next mark would. Rank r marks
  // its step start_lag_us x r late.
  bool step_marks = false;
  double start_lag_us = 0;
  // Names (untrusted input for the report): tensor i is tensor_names[i] when given, else
  // "grad.i"; every rank's host is `hostname`.
  std::vector<std::string> tensor_names;
  std::string hostname = "n1";
  // Whose processing lanes are written (empty: every rank's, "all_ranks":true); with a choice,
  // ranktime_run says "all_ranks":false and "timeline_ranks":timeline_ranks.
  std::vector<int> lane_ranks;
  std::string timeline_ranks;
};

class SyntheticTraceWriter {
 public:
  SyntheticTraceWriter(std::ostream& out, const SyntheticTrace& t) : out_(out), t_(t) {}

  // Writes the metadata, then `t.steps` steps; finish() closes the run.
  void begin() {
    emit(R"({"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"ranktime"}})");
    emit(R"({"name":"process_sort_index","ph":"M","pid":0,"tid":0,"args":{"sort_index":-1}})");
    emit(R"({"name":"thread_name","ph":"M","pid":0,"tid":0,"args":{"name":"cycles"}})");
    std::string hosts, pids, offsets;
    for (int r = 0; r < t_.ranks; ++r) {
      hosts += std::string(r ? "," : "") + json_string(t_.hostname);
      pids += std::string(r ? "," : "") + std::to_string(400 + r);
      offsets += std::string(r ? "," : "") + "0";
    }
    emit(
        R"({"name":"ranktime_run","ph":"M","pid":0,"tid":0,"args":{"ranks":)" +
        std::to_string(t_.ranks) + R"(,"hostnames":[)" + hosts + R"(],"pids":[)" + pids +
        R"(],"start_time_since_epoch_in_micros":1795000000000000,"config":{},"clock_offsets_us":[)" +
        offsets + R"(],"clock_uncertainty_us":[)" + offsets + R"(],"mark_cycles":)" +
        (t_.mark_cycles ? "true" : "false") +
        (t_.lane_ranks.empty()
             ? std::string(R"(,"all_ranks":true}})")
             : R"(,"all_ranks":false,"timeline_ranks":")" + t_.timeline_ranks + "\"}}"));
    if (t_.step_marks) {
      for (int r = 0; r < t_.ranks; ++r) {
        emit(R"({"name":"thread_name","ph":"M","pid":0,"tid":)" + std::to_string(r + 1) +
             R"(,"args":{"name":"steps rank )" + std::to_string(r) + "\"}}");
      }
    }
  }

  // When step s begins on rank r (its STEP mark).
  double step_start(int s, int r) const { return 500 + s * t_.step_us + r * t_.start_lag_us; }
  bool slow_in(int s) const {
    return t_.slow_rank >= 0 && t_.delay_us > 0 &&
           (t_.slow_steps.empty() ||
            std::find(t_.slow_steps.begin(), t_.slow_steps.end(), s) != t_.slow_steps.end());
  }

  void step(int s) {
    const double t0 = 1000 + s * t_.step_us;
    std::vector<double> negotiated(t_.tensors);
    for (int i = 0; i < t_.tensors; ++i) {
      const int pid = 1 + i;
      if (s == 0) {
        const std::string name = static_cast<size_t>(i) < t_.tensor_names.size()
                                     ? t_.tensor_names[i]
                                     : "grad." + std::to_string(i);
        emit(R"({"name":"process_name","ph":"M","pid":)" + std::to_string(pid) +
             R"(,"tid":0,"args":{"name":)" + json_string(name) + "}}");
        emit(R"({"name":"process_sort_index","ph":"M","pid":)" + std::to_string(pid) +
             R"(,"tid":0,"args":{"sort_index":)" + std::to_string(i) + "}}");
        emit(R"({"name":"thread_name","ph":"M","pid":)" + std::to_string(pid) +
             R"(,"tid":0,"args":{"name":"negotiate"}})");
        for (int r = 0; r < t_.ranks; ++r) {
          emit(R"({"name":"thread_name","ph":"M","pid":)" + std::to_string(pid) + R"(,"tid":)" +
               std::to_string(r + 1) + R"(,"args":{"name":"rank )" + std::to_string(r) + "\"}}");
        }
      }
      const double first = t0 + i * 10.0;
      const bool slow = slow_in(s);
      const double last = first + (slow ? t_.delay_us : 0);
      emit(R"({"name":"NEGOTIATE_ALLREDUCE","ph":"B","pid":)" + std::to_string(pid) +
           R"(,"tid":0,"ts":)" + ts(first) + "}");
      // Ticks in time order: the on-time ranks, then the slow one.
      for (int pass = 0; pass < 2; ++pass) {
        for (int r = 0; r < t_.ranks; ++r) {
          const bool late = slow && r == t_.slow_rank;
          if (late != (pass == 1)) continue;
          emit(R"({"name":")" + std::to_string(r) + R"(","ph":"X","pid":)" + std::to_string(pid) +
               R"(,"tid":0,"ts":)" + ts(late ? last : first) + R"(,"dur":0,"args":{"rank":)" +
               std::to_string(r) + R"(,"lag_us":)" + ts(late ? last - first : 0) + "}}");
        }
      }
      negotiated[i] = last + 10;
      emit(R"({"name":"NEGOTIATE_ALLREDUCE","ph":"E","pid":)" + std::to_string(pid) +
           R"(,"tid":0,"ts":)" + ts(negotiated[i]) + R"(,"args":{"last_rank":)" +
           std::to_string(slow ? t_.slow_rank : t_.ranks - 1) + R"(,"spread_us":)" +
           ts(last - first) + "}}");
    }
    // Each batch runs once all of its tensors are negotiated; every rank's lane the same.
    for (int b0 = 0; b0 < t_.tensors; b0 += t_.fused) {
      const int n = std::min(t_.fused, t_.tensors - b0);
      const double response = negotiated[b0 + n - 1] + 5;
      if (t_.mark_cycles) {
        emit(R"({"name":"CYCLE_START","ph":"i","s":"p","pid":0,"tid":0,"ts":)" + ts(response) +
             R"(,"args":{"cycle":)" + std::to_string(++cycle_) + "}}");
      }
      for (int r = 0; r < t_.ranks; ++r) {
        if (!t_.lane_ranks.empty() &&
            std::find(t_.lane_ranks.begin(), t_.lane_ranks.end(), r) == t_.lane_ranks.end())
          continue;
        for (int i = b0; i < b0 + n; ++i) op_slice(1 + i, r, response, n);
      }
    }
    if (t_.step_marks) {
      for (int r = 0; r < t_.ranks; ++r) {
        const double begin = step_start(s, r);
        emit(R"({"name":"STEP","ph":"X","pid":0,"tid":)" + std::to_string(r + 1) + R"(,"ts":)" +
             ts(begin) + R"(,"dur":)" + ts(step_start(s + 1, r) - begin) + R"(,"args":{"step":)" +
             std::to_string(s) + "}}");
      }
    }
  }

  void finish() {
    if (t_.run_end) {
      emit(R"({"name":"ranktime_run_end","ph":"M","pid":0,"tid":0,"args":{"events_written":)" +
           std::to_string(events_ + 1) + R"(,"events_dropped":0}})");
    }
    out_ << (t_.closing_bracket ? "\n]\n" : "\n");
  }

  void write_all() {
    begin();
    for (int s = 0; s < t_.steps; ++s) step(s);
    finish();
  }

  uint64_t events() const { return events_; }
  // What the analysis should find for the op slice's collective time and bytes per batch.
  static double memcpy_us() { return 2.0; }

 private:
  void op_slice(int pid, int r, double response, int n) {
    const std::string lane =
        R"(,"pid":)" + std::to_string(pid) + R"(,"tid":)" + std::to_string(r + 1) + R"(,"ts":)";
    double t = response;
    emit(R"({"name":"ALLREDUCE","ph":"B")" + lane + ts(t) +
         R"(,"args":{"dtype":"float32","shape":[)" + std::to_string(t_.bytes / 4) +
         R"(],"bytes":)" + std::to_string(t_.bytes) + R"(,"fused_tensors":)" + std::to_string(n) +
         "}}");
    span(lane, "QUEUE", t, t + 1);
    t += 1;
    if (n > 1) {
      span(lane, "MEMCPY_IN_FUSION_BUFFER", t, t + memcpy_us());
      t += memcpy_us();
    }
    span(lane, "MPI_ALLREDUCE", t, t + t_.collective_us);
    t += t_.collective_us;
    if (n > 1) {
      span(lane, "MEMCPY_OUT_FUSION_BUFFER", t, t + memcpy_us());
      t += memcpy_us();
    }
    emit(R"({"name":"ALLREDUCE","ph":"E")" + lane + ts(t) + "}");
  }

  void span(const std::string& lane, const char* name, double begin, double end) {
    emit(std::string(R"({"name":")") + name + R"(","ph":"B")" + lane + ts(begin) + "}");
    emit(std::string(R"({"name":")") + name + R"(","ph":"E")" + lane + ts(end) + "}");
  }

  // A JSON string literal for any name (quotes, backslashes and control characters escaped).
  static std::string json_string(const std::string& text) {
    std::string out = "\"";
    for (unsigned char c : text) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c < 0x20) {
        char buffer[8];
        std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
        out += buffer;
      } else {
        out += static_cast<char>(c);
      }
    }
    return out + "\"";
  }

  static std::string ts(double us) {
    char buffer[64];
    std::snprintf(buffer, sizeof(buffer), "%.3f", us);
    return buffer;
  }

  void emit(const std::string& event) {
    out_ << (events_ == 0 ? "[\n" : ",\n") << event;
    ++events_;
  }

  std::ostream& out_;
  SyntheticTrace t_;
  uint64_t events_ = 0;
  int64_t cycle_ = 0;
};

inline void write_synthetic_trace(std::ostream& out, const SyntheticTrace& t) {
  SyntheticTraceWriter(out, t).write_all();
}

}  // namespace ranktime::testing
