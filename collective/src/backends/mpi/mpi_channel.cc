// The control channel over MPI (see mpi_channel.h).
#include "backends/mpi/mpi_channel.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <new>

namespace ranktime {
namespace {

// Workers send rank 0 kTagWorker, rank 0 sends workers kTagResponse.
constexpr int kTagWorker = 1;
constexpr int kTagResponse = 2;
constexpr int kTagPing = 3;
constexpr int kTagPong = 4;
// Host names travel in fixed slots (gethostname's limit is far below).
constexpr int kHostSlot = 256;
constexpr int kShmNameSlot = 64;

// Maps the shared memory object `name` (rank 0: creates it, with its words zeroed); null on any
// failure.
WakeWords* map_wake_words(const char* name, bool create) {
  const int fd = ::shm_open(name, create ? (O_CREAT | O_EXCL | O_RDWR) : O_RDWR, 0600);
  if (fd < 0) return nullptr;
  void* p = MAP_FAILED;
  if (!create || ::ftruncate(fd, sizeof(WakeWords)) == 0) {
    p = ::mmap(nullptr, sizeof(WakeWords), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  ::close(fd);
  if (p == MAP_FAILED) {
    if (create) ::shm_unlink(name);
    return nullptr;
  }
  return create ? new (p) WakeWords() : static_cast<WakeWords*>(p);
}

}  // namespace

MpiChannel::MpiChannel(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiChannel::~MpiChannel() {
  if (shared_words_ != nullptr) ::munmap(shared_words_, sizeof(WakeWords));
}

WakeWord* MpiChannel::share_rank0_wake() {
  if (size_ < 2 || rank0_wake_) return rank0_wake_.get();
  // Rank 0 makes the object first; an empty name says it could not.
  char name[kShmNameSlot] = {};
  if (rank_ == 0) {
    const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    std::snprintf(name, sizeof(name), "/ranktime-wake-%d-%llx", static_cast<int>(::getpid()),
                  static_cast<unsigned long long>(stamp));
    shared_words_ = map_wake_words(name, true);
    if (shared_words_ == nullptr) name[0] = '\0';
  }
  MPI_Bcast(name, kShmNameSlot, MPI_CHAR, 0, comm_);
  if (rank_ != 0 && name[0] != '\0') shared_words_ = map_wake_words(name, false);
  int mapped = shared_words_ != nullptr ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &mapped, 1, MPI_INT, MPI_MIN, comm_);
  // Every rank has opened it (or given up): the name goes, the mappings stay.
  if (rank_ == 0 && name[0] != '\0') ::shm_unlink(name);
  if (!mapped) {
    if (shared_words_ != nullptr) ::munmap(shared_words_, sizeof(WakeWords));
    shared_words_ = nullptr;
    return nullptr;
  }
  rank0_wake_ = std::make_unique<WakeWord>(shared_words_, /*shared=*/true);
  return rank0_wake_.get();
}

void MpiChannel::allgather_hosts(const std::string& hostname, const std::vector<int64_t>& numbers,
                                 std::vector<std::string>* hostnames,
                                 std::vector<int64_t>* all_numbers) {
  char host[kHostSlot] = {};
  hostname.copy(host, kHostSlot - 1);
  std::vector<char> hosts(static_cast<size_t>(kHostSlot) * size_);
  MPI_Allgather(host, kHostSlot, MPI_CHAR, hosts.data(), kHostSlot, MPI_CHAR, comm_);
  const int count = static_cast<int>(numbers.size());
  all_numbers->resize(numbers.size() * size_);
  MPI_Allgather(numbers.data(), count, MPI_INT64_T, all_numbers->data(), count, MPI_INT64_T, comm_);
  hostnames->clear();
  for (int r = 0; r < size_; ++r) hostnames->emplace_back(&hosts[kHostSlot * r]);
}

void MpiChannel::broadcast(int* values, int count) { MPI_Bcast(values, count, MPI_INT, 0, comm_); }

void MpiChannel::send_ping(int rank, int64_t t0) {
  MPI_Send(&t0, 1, MPI_INT64_T, rank, kTagPing, comm_);
}

std::pair<int64_t, int64_t> MpiChannel::receive_pong(int rank) {
  int64_t reply[2];
  MPI_Recv(reply, 2, MPI_INT64_T, rank, kTagPong, comm_, MPI_STATUS_IGNORE);
  return {reply[0], reply[1]};
}

void MpiChannel::receive_ping() {
  int64_t t0;
  MPI_Recv(&t0, 1, MPI_INT64_T, 0, kTagPing, comm_, MPI_STATUS_IGNORE);
}

void MpiChannel::send_pong(int64_t t1, int64_t t2) {
  int64_t reply[2] = {t1, t2};
  MPI_Send(reply, 2, MPI_INT64_T, 0, kTagPong, comm_);
}

void MpiChannel::send(int to, std::shared_ptr<const std::vector<uint8_t>> message) {
  PendingSend send{MPI_REQUEST_NULL, std::move(message)};
  MPI_Isend(send.buffer->data(), static_cast<int>(send.buffer->size()), MPI_BYTE, to,
            rank_ == 0 ? kTagResponse : kTagWorker, comm_, &send.request);
  sends_.push_back(std::move(send));
  if (to == 0 && rank0_wake_) rank0_wake_->wake();  // after the send: rank 0 probes when woken
}

bool MpiChannel::receive(int* from, std::vector<uint8_t>* message) {
  const int source = rank_ == 0 ? MPI_ANY_SOURCE : 0;
  const int tag = rank_ == 0 ? kTagWorker : kTagResponse;
  int flag = 0;
  MPI_Status status;
  MPI_Iprobe(source, tag, comm_, &flag, &status);
  if (!flag) return false;
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  message->resize(count);
  MPI_Recv(message->data(), count, MPI_BYTE, status.MPI_SOURCE, tag, comm_, MPI_STATUS_IGNORE);
  *from = status.MPI_SOURCE;
  return true;
}

void MpiChannel::reap_sends(bool wait) {
  while (!sends_.empty()) {
    int done = 0;
    if (wait) {
      MPI_Wait(&sends_.front().request, MPI_STATUS_IGNORE);
      done = 1;
    } else {
      MPI_Test(&sends_.front().request, &done, MPI_STATUS_IGNORE);
    }
    if (!done) return;
    sends_.pop_front();
  }
}

}  // namespace ranktime
