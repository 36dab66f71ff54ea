// Writes valid encoded messages into a folder: the seed corpus of fuzz_wire (every message field,
// process sets and join included). Rerun it into tests/fuzz/corpus/wire when the format changes.
#include <fstream>
#include <string>

#include "core/wire.h"

int main(int argc, char** argv) {
  using namespace ranktime;
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  auto save = [&](const std::string& name, const std::vector<uint8_t>& b) {
    std::ofstream(dir + "/" + name, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), b.size());
  };
  std::vector<uint8_t> buf;
  WorkerMessage m;
  encode(m, &buf);
  save("worker_empty", buf);
  Request q;
  q.name = "grad.layer1.0.conv1.weight";
  q.shape = {64, 64, 3, 3};
  q.ready_ns = 123456789;
  m.requests.push_back(q);
  q.name = "act";
  q.op = OpType::kAllgather;
  q.dtype = DataType::kBFloat16;
  q.error = "null data pointer";
  m.requests.push_back(q);
  q.name = "grouped_reducescatter.g_2of3";  // a group's tensor: its group and size travel too
  q.op = OpType::kReducescatter;
  q.error.clear();
  q.group = "grouped_reducescatter.g";
  q.group_size = 3;
  m.requests.push_back(q);
  q.name = "a2a";
  q.op = OpType::kAlltoall;
  q.group.clear();
  q.group_size = 0;
  m.requests.push_back(q);
  q = Request();  // a process set's tensor, and the collective changes
  q.name = "grad.w [process set 1: ranks 0,2]";
  q.process_set = 1;
  q.shape = {16};
  m.requests.push_back(q);
  q = Request();
  q.name = "ranktime.process_set";
  q.op = OpType::kAddProcessSet;
  q.argument = "0,2,5";
  m.requests.push_back(q);
  q.op = OpType::kRemoveProcessSet;
  q.argument = "1";
  m.requests.push_back(q);
  q = Request();
  q.name = "ranktime.join";
  q.op = OpType::kJoin;
  m.requests.push_back(q);
  m.records.resize(2);
  m.records[1].kind = timeline::RecordKind::kTick;
  m.clock = {1, 2, 3};
  m.shutdown = true;
  m.shutdown_why = "called shutdown()";
  m.cached_ids = {0x100001, 0x200002, 7};
  m.cached_ready_ns = {1000, 2000, -3};
  m.evictions_seen = 2;
  encode(m, &buf);
  save("worker_full", buf);
  WorkerMessage steady;  // a cached step: ids and ready times only
  steady.cached_ids = {0x100001, 0x100002, 0x100003, 0x100004};
  steady.cached_ready_ns = {10, 20, 30, 40};
  encode(steady, &buf);
  save("worker_cached", buf);
  ResponseList l;
  encode(l, &buf);
  save("response_empty", buf);
  Response s;
  s.names = {"a", "b", "c"};
  s.tensor_ids = {1, 2, 3};
  s.cache_ids = {0x100001, 0, 0x100003};
  s.first_dims = {1, 2, 3, 4};
  s.error = "shape differs";
  l.responses.push_back(s);
  Response zeros;  // an allreduce of a process set while a rank has joined
  zeros.names = {"x", "y"};
  zeros.tensor_ids = {4, 5};
  zeros.process_set = 2;
  zeros.tensor_sizes = {16, 0};
  l.responses.push_back(zeros);
  Response join;
  join.op = OpType::kJoin;
  join.root = 3;
  join.names = {"ranktime.join"};
  join.tensor_ids = {6};
  l.responses.push_back(join);
  Response add;
  add.op = OpType::kAddProcessSet;
  add.root = 1;
  add.argument = "0,2";
  add.names = {"ranktime.process_set"};
  add.tensor_ids = {7};
  l.responses.push_back(add);
  l.shutdown = true;
  l.shutdown_reason = "rank 1 called shutdown()";
  l.cache_evicted = {0x100002};
  l.lane_ranks = {0, 3, 7};
  encode(l, &buf);
  save("response_full", buf);
  return 0;
}
