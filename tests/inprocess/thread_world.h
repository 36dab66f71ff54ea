// Ranks as threads of one process, for the in-process protocol tests: a World per rank over a
// shared MemoryHub (the real control protocol, with injectable delays, drops and a dead peer) and
// a shared ThreadGroup (host collectives with the real reductions of core/reduce.h), and a job
// that starts one real Runtime per rank. The model is gloo's test/base_test.h.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/memory_channel.h"
#include "runtime/runtime.h"
#include "runtime/world.h"

namespace ranktime::testing {

// A rank's settings from (variable, value) pairs, the rest at their defaults.
inline Config config_of(const std::map<std::string, std::string>& env) {
  return parse_config([&env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

// Collectives among the ranks' background threads: every rank calls the same ones in the same
// order (as every rank executes the same response list).
class ThreadGroup {
 public:
  explicit ThreadGroup(int size);
  int size() const { return size_; }

  // Each returns false once abort() was called (a test tearing down a stuck job).
  bool allreduce(int rank, void* data, int64_t n, DataType dtype, ReduceOp op);
  bool allgather(int rank, const void* data, size_t bytes, std::vector<std::byte>* out,
                 std::vector<size_t>* sizes);
  bool broadcast(int rank, void* data, size_t bytes, int root);
  // This rank's rows (core/rows.h's split) of the reduction of every rank's `rows` x `row_elems`
  // tensor, into *out.
  bool reducescatter(int rank, const void* data, int64_t rows, int64_t row_elems, DataType dtype,
                     ReduceOp op, std::vector<std::byte>* out);
  // Sends send_rows[r] rows of `row_bytes` (consecutive, in rank order) to rank r; receives what
  // every rank sends this one into *out, in rank order, and how many rows came from each into
  // *received.
  bool alltoall(int rank, const void* data, size_t row_bytes, const std::vector<int32_t>& send_rows,
                std::vector<std::byte>* out, std::vector<int32_t>* received);
  bool barrier();
  void abort();

 private:
  struct Part {
    const void* data = nullptr;
    size_t bytes = 0;
    const int32_t* send_rows = nullptr;  // alltoall: rows for each rank
  };
  // Posts this rank's part (if any) and waits until every rank has arrived. The parts stay put
  // until the next arrival, which every rank makes only after it is done with them.
  bool arrive(int rank, const Part* part);

  const int size_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  bool aborted_ = false;
  std::vector<Part> parts_;
};

// Each process set's ThreadGroup, shared by its members' worlds: the first member to make the
// set's backend makes the group.
class SetGroups {
 public:
  std::shared_ptr<ThreadGroup> group(int32_t id, int size);

 private:
  std::mutex mutex_;
  std::map<int32_t, std::weak_ptr<ThreadGroup>> groups_;
};

// The host backend of a thread rank: finishes each response inside enqueue(), as MPI's does.
class ThreadBackend final : public InlineBackend {
 public:
  ThreadBackend(int rank, std::shared_ptr<ThreadGroup> group, const Clock* clock);

 private:
  Status run(const Response& response, const std::vector<TensorEntry*>& entries,
             PhaseLog* log) override;
  Status run_one(const Response& response, TensorEntry* entry);

  int rank_;
  std::shared_ptr<ThreadGroup> group_;
};

class ThreadWorld final : public World {
 public:
  ThreadWorld(int rank, std::shared_ptr<MemoryHub> hub, std::shared_ptr<ThreadGroup> group,
              std::shared_ptr<SetGroups> sets = std::make_shared<SetGroups>());

  Placement placement() const override { return placement_; }
  ControlChannel& control() override { return channel_; }
  std::unique_ptr<Backend> host_backend(const Clock* clock, const Config& config) override;
  std::unique_ptr<Backend> device_backend(const Clock*, const Config&,
                                          std::function<void()>) override {
    return nullptr;
  }
  SetBackends process_set_backends(int32_t id, const std::vector<int>& ranks, const Clock* clock,
                                   const Config&, std::function<void()>) override;
  std::string check_device(int device) const override;
  bool handles_signals() const override { return false; }

 private:
  Placement placement_;
  MemoryChannel channel_;
  std::shared_ptr<ThreadGroup> group_;
  std::shared_ptr<SetGroups> sets_;
};

// `size` real Runtimes, one per thread rank, started together.
class InProcessJob {
 public:
  // `config(rank)`: each rank's settings (default: the defaults). `hub_setup` runs before the
  // runtimes start (e.g. to install faults).
  explicit InProcessJob(int size, const std::function<Config(int rank)>& config = {},
                        const std::function<void(MemoryHub&)>& hub_setup = {});
  ~InProcessJob();  // shuts every rank down, all at once
  InProcessJob(const InProcessJob&) = delete;
  InProcessJob& operator=(const InProcessJob&) = delete;

  int size() const { return static_cast<int>(runtimes_.size()); }
  MemoryHub& hub() { return *hub_; }
  Runtime& rank(int r) { return *runtimes_.at(r); }
  // Runs fn(rank, runtime) on one thread per rank, all at once; returns when all have.
  void on_every_rank(const std::function<void(int rank, Runtime& runtime)>& fn);
  // Shuts every rank down, all at once (idempotent).
  void shutdown();

 private:
  std::shared_ptr<MemoryHub> hub_;
  std::shared_ptr<ThreadGroup> group_;
  std::shared_ptr<SetGroups> sets_ = std::make_shared<SetGroups>();
  std::vector<std::unique_ptr<Runtime>> runtimes_;
};

}  // namespace ranktime::testing
