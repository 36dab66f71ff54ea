// The hosts of an MPI job as communicators, for the host-aware allreduce: this rank's host (a
// shared-memory split of the job) and, among the first rank of every host, the leaders. Made
// collectively over the job's communicator; uneven hosts (3 + 1 ranks) are fine.
#pragma once

#include <mpi.h>

namespace ranktime {

class HostGroups {
 public:
  explicit HostGroups(MPI_Comm comm);  // collective over comm
  ~HostGroups();                       // frees the communicators unless MPI is finalised
  HostGroups(const HostGroups&) = delete;
  HostGroups& operator=(const HostGroups&) = delete;

  // Whether splitting by host changes anything: more than one host, and a host with more than
  // one rank.
  bool worthwhile() const { return hosts_ > 1 && hosts_ < size_; }
  int hosts() const { return hosts_; }
  bool leader() const { return leaders_ != MPI_COMM_NULL; }
  MPI_Comm host() const { return host_; }        // this host's ranks; the leader is rank 0
  MPI_Comm leaders() const { return leaders_; }  // one rank per host; null off the leaders

 private:
  MPI_Comm host_ = MPI_COMM_NULL;
  MPI_Comm leaders_ = MPI_COMM_NULL;
  int size_ = 1;
  int hosts_ = 1;
};

}  // namespace ranktime
