// An MPI job as the runtime's World (see mpi_world.h).
#include "backends/mpi/mpi_world.h"

#include <unistd.h>

#include "backends/factory.h"
#include "backends/mpi/mpi_backend.h"

namespace ranktime {

MpiWorld::MpiWorld() {
  MPI_Comm_dup(MPI_COMM_WORLD, &control_);
  MPI_Comm_dup(MPI_COMM_WORLD, &data_);
  Placement& p = placement_;
  MPI_Comm_rank(control_, &p.rank);
  MPI_Comm_size(control_, &p.size);
  MPI_Comm local;
  MPI_Comm_split_type(control_, MPI_COMM_TYPE_SHARED, p.rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &p.local_rank);
  MPI_Comm_size(local, &p.local_size);
  MPI_Comm_free(&local);
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
}

std::unique_ptr<Backend> MpiWorld::host_backend(const Clock* clock, const Config& config) {
  return std::make_unique<MpiBackend>(data_, clock, config.allreduce_chunk);
}

std::unique_ptr<Backend> MpiWorld::device_backend(const Clock* clock, const Config& config,
                                                  std::function<void()> wake) {
  return make_device_backend(data_, clock, config, std::move(wake));
}

std::string MpiWorld::check_device(int device) const { return ranktime::check_device(device); }

}  // namespace ranktime
