// A device set's clock anchoring: anchor events calibrated against the host clock on an idle
// stream, re-anchored about once a second, and a finished job's CUDA event times mapped onto the
// host clock through them (the maths is event_clock.h's; see device_set.h).
#include <cmath>

#include "backends/gpu/cuda_status.h"
#include "backends/gpu/device_job.h"
#include "backends/gpu/device_set.h"
#include "core/log.h"

namespace ranktime::gpu {
namespace {

// Calibration attempts per anchor; the narrowest window wins.
constexpr int kAnchorTries = 4;
// An anchor event on an idle stream completes within microseconds; poll for it this long, then
// wait for it.
constexpr int64_t kAnchorPollNs = 10'000'000;
double elapsed_ns(cudaEvent_t from, cudaEvent_t to, bool* ok) {
  float ms = 0;
  *ok = cudaEventElapsedTime(&ms, from, to) == cudaSuccess;
  return static_cast<double>(ms) * 1e6;
}

}  // namespace

void DeviceSet::map_times(Job* job, int64_t lo_ns, int64_t seen_ns, JobTimes* times) {
  // GPU marks: the job's first event against the anchor (one float of up to ~1 s), the others
  // against the first (short distances keep float milliseconds precise); place_marks() then fits
  // them between the host steps' readings.
  const AnchorEvent* anchor = job->anchor.get();
  cudaEvent_t base = nullptr;
  int64_t base_ns = seen_ns;
  std::vector<MarkReading> readings;
  readings.reserve(job->marks.size());
  for (const Mark& m : job->marks) {
    MarkReading r;
    r.on_gpu = m.event != nullptr;
    r.host_ns = m.host_ns;
    if (r.on_gpu && base == nullptr) {
      base = m.event;
      bool ok = false;
      const double g = anchor ? elapsed_ns(anchor->event, m.event, &ok) : 0;
      base_ns = ok ? event_clock_.to_host(anchor->anchor, g) : seen_ns;
    } else if (r.on_gpu) {
      r.gpu_ns = elapsed_ns(base, m.event, &r.ok);
    }
    readings.push_back(r);
  }
  times->marks = place_marks(readings, base_ns, event_clock_.rate(), lo_ns, seen_ns);
  times->spans = job->spans;
  times->data_ready_mark = job->data_ready_mark;
  times->tensor_ready_ns.assign(job->entries.size(), kNoReadyEvent);
  // Per tensor: when its producer's event had fired (as far as the stream could tell).
  const bool per_event = job->captured.empty() ? job->ready_marks.size() == job->ready_events.size()
                                               : job->captured.size() == job->ready_events.size();
  for (size_t i = 0; i < job->entries.size() && i < job->entry_event.size(); ++i) {
    const int k = job->entry_event[i];
    if (k < 0 || job->data_ready_mark < 0) continue;
    if (!per_event) {
      times->tensor_ready_ns[i] = times->marks[job->data_ready_mark];
    } else if (job->captured.empty()) {
      times->tensor_ready_ns[i] = times->marks[job->ready_marks[k]];
    } else {
      bool ok = false;
      const double g = anchor ? elapsed_ns(anchor->event, job->captured[k], &ok) : 0;
      times->tensor_ready_ns[i] = ok ? event_clock_.to_host(anchor->anchor, g) : seen_ns;
    }
  }
}

std::shared_ptr<DeviceSet::AnchorEvent> DeviceSet::calibrate_anchor(bool first, std::string* why) {
  std::vector<AnchorSample> samples;
  std::vector<cudaEvent_t> events;
  cudaError_t failure = cudaSuccess;
  for (int k = 0; k < kAnchorTries; ++k) {
    cudaEvent_t ev = nullptr;
    cudaError_t rc = cudaEventCreate(&ev);
    if (rc != cudaSuccess) {
      failure = rc;
      break;
    }
    // The anchor stream is idle, so the event executes as soon as the GPU sees it: its timestamp
    // lies between these two host readings. Polling (briefly, once a second) keeps the window
    // tight; a blocking wait would widen it by the wake-up latency. The first events on a fresh
    // context can take tens of milliseconds: for the first anchor, wait for them and keep their
    // wide window (still a true bound) if no later try does better. A re-anchor drops a slow try
    // instead (a busy, shared GPU): keeping the previous anchor maps better than a wide one.
    const int64_t before = clock_->now_ns();
    rc = cudaEventRecord(ev, anchor_stream_);
    while (rc == cudaSuccess && (rc = cudaEventQuery(ev)) == cudaErrorNotReady &&
           clock_->now_ns() - before < kAnchorPollNs) {
    }
    if (rc == cudaErrorNotReady && first) rc = cudaEventSynchronize(ev);
    if (rc == cudaErrorNotReady) {
      // A re-anchor on a busy (shared) GPU: the next tries would queue behind this one.
      failure = rc;
      cudaEventDestroy(ev);
      break;
    }
    const int64_t after = clock_->now_ns();
    if (rc != cudaSuccess) {
      failure = rc;
      cudaGetLastError();
      cudaEventDestroy(ev);
      continue;
    }
    samples.push_back({before, after});
    events.push_back(ev);
  }
  const int best = best_anchor_sample(samples);
  std::shared_ptr<AnchorEvent> fresh;
  if (best >= 0) {
    std::shared_ptr<AnchorEvent> previous;
    {
      std::lock_guard<std::mutex> lock(anchor_mutex_);
      previous = anchor_;
    }
    bool ok = false;
    const double since = previous ? elapsed_ns(previous->event, events[best], &ok) : 0;
    if (!previous || ok) {
      fresh = std::make_shared<AnchorEvent>();
      fresh->event = events[best];
      fresh->anchor = event_clock_.add_anchor(samples[best], since);
      events[best] = nullptr;
      RANKTIME_LOG(kDebug, "device " << device_ << ": anchor " << fresh->anchor.id << " within "
                                     << fresh->anchor.uncertainty_ns << " ns (" << samples.size()
                                     << " tries in "
                                     << (samples.back().after_ns - samples.front().before_ns)
                                     << " ns)");
    } else if (why != nullptr) {
      *why = "cudaEventElapsedTime from the previous anchor failed";
    }
  } else if (why != nullptr) {
    *why = "no anchor event completed in " + std::to_string(kAnchorTries) +
           " tries: " + cuda_error_text(failure);
  }
  for (cudaEvent_t e : events) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  return fresh;
}

void DeviceSet::reanchor() {
  std::string why;
  std::shared_ptr<AnchorEvent> fresh = calibrate_anchor(/*first=*/false, &why);
  if (!fresh) {
    RANKTIME_LOG(kDebug, "device " << device_ << ": re-anchoring the event clock failed (" << why
                                   << "); GPU phase times keep the previous anchor");
    return;
  }
  {
    std::lock_guard<std::mutex> lock(anchor_mutex_);
    anchor_ = std::move(fresh);
  }
  RANKTIME_LOG(kTrace, "device " << device_ << ": re-anchored event clock, drift "
                                 << event_clock_.drift_ppm() << " ppm, residual "
                                 << event_clock_.last_residual_ns() << " ns");
}

}  // namespace ranktime::gpu
