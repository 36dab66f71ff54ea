// Ranks as threads (see thread_world.h).
#include "thread_world.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/reduce.h"
#include "core/rows.h"

namespace ranktime::testing {

ThreadGroup::ThreadGroup(int size) : size_(size), parts_(size) {}

bool ThreadGroup::arrive(int rank, const Part* part) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (aborted_) return false;
  if (part != nullptr) parts_[rank] = *part;
  const int64_t generation = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return true;
  }
  cv_.wait(lock, [&] { return generation_ != generation || aborted_; });
  return !aborted_;
}

bool ThreadGroup::barrier() { return arrive(0, nullptr); }

void ThreadGroup::abort() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = true;
  }
  cv_.notify_all();
}

bool ThreadGroup::allreduce(int rank, void* data, int64_t n, DataType dtype, ReduceOp op) {
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
  const Part mine{data, bytes};
  if (!arrive(rank, &mine)) return false;
  // Every rank reduces every part in rank order, into a buffer of its own, then waits until all
  // have read before writing its result in place.
  std::vector<std::byte> result(bytes);
  if (bytes) std::memcpy(result.data(), parts_[0].data, bytes);
  for (int r = 1; r < size_; ++r) reduce_into(parts_[r].data, result.data(), n, dtype, op);
  if (op == ReduceOp::kAverage) divide_in_place(result.data(), n, dtype, size_);
  if (!barrier()) return false;
  if (bytes) std::memcpy(data, result.data(), bytes);
  return barrier();
}

bool ThreadGroup::allgather(int rank, const void* data, size_t bytes, std::vector<std::byte>* out,
                            std::vector<size_t>* sizes) {
  const Part mine{data, bytes};
  if (!arrive(rank, &mine)) return false;
  out->clear();
  sizes->clear();
  for (int r = 0; r < size_; ++r) {
    const auto* p = static_cast<const std::byte*>(parts_[r].data);
    out->insert(out->end(), p, p + parts_[r].bytes);
    sizes->push_back(parts_[r].bytes);
  }
  return barrier();
}

bool ThreadGroup::broadcast(int rank, void* data, size_t bytes, int root) {
  const Part mine{data, bytes};
  if (!arrive(rank, &mine)) return false;
  if (rank != root && bytes) std::memcpy(data, parts_[root].data, bytes);
  return barrier();
}

bool ThreadGroup::reducescatter(int rank, const void* data, int64_t rows, int64_t row_elems,
                                DataType dtype, ReduceOp op, std::vector<std::byte>* out) {
  const Part mine{data, static_cast<size_t>(rows * row_elems) * dtype_size(dtype)};
  if (!arrive(rank, &mine)) return false;
  const int64_t n = scatter_rows(rows, size_, rank) * row_elems;
  const size_t begin =
      static_cast<size_t>(scatter_first_row(rows, size_, rank) * row_elems) * dtype_size(dtype);
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
  out->assign(bytes, std::byte{0});
  const auto part = [&](int r) { return static_cast<const std::byte*>(parts_[r].data) + begin; };
  if (bytes) std::memcpy(out->data(), part(0), bytes);
  for (int r = 1; r < size_; ++r) reduce_into(part(r), out->data(), n, dtype, op);
  if (op == ReduceOp::kAverage) divide_in_place(out->data(), n, dtype, size_);
  return barrier();
}

bool ThreadGroup::alltoall(int rank, const void* data, size_t row_bytes,
                           const std::vector<int32_t>& send_rows, std::vector<std::byte>* out,
                           std::vector<int32_t>* received) {
  Part mine{data, row_bytes, send_rows.data()};
  if (!arrive(rank, &mine)) return false;
  out->clear();
  received->clear();
  for (int q = 0; q < size_; ++q) {
    int64_t offset = 0;
    for (int d = 0; d < rank; ++d) offset += parts_[q].send_rows[d];
    const auto* p = static_cast<const std::byte*>(parts_[q].data) + offset * row_bytes;
    out->insert(out->end(), p, p + parts_[q].send_rows[rank] * row_bytes);
    received->push_back(parts_[q].send_rows[rank]);
  }
  return barrier();
}

ThreadBackend::ThreadBackend(int rank, std::shared_ptr<ThreadGroup> group, const Clock* clock)
    : InlineBackend(clock), rank_(rank), group_(std::move(group)) {}

Status ThreadBackend::run_one(const Response& r, TensorEntry* entry) {
  const TensorView& v = entry->view;
  bool ok = true;
  switch (r.op) {
    case OpType::kAllreduce:
      ok = group_->allreduce(rank_, v.data, v.num_elements(), v.dtype, r.reduce_op);
      break;
    case OpType::kAllgather: {
      std::vector<size_t> sizes;
      auto& state = *entry->handle;
      ok = group_->allgather(rank_, v.data, v.num_bytes(), &state.output, &sizes);
      state.output_shape = v.shape;
      state.output_shape[0] = 0;
      for (int64_t rows : r.first_dims) state.output_shape[0] += rows;
      break;
    }
    case OpType::kBroadcast:
      ok = group_->broadcast(rank_, v.data, v.num_bytes(), r.root);
      break;
    case OpType::kReducescatter: {
      auto& state = *entry->handle;
      ok = group_->reducescatter(rank_, v.data, v.shape[0], row_elements(v.shape), v.dtype,
                                 r.reduce_op, &state.output);
      state.output_shape = v.shape;
      state.output_shape[0] = scatter_rows(v.shape[0], group_->size(), rank_);
      break;
    }
    case OpType::kAlltoall: {
      auto& state = *entry->handle;
      const size_t row_bytes = static_cast<size_t>(row_elements(v.shape)) * dtype_size(v.dtype);
      ok = group_->alltoall(rank_, v.data, row_bytes, entry->splits, &state.output,
                            &state.received_splits);
      state.output_shape = v.shape;
      state.output_shape[0] = 0;
      for (int32_t rows : state.received_splits) state.output_shape[0] += rows;
      break;
    }
    default:  // a barrier is its negotiation (as over MPI): nothing to run
      break;
  }
  return ok ? Status::Ok() : Status::Error("the thread group was aborted");
}

Status ThreadBackend::run(const Response& response, const std::vector<TensorEntry*>& entries,
                          PhaseLog* log) {
  const int64_t start_ns = clock_->now_ns();
  Status status;
  for (TensorEntry* e : entries) {
    Status s = run_one(response, e);
    if (status.ok()) status = s;
  }
  using timeline::Phase;
  Phase phase = Phase::kMpiAllreduce;
  switch (response.op) {
    case OpType::kAllgather:
      phase = Phase::kMpiAllgather;
      break;
    case OpType::kBroadcast:
      phase = Phase::kMpiBcast;
      break;
    case OpType::kReducescatter:
      phase = Phase::kMpiReducescatter;
      break;
    case OpType::kAlltoall:
      phase = Phase::kMpiAlltoall;
      break;
    default:
      break;
  }
  if (response.op != OpType::kBarrier) log->add(phase, start_ns, clock_->now_ns());
  return status;
}

std::shared_ptr<ThreadGroup> SetGroups::group(int32_t id, int size) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::shared_ptr<ThreadGroup> group = groups_[id].lock();
  if (!group) {
    group = std::make_shared<ThreadGroup>(size);
    groups_[id] = group;
  }
  return group;
}

ThreadWorld::ThreadWorld(int rank, std::shared_ptr<MemoryHub> hub,
                         std::shared_ptr<ThreadGroup> group, std::shared_ptr<SetGroups> sets)
    : channel_(hub, rank), group_(std::move(group)), sets_(std::move(sets)) {
  placement_.rank = rank;
  placement_.size = hub->size();
  placement_.local_rank = rank;
  placement_.local_size = hub->size();
  placement_.hostname = "host" + std::to_string(rank);
  placement_.pid = getpid();
}

std::unique_ptr<Backend> ThreadWorld::host_backend(const Clock* clock, const Config&) {
  return std::make_unique<ThreadBackend>(placement_.rank, group_, clock);
}

SetBackends ThreadWorld::process_set_backends(int32_t id, const std::vector<int>& ranks,
                                              const Clock* clock, const Config&,
                                              std::function<void()>) {
  auto me = std::lower_bound(ranks.begin(), ranks.end(), placement_.rank);
  if (me == ranks.end() || *me != placement_.rank) return {};
  SetBackends out;
  out.host =
      std::make_unique<ThreadBackend>(static_cast<int>(me - ranks.begin()),
                                      sets_->group(id, static_cast<int>(ranks.size())), clock);
  return out;
}

std::string ThreadWorld::check_device(int device) const {
  return "device tensors (device " + std::to_string(device) +
         ") need a GPU backend, which thread ranks do not have";
}

InProcessJob::InProcessJob(int size, const std::function<Config(int)>& config,
                           const std::function<void(MemoryHub&)>& hub_setup)
    : hub_(std::make_shared<MemoryHub>(size)),
      group_(std::make_shared<ThreadGroup>(size)),
      runtimes_(size) {
  if (hub_setup) hub_setup(*hub_);
  // Start-up is collective: every rank constructs its Runtime at the same time.
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      runtimes_[r] = std::make_unique<Runtime>(
          config ? config(r) : Config{}, std::make_unique<ThreadWorld>(r, hub_, group_, sets_));
    });
  }
  for (auto& t : threads) t.join();
}

InProcessJob::~InProcessJob() { shutdown(); }

void InProcessJob::on_every_rank(const std::function<void(int, Runtime&)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size(); ++r) threads.emplace_back([&, r] { fn(r, *runtimes_[r]); });
  for (auto& t : threads) t.join();
}

void InProcessJob::shutdown() {
  on_every_rank([](int, Runtime& runtime) { runtime.shutdown(); });
}

}  // namespace ranktime::testing
