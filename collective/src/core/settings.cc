// The settings table (see settings.h) and the parsers its field types use.
#include "core/settings.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace ranktime {
namespace {

[[noreturn]] void fail(const char* name, const std::string& value, const char* expected) {
  throw ConfigError(std::string(name) + "='" + value + "' is not valid: expected " + expected);
}

bool parse_bool(const char* name, const std::string& v) {
  if (v == "1" || v == "true" || v == "TRUE" || v == "True" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "FALSE" || v == "False" || v == "no" || v == "off")
    return false;
  fail(name, v, "1/0, true/false, yes/no or on/off");
}

double parse_number(const char* name, const std::string& v, double min, bool min_inclusive,
                    const char* expected) {
  char* end = nullptr;
  errno = 0;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || errno != 0 || !std::isfinite(x) ||
      (min_inclusive ? x < min : x <= min)) {
    fail(name, v, expected);
  }
  return x;
}

int64_t parse_int(const char* name, const std::string& v, int64_t min, const char* expected) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || end != v.c_str() + v.size() || errno != 0 || x < min) fail(name, v, expected);
  return x;
}

// Any case, as Horovod reads HOROVOD_LOG_LEVEL; its `fatal` (nothing below errors) is `error`.
LogLevel parse_log_level(const char* name, const std::string& text) {
  std::string v = text;
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (auto level : {LogLevel::kTrace, LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning,
                     LogLevel::kError}) {
    if (v == log_level_name(level)) return level;
  }
  if (v == "warn") return LogLevel::kWarning;
  if (v == "fatal") return LogLevel::kError;
  fail(name, text, "one of trace, debug, info, warning, error");
}

// "START:END[:EVERY]" with 0 <= START < END and EVERY >= 1; "" is off.
StepWindow parse_step_window(const char* name, const std::string& v) {
  StepWindow w;
  if (v.empty()) return w;
  int64_t parts[3] = {0, 0, 1};
  size_t n = 0, at = 0;
  while (n < 3) {
    const size_t colon = std::min(v.find(':', at), v.size());
    const char* first = v.data() + at;
    const char* last = v.data() + colon;
    auto [end, ec] = std::from_chars(first, last, parts[n]);
    if (first == last || ec != std::errc() || end != last) break;
    ++n;
    at = colon + 1;
    if (colon == v.size()) break;
  }
  if (n < 2 || at <= v.size() || parts[0] < 0 || parts[1] <= parts[0] || parts[2] < 1)
    fail(name, v, "START:END or START:END:EVERY with 0 <= START < END and EVERY >= 1");
  w.on = true;
  w.start = parts[0];
  w.end = parts[1];
  w.every = parts[2];
  return w;
}

// "R,R,..." (ranks >= 0, each once; rank 0 is added) or "slowest:K" (K >= 1); "" is off. Whether
// the ranks exist is checked once the job's size is known (inspection/lane_choice.h).
LaneRanks parse_lane_ranks(const char* name, const std::string& v) {
  constexpr const char* kExpected = "a list of ranks such as 0,5,17, or slowest:K with K >= 1";
  LaneRanks lanes;
  if (v.empty()) return lanes;
  lanes.on = true;
  lanes.text = v;
  const auto integer = [&](size_t from, size_t to) {
    int value = 0;
    auto [end, ec] = std::from_chars(v.data() + from, v.data() + to, value);
    if (from == to || ec != std::errc() || end != v.data() + to || value < 0)
      fail(name, v, kExpected);
    return value;
  };
  const std::string slowest = "slowest:";
  if (v.compare(0, slowest.size(), slowest) == 0) {
    lanes.slowest = integer(slowest.size(), v.size());
    if (lanes.slowest < 1) fail(name, v, kExpected);
    return lanes;
  }
  for (size_t at = 0; at <= v.size();) {
    const size_t comma = std::min(v.find(',', at), v.size());
    const int rank = integer(at, comma);
    if (std::count(lanes.ranks.begin(), lanes.ranks.end(), rank) != 0)
      fail(name, v, "each rank once");
    lanes.ranks.push_back(rank);
    at = comma + 1;
  }
  if (std::count(lanes.ranks.begin(), lanes.ranks.end(), 0) == 0) lanes.ranks.push_back(0);
  std::sort(lanes.ranks.begin(), lanes.ranks.end());
  return lanes;
}

// "HOST:PORT" with HOST named (no default interface) and 1 <= PORT <= 65535; "[V6]:PORT" for an
// IPv6 address. "" is off. Whether HOST resolves is checked when the server starts.
ListenAddress parse_listen_address(const char* name, const std::string& v) {
  constexpr const char* kExpected =
      "HOST:PORT with HOST named (127.0.0.1 for this machine only) and PORT 1-65535";
  ListenAddress a;
  if (v.empty()) return a;
  const size_t colon = v.rfind(':');
  if (colon == std::string::npos || colon == 0) fail(name, v, kExpected);
  std::string host = v.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') fail(name, v, kExpected);
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    fail(name, v, kExpected);  // an IPv6 address needs its brackets
  }
  for (char c : host) {
    if (c <= ' ' || c == '/' || c == '[' || c == ']' || c == 0x7f) fail(name, v, kExpected);
  }
  int port = 0;
  const char* first = v.data() + colon + 1;
  const char* last = v.data() + v.size();
  auto [end, ec] = std::from_chars(first, last, port);
  if (first == last || ec != std::errc() || end != last || port < 1 || port > 65535)
    fail(name, v, kExpected);
  a.on = true;
  a.host = host;
  a.port = port;
  a.text = v;
  return a;
}

// Shortest text that parses back to the same double.
std::string number_text(double x) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), x);
  return std::string(buf, ec == std::errc() ? end : buf);
}

// Overloads for std::visit.
template <typename... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <typename... F>
Overloaded(F...) -> Overloaded<F...>;

std::vector<Setting> make_settings() {
  using F = FlagForm;
  // Rows in describe() order: append new variables anywhere, but never reorder these (the order
  // is in every trace's run metadata).
  return {
      Setting("TIMELINE_FILENAME", &Config::timeline_filename, "",
              "rank 0 writes the timeline here; empty: off")
          .horovod("HOROVOD_TIMELINE", "DYNAMIC", "")
          .run_flag("--timeline-filename", F::kPath, "write the timeline here"),
      Setting("TIMELINE_MARK_CYCLES", &Config::timeline_mark_cycles, "0",
              "a CYCLE_START instant per coordination cycle")
          .horovod("HOROVOD_TIMELINE_MARK_CYCLES")
          .run_switch("--timeline-mark-cycles", "1", "cycle-start markers"),
      Setting("TIMELINE_ALL_RANKS", &Config::timeline_all_ranks, "1",
              "every rank's processing lanes in the timeline (Horovod keeps rank 0's only)")
          .run_switch("--no-timeline-all-ranks", "0", "keep rank 0's processing lanes only"),
      Setting("TIMELINE_STEPS", &Config::timeline_steps, "",
              "START:END[:EVERY]: record lanes, negotiations and ticks of these steps only "
              "(marked by mark_step()); empty: every step")
          .run_flag("--timeline-steps", F::kValue),
      Setting(
          "TIMELINE_MAX_MB", &Config::timeline_max_mb, "0",
          "rotate the timeline into NAME.1.json, NAME.2.json, ... at this many MiB; 0: one file")
          .at_least(0, "MiB >= 0")
          .run_flag("--timeline-max-mb", F::kValue),
      Setting("TIMELINE_KEEP_FILES", &Config::timeline_keep_files, "0",
              "with TIMELINE_MAX_MB: keep the newest N files of a rotation; 0: all")
          .at_least(0, "a file count >= 0")
          .run_flag("--timeline-keep-files", F::kValue),
      // At 1,024 ranks every rank's lanes are about two thirds of the file (docs/benchmarks.md);
      // the ranks not chosen do not even ship their lanes to rank 0.
      Setting("TIMELINE_RANKS", &Config::timeline_ranks, "",
              "whose processing lanes are written besides rank 0's: ranks such as 5,17, or "
              "slowest:K (the K ranks most often last lately, chosen again every second); every "
              "rank's ticks and step marks stay; empty: TIMELINE_ALL_RANKS decides")
          .run_flag("--timeline-ranks", F::kValue),
      // 64 MiB keeps a whole ResNet-50 step's small tensors in a handful of batches.
      Setting("RANKTIME_FUSION_THRESHOLD", &Config::fusion_threshold, "67108864",
              "bytes one fused batch may hold; 0 disables fusion")
          .at_least(0, "a byte count >= 0")
          .horovod("HOROVOD_FUSION_THRESHOLD")
          .run_flag("--fusion-threshold-mb", F::kMebibytes,
                    "fusion buffer in MiB, 0 disables fusion"),
      // A fused batch is packed, reduced and unpacked a chunk at a time while the chunk is in
      // cache, so copying even large tensors costs less than their separate calls (the ResNet-50
      // set fused whole beats 161 raw calls; see docs/benchmarks.md). A limit remains for hosts
      // where it does not.
      Setting("RANKTIME_FUSION_MAX_TENSOR", &Config::fusion_max_tensor, "0",
              "host tensors of at least this many bytes are reduced in place, unfused; 0: no "
              "limit")
          .at_least(0, "a byte count >= 0"),
      // Open MPI allocates a temporary as large as the call on every call; at a few MiB the
      // allocator reuses it, at tens of MiB it maps fresh pages every time, and the page faults
      // more than double the time. 512 KiB also keeps a fused batch's stage and the tensors it
      // comes from in a core's L2 cache between its copy in, its reduction and its copy out:
      // fastest for the ResNet-50 step of 256 KiB-2 MiB, within 3% of the best at 64 MiB in
      // place (see docs/benchmarks.md).
      Setting("RANKTIME_ALLREDUCE_CHUNK", &Config::allreduce_chunk, "524288",
              "the most bytes one MPI_Allreduce call reduces, and one stage of a fused batch "
              "holds; 0: one call")
          .at_least(0, "a byte count >= 0"),
      // 1,024 holds every gradient of ResNet-50 (161) or BERT-base (~200) with room; a slot costs
      // rank 0 about 9 bytes per rank. Rank 0's value holds: the others follow its ids.
      Setting("RANKTIME_CACHE_CAPACITY", &Config::cache_capacity, "1024",
              "tensors the response cache holds (repeated requests travel as 12-byte (id, ready "
              "time) pairs); 0 disables it")
          .at_least(0, "a tensor count >= 0")
          .horovod("HOROVOD_CACHE_CAPACITY")
          .run_flag("--cache-capacity", F::kValue),
      Setting("RANKTIME_CYCLE_TIME_MS", &Config::cycle_time_ms, "5",
              "longest wait between rank 0's cycles when idle (other ranks: 8 times that)")
          .above(0, "milliseconds > 0")
          .horovod("HOROVOD_CYCLE_TIME")
          .run_flag("--cycle-time-ms", F::kValue),
      // A peer that is nearly there answers within tens of microseconds; past that, polling
      // only takes the core that a late peer (or the training thread) needs. Where every rank
      // has cores of its own, a longer spin notices a peer arriving within it up to one sleep
      // (at most 200 us) sooner, for the CPU it spins.
      Setting("RANKTIME_SPIN_US", &Config::spin_us, "30",
              "how long the background thread polls without sleeping for the next message after "
              "progress, or for the other ranks at a collective, before it sleeps between polls")
          .at_least(0, "microseconds >= 0"),
      Setting("RANKTIME_STALL_WARNING_S", &Config::stall_warning_s, "60",
              "warn about ranks that have not submitted")
          .above(0, "seconds > 0")
          .horovod("HOROVOD_STALL_CHECK_TIME_SECONDS")
          .run_flag("--stall-check-warning-time-seconds", F::kValue),
      Setting("RANKTIME_STALL_SHUTDOWN_S", &Config::stall_shutdown_s, "0",
              "fail instead of hanging (0: never)")
          .at_least(0, "seconds >= 0")
          .horovod("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS")
          .run_flag("--stall-check-shutdown-time-seconds", F::kValue, "fail instead of hanging"),
      // Heartbeats go every second (or a quarter of the timeout): a silent peer died or hangs.
      Setting("RANKTIME_PEER_TIMEOUT_S", &Config::peer_timeout_s, "60",
              "fail every operation when a rank has been silent this long, e.g. died; 0 waits "
              "forever")
          .at_least(0, "seconds >= 0")
          .run_flag("--peer-timeout-seconds", F::kValue),
      // 5 ms is well above scheduling noise.
      Setting("RANKTIME_STRAGGLER_THRESHOLD_MS", &Config::straggler_threshold_ms, "5",
              "warn when one rank is last in most negotiations with at least this median lag "
              "(0: never)")
          .at_least(0, "milliseconds >= 0"),
      Setting("RANKTIME_STRAGGLER_WARNING_INTERVAL_S", &Config::straggler_warning_interval_s, "60",
              "at most one straggler warning per this many seconds")
          .at_least(0, "seconds >= 0"),
      Setting("RANKTIME_LOG_LEVEL", &Config::log_level, "warning",
              "trace, debug, info, warning or error (any case; Horovod's fatal is error)")
          .horovod("HOROVOD_LOG_LEVEL")
          .run_flag("--log-level", F::kValue),
      Setting("RANKTIME_TEST_CLOCK_SKEW_US", &Config::test_clock_skew_us, "0",
              "testing aid: shifts this process's clock")
          .at_least(INT64_MIN / 2, "an integer number of microseconds"),
      // Across hosts, a flat allreduce sends each rank's share over the link; host-aware, only
      // one leader per host does (docs/multihost.md).
      Setting("RANKTIME_HIERARCHICAL_ALLREDUCE", &Config::hierarchical_allreduce, "0",
              "allreduce within each host, then across hosts (host memory: MPI reduce, leaders' "
              "allreduce, broadcast; GPU: NCCL inside, MPI or NCCL across)")
          .horovod("HOROVOD_HIERARCHICAL_ALLREDUCE")
          .run_switch("--hierarchical-allreduce", "1", "allreduce within each host, then across"),
      Setting("RANKTIME_TEST_FAIL_LOCAL", &Config::test_fail_local, "",
              "testing aid: RANK:TENSOR fails that rank's copy of that tensor (outcome agreement)"),
      // `ranktime run` sets it to a file of its own and prints the file after mpirun returns.
      Setting("RANKTIME_STATUS_FILE", &Config::status_file, "",
              "a doomed job's first rank to give up writes why here before the job is aborted"),
      // Off by default: a port is only opened when asked for, on the interface named.
      Setting("RANKTIME_METRICS_ADDR", &Config::metrics_addr, "",
              "rank 0 serves Prometheus metrics at http://HOST:PORT/metrics (127.0.0.1:PORT: "
              "this machine only); empty: off")
          .run_flag("--metrics-addr", F::kValue),
      // The alert rule: the same rank last, with at least this lag, in K of the last N steps.
      // 5 ms, as the straggler warning's threshold: well above scheduling noise.
      Setting("RANKTIME_ALERT_MIN_LAG_MS", &Config::alert_lag_ms, "5",
              "alert when one rank is the last to be ready with at least this lag (the largest in "
              "its step) in RANKTIME_ALERT_TIMES of the last RANKTIME_ALERT_STEPS steps; 0: never")
          .at_least(0, "milliseconds >= 0")
          .run_flag("--alert-min-lag-ms", F::kValue),
      Setting("RANKTIME_ALERT_TIMES", &Config::alert_times, "3",
              "K: how many of the last RANKTIME_ALERT_STEPS steps the same rank must be last in")
          .at_least(1, "a step count >= 1")
          .run_flag("--alert-times", F::kValue),
      // Five steps: a slowdown is told within two steps of its third occurrence, and one late
      // step (a checkpoint, a garbage collection) never alerts alone.
      Setting("RANKTIME_ALERT_STEPS", &Config::alert_steps, "5",
              "N: the steps the alert rule looks back over (at least RANKTIME_ALERT_TIMES)")
          .at_least(1, "a step count >= 1")
          .run_flag("--alert-steps", F::kValue),
      Setting("RANKTIME_ALERT_MIN_COST_PCT", &Config::alert_cost_pct, "0",
              "also alert when one rank's cost (how much sooner its step would have ended had "
              "it been on time) is at least this percentage of the step; 0: off")
          .at_least(0, "a percentage >= 0")
          .run_flag("--alert-min-cost-pct", F::kValue),
      Setting("RANKTIME_ALERT_COMMAND", &Config::alert_command, "",
              "a shell command rank 0 runs (through /bin/sh -c, in the background) when an alert "
              "fires, with RANKTIME_ALERT_RANK, _HOST, _LAG_MS, _COST_PCT, _REASON and _STEP in "
              "its environment")
          .run_flag("--alert-command", F::kValue),
      Setting("RANKTIME_ALERT_COMMAND_TIMEOUT_S", &Config::alert_command_timeout_s, "10",
              "the alert command (and its process group) is killed after this many seconds")
          .above(0, "seconds > 0"),
      Setting("RANKTIME_ALERT_INTERVAL_S", &Config::alert_interval_s, "60",
              "at most one alert per this many seconds")
          .at_least(0, "seconds >= 0")
          .run_flag("--alert-interval-seconds", F::kValue),
      // A long job's timeline where it matters: the slowdown, not the hours before it. Memory:
      // at most 65,536 records (sizeof(Record) bytes each) per held step on rank 0.
      Setting("TIMELINE_ON_ALERT", &Config::timeline_on_alert, "0",
              "with TIMELINE_FILENAME: write nothing but keep the last K steps in memory; when an "
              "alert or a stall warning fires, write them and the K steps after into "
              "NAME.alert1.json, NAME.alert2.json, ...; 0: write the whole run")
          .at_least(0, "a step count >= 0")
          .run_flag("--timeline-on-alert", F::kValue),
      Setting("RANKTIME_STALL_CHECK_DISABLE", &Config::stall_check_disable, "0",
              "no stall warnings and no stall shutdown")
          .horovod("HOROVOD_STALL_CHECK_DISABLE")
          .run_switch("--no-stall-check", "1"),
      // Horovod's default is 30 s; here off, so that a slow start (imports on a loaded host) is
      // not a failure unless asked for.
      Setting("RANKTIME_START_TIMEOUT_S", &Config::start_timeout_s, "0",
              "init() gives up when not every rank has started within this many seconds (0: "
              "waits)")
          .at_least(0, "seconds >= 0")
          .horovod("HOROVOD_START_TIMEOUT")
          .run_flag("--start-timeout", F::kValue),
      // Set by `ranktime run --host-discovery-script` for each attempt of an elastic job
      // (launcher/elastic.cc). They reach each attempt's trace in its run metadata's config: which
      // attempt it is and why the job restarted (ranktime summary puts the attempts in a row).
      Setting("RANKTIME_ELASTIC_ATTEMPT", &Config::elastic_attempt, "0",
              "elastic jobs: this attempt's number (0 the first, then one per restart)")
          .at_least(0, "an attempt number >= 0"),
      Setting("RANKTIME_ELASTIC_RESTART_REASON", &Config::elastic_restart_reason, "",
              "elastic jobs: why the previous attempt ended (the lost host, mpirun's words)"),
      Setting("RANKTIME_ELASTIC_DIR", &Config::elastic_dir, "",
              "elastic jobs: where each host keeps ranktime.elastic's newest commit (Python)"),
  };
}

}  // namespace

Setting::Setting(const char* variable_name, SettingField setting_field, const char* default_value,
                 const char* one_line_why)
    : variable(variable_name),
      field(setting_field),
      default_text(default_value),
      why(one_line_why) {}

Setting& Setting::at_least(int64_t min, const char* expected_text) {
  bound = min;
  bound_allowed = true;
  expected = expected_text;
  return *this;
}

Setting& Setting::above(int64_t min, const char* expected_text) {
  bound = min;
  bound_allowed = false;
  expected = expected_text;
  return *this;
}

Setting& Setting::run_flag(const char* flag_name, FlagForm form, const char* help) {
  flag = flag_name;
  flag_form = form;
  flag_help = help ? help : why;
  return *this;
}

Setting& Setting::horovod(const char* name, const char* special, const char* means) {
  horovod_name = name;
  horovod_special = special;
  horovod_means = means;
  return *this;
}

Setting& Setting::run_switch(const char* flag_name, const char* value, const char* help) {
  run_flag(flag_name, FlagForm::kSwitch, help);
  switch_value = value;
  return *this;
}

void Setting::parse(const std::string& text, Config* config, const char* as) const {
  const char* name = as != nullptr ? as : variable;
  std::visit(Overloaded{
                 [&](std::string Config::*f) { config->*f = text; },
                 [&](bool Config::*f) { config->*f = parse_bool(name, text); },
                 [&](int64_t Config::*f) {
                   // Integers take no exclusive bound (none needs one).
                   config->*f = parse_int(name, text, bound, expected);
                 },
                 [&](double Config::*f) {
                   config->*f = parse_number(name, text, static_cast<double>(bound), bound_allowed,
                                             expected);
                 },
                 [&](LogLevel Config::*f) { config->*f = parse_log_level(name, text); },
                 [&](StepWindow Config::*f) { config->*f = parse_step_window(name, text); },
                 [&](LaneRanks Config::*f) { config->*f = parse_lane_ranks(name, text); },
                 [&](ListenAddress Config::*f) { config->*f = parse_listen_address(name, text); },
             },
             field);
}

std::string Setting::show(const Config& config) const {
  return std::visit(Overloaded{
                        [&](std::string Config::*f) { return config.*f; },
                        [&](bool Config::*f) { return std::string(config.*f ? "1" : "0"); },
                        [&](int64_t Config::*f) { return std::to_string(config.*f); },
                        [&](double Config::*f) { return number_text(config.*f); },
                        [&](LogLevel Config::*f) { return std::string(log_level_name(config.*f)); },
                        [&](StepWindow Config::*f) {
                          const StepWindow& w = config.*f;
                          if (!w.on) return std::string();
                          return std::to_string(w.start) + ":" + std::to_string(w.end) +
                                 (w.every == 1 ? "" : ":" + std::to_string(w.every));
                        },
                        [&](LaneRanks Config::*f) { return (config.*f).text; },
                        [&](ListenAddress Config::*f) { return (config.*f).text; },
                    },
                    field);
}

const std::vector<Setting>& settings() {
  static const std::vector<Setting> table = make_settings();
  return table;
}

}  // namespace ranktime
