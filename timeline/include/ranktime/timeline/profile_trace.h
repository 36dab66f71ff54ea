// Reading torch.profiler traces, one event at a time (bounded memory for any file size): the
// legacy list (torch 1.13 without Kineto: `[{"name":..., "pid":"CPU functions", ...}, ...]`) and
// Kineto's object (`{"traceEvents":[...], "distributedInfo":..., "baseTimeNanoseconds":...}`).
// Also the anchors that ranktime.torch.profile records in them (docs/python.md), which tie the
// profiler's time base to ranktime's clock whatever base a torch version uses.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ranktime::timeline {

// Return false to stop reading. `event` is one element of the event list, as parsed.
using ProfileEventCallback = std::function<bool(const nlohmann::json& event, uint64_t index)>;

struct ProfileReadResult {
  bool ok = false;      // the whole file was read (or the callback stopped it)
  bool kineto = false;  // the object form (traceEvents) rather than the legacy list
  uint64_t events = 0;  // events handed to the callback
  std::string error;    // when !ok: what is wrong, with the byte offset ("" before the file name)
};

// Reads the events of a profiler trace from `in`. Anything that is not one of the two forms
// (another top-level value, an element that is not an object, JSON cut short or invalid, an
// event nested deeper than 64 or larger than 16 MiB) stops it with an error.
ProfileReadResult read_profile_events(std::istream& in, const ProfileEventCallback& on_event);

// Anchor N (ranktime.torch.profile): a `record_function("ranktime.anchor.N")` slice during which
// the rank read its ranktime clock, and right after it a marker slice named
// `ranktime.anchor.N.ns.T.rank.R.pid.P.host.H` holding that reading T (ns) and who took it.
inline constexpr std::string_view kAnchorPrefix = "ranktime.anchor.";

struct ProfileAnchor {
  int64_t n = 0;
  double profiler_us = -1;  // the slice's middle, in the profiler's time base
  double slack_us = 0;      // half the slice: how far the reading can be from its middle
  int64_t clock_ns = 0;     // the rank's ranktime clock during the slice
  bool has_slice = false, has_marker = false;
};

// Who recorded a profile (from its anchor markers).
struct ProfileIdentity {
  int64_t rank = -1;
  int64_t pid = -1;
  std::string host;
};

// A profiler thread (pid, tid as the file writes them, e.g. "CPU functions" and 1) and its name.
struct ProfileThread {
  std::string pid, tid;  // dumped JSON values
  std::string name;      // from a thread_name metadata event; "" when none
};

// What a first pass over a profile finds: its anchors, who recorded it, its threads.
struct ProfileScan {
  ProfileIdentity identity;
  std::map<int64_t, ProfileAnchor> anchors;
  std::vector<ProfileThread> threads;  // in first-seen order
  uint64_t events = 0;
  bool kineto = false;
  std::string error;  // "" when the scan found a usable profile
};

// The first pass: anchors, identity and threads; an error when anchors are missing, malformed or
// contradict each other (two identities, an anchor recorded twice), or over 100,000 threads.
ProfileScan scan_profile(std::istream& in);

// Parses one anchor marker name (the part after "ranktime.anchor."); false when malformed.
bool parse_anchor_marker(std::string_view rest, int64_t* n, int64_t* clock_ns,
                         ProfileIdentity* who);

// Key of an event's thread: its pid and tid, dumped.
std::string profile_thread_key(const nlohmann::json& event);

}  // namespace ranktime::timeline
