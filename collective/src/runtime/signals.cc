// Reports SIGINT/SIGTERM (see signals.h).
#include "runtime/signals.h"

#include <signal.h>

#include <chrono>

#include "core/log.h"

namespace ranktime {
namespace {

// Every rank outlives a fatal SIGINT/SIGTERM by this much, after its pending operations have
// failed: the program gets to report them, and rank 0, which mpirun signals at the same moment
// as the others, closes its timeline before mpirun sees a rank die and SIGKILLs the rest.
constexpr std::chrono::milliseconds kSignalLinger(500);
// Names of pending operations listed in the report, about.
constexpr size_t kNamesShown = 200;

}  // namespace

SignalReport::SignalReport(int rank, SubmissionQueue* queue, TimelineRecorder* timeline,
                           const Clock* clock)
    : rank_(rank), queue_(queue), timeline_(timeline), clock_(clock) {
  timeline::install_signal_flush(kSignalLinger);
  callback_ = timeline::add_signal_callback([this](int sig, bool fatal) { report(sig, fatal); });
}

SignalReport::~SignalReport() { timeline::remove_signal_callback(callback_); }

void SignalReport::report(int sig, bool fatal) {
  const char* signal_name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  std::string names;
  const size_t pending = queue_->pending_names(kNamesShown, &names);
  const std::string text =
      std::string("received ") + signal_name + " with " + std::to_string(pending) +
      " operation(s) pending" + (pending ? ": " + names : std::string()) +
      " (mpirun sends this to every rank when one rank dies or the job is cancelled)";
  RANKTIME_LOG(kError, text);
  if (rank_ == 0) timeline_->instant_from_any_thread(signal_name, text, clock_->now_ns());
  if (fatal) {
    // If the program shuts down now, the other ranks learn why.
    queue_->set_signal_reason(std::string("received ") + signal_name + " and is ending");
    queue_->fail_pending(std::string("this process received ") + signal_name +
                         " and is ending (mpirun sends SIGTERM to every rank when one rank dies "
                         "or the job is cancelled)");
  }
}

}  // namespace ranktime
