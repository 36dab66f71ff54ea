// The hosts of an MPI job as communicators: this rank's host (a shared-memory split of the job)
// and the ranks with the same place on every host (Horovod's "cross" ranks; among the first rank
// of every host, the leaders of the host-aware allreduce). Made collectively over the job's
// communicator; uneven hosts (3 + 1 ranks) are fine.
#pragma once

#include <mpi.h>

namespace ranktime {

class HostGroups {
 public:
  explicit HostGroups(MPI_Comm comm);  // collective over comm
  ~HostGroups();                       // frees the communicators unless MPI is finalised
  HostGroups(const HostGroups&) = delete;
  HostGroups& operator=(const HostGroups&) = delete;

  int host_rank() const { return host_rank_; }  // among the ranks on this host
  int host_size() const { return host_size_; }
  int cross_rank() const { return cross_rank_; }  // among the ranks with this host rank
  int cross_size() const { return cross_size_; }
  int hosts() const { return hosts_; }
  // Whether splitting by host changes anything: more than one host, and a host with more than
  // one rank.
  bool worthwhile() const { return hosts_ > 1 && hosts_ < size_; }
  bool leader() const { return host_rank_ == 0; }
  // Whether some host of the job runs more ranks than it has processors online (alike on every
  // rank): there a rank polling in a blocking call takes the core a peer needs.
  bool crowded() const { return crowded_; }
  MPI_Comm host() const { return host_; }  // this host's ranks; the leader is rank 0
  // One rank per host, on the leaders; null elsewhere.
  MPI_Comm leaders() const { return leader() ? cross_ : MPI_COMM_NULL; }

 private:
  MPI_Comm host_ = MPI_COMM_NULL;
  MPI_Comm cross_ = MPI_COMM_NULL;
  int host_rank_ = 0, host_size_ = 1, cross_rank_ = 0, cross_size_ = 1;
  int size_ = 1;
  int hosts_ = 1;
  bool crowded_ = false;
};

}  // namespace ranktime
