// How a process set shows in a trace: its tensors are named "<name> [process set <id>: ranks
// <list>]" (docs/timeline-format.md), so that the Perfetto process of a tensor says which ranks
// negotiate it, and a reader knows whose ticks a negotiation must have without other metadata
// (every file of a rotated trace is self-contained). Written by the runtime, read by checks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ranktime::timeline {

// " [process set 3: ranks 0,2,4-7]" for `ranks` sorted ascending: runs of three or more
// consecutive ranks written as first-last.
std::string process_set_label(int64_t id, const std::vector<int>& ranks);

// The ranks named by a tensor name ending in a process-set label, ascending; empty when the name
// has no (well-formed) label, as for a tensor of every rank.
std::vector<int> process_set_ranks_in(std::string_view tensor_name);

}  // namespace ranktime::timeline
