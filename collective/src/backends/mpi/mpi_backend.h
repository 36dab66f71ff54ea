// Executes responses on host memory over MPI: one collective per response, through a persistent
// fusion buffer when the response holds several tensors, in place when it holds one. As a
// Backend it finishes each response inside enqueue(); the GPU path's staging calls execute()
// directly.
#pragma once

#include <mpi.h>

#include <vector>

#include "backends/backend.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/message.h"
#include "core/reduce.h"
#include "core/tensor_entry.h"

namespace ranktime {

class MpiBackend final : public Backend {
 public:
  // Allreduces of more than `chunk_bytes` are split into calls of at most that size (0: never).
  MpiBackend(MPI_Comm comm, const Clock* clock, int64_t chunk_bytes = Config{}.allreduce_chunk);
  ~MpiBackend() override;
  MpiBackend(const MpiBackend&) = delete;
  MpiBackend& operator=(const MpiBackend&) = delete;

  // Backend: runs the collective now; its completion is ready when enqueue() returns.
  void enqueue(const Response& response, const std::vector<TensorEntry*>& entries,
               int64_t arrival_ns) override;
  void take_completions(const std::function<void(Completion&)>& finish) override;
  size_t pending() const override { return done_waiting_ ? 1 : 0; }
  void drain() override {}
  bool completes_in_enqueue() const override { return true; }

  // Runs `response` for `entries` (one per response name, same order), recording sub-phase
  // timings into *log. Returns the first error; the caller completes the handles.
  Status execute(const Response& response, const std::vector<TensorEntry*>& entries, PhaseLog* log);

 private:
  Status allreduce(const Response& response, const std::vector<TensorEntry*>& entries,
                   PhaseLog* log);
  Status allgather(const Response& response, TensorEntry* entry, PhaseLog* log);
  Status broadcast(const Response& response, const std::vector<TensorEntry*>& entries,
                   PhaseLog* log);
  // In-place allreduce of n elements, in calls of at most chunk_bytes_ (and of counts MPI's int
  // can address).
  int reduce_in_place(void* data, int64_t n, DataType dtype, ReduceOp op);
  uint8_t* fusion_buffer(size_t bytes);

  MPI_Comm comm_;
  const Clock* clock_;
  int64_t chunk_bytes_;
  int size_ = 1;
  int rank_ = 0;
  MPI_Datatype half_type_ = MPI_DATATYPE_NULL;
  MPI_Datatype bfloat16_type_ = MPI_DATATYPE_NULL;
  // Custom ops for the 16-bit float types, indexed [dtype is bf16][ReduceOp].
  MPI_Op half_ops_[2][kNumReduceOps] = {};
  std::vector<uint8_t> fusion_;
  Completion done_;  // what enqueue() finished (reused: its vectors keep their memory)
  bool done_waiting_ = false;
};

}  // namespace ranktime
