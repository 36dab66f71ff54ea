// This rank's clock, for tools that place other traces on the timeline (ranktime.torch.profile's
// anchors, which `ranktime merge` reads).
#pragma once

#include <cstdint>

namespace ranktime {

// This rank's clock now, in nanoseconds: the clock its timeline records are taken with (before
// rank 0 maps them by the rank's offset; RANKTIME_TEST_CLOCK_SKEW_US included). A time t read
// here is at ts (t - clock_offsets_us[rank] * 1000 - clock_zero_ns) / 1000 on rank 0's timeline
// (docs/timeline-format.md). Needs init().
int64_t clock_ns();

}  // namespace ranktime
