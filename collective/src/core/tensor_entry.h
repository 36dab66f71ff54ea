// A submitted tensor as the background loop sees it, and the completion state behind a Handle.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "core/message.h"
#include "ranktime/ranktime.h"
#include "ranktime/timeline/record.h"

namespace ranktime {
namespace detail {

struct HandleState {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  Status status;
  std::vector<std::byte> output;  // allgather, reducescatter, alltoall result
  std::vector<int64_t> output_shape;
  std::vector<int32_t> received_splits;  // alltoall: rows of output from each rank

  void complete(Status s) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (done) return;
      status = std::move(s);
      done = true;
    }
    cv.notify_all();
  }
};

}  // namespace detail

struct TensorEntry {
  Request request;  // ready_ns on this rank's clock
  TensorView view;
  std::shared_ptr<detail::HandleState> handle;
  // Alltoall: rows of dimension 0 for each rank (this rank's own; the ranks exchange them when
  // the alltoall runs).
  std::vector<int32_t> splits;
  // request.error is about the call's own arguments: the handle fails at once, and the request
  // still goes to rank 0 so that the other ranks' handles for the tensor fail too.
  bool invalid_argument = false;
  // A joined rank's stand-in for a tensor it never submitted (runtime/join_zeros.h): zeros of the
  // tensor's size. Host responses point view.data at host zeros; device responses have no data
  // (view.data is null) and the device backend zeroes scratch memory of its own instead.
  bool join_zeros = false;
};

// Sub-phase timings of one executed response, on this rank's clock, in execution order.
struct PhaseLog {
  struct Span {
    timeline::Phase phase;
    int64_t begin_ns, end_ns;
  };
  std::vector<Span> spans;
  void clear() { spans.clear(); }
  void add(timeline::Phase phase, int64_t begin_ns, int64_t end_ns) {
    spans.push_back({phase, begin_ns, end_ns});
  }
  // Adds `stages`' spans as one span per phase, in the order the phases first appear there, each
  // as long as that phase's spans summed, back to back from the first span's start: a batch run
  // in many stages is drawn with the sub-phases, totals and size of one run whole.
  void add_summed(const PhaseLog& stages);
};

}  // namespace ranktime
