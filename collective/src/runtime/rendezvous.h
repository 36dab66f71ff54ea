// Start-up, collective over the control channel, every rank in this order: who is who (host
// names, process ids and places on the hosts, for the run metadata and messages), the clock offsets
// (rank 0 runs min-RTT ping-pongs with every rank), and rank 0's timeline settings for everyone (so
// that all ranks agree on what to record and ship).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/config.h"
#include "inspection/lane_choice.h"
#include "runtime/control_channel.h"
#include "runtime/world.h"

namespace ranktime {

// Every rank's host name, pid and place on the hosts (Placement's fields), per rank, on every
// rank: rank 0 writes them into the run metadata; a worker names rank 0's host when it goes
// silent.
struct Peers {
  std::vector<std::string> hostnames;
  std::vector<int64_t> pids;
  std::vector<int> local_ranks, local_sizes, cross_ranks, cross_sizes;
};
Peers gather_peers(ControlChannel& channel, const Placement& me);

// One estimator per rank (rank 0's own is exact); offsets are measured on rank 0 only.
std::vector<OffsetEstimator> sync_clocks(ControlChannel& channel, const Clock& clock);

// Rank 0's timeline settings, as every rank learns them.
struct TimelineSettings {
  bool on = false;  // rank 0 has a TIMELINE_FILENAME
  bool mark_cycles = false;
  bool all_ranks = true;
  bool lanes_wanted = true;  // rank 0 wants this rank's processing lanes (at first)
};
// `lanes`: rank 0's choice of lanes (null on other ranks).
TimelineSettings agree_timeline_settings(ControlChannel& channel, const Config& config,
                                         const LaneChoice* lanes);
// Whether rank 0 opened its file (`opened` on rank 0), as every rank learns it.
bool agree_timeline_opened(ControlChannel& channel, bool opened);

}  // namespace ranktime
