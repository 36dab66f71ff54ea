// The files of one run: glob patterns expanded, rotated pieces in rotation order.
#include <glob.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "ranktime/timeline/trace_reader.h"

namespace ranktime::timeline {

namespace {

// "t.3.json.gz" -> {"t.json.gz", 3}; "t.json" -> {"t.json", 0}: rotated pieces share the key.
std::pair<std::string, uint64_t> rotation_key(const std::string& path) {
  for (const std::string ext : {".json.gz", ".json"}) {
    if (path.size() <= ext.size() || path.compare(path.size() - ext.size(), ext.size(), ext) != 0) {
      continue;
    }
    const std::string stem = path.substr(0, path.size() - ext.size());
    const size_t dot = stem.rfind('.');
    if (dot == std::string::npos || dot + 1 == stem.size() || dot + 10 < stem.size()) break;
    if (!std::all_of(stem.begin() + static_cast<std::ptrdiff_t>(dot) + 1, stem.end(),
                     [](char c) { return c >= '0' && c <= '9'; })) {
      break;
    }
    return {stem.substr(0, dot) + ext, std::stoull(stem.substr(dot + 1))};
  }
  return {path, 0};
}

bool has_glob_characters(const std::string& s) {
  return s.find_first_of("*?[") != std::string::npos;
}

}  // namespace

std::vector<std::string> trace_file_set(const std::vector<std::string>& args, std::string* error) {
  std::vector<std::string> paths;
  for (const std::string& arg : args) {
    std::ifstream probe(arg);
    if (probe || !has_glob_characters(arg)) {
      paths.push_back(arg);  // a missing plain path is reported when it is read
      continue;
    }
    glob_t matches{};
    const int rc = ::glob(arg.c_str(), 0, nullptr, &matches);
    if (rc != 0) {
      globfree(&matches);
      if (error) *error = "no file matches " + arg;
      return {};
    }
    for (size_t i = 0; i < matches.gl_pathc; ++i) paths.emplace_back(matches.gl_pathv[i]);
    globfree(&matches);
  }
  // Rotation order within each set; sets keep the order they were first named in.
  std::vector<std::string> sets;
  for (const std::string& p : paths) {
    const std::string key = rotation_key(p).first;
    if (std::find(sets.begin(), sets.end(), key) == sets.end()) sets.push_back(key);
  }
  std::stable_sort(paths.begin(), paths.end(), [&](const std::string& a, const std::string& b) {
    auto ka = rotation_key(a), kb = rotation_key(b);
    auto sa = std::find(sets.begin(), sets.end(), ka.first) - sets.begin();
    auto sb = std::find(sets.begin(), sets.end(), kb.first) - sets.begin();
    return sa != sb ? sa < sb : ka.second < kb.second;
  });
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  return paths;
}

}  // namespace ranktime::timeline
