// The Prometheus text format of a metrics snapshot (see metrics.h).
#include "live/metrics.h"

#include <charconv>
#include <cmath>

namespace ranktime {
namespace {

std::string number(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "+Inf" : "-Inf";
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), x);
  return std::string(buf, ec == std::errc() ? end : buf);
}

// Appends one metric family: its HELP and TYPE lines, then samples added by the caller.
class Family {
 public:
  Family(std::string* out, const char* name, const char* type, const char* help)
      : out_(out), name_(name) {
    *out_ += "# HELP ";
    *out_ += name;
    *out_ += ' ';
    *out_ += help;
    *out_ += "\n# TYPE ";
    *out_ += name;
    *out_ += ' ';
    *out_ += type;
    *out_ += '\n';
  }
  // `labels`: already formatted, `a="x",b="y"` or empty.
  void sample(double value, const std::string& labels = {}, const char* suffix = "") {
    *out_ += name_;
    *out_ += suffix;
    if (!labels.empty()) *out_ += "{" + labels + "}";
    *out_ += ' ';
    *out_ += number(value);
    *out_ += '\n';
  }

 private:
  std::string* out_;
  const char* name_;
};

std::string rank_labels(const MetricsSnapshot::Rank& r) {
  return "rank=\"" + std::to_string(r.rank) + "\",host=\"" + escape_label_value(r.host) + "\"";
}

}  // namespace

std::string escape_label_value(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string format_metrics(const MetricsSnapshot& s) {
  std::string out;
  out.reserve(1024 + 400 * s.ranks.size());
  Family(&out, "ranktime_steps_total", "counter", "Steps rank 0 has marked.")
      .sample(static_cast<double>(s.steps));
  Family(&out, "ranktime_step_last_seconds", "gauge", "Rank 0's last finished step.")
      .sample(s.last_step_s);
  {
    Family f(&out, "ranktime_step_seconds", "histogram", "Rank 0's step times.");
    uint64_t cumulative = 0;
    for (size_t i = 0; i < s.step_buckets.size(); ++i) {
      cumulative += s.step_buckets[i];
      f.sample(static_cast<double>(cumulative),
               "le=\"" + number(MetricsSnapshot::kStepBuckets[i]) + "\"", "_bucket");
    }
    f.sample(static_cast<double>(s.step_count), "le=\"+Inf\"", "_bucket");
    f.sample(s.step_sum_s, {}, "_sum");
    f.sample(static_cast<double>(s.step_count), {}, "_count");
  }
  {
    Family f(&out, "ranktime_last_ready_total", "counter",
             "Negotiations in which this rank was the last to be ready.");
    for (const auto& r : s.ranks) f.sample(static_cast<double>(r.times_last), rank_labels(r));
  }
  {
    Family f(&out, "ranktime_lateness_median_seconds", "gauge",
             "Median lag behind the first rank over the recent negotiations.");
    for (const auto& r : s.ranks) f.sample(r.lateness_median_s, rank_labels(r));
  }
  {
    Family f(&out, "ranktime_lateness_p95_seconds", "gauge",
             "95th percentile of the lag behind the first rank over the recent negotiations.");
    for (const auto& r : s.ranks) f.sample(r.lateness_p95_s, rank_labels(r));
  }
  bool cost_known = false;
  for (const auto& r : s.ranks) cost_known = cost_known || r.cost_s >= 0;
  if (cost_known) {
    Family f(&out, "ranktime_cost_seconds_total", "counter",
             "How much sooner the steps would have ended had this rank been on time.");
    for (const auto& r : s.ranks) f.sample(std::max(r.cost_s, 0.0), rank_labels(r));
  }
  {
    Family f(&out, "ranktime_stalled", "gauge",
             "1 while this rank has not submitted a tensor others submitted over "
             "RANKTIME_STALL_WARNING_S ago.");
    for (const auto& r : s.ranks) f.sample(r.stalled ? 1 : 0, rank_labels(r));
  }
  {
    Family ops(&out, "ranktime_operations_total", "counter",
               "Collective operations rank 0 executed (a fused batch counts once).");
    for (const auto& o : s.operations)
      ops.sample(static_cast<double>(o.operations), "op=\"" + escape_label_value(o.op) + "\"");
  }
  {
    Family bytes(&out, "ranktime_bytes_total", "counter",
                 "Bytes of rank 0's tensors reduced, "
                 "gathered or sent, per operation.");
    for (const auto& o : s.operations)
      bytes.sample(static_cast<double>(o.bytes), "op=\"" + escape_label_value(o.op) + "\"");
  }
  Family(&out, "ranktime_alerts_total", "counter", "Alerts fired.")
      .sample(static_cast<double>(s.alerts));
  Family(&out, "ranktime_timeline_bytes", "gauge", "Size of the timeline file on disk.")
      .sample(static_cast<double>(s.timeline_bytes));
  Family(&out, "ranktime_events_dropped_total", "counter",
         "Timeline events dropped (the writer's buffer was full).")
      .sample(static_cast<double>(s.events_dropped));
  return out;
}

}  // namespace ranktime
