// How a trace's slices nest, seen two ways: as the format defines it (on a tensor's rank lane a
// sub-phase belongs to the operation slice before it, on a negotiate thread a tick to the
// NEGOTIATE slice before it), and as Perfetto's JSON importer builds it, which the writer cannot
// tell where a child belongs: it sorts events by timestamp, at equal timestamps complete events
// longest first and then in file order (trace_sorter.h, SlowOperatorLess), and takes a slice's
// end as outside it (slice_tracker.cc, MaybeCloseStack). The tests check that the two agree.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ranktime::timeline::test {

struct Nesting {
  std::vector<int> parent;            // by event index: the parent slice's index, -1 for none
  std::vector<std::string> problems;  // overlaps that Perfetto would move to an overflow track
};

inline bool is_slice_event(const nlohmann::json& e) {
  const std::string& ph = e.at("ph").get_ref<const std::string&>();
  return ph == "X" || (ph == "i" && e.value("s", "t") == "t");
}

inline bool is_tick_name(const std::string& name) {
  return !name.empty() &&
         std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

inline bool is_operation_slice_name(const std::string& name) {
  return name == "ALLREDUCE" || name == "ALLGATHER" || name == "BROADCAST" || name == "BARRIER";
}

// The format's parents: file order and names decide.
inline Nesting format_nesting(const nlohmann::json& events) {
  Nesting n;
  n.parent.assign(events.size(), -1);
  std::map<std::pair<int64_t, int64_t>, int> last_top;  // per thread: its last top-level slice
  for (size_t i = 0; i < events.size(); ++i) {
    const nlohmann::json& e = events[i];
    if (!is_slice_event(e)) continue;
    const std::pair<int64_t, int64_t> thread{e.at("pid"), e.at("tid")};
    const std::string& name = e.at("name").get_ref<const std::string&>();
    const bool top = thread.first == 0 || (thread.second == 0 ? name.rfind("NEGOTIATE_", 0) == 0
                                                              : is_operation_slice_name(name));
    if (top) {
      last_top[thread] = static_cast<int>(i);
    } else if (last_top.count(thread) != 0) {
      n.parent[i] = last_top[thread];
    }
  }
  return n;
}

// Perfetto's parents.
inline Nesting perfetto_nesting(const nlohmann::json& events) {
  Nesting n;
  n.parent.assign(events.size(), -1);
  struct Item {
    int64_t ts, key;
    size_t index;
  };
  auto to_ns = [](const nlohmann::json& v) { return std::llround(v.get<double>() * 1000.0); };
  std::vector<Item> items;
  for (size_t i = 0; i < events.size(); ++i) {
    const nlohmann::json& e = events[i];
    if (!is_slice_event(e)) continue;
    const int64_t dur = e.at("ph") == "X" ? to_ns(e.at("dur")) : 0;
    const int64_t key = e.at("ph") == "X" ? std::numeric_limits<int64_t>::max() - dur
                                          : std::numeric_limits<int64_t>::max();
    items.push_back({to_ns(e.at("ts")), key, i});
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return std::tie(a.ts, a.key, a.index) < std::tie(b.ts, b.key, b.index);
  });
  struct Open {
    size_t index;
    int64_t ts, dur;
  };
  std::map<std::pair<int64_t, int64_t>, std::vector<Open>> stacks;
  for (const Item& item : items) {
    const nlohmann::json& e = events[item.index];
    const int64_t dur = e.at("ph") == "X" ? to_ns(e.at("dur")) : 0;
    std::vector<Open>& stack = stacks[{e.at("pid"), e.at("tid")}];
    while (!stack.empty()) {
      const Open& top = stack.back();
      const int64_t end = top.ts + top.dur;
      if (end < item.ts || (end == item.ts && !(top.dur == 0 && dur == 0))) {
        stack.pop_back();
        continue;
      }
      if (item.ts + dur > end) {
        n.problems.push_back("event " + std::to_string(item.index) + " " + e.dump() +
                             " overlaps event " + std::to_string(top.index) + " " +
                             events[top.index].dump());
      }
      break;
    }
    if (!stack.empty()) n.parent[item.index] = static_cast<int>(stack.back().index);
    stack.push_back({item.index, item.ts, dur});
  }
  return n;
}

// Where the two disagree, as readable lines; zero-length sub-phases are left out (Perfetto may
// draw one inside a neighbour that starts where it is: docs/timeline-format.md), and ticks at the
// same time may stack on each other.
inline std::vector<std::string> nesting_differences(const nlohmann::json& events) {
  const Nesting format = format_nesting(events);
  const Nesting perfetto = perfetto_nesting(events);
  std::vector<std::string> out = perfetto.problems;
  for (size_t i = 0; i < events.size(); ++i) {
    const nlohmann::json& e = events[i];
    if (!is_slice_event(e) || format.parent[i] == perfetto.parent[i]) continue;
    const bool zero_subphase = e.at("ph") == "X" && e.at("dur").get<double>() == 0 &&
                               !is_tick_name(e.at("name")) && e.at("tid") != 0;
    if (zero_subphase) continue;
    // Ticks at the same time stack on each other in Perfetto, all inside their negotiation.
    const int shown = perfetto.parent[i];
    if (e.at("tid") == 0 && is_tick_name(e.at("name")) && shown >= 0 &&
        is_tick_name(events[shown].at("name")) && events[shown].at("ts") == e.at("ts") &&
        format.parent[shown] == format.parent[i]) {
      continue;
    }
    out.push_back("event " + std::to_string(i) + " " + e.dump() + ": parent " +
                  std::to_string(format.parent[i]) + " in the file, " +
                  std::to_string(perfetto.parent[i]) + " in Perfetto");
  }
  return out;
}

}  // namespace ranktime::timeline::test
