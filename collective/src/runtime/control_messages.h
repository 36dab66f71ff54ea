// The control protocol's messages (core/message.h) over a ControlChannel, encoded with
// core/wire.h, and what each side keeps about them: a worker returns the timestamps of rank 0's
// last response list with its next message (NTP's four timestamps); rank 0 keeps every rank's
// clock offset from those echoes and puts each worker's readiness times on its own clock.
#pragma once

#include <cstdint>
#include <vector>

#include "core/clock.h"
#include "core/message.h"
#include "runtime/control_channel.h"

namespace ranktime {

// A worker's end.
class WorkerMessages {
 public:
  WorkerMessages(ControlChannel* channel, const Clock* clock);
  // Sends `m` to rank 0, with the clock echo when there is a fresh one.
  void send(WorkerMessage* m);
  // The next response list from rank 0 (false: none waiting) and when it arrived. Throws
  // WireError when the list is corrupt.
  bool receive(ResponseList* list, int64_t* arrival_ns);

 private:
  ControlChannel* channel_;
  const Clock* clock_;
  ClockEcho echo_;  // the last response list's timestamps
  std::vector<uint8_t> buffer_;
};

// Rank 0's end.
class CoordinatorMessages {
 public:
  // `offsets`: per rank, from the start-up ping-pong (runtime/rendezvous.h).
  CoordinatorMessages(ControlChannel* channel, const Clock* clock,
                      std::vector<OffsetEstimator> offsets);
  // Sends `list` to every other rank for which lost[rank] is false.
  void broadcast(const ResponseList& list, const std::vector<char>& lost);
  // The next worker message, if one is waiting: its source and arrival time, and the message
  // with its requests' ready times on rank 0's clock (null when it was corrupt: logged, dropped).
  // The message's memory is reused by the next call.
  bool receive(int* source, int64_t* arrival_ns, WorkerMessage** message);
  // Rank `rank`'s clock against rank 0's.
  const OffsetEstimator& offset(int rank) const { return offsets_[rank]; }
  const std::vector<OffsetEstimator>& offsets() const { return offsets_; }

 private:
  ControlChannel* channel_;
  const Clock* clock_;
  std::vector<OffsetEstimator> offsets_;
  std::vector<uint8_t> buffer_;
  WorkerMessage incoming_;
};

}  // namespace ranktime
