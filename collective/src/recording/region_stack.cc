// Each thread's open regions (see region_stack.h).
#include "recording/region_stack.h"

#include <algorithm>

namespace ranktime {
namespace {

// Every live thread's stack, for the shutdown warning and the error of an end on another thread.
struct Registry {
  std::mutex mutex;
  std::vector<RegionStack*> stacks;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: threads may outlive static destructors
  return *r;
}

// Registers the thread's stack for the thread's lifetime.
struct ThreadRegions {
  ThreadRegions() {
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().stacks.push_back(&stack);
  }
  ~ThreadRegions() {
    std::lock_guard<std::mutex> lock(registry().mutex);
    auto& s = registry().stacks;
    s.erase(std::remove(s.begin(), s.end(), &stack), s.end());
  }
  RegionStack stack;
};

}  // namespace

const std::string& RegionStack::push(std::string_view name, int64_t begin_ns, int64_t blocked_ns,
                                     int64_t step, bool recorded) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (depth_ == open_.size()) open_.emplace_back();
  OpenRegion& r = open_[depth_++];
  r.name.assign(name.data(), name.size());
  r.begin_ns = begin_ns;
  r.blocked_ns = blocked_ns;
  r.step = step;
  r.recorded = recorded;
  return r.name;
}

std::string RegionStack::pop(std::string_view name, OpenRegion* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (depth_ == 0) return "no region is open on this thread";
  OpenRegion& top = open_[depth_ - 1];
  if (top.name != name) {
    const bool deeper = std::any_of(open_.begin(), open_.begin() + static_cast<long>(depth_),
                                    [&](const OpenRegion& r) { return r.name == name; });
    return deeper
               ? "region \"" + top.name + "\", begun inside it, is still open (end it first)"
               : "it is not open on this thread; the innermost open region is \"" + top.name + "\"";
  }
  out->name.swap(top.name);  // top keeps out's old storage for the next push
  out->begin_ns = top.begin_ns;
  out->blocked_ns = top.blocked_ns;
  out->step = top.step;
  out->recorded = top.recorded;
  --depth_;
  return "";
}

std::vector<std::string> RegionStack::hold(ClosedRegion region) {
  if (handed_over_) {
    held_.clear();
    handed_over_ = false;
  }
  held_.push_back(std::move(region));
  std::vector<std::string> left_out;
  if (held_.size() < kMaxHeld) return left_out;
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < depth_; ++i) {
    if (!open_[i].recorded) continue;
    open_[i].recorded = false;
    left_out.push_back(open_[i].name);
  }
  return left_out;
}

const std::vector<ClosedRegion>& RegionStack::ready() {
  static const std::vector<ClosedRegion> kNone;
  if (handed_over_ || held_.empty()) return kNone;
  {
    // Held until no recorded region is open around them: that one would come after them.
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < depth_; ++i) {
      if (open_[i].recorded) return kNone;
    }
  }
  std::sort(held_.begin(), held_.end(), [](const ClosedRegion& a, const ClosedRegion& b) {
    return a.begin_ns != b.begin_ns ? a.begin_ns < b.begin_ns : a.end_ns > b.end_ns;
  });
  handed_over_ = true;
  return held_;
}

bool RegionStack::contains(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::any_of(open_.begin(), open_.begin() + static_cast<long>(depth_),
                     [&](const OpenRegion& r) { return r.name == name; });
}

std::vector<std::string> RegionStack::open_names() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> names;
  for (size_t i = 0; i < depth_; ++i) names.push_back(open_[i].name);
  return names;
}

size_t RegionStack::depth() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return depth_;
}

RegionStack& this_thread_regions() {
  thread_local ThreadRegions regions;
  return regions.stack;
}

bool region_open_on_other_thread(std::string_view name) {
  const RegionStack* mine = &this_thread_regions();
  std::lock_guard<std::mutex> lock(registry().mutex);
  return std::any_of(registry().stacks.begin(), registry().stacks.end(),
                     [&](const RegionStack* s) { return s != mine && s->contains(name); });
}

std::vector<std::string> open_regions_everywhere() {
  std::lock_guard<std::mutex> lock(registry().mutex);
  std::vector<std::string> names;
  for (const RegionStack* s : registry().stacks) {
    for (std::string& n : s->open_names()) names.push_back(std::move(n));
  }
  return names;
}

}  // namespace ranktime
