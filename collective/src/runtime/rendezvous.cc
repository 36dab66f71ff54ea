// Start-up exchanges (see rendezvous.h).
#include "runtime/rendezvous.h"

#include "core/log.h"

namespace ranktime {
namespace {

constexpr int kClockSyncRounds = 16;
// Clock samples kept per rank (the estimator follows drift over this window).
constexpr size_t kClockWindow = 256;

}  // namespace

Peers gather_peers(ControlChannel& channel, const Placement& me) {
  Peers peers;
  std::vector<int64_t> all;
  channel.allgather_hosts(me.hostname,
                          {me.pid, me.local_rank, me.local_size, me.cross_rank, me.cross_size},
                          &peers.hostnames, &all);
  constexpr size_t kNumbers = 5;
  for (size_t i = 0; i + kNumbers <= all.size(); i += kNumbers) {
    peers.pids.push_back(all[i]);
    peers.local_ranks.push_back(static_cast<int>(all[i + 1]));
    peers.local_sizes.push_back(static_cast<int>(all[i + 2]));
    peers.cross_ranks.push_back(static_cast<int>(all[i + 3]));
    peers.cross_sizes.push_back(static_cast<int>(all[i + 4]));
  }
  return peers;
}

std::vector<OffsetEstimator> sync_clocks(ControlChannel& channel, const Clock& clock) {
  const int size = channel.size();
  std::vector<OffsetEstimator> offsets(size, OffsetEstimator(kClockWindow));
  if (channel.rank() != 0) {
    for (int k = 0; k < kClockSyncRounds; ++k) {
      channel.receive_ping();
      const int64_t t1 = clock.now_ns();
      channel.send_pong(t1, clock.now_ns());
    }
    return offsets;
  }
  offsets[0].add({0, 0, 0, 0});
  for (int r = 1; r < size; ++r) {
    for (int k = 0; k < kClockSyncRounds; ++k) {
      const int64_t t0 = clock.now_ns();
      channel.send_ping(r, t0);
      const auto [t1, t2] = channel.receive_pong(r);
      offsets[r].add({t0, t1, t2, clock.now_ns()});
    }
    RANKTIME_LOG(kDebug, "clock offset of rank " << r << ": " << offsets[r].offset_ns() / 1e3
                                                 << " us +- " << offsets[r].uncertainty_ns() / 1e3);
  }
  return offsets;
}

TimelineSettings agree_timeline_settings(ControlChannel& channel, const Config& config,
                                         const LaneChoice* lanes) {
  // On, mark cycles, all ranks, then per rank: its lanes are wanted.
  std::vector<int> settings(3 + channel.size(), 0);
  if (lanes != nullptr) {
    settings[0] = config.timeline_filename.empty() ? 0 : 1;
    settings[1] = config.timeline_mark_cycles;
    settings[2] = lanes->all();
    for (int r = 0; r < channel.size(); ++r) settings[3 + r] = lanes->wants(r);
  }
  channel.broadcast(settings.data(), static_cast<int>(settings.size()));
  return {settings[0] != 0, settings[1] != 0, settings[2] != 0, settings[3 + channel.rank()] != 0};
}

bool agree_timeline_opened(ControlChannel& channel, bool opened) {
  int value = opened ? 1 : 0;
  channel.broadcast(&value, 1);
  return value != 0;
}

}  // namespace ranktime
