// Agreement on each response's outcome (see outcome.h).
#include "backends/mpi/outcome.h"

#include <algorithm>
#include <cstdlib>

namespace ranktime {
namespace {

std::string tensors_text(const Response& r) {
  std::string text = "tensor '" + (r.names.empty() ? std::string() : r.names.front()) + "'";
  if (r.names.size() > 1) text += " (and " + std::to_string(r.names.size() - 1) + " fused)";
  return text;
}

}  // namespace

Status agree_on_outcome(MPI_Comm comm, int rank, const Status& local, const Response& response,
                        const RankWait& wait) {
  // The highest failed rank + 1, or 0 when every rank's part succeeded.
  int failed = local.ok() ? 0 : rank + 1;
  int rc = MPI_SUCCESS;
  if (wait.direct(sizeof(failed))) {
    rc = MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, comm);
  } else {
    MPI_Request request;
    rc = MPI_Iallreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, comm, &request);
    if (rc == MPI_SUCCESS) rc = wait_for(&request, wait.spin);
  }
  if (!local.ok()) return local;
  if (rc != MPI_SUCCESS) {
    return Status::Error(tensors_text(response) +
                         ": could not agree with the other ranks on the outcome (MPI error)");
  }
  if (failed == 0) return local;
  return Status::Error(tensors_text(response) + ": rank " + std::to_string(failed - 1) +
                       "'s part of this collective failed, so its result is not valid on any "
                       "rank (see rank " +
                       std::to_string(failed - 1) + "'s error)");
}

Status injected_local_fault(const std::string& spec, int rank, const Response& response) {
  if (spec.empty()) return Status::Ok();
  const size_t colon = spec.find(':');
  if (colon == std::string::npos || std::atoi(spec.substr(0, colon).c_str()) != rank) {
    return Status::Ok();
  }
  const std::string name = spec.substr(colon + 1);
  if (std::find(response.names.begin(), response.names.end(), name) == response.names.end()) {
    return Status::Ok();
  }
  return Status::Error("tensor '" + name + "': copying it failed on rank " + std::to_string(rank) +
                       " (injected by RANKTIME_TEST_FAIL_LOCAL)");
}

}  // namespace ranktime
