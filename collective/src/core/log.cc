// Leveled logging; one write(2) per line so lines from threads and ranks do not interleave.
#include "core/log.h"

#include <unistd.h>

#include <atomic>

namespace ranktime {
namespace {
std::atomic<int> g_rank{-1};
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarning)};
}  // namespace

void set_log_context(int rank, LogLevel level) {
  g_rank = rank;
  g_level = static_cast<int>(level);
}

bool log_enabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

void log_line(LogLevel level, const std::string& message) {
  std::string line = "[ranktime " + std::to_string(g_rank.load()) + "] " + log_level_name(level) +
                     ": " + message + "\n";
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace ranktime
