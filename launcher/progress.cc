// Progress reporting for the trace-reading commands.
#include "progress.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <utility>

namespace ranktime::cli {

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buffer;
}

std::string human_count(double count) {
  char buffer[32];
  if (count >= 1e9) {
    std::snprintf(buffer, sizeof(buffer), "%.2fG", count / 1e9);
  } else if (count >= 1e6) {
    std::snprintf(buffer, sizeof(buffer), "%.2fM", count / 1e6);
  } else if (count >= 1e4) {
    std::snprintf(buffer, sizeof(buffer), "%.1fk", count / 1e3);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.0f", count);
  }
  return buffer;
}

ProgressReporter::ProgressReporter(std::string command, std::string path, bool enabled,
                                   uint64_t every_bytes)
    : command_(std::move(command)),
      path_(std::move(path)),
      enabled_(enabled),
      tty_(isatty(STDERR_FILENO) != 0),
      every_bytes_(every_bytes == 0 ? 1 : every_bytes),
      start_(std::chrono::steady_clock::now()) {
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0) file_size_ = static_cast<uint64_t>(st.st_size);
}

timeline::TraceReadOptions ProgressReporter::read_options() {
  timeline::TraceReadOptions options;
  if (enabled_) {
    options.progress_every_bytes = every_bytes_;
    options.on_progress = [this](uint64_t bytes, uint64_t events) { report(bytes, events); };
  }
  return options;
}

void ProgressReporter::report(uint64_t bytes, uint64_t events) {
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string line = command_ + ": " + path_ + ": " + human_bytes(bytes);
  if (file_size_ > 0) {
    line += " of " + human_bytes(file_size_) + " (" +
            std::to_string(static_cast<int>(100.0 * bytes / file_size_)) + "%)";
  }
  line += ", " + human_count(static_cast<double>(events)) + " events";
  if (seconds > 0) {
    line += ", " + human_count(events / seconds) + " events/s";
  }
  // A terminal gets one line rewritten in place; a log gets one line per report.
  std::fprintf(stderr, tty_ ? "\r%s\033[K" : "%s\n", line.c_str());
  std::fflush(stderr);
  line_open_ = tty_;
}

void ProgressReporter::done() {
  if (line_open_) std::fputc('\n', stderr);
  line_open_ = false;
}

}  // namespace ranktime::cli
