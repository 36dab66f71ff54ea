// The names of docs/timeline-format.md, as lists a reader can check against.
#include "ranktime/timeline/trace_names.h"

#include <array>

#include "ranktime/timeline/record.h"

namespace ranktime::timeline {
namespace {

// The names themselves come from phase_name(), the writer's single list.
constexpr std::array<Phase, 7> kOperations = {
    Phase::kAllreduce,     Phase::kAllgather, Phase::kBroadcast, Phase::kBarrier,
    Phase::kReducescatter, Phase::kAlltoall,  Phase::kJoin};
// In execution order (hierarchical stages included): the order tables list them in.
constexpr std::array<Phase, 21> kSubphases = {
    Phase::kQueue,
    Phase::kWaitForData,
    Phase::kWaitForOtherTensorData,
    Phase::kMemcpyInFusionBuffer,
    Phase::kMemcpyInHostBuffer,
    Phase::kNcclReducescatter,
    Phase::kNcclReduce,
    Phase::kMpiReduce,
    Phase::kMpiAllreduce,
    Phase::kMpiAllgather,
    Phase::kMpiBcast,
    Phase::kMpiReducescatter,
    Phase::kMpiAlltoall,
    Phase::kAdasumExchange,
    Phase::kAdasumCombine,
    Phase::kNcclAllreduce,
    Phase::kNcclAllgather,
    Phase::kNcclBcast,
    Phase::kNcclAlltoall,
    Phase::kMemcpyOutHostBuffer,
    Phase::kMemcpyOutFusionBuffer,
};
constexpr std::array<std::string_view, 6> kMetadata = {"process_name", "process_sort_index",
                                                       "thread_name",  "thread_sort_index",
                                                       "ranktime_run", "ranktime_run_end"};

template <size_t N>
bool contains(const std::array<std::string_view, N>& list, std::string_view name) {
  for (std::string_view item : list) {
    if (item == name) return true;
  }
  return false;
}

template <size_t N>
bool contains(const std::array<Phase, N>& list, std::string_view name) {
  for (Phase item : list) {
    if (phase_name(item) == name) return true;
  }
  return false;
}

}  // namespace

bool is_operation_name(std::string_view name) { return contains(kOperations, name); }

std::string operation_names_text(std::string_view prefix) {
  std::string text;
  for (size_t i = 0; i < kOperations.size(); ++i) {
    if (i > 0) text += i + 1 == kOperations.size() ? " or " : ", ";
    text.append(prefix).append(phase_name(kOperations[i]));
  }
  return text;
}

std::string_view negotiation_operation(std::string_view name) {
  constexpr std::string_view kPrefix = "NEGOTIATE_";
  if (name.substr(0, kPrefix.size()) != kPrefix) return {};
  std::string_view op = name.substr(kPrefix.size());
  for (Phase item : kOperations) {
    if (phase_name(item) == op) return phase_name(item);
  }
  return {};
}

bool is_subphase_name(std::string_view name) { return contains(kSubphases, name); }

bool is_collective_subphase(std::string_view name) {
  return name.substr(0, 4) == "MPI_" || name.substr(0, 5) == "NCCL_";
}

int subphase_rank(std::string_view name) {
  for (size_t i = 0; i < kSubphases.size(); ++i) {
    if (phase_name(kSubphases[i]) == name) return static_cast<int>(i);
  }
  return 1000;
}

bool is_metadata_name(std::string_view name) { return contains(kMetadata, name); }

int64_t step_thread_rank(std::string_view thread_name) {
  constexpr std::string_view kPrefix = "steps rank ";
  if (thread_name.substr(0, kPrefix.size()) != kPrefix) return -1;
  std::string_view digits = thread_name.substr(kPrefix.size());
  if (digits.empty() || digits.size() > 9) return -1;
  int64_t rank = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    rank = rank * 10 + (c - '0');
  }
  return rank;
}

}  // namespace ranktime::timeline
