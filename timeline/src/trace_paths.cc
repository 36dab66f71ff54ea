// A run's file names (see trace_paths.h).
#include "ranktime/timeline/trace_paths.h"

namespace ranktime::timeline {

std::string tagged_path(const std::string& path, std::string_view tag) {
  const std::string dot_tag = "." + std::string(tag);
  for (std::string_view suffix : {".json.gz", ".json", ".gz"}) {
    if (path.size() > suffix.size() &&
        path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0 &&
        path[path.size() - suffix.size() - 1] != '/') {
      return path.substr(0, path.size() - suffix.size()) + dot_tag + std::string(suffix);
    }
  }
  return path + dot_tag;
}

std::string rotated_path(const std::string& path, uint64_t index) {
  return index == 0 ? path : tagged_path(path, std::to_string(index));
}

}  // namespace ranktime::timeline
