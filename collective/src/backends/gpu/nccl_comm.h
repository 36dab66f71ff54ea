// One NCCL communicator over the ranks of an MPI communicator, created with a unique id that rank 0
// makes and broadcasts over MPI; and the mapping of ranktime's dtypes and reductions onto NCCL's.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <memory>
#include <optional>
#include <string>

#include "ranktime/ranktime.h"

namespace ranktime::gpu {

class NcclComm {
 public:
  // Collective over `mpi`: every rank calls it, in the same order relative to other collectives on
  // `mpi`, with its own device current. Every rank gets the same outcome: when any rank fails,
  // all return an error (naming the ranks that failed) and destroy what they had created.
  static Status create(MPI_Comm mpi, std::unique_ptr<NcclComm>* out);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  NcclComm(ncclComm_t comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  ncclComm_t comm_;
  int rank_, size_;
};

// NCCL's type for a ranktime dtype (every core dtype has one: uint8, int8, int32, int64, float16,
// bfloat16, float32, float64).
ncclDataType_t nccl_dtype(DataType dtype);
// NCCL's reduction. Average is ncclAvg: NCCL pre-multiplies floats by 1/n and divides integer sums
// by n with truncation toward zero, as ranktime's CPU path does.
ncclRedOp_t nccl_op(ReduceOp op);
// Reduction for a partial step whose average is finished elsewhere (hierarchical allreduce sums
// within the node and divides once on the host): average becomes sum.
ncclRedOp_t nccl_partial_op(ReduceOp op);

}  // namespace ranktime::gpu
