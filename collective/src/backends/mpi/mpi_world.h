// The World of an MPI job: ranktime's own two duplicates of MPI_COMM_WORLD (one for control
// messages, one for the collectives, so ranktime never matches the user's MPI traffic), this
// rank's place on its host, the MPI control channel, the MPI backend for host memory and the
// device backend the factory finds. MPI must be initialised with MPI_THREAD_MULTIPLE.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "backends/mpi/host_groups.h"
#include "backends/mpi/mpi_channel.h"
#include "backends/mpi/request_wait.h"
#include "runtime/world.h"

namespace ranktime {

class MpiWorld final : public World {
 public:
  // Collective over MPI_COMM_WORLD; a doomed job's reason goes to `status_file` (if not empty).
  explicit MpiWorld(std::string status_file = {});
  ~MpiWorld() override;  // frees the communicators unless MPI is finalised
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  Placement placement() const override { return placement_; }
  ControlChannel& control() override { return *channel_; }
  std::unique_ptr<Backend> host_backend(const Clock* clock, const Config& config) override;
  std::unique_ptr<Backend> device_backend(const Clock* clock, const Config& config,
                                          std::function<void()> wake) override;
  SetBackends process_set_backends(int32_t id, const std::vector<int>& ranks, const Clock* clock,
                                   const Config& config, std::function<void()> wake) override;
  std::string check_device(int device) const override;
  bool handles_signals() const override { return true; }
  bool crowded() const override { return hosts_->crowded(); }
  void doom(const std::string& reason, std::chrono::milliseconds exit_wait) override;

 private:
  // How the collectives wait for their ranks: small ones at once unless a host is crowded.
  RankWait wait(const Config& config) const;

  MPI_Comm control_ = MPI_COMM_NULL;         // negotiation messages
  MPI_Comm data_ = MPI_COMM_NULL;            // the collectives themselves
  MPI_Comm exit_ = MPI_COMM_NULL;            // a doomed job's exit barrier (job_abort.h)
  std::shared_ptr<const HostGroups> hosts_;  // placement on the hosts; the host-aware allreduce
  Placement placement_;
  std::unique_ptr<MpiChannel> channel_;
  std::string status_file_;
};

}  // namespace ranktime
