// The job's hosts as communicators (see host_groups.h).
#include "backends/mpi/host_groups.h"

namespace ranktime {

HostGroups::HostGroups(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size_);
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host_);
  int host_rank = 0;
  MPI_Comm_rank(host_, &host_rank);
  MPI_Comm_split(comm, host_rank == 0 ? 0 : MPI_UNDEFINED, rank, &leaders_);
  int is_leader = host_rank == 0 ? 1 : 0;
  MPI_Allreduce(&is_leader, &hosts_, 1, MPI_INT, MPI_SUM, comm);
}

HostGroups::~HostGroups() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (leaders_ != MPI_COMM_NULL) MPI_Comm_free(&leaders_);
  MPI_Comm_free(&host_);
}

}  // namespace ranktime
