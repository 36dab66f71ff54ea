// Regions on their way to rank 0's trace: the bounded log that user threads fill and the
// background thread drains, and the names, which each rank interns and ships once.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ranktime/timeline/string_table.h"

namespace ranktime {

// One ended region, compact and on the recording rank's clock.
struct RegionEntry {
  uint32_t name = 0;  // id in the rank's RegionNames
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  int64_t blocked_ns = 0;  // blocked inside ranktime during it
};

// Regions ended on any thread, until the background thread takes them. Bounded: a full log drops
// its oldest entry (and counts it), so ending a region never waits for shipping or allocates.
class RegionLog {
 public:
  // 4096 regions: about a second of regions at 4 kHz, far more than a training loop makes
  // between two background loop iterations (at most RANKTIME_CYCLE_TIME_MS apart).
  static constexpr size_t kDefaultCapacity = 4096;
  explicit RegionLog(size_t capacity = kDefaultCapacity) : ring_(capacity > 0 ? capacity : 1) {}

  void add(const RegionEntry& entry);
  // Appends the entries to *out, oldest first, and empties the log.
  void take(std::vector<RegionEntry>* out);
  uint64_t dropped() const;

 private:
  mutable std::mutex mutex_;
  std::vector<RegionEntry> ring_;
  size_t head_ = 0;  // the oldest entry
  size_t size_ = 0;
  uint64_t dropped_ = 0;
};

// A rank's region names: interned by any thread, shipped to rank 0 once each (in id order, with
// or before the first records that use them).
class RegionNames {
 public:
  uint32_t intern(std::string_view name) { return table_.intern(name); }
  // Background thread: the names interned since the last call, in id order.
  std::vector<std::string> take_new();

 private:
  timeline::StringTable table_;  // id 0 is "" (never a region's name)
  uint32_t shipped_ = 1;
};

// Rank 0: each rank's region name ids, mapped to the ids of rank 0's string table (the trace's).
class RegionNameMap {
 public:
  // Rank `rank` names its next ids (those after the ones it named before) `names`.
  void learn(int rank, const std::vector<std::string>& names, timeline::StringTable* strings);
  // The trace's id of rank `rank`'s name `id`; 0 ("") for an id never named (corrupt input).
  uint32_t to_trace(int rank, uint32_t id) const;

 private:
  std::vector<std::vector<uint32_t>> ids_;  // by rank, by the rank's id
};

}  // namespace ranktime
