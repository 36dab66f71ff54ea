// TIMELINE_ON_ALERT (see timeline_recorder.h): rank 0 holds the last steps' records and, on an
// alert, writes them and the steps after it to a file of their own.
#include <algorithm>
#include <string>

#include "core/log.h"
#include "recording/timeline_recorder.h"

namespace ranktime {

std::string TimelineRecorder::alert_trace_path(const std::string& path, int n) {
  return timeline::tagged_path(path, "alert" + std::to_string(n));
}

void TimelineRecorder::write_alert_trace() {
  if (rank_ != 0 || hold_steps_ <= 0 || !on_ || writer_) return;
  timeline::TraceWriterOptions options;
  options.path = alert_trace_path(hold_path_, ++alert_traces_);
  options.on_error = [](const std::string& message) {
    RANKTIME_LOG(kError, message << "; training continues without this alert's timeline");
  };
  std::string error;
  auto writer = timeline::TraceWriter::open(options, hold_metadata_, strings_, &error);
  if (!writer) {
    RANKTIME_LOG(kError, error << "; training continues without this alert's timeline");
    return;
  }
  RANKTIME_LOG(kWarning, "timeline: writing the " << hold_steps_ << " steps before and after "
                                                  << "the alert to " << options.path);
  {
    std::lock_guard<std::mutex> lock(writer_mutex_);
    writer_ = std::move(writer);
  }
  timeline::install_signal_flush();
  for (const auto& [step, records] : held_) writer_->push(records.data(), records.size());
  held_.clear();
  alert_trace_end_step_ = current_step_.load(std::memory_order_relaxed) + hold_steps_;
}

void TimelineRecorder::end_alert_trace() {
  if (!writer_ || alert_trace_end_step_ < 0 ||
      current_step_.load(std::memory_order_relaxed) < alert_trace_end_step_)
    return;
  alert_trace_end_step_ = -1;
  std::unique_ptr<timeline::TraceWriter> done;
  {
    std::lock_guard<std::mutex> lock(writer_mutex_);
    done.swap(writer_);
  }
  done->close();  // once per alert: drains what the writer thread has left
}

void TimelineRecorder::hold(const timeline::Record* records, size_t n) {
  const int64_t step = current_step_.load(std::memory_order_relaxed);
  if (held_.empty() || held_.back().first != step) {
    held_.emplace_back(step, std::vector<timeline::Record>());
    while (!held_.empty() && held_.front().first <= step - hold_steps_) held_.pop_front();
  }
  std::vector<timeline::Record>& bucket = held_.back().second;
  const size_t kept =
      std::min(n, kHeldRecordsPerStep - std::min(kHeldRecordsPerStep, bucket.size()));
  bucket.insert(bucket.end(), records, records + kept);
  held_dropped_ += n - kept;
}

}  // namespace ranktime
