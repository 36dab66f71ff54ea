// Little-endian, length-prefixed encoding. Every count read from the wire is checked against the
// bytes that remain before anything is allocated.
#include "core/wire.h"

#include <cstring>
#include <type_traits>

namespace ranktime {
namespace {

constexpr uint32_t kWorkerMagic = 0x52544b57;    // "RTKW"
constexpr uint32_t kResponseMagic = 0x52544b52;  // "RTKR"

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* out) : out_(out) { out_->clear(); }
  template <typename T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_->insert(out_->end(), p, p + sizeof(T));
  }
  void str(const std::string& s, size_t max) {
    if (s.size() > max)
      throw WireError("string of " + std::to_string(s.size()) +
                      " bytes exceeds the wire limit of " + std::to_string(max));
    if (max <= 0xffff) {
      pod(static_cast<uint16_t>(s.size()));
    } else {
      pod(static_cast<uint32_t>(s.size()));
    }
    out_->insert(out_->end(), s.begin(), s.end());
  }
  template <typename T>
  void vec(const std::vector<T>& v) {
    pod(static_cast<uint32_t>(v.size()));
    if (!v.empty()) {
      const auto* p = reinterpret_cast<const uint8_t*>(v.data());
      out_->insert(out_->end(), p, p + v.size() * sizeof(T));
    }
  }

 private:
  std::vector<uint8_t>* out_;
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  template <typename T>
  T pod(const char* what) {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  std::string str(size_t max, const char* what) {
    size_t n = max <= 0xffff ? pod<uint16_t>(what) : pod<uint32_t>(what);
    if (n > max)
      throw WireError(std::string(what) + ": length " + std::to_string(n) + " over limit");
    need(n, what);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  template <typename T>
  std::vector<T> vec(const char* what, size_t max_count = SIZE_MAX) {
    std::vector<T> v;
    vec_into(what, &v, max_count);
    return v;
  }
  // The same into *v, reusing its memory.
  template <typename T>
  void vec_into(const char* what, std::vector<T>* v, size_t max_count = SIZE_MAX) {
    auto n = pod<uint32_t>(what);
    if (n > max_count)
      throw WireError(std::string(what) + ": count " + std::to_string(n) + " over limit");
    need(static_cast<size_t>(n) * sizeof(T), what);
    v->resize(n);
    if (n) std::memcpy(v->data(), p_, n * sizeof(T));
    p_ += n * sizeof(T);
  }
  // A count of variable-size items: each takes at least `min_item_bytes`.
  uint32_t count(const char* what, size_t min_item_bytes) {
    auto n = pod<uint32_t>(what);
    if (static_cast<size_t>(n) * min_item_bytes > remaining())
      throw WireError(std::string(what) + ": count " + std::to_string(n) + " exceeds the message");
    return n;
  }
  template <typename E>
  E enumeration(int limit, const char* what) {
    auto v = pod<uint8_t>(what);
    if (v >= limit) throw WireError(std::string(what) + ": invalid value " + std::to_string(v));
    return static_cast<E>(v);
  }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  void finish() const {
    if (p_ != end_) throw WireError(std::to_string(remaining()) + " trailing bytes");
  }

 private:
  void need(size_t n, const char* what) const {
    if (n > remaining()) {
      throw WireError(std::string("truncated message reading ") + what + ": need " +
                      std::to_string(n) + " bytes, " + std::to_string(remaining()) + " left");
    }
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

constexpr size_t kMaxErrorBytes = 1 << 24;

void put_common(Writer& w, OpType op, ReduceOp reduce_op, DataType dtype, int32_t device,
                int32_t root, uint8_t flags) {
  w.pod(static_cast<uint8_t>(op));
  w.pod(static_cast<uint8_t>(reduce_op));
  w.pod(static_cast<uint8_t>(dtype));
  w.pod(device);
  w.pod(root);
  w.pod(flags);
}

template <typename T>
void get_common(Reader& r, T* m) {
  m->op = r.enumeration<OpType>(kNumOpTypes, "op");
  m->reduce_op = r.enumeration<ReduceOp>(kNumReduceOps, "reduce_op");
  m->dtype = r.enumeration<DataType>(kNumDataTypes, "dtype");
  m->device = r.pod<int32_t>("device");
  m->root = r.pod<int32_t>("root");
  m->flags = r.pod<uint8_t>("flags");
}

}  // namespace

void encode(const WorkerMessage& m, std::vector<uint8_t>* out) {
  Writer w(out);
  w.pod(kWorkerMagic);
  w.pod(static_cast<uint8_t>((m.shutdown ? 1 : 0) | (m.final ? 2 : 0) | (m.timeline_ack ? 4 : 0)));
  w.pod(m.clock);
  w.str(m.shutdown_why, kMaxArgumentBytes);
  w.pod(static_cast<uint32_t>(m.requests.size()));
  for (const Request& q : m.requests) {
    w.str(q.name, kMaxNameBytes);
    put_common(w, q.op, q.reduce_op, q.dtype, q.device, q.root, q.flags);
    if (q.shape.size() > kMaxDims) {
      throw WireError("tensor '" + q.name + "' has " + std::to_string(q.shape.size()) +
                      " dimensions; the wire format carries at most " + std::to_string(kMaxDims));
    }
    w.vec(q.shape);
    w.pod(q.ready_ns);
    w.str(q.argument, kMaxArgumentBytes);
    w.str(q.error, kMaxErrorBytes);
    w.str(q.group, kMaxNameBytes);
    w.pod(q.group_size);
    w.pod(q.process_set);
  }
  if (m.cached_ids.size() != m.cached_ready_ns.size()) {
    throw WireError("cached ids and ready times differ in count");
  }
  w.vec(m.cached_ids);
  w.vec(m.cached_ready_ns);
  w.pod(m.evictions_seen);
  w.vec(m.records);
  w.pod(static_cast<uint32_t>(m.region_names.size()));
  for (const std::string& name : m.region_names) w.str(name, kMaxNameBytes);
  w.pod(m.regions_dropped);
}

WorkerMessage decode_worker_message(const uint8_t* data, size_t size) {
  WorkerMessage m;
  decode_worker_message_into(data, size, &m);
  return m;
}

void decode_worker_message_into(const uint8_t* data, size_t size, WorkerMessage* out) {
  Reader r(data, size);
  if (r.pod<uint32_t>("magic") != kWorkerMagic) throw WireError("not a worker message (bad magic)");
  WorkerMessage& m = *out;
  auto flags = r.pod<uint8_t>("flags");
  m.shutdown = flags & 1;
  m.final = flags & 2;
  m.timeline_ack = flags & 4;
  m.clock = r.pod<ClockEcho>("clock");
  m.shutdown_why = r.str(kMaxArgumentBytes, "shutdown_why");
  uint32_t n = r.count("request count", 2 + 9 + 4 + 8 + 8 + 2 + 4 + 4);
  m.requests.resize(n);
  for (Request& q : m.requests) {
    q.name = r.str(kMaxNameBytes, "name");
    get_common(r, &q);
    q.shape = r.vec<int64_t>("shape", kMaxDims);
    q.ready_ns = r.pod<int64_t>("ready_ns");
    q.argument = r.str(kMaxArgumentBytes, "argument");
    q.error = r.str(kMaxErrorBytes, "error");
    q.group = r.str(kMaxNameBytes, "group");
    q.group_size = r.pod<uint32_t>("group_size");
    q.process_set = r.pod<int32_t>("process_set");
  }
  r.vec_into("cached_ids", &m.cached_ids);
  r.vec_into("cached_ready_ns", &m.cached_ready_ns);
  if (m.cached_ids.size() != m.cached_ready_ns.size()) {
    throw WireError("cached ids and ready times differ in count");
  }
  m.evictions_seen = r.pod<uint64_t>("evictions_seen");
  r.vec_into("records", &m.records);
  for (const auto& rec : m.records) {
    if (static_cast<int>(rec.kind) > static_cast<int>(timeline::kLastRecordKind) ||
        rec.phase >= timeline::Phase::kCount) {
      throw WireError("corrupt timeline record");
    }
  }
  m.region_names.resize(r.count("region name count", 2));
  for (std::string& name : m.region_names) name = r.str(kMaxNameBytes, "region name");
  m.regions_dropped = r.pod<uint64_t>("regions_dropped");
  r.finish();
}

void encode(const ResponseList& l, std::vector<uint8_t>* out) {
  Writer w(out);
  w.pod(kResponseMagic);
  w.pod(l.sent_ns);
  w.pod(l.cycle);
  w.pod(static_cast<uint8_t>((l.shutdown ? 1 : 0) | (l.fatal ? 2 : 0) | (l.stall ? 4 : 0)));
  w.str(l.shutdown_reason, kMaxErrorBytes);
  w.pod(static_cast<uint32_t>(l.responses.size()));
  for (const Response& s : l.responses) {
    put_common(w, s.op, s.reduce_op, s.dtype, s.device, s.root, s.flags);
    w.pod(static_cast<uint32_t>(s.names.size()));
    for (const auto& n : s.names) w.str(n, kMaxNameBytes);
    w.vec(s.tensor_ids);
    w.vec(s.cache_ids);
    w.vec(s.first_dims);
    w.str(s.argument, kMaxArgumentBytes);
    w.str(s.error, kMaxErrorBytes);
    w.pod(s.process_set);
    w.vec(s.tensor_sizes);
  }
  w.vec(l.cache_evicted);
  w.vec(l.lane_ranks);
}

ResponseList decode_response_list(const uint8_t* data, size_t size) {
  Reader r(data, size);
  if (r.pod<uint32_t>("magic") != kResponseMagic)
    throw WireError("not a response list (bad magic)");
  ResponseList l;
  l.sent_ns = r.pod<int64_t>("sent_ns");
  l.cycle = r.pod<int64_t>("cycle");
  const auto shutdown_flags = r.pod<uint8_t>("shutdown");
  l.shutdown = shutdown_flags & 1;
  l.fatal = shutdown_flags & 2;
  l.stall = shutdown_flags & 4;
  l.shutdown_reason = r.str(kMaxErrorBytes, "shutdown_reason");
  uint32_t n = r.count("response count", 12 + 4 + 4 + 4 + 4 + 2 + 2 + 4 + 4);
  l.responses.resize(n);
  for (Response& s : l.responses) {
    get_common(r, &s);
    uint32_t names = r.count("name count", 2);
    s.names.resize(names);
    for (auto& name : s.names) name = r.str(kMaxNameBytes, "name");
    s.tensor_ids = r.vec<uint32_t>("tensor_ids");
    if (s.tensor_ids.size() != s.names.size()) throw WireError("tensor ids do not match names");
    s.cache_ids = r.vec<uint32_t>("cache_ids");
    if (!s.cache_ids.empty() && s.cache_ids.size() != s.names.size()) {
      throw WireError("cache ids do not match names");
    }
    s.first_dims = r.vec<int64_t>("first_dims");
    s.argument = r.str(kMaxArgumentBytes, "argument");
    s.error = r.str(kMaxErrorBytes, "error");
    s.process_set = r.pod<int32_t>("process_set");
    s.tensor_sizes = r.vec<int64_t>("tensor_sizes");
    if (!s.tensor_sizes.empty() && s.tensor_sizes.size() != s.names.size()) {
      throw WireError("tensor sizes do not match names");
    }
  }
  l.cache_evicted = r.vec<uint32_t>("cache_evicted");
  l.lane_ranks = r.vec<int32_t>("lane_ranks");
  r.finish();
  return l;
}

const char* op_type_name(OpType op) {
  switch (op) {
    case OpType::kAllreduce:
      return "allreduce";
    case OpType::kAllgather:
      return "allgather";
    case OpType::kBroadcast:
      return "broadcast";
    case OpType::kBarrier:
      return "barrier";
    case OpType::kTimelineStart:
      return "timeline_start";
    case OpType::kTimelineStop:
      return "timeline_stop";
    case OpType::kReducescatter:
      return "reducescatter";
    case OpType::kAlltoall:
      return "alltoall";
    case OpType::kJoin:
      return "join";
    case OpType::kAddProcessSet:
      return "add_process_set";
    case OpType::kRemoveProcessSet:
      return "remove_process_set";
  }
  return "invalid";
}

}  // namespace ranktime
