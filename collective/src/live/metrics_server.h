// Rank 0's metrics endpoint: GET /metrics in the Prometheus text format, on the address of
// RANKTIME_METRICS_ADDR. The background loop publishes snapshots; the server's own thread formats
// its copy, so a scrape, however slow, never holds the loop.
//
// libmicrohttpd (libmicrohttpd-dev) rather than cpp-httplib or CivetWeb: one polling thread over
// epoll serves every connection (cpp-httplib and CivetWeb keep a worker thread per connection,
// so a hundred idle clients hold a hundred threads or starve the pool), and it bounds what a bad
// client can take: a connection limit, an inactivity timeout, and a per-connection memory pool
// that a 1 MB header overflows (answered 431, closed) instead of growing.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "core/config.h"
#include "live/metrics.h"

struct MHD_Daemon;

namespace ranktime {

class MetricsServer {
 public:
  // Starts serving at `address`; throws ConfigError naming RANKTIME_METRICS_ADDR and the value
  // when the host does not resolve or the port cannot be bound.
  explicit MetricsServer(const ListenAddress& address);
  ~MetricsServer();  // stops the server thread
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Background loop: what the next scrapes show (a pointer swap under a short lock).
  void publish(std::shared_ptr<const MetricsSnapshot> snapshot);

  // Server thread: the current snapshot's text.
  std::string text() const;

 private:
  mutable std::mutex mutex_;  // guards snapshot_ only
  std::shared_ptr<const MetricsSnapshot> snapshot_;
  MHD_Daemon* daemon_ = nullptr;
};

}  // namespace ranktime
