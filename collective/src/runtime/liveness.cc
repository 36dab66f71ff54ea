// Heartbeats, silent peers and the collective watchdog (see liveness.h).
#include "runtime/liveness.h"

#include <algorithm>
#include <cstdio>

#include "core/log.h"

namespace ranktime {
namespace {

// Heartbeats go at least this often (a quarter of the peer timeout when that is shorter); peers
// are checked at most this often.
constexpr int64_t kHeartbeatIntervalNs = 1'000'000'000;
constexpr int64_t kPeerCheckIntervalNs = 10'000'000;

}  // namespace

std::string seconds_text(int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", ns / 1e9);
  return text;
}

Liveness::Liveness(int rank, int size, double peer_timeout_s, const Clock* clock)
    : rank_(rank), size_(size), clock_(clock) {
  last_sent_ns_ = last_collective_ns_ = clock_->now_ns();
  last_heard_ns_.assign(size_, last_sent_ns_);
  lost_.assign(size_, 0);
  if (peer_timeout_s > 0 && size_ > 1) {
    timeout_ns_ = static_cast<int64_t>(peer_timeout_s * 1e9);
    heartbeat_ns_ = std::max<int64_t>(1, std::min(kHeartbeatIntervalNs, timeout_ns_ / 4));
  }
}

Liveness::~Liveness() { stop_watchdog(); }

bool Liveness::heartbeat_due(int64_t now) const {
  return enabled() && now - last_sent_ns_ >= heartbeat_ns_;
}

int64_t Liveness::silent_ns(int rank, int64_t now) const {
  return now - std::max(last_heard_ns_[rank], last_collective_ns_);
}

std::string Liveness::timeout_setting() const {
  return "RANKTIME_PEER_TIMEOUT_S=" + seconds_text(timeout_ns_);
}

std::optional<Liveness::Loss> Liveness::check(int64_t now,
                                              const std::vector<std::string>& hostnames,
                                              const std::vector<int64_t>& pids) {
  if (!enabled() || now - last_check_ns_ < kPeerCheckIntervalNs) return std::nullopt;
  last_check_ns_ = now;
  // "rank 3 (host h1, pid 4242) has sent nothing for 5.0 s"
  auto silent = [&](int r) {
    return "rank " + std::to_string(r) + " (host " + hostnames.at(r) + ", pid " +
           std::to_string(pids.at(r)) + ") has sent nothing for " +
           seconds_text(silent_ns(r, now)) + " s";
  };
  if (rank_ != 0) {
    if (silent_ns(0, now) <= timeout_ns_) return std::nullopt;
    peer_lost_ = true;
    const bool other_host = hostnames.at(0) != hostnames.at(rank_);
    Loss loss{0, silent(0) + " (" + timeout_setting() + "): it died or hangs" +
                     (other_host ? ", or host " + hostnames[0] + " cannot be reached" : "")};
    RANKTIME_LOG(kError, loss.reason);
    return loss;
  }
  std::vector<int> lost;
  for (int r = 1; r < size_; ++r) {
    if (!lost_[r] && silent_ns(r, now) > timeout_ns_) lost.push_back(r);
  }
  if (lost.empty()) return std::nullopt;
  // A host that cannot be reached silences all its ranks at once, while a live rank heartbeats
  // every quarter of the timeout: the ranks of a lost rank's host (not rank 0's, which is
  // reachable) silent for more than half of it are lost with it, so that one message names them.
  const size_t past_timeout = lost.size();
  for (int r = 1; r < size_; ++r) {
    const int64_t silent_for = silent_ns(r, now);
    if (lost_[r] || hostnames[r] == hostnames[0] || silent_for <= timeout_ns_ / 2 ||
        silent_for > timeout_ns_) {
      continue;
    }
    if (std::any_of(lost.begin(), lost.begin() + past_timeout,
                    [&](int l) { return hostnames[l] == hostnames[r]; })) {
      lost.push_back(r);
    }
  }
  std::sort(lost.begin(), lost.end());
  std::string reason;
  for (int r : lost) {
    lost_[r] = 1;
    reason += (reason.empty() ? "" : "; ") + silent(r);
  }
  peer_lost_ = true;
  Loss loss{lost.front(), reason + " (" + timeout_setting() + "): " + why_lost(lost, hostnames)};
  RANKTIME_LOG(kError, loss.reason);
  return loss;
}

std::string Liveness::why_lost(const std::vector<int>& lost,
                               const std::vector<std::string>& hostnames) const {
  // Hosts other than rank 0's whose every rank is now lost, as "h1 (ranks 2, 3)".
  std::vector<std::string> seen, hosts;
  for (int l : lost) {
    const std::string& host = hostnames[l];
    if (host == hostnames[0] || std::count(seen.begin(), seen.end(), host) != 0) continue;
    seen.push_back(host);
    std::vector<int> ranks;
    for (int r = 0; r < size_; ++r) {
      if (hostnames[r] == host) ranks.push_back(r);
    }
    if (!std::all_of(ranks.begin(), ranks.end(), [&](int r) { return lost_[r] != 0; })) continue;
    std::string text = host + (ranks.size() == 1 ? " (rank " : " (ranks ");
    for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
    hosts.push_back(text + ")");
  }
  if (hosts.empty()) return "it died or hangs";
  std::string named;
  for (const auto& h : hosts) named += (named.empty() ? "" : ", ") + h;
  return hosts.size() == 1
             ? "host " + named + " cannot be reached, or every rank on it died or hangs"
             : "hosts " + named + " cannot be reached, or every rank on them died or hangs";
}

void Liveness::start_watchdog(std::function<void(const std::string&, int64_t)> on_hang) {
  if (!enabled()) return;
  on_hang_ = std::move(on_hang);
  watchdog_ = std::thread(&Liveness::watch, this);
}

void Liveness::stop_watchdog() {
  if (!watchdog_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(watchdog_mutex_);
    watchdog_stop_ = true;
  }
  watchdog_cv_.notify_one();
  watchdog_.join();
}

void Liveness::executing(const Response* response) {
  if (!enabled()) return;  // no watchdog reads it
  std::lock_guard<std::mutex> lock(exec_mutex_);
  executing_ = response;
  executing_since_ns_ = response ? clock_->now_ns() : 0;
}

void Liveness::watch() {
  std::unique_lock<std::mutex> lock(watchdog_mutex_);
  while (!watchdog_stop_) {
    watchdog_cv_.wait_for(lock, std::chrono::nanoseconds(heartbeat_ns_),
                          [&] { return watchdog_stop_; });
    if (watchdog_stop_) return;
    std::string what;
    int64_t now = 0, stuck_ns = 0;
    {
      std::lock_guard<std::mutex> exec(exec_mutex_);
      now = clock_->now_ns();
      stuck_ns = now - executing_since_ns_;
      if (executing_ == nullptr || stuck_ns <= timeout_ns_) continue;
      const Response& r = *executing_;
      what = std::string(op_type_name(r.op));
      if (!r.names.empty()) what += " of '" + r.names.front() + "'";
      if (r.names.size() > 1) {
        what += " (and " + std::to_string(r.names.size() - 1) + " tensor(s) fused with it)";
      }
    }
    hung_ = true;
    peer_lost_ = true;
    const std::string reason = "rank " + std::to_string(rank_) + ": the " + what +
                               " has not returned after " + seconds_text(stuck_ns) + " s (" +
                               timeout_setting() +
                               "): another rank probably died or hangs; ranktime has stopped";
    RANKTIME_LOG(kError, reason);
    on_hang_(reason, now);
    return;
  }
}

}  // namespace ranktime
