// The job's hosts as communicators (see host_groups.h).
#include "backends/mpi/host_groups.h"

#include <thread>

namespace ranktime {

HostGroups::HostGroups(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size_);
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host_);
  MPI_Comm_rank(host_, &host_rank_);
  MPI_Comm_size(host_, &host_size_);
  MPI_Comm_split(comm, host_rank_, rank, &cross_);
  MPI_Comm_rank(cross_, &cross_rank_);
  MPI_Comm_size(cross_, &cross_size_);
  // Every host has a first rank: among them, the cross group holds every host.
  hosts_ = cross_size_;
  MPI_Bcast(&hosts_, 1, MPI_INT, 0, host_);
  int crowded = host_size_ > static_cast<int>(std::thread::hardware_concurrency()) ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &crowded, 1, MPI_INT, MPI_MAX, comm);
  crowded_ = crowded != 0;
}

HostGroups::~HostGroups() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Comm_free(&cross_);
  MPI_Comm_free(&host_);
}

}  // namespace ranktime
