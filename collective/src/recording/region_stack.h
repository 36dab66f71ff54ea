// Each thread's open regions (ranktime::region_begin/end, ranktime.h): a stack per thread, so
// that regions nest and an end can be checked against its begin. Pure: no clock, no runtime.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace ranktime {

// A region begun and not yet ended.
struct OpenRegion {
  std::string name;
  int64_t begin_ns = 0;    // this rank's clock
  int64_t blocked_ns = 0;  // the thread's blocked time at the begin (detail::thread_blocked_ns)
  int64_t step = -1;       // the step marked when it began (TIMELINE_STEPS)
  bool recorded = false;   // the runtime was running at the begin: the end records it
};

// A region that has ended, held until the outermost region around it ends.
struct ClosedRegion {
  std::string name;
  int64_t step = -1;
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  int64_t blocked_ns = 0;  // during it
};

// The trace wants a thread's slices in time order, but regions end inside out: a thread's ended
// regions are held until no region is open on it, then handed over sorted by begin (outer first).
class RegionStack {
 public:
  // More regions than this held inside the open ones: those open are left out of the trace (a
  // region around a whole epoch would otherwise hold every region of the epoch in memory).
  static constexpr size_t kMaxHeld = 1024;

  // Returns the name as kept (valid until the region ends).
  const std::string& push(std::string_view name, int64_t begin_ns, int64_t blocked_ns, int64_t step,
                          bool recorded);
  // Pops the innermost region into *out if it is `name`; else returns why not (the name in the
  // message is the caller's to add), and the stack is unchanged.
  std::string pop(std::string_view name, OpenRegion* out);
  // Whether `name` is open on this stack (at any depth).
  bool contains(std::string_view name) const;
  // The names open, outermost first.
  std::vector<std::string> open_names() const;
  size_t depth() const;

  // Holds a region that ended (pop) for hand-over. Returns the names of the regions open
  // around it that are left out of the trace because too many are held (see kMaxHeld).
  std::vector<std::string> hold(ClosedRegion region);
  // When no recorded region is open: the held regions in the trace's order (by begin; of two
  // with the same begin, the longer first), emptied by the next hold(). Empty otherwise.
  const std::vector<ClosedRegion>& ready();

 private:
  mutable std::mutex mutex_;      // taken by other threads only to list open regions (shutdown)
  std::vector<OpenRegion> open_;  // [0, depth_) open; later entries keep their strings' storage
  size_t depth_ = 0;
  std::vector<ClosedRegion> held_;  // owner thread only
  bool handed_over_ = false;        // held_ was returned by ready()
};

// The calling thread's stack; registered (see open_regions_on_other_threads) while it lives.
RegionStack& this_thread_regions();
// Whether `name` is open on a thread other than the caller's.
bool region_open_on_other_thread(std::string_view name);
// The names of every region open on any thread, outermost first per thread.
std::vector<std::string> open_regions_everywhere();

}  // namespace ranktime
