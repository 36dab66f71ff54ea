// One rank's process sets with their backends (runtime/process_set_registry.h): a member gets the
// set's host backend for host tensors and its device backend for device tensors, device tensors
// are no longer refused by the set (the world's check_device decides, as for every tensor), every
// set's device backend is visited for completions and drains, and removal drops both.
#include "runtime/process_set_registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "runtime/memory_channel.h"

namespace ranktime {
namespace {

class IdleBackend final : public Backend {
 public:
  void enqueue(const Response&, const std::vector<TensorEntry*>&, int64_t) override {}
  void take_completions(const std::function<void(Completion&)>&) override {}
  size_t pending() const override { return 0; }
  void drain() override {}
};

// Hands out the backends a set's members get; remembers the last ones and the wake callback.
class SetWorld final : public World {
 public:
  SetWorld(int rank, bool with_device) : rank_(rank), with_device_(with_device) {}
  Placement placement() const override { return {}; }
  ControlChannel& control() override { return channel_; }
  std::unique_ptr<Backend> host_backend(const Clock*, const Config&) override { return nullptr; }
  std::unique_ptr<Backend> device_backend(const Clock*, const Config&,
                                          std::function<void()>) override {
    return nullptr;
  }
  SetBackends process_set_backends(int32_t, const std::vector<int>& ranks, const Clock*,
                                   const Config&, std::function<void()> wake) override {
    wake_ = std::move(wake);
    if (std::find(ranks.begin(), ranks.end(), rank_) == ranks.end()) return {};
    SetBackends out;
    out.host = std::make_unique<IdleBackend>();
    if (with_device_) out.device = std::make_unique<IdleBackend>();
    host = out.host.get();
    device = out.device.get();
    return out;
  }
  std::string check_device(int) const override { return ""; }
  bool handles_signals() const override { return false; }

  Backend* host = nullptr;
  Backend* device = nullptr;
  std::function<void()> wake_;

 private:
  int rank_;
  bool with_device_;
  MemoryChannel channel_{std::make_shared<MemoryHub>(1), 0};
};

Response add(int32_t id, const std::vector<int>& ranks) {
  Response r;
  r.op = OpType::kAddProcessSet;
  r.root = id;
  r.argument = ranks_argument(ranks);
  return r;
}

Response remove(int32_t id) {
  Response r;
  r.op = OpType::kRemoveProcessSet;
  r.argument = std::to_string(id);
  return r;
}

int visits(const ProcessSetRegistry& sets) {
  int n = 0;
  sets.each_device_backend([&](Backend&) { ++n; });
  return n;
}

TEST(ProcessSetRegistry, AMemberRunsDeviceTensorsOnTheSetsDeviceBackend) {
  ProcessSetRegistry sets(2, 4);
  SetWorld world(2, /*with_device=*/true);
  Clock clock;
  int woken = 0;
  ASSERT_EQ(sets.apply(add(1, {0, 2}), world, &clock, Config{}, [&] { ++woken; }), "");
  ASSERT_NE(world.device, nullptr);
  EXPECT_EQ(sets.backend(1, kCpuDevice), world.host);
  EXPECT_EQ(sets.backend(1, 0), world.device);
  EXPECT_EQ(sets.backend(1, 3), world.device) << "one device backend per set, whatever the GPU";
  EXPECT_EQ(visits(sets), 1);
  world.wake_();
  EXPECT_EQ(woken, 1) << "the set's device backend wakes the runtime's loop";

  // A device tensor in the set is the world's business, not a refusal of the set's.
  const ProcessSetRegistry::Submission s = sets.check(1, OpType::kAllreduce, 0);
  EXPECT_EQ(s.local, "");
  EXPECT_EQ(s.request, "");
  EXPECT_EQ(s.size, 2);

  ASSERT_EQ(sets.apply(remove(1), world, &clock, Config{}, [] {}), "");
  EXPECT_EQ(sets.backend(1, kCpuDevice), nullptr);
  EXPECT_EQ(sets.backend(1, 0), nullptr);
  EXPECT_EQ(visits(sets), 0);
}

TEST(ProcessSetRegistry, NoDeviceBackendWhereTheRankHasNone) {
  ProcessSetRegistry sets(0, 4);
  SetWorld world(0, /*with_device=*/false);
  Clock clock;
  ASSERT_EQ(sets.apply(add(1, {0, 1}), world, &clock, Config{}, [] {}), "");
  EXPECT_NE(sets.backend(1, kCpuDevice), nullptr);
  EXPECT_EQ(sets.backend(1, 0), nullptr);
  EXPECT_EQ(visits(sets), 0);
}

TEST(ProcessSetRegistry, OutsideTheSetThereAreNoBackends) {
  ProcessSetRegistry sets(3, 4);
  SetWorld world(3, /*with_device=*/true);
  Clock clock;
  ASSERT_EQ(sets.apply(add(1, {0, 1}), world, &clock, Config{}, [] {}), "");
  EXPECT_FALSE(sets.member(1));
  EXPECT_EQ(sets.backend(1, kCpuDevice), nullptr);
  EXPECT_EQ(sets.backend(1, 0), nullptr);
  EXPECT_EQ(visits(sets), 0);
}

}  // namespace
}  // namespace ranktime
