// Host-memory collectives over MPI (see mpi_backend.h).
#include "backends/mpi/mpi_backend.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>

#include "backends/mpi/outcome.h"
#include "backends/mpi/request_wait.h"
#include "core/fusion_layout.h"
#include "core/rows.h"

namespace ranktime {
namespace {

using timeline::Phase;

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

// The whole fusion buffer (core/fusion_layout.h).
void pack(const std::vector<TensorEntry*>& entries, uint8_t* buffer) {
  FusedLayout(entries).copy(0, SIZE_MAX, buffer, FusionCopy::kIn);
}

void unpack(uint8_t* buffer, const std::vector<TensorEntry*>& entries) {
  FusedLayout(entries).copy(0, SIZE_MAX, buffer, FusionCopy::kOut);
}

}  // namespace

MpiBackend::MpiBackend(MPI_Comm comm, const Clock* clock, int64_t chunk_bytes,
                       std::shared_ptr<const HostGroups> hosts, std::string test_fail_local,
                       RankWait wait, bool owns_comm)
    : InlineBackend(clock),
      comm_(comm),
      chunk_bytes_(chunk_bytes),
      test_fail_local_(std::move(test_fail_local)),
      hosts_(std::move(hosts)),
      wait_(wait),
      owns_comm_(owns_comm) {
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(comm_, &rank_);
  create_reductions();
}

MpiBackend::~MpiBackend() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  free_reductions();
  if (owns_comm_) MPI_Comm_free(&comm_);
}

uint8_t* MpiBackend::fusion_buffer(size_t bytes) {
  if (fusion_.size() < bytes) fusion_.resize(bytes);
  return fusion_.data();
}

template <typename Call>
int MpiBackend::in_chunks(void* data, int64_t n, size_t elem, Call call) const {
  auto* p = static_cast<uint8_t*>(data);
  const int64_t chunk = per_call(elem);
  for (int64_t done = 0; done < n; done += chunk) {
    int rc = call(p + done * elem, static_cast<int>(std::min(chunk, n - done)));
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

int64_t MpiBackend::per_call(size_t elem) const {
  constexpr int64_t kMost = INT_MAX / 2;
  if (chunk_bytes_ <= 0) return kMost;
  return std::clamp<int64_t>(chunk_bytes_ / static_cast<int64_t>(elem), 1, kMost);
}

int MpiBackend::reduce_in_place(void* data, int64_t n, DataType dtype, ReduceOp op,
                                const RankWait& wait, PhaseLog* log) {
  const Reduction reduce = reduction(dtype, op);
  const MPI_Datatype type = reduce.type;  // (lambdas below capture these)
  const MPI_Op mpi_op = reduce.op;
  const size_t elem = dtype_size(dtype);
  const bool average = op == ReduceOp::kAverage;
  const auto bytes = n * static_cast<int64_t>(elem);
  // Every stage first waits for its ranks without spinning, unless small (request_wait.h).
  auto allreduce_over = [&](MPI_Comm comm) {
    return once_all_arrived(comm, wait, bytes, [&] {
      return in_chunks(data, n, elem, [&](void* p, int count) {
        return MPI_Allreduce(MPI_IN_PLACE, p, count, type, mpi_op, comm);
      });
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
  int rc = once_all_arrived(hosts_->host(), wait, bytes, [&] {
    return in_chunks(data, n, elem, [&](void* p, int count) {
      return MPI_Reduce(leader ? MPI_IN_PLACE : p, leader ? p : nullptr, count, type, mpi_op, 0,
                        hosts_->host());
    });
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
  // The others wait for their leader's allreduce across hosts here.
  rc = once_all_arrived(hosts_->host(), wait, bytes, [&] {
    return in_chunks(data, n, elem, [&](void* p, int count) {
      return MPI_Bcast(p, count, type, 0, hosts_->host());
    });
  });
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
  return agree_on_outcome(comm_, rank_, local.ok() ? status : local, response, wait_);
}

Status MpiBackend::execute(const Response& response, const std::vector<TensorEntry*>& entries,
                           PhaseLog* log) {
  switch (response.op) {
    case OpType::kAllreduce:
      return allreduce(response, entries, log);
    case OpType::kAllgather:
      return allgather(response, entries, log);
    case OpType::kBroadcast:
      return broadcast(response, entries, log);
    case OpType::kReducescatter:
      return reducescatter(response, entries, log);
    case OpType::kAlltoall:
      return alltoall(response, entries.at(0), log);
    default:
      return Status::Ok();  // barrier and timeline control move no data
  }
}

Status MpiBackend::allreduce(const Response& response, const std::vector<TensorEntry*>& entries,
                             PhaseLog* log) {
  const DataType dtype = response.dtype;
  const ReduceOp op = response.reduce_op;
  const char* what =
      hosts_ ? "host-aware allreduce (MPI_Reduce, MPI_Allreduce, MPI_Bcast)" : "MPI_Allreduce";
  const bool adasum = op == ReduceOp::kAdasum;
  if (adasum) what = "Adasum (MPI_Isend, MPI_Irecv)";
  std::vector<int64_t> counts;  // Adasum combines each tensor of a batch on its own
  if (adasum) {
    for (const TensorEntry* e : entries) counts.push_back(e->view.num_elements());
  }
  if (entries.size() == 1) {
    const TensorView& v = entries[0]->view;
    int rc = adasum ? adasum_in_place(v.data, counts, dtype, log)
                    : reduce_in_place(v.data, v.num_elements(), dtype, op, wait_, log);
    return mpi_status(rc, what, response);
  }
  // A fused batch goes through the fusion buffer a stage of at most chunk_bytes_ at a time: each
  // stage is packed, reduced and unpacked while it is still in cache (one pass over memory instead
  // of three; docs/benchmarks.md), so the buffer holds one stage. Adasum takes the batch whole
  // (each tensor's dot products span it).
  const FusedLayout layout(entries);
  const size_t total = layout.bytes();
  const size_t elem = dtype_size(dtype);
  const size_t stage = !adasum && chunk_bytes_ > 0
                           ? std::min(total, static_cast<size_t>(per_call(elem)) * elem)
                           : total;
  uint8_t* buffer = fusion_buffer(stage);
  // Several stages' sub-phases are drawn summed (PhaseLog::add_summed): hundreds of stages would
  // otherwise each add three slices to the timeline. One stage (Adasum's levels among them) is
  // drawn as it ran.
  PhaseLog* stages = stage < total ? &stage_log_ : log;
  stage_log_.clear();
  auto done = [&](int rc) {
    if (stages != log) log->add_summed(stage_log_);
    return mpi_status(rc, what, response);
  };
  for (size_t begin = 0; begin < total; begin += stage) {
    const size_t end = std::min(total, begin + stage);
    const int64_t t0 = clock_->now_ns();
    layout.copy(begin, end, buffer, FusionCopy::kIn);
    stages->add(Phase::kMemcpyInFusionBuffer, t0, clock_->now_ns());
    // Once the first stage is done every rank is in the batch: a flat allreduce's later stages
    // call MPI at once; a host-aware one's ranks still wait for their leader's stage across hosts.
    const RankWait& wait = begin == 0 || hosts_ ? wait_ : arrived_;
    const auto n = static_cast<int64_t>((end - begin) / elem);
    int rc = adasum ? adasum_in_place(buffer, counts, dtype, stages)
                    : reduce_in_place(buffer, n, dtype, op, wait, stages);
    if (rc != MPI_SUCCESS) return done(rc);
    const int64_t t1 = clock_->now_ns();
    layout.copy(begin, end, buffer, FusionCopy::kOut);
    stages->add(Phase::kMemcpyOutFusionBuffer, t1, clock_->now_ns());
  }
  return done(MPI_SUCCESS);
}

Status MpiBackend::allgather(const Response& response, const std::vector<TensorEntry*>& entries,
                             PhaseLog* log) {
  // Rank r's block holds its rows of every tensor, in response order: first_dims[t * size + r].
  std::vector<int> counts(size_), displs(size_);
  std::vector<int64_t> rows(entries.size(), 0);
  int64_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    int64_t bytes = 0;
    for (size_t t = 0; t < entries.size(); ++t) {
      const TensorView& v = entries[t]->view;
      const int64_t dim0 = response.first_dims.at(t * size_ + r);
      bytes += dim0 * row_elements(v.shape) * static_cast<int64_t>(dtype_size(v.dtype));
      rows[t] += dim0;
    }
    if (bytes > INT_MAX || offset > INT_MAX) {
      return Status::Error(
          "tensor '" + response.names[0] +
          "': allgather output exceeds 2 GiB, which MPI_Allgatherv cannot address");
    }
    counts[r] = static_cast<int>(bytes);
    displs[r] = static_cast<int>(offset);
    offset += bytes;
  }
  for (size_t t = 0; t < entries.size(); ++t) {
    auto& state = *entries[t]->handle;
    state.output_shape = entries[t]->view.shape;
    state.output_shape[0] = rows[t];
    state.output.resize(static_cast<size_t>(rows[t] * row_elements(state.output_shape)) *
                        dtype_size(entries[t]->view.dtype));
  }
  if (entries.size() == 1) {
    const int64_t t0 = clock_->now_ns();
    int rc = once_all_arrived(comm_, wait_, offset, [&] {
      return MPI_Allgatherv(entries[0]->view.data, counts[rank_], MPI_BYTE,
                            entries[0]->handle->output.data(), counts.data(), displs.data(),
                            MPI_BYTE, comm_);
    });
    log->add(Phase::kMpiAllgather, t0, clock_->now_ns());
    return mpi_status(rc, "MPI_Allgatherv", response);
  }
  // Fused (a group): this rank's tensors back to back, then every rank's blocks after them.
  const int64_t t0 = clock_->now_ns();
  uint8_t* mine = fusion_buffer(static_cast<size_t>(counts[rank_] + offset));
  uint8_t* gathered = mine + counts[rank_];
  pack(entries, mine);
  const int64_t t1 = clock_->now_ns();
  log->add(Phase::kMemcpyInFusionBuffer, t0, t1);
  int rc = once_all_arrived(comm_, wait_, offset, [&] {
    return MPI_Allgatherv(mine, counts[rank_], MPI_BYTE, gathered, counts.data(), displs.data(),
                          MPI_BYTE, comm_);
  });
  const int64_t t2 = clock_->now_ns();
  log->add(Phase::kMpiAllgather, t1, t2);
  if (rc != MPI_SUCCESS) return mpi_status(rc, "MPI_Allgatherv", response);
  std::vector<size_t> written(entries.size(), 0);
  const uint8_t* from = gathered;
  for (int r = 0; r < size_; ++r) {
    for (size_t t = 0; t < entries.size(); ++t) {
      const TensorView& v = entries[t]->view;
      const auto bytes =
          static_cast<size_t>(response.first_dims[t * size_ + r] * row_elements(v.shape)) *
          dtype_size(v.dtype);
      if (bytes) std::memcpy(entries[t]->handle->output.data() + written[t], from, bytes);
      written[t] += bytes;
      from += bytes;
    }
  }
  log->add(Phase::kMemcpyOutFusionBuffer, t2, clock_->now_ns());
  return Status::Ok();
}

Status MpiBackend::reducescatter(const Response& response, const std::vector<TensorEntry*>& entries,
                                 PhaseLog* log) {
  // Rank r receives its rows (scatter_rows) of every tensor, in response order: counts[r].
  const DataType dtype = response.dtype;
  const size_t elem = dtype_size(dtype);
  std::vector<int> counts(size_);
  for (int r = 0; r < size_; ++r) {
    int64_t n = 0;
    for (const TensorEntry* e : entries)
      n += scatter_rows(e->view.shape[0], size_, r) * row_elements(e->view.shape);
    if (n > INT_MAX) {
      return Status::Error("tensor '" + response.names[0] + "': rank " + std::to_string(r) +
                           "'s part of the reducescatter holds more than 2^31 elements, which "
                           "MPI_Reduce_scatter cannot count");
    }
    counts[r] = static_cast<int>(n);
  }
  for (TensorEntry* e : entries) {
    auto& state = *e->handle;
    state.output_shape = e->view.shape;
    state.output_shape[0] = scatter_rows(e->view.shape[0], size_, rank_);
    state.output.resize(static_cast<size_t>(state.output_shape[0] * row_elements(e->view.shape)) *
                        elem);
  }
  const Reduction reduce = reduction(dtype, response.reduce_op);
  const bool average = response.reduce_op == ReduceOp::kAverage;
  const char* what = "MPI_Reduce_scatter";
  if (entries.size() == 1) {
    auto& output = entries[0]->handle->output;
    const int64_t t0 = clock_->now_ns();
    const auto bytes = entries[0]->view.num_bytes();
    int rc = once_all_arrived(comm_, wait_, static_cast<int64_t>(bytes), [&] {
      return MPI_Reduce_scatter(entries[0]->view.data, output.data(), counts.data(), reduce.type,
                                reduce.op, comm_);
    });
    if (rc == MPI_SUCCESS && average) divide_in_place(output.data(), counts[rank_], dtype, size_);
    log->add(Phase::kMpiReducescatter, t0, clock_->now_ns());
    return mpi_status(rc, what, response);
  }
  // Fused: the buffer holds rank 0's rows of every tensor, then rank 1's, ...; reduced in place,
  // this rank's part ends up at its start.
  const int64_t t0 = clock_->now_ns();
  uint8_t* buffer = fusion_buffer(fused_bytes(entries));
  uint8_t* to = buffer;
  for (int r = 0; r < size_; ++r) {
    for (const TensorEntry* e : entries) {
      const int64_t dim0 = e->view.shape[0];
      const auto row_bytes = static_cast<size_t>(row_elements(e->view.shape)) * elem;
      const auto bytes = static_cast<size_t>(scatter_rows(dim0, size_, r)) * row_bytes;
      const auto* from = static_cast<const uint8_t*>(e->view.data) +
                         static_cast<size_t>(scatter_first_row(dim0, size_, r)) * row_bytes;
      if (bytes) std::memcpy(to, from, bytes);
      to += bytes;
    }
  }
  const int64_t t1 = clock_->now_ns();
  log->add(Phase::kMemcpyInFusionBuffer, t0, t1);
  int rc = once_all_arrived(comm_, wait_, static_cast<int64_t>(to - buffer), [&] {
    return MPI_Reduce_scatter(MPI_IN_PLACE, buffer, counts.data(), reduce.type, reduce.op, comm_);
  });
  if (rc == MPI_SUCCESS && average) divide_in_place(buffer, counts[rank_], dtype, size_);
  const int64_t t2 = clock_->now_ns();
  log->add(Phase::kMpiReducescatter, t1, t2);
  if (rc != MPI_SUCCESS) return mpi_status(rc, what, response);
  const uint8_t* from = buffer;
  for (TensorEntry* e : entries) {
    auto& output = e->handle->output;
    if (!output.empty()) std::memcpy(output.data(), from, output.size());
    from += output.size();
  }
  log->add(Phase::kMemcpyOutFusionBuffer, t2, clock_->now_ns());
  return Status::Ok();
}

Status MpiBackend::alltoall(const Response& response, TensorEntry* entry, PhaseLog* log) {
  const TensorView& v = entry->view;
  const int64_t row_bytes = row_elements(v.shape) * static_cast<int64_t>(dtype_size(v.dtype));
  const int64_t t0 = clock_->now_ns();
  // Every rank learns how many rows each other rank sends it (the calls after this one find every
  // rank there).
  std::vector<int32_t> received(size_);
  // Sized by the counts (alike on every rank; the ranks' parts differ).
  const auto count_bytes = static_cast<int64_t>(size_ * sizeof(int32_t));
  int rc = once_all_arrived(comm_, wait_, count_bytes, [&] {
    return MPI_Alltoall(entry->splits.data(), 1, MPI_INT32_T, received.data(), 1, MPI_INT32_T,
                        comm_);
  });
  if (rc != MPI_SUCCESS) return mpi_status(rc, "MPI_Alltoall", response);
  std::vector<int> send_counts(size_), send_displs(size_), recv_counts(size_), recv_displs(size_);
  auto lay_out = [&](const std::vector<int32_t>& rows, std::vector<int>* counts,
                     std::vector<int>* displs) {
    int64_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      const int64_t bytes = rows[r] * row_bytes;
      if (bytes > INT_MAX || offset > INT_MAX) return false;
      (*counts)[r] = static_cast<int>(bytes);
      (*displs)[r] = static_cast<int>(offset);
      offset += bytes;
    }
    return true;
  };
  // Byte counts and offsets must fit MPI's int on every rank: all ranks agree before moving data.
  int fits = lay_out(entry->splits, &send_counts, &send_displs) &&
             lay_out(received, &recv_counts, &recv_displs);
  rc = MPI_Allreduce(MPI_IN_PLACE, &fits, 1, MPI_INT, MPI_MIN, comm_);
  if (rc != MPI_SUCCESS) return mpi_status(rc, "MPI_Allreduce", response);
  if (!fits) {
    log->add(Phase::kMpiAlltoall, t0, clock_->now_ns());
    return Status::Error("tensor '" + response.names[0] +
                         "': an alltoall part exceeds 2 GiB on some rank, which MPI_Alltoallv "
                         "cannot address");
  }
  auto& state = *entry->handle;
  state.received_splits = received;
  state.output_shape = v.shape;
  state.output_shape[0] = 0;
  for (int32_t rows : received) state.output_shape[0] += rows;
  state.output.resize(static_cast<size_t>(state.output_shape[0] * row_bytes));
  rc = MPI_Alltoallv(v.data, send_counts.data(), send_displs.data(), MPI_BYTE, state.output.data(),
                     recv_counts.data(), recv_displs.data(), MPI_BYTE, comm_);
  log->add(Phase::kMpiAlltoall, t0, clock_->now_ns());
  return mpi_status(rc, "MPI_Alltoallv", response);
}

Status MpiBackend::broadcast(const Response& response, const std::vector<TensorEntry*>& entries,
                             PhaseLog* log) {
  const bool root = rank_ == response.root;
  auto bcast = [&](void* data, size_t bytes) {
    auto* p = static_cast<uint8_t*>(data);
    // The others wait for the root's copy here.
    return once_all_arrived(comm_, wait_, static_cast<int64_t>(bytes), [&] {
      for (size_t done = 0; done < bytes; done += INT_MAX) {
        int count = static_cast<int>(std::min<size_t>(INT_MAX, bytes - done));
        int rc = MPI_Bcast(p + done, count, MPI_BYTE, response.root, comm_);
        if (rc != MPI_SUCCESS) return rc;
      }
      return MPI_SUCCESS;
    });
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
