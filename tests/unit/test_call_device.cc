// call_device() (bindings/c10d): the one device a torch.distributed call's tensors are on, and
// the errors that name the call, the tensors and their devices.
#include "call_device.h"

#include <c10/util/Exception.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ranktime::c10d {
namespace {

using ::testing::HasSubstr;

const c10::Device kCpu(c10::kCPU);
const c10::Device kCuda0(c10::kCUDA, 0);
const c10::Device kCuda1(c10::kCUDA, 1);
const c10::Device kMeta(c10::kMeta);

// The message call_device() throws, or "" where it returns.
std::string error_of(const std::vector<TensorPlace>& tensors) {
  try {
    call_device("all_gather", tensors);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(CallDevice, TheTensorsCommonDevice) {
  EXPECT_EQ(call_device("all_reduce", {{"tensor", -1, kCpu}}), kCpu);
  EXPECT_EQ(call_device("all_reduce", {{"tensor", -1, kCuda1}}), kCuda1);
  EXPECT_EQ(call_device("all_gather",
                        {{"input", -1, kCuda0}, {"output", 0, kCuda0}, {"output", 1, kCuda0}}),
            kCuda0);
}

TEST(CallDevice, NoTensorsIsTheCpu) { EXPECT_EQ(call_device("all_reduce_coalesced", {}), kCpu); }

TEST(CallDevice, MixedDevicesNameTheCallTheTensorsAndTheirDevices) {
  EXPECT_EQ(error_of({{"input", -1, kCuda0}, {"output", 0, kCuda0}, {"output", 1, kCpu}}),
            "ranktime: all_gather: a call's tensors must all be on one device, but input is on "
            "cuda:0 and output 1 on cpu");
}

TEST(CallDevice, TwoCudaDevicesDiffer) {
  EXPECT_THAT(error_of({{"input", -1, kCuda0}, {"output", -1, kCuda1}}),
              HasSubstr("input is on cuda:0 and output on cuda:1"));
}

TEST(CallDevice, OtherDeviceTypesAreRefusedByName) {
  EXPECT_EQ(error_of({{"input", -1, kCpu}, {"output", 2, kMeta}}),
            "ranktime: all_gather: output 2 is on meta; the ranktime backend takes CPU and CUDA "
            "tensors");
  // Even where every tensor agrees.
  EXPECT_THAT(error_of({{"input", -1, kMeta}}), HasSubstr("input is on meta"));
}

}  // namespace
}  // namespace ranktime::c10d
