// `ranktime top` (see top_command.h).
#include "top_command.h"

#include <netdb.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

namespace ranktime::cli {
namespace {

constexpr int kTimeoutMs = 2000;
constexpr size_t kMaxPage = 64 << 20;  // a page past this is not a metrics page

// GET http://address/metrics; the body, or an error in `error`.
std::string fetch_metrics(const std::string& address, std::string* error) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    *error = "address '" + address + "' is not HOST:PORT";
    return {};
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int err = getaddrinfo(host.c_str(), address.c_str() + colon + 1, &hints, &found); err) {
    *error = "cannot resolve " + address + ": " + gai_strerror(err);
    return {};
  }
  int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool connected = fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0;
  freeaddrinfo(found);
  if (!connected) {
    if (fd >= 0) close(fd);
    *error = "cannot connect to " + address + " (is the job running with --metrics-addr?)";
    return {};
  }
  const std::string request =
      "GET /metrics HTTP/1.1\r\nHost: " + address + "\r\nConnection: close\r\n\r\n";
  std::string response;
  bool ok = send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(request.size());
  char buf[65536];
  while (ok) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, kTimeoutMs) <= 0) {
      ok = false;
      break;
    }
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0) ok = false;
    if (n <= 0) break;
    response.append(buf, static_cast<size_t>(n));
    if (response.size() > kMaxPage) ok = false;
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (!ok || body == std::string::npos || response.compare(0, 9, "HTTP/1.1 ") != 0 ||
      response.compare(9, 3, "200") != 0) {
    *error = "no metrics page from http://" + address + "/metrics";
    return {};
  }
  // The server sends Content-Length (no chunks): the body is the rest.
  return response.substr(body + 4);
}

// Parses `"value"` at text[at] (after the quote); returns the position past the closing quote.
size_t parse_label_value(const std::string& line, size_t at, std::string* value) {
  while (at < line.size() && line[at] != '"') {
    if (line[at] == '\\' && at + 1 < line.size()) {
      ++at;
      *value += line[at] == 'n' ? '\n' : line[at];
    } else {
      *value += line[at];
    }
    ++at;
  }
  return at < line.size() ? at + 1 : std::string::npos;
}

bool parse_line(const std::string& line, MetricSample* s) {
  size_t at = 0;
  while (at < line.size() &&
         (std::isalnum(static_cast<unsigned char>(line[at])) || line[at] == '_' || line[at] == ':'))
    ++at;
  if (at == 0) return false;
  s->name = line.substr(0, at);
  if (at < line.size() && line[at] == '{') {
    ++at;
    while (at < line.size() && line[at] != '}') {
      const size_t eq = line.find("=\"", at);
      if (eq == std::string::npos) return false;
      std::string key = line.substr(at, eq - at), value;
      at = parse_label_value(line, eq + 2, &value);
      if (at == std::string::npos) return false;
      s->labels[key] = value;
      if (at < line.size() && line[at] == ',') ++at;
    }
    if (at >= line.size()) return false;
    ++at;
  }
  while (at < line.size() && line[at] == ' ') ++at;
  const std::string number = line.substr(at, line.find(' ', at) - at);
  if (number.empty()) return false;
  char* end = nullptr;
  s->value = std::strtod(number.c_str(), &end);
  return end == number.c_str() + number.size();
}

struct Row {
  int rank = 0;
  std::string host;
  double lag_s = 0, times_last = 0, cost_s = -1;
  bool stalled = false;
};

std::string fixed(double x, const char* format) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), format, x);
  return buf;
}

// Control characters of an untrusted hostname never reach the terminal.
std::string printable(const std::string& text, size_t width) {
  std::string out;
  for (char c : text.substr(0, width))
    out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  out.resize(width, ' ');
  return out;
}

volatile std::sig_atomic_t g_stop = 0;

}  // namespace

std::vector<MetricSample> parse_metrics_text(const std::string& text) {
  std::vector<MetricSample> samples;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    MetricSample s;
    if (parse_line(line, &s)) samples.push_back(std::move(s));
  }
  return samples;
}

std::string top_frame(const std::vector<MetricSample>& samples, const std::string& address,
                      int width) {
  std::map<int, Row> rows;
  double steps = 0, last_step_s = 0;
  bool cost_known = false;
  for (const MetricSample& s : samples) {
    if (s.name == "ranktime_steps_total") steps = s.value;
    if (s.name == "ranktime_step_last_seconds") last_step_s = s.value;
    auto rank = s.labels.find("rank");
    if (rank == s.labels.end()) continue;
    const int r = std::atoi(rank->second.c_str());
    Row& row = rows[r];
    row.rank = r;
    if (auto host = s.labels.find("host"); host != s.labels.end()) row.host = host->second;
    if (s.name == "ranktime_lateness_median_seconds") row.lag_s = s.value;
    if (s.name == "ranktime_last_ready_total") row.times_last = s.value;
    if (s.name == "ranktime_stalled") row.stalled = s.value != 0;
    if (s.name == "ranktime_cost_seconds_total") {
      row.cost_s = s.value;
      cost_known = true;
    }
  }
  std::vector<Row> sorted;
  for (auto& [r, row] : rows) sorted.push_back(row);
  std::stable_sort(sorted.begin(), sorted.end(), [](const Row& a, const Row& b) {
    if (a.cost_s != b.cost_s) return a.cost_s > b.cost_s;
    return a.lag_s > b.lag_s;
  });
  double max_lag = 0;
  for (const Row& row : sorted) max_lag = std::max(max_lag, row.lag_s);
  std::string stalled;
  for (const Row& row : sorted)
    if (row.stalled) stalled += (stalled.empty() ? "" : ",") + std::to_string(row.rank);

  std::string out = "ranktime top  " + address + "  step " + fixed(steps, "%.0f") + "  last step " +
                    fixed(last_step_s * 1e3, "%.1f") +
                    " ms  stalled: " + (stalled.empty() ? "none" : "ranks " + stalled) + "\n";
  const int bar_width = std::clamp(width - 56, 10, 40);
  out += " rank  host                  " + printable("median lag", bar_width) +
         "  lag ms   times last  cost s\n";
  for (const Row& row : sorted) {
    const int filled =
        max_lag > 0 ? static_cast<int>(std::lround(row.lag_s / max_lag * bar_width)) : 0;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(static_cast<size_t>(bar_width), ' ');
    out += fixed(row.rank, "%5.0f") + "  " + printable(row.host, 20) + "  " + bar + "  " +
           fixed(row.lag_s * 1e3, "%7.2f") + "  " + fixed(row.times_last, "%11.0f") + "  " +
           (cost_known ? fixed(row.cost_s, "%6.2f") : std::string("     -")) +
           (row.stalled ? "  STALLED" : "") + "\n";
  }
  return out;
}

CLI::App* add_top_command(CLI::App& app, TopCommandOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "top", "Live view of a running job from rank 0's metrics endpoint (--metrics-addr)");
  cmd->add_option("address", o->address,
                  "the endpoint's HOST:PORT (default: RANKTIME_METRICS_ADDR)");
  cmd->add_flag("--once", o->once, "print one frame and exit");
  cmd->add_option("--interval", o->interval_s, "seconds between refreshes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  return cmd;
}

int run_top(const TopCommandOptions& o) {
  std::string address = o.address;
  if (address.empty()) {
    const char* env = std::getenv("RANKTIME_METRICS_ADDR");
    if (env == nullptr || *env == '\0') {
      std::cerr << "ranktime top: error: no address: give HOST:PORT or set RANKTIME_METRICS_ADDR\n";
      return 2;
    }
    address = env;
  }
  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  while (true) {
    std::string error;
    const std::string page = fetch_metrics(address, &error);
    winsize ws{};
    const int width = ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col ? ws.ws_col : 100;
    if (o.once) {
      if (!error.empty()) {
        std::cerr << "ranktime top: error: " << error << "\n";
        return 1;
      }
      std::cout << top_frame(parse_metrics_text(page), address, width) << std::flush;
      return 0;
    }
    std::cout << "\x1b[H\x1b[2J"
              << (error.empty() ? top_frame(parse_metrics_text(page), address, width)
                                : "ranktime top: " + error + "\n")
              << std::flush;
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(o.interval_s * 1000));
    while (!g_stop && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (g_stop) return 0;
  }
}

}  // namespace ranktime::cli
