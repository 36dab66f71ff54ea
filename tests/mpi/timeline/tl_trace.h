// Test-side reader and validator of a ranktime timeline file (docs/timeline-format.md), written
// independently of timeline/ so that the multi-rank tests do not trust the code they test.
// Parses with nlohmann_json (a .gz file through zlib); never greps the text.
//
// load_trace() checks everything the format guarantees for any run (a complete array, the run
// metadata instant first and the run-end instant last, only the metadata names both viewers know,
// per-thread time order, ticks and sub-phases right after the slice they belong to and inside it,
// one tick per rank in every negotiation, each lane's first operation slice with its args, each
// fused batch's sub-phases somewhere in the file, arrows with both ends, process and thread
// metadata before use) and returns what it found, with what the format leaves implicit filled in
// (a tick's lag, an operation slice's args and its batch's sub-phases), for scenario checks.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tltest {

using json = nlohmann::json;

// Rank R's own process (its regions) is pid 1e9 + R (docs/timeline-format.md).
constexpr int kRankProcessPidBase = 1'000'000'000;

struct Tick {
  int rank = -1;
  double ts = 0;
  double lag_us = 0;  // args.lag_us where given, else ts minus its slice's begin
};

// One NEGOTIATE_<OP> slice on a tensor's negotiate thread, with the ticks after it.
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
  // dtype, shape, bytes (the lane's latest where the slice repeats none), fused_tensors (1 where
  // absent), and error where given.
  json begin_args;
  json end_args;                    // {"error": ...} where the operation failed, else {}
  std::vector<std::string> phases;  // sub-phase names in order (a fused batch's, from its slice
                                    // that carries them)
  bool shares_phases = false;       // a fused batch's tensor whose sub-phases are elsewhere
};

// A flow arrow: from a negotiation's last tick to rank 0's operation slice of the tensor.
struct Flow {
  int pid = 0;
  double from = 0, to = 0;
};

// A STEP slice of `rank`.
struct Step {
  int rank = -1;
  int64_t step = -1;
  double begin = 0, end = 0;
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
  std::vector<Flow> flows;
  std::vector<Step> steps;                         // file order
  std::vector<std::pair<double, int64_t>> cycles;  // CYCLE_START (ts, cycle)
  std::vector<json> global_instants;               // other instants on pid 0
  std::vector<json> regions;  // slices of the ranks' regions threads (their own processes)

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

// The text of a file, decompressed when it is gzip (gzread passes plain text through);
// `complete` says whether a gzip stream ended properly.
inline bool read_text(const std::string& path, std::string* text, bool* complete) {
  gzFile in = gzopen(path.c_str(), "rb");
  if (in == nullptr) return false;
  char buffer[1 << 16];
  int n = 0;
  while ((n = gzread(in, buffer, sizeof(buffer))) > 0) text->append(buffer, static_cast<size_t>(n));
  int error = Z_OK;
  gzerror(in, &error);
  *complete = n == 0 && error == Z_OK;
  gzclose(in);
  return true;
}

namespace detail {

struct ThreadState {
  double last_ts = -1e300;
  bool has_ts = false;
  // tid 0 of a tensor: the negotiation being built (open while its ticks may follow).
  bool negotiation_open = false;
  Negotiation negotiation;
  // lanes: the operation slice being built, its last sub-phase's end, the lane's latest args.
  bool op_open = false;
  OpSlice op;
  double phase_end = 0;
  json lane_args;  // dtype, shape, bytes
};

inline bool is_int(const json& v) { return v.is_number_integer() || v.is_number_unsigned(); }

inline bool is_tick_name(const std::string& name) {
  return !name.empty() && name.size() < 10 &&
         std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Timestamps have three decimals: one unit of the last for rounding.
constexpr double kEpsilon = 0.0011;

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
  std::string text;
  bool stream_complete = false;
  if (!read_text(path, &text, &stream_complete)) {
    problems->push_back("cannot open " + path);
    return false;
  }
  if (!stream_complete) problem(path + " is a gzip stream cut short");
  Trace& t = *out;
  t = Trace{};
  try {
    t.events = json::parse(text);
  } catch (const std::exception& e) {
    problems->push_back(path + " is not valid JSON (" + std::to_string(text.size()) +
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
  auto is_run_instant = [](const json& e, const char* which) {
    return e.value("ph", "") == "i" && e.value("pid", -1) == 0 && e.value("tid", -1) == 0 &&
           e.value("name", "") == which;
  };

  // Run metadata: the ranktime_run instant before any event but pid 0's metadata, the
  // ranktime_run_end instant exactly once, last.
  int run_at = -1, run_end_at = -1;
  for (size_t i = 0; i < ev.size(); ++i) {
    const json& e = ev[i];
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("ph") ||
        !e["ph"].is_string() || !e.contains("pid") || !detail::is_int(e["pid"]) ||
        !e.contains("tid") || !detail::is_int(e["tid"])) {
      problem("event " + std::to_string(i) + " lacks name/ph/pid/tid: " + e.dump());
      continue;
    }
    if (is_run_instant(e, "ranktime_run")) {
      if (run_at >= 0)
        problem("ranktime_run appears twice (events " + std::to_string(run_at) + ", " +
                std::to_string(i) + ")");
      run_at = static_cast<int>(i);
    }
    if (is_run_instant(e, "ranktime_run_end")) {
      if (run_end_at >= 0) problem("ranktime_run_end appears twice");
      run_end_at = static_cast<int>(i);
    }
  }
  if (run_at < 0) {
    problem("no ranktime_run instant");
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
    problem("no ranktime_run_end instant: the file is not complete");
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
      for (const char* key : {"start_time_since_epoch_in_micros", "config", "mark_cycles",
                              "all_ranks", "file_index"}) {
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
    if (detail::is_int(t.run_end.value("events_written", json())) &&
        t.run_end["events_written"].get<uint64_t>() != ev.size()) {
      problem("ranktime_run_end says events_written " + t.run_end["events_written"].dump() +
              ", the file has " + std::to_string(ev.size()));
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
  std::map<int, std::pair<int64_t, int64_t>> step_of_tid;  // pid 0 tid -> (rank, last step)
  struct FlowEnd {
    int pid, tid;
    double ts;
    size_t index;
  };
  std::map<int64_t, std::vector<FlowEnd>> flow_starts, flow_ends;
  int64_t last_cycle = 0;

  auto finish_negotiation = [&](detail::ThreadState& th, const std::string& where) {
    if (!th.negotiation_open) return;
    th.negotiation_open = false;
    Negotiation& n = th.negotiation;
    if (static_cast<int>(n.ticks.size()) != ranks) {
      std::string got;
      for (const Tick& k : n.ticks) got += (got.empty() ? "" : ",") + std::to_string(k.rank);
      problem(where + ": " + std::to_string(n.ticks.size()) + " ticks (ranks " + got +
              "), expected one per rank (" + std::to_string(ranks) + ")");
    }
    double max_lag = 0;
    int max_rank = -1;
    for (const Tick& k : n.ticks) {
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
    n.index_for_pid = negotiations_per_pid[n.pid]++;
    t.negotiations.push_back(n);
  };
  auto finish_op = [&](detail::ThreadState& th) {
    if (!th.op_open) return;
    th.op_open = false;
    t.ops.push_back(th.op);
  };

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
    if (pid >= kRankProcessPidBase) {  // a rank's own process: its regions (user-named)
      if (ph == "X") t.regions.push_back(e);
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
          std::string expected =
              pid == 0   ? (tid == 0 ? "cycles" : "steps rank " + std::to_string(tid - 1))
              : tid == 0 ? "negotiate"
                         : "rank " + std::to_string(tid - 1);
          if (args["name"] != expected) {
            problem(where + ": thread named " + args["name"].dump() + ", expected \"" + expected +
                    "\"");
          }
          t.thread_names[{pid, tid}] = args["name"];
        }
      } else if (name == "thread_sort_index") {
        if (!args.contains("sort_index") || args["sort_index"] != tid)
          problem(where + ": thread_sort_index is not the tid");
      } else {
        // Chrome's trace viewer warns about any other name.
        problem(where + ": unknown metadata event (only the names both viewers know)");
      }
      continue;
    }

    // Non-metadata: needs a numeric ts and metadata seen before.
    if (!e.contains("ts") || !e["ts"].is_number()) {
      problem(where + ": no numeric ts");
      continue;
    }
    const double ts = e["ts"];
    if (run_at >= 0 && static_cast<int>(i) < run_at) problem(where + ": before ranktime_run");
    if (static_cast<int>(i) == run_at || static_cast<int>(i) == run_end_at) continue;
    if (!t.process_names.count(pid))
      problem(where + ": event of pid " + std::to_string(pid) + " before its process_name");

    if (ph == "s" || ph == "f") {
      // Flow arrows: outside their threads' time order; checked once all is read.
      if (!e.contains("id") || !detail::is_int(e["id"])) {
        problem(where + ": flow event without an integer id");
        continue;
      }
      if (ph == "f" && e.value("bp", "") != "e")
        problem(where + ": flow end not bound to its enclosing slice (\"bp\":\"e\")");
      (ph == "s" ? flow_starts : flow_ends)[e["id"].get<int64_t>()].push_back({pid, tid, ts, i});
      continue;
    }

    // Slices and instants: time order within their thread, the thread named first.
    auto& th = threads[{pid, tid}];
    if (th.has_ts && ts + detail::kEpsilon < th.last_ts) {
      problem(where + ": ts " + std::to_string(ts) +
              " goes back in time (previous event on this thread at " + std::to_string(th.last_ts) +
              ")");
    }
    th.last_ts = std::max(th.last_ts, ts);
    th.has_ts = true;
    if (!t.threads_with_events.count({pid, tid})) {
      t.threads_with_events.insert({pid, tid});
      if (!t.thread_names.count({pid, tid}))
        problem(where + ": first event of this thread before its thread_name");
    }
    const bool complete = ph == "X";
    double dur = 0;
    if (complete) {
      if (!e.contains("dur") || !e["dur"].is_number() || e["dur"].get<double>() < 0) {
        problem(where + ": complete event without a dur >= 0");
        continue;
      }
      dur = e["dur"];
    }

    if (pid == 0) {
      if (tid == 0 && ph == "i") {
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
      } else if (tid == 0 && ph == "C") {
        // counters: any series
      } else if (tid > 0 && complete && name == "STEP") {
        if (!args.contains("step") || !detail::is_int(args["step"])) {
          problem(where + ": STEP without an integer step arg");
          continue;
        }
        auto& [rank, last] = step_of_tid.try_emplace(tid, tid - 1, -1).first->second;
        const int64_t step = args["step"];
        if (step <= last)
          problem(where + ": step " + std::to_string(step) + " after step " + std::to_string(last));
        last = step;
        if (ranks > 0 && rank >= ranks) problem(where + ": steps of a rank the run does not have");
        t.steps.push_back({static_cast<int>(rank), step, ts, ts + dur});
      } else {
        problem(where + ": pid 0 carries only instants and counters (tid 0) and STEP slices");
      }
      continue;
    }

    // A tensor process.
    if (ranks > 0 && tid > ranks)
      problem(where + ": tid " + std::to_string(tid) + " but only " + std::to_string(ranks) +
              " ranks");
    if (!complete) {
      problem(where + ": a tensor's threads hold complete ('X') events only");
      continue;
    }
    if (tid == 0) {
      // The negotiate thread: each NEGOTIATE_<OP> slice followed by one zero-length tick per rank.
      if (!detail::is_tick_name(name)) {
        finish_negotiation(th, where);
        if (name.rfind("NEGOTIATE_", 0) != 0 || !op_names().count(name.substr(10))) {
          problem(where + ": not a NEGOTIATE_<OP> slice");
        }
        Negotiation& n = th.negotiation;
        n = Negotiation{};
        n.pid = pid;
        n.op = name.size() > 10 ? name.substr(10) : name;
        n.begin = ts;
        n.end = ts + dur;
        n.has_error = args.contains("error");
        if (!args.contains("last_rank") || !detail::is_int(args["last_rank"]) ||
            !args.contains("spread_us") || !args["spread_us"].is_number()) {
          problem(where + ": NEGOTIATE slice without last_rank / spread_us");
        } else {
          n.last_rank = args["last_rank"];
          n.spread_us = args["spread_us"];
        }
        th.negotiation_open = true;
        continue;
      }
      if (!th.negotiation_open) {
        problem(where + ": tick outside any NEGOTIATE slice");
        continue;
      }
      Negotiation& n = th.negotiation;
      if (dur != 0) problem(where + ": tick with dur != 0");
      Tick tick{std::stoi(name), ts, ts - n.begin};
      if (args.contains("lag_us")) {
        if (!args["lag_us"].is_number()) {
          problem(where + ": lag_us is not a number");
        } else {
          tick.lag_us = args["lag_us"];
        }
      }
      if (tick.rank < 0 || tick.rank >= ranks)
        problem(where + ": tick rank " + std::to_string(tick.rank) + " out of range");
      if (tick.lag_us < -detail::kEpsilon) problem(where + ": negative lag");
      // Inside the slice: from its begin to before its end (Perfetto draws the end as outside).
      if (ts + detail::kEpsilon < n.begin || (n.end > n.begin && ts >= n.end))
        problem(where + ": tick outside its NEGOTIATE slice [" + std::to_string(n.begin) + ", " +
                std::to_string(n.end) + ")");
      if (n.tick_of(tick.rank))
        problem(where + ": second tick of rank " + std::to_string(tick.rank) +
                " in one negotiation");
      if (n.ticks.empty() && std::fabs(tick.lag_us) > detail::kEpsilon)
        problem(where + ": the first tick's lag is not 0");
      n.ticks.push_back(tick);
      continue;
    }

    // A rank lane: operation slices, each followed by its sub-phases, inside it, not overlapping.
    if (op_names().count(name)) {
      finish_op(th);
      OpSlice& o = th.op;
      o = OpSlice{};
      o.pid = pid;
      o.rank = tid - 1;
      o.op = name;
      o.begin = ts;
      o.end = ts + dur;
      const int shape_keys =
          args.contains("dtype") + args.contains("shape") + args.contains("bytes");
      if (shape_keys == 3) {
        th.lane_args = {
            {"dtype", args["dtype"]}, {"shape", args["shape"]}, {"bytes", args["bytes"]}};
        if (args.contains("shape_truncated"))
          th.lane_args["shape_truncated"] = args["shape_truncated"];
      } else if (shape_keys != 0) {
        problem(where + ": dtype, shape and bytes come together");
      }
      if (th.lane_args.is_null())
        problem(where + ": the lane's first operation slice has no dtype/shape/bytes");
      o.begin_args = th.lane_args.is_null() ? json::object() : th.lane_args;
      o.begin_args["fused_tensors"] = args.value("fused_tensors", json(1));
      if (!detail::is_int(o.begin_args["fused_tensors"]) ||
          o.begin_args["fused_tensors"].get<int64_t>() < 1) {
        problem(where + ": fused_tensors is not a positive integer");
      }
      o.end_args = json::object();
      if (args.contains("error")) {
        o.begin_args["error"] = args["error"];
        o.end_args["error"] = args["error"];
      }
      th.op_open = true;
      th.phase_end = ts;
    } else if (sub_phase_names().count(name)) {
      if (!th.op_open) {
        problem(where + ": sub-phase outside an operation slice");
        continue;
      }
      OpSlice& o = th.op;
      if (ts + detail::kEpsilon < o.begin || ts + dur > o.end + detail::kEpsilon)
        problem(where + ": sub-phase not inside its " + o.op + " slice [" +
                std::to_string(o.begin) + ", " + std::to_string(o.end) + "] (improper nesting)");
      if (ts + detail::kEpsilon < th.phase_end)
        problem(where + ": sub-phase overlaps the one before it");
      th.phase_end = ts + dur;
      o.phases.push_back(name);
    } else {
      problem(where + ": neither an operation slice nor a sub-phase");
    }
  }
  for (auto& [key, th] : threads) {
    finish_negotiation(th, "pid " + std::to_string(key.first) + "'s last negotiation");
    finish_op(th);
  }

  // A fused batch's sub-phases are written once per file and lane: with the first of its tensors
  // written there. Every other tensor of the batch shares them (same lane, begin and end).
  std::map<std::tuple<int, int64_t, int64_t>, const OpSlice*> with_phases;
  auto key_of = [](const OpSlice& o) {
    return std::make_tuple(o.rank, std::llround(o.begin * 1000), std::llround(o.end * 1000));
  };
  for (const OpSlice& o : t.ops) {
    if (!o.phases.empty()) with_phases.emplace(key_of(o), &o);
  }
  for (OpSlice& o : t.ops) {
    if (!o.phases.empty()) continue;
    auto it = with_phases.find(key_of(o));
    if (o.begin_args.value("fused_tensors", 1) > 1 && it != with_phases.end()) {
      o.phases = it->second->phases;
      o.shares_phases = true;
    } else {
      problem("pid " + std::to_string(o.pid) + " rank " + std::to_string(o.rank) + ": " + o.op +
              " slice at " + std::to_string(o.begin) +
              " has no sub-phases, and no fused batch in the file has them for it");
    }
  }

  // Arrows: each id one start, on a negotiation's last tick, and one end, at the start of rank
  // 0's operation slice of the same tensor, not before the start.
  std::set<std::pair<int, int64_t>> last_ticks, rank0_slices;
  for (const Negotiation& n : t.negotiations) {
    if (!n.ticks.empty()) last_ticks.emplace(n.pid, std::llround(n.ticks.back().ts * 1000));
  }
  for (const OpSlice& o : t.ops) {
    if (o.rank == 0) rank0_slices.emplace(o.pid, std::llround(o.begin * 1000));
  }
  for (const auto& [id, starts] : flow_starts) {
    const auto ends = flow_ends.find(id);
    if (starts.size() != 1 || ends == flow_ends.end() || ends->second.size() != 1) {
      problem("arrow id " + std::to_string(id) + " has " + std::to_string(starts.size()) +
              " starts and " + std::to_string(ends == flow_ends.end() ? 0 : ends->second.size()) +
              " ends");
      continue;
    }
    const FlowEnd &from = starts[0], &to = ends->second[0];
    if (from.pid != to.pid || from.tid != 0 || to.tid != 1)
      problem("arrow id " + std::to_string(id) +
              " is not from a negotiate thread to rank 0's lane of the same tensor");
    if (!last_ticks.count({from.pid, std::llround(from.ts * 1000)}))
      problem("arrow id " + std::to_string(id) + " does not start on a negotiation's last tick");
    if (!rank0_slices.count({to.pid, std::llround(to.ts * 1000)}))
      problem("arrow id " + std::to_string(id) +
              " does not end at the start of rank 0's operation slice");
    if (to.ts + detail::kEpsilon < from.ts)
      problem("arrow id " + std::to_string(id) + " points back in time");
    t.flows.push_back({from.pid, from.ts, to.ts});
  }
  for (const auto& [id, ends] : flow_ends) {
    if (!flow_starts.count(id)) problem("arrow id " + std::to_string(id) + " has no start");
  }
  return problems->size() == problems_before;
}

}  // namespace tltest
