// One rank's process sets (see process_set_registry.h).
#include "runtime/process_set_registry.h"

#include <cstdlib>

namespace ranktime {

ProcessSetRegistry::ProcessSetRegistry(int rank, int size) : rank_(rank), sets_(size) {}

ProcessSetRegistry::Submission ProcessSetRegistry::check(int32_t id, OpType op, int root) const {
  Submission out;
  std::lock_guard<std::mutex> lock(mutex_);
  const ProcessSet* set = sets_.find(id);
  if (id == kGlobalSet) {
    out.size = set->size();
    return out;
  }
  if (set == nullptr) {
    out.local = "process set " + std::to_string(id) + " does not exist (never added, or removed)";
  } else if (is_control_op(op)) {
    out.local = std::string(op_type_name(op)) + " runs over every rank, not over a process set";
  } else if (!set->contains(rank_)) {
    out.local = "rank " + std::to_string(rank_) + " is not in " + process_set_text(*set) +
                ": only its members may submit its operations";
  } else {
    out.label = set_tensor_name("", *set);
    out.size = set->size();
    if (op == OpType::kBroadcast && !set->contains(root)) {
      out.request = "root rank " + std::to_string(root) + " is not in " + process_set_text(*set) +
                    " (roots are global ranks)";
    }
  }
  return out;
}

std::vector<int32_t> ProcessSetRegistry::ids() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sets_.ids();
}

bool ProcessSetRegistry::ranks(int32_t id, std::vector<int>* ranks) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const ProcessSet* set = sets_.find(id);
  if (set != nullptr) *ranks = set->ranks;
  return set != nullptr;
}

bool ProcessSetRegistry::member(int32_t id) const {
  const ProcessSet* set = sets_.find(id);
  return set != nullptr && set->contains(rank_);
}

Backend* ProcessSetRegistry::backend(int32_t id, int device) const {
  auto it = backends_.find(id);
  if (it == backends_.end()) return nullptr;
  return device == kCpuDevice ? it->second.host.get() : it->second.device.get();
}

void ProcessSetRegistry::each_device_backend(const std::function<void(Backend&)>& f) const {
  for (const auto& [id, b] : backends_) {
    if (b.device) f(*b.device);
  }
}

std::string ProcessSetRegistry::apply(const Response& r, World& world, const Clock* clock,
                                      const Config& config, const std::function<void()>& wake) {
  if (r.op == OpType::kRemoveProcessSet) {
    const auto id = static_cast<int32_t>(std::atoi(r.argument.c_str()));
    auto gone = backends_.find(id);
    if (gone != backends_.end()) {
      if (gone->second.device) --device_backends_;
      backends_.erase(gone);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    sets_.remove(id);
    return "";
  }
  std::vector<int> ranks;
  std::string error;
  if (!parse_ranks_argument(r.argument, &ranks, &error)) return error;
  // Every rank takes part in making the set's communicator, members or not.
  SetBackends backends = world.process_set_backends(r.root, ranks, clock, config, wake);
  if (backends.device) ++device_backends_;
  if (backends.host) backends_[r.root] = std::move(backends);
  std::lock_guard<std::mutex> lock(mutex_);
  sets_.add(r.root, std::move(ranks));
  return "";
}

}  // namespace ranktime
