// Control messages over the channel (see control_messages.h).
#include "runtime/control_messages.h"

#include <memory>

#include "core/log.h"
#include "core/wire.h"

namespace ranktime {

WorkerMessages::WorkerMessages(ControlChannel* channel, const Clock* clock)
    : channel_(channel), clock_(clock) {}

void WorkerMessages::send(WorkerMessage* m) {
  if (echo_.t0 != 0) {
    m->clock = echo_;
    m->clock.t2 = clock_->now_ns();
    echo_ = {};
  }
  auto bytes = std::make_shared<std::vector<uint8_t>>();
  encode(*m, bytes.get());
  channel_->send(0, std::move(bytes));
}

bool WorkerMessages::receive(ResponseList* list, int64_t* arrival_ns) {
  int from = 0;
  if (!channel_->receive(&from, &buffer_)) return false;
  *arrival_ns = clock_->now_ns();
  *list = decode_response_list(buffer_.data(), buffer_.size());
  echo_ = {list->sent_ns, *arrival_ns, 0};
  return true;
}

CoordinatorMessages::CoordinatorMessages(ControlChannel* channel, const Clock* clock,
                                         std::vector<OffsetEstimator> offsets)
    : channel_(channel), clock_(clock), offsets_(std::move(offsets)) {}

void CoordinatorMessages::broadcast(const ResponseList& list, const std::vector<char>& lost) {
  auto bytes = std::make_shared<std::vector<uint8_t>>();
  encode(list, bytes.get());
  for (int r = 1; r < channel_->size(); ++r) {
    if (!lost[r]) channel_->send(r, bytes);
  }
}

bool CoordinatorMessages::receive(int* source, int64_t* arrival_ns, WorkerMessage** message) {
  if (!channel_->receive(source, &buffer_)) return false;
  const int64_t now = clock_->now_ns();
  *arrival_ns = now;
  *message = nullptr;
  try {
    decode_worker_message_into(buffer_.data(), buffer_.size(), &incoming_);
  } catch (const WireError& e) {
    RANKTIME_LOG(kError, "dropped a corrupt message from rank " << *source << ": " << e.what());
    return true;
  }
  OffsetEstimator& offset = offsets_[*source];
  if (incoming_.clock.t0 != 0) {
    offset.add({incoming_.clock.t0, incoming_.clock.t1, incoming_.clock.t2, now});
  }
  for (Request& q : incoming_.requests) q.ready_ns = offset.to_rank0(q.ready_ns);
  *message = &incoming_;
  return true;
}

}  // namespace ranktime
