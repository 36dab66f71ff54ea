// The control channel over MPI: point to point on a communicator of ranktime's own (a duplicate
// of MPI_COMM_WORLD, so user traffic never matches it). Control messages go with MPI_Isend and
// arrive through MPI_Iprobe + MPI_Recv, so the background thread never blocks inside MPI (Open
// MPI's blocking calls poll a core).
#pragma once

#include <mpi.h>

#include <deque>
#include <memory>

#include "runtime/control_channel.h"
#include "runtime/wake_word.h"

namespace ranktime {

class MpiChannel final : public ControlChannel {
 public:
  explicit MpiChannel(MPI_Comm comm);  // not owned
  ~MpiChannel() override;
  MpiChannel(const MpiChannel&) = delete;
  MpiChannel& operator=(const MpiChannel&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allgather_hosts(const std::string& hostname, const std::vector<int64_t>& numbers,
                       std::vector<std::string>* hostnames,
                       std::vector<int64_t>* all_numbers) override;
  void broadcast(int* values, int count) override;
  void send_ping(int rank, int64_t t0) override;
  std::pair<int64_t, int64_t> receive_pong(int rank) override;
  void receive_ping() override;
  void send_pong(int64_t t1, int64_t t2) override;
  // A POSIX shared memory object made by rank 0, opened by the others, unlinked once all have it.
  WakeWord* share_rank0_wake() override;
  void send(int to, std::shared_ptr<const std::vector<uint8_t>> message) override;
  bool receive(int* from, std::vector<uint8_t>* message) override;
  void reap_sends(bool wait) override;

 private:
  struct PendingSend {
    MPI_Request request;
    std::shared_ptr<const std::vector<uint8_t>> buffer;
  };
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::deque<PendingSend> sends_;
  WakeWords* shared_words_ = nullptr;  // mapped, or null
  std::unique_ptr<WakeWord> rank0_wake_;
};

}  // namespace ranktime
