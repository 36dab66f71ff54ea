// A trace's regions and ticks into the causes' steps (trace_causes.h).
#include "ranktime/timeline/trace_causes.h"

#include <algorithm>
#include <utility>

#include "ranktime/timeline/trace_names.h"

namespace ranktime::timeline {
namespace {

// Open regions kept per rank: deeper nesting than this is a broken trace's.
constexpr size_t kMaxOpenRegions = 256;

double number_arg(const nlohmann::json& args, const char* key) {
  if (!args.is_object()) return 0;
  auto it = args.find(key);
  return it != args.end() && it->is_number() ? it->get<double>() : 0;
}

}  // namespace

TraceCauses::TraceCauses(const SummaryOptions& options, CauseOptions cause_options)
    : options_(options), collector_(cause_options, [this](int rank, double ts) {
        return options_.step_marks.step_at(rank, ts);
      }) {}

bool TraceCauses::wanted(int64_t rank, double ts) const {
  if (rank < 0 || rank >= CauseCollector::kMaxRanks) return false;
  if (options_.from_us && ts < *options_.from_us) return false;
  if (options_.to_us && ts > *options_.to_us) return false;
  return options_.ranks.empty() ||
         std::find(options_.ranks.begin(), options_.ranks.end(), rank) != options_.ranks.end();
}

void TraceCauses::add(const TraceEvent& e) {
  if (!e.has_ts || !e.has_pid || !e.has_tid || e.ph.size() != 1) return;
  const char ph = e.ph[0];
  const int64_t region_rank = rank_process_rank(e.pid);
  if (region_rank < 0) {
    // A readiness tick: a zero-length X with a rank on a tensor's negotiate thread.
    if (ph != 'X' || e.pid <= 0 || e.tid != 0 || !e.args.is_object()) return;
    auto rank = e.args.find("rank");
    if (rank == e.args.end() || !rank->is_number_integer()) return;
    const int64_t r = rank->get<int64_t>();
    if (!wanted(r, e.ts)) return;
    collector_.add_readiness(options_.step_marks.step_at(static_cast<int>(r), e.ts),
                             static_cast<int>(r), e.ts);
    return;
  }
  // The reader hands complete slices on as B/E pairs, innermost first.
  if (e.tid != kRegionsThreadTid || region_rank >= CauseCollector::kMaxRanks) return;
  if (static_cast<size_t>(region_rank) >= open_.size()) open_.resize(region_rank + 1);
  std::vector<OpenRegion>& open = open_[region_rank];
  if (ph == 'B') {
    if (open.size() < kMaxOpenRegions) {
      open.push_back({e.name, e.ts, number_arg(e.args, "blocked_us")});
    }
    return;
  }
  if (ph != 'E') return;
  // A mismatched E is the checker's business; here, close up to the matching region if any.
  auto match = std::find_if(open.rbegin(), open.rend(),
                            [&](const OpenRegion& r) { return r.name == e.name; });
  if (match == open.rend()) return;
  open.resize(open.size() - static_cast<size_t>(match - open.rbegin()));
  OpenRegion region = std::move(open.back());
  open.pop_back();
  if (!wanted(region_rank, region.begin_us)) return;
  collector_.add_region(static_cast<int>(region_rank), region.name, region.begin_us, e.ts,
                        region.blocked_us);
}

Causes TraceCauses::finish() { return collector_.finish(); }

}  // namespace ranktime::timeline
