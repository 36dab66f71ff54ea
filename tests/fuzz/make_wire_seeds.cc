// Writes valid encoded messages into a folder: the seed corpus of fuzz_wire.
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
  l.shutdown = true;
  l.shutdown_reason = "rank 1 called shutdown()";
  l.cache_evicted = {0x100002};
  l.lane_ranks = {0, 3, 7};
  encode(l, &buf);
  save("response_full", buf);
  return 0;
}
