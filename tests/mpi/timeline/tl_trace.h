// Test-side reader and validator of a ranktime timeline file (docs/timeline-format.md), written
// independently of timeline/ so that the multi-rank tests do not trust the code they test.
// Parses with nlohmann_json; never greps the text.
//
// load_trace() checks everything the format guarantees for any run (a complete array, run
// metadata first and run-end metadata last, per-thread time order and strict B/E nesting,
// sub-phases inside their operation slice, one tick per rank inside every negotiation, process
// and thread metadata before use) and returns the slices it found for scenario-specific checks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tltest {

using json = nlohmann::json;

struct Tick {
  int rank = -1;
  double ts = 0;
  double lag_us = 0;
};

// One NEGOTIATE_<OP> slice on a tensor's negotiate thread.
struct Negotiation {
  int pid = 0;
  std::string op;  // "ALLREDUCE", "ALLGATHER", "BROADCAST", "BARRIER"
  double begin = 0, end = 0;
  int last_rank = -1;
  double spread_us = 0;
  bool has_error = false;
  std::vector<Tick> ticks;   // file order (= time order)
  size_t index_for_pid = 0;  // 0 for the tensor's first negotiation in this file, 1 next, ...

  const Tick* tick_of(int rank) const {
    for (const Tick& t : ticks) {
      if (t.rank == rank) return &t;
    }
    return nullptr;
  }
};

// One operation slice (ALLREDUCE, ...) on a tensor's `rank r` thread, with its sub-phases.
struct OpSlice {
  int pid = 0;
  int rank = -1;
  std::string op;
  double begin = 0, end = 0;
  json begin_args;
  json end_args;
  std::vector<std::string> phases;  // sub-phase names in order
};

struct Trace {
  json events;   // the whole array
  json run;      // args of ranktime_run
  json run_end;  // args of ranktime_run_end
  int ranks = 0;
  std::map<int, std::string> process_names;  // pid -> process_name
  std::map<std::pair<int, int>, std::string> thread_names;
  std::set<std::pair<int, int>> threads_with_events;  // (pid, tid) with non-metadata events
  std::vector<Negotiation> negotiations;              // file order
  std::vector<OpSlice> ops;                           // file order
  std::vector<std::pair<double, int64_t>> cycles;     // CYCLE_START (ts, cycle)
  std::vector<json> global_instants;                  // other instants on pid 0

  // pid of the tensor named `name`; -1 when absent, -2 when more than one process has it.
  int pid_of(const std::string& name) const {
    int found = -1;
    for (const auto& [pid, n] : process_names) {
      if (pid > 0 && n == name) found = found == -1 ? pid : -2;
    }
    return found;
  }
  std::set<std::string> tensor_names() const {
    std::set<std::string> out;
    for (const auto& [pid, n] : process_names) {
      if (pid > 0) out.insert(n);
    }
    return out;
  }
};

inline const std::set<std::string>& op_names() {
  static const std::set<std::string> s{"ALLREDUCE", "ALLGATHER", "BROADCAST", "BARRIER"};
  return s;
}

inline const std::set<std::string>& sub_phase_names() {
  static const std::set<std::string> s{"QUEUE",
                                       "WAIT_FOR_DATA",
                                       "WAIT_FOR_OTHER_TENSOR_DATA",
                                       "MEMCPY_IN_FUSION_BUFFER",
                                       "MEMCPY_OUT_FUSION_BUFFER",
                                       "MPI_ALLREDUCE",
                                       "MPI_ALLGATHER",
                                       "MPI_BCAST",
                                       "NCCL_ALLREDUCE",
                                       "NCCL_ALLGATHER",
                                       "NCCL_BCAST",
                                       "NCCL_REDUCESCATTER",
                                       "NCCL_REDUCE",
                                       "MEMCPY_IN_HOST_BUFFER",
                                       "MEMCPY_OUT_HOST_BUFFER",
                                       "MPI_REDUCE"};
  return s;
}

inline std::string join(const std::vector<std::string>& v, const std::string& sep = "\n  ") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// A short, printable form of a name (control characters and quotes shown escaped).
inline std::string printable(const std::string& s) { return json(s).dump(); }

namespace detail {

struct Open {
  std::string name;
  double ts;
  size_t index;  // event index of the B
};

struct ThreadState {
  std::vector<Open> stack;
  double last_ts = -1e300;
  bool has_ts = false;
  // tid 0 of a tensor: the negotiation being built; lanes: the op slice being built.
  Negotiation negotiation;
  OpSlice op;
};

inline bool is_int(const json& v) { return v.is_number_integer() || v.is_number_unsigned(); }

}  // namespace detail

// Reads and validates `path`. Returns false (with reasons in `problems`) when the file is not a
// valid, complete timeline; structural problems found in a parseable file are all listed (up to
// a cap), not just the first.
inline bool load_trace(const std::string& path, Trace* out, std::vector<std::string>* problems) {
  constexpr size_t kMaxProblems = 40;
  const size_t problems_before = problems->size();
  auto problem = [&](const std::string& what) {
    if (problems->size() - problems_before < kMaxProblems) problems->push_back(what);
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    problems->push_back("cannot open " + path);
    return false;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  Trace& t = *out;
  t = Trace{};
  try {
    t.events = json::parse(buffer.str());
  } catch (const std::exception& e) {
    problems->push_back(path + " is not valid JSON (" + std::to_string(buffer.str().size()) +
                        " bytes): " + e.what());
    return false;
  }
  if (!t.events.is_array()) {
    problems->push_back(path + ": the top level is not an array");
    return false;
  }
  const json& ev = t.events;
  if (ev.empty()) {
    problems->push_back(path + ": empty array");
    return false;
  }

  // Run metadata: ranktime_run before any non-metadata event, ranktime_run_end exactly once, last.
  int run_at = -1, run_end_at = -1;
  for (size_t i = 0; i < ev.size(); ++i) {
    const json& e = ev[i];
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("ph") ||
        !e["ph"].is_string() || !e.contains("pid") || !detail::is_int(e["pid"]) ||
        !e.contains("tid") || !detail::is_int(e["tid"])) {
      problem("event " + std::to_string(i) + " lacks name/ph/pid/tid: " + e.dump());
      continue;
    }
    const std::string name = e["name"];
    if (e["ph"] == "M" && name == "ranktime_run") {
      if (run_at >= 0)
        problem("ranktime_run appears twice (events " + std::to_string(run_at) + ", " +
                std::to_string(i) + ")");
      run_at = static_cast<int>(i);
    }
    if (e["ph"] == "M" && name == "ranktime_run_end") {
      if (run_end_at >= 0) problem("ranktime_run_end appears twice");
      run_end_at = static_cast<int>(i);
    }
  }
  if (run_at < 0) {
    problem("no ranktime_run metadata");
  } else {
    for (int i = 0; i < run_at; ++i) {
      if (ev[i].value("ph", "") != "M" || ev[i].value("pid", -1) != 0) {
        problem("event " + std::to_string(i) + " comes before ranktime_run: " + ev[i].dump());
        break;
      }
    }
    t.run = ev[run_at].value("args", json::object());
  }
  if (run_end_at < 0) {
    problem("no ranktime_run_end metadata: the file is not complete");
  } else {
    if (run_end_at != static_cast<int>(ev.size()) - 1) {
      problem("ranktime_run_end is event " + std::to_string(run_end_at) + " of " +
              std::to_string(ev.size()) + ", not the last");
    }
    t.run_end = ev[run_end_at].value("args", json::object());
  }
  if (!t.run.is_null()) {
    if (!t.run.contains("ranks") || !detail::is_int(t.run["ranks"]) ||
        t.run["ranks"].get<int>() < 1) {
      problem("ranktime_run has no valid 'ranks': " + t.run.dump());
    } else {
      t.ranks = t.run["ranks"].get<int>();
      for (const char* key : {"hostnames", "pids", "clock_offsets_us", "clock_uncertainty_us"}) {
        if (!t.run.contains(key) || !t.run[key].is_array() ||
            static_cast<int>(t.run[key].size()) != t.ranks) {
          problem(std::string("ranktime_run '") + key + "' is not an array of " +
                  std::to_string(t.ranks) + " entries");
        }
      }
      for (const char* key :
           {"start_time_since_epoch_in_micros", "config", "mark_cycles", "all_ranks"}) {
        if (!t.run.contains(key)) problem(std::string("ranktime_run lacks '") + key + "'");
      }
    }
  }
  if (!t.run_end.is_null()) {
    for (const char* key : {"events_written", "events_dropped"}) {
      if (!t.run_end.contains(key) || !detail::is_int(t.run_end[key])) {
        problem(std::string("ranktime_run_end lacks integer '") + key + "'");
      }
    }
    for (const char* key : {"clock_offsets_us", "clock_uncertainty_us"}) {
      if (!t.run_end.contains(key) || !t.run_end[key].is_array() ||
          static_cast<int>(t.run_end[key].size()) != t.ranks) {
        problem(std::string("ranktime_run_end '") + key + "' is not an array of " +
                std::to_string(t.ranks) + " entries");
      }
    }
  }
  const int ranks = t.ranks;

  // One pass in file order, per (pid, tid).
  std::map<std::pair<int, int>, detail::ThreadState> threads;
  std::map<int, size_t> negotiations_per_pid;
  int64_t last_cycle = 0;
  for (size_t i = 0; i < ev.size(); ++i) {
    const json& e = ev[i];
    if (!e.is_object() || !e.contains("pid") || !detail::is_int(e["pid"]) || !e.contains("tid") ||
        !detail::is_int(e["tid"]) || !e.contains("ph") || !e["ph"].is_string() ||
        !e.contains("name") || !e["name"].is_string()) {
      continue;  // reported above
    }
    const int pid = e["pid"], tid = e["tid"];
    const std::string& ph = e["ph"].get_ref<const std::string&>();
    const std::string& name = e["name"].get_ref<const std::string&>();
    // Built only when a problem is reported: formatting it for every event would dominate.
    struct Where {
      size_t i;
      int pid, tid;
      const std::string &ph, &name;
      operator std::string() const {
        return "event " + std::to_string(i) + " (pid " + std::to_string(pid) + ", tid " +
               std::to_string(tid) + ", " + ph + " " + printable(name) + ")";
      }
      std::string operator+(const std::string& s) const { return std::string(*this) + s; }
      std::string operator+(const char* s) const { return std::string(*this) + s; }
    } where{i, pid, tid, ph, name};
    static const json kNoArgs = json::object();
    const auto args_it = e.find("args");
    const json& args = args_it != e.end() ? *args_it : kNoArgs;
    if (pid < 0 || tid < 0) {
      problem(where + ": negative pid/tid");
      continue;
    }
    if (ph == "M") {
      if (name == "process_name") {
        if (tid != 0 || !args.contains("name") || !args["name"].is_string()) {
          problem(where + ": malformed process_name");
        } else if (t.process_names.count(pid) && t.process_names[pid] != args["name"]) {
          problem(where + ": process renamed from " + printable(t.process_names[pid]));
        } else {
          t.process_names[pid] = args["name"];
        }
      } else if (name == "process_sort_index") {
        if (!args.contains("sort_index") || !detail::is_int(args["sort_index"])) {
          problem(where + ": malformed process_sort_index");
        } else if (args["sort_index"].get<int64_t>() != (pid == 0 ? -1 : pid - 1)) {
          problem(where + ": sort_index " + args["sort_index"].dump() + ", expected " +
                  std::to_string(pid == 0 ? -1 : pid - 1));
        }
      } else if (name == "thread_name") {
        if (!args.contains("name") || !args["name"].is_string()) {
          problem(where + ": malformed thread_name");
        } else {
          std::string expected = pid == 0   ? "cycles"
                                 : tid == 0 ? "negotiate"
                                            : "rank " + std::to_string(tid - 1);
          if (args["name"] != expected) {
            problem(where + ": thread named " + args["name"].dump() + ", expected \"" + expected +
                    "\"");
          }
          t.thread_names[{pid, tid}] = args["name"];
        }
      } else if (name != "thread_sort_index" && name != "ranktime_run" &&
                 name != "ranktime_run_end") {
        problem(where + ": unknown metadata event");
      }
      continue;
    }

    // Non-metadata: needs a numeric ts, time order within its thread, metadata seen before.
    if (!e.contains("ts") || !e["ts"].is_number()) {
      problem(where + ": no numeric ts");
      continue;
    }
    const double ts = e["ts"];
    auto& th = threads[{pid, tid}];
    if (th.has_ts && ts < th.last_ts) {
      problem(where + ": ts " + std::to_string(ts) +
              " goes back in time (previous event on this thread at " + std::to_string(th.last_ts) +
              ")");
    }
    th.last_ts = ts;
    th.has_ts = true;
    if (!t.threads_with_events.count({pid, tid})) {
      t.threads_with_events.insert({pid, tid});
      if (!t.process_names.count(pid))
        problem(where + ": first event of pid " + std::to_string(pid) + " before its process_name");
      if (!t.thread_names.count({pid, tid}))
        problem(where + ": first event of this thread before its thread_name");
    }
    if (run_at >= 0 && static_cast<int>(i) < run_at) problem(where + ": before ranktime_run");

    if (pid == 0) {
      if (tid != 0) problem(where + ": pid 0 uses only tid 0");
      if (ph == "i") {
        if (name == "CYCLE_START") {
          if (e.value("s", "") != "p") problem(where + ": CYCLE_START scope is not \"p\"");
          if (!args.contains("cycle") || !detail::is_int(args["cycle"])) {
            problem(where + ": CYCLE_START without an integer cycle arg");
          } else {
            const int64_t c = args["cycle"];
            if (c <= last_cycle)
              problem(where + ": cycle " + std::to_string(c) + " after cycle " +
                      std::to_string(last_cycle));
            last_cycle = c;
            t.cycles.emplace_back(ts, c);
          }
        } else {
          if (e.value("s", "") != "g") problem(where + ": global instant scope is not \"g\"");
          if (!args.contains("message") || !args["message"].is_string())
            problem(where + ": instant without a message");
          t.global_instants.push_back(e);
        }
      } else if (ph != "C") {
        problem(where + ": pid 0 carries only metadata, instants and counters");
      }
      continue;
    }

    // A tensor process.
    if (ranks > 0 && tid > ranks)
      problem(where + ": tid " + std::to_string(tid) + " but only " + std::to_string(ranks) +
              " ranks");
    if (tid == 0) {
      // The negotiate thread: NEGOTIATE_<OP> slices holding one zero-length tick per rank.
      if (ph == "B") {
        if (!th.stack.empty()) {
          problem(where + ": NEGOTIATE slice opened inside " + th.stack.back().name);
        }
        if (name.rfind("NEGOTIATE_", 0) != 0 || !op_names().count(name.substr(10))) {
          problem(where + ": not a NEGOTIATE_<OP> slice");
        }
        th.stack.push_back({name, ts, i});
        th.negotiation = Negotiation{};
        th.negotiation.pid = pid;
        th.negotiation.op = name.size() > 10 ? name.substr(10) : name;
        th.negotiation.begin = ts;
      } else if (ph == "X") {
        if (th.stack.empty()) {
          problem(where + ": tick outside any NEGOTIATE slice");
          continue;
        }
        if (!e.contains("dur") || !e["dur"].is_number() || e["dur"].get<double>() != 0)
          problem(where + ": tick with dur != 0");
        if (!args.contains("rank") || !detail::is_int(args["rank"]) || !args.contains("lag_us") ||
            !args["lag_us"].is_number()) {
          problem(where + ": tick without integer rank / numeric lag_us args");
          continue;
        }
        Tick tick{args["rank"].get<int>(), ts, args["lag_us"].get<double>()};
        if (name != std::to_string(tick.rank))
          problem(where + ": tick name differs from its rank arg " + std::to_string(tick.rank));
        if (tick.rank < 0 || tick.rank >= ranks)
          problem(where + ": tick rank " + std::to_string(tick.rank) + " out of range");
        if (tick.lag_us < 0) problem(where + ": negative lag_us");
        if (ts < th.stack.back().ts) problem(where + ": tick before its slice's B");
        if (th.negotiation.tick_of(tick.rank))
          problem(where + ": second tick of rank " + std::to_string(tick.rank) +
                  " in one negotiation");
        if (th.negotiation.ticks.empty() && tick.lag_us != 0)
          problem(where + ": the first tick's lag_us is not 0");
        th.negotiation.ticks.push_back(tick);
      } else if (ph == "E") {
        if (th.stack.empty()) {
          problem(where + ": E without a B");
          continue;
        }
        if (th.stack.back().name != name) problem(where + ": E closes " + th.stack.back().name);
        th.stack.pop_back();
        Negotiation& n = th.negotiation;
        n.end = ts;
        n.has_error = args.contains("error");
        if (!args.contains("last_rank") || !detail::is_int(args["last_rank"]) ||
            !args.contains("spread_us") || !args["spread_us"].is_number()) {
          problem(where + ": E without last_rank / spread_us");
        } else {
          n.last_rank = args["last_rank"];
          n.spread_us = args["spread_us"];
        }
        if (static_cast<int>(n.ticks.size()) != ranks) {
          std::string got;
          for (const Tick& k : n.ticks) got += (got.empty() ? "" : ",") + std::to_string(k.rank);
          problem(where + ": " + std::to_string(n.ticks.size()) + " ticks (ranks " + got +
                  "), expected one per rank (" + std::to_string(ranks) + ")");
        }
        double max_lag = 0;
        int max_rank = -1;
        for (const Tick& k : n.ticks) {
          if (k.ts > ts)
            problem(where + ": tick of rank " + std::to_string(k.rank) + " after the E");
          if (k.lag_us >= max_lag) {
            max_lag = k.lag_us;
            max_rank = k.rank;
          }
        }
        if (!n.ticks.empty() && n.last_rank >= 0) {
          if (n.ticks.back().rank != n.last_rank) {
            problem(where + ": last_rank " + std::to_string(n.last_rank) +
                    " but the last tick is rank " + std::to_string(n.ticks.back().rank));
          }
          if (std::fabs(n.spread_us - max_lag) > 0.002) {
            problem(where + ": spread_us " + std::to_string(n.spread_us) +
                    " differs from the largest lag " + std::to_string(max_lag) + " (rank " +
                    std::to_string(max_rank) + ")");
          }
        }
        n.index_for_pid = negotiations_per_pid[pid]++;
        t.negotiations.push_back(n);
      } else {
        problem(where + ": unexpected phase on a negotiate thread");
      }
      continue;
    }

    // A rank lane: operation slices holding sub-phases, strictly nested, at most two deep.
    if (ph == "B") {
      if (th.stack.empty()) {
        if (!op_names().count(name)) problem(where + ": top-level slice is not an operation");
        for (const char* key : {"dtype", "shape", "bytes", "fused_tensors"}) {
          if (!args.contains(key)) problem(where + ": operation slice lacks arg '" + key + "'");
        }
        if (args.contains("fused_tensors") &&
            (!detail::is_int(args["fused_tensors"]) || args["fused_tensors"].get<int64_t>() < 1)) {
          problem(where + ": fused_tensors is not a positive integer");
        }
        th.op = OpSlice{};
        th.op.pid = pid;
        th.op.rank = tid - 1;
        th.op.op = name;
        th.op.begin = ts;
        th.op.begin_args = args;
      } else if (th.stack.size() == 1) {
        if (!sub_phase_names().count(name)) problem(where + ": not a sub-phase name");
        th.op.phases.push_back(name);
      } else {
        problem(where + ": nested three deep (inside " + th.stack.back().name + ")");
      }
      th.stack.push_back({name, ts, i});
    } else if (ph == "E") {
      if (th.stack.empty()) {
        problem(where + ": E without a B");
        continue;
      }
      if (th.stack.back().name != name)
        problem(where + ": E closes " + th.stack.back().name + " (improper nesting)");
      if (ts < th.stack.back().ts) problem(where + ": ends before it begins");
      th.stack.pop_back();
      if (th.stack.empty()) {
        th.op.end = ts;
        th.op.end_args = args;
        t.ops.push_back(th.op);
      }
    } else {
      problem(where + ": unexpected phase on a rank lane");
    }
  }
  for (const auto& [key, th] : threads) {
    for (const detail::Open& o : th.stack) {
      problem("pid " + std::to_string(key.first) + " tid " + std::to_string(key.second) + ": " +
              o.name + " opened at event " + std::to_string(o.index) + " is never closed");
    }
  }
  return problems->size() == problems_before;
}

}  // namespace tltest
