// `ranktime merge`: the anchors' clock fit, the event mapping and the streamed merge itself.
#include "ranktime/timeline/profile_merge.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>

#include "ranktime/timeline/trace_names.h"
#include "ranktime/timeline/trace_reader.h"
#include "reader/gzip_input.h"
#include "trace_file.h"

namespace ranktime::timeline {

namespace {

using json = nlohmann::json;

constexpr double kShortSpanUs = 10'000;   // shorter anchor spans keep slope 1
constexpr double kMaxSlopeError = 0.01;   // profiler µs per ranktime µs, off 1
constexpr double kMaxResidualUs = 1'000;  // an anchor this far off the line: not one clock
constexpr double kMaxTraceUs = 1e13;      // ~116 days: later is a corrupt time
constexpr double kMaxDurUs = 1e12;        // ~11.6 days
constexpr uint64_t kMaxFlowId = uint64_t{1} << 32;
constexpr uint64_t kTorchFlowIdBase = uint64_t{1} << 52;  // clear of ranktime's own (1, 2, ...)
constexpr size_t kPieceBytes = size_t{1} << 20;           // output written in 1 MiB pieces

std::string quoted(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

// The value as text, a string's without its quotes (for thread names).
std::string plain(const std::string& dumped) {
  if (dumped.size() >= 2 && dumped.front() == '"') {
    return json::parse(dumped, nullptr, false).get<std::string>();
  }
  return dumped;
}

void append_us(double us, std::string* out) {
  char text[48];
  const int n = std::snprintf(text, sizeof text, "%.3f", us);
  out->append(text, static_cast<size_t>(n));
}

// The phases a ranktime timeline uses (ranktime check's rule); 'I' is written as 'i'. Async
// slices (b, e, n) are left out.
bool is_merged_phase(char ph) { return std::strchr("XBEiICstf", ph) != nullptr; }
bool is_id_phase(char ph) { return std::strchr("stf", ph) != nullptr; }

// An input stream over a plain or gzip file.
class InputFile {
 public:
  explicit InputFile(const std::string& path) : file_(path, std::ios::binary) {
    if (file_ && is_gzip_file(path)) {
      inflating_ = std::make_unique<InflatingBuffer>(file_.rdbuf());
      gz_ = std::make_unique<std::istream>(inflating_.get());
    }
  }
  bool opened() const { return static_cast<bool>(file_); }
  std::istream& stream() { return gz_ ? *gz_ : static_cast<std::istream&>(file_); }
  std::streambuf* buffer() {
    return gz_ ? static_cast<std::streambuf*>(inflating_.get()) : file_.rdbuf();
  }
  std::string problem() const { return inflating_ ? inflating_->problem() : ""; }

 private:
  std::ifstream file_;
  std::unique_ptr<InflatingBuffer> inflating_;
  std::unique_ptr<std::istream> gz_;
};

}  // namespace

std::optional<ClockFit> fit_anchors(const std::vector<AnchorPoint>& points, std::string* error) {
  if (points.empty()) {
    *error = "no anchors";
    return std::nullopt;
  }
  double sw = 0, sx = 0, sy = 0, lo = points[0].profiler_us, hi = lo;
  for (const AnchorPoint& p : points) {
    const double w = 1 / ((p.slack_us + 1) * (p.slack_us + 1));
    sw += w;
    sx += w * p.profiler_us;
    sy += w * p.trace_us;
    lo = std::min(lo, p.profiler_us);
    hi = std::max(hi, p.profiler_us);
  }
  ClockFit fit;
  fit.anchors = points.size();
  fit.x0 = sx / sw;
  fit.y0 = sy / sw;
  if (hi - lo >= kShortSpanUs) {
    double sxy = 0, sxx = 0;
    for (const AnchorPoint& p : points) {
      const double w = 1 / ((p.slack_us + 1) * (p.slack_us + 1));
      sxy += w * (p.profiler_us - fit.x0) * (p.trace_us - fit.y0);
      sxx += w * (p.profiler_us - fit.x0) * (p.profiler_us - fit.x0);
    }
    fit.slope = sxy / sxx;
  }
  if (!std::isfinite(fit.slope) || std::fabs(fit.slope - 1) > kMaxSlopeError) {
    *error = "the anchors do not fit one clock (slope " + std::to_string(fit.slope) +
             " profiler us per ranktime us)";
    return std::nullopt;
  }
  for (const AnchorPoint& p : points) {
    const double off = std::fabs(p.trace_us - fit.map(p.profiler_us)) - p.slack_us;
    fit.max_residual_us = std::max(fit.max_residual_us, std::max(off, 0.0));
  }
  if (!std::isfinite(fit.max_residual_us) || fit.max_residual_us > kMaxResidualUs) {
    *error = "the anchors do not fit one clock (one is " + std::to_string(fit.max_residual_us) +
             " us off the others' line)";
    return std::nullopt;
  }
  return fit;
}

void read_run_args(const json& args, TimelineRun* run) {
  if (!args.is_object()) return;
  auto numbers = [&](const char* key, auto* out) {
    out->clear();
    auto it = args.find(key);
    if (it == args.end() || !it->is_array()) return;
    for (const json& v : *it) {
      out->push_back(v.is_number() ? v.get<typename std::decay_t<decltype(*out)>::value_type>()
                                   : 0);
    }
  };
  auto ranks = args.find("ranks");
  if (ranks != args.end() && ranks->is_number_integer()) {
    const auto n = ranks->get<int64_t>();
    run->ranks = n > 0 && n <= kMaxTraceRanks ? n : 0;
  }
  numbers("pids", &run->pids);
  numbers("clock_offsets_us", &run->clock_offsets_us);
  numbers("clock_uncertainty_us", &run->clock_uncertainty_us);
  run->hostnames.clear();
  if (args.contains("hostnames") && args["hostnames"].is_array()) {
    for (const json& h : args["hostnames"]) {
      run->hostnames.push_back(h.is_string() ? h.get<std::string>() : "");
    }
  }
  auto zero = args.find("clock_zero_ns");
  if (zero != args.end() && zero->is_number_integer()) run->clock_zero_ns = zero->get<int64_t>();
}

void number_threads(const ProfileScan& scan, ProfilePlacement* placement) {
  placement->tids.clear();
  for (size_t i = 0; i < scan.threads.size(); ++i) {
    placement->tids.emplace(scan.threads[i].pid + '\x1f' + scan.threads[i].tid,
                            static_cast<int64_t>(i) + 1);
  }
}

std::string torch_process_text(const ProfileScan& scan, const ProfilePlacement& placement) {
  const int64_t pid = torch_process_pid(placement.rank);
  const std::string p = std::to_string(pid);
  std::string out = ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + p +
                    ",\"tid\":0,\"args\":{\"name\":\"rank " + std::to_string(placement.rank) +
                    " (torch)\"}}";
  out += ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + p +
         ",\"tid\":0,\"args\":{\"sort_index\":" + p + "}}";
  for (size_t i = 0; i < scan.threads.size(); ++i) {
    const ProfileThread& t = scan.threads[i];
    const std::string name = t.name.empty() ? plain(t.pid) + " / " + plain(t.tid) : t.name;
    const std::string tid = std::to_string(i + 1);
    out += ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + p + ",\"tid\":" + tid +
           ",\"args\":{\"name\":" + quoted(name) + "}}";
    out += ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" + p + ",\"tid\":" + tid +
           ",\"args\":{\"sort_index\":" + tid + "}}";
  }
  return out;
}

std::string merged_event_text(const json& event, const ProfilePlacement& placement,
                              uint64_t* skipped) {
  auto field = [&](const char* key) -> const json* {
    auto it = event.find(key);
    return it == event.end() ? nullptr : &*it;
  };
  const json* ph = field("ph");
  if (ph == nullptr || !ph->is_string() || ph->get_ref<const std::string&>().size() != 1) {
    ++*skipped;
    return "";
  }
  const char phase = ph->get_ref<const std::string&>()[0];
  if (!is_merged_phase(phase)) return "";  // metadata (renamed), samples, memory snapshots
  const json* name = field("name");
  const json* ts = field("ts");
  const json* dur = field("dur");
  auto tid = placement.tids.find(profile_thread_key(event));
  if (name == nullptr || !name->is_string() || ts == nullptr || !ts->is_number() ||
      tid == placement.tids.end() || (dur != nullptr && !dur->is_number())) {
    ++*skipped;
    return "";
  }
  const double start = placement.fit.map(ts->get<double>());
  const double length = dur == nullptr ? 0 : dur->get<double>() * placement.fit.slope;
  if (!std::isfinite(start) || std::fabs(start) > kMaxTraceUs || !std::isfinite(length) ||
      length < 0 || length > kMaxDurUs) {
    ++*skipped;
    return "";
  }
  if (placement.window && phase != 'B' && phase != 'E' &&
      (start + length < placement.window->first || start > placement.window->second)) {
    return "";
  }
  std::string out = "{\"name\":" + quoted(name->get_ref<const std::string&>());
  out += ",\"ph\":\"";
  out += phase;
  if (out.back() == 'I') out.back() = 'i';
  out += "\",\"pid\":" + std::to_string(torch_process_pid(placement.rank)) +
         ",\"tid\":" + std::to_string(tid->second) + ",\"ts\":";
  append_us(start, &out);
  if (phase == 'X') {
    out += ",\"dur\":";
    append_us(length, &out);
  }
  if (is_id_phase(phase)) {
    const json* id = field("id");
    if (id == nullptr || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<uint64_t>() >= kMaxFlowId) {
      ++*skipped;
      return "";
    }
    const uint64_t merged =
        kTorchFlowIdBase + (static_cast<uint64_t>(placement.rank) << 32) + id->get<uint64_t>();
    out += ",\"id\":" + std::to_string(merged);
    const json* bp = field("bp");
    if (bp != nullptr && *bp == "e") out += ",\"bp\":\"e\"";
  }
  const json* cat = field("cat");
  if (cat != nullptr && cat->is_string()) out += ",\"cat\":" + quoted(cat->get<std::string>());
  const json* scope = field("s");
  if ((phase == 'i' || phase == 'I') && scope != nullptr &&
      (*scope == "t" || *scope == "p" || *scope == "g")) {
    out += ",\"s\":" + scope->dump();
  }
  const json* args = field("args");
  if (args != nullptr && args->is_object() && !args->empty()) {
    out += ",\"args\":" + args->dump(-1, ' ', false, json::error_handler_t::replace);
  }
  out += '}';
  return out;
}

namespace {

// The timeline's first pass: its run, steps, and whether it ends cleanly.
bool read_timeline(const std::string& path, TimelineRun* run, uint64_t* text_end,
                   std::string* error) {
  std::map<int64_t, int64_t> step_threads;  // pid 0 tid -> rank
  bool has_run = false;
  std::vector<std::tuple<int64_t, int64_t, double, double>> steps;  // tid, step, begin, end
  TraceReadResult read = read_trace_file(path, [&](const TraceEvent& e) {
    if (e.pid == 0 && e.name == "ranktime_run" && !has_run) {
      has_run = true;
      read_run_args(e.args, run);
    } else if (e.pid == 0 && e.name == "thread_name" && e.args.is_object() &&
               e.args.contains("name") && e.args["name"].is_string()) {
      const int64_t r = step_thread_rank(e.args["name"].get<std::string>());
      if (r >= 0) step_threads[e.tid] = r;
    } else if (e.pid == 0 && e.phase() == 'X' && e.name == kStepSliceName && e.args.is_object() &&
               e.args.contains("step") && e.args["step"].is_number_integer()) {
      steps.emplace_back(e.tid, e.args["step"].get<int64_t>(), e.ts, e.ts + e.dur);
    } else if (torch_process_rank(e.pid) >= 0) {
      const auto r = static_cast<size_t>(torch_process_rank(e.pid));
      if (run->has_torch.size() <= r) run->has_torch.resize(r + 1);
      run->has_torch[r] = true;
    }
    return true;
  });
  if (!read.opened) {
    *error = read.error;
    return false;
  }
  if (!read.complete) {
    *error = read.error + (read.truncated ? " (repair it with ranktime check --repair first)" : "");
    return false;
  }
  if (!has_run || run->ranks == 0) {
    *error = "no ranktime_run metadata: not a ranktime timeline";
    return false;
  }
  if (!run->clock_zero_ns) {
    *error =
        "its ranktime_run has no clock_zero_ns (written by an older ranktime): it cannot "
        "place anchors";
    return false;
  }
  run->steps.assign(static_cast<size_t>(run->ranks), {});
  for (const auto& [tid, step, begin, end] : steps) {
    auto it = step_threads.find(tid);
    if (it != step_threads.end() && it->second < run->ranks) {
      run->steps[static_cast<size_t>(it->second)][step] = {begin, end};
    }
  }
  *text_end = read.last_event_end;
  return true;
}

struct PlannedProfile {
  std::string path;
  ProfileScan scan;
  ProfilePlacement placement;
  double uncertainty_us = 0;
};

// The second check of a scanned profile: that it belongs to this run, and where it goes.
bool place_profile(const TimelineRun& run, const MergeOptions& options, PlannedProfile* p,
                   std::string* error) {
  const ProfileIdentity& who = p->scan.identity;
  const int64_t r = who.rank;
  p->placement.rank = r;
  if (r >= run.ranks) {
    *error = "recorded by rank " + std::to_string(r) + ", but the timeline's run has " +
             std::to_string(run.ranks) + " ranks: it is from another run";
    return false;
  }
  const auto ri = static_cast<size_t>(r);
  if (ri < run.pids.size() &&
      (run.pids[ri] != who.pid || (ri < run.hostnames.size() && run.hostnames[ri] != who.host))) {
    *error = "from another run: recorded by pid " + std::to_string(who.pid) + " on host " +
             quoted(who.host) + ", but the timeline's rank " + std::to_string(r) + " was pid " +
             std::to_string(run.pids[ri]) + " on host " +
             quoted(ri < run.hostnames.size() ? run.hostnames[ri] : "?");
    return false;
  }
  if (ri >= run.clock_offsets_us.size()) {
    *error = "the timeline has no clock offset for rank " + std::to_string(r);
    return false;
  }
  const double offset_ns = run.clock_offsets_us[ri] * 1e3;
  std::vector<AnchorPoint> points;
  for (const auto& [n, a] : p->scan.anchors) {
    const double trace_us =
        (static_cast<double>(a.clock_ns - *run.clock_zero_ns) - offset_ns) / 1e3;
    points.push_back({a.profiler_us, trace_us, a.slack_us});
  }
  std::optional<ClockFit> fit = fit_anchors(points, error);
  if (!fit) return false;
  p->placement.fit = *fit;
  p->uncertainty_us = ri < run.clock_uncertainty_us.size() ? run.clock_uncertainty_us[ri] : 0;
  if (options.steps) {
    const auto& marks = run.steps[ri];
    auto first = marks.find(options.steps->first);
    auto last = marks.find(options.steps->second);
    if (first == marks.end() || last == marks.end()) {
      *error = "the timeline has no STEP " +
               std::to_string(first == marks.end() ? options.steps->first : options.steps->second) +
               " for rank " + std::to_string(r) + " (--steps " +
               std::to_string(options.steps->first) + ":" + std::to_string(options.steps->second) +
               ")";
      return false;
    }
    p->placement.window = std::make_pair(first->second.first, last->second.second);
  }
  number_threads(p->scan, &p->placement);
  return true;
}

// Writes the merge into `target` (a temporary file).
bool write_merge(const MergeOptions& options, uint64_t text_end, std::vector<PlannedProfile>* plans,
                 MergeResult* result) {
  auto fail = [&](const std::string& what) {
    result->error = what;
    return false;
  };
  const std::string& target = options.output;
  int code = 0;
  const bool gzip = target.size() > 3 && target.compare(target.size() - 3, 3, ".gz") == 0;
  std::unique_ptr<TraceFile> out = TraceFile::create(target, gzip, /*gzip_level=*/1, &code);
  if (!out) return fail("cannot create " + target + ": " + std::strerror(code));
  auto write = [&](std::string* piece) {
    if (!out->append(*piece, &code))
      return fail("cannot write " + target + ": " + std::strerror(code));
    piece->clear();
    return true;
  };
  // The timeline's text up to its last event: its closing bracket is the merge's.
  InputFile timeline(options.timeline);
  if (!timeline.opened()) return fail(options.timeline + ": cannot open: " + std::strerror(errno));
  std::string piece(kPieceBytes, '\0');
  for (uint64_t left = text_end; left > 0;) {
    const auto want = static_cast<std::streamsize>(std::min<uint64_t>(left, kPieceBytes));
    piece.resize(kPieceBytes);
    const std::streamsize got = timeline.buffer()->sgetn(piece.data(), want);
    if (got <= 0) return fail(options.timeline + ": cannot read (changed while merging?)");
    piece.resize(static_cast<size_t>(got));
    if (!write(&piece)) return false;
    left -= static_cast<uint64_t>(got);
  }
  result->timeline_bytes = text_end;
  for (PlannedProfile& p : *plans) {
    MergedRank merged;
    merged.rank = p.placement.rank;
    merged.path = p.path;
    merged.fit = p.placement.fit;
    merged.uncertainty_us = p.uncertainty_us;
    merged.kineto = p.scan.kineto;
    piece = torch_process_text(p.scan, p.placement);
    InputFile in(p.path);
    if (!in.opened()) return fail(p.path + ": cannot open: " + std::strerror(errno));
    bool written = true;
    ProfileReadResult read = read_profile_events(in.stream(), [&](const json& e, uint64_t) {
      std::string text = merged_event_text(e, p.placement, &merged.events_skipped);
      if (text.empty()) return true;
      piece += ",\n";
      piece += text;
      ++merged.events_written;
      if (piece.size() >= kPieceBytes) written = write(&piece);
      return written;
    });
    if (!written) return false;
    if (!read.ok) return fail(p.path + ": " + read.error + " (changed while merging?)");
    merged.events_read = read.events;
    if (!write(&piece)) return false;
    result->ranks.push_back(merged);
  }
  if (!out->finish("", &code)) return fail("cannot write " + target + ": " + std::strerror(code));
  result->output_bytes = out->size();
  return true;
}

}  // namespace

MergeResult merge_profiles(const MergeOptions& options) {
  MergeResult result;
  TimelineRun run;
  uint64_t text_end = 0;
  if (!read_timeline(options.timeline, &run, &text_end, &result.error)) {
    result.error = options.timeline + ": " + result.error;
    return result;
  }
  if (options.steps && options.steps->first > options.steps->second) {
    result.error = "--steps " + std::to_string(options.steps->first) + ":" +
                   std::to_string(options.steps->second) + ": the first step is after the last";
    return result;
  }
  std::vector<PlannedProfile> plans;
  std::map<int64_t, std::string> by_rank;
  for (const MergeProfile& profile : options.profiles) {
    PlannedProfile p;
    p.path = profile.path;
    InputFile in(profile.path);
    if (!in.opened()) {
      result.error = profile.path + ": cannot open: " + std::strerror(errno);
      return result;
    }
    p.scan = scan_profile(in.stream());
    std::string error = p.scan.error;
    if (error.empty() && !in.problem().empty()) error = in.problem();
    if (error.empty() && profile.rank >= 0 && profile.rank != p.scan.identity.rank) {
      error = "given as rank " + std::to_string(profile.rank) +
              ", but its anchors were recorded "
              "by rank " +
              std::to_string(p.scan.identity.rank);
    }
    if (error.empty() && !place_profile(run, options, &p, &error)) {
      // error set
    }
    if (error.empty()) {
      auto [it, inserted] = by_rank.emplace(p.placement.rank, profile.path);
      if (!inserted) {
        error = "a second profile for rank " + std::to_string(p.placement.rank) + " (" +
                it->second + " is the first)";
      } else if (static_cast<size_t>(p.placement.rank) < run.has_torch.size() &&
                 run.has_torch[static_cast<size_t>(p.placement.rank)]) {
        error = "the timeline already holds rank " + std::to_string(p.placement.rank) +
                "'s torch events (merged before)";
      }
    }
    if (!error.empty()) {
      result.error = profile.path + ": " + error;
      return result;
    }
    plans.push_back(std::move(p));
  }
  std::sort(plans.begin(), plans.end(), [](const PlannedProfile& a, const PlannedProfile& b) {
    return a.placement.rank < b.placement.rank;
  });
  // Written beside the output and renamed over it: never a half-written OUT.
  MergeOptions temp = options;
  temp.output =
      options.output + ".merge-" + std::to_string(::getpid()) + ".tmp" +
      (options.output.size() > 3 && options.output.compare(options.output.size() - 3, 3, ".gz") == 0
           ? ".gz"
           : "");
  if (!write_merge(temp, text_end, &plans, &result)) {
    std::remove(temp.output.c_str());
    result.ranks.clear();
    return result;
  }
  if (std::rename(temp.output.c_str(), options.output.c_str()) != 0) {
    result.error =
        "cannot rename " + temp.output + " to " + options.output + ": " + std::strerror(errno);
    std::remove(temp.output.c_str());
    return result;
  }
  result.ok = true;
  return result;
}

}  // namespace ranktime::timeline
