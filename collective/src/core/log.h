// Minimal leveled logging to stderr, prefixed with the rank: "[ranktime 2] warning: ...".
#pragma once

#include <sstream>
#include <string>

#include "core/config.h"

namespace ranktime {

void set_log_context(int rank, LogLevel level);
bool log_enabled(LogLevel level);
void log_line(LogLevel level, const std::string& message);

}  // namespace ranktime

#define RANKTIME_LOG(level, expr)                                                    \
  do {                                                                               \
    if (::ranktime::log_enabled(::ranktime::LogLevel::level)) {                      \
      std::ostringstream ranktime_log_stream_;                                       \
      ranktime_log_stream_ << expr;                                                  \
      ::ranktime::log_line(::ranktime::LogLevel::level, ranktime_log_stream_.str()); \
    }                                                                                \
  } while (0)
