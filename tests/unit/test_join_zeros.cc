// A joined rank's stand-ins (runtime/join_zeros.h): zeros in host memory for a host response; for
// a device response, entries on the response's device with no data at all, which the device
// backend zeroes itself (no host pointer may reach a device collective).
#include "runtime/join_zeros.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace ranktime {
namespace {

Response allreduce_of(int device) {
  Response r;
  r.op = OpType::kAllreduce;
  r.dtype = DataType::kFloat32;
  r.device = device;
  r.names = {"mine", "theirs"};
  r.tensor_sizes = {3, 5};
  return r;
}

TEST(JoinZeros, HostResponsesGetZerosInHostMemory) {
  TensorEntry mine;
  std::vector<TensorEntry*> found = {&mine, nullptr};
  JoinZeros zeros;
  zeros.fill(allreduce_of(kCpuDevice), &found);
  EXPECT_EQ(found[0], &mine);
  EXPECT_FALSE(mine.join_zeros);
  const TensorEntry& z = *found[1];
  EXPECT_TRUE(z.join_zeros);
  EXPECT_EQ(z.request.name, "theirs");
  EXPECT_EQ(z.view.device, kCpuDevice);
  EXPECT_EQ(z.view.shape, (std::vector<int64_t>{5}));
  ASSERT_NE(z.view.data, nullptr);
  const std::vector<char> expected(20, 0);
  EXPECT_EQ(std::memcmp(z.view.data, expected.data(), expected.size()), 0);
  ASSERT_NE(z.handle, nullptr);
}

TEST(JoinZeros, DeviceResponsesGetEntriesWithoutHostMemory) {
  std::vector<TensorEntry*> found = {nullptr, nullptr};
  JoinZeros zeros;
  zeros.fill(allreduce_of(1), &found);
  for (size_t i = 0; i < found.size(); ++i) {
    ASSERT_NE(found[i], nullptr);
    EXPECT_TRUE(found[i]->join_zeros);
    EXPECT_EQ(found[i]->view.data, nullptr) << "a device collective must not see host memory";
    EXPECT_EQ(found[i]->view.device, 1);
    EXPECT_EQ(found[i]->request.device, 1);
    EXPECT_EQ(found[i]->view.dtype, DataType::kFloat32);
  }
  // The backend sizes its scratch from the view: the sizes rank 0 sent.
  EXPECT_EQ(found[0]->view.num_bytes(), 12u);
  EXPECT_EQ(found[1]->view.num_bytes(), 20u);
}

}  // namespace
}  // namespace ranktime
