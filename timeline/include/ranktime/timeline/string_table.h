// Interned strings (tensor names, messages) shared by timeline producers and the writer.
// Ids are dense and assigned in first-seen order; id 0 is the empty string ("none").
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace ranktime::timeline {

class StringTable {
 public:
  StringTable();
  // Returns the id of `s`, adding it on first sight. Allocates only the first time.
  uint32_t intern(std::string_view s);
  // The string with id `id`; the reference stays valid for the table's lifetime.
  const std::string& lookup(uint32_t id) const;
  uint32_t size() const;

 private:
  mutable std::mutex mutex_;
  std::deque<std::string> strings_;  // deque: references stay valid as it grows
  std::unordered_map<std::string_view, uint32_t> ids_;
};

}  // namespace ranktime::timeline
