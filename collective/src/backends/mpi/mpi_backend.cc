// Host-memory collectives over MPI (see mpi_backend.h).
#include "backends/mpi/mpi_backend.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "backends/mpi/outcome.h"

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

Status mpi_status(int rc, const char* what, const Response& r) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return Status::Error(
      std::string(what) + " failed for tensor '" + r.names.at(0) + "'" +
      (r.names.size() > 1 ? " (and " + std::to_string(r.names.size() - 1) + " fused)" : "") + ": " +
      std::string(text, len));
}

// Fusion buffer layout: tensors back to back, in response order.
size_t fused_bytes(const std::vector<TensorEntry*>& entries) {
  size_t total = 0;
  for (const TensorEntry* e : entries) total += e->view.num_bytes();
  return total;
}

void pack(const std::vector<TensorEntry*>& entries, uint8_t* buffer) {
  for (const TensorEntry* e : entries) {
    size_t b = e->view.num_bytes();
    if (b) std::memcpy(buffer, e->view.data, b);
    buffer += b;
  }
}

void unpack(const uint8_t* buffer, const std::vector<TensorEntry*>& entries) {
  for (const TensorEntry* e : entries) {
    size_t b = e->view.num_bytes();
    if (b) std::memcpy(e->view.data, buffer, b);
    buffer += b;
  }
}

}  // namespace

MpiBackend::MpiBackend(MPI_Comm comm, const Clock* clock, int64_t chunk_bytes,
                       std::shared_ptr<const HostGroups> hosts, std::string test_fail_local,
                       bool owns_comm)
    : InlineBackend(clock),
      comm_(comm),
      chunk_bytes_(chunk_bytes),
      test_fail_local_(std::move(test_fail_local)),
      hosts_(std::move(hosts)),
      owns_comm_(owns_comm) {
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Type_contiguous(2, MPI_BYTE, &half_type_);
  MPI_Type_commit(&half_type_);
  MPI_Type_contiguous(2, MPI_BYTE, &bfloat16_type_);
  MPI_Type_commit(&bfloat16_type_);
  create_ops<half_to_float, float_to_half>(half_ops_[0]);
  create_ops<bfloat16_to_float, float_to_bfloat16>(half_ops_[1]);
}

MpiBackend::~MpiBackend() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& ops : half_ops_) {
    for (int i = 0; i < kNumReduceOps; ++i) {
      if (i != 1 && ops[i] != MPI_OP_NULL) MPI_Op_free(&ops[i]);
    }
  }
  MPI_Type_free(&half_type_);
  MPI_Type_free(&bfloat16_type_);
  if (owns_comm_) MPI_Comm_free(&comm_);
}

uint8_t* MpiBackend::fusion_buffer(size_t bytes) {
  if (fusion_.size() < bytes) fusion_.resize(bytes);
  return fusion_.data();
}

template <typename Call>
int MpiBackend::in_chunks(void* data, int64_t n, size_t elem, Call call) const {
  auto* p = static_cast<uint8_t*>(data);
  int64_t chunk = INT_MAX / 2;
  if (chunk_bytes_ > 0) {
    chunk = std::min(chunk, std::max<int64_t>(1, chunk_bytes_ / static_cast<int64_t>(elem)));
  }
  for (int64_t done = 0; done < n; done += chunk) {
    int rc = call(p + done * elem, static_cast<int>(std::min(chunk, n - done)));
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

int MpiBackend::reduce_in_place(void* data, int64_t n, DataType dtype, ReduceOp op, PhaseLog* log) {
  MPI_Datatype type;
  MPI_Op mpi_op = standard_op(op);
  switch (dtype) {
    case DataType::kUInt8:
      type = MPI_UINT8_T;
      break;
    case DataType::kInt8:
      type = MPI_INT8_T;
      break;
    case DataType::kInt16:
      type = MPI_INT16_T;
      break;
    case DataType::kInt32:
      type = MPI_INT32_T;
      break;
    case DataType::kInt64:
      type = MPI_INT64_T;
      break;
    case DataType::kFloat32:
      type = MPI_FLOAT;
      break;
    case DataType::kFloat64:
      type = MPI_DOUBLE;
      break;
    case DataType::kFloat16:
      type = half_type_;
      mpi_op = half_ops_[0][static_cast<int>(op)];
      break;
    case DataType::kBFloat16:
    default:
      type = bfloat16_type_;
      mpi_op = half_ops_[1][static_cast<int>(op)];
      break;
  }
  const size_t elem = dtype_size(dtype);
  const bool average = op == ReduceOp::kAverage;
  auto allreduce_over = [&](MPI_Comm comm) {
    return in_chunks(data, n, elem, [&](void* p, int count) {
      return MPI_Allreduce(MPI_IN_PLACE, p, count, type, mpi_op, comm);
    });
  };
  const int64_t t0 = clock_->now_ns();
  if (!hosts_) {
    int rc = n > 0 ? allreduce_over(comm_) : MPI_SUCCESS;
    if (rc == MPI_SUCCESS && average) divide_in_place(data, n, dtype, size_);
    log->add(Phase::kMpiAllreduce, t0, clock_->now_ns());
    return rc;
  }
  // Host-aware: only the leaders' allreduce crosses hosts, once per host instead of once per rank.
  if (n == 0) return MPI_SUCCESS;
  const bool leader = hosts_->leader();
  int rc = in_chunks(data, n, elem, [&](void* p, int count) {
    return MPI_Reduce(leader ? MPI_IN_PLACE : p, leader ? p : nullptr, count, type, mpi_op, 0,
                      hosts_->host());
  });
  int64_t t1 = clock_->now_ns();
  log->add(Phase::kMpiReduce, t0, t1);
  if (rc != MPI_SUCCESS) return rc;
  if (leader) {
    rc = allreduce_over(hosts_->leaders());
    if (rc == MPI_SUCCESS && average) divide_in_place(data, n, dtype, size_);
    const int64_t t2 = clock_->now_ns();
    log->add(Phase::kMpiAllreduce, t1, t2);
    t1 = t2;
    if (rc != MPI_SUCCESS) return rc;
  }
  rc = in_chunks(data, n, elem,
                 [&](void* p, int count) { return MPI_Bcast(p, count, type, 0, hosts_->host()); });
  log->add(Phase::kMpiBcast, t1, clock_->now_ns());
  return rc;
}

Status MpiBackend::run(const Response& response, const std::vector<TensorEntry*>& entries,
                       PhaseLog* log) {
  // A rank whose own part failed still runs the collective (the others are in it), then every
  // rank agrees on the outcome. A barrier moves no data: nothing to vouch for.
  const Status local = injected_local_fault(test_fail_local_, rank_, response);
  Status status = execute(response, entries, log);
  if (response.op == OpType::kBarrier) return status;
  return agree_on_outcome(comm_, rank_, local.ok() ? status : local, response);
}

Status MpiBackend::execute(const Response& response, const std::vector<TensorEntry*>& entries,
                           PhaseLog* log) {
  switch (response.op) {
    case OpType::kAllreduce:
      return allreduce(response, entries, log);
    case OpType::kAllgather:
      return allgather(response, entries.at(0), log);
    case OpType::kBroadcast:
      return broadcast(response, entries, log);
    default:
      return Status::Ok();  // barrier and timeline control move no data
  }
}

Status MpiBackend::allreduce(const Response& response, const std::vector<TensorEntry*>& entries,
                             PhaseLog* log) {
  const DataType dtype = response.dtype;
  const char* what =
      hosts_ ? "host-aware allreduce (MPI_Reduce, MPI_Allreduce, MPI_Bcast)" : "MPI_Allreduce";
  if (entries.size() == 1) {
    const TensorView& v = entries[0]->view;
    int rc = reduce_in_place(v.data, v.num_elements(), dtype, response.reduce_op, log);
    return mpi_status(rc, what, response);
  }
  size_t total = fused_bytes(entries);
  int64_t t0 = clock_->now_ns();
  uint8_t* buffer = fusion_buffer(total);
  pack(entries, buffer);
  int64_t t1 = clock_->now_ns();
  log->add(Phase::kMemcpyInFusionBuffer, t0, t1);
  int64_t n = static_cast<int64_t>(total / dtype_size(dtype));
  int rc = reduce_in_place(buffer, n, dtype, response.reduce_op, log);
  int64_t t2 = clock_->now_ns();
  if (rc != MPI_SUCCESS) return mpi_status(rc, what, response);
  unpack(buffer, entries);
  log->add(Phase::kMemcpyOutFusionBuffer, t2, clock_->now_ns());
  return Status::Ok();
}

Status MpiBackend::allgather(const Response& response, TensorEntry* entry, PhaseLog* log) {
  const TensorView& v = entry->view;
  int64_t row_bytes = static_cast<int64_t>(dtype_size(v.dtype));
  for (size_t d = 1; d < v.shape.size(); ++d) row_bytes *= v.shape[d];
  std::vector<int> counts(size_), displs(size_);
  int64_t total_rows = 0, offset = 0;
  for (int r = 0; r < size_; ++r) {
    int64_t bytes = response.first_dims.at(r) * row_bytes;
    if (bytes > INT_MAX || offset > INT_MAX) {
      return Status::Error(
          "tensor '" + response.names[0] +
          "': allgather output exceeds 2 GiB, which MPI_Allgatherv cannot address");
    }
    counts[r] = static_cast<int>(bytes);
    displs[r] = static_cast<int>(offset);
    offset += bytes;
    total_rows += response.first_dims[r];
  }
  auto& state = *entry->handle;
  state.output.resize(static_cast<size_t>(offset));
  state.output_shape = v.shape;
  state.output_shape[0] = total_rows;
  int64_t t0 = clock_->now_ns();
  int rc = MPI_Allgatherv(v.data, counts[rank_], MPI_BYTE, state.output.data(), counts.data(),
                          displs.data(), MPI_BYTE, comm_);
  log->add(Phase::kMpiAllgather, t0, clock_->now_ns());
  return mpi_status(rc, "MPI_Allgatherv", response);
}

Status MpiBackend::broadcast(const Response& response, const std::vector<TensorEntry*>& entries,
                             PhaseLog* log) {
  const bool root = rank_ == response.root;
  auto bcast = [&](void* data, size_t bytes) {
    auto* p = static_cast<uint8_t*>(data);
    for (size_t done = 0; done < bytes; done += INT_MAX) {
      int count = static_cast<int>(std::min<size_t>(INT_MAX, bytes - done));
      int rc = MPI_Bcast(p + done, count, MPI_BYTE, response.root, comm_);
      if (rc != MPI_SUCCESS) return rc;
    }
    return MPI_SUCCESS;
  };
  if (entries.size() == 1) {
    int64_t t0 = clock_->now_ns();
    int rc = bcast(entries[0]->view.data, entries[0]->view.num_bytes());
    log->add(Phase::kMpiBcast, t0, clock_->now_ns());
    return mpi_status(rc, "MPI_Bcast", response);
  }
  size_t total = fused_bytes(entries);
  uint8_t* buffer = fusion_buffer(total);
  int64_t t0 = clock_->now_ns();
  if (root) {
    pack(entries, buffer);
    log->add(Phase::kMemcpyInFusionBuffer, t0, clock_->now_ns());
  }
  int64_t t1 = clock_->now_ns();
  int rc = bcast(buffer, total);
  int64_t t2 = clock_->now_ns();
  log->add(Phase::kMpiBcast, t1, t2);
  if (rc != MPI_SUCCESS) return mpi_status(rc, "MPI_Bcast", response);
  if (!root) {
    unpack(buffer, entries);
    log->add(Phase::kMemcpyOutFusionBuffer, t2, clock_->now_ns());
  }
  return Status::Ok();
}

}  // namespace ranktime
