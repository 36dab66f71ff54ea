// CUDA and NCCL return codes turned into ranktime Status messages that name the tensor, the call
// and the library's own explanation.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "core/message.h"

namespace ranktime::gpu {

// "tensor 'w' (and 3 fused)": how errors name the tensors of a response.
std::string describe_tensors(const Response& response);

std::string cuda_error_text(cudaError_t rc);  // "cudaErrorInvalidValue: invalid argument"
// "ncclUnhandledCudaError: unhandled cuda error (...last error...)"; comm may be null.
std::string nccl_error_text(ncclResult_t rc, ncclComm_t comm);

inline Status cuda_status(cudaError_t rc, const char* call, const Response& response) {
  if (rc == cudaSuccess) return Status::Ok();
  return Status::Error(call + std::string(" failed for ") + describe_tensors(response) + ": " +
                       cuda_error_text(rc));
}

inline Status nccl_status(ncclResult_t rc, const char* call, const Response& response,
                          ncclComm_t comm) {
  if (rc == ncclSuccess) return Status::Ok();
  return Status::Error(call + std::string(" failed for ") + describe_tensors(response) + ": " +
                       nccl_error_text(rc, comm));
}

}  // namespace ranktime::gpu
