// Liveness (RANKTIME_PEER_TIMEOUT_S): noticing that a peer died or hangs instead of waiting for it
// forever. The background thread reports what it sends and hears; this says when a heartbeat is
// due (a rank that has sent nothing for a while sends an empty message) and which peers have been
// silent too long (on rank 0 every worker, elsewhere rank 0). A completed collective counts as
// hearing from everyone. A collective blocks the background thread, so a watchdog thread watches
// it and gives up on one that has not returned within the timeout.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/message.h"

namespace ranktime {

class Liveness {
 public:
  // peer_timeout_s = 0, or a single rank: never give up (every check is a no-op).
  Liveness(int rank, int size, double peer_timeout_s, const Clock* clock);
  ~Liveness();  // stop_watchdog()
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  bool enabled() const { return timeout_ns_ > 0; }
  // How often heartbeats go (0: never); an idle background thread wakes at least this often.
  int64_t heartbeat_ns() const { return heartbeat_ns_; }

  // Background thread.
  void sent(int64_t now_ns) { last_sent_ns_ = now_ns; }
  void heard(int rank, int64_t now_ns) { last_heard_ns_[rank] = now_ns; }
  void collective_done(int64_t now_ns) { last_collective_ns_ = now_ns; }
  bool heartbeat_due(int64_t now_ns) const;
  bool lost(int rank) const { return lost_[rank] != 0; }
  const std::vector<char>& lost_ranks() const { return lost_; }
  // Peers silent for longer than the timeout (checked at most every 10 ms), marked lost: the
  // first one and the reason, naming each ("rank 3 (host h, pid p) has sent nothing for 61.0 s
  // (RANKTIME_PEER_TIMEOUT_S=60.0): it died or hangs"). On rank 0, the ranks of a lost rank's
  // host silent for over half the timeout are lost with it, and a host whose every rank is lost
  // is named ("...: host h1 (ranks 2, 3) cannot be reached, or every rank on it died or hangs").
  // `hostnames` and `pids`: every rank's.
  struct Loss {
    int first_rank;
    std::string reason;
  };
  std::optional<Loss> check(int64_t now_ns, const std::vector<std::string>& hostnames,
                            const std::vector<int64_t>& pids);

  // The watchdog: `on_hang(reason, now_ns)` runs on its thread when the collective set with
  // executing() has not returned within the timeout (after hung() and peer_lost() turn true).
  void start_watchdog(std::function<void(const std::string& reason, int64_t now_ns)> on_hang);
  void stop_watchdog();
  // The collective the background thread is inside from now on (null: none), for the watchdog.
  void executing(const Response* response);

  // This rank gave up on a peer: MPI must then not be finalised (it would wait for the dead).
  bool peer_lost() const { return peer_lost_.load(); }
  // The background thread is stuck in a collective the watchdog gave up on.
  bool hung() const { return hung_.load(); }

 private:
  int64_t silent_ns(int rank, int64_t now_ns) const;
  // How the message about the `lost` ranks ends: "it died or hangs", or, when every rank of a
  // host other than rank 0's is lost, "host h1 (ranks 2, 3) cannot be reached, or ...".
  std::string why_lost(const std::vector<int>& lost,
                       const std::vector<std::string>& hostnames) const;
  std::string timeout_setting() const;  // "RANKTIME_PEER_TIMEOUT_S=<s>"
  void watch();

  const int rank_, size_;
  const Clock* clock_;
  int64_t timeout_ns_ = 0;
  int64_t heartbeat_ns_ = 0;
  int64_t last_sent_ns_ = 0;
  int64_t last_check_ns_ = 0;
  int64_t last_collective_ns_ = 0;
  std::vector<int64_t> last_heard_ns_;  // rank 0: per rank; elsewhere [0] = rank 0
  std::vector<char> lost_;              // rank 0: ranks given up on
  std::atomic<bool> peer_lost_{false};
  std::atomic<bool> hung_{false};

  std::mutex exec_mutex_;  // guards the two below, which the watchdog reads
  const Response* executing_ = nullptr;
  int64_t executing_since_ns_ = 0;
  std::function<void(const std::string&, int64_t)> on_hang_;
  std::mutex watchdog_mutex_;
  std::condition_variable watchdog_cv_;
  bool watchdog_stop_ = false;
  std::thread watchdog_;
};

// "12.3": seconds with one decimal, for messages.
std::string seconds_text(int64_t ns);

}  // namespace ranktime
