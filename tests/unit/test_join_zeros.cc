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

// A device backend still holds a job's zeros after fill() returns (its job completes later), so
// later responses' zeros must not free them: each lives until the runtime completes it.
TEST(JoinZeros, EntriesLiveUntilReleasedWhateverIsFilledAfter) {
  JoinZeros zeros;
  std::vector<TensorEntry*> first = {nullptr, nullptr};
  zeros.fill(allreduce_of(0), &first);
  std::vector<TensorEntry*> host = {nullptr, nullptr};
  zeros.fill(allreduce_of(kCpuDevice), &host);
  EXPECT_EQ(zeros.held(), 4u);
  // The first call's entries are intact (ASan would flag a read of freed memory here).
  EXPECT_EQ(first[0]->request.name, "mine");
  EXPECT_EQ(first[1]->view.num_bytes(), 20u);
  ASSERT_NE(host[1]->view.data, nullptr);
  EXPECT_EQ(static_cast<const float*>(host[1]->view.data)[4], 0.0f);

  TensorEntry not_zeros;
  zeros.release(&not_zeros);
  EXPECT_EQ(zeros.held(), 4u);
  zeros.release(first[0]);
  zeros.release(first[0]);  // once only
  EXPECT_EQ(zeros.held(), 3u);
  for (TensorEntry* e : {first[1], host[0], host[1]}) zeros.release(e);
  EXPECT_EQ(zeros.held(), 0u);
}

}  // namespace
}  // namespace ranktime
