// Regions on their way to rank 0's trace (see region_log.h).
#include "recording/region_log.h"

namespace ranktime {

void RegionLog::add(const RegionEntry& entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (size_ == ring_.size()) {
    head_ = (head_ + 1) % ring_.size();  // the oldest goes
    --size_;
    ++dropped_;
  }
  ring_[(head_ + size_) % ring_.size()] = entry;
  ++size_;
}

void RegionLog::take(std::vector<RegionEntry>* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < size_; ++i) out->push_back(ring_[(head_ + i) % ring_.size()]);
  head_ = 0;
  size_ = 0;
}

uint64_t RegionLog::dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

std::vector<std::string> RegionNames::take_new() {
  std::vector<std::string> names;
  const uint32_t size = table_.size();
  for (; shipped_ < size; ++shipped_) names.push_back(table_.lookup(shipped_));
  return names;
}

void RegionNameMap::learn(int rank, const std::vector<std::string>& names,
                          timeline::StringTable* strings) {
  if (rank < 0 || names.empty()) return;
  if (ids_.size() <= static_cast<size_t>(rank)) ids_.resize(static_cast<size_t>(rank) + 1);
  std::vector<uint32_t>& ids = ids_[static_cast<size_t>(rank)];
  if (ids.empty()) ids.push_back(0);  // id 0 is "" on every rank
  for (const std::string& name : names) ids.push_back(strings->intern(name));
}

uint32_t RegionNameMap::to_trace(int rank, uint32_t id) const {
  if (rank < 0 || static_cast<size_t>(rank) >= ids_.size()) return 0;
  const std::vector<uint32_t>& ids = ids_[static_cast<size_t>(rank)];
  return id < ids.size() ? ids[id] : 0;
}

}  // namespace ranktime
