// SIGINT and SIGTERM on a rank. When a rank dies, mpirun ends the job by sending SIGTERM to every
// other rank: say so, and what was pending, instead of dying silently; mark it in rank 0's
// timeline; and when the signal will end the process, fail the pending operations (so that the
// program can report them) and make that the reason any shutdown gives the other ranks.
#pragma once

#include "core/clock.h"
#include "recording/timeline_recorder.h"
#include "runtime/submission_queue.h"

namespace ranktime {

class SignalReport {
 public:
  // Installs the trace writers' signal flush and this report (on the signal watcher thread).
  SignalReport(int rank, SubmissionQueue* queue, TimelineRecorder* timeline, const Clock* clock);
  ~SignalReport();  // removes the report
  SignalReport(const SignalReport&) = delete;
  SignalReport& operator=(const SignalReport&) = delete;

 private:
  void report(int sig, bool fatal);

  int rank_;
  SubmissionQueue* queue_;
  TimelineRecorder* timeline_;
  const Clock* clock_;
  int callback_ = 0;
};

}  // namespace ranktime
