// Executes responses on host memory over MPI: one collective per response, through a persistent
// fusion buffer when the response holds several tensors, in place (or straight into the handle's
// output) when it holds one; allreduces host-aware when asked (reduce inside each host, allreduce
// among one leader per host, broadcast inside). As a Backend it finishes each response inside
// enqueue(); the GPU path's staging calls execute() directly.
#pragma once

#include <mpi.h>

#include <chrono>
#include <memory>
#include <vector>

#include "backends/backend.h"
#include "backends/mpi/host_groups.h"
#include "backends/mpi/request_wait.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/message.h"
#include "core/reduce.h"
#include "core/tensor_entry.h"

namespace ranktime {

class MpiBackend final : public InlineBackend {
 public:
  // Allreduces of more than `chunk_bytes` are split into calls of at most that size (0: never).
  // `hosts`: allreduce host-aware over these groups (every rank of comm must pass them, or
  // none); null: flat. `test_fail_local`: RANKTIME_TEST_FAIL_LOCAL (backends/mpi/outcome.h).
  // `wait`: how each collective waits for the other ranks (request_wait.h).
  // `owns_comm`: frees comm with the backend (a process set's).
  MpiBackend(MPI_Comm comm, const Clock* clock, int64_t chunk_bytes = Config{}.allreduce_chunk,
             std::shared_ptr<const HostGroups> hosts = nullptr, std::string test_fail_local = {},
             RankWait wait = Config{}.spin(), bool owns_comm = false);
  ~MpiBackend() override;
  MpiBackend(const MpiBackend&) = delete;
  MpiBackend& operator=(const MpiBackend&) = delete;

  // Runs `response` for `entries` (one per response name, same order), recording sub-phase
  // timings into *log. Returns the first error; the caller completes the handles.
  Status execute(const Response& response, const std::vector<TensorEntry*>& entries, PhaseLog* log);

 private:
  // InlineBackend: the collective, then every rank's agreement on its outcome.
  Status run(const Response& response, const std::vector<TensorEntry*>& entries,
             PhaseLog* log) override;
  Status allreduce(const Response& response, const std::vector<TensorEntry*>& entries,
                   PhaseLog* log);
  Status allgather(const Response& response, const std::vector<TensorEntry*>& entries,
                   PhaseLog* log);
  Status broadcast(const Response& response, const std::vector<TensorEntry*>& entries,
                   PhaseLog* log);
  Status reducescatter(const Response& response, const std::vector<TensorEntry*>& entries,
                       PhaseLog* log);
  Status alltoall(const Response& response, TensorEntry* entry, PhaseLog* log);
  // The 16-bit floats' datatypes and ops (mpi_reductions.cc), made and freed with the backend.
  void create_reductions();
  void free_reductions();
  // The MPI datatype and reduction for `dtype` and `op` (the 16-bit floats: ours).
  struct Reduction {
    MPI_Datatype type;
    MPI_Op op;
  };
  Reduction reduction(DataType dtype, ReduceOp op) const;
  // In-place allreduce of n elements (averaged when op is kAverage), in calls of at most
  // chunk_bytes_ (and of counts MPI's int can address), each stage waiting for its ranks as
  // `wait` says, recording its MPI sub-phases.
  int reduce_in_place(void* data, int64_t n, DataType dtype, ReduceOp op, const RankWait& wait,
                      PhaseLog* log);
  // Adasum by recursive doubling: at level L (1, 2, 4, ...) each rank swaps its whole buffer with
  // rank ^ L and both compute adasum(lower ranks' sum, upper ranks' sum) identically, so every
  // rank ends with the same bits. log2(size) exchanges of the whole buffer (Horovod halves the
  // vector at each level instead, for bandwidth; the formula is the same). counts: elements per
  // tensor of the buffer, each combined with its own dot product and norms.
  int adasum_in_place(void* data, const std::vector<int64_t>& counts, DataType dtype,
                      PhaseLog* log);
  // Elements of `elem` bytes one MPI call moves: chunk_bytes_'s worth (at least one), and no more
  // than MPI's int can count.
  int64_t per_call(size_t elem) const;
  // Runs call(pointer, count) over n elements of `elem` bytes in chunks; the first error.
  template <typename Call>
  int in_chunks(void* data, int64_t n, size_t elem, Call call) const;
  uint8_t* fusion_buffer(size_t bytes);

  MPI_Comm comm_;
  int64_t chunk_bytes_;
  std::string test_fail_local_;
  int size_ = 1;
  int rank_ = 0;
  MPI_Datatype half_type_ = MPI_DATATYPE_NULL;
  MPI_Datatype bfloat16_type_ = MPI_DATATYPE_NULL;
  // Custom ops for the 16-bit float types, indexed [dtype is bf16][ReduceOp].
  MPI_Op half_ops_[2][kNumReduceOps] = {};
  std::shared_ptr<const HostGroups> hosts_;  // set when allreducing host-aware
  RankWait wait_;
  RankWait arrived_ = RankWait::arrived();  // a batch's stages after its first (flat)
  std::vector<uint8_t> fusion_;
  PhaseLog stage_log_;  // a fused allreduce's stages, before they are summed into the batch's log
  std::vector<uint8_t> adasum_peer_;  // the partner's buffer at each Adasum level
  bool owns_comm_ = false;
};

}  // namespace ranktime
