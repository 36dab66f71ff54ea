// The MPI backend's reductions (see mpi_backend.h): the datatypes and ops of the 16-bit floats,
// which MPI lacks, and Adasum's recursive pairwise exchange.
#include <climits>

#include "backends/mpi/mpi_backend.h"
#include "backends/mpi/request_wait.h"
#include "core/adasum.h"

namespace ranktime {
namespace {

using timeline::Phase;

// MPI's signature for the 16-bit reductions of core/reduce.h.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float), ReduceOp Op>
void mpi_reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce16<ToFloat, FromFloat, Op>(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout),
                                   *len);
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void create_ops(MPI_Op* ops) {
  MPI_Op_create(&mpi_reduce16<ToFloat, FromFloat, ReduceOp::kSum>, 1, &ops[0]);
  ops[1] = ops[0];  // average reduces with sum, then divides
  MPI_Op_create(&mpi_reduce16<ToFloat, FromFloat, ReduceOp::kMin>, 1, &ops[2]);
  MPI_Op_create(&mpi_reduce16<ToFloat, FromFloat, ReduceOp::kMax>, 1, &ops[3]);
  MPI_Op_create(&mpi_reduce16<ToFloat, FromFloat, ReduceOp::kProduct>, 1, &ops[4]);
  ops[5] = MPI_OP_NULL;  // Adasum is no MPI_Op (adasum_in_place)
}

MPI_Op standard_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kProduct:
      return MPI_PROD;
    default:
      return MPI_SUM;
  }
}

}  // namespace

void MpiBackend::create_reductions() {
  MPI_Type_contiguous(2, MPI_BYTE, &half_type_);
  MPI_Type_commit(&half_type_);
  MPI_Type_contiguous(2, MPI_BYTE, &bfloat16_type_);
  MPI_Type_commit(&bfloat16_type_);
  create_ops<half_to_float, float_to_half>(half_ops_[0]);
  create_ops<bfloat16_to_float, float_to_bfloat16>(half_ops_[1]);
}

void MpiBackend::free_reductions() {
  for (auto& ops : half_ops_) {
    for (int i = 0; i < kNumReduceOps; ++i) {
      if (i != 1 && ops[i] != MPI_OP_NULL) MPI_Op_free(&ops[i]);
    }
  }
  MPI_Type_free(&half_type_);
  MPI_Type_free(&bfloat16_type_);
}

MpiBackend::Reduction MpiBackend::reduction(DataType dtype, ReduceOp op) const {
  switch (dtype) {
    case DataType::kUInt8:
      return {MPI_UINT8_T, standard_op(op)};
    case DataType::kInt8:
      return {MPI_INT8_T, standard_op(op)};
    case DataType::kInt16:
      return {MPI_INT16_T, standard_op(op)};
    case DataType::kInt32:
      return {MPI_INT32_T, standard_op(op)};
    case DataType::kInt64:
      return {MPI_INT64_T, standard_op(op)};
    case DataType::kFloat32:
      return {MPI_FLOAT, standard_op(op)};
    case DataType::kFloat64:
      return {MPI_DOUBLE, standard_op(op)};
    case DataType::kFloat16:
      return {half_type_, half_ops_[0][static_cast<int>(op)]};
    case DataType::kBFloat16:
    default:
      return {bfloat16_type_, half_ops_[1][static_cast<int>(op)]};
  }
}

int MpiBackend::adasum_in_place(void* data, const std::vector<int64_t>& counts, DataType dtype,
                                PhaseLog* log) {
  int64_t n = 0;
  for (const int64_t c : counts) n += c;
  const int64_t bytes = n * static_cast<int64_t>(dtype_size(dtype));
  if (bytes > INT_MAX) return MPI_ERR_COUNT;  // one message per level
  std::vector<uint8_t>& other = adasum_peer_;
  other.resize(static_cast<size_t>(bytes));
  constexpr int kTag = 0x4164;  // "Ad"; the backend's only point-to-point messages on comm_
  for (int level = 1; level < size_; level <<= 1) {
    const int partner = rank_ ^ level;
    const int64_t t0 = clock_->now_ns();
    MPI_Request requests[2];
    int rc = MPI_Irecv(other.data(), static_cast<int>(bytes), MPI_BYTE, partner, kTag, comm_,
                       &requests[0]);
    if (rc == MPI_SUCCESS) {
      rc = MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, partner, kTag, comm_, &requests[1]);
      if (rc != MPI_SUCCESS) MPI_Cancel(&requests[0]);
    }
    for (MPI_Request& request : requests) {
      if (rc == MPI_SUCCESS) rc = wait_for(&request, wait_.spin);
    }
    const int64_t t1 = clock_->now_ns();
    log->add(Phase::kAdasumExchange, t0, t1);
    if (rc != MPI_SUCCESS) return rc;
    const bool lower = (rank_ & level) == 0;  // the left operand is the lower ranks' sum
    adasum_combine(lower ? data : other.data(), lower ? other.data() : data, data, counts, dtype);
    log->add(Phase::kAdasumCombine, t1, clock_->now_ns());
  }
  return MPI_SUCCESS;
}

}  // namespace ranktime
