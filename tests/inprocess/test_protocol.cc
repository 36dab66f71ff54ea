// The real negotiation between ranks, without mpirun: every rank is a thread running a real
// Runtime over the in-memory control channel and the thread backend (thread_world.h). At 1 to 16
// ranks: exact results for every op, dtype and reduction, fused and unfused; mismatches that fail
// one tensor everywhere; readiness ticks on rank 0's clock despite skewed clocks. With faults:
// delayed links, a straggler, a dead peer, a lost or corrupt request, a corrupt response list,
// one rank shutting down. The response cache over many steps (every tick kept, results exact,
// a shape change's message, an unknown id).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/wire.h"
#include "ranktime/half.h"
#include "thread_world.h"
#include "workload.h"

namespace ranktime::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Status allreduce(Runtime& rt, std::vector<std::byte>* data, DataType dtype, const std::string& name,
                 ReduceOp op = ReduceOp::kSum) {
  const auto n = static_cast<int64_t>(data->size() / dtype_size(dtype));
  return rt.submit(OpType::kAllreduce, {data->data(), dtype, {n}}, name, op).wait();
}

Status barrier(Runtime& rt) {
  return rt.submit(OpType::kBarrier, TensorView{}, "ranktime.barrier").wait();
}

// Element values as doubles, stored in and read from any dtype (exact for the small integers used).
void store(DataType dtype, const std::vector<double>& values, std::vector<std::byte>* out) {
  out->assign(values.size() * dtype_size(dtype), std::byte{0});
  auto* p = reinterpret_cast<uint8_t*>(out->data());
  for (size_t i = 0; i < values.size(); ++i)
    examples::set_element(values[i], p + i * dtype_size(dtype), dtype);
}

std::vector<double> load(DataType dtype, const std::vector<std::byte>& data) {
  std::vector<double> values(data.size() / dtype_size(dtype));
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = examples::element(p + i * dtype_size(dtype), dtype);
  return values;
}

constexpr int kElements = 10;
constexpr DataType kDtypes[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt32,
                                DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                                DataType::kFloat32, DataType::kFloat64, DataType::kInt16};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct};

// Rank r's element i: small integers, so that every dtype holds every partial result exactly.
// For products exactly one rank contributes a 2 per element (the rest 1s).
double input(int rank, int i, int size, ReduceOp op, DataType dtype) {
  if (op == ReduceOp::kProduct) return (i + rank) % size == 0 ? 2 : 1;
  const int v = (rank * 7 + i) % 5;
  return dtype == DataType::kUInt8 ? v : v - 1;
}

// The reduction over every rank, computed here independently of the runtime.
double expected(int i, int size, ReduceOp op, DataType dtype) {
  double sum = 0, product = 1, low = INFINITY, high = -INFINITY;
  for (int r = 0; r < size; ++r) {
    const double v = input(r, i, size, op, dtype);
    sum += v;
    product *= v;
    low = std::min(low, v);
    high = std::max(high, v);
  }
  switch (op) {
    case ReduceOp::kMin:
      return low;
    case ReduceOp::kMax:
      return high;
    case ReduceOp::kProduct:
      return product;
    case ReduceOp::kAverage:
      switch (dtype) {
        case DataType::kFloat16:
          return half_to_float(float_to_half(static_cast<float>(sum) / static_cast<float>(size)));
        case DataType::kBFloat16:
          return bfloat16_to_float(
              float_to_bfloat16(static_cast<float>(sum) / static_cast<float>(size)));
        case DataType::kFloat32:
          return static_cast<float>(sum) / static_cast<float>(size);
        case DataType::kFloat64:
          return sum / size;
        default:
          return static_cast<double>(static_cast<int64_t>(sum) / size);  // truncates toward 0
      }
    default:
      return sum;
  }
}

class Ranks : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(OneToSixteen, Ranks, ::testing::Values(1, 2, 3, 5, 8, 16),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return std::to_string(p.param) + "_ranks";
                         });

TEST_P(Ranks, AllreduceIsExactForEveryDtypeAndReduction) {
  InProcessJob job(GetParam());
  job.on_every_rank([&](int r, Runtime& rt) {
    const int size = rt.size();
    struct Case {
      DataType dtype;
      ReduceOp op;
      std::vector<std::byte> data;
      Handle handle;
    };
    std::vector<Case> cases;
    for (DataType dtype : kDtypes) {
      for (ReduceOp op : kOps) cases.push_back({dtype, op, {}, {}});
    }
    for (Case& c : cases) {  // all in flight at once: one negotiation for many tensors
      std::vector<double> values;
      for (int i = 0; i < kElements; ++i) values.push_back(input(r, i, size, c.op, c.dtype));
      store(c.dtype, values, &c.data);
      c.handle =
          rt.submit(OpType::kAllreduce, {c.data.data(), c.dtype, {kElements}},
                    std::string("ar.") + dtype_name(c.dtype) + "." + reduce_op_name(c.op), c.op);
    }
    for (Case& c : cases) {
      const std::string what = std::string(dtype_name(c.dtype)) + " " + reduce_op_name(c.op) +
                               " on rank " + std::to_string(r);
      ASSERT_TRUE(c.handle.wait().ok()) << what << ": " << c.handle.wait().message();
      const std::vector<double> got = load(c.dtype, c.data);
      for (int i = 0; i < kElements; ++i) {
        EXPECT_EQ(got[i], expected(i, size, c.op, c.dtype)) << what << ", element " << i;
      }
    }
  });
}

TEST_P(Ranks, FusedSmallTensorsAndAnUnfusedLargeOneAreExact) {
  InProcessJob job(GetParam());
  job.on_every_rank([&](int r, Runtime& rt) {
    const int size = rt.size();
    constexpr int kSmall = 24;
    std::vector<std::vector<float>> small(kSmall);
    std::vector<Handle> handles;
    for (int t = 0; t < kSmall; ++t) {
      small[t].assign(7 + t, static_cast<float>(r + t));
      handles.push_back(rt.submit(OpType::kAllreduce,
                                  {small[t].data(), DataType::kFloat32, {int64_t(7 + t)}},
                                  "small." + std::to_string(t)));
    }
    std::vector<float> large(size_t{1} << 18, static_cast<float>(r));  // 1 MiB: reduced alone
    handles.push_back(rt.submit(
        OpType::kAllreduce, {large.data(), DataType::kFloat32, {int64_t(large.size())}}, "large"));
    for (Handle& h : handles) ASSERT_TRUE(h.wait().ok()) << h.wait().message();
    const float ranks_sum = size * (size - 1) / 2.0f;
    for (int t = 0; t < kSmall; ++t) {
      for (float v : small[t]) EXPECT_EQ(v, ranks_sum + size * t) << "small." << t;
    }
    EXPECT_EQ(large.front(), ranks_sum);
    EXPECT_EQ(large.back(), ranks_sum);
  });
}

// Runtime::run (ranktime::allreduce, broadcast, barrier): the calling thread runs the steps,
// while another thread of the same rank waits for asynchronous allreduces that its steps, or the
// background thread's, may run. Results exact; a lost wake-up would hang.
TEST_P(Ranks, SynchronousCallsBesideAsynchronousOnesAreExact) {
  InProcessJob job(GetParam());
  job.on_every_rank([&](int r, Runtime& rt) {
    const int size = rt.size();
    const float ranks_sum = size * (size - 1) / 2.0f;
    std::thread other([&] {
      for (int i = 0; i < 50; ++i) {
        float x = static_cast<float>(r);
        Status s = rt.submit(OpType::kAllreduce, {&x, DataType::kFloat32, {1}}, "async").wait();
        EXPECT_TRUE(s.ok()) << s.message();
        EXPECT_EQ(x, ranks_sum) << "async call " << i;
      }
    });
    for (int i = 0; i < 100; ++i) {
      float x = static_cast<float>(r), root_value = static_cast<float>(r == i % size ? i : -1);
      Status s = rt.run(OpType::kAllreduce, {&x, DataType::kFloat32, {1}}, "sync");
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(x, ranks_sum) << "synchronous call " << i;
      s = rt.run(OpType::kBroadcast, {&root_value, DataType::kFloat32, {1}}, "sync.broadcast",
                 ReduceOp::kSum, i % size);
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(root_value, i) << "broadcast " << i;
    }
    EXPECT_TRUE(rt.run(OpType::kBarrier, TensorView{}, "ranktime.barrier").ok());
    other.join();
  });
}

TEST_P(Ranks, AllgatherConcatenatesRowsOfDifferentCountsAndBroadcastCopiesTheRoot) {
  InProcessJob job(GetParam());
  job.on_every_rank([&](int r, Runtime& rt) {
    const int size = rt.size();
    const int rows = r % 3 + 1;
    std::vector<int32_t> mine;
    for (int k = 0; k < rows * 2; ++k) mine.push_back(r * 100 + k);
    Handle gather = rt.submit(OpType::kAllgather, {mine.data(), DataType::kInt32, {rows, 2}}, "g");
    const int root = size - 1;
    std::vector<double> b(5, r == root ? 0.0 : -1.0);
    if (r == root) b = {1.5, -2, 3, 4e9, 0.25};
    Handle bcast = rt.submit(OpType::kBroadcast, {b.data(), DataType::kFloat64, {5}}, "b",
                             ReduceOp::kSum, root);
    ASSERT_TRUE(gather.wait().ok()) << gather.wait().message();
    ASSERT_TRUE(bcast.wait().ok()) << bcast.wait().message();
    std::vector<int32_t> want;
    for (int q = 0; q < size; ++q) {
      for (int k = 0; k < (q % 3 + 1) * 2; ++k) want.push_back(q * 100 + k);
    }
    std::vector<int32_t> got(gather.output().size() / sizeof(int32_t));
    std::memcpy(got.data(), gather.output().data(), gather.output().size());
    EXPECT_EQ(got, want);
    EXPECT_EQ(gather.output_shape(), (std::vector<int64_t>{int64_t(want.size() / 2), 2}));
    EXPECT_EQ(b, (std::vector<double>{1.5, -2, 3, 4e9, 0.25}));
    EXPECT_TRUE(barrier(rt).ok());
  });
}

TEST_P(Ranks, AMismatchFailsThatTensorOnEveryRankAndTheRuntimeCarriesOn) {
  if (GetParam() < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  InProcessJob job(GetParam());
  job.on_every_rank([&](int r, Runtime& rt) {
    std::vector<std::byte> data;
    const DataType dtype = r == 1 ? DataType::kFloat64 : DataType::kFloat32;
    store(dtype, std::vector<double>(4, 1.0), &data);
    const Status s = allreduce(rt, &data, dtype, "mismatch");
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr("tensor 'mismatch'"));
    EXPECT_THAT(s.message(), HasSubstr("dtype differs between ranks"));
    EXPECT_THAT(s.message(), HasSubstr("float64 on rank 1"));
    store(DataType::kFloat32, std::vector<double>(4, 1.0), &data);
    ASSERT_TRUE(allreduce(rt, &data, DataType::kFloat32, "after").ok());
    EXPECT_EQ(load(DataType::kFloat32, data)[0], rt.size());
  });
}

// Every rank's clock is skewed by rank seconds; rank 0 still places every rank's readiness tick
// where it happened on its own clock: within a fraction of the skew of the first.
TEST_P(Ranks, ReadinessTicksOfSkewedRanksAreAlignedOnRankZerosClock) {
  const auto dir =
      std::filesystem::temp_directory_path() /
      ("ranktime_inprocess_" + std::to_string(getpid()) + "_" + std::to_string(GetParam()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "t.json").string();
  const int size = GetParam();
  {
    InProcessJob job(size, [&](int r) {
      return config_of({{"TIMELINE_FILENAME", path},
                        {"RANKTIME_TEST_CLOCK_SKEW_US", std::to_string(r * 1'000'000)}});
    });
    job.on_every_rank([&](int, Runtime& rt) {
      ASSERT_TRUE(barrier(rt).ok());
      std::vector<std::byte> data;
      store(DataType::kFloat32, {1, 2, 3}, &data);
      ASSERT_TRUE(allreduce(rt, &data, DataType::kFloat32, "aligned").ok());
    });
  }  // shut down: the file is closed
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  int pid = -1;
  for (const auto& e : trace) {
    if (e["ph"] == "M" && e["name"] == "process_name" && e["args"]["name"] == "aligned")
      pid = e["pid"];
  }
  ASSERT_GE(pid, 0) << "no process for tensor 'aligned'";
  // The negotiate lane holds NEGOTIATE_ALLREDUCE slices, each followed by its ticks; a tick's
  // lag_us is implicit where it equals its ts minus its slice's (docs/timeline-format.md).
  std::set<std::string> ticked;
  double slice_ts = 0;
  for (const auto& e : trace) {
    if (e["ph"] != "X" || e["pid"] != pid || e["tid"] != 0) continue;
    if (e["name"].get<std::string>().rfind("NEGOTIATE_", 0) == 0) {
      slice_ts = e["ts"].get<double>();
      continue;
    }
    ticked.insert(e["name"].get<std::string>());
    const double lag = e.contains("args") && e["args"].contains("lag_us")
                           ? e["args"]["lag_us"].get<double>()
                           : e["ts"].get<double>() - slice_ts;
    EXPECT_LT(lag, 500'000) << e.dump();
  }
  std::set<std::string> every_rank;
  for (int r = 0; r < size; ++r) every_rank.insert(std::to_string(r));
  EXPECT_EQ(ticked, every_rank);
  std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------------------------------------
// The response cache in steady state

// The process id of each tensor's lane group in a trace, by name.
std::map<std::string, int> tensor_pids(const nlohmann::json& trace) {
  std::map<std::string, int> out;
  for (const auto& e : trace) {
    if (e["ph"] == "M" && e["name"] == "process_name") out[e["args"]["name"]] = e["pid"];
  }
  return out;
}

class CachedSteps : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(TwoToSixteen, CachedSteps, ::testing::Values(2, 5, 16),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return std::to_string(p.param) + "_ranks";
                         });

// Many steps of the same tensors, submitted in a random order per rank and step: every tensor
// goes in full once, then as cache ids only; results stay exact and the trace keeps every
// rank's readiness tick in every negotiation.
TEST_P(CachedSteps, KeepEveryTickAndExactResults) {
  const int size = GetParam();
  constexpr int kTensors = 12, kSteps = 25;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("ranktime_cache_" + std::to_string(getpid()) + "_" + std::to_string(size));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "t.json").string();
  std::atomic<int64_t> full{0}, cached{0};
  {
    InProcessJob job(
        size,
        [&](int) {
          return config_of({{"TIMELINE_FILENAME", path}});
        },
        [&](MemoryHub& hub) {
          hub.set_faults([&](int, int to, const std::vector<uint8_t>& message) {
            if (to == 0) {
              const WorkerMessage m = decode_worker_message(message.data(), message.size());
              full += static_cast<int64_t>(m.requests.size());
              cached += static_cast<int64_t>(m.cached_ids.size());
            }
            return MessageFate{};
          });
        });
    job.on_every_rank([&](int r, Runtime& rt) {
      std::mt19937 rng(1000 + r);
      std::vector<int> order(kTensors);
      for (int t = 0; t < kTensors; ++t) order[t] = t;
      std::vector<std::vector<int64_t>> data(kTensors, std::vector<int64_t>(3));
      for (int k = 0; k < kSteps; ++k) {
        std::shuffle(order.begin(), order.end(), rng);
        std::vector<Handle> handles;
        for (int t : order) {
          std::fill(data[t].begin(), data[t].end(), r + t + k);
          handles.push_back(rt.submit(OpType::kAllreduce, {data[t].data(), DataType::kInt64, {3}},
                                      "cached." + std::to_string(t)));
        }
        for (Handle& h : handles) ASSERT_TRUE(h.wait().ok());
        for (int t = 0; t < kTensors; ++t) {
          ASSERT_EQ(data[t][2], int64_t{size} * (size - 1) / 2 + int64_t{size} * (t + k))
              << "rank " << r << " step " << k << " tensor " << t;
        }
      }
    });
  }
  // Every worker sent each tensor in full once, then only its id.
  EXPECT_EQ(full.load(), int64_t{kTensors} * (size - 1));
  EXPECT_EQ(cached.load(), int64_t{kTensors} * (size - 1) * (kSteps - 1));

  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  const std::map<std::string, int> pids = tensor_pids(trace);
  for (int t = 0; t < kTensors; ++t) {
    const std::string name = "cached." + std::to_string(t);
    ASSERT_TRUE(pids.count(name)) << name;
    std::map<std::string, int> ticks;  // per rank
    for (const auto& e : trace) {
      if (e["ph"] == "X" && e["pid"] == pids.at(name) && e["tid"] == 0) {
        ++ticks[e["name"].get<std::string>()];
      }
    }
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(ticks[std::to_string(r)], kSteps) << name << " rank " << r;
    }
  }
  std::filesystem::remove_all(dir);
}

// A shape change after many cached steps fails that tensor with the message it always had; the
// next step negotiates it in full again and succeeds.
TEST(CachedSteps, AShapeChangeInSteadyStateGivesTheSameErrorAsBefore) {
  InProcessJob job(4);
  job.on_every_rank([&](int r, Runtime& rt) {
    for (int k = 0; k < 8; ++k) {
      const bool change = k == 5 && r == 1;
      std::vector<float> v(change ? 5 : 4, 1.0f);
      const Status s =
          rt.submit(OpType::kAllreduce, {v.data(), DataType::kFloat32, {int64_t(v.size())}}, "w")
              .wait();
      if (k == 5) {
        EXPECT_EQ(s.message(),
                  "tensor 'w': shape differs between ranks: [4] on ranks 0,2,3; [5] on rank 1");
      } else {
        ASSERT_TRUE(s.ok()) << s.message();
        EXPECT_EQ(v[0], 4.0f);
      }
    }
  });
}

// A forged message naming a cache id rank 0 never gave: every rank fails naming the sender.
TEST(CachedSteps, AnUnknownCacheIdFailsEveryRankNamingTheSender) {
  std::atomic<bool> forged{false};
  InProcessJob job(3, {}, [&](MemoryHub& hub) {
    hub.set_faults([&](int from, int to, const std::vector<uint8_t>& message) {
      MessageFate fate;
      if (from != 1 || to != 0 || forged) return fate;
      WorkerMessage m = decode_worker_message(message.data(), message.size());
      if (m.cached_ids.empty()) return fate;
      m.cached_ids[0] = 0xdeadbeef;
      encode(m, &fate.replace);
      forged = true;
      return fate;
    });
  });
  std::vector<Status> results(3);
  job.on_every_rank([&](int r, Runtime& rt) {
    for (int k = 0; k < 2; ++k) {
      std::vector<float> v(2, 1.0f);
      results[r] = rt.submit(OpType::kAllreduce, {v.data(), DataType::kFloat32, {2}}, "x").wait();
    }
  });
  EXPECT_TRUE(forged);
  for (int r = 0; r < 3; ++r) {
    EXPECT_THAT(results[r].message(),
                HasSubstr("rank 1 sent response cache id 3735928559, which rank 0 does not know"))
        << "rank " << r;
  }
}

// ---------------------------------------------------------------------------------------------
// Faults

bool carries_requests(int to, const std::vector<uint8_t>& message) {
  if (to != 0) return false;
  try {
    return !decode_worker_message(message.data(), message.size()).requests.empty();
  } catch (const WireError&) {
    return false;
  }
}

TEST(Faults, DelayedAndReorderedDeliveriesStillAgree) {
  constexpr int kRanks = 8;
  InProcessJob job(kRanks, {}, [](MemoryHub& hub) {
    auto rng = std::make_shared<std::mt19937>(7);
    hub.set_faults([rng](int, int, const std::vector<uint8_t>&) {
      MessageFate fate;
      fate.delay = std::chrono::microseconds((*rng)() % 3000);
      return fate;
    });
  });
  job.on_every_rank([&](int r, Runtime& rt) {
    for (int k = 0; k < 20; ++k) {
      std::vector<int64_t> v(3, r + k);
      ASSERT_TRUE(rt.submit(OpType::kAllreduce, {v.data(), DataType::kInt64, {3}},
                            "delayed." + std::to_string(k))
                      .wait()
                      .ok());
      EXPECT_EQ(v[2], kRanks * (kRanks - 1) / 2 + kRanks * k);
    }
  });
}

TEST(Faults, ALateRankIsLastInEveryNegotiationItDelays) {
  constexpr int kRanks = 4, kRounds = 10;
  InProcessJob job(kRanks);
  job.on_every_rank([&](int r, Runtime& rt) {
    for (int k = 0; k < kRounds; ++k) {
      ASSERT_TRUE(barrier(rt).ok());
      if (r == 3) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::vector<std::byte> data;
      store(DataType::kFloat32, {1}, &data);
      ASSERT_TRUE(allreduce(rt, &data, DataType::kFloat32, "late." + std::to_string(k)).ok());
    }
  });
  const std::vector<RankLateness> stats = job.rank(0).lateness();
  ASSERT_EQ(stats.size(), size_t{kRanks});
  EXPECT_GE(stats[3].times_last, uint64_t{kRounds});  // barriers may add to it
  EXPECT_GE(stats[3].max_lag_us, 25'000);
  EXPECT_EQ(stats[3].hostname, "host3");
  EXPECT_TRUE(job.rank(1).lateness().empty());  // rank 0 keeps the statistics
}

TEST(Faults, ADeadPeerFailsEveryRankNamingItInsteadOfHanging) {
  std::atomic<bool> isolated{false};
  InProcessJob job(
      4,
      [](int) {
        return config_of({{"RANKTIME_PEER_TIMEOUT_S", "0.5"}});
      },
      [&](MemoryHub& hub) {
        hub.set_faults([&](int from, int to, const std::vector<uint8_t>&) {
          MessageFate fate;
          fate.drop = isolated && (from == 2 || to == 2);
          return fate;
        });
      });
  job.on_every_rank([&](int, Runtime& rt) {
    std::vector<std::byte> data;
    store(DataType::kFloat32, {1}, &data);
    ASSERT_TRUE(allreduce(rt, &data, DataType::kFloat32, "before").ok());
  });
  isolated = true;  // rank 2 neither sends nor receives from now on
  std::vector<Status> after(4);
  job.on_every_rank([&](int r, Runtime& rt) {
    std::vector<std::byte> data;
    store(DataType::kFloat32, {1}, &data);
    after[r] = allreduce(rt, &data, DataType::kFloat32, "after");
  });
  for (int r : {0, 1, 3}) {
    EXPECT_FALSE(after[r].ok());
    EXPECT_THAT(after[r].message(), HasSubstr("rank 2 (host host2, pid "));
    EXPECT_THAT(after[r].message(), HasSubstr("has sent nothing for"));
    EXPECT_THAT(after[r].message(), HasSubstr("RANKTIME_PEER_TIMEOUT_S=0.5"));
    EXPECT_THAT(after[r].message(), HasSubstr("tensor 'after' did not run"));
  }
  EXPECT_FALSE(after[2].ok());
  EXPECT_THAT(after[2].message(), HasSubstr("ranktime has stopped: rank 0 (host host0, pid "));
  EXPECT_TRUE(job.rank(0).peer_lost());
  EXPECT_TRUE(job.rank(2).peer_lost());
  EXPECT_FALSE(job.rank(1).peer_lost());
  EXPECT_FALSE(job.rank(0).hung());
  // Every rank gave up on the job (an MPI job would now be aborted, not finalised): the survivors
  // through rank 0's fatal shutdown, rank 2 by itself.
  for (int r = 0; r < 4; ++r) {
    job.rank(r).shutdown();
    EXPECT_TRUE(job.rank(r).doomed()) << "rank " << r;
  }
}

// A request that never reaches rank 0 (lost, or cut short and dropped by the decoder) is a stall:
// rank 0 names the rank and the tensor, and with RANKTIME_STALL_SHUTDOWN_S every rank fails it.
class LostRequest : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(DroppedOrTruncated, LostRequest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "truncated" : "dropped";
                         });

TEST_P(LostRequest, StallsAndShutsDownNamingTheRankAndTensor) {
  const bool truncate = GetParam();
  std::atomic<bool> hit{false};
  InProcessJob job(
      3,
      [](int) {
        return config_of(
            {{"RANKTIME_STALL_WARNING_S", "0.1"}, {"RANKTIME_STALL_SHUTDOWN_S", "0.3"}});
      },
      [&](MemoryHub& hub) {
        hub.set_faults([&, truncate](int from, int to, const std::vector<uint8_t>& message) {
          MessageFate fate;
          if (from == 1 && !hit && carries_requests(to, message)) {
            hit = true;
            fate.drop = !truncate;
            fate.truncate = truncate;
          }
          return fate;
        });
      });
  std::vector<Status> results(3);
  job.on_every_rank([&](int r, Runtime& rt) {
    std::vector<std::byte> data;
    store(DataType::kFloat32, {1}, &data);
    results[r] = allreduce(rt, &data, DataType::kFloat32, "x");
  });
  EXPECT_TRUE(hit);
  for (int r = 0; r < 3; ++r) {
    EXPECT_FALSE(results[r].ok()) << "rank " << r;
    EXPECT_THAT(results[r].message(),
                HasSubstr("stalled for more than RANKTIME_STALL_SHUTDOWN_S: rank 1 did not "
                          "submit 'x'"))
        << "rank " << r;
  }
  // A stall shutdown dooms the job on every rank, the stalled one included.
  for (int r = 0; r < 3; ++r) {
    job.rank(r).shutdown();
    EXPECT_TRUE(job.rank(r).doomed()) << "rank " << r;
  }
}

TEST(Faults, ACorruptResponseListFailsThatRankAndRankZeroGivesUpOnIt) {
  InProcessJob job(
      3,
      [](int) {
        return config_of({{"RANKTIME_PEER_TIMEOUT_S", "0.5"}});
      },
      [](MemoryHub& hub) {
        hub.set_faults([](int, int to, const std::vector<uint8_t>&) {
          MessageFate fate;
          fate.truncate = to == 1;  // only heartbeats go there: nothing is ever ready for rank 1
          return fate;
        });
      });
  std::vector<Status> results(3);
  job.on_every_rank([&](int r, Runtime& rt) {
    std::vector<std::byte> data;
    store(DataType::kFloat32, {1}, &data);
    results[r] = allreduce(rt, &data, DataType::kFloat32, r == 1 ? "y" : "x");
  });
  EXPECT_THAT(results[1].message(), HasSubstr("corrupt response list from rank 0"));
  for (int r : {0, 2}) {
    EXPECT_FALSE(results[r].ok());
    EXPECT_THAT(results[r].message(), HasSubstr("rank 1 (host host1, pid "));
    EXPECT_THAT(results[r].message(), HasSubstr("tensor 'x' did not run"));
  }
}

TEST(Faults, OneRankShuttingDownFailsWhatTheOthersStillWaitFor) {
  InProcessJob job(4);
  std::vector<std::vector<float>> data(4, std::vector<float>(2, 1.0f));
  std::vector<Handle> pending;
  for (int r : {0, 1, 3}) {
    pending.push_back(
        job.rank(r).submit(OpType::kAllreduce, {data[r].data(), DataType::kFloat32, {2}}, "z"));
  }
  job.rank(2).shutdown();
  for (Handle& h : pending) {
    const Status s = h.wait();
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr("ranktime has shut down: rank 2 called shutdown()"));
    EXPECT_THAT(s.message(), HasSubstr("tensor 'z' did not run"));
  }
  const Status late =
      job.rank(1)
          .submit(OpType::kAllreduce, {data[1].data(), DataType::kFloat32, {2}}, "z2")
          .wait();
  EXPECT_THAT(late.message(), HasSubstr("tensor 'z2' was not submitted"));
  EXPECT_THAT(late.message(), Not(HasSubstr("did not run")));
  // Every rank is still responsive: an ordinary shutdown, MPI would be finalised.
  for (int r = 0; r < 4; ++r) {
    job.rank(r).shutdown();
    EXPECT_FALSE(job.rank(r).doomed()) << "rank " << r;
  }
}

}  // namespace
}  // namespace ranktime::testing
