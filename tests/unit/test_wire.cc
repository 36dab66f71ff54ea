// Tests for wire.h: round trips of both message types, and defensive decoding of truncated or
// corrupted buffers (always WireError, never a crash or another exception).
#include "core/wire.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace ranktime {
namespace {

using timeline::Phase;
using timeline::Record;
using timeline::RecordKind;

auto fields(const Request& q) {
  return std::tie(q.name, q.op, q.reduce_op, q.dtype, q.device, q.root, q.shape, q.ready_ns,
                  q.flags, q.argument, q.error, q.group, q.group_size, q.process_set);
}

auto fields(const Response& s) {
  return std::tie(s.op, s.reduce_op, s.dtype, s.device, s.root, s.names, s.tensor_ids, s.cache_ids,
                  s.first_dims, s.flags, s.argument, s.error, s.process_set, s.tensor_sizes);
}

void expect_same(const WorkerMessage& a, const WorkerMessage& b) {
  ASSERT_EQ(a.requests.size(), b.requests.size());
  for (size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_TRUE(fields(a.requests[i]) == fields(b.requests[i])) << "request " << i;
  }
  ASSERT_EQ(a.records.size(), b.records.size());
  for (size_t i = 0; i < a.records.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.records[i], &b.records[i], sizeof(Record)), 0) << "record " << i;
  }
  EXPECT_EQ(a.clock.t0, b.clock.t0);
  EXPECT_EQ(a.clock.t1, b.clock.t1);
  EXPECT_EQ(a.clock.t2, b.clock.t2);
  EXPECT_EQ(a.shutdown, b.shutdown);
  EXPECT_EQ(a.shutdown_why, b.shutdown_why);
  EXPECT_EQ(a.final, b.final);
  EXPECT_EQ(a.timeline_ack, b.timeline_ack);
  EXPECT_EQ(a.cached_ids, b.cached_ids);
  EXPECT_EQ(a.cached_ready_ns, b.cached_ready_ns);
  EXPECT_EQ(a.evictions_seen, b.evictions_seen);
  EXPECT_EQ(a.region_names, b.region_names);
  EXPECT_EQ(a.regions_dropped, b.regions_dropped);
}

void expect_same(const ResponseList& a, const ResponseList& b) {
  ASSERT_EQ(a.responses.size(), b.responses.size());
  for (size_t i = 0; i < a.responses.size(); ++i) {
    EXPECT_TRUE(fields(a.responses[i]) == fields(b.responses[i])) << "response " << i;
  }
  EXPECT_EQ(a.sent_ns, b.sent_ns);
  EXPECT_EQ(a.cycle, b.cycle);
  EXPECT_EQ(a.shutdown, b.shutdown);
  EXPECT_EQ(a.shutdown_reason, b.shutdown_reason);
  EXPECT_EQ(a.fatal, b.fatal);
  EXPECT_EQ(a.stall, b.stall);
  EXPECT_EQ(a.cache_evicted, b.cache_evicted);
  EXPECT_EQ(a.lane_ranks, b.lane_ranks);
}

std::vector<uint8_t> encoded(const WorkerMessage& m) {
  std::vector<uint8_t> out;
  encode(m, &out);
  return out;
}

std::vector<uint8_t> encoded(const ResponseList& l) {
  std::vector<uint8_t> out;
  encode(l, &out);
  return out;
}

WorkerMessage worker_round_trip(const WorkerMessage& m) {
  auto bytes = encoded(m);
  return decode_worker_message(bytes.data(), bytes.size());
}

ResponseList response_round_trip(const ResponseList& l) {
  auto bytes = encoded(l);
  return decode_response_list(bytes.data(), bytes.size());
}

Request full_request() {
  Request q;
  q.name = "layer1/conv/weight_grad";
  q.op = OpType::kBroadcast;
  q.reduce_op = ReduceOp::kMax;
  q.dtype = DataType::kBFloat16;
  q.device = 3;
  q.root = 2;
  q.shape = {64, 3, 7, 7};
  q.ready_ns = 1'700'000'000'123'456'789;
  q.flags = 0xa5;
  q.argument = "/tmp/trace.json";
  q.error = "null data pointer for a tensor of 12 bytes";
  q.group = "grouped_allreduce.layer1";
  q.group_size = 0xfffffffe;
  q.process_set = 0x7fffffff;
  return q;
}

std::vector<Record> sample_records() {
  std::vector<Record> records(5);
  records[0].ts_ns = 100;
  records[0].tensor = 7;
  records[0].rank = 3;
  records[0].kind = RecordKind::kOpBegin;
  records[0].phase = Phase::kAllreduce;
  records[0].args.op.dtype = static_cast<uint8_t>(DataType::kFloat16);
  records[0].args.op.ndim = 2;
  records[0].args.op.fused_tensors = 5;
  records[0].args.op.bytes = 4096;
  records[0].args.op.dims[0] = 32;
  records[0].args.op.dims[1] = 64;
  records[1].ts_ns = 150;
  records[1].end_ns = 175;
  records[1].kind = RecordKind::kSpan;
  records[1].phase = Phase::kMemcpyInFusionBuffer;
  records[2].ts_ns = -5;
  records[2].kind = RecordKind::kTick;
  records[2].phase = Phase::kNegotiateBroadcast;
  records[2].args.tick.rank = 11;
  records[2].args.tick.lag_ns = 12500;
  records[3].ts_ns = 999;
  records[3].kind = RecordKind::kCounter;
  records[3].phase = Phase::kMemcpyOutHostBuffer;  // the last phase
  records[3].args.counter.name_string = 4;
  records[3].args.counter.series = 1;
  records[3].args.counter.value = -0.75;
  records[4].kind = timeline::kLastRecordKind;
  records[4].tensor = 9;
  records[4].args.op.bytes = 1;
  return records;
}

// A message with something in every field, small enough to truncate at every length.
WorkerMessage rich_worker_message() {
  WorkerMessage m;
  m.requests.push_back(full_request());
  Request scalar;  // defaults, empty name, empty shape
  m.requests.push_back(scalar);
  Request unicode;
  unicode.name = "градиент/重み/\xf0\x9f\x99\x82";
  unicode.op = OpType::kAllgather;
  unicode.dtype = DataType::kInt64;
  unicode.shape = {0, 5};
  unicode.ready_ns = -1;
  unicode.group = "группа";
  unicode.group_size = 1;
  m.requests.push_back(unicode);
  Request binary;
  binary.name = std::string("nul\0inside", 10);
  binary.op = OpType::kTimelineStop;
  binary.reduce_op = ReduceOp::kProduct;
  binary.dtype = DataType::kFloat64;
  binary.shape = {-1, INT64_MAX, INT64_MIN};
  m.requests.push_back(binary);
  Request join;
  join.name = "ranktime.join";
  join.op = OpType::kJoin;
  join.process_set = -1;
  m.requests.push_back(join);
  Request add;
  add.name = "ranktime.process_set";
  add.op = OpType::kAddProcessSet;
  add.argument = "0,2,5";
  m.requests.push_back(add);
  m.records = sample_records();
  m.clock = {1'000, 2'500, 2'600};
  m.shutdown = true;
  m.shutdown_why = "exited without calling ranktime::shutdown()";
  m.timeline_ack = true;
  m.cached_ids = {1, 0xffffffff};
  m.cached_ready_ns = {-7, INT64_MAX};
  m.evictions_seen = 0x0102030405060708;
  m.region_names = {"data", "</script><script>", std::string("nul\0inside", 10)};
  m.regions_dropped = 0x0a0b0c0d0e0f1011;
  return m;
}

ResponseList rich_response_list() {
  ResponseList l;
  l.sent_ns = 1'700'000'000'000'000'001;
  l.cycle = 42;
  l.shutdown = true;
  l.shutdown_reason = "rank 3 called shutdown()";
  l.fatal = true;
  l.stall = true;
  Response fused;
  fused.op = OpType::kAllreduce;
  fused.reduce_op = ReduceOp::kAverage;
  fused.dtype = DataType::kFloat16;
  fused.names = {"a", "b", "ccc", ""};
  fused.tensor_ids = {1, 2, 3, 0xffffffff};
  fused.cache_ids = {0, 0x100001, 7, 0xffffffff};
  fused.process_set = 3;
  fused.tensor_sizes = {0, 1, INT64_MAX, -1};  // a joined rank's zeros
  l.responses.push_back(fused);
  l.cache_evicted = {0x200001, 3};
  l.lane_ranks = {0, 5, 1023};
  Response gather;
  gather.op = OpType::kAllgather;
  gather.dtype = DataType::kUInt8;
  gather.device = 0;
  gather.names = {"gathered"};
  gather.tensor_ids = {9};
  gather.first_dims = {1, 0, 7};
  l.responses.push_back(gather);
  Response failed;
  failed.op = OpType::kBroadcast;
  failed.root = 5;
  failed.names = {"w"};
  failed.tensor_ids = {10};
  failed.error = "tensor 'w': root rank differs between ranks: 0 on rank 0; 5 on rank 1";
  l.responses.push_back(failed);
  Response start;
  start.op = OpType::kTimelineStart;
  start.flags = 1;
  start.argument = "/tmp/trace.json";
  start.names = {"ranktime.timeline"};
  start.tensor_ids = {11};
  l.responses.push_back(start);
  Response joined;
  joined.op = OpType::kJoin;
  joined.root = 3;  // the rank that joined last
  joined.names = {"ranktime.join"};
  joined.tensor_ids = {12};
  l.responses.push_back(joined);
  Response removed;
  removed.op = OpType::kRemoveProcessSet;
  removed.argument = "4";
  removed.names = {"ranktime.process_set"};
  removed.tensor_ids = {13};
  l.responses.push_back(removed);
  return l;
}

TEST(Wire, EmptyWorkerMessageRoundTrips) { expect_same(worker_round_trip({}), WorkerMessage{}); }

// Rank 0 decodes every message into the same WorkerMessage: nothing of a larger earlier
// message may survive into a smaller later one.
TEST(Wire, DecodingIntoAUsedMessageEqualsAFreshDecode) {
  const WorkerMessage rich = rich_worker_message();
  WorkerMessage small;
  small.requests.resize(1);
  small.requests[0].name = "x";
  small.clock = {1, 2, 3};
  const WorkerMessage empty;
  WorkerMessage reused;
  for (const WorkerMessage* m :
       std::initializer_list<const WorkerMessage*>{&rich, &small, &rich, &empty}) {
    const WorkerMessage& expected = *m;
    const auto bytes = encoded(expected);
    decode_worker_message_into(bytes.data(), bytes.size(), &reused);
    expect_same(reused, expected);
  }
}

TEST(Wire, RichWorkerMessageRoundTrips) {
  WorkerMessage m = rich_worker_message();
  expect_same(worker_round_trip(m), m);
}

TEST(Wire, EveryFlagCombinationRoundTrips) {
  for (int bits = 0; bits < 8; ++bits) {
    WorkerMessage m;
    m.shutdown = bits & 1;
    m.final = bits & 2;
    m.timeline_ack = bits & 4;
    expect_same(worker_round_trip(m), m);
  }
}

TEST(Wire, EveryEnumValueRoundTrips) {
  WorkerMessage m;
  for (int op = 0; op < kNumOpTypes; ++op) {
    for (int reduce = 0; reduce < kNumReduceOps; ++reduce) {
      for (int dtype = 0; dtype < kNumDataTypes; ++dtype) {
        Request q;
        q.name = std::to_string(op) + "/" + std::to_string(reduce) + "/" + std::to_string(dtype);
        q.op = static_cast<OpType>(op);
        q.reduce_op = static_cast<ReduceOp>(reduce);
        q.dtype = static_cast<DataType>(dtype);
        m.requests.push_back(q);
      }
    }
  }
  expect_same(worker_round_trip(m), m);
}

TEST(Wire, NameOfExactlyTheLimitRoundTrips) {
  WorkerMessage m;
  m.requests.push_back(full_request());
  m.requests[0].name = std::string(kMaxNameBytes, 'n');
  expect_same(worker_round_trip(m), m);

  ResponseList l;
  l.responses.resize(1);
  l.responses[0].names = {std::string(kMaxNameBytes, 'r')};
  l.responses[0].tensor_ids = {1};
  expect_same(response_round_trip(l), l);
}

TEST(Wire, NameOverTheLimitFailsToEncode) {
  std::vector<uint8_t> out;
  WorkerMessage m;
  m.requests.push_back(full_request());
  m.requests[0].name = std::string(kMaxNameBytes + 1, 'n');
  EXPECT_THROW(encode(m, &out), WireError);

  ResponseList l;
  l.responses.resize(1);
  l.responses[0].names = {"ok", std::string(kMaxNameBytes + 1, 'r')};
  l.responses[0].tensor_ids = {1, 2};
  EXPECT_THROW(encode(l, &out), WireError);
}

TEST(Wire, ArgumentOverTheLimitFailsToEncode) {
  std::vector<uint8_t> out;
  WorkerMessage m;
  m.requests.resize(1);
  m.requests[0].argument = std::string((1 << 20) + 1, 'p');
  EXPECT_THROW(encode(m, &out), WireError);
  m.requests[0].argument.pop_back();
  expect_same(worker_round_trip(m), m);
}

TEST(Wire, MaxDimsRoundTrips) {
  WorkerMessage m;
  m.requests.resize(1);
  m.requests[0].shape.assign(kMaxDims, 2);
  expect_same(worker_round_trip(m), m);
}

// Whatever encode() accepts, decode must accept: otherwise rank 0 drops the worker's whole message
// (every request in it) and the other ranks wait forever. The runtime forwards the shape of a
// tensor it already rejected for having too many dimensions, so this does happen.
TEST(Wire, ShapeOverMaxDimsIsRejectedWhenEncoding) {
  WorkerMessage m;
  m.requests.resize(1);
  m.requests[0].name = "too_many_dims";
  m.requests[0].shape.assign(kMaxDims + 1, 1);
  m.requests[0].error = "shape has 65 dimensions (most: 64)";
  std::vector<uint8_t> out;
  try {
    encode(m, &out);
  } catch (const WireError&) {
    return;  // rejected symmetrically: fine
  }
  EXPECT_NO_THROW(decode_worker_message(out.data(), out.size()))
      << "encode() accepted a request with " << kMaxDims + 1
      << " dimensions that decode_worker_message() rejects";
}

TEST(Wire, EncodeReplacesWhatTheOutputHeld) {
  std::vector<uint8_t> out(100, 0xee);
  encode(rich_worker_message(), &out);
  EXPECT_EQ(out, encoded(rich_worker_message()));
  out.assign(7, 0xee);
  encode(rich_response_list(), &out);
  EXPECT_EQ(out, encoded(rich_response_list()));
}

TEST(Wire, EmptyResponseListRoundTrips) { expect_same(response_round_trip({}), ResponseList{}); }

TEST(Wire, RichResponseListRoundTrips) {
  ResponseList l = rich_response_list();
  expect_same(response_round_trip(l), l);
}

// Decodes a copy of exactly `n` bytes, so that a read past the end is a heap overflow that the
// sanitizer builds catch rather than a read of the rest of the original buffer.
template <typename Decode>
void decode_copy(const std::vector<uint8_t>& bytes, size_t n, Decode decode) {
  std::vector<uint8_t> copy(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
  decode(copy.data(), copy.size());
}

TEST(Wire, EveryTruncationOfAWorkerMessageThrows) {
  const auto bytes = encoded(rich_worker_message());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(decode_copy(bytes, n, decode_worker_message), WireError) << n << " bytes";
  }
  EXPECT_NO_THROW(decode_copy(bytes, bytes.size(), decode_worker_message));
}

TEST(Wire, EveryTruncationOfAResponseListThrows) {
  const auto bytes = encoded(rich_response_list());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(decode_copy(bytes, n, decode_response_list), WireError) << n << " bytes";
  }
  EXPECT_NO_THROW(decode_copy(bytes, bytes.size(), decode_response_list));
}

TEST(Wire, NullEmptyBufferThrows) {
  EXPECT_THROW(decode_worker_message(nullptr, 0), WireError);
  EXPECT_THROW(decode_response_list(nullptr, 0), WireError);
}

TEST(Wire, BadMagicThrows) {
  auto w = encoded(rich_worker_message());
  auto r = encoded(rich_response_list());
  EXPECT_THROW(decode_response_list(w.data(), w.size()), WireError);
  EXPECT_THROW(decode_worker_message(r.data(), r.size()), WireError);
  w[0] ^= 0x01;
  r[3] ^= 0x80;
  EXPECT_THROW(decode_worker_message(w.data(), w.size()), WireError);
  EXPECT_THROW(decode_response_list(r.data(), r.size()), WireError);
}

TEST(Wire, TrailingBytesThrow) {
  auto w = encoded(rich_worker_message());
  w.push_back(0);
  EXPECT_THROW(decode_worker_message(w.data(), w.size()), WireError);
  auto r = encoded(rich_response_list());
  r.push_back(0);
  EXPECT_THROW(decode_response_list(r.data(), r.size()), WireError);
}

void put_u32(std::vector<uint8_t>* bytes, size_t at, uint32_t v) {
  ASSERT_LE(at + 4, bytes->size());
  std::memcpy(bytes->data() + at, &v, 4);
}

uint32_t get_u32(const std::vector<uint8_t>& bytes, size_t at) {
  uint32_t v = 0;
  std::memcpy(&v, bytes.data() + at, 4);
  return v;
}

// A worker message holding one request named "x" with shape [4] and no records. Offsets count
// from the end, which is laid out as: ... request count 4 | name len 2, "x" 1 | op, reduce_op,
// dtype | device 4, root 4, flags 1 | shape count 4, dim 8 | ready_ns 8 | argument len 4 |
// error len 4 | group len 2 | group size 4 | process_set 4 | cached id count 4 | cached ready
// count 4 | evictions_seen 8 | record count 4 | region name count 4 | regions_dropped 8.
std::vector<uint8_t> one_request_message() {
  WorkerMessage m;
  Request q;
  q.name = "x";
  q.op = OpType::kBroadcast;
  q.reduce_op = ReduceOp::kMin;
  q.dtype = DataType::kInt32;
  q.shape = {4};
  m.requests.push_back(q);
  return encoded(m);
}

// After the records: region name count 4 | regions_dropped 8.
constexpr size_t kRegionNameCountFromEnd = 12;
constexpr size_t kRecordCountFromEnd = 16;
constexpr size_t kCachedReadyCountFromEnd = 28;
constexpr size_t kCachedIdsCountFromEnd = 32;
constexpr size_t kProcessSetFromEnd = 36;
constexpr size_t kGroupSizeFromEnd = 40;
constexpr size_t kGroupLenFromEnd = 42;
constexpr size_t kErrorLenFromEnd = 46;
constexpr size_t kArgumentLenFromEnd = 50;
constexpr size_t kShapeCountFromEnd = 70;
constexpr size_t kOpFromEnd = 82;
constexpr size_t kRequestCountFromEnd = 89;

TEST(Wire, WorkerLayoutIsWhatTheCorruptionTestsAssume) {
  auto bytes = one_request_message();
  const size_t end = bytes.size();
  EXPECT_EQ(get_u32(bytes, end - kRequestCountFromEnd), 1u);
  EXPECT_EQ(bytes[end - kOpFromEnd], static_cast<uint8_t>(OpType::kBroadcast));
  EXPECT_EQ(bytes[end - kOpFromEnd + 1], static_cast<uint8_t>(ReduceOp::kMin));
  EXPECT_EQ(bytes[end - kOpFromEnd + 2], static_cast<uint8_t>(DataType::kInt32));
  EXPECT_EQ(get_u32(bytes, end - kShapeCountFromEnd), 1u);
  EXPECT_EQ(get_u32(bytes, end - kArgumentLenFromEnd), 0u);
  EXPECT_EQ(get_u32(bytes, end - kErrorLenFromEnd), 0u);
  EXPECT_EQ(bytes[end - kGroupLenFromEnd], 0u);
  EXPECT_EQ(bytes[end - kGroupLenFromEnd + 1], 0u);
  EXPECT_EQ(get_u32(bytes, end - kGroupSizeFromEnd), 0u);
  EXPECT_EQ(get_u32(bytes, end - kProcessSetFromEnd), 0u);
  EXPECT_EQ(get_u32(bytes, end - kCachedIdsCountFromEnd), 0u);
  EXPECT_EQ(get_u32(bytes, end - kCachedReadyCountFromEnd), 0u);
  EXPECT_EQ(get_u32(bytes, end - kRecordCountFromEnd), 0u);
}

TEST(Wire, WorkerEnumsOutOfRangeThrow) {
  const std::pair<size_t, uint8_t> corruptions[] = {
      {kOpFromEnd, kNumOpTypes},       {kOpFromEnd, 0xff},
      {kOpFromEnd - 1, kNumReduceOps}, {kOpFromEnd - 1, 0x80},
      {kOpFromEnd - 2, kNumDataTypes}, {kOpFromEnd - 2, 0xff}};
  for (auto [from_end, value] : corruptions) {
    auto bytes = one_request_message();
    const size_t at = bytes.size() - from_end;
    bytes[at] = value;
    EXPECT_THROW(decode_worker_message(bytes.data(), bytes.size()), WireError)
        << "byte " << at << " = " << int{value};
  }
}

TEST(Wire, WorkerHugeCountsThrow) {
  const std::pair<size_t, uint32_t> corruptions[] = {{kRequestCountFromEnd, 0xffffffff},
                                                     {kRequestCountFromEnd, 2},
                                                     {kShapeCountFromEnd, 0xffffffff},
                                                     {kShapeCountFromEnd, kMaxDims + 1},
                                                     {kShapeCountFromEnd, 2},
                                                     {kArgumentLenFromEnd, 0xffffffff},
                                                     {kArgumentLenFromEnd, 1},
                                                     {kErrorLenFromEnd, 0xffffffff},
                                                     {kErrorLenFromEnd, (1 << 24) + 1},
                                                     {kGroupLenFromEnd, 1},
                                                     {kGroupLenFromEnd, 0xffff},
                                                     {kCachedIdsCountFromEnd, 0xffffffff},
                                                     {kCachedIdsCountFromEnd, 1},
                                                     {kCachedReadyCountFromEnd, 0xffffffff},
                                                     {kCachedReadyCountFromEnd, 1},
                                                     {kRecordCountFromEnd, 0xffffffff},
                                                     {kRecordCountFromEnd, 1},
                                                     {kRegionNameCountFromEnd, 0xffffffff},
                                                     {kRegionNameCountFromEnd, 1}};
  for (auto [from_end, value] : corruptions) {
    auto bytes = one_request_message();
    const size_t at = bytes.size() - from_end;
    put_u32(&bytes, at, value);
    EXPECT_THROW(decode_worker_message(bytes.data(), bytes.size()), WireError)
        << "u32 at " << at << " = " << value;
  }
}

TEST(Wire, CorruptTimelineRecordThrows) {
  for (int which = 0; which < 2; ++which) {
    WorkerMessage m;
    m.records = sample_records();
    if (which == 0) {
      m.records[2].kind = static_cast<RecordKind>(static_cast<int>(timeline::kLastRecordKind) + 1);
    } else {
      m.records[2].phase = Phase::kCount;
    }
    auto bytes = encoded(m);
    EXPECT_THROW(decode_worker_message(bytes.data(), bytes.size()), WireError) << which;
  }
}

std::vector<uint8_t> one_response_list(const Response& s) {
  ResponseList l;
  l.responses.push_back(s);
  return encoded(l);
}

Response two_name_response() {
  Response s;
  s.op = OpType::kAllgather;
  s.reduce_op = ReduceOp::kMax;
  s.dtype = DataType::kFloat64;
  s.names = {"p", "q"};
  s.tensor_ids = {1, 2};
  s.first_dims = {3};
  return s;
}

// A response list holding two_name_response(). Offsets count from the end, which is laid out as:
// ... response count 4 | op, reduce_op, dtype | device 4, root 4, flags 1 | name count 4 |
// "p" 2+1, "q" 2+1 | tensor_ids count 4, ids 8 | cache_ids count 4 | first_dims count 4, dim 8 |
// argument len 4 | error len 4 | process_set 4 | tensor_sizes count 4 | evicted count 4 |
// lane ranks count 4.
constexpr size_t kLaneRanksCountFromEnd = 4;
constexpr size_t kEvictedCountFromEnd = 8;
constexpr size_t kTensorSizesCountFromEnd = 12;
constexpr size_t kResponseProcessSetFromEnd = 16;
constexpr size_t kResponseErrorLenFromEnd = 20;
constexpr size_t kResponseArgumentLenFromEnd = 24;
constexpr size_t kFirstDimsCountFromEnd = 36;
constexpr size_t kCacheIdsCountFromEnd = 40;
constexpr size_t kTensorIdsCountFromEnd = 52;
constexpr size_t kNameCountFromEnd = 62;
constexpr size_t kResponseOpFromEnd = 74;
constexpr size_t kResponseCountFromEnd = 78;

TEST(Wire, ResponseLayoutIsWhatTheCorruptionTestsAssume) {
  auto bytes = one_response_list(two_name_response());
  const size_t end = bytes.size();
  EXPECT_EQ(get_u32(bytes, end - kResponseCountFromEnd), 1u);
  EXPECT_EQ(bytes[end - kResponseOpFromEnd], static_cast<uint8_t>(OpType::kAllgather));
  EXPECT_EQ(bytes[end - kResponseOpFromEnd + 1], static_cast<uint8_t>(ReduceOp::kMax));
  EXPECT_EQ(bytes[end - kResponseOpFromEnd + 2], static_cast<uint8_t>(DataType::kFloat64));
  EXPECT_EQ(get_u32(bytes, end - kNameCountFromEnd), 2u);
  EXPECT_EQ(get_u32(bytes, end - kTensorIdsCountFromEnd), 2u);
  EXPECT_EQ(get_u32(bytes, end - kFirstDimsCountFromEnd), 1u);
  EXPECT_EQ(get_u32(bytes, end - kResponseArgumentLenFromEnd), 0u);
  EXPECT_EQ(get_u32(bytes, end - kResponseErrorLenFromEnd), 0u);
  EXPECT_EQ(get_u32(bytes, end - kCacheIdsCountFromEnd), 0u);
  EXPECT_EQ(get_u32(bytes, end - kResponseProcessSetFromEnd), 0u);
  EXPECT_EQ(get_u32(bytes, end - kTensorSizesCountFromEnd), 0u);
  EXPECT_EQ(get_u32(bytes, end - kEvictedCountFromEnd), 0u);
  EXPECT_EQ(get_u32(bytes, end - kLaneRanksCountFromEnd), 0u);
}

TEST(Wire, ResponseEnumsOutOfRangeThrow) {
  const std::pair<size_t, uint8_t> corruptions[] = {{kResponseOpFromEnd, kNumOpTypes},
                                                    {kResponseOpFromEnd - 1, kNumReduceOps},
                                                    {kResponseOpFromEnd - 2, kNumDataTypes}};
  for (auto [from_end, value] : corruptions) {
    auto bytes = one_response_list(two_name_response());
    const size_t at = bytes.size() - from_end;
    bytes[at] = value;
    EXPECT_THROW(decode_response_list(bytes.data(), bytes.size()), WireError)
        << "byte " << at << " = " << int{value};
  }
}

TEST(Wire, ResponseHugeCountsThrow) {
  const std::pair<size_t, uint32_t> corruptions[] = {{kResponseCountFromEnd, 0xffffffff},
                                                     {kResponseCountFromEnd, 2},
                                                     {kNameCountFromEnd, 0xffffffff},
                                                     {kNameCountFromEnd, 1},
                                                     {kTensorIdsCountFromEnd, 0xffffffff},
                                                     {kFirstDimsCountFromEnd, 0xffffffff},
                                                     {kFirstDimsCountFromEnd, 2},
                                                     {kResponseArgumentLenFromEnd, (1 << 20) + 1},
                                                     {kResponseErrorLenFromEnd, 0xffffffff},
                                                     {kCacheIdsCountFromEnd, 1},
                                                     {kCacheIdsCountFromEnd, 0xffffffff},
                                                     {kTensorSizesCountFromEnd, 1},
                                                     {kTensorSizesCountFromEnd, 0xffffffff},
                                                     {kEvictedCountFromEnd, 0xffffffff},
                                                     {kEvictedCountFromEnd, 1},
                                                     {kLaneRanksCountFromEnd, 0xffffffff},
                                                     {kLaneRanksCountFromEnd, 1}};
  for (auto [from_end, value] : corruptions) {
    auto bytes = one_response_list(two_name_response());
    const size_t at = bytes.size() - from_end;
    put_u32(&bytes, at, value);
    EXPECT_THROW(decode_response_list(bytes.data(), bytes.size()), WireError)
        << "u32 at " << at << " = " << value;
  }
}

TEST(Wire, CachedIdsAndReadyTimesOfDifferentCountsThrow) {
  WorkerMessage m;
  m.cached_ids = {1, 2};
  m.cached_ready_ns = {5};
  std::vector<uint8_t> bytes;
  EXPECT_THROW(encode(m, &bytes), WireError);
  m.cached_ready_ns = {5, 6};
  bytes = encoded(m);
  // The ready-time count sits before the ready times (16), evictions_seen 8, the record count 4
  // and the region fields 12 (name count 4, regions_dropped 8).
  put_u32(&bytes, bytes.size() - 12 - 12 - 4 - 16, 1);
  EXPECT_THROW(decode_worker_message(bytes.data(), bytes.size()), WireError);
}

TEST(Wire, CacheIdsNotMatchingNamesThrow) {
  Response s = two_name_response();
  s.cache_ids = {1};
  auto bytes = one_response_list(s);
  EXPECT_THROW(decode_response_list(bytes.data(), bytes.size()), WireError);
}

TEST(Wire, TensorSizesNotMatchingNamesThrow) {
  Response s = two_name_response();
  s.tensor_sizes = {4, 5, 6};
  auto bytes = one_response_list(s);
  EXPECT_THROW(decode_response_list(bytes.data(), bytes.size()), WireError);
  s.tensor_sizes = {4, 5};
  bytes = one_response_list(s);
  EXPECT_EQ(decode_response_list(bytes.data(), bytes.size()).responses.at(0).tensor_sizes,
            (std::vector<int64_t>{4, 5}));
}

TEST(Wire, TensorIdsNotMatchingNamesThrow) {
  Response s = two_name_response();
  s.tensor_ids = {1};
  auto bytes = one_response_list(s);
  EXPECT_THROW(decode_response_list(bytes.data(), bytes.size()), WireError);
  s.tensor_ids = {1, 2, 3};
  bytes = one_response_list(s);
  EXPECT_THROW(decode_response_list(bytes.data(), bytes.size()), WireError);
}

// Any single-byte corruption of a valid message decodes or throws WireError: never another
// exception (bad_alloc, length_error) and never a read out of bounds.
template <typename Decode>
void expect_only_wire_errors(std::vector<uint8_t> bytes, Decode decode) {
  for (size_t at = 0; at < bytes.size(); ++at) {
    const uint8_t original = bytes[at];
    for (uint8_t value : {uint8_t{0x00}, uint8_t{0x01}, uint8_t{0x7f}, uint8_t{0x80}, uint8_t{0xff},
                          static_cast<uint8_t>(original ^ 0x10)}) {
      bytes[at] = value;
      try {
        decode_copy(bytes, bytes.size(), decode);
      } catch (const WireError&) {
      }
    }
    bytes[at] = original;
  }
}

TEST(Wire, SingleByteCorruptionsOnlyEverThrowWireError) {
  expect_only_wire_errors(encoded(rich_worker_message()), decode_worker_message);
  expect_only_wire_errors(encoded(rich_response_list()), decode_response_list);
}

TEST(Wire, RandomBytesOnlyEverThrowWireError) {
  std::mt19937 rng(12345);
  auto valid = encoded(rich_worker_message());
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> bytes(valid.begin(),
                               valid.begin() + static_cast<ptrdiff_t>(rng() % (valid.size() + 1)));
    const size_t flips = 1 + rng() % 8;
    for (size_t f = 0; f < flips && !bytes.empty(); ++f) {
      bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    }
    try {
      decode_worker_message(bytes.data(), bytes.size());
    } catch (const WireError&) {
    }
    try {
      decode_response_list(bytes.data(), bytes.size());
    } catch (const WireError&) {
    }
  }
}

}  // namespace
}  // namespace ranktime
