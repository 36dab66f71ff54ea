// Helpers for tests that edit traces as text: one event per line, as the writer produces them.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "synthetic_trace.h"

namespace ranktime::testing {

// The events of a trace written one per line ("[", "{...},", ..., "{...}", "]").
inline std::vector<std::string> event_lines(const std::string& text) {
  std::vector<std::string> events;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line == "[" || line == "]") continue;
    if (line.back() == ',') line.pop_back();
    events.push_back(line);
  }
  return events;
}

// The inverse: a complete array, one event per line.
inline std::string join_events(const std::vector<std::string>& events) {
  std::string out = "[\n";
  for (size_t i = 0; i < events.size(); ++i)
    out += events[i] + (i + 1 < events.size() ? ",\n" : "\n");
  return out + "]\n";
}

inline std::string synthetic_text(const SyntheticTrace& t) {
  std::ostringstream out;
  write_synthetic_trace(out, t);
  return out.str();
}

// Index of the first event line containing all of `parts`; -1 when none.
inline int find_event(const std::vector<std::string>& events,
                      std::initializer_list<const char*> parts, size_t from = 0) {
  for (size_t i = from; i < events.size(); ++i) {
    bool all = true;
    for (const char* p : parts) all = all && events[i].find(p) != std::string::npos;
    if (all) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace ranktime::testing
