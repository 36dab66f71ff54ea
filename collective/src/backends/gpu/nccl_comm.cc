// NCCL communicators created over MPI (see nccl_comm.h).
#include "backends/gpu/nccl_comm.h"

#include <vector>

#include "backends/gpu/cuda_status.h"

namespace ranktime::gpu {

std::string describe_tensors(const Response& response) {
  std::string s =
      "tensor '" + (response.names.empty() ? std::string("?") : response.names[0]) + "'";
  if (response.names.size() > 1)
    s += " (and " + std::to_string(response.names.size() - 1) + " fused)";
  return s;
}

std::string cuda_error_text(cudaError_t rc) {
  return std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc);
}

std::string nccl_error_text(ncclResult_t rc, ncclComm_t comm) {
  std::string s = ncclGetErrorString(rc);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') s += std::string(" (") + last + ")";
  return s;
}

Status NcclComm::create(MPI_Comm mpi, std::unique_ptr<NcclComm>* out) {
  int rank = 0, size = 1;
  MPI_Comm_rank(mpi, &rank);
  MPI_Comm_size(mpi, &size);
  // Rank 0's id travels with a flag so that a failure there fails everyone instead of hanging.
  struct {
    ncclUniqueId id;
    int ok;
  } root{};
  std::string error;
  if (rank == 0) {
    ncclResult_t rc = ncclGetUniqueId(&root.id);
    root.ok = rc == ncclSuccess;
    if (!root.ok) error = "ncclGetUniqueId: " + nccl_error_text(rc, nullptr);
  }
  MPI_Bcast(&root, sizeof(root), MPI_BYTE, 0, mpi);
  ncclComm_t comm = nullptr;
  int ok = root.ok;
  if (ok) {
    ncclResult_t rc = ncclCommInitRank(&comm, size, root.id, rank);
    if (rc != ncclSuccess) {
      ok = 0;
      error = "ncclCommInitRank: " + nccl_error_text(rc, nullptr);
      comm = nullptr;
    }
  } else if (rank != 0) {
    error = "rank 0 could not make an NCCL unique id";
  }
  std::vector<int> oks(size);
  MPI_Allgather(&ok, 1, MPI_INT, oks.data(), 1, MPI_INT, mpi);
  std::string failed;
  for (int r = 0; r < size; ++r) {
    if (!oks[r]) failed += (failed.empty() ? "" : ",") + std::to_string(r);
  }
  if (!failed.empty()) {
    if (comm != nullptr) ncclCommDestroy(comm);
    return Status::Error("NCCL communicator of " + std::to_string(size) +
                         " ranks could not be created (failed on ranks " + failed + ")" +
                         (error.empty() ? "" : "; here: " + error));
  }
  out->reset(new NcclComm(comm, rank, size));
  return Status::Ok();
}

NcclComm::~NcclComm() {
  if (comm_ != nullptr) ncclCommDestroy(comm_);
}

ncclDataType_t nccl_dtype(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
      return ncclUint8;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kInt16:  // refused at submission: NCCL has no 16-bit integers
      break;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage:
      return ncclAvg;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kProduct:
      return ncclProd;
    case ReduceOp::kSum:
    case ReduceOp::kAdasum:  // refused at submission for device tensors (core/adasum.h)
      break;
  }
  return ncclSum;
}

ncclRedOp_t nccl_partial_op(ReduceOp op) {
  return op == ReduceOp::kAverage ? ncclSum : nccl_op(op);
}

}  // namespace ranktime::gpu
