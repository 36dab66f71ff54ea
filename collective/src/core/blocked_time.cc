// Time each thread spends blocked inside ranktime (ranktime::detail::BlockedScope, ranktime.h):
// a thread-local counter that regions read at their begin and end.
#include <chrono>

#include "ranktime/ranktime.h"

namespace ranktime::detail {
namespace {

thread_local int64_t t_blocked_ns = 0;
thread_local int t_depth = 0;  // open BlockedScopes on this thread

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

BlockedScope::BlockedScope() {
  if (t_depth++ == 0) start_ns_ = steady_ns();
}

BlockedScope::~BlockedScope() {
  if (--t_depth == 0) t_blocked_ns += steady_ns() - start_ns_;
}

int64_t thread_blocked_ns() { return t_blocked_ns; }

}  // namespace ranktime::detail
