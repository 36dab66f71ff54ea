// The metrics endpoint over libmicrohttpd (see metrics_server.h).
#include "live/metrics_server.h"

#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cstring>

#include "core/log.h"

namespace ranktime {
namespace {

// Bad clients: past this many connections new ones are refused; an idle connection is closed
// after kIdleTimeoutS; a request's headers must fit in kConnectionMemory bytes. A hundred idle
// connections stay below the limit, so a real scrape still gets in meanwhile.
constexpr unsigned kConnectionLimit = 256;
constexpr unsigned kIdleTimeoutS = 5;
constexpr size_t kConnectionMemory = 32 * 1024;

MHD_Result send_text(MHD_Connection* connection, unsigned status, const std::string& body,
                     const char* content_type, const char* allow = nullptr) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  if (allow) MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, allow);
  const MHD_Result result = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return result;
}

MHD_Result on_request(void* server, MHD_Connection* connection, const char* url, const char* method,
                      const char* /*version*/, const char* /*upload_data*/,
                      size_t* /*upload_data_size*/, void** /*request_state*/) {
  constexpr const char* kPlain = "text/plain; charset=utf-8";
  if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
      std::strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    return send_text(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET\n", kPlain, "GET, HEAD");
  }
  if (std::strcmp(url, "/metrics") != 0) {
    return send_text(connection, MHD_HTTP_NOT_FOUND, "not found: the metrics are at /metrics\n",
                     kPlain);
  }
  return send_text(connection, MHD_HTTP_OK, static_cast<const MetricsServer*>(server)->text(),
                   "text/plain; version=0.0.4; charset=utf-8");
}

[[noreturn]] void fail(const ListenAddress& address, const std::string& why) {
  throw ConfigError("RANKTIME_METRICS_ADDR='" + address.text + "': " + why);
}

}  // namespace

MetricsServer::MetricsServer(const ListenAddress& address)
    : snapshot_(std::make_shared<MetricsSnapshot>()) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(address.port);
  if (int err = getaddrinfo(address.host.c_str(), port.c_str(), &hints, &found); err != 0)
    fail(address, std::string("cannot resolve the host: ") + gai_strerror(err));
  const unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                         (found->ai_family == AF_INET6 ? static_cast<unsigned>(MHD_USE_IPv6) : 0u);
  daemon_ =
      MHD_start_daemon(flags, static_cast<uint16_t>(address.port), nullptr, nullptr, &on_request,
                       this, MHD_OPTION_SOCK_ADDR, found->ai_addr, MHD_OPTION_CONNECTION_LIMIT,
                       kConnectionLimit, MHD_OPTION_CONNECTION_TIMEOUT, kIdleTimeoutS,
                       MHD_OPTION_CONNECTION_MEMORY_LIMIT, kConnectionMemory, MHD_OPTION_END);
  freeaddrinfo(found);
  if (daemon_ == nullptr) fail(address, "cannot listen there (in use, or not this host's)");
  RANKTIME_LOG(kInfo, "metrics at http://" << address.text << "/metrics");
}

MetricsServer::~MetricsServer() {
  if (daemon_) MHD_stop_daemon(daemon_);
}

void MetricsServer::publish(std::shared_ptr<const MetricsSnapshot> snapshot) {
  std::lock_guard<std::mutex> lock(mutex_);
  snapshot_.swap(snapshot);
}  // the old snapshot is freed here, outside the lock

std::string MetricsServer::text() const {
  std::shared_ptr<const MetricsSnapshot> copy;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    copy = snapshot_;
  }
  return format_metrics(*copy);
}

}  // namespace ranktime
