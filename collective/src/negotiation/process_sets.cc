// The process-set table (see process_sets.h).
#include "negotiation/process_sets.h"

#include <algorithm>
#include <charconv>

#include "ranktime/timeline/process_set_label.h"

namespace ranktime {

bool ProcessSet::contains(int rank) const { return rank_of(rank) >= 0; }

int ProcessSet::rank_of(int rank) const {
  auto it = std::lower_bound(ranks.begin(), ranks.end(), rank);
  return it != ranks.end() && *it == rank ? static_cast<int>(it - ranks.begin()) : -1;
}

std::string process_set_text(const ProcessSet& set) {
  // The label's list without its brackets: " [process set 2: ranks 0,2]" -> "process set 2
  // (ranks 0,2)".
  std::string label = timeline::process_set_label(set.id, set.ranks);
  const size_t colon = label.find(": ");
  return label.substr(2, colon - 2) + " (" + label.substr(colon + 2, label.size() - colon - 3) +
         ")";
}

std::string ranks_argument(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? "," : "") + std::to_string(ranks[i]);
  return text;
}

bool parse_ranks_argument(const std::string& text, std::vector<int>* ranks, std::string* error) {
  ranks->clear();
  const char* p = text.data();
  const char* end = p + text.size();
  while (p < end) {
    int rank = 0;
    auto [next, ec] = std::from_chars(p, end, rank);
    if (ec != std::errc() || (next < end && *next != ',')) {
      *error = "'" + text + "' is not a list of ranks";
      return false;
    }
    ranks->push_back(rank);
    p = next < end ? next + 1 : end;
  }
  return true;
}

std::string check_set_ranks(const std::vector<int>& ranks, int size) {
  if (ranks.empty()) return "a process set needs at least one rank";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size) {
      return "rank " + std::to_string(ranks[i]) + " is not a rank of this job of " +
             std::to_string(size) + " ranks (0.." + std::to_string(size - 1) + ")";
    }
    if (i && ranks[i] == ranks[i - 1]) {
      return "rank " + std::to_string(ranks[i]) + " appears twice in the process set's ranks";
    }
  }
  return "";
}

std::string set_tensor_name(const std::string& name, const ProcessSet& set) {
  return name + timeline::process_set_label(set.id, set.ranks);
}

ProcessSets::ProcessSets(int size) {
  ProcessSet& all = sets_[kGlobalSet];
  for (int r = 0; r < size; ++r) all.ranks.push_back(r);
}

const ProcessSet* ProcessSets::find(int32_t id) const {
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : &it->second;
}

const ProcessSet* ProcessSets::with_ranks(const std::vector<int>& ranks) const {
  for (const auto& [id, set] : sets_) {
    if (set.ranks == ranks) return &set;
  }
  return nullptr;
}

std::vector<int32_t> ProcessSets::ids() const {
  std::vector<int32_t> out;
  for (const auto& [id, set] : sets_) out.push_back(id);
  return out;
}

void ProcessSets::add(int32_t id, std::vector<int> ranks) {
  sets_[id] = ProcessSet{id, std::move(ranks)};
  next_id_ = std::max(next_id_, id + 1);
}

bool ProcessSets::remove(int32_t id) { return id != kGlobalSet && sets_.erase(id) > 0; }

}  // namespace ranktime
