// Request validation: a submission checked on its own rank (check_tensor_view), and one tensor's
// requests checked against each other on rank 0 (validate_requests). Pure: no MPI, no clock.
// Errors name the tensor, what differs and each rank's value; they fail that tensor on every rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/message.h"
#include "negotiation/process_sets.h"

namespace ranktime {

// "rank 2" or "ranks 0,2,5", for messages.
std::string ranks_text(const std::vector<int>& ranks);
// "[2,3]".
std::string shape_text(const std::vector<int64_t>& shape);

// A tensor's local problems (invalid dtype, shape, null or misaligned data); "" when fine. The
// device is checked elsewhere (whether this build and host have a GPU backend).
std::string check_tensor_view(const TensorView& view);

// The call's own arguments for operations that split dimension 0 (reducescatter, alltoall):
// at least one dimension, host memory, and for alltoall `splits` that fit `size` ranks and the
// tensor (empty: an equal split, so dimension 0 must divide); "" when fine. Problems here are
// the caller's (Status::InvalidArgument).
std::string check_arguments(OpType op, const TensorView& view, const std::vector<int32_t>& splits,
                            int size);

// Checks that every rank's request for one tensor agrees. Returns "" or a message naming the
// tensor, the field that differs and each rank's value. `ranks`: the rank of each request, when
// they are not every rank in order (a process set's members, ranks that did not join); `set`: the
// process set of the tensor (a broadcast's root must be one of its ranks); null: every rank.
std::string validate_requests(const std::vector<Request>& by_rank,
                              const std::vector<int>* ranks = nullptr,
                              const ProcessSet* set = nullptr);

// "tensor 'x': rank 2 submitted it twice while in flight": a second request for a name the rank
// has pending, which fails that tensor.
std::string duplicate_request_error(const std::string& name, int rank);

// Byte size of a request's tensor on the submitting rank.
int64_t request_bytes(const Request& request);

}  // namespace ranktime
