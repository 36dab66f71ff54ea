// `ranktime merge`: parses PROFILE arguments and --steps, runs timeline::merge_profiles and says
// how each rank's events were placed.
#include "merge_command.h"

#include <charconv>
#include <cstdio>
#include <iostream>

#include "ranktime/timeline/profile_merge.h"

namespace ranktime::cli {
namespace {

bool parse_int(std::string_view s, int64_t* out) {
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, *out);
  return !s.empty() && ec == std::errc() && ptr == end && *out >= 0;
}

// "R=PATH" names the rank; any other argument is a path (a path holding '=' after a non-number
// stays a path).
timeline::MergeProfile parse_profile(const std::string& arg) {
  timeline::MergeProfile p{arg, -1};
  const size_t eq = arg.find('=');
  int64_t rank = 0;
  if (eq != std::string::npos && parse_int(std::string_view(arg).substr(0, eq), &rank)) {
    p.rank = rank;
    p.path = arg.substr(eq + 1);
  }
  return p;
}

}  // namespace

CLI::App* add_merge_command(CLI::App& app, MergeCommandOptions* o) {
  CLI::App* merge = app.add_subcommand(
      "merge", "Put every rank's torch.profiler trace (ranktime.torch.profile) on the timeline");
  merge->add_option("timeline", o->timeline, "The run's timeline (.json or .json.gz)")->required();
  merge
      ->add_option("profiles", o->profiles,
                   "Profiler traces: PATH (rank from its anchors) or R=PATH")
      ->required();
  merge->add_option("-o,--output", o->output, "The merged trace (.json, or .json.gz for gzip)")
      ->required();
  merge->add_option("--steps", o->steps, "Keep the profiler events of steps A to B only (A:B)");
  return merge;
}

int run_merge(const MergeCommandOptions& o) {
  timeline::MergeOptions options;
  options.timeline = o.timeline;
  options.output = o.output;
  for (const std::string& arg : o.profiles) options.profiles.push_back(parse_profile(arg));
  if (!o.steps.empty()) {
    const size_t colon = o.steps.find(':');
    int64_t a = 0, b = 0;
    if (colon == std::string::npos || !parse_int(std::string_view(o.steps).substr(0, colon), &a) ||
        !parse_int(std::string_view(o.steps).substr(colon + 1), &b) || a > b) {
      std::cerr << "ranktime merge: error: --steps " << o.steps
                << ": want A:B, two step numbers with A <= B\n";
      return 2;
    }
    options.steps = std::make_pair(a, b);
  }
  const timeline::MergeResult result = timeline::merge_profiles(options);
  if (!result.ok) {
    std::cerr << "ranktime merge: error: " << result.error << "\n";
    std::cerr << "ranktime merge: nothing written\n";
    return 1;
  }
  for (const auto& r : result.ranks) {
    char line[320];
    std::snprintf(line, sizeof line,
                  "rank %lld: %llu of %llu events (%llu malformed skipped), %zu anchors, "
                  "fit within %.1f us, clock uncertainty %.1f us, %s format: ",
                  static_cast<long long>(r.rank), static_cast<unsigned long long>(r.events_written),
                  static_cast<unsigned long long>(r.events_read),
                  static_cast<unsigned long long>(r.events_skipped), r.fit.anchors,
                  r.fit.max_residual_us, r.uncertainty_us, r.kineto ? "Kineto" : "legacy");
    std::cout << line << r.path << "\n";
  }
  std::cout << "wrote " << o.output << " (" << result.output_bytes << " bytes)\n";
  return 0;
}

}  // namespace ranktime::cli
