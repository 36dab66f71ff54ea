// StringTable: interned names shared by the timeline's producers and its writer.
#include "ranktime/timeline/string_table.h"

namespace ranktime::timeline {

StringTable::StringTable() {
  strings_.emplace_back();
  ids_.emplace(strings_.back(), 0);
}

uint32_t StringTable::intern(std::string_view s) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = ids_.find(s);
  if (it != ids_.end()) return it->second;
  const auto id = static_cast<uint32_t>(strings_.size());
  strings_.emplace_back(s);
  // The key views the deque's copy, which never moves.
  ids_.emplace(strings_.back(), id);
  return id;
}

const std::string& StringTable::lookup(uint32_t id) const {
  static const std::string kUnknown;
  std::lock_guard<std::mutex> lock(mutex_);
  // Ids travel between ranks; an id this table never gave out reads as "none".
  return id < strings_.size() ? strings_[id] : kUnknown;
}

uint32_t StringTable::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<uint32_t>(strings_.size());
}

}  // namespace ranktime::timeline
