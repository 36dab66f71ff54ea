// algbw = bytes / collective time; busbw = algbw x the operation's bus factor.
#include "analysis/bandwidth.h"

#include <algorithm>

namespace ranktime::timeline {

double bus_bandwidth_factor(const std::string& op, int ranks) {
  if (ranks <= 0) return 0;
  double n = ranks;
  if (op == "ALLREDUCE") return 2.0 * (n - 1) / n;
  // Reducescatter's and alltoall's bytes are a rank's input, of which (n-1)/n leave it.
  if (op == "ALLGATHER" || op == "REDUCESCATTER" || op == "ALLTOALL") return (n - 1) / n;
  if (op == "BROADCAST") return 1.0;
  return 0;
}

namespace analysis {

void BandwidthAnalysis::add(const Batch& batch) {
  if (batch.error || batch.collective_us <= 0 || batch.bytes == 0 || batch.op == "BARRIER") return;
  auto& [b, lanes_ran] = bandwidth_[{std::string(batch.op), batch.set_ranks}];
  if (static_cast<size_t>(batch.rank) >= lanes_ran.size()) lanes_ran.resize(batch.rank + 1, false);
  lanes_ran[batch.rank] = true;
  ++b.batches;
  // Allgather's S is the gathered output.
  b.bytes +=
      batch.bytes * static_cast<uint64_t>(batch.op == "ALLGATHER" ? std::max(batch.ranks, 1) : 1);
  b.collective_us += batch.collective_us;
}

void BandwidthAnalysis::finish(Summary& s) {
  const int n = pass_.job_ranks();
  for (auto& [key, row] : bandwidth_) {
    auto& [b, lanes_ran] = row;
    b.op = key.first;
    b.ranks = key.second > 0 ? key.second : n;
    b.lanes = static_cast<int>(std::count(lanes_ran.begin(), lanes_ran.end(), true));
    b.bus_factor = bus_bandwidth_factor(b.op, b.ranks);
    // bytes / µs = MB/s; / 1e3 = GB/s.
    b.algbw_gbps = b.collective_us > 0 ? static_cast<double>(b.bytes) / b.collective_us / 1e3 : 0;
    b.busbw_gbps = b.algbw_gbps * b.bus_factor;
    s.bandwidth.push_back(b);
  }
}

}  // namespace analysis
}  // namespace ranktime::timeline
