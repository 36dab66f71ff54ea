// The control channel for ranks that are threads of one process: each rank's runtime gets a
// MemoryChannel onto one shared MemoryHub, which holds every rank's mailbox. Messages are the
// same encoded bytes the MPI channel carries, so the real protocol runs; the hub can delay, drop
// or cut short control messages (a slow link, a lost message, a dead peer) for the in-process
// protocol tests. gloo's test/base_test.h runs its ranks the same way.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/control_channel.h"

namespace ranktime {

// What happens to one control message.
struct MessageFate {
  bool drop = false;
  std::chrono::nanoseconds delay{0};  // delivered this much later (order per pair of ranks kept)
  bool truncate = false;              // cut to half its length, as a corrupt message
  std::vector<uint8_t> replace;       // non-empty: delivered instead (a message a test forged)
};

class MemoryHub {
 public:
  explicit MemoryHub(int size);
  int size() const { return size_; }

  // Decides the fate of every control message from then on (start-up traffic is never touched).
  using Faults = std::function<MessageFate(int from, int to, const std::vector<uint8_t>& message)>;
  void set_faults(Faults faults);

  enum class Tag : uint8_t { kHosts, kSettings, kPing, kPong, kControl };
  void post(int from, int to, Tag tag, std::shared_ptr<const std::vector<uint8_t>> bytes);
  // Blocks until a message from `from` with `tag` is there for `to`, and takes it.
  std::vector<uint8_t> take(int to, int from, Tag tag);
  // The first control message for `to` that is due (from anyone); false when none.
  bool try_take_control(int to, int* from, std::vector<uint8_t>* out);

 private:
  struct Message {
    int from;
    Tag tag;
    std::shared_ptr<const std::vector<uint8_t>> bytes;
    std::chrono::steady_clock::time_point due;
  };
  const int size_;
  std::mutex mutex_;
  std::condition_variable posted_;
  Faults faults_;
  std::vector<std::deque<Message>> mailboxes_;  // per receiving rank, in posting order
  // Per (from, to): when the last control message is due, so that a delay never reorders a link.
  std::vector<std::chrono::steady_clock::time_point> link_due_;
};

class MemoryChannel final : public ControlChannel {
 public:
  MemoryChannel(std::shared_ptr<MemoryHub> hub, int rank);

  int rank() const override { return rank_; }
  int size() const override { return hub_->size(); }
  void allgather_hosts(const std::string& hostname, const std::vector<int64_t>& numbers,
                       std::vector<std::string>* hostnames,
                       std::vector<int64_t>* all_numbers) override;
  void broadcast(int* values, int count) override;
  void send_ping(int rank, int64_t t0) override;
  std::pair<int64_t, int64_t> receive_pong(int rank) override;
  void receive_ping() override;
  void send_pong(int64_t t1, int64_t t2) override;
  void send(int to, std::shared_ptr<const std::vector<uint8_t>> message) override;
  bool receive(int* from, std::vector<uint8_t>* message) override;
  void reap_sends(bool) override {}  // a post is done at once

 private:
  std::shared_ptr<MemoryHub> hub_;
  int rank_;
};

}  // namespace ranktime
