// An MPI job as the runtime's World (see mpi_world.h).
#include "backends/mpi/mpi_world.h"

#include <unistd.h>

#include <algorithm>

#include "backends/factory.h"
#include "backends/mpi/job_abort.h"
#include "backends/mpi/mpi_backend.h"
#include "backends/mpi/request_wait.h"
#include "core/log.h"

namespace ranktime {
namespace {

// Rank 0 aborts first, after its timeline is closed; the other ranks' later abort is the
// backstop for a job whose rank 0 is gone.
constexpr std::chrono::milliseconds kRank0AbortGrace(2000);
constexpr std::chrono::milliseconds kAbortGrace(4000);

}  // namespace

MpiWorld::MpiWorld(std::string status_file) : status_file_(std::move(status_file)) {
  MPI_Comm_dup(MPI_COMM_WORLD, &control_);
  MPI_Comm_dup(MPI_COMM_WORLD, &data_);
  MPI_Comm_dup(MPI_COMM_WORLD, &exit_);
  hosts_ = std::make_shared<const HostGroups>(control_);
  Placement& p = placement_;
  MPI_Comm_rank(control_, &p.rank);
  MPI_Comm_size(control_, &p.size);
  p.local_rank = hosts_->host_rank();
  p.local_size = hosts_->host_size();
  p.cross_rank = hosts_->cross_rank();
  p.cross_size = hosts_->cross_size();
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  p.hostname = host;
  p.pid = getpid();
  channel_ = std::make_unique<MpiChannel>(control_);
}

MpiWorld::~MpiWorld() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Comm_free(&control_);
  MPI_Comm_free(&data_);
  MPI_Comm_free(&exit_);
}

RankWait MpiWorld::wait(const Config& config) const {
  return RankWait(config.spin(), /*direct=*/!hosts_->crowded());
}

std::unique_ptr<Backend> MpiWorld::host_backend(const Clock* clock, const Config& config) {
  // Ranks that disagree would wait for each other in different collectives: all or none.
  int asked[2] = {config.hierarchical_allreduce ? 1 : 0, config.hierarchical_allreduce ? 0 : 1};
  MPI_Allreduce(MPI_IN_PLACE, asked, 2, MPI_INT, MPI_MAX, data_);
  const bool by_host = asked[0] == 1 && asked[1] == 0 && hosts_->worthwhile();
  if (placement_.rank == 0 && asked[0] == 1 && asked[1] == 1) {
    RANKTIME_LOG(kWarning,
                 "RANKTIME_HIERARCHICAL_ALLREDUCE differs between ranks: every rank "
                 "allreduces flat");
  } else if (placement_.rank == 0 && asked[0] == 1 && !by_host) {
    RANKTIME_LOG(kInfo, "host-aware allreduce off: " << hosts_->hosts() << " host(s) for "
                                                     << placement_.size << " ranks");
  }
  return std::make_unique<MpiBackend>(data_, clock, config.allreduce_chunk,
                                      by_host ? hosts_ : nullptr, config.test_fail_local,
                                      wait(config));
}

SetBackends MpiWorld::process_set_backends(int32_t id, const std::vector<int>& ranks,
                                           const Clock* clock, const Config& config,
                                           std::function<void()> wake) {
  // Split from the collectives' communicator: every rank executes every set change in the same
  // place among its collectives, so the split matches up like any other collective.
  const bool member = std::binary_search(ranks.begin(), ranks.end(), placement_.rank);
  MPI_Comm comm = MPI_COMM_NULL;
  once_all_arrived(data_, wait(config), 0, [&] {
    return MPI_Comm_split(data_, member ? 0 : MPI_UNDEFINED, placement_.rank, &comm);
  });
  if (comm == MPI_COMM_NULL) return {};
  RANKTIME_LOG(kDebug, "process set " << id << ": a communicator of " << ranks.size() << " ranks");
  SetBackends out;
  out.host = std::make_unique<MpiBackend>(comm, clock, config.allreduce_chunk, nullptr,
                                          config.test_fail_local, wait(config), /*owns_comm=*/true);
  // Over the same communicator: the GPU backend makes its device sets (NCCL communicators over
  // duplicates of it) collectively among the members, at the set's first device response.
  out.device = make_device_backend(comm, clock, config, std::move(wake));
  return out;
}

std::unique_ptr<Backend> MpiWorld::device_backend(const Clock* clock, const Config& config,
                                                  std::function<void()> wake) {
  return make_device_backend(data_, clock, config, std::move(wake));
}

void MpiWorld::doom(const std::string& reason, std::chrono::milliseconds exit_wait) {
  doom_job(placement_.rank, reason,
           (placement_.rank == 0 ? kRank0AbortGrace : kAbortGrace) + exit_wait, status_file_,
           exit_wait.count() > 0 ? exit_ : MPI_COMM_NULL);
}

std::string MpiWorld::check_device(int device) const { return ranktime::check_device(device); }

}  // namespace ranktime
