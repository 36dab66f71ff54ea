// Process-set labels in tensor names (see process_set_label.h).
#include "ranktime/timeline/process_set_label.h"

#include <charconv>

namespace ranktime::timeline {
namespace {

constexpr std::string_view kOpen = " [process set ";
constexpr std::string_view kRanks = ": ranks ";
// A label naming more ranks than this is not believed (a reader never sizes anything by input).
constexpr int64_t kMostRanks = int64_t{1} << 20;

bool read_number(std::string_view* text, int64_t* out) {
  const char* end = text->data() + text->size();
  auto [p, ec] = std::from_chars(text->data(), end, *out);
  if (ec != std::errc() || p == text->data() || *out < 0 || *out >= kMostRanks) return false;
  text->remove_prefix(static_cast<size_t>(p - text->data()));
  return true;
}

}  // namespace

std::string process_set_label(int64_t id, const std::vector<int>& ranks) {
  std::string text(kOpen);
  text += std::to_string(id);
  text += kRanks;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i) text += ',';
    text += std::to_string(ranks[i]);
    if (j >= i + 2) {
      text += '-';
      text += std::to_string(ranks[j]);
      i = j + 1;
    } else {
      ++i;
    }
  }
  return text + "]";
}

std::vector<int> process_set_ranks_in(std::string_view name) {
  const size_t open = name.rfind(kOpen);
  if (open == std::string_view::npos || name.back() != ']') return {};
  std::string_view text = name.substr(open + kOpen.size());
  text.remove_suffix(1);  // ']'
  int64_t id = 0;
  if (!read_number(&text, &id) || text.substr(0, kRanks.size()) != kRanks) return {};
  text.remove_prefix(kRanks.size());
  std::vector<int> ranks;
  while (true) {
    int64_t first = 0, last = 0;
    if (!read_number(&text, &first)) return {};
    last = first;
    if (!text.empty() && text.front() == '-') {
      text.remove_prefix(1);
      if (!read_number(&text, &last) || last < first) return {};
    }
    if (!ranks.empty() && first <= ranks.back()) return {};  // ascending, each once
    if (static_cast<int64_t>(ranks.size()) + (last - first) >= kMostRanks) return {};
    for (int64_t r = first; r <= last; ++r) ranks.push_back(static_cast<int>(r));
    if (text.empty()) return ranks;
    if (text.front() != ',') return {};
    text.remove_prefix(1);
  }
}

}  // namespace ranktime::timeline
