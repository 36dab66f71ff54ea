// Layout of fused batches in the device fusion buffer (alignment padding, hierarchical shards,
// allgather offsets) and the copy descriptors of the batched pack/unpack. Pure, no GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backends/gpu/device_fusion.h"

namespace ranktime::gpu {
namespace {

TEST(DeviceFusion, AlignsEveryTensor) {
  FusionLayout l = plan_device_fusion({4, 1000, 256, 0, 3});
  EXPECT_EQ(l.offsets, (std::vector<size_t>{0, 256, 1280, 1536, 1536}));
  EXPECT_EQ(l.bytes, 1792u);  // 1539 rounded up to the alignment
  for (size_t o : l.offsets) EXPECT_EQ(o % kDeviceFusionAlignment, 0u);
}

TEST(DeviceFusion, EmptyBatch) {
  FusionLayout l = plan_device_fusion({});
  EXPECT_TRUE(l.offsets.empty());
  EXPECT_EQ(l.bytes, 0u);
}

TEST(DeviceFusion, PaddingIsBounded) {
  std::vector<size_t> sizes;
  size_t payload = 0;
  for (size_t i = 0; i < 161; ++i) {  // ResNet-50's gradient count
    sizes.push_back(4 * (i * 37 + 1));
    payload += sizes.back();
  }
  FusionLayout l = plan_device_fusion(sizes);
  EXPECT_LT(l.bytes - payload, sizes.size() * kDeviceFusionAlignment);
  for (size_t i = 1; i < sizes.size(); ++i) {
    EXPECT_GE(l.offsets[i], l.offsets[i - 1] + sizes[i - 1]) << "tensors must not overlap";
  }
}

TEST(DeviceFusion, GranuleMakesEqualAlignedShards) {
  const int local_size = 3;
  FusionLayout l = plan_device_fusion({1000, 24}, 256, 256 * local_size);
  EXPECT_EQ(l.bytes % (256 * local_size), 0u);
  EXPECT_GE(l.bytes, 256u + 1024u);
  size_t covered = 0;
  for (int r = 0; r < local_size; ++r) {
    Shard s = shard_of(l.bytes, r, local_size);
    EXPECT_EQ(s.offset, covered);
    EXPECT_EQ(s.offset % 256, 0u);
    EXPECT_EQ(s.bytes, l.bytes / local_size);
    covered += s.bytes;
  }
  EXPECT_EQ(covered, l.bytes);
}

TEST(DeviceFusion, PackAndUnpackCopies) {
  std::vector<char> a(10), b(300), c(0), d(7);
  std::vector<char> buffer(2048);
  FusionLayout l = plan_device_fusion({a.size(), b.size(), c.size(), d.size()});
  CopyBatch in = pack_copies(l, {a.data(), b.data(), c.data(), d.data()}, buffer.data());
  ASSERT_EQ(in.count(), 3u);  // the empty tensor has no copy
  EXPECT_EQ(in.srcs[0], a.data());
  EXPECT_EQ(in.dsts[0], buffer.data());
  EXPECT_EQ(in.dsts[1], buffer.data() + 256);
  EXPECT_EQ(in.sizes[1], 300u);
  EXPECT_EQ(in.dsts[2], buffer.data() + l.offsets[3]);
  EXPECT_EQ(in.bytes(), 317u);

  CopyBatch out = unpack_copies(l, {a.data(), b.data(), c.data(), d.data()}, buffer.data());
  ASSERT_EQ(out.count(), 3u);
  EXPECT_EQ(out.dsts[1], b.data());
  EXPECT_EQ(out.srcs[1], buffer.data() + 256);
}

// A joined rank's zeros have no memory (null): no copy in or out for them, and the others' copies
// keep their places in the layout (the zero fill covers the gaps).
TEST(DeviceFusion, NullTensorsAreAJoinedRanksZerosAndGetNoCopy) {
  std::vector<char> a(10), c(40);
  std::vector<char> buffer(1024);
  FusionLayout l = plan_device_fusion({a.size(), 300, c.size()});
  CopyBatch in = pack_copies(l, {a.data(), nullptr, c.data()}, buffer.data());
  ASSERT_EQ(in.count(), 2u);
  EXPECT_EQ(in.srcs, (std::vector<const void*>{a.data(), c.data()}));
  EXPECT_EQ(in.dsts[1], buffer.data() + l.offsets[2]);
  CopyBatch out = unpack_copies(l, {a.data(), nullptr, c.data()}, buffer.data());
  ASSERT_EQ(out.count(), 2u);
  EXPECT_EQ(out.dsts, (std::vector<void*>{a.data(), c.data()}));
  EXPECT_EQ(pack_copies(l, {nullptr, nullptr, nullptr}, buffer.data()).count(), 0u);
  EXPECT_EQ(unpack_copies(l, {nullptr, nullptr, nullptr}, buffer.data()).count(), 0u);
}

// Tensors that sit back to back in memory and land back to back in the fusion buffer still get
// one copy each: adjacent tensors may be two allocations, and one copy spanning both is invalid.
TEST(DeviceFusion, NeverMergesCopiesOfNeighbouringTensors) {
  std::vector<char> flat(1024);
  std::vector<char> buffer(2048);
  FusionLayout l = plan_device_fusion({256, 512, 100});
  ASSERT_EQ(l.offsets, (std::vector<size_t>{0, 256, 768}));
  CopyBatch in = pack_copies(l, {flat.data(), flat.data() + 256, flat.data() + 768}, buffer.data());
  ASSERT_EQ(in.count(), 3u);
  EXPECT_EQ(in.sizes, (std::vector<size_t>{256, 512, 100}));
  EXPECT_EQ(in.srcs[1], flat.data() + 256);
  EXPECT_EQ(in.dsts[2], buffer.data() + 768);
  CopyBatch out =
      unpack_copies(l, {flat.data(), flat.data() + 256, flat.data() + 768}, buffer.data());
  ASSERT_EQ(out.count(), 3u);
  EXPECT_EQ(out.bytes(), 868u);
}

TEST(DeviceFusion, GatherLayoutWithDifferentFirstDimensions) {
  GatherLayout g = plan_gather({1, 3, 0, 2}, 12);
  EXPECT_EQ(g.offsets, (std::vector<size_t>{0, 12, 48, 48}));
  EXPECT_EQ(g.sizes, (std::vector<size_t>{12, 36, 0, 24}));
  EXPECT_EQ(g.bytes, 72u);
  EXPECT_EQ(g.rows, 6);
}

// Reducescatter's equal NCCL blocks: rank r's rows (the first dim0 % size ranks get one more)
// in block r; packed only when the rows do not split evenly.
TEST(DeviceFusion, ScatterBlocksHoldEachRanksRows) {
  const size_t row = 12;  // 3 floats
  ScatterLayout even = plan_scatter(8, row, 4);
  EXPECT_FALSE(even.packed);
  EXPECT_EQ(even.block, 2 * row);
  EXPECT_EQ(even.blocks.offsets, (std::vector<size_t>{0, 24, 48, 72}));
  EXPECT_EQ(even.sources, even.blocks.offsets);  // the tensor is already the layout
  EXPECT_EQ(even.blocks.bytes, 8 * row);

  ScatterLayout uneven = plan_scatter(10, row, 4);  // rows 3, 3, 2, 2
  EXPECT_TRUE(uneven.packed);
  EXPECT_EQ(uneven.blocks.sizes, (std::vector<size_t>{36, 36, 24, 24}));
  EXPECT_EQ(uneven.sources, (std::vector<size_t>{0, 36, 72, 96}));
  EXPECT_EQ(uneven.block % kDeviceFusionAlignment, 0u);
  EXPECT_GE(uneven.block, 36u);
  EXPECT_EQ(uneven.blocks.bytes, 4 * uneven.block);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(uneven.blocks.offsets[r], r * uneven.block);
    EXPECT_LE(uneven.blocks.sizes[r], uneven.block);
  }
  // The pack copies every row exactly once, each rank's rows to the start of its block.
  std::vector<char> tensor(10 * row), buffer(uneven.blocks.bytes);
  std::vector<const void*> from;
  for (size_t s : uneven.sources) from.push_back(tensor.data() + s);
  CopyBatch copies = pack_copies(uneven.blocks, from, buffer.data());
  EXPECT_EQ(copies.bytes(), tensor.size());
  ASSERT_EQ(copies.count(), 4u);
  EXPECT_EQ(copies.dsts[3], buffer.data() + 3 * uneven.block);
  EXPECT_EQ(copies.srcs[3], tensor.data() + 96);

  ScatterLayout fewer_rows = plan_scatter(2, row, 4);  // ranks 2 and 3 get nothing
  EXPECT_EQ(fewer_rows.blocks.sizes, (std::vector<size_t>{12, 12, 0, 0}));
  EXPECT_TRUE(fewer_rows.packed);
  ScatterLayout empty = plan_scatter(0, row, 4);
  EXPECT_FALSE(empty.packed);
  EXPECT_EQ(empty.block, 0u);
}

}  // namespace
}  // namespace ranktime::gpu
